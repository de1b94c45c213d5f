#!/usr/bin/env python3
"""DLIO's workloads, measured as DLIO measures them (docs/dlio.md, bench/RESULTS.md): accelerator utilisation (AU)
and the most emulated accelerators one host keeps at AU >= 90%, for three readers on the same data in one run:

  reference   what DLIO's pytorch reader does, written here: torch.utils.data.DataLoader with read_threads
              workers, prefetch_factor 1, one np.load (npz) or one record read with both CRC32C checked (TFRecord)
              per sample, a contiguous block of the samples per rank; per step: sleep computation_time, then a
              torch.distributed (gloo) barrier. The ranks are torch.multiprocessing processes.
  lade-dlio   `mpirun -np N lade dlio run` with plan=dlio (DLIO's sharding)
  lade-plan   the same with lade.plan=locality over 4 emulated nodes (ranks_per_node = N / 4) whose node caches
              hold half the dataset each (lade.cache_mem_bytes); AU of the epochs after the first

AU is computed with DLIO's formulas (statscounter.py) for every reader: the reference's from its own per-step log
with the function below, lade's by lade. Two setups:

  local   files on this machine's disk, the page cache of what each step read dropped after the step
          (posix_fadvise DONTNEED; lade.evict_cache=1 and the same in the reference), so every read is cold
  s3      s3rver through tests/s3/faultproxy.js: 20 ms per request and a shared link of --s3-mb-s MB/s

Workloads, scaled to a 2-core machine (computation_time and batch unchanged, records and files scaled):

  unet3d_h100    npz, records 146.6 MB / 64 (2.29 MB, stdev / 64), resize / 64, 336 files, batch 7, 0.323 s
  resnet50_h100  TFRecord, records 114,660 B / 8 (14.3 KB), 48 files x 400 records, batch 400, 0.224 s
                 (reader.data_loader=pytorch for both readers: the same sharding as the reference)

Epochs as the workload files run them: 5 (train.epochs), each whole (train.total_training_steps unset, DLIO's
default); the pass mark is DLIO's, the mean AU over the epochs. A capped epoch (--steps-cap) ends every epoch with
a seek that throws the read-ahead away, so both readers start each epoch cold and the first step's spread between
ranks (which DLIO's formula keeps: only the first step's own time is excluded, not its barrier) dominates a
scaled epoch of 8 steps; that measured the start of an epoch, not the storage.

The storage ceiling is the raw bandwidth of a plain parallel read of all the files (16 threads, cold) in the same
run, divided by one accelerator's demand (batch x mean record bytes / computation_time): the most accelerators
the storage alone could feed at AU 100%.

    /usr/bin/python3 bench/dlio_vs_reference.py [--lade build/lade] [--workloads unet3d,resnet50]
                                                [--setups local,s3] [--counts 1,2,4,8,16] [--epochs 5]
                                                [--steps-cap 0] [--keep]
"""
import argparse
import ctypes
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))

