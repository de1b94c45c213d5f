/*
 * http.c - the request loop of the remote sources (http.h, docs/http.md).
 *
 * Design. ONE background thread per handle owns a curl multi handle and runs
 * every GET: hundreds of requests in flight cost sockets, not threads (paper
 * 003's fetchers without a thread per request). Requests enter through
 * three FIFO queues - `urgent` for read()s that found no want (a worker is
 * blocked on them right now), `queue` for submit()ted batches, and `bg` for
 * background submits (the DELI prefetcher's speculative fetches, never more
 * than three quarters of the limit) - each started in submission order, and
 * a timer list for retries waiting out their backoff. The parts of an
 * arrived submitted body (one sample, or several neighbouring samples of
 * one coalesced Range request) go into a table keyed by sample index (one
 * result per want); read() takes one and swaps its buffer with the
 * caller's, so a whole-body sample is never copied. Arrived-but-unread
 * results are bounded and dropped oldest first together with their want.
 *
 * The limit on requests in flight is fixed (fixed_conc) or tuned by the
 * loop: completed bytes/s measured over half-second windows while requests
 * wait in the queue. It starts at 32, doubles while the rate grows (slow
 * start), then moves in steps of a quarter: up while the rate grows, down
 * when it falls by a quarter, and a probe up after 8 flat windows; halved
 * when the server throttles (503/429, or what the error_body hook says).
 *
 * Faults: per-request timeout and a low-speed limit; 5xx, 429, timeouts,
 * resets and bodies cut short (Content-Length) are retried with full-jitter
 * exponential backoff, the body restarted from scratch; 403/404 and other
 * 4xx fail at once naming the object and the server's words. A body is
 * never held past the size it may have (`expect`; on_header/on_body stop
 * the transfer), and with `refresh` a reply of another size is followed by
 * one HEAD: a replaced object is fetched again at its new size, an
 * unchanged one was damaged in transit and is retried.
 *
 * Locking: `mu` guards the queues, the result table, wants, counters and the
 * concurrency limit; `cv` is broadcast when a result or a waiter's answer
 * arrives. The loop thread never calls curl while holding `mu`, and calls
 * on_ready() with no lock held. Only the loop thread touches the multi handle
 * (curl_multi_wakeup is the one call made from other threads). The hooks
 * run under `mu` (one lock: no order to keep).
 */
#ifdef LADE_HAVE_CURL

#include "source/http.h"

#include <assert.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/core.h"
#include "source.h"

#define HTTP_BACKOFF_CAP_MS 20000.0
#define HTTP_MIN_AUTO 4
#define HTTP_START_AUTO 32
#define HTTP_WINDOW_S 0.5
#define HTTP_WHAT 768
#define HTTP_ERROR_CAP ((uint64_t)64 << 10) /* an error reply: only its first words are read */

/* ------------------------------------------------------------------ types */

typedef struct http_result {
  uint64_t idx;
  int rc;                          /* 0 or the final error */
  lade__buf_t body;
  char *msg;                       /* error text (malloc), NULL on success */
  struct http_result *next_idx;    /* same index, arrival order */
  struct http_result *prev, *next; /* all stored results, oldest first */
} http_result_t;

typedef struct http_waiter {       /* a read() that started its own request */
  int done, rc;
  lade__buf_t body;
  char msg[LADE__HTTP_MSG];
} http_waiter_t;

typedef struct http_req {
  lade__http_get_t get;            /* get.parts points at `one` or a malloc'd copy */
  lade__http_part_t one;
  http_waiter_t *waiter;           /* NULL: a submitted want, answered through the table */
  CURL *easy;
  lade__buf_t body;                /* the reply's bytes; with `parts`, only body.len counts them */
  lade__buf_t *parts;              /* a 2xx reply of several parts: each part's bytes, written as they arrive */
  uint32_t part_next;              /* the first part not complete */
  char validator[256];             /* the reply's ETag, else its Last-Modified */
  int has_etag;
  uint32_t retries;
  double not_before;               /* retry timer (monotonic s) */
  int bg;                          /* a background submit */
  uint64_t cap;                    /* a 2xx body past this many bytes is stopped (error bodies: HTTP_ERROR_CAP) */
  int64_t clen;                    /* the reply's Content-Length, -1 when none */
  int over;                        /* the body passed cap (or its Content-Length did) */
  int head_agreed;                 /* the HEAD found the size the listing has */
  int head;                        /* this turn is a HEAD refreshing `expect` */
  int refreshed;                   /* a HEAD has been made (once per request) */
  char size_what[HTTP_WHAT];       /* the size mismatch that sent it to the HEAD */
  char errbuf[CURL_ERROR_SIZE];
  struct http_req *next, *prev;    /* a queue, or the active list while in flight */
} http_req_t;

typedef struct http_fifo {
  http_req_t *head, *tail;
  size_t n;
} http_fifo_t;

struct lade__http {
  lade__http_opts_t o;
  char *ca_file; /* o.ca_file points here: the resolved CA bundle, NULL for libcurl's default */
  uint64_t n_idx; /* results are keyed by sample index 0..n_idx-1 */
  pthread_t thread;
  int thread_started;
  CURLM *multi;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  http_fifo_t urgent, queue, bg, timers; /* bg: background submits; timers: unsorted, scanned each turn */
  http_req_t *active;              /* in flight (doubly linked) */
  http_req_t *free_reqs;
  CURL **free_easy;
  size_t n_free_easy, cap_free_easy;
  lade__buf_t free_bufs[32];
  size_t n_free_bufs;
  /* results: per index wants and arrived results */
  uint32_t *wants;
  http_result_t **res;
  http_result_t *res_oldest, *res_newest;
  size_t res_count, res_bytes, res_max_count, res_max_bytes;
  /* counters and tuning */
  uint64_t get_requests, list_requests, retried, bytes, truncated, throttled, refreshed;
  uint32_t in_flight, limit;
  uint32_t bg_in_flight;           /* background requests among in_flight */
  double win_start, win_prev_rate, last_throttle;
  uint64_t win_bytes;
  int win_starved, flat_windows;
  int slow_start; /* doubling the limit until the rate stops growing */
};

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc;
static void curl_init_once(void) { g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int lade__http_global_init(void) {
  pthread_once(&g_curl_once, curl_init_once);
  return g_curl_init_rc == CURLE_OK ? 0 : lade__fail(LADE_EREMOTE, "libcurl failed to initialise");
}

/* --------------------------------------------------------------- helpers */

static void fifo_push(http_fifo_t *f, http_req_t *r) {
  r->next = NULL;
  if (f->tail) f->tail->next = r;
  else f->head = r;
  f->tail = r;
  f->n++;
}

static http_req_t *fifo_pop(http_fifo_t *f) {
  http_req_t *r = f->head;
  if (!r) return NULL;
  f->head = r->next;
  if (!f->head) f->tail = NULL;
  f->n--;
  r->next = NULL;
  return r;
}

static void name_of(const lade__http_t *h, const http_req_t *r, char *buf, size_t size) {
  h->o.name(h->o.ctx, r->get.obj, buf, size);
}

/* ------------------------------------------------------ classifying replies */

/* HTTP_SIZE: a complete reply of another size than expected (the listed
 * size, or more than the cap): the object may have been replaced since it
 * was listed, so with `refresh` the size is checked with a HEAD first. */
enum { HTTP_OK = 0, HTTP_RETRY, HTTP_FINAL, HTTP_SIZE };

typedef struct http_verdict {
  int kind;          /* HTTP_OK, HTTP_RETRY, HTTP_FINAL, HTTP_SIZE */
  int code;          /* lade error code when not OK */
  int throttled;     /* 503/429/SlowDown: the tuner backs off */
  int truncated;
  long status;       /* HTTP status, 0 when none arrived */
  uint64_t size;     /* a HEAD's Content-Length: the object's size now */
  char what[HTTP_WHAT]; /* "HTTP 503 SlowDown: message" */
} http_verdict_t;

static int curl_retryable(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
      return 1;
    default:
      return 0;
  }
}

