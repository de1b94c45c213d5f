/*
 * http_loop.c - the loop thread of an http handle (http_impl.h; the design
 * is in http.c's opening comment and docs/http.md). One thread owns the
 * curl multi handle: it starts requests from the queues (due retries
 * first, then urgent reads, submitted batches, and background submits
 * within three quarters of the limit), finishes transfers (a verdict from
 * http_retry.c: answer, retry after a backoff, or a HEAD to refresh a
 * listed size), and tunes the limit on requests in flight from the
 * measured byte rate.
 *
 * Locking: h->mu as in http.c; curl is never called with it held, and the
 * arrived hook (a source's on_ready) is called with no lock.
 */
#ifdef LADE_HAVE_CURL

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_impl.h"

lade__http_req_t *lade__http_req_new(lade__http_t *h, const lade__http_get_t *g, lade__http_waiter_t *w) {
  lade__http_req_t *r = h->loop.free_reqs;
  if (r) h->loop.free_reqs = r->next;
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
      r->next = h->loop.free_reqs;
      h->loop.free_reqs = r;
      return NULL;
    }
    memcpy(p, g->parts, g->nparts * sizeof *p);
    r->get.parts = p;
  }
  r->waiter = w;
  lade__http_buf_reuse(&h->tab, &r->body);
  return r;
}

/* Frees the per-part buffers of a scattered reply (those not handed on). */
static void parts_free(lade__http_req_t *r) {
  if (!r->parts) return;
  for (uint32_t k = 0; k < r->get.nparts; k++) free(r->parts[k].data);
  free(r->parts);
  r->parts = NULL;
  r->part_next = 0;
}

void lade__http_req_release(lade__http_t *h, lade__http_req_t *r) {
  lade__http_buf_recycle(&h->tab, &r->body);
  lade__http_req_headers_free(r);
  parts_free(r);
  if (r->get.parts != &r->one) free((void *)r->get.parts);
  r->get.parts = NULL;
  r->next = h->loop.free_reqs;
  h->loop.free_reqs = r;
}

/* Starts one request (unlocked: only curl and the url/name/pin hooks,
 * which read what open() built). Returns 0 or a code with msg filled. */
static int start(lade__http_t *h, lade__http_req_t *r, char *msg, size_t msg_size) {
  char name[2048];
  lade__http_name_of(h, r, name, sizeof name);
  if (!r->head && r->get.expect != UINT64_MAX && r->get.expect > h->o.max_body) {
    snprintf(msg, msg_size, "%s: %llu bytes listed, more than max_sample_bytes (%llu); not read", name,
             (unsigned long long)r->get.expect, (unsigned long long)h->o.max_body);
    return LADE_ERANGE;
  }
  snprintf(msg, msg_size, "%s: cannot start a request (out of memory or URL too long)", name);
  CURL *e = lade__http_easy_take(h, &h->loop.free_easy);
  if (!e) return LADE_ENOMEM;
  curl_easy_reset(e);
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
  r->pin_size = UINT64_MAX;
  r->pin = h->o.pin ? h->o.pin(h->o.ctx, r->get.obj, &r->pin_size) : NULL;
  if (lade__http_setup_easy(h, e, url, r)) {
    curl_easy_cleanup(e);
    return LADE_ENOMEM;
  }
  if (r->head) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  if (curl_multi_add_handle(h->loop.multi, e) != CURLM_OK) {
    curl_easy_cleanup(e);
    r->easy = NULL;
    return LADE_ENOMEM;
  }
  return 0;
}

static void active_link(lade__http_t *h, lade__http_req_t *r) {
  r->prev = NULL;
  r->next = h->loop.active;
  if (h->loop.active) h->loop.active->prev = r;
  h->loop.active = r;
}

