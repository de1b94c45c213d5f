"""The tar source (WebDataset shards) against Python's tarfile: shards written by tarfile in
ustar, GNU and pax formats; the samples, labels and bytes lade delivers equal what tarfile
reads; images equal the same images loaded from a folder; shard lists; the index's reuse and
rebuild; broken tars fail naming the shard and the member (docs/sources.md, tar)."""
import io
import os
import random
import time
import tarfile

import numpy as np
import pytest

import lade
from conftest import write_tar as write_shard


# ---------------------------------------------------------------- helpers

def add(t, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    t.addfile(ti, io.BytesIO(data))


def key_ext(name):
    """WebDataset's base_plus_ext: the key is the name up to the first '.' of its last component."""
    d, _, base = name.rpartition("/")
    if "." not in base or base.startswith("."):
        return None, None
    stem, ext = base.split(".", 1)
    return (d + "/" + stem if d else stem), ext


IMAGE_EXTS = ["jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"]


def rank(ext, want):
    if want != "npy" and ext.lower() in IMAGE_EXTS:
        return IMAGE_EXTS.index(ext.lower())
    if ext.lower() == "npy":
        return None if want == "image" else 100
    if want == "raw" and ext != "cls":
        return 200
    return None


def reference(shards, want):
    """(shown path, label, member bytes) per sample, read with tarfile, grouped as WebDataset does."""
    out = []
    for shard in shards:
        groups = []
        with tarfile.open(shard) as t:
            for m in t.getmembers():
                if not m.isfile():
                    continue
                k, e = key_ext(m.name)
                if k is None:
                    continue
                if not groups or groups[-1][0] != k:
                    groups.append((k, []))
                groups[-1][1].append((e, t.extractfile(m).read()))
        for k, mem in groups:
            cand = [(rank(e, want), i) for i, (e, _) in enumerate(mem) if rank(e, want) is not None]
            if not cand:
                continue
            data = mem[min(cand)[1]][1]
            cls = [int(d) for e, d in mem if e == "cls"]
            out.append((shard + "/" + k, cls[0] if cls else -1, data))
    return out


def samples_of(n, seed, key=lambda i: "s%05d" % i, extra=()):
    rng = random.Random(seed)
    members = []
    for i in range(n):
        k = key(i)
        members.append((k + ".bin", bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 700)))))
        members.append((k + ".cls", str(rng.randint(0, 9)).encode()))
        for e in extra:
            members.append((k + "." + e, b'{"i": %d}' % i))
    return members


def load_raw(source, epochs=1, batch_size=7, **kw):
    """{index: (bytes slot, label)} per epoch, and the order of indices per epoch."""
    kw.setdefault("raw_size", 1024)
    per_epoch = []
    with lade.Loader(source, transform="raw", batch_size=batch_size, epochs=epochs, threads=3, seed=3,
                     output="numpy", meta=True, **kw) as L:
        samples = L.samples
        got = {}
        for d, lab, b in L.stream():
            for row, l, i in zip(d, lab, b.indices.tolist()):
                got.setdefault(b.epoch, []).append((i, bytes(row), int(l)))
        per_epoch = [got[e] for e in sorted(got)]
    return samples, per_epoch


def check_raw(source, ref, epochs=2, **kw):
    samples, per_epoch = load_raw(source, epochs=epochs, **kw)
    assert samples == [(p, l) for p, l, _ in ref]
    assert len(per_epoch) == epochs
    for rows in per_epoch:
        assert sorted(i for i, _, _ in rows) == list(range(len(ref)))  # every sample once per epoch
        for i, row, lab in rows:
            data = ref[i][2]
            assert row[:len(data)] == data and row[len(data):] == b"\0" * (len(row) - len(data))
            assert lab == ref[i][1]
    return samples


def error_of(source, **kw):
    kw.setdefault("transform", "raw")
    with pytest.raises(lade.Error) as ei:
        with lade.Loader(source, batch_size=4, threads=1, output="numpy", raw_size=1024, **kw) as L:
            for _ in L:
                pass
    return str(ei.value)


# ---------------------------------------------------------------- formats

