#!/usr/bin/env python3
"""first_batch_remote.py - time to the first batch on many remote tar shards, with sidecar indexes
(SHARD.tar.ladeidx, written by `lade index`: one GET per shard and a few Ranges bind it) and without
(today's first open: every shard streamed once to index it), in one run (docs/sources.md, "Sidecar
indexes").

nginx (tests/http/httpenv.py) serves two folders holding the same shards (hard links), one with
sidecars; tests/s3/faultproxy.js in front adds --latency-ms per request and a shared link of
--link-mb-s. Each case opens a fresh loader (no index_dir, no cache_dir) on a list file of the shards'
URLs and takes one batch.

    LADE_BUILD=build python3 bench/first_batch_remote.py [--shards 1000] [--latency-ms 20] [--ranks 4]

With --index-jobs J,K,... it then times `lade index --to DIR URL...` over the shards without sidecars (their
sidecars made remotely, for upload) with each --jobs value, and checks the files equal the local ones.

With --ranks N it then opens the shards with sidecars from N processes at once, as the ranks of one node
(LOCAL_WORLD_SIZE=N, one index_dir, fresh each time): with a job key (job_id), so that the node opens
them once (tar_nodelist.c), and without, each rank on its own; it prints the slowest rank's time to its
first batch and the requests the server saw.
"""
import argparse
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("LADE_BUILD", os.path.join(ROOT, "build")))
sys.path.insert(0, os.path.join(BUILD, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
import httpenv  # noqa: E402

import lade  # noqa: E402


def write_shards(d, n, per, size):
    rng = random.Random(1)
    blob = rng.randbytes(size * 2)
    for s in range(n):
        with tarfile.open(os.path.join(d, "train-%06d.tar" % s), "w", format=tarfile.GNU_FORMAT) as t:
            for i in range(per):
                k = "c%d/s%06d_%03d" % (i % 10, s, i)
                off = (s * per + i) % size
                for ext, data in (("bin", blob[off:off + size]), ("cls", b"%d" % (i % 10))):
                    ti = tarfile.TarInfo(k + "." + ext)
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))


def first_batch(list_file, batch):
    c0 = os.times()
    t0 = time.perf_counter()
    with lade.Loader(list_file, transform="raw", raw_size=1 << 16, batch_size=batch, shuffle=True, seed=1,
                     epochs=1, output="numpy") as L:
        t_open = time.perf_counter() - t0
        next(iter(L))
        t = time.perf_counter() - t0
        c1 = os.times()
        st = L.stats()
    return t, t_open, (c1.user - c0.user) + (c1.system - c0.system), st


RANK = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import lade
t0 = time.perf_counter()
kw = {"job_id": sys.argv[5]} if len(sys.argv) > 5 else {}
with lade.Loader(sys.argv[2], transform="raw", raw_size=1 << 16, batch_size=int(sys.argv[3]), shuffle=True, seed=1,
                 epochs=1, output="numpy", index_dir=sys.argv[4], **kw) as L:
    next(iter(L))
    print(time.perf_counter() - t0)
