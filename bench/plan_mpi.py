#!/usr/bin/env python3
"""Every plan for real across MPI ranks (bench/RESULTS.md), in one run:

  storage-bound   ImageNet-like JPEGs (`lade gen jpeg`, imagenet-train transform)
                  in the project's S3 test server (s3rver) behind
                  tests/s3/faultproxy.js, whose shared link (--bandwidth MB/s,
                  all ranks' GETs one after another) makes `regular` storage-
                  bound. `mpirun -np 4 lade bench s3://... --plan P` for regular,
                  distcache, locality and solar, aggregate memory cache holding
                  the dataset, --epochs epochs: per epoch the slowest rank's
                  time, storage and peer bytes summed over ranks, consumer wait;
                  beside them `lade model`'s predicted epoch times (the
                  model of Accelerating Data Loading, paper 000,
                  R = bandwidth / mean JPEG size, U measured here from the
                  local run below), and whether every rank's cache/peer/storage
                  counts equal the plan's prediction.
  half cache      the aggregate cache at half the dataset: solar and
                  regular+belady, storage samples per epoch (measured = plan).
  overhead        fast local storage (the same JPEGs on local disk): locality
                  against regular, alternated --reps times, medians of the
                  total time; the bound is 5%.

    /usr/bin/python3 bench/plan_mpi.py [--lade build/lade] [--count 1000] [--bandwidth 8]

Needs mpirun (openmpi-bin), node + s3rver (tests/s3), boto3. Results go in bench/RESULTS.md.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "s3"))
from s3env import S3Env, missing  # noqa: E402


def mpirun(np_, lade, source, plan, cache_bytes, epochs, batch, extra, env, tmp, checksum=False, launcher="mpirun"):
    """`lade bench` on np_ ranks started by mpirun (or torchrun, launcher="torchrun": no MPI anywhere), each
    rank's JSON in tmp/out.RANK; returns the ranks' JSON and the wall time."""
    for f in glob.glob(os.path.join(tmp, "out.*")):
        os.remove(f)
    args = [lade, "bench", source, "--plan", plan, "--epochs", str(epochs), "--batch-size", str(batch),
            "--transform", "imagenet-train", "--threads", "1"] + ([] if checksum else ["--no-checksum"]) + ["--json",
            "--set", "drop_last=true", "--set", "cache_mem_bytes=%d" % cache_bytes]
    for k, v in extra:
        args += ["--set", "%s=%s" % (k, v)]
    if launcher == "torchrun":  # Debian's torch 1.13 needs --redirects/--tee (docs/python.md)
        cmd = ["torchrun", "--standalone", "--nproc_per_node=%d" % np_, "--redirects", "2", "--tee", "2",
               "--no_python"]
        rank_var = "RANK"
    else:
        cmd = ["mpirun", "--oversubscribe", "-np", str(np_)]
        if os.getuid() == 0:
            cmd.append("--allow-run-as-root")
        for k in env:
            cmd += ["-x", k]
        rank_var = "OMPI_COMM_WORLD_RANK"
    script = 'exec "$@" > "%s/out.$%s"' % (tmp, rank_var)
    t0 = time.time()
    r = subprocess.run(cmd + ["sh", "-c", script, "sh"] + args, env=dict(os.environ, **env),
                       capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s\n%s" % (launcher, r.returncode, " ".join(args), r.stderr[-3000:]))
    ranks = [json.load(open(os.path.join(tmp, "out.%d" % i))) for i in range(np_)]
    return ranks, wall


def summarise(ranks):
    """Per epoch: slowest rank's time, sums over ranks, and whether measured == predicted."""
    out = []
    for e in range(len(ranks[0]["epochs"])):
        es = [r["epochs"][e] for r in ranks]
        match = all((x.get("cache"), x.get("peer"), x.get("storage")) ==
                    (x.get("predicted_cache"), x.get("predicted_peer"), x.get("predicted_storage"))
                    for x in es) if "cache" in es[0] else None
        out.append({
            "epoch": e,
            "seconds": max(x["seconds"] for x in es),
            "storage_mb": sum(x["bytes_by_source"][0] for x in es) / 1e6,
            "storage_samples": sum(x["samples_by_source"][0] for x in es),
            "peer_mb": sum(x["peer_bytes"] for x in es) / 1e6,
            "peer_samples": sum(x.get("peer", 0) for x in es),
            "cache_samples": sum(x["samples_by_source"][1] for x in es),
            "wait_s": sum(x["wait_s"] for x in es),
            "matches_plan": match,
            "fallbacks": sum(x.get("fallbacks", 0) for x in es),
        })
    return out