/* Judges one finished transfer of r: r->get.expect is the size the body
 * must have (UINT64_MAX: any), r->over says on_body stopped it past r->cap,
 * and r->head that it was a HEAD (no body; the Content-Length is the size). */
static void judge(const lade__http_t *h, CURL *e, CURLcode cc, const http_req_t *r, http_verdict_t *v) {
  memset(v, 0, sizeof *v);
  long status = 0;
  curl_off_t cl = -1;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
  v->status = status;
  int ok_status = status >= 200 && status < 300;
  uint64_t expect = r->get.expect;
  if (r->get.len && !r->head && status == 200) {
    /* a whole object where a byte range was asked for: it would be read
     * whole for each sample */
    v->kind = HTTP_FINAL;
    v->code = LADE_EREMOTE;
    snprintf(v->what, sizeof v->what, "HTTP 200 to a Range request (bytes %llu-%llu): the server does not serve "
             "byte ranges", (unsigned long long)r->get.off, (unsigned long long)(r->get.off + r->get.len - 1));
    return;
  }
  int too_big = r->over;
  if (too_big && ok_status) {
    /* stopped before the body was buffered: it would pass the cap */
    v->kind = expect == UINT64_MAX ? HTTP_FINAL : HTTP_SIZE;
    v->code = LADE_ERANGE;
    if (r->clen >= 0 && (uint64_t)r->clen > r->cap)
      snprintf(v->what, sizeof v->what, "the reply is %lld bytes (Content-Length), ", (long long)r->clen);
    else
      snprintf(v->what, sizeof v->what, "the reply passed %llu bytes%s, ", (unsigned long long)r->cap,
               r->clen >= 0 ? "" : " (no Content-Length)");
    size_t n = strlen(v->what);
    if (expect != UINT64_MAX)
      snprintf(v->what + n, sizeof v->what - n, "the listing says %llu", (unsigned long long)expect);
    else
      snprintf(v->what + n, sizeof v->what - n, "the most lade reads of it");
    return;
  }
  if (cc != CURLE_OK && !(too_big && status)) {
    v->kind = curl_retryable(cc) ? HTTP_RETRY : HTTP_FINAL;
    v->code = cc == CURLE_OPERATION_TIMEDOUT ? LADE_ETIMEOUT : cc == CURLE_WRITE_ERROR ? LADE_ENOMEM : LADE_EREMOTE;
    v->truncated = cc == CURLE_PARTIAL_FILE;
    if (cc == CURLE_WRITE_ERROR)
      snprintf(v->what, sizeof v->what, "out of memory for the body after %zu bytes", r->body.len);
    else if (cc == CURLE_PEER_FAILED_VERIFICATION && strstr(r->errbuf, "host name"))
      snprintf(v->what, sizeof v->what, "the server's TLS certificate is not for this host (%s): use the host name "
               "it was issued for in the URL", r->errbuf);
    else if (cc == CURLE_PEER_FAILED_VERIFICATION)
      snprintf(v->what, sizeof v->what, "the server's TLS certificate is not trusted (%s): set tls_ca_file (or "
               "$SSL_CERT_FILE) to a PEM file of the CA that signed it; trusted now: %s",
               r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc), h->ca_file ? h->ca_file : "the system's CAs");
    else if (cc == CURLE_SSL_CACERT_BADFILE)
      snprintf(v->what, sizeof v->what, "cannot read the CA bundle %s (%s); tls_ca_file must be a PEM file",
               h->ca_file ? h->ca_file : "(the system's default)", r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
    else
      snprintf(v->what, sizeof v->what, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
    return;
  }
  uint64_t got = r->body.len;
  if (ok_status) {
    if (r->head) {
      v->kind = cl >= 0 ? HTTP_OK : HTTP_RETRY;
      v->code = LADE_EREMOTE;
      v->size = cl >= 0 ? (uint64_t)cl : 0;
      if (cl < 0) snprintf(v->what, sizeof v->what, "HEAD without a Content-Length");
    } else if (cl >= 0 && (uint64_t)cl != got) {
      v->kind = HTTP_RETRY;
      v->code = LADE_EREMOTE;
      v->truncated = 1;
      snprintf(v->what, sizeof v->what, "truncated body: %llu of %lld bytes (Content-Length)",
               (unsigned long long)got, (long long)cl);
    } else if (expect != UINT64_MAX && got != expect) {
      v->kind = HTTP_SIZE;
      v->code = LADE_EREMOTE;
      v->truncated = 1;
      snprintf(v->what, sizeof v->what, "wrong size: %llu bytes, the listing says %llu", (unsigned long long)got,
               (unsigned long long)expect);
    } else {
      v->kind = HTTP_OK;
    }
    return;
  }
  char tail[HTTP_WHAT - 64] = "";
  int retry = 0, throttle = 0;
  if (h->o.error_body && r->body.data)
    h->o.error_body(h->o.ctx, (const char *)r->body.data, r->body.len, tail, sizeof tail, &retry, &throttle);
  v->throttled = status == 503 || status == 429 || throttle;
  if (status >= 500 || status == 429 || retry) {
    v->kind = HTTP_RETRY;
    v->code = LADE_EREMOTE;
  } else {
    v->kind = HTTP_FINAL;
    v->code = status == 404 ? LADE_ENOENT : LADE_EREMOTE;
  }
  snprintf(v->what, sizeof v->what, "HTTP %ld%s%s", status, r->head ? " (HEAD)" : "", tail);
}

static double backoff_s(const lade__http_t *h, uint32_t retry, lade__rng_t *rng) {
  double cap = (double)h->o.retry_base_ms;
  for (uint32_t i = 1; i < retry && cap < HTTP_BACKOFF_CAP_MS; i++) cap *= 2;
  if (cap > HTTP_BACKOFF_CAP_MS) cap = HTTP_BACKOFF_CAP_MS;
  return lade__rng_double(rng) * cap / 1000.0; /* full jitter */
}

/* Counts a retry of a request made on the caller's thread and sleeps its
 * backoff there (blocking GETs, HEADs, streams). */
static void retry_sleep(lade__http_t *h, uint32_t retry, lade__rng_t *rng) {
  pthread_mutex_lock(&h->mu);
  h->retried++;
  pthread_mutex_unlock(&h->mu);
  double s = backoff_s(h, retry, rng);
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* After a failed blocking attempt: 1 when it is tried again (the backoff
 * slept), 0 with the final error in *rc naming `shown`. */
static int blocking_again(lade__http_t *h, const http_verdict_t *v, uint32_t attempt, const char *shown,
                          lade__rng_t *rng, int *rc) {
  if (v->kind != HTTP_RETRY || attempt >= h->o.retries) {
    *rc = v->kind == HTTP_RETRY ? lade__fail(v->code, "%s: %s after %u retries", shown, v->what, attempt)
                                : lade__fail(v->code, "%s: %s", shown, v->what);
    return 0;
  }
  retry_sleep(h, attempt + 1, rng);
  return 1;
}

/* --------------------------------------------------------------- requests */

/* The most body bytes r may hold: its cap for a 2xx reply, a few KiB of an
 * error reply. */
static uint64_t body_cap(const http_req_t *r) {
  long status = 0;
  if (r->easy) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  return status >= 200 && status < 300 ? r->cap : LADE__MAX(r->cap, HTTP_ERROR_CAP);
}

/* Reads Content-Length as it arrives: a reply announcing more than the cap
 * is stopped before its first body byte. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud) {
  http_req_t *r = ud;
  size_t n = size * nmemb;
  if (n > 15 && !strncasecmp(ptr, "content-length:", 15)) {
    char num[32];
    size_t k = LADE__MIN(n - 15, sizeof num - 1);
    memcpy(num, ptr + 15, k);
    num[k] = '\0';
    char *e;
    errno = 0;
    unsigned long long v = strtoull(num, &e, 10);
    r->clen = errno || e == num || v > INT64_MAX ? -1 : (int64_t)v;
    if (!r->head && r->clen >= 0 && (uint64_t)r->clen > body_cap(r)) {
      r->over = 1;
      return 0; /* curl ends the transfer (CURLE_WRITE_ERROR) */
    }
  }
  int etag = n > 5 && !strncasecmp(ptr, "etag:", 5);
  if (etag || (!r->has_etag && n > 14 && !strncasecmp(ptr, "last-modified:", 14))) {
    size_t k = etag ? 5 : 14, e = n;
    while (k < e && (ptr[k] == ' ' || ptr[k] == '\t')) k++;
    while (e > k && (ptr[e - 1] == '\r' || ptr[e - 1] == '\n' || ptr[e - 1] == ' ')) e--;
    snprintf(r->validator, sizeof r->validator, "%s%.*s", etag ? "etag " : "modified ", (int)(e - k), ptr + k);
    r->has_etag |= etag;
  }
  return n;
}

