"""`lade pack DIR --to tar`: the shards are read by Python's tarfile and GNU tar, hold the
source files' bytes as WebDataset groups in listing order, read back by lade as the same
samples (same bench checksum, same labels), are byte-identical when packed twice, and a
pack, killed or with shards lost, resumes from its first incomplete shard
(docs/sources.md, tar: lade pack)."""
import glob
import json
import os
import shutil
import subprocess
import tarfile

import pytest


def run(cli, *args, check=True):
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True, check=check)


def pack(cli, src, out, size, *extra):
    return run(cli, "pack", src, "--to", "tar", "--shard-size", size, out, *extra)


def checksum(cli, src, *args):
    r = run(cli, "bench", src, "--json", "--batch-size", "8", *args)
    return json.loads(r.stdout)["checksum"]


def listing(cli, src, *args):
    """(index, label, path) per sample, as `lade ls` prints them."""
    rows = []
    for line in run(cli, "ls", src, *args).stdout.splitlines():
        i, label, _cls, path = line.split("\t")
        rows.append((int(i), int(label), path))
    return rows


def shards(out):
    return sorted(glob.glob(os.path.join(out, "shard-*.tar")))


def expected_members(cli, src, *args):
    """The members a pack must write, in order: KEY.ext with the file's bytes, KEY.cls."""
    want, prev = [], None
    for _i, label, path in listing(cli, src, *args):
        rel = os.path.relpath(path, src)
        d, _, base = rel.rpartition("/")
        stem, _, ext = base.rpartition(".")
        key = (d + "/" if d else "") + stem.replace(".", "_")
        k, n = key, 1
        while k == prev:
            k, n = f"{key}_{n}", n + 1
        prev = k
        with open(path, "rb") as f:
            want.append((f"{k}.{ext.lower()}", f.read()))
        if label >= 0:
            want.append((f"{k}.cls", str(label).encode()))
    return want


def members(out):
    got = []
    for s in shards(out):
        with tarfile.open(s) as t:
            for m in t.getmembers():
                assert m.isfile() and m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.mode == 0o644
                assert m.uname == "" and m.gname == ""
                got.append((m.name, t.extractfile(m).read()))
    return got


def check_pack(cli, src, out, size, *ls_args):
    all_shards = shards(out)
    for s in all_shards:
        # at most SIZE bytes, unless the shard holds one sample alone
        with tarfile.open(s) as t:
            keys = {m.name.rpartition("/")[0] + "/" + m.name.rpartition("/")[2].split(".")[0]
                    for m in t.getmembers()}
        assert os.path.getsize(s) <= size or len(keys) == 1, s
    assert members(out) == expected_members(cli, src, *ls_args)
    if shutil.which("tar"):
        names = []
        for s in all_shards:
            names += subprocess.run(["tar", "-tf", s], capture_output=True, text=True, check=True).stdout.split()
        assert names == [n for n, _ in expected_members(cli, src, *ls_args)]
    # same samples, same labels, same order
    assert [r[:2] for r in listing(cli, out, *ls_args)] == [r[:2] for r in listing(cli, src, *ls_args)]
    return all_shards


@pytest.fixture(scope="module")
def jpeg_dir(tmp_path_factory, lade_cli):
    d = tmp_path_factory.mktemp("pack") / "jpeg"
    run(lade_cli, "gen", "jpeg", d, "--count", "40")
    return str(d)


@pytest.fixture(scope="module")
def small_npy(tmp_path_factory, lade_cli):
    d = tmp_path_factory.mktemp("pack") / "npy"
    run(lade_cli, "gen", "npy", d, "--count", "50", "--shape", "4,8,8", "--seed", "2")
    return str(d)


RAW = ("--set", "raw_size=262144")


def test_jpeg_round_trip(lade_cli, jpeg_dir, tmp_path):
    out = str(tmp_path / "shards")
    r = pack(lade_cli, jpeg_dir, out, "1MB")
    assert r.stderr == ""  # no progress line when stderr is not a terminal
    all_shards = check_pack(lade_cli, jpeg_dir, out, 1000000)
    assert len(all_shards) >= 3
    assert os.path.basename(all_shards[0]) == "shard-000000.tar"
    brace = os.path.join(out, "shard-{000000..%06d}.tar" % (len(all_shards) - 1))
    for t in (("--transform", "raw", *RAW), ("--transform", "imagenet-train")):
        for seed in ("3", "4"):
            want = checksum(lade_cli, jpeg_dir, "--seed", seed, *t)
            assert checksum(lade_cli, out, "--seed", seed, *t) == want
            assert checksum(lade_cli, brace, "--seed", seed, *t) == want
        assert checksum(lade_cli, out, "--seed", "3", *t) != checksum(lade_cli, out, "--seed", "4", *t)


