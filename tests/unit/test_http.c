/* test_http.c - the http module's rules without a server (src/source/
 * http_retry.c, http_table.c): which curl codes and HTTP statuses are tried
 * again, which fail at once and with what code, which replies are not the
 * bytes asked (Content-Range, the pinned version) and the precondition a
 * pinned request carries, the full-jitter backoff's
 * growth and bounds, the retry count of blocking requests, the tuning of
 * the limit on requests in flight; the result
 * table's put/take, repeated samples, parts of one reply, errors, and the
 * bound that drops the oldest unread results with their wants; and the
 * settings (http_* and their s3_* aliases) that become a handle's options.
 * Exits 77 (skipped) without libcurl. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lade/lade.h"

#ifndef LADE_HAVE_CURL
int main(void) {
  printf("skipped: lade was built without libcurl (LADE_WITH_CURL)\n");
  return 77;
}
#else
#include "core/config.h"
#include "http/http_impl.h"
#include "source/remote.h"

static int url_of(void *ctx, uint64_t obj, char *url, size_t size) {
  (void)ctx;
  int n = snprintf(url, size, "http://127.0.0.1:9/obj%llu", (unsigned long long)obj);
  return n < 0 || (size_t)n >= size ? -1 : 0;
}

static void name_of_obj(void *ctx, uint64_t obj, char *buf, size_t size) {
  (void)ctx;
  snprintf(buf, size, "obj%llu", (unsigned long long)obj);
}

/* An error_body hook as a store's: the word "SlowDown" in the body asks
 * for a retry and a slower pace, "Busy" for a retry only. */
static void error_words(void *ctx, const char *body, size_t len, char *what, size_t size, int *retry,
                        int *throttle) {
  (void)ctx;
  int slow = len >= 8 && memmem(body, len, "SlowDown", 8) != NULL;
  int busy = len >= 4 && memmem(body, len, "Busy", 4) != NULL;
  *retry = slow || busy;
  *throttle = slow;
  snprintf(what, size, "%s", slow ? " SlowDown" : busy ? " Busy" : "");
}

static lade__http_t *handle(uint32_t retries, uint32_t base_ms, int with_hook) {
  lade__http_opts_t o;
  memset(&o, 0, sizeof o);
  o.what = "test source";
  o.timeout_ms = 1000;
  o.connect_timeout_ms = 500;
  o.retries = retries;
  o.retry_base_ms = base_ms;
  o.max_conc = 16;
  o.max_body = 1 << 20;
  o.url = url_of;
  o.name = name_of_obj;
  if (with_hook) o.error_body = error_words;
  lade__http_t *h = NULL;
  CHECK_OK(lade__http_create(&h, &o));
  return h;
}

/* A finished request as judge() sees it: expect (UINT64_MAX: any size) and
 * the body that arrived. */
static void req_init(lade__http_req_t *r, uint64_t expect, const char *body) {
  memset(r, 0, sizeof *r);
  r->get.expect = expect;
  r->clen = -1;
  r->cap = 1 << 20;
  if (body) {
    r->body.data = (uint8_t *)body;
    r->body.len = strlen(body);
  }
}

static lade__http_verdict_t judge(lade__http_t *h, CURLcode cc, long status, int64_t clen,
                                  const lade__http_req_t *r) {
  lade__http_verdict_t v;
  lade__http_judge(h, cc, status, clen, r, &v);
  return v;
}

