"""The UCX transport against a hostile world (issue 29; docs/transport.md,
UCX): real processes on this machine, real UCX, the addresses exchanged
through a rendezvous folder (rendezvous_dir, job_id), each rank a Python
process running lade.Loader (plan locality: samples travel between ranks,
checksummed) through a list of steps.

  - foreign, garbage, half-written, directory, FIFO, unreadable and oversized
    files in the rendezvous folder: either the ranks meet (the owner's
    atomic rename replaces what was there; foreign names are ignored) and
    every sample of the epoch comes once, bytes as the files', or every
    rank fails within peer_timeout_ms with an error naming the file and the
    rank; never a hang (the FIFO hung the reader before), a crash, or an
    address not written by the rank it names;
  - a rank that never starts, or never opens its second loader: the others
    fail within the bound naming the missing rank(s) and peer_timeout_ms
    (regression guards of what test_ucx.sh checks for the first case);
  - a rank whose loader fails before it opens the transport: its later
    loaders still meet the others' (the channel numbers used to shift for
    good, and every later loader ended in timeouts);
  - messages for a loader this rank has closed (ucx_hostile.c): they are
    received and dropped, so the sender's close does not wait out the
    timeout for a send nobody receives.

usage: LADE_BUILD=build bash scripts/pytest.sh tests/ucx/test_hostile_transport.py
"""
import json
import os
import stat
import subprocess
import sys
import time

import pytest

import lade

if "ucx" not in lade.features():
    pytest.skip("this build has no UCX (LADE_WITH_UCX; apt-get install libucx-dev)", allow_module_level=True)

N, SZ, B = 48, 128, 4
T = 3000  # peer_timeout_ms
SLACK = 20  # seconds a rank may take beyond T on a loaded machine (its Python, UCX and loader start)

