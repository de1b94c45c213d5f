#!/usr/bin/env python3
"""Two builds of lade side by side in one run: the same `lade bench` cases
with build A and build B, alternated rep by rep (A B, B A, A B, ...), so both
see the same machine state. For a refactor that must not cost speed, or a
tuning that must be measured against the code before it.

Cases: JPEG imagenet-train (float32 crops; `jpeg-avx2`: the same with
LADE_NO_AVX512=1, the kernels of a CPU without AVX-512, not run unless
named), .npy 128 KiB arrays (raw bytes
into the batch; `tar` and `hdf5`: the same arrays packed by `lade pack`, not
run unless named), every plan kind across --np MPI ranks on local JPEGs
(the plans' local overhead; mpirun is skipped when absent), and the JPEGs
packed into tar shards read over HTTP from nginx on loopback (raw bytes in
plan order, raw bytes shuffled with one Range request per sample: the
per-request cost; skipped without nginx). Both builds load the same files;
batch checksums are compared, so a faster build that delivers other bytes
is caught.

    /usr/bin/python3 bench/ab_builds.py --a /tmp/base/build/lade --b build/lade [--reps 5]

Prints per case the median samples/s of each build, B/A, the spread of
each build across its reps (max/min - 1), and the median CPU time per
sample of each build (lade's user + system seconds, which the load of a
shared machine moves less than the rate) with its B/A.
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


_CEILING = {}


def no_ceiling(lade):
    """`--no-ceiling` for builds whose `lade bench` measures the machine's ceiling after its run (its CPU time
    would count as lade's); nothing for older builds, which do not know the flag."""
    if lade not in _CEILING:
        out = subprocess.run([lade, "bench", "--help"], capture_output=True, text=True).stdout
        _CEILING[lade] = ["--no-ceiling"] if "--no-ceiling" in out else []
    return _CEILING[lade]


