"""plan="shards" (docs/plan.md; Parax data loading, paper 001) on tar shards
written by Python's tarfile:
each data-parallel group streams its part of the shuffled shard list through a shuffle buffer.
Every sample once per epoch over the groups (padding last, counted by batch.valid), the ranks
of one model-parallel group get identical batches, groups are disjoint, the order is the same at
any thread count and resumes bit for bit, and the bytes are tarfile's."""
import io
import tarfile

import numpy as np
import pytest

import lade

SHARDS, PER = 12, 25  # 300 samples
B = 8


def _write(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    truth = {}
    idx = 0
    for s in range(SHARDS):
        with tarfile.open(d / ("train-%06d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
            for j in range(PER):
                data = bytes([(idx * 7 + k) % 251 for k in range(64)])
                for name, payload in (("s%06d_%03d.bin" % (s, j), data), ("s%06d_%03d.cls" % (s, j), b"%d" % (s % 3))):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(payload)
                    t.addfile(ti, io.BytesIO(payload))
                truth[idx] = (data, s)
                idx += 1
    return str(d), truth


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("shardsplan"))


def _run(src, rank=0, world=1, epochs=2, **kw):
    kw.setdefault("threads", 2)
    out = []
    with lade.Loader(src, transform="raw", batch_size=B, epochs=epochs, seed=11, rank=rank, world_size=world,
                     plan="shards", output="numpy", meta=True, **kw) as L:
        for e in range(epochs):
            for x, y, m in L:
                out.append((e, m.step, [int(i) for i in np.asarray(m.indices)], int(m.valid), x.copy()))
    return out


def test_every_sample_once_per_epoch_and_bytes(shards):
    src, truth = shards
    seen = [dict() for _ in range(2)]
    for r in range(4):
        for e, _st, idx, valid, x in _run(src, r, 4, shuffle_buffer=50):
            for i, k in enumerate(idx):
                assert bytes(x[i][:64]) == truth[k][0]
                if i < valid:
                    seen[e][k] = seen[e].get(k, 0) + 1
    for e in range(2):
        assert sorted(seen[e]) == list(range(SHARDS * PER))
        assert set(seen[e].values()) == {1}


def test_buffer_zero_reads_shards_in_order(shards):
    src, truth = shards
    run = _run(src, 0, 2, shuffle_buffer=0)
    flat = [k for _e, _s, idx, valid, _x in run if _e == 0 for k in idx[:valid]]
    # within a shard the samples come front to back: consecutive indices, few shard changes
    changes = sum(1 for a, b in zip(flat, flat[1:]) if truth[a][1] != truth[b][1])
    assert changes <= SHARDS // 2 + 1
    assert all(b == a + 1 for a, b in zip(flat, flat[1:]) if truth[a][1] == truth[b][1])
    # a buffer mixes them: many more shard changes, same samples
    mixed = [k for _e, _s, idx, valid, _x in _run(src, 0, 2, shuffle_buffer=100) if _e == 0 for k in idx[:valid]]
    assert sorted(mixed) == sorted(flat)
    assert sum(1 for a, b in zip(mixed, mixed[1:]) if truth[a][1] != truth[b][1]) > 3 * changes
    # and epochs differ
    assert [r[2] for r in run if r[0] == 0] != [r[2] for r in run if r[0] == 1]


def test_model_parallel_groups(shards):
    src, _ = shards
    runs = [[(e, s, idx) for e, s, idx, _v, _x in _run(src, r, 4, model_parallel=2)] for r in range(4)]
    assert runs[0] == runs[1] and runs[2] == runs[3]
    a = {k for _e, _s, idx in runs[0] if _e == 0 for k in idx}
    b = {k for _e, _s, idx in runs[2] if _e == 0 for k in idx}
    assert len(a & b) <= 1  # disjoint parts (a padding repeat may coincide)


def test_same_order_any_thread_count_and_resume(shards):
    src, _ = shards
    one = _run(src, 1, 3, threads=1)
    four = _run(src, 1, 3, threads=4)
    assert [r[:3] for r in one] == [r[:3] for r in four]
    with lade.Loader(src, transform="raw", batch_size=B, epochs=2, seed=11, rank=1, world_size=3, plan="shards",
                     output="numpy", meta=True) as L:
        it = iter(L)
        for _ in range(5):
            next(it)
        state = L.state_dict()
        del it
    with lade.Loader(src, transform="raw", batch_size=B, epochs=2, seed=11, rank=1, world_size=3, plan="shards",
                     output="numpy", meta=True) as L:
        L.load_state_dict(state)
        rest = []
        for e in range(state["epoch"], 2):
            for x, y, m in L:
                rest.append((e, m.step, [int(i) for i in np.asarray(m.indices)]))
    assert rest == [r[:3] for r in one[5:]]


def test_shards_needs_a_sharded_source(tmp_path):
    d = tmp_path / "flat" / "c0"
    d.mkdir(parents=True)
    np.save(d / "a.npy", np.zeros(3, np.float32))
    with pytest.raises(lade.Error, match="has none"):
        lade.Loader(str(tmp_path / "flat"), batch_size=1, plan="shards")
