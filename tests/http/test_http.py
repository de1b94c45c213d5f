#!/usr/bin/env python3
"""test_http.py - lade's tar source on http:// shards served by a real nginx (tests/http/httpenv.py),
with tests/s3/faultproxy.js in front for latency and faults (docs/sources.md, remote tar shards), and by a
misbehaving Python server (MisbehavingServer: Range replies that are not the bytes indexed, docs/http.md,
Integrity).

Run: S3_CHECK=build/tests/s3_check /usr/bin/python3 tests/http/test_http.py [-v] [TestHttpTar.test_name]
Exit status 77 (skipped) when nginx is missing; the tests that need the fault proxy skip without node, the
https:// ones (TestHttpsTar: nginx also serves HTTPS with a throwaway CA) without openssl or nginx's ssl module.
"""
import atexit
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import httpenv  # noqa: E402
import s3env  # noqa: E402  (tests/s3, put on the path by httpenv)
import tfrecord_files  # noqa: E402

S3_CHECK = os.environ.get("S3_CHECK") or os.path.join(HERE, "..", "..", "build", "tests", "s3_check")
SHARDS = 4
LOCAL_INDEX_DIR = tempfile.mkdtemp(prefix="lade-http-local-index-")
atexit.register(shutil.rmtree, LOCAL_INDEX_DIR, True)
PER_SHARD = 30
MAX_SIZE = 6000


def member_bytes(shard, i):
    r = random.Random(shard * 1000 + i)
    return r.randbytes(r.randint(200, MAX_SIZE))


def write_shard(path, shard, n=PER_SHARD, flip=False):
    """WebDataset samples: KEY.bin (the sample's bytes; inverted with flip: other bytes, the same
    sizes) and KEY.cls (its label), by tarfile."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            key = "c%d/s%d_%03d" % (i % 3, shard, i)
            data = member_bytes(shard, i)
            if flip:
                data = bytes(b ^ 0xFF for b in data)
            for ext, data in (("bin", data), ("cls", b"%d" % (i % 3))):
                ti = tarfile.TarInfo(key + "." + ext)
                ti.size = len(data)
                ti.mtime = 1700000000
                t.addfile(ti, io.BytesIO(data))


def samples(lines):
    return [ln for ln in lines if ln.startswith("S ")]


def run_loader(tc, source, shuffle=False, expect_ok=True, env=None, timeout=300, **settings):
    """s3_check's loader on `source`: its lines, checked by the TestCase tc (no sanitizer report; OK, or an
    ERROR line when expect_ok is false)."""
    r = subprocess.run(loader_args(source, shuffle, settings), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, env=env)
    out = r.stdout + r.stderr
    tc.assertNotIn("Sanitizer", out)
    lines = r.stdout.splitlines()
    if expect_ok:
        tc.assertEqual(r.returncode, 0, out[-3000:])
        tc.assertEqual(lines[-1], "OK")
    else:
        tc.assertNotEqual(r.returncode, 0, out[-3000:])
        tc.assertTrue(lines and lines[-1].startswith("ERROR "), out[-3000:])
    return lines


def lstats(lines):
    """The loader's last LSTATS line as a dict of ints."""
    ln = [x for x in lines if x.startswith("LSTATS ")][-1]
    return {k: int(v) for k, v in (p.split("=") for p in ln.split()[1:])}


def loader_args(source, shuffle, settings):
    """s3_check's command line: every sample of every batch as an "S" line, then LSTATS and OK/ERROR."""
    s = dict(transform="raw", raw_size=MAX_SIZE, batch_size=8, threads=2, shuffle=shuffle, epochs=1,
             http_retry_base_ms=5)
    s.update(settings)
    if "://" not in source and "index_dir" not in s and "cache_dir" not in s:
        # the local reference runs keep their indexes away from the served shards: a SHARD.tar.ladeidx
        # beside them would be a sidecar the remote runs use (tests/python/test_sidecar.py tests those)
        s["index_dir"] = LOCAL_INDEX_DIR
    return [S3_CHECK, "loader", "source=" + source] + \
           ["%s=%s" % (k, str(v).lower() if isinstance(v, bool) else v) for k, v in s.items()]