@pytest.mark.parametrize("fmt", ["ustar", "gnu", "pax"])
def test_formats_same_as_tarfile(tmp_path, fmt):
    f = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}[fmt]
    if fmt == "ustar":   # 100 < path <= 255: split into the prefix and name fields
        key = lambda i: "d" * 90 + "/sub%03d/" % (i % 4) + "k" * 60 + "%05d" % i
    elif fmt == "gnu":   # GNU 'L' long names, over 100 bytes in the last component too
        key = lambda i: "class%d/" % (i % 3) + "n" * 150 + "_%05d" % i
    else:                # pax path records: long, unicode, and one of 300+ bytes
        key = lambda i: "κλάση%d/" % (i % 3) + ("ünïcödé_" * 40 if i % 5 == 0 else "x_") + "%05d" % i
    shard = write_shard(tmp_path / "s.tar", samples_of(40, 1, key=key, extra=("json",)), f)
    ref = reference([shard], "raw")
    assert len(ref) == 40
    check_raw(shard, ref, shuffle=True)
    with lade.Loader(shard, transform="raw", batch_size=1, threads=1, output="numpy", raw_size=8) as L:
        with pytest.raises(lade.Error, match=r"does not name its classes \(labels 0\.\.9\)"):
            L.classes  # .cls labels have no names (as s3 labels)


def test_name_without_nul_and_folder_labels(tmp_path):
    # a 100-byte name field has no NUL: valid ustar, tarfile takes all 100 bytes
    names = ["c%d/" % (i % 2) + ("n%03d" % i) + "z" * 89 + ".bin" for i in range(6)]
    assert all(len(n) == 100 for n in names)
    shard = write_shard(tmp_path / "s.tar", [(n, b"%d" % i * 10) for i, n in enumerate(names)],
                        tarfile.USTAR_FORMAT)
    raw = open(shard, "rb").read()
    assert raw[99] != 0 and raw[100] != 0  # the name field really has no NUL
    with lade.Loader(shard, transform="raw", batch_size=1, threads=1, output="numpy", raw_size=64) as L:
        assert L.classes == ["c0", "c1"]
        # no .cls: the label is the key's folder, classes sorted
        assert L.samples == [(shard + "/" + n[:-4], i % 2) for i, n in enumerate(names)]


def test_imagenet_eval_equals_folder(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(7)
    folder = tmp_path / "folder"
    members, cls_members = [], []
    for c in ["cat", "dog", "emu"]:
        os.makedirs(folder / c)
        for j in range(5):
            arr = rng.integers(0, 255, size=(40 + 9 * j, 57 + 5 * j, 3), dtype=np.uint8)
            buf = io.BytesIO()
            ext = "png" if j == 4 else "jpg"
            Image.fromarray(arr).save(buf, format="PNG" if ext == "png" else "JPEG", quality=90)
            data = buf.getvalue()
            (folder / c / ("im%d.%s" % (j, ext))).write_bytes(data)
            members += [("%s/im%d.%s" % (c, j, ext), data), ("%s/im%d.json" % (c, j), b"{}")]
            cls_members += [("%s_im%d.%s" % (c, j, ext), data), ("%s_im%d.cls" % (c, j), b"%d" % "cat dog emu".split().index(c))]
    by_folder = write_shard(tmp_path / "f.tar", members)
    by_cls = write_shard(tmp_path / "c.tar", cls_members, tarfile.PAX_FORMAT)

    def batches(src):
        with lade.Loader(str(src), transform="imagenet-eval", batch_size=15, epochs=1, shuffle=False,
                         threads=2, output="numpy", crop_size=32, resize_size=36) as L:
            (d, l), = [(d.copy(), l.copy()) for d, l in L]
            return d, l
    d0, l0 = batches(folder)
    for src in (by_folder, by_cls):
        d, l = batches(src)
        assert d.shape == (15, 3, 32, 32)
        assert np.array_equal(d, d0) and l.tolist() == l0.tolist() == [0] * 5 + [1] * 5 + [2] * 5


def test_npy_members(tmp_path):
    rng = np.random.default_rng(3)
    arrs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(9)]
    members = []
    for i, a in enumerate(arrs):
        b = io.BytesIO()
        np.save(b, a)
        members += [("s%d.jpg" % i, b"not a jpeg"), ("s%d.npy" % i, b.getvalue()), ("s%d.cls" % i, b"%d" % (i % 4))]
    shard = write_shard(tmp_path / "n.tar", members)
    with lade.Loader(shard, transform="npy", batch_size=9, epochs=1, shuffle=False, threads=2, output="numpy") as L:
        (d, l), = [(d.copy(), l.copy()) for d, l in L]
    assert np.array_equal(d, np.stack(arrs)) and l.tolist() == [i % 4 for i in range(9)]


