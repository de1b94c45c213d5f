/*
 * s3.c - the `s3` source: one object per sample under s3://bucket/prefix on
 * any S3-compatible endpoint (AWS, MinIO, Ceph RGW, s3rver).
 *
 * Design. open() lists the prefix once (paginated ListObjectsV2, blocking,
 * on the engine's worker) or takes the listing from cache_dir. Then ONE
 * background thread per source owns a curl multi handle and runs every GET:
 * hundreds of requests in flight cost sockets, not threads (paper 003's
 * fetchers without a thread per request). Requests enter through two FIFO
 * queues - `urgent` for read()s that found no want (a worker is blocked on
 * them right now), `queue` for submit()ted batches, and `bg` for background
 * submits (the DELI prefetcher's speculative fetches), each started in submission
 * order, and never more than three quarters of the limit) - and a timer
 * list for retries waiting out their backoff. Arrived
 * submitted samples go into a table keyed by dataset index (one result per
 * want); read() takes one and swaps its buffer with the caller's, so the body
 * bytes are never copied. Arrived-but-unread results are bounded and dropped
 * oldest first together with their want.
 *
 * The limit on requests in flight is fixed (s3_concurrency) or tuned by the
 * loop: completed bytes/s measured over half-second windows while requests
 * wait in the queue. It starts at 32, doubles while the rate grows (slow
 * start), then moves in steps of a quarter: up while the rate grows, down
 * when it falls by a quarter, and a probe up after 8 flat windows; halved
 * when the server throttles (503/429/SlowDown).
 *
 * Faults: per-request timeout and a low-speed limit; 5xx, 429, SlowDown-like
 * codes, timeouts, resets and bodies cut short (Content-Length) are retried
 * with full-jitter exponential backoff, the body restarted from scratch;
 * 403/404 and other 4xx fail at once naming the key and the server's
 * <Code>/<Message>. A body is never held past the size it may have (the
 * listed size; on_header/on_body stop the transfer), and a reply of another
 * size than listed is followed by one HEAD: a replaced object is fetched
 * again at its new size, an unchanged one was damaged in transit and is
 * retried. Listings must end with their closing tag, never repeat a
 * continuation token, and never name a key twice. Secrets live in the impl struct and in curl's options only:
 * no message built here contains them.
 *
 * Locking: `mu` guards the queues, the result table, wants, counters and the
 * concurrency limit; `cv` is broadcast when a result or a waiter's answer
 * arrives. The loop thread never calls curl while holding `mu`, and calls
 * on_ready() with no lock held. Only the loop thread touches the multi handle
 * (curl_multi_wakeup is the one call made from other threads).
 */
#ifdef LADE_HAVE_CURL

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "source.h"
#include "source/s3xml.h"

#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_BACKOFF_CAP_MS 20000.0
#define S3_MIN_AUTO 4
#define S3_START_AUTO 32
#define S3_WINDOW_S 0.5
#define S3_MSG 768
#define S3_LONGMSG (S3_MSG + 1536 + LADE_PATH_MAX) /* a final error: key, server's words, the listing's cache file */
#define S3_ERROR_CAP ((uint64_t)64 << 10) /* an <Error> reply: only its Code and Message are read */
#define S3_PAGE_CAP ((uint64_t)64 << 20) /* a listing page (1000 keys of at most 1 KiB) is far smaller */

/* ------------------------------------------------------------------ types */

typedef struct s3_result {
  uint64_t idx;
  int rc;                          /* 0 or the final error */
  lade__buf_t body;
  char *msg;                       /* error text (malloc), NULL on success */
  struct s3_result *next_idx;      /* same index, arrival order */
  struct s3_result *prev, *next;   /* all stored results, oldest first */
} s3_result_t;

typedef struct s3_waiter {         /* a read() that started its own request */
  int done, rc;
  lade__buf_t body;
  char msg[S3_LONGMSG];
} s3_waiter_t;

typedef struct s3_req {
  uint64_t idx;
  s3_waiter_t *waiter;             /* NULL: a submitted want, answered through the table */
  CURL *easy;
  lade__buf_t body;
  uint32_t retries;
  double not_before;               /* retry timer (monotonic s) */
  int bg;                          /* a background submit */
  uint64_t expect;                 /* the size the body must have: listed, or refreshed by a HEAD */
  uint64_t cap;                    /* a 2xx body past this many bytes is stopped (error bodies: S3_ERROR_CAP) */
  int64_t clen;                    /* the reply's Content-Length, -1 when none */
  int over;                        /* the body passed cap (or its Content-Length did) */
  int head_agreed;                 /* the HEAD found the size the listing has */
  int head;                        /* this turn is a HEAD refreshing `expect` */
  int refreshed;                   /* a HEAD has been made (once per request) */
  char size_what[S3_MSG];          /* the size mismatch that sent it to the HEAD */
  char errbuf[CURL_ERROR_SIZE];
  struct s3_req *next, *prev;     /* a queue, or the active list while in flight */
} s3_req_t;

typedef struct s3_fifo {
  s3_req_t *head, *tail;
  size_t n;
} s3_fifo_t;

typedef struct s3_impl {
  /* listing: keys back to back in one arena, no allocation per object */
  char *arena;
  size_t arena_len, arena_cap;
  uint64_t *off, *size;
  int32_t *label;
  uint64_t count, cap;
  /* where */
  char bucket[256], prefix[1024], endpoint[512], region[64];
  char base_url[1024];             /* endpoint + bucket in the chosen addressing, no trailing '/' */
  int virtual_host;
  /* credentials (never printed) */
  char *userpwd;                   /* "AKID:SECRET" or NULL for anonymous */
  char sigv4[128];
  struct curl_slist *headers;
  /* settings */
  uint32_t timeout_ms, connect_timeout_ms, retries, retry_base_ms, fixed_conc, max_conc;
  uint64_t max_sample;             /* max_sample_bytes: no body is read past this */
  /* the listing cache file (cache_dir and listing_ttl set), for messages */
  char cache_file[LADE_PATH_MAX + 64];
  int from_cache, cache_dropped;
  uint64_t cache_created;          /* wall-clock seconds */
  uint64_t listing_ttl;
  /* the loop */
  pthread_t thread;
  int thread_started;
  CURLM *multi;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  s3_fifo_t urgent, queue, bg, timers; /* bg: background submits; timers: unsorted, scanned each turn */
  s3_req_t *active;                /* in flight (doubly linked) */
  lade__source_t *src;             /* for on_ready */
  s3_req_t *free_reqs;
  CURL **free_easy;
  size_t n_free_easy, cap_free_easy;
  lade__buf_t free_bufs[32];
  size_t n_free_bufs;
  /* results: per index wants and arrived results */
  uint32_t *wants;
  s3_result_t **res;
  s3_result_t *res_oldest, *res_newest;
  size_t res_count, res_bytes, res_max_count, res_max_bytes;
  /* counters and tuning */
  uint64_t get_requests, list_requests, retried, bytes, truncated, throttled, refreshed;
  uint32_t in_flight, limit;
  uint32_t bg_in_flight;           /* background requests among in_flight */
  double win_start, win_prev_rate, last_throttle;
  uint64_t win_bytes;
  int win_starved, flat_windows;
  int slow_start; /* doubling the limit until the rate stops growing */
} s3_impl_t;

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc;
static void curl_init_once(void) { g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* --------------------------------------------------------------- helpers */

static void fifo_push(s3_fifo_t *f, s3_req_t *r) {
  r->next = NULL;
  if (f->tail) f->tail->next = r;
  else f->head = r;
  f->tail = r;
  f->n++;
}

static s3_req_t *fifo_pop(s3_fifo_t *f) {
  s3_req_t *r = f->head;
  if (!r) return NULL;
  f->head = r->next;
  if (!f->head) f->tail = NULL;
  f->n--;
  r->next = NULL;
  return r;
}

static const char *key_of(const s3_impl_t *d, uint64_t i) { return d->arena + d->off[i]; }

/* RFC 3986 encoding as SigV4 wants it: unreserved characters kept, '/' kept
 * when keep_slash, everything else %XX with upper-case hex. */
static int url_encode(char *dst, size_t size, const char *src, int keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
    int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
    if (n + (plain ? 1 : 3) >= size) return -1;
    if (plain) {
      dst[n++] = (char)*p;
    } else {
      dst[n++] = '%';
      dst[n++] = hex[*p >> 4];
      dst[n++] = hex[*p & 15];
    }
  }
  dst[n] = '\0';
  return 0;
}

/* ------------------------------------------------------ classifying replies */

/* S3_SIZE: a complete reply of another size than expected (the listed size,
 * or more than the cap): the object may have been replaced since it was
 * listed, so the entry is refreshed with a HEAD before anything else. */
enum { S3_OK = 0, S3_RETRY, S3_FINAL, S3_SIZE };