def test_npy_round_trip(lade_cli, small_npy, tmp_path):
    out = str(tmp_path / "shards")
    pack(lade_cli, small_npy, out, "16KiB")
    # transform auto means images for a tar source: packed .npy samples are read with npy or raw
    all_shards = check_pack(lade_cli, small_npy, out, 16384, "--transform", "npy")
    assert len(all_shards) >= 5
    for t in ("raw", "npy"):
        assert checksum(lade_cli, out, "--seed", "9", "--transform", t) == \
            checksum(lade_cli, small_npy, "--seed", "9", "--transform", t)


def test_pack_twice_is_identical(lade_cli, small_npy, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    pack(lade_cli, small_npy, a, "10000")
    pack(lade_cli, small_npy, b, "10000")
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b)) and len(shards(a)) >= 5
    for n in names:
        with open(os.path.join(a, n), "rb") as fa, open(os.path.join(b, n), "rb") as fb:
            assert fa.read() == fb.read(), n


def test_resume(lade_cli, small_npy, tmp_path):
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    pack(lade_cli, small_npy, ref, "16KiB")
    pack(lade_cli, small_npy, out, "16KiB")
    s = shards(out)
    assert len(s) >= 5
    before = [os.stat(p) for p in s]
    # an interrupted run: the last shard missing, a half-written temporary file, and a
    # shard in the middle cut short (its size no longer matches the manifest)
    os.unlink(s[-1])
    with open(os.path.join(out, ".shard-%06d.tar.tmp" % (len(s) - 1)), "wb") as f:
        f.write(b"partial")
    with open(s[3], "r+b") as f:
        f.truncate(1024)
    r = pack(lade_cli, small_npy, out, "16KiB")
    assert "kept 3 complete shards" in r.stdout
    after = [os.stat(p) for p in s]
    for i in range(3):  # kept: the same file, not rewritten
        assert (after[i].st_ino, after[i].st_mtime_ns) == (before[i].st_ino, before[i].st_mtime_ns)
    assert after[3].st_ino != before[3].st_ino
    assert not glob.glob(os.path.join(out, ".shard-*"))
    for n in os.listdir(ref):
        with open(os.path.join(ref, n), "rb") as fa, open(os.path.join(out, n), "rb") as fb:
            assert fa.read() == fb.read(), n
    assert sorted(os.listdir(ref)) == sorted(os.listdir(out))
    # other settings: nothing is kept, and shards beyond the new count are removed
    r = pack(lade_cli, small_npy, out, "1MB")
    assert "kept" not in r.stdout and len(shards(out)) == 1
    assert checksum(lade_cli, out, "--seed", "1", "--transform", "npy") == \
        checksum(lade_cli, small_npy, "--seed", "1", "--transform", "npy")


def test_names_dots_long_paths(lade_cli, jpeg_dir, tmp_path):
    """Dots in a stem become '_', a key equal to the previous one gets _1, extensions are
    lower-cased, long paths use the ustar prefix or a pax header; all read back."""
    src = tmp_path / "src"
    jpgs = sorted(glob.glob(os.path.join(jpeg_dir, "*", "*.jpg")))
    long_dir = "d" * 120  # > 100 bytes with the file: ustar prefix + name
    files = ["a/x.v2.final.JPG", "a/x_v2_final.jpeg", "b/plain.png", long_dir + "/y.jpg",
             "c/" + "s" * 150 + ".jpg"]  # a last component over 100 bytes: pax path
    for i, rel in enumerate(files):
        os.makedirs(src / os.path.dirname(rel), exist_ok=True)
        shutil.copy(jpgs[i], src / rel)
    out = str(tmp_path / "out")
    pack(lade_cli, src, out, "300KB", "--transform", "raw")
    names = [n for n, _ in members(out)]
    assert "a/x_v2_final.jpg" in names and "a/x_v2_final_1.jpeg" in names and "b/plain.png" in names
    assert long_dir + "/y.jpg" in names and "c/" + "s" * 150 + ".jpg" in names
    check_pack(lade_cli, str(src), out, 300000, "--transform", "raw")
    assert checksum(lade_cli, out, "--seed", "2", "--transform", "raw", *RAW) == \
        checksum(lade_cli, str(src), "--seed", "2", "--transform", "raw", *RAW)


