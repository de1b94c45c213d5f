/*
 * pushq.c - the push protocol's bookkeeping, shared by the backends that
 * move bytes (pushq.h, docs/transport.md).
 */
#include "transport/pushq.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline size_t bucket_of(uint64_t q, uint64_t idx) {
  return (size_t)(lade__mix64(q * 0x9e3779b97f4a7c15ull ^ idx) % LADE__PUSHQ_BUCKETS);
}

void lade__pushq_init(lade__pushq_t *pq, const char *name, const lade__transport_params_t *p, pthread_mutex_t *mu,
                      pthread_cond_t *cv) {
  pq->name = name;
  pq->p = p;
  pq->mu = mu;
  pq->cv = cv;
}

void lade__pushq_free(lade__pushq_t *pq) {
  lade__pushq_msgs_free_locked(pq, UINT64_MAX);
  free(pq->sq);
  free(pq->grant);
  pq->sq = NULL;
  pq->grant = NULL;
}

bool lade__pushq_grant_due(lade__pushq_t *pq, uint64_t *grant) {
  pthread_mutex_lock(pq->mu);
  uint64_t q = pq->consumed_q;
  pthread_mutex_unlock(pq->mu);
  uint64_t every = pq->p->window / 2 ? pq->p->window / 2 : 1;
  if (pq->granted && q < pq->grant_at + every) return false;
  pq->granted = true;
  pq->grant_at = q;
  *grant = q + 2 * (uint64_t)pq->p->window + 2; /* steps a receiver lets its peers send ahead of its consumer */
  return true;
}

uint64_t lade__pushq_payload_sum(uint64_t q, uint64_t idx, const void *data, size_t len) {
  return lade_checksum(data, len, lade__mix64(q) ^ idx);
}

void lade__pushq_timespec_after(struct timespec *ts, double s) {
  clock_gettime(CLOCK_REALTIME, ts);
  long long ns = ts->tv_nsec + (long long)(s * 1e9);
  ts->tv_sec += (time_t)(ns / 1000000000LL);
  ts->tv_nsec = (long)(ns % 1000000000LL);
}

void lade__pushq_fail_locked(lade__pushq_t *pq, const char *fmt, ...) {
  if (pq->fatal) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pq->fatal_msg, sizeof pq->fatal_msg, fmt, ap);
  va_end(ap);
  pq->fatal = LADE_EIO;
  pthread_cond_broadcast(pq->cv);
}

void lade__pushq_store_locked(lade__pushq_t *pq, lade__pushq_msg_t *m) {
  size_t b = bucket_of(m->q, m->idx);
  m->next = pq->bucket[b];
  pq->bucket[b] = m;
  pq->nmsgs++;
  pq->held += m->len;
  if (pq->held > pq->st.held_peak_bytes) pq->st.held_peak_bytes = pq->held;
  pq->st.received++;
  pq->st.received_bytes += m->len;
}

void lade__pushq_msgs_free_locked(lade__pushq_t *pq, uint64_t below) {
  for (size_t b = 0; b < LADE__PUSHQ_BUCKETS && pq->nmsgs; b++)
    for (lade__pushq_msg_t **pp = &pq->bucket[b]; *pp;) {
      lade__pushq_msg_t *m = *pp;
      if (m->q < below) {
        *pp = m->next;
        pq->nmsgs--;
        pq->held -= m->len;
        free(m->data);
        free(m);
      } else {
        pp = &m->next;
      }
    }
}

void lade__pushq_pop_locked(lade__pushq_t *pq, bool ok, size_t len) {
  if (ok) {
    pq->st.sent++;
    pq->st.sent_bytes += len;
  }
  pq->sq_head = (pq->sq_head + 1) % pq->sq_cap;
  pq->sq_len--;
  pthread_cond_broadcast(pq->cv);
}

