"""Warm restarts (docs/plan.md): storage reads in the first epoch after a restart at epoch 2, with the
ranks' disk caches as they survived the first run and with them emptied.

    python3 bench/warm_restart.py DATASET CACHE_ROOT [PLAN ...]
    mpirun -np 4 python3 bench/warm_restart.py DATASET CACHE_ROOT locality   # one cache_dir per rank
    torchrun --standalone --nproc_per_node=4 --redirects 2 --tee 2 bench/warm_restart.py DATASET CACHE_ROOT locality
                                               # over UCX: the ranks meet in CACHE_ROOT/rdv

Each rank prints its counts; under mpirun rank 0 also prints the sums (read from the other ranks'
result files under CACHE_ROOT). The aggregate cache holds the dataset (cache_disk_bytes per rank =
its share in 4 KiB blocks, plus a margin), batch 32, 4 epochs, drop_last."""
import json
import os
import shutil
import sys
import time

import lade

data, root = sys.argv[1], sys.argv[2]
plans = sys.argv[3:] or ["locality", "distcache", "solar"]
rank, world = lade.detect_rank()
mine = os.path.join(root, "rank%d" % rank)
n = len([f for _, _, fs in os.walk(data) for f in fs])
size = max(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
blocks = (56 + size + 4095) // 4096


def barrier(tag):
    # the loaders' open is the only collective; a file per rank is enough for the bench's own sync
    open(os.path.join(root, "%s.%d" % (tag, rank)), "w").close()
    while not all(os.path.exists(os.path.join(root, "%s.%d" % (tag, r))) for r in range(world)):
        time.sleep(0.05)


os.makedirs(root, exist_ok=True)
for plan in plans:
    res = {}
    for mode in ("warm", "cold"):
        shutil.rmtree(mine, ignore_errors=True)
        kw = dict(batch_size=32, epochs=4, seed=3, threads=2, plan=plan, output="numpy", drop_last=True,
                  peer_timeout_ms=10000, cache_dir=mine, cache_disk_bytes=((n + world - 1) // world + 64) * blocks * 4096)
        if world > 1:  # one cache per rank, as with one rank per machine (one machine runs them all here)
            kw.update(ranks_per_node=1)
        if "TORCHELASTIC_RUN_ID" in os.environ and world > 1:  # torchrun: UCX, the addresses met in a folder
            kw.update(rendezvous_dir=os.path.join(root, "rdv"))
        with lade.Loader(data, **kw) as L:
            for e in range(2):
                for _ in L:
                    pass
            state = L.state_dict()
            barrier("%s-%s-stop" % (plan, mode))  # no rank closes while a peer still needs its sends
        if mode == "cold":
            shutil.rmtree(mine)
        barrier("%s-%s" % (plan, mode))
        t0 = time.time()
        with lade.Loader(data, **kw) as L:
            L.load_state_dict(state)
            for _ in L:
                pass
            es = L.epoch_stats(2)
            res[mode] = {"samples": es["samples_by_source"][0], "bytes": es["bytes_by_source"][0],
                         "seconds": round(time.time() - t0, 3)}
    print("rank %d/%d %s: first epoch after a restart at epoch 2: storage %s warm, %s cold"
          % (rank, world, plan, res["warm"], res["cold"]), flush=True)
    with open(os.path.join(root, "%s.result.%d" % (plan, rank)), "w") as f:
        json.dump(res, f)
    barrier(plan + "-done")
    if rank == 0 and world > 1:
        tot = {m: sum(json.load(open(os.path.join(root, "%s.result.%d" % (plan, r))))[m]["bytes"]
                      for r in range(world)) for m in ("warm", "cold")}
        print("all %d ranks %s: storage bytes in the first epoch after the restart: %d warm, %d cold (%.3fx)"
              % (world, plan, tot["warm"], tot["cold"], tot["warm"] / max(1, tot["cold"])), flush=True)