def test_npy_members_other_headers(tmp_path):
    """.npy members under transform=npy: a member whose header has another length (padded, as a writer may)
    is read as np.load reads it; a member of another shape, or in fortran order or big-endian where sample 0
    is not, fails naming shard and member."""
    rng = np.random.default_rng(5)
    arrs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(8)]
    members = []
    for i, a in enumerate(arrs):
        b = io.BytesIO()
        np.save(b, a)
        raw = b.getvalue()
        if i == 6:  # a header 128 bytes longer: numpy reads it the same
            hl = int.from_bytes(raw[8:10], "little")
            raw = raw[:8] + (hl + 128).to_bytes(2, "little") + raw[10:10 + hl - 1] + b" " * 128 + b"\n" + raw[10 + hl:]
            assert np.array_equal(np.load(io.BytesIO(raw)), arrs[i])
        members += [("s%d.npy" % i, raw), ("s%d.cls" % i, b"%d" % i)]
    shard = write_shard(tmp_path / "h.tar", members)
    with lade.Loader(shard, transform="npy", batch_size=8, epochs=1, shuffle=False, threads=2, output="numpy") as L:
        (d, l), = [(d.copy(), l.copy()) for d, l in L]
    assert d.dtype == np.float32 and np.array_equal(d, np.stack(arrs)) and l.tolist() == list(range(8))
    for bad, said in ((np.zeros((6, 4), np.float32), "(6,4)"), (np.asfortranarray(arrs[4]), "fortran order"),
                      (arrs[4].astype(">f4"), "float32 (4,6)")):
        b = io.BytesIO()
        np.save(b, bad)
        members[8] = ("s4.npy", b.getvalue())
        shard = write_shard(tmp_path / "bad.tar", members)
        msg = error_of(shard, transform="npy")
        assert "bad.tar" in msg and "s4" in msg and said in msg and "differs from the dataset's" in msg, msg


# ---------------------------------------------------------------- shard lists

def test_folder_brace_and_list(tmp_path):
    d = tmp_path / "shards"
    os.makedirs(d)
    shards = [write_shard(d / ("train-%06d.tar" % i), samples_of(11 + i, 10 + i)) for i in range(3)]
    ref = reference(shards, "raw")
    # a brace pattern as WebDataset writes it
    check_raw(str(d / "train-{000000..000002}.tar"), ref, epochs=1)
    # a folder of shards (auto), sorted by name; the index sidecars beside them are not shards
    check_raw(str(d), ref, epochs=1)
    # a list file, relative to its own folder, with a comment and a blank line
    lst = d / "shards.txt"
    lst.write_text("# the shards\ntrain-000000.tar\n\n%s\n  train-000002.tar  \n" % shards[1])
    check_raw(str(lst), ref, epochs=1)
    # the comma form, and a missing shard named
    check_raw(str(d / "train-00000{0,1,2}.tar"), ref, epochs=1)
    msg = error_of(str(d / "train-{000000..000003}.tar"))
    assert "train-000003.tar" in msg


# ---------------------------------------------------------------- the index