def test_sizes_and_errors(lade_cli, small_npy, tmp_path):
    for size, count in (("1GB", 1), ("64KiB", 3), ("65536", 3)):
        out = str(tmp_path / size)
        pack(lade_cli, small_npy, out, size)
        assert len(shards(out)) == count, size
    # a shard size smaller than one sample: one sample per shard
    out = str(tmp_path / "tiny")
    pack(lade_cli, small_npy, out, "100B")
    assert len(shards(out)) == 50
    for bad in (("--shard-size", "12XB"), ("--shard-size", "0"), ("--to", "hdf5")):
        args = dict([("--to", "tar"), ("--shard-size", "1MB")])
        args[bad[0]] = bad[1]
        r = subprocess.run([lade_cli, "pack", small_npy, *sum(args.items(), ()), str(tmp_path / "x")],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "lade pack" in r.stderr, bad
    stacked = tmp_path / "stacked"
    run(lade_cli, "gen", "npy", stacked, "--count", "5", "--shape", "2", "--stacked")
    r = subprocess.run([lade_cli, "pack", stacked / "data.npy", "--to", "tar", "--shard-size", "1MB", tmp_path / "y"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "not a file under" in r.stderr


def test_killed_pack_resumes(lade_cli, big_npy_dir, tmp_path):
    """A pack killed (SIGKILL) once its fourth shard exists resumes and gives the same bytes."""
    import signal
    import time
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    pack(lade_cli, big_npy_dir, ref, "700KB")  # one 588 KiB sample per shard: 64 shards
    p = subprocess.Popen([lade_cli, "pack", big_npy_dir, "--to", "tar", "--shard-size", "700KB", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = os.path.join(out, "shard-000003.tar")
    deadline = time.monotonic() + 60
    while not os.path.exists(first) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0005)
    if p.poll() is not None:
        pytest.skip("the pack finished before it could be killed")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    # the shards the manifest lists are kept; one renamed but not listed yet is written again
    with open(os.path.join(out, ".lade-pack")) as f:
        listed = [line.split()[0] for line in f.read().splitlines()[1:]]
    if len(listed) == len(shards(ref)):
        pytest.skip("the pack wrote every shard before it was killed")
    inodes = {n: os.stat(os.path.join(out, n)).st_ino for n in listed}
    r = pack(lade_cli, big_npy_dir, out, "700KB")
    assert ("kept %d complete shards" % len(listed) in r.stdout) == bool(listed)
    assert inodes == {n: os.stat(os.path.join(out, n)).st_ino for n in listed}
    assert sorted(os.listdir(ref)) == sorted(os.listdir(out))
    for n in os.listdir(ref):
        with open(os.path.join(ref, n), "rb") as fa, open(os.path.join(out, n), "rb") as fb:
            assert fa.read() == fb.read(), n


def test_hdf5_output_never_replaces_a_file_it_did_not_write(lade_cli, small_npy, tmp_path):
    """`--to hdf5 OUT` refuses an OUT that exists and is not an HDF5 file an earlier pack wrote (a text
    file, a folder, someone's own HDF5 file), leaving it as it was, as the tar output refuses a file
    where its folder goes; an OUT that lade pack wrote is packed again."""
    import lade
    if "hdf5" not in lade.features():
        pytest.skip("built without HDF5")
    h5py = pytest.importorskip("h5py")
    text = tmp_path / "notes.h5"
    text.write_bytes(b"my notes, not an HDF5 file\n")
    theirs = str(tmp_path / "theirs.h5")
    with h5py.File(theirs, "w") as f:
        f["x"] = [1, 2, 3]
    before = open(theirs, "rb").read()
    folder = tmp_path / "folder.h5"
    folder.mkdir()
    for out, why in ((str(text), "is not an HDF5 file"), (theirs, "is an HDF5 file that lade pack did not write"),
                     (str(folder), "is not a regular file")):
        r = subprocess.run([lade_cli, "pack", small_npy, "--to", "hdf5", out], capture_output=True, text=True)
        assert r.returncode == 1 and "%s exists and %s: not overwritten" % (out, why) in r.stderr, r.stderr
        assert not os.path.exists(out + ".part")
    assert text.read_bytes() == b"my notes, not an HDF5 file\n"
    assert open(theirs, "rb").read() == before and folder.is_dir()
    ours = str(tmp_path / "ours.h5")
    run(lade_cli, "pack", small_npy, "--to", "hdf5", ours)
    r = subprocess.run([lade_cli, "pack", small_npy, "--to", "hdf5", ours], capture_output=True, text=True)
    assert r.returncode == 0 and "packed 50 samples" in r.stdout, r.stderr
    assert checksum(lade_cli, ours) == checksum(lade_cli, small_npy)
