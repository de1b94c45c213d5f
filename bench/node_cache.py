#!/usr/bin/env python3
"""One cache per node against one cache per rank, in one run (bench/RESULTS.md).

4 ranks on this machine (`mpirun -np 4`, one node of 4: ranks_per_node=4),
the JPEGs of `lade gen jpeg` in the project's S3 test server (s3rver) behind
tests/s3/faultproxy.js's shared link (--bandwidth MB/s, every rank's GETs one
after another), `regular` plan, imagenet-train, the same total cache memory:

  per-rank    cache_mem_bytes = total / 4 on each rank (node_cache=off, LRU):
              four caches, each holding what its rank read
  node        cache_mem_bytes = total, one shared-memory cache for the node
              (node_cache=on): one copy of each cached sample for all four

with total a little over the dataset. Per epoch: the slowest rank's time,
storage bytes and peer bytes summed over the ranks; per run: the peak RSS of
each rank and the node cache's shared memory (its segment, and the bytes its
entries hold). Then model parallelism: the same JPEGs packed into tar shards
(`lade pack`), `plan=shards` with `model_parallel=4` (the four ranks train
on identical batches), without (node_cache=off: every rank reads every
sample) and with the node cache (the group reads each sample once); storage
bytes per epoch and the ratio (target <= 0.3). Then a node-aware plan
(`--plan`, default locality; the local JPEG folder, half the dataset in the
node's cache): each rank's own cache with the node's handoffs sent as MPI
messages (node_cache=off) against the node's shared cache in plan mode
(handoffs read from it: docs/plan.md, Nodes): epoch time, intra-node peer
bytes, handoffs, RSS.

    /usr/bin/python3 bench/node_cache.py [--lade build/lade] [--count 1000] [--bandwidth 8]

Needs mpirun (openmpi-bin), node + s3rver (tests/s3), boto3.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "s3"))
from plan_mpi import mpirun  # noqa: E402
from s3env import S3Env, missing  # noqa: E402


def run(a, src, plan, cache, extra, env, tmp, tag):
    extra = [("ranks_per_node", a.np), ("job_id", "bench-node-cache-%d-%s" % (os.getpid(), tag))] + extra
    ranks, _ = mpirun(a.np, a.lade, src, plan, cache, a.epochs, a.batch, extra, env, tmp, checksum=True)
    rows = []
    for e in range(a.epochs):
        es = [r["epochs"][e] for r in ranks]
        rows.append({"seconds": max(x["seconds"] for x in es),
                     "storage_mb": sum(x["bytes_by_source"][0] for x in es) / 1e6,
                     "storage_samples": sum(x["samples_by_source"][0] for x in es),
                     "peer_mb": sum(x["peer_bytes"] for x in es) / 1e6})
    run_info = {"rss": [r["peak_rss_mib"] for r in ranks],
                "segment_mb": max(r.get("node_cache_segment_bytes", 0) for r in ranks) / 1e6,
                "held_mb": max(r.get("node_cache_used_bytes", 0) for r in ranks) / 1e6,
                "checksums": sorted(r["checksum"] for r in ranks)}
    return rows, run_info


def show(label, rows, info):
    for e, r in enumerate(rows):
        print("  %-22s %5d %8.2f %9.1f %8.2f" % (label, e, r["seconds"], r["storage_mb"], r["peer_mb"]))
    print("  %-22s peak RSS per rank: %s MiB; node cache: segment %.1f MB, entries %.1f MB" % (
        label, " ".join("%.0f" % x for x in info["rss"]), info["segment_mb"], info["held_mb"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lade", default=os.path.join(HERE, "..", "build", "lade"))
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--bandwidth", type=float, default=8.0, help="MB/s of the bucket's shared link")
    ap.add_argument("--mp-bandwidth", type=float, default=32.0, help="MB/s of the link in the model-parallel runs")
    ap.add_argument("--only", choices=("cache", "mp", "planned"), help="run one part")
    ap.add_argument("--plan", default="locality", help="the node-aware plan of the planned part")
    a = ap.parse_args()
    why = missing()
    if why:
        print("skipped: %s" % why)
        return 77
    tmp = tempfile.mkdtemp(prefix="lade-nodecache-")
    data = os.path.join(tmp, "jpeg")
    subprocess.run([a.lade, "gen", "jpeg", data, "--count", str(a.count)], check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(data, "*", "*")))
    size = sum(os.path.getsize(f) for f in files)
    mean = size / len(files)
    shards = os.path.join(tmp, "shards")
    subprocess.run([a.lade, "pack", data, "--to", "tar", "--shard-size", "8MB", shards], check=True,
                   stdout=subprocess.DEVNULL)
    tars = sorted(glob.glob(os.path.join(shards, "*.tar")))
    print("dataset: %d JPEGs, mean %.0f bytes, %.1f MB (%d tar shards); %d ranks on one node, batch %d each, "
          "%d epochs; machine: %d cores" % (len(files), mean, size / 1e6, len(tars), a.np, a.batch, a.epochs,
                                           os.cpu_count()))
    if a.only in (None, "planned"):
        planned(a, data, tmp, size)
    if a.only == "planned":
        return 0
    with S3Env() as s3:
        s3.put_many({"train/" + os.path.relpath(f, data): open(f, "rb").read() for f in files})
        s3.put_many({"shards/" + os.path.basename(t): open(t, "rb").read() for t in tars})
        env = s3.lade_env()
        if a.only != "mp":
            node_vs_rank(a, s3, env, tmp, size)
        if a.only != "cache":
            model_parallel(a, s3, env, tmp)
    return 0


def node_vs_rank(a, s3, env, tmp, size):
    total = int(size * 1.15 + a.count * 128)  # the dataset with room for the entries' headers
    src = "s3://%s/train" % s3.bucket
    s3.proxy(bandwidth_mb_s=a.bandwidth)
    print("\n== storage-bound: S3 server behind a shared %.1f MB/s link, regular plan, total cache memory %.1f MB"
          % (a.bandwidth, total / 1e6))
    print("  %-22s %5s %8s %9s %8s" % ("variant", "epoch", "time s", "stor MB", "peer MB"))
    per, per_i = run(a, src, "regular", total // a.np, [("node_cache", "off"), ("cache_policy", "lru")], env,
                     tmp, "per")
    show("per-rank (total/4)", per, per_i)
    node, node_i = run(a, src, "regular", total, [("node_cache", "on")], env, tmp, "node")
    show("node cache (total)", node, node_i)
    t_per = sum(r["seconds"] for r in per[1:])
    t_node = sum(r["seconds"] for r in node[1:])
    print("  same batches on every rank: %s" % (per_i["checksums"] == node_i["checksums"]))
    print("  epochs 1..%d: node cache %.2f s against per-rank %.2f s = %.2fx; storage %.1f MB against %.1f MB; "
          "intra-node peer bytes %.0f; node cache entries %.1f MB for a %.1f MB dataset (%.2f copies)" % (
              a.epochs - 1, t_node, t_per, t_per / t_node if t_node else 0,
              sum(r["storage_mb"] for r in node[1:]), sum(r["storage_mb"] for r in per[1:]),
              sum(r["peer_mb"] for r in node) * 1e6, node_i["held_mb"], size / 1e6,
              node_i["held_mb"] / (size / 1e6)))


def planned(a, data, tmp, size):
    cache = int(size / 2 * 1.1)  # half the dataset (the entries' charge included) in the node's cache
    print("\n== plan=%s, one node of %d ranks, the local JPEG folder, node cache %.1f MB (half the dataset)"
          % (a.plan, a.np, cache / 1e6))
    print("  %-22s %5s %8s %9s %8s" % ("variant", "epoch", "time s", "stor MB", "peer MB"))
    out = {}
    for tag, nc in (("messages", "off"), ("shared", "auto")):
        extra = [("ranks_per_node", a.np), ("node_cache", nc)]
        ranks, _ = mpirun(a.np, a.lade, data, a.plan, cache, a.epochs, a.batch, extra, {}, tmp,
                          checksum=True)
        rows = []
        for e in range(a.epochs):
            es = [r["epochs"][e] for r in ranks]
            rows.append({"seconds": max(x["seconds"] for x in es),
                         "storage_mb": sum(x["bytes_by_source"][0] for x in es) / 1e6,
                         "peer_mb": sum(x["peer_bytes"] for x in es) / 1e6,
                         "handoffs": sum(x["handoff"] for x in es)})
        info = {"rss": [r["peak_rss_mib"] for r in ranks],
                "segment_mb": max(r.get("node_cache_segment_bytes", 0) for r in ranks) / 1e6,
                "held_mb": max(r.get("node_cache_used_bytes", 0) for r in ranks) / 1e6,
                "checksums": sorted(r["checksum"] for r in ranks)}
        show("handoffs: " + tag, rows, info)
        out[tag] = (rows, info)
    (m, mi), (sh, si) = out["messages"], out["shared"]
    t_m, t_s = sum(r["seconds"] for r in m[1:]), sum(r["seconds"] for r in sh[1:])
    print("  same batches on every rank: %s" % (mi["checksums"] == si["checksums"]))
    print("  epochs 1..%d: shared %.2f s against messages %.2f s = %.2fx; intra-node peer bytes %.1f MB against "
          "%.1f MB; handoffs %d and %d; peak RSS per rank %.0f against %.0f MiB (+ the %.1f MB segment, %.1f MB held)"
          % (a.epochs - 1, t_s, t_m, t_m / t_s if t_s else 0, sum(r["peer_mb"] for r in sh),
             sum(r["peer_mb"] for r in m), sum(r["handoffs"] for r in sh), sum(r["handoffs"] for r in m),
             max(si["rss"]), max(mi["rss"]), si["segment_mb"], si["held_mb"]))


def model_parallel(a, s3, env, tmp):
    # every rank streams whole shards: the link's queue is long, so requests get a long timeout
    s3.proxy(bandwidth_mb_s=a.mp_bandwidth)
    print("\n== model_parallel=%d, plan=shards over the tar shards (one group of %d ranks), a shared %.1f MB/s link"
          % (a.np, a.np, a.mp_bandwidth))
    print("  %-22s %5s %8s %9s %8s" % ("variant", "epoch", "time s", "stor MB", "peer MB"))
    ssrc = "s3://%s/shards" % s3.bucket
    mp = [("model_parallel", a.np), ("source_type", "tar"), ("http_timeout_ms", 600000)]
    before, b_i = run(a, ssrc, "shards", 0, mp + [("node_cache", "off")], env, tmp, "mp-off")
    show("each rank reads", before, b_i)
    after, a_i = run(a, ssrc, "shards", 0, mp + [("node_cache", "on")], env, tmp, "mp-on")
    show("group reads once", after, a_i)
    print("  same batches on every rank: %s" % (b_i["checksums"] == a_i["checksums"]))
    for e in range(a.epochs):
        print("  epoch %d: storage %.1f MB against %.1f MB = %.2fx (target <= 0.3)" % (
            e, after[e]["storage_mb"], before[e]["storage_mb"],
            after[e]["storage_mb"] / before[e]["storage_mb"] if before[e]["storage_mb"] else 0))


if __name__ == "__main__":
    sys.exit(main())
