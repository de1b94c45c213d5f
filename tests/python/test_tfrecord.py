"""The tfrecord source (TFRecord files, a record per sample; docs/sources.md, tfrecord) against
files written here from the format itself, in pure Python (CRC-32C and the tf.train.Example
encoder below; no TensorFlow): DLIO's records (`image` random bytes, `size` int64) and records
with a `label`; one file, a folder and a brace pattern give exactly the bytes written, `.npy`
bytes through transform=npy equal np.load, the `regular` and `shards` plans deliver each record
once per epoch, and broken files (a data CRC, a length CRC, a cut record, a length past the end)
fail naming the file and the record. gzip and zlib files (gzip.compress / zlib.compress of the
same bytes, as TFRecordOptions writes them) read back exactly under every plan, and cut or damaged
streams fail naming the file and the record."""
import gzip
import io
import os
import random
import struct
import zlib

import numpy as np
import pytest

import lade


# ---------------------------------------------------------------- the format, in Python

def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_TABLE = _crc_table()


def crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    tag = varint(num << 3 | wire)
    if wire == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload


def feature(value, packed=True):
    """A Feature: bytes -> BytesList, list of ints -> Int64List, list of floats -> FloatList."""
    if isinstance(value, (bytes, bytearray)):
        return field(1, 2, field(1, 2, bytes(value)))
    if all(isinstance(v, int) for v in value):
        if packed:
            lst = field(1, 2, b"".join(varint(v) for v in value))
        else:
            lst = b"".join(field(1, 0, varint(v)) for v in value)
        return field(3, 2, lst)
    if packed:
        lst = field(1, 2, b"".join(struct.pack("<f", v) for v in value))
    else:
        lst = b"".join(field(1, 5, struct.pack("<f", v)) for v in value)
    return field(2, 2, lst)


def example(feats, packed=True, junk=False):
    """A serialized tf.train.Example of {name: value}; junk adds unknown fields at every level."""
    entries = b""
    for k, v in feats.items():
        e = field(1, 2, k.encode()) + field(2, 2, feature(v, packed))
        if junk:
            e = field(7, 0, varint(300)) + e + field(9, 5, b"abcd")
        entries += field(1, 2, e)
    if junk:
        entries = field(5, 1, b"12345678") + entries
    ex = field(1, 2, entries)
    if junk:
        ex = field(3, 2, b"unknown bytes") + ex
    return ex


def write_tfrecord(path, payloads):
    with open(path, "wb") as f:
        for p in payloads:
            f.write(record(p))
    return str(path)


def dlio_records(n, seed, label=False, min_size=1, max_size=3000):
    """DLIO's records: `image` random bytes of varying size, `size` its length (and a `label`)."""
    rng = random.Random(seed)
    images, labels, recs = [], [], []
    for i in range(n):
        img = bytes(rng.getrandbits(8) for _ in range(rng.randint(min_size, max_size)))
        feats = {"image": img, "size": [len(img)]}
        lab = rng.randint(0, 9)
        if label:
            feats["label"] = [lab]
        images.append(img)
        labels.append(lab if label else -1)
        recs.append(example(feats, packed=i % 2 == 0, junk=i % 3 == 0))
    return images, labels, recs


def load(source, epochs=1, raw_size=3000, batch_size=7, **kw):
    """{epoch: [(index, bytes, label)]} and the loader's samples."""
    got = {}
    with lade.Loader(source, transform="raw", raw_size=raw_size, batch_size=batch_size, epochs=epochs, threads=3,
                     seed=3, output="numpy", meta=True, **kw) as L:
        samples = L.samples
        for d, lab, b in L.stream():
            for row, l, i in zip(d, lab, b.indices.tolist()):
                got.setdefault(b.epoch, []).append((i, bytes(row), int(l)))
    return samples, got