/* A 2xx reply of several parts (a coalesced Range request) is written
 * straight into one buffer per part as it arrives, the bytes between parts
 * dropped: no copy of the whole body, and none when it is split. Parts are
 * sorted by offset (a sample twice in one batch is two equal parts). */
static size_t scatter(http_req_t *r, const char *ptr, size_t n) {
  const lade__http_get_t *g = &r->get;
  if (!r->parts && !(r->parts = calloc(g->nparts, sizeof *r->parts))) return 0; /* CURLE_WRITE_ERROR */
  uint64_t lo = r->body.len, hi = lo + n;
  for (uint32_t k = r->part_next; k < g->nparts && g->parts[k].off < hi; k++) {
    const lade__http_part_t *p = &g->parts[k];
    uint64_t a = LADE__MAX(p->off, lo), b = LADE__MIN(p->off + p->len, hi);
    if (b > a) {
      lade__buf_t *d = &r->parts[k];
      if (!d->data && lade__buf_reserve(d, (size_t)(p->len ? p->len : 1)) != 0) {
        lade__clear_error();
        return 0;
      }
      memcpy(d->data + (a - p->off), ptr + (a - lo), (size_t)(b - a));
      if (b - p->off > d->len) d->len = (size_t)(b - p->off);
    }
    if (k == r->part_next && p->off + p->len <= hi) r->part_next++;
  }
  r->body.len += n;
  return n;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  http_req_t *r = ud;
  size_t n = size * nmemb;
  if ((uint64_t)r->body.len + n > body_cap(r)) { /* an endless or oversized body is never buffered */
    r->over = 1;
    return 0; /* curl ends the transfer (CURLE_WRITE_ERROR) */
  }
  if (r->get.nparts > 1 && !r->head && r->easy) {
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) return scatter(r, ptr, n);
  }
  if (r->body.len + n + 1 > r->body.cap) {
    size_t cap = r->body.cap ? r->body.cap : 16384;
    while (cap < r->body.len + n + 1) cap *= 2;
    uint8_t *p = realloc(r->body.data, cap);
    if (!p) return 0; /* curl reports CURLE_WRITE_ERROR */
    r->body.data = p;
    r->body.cap = cap;
  }
  memcpy(r->body.data + r->body.len, ptr, n);
  r->body.len += n;
  return n;
}

static void setup_easy(const lade__http_t *h, CURL *e, const char *url, http_req_t *r) {
  curl_easy_setopt(e, CURLOPT_URL, url);
  /* keys are paths of their own: curl must not squash "a/../b" into "b"
   * (RFC 3986 dot-segment removal); SigV4 then signs the path as sent */
  curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)h->o.timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)h->o.connect_timeout_ms);
  long low_time = (long)(h->o.timeout_ms / 1000);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, low_time < 1 ? 1L : (low_time > 30 ? 30L : low_time));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->o.headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  /* https:// peers and host names are always verified (libcurl's default);
   * only the trusted CAs can be chosen */
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  if (h->ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, h->ca_file);
  if (h->o.userpwd) {
    curl_easy_setopt(e, CURLOPT_USERPWD, h->o.userpwd);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, h->o.sigv4);
  }
  if (r->get.len && !r->head) {
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)r->get.off,
             (unsigned long long)(r->get.off + r->get.len - 1));
    curl_easy_setopt(e, CURLOPT_RANGE, range); /* copied by curl */
  }
}

/* ------------------------------------------------------ blocking GET */

int lade__http_get_blocking(lade__http_t *h, const char *url, const char *shown, lade__buf_t *out, uint64_t cap,
                            int is_list, int (*cut)(const lade__buf_t *b, char *what, size_t size)) {
  CURL *e = curl_easy_init();
  if (!e) return lade__fail(LADE_ENOMEM, "%s: cannot create a curl handle", shown);
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)out, 0x4c53);
  http_req_t *tmp = calloc(1, sizeof *tmp);
  if (!tmp) {
    curl_easy_cleanup(e);
    return lade__fail(LADE_ENOMEM, "%s: out of memory", shown);
  }
  int rc = 0;
  for (uint32_t attempt = 0;; attempt++) {
    lade__buf_t keep = *out;
    memset(tmp, 0, sizeof *tmp);
    tmp->body = keep;
    tmp->body.len = 0;
    tmp->get.expect = UINT64_MAX;
    tmp->cap = cap;
    curl_easy_reset(e);
    tmp->easy = e;
    tmp->clen = -1;
    setup_easy(h, e, url, tmp);
    pthread_mutex_lock(&h->mu);
    if (is_list) h->list_requests++;
    else h->get_requests++;
    pthread_mutex_unlock(&h->mu);
    CURLcode cc = curl_easy_perform(e);
    *out = tmp->body;
    http_verdict_t v;
    judge(h, e, cc, tmp, &v);
    if (v.kind == HTTP_OK && cut && cut(out, v.what, sizeof v.what)) {
      v.kind = HTTP_RETRY;
      v.code = LADE_EREMOTE;
    }
    if (v.kind == HTTP_SIZE) v.kind = HTTP_FINAL;
    if (v.kind == HTTP_OK || !blocking_again(h, &v, attempt, shown, &rng, &rc)) break;
  }
  free(tmp);
  curl_easy_cleanup(e);
  return rc;
}

/* ------------------------------------------------------ HEAD and streams */

int lade__http_head(lade__http_t *h, const char *url, const char *shown, uint64_t *size, char *validator,
                    size_t vsize) {
  CURL *e = curl_easy_init();
  http_req_t *r = calloc(1, sizeof *r);
  if (!e || !r) {
    if (e) curl_easy_cleanup(e);
    free(r);
    return lade__fail(LADE_ENOMEM, "%s: out of memory", shown);
  }
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)r, 0x4845);
  int rc = 0;
  for (uint32_t attempt = 0;; attempt++) {
    memset(r, 0, sizeof *r);
    r->head = 1;
    r->get.expect = UINT64_MAX;
    r->clen = -1;
    curl_easy_reset(e);
    r->easy = e;
    setup_easy(h, e, url, r);
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    pthread_mutex_lock(&h->mu);
    h->list_requests++;
    pthread_mutex_unlock(&h->mu);
    CURLcode cc = curl_easy_perform(e);
    http_verdict_t v;
    judge(h, e, cc, r, &v);
    if (v.kind == HTTP_OK) {
      *size = v.size;
      snprintf(validator, vsize, "%s", r->validator);
      break;
    }
    if (!blocking_again(h, &v, attempt, shown, &rng, &rc)) break;
  }
  free(r->body.data);
  free(r);
  curl_easy_cleanup(e);
  return rc;
}

