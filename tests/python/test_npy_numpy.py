""".npy files as numpy writes them (np.save) load as np.load reads them (docs/sources.md, npy).

Every dtype numpy has that lade supports, C and fortran order (2-D and 3-D
samples), both byte orders, both layouts of the npy source (a file per sample;
one stacked N x ... file), with and without a cache tier in front (which takes
the npy transform's path instead of read_payload). What lade delivers must
equal np.load(f) exactly: in numpy output bit for bit with the same (native)
dtype, in torch output equal to torch.from_numpy(np.load(f)) where torch has the
dtype, and a clear lade.Error where it has not.
"""
import os

import numpy as np
import pytest

import lade

torch = pytest.importorskip("torch")

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
# (sample shape, fortran order)
LAYOUTS = [((5, 7), False), ((5, 7), True), ((2, 3, 4), True)]
N = 10


def values(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    x = (rng.standard_normal(shape) * 1000).astype(dt)
    flat = x.reshape(-1)
    flat[:4] = [np.nan, np.inf, -np.inf, -0.0]  # bit patterns a lossy path would change
    return x


def native(a):
    """np.load's array in C order and the host's byte order (what lade delivers)."""
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("=")))


def make(tmp_path, dtype, shape, fortran, big, stacked, seed=0):
    """Writes N samples with np.save; returns (source path, [np.load of each sample])."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype).newbyteorder(">" if big else "<")
    if stacked:
        arr = values(rng, dtype, (N,) + shape).astype(dt)
        if fortran:
            arr = np.asfortranarray(arr)
        path = str(tmp_path / "data.npy")
        np.save(path, arr)
        loaded = np.load(path)
        assert loaded.flags.f_contiguous == fortran and loaded.dtype == dt
        return path, [native(loaded[i]) for i in range(N)]
    d = tmp_path / "folder"
    d.mkdir()
    refs = []
    for i in range(N):
        x = values(rng, dtype, shape).astype(dt)
        if fortran:
            x = np.asfortranarray(x)
        f = str(d / ("s%03d.npy" % i))
        np.save(f, x)
        loaded = np.load(f)
        assert loaded.flags.f_contiguous == fortran or len(shape) < 2
        refs.append(native(loaded))
    return str(d), refs


def collect(source, output, **settings):
    out = {}
    with lade.Loader(source, batch_size=4, threads=2, output=output, meta=True, **settings) as L:
        for data, _, b in L:
            idx = np.frombuffer(b.indices, dtype=np.int64)
            for k, i in enumerate(idx):
                out.setdefault(int(i), data[k].clone() if output == "torch" else data[k].copy())
            ptr = b.data_ptr
            if output == "numpy":
                assert data.__array_interface__["data"][0] == ptr  # a view, no copy
            else:
                assert data.data_ptr() == ptr
    assert sorted(out) == list(range(N))
    return out


CASES = [(dt, shape, fortran, big, stacked)
         for dt in DTYPES for shape, fortran in LAYOUTS for big in (False, True) for stacked in (False, True)
         if not (big and np.dtype(dt).itemsize == 1)]


def case_id(c):
    dt, shape, fortran, big, stacked = c
    return "%s-%s-%s-%s-%s" % (dt, "x".join(map(str, shape)), "F" if fortran else "C", "be" if big else "le",
                               "stacked" if stacked else "files")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_numpy_output_equals_np_load(tmp_path, case):
    dtype, shape, fortran, big, stacked = case
    source, refs = make(tmp_path, dtype, shape, fortran, big, stacked)
    got = collect(source, "numpy")
    for i, ref in enumerate(refs):
        x = got[i]
        assert x.dtype == ref.dtype and x.shape == ref.shape, (i, x.dtype, x.shape)
        assert x.tobytes() == ref.tobytes(), i


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in ("uint16", "uint32", "uint64")], ids=case_id)
def test_torch_output_equals_from_numpy(tmp_path, case):
    dtype, shape, fortran, big, stacked = case
    source, refs = make(tmp_path, dtype, shape, fortran, big, stacked)
    got = collect(source, "torch")
    for i, ref in enumerate(refs):
        want = torch.from_numpy(ref)
        t = got[i]
        assert t.dtype == want.dtype and tuple(t.shape) == tuple(want.shape), (i, t.dtype, want.dtype)
        assert t.numpy().tobytes() == ref.tobytes(), i
        if dtype in ("bool",) or dtype.startswith(("int", "uint")):
            assert torch.equal(t, want), i


@pytest.mark.parametrize("stacked", [False, True], ids=["files", "stacked"])
@pytest.mark.parametrize("dtype", ["bool", "float16", "uint32", "int64"])
def test_through_a_cache_tier(tmp_path, dtype, stacked):
    """With a cache in front the npy transform converts (stacked rows travel as .npy files of their own)."""
    for fortran, big in ((True, True), (True, False), (False, True)):
        sub = tmp_path / ("%d%d" % (fortran, big))
        sub.mkdir()
        source, refs = make(sub, dtype, (3, 4, 5), fortran, big and np.dtype(dtype).itemsize > 1, stacked)
        got = collect(source, "numpy", cache_mem_bytes=1 << 20, epochs=2)
        for i, ref in enumerate(refs):
            assert got[i].dtype == ref.dtype and got[i].tobytes() == ref.tobytes(), (fortran, big, i)


def test_saved_transpose(tmp_path):
    """A Fortran-order file as np.save writes a transposed array: np.save(x.T) delivers x.T."""
    d = tmp_path / "t"
    d.mkdir()
    xs = [np.arange(12, dtype=np.float32).reshape(3, 4) + 100 * i for i in range(4)]
    for i, x in enumerate(xs):
        np.save(str(d / ("%d.npy" % i)), x.T)
    with lade.Loader(str(d), batch_size=4, shuffle=False, output="torch") as L:
        (data, _), = list(L)
    assert torch.equal(data, torch.stack([torch.from_numpy(np.ascontiguousarray(x.T)) for x in xs]))


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_torch_without_the_dtype_says_so(tmp_path, dtype):
    source, _ = make(tmp_path, dtype, (5, 7), False, False, False)
    if getattr(torch, dtype, None) is not None:
        pytest.skip("torch %s has %s" % (torch.__version__, dtype))
    with lade.Loader(source, batch_size=4, output="torch") as L:
        with pytest.raises(lade.Error, match="%s.*output='numpy'" % dtype):
            next(iter(L))


def test_bool_is_numpy_bool_and_torch_bool_without_copy(tmp_path):
    source, refs = make(tmp_path, "bool", (5, 7), True, False, True)
    with lade.Loader(source, batch_size=N, shuffle=False, output="numpy") as L:
        (x, _), = list(L)
    assert x.dtype == np.bool_ and np.array_equal(x, np.stack(refs))
    with lade.Loader(source, batch_size=N, shuffle=False, output="torch", meta=True) as L:
        (t, _, b), = list(L)
        assert t.dtype == torch.bool and t.data_ptr() == b.data_ptr
    assert torch.equal(t, torch.from_numpy(np.stack(refs)))


def test_settings_and_mismatches(tmp_path):
    source, refs = make(tmp_path, "uint32", (2, 3, 4), True, True, False)
    got = collect(source, "numpy", npy_dtype="uint32", npy_shape="2,3,4")
    assert got[3].tobytes() == refs[3].tobytes()
    with pytest.raises(lade.Error, match="uint32.*int32"):  # at create or at the sample, wherever it is found
        with lade.Loader(source, batch_size=4, output="numpy", npy_dtype="int32") as L:
            list(L)
    # one file in C order among fortran-order ones, then one in the other byte order
    odd = os.path.join(source, "s004.npy")
    np.save(odd, np.ascontiguousarray(np.load(odd)))
    for cache in (0, 1 << 20):
        with pytest.raises(lade.Error, match="s004.npy.*uint32 \\(2,3,4\\), big-endian differs"):  # at create or at the sample, wherever it is found
            with lade.Loader(source, batch_size=4, output="numpy", cache_mem_bytes=cache) as L:
                list(L)
    np.save(odd, np.asfortranarray(np.load(odd).astype("<u4")))
    with pytest.raises(lade.Error, match="s004.npy.*fortran order differs.*fortran order, big-endian"):  # at create or at the sample, wherever it is found
        with lade.Loader(source, batch_size=4, output="numpy") as L:
            list(L)
    # another dtype
    np.save(odd, np.asfortranarray(np.zeros((2, 3, 4), dtype=">i4")))
    with pytest.raises(lade.Error, match="s004.npy: int32 \\(2,3,4\\), fortran order, big-endian differs"):  # at create or at the sample, wherever it is found
        with lade.Loader(source, batch_size=4, output="numpy") as L:
            list(L)
    # another shape
    np.save(odd, np.zeros((3, 2, 4), dtype=">u4"))
    with pytest.raises(lade.Error, match="s004.npy: uint32 \\(3,2,4\\), big-endian differs"):  # at create or at the sample, wherever it is found
        with lade.Loader(source, batch_size=4, output="numpy") as L:
            list(L)


@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_class_folders(tmp_path, output):
    """The labelled layout (a folder per class) converts the same way and keeps its labels."""
    rng = np.random.default_rng(3)
    refs, labels = [], []
    for ci, cls in enumerate(("cat", "dog")):
        (tmp_path / cls).mkdir()
        for i in range(6):
            x = np.asfortranarray(values(rng, "float64", (3, 4, 5)).astype(">f8"))
            f = str(tmp_path / cls / ("%d.npy" % i))
            np.save(f, x)
            refs.append(native(np.load(f)))
            labels.append(ci)
    with lade.Loader(str(tmp_path), batch_size=12, shuffle=False, output=output) as L:
        (data, lab), = list(L)
        got = data.numpy() if output == "torch" else data
        assert got.tobytes() == np.stack(refs).tobytes()
        assert list(np.asarray(lab)) == labels


# ---- files np.load reads that lade once refused: zero-size arrays, many dimensions, Python 2 headers

def batches(source, output, batch_size=4, **settings):
    """[(data, indices)] of one epoch in dataset order."""
    out = []
    with lade.Loader(source, batch_size=batch_size, threads=2, shuffle=False, output=output, meta=True,
                     **settings) as L:
        for data, _, b in L:
            out.append((data.numpy().copy() if output == "torch" else data.copy(),
                        np.frombuffer(b.indices, dtype=np.int64).copy()))
    return out


def expect_stacks(got, refs, batch_size=4):
    """Each batch equals np.stack of its samples' np.load, shape and dtype included."""
    assert len(got) == (len(refs) + batch_size - 1) // batch_size
    for k, (data, idx) in enumerate(got):
        assert list(idx) == list(range(k * batch_size, min(len(refs), (k + 1) * batch_size)))
        want = np.stack([refs[i] for i in idx])
        assert data.dtype == want.dtype and data.shape == want.shape, (data.shape, want.shape)
        assert data.tobytes() == want.tobytes()