bool lade__pushq_next(lade__pushq_t *pq, const int *state, lade__buf_t *sbuf, lade__pushq_send_t *sr, uint8_t **msg,
                      size_t *len) {
  pthread_mutex_lock(pq->mu);
  if (!pq->sq_len || pq->fatal) {
    pthread_mutex_unlock(pq->mu);
    return false;
  }
  *sr = pq->sq[pq->sq_head];
  /* backpressure: the receiver has not let this step come yet (closing, the
   * last sends go out regardless: the peer drains them) */
  bool held_back = *state == LADE__PUSHQ_OPEN && sr->q >= pq->grant[sr->dst];
  pthread_mutex_unlock(pq->mu);
  if (held_back) return false;
  double now = lade__now();
  if (sr->first_try == 0) sr->first_try = now;
  sbuf->len = 0;
  int nonblock = now - sr->first_try < LADE__PUSHQ_ADMIT_WAIT_S && *state != LADE__PUSHQ_CLOSING;
  lade__clear_error();
  int rc = pq->p->serve(pq->p->serve_ctx, sr->idx, sr->q, nonblock, sbuf);
  if (rc == LADE__DIST_AGAIN) {
    pthread_mutex_lock(pq->mu);
    pq->sq[pq->sq_head].first_try = sr->first_try; /* the head waits; sends keep their order */
    pthread_mutex_unlock(pq->mu);
    return false;
  }
  char err[1024] = "";
  if (rc) snprintf(err, sizeof err, "rank %u could not read sample %llu for step %llu: %s", pq->rank,
                   (unsigned long long)sr->idx, (unsigned long long)sr->q, lade_last_error());
  *len = rc ? strlen(err) : sbuf->len;
  uint8_t *buf = malloc(sizeof(lade__pushq_hdr_t) + *len);
  if (!buf) {
    pthread_mutex_lock(pq->mu);
    lade__pushq_fail_locked(pq, "transport %s: out of memory for a %zu-byte message", pq->name, *len);
    pthread_mutex_unlock(pq->mu);
    return false;
  }
  const void *payload = rc ? (const void *)err : (const void *)sbuf->data;
  lade__pushq_hdr_t h = {LADE__PUSHQ_MAGIC, sr->q, sr->idx, *len, rc,
                         lade__pushq_payload_sum(sr->q, sr->idx, payload, *len)};
  memcpy(buf, &h, sizeof h);
  memcpy(buf + sizeof h, payload, *len);
  *msg = buf;
  return true;
}

static int pq_send(lade__pushq_t *pq, uint64_t q, const uint32_t *dst, const uint64_t *idx, uint32_t n) {
  pthread_mutex_lock(pq->mu);
  if (pq->sq_len + n > pq->sq_cap) {
    size_t nc = pq->sq_cap ? pq->sq_cap : 256;
    while (nc < pq->sq_len + n) nc *= 2;
    lade__pushq_send_t *s = malloc(nc * sizeof *s);
    if (!s) {
      pthread_mutex_unlock(pq->mu);
      return lade__fail(LADE_ENOMEM, "transport %s: out of memory for %u sends", pq->name, n);
    }
    for (size_t i = 0; i < pq->sq_len; i++) s[i] = pq->sq[(pq->sq_head + i) % pq->sq_cap];
    free(pq->sq);
    pq->sq = s;
    pq->sq_cap = nc;
    pq->sq_head = 0;
  }
  for (uint32_t i = 0; i < n; i++)
    pq->sq[(pq->sq_head + pq->sq_len++) % pq->sq_cap] = (lade__pushq_send_t){.q = q, .idx = idx[i], .dst = dst[i]};
  if (q + 1 > pq->max_queued_q) pq->max_queued_q = q + 1;
  pthread_mutex_unlock(pq->mu);
  return 0;
}

/* The first peer timeout, kept for the backend (mpi.c aborts the job when
 * that peer then misses its close too). */
static void note_lost_locked(lade__pushq_t *pq, uint32_t peer) {
  if (pq->lost) return;
  pq->lost = 1;
  pq->lost_rank = peer;
  snprintf(pq->lost_msg, sizeof pq->lost_msg, "%s", lade_last_error());
}

