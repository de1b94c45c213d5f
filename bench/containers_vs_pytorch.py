#!/usr/bin/env python3
"""The same images as a folder, as WebDataset tar shards and as HDF5:
lade's rate for each container beside the loader a PyTorch user would write instead, in the
same run, on the same bytes.

    flock /tmp/lade-bench.lock /usr/bin/python3 bench/containers_vs_pytorch.py \\
        [--count 2000] [--epochs 2] [--raw-epochs 10] [--reps 3] [--data /tmp/lade-containers]

Data (made with the lade CLI when missing, under --data):
  img/          `lade gen jpeg img --count N` (ImageNet-like ~100 KB JPEGs, ImageFolder layout)
  tar/          `lade pack img --to tar --shard-size 50MB tar` (WebDataset: KEY.jpg + KEY.cls)
  img.h5        `lade pack img --to hdf5 img.h5 --transform imagenet-eval --set image_dtype=uint8`
                (the images decoded to fixed-shape 224x224x3 uint8 arrays: HDF5 holds arrays)
  npy/, npytar/ the same uint8 arrays as the HDF5 file, one .npy per sample (np.save, class
                folders from the labels) packed with `lade pack npy --to tar --shard-size 50MB`

JPEG rows (transform imagenet-train: RandomResizedCrop(224), flip, ToTensor, Normalize; batch 64):
  folder  lade.Loader(img)                        vs DataLoader + torchvision ImageFolder
  tar     lade.Loader(tar) (default plan: global   vs DataLoader over an IterableDataset reading
          shuffle, one pread per sample) and            the shards with Python's tarfile as
          lade.Loader(tar, plan="shards",               webdataset does: shards shuffled per
          shuffle_buffer=1000)                          epoch and split over workers by worker
                                                        id, members grouped by key, a shuffle
                                                        buffer of 1000 raw samples (webdataset's
                                                        .shuffle(1000)), then PIL decode + the
                                                        same torchvision transforms, label = .cls
Raw-array rows (224x224x3 uint8, no transform; batch 64; --raw-epochs per run, default 10, as
2 epochs take lade well under 0.1 s):
  hdf5    lade.Loader(img.h5)                     vs DataLoader over h5py (the file opened lazily
                                                        in each worker, torch.from_numpy(ds[i]))
  npy tar lade.Loader(npytar, transform="npy")    vs the tarfile IterableDataset above with
                                                        np.load(io.BytesIO(member)) instead of PIL

HTTP rows (`tar http`, `npy tar http`): the same shards served by nginx on loopback behind the latency
proxy (tests/http, --latency ms per request): lade.Loader on the URL brace pattern (Range requests,
coalesced, read ahead; its index pass, one streamed GET per shard, is inside its timed run) vs the same
tarfile IterableDataset streaming each shard with one urllib GET (webdataset's http:// reading).

Both sides only iterate (no checksum on either side), both yield torch tensors (lade zero copy),
both shuffle. lade uses 2 threads (this VM's cores); PyTorch runs with num_workers 0, 1 and 2
(persistent, torch.set_num_threads(1)) and its best median is compared. Targets:
lade >= 2.5x the PyTorch tar loader on JPEG, >= 10x on raw arrays. A rate is samples over
the wall time from creating the loader to the end of the last epoch (lade's open and tar index
included, PyTorch's worker start included). Each rep runs every lade row and every PyTorch row,
lade first on even reps and PyTorch first on odd ones; the table gives medians over reps. Every
file is read once before timing, so both sides read from the page cache. lade's reads per sample
are given as its read syscalls (/proc/self/io syscr, the whole process) and, where lade counts
them, Loader.stats()['get_requests'] per sample.
"""
import argparse
import io
import os
import random
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
import lade  # noqa: E402
import httpenv  # noqa: E402  (nginx + the latency proxy, as tests/http uses them)
from hdf5_vs_pytorch import H5Dataset  # noqa: E402  (the h5py Dataset a PyTorch user writes)

CORES = 2
WORKERS = (0, 1, 2)
BATCH = 64
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# ---------------------------------------------------------------- PyTorch side

def train_tf():
    import torchvision.transforms as T
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])



def split_key(name):
    """webdataset's base_plus_ext: the key is the name up to the first '.' of its last component."""
    d, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot:
        return None, None
    return (d + "/" + stem if d else stem), ext.lower()


