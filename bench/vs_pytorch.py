#!/usr/bin/env python3
"""lade (C API, through `lade bench`) against PyTorch's DataLoader, same data,
same cores, one run. Prints both rates and the ratio.

    /usr/bin/python3 bench/vs_pytorch.py [--lade build/lade] [--kind jpeg|npy|npz|both]

JPEG: torchvision ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip +
ToTensor + Normalize, batch 32, versus lade's `imagenet-train` (float32 CHW,
normalised: the same output). npy: a Dataset doing np.load per file, batch
256, versus lade's `npy` transform. npz (--kind npz only): the same arrays as
one stored .npz per sample (np.savez, member x), a Dataset doing
np.load(path)["x"], versus lade's `npz` transform. PyTorch is run with num_workers 0, 1 and 2
and its best rate is the one compared. Both sides only iterate; neither
touches the batch bytes afterwards.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CORES = 2


def gen(lade, kind, path, count, extra=()):
    if os.path.isdir(path):
        return
    subprocess.run([lade, "gen", kind, path, "--count", str(count), *extra], check=True,
                   stdout=subprocess.DEVNULL)


def warm(path):
    # Read every file once so both loaders start from a warm page cache.
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 20):
                    pass


def torch_rate(dataset, batch_size, workers, epochs=1):
    torch.set_num_threads(1)
    dl = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                    drop_last=False, persistent_workers=workers > 0)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for data, _labels in dl:
            n += data.shape[0]
    return n / (time.perf_counter() - t0)


def lade_rate(lade, path, transform, batch_size, epochs=1, extra=()):
    out = subprocess.run([lade, "bench", path, "--transform", transform, "--batch-size", str(batch_size),
                          "--epochs", str(epochs), "--threads", str(CORES), "--no-checksum", "--json", *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


class NpyFolder(Dataset):
    def __init__(self, root):
        self.files = []
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        for label, c in enumerate(classes):
            for f in sorted(os.listdir(os.path.join(root, c))):
                self.files.append((os.path.join(root, c, f), label))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        return torch.from_numpy(np.load(path)), label


class NpzFolder(NpyFolder):
    def __getitem__(self, i):
        path, label = self.files[i]
        with np.load(path) as z:
            return torch.from_numpy(z["x"]), label


def npz_of(npy_root, root):
    # the npy folder's arrays, one stored .npz each (np.savez: no compression)
    if os.path.isdir(root):
        return
    for c in sorted(os.listdir(npy_root)):
        os.makedirs(os.path.join(root, c + ".tmp"), exist_ok=True)
        for f in sorted(os.listdir(os.path.join(npy_root, c))):
            np.savez(os.path.join(root, c + ".tmp", f[:-4] + ".npz"), x=np.load(os.path.join(npy_root, c, f)))
        os.rename(os.path.join(root, c + ".tmp"), os.path.join(root, c))


def compare(name, torch_fn, lade_fn):
    best, rates = 0.0, {}
    for w in (0, 1, 2):
        r = torch_fn(w)
        rates[w] = r
        best = max(best, r)
    lade = lade_fn()
    ratio = lade["samples_per_s"] / best
    print(f"{name}: PyTorch DataLoader " + ", ".join(f"{r:,.0f}/s ({w} workers)" for w, r in rates.items()))
    print(f"{name}: lade {lade['samples_per_s']:,.0f}/s ({CORES} threads, first batch "
          f"{lade['first_batch_ms']:.1f} ms, peak RSS {lade['peak_rss_mib']:.0f} MiB)")
    print(f"{name}: ratio lade / PyTorch best = {ratio:.2f}x")
    return {"torch": rates, "lade": lade["samples_per_s"], "ratio": ratio}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lade", default=os.path.join(os.path.dirname(__file__), "..", "build", "lade"))
    ap.add_argument("--kind", choices=["jpeg", "npy", "npz", "both"], default="both")
    ap.add_argument("--data", default="/tmp/lade-bench")
    ap.add_argument("--jpeg-count", type=int, default=2000)
    ap.add_argument("--npy-count", type=int, default=10000)
    args = ap.parse_args()
    lade = os.path.abspath(args.lade)
    print(f"machine: {os.cpu_count()} cores online, comparing with {CORES} cores; torch {torch.__version__}")
    results = {}
    if args.kind in ("jpeg", "both"):
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        path = os.path.join(args.data, f"jpeg-{args.jpeg_count}")
        gen(lade, "jpeg", path, args.jpeg_count)
        warm(path)
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        ds = ImageFolder(path, transform=tf)
        results["jpeg"] = compare("jpeg imagenet-train", lambda w: torch_rate(ds, 32, w),
                                  lambda: lade_rate(lade, path, "imagenet-train", 32, epochs=2))
    if args.kind in ("npy", "both"):
        path = os.path.join(args.data, f"npy-{args.npy_count}")
        gen(lade, "npy", path, args.npy_count)
        warm(path)
        ds = NpyFolder(path)
        results["npy"] = compare("npy 128 KiB batch 256", lambda w: torch_rate(ds, 256, w, epochs=1),
                                 lambda: lade_rate(lade, path, "npy", 256, epochs=3))
        results["npy32"] = compare("npy 128 KiB batch 32", lambda w: torch_rate(ds, 32, w, epochs=1),
                                   lambda: lade_rate(lade, path, "npy", 32, epochs=3))
    if args.kind == "npz":
        npy = os.path.join(args.data, f"npy-{args.npy_count}")
        gen(lade, "npy", npy, args.npy_count)
        path = os.path.join(args.data, f"npz-{args.npy_count}")
        npz_of(npy, path)
        warm(path)
        ds = NpzFolder(path)
        results["npz"] = compare("npz (stored) 128 KiB batch 256", lambda w: torch_rate(ds, 256, w, epochs=1),
                                 lambda: lade_rate(lade, path, "npz", 256, epochs=3, extra=("--set", "npz_member=x")))
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
