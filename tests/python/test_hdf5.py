"""The hdf5 source reads files h5py writes: every delivered sample equals
h5py's f[data][i] bit for bit (dtype included) for contiguous, chunked and
gzip-compressed datasets, with and without labels, shuffled or not, at several batch
sizes, 1 or 4 threads, 2 ranks covering the dataset once; coalesced reads (the
default hdf5_gap) and one read per sample (hdf5_gap=0) give the same batches while
the reads issued drop; bad files and settings fail naming the file and the dataset;
`lade pack --to hdf5` round-trips an npy folder and resumes (docs/sources.md, hdf5).

Skipped, not passed, when h5py is missing or lade was built without libhdf5."""
import json
import os
import subprocess
import tempfile
import time

import numpy as np
import pytest

import lade

h5py = pytest.importorskip("h5py")


def _have_hdf5():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "probe.h5")
        with h5py.File(p, "w") as f:
            f["data"] = np.zeros((2, 2), np.float32)
        try:
            lade.Loader(p, batch_size=1, threads=1, output="numpy").close()
        except lade.Error as e:
            if "LADE_WITH_HDF5" in str(e):
                return False
            raise
    return True


if not _have_hdf5():
    pytest.skip("lade was built without libhdf5 (LADE_WITH_HDF5)", allow_module_level=True)

DTYPES = ["uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64", "bool"]
# chunked/gzip/gzip-shuffle: whole samples per chunk (gzip ones take the chunk path: raw chunks
# inflated outside libhdf5's lock); partial: chunks that cut samples (H5Dread)
LAYOUTS = ["contiguous", "chunked", "gzip", "gzip-shuffle", "partial"]
N = 37


def values(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    x = (rng.standard_normal(shape) * 1000).astype(dt)
    flat = x.reshape(-1)
    flat[:4] = [np.nan, np.inf, -np.inf, -0.0]  # bit patterns a converting path would change
    return x


def write(path, dtype="float32", shape=(3, 5), layout="contiguous", labels=True, n=N, seed=0, big=False):
    rng = np.random.default_rng(seed)
    x = values(rng, dtype, (n,) + shape)
    if big:
        x = x.astype(x.dtype.newbyteorder(">"))
    kw = {}
    if layout in ("chunked", "gzip", "gzip-shuffle"):
        kw["chunks"] = (4,) + shape
    if layout == "partial":
        kw["chunks"] = (4,) + (1,) * (len(shape) - 1) + (2,)
        kw["compression"] = "gzip"
    if layout in ("gzip", "gzip-shuffle"):
        kw["compression"] = "gzip"
    if layout == "gzip-shuffle":
        kw["shuffle"] = True
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=x, **kw)
        if labels:
            f["labels"] = rng.integers(0, 10, size=n)
    return str(path)


def reference(path, data="data"):
    with h5py.File(path, "r") as f:
        d = f[data]
        return [np.ascontiguousarray(d[i]) for i in range(d.shape[0])]


def run(path, batch_size=7, threads=2, **kw):
    """[(indices, data bytes, labels)] per batch, and the loader's stats."""
    out = []
    with lade.Loader(path, batch_size=batch_size, threads=threads, output="numpy", meta=True, epochs=1, **kw) as L:
        for data, labels, b in L:
            idx = np.frombuffer(b.indices, dtype=np.int64).copy()
            out.append((idx, data.copy(), labels.copy()))
        stats = L.stats()
    return out, stats


def check_values(path, batches, data="data"):
    ref = reference(path, data)
    seen = set()
    for idx, x, _ in batches:
        for k, i in enumerate(idx):
            assert x[k].dtype == ref[i].dtype.newbyteorder("="), (x.dtype, ref[i].dtype)
            assert x[k].shape == ref[i].shape
            assert x[k].tobytes() == ref[i].astype(ref[i].dtype.newbyteorder("=")).tobytes(), "sample %d" % i
            seen.add(int(i))
    return seen


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_values_equal_h5py(tmp_path, dtype, layout):
    p = write(tmp_path / "d.h5", dtype, layout=layout)
    batches, _ = run(p)
    assert check_values(p, batches) == set(range(N))
    with h5py.File(p, "r") as f:
        lab = f["labels"][()]
    for idx, _, labels in batches:
        assert list(labels) == [int(lab[i]) for i in idx]