def check(source, images, labels, epochs=2, **kw):
    samples, got = load(source, epochs=epochs, **kw)
    assert len(samples) == len(images)
    assert [l for _, l in samples] == labels
    assert sorted(got) == list(range(epochs))
    for e, rows in got.items():
        assert sorted(i for i, _, _ in rows) == list(range(len(images)))  # each record once per epoch
        for i, row, lab in rows:
            assert row[:len(images[i])] == images[i], (e, i)
            assert row[len(images[i]):] == b"\0" * (len(row) - len(images[i]))
            assert lab == labels[i]
    return samples


def error_of(source, **kw):
    kw.setdefault("transform", "raw")
    kw.setdefault("raw_size", 4096)
    with pytest.raises(lade.Error) as ei:
        with lade.Loader(source, batch_size=4, threads=1, output="numpy", **kw) as L:
            for _ in L:
                pass
    return str(ei.value)


def test_python_crc32c_known_vector():
    assert crc32c(b"123456789") == 0xE3069283


# ---------------------------------------------------------------- reading

def test_one_dlio_file(tmp_path):
    images, labels, recs = dlio_records(40, 1)
    f = write_tfrecord(tmp_path / "img_1_of_1.tfrecord", recs)
    samples = check(f, images, labels)
    assert samples[0][0] == f + ": record 0" and samples[39][0] == f + ": record 39"
    with lade.Loader(f, transform="raw", raw_size=3000, batch_size=8, output="numpy") as L:
        assert L.classes == [] and L.targets == [-1] * 40  # DLIO's records have no label: -1, no error


def test_labels_folder_and_brace(tmp_path):
    d = tmp_path / "train"
    d.mkdir()
    images, labels = [], []
    for k in range(3):
        im, lab, recs = dlio_records(17 + k, 10 + k, label=True)
        write_tfrecord(d / ("part-%03d.tfrecords" % k), recs)
        images += im
        labels += lab
    (d / "notes.txt").write_text("not a shard")
    check(str(d), images, labels)
    check(str(d / "part-{000..002}.tfrecords"), images, labels)
    # a list file needs source_type=tfrecord (auto takes a .txt for tar shards)
    lst = tmp_path / "files.txt"
    lst.write_text("".join("train/part-%03d.tfrecords\n" % k for k in range(3)))
    check(str(lst), images, labels, epochs=1, source_type="tfrecord")
    with lade.Loader(str(d), transform="raw", raw_size=3000, batch_size=8, output="numpy") as L:
        with pytest.raises(lade.Error, match=r"does not name its classes \(labels 0\.\.%d\)" % max(labels)):
            L.classes  # label features have no names (as tar's .cls labels)


def test_file_without_extension_and_whole_records(tmp_path):
    payloads = [os.urandom(n) for n in (0, 1, 5, 100, 999)]
    f = write_tfrecord(tmp_path / "train-00000-of-00001", payloads)
    check(f, payloads, [-1] * 5, epochs=1, source_type="tfrecord", tfrecord_feature="", raw_size=1000)


def test_int64_and_float_features(tmp_path):
    recs, want_i, want_f = [], [], []
    for i in range(12):
        ints = [i, -i, 2 ** 40 + i, -(2 ** 63)][: 1 + i % 4]
        floats = [i * 0.5, -1.25, 3e7][: 1 + i % 3]
        recs.append(example({"ids": ints, "w": floats, "image": b"x"}, packed=i % 2 == 1))
        want_i.append(np.array(ints, "<i8").tobytes())
        want_f.append(np.array(floats, "<f4").tobytes())
    f = write_tfrecord(tmp_path / "n.tfrecord", recs)
    check(f, want_i, [-1] * 12, epochs=1, tfrecord_feature="ids", raw_size=32)
    check(f, want_f, [-1] * 12, epochs=1, tfrecord_feature="w", raw_size=12)


