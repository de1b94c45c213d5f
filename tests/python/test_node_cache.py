"""The node cache (docs/cache.md, Node cache): one memory cache per node shared by its ranks through a
shared-memory segment. Plain processes of one machine stand for the ranks of one node (settings rank,
world_size, ranks_per_node and job_id); every run is compared with the same run without a cache (the
files' bytes: equal checksums = identical batches)."""
import glob
import json
import os
import signal
import subprocess
import tempfile
import time

import pytest

ENV = {k: v for k, v in os.environ.items()
       if k not in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "PMIX_NAMESPACE",
                    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")}
EPOCHS = 2
BATCH = 10


@pytest.fixture()
def shm_dir():
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = tempfile.mkdtemp(prefix="lade-test-", dir=base)
    yield d
    for f in glob.glob(os.path.join(d, "*")):
        os.unlink(f)
    os.rmdir(d)


def charge(n):
    """The node tier's bytes for an entry of n payload bytes (32-byte record header, 64-byte alignment)."""
    return (32 + n + 63) // 64 * 64


def args(cli, ds, rank, world, *extra, epochs=EPOCHS, step_ms=0):
    a = [cli, "bench", ds, "--epochs", str(epochs), "--batch-size", str(BATCH), "--threads", "2", "--json",
         "--set", f"rank={rank}", "--set", f"world_size={world}"]
    if step_ms:
        a += ["--step-ms", str(step_ms)]
    for s in extra:
        a += ["--set", s]
    return a


def start(a):
    return subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def finish(p):
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return json.loads(out)


def reference(cli, ds, world, epochs=EPOCHS):
    """Each rank's checksum with no cache at all: the files' bytes."""
    return [finish(start(args(cli, ds, r, world, epochs=epochs)))["checksum"] for r in range(world)]


def node_run(cli, ds, world, shm, job, *extra, step_ms=5, epochs=EPOCHS, watch=None):
    ps = [start(args(cli, ds, r, world, f"ranks_per_node={world}", "cache_mem_bytes=4000000", f"job_id={job}",
                     f"shm_dir={shm}", *extra, step_ms=step_ms, epochs=epochs)) for r in range(world)]
    seen = set()
    while watch is not None and any(p.poll() is None for p in ps):
        seen.add(len(glob.glob(os.path.join(shm, "lade-*"))))
        time.sleep(0.01)
    if watch is not None:
        watch.update(seen)
    return [finish(p) for p in ps]


def dataset_bytes(ds):
    return sorted(os.path.getsize(f) for f in glob.glob(os.path.join(ds, "*", "*.npy")))


def test_one_copy_per_node(lade_cli, npy_dir, shm_dir):
    ref = reference(lade_cli, npy_dir, 2)
    files = set()
    res = node_run(lade_cli, npy_dir, 2, shm_dir, "one-copy", watch=files)
    n = len(dataset_bytes(npy_dir))
    # one segment for the node while they ran, removed by the last rank out
    assert files <= {0, 1} and 1 in files
    assert glob.glob(os.path.join(shm_dir, "lade-*")) == []
    for r, d in enumerate(res):
        assert d["checksum"] == ref[r]  # every delivered byte is the file's
        # one copy of every sample in the node, not one per rank
        assert d["node_cache_entries"] == n
        assert d["node_cache_used_bytes"] == sum(charge(b) for b in dataset_bytes(npy_dir))
        assert d["node_cache_segment_bytes"] >= 4000000
    # storage reads (cache_misses: the batches' and sample 0's at open): the dataset once for the node over both
    # epochs, whatever the ranks' skew (sample 0 once more at most: both ranks read it at open, at once); a cache
    # per rank reads about 1.5 times it (test_per_rank_caches_read_more)
    storage = sum(d["cache_misses"] for d in res)
    assert n <= storage <= n + 1
    assert sum(d["samples_by_source"][0] + d["samples_by_source"][1] for d in res) == EPOCHS * n


def test_per_rank_caches_read_more(lade_cli, npy_dir, shm_dir):
    """The same run with node_cache=off: each rank caches only the half it read, and the second epoch's
    reshuffle gives it about half new samples, read from storage (the node cache above read none)."""
    res = node_run(lade_cli, npy_dir, 2, shm_dir, "per-rank", "node_cache=off")
    n = len(dataset_bytes(npy_dir))
    assert all(d["node_cache_entries"] == 0 and d["epochs"][1]["miss_rate"] > 0.3 for d in res)
    assert sum(d["cache_misses"] for d in res) > n * 1.3


def test_rank_killed_others_go_on(lade_cli, npy_dir, shm_dir):
    ref = reference(lade_cli, npy_dir, 3, epochs=8)
    ps = [start(args(lade_cli, npy_dir, r, 3, "ranks_per_node=3", "cache_mem_bytes=4000000", "job_id=kill",
                     f"shm_dir={shm_dir}", epochs=8, step_ms=30)) for r in range(3)]
    time.sleep(0.8)
    assert ps[1].poll() is None, "rank 1 finished before it could be killed"
    ps[1].send_signal(signal.SIGKILL)
    ps[1].wait()
    survivors = [finish(ps[0]), finish(ps[2])]
    assert [d["checksum"] for d in survivors] == [ref[0], ref[2]]
    assert glob.glob(os.path.join(shm_dir, "lade-*")) == []  # the last live one removed it


def test_stale_segment_removed_live_one_kept(lade_cli, npy_dir, shm_dir):
    # job A is killed: its segment stays behind
    a = start(args(lade_cli, npy_dir, 0, 1, "node_cache=on", "cache_mem_bytes=4000000", "job_id=A",
                   f"shm_dir={shm_dir}", epochs=20, step_ms=20))
    while not glob.glob(os.path.join(shm_dir, "lade-*")):
        assert a.poll() is None, a.communicate()
        time.sleep(0.01)
    time.sleep(0.3)
    a.send_signal(signal.SIGKILL)
    a.wait()
    stale = glob.glob(os.path.join(shm_dir, "lade-*"))
    assert len(stale) == 1
    # job C's open removes it; job D opens while C runs and never removes C's live segment
    segs = lambda: set(glob.glob(os.path.join(shm_dir, "lade-*")))
    c = start(args(lade_cli, npy_dir, 0, 1, "node_cache=on", "cache_mem_bytes=4000000", "job_id=C",
                   f"shm_dir={shm_dir}", epochs=4, step_ms=20))
    while not segs() - set(stale):
        assert c.poll() is None, c.communicate()
        time.sleep(0.01)
    assert not os.path.exists(stale[0])  # the killed job's segment is gone
    live_c = segs()
    assert len(live_c) == 1
    d = start(args(lade_cli, npy_dir, 0, 1, "node_cache=on", "cache_mem_bytes=4000000", "job_id=D",
                   f"shm_dir={shm_dir}", epochs=4, step_ms=20))
    both = set()
    while c.poll() is None and d.poll() is None and len(both) < 2:
        both = segs()
        time.sleep(0.01)
    assert live_c < both and len(both) == 2  # C's is there beside D's: two jobs, two segments
    rc, rd = finish(c), finish(d)
    ref = reference(lade_cli, npy_dir, 1)
    n = len(dataset_bytes(npy_dir))
    for r in (rc, rd):  # neither shared the other's: each cached the whole dataset itself
        assert r["node_cache_entries"] == n
        assert r["cache_misses"] == n
    ref4 = finish(start(args(lade_cli, npy_dir, 0, 1, epochs=4)))["checksum"]
    assert rc["checksum"] == rd["checksum"] == ref4 != ref[0]
    assert glob.glob(os.path.join(shm_dir, "lade-*")) == []


def proc_state(pid):
    """The state letter of pid (field 3 of /proc/PID/stat): Z a zombie (exited, not reaped), T stopped."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def wait_state(pid, want, timeout=60):
    t_end = time.monotonic() + timeout
    while proc_state(pid) != want:
        assert time.monotonic() < t_end, f"pid {pid} is {proc_state(pid)}, not {want}"
        time.sleep(0.01)


def test_zombie_ranks_segment_removed(lade_cli, npy_dir, shm_dir):
    """Issue 29, finding 4: a killed job's ranks left as zombies (exited, never reaped: a PID 1 that does not reap,
    a container without --init) hold its segment no more: the next job's open removes it. This test is that
    parent: it kills both ranks and does not wait for them until the end."""
    ps = [start(args(lade_cli, npy_dir, r, 2, "ranks_per_node=2", "cache_mem_bytes=4000000", "job_id=zombies",
                     f"shm_dir={shm_dir}", epochs=20, step_ms=20)) for r in range(2)]
    try:
        while not glob.glob(os.path.join(shm_dir, "lade-*")):
            assert all(p.poll() is None for p in ps), [p.communicate() for p in ps]
            time.sleep(0.01)
        time.sleep(0.3)
        for p in ps:
            os.kill(p.pid, signal.SIGKILL)  # not p.send_signal: it would reap a rank that happened to exit
        for p in ps:
            wait_state(p.pid, "Z")
        assert len(glob.glob(os.path.join(shm_dir, "lade-*"))) == 1
        d = finish(start(args(lade_cli, npy_dir, 0, 1, "node_cache=on", "cache_mem_bytes=4000000", "job_id=next",
                              f"shm_dir={shm_dir}", epochs=1)))
        assert d["node_cache_entries"] == len(dataset_bytes(npy_dir))
        assert [proc_state(p.pid) for p in ps] == ["Z", "Z"]  # zombies all along
        # the zombies' segment removed by the next job's open, the next job's own by its close: /dev/shm is clean
        assert glob.glob(os.path.join(shm_dir, "lade-*")) == []
    finally:
        for p in ps:
            p.kill()
            p.communicate()


def segment_ready(shm):
    """Whether a segment in shm is ready: its header (magic, layout, state) says state 1, which its creator sets
    once it is attached."""
    for f in glob.glob(os.path.join(shm, "lade-*")):
        with open(f, "rb") as h:
            head = h.read(16)
        if head[:8] == b"LADESHM1" and int.from_bytes(head[12:16], "little") == 1:
            return True
    return False


def test_rank_stopped_holding_the_lock(lade_cli, npy_dir, shm_dir):
    """A rank stopped (SIGSTOP: a debugger, a scheduler's suspend) while it holds the node cache's lock, halfway
    through a put (the library's test hook LADE_TEST_HOOK_STOP_IN_NODE_LOCK=N stops it in its Nth put): the
    other rank waits peer_timeout_ms once, says so, reads from storage from then on and finishes with the files'
    bytes while the stopped one stays stopped; resumed, that one finishes with the files' bytes too, nothing
    corrupt, and removes the segment as the last out."""
    ref = reference(lade_cli, npy_dir, 2, epochs=8)
    a = [args(lade_cli, npy_dir, r, 2, "ranks_per_node=2", "cache_mem_bytes=4000000", "job_id=stop",
              f"shm_dir={shm_dir}", "peer_timeout_ms=500", epochs=8, step_ms=30) for r in range(2)]
    r0 = start(a[0])
    # rank 1 starts once rank 0 is attached (a rank that opens while the lock is held fails, after
    # peer_timeout_ms, with the same message: test_shmcache test_stopped_holding_the_lock)
    while not segment_ready(shm_dir):
        assert r0.poll() is None, r0.communicate()
        time.sleep(0.01)
    r1 = subprocess.Popen(a[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(ENV, LADE_TEST_HOOK_STOP_IN_NODE_LOCK="3"))
    try:
        wait_state(r1.pid, "T")
        assert r0.poll() is None, "rank 0 finished before rank 1 stopped"
        t0 = time.monotonic()
        out, err = r0.communicate(timeout=120)
        took = time.monotonic() - t0
        assert r0.returncode == 0, err
        assert proc_state(r1.pid) == "T"  # rank 0 finished while rank 1 stayed stopped, holding the lock
        assert "held for more than peer_timeout_ms (500 ms)" in err and "stops using the node cache" in err, err
        d0 = json.loads(out)
        print(f"rank 0 finished {took:.2f} s after rank 1 stopped holding the lock")
    finally:
        os.kill(r1.pid, signal.SIGCONT)
    d1 = finish(r1)
    assert [d0["checksum"], d1["checksum"]] == ref
    assert d0["cache_corrupt"] == d1["cache_corrupt"] == 0
    assert glob.glob(os.path.join(shm_dir, "lade-*")) == []


def _small_tmpfs():
    """A private 1 MiB tmpfs (root and mount), else None."""
    d = tempfile.mkdtemp(prefix="lade-tmpfs-")
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d],
                                            stderr=subprocess.DEVNULL).returncode == 0:
        return d
    os.rmdir(d)
    return None


def test_shm_too_small_is_an_error_before_step_0(lade_cli, npy_dir, shm_dir):
    small = _small_tmpfs()
    try:
        if small:  # a 1 MiB tmpfs against a 4 MB cache
            where, cache = small, 4000000
        else:  # no mount here: the real /dev/shm against a cache larger than its free space
            st = os.statvfs(shm_dir)
            where, cache = shm_dir, st.f_bavail * st.f_frsize + (1 << 30)
        p = subprocess.run(args(lade_cli, npy_dir, 0, 2, "ranks_per_node=2", f"cache_mem_bytes={cache}",
                                "job_id=small", f"shm_dir={where}"), capture_output=True, text=True, env=ENV)
        assert p.returncode != 0 and p.stdout == ""  # not one batch
        for word in ("node cache", where, "cache_mem_bytes", "node_cache=off", "--shm-size"):
            assert word in p.stderr, (word, p.stderr)
        assert glob.glob(os.path.join(where, "lade-*")) == []  # nothing left behind
        print("small shared memory:", "a private 1 MiB tmpfs" if small else "cache_mem_bytes over /dev/shm's free space")
    finally:
        if small:
            subprocess.run(["umount", small])
            os.rmdir(small)


def test_node_cache_on_needs_a_job_key(lade_cli, npy_dir, shm_dir):
    p = subprocess.run(args(lade_cli, npy_dir, 0, 2, "ranks_per_node=2", "cache_mem_bytes=4000000",
                            "node_cache=on", f"shm_dir={shm_dir}"), capture_output=True, text=True, env=ENV)
    assert p.returncode != 0 and "job_id" in p.stderr
    # auto without a job key: a cache per rank, and a note saying why
    p = subprocess.run(args(lade_cli, npy_dir, 0, 2, "ranks_per_node=2", "cache_mem_bytes=4000000",
                            f"shm_dir={shm_dir}"), capture_output=True, text=True, env=ENV)
    assert p.returncode == 0 and "no job key" in p.stderr
    assert json.loads(p.stdout)["node_cache_entries"] == 0


# ---- the disk tier of a node: one cache_dir for the node's ranks of a job

def entry_files(cache_dir):
    return [f for f in glob.glob(os.path.join(cache_dir, "*", "??", "*")) if os.path.isfile(f)]


def disk_run(cli, ds, world, cache_dir, job, *extra, epochs=EPOCHS, step_ms=5):
    ps = [start(args(cli, ds, r, world, f"ranks_per_node={world}", f"cache_dir={cache_dir}", f"job_id={job}",
                     *extra, step_ms=step_ms, epochs=epochs)) for r in range(world)]
    return [finish(p) for p in ps]


def test_node_disk_cache_one_folder(lade_cli, npy_dir, tmp_path):
    ref = reference(lade_cli, npy_dir, 2)
    cdir = str(tmp_path / "cache")
    res = disk_run(lade_cli, npy_dir, 2, cdir, "disk1", "cache_disk_bytes=100000000")
    n = len(dataset_bytes(npy_dir))
    assert [d["checksum"] for d in res] == ref
    assert len(entry_files(cdir)) == n  # one file per sample for the node, not one per rank
    # each sample read from storage once for the node over both epochs: each rank reads what the other put (the
    # ranks are not in step: a rank ahead reads a sample in its second epoch that the other reads in its first,
    # and one of them reads it from the other's file; both reading one at the same moment is rare)
    assert n <= sum(d["cache_misses"] for d in res) <= n + 2
    # the last rank out merged the ranks' parts into INDEX: the next job's first open lists it, no scan
    ix = glob.glob(os.path.join(cdir, "*", "INDEX"))
    assert ix and not glob.glob(os.path.join(cdir, "*", "IXPART.*"))
    head = open(ix[0], "rb").read(16)  # magic LADEIX02, then the count of entries listed: every file, no fewer
    assert head[:8] == b"LADEIX02" and int.from_bytes(head[8:16], "little") == len(entry_files(cdir))
    # a later job on the node starts warm from the same folder
    res = disk_run(lade_cli, npy_dir, 2, cdir, "disk2", "cache_disk_bytes=100000000")
    assert [d["checksum"] for d in res] == ref
    assert sum(d["cache_misses"] for d in res) == 0


def test_node_disk_cache_budget_is_the_nodes(lade_cli, npy_dir, tmp_path):
    cdir = str(tmp_path / "cache")
    budget = 40 * 4096  # each entry is charged 4 KiB on disk: 40 entries for the node
    ref = reference(lade_cli, npy_dir, 2)
    res = disk_run(lade_cli, npy_dir, 2, cdir, "budget", f"cache_disk_bytes={budget}")
    assert [d["checksum"] for d in res] == ref
    assert 0 < len(entry_files(cdir)) <= 40


def test_node_disk_cache_other_job_refused(lade_cli, npy_dir, tmp_path):
    cdir = str(tmp_path / "cache")
    a = [start(args(lade_cli, npy_dir, r, 2, "ranks_per_node=2", f"cache_dir={cdir}", "job_id=A",
                    "cache_disk_bytes=100000000", epochs=6, step_ms=20)) for r in range(2)]
    while not glob.glob(os.path.join(cdir, "*", "LOCK")):
        time.sleep(0.01)
    time.sleep(0.3)
    b = subprocess.run(args(lade_cli, npy_dir, 0, 2, "ranks_per_node=2", f"cache_dir={cdir}", "job_id=B",
                            "cache_disk_bytes=100000000"), capture_output=True, text=True, env=ENV)
    assert b.returncode != 0 and "in use by another job" in b.stderr and cdir in b.stderr, b.stderr
    assert [finish(p)["checksum"] for p in a] == reference(lade_cli, npy_dir, 2, epochs=6)


# ---- model-parallel groups read once: the k ranks of a group train on identical batches (plan=shards,
# model_parallel=k); the node cache loads each sample once for them (docs/cache.md, Node cache)

@pytest.fixture(scope="module")
def tar_shards(tmp_path_factory):
    import io
    import tarfile
    d = tmp_path_factory.mktemp("mpshards")
    idx = 0
    for s in range(12):
        with tarfile.open(d / ("train-%06d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
            for j in range(25):
                data = bytes([(idx * 7 + k) % 251 for k in range(300)])
                ti = tarfile.TarInfo("s%06d_%03d.bin" % (s, j))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
                idx += 1
    return str(d)


def mp_run(cli, src, k, shm, job, *extra):
    ps = []
    for r in range(4):
        a = [cli, "bench", src, "--plan", "shards", "--transform", "raw", "--epochs", "2", "--batch-size", "8",
             "--threads", "2", "--json", "--step-ms", "15"]  # a training step: ranks start tens of ms apart
        for s in (f"rank={r}", "world_size=4", "ranks_per_node=4", f"model_parallel={k}", f"job_id={job}",
                  f"shm_dir={shm}", "shuffle_buffer=50", *extra):
            a += ["--set", s]
        ps.append(start(a))
    return [finish(p) for p in ps]


@pytest.mark.parametrize("k", [2, 4])
def test_model_parallel_group_reads_once(lade_cli, tar_shards, shm_dir, k):
    today = mp_run(lade_cli, tar_shards, k, shm_dir, f"mp{k}-off", "node_cache=off")
    once = mp_run(lade_cli, tar_shards, k, shm_dir, f"mp{k}")
    assert [d["checksum"] for d in once] == [d["checksum"] for d in today]  # the same batches, the files' bytes
    for e in range(2):
        before = sum(d["epochs"][e]["samples_by_source"][0] for d in today)
        after = sum(d["epochs"][e]["samples_by_source"][0] for d in once)
        print(f"model_parallel={k} epoch {e}: storage reads {before} today (each rank), {after} with the node cache")
        assert before >= k * 300  # today every rank of a group reads its batches itself
        # once per group: 1/k of today's, more only if a rank fell behind its group by more than the staging
        # budget (not seen here: 299 of 300 in epoch 0); less where the budget still holds samples that another
        # rank read for another epoch (the ranks are not in step) or the one read at open
        assert after <= before // k * 1.1
    assert all(d["node_cache_segment_bytes"] > 0 for d in once)
    assert glob.glob(os.path.join(shm_dir, "lade-*")) == []


# ---- torchrun: the node and the job key come from the launcher (LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID with
# MASTER_ADDR:MASTER_PORT), with no setting

TORCHRUN_SCRIPT = r"""
import hashlib, json, os, sys, time
import lade
ds, out, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
h = hashlib.sha256()


def barrier(name):
    # returns once every rank got here: a rank that finished reading keeps the node's segment (and sees the
    # others' puts) until they finished too. Without it, under load, a rank that started over a second after the
    # other found the segment gone (the other had read everything and closed), or one took its stats before the
    # other's last puts (node_cache_entries below n)
    open(os.path.join(out, "%s-%d" % (name, rank)), "w").close()
    while not all(os.path.exists(os.path.join(out, "%s-%d" % (name, r))) for r in range(world)):
        time.sleep(0.01)


with lade.Loader(ds, batch_size=10, epochs=2, rank=rank, world_size=world, output="numpy", threads=2, **extra) as L:
    for e in range(2):
        for x, y in L:
            h.update(x.tobytes())
            time.sleep(0.005)
    barrier("read")
    s = L.stats()
keys = ("cache_misses", "node_cache_entries", "node_cache_used_bytes", "ranks_per_node", "local_rank")
json.dump(dict(sha=h.hexdigest(), **{k: s[k] for k in keys}), open(os.path.join(out, "%d.json" % rank), "w"))
"""


def torchrun(tmp_path, ds, extra, shm):
    import shutil
    if not shutil.which("torchrun"):
        pytest.skip("torchrun not found")
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    out = tmp_path / ("out-%d" % len(list(tmp_path.iterdir())))
    out.mkdir()
    env = {k: v for k, v in ENV.items() if not k.startswith("TORCHELASTIC")}
    p = subprocess.run(["torchrun", "--standalone", "--nproc_per_node", "2", "--redirects", "2", "--tee", "2",
                        str(script), ds, str(out), json.dumps(dict(extra, shm_dir=shm))],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.load(open(out / ("%d.json" % r))) for r in range(2)]


def test_torchrun_one_copy_per_node(lade_cli, npy_dir, shm_dir, tmp_path):
    off = torchrun(tmp_path, npy_dir, dict(cache_mem_bytes=4000000, node_cache="off"), shm_dir)
    on = torchrun(tmp_path, npy_dir, dict(cache_mem_bytes=4000000), shm_dir)
    n = len(dataset_bytes(npy_dir))
    assert [d["sha"] for d in on] == [d["sha"] for d in off]  # the same batches
    assert [(d["local_rank"], d["ranks_per_node"]) for d in on] == [(0, 2), (1, 2)]
    assert all(d["node_cache_entries"] == 0 for d in off) and all(d["node_cache_entries"] == n for d in on)
    assert on[0]["node_cache_used_bytes"] == sum(charge(b) for b in dataset_bytes(npy_dir))
    assert sum(d["cache_misses"] for d in on) <= n + 1 < sum(d["cache_misses"] for d in off)
    assert glob.glob(os.path.join(shm_dir, "lade-*")) == []