@pytest.mark.parametrize("output", ["numpy", "torch"])
@pytest.mark.parametrize("cache", [0, 1 << 20], ids=["direct", "cached"])
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 2)], ids=lambda s: "x".join(map(str, s)))
def test_zero_size_samples_stack_as_numpy(tmp_path, shape, cache, output):
    """A zero-size sample is a sample: batches of shape (B,) + shape, as np.stack makes them."""
    d = tmp_path / "files"
    d.mkdir()
    refs = []
    for i in range(10):
        f = str(d / ("s%02d.npy" % i))
        np.save(f, np.zeros(shape, dtype=np.float32))
        refs.append(np.load(f))
    expect_stacks(batches(str(d), output, cache_mem_bytes=cache), refs)
    stacked = str(tmp_path / "stacked.npy")
    np.save(stacked, np.zeros((10,) + shape, dtype=np.float32))
    whole = np.load(stacked)
    expect_stacks(batches(stacked, output, cache_mem_bytes=cache), [whole[i] for i in range(10)])


def test_zero_rows_is_an_empty_dataset(tmp_path):
    f = str(tmp_path / "none.npy")
    np.save(f, np.zeros((0, 3), dtype=np.float32))
    assert np.load(f).shape == (0, 3)
    with pytest.raises(lade.Error, match="0 samples"):
        lade.Loader(f, batch_size=4, output="numpy")