void lade__transport_lost(lade__transport_t *d, uint32_t rank) {
  lade__pushq_t *pq = d ? d->pq : NULL;
  if (!pq) return;
  pthread_mutex_lock(pq->mu);
  note_lost_locked(pq, rank);
  pthread_mutex_unlock(pq->mu);
}

void lade__transport_stop_waits(lade__transport_t *d) {
  lade__pushq_t *pq = d ? d->pq : NULL;
  if (!pq) return;
  pthread_mutex_lock(pq->mu);
  pq->stop_waits = 1;
  pthread_cond_broadcast(pq->cv);
  pthread_mutex_unlock(pq->mu);
}

static int pq_wait_served(lade__pushq_t *pq, uint64_t q) {
  struct timespec ts;
  uint32_t timeout_ms = pq->p->timeout_ms;
  lade__pushq_timespec_after(&ts, timeout_ms / 1000.0);
  pthread_mutex_lock(pq->mu);
  int rc = 0;
  while (!pq->fatal && !pq->stop_waits && pq->sq_len && pq->sq[pq->sq_head].q <= q)
    if (pthread_cond_timedwait(pq->cv, pq->mu, &ts) == ETIMEDOUT && !pq->stop_waits && pq->sq_len &&
        pq->sq[pq->sq_head].q <= q) {
      const lade__pushq_send_t *h = &pq->sq[pq->sq_head];
      if (pq->grant && h->q >= pq->grant[h->dst])
        rc = lade__fail(LADE_ETIMEOUT, "transport %s: rank %u: sample %llu of step %llu waited %u ms (setting "
                        "peer_timeout_ms) to be sent to rank %u, which lets its peers send only below step %llu "
                        "(its consumer's step plus its window): rank %u stopped or is that far behind", pq->name,
                        pq->rank, (unsigned long long)h->idx, (unsigned long long)h->q, timeout_ms, h->dst,
                        (unsigned long long)pq->grant[h->dst], h->dst);
      else
        rc = lade__fail(LADE_ETIMEOUT, "transport %s: rank %u: the sends of step %llu were not served within %u ms",
                        pq->name, pq->rank, (unsigned long long)q, timeout_ms);
      note_lost_locked(pq, h->dst);
      break;
    }
  if (!rc && pq->fatal) rc = lade__fail(pq->fatal, "%s", pq->fatal_msg);
  pthread_mutex_unlock(pq->mu);
  return rc;
}