def test_npy_in_image_feature(tmp_path):
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((3, 4, 5)).astype(np.float32) for _ in range(10)]
    recs = []
    for a in arrays:
        b = io.BytesIO()
        np.save(b, a)
        recs.append(example({"image": b.getvalue(), "size": [len(b.getvalue())]}))
    f = write_tfrecord(tmp_path / "npy.tfrecord", recs)
    with lade.Loader(f, transform="npy", batch_size=4, epochs=1, shuffle=False, output="numpy", meta=True) as L:
        got = {}
        for d, _, b in L.stream():
            for row, i in zip(d, b.indices.tolist()):
                got[i] = np.array(row)
    assert sorted(got) == list(range(10))
    for i, a in enumerate(arrays):
        assert np.array_equal(got[i], a)


@pytest.mark.parametrize("plan", ["regular", "shards"])
def test_plans_deliver_each_record_once(tmp_path, plan):
    d = tmp_path / "p"
    d.mkdir()
    images, labels = [], []
    for k in range(4):
        im, lab, recs = dlio_records(13 + 3 * k, 20 + k, label=True, max_size=600)
        write_tfrecord(d / ("s%d.tfrecord" % k), recs)
        images += im
        labels += lab
    kw = {"plan": plan}
    if plan == "shards":
        kw["shuffle_buffer"] = 10
    check(str(d), images, labels, epochs=3, raw_size=600, **kw)


def test_index_reused_and_rebuilt_for_other_settings(tmp_path):
    images, labels, recs = dlio_records(20, 5, label=True)
    f = write_tfrecord(tmp_path / "a.tfrecord", recs)
    check(f, images, labels, epochs=1)
    idx = f + ".ladeidx"
    assert os.path.exists(idx)
    st = os.stat(idx)
    check(f, images, labels, epochs=1)
    assert os.stat(idx).st_mtime_ns == st.st_mtime_ns  # read, not rebuilt
    # another feature: the stored index (sizes) is not taken for it
    sizes = [struct.pack("<q", len(x)) for x in images]
    check(f, sizes, labels, epochs=1, tfrecord_feature="size", raw_size=8)
    check(f, images, [-1] * 20, epochs=1, tfrecord_label="")
    # kept in index_dir instead, with its own name
    ix = tmp_path / "ix"
    check(f, images, labels, epochs=1, index_dir=str(ix))
    assert [n.startswith("tfrindex-") for n in os.listdir(ix)] == [True]


def test_read_checks_data_crc_with_index_kept(tmp_path):
    """A bit flipped in a record's data after indexing, the file's size and mtime put back: the
    stored index is taken (its bind samples only the framing), and the read's CRC check fails."""
    images, labels, recs = dlio_records(30, 6)
    f = write_tfrecord(tmp_path / "c.tfrecord", recs)
    check(f, images, labels, epochs=1)
    st = os.stat(f)
    sidecar = os.stat(f + ".ladeidx").st_mtime_ns
    off = sum(len(record(r)) for r in recs[:11]) + 12 + 40  # record 11's data, not its framing
    with open(f, "r+b") as h:
        h.seek(off)
        b = h.read(1)
        h.seek(off)
        h.write(bytes([b[0] ^ 0x10]))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    msg = error_of(f)
    assert os.stat(f + ".ladeidx").st_mtime_ns == sidecar  # the index was not rebuilt
    assert f in msg and "record 11 (sample 11)" in msg and "bad data CRC" in msg, msg


# ---------------------------------------------------------------- broken files

def _broken(tmp_path, how):
    _, _, recs = dlio_records(10, 7)
    raw = bytearray(b"".join(record(r) for r in recs))
    starts = np.cumsum([0] + [len(record(r)) for r in recs]).tolist()
    if how == "data_crc":      # record 4's data CRC
        raw[starts[5] - 2] ^= 0x01
    elif how == "length_crc":  # record 6's length CRC
        raw[starts[6] + 9] ^= 0x80
    elif how == "truncated":   # the last record cut short
        raw = raw[: starts[9] + 30]
    elif how == "past_end":    # record 3 says more bytes than the file has (its CRC made good)
        n = struct.pack("<Q", 1 << 40)
        raw[starts[3]:starts[3] + 12] = n + struct.pack("<I", masked(n))
    p = tmp_path / ("%s.tfrecord" % how)
    p.write_bytes(bytes(raw))
    return str(p)


