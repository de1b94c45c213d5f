/*
 * engine.c - the pipeline: plan -> fetch -> transform -> collate -> deliver.
 *
 * Design. The batches of global sequence numbers q (= epoch * steps + step)
 * in [next_deliver, next_deliver + window), window = prefetch + 1, are
 * prepared ahead; the one of q is found at sched[q % window], so delivery in
 * plan order is a matter of waiting on one slot. A slot (a batch buffer)
 * cycles FREE -> PLANNING -> FILLING -> READY -> HELD (by the caller) -> FREE.
 * The pool starts at `window` slots and grows only while the caller holds
 * more than two batches (see pool_target; capped by pool_max), and shrinks
 * again as they
 * are released: a caller that keeps batches (torch.cat of a whole epoch)
 * costs exactly the memory it keeps, and never deadlocks the loader. Worker
 * threads share one queue of work that
 * is implicit in the slots: a worker claims the next unclaimed sample of the
 * oldest FILLING slot, so all workers converge on the batch the consumer
 * needs first (within-batch parallelism) and spill over to later batches
 * (prefetch). One claim per sample keeps the lock hold times tiny; the
 * sample's read and transform run unlocked, straight into the slot.
 *
 * The source is listed and the plan made in lade_loader_create(), so a
 * missing or empty dataset fails there, as torchvision's ImageFolder does.
 * Slow steps never run under the lock: planning a batch (which may shuffle a
 * whole epoch) is done by one worker at a time, flagged, while the others
 * keep working.
 *
 * Lifetime: batches may outlive the loader (the Python module hands them to
 * tensors). lade_loader_destroy() stops and joins the workers; the slots and
 * the loader struct are freed by whoever drops the last reference (destroy
 * or the last lade_batch_release).
 * The caller holds handles (handle_t, whose first member is the
 * lade_batch_t view), not slots: a handle lives as long as the loader and is
 * reused oldest-released-first after HANDLE_QUARANTINE others, so a second
 * release of a batch finds its handle not held and touches nothing, and a
 * slot freed when the pool shrinks is never reached through a stale handle.
 *
 * Interrupts wake the next() calls waiting at that moment (counted in
 * `waiting`, woken through intr_gen); with none waiting nothing happens.
 * fork(): a pthread_atfork child handler bumps g_fork_gen; a loader created
 * under an older value is the parent's, and every entry point returns before
 * touching its lock or threads.
 *
 * Lock: `mu` guards the slot list, every slot's state/claim/done counters,
 * sched, the cursors (next_sched, next_deliver), flags and the latency ring. Per-worker stats
 * are written by their worker and read by lade_loader_stats() as relaxed
 * atomics (WSTAT_ADD/WSTAT). The trace file has its own lock,
 * taken after `mu` is released (never both). Lock order: mu, then trace.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/core.h"
#include "transport/transport.h"
#include "engine/fetch.h"
#include "engine/trace.h"
#include "plan/cursor.h"
#include "source/source.h"
#include "transform/transform.h"

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
static atomic_uint g_fork_gen;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { atomic_fetch_add_explicit(&g_fork_gen, 1, memory_order_relaxed); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

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
  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* workers wait here for claimable work */
  pthread_cond_t cv_ready; /* the consumer waits here */

  /* set up by the opener (one worker), then read-only */
  lade__source_t src;
  const lade__source_ops_t *src_ops;
  const lade__transform_ops_t *xf;
  void *xf_state;
  lade__sample_shape_t shape;
  lade__cursor_t *cursor; /* the one source of the order (plan/cursor.h) */
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
  unsigned fork_gen;  /* g_fork_gen when created: differs in a forked child */
  pid_t pid;
  int fatal;
  char fatal_msg[1200];

  slot_t **slots;  /* every batch buffer of the pool (each slot allocated alone: views stay put) */
  uint32_t nslots, slots_cap;
  uint32_t window; /* prefetch + 1 batches prepared ahead */
  slot_t **sched;  /* window entries: the slot of scheduled, undelivered q at q % window */
  uint64_t next_sched, next_deliver;
  uint32_t held;
  handle_t **handles; /* every handle made (freed with the loader) */
  uint32_t nhandles, handles_cap;
  handle_t **hfree;   /* released handles, a FIFO ring: reused oldest first */
  uint32_t hfree_head, hfree_len;
  bool destroyed;
  bool warned_growth;

  worker_t *workers;
  uint32_t nworkers, started;

  /* stats */
  double t_create, t_first, t_wait, t_collate;
  uint64_t batches, delivered_samples;
  double lat[LAT_RING];
  uint64_t nlat;
  uint64_t pool_bytes, peak_pool_bytes;
  lade__trace_t *trace;
  _Atomic uint32_t fail_run; /* on_error=skip: failed reads in a row, any worker (a success resets it) */
  /* per-epoch counters (grown as epochs start), guarded by mu */
  struct epoch_acc {
    uint64_t batches, samples[LADE__TIER_COUNT], bytes[LADE__TIER_COUNT];
    double wait;
    uint64_t bad; /* samples of this epoch that failed (on_error=skip replaced them) */
    uint64_t plan_fallbacks, plan_peer;
    bool started;
    lade__source_stats_t at_start; /* the source's counters at the epoch's first batch */
  } *ep;
  uint64_t nep;
};

static inline bool forked(const lade_loader_t *L) {
  return L->fork_gen != atomic_load_explicit(&g_fork_gen, memory_order_relaxed);
}

static int fail_forked(const lade_loader_t *L, const char *fn) {
  return lade__fail(LADE_ESTATE,
                    "%s: this loader was created in process %d, and this process (%d) is a fork() of it; a loader "
                    "cannot be used across fork(): create one in this process (its threads setting parallelises "
                    "loading)",
                    fn, (int)L->pid, (int)getpid());
}

/* The slot scheduled for q, or NULL. Locked. */
static inline slot_t *slot_of(lade_loader_t *L, uint64_t q) {
  slot_t *s = L->sched[q % L->window];
  return s && s->seq == q && s->state != SLOT_FREE && s->state != SLOT_HELD ? s : NULL;
}

/* ------------------------------------------------------------ allocation */

static void *pool_alloc(lade_loader_t *L, size_t size) {
  if (L->cfg.has_allocator) return L->cfg.allocator.alloc(L->cfg.allocator.ctx, size, 4096);
  return lade__aligned_alloc(size, 4096);
}

static void pool_free(lade_loader_t *L, void *p, size_t size) {
  if (!p) return;
  if (L->cfg.has_allocator)
    L->cfg.allocator.free(L->cfg.allocator.ctx, p, size);
  else
    lade__aligned_free(p);
}

static void slot_free(lade_loader_t *L, slot_t *s) {
  if (!s) return;
  pool_free(L, s->data, s->cap);
  free(s->labels);
  free(s->indices);
  free(s->sizes);
  free(s->taken);
  lade__cursor_step_free(&s->cs);
  free(s);
}

static void free_all(lade_loader_t *L) {
  for (uint32_t i = 0; i < L->nslots; i++) slot_free(L, L->slots[i]);
  for (uint32_t i = 0; i < L->nhandles; i++) free(L->handles[i]);
  free(L->handles);
  free(L->hfree);
  free(L->slots);
  free(L->sched);
  free(L->ep);
  if (L->dist) L->dist->ops->close(L->dist); /* flushes its sends: before the fetch stage that serves them */
  lade__fetch_close(L->fetch);
  if (L->xf && L->xf->destroy && L->xf_state) L->xf->destroy(L->xf_state);
  if (L->src_ops && L->src_ops->close) L->src_ops->close(&L->src);
  lade__cursor_close(L->cursor);
  lade__trace_close(L->trace);
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv_work);
  pthread_cond_destroy(&L->cv_ready);
  free(L->workers);
  lade__config_wipe_secrets(&L->cfg);
  free(L);
}

