#!/usr/bin/env python3
"""Planned caches under torchrun, no mpirun anywhere (bench/RESULTS.md).

`torchrun --standalone --nproc_per_node=4` starts 4 `lade bench` processes;
the planned kinds move samples between them over UCX (transport=auto, the
addresses exchanged through a rendezvous folder). ranks_per_node=1 makes
each rank its own "node" with its own cache, as on 4 machines (one machine
here), so the peers' samples cross the transport.

  storage-bound   ImageNet-like JPEGs (`lade gen jpeg`, imagenet-train) in the
                  project's S3 test server behind tests/s3/faultproxy.js's
                  shared link (--bandwidth MB/s): `locality` against `regular`
                  (each with a memory cache of N/p samples per rank), per
                  epoch the slowest rank's time, storage and peer bytes summed
                  over the ranks, and whether every rank's counts equal the
                  plan's; target: locality's epochs after the first >= 3x
                  shorter.
  overhead        the same JPEGs on local disk: locality against regular,
                  alternated --reps times, medians of epochs 1..; bound 5%.

The warm-restart half of the comparison is bench/warm_restart.py (run it
under torchrun: it takes the rendezvous folder from its CACHE_ROOT).

    /usr/bin/python3 bench/torchrun_plans.py [--lade build/lade] [--count 1000] [--bandwidth 8]

Needs torchrun (python3-torch), a build with UCX, node + s3rver (tests/s3), boto3.
"""
import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "s3"))
from plan_mpi import mpirun, summarise  # noqa: E402
from s3env import S3Env, missing  # noqa: E402


def torchrun(np_, lade, source, plan, cache_bytes, epochs, batch, extra, env, tmp):
    """plan_mpi's runner under torchrun: UCX with the addresses met in tmp/rdv, a cache per rank."""
    rdv = os.path.join(tmp, "rdv")
    shutil.rmtree(rdv, ignore_errors=True)
    extra = [("rendezvous_dir", rdv), ("ranks_per_node", 1)] + list(extra)
    return mpirun(np_, lade, source, plan, cache_bytes, epochs, batch, extra, env, tmp, launcher="torchrun")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lade", default=os.path.join(HERE, "..", "build", "lade"))
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--bandwidth", type=float, default=8.0, help="MB/s of the bucket's shared link")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    why = missing() or (None if shutil.which("torchrun") else "no torchrun (python3-torch)")
    if why:
        print("skipped: %s" % why)
        return 77
    tmp = tempfile.mkdtemp(prefix="lade-torchrun-")
    data = os.path.join(tmp, "jpeg")
    subprocess.run([a.lade, "gen", "jpeg", data, "--count", str(a.count)], check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(data, "*", "*")))
    mean = sum(os.path.getsize(f) for f in files) / len(files)
    per_rank = -(-a.count // a.np)
    full = int((per_rank + 2) * (mean + 64) * 1.05)
    print("dataset: %d JPEGs, mean %.0f bytes, %.1f MB; torchrun, %d ranks, batch %d each, %d epochs; "
          "memory cache %.1f MB per rank; machine: %d cores" % (len(files), mean, len(files) * mean / 1e6, a.np,
                                                                 a.batch, a.epochs, full / 1e6, os.cpu_count()))

    E = 4
    print("\n== fast local storage, the same memory cache: %d alternated reps, %d epochs" % (a.reps, E))
    steady = {"regular": [], "locality": []}
    for _ in range(a.reps):
        for plan in ("regular", "locality"):
            ranks, _w = torchrun(a.np, a.lade, data, plan, full, E, a.batch, [], {}, tmp)
            t = [max(r["epochs"][e]["seconds"] for r in ranks) for e in range(E)]
            steady[plan].append(sum(t[1:]))
    med = {k: statistics.median(v) for k, v in steady.items()}
    for k, v in steady.items():
        print("  %-9s epochs 1-%d: %s s (median %.2f)" % (k, E - 1, " ".join("%.2f" % x for x in v), med[k]))
    print("  locality / regular = %.3f (bound: <= 1.05)" % (med["locality"] / med["regular"]))

    with S3Env() as s3:
        s3.put_many({"train/" + os.path.relpath(f, data): open(f, "rb").read() for f in files})
        env = s3.lade_env()
        s3.proxy(bandwidth_mb_s=a.bandwidth)
        src = "s3://%s/train" % s3.bucket
        print("\n== storage-bound: S3 server behind a shared %.1f MB/s link" % a.bandwidth)
        print("  %-9s %5s %8s %8s %8s %8s %7s" % ("plan", "epoch", "time s", "stor MB", "peer MB", "wait s", "=plan"))
        results = {}
        for plan in ("regular", "locality"):
            ranks, _w = torchrun(a.np, a.lade, src, plan, full, a.epochs, a.batch, [], env, tmp)
            rows = summarise(ranks)
            results[plan] = rows
            for r in rows:
                print("  %-9s %5d %8.2f %8.1f %8.2f %8.2f %7s" % (
                    plan, r["epoch"], r["seconds"], r["storage_mb"], r["peer_mb"], r["wait_s"],
                    {None: "-", True: "yes", False: "NO"}[r["matches_plan"]]))
        reg = statistics.mean(r["seconds"] for r in results["regular"][1:])
        loc = statistics.mean(r["seconds"] for r in results["locality"][1:])
        print("  epochs 1..%d: locality %.2f s, regular %.2f s: %.1fx shorter (target >= 3x); storage after epoch 0: "
              "locality %.1f MB, regular %.1f MB" % (
                  a.epochs - 1, loc, reg, reg / loc, sum(r["storage_mb"] for r in results["locality"][1:]),
                  sum(r["storage_mb"] for r in results["regular"][1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