@pytest.mark.parametrize("how,record,words", [
    ("data_crc", 4, "bad data CRC"),
    ("length_crc", 6, "bad length CRC"),
    ("truncated", 9, "past the end of the file"),
    ("past_end", 3, "past the end of the file"),
])
def test_broken_file_names_file_and_record(tmp_path, how, record, words):
    f = _broken(tmp_path, how)
    msg = error_of(f)
    assert msg.startswith(f + ": "), msg
    assert ("record %d " % record) in msg and words in msg, msg
    # the same with whole records (the walk reads no data then: the data CRC fails at the read)
    msg = error_of(f, tfrecord_feature="", tfrecord_label="")
    assert msg.startswith(f + ": ") and ("record %d " % record) in msg and words in msg, msg


def test_missing_feature_and_partial_labels(tmp_path):
    recs = [example({"image": b"abc", "label": [1]}), example({"img": b"x", "size": [1]})]
    f = write_tfrecord(tmp_path / "m.tfrecord", recs)
    msg = error_of(f)
    assert f in msg and "record 1" in msg and "no feature 'image'" in msg and "'img', 'size'" in msg, msg
    recs = [example({"image": b"abc", "label": [1]}), example({"image": b"x"})]
    f = write_tfrecord(tmp_path / "l.tfrecord", recs)
    msg = error_of(f)
    assert f in msg and "record 1 has no int64 feature 'label'" in msg, msg


def test_malformed_example(tmp_path):
    bad = field(1, 2, field(1, 2, field(1, 2, b"image") + b"\x12\x40\x0a"))  # a length past its message
    f = write_tfrecord(tmp_path / "x.tfrecord", [example({"image": b"ok"}), bad])
    msg = error_of(f)
    assert f in msg and "record 1" in msg and "not a tf.train.Example" in msg, msg


# ---------------------------------------------------------------- gzip and zlib files

needs_zlib = pytest.mark.skipif("zlib" not in lade.features(), reason="lade built without zlib")


@pytest.mark.skipif("zlib" in lade.features(), reason="lade built with zlib")
def test_compressed_refused_without_zlib(tmp_path):
    f = write_compressed(tmp_path / "n.tfrecord.gz", [example({"image": b"ok"})], "gzip")
    msg = error_of(f)
    assert msg.startswith(f + ": gzip-compressed TFRecord: ") and "built without zlib" in msg, msg


def write_compressed(path, payloads, how, level=6):
    """TFRecordOptions(compression_type="GZIP"/"ZLIB"): the whole file one stream of the records."""
    raw = b"".join(record(p) for p in payloads)
    path.write_bytes(gzip.compress(raw, level) if how == "gzip" else zlib.compress(raw, level))
    return str(path)


@needs_zlib
@pytest.mark.parametrize("how", ["gzip", "zlib"])
def test_compressed_files_read_exactly(tmp_path, how):
    images, labels, recs = dlio_records(60, 31, label=True)
    f = write_compressed(tmp_path / ("c.tfrecord." + ("gz" if how == "gzip" else "zlib")), recs, how)
    check(f, images, labels, epochs=2)  # the default plan: shuffled, so reads out of order inflate again
    check(f, images, labels, epochs=2, plan="shards", shuffle_buffer=10)
    check(f, images, labels, epochs=1, shuffle=False)
    with open(f + ".ladeidx", "rb") as h:  # the stored index says the file is compressed, and how
        assert h.read(8) == (b"LADETFG1" if how == "gzip" else b"LADETFZ1")
    st = os.stat(f + ".ladeidx")
    check(f, images, labels, epochs=1, plan="shards")
    assert os.stat(f + ".ladeidx").st_mtime_ns == st.st_mtime_ns  # taken, not rebuilt
    # whole records: the pass reads no data, only each record's CRC, to know that it is there
    check(f, recs, [-1] * 60, epochs=1, tfrecord_feature="", tfrecord_label="", raw_size=max(map(len, recs)))