class TestHttpTar(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lade-http-test-")
        os.chmod(cls.tmp, 0o755)  # nginx's worker runs as another user when started by root
        cls.www = os.path.join(cls.tmp, "www")
        os.mkdir(cls.www)
        for s in range(SHARDS):
            write_shard(os.path.join(cls.www, "train-%06d.tar" % s), s)
        cls.env = httpenv.NginxEnv(cls.www).__enter__()
        cls.pattern = "train-{000000..%06d}.tar" % (SHARDS - 1)

    @classmethod
    def tearDownClass(cls):
        cls.env.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.env.clear_log()

    # ---- helpers
    def run_check(self, source, expect_ok=True, timeout=300, **settings):
        return run_loader(self, source, expect_ok=expect_ok, timeout=timeout, **settings)

    def remote(self, name=None):
        return self.env.url + "/" + (name or self.pattern)

    def local(self):
        return self.www

    def range_gets(self):
        return [e for e in self.env.access_log() if e[0] == "GET" and e[4] != "-"]

    # ---- tests
    def test_batches_equal_local(self):
        """The same batches (index, label, size, crc32, in order) as the same shards read locally."""
        for bs, shuffle, threads in ((1, False, 1), (7, True, 2), (32, True, 3), (16, False, 2)):
            want = samples(self.run_check(self.local(), batch_size=bs, shuffle=shuffle, threads=threads, epochs=2))
            got = samples(self.run_check(self.remote(), batch_size=bs, shuffle=shuffle, threads=threads, epochs=2))
            self.assertGreaterEqual(len(want), 2 * (SHARDS * PER_SHARD - bs))  # drop_last may drop a tail
            self.assertEqual(got, want, "batch_size=%d shuffle=%s" % (bs, shuffle))

    def test_two_ranks_cover_everything_once(self):
        seen = []
        for rank in (0, 1):
            kw = dict(batch_size=12, shuffle=True, world_size=2, rank=rank, drop_last=True)
            want = samples(self.run_check(self.local(), **kw))
            got = samples(self.run_check(self.remote(), **kw))
            self.assertEqual(got, want, "rank %d" % rank)
            seen += [int(ln.split()[3]) for ln in got]
        self.assertEqual(sorted(seen), list(range(SHARDS * PER_SHARD)))

    def test_list_file_and_single_url(self):
        with open(os.path.join(self.www, "shards.txt"), "w") as f:  # relative names: beside the list's URL
            f.write("# the shards\n" + "".join("train-%06d.tar\n" % s for s in range(SHARDS)))
        local_list = os.path.join(self.tmp, "urls.txt")
        with open(local_list, "w") as f:  # a local list of URLs
            f.write("".join(self.remote("train-%06d.tar" % s) + "\n" for s in range(SHARDS)))
        want = samples(self.run_check(self.local(), batch_size=10))
        self.assertEqual(samples(self.run_check(self.remote("shards.txt"), batch_size=10)), want)
        self.assertEqual(samples(self.run_check(local_list, batch_size=10)), want)
        one = samples(self.run_check(self.remote("train-000002.tar"), batch_size=10))
        self.assertEqual(len(one), PER_SHARD)
        self.assertEqual([ln.split()[4:] for ln in one], [ln.split()[4:] for ln in want[2 * PER_SHARD:3 * PER_SHARD]])

    def test_coalescing_reduces_requests(self):
        """Neighbours of one shard in one batch: one Range request; counted by lade and by nginx."""
        n = SHARDS * PER_SHARD
        cold = self.run_check(self.remote(), batch_size=15, coalesce_gap_bytes=0)
        st0 = lstats(cold)
        log0 = self.range_gets()
        self.assertEqual(st0["get_requests"], n)  # one request per sample
        self.assertEqual(len(log0), n)
        self.assertTrue(all(e[2] == 206 for e in log0), log0[:3])
        self.env.clear_log()
        warm = self.run_check(self.remote(), batch_size=15)
        st1 = lstats(warm)
        log1 = self.range_gets()
        self.assertEqual(samples(warm), samples(cold))
        self.assertEqual(st1["get_requests"], len(log1))  # nginx saw what lade counted
        # a batch of 15 consecutive samples spans at most 2 shards: at most 2 requests per batch
        self.assertLessEqual(st1["get_requests"], 2 * (n // 15))
        self.assertLess(st1["get_requests"], st0["get_requests"] // 4)
        # a request carries at most max_sample_bytes (here 20000): more requests, the same batches
        self.env.clear_log()
        capped = self.run_check(self.remote(), batch_size=15, max_sample_bytes=20000)
        log2 = self.range_gets()
        self.assertEqual(samples(capped), samples(cold))
        self.assertTrue(all(e[3] <= 20000 for e in log2), max(e[3] for e in log2))
        self.assertGreater(len(log2), st1["get_requests"])
        self.assertLess(len(log2), n)
        # shuffled batches coalesce too, less: still fewer requests than samples
        sh = lstats(self.run_check(self.remote(), batch_size=40, shuffle=True, coalesce_gap_bytes=1 << 20))
        self.assertLess(sh["get_requests"], n)

    def test_one_request_with_repeated_and_neighbouring_samples(self):
        """One submit of neighbours, with samples repeated (a sample twice in a batch, as padding makes it): one
        coalesced Range request per shard, each want answered with the sample's own bytes."""
        idx = [3, 4, 4, 5, 7, 3, 29, 30, 31, 31, 31]  # 29 in shard 0, 30 and 31 in shard 1
        r = subprocess.run([S3_CHECK, "source", "source=" + self.remote(), "transform=raw",
                            "coalesce_gap_bytes=1048576"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120, env=dict(os.environ, S3_CHECK_IDX=",".join(map(str, idx))))
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-2000:])
        lines = r.stdout.splitlines()
        got = [ln.split()[1:] for ln in lines if ln.startswith("G ")][:len(idx)]
        want = []
        for i in idx:
            data = member_bytes(i // PER_SHARD, i % PER_SHARD)
            want.append([str(i), str(len(data)), "%08x" % zlib.crc32(data)])
        self.assertEqual(got, want)
        arrived = [ln for ln in lines if ln.startswith("ARRIVED ")][0]
        self.assertIn("get_requests=2 ", arrived)  # one per shard
        self.assertIn("new_requests=0", [ln for ln in lines if ln.startswith("READ ")][0])

    def test_index_cached_and_rebuilt_when_the_shard_changes(self):
        cache = os.path.join(self.tmp, "cache-index")
        shutil.rmtree(cache, ignore_errors=True)
        first = self.run_check(self.remote(), cache_dir=cache)
        whole = [e for e in self.env.access_log() if e[0] == "GET" and e[4] == "-" and not e[1].endswith(".ladeidx")]
        self.assertEqual(sorted(e[1] for e in whole), ["/train-%06d.tar" % s for s in range(SHARDS)])
        self.assertEqual(len([f for f in os.listdir(cache) if f.startswith("tarindex-")]), SHARDS)
        self.env.clear_log()
        second = self.run_check(self.remote(), cache_dir=cache)
        self.assertEqual(samples(second), samples(first))
        self.assertEqual([e for e in self.env.access_log() if e[0] == "GET" and e[4] == "-"], [])  # no index pass
        self.assertEqual(len([e for e in self.env.access_log() if e[0] == "HEAD"]), SHARDS)
        # shard 1 rewritten with other members: its ETag changes, its index is built again
        alt = os.path.join(self.tmp, "alt")
        os.makedirs(alt, exist_ok=True)
        path = os.path.join(self.www, "train-000001.tar")
        with open(path, "rb") as f:
            saved = f.read()
        try:
            write_shard(path, 7, n=PER_SHARD - 5)
            write_shard(os.path.join(alt, "x.tar"), 7, n=PER_SHARD - 5)
            self.env.clear_log()
            third = self.run_check(self.remote(), cache_dir=cache)
            whole = [e for e in self.env.access_log() if e[0] == "GET" and e[4] == "-" and not e[1].endswith(".ladeidx")]
            self.assertEqual([e[1] for e in whole], ["/train-000001.tar"])
            got = [ln.split()[4:] for ln in samples(third)[PER_SHARD:2 * PER_SHARD - 5]]
            want = [ln.split()[4:] for ln in samples(self.run_check(os.path.join(alt, "x.tar")))]
            self.assertEqual(got, want)
        finally:
            with open(path, "wb") as f:
                f.write(saved)

    def test_index_dir_keeps_the_index_without_a_cache(self):
        """index_dir keeps the remote shards' indexes and nothing else: a second open sends only HEADs and no
        index pass, and every sample is still read from the server (no disk tier)."""
        idx = os.path.join(self.tmp, "index-only")
        shutil.rmtree(idx, ignore_errors=True)
        first = self.run_check(self.remote(), index_dir=idx)
        whole = [e for e in self.env.access_log() if e[0] == "GET" and e[4] == "-" and not e[1].endswith(".ladeidx")]
        self.assertEqual(sorted(e[1] for e in whole), ["/train-%06d.tar" % s for s in range(SHARDS)])
        self.assertEqual(sorted(f.startswith("tarindex-") for f in os.listdir(idx)), [True] * SHARDS)
        self.env.clear_log()
        second = self.run_check(self.remote(), index_dir=idx)
        self.assertEqual(samples(second), samples(first))
        self.assertEqual([e for e in self.env.access_log() if e[0] == "GET" and e[4] == "-"], [])  # no index pass
        st = lstats(second)
        self.assertEqual((st["storage"], st["disk"], st["memory"]), (len(samples(second)), 0, 0))
        self.assertEqual(len(os.listdir(idx)), SHARDS)  # indexes only: no cache entries
        # local shards: the index goes to index_dir, not beside the shard
        local_idx = os.path.join(self.tmp, "index-local")
        shutil.rmtree(local_idx, ignore_errors=True)
        for f in os.listdir(self.www):
            if f.endswith(".ladeidx"):
                os.unlink(os.path.join(self.www, f))
        self.assertEqual(samples(self.run_check(self.local(), index_dir=local_idx)), samples(first))
        self.assertEqual(len([f for f in os.listdir(local_idx) if f.startswith("tarindex-")]), SHARDS)
        self.assertEqual([f for f in os.listdir(self.www) if f.endswith(".ladeidx")], [])

    def test_disk_cache_sees_a_rewritten_shard(self):
        """A shard rewritten with members of the same sizes (a new ETag): its samples are not served
        from the disk tier with their old bytes."""
        cache = os.path.join(self.tmp, "cache-disk")
        shutil.rmtree(cache, ignore_errors=True)
        kw = dict(cache_dir=cache, batch_size=10, shuffle=True, epochs=2)
        first = self.run_check(self.remote(), **kw)
        self.assertEqual(samples(first), samples(self.run_check(self.local(), **kw)))
        path = os.path.join(self.www, "train-000000.tar")
        with open(path, "rb") as f:
            saved = f.read()
        try:
            write_shard(path, 0, flip=True)
            self.assertEqual(os.path.getsize(path), len(saved))
            os.utime(path, (1700000000, 1700000000))  # nginx's ETag changes with the mtime
            second = self.run_check(self.remote(), **kw)
            self.assertGreater(lstats(second)["disk"], 0)  # the disk tier served the other shards
            self.assertEqual(samples(second), samples(self.run_check(self.local(), **kw)))
            self.assertNotEqual(samples(second), samples(first))
        finally:
            with open(path, "wb") as f:
                f.write(saved)

    def test_nginx_killed_mid_run(self):
        """No proxy: nginx itself goes away while Range requests are in flight (nginx's limit_rate
        holds each Range reply at 100 bytes/s; the index passes, without a Range, run at full speed)."""
        with httpenv.NginxEnv(self.www, server_extra="if ($http_range) { set $limit_rate 100; }") as env:
            p = subprocess.Popen(loader_args(env.url + "/" + self.pattern, False,
                                             dict(batch_size=2, http_retries=2, threads=1, http_connect_timeout_ms=500)),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            t0 = time.time()
            while len([e for e in env.access_log() if e[0] == "GET" and e[2] == 200]) < SHARDS:  # index passes
                self.assertIsNone(p.poll(), "the run ended before nginx was stopped")
                self.assertLess(time.time() - t0, 60)
                time.sleep(0.02)
            time.sleep(0.3)  # the first batches' Range requests are in flight, held by limit_rate
            env.stop_server()
            out, err = p.communicate(timeout=120)
        self.assertNotEqual(p.returncode, 0, (out + err)[-2000:])
        self.assertNotIn("Sanitizer", out + err)
        self.assertEqual(samples(out.splitlines()), [])
        self.assertRegex(out.splitlines()[-1], r"^ERROR LADE_EREMOTE http://127\.0\.0\.1:\d+/train-\d{6}\.tar: "
                                               r"member 'c\d/s\d_\d{3}\.bin': .+ after 2 retries$")

    def test_missing_shard_names_the_url(self):
        lines = self.run_check(self.env.url + "/train-{000000..000004}.tar", expect_ok=False)
        err = lines[-1]
        self.assertIn("LADE_ENOENT", err)
        self.assertIn(self.env.url + "/train-000004.tar", err)
        self.assertIn("HTTP 404", err)

    def test_truncated_shard_names_the_member(self):
        with open(os.path.join(self.www, "train-000000.tar"), "rb") as f:
            src = f.read()
        with open(os.path.join(self.www, "cut.tar"), "wb") as f:
            f.write(src[:len(src) // 2 + 100])
        try:
            err = self.run_check(self.remote("cut.tar"), expect_ok=False)[-1]
        finally:
            os.unlink(os.path.join(self.www, "cut.tar"))
        self.assertIn(self.remote("cut.tar"), err)
        self.assertIn("member 'c", err)
        self.assertIn("past the end", err)


class MisbehavingServer(ThreadingHTTPServer):
    """A real HTTP/1.1 server on 127.0.0.1 (a free port, a thread of this process) serving shards held in memory,
    misbehaving as `mode` says:

        shift       answers a Range request with the bytes 512 further on (512 before, near the end) and says
                    so in its Content-Range
        total       the bytes asked, with a Content-Range total 512 more than the shard's size
        grown       no ETag nor Last-Modified; once a shard's whole GET (its index pass) has begun, 512 bytes
                    are put in front of it (honest Content-Range, with the new total)
        changed     once a shard's whole GET has begun, other bytes of the same size and a new ETag
        changed_lm  the same with Last-Modified alone (no ETag)
        no_range    a 200 with the whole shard to a Range request

    honour=False ignores If-Match and If-Unmodified-Since (412 otherwise when they differ). self.ranges lists
    (name, range header, status) of every Range request served."""
    daemon_threads = True

    def __init__(self, files, mode, honour=True):
        self.files = dict(files)
        self.mode, self.honour = mode, honour
        self.etag = {k: '"v1-%d"' % i for i, k in enumerate(sorted(files))}
        self.modified = {k: "Tue, 14 Nov 2023 22:13:20 GMT" for k in files}
        self.lock = threading.Lock()
        self.ranges = []
        super().__init__(("127.0.0.1", 0), MisbehavingHandler)
        self.url = "http://127.0.0.1:%d" % self.server_address[1]
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.shutdown()
        self.server_close()
        self.thread.join(10)

    def change(self, name):
        """The shard's next version, after its index pass began (locked)."""
        data = self.files[name]
        if self.mode == "grown":
            self.files[name] = b"\0" * 512 + data
        elif self.mode in ("changed", "changed_lm"):
            self.files[name] = random.Random(len(data)).randbytes(len(data))
            self.etag[name] = self.etag[name].replace("v1", "v2")
            self.modified[name] = "Wed, 15 Nov 2023 22:13:20 GMT"


    def handle_error(self, request, client_address):
        pass  # lade hangs up on a refused reply: a broken pipe here is expected


class MisbehavingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as curl's requests expect

    def log_message(self, *args):
        pass

    def send(self, status, headers, body=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        srv, name = self.server, self.path.lstrip("/")
        rng = self.headers.get("Range")
        with srv.lock:
            if name not in srv.files:
                return self.send(404, [])
            data, etag, modified = srv.files[name], srv.etag[name], srv.modified[name]
            if self.command == "GET" and rng is None:
                srv.change(name)  # this reply is the old version, every later one the new
        val = [] if srv.mode == "grown" else [("Last-Modified", modified)] if srv.mode == "changed_lm" else \
            [("ETag", etag), ("Last-Modified", modified)]
        im, ius = self.headers.get("If-Match"), self.headers.get("If-Unmodified-Since")
        if srv.honour and srv.mode != "changed_lm" and im is not None and im != etag:
            status = 412
        elif srv.honour and srv.mode == "changed_lm" and ius is not None and ius != modified:
            status = 412
        elif self.command == "HEAD" or rng is None or srv.mode == "no_range":
            status = 200
        else:
            status = 206
        if rng is not None:
            with srv.lock:
                srv.ranges.append((name, rng, status))
        if status != 206:
            return self.send(status, val, data if status == 200 else b"")
        a, b = (int(x) for x in rng.split("=", 1)[1].split("-"))
        b = min(b, len(data) - 1)
        total = len(data)
        if srv.mode == "shift":
            d = 512 if b + 512 < len(data) else -512
            a, b = a + d, b + d
        elif srv.mode == "total":
            total += 512
        self.send(206, val + [("Content-Range", "bytes %d-%d/%d" % (a, b, total))], data[a:b + 1])


class TestMisbehavingServer(unittest.TestCase):
    """Range replies that are not the bytes lade's index points at: another range than asked, another total
    size, a shard rewritten after it was indexed (HTTP 412 to If-Match, or a new ETag / Last-Modified where the
    server ignores the precondition), a server that ignores Range. Each fails at once, not retried, naming the
    shard's URL, the member and what differs; no sample delivered before the error is wrong."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lade-http-lying-")
        cls.www = os.path.join(cls.tmp, "www")
        os.mkdir(cls.www)
        cls.files = {}
        for s in range(SHARDS):
            name = "train-%06d.tar" % s
            write_shard(os.path.join(cls.www, name), s)
            with open(os.path.join(cls.www, name), "rb") as f:
                cls.files[name] = f.read()
        r = subprocess.run(loader_args(cls.www, False, dict(batch_size=8)), stdout=subprocess.PIPE, text=True,
                           timeout=120)
        cls.want = set(samples(r.stdout.splitlines()))
        assert r.returncode == 0 and len(cls.want) == SHARDS * PER_SHARD, r.stdout[-1000:]
        cls.pattern = "/train-{000000..%06d}.tar" % (SHARDS - 1)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_against(self, mode, honour=True, **settings):
        """The loader against a MisbehavingServer: its ERROR line, the server's Range requests."""
        srv = MisbehavingServer(self.files, mode, honour)
        try:
            t0 = time.time()
            r = subprocess.run(loader_args(srv.url + self.pattern, False, dict(batch_size=8, **settings)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
            self.assertLess(time.time() - t0, 60)
        finally:
            srv.close()
        lines = r.stdout.splitlines()
        got = samples(lines)
        wrong = [ln for ln in got if ln not in self.want]
        self.assertEqual(wrong, [], "%d of %d samples delivered were wrong" % (len(wrong), len(got)))
        self.assertNotIn("Sanitizer", r.stdout + r.stderr)
        self.assertNotEqual(r.returncode, 0, "no error: " + (r.stdout + r.stderr)[-1000:])
        # a reply that is not the bytes asked for is never asked again
        asked = [(n, r) for n, r, _ in srv.ranges]
        self.assertEqual(len(asked), len(set(asked)), "retried: %s" % asked[:5])
        err = lines[-1]
        self.assertRegex(err, r"^ERROR LADE_EREMOTE %s/train-\d{6}\.tar: member 'c\d/s\d_\d{3}\.bin': " %
                         re.escape(srv.url))
        return err, srv.ranges

    def test_shifted_content_range(self):
        err, ranges = self.run_against("shift", coalesce_gap_bytes=0)
        m = re.search(r"Content-Range 'bytes (\d+)-(\d+)/(\d+)', the request was for bytes (\d+)-(\d+)", err)
        self.assertIsNotNone(m, err)
        a, b, total, ra, rb = (int(x) for x in m.groups())
        self.assertEqual((abs(a - ra), abs(b - rb)), (512, 512), err)
        self.assertIn("HTTP 206 for other bytes than asked", err)
        self.assertIn("not retried", err)
        self.assertIn("bytes=%d-%d" % (ra, rb), [r for _, r, _ in ranges])

    def test_wrong_total_in_content_range(self):
        err, _ = self.run_against("total")
        m = re.search(r"train-(\d{6})\.tar: .*: now (\d+) bytes \(Content-Range 'bytes \d+-\d+/(\d+)' to a request for "
                      r"bytes \d+-\d+\), (\d+) bytes when it was indexed: changed since it was indexed; reopen the "
                      r"source to index it again$", err)
        self.assertIsNotNone(m, err)
        size = len(self.files["train-%s.tar" % m.group(1)])
        self.assertEqual([int(m.group(k)) for k in (2, 3, 4)], [size + 512, size + 512, size])

    def test_shard_grown_after_indexing_without_validators(self):
        """No ETag, no Last-Modified: the shard's new size in Content-Range is all that shows the change."""
        err, _ = self.run_against("grown")
        self.assertRegex(err, r": now (\d+) bytes \(Content-Range .*\), \d+ bytes when it was indexed: changed since "
                              r"it was indexed; reopen the source to index it again$")

    def test_shard_rewritten_after_indexing_if_match(self):
        """Same size, other bytes, a new ETag: the server refuses the Range request's If-Match (412)."""
        err, ranges = self.run_against("changed")
        self.assertRegex(err, r": changed since it was indexed \(HTTP 412 Precondition Failed to If-Match: "
                              r"\"v1-\d\"\); reopen the source to index it again$")
        self.assertTrue(ranges and all(st == 412 for _, _, st in ranges), ranges[:5])

    def test_shard_rewritten_after_indexing_etag_compared(self):
        """A server that ignores If-Match: the reply's new ETag is refused before its body is read."""
        err, ranges = self.run_against("changed", honour=False)
        self.assertRegex(err, r": changed since it was indexed \(etag \"v2-\d\" now, etag \"v1-\d\" then\); "
                              r"reopen the source to index it again$")
        self.assertTrue(ranges and all(st == 206 for _, _, st in ranges), ranges[:5])

    def test_shard_rewritten_after_indexing_last_modified(self):
        for honour in (True, False):
            err, _ = self.run_against("changed_lm", honour=honour)
            if honour:
                self.assertIn("changed since it was indexed (HTTP 412 Precondition Failed to If-Unmodified-Since: "
                              "Tue, 14 Nov 2023 22:13:20 GMT)", err)
            else:
                self.assertIn("changed since it was indexed (modified Wed, 15 Nov 2023 22:13:20 GMT now, modified "
                              "Tue, 14 Nov 2023 22:13:20 GMT then)", err)

    def test_range_ignored(self):
        """A 200 with the whole shard to a Range request: refused (its Content-Length is past what was asked),
        not read whole for each sample."""
        err, _ = self.run_against("no_range")
        self.assertRegex(err, r": HTTP 200 to a Range request \(bytes \d+-\d+\): the server does not serve byte "
                              r"ranges$")


class TestShardRewrittenInPlace(unittest.TestCase):
    """nginx (a real server) serving a shard rewritten in place after lade indexed it: the same size, other bytes,
    another mtime, so nginx's ETag changes and it answers If-Match with 412."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lade-http-rewrite-")
        os.chmod(self.tmp, 0o755)
        self.www = os.path.join(self.tmp, "www")
        os.mkdir(self.www)
        for s in range(SHARDS):
            write_shard(os.path.join(self.www, "train-%06d.tar" % s), s)
        self.env = httpenv.NginxEnv(self.www).__enter__()

    def tearDown(self):
        self.env.__exit__(None, None, None)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_rewritten_after_open(self):
        src = self.env.url + "/train-{000000..%06d}.tar" % (SHARDS - 1)
        p = subprocess.Popen([S3_CHECK, "source", "source=" + src, "transform=raw", "http_retry_base_ms=5"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, S3_CHECK_PAUSE="1"))
        try:
            lines = []
            while not lines or lines[-1] != "OPENED":  # indexed: every shard's offsets are known
                ln = p.stdout.readline()
                if not ln:
                    self.fail("s3_check ended before OPENED: %s" % p.stderr.read()[-2000:])
                lines.append(ln.rstrip("\n"))
            path = os.path.join(self.www, "train-000001.tar")
            size = os.path.getsize(path)
            st = os.stat(path)
            with open(path, "r+b") as f:  # in place: the same inode, the same size, other bytes
                f.write(random.Random(5).randbytes(size))
            os.utime(path, (st.st_atime + 100, st.st_mtime + 100))  # nginx's ETag is mtime-size
            out, err = p.communicate("go\n", timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        lines += out.splitlines()
        self.assertNotIn("Sanitizer", out + err)
        got = [(int(ln.split()[1]), ln.split()[2:]) for ln in lines if ln.startswith("G ")]
        errors = [ln for ln in lines if ln.startswith("ERROR ")]
        wrong = []
        for i, v in got:  # every sample delivered is the one indexed
            data = member_bytes(i // PER_SHARD, i % PER_SHARD)
            if v != [str(len(data)), "%08x" % zlib.crc32(data)]:
                wrong.append(i)
        self.assertEqual(wrong, [], "%d of %d samples delivered were wrong" % (len(wrong), len(got)))
        self.assertNotEqual(p.returncode, 0, (out + err)[-2000:])
        self.assertFalse(any(PER_SHARD <= i < 2 * PER_SHARD for i, _ in got), sorted(got))  # none of shard 1
        self.assertEqual(len(got), (SHARDS - 1) * PER_SHARD + 1)  # every other shard's, sample 0 twice
        self.assertEqual(len(errors), PER_SHARD)
        for e in errors:
            self.assertRegex(e, r"^ERROR LADE_EREMOTE %s/train-000001\.tar: member 'c\d/s1_\d{3}\.bin': "
                                r"changed since it was indexed \(HTTP 412 Precondition Failed to If-Match: "
                                r"\"[0-9a-f]+-[0-9a-f]+\"\); "
                                r"reopen the source to index it again$" % re.escape(self.env.url))
        statuses = [e[2] for e in self.env.access_log() if e[0] == "GET" and e[4] != "-" and "000001" in e[1]]
        self.assertTrue(statuses and all(x == 412 for x in statuses), statuses)


class TestHttpReadAhead(unittest.TestCase):
    """Requests sent ahead of the batches (readahead_bytes) and the DELI prefetcher's requests over http://:
    every sample requested once, the batches equal to a local read, with more samples than the HTTP module
    keeps unread results for (1,536), so a window submitted at once would overflow it."""
    SHARDS, PER = 6, 400

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lade-http-ra-")
        os.chmod(cls.tmp, 0o755)
        cls.www = os.path.join(cls.tmp, "www")
        os.mkdir(cls.www)
        for s in range(cls.SHARDS):
            write_shard(os.path.join(cls.www, "train-%06d.tar" % s), s, n=cls.PER)
        cls.env = httpenv.NginxEnv(cls.www).__enter__()
        cls.src = cls.env.url + "/train-{000000..%06d}.tar" % (cls.SHARDS - 1)
        cls.n = cls.SHARDS * cls.PER

    @classmethod
    def tearDownClass(cls):
        cls.env.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_check(self, source, env_add=None, shuffle=True, **settings):
        return run_loader(self, source, shuffle=shuffle, env=dict(os.environ, **(env_add or {})), **settings)

    def test_read_ahead_requests_each_sample_once(self):
        for shuffle in (False, True):
            kw = dict(batch_size=16, epochs=2, shuffle=shuffle, coalesce_gap_bytes=0)
            want = samples(self.run_check(self.www, **kw))
            for ra in (0, 1 << 20, 1 << 30):  # none, about 300 samples, capped at 1024 samples (64 steps)
                got = self.run_check(self.src, readahead_bytes=ra, **kw)
                self.assertEqual(samples(got), want, "readahead_bytes=%d shuffle=%s" % (ra, shuffle))
                # at most one Range request per sample delivered (nothing requested twice, nothing dropped and
                # fetched again); fewer where one chunk read ahead holds a sample twice (its last use in epoch 0
                # and its first in epoch 1): both are parts of one request
                gets = lstats(got)["get_requests"]
                self.assertLessEqual(gets, len(want), "readahead_bytes=%d" % ra)
                self.assertGreaterEqual(gets, len(want) - (1024 if ra else 0), "readahead_bytes=%d" % ra)

    def test_read_ahead_stops_at_the_epoch_with_a_cache(self):
        """With a memory tier holding the dataset, the next epoch is not requested while this one may still
        cache it: epoch 1 sends nothing."""
        got = self.run_check(self.src, batch_size=16, epochs=2, coalesce_gap_bytes=0, cache_mem_bytes=64 << 20)
        ep = [x for x in got if x.startswith("EPOCH ")]
        self.assertIn("get_requests=%d " % self.n, ep[0])
        self.assertIn("get_requests=0 ", ep[1])
        self.assertEqual(lstats(got)["get_requests"], self.n)

    def test_seek_back_and_forth_with_requests_ahead(self):
        """A seek abandons the requests sent ahead: the batches after it equal a local run's, both ways."""
        steps = self.n // 16
        for seek in ("40:0:3", "5:1:%d" % (steps - 20), "30:0:35"):
            kw = dict(batch_size=16, epochs=2, shuffle=True)
            want = self.run_check(self.www, env_add={"S3_CHECK_SEEK": seek}, **kw)
            got = self.run_check(self.src, env_add={"S3_CHECK_SEEK": seek}, **kw)
            self.assertIn("SEEK " + seek.split(":", 1)[1].replace(":", " "), got)
            self.assertEqual(samples(got), samples(want), seek)

    def test_shards_plan_reads_the_stream_in_order(self):
        """plan=shards over http://: the shard stream is requested front to back (few large Range requests,
        whatever the shuffle buffer does to the order), the batches equal a local run's, also after seeks."""
        for buf in (0, 100, 1000, 3000):  # 3000: more than the 1,536 unread results the HTTP module keeps by default
            kw = dict(batch_size=16, epochs=2, plan="shards", shuffle_buffer=buf)
            want = samples(self.run_check(self.www, **kw))
            got = self.run_check(self.src, **kw)
            self.assertEqual(samples(got), want, "shuffle_buffer=%d" % buf)
            gets = lstats(got)["get_requests"]
            # 4,800 samples of ~3 KB in 6 shards: requests of up to 64 KiB gaps and 16 MiB, chunks of ~500
            # samples; one request per sample (per step submitted alone: 0.96 per sample) would be 4,800
            self.assertLess(gets, len(want) // 20, "shuffle_buffer=%d: %d requests" % (buf, gets))
        steps = self.n // 16
        for seek in ("40:0:3", "5:1:%d" % (steps - 20), "30:0:35"):
            kw = dict(batch_size=16, epochs=2, plan="shards", shuffle_buffer=500)
            want = self.run_check(self.www, env_add={"S3_CHECK_SEEK": seek}, **kw)
            got = self.run_check(self.src, env_add={"S3_CHECK_SEEK": seek}, **kw)
            self.assertEqual(samples(got), samples(want), seek)

    def test_prefetcher_requests_each_sample_once(self):
        """The DELI prefetcher (auto with cache_dir) over a window larger than the unread-results table: each
        sample requested once (before the fix, a window submitted at once overflowed the table, which dropped
        the samples needed next, and each was fetched again alone: ~10% extra requests, 5x slower at 20 ms)."""
        want = samples(self.run_check(self.www, batch_size=16, epochs=1, shuffle=False))
        for _ in range(4):  # the overflow depended on timing: the old code failed 1 run in 2 to 3 here
            cache = tempfile.mkdtemp(dir=self.tmp)
            got = self.run_check(self.src, batch_size=16, epochs=1, shuffle=False, coalesce_gap_bytes=0,
                                 cache_dir=cache)
            self.assertEqual(samples(got), want)
            st = lstats(got)
            self.assertGreater(st["prefetched"], self.n // 2)
            self.assertEqual(st["get_requests"], self.n)


class TestHttpsTar(unittest.TestCase):
    """https:// shards from nginx with a certificate of a throwaway CA made by openssl (httpenv.NginxEnv(tls=True)):
    read with tls_ca_file (or $SSL_CERT_FILE) naming that CA, refused under the default trust, another CA or a
    certificate for another host name."""

    @classmethod
    def setUpClass(cls):
        why = httpenv.missing_tls()
        if why:
            raise unittest.SkipTest(why)
        cls.tmp = tempfile.mkdtemp(prefix="lade-https-test-")
        os.chmod(cls.tmp, 0o755)
        cls.www = os.path.join(cls.tmp, "www")
        os.mkdir(cls.www)
        for s in range(SHARDS):
            write_shard(os.path.join(cls.www, "train-%06d.tar" % s), s)
        cls.env = httpenv.NginxEnv(cls.www, tls=True).__enter__()
        cls.pattern = "train-{000000..%06d}.tar" % (SHARDS - 1)

    @classmethod
    def tearDownClass(cls):
        cls.env.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_check(self, source, expect_ok=True, env_add=None, **settings):
        env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "CURL_CA_BUNDLE")}
        env.update(env_add or {})
        lines = run_loader(self, source, expect_ok=expect_ok, env=env, **settings)
        if not expect_ok:
            self.assertEqual(samples(lines), [], "no sample is read from a server that is not trusted")
        return lines

    def https_gets(self):
        return [e for e in self.env.access_log() if e[0] == "GET"]

    def test_batches_equal_local(self):
        """With tls_ca_file naming the CA: the same batches as the shards read locally and over http://."""
        for bs, shuffle, threads in ((1, False, 1), (7, True, 2), (16, True, 3)):
            kw = dict(batch_size=bs, shuffle=shuffle, threads=threads, epochs=2)
            want = samples(self.run_check(self.www, **kw))
            self.assertGreaterEqual(len(want), 2 * (SHARDS * PER_SHARD - bs))
            self.env.clear_log()
            got = samples(self.run_check(self.env.tls_url + "/" + self.pattern, tls_ca_file=self.env.ca_file, **kw))
            self.assertEqual(got, want, "batch_size=%d shuffle=%s" % (bs, shuffle))
            self.assertGreater(len(self.https_gets()), 0)
            self.assertEqual(samples(self.run_check(self.env.url + "/" + self.pattern, **kw)), want)
        one = samples(self.run_check(self.env.tls_url + "/train-000001.tar", tls_ca_file=self.env.ca_file))
        self.assertEqual(len(one), PER_SHARD)

    def test_default_trust_refuses_the_throwaway_ca(self):
        """No tls_ca_file and no $SSL_CERT_FILE/$CURL_CA_BUNDLE: the system's CAs do not know the test CA; the
        open fails naming the URL, saying the certificate is not trusted and how to fix it."""
        self.env.clear_log()
        url = self.env.tls_url + "/" + self.pattern
        last = self.run_check(url, expect_ok=False)[-1]
        self.assertRegex(last, r"^ERROR LADE_EREMOTE https://127\.0\.0\.1:%d/train-\d{6}\.tar: " % self.env.tls_port)
        self.assertIn("TLS certificate is not trusted", last)
        self.assertIn("set tls_ca_file", last)
        self.assertIn("trusted now: the system's CAs", last)
        self.assertEqual(self.https_gets(), [], "no request passes the handshake")

    def test_wrong_ca_is_refused(self):
        last = self.run_check(self.env.tls_url + "/" + self.pattern, expect_ok=False,
                              tls_ca_file=self.env.other_ca_file)[-1]
        self.assertIn("TLS certificate is not trusted", last)
        self.assertIn("trusted now: " + self.env.other_ca_file, last)

    def test_wrong_host_name_is_refused(self):
        """A certificate from the trusted CA, but for wrong.invalid, served as 127.0.0.1: refused."""
        last = self.run_check(self.env.wrong_host_url + "/" + self.pattern, expect_ok=False,
                              tls_ca_file=self.env.ca_file)[-1]
        self.assertRegex(last, r"^ERROR LADE_EREMOTE https://127\.0\.0\.1:%d/" % self.env.wrong_port)
        self.assertIn("the server's TLS certificate is not for this host", last)
        self.assertIn("127.0.0.1", last.split(": ", 1)[1])  # curl's words name the host it expected

    def test_ssl_cert_file_env_and_precedence(self):
        """$SSL_CERT_FILE, then $CURL_CA_BUNDLE, are the CA bundle when tls_ca_file is "": tls_ca_file wins."""
        url = self.env.tls_url + "/" + self.pattern
        want = samples(self.run_check(self.www, batch_size=10))
        self.assertEqual(samples(self.run_check(url, batch_size=10, env_add={"SSL_CERT_FILE": self.env.ca_file})),
                         want)
        self.assertEqual(samples(self.run_check(url, batch_size=10, env_add={"CURL_CA_BUNDLE": self.env.ca_file})),
                         want)
        last = self.run_check(url, expect_ok=False, env_add={"SSL_CERT_FILE": self.env.other_ca_file,
                                                             "CURL_CA_BUNDLE": self.env.ca_file})[-1]
        self.assertIn("trusted now: " + self.env.other_ca_file, last)
        last = self.run_check(url, expect_ok=False, tls_ca_file=self.env.other_ca_file,
                              env_add={"SSL_CERT_FILE": self.env.ca_file})[-1]
        self.assertIn("trusted now: " + self.env.other_ca_file, last)

    def test_unreadable_ca_file(self):
        missing = os.path.join(self.tmp, "no-such-ca.pem")
        last = self.run_check(self.env.tls_url + "/" + self.pattern, expect_ok=False, tls_ca_file=missing)[-1]
        self.assertIn("cannot read the CA bundle " + missing, last)


class TestS3Tar(unittest.TestCase):
    """s3:// tar shards on the S3 tests' server (s3rver behind tests/s3/faultproxy.js, SigV4 checked)."""

    @classmethod
    def setUpClass(cls):
        why = s3env.missing()
        if why:
            raise unittest.SkipTest(why)
        cls.tmp = tempfile.mkdtemp(prefix="lade-s3tar-test-")
        for s in range(SHARDS):
            write_shard(os.path.join(cls.tmp, "train-%06d.tar" % s), s)
        cls.env = s3env.S3Env().__enter__()
        for s in range(SHARDS):
            with open(os.path.join(cls.tmp, "train-%06d.tar" % s), "rb") as f:
                cls.env.put("shards/train-%06d.tar" % s, f.read())
        cls.env.put("shards/notes.txt", b"not a shard")
        cls.env.put("shards/old/train-000000.tar", b"in a sub-folder: not a shard of the prefix")

    @classmethod
    def tearDownClass(cls):
        cls.env.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_check(self, source, **settings):
        r = subprocess.run(loader_args(source, True, dict(self.env.lade_settings(), **settings)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        out = r.stdout + r.stderr
        self.assertNotIn(self.env.secret_key, out)
        self.assertNotIn("Sanitizer", out)
        self.assertEqual(r.returncode, 0, out[-3000:])
        return r.stdout.splitlines()

    def test_brace_pattern_and_prefix_equal_local(self):
        want = samples(self.run_check(self.tmp))
        got = samples(self.run_check("s3://%s/shards/train-{000000..%06d}.tar" % (self.env.bucket, SHARDS - 1)))
        self.assertEqual(got, want)
        self.env.reset()
        lines = self.run_check("s3://%s/shards" % self.env.bucket, source_type="tar")
        self.assertEqual(samples(lines), want)
        c = self.env.counts()
        self.assertEqual(c["sig_failures"], 0)
        self.assertEqual(c["list"], 1)
        self.assertEqual(c["head"], SHARDS + 1)  # each shard's, and the probe of the first shard's sidecar (404)
        st = {k: int(v) for k, v in (p.split("=") for p in [x for x in lines if x.startswith("LSTATS ")][-1].split()[1:])}
        # the samples' Range requests + one index pass each (the probe found no sidecars: none is asked for)
        self.assertEqual(c["get"], st["get_requests"] + SHARDS)
        self.assertLess(st["get_requests"], SHARDS * PER_SHARD)  # coalesced

    def test_tfrecord_prefix_equal_local(self):  # TFRecord files: the same machinery (docs/sources.md, tfrecord)
        d = os.path.join(self.tmp, "tfr")
        tfrecord_files.write_dlio(d, 2, PER_SHARD, member_bytes)
        for s in range(2):
            with open(os.path.join(d, "img_%d_of_2.tfrecord" % s), "rb") as f:
                self.env.put("tfr/img_%d_of_2.tfrecord" % s, f.read())
        want = samples(self.run_check(os.path.join(d, "img_{0..1}_of_2.tfrecord")))
        self.assertEqual(samples(self.run_check("s3://%s/tfr" % self.env.bucket, source_type="tfrecord")), want)


class TestHttpTfrecord(unittest.TestCase):
    """TFRecord files by nginx: local batches, the index in index_dir, a damaged record named (docs/sources.md)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lade-http-tfr-test-")
        os.chmod(cls.tmp, 0o755)
        cls.www = os.path.join(cls.tmp, "www")
        tfrecord_files.write_dlio(cls.www, 3, PER_SHARD, member_bytes)  # img_S_of_3.tfrecord, bad.tfrecord
        cls.env = httpenv.NginxEnv(cls.www).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.env.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_batches_equal_local(self):
        local, remote = os.path.join(self.www, "img_{0..2}_of_3.tfrecord"), self.env.url + "/img_{0..2}_of_3.tfrecord"
        for bs, shuffle in ((1, False), (7, True), (16, False)):
            want = samples(run_loader(self, local, shuffle=shuffle, batch_size=bs, epochs=2))
            self.assertGreaterEqual(len(want), 2 * 3 * PER_SHARD - 2 * bs)
            self.assertEqual(samples(run_loader(self, remote, shuffle=shuffle, batch_size=bs, epochs=2)), want)
        ix = os.path.join(self.tmp, "ix")
        first = samples(run_loader(self, remote, index_dir=ix))
        self.assertEqual(len([f for f in os.listdir(ix) if f.startswith("tfrindex-")]), 3)
        self.env.clear_log()
        self.assertEqual(samples(run_loader(self, remote, index_dir=ix)), first)
        self.assertEqual([e for e in self.env.access_log() if e[0] == "GET" and e[4] == "-"], [])  # no index pass

    def test_damaged_record_names_url_and_record(self):
        lines = run_loader(self, self.env.url + "/bad.tfrecord", expect_ok=False)
        self.assertRegex(lines[-1], r"^ERROR LADE_EFORMAT http://127\.0\.0\.1:\d+/bad\.tfrecord: "
                                    r"record 2 \(at byte \d+\): bad data CRC")


class TestHttpFaults(unittest.TestCase):
    """Through the fault proxy: latency, 5xx, and a server that goes away mid-run."""

    def setUp(self):
        why = httpenv.missing_proxy()
        if why:
            self.skipTest(why)
        self.tmp = tempfile.mkdtemp(prefix="lade-http-faults-")
        os.chmod(self.tmp, 0o755)
        self.www = os.path.join(self.tmp, "www")
        os.mkdir(self.www)
        for s in range(SHARDS):
            write_shard(os.path.join(self.www, "train-%06d.tar" % s), s)
        self.env = httpenv.NginxEnv(self.www, proxy=True).__enter__()
        self.src = self.env.url + "/train-{000000..%06d}.tar" % (SHARDS - 1)

    def tearDown(self):
        self.env.__exit__(None, None, None)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def args(self, source, **settings):
        return loader_args(source, True, settings)

    def test_transient_5xx_are_retried(self):
        want = subprocess.run(self.args(self.www), stdout=subprocess.PIPE, text=True, timeout=120).stdout
        cache = os.path.join(self.tmp, "c")
        # faults on the index pass: resumed where the stream stopped
        self.env.proxy(rules=[{"action": "503", "count": 2}, {"action": "cut", "count": 1}])
        r = subprocess.run(self.args(self.src, cache_dir=cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-2000:])
        self.assertEqual(samples(r.stdout.splitlines()), samples(want.splitlines()))
        # faults on the samples' Range requests (the index now comes from that folder; no disk cache, which
        # holds every sample after the first run)
        self.env.proxy(latency_ms=5, rules=[{"action": "503", "count": 4}, {"action": "500", "count": 3}])
        r = subprocess.run(self.args(self.src, index_dir=cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-2000:])
        self.assertEqual(samples(r.stdout.splitlines()), samples(want.splitlines()))
        st = [x for x in r.stdout.splitlines() if x.startswith("LSTATS ")][-1]
        retries = int(st.split("retries=")[1].split()[0])
        self.assertEqual(retries, 7)
        self.assertEqual(self.env.counts()["faults"], {"503": 4, "500": 3})

    def test_5xx_until_retries_run_out_names_url_and_member(self):
        self.env.proxy(rules=[{"action": "500", "match": "train-000002", "count": -1}])
        r = subprocess.run(self.args(self.src, http_retries=2, cache_dir=os.path.join(self.tmp, "c")),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        err = r.stdout.splitlines()[-1]
        # the index pass of shard 2 is a GET too: it fails first, at open
        self.assertIn(self.env.url + "/train-000002.tar", err)
        self.assertIn("HTTP 500", err)
        self.assertIn("after 2 retries", err)
        # with the index in the cache, the samples' Range requests fail naming the member
        self.env.proxy()
        r = subprocess.run(self.args(self.src, cache_dir=os.path.join(self.tmp, "c")), stdout=subprocess.PIPE,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0)
        self.env.proxy(rules=[{"action": "500", "match": "train-000002", "count": -1}])
        # the index from that folder, no disk cache (the clean run above filled it with every sample)
        r = subprocess.run(self.args(self.src, http_retries=2, index_dir=os.path.join(self.tmp, "c")),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        err = r.stdout.splitlines()[-1]
        self.assertRegex(err, r"train-000002\.tar: member 'c\d/s2_\d{3}\.bin': HTTP 500 .*after 2 retries")

    def test_coalesced_replies_cut_short_are_fetched_again(self):
        """A coalesced Range reply (several samples, written into one buffer per sample as it arrives) cut
        mid-body, or cut by one byte, is retried from scratch: the batches equal the local ones."""
        for kw in (dict(batch_size=40, shuffle=False), dict(batch_size=16, world_size=3, rank=2, shuffle=True)):
            want = subprocess.run(loader_args(self.www, False, kw), stdout=subprocess.PIPE, text=True, timeout=120)
            cache = tempfile.mkdtemp(dir=self.tmp)
            # the shards' index kept in cache_dir (the faults below are then on the samples' Range requests
            # alone), the samples it cached removed; a disk tier of 1 byte keeps none
            subprocess.run(loader_args(self.src, False, dict(kw, cache_dir=cache, cache_disk_bytes=1)),
                           stdout=subprocess.PIPE, text=True, timeout=120)
            self.assertTrue(any(f.startswith("tarindex-") for f in os.listdir(cache)))
            self.env.proxy(rules=[{"action": "cut", "match": ".tar", "count": 3},
                                  {"action": "short", "match": ".tar", "count": 2}])
            r = subprocess.run(loader_args(self.src, False, dict(kw, http_retries=8, coalesce_gap_bytes=1 << 20,
                                                                 cache_dir=cache, cache_disk_bytes=1)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-2000:])
            got = samples(r.stdout.splitlines())
            self.assertEqual(got, samples(want.stdout.splitlines()), kw)
            self.assertEqual(self.env.counts()["faults"], {"cut": 3, "short": 2})
            st = [x for x in r.stdout.splitlines() if x.startswith("LSTATS ")][-1]
            self.assertLess(int(st.split("get_requests=")[1].split()[0]), len(got))  # coalesced

    def test_server_dies_mid_run(self):
        """nginx stops once a few samples were read: the run fails naming a shard URL and a member."""
        self.env.proxy(latency_ms=30)
        p = subprocess.Popen(self.args(self.src, batch_size=2, http_concurrency=1, http_retries=2, coalesce_gap_bytes=0,
                                       threads=1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t0 = time.time()
        while self.env.counts()["get"] < SHARDS + 10:  # the index passes, then 10 samples' Range requests
            self.assertIsNone(p.poll(), "the run ended before the server was stopped")
            self.assertLess(time.time() - t0, 60)
            time.sleep(0.02)
        self.env.stop_server()
        out, err = p.communicate(timeout=120)
        self.assertNotEqual(p.returncode, 0, (out + err)[-2000:])
        last = out.splitlines()[-1]
        self.assertRegex(last, r"^ERROR LADE_EREMOTE http://127\.0\.0\.1:\d+/train-\d{6}\.tar: member 'c\d/s\d_\d{3}"
                               r"\.bin': HTTP 502 .*after 2 retries")
        self.assertLess(len(samples(out.splitlines())), SHARDS * PER_SHARD)


if __name__ == "__main__":
    why = httpenv.missing()
    if why:
        print("skipped: " + why)
        sys.exit(77)
    if not os.path.exists(S3_CHECK):
        print("skipped: no s3_check binary at %s (set S3_CHECK)" % S3_CHECK)
        sys.exit(77)
    unittest.main()