typedef struct s3_verdict {
  int kind;         /* S3_OK, S3_RETRY, S3_FINAL, S3_SIZE */
  int code;         /* lade error code when not OK */
  int throttled;    /* 503/429/SlowDown: the tuner backs off */
  int truncated;
  long status;      /* HTTP status, 0 when none arrived */
  uint64_t size;    /* a HEAD's Content-Length: the object's size now */
  char what[S3_MSG]; /* "HTTP 503 SlowDown: message" */
} s3_verdict_t;

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

/* Judges one finished transfer of r: r->expect is the size the body must
 * have (UINT64_MAX: any), r->over says on_body stopped it past r->cap, and
 * r->head that it was a HEAD (no body; the Content-Length is the size). */
static void judge(CURL *e, CURLcode cc, const s3_req_t *r, s3_verdict_t *v) {
  memset(v, 0, sizeof *v);
  long status = 0;
  curl_off_t cl = -1;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
  v->status = status;
  int ok_status = status >= 200 && status < 300;
  int too_big = r->over;
  if (too_big && ok_status) {
    /* stopped before the body was buffered: it would pass the cap */
    v->kind = r->expect == UINT64_MAX ? S3_FINAL : S3_SIZE;
    v->code = LADE_ERANGE;
    if (r->clen >= 0 && (uint64_t)r->clen > r->cap)
      snprintf(v->what, sizeof v->what, "the reply is %lld bytes (Content-Length), ", (long long)r->clen);
    else
      snprintf(v->what, sizeof v->what, "the reply passed %llu bytes%s, ", (unsigned long long)r->cap,
               r->clen >= 0 ? "" : " (no Content-Length)");
    size_t n = strlen(v->what);
    if (r->expect != UINT64_MAX)
      snprintf(v->what + n, sizeof v->what - n, "the listing says %llu", (unsigned long long)r->expect);
    else
      snprintf(v->what + n, sizeof v->what - n, "the most lade reads of it");
    return;
  }
  if (cc != CURLE_OK && !(too_big && status)) {
    v->kind = curl_retryable(cc) ? S3_RETRY : S3_FINAL;
    v->code = cc == CURLE_OPERATION_TIMEDOUT ? LADE_ETIMEOUT : cc == CURLE_WRITE_ERROR ? LADE_ENOMEM : LADE_EREMOTE;
    v->truncated = cc == CURLE_PARTIAL_FILE;
    if (cc == CURLE_WRITE_ERROR)
      snprintf(v->what, sizeof v->what, "out of memory for the body after %zu bytes", r->body.len);
    else
      snprintf(v->what, sizeof v->what, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
    return;
  }
  if (ok_status) {
    if (r->head) {
      v->kind = cl >= 0 ? S3_OK : S3_RETRY;
      v->code = LADE_EREMOTE;
      v->size = cl >= 0 ? (uint64_t)cl : 0;
      if (cl < 0) snprintf(v->what, sizeof v->what, "HEAD without a Content-Length");
    } else if (cl >= 0 && (uint64_t)cl != r->body.len) {
      v->kind = S3_RETRY;
      v->code = LADE_EREMOTE;
      v->truncated = 1;
      snprintf(v->what, sizeof v->what, "truncated body: %zu of %lld bytes (Content-Length)", r->body.len,
               (long long)cl);
    } else if (r->expect != UINT64_MAX && r->body.len != r->expect) {
      v->kind = S3_SIZE;
      v->code = LADE_EREMOTE;
      v->truncated = 1;
      snprintf(v->what, sizeof v->what, "wrong size: %zu bytes, the listing says %llu", r->body.len,
               (unsigned long long)r->expect);
    } else {
      v->kind = S3_OK;
    }
    return;
  }
  char code[128], msg[512];
  const char *b = (const char *)r->body.data, *end = b ? b + r->body.len : NULL;
  if (b) {
    lade__xml_text(b, end, "Code", code, sizeof code);
    lade__xml_text(b, end, "Message", msg, sizeof msg);
  } else {
    code[0] = msg[0] = '\0';
  }
  int slow = !strcmp(code, "SlowDown") || !strcmp(code, "RequestTimeout") || !strcmp(code, "InternalError") ||
             !strcmp(code, "ServiceUnavailable") || !strcmp(code, "Throttling") || !strcmp(code, "RequestLimitExceeded");
  v->throttled = status == 503 || status == 429 || !strcmp(code, "SlowDown");
  if (status >= 500 || status == 429 || slow) {
    v->kind = S3_RETRY;
    v->code = LADE_EREMOTE;
  } else {
    v->kind = S3_FINAL;
    v->code = status == 404 ? LADE_ENOENT : LADE_EREMOTE;
  }
  snprintf(v->what, sizeof v->what, "HTTP %ld%s%s%s%s%s", status, r->head ? " (HEAD)" : "", code[0] ? " " : "", code,
           msg[0] ? ": " : "", msg);
}

static double backoff_s(const s3_impl_t *d, uint32_t retry, lade__rng_t *rng) {
  double cap = (double)d->retry_base_ms;
  for (uint32_t i = 1; i < retry && cap < S3_BACKOFF_CAP_MS; i++) cap *= 2;
  if (cap > S3_BACKOFF_CAP_MS) cap = S3_BACKOFF_CAP_MS;
  return lade__rng_double(rng) * cap / 1000.0; /* full jitter */
}

/* --------------------------------------------------------------- requests */

/* The most body bytes r may hold: its cap for a 2xx reply, a few KiB of an
 * error reply's XML. */
static uint64_t body_cap(const s3_req_t *r) {
  long status = 0;
  if (r->easy) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  return status >= 200 && status < 300 ? r->cap : LADE_MAX(r->cap, S3_ERROR_CAP);
}

/* Reads Content-Length as it arrives: a reply announcing more than the cap
 * is stopped before its first body byte. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud) {
  s3_req_t *r = ud;
  size_t n = size * nmemb;
  if (n > 15 && !strncasecmp(ptr, "content-length:", 15)) {
    char num[32];
    size_t k = LADE_MIN(n - 15, sizeof num - 1);
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
  return n;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  s3_req_t *r = ud;
  size_t n = size * nmemb;
  if ((uint64_t)r->body.len + n > body_cap(r)) { /* an endless or oversized body is never buffered */
    r->over = 1;
    return 0; /* curl ends the transfer (CURLE_WRITE_ERROR) */
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

/* URL of a key (or of the bucket when key is NULL, with query appended). */
static int make_url(const s3_impl_t *d, const char *key, const char *query, char *url, size_t size) {
  char enc[3 * 1024 + 16];
  if (key && url_encode(enc, sizeof enc, key, 1)) return -1;
  int n = snprintf(url, size, "%s/%s%s%s", d->base_url, key ? enc : "", query ? "?" : "", query ? query : "");
  return n < 0 || (size_t)n >= size ? -1 : 0;
}

static void setup_easy(const s3_impl_t *d, CURL *e, const char *url, s3_req_t *r, lade__buf_t *sink) {
  curl_easy_setopt(e, CURLOPT_URL, url);
  /* keys are paths of their own: curl must not squash "a/../b" into "b"
   * (RFC 3986 dot-segment removal); SigV4 then signs the path as sent */
  curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)d->timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)d->connect_timeout_ms);
  long low_time = (long)(d->timeout_ms / 1000);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, low_time < 1 ? 1L : (low_time > 30 ? 30L : low_time));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, d->headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r ? (void *)r : (void *)sink);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r ? (void *)r : (void *)sink);
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  if (r) curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  if (d->userpwd) {
    curl_easy_setopt(e, CURLOPT_USERPWD, d->userpwd);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, d->sigv4);
  }
}

/* ------------------------------------------------- blocking GET (listing) */

/* GETs url into out with retries (used by open() for LIST pages and the
 * label file; blocking is fine there). `shown` names the resource; a body
 * past `cap` bytes is refused before it is buffered. A LIST page that does
 * not end with its closing tag was cut short and is fetched again. */