@needs_zlib
def test_compressed_file_of_many_windows(tmp_path):
    """8 MB of records in one gzip stream: past a cursor's 2 MiB of kept output, so the shuffled
    plan's reads resume from kept points; every byte still exact."""
    rng = random.Random(8)
    payloads = [rng.randbytes(50000) for _ in range(160)]
    d = tmp_path / "big"
    d.mkdir()
    write_compressed(d / "b.tfrecord.gz", payloads[:100], "gzip", level=1)
    write_compressed(d / "c.tfrecord.gz", payloads[100:], "gzip", level=1)
    kw = dict(tfrecord_feature="", tfrecord_label="", raw_size=50000, epochs=2)
    check(str(d), payloads, [-1] * 160, **kw)
    check(str(d), payloads, [-1] * 160, plan="shards", shuffle_buffer=20, **kw)


@needs_zlib
def test_compression_setting_on_a_file_without_the_suffix(tmp_path):
    images, labels, recs = dlio_records(25, 32, label=True)
    f = write_compressed(tmp_path / "p.tfrecord", recs, "gzip")
    check(f, images, labels, epochs=1, tfrecord_compression="gzip")
    # auto goes by the name: the gzip index stored above is not taken for it, and the bytes say what to do
    msg = error_of(f)
    assert msg.startswith(f + ": ") and "gzip-compressed TFRecord" in msg and "tfrecord_compression=gzip" in msg, msg
    # a file named neither .tfrecord nor .gz (TF's train-00000-of-00001): not taken for a list file
    t = write_compressed(tmp_path / "train-00000-of-00001", recs, "gzip")
    check(t, images, labels, epochs=1, source_type="tfrecord", tfrecord_compression="gzip")
    z = write_compressed(tmp_path / "q.tfrecord", recs, "zlib")
    check(z, images, labels, epochs=1, tfrecord_compression="zlib")


@needs_zlib
@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_broken_compressed_file_names_file_and_record(tmp_path, how):
    _, _, recs = dlio_records(40, 33)
    raw = b"".join(record(r) for r in recs)
    data = bytearray(gzip.compress(raw))
    if how == "truncated":
        data = data[: len(data) * 2 // 3]
    else:
        data[len(data) // 2] ^= 0x55
    p = tmp_path / "broken.tfrecord.gz"
    p.write_bytes(bytes(data))
    for kw in ({}, {"tfrecord_feature": "", "tfrecord_label": ""}):
        msg = error_of(str(p), **kw)
        assert msg.startswith(str(p) + ": ") and "record " in msg, msg
        if how == "truncated":
            assert "cut short" in msg or "past the end of the uncompressed stream" in msg, msg


@needs_zlib
def test_compressed_file_damaged_after_indexing(tmp_path):
    """A byte flipped past the bind's first 16 KiB, size and mtime put back: the stored index is
    taken and a read fails, naming the file and the record."""
    images, labels, recs = dlio_records(60, 34)
    f = write_compressed(tmp_path / "d.tfrecord.gz", recs, "gzip")
    check(f, images, labels, epochs=1)
    st = os.stat(f)
    data = bytearray(open(f, "rb").read())
    assert len(data) > 40000
    data[len(data) * 2 // 3] ^= 0x55
    with open(f, "r+b") as h:
        h.write(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    msg = error_of(f, plan="shards")
    assert msg.startswith(f + ": ") and "record " in msg and "(sample " in msg, msg


def test_settings_refused_elsewhere(tmp_path, npy_dir):
    with pytest.raises(lade.Error) as ei:
        lade.Loader(npy_dir, tfrecord_feature="x", batch_size=4)
    assert "tfrecord_" in str(ei.value)