def test_index_reused_and_rebuilt(tmp_path):
    shard = write_shard(tmp_path / "a.tar", samples_of(20, 4))
    side = shard + ".ladeidx"
    ref = reference([shard], "raw")
    check_raw(shard, ref, epochs=1)
    st = os.stat(side)
    check_raw(shard, ref, epochs=1)
    st2 = os.stat(side)
    assert (st2.st_ino, st2.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)  # reused, not rewritten

    # the index is what is read: the same size and mtime with another member name is not noticed
    raw = bytearray(open(shard, "rb").read())
    at = raw.find(b"s00003.bin")
    raw[at:at + 10] = b"s00003.dat"
    s = os.stat(shard)
    open(shard, "r+b").write(fix_checksum(raw, at))
    os.utime(shard, ns=(s.st_atime_ns, s.st_mtime_ns))
    with lade.Loader(shard, transform="raw", batch_size=1, threads=1, output="numpy", raw_size=1024) as L:
        assert L.samples == [(p, l) for p, l, _ in ref]

    # a changed shard (other size or mtime) is indexed again
    write_shard(shard, samples_of(13, 5))
    ref2 = reference([shard], "raw")
    check_raw(shard, ref2, epochs=1)
    assert os.stat(side).st_ino != st.st_ino

    # a damaged index (checksum) is rebuilt
    b = bytearray(open(side, "rb").read())
    b[60] ^= 0xff
    open(side, "wb").write(b)
    check_raw(shard, ref2, epochs=1)
    assert open(side, "rb").read() != bytes(b)


def test_index_in_cache_dir(tmp_path):
    shard = write_shard(tmp_path / "a.tar", samples_of(8, 6))
    cache = tmp_path / "cache"
    check_raw(shard, reference([shard], "raw"), epochs=1, cache_dir=str(cache))
    assert not os.path.exists(shard + ".ladeidx")
    assert len([f for f in os.listdir(cache) if f.startswith("tarindex-")]) == 1


# ---------------------------------------------------------------- broken tars

def fix_checksum(raw, at):
    """Recomputes the checksum of the header block holding byte `at`."""
    h = at - at % 512
    block = raw[h:h + 512]
    block[148:156] = b" " * 8
    raw[h + 148:h + 156] = b"%06o\0 " % sum(block)
    return bytes(raw)


def header_of(raw, name):
    at = raw.find(name)
    return at - at % 512


@pytest.fixture
def good(tmp_path):
    members = samples_of(6, 8)
    return tmp_path, write_shard(tmp_path / "good.tar", members, tarfile.USTAR_FORMAT)


def test_broken_truncated_data(good):
    tmp, shard = good
    raw = open(shard, "rb").read()
    h = header_of(raw, b"s00004.bin")
    bad = tmp / "cut.tar"
    bad.write_bytes(raw[:h + 512 + 3])
    msg = error_of(str(bad))
    assert str(bad) in msg and "s00004.bin" in msg and "past the end" in msg


def test_broken_truncated_header(good):
    tmp, shard = good
    raw = open(shard, "rb").read()
    h = header_of(raw, b"s00002.cls")
    bad = tmp / "cuthdr.tar"
    bad.write_bytes(raw[:h + 200])
    msg = error_of(str(bad))
    assert str(bad) in msg and "truncated" in msg and "byte %d" % h in msg


def test_broken_checksum(good):
    tmp, shard = good
    raw = bytearray(open(shard, "rb").read())
    h = header_of(raw, b"s00003.bin")
    raw[h + 130] ^= 1  # a size digit, checksum left as it was
    bad = tmp / "sum.tar"
    bad.write_bytes(raw)
    msg = error_of(str(bad))
    assert str(bad) in msg and "s00003.bin" in msg and "checksum" in msg
    with tarfile.open(str(bad)) as t:  # tarfile silently ends the archive there instead
        assert "s00003.bin" not in t.getnames() and "s00002.cls" in t.getnames()


def test_broken_size_past_end(good):
    tmp, shard = good
    raw = bytearray(open(shard, "rb").read())
    h = header_of(raw, b"s00001.bin")
    raw[h + 124:h + 136] = b"%011o\0" % (1 << 30)
    bad = tmp / "size.tar"
    bad.write_bytes(fix_checksum(raw, h))
    msg = error_of(str(bad))
    assert str(bad) in msg and "s00001.bin" in msg and "1073741824 bytes run past the end" in msg