static int fetch_blocking(s3_impl_t *d, const char *url, const char *shown, lade__buf_t *out, int is_list,
                          uint64_t cap) {
  CURL *e = curl_easy_init();
  if (!e) return lade__fail(LADE_ENOMEM, "%s: cannot create a curl handle", shown);
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)out, 0x4c53);
  int rc = 0;
  for (uint32_t attempt = 0;; attempt++) {
    char errbuf[CURL_ERROR_SIZE] = "";
    s3_req_t tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.body = *out;
    tmp.body.len = 0;
    tmp.expect = UINT64_MAX;
    tmp.cap = cap;
    curl_easy_reset(e);
    setup_easy(d, e, url, NULL, NULL);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &tmp);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &tmp);
    tmp.easy = e;
    tmp.clen = -1;
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    pthread_mutex_lock(&d->mu);
    if (is_list) d->list_requests++;
    else d->get_requests++;
    pthread_mutex_unlock(&d->mu);
    CURLcode cc = curl_easy_perform(e);
    *out = tmp.body;
    memcpy(tmp.errbuf, errbuf, sizeof errbuf);
    s3_verdict_t v;
    judge(e, cc, &tmp, &v);
    if (v.kind == S3_OK && is_list && !lade__s3_list_complete((const char *)out->data, out->len)) {
      /* a page cut short with a Content-Length to match: what is left may
       * parse, but its <IsTruncated> and later objects are gone */
      v.kind = S3_RETRY;
      v.code = LADE_EREMOTE;
      snprintf(v.what, sizeof v.what, "the listing page (%zu bytes) ends before </ListBucketResult>: cut short",
               out->len);
    }
    if (v.kind == S3_SIZE) v.kind = S3_FINAL;
    if (v.kind == S3_OK) break;
    if (v.kind == S3_FINAL || attempt >= d->retries) {
      rc = v.kind == S3_FINAL ? lade__fail(v.code, "%s: %s", shown, v.what)
                              : lade__fail(v.code, "%s: %s after %u retries", shown, v.what, attempt);
      break;
    }
    pthread_mutex_lock(&d->mu);
    d->retried++;
    pthread_mutex_unlock(&d->mu);
    double s = backoff_s(d, attempt + 1, &rng);
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
  }
  curl_easy_cleanup(e);
  return rc;
}

/* ------------------------------------------------------------- listing */

static int list_push(s3_impl_t *d, const char *key, size_t klen, uint64_t size) {
  if (d->count == d->cap) {
    uint64_t cap = d->cap ? d->cap * 2 : 1024;
    uint64_t *o = realloc(d->off, cap * sizeof *o);
    if (!o) return lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
    d->off = o;
    uint64_t *s = realloc(d->size, cap * sizeof *s);
    if (!s) return lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
    d->size = s;
    d->cap = cap;
  }
  if (d->arena_len + klen + 1 > d->arena_cap) {
    size_t cap = d->arena_cap ? d->arena_cap : 65536;
    while (cap < d->arena_len + klen + 1) cap *= 2;
    char *a = realloc(d->arena, cap);
    if (!a) return lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
    d->arena = a;
    d->arena_cap = cap;
  }
  memcpy(d->arena + d->arena_len, key, klen);
  d->arena[d->arena_len + klen] = '\0';
  d->off[d->count] = d->arena_len;
  d->size[d->count] = size;
  d->arena_len += klen + 1;
  d->count++;
  return 0;
}

static int list_push_cb(void *ctx, const char *key, size_t klen, uint64_t size) {
  s3_impl_t *d = ctx;
  size_t plen = strlen(d->prefix);
  if (klen == 0 || key[klen - 1] == '/') return 0;  /* folder marker */
  if (strncmp(key, d->prefix, plen) != 0) return 0; /* not ours (a server ignoring prefix) */
  return list_push(d, key, klen, size);
}

/* Parses one ListObjectsV2 page; appends objects, sets the next token. */
static int parse_list_page(s3_impl_t *d, lade__buf_t *page, char *token, size_t token_size, int *more,
                           const char *shown) {
  return lade__s3_parse_list((const char *)page->data, page->len, list_push_cb, d, token, token_size, more, shown);
}

/* The continuation tokens seen so far, as 64-bit hashes in an open-addressed
 * set: a server that hands out a token again (IsTruncated=true forever, or a
 * cycle of pages) would otherwise be listed without end. */
typedef struct token_set {
  uint64_t *h;
  size_t n, cap; /* cap: a power of two, or 0 */
} token_set_t;

/* 1 when token was already in the set, 0 when added, -1 out of memory. */
static int token_seen(token_set_t *t, const char *token) {
  uint64_t h = lade__hash64(token, strlen(token), 0x746f6b656e) | 1; /* 0 marks a free slot */
  if (2 * (t->n + 1) > t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    uint64_t *nh = calloc(cap, sizeof *nh);
    if (!nh) return -1;
    for (size_t i = 0; i < t->cap; i++) {
      if (!t->h[i]) continue;
      size_t j = t->h[i] & (cap - 1);
      while (nh[j]) j = (j + 1) & (cap - 1);
      nh[j] = t->h[i];
    }
    free(t->h);
    t->h = nh;
    t->cap = cap;
  }
  size_t j = h & (t->cap - 1);
  for (; t->h[j]; j = (j + 1) & (t->cap - 1))
    if (t->h[j] == h) return 1;
  t->h[j] = h;
  t->n++;
  return 0;
}

static int list_remote(s3_impl_t *d, const char *shown) {
  lade__buf_t page = {0};
  char token[2048] = "", etoken[6200], eprefix[3200], query[9600], url[12000];
  int rc = 0, more = 1;
  unsigned pages = 0;
  token_set_t seen = {0};
  if (url_encode(eprefix, sizeof eprefix, d->prefix, 0))
    return lade__fail(LADE_ERANGE, "%s: prefix too long", shown);
  while (!rc && more) {
    /* parameters in sorted order: curl 7.88's SigV4 signs the query as given */
    if (token[0]) {
      if (url_encode(etoken, sizeof etoken, token, 0)) {
        rc = lade__fail(LADE_ERANGE, "%s: continuation token too long", shown);
        break;
      }
      snprintf(query, sizeof query, "continuation-token=%s&list-type=2&prefix=%s", etoken, eprefix);
    } else {
      snprintf(query, sizeof query, "list-type=2&prefix=%s", eprefix);
    }
    if (make_url(d, NULL, query, url, sizeof url)) {
      rc = lade__fail(LADE_ERANGE, "%s: URL too long", shown);
      break;
    }
    rc = fetch_blocking(d, url, shown, &page, 1, S3_PAGE_CAP);
    if (rc) break;
    rc = lade__buf_reserve(&page, page.len + 1);
    if (rc) break;
    page.data[page.len] = '\0';
    rc = parse_list_page(d, &page, token, sizeof token, &more, shown);
    pages++;
    int again = !rc && more ? token_seen(&seen, token) : 0;
    if (again < 0) rc = lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
    if (again > 0) /* boto3's paginator stops the same way ("the same next token was received twice") */
      rc = lade__fail(LADE_EREMOTE,
                      "%s: listing page %u says IsTruncated=true with the continuation token '%.80s', which an "
                      "earlier page already gave: the server's listing does not advance; stopped",
                      shown, pages, token);
  }
  free(seen.h);
  lade__buf_free(&page);
  return rc;
}

static _Thread_local const s3_impl_t *sort_impl;
static int cmp_by_label_key(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  const s3_impl_t *d = sort_impl;
  int32_t lx = d->label ? d->label[x] : -1, ly = d->label ? d->label[y] : -1;
  if (lx != ly) return lx < ly ? -1 : 1;
  return strcmp(d->arena + d->off[x], d->arena + d->off[y]);
}

typedef struct name_span {
  const char *p;
  size_t n;
} name_span_t;

static int cmp_span(const void *a, const void *b) {
  const name_span_t *x = a, *y = b;
  size_t n = LADE_MIN(x->n, y->n);
  int c = memcmp(x->p, y->p, n);
  return c ? c : (x->n < y->n ? -1 : x->n > y->n);
}

/* ImageFolder labels: the first path component under the prefix, sorted. */
static int labels_from_folders(s3_impl_t *d, uint32_t *classes) {
  size_t plen = strlen(d->prefix);
  name_span_t *names = malloc((d->count ? d->count : 1) * sizeof *names);
  if (!names) return lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
  size_t n = 0;
  for (uint64_t i = 0; i < d->count; i++) {
    const char *rel = key_of(d, i) + plen, *slash = strchr(rel, '/');
    if (slash) names[n++] = (name_span_t){rel, (size_t)(slash - rel)};
  }
  qsort(names, n, sizeof *names, cmp_span);
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (u == 0 || cmp_span(&names[u - 1], &names[i]) != 0) names[u++] = names[i];
  for (uint64_t i = 0; i < d->count; i++) {
    const char *rel = key_of(d, i) + plen, *slash = strchr(rel, '/');
    d->label[i] = -1;
    if (!slash) continue;
    name_span_t k = {rel, (size_t)(slash - rel)};
    name_span_t *hit = bsearch(&k, names, u, sizeof *names, cmp_span);
    d->label[i] = (int32_t)(hit - names);
  }
  free(names);
  *classes = (uint32_t)u;
  return 0;
}

typedef struct label_line {
  const char *key;
  size_t n;
  int32_t label;
} label_line_t;

static int cmp_label_line(const void *a, const void *b) {
  const label_line_t *x = a, *y = b;
  return cmp_span(&(name_span_t){x->key, x->n}, &(name_span_t){y->key, y->n});
}

/* label_file: lines "KEY LABEL", KEY relative to the prefix. */
/* Labels are class indices 0..S3_MAX_CLASSES-1 (or -1): the classes are 0..max. */
#define S3_MAX_CLASSES (1 << 24)