/* ----------------------------------------------------------------- open */

static const lade__transform_ops_t *transform_for(const struct lade_config *c, const lade__source_ops_t *src) {
  int t = c->transform;
  if (t == LADE__XF_AUTO) t = src == &lade__source_npy || !strcmp(src->name, "hdf5") ? LADE__XF_NPY : LADE__XF_IMAGENET_TRAIN;
  switch (t) {
    case LADE__XF_RAW: return &lade__xform_raw;
    case LADE__XF_NPY: return &lade__xform_npy;
    case LADE__XF_IMAGENET_TRAIN: return &lade__xform_imagenet_train;
    case LADE__XF_IMAGENET_EVAL: return &lade__xform_imagenet_eval;
  }
  return NULL;
}

/* Lists the source, sets up the transform and the plan. Runs on one worker,
 * unlocked. */
static void wake_workers(void *ctx) {
  lade_loader_t *L = ctx;
  pthread_mutex_lock(&L->mu);
  pthread_cond_broadcast(&L->cv_work);
  pthread_mutex_unlock(&L->mu);
}

#ifdef LADE_HAVE_MPI
/* The transport's serving side: the fetch stage (open before any send is queued). */
static int serve_peer(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out) {
  lade_loader_t *L = ctx;
  return lade__fetch_serve(L->fetch, idx, q, nonblock, out);
}
#endif

/* The transport a routed plan needs (docs/transport.md): MPI when asked, or
 * (auto) when started by an MPI launcher with more than one process; rank
 * and world then come from MPI (the settings must agree when set), and the
 * learners' settings are compared. Without a transport, peer routes read
 * storage. The fetch stage serves the sends; it is wired in once open. */
static int open_transport(lade_loader_t *L, lade__cursor_params_t *cp) {
  int mode = L->cfg.transport;
  uint32_t launched_rank = 0, launched_world = 0;
  bool launched = lade__transport_launched(&launched_rank, &launched_world) && launched_world > 1;
  bool routed = lade__plan_kind_routed(cp->plan.kind);
  if (mode == LADE__TRANSPORT_AUTO) {
    mode = routed && launched ? LADE__TRANSPORT_MPI : LADE__TRANSPORT_LOCAL;
  }
  /* the same command from a laptop to mpirun: the launcher's rank and world,
   * unless the settings name them (transport=mpi takes MPI's below) */
  if (mode == LADE__TRANSPORT_LOCAL && launched && L->cfg.world_size == 1 && L->cfg.rank == 0) {
    L->cfg.rank = cp->rank = launched_rank;
    L->cfg.world_size = cp->plan.learners = launched_world;
  }
  if (mode == LADE__TRANSPORT_LOCAL) return 0;
#ifndef LADE_HAVE_MPI
  if (L->cfg.transport == LADE__TRANSPORT_MPI)
    return lade__fail(LADE_EUNSUPPORTED, "transport=mpi: this build has no MPI (LADE_WITH_MPI; apt-get install "
                      "libopenmpi-dev openmpi-bin)");
  fprintf(stderr, "lade: note: started by an MPI launcher, but this build has no MPI (LADE_WITH_MPI): samples the "
                  "plan routes to peers are read from storage\n");
  return 0;
#else
  const lade__transport_check_t checks[] = {
      {"samples (dataset size)", cp->plan.samples}, {"batch_size", cp->plan.batch_size},
      {"epochs", cp->plan.epochs},                  {"seed", cp->plan.seed},
      {"plan", (uint64_t)cp->plan.kind},            {"cache (samples per learner)", cp->plan.cache},
      {"drop_last", cp->drop_last},                 {"shuffle", cp->shuffle},
      {"plan_balance", (uint64_t)cp->plan.balance_peer}, {"plan_reorder", (uint64_t)cp->plan.reorder},
      {"plan_order", (uint64_t)cp->plan.order_algo}, {"plan_imbalance", cp->plan.imbalance}};
  lade__transport_params_t dp = {.rank = L->cfg.rank, .world = L->cfg.world_size, .timeout_ms = L->cfg.peer_timeout_ms,
                            .serve = serve_peer, .serve_ctx = L, .checks = checks,
                            .nchecks = (uint32_t)(sizeof checks / sizeof checks[0])};
  uint32_t rank = 0, world = 1;
  int rc = lade__transport_mpi.open(&L->dist, &dp, &rank, &world);
  if (rc) return rc;
  L->cfg.rank = cp->rank = rank;
  L->cfg.world_size = cp->plan.learners = world;
  return 0;
#endif
}

static int open_pipeline(lade_loader_t *L, lade__buf_t *buf) {
  L->src.on_ready = wake_workers;
  L->src.on_ready_ctx = L;
  int rc = L->src_ops->open(&L->src, &L->cfg);
  if (rc) return rc;
  lade__cursor_params_t cp = {.rank = L->cfg.rank,
                              .shuffle = L->cfg.shuffle,
                              .drop_last = L->cfg.drop_last,
                              .shard_offsets = L->src.shard_offsets,
                              .shards = L->src.shards,
                              .shuffle_buffer = L->cfg.shuffle_buffer,
                              .model_parallel = L->cfg.model_parallel,
                              .devices_per_node = L->cfg.devices_per_node};
  lade_plan_settings_default(&cp.plan, sizeof cp.plan);
  cp.plan.kind = L->cfg.plan;
  cp.plan.samples = L->src.count;
  cp.plan.learners = L->cfg.world_size;
  cp.plan.batch_size = L->cfg.batch_size;
  cp.plan.epochs = L->cfg.epochs;
  cp.plan.seed = L->cfg.seed;
  cp.plan.balance_peer = L->cfg.plan_balance == 0;
  cp.plan.reorder = L->cfg.plan_reorder;
  cp.plan.order_algo = L->cfg.plan_order;
  cp.plan.imbalance = L->cfg.plan_imbalance;
  cp.plan.coalesce = 0;
  uint64_t mean = 0;
  if (lade__plan_kind_routed(cp.plan.kind))
    cp.plan.cache = lade__fetch_plan_cache_samples(&L->cfg, &L->src, L->src_ops, &mean);
  rc = open_transport(L, &cp);
  if (rc) return rc;
  rc = lade__cursor_open(&L->cursor, &cp);
  if (rc) return lade__fail_prefix(rc, "dataset %s: ", L->cfg.source);
  L->steps = lade__cursor_steps(L->cursor);
  L->routed = lade__cursor_routed(L->cursor);
  L->total = L->steps * L->cfg.epochs;
  lade__fetch_params_t fp = {.cfg = &L->cfg, .src = &L->src, .ops = L->src_ops, .steps = L->steps,
                             .batch = L->cfg.batch_size, .cursor = L->cursor, .sample_bytes = mean, .dist = L->dist};
  rc = lade__fetch_open(&L->fetch, &fp);
  if (rc) return rc;
  L->async = lade__fetch_async(L->fetch);

  L->xf = transform_for(&L->cfg, L->src_ops);
  L->direct_payload =
      L->xf == &lade__xform_npy && L->src_ops->read_payload && L->src.dtype && !lade__fetch_cached(L->fetch);
  if (L->direct_payload) {
    /* the source knows the sample's type: no need to read sample 0 */
    L->shape.dtype = L->src.dtype;
    L->shape.ndim = L->src.ndim;
    for (int i = 0; i < L->src.ndim; i++) L->shape.dims[i] = L->src.shape[i];
    L->shape.bytes = L->src.payload_bytes;
  } else {
    const uint8_t *first = NULL;
    size_t first_len = 0;
    /* sample 0 gives the slot size (raw without raw_size) or the .npy header;
     * read through the tiers, so a warm cache sends no request */
    if ((L->xf == &lade__xform_raw && !L->cfg.raw_size) || L->xf == &lade__xform_npy) {
      int tier, note;
      rc = lade__fetch_read(L->fetch, 0, 0, LADE__ROUTE_ANY, buf, &tier, &note);
      if (rc) return rc;
      first = buf->data;
      first_len = buf->len;
    }
    rc = L->xf->init(&L->xf_state, &L->cfg, first, first_len, &L->shape);
    if (rc) return rc;
  }
  if (L->shape.ndim + 1 > LADE_MAX_DIMS)
    return lade__fail(LADE_ESHAPE, "samples have %d dimensions; at most %d are supported", L->shape.ndim,
                      LADE_MAX_DIMS - 1);
  if (L->shape.bytes == 0) return lade__fail(LADE_ESHAPE, "samples of the dataset %s are empty", L->cfg.source);
  return 0;
}

