"""Resume at another world size (docs/plan.md "Resume"): P loaders (rank r of P, no transport:
a sample routed to a peer is read from storage and counted) run into an epoch, rank 0's
state_dict() resumes Q loaders. The union of what the Q ranks deliver for the rest of the epoch is
exactly the samples the P ranks had not delivered, each once; the bytes are the files'; later
epochs are those of an uninterrupted run at Q; a planned kind's per-rank counts after the resume
equal the planner's for the same resume point (`lade plan --resume`)."""
import collections
import io
import json
import subprocess
import tarfile

import numpy as np
import pytest

import lade
from conftest import list_files

N, B, E, SEED = 300, 5, 3, 3
CACHE = 20  # samples per learner for the planned kinds
LAYOUTS = [(4, 2), (2, 4), (4, 3)]
KINDS = ["regular", "shards", "distcache", "locality", "solar"]
# the kinds whose later epochs give each rank the same samples as an uninterrupted run (regular slices)
PER_RANK = {"regular", "shards", "distcache", "regular+lru", "regular+belady"}


def _shards(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    truth = {}
    for s in range(12):
        with tarfile.open(d / ("train-%06d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
            for j in range(25):
                idx = s * 25 + j
                data = bytes([(idx * 7 + k) % 251 for k in range(64)])
                for name, payload in (("s%06d_%03d.bin" % (s, j), data), ("s%06d_%03d.cls" % (s, j), b"0")):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(payload)
                    t.addfile(ti, io.BytesIO(payload))
                truth[idx] = data
    return str(d), truth


@pytest.fixture(scope="module")
def data(tmp_path_factory, npy_dir):
    files, _ = list_files(npy_dir)
    arrays = [np.load(f) for f in files]
    assert len(arrays) == N
    tar_dir, truth = _shards(tmp_path_factory.mktemp("resize"))
    charge = max(len(open(f, "rb").read()) for f in files) + 64  # the memory tier's charge of one entry
    return {"npy": npy_dir, "arrays": arrays, "tar": tar_dir, "truth": truth, "charge": charge}


def _loader(data, plan, rank, world, batch=B, **kw):
    kw.setdefault("drop_last", True)
    kw.setdefault("threads", 2)
    if plan == "shards":
        src, tr = data["tar"], "raw"
    else:
        src, tr = data["npy"], "npy"
        if plan != "regular":
            kw.setdefault("cache_mem_bytes", CACHE * data["charge"])
    return lade.Loader(src, transform=tr, batch_size=batch, epochs=E, seed=SEED, rank=rank, world_size=world,
                       plan=plan, transport="local", output="numpy", meta=True, **kw)


def _check_bytes(data, plan, x, idx):
    for i, k in enumerate(idx):
        if plan == "shards":
            assert bytes(x[i][:64]) == data["truth"][k]
        else:
            np.testing.assert_array_equal(x[i], data["arrays"][k])


def _stop(data, plan, P, Q, stop, batch=B, **kw):
    """P ranks: epoch 0 whole, then `stop` steps of epoch 1; rank 0's state and what they consumed."""
    consumed, states = collections.Counter(), []
    for r in range(P):
        with _loader(data, plan, r, P, batch, **kw) as L:
            for _ in L:
                pass
            it = iter(L)
            for _ in range(stop):
                x, y, m = next(it)
                consumed.update(int(i) for i in np.asarray(m.indices)[:m.valid])
            states.append(L.state_dict())
            del it
    assert all(s["position"] == states[0]["position"] for s in states)  # global: any rank's is rank 0's
    return states[0], consumed


def _resume(data, plan, Q, state, batch=B, **kw):
    """Q ranks from `state`: the rest of its epoch (valid indices), each rank's steps of the later
    epochs, per-epoch stats."""
    rest, later, stats = collections.Counter(), {}, []
    for r in range(Q):
        with _loader(data, plan, r, Q, batch, **kw) as L:
            L.load_state_dict(state)
            e0 = state["epoch"]
            assert L.tell()[0] == e0
            for x, y, m in L:
                assert m.epoch == e0
                idx = [int(i) for i in np.asarray(m.indices)]
                _check_bytes(data, plan, x, idx)
                rest.update(idx[:m.valid])
            for e in range(e0 + 1, E):
                for x, y, m in L:
                    idx = [int(i) for i in np.asarray(m.indices)]
                    _check_bytes(data, plan, x, idx)
                    later[(r, e, m.step)] = idx
            assert L.next_batch() is None
            stats.append([L.epoch_stats(e) for e in range(e0, E)] + [L.stats()])
    return rest, later, stats


def _uninterrupted(data, plan, Q, first_epoch, batch=B, **kw):
    out = {}
    for r in range(Q):
        with _loader(data, plan, r, Q, batch, **kw) as L:
            for e in range(first_epoch, E):
                L.set_epoch(e)
                for x, y, m in L:
                    out[(r, e, m.step)] = [int(i) for i in np.asarray(m.indices)]
    return out


def _same_later(plan, Q, later, ref):
    assert sorted(later) == sorted(ref)
    if plan in PER_RANK:
        assert later == ref
    else:  # locality and solar assign by cache contents: the global batch of each step is the same
        for key in {(e, st) for (_r, e, st) in ref}:
            a = sorted(i for r in range(Q) for i in later[(r,) + key])
            b = sorted(i for r in range(Q) for i in ref[(r,) + key])
            assert a == b


def _plan_counts(lade_cli, plan, Q, pos):
    """Per (rank, epoch): samples from own cache, peers and storage in `lade plan --resume`'s plan."""
    out = subprocess.run([lade_cli, "plan", "--plan", plan, "--samples", str(N), "--learners", str(Q),
                          "--batch-size", str(B), "--epochs", str(E), "--seed", str(SEED), "--cache", str(CACHE),
                          "--resume", "%d:%d:%d" % (pos["epoch"], pos["consumed"], pos["shuffle_epoch"]), "--dump"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    counts = collections.defaultdict(lambda: [0, 0, 0])
    for line in out.splitlines():
        s = json.loads(line)
        for f in s["from"]:
            counts[(s["learner"], s["epoch"])][0 if f == "cache" else 2 if f == "storage" else 1] += 1
    return counts


CASES = [(k, P, Q) for k in KINDS for P, Q in LAYOUTS] + [("regular+lru", 4, 3), ("regular+belady", 4, 2)]


@pytest.mark.parametrize("plan,P,Q", CASES)
def test_resume_at_another_world_size(data, lade_cli, plan, P, Q):
    stop = 4 if P == 2 else 3  # N - stop * B * P is a multiple of B * Q: no step is dropped or padded
    state, consumed = _stop(data, plan, P, Q, stop)
    assert state["version"] == 2 and state["epoch"] == 1 and state["step"] == stop
    pos = state["position"]
    assert (pos["world_size"], pos["batch_size"]) == (P, B)
    rest, later, stats = _resume(data, plan, Q, state)
    # the rest of epoch 1: every sample not consumed, each once, none consumed again
    assert not set(rest) & set(consumed)
    assert set(rest.values()) == {1} and set(consumed.values()) == {1}
    assert sorted(set(rest) | set(consumed)) == list(range(N))
    _same_later(plan, Q, later, _uninterrupted(data, plan, Q, 2))
    if plan in ("regular", "shards"):
        return
    # a planned kind plans from the resume point with empty caches: per rank, the planner's counts
    want = _plan_counts(lade_cli, plan, Q, pos)
    for r in range(Q):
        for i, e in enumerate(range(pos["epoch"], E)):
            es = stats[r][i]
            cache, peer, storage = want[(r, e)]
            assert es["samples_by_source"][1] == cache, (r, e)
            assert es["samples_by_source"][0] == storage + peer, (r, e)
            assert es["plan_peer_storage"] == peer, (r, e)
            assert es["plan_fallbacks"] == 0
        assert stats[r][-1]["plan_fallbacks"] == 0
    if plan in ("locality", "solar", "distcache"):
        assert sum(want[(r, 2)][0] for r in range(Q)) > 0  # the caches serve again after the resume


@pytest.mark.parametrize("plan", ["regular", "locality"])
def test_batch_size_changes_too(data, plan):
    """4 ranks of batch 5 -> 3 ranks of batch 7, drop_last off: the rest is cut into global batches of
    21 (the last short, padded to a multiple of 3 from the epoch's start: `valid` counts the real
    samples), still each remaining sample once; the next epoch is the uninterrupted run's."""
    state, consumed = _stop(data, plan, 4, 3, 3, drop_last=False)
    rest, later, _ = _resume(data, plan, 3, state, batch=7, drop_last=False)
    assert not set(rest) & set(consumed)
    assert set(rest.values()) == {1}
    assert sorted(set(rest) | set(consumed)) == list(range(N))
    _same_later(plan, 3, later, _uninterrupted(data, plan, 3, 2, batch=7, drop_last=False))


def test_resumed_twice_and_saved_inside(data):
    """4 -> 3, saved inside the resumed epoch, -> 2: the three runs together deliver epoch 1 once."""
    state, consumed = _stop(data, "regular", 4, 3, 3)
    seen = collections.Counter(consumed)
    for r in range(3):
        with _loader(data, "regular", r, 3) as L:
            L.load_state_dict(state)
            it = iter(L)
            for _ in range(2):
                x, y, m = next(it)
                seen.update(int(i) for i in np.asarray(m.indices)[:m.valid])
            if r == 0:
                state2 = L.state_dict()
            del it
    assert state2["position"]["consumed"] == 3 * B * 4 + 2 * B * 3
    rest, _, _ = _resume(data, "regular", 2, state2)
    seen.update(rest)
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}


def test_version_1_state_at_another_world_size(data):
    """A version 1 state (epoch, step at the saver's world_size and batch_size) resumes too."""
    state, consumed = _stop(data, "regular", 4, 2, 3)
    v1 = {"version": 1, "epoch": state["epoch"], "step": state["step"],
          "settings": {k: state["settings"][k] for k in ("source", "batch_size", "seed", "rank", "world_size",
                                                          "transform", "plan", "drop_last")}}
    rest, _, _ = _resume(data, "regular", 2, v1)
    assert not set(rest) & set(consumed) and sorted(set(rest) | set(consumed)) == list(range(N))


def test_what_may_not_change(data):
    state, _ = _stop(data, "regular", 4, 2, 3)
    with lade.Loader(data["npy"], transform="npy", batch_size=B, epochs=E, seed=SEED + 1, rank=0, world_size=2,
                     drop_last=True, output="numpy") as L:
        with pytest.raises(lade.Error, match="setting 'seed' differs"):
            L.load_state_dict(state)
    with _loader(data, "locality", 0, 2) as L:
        with pytest.raises(lade.Error, match="setting 'plan' differs"):
            L.load_state_dict(state)
        # without the settings to compare, the position's plan kind is refused
        bad = dict(state, settings={})
        with pytest.raises(lade.Error, match="another plan"):
            L.load_state_dict(bad)
    # a resumed loader's steps before its start are another run's
    with _loader(data, "regular", 1, 3) as L:
        L.load_state_dict(state)
        e, s = L.tell()
        assert s > 0
        with pytest.raises(lade.Error, match="where this loader resumed"):
            L.seek(e, s - 1)


def test_warm_restart_reads_less(data, tmp_path):
    """A planned kind with a disk cache (world size 1), stopped early in epoch 1 and restarted from its
    state, starts from what survived on disk (docs/plan.md "Warm restarts"): no fallback, and fewer
    storage reads than the same restart with the disk emptied; still every sample once per epoch.
    (tests/unit/test_plan_exec.c checks the counts equal the planner's from the surviving caches.)"""
    kw = dict(cache_dir=str(tmp_path / "c"), cache_disk_bytes=(N // 2) * 4096, cache_mem_bytes=0)

    def restart(state):
        seen, reads = collections.Counter(), 0
        with _loader(data, "locality", 0, 1, **kw) as L:
            L.load_state_dict(state)
            for e in range(state["epoch"], E):
                for x, y, m in L:
                    idx = [int(i) for i in np.asarray(m.indices)]
                    _check_bytes(data, "locality", x, idx)
                    if e == state["epoch"]:
                        seen.update(idx[:m.valid])
                reads += L.epoch_stats(e)["samples_by_source"][0]
            assert L.stats()["plan_fallbacks"] == 0
        return seen, reads

    with _loader(data, "locality", 0, 1, **kw) as L:
        for _ in L:
            pass
        it = iter(L)
        consumed = collections.Counter(int(i) for _ in range(2) for i in np.asarray(next(it)[2].indices))
        state = L.state_dict()
        del it
    seen, warm = restart(state)
    assert not set(seen) & set(consumed) and len(seen) + len(consumed) == N // (B * 1) * B
    import shutil
    shutil.rmtree(kw["cache_dir"])
    _, cold = restart(state)
    assert warm < cold, (warm, cold)