WORKLOADS = {
    "unet3d": dict(yaml="unet3d_h100.yaml", fmt="npz", files=336, spf=1, rl=146600628 // 64, stdev=68341808 // 64,
                   resize=2097152 // 64, batch=7, compute=0.323, threads=4, extra=[]),
    "resnet50": dict(yaml="resnet50_h100.yaml", fmt="tfrecord", files=48, spf=400, rl=114660 // 8, stdev=0,
                     resize=150528 // 8, batch=400, compute=0.224, threads=8, extra=["reader.data_loader=pytorch"]),
}
STEPS_CAP = 1 << 30  # steps per epoch for the reference and lade-dlio (DLIO's train.total_training_steps): none


# ------------------------------------------------------------------ DLIO's metrics

def dlio_au(load, proc, compute, t0, t1, batch, exclude_start=1):
    n = len(compute)
    total_compute = float(np.sum(compute[exclude_start:]))
    total_time = (t1 - t0) - float(np.sum(proc[:exclude_start]))
    au = 0.0 if total_compute == 0 else total_compute / total_time
    return au * 100, (n - 2) / total_time * batch


# ------------------------------------------------------------------ the reference (DLIO's pytorch reader)

def _crc32c_lib(lade_cli):
    for cand in (os.path.join(os.path.dirname(lade_cli), "liblade.so"), "liblade.so"):
        try:
            lib = ctypes.CDLL(cand)
            lib.lade_crc32c.restype = ctypes.c_uint32
            lib.lade_crc32c.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32]
            return cand
        except OSError:
            pass
    raise RuntimeError("liblade.so not found beside %s (the reference checks CRC32C with it)" % lade_cli)


def _masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff


def tfrecord_index(data):
    """(offset, length) of every record of one file's bytes."""
    out, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        out.append((off, n))
        off += 16 + n
    return out


class RefDataset:
    """One DLIO sample per item: its file read whole (npz, np.load) or its record read and checked (TFRecord)."""

    def __init__(self, w, files, index, resize, s3=None, crc_lib=None):
        self.w, self.files, self.index, self.s3, self.crc_lib = w, files, index, s3, crc_lib
        self.resized = np.zeros(resize, dtype=np.uint8)  # DLIO's resized_image: what every reader returns
        self._client = self._lib = None

    def __len__(self):
        return len(self.index)

    def _get(self, path, rng=None):
        if self.s3 is None:
            with open(path, "rb") as f:
                if rng is None:
                    return f.read()
                f.seek(rng[0])
                return f.read(rng[1])
        if self._client is None:
            import boto3
            from botocore.config import Config
            self._client = boto3.client("s3", endpoint_url=self.s3["endpoint"], aws_access_key_id=self.s3["key"],
                                        aws_secret_access_key=self.s3["secret"], region_name="us-east-1",
                                        config=Config(s3={"addressing_style": "path"}))
        kw = {} if rng is None else {"Range": "bytes=%d-%d" % (rng[0], rng[0] + rng[1] - 1)}
        return self._client.get_object(Bucket=self.s3["bucket"], Key=path, **kw)["Body"].read()

    def __getitem__(self, g):
        import torch
        fi, rec = self.index[g]
        if self.w["fmt"] == "npz":
            x = np.load(io.BytesIO(self._get(self.files[fi])))["x"]
            assert x.dtype == np.uint8
        else:
            if self._lib is None:
                self._lib = ctypes.CDLL(self.crc_lib)
                self._lib.lade_crc32c.restype = ctypes.c_uint32
                self._lib.lade_crc32c.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32]
            off, n = rec
            b = self._get(self.files[fi], (off, n + 16))
            (ln,) = struct.unpack_from("<Q", b, 0)
            lc, = struct.unpack_from("<I", b, 8)
            dc, = struct.unpack_from("<I", b, 12 + ln)
            if _masked(self._lib.lade_crc32c(b[:8], 8, 0)) != lc or \
                    _masked(self._lib.lade_crc32c(b[12:12 + ln], ln, 0)) != dc:
                raise RuntimeError("bad CRC in %s at %d" % (self.files[fi], off))
        return torch.from_numpy(self.resized), g