/* Per-worker transform state, made by each worker for itself. */
static int worker_prepare(worker_t *w) {
  lade_loader_t *L = w->L;
  if (w->wstate_ok) return 0;
  if (L->xf->worker_init) {
    int rc = L->xf->worker_init(L->xf_state, &w->wstate);
    if (rc) return rc;
  }
  w->wstate_ok = true;
  return 0;
}

/* --------------------------------------------------------------- plan */

/* Assigns sequence number q to its slot and writes its sample indices.
 * Called unlocked by the one worker that set L->planning. */
static int plan_slot(lade_loader_t *L, slot_t *s, uint64_t q) {
  uint32_t B = lade__cursor_max_batch(L->cursor); /* batch_size, or more under solar's plan_imbalance */
  if (!s->data) {
    size_t cap = (size_t)B * L->shape.bytes;
    s->data = pool_alloc(L, cap);
    s->labels = malloc(B * sizeof *s->labels);
    s->indices = malloc(B * sizeof *s->indices);
    s->sizes = malloc(B * sizeof *s->sizes);
    s->taken = malloc(B);
    if (!s->data || !s->labels || !s->indices || !s->sizes || !s->taken)
      return lade__fail(LADE_ENOMEM, "out of memory for a batch buffer of %zu bytes", cap);
    s->cap = cap;
    pthread_mutex_lock(&L->mu);
    L->pool_bytes += cap;
    if (L->pool_bytes > L->peak_pool_bytes) L->peak_pool_bytes = L->pool_bytes;
    pthread_mutex_unlock(&L->mu);
  }
  int rc = lade__cursor_get(L->cursor, q, &s->cs);
  if (rc) return rc;
  uint32_t n = s->cs.n, valid = s->cs.valid;
  assert(n >= 1 && n <= B && valid <= n);
  memcpy(s->indices, s->cs.idx, n * sizeof *s->indices);
  for (uint32_t i = 0; i < n; i++) {
    int64_t idx = s->indices[i];
    s->labels[i] = L->src.labels ? L->src.labels[idx] : -1;
  }
  s->n = n;
  s->valid = valid;
  lade__fetch_step_planned(L->fetch, &s->cs);
  return 0;
}

/* -------------------------------------------------------------- samples */

/* Reads and transforms one sample into `out`. Returns 0 or an error with the
 * file named in lade_last_error(). */
static int load_sample(lade_loader_t *L, worker_t *w, uint64_t idx, uint64_t q, int32_t route, void *out,
                       uint32_t *payload, int *tier, int *note) {
  double t0 = lade__now();
  uint64_t epoch = q / L->steps;
  int rc;
  *tier = LADE__TIER_STORAGE;
  *note = LADE__ROUTE_MET;
  if (L->direct_payload) {
    rc = L->src_ops->read_payload(&L->src, idx, out, L->shape.bytes);
    double t1 = lade__now();
    WSTAT_ADD(w->t_read, t1 - t0);
    if (rc) return rc;
    WSTAT_ADD(w->bytes, L->shape.bytes);
    WSTAT_ADD(w->tier_samples[0], 1);
    WSTAT_ADD(w->tier_bytes[0], L->shape.bytes);
    *payload = (uint32_t)L->shape.bytes;
    return 0;
  }
  rc = lade__fetch_read(L->fetch, idx, q, route, &w->buf, tier, note);
  double t1 = lade__now();
  WSTAT_ADD(w->t_read, t1 - t0);
  if (rc) return rc;
  WSTAT_ADD(w->bytes, w->buf.len);
  WSTAT_ADD(w->tier_samples[*tier], 1);
  WSTAT_ADD(w->tier_bytes[*tier], w->buf.len);
  lade__rng_t rng;
  lade__rng_init(&rng, L->cfg.seed ^ lade__mix64(epoch + 1), idx, LADE__RNG_AUGMENT);
  lade__xform_ctx_t ctx = {.index = idx, .epoch = epoch, .rng = &rng};
  rc = L->xf->apply(L->xf_state, w->wstate, w->buf.data, w->buf.len, &ctx, out, payload);
  WSTAT_ADD(w->t_xform, lade__now() - t1);
  if (rc) {
    char name[LADE__PATH_MAX + 64];
    L->src_ops->describe(&L->src, idx, name, sizeof name);
    return lade__fail_prefix(rc, "%s (sample %llu): ", name, (unsigned long long)idx);
  }
  return 0;
}

static struct epoch_acc *epoch_acc(lade_loader_t *L, uint64_t e);

/* on_error=skip's bound on a failing store: counts one read's outcome and
 * returns an error (naming the storage, not a sample) once skip_max_run reads
 * in a row have failed. Unlocked (atomic). */
static int note_read(lade_loader_t *L, int rc) {
  if (!rc) {
    if (atomic_load_explicit(&L->fail_run, memory_order_relaxed)) atomic_store(&L->fail_run, 0);
    return 0;
  }
  uint32_t run = atomic_fetch_add(&L->fail_run, 1) + 1;
  if (L->cfg.skip_max_run && run >= L->cfg.skip_max_run)
    return lade__fail_prefix(rc,
                             "on_error=skip: %u reads in a row failed, so the storage is failing, not single samples "
                             "(setting skip_max_run); last: ",
                             run);
  return 0;
}

/* Counts a bad sample of `epoch`; an error once more than skip_max_fraction
 * of the epoch's samples were bad. Takes mu (rare path). */
static int note_bad_sample(lade_loader_t *L, uint64_t epoch) {
  pthread_mutex_lock(&L->mu);
  struct epoch_acc *a = epoch_acc(L, epoch);
  uint64_t bad = a ? ++a->bad : 0;
  pthread_mutex_unlock(&L->mu);
  double limit = L->cfg.skip_max_fraction * (double)(L->steps * L->cfg.batch_size);
  if (L->cfg.skip_max_fraction < 1 && (double)bad > limit)
    return lade__fail(LADE_EIO,
                      "on_error=skip: %llu samples of epoch %llu failed, more than %g of the epoch (setting "
                      "skip_max_fraction): the dataset or its storage is broken, not single samples",
                      (unsigned long long)bad, (unsigned long long)epoch, L->cfg.skip_max_fraction);
  return 0;
}

/* Processes sample i of slot s (unlocked). With on_error=skip, a failing
 * sample is replaced by one drawn deterministically from (seed, epoch, index),
 * unless so many fail that the storage, not the sample, must be broken. */
