/*
 * http_oneshot.c - requests made on the caller's thread, outside the loop
 * (http.h): a blocking GET (listings, label files), a blocking HEAD (a
 * shard's size and version), or a Range of an object's first bytes that
 * stands for one, and a streamed GET read forward as tarfmt's pread (an
 * index pass over a remote shard), resumed with a Range request after a
 * transient error. Same options, caps, verdicts and backoff as the loop's
 * requests (http_easy.c, http_retry.c). Each call has an easy handle of
 * its own while it runs: the blocking ones take an idle one from the
 * handle's pool (its connection still open: 64 index threads' HEADs reuse
 * 64 connections instead of opening one each) and give it back; a stream
 * has its own easy and multi. h->mu guards the pool and the counters.
 */
#ifdef LADE_HAVE_CURL

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_impl.h"

/* An easy handle for one blocking call: an idle one (its connection still
 * open) when there is one, else a new one; given back after. */
static CURL *easy_take(lade__http_t *h) { return lade__http_easy_take(h, &h->idle_easy); }
static void easy_give(lade__http_t *h, CURL *e) { lade__http_easy_keep(h, &h->idle_easy, e); }

int lade__http_get_blocking(lade__http_t *h, const char *url, const char *shown, lade__buf_t *out, uint64_t cap,
                            int is_list, int (*cut)(const lade__buf_t *b, char *what, size_t size)) {
  CURL *e = easy_take(h);
  if (!e) return lade__fail(LADE_ENOMEM, "%s: cannot create a curl handle", shown);
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)out, 0x4c53);
  lade__http_req_t *tmp = calloc(1, sizeof *tmp);
  if (!tmp) {
    easy_give(h, e);
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
    lade__http_setup_easy(h, e, url, tmp);
    pthread_mutex_lock(&h->mu);
    if (is_list) h->list_requests++;
    else h->get_requests++;
    pthread_mutex_unlock(&h->mu);
    CURLcode cc = curl_easy_perform(e);
    *out = tmp->body;
    lade__http_verdict_t v;
    lade__http_judge_easy(h, e, cc, tmp, &v);
    if (v.kind == LADE__HTTP_OK && cut && cut(out, v.what, sizeof v.what)) {
      v.kind = LADE__HTTP_RETRY;
      v.code = LADE_EREMOTE;
    }
    if (v.kind == LADE__HTTP_SIZE) v.kind = LADE__HTTP_FINAL;
    if (v.kind == LADE__HTTP_OK || !lade__http_blocking_again(h, &v, attempt, shown, &rng, &rc)) break;
  }
  free(tmp);
  easy_give(h, e);
  return rc;
}

/* ------------------------------------------------------ HEAD and streams */

/* A HEAD, or with want > 0 a GET of bytes 0..want-1 that stands for one
 * (a probe): the size from its Content-Range's total, the first bytes into
 * *first. An empty object's 416 is asked again as a HEAD. */
static int head_or_probe(lade__http_t *h, const char *url, const char *shown, uint64_t want, lade__buf_t *first,
                         uint64_t *size, char *validator, size_t vsize) {
  CURL *e = easy_take(h);
  lade__http_req_t *r = calloc(1, sizeof *r);
  if (!e || !r) {
    easy_give(h, e);
    free(r);
    return lade__fail(LADE_ENOMEM, "%s: out of memory", shown);
  }
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)r, 0x4845);
  int rc = 0;
  for (uint32_t attempt = 0;; attempt++) {
    lade__buf_t keep = r->body;
    memset(r, 0, sizeof *r);
    r->body = keep;
    r->body.len = 0;
    r->head = !want;
    r->probe = want > 0;
    r->get.expect = UINT64_MAX;
    r->get.len = want; /* the Range (setup_easy) */
    r->pin_size = UINT64_MAX; /* no version pinned */
    r->cap = want;
    r->clen = -1;
    curl_easy_reset(e);
    r->easy = e;
    lade__http_setup_easy(h, e, url, r);
    if (!want) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    pthread_mutex_lock(&h->mu);
    h->list_requests++;
    pthread_mutex_unlock(&h->mu);
    CURLcode cc = curl_easy_perform(e);
    lade__http_verdict_t v;
    lade__http_judge_easy(h, e, cc, r, &v);
    uint64_t whole = UINT64_MAX; /* a short object answered whole to the Range (nginx: an empty file) */
    if (want && v.status == 200 && cc == CURLE_OK && !r->over && r->clen >= 0 && (uint64_t)r->clen <= want &&
        r->body.len == (size_t)r->clen)
      whole = r->body.len, v.kind = LADE__HTTP_OK;
    else if (v.kind == LADE__HTTP_OK && want && (r->crange != 1 || r->cr_total == UINT64_MAX)) {
      v.kind = LADE__HTTP_FINAL;
      v.code = LADE_EREMOTE;
      snprintf(v.what, sizeof v.what, "HTTP %ld without the object's size (Content-Range '%s') to a Range request "
               "for bytes 0-%llu", v.status, r->cr_text, (unsigned long long)(want - 1));
    }
    if (v.kind == LADE__HTTP_OK) {
      *size = whole != UINT64_MAX ? whole : want ? r->cr_total : v.size;
      snprintf(validator, vsize, "%s", r->validator);
      if (first) {
        lade__buf_t t = *first;
        *first = r->body;
        r->body = t;
      }
      break;
    }
    if (want && v.status == 416 && !r->refused) { /* an empty object: no byte 0 to serve, asked as a HEAD */
      want = 0;
      continue; /* (counted as a try: one request more for an empty shard) */
    }
    if (!lade__http_blocking_again(h, &v, attempt, shown, &rng, &rc)) break;
  }
  free(r->body.data);
  free(r);
  easy_give(h, e);
  return rc;
}

