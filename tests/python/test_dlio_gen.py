"""`lade dlio datagen`'s generator (tools/dlio_gen.c) against DLIO's (docs/dlio.md).

Driven through tests/tools/dlio_gen_check (the same dlio_datagen() the CLI
calls): the record shapes must be numpy's draws bit for bit (DLIO draws them
with np.random.seed(10) and np.random.normal), npz files must load with
np.load and pass zipfile's CRC check (plain and zip64), and tfrecord files
must parse with the reader below (TFRecord framing with both masked CRC-32Cs,
a tf.train.Example with `image` bytes and `size` int64) with every record's
image as long as its size says and as the file's dims give.
"""
import glob
import io
import os
import struct
import subprocess
import zipfile

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _find_check():
    cand = [os.environ.get("LADE_DLIO_GEN_CHECK", "")]
    for build in (os.environ.get("LADE_BUILD", ""), os.path.dirname(os.environ.get("LADE_CLI", "")),
                  os.path.join(ROOT, "build")):
        if build:
            cand.append(os.path.join(build, "tests", "dlio_gen_check"))
    for c in cand:
        if c and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture(scope="module")
def check():
    c = _find_check()
    if not c:
        pytest.skip("tests/tools/dlio_gen_check was not built (set LADE_DLIO_GEN_CHECK or LADE_BUILD)")
    return c