static void process_sample(lade_loader_t *L, worker_t *w, slot_t *s, uint32_t i, int *tier, int *note,
                           uint64_t *nbytes) {
  uint64_t epoch = s->seq / L->steps;
  uint64_t idx = (uint64_t)s->indices[i];
  uint8_t *out = s->data + (size_t)i * L->shape.bytes;
  uint32_t payload = 0;
  uint64_t t0 = L->trace ? (uint64_t)(lade__now() * 1e6) : 0;
  int rc = load_sample(L, w, idx, s->seq, s->cs.from[i], out, &payload, tier, note);
  if (rc && L->cfg.on_error == LADE__ONERR_SKIP) {
    int stop = note_read(L, rc);
    if (!stop) stop = note_bad_sample(L, epoch);
    lade__rng_t r;
    lade__rng_init(&r, L->cfg.seed ^ lade__mix64(epoch + 1), idx, LADE__RNG_SUBST);
    for (int t = 0; rc && !stop && t < MAX_SUBST_TRIES; t++) {
      uint64_t j = lade__rng_below(&r, L->src.count);
      rc = load_sample(L, w, j, s->seq, LADE__ROUTE_ANY, out, &payload, tier, note); /* a substitute: no route */
      stop = note_read(L, rc);
      if (!rc) {
        s->indices[i] = (int64_t)j;
        s->labels[i] = L->src.labels ? L->src.labels[j] : -1;
      }
    }
    if (stop) {
      rc = stop;
    } else if (!rc) {
      __atomic_fetch_add(&s->substituted, 1, __ATOMIC_RELAXED);
      WSTAT_ADD(w->substituted, 1);
    } else {
      lade__fail_prefix(rc, "on_error=skip found no valid substitute in %d tries; last: ", MAX_SUBST_TRIES);
    }
  } else if (L->cfg.on_error == LADE__ONERR_SKIP) {
    note_read(L, 0);
  }
  s->sizes[i] = payload;
  *nbytes = L->direct_payload ? L->shape.bytes : w->buf.len;
  if (rc) {
    pthread_mutex_lock(&L->mu);
    if (!s->err) {
      s->err = rc;
      lade__copy_error(s->errmsg, sizeof s->errmsg);
    }
    pthread_mutex_unlock(&L->mu);
  }
  WSTAT_ADD(w->samples, 1);
  if (L->trace)
    lade__trace_event(L->trace, "sample", w->id + 1, t0, (uint64_t)(lade__now() * 1e6) - t0, s->seq / L->steps, s->seq % L->steps,
                      (uint64_t)s->indices[i]);
}

/* ------------------------------------------------------------- workers */

static void fail_locked(lade_loader_t *L, int rc) {
  if (!L->fatal) {
    L->fatal = rc;
    lade__copy_error(L->fatal_msg, sizeof L->fatal_msg);
  }
  pthread_cond_broadcast(&L->cv_ready);
  pthread_cond_broadcast(&L->cv_work);
}

/* Claims a sample: the next one of the oldest FILLING slot; with a remote
 * source, the oldest one whose bytes are ready (so a slow request never
 * holds a worker while decodable samples wait). *pending tells whether
 * unclaimed samples exist that are not ready yet. Locked. */
static slot_t *claim_sample(lade_loader_t *L, uint32_t *out_i, bool *pending) {
  *pending = false;
  for (uint64_t q = L->next_deliver; q < L->next_sched; q++) {
    slot_t *s = slot_of(L, q);
    if (!s || s->state != SLOT_FILLING || s->claimed >= s->n) continue;
    while (s->first_free < s->n && s->taken[s->first_free]) s->first_free++;
    for (uint32_t i = s->first_free; i < s->n; i++) {
      if (s->taken[i]) continue;
      if (L->async && !lade__fetch_ready(L->fetch, (uint64_t)s->indices[i])) {
        *pending = true;
        continue;
      }
      s->taken[i] = 1;
      s->claimed++;
      *out_i = i;
      return s;
    }
  }
  return NULL;
}

/* The first unclaimed sample of the oldest FILLING slot, ready or not. Locked. */
static slot_t *claim_any(lade_loader_t *L, uint32_t *out_i) {
  for (uint64_t q = L->next_deliver; q < L->next_sched; q++) {
    slot_t *s = slot_of(L, q);
    if (!s || s->state != SLOT_FILLING || s->claimed >= s->n) continue;
    for (uint32_t i = s->first_free; i < s->n; i++)
      if (!s->taken[i]) {
        s->taken[i] = 1;
        s->claimed++;
        *out_i = i;
        return s;
      }
  }
  return NULL;
}

static void finish_slot_locked(lade_loader_t *L, slot_t *s) {
  if (s->stale) {
    s->state = SLOT_FREE;
    s->stale = false;
    pthread_cond_broadcast(&L->cv_work);
    return;
  }
  double t = lade__now();
  L->lat[L->nlat++ % LAT_RING] = t - s->t_sched;
  s->state = SLOT_READY;
  pthread_cond_broadcast(&L->cv_ready);
  if (L->trace)
    lade__trace_event(L->trace, "batch", 0, (uint64_t)(s->t_sched * 1e6), (uint64_t)((t - s->t_sched) * 1e6),
                      s->seq / L->steps, s->seq % L->steps, UINT64_MAX);
}

/* Routed plans: a step's evicts take effect at the end of the step (the
 * plan's semantics) and only once every earlier step is complete, since an
 * earlier step may still be reading from the cache what a later one evicts;
 * steps are filled concurrently and may complete out of order. So the slots
 * whose samples are all done are finished in step order from evict_q: each
 * one's evicts applied (unlocked: the slot stays FILLING, nobody else
 * touches it), then it becomes READY. Delivery is in step order anyway, so
 * holding a later step back costs no latency. Locked. */
static void finish_steps_in_order(lade_loader_t *L) {
  for (;;) {
    slot_t *s = L->evict_q < L->next_sched ? slot_of(L, L->evict_q) : NULL;
    if (!s || s->state != SLOT_FILLING || s->seq != L->evict_q || s->done < s->n || s->finishing) return;
    if (s->cs.nevict || s->cs.nadmit || s->cs.nsend) {
      s->finishing = true;
      pthread_mutex_unlock(&L->mu);
      lade__fetch_step_done(L->fetch, &s->cs);
      pthread_mutex_lock(&L->mu);
      s->finishing = false;
      if (s->stale) { /* a seek meanwhile (it reset evict_q): just free the slot */
        finish_slot_locked(L, s);
        return;
      }
    }
    L->evict_q++;
    finish_slot_locked(L, s);
  }
}

/* The buffers the pool may have now: prefetch + 1, or, while the caller
 * holds more than two batches, what it holds plus prefetch - 1 (at least
 * one) to prepare ahead. A `for` loop holds two at each next() (the batch
 * of the last iteration until the loop variable is rebound, and the one
 * just handed out), as it did when the pool was fixed at prefetch + 1.
 * Locked. */
static uint32_t pool_target(const lade_loader_t *L) {
  uint32_t ahead = LADE__MAX(L->cfg.prefetch, 2u) - 1;
  return LADE__MAX(L->window, L->held + ahead);
}

/* A FREE slot for the next batch to plan, or a new one when every buffer is
 * busy because the caller holds batches (never for slots a seek left
 * finishing: they come back by themselves). NULL when none can be had now.
 * Marks the slot PLANNING. Locked. */
