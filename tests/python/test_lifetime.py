"""Batch buffers outlive the loader; the DLPack deleter releases each batch exactly once.
Also run under AddressSanitizer by the `python_lifetime_asan` ctest entry of a sanitized build."""
import gc
import threading

import numpy as np
import pytest

import lade

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def _released():
    return lade._lade._released()


def _released_settled():
    """The count once garbage from earlier tests (batches of their loaders) is collected: the counter is
    process-wide, so a batch collected during this test's own gc.collect() would count as its own."""
    gc.collect()
    return _released()


def test_numpy_views_outlive_loader(npy_dir):
    L = lade.Loader(npy_dir, batch_size=16, threads=2, shuffle=False, output="numpy")
    it = iter(L)
    data, labels = next(it)
    expect = data.copy()
    del it
    L.close()
    del L
    gc.collect()
    for _ in range(3):
        junk = [np.ones(4096) for _ in range(100)]  # churn the heap
        del junk
    assert np.array_equal(data, expect)
    data += 1  # still writable memory we own
    assert np.array_equal(data, expect + 1)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_tensor_outlives_loader_and_releases_once(npy_dir):
    before = _released_settled()
    L = lade.Loader(npy_dir, batch_size=16, threads=2, output="torch", meta=True)
    data, labels, b = next(iter(L))
    view2 = data[3:5]  # a derived view keeps the same storage
    ptr = b.data_ptr
    expect = data.clone()
    del b
    L.close()
    del L
    gc.collect()
    assert _released() == before  # still held by the tensor
    assert torch.equal(data, expect) and view2.data_ptr() == ptr + 3 * 3 * 8 * 8 * 4
    del data
    gc.collect()
    assert _released() == before  # view2 still holds it
    assert torch.equal(view2, expect[3:5])
    del view2
    gc.collect()
    assert _released() == before + 1  # exactly once, when the last view went


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_release_from_another_thread(npy_dir):
    before = _released_settled()
    with lade.Loader(npy_dir, batch_size=8, threads=2, prefetch=40, output="torch") as L:
        held = [d for d, _ in L]
    n = len(held)
    t = threading.Thread(target=held.clear)
    t.start()
    t.join()
    gc.collect()
    assert _released() == before + n


def test_many_batches_do_not_stall(npy_dir):
    # each batch's buffer goes back to the pool when its arrays die: 10 epochs
    # through a pool of prefetch+1 buffers only works if releases happen
    with lade.Loader(npy_dir, batch_size=32, threads=2, epochs=10, prefetch=1, output="numpy") as L:
        n = sum(1 for _ in L.stream())
    assert n == 100


def test_batch_put_back_when_conversion_fails(npy_dir):
    # a KeyboardInterrupt inside the conversion (torch.from_dlpack is Python
    # code, so a signal often lands there) used to end the generator with the
    # batch taken and dropped: tell() skipped it and resume lost it
    before = _released_settled()
    with lade.Loader(npy_dir, batch_size=30, threads=2, shuffle=False, output="numpy", meta=True) as L:
        conv = L._convert
        calls = [0]

        def flaky(b):
            calls[0] += 1
            if calls[0] in (2, 3):
                raise KeyboardInterrupt
            return conv(b)

        L._convert = flaky
        it = iter(L)
        _, _, b = next(it)
        steps = [b.step]
        for _ in range(2):  # twice in a row: the same batch is put back each time
            with pytest.raises(KeyboardInterrupt):
                next(it)
            assert L.tell() == (0, 1) and L.interrupted
            assert L.state_dict()["step"] == 1
        steps += [b.step for _, _, b in iter(L)]  # a new iterator goes on with it
        assert steps == list(range(10))
        assert not L.interrupted
    del b
    gc.collect()
    assert _released() == before + 10  # each batch released exactly once, the put-back one too


def test_close_frees_cache_dir_while_a_batch_is_held(npy_dir, tmp_path):
    """close() releases the disk cache (and its folder lock) even while a batch
    handed out is still referenced: a new loader on the same cache_dir in this
    process opens, and the held batch keeps its values."""
    cache = str(tmp_path / "cache")
    L = lade.Loader(npy_dir, batch_size=16, threads=2, shuffle=False, output="numpy", cache_dir=cache)
    data, _ = next(iter(L))
    expect = data.copy()
    L.close()
    with lade.Loader(npy_dir, batch_size=16, threads=2, shuffle=False, output="numpy", cache_dir=cache) as L2:
        again, _ = next(iter(L2))
        assert np.array_equal(again, expect)
    assert np.array_equal(data, expect)
    del data, again
    gc.collect()