"""


def node(env, lst, a, root, shared, k):
    """--ranks processes open lst at once as one node's ranks: (slowest first batch, requests at the server)."""
    idx = os.path.join(root, "idx-%s-%d" % ("node" if shared else "own", k))
    c0 = env.counts()
    procs = [subprocess.Popen([sys.executable, "-c", RANK, os.path.join(BUILD, "python"), lst, str(a.batch), idx] +
                              (["bench-node"] if shared else []), stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(a.ranks)))
             for r in range(a.ranks)]
    times = [float(p.communicate(timeout=600)[0].split()[-1]) for p in procs]
    c1 = env.counts()
    return max(times), c1["total"] - c0["total"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=32, help="samples per shard")
    ap.add_argument("--sample-kb", type=int, default=8)
    ap.add_argument("--latency-ms", type=int, default=20)
    ap.add_argument("--link-mb-s", type=float, default=200, help="the server's link, shared (0: unlimited)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each case (the best is kept)")
    ap.add_argument("--ranks", type=int, default=0, help="then N ranks of one node, with and without the node's "
                    "single open (0: not run)")
    ap.add_argument("--index-jobs", default="", help="then `lade index --to` over the bare shards' URLs with each "
                    "of these --jobs values, e.g. 1,8 (empty: not run)")
    a = ap.parse_args()
    why = httpenv.missing() or httpenv.missing_proxy()
    if why:
        sys.exit("first_batch_remote.py: " + why)
    root = tempfile.mkdtemp(prefix="lade-fbr-")
    os.chmod(root, 0o755)
    try:
        side, bare = os.path.join(root, "side"), os.path.join(root, "bare")
        os.mkdir(side)
        os.mkdir(bare)
        t0 = time.perf_counter()
        write_shards(side, a.shards, a.samples, a.sample_kb * 1024)
        shards = sorted(f for f in os.listdir(side) if f.endswith(".tar"))
        for f in shards:
            os.link(os.path.join(side, f), os.path.join(bare, f))
        cli = os.path.join(BUILD, "lade")
        subprocess.run([cli, "index"] + [os.path.join(side, f) for f in shards], check=True,
                       stdout=subprocess.DEVNULL)
        total = sum(os.path.getsize(os.path.join(side, f)) for f in shards)
        sides = sum(os.path.getsize(os.path.join(side, f + ".ladeidx")) for f in shards)
        print("%d shards, %.1f MB (sidecars %.2f MB), made in %.1f s" % (len(shards), total / 1e6, sides / 1e6,
                                                                        time.perf_counter() - t0))
        with httpenv.NginxEnv(root, proxy=True) as env:
            env.proxy(latency_ms=a.latency_ms)
            env._ctl("config", {"latency_ms": a.latency_ms, "bandwidth_mb_s": a.link_mb_s})
            best = {}
            lists = {}
            for case in ("side", "bare"):
                lists[case] = os.path.join(root, case + ".txt")
                with open(lists[case], "w") as f:
                    f.write("".join("%s/%s/%s\n" % (env.url, case, s) for s in shards))
            first_batch("%s/bare/%s" % (env.url, shards[0]), a.batch)  # the process's one-time costs (libcurl)
            for case in ("side", "bare") * a.repeat:  # interleaved
                c0 = env.counts()
                t, t_open, cpu, st = first_batch(lists[case], a.batch)
                c1 = env.counts()
                print("%-13s first batch %6.3f s (open %5.3f s, lade's CPU %5.2f s)  open requests %5d  GETs %5d  "
                      "sidecar_rejected %d" % ("with sidecars" if case == "side" else "without", t, t_open, cpu,
                                               st["list_requests"], c1["get"] - c0["get"], st["sidecar_rejected"]))
                best[case] = min(best.get(case, 1e9), t)
            print("latency %d ms, link %g MB/s: time to first batch %.3f s with sidecars, %.3f s without: %.1fx" %
                  (a.latency_ms, a.link_mb_s, best["side"], best["bare"], best["bare"] / best["side"]))
            for jobs in [int(j) for j in a.index_jobs.split(",") if j]:
                out = os.path.join(root, "remote-idx-%d" % jobs)
                c0 = env.counts()
                t0 = time.perf_counter()
                subprocess.run([cli, "index", "--to", out, "--jobs", str(jobs)] + ["%s/bare/%s" % (env.url, f)
                                                                                   for f in shards],
                               check=True, stdout=subprocess.DEVNULL)
                t = time.perf_counter() - t0
                c1 = env.counts()
                same = all(open(os.path.join(out, f + ".ladeidx"), "rb").read() ==
                           open(os.path.join(side, f + ".ladeidx"), "rb").read() for f in shards)
                print("lade index --to, --jobs %3d: %7.2f s for %d remote shards, %d requests, sidecars %s" %
                      (jobs, t, len(shards), c1["total"] - c0["total"], "equal the local ones" if same else "DIFFER"))
            for k in range(a.repeat if a.ranks > 1 else 0):
                for shared in (True, False):  # interleaved
                    t, n = node(env, lists["side"], a, root, shared, k)
                    print("%d ranks, %-22s slowest first batch %6.3f s  requests at the server %6d" %
                          (a.ranks, "the node opens once:" if shared else "each rank on its own:", t, n))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