static slot_t *take_free_slot_locked(lade_loader_t *L) {
  for (uint32_t i = 0; i < L->nslots; i++) {
    slot_t *s = L->slots[i];
    if (s->state == SLOT_FREE) {
      s->state = SLOT_PLANNING;
      return s;
    }
  }
  if (L->nslots >= pool_target(L)) return NULL;
  if (L->cfg.pool_max && L->nslots >= L->cfg.pool_max) return NULL;
  if (L->nslots == L->slots_cap) {
    uint32_t cap = L->slots_cap * 2;
    slot_t **p = realloc(L->slots, cap * sizeof *p);
    if (!p) return NULL; /* the caller's next release frees a slot */
    L->slots = p;
    L->slots_cap = cap;
  }
  slot_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->L = L;
  s->state = SLOT_PLANNING;
  L->slots[L->nslots++] = s;
  if (!L->warned_growth) {
    L->warned_growth = true;
    fprintf(stderr,
            "lade: warning: the caller holds %u batches, so the batch pool grows past prefetch+1 = %u buffers "
            "(%.1f MB each); memory now grows with every batch kept. Copy what you keep (tensor.clone()) or "
            "release it; the setting pool_max caps the pool.\n",
            L->held, L->window, (double)L->cfg.batch_size * (double)L->shape.bytes / 1e6);
  }
  return s;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  lade_loader_t *L = w->L;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    if (L->stop) break;
    if (L->fatal) {
      pthread_cond_wait(&L->cv_work, &L->mu);
      continue;
    }
    if (!w->wstate_ok) {
      pthread_mutex_unlock(&L->mu);
      int rc = worker_prepare(w);
      pthread_mutex_lock(&L->mu);
      if (rc) fail_locked(L, rc);
      continue;
    }
    /* plan the next batch when it is within the window, a buffer is free
     * and nobody else is planning */
    slot_t *fs = NULL;
    if (!L->planning && L->next_sched < L->total && L->next_sched < L->next_deliver + L->window &&
        (fs = take_free_slot_locked(L)) != NULL) {
      uint64_t q = L->next_sched;
      slot_t *s = fs;
      L->planning = true;
      s->state = SLOT_PLANNING;
      s->seq = q;
      pthread_mutex_unlock(&L->mu);
      int rc = plan_slot(L, s, q);
      pthread_mutex_lock(&L->mu);
      L->planning = false;
      if (rc) {
        s->state = SLOT_FREE;
        fail_locked(L, rc);
        continue;
      }
      if (L->next_sched != q) { /* a seek happened meanwhile: drop this plan */
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&L->cv_work);
        continue;
      }
      s->claimed = s->done = 0;
      s->first_free = 0;
      memset(s->taken, 0, s->n);
      memset(s->tier_samples, 0, sizeof s->tier_samples);
      memset(s->tier_bytes, 0, sizeof s->tier_bytes);
      s->plan_fallbacks = s->plan_peer = 0;
      s->err = 0;
      s->substituted = 0;
      s->stale = false;
      s->t_sched = lade__now();
      s->state = SLOT_FILLING;
      L->sched[q % L->window] = s;
      L->next_sched = q + 1;
      pthread_cond_broadcast(&L->cv_work);
      continue;
    }
    uint32_t i = 0;
    bool pending = false;
    slot_t *s = claim_sample(L, &i, &pending);
    if (!s && pending) {
      /* samples are in flight: wait for one to arrive (on_ready wakes us);
       * if none does for a while, read one anyway, so a source whose
       * readiness is wrong can slow the loader but never stall it */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 200 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      if (pthread_cond_timedwait(&L->cv_work, &L->mu, &ts) == ETIMEDOUT) s = claim_any(L, &i);
      if (!s) continue;
    }
    if (!s) {
      pthread_cond_wait(&L->cv_work, &L->mu);
      continue;
    }
    pthread_mutex_unlock(&L->mu);
    int tier = LADE__TIER_STORAGE, note = LADE__ROUTE_MET;
    uint64_t nbytes = 0;
    process_sample(L, w, s, i, &tier, &note, &nbytes);
    pthread_mutex_lock(&L->mu);
    s->tier_samples[tier]++;
    s->tier_bytes[tier] += nbytes;
    s->plan_fallbacks += note == LADE__ROUTE_FALLBACK;
    s->plan_peer += note == LADE__ROUTE_PEER_STORAGE;
    if (++s->done == s->n) {
      if (L->routed && !s->stale) finish_steps_in_order(L);
      else finish_slot_locked(L, s);
    }
  }
  pthread_mutex_unlock(&L->mu);
  if (w->wstate_ok && L->xf && L->xf->worker_free) L->xf->worker_free(L->xf_state, w->wstate);
  lade__buf_free(&w->buf);
  return NULL;
}

/* ----------------------------------------------------------------- API */

static uint32_t online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (uint32_t)n : 1;
}

int lade_loader_create(lade_loader_t **out, const lade_config_t *cfg) {
  if (!out || !cfg) return lade__fail(LADE_EINVAL, "lade_loader_create: NULL argument");
  *out = NULL;
  if (cfg->rank >= cfg->world_size)
    return lade__fail(LADE_EINVAL, "setting 'rank' (%u) must be below 'world_size' (%u)", cfg->rank, cfg->world_size);
  if (cfg->scale_min > cfg->scale_max || cfg->ratio_min > cfg->ratio_max)
    return lade__fail(LADE_EINVAL, "scale_min/ratio_min must not exceed scale_max/ratio_max");
  if (cfg->pool_max && cfg->pool_max < cfg->prefetch + 1)
    return lade__fail(LADE_EINVAL, "setting 'pool_max' (%u) must be 0 (no cap) or at least prefetch+1 (%u)",
                      cfg->pool_max, cfg->prefetch + 1);
  const lade__source_ops_t *ops = NULL;
  int rc = lade__source_select(cfg, &ops);
  if (rc) return rc;
  /* settings the chosen source would ignore are refused, not dropped */
#ifdef LADE_HAVE_CURL
  const lade__source_ops_t *s3 = &lade__source_s3;
#else
  const lade__source_ops_t *s3 = NULL; /* no s3 source in this build */
#endif
  if (cfg->label_file[0] && ops != s3)
    return lade__fail(LADE_EINVAL, "setting 'label_file' applies to s3:// sources only; the %s source %s takes its labels "
                      "from its class folders", ops->name, cfg->source);
  if ((cfg->npy_dtype[0] || cfg->npy_shape[0]) && ops != &lade__source_npy)
    return lade__fail(LADE_EINVAL, "settings 'npy_dtype'/'npy_shape' apply to .npy sources only; %s is read by the %s "
                      "source", cfg->source, ops->name);
  struct lade_config *def = strcmp(ops->name, "hdf5") ? malloc(sizeof *def) : NULL;
  if (def) lade__config_defaults(def);
  bool hdf5_set = def && (strcmp(cfg->hdf5_data, def->hdf5_data) || strcmp(cfg->hdf5_labels, def->hdf5_labels) ||
                          cfg->hdf5_gap != def->hdf5_gap || cfg->hdf5_direct != def->hdf5_direct ||
                          cfg->hdf5_chunk_cache != def->hdf5_chunk_cache);
  free(def);
  if (hdf5_set)
    return lade__fail(LADE_EINVAL, "settings 'hdf5_*' apply to HDF5 sources only; %s is read by the %s source",
                      cfg->source, ops->name);
#ifndef LADE_HAVE_JPEG
  if (cfg->transform == LADE__XF_IMAGENET_TRAIN || cfg->transform == LADE__XF_IMAGENET_EVAL ||
      (cfg->transform == LADE__XF_AUTO && ops == &lade__source_dir))
    return lade__fail(LADE_EUNSUPPORTED, "JPEG transforms need libjpeg-turbo, which this build lacks (LADE_WITH_JPEG)");
#endif
  lade_loader_t *L = calloc(1, sizeof *L);
  if (!L) return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  L->cfg = *cfg;
  L->src_ops = ops;
  pthread_once(&g_atfork_once, register_atfork);
  L->fork_gen = atomic_load_explicit(&g_fork_gen, memory_order_relaxed);
  L->pid = getpid();
  L->t_create = lade__now();
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv_work, NULL);
  pthread_cond_init(&L->cv_ready, NULL);
  L->window = cfg->prefetch + 1;
  L->slots_cap = L->window;
  L->slots = calloc(L->slots_cap, sizeof *L->slots);
  L->sched = calloc(L->window, sizeof *L->sched);
  L->nworkers = cfg->threads ? cfg->threads : online_cores();
  L->workers = calloc(L->nworkers, sizeof *L->workers);
  if (!L->slots || !L->sched || !L->workers) {
    free_all(L);
    return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  }
  for (uint32_t i = 0; i < L->window; i++) {
    slot_t *s = calloc(1, sizeof *s);
    if (!s) {
      free_all(L);
      return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
    }
    s->L = L;
    L->slots[L->nslots++] = s;
  }
  if (cfg->trace[0]) {
    rc = lade__trace_open(&L->trace, cfg->trace);
    if (rc) {
      free_all(L);
      return rc;
    }
  }
  /* list the source and plan now: a missing or empty dataset is an error of
   * create(), not of the first next() */
  lade__buf_t first = {0};
  rc = open_pipeline(L, &first);
  lade__buf_free(&first);
  if (rc) {
    free_all(L);
    return rc;
  }
  for (uint32_t i = 0; i < L->nworkers; i++) {
    worker_t *w = &L->workers[i];
    w->L = L;
    w->id = i;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      pthread_mutex_lock(&L->mu);
      L->stop = true;
      pthread_cond_broadcast(&L->cv_work);
      pthread_mutex_unlock(&L->mu);
      for (uint32_t j = 0; j < i; j++) pthread_join(L->workers[j].thread, NULL);
      free_all(L);
      return lade__fail(LADE_ETHREAD, "cannot start worker thread %u: %s", i, strerror(errno));
    }
    L->started++;
  }
  *out = L;
  return 0;
}

