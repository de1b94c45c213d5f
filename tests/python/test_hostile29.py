"""Issue 29's findings, each against what a user compares with (tarfile, h5py, numpy):
a tar shard or an HDF5 file replaced by os.replace during an epoch is read to the epoch's end
with its old bytes, while one rewritten in place (mtime put back) is still refused; the CLI shows
a tar member's 0xff byte as \\xff, as the Python module does; two loaders of one process on one
cache_dir are told so, and the setting that lets them share it works; a 9-dimensional .npy is
refused saying why (the C ABI's LADE_MAX_DIMS) and the way it names (transform=raw) works."""
import io
import os
import subprocess
import tarfile
import time

import numpy as np
import pytest

import lade
from conftest import write_tar


# ---------------------------------------------------------------- finding 5: replaced by rename


def tar_reference(path):
    """The member bytes by dataset index (one member per key: index order is member order)."""
    with tarfile.open(path) as t:
        return [t.extractfile(m).read() for m in t.getmembers() if m.isfile()]


def epoch_with_replace(path, replace, want, n, **kw):
    """One shuffled epoch; replace() after 2 batches; every (index, bytes) checked against want."""
    seen = []
    with lade.Loader(path, batch_size=4, epochs=1, shuffle=True, seed=3, threads=1, prefetch=1,
                     output="numpy", meta=True, **kw) as L:
        for step, (d, _, b) in enumerate(L):
            if step == 2:
                time.sleep(0.05)  # past the file system's timestamp granularity: the unlink moves ctime
                replace()
            for row, idx in zip(d, b.indices):
                assert row.tobytes() == want[int(idx)], "sample %d" % idx
                seen.append(int(idx))
    assert sorted(seen) == list(range(n))  # every sample of the epoch exactly once


def test_tar_replaced_by_rename_reads_old_bytes(tmp_path):
    """os.replace of the open shard by another valid shard mid-epoch: the epoch ends with the old
    shard's bytes (as tarfile reads them from the old file), no error."""
    n = 120
    shard = write_tar(tmp_path / "a.tar", [("s%04d.bin" % i, bytes([i % 251]) * 300) for i in range(n)])
    new = write_tar(tmp_path / "b.tar", [("s%04d.bin" % i, bytes([(i + 7) % 251]) * 300) for i in range(n)])
    want = tar_reference(shard)
    assert want != tar_reference(new)
    epoch_with_replace(shard, lambda: os.replace(new, shard), want, n, transform="raw", raw_size=300)
    assert tar_reference(shard)[0] == bytes([7]) * 300  # the name holds the new shard now


def h5_file(path, add):
    import h5py
    x = (np.arange(200 * 6, dtype=np.float32).reshape(200, 6) + add)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=x, chunks=(5, 6), compression="gzip")
    return str(path)


def test_hdf5_replaced_by_rename_reads_old_bytes(tmp_path):
    """The same for an HDF5 file (chunked, gzip), compared with h5py's read of the old file."""
    h5py = pytest.importorskip("h5py")
    p, q = h5_file(tmp_path / "a.h5", 0), h5_file(tmp_path / "b.h5", 0.5)
    with h5py.File(p, "r") as f:
        want = [r.tobytes() for r in f["data"][:]]
    epoch_with_replace(p, lambda: os.replace(q, p), want, 200)
    with h5py.File(p, "r") as f:
        assert f["data"][0, 0] == 0.5


@pytest.mark.parametrize("kind", ["tar", "hdf5"])
def test_rewritten_in_place_with_mtime_put_back_is_refused(tmp_path, kind):
    """What the unlink rule must not let through: the file rewritten in place (rsync --inplace,
    cp -p: other bytes, the same size, the old mtime put back) is still linked, so its moved
    ctime still fails the next read, naming the file."""
    if kind == "tar":
        n, p = 120, write_tar(tmp_path / "a.tar", [("s%04d.bin" % i, bytes([i % 251]) * 300) for i in range(120)])
        other = open(write_tar(tmp_path / "b.tar", [("s%04d.bin" % i, bytes([(i + 7) % 251]) * 300)
                                                    for i in range(120)]), "rb").read()
        want, kw = tar_reference(p), {"transform": "raw", "raw_size": 300}
    else:
        h5py = pytest.importorskip("h5py")
        n = 200
        p = str(tmp_path / "a.h5")
        with h5py.File(p, "w") as f:
            f.create_dataset("data", data=np.arange(1200, dtype=np.float32).reshape(200, 6))
        with h5py.File(p, "r") as f:
            want = [r.tobytes() for r in f["data"][:]]
        q = str(tmp_path / "b.h5")
        with h5py.File(q, "w") as f:
            f.create_dataset("data", data=np.arange(1200, dtype=np.float32).reshape(200, 6) + 0.5)
        other, kw = open(q, "rb").read(), {}
    assert len(other) == os.path.getsize(p)
    st = os.stat(p)

    def rewrite():
        with open(p, "r+b") as f:
            f.write(other)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(p).st_mtime_ns == st.st_mtime_ns and os.stat(p).st_size == st.st_size

    with pytest.raises(lade.Error) as ei:
        epoch_with_replace(p, rewrite, want, n, **kw)
    m = str(ei.value)
    assert p in m and "changed while it was open (its ctime differs" in m and "rewritten in place" in m, m


# ---------------------------------------------------------------- the CLI shows names as the module does

def shown(raw):
    """What the Python module's errors show for these bytes (backslashreplace), control bytes as the
    library's messages write them (\\xNN)."""
    text = raw.decode("utf-8", "backslashreplace")
    return "".join("\\x%02x" % ord(c) if ord(c) < 0x20 or ord(c) == 0x7f else c for c in text)