# One rank: runs its steps in order, one line "RESULT <json>" per step.
# read: a loader over the dataset, one epoch (its indices, or the error);
# bad: a loader whose source does not exist (it fails before it opens the
# transport); touch/wait FILE: a marker between processes; sleep S.
RANK = r"""
import json, os, sys, time
sys.modules["torch"] = None  # the rendezvous folder, not torch.distributed: spares each rank importing torch
import numpy as np
import lade
a = json.loads(sys.argv[1])
SZ, B = %d, %d
def byte_ok(i, x):
    return bytes(np.asarray(x).reshape(-1).tobytes()) == bytes((i * 13 + k) %% 256 for k in range(SZ))
for step in a["steps"]:
    kind, _, arg = step.partition(":")
    if kind == "touch":
        open(arg, "w").close(); continue
    if kind == "wait":
        t0 = time.time()
        while not os.path.exists(arg) and time.time() - t0 < 60: time.sleep(0.02)
        continue
    if kind == "sleep":
        time.sleep(float(arg)); continue
    t0, got, err, ok = time.time(), [], "", True
    try:
        with lade.Loader(a["data"] if kind == "read" else a["data"] + "-missing", transform="raw", raw_size=SZ,
                         batch_size=B, epochs=1, seed=3, threads=2, drop_last=True, plan="locality",
                         cache_mem_bytes=a["n"] * (SZ + 64), transport="ucx", rendezvous_dir=a["rdv"],
                         job_id=a["job"], rank=a["rank"], world_size=a["world"], peer_timeout_ms=a["timeout"],
                         output="numpy", meta=True) as L:
            for x, _y, m in L:
                for j, i in enumerate(np.asarray(m.indices)):
                    got.append(int(i)); ok = ok and byte_ok(int(i), x[j])
    except lade.Error as e:
        err = str(e)
    print("RESULT " + json.dumps({"step": step, "got": got, "bytes_ok": ok, "error": err,
                                  "seconds": time.time() - t0}), flush=True)
""" % (SZ, B)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile") / "data"
    for c in range(2):
        os.makedirs(root / ("c%d" % c))
        for j in range(N // 2):
            i = c * (N // 2) + j
            (root / ("c%d" % c) / ("f%03d.bin" % j)).write_bytes(bytes((i * 13 + k) % 256 for k in range(SZ)))
    return str(root)


def start(data, rdv, job, rank, world, steps, timeout=T):
    arg = json.dumps({"data": data, "rdv": str(rdv), "job": job, "rank": rank, "world": world, "steps": steps,
                      "timeout": timeout, "n": N})
    return subprocess.Popen([sys.executable, "-c", RANK, arg], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finish(p, limit=60):
    """The rank's results by step; a rank still running after limit seconds is a hang: killed, and the test fails."""
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        pytest.fail("a rank hung (killed after %d s); its output:\n%s" % (limit, out[-3000:]))
    res = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0, out[-3000:]
    return res


def assert_epoch(results):
    """Every rank read its part of the epoch, each sample once over the ranks, bytes as the files'."""
    every = []
    for r in results:
        assert not r["error"], r["error"]
        assert r["bytes_ok"]
        every += r["got"]
    assert sorted(every) == list(range(N))


def real_line():
    """A well-formed address line (world 2) of a process that has exited."""
    out = subprocess.run([sys.executable, "-c", "import lade; print(lade._lade.ucx_address())"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return "lade-ucx 1 2 %s\n" % out


# ------------------------------------------------------------------ the rendezvous folder

def hostile(tmp_path, what, line):
    """Puts `what` where rank 1's address file goes (DIR/lade-J.1); returns its path."""
    rdv = tmp_path / "rdv"
    rdv.mkdir()
    path = rdv / "lade-J.1"
    if what == "garbage":
        path.write_bytes(b"\x00\xffGET / HTTP/1.1\r\n\r\n")
    elif what == "half-written":  # a prefix of a real line: no newline yet
        path.write_text(line[: len(line) // 2])
    elif what == "truncated-host":  # the whole address, the host name cut short
        path.write_text(line.rstrip("\n")[:-2])
    elif what == "oversized":  # 64 MB with no newline
        with open(path, "wb") as f:
            f.truncate(64 << 20)
    elif what == "directory":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "unreadable":  # a symbolic link to itself: ELOOP, even as root
        os.symlink(path.name, path)
    elif what == "foreign":  # another job's files, ranks outside the world, temporaries: ignored
        for name in ("lade-K.0", "lade-K.1", "lade-J.5", "lade-J", "lade-J.1.tmp", ".lade-J.1.tmp99", "lade-J.01"):
            (rdv / name).write_text(line)
        (rdv / "lade-J.1x").mkdir()
        path = None
    return rdv, path


@pytest.mark.parametrize("what", ["garbage", "half-written", "truncated-host", "oversized", "fifo", "unreadable",
                                  "foreign"])
def test_rendezvous_replaced_or_ignored(data, tmp_path, what):
    """Rank 0 starts first and finds `what` at rank 1's name (or beside it);
    rank 1 starts a second later and renames its file over it: both meet
    and read the epoch right. (unreadable and foreign passed before the fix
    too: regression guards; the others failed at once, used a dead address,
    or hung on the FIFO.)"""
    rdv, _ = hostile(tmp_path, what, real_line())
    p0 = start(data, rdv, "J", 0, 2, ["read"])
    time.sleep(1.0)
    p1 = start(data, rdv, "J", 1, 2, ["read"])
    assert_epoch([finish(p0)[0], finish(p1)[0]])


@pytest.mark.parametrize("what", ["garbage", "half-written", "oversized", "fifo", "unreadable"])
def test_rendezvous_owner_never_comes(data, tmp_path, what):
    """Rank 1 never starts: rank 0 fails within the bound, naming rank 1, the
    file, what is wrong with it, and the setting."""
    rdv, path = hostile(tmp_path, what, real_line())
    p0 = start(data, rdv, "J", 0, 2, ["read"])
    r = finish(p0, limit=T / 1000 + SLACK + 30)[0]
    assert r["error"] and r["seconds"] < T / 1000 + SLACK, r
    assert "rank 1" in r["error"] and str(path) in r["error"] and "peer_timeout_ms" in r["error"], r["error"]


def test_rendezvous_directory(data, tmp_path):
    """A folder at rank 1's name: nothing can replace it; both ranks fail
    without waiting out the timeout (rank 0 with a long one here), naming it
    and rank 1."""
    rdv, path = hostile(tmp_path, "directory", "")
    p0 = start(data, rdv, "J", 0, 2, ["read"], timeout=60000)
    p1 = start(data, rdv, "J", 1, 2, ["read"], timeout=60000)
    for r in (finish(p0)[0], finish(p1)[0]):
        assert r["error"] and r["seconds"] < SLACK, r
        assert str(path) in r["error"] and "rank 1" in r["error"] and "directory" in r["error"], r["error"]


def test_rendezvous_stale_file_of_a_dead_rank(data, tmp_path):
    """The file of this job's rank 1 whose process was killed (SIGKILL: it
    could not remove it): rank 0 does not take the dead address; the new
    rank 1's file replaces it and both meet."""
    rdv = tmp_path / "rdv"
    dead = start(data, rdv, "J", 1, 2, ["read"], timeout=60000)
    t0 = time.time()
    while not (rdv / "lade-J.1").exists() and time.time() - t0 < 30:
        time.sleep(0.02)
    dead.kill()
    dead.communicate()
    assert (rdv / "lade-J.1").exists()
    p0 = start(data, rdv, "J", 0, 2, ["read"])
    time.sleep(1.0)
    p1 = start(data, rdv, "J", 1, 2, ["read"])
    assert_epoch([finish(p0)[0], finish(p1)[0]])


# ------------------------------------------------------------------ a rank that never comes

def test_rank_never_starts(data, tmp_path):
    """Regression guard: rank 2 of 3 never starts; ranks 0 and 1 fail within
    the bound naming it and the setting."""
    ps = [start(data, tmp_path / "rdv", "J", r, 3, ["read"]) for r in (0, 1)]
    for p in ps:
        r = finish(p)[0]
        assert r["error"] and r["seconds"] < T / 1000 + SLACK, r
        assert "rank 2 did not" in r["error"] and "peer_timeout_ms" in r["error"], r["error"]


def test_ranks_never_open_their_second_loader(data, tmp_path):
    """Regression guard: 4 ranks read an epoch; ranks 2 and 3 then never open
    their second loader (alive, waiting): ranks 0 and 1 fail within the bound
    naming both and the setting."""
    done = tmp_path / "done"
    ps = [start(data, tmp_path / "rdv", "J", r, 4, ["read", "read"] if r < 2 else ["read", "wait:%s" % done])
          for r in range(4)]
    res = [finish(p) for p in ps[:2]]
    done.touch()
    res += [finish(p) for p in ps[2:]]
    assert_epoch([r[0] for r in res])
    for r in res[:2]:
        e = r[1]
        assert e["error"] and e["seconds"] < T / 1000 + SLACK, e
        assert "ranks 2, 3 did not open" in e["error"] and "peer_timeout_ms" in e["error"], e["error"]


# ------------------------------------------------------------------ channel numbers

def test_loader_failing_before_the_transport_does_not_shift_later_ones(data, tmp_path):
    """3 ranks read an epoch; rank 2's second loader fails before it opens the
    transport (no such source), so ranks 0 and 1 fail theirs within the
    bound naming rank 2; then every rank opens a third loader, which must
    meet (it used to be channel 2 on rank 2 and 3 on the others: timeouts)."""
    m = [tmp_path / ("failed.%d" % r) for r in (0, 1)]
    steps = {0: ["read", "read", "touch:%s" % m[0], "read"], 1: ["read", "read", "touch:%s" % m[1], "read"],
             2: ["read", "bad", "wait:%s" % m[0], "wait:%s" % m[1], "read"]}
    ps = [start(data, tmp_path / "rdv", "J", r, 3, steps[r]) for r in range(3)]
    res = [finish(p, limit=120) for p in ps]
    assert_epoch([r[0] for r in res])
    for r in res[:2]:
        e = r[1]
        assert e["error"] and e["seconds"] < T / 1000 + SLACK, e
        assert "rank 2" in e["error"] and "peer_timeout_ms" in e["error"], e["error"]
    assert "missing" in res[2][1]["error"] or "No such" in res[2][1]["error"] or res[2][1]["error"], res[2][1]
    assert_epoch([r[-1] for r in res])


def test_closed_channel_messages_dropped():
    """ucx_hostile.c: rank 1 sends 4 MB to rank 0 on a loader rank 0 has
    closed; rank 1's close returns well within the timeout (it waited it out
    when the message stayed in rank 0's unexpected queue), and a next loader
    between them carries its bytes right."""
    exe = os.path.join(os.path.dirname(os.environ["LADE_CLI"]), "tests", "ucx_hostile")
    if not os.path.exists(exe):
        pytest.skip("no %s (cmake --build BUILD --target ucx_hostile)" % exe)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        ps = [subprocess.Popen([exe, d, str(r), "closed"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True) for r in (0, 1)]
        outs = []
        for p in ps:
            try:
                outs.append(p.communicate(timeout=90)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                pytest.fail("ucx_hostile hung: " + p.communicate()[0][-2000:])
        for p, out in zip(ps, outs):
            assert p.returncode == 0, out[-3000:]
        assert "close took" in outs[1], outs[1]