/* A streamed GET: buf holds the object's bytes [at, at + len); `keep`
 * is the offset of the last read, below which nothing is kept. */
struct lade__http_stream {
  lade__http_t *h;
  CURLM *multi;
  CURL *easy;
  http_req_t r;           /* errbuf, clen, validator, the error reply's body */
  char url[8192], shown[2048], validator[256];
  uint8_t *buf;
  size_t len, cap;
  uint64_t at, keep, size;
  int running, done, rc;  /* rc: the final error (message in msg) */
  uint32_t retries;
  lade__rng_t rng;
  char msg[LADE__HTTP_MSG];
};

static size_t stream_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  lade__http_stream_t *s = ud;
  size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200 && status != 206) /* an error reply: its first words only */
    return s->r.body.len + n > HTTP_ERROR_CAP ? 0 : on_body(ptr, size, nmemb, &s->r);
  if (status == 200 && s->r.get.len) return 0; /* a resume answered with the whole object: judged below */
  uint64_t chunk_at = s->at + s->len;
  if (s->keep > s->at) { /* what the reader has passed */
    size_t drop = (size_t)LADE__MIN(s->keep - s->at, (uint64_t)s->len);
    memmove(s->buf, s->buf + drop, s->len - drop);
    s->at += drop;
    s->len -= drop;
  }
  size_t skip = 0;
  if (!s->len && chunk_at < s->keep) skip = (size_t)LADE__MIN(s->keep - chunk_at, (uint64_t)n);
  if (!s->len) s->at = chunk_at + skip;
  if (chunk_at + n > s->size) return 0; /* more than the object's size: stopped (judged below) */
  if (s->len + (n - skip) > s->cap) {
    size_t cap = s->cap ? s->cap : 1u << 16;
    while (cap < s->len + (n - skip)) cap *= 2;
    uint8_t *p = realloc(s->buf, cap);
    if (!p) return 0;
    s->buf = p;
    s->cap = cap;
  }
  memcpy(s->buf + s->len, ptr + skip, n - skip);
  s->len += n - skip;
  return n;
}

/* Sends the GET of bytes [at + len, size) (the whole object at first). */
static int stream_start(lade__http_stream_t *s) {
  if (s->easy) {
    curl_multi_remove_handle(s->multi, s->easy);
    curl_easy_reset(s->easy);
  } else if (!(s->easy = curl_easy_init())) {
    return lade__fail(LADE_ENOMEM, "%s: out of memory", s->shown);
  }
  free(s->r.body.data);
  memset(&s->r, 0, sizeof s->r);
  s->r.easy = s->easy;
  s->r.clen = -1;
  s->r.get.expect = UINT64_MAX;
  s->r.cap = s->size; /* on_header refuses a longer Content-Length */
  uint64_t from = s->at + s->len;
  if (from) s->r.get.off = from, s->r.get.len = s->size - from;
  setup_easy(s->h, s->easy, s->url, &s->r);
  /* a whole shard may take longer than one request's timeout: only the
   * low-speed limit ends a transfer that stalls */
  curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, 0L);
  curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, stream_body);
  curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
  pthread_mutex_lock(&s->h->mu);
  s->h->list_requests++; /* an index pass is a listing, not a sample's read */
  pthread_mutex_unlock(&s->h->mu);
  if (curl_multi_add_handle(s->multi, s->easy) != CURLM_OK) return lade__fail(LADE_ENOMEM, "%s: out of memory", s->shown);
  s->running = 1;
  return 0;
}

/* The transfer ended: done, resumed after a transient error, or failed. */
static void stream_ended(lade__http_stream_t *s, CURLcode cc) {
  s->running = 0;
  long status = 0;
  curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
  uint64_t have = s->at + s->len;
  http_verdict_t v;
  memset(&v, 0, sizeof v);
  if (status == 200 && s->r.get.len) {
    v.kind = HTTP_FINAL;
    v.code = LADE_EREMOTE;
    snprintf(v.what, sizeof v.what, "HTTP 200 to a Range request resuming at byte %llu: the server does not serve "
             "byte ranges", (unsigned long long)have);
  } else if ((status == 200 || status == 206) && s->validator[0] && s->r.validator[0] &&
      strcmp(s->validator, s->r.validator) != 0) {
    v.kind = HTTP_FINAL;
    v.code = LADE_EREMOTE;
    snprintf(v.what, sizeof v.what, "changed while it was read (%s, was %s)", s->r.validator, s->validator);
  } else if (cc == CURLE_OK && (status == 200 || status == 206) && have == s->size) {
    s->done = 1;
    return;
  } else if (cc == CURLE_WRITE_ERROR && (status == 200 || status == 206) && have <= s->size) {
    v.kind = HTTP_FINAL;
    v.code = LADE_EREMOTE;
    snprintf(v.what, sizeof v.what, "more than the %llu bytes a HEAD announced (or out of memory)",
             (unsigned long long)s->size);
  } else if (cc == CURLE_OK && (status == 200 || status == 206)) {
    v.kind = HTTP_RETRY;
    v.code = LADE_EREMOTE;
    snprintf(v.what, sizeof v.what, "the reply ended at byte %llu of %llu", (unsigned long long)have,
             (unsigned long long)s->size);
  } else {
    judge(s->h, s->easy, cc, &s->r, &v);
    if (v.kind == HTTP_SIZE) v.kind = HTTP_RETRY;
  }
  if (v.kind == HTTP_RETRY && s->retries < s->h->o.retries) {
    s->retries++;
    retry_sleep(s->h, s->retries, &s->rng);
    if (stream_start(s) == 0) return;
    v.kind = HTTP_FINAL;
    v.code = LADE_ENOMEM;
    snprintf(v.what, sizeof v.what, "cannot resume the transfer");
  }
  s->rc = v.code ? v.code : LADE_EREMOTE;
  if (v.kind == HTTP_RETRY)
    snprintf(s->msg, sizeof s->msg, "%s: %s after %u retries (reading at byte %llu)", s->shown, v.what, s->retries,
             (unsigned long long)have);
  else
    snprintf(s->msg, sizeof s->msg, "%s: %s (reading at byte %llu)", s->shown, v.what, (unsigned long long)have);
}

int lade__http_stream_open(lade__http_t *h, const char *url, const char *shown, uint64_t size, const char *validator,
                           lade__http_stream_t **out) {
  *out = NULL;
  lade__http_stream_t *s = calloc(1, sizeof *s);
  if (!s) return lade__fail(LADE_ENOMEM, "%s: out of memory", shown);
  s->h = h;
  s->size = size;
  snprintf(s->url, sizeof s->url, "%s", url);
  snprintf(s->shown, sizeof s->shown, "%s", shown);
  snprintf(s->validator, sizeof s->validator, "%s", validator ? validator : "");
  lade__rng_init(&s->rng, lade__now_us(), (uint64_t)(uintptr_t)s, 0x5354);
  s->multi = curl_multi_init();
  int rc = s->multi ? stream_start(s) : lade__fail(LADE_ENOMEM, "%s: out of memory", shown);
  if (rc) {
    lade__http_stream_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

long lade__http_stream_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  lade__http_stream_t *s = ctx;
  if (off < s->at) {
    s->rc = LADE_EINVAL;
    snprintf(s->msg, sizeof s->msg, "%s: a read at byte %llu, behind the stream (at %llu)", s->shown,
             (unsigned long long)off, (unsigned long long)s->at);
    return -EIO;
  }
  s->keep = off;
  uint64_t want = LADE__MIN(off + len, s->size);
  while (!s->rc && !s->done && s->at + s->len < want) {
    if (!s->running) break;
    int still = 0;
    curl_multi_perform(s->multi, &still);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(s->multi, &left)))
      if (m->msg == CURLMSG_DONE) stream_ended(s, m->data.result);
    if (s->running && s->at + s->len < want) curl_multi_poll(s->multi, NULL, 0, 200, NULL);
  }
  if (s->rc) return -EIO;
  if (off >= s->at + s->len) return 0;
  size_t n = (size_t)LADE__MIN((uint64_t)len, s->at + s->len - off);
  memcpy(dst, s->buf + (off - s->at), n);
  return (long)n;
}