static int pq_recv(lade__pushq_t *pq, uint64_t q, uint64_t idx, uint32_t src, lade__buf_t *out) {
  const uint8_t *peer_lost = pq->peer_lost;
  const uint32_t world = pq->peer_lost_n;
  struct timespec ts;
  uint32_t timeout_ms = pq->p->timeout_ms;
  lade__pushq_timespec_after(&ts, timeout_ms / 1000.0);
  pthread_mutex_lock(pq->mu);
  uint32_t rank = pq->rank;
  lade__pushq_msg_t *m = NULL;
  int rc = 0;
  for (;;) {
    for (lade__pushq_msg_t **pp = &pq->bucket[bucket_of(q, idx)]; *pp; pp = &(*pp)->next)
      if ((*pp)->q == q && (*pp)->idx == idx) {
        m = *pp;
        *pp = m->next;
        pq->nmsgs--;
        pq->held -= m->len;
        break;
      }
    if (m) break;
    if (pq->fatal) {
      rc = lade__fail(pq->fatal, "%s", pq->fatal_msg);
      break;
    }
    if (pq->stop_waits) { /* the loader is closing: its batches are not delivered any more */
      rc = lade__fail(LADE_ESTATE, "transport %s: rank %u: the loader is closing", pq->name, rank);
      break;
    }
    if (peer_lost && src < world && peer_lost[src]) {
      rc = lade__fail(LADE_EIO, "transport %s: rank %u: sample %llu of step %llu did not arrive from rank %u: the "
                      "connection to rank %u broke: rank %u died", pq->name, rank, (unsigned long long)idx,
                      (unsigned long long)q, src, src, src);
      break;
    }
    if (pthread_cond_timedwait(pq->cv, pq->mu, &ts) == ETIMEDOUT) {
      rc = lade__fail(LADE_ETIMEOUT, "transport %s: rank %u: sample %llu of step %llu did not arrive from rank %u "
                      "within %u ms (setting peer_timeout_ms): rank %u died, stopped early or is that far behind",
                      pq->name, rank, (unsigned long long)idx, (unsigned long long)q, src, timeout_ms, src);
      note_lost_locked(pq, src);
      break;
    }
  }
  pthread_mutex_unlock(pq->mu);
  if (!m) return rc;
  if (m->src != src)
    rc = lade__fail(LADE_ESTATE, "transport %s: rank %u: sample %llu of step %llu came from rank %u, the plan says "
                    "rank %u (the learners' plans differ)", pq->name, rank, (unsigned long long)idx,
                    (unsigned long long)q, m->src, src);
  else if (lade__pushq_payload_sum(q, idx, m->data, m->len) != m->sum)
    rc = lade__fail(LADE_EIO, "transport %s: rank %u: sample %llu of step %llu from rank %u arrived corrupted: its "
                    "%zu bytes do not match the checksum the sender computed", pq->name, rank,
                    (unsigned long long)idx, (unsigned long long)q, src, m->len);
  else if (m->error)
    rc = lade__fail(LADE_EIO, "from rank %u: %.*s", src, (int)m->len, (const char *)m->data);
  else if (lade__buf_reserve(out, m->len) != 0)
    rc = lade__fail(LADE_ENOMEM, "transport %s: out of memory for %zu bytes", pq->name, m->len);
  else {
    memcpy(out->data, m->data, m->len);
    out->len = m->len;
  }
  free(m->data);
  free(m);
  return rc;
}

static void pq_forget_below(lade__pushq_t *pq, uint64_t q) {
  pthread_mutex_lock(pq->mu);
  lade__pushq_msgs_free_locked(pq, q);
  pq->consumed_q = q; /* the backend's thread grants the peers the steps from here on */
  pthread_mutex_unlock(pq->mu);
}

static void pq_stats(lade__pushq_t *pq, lade__transport_stats_t *out) {
  pthread_mutex_lock(pq->mu);
  *out = pq->st;
  pthread_mutex_unlock(pq->mu);
}

/* ---- the data path (transport.h): the push protocol, or local's nothing */

int lade__transport_send(lade__transport_t *d, uint64_t q, const uint32_t *dst, const uint64_t *idx, uint32_t n) {
  if (d->pq) return pq_send(d->pq, q, dst, idx, n);
  (void)dst, (void)idx;
  return n ? lade__fail(LADE_EINVAL, "transport local: step %llu sends to a peer, and there is none",
                        (unsigned long long)q)
           : 0;
}

int lade__transport_wait_served(lade__transport_t *d, uint64_t q) { return d->pq ? pq_wait_served(d->pq, q) : 0; }

int lade__transport_recv(lade__transport_t *d, uint64_t q, uint64_t idx, uint32_t src, lade__buf_t *out) {
  if (d->pq) return pq_recv(d->pq, q, idx, src, out);
  return lade__fail(LADE_EINVAL, "transport local: sample %llu of step %llu is to come from rank %u, and there are no "
                    "peers", (unsigned long long)idx, (unsigned long long)q, src);
}

void lade__transport_forget_below(lade__transport_t *d, uint64_t q) {
  if (d->pq) pq_forget_below(d->pq, q);
}

void lade__transport_stats(lade__transport_t *d, lade__transport_stats_t *out) {
  if (d->pq) pq_stats(d->pq, out);
  else *out = (lade__transport_stats_t){0};
}