def test_userblock_and_unwritten(tmp_path):
    """A file with a user block (the data's offset is shifted) and a dataset never written (fill values)."""
    p = str(tmp_path / "ub.h5")
    x = np.arange(N * 6, dtype=np.float32).reshape(N, 6)
    with h5py.File(p, "w", userblock_size=512) as f:
        f["data"] = x
        f.create_dataset("empty", shape=(N, 3), dtype="int32", fillvalue=7)
    for direct in ("auto", "off"):
        batches, _ = run(p, hdf5_direct=direct)
        assert check_values(p, batches) == set(range(N))
        batches, _ = run(p, hdf5_direct=direct, hdf5_data="empty")
        assert all((x == 7).all() for _, x, _ in batches)


def test_big_endian_and_3d(tmp_path):
    p = write(tmp_path / "be.h5", "int32", shape=(2, 3, 4), big=True)
    batches, _ = run(p, batch_size=5)
    assert check_values(p, batches) == set(range(N))
    assert batches[0][1].shape == (5, 2, 3, 4)


def test_no_labels_and_named_labels(tmp_path):
    p = write(tmp_path / "nl.h5", labels=False)
    batches, _ = run(p)
    assert all((labels == -1).all() for _, _, labels in batches)
    with h5py.File(p, "a") as f:
        f.create_group("meta")
        f["meta/y"] = np.arange(N, dtype=np.uint16)[::-1]
        f["x/samples"] = np.arange(N * 2, dtype=np.int16).reshape(N, 2)
    batches, _ = run(p, hdf5_labels="meta/y", hdf5_data="x/samples")
    assert check_values(p, batches, "x/samples") == set(range(N))
    for idx, _, labels in batches:
        assert list(labels) == [N - 1 - int(i) for i in idx]


def digest(batches):
    return [(list(i), x.tobytes(), list(lab)) for i, x, lab in batches]


