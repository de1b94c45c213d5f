/*
 * engine_impl.h - the loader's state, shared by the engine's files:
 * engine.c (the pipeline's threads and the consumer's calls; its opening
 * comment is the design and the lock rules), engine_open.c (opening and
 * closing: the source, the settings resolved, transport, cursor, fetch
 * stage, transform) and engine_stats.c (counters and the listing).
 */
#ifndef LADE__ENGINE_IMPL_H
#define LADE__ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "core/config.h"
#include "core/core.h"
#include "engine/epochs.h"
#include "engine/fetch.h"
#include "engine/resolve.h"
#include "engine/trace.h"
#include "cursor/cursor.h"
#include "source/source.h"
#include "transform/transform.h"
#include "transport/transport.h"

enum { SLOT_FREE = 0, SLOT_PLANNING, SLOT_FILLING, SLOT_READY, SLOT_HELD };

#define LAT_RING 4096
#define MAX_SUBST_TRIES 64

typedef struct slot {
  struct lade_loader *L;
  uint8_t *data;
  size_t cap;
  int64_t *labels;
  int64_t *indices;
  uint32_t *sizes;
  uint64_t seq;
  uint32_t n, valid, claimed, done; /* n <= batch_size: the last step may be short */
  int state;
  bool stale;        /* a seek made this batch obsolete: free it once done */
  int err;           /* first sample error (on_error=fail) */
  char errmsg[1200];
  uint32_t substituted;
  double t_sched;
  /* remote sources: samples are claimed in arrival order, not index order */
  uint8_t *taken;
  uint32_t first_free;  /* every sample before it is taken */
  uint64_t tier_samples[LADE__TIER_COUNT], tier_bytes[LADE__TIER_COUNT]; /* guarded by mu */
  uint64_t plan_fallbacks, plan_peer; /* guarded by mu: reads that did not follow the plan's route */
  uint64_t peer_node, peer_node_bytes; /* guarded by mu: peer samples from a rank of this node */
  uint64_t node_reads;                 /* guarded by mu: intra-node handoffs read from the node's cache */
  lade__cursor_step_t cs;             /* the plan's step: samples, routes, admits, evicts */
  bool finishing;                     /* its evicts are being applied (routed plans) */
} slot_t;

/* The handle a caller holds: a lade_batch_t* is the view of one handle.
 * Handles are apart from slots so that a stale pointer never reaches a
 * slot's buffer: a handle lives until the loader is freed, is reused only
 * after HANDLE_QUARANTINE other handles were released after it, and a
 * release of a handle that is not held touches nothing (see
 * lade_batch_release). */
typedef struct handle {
  lade_batch_t view; /* must stay first: lade_batch_t* <-> handle_t* */
  struct lade_loader *L;
  slot_t *slot; /* the batch's slot while held; NULL once released */
  uint64_t seq; /* the batch it was last handed out for */
  bool held;
} handle_t;

#define HANDLE_QUARANTINE 64

/* Bumped in the child of every fork() (pthread_atfork): a loader made under
 * an older value belongs to a parent process; its threads and locks do not
 * exist here, so every call on it in the child returns at once. */
extern atomic_uint lade__engine_fork_gen; /* engine_open.c */

/* A worker's counters: written by that worker only, read by
 * lade_loader_stats() while it runs, so both sides are relaxed atomics (no
 * ordering is needed; a total a moment old is fine). */
#define WSTAT_ADD(field, v)                               \
  do {                                                    \
    __typeof__(field) wstat_v_ = (field) + (v);           \
    __atomic_store(&(field), &wstat_v_, __ATOMIC_RELAXED); \
  } while (0)
#define WSTAT(field)                                    \
  __extension__({                                       \
    __typeof__(field) wstat_r_;                         \
    __atomic_load(&(field), &wstat_r_, __ATOMIC_RELAXED); \
    wstat_r_;                                           \
  })

typedef struct worker {
  struct lade_loader *L;
  pthread_t thread;
  uint32_t id;
  lade__buf_t buf;
  void *wstate;
  bool wstate_ok;
  /* stats (written by this worker only) */
  double t_read, t_xform;
  uint64_t bytes, samples, substituted;
  uint64_t tier_samples[LADE__TIER_COUNT], tier_bytes[LADE__TIER_COUNT];
} __attribute__((aligned(LADE__CACHELINE))) worker_t;

struct lade_loader {
  struct lade_config cfg;
  lade__resolved_t res; /* the settings resolved against the source (engine/resolve.h) */
  uint64_t names_digest; /* of the samples' names (engine_open.c), where the disk tier or MPI needs it */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* workers wait here for claimable work */
  pthread_cond_t cv_ready; /* the consumer waits here */

