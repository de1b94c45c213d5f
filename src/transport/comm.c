/*
 * comm.c - the transport skeleton (comm.h): the communication thread's
 * loop, the channels' states, the open and close waits, the grants, the
 * sends and the close's DONE exchange, written once for mpi.c and ucx.c.
 *
 * Locks (comm.h): the world's mu guards the channel list and is held by the
 * thread for a whole pass; a channel's mu guards its state, push protocol
 * and done_from. Order: the world's mu, then a channel's mu; the thread
 * calls the backend's ops with the world's mu held and no channel lock.
 */
#include "transport/comm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OPENING = LADE__PUSHQ_OPENING, OPEN = LADE__PUSHQ_OPEN, CLOSING = LADE__PUSHQ_CLOSING,
       CLOSED = LADE__PUSHQ_CLOSED };

void lade__comm_nap(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

void lade__comm_fail(lade__comm_chan_t *c, const char *fmt, ...) {
  char msg[sizeof c->pq.fatal_msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&c->mu);
  lade__comm_fail_locked(c, "%s", msg);
  pthread_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------ a channel */

void lade__comm_chan_init(lade__comm_chan_t *c, const lade__transport_ops_t *tops, const char *name,
                          const lade__transport_params_t *p) {
  c->base.ops = tops;
  c->base.pq = &c->pq;
  c->p = *p;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  lade__pushq_init(&c->pq, name, &c->p, &c->mu, &c->cv);
}

bool lade__comm_chan_peers(lade__comm_chan_t *c, uint32_t world) {
  c->world = world;
  c->done_from = calloc(world, 1);
  c->pq.grant = calloc(world, sizeof *c->pq.grant);
  return c->done_from && c->pq.grant;
}

void lade__comm_chan_free(lade__comm_chan_t *c) {
  lade__pushq_free(&c->pq);
  free(c->done_from);
  c->done_from = NULL;
  lade__buf_free(&c->sbuf);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
}

void lade__comm_take_locked(lade__comm_chan_t *c, int type, uint32_t src, uint8_t *buf, size_t len) {
  lade__pushq_hdr_t h;
  lade__pushq_msg_t *m = NULL;
  if (src >= c->world) {
    lade__comm_fail_locked(c, "transport %s: rank %u: a message from rank %u, outside the world of %u", c->pq.name,
                           c->rank, src, c->world);
  } else if (type == LADE__COMM_GRANT && len == sizeof(uint64_t)) {
    uint64_t v;
    memcpy(&v, buf, sizeof v);
    /* only ever raised: after a seek back, sends of later steps queued
     * before it stay postable, so they cannot hold up the replayed steps
     * queued behind them */
    if (v > c->pq.grant[src]) c->pq.grant[src] = v;
  } else if (type == LADE__COMM_DONE) {
    c->done_from[src] = 1;
  } else if (type == LADE__COMM_DATA && len >= sizeof h && (memcpy(&h, buf, sizeof h), h.magic == LADE__PUSHQ_MAGIC) &&
             h.len == len - sizeof h && (m = malloc(sizeof *m))) {
    memmove(buf, buf + sizeof h, h.len);
    *m = (lade__pushq_msg_t){.q = h.q, .idx = h.idx, .src = src, .error = h.error, .sum = h.sum, .len = h.len,
                             .data = buf};
    lade__pushq_store_locked(&c->pq, m);
    buf = NULL;
  } else {
    lade__comm_fail_locked(c, "transport %s: rank %u: a malformed message from rank %u", c->pq.name, c->rank, src);
  }
  free(buf);
  pthread_cond_broadcast(&c->cv);
}

void lade__comm_checks_locked(lade__comm_chan_t *c, const uint64_t *rows, size_t stride) {
  uint32_t n = c->p.nchecks;
  for (uint32_t r = 0; r < c->world && !c->pq.fatal; r++) {
    const uint64_t *row = &rows[(size_t)r * stride];
    for (uint32_t i = 0; i < n && r != c->rank && !c->pq.fatal; i++) {
      uint64_t mine = c->p.checks[i].value;
      if (row[0] == n && row[i + 1] == mine) continue;
      /* name every rank whose value differs from this one's */
      const lade__transport_check_t *k = &c->p.checks[i];
      char list[768] = "";
      size_t ll = 0;
      for (uint32_t s = 0; s < c->world && ll < sizeof list - 64; s++) {
        const uint64_t *rs = &rows[(size_t)s * stride];
        if (s == c->rank || (rs[0] == n && rs[i + 1] == mine)) continue;
        ll += (size_t)snprintf(list + ll, sizeof list - ll, k->hash ? "%srank %u has %016llx" : "%srank %u has %llu",
                               ll ? ", " : "", s, rs[0] == n ? (unsigned long long)rs[i + 1] : 0ull);
      }
      lade__comm_fail_locked(c, k->hash ? "learners disagree on %s: rank %u has %016llx, %s (every rank must open "
                                          "the same dataset with the same settings)"
                                        : "learners disagree on setting '%s': rank %u has %llu, %s (every rank must "
                                          "run the loader with the same settings)",
                             k->name, c->rank, (unsigned long long)mine, list);
    }
  }
}

/* ------------------------------------------------------------ the thread's work on a channel */

/* Tells every peer the step below which it may send here (backpressure):
 * at open, then whenever the consumer moved by window / 2 steps. Returns
 * how many messages were posted. */
static int chan_grants(lade__comm_t *w, lade__comm_chan_t *c) {
  uint64_t grant;
  if (!lade__pushq_grant_due(&c->pq, &grant)) return 0;
  int posted = 0;
  for (uint32_t r = 0; r < c->world; r++) {
    if (r == c->rank) continue;
    uint64_t *v = malloc(sizeof *v);
    if (!v) break;
    *v = grant;
    /* a peer that is gone: its receives report it */
    if (w->ops->post(c, r, LADE__COMM_GRANT, (uint8_t *)v, sizeof *v, NULL, 0) == 0) posted++;
  }
  return posted;
}

/* Serves and posts queued sends (pushq.h); returns how many were posted. */
static int chan_sends(lade__comm_t *w, lade__comm_chan_t *c) {
  int posted = 0;
  lade__pushq_send_t sr;
  uint8_t *buf;
  size_t len;
  for (int k = 0; k < 64 && lade__pushq_next(&c->pq, &c->state, &c->sbuf, &sr, &buf, &len); k++) {
    char why[512] = "";
    int bad = w->ops->post(c, sr.dst, LADE__COMM_DATA, buf, sizeof(lade__pushq_hdr_t) + len, why, sizeof why);
    pthread_mutex_lock(&c->mu);
    if (bad)
      lade__comm_fail_locked(c, "transport %s: rank %u: sending sample %llu of step %llu to rank %u failed: %s",
                             w->ops->name, c->rank, (unsigned long long)sr.idx, (unsigned long long)sr.q, sr.dst,
                             why);
    lade__pushq_pop_locked(&c->pq, !bad, len);
    pthread_mutex_unlock(&c->mu);
    posted++;
    if (bad) break;
  }
  return posted;
}

/* One round of an open channel's traffic; returns the work done. */
static int chan_traffic(lade__comm_t *w, lade__comm_chan_t *c) {
  int work = chan_sends(w, c);
  work += w->ops->recvs(c);
  work += w->ops->complete(c);
  return work;
}

/* Closing: flush the queue, DONE to every peer, drain until every peer's
 * DONE came (or its connection broke) and no request is in flight, all
 * bounded by the timeout; then the backend's drained. */
static void chan_close_step(lade__comm_t *w, lade__comm_chan_t *c) {
  double t0 = lade__now(), limit = c->p.timeout_ms / 1000.0;
  while (lade__now() - t0 < limit) {
    pthread_mutex_lock(&c->mu);
    bool empty = !c->pq.sq_len || c->pq.fatal;
    pthread_mutex_unlock(&c->mu);
    if (empty) break;
    if (w->ops->poll) w->ops->poll();
    chan_traffic(w, c);
  }
  for (uint32_t r = 0; r < c->world; r++) {
    uint8_t *one = r == c->rank ? NULL : malloc(1);
    if (one) *one = 1, w->ops->post(c, r, LADE__COMM_DONE, one, 1, NULL, 0);
  }
  for (;;) {
    if (w->ops->poll) w->ops->poll();
    w->ops->recvs(c);
    w->ops->complete(c);
    uint32_t seen = 0;
    pthread_mutex_lock(&c->mu);
    const uint8_t *lost = c->pq.peer_lost; /* a rank whose connection broke sends no DONE */
    for (uint32_t r = 0; r < c->world; r++) seen += r == c->rank || c->done_from[r] || (lost && lost[r]);
    pthread_mutex_unlock(&c->mu);
    if ((seen == c->world && !w->ops->busy(c)) || lade__now() - t0 > limit) break;
    lade__comm_nap(200000);
  }
  w->ops->drained(c);
  pthread_mutex_lock(&c->mu);
  lade__pushq_msgs_free_locked(&c->pq, UINT64_MAX);
  c->state = CLOSED;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* One pass over channel c, by its state; returns the work done. */
static int chan_step(lade__comm_t *w, lade__comm_chan_t *c) {
  pthread_mutex_lock(&c->mu);
  int state = c->state;
  pthread_mutex_unlock(&c->mu);
  if (state == OPENING) return w->ops->open_step(c);
  if (state == CLOSING) {
    chan_close_step(w, c);
    return 1;
  }
  if (state != OPEN) return 0;
  int work = w->ops->open_pass ? w->ops->open_pass(c) : 0;
  work += chan_grants(w, c);
  return work + chan_traffic(w, c);
}

static void *comm_main(void *arg) {
  lade__comm_t *w = arg;
  long idle_ns = 20000;
  bool run = !w->ops->begin || w->ops->begin();
  while (run) {
    pthread_mutex_lock(&w->mu);
    if (w->stop && !w->chans) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    int work = w->ops->poll ? w->ops->poll() : 0;
    for (lade__comm_chan_t *c = w->chans; c; c = c->next) work += chan_step(w, c);
    pthread_mutex_unlock(&w->mu);
    if (work) {
      idle_ns = 20000;
    } else {
      lade__comm_nap(idle_ns);
      if (idle_ns < w->ops->idle_max_ns) idle_ns *= 2;
    }
  }
  if (w->ops->end) w->ops->end();
  return NULL;
}

/* ------------------------------------------------------------ the callers' side */

int lade__comm_start_locked(lade__comm_t *w) {
  if (w->started) return 0;
  if (w->stop) return lade__fail(LADE_ESTATE, "transport %s: the process is exiting", w->ops->name);
  if (pthread_create(&w->thread, NULL, comm_main, w) != 0)
    return lade__fail(LADE_ETHREAD, "transport %s: cannot start the communication thread: %s", w->ops->name,
                      strerror(errno));
  w->started = true;
  return 0;
}

int lade__comm_link_locked(lade__comm_t *w, lade__comm_chan_t *c) {
  if (w->stop) return lade__fail(LADE_ESTATE, "transport %s: the process is exiting", w->ops->name);
  c->state = OPENING;
  c->linked = true;
  c->next = w->chans;
  w->chans = c;
  return 0;
}

int lade__comm_wait_open(lade__comm_chan_t *c) {
  pthread_mutex_lock(&c->mu);
  while (c->state == OPENING) pthread_cond_wait(&c->cv, &c->mu);
  int rc = c->pq.fatal ? lade__fail(c->pq.fatal, "%s", c->pq.fatal_msg) : 0;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int lade__comm_open_end(lade__comm_chan_t *c, int rc, lade__transport_t **out, uint32_t *rank, uint32_t *world) {
  if (rc) {
    c->base.ops->close(&c->base);
    return rc;
  }
  *rank = c->rank;
  *world = c->world;
  *out = &c->base;
  return 0;
}

void lade__comm_chan_close(lade__comm_t *w, lade__comm_chan_t *c) {
  pthread_mutex_lock(&c->mu);
  if (c->state == OPEN) c->state = c->linked ? CLOSING : CLOSED;
  struct timespec ts;
  lade__pushq_timespec_after(&ts, 3.0 * c->p.timeout_ms / 1000.0 + 1);
  while (c->linked && c->state != CLOSED)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&c->mu);
  if (!c->linked) return;
  /* unlinked under w->mu: the thread holds it while it works on channels */
  pthread_mutex_lock(&w->mu);
  for (lade__comm_chan_t **pp = &w->chans; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  c->linked = false;
  pthread_mutex_unlock(&w->mu);
}

bool lade__comm_stop(lade__comm_t *w, void (*each_locked)(lade__comm_chan_t *c)) {
  pthread_mutex_lock(&w->mu);
  for (lade__comm_chan_t *c = w->chans; c && each_locked; c = c->next) each_locked(c);
  bool started = w->started, abandoned = w->chans != NULL;
  w->stop = true;
  w->chans = NULL; /* loaders still open at exit: their channels are abandoned */
  pthread_mutex_unlock(&w->mu);
  if (started) pthread_join(w->thread, NULL);
  return abandoned;
}
