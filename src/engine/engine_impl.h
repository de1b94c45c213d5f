/*
 * engine_impl.h - the loader's state, shared by the engine's files:
 * engine.c (the pipeline's threads and the consumer's calls; its opening
 * comment is the design and the lock rules), engine_open.c (opening and
 * closing: the source, the settings resolved, transport, cursor, fetch
 * stage, transform) and engine_stats.c (counters and the listing). The
 * batch buffers and the caller's handles (pool.h), the run's counters
 * (counts.h) and the per-epoch ones (epochs.h) are pieces of their own,
 * under the loader's mu.
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
#include "engine/counts.h"
#include "engine/epochs.h"
#include "engine/fetch.h"
#include "engine/pool.h"
#include "engine/resolve.h"
#include "engine/trace.h"
#include "cursor/cursor.h"
#include "source/source.h"
#include "transform/transform.h"
#include "transport/transport.h"

#define MAX_SUBST_TRIES 64

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

  lade__pool_t pool; /* the batch buffers and the caller's handles (pool.h), under mu */
  uint32_t window;   /* prefetch + 1 batches prepared ahead */
  slot_t **sched;    /* window entries: the slot of scheduled, undelivered q at q % window */
  uint64_t next_sched, next_deliver;
  uint64_t first;         /* the run's first step: 0, or a resumed run's (lade_config_set_position) */
  bool destroyed;
  bool stages_closed; /* lade__engine_close_stages() ran */

  worker_t *workers;
  uint32_t nworkers, started;

  lade__counts_t counts; /* the run's counters (counts.h), guarded by mu */
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
