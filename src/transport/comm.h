/*
 * comm.h - the transport skeleton shared by the backends that move bytes
 * (mpi.c, ucx.c; docs/transport.md, "Threads and locks").
 *
 * One communication thread per backend and process makes every call into
 * the library. It loops over the loaders' channels, each in one of the
 * states OPENING, OPEN, CLOSING, CLOSED (pushq.h): an opening channel gets
 * the backend's open_step; an open one its grants (backpressure), its
 * queued sends served and posted (pushq.h), what arrived received and the
 * finished sends completed; a closing one is flushed, then DONE goes to
 * every peer and the thread drains until every peer's DONE came (or its
 * connection broke), bounded by the timeout. When a pass does nothing the
 * thread sleeps, backing off from 20 us to the backend's idle_max_ns. The
 * caller's side: a channel is linked (OPENING) and its open waited for; a
 * close marks it CLOSING, waits (bounded) for the thread, and unlinks it.
 *
 * A backend fills lade__comm_ops_t with what talks to its library (post,
 * receive, complete, the open's exchange, teardown), embeds a
 * lade__comm_chan_t first in its channel and keeps one lade__comm_t for
 * the process.
 *
 * Locks:
 *   lade__comm_t.mu       the channel list, started/stop, and whatever the
 *                         backend puts under it (ucx: its peers and every
 *                         UCX call); held by the thread for a whole pass
 *                         over the channels, so a channel unlinked under it
 *                         is never touched again
 *   lade__comm_chan_t.mu  the channel's state, its push protocol (pq: the
 *                         queue, arrived messages, grants, failure,
 *                         counters) and done_from; waiters (open, close,
 *                         recv, wait_served) wait on its cv
 * Order: the world's mu, then a channel's mu. serve() is called by the
 * thread with the world's mu held and no channel lock. Fields marked
 * "thread's" are touched only by the thread (and by the caller once the
 * channel is unlinked).
 */
#ifndef LADE__COMM_H
#define LADE__COMM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/pushq.h"
#include "transport/transport.h"

/* The message types every backend carries; a backend numbers its own from
 * LADE__COMM_TYPES on (ucx: settings check, allgather, abort). */
enum { LADE__COMM_DATA = 1, LADE__COMM_DONE, LADE__COMM_GRANT, LADE__COMM_TYPES };

typedef struct lade__comm_chan {
  lade__transport_t base;       /* first: the handle the engine holds */
  lade__transport_params_t p;   /* the settings, copied at open */
  struct lade__comm_chan *next; /* the world's list (its mu) */
  bool linked;                  /* in the list: its open and close go through the thread */
  uint32_t rank, world;         /* this learner and the loader's ranks, final once open */
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* open, close, recv and wait_served waiters */
  int state;           /* LADE__PUSHQ_OPENING, _OPEN, _CLOSING, _CLOSED */
  lade__pushq_t pq;    /* the push protocol's bookkeeping */
  uint8_t *done_from;  /* per rank: its DONE came (close) */
  lade__buf_t sbuf;    /* thread's: what serve() produced for the send being posted */
} lade__comm_chan_t;

typedef struct lade__comm_ops {
  const char *name;  /* "mpi", "ucx": in error texts */
  long idle_max_ns;  /* the idle sleep doubles from 20 us while below this */
  /* Optional, on the thread before its loop (MPI's initialisation): false
   * ends the thread at once. */
  bool (*begin)(void);
  /* Optional, on the thread after its loop (MPI's finalisation). */
  void (*end)(void);
  /* Optional, each pass under the world's mu before the channels, and in
   * every round of a close: what is not one channel's (ucx: the worker's
   * progress, every arrived message taken off its queue). Returns the work
   * done (0: idle). */
  int (*poll)(void);
  /* OPENING: one pass of the open (the settings check); ends in OPEN, or
   * CLOSED with the channel failed, broadcasting cv. Returns the work done. */
  int (*open_step)(lade__comm_chan_t *c);
  /* Optional: first in each pass over an OPEN channel (ucx: an allgather's
   * parts). Returns the work done. */
  int (*open_pass)(lade__comm_chan_t *c);
  /* Posts one message of `type` to rank dst; buf (malloc'd) is the send's
   * from here on, freed when it completes or fails. Returns 0, or nonzero
   * with why (cap bytes; why may be NULL) saying what failed. */
  int (*post)(lade__comm_chan_t *c, uint32_t dst, int type, uint8_t *buf, size_t len, char *why, size_t cap);
  /* Takes what arrived (lade__comm_take_locked); returns how many messages. */
  int (*recvs)(lade__comm_chan_t *c);
  /* Completes finished sends; returns how many. */
  int (*complete)(lade__comm_chan_t *c);
  /* Whether requests are still in flight (a close waits for them, bounded). */
  bool (*busy)(lade__comm_chan_t *c);
  /* The end of a close, on the thread, before the channel is CLOSED: what
   * is still in flight after the bound (a dead or stuck peer). */
  void (*drained)(lade__comm_chan_t *c);
} lade__comm_ops_t;