class TarShards(IterableDataset):
    """WebDataset-style reading with Python's tarfile: shards shuffled each epoch and split over the
    workers by worker id, each read sequentially in stream mode, consecutive members with the same
    key grouped into a sample, a shuffle buffer of `bufsize` undecoded samples (webdataset's
    .shuffle(bufsize), initial fill as its default 100), then decode + transform."""

    def __init__(self, shards, ext, decode, bufsize=1000, seed=0):
        self.shards, self.ext, self.decode, self.bufsize, self.seed = shards, ext, decode, bufsize, seed
        self.epoch = 0  # each (persistent) worker keeps its copy: one more per __iter__

    def samples(self, shards):
        for path in shards:
            opener = urllib.request.urlopen if path.startswith(("http://", "https://")) else (lambda p: open(p, "rb"))
            with opener(path) as f, tarfile.open(fileobj=f, mode="r|*") as tf:
                key, cur = None, {}
                for m in tf:
                    if not m.isfile():
                        continue
                    k, ext = split_key(m.name)
                    if k is None:
                        continue
                    if k != key and cur:
                        yield cur
                        cur = {}
                    key = k
                    cur[ext] = tf.extractfile(m).read()
                if cur:
                    yield cur

    def __iter__(self):
        wi = get_worker_info()
        wid, nw = (wi.id, wi.num_workers) if wi is not None else (0, 1)
        rng = random.Random(self.seed * 1000003 + self.epoch)
        shards = list(self.shards)
        rng.shuffle(shards)  # the same order in every worker (same seed and epoch), then split
        self.epoch += 1
        mine = shards[wid::nw]
        buf_rng = random.Random((self.seed * 1000003 + self.epoch) * 101 + wid)
        buf = []
        for s in self.samples(mine):
            if s.get(self.ext) is None or "cls" not in s:
                continue
            item = (s[self.ext], int(s["cls"]))
            if len(buf) < self.bufsize:
                buf.append(item)
                if len(buf) < min(100, self.bufsize):
                    continue
            k = buf_rng.randrange(len(buf))
            item, buf[k] = buf[k], item
            yield self.decode(item[0]), item[1]
        buf_rng.shuffle(buf)
        for raw, label in buf:
            yield self.decode(raw), label


def decode_jpeg(tf):
    from PIL import Image

    def dec(b):
        with Image.open(io.BytesIO(b)) as im:
            return tf(im.convert("RGB"))
    return dec


def decode_npy(b):
    return torch.from_numpy(np.load(io.BytesIO(b)))


def torch_rate(make_ds, workers, epochs, shuffle):
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ds = make_ds()
    kw = dict(shuffle=True) if shuffle else {}
    dl = DataLoader(ds, batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0, **kw)
    n = 0
    for _ in range(epochs):
        for data, _labels in dl:
            n += data.shape[0]
    dt = time.perf_counter() - t0
    del dl
    return n / dt, n


# ---------------------------------------------------------------- lade side

def syscr():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("syscr:"):
                return int(line.split()[1])
    return 0


def lade_rate(source, transform, epochs, **kw):
    r0 = syscr()
    t0 = time.perf_counter()
    n = 0
    with lade.Loader(source, transform=transform, batch_size=BATCH, epochs=epochs, threads=CORES,
                     output="torch", rank=0, world_size=1, **kw) as L:
        for _ in range(epochs):  # the DataLoader's loop: one iter() per epoch
            for data, _labels in L:
                n += data.shape[0]
        st = L.stats()
    dt = time.perf_counter() - t0
    return n / dt, n, (syscr() - r0) / max(n, 1), st.get("get_requests", 0) / max(st.get("samples", n), 1)


# ---------------------------------------------------------------- data