def bench(lade, args, mpi_np=0, env=None):
    """samples/s, the batch checksums, and lade's CPU seconds per sample (its user + system time, open
    included: a measure that other load on a shared machine moves less than the rate)."""
    cmd = [lade, "bench"] + args + ["--json"] + no_ceiling(lade)
    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not mpi_np:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                             env=dict(os.environ, **env) if env else None).stdout
    else:  # one output file per rank: the ranks' long JSON lines would interleave on one pipe
        with tempfile.TemporaryDirectory(prefix="lade-ab-mpi-") as d:
            subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(mpi_np),
                            "--output-filename", d] + cmd, check=True, capture_output=True)
            out = ""
            for root, _, files in os.walk(d):
                for f in files:
                    if f == "stdout":
                        with open(os.path.join(root, f)) as fh:
                            out += fh.read() + "\n"
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if not runs:
        raise SystemExit("no JSON from: " + " ".join(cmd))
    # across ranks: the slowest rank's time over all the ranks' samples
    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    secs = max(r["seconds"] for r in runs)
    samples = sum(r["samples"] for r in runs)
    cpu = (u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) / samples
    return samples / secs, sorted(r["checksum"] for r in runs), cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="lade CLI of build A (e.g. the starting commit)")
    ap.add_argument("--b", required=True, help="lade CLI of build B")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--jpeg-count", type=int, default=2000)
    ap.add_argument("--npy-count", type=int, default=10000)
    ap.add_argument("--np", type=int, default=4, help="MPI ranks for the plan cases (0: skip them)")
    ap.add_argument("--cases", default="jpeg,npy,plans,tar-http")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lade-ab-")
    os.chmod(tmp, 0o755)  # nginx's worker runs as another user when started by root
    nginx = None
    try:
        jpeg, npy = os.path.join(tmp, "jpeg"), os.path.join(tmp, "npy")
        subprocess.run([a.b, "gen", "jpeg", jpeg, "--count", str(a.jpeg_count)], check=True, capture_output=True)
        cases = []
        want = a.cases.split(",")
        jpeg_args = ["--transform", "imagenet-train", "--batch-size", "32", "--epochs", "2", "--seed", "1"]
        if "jpeg" in want:
            cases.append(("jpeg imagenet-train b32", jpeg_args, jpeg, 0))
        if "jpeg-avx2" in want:
            cases.append(("jpeg b32 LADE_NO_AVX512=1", jpeg_args, jpeg, 0, {"LADE_NO_AVX512": "1"}))
        if "npy" in want:
            subprocess.run([a.b, "gen", "npy", npy, "--count", str(a.npy_count)], check=True, capture_output=True)
            cases.append(("npy 128 KiB b256", ["--batch-size", "256", "--epochs", "3"], npy, 0))
        if "tar" in want or "hdf5" in want:  # the same .npy samples as local tar shards / one HDF5 file
            if not os.path.isdir(npy):
                subprocess.run([a.b, "gen", "npy", npy, "--count", str(a.npy_count)], check=True, capture_output=True)
        if "tar" in want:
            tar = os.path.join(tmp, "tar")
            subprocess.run([a.b, "pack", npy, "--to", "tar", "--shard-size", "256MiB", tar], check=True,
                           capture_output=True)
            cases.append(("tar npy 128 KiB b256", ["--transform", "npy", "--batch-size", "256", "--epochs", "3"],
                          tar, 0))
        if "hdf5" in want:
            h5 = os.path.join(tmp, "npy.h5")
            r = subprocess.run([a.b, "pack", npy, "--to", "hdf5", h5], capture_output=True)
            if r.returncode == 0:
                cases.append(("hdf5 128 KiB b256", ["--batch-size", "256", "--epochs", "3"], h5, 0))
        if "plans" in want and a.np and shutil.which("mpirun"):
            n = min(a.jpeg_count, 1000)
            sub = os.path.join(tmp, "jpeg_plans")
            subprocess.run([a.b, "gen", "jpeg", sub, "--count", str(n)], check=True, capture_output=True)
            cache = 2 * n // a.np * 110000  # a little over N/p samples of ~100 KB per rank
            for plan in ("regular", "distcache", "locality", "solar"):
                cases.append(("%d ranks plan=%s" % (a.np, plan),
                              ["--plan", plan, "--batch-size", "16", "--epochs", "4", "--threads", "1",
                               "--set", "drop_last=true", "--set", "cache_mem_bytes=%d" % cache], sub, a.np))
        if "tar-http" in want:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "http"))
            import httpenv  # noqa: E402
            if httpenv.missing():
                print("tar-http skipped: " + httpenv.missing())
            else:
                shards = os.path.join(tmp, "shards")
                subprocess.run([a.b, "pack", jpeg, "--to", "tar", "--shard-size", "20MB", shards], check=True,
                               capture_output=True)
                n = len([f for f in os.listdir(shards) if f.endswith(".tar")])
                nginx = httpenv.NginxEnv(shards).__enter__()
                url = nginx.url + "/shard-{000000..%06d}.tar" % (n - 1)
                raw = ["--transform", "raw", "--batch-size", "32", "--epochs", "10", "--set", "raw_size=409600"]
                cases.append(("http tar raw b32 in order", raw + ["--set", "shuffle=false"], url, 0))
                cases.append(("http tar raw shuffled, gap 0", raw + ["--set", "coalesce_gap_bytes=0"], url, 0))
        print("A = %s\nB = %s\nCPU: %s" % (a.a, a.b, cpu_model()))
        for name, args, data, np_, *env in cases:
            env = env[0] if env else None
            rates = {"A": [], "B": []}
            cpus = {"A": [], "B": []}
            sums = {}
            for rep in range(a.reps):
                order = ("A", "B") if rep % 2 == 0 else ("B", "A")
                for which in order:
                    r, cs, cpu = bench(a.a if which == "A" else a.b, [data] + args, np_, env)
                    rates[which].append(r)
                    cpus[which].append(cpu)
                    sums.setdefault(which, cs)
            ma, mb = statistics.median(rates["A"]), statistics.median(rates["B"])
            ca, cb = statistics.median(cpus["A"]), statistics.median(cpus["B"])
            spread = lambda v: max(v) / min(v) - 1
            same = "same batches" if sums["A"] == sums["B"] else "BATCHES DIFFER"
            print("%-28s A %9.1f/s  B %9.1f/s  B/A %.3f  spread A %4.1f%% B %4.1f%%  CPU us/sample A %.1f B %.1f "
                  "B/A %.3f  %s" % (name, ma, mb, mb / ma, 100 * spread(rates["A"]), 100 * spread(rates["B"]),
                                    ca * 1e6, cb * 1e6, cb / ca, same))
            sys.stdout.flush()
    finally:
        if nginx:
            nginx.__exit__(None, None, None)
        shutil.rmtree(tmp, ignore_errors=True)


def cpu_model():
    """The CPU's name, family and model (a VM may show only "AMD EPYC"), and the core count."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:
        return "unknown"
    return "%s (family %s, model %s) x%d" % (info.get("model name", "?"), info.get("cpu family", "?"),
                                             info.get("model", "?"), os.cpu_count())


if __name__ == "__main__":
    main()
