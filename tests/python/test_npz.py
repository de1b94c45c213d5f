""".npz files as numpy writes them (np.savez, np.savez_compressed) load as np.load(f)[member] reads them
(docs/sources.md, npz).

Every dtype lade supports, stored and deflated members, 0-d and zero-size arrays, big-endian and
fortran-order arrays (and files of different layouts in one dataset), another member than `x`
(npz_member), zip64 central directory and end records (zipfile's limits lowered while writing),
class folders giving labels as ImageFolder does, WebDataset tar shards of .npz members, and
transform="npz" as well as transform auto: what lade delivers must equal np.load(f)[member] bit for
bit, with its dtype and shape. A corrupted file fails with lade.Error naming it.
"""
import io
import os
import tarfile
import zipfile

import numpy as np
import pytest

import lade

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
SAVERS = {"savez": np.savez, "savez_compressed": np.savez_compressed}
N = 6


def values(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    x = (rng.standard_normal(shape) * 1000).astype(dt)
    flat = x.reshape(-1)
    flat[:4] = [np.nan, np.inf, -np.inf, -0.0][:flat.size]  # bit patterns a lossy path would change
    return x


def native(a):
    """np.load's array in C order and the host's byte order (what lade delivers)."""
    return np.array(a, dtype=a.dtype.newbyteorder("="), order="C")  # ascontiguousarray would make a 0-d array 1-d


def write(folder, arrays_of, saver, classes=None):
    """Writes N files with saver(**arrays_of(i)); returns their paths in the dir source's order."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(N):
        sub = os.path.join(folder, classes[i]) if classes else folder
        os.makedirs(sub, exist_ok=True)
        p = os.path.join(sub, "s%03d.npz" % i)
        saver(p, **arrays_of(i))
        paths.append(p)
    return paths


def refs(paths, member="x"):
    out = []
    for p in paths:
        with np.load(p) as f:
            out.append(native(f[member]))
    return out


def collect(source, n=N, **settings):
    """{index: (array, label)} of one epoch, numpy output."""
    out = {}
    with lade.Loader(source, batch_size=4, threads=2, output="numpy", meta=True, shuffle=False,
                     **settings) as L:
        for data, labels, b in L:
            idx = np.frombuffer(b.indices, dtype=np.int64)
            for k, i in enumerate(idx):
                out.setdefault(int(i), (data[k].copy(), int(labels[k])))
    assert sorted(out) == list(range(n))
    return out


def same(got, ref, what):
    assert got.dtype == ref.dtype and got.shape == ref.shape, (what, got.dtype, got.shape, ref.dtype, ref.shape)
    assert got.tobytes() == ref.tobytes(), what


@pytest.mark.parametrize("saver", sorted(SAVERS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_equals_np_load(tmp_path, dtype, saver):
    rng = np.random.default_rng(DTYPES.index(dtype))
    paths = write(str(tmp_path / "d"), lambda i: {"x": values(rng, dtype, (3, 5)), "y": np.arange(i + 1)},
                  SAVERS[saver])
    want = refs(paths)
    for transform in ("npz", "auto"):
        got = collect(str(tmp_path / "d"), transform=transform)
        for i, ref in enumerate(want):
            same(got[i][0], ref, (transform, i))


SHAPES = [(), (0,), (3, 0), (7,), (2, 3, 4)]


@pytest.mark.parametrize("saver", sorted(SAVERS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "0d")
def test_shapes_0d_and_zero_size(tmp_path, shape, saver):
    rng = np.random.default_rng(1)
    paths = write(str(tmp_path / "d"), lambda i: {"x": values(rng, "float32", shape)}, SAVERS[saver])
    want = refs(paths)
    got = collect(str(tmp_path / "d"), transform="npz")
    for i, ref in enumerate(want):
        same(got[i][0], ref, i)


@pytest.mark.parametrize("saver", sorted(SAVERS))
@pytest.mark.parametrize("layout", ["big", "fortran", "big-fortran", "mixed"])
def test_byte_order_and_fortran_order(tmp_path, layout, saver):
    rng = np.random.default_rng(2)

    def arrays(i):
        lay = ["little", "big", "fortran", "big-fortran"][i % 4] if layout == "mixed" else layout
        x = values(rng, "float32", (4, 6))
        if "big" in lay:
            x = x.astype(">f4")
        if "fortran" in lay:
            x = np.asfortranarray(x)
        return {"x": x}

    paths = write(str(tmp_path / "d"), arrays, SAVERS[saver])
    with np.load(paths[1]) as f, np.load(paths[2]) as g:  # the files hold what the case means
        big = f["x"].dtype.byteorder == ">"
        fortran = (f if layout != "mixed" else g)["x"].flags.f_contiguous
        assert big == ("big" in layout or layout == "mixed") and fortran == ("fortran" in layout or layout == "mixed")
    want = refs(paths)
    got = collect(str(tmp_path / "d"), transform="npz")
    for i, ref in enumerate(want):
        same(got[i][0], ref, i)


def test_big_endian_integers(tmp_path):
    rng = np.random.default_rng(3)
    paths = write(str(tmp_path / "d"), lambda i: {"x": values(rng, "int64", (5,)).astype(">i8")}, np.savez)
    with np.load(paths[0]) as f:
        assert f["x"].dtype == np.dtype(">i8")
    got = collect(str(tmp_path / "d"))
    for i, ref in enumerate(refs(paths)):
        same(got[i][0], ref, i)


@pytest.mark.parametrize("saver", sorted(SAVERS))
def test_other_members(tmp_path, saver):
    rng = np.random.default_rng(4)
    paths = write(str(tmp_path / "d"), lambda i: {"x": values(rng, "float32", (2, 2)),
                                                  "y": values(rng, "int16", (3,)),
                                                  "label": np.int64(i)}, SAVERS[saver])
    for member in ("y", "y.npy", "label"):
        got = collect(str(tmp_path / "d"), transform="npz", npz_member=member)
        for i, ref in enumerate(refs(paths, member.replace(".npy", ""))):
            same(got[i][0], ref, (member, i))
    # np.savez(f, a): the member is arr_0
    d2 = str(tmp_path / "positional")
    os.makedirs(d2)
    for i in range(N):
        SAVERS[saver](os.path.join(d2, "p%d.npz" % i), np.full((3,), i, dtype=np.uint8))
    got = collect(d2, npz_member="arr_0")
    for i in range(N):
        same(got[i][0], np.full((3,), i, dtype=np.uint8), i)


def test_missing_member_lists_the_members(tmp_path):
    write(str(tmp_path / "d"), lambda i: {"a": np.zeros(2), "b": np.ones(3)}, np.savez)
    with pytest.raises(lade.Error) as e:
        lade.Loader(str(tmp_path / "d"), transform="npz")
    msg = str(e.value)
    assert "s000.npz" in msg and "no member 'x'" in msg and "'a.npy', 'b.npy'" in msg, msg


def test_npz_member_refused_elsewhere(tmp_path):
    write(str(tmp_path / "d"), lambda i: {"x": np.zeros(2)}, np.savez)
    with pytest.raises(lade.Error, match="npz_member"):
        lade.Loader(str(tmp_path / "d"), transform="raw", npz_member="y")


def zip64_everywhere(monkeypatch):
    """zipfile writes zip64 directory fields and end records for whatever exceeds its limits: lowered."""
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 16)
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 1)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"])
def test_zip64_records(tmp_path, monkeypatch, compression):
    rng = np.random.default_rng(5)
    d = tmp_path / "d"
    d.mkdir()
    paths = []
    with monkeypatch.context() as m:
        zip64_everywhere(m)
        for i in range(N):
            p = str(d / ("z%d.npz" % i))
            with zipfile.ZipFile(p, "w", compression=compression) as zf:
                for name, arr in (("y", np.arange(i + 3)), ("x", values(rng, "float64", (3, 4)))):
                    with zf.open(name + ".npy", "w", force_zip64=True) as f:
                        np.lib.format.write_array(f, arr)
            paths.append(p)
    raw = open(paths[0], "rb").read()
    assert b"PK\x06\x06" in raw and b"PK\x06\x07" in raw  # the zip64 end record and locator are there
    with zipfile.ZipFile(paths[0]) as zf:
        assert all(zi.header_offset >= 0 for zi in zf.infolist())
    got = collect(str(d), transform="npz")
    for i, ref in enumerate(refs(paths)):
        same(got[i][0], ref, i)
    got = collect(str(d))  # auto
    for i, ref in enumerate(refs(paths)):
        same(got[i][0], ref, i)


@pytest.mark.parametrize("saver", sorted(SAVERS))
def test_class_folders_give_labels(tmp_path, saver):
    rng = np.random.default_rng(6)
    classes = ["cat", "cat", "dog", "emu", "emu", "emu"]
    paths = write(str(tmp_path / "d"), lambda i: {"x": values(rng, "uint8", (2, 3))}, SAVERS[saver], classes)
    open(str(tmp_path / "d" / "cat" / ".hidden.npz"), "wb").write(b"not read")
    with lade.Loader(str(tmp_path / "d")) as L:  # nothing but the source
        assert L.classes == ["cat", "dog", "emu"]
        assert [os.path.basename(p) for p, _ in L.samples] == [os.path.basename(p) for p in paths]
    got = collect(str(tmp_path / "d"))
    for i, ref in enumerate(refs(paths)):
        same(got[i][0], ref, i)
        assert got[i][1] == ["cat", "dog", "emu"].index(classes[i]), i


def test_corrupted_member_names_the_file(tmp_path):
    rng = np.random.default_rng(7)
    paths = write(str(tmp_path / "d"), lambda i: {"x": values(rng, "float64", (64, 64))}, np.savez_compressed)
    bad = paths[3]
    with zipfile.ZipFile(bad) as zf:
        zi = zf.getinfo("x.npy")
    raw = bytearray(open(bad, "rb").read())
    nl, xl = int.from_bytes(raw[zi.header_offset + 26:zi.header_offset + 28], "little"), \
        int.from_bytes(raw[zi.header_offset + 28:zi.header_offset + 30], "little")
    at = zi.header_offset + 30 + nl + xl + zi.compress_size // 2
    raw[at] ^= 0x10
    open(bad, "wb").write(bytes(raw))
    with pytest.raises(Exception):  # numpy sees it too (zlib.error or BadZipFile)
        with np.load(bad) as f:
            f["x"]
    with pytest.raises(lade.Error) as e:
        collect(str(tmp_path / "d"), transform="npz")
    assert "s003.npz" in str(e.value) and "'x.npy'" in str(e.value), str(e.value)


def test_stored_member_crc(tmp_path):
    """A flipped byte in a stored member's array: np.load says "Bad CRC-32", so does lade."""
    paths = write(str(tmp_path / "d"), lambda i: {"x": np.arange(100, dtype=np.int32) + i}, np.savez)
    bad = paths[2]
    raw = bytearray(open(bad, "rb").read())
    with zipfile.ZipFile(bad) as zf:
        zi = zf.getinfo("x.npy")
    nl = int.from_bytes(raw[zi.header_offset + 26:zi.header_offset + 28], "little")
    xl = int.from_bytes(raw[zi.header_offset + 28:zi.header_offset + 30], "little")
    raw[zi.header_offset + 30 + nl + xl + zi.file_size - 1] ^= 1
    open(bad, "wb").write(bytes(raw))
    with pytest.raises(zipfile.BadZipFile):
        with np.load(bad) as f:
            f["x"]
    with pytest.raises(lade.Error) as e:
        collect(str(tmp_path / "d"), transform="npz")
    assert "s002.npz" in str(e.value) and "CRC-32" in str(e.value), str(e.value)


def test_tar_shards_of_npz(tmp_path):
    """WebDataset shards whose samples are KEY.npz + KEY.cls load with transform=npz."""
    rng = np.random.default_rng(8)
    arrays = [values(rng, "float32", (3, 3)) for _ in range(N)]
    shard = str(tmp_path / "train-000000.tar")
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            (np.savez_compressed if i % 2 else np.savez)(buf, x=a)
            for name, data in (("k%03d.npz" % i, buf.getvalue()), ("k%03d.cls" % i, b"%d" % (i % 3)),
                               ("k%03d.npy" % i, b"decoy")):
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    got = collect(shard, transform="npz")
    for i, a in enumerate(arrays):
        same(got[i][0], native(a), i)
        assert got[i][1] == i % 3


def test_raw_size_gives_the_bytes_whatever_the_shape(tmp_path):
    """raw_size > 0 (what `lade dlio` sets: DLIO's arrays differ in shape from file to file): each array's bytes,
    C order and native byte order, in a uint8 slot of raw_size bytes, zero padded; a longer one fails naming it,
    or (raw_overflow=cut) keeps its first raw_size bytes."""
    rng = np.random.default_rng(9)
    arrays = [values(rng, "float32", (i + 1, 3)) for i in range(N)]  # 12 .. 72 bytes
    arrays[2] = np.asfortranarray(arrays[2].astype(">f4"))
    d = str(tmp_path / "d")
    paths = write(d, lambda i: {"x": arrays[i]}, lambda p, **a: (np.savez_compressed if int(p[-7:-4]) % 2
                                                                  else np.savez)(p, **a))
    want = [native(a).tobytes() for a in refs(paths)]
    got = collect(d, transform="npz", raw_size=80)
    for i, w in enumerate(want):
        same(got[i][0], np.frombuffer(w + bytes(80 - len(w)), dtype=np.uint8), i)
    with pytest.raises(lade.Error) as e:
        collect(d, transform="npz", raw_size=40)
    msg = str(e.value)  # s003 is the first that is too long; s004 and s005 are too
    assert any("s00%d.npz" % i in msg for i in (3, 4, 5)) and "larger than the raw slot of 40 bytes" in msg, msg
    if "raw_overflow" in lade.config_keys():
        got = collect(d, transform="npz", raw_size=40, raw_overflow="cut")
        for i, w in enumerate(want):
            w = w[:40]
            same(got[i][0], np.frombuffer(w + bytes(40 - len(w)), dtype=np.uint8), i)
