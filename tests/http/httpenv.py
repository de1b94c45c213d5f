"""httpenv.py - a real HTTP server for lade's http(s):// tar shard tests: nginx from Debian serving a
folder on 127.0.0.1 (a free port, started and stopped here; Range requests are on by default), and
optionally tests/s3/faultproxy.js in front of it for latency and faults.

    with NginxEnv(folder) as env:        # env.url = "http://127.0.0.1:PORT"
        env.access_log()                  # [(method, path, status, bytes), ...]
        env.stop_server()                 # nginx goes away mid-run
    with NginxEnv(folder, proxy=True) as env:   # env.url goes through the fault proxy
        env.proxy(latency_ms=20, rules=[{"action": "503", "count": 3}])
    with NginxEnv(folder, tls=True) as env:     # also HTTPS, certificates made by openssl in its temp dir
        env.tls_url                      # "https://127.0.0.1:PORT2": a server certificate for 127.0.0.1/localhost
        env.ca_file                      # the throwaway CA that signed it (PEM)
        env.other_ca_file                # a CA that signed nothing nginx serves
        env.wrong_host_url               # "https://127.0.0.1:PORT3": signed by ca_file, but for wrong.invalid
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "s3"))
import s3env  # noqa: E402  (free_port, wait_port)

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def missing():
    """Why the environment cannot run (None when it can)."""
    if not NGINX:
        return "nginx is not installed (apt-get install nginx; scripts/install-deps.sh does)"
    return None


def missing_tls():
    """Why HTTPS cannot be served (None when it can)."""
    if not shutil.which("openssl"):
        return "openssl is not installed (apt-get install openssl)"
    why = missing()
    if why:
        return why
    v = subprocess.run([NGINX, "-V"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    return None if "http_ssl_module" in v else "nginx lacks http_ssl_module"


def _openssl(*args, cwd):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), r.stdout))


def make_ca(d, name):
    """A throwaway CA in d: name.key, name.pem."""
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=lade test " + name,
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=d)
    return os.path.join(d, name + ".pem")


def make_server_cert(d, name, ca, san, serial):
    """A server certificate name.pem (key name.key) for subjectAltName san, signed by CA ca (make_ca's name)."""
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n" % san)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", name + ".key",
             "-out", name + ".csr", "-subj", "/CN=" + san.split(",")[0].split(":")[1], cwd=d)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key", "-set_serial",
             str(serial), "-days", "2", "-out", name + ".pem", "-extfile", name + ".ext", cwd=d)
    return os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")


TLS_SERVER = """
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {root};
  }}
"""


def missing_proxy():
    return None if shutil.which("node") else "node is not installed (for tests/s3/faultproxy.js)"


CONF = """daemon off;
worker_processes 1;
error_log {d}/error.log;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  log_format lade '$request_method $uri $status $body_bytes_sent $http_range';
  access_log {d}/access.log lade;
  client_body_temp_path {d}/tmp;
  proxy_temp_path {d}/tmp;
  fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp;
  scgi_temp_path {d}/tmp;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    {extra}
  }}
{tls}
}}
"""


class NginxEnv:
    def __init__(self, root, proxy=False, server_extra="", tls=False):
        self.root = os.path.abspath(root)
        self.with_proxy = proxy
        self.with_tls = tls
        self.server_extra = server_extra  # nginx directives added to the server block
        self._procs = []
        self._logs = []

    def __enter__(self):
        self._dir = tempfile.mkdtemp(prefix="lade-nginx-")
        os.mkdir(os.path.join(self._dir, "tmp"))
        self.port = s3env.free_port()
        tls = ""
        if self.with_tls:
            d = self._dir
            self.ca_file = make_ca(d, "ca")
            self.other_ca_file = make_ca(d, "otherca")
            cert, key = make_server_cert(d, "server", "ca", "IP:127.0.0.1,DNS:localhost", 2)
            wcert, wkey = make_server_cert(d, "wrong", "ca", "DNS:wrong.invalid", 3)
            self.tls_port = s3env.free_port()
            self.wrong_port = s3env.free_port()
            while self.wrong_port in (self.port, self.tls_port) or self.tls_port == self.port:
                self.tls_port, self.wrong_port = s3env.free_port(), s3env.free_port()
            tls = TLS_SERVER.format(port=self.tls_port, cert=cert, key=key, root=self.root) + \
                TLS_SERVER.format(port=self.wrong_port, cert=wcert, key=wkey, root=self.root)
        conf = os.path.join(self._dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(CONF.format(d=self._dir, port=self.port, root=self.root, extra=self.server_extra, tls=tls))
        log = open(os.path.join(self._dir, "stderr.log"), "w")
        self._logs.append(log)
        self.nginx = subprocess.Popen([NGINX, "-c", conf, "-p", self._dir], stdout=log, stderr=log)
        s3env.wait_port(self.port, self.nginx, "nginx")
        if self.with_tls:
            s3env.wait_port(self.tls_port, self.nginx, "nginx (https)")
            s3env.wait_port(self.wrong_port, self.nginx, "nginx (https)")
            self.tls_url = "https://127.0.0.1:%d" % self.tls_port
            self.wrong_host_url = "https://127.0.0.1:%d" % self.wrong_port
        self.server_url = "http://127.0.0.1:%d" % self.port
        self.url = self.server_url
        if self.with_proxy:
            pport = s3env.free_port()
            plog = open(os.path.join(self._dir, "proxy.log"), "w")
            self._logs.append(plog)
            q = subprocess.Popen(["node", os.path.join(HERE, "..", "s3", "faultproxy.js"), "--listen",
                                  "127.0.0.1:%d" % pport, "--upstream", "127.0.0.1:%d" % self.port],
                                 stdout=plog, stderr=plog)
            self._procs.append(q)
            s3env.wait_port(pport, q, "faultproxy")
            self.url = "http://127.0.0.1:%d" % pport
            self.proxy()
        return self

    def __exit__(self, *exc):
        self.stop_server()
        for p in self._procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in self._logs:
            f.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def stop_server(self):
        """Stops nginx at once (SIGTERM: fast shutdown, connections dropped)."""
        if self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGTERM)
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()

    def access_log(self):
        """The requests nginx served: (method, path, status, body bytes, range header)."""
        out = []
        path = os.path.join(self._dir, "access.log")
        if not os.path.exists(path):
            return out
        with open(path) as f:
            for ln in f:
                p = ln.split()
                out.append((p[0], p[1], int(p[2]), int(p[3]), p[4] if len(p) > 4 else "-"))
        return out

    def clear_log(self):
        open(os.path.join(self._dir, "access.log"), "w").close()

    # ---- the fault proxy (tests/s3/faultproxy.js)
    def _ctl(self, path, obj=None):
        data = None if obj is None else json.dumps(obj).encode()
        req = urllib.request.Request(self.url + "/__proxy/" + path, data=data,
                                     method="GET" if data is None else "POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def proxy(self, latency_ms=0, rules=None):
        self._ctl("reset", {})
        return self._ctl("config", {"latency_ms": latency_ms, "rules": rules or []})

    def counts(self):
        return self._ctl("counts")
