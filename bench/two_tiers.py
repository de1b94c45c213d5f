#!/usr/bin/env python3
"""solar's two tiers in the loader against memory alone, the same memory, in one run (bench/RESULTS.md).

A dataset larger than the memory cache (`lade gen jpeg`) in the project's S3 test server (s3rver) behind
tests/s3/faultproxy.js's bandwidth-limited link; one learner, `plan=solar`, imagenet-train, the same
`cache_mem_bytes` (a quarter of the dataset) in every variant:

  memory       cache_mem_bytes alone: solar plans one tier
  two tiers    the same memory over a disk tier of half the dataset (cache_dir + cache_disk_bytes): solar
               plans both as one hierarchy (docs/plan.md, Two tiers)
  lru          plan=regular with the same memory and disk as LRU tiers (what a cache without a plan does)

Per epoch: time, storage bytes, reads from memory and from disk; the two-tier plan's admits and moves
(`lade bench --json`'s plan_admits_*/plan_moves_*).

    /usr/bin/python3 bench/two_tiers.py [--lade build/lade] [--count 1000] [--bandwidth 16]

Needs node + s3rver (tests/s3), boto3.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "s3"))
from s3env import S3Env, missing  # noqa: E402


def bench(a, src, sets, env):
    args = [a.lade, "bench", src, "--epochs", str(a.epochs), "--batch-size", str(a.batch), "--threads", "2",
            "--transform", "imagenet-train", "--no-checksum", "--no-ceiling", "--json",
            "--set", "drop_last=true", "--set", "seed=3"]
    for k, v in sets:
        args += ["--set", "%s=%s" % (k, v)]
    r = subprocess.run(args, env=dict(os.environ, **env), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("lade bench failed (%d): %s\n%s" % (r.returncode, " ".join(args), r.stderr[-3000:]))
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lade", default=os.path.join(HERE, "..", "build", "lade"))
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--bandwidth", type=float, default=16.0, help="MB/s of the bucket's link")
    a = ap.parse_args()
    why = missing()
    if why:
        print("skipped: %s" % why)
        return 77
    a.lade = os.path.abspath(a.lade)
    tmp = tempfile.mkdtemp(prefix="lade-twotiers-")
    data = os.path.join(tmp, "jpeg")
    subprocess.run([a.lade, "gen", "jpeg", data, "--count", str(a.count)], check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(data, "*", "*")))
    size = sum(os.path.getsize(f) for f in files)
    mean = size / len(files)
    mem = int(size / 4 * 1.05)        # a quarter of the dataset, the entries' charge included
    disk = int(len(files) / 2) * int((mean + 64 + 4095) // 4096 * 4096)  # half the dataset in 4 KiB blocks
    print("dataset: %d JPEGs, mean %.0f bytes, %.1f MB; memory %.1f MB (a quarter), disk %.1f MB (half); "
          "one learner, batch %d, %d epochs, 2 threads; link %.1f MB/s; machine: %d cores"
          % (len(files), mean, size / 1e6, mem / 1e6, disk / 1e6, a.batch, a.epochs, a.bandwidth, os.cpu_count()))
    cache = os.path.join(tmp, "cache")
    variants = [
        ("memory", [("plan", "solar"), ("cache_mem_bytes", mem)]),
        ("two tiers", [("plan", "solar"), ("cache_mem_bytes", mem), ("cache_dir", cache), ("cache_disk_bytes", disk)]),
        ("lru", [("cache_mem_bytes", mem), ("cache_dir", cache), ("cache_disk_bytes", disk), ("cache_policy", "lru"),
                 ("prefetcher", "off")]),
    ]
    out = {}
    with S3Env() as s3:
        s3.put_many({"train/" + os.path.relpath(f, data): open(f, "rb").read() for f in files})
        s3.proxy(bandwidth_mb_s=a.bandwidth)
        src = "s3://%s/train" % s3.bucket
        print("  %-10s %5s %8s %9s %7s %7s %7s" % ("variant", "epoch", "time s", "stor MB", "memory", "disk",
                                                   "storage"))
        for name, sets in variants:
            shutil.rmtree(cache, ignore_errors=True)
            j = bench(a, src, sets, s3.lade_env())
            rows = []
            for e in j["epochs"]:
                sbs = e["samples_by_source"]
                rows.append((e["seconds"], e["bytes_by_source"][0] / 1e6, sbs[1], sbs[2], sbs[0]))
                print("  %-10s %5d %8.2f %9.1f %7d %7d %7d" % ((name, e["epoch"]) + rows[-1]))
            out[name] = (rows, j)
    (m, _), (t, tj), (l, _) = out["memory"], out["two tiers"], out["lru"]
    later = lambda rows, k: sum(r[k] for r in rows[1:])  # noqa: E731
    print("  epochs 1..%d: two tiers %.2f s, memory alone %.2f s (%.2fx), lru tiers %.2f s (%.2fx); storage %.1f, "
          "%.1f and %.1f MB" % (a.epochs - 1, later(t, 0), later(m, 0), later(m, 0) / later(t, 0), later(l, 0),
                                later(l, 0) / later(t, 0), later(t, 1), later(m, 1), later(l, 1)))
    print("  two tiers: admits to memory %s, to disk %s; moves up %s, down %s; fallbacks %s" % (
        tj.get("plan_admits_mem", "?"), tj.get("plan_admits_disk", "?"), tj.get("plan_moves_up", "?"),
        tj.get("plan_moves_down", "?"), sum(e.get("fallbacks", 0) for e in tj["epochs"])))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
