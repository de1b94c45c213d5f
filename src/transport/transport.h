/*
 * transport.h - the transport between learners (docs/transport.md).
 *
 * Every transfer is known to both sides from the plan: the learner that
 * holds a sample in its cache (the plan's from[] names it) pushes the bytes
 * to the learner that trains on it when it plans the step, and the receiver
 * takes the message of (step, sample) when its fetch stage reads the
 * sample: no request round trip. Messages carry their (step, sample) in a
 * header, so they may arrive in any order; a receiver keeps what arrived
 * until it is read or the receiver moves past its step, and lets its peers
 * send only a bounded number of steps ahead of its consumer (backpressure),
 * so what it keeps is bounded by its own window. Each message carries a
 * checksum of the sender's bytes; the learners compare digests of their
 * datasets at open.
 *
 * transport/ does not know the cache tiers: the engine hands it a serve()
 * callback that produces a sample's bytes for a send (the fetch stage reads
 * its own cache, and storage if the cache lost it).
 *
 * Backends, one file each: local (world size 1: nothing to send), mpi
 * (one communication thread per process drives MPI; every loader has its
 * own communicator) and ucx (the same without an MPI launcher: one UCX
 * worker and thread per process, the peers' addresses exchanged at start).
 * Thread-safe.
 */
#ifndef LADE__TRANSPORT_H
#define LADE__TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/core.h"

/* Produces the bytes of sample idx that the plan's step q sends, into out.
 * With nonblock set it may return LADE__DIST_AGAIN (the bytes are not ready yet,
 * e.g. an admit of an earlier step is still being read): the transport asks
 * again later. Called from the transport's own thread. */
#define LADE__DIST_AGAIN 1
typedef int (*lade__transport_serve_fn)(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out);

/* A setting all learners must agree on, checked when the transport opens;
 * `hash` marks a digest (shown in hexadecimal). */
typedef struct lade__transport_check {
  const char *name;
  uint64_t value;
  bool hash;
} lade__transport_check_t;

typedef struct lade__transport_params {
  uint32_t rank, world;    /* the settings' (mpi: 0/1 = take MPI's) */
  uint32_t timeout_ms;     /* a receive waits at most this long for its message */
  uint32_t window;         /* steps this learner reads ahead of its consumer (prefetch + 1): it lets
                            * peers send it the steps below its consumer's + 2 * window + 2 only */
  lade__transport_serve_fn serve;
  void *serve_ctx;
  const lade__transport_check_t *checks; /* compared across learners at open */
  uint32_t nchecks;
  const char *rendezvous_dir; /* ucx: the folder the ranks exchange their addresses in ("" or NULL: none) */
  const char *job_id;         /* ucx: the job's name in that folder ("": torchrun's run id) */
} lade__transport_params_t;

typedef struct lade__transport_stats {
  uint64_t sent, sent_bytes, received, received_bytes, served_from_storage;
  uint64_t held_peak_bytes; /* the most payload bytes arrived and not yet read, at once */
} lade__transport_stats_t;

typedef struct lade__transport lade__transport_t;

typedef struct lade__transport_ops {
  const char *name;
  /* Opens the transport; fills *rank and *world. Errors say why (MPI
   * missing, thread level, settings that differ between learners, naming
   * the rank and the setting). */
  int (*open)(lade__transport_t **out, const lade__transport_params_t *p, uint32_t *rank, uint32_t *world);
  /* Flushes the sends (bounded by the timeout) and frees. */
  void (*close)(lade__transport_t *d);
  /* Per rank (world entries), the lowest rank on the same node as MPI's
   * shared-memory split sees it (topology.h), or NULL when the transport
   * does not know. Owned by the transport, valid while it is open. */
  const uint32_t *(*node_leads)(lade__transport_t *d);
  /* Every learner's `len` bytes (the same len on all), in rank order, into
   * all (world * len bytes); every learner calls it at the same point, once
   * the transport is open and before any send. Bounded by the timeout;
   * errors name the rank. NULL: the transport cannot (a warm restart then
   * starts cold, docs/plan.md "Warm restarts"). */
  int (*allgather)(lade__transport_t *d, const void *mine, size_t len, void *all);
} lade__transport_ops_t;

struct lade__transport {
  const lade__transport_ops_t *ops;
  struct lade__pushq *pq; /* the push protocol's bookkeeping (pushq.h) of mpi.c and ucx.c; NULL for local */
};

/* The data path: the push protocol (pushq.c), one for every transport that
 * moves bytes, over the state d->pq its backend keeps and feeds; local (no
 * pq, one learner) sends and receives nothing, and a send or a receive there
 * is a bug reported as such, not data made up. */
/* Queues the sends of step q: n samples idx[i] to learner dst[i]. Returns at once. */
int lade__transport_send(lade__transport_t *d, uint64_t q, const uint32_t *dst, const uint64_t *idx, uint32_t n);
/* Waits (bounded) until every send of steps <= q has its bytes copied
 * (served): the sender may evict them then. */
int lade__transport_wait_served(lade__transport_t *d, uint64_t q);
/* Waits (bounded) for the bytes of (q, idx) from learner src; errors name
 * the rank, the step and the sample. */
int lade__transport_recv(lade__transport_t *d, uint64_t q, uint64_t idx, uint32_t src, lade__buf_t *out);
/* The consumer moved to step q: drops what arrived for steps below q (a
 * seek, or steps never read), and lets the peers send up to q + the
 * window (backpressure). */
void lade__transport_forget_below(lade__transport_t *d, uint64_t q);
void lade__transport_stats(lade__transport_t *d, lade__transport_stats_t *out);

/* A peer missed a bound outside the transport (the node's shared cache,
 * docs/plan.md "Nodes"): kept as a peer timeout, with lade_last_error() as
 * its reason, so closing treats it as one (mpi.c: the job is aborted when
 * that peer then misses its close too). d may be NULL; no-op for local. */
void lade__transport_lost(lade__transport_t *d, uint32_t rank);
/* The loader stops (its workers are being joined): wait_served and recv
 * return at once from now on (recv with LADE_ESTATE), without waiting for
 * peers that may have stopped too (close still flushes the sends,
 * bounded). d may be NULL; no-op for local. */
void lade__transport_stop_waits(lade__transport_t *d);

extern const lade__transport_ops_t lade__transport_local;
#ifdef LADE_HAVE_MPI
extern const lade__transport_ops_t lade__transport_mpi;
#endif
#ifdef LADE_HAVE_UCX
extern const lade__transport_ops_t lade__transport_ucx;
#endif
#if defined(LADE_HAVE_MPI) || defined(LADE_HAVE_UCX)
#define LADE__HAVE_PEERS 1 /* a transport between learners is built in */
#endif

/* The world size lade_ucx_set_peers() (or an earlier rendezvous) set up in
 * this process; 0 when none (or no UCX). */
uint32_t lade__ucx_peers_world(void);

/* Whether this process was started by an MPI launcher (mpirun/mpiexec,
 * srun with PMI): the environment tells, without initialising MPI. Fills
 * *rank and *world with the launcher's (world 0 when unknown). */
bool lade__transport_launched(uint32_t *rank, uint32_t *world);

/* Whether torchrun (TorchElastic) started this process: TORCHELASTIC_RUN_ID,
 * or LOCAL_RANK with RANK and WORLD_SIZE. Fills *rank and *world with
 * RANK and WORLD_SIZE (world 0 when unknown). */
bool lade__transport_torchrun(uint32_t *rank, uint32_t *world);

#endif