static int labels_from_file(s3_impl_t *d, const char *path, uint32_t *classes) {
  lade__buf_t buf = {0};
  int rc;
  if (!strncmp(path, "s3://", 5)) {
    const char *slash = strchr(path + 5, '/');
    size_t blen = slash ? (size_t)(slash - path - 5) : strlen(path + 5);
    if (!slash || blen != strlen(d->bucket) || strncmp(path + 5, d->bucket, blen))
      return lade__fail(LADE_EINVAL, "label_file %s: must be an object in the dataset's bucket s3://%s", path,
                        d->bucket);
    char url[8192];
    if (make_url(d, slash + 1, NULL, url, sizeof url)) return lade__fail(LADE_ERANGE, "label_file %s: too long", path);
    rc = fetch_blocking(d, url, path, &buf, 0, d->max_sample);
  } else {
    rc = lade__read_file_max(AT_FDCWD, path, ".", d->max_sample, &buf);
    if (rc) rc = lade__fail_prefix(rc, "label_file: ");
  }
  if (!rc) rc = lade__buf_reserve(&buf, buf.len + 1);
  if (rc) {
    lade__buf_free(&buf);
    return rc;
  }
  buf.data[buf.len] = '\0';
  size_t nl = 1;
  for (size_t i = 0; i < buf.len; i++) nl += buf.data[i] == '\n';
  label_line_t *lines = malloc(nl * sizeof *lines);
  if (!lines) {
    lade__buf_free(&buf);
    return lade__fail(LADE_ENOMEM, "label_file: out of memory");
  }
  size_t n = 0, lineno = 0;
  int32_t maxl = -1;
  for (char *p = (char *)buf.data; !rc && *p;) {
    char *eol = strchr(p, '\n');
    if (eol) *eol = '\0';
    lineno++;
    size_t len = strlen(p);
    while (len && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t')) p[--len] = '\0';
    if (len && p[0] != '#') {
      char *sp = p + len;
      while (sp > p && sp[-1] != ' ' && sp[-1] != '\t') sp--;
      char *e;
      errno = 0;
      long v = strtol(sp, &e, 10);
      size_t klen = (size_t)(sp - p);
      while (klen && (p[klen - 1] == ' ' || p[klen - 1] == '\t')) klen--;
      if (sp == p || *e || errno || v < -1 || klen == 0)
        rc = lade__fail(LADE_EFORMAT, "label_file %s line %zu: expected 'KEY LABEL'", path, lineno);
      else if (v >= S3_MAX_CLASSES) /* the classes are 0..max label: a huge label is a huge class list */
        rc = lade__fail(LADE_EFORMAT, "label_file %s line %zu: label %ld is not below %d", path, lineno, v,
                        S3_MAX_CLASSES);
      else {
        lines[n++] = (label_line_t){p, klen, (int32_t)v};
        if ((int32_t)v > maxl) maxl = (int32_t)v;
      }
    }
    if (!eol) break;
    p = eol + 1;
  }
  if (!rc) {
    qsort(lines, n, sizeof *lines, cmp_label_line);
    size_t plen = strlen(d->prefix);
    for (uint64_t i = 0; i < d->count; i++) {
      const char *rel = key_of(d, i) + plen;
      label_line_t k = {rel, strlen(rel), 0};
      label_line_t *hit = bsearch(&k, lines, n, sizeof *lines, cmp_label_line);
      d->label[i] = hit ? hit->label : -1;
    }
    *classes = (uint32_t)(maxl + 1);
  }
  free(lines);
  lade__buf_free(&buf);
  return rc;
}

/* Orders the listing by (label, key) - ImageFolder order: objects at the
 * prefix first, then class by class - and compacts the arena in that order. */
static int reorder(s3_impl_t *d) {
  uint64_t *perm = malloc((d->count ? d->count : 1) * sizeof *perm);
  char *arena = malloc(d->arena_len ? d->arena_len : 1);
  uint64_t *off = malloc((d->count ? d->count : 1) * sizeof *off), *size = malloc((d->count ? d->count : 1) * 8);
  int32_t *label = malloc((d->count ? d->count : 1) * sizeof *label);
  if (!perm || !arena || !off || !size || !label) {
    free(perm), free(arena), free(off), free(size), free(label);
    return lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
  }
  for (uint64_t i = 0; i < d->count; i++) perm[i] = i;
  sort_impl = d;
  qsort(perm, d->count, sizeof *perm, cmp_by_label_key);
  size_t pos = 0;
  for (uint64_t i = 0; i < d->count; i++) {
    const char *k = key_of(d, perm[i]);
    size_t n = strlen(k) + 1;
    memcpy(arena + pos, k, n);
    off[i] = pos;
    pos += n;
    size[i] = d->size[perm[i]];
    label[i] = d->label[perm[i]];
  }
  free(perm), free(d->arena), free(d->off), free(d->size), free(d->label);
  d->arena = arena, d->arena_cap = d->arena_len, d->off = off, d->size = size, d->label = label;
  d->cap = d->count;
  return 0;
}

/* A key listed twice (a server or proxy that repeats objects across pages)
 * would become two samples of one object: refused. Keys are sorted by
 * (label, key) and a key has one label, so repeats are neighbours. */
static int check_unique(const s3_impl_t *d, const char *shown) {
  for (uint64_t i = 1; i < d->count; i++)
    if (!strcmp(key_of(d, i - 1), key_of(d, i)))
      return lade__fail(LADE_EFORMAT,
                        "%s: the listing names s3://%s/%s twice (%llu and %llu bytes): the server (or a proxy) "
                        "repeated it; one object is not made two samples",
                        shown, d->bucket, key_of(d, i), (unsigned long long)d->size[i - 1],
                        (unsigned long long)d->size[i]);
  return 0;
}

/* ---------------------------------------------------------- listing cache */

#define S3_CACHE_MAGIC "LADES3L1"

typedef struct cache_hdr {
  char magic[8];
  uint64_t created;  /* wall-clock seconds */
  uint64_t count, arena_len;
  uint32_t classes, pad;
  uint64_t checksum; /* of the body: sizes, labels, offsets, arena */
} cache_hdr_t;

static void cache_path(const s3_impl_t *d, const struct lade_config *cfg, char *out, size_t size) {
  uint64_t h = lade__hash64(d->endpoint, strlen(d->endpoint), 0xcbf29ce484222325ull);
  h = lade__hash64("\n", 1, h);
  h = lade__hash64(d->bucket, strlen(d->bucket), h);
  h = lade__hash64("\n", 1, h);
  h = lade__hash64(d->prefix, strlen(d->prefix), h);
  h = lade__hash64("\n", 1, h);
  h = lade__hash64(cfg->label_file, strlen(cfg->label_file), h);
  snprintf(out, size, "%s/listing-%016llx.bin", cfg->cache_dir, (unsigned long long)h);
}

static uint64_t body_checksum(const s3_impl_t *d) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  h = lade__hash64(d->size, d->count * sizeof *d->size, h);
  h = lade__hash64(d->label, d->count * sizeof *d->label, h);
  h = lade__hash64(d->off, d->count * sizeof *d->off, h);
  return lade__hash64(d->arena, d->arena_len, h);
}

static int read_all(int fd, void *p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_all(int fd, const void *p, size_t n) {
  for (size_t put = 0; put < n;) {
    ssize_t r = write(fd, (const char *)p + put, n - put);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    put += (size_t)r;
  }
  return 0;
}

/* Loads a cached listing younger than ttl; 0 on success, -1 to list anew
 * (absent, old, or corrupt: a bad file is simply rebuilt). */
static int cache_load(s3_impl_t *d, const char *path, uint64_t ttl, uint32_t *classes, uint64_t *created) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  cache_hdr_t h;
  struct stat st;
  int ok = fstat(fd, &st) == 0 && read_all(fd, &h, sizeof h) == 0 && !memcmp(h.magic, S3_CACHE_MAGIC, 8);
  uint64_t now = (uint64_t)time(NULL);
  ok = ok && h.created <= now + 60 && now - LADE_MIN(now, h.created) < ttl && h.count > 0 && h.count < (1ull << 40) &&
       h.arena_len < (1ull << 44) &&
       (uint64_t)st.st_size == sizeof h + h.count * (8 + 4 + 8) + h.arena_len;
  if (ok) {
    d->count = d->cap = h.count;
    d->arena_len = d->arena_cap = h.arena_len;
    d->size = malloc(h.count * 8);
    d->label = malloc(h.count * 4);
    d->off = malloc(h.count * 8);
    d->arena = malloc(h.arena_len + 1);
    ok = d->size && d->label && d->off && d->arena && read_all(fd, d->size, h.count * 8) == 0 &&
         read_all(fd, d->label, h.count * 4) == 0 && read_all(fd, d->off, h.count * 8) == 0 &&
         read_all(fd, d->arena, h.arena_len) == 0 && body_checksum(d) == h.checksum;
    /* every key inside the arena and NUL-terminated (the next offset is
     * bounded before the byte before it is read), every label a class */
    for (uint64_t i = 0; ok && i < h.count; i++) {
      uint64_t next = i + 1 < h.count ? d->off[i + 1] : h.arena_len;
      ok = d->off[i] < h.arena_len && next <= h.arena_len && next > d->off[i] && d->arena[next - 1] == '\0' &&
           d->label[i] >= -1 && (d->label[i] < 0 || (uint32_t)d->label[i] < h.classes);
    }
    ok = ok && h.classes <= S3_MAX_CLASSES;
    if (ok && h.arena_len) ok = d->arena[h.arena_len - 1] == '\0';
    if (!ok) {
      free(d->size), free(d->label), free(d->off), free(d->arena);
      d->size = d->off = NULL, d->label = NULL, d->arena = NULL;
      d->count = d->cap = d->arena_len = d->arena_cap = 0;
    }
  }
  close(fd);
  if (ok) *classes = h.classes, *created = h.created;
  return ok ? 0 : -1;
}