int lade__http_stream_error(lade__http_stream_t *s) {
  if (s->rc) lade__set_error_text(s->msg);
  return s->rc;
}

void lade__http_stream_close(lade__http_stream_t *s) {
  if (!s) return;
  if (s->easy) {
    if (s->multi) curl_multi_remove_handle(s->multi, s->easy);
    curl_easy_cleanup(s->easy);
  }
  if (s->multi) curl_multi_cleanup(s->multi);
  free(s->r.body.data);
  free(s->buf);
  free(s);
}

/* ------------------------------------------------------- the result table */

static void buf_recycle(lade__http_t *h, lade__buf_t *b) {
  if (b->data && h->n_free_bufs < sizeof h->free_bufs / sizeof h->free_bufs[0] && b->cap <= (8u << 20)) {
    b->len = 0;
    h->free_bufs[h->n_free_bufs++] = *b;
  } else {
    free(b->data);
  }
  memset(b, 0, sizeof *b);
}

static void result_unlink(lade__http_t *h, http_result_t *r) {
  if (r->prev) r->prev->next = r->next;
  else h->res_oldest = r->next;
  if (r->next) r->next->prev = r->prev;
  else h->res_newest = r->prev;
  http_result_t **pp = &h->res[r->idx];
  while (*pp != r) pp = &(*pp)->next_idx;
  *pp = r->next_idx;
  h->res_count--;
  h->res_bytes -= r->body.cap;
}

static void result_free(lade__http_t *h, http_result_t *r) {
  buf_recycle(h, &r->body);
  free(r->msg);
  free(r);
}

/* Stores the outcome of one part of a submitted request (locked): `body`
 * is taken (swapped out) when `take`, else the part's bytes are copied. */
static void result_store_part(lade__http_t *h, const lade__http_part_t *p, int rc, const char *msg, lade__buf_t *body,
                              int take) {
  http_result_t *r = calloc(1, sizeof *r);
  if (r && msg) r->msg = lade__strdup(msg);
  int ok = r && (!msg || r->msg);
  if (ok && !rc && !take) {
    ok = lade__buf_reserve(&r->body, p->len ? p->len : 1) == 0;
    if (ok) {
      memcpy(r->body.data, body->data + p->off, p->len);
      r->body.len = p->len;
    } else {
      lade__clear_error();
    }
  }
  if (!ok) {
    /* no memory to keep it: drop the want, a read() refetches */
    if (r) free(r->body.data), free(r->msg);
    free(r);
    if (h->wants[p->idx]) h->wants[p->idx]--;
    return;
  }
  r->idx = p->idx;
  r->rc = rc;
  if (!rc && take) {
    r->body = *body;
    memset(body, 0, sizeof *body);
  }
  http_result_t **pp = &h->res[r->idx];
  while (*pp) pp = &(*pp)->next_idx;
  *pp = r;
  r->prev = h->res_newest;
  if (h->res_newest) h->res_newest->next = r;
  else h->res_oldest = r;
  h->res_newest = r;
  h->res_count++;
  h->res_bytes += r->body.cap;
  /* bound: drop the oldest unread results with their wants */
  while (h->res_oldest && h->res_oldest != r &&
         (h->res_count > h->res_max_count || h->res_bytes > h->res_max_bytes)) {
    http_result_t *old = h->res_oldest;
    result_unlink(h, old);
    if (h->wants[old->idx]) h->wants[old->idx]--;
    result_free(h, old);
  }
}

/* Stores a submitted request's outcome, one result per part (locked). A
 * body that is exactly its one part is handed on without a copy. */
static void result_store(lade__http_t *h, http_req_t *q, int rc, const char *msg) {
  const lade__http_get_t *g = &q->get;
  for (uint32_t i = 0; i < g->nparts; i++) {
    lade__http_part_t p = g->parts[i];
    if (!rc && q->parts) { /* written per part as it arrived (scatter) */
      lade__http_part_t one = {p.idx, 0, p.len};
      if (q->parts[i].len == p.len && p.off + p.len <= q->body.len) {
        result_store_part(h, &one, 0, NULL, &q->parts[i], 1);
        continue;
      }
    }
    int whole = !q->parts && (p.len == UINT64_MAX || (p.off == 0 && p.len == q->body.len));
    if (!rc && whole) p.off = 0, p.len = q->body.len;
    if (!rc && !whole && (q->parts || p.off > q->body.len || p.len > q->body.len - p.off)) {
      char name[1536], m[LADE__HTTP_MSG];
      name_of(h, q, name, sizeof name);
      snprintf(m, sizeof m, "%s: sample %llu at bytes %llu..%llu is past the %zu-byte reply", name,
               (unsigned long long)p.idx, (unsigned long long)p.off, (unsigned long long)(p.off + p.len),
               q->body.len);
      result_store_part(h, &p, LADE_EFORMAT, m, &q->body, 0);
      continue;
    }
    result_store_part(h, &p, rc, msg, &q->body, !rc && whole && g->nparts == 1);
  }
  buf_recycle(h, &q->body);
}

/* ---------------------------------------------------------------- the loop */

static http_req_t *req_new(lade__http_t *h, const lade__http_get_t *g, http_waiter_t *w) {
  http_req_t *r = h->free_reqs;
  if (r) h->free_reqs = r->next;
  else r = malloc(sizeof *r);
  if (!r) return NULL;
  memset(r, 0, sizeof *r);
  r->get = *g;
  if (g->nparts <= 1) {
    r->one = g->nparts ? g->parts[0] : (lade__http_part_t){g->obj, 0, UINT64_MAX};
    r->get.parts = &r->one;
    r->get.nparts = 1;
  } else {
    lade__http_part_t *p = malloc(g->nparts * sizeof *p);
    if (!p) {
      r->next = h->free_reqs;
      h->free_reqs = r;
      return NULL;
    }
    memcpy(p, g->parts, g->nparts * sizeof *p);
    r->get.parts = p;
  }
  r->waiter = w;
  if (h->n_free_bufs) r->body = h->free_bufs[--h->n_free_bufs];
  return r;
}

/* Frees the per-part buffers of a scattered reply (those not handed on). */
static void parts_free(http_req_t *r) {
  if (!r->parts) return;
  for (uint32_t k = 0; k < r->get.nparts; k++) free(r->parts[k].data);
  free(r->parts);
  r->parts = NULL;
  r->part_next = 0;
}

static void req_release(lade__http_t *h, http_req_t *r) {
  buf_recycle(h, &r->body);
  parts_free(r);
  if (r->get.parts != &r->one) free((void *)r->get.parts);
  r->get.parts = NULL;
  r->next = h->free_reqs;
  h->free_reqs = r;
}

/* Starts one request (unlocked: only curl and the url/name hooks, which
 * read what open() built). Returns 0 or a code with msg filled. */