@pytest.mark.parametrize("cache", [0, 1 << 20], ids=["direct", "cached"])
@pytest.mark.parametrize("ndim", [7, 8, 9, 12])
def test_many_dimensions(tmp_path, ndim, cache):
    """Samples of up to 7 dimensions (lade_batch_t's 8 less the batch's) load as np.load reads them; more
    fail at create with the file and the limit named, never as a malformed file."""
    rng = np.random.default_rng(ndim)
    shape = (2,) + (1,) * (ndim - 3) + (3, 2)
    d = tmp_path / "files"
    d.mkdir()
    refs = []
    for i in range(6):
        f = str(d / ("s%02d.npy" % i))
        np.save(f, rng.standard_normal(shape).astype(np.float32))
        refs.append(np.load(f))
        assert refs[-1].ndim == ndim
    stacked = str(tmp_path / "stacked.npy")
    np.save(stacked, np.stack(refs))
    for source in (str(d), stacked):
        if ndim <= 7:
            expect_stacks(batches(source, "numpy", cache_mem_bytes=cache), refs)
        else:
            named = "stacked.npy" if source == stacked else "s00.npy"
            with pytest.raises(lade.Error, match="%s: samples of %d dimensions; a lade batch holds at most 7 "
                               "sample dimensions" % (named, ndim)):
                lade.Loader(source, batch_size=4, output="numpy", cache_mem_bytes=cache)


