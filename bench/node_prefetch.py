#!/usr/bin/env python3
"""The DELI prefetcher's first batch and requests, one rank and a node's ranks, two builds side by side
(bench/RESULTS.md). s3rver on loopback behind tests/s3/faultproxy.js with --latency-ms per request holds
--count tiny objects; `lade bench s3://lade/many` reads them with cache_dir set (the prefetcher on, auto)
for --epochs epochs:

  1 rank          `lade bench` alone: time to the first batch, GETs at the server
  N ranks         under `mpirun -np N` (one node, the ranks sharing cache_dir: the node's disk folder):
                  the slowest rank's first batch, GETs at the server in all and in the second epoch

Each case runs --reps times, builds alternated (A B, B A, ...); prints the medians.

    /usr/bin/python3 bench/node_prefetch.py --a /tmp/base/build/lade --b build/lade [--np 4] [--reps 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "s3"))
import s3env  # noqa: E402


def run(env, lade, np_, epochs):
    """(slowest first batch ms, GETs at the server, GETs the ranks counted in the second epoch)."""
    with tempfile.TemporaryDirectory(prefix="lade-nodepf-") as tmp:
        s = dict(env.lade_settings(), listing_ttl="3600", raw_size="8", cache_dir=os.path.join(tmp, "cache"))
        args = [lade, "bench", "s3://lade/many", "--transform", "raw", "--batch-size", "25", "--epochs",
                str(epochs), "--threads", "2", "--json", "--no-ceiling"]
        for kv in s.items():
            args += ["--set", "%s=%s" % kv]
        out_dir = os.path.join(tmp, "out")
        if np_ > 1:
            args = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_), "--output-filename",
                    out_dir] + args
        env.reset()
        r = subprocess.run(args, capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, **env.lade_env()))
        if r.returncode:
            raise SystemExit("failed: %s\n%s" % (" ".join(args[:8]), (r.stdout + r.stderr)[-2000:]))
        text = r.stdout if np_ == 1 else ""
        for root, _, files in os.walk(out_dir):
            text += "".join(open(os.path.join(root, f)).read() + "\n" for f in files if f == "stdout")
        runs = [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]
        second = sum(x["epochs"][1]["get_requests"] for x in runs) if epochs > 1 else 0
        return max(x["first_batch_ms"] for x in runs), env.counts().get("get", 0), second


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="lade CLI of build A")
    ap.add_argument("--b", required=True, help="lade CLI of build B")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--count", type=int, default=1100)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--latency-ms", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    why = s3env.missing()
    if why:
        raise SystemExit("needs the test S3 server: " + why)
    cases = [("1 rank", 1)] + ([("%d ranks, one node" % a.np, a.np)] if a.np > 1 and shutil.which("mpirun") else [])
    with s3env.S3Env() as env:
        env.put_many({"many/k%05d" % i: b"%d" % i for i in range(a.count)}, workers=16)
        env.proxy(latency_ms=a.latency_ms)
        print("%d objects, %d ms per request, %d epochs, cache_dir (the prefetcher on); medians of %d" %
              (a.count, a.latency_ms, a.epochs, a.reps))
        for name, np_ in cases:
            res = {"A": [], "B": []}
            for rep in range(a.reps):
                for which in (("A", "B") if rep % 2 == 0 else ("B", "A")):
                    res[which].append(run(env, a.a if which == "A" else a.b, np_, a.epochs))
            for which in ("A", "B"):
                v = res[which]
                med = [statistics.median(x[i] for x in v) for i in range(3)]
                print("%-18s %s  first batch %7.0f ms   GETs %5d   in the second epoch %4d   (GETs per rep: %s)" %
                      (name, which, med[0], med[1], med[2], ", ".join(str(x[1]) for x in v)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