/* Stores the listing (temp file + rename, so readers never see half). A
 * failure to store is not an error: the next run lists again. */
static void cache_store(const s3_impl_t *d, const char *dir, const char *path, uint32_t classes) {
  if (lade__mkdir_private(dir) != 0) {
    lade__clear_error();
    return;
  }
  char tmp[LADE_PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  cache_hdr_t h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, S3_CACHE_MAGIC, 8);
  h.created = (uint64_t)time(NULL);
  h.count = d->count;
  h.arena_len = d->arena_len;
  h.classes = classes;
  h.checksum = body_checksum(d);
  int ok = write_all(fd, &h, sizeof h) == 0 && write_all(fd, d->size, d->count * 8) == 0 &&
           write_all(fd, d->label, d->count * 4) == 0 && write_all(fd, d->off, d->count * 8) == 0 &&
           write_all(fd, d->arena, d->arena_len) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* ------------------------------------------------------- the result table */

static void buf_recycle(s3_impl_t *d, lade__buf_t *b) {
  if (b->data && d->n_free_bufs < sizeof d->free_bufs / sizeof d->free_bufs[0] && b->cap <= (8u << 20)) {
    b->len = 0;
    d->free_bufs[d->n_free_bufs++] = *b;
  } else {
    free(b->data);
  }
  memset(b, 0, sizeof *b);
}

static void result_unlink(s3_impl_t *d, s3_result_t *r) {
  if (r->prev) r->prev->next = r->next;
  else d->res_oldest = r->next;
  if (r->next) r->next->prev = r->prev;
  else d->res_newest = r->prev;
  s3_result_t **pp = &d->res[r->idx];
  while (*pp != r) pp = &(*pp)->next_idx;
  *pp = r->next_idx;
  d->res_count--;
  d->res_bytes -= r->body.cap;
}

static void result_free(s3_impl_t *d, s3_result_t *r) {
  buf_recycle(d, &r->body);
  free(r->msg);
  free(r);
}

/* Stores a submitted request's outcome (locked). */
static void result_store(s3_impl_t *d, s3_req_t *q, int rc, const char *msg) {
  s3_result_t *r = calloc(1, sizeof *r);
  if (r && msg) r->msg = lade__strdup(msg);
  if (!r || (msg && !r->msg)) {
    /* no memory to keep it: drop the want, a read() refetches */
    free(r);
    if (d->wants[q->idx]) d->wants[q->idx]--;
    buf_recycle(d, &q->body);
    return;
  }
  r->idx = q->idx;
  r->rc = rc;
  r->body = q->body;
  memset(&q->body, 0, sizeof q->body);
  s3_result_t **pp = &d->res[r->idx];
  while (*pp) pp = &(*pp)->next_idx;
  *pp = r;
  r->prev = d->res_newest;
  if (d->res_newest) d->res_newest->next = r;
  else d->res_oldest = r;
  d->res_newest = r;
  d->res_count++;
  d->res_bytes += r->body.cap;
  /* bound: drop the oldest unread results with their wants */
  while (d->res_oldest && d->res_oldest != r &&
         (d->res_count > d->res_max_count || d->res_bytes > d->res_max_bytes)) {
    s3_result_t *old = d->res_oldest;
    result_unlink(d, old);
    if (d->wants[old->idx]) d->wants[old->idx]--;
    result_free(d, old);
  }
}

/* ---------------------------------------------------------------- the loop */

static s3_req_t *req_new(s3_impl_t *d, uint64_t idx, s3_waiter_t *w) {
  s3_req_t *r = d->free_reqs;
  if (r) d->free_reqs = r->next;
  else r = malloc(sizeof *r);
  if (!r) return NULL;
  memset(r, 0, sizeof *r);
  r->idx = idx;
  r->waiter = w;
  r->expect = d->size[idx];
  if (d->n_free_bufs) r->body = d->free_bufs[--d->n_free_bufs];
  return r;
}

static void req_release(s3_impl_t *d, s3_req_t *r) {
  buf_recycle(d, &r->body);
  r->next = d->free_reqs;
  d->free_reqs = r;
}

/* Starts one request (unlocked: only curl). Returns 0 or -1. */
static int start(s3_impl_t *d, s3_req_t *r, char *msg, size_t msg_size) {
  if (!r->head && r->expect > d->max_sample) {
    snprintf(msg, msg_size, "s3://%s/%s: %llu bytes listed, more than max_sample_bytes (%llu); not read", d->bucket,
             key_of(d, r->idx), (unsigned long long)r->expect, (unsigned long long)d->max_sample);
    return LADE_ERANGE;
  }
  snprintf(msg, msg_size, "s3://%s/%s: cannot start a request (out of memory or URL too long)", d->bucket,
           key_of(d, r->idx));
  CURL *e = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->n_free_easy) e = d->free_easy[--d->n_free_easy];
  pthread_mutex_unlock(&d->mu);
  if (e) curl_easy_reset(e);
  else e = curl_easy_init();
  if (!e) return LADE_ENOMEM;
  char url[8192];
  if (make_url(d, key_of(d, r->idx), NULL, url, sizeof url)) {
    curl_easy_cleanup(e);
    return LADE_ENOMEM;
  }
  r->easy = e;
  r->body.len = 0; /* a retry restarts the body from scratch */
  r->errbuf[0] = '\0';
  r->over = 0;
  /* the body is capped at the size it must have, so an endless or oversized
   * reply stops at once (on_header refuses a larger Content-Length before
   * any body byte) */
  r->cap = r->head ? 0 : r->expect;
  r->clen = -1;
  setup_easy(d, e, url, r, NULL);
  if (r->head) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  if (curl_multi_add_handle(d->multi, e) != CURLM_OK) {
    curl_easy_cleanup(e);
    r->easy = NULL;
    return LADE_ENOMEM;
  }
  return 0;
}

static void active_link(s3_impl_t *d, s3_req_t *r) {
  r->prev = NULL;
  r->next = d->active;
  if (d->active) d->active->prev = r;
  d->active = r;
}