def python2_header(path, arr):
    """np.save's file for arr with the shape written as Python 2 wrote it: (1L, 2L)."""
    np.save(path, arr)
    raw = open(path, "rb").read()
    hlen = int.from_bytes(raw[8:10], "little")
    header = raw[10:10 + hlen].decode("latin1")
    shape = "(%s)" % ", ".join("%dL" % n for n in arr.shape) if arr.ndim > 1 else "(%dL,)" % arr.shape[0]
    py2 = header.replace(repr(arr.shape), shape)
    assert py2 != header
    py2 = py2.rstrip("\n").rstrip(" ")
    py2 = py2 + " " * (hlen - 1 - len(py2)) + "\n"
    assert len(py2) == hlen
    with open(path, "wb") as f:
        f.write(raw[:10] + py2.encode("latin1") + raw[10 + hlen:])


@pytest.mark.parametrize("cache", [0, 1 << 20], ids=["direct", "cached"])
def test_python2_headers(tmp_path, cache):
    """(1L, 2L) in the shape, as Python 2 wrote it (numpy's own test data has such files): np.load reads
    them, and so does lade, with the same values."""
    rng = np.random.default_rng(2)
    d = tmp_path / "files"
    d.mkdir()
    refs = []
    for i in range(5):
        f = str(d / ("s%d.npy" % i))
        python2_header(f, rng.standard_normal((1, 2)))
        assert b"(1L, 2L)" in open(f, "rb").read(128)
        refs.append(np.load(f))
    expect_stacks(batches(str(d), "numpy", cache_mem_bytes=cache), refs)
    stacked = str(tmp_path / "stacked.npy")
    python2_header(stacked, np.stack(refs).reshape(5, 2))
    whole = np.load(stacked)
    expect_stacks(batches(stacked, "numpy", cache_mem_bytes=cache), [whole[i] for i in range(5)])
    shipped = os.path.join(os.path.dirname(np.__file__), "lib", "tests", "data", "win64python2.npy")
    if os.path.exists(shipped):  # numpy's own file, shape (2L,): a stacked dataset of two float64
        expect_stacks(batches(shipped, "numpy", cache_mem_bytes=cache), list(np.load(shipped)))


@pytest.mark.parametrize("fortran", [False, True])
def test_stacked_file_overwritten_in_place_fails(tmp_path, fortran):
    """A stacked .npy rewritten in place while open (the same header, other values): the next row
    read (pread, or the mapping of a fortran-order file) fails naming the file, never new bytes
    under the old header (docs/sources.md, tar "Changed files")."""
    import time
    x = np.arange(400 * 16, dtype=np.float32).reshape(400, 16)
    p = str(tmp_path / "x.npy")
    np.save(p, np.asfortranarray(x) if fortran else x)
    q = str(tmp_path / "y.npy")
    np.save(q, np.asfortranarray(x + 0.5) if fortran else x + 0.5)
    with lade.Loader(p, batch_size=4, epochs=1, shuffle=False, threads=1, prefetch=1, output="numpy") as L:
        it = iter(L)
        d, _ = next(it)
        assert d[0].tobytes() == x[0].tobytes()
        time.sleep(0.05)  # past the file system's timestamp granularity
        with open(p, "r+b") as f:
            f.write(open(q, "rb").read())
        k = 4
        with pytest.raises(lade.Error) as ei:
            for d, _ in it:
                for row in d:
                    assert row.tobytes() == x[k].tobytes(), "sample %d" % k
                    k += 1
        assert p in str(ei.value) and "changed" in str(ei.value)