def test_cli_escapes_member_names_as_the_module_does(tmp_path, lade_cli):
    """A tar member name with a 0xff byte (and a tab), written by tarfile: `lade ls` prints \\xff
    and \\x09, never the raw bytes, and keeps valid UTF-8 (é) as it is; `lade bench`'s error naming
    the member is the Python module's message, byte for byte."""
    bad, good = b"cls\xff/a\xff\tb.bin", "ok/\u00e9.bin".encode()
    shard = str(tmp_path / "ff.tar")
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as t:
        for name in (bad, good):
            ti = tarfile.TarInfo(os.fsdecode(name))
            ti.size = 10
            t.addfile(ti, io.BytesIO(b"x" * 10))
    with tarfile.open(shard, encoding="utf-8", errors="surrogateescape") as t:
        assert [os.fsencode(m.name) for m in t.getmembers()] == [bad, good]
    with lade.Loader(shard, transform="raw", batch_size=1, output="numpy") as L:
        rows = [(os.fsencode(p), label, os.fsencode(L.classes[label])) for p, label in L.samples]
    out = subprocess.run([lade_cli, "ls", "--transform", "raw", shard], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert b"\xff" not in out.stdout
    want = "".join("%d\t%d\t%s\t%s\n" % (i, label, shown(cls), shown(p)) for i, (p, label, cls) in enumerate(rows))
    assert out.stdout.decode("utf-8") == want
    assert "cls\\xff/a\\xff\\x09b" in want and "ok/\u00e9" in want

    with pytest.raises(lade.Error) as ei:
        with lade.Loader(shard, transform="raw", batch_size=2, epochs=1, output="numpy", max_sample_bytes=4) as L:
            list(L)
    assert "member 'cls\\xff/a\\xff\\x09b.bin'" in str(ei.value)
    out = subprocess.run([lade_cli, "bench", shard, "--transform", "raw", "--batch-size", "2", "--set",
                          "max_sample_bytes=4"], capture_output=True, timeout=60)
    assert out.returncode != 0 and b"\xff" not in out.stderr
    assert out.stderr.decode("utf-8") == "lade bench: %s\n" % ei.value


# ---------------------------------------------------------------- two loaders of one process, one cache_dir

def test_two_loaders_of_one_process_on_one_cache_dir(tmp_path):
    """The second loader on one cache_dir is told it is another loader of this process (not another
    process) and which settings let both share it; with them (node_cache=on, one job_id) both load,
    the second from the disk tier, each sample as np.load reads it."""
    x = np.arange(40 * 6, dtype=np.float32).reshape(40, 6)
    src, cache = str(tmp_path / "x.npy"), str(tmp_path / "cache")
    np.save(src, x)
    kw = dict(batch_size=4, epochs=1, shuffle=False, threads=1, output="numpy", cache_dir=cache)
    with lade.Loader(src, **kw):
        with pytest.raises(lade.Error) as ei:
            lade.Loader(src, **kw)
    m = str(ei.value)
    assert cache in m and "in use by another loader in this process" in m and "another process" not in m, m
    assert "node_cache=on" in m and "job_id" in m, m
    kw.update(node_cache="on", job_id="hostile29")
    with lade.Loader(src, **kw) as a:
        got_a = np.concatenate([d for d, _ in a])
        with lade.Loader(src, **kw) as b:
            got_b = np.concatenate([d for d, _ in b])
            assert b.stats()["samples_by_source"][2] == 40  # every sample from the disk tier a filled
    assert np.array_equal(got_a, np.load(src)) and np.array_equal(got_b, np.load(src))


# ---------------------------------------------------------------- a .npy of 9 dimensions

def test_nine_dimensional_npy_says_why_and_raw_reads_it(tmp_path):
    """np.save of a 9-d array: refused naming the file, the C ABI's LADE_MAX_DIMS and numpy's own
    limit, with the ways that work; the one it names, transform=raw, gives each sample's .npy bytes,
    which np.load reads back as the arrays numpy wrote (a folder of 9-d files, and a stacked 9-d file
    whose rows have 8)."""
    rng = np.random.default_rng(29)
    shape = (2, 1, 3, 1, 2, 1, 1, 2, 2)
    arrs = [rng.standard_normal(shape).astype(np.float32) for _ in range(5)]
    d = tmp_path / "files" / "c0"
    d.mkdir(parents=True)
    for i, a in enumerate(arrs):
        np.save(str(d / ("s%d.npy" % i)), a)
    stacked = str(tmp_path / "stacked.npy")
    np.save(stacked, np.stack(arrs)[:, 0])  # 9 dimensions: (5,) + shape[1:]
    assert np.load(stacked).ndim == 9 and np.load(str(d / "s0.npy")).ndim == 9
    cases = [(str(tmp_path / "files"), str(d / "s0.npy"), 9, [a for a in arrs]),
             (stacked, stacked, 8, [a[0] for a in arrs])]
    for source, named, nd, want in cases:
        with pytest.raises(lade.Error) as ei:
            lade.Loader(source, batch_size=2, output="numpy")
        m = str(ei.value)
        assert m.startswith("%s: samples of %d dimensions; a lade batch holds at most 7" % (named, nd)), m
        assert "LADE_MAX_DIMS (8)" in m and "C ABI" in m and "numpy allows 32" in m, m
        assert "transform=raw" in m and "np.load(io.BytesIO(row))" in m, m
        with lade.Loader(source, transform="raw", batch_size=2, epochs=1, shuffle=False, threads=1,
                         output="numpy") as L:
            rows = [r for batch, _ in L for r in batch]
        assert len(rows) == 5
        for row, a in zip(rows, want):
            back = np.load(io.BytesIO(row.tobytes()))
            assert back.shape == a.shape and back.dtype == a.dtype and np.array_equal(back, a)