def _ref_rank(rank, world, port, cfg, result_q):
    import queue
    import warnings
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Sampler
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    evictq = queue.Queue()

    def evictor():  # as lade's: a thread of its own drops the pages, outside the measured step
        while True:
            f = evictq.get()
            if f is None:
                return
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    ev = threading.Thread(target=evictor, daemon=True)
    ev.start()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    w = cfg["w"]
    ds = RefDataset(w, cfg["files"], cfg["index"], cfg["resize"], cfg.get("s3"), cfg.get("crc_lib"))
    T = len(ds)
    P = math.ceil(T / world)
    block = list(range(rank * P, min((rank + 1) * P, T)))

    class Block(Sampler):  # DLIO's dlio_sampler: the rank's block, in order
        def __iter__(self):
            return iter(block)

        def __len__(self):
            return len(block)

    loader = DataLoader(ds, batch_size=w["batch"], sampler=Block(None), num_workers=w["threads"], prefetch_factor=1,
                        persistent_workers=True, drop_last=True)
    steps = min(T // w["batch"] // world, cfg["cap"])
    dist.barrier()
    aus = []
    for e in range(cfg["epochs"]):
        load, proc, compute = [], [], []
        t0 = time.time()
        t_load = t0
        it = iter(loader)
        for s in range(steps):
            batch, idx = next(it)
            load.append(time.time() - t_load)
            tc = time.time()
            time.sleep(w["compute"])
            compute.append(time.time() - tc)
            proc.append(time.time() - t_load)
            if cfg["evict"]:
                for fi in sorted({ds.index[int(g)][0] for g in idx}):
                    evictq.put(cfg["files"][fi])
            dist.barrier()
            t_load = time.time()
        t1 = time.time()
        aus.append(dlio_au(load, proc, compute, t0, t1, w["batch"])[0])
        dist.barrier()
        del it
    all_aus = [None] * world
    dist.all_gather_object(all_aus, aus)
    evictq.put(None)
    if rank == 0:
        result_q.put([float(np.mean([a[e] for a in all_aus])) for e in range(cfg["epochs"])])
    dist.destroy_process_group()


def run_reference(cfg, n):
    import torch.multiprocessing as mp
    from s3env import free_port
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(_ref_rank, args=(n, free_port(), cfg, q), nprocs=n, join=True, start_method="spawn")
    return q.get()


# ------------------------------------------------------------------ lade

def run_lade(lade, w, data_folder, n, epochs, out, plan=None, s3env=None, evict=False, cap=True, cache_bytes=0):
    cmd = ["mpirun", "--oversubscribe", "-np", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    cmd += [lade, "dlio", "run", os.path.join(ROOT, "tests", "dlio", "workloads", w["yaml"]),
            "dataset.data_folder=" + data_folder, "dataset.num_files_train=%d" % w["files"],
            "dataset.num_samples_per_file=%d" % w["spf"], "dataset.record_length_bytes=%d" % w["rl"],
            "dataset.record_length_bytes_stdev=%d" % w["stdev"], "dataset.record_length_bytes_resize=%d" % w["resize"],
            "train.epochs=%d" % epochs, "output.folder=" + out] + w["extra"]
    if cap and STEPS_CAP < 1 << 30:
        cmd.append("train.total_training_steps=%d" % STEPS_CAP)
    if evict:
        cmd.append("lade.evict_cache=1")
    if plan:
        cmd += ["lade.plan=" + plan, "lade.ranks_per_node=%d" % (n // 4), "lade.cache_mem_bytes=%d" % cache_bytes]
    env = dict(os.environ)
    if s3env:
        env.update(s3env.lade_env())
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if r.returncode:
        raise RuntimeError("lade dlio run failed: %s\n%s\n%s" % (" ".join(cmd), r.stdout[-2000:], r.stderr[-3000:]))
    return json.load(open(os.path.join(out, "summary.json")))["metric"]["train_au_percentage"]


# ------------------------------------------------------------------ setup

def ceiling_local(files):
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    from concurrent.futures import ThreadPoolExecutor
    t = time.time()

    def read(f):
        n = 0
        with open(f, "rb", buffering=0) as h:
            while True:
                b = h.read(4 << 20)
                if not b:
                    return n
                n += len(b)
    with ThreadPoolExecutor(16) as ex:
        total = sum(ex.map(read, files))
    return total / (time.time() - t)


def ceiling_s3(env, keys):
    from concurrent.futures import ThreadPoolExecutor
    import boto3
    from botocore.config import Config
    c = boto3.client("s3", endpoint_url=env.endpoint, aws_access_key_id=env.access_key,
                     aws_secret_access_key=env.secret_key, region_name=env.region,
                     config=Config(max_pool_connections=16, s3={"addressing_style": "path"}))
    t = time.time()
    with ThreadPoolExecutor(16) as ex:
        total = sum(ex.map(lambda k: len(c.get_object(Bucket=env.bucket, Key=k)["Body"].read()), keys))
    return total / (time.time() - t)


def main():
    global STEPS_CAP
    ap = argparse.ArgumentParser()
    ap.add_argument("--lade", default=os.path.join(ROOT, "build", "lade"))
    ap.add_argument("--workloads", default="unet3d,resnet50")
    ap.add_argument("--setups", default="local,s3")
    ap.add_argument("--counts", default="1,2,4,8,16")
    ap.add_argument("--epochs", type=int, default=5, help="epochs per run (5: the workload files' train.epochs)")
    ap.add_argument("--s3-mb-s", type=float, default=100.0)
    ap.add_argument("--skip", default="", help="readers to skip: reference,lade-dlio,lade-plan")
    ap.add_argument("--json", default="")
    ap.add_argument("--keep", action="store_true", help="keep the data and every run's output folder (printed)")
    ap.add_argument("--steps-cap", type=int, default=0,
                    help="steps per epoch for reference and lade-dlio (0: DLIO's whole epoch); a capped epoch's "
                         "read-ahead is discarded by both, which costs a remote link bandwidth")
    a = ap.parse_args()
    STEPS_CAP = a.steps_cap if a.steps_cap > 0 else 1 << 30
    lade = os.path.abspath(a.lade)
    counts = [int(x) for x in a.counts.split(",")]
    skip = set(a.skip.split(",")) if a.skip else set()
    crc_lib = _crc32c_lib(lade)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("CPU: %s, %d cores; counts %s, %d epochs, steps per epoch capped at %d (reference, lade-dlio)" %
          (cpu, os.cpu_count(), counts, a.epochs, STEPS_CAP), flush=True)
    results = []
    tmp = tempfile.mkdtemp(prefix="lade-dlio-bench-")
    try:
        for wname in a.workloads.split(","):
            w = WORKLOADS[wname]
            data = os.path.join(tmp, wname)
            gen = [lade, "dlio", "datagen", os.path.join(ROOT, "tests", "dlio", "workloads", w["yaml"]),
                   "dataset.data_folder=" + data, "dataset.num_files_train=%d" % w["files"],
                   "dataset.num_samples_per_file=%d" % w["spf"], "dataset.record_length_bytes=%d" % w["rl"],
                   "dataset.record_length_bytes_stdev=%d" % w["stdev"]]
            subprocess.run(gen, check=True, capture_output=True)
            # the data files (lade's datagen writes a sidecar index beside each TFRecord file: uploaded with it,
            # used by lade's reader, never read by the reference, as DLIO lists only *.FORMAT)
            names = sorted(os.listdir(os.path.join(data, "train")))
            files = [os.path.join(data, "train", f) for f in names if f.endswith("." + w["fmt"])]
            sidecars = [os.path.join(data, "train", f) for f in names if f.endswith(".ladeidx")]
            sizes = [os.path.getsize(f) for f in files]
            if w["fmt"] == "npz":
                index = [(i, None) for i in range(len(files))]
                mean_rec = sum(sizes) / len(files)
            else:
                index = []
                for i, f in enumerate(files):
                    index += [(i, r) for r in tfrecord_index(open(f, "rb").read())]
                mean_rec = sum(sizes) / len(index)
            dataset_bytes = sum(sizes)
            demand = w["batch"] * mean_rec / w["compute"]
            for setup in a.setups.split(","):
                env = None
                if setup == "s3":
                    from s3env import S3Env, missing
                    why = missing()
                    if why:
                        print("s3 skipped: %s" % why)
                        continue
                    env = S3Env(latency_ms=20, verify_sigv4=False)
                    env.start()
                    keys = []
                    for f in files:
                        k = "%s/train/%s" % (wname, os.path.basename(f))
                        env.put(k, open(f, "rb").read())
                        keys.append(k)
                    for f in sidecars:
                        env.put("%s/train/%s" % (wname, os.path.basename(f)), open(f, "rb").read())
                    env.proxy(bandwidth_mb_s=a.s3_mb_s)
                    bw = ceiling_s3(env, keys)
                    folder = "s3://%s/%s" % (env.bucket, wname)
                    s3 = dict(endpoint=env.endpoint, key=env.access_key, secret=env.secret_key, bucket=env.bucket)
                    ref_files = keys
                else:
                    bw = ceiling_local(files)
                    folder = data
                    s3 = None
                    ref_files = files
                ceil = bw / demand
                print("\n== %s, %s: storage %.0f MB/s, one accelerator needs %.1f MB/s: ceiling %.1f accelerators" %
                      (wname, setup, bw / 1e6, demand / 1e6, ceil), flush=True)
                row = dict(workload=wname, setup=setup, storage_mb_s=bw / 1e6, demand_mb_s=demand / 1e6,
                           ceiling=ceil, au={})
                cfg = dict(w=w, files=ref_files, index=index, resize=w["resize"], s3=s3, crc_lib=crc_lib,
                           epochs=a.epochs, cap=STEPS_CAP, evict=setup == "local")
                failed = set()  # a reader below 90% at n is not run at larger n (its maximum is known)
                for n in counts:
                    for reader in ("reference", "lade-dlio", "lade-plan"):
                        if reader in skip or reader in failed or (reader == "lade-plan" and n % 4):
                            continue
                        out = os.path.join(tmp, "out-%s-%s-%s-%d" % (wname, setup, reader, n))
                        t = time.time()
                        try:
                            if reader == "reference":
                                aus = run_reference(cfg, n)
                            elif reader == "lade-dlio":
                                aus = run_lade(lade, w, folder, n, a.epochs, out, s3env=env, evict=setup == "local")
                            else:
                                aus = run_lade(lade, w, folder, n, a.epochs, out, plan="locality", s3env=env,
                                               evict=setup == "local", cap=False, cache_bytes=dataset_bytes // 2)
                        except Exception as ex:  # a reader that cannot run at n is reported, not fatal
                            print("  %-10s n=%-3d failed: %s" % (reader, n, str(ex)[-600:]), flush=True)
                            failed.add(reader)
                            continue
                        later = aus[1:] if len(aus) > 1 else aus
                        au = float(np.mean(later)) if reader == "lade-plan" else float(np.mean(aus))
                        row["au"].setdefault(reader, {})[n] = au
                        if au < 90:
                            failed.add(reader)
                        print("  %-10s n=%-3d AU %6.2f%%  (epochs %s)  %.0f s" %
                              (reader, n, au, " ".join("%.1f" % x for x in aus), time.time() - t), flush=True)
                for reader, by_n in row["au"].items():
                    ok = [n for n in sorted(by_n) if by_n[n] >= 90]
                    # the most accelerators such that every count up to it passed
                    best = 0
                    for n in sorted(by_n):
                        if by_n[n] >= 90:
                            best = n
                        else:
                            break
                    row.setdefault("max_at_90", {})[reader] = best
                    del ok
                print("  max accelerators at AU >= 90%%: %s (storage ceiling %.1f)" %
                      (", ".join("%s %d" % kv for kv in row.get("max_at_90", {}).items()), ceil), flush=True)
                m = row.get("max_at_90", {})
                if m.get("reference") is not None and m.get("lade-dlio") is not None:
                    print("  lade-dlio / reference accelerators: %d / %d" % (m["lade-dlio"], m["reference"]))
                if m.get("lade-dlio"):
                    print("  lade-dlio / storage ceiling: %.2f" % (m["lade-dlio"] / ceil))
                if m.get("lade-plan") is not None and m.get("lade-dlio"):
                    print("  lade-plan / lade-dlio accelerators: %.2fx" % (m["lade-plan"] / m["lade-dlio"]))
                results.append(row)
                if env:
                    env.stop()
    finally:
        if a.keep:
            print("kept: %s (data, and out-WORKLOAD-SETUP-READER-N with each run's per-step logs)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        json.dump(results, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
