#!/usr/bin/env python3
"""An HDF5 file of raw arrays: PyTorch's DataLoader over h5py against lade.Loader
(source=FILE.h5, the hdf5 source), same file, same batch size, both shuffled, both
only iterating (no checksum on either side). Prints samples/s and the ratio.

    PYTHONPATH=build/python /usr/bin/python3 bench/hdf5_vs_pytorch.py [--file F.h5]

The file (made with h5py when missing: --count samples of --shape float32,
contiguous, plus int64 labels) is read once before timing so both sides read from
the page cache. PyTorch side: the usual h5py Dataset - the file opened lazily in
each worker (h5py handles do not survive fork), __getitem__ returns
torch.from_numpy(ds[i]) and the label - with num_workers 0, 1 and 2 (persistent);
its best is compared. lade: 2 threads (this VM's cores), output torch (zero copy),
the default hdf5_gap, and again with hdf5_gap=0 (one read per sample). lade C API
rates with threads 1 and 4 (`lade bench --no-checksum`) show what serialising
libhdf5 costs (docs/sources.md, hdf5).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import lade  # noqa: E402

CORES = 2


class H5Dataset(Dataset):
    """The common h5py pattern: open the file in the worker, one sample per __getitem__."""

    def __init__(self, path):
        self.path = path
        with h5py.File(path, "r") as f:
            self.n = f["data"].shape[0]
        self.f = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.f is None:
            self.f = h5py.File(self.path, "r")
            self.data, self.labels = self.f["data"], self.f["labels"]
        return torch.from_numpy(self.data[i]), int(self.labels[i])


def make(path, count, shape):
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("data", shape=(count,) + shape, dtype="float32")
        step = max(1, (64 << 20) // (4 * int(np.prod(shape))))
        for i in range(0, count, step):
            k = min(step, count - i)
            d[i:i + k] = rng.standard_normal((k,) + shape, dtype=np.float32)
        f["labels"] = rng.integers(0, 1000, count)


def warm(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def torch_rate(path, batch_size, workers, epochs):
    torch.set_num_threads(1)
    dl = DataLoader(H5Dataset(path), batch_size=batch_size, shuffle=True, num_workers=workers,
                    persistent_workers=workers > 0)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for data, _labels in dl:
            n += data.shape[0]
    return n / (time.perf_counter() - t0)


def lade_rate(path, batch_size, epochs, **kw):
    t0 = time.perf_counter()
    n = 0
    with lade.Loader(path, batch_size=batch_size, epochs=epochs, threads=CORES, output="torch", rank=0,
                     world_size=1, **kw) as L:
        for _ in range(epochs):
            for data, _labels in L:
                n += data.shape[0]
    return n / (time.perf_counter() - t0)


def lade_c_rate(cli, path, batch_size, epochs, threads):
    out = subprocess.run([cli, "bench", path, "--batch-size", str(batch_size), "--epochs", str(epochs),
                          "--threads", str(threads), "--no-checksum", "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["samples_per_s"], j["get_requests"] / max(j["samples"], 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="/tmp/lade-bench/raw-20000.h5")
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--shape", default="3,32,32")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lade", default=os.path.join(ROOT, "build", "lade"), help="the lade CLI")
    a = ap.parse_args()
    if not os.path.exists(a.file):
        os.makedirs(os.path.dirname(os.path.abspath(a.file)), exist_ok=True)
        make(a.file, a.count, tuple(int(x) for x in a.shape.split(",")))
    warm(a.file)
    with h5py.File(a.file, "r") as f:
        desc = "%s: %s %s" % (a.file, f["data"].shape, f["data"].dtype)
    print(desc, "batch", a.batch_size, "epochs", a.epochs)
    pt = {}
    for w in (0, 1, 2):
        pt[w] = torch_rate(a.file, a.batch_size, w, a.epochs)
        print("PyTorch DataLoader + h5py, %d workers: %10.0f samples/s" % (w, pt[w]))
    ld = lade_rate(a.file, a.batch_size, a.epochs)
    print("lade.Loader, %d threads:                %10.0f samples/s" % (CORES, ld))
    ld0 = lade_rate(a.file, a.batch_size, a.epochs, hdf5_gap=0)
    print("lade.Loader, %d threads, hdf5_gap=0:    %10.0f samples/s" % (CORES, ld0))
    for t in (1, 4):
        r, rps = lade_c_rate(a.lade, a.file, a.batch_size, a.epochs, t)
        print("lade bench (C API), threads %d:         %10.0f samples/s, %.3f reads per sample" % (t, r, rps))
    best = max(pt.values())
    print("ratio lade / best PyTorch: %.2fx" % (ld / best))


if __name__ == "__main__":
    main()