static void active_unlink(s3_impl_t *d, s3_req_t *r) {
  if (r->prev) r->prev->next = r->next;
  else d->active = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

static void easy_release(s3_impl_t *d, CURL *e) {
  curl_multi_remove_handle(d->multi, e);
  pthread_mutex_lock(&d->mu);
  if (d->n_free_easy == d->cap_free_easy) {
    size_t cap = d->cap_free_easy ? d->cap_free_easy * 2 : 64;
    CURL **p = realloc(d->free_easy, cap * sizeof *p);
    if (p) d->free_easy = p, d->cap_free_easy = cap;
  }
  int kept = d->n_free_easy < d->cap_free_easy;
  if (kept) d->free_easy[d->n_free_easy++] = e;
  pthread_mutex_unlock(&d->mu);
  if (!kept) curl_easy_cleanup(e);
}

static uint32_t conc_min(const s3_impl_t *d) { return LADE_MIN((uint32_t)S3_MIN_AUTO, d->max_conc); }

/* Background requests take at most three quarters of the limit, so a
 * batch's request finds a free connection at once (locked). */
static uint32_t bg_cap(const s3_impl_t *d) { return LADE_MAX(1u, d->limit - d->limit / 4); }

/* Tuning step of the auto limit (locked). */
static void tune(s3_impl_t *d, double now) {
  if (d->fixed_conc) return;
  if (now - d->win_start < S3_WINDOW_S) return;
  double rate = (double)d->win_bytes / (now - d->win_start);
  uint32_t step = LADE_MAX(4u, d->limit / 4), lo = conc_min(d);
  if (!d->win_starved && now - d->last_throttle > S3_WINDOW_S) {
    /* only a window with demand queued all along says anything about the server */
    if (d->win_prev_rate <= 0 || rate > d->win_prev_rate * 1.05) {
      /* slow start (as TCP's): double while it pays, then steps of a quarter */
      d->limit = LADE_MIN(d->max_conc, d->slow_start ? d->limit * 2 : d->limit + step);
      d->flat_windows = 0;
    } else if (rate < d->win_prev_rate * 0.75) { /* a clear fall, not the noise of a busy machine */
      d->slow_start = 0;
      d->limit = d->limit > lo + step ? d->limit - step : lo;
      d->flat_windows = 0;
    } else {
      d->slow_start = 0;
      if (++d->flat_windows >= 8) { /* probe now and then */
        d->limit = LADE_MIN(d->max_conc, d->limit + step);
        d->flat_windows = 0;
      }
    }
    d->win_prev_rate = rate;
  }
  d->win_start = now;
  d->win_bytes = 0;
  d->win_starved = 0;
}

typedef struct finished {
  int notify;
} finished_t;

/* Where the listing came from, appended to errors about a listed size or
 * a listed object that is gone: a cached listing may be older than the
 * bucket (locked). */
static void listing_note(const s3_impl_t *d, char *buf, size_t size) {
  buf[0] = '\0';
  if (!d->from_cache) return;
  char when[40] = "?";
  time_t t = (time_t)d->cache_created;
  struct tm tm;
  if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  snprintf(buf, size, "; the listing was cached in %s at %s (listing_ttl=%llu s)%s", d->cache_file, when,
           (unsigned long long)d->listing_ttl,
           d->cache_dropped ? ": that file is now removed, so the next run lists the bucket again"
                            : ": remove that file, or set listing_ttl=0, to list the bucket again");
}

/* Handles one finished transfer (unlocked on entry). A reply of another
 * size than listed sends the request to a HEAD first (once): if the object
 * was replaced, the GET is made again at its new size (no retry spent) and
 * the stale cached listing is removed; if the HEAD agrees with the listing,
 * the body was damaged in transit and the GET is retried as any transient
 * error. */
static void finish(s3_impl_t *d, CURL *e, CURLcode cc, lade__rng_t *rng, finished_t *f) {
  s3_req_t *r = NULL;
  curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
  s3_verdict_t v;
  judge(e, cc, r, &v);
  easy_release(d, e);
  r->easy = NULL;
  double now = lade__now();
  pthread_mutex_lock(&d->mu);
  active_unlink(d, r);
  d->in_flight--;
  if (r->bg) d->bg_in_flight--;
  d->bytes += r->body.len;
  if (v.throttled && !d->fixed_conc && now - d->last_throttle > S3_WINDOW_S) {
    d->limit = LADE_MAX(conc_min(d), d->limit / 2);
    d->last_throttle = now;
    d->throttled++;
  }
  if (v.truncated) d->truncated++;
  if (r->head && v.kind != S3_RETRY) {
    r->head = 0;
    char what[S3_MSG];
    if (v.kind == S3_OK && v.size == r->expect) {
      /* the object is as listed: the GET's body was wrong in transit */
      r->head_agreed = 1;
      v.kind = S3_RETRY;
      v.code = LADE_EREMOTE;
      snprintf(what, sizeof what, "%.500s (a HEAD says %llu bytes, as listed)", r->size_what,
               (unsigned long long)r->expect);
      memcpy(v.what, what, sizeof what);
    } else if (v.kind == S3_OK) {
      /* replaced since it was listed */
      uint64_t was = r->expect;
      r->expect = v.size;
      d->refreshed++;
      if (d->from_cache && !d->cache_dropped) {
        unlink(d->cache_file);
        d->cache_dropped = 1;
      }
      if (v.size <= d->max_sample) {
        r->body.len = 0;
        r->not_before = now;
        fifo_push(&d->timers, r);
        pthread_mutex_unlock(&d->mu);
        return;
      }
      v.kind = S3_FINAL;
      v.code = LADE_ERANGE;
      snprintf(v.what, sizeof v.what, "now %llu bytes (the listing says %llu), more than max_sample_bytes (%llu)",
               (unsigned long long)v.size, (unsigned long long)was, (unsigned long long)d->max_sample);
    } else {
      snprintf(what, sizeof what, "%.300s; a HEAD to refresh its listed size answered %.300s", r->size_what, v.what);
      memcpy(v.what, what, sizeof what);
      if (v.code == LADE_ENOENT) {
        size_t n = strlen(v.what);
        snprintf(v.what + n, sizeof v.what - n, ": deleted since it was listed");
      }
    }
  } else if (v.kind == S3_SIZE) {
    if (!r->refreshed) {
      r->refreshed = 1;
      r->head = 1;
      snprintf(r->size_what, sizeof r->size_what, "%s", v.what);
      r->body.len = 0;
      r->not_before = now;
      fifo_push(&d->timers, r);
      pthread_mutex_unlock(&d->mu);
      return;
    }
    v.kind = S3_RETRY; /* after the refresh: damaged in transit */
    if (r->head_agreed) {
      size_t n = strlen(v.what);
      snprintf(v.what + n, sizeof v.what - n, " (a HEAD says %llu bytes, as listed)", (unsigned long long)r->expect);
    }
  }
  if (v.kind == S3_RETRY && r->retries < d->retries) {
    r->retries++;
    d->retried++;
    r->not_before = now + backoff_s(d, r->retries, rng);
    r->body.len = 0;
    fifo_push(&d->timers, r);
    pthread_mutex_unlock(&d->mu);
    return;
  }
  char msg[S3_LONGMSG], note[LADE_PATH_MAX + 256];
  int rc = 0;
  if (v.kind != S3_OK) {
    rc = v.code;
    note[0] = '\0';
    if (rc == LADE_ENOENT && d->from_cache && !d->cache_dropped) { /* listed, now gone: the listing is stale */
      unlink(d->cache_file);
      d->cache_dropped = 1;
    }
    if (r->refreshed || rc == LADE_ENOENT) listing_note(d, note, sizeof note);
    if (v.kind == S3_RETRY)
      snprintf(msg, sizeof msg, "s3://%s/%s: %s after %u retries%s", d->bucket, key_of(d, r->idx), v.what, r->retries,
               note);
    else
      snprintf(msg, sizeof msg, "s3://%s/%s: %s%s", d->bucket, key_of(d, r->idx), v.what, note);
  } else {
    d->win_bytes += r->body.len;
  }
  if (r->waiter) {
    s3_waiter_t *w = r->waiter;
    w->rc = rc;
    if (rc) snprintf(w->msg, sizeof w->msg, "%s", msg);
    w->body = r->body;
    memset(&r->body, 0, sizeof r->body);
    w->done = 1;
  } else {
    result_store(d, r, rc, rc ? msg : NULL);
    f->notify = 1;
  }
  req_release(d, r);
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* Fails every request that has not finished (on close). Locked. */
static void fail_waiting(s3_impl_t *d, s3_fifo_t *f) {
  for (s3_req_t *r; (r = fifo_pop(f));) {
    if (r->waiter) {
      r->waiter->rc = LADE_EINTR;
      snprintf(r->waiter->msg, sizeof r->waiter->msg, "s3://%s/%s: the source was closed", d->bucket,
               key_of(d, r->idx));
      r->waiter->done = 1;
    }
    req_release(d, r);
  }
}

static void *loop_main(void *arg) {
  s3_impl_t *d = arg;
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)d, 0x5333);
  s3_req_t *startable[256];
  for (;;) {
    double now = lade__now();
    size_t n_start = 0;
    long wait_ms = 200;
    pthread_mutex_lock(&d->mu);
    if (d->stop) {
      pthread_mutex_unlock(&d->mu);
      break;
    }
    /* due retries go first: they are the oldest demand */
    s3_fifo_t keep = {0};
    for (s3_req_t *r; (r = fifo_pop(&d->timers));) {
      if (r->not_before <= now && d->in_flight + n_start < d->limit && n_start < 256) {
        startable[n_start++] = r;
      } else {
        if (r->not_before > now) {
          long ms = (long)((r->not_before - now) * 1000.0) + 1;
          if (ms < wait_ms) wait_ms = ms;
        }
        fifo_push(&keep, r);
      }
    }
    d->timers = keep;
    uint32_t bg_limit = bg_cap(d), bg_start = 0;
    for (size_t i = 0; i < n_start; i++) bg_start += (uint32_t)startable[i]->bg;
    while (d->in_flight + n_start < d->limit && n_start < 256) {
      s3_req_t *r = fifo_pop(&d->urgent);
      if (!r) r = fifo_pop(&d->queue);
      if (!r && d->bg_in_flight + bg_start < bg_limit) r = fifo_pop(&d->bg), bg_start += r != NULL;
      if (!r) break;
      startable[n_start++] = r;
    }
    d->bg_in_flight += bg_start;
    if (d->in_flight + n_start < d->limit && !d->urgent.n && !d->queue.n && (!d->bg.n || d->bg_in_flight < bg_limit))
      d->win_starved = 1;
    d->in_flight += (uint32_t)n_start;
    d->get_requests += n_start;
    pthread_mutex_unlock(&d->mu);

    finished_t f = {0};
    for (size_t i = 0; i < n_start; i++) {
      char msg[S3_LONGMSG];
      int src = start(d, startable[i], msg, sizeof msg);
      if (src == 0) {
        pthread_mutex_lock(&d->mu);
        active_link(d, startable[i]);
        pthread_mutex_unlock(&d->mu);
        continue;
      }
      /* not started (too big to read, or no memory): fail it like a transfer error */
      s3_req_t *r = startable[i];
      pthread_mutex_lock(&d->mu);
      d->in_flight--;
      d->get_requests--;
      if (r->bg) d->bg_in_flight--;
      if (r->waiter) {
        r->waiter->rc = src;
        snprintf(r->waiter->msg, sizeof r->waiter->msg, "%s", msg);
        r->waiter->done = 1;
      } else {
        result_store(d, r, src, msg);
        f.notify = 1;
      }
      req_release(d, r);
      pthread_cond_broadcast(&d->cv);
      pthread_mutex_unlock(&d->mu);
    }

    int running = 0;
    curl_multi_perform(d->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(d->multi, &left)))
      if (m->msg == CURLMSG_DONE) finish(d, m->easy_handle, m->data.result, &rng, &f);
    if (f.notify && d->src->on_ready) d->src->on_ready(d->src->on_ready_ctx);
    pthread_mutex_lock(&d->mu);
    tune(d, lade__now());
    int more = (d->urgent.n || d->queue.n || (d->bg.n && d->bg_in_flight < bg_cap(d))) && d->in_flight < d->limit;
    pthread_mutex_unlock(&d->mu);
    if (f.notify || more) continue; /* start what just became possible */
    curl_multi_poll(d->multi, NULL, 0, (int)wait_ms, NULL);
  }
  /* stop: abandon transfers, answer blocked readers */
  pthread_mutex_lock(&d->mu);
  fail_waiting(d, &d->urgent);
  fail_waiting(d, &d->queue);
  fail_waiting(d, &d->bg);
  fail_waiting(d, &d->timers);
  s3_fifo_t active = {0};
  while (d->active) {
    s3_req_t *r = d->active;
    active_unlink(d, r);
    fifo_push(&active, r);
  }
  pthread_mutex_unlock(&d->mu);
  for (s3_req_t *r = active.head; r; r = r->next) {
    curl_multi_remove_handle(d->multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
  }
  pthread_mutex_lock(&d->mu);
  fail_waiting(d, &active);
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* ------------------------------------------------------------------- ops */

static int wake(s3_impl_t *d) { return curl_multi_wakeup(d->multi) == CURLM_OK ? 0 : -1; }

static int s3_submit(lade__source_t *s, const uint64_t *idx, size_t n, int background) {
  s3_impl_t *d = s->impl;
  int rc = 0;
  pthread_mutex_lock(&d->mu);
  for (size_t i = 0; i < n; i++) {
    if (idx[i] >= d->count) {
      rc = lade__fail(LADE_ERANGE, "s3 source: sample %llu out of range (%llu samples)", (unsigned long long)idx[i],
                      (unsigned long long)d->count);
      break;
    }
    s3_req_t *r = req_new(d, idx[i], NULL);
    if (!r) {
      rc = lade__fail(LADE_ENOMEM, "s3 source: out of memory");
      break;
    }
    d->wants[idx[i]]++;
    r->bg = background != 0;
    fifo_push(background ? &d->bg : &d->queue, r);
  }
  pthread_mutex_unlock(&d->mu);
  wake(d);
  return rc;
}

static bool s3_ready(lade__source_t *s, uint64_t idx) {
  s3_impl_t *d = s->impl;
  if (idx >= d->count) return true;
  pthread_mutex_lock(&d->mu);
  bool ready = d->res[idx] != NULL || d->wants[idx] == 0;
  pthread_mutex_unlock(&d->mu);
  return ready;
}

static void s3_stats(lade__source_t *s, lade__source_stats_t *out) {
  s3_impl_t *d = s->impl;
  memset(out, 0, sizeof *out);
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  out->get_requests = d->get_requests;
  out->list_requests = d->list_requests;
  out->retries = d->retried;
  out->bytes = d->bytes;
  out->in_flight = d->in_flight;
  out->concurrency = d->limit;
  pthread_mutex_unlock(&d->mu);
}

/* Hands `b` to the caller's buffer by swapping (no copy); the caller's old
 * buffer is recycled for later bodies. Locked. */
static void hand_over(s3_impl_t *d, lade__buf_t *b, lade__buf_t *out) {
  lade__buf_t old = *out;
  *out = *b;
  memset(b, 0, sizeof *b);
  if (old.data) buf_recycle(d, &old);
  if (!out->data) { /* empty body: give the caller a valid buffer */
    out->data = malloc(1);
    out->cap = out->data ? 1 : 0;
  }
}

static int s3_read(lade__source_t *s, uint64_t idx, lade__buf_t *out) {
  s3_impl_t *d = s->impl;
  if (idx >= d->count)
    return lade__fail(LADE_ERANGE, "s3 source: sample %llu out of range (%llu samples)", (unsigned long long)idx,
                      (unsigned long long)d->count);
  pthread_mutex_lock(&d->mu);
  for (;;) {
    s3_result_t *r = d->res[idx];
    if (r) {
      result_unlink(d, r);
      d->wants[idx]--;
      int rc = r->rc;
      if (rc) {
        lade__set_error_text(r->msg);
      } else {
        hand_over(d, &r->body, out);
        out->len = r->body.len ? r->body.len : out->len;
      }
      result_free(d, r);
      pthread_mutex_unlock(&d->mu);
      return rc;
    }
    if (d->wants[idx] == 0 || d->stop) break;
    pthread_cond_wait(&d->cv, &d->mu);
  }
  if (d->stop) {
    pthread_mutex_unlock(&d->mu);
    return lade__fail(LADE_EINTR, "s3://%s/%s: the source was closed", d->bucket, key_of(d, idx));
  }
  /* no want: fetch it now, ahead of the submitted batches (a worker waits) */
  s3_waiter_t w;
  memset(&w, 0, sizeof w);
  s3_req_t *q = req_new(d, idx, &w);
  if (!q) {
    pthread_mutex_unlock(&d->mu);
    return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
  }
  fifo_push(&d->urgent, q);
  pthread_mutex_unlock(&d->mu);
  wake(d);
  pthread_mutex_lock(&d->mu);
  while (!w.done) pthread_cond_wait(&d->cv, &d->mu);
  int rc = w.rc;
  if (rc) {
    lade__set_error_text(w.msg);
    buf_recycle(d, &w.body);
  } else {
    size_t len = w.body.len;
    hand_over(d, &w.body, out);
    out->len = len;
  }
  pthread_mutex_unlock(&d->mu);
  return rc;
}

static void s3_describe(lade__source_t *s, uint64_t idx, char *buf, size_t size) {
  s3_impl_t *d = s->impl;
  if (!d || idx >= d->count) {
    snprintf(buf, size, "s3 sample %llu", (unsigned long long)idx);
    return;
  }
  snprintf(buf, size, "s3://%s/%s", d->bucket, key_of(d, idx));
}

static void impl_free(s3_impl_t *d) {
  if (!d) return;
  if (d->multi) curl_multi_cleanup(d->multi);
  for (size_t i = 0; i < d->n_free_easy; i++) curl_easy_cleanup(d->free_easy[i]);
  free(d->free_easy);
  for (s3_req_t *r = d->free_reqs, *n; r; r = n) {
    n = r->next;
    free(r->body.data);
    free(r);
  }
  for (size_t i = 0; i < d->n_free_bufs; i++) free(d->free_bufs[i].data);
  for (s3_result_t *r = d->res_oldest, *n; r; r = n) {
    n = r->next;
    free(r->body.data);
    free(r->msg);
    free(r);
  }
  free(d->res);
  free(d->wants);
  free(d->arena), free(d->off), free(d->size), free(d->label);
  /* secrets are wiped before their memory goes back (lade__wipe: a memset
   * before free() may be dropped as a dead store) */
  if (d->userpwd) {
    lade__wipe(d->userpwd, strlen(d->userpwd));
    free(d->userpwd);
  }
  for (struct curl_slist *l = d->headers; l; l = l->next) /* x-amz-security-token */
    if (l->data) lade__wipe(l->data, strlen(l->data));
  curl_slist_free_all(d->headers);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
  memset(d, 0, sizeof *d);
  free(d);
}

static void s3_close(lade__source_t *s) {
  s3_impl_t *d = s->impl;
  if (!d) return;
  if (d->thread_started) {
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    wake(d);
    pthread_join(d->thread, NULL);
  }
  impl_free(d);
  s->impl = NULL;
  s->labels = NULL;
  s->sizes = NULL;
  s->count = 0;
}

static const char *env_or(const char *setting, const char *a, const char *b) {
  if (setting && setting[0]) return setting;
  const char *v = a ? getenv(a) : NULL;
  if (v && v[0]) return v;
  v = b ? getenv(b) : NULL;
  return v && v[0] ? v : NULL;
}

/* Where and who: bucket, prefix, endpoint, addressing, credentials. */
static int resolve(s3_impl_t *d, const struct lade_config *cfg) {
  const char *src = cfg->source + 5, *slash = strchr(src, '/');
  size_t blen = slash ? (size_t)(slash - src) : strlen(src);
  if (blen == 0 || blen >= sizeof d->bucket)
    return lade__fail(LADE_EINVAL, "dataset %s: expected s3://bucket/prefix", cfg->source);
  memcpy(d->bucket, src, blen);
  d->bucket[blen] = '\0';
  const char *prefix = slash ? slash + 1 : "";
  size_t plen = strlen(prefix);
  if (plen + 2 >= sizeof d->prefix) return lade__fail(LADE_ERANGE, "dataset %s: prefix too long", cfg->source);
  /* the prefix is a folder: s3://b/train lists train/..., never training/... */
  snprintf(d->prefix, sizeof d->prefix, "%s%s", prefix, plen && prefix[plen - 1] != '/' ? "/" : "");

  const char *region = env_or(cfg->s3_region, "AWS_REGION", "AWS_DEFAULT_REGION");
  snprintf(d->region, sizeof d->region, "%s", region ? region : "us-east-1");
  const char *ep = env_or(cfg->s3_endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
  if (ep) snprintf(d->endpoint, sizeof d->endpoint, "%s", ep);
  else snprintf(d->endpoint, sizeof d->endpoint, "https://s3.%s.amazonaws.com", d->region);
  size_t elen = strlen(d->endpoint);
  while (elen && d->endpoint[elen - 1] == '/') d->endpoint[--elen] = '\0';
  const char *host = strstr(d->endpoint, "://");
  if (!host || strchr(host + 3, '/') || strchr(host + 3, '@') || strchr(host + 3, '?'))
    return lade__fail(LADE_EINVAL, "s3 endpoint must look like scheme://host[:port] (no path, no user)");
  host += 3;
  int dns_ok = blen >= 3 && !strchr(d->bucket, '.') && !strchr(d->bucket, '_');
  for (const char *c = d->bucket; *c; c++) dns_ok = dns_ok && !(*c >= 'A' && *c <= 'Z');
  d->virtual_host = cfg->s3_addressing == LADE_S3_ADDR_VIRTUAL ||
                    (cfg->s3_addressing == LADE_S3_ADDR_AUTO && !ep && dns_ok);
  if (d->virtual_host)
    snprintf(d->base_url, sizeof d->base_url, "%.*s%s.%s", (int)(host - d->endpoint), d->endpoint, d->bucket, host);
  else
    snprintf(d->base_url, sizeof d->base_url, "%s/%s", d->endpoint, d->bucket);

  const char *akid = cfg->s3_access_key_id[0] ? cfg->s3_access_key_id : getenv("AWS_ACCESS_KEY_ID");
  const char *secret = cfg->s3_secret_access_key[0] ? cfg->s3_secret_access_key : getenv("AWS_SECRET_ACCESS_KEY");
  const char *token = cfg->s3_session_token[0] ? cfg->s3_session_token : getenv("AWS_SESSION_TOKEN");
  if (akid && !akid[0]) akid = NULL;
  if (secret && !secret[0]) secret = NULL;
  if (!akid != !secret)
    return lade__fail(LADE_EINVAL, "s3 credentials: %s is set but %s is not", akid ? "the access key id" : "the secret key",
                      akid ? "the secret key" : "the access key id");
  d->headers = curl_slist_append(NULL, "x-amz-content-sha256: " S3_EMPTY_SHA256);
  if (!d->headers) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
  if (akid) {
    if (strchr(akid, ':')) return lade__fail(LADE_EINVAL, "s3 credentials: the access key id must not contain ':'");
    size_t n = strlen(akid) + strlen(secret) + 2;
    d->userpwd = malloc(n);
    if (!d->userpwd) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
    snprintf(d->userpwd, n, "%s:%s", akid, secret);
    snprintf(d->sigv4, sizeof d->sigv4, "aws:amz:%s:s3", d->region);
    if (token && token[0]) {
      size_t tn = strlen(token) + 32;
      char *h = malloc(tn);
      if (!h) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
      snprintf(h, tn, "x-amz-security-token: %s", token);
      struct curl_slist *l = curl_slist_append(d->headers, h);
      lade__wipe(h, tn);
      free(h);
      if (!l) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
      d->headers = l;
    }
  }
  d->timeout_ms = cfg->s3_timeout_ms;
  d->connect_timeout_ms = cfg->s3_connect_timeout_ms;
  d->retries = cfg->s3_retries;
  d->max_sample = cfg->max_sample_bytes;
  d->listing_ttl = cfg->listing_ttl;
  d->retry_base_ms = cfg->s3_retry_base_ms ? cfg->s3_retry_base_ms : 1;
  d->max_conc = cfg->s3_max_concurrency ? cfg->s3_max_concurrency : 128;
  d->fixed_conc = cfg->s3_concurrency;
  d->limit = d->fixed_conc ? d->fixed_conc : LADE_MIN((uint32_t)S3_START_AUTO, d->max_conc);
  d->slow_start = 1;
  return 0;
}

static int s3_open(lade__source_t *s, const struct lade_config *cfg) {
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_init_rc != CURLE_OK) return lade__fail(LADE_EREMOTE, "libcurl failed to initialise");
  s3_impl_t *d = calloc(1, sizeof *d);
  if (!d) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
  d->src = s;
  int rc = resolve(d, cfg);
  char shown[2048];
  snprintf(shown, sizeof shown, "s3://%s/%s", d->bucket, d->prefix);
  uint32_t classes = 0;
  char cpath[LADE_PATH_MAX + 64] = "";
  int cached = 0;
  if (!rc && cfg->cache_dir[0] && cfg->listing_ttl > 0) {
    cache_path(d, cfg, cpath, sizeof cpath);
    cached = cache_load(d, cpath, cfg->listing_ttl, &classes, &d->cache_created) == 0;
    snprintf(d->cache_file, sizeof d->cache_file, "%s", cpath);
    d->from_cache = cached;
  }
  if (!rc && !cached) {
    rc = list_remote(d, shown);
    if (!rc && d->count == 0)
      rc = lade__fail(LADE_EEMPTY, "%s (endpoint %s) holds no objects", shown, d->endpoint);
    if (!rc) {
      d->label = malloc(d->count * sizeof *d->label);
      if (!d->label) rc = lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
    }
    if (!rc) rc = cfg->label_file[0] ? labels_from_file(d, cfg->label_file, &classes) : labels_from_folders(d, &classes);
    if (!rc) rc = reorder(d);
    if (!rc) rc = check_unique(d, shown);
    if (!rc && cpath[0]) cache_store(d, cfg->cache_dir, cpath, classes);
  }
  if (!rc) {
    d->wants = calloc(d->count, sizeof *d->wants);
    d->res = calloc(d->count, sizeof *d->res);
    d->multi = curl_multi_init();
    if (!d->wants || !d->res || !d->multi) rc = lade__fail(LADE_ENOMEM, "s3 source: out of memory");
  }
  if (!rc) {
    d->res_max_count = 4 * (size_t)LADE_MAX(d->max_conc, d->fixed_conc) + 1024;
    d->res_max_bytes = (size_t)512 << 20;
    curl_multi_setopt(d->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    curl_multi_setopt(d->multi, CURLMOPT_MAXCONNECTS, (long)LADE_MAX(d->max_conc, d->fixed_conc) + 8);
    d->win_start = lade__now();
    if (pthread_create(&d->thread, NULL, loop_main, d) != 0)
      rc = lade__fail(LADE_ETHREAD, "s3 source: cannot start its thread");
    else
      d->thread_started = 1;
  }
  if (rc) {
    impl_free(d);
    return rc;
  }
  s->impl = d;
  s->count = d->count;
  s->labels = d->label;
  s->classes = classes;
  s->sizes = d->size;
  return 0;
}

const lade__source_ops_t lade__source_s3 = {.name = "s3",
                                            .open = s3_open,
                                            .close = s3_close,
                                            .read = s3_read,
                                            .describe = s3_describe,
                                            .submit = s3_submit,
                                            .ready = s3_ready,
                                            .stats = s3_stats};

#endif /* LADE_HAVE_CURL */