  /* set up by the opener (one worker), then read-only */
  lade__source_t src;
  const lade__source_ops_t *src_ops;
  const lade__transform_ops_t *xf;
  void *xf_state;
  lade__sample_shape_t shape;
  lade__cursor_t *cursor; /* the one source of the order (cursor/cursor.h) */
  bool routed;            /* the plan routes samples: steps finish in order (finish_steps_in_order) */
  lade__transport_t *dist;     /* the transport between learners (routed plans under mpirun), or NULL */
  uint64_t evict_q;       /* routed: the next step to finish */
  uint64_t steps, total; /* steps per epoch, epochs * steps */
  bool direct_payload;   /* npy source + npy transform: read into the slot */
  lade__fetch_t *fetch;  /* cache tiers, remote submits, prefetcher */
  bool async;            /* claim samples whose bytes are ready first */

  bool planning;
  bool stop;
  uint32_t waiting;   /* next() calls blocked on cv_ready now */
  uint64_t intr_gen;  /* bumped by each lade_loader_interrupt() that found a waiter */
  unsigned fork_gen;  /* lade__engine_fork_gen when created: differs in a forked child */
  pid_t pid;
  int fatal;
  char fatal_msg[1200];

  slot_t **slots;  /* every batch buffer of the pool (each slot allocated alone: views stay put) */
  uint32_t nslots, slots_cap;
  uint32_t window; /* prefetch + 1 batches prepared ahead */
  slot_t **sched;  /* window entries: the slot of scheduled, undelivered q at q % window */
  uint64_t next_sched, next_deliver;
  uint64_t first;         /* the run's first step: 0, or a resumed run's (lade_config_set_position) */
  uint32_t held;
  handle_t **handles; /* every handle made (freed with the loader) */
  uint32_t nhandles, handles_cap;
  handle_t **hfree;   /* released handles, a FIFO ring: reused oldest first */
  uint32_t hfree_head, hfree_len;
  bool destroyed;
  bool stages_closed; /* lade__engine_close_stages() ran */
  bool warned_growth;

  worker_t *workers;
  uint32_t nworkers, started;

  /* stats */
  double t_create, t_first, t_wait, t_collate;
  uint64_t batches, delivered_samples;
  uint64_t peer_node, peer_node_bytes; /* guarded by mu: peer samples read from a rank of this node */
  uint64_t node_reads;                 /* guarded by mu: intra-node handoffs read from the node's cache */
  double lat[LAT_RING];
  uint64_t nlat;
  uint64_t pool_bytes, peak_pool_bytes;
  lade__trace_t *trace;
  _Atomic uint32_t fail_run; /* on_error=skip: failed reads in a row, any worker (a success resets it) */
  lade__epochs_t epochs; /* per-epoch counters (epochs.h), guarded by mu */
};

static inline bool forked(const lade_loader_t *L) {
  return L->fork_gen != atomic_load_explicit(&lade__engine_fork_gen, memory_order_relaxed);
}

int lade__engine_fail_forked(const lade_loader_t *L, const char *fn); /* engine_open.c */

/* The slot scheduled for q, or NULL. Locked. */
static inline slot_t *slot_of(lade_loader_t *L, uint64_t q) {
  slot_t *s = L->sched[q % L->window];
  return s && s->seq == q && s->state != SLOT_FREE && s->state != SLOT_HELD ? s : NULL;
}

/* engine_open.c */
/* lade_loader_create but the workers: the loader opened (source, settings,
 * transport, cursor, fetch stage, transform, pool), nworkers workers
 * allocated and not started (engine.c starts them). */
int lade__engine_open(lade_loader_t **out, const lade_config_t *cfg);
void *lade__engine_pool_alloc(lade_loader_t *L, size_t size);
void lade__engine_slot_free(lade_loader_t *L, slot_t *s);
/* Closes the stages only running workers use: the transport, the fetch stage
 * (cache tiers, the disk cache's folder lock, prefetcher threads), the
 * transform, the source's files, the cursor and the trace; wipes the
 * secrets. lade_loader_destroy() calls it once the workers are joined, so
 * batches the caller still holds keep only their buffers and the pool's
 * bookkeeping alive. Idempotent; lade__engine_free_all() calls it too. */
void lade__engine_close_stages(lade_loader_t *L);
/* Frees everything: the stages (if still open), the pool and the loader. */
void lade__engine_free_all(lade_loader_t *L);
/* engine.c */

#endif
