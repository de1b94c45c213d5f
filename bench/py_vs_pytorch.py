#!/usr/bin/env python3
"""Python to Python: PyTorch's DataLoader against lade.Loader, same dataset, same
cores, plus the lade C-API rate (`lade bench --json`) to measure what the Python
module costs.

    PYTHONPATH=build/python /usr/bin/python3 bench/py_vs_pytorch.py --data DIR --kind npy|jpeg

DIR holds the datasets (made with `lade gen` when missing: DIR/npy-10000,
DIR/jpeg-2000), or is itself a dataset folder.

JPEG: torchvision ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip +
ToTensor + Normalize, batch 32, versus lade.Loader(transform="imagenet-train").
npy: a Dataset doing np.load per file, batch 256, versus lade.Loader with the
npy transform. PyTorch runs with num_workers 0, 1 and 2 and its best is
compared; lade runs with 2 threads and yields torch tensors (zero copy). Both
only iterate. The Python overhead compares lade.Loader with `lade bench
--no-checksum` on the same settings (best of --rounds runs each, interleaved).
"""
import argparse
import json
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

CORES = 2


# The PyTorch-side dataset and the page-cache warm-up are shared with the
# C-API comparison so both benchmarks measure PyTorch the same way.
sys.path.insert(0, HERE)
from vs_pytorch import NpyFolder, warm  # noqa: E402


def torch_rate(dataset, batch_size, workers, epochs):
    torch.set_num_threads(1)
    dl = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                    persistent_workers=workers > 0)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for data, _labels in dl:
            n += data.shape[0]
    return n / (time.perf_counter() - t0)


def lade_py_rate(path, transform, batch_size, epochs):
    t0 = time.perf_counter()
    n = 0
    with lade.Loader(path, transform=transform, batch_size=batch_size, epochs=epochs, threads=CORES,
                     output="torch", rank=0, world_size=1) as L:
        for _ in range(epochs):  # the same loop as the DataLoader's: one iter() per epoch
            for data, _labels in L:
                n += data.shape[0]
    return n / (time.perf_counter() - t0)


def lade_c_rate(cli, path, transform, batch_size, epochs):
    out = subprocess.run([cli, "bench", path, "--transform", transform, "--batch-size", str(batch_size),
                          "--epochs", str(epochs), "--threads", str(CORES), "--no-checksum", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/lade-bench")
    ap.add_argument("--kind", choices=["npy", "jpeg"], default="npy")
    ap.add_argument("--lade", default=os.path.join(ROOT, "build", "lade"), help="the lade CLI")
    ap.add_argument("--count", type=int, default=0, help="samples to generate (npy 10000, jpeg 2000)")
    ap.add_argument("--batch-size", type=int, default=0, help="npy 256, jpeg 32")
    ap.add_argument("--epochs", type=int, default=0, help="lade epochs per timed run (npy 3, jpeg 1)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved C/Python runs for the overhead")
    args = ap.parse_args()
    cli = os.path.abspath(args.lade)
    npy = args.kind == "npy"
    count = args.count or (10000 if npy else 2000)
    bs = args.batch_size or (256 if npy else 32)
    epochs = args.epochs or (3 if npy else 1)
    transform = "npy" if npy else "imagenet-train"

    path = args.data
    if not any(d.startswith("class_") for d in (os.listdir(path) if os.path.isdir(path) else [])):
        path = os.path.join(args.data, "%s-%d" % (args.kind, count))
        if not os.path.isdir(path):
            subprocess.run([cli, "gen", args.kind, path, "--count", str(count)], check=True,
                           stdout=subprocess.DEVNULL)
    warm(path)
    print("machine: %d cores online, comparing with %d cores; torch %s, lade %s"
          % (os.cpu_count(), CORES, torch.__version__, lade.version()))
    print("dataset: %s (%s, batch %d)" % (path, args.kind, bs))

    if npy:
        ds = NpyFolder(path)
        torch_fn = lambda w: torch_rate(ds, bs, w, epochs=1)  # noqa: E731
    else:
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        ds = ImageFolder(path, transform=tf)
        torch_fn = lambda w: torch_rate(ds, bs, w, epochs=1)  # noqa: E731

    # lade: C API and Python, interleaved rounds
    c_rates, py_rates = [], []
    try:
        for _ in range(args.rounds):
            c_rates.append(lade_c_rate(cli, path, transform, bs, epochs))
            py_rates.append(lade_py_rate(path, transform, bs, epochs))
    except (subprocess.CalledProcessError, lade.Error) as e:
        msg = getattr(e, "stderr", None) or str(e)
        print("lade %s failed: %s" % (transform, msg.strip()))
        return 1
    c_best, py_best = max(c_rates), max(py_rates)
    c_med, py_med = float(np.median(c_rates)), float(np.median(py_rates))

    torch_rates = {w: torch_fn(w) for w in (0, 1, 2)}
    t_best_w = max(torch_rates, key=torch_rates.get)
    t_best = torch_rates[t_best_w]

    name = "%s batch %d" % (args.kind, bs)
    print("%s: PyTorch DataLoader %s" % (name, ", ".join("%s/s (%d workers)" % (format(r, ",.0f"), w)
                                                         for w, r in torch_rates.items())))
    print("%s: lade.Loader (Python, torch tensors, %d threads) %s/s  [rounds: %s]"
          % (name, CORES, format(py_best, ",.0f"), ", ".join(format(r, ",.0f") for r in py_rates)))
    print("%s: lade C API (lade bench) %s/s  [rounds: %s]"
          % (name, format(c_best, ",.0f"), ", ".join(format(r, ",.0f") for r in c_rates)))
    print("%s: ratio lade.Loader / PyTorch best (%d workers) = %.2fx" % (name, t_best_w, py_best / t_best))
    print("%s: Python module overhead vs C API = %.1f%% (best of %d), %.1f%% (medians %s vs %s)"
          % (name, 100.0 * (1.0 - py_best / c_best), args.rounds, 100.0 * (1.0 - py_med / c_med),
             format(py_med, ",.0f"), format(c_med, ",.0f")))
    print(json.dumps({"kind": args.kind, "batch_size": bs, "torch": torch_rates, "lade_python": py_best,
                      "lade_c": c_best, "lade_python_median": py_med, "lade_c_median": c_med,
                      "ratio": py_best / t_best, "overhead": 1.0 - py_best / c_best}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