/* The per-epoch counters of epoch e, grown on demand. Locked. */
static struct epoch_acc *epoch_acc(lade_loader_t *L, uint64_t e) {
  if (e >= L->nep) {
    uint64_t n = LADE__MAX(e + 1, L->nep * 2);
    struct epoch_acc *p = realloc(L->ep, n * sizeof *p);
    if (!p) return NULL;
    memset(p + L->nep, 0, (n - L->nep) * sizeof *p);
    L->ep = p;
    L->nep = n;
  }
  return &L->ep[e];
}

/* Accounts a delivered batch to its epoch. Locked. */
static void account_batch(lade_loader_t *L, slot_t *s) {
  struct epoch_acc *a = epoch_acc(L, s->seq / L->steps);
  if (!a) return; /* no memory for counters: the batch is still delivered */
  if (!a->started) {
    a->started = true;
    if (s->seq / L->steps > 0 && L->src_ops->stats) L->src_ops->stats(&L->src, &a->at_start);
  }
  a->batches++;
  a->plan_fallbacks += s->plan_fallbacks;
  a->plan_peer += s->plan_peer;
  for (int t = 0; t < LADE__TIER_COUNT; t++) {
    a->samples[t] += s->tier_samples[t];
    a->bytes[t] += s->tier_bytes[t];
  }
}

/* A handle for the batch about to be handed out: the oldest released one
 * once HANDLE_QUARANTINE others were released after it, else a new one.
 * Locked. */
static handle_t *handle_get(lade_loader_t *L) {
  if (L->hfree_len > HANDLE_QUARANTINE) {
    handle_t *h = L->hfree[L->hfree_head];
    L->hfree_head = (L->hfree_head + 1) % L->handles_cap;
    L->hfree_len--;
    return h;
  }
  if (L->nhandles == L->handles_cap) {
    uint32_t cap = L->handles_cap ? 2 * L->handles_cap : 16;
    handle_t **a = realloc(L->handles, cap * sizeof *a);
    if (!a) return NULL;
    L->handles = a;
    handle_t **ring = malloc(cap * sizeof *ring);
    if (!ring) return NULL;
    for (uint32_t i = 0; i < L->hfree_len; i++) ring[i] = L->hfree[(L->hfree_head + i) % L->handles_cap];
    free(L->hfree);
    L->hfree = ring;
    L->hfree_head = 0;
    L->handles_cap = cap;
  }
  handle_t *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->L = L;
  L->handles[L->nhandles++] = h;
  return h;
}

static void fill_view(lade_loader_t *L, slot_t *s, lade_batch_t *v) {
  v->size = sizeof *v;
  v->data = s->data;
  v->nbytes = (size_t)s->n * L->shape.bytes;
  v->dtype = L->shape.dtype;
  v->ndim = L->shape.ndim + 1;
  v->shape[0] = s->n;
  for (int i = 0; i < L->shape.ndim; i++) v->shape[i + 1] = L->shape.dims[i];
  int64_t stride = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    v->strides[i] = stride;
    stride *= v->shape[i];
  }
  v->labels = s->labels;
  v->indices = s->indices;
  v->sizes = s->sizes;
  v->epoch = s->seq / L->steps;
  v->step = s->seq % L->steps;
  v->substituted = s->substituted;
  v->valid = s->valid;
  v->device = -1;
}

int lade_loader_next(lade_loader_t *L, lade_batch_t **out) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_next: NULL argument");
  *out = NULL;
  if (forked(L)) return fail_forked(L, "lade_loader_next");
  double t0 = lade__now();
  pthread_mutex_lock(&L->mu);
  int rc = 0;
  for (;;) {
    if (L->fatal) {
      rc = L->fatal;
      lade__set_error_text(L->fatal_msg);
      break;
    }
    {
      if (L->next_deliver >= L->total) break; /* end: *out stays NULL */
      slot_t *s = slot_of(L, L->next_deliver);
      if (s && s->state == SLOT_READY) {
        if (s->err) {
          L->fatal = s->err;
          snprintf(L->fatal_msg, sizeof L->fatal_msg, "%s", s->errmsg);
          pthread_cond_broadcast(&L->cv_work);
          continue;
        }
        double tc = lade__now();
        handle_t *h = handle_get(L);
        if (!h) {
          rc = lade__fail(LADE_ENOMEM, "lade_loader_next: out of memory for a batch handle");
          break;
        }
        account_batch(L, s);
        fill_view(L, s, &h->view);
        h->slot = s;
        h->seq = s->seq;
        h->held = true;
        s->state = SLOT_HELD;
        L->sched[L->next_deliver % L->window] = NULL;
        L->held++;
        L->next_deliver++;
        pthread_cond_broadcast(&L->cv_work); /* the window moved: one more batch may be planned */
        L->batches++;
        L->delivered_samples += s->n;
        if (L->batches == 1) L->t_first = lade__now() - L->t_create;
        L->t_collate += lade__now() - tc;
        *out = &h->view;
        break;
      }
      if (!s && L->cfg.pool_max && L->held >= L->cfg.pool_max) {
        rc = lade__fail(LADE_ESTATE,
                        "the caller holds %u batches, as many as the setting pool_max (%u) allows: release a batch "
                        "(or copy what you keep, e.g. tensor.clone()) before asking for the next one",
                        L->held, L->cfg.pool_max);
        break;
      }
    }
    /* an interrupt wakes the next() calls waiting when it is made, each once */
    uint64_t gen = L->intr_gen;
    L->waiting++;
    pthread_cond_wait(&L->cv_ready, &L->mu);
    L->waiting--;
    if (L->intr_gen != gen) {
      rc = lade__fail(LADE_EINTR, "lade_loader_next: interrupted by lade_loader_interrupt()");
      break;
    }
  }
  double waited = lade__now() - t0;
  L->t_wait += waited;
  uint64_t consumed = L->next_deliver * L->cfg.batch_size;
  if (*out) {
    struct epoch_acc *a = epoch_acc(L, (*out)->epoch);
    if (a) a->wait += waited;
  }
  pthread_mutex_unlock(&L->mu);
  if (*out) lade__fetch_consumed(L->fetch, consumed);
  if (L->trace && *out)
    lade__trace_event(L->trace, "wait", LADE__TRACE_CONSUMER, (uint64_t)(t0 * 1e6), (uint64_t)(waited * 1e6),
                      (*out)->epoch, (*out)->step, UINT64_MAX);
  return rc;
}

