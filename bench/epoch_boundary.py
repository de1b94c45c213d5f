#!/usr/bin/env python3
"""Is there a stall at the start of an epoch? lade.Loader iterated the PyTorch
way (one `for` loop per epoch, set_epoch each time) and as one stream of all
epochs, against PyTorch's DataLoader (persistent workers), same dataset, same
cores, same consumer.

    PYTHONPATH=build/python /usr/bin/python3 bench/epoch_boundary.py [--data DIR]

The consumer stands for a training step: it sleeps `--step-ms` per batch
(default: 1.5x lade's own time per batch, measured first, so that a loader
that keeps up never makes it wait in the steady state). For every loader the
time blocked in next() is taken per batch; the benchmark prints the mean
wait of the first batch of epochs 1.. (the boundary) and of the other batches
(the steady state). Neither side checksums or copies the batches.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import lade  # noqa: E402

sys.path.insert(0, HERE)
from vs_pytorch import warm  # noqa: E402

CORES = 2


def timed_epochs(epoch_iters, step_s):
    """[(epoch, [wait per batch])] for an iterable of per-epoch iterables."""
    out = []
    for e, it in enumerate(epoch_iters):
        waits = []
        it = iter(it)
        while True:
            t0 = time.perf_counter()
            try:
                next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            time.sleep(step_s)
        out.append((e, waits))
    return out


def summary(name, runs):
    boundary = [w[0] for e, w in runs if e > 0 and w]
    steady = [x for _, w in runs for x in w[1:]]
    first = runs[0][1][0]
    return {"name": name, "first_batch_s": first, "boundary_mean_s": float(np.mean(boundary)),
            "boundary_max_s": float(np.max(boundary)), "steady_mean_s": float(np.mean(steady)),
            "batches": sum(len(w) for _, w in runs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/lade-bench")
    ap.add_argument("--lade", default=os.path.join(ROOT, "build", "lade"))
    ap.add_argument("--count", type=int, default=640)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--step-ms", type=float, default=0, help="consumer time per batch (0: 1.5x lade's)")
    args = ap.parse_args()
    path = os.path.join(args.data, "jpeg-%d" % args.count)
    if not os.path.isdir(path):
        subprocess.run([args.lade, "gen", "jpeg", path, "--count", str(args.count)], check=True,
                       stdout=subprocess.DEVNULL)
    warm(path)
    bs, E = args.batch_size, args.epochs
    kw = dict(transform="imagenet-train", batch_size=bs, threads=CORES, seed=1, output="torch", rank=0,
              world_size=1)

    step_s = args.step_ms / 1000.0
    if not step_s:
        with lade.Loader(path, **kw) as L:
            t0 = time.perf_counter()
            n = sum(1 for _ in L)
            step_s = 1.5 * (time.perf_counter() - t0) / n
    print("machine: %d cores online, loaders use %d; torch %s, lade %s"
          % (os.cpu_count(), CORES, torch.__version__, lade.version()))
    print("dataset: %s, imagenet-train crop 224, batch %d, %d epochs, consumer step %.1f ms"
          % (path, bs, E, step_s * 1e3))

    results = []
    with lade.Loader(path, **kw) as L:
        def per_epoch():
            for e in range(E):
                L.set_epoch(e)
                yield L
        results.append(summary("lade.Loader, a for loop per epoch", timed_epochs(per_epoch(), step_s)))

    with lade.Loader(path, epochs=E, **kw) as L:
        steps = len(L)
        it = L.stream()

        def chunks():
            for _ in range(E):
                yield (next(it) for _ in range(steps))
        results.append(summary("lade.Loader.stream(), all epochs", timed_epochs(chunks(), step_s)))

    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    dl = DataLoader(ImageFolder(path, transform=tf), batch_size=bs, shuffle=True, num_workers=CORES,
                    persistent_workers=True, prefetch_factor=2)
    results.append(summary("PyTorch DataLoader, %d persistent workers" % CORES, timed_epochs([dl] * E, step_s)))

    for r in results:
        print("%-45s first batch %7.1f ms | epoch start (epochs 1-%d) mean %6.1f ms, max %6.1f ms | "
              "other batches mean %5.2f ms | %d batches"
              % (r["name"], r["first_batch_s"] * 1e3, E - 1, r["boundary_mean_s"] * 1e3, r["boundary_max_s"] * 1e3,
                 r["steady_mean_s"] * 1e3, r["batches"]))
    lade_b, torch_b = results[0]["boundary_mean_s"], results[2]["boundary_mean_s"]
    print("epoch-start wait: lade per-epoch loop %.1f ms vs PyTorch %.1f ms (%.0fx less)"
          % (lade_b * 1e3, torch_b * 1e3, torch_b / max(lade_b, 1e-6)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