def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def shards_of(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tar"))


def prepare(cli, root, count):
    os.makedirs(root, exist_ok=True)
    img, tar, h5 = os.path.join(root, "img"), os.path.join(root, "tar"), os.path.join(root, "img.h5")
    npy, npytar = os.path.join(root, "npy"), os.path.join(root, "npytar")
    if not os.path.isdir(img):
        run([cli, "gen", "jpeg", img, "--count", str(count)])
    if not os.path.exists(os.path.join(tar, "shard-000000.tar")) or not os.path.exists(os.path.join(tar, ".lade-pack")):
        run([cli, "pack", img, "--to", "tar", "--shard-size", "50MB", tar])
    if not os.path.exists(h5):
        run([cli, "pack", img, "--to", "hdf5", h5, "--transform", "imagenet-eval", "--set", "image_dtype=uint8"])
    done = os.path.join(npy, ".done")
    if not os.path.exists(done):
        with h5py.File(h5, "r") as f:
            data, labels = f["data"], f["labels"][:]
            for i in range(data.shape[0]):
                d = os.path.join(npy, "class_%02d" % labels[i])
                os.makedirs(d, exist_ok=True)
                np.save(os.path.join(d, "%06d.npy" % i), data[i])
        open(done, "w").close()
    if not os.path.exists(os.path.join(npytar, "shard-000000.tar")):
        run([cli, "pack", npy, "--to", "tar", "--shard-size", "50MB", npytar])
    return img, tar, h5, npytar


def warm(paths):
    for p in paths:
        files = [p] if os.path.isfile(p) else [os.path.join(dp, f) for dp, _, fs in os.walk(p) for f in fs]
        for fn in files:
            with open(fn, "rb") as f:
                while f.read(64 << 20):
                    pass


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/lade-containers")
    ap.add_argument("--count", type=int, default=2000, help="JPEGs to generate (default 2000)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per timed run, both sides (default 2)")
    ap.add_argument("--raw-epochs", type=int, default=10,
                    help="epochs per timed run for the raw-array rows, both sides (default 10: 2 would take "
                         "lade well under 0.1 s)")
    ap.add_argument("--reps", type=int, default=3, help="reps, lade/PyTorch order alternated; medians reported")
    ap.add_argument("--lade", default=os.path.join(ROOT, "build", "lade"), help="the lade CLI")
    ap.add_argument("--latency", type=int, default=20, help="ms the proxy adds to every HTTP request (default 20)")
    ap.add_argument("--rows", default="", help="comma list of rows to run (default: all), e.g. 'tar http,npy tar http'")
    a = ap.parse_args()
    cli = os.path.abspath(a.lade)
    root = os.path.join(a.data, "n%d" % a.count)
    img, tar, h5, npytar = prepare(cli, root, a.count)
    warm([img, tar, h5, npytar])
    tshards, nshards = shards_of(tar), shards_of(npytar)
    with h5py.File(h5, "r") as f:
        h5desc = "%s %s" % (tuple(f["data"].shape), f["data"].dtype)
    print("machine: %d cores online, lade threads %d, PyTorch workers %s; torch %s, lade %s"
          % (os.cpu_count(), CORES, "/".join(map(str, WORKERS)), torch.__version__, lade.version()))
    print("data: %s: %d JPEGs; %d tar shards (%.0f MB); %s (%s, %.0f MB); %d .npy tar shards (%.0f MB)"
          % (root, a.count, len(tshards), sum(map(os.path.getsize, tshards)) / 1e6, os.path.basename(h5), h5desc,
             os.path.getsize(h5) / 1e6, len(nshards), sum(map(os.path.getsize, nshards)) / 1e6))
    print("batch %d; epochs per run: %d for the JPEG rows, %d for the raw-array rows; %d reps"
          % (BATCH, a.epochs, a.raw_epochs, a.reps))
    sys.stdout.flush()

    tf = train_tf()
    from torchvision.datasets import ImageFolder

    # the same shards over HTTP: nginx serving the data folder on loopback behind the fault proxy adding
    # --latency ms to every request; lade reads Range requests (its index from one streamed GET per shard
    # at open, inside its timed run: no cache_dir), the PyTorch side streams each shard with one GET
    remote = None
    why = httpenv.missing() or httpenv.missing_proxy()
    if why:
        print("HTTP rows skipped: %s" % why)
    else:
        os.chmod(a.data, 0o755)
        os.chmod(root, 0o755)
        remote = httpenv.NginxEnv(root, proxy=True).__enter__()
        remote.proxy(latency_ms=a.latency)
        turls = [remote.url + "/tar/" + os.path.basename(x) for x in tshards]
        nurls = [remote.url + "/npytar/" + os.path.basename(x) for x in nshards]
        tpat = remote.url + "/tar/shard-{000000..%06d}.tar" % (len(tshards) - 1)
        npat = remote.url + "/npytar/shard-{000000..%06d}.tar" % (len(nshards) - 1)
        print("HTTP rows: nginx on 127.0.0.1 behind tests/s3/faultproxy.js adding %d ms per request" % a.latency)

    # (group, row name, lade runs [(label, source, transform, kw)], torch factory, torch needs shuffle=True)
    rows = [
        ("jpeg", "folder", [("lade", img, "imagenet-train", {})],
         lambda: ImageFolder(img, transform=tf), True, "DataLoader + ImageFolder"),
        ("jpeg", "tar", [("lade", tar, "imagenet-train", {}),
                         ("lade plan=shards", tar, "imagenet-train", dict(plan="shards", shuffle_buffer=1000))],
         lambda: TarShards(tshards, "jpg", decode_jpeg(tf)), False, "DataLoader + tarfile (wds-style)"),
        ("raw", "hdf5", [("lade", h5, "auto", {})],
         lambda: H5Dataset(h5), True, "DataLoader + h5py"),
        ("raw", "npy tar", [("lade", npytar, "npy", {})],
         lambda: TarShards(nshards, "npy", decode_npy), False, "DataLoader + tarfile + np.load"),
    ]
    if remote:
        rows += [
            ("jpeg", "tar http", [("lade", tpat, "imagenet-train", {}),
                                  ("lade plan=shards", tpat, "imagenet-train", dict(plan="shards", shuffle_buffer=1000))],
             lambda: TarShards(turls, "jpg", decode_jpeg(tf)), False, "DataLoader + tarfile over HTTP"),
            ("raw", "npy tar http", [("lade", npat, "npy", {}),
                                     ("lade plan=shards", npat, "npy", dict(plan="shards", shuffle_buffer=1000))],
             lambda: TarShards(nurls, "npy", decode_npy), False, "DataLoader + tarfile over HTTP + np.load"),
        ]
    if a.rows:
        keep = set(x.strip() for x in a.rows.split(","))
        rows = [r for r in rows if r[1] in keep]
    lade_r, lade_io, torch_r = {}, {}, {}
    for rep in range(a.reps):
        t_rep = time.perf_counter()
        for group, name, lruns, make_ds, shuffle, _pname in rows:
            epochs = a.epochs if group == "jpeg" else a.raw_epochs

            def do_lade():
                for label, src, trf, kw in lruns:
                    r, n, rps, gps = lade_rate(src, trf, epochs, **kw)
                    lade_r.setdefault((name, label), []).append(r)
                    lade_io[(name, label)] = (rps, gps)

            def do_torch():
                for w in WORKERS:
                    r, n = torch_rate(make_ds, w, epochs, shuffle)
                    torch_r.setdefault((name, w), []).append(r)
            for f in ((do_lade, do_torch) if rep % 2 == 0 else (do_torch, do_lade)):
                f()
        print("rep %d/%d done in %.0f s" % (rep + 1, a.reps, time.perf_counter() - t_rep))
        sys.stdout.flush()

    med = lambda xs: statistics.median(xs)  # noqa: E731
    print()
    print("%-8s %-44s %12s   %s" % ("row", "loader", "samples/s", "reps"))
    summary = []
    for group, name, lruns, _mk, _sh, pname in rows:
        tmed = {w: med(torch_r[(name, w)]) for w in WORKERS}
        bw = max(tmed, key=tmed.get)
        for w in WORKERS:
            print("%-8s %-44s %12s   [%s]%s" % (name, "%s, %d workers" % (pname, w), format(tmed[w], ",.0f"),
                                               ", ".join(format(x, ",.0f") for x in torch_r[(name, w)]),
                                               "  <- best" if w == bw else ""))
        for label, _src, _trf, _kw in lruns:
            lm = med(lade_r[(name, label)])
            rps, gps = lade_io[(name, label)]
            print("%-8s %-44s %12s   [%s]  %.2f read syscalls/sample%s" % (
                name, "%s, %d threads" % (label, CORES), format(lm, ",.0f"),
                ", ".join(format(x, ",.0f") for x in lade_r[(name, label)]), rps,
                (", %.3f get_requests/sample" % gps) if gps else ""))
            summary.append((group, name, label, lm, tmed[bw], bw, pname))
    print()
    targets = {"jpeg": 2.5, "raw": 10.0}
    for group, name, label, lm, tb, bw, pname in summary:
        t = targets[group] if name in ("tar", "npy tar", "hdf5", "tar http", "npy tar http") else None
        print("ratio %-7s %-17s / %s (%d workers): %6.2fx%s" % (
            name, label, pname, bw, lm / tb,
            ("  (target >= %.1fx: %s)" % (t, "met" if lm / tb >= t else "NOT met")) if t else ""))
    if remote:
        remote.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
