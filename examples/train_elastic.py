#!/usr/bin/env python3
"""Elastic training under torchrun: a worker that dies mid-epoch costs only the steps since the last checkpoint.

    torchrun --standalone --nproc_per_node=4 --max_restarts=1 --redirects 2 --tee 2 \\
        examples/train_elastic.py --data DIR --ckpt /tmp/ckpt.pt --epochs 3

(Debian's torch 1.13 torchrun needs `--redirects 2 --tee 2` under Python 3.11,
docs/python.md.) DIR is a folder of .npy samples, e.g. `lade gen npy DIR --count
512 --shape 16`. A small MLP trains on CPU with DistributedDataParallel over a
gloo process group, fed by lade.Loader (any --plan; the routed ones move cached
samples between the ranks over UCX). Every --every steps rank 0 writes one
checkpoint: the model, the optimiser, the step, and every rank's
loader.state_dict() (gathered), written to a temporary file and renamed, so a
kill never leaves half a checkpoint. When a worker dies, torchrun's agent stops
the group and (--max_restarts) starts it again; every rank then loads the
checkpoint, and the loader continues at the batch after the checkpoint: the
steps between the checkpoint and the failure are trained again, no sample of
an epoch is lost or seen twice.

--log DIR writes, per rank and restart, one JSON line per batch (epoch, step,
the global step, the sample indices) and one per resume; tests/python/
test_elastic.py checks them. LADE_EXAMPLE_KILL=RANK:STEP with
LADE_EXAMPLE_KILL_MARKER=FILE makes that rank SIGKILL itself once, after
global step STEP (a fault injection for that test; the marker file says it
happened, so the restarted group runs through).
"""
import argparse
import json
import os
import signal

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import lade


def checkpoint(path, model, opt, loader, step):
    """Every rank's loader position, gathered; rank 0 writes them with the
    model (one file, renamed into place)."""
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, loader.state_dict())
    if dist.get_rank() == 0:
        tmp = path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "loaders": states}, tmp)
        os.replace(tmp, path)


def maybe_die(rank, step):
    spec, marker = os.environ.get("LADE_EXAMPLE_KILL"), os.environ.get("LADE_EXAMPLE_KILL_MARKER")
    if not spec or not marker:
        return
    r, s = (int(v) for v in spec.split(":"))
    if r == rank and s == step and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--ckpt", required=True, help="the checkpoint file (resumed from when it exists)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--every", type=int, default=5, help="checkpoint every this many steps")
    ap.add_argument("--plan", default="regular")
    ap.add_argument("--cache-mem-bytes", type=int, default=0)
    ap.add_argument("--log", help="a folder for the per-rank logs of delivered samples")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    log = open(os.path.join(args.log, "rank%d.restart%d.jsonl" % (rank, restart)), "a") if args.log else None

    loader = lade.Loader(args.data, batch_size=args.batch_size, epochs=args.epochs, seed=args.seed, threads=2,
                         drop_last=True, plan=args.plan, cache_mem_bytes=args.cache_mem_bytes, output="torch",
                         meta=True)
    features, classes = int(np.load(loader.samples[0][0]).size), len(loader.classes)
    model = nn.Sequential(nn.Flatten(), nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    if os.path.exists(args.ckpt):
        ck = torch.load(args.ckpt)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["loaders"][rank])
        step = ck["step"]
        if log:
            log.write(json.dumps({"resume": step, "position": list(loader.tell())}) + "\n")
            log.flush()
        if rank == 0:
            print("resumed at step %d, epoch %d step %d" % ((step,) + tuple(loader.tell())), flush=True)
    ddp = nn.parallel.DistributedDataParallel(model)

    with loader:
        while loader.tell()[0] < args.epochs:
            for x, y, b in loader:
                if log:
                    log.write(json.dumps({"epoch": b.epoch, "step": b.step, "g": step,
                                          "idx": [int(i) for i in b.indices]}) + "\n")
                    log.flush()
                loss = F.cross_entropy(ddp(x.float()), y.long())
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                maybe_die(rank, step)
                if step % args.every == 0:
                    checkpoint(args.ckpt, model, opt, loader, step)
            if rank == 0:
                print("epoch %d done at step %d" % (loader.tell()[0] - 1, step), flush=True)
    if rank == 0:
        print("finished: %d steps" % step, flush=True)
        torch.save(model.state_dict(), args.ckpt + ".final")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