def pax_shard(path, records):
    """A ustar shard whose first member is a pax header ('x') holding `records` as they are."""
    with tarfile.open(str(path), "w", format=tarfile.USTAR_FORMAT) as t:
        ti = tarfile.TarInfo("PaxHeaders/a.bin")
        ti.type = tarfile.XHDTYPE
        ti.size = len(records)
        t.addfile(ti, io.BytesIO(records))
        add(t, "a.bin", b"123")
    return str(path)


def test_pax_records_apply(tmp_path):
    shard = pax_shard(tmp_path / "ok.tar", b"22 path=dir/\xc3\xbcber.bin\n")
    with tarfile.open(shard) as t:
        assert t.getnames() == ["dir/\u00fcber.bin"]
    with lade.Loader(shard, transform="raw", batch_size=1, threads=1, output="numpy", raw_size=8) as L:
        assert L.samples == [(shard + "/dir/\u00fcber", 0)] and L.classes == ["dir"]


def test_broken_huge_pax_length(tmp_path):
    bad = pax_shard(tmp_path / "pax.tar", b"99999999999999 path=a.bin\n")
    msg = error_of(bad)
    assert bad in msg and "pax header at byte 0" in msg and "says 99999999999999 bytes" in msg
    bad = pax_shard(tmp_path / "paxbig.tar", b"%d comment=%s\n" % (2000017, b"c" * 2000000))
    msg = error_of(bad)
    assert bad in msg and "pax header at byte 0 is 2000017 bytes, more than the 1048576" in msg


def test_broken_cls(tmp_path):
    shard = write_shard(tmp_path / "c.tar", [("a.bin", b"1"), ("a.cls", b"seven")])
    msg = error_of(shard)
    assert shard in msg and "'a.cls'" in msg and "seven" in msg


def test_missing_cls_and_duplicate_member(tmp_path):
    shard = write_shard(tmp_path / "m.tar", [("a.bin", b"1"), ("a.cls", b"1"), ("b.bin", b"2")])
    msg = error_of(shard)
    assert shard in msg and "'b'" in msg and ".cls" in msg
    shard = write_shard(tmp_path / "d.tar", [("a.bin", b"1"), ("a.bin", b"2")])
    msg = error_of(shard)
    assert shard in msg and "'a.bin' appears twice" in msg


def test_max_sample_bytes_names_member(tmp_path):
    shard = write_shard(tmp_path / "big.tar", [("a.bin", b"1" * 10), ("b.bin", b"2" * 5000)])
    msg = error_of(shard, max_sample_bytes=4096, shuffle=False)
    assert shard in msg and "'b.bin'" in msg and "5000 bytes, more than max_sample_bytes (4096)" in msg


def test_no_samples(tmp_path):
    shard = write_shard(tmp_path / "e.tar", [("a.json", b"{}"), ("README", b"x")])
    msg = error_of(shard, transform="imagenet-eval")
    assert shard in msg and "no samples" in msg


# ---------------------------------------------------------------- the disk cache tier

@pytest.mark.parametrize("kind", ["shard", "folder", "list", "brace"])
def test_disk_cache_sees_a_changed_shard(tmp_path, kind):
    """SHARD.tar/KEY is no file that the disk tier's stat() could check: the source gives the
    version (the shard's size, mtime, inode). Before it, folder and list sources got old bytes."""
    d = tmp_path / "d"
    os.makedirs(d)
    shard = write_shard(d / "a-0.tar", [("x.bin", b"AAAA"), ("y.bin", b"BBBB")])
    (d / "l.txt").write_text("a-0.tar\n")
    src = {"shard": shard, "folder": str(d), "list": str(d / "l.txt"), "brace": str(d / "a-{0..0}.tar")}[kind]

    def run():
        with lade.Loader(src, transform="raw", batch_size=2, epochs=1, shuffle=False, threads=1, output="numpy",
                         raw_size=4, cache_dir=str(tmp_path / "cache")) as L:
            out = [bytes(r) for dd, _ in L for r in dd]
            return out, L.epoch_stats(0)["samples_by_source"]  # (storage, memory, disk, peer)
    assert run()[0] == [b"AAAA", b"BBBB"]
    got, by = run()
    assert got == [b"AAAA", b"BBBB"] and by[2] == 2  # unchanged: served by the disk tier
    write_shard(shard, [("x.bin", b"CCCC"), ("y.bin", b"DDDD")])
    got, by = run()
    assert got == [b"CCCC", b"DDDD"] and by[2] == 0 and by[0] == 2