static int start(lade__http_t *h, http_req_t *r, char *msg, size_t msg_size) {
  char name[2048];
  name_of(h, r, name, sizeof name);
  if (!r->head && r->get.expect != UINT64_MAX && r->get.expect > h->o.max_body) {
    snprintf(msg, msg_size, "%s: %llu bytes listed, more than max_sample_bytes (%llu); not read", name,
             (unsigned long long)r->get.expect, (unsigned long long)h->o.max_body);
    return LADE_ERANGE;
  }
  snprintf(msg, msg_size, "%s: cannot start a request (out of memory or URL too long)", name);
  CURL *e = NULL;
  pthread_mutex_lock(&h->mu);
  if (h->n_free_easy) e = h->free_easy[--h->n_free_easy];
  pthread_mutex_unlock(&h->mu);
  if (e) curl_easy_reset(e);
  else e = curl_easy_init();
  if (!e) return LADE_ENOMEM;
  char url[8192];
  if (h->o.url(h->o.ctx, r->get.obj, url, sizeof url)) {
    curl_easy_cleanup(e);
    return LADE_ENOMEM;
  }
  r->easy = e;
  r->body.len = 0; /* a retry restarts the body from scratch */
  parts_free(r);
  /* a body of known size (a listed object, a Range; up to 64 MiB) is
   * received into a buffer of that size at once, not grown by doubling
   * and copying; a reply of several parts goes to their own buffers */
  if (!r->head && r->get.nparts <= 1 && r->get.expect <= ((uint64_t)64 << 20) && r->get.expect + 1 > r->body.cap &&
      lade__buf_reserve(&r->body, (size_t)r->get.expect + 1) != 0)
    lade__clear_error(); /* on_body grows it as it can */
  r->errbuf[0] = '\0';
  r->over = 0;
  /* the body is capped at the size it must have, so an endless or oversized
   * reply stops at once (on_header refuses a larger Content-Length before
   * any body byte) */
  r->cap = r->head ? 0 : r->get.expect == UINT64_MAX ? h->o.max_body : r->get.expect;
  r->clen = -1;
  setup_easy(h, e, url, r);
  if (r->head) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
    curl_easy_cleanup(e);
    r->easy = NULL;
    return LADE_ENOMEM;
  }
  return 0;
}

static void active_link(lade__http_t *h, http_req_t *r) {
  r->prev = NULL;
  r->next = h->active;
  if (h->active) h->active->prev = r;
  h->active = r;
}

