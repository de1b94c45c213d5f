/*
 * http.c - the request loop of the remote sources (http.h, docs/http.md):
 * its entry points. The loop thread is http_loop.c, its limit on requests
 * in flight http_tune.c, the result table http_table.c, the verdicts and
 * backoff http_retry.c, one request's curl handle http_easy.c, and the
 * requests made on the caller's thread http_oneshot.c; http_impl.h is what
 * they share, each piece's struct touched only by its own file.
 *
 * Design. ONE background thread per handle owns a curl multi handle and runs
 * every GET: hundreds of requests in flight cost sockets, not threads (the
 * concurrent fetchers of "Profiling and Improving the PyTorch Dataloader
 * for high-latency Storage", without a thread per request). Requests enter through
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
 * the arrived hook with no lock held. Only the loop thread touches the multi handle
 * (curl_multi_wakeup is the one call made from other threads). The hooks
 * run under `mu` (one lock: no order to keep).
 */
#ifdef LADE_HAVE_CURL

#include "http/http.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_impl.h"

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc;
static void curl_init_once(void) { g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int lade__http_global_init(void) {
  pthread_once(&g_curl_once, curl_init_once);
  return g_curl_init_rc == CURLE_OK ? 0 : lade__fail(LADE_EREMOTE, "libcurl failed to initialise");
}

/* ------------------------------------------------------------------- API */

int lade__http_submit(lade__http_t *h, const lade__http_get_t *g, size_t n, int background) {
  assert(lade__http_loop_started(h));
  int rc = 0;
  pthread_mutex_lock(&h->mu);
  for (size_t i = 0; i < n && !rc; i++) {
    uint32_t np = g[i].nparts ? g[i].nparts : 1;
    for (uint32_t k = 0; k < np && !rc; k++) {
      uint64_t idx = g[i].nparts ? g[i].parts[k].idx : g[i].obj;
      if (!lade__http_table_has(&h->tab, idx))
        rc = lade__fail(LADE_ERANGE, "%s: sample %llu out of range", h->o.what, (unsigned long long)idx);
    }
    if (rc) break;
    lade__http_req_t *r = lade__http_req_new(h, &g[i], NULL);
    if (!r) {
      rc = lade__fail(LADE_ENOMEM, "%s: out of memory", h->o.what);
      break;
    }
    for (uint32_t k = 0; k < r->get.nparts; k++) lade__http_table_want(&h->tab, r->get.parts[k].idx);
    r->bg = background != 0;
    lade__http_loop_push(h, r, background ? LADE__HTTP_BG : LADE__HTTP_BATCH);
  }
  pthread_mutex_unlock(&h->mu);
  lade__http_loop_wake(h);
  return rc;
}

void lade__http_reserve(lade__http_t *h, uint64_t results, uint64_t bytes) {
  pthread_mutex_lock(&h->mu);
  lade__http_table_reserve(&h->tab, results, bytes);
  pthread_mutex_unlock(&h->mu);
}

bool lade__http_ready(lade__http_t *h, uint64_t idx) {
  assert(lade__http_loop_started(h));
  if (!lade__http_table_has(&h->tab, idx)) return true;
  pthread_mutex_lock(&h->mu);
  bool ready = lade__http_table_ready(&h->tab, idx);
  pthread_mutex_unlock(&h->mu);
  return ready;
}

void lade__http_stats(lade__http_t *h, lade__http_stats_t *out) {
  pthread_mutex_lock(&h->mu);
  out->get_requests = h->get_requests;
  out->list_requests = h->list_requests;
  out->retries = h->retried;
  out->bytes = h->bytes;
  lade__http_loop_load(h, &out->in_flight, &out->concurrency);
  pthread_mutex_unlock(&h->mu);
}

int lade__http_read(lade__http_t *h, uint64_t idx, const lade__http_get_t *g, lade__buf_t *out) {
  assert(lade__http_loop_started(h) && lade__http_table_has(&h->tab, idx));
  pthread_mutex_lock(&h->mu);
  for (;;) {
    int rc;
    if (lade__http_result_take(&h->tab, idx, out, &rc)) {
      pthread_mutex_unlock(&h->mu);
      return rc;
    }
    if (lade__http_table_wants(&h->tab, idx) == 0 || h->stop) break;
    pthread_cond_wait(&h->cv, &h->mu);
  }
  char name[1536];
  h->o.name(h->o.ctx, g->obj, name, sizeof name);
  if (h->stop) {
    pthread_mutex_unlock(&h->mu);
    return lade__fail(LADE_EINTR, "%s: the source was closed", name);
  }
  /* no want: fetch it now, ahead of the submitted batches (a worker waits) */
  lade__http_waiter_t *w = calloc(1, sizeof *w);
  lade__http_get_t one = *g;
  one.nparts = 0;
  lade__http_req_t *q = w ? lade__http_req_new(h, &one, w) : NULL;
  if (!q) {
    pthread_mutex_unlock(&h->mu);
    free(w);
    return lade__fail(LADE_ENOMEM, "%s: out of memory", h->o.what);
  }
  lade__http_loop_push(h, q, LADE__HTTP_URGENT);
  pthread_mutex_unlock(&h->mu);
  lade__http_loop_wake(h);
  pthread_mutex_lock(&h->mu);
  while (!w->done) pthread_cond_wait(&h->cv, &h->mu);
  int rc = w->rc;
  if (rc) {
    lade__set_error_text(w->msg);
    lade__http_buf_recycle(&h->tab, &w->body);
  } else {
    lade__http_hand_over(&h->tab, &w->body, out);
  }
  pthread_mutex_unlock(&h->mu);
  free(w);
  return rc;
}

void lade__http_destroy(lade__http_t *h) {
  if (!h) return;
  lade__http_loop_close(h);
  for (size_t i = 0; i < h->idle_easy.n; i++) curl_easy_cleanup(h->idle_easy.e[i]);
  free(h->idle_easy.e);
  lade__http_table_free(&h->tab);
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
  lade__http_loop_init(h);
  h->idle_easy.most = 128; /* the blocking calls' threads: tar's index threads are at most 64 */
  *out = h;
  return 0;
}

int lade__http_start(lade__http_t *h, uint64_t n_idx) {
  assert(!lade__http_loop_started(h));
  uint32_t conc = LADE__MAX(LADE__MAX(h->o.max_conc, h->o.fixed_conc), h->o.table_conc);
  int rc = lade__http_table_init(&h->tab, n_idx, conc, h->o.what, h->o.name, h->o.ctx);
  if (rc) return rc;
  return lade__http_loop_start(h);
}

#endif /* LADE_HAVE_CURL */
