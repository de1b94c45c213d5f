"""s3env.py - an S3-compatible server on loopback for lade's tests and benchmarks.

    from s3env import S3Env, missing
    if missing(): skip(missing())
    with S3Env(latency_ms=20) as env:
        env.put("train/cat/0.jpg", b"...")
        env.endpoint, env.bucket, env.access_key, env.secret_key   # lade goes through the fault proxy
        env.proxy(rules=[{"action": "503", "count": 5}]); env.counts()

Starts s3rver (installed once with npm into $LADE_NODE_DIR, default
~/.cache/lade/node) with a temporary data folder, and tests/s3/faultproxy.js in
front of it. Uploads go straight to s3rver with boto3; `endpoint` is the
proxy's. Run as a script it serves until interrupted:
    /usr/bin/python3 tests/s3/s3env.py [--latency-ms N]
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
S3RVER_VERSION = "3.7.1"
ACCESS_KEY = "S3RVER"
# s3rver checks the access key id but not SigV4 signatures: the secret is free, and faultproxy.js
# verifies every signature with it. A distinctive value lets tests grep outputs for leaks.
SECRET_KEY = "lade-test-secret-Qz8vK2"


def missing():
    """Why the S3 environment cannot run here ("" when it can)."""
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            return "%s not found (apt-get install nodejs npm)" % tool
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "python3-boto3 not installed"
    return ""


def node_dir():
    return os.environ.get("LADE_NODE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "lade", "node")


def ensure_s3rver():
    """Path of the s3rver executable, installing it with npm the first time."""
    d = node_dir()
    exe = os.path.join(d, "node_modules", ".bin", "s3rver")
    if os.path.exists(exe):
        return exe
    os.makedirs(d, exist_ok=True)
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", d, "s3rver@" + S3RVER_VERSION],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0 or not os.path.exists(exe):
        raise RuntimeError("npm install s3rver@%s failed:\n%s" % (S3RVER_VERSION, r.stdout[-3000:]))
    return exe


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("%s exited early with status %s" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not start listening on port %d" % (what, port))


class S3Env:
    def __init__(self, latency_ms=0, bucket="lade", verify_sigv4=True):
        self.bucket = bucket
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY
        self.region = "us-east-1"
        self._latency = latency_ms
        self._verify = verify_sigv4
        self._procs = []
        self._logs = []
        self._tmp = None
        self._client = None

    # ---- lifetime
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        exe = ensure_s3rver()
        self._tmp = tempfile.mkdtemp(prefix="lade-s3-")
        env = dict(os.environ)
        # s3rver 3.7 signs continuation tokens with a cipher Node >= 17 only has in the legacy provider
        major = int(subprocess.run(["node", "-p", "process.versions.node.split('.')[0]"], stdout=subprocess.PIPE,
                                   text=True).stdout.strip() or 0)
        if major >= 17:
            env["NODE_OPTIONS"] = (env.get("NODE_OPTIONS", "") + " --openssl-legacy-provider").strip()
        sport = free_port()
        log = open(os.path.join(self._tmp, "s3rver.log"), "w")
        self._logs.append(log)
        p = subprocess.Popen([exe, "-d", os.path.join(self._tmp, "data"), "-a", "127.0.0.1", "-p", str(sport),
                              "--silent", "--configure-bucket", self.bucket], stdout=log, stderr=log, env=env)
        self._procs.append(p)
        wait_port(sport, p, "s3rver")
        self.direct_endpoint = "http://127.0.0.1:%d" % sport
        pport = free_port()
        plog = open(os.path.join(self._tmp, "proxy.log"), "w")
        self._logs.append(plog)
        q = subprocess.Popen(["node", os.path.join(HERE, "faultproxy.js"), "--listen", "127.0.0.1:%d" % pport,
                              "--upstream", "127.0.0.1:%d" % sport], stdout=plog, stderr=plog)
        self._procs.append(q)
        wait_port(pport, q, "faultproxy")
        self.endpoint = "http://127.0.0.1:%d" % pport
        self.reset()

    def stop(self):
        if self._client is not None:
            self._client.close()
            self._client = None
        for p in reversed(self._procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self._procs = []
        for f in self._logs:
            f.close()
        self._logs = []
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # ---- data
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config
            self._client = boto3.client("s3", endpoint_url=self.direct_endpoint, aws_access_key_id=self.access_key,
                                        aws_secret_access_key=self.secret_key, region_name=self.region,
                                        config=Config(max_pool_connections=16, s3={"addressing_style": "path"}))
        return self._client

    def put(self, key, data):
        self.client().put_object(Bucket=self.bucket, Key=key, Body=data)

    def put_many(self, items, workers=8):
        """Uploads {key: bytes} with a few threads."""
        from concurrent.futures import ThreadPoolExecutor
        c = self.client()
        with ThreadPoolExecutor(workers) as ex:
            list(ex.map(lambda kv: c.put_object(Bucket=self.bucket, Key=kv[0], Body=kv[1]), items.items()))

    def delete(self, key):
        self.client().delete_object(Bucket=self.bucket, Key=key)

    # ---- proxy control
    def _ctl(self, path, obj=None):
        data = None if obj is None else json.dumps(obj).encode()
        req = urllib.request.Request(self.endpoint + "/__proxy/" + path, data=data,
                                     method="GET" if data is None else "POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def proxy(self, latency_ms=None, rules=None, bandwidth_mb_s=None):
        c = {}
        if latency_ms is not None:
            c["latency_ms"] = latency_ms
        if bandwidth_mb_s is not None:
            c["bandwidth_mb_s"] = bandwidth_mb_s
        if rules is not None:
            c["rules"] = rules
        return self._ctl("config", c)

    def reset(self):
        """Clears the proxy's rules and counters; keeps this env's latency and signature check."""
        self._ctl("reset", {})
        self._ctl("config", {"latency_ms": self._latency, "secret": self.secret_key if self._verify else ""})

    def counts(self):
        return self._ctl("counts")

    def lade_settings(self):
        """The lade settings that point at this server (through the proxy)."""
        return {"s3_endpoint": self.endpoint, "s3_region": self.region, "s3_access_key_id": self.access_key,
                "s3_secret_access_key": self.secret_key}

    def lade_env(self):
        """The same as AWS_* environment variables."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": self.region, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key}


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="serve s3rver + faultproxy on loopback until interrupted")
    ap.add_argument("--latency-ms", type=int, default=0)
    ap.add_argument("--bucket", default="lade")
    a = ap.parse_args()
    why = missing()
    if why:
        sys.exit("s3env: " + why)
    with S3Env(latency_ms=a.latency_ms, bucket=a.bucket) as e:
        print(json.dumps({"endpoint": e.endpoint, "direct_endpoint": e.direct_endpoint, "bucket": e.bucket,
                          "access_key": e.access_key, "secret_key": e.secret_key, "region": e.region}), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