@pytest.mark.parametrize("layout", ["contiguous", "gzip"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_same_for_threads_and_gap(tmp_path, layout, shuffle):
    p = write(tmp_path / "d.h5", "float32", shape=(6,), layout=layout, n=300)
    for bs in (1, 5, 64):
        runs = {}
        for threads in (1, 4):
            for gap in (8, 0, 1, 1000):
                for direct in ("auto", "off"):
                    batches, st = run(p, batch_size=bs, threads=threads, shuffle=shuffle, hdf5_gap=gap, seed=3,
                                      hdf5_direct=direct)
                    assert check_values(p, batches) == set(range(300))
                    runs[(threads, gap, direct)] = (digest(batches), st["get_requests"])
        first = runs[(1, 8, "auto")][0]
        assert all(d == first for d, _ in runs.values())
        # hdf5_gap=0: exactly one read per sample, plus the label dataset's
        paths = ("auto", "off") if layout == "contiguous" else ("off",)
        assert all(runs[(t, 0, d)][1] == 300 + 1 for t in (1, 4) for d in paths)
        if layout == "gzip":  # the chunk path: each of the 75 chunks read once (the cache holds them all)
            assert all(runs[(t, g, "auto")][1] == 75 + 1 for t in (1, 4) for g in (8, 0, 1, 1000))
        d = paths[0]
        if bs >= 64:
            assert runs[(1, 8, d)][1] < runs[(1, 0, d)][1] / (10 if not shuffle else 2)
        if bs >= 5 and not shuffle:  # the default (hdf5_gap=1) reads an unshuffled batch at once
            _, st = run(p, batch_size=bs, shuffle=False, hdf5_direct=d)
            assert st["get_requests"] == -(-300 // bs) + 1


@pytest.mark.parametrize("layout", ["gzip", "gzip-shuffle"])
def test_chunk_path(tmp_path, layout):
    """The chunk path (raw chunks inflated by lade) against H5Dread (hdf5_direct=off) and
    libhdf5's own cache (hdf5_chunk_cache=0), several cache sizes and threads: same batches;
    a chunk is read once while the cache holds it."""
    p = write(tmp_path / "gz.h5", "int16", shape=(7,), layout=layout, n=203)  # 51 chunks, the last short
    ref, st0 = run(p, batch_size=16, hdf5_direct="off")
    assert check_values(p, ref) == set(range(203))
    for kw in ({"hdf5_chunk_cache": 0}, {"hdf5_chunk_cache": 1 << 30}, {"hdf5_chunk_cache": 1},
               {"hdf5_chunk_cache": 1 << 30, "threads": 4}, {"hdf5_chunk_cache": 5 * 4 * 14, "threads": 3}):
        b, st = run(p, batch_size=16, **kw)
        assert digest(b) == digest(ref), kw
        if kw["hdf5_chunk_cache"] == 1 << 30:
            assert st["get_requests"] == 51 + 1  # every chunk once, plus the labels
    with h5py.File(p, "a") as f:  # a dataset never written: no chunk is stored, fill values
        f.create_dataset("unwritten", shape=(203, 3), dtype="float32", chunks=(4, 3), compression="gzip",
                         fillvalue=2.5)
    b, _ = run(p, hdf5_data="unwritten")
    assert all((x == 2.5).all() for _, x, _ in b)


def test_coalescing_counts(tmp_path):
    """Unshuffled batches of 32 are one read each; hdf5_gap=1 merges only neighbours."""
    p = write(tmp_path / "d.h5", "uint8", shape=(10,), n=320, labels=False)
    _, st = run(p, batch_size=32, shuffle=False)
    assert st["get_requests"] == 10
    _, st = run(p, batch_size=32, shuffle=False, hdf5_gap=0)
    assert st["get_requests"] == 320
    cli = os.environ.get("LADE_CLI")
    if cli:
        r = subprocess.run([cli, "bench", p, "--batch-size", "32", "--set", "shuffle=false"], capture_output=True,
                           text=True, check=True)
        assert "reads        10 issued, 0.031 per sample" in r.stdout


def test_seeks_leave_stale_runs(tmp_path):
    """Seeks abandon planned batches whose runs nobody reads: the bounded stage drops them
    oldest first, and every batch after a seek still equals the same batch read in order."""
    p = write(tmp_path / "d.h5", "int32", shape=(5,), n=2000, labels=False)
    ref = {}
    with lade.Loader(p, batch_size=64, threads=3, output="numpy", meta=True, epochs=3, hdf5_gap=1000,
                     prefetch=4) as L:
        for data, _, b in L.stream():
            ref[(b.epoch, b.step)] = data.copy()
    rng = np.random.default_rng(0)
    with lade.Loader(p, batch_size=64, threads=3, output="numpy", meta=True, epochs=3, hdf5_gap=1000,
                     prefetch=4) as L:
        for _ in range(60):
            e, st = int(rng.integers(0, 3)), int(rng.integers(0, 32))
            L.seek(e, st)
            data, _, b = next(iter(L))
            assert (b.epoch, b.step) == (e, st)
            assert data.tobytes() == ref[(e, st)].tobytes()
        stats = L.stats()
    assert stats["get_requests"] < 60 * 64  # runs were read as runs, not sample by sample


def test_stage_bound(tmp_path):
    """Wide gaps with 64 KiB samples plan more staged bytes than the stage holds (64 MiB):
    the oldest runs are dropped before they are read, their samples read on their own,
    and the values stay h5py's."""
    p = write(tmp_path / "d.h5", "float32", shape=(16384,), n=1200, labels=False)
    for threads in (1, 3):
        batches, st = run(p, batch_size=64, threads=threads, hdf5_gap=1000, prefetch=3)
        assert check_values(p, batches) == set(range(1200))
        assert st["get_requests"] < 1200


def test_world_size_2_covers_once(tmp_path):
    p = write(tmp_path / "d.h5", "int64", shape=(4,), n=N)
    seen = []
    for rank in (0, 1):
        with lade.Loader(p, batch_size=4, threads=2, output="numpy", meta=True, epochs=1, rank=rank,
                         world_size=2, seed=5) as L:
            for data, _, b in L:
                idx = np.frombuffer(b.indices, dtype=np.int64)
                ref = reference(p)
                for k in range(b.valid):
                    assert data[k].tobytes() == ref[idx[k]].tobytes()
                seen += [int(i) for i in idx[:b.valid]]
    assert sorted(seen) == list(range(N))


def test_cache_tier_path(tmp_path):
    """With a memory cache the npy transform's path (read(), a .npy row) gives the same values."""
    p = write(tmp_path / "d.h5", "float64", n=50)
    batches, _ = run(p, cache_mem_bytes=1 << 20, batch_size=8)
    assert check_values(p, batches) == set(range(50))
    plain, _ = run(p, batch_size=8)
    assert digest(plain) == digest(batches)


def err(path, **kw):
    with pytest.raises(lade.Error) as e:
        with lade.Loader(str(path), batch_size=4, threads=1, output="numpy", epochs=1, **kw) as L:
            for _ in L:
                pass
    return str(e.value)


def test_bad_inputs(tmp_path):
    p = write(tmp_path / "d.h5")
    m = err(p, hdf5_data="nope")
    assert str(p) in m and "'nope'" in m and "hdf5_data" in m and "'data'" in m
    m = err(p, hdf5_labels="nolabels")
    assert str(p) in m and "'nolabels'" in m and "hdf5_labels" in m
    with h5py.File(p, "a") as f:
        f["lab2d"] = np.zeros((N, 2), np.int32)
        f["labshort"] = np.zeros(N - 1, np.int32)
        f["labf"] = np.zeros(N, np.float32)
        f["labneg"] = -np.ones(N, np.int32)
        f["strings"] = np.array([b"ab"] * N)
        f["compound"] = np.zeros(N, dtype=[("a", "i4"), ("b", "f4")])
        f["scalar"] = 3.0
        f.create_group("grp")
    m = err(p, hdf5_labels="lab2d")
    assert str(p) in m and "'lab2d'" in m and "2 dimensions" in m
    m = err(p, hdf5_labels="labshort")
    assert "'labshort' has 36 entries" in m and "37 samples" in m
    m = err(p, hdf5_labels="labf")
    assert "'labf'" in m and "float" in m and "integers" in m
    m = err(p, hdf5_labels="labneg")
    assert "'labneg'" in m and "entry 0 is -1" in m
    m = err(p, hdf5_data="strings")
    assert str(p) in m and "'strings'" in m and "string type" in m
    m = err(p, hdf5_data="compound")
    assert "'compound'" in m and "compound type" in m
    m = err(p, hdf5_data="scalar")
    assert "'scalar' is a scalar" in m
    m = err(p, hdf5_data="grp")
    assert "'grp'" in m and "not a dataset" in m
    # truncated and corrupt files
    raw = open(p, "rb").read()
    t = tmp_path / "trunc.h5"
    t.write_bytes(raw[: len(raw) // 2])
    m = err(t)
    assert str(t) in m and "truncated or corrupt" in m
    c = tmp_path / "junk.h5"
    c.write_bytes(os.urandom(4096))
    m = err(c)
    assert str(c) in m and "not a readable HDF5 file" in m
    m = err(tmp_path / "missing.h5", source_type="hdf5")
    assert "missing.h5" in m
    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    m = err(tmp_path / "x.npy", hdf5_gap=4)
    assert "'hdf5_*' apply to HDF5 sources only" in m and "npy source" in m


def test_truncated_payload_fails_at_the_sample(tmp_path):
    """A file cut inside the contiguous data: open succeeds or fails, but never delivers wrong bytes."""
    p = write(tmp_path / "d.h5", "float64", shape=(64,), n=200, labels=False)
    raw = open(p, "rb").read()
    t = tmp_path / "cut.h5"
    t.write_bytes(raw[:-4096])
    m = err(t)
    assert str(t) in m


# ------------------------------------------------------------------ pack


def cli():
    c = os.environ.get("LADE_CLI")
    if not c:
        pytest.skip("LADE_CLI is not set (run through ctest)")
    return c


def bench_sum(c, src, *args):
    r = subprocess.run([c, "bench", src, "--json", "--batch-size", "8", *args], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout)["checksum"]


def npy_folder(tmp_path, n=40, dtype="int16", shape=(3, 4)):
    d = tmp_path / "npy"
    rng = np.random.default_rng(1)
    for i in range(n):
        cls = d / ("c%d" % (i % 3))
        cls.mkdir(parents=True, exist_ok=True)
        np.save(cls / ("s%03d.npy" % i), values(rng, dtype, shape))
    return str(d)


def test_pack_round_trip(tmp_path):
    c = cli()
    src = npy_folder(tmp_path)
    out = str(tmp_path / "out.h5")
    r = subprocess.run([c, "pack", src, "--to", "hdf5", out], capture_output=True, text=True, check=True)
    assert "packed 40 samples" in r.stdout
    assert not os.path.exists(out + ".part")
    for args in ([], ["--set", "shuffle=false"], ["--threads", "3", "--set", "seed=9"]):
        assert bench_sum(c, src, *args) == bench_sum(c, out, *args)
    # labels and values as h5py sees them
    ls = subprocess.run([c, "ls", src], capture_output=True, text=True, check=True).stdout.splitlines()
    with h5py.File(out, "r") as f:
        assert f["data"].dtype == np.int16 and f["data"].shape == (40, 3, 4)
        for line in ls:
            i, label, _, path = line.split("\t")
            assert f["labels"][int(i)] == int(label)
            assert (f["data"][int(i)] == np.load(path)).all()


@pytest.mark.parametrize("dtype", ["bool", "float16", "uint64", "int8", "float64"])
def test_pack_dtypes_and_stacked(tmp_path, dtype):
    """Every dtype is stored as h5py writes it (bool as h5py's enum, float16 as IEEE half);
    a stacked .npy (no classes) gives no labels dataset."""
    c = cli()
    src = npy_folder(tmp_path, n=20, dtype=dtype, shape=(5,))
    out = str(tmp_path / "o.h5")
    subprocess.run([c, "pack", src, "--to", "hdf5", out], capture_output=True, text=True, check=True)
    assert bench_sum(c, src) == bench_sum(c, out)
    ls = subprocess.run([c, "ls", src], capture_output=True, text=True, check=True).stdout.splitlines()
    with h5py.File(out, "r") as f:
        assert f["data"].dtype == np.dtype(dtype)
        for line in ls:
            i, _, _, path = line.split("\t")
            assert f["data"][int(i)].tobytes() == np.load(path).tobytes()
    stacked = str(tmp_path / "stacked.npy")
    arr = values(np.random.default_rng(2), dtype, (30, 2, 3))
    np.save(stacked, arr)
    out2 = str(tmp_path / "s.h5")
    subprocess.run([c, "pack", stacked, "--to", "hdf5", out2], capture_output=True, text=True, check=True)
    with h5py.File(out2, "r") as f:
        assert "labels" not in f and f["data"][()].tobytes() == arr.tobytes()


def test_pack_resume(tmp_path):
    c = cli()
    src = npy_folder(tmp_path, n=300, dtype="float32", shape=(16,))
    out = str(tmp_path / "out.h5")
    env = dict(os.environ, LADE_PACK_STOP_AFTER="100")  # a crash after 100 samples were committed
    r = subprocess.run([c, "pack", src, "--to", "hdf5", out], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and not os.path.exists(out) and os.path.exists(out + ".part")
    with h5py.File(out + ".part", "r") as f:
        done = int(f.attrs["lade_pack_done"])
    assert 100 <= done < 300
    r = subprocess.run([c, "pack", src, "--to", "hdf5", out], capture_output=True, text=True, check=True)
    assert "resumed at sample %d" % done in r.stdout
    assert bench_sum(c, src) == bench_sum(c, out)
    # a pack of other settings does not trust a .part it did not write
    subprocess.run([c, "pack", src, "--to", "hdf5", out], capture_output=True, text=True, env=env)
    os.rename(out, str(tmp_path / "done.h5"))
    r = subprocess.run([c, "pack", npy_folder(tmp_path / "other", n=300, dtype="float32", shape=(16,)),
                        "--to", "hdf5", out], capture_output=True, text=True, check=True)
    assert "resumed" not in r.stdout


def test_pack_killed(tmp_path):
    """A pack killed with SIGKILL at an arbitrary moment resumes (or restarts) and gives the
    same batches."""
    import signal
    import time
    c = cli()
    src = npy_folder(tmp_path, n=4000, dtype="float32", shape=(4096,))
    out = str(tmp_path / "out.h5")
    p = subprocess.Popen([c, "pack", src, "--to", "hdf5", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while not os.path.exists(out + ".part") and p.poll() is None:
        time.sleep(0.005)
    time.sleep(0.01)  # somewhere in the writing
    if p.poll() is not None:
        pytest.skip("the pack finished before it could be killed")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not os.path.exists(out)
    r = subprocess.run([c, "pack", src, "--to", "hdf5", out], capture_output=True, text=True, check=True)
    assert "packed 4000 samples" in r.stdout
    assert bench_sum(c, src) == bench_sum(c, out)


def test_pack_images_decoded(tmp_path):
    """--transform imagenet-eval --set image_dtype=uint8 stores the decoded HxWxC images: the
    file's batches equal the folder's through the same transform."""
    c = cli()
    jp = str(tmp_path / "jp")
    if subprocess.run([c, "gen", "jpeg", jp, "--count", "12"], capture_output=True).returncode:
        pytest.skip("this build has no JPEG support")
    out = str(tmp_path / "jp.h5")
    subprocess.run([c, "pack", jp, "--to", "hdf5", out, "--transform", "imagenet-eval", "--set", "image_dtype=uint8"],
                   capture_output=True, text=True, check=True)
    with h5py.File(out, "r") as f:
        assert f["data"].shape == (12, 224, 224, 3) and f["data"].dtype == np.uint8
    assert bench_sum(c, out, "--set", "seed=4") == bench_sum(c, jp, "--transform", "imagenet-eval", "--set",
                                                              "image_dtype=uint8", "--set", "seed=4")


def test_pack_images_refused(tmp_path):
    c = cli()
    d = tmp_path / "img" / "a"
    d.mkdir(parents=True)
    (d / "x.jpg").write_bytes(b"\xff\xd8junk")
    r = subprocess.run([c, "pack", str(tmp_path / "img"), "--to", "hdf5", str(tmp_path / "o.h5")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--transform imagenet-eval" in r.stderr


# ------------------------------------------------------------- integrity

def gzip_file(path, layout="gzip", n=16, shape=(3, 5)):
    """A float32 dataset of n samples in gzip chunks: whole samples per chunk ("gzip", the chunk
    path), or chunks cutting samples ("partial", H5Dread)."""
    return write(path, "float32", shape=shape, layout=layout, labels=False, n=n)


def patch_chunk(path, offset, stream):
    """Replaces the stored chunk at `offset` by `stream` (a zlib stream), as a file could hold it."""
    with h5py.File(path, "r+") as f:
        f["data"].id.write_direct_chunk(offset, stream, filter_mask=0)


@pytest.mark.parametrize("direct", ["auto", "off"])
@pytest.mark.parametrize("layout", ["gzip", "partial"])
def test_gzip_chunk_inflating_short_fails(tmp_path, direct, layout):
    """A gzip chunk whose stream inflates to fewer bytes than the chunk holds: libhdf5 hands out the
    rest of its buffer (undefined values); lade fails naming the file, the dataset and the chunk."""
    import zlib
    p = gzip_file(tmp_path / "d.h5", layout)
    offset, full = ((4, 0, 0), 4 * 3 * 5 * 4) if layout == "gzip" else ((4, 0, 2), 4 * 1 * 2 * 4)
    patch_chunk(p, offset, zlib.compress(b"\x01" * (full - 8)))
    m = err(p, hdf5_direct=direct, shuffle=False)
    assert str(p) in m and "'data'" in m and "chunk" in m and str(list(offset)) in m, m
    assert "inflates to %d bytes" % (full - 8) in m, m


def test_gzip_chunk_inflating_long_is_bounded(tmp_path):
    """A 1 MB chunk that inflates to 1 GiB (a zip bomb): inflating stops at the chunk's declared size
    and the read fails, within seconds and without the memory of the inflated bytes (VmHWM: the
    peak of the child's own memory; ru_maxrss would count its parent's from before exec)."""
    import subprocess
    import sys
    import zlib
    p = gzip_file(tmp_path / "d.h5", shape=(64, 64))  # chunks of 64 KiB: a 1 MB stored chunk is encodable
    c = zlib.compressobj(9)
    zero = bytes(1 << 20)
    stream = b"".join(c.compress(zero) for _ in range(1024)) + c.flush()
    assert len(stream) < (2 << 20)
    patch_chunk(p, (8, 0, 0), stream)
    for direct in ("auto", "off"):
        code = ("import lade, sys\n"
                "try:\n"
                "    with lade.Loader(sys.argv[1], batch_size=4, threads=1, output='numpy', epochs=1, shuffle=False,"
                " hdf5_direct=sys.argv[2]) as L:\n"
                "        for _ in L: pass\n"
                "    print('NO ERROR')\n"
                "except lade.Error as e:\n"
                "    print('ERROR', e)\n"
                "print('MAXRSS_KB', [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])\n")
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-c", code, p, direct], capture_output=True, text=True,
                             timeout=120, env=os.environ).stdout
        took = time.monotonic() - t0
        assert "ERROR " + p in out and "'data'" in out and "[8, 0, 0]" in out and "more than" in out, out
        rss = int(out.split("MAXRSS_KB")[1])
        assert rss < 400 * 1024 and took < 10, (direct, rss, took)  # a loader's own peak: about 240 MB


def test_huge_sample_refused_at_open(tmp_path):
    """A dataset whose samples are larger than max_sample_bytes is refused at open, naming the file,
    the dataset and its shape, before anything is allocated."""
    p = str(tmp_path / "huge.h5")
    with h5py.File(p, "w") as f:
        f.create_dataset("data", shape=(4, 2**30, 2**20), dtype="u1", chunks=(1, 1, 1024))
    with pytest.raises(lade.Error) as e:
        lade.Loader(p, batch_size=64, threads=1, output="numpy")
    m = str(e.value)
    assert p in m and "'data'" in m and "(4, 1073741824, 1048576)" in m and "max_sample_bytes" in m, m


@pytest.mark.parametrize("layout", ["contiguous", "gzip", "partial"])
def test_overwritten_in_place_fails(tmp_path, layout):
    """The file rewritten in place while it is open (the same size and layout, other values): the
    next read fails naming the file, instead of delivering the new bytes (or a mix)."""
    def make(path, add):
        x = np.repeat(np.arange(400, dtype=np.float32)[:, None] + add, 16, axis=1)
        kw = {"contiguous": {}, "gzip": {"chunks": (4, 16), "compression": "gzip"},
              "partial": {"chunks": (4, 2), "compression": "gzip"}}[layout]
        with h5py.File(path, "w") as f:
            ds = f.create_dataset("data", data=x if layout == "contiguous" else None, shape=x.shape, dtype=x.dtype, **kw)
            if layout != "contiguous":  # zlib level 0: every chunk's stored size is the same in both files
                import zlib
                r, c = kw["chunks"]
                for i in range(0, 400, r):
                    for j in range(0, 16, c):
                        ds.id.write_direct_chunk((i, j), zlib.compress(x[i:i + r, j:j + c].tobytes(), 0))
        return str(path)
    p, q = make(tmp_path / "d.h5", 0), make(tmp_path / "e.h5", 0.5)
    ref, other = reference(p), open(q, "rb").read()
    assert len(other) == os.path.getsize(p)
    with lade.Loader(p, batch_size=4, epochs=1, shuffle=False, threads=1, prefetch=1, output="numpy") as L:
        it = iter(L)
        d, _ = next(it)
        assert d[0].tobytes() == ref[0].tobytes()
        time.sleep(0.05)  # past the file system's timestamp granularity
        with open(p, "r+b") as f:  # in place: the same inode
            f.write(other)
        k = 4
        with pytest.raises(lade.Error) as ei:
            for d, _ in it:
                for row in d:
                    assert row.tobytes() == ref[k].tobytes(), "sample %d" % k
                    k += 1
        assert p in str(ei.value) and "changed" in str(ei.value)


@pytest.mark.parametrize("direct", ["auto", "off"])
def test_checked_pipelines_read_exactly(tmp_path, direct):
    """The chunk checks on good files: gzip after shuffle, with fletcher32, one sample cut in
    several chunks, unwritten chunks (fill values) and a short last chunk all read as h5py does."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 1000, size=(23, 6, 10)).astype(np.int32)
    p = str(tmp_path / "d.h5")
    with h5py.File(p, "w") as f:
        f.create_dataset("a", data=x, chunks=(4, 6, 10), compression="gzip", shuffle=True, fletcher32=True)
        f.create_dataset("b", data=x, chunks=(3, 4, 3), compression="gzip", compression_opts=1)
        c = f.create_dataset("c", shape=x.shape, dtype=x.dtype, chunks=(4, 6, 10), compression="gzip",
                             fillvalue=7)
        c[4:9] = x[4:9]
    for name in ("a", "b", "c"):
        batches, _ = run(p, hdf5_data=name, hdf5_direct=direct)
        assert check_values(p, batches, name) == set(range(23))
