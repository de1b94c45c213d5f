"""What a torch DataLoader/DistributedSampler user expects of epochs, the last
batch and kept batches (docs/python.md), checked against torch itself."""
import subprocess

import numpy as np
import pytest

import lade

try:
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
N = 103


@pytest.fixture(scope="module")
def ds103(tmp_path_factory, lade_cli):
    """103 float32 samples of shape 4 in 10 class folders."""
    d = tmp_path_factory.mktemp("data") / "n103"
    subprocess.run([lade_cli, "gen", "npy", str(d), "--count", str(N), "--shape", "4",
                    "--seed", "2"], check=True, stdout=subprocess.DEVNULL)
    return str(d)


def _epoch(loader):
    """(indices, batch sizes, valid counts, epochs) of one iter(loader)."""
    idx, sizes, valid, epochs = [], [], [], set()
    for _data, _labels, b in loader:
        idx += b.indices.tolist()
        sizes.append(b.shape[0])
        valid.append(b.valid)
        epochs.add(b.epoch)
    return idx, sizes, valid, epochs


@needs_torch
def test_each_iter_is_one_epoch(ds103):
    ref = [len(b) for b in DataLoader(range(N), batch_size=8)]  # 12 x 8 and a short 7
    with lade.Loader(ds103, batch_size=8, seed=1, output="numpy", meta=True) as L:
        assert len(L) == len(ref) == 13
        runs = [_epoch(L) for _ in range(3)]
    orders = []
    for e, (idx, sizes, valid, epochs) in enumerate(runs):
        assert sizes == ref and valid == ref
        assert sorted(idx) == list(range(N))  # every sample exactly once
        assert epochs == {e}
        orders.append(idx)
    assert orders[0] != orders[1] != orders[2]  # reshuffled every epoch
    # batches per pass over a loader without epochs: 13 every time, never [13, 0, 0]
    with lade.Loader(ds103, batch_size=8, output="numpy") as L:
        assert [sum(1 for _ in L) for _ in range(3)] == [13, 13, 13]
    # a number of epochs ends the loader after them
    with lade.Loader(ds103, batch_size=8, epochs=2, output="numpy") as L:
        assert [sum(1 for _ in L) for _ in range(3)] == [13, 13, 0]


def test_stream_crosses_epochs(ds103):
    with lade.Loader(ds103, batch_size=8, seed=1, epochs=3, output="numpy", meta=True) as L:
        got = [(b.epoch, b.step, b.indices.tolist()) for _, _, b in L.stream()]
    with lade.Loader(ds103, batch_size=8, seed=1, epochs=3, output="numpy", meta=True) as L:
        per_epoch = [(b.epoch, b.step, b.indices.tolist()) for _ in range(3) for _, _, b in L]
    assert len(got) == 39 and got == per_epoch


def test_drop_last_and_oversized_batch(ds103):
    with lade.Loader(ds103, batch_size=8, drop_last=True, output="numpy", meta=True) as L:
        idx, sizes, _, _ = _epoch(L)
        assert len(L) == 12 and sizes == [8] * 12 and len(set(idx)) == 96
    with lade.Loader(ds103, batch_size=200, drop_last=True, output="numpy") as L:
        assert len(L) == 0 and [sum(1 for _ in L) for _ in range(2)] == [0, 0]
    with lade.Loader(ds103, batch_size=200, output="numpy", meta=True) as L:
        assert len(L) == 1 and _epoch(L)[1] == [N]


def test_set_epoch_like_distributed_sampler(ds103):
    with lade.Loader(ds103, batch_size=8, seed=4, output="numpy", meta=True) as L:
        L.set_epoch(5)
        a, _, _, ep = _epoch(L)
        assert ep == {5}
        L.set_epoch(5)  # the same epoch again: the same order, as DistributedSampler
        assert _epoch(L)[0] == a
        L.set_epoch(2)
        assert _epoch(L)[3] == {2}
        assert _epoch(L)[3] == {3}  # without set_epoch the next iter() is the next epoch