static void active_unlink(lade__http_t *h, lade__http_req_t *r) {
  if (r->prev) r->prev->next = r->next;
  else h->loop.active = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

static void easy_release(lade__http_t *h, CURL *e) {
  curl_multi_remove_handle(h->loop.multi, e);
  lade__http_easy_keep(h, &h->loop.free_easy, e);
}

static void note_of(const lade__http_t *h, char *buf, size_t size) {
  buf[0] = '\0';
  if (h->o.note) h->o.note(h->o.ctx, buf, size);
}

/* Answers a request with rc (locked): its waiter, or one result per part. */
static void answer(lade__http_t *h, lade__http_req_t *r, int rc, const char *msg) {
  if (r->waiter) {
    lade__http_waiter_t *w = r->waiter;
    w->rc = rc;
    if (rc) snprintf(w->msg, sizeof w->msg, "%s", msg);
    w->body = r->body;
    memset(&r->body, 0, sizeof r->body);
    w->done = 1;
  } else {
    lade__http_result_store(&h->tab, r, rc, rc ? msg : NULL);
  }
  lade__http_req_release(h, r);
  pthread_cond_broadcast(&h->cv);
}

/* Handles one finished transfer (unlocked on entry); sets *notify when a
 * submitted request was answered. A reply of another size than listed
 * sends a `refresh` request to a HEAD first (once): if the object was
 * replaced, the GET is made again at its new size (no retry spent) and the
 * stale hook runs; if the HEAD agrees with the listing, the body was
 * damaged in transit and the GET is retried as any transient error. */
static void finish(lade__http_t *h, CURL *e, CURLcode cc, lade__rng_t *rng, int *notify) {
  lade__http_req_t *r = NULL;
  curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
  lade__http_verdict_t v;
  lade__http_judge_easy(h, e, cc, r, &v);
  easy_release(h, e);
  r->easy = NULL;
  double now = lade__now();
  pthread_mutex_lock(&h->mu);
  active_unlink(h, r);
  h->loop.in_flight--;
  if (r->bg) h->loop.bg_in_flight--;
  h->bytes += r->body.len;
  if (v.throttled && lade__http_tuner_throttle(&h->loop.tune, now)) h->loop.throttled++;
  if (v.truncated) h->loop.truncated++;
  if (r->head && v.kind != LADE__HTTP_RETRY) {
    r->head = 0;
    char what[LADE__HTTP_WHAT];
    if (v.kind == LADE__HTTP_OK && v.size == r->get.expect) {
      /* the object is as listed: the GET's body was wrong in transit */
      r->head_agreed = 1;
      v.kind = LADE__HTTP_RETRY;
      v.code = LADE_EREMOTE;
      snprintf(what, sizeof what, "%.500s (a HEAD says %llu bytes, as listed)", r->size_what,
               (unsigned long long)r->get.expect);
      memcpy(v.what, what, sizeof what);
    } else if (v.kind == LADE__HTTP_OK) {
      /* replaced since it was listed */
      uint64_t was = r->get.expect;
      r->get.expect = v.size;
      h->loop.refreshed++;
      if (h->o.stale) h->o.stale(h->o.ctx);
      if (v.size <= h->o.max_body) {
        r->body.len = 0;
        r->not_before = now;
        lade__http_fifo_push(&h->loop.timers, r);
        pthread_mutex_unlock(&h->mu);
        return;
      }
      v.kind = LADE__HTTP_FINAL;
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
  } else if (v.kind == LADE__HTTP_SIZE) {
    if (r->get.refresh && !r->refreshed) {
      r->refreshed = 1;
      r->head = 1;
      snprintf(r->size_what, sizeof r->size_what, "%s", v.what);
      r->body.len = 0;
      r->not_before = now;
      lade__http_fifo_push(&h->loop.timers, r);
      pthread_mutex_unlock(&h->mu);
      return;
    }
    v.kind = LADE__HTTP_RETRY; /* after the refresh (or without one): damaged in transit */
    if (r->head_agreed) {
      size_t n = strlen(v.what);
      snprintf(v.what + n, sizeof v.what - n, " (a HEAD says %llu bytes, as listed)",
               (unsigned long long)r->get.expect);
    }
  }
  if (v.kind == LADE__HTTP_RETRY && r->retries < h->o.retries) {
    r->retries++;
    h->retried++;
    r->not_before = now + lade__http_backoff_s(h->o.retry_base_ms, r->retries, rng);
    r->body.len = 0;
    lade__http_fifo_push(&h->loop.timers, r);
    pthread_mutex_unlock(&h->mu);
    return;
  }
  char msg[LADE__HTTP_MSG], note[LADE__HTTP_MSG - 1536 - LADE__HTTP_WHAT - 64], name[1536];
  int rc = 0;
  if (v.kind != LADE__HTTP_OK) {
    rc = v.code;
    note[0] = '\0';
    if ((rc == LADE_ENOENT || v.changed) && h->o.stale) h->o.stale(h->o.ctx); /* listed, now gone or changed */
    if (r->refreshed || rc == LADE_ENOENT) note_of(h, note, sizeof note);
    lade__http_name_of(h, r, name, sizeof name);
    if (v.kind == LADE__HTTP_RETRY)
      snprintf(msg, sizeof msg, "%s: %s after %u retries%s", name, v.what, r->retries, note);
    else
      snprintf(msg, sizeof msg, "%s: %s%s", name, v.what, note);
  } else {
    lade__http_tuner_done(&h->loop.tune, r->body.len);
  }
  if (!r->waiter) *notify = 1;
  answer(h, r, rc, msg);
  pthread_mutex_unlock(&h->mu);
}

/* Fails every request that has not finished (on close). Locked. */
static void fail_waiting(lade__http_t *h, lade__http_fifo_t *f) {
  for (lade__http_req_t *r; (r = lade__http_fifo_pop(f));) {
    if (r->waiter) {
      char name[1536];
      lade__http_name_of(h, r, name, sizeof name);
      r->waiter->rc = LADE_EINTR;
      snprintf(r->waiter->msg, sizeof r->waiter->msg, "%s: the source was closed", name);
      r->waiter->done = 1;
    }
    lade__http_req_release(h, r);
  }
}

static void *loop_main(void *arg) {
  lade__http_t *h = arg;
  lade__rng_t rng;
  lade__rng_init(&rng, lade__now_us(), (uint64_t)(uintptr_t)h, 0x5333);
  lade__http_req_t *startable[256];
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
    lade__http_fifo_t keep = {0};
    for (lade__http_req_t *r; (r = lade__http_fifo_pop(&h->loop.timers));) {
      if (r->not_before <= now && h->loop.in_flight + n_start < h->loop.tune.limit && n_start < 256) {
        startable[n_start++] = r;
      } else {
        if (r->not_before > now) {
          long ms = (long)((r->not_before - now) * 1000.0) + 1;
          if (ms < wait_ms) wait_ms = ms;
        }
        lade__http_fifo_push(&keep, r);
      }
    }
    h->loop.timers = keep;
    uint32_t bg_limit = lade__http_tuner_bg_cap(&h->loop.tune), bg_start = 0;
    for (size_t i = 0; i < n_start; i++) bg_start += (uint32_t)startable[i]->bg;
    while (h->loop.in_flight + n_start < h->loop.tune.limit && n_start < 256) {
      lade__http_req_t *r = lade__http_fifo_pop(&h->loop.urgent);
      if (!r) r = lade__http_fifo_pop(&h->loop.queue);
      if (!r && h->loop.bg_in_flight + bg_start < bg_limit) r = lade__http_fifo_pop(&h->loop.bg), bg_start += r != NULL;
      if (!r) break;
      startable[n_start++] = r;
    }
    h->loop.bg_in_flight += bg_start;
    if (h->loop.in_flight + n_start < h->loop.tune.limit && !h->loop.urgent.n && !h->loop.queue.n && (!h->loop.bg.n || h->loop.bg_in_flight < bg_limit))
      lade__http_tuner_starved(&h->loop.tune);
    h->loop.in_flight += (uint32_t)n_start;
    h->get_requests += n_start;
    pthread_mutex_unlock(&h->mu);

    int notify = 0;
    for (size_t i = 0; i < n_start; i++) {
      char msg[LADE__HTTP_MSG];
      lade__http_req_t *r = startable[i];
      int src = start(h, r, msg, sizeof msg);
      pthread_mutex_lock(&h->mu);
      if (src == 0) {
        active_link(h, r);
      } else {
        /* not started (too big to read, or no memory): fail it like a transfer error */
        h->loop.in_flight--;
        h->get_requests--;
        if (r->bg) h->loop.bg_in_flight--;
        if (!r->waiter) notify = 1;
        answer(h, r, src, msg);
      }
      pthread_mutex_unlock(&h->mu);
    }

    int running = 0;
    curl_multi_perform(h->loop.multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->loop.multi, &left)))
      if (m->msg == CURLMSG_DONE) finish(h, m->easy_handle, m->data.result, &rng, &notify);
    if (notify && h->o.arrived) h->o.arrived(h->o.arrived_ctx);
    pthread_mutex_lock(&h->mu);
    lade__http_tune(&h->loop.tune, lade__now());
    int more = (h->loop.urgent.n || h->loop.queue.n || (h->loop.bg.n && h->loop.bg_in_flight < lade__http_tuner_bg_cap(&h->loop.tune))) && h->loop.in_flight < h->loop.tune.limit;
    pthread_mutex_unlock(&h->mu);
    if (notify || more) continue; /* start what just became possible */
    curl_multi_poll(h->loop.multi, NULL, 0, (int)wait_ms, NULL);
  }
  /* stop: abandon transfers, answer blocked readers */
  pthread_mutex_lock(&h->mu);
  fail_waiting(h, &h->loop.urgent);
  fail_waiting(h, &h->loop.queue);
  fail_waiting(h, &h->loop.bg);
  fail_waiting(h, &h->loop.timers);
  lade__http_fifo_t active = {0};
  while (h->loop.active) {
    lade__http_req_t *r = h->loop.active;
    active_unlink(h, r);
    lade__http_fifo_push(&active, r);
  }
  pthread_mutex_unlock(&h->mu);
  for (lade__http_req_t *r = active.head; r; r = r->next) {
    curl_multi_remove_handle(h->loop.multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
  }
  pthread_mutex_lock(&h->mu);
  fail_waiting(h, &active);
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* ------------------------------------------------ the handle's calls */

void lade__http_loop_init(lade__http_t *h) { lade__http_tuner_init(&h->loop.tune, h->o.fixed_conc, h->o.max_conc); }

int lade__http_loop_start(lade__http_t *h) {
  lade__http_loop_t *l = &h->loop;
  l->multi = curl_multi_init();
  if (!l->multi) return lade__fail(LADE_ENOMEM, "%s: out of memory", h->o.what);
  curl_multi_setopt(l->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
  curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS, (long)LADE__MAX(h->o.max_conc, h->o.fixed_conc) + 8);
  lade__http_tuner_begin(&l->tune, lade__now());
  if (pthread_create(&l->thread, NULL, loop_main, h) != 0)
    return lade__fail(LADE_ETHREAD, "%s: cannot start its thread", h->o.what);
  l->thread_started = 1;
  return 0;
}

bool lade__http_loop_started(const lade__http_t *h) { return h->loop.thread_started != 0; }

void lade__http_loop_push(lade__http_t *h, lade__http_req_t *r, int kind) {
  lade__http_loop_t *l = &h->loop;
  lade__http_fifo_push(kind == LADE__HTTP_URGENT ? &l->urgent : kind == LADE__HTTP_BG ? &l->bg : &l->queue, r);
}

void lade__http_loop_wake(lade__http_t *h) {
  if (h->loop.multi) curl_multi_wakeup(h->loop.multi);
}

void lade__http_loop_load(const lade__http_t *h, uint32_t *in_flight, uint32_t *limit) {
  *in_flight = h->loop.in_flight;
  *limit = h->loop.tune.limit;
}

void lade__http_loop_close(lade__http_t *h) {
  lade__http_loop_t *l = &h->loop;
  if (l->thread_started) {
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    lade__http_loop_wake(h);
    pthread_join(l->thread, NULL);
    l->thread_started = 0;
  }
  if (l->multi) curl_multi_cleanup(l->multi);
  l->multi = NULL;
  for (size_t i = 0; i < l->free_easy.n; i++) curl_easy_cleanup(l->free_easy.e[i]);
  free(l->free_easy.e);
  memset(&l->free_easy, 0, sizeof l->free_easy);
  for (lade__http_req_t *r = l->free_reqs, *n; r; r = n) {
    n = r->next;
    free(r->body.data);
    free(r);
  }
  l->free_reqs = NULL;
}

#endif /* LADE_HAVE_CURL */