static void active_unlink(lade__http_t *h, http_req_t *r) {
  if (r->prev) r->prev->next = r->next;
  else h->active = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

static void easy_release(lade__http_t *h, CURL *e) {
  curl_multi_remove_handle(h->multi, e);
  pthread_mutex_lock(&h->mu);
  if (h->n_free_easy == h->cap_free_easy) {
    size_t cap = h->cap_free_easy ? h->cap_free_easy * 2 : 64;
    CURL **p = realloc(h->free_easy, cap * sizeof *p);
    if (p) h->free_easy = p, h->cap_free_easy = cap;
  }
  int kept = h->n_free_easy < h->cap_free_easy;
  if (kept) h->free_easy[h->n_free_easy++] = e;
  pthread_mutex_unlock(&h->mu);
  if (!kept) curl_easy_cleanup(e);
}

static uint32_t conc_min(const lade__http_t *h) { return LADE__MIN((uint32_t)HTTP_MIN_AUTO, h->o.max_conc); }

/* Background requests take at most three quarters of the limit, so a
 * batch's request finds a free connection at once (locked). */
static uint32_t bg_cap(const lade__http_t *h) { return LADE__MAX(1u, h->limit - h->limit / 4); }

/* Tuning step of the auto limit (locked). */
static void tune(lade__http_t *h, double now) {
  if (h->o.fixed_conc) return;
  if (now - h->win_start < HTTP_WINDOW_S) return;
  double rate = (double)h->win_bytes / (now - h->win_start);
  uint32_t step = LADE__MAX(4u, h->limit / 4), lo = conc_min(h);
  if (!h->win_starved && now - h->last_throttle > HTTP_WINDOW_S) {
    /* only a window with demand queued all along says anything about the server */
    if (h->win_prev_rate <= 0 || rate > h->win_prev_rate * 1.05) {
      /* slow start (as TCP's): double while it pays, then steps of a quarter */
      h->limit = LADE__MIN(h->o.max_conc, h->slow_start ? h->limit * 2 : h->limit + step);
      h->flat_windows = 0;
    } else if (rate < h->win_prev_rate * 0.75) { /* a clear fall, not the noise of a busy machine */
      h->slow_start = 0;
      h->limit = h->limit > lo + step ? h->limit - step : lo;
      h->flat_windows = 0;
    } else {
      h->slow_start = 0;
      if (++h->flat_windows >= 8) { /* probe now and then */
        h->limit = LADE__MIN(h->o.max_conc, h->limit + step);
        h->flat_windows = 0;
      }
    }
    h->win_prev_rate = rate;
  }
  h->win_start = now;
  h->win_bytes = 0;
  h->win_starved = 0;
}

static void note_of(const lade__http_t *h, char *buf, size_t size) {
  buf[0] = '\0';
  if (h->o.note) h->o.note(h->o.ctx, buf, size);
}

/* Answers a request with rc (locked): its waiter, or one result per part. */
static void answer(lade__http_t *h, http_req_t *r, int rc, const char *msg) {
  if (r->waiter) {
    http_waiter_t *w = r->waiter;
    w->rc = rc;
    if (rc) snprintf(w->msg, sizeof w->msg, "%s", msg);
    w->body = r->body;
    memset(&r->body, 0, sizeof r->body);
    w->done = 1;
  } else {
    result_store(h, r, rc, rc ? msg : NULL);
  }
  req_release(h, r);
  pthread_cond_broadcast(&h->cv);
}

/* Handles one finished transfer (unlocked on entry); sets *notify when a
 * submitted request was answered. A reply of another size than listed
 * sends a `refresh` request to a HEAD first (once): if the object was
 * replaced, the GET is made again at its new size (no retry spent) and the
 * stale hook runs; if the HEAD agrees with the listing, the body was
 * damaged in transit and the GET is retried as any transient error. */
static void finish(lade__http_t *h, CURL *e, CURLcode cc, lade__rng_t *rng, int *notify) {
  http_req_t *r = NULL;
  curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
  http_verdict_t v;
  judge(h, e, cc, r, &v);
  easy_release(h, e);
  r->easy = NULL;
  double now = lade__now();
  pthread_mutex_lock(&h->mu);
  active_unlink(h, r);
  h->in_flight--;
  if (r->bg) h->bg_in_flight--;
  h->bytes += r->body.len;
  if (v.throttled && !h->o.fixed_conc && now - h->last_throttle > HTTP_WINDOW_S) {
    h->limit = LADE__MAX(conc_min(h), h->limit / 2);
    h->last_throttle = now;
    h->throttled++;
  }
  if (v.truncated) h->truncated++;
  if (r->head && v.kind != HTTP_RETRY) {
    r->head = 0;
    char what[HTTP_WHAT];
    if (v.kind == HTTP_OK && v.size == r->get.expect) {
      /* the object is as listed: the GET's body was wrong in transit */
      r->head_agreed = 1;
      v.kind = HTTP_RETRY;
      v.code = LADE_EREMOTE;
      snprintf(what, sizeof what, "%.500s (a HEAD says %llu bytes, as listed)", r->size_what,
               (unsigned long long)r->get.expect);
      memcpy(v.what, what, sizeof what);
    } else if (v.kind == HTTP_OK) {
      /* replaced since it was listed */
      uint64_t was = r->get.expect;
      r->get.expect = v.size;
      h->refreshed++;
      if (h->o.stale) h->o.stale(h->o.ctx);
      if (v.size <= h->o.max_body) {
        r->body.len = 0;
        r->not_before = now;
        fifo_push(&h->timers, r);
        pthread_mutex_unlock(&h->mu);
        return;
      }
      v.kind = HTTP_FINAL;
      v.code = LADE_ERANGE;
      snprintf(v.what, sizeof v.what, "now %llu bytes (the listing says %llu), more than max_sample_bytes (%llu)",
               (unsigned long long)v.size, (unsigned long long)was, (unsigned long long)h->o.max_body);
    } else {
      snprintf(what, sizeof what, "%.300s; a HEAD to refresh its listed size answered %.300s", r->size_what, v.what);
      memcpy(v.what, what, sizeof what);
      if (v.code == LADE_ENOENT) {
        size_t n = strlen(v.what);
        snprintf(v.what + n, sizeof v.what - n, ": deleted since it was listed");
      }
    }
  } else if (v.kind == HTTP_SIZE) {
    if (r->get.refresh && !r->refreshed) {
      r->refreshed = 1;
      r->head = 1;
      snprintf(r->size_what, sizeof r->size_what, "%s", v.what);
      r->body.len = 0;
      r->not_before = now;
      fifo_push(&h->timers, r);
      pthread_mutex_unlock(&h->mu);
      return;
    }
    v.kind = HTTP_RETRY; /* after the refresh (or without one): damaged in transit */
    if (r->head_agreed) {
      size_t n = strlen(v.what);
      snprintf(v.what + n, sizeof v.what - n, " (a HEAD says %llu bytes, as listed)",
               (unsigned long long)r->get.expect);
    }
  }
  if (v.kind == HTTP_RETRY && r->retries < h->o.retries) {
    r->retries++;
    h->retried++;
    r->not_before = now + backoff_s(h, r->retries, rng);
    r->body.len = 0;
    fifo_push(&h->timers, r);
    pthread_mutex_unlock(&h->mu);
    return;
  }
  char msg[LADE__HTTP_MSG], note[LADE__HTTP_MSG - 1536 - HTTP_WHAT - 64], name[1536];
  int rc = 0;
  if (v.kind != HTTP_OK) {
    rc = v.code;
    note[0] = '\0';
    if (rc == LADE_ENOENT && h->o.stale) h->o.stale(h->o.ctx); /* listed, now gone: the listing is stale */
    if (r->refreshed || rc == LADE_ENOENT) note_of(h, note, sizeof note);
    name_of(h, r, name, sizeof name);
    if (v.kind == HTTP_RETRY)
      snprintf(msg, sizeof msg, "%s: %s after %u retries%s", name, v.what, r->retries, note);
    else
      snprintf(msg, sizeof msg, "%s: %s%s", name, v.what, note);
  } else {
    h->win_bytes += r->body.len;
  }
  if (!r->waiter) *notify = 1;
  answer(h, r, rc, msg);
  pthread_mutex_unlock(&h->mu);
}

/* Fails every request that has not finished (on close). Locked. */
static void fail_waiting(lade__http_t *h, http_fifo_t *f) {
  for (http_req_t *r; (r = fifo_pop(f));) {
    if (r->waiter) {
      char name[1536];
      name_of(h, r, name, sizeof name);
      r->waiter->rc = LADE_EINTR;
      snprintf(r->waiter->msg, sizeof r->waiter->msg, "%s: the source was closed", name);
      r->waiter->done = 1;
    }
    req_release(h, r);
  }
}

static void *loop_main(void *arg) {
  lade__http_t *h = arg;
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)h, 0x5333);
  http_req_t *startable[256];
  for (;;) {
    double now = lade__now();
    size_t n_start = 0;
    long wait_ms = 200;
    pthread_mutex_lock(&h->mu);
    if (h->stop) {
      pthread_mutex_unlock(&h->mu);
      break;
    }
    /* due retries go first: they are the oldest demand */
    http_fifo_t keep = {0};
    for (http_req_t *r; (r = fifo_pop(&h->timers));) {
      if (r->not_before <= now && h->in_flight + n_start < h->limit && n_start < 256) {
        startable[n_start++] = r;
      } else {
        if (r->not_before > now) {
          long ms = (long)((r->not_before - now) * 1000.0) + 1;
          if (ms < wait_ms) wait_ms = ms;
        }
        fifo_push(&keep, r);
      }
    }
    h->timers = keep;
    uint32_t bg_limit = bg_cap(h), bg_start = 0;
    for (size_t i = 0; i < n_start; i++) bg_start += (uint32_t)startable[i]->bg;
    while (h->in_flight + n_start < h->limit && n_start < 256) {
      http_req_t *r = fifo_pop(&h->urgent);
      if (!r) r = fifo_pop(&h->queue);
      if (!r && h->bg_in_flight + bg_start < bg_limit) r = fifo_pop(&h->bg), bg_start += r != NULL;
      if (!r) break;
      startable[n_start++] = r;
    }
    h->bg_in_flight += bg_start;
    if (h->in_flight + n_start < h->limit && !h->urgent.n && !h->queue.n && (!h->bg.n || h->bg_in_flight < bg_limit))
      h->win_starved = 1;
    h->in_flight += (uint32_t)n_start;
    h->get_requests += n_start;
    pthread_mutex_unlock(&h->mu);

    int notify = 0;
    for (size_t i = 0; i < n_start; i++) {
      char msg[LADE__HTTP_MSG];
      http_req_t *r = startable[i];
      int src = start(h, r, msg, sizeof msg);
      pthread_mutex_lock(&h->mu);
      if (src == 0) {
        active_link(h, r);
      } else {
        /* not started (too big to read, or no memory): fail it like a transfer error */
        h->in_flight--;
        h->get_requests--;
        if (r->bg) h->bg_in_flight--;
        if (!r->waiter) notify = 1;
        answer(h, r, src, msg);
      }
      pthread_mutex_unlock(&h->mu);
    }

    int running = 0;
    curl_multi_perform(h->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left)))
      if (m->msg == CURLMSG_DONE) finish(h, m->easy_handle, m->data.result, &rng, &notify);
    lade__source_t *s = h->o.src;
    if (notify && s && s->on_ready) s->on_ready(s->on_ready_ctx);
    pthread_mutex_lock(&h->mu);
    tune(h, lade__now());
    int more = (h->urgent.n || h->queue.n || (h->bg.n && h->bg_in_flight < bg_cap(h))) && h->in_flight < h->limit;
    pthread_mutex_unlock(&h->mu);
    if (notify || more) continue; /* start what just became possible */
    curl_multi_poll(h->multi, NULL, 0, (int)wait_ms, NULL);
  }
  /* stop: abandon transfers, answer blocked readers */
  pthread_mutex_lock(&h->mu);
  fail_waiting(h, &h->urgent);
  fail_waiting(h, &h->queue);
  fail_waiting(h, &h->bg);
  fail_waiting(h, &h->timers);
  http_fifo_t active = {0};
  while (h->active) {
    http_req_t *r = h->active;
    active_unlink(h, r);
    fifo_push(&active, r);
  }
  pthread_mutex_unlock(&h->mu);
  for (http_req_t *r = active.head; r; r = r->next) {
    curl_multi_remove_handle(h->multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
  }
  pthread_mutex_lock(&h->mu);
  fail_waiting(h, &active);
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* ------------------------------------------------------------------- API */

static int wake(lade__http_t *h) { return !h->multi ? -1 : curl_multi_wakeup(h->multi) == CURLM_OK ? 0 : -1; }

int lade__http_submit(lade__http_t *h, const lade__http_get_t *g, size_t n, int background) {
  assert(h->thread_started);
  int rc = 0;
  pthread_mutex_lock(&h->mu);
  for (size_t i = 0; i < n && !rc; i++) {
    uint32_t np = g[i].nparts ? g[i].nparts : 1;
    for (uint32_t k = 0; k < np && !rc; k++) {
      uint64_t idx = g[i].nparts ? g[i].parts[k].idx : g[i].obj;
      if (idx >= h->n_idx)
        rc = lade__fail(LADE_ERANGE, "%s: sample %llu out of range (%llu samples)", h->o.what, (unsigned long long)idx,
                        (unsigned long long)h->n_idx);
    }
    if (rc) break;
    http_req_t *r = req_new(h, &g[i], NULL);
    if (!r) {
      rc = lade__fail(LADE_ENOMEM, "%s: out of memory", h->o.what);
      break;
    }
    for (uint32_t k = 0; k < r->get.nparts; k++) h->wants[r->get.parts[k].idx]++;
    r->bg = background != 0;
    fifo_push(background ? &h->bg : &h->queue, r);
  }
  pthread_mutex_unlock(&h->mu);
  wake(h);
  return rc;
}

void lade__http_reserve(lade__http_t *h, uint64_t results, uint64_t bytes) {
  pthread_mutex_lock(&h->mu);
  if (results > h->res_max_count) h->res_max_count = (size_t)LADE__MIN(results, (uint64_t)SIZE_MAX / 2);
  if (bytes > h->res_max_bytes) h->res_max_bytes = (size_t)LADE__MIN(bytes, (uint64_t)SIZE_MAX / 2);
  pthread_mutex_unlock(&h->mu);
}

bool lade__http_ready(lade__http_t *h, uint64_t idx) {
  assert(h->thread_started);
  if (idx >= h->n_idx) return true;
  pthread_mutex_lock(&h->mu);
  bool ready = h->res[idx] != NULL || h->wants[idx] == 0;
  pthread_mutex_unlock(&h->mu);
  return ready;
}

void lade__http_stats(lade__http_t *h, lade__source_stats_t *out) {
  pthread_mutex_lock(&h->mu);
  out->get_requests = h->get_requests;
  out->list_requests = h->list_requests;
  out->retries = h->retried;
  out->bytes = h->bytes;
  out->in_flight = h->in_flight;
  out->concurrency = h->limit;
  pthread_mutex_unlock(&h->mu);
}

/* Hands `b` to the caller's buffer by swapping (no copy); the caller's old
 * buffer is recycled for later bodies. Locked. */
static void hand_over(lade__http_t *h, lade__buf_t *b, lade__buf_t *out) {
  lade__buf_t old = *out;
  size_t len = b->len;
  *out = *b;
  memset(b, 0, sizeof *b);
  if (old.data) buf_recycle(h, &old);
  if (!out->data) { /* empty body: give the caller a valid buffer */
    out->data = malloc(1);
    out->cap = out->data ? 1 : 0;
  }
  out->len = len;
}

int lade__http_read(lade__http_t *h, uint64_t idx, const lade__http_get_t *g, lade__buf_t *out) {
  assert(h->thread_started && idx < h->n_idx);
  pthread_mutex_lock(&h->mu);
  for (;;) {
    http_result_t *r = h->res[idx];
    if (r) {
      result_unlink(h, r);
      h->wants[idx]--;
      int rc = r->rc;
      if (rc) lade__set_error_text(r->msg);
      else hand_over(h, &r->body, out);
      result_free(h, r);
      pthread_mutex_unlock(&h->mu);
      return rc;
    }
    if (h->wants[idx] == 0 || h->stop) break;
    pthread_cond_wait(&h->cv, &h->mu);
  }
  char name[1536];
  h->o.name(h->o.ctx, g->obj, name, sizeof name);
  if (h->stop) {
    pthread_mutex_unlock(&h->mu);
    return lade__fail(LADE_EINTR, "%s: the source was closed", name);
  }
  /* no want: fetch it now, ahead of the submitted batches (a worker waits) */
  http_waiter_t *w = calloc(1, sizeof *w);
  lade__http_get_t one = *g;
  one.nparts = 0;
  http_req_t *q = w ? req_new(h, &one, w) : NULL;
  if (!q) {
    pthread_mutex_unlock(&h->mu);
    free(w);
    return lade__fail(LADE_ENOMEM, "%s: out of memory", h->o.what);
  }
  fifo_push(&h->urgent, q);
  pthread_mutex_unlock(&h->mu);
  wake(h);
  pthread_mutex_lock(&h->mu);
  while (!w->done) pthread_cond_wait(&h->cv, &h->mu);
  int rc = w->rc;
  if (rc) {
    lade__set_error_text(w->msg);
    buf_recycle(h, &w->body);
  } else {
    hand_over(h, &w->body, out);
  }
  pthread_mutex_unlock(&h->mu);
  free(w);
  return rc;
}

void lade__http_destroy(lade__http_t *h) {
  if (!h) return;
  if (h->thread_started) {
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    wake(h);
    pthread_join(h->thread, NULL);
  }
  if (h->multi) curl_multi_cleanup(h->multi);
  for (size_t i = 0; i < h->n_free_easy; i++) curl_easy_cleanup(h->free_easy[i]);
  free(h->free_easy);
  for (http_req_t *r = h->free_reqs, *n; r; r = n) {
    n = r->next;
    free(r->body.data);
    free(r);
  }
  for (size_t i = 0; i < h->n_free_bufs; i++) free(h->free_bufs[i].data);
  for (http_result_t *r = h->res_oldest, *n; r; r = n) {
    n = r->next;
    free(r->body.data);
    free(r->msg);
    free(r);
  }
  free(h->res);
  free(h->wants);
  free(h->ca_file);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h);
}