def test_break_then_iterate_restarts_the_epoch(ds103):
    with lade.Loader(ds103, batch_size=8, seed=4, output="numpy", meta=True) as L:
        first = next(iter(L))[2].indices.tolist()  # a peek, as `next(iter(loader))`
        idx, sizes, _, ep = _epoch(L)
        assert ep == {0} and len(sizes) == 13 and idx[:8] == first


def test_resume_mid_epoch_and_at_boundary(ds103):
    kw = dict(batch_size=8, seed=9, output="numpy", meta=True)
    with lade.Loader(ds103, **kw) as L:
        full = [_epoch(L)[0] for _ in range(3)]
    # stop after 5 batches of epoch 1, save, resume in a fresh loader
    with lade.Loader(ds103, **kw) as L:
        _epoch(L)
        it = iter(L)
        for _ in range(5):
            next(it)
        state = L.state_dict()
    assert (state["epoch"], state["step"]) == (1, 5)
    with lade.Loader(ds103, **kw) as L:
        L.load_state_dict(state)
        L.set_epoch(1)  # the usual loop calls it: it must not restart the resumed epoch
        rest = _epoch(L)[0]
        assert rest == full[1][40:]
        assert _epoch(L)[0] == full[2]
    # saved at an epoch boundary: the next iter() is the next epoch
    with lade.Loader(ds103, **kw) as L:
        _epoch(L)
        state = L.state_dict()
    assert (state["epoch"], state["step"]) == (1, 0)
    with lade.Loader(ds103, **kw) as L:
        L.load_state_dict(state)
        assert _epoch(L)[0] == full[1]


@needs_torch
@pytest.mark.parametrize("world", [2, 4, 5])
def test_ranks_like_distributed_sampler(ds103, world):
    """Per rank: as many batches of the same sizes as DataLoader over
    DistributedSampler (padding by wrap-around to a multiple of the world
    size); the valid samples of all ranks are the dataset exactly once."""
    seen = []
    for r in range(world):
        sampler = DistributedSampler(range(N), num_replicas=world, rank=r, shuffle=True, seed=0)
        ref = [len(b) for b in DataLoader(range(N), batch_size=8, sampler=sampler)]
        with lade.Loader(ds103, batch_size=8, rank=r, world_size=world, seed=3, output="numpy", meta=True) as L:
            assert len(L) == len(ref)
            idx, sizes, valid, _ = _epoch(L)
        assert sizes == ref and sum(sizes) == len(sampler)
        pos = 0
        for n, v in zip(sizes, valid):
            assert 0 < v <= n or (v == 0 and n > 0)
            seen += idx[pos:pos + v]
            pos += n
    assert sorted(seen) == list(range(N))


@needs_torch
def test_keeping_every_batch_works(ds103, capfd):
    with lade.Loader(ds103, batch_size=8, prefetch=2, seed=1, output="torch") as L:
        kept = [(x, y) for x, y in L]  # no clone(): every buffer stays held
        x = torch.cat([x for x, _ in kept])
        assert x.shape == (N, 4)
        again = torch.cat([x.clone() for x, _ in L])
    err = capfd.readouterr().err
    assert "pool_max" in err and "prefetch" in err and "clone()" in err  # the one-time warning
    assert err.count("lade: warning") == 1
    assert torch.equal(x.sort(dim=0).values, again.sort(dim=0).values)
    del kept, x


def test_holding_one_batch_never_deadlocks(ds103):
    # at prefetch=2 the 4th next() used to wait forever for the held buffer
    with lade.Loader(ds103, batch_size=8, prefetch=2, epochs=2, output="numpy") as L:
        it = L.stream()
        first = np.array(next(it)[0], copy=True)
        keep = next(it)[0]
        n = sum(1 for _ in it)
        assert n == 24
        assert keep.shape == (8, 4) and first.shape == (8, 4)


def test_pool_max_caps_held_batches(ds103):
    with lade.Loader(ds103, batch_size=8, prefetch=2, pool_max=4, output="numpy") as L:
        it = iter(L)
        held = [next(it) for _ in range(4)]
        with pytest.raises(lade.Error, match="pool_max"):
            next(it)
        del held


def test_empty_dataset_raises_at_construction(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(lade.Error, match="empty"):
        lade.Loader(str(tmp_path / "empty"), transform="raw")