def model(lade, D, p, R, U):
    r = subprocess.run([lade, "model", "--D", str(D), "--p", str(p), "--V", "1e9", "--R", "%.3f" % R,
                        "--U", "%.3f" % U, "--alpha", "1", "--batch-size", "16"], capture_output=True, text=True)
    pred = {}
    for line in r.stdout.splitlines():
        if line.strip().startswith("epoch time"):
            for part in line.split(":", 1)[1].split(","):
                name, val = part.split()[:2]
                pred[name] = float(val)
    return pred, r.stdout.strip().splitlines()[0] if r.stdout else ""


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
    why = missing()
    if why:
        print("skipped: %s" % why)
        return 77
    tmp = tempfile.mkdtemp(prefix="lade-planmpi-")
    data = os.path.join(tmp, "jpeg")
    subprocess.run([a.lade, "gen", "jpeg", data, "--count", str(a.count)], check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(data, "*", "*")))
    mean = sum(os.path.getsize(f) for f in files) / len(files)
    per_rank = -(-a.count // a.np)
    full = int((per_rank + 2) * (mean + 64) * 1.05)  # a little over N/p mean-sized entries
    half = int((per_rank // 2) * (mean + 64))
    print("dataset: %d JPEGs, mean %.0f bytes, %.1f MB; %d ranks, batch %d each, %d epochs; machine: %d cores"
          % (len(files), mean, len(files) * mean / 1e6, a.np, a.batch, a.epochs, os.cpu_count()))

    # fast local storage first: U for the model, and the overhead comparison
    # (epochs 1.. are the steady state; epoch 0 also holds the loader's start:
    # listing, and under the transport MPI's initialisation and the settings check)
    E = 5
    for label, cache in (("no cache (pure planning and routing overhead)", 0),
                         ("the same memory cache (N/p per rank)", full)):
        print("\n== fast local storage (no bucket), %s: %d alternated reps, %d epochs" % (label, a.reps, E))
        cfgs = [("regular", "regular", []), ("locality", "locality", []),
                ("locality, transport=local", "locality", [("transport", "local")])]
        steady = {c[0]: [] for c in cfgs}
        first = {c[0]: [] for c in cfgs}
        for _ in range(a.reps):
            for name, plan, extra in cfgs:
                ranks, _w = mpirun(a.np, a.lade, data, plan, cache, E, a.batch, extra, {}, tmp)
                t = [max(r["epochs"][e]["seconds"] for r in ranks) for e in range(E)]
                steady[name].append(sum(t[1:]))
                first[name].append(t[0])
        med = {k: statistics.median(v) for k, v in steady.items()}
        for k, v in steady.items():
            print("  %-26s epochs 1-%d: %s s (median %.2f); epoch 0 median %.2f s" % (
                k, E - 1, " ".join("%.2f" % x for x in v), med[k], statistics.median(first[k])))
        for k in ("locality", "locality, transport=local"):
            print("  %s / regular = %.3f (bound: <= 1.05)" % (k, med[k] / med["regular"]))
        if cache == 0:
            U = a.count / a.np / (med["regular"] / (E - 1))

    with S3Env() as s3:
        s3.put_many({"train/" + os.path.relpath(f, data): open(f, "rb").read() for f in files})
        env = s3.lade_env()
        s3.proxy(bandwidth_mb_s=a.bandwidth)
        src = "s3://%s/train" % s3.bucket
        R = a.bandwidth * 1e6 / mean
        pred, head = model(a.lade, a.count, a.np, R, U)
        print("\n== storage-bound: S3 server behind a shared %.1f MB/s link, aggregate cache = the dataset" % a.bandwidth)
        print("  model: %s" % head)
        print("  %-10s %5s %8s %10s %8s %8s %8s %7s %6s" % ("plan", "epoch", "time s", "model s", "stor MB",
                                                            "peer MB", "wait s", "=plan", "fallbk"))
        results = {}
        runs = [("regular", "regular", []), ("distcache", "distcache", []), ("locality", "locality", []),
                ("solar", "solar", []), ("solar+imb16", "solar", [("plan_imbalance", 16)])]
        for label, plan, extra in runs:
            ranks, wall = mpirun(a.np, a.lade, src, plan, full, a.epochs, a.batch, extra, env, tmp)
            rows = summarise(ranks)
            results[label] = rows
            for r in rows:
                m = pred.get(plan, pred.get("locality") if plan == "solar" else None)
                print("  %-10s %5d %8.2f %10s %8.1f %8.2f %8.2f %7s %6d" % (
                    label, r["epoch"], r["seconds"], "%.2f" % m if m is not None else "-", r["storage_mb"],
                    r["peer_mb"], r["wait_s"], {None: "-", True: "yes", False: "NO"}[r["matches_plan"]],
                    r["fallbacks"]))
        reg = statistics.mean(r["seconds"] for r in results["regular"][1:])
        sim = subprocess.run([a.lade, "simulate", "--plan", "locality", "--samples", str(a.count), "--learners",
                              str(a.np), "--batch-size", str(a.batch), "--epochs", str(a.epochs), "--cache",
                              str(min(full // int(mean + 64), a.count))], capture_output=True, text=True).stdout
        imbal = [float(line.split()[7]) for line in sim.splitlines()[2:] if line.split() and line.split()[0].isdigit()]
        print("\n  after the first epoch (mean of epochs 1..%d):" % (a.epochs - 1))
        for plan in ("distcache", "locality", "solar", "solar+imb16"):
            t = statistics.mean(r["seconds"] for r in results[plan][1:])
            sto = sum(r["storage_mb"] for r in results[plan][1:])
            G = a.batch * a.np
            steps = a.count // G
            peer = statistics.mean(r["peer_samples"] for r in results[plan][1:]) / max(steps, 1) / G * 100
            print("  %-10s epoch %.2f s = %.1fx shorter than regular (target >= 3x); storage after epoch 0: %.1f MB "
                  "(last epoch %.2f MB); peer samples per step: %.1f%% of the global batch" % (
                      plan, t, reg / t, sto, results[plan][-1]["storage_mb"], peer))
        print("  the simulator's imbalance for locality, epochs 1..%d: %s %% of the global batch" % (
            a.epochs - 1, " ".join("%.2f" % x for x in imbal[1:])))

        print("\n== half cache: the aggregate cache holds half the dataset")
        for plan in ("regular+belady", "solar"):
            ranks, wall = mpirun(a.np, a.lade, src, plan, half, a.epochs, a.batch, [], env, tmp)
            rows = summarise(ranks)
            print("  %-15s storage samples per epoch: %s; measured = plan: %s" % (
                plan, " ".join(str(r["storage_samples"]) for r in rows), all(r["matches_plan"] for r in rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