int lade__http_head(lade__http_t *h, const char *url, const char *shown, uint64_t *size, char *validator,
                    size_t vsize) {
  return head_or_probe(h, url, shown, 0, NULL, size, validator, vsize);
}

int lade__http_head_first(lade__http_t *h, const char *url, const char *shown, uint64_t want, lade__buf_t *first,
                          uint64_t *size, char *validator, size_t vsize) {
  if (first) first->len = 0;
  return head_or_probe(h, url, shown, want, first, size, validator, vsize);
}

/* A streamed GET: buf holds the object's bytes [at, at + len); `keep`
 * is the offset of the last read, below which nothing is kept. */
struct lade__http_stream {
  lade__http_t *h;
  CURLM *multi;
  CURL *easy;
  lade__http_req_t r;           /* errbuf, clen, validator, the error reply's body */
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
    return s->r.body.len + n > LADE__HTTP_ERROR_CAP ? 0 : lade__http_on_body(ptr, size, nmemb, &s->r);
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
  lade__http_req_headers_free(&s->r);
  memset(&s->r, 0, sizeof s->r);
  s->r.easy = s->easy;
  s->r.clen = -1;
  s->r.get.expect = UINT64_MAX;
  s->r.cap = s->size; /* on_header refuses a longer Content-Length */
  /* every request of the pass is for the version the HEAD saw: a reply from
   * another is refused before its first byte reaches the index */
  s->r.pin = s->validator;
  s->r.pin_size = s->size;
  uint64_t from = s->at + s->len;
  if (from) s->r.get.off = from, s->r.get.len = s->size - from;
  if (lade__http_setup_easy(s->h, s->easy, s->url, &s->r))
    return lade__fail(LADE_ENOMEM, "%s: out of memory", s->shown);
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
  lade__http_verdict_t v;
  memset(&v, 0, sizeof v);
  if (s->r.refused || status == 412) {
    lade__http_judge_easy(s->h, s->easy, cc, &s->r, &v);
  } else if (status == 200 && s->r.get.len) {
    v.kind = LADE__HTTP_FINAL;
    v.code = LADE_EREMOTE;
    snprintf(v.what, sizeof v.what, "HTTP 200 to a Range request resuming at byte %llu: the server does not serve "
             "byte ranges", (unsigned long long)have);
  } else if (cc == CURLE_OK && (status == 200 || status == 206) && have == s->size) {
    s->done = 1;
    return;
  } else if (cc == CURLE_WRITE_ERROR && (status == 200 || status == 206) && have <= s->size) {
    v.kind = LADE__HTTP_FINAL;
    v.code = LADE_EREMOTE;
    snprintf(v.what, sizeof v.what, "more than the %llu bytes a HEAD announced (or out of memory)",
             (unsigned long long)s->size);
  } else if (cc == CURLE_OK && (status == 200 || status == 206)) {
    v.kind = LADE__HTTP_RETRY;
    v.code = LADE_EREMOTE;
    snprintf(v.what, sizeof v.what, "the reply ended at byte %llu of %llu", (unsigned long long)have,
             (unsigned long long)s->size);
  } else {
    lade__http_judge_easy(s->h, s->easy, cc, &s->r, &v);
    if (v.kind == LADE__HTTP_SIZE) v.kind = LADE__HTTP_RETRY;
  }
  if (v.kind == LADE__HTTP_RETRY && s->retries < s->h->o.retries) {
    s->retries++;
    lade__http_retry_sleep(s->h, s->retries, &s->rng);
    if (stream_start(s) == 0) return;
    v.kind = LADE__HTTP_FINAL;
    v.code = LADE_ENOMEM;
    snprintf(v.what, sizeof v.what, "cannot resume the transfer");
  }
  s->rc = v.code ? v.code : LADE_EREMOTE;
  if (v.kind == LADE__HTTP_RETRY)
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
  lade__http_req_headers_free(&s->r);
  free(s->r.body.data);
  free(s->buf);
  free(s);
}

#endif /* LADE_HAVE_CURL */