def run(check, *args, ok=True):
    r = subprocess.run([check, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def numpy_dims(record_length, stdev, files):
    """DLIO's DataGenerator.get_dimension() after np.random.seed(10)."""
    dim = int(np.sqrt(record_length))
    dim_stdev = stdev / 2.0 / np.sqrt(record_length)
    np.random.seed(10)
    if dim_stdev > 0:
        out = [max(int(d), 1) for d in np.random.normal(dim, dim_stdev, 2 * files)]
    else:
        out = [int(d) for d in np.ones(2 * files, dtype=np.int64) * int(dim)]
    np.random.seed()
    return out


def dims_of(check, record_length, stdev, files):
    return eval(run(check, "dims", record_length, stdev, files).stdout)  # a JSON list of ints


def names(folder, split, n, ext, subfolders=0):
    nd, sd = len(str(n)), len(str(subfolders))
    out = []
    for i in range(n):
        sub = "/" + str(i % subfolders).rjust(sd, "0") if subfolders > 1 else ""
        out.append(f"{folder}/{split}{sub}/img_{str(i).rjust(nd, '0')}_of_{n}.{ext}")
    return out


# ---------------------------------------------------------------- numpy's RNG

@pytest.mark.parametrize("count", [10, 2001])
def test_normal_is_numpys_bit_for_bit(check, count):
    np.random.seed(10)
    want = np.random.normal(12107, 2822.2050, count).tolist()
    got = [float(v) for v in run(check, "normal", 10, 12107, 2822.2050, count).stdout.split()]
    assert [repr(v) for v in got] == [repr(v) for v in want]


def test_dims_unet3d(check):
    want = numpy_dims(146600628, 68341808, 168)
    got = dims_of(check, 146600628, 68341808, 168)
    assert len(got) == 336
    assert got == want


def test_dims_without_stdev(check):
    assert dims_of(check, 150528, 0, 5) == numpy_dims(150528, 0, 5) == [387] * 10


def test_dims_clamped_at_one(check):
    # a stdev far above the mean: many draws are negative, int() then max(., 1)
    got = dims_of(check, 100, 4000, 50)
    assert got == numpy_dims(100, 4000, 50)
    assert 1 in got


# ---------------------------------------------------------------- npz

def npy_header(shape, dtype):
    b = io.BytesIO()
    np.save(b, np.zeros(shape, dtype))
    raw = b.getvalue()
    return raw[:len(raw) - int(np.prod(shape)) * np.dtype(dtype).itemsize]


def check_npz(path, d1, d2, n):
    with np.load(path, allow_pickle=False) as z:
        assert sorted(z.files) == ["x", "y"]
        x, y = z["x"], z["y"]
    assert x.shape == (d1, d2, n) and x.dtype == np.uint8
    assert y.shape == (n,) and y.dtype == np.int64 and not y.any()
    assert int(x.max()) <= 254
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        infos = zf.infolist()
        assert [i.filename for i in infos] == ["x.npy", "y.npy"]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
    raw = open(path, "rb").read()
    for i in infos:  # zipfile reads the directory's CRC and sizes; the local headers must agree
        sig, crc, csize, usize, nlen, xlen = struct.unpack_from("<I10xIIIHH", raw, i.header_offset)
        assert sig == 0x04034B50 and crc == i.CRC
        if xlen:  # zip64: both sizes in the extra field
            assert (csize, usize) == (0xFFFFFFFF, 0xFFFFFFFF)
            extra = struct.unpack_from("<HHQQ", raw, i.header_offset + 30 + nlen)
            assert extra == (1, 16, i.file_size, i.file_size)
        else:
            assert (csize, usize) == (i.file_size, i.file_size)
    with zipfile.ZipFile(path) as zf:
        # the headers numpy 1.24 writes, byte for byte
        assert zf.read("x.npy")[:len(npy_header((d1, d2, n), np.uint8))] == npy_header((d1, d2, n), np.uint8)
        assert zf.read("y.npy") == npy_header((n,), np.int64) + bytes(8 * n)
    return x


@pytest.mark.parametrize("zip64", [0, 1])
def test_npz(check, tmp_path, zip64):
    data = str(tmp_path / "npz")
    run(check, "gen", data, "npz", 6, 3, 4096, 1024, f"zip64={zip64}")
    dims = numpy_dims(4096, 1024, 6)
    files = names(data, "train", 6, "npz")
    assert sorted(glob.glob(data + "/train/*")) == files
    assert os.path.isdir(data + "/valid")
    xs = [check_npz(f, dims[2 * i], dims[2 * i + 1], 3) for i, f in enumerate(files)]
    assert len({x.tobytes() for x in xs}) == 6  # every file its own bytes
    raw = open(files[0], "rb").read()
    # the zip64 end records and the local header's zip64 field are there only when asked for (or needed)
    assert (b"PK\x06\x06" in raw) == bool(zip64) and (b"PK\x06\x07" in raw) == bool(zip64)
    assert struct.unpack_from("<HH", raw, 26) == (5, 20 if zip64 else 0)


def test_npz_eval_files_use_the_global_dims(check, tmp_path):
    data = str(tmp_path / "npz")
    run(check, "gen", data, "npz", 3, 2, 4096, 1024, "eval=2")
    dims = numpy_dims(4096, 1024, 5)
    for i, f in enumerate(names(data, "train", 3, "npz") + names(data, "valid", 2, "npz")):
        check_npz(f, dims[2 * i], dims[2 * i + 1], 2)


def test_ranks_split_the_files_and_give_the_same_bytes(check, tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    run(check, "gen", one, "npz", 5, 2, 4096, 1024, "eval=2", "subfolders=2")
    for rank in (1, 0):  # rank 1 first: it makes the folders it writes into itself
        run(check, "gen", two, "npz", 5, 2, 4096, 1024, "eval=2", "subfolders=2", f"rank={rank}", "world=2")
    a = sorted(os.path.relpath(p, one) for p in glob.glob(one + "/**/*.npz", recursive=True))
    b = sorted(os.path.relpath(p, two) for p in glob.glob(two + "/**/*.npz", recursive=True))
    assert a == b and len(a) == 7
    for rel in a:
        assert open(os.path.join(one, rel), "rb").read() == open(os.path.join(two, rel), "rb").read()
    assert not glob.glob(two + "/**/*.tmp", recursive=True)


def test_one_rank_writes_its_share(check, tmp_path):
    data = str(tmp_path / "d")
    r = run(check, "gen", data, "npz", 7, 1, 4096, 0, "rank=1", "world=3")
    assert sorted(os.path.basename(p) for p in glob.glob(data + "/train/*")) == ["img_1_of_7.npz", "img_4_of_7.npz"]
    assert "rank 1 wrote 2 files" in r.stderr


def test_compression_is_a_note(check, tmp_path):
    data = str(tmp_path / "z")
    r = run(check, "gen", data, "npz", 2, 2, 4096, 0, "compression=zip")
    assert "compression zip is ignored" in r.stderr
    for i, f in enumerate(names(data, "train", 2, "npz")):
        check_npz(f, 64, 64, 2)


@pytest.mark.parametrize("folder", ["s3://bucket/data", "http://host/data", "https://host/data"])
def test_remote_folders_are_refused(check, folder):
    r = run(check, "gen", folder, "npz", 2, 1, 4096, 0, ok=False)
    assert r.returncode != 0
    assert "local folders" in r.stderr and folder in r.stderr


# ---------------------------------------------------------------- tfrecord

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    t = CRC32C_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, pos):
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def fields(buf):
    """(field number, wire type, value) of one message: ints for varints, bytes for length-delimited."""
    pos, out = 0, []
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 2:
            n, pos = varint(buf, pos)
            v = buf[pos:pos + n]
            assert len(v) == n, "a length past the end"
            pos += n
        else:
            raise AssertionError(f"wire type {wt}")
        out.append((num, wt, v))
    assert pos == len(buf)
    return out


def parse_example(data):
    """tf.train.Example -> {key: ('bytes', [..]) | ('int64', [..])}."""
    [(num, wt, features)] = fields(data)
    assert (num, wt) == (1, 2)
    out = {}
    for num, wt, entry in fields(features):
        assert (num, wt) == (1, 2)
        kv = {n: v for n, _, v in fields(entry)}
        key = kv[1].decode()
        [(kind, _, lst)] = fields(kv[2])
        if kind == 1:
            out[key] = ("bytes", [v for n, _, v in fields(lst) if n == 1])
        elif kind == 3:
            vals = []
            for n, w, v in fields(lst):
                if w == 2:  # packed
                    p = 0
                    while p < len(v):
                        x, p = varint(v, p)
                        vals.append(x)
                else:
                    vals.append(v)
            out[key] = ("int64", vals)
        else:
            raise AssertionError(f"feature kind {kind}")
    return out


def read_tfrecord(path):
    raw = open(path, "rb").read()
    pos, records = 0, []
    while pos < len(raw):
        head = raw[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack_from("<I", raw, pos + 8)
        assert hcrc == masked(crc32c(head)), f"{path}: length CRC at {pos}"
        data = raw[pos + 12:pos + 12 + n]
        assert len(data) == n, f"{path}: truncated record at {pos}"
        (dcrc,) = struct.unpack_from("<I", raw, pos + 12 + n)
        assert dcrc == masked(crc32c(data)), f"{path}: data CRC at {pos}"
        records.append(parse_example(data))
        pos += 12 + n + 4
    return records


def test_tfrecord(check, tmp_path):
    data = str(tmp_path / "tfr")
    run(check, "gen", data, "tfrecord", 6, 3, 4096, 1024, "eval=2", "subfolders=3")
    dims = numpy_dims(4096, 1024, 8)
    files = names(data, "train", 6, "tfrecord", 3) + names(data, "valid", 2, "tfrecord", 3)
    assert sorted(glob.glob(data + "/**/*.tfrecord", recursive=True)) == sorted(files)
    assert os.path.isdir(data + "/valid/2")  # every subfolder, used or not, as DLIO makes them
    images = set()
    for i, f in enumerate(files):
        recs = read_tfrecord(f)
        assert len(recs) == 3
        want = dims[2 * i] * dims[2 * i + 1]
        for r in recs:
            assert sorted(r) == ["image", "size"]
            kind, [image] = r["image"]
            assert kind == "bytes"
            assert r["size"] == ("int64", [want])
            assert len(image) == want
            assert max(image) <= 254
            images.add(image)
    assert len(images) == 8 * 3  # a fresh payload per record
    # each file has its sidecar index (lade's remote reader fetches it instead of reading the file whole;
    # DLIO lists only *.tfrecord), the same bytes `lade index` writes for that file
    cli = os.environ.get("LADE_CLI", "")
    for f in files:
        side = open(f + ".ladeidx", "rb").read()
        assert side[:8] == b"LADETFR1"
        if os.access(cli, os.X_OK):
            os.unlink(f + ".ladeidx")
            subprocess.run([cli, "index", f], check=True, capture_output=True)
            assert open(f + ".ladeidx", "rb").read() == side, f


def test_crc32c_reference():
    assert crc32c(b"123456789") == 0xE3069283
