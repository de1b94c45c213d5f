/*
 * http_easy.c - one request's curl easy handle (http_impl.h): its options
 * (timeouts, a low-speed limit, TLS always verified, SigV4 signing, a
 * Range, the precondition of a pinned object) and the callbacks that read
 * its reply. A body is never held past the size it may have: on_header
 * refuses a larger Content-Length before the first body byte, on_body
 * stops an endless or oversized body, and an error reply keeps only its
 * first 64 KiB. Nor is a body read that is not the one asked for: at the
 * end of the headers, a reply whose Content-Range or version differs from
 * the request is refused before its first byte (lade__http_check_reply).
 * Runs on whichever thread performs the transfer; touches only the
 * request it is given.
 */
#ifdef LADE_HAVE_CURL

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/http_impl.h"

/* The most body bytes r may hold: its cap for a 2xx reply, a few KiB of an
 * error reply. */
static uint64_t body_cap(const lade__http_req_t *r) {
  long status = 0;
  if (r->easy) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  return status >= 200 && status < 300 ? r->cap : LADE__MAX(r->cap, LADE__HTTP_ERROR_CAP);
}

/* A decimal number at *p (digits only), advancing *p; -1 when none or too
 * large. */
static int read_num(const char **p, const char *end, uint64_t *v) {
  const char *q = *p;
  uint64_t x = 0;
  if (q >= end || *q < '0' || *q > '9') return -1;
  for (; q < end && *q >= '0' && *q <= '9'; q++) {
    if (x > (UINT64_MAX - 9) / 10) return -1;
    x = x * 10 + (uint64_t)(*q - '0');
  }
  *p = q;
  *v = x;
  return 0;
}

/* Content-Range: "bytes FIRST-LAST/TOTAL" (TOTAL may be '*'), as RFC 9110
 * writes it for a 206; anything else is unreadable (crange -1). */
static void read_content_range(lade__http_req_t *r, const char *v, const char *end) {
  while (v < end && (*v == ' ' || *v == '\t')) v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t')) end--;
  snprintf(r->cr_text, sizeof r->cr_text, "%.*s", (int)(end - v), v);
  r->crange = -1;
  if (end - v < 6 || strncasecmp(v, "bytes ", 6)) return;
  const char *p = v + 6;
  while (p < end && *p == ' ') p++;
  uint64_t a, b, t = UINT64_MAX;
  if (read_num(&p, end, &a) || p >= end || *p++ != '-' || read_num(&p, end, &b) || p >= end || *p++ != '/') return;
  if (p < end && *p == '*') p++;
  else if (read_num(&p, end, &t)) return;
  if (p != end || b < a) return;
  r->cr_first = a, r->cr_last = b, r->cr_total = t;
  r->crange = 1;
}

size_t lade__http_on_header(char *ptr, size_t size, size_t nmemb, void *ud) {
  lade__http_req_t *r = ud;
  size_t n = size * nmemb;
  if (n >= 5 && !strncmp(ptr, "HTTP/", 5)) { /* a status line: a reply's headers begin (again after a 1xx) */
    char line[64];
    snprintf(line, sizeof line, "%.*s", (int)LADE__MIN(n, sizeof line - 1), ptr);
    const char *sp = strchr(line, ' ');
    r->hstatus = sp ? strtol(sp + 1, NULL, 10) : 0;
    r->crange = 0;
    r->validator[0] = '\0';
    r->has_etag = 0;
    return n;
  }
  if (n <= 2 && (ptr[0] == '\r' || ptr[0] == '\n')) { /* the end of the headers: is this the reply asked for? */
    int bad = !r->head && r->hstatus >= 200 && r->hstatus < 300
                  ? lade__http_check_reply(r, r->hstatus, r->refused_what, sizeof r->refused_what)
                  : 0;
    if (bad) {
      r->refused = bad;
      return 0; /* curl ends the transfer (CURLE_WRITE_ERROR) before a body byte */
    }
    return n;
  }
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
  if (n > 14 && !strncasecmp(ptr, "content-range:", 14)) read_content_range(r, ptr + 14, ptr + n);
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
static size_t scatter(lade__http_req_t *r, const char *ptr, size_t n) {
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

size_t lade__http_on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  lade__http_req_t *r = ud;
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

void lade__http_req_headers_free(lade__http_req_t *r) {
  curl_slist_free_all(r->hdrs);
  r->hdrs = NULL;
}

/* r->hdrs: the handle's headers and the precondition r's pin asks for:
 * If-Match with a strong ETag (a weak one never matches If-Match, RFC 9110
 * 13.1.1: its reply's ETag is compared instead), If-Unmodified-Since with
 * a Last-Modified. 0, or -1 out of memory. */
static int pin_headers(const lade__http_t *h, lade__http_req_t *r) {
  char pre[300] = "";
  if (!r->pin || r->head) return 0;
  if (!strncmp(r->pin, "etag ", 5) && strncmp(r->pin + 5, "W/", 2))
    snprintf(pre, sizeof pre, "If-Match: %s", r->pin + 5);
  else if (!strncmp(r->pin, "modified ", 9))
    snprintf(pre, sizeof pre, "If-Unmodified-Since: %s", r->pin + 9);
  if (!pre[0]) return 0;
  struct curl_slist *l = NULL;
  for (const struct curl_slist *x = h->o.headers; x; x = x->next) {
    struct curl_slist *m = curl_slist_append(l, x->data);
    if (!m) {
      curl_slist_free_all(l);
      return -1;
    }
    l = m;
  }
  struct curl_slist *m = curl_slist_append(l, pre);
  if (!m) {
    curl_slist_free_all(l);
    return -1;
  }
  r->hdrs = m;
  return 0;
}

int lade__http_setup_easy(const lade__http_t *h, CURL *e, const char *url, lade__http_req_t *r) {
  lade__http_req_headers_free(r);
  r->hstatus = 0;
  r->crange = 0;
  r->refused = 0;
  if (pin_headers(h, r)) return -1;
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
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs ? r->hdrs : h->o.headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, lade__http_on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, lade__http_on_header);
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
  return 0;
}

/* The pools of idle easy handles (http_impl.h). */
CURL *lade__http_easy_take(lade__http_t *h, lade__http_easies_t *p) {
  CURL *e = NULL;
  pthread_mutex_lock(&h->mu);
  if (p->n) e = p->e[--p->n];
  pthread_mutex_unlock(&h->mu);
  return e ? e : curl_easy_init();
}

void lade__http_easy_keep(lade__http_t *h, lade__http_easies_t *p, CURL *e) {
  if (!e) return;
  pthread_mutex_lock(&h->mu);
  if (p->n == p->cap && (!p->most || p->cap < p->most)) {
    size_t cap = p->cap ? p->cap * 2 : 16;
    CURL **q = realloc(p->e, cap * sizeof *q);
    if (q) p->e = q, p->cap = cap;
  }
  int kept = p->n < p->cap && (!p->most || p->n < p->most);
  if (kept) p->e[p->n++] = e;
  pthread_mutex_unlock(&h->mu);
  if (!kept) curl_easy_cleanup(e);
}

#endif /* LADE_HAVE_CURL */