/* One backend's communication thread and its channels in this process. */
typedef struct lade__comm {
  const lade__comm_ops_t *ops;
  pthread_mutex_t mu;
  lade__comm_chan_t *chans;
  pthread_t thread;
  bool started, stop;
} lade__comm_t;

#define LADE__COMM_INIT(o) {.ops = (o), .mu = PTHREAD_MUTEX_INITIALIZER}

/* Fails the channel (the first failure wins) and wakes its waiters; the
 * _locked form expects c->mu held, the other takes it. */
#define lade__comm_fail_locked(c, ...) lade__pushq_fail_locked(&(c)->pq, __VA_ARGS__)
void lade__comm_fail(lade__comm_chan_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets up a zeroed channel of the transport `tops` (the backend `name`)
 * with a copy of p: its handle, mutex, condition variable and push
 * protocol. */
void lade__comm_chan_init(lade__comm_chan_t *c, const lade__transport_ops_t *tops, const char *name,
                          const lade__transport_params_t *p);
/* Sizes the channel for `world` ranks (its grants and done_from); false
 * when out of memory. */
bool lade__comm_chan_peers(lade__comm_chan_t *c, uint32_t world);
/* Frees what lade__comm_chan_init and _peers made (the channel itself
 * stays the backend's to free). */
void lade__comm_chan_free(lade__comm_chan_t *c);

/* Starts w's thread once; under w->mu. 0, LADE_ETHREAD, or LADE_ESTATE when
 * the process is exiting. */
int lade__comm_start_locked(lade__comm_t *w);
/* Puts c in w's list as OPENING, for the thread to open; under w->mu.
 * LADE_ESTATE when the process is exiting. */
int lade__comm_link_locked(lade__comm_t *w, lade__comm_chan_t *c);
/* Waits until the thread opened c or failed it; 0 or the failure. */
int lade__comm_wait_open(lade__comm_chan_t *c);
/* The end of a backend's open: rc nonzero closes c (through its transport's
 * close) and returns rc; 0 hands c out, filling *out, *rank and *world. */
int lade__comm_open_end(lade__comm_chan_t *c, int rc, lade__transport_t **out, uint32_t *rank, uint32_t *world);
/* Closes c: an open, linked channel is closed by the thread (flushed,
 * DONE exchanged), waited for at most 3 timeouts and a second; then c is
 * out of w's list and the thread never touches it again. */
void lade__comm_chan_close(lade__comm_t *w, lade__comm_chan_t *c);
/* At exit: calls each_locked (optional) on every channel still open under
 * w->mu, abandons them, stops the thread and joins it. Returns whether a
 * channel was left open. */
bool lade__comm_stop(lade__comm_t *w, void (*each_locked)(lade__comm_chan_t *c));

/* Takes one DATA, GRANT or DONE message from src (buf malloc'd, owned from
 * here): a sample stored for recv, a grant raised, a DONE noted; anything
 * else fails the channel as malformed. Under c->mu; wakes the waiters. */
void lade__comm_take_locked(lade__comm_chan_t *c, int type, uint32_t src, uint8_t *buf, size_t len);
/* Compares every peer's settings check with this rank's: rows holds world
 * rows of `stride` values, [count, values...] (this rank's own row is not
 * read). Fails c naming the first setting that differs and every rank
 * whose value differs from this rank's. Under c->mu. */
void lade__comm_checks_locked(lade__comm_chan_t *c, const uint64_t *rows, size_t stride);

/* Sleeps ns nanoseconds (below a second). */
void lade__comm_nap(long ns);

#endif
