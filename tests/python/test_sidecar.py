"""Sidecar indexes (docs/sources.md, "Sidecar indexes"): `lade pack` writes SHARD.tar.ladeidx beside each
shard and `lade index` writes it for shards other tools wrote; a remote open (nginx over http://, s3rver
over s3://) fetches it instead of streaming the shard, after checking it is the shard's (its size, then
by at most 2 Range requests its first and last sampled member headers and its end; the other sampled
headers by Range before the shard's first sample is served). A sidecar that open finds is not the
shard's (another shard's of the same size, a truncated one, a shard rewritten after it) is ignored,
counted in sidecar_rejected, said once on stderr, and the shard read whole as before; one whose middle
headers differ fails every read of its shard, naming shard, member and sidecar, and none of its samples
is delivered; the bytes delivered always equal Python's tarfile's."""
import glob
import gzip
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import pytest

import lade
from conftest import write_tar

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "http"))
import httpenv  # noqa: E402
import s3env  # noqa: E402  (tests/s3, put on the path by httpenv)
import tfrecord_files  # noqa: E402

OPEN_GAP, LAZY_GAP = 64 << 10, 16 << 10  # tar_http.c: reads this close share one Range (at open; the rest)
FIRST_BYTES = 4096  # tar_http.c: a shard whose sidecar is asked for is probed with a Range of its first bytes
FIRST_RANGE = "bytes=0-%d" % (FIRST_BYTES - 1)


def _ranges(reads, size, gap):
    """Range requests for reads [(off, len)] cut at size, those at most gap bytes apart merged (coalesce.c)."""
    n, end = 0, None
    for o, e in sorted((o, min(o + ln, size)) for o, ln in reads if o < min(o + ln, size)):
        if end is not None and o <= end + gap:
            end = max(end, e)
        else:
            n, end = n + 1, e
    return n


