/*
 * pushq.h - the push protocol's bookkeeping, shared by the backends that
 * move bytes (mpi.c, ucx.c; docs/transport.md).
 *
 * A backend embeds one lade__pushq_t in its channel and keeps only what
 * talks to its library (posting, probing, completing). The struct holds the
 * queue of sends in step order, the messages that arrived (by (step,
 * sample)), the peers' grants (backpressure), the channel's failure and the
 * counters; the functions here implement the transport interface's send,
 * wait_served, recv, forget_below and stats on it, bounded by the setting
 * peer_timeout_ms, with error texts naming the backend, the rank, the step
 * and the sample.
 *
 * Locks: every field is guarded by the channel's mutex `mu`; waiters wait on
 * its condition variable `cv` (both the backend's, named at init). Functions
 * ending in _locked expect mu held; the others take it.
 */
#ifndef LADE__PUSHQ_H
#define LADE__PUSHQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "transport/transport.h"

#define LADE__PUSHQ_MAGIC 0x4c41444550454552ull /* "LADEPEER" */
#define LADE__PUSHQ_BUCKETS 1024
/* Seconds a send waits for serve() to have the bytes (an admit still being
 * read) before it asks for them blocking (served from storage). */
#define LADE__PUSHQ_ADMIT_WAIT_S 1.0

/* A channel's states, the backends' (the field stays in their channel). */
enum { LADE__PUSHQ_OPENING = 0, LADE__PUSHQ_OPEN, LADE__PUSHQ_CLOSING, LADE__PUSHQ_CLOSED };

/* The header of a DATA message, then len bytes of payload. */
typedef struct lade__pushq_hdr {
  uint64_t magic, q, idx, len;
  int64_t error; /* nonzero: the sender could not produce the bytes; the payload is its message */
  uint64_t sum;  /* lade__pushq_payload_sum() of the payload as the sender made it */
} lade__pushq_hdr_t;

/* An arrived message, kept until read or forgotten. */
typedef struct lade__pushq_msg {
  struct lade__pushq_msg *next;
  uint64_t q, idx;
  uint32_t src;
  int64_t error;
  uint64_t sum;
  size_t len;
  uint8_t *data; /* len bytes, malloc'd */
} lade__pushq_msg_t;

/* A queued send: sample idx of step q to rank dst. */
typedef struct lade__pushq_send {
  uint64_t q, idx;
  uint32_t dst;
  double first_try; /* when serve() was first asked for it; 0: not yet */
} lade__pushq_send_t;

typedef struct lade__pushq {
  const char *name; /* the backend, in error texts: "transport <name>: ..." */
  const lade__transport_params_t *p;
  pthread_mutex_t *mu;
  pthread_cond_t *cv; /* recv and wait_served waiters */
  uint32_t rank;      /* this learner, once known */
  int fatal;
  int stop_waits;      /* the loader stops: wait_served returns at once (lade__transport_stop_waits) */
  char fatal_msg[1024];
  lade__pushq_send_t *sq; /* FIFO ring of queued sends, in step order */
  size_t sq_head, sq_len, sq_cap;
  size_t nmsgs;        /* messages arrived and not read */
  size_t held;         /* their payload bytes */
  uint64_t *grant;     /* per peer: this learner may send it steps below grant[peer]; the backend allocates it */
  uint64_t consumed_q; /* this learner's consumer step (forget_below) */
  const uint8_t *peer_lost; /* per rank (peer_lost_n): its connection broke (ucx.c); NULL: not known (mpi.c) */
  uint32_t peer_lost_n;
  int lost;            /* a receive or a send waited for a peer past the timeout */
  uint32_t lost_rank;  /* that peer (the first) */
  char lost_msg[1024];
  uint64_t max_queued_q; /* +1; 0: nothing queued yet */
  lade__pushq_msg_t *bucket[LADE__PUSHQ_BUCKETS];
  lade__transport_stats_t st;
  /* owned by the backend's thread (lade__pushq_grant_due) */
  bool granted; /* a grant was sent, at consumer step grant_at */
  uint64_t grant_at;
} lade__pushq_t;

/* Sets up a zeroed pq for the backend `name`, with the channel's settings
 * (kept by pointer), mutex and condition variable. */
void lade__pushq_init(lade__pushq_t *pq, const char *name, const lade__transport_params_t *p, pthread_mutex_t *mu,
                      pthread_cond_t *cv);
/* Frees what pq holds (queue, messages, grants); the mutex stays the backend's. */
void lade__pushq_free(lade__pushq_t *pq);

/* For the backend's thread (backpressure): whether to tell every peer again
 * the step below which it may send here, *grant (the consumer's step plus
 * 2 * window + 2): at open, then whenever the consumer moved by window / 2
 * steps. A true answer counts as sent. */
bool lade__pushq_grant_due(lade__pushq_t *pq, uint64_t *grant);
/* The checksum a DATA message carries of its payload. */
uint64_t lade__pushq_payload_sum(uint64_t q, uint64_t idx, const void *data, size_t len);
/* *ts = now (CLOCK_REALTIME, as pthread_cond_timedwait wants) + s seconds. */
void lade__pushq_timespec_after(struct timespec *ts, double s);

/* Fails the channel (the first failure wins) and wakes its waiters. */
void lade__pushq_fail_locked(lade__pushq_t *pq, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Keeps an arrived message (m malloc'd, owned from here) for recv, counted. */
void lade__pushq_store_locked(lade__pushq_t *pq, lade__pushq_msg_t *m);
/* Drops the kept messages of steps below `below`. */
void lade__pushq_msgs_free_locked(lade__pushq_t *pq, uint64_t below);
/* Removes the head of the send queue after the backend posted it (ok: counted
 * as sent, len payload bytes) or failed to; wakes wait_served. */
void lade__pushq_pop_locked(lade__pushq_t *pq, bool ok, size_t len);

/* For the backend's thread, without mu: the head of the send queue served
 * (serve() into sbuf) into a DATA message, *msg = [header | *len bytes]
 * (malloc'd, the caller's), *sr the send; then the backend posts it and
 * calls lade__pushq_pop_locked. false when there is nothing to post now: the
 * queue is empty, the channel failed, the receiver's grant holds the head
 * back (while *state is OPEN; closing, the last sends go out regardless),
 * serve() has not the bytes yet (the head waits, sends keep their order), or
 * out of memory (the channel fails). A sample that serve() cannot produce
 * travels as an error message naming it. */
bool lade__pushq_next(lade__pushq_t *pq, const int *state, lade__buf_t *sbuf, lade__pushq_send_t *sr, uint8_t **msg,
                      size_t *len);

/* The transport's data path on pq is transport.h's lade__transport_send,
 * _wait_served, _recv, _forget_below and _stats (pushq.c). recv fails a
 * wait for a rank at once when pq->peer_lost says its connection broke. */

#endif
