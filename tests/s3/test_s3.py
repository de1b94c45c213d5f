#!/usr/bin/env python3
"""test_s3.py - lade's s3 source against a real S3 server (s3rver) behind a fault-injecting proxy.

Run: S3_CHECK=build/tests/s3_check /usr/bin/python3 tests/s3/test_s3.py [-v] [TestS3.test_name]
Exit status 77 (skipped) when node, npm or boto3 are missing.
"""
import glob
import hashlib
import json
import os
import shutil
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import s3env  # noqa: E402
import fakes3  # noqa: E402

S3_CHECK = os.environ.get("S3_CHECK") or os.path.join(HERE, "..", "..", "build", "tests", "s3_check")
CLASSES = ["cat", "dog", "eel"]
PER_CLASS = 100
MAX_SIZE = 20 * 1024
SESSION_TOKEN = "lade-test-token-Vb71xP"
ENV = None


def payload(key):
    size = random.Random(key).randint(1024, MAX_SIZE)
    block = hashlib.sha256(key.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def crc(b):
    import zlib
    return "%08x" % (zlib.crc32(b) & 0xFFFFFFFF)


IMG = {"img/%s/%s_%03d.bin" % (c, c, i): payload("img/%s/%03d" % (c, i)) for c in CLASSES for i in range(PER_CLASS)}
# root object (label -1), keys needing URL and XML escaping, a folder marker (skipped)
MIXED = {"mixed/top.bin": b"top-level object",
         "mixed/a&b/one <1>.bin": b"one",
         "mixed/a&b/two+two=4 'q'.bin": b"two" * 50,
         "mixed/zz/x~y%z\"w.bin": b"x" * 3000}
MANY = {"many/k%05d" % i: b"%d" % i for i in range(1100)}


def img_order():
    """Index order of the source: (class, key) - ImageFolder order."""
    keys = sorted(IMG, key=lambda k: (CLASSES.index(k.split("/")[1]), k))
    return keys


def setUpModule():
    """One S3 server for the classes that use it (TestS3, TestS3Pack), started once."""
    global ENV
    ENV = s3env.S3Env()
    ENV.__enter__()
    ENV.put_many(IMG)
    ENV.put_many(MIXED)
    ENV.put("mixed/zz/", b"")  # a "folder" object
    ENV.put_many(MANY, workers=16)


def tearDownModule():
    if ENV:
        ENV.__exit__(None, None, None)


class TestS3(unittest.TestCase):

    def setUp(self):
        ENV.reset()

    # ---- helpers
    def run_check(self, mode, source, env_creds=False, expect_ok=True, timeout=300, **settings):
        s = {"source": source, "s3_session_token": SESSION_TOKEN}
        env = dict(os.environ)
        if env_creds:
            env.update(ENV.lade_env())
            env["AWS_SESSION_TOKEN"] = SESSION_TOKEN
            del s["s3_session_token"]
        else:
            s.update(ENV.lade_settings())
        s.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items()})
        args = [S3_CHECK, mode] + ["%s=%s" % kv for kv in s.items()]
        t0 = time.time()
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=timeout)
        elapsed = time.time() - t0
        out = r.stdout + r.stderr
        for secret in (ENV.secret_key, SESSION_TOKEN):
            self.assertNotIn(secret, out, "a secret leaked into the output")
        self.assertNotIn("Sanitizer", out)  # a report fails the test, also where the run is expected to fail
        lines = r.stdout.splitlines()
        if expect_ok:
            self.assertEqual(r.returncode, 0, out[-3000:])
            self.assertEqual(lines[-1], "OK")
        else:
            self.assertNotEqual(r.returncode, 0, out[-3000:])
        return lines, elapsed

    def check_epochs(self, lines, epochs, order):
        """Every index exactly once per epoch, with the uploaded bytes and the right label."""
        by_epoch = {}
        for ln in lines:
            if not ln.startswith("S "):
                continue
            _, ep, _step, idx, label, size, c = ln.split()
            idx = int(idx)
            by_epoch.setdefault(int(ep), []).append(idx)
            key = order[idx]
            data = IMG[key]
            self.assertEqual(int(size), len(data), key)
            self.assertEqual(c, crc(data), "bytes of %s differ" % key)
            self.assertEqual(int(label), CLASSES.index(key.split("/")[1]), key)
        self.assertEqual(sorted(by_epoch), list(range(epochs)))
        for ep, got in by_epoch.items():
            self.assertEqual(sorted(got), list(range(len(order))), "epoch %d: not every index exactly once" % ep)

    def loader(self, **kw):
        base = dict(transform="raw", raw_size=MAX_SIZE, batch_size=20, shuffle=True, drop_last=True, epochs=1,
                    threads=2, s3_retry_base_ms=5)
        base.update(kw)
        return self.run_check("loader", "s3://lade/img", **base)

    def parse_kv(self, lines, tag):
        ln = [x for x in lines if x.startswith(tag + " ")][-1]
        return {k: int(v) for k, v in (p.split("=") for p in ln.split()[1:])}

    # ---- tests
    def test_loader_exactly_once(self):
        lines, _ = self.loader(epochs=2)
        self.check_epochs(lines, 2, img_order())
        c = ENV.counts()
        self.assertEqual(c["sig_failures"], 0, "curl's SigV4 signature did not verify")
        self.assertEqual(c["list"], 1)
        self.assertGreaterEqual(c["get"], 600)

    def test_env_credentials(self):
        lines, _ = self.run_check("loader", "s3://lade/img", env_creds=True, transform="raw", raw_size=MAX_SIZE,
                                  batch_size=30, drop_last=True, threads=2)
        self.check_epochs(lines, 1, img_order())
        self.assertEqual(ENV.counts()["sig_failures"], 0)

    def test_bad_signature_is_rejected(self):
        # the proxy's check is real: a wrong secret fails at once with the server's message, and is not shown
        s = ENV.lade_settings()
        lines, _ = self.run_check("source", "s3://lade/mixed", expect_ok=False, s3_secret_access_key="wrong-" + s["s3_secret_access_key"][::-1])
        self.assertIn("SignatureDoesNotMatch", lines[-1])
        self.assertIn("ERROR LADE_EREMOTE", lines[-1])
        self.assertNotIn(s["s3_secret_access_key"][::-1], lines[-1])

    def test_source_hooks_and_listing(self):
        lines, _ = self.run_check("source", "s3://lade/mixed", s3_concurrency=4)
        listed = self.parse_kv(lines, "LISTED")
        self.assertEqual(listed["count"], 4)
        self.assertEqual(listed["classes"], 2)
        self.assertEqual(listed["list_requests"], 1)
        objs = [ln.split(" ", 4) for ln in lines if ln.startswith("O ")]
        # ImageFolder order: the root object (label -1) first, then class by class
        want = ["mixed/top.bin", "mixed/a&b/one <1>.bin", "mixed/a&b/two+two=4 'q'.bin", "mixed/zz/x~y%z\"w.bin"]
        self.assertEqual([o[4] for o in objs], ["s3://lade/" + k for k in want])
        self.assertEqual([int(o[2]) for o in objs], [-1, 0, 0, 1])
        self.assertEqual([int(o[3]) for o in objs], [len(MIXED[k]) for k in want])
        got = [ln.split() for ln in lines if ln.startswith("G ")]
        self.assertEqual(len(got), 5)
        for _, i, size, c in got:
            data = MIXED[want[int(i)]]
            self.assertEqual((int(size), c), (len(data), crc(data)))
        self.assertEqual(self.parse_kv(lines, "READ")["new_requests"], 0, "reads of submitted samples refetched")
        st = self.parse_kv(lines, "STATS")
        self.assertEqual(st["get_requests"], 5)  # 4 submitted + 1 read without a want
        self.assertEqual(st["concurrency"], 4)
        self.assertEqual(st["in_flight"], 0)
        self.assertGreater(st["ready_calls"], 0)
        self.assertEqual(st["ready0"], 1)
        self.assertEqual(st["bytes"], sum(len(v) for v in MIXED.values()) + len(MIXED[want[0]]))

    def test_pagination_and_tuning(self):
        ENV.proxy(latency_ms=20)
        lines, elapsed = self.run_check("source", "s3://lade/many")
        self.assertEqual(self.parse_kv(lines, "LISTED")["count"], 1100)
        c = ENV.counts()
        self.assertEqual(c["list"], 2, "ListObjectsV2 pages")
        got = {int(x.split()[1]): x.split()[3] for x in lines if x.startswith("G ")}
        keys = sorted(MANY)
        self.assertEqual(len(got), 1100)
        for i, k in enumerate(keys):
            self.assertEqual(got[i], crc(MANY[k]), k)
        st = self.parse_kv(lines, "STATS")
        # 1100 x 20 ms one at a time would take 22 s: requests overlap, and the tuner raised the limit
        self.assertGreater(c["max_open"], 8)
        self.assertGreater(st["concurrency"], 8)
        self.assertLess(elapsed, 12)

    def test_latency_loader(self):
        ENV.proxy(latency_ms=20)
        lines, _ = self.loader(epochs=1)
        self.check_epochs(lines, 1, img_order())

    def test_bandwidth_limit(self):
        # the proxy's shared link (the deli benchmark's bandwidth-limited bucket): 300 bodies at a
        # rate that makes the epoch take about 1 s, every byte still exact
        total = sum(len(v) for v in IMG.values())
        ENV.proxy(bandwidth_mb_s=total / 1e6)
        lines, elapsed = self.loader(epochs=1)
        self.check_epochs(lines, 1, img_order())
        self.assertGreaterEqual(elapsed, 0.8)
        self.assertLess(elapsed, 10)

    def test_503_burst(self):
        # a burst right at the start hits the first requests again and again, so the retry budget must
        # cover the whole burst
        ENV.proxy(rules=[{"action": "503", "count": 12}])
        lines, _ = self.loader(epochs=1, s3_retries=14, s3_retry_base_ms=1)
        self.check_epochs(lines, 1, img_order())
        c = ENV.counts()
        self.assertEqual(c["faults"].get("503"), 12)
        self.assertEqual(c["get"], 300 + 12)
        ENV.reset()
        ENV.proxy(rules=[{"action": "503", "count": 30}])
        lines, _ = self.run_check("source", "s3://lade/img", s3_retry_base_ms=5)
        st = self.parse_kv(lines, "STATS")
        self.assertEqual(st["retries"], 30)
        self.assertEqual(st["get_requests"], 301 + 30)
        order = img_order()
        for x in lines:
            if x.startswith("G "):
                _, i, size, c = x.split()
                self.assertEqual(c, crc(IMG[order[int(i)]]))

    def test_cut_mid_body(self):
        ENV.proxy(rules=[{"action": "cut", "count": 10}])
        lines, _ = self.loader(epochs=1, s3_retries=12, s3_retry_base_ms=1)
        self.check_epochs(lines, 1, img_order())
        self.assertEqual(ENV.counts()["faults"].get("cut"), 10)

    def test_wrong_length(self):
        ENV.proxy(rules=[{"action": "short", "count": 6}])
        lines, _ = self.loader(epochs=1, s3_retries=8, s3_retry_base_ms=1)
        self.check_epochs(lines, 1, img_order())
        self.assertEqual(ENV.counts()["faults"].get("short"), 6)

    # ---- bodies larger than listed, objects replaced under a cached listing
    def run_measured(self, args, timeout):
        """Runs s3_check; (stdout lines, seconds, exit status, peak RSS in MiB of that process)."""
        t0 = time.time()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            out = p.stdout.read()
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
            p.stdout.close()
        p.returncode = os.waitstatus_to_exitcode(status)
        return out.splitlines(), time.time() - t0, p.returncode, ru.ru_maxrss / 1024

    def check_capped(self, action, want_words):
        key = img_order()[42]
        listed = len(IMG[key])
        ENV.proxy(rules=[{"action": action, "match": key}])
        s = dict(ENV.lade_settings(), source="s3://lade/img", s3_session_token=SESSION_TOKEN, transform="raw",
                 raw_size=MAX_SIZE, batch_size=20, shuffle="false", threads=2, s3_retry_base_ms=5, s3_retries=1,
                 s3_timeout_ms=5000)
        lines, elapsed, rc, rss = self.run_measured([S3_CHECK, "loader"] + ["%s=%s" % kv for kv in s.items()], 120)
        err = [x for x in lines if x.startswith("ERROR ")]
        self.assertNotIn("Sanitizer", "\n".join(lines))
        self.assertNotEqual(rc, 0)
        self.assertTrue(err, lines[-5:])
        self.assertIn("s3://lade/" + key, err[0])
        self.assertIn("the listing says %d" % listed, err[0])
        for w in want_words:
            self.assertIn(w, err[0])
        # stopped at the listed size: no time spent and no memory taken by the endless body
        self.assertLess(elapsed, 4.0, err[0])
        self.assertLess(ENV.counts()["endless_bytes"], 64 << 20)
        # without the cap, 5 s of this body took 500 MB; a capped run holds a few MB of bodies (ThreadSanitizer's
        # shadow memory included, the process stays far below that)
        self.assertLess(rss, 300, "peak RSS %d MiB" % rss)
        return err[0], rss

    def test_endless_body_is_capped(self):
        # a chunked body that never ends was buffered until s3_timeout_ms (or memory) ran out
        self.check_capped("endless", ["ERROR LADE_ERANGE", "the reply passed %d bytes (no Content-Length)"
                                               % len(IMG[img_order()[42]]), "(a HEAD says %d bytes, as listed) after 1 retries"
                                               % len(IMG[img_order()[42]])])

    def test_huge_content_length_is_refused(self):
        # a 50 GB Content-Length for an object listed at a few KiB: refused on the headers
        self.check_capped("huge", ["ERROR LADE_ERANGE", "the reply is 50000000000 bytes (Content-Length)"])

    def test_endless_listing_page_is_capped(self):
        # a LIST reply has no listed size: it stops at 64 MiB, far past any real page (1000 keys)
        ENV.proxy(rules=[{"action": "endless", "match": "LIST"}])
        s = dict(ENV.lade_settings(), source="s3://lade/img", s3_session_token=SESSION_TOKEN, s3_timeout_ms=60000)
        lines, elapsed, rc, rss = self.run_measured([S3_CHECK, "source"] + ["%s=%s" % kv for kv in s.items()], 120)
        self.assertNotEqual(rc, 0)
        self.assertEqual(lines[-1], "ERROR LADE_ERANGE s3://lade/img/: the reply passed 67108864 bytes (no "
                                    "Content-Length), the most lade reads of it")
        self.assertEqual(ENV.counts()["list"], 1)  # not retried
        self.assertLess(elapsed, 10)
        self.assertLess(rss, 400, "peak RSS %d MiB" % rss)

    def test_max_sample_bytes(self):
        # objects listed larger than max_sample_bytes fail before any request, naming key and sizes
        lines, _ = self.loader(expect_ok=False, shuffle=False, max_sample_bytes=5000)
        err = lines[-1]
        self.assertTrue(err.startswith("ERROR LADE_ERANGE"), err)
        key = next(k for k in img_order() if len(IMG[k]) > 5000)
        self.assertRegex(err, r"s3://lade/img/\S+: \d+ bytes listed, more than max_sample_bytes \(5000\); not read")
        bad = err.split()[2].rstrip(":")[len("s3://lade/"):]
        self.assertGreater(len(IMG[bad]), 5000)
        self.assertNotIn("/lade/" + bad, ENV.counts()["by_key"], "an object over the limit was requested")
        self.assertTrue(key)

    def test_replaced_object_under_cached_listing(self):
        # an object replaced (new size) while the listing is cached: one HEAD refreshes the entry, the new
        # bytes are delivered, no retry is spent, and the stale listing file is removed
        objs = {"repl/a.bin": b"a" * 100, "repl/b.bin": b"b" * 200}
        ENV.put_many(objs)
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            kw = dict(cache_dir=cache, listing_ttl=3600, s3_retry_base_ms=5)
            self.run_check("source", "s3://lade/repl", **kw)
            self.assertEqual(len(os.listdir(cache)), 1)
            new = b"B" * 321
            ENV.put("repl/b.bin", new)
            ENV.reset()
            lines, elapsed = self.run_check("source", "s3://lade/repl", **kw)
            got = {int(x.split()[1]): (int(x.split()[2]), x.split()[3]) for x in lines if x.startswith("G ")}
            self.assertEqual(got[1], (len(new), crc(new)))
            self.assertEqual(self.parse_kv(lines, "STATS")["retries"], 0)
            c = ENV.counts()
            self.assertEqual(c["head"], 1)
            self.assertEqual(c["by_key"]["/lade/repl/b.bin"], 2)
            self.assertEqual(c["sig_failures"], 0, "the HEAD's signature did not verify")
            self.assertEqual(os.listdir(cache), [], "the stale cached listing was kept")
            ENV.reset()
            lines, _ = self.run_check("source", "s3://lade/repl", **kw)
            self.assertEqual(self.parse_kv(lines, "STATS")["list_requests"], 1)
            self.assertEqual([int(x.split()[3]) for x in lines if x.startswith("O ")], [100, len(new)])
            self.assertEqual(ENV.counts()["head"], 0)

    def test_stale_cached_listing_errors_say_so(self):
        ENV.put_many({"repl2/a.bin": b"a" * 10, "repl2/b.bin": b"b" * 10})
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            kw = dict(cache_dir=cache, listing_ttl=3600, s3_retry_base_ms=5, max_sample_bytes=100)
            self.run_check("source", "s3://lade/repl2", **kw)
            path = os.path.join(cache, os.listdir(cache)[0])
            ENV.put("repl2/b.bin", b"B" * 500)  # replaced: now larger than max_sample_bytes
            lines, _ = self.run_check("source", "s3://lade/repl2", expect_ok=False, **kw)
            err = [x for x in lines if x.startswith("ERROR ")][0]
            self.assertIn("ERROR LADE_ERANGE s3://lade/repl2/b.bin: now 500 bytes (the listing says 10), more than "
                          "max_sample_bytes (100); the listing was cached in %s at " % path, err)
            self.assertRegex(err, r"at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(listing_ttl=3600 s\): that file is now "
                                  r"removed, so the next run lists the bucket again")
            self.assertFalse(os.path.exists(path))
            ENV.put("repl2/b.bin", b"b" * 10)
            self.run_check("source", "s3://lade/repl2", **kw)
            ENV.delete("repl2/a.bin")  # deleted under the cached listing
            lines, _ = self.run_check("source", "s3://lade/repl2", expect_ok=False, **kw)
            err = [x for x in lines if x.startswith("ERROR ")][0]
            self.assertIn("ERROR LADE_ENOENT s3://lade/repl2/a.bin: HTTP 404 NoSuchKey", err)
            self.assertIn("; the listing was cached in %s" % path, err)
            self.assertFalse(os.path.exists(path))

    def test_stalled_response(self):
        key = img_order()[123]
        ENV.proxy(rules=[{"action": "stall", "match": key, "count": 1}])
        lines, elapsed = self.loader(epochs=1, s3_timeout_ms=500)
        self.check_epochs(lines, 1, img_order())
        self.assertEqual(ENV.counts()["by_key"]["/lade/" + key], 2)
        self.assertLess(elapsed, 20)

    def test_403_and_404_fail_at_once(self):
        key = img_order()[77]
        for action, code, text in (("403", "LADE_EREMOTE", "AccessDenied"), ("404", "LADE_ENOENT", "NoSuchKey")):
            ENV.reset()
            ENV.proxy(rules=[{"action": action, "match": key}])
            lines, _ = self.loader(expect_ok=False)
            err = lines[-1]
            self.assertTrue(err.startswith("ERROR " + code), err)
            self.assertIn("s3://lade/" + key, err)
            self.assertIn(text, err)
            self.assertEqual(ENV.counts()["by_key"]["/lade/" + key], 1, "a %s was retried" % action)

    def test_retries_exhausted(self):
        key = img_order()[5]
        ENV.proxy(rules=[{"action": "503", "match": key}])
        lines, _ = self.loader(expect_ok=False, s3_retries=3)
        err = lines[-1]
        self.assertTrue(err.startswith("ERROR LADE_EREMOTE"), err)
        self.assertIn("s3://lade/" + key, err)
        self.assertIn("HTTP 503 SlowDown: Please reduce your request rate.", err)
        self.assertIn("after 3 retries", err)
        self.assertEqual(ENV.counts()["by_key"]["/lade/" + key], 4)

    def test_listing_errors(self):
        ENV.proxy(rules=[{"action": "500", "match": "LIST"}])
        lines, _ = self.run_check("source", "s3://lade/img", expect_ok=False, s3_retries=2)
        self.assertIn("s3://lade/img/: HTTP 500 InternalError", lines[-1])
        self.assertIn("after 2 retries", lines[-1])
        self.assertEqual(ENV.counts()["list"], 3)
        ENV.reset()
        lines, _ = self.run_check("source", "s3://lade/nothing-here", expect_ok=False)
        self.assertTrue(lines[-1].startswith("ERROR LADE_EEMPTY"), lines[-1])
        self.assertIn("s3://lade/nothing-here/", lines[-1])
        lines, _ = self.run_check("source", "s3://no-such-bucket/x", expect_ok=False)
        self.assertIn("NoSuchBucket", lines[-1])

    def test_listing_cache(self):
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            kw = dict(cache_dir=cache, listing_ttl=3600)
            lines, _ = self.run_check("source", "s3://lade/mixed", **kw)
            self.assertEqual(self.parse_kv(lines, "STATS")["list_requests"], 1)
            files = [f for f in os.listdir(cache) if f.startswith("listing-")]
            self.assertEqual(len(files), 1)
            self.assertRegex(files[0], r"^listing-[0-9a-f]{16}\.bin$")
            self.assertEqual(os.stat(cache).st_mode & 0o777, 0o700)
            first = [x for x in lines if x.startswith(("O ", "G "))]
            ENV.reset()
            lines, _ = self.run_check("source", "s3://lade/mixed", **kw)
            self.assertEqual(self.parse_kv(lines, "STATS")["list_requests"], 0)
            self.assertEqual(ENV.counts()["list"], 0)
            self.assertEqual([x for x in lines if x.startswith(("O ", "G "))], first)
            # a corrupt listing file is ignored and rebuilt
            path = os.path.join(cache, files[0])
            with open(path, "r+b") as f:
                f.seek(60)
                b = f.read(1)
                f.seek(60)
                f.write(bytes([b[0] ^ 0x55]))
            ENV.reset()
            lines, _ = self.run_check("source", "s3://lade/mixed", **kw)
            self.assertEqual(ENV.counts()["list"], 1)
            self.assertEqual([x for x in lines if x.startswith(("O ", "G "))], first)
            ENV.reset()
            lines, _ = self.run_check("source", "s3://lade/mixed", **kw)
            self.assertEqual(ENV.counts()["list"], 0)
            # listing_ttl=0: never cached
            lines, _ = self.run_check("source", "s3://lade/mixed", cache_dir=cache, listing_ttl=0)
            self.assertEqual(self.parse_kv(lines, "STATS")["list_requests"], 1)

    def list_together(self, tmp, n=4, env=None):
        """n s3_check processes sharing cache_dir list s3://lade/many at once: their (stdout, stderr)s, each
        checked (exit 0, the 1,100 keys, all the same listing)."""
        kw = dict(cache_dir=os.path.join(tmp, "cache"), listing_ttl=3600)
        s = {"source": "s3://lade/many", "s3_session_token": SESSION_TOKEN}
        s.update(ENV.lade_settings())
        s.update({k: str(v) for k, v in kw.items()})
        args = [S3_CHECK, "source"] + ["%s=%s" % kv for kv in s.items()]
        env = dict(os.environ, S3_CHECK_IDX="0", **(env or {}))  # the listing is the point: one GET each
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(n)]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, (out + err)[-3000:])
            self.assertNotIn("Sanitizer", out + err)
            self.assertEqual(self.parse_kv(out.splitlines(), "LISTED")["count"], 1100)
        listings = {tuple(x for x in out.splitlines() if x.startswith("O ")) for out, _ in outs}
        self.assertEqual(len(listings), 1, "the ranks' listings differ")
        self.assertEqual(len(listings.pop()), 1100)
        return outs

    def test_listing_once_per_node(self):
        # issue 30: four ranks of a node (four processes sharing cache_dir, started together) list the bucket
        # once between them: one rank's pages, every rank the same listing
        ENV.proxy(latency_ms=20)
        with tempfile.TemporaryDirectory() as tmp:
            outs = self.list_together(tmp)
            c = ENV.counts()
            self.assertEqual(c["list"], 2, "four ranks of a node sent %d ListObjectsV2 pages, one rank's are 2"
                             % c["list"])
            self.assertEqual(sum(self.parse_kv(out.splitlines(), "LISTED")["list_requests"] for out, _ in outs), 2)

    def test_listing_wait_follows_progress(self):
        # the others wait past the shortest wait while the lister shows progress: a page at a time, 2 s each
        # here, 4 s in all, where the hook shortens the wait to 0.5 s and the allowed stall to 3 s; one listing
        # still (a lister showing none would be left after 3 s, and each rank would list again)
        ENV.proxy(latency_ms=2000)
        with tempfile.TemporaryDirectory() as tmp:
            outs = self.list_together(tmp, env={"LADE_TEST_HOOK_NODEFILE_WAIT": "0.5,3"})
            self.assertEqual(ENV.counts()["list"], 2)
            self.assertFalse([e for _, e in outs if "going on without it" in e])

    def test_listing_wait_gives_up_on_a_stalled_lister(self):
        # a process that holds the listing's lock and shows no progress (here: this test, holding an empty
        # listing file's flock) is waited for at most the shortest wait and the allowed stall (0.5 + 1 s by
        # the hook), then the rank lists alone, warned
        import fcntl
        ENV.proxy(latency_ms=5)
        with tempfile.TemporaryDirectory() as tmp:
            self.list_together(tmp, n=1)
            path, = glob.glob(os.path.join(tmp, "cache", "listing-*.bin"))
            with open(path, "r+b") as f:
                f.truncate(0)  # not a usable listing: the next rank takes the lock to list
                fcntl.flock(f, fcntl.LOCK_EX)
                os.utime(path, (time.time() - 60, time.time() - 60))
                ENV.reset()
                t0 = time.time()
                (_, err), = self.list_together(tmp, n=1, env={"LADE_TEST_HOOK_NODEFILE_WAIT": "0.5,1"})
                took = time.time() - t0
            self.assertIn("shown no progress", err)
            self.assertIn("going on without it", err)
            self.assertLess(took, 30)
            self.assertEqual(ENV.counts()["list"], 2)

    def mpirun_bench(self, np, epochs, latency_ms, folder="cache_dir", **settings):
        """`lade bench` of s3://lade/many under `mpirun -np NP` (one host, the ranks sharing `folder`: cache_dir,
        or index_dir alone): the ranks' JSON lines and the server's counts."""
        cli = os.environ.get("LADE_CLI") or os.path.join(os.path.dirname(S3_CHECK), "..", "lade")
        mpirun = shutil.which("mpirun")
        if not mpirun or not os.path.exists(cli):
            self.skipTest("needs mpirun and the lade CLI")
        if "TSAN_OPTIONS" in os.environ:  # the release ctest runs it; Open MPI's own threads are not TSan-clean
            self.skipTest("mpirun under ThreadSanitizer")
        if "mpi" not in subprocess.run([cli, "--version"], capture_output=True, text=True).stdout:
            self.skipTest("the lade CLI was built without MPI")
        ENV.proxy(latency_ms=latency_ms)
        with tempfile.TemporaryDirectory() as tmp:
            s = dict(ENV.lade_settings(), s3_session_token=SESSION_TOKEN, listing_ttl="3600", raw_size="8",
                     **settings)
            s[folder] = os.path.join(tmp, "cache")
            out_dir = os.path.join(tmp, "out")  # one stdout file per rank: long JSON lines interleave on one pipe
            args = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np), "--output-filename", out_dir,
                    cli, "bench", "s3://lade/many",
                    "--transform", "raw", "--batch-size", "25", "--epochs", str(epochs), "--threads", "2", "--json",
                    "--no-ceiling"]
            for kv in s.items():
                args += ["--set", "%s=%s" % kv]
            r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
            outs = []
            for root, _, files in os.walk(out_dir):
                outs += [open(os.path.join(root, f)).read() for f in files if f in ("stdout", "stderr")]
            self.assertNotIn(ENV.secret_key, r.stdout + r.stderr + "".join(outs))
            runs = [json.loads(ln) for o in outs for ln in o.splitlines() if ln.startswith("{")]
            self.assertEqual(len(runs), np, "".join(outs)[-2000:])
            self.assertEqual(sum(x["samples"] for x in runs), epochs * 1100)
            self.assertEqual(sorted(x["rank"] for x in runs), list(range(np)))
            self.assertEqual(sum(sum(x["samples_by_source"]) for x in runs), epochs * 1100)
            return runs, ENV.counts()

    def test_requests_of_a_job_under_mpirun(self):
        # issue 30: `lade bench` under mpirun -np 4 (one node, the ranks sharing cache_dir): the server sees one
        # rank's listing (2 ListObjectsV2 pages for 1,100 keys), no HEAD, and the GETs the ranks count (none
        # hidden). The node's ranks fetch each key into their shared disk folder once between them: their DELI
        # prefetchers and their workers claim each fetch node-wide (cache/claims.h), so a key one rank fetches for
        # its epoch 0 is not fetched again by the rank that reads it in epoch 1 (before: 1,991 GETs for 1,100 keys,
        # 891 of them in the second epoch, each prefetcher fetching its own future). What may still be fetched
        # twice, at the start: each rank's first window (prefetch + 1 = 3 batches of 25), requested before any
        # claim exists, and a sample a worker needs while another rank's prefetcher has it claimed but not yet
        # put (the worker does not wait for a prefetch: 1,357-1,482 GETs in 5 runs).
        runs, c = self.mpirun_bench(4, 2, 5)
        self.assertEqual(c["list"], 2, "four ranks of a node sent %d ListObjectsV2 pages, one rank's are 2"
                         % c["list"])
        self.assertEqual(c.get("head", 0), 0)
        self.assertEqual(c["get"], sum(x["get_requests"] for x in runs))
        self.assertGreaterEqual(c["get"], 1100)  # every sample once
        self.assertLessEqual(c["get"], 1650, "%d GETs for 1,100 keys" % c["get"])
        second = sum(x["epochs"][1]["get_requests"] for x in runs)
        self.assertLessEqual(second, 55, "the second epoch sent %d GETs; it reads the node's disk folder" % second)
        over = {k: n for k, n in c["by_key"].items() if k.startswith("/lade/many/") and n > 2}
        self.assertEqual(over, {}, "keys fetched more than twice")

    def test_listing_once_per_job_of_one_rank_nodes(self):
        # issue 30: four one-rank nodes (ranks_per_node=1 under mpirun -np 4) whose index_dir is a folder they
        # share (a cluster's shared file system) list the bucket once between them: one rank's 2 pages, no HEAD,
        # 1.00 GET per sample per epoch
        runs, c = self.mpirun_bench(4, 1, 5, folder="index_dir", ranks_per_node="1")
        self.assertEqual(c["list"], 2, "four one-rank nodes sent %d ListObjectsV2 pages, one rank's are 2"
                         % c["list"])
        self.assertEqual(sum(x["list_requests"] for x in runs), 2)
        # no HEAD, and one GET per sample per epoch for the job (each rank reads its part)
        self.assertEqual((c.get("head", 0), c["get"], sum(x["get_requests"] for x in runs)), (0, 1100, 1100))

    def test_requests_in_flight_are_the_nodes(self):
        # issue 30: http_max_concurrency bounds the node's requests in flight, not each rank's: under
        # mpirun -np 4 with a bound of 8 and 20 ms per request (so that requests overlap), the server never
        # has more than 8 open at once (each rank's share is 2; before, 4 ranks x 8 reached 20-32)
        runs, c = self.mpirun_bench(4, 1, 20, http_max_concurrency="8")
        self.assertLessEqual(c["max_open"], 8, "4 ranks of a node had %d requests open at once" % c["max_open"])
        self.assertGreaterEqual(c["max_open"], 4, "the ranks' requests never overlapped: the test shows nothing")

    def test_label_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            lf = os.path.join(tmp, "labels.txt")
            with open(lf, "w") as f:
                f.write("# key label\n")
                f.write("a&b/one <1>.bin 5\n")
                f.write("zz/x~y%z\"w.bin 2\n")
                f.write("a&b/two+two=4 'q'.bin   0\n")
            lines, _ = self.run_check("source", "s3://lade/mixed", label_file=lf)
            labels = {o.split(" ", 4)[4]: int(o.split()[2]) for o in lines if o.startswith("O ")}
            self.assertEqual(labels, {"s3://lade/mixed/top.bin": -1, "s3://lade/mixed/a&b/one <1>.bin": 5,
                                      "s3://lade/mixed/a&b/two+two=4 'q'.bin": 0,
                                      "s3://lade/mixed/zz/x~y%z\"w.bin": 2})
            self.assertEqual(self.parse_kv(lines, "LISTED")["classes"], 6)
        # the same from the bucket
        ENV.put("labels/mixed.txt", b"top.bin 3\n")
        lines, _ = self.run_check("source", "s3://lade/mixed", label_file="s3://lade/labels/mixed.txt")
        self.assertEqual([int(o.split()[2]) for o in lines if o.startswith("O ")], [-1, -1, -1, 3])

    # ---- the engine's use of the source: requests overlap, caches, prefetcher
    def cache_files(self, cache):
        """(count, bytes) of the disk tier's entry files below cache (the listing file excluded)."""
        n = size = 0
        for root, _, names in os.walk(cache):
            for nm in names:
                if root == cache or nm in ("LOCK", "NAMESPACE") or nm.startswith(".tmp"):
                    continue
                n += 1
                size += os.path.getsize(os.path.join(root, nm))
        return n, size

    def test_engine_keeps_many_requests_in_flight(self):
        # 2 worker threads, 20 ms per request: the engine submits whole batches, so far more
        # than 2 requests are open at once and the epoch takes far less than 300 x 20 ms / 2
        ENV.proxy(latency_ms=20)
        lines, elapsed = self.loader(epochs=1, threads=2, prefetch=4)
        self.check_epochs(lines, 1, img_order())
        self.assertGreaterEqual(ENV.counts()["max_open"], 16)
        self.assertLess(elapsed, 3.0)
        st = self.parse_kv(lines, "LSTATS")
        self.assertEqual(st["get_requests"], 300)  # raw_size is set: sample 0 is not read alone first
        self.assertEqual(st["storage"], 300)

    def test_prefetcher_disk_cache_half_the_dataset(self):
        ENV.proxy(latency_ms=5)
        blocks = lambda n: (48 + n + 4095) // 4096 * 4096
        half = sum(blocks(len(v)) for v in IMG.values()) // 2
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            lines, _ = self.loader(epochs=3, cache_dir=cache, cache_disk_bytes=half, prefetch=1)
            self.check_epochs(lines, 3, img_order())
            st = self.parse_kv(lines, "LSTATS")
            self.assertGreater(st["fetch_size"], 0)
            self.assertGreater(st["prefetched"], 100)
            self.assertGreater(st["disk"], 300)
            self.assertEqual(st["storage"] + st["disk"], 900)
            # the cache saved requests: fewer GETs than 3 uncached epochs
            self.assertLess(ENV.counts()["get"], 3 * 300)
            n, size = self.cache_files(cache)
            self.assertLessEqual(size, half, "the disk tier exceeded its capacity")
            self.assertGreater(n, 0)
            self.assertEqual(os.stat(cache).st_mode & 0o777, 0o700)
            eps = [x for x in lines if x.startswith("EPOCH ")]
            self.assertEqual(len(eps), 3)

    def test_prefetcher_one_get_per_sample(self):
        # issue 30: one rank, a disk cache that holds the dataset, the DELI prefetcher on (auto) and the
        # engine's read-ahead beside it: every key is fetched once in three epochs (300 GETs). A sample the
        # read-ahead requests is the engine's: the prefetcher neither requests it again for a later epoch nor
        # puts it, the worker that reads it does (before: 355 GETs, 55 keys twice, the read-ahead's request of
        # the first batches and the prefetcher's of the same samples for epoch 1)
        ENV.proxy(latency_ms=5)
        with tempfile.TemporaryDirectory() as tmp:
            lines, _ = self.loader(epochs=3, cache_dir=os.path.join(tmp, "cache"), cache_disk_bytes=100 << 20,
                                   prefetch=2)
            self.check_epochs(lines, 3, img_order())
            st = self.parse_kv(lines, "LSTATS")
            self.assertGreater(st["prefetched"], 0, "the prefetcher fetched nothing: the test shows nothing")
            by_key = {k: n for k, n in ENV.counts()["by_key"].items() if k.startswith("/lade/img/")}
            self.assertEqual(len(by_key), 300)
            self.assertEqual({k: n for k, n in by_key.items() if n > 1}, {}, "keys fetched more than once")

    def test_warm_second_run_and_kill9_during_fill(self):
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            kw = dict(cache_dir=cache, cache_disk_bytes=100 << 20, prefetcher="off", listing_ttl=3600)
            # a first run killed with SIGKILL while it fills the cache (50 ms per request: mid-way)
            ENV.proxy(latency_ms=50)
            base = dict(transform="raw", raw_size=MAX_SIZE, batch_size=20, shuffle=True, drop_last=True, epochs=1,
                        threads=2, prefetch=1)
            s = {"source": "s3://lade/img", "s3_session_token": SESSION_TOKEN}
            s.update(ENV.lade_settings())
            s.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in dict(base, **kw).items()})
            p = subprocess.Popen([S3_CHECK, "loader"] + ["%s=%s" % kv for kv in s.items()], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            t0 = time.time()
            while self.cache_files(cache)[0] < 20 and time.time() - t0 < 60 and p.poll() is None:
                time.sleep(0.005)
            p.kill()
            p.wait()
            n_killed, _ = self.cache_files(cache)
            self.assertGreater(n_killed, 0, "the kill came before any entry was written")
            self.assertLess(n_killed, 300, "the kill came after the fill finished")
            # a damaged entry (as a torn write would leave) is detected, not served
            victim = None
            for root, _, names in os.walk(cache):
                for nm in names:
                    if root != cache and nm not in ("LOCK", "NAMESPACE") and not nm.startswith(".tmp"):
                        victim = os.path.join(root, nm)
            with open(victim, "r+b") as f:
                f.seek(-1, 2)
                b = f.read(1)
                f.seek(-1, 2)
                f.write(bytes([b[0] ^ 1]))
            # the next run serves what survived (checked byte for byte) and fetches the rest
            ENV.reset()
            lines, _ = self.loader(**kw)
            self.check_epochs(lines, 1, img_order())
            st = self.parse_kv(lines, "LSTATS")
            self.assertEqual(st["list_requests"], 0)  # the listing came from cache_dir
            self.assertGreaterEqual(st["disk"], n_killed - 2)
            self.assertEqual(st["storage"] + st["disk"], 300)
            self.assertLessEqual(st["get_requests"], 300 - n_killed + 2)
            # a third run is warm: no request at all
            ENV.reset()
            lines, _ = self.loader(**kw)
            self.check_epochs(lines, 1, img_order())
            st = self.parse_kv(lines, "LSTATS")
            self.assertEqual((st["get_requests"], st["list_requests"], st["disk"]), (0, 0, 300))
            c = ENV.counts()
            self.assertEqual((c["get"], c["list"]), (0, 0))


DOTS = {"dots/x/../y.bin": b"x-dot-dot-y" * 7, "dots/y.bin": b"plain y", "dots/./z.bin": b"dot z" * 3,
        "dots/z.bin": b"plain z" * 5, "dots/w/..": b"w dot dot", "dots/w/.": b"w dot!", "dots/../up.bin": b"up" * 9}
PAGED = {"c/k%02d" % i: b"%d" % i * (i + 1) for i in range(40)}


class TestS3Pack(unittest.TestCase):
    """`lade pack s3://... --to tar`: the objects of an s3 prefix as WebDataset shards that Python's tarfile
    reads back as the uploaded bytes, keys and labels, in the source's order; resumable."""

    def setUp(self):
        if ENV is None:
            self.skipTest("no S3 server")
        ENV.reset()
        self.cli = os.environ.get("LADE_CLI") or os.path.join(os.path.dirname(S3_CHECK), "..", "lade")
        if not os.path.exists(self.cli):
            self.skipTest("no lade CLI at %s (set LADE_CLI)" % self.cli)

    def pack(self, out, expect_ok=True):
        s = dict(ENV.lade_settings(), s3_session_token=SESSION_TOKEN, s3_retry_base_ms="5")
        args = [self.cli, "pack", "s3://lade/img", "--to", "tar", "--shard-size", "1MB", out]
        for kv in s.items():
            args += ["--set", "%s=%s" % kv]
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        self.assertNotIn("Sanitizer", r.stdout + r.stderr)
        self.assertNotIn(ENV.secret_key, r.stdout + r.stderr)
        if expect_ok:
            self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
        return r

    def read_back(self, out):
        import tarfile
        names = sorted(f for f in os.listdir(out) if f.endswith(".tar"))
        members = []
        for n in names:
            with tarfile.open(os.path.join(out, n)) as t:
                for m in t.getmembers():
                    members.append((m.name, t.extractfile(m).read()))
        return names, members

    def test_pack_s3_prefix_to_tar_shards(self):
        out = tempfile.mkdtemp(prefix="lade-pack-s3-")
        ENV.proxy(latency_ms=5, rules=[{"action": "503", "count": 3}])  # retried like any loader's requests
        r = self.pack(out)
        self.assertIn("packed %d samples" % len(IMG), r.stdout)
        self.assertEqual(ENV.counts()["faults"], {"503": 3})
        names, members = self.read_back(out)
        self.assertGreater(len(names), 3)  # ~3.3 MB in 1 MB shards
        want = []
        for key in img_order():
            rel = key[len("img/"):]
            want.append((rel, IMG[key]))
            want.append((rel[:-len(".bin")] + ".cls", b"%d" % CLASSES.index(key.split("/")[1])))
        self.assertEqual([m[0] for m in members], [w[0] for w in want])
        self.assertTrue(all(a[1] == b[1] for a, b in zip(members, want)), "a member's bytes differ")
        # resumable: a lost last shard is written again, the others kept, the bytes the same
        last = os.path.join(out, names[-1])
        with open(last, "rb") as f:
            last_bytes = f.read()
        os.unlink(last)
        ENV.reset()
        r = self.pack(out)
        self.assertIn("kept %d complete shards" % (len(names) - 1), r.stdout)
        with open(last, "rb") as f:
            self.assertEqual(f.read(), last_bytes)
        # lade reads the shards back as the same samples, labels and bytes as the prefix
        lines, _ = TestS3.run_check(self, "loader", out, transform="raw", raw_size=MAX_SIZE, batch_size=20,
                                    shuffle=False, epochs=1)
        got = [ln.split() for ln in lines if ln.startswith("S ")]
        order = img_order()
        self.assertEqual(len(got), len(order))
        for _, _, _, idx, label, size, c in got:
            key = order[int(idx)]
            self.assertEqual((int(label), int(size), c), (CLASSES.index(key.split("/")[1]), len(IMG[key]),
                                                           crc(IMG[key])))


    def test_pack_s3_npy_objects_to_hdf5(self):
        """`lade pack s3://.../npy --to hdf5`: h5py reads the arrays and labels back, in the source's order."""
        import io
        try:
            import h5py
            import numpy as np
        except ImportError as e:
            self.skipTest("needs h5py and numpy: %s" % e)
        objs, want = {}, []
        for c in ("a", "b"):
            for i in range(6):
                arr = np.arange(12, dtype=np.float32).reshape(3, 4) * (i + 1) + (1000 if c == "b" else 0)
                b = io.BytesIO()
                np.save(b, arr)
                objs["packnpy/%s/%s_%d.npy" % (c, c, i)] = b.getvalue()
                want.append((arr, 0 if c == "a" else 1))
        ENV.put_many(objs)
        out = os.path.join(tempfile.mkdtemp(prefix="lade-pack-s3-h5-"), "d.h5")
        args = [self.cli, "pack", "s3://lade/packnpy", "--to", "hdf5", out]
        for kv in dict(ENV.lade_settings(), s3_session_token=SESSION_TOKEN).items():
            args += ["--set", "%s=%s" % kv]
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
        with h5py.File(out, "r") as f:
            self.assertEqual(f["data"].shape, (12, 3, 4))
            self.assertEqual(f["data"].dtype, np.float32)
            for i, (arr, label) in enumerate(want):
                np.testing.assert_array_equal(f["data"][i], arr)
                self.assertEqual(int(f["labels"][i]), label)


class TestFakeS3(unittest.TestCase):
    """Faults s3rver cannot show, against tests/s3/fakes3.py."""

    def run_fake(self, fake, mode, source, expect_ok=True, timeout=60, **settings):
        s = dict(fake.lade_settings(), source=source, s3_retry_base_ms=5)
        s.update({k: str(v) for k, v in settings.items()})
        r = subprocess.run([S3_CHECK, mode] + ["%s=%s" % kv for kv in s.items()], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
        self.assertNotIn(fake.secret_key, r.stdout)
        self.assertNotIn("Sanitizer", r.stdout)
        lines = r.stdout.splitlines()
        if expect_ok:
            self.assertEqual(r.returncode, 0, r.stdout[-3000:])
            self.assertEqual(lines[-1], "OK")
        else:
            self.assertNotEqual(r.returncode, 0, r.stdout[-3000:])
        return lines

    def test_listing_page_cut_before_is_truncated(self):
        # the first page cut in half (IsTruncated and NextContinuationToken come after the objects) was taken
        # as the whole listing: 10 of 40 objects and exit 0
        with fakes3.FakeS3(PAGED, page_size=20) as f:
            f.cut_lists = 1
            lines = self.run_fake(f, "source", "s3://fake/c")
            self.assertEqual(TestS3.parse_kv(self, lines, "LISTED")["count"], 40)
            self.assertEqual(f.count("GET", list_only=True), 3)  # the cut page again, then page 2
            self.assertEqual(TestS3.parse_kv(self, lines, "STATS")["retries"], 1)
            f.cut_lists = 1000
            lines = self.run_fake(f, "source", "s3://fake/c", expect_ok=False, s3_retries=2)
            self.assertRegex(lines[-1], r"^ERROR LADE_EREMOTE s3://fake/c/: the listing page \(\d+ bytes\) ends before "
                                        r"</ListBucketResult>: cut short after 2 retries$")

    def test_listing_repeats_keys(self):
        # every page after the first starts with the previous page's last object: 41 samples of 40 objects
        with fakes3.FakeS3(PAGED, page_size=20) as f:
            f.dup_keys = True
            lines = self.run_fake(f, "source", "s3://fake/c", expect_ok=False)
            self.assertEqual(lines[-1], "ERROR LADE_EFORMAT s3://fake/c/: the listing names s3://fake/c/k19 twice "
                                        "(40 and 40 bytes): the server (or a proxy) repeated it; one object is not "
                                        "made two samples")

    def test_listing_repeated_token_stops(self):
        # IsTruncated=true with the token it was asked with: listed forever (the process never ended)
        with fakes3.FakeS3(PAGED, page_size=20) as f:
            f.loop_token = True
            lines = self.run_fake(f, "source", "s3://fake/c", expect_ok=False, timeout=30)
            self.assertEqual(lines[-1], "ERROR LADE_EREMOTE s3://fake/c/: listing page 2 says IsTruncated=true with "
                                        "the continuation token 't20', which an earlier page already gave: the "
                                        "server's listing does not advance; stopped")
            self.assertEqual(f.count("GET", list_only=True), 2)

    def test_dot_segment_keys(self):
        # "dots/x/../y.bin" was sent as /fake/dots/y.bin (curl removes dot segments): another object's bytes
        with fakes3.FakeS3(DOTS) as f:
            lines = self.run_fake(f, "source", "s3://fake/dots", s3_retries=0)
            names = {int(x.split()[1]): x.split(" ", 4)[4][len("s3://fake/"):] for x in lines if x.startswith("O ")}
            self.assertEqual(sorted(names.values()), sorted(DOTS))
            got = [x.split() for x in lines if x.startswith("G ")]
            self.assertEqual(len(got), len(DOTS) + 1)
            for _, i, size, c in got:
                data = DOTS[names[int(i)]]
                self.assertEqual((int(size), c), (len(data), crc(data)), names[int(i)])
            self.assertEqual(f.sig_failures, 0, "the SigV4 canonical URI differs from the path sent")
            for k in DOTS:
                self.assertEqual(f.count("GET", k), 2 if names[0] == k else 1, k)


if __name__ == "__main__":
    why = s3env.missing()
    if why:
        print("SKIPPED: " + why)
        sys.exit(77)
    if not os.path.exists(S3_CHECK):
        print("SKIPPED: s3_check not built (set S3_CHECK)")
        sys.exit(77)
    try:
        s3env.ensure_s3rver()
    except Exception as e:  # no registry access: cannot test, not a failure of lade
        print("SKIPPED: cannot install s3rver: %s" % e)
        sys.exit(77)
    unittest.main(verbosity=2)
