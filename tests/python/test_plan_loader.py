"""lade.Loader(plan=...): every plan kind from Python (docs/plan.md).

Four ranks are four loaders in this process (no transport between them yet:
a sample the plan routes to a peer is read from storage and counted). Each
step's samples over the ranks are regular's global batch, every sample once
per epoch, values equal np.load, the cache serves from the second epoch,
and state_dict() resumes a plan bit for bit."""
import collections

import numpy as np
import pytest

import lade
from conftest import list_files

KINDS = ["regular+lru", "regular+belady", "distcache", "locality", "solar"]
B, W, E = 5, 4, 3


def _loader(npy_dir, plan, rank, **kw):
    kw.setdefault("cache_mem_bytes", 400 * 1024)
    return lade.Loader(npy_dir, batch_size=B, epochs=E, seed=3, threads=2, rank=rank, world_size=W,
                       drop_last=True, plan=plan, output="numpy", meta=True, **kw)


def _run(loader):
    out = []
    for e in range(E):
        for x, y, meta in loader:
            out.append((e, meta.step, [int(i) for i in np.asarray(meta.indices)], x.copy()))
    return out


@pytest.fixture(scope="module")
def reference(npy_dir):
    files, _ = list_files(npy_dir)
    arrays = [np.load(f) for f in files]
    steps = {}
    for r in range(W):
        with _loader(npy_dir, "regular", r) as L:
            for e, st, idx, _x in _run(L):
                steps.setdefault((e, st), collections.Counter()).update(idx)
    return arrays, steps


@pytest.mark.parametrize("plan", KINDS)
def test_plan_delivers_regular_global_batches(npy_dir, reference, plan):
    arrays, regular = reference
    got = {}
    hits = fallbacks = 0
    for r in range(W):
        with _loader(npy_dir, plan, r) as L:
            for e, st, idx, x in _run(L):
                got.setdefault((e, st), collections.Counter()).update(idx)
                for i, k in enumerate(idx):
                    np.testing.assert_array_equal(x[i], arrays[k])
            for e in range(1, E):
                es = L.epoch_stats(e)
                hits += es["samples_by_source"][1]
                fallbacks += es["plan_fallbacks"]
            assert L.stats()["plan_fallbacks"] == 0
    if plan != "solar":  # solar reorders the epochs' shuffles: its steps are regular's of another epoch
        assert got == regular
    for e in range(E):
        seen = collections.Counter()
        for (ee, _st), c in got.items():
            if ee == e:
                seen.update(c)
        assert max(seen.values()) == 1  # every sample at most once per epoch (drop_last drops the rest)
        assert sum(seen.values()) == len(regular) // E * B * W
    assert hits > 0 and fallbacks == 0


def test_plan_resume_bit_for_bit(npy_dir):
    with _loader(npy_dir, "locality", 1) as L:
        full = _run(L)
    with _loader(npy_dir, "locality", 1) as L:
        it = iter(L)
        for _ in range(7):
            next(it)
        state = L.state_dict()
        del it
    with _loader(npy_dir, "locality", 1) as L:
        L.load_state_dict(state)
        rest = []
        e0 = state["epoch"]
        for e in range(e0, E):
            for x, y, meta in L:
                rest.append((e, meta.step, [int(i) for i in np.asarray(meta.indices)], x.copy()))
        # the resumed run's cache starts empty: what the plan believes cached is read from storage, counted
        assert L.stats()["plan_fallbacks"] > 0
    tail = full[7:]
    assert [(a[0], a[1], a[2]) for a in rest] == [(a[0], a[1], a[2]) for a in tail]
    for a, b in zip(rest, tail):
        np.testing.assert_array_equal(a[3], b[3])


def test_plan_errors_are_clear(npy_dir, tmp_path):
    with pytest.raises(lade.Error, match="not both"):
        _loader(npy_dir, "locality", 0, cache_dir=str(tmp_path / "c"))
    with pytest.raises(lade.Error, match="set epochs"):
        lade.Loader(npy_dir, batch_size=B, plan="solar", drop_last=True)
    with pytest.raises(lade.Error, match="plan"):
        _loader(npy_dir, "no-such-plan", 0)


def test_solar_two_tiers(npy_dir, reference, tmp_path):
    """solar with cache_mem_bytes and cache_dir + cache_disk_bytes: memory over
    the disk as one hierarchy (docs/plan.md, Two tiers). One learner, a memory
    tier of a few samples and a disk tier under it: the values are np.load's,
    both tiers are read, admits go to each and samples move between them,
    with no fallback, and stats() says so (test_plan_exec checks every count
    against the plan and lade_simulate)."""
    arrays, _ = reference
    n = len(arrays)
    with lade.Loader(npy_dir, batch_size=B, epochs=E, seed=3, threads=2, drop_last=True, plan="solar",
                     output="numpy", meta=True, cache_mem_bytes=4 * 1024, cache_dir=str(tmp_path / "c"),
                     cache_disk_bytes=(n // 3) * 4096) as L:
        for _e, _st, idx, x in _run(L):
            for i, k in enumerate(idx):
                np.testing.assert_array_equal(x[i], arrays[k])
        st = L.stats()
        eps = [L.epoch_stats(e) for e in range(E)]
    assert st["plan_fallbacks"] == 0
    assert sum(e["samples_by_source"][1] for e in eps) > 0 and sum(e["samples_by_source"][2] for e in eps) > 0
    assert st["plan_admits_mem"] > 0 and st["plan_admits_disk"] > 0
    assert st["plan_moves_up"] + st["plan_moves_down"] > 0