void lade_batch_release(lade_batch_t *batch) {
  if (!batch) return;
  handle_t *h = (handle_t *)batch;
  lade_loader_t *L = h->L; /* handles live as long as their loader */
  if (forked(L)) return;    /* the parent's pool: not ours to touch */
  pthread_mutex_lock(&L->mu);
  if (!h->held) {
    /* a second release: the batch's buffer may hold a later batch now, so
     * nothing is touched */
    unsigned long long e = L->steps ? h->seq / L->steps : 0, st = L->steps ? h->seq % L->steps : 0;
    pthread_mutex_unlock(&L->mu);
    fprintf(stderr,
            "lade: lade_batch_release() of the batch of epoch %llu, step %llu, which was already released: "
            "ignored (a batch is released exactly once; this is a bug in the caller)\n",
            e, st);
    return;
  }
  slot_t *s = h->slot;
  h->held = false;
  h->slot = NULL;
  L->hfree[(L->hfree_head + L->hfree_len) % L->handles_cap] = h;
  L->hfree_len++;
  assert(s->state == SLOT_HELD);
  s->state = SLOT_FREE;
  L->held--;
  bool last = L->destroyed && L->held == 0;
  slot_t *drop = NULL;
  if (!L->destroyed && L->nslots > pool_target(L)) {
    /* the pool grew while the caller held batches: give this buffer back */
    for (uint32_t i = 0; i < L->nslots; i++)
      if (L->slots[i] == s) {
        L->slots[i] = L->slots[--L->nslots];
        drop = s;
        L->pool_bytes -= s->cap;
        break;
      }
  }
  pthread_cond_broadcast(&L->cv_work);
  pthread_cond_broadcast(&L->cv_ready);
  pthread_mutex_unlock(&L->mu);
  if (drop) slot_free(L, drop);
  if (last) free_all(L);
}

int lade_loader_seek(lade_loader_t *L, uint64_t epoch, uint64_t step) {
  if (!L) return lade__fail(LADE_EINVAL, "lade_loader_seek: NULL loader");
  if (forked(L)) return fail_forked(L, "lade_loader_seek");
  pthread_mutex_lock(&L->mu);
  int rc = 0;
  /* (epochs, 0) is the end; with zero steps per epoch every (e, 0) is */
  bool at_end = step == 0 && (epoch == L->cfg.epochs || (L->steps == 0 && epoch <= L->cfg.epochs));
  if (!at_end && (epoch >= L->cfg.epochs || step >= L->steps)) {
    rc = lade__fail(LADE_ERANGE, "seek to (epoch %llu, step %llu) is past the end (%llu epochs of %llu steps)",
                    (unsigned long long)epoch, (unsigned long long)step, (unsigned long long)L->cfg.epochs,
                    (unsigned long long)L->steps);
  } else if (!rc) {
    uint64_t q = epoch * L->steps + step;
    for (uint32_t i = 0; i < L->nslots; i++) {
      slot_t *s = L->slots[i];
      if (s->state == SLOT_READY) {
        s->state = SLOT_FREE;
      } else if (s->state == SLOT_FILLING) {
        /* claim nothing more; samples in flight finish, then the slot frees */
        s->n = s->claimed;
        if (s->done == s->claimed && !s->finishing) s->state = SLOT_FREE;
        else s->stale = true;
      }
    }
    memset(L->sched, 0, L->window * sizeof *L->sched);
    L->next_sched = L->next_deliver = L->evict_q = q;
    pthread_cond_broadcast(&L->cv_work);
  }
  pthread_mutex_unlock(&L->mu);
  if (!rc) lade__fetch_seek(L->fetch, (epoch * L->steps + step) * L->cfg.batch_size);
  return rc;
}

int lade_loader_plan_settings(lade_loader_t *L, lade_plan_settings_t *out, size_t out_size, uint32_t *rank) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_plan_settings: NULL argument");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_loader_plan_settings: out_size is %zu; pass sizeof(lade_plan_settings_t)",
                      out_size);
  if (forked(L)) return fail_forked(L, "lade_loader_plan_settings");
  lade_plan_settings_t s;
  lade__cursor_settings(L->cursor, &s);
  lade__struct_out(out, out_size, &s, sizeof s);
  if (rank) *rank = L->cfg.rank;
  return 0;
}

int lade_loader_tell(const lade_loader_t *cL, uint64_t *epoch, uint64_t *step) {
  lade_loader_t *L = (lade_loader_t *)cL;
  if (!L) return lade__fail(LADE_EINVAL, "lade_loader_tell: NULL loader");
  if (forked(L)) return fail_forked(L, "lade_loader_tell");
  pthread_mutex_lock(&L->mu);
  if (epoch) *epoch = L->steps ? L->next_deliver / L->steps : L->cfg.epochs;
  if (step) *step = L->steps ? L->next_deliver % L->steps : 0;
  pthread_mutex_unlock(&L->mu);
  return 0;
}

int lade_loader_info(lade_loader_t *L, uint64_t *samples, uint64_t *steps, uint64_t *epochs) {
  if (!L) return lade__fail(LADE_EINVAL, "lade_loader_info: NULL loader");
  if (forked(L)) return fail_forked(L, "lade_loader_info");
  if (samples) *samples = L->src.count;
  if (steps) *steps = L->steps;
  if (epochs) *epochs = L->cfg.epochs;
  return 0;
}

int lade_loader_interrupt(lade_loader_t *L) {
  if (!L || forked(L)) return 0;
  pthread_mutex_lock(&L->mu);
  int n = (int)L->waiting;
  if (n) {
    L->intr_gen++;
    pthread_cond_broadcast(&L->cv_ready);
  }
  pthread_mutex_unlock(&L->mu);
  return n;
}

