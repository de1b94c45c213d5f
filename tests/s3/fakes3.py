"""fakes3.py - a tiny S3 server on 127.0.0.1 for what s3rver cannot show: keys
with "./" and "../" segments (s3rver and boto3 both squash them) and
listings that break the protocol in the ways real servers and proxies do.

    with FakeS3({"d/a/../b": b"x"}, page_size=2) as s3:
        s3.endpoint, s3.bucket, s3.access_key, s3.secret_key
        s3.cut_lists = 1      # the next LIST reply is cut in half (Content-Length of the cut)
        s3.dup_keys = True    # every page after the first repeats the previous page's last object
        s3.loop_token = True  # every page after the first hands back the token it was asked with
        s3.requests           # [(method, raw path)], s3.sig_failures

Objects are found by their raw request path, percent-decoded and nothing
else: "/b/d/a/../b" is the key "d/a/../b". Every request's AWS SigV4
signature is checked with the raw path as the canonical URI (S3 does not
normalise it); a mismatch is a 403 SignatureDoesNotMatch. IsTruncated and
NextContinuationToken come after the objects, as in s3rver's replies.
"""
import hashlib
import hmac
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

ACCESS_KEY = "FAKEKEY"
SECRET_KEY = "fake-secret-Wm3pR8"
AUTH_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, *"
                     r"SignedHeaders=([^,]+), *Signature=([0-9a-f]+)$")


def _enc(s):
    return urllib.parse.quote(s, safe="-_.~")


def sigv4_problem(method, raw_path, query, headers, secret):
    """Why the request's SigV4 signature does not verify (None when it does)."""
    m = AUTH_RE.match(headers.get("Authorization", ""))
    if not m:
        return "no SigV4 Authorization header"
    _, date, region, service, signed, signature = m.groups()
    params = []
    for kv in query.split("&") if query else []:
        k, _, v = kv.partition("=")
        params.append((_enc(urllib.parse.unquote(k)), _enc(urllib.parse.unquote(v))))
    params.sort()
    names = signed.split(";")
    canon_headers = "".join("%s:%s\n" % (h, " ".join(str(headers.get(h, "")).split())) for h in names)
    payload = headers.get("x-amz-content-sha256")
    if not payload:
        return "no x-amz-content-sha256"
    canon = "\n".join([method, raw_path, "&".join("%s=%s" % p for p in params), canon_headers, signed, payload])
    scope = "%s/%s/%s/aws4_request" % (date, region, service)
    sts = "\n".join(["AWS4-HMAC-SHA256", headers.get("x-amz-date", ""), scope,
                     hashlib.sha256(canon.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    want = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(want, signature) else "signature mismatch"


class FakeS3:
    def __init__(self, objects, bucket="fake", page_size=1000):
        self.objects = dict(objects)
        self.bucket = bucket
        self.page_size = page_size
        self.access_key, self.secret_key, self.region = ACCESS_KEY, SECRET_KEY, "us-east-1"
        self.cut_lists = 0
        self.dup_keys = False
        self.loop_token = False
        self.requests = []
        self.sig_failures = 0
        self._lock = threading.Lock()
        self._server = None

    def __enter__(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                fake._handle(self, "GET")

            def do_HEAD(self):
                fake._handle(self, "HEAD")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.endpoint = "http://127.0.0.1:%d" % self._server.server_address[1]
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def lade_settings(self):
        return {"s3_endpoint": self.endpoint, "s3_region": self.region, "s3_access_key_id": self.access_key,
                "s3_secret_access_key": self.secret_key}

    def count(self, method, key=None, list_only=False):
        with self._lock:
            return sum(1 for m, p in self.requests
                       if m == method and (key is None or p == "/%s/%s" % (self.bucket, key))
                       and (not list_only or "list-type=2" in p))

    # ---- serving
    def _reply(self, h, status, body, ctype="application/xml", length=None):
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _error(self, h, status, code, message):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>"
                % (code, escape(message))).encode()
        self._reply(h, status, body)

    def _handle(self, h, method):
        raw_path, _, query = h.path.partition("?")
        with self._lock:
            self.requests.append((method, h.path))
        why = sigv4_problem(method, raw_path, query, h.headers, self.secret_key)
        if why:
            with self._lock:
                self.sig_failures += 1
            return self._error(h, 403, "SignatureDoesNotMatch", "fakes3: " + why)
        parts = raw_path.split("/", 2)
        if len(parts) < 2 or parts[1] != self.bucket:
            return self._error(h, 404, "NoSuchBucket", "The specified bucket does not exist")
        q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if len(parts) == 2 or parts[2] == "":
            if q.get("list-type") != "2":
                return self._error(h, 400, "InvalidRequest", "fakes3 lists with list-type=2 only")
            return self._list(h, q)
        key = urllib.parse.unquote(parts[2])
        if key not in self.objects:
            return self._error(h, 404, "NoSuchKey", "The specified key does not exist.")
        self._reply(h, 200, self.objects[key], "application/octet-stream")

    def _list(self, h, q):
        keys = sorted(k for k in self.objects if k.startswith(q.get("prefix", "")))
        token = q.get("continuation-token", "")
        start = int(token[1:]) if token else 0
        page = keys[start:start + self.page_size]
        if self.dup_keys and start > 0:
            page = [keys[start - 1]] + page
        more = start + self.page_size < len(keys)
        nxt = "t%d" % (start + self.page_size)
        if self.loop_token and token:
            more, nxt = True, token
        xml = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
               "<Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount><MaxKeys>%d</MaxKeys>"
               % (self.bucket, escape(q.get("prefix", "")), len(page), self.page_size)]
        for k in page:
            xml.append("<Contents><Key>%s</Key><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>"
                       % (escape(k), len(self.objects[k])))
        xml.append("<IsTruncated>%s</IsTruncated>" % ("true" if more else "false"))
        if more:
            xml.append("<NextContinuationToken>%s</NextContinuationToken>" % nxt)
        xml.append("</ListBucketResult>")
        body = "".join(xml).encode()
        with self._lock:
            cut = self.cut_lists > 0
            if cut:
                self.cut_lists -= 1
        if cut:
            body = body[:len(body) // 2]  # cut in transit; the length says the cut is all there is
        self._reply(h, 200, body)
