#!/usr/bin/env node
// faultproxy.js - a fault-injecting HTTP proxy in front of an S3 server, for
// lade's S3 tests and benchmarks.
//
//   node faultproxy.js --listen 127.0.0.1:0 --upstream 127.0.0.1:PORT [--port-file F]
//
// Prints "listening HOST:PORT" on stdout (and writes PORT to --port-file).
// Everything under /__proxy/ is the control endpoint, never forwarded:
//   POST /__proxy/config  JSON {latency_ms, secret, rules: [{action, match, count}]}
//        latency_ms: added to every forwarded request (a timer: requests overlap)
//        bandwidth_mb_s: the bucket's link, shared by all requests: response
//                bodies are delivered one after another at this rate (each
//                held until its turn on a virtual clock ends); 0: unlimited
//        secret: when set, every request's AWS SigV4 header signature is
//                verified with it (s3rver does not); a mismatch is a 403
//                SignatureDoesNotMatch and is counted in sig_failures
//        rules, tried in order, first match wins; `match` is a substring of
//        the decoded path (or "LIST" for ListObjectsV2 requests; absent: any
//        object GET); `count` how many requests it hits (-1: all):
//          503   503 SlowDown with an S3 XML error body
//          500   500 InternalError
//          403   403 AccessDenied      404  404 NoSuchKey
//          cut   the right headers, half the body, then the connection is cut
//          stall the headers (chunked: no length), then nothing (the connection stays open)
//          short a complete response one byte shorter than the object
//          endless  200 with a chunked body that never ends (100 MB/s, 1 MiB chunks)
//          huge     200 with Content-Length 50000000000, then bytes at 100 MB/s
//   POST /__proxy/reset   clears rules, latency and counters
//   GET  /__proxy/counts  JSON {total, list, get, head, by_key: {path: n}, faults: {action: n}, sig_failures,
//                                max_open, endless_bytes}
// Rules only hit GETs; HEADs are counted (and their signatures checked) and forwarded.
'use strict';
const http = require('http');
const crypto = require('crypto');

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const [lhost, lport] = arg('--listen', '127.0.0.1:0').split(':');
const [uhost, uport] = arg('--upstream', '127.0.0.1:4568').split(':');
const portFile = arg('--port-file', null);

const agent = new http.Agent({ keepAlive: true, maxSockets: 1024, maxFreeSockets: 1024 });
let state;
function reset() {
  state = { latency: 0, bandwidth: 0, linkFree: 0, secret: '', rules: [], total: 0, list: 0, get: 0, head: 0,
            byKey: new Map(), faults: {}, sigFailures: 0, open: 0, maxOpen: 0, endlessBytes: 0 };
}
reset();