void lade_loader_destroy(lade_loader_t *L) {
  if (!L) return;
  /* in a forked child the workers do not exist and the parent's threads may
   * have held mu at the fork: leave the copy alone (the process's exit frees it) */
  if (forked(L)) return;
  pthread_mutex_lock(&L->mu);
  L->stop = true;
  pthread_cond_broadcast(&L->cv_work);
  pthread_cond_broadcast(&L->cv_ready);
  pthread_mutex_unlock(&L->mu);
  for (uint32_t i = 0; i < L->started; i++) pthread_join(L->workers[i].thread, NULL);
  pthread_mutex_lock(&L->mu);
  L->destroyed = true;
  bool last = L->held == 0;
  pthread_mutex_unlock(&L->mu);
  if (last) free_all(L);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int fill_stats(lade_loader_t *L, lade_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (forked(L)) return fail_forked(L, "lade_loader_stats");
  double lat[LAT_RING];
  pthread_mutex_lock(&L->mu);
  out->batches = L->batches;
  out->samples = L->delivered_samples;
  for (uint32_t i = 0; i < L->started; i++) {
    worker_t *w = &L->workers[i];
    out->stage_seconds[LADE_STAGE_READ] += WSTAT(w->t_read);
    out->stage_seconds[LADE_STAGE_TRANSFORM] += WSTAT(w->t_xform);
    out->bytes_read += WSTAT(w->bytes);
    for (int t = 0; t < LADE__TIER_COUNT; t++) {
      out->samples_by_source[t] += WSTAT(w->tier_samples[t]);
      out->bytes_by_source[t] += WSTAT(w->tier_bytes[t]);
    }
    out->substituted += WSTAT(w->substituted);
  }
  out->stage_seconds[LADE_STAGE_COLLATE] = L->t_collate;
  out->stage_seconds[LADE_STAGE_WAIT] = L->t_wait;
  out->first_batch_seconds = L->t_first;
  out->peak_pool_bytes = L->peak_pool_bytes;
  out->threads = L->started;
  uint64_t n = L->nlat < LAT_RING ? L->nlat : LAT_RING;
  memcpy(lat, L->lat, n * sizeof *lat);
  lade__fetch_t *f = L->fetch;
  pthread_mutex_unlock(&L->mu);
  if (f) {
    lade__fetch_stats_t fs;
    lade__fetch_stats(f, &fs);
    out->concurrency = fs.src.concurrency;
    out->get_requests = fs.src.get_requests;
    out->list_requests = fs.src.list_requests;
    out->retries = fs.src.retries;
    out->remote_bytes = fs.src.bytes;
    out->cache_misses = fs.misses;
    out->prefetched = fs.prefetched;
    out->cache_corrupt = fs.corrupt;
    out->fetch_size = fs.fetch_size;
    out->prefetch_threshold = fs.threshold;
    out->plan_cache_hits = fs.plan_hits;
    out->plan_fallbacks = fs.plan_fallbacks;
    out->plan_peer_storage = fs.plan_peer;
    out->peer_messages_sent = fs.dist.sent;
    out->peer_bytes_sent = fs.dist.sent_bytes;
    out->peer_served_from_storage = fs.served_from_storage;
  }
  out->plan = L->cfg.plan;
  if (n) {
    qsort(lat, n, sizeof *lat, cmp_double);
    out->batch_latency_p50 = lat[(n - 1) * 50 / 100];
    out->batch_latency_p90 = lat[(n - 1) * 90 / 100];
    out->batch_latency_p99 = lat[(n - 1) * 99 / 100];
    out->batch_latency_max = lat[n - 1];
  }
  return 0;
}

static int fill_epoch_stats(lade_loader_t *L, uint64_t epoch, lade_epoch_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (forked(L)) return fail_forked(L, "lade_loader_epoch_stats");
  out->epoch = epoch;
  pthread_mutex_lock(&L->mu);
  if (epoch >= L->nep || !L->ep[epoch].started) {
    pthread_mutex_unlock(&L->mu);
    return lade__fail(LADE_ERANGE, "epoch %llu has not started", (unsigned long long)epoch);
  }
  struct epoch_acc a = L->ep[epoch];
  bool have_next = epoch + 1 < L->nep && L->ep[epoch + 1].started;
  lade__source_stats_t end = have_next ? L->ep[epoch + 1].at_start : (lade__source_stats_t){0};
  pthread_mutex_unlock(&L->mu);
  if (!have_next && L->src_ops->stats) L->src_ops->stats(&L->src, &end);
  out->batches = a.batches;
  uint64_t total = 0;
  for (int t = 0; t < LADE__TIER_COUNT; t++) {
    out->samples_by_source[t] = a.samples[t];
    out->bytes_by_source[t] = a.bytes[t];
    total += a.samples[t];
  }
  out->samples = total;
  out->miss_rate = total && lade__fetch_cached(L->fetch) ? (double)a.samples[LADE__TIER_STORAGE] / (double)total : 0;
  out->wait_seconds = a.wait;
  out->get_requests = end.get_requests - a.at_start.get_requests;
  out->list_requests = end.list_requests - a.at_start.list_requests;
  out->remote_bytes = end.bytes - a.at_start.bytes;
  out->plan_fallbacks = a.plan_fallbacks;
  out->plan_peer_storage = a.plan_peer;
  return 0;
}

/* Copies a stats struct of this library (size `have`) into the caller's of
 * `want` bytes: a prefix when the caller's header is older, zeros for the
 * fields an older library does not know when it is newer. */
static void copy_sized(void *dst, size_t want, const void *src, size_t have) {
  memcpy(dst, src, LADE__MIN(want, have));
  if (want > have) memset((char *)dst + have, 0, want - have);
}

int lade_loader_stats(lade_loader_t *L, lade_stats_t *out, size_t out_size) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_stats: NULL argument");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_loader_stats: out_size is %zu; pass sizeof(lade_stats_t)", out_size);
  lade_stats_t s;
  int rc = fill_stats(L, &s);
  copy_sized(out, out_size, &s, sizeof s);
  return rc;
}

int lade_loader_epoch_stats(lade_loader_t *L, uint64_t epoch, lade_epoch_stats_t *out, size_t out_size) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_epoch_stats: NULL argument");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_loader_epoch_stats: out_size is %zu; pass sizeof(lade_epoch_stats_t)",
                      out_size);
  lade_epoch_stats_t s;
  int rc = fill_epoch_stats(L, epoch, &s);
  copy_sized(out, out_size, &s, sizeof s);
  return rc;
}

/* ------------------------------------------------- classes and samples */

/* The listing is read-only once the source is open: after
 * lade_loader_info() has waited for it (under mu, which orders the opener's
 * writes before these reads), the source is read without the lock. */
static int listed(lade_loader_t *L, const char *fn) {
  if (!L) return lade__fail(LADE_EINVAL, "%s: NULL loader", fn);
  return lade_loader_info(L, NULL, NULL, NULL);
}

int lade_loader_classes(lade_loader_t *L, uint32_t *count) {
  int rc = listed(L, "lade_loader_classes");
  if (rc) return rc;
  if (count) *count = L->src.classes;
  return 0;
}

int lade_loader_class_name(lade_loader_t *L, uint32_t index, const char **name) {
  int rc = listed(L, "lade_loader_class_name");
  if (rc) return rc;
  if (index >= L->src.classes)
    return lade__fail(LADE_ERANGE, "class %u of a dataset with %u classes", index, L->src.classes);
  if (!L->src.class_names)
    return lade__fail(LADE_EUNSUPPORTED, "the %s source of %s does not name its classes (labels 0..%u)",
                      L->src_ops->name, L->cfg.source, L->src.classes - 1);
  if (name) *name = L->src.class_names[index];
  return 0;
}

int lade_loader_sample_bytes(lade_loader_t *L, uint64_t index, uint64_t *bytes) {
  int rc = listed(L, "lade_loader_sample_bytes");
  if (rc) return rc;
  if (!bytes) return lade__fail(LADE_EINVAL, "lade_loader_sample_bytes: NULL bytes");
  if (index >= L->src.count)
    return lade__fail(LADE_ERANGE, "sample %llu of a dataset with %llu samples", (unsigned long long)index,
                      (unsigned long long)L->src.count);
  if (!L->src.sizes)
    return lade__fail(LADE_EUNSUPPORTED, "the %s source lists no sample sizes", L->src_ops->name);
  *bytes = L->src.sizes[index];
  return 0;
}

int lade_loader_sample(lade_loader_t *L, uint64_t index, char *path, size_t size, int64_t *label) {
  int rc = listed(L, "lade_loader_sample");
  if (rc) return rc;
  if (index >= L->src.count)
    return lade__fail(LADE_ERANGE, "sample %llu of a dataset with %llu samples", (unsigned long long)index,
                      (unsigned long long)L->src.count);
  if (label) *label = L->src.labels ? L->src.labels[index] : -1;
  if (!path) return 0;
  char full[2 * LADE__PATH_MAX + 64];
  L->src_ops->describe(&L->src, index, full, sizeof full);
  size_t n = strlen(full);
  if (n >= size)
    return lade__fail(LADE_ERANGE, "the path of sample %llu needs %zu bytes, the buffer has %zu",
                      (unsigned long long)index, n + 1, size);
  memcpy(path, full, n + 1);
  return 0;
}