def bind_ranges(path, size=None):
    """(Range requests at open, Range requests before the shard's first read) that bind the sidecar of tar
    shard `path` to a shard of `size` bytes (tar_http.c): the reads of tar.c's bind() (the header of 8
    members spread over the shard, a .cls member's bytes too) and the 512 bytes after the last member; all
    at open when they lie within 64 KiB, else the first and last member's (the last's when it fits) and the
    end at open, in at most 2 Ranges, and the 6 others at the first read. The reads at open that lie in the
    shard's first FIRST_BYTES come with the request that stands for its HEAD: no Range of their own."""
    size = os.path.getsize(path) if size is None else size

    def ranges_now(rs):
        return _ranges([(o, ln) for o, ln in rs if min(o + ln, size) > min(FIRST_BYTES, size)], size, OPEN_GAP)

    with tarfile.open(path) as t:
        ms = [m for m in t.getmembers() if m.isfile()]
    n = len(ms)
    k = min(n, 8)
    reads = []
    for j in range(k):
        m = ms[0 if k <= 1 else j * (n - 1) // (k - 1)]
        if m.offset_data >= 512:
            reads.append((m.offset_data - 512, 512 + (min(m.size, 64) if m.name.endswith(".cls") else 0)))
    nb = len(reads)
    per = nb // k if k else 0
    tail = []
    if n:
        end = (ms[-1].offset_data + ms[-1].size + 511) // 512 * 512
        if end <= size and size > end:
            tail = [(end, min(size - end, 512))]
    allr = reads + tail
    if not (k > 2 and per and per * k == nb and nb <= 16) or \
            max(o + ln for o, ln in allr) - min(o for o, _ in allr) <= OPEN_GAP:
        return ranges_now(allr), 0
    now = set(range(per)) | set(range(nb - per, nb))
    for d in list(range(nb - per + 1, nb)) + list(range(1, per)) + [nb - per]:
        if _ranges([reads[q] for q in now] + tail, size, OPEN_GAP) <= 2:
            break
        now.discard(d)
    assert _ranges([reads[q] for q in now] + tail, size, OPEN_GAP) <= 2
    opened = ranges_now([reads[q] for q in now] + tail)
    return opened, _ranges([reads[q] for q in range(nb) if q not in now], size, LAZY_GAP)


def bind_total(paths):
    return sum(sum(bind_ranges(p)) for p in paths)


# ---------------------------------------------------------------- shards and references


def members_of(prefix, n, seed, flip=False):
    """n samples PREFIX_i.bin (+ .cls); flip: other bytes of the same sizes."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(100, 3000)))
        if flip:
            data = bytes(b ^ 0x5A for b in data)
        out.append(("%s_%03d.bin" % (prefix, i), data))
        out.append(("%s_%03d.cls" % (prefix, i), b"%d" % (i % 3)))
    return out


def reference(path):
    """(key, label, bytes) per sample of a shard, read with tarfile (members KEY.bin/.npy and KEY.cls)."""
    groups = []
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if not m.isfile():
                continue
            key, ext = m.name.split(".", 1)
            if not groups or groups[-1][0] != key:
                groups.append((key, {}))
            groups[-1][1][ext] = t.extractfile(m).read()
    return [(k, int(d["cls"]) if "cls" in d else -1, next(v for e, v in d.items() if e != "cls"))
            for k, d in groups]


def load(source, **kw):
    """{index: bytes} of one unshuffled epoch, the samples' names, and the loader's stats."""
    got = {}
    with lade.Loader(source, transform="raw", batch_size=5, epochs=1, shuffle=False, threads=2, output="numpy",
                     meta=True, raw_size=4096, **kw) as L:
        names = L.samples
        for d, lab, b in L.stream():
            for row, i in zip(d, b.indices.tolist()):
                got[i] = bytes(row)
        st = L.stats()
    return got, names, st


def check_same(source, shard_names, local_paths, **kw):
    """The batches of `source` (shards shard_names) equal tarfile's reading of local_paths."""
    got, names, st = load(source, **kw)
    ref = []
    for shown, path in zip(shard_names, local_paths):
        ref += [(shown + "/" + k, lab, data) for k, lab, data in reference(path)]
    assert names == [(p, lab) for p, lab, _ in ref]
    assert sorted(got) == list(range(len(ref)))
    for i, (_, _, data) in enumerate(ref):
        assert got[i][:len(data)] == data and not got[i][len(data):].strip(b"\0")
    return st


def run_cli(cli, *args):
    r = subprocess.run([cli] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def shards(tmp_path_factory, lade_cli):
    """A folder of shards: 3 from `lade pack` (npy samples), 3 written by tarfile and indexed by
    `lade index`; every one with its sidecar."""
    root = tmp_path_factory.mktemp("sidecar")
    src = root / "npy"
    run_cli(lade_cli, "gen", "npy", src, "--count", "60", "--shape", "4,8", "--seed", "3")
    packed = root / "packed"
    run_cli(lade_cli, "pack", src, "--to", "tar", "--shard-size", "45KB", packed)
    p = sorted(glob.glob(str(packed / "shard-*.tar")))
    assert len(p) >= 3, p
    other = root / "other"
    other.mkdir()
    t = [write_tar(other / ("t-%d.tar" % k), members_of("s%d" % k, 12 + 3 * k, k)) for k in range(3)]
    r = run_cli(lade_cli, "index", *t)
    assert r.stdout.split() == [x + ".ladeidx" for x in t]
    return {"root": root, "packed": p, "other": t}


def test_pack_and_index_write_sidecars_used_locally(shards, lade_cli):
    for s in shards["packed"] + shards["other"]:
        assert os.path.getsize(s + ".ladeidx") > 0
    # the same bytes for a second pack (a sidecar holds no mtime)
    again = shards["root"] / "again"
    run_cli(lade_cli, "pack", shards["root"] / "npy", "--to", "tar", "--shard-size", "45KB", again)
    for s in shards["packed"]:
        with open(s + ".ladeidx", "rb") as a, open(str(again / os.path.basename(s)) + ".ladeidx", "rb") as b:
            assert a.read() == b.read()
    # a local open uses them as they are: not rebuilt, not rewritten
    for group in ("packed", "other"):
        before = {s: os.stat(s + ".ladeidx") for s in shards[group]}
        check_same(shards[group][0] if len(shards[group]) == 1 else os.path.dirname(shards[group][0]),
                   shards[group], shards[group])
        for s, st in before.items():
            now = os.stat(s + ".ladeidx")
            assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), s


def test_index_refuses_urls_and_broken_shards(shards, lade_cli, tmp_path):
    r = subprocess.run([lade_cli, "index", "http://127.0.0.1:9/x.tar"], stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and "http://127.0.0.1:9/x.tar: a URL" in r.stderr
    bad = tmp_path / "cut.tar"
    bad.write_bytes(open(shards["other"][0], "rb").read()[:3000])
    r = subprocess.run([lade_cli, "index", bad], stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and str(bad) in r.stderr and not os.path.exists(str(bad) + ".ladeidx")


# ---------------------------------------------------------------- http:// (nginx)

def served(root, d):
    """A copy of folder d under root (the server's), mtimes not kept: a sidecar must not need them."""
    out = os.path.join(root, os.path.basename(d))
    os.mkdir(out)
    for f in os.listdir(d):
        shutil.copyfile(os.path.join(d, f), os.path.join(out, f))
    return out


def log_counts(log, n):
    """(the shards' HEADs or the Ranges of their first bytes that stand for them, whole GETs of shards, sidecar
    GETs, other Range requests of shards)"""
    def first(r):
        return r[0] == "GET" and r[1].endswith(".tar") and r[4] == FIRST_RANGE
    heads = [r for r in log if (r[0] == "HEAD" and not r[1].endswith(".ladeidx")) or first(r)]  # not the probe
    whole = [r for r in log if r[0] == "GET" and r[1].endswith(".tar") and r[4] == "-"]
    sides = [r for r in log if r[0] == "GET" and r[1].endswith(".ladeidx")]
    ranges = [r for r in log if r[0] == "GET" and r[1].endswith(".tar") and r[4] != "-" and not first(r)]
    return len(heads), len(whole), len(sides), len(ranges)


@pytest.fixture(scope="module")
def nginx(shards, tmp_path_factory):
    why = httpenv.missing()
    if why:
        pytest.skip(why)
    root = tempfile.mkdtemp(prefix="lade-sidecar-www-")
    os.chmod(root, 0o755)  # nginx's worker runs as another user when started by root
    served(root, os.path.dirname(shards["packed"][0]))
    served(root, os.path.dirname(shards["other"][0]))
    try:
        with httpenv.NginxEnv(root) as env:
            yield env, root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("group", ["packed", "other"])
def test_http_sidecar_used(shards, nginx, group, capfd):
    env, root = nginx
    local = shards[group]
    sub = os.path.basename(os.path.dirname(local[0]))
    urls = ["%s/%s/%s" % (env.url, sub, os.path.basename(s)) for s in local]
    lst = os.path.join(root, "%s.txt" % group)
    with open(lst, "w") as f:
        f.write("\n".join(urls) + "\n")
    env.clear_log()
    st = check_same(lst, urls, local, coalesce_gap_bytes=0)
    n = len(local)
    heads, whole, sides, ranges = log_counts(env.access_log(), n)
    assert (heads, whole, sides) == (n, 0, n)  # no shard read whole: one sidecar GET each
    bind = bind_total(local)
    assert ranges == st["get_requests"] + bind  # the samples' Ranges and the binding Ranges
    probe = 1 if n > 1 else 0  # the HEAD of the first shard's sidecar: are there sidecars at all
    assert st["list_requests"] == heads + probe + sides + bind
    assert st["sidecar_rejected"] == 0
    assert "sidecar" not in capfd.readouterr().err


def test_http_without_sidecars_reads_shards_whole(shards, nginx):
    """The path before sidecars, and for servers without them: a 404 for the sidecar, one whole GET."""
    env, root = nginx
    d = os.path.join(root, "bare")
    os.mkdir(d)
    for s in shards["other"]:
        shutil.copyfile(s, os.path.join(d, os.path.basename(s)))
    urls = ["%s/bare/%s" % (env.url, os.path.basename(s)) for s in shards["other"]]
    env.clear_log()
    st = check_same(urls[0], urls[:1], shards["other"][:1])
    log = env.access_log()
    assert [r[2] for r in log if r[1].endswith(".ladeidx")] == [404]
    assert log_counts(log, 1)[:2] == (1, 1) and st["sidecar_rejected"] == 0
    # many shards: one HEAD of the first shard's sidecar (404) says the dataset has none, so no shard's is
    # asked for (not a 404 GET per shard)
    n = len(urls)
    assert n > 1
    lst = os.path.join(root, "bare.txt")
    with open(lst, "w") as f:
        f.write("\n".join(urls) + "\n")
    env.clear_log()
    st = check_same(lst, urls, shards["other"])
    log = env.access_log()
    assert [(r[0], r[2]) for r in log if r[1].endswith(".ladeidx")] == [("HEAD", 404)]
    heads, whole, sides, _ = log_counts(log, n)
    assert (heads, whole, sides) == (n, n, 0) and st["sidecar_rejected"] == 0


def test_http_wrong_sidecars_ignored(shards, nginx, capfd, tmp_path, lade_cli):
    """Another shard's sidecar (same size, other bytes), a truncated one, a shard rewritten after its
    sidecar (same size, renamed members; another size): each ignored, counted, said once; the bytes
    still tarfile's. A shard rewritten with other bytes in the same members (the same headers) keeps
    its index right: its sidecar is used, and serves the new bytes."""
    env, root = nginx
    d = os.path.join(root, "wrong")
    os.mkdir(d)
    local = tmp_path / "wrong"
    local.mkdir()
    names = ["a.tar", "b.tar", "c.tar", "d.tar", "e.tar", "f.tar"]
    paths = [str(local / n) for n in names]
    write_tar(paths[0], members_of("a", 20, 7))
    write_tar(paths[1], [(n.replace("a_", "b_"), x) for n, x in members_of("a", 20, 7, flip=True)])
    assert os.path.getsize(paths[0]) == os.path.getsize(paths[1])
    for k in range(2, 6):
        write_tar(paths[k], members_of(names[k][0], 20, k))
    run_cli(lade_cli, "index", *paths)
    shutil.copyfile(paths[0] + ".ladeidx", paths[1] + ".ladeidx")  # b: a's sidecar
    side = open(paths[2] + ".ladeidx", "rb").read()
    open(paths[2] + ".ladeidx", "wb").write(side[:len(side) // 2])  # c: truncated
    write_tar(paths[3], members_of("d", 20, 3, flip=True))  # d: other bytes, the same headers
    write_tar(paths[4], [(n.replace("e_", "E_"), x) for n, x in members_of("e", 20, 4)])  # e: renamed members
    size_f = os.path.getsize(paths[5])
    write_tar(paths[5], members_of("f", 21, 5))  # f: a sample appended (in tar's end padding: the same size)
    assert os.path.getsize(paths[5]) == size_f
    for p in paths:
        for f in (p, p + ".ladeidx"):
            shutil.copyfile(f, os.path.join(d, os.path.basename(f)))
    urls = ["%s/wrong/%s" % (env.url, n) for n in names]
    env.clear_log()
    capfd.readouterr()
    st = check_same("%s/wrong/{a,b,c,d,e,f}.tar" % env.url, urls, paths)
    err = capfd.readouterr().err
    assert st["sidecar_rejected"] == 4
    heads, whole, sides, _ = log_counts(env.access_log(), 6)
    assert (heads, whole, sides) == (6, 4, 6)
    assert urls[0] not in err and urls[3] not in err
    why = {1: "sampled member headers differ", 2: "checksum", 4: "sampled member headers differ",
           5: "a member follows its last one"}
    for k, w in why.items():
        said = [ln for ln in err.splitlines() if "sidecar index not used for %s:" % urls[k] in ln]
        assert len(said) == 1 and w in said[0], (k, err)
    # the same again: the rejections are the open's, not remembered
    assert check_same("%s/wrong/{a,b,c,d,e,f}.tar" % env.url, urls, paths)["sidecar_rejected"] == 4


def big_members(prefix, n, seed, grow=None):
    """n samples PREFIX_i.bin of 3000-4000 bytes (+ .cls): a shard past 64 KiB, whose sidecar is bound in
    two steps. grow {i: delta}: sample i has delta bytes more (and other bytes)."""
    sizes = random.Random(seed).sample(range(3000, 4000), n)
    out = []
    for i in range(n):
        data = random.Random(seed * 1000 + i).randbytes(sizes[i] + (grow or {}).get(i, 0))
        out.append(("%s_%03d.bin" % (prefix, i), data))
        out.append(("%s_%03d.cls" % (prefix, i), b"%d" % (i % 3)))
    return out


def serve_big(root, lade_cli, tmp_path, sub, names, changed=None):
    """Shards `names` (40 big samples each) with their sidecars under root/sub; changed {name: grow}: that
    shard is rewritten after its sidecar, its samples resized by grow. Returns the local paths."""
    d = os.path.join(root, sub)
    os.mkdir(d)
    local = tmp_path / sub
    local.mkdir()
    paths = [write_tar(str(local / nm), big_members(nm[0], 40, k + 11)) for k, nm in enumerate(names)]
    run_cli(lade_cli, "index", *paths)
    for k, nm in enumerate(names):
        if nm in (changed or {}):
            size = os.path.getsize(paths[k])
            write_tar(paths[k], big_members(nm[0], 40, k + 11, changed[nm]))
            assert os.path.getsize(paths[k]) == size
        for f in (paths[k], paths[k] + ".ladeidx"):
            shutil.copyfile(f, os.path.join(d, os.path.basename(f)))
    return paths


def test_http_sidecar_bound_in_two_steps(nginx, lade_cli, tmp_path, capfd):
    """Shards past 64 KiB: open sends 1 Range per shard (the last member's header through the
    end-of-archive block; the first member's header comes with the Range of the shard's first bytes that
    stands for its HEAD), the 6 other sampled headers go before the shard's first read; the bytes are
    tarfile's, with 4 threads reading the shards shuffled too."""
    env, root = nginx
    names = ["p.tar", "q.tar", "r.tar"]
    paths = serve_big(root, lade_cli, tmp_path, "big", names)
    for p in paths:
        assert bind_ranges(p) == (1, 6), p
    urls = ["%s/big/%s" % (env.url, nm) for nm in names]
    env.clear_log()
    capfd.readouterr()
    st = check_same("%s/big/{p,q,r}.tar" % env.url, urls, paths, coalesce_gap_bytes=0)
    heads, whole, sides, ranges = log_counts(env.access_log(), 3)
    assert (heads, whole, sides) == (3, 0, 3) and st["sidecar_rejected"] == 0
    assert ranges == st["get_requests"] + 3 * (1 + 6)
    assert st["list_requests"] == heads + 1 + sides + 3 * (1 + 6)
    assert "sidecar" not in capfd.readouterr().err
    want = {}
    for p in paths:
        want.update({len(want) + k: data for k, (_, _, data) in enumerate(reference(p))})
    got = {}
    with lade.Loader("%s/big/{p,q,r}.tar" % env.url, transform="raw", batch_size=7, epochs=1, shuffle=True,
                     seed=5, threads=4, output="numpy", meta=True, raw_size=4096) as L:
        for d, _, b in L.stream():
            for row, i in zip(d, b.indices.tolist()):
                got[i] = bytes(row)
    assert sorted(got) == sorted(want)
    for i, data in want.items():
        assert got[i][:len(data)] == data and not got[i][len(data):].strip(b"\0")


def test_http_sidecar_middle_header_differs(nginx, lade_cli, tmp_path, capfd):
    """A shard rewritten after its sidecar with the same size, the same first and last members and end,
    and one middle sampled member 512 bytes longer (a later one 512 shorter: the members between moved):
    open accepts the sidecar, the first read of that shard fails naming shard, member and sidecar and
    saying what to do, and none of its samples (whose offsets moved) is ever delivered; the shards before
    it are read whole and right."""
    env, root = nginx
    names = ["g.tar", "m.tar", "h.tar"]
    paths = serve_big(root, lade_cli, tmp_path, "mid", names, {"m.tar": {11: 512, 13: -512}})
    urls = ["%s/mid/%s" % (env.url, nm) for nm in names]
    ref0 = reference(paths[0])
    env.clear_log()
    capfd.readouterr()
    got = {}
    with pytest.raises(lade.Error) as e:
        with lade.Loader("%s/mid/{g,m,h}.tar" % env.url, transform="raw", batch_size=5, epochs=1, shuffle=False,
                         threads=2, output="numpy", meta=True, raw_size=4096) as L:
            assert L.stats()["sidecar_rejected"] == 0  # open found nothing wrong
            for d, _, b in L.stream():
                for row, i in zip(d, b.indices.tolist()):
                    got[i] = bytes(row)
    msg = str(e.value)
    assert urls[1] + ": member 'm_0" in msg, msg
    for w in (urls[1] + ".ladeidx is not the shard's", "sampled member headers differ", "lade index",
              "delete the sidecar"):
        assert w in msg, msg
    assert sorted(got) == list(range(len(ref0)))  # only the first shard's samples, each right
    for i, (_, _, data) in enumerate(ref0):
        assert got[i][:len(data)] == data and not got[i][len(data):].strip(b"\0")
    log = env.access_log()
    assert not [r for r in log if r[0] == "GET" and r[1].endswith(".tar") and r[4] == "-"]  # none read whole
    # a fresh open with on_error=skip: every sample of that shard fails and is replaced; each row delivered
    # is one of the two other shards' samples
    good = {data + bytes(4096 - len(data)) for p in (paths[0], paths[2]) for _, _, data in reference(p)}
    with lade.Loader("%s/mid/{g,m,h}.tar" % env.url, transform="raw", batch_size=5, epochs=1, shuffle=False,
                     threads=2, output="numpy", raw_size=4096, on_error="skip", skip_max_run=1000,
                     skip_max_fraction=1) as L:
        rows = [bytes(row) for d, _ in L.stream() for row in d]
        st = L.stats()
    assert len(rows) == 120 and all(r in good for r in rows)
    assert st["substituted"] >= 40 and st["sidecar_rejected"] == 0


NODE_RANK = r"""
import hashlib, json, sys
import lade
src, cache, rank, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kw = {"source_type": sys.argv[5]} if len(sys.argv) > 5 else {}
out = {}
with lade.Loader(src, transform="raw", raw_size=4096, batch_size=7, epochs=1, shuffle=False, threads=2,
                 output="numpy", meta=True, index_dir=cache, job_id="node-test", rank=rank, world_size=world,
                 raw_overflow="cut", **kw) as L:
    for d, _, b in L.stream():
        for row, i in zip(d, b.indices.tolist()):
            out[i] = hashlib.sha1(bytes(row)).hexdigest()
    st = L.stats()
print(json.dumps({"rows": out, "list_requests": st["list_requests"], "rejected": st["sidecar_rejected"]}))
"""


def node_ranks(src, cache, nodes, n=4, env=None, source_type=None):
    """n ranks of one job sharing index_dir (one job_id), started together: with nodes, n one-rank nodes
    (LOCAL_WORLD_SIZE=1, ranks 0..n-1 of a world of n, each reading its part); else n ranks of one node
    (LOCAL_WORLD_SIZE=n), each reading src whole. Their JSON results."""
    pp = os.path.dirname(os.path.dirname(os.path.abspath(lade.__file__)))
    procs = [subprocess.Popen([sys.executable, "-c", NODE_RANK, src, cache, str(k if nodes else 0),
                               str(n if nodes else 1)] + ([source_type] if source_type else []),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=pp, LOCAL_RANK="0" if nodes else str(k),
                                       LOCAL_WORLD_SIZE="1" if nodes else str(n), **(env or {})))
             for k in range(n)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, (out + err)[-3000:]
    return [json.loads(out.splitlines()[-1]) for out, _ in outs]


@pytest.mark.parametrize("nodes", [False, True])
def test_http_open_once_per_node(nginx, lade_cli, tmp_path, nodes):
    """Four ranks of a node and job open the same remote shards together: the open's requests (each shard's
    first bytes standing for its HEAD, its sidecar, its binding Ranges at open) are one rank's; the others wait
    for its lock and take the listing and the stored indexes (a sidecar's pending index too, whose sampled
    headers each then checks before its first read). Without sidecars each shard is streamed once per node,
    not once per rank. Every rank reads every sample right. The same for four one-rank nodes of a job whose
    index_dir is a folder they share (a shared file system), each reading its part."""
    env, root = nginx
    names = ["u.tar", "v.tar", "w.tar"]
    sub0 = "node%d" % nodes
    paths = serve_big(root, lade_cli, tmp_path, sub0, names)
    bare = os.path.join(root, sub0 + "bare")
    os.mkdir(bare)
    for p in paths:
        shutil.copyfile(p, os.path.join(bare, os.path.basename(p)))
    want = {}
    for p in paths:
        want.update({len(want) + k: hashlib.sha1(data + bytes(4096 - len(data))).hexdigest()
                     for k, (_, _, data) in enumerate(reference(p))})
    for sub, sidecars in ((sub0, True), (sub0 + "bare", False)):
        env.clear_log()
        runs = node_ranks("%s/%s/{u,v,w}.tar" % (env.url, sub), str(tmp_path / ("cache-" + sub)), nodes)
        got = {}
        for r in runs:
            rows = {int(k): v for k, v in r["rows"].items()}
            assert r["rejected"] == 0
            if nodes:  # one-rank nodes: each sample read by one rank, all of them by the job
                assert not set(rows) & set(got)
                got.update(rows)
            else:
                assert rows == want
        assert not nodes or got == want
        log = env.access_log()
        heads, whole, sides, _ = log_counts(log, 3)
        probes = [x for x in log if x[0] == "HEAD" and x[1].endswith(".ladeidx")]
        assert (heads, whole, sides, len(probes)) == ((3, 0, 3, 1) if sidecars else (3, 3, 0, 1)), log
        # the three ranks that took the listing sent no request at open: their list_requests are the rest of
        # a pending binding at first reads (3 shards, all 8 sampled headers each, at most 8 Ranges) or nothing
        took = sorted(r["list_requests"] for r in runs)[:3]
        assert max(took) <= (3 * 8 if sidecars else 0), took


def hooked_node_run(nginx, lade_cli, tmp_path, sub, hook):
    """Four ranks of a node and job over three big shards with sidecars under SUB, with
    LADE_TEST_HOOK_PENDING_RENAMED=hook; every rank's rows checked. (the server's log, the ranks' list_requests
    sorted)"""
    env, root = nginx
    paths = serve_big(root, lade_cli, tmp_path, sub, ["u.tar", "v.tar", "w.tar"])
    want = {}
    for p in paths:
        want.update({len(want) + k: hashlib.sha1(data + bytes(4096 - len(data))).hexdigest()
                     for k, (_, _, data) in enumerate(reference(p))})
    env.clear_log()
    runs = node_ranks("%s/%s/{u,v,w}.tar" % (env.url, sub), str(tmp_path / ("cache-" + sub)), False,
                      env={"LADE_TEST_HOOK_PENDING_RENAMED": hook})
    for r in runs:
        assert r["rejected"] == 0 and {int(k): v for k, v in r["rows"].items()} == want
    return env.access_log(), sorted(r["list_requests"] for r in runs)


def test_http_node_index_renamed_meanwhile(nginx, lade_cli, tmp_path):
    """A rank taking the node's listing looks for a shard's index under its final name, then its pending one;
    the rank that made them renames the pending one when its first read finds the shard whole, which can fall
    between the two looks (the hook makes it fall there in every taking rank). The index is then taken under
    its final name, with no request: the open's requests stay one rank's (a HEAD each before)."""
    log, reqs = hooked_node_run(nginx, lade_cli, tmp_path, "renamed", "1")
    assert log_counts(log, 3)[:3] == (3, 0, 3), log
    assert reqs[:3] == [0, 0, 0], reqs


def test_http_node_pending_found_whole_by_the_lister(nginx, lade_cli, tmp_path):
    """A rank that took a shard's index under its pending name from the node's listing checks the rest of its
    binding before its first read of the shard, unless the rank that made the listing found the shard whole
    meanwhile (it renames the index to its final name, at the listing's version): then it binds the shard
    with no request of its own. The hook makes that rename fall just before each taking rank's first read of
    each shard: the taking ranks send no request at all, and every rank reads every sample right."""
    log, reqs = hooked_node_run(nginx, lade_cli, tmp_path, "later", "later")
    assert log_counts(log, 3)[:3] == (3, 0, 3), log
    assert reqs[:3] == [0, 0, 0] and reqs[3] > 0, reqs  # the lister checks its shards; the others send nothing


def test_index_to_dir_of_remote_shards(shards, nginx, lade_cli, tmp_path):
    """`lade index --to DIR URL...` over shards served without sidecars: one HEAD and one streamed GET per
    shard, and each sidecar is byte for byte the one `lade index --to` writes for a local copy (and, for shards
    indexed by `lade index`, the one beside them). Copied beside the shards, a remote open uses them; a shard
    that is not a whole tar fails naming its URL, and writes nothing."""
    env, root = nginx
    local = shards["packed"] + shards["other"]
    bare = os.path.join(root, "toindex")
    os.mkdir(bare)
    names = ["%d.tar" % k for k in range(len(local))]
    for nm, p in zip(names, local):
        shutil.copyfile(p, os.path.join(bare, nm))
    here = tmp_path / "here"
    run_cli(lade_cli, "index", "--to", here, *[os.path.join(bare, nm) for nm in names])
    env.clear_log()
    out = tmp_path / "remote"
    urls = ["%s/toindex/%s" % (env.url, nm) for nm in names]
    r = run_cli(lade_cli, "index", "--to", out, *urls)
    assert r.stdout.split() == [str(out / (nm + ".ladeidx")) for nm in names]
    log = env.access_log()
    assert sorted((m, path, rng) for m, path, _, _, rng in log) == sorted(
        [("HEAD", "/toindex/" + nm, "-") for nm in names] + [("GET", "/toindex/" + nm, "-") for nm in names]), log
    for nm, p in zip(names, local):
        got = open(str(out / (nm + ".ladeidx")), "rb").read()
        assert got == open(str(here / (nm + ".ladeidx")), "rb").read(), nm
        if p in shards["other"]:
            assert got == open(p + ".ladeidx", "rb").read(), nm
        shutil.copyfile(str(out / (nm + ".ladeidx")), os.path.join(bare, nm + ".ladeidx"))
    env.clear_log()
    st = check_same("%s/toindex/{%s}.tar" % (env.url, ",".join(str(k) for k in range(len(local)))), urls, local)
    assert st["sidecar_rejected"] == 0
    assert log_counts(env.access_log(), len(local))[1:3] == (0, len(local))  # no shard read whole; every sidecar
    # one shard at a time, and a shard named twice (two threads writing one file), give the same files
    one = tmp_path / "one"
    run_cli(lade_cli, "index", "--to", one, "--jobs", "1", *urls)
    run_cli(lade_cli, "index", "--to", one, urls[0], urls[0], urls[0])
    for nm in names:
        assert open(str(one / (nm + ".ladeidx")), "rb").read() == open(str(here / (nm + ".ladeidx")), "rb").read()
    assert sorted(os.listdir(str(one))) == sorted(nm + ".ladeidx" for nm in names)  # no temp file left
    r = subprocess.run([lade_cli, "index", "--jobs", "0", urls[0]], stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "--jobs takes a whole number from 1 to 256" in r.stderr
    with open(os.path.join(bare, "cut.tar"), "wb") as f:
        f.write(open(local[-1], "rb").read()[:3000])
    url = env.url + "/toindex/cut.tar"
    r = subprocess.run([lade_cli, "index", "--to", out, url], stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and url in r.stderr and "past the end of the file" in r.stderr, r.stderr
    assert not os.path.exists(str(out / "cut.tar.ladeidx"))


@pytest.mark.parametrize("feature", ["", "image"])
def test_index_to_dir_of_remote_tfrecord(nginx, lade_cli, tmp_path, feature):
    """TFRecord files over http: the sidecar of `lade index --to DIR URL` equals a local copy's, records read
    raw or with a feature decoded (then the walk reads each record's data and CRC in one read, whose tail is
    kept for bind()), one GET each; with nothing kept (a test hook), bind() takes a second stream of each
    file and the sidecars are the same; a gzip'd file is refused, as a remote open refuses it."""
    from test_tfrecord import dlio_records, write_tfrecord
    env, root = nginx
    d = os.path.join(root, "tfr-" + (feature or "raw"))
    os.mkdir(d)
    sets = ["--set", "tfrecord_feature=" + feature] if feature else []
    names = []
    for k, n in enumerate((30, 1, 12)):
        _, _, recs = dlio_records(n, k, max_size=9000)
        names.append("f%d.tfrecord" % k)
        write_tfrecord(os.path.join(d, names[-1]), recs)
    here, out = tmp_path / "here", tmp_path / "remote"
    run_cli(lade_cli, "index", "--to", here, *sets, *[os.path.join(d, nm) for nm in names])
    env.clear_log()
    run_cli(lade_cli, "index", "--to", out, *sets, *["%s/%s/%s" % (env.url, os.path.basename(d), nm) for nm in names])
    for nm in names:
        assert open(str(out / (nm + ".ladeidx")), "rb").read() == open(str(here / (nm + ".ladeidx")), "rb").read()
    gets = [r for r in env.access_log() if r[0] == "GET"]
    assert len(gets) == len(names), gets
    env.clear_log()
    again = tmp_path / "again"
    r = subprocess.run([lade_cli, "index", "--to", again] + sets + ["%s/%s/%s" % (env.url, os.path.basename(d), nm)
                                                                    for nm in names],
                       stderr=subprocess.PIPE, text=True, env=dict(os.environ, LADE_TEST_HOOK_TEE_KEEP_NONE="1"))
    assert r.returncode == 0, r.stderr
    for nm in names:
        assert open(str(again / (nm + ".ladeidx")), "rb").read() == open(str(here / (nm + ".ladeidx")), "rb").read()
    assert len([r for r in env.access_log() if r[0] == "GET"]) == 2 * len(names)
    with open(os.path.join(d, names[0]), "rb") as f, gzip.open(os.path.join(d, "z.tfrecord.gz"), "wb") as g:
        g.write(f.read())
    r = subprocess.run([lade_cli, "index", "--to", out, "%s/%s/z.tfrecord.gz" % (env.url, os.path.basename(d))],
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and "gzip-compressed TFRecord: not read remotely" in r.stderr, r.stderr


def test_index_to_dir_of_s3_shards(shards, lade_cli, tmp_path):
    """The same for s3:// shards (signed requests, the endpoint from AWS_ENDPOINT_URL): each sidecar equals a
    local copy's."""
    why = s3env.missing()
    if why:
        pytest.skip(why)
    local = shards["packed"] + shards["other"]
    here = tmp_path / "here"
    run_cli(lade_cli, "index", "--to", here, *local)
    with s3env.S3Env() as env:
        keys = ["toindex/%d.tar" % k for k in range(len(local))]
        for k, p in zip(keys, local):
            env.put(k, open(p, "rb").read())
        env.reset()
        out = tmp_path / "remote"
        r = subprocess.run([lade_cli, "index", "--to", out] + ["s3://%s/%s" % (env.bucket, k) for k in keys],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env.lade_env()))
        assert r.returncode == 0, r.stderr
        c = env.counts()
        assert (c["sig_failures"], c.get("head", 0), c["get"]) == (0, len(keys), len(keys)), c
    for k, p in zip(keys, local):
        name = os.path.basename(k) + ".ladeidx"
        assert open(str(out / name), "rb").read() == open(str(here / (os.path.basename(p) + ".ladeidx")), "rb").read()


def test_http_empty_shard_among_sidecars(nginx, lade_cli, tmp_path):
    """An empty shard among shards with sidecars: the Range of its first bytes that stands for its HEAD is
    answered whole (nginx answers 200 to a Range on an empty file), its size 0 taken from it; it adds no
    sample, and the others' are tarfile's."""
    env, root = nginx
    d = os.path.join(root, "withempty")
    os.mkdir(d)
    local = tmp_path / "withempty"
    local.mkdir()
    paths = [write_tar(str(local / nm), members_of(nm[0], 6, k)) for k, nm in enumerate(["a.tar", "b.tar"])]
    run_cli(lade_cli, "index", *paths)
    for p in paths:
        for f in (p, p + ".ladeidx"):
            shutil.copyfile(f, os.path.join(d, os.path.basename(f)))
    open(os.path.join(d, "c.tar"), "wb").close()
    env.clear_log()
    with lade.Loader("%s/withempty/{a,b,c}.tar" % env.url, transform="raw", raw_size=4096, batch_size=4, epochs=1,
                     shuffle=False, output="numpy", meta=True) as L:
        rows = [bytes(r) for d_, _, b in L.stream() for r in d_]
    want = [data + bytes(4096 - len(data)) for p in paths for _, _, data in reference(p)]
    assert rows == want
    assert [(r[2], r[4]) for r in env.access_log() if r[1].endswith("/c.tar")] == [(200, FIRST_RANGE)]


class OneRank:
    """Two shards a.tar, b.tar served under root/SUB (no sidecars), opened by one process that is a rank of a
    node of 4 (LOCAL_WORLD_SIZE=4, one job_id) with its own index_dir: run() opens them and reads them whole."""

    def __init__(self, env, root, tmp_path, sub):
        self.served = os.path.join(root, sub)
        os.mkdir(self.served)
        local = tmp_path / sub
        local.mkdir()
        self.paths = [write_tar(str(local / nm), members_of(nm[0], 12, k)) for k, nm in enumerate(["a.tar", "b.tar"])]
        for p in self.paths:
            shutil.copyfile(p, os.path.join(self.served, os.path.basename(p)))
        self.src, self.idx = "%s/%s/{a,b}.tar" % (env.url, sub), str(tmp_path / "idx")

    def want(self):
        rows = [data + bytes(4096 - len(data)) for p in self.paths for _, _, data in reference(p)]
        return {i: hashlib.sha1(r).hexdigest() for i, r in enumerate(rows)}

    def run(self, ok=True):
        """The process's stderr when it fails (ok False), else its list_requests, its rows checked."""
        pp = os.path.dirname(os.path.dirname(os.path.abspath(lade.__file__)))
        r = subprocess.run([sys.executable, "-c", NODE_RANK, self.src, self.idx, "0", "1"], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=pp, LOCAL_RANK="0", LOCAL_WORLD_SIZE="4"),
                           timeout=300)
        if not ok:
            assert r.returncode != 0, r.stdout[-2000:]
            return r.stderr
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout.splitlines()[-1])
        assert {int(k): v for k, v in out["rows"].items()} == self.want()
        return out["list_requests"]

    def listings(self):
        return glob.glob(os.path.join(self.idx, "*-shards-*.lst"))


def test_http_node_listing_stale(nginx, tmp_path):
    """A node's listing names each shard's version: a shard rewritten after it (another size, other bytes)
    fails the next open of the same job loudly (its Range requests are pinned to the old version), which
    removes the listing; the open after that lists again and reads the new bytes."""
    env, root = nginx
    o = OneRank(env, root, tmp_path, "stale")
    o.run()
    assert len(o.listings()) == 1
    size = os.path.getsize(o.paths[1])
    write_tar(o.paths[1], members_of("b", 60, 9))  # rewritten: another size, other bytes
    assert os.path.getsize(o.paths[1]) != size
    b = os.path.join(o.served, "b.tar")
    shutil.copyfile(o.paths[1], b)
    os.utime(b, (time.time() + 5, time.time() + 5))  # another ETag (nginx's: mtime and size)
    err = o.run(ok=False)
    assert "%s/stale/b.tar" % env.url in err and "changed since it was indexed" in err, err[-2000:]
    assert o.listings() == []
    o.run()


def test_http_node_listing_damaged(nginx, tmp_path):
    """A node's listing file cut short, with a byte flipped, or emptied is not used: the open lists and indexes
    the shards again (its requests counted), stores a whole listing, and the bytes are right each time."""
    env, root = nginx
    o = OneRank(env, root, tmp_path, "damaged")
    assert o.run() == 5  # the sidecar probe (404), the two shards' HEADs and their index passes
    assert o.run() == 0  # the listing and the stored indexes
    lst = o.listings()
    assert len(lst) == 1
    whole = open(lst[0], "rb").read()
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0x40
    for damaged in (whole[:len(whole) // 2], bytes(flipped), b""):
        open(lst[0], "wb").write(damaged)
        assert o.run() == 2, damaged[:16]  # not used: the HEADs again (the stored indexes still serve)
        assert open(lst[0], "rb").read() == whole  # made whole again
        assert o.run() == 0


def test_http_tfrecord_sidecar(nginx, lade_cli, tmp_path):
    env, root = nginx
    d = os.path.join(root, "tfr")
    local = str(tmp_path / "tfr")
    rng = random.Random(5)
    # records of 4 KB: files past 64 KiB, bound in two steps (the first and last records' framing at open)
    tfrecord_files.write_dlio(local, 2, 20, lambda f, i: rng.randbytes(5000 + i))
    files = sorted(glob.glob(os.path.join(local, "img_*.tfrecord")))
    run_cli(lade_cli, "index", *files)
    os.mkdir(d)
    for f in files:
        for x in (f, f + ".ladeidx"):
            shutil.copyfile(x, os.path.join(d, os.path.basename(x)))
    want, _, _ = load(local + "/img_{0..1}_of_2.tfrecord", source_type="tfrecord")
    env.clear_log()
    got, _, st = load(env.url + "/tfr/img_{0..1}_of_2.tfrecord", source_type="tfrecord")
    assert got == want and st["sidecar_rejected"] == 0
    log = env.access_log()
    assert not [r for r in log if r[0] == "GET" and r[1].endswith(".tfrecord") and r[4] == "-"]
    assert len([r for r in log if r[0] == "GET" and r[1].endswith(".ladeidx")]) == 2
    assert [r[0] for r in log if r[0] == "HEAD" and r[1].endswith(".ladeidx")] == ["HEAD"]  # the probe


# ---------------------------------------------------------------- s3:// (s3rver behind the proxy)

def s3_put_shards(env, prefix, local):
    """Puts the shards `local` and their sidecars as PREFIX/K.tar (+ .ladeidx): their keys."""
    keys = ["%s/%d.tar" % (prefix, k) for k in range(len(local))]
    for k, p in zip(keys, local):
        env.put(k, open(p, "rb").read())
        env.put(k + ".ladeidx", open(p + ".ladeidx", "rb").read())
    return keys


def test_s3_sidecar_used_and_rejected(shards, capfd):
    why = s3env.missing()
    if why:
        pytest.skip(why)
    local = shards["packed"] + shards["other"]
    with s3env.S3Env() as env:
        keys = s3_put_shards(env, "side", local)
        names = ["s3://%s/%s" % (env.bucket, k) for k in keys]
        n = len(keys)
        env.reset()
        capfd.readouterr()
        st = check_same("s3://%s/side" % env.bucket, names, local, source_type="tar", coalesce_gap_bytes=0,
                        **env.lade_settings())
        c = env.counts()
        # one HEAD, the probe of the first sidecar; each shard's stands in a Range of its first bytes
        assert c["sig_failures"] == 0 and c["head"] == 1 and st["sidecar_rejected"] == 0
        assert [c["by_key"].get("/%s/%s.ladeidx" % (env.bucket, k), 0) for k in keys] == [1] * n
        # every GET is a shard's first bytes, a sidecar, a binding Range or a sample's Range: none read whole
        bind = bind_total(local)
        assert c["get"] == n + n + bind + st["get_requests"]
        # the LIST, the probe (HEAD of the first sidecar), first bytes, sidecars, binding Ranges
        assert st["list_requests"] == 1 + (n > 1) + n + n + bind
        # another shard's sidecar: ignored, counted, said; the bytes are still the shard's
        env.put(keys[1] + ".ladeidx", open(local[0] + ".ladeidx", "rb").read())
        env.reset()
        st = check_same("s3://%s/side" % env.bucket, names, local, source_type="tar", coalesce_gap_bytes=0,
                        **env.lade_settings())
        assert st["sidecar_rejected"] == 1
        err = capfd.readouterr().err
        assert re.search(r"%s\.ladeidx: sidecar index not used for %s: (made for a shard of another size|its "
                         r"sampled member headers differ)" % (re.escape(names[1]), re.escape(names[1])), err), err
        # shard 1 read whole once; its binding Ranges at open (those of shard 0's index) sent only when the
        # sizes agree, none at its first read
        same = os.path.getsize(local[0]) == os.path.getsize(local[1])
        opened = bind_ranges(local[0], os.path.getsize(local[1]))[0] if same else 0
        assert env.counts()["get"] == n + n + bind - sum(bind_ranges(local[1])) + opened + 1 + st["get_requests"]


def test_s3_open_once_per_node(shards, tmp_path):
    """Four ranks of a node and job over s3:// shards with sidecars: the server sees one rank's open (one LIST
    of the prefix, one HEAD probing for sidecars, each shard's first bytes and sidecar once)."""
    why = s3env.missing()
    if why:
        pytest.skip(why)
    local = shards["packed"] + shards["other"]
    with s3env.S3Env() as env:
        keys = s3_put_shards(env, "node", local)
        env.reset()
        runs = node_ranks("s3://%s/node" % env.bucket, str(tmp_path / "idx"), False, env=env.lade_env(),
                          source_type="tar")
        want = None
        for r in runs:
            rows = {int(k): v for k, v in r["rows"].items()}
            assert r["rejected"] == 0 and rows and (want is None or rows == want)
            want = rows
        c = env.counts()
        n = len(keys)
        assert (c["sig_failures"], c["list"], c["head"]) == (0, 1, 1), c
        sides = [c["by_key"].get("/%s/%s.ladeidx" % (env.bucket, k), 0) for k in keys]
        assert sides == [1] * n, sides  # each sidecar's GET once for the node (by_key counts GETs)
        assert sorted(r["list_requests"] for r in runs)[0] == 0


def test_s3_list_file_of_shards(shards):
    """An s3:// list file naming shards (relative to its folder) is fetched and its shards read, with their
    sidecars."""
    why = s3env.missing()
    if why:
        pytest.skip(why)
    local = shards["packed"]
    with s3env.S3Env() as env:
        keys = s3_put_shards(env, "lists", local)
        env.put("lists/shards.txt", "".join("%s\n" % k.split("/", 1)[1] for k in keys).encode())
        st = check_same("s3://%s/lists/shards.txt" % env.bucket, ["s3://%s/%s" % (env.bucket, k) for k in keys],
                        local, source_type="tar", **env.lade_settings())
        assert st["sidecar_rejected"] == 0