int lade__http_create(lade__http_t **out, const lade__http_opts_t *o) {
  *out = NULL;
  int rc = lade__http_global_init();
  if (rc) return rc;
  lade__http_t *h = calloc(1, sizeof *h);
  if (!h) return lade__fail(LADE_ENOMEM, "%s: out of memory", o->what);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->o = *o;
  const char *ca = o->ca_file && o->ca_file[0] ? o->ca_file : getenv("SSL_CERT_FILE");
  if (!ca || !ca[0]) ca = getenv("CURL_CA_BUNDLE");
  if (ca && ca[0] && !(h->ca_file = strdup(ca))) {
    lade__http_destroy(h);
    return lade__fail(LADE_ENOMEM, "%s: out of memory", o->what);
  }
  h->o.ca_file = h->ca_file;
  if (!h->o.retry_base_ms) h->o.retry_base_ms = 1;
  if (!h->o.max_conc) h->o.max_conc = 128;
  h->limit = h->o.fixed_conc ? h->o.fixed_conc : LADE__MIN((uint32_t)HTTP_START_AUTO, h->o.max_conc);
  h->slow_start = 1;
  *out = h;
  return 0;
}

int lade__http_start(lade__http_t *h, uint64_t n_idx) {
  assert(!h->thread_started && !h->multi);
  h->n_idx = n_idx;
  h->wants = calloc(n_idx ? n_idx : 1, sizeof *h->wants);
  h->res = calloc(n_idx ? n_idx : 1, sizeof *h->res);
  h->multi = curl_multi_init();
  if (!h->wants || !h->res || !h->multi) return lade__fail(LADE_ENOMEM, "%s: out of memory", h->o.what);
  h->res_max_count = 4 * (size_t)LADE__MAX(h->o.max_conc, h->o.fixed_conc) + 1024;
  h->res_max_bytes = (size_t)512 << 20;
  curl_multi_setopt(h->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
  curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long)LADE__MAX(h->o.max_conc, h->o.fixed_conc) + 8);
  h->win_start = lade__now();
  if (pthread_create(&h->thread, NULL, loop_main, h) != 0)
    return lade__fail(LADE_ETHREAD, "%s: cannot start its thread", h->o.what);
  h->thread_started = 1;
  return 0;
}

#endif /* LADE_HAVE_CURL */
