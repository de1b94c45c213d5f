#!/usr/bin/env python3
"""The same WebDataset tar shards read by lade from local disk and over HTTP (docs/sources.md,
remote tar shards), in one run on one generated dataset:

  local          lade on the shards in a local folder
  nginx          nginx on loopback (tests/http/httpenv.py)
  proxy 0 ms     the same through tests/s3/faultproxy.js (no added latency)
  proxy 20 ms    the same proxy adding 20 ms to every request
  ... no coalescing      coalesce_gap_bytes=0: one Range request per sample
  ... no read-ahead      readahead_bytes=0: only the prefetch + 1 batches being prepared are requested
  ... DELI cold epoch    cache_dir set (the DELI prefetcher on): the first epoch, which fills the disk cache

for the `raw` and `imagenet-train` transforms, in plan order (shuffle=false, the sequential reading
WebDataset does) and globally shuffled (shuffle=true). The rate is the steady state: samples over the
seconds of epochs 1..E-1 (per-epoch times from `lade bench --json`), so open() - with the index pass,
one streamed GET per remote shard - and epoch 0's start are not in it; epoch 0's rate, open included,
is printed apart. Every case's batch checksum must equal the local one (the run stops otherwise).

Two placements of the server (--pin): `shared`, nginx and the proxy on the same cores as lade (all
cores, threads = cores), and `own core`, nginx and the proxy pinned to the last core and lade (every
case, local included) to the others with threads = cores - 1: what a real object store, which runs
elsewhere, leaves to the loader. lade's CPU seconds per sample (getrusage of the child) are printed too.

    /usr/bin/python3 bench/remote_tar.py [--lade build/lade] [--count 2000] [--reps 3] [--pin both|shared|own]
        [--sweep]   (adds a sweep of coalesce_gap_bytes on the shuffled raw case: how the default was chosen)
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


def pin_tree(pid, cpus):
    """Pins a process, its threads and its children (nginx's workers) to `cpus` (taskset)."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], capture_output=True, check=True)
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    for c in kids:
        pin_tree(int(c), cpus)


def bench(lade, source, transform, shuffle, extra=(), epochs=4, threads=CORES, cpus=None):
    cmd = [lade, "bench", source, "--transform", transform, "--batch-size", "32", "--epochs", str(epochs),
           "--threads", str(threads), "--json", "--set", "shuffle=%s" % ("true" if shuffle else "false")]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
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
    eps = out["epochs"]
    steady = eps[1:] if len(eps) > 1 else eps
    n_epoch = out["samples"] / len(eps)
    out["steady"] = n_epoch * len(steady) / sum(e["seconds"] for e in steady)
    out["epoch0"] = n_epoch / eps[0]["seconds"]
    # lade's own CPU (open and index pass included): a measure the other load on the machine does not move
    out["cpu_s"] = u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime
    return out, " ".join(cmd)


def run_placement(args, place, shards, pattern, names):
    own = place == "own core"
    cpus = "0-%d" % (CORES - 2) if own else None
    threads = CORES - 1 if own else CORES
    L = args.latency
    with httpenv.NginxEnv(shards) as direct, httpenv.NginxEnv(shards, proxy=True) as fast, \
            httpenv.NginxEnv(shards, proxy=True) as slow:
        slow.proxy(latency_ms=L)
        if own:
            for env in (direct, fast, slow):
                pin_tree(env.nginx.pid, str(CORES - 1))
                for q in env._procs:
                    pin_tree(q.pid, str(CORES - 1))
        p20 = "proxy %d ms" % L
        cases = [("local", shards, ()),
                 ("nginx", direct.url + "/" + pattern, ()),
                 ("proxy 0 ms", fast.url + "/" + pattern, ()),
                 (p20, slow.url + "/" + pattern, ()),
                 (p20 + ", no coalescing", slow.url + "/" + pattern, ("coalesce_gap_bytes=0",)),
                 (p20 + ", no read-ahead", slow.url + "/" + pattern, ("readahead_bytes=0",)),
                 (p20 + ", DELI cold epoch", slow.url + "/" + pattern, ("cache_dir=",))]
        proxy_pid = slow._procs[0].pid
        print("== server %s: lade on cpus %s with %d threads%s" %
              (place, cpus or "all", threads, ", nginx and the proxy on cpu %d" % (CORES - 1) if own else ""))
        for transform in ("raw", "imagenet-train"):
            for shuffle in (False, True):
                rates = {name: [] for name, _, _ in cases}
                reqs, ref, cpu, opens, proxy_cpu = {}, None, {name: [] for name, _, _ in cases}, {}, 0.0
                for _ in range(args.reps):
                    for name, src, extra in cases:
                        tmpc = None
                        if "cache_dir=" in extra:  # a fresh disk cache: the cold epoch that fills it
                            tmpc = tempfile.mkdtemp(prefix="lade-bench-deli-")
                            extra = ("cache_dir=" + tmpc,)
                        c0 = cpu_seconds(proxy_pid)
                        try:
                            r, cmd = bench(args.lade, src, transform, shuffle, extra,
                                           epochs=1 if tmpc else args.epochs, threads=threads, cpus=cpus)
                        finally:
                            if tmpc:
                                shutil.rmtree(tmpc, ignore_errors=True)
                        if name == p20:
                            proxy_cpu = (cpu_seconds(proxy_pid) - c0) / max(r["seconds"], 1e-9)
                        if name == "local":
                            ref = r["checksum"]
                        elif r["checksum"] != ref and not tmpc:
                            raise SystemExit("%s: checksum %s differs from local %s (%s)" %
                                             (name, r["checksum"], ref, cmd))
                        rates[name].append(r["epoch0"] if tmpc else r["steady"])
                        cpu[name].append(r["cpu_s"] * 1e6 / r["samples"])
                        reqs[name] = r["get_requests"] / r["samples"]
                        opens.setdefault(name, []).append(r["epoch0"])
                med = {k: statistics.median(v) for k, v in rates.items()}
                local = med["local"]
                print("[%s, shuffle=%s] " % (transform, "true" if shuffle else "false") +
                      " | ".join("%s %.0f/s%s" % (k, v, "" if k == "local" else " (%.3f GET/sample)" % reqs[k])
                                 for k, v in med.items()))
                print("  lade CPU per sample (us, open included): " +
                      " | ".join("%s %.0f" % (k, statistics.median(v)) for k, v in cpu.items()))
                print("  epoch 0 samples/s (open and the index pass included): " +
                      " | ".join("%s %.0f" % (k, statistics.median(v)) for k, v in opens.items()))
                p0, pl = med["proxy 0 ms"], med[p20]
                print("  %s / local: %.3f (target >= 0.90); / proxy 0 ms: %.3f (latency hiding); "
                      "no coalescing / local: %.3f; no read-ahead / local: %.3f (read-ahead gains %.2fx); "
                      "DELI cold epoch / local: %.3f; nginx without the proxy / local: %.3f; the proxy used %.2f "
                      "cores" % (p20, pl / local, pl / p0, med[p20 + ", no coalescing"] / local,
                                 med[p20 + ", no read-ahead"] / local, pl / med[p20 + ", no read-ahead"],
                                 med[p20 + ", DELI cold epoch"] / local, med["nginx"] / local, proxy_cpu))
                sys.stdout.flush()
        if args.sweep:
            print("coalesce_gap_bytes sweep (raw, shuffle=true, %s):" % p20)
            for gap in (0, 4096, 65536, 262144, 1 << 20, 4 << 20):
                rs, q, mbs = [], 0, 0
                for _ in range(args.reps):
                    r, _ = bench(args.lade, slow.url + "/" + pattern, "raw", True, ("coalesce_gap_bytes=%d" % gap,),
                                 epochs=args.epochs, threads=threads, cpus=cpus)
                    rs.append(r["steady"])
                    q = r["get_requests"] / r["samples"]
                    mbs = r["remote_bytes"] / 1e6 / r["seconds"] if r.get("seconds") else 0
                print("  gap %8d: %6.0f samples/s, %.3f GET/sample, %.0f MB/s over the wire" %
                      (gap, statistics.median(rs), q, mbs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lade", default=os.path.join(HERE, "..", "build", "lade"))
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--latency", type=int, default=20)
    ap.add_argument("--shard-size", default="20MB")
    ap.add_argument("--pin", choices=("both", "shared", "own"), default="both")
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    why = httpenv.missing() or httpenv.missing_proxy()
    if why:
        print("skipped: " + why)
        return 77
    if args.pin != "shared" and (CORES < 2 or not shutil.which("taskset")):
        print("skipped: the own-core placement needs 2 cores and taskset")
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
        print("dataset: %d JPEGs in %d shards, %.1f MB; %d cores; batch 32, %d epochs per run (rate: epochs 1-%d), "
              "median of %d" % (args.count, len(names), mb, CORES, args.epochs, args.epochs - 1, args.reps))
        places = {"both": ("shared", "own core"), "shared": ("shared",), "own": ("own core",)}[args.pin]
        for place in places:
            run_placement(args, place, shards, pattern, names)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