# ---------------------------------------------------------------- integrity

def test_index_of_another_shard_is_not_trusted(tmp_path):
    """A .ladeidx copied from another shard of the same size and mtime is bound to the shard it
    describes (a hash of sampled member headers): it is rebuilt, never used for the wrong shard."""
    sizes = samples_of(30, 11)
    a = write_shard(tmp_path / "a.tar", [("a" + n[1:], d) for n, d in sizes])
    b = write_shard(tmp_path / "b.tar", [("b" + n[1:], d[::-1]) for n, d in sizes])
    sa, sb = os.stat(a), os.stat(b)
    assert sa.st_size == sb.st_size
    os.utime(b, ns=(sa.st_atime_ns, sa.st_mtime_ns))
    check_raw(a, reference([a], "raw"), epochs=1)
    os.replace(a + ".ladeidx", b + ".ladeidx")
    ref = reference([b], "raw")
    check_raw(b, ref, epochs=1)
    assert all(p.startswith(b + "/b") for p, _, _ in ref)
    # the index was rebuilt for b, and is trusted from then on
    st = os.stat(b + ".ladeidx")
    check_raw(b, ref, epochs=1)
    assert os.stat(b + ".ladeidx").st_ino == st.st_ino


def test_shard_overwritten_in_place_fails(tmp_path):
    """A shard rewritten in place while it is open (same size: other bytes) fails the next read,
    naming the shard, instead of delivering the new bytes at the old offsets."""
    members = [("s%05d.bin" % i, bytes([i % 251]) * 600) for i in range(400)]
    shard = write_shard(tmp_path / "a.tar", members)
    raw = open(shard, "rb").read()
    with lade.Loader(shard, transform="raw", batch_size=4, epochs=1, shuffle=False, threads=1, prefetch=1,
                     output="numpy", raw_size=600) as L:
        it = iter(L)
        d, _ = next(it)
        assert bytes(d[0]) == bytes([0]) * 600
        time.sleep(0.05)  # past the file system's timestamp granularity
        with open(shard, "r+b") as f:  # in place: the same inode, size and layout, other bytes
            f.write(raw.replace(b"\x07" * 600, b"\x08" * 600))
        k = 4
        with pytest.raises(lade.Error) as ei:
            for d, _ in it:
                for row in d:
                    assert bytes(row) == bytes([k % 251]) * 600, "sample %d" % k  # never another's bytes
                    k += 1
        assert shard in str(ei.value) and "changed" in str(ei.value)


def test_shard_opened_per_read_replaced_by_rename_fails(tmp_path):
    """Shards past the 512th are opened per read: one replaced by rename (another file of the same
    size and layout under its name) fails the read naming it, instead of the new file's bytes at
    the old offsets."""
    d = tmp_path / "d"
    os.makedirs(d)
    for i in range(520):
        write_shard(d / ("s-%04d.tar" % i), [("k%04d.bin" % i, bytes([i % 251]) * 100)])
    with lade.Loader(str(d), transform="raw", batch_size=4, epochs=1, shuffle=False, threads=1, prefetch=1,
                     output="numpy", raw_size=100) as L:
        it = iter(L)
        next(it)
        new = write_shard(tmp_path / "new.tar", [("k0515.bin", b"\xee" * 100)])
        os.replace(new, d / "s-0515.tar")
        k = 4
        with pytest.raises(lade.Error) as ei:
            for rows, _ in it:
                for row in rows:
                    assert bytes(row) == bytes([k % 251]) * 100, "sample %d" % k
                    k += 1
        assert str(d / "s-0515.tar") in str(ei.value) and "changed" in str(ei.value)