function s3Error(res, status, code, message, key) {
  const body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message>` +
               `<Key>${key}</Key><RequestId>faultproxy</RequestId></Error>`;
  res.writeHead(status, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

// ---- SigV4 verification (the parts S3 GET/LIST use)
function enc(s) {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}
function hmac(key, s) { return crypto.createHmac('sha256', key).update(s).digest(); }
function verifySigV4(req, secret) {
  const auth = req.headers['authorization'] || '';
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, *SignedHeaders=([^,]+), *Signature=([0-9a-f]+)$/.exec(auth);
  if (!m) return 'no SigV4 Authorization header';
  const [, , date, region, service, signedHeaders, signature] = m;
  const [path, query = ''] = req.url.split('?', 2);
  const params = query ? query.split('&').map((kv) => {
    const i = kv.indexOf('=');
    const k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i)), v = i < 0 ? '' : decodeURIComponent(kv.slice(i + 1));
    return [enc(k), enc(v)];
  }) : [];
  params.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  const names = signedHeaders.split(';');
  if (!names.includes('host') || !names.includes('x-amz-date')) return 'host or x-amz-date not signed';
  if (!names.includes('x-amz-content-sha256')) return 'x-amz-content-sha256 not signed';
  const canonHeaders = names.map((h) => h + ':' + String(req.headers[h] || '').trim().replace(/\s+/g, ' ') + '\n').join('');
  const payload = req.headers['x-amz-content-sha256'];
  if (!payload) return 'no x-amz-content-sha256 header';
  const canon = [req.method, path, params.map((p) => p[0] + '=' + p[1]).join('&'), canonHeaders, signedHeaders, payload].join('\n');
  const scope = `${date}/${region}/${service}/aws4_request`;
  const sts = ['AWS4-HMAC-SHA256', req.headers['x-amz-date'], scope,
               crypto.createHash('sha256').update(canon).digest('hex')].join('\n');
  const key = hmac(hmac(hmac(hmac('AWS4' + secret, date), region), service), 'aws4_request');
  const want = crypto.createHmac('sha256', key).update(sts).digest('hex');
  return want === signature ? null : 'signature mismatch';
}

// ---- forwarding
function forward(req, res, body, fault) {
  const up = http.request({ host: uhost, port: uport, method: req.method, path: req.url, headers: req.headers, agent },
    (ures) => {
      if (!fault) {
        const len = Number(ures.headers['content-length'] || 0);
        if (state.bandwidth > 0 && len > 0) {
          // the shared link: this body's transfer ends len/bandwidth after
          // the previous one's (or now, when the link is idle)
          const now = Date.now();
          state.linkFree = Math.max(now, state.linkFree) + (len / (state.bandwidth * 1e6)) * 1000;
          const chunks = [];
          ures.on('data', (c) => chunks.push(c));
          ures.on('end', () => setTimeout(() => {
            res.writeHead(ures.statusCode, ures.headers);
            res.end(Buffer.concat(chunks));
          }, Math.max(0, state.linkFree - Date.now())));
          return;
        }
        res.writeHead(ures.statusCode, ures.headers);
        ures.pipe(res);
        return;
      }
      const chunks = [];
      ures.on('data', (c) => chunks.push(c));
      ures.on('end', () => {
        const all = Buffer.concat(chunks);
        const headers = Object.assign({}, ures.headers);
        if (fault === 'cut') {
          headers['content-length'] = String(all.length);
          res.writeHead(ures.statusCode, headers);
          res.write(all.subarray(0, all.length >> 1), () => setTimeout(() => res.socket && res.socket.destroy(), 5));
        } else if (fault === 'short') {
          const part = all.subarray(0, Math.max(0, all.length - 1));
          headers['content-length'] = String(part.length);
          delete headers['etag'];
          res.writeHead(ures.statusCode, headers);
          res.end(part);
        }
      });
    });
  up.on('error', (e) => {
    if (!res.headersSent) s3Error(res, 502, 'BadGateway', 'upstream: ' + e.message, '');
    else res.socket && res.socket.destroy();
  });
  up.end(body);
}

function handle(req, res, body) {
  const [rawPath, query = ''] = req.url.split('?', 2);
  let path;
  try { path = decodeURIComponent(rawPath); } catch (e) { path = rawPath; }
  if (path.startsWith('/__proxy/')) return control(req, res, path, body);
  state.total++;
  const isList = req.method === 'GET' && /(^|&)list-type=2(&|$)/.test(query);
  if (isList) state.list++;
  else if (req.method === 'GET') state.get++;
  else if (req.method === 'HEAD') state.head++;
  const countKey = isList ? 'LIST ' + path : req.method === 'HEAD' ? 'HEAD ' + path : path;
  state.byKey.set(countKey, (state.byKey.get(countKey) || 0) + 1);
  if (state.secret && (req.method === 'GET' || req.method === 'HEAD')) {
    const why = verifySigV4(req, state.secret);
    if (why) {
      state.sigFailures++;
      return s3Error(res, 403, 'SignatureDoesNotMatch', 'faultproxy: ' + why, path);
    }
  }
  let action = null;
  for (const r of state.rules) {
    if (r.count === 0) continue;
    const hit = r.match === 'LIST' ? isList : (!isList && req.method === 'GET' && (!r.match || path.includes(r.match)));
    if (!hit) continue;
    if (r.count > 0) r.count--;
    action = r.action;
    break;
  }
  if (action) state.faults[action] = (state.faults[action] || 0) + 1;
  const go = () => {
    switch (action) {
      case '503': return s3Error(res, 503, 'SlowDown', 'Please reduce your request rate.', path);
      case '500': return s3Error(res, 500, 'InternalError', 'We encountered an internal error. Please try again.', path);
      case '403': return s3Error(res, 403, 'AccessDenied', 'Access Denied', path);
      case '404': return s3Error(res, 404, 'NoSuchKey', 'The specified key does not exist.', path);
      case 'stall':
        res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
        res.flushHeaders();
        return; // nothing more; the client's timeout ends it
      case 'endless': case 'huge': {
        // a body that would fill the client's memory: 1 MiB every 10 ms until the client hangs up
        const headers = { 'Content-Type': 'application/octet-stream' };
        if (action === 'huge') headers['Content-Length'] = '50000000000';
        res.writeHead(200, headers);
        const chunk = Buffer.alloc(1 << 20, 0x61);
        const timer = setInterval(() => {
          if (res.destroyed || res.writableEnded) return clearInterval(timer);
          state.endlessBytes += chunk.length;
          res.write(chunk);
        }, 10);
        res.on('close', () => clearInterval(timer));
        return;
      }
      case 'cut': case 'short': return forward(req, res, body, action);
      default: return forward(req, res, body, null);
    }
  };
  if (state.latency > 0) setTimeout(go, state.latency);
  else go();
}

function control(req, res, path, body) {
  const reply = (obj) => {
    const s = JSON.stringify(obj);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(s) });
    res.end(s);
  };
  if (path === '/__proxy/reset') {
    reset();
    return reply({ ok: true });
  }
  if (path === '/__proxy/config') {
    let c;
    try { c = JSON.parse(body.toString() || '{}'); } catch (e) { res.writeHead(400); return res.end('bad json'); }
    if ('latency_ms' in c) state.latency = Number(c.latency_ms) || 0;
    if ('bandwidth_mb_s' in c) state.bandwidth = Number(c.bandwidth_mb_s) || 0;
    if ('secret' in c) state.secret = String(c.secret || '');
    if ('rules' in c) state.rules = (c.rules || []).map((r) => ({ action: String(r.action), match: r.match || '',
                                                             count: r.count === undefined ? -1 : Number(r.count) }));
    return reply({ ok: true });
  }
  if (path === '/__proxy/counts') {
    return reply({ total: state.total, list: state.list, get: state.get, head: state.head,
                   endless_bytes: state.endlessBytes, by_key: Object.fromEntries(state.byKey),
                   faults: state.faults, sig_failures: state.sigFailures, max_open: state.maxOpen,
                   rules_left: state.rules.map((r) => r.count) });
  }
  res.writeHead(404);
  res.end('unknown control path');
}

const server = http.createServer((req, res) => {
  state.open++;
  if (state.open > state.maxOpen) state.maxOpen = state.open;
  let done = false;
  const fin = () => { if (!done) { done = true; state.open--; } };
  res.on('finish', fin);
  res.on('close', fin);
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => handle(req, res, Buffer.concat(chunks)));
});
server.keepAliveTimeout = 60000;
server.headersTimeout = 65000;
server.listen(Number(lport), lhost, () => {
  const a = server.address();
  if (portFile) require('fs').writeFileSync(portFile, String(a.port));
  process.stdout.write(`listening ${a.address}:${a.port}\n`);
});