static void test_curl_codes(void) {
  const CURLcode again[] = {CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_OPERATION_TIMEDOUT,
                            CURLE_RECV_ERROR,      CURLE_SEND_ERROR,           CURLE_PARTIAL_FILE,
                            CURLE_GOT_NOTHING,     CURLE_HTTP2,                CURLE_HTTP2_STREAM,
                            CURLE_SSL_CONNECT_ERROR, CURLE_WEIRD_SERVER_REPLY};
  const CURLcode final[] = {CURLE_OK, CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL,
                            CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_WRITE_ERROR,
                            CURLE_TOO_MANY_REDIRECTS, CURLE_LOGIN_DENIED};
  for (size_t i = 0; i < sizeof again / sizeof again[0]; i++) CHECK_EQ_INT(lade__http_curl_retryable(again[i]), 1);
  for (size_t i = 0; i < sizeof final / sizeof final[0]; i++) CHECK_EQ_INT(lade__http_curl_retryable(final[i]), 0);

  lade__http_t *h = handle(3, 1, 0);
  lade__http_req_t r;
  req_init(&r, UINT64_MAX, NULL);
  lade__http_verdict_t v = judge(h, CURLE_OPERATION_TIMEDOUT, 0, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_RETRY);
  CHECK_EQ_INT(v.code, LADE_ETIMEOUT);
  CHECK_EQ_INT(v.truncated, 0);
  v = judge(h, CURLE_COULDNT_CONNECT, 0, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_RETRY);
  CHECK_EQ_INT(v.code, LADE_EREMOTE);
  v = judge(h, CURLE_PARTIAL_FILE, 200, 100, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_RETRY);
  CHECK_EQ_INT(v.truncated, 1);
  /* out of memory for the body: final, and said so */
  v = judge(h, CURLE_WRITE_ERROR, 200, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK_EQ_INT(v.code, LADE_ENOMEM);
  CHECK(strstr(v.what, "out of memory") != NULL);
  /* TLS: never retried; the message says what to do */
  snprintf(r.errbuf, sizeof r.errbuf, "SSL: no alternative certificate subject name matches target host name 'x'");
  v = judge(h, CURLE_PEER_FAILED_VERIFICATION, 0, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK(strstr(v.what, "not for this host") != NULL);
  snprintf(r.errbuf, sizeof r.errbuf, "unable to get local issuer certificate");
  v = judge(h, CURLE_PEER_FAILED_VERIFICATION, 0, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK(strstr(v.what, "tls_ca_file") != NULL);
  v = judge(h, CURLE_SSL_CACERT_BADFILE, 0, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK(strstr(v.what, "cannot read the CA bundle") != NULL);
  lade__http_destroy(h);
}

static void test_statuses(void) {
  lade__http_t *h = handle(3, 1, 1);
  lade__http_req_t r;
  req_init(&r, UINT64_MAX, "0123456789");
  lade__http_verdict_t v = judge(h, CURLE_OK, 200, 10, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_OK);
  CHECK_EQ_INT(v.status, 200);
  CHECK_EQ_INT(judge(h, CURLE_OK, 206, 10, &r).kind, LADE__HTTP_OK);
  CHECK_EQ_INT(judge(h, CURLE_OK, 200, -1, &r).kind, LADE__HTTP_OK); /* no Content-Length: any size */
  /* fewer bytes than the Content-Length: cut short, tried again */
  v = judge(h, CURLE_OK, 200, 25, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_RETRY);
  CHECK_EQ_INT(v.truncated, 1);
  CHECK(strcmp(v.what, "truncated body: 10 of 25 bytes (Content-Length)") == 0);
  /* another size than listed: a size verdict (a HEAD may refresh the listing) */
  req_init(&r, 12, "0123456789");
  v = judge(h, CURLE_OK, 200, 10, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_SIZE);
  CHECK(strcmp(v.what, "wrong size: 10 bytes, the listing says 12") == 0);
  req_init(&r, 10, "0123456789");
  CHECK_EQ_INT(judge(h, CURLE_OK, 200, 10, &r).kind, LADE__HTTP_OK);

  /* error replies: 5xx and 429 again, 429/503 slow the pace, 4xx final */
  const struct {
    long status;
    int kind, code, throttled;
  } cases[] = {
      {500, LADE__HTTP_RETRY, LADE_EREMOTE, 0}, {502, LADE__HTTP_RETRY, LADE_EREMOTE, 0},
      {503, LADE__HTTP_RETRY, LADE_EREMOTE, 1}, {504, LADE__HTTP_RETRY, LADE_EREMOTE, 0},
      {429, LADE__HTTP_RETRY, LADE_EREMOTE, 1}, {404, LADE__HTTP_FINAL, LADE_ENOENT, 0},
      {403, LADE__HTTP_FINAL, LADE_EREMOTE, 0}, {400, LADE__HTTP_FINAL, LADE_EREMOTE, 0},
      {416, LADE__HTTP_FINAL, LADE_EREMOTE, 0}, {301, LADE__HTTP_FINAL, LADE_EREMOTE, 0},
  };
  req_init(&r, UINT64_MAX, "<Error>nothing to see</Error>");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    v = judge(h, CURLE_OK, cases[i].status, -1, &r);
    CHECK_EQ_INT(v.kind, cases[i].kind);
    CHECK_EQ_INT(v.code, cases[i].code);
    CHECK_EQ_INT(v.throttled, cases[i].throttled);
    char want[32];
    snprintf(want, sizeof want, "HTTP %ld", cases[i].status);
    CHECK(strcmp(v.what, want) == 0);
  }
  /* the store's words: a 400 that says SlowDown is retried and slows the pace */
  req_init(&r, UINT64_MAX, "<Error><Code>SlowDown</Code></Error>");
  v = judge(h, CURLE_OK, 400, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_RETRY);
  CHECK_EQ_INT(v.throttled, 1);
  CHECK(strcmp(v.what, "HTTP 400 SlowDown") == 0);
  req_init(&r, UINT64_MAX, "Busy");
  v = judge(h, CURLE_OK, 409, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_RETRY);
  CHECK_EQ_INT(v.throttled, 0);

  /* a Range request answered with the whole object: final */
  req_init(&r, 5, "0123456789");
  r.get.off = 100;
  r.get.len = 5;
  v = judge(h, CURLE_OK, 200, 10, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK(strstr(v.what, "bytes 100-104") != NULL);
  req_init(&r, 5, "01234");
  r.get.off = 100;
  r.get.len = 5;
  CHECK_EQ_INT(judge(h, CURLE_OK, 206, 5, &r).kind, LADE__HTTP_OK);

  /* a body stopped past its cap: final without a listed size, a size
   * verdict with one; ERANGE both ways */
  req_init(&r, UINT64_MAX, NULL);
  r.over = 1;
  r.cap = 64;
  r.clen = 1000;
  v = judge(h, CURLE_WRITE_ERROR, 200, 1000, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK_EQ_INT(v.code, LADE_ERANGE);
  CHECK(strstr(v.what, "1000 bytes (Content-Length)") != NULL);
  r.get.expect = 64;
  v = judge(h, CURLE_WRITE_ERROR, 200, 1000, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_SIZE);
  CHECK_EQ_INT(v.code, LADE_ERANGE);
  CHECK(strstr(v.what, "the listing says 64") != NULL);

  /* HEAD: the size is the Content-Length; none is tried again */
  req_init(&r, UINT64_MAX, NULL);
  r.head = 1;
  v = judge(h, CURLE_OK, 200, 4321, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_OK);
  CHECK_EQ_INT(v.size, 4321);
  CHECK_EQ_INT(judge(h, CURLE_OK, 200, -1, &r).kind, LADE__HTTP_RETRY);
  v = judge(h, CURLE_OK, 404, -1, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK_EQ_INT(v.code, LADE_ENOENT);
  CHECK(strcmp(v.what, "HTTP 404 (HEAD)") == 0);
  lade__http_destroy(h);
}

/* Feeds one header line to r as curl does; the callback's return. */
static size_t header(lade__http_req_t *r, const char *line) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", line);
  return lade__http_on_header(buf, 1, strlen(buf), r);
}

/* A reply's headers, status line to the blank line: 1 when all were taken,
 * 0 when the blank line refused the reply (r->refused_what says why). */
static int reply(lade__http_req_t *r, const char *status, const char *crange, const char *etag) {
  char line[200];
  header(r, status);
  header(r, "Content-Length: 5\r\n");
  if (crange) {
    snprintf(line, sizeof line, "Content-Range: %s\r\n", crange);
    header(r, line);
  }
  if (etag) {
    snprintf(line, sizeof line, "ETag: %s\r\n", etag);
    header(r, line);
  }
  return header(r, "\r\n") == 2;
}

/* A Range request's 206 must name exactly the bytes asked (Content-Range),
 * with the total size its object was indexed at; a pinned object's reply
 * must carry its ETag (weakly compared) or Last-Modified. A reply that
 * differs is refused at its blank line, before any body byte, and judged
 * final; a 412 to the pin's precondition and a 416 name the change. */
static void test_reply_matches_request(void) {
  lade__http_t *h = handle(3, 1, 0);
  lade__http_req_t r;
  req_init(&r, 5, NULL);
  r.get.off = 100;
  r.get.len = 5;
  r.pin_size = UINT64_MAX;
  CHECK(reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/1000", NULL));
  CHECK(reply(&r, "HTTP/2 206 \r\n", "bytes 100-104/*", NULL));
  CHECK(reply(&r, "HTTP/1.1 200 OK\r\n", NULL, NULL)); /* judged as a 200 to a Range request, below */
  CHECK(reply(&r, "HTTP/1.1 503 Slow Down\r\n", NULL, NULL)); /* an error reply: its words are read */
  /* another range than asked, said so: refused, final */
  CHECK(!reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 612-616/1000", NULL));
  CHECK(r.refused);
  CHECK(strstr(r.refused_what, "Content-Range 'bytes 612-616/1000', the request was for bytes 100-104") != NULL);
  lade__http_verdict_t v = judge(h, CURLE_WRITE_ERROR, 206, 5, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK_EQ_INT(v.code, LADE_EREMOTE);
  CHECK(strcmp(v.what, r.refused_what) == 0);
  const char *bad[] = {"bytes 100-103/1000", "bytes 101-105/1000", "bytes 100-104", "bytes 100-104/", "100-104/1000",
                       "bytes 104-100/1000", "bytes -100-104/1000", "bytes 100-104/1000x",
                       "bytes 100-99999999999999999999999/1000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(!reply(&r, "HTTP/1.1 206 Partial Content\r\n", bad[i], NULL));
    CHECK(strstr(r.refused_what, "100-104") != NULL);
  }
  CHECK(!reply(&r, "HTTP/1.1 206 Partial Content\r\n", NULL, NULL));
  CHECK(strstr(r.refused_what, "HTTP 206 without a Content-Range") != NULL);
  /* a status line starts a reply afresh: a 1xx's headers are forgotten */
  header(&r, "HTTP/1.1 100 Continue\r\n");
  header(&r, "Content-Range: bytes 0-4/1000\r\n");
  header(&r, "\r\n");
  CHECK(reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/1000", NULL));

  /* pinned at 1000 bytes, ETag "a" */
  r.refused = 0;
  r.pin = "etag \"a\"";
  r.pin_size = 1000;
  CHECK(reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/1000", "\"a\""));
  CHECK(reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/1000", "W/\"a\""));
  CHECK(reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/1000", NULL)); /* no ETag: If-Match's job */
  CHECK(reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/*", "\"a\""));
  CHECK(!reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/1512", "\"a\""));
  CHECK(strstr(r.refused_what, "now 1512 bytes (Content-Range 'bytes 100-104/1512' to a request for bytes 100-104), "
                               "1000 bytes when it was indexed: changed since it was indexed") != NULL);
  CHECK(!reply(&r, "HTTP/1.1 206 Partial Content\r\n", "bytes 100-104/1000", "\"b\""));
  CHECK(strcmp(r.refused_what, "changed since it was indexed (etag \"b\" now, etag \"a\" then); reopen the source "
                               "to index it again") == 0);
  /* a whole object (an index pass) is checked by its version alone */
  r.get.off = r.get.len = 0;
  CHECK(reply(&r, "HTTP/1.1 200 OK\r\n", NULL, "\"a\""));
  CHECK(!reply(&r, "HTTP/1.1 200 OK\r\n", NULL, "\"b\""));
  /* a Last-Modified pin: compared with a Last-Modified, not with an ETag */
  r.pin = "modified Tue, 14 Nov 2023 22:13:20 GMT";
  header(&r, "HTTP/1.1 200 OK\r\n");
  header(&r, "Last-Modified: Wed, 15 Nov 2023 22:13:20 GMT\r\n");
  CHECK_EQ_INT((int)header(&r, "\r\n"), 0);
  CHECK(strstr(r.refused_what, "modified Wed, 15 Nov 2023 22:13:20 GMT now") != NULL);
  CHECK(reply(&r, "HTTP/1.1 200 OK\r\n", NULL, "\"b\""));

  /* 412 to the precondition, 416 past the indexed size: final, the change named */
  r.refused = 0;
  r.pin = "etag \"a\"";
  r.get.off = 100;
  r.get.len = 5;
  v = judge(h, CURLE_OK, 412, 0, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK(strcmp(v.what, "changed since it was indexed (HTTP 412 Precondition Failed to If-Match: \"a\"); reopen the "
                       "source to index it again") == 0);
  r.pin = "modified Tue, 14 Nov 2023 22:13:20 GMT";
  v = judge(h, CURLE_OK, 412, 0, &r);
  CHECK(strstr(v.what, "to If-Unmodified-Since: Tue, 14 Nov 2023 22:13:20 GMT)") != NULL);
  r.crange = 1;
  snprintf(r.cr_text, sizeof r.cr_text, "bytes */50");
  v = judge(h, CURLE_OK, 416, 0, &r);
  CHECK_EQ_INT(v.kind, LADE__HTTP_FINAL);
  CHECK(strstr(v.what, "HTTP 416 to a request for bytes 100-104 (Content-Range 'bytes */50'), 1000 bytes when it was "
                       "indexed: changed since it was indexed") != NULL);
  lade__http_destroy(h);
}

/* The precondition a pin asks for, after the handle's own headers. */
static void test_pin_headers(void) {
  lade__http_t *h = handle(3, 1, 0);
  struct curl_slist *common = curl_slist_append(NULL, "X-Common: 1");
  h->o.headers = common;
  CURL *e = curl_easy_init();
  lade__http_req_t r;
  const char *pins[] = {"etag \"a\"", "etag W/\"a\"", "modified Tue, 14 Nov 2023 22:13:20 GMT", "", NULL};
  const char *want[] = {"If-Match: \"a\"", NULL, "If-Unmodified-Since: Tue, 14 Nov 2023 22:13:20 GMT", NULL, NULL};
  for (size_t i = 0; i < 5; i++) {
    req_init(&r, 5, NULL);
    r.get.off = 100;
    r.get.len = 5;
    r.pin = pins[i];
    CHECK_OK(lade__http_setup_easy(h, e, "http://127.0.0.1:9/x", &r));
    if (!want[i]) {
      CHECK(r.hdrs == NULL); /* a weak ETag never matches If-Match (RFC 9110): its reply's ETag is compared */
      continue;
    }
    CHECK(r.hdrs && !strcmp(r.hdrs->data, "X-Common: 1") && r.hdrs->next && !strcmp(r.hdrs->next->data, want[i]) &&
          !r.hdrs->next->next);
    CHECK_OK(lade__http_setup_easy(h, e, "http://127.0.0.1:9/x", &r)); /* a retry: the old list freed */
    lade__http_req_headers_free(&r);
    CHECK(r.hdrs == NULL);
  }
  curl_easy_cleanup(e);
  h->o.headers = NULL;
  curl_slist_free_all(common);
  lade__http_destroy(h);
}

/* Full jitter: retry n waits uniformly in [0, min(20 s, base x 2^(n-1))]. */
static void test_backoff(void) {
  lade__rng_t rng;
  lade__rng_init(&rng, 42, 1, 2);
  const double base_s = 0.1;
  for (uint32_t n = 1; n <= 12; n++) {
    double bound = base_s;
    for (uint32_t i = 1; i < n; i++) bound *= 2;
    if (bound > 20.0) bound = 20.0;
    double lo = 1e9, hi = 0, sum = 0;
    const int draws = 4000;
    for (int k = 0; k < draws; k++) {
      double s = lade__http_backoff_s(100, n, &rng);
      lo = s < lo ? s : lo;
      hi = s > hi ? s : hi;
      sum += s;
    }
    CHECK(lo >= 0);
    CHECK(hi <= bound);
    CHECK(hi > 0.98 * bound); /* the whole range is used ... */
    CHECK(lo < 0.02 * bound);
    double mean = sum / draws; /* ... uniformly */
    CHECK(mean > 0.45 * bound && mean < 0.55 * bound);
  }
  /* the cap holds for any retry count and any base */
  for (int k = 0; k < 1000; k++) {
    CHECK(lade__http_backoff_s(100, 1000000, &rng) <= 20.0);
    CHECK(lade__http_backoff_s(60000, 1, &rng) <= 20.0);
  }
  /* the first retry waits at most the base */
  for (int k = 0; k < 1000; k++) CHECK(lade__http_backoff_s(7, 1, &rng) <= 0.007);
}

/* A blocking request is tried 1 + retries times when the verdict says
 * retry; a final verdict stops at once. Each retry is counted. */
static void test_blocking_retries(void) {
  lade__http_t *h = handle(2, 1, 0);
  lade__rng_t rng;
  lade__rng_init(&rng, 7, 0, 0);
  lade__http_verdict_t v;
  memset(&v, 0, sizeof v);
  v.kind = LADE__HTTP_RETRY;
  v.code = LADE_EREMOTE;
  snprintf(v.what, sizeof v.what, "HTTP 503");
  int rc = 12345;
  CHECK_EQ_INT(lade__http_blocking_again(h, &v, 0, "http://x/a", &rng, &rc), 1);
  CHECK_EQ_INT(lade__http_blocking_again(h, &v, 1, "http://x/a", &rng, &rc), 1);
  CHECK_EQ_INT(rc, 12345);
  CHECK_EQ_INT(lade__http_blocking_again(h, &v, 2, "http://x/a", &rng, &rc), 0);
  CHECK_EQ_INT(rc, LADE_EREMOTE);
  CHECK(strcmp(lade_last_error(), "http://x/a: HTTP 503 after 2 retries") == 0);
  lade__http_stats_t st;
  lade__http_stats(h, &st);
  CHECK_EQ_INT(st.retries, 2);
  v.kind = LADE__HTTP_FINAL;
  v.code = LADE_ENOENT;
  snprintf(v.what, sizeof v.what, "HTTP 404");
  CHECK_EQ_INT(lade__http_blocking_again(h, &v, 0, "http://x/b", &rng, &rc), 0);
  CHECK_EQ_INT(rc, LADE_ENOENT);
  CHECK(strcmp(lade_last_error(), "http://x/b: HTTP 404") == 0);
  lade__http_stats(h, &st);
  CHECK_EQ_INT(st.retries, 2);
  lade__http_destroy(h);
}

/* One half-second window ending at *t with `rate` bytes/s completed. */
static void window(lade__http_tuner_t *u, double *t, double rate, int starved) {
  u->win_start = *t;
  *t += 0.5;
  u->win_bytes = (uint64_t)(rate * 0.5);
  u->win_starved = starved;
  lade__http_tune(u, *t);
}

/* The tuned limit: slow start from 32, then steps of a quarter, a probe
 * after 8 flat windows, never below 4 or above max_concurrency; windows
 * without queued demand, right after a throttle, or too short say nothing. */
static void test_tuning(void) {
  lade__http_opts_t o;
  memset(&o, 0, sizeof o);
  o.what = "test source";
  o.max_conc = 1000;
  o.url = url_of;
  o.name = name_of_obj;
  lade__http_t *h = NULL;
  CHECK_OK(lade__http_create(&h, &o));
  if (!h) return;
  lade__http_tuner_t *u = &h->loop.tune; /* the handle's, as lade__http_create set it */
  CHECK_EQ_INT(u->limit, 32);
  double t = 100;
  u->win_start = t;
  u->win_bytes = 1 << 20;
  lade__http_tune(u, t + 0.2); /* too short a window */
  CHECK_EQ_INT(u->limit, 32);
  CHECK(u->win_start == t && u->win_bytes == 1 << 20);
  window(u, &t, 2000, 0);
  CHECK_EQ_INT(u->limit, 64); /* slow start doubles */
  CHECK_EQ_INT(u->win_bytes, 0);
  window(u, &t, 4000, 0);
  CHECK_EQ_INT(u->limit, 128);
  window(u, &t, 4100, 0); /* under 5% more: flat, slow start ends */
  CHECK_EQ_INT(u->limit, 128);
  CHECK_EQ_INT(u->slow_start, 0);
  window(u, &t, 8000, 0);
  CHECK_EQ_INT(u->limit, 160); /* + a quarter */
  window(u, &t, 100, 1); /* starved: says nothing, not even a new reference rate */
  CHECK_EQ_INT(u->limit, 160);
  window(u, &t, 5000, 0); /* a fall of more than a quarter: - a quarter */
  CHECK_EQ_INT(u->limit, 120);
  for (int i = 0; i < 7; i++) window(u, &t, 5000, 0);
  CHECK_EQ_INT(u->limit, 120);
  window(u, &t, 5000, 0); /* the 8th flat window probes up */
  CHECK_EQ_INT(u->limit, 150);
  u->last_throttle = t + 0.25; /* throttled within the window: no step */
  window(u, &t, 1, 0);
  CHECK_EQ_INT(u->limit, 150);
  u->limit = 6;
  window(u, &t, 100, 0);
  CHECK_EQ_INT(u->limit, 4); /* the floor */
  u->limit = 990;
  window(u, &t, 1e6, 0);
  CHECK_EQ_INT(u->limit, 1000); /* the ceiling */
  lade__http_destroy(h);

  o.fixed_conc = 48; /* a fixed limit is never tuned */
  CHECK_OK(lade__http_create(&h, &o));
  if (!h) return;
  u = &h->loop.tune;
  CHECK_EQ_INT(u->limit, 48);
  t = 100;
  window(u, &t, 1000, 0);
  window(u, &t, 1e6, 0);
  CHECK_EQ_INT(u->limit, 48);
  lade__http_destroy(h);

  /* a throttle halves the tuned limit once a window, down to the floor; a fixed one stays */
  lade__http_tuner_t v;
  lade__http_tuner_init(&v, 0, 1000);
  v.limit = 100;
  CHECK_EQ_INT(lade__http_tuner_throttle(&v, 10.0), 1);
  CHECK_EQ_INT(v.limit, 50);
  CHECK_EQ_INT(lade__http_tuner_throttle(&v, 10.3), 0);
  CHECK_EQ_INT(v.limit, 50);
  CHECK_EQ_INT(lade__http_tuner_throttle(&v, 10.6), 1);
  CHECK_EQ_INT(v.limit, 25);
  CHECK_EQ_INT(lade__http_tuner_bg_cap(&v), 19); /* background: three quarters */
  v.limit = 6;
  CHECK_EQ_INT(lade__http_tuner_throttle(&v, 20.0), 1);
  CHECK_EQ_INT(v.limit, 4);
  lade__http_tuner_init(&v, 48, 1000);
  CHECK_EQ_INT(lade__http_tuner_throttle(&v, 10.0), 0);
  CHECK_EQ_INT(v.limit, 48);
}

/* ------------------------------------------------------------ the table */

/* Submits g as lade__http_submit does (one want per part) and answers it
 * with `body` (rc 0) or the error rc/msg, as the loop does. */
static void put(lade__http_t *h, const lade__http_get_t *g, const char *body, int rc, const char *msg) {
  lade__http_req_t *q = lade__http_req_new(h, g, NULL);
  CHECK(q != NULL);
  if (!q) return;
  for (uint32_t k = 0; k < q->get.nparts; k++) h->tab.wants[q->get.parts[k].idx]++;
  if (body) {
    size_t n = strlen(body);
    CHECK_OK(lade__buf_reserve(&q->body, n + 1));
    memcpy(q->body.data, body, n);
    q->body.len = n;
  }
  lade__http_result_store(&h->tab, q, rc, msg);
  lade__http_req_release(h, q);
}

static void put_one(lade__http_t *h, uint64_t idx, const char *body) {
  lade__http_get_t g = {.obj = idx, .expect = UINT64_MAX};
  put(h, &g, body, 0, NULL);
}

/* Takes idx's oldest result: 1 and its bytes in *out, or 0 when none. */
static int take(lade__http_t *h, uint64_t idx, lade__buf_t *out, int *rc) {
  *rc = -999;
  return lade__http_result_take(&h->tab, idx, out, rc);
}

static int body_is(const lade__buf_t *b, const char *s) {
  return b->len == strlen(s) && (b->len == 0 || memcmp(b->data, s, b->len) == 0);
}

static void test_table_put_take(void) {
  lade__http_t *h = handle(0, 1, 0);
  CHECK_OK(lade__http_table_init(&h->tab, 8, LADE__MAX(h->o.max_conc, h->o.fixed_conc), h->o.what, h->o.name, h->o.ctx));
  lade__buf_t out = {0};
  int rc;
  CHECK_EQ_INT(take(h, 3, &out, &rc), 0);
  /* a whole-body sample is handed over without a copy */
  lade__http_get_t g = {.obj = 3, .expect = UINT64_MAX};
  lade__http_req_t *q = lade__http_req_new(h, &g, NULL);
  CHECK(q != NULL);
  h->tab.wants[3]++;
  CHECK_OK(lade__buf_reserve(&q->body, 6));
  memcpy(q->body.data, "hello", 5);
  q->body.len = 5;
  const uint8_t *arrived = q->body.data;
  lade__http_result_store(&h->tab, q, 0, NULL);
  lade__http_req_release(h, q);
  CHECK_EQ_INT(h->tab.count, 1);
  CHECK(h->tab.res[3] != NULL && h->tab.wants[3] == 1);
  CHECK_EQ_INT(take(h, 3, &out, &rc), 1);
  CHECK_EQ_INT(rc, 0);
  CHECK(body_is(&out, "hello"));
  CHECK(out.data == arrived);
  CHECK_EQ_INT(h->tab.wants[3], 0);
  CHECK_EQ_INT(h->tab.count, 0);
  CHECK_EQ_INT(h->tab.bytes, 0);
  CHECK_EQ_INT(take(h, 3, &out, &rc), 0);

  /* the caller's old buffer is kept for the next body, and a new request
   * receives into it */
  size_t kept = h->tab.n_free_bufs;
  put_one(h, 4, "abc");
  CHECK_EQ_INT(take(h, 4, &out, &rc), 1);
  CHECK(body_is(&out, "abc"));
  CHECK_EQ_INT(h->tab.n_free_bufs, kept + 1);
  const uint8_t *recycled = h->tab.free_bufs[h->tab.n_free_bufs - 1].data;
  CHECK(recycled == arrived);
  q = lade__http_req_new(h, &g, NULL);
  CHECK(q != NULL && q->body.data == recycled && q->body.len == 0);
  lade__http_req_release(h, q);

  /* an empty body still gives the caller a valid buffer */
  lade__buf_free(&out);
  put_one(h, 5, "");
  CHECK_EQ_INT(take(h, 5, &out, &rc), 1);
  CHECK_EQ_INT(rc, 0);
  CHECK(out.data != NULL && out.len == 0);
  lade__buf_free(&out);
  lade__http_destroy(h);
}

/* A sample wanted twice has two results, taken in arrival order; parts of
 * one coalesced reply become one result each (copied out of the body). */
static void test_table_repeats_and_parts(void) {
  lade__http_t *h = handle(0, 1, 0);
  CHECK_OK(lade__http_table_init(&h->tab, 8, LADE__MAX(h->o.max_conc, h->o.fixed_conc), h->o.what, h->o.name, h->o.ctx));
  lade__buf_t out = {0};
  int rc;
  put_one(h, 5, "first");
  put_one(h, 5, "second");
  CHECK_EQ_INT(h->tab.wants[5], 2);
  CHECK_EQ_INT(take(h, 5, &out, &rc), 1);
  CHECK(body_is(&out, "first"));
  CHECK_EQ_INT(h->tab.wants[5], 1);
  CHECK_EQ_INT(take(h, 5, &out, &rc), 1);
  CHECK(body_is(&out, "second"));
  CHECK_EQ_INT(h->tab.wants[5], 0);
  CHECK_EQ_INT(take(h, 5, &out, &rc), 0);

  /* bytes 100.. of a shard: sample 1 at 0..3, sample 2 at 5..9, sample 1 again */
  lade__http_part_t parts[] = {{1, 0, 3}, {2, 5, 4}, {1, 0, 3}};
  lade__http_get_t g = {.obj = 0, .off = 100, .len = 9, .expect = 9, .nparts = 3, .parts = parts};
  put(h, &g, "abcdefghi", 0, NULL);
  CHECK_EQ_INT(h->tab.wants[1], 2);
  CHECK_EQ_INT(h->tab.wants[2], 1);
  CHECK_EQ_INT(h->tab.count, 3);
  CHECK_EQ_INT(take(h, 2, &out, &rc), 1);
  CHECK_EQ_INT(rc, 0);
  CHECK(body_is(&out, "fghi"));
  CHECK_EQ_INT(take(h, 1, &out, &rc), 1);
  CHECK(body_is(&out, "abc"));
  CHECK_EQ_INT(take(h, 1, &out, &rc), 1);
  CHECK(body_is(&out, "abc"));

  /* a part past the end of a short reply fails alone, naming it */
  lade__http_part_t cut[] = {{3, 0, 2}, {4, 6, 5}};
  lade__http_get_t g2 = {.obj = 0, .expect = UINT64_MAX, .nparts = 2, .parts = cut};
  put(h, &g2, "abcdefgh", 0, NULL);
  CHECK_EQ_INT(take(h, 3, &out, &rc), 1);
  CHECK_EQ_INT(rc, 0);
  CHECK(body_is(&out, "ab"));
  CHECK_EQ_INT(take(h, 4, &out, &rc), 1);
  CHECK_EQ_INT(rc, LADE_EFORMAT);
  CHECK(strcmp(lade_last_error(), "obj0: sample 4 at bytes 6..11 is past the 8-byte reply") == 0);

  /* a failed request fails each of its parts with its message */
  lade__http_part_t two[] = {{6, 0, 1}, {7, 1, 1}};
  lade__http_get_t g3 = {.obj = 9, .expect = UINT64_MAX, .nparts = 2, .parts = two};
  put(h, &g3, NULL, LADE_ENOENT, "obj9: HTTP 404");
  for (uint64_t i = 6; i <= 7; i++) {
    CHECK_EQ_INT(take(h, i, &out, &rc), 1);
    CHECK_EQ_INT(rc, LADE_ENOENT);
    CHECK(strcmp(lade_last_error(), "obj9: HTTP 404") == 0);
    CHECK_EQ_INT(h->tab.wants[i], 0);
  }
  CHECK_EQ_INT(h->tab.count, 0);
  lade__buf_free(&out);
  lade__http_destroy(h);
}

/* Arrived, unread results are bounded in count and bytes: the oldest are
 * dropped with their want (a later read fetches again); the newest stays. */
static void test_table_bound(void) {
  lade__http_t *h = handle(0, 1, 0);
  CHECK_OK(lade__http_table_init(&h->tab, 8, LADE__MAX(h->o.max_conc, h->o.fixed_conc), h->o.what, h->o.name, h->o.ctx));
  CHECK_EQ_INT(h->tab.max_count, 4 * 16 + 1024); /* 4 x max_conc + 1024 */
  CHECK_EQ_INT(h->tab.max_bytes, (size_t)512 << 20);
  /* reserve raises the bounds, never lowers them */
  lade__http_reserve(h, 10, 1);
  CHECK_EQ_INT(h->tab.max_count, 4 * 16 + 1024);
  CHECK_EQ_INT(h->tab.max_bytes, (size_t)512 << 20);
  lade__http_reserve(h, 5000, (uint64_t)1 << 30);
  CHECK_EQ_INT(h->tab.max_count, 5000);
  CHECK_EQ_INT(h->tab.max_bytes, (size_t)1 << 30);

  h->tab.max_count = 3;
  for (uint64_t i = 0; i < 5; i++) put_one(h, i, "xy");
  CHECK_EQ_INT(h->tab.count, 3);
  CHECK(h->tab.res[0] == NULL && h->tab.res[1] == NULL);
  CHECK_EQ_INT(h->tab.wants[0], 0);
  CHECK_EQ_INT(h->tab.wants[1], 0);
  for (uint64_t i = 2; i < 5; i++) CHECK(h->tab.res[i] != NULL && h->tab.wants[i] == 1);
  CHECK(h->tab.oldest == h->tab.res[2] && h->tab.newest == h->tab.res[4]);

  /* one want of a repeated sample is dropped, the other kept */
  put_one(h, 2, "again");
  CHECK_EQ_INT(h->tab.count, 3);
  CHECK_EQ_INT(h->tab.wants[2], 1);
  lade__buf_t out = {0};
  int rc;
  CHECK_EQ_INT(take(h, 2, &out, &rc), 1);
  CHECK(body_is(&out, "again"));
  CHECK_EQ_INT(take(h, 2, &out, &rc), 0);

  /* a byte bound smaller than one body keeps only the newest */
  h->tab.max_count = 100;
  h->tab.max_bytes = 1;
  put_one(h, 6, "newest");
  CHECK_EQ_INT(h->tab.count, 1);
  CHECK(h->tab.res[6] != NULL && h->tab.res[3] == NULL && h->tab.res[4] == NULL);
  CHECK_EQ_INT(h->tab.wants[3], 0);
  CHECK_EQ_INT(h->tab.wants[4], 0);
  CHECK_EQ_INT(h->tab.bytes, h->tab.res[6]->body.cap);
  CHECK_EQ_INT(take(h, 6, &out, &rc), 1);
  CHECK(body_is(&out, "newest"));
  CHECK_EQ_INT(h->tab.bytes, 0);
  lade__buf_free(&out);
  lade__http_destroy(h); /* frees what is left unread (ASan checks) */
}

/* ---------------------------------------------------------- the settings */

/* http_* settings become a handle's options; their s3_* aliases set and get
 * the same values, and the listing names the alias in the help. */
static void test_settings(void) {
  static const char *const pairs[][2] = {
      {"http_concurrency", "s3_concurrency"},     {"http_max_concurrency", "s3_max_concurrency"},
      {"http_timeout_ms", "s3_timeout_ms"},       {"http_connect_timeout_ms", "s3_connect_timeout_ms"},
      {"http_retries", "s3_retries"},             {"http_retry_base_ms", "s3_retry_base_ms"},
  };
  lade_config_t *c = NULL;
  CHECK_OK(lade_config_create(&c));
  char buf[64];
  static const char *const values[] = {"7", "77", "1234", "321", "9", "42"};
  for (size_t i = 0; i < 6; i++) {
    const char *v = values[i];
    CHECK_OK(lade_config_set(c, pairs[i][1], v)); /* the alias ... */
    CHECK_OK(lade_config_get(c, pairs[i][0], buf, sizeof buf)); /* ... sets the key */
    CHECK(strcmp(buf, v) == 0);
    CHECK_OK(lade_config_get(c, pairs[i][1], buf, sizeof buf));
    CHECK(strcmp(buf, v) == 0);
    int found = 0;
    const char *def, *help;
    for (size_t k = 0; lade_config_key(k, &def, &help); k++) {
      const char *key = lade_config_key(k, NULL, NULL);
      CHECK(strcmp(key, pairs[i][1]) != 0); /* listed once, under its http_ name */
      if (!strcmp(key, pairs[i][0])) found = strstr(help, pairs[i][1]) != NULL;
    }
    CHECK(found);
  }
  CHECK_OK(lade_config_parse(c, "s3_retries=3"));
  CHECK_OK(lade_config_parse(c, "http_timeout_ms=1234"));
  CHECK_OK(lade_config_parse(c, "s3_connect_timeout_ms=321"));
  CHECK_OK(lade_config_parse(c, "http_concurrency=0"));
  CHECK_OK(lade_config_parse(c, "s3_max_concurrency=77"));
  CHECK_OK(lade_config_parse(c, "http_retry_base_ms=9"));
  CHECK_OK(lade_config_parse(c, "max_sample_bytes=5555"));
  CHECK_OK(lade_config_parse(c, "tls_ca_file=/etc/ca.pem"));
  CHECK_EQ_INT(lade_config_set(c, "s3_retries", "101"), LADE_ERANGE); /* the key's range */
  CHECK_EQ_INT(lade_config_set(c, "s3_retrys", "1"), LADE_EINVAL);
  lade__http_opts_t o;
  memset(&o, 0xff, sizeof o);
  lade__remote_http_opts(&o, c, NULL);
  CHECK_EQ_INT(o.retries, 3);
  CHECK_EQ_INT(o.timeout_ms, 1234);
  CHECK_EQ_INT(o.connect_timeout_ms, 321);
  CHECK_EQ_INT(o.fixed_conc, 0);
  CHECK_EQ_INT(o.max_conc, 77);
  CHECK_EQ_INT(o.retry_base_ms, 9);
  CHECK_EQ_INT(o.max_body, 5555);
  CHECK(o.ca_file && strcmp(o.ca_file, "/etc/ca.pem") == 0);
  CHECK(o.what == NULL && o.url == NULL && o.name == NULL && o.error_body == NULL && o.headers == NULL &&
        o.userpwd == NULL && o.arrived == NULL);
  lade_config_destroy(c);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_curl_codes);
  RUN(test_statuses);
  RUN(test_reply_matches_request);
  RUN(test_pin_headers);
  RUN(test_backoff);
  RUN(test_blocking_retries);
  RUN(test_tuning);
  RUN(test_table_put_take);
  RUN(test_table_repeats_and_parts);
  RUN(test_table_bound);
  RUN(test_settings);
  return lade_test_finish();
}
#endif
