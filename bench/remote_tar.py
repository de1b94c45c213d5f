#!/usr/bin/env python3
"""The same WebDataset tar shards read by lade from local disk and over HTTP (issue 12, remote tar
shards), in one run on one generated dataset:

  local          lade on the shards in a local folder
  nginx          nginx on loopback (tests/http/httpenv.py)
  proxy 0 ms     the same through tests/s3/faultproxy.js (no added latency)
  proxy 20 ms    the same proxy adding 20 ms to every request
  ... no coalescing   coalesce_gap_bytes=0: one Range request per sample
  ... prefetch 8, 128 in flight   a deeper lookahead (prefetch=8, s3_concurrency=128)

for the `raw` and `imagenet-train` transforms, in plan order (shuffle=false, the sequential reading
WebDataset does) and globally shuffled (shuffle=true). Prints lade's samples/s for each, the ratios
proxy 20 ms / local (target >= 0.90) and proxy 20 ms / proxy 0 ms (the latency hidden on the same
path), GET requests per sample; then a sweep of
coalesce_gap_bytes on the shuffled raw case (how the default was chosen). Every case's batch
checksum must equal the local one (the run stops otherwise). The machine may be shared: lade's CPU
seconds per sample (getrusage of the child) are printed too, a measure other load does not move.

    /usr/bin/python3 bench/remote_tar.py [--lade build/lade] [--count 2000] [--reps 3]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "http"))
import httpenv  # noqa: E402

CORES = os.cpu_count() or 2
RAW_SIZE = 400 * 1024


def cpu_seconds(pid):
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(lade, source, transform, shuffle, extra=(), epochs=2):
    cmd = [lade, "bench", source, "--transform", transform, "--batch-size", "32", "--epochs", str(epochs),
           "--threads", str(CORES), "--json", "--set", "shuffle=%s" % ("true" if shuffle else "false")]
    if transform == "raw":
        cmd += ["--set", "raw_size=%d" % RAW_SIZE]
    for kv in extra:
        cmd += ["--set", kv]
    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True)
    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError("lade bench failed: %s\n%s" % (" ".join(cmd), r.stderr))
    out = json.loads(r.stdout)
    # lade's own CPU (open and index pass included): a measure the other load on the machine does not move
    out["cpu_s"] = u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime
    return out, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lade", default=os.path.join(HERE, "..", "build", "lade"))
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--latency", type=int, default=20)
    ap.add_argument("--shard-size", default="20MB")
    args = ap.parse_args()
    why = httpenv.missing() or httpenv.missing_proxy()
    if why:
        print("skipped: " + why)
        return 77
    tmp = tempfile.mkdtemp(prefix="lade-bench-tar-")
    os.chmod(tmp, 0o755)
    try:
        img, shards = os.path.join(tmp, "img"), os.path.join(tmp, "shards")
        subprocess.run([args.lade, "gen", "jpeg", img, "--count", str(args.count)], check=True, capture_output=True)
        subprocess.run([args.lade, "pack", img, "--to", "tar", "--shard-size", args.shard_size, shards], check=True,
                       capture_output=True)
        names = sorted(f for f in os.listdir(shards) if f.endswith(".tar"))
        mb = sum(os.path.getsize(os.path.join(shards, f)) for f in names) / 1e6
        pattern = "shard-{000000..%06d}.tar" % (len(names) - 1)
        print("dataset: %d JPEGs in %d shards, %.1f MB; %d cores; batch 32, %d threads, 2 epochs per run, "
              "median of %d" % (args.count, len(names), mb, CORES, CORES, args.reps))
        with httpenv.NginxEnv(shards) as direct, httpenv.NginxEnv(shards, proxy=True) as fast, \
                httpenv.NginxEnv(shards, proxy=True) as slow:
            slow.proxy(latency_ms=args.latency)
            L = args.latency
            cases = [("local", shards, ()),
                     ("nginx", direct.url + "/" + pattern, ()),
                     ("proxy 0 ms", fast.url + "/" + pattern, ()),
                     ("proxy %d ms" % L, slow.url + "/" + pattern, ()),
                     ("proxy %d ms, no coalescing" % L, slow.url + "/" + pattern, ("coalesce_gap_bytes=0",)),
                     ("proxy %d ms, prefetch 8, 128 in flight" % L, slow.url + "/" + pattern,
                      ("prefetch=8", "s3_concurrency=128"))]
            proxy_pid = slow._procs[0].pid
            for transform in ("raw", "imagenet-train"):
                for shuffle in (False, True):
                    rates = {name: [] for name, _, _ in cases}
                    reqs, ref, proxy_cpu, cpu = {}, None, {}, {name: [] for name, _, _ in cases}
                    for _ in range(args.reps):
                        for name, src, extra in cases:
                            c0 = cpu_seconds(proxy_pid)
                            r, cmd = bench(args.lade, src, transform, shuffle, extra)
                            proxy_cpu[name] = (cpu_seconds(proxy_pid) - c0) / max(r["seconds"], 1e-9)
                            if name == "local":
                                ref = r["checksum"]
                            elif r["checksum"] != ref:
                                raise SystemExit("%s: checksum %s differs from local %s (%s)" %
                                                 (name, r["checksum"], ref, cmd))
                            rates[name].append(r["samples_per_s"])
                            cpu[name].append(r["cpu_s"] * 1e6 / r["samples"])
                            reqs[name] = r["get_requests"] / r["samples"]
                    med = {k: statistics.median(v) for k, v in rates.items()}
                    local = med["local"]
                    print("[%s, shuffle=%s] " % (transform, "true" if shuffle else "false") +
                          " | ".join("%s %.0f/s%s" % (k, v, "" if k == "local" else " (%.3f GET/sample)" % reqs[k])
                                     for k, v in med.items()))
                    print("  lade CPU per sample (us, open included): " +
                          " | ".join("%s %.0f" % (k, statistics.median(v)) for k, v in cpu.items()))
                    p0, p20 = med["proxy 0 ms"], med["proxy %d ms" % L]
                    deep = med["proxy %d ms, prefetch 8, 128 in flight" % L]
                    print("  proxy %d ms / local: %.3f (target >= 0.90); / proxy 0 ms: %.3f (latency hiding); "
                          "no coalescing / local: %.3f; prefetch 8 + 128 in flight: %.3f of local, %.3f of proxy 0 ms; "
                          "nginx without the proxy / local: %.3f; the proxy used %.2f cores in the %d ms run" %
                          (L, p20 / local, p20 / p0, med["proxy %d ms, no coalescing" % L] / local, deep / local,
                           deep / p0, med["nginx"] / local, proxy_cpu["proxy %d ms" % L], L))
            print("coalesce_gap_bytes sweep (raw, shuffle=true, proxy %d ms):" % args.latency)
            for gap in (0, 4096, 65536, 262144, 1 << 20, 4 << 20):
                rs, q = [], 0
                for _ in range(args.reps):
                    r, _ = bench(args.lade, slow.url + "/" + pattern, "raw", True, ("coalesce_gap_bytes=%d" % gap,))
                    rs.append(r["samples_per_s"])
                    q = r["get_requests"] / r["samples"]
                    mbs = r["remote_bytes"] / 1e6 / r["seconds"] if r.get("seconds") else 0
                print("  gap %8d: %6.0f samples/s, %.3f GET/sample, %.0f MB/s over the wire" %
                      (gap, statistics.median(rs), q, mbs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
