/*
 * engine.c - the pipeline: plan -> fetch -> transform -> collate -> deliver.
 *
 * Design. The batches of global sequence numbers q (= epoch * steps + step)
 * in [next_deliver, next_deliver + window), window = prefetch + 1, are
 * prepared ahead; the one of q is found at sched[q % window], so delivery in
 * plan order is a matter of waiting on one slot. A slot (a batch buffer)
 * cycles FREE -> PLANNING -> FILLING -> READY -> HELD (by the caller) -> FREE.
 * The slots are the batch pool's (pool.h): it starts at `window` slots and
 * grows only while the caller holds more than two batches, and shrinks again
 * as they are released: a caller that keeps batches (torch.cat of a whole
 * epoch) costs exactly the memory it keeps, and never deadlocks the loader. Worker
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
 * tensors). lade_loader_destroy() stops and joins the workers and closes
 * every stage they used (source files, fetch stage and disk cache lock,
 * transport: lade__pipeline_close), so a reopened cache_dir is free at
 * once; the slots and the loader struct are freed by whoever drops the last
 * reference (destroy or the last lade_batch_release).
 * The caller holds the pool's handles, not slots (pool.h: why a second
 * release, or a stale handle, touches nothing).
 *
 * Interrupts wake the next() calls waiting at that moment (counted in
 * `waiting`, woken through intr_gen); with none waiting nothing happens.
 * fork(): a pthread_atfork child handler bumps fork_gen; a loader created
 * under an older value is the parent's, and every entry point returns before
 * touching its lock or threads.
 *
 * State. struct lade_loader is this file's alone (the run: lock, slots,
 * workers, counters); it composes the opened pipeline (pipeline.h, a
 * record written before the workers start and read-only while they run),
 * the batch pool (pool.h), the run's counters (counts.h) and the per-epoch
 * ones (epochs.h). engine_stats.c reads a loader only through engine.h.
 *
 * Lock: `mu` guards the pool (pool.h), every slot's state/claim/done counters,
 * sched, the cursors (next_sched, next_deliver), flags and the latency ring. Per-worker stats
 * are written by their worker and read by lade_loader_stats() as relaxed
 * atomics (WSTAT_ADD/WSTAT). The trace file has its own lock,
 * taken after `mu` is released (never both). Lock order: mu, then trace.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/counts.h"
#include "engine/devring.h"
#include "engine/engine.h"
#include "engine/epochs.h"
#include "engine/pool.h"

#define MAX_SUBST_TRIES 64

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
  lade__pipeline_t p; /* the opened stages (pipeline.h): written before the workers start, read-only after */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* workers wait here for claimable work */
  pthread_cond_t cv_ready; /* the consumer waits here */

  uint64_t evict_q; /* routed: the next step to finish */
  bool planning;
  bool stop;
  uint32_t waiting;   /* next() calls blocked on cv_ready now */
  uint64_t intr_gen;  /* bumped by each lade_loader_interrupt() that found a waiter */
  unsigned fork_gen;  /* fork_gen when created: differs in a forked child */
  pid_t pid;
  int fatal;
  char fatal_msg[1200];

  lade__pool_t pool; /* the batch buffers and the caller's handles (pool.h), under mu */
  lade__devring_t *ring; /* device=cuda: the batches' device copies (devring.h); lives as long as the pool */
  uint32_t device_ahead; /* device_prefetch: ready batches copied ahead of the one handed out */
  uint32_t window;   /* prefetch + 1 batches prepared ahead */
  slot_t **sched;    /* window entries: the slot of scheduled, undelivered q at q % window */
  uint64_t next_sched, next_deliver;
  bool destroyed;

  worker_t *workers;
  uint32_t nworkers, started;

  lade__counts_t counts; /* the run's counters (counts.h), guarded by mu */
  _Atomic uint32_t fail_run; /* on_error=skip: failed reads in a row, any worker (a success resets it) */
  lade__epochs_t epochs; /* per-epoch counters (epochs.h), guarded by mu */
};

/* Bumped in the child of every fork() (pthread_atfork): a loader made under
 * an older value belongs to a parent process; its threads and locks do not
 * exist here, so every call on it in the child returns at once. */
static atomic_uint fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { atomic_fetch_add_explicit(&fork_gen, 1, memory_order_relaxed); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static bool forked(const lade_loader_t *L) {
  return L->fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed);
}

static int fail_forked(const lade_loader_t *L, const char *fn) {
  return lade__fail(LADE_ESTATE,
                    "%s: this loader was created in process %d, and this process (%d) is a fork() of it; a loader "
                    "cannot be used across fork(): create one in this process (its threads setting parallelises "
                    "loading)",
                    fn, (int)L->pid, (int)getpid());
}

int lade__engine_pipeline(const lade_loader_t *L, const char *fn, lade__pipeline_t **P) {
  if (forked(L)) return fail_forked(L, fn);
  *P = (lade__pipeline_t *)&L->p;
  return 0;
}

/* The slot scheduled for q, or NULL. Locked. */
static inline slot_t *slot_of(lade_loader_t *L, uint64_t q) {
  slot_t *s = L->sched[q % L->window];
  return s && s->seq == q && s->state != SLOT_FREE && s->state != SLOT_HELD ? s : NULL;
}

/* Per-worker transform state, made by each worker for itself. */
static int worker_prepare(worker_t *w) {
  lade_loader_t *L = w->L;
  if (w->wstate_ok) return 0;
  if (L->p.xf->worker_init) {
    int rc = L->p.xf->worker_init(L->p.xf_state, &w->wstate);
    if (rc) return rc;
  }
  w->wstate_ok = true;
  return 0;
}

/* --------------------------------------------------------------- plan */

/* Assigns sequence number q to its slot and writes its sample indices.
 * Called unlocked by the one worker that set L->planning. */
static int plan_slot(lade_loader_t *L, slot_t *s, uint64_t q) {
  uint32_t B = lade__cursor_max_batch(L->p.cursor); /* batch_size, or more under solar's plan_imbalance */
  size_t added = lade__pool_buffers(&L->pool, s, B, L->p.shape.bytes);
  if (added == SIZE_MAX) return LADE_ENOMEM;
  if (added) {
    pthread_mutex_lock(&L->mu);
    lade__pool_account(&L->pool, added);
    pthread_mutex_unlock(&L->mu);
  }
  int rc = lade__cursor_get(L->p.cursor, q, &s->cs);
  if (rc) return rc;
  uint32_t n = s->cs.n, valid = s->cs.valid;
  assert(n >= 1 && n <= B && valid <= n);
  memcpy(s->indices, s->cs.idx, n * sizeof *s->indices);
  for (uint32_t i = 0; i < n; i++) {
    int64_t idx = s->indices[i];
    s->labels[i] = L->p.src.labels ? L->p.src.labels[idx] : -1;
  }
  s->n = n;
  s->valid = valid;
  lade__fetch_step_planned(L->p.fetch, &s->cs);
  return 0;
}

/* -------------------------------------------------------------- samples */

/* Reads and transforms one sample into `out`. Returns 0 or an error with the
 * file named in lade_last_error(). */
static int load_sample(lade_loader_t *L, worker_t *w, uint64_t idx, uint64_t q, int32_t route, void *out,
                       uint32_t *payload, int *tier, int *note) {
  double t0 = lade__now();
  uint64_t epoch = q / L->p.steps;
  int rc;
  *tier = LADE__TIER_STORAGE;
  *note = LADE__ROUTE_MET;
  if (L->p.direct_payload) {
    rc = L->p.src_ops->read_payload(&L->p.src, idx, out, L->p.shape.bytes);
    double t1 = lade__now();
    WSTAT_ADD(w->t_read, t1 - t0);
    if (rc) return rc;
    WSTAT_ADD(w->bytes, L->p.shape.bytes);
    WSTAT_ADD(w->tier_samples[0], 1);
    WSTAT_ADD(w->tier_bytes[0], L->p.shape.bytes);
    *payload = (uint32_t)L->p.shape.bytes;
    return 0;
  }
  /* in the node cache: transformed straight from the shared segment into the
   * slot (one copy); if another rank reused those bytes meanwhile, read again */
  lade__fetch_view_t v;
  bool viewed = lade__fetch_view(L->p.fetch, idx, q, route, &v) == 0;
  if (!viewed) rc = lade__fetch_read(L->p.fetch, idx, q, route, &w->buf, tier, note);
  else rc = 0, *tier = LADE__TIER_MEM;
  double t1 = lade__now();
  WSTAT_ADD(w->t_read, t1 - t0);
  if (rc) return rc;
  const uint8_t *bytes = viewed ? v.data : w->buf.data;
  size_t len = viewed ? v.len : w->buf.len;
  lade__rng_t rng;
  lade__rng_init(&rng, L->p.cfg.seed ^ lade__mix64(epoch + 1), idx, LADE__RNG_AUGMENT);
  lade__xform_ctx_t ctx = {.index = idx, .epoch = epoch, .rng = &rng};
  rc = L->p.xf->apply(L->p.xf_state, w->wstate, bytes, len, &ctx, out, payload);
  if (viewed && !lade__fetch_view_done(L->p.fetch, idx, &v)) {
    rc = lade__fetch_read(L->p.fetch, idx, q, route, &w->buf, tier, note);
    if (rc) return rc;
    bytes = w->buf.data;
    len = w->buf.len;
    lade__rng_init(&rng, L->p.cfg.seed ^ lade__mix64(epoch + 1), idx, LADE__RNG_AUGMENT);
    rc = L->p.xf->apply(L->p.xf_state, w->wstate, bytes, len, &ctx, out, payload);
  }
  WSTAT_ADD(w->t_xform, lade__now() - t1);
  WSTAT_ADD(w->bytes, len);
  WSTAT_ADD(w->tier_samples[*tier], 1);
  WSTAT_ADD(w->tier_bytes[*tier], len);
  if (rc) {
    char name[LADE__PATH_MAX + 64];
    L->p.src_ops->describe(&L->p.src, idx, name, sizeof name);
    return lade__fail_prefix(rc, "%s (sample %llu): ", name, (unsigned long long)idx);
  }
  return 0;
}


/* on_error=skip's bound on a failing store: counts one read's outcome and
 * returns an error (naming the storage, not a sample) once skip_max_run reads
 * in a row have failed. Unlocked (atomic). */
static int note_read(lade_loader_t *L, int rc) {
  if (!rc) {
    if (atomic_load_explicit(&L->fail_run, memory_order_relaxed)) atomic_store(&L->fail_run, 0);
    return 0;
  }
  uint32_t run = atomic_fetch_add(&L->fail_run, 1) + 1;
  if (L->p.cfg.skip_max_run && run >= L->p.cfg.skip_max_run)
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
  struct epoch_acc *a = lade__epochs_acc(&L->epochs, epoch);
  uint64_t bad = a ? ++a->bad : 0;
  pthread_mutex_unlock(&L->mu);
  double limit = L->p.cfg.skip_max_fraction * (double)(L->p.steps * L->p.cfg.batch_size);
  if (L->p.cfg.skip_max_fraction < 1 && (double)bad > limit)
    return lade__fail(LADE_EIO,
                      "on_error=skip: %llu samples of epoch %llu failed, more than %g of the epoch (setting "
                      "skip_max_fraction): the dataset or its storage is broken, not single samples",
                      (unsigned long long)bad, (unsigned long long)epoch, L->p.cfg.skip_max_fraction);
  return 0;
}

/* Processes sample i of slot s (unlocked). With on_error=skip, a failing
 * sample is replaced by one drawn deterministically from (seed, epoch, index),
 * unless so many fail that the storage, not the sample, must be broken. */
static void process_sample(lade_loader_t *L, worker_t *w, slot_t *s, uint32_t i, int *tier, int *note,
                           uint64_t *nbytes) {
  uint64_t epoch = s->seq / L->p.steps;
  uint64_t idx = (uint64_t)s->indices[i];
  uint8_t *out = s->data + (size_t)i * L->p.shape.bytes;
  uint32_t payload = 0;
  uint64_t t0 = L->p.trace ? (uint64_t)(lade__now() * 1e6) : 0;
  int rc = load_sample(L, w, idx, s->seq, s->cs.from[i], out, &payload, tier, note);
  if (rc && L->p.cfg.on_error == LADE__ONERR_SKIP) {
    int stop = note_read(L, rc);
    if (!stop) stop = note_bad_sample(L, epoch);
    lade__rng_t r;
    lade__rng_init(&r, L->p.cfg.seed ^ lade__mix64(epoch + 1), idx, LADE__RNG_SUBST);
    for (int t = 0; rc && !stop && t < MAX_SUBST_TRIES; t++) {
      uint64_t j = lade__rng_below(&r, L->p.src.count);
      rc = load_sample(L, w, j, s->seq, LADE__ROUTE_ANY, out, &payload, tier, note); /* a substitute: no route */
      stop = note_read(L, rc);
      if (!rc) {
        s->indices[i] = (int64_t)j;
        s->labels[i] = L->p.src.labels ? L->p.src.labels[j] : -1;
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
  } else if (L->p.cfg.on_error == LADE__ONERR_SKIP) {
    note_read(L, 0);
  }
  s->sizes[i] = payload;
  *nbytes = L->p.direct_payload ? L->p.shape.bytes : w->buf.len;
  if (rc) {
    pthread_mutex_lock(&L->mu);
    if (!s->err) {
      s->err = rc;
      lade__copy_error(s->errmsg, sizeof s->errmsg);
    }
    pthread_mutex_unlock(&L->mu);
  }
  WSTAT_ADD(w->samples, 1);
  if (L->p.trace)
    lade__trace_event(L->p.trace, "sample", w->id + 1, t0, (uint64_t)(lade__now() * 1e6) - t0, s->seq / L->p.steps, s->seq % L->p.steps,
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
      if (L->p.async && !lade__fetch_ready(L->p.fetch, (uint64_t)s->indices[i])) {
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
  lade__counts_latency(&L->counts, t - s->t_sched);
  s->state = SLOT_READY;
  pthread_cond_broadcast(&L->cv_ready);
  if (L->p.trace)
    lade__trace_event(L->p.trace, "batch", 0, (uint64_t)(s->t_sched * 1e6), (uint64_t)((t - s->t_sched) * 1e6),
                      s->seq / L->p.steps, s->seq % L->p.steps, UINT64_MAX);
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
    if (s->cs.nevict || s->cs.nadmit || s->cs.nsend || s->cs.nmove || lade__fetch_every_step(L->p.fetch)) {
      s->finishing = true;
      pthread_mutex_unlock(&L->mu);
      int rc = lade__fetch_step_done(L->p.fetch, &s->cs);
      pthread_mutex_lock(&L->mu);
      if (rc) fail_locked(L, rc);
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
    if (!L->planning && L->next_sched < L->p.total && L->next_sched < L->next_deliver + L->window &&
        (fs = lade__pool_take(&L->pool, (size_t)L->p.cfg.batch_size * L->p.shape.bytes)) != NULL) {
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
      s->peer_node = s->peer_node_bytes = s->node_reads = 0;
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
    if (tier == LADE__TIER_PEER && L->p.res.cursor.plan.ranks_per_node > 1 &&
        lade_plan_route_class(s->cs.from[i], L->p.res.cursor.rank, L->p.res.cursor.plan.ranks_per_node) ==
            LADE_ROUTE_NODE) { /* an intra-node handoff (docs/plan.md, Nodes) */
      s->peer_node++;
      s->peer_node_bytes += nbytes;
      lade__counts_peer_node(&L->counts, nbytes);
    } else if (tier == LADE__TIER_MEM && L->p.res.fetch.node_plan && s->cs.from[i] >= 0) {
      s->node_reads++; /* a handoff read from the node's cache (docs/plan.md, Nodes) */
      lade__counts_node_read(&L->counts);
    }
    if (++s->done == s->n) {
      if (L->p.routed && !s->stale) finish_steps_in_order(L);
      else finish_slot_locked(L, s);
    }
  }
  pthread_mutex_unlock(&L->mu);
  if (w->wstate_ok && L->p.xf && L->p.xf->worker_free) L->p.xf->worker_free(L->p.xf_state, w->wstate);
  lade__buf_free(&w->buf);
  return NULL;
}

/* Frees everything: the pipeline (if still open), the pool and the loader. */
static void free_all(lade_loader_t *L) {
  lade__pipeline_close(&L->p);
  for (uint32_t i = 0; L->ring && i < L->pool.n; i++) {
    lade__devring_back(L->ring, L->pool.slots[i]->dbuf);
    L->pool.slots[i]->dbuf = NULL;
  }
  lade__devring_close(L->ring);
  lade__pool_close(&L->pool);
  free(L->sched);
  lade__epochs_free(&L->epochs);
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv_work);
  pthread_cond_destroy(&L->cv_ready);
  free(L->workers);
  free(L);
}

/* The source's on_ready: bytes of a submitted read arrived. */
static void wake_workers(void *ctx) {
  lade_loader_t *L = ctx;
  pthread_mutex_lock(&L->mu);
  pthread_cond_broadcast(&L->cv_work);
  pthread_mutex_unlock(&L->mu);
}

/* The loader but its workers: the pipeline opened (pipeline.c), the pool,
 * and nworkers workers allocated, not started. */
static int open_loader(lade_loader_t **out, const lade_config_t *cfg) {
  if (!out || !cfg) return lade__fail(LADE_EINVAL, "lade_loader_create: NULL argument");
  *out = NULL;
  const lade__source_ops_t *ops = NULL;
  int ordinal = -1;
  int rc = lade__pipeline_check(cfg, &ops, &ordinal);
  if (rc) return rc;
  lade_loader_t *L = calloc(1, sizeof *L);
  if (!L) return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  pthread_once(&atfork_once, register_atfork);
  L->fork_gen = atomic_load_explicit(&fork_gen, memory_order_relaxed);
  L->pid = getpid();
  lade__counts_open(&L->counts, lade__now());
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv_work, NULL);
  pthread_cond_init(&L->cv_ready, NULL);
  L->window = cfg->prefetch + 1;
  L->sched = calloc(L->window, sizeof *L->sched);
  rc = L->sched ? lade__pool_open(&L->pool, L, cfg) : lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  if (!rc) rc = lade__pipeline_open(&L->p, cfg, ops, wake_workers, L);
  if (!rc) {
    /* a resumed run starts where its position stands (docs/plan.md "Resume") */
    L->next_sched = L->next_deliver = L->evict_q = L->p.first;
    L->nworkers = L->p.res.threads;
    L->workers = calloc(L->nworkers, sizeof *L->workers);
    if (!L->workers) rc = lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  }
  if (!rc && ordinal != -1) { /* the device pipeline_check opened (cuda: the creating thread's current one) */
    /* batches on the GPU: page-locked host slots, so their copies are DMAs queued without a host wait */
    L->pool.pin = true;
    L->device_ahead = cfg->device_prefetch;
    rc = lade__devring_open(&L->ring, ordinal, (size_t)cfg->batch_size * L->p.shape.bytes, cfg->batch_size);
  }
  if (rc) {
    free_all(L);
    return rc;
  }
  *out = L;
  return 0;
}

int lade_loader_create(lade_loader_t **out, const lade_config_t *cfg) {
  lade_loader_t *L = NULL;
  int rc = open_loader(&L, cfg);
  if (rc) return rc;
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

/* Accounts a delivered batch to its epoch. Locked. */
static void account_batch(lade_loader_t *L, slot_t *s) {
  struct epoch_acc *a = lade__epochs_acc(&L->epochs, s->seq / L->p.steps);
  if (!a) return; /* no memory for counters: the batch is still delivered */
  if (!a->started) {
    a->started = true;
    if (s->seq / L->p.steps > 0 && L->p.src_ops->stats) L->p.src_ops->stats(&L->p.src, &a->at_start);
  }
  a->batches++;
  a->plan_fallbacks += s->plan_fallbacks;
  a->plan_peer += s->plan_peer;
  a->peer_node += s->peer_node;
  a->peer_node_bytes += s->peer_node_bytes;
  a->node_reads += s->node_reads;
  for (int t = 0; t < LADE__TIER_COUNT; t++) {
    a->samples[t] += s->tier_samples[t];
    a->bytes[t] += s->tier_bytes[t];
  }
}

static void fill_view(lade_loader_t *L, slot_t *s, lade_batch_t *v) {
  v->size = sizeof *v;
  v->data = s->data;
  v->nbytes = (size_t)s->n * L->p.shape.bytes;
  v->dtype = L->p.shape.dtype;
  v->ndim = L->p.shape.ndim + 1;
  v->shape[0] = s->n;
  for (int i = 0; i < L->p.shape.ndim; i++) v->shape[i + 1] = L->p.shape.dims[i];
  int64_t stride = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    v->strides[i] = stride;
    stride *= v->shape[i];
  }
  v->labels = s->labels;
  v->indices = s->indices;
  v->sizes = s->sizes;
  v->epoch = s->seq / L->p.steps;
  v->step = s->seq % L->p.steps;
  v->substituted = s->substituted;
  v->valid = s->valid;
  v->device = -1;
  v->device_labels = NULL;
  if (s->dbuf) {
    v->data = lade__dbuf_data(s->dbuf);
    v->device_labels = lade__dbuf_labels(s->dbuf);
    v->device = lade__devring_ordinal(L->ring);
  }
}

/* device=cuda: the copies of the batch handed out now (q) and of the ready
 * ones up to device_ahead after it queued on lade's stream (devring.h), so
 * they run while the GPU works on earlier batches. Locked. */
static int copy_to_device(lade_loader_t *L, uint64_t q) {
  for (uint64_t k = q; k <= q + L->device_ahead && k < L->p.total; k++) {
    slot_t *s = slot_of(L, k);
    if (k > q && (!s || s->state != SLOT_READY || s->err)) break;
    if (!s || s->dbuf || s->err) continue;
    int rc = lade__devring_copy(L->ring, s->data, (size_t)s->n * L->p.shape.bytes, s->labels, s->n, &s->dbuf);
    if (rc) return rc;
  }
  return 0;
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
      if (L->next_deliver >= L->p.total) break; /* end: *out stays NULL */
      slot_t *s = slot_of(L, L->next_deliver);
      if (s && s->state == SLOT_READY) {
        if (s->err) {
          L->fatal = s->err;
          snprintf(L->fatal_msg, sizeof L->fatal_msg, "%s", s->errmsg);
          pthread_cond_broadcast(&L->cv_work);
          continue;
        }
        double tc = lade__now();
        if (L->ring && (rc = copy_to_device(L, L->next_deliver)) != 0) {
          fail_locked(L, rc);
          break;
        }
        handle_t *h = lade__pool_hand_out(&L->pool, s);
        if (!h) {
          rc = lade__fail(LADE_ENOMEM, "lade_loader_next: out of memory for a batch handle");
          break;
        }
        account_batch(L, s);
        fill_view(L, s, &h->view);
        L->sched[L->next_deliver % L->window] = NULL;
        L->next_deliver++;
        pthread_cond_broadcast(&L->cv_work); /* the window moved: one more batch may be planned */
        const double now = lade__now();
        lade__counts_batch(&L->counts, s->n, now - tc, now);
        *out = &h->view;
        break;
      }
      if (!s && L->p.cfg.pool_max && L->pool.held >= L->p.cfg.pool_max) {
        rc = lade__fail(LADE_ESTATE,
                        "the caller holds %u batches, as many as the setting pool_max (%u) allows: release a batch "
                        "(or copy what you keep, e.g. tensor.clone()) before asking for the next one",
                        L->pool.held, L->p.cfg.pool_max);
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
  lade__counts_wait(&L->counts, waited);
  uint64_t consumed = L->next_deliver * L->p.cfg.batch_size;
  if (*out) {
    struct epoch_acc *a = lade__epochs_acc(&L->epochs, (*out)->epoch);
    if (a) a->wait += waited;
  }
  pthread_mutex_unlock(&L->mu);
  if (*out) lade__fetch_consumed(L->p.fetch, consumed);
  if (L->p.trace && *out)
    lade__trace_event(L->p.trace, "wait", LADE__TRACE_CONSUMER, (uint64_t)(t0 * 1e6), (uint64_t)(waited * 1e6),
                      (*out)->epoch, (*out)->step, UINT64_MAX);
  return rc;
}

void lade_batch_release(lade_batch_t *batch) {
  if (!batch) return;
  handle_t *h = (handle_t *)batch;
  lade_loader_t *L = h->L; /* handles live as long as their loader */
  if (forked(L)) return;    /* the parent's pool: not ours to touch */
  pthread_mutex_lock(&L->mu);
  if (h->held && !h->releasing && h->slot->dbuf) {
    /* its device buffer first, unlocked: the fences on the consumer's streams, and the wait until the copy has
     * left the host slot (devring.h) */
    lade__dbuf_t *d = h->slot->dbuf;
    h->releasing = true;
    pthread_mutex_unlock(&L->mu);
    lade__devring_back(L->ring, d);
    pthread_mutex_lock(&L->mu);
    h->slot->dbuf = NULL;
    h->releasing = false;
  } else if (h->held && h->releasing) {
    pthread_mutex_unlock(&L->mu);
    fprintf(stderr, "lade: lade_batch_release() of a batch being released by another thread: ignored (a batch is "
            "released exactly once; this is a bug in the caller)\n");
    return;
  }
  if (!h->held) {
    /* a second release: the batch's buffer may hold a later batch now, so
     * nothing is touched */
    unsigned long long e = L->p.steps ? h->seq / L->p.steps : 0, st = L->p.steps ? h->seq % L->p.steps : 0;
    pthread_mutex_unlock(&L->mu);
    fprintf(stderr,
            "lade: lade_batch_release() of the batch of epoch %llu, step %llu, which was already released: "
            "ignored (a batch is released exactly once; this is a bug in the caller)\n",
            e, st);
    return;
  }
  assert(h->slot->state == SLOT_HELD);
  slot_t *drop = lade__pool_take_back(&L->pool, h, L->destroyed);
  bool last = L->destroyed && L->pool.held == 0;
  pthread_cond_broadcast(&L->cv_work);
  pthread_cond_broadcast(&L->cv_ready);
  pthread_mutex_unlock(&L->mu);
  if (drop) lade__pool_slot_free(&L->pool, drop);
  if (last) free_all(L);
}

int lade_batch_use_stream(lade_batch_t *batch, void *stream) {
  if (!batch) return lade__fail(LADE_EINVAL, "lade_batch_use_stream: NULL batch");
  handle_t *h = (handle_t *)batch;
  lade_loader_t *L = h->L;
  if (forked(L)) return fail_forked(L, "lade_batch_use_stream");
  pthread_mutex_lock(&L->mu);
  lade__dbuf_t *d = h->held && !h->releasing ? h->slot->dbuf : NULL;
  pthread_mutex_unlock(&L->mu);
  if (!d)
    return lade__fail(LADE_EINVAL, "lade_batch_use_stream: the batch of epoch %llu, step %llu is %s",
                      (unsigned long long)batch->epoch, (unsigned long long)batch->step,
                      L->ring ? "released" : "in host memory (setting device=cpu)");
  return lade__devring_use(L->ring, d, stream);
}

int lade_loader_seek(lade_loader_t *L, uint64_t epoch, uint64_t step) {
  if (!L) return lade__fail(LADE_EINVAL, "lade_loader_seek: NULL loader");
  if (forked(L)) return fail_forked(L, "lade_loader_seek");
  pthread_mutex_lock(&L->mu);
  int rc = 0;
  /* (epochs, 0) is the end; with zero steps per epoch every (e, 0) is */
  bool at_end = step == 0 && (epoch == L->p.cfg.epochs || (L->p.steps == 0 && epoch <= L->p.cfg.epochs));
  if (!at_end && (epoch >= L->p.cfg.epochs || step >= L->p.steps)) {
    rc = lade__fail(LADE_ERANGE,
                    "seek to (epoch %llu, step %llu) is out of range: epochs are 0 to %llu and steps 0 to %llu (%llu "
                    "epochs of %llu steps; (%llu, 0) is the end)",
                    (unsigned long long)epoch, (unsigned long long)step,
                    (unsigned long long)(L->p.cfg.epochs ? L->p.cfg.epochs - 1 : 0),
                    (unsigned long long)(L->p.steps ? L->p.steps - 1 : 0), (unsigned long long)L->p.cfg.epochs,
                    (unsigned long long)L->p.steps, (unsigned long long)L->p.cfg.epochs);
  } else if (epoch * L->p.steps + step < L->p.first) {
    rc = lade__fail(LADE_ERANGE,
                    "seek to (epoch %llu, step %llu) is before (epoch %llu, step %llu), where this loader resumed a "
                    "saved position (the steps before it were another run's)",
                    (unsigned long long)epoch, (unsigned long long)step, (unsigned long long)(L->p.first / L->p.steps),
                    (unsigned long long)(L->p.first % L->p.steps));
  } else if (!rc) {
    uint64_t q = epoch * L->p.steps + step;
    for (uint32_t i = 0; i < L->pool.n; i++) {
      slot_t *s = L->pool.slots[i];
      if (s->state == SLOT_READY) {
        s->state = SLOT_FREE;
        if (s->dbuf) lade__devring_back(L->ring, s->dbuf); /* a copy queued ahead, never handed out */
        s->dbuf = NULL;
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
  if (!rc) lade__fetch_seek(L->p.fetch, (epoch * L->p.steps + step) * L->p.cfg.batch_size);
  return rc;
}

int lade_loader_tell(const lade_loader_t *cL, uint64_t *epoch, uint64_t *step) {
  lade_loader_t *L = (lade_loader_t *)cL;
  if (!L) return lade__fail(LADE_EINVAL, "lade_loader_tell: NULL loader");
  if (forked(L)) return fail_forked(L, "lade_loader_tell");
  pthread_mutex_lock(&L->mu);
  if (epoch) *epoch = L->p.steps ? L->next_deliver / L->p.steps : L->p.cfg.epochs;
  if (step) *step = L->p.steps ? L->next_deliver % L->p.steps : 0;
  pthread_mutex_unlock(&L->mu);
  return 0;
}

uint64_t lade__engine_run_stats(lade_loader_t *L, lade_stats_t *out, double *lat) {
  pthread_mutex_lock(&L->mu);
  const uint64_t n = lade__counts_copy(&L->counts, out, lat);
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
  out->peak_pool_bytes = L->pool.peak_bytes;
  out->threads = L->started;
  pthread_mutex_unlock(&L->mu);
  if (L->ring) {
    lade__devring_stats_t d;
    lade__devring_stats(L->ring, &d);
    out->h2d_bytes = d.bytes;
    out->device_buffers = d.buffers;
    out->h2d_seconds = d.copy_seconds;
    out->h2d_wait_seconds = d.wait_seconds;
  }
  return n;
}

bool lade__engine_epoch(lade_loader_t *L, uint64_t epoch, struct epoch_acc *a, lade__source_stats_t *next_start,
                        bool *have_next) {
  pthread_mutex_lock(&L->mu);
  const struct epoch_acc *cur = lade__epochs_find(&L->epochs, epoch);
  bool started = cur && cur->started;
  if (started) *a = *cur;
  const struct epoch_acc *next = started && epoch < UINT64_MAX ? lade__epochs_find(&L->epochs, epoch + 1) : NULL;
  *have_next = next && next->started;
  if (*have_next) *next_start = next->at_start;
  pthread_mutex_unlock(&L->mu);
  return started;
}

int lade_loader_allgather(lade_loader_t *L, const void *mine, size_t len, void *all) {
  if (!L || (len && (!mine || !all))) return lade__fail(LADE_EINVAL, "lade_loader_allgather: NULL argument");
  if (forked(L)) return fail_forked(L, "lade_loader_allgather");
  return lade__pipeline_allgather(&L->p, mine, len, all);
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
  /* a worker finishing a step may wait for its sends, to peers that may be closing too (a loop that breaks out):
   * not any more, nor for admits of steps never read (docs/transport.md, Closing) */
  lade__transport_stop_waits(L->p.dist);
  lade__fetch_quiesce(L->p.fetch);
  for (uint32_t i = 0; i < L->started; i++) pthread_join(L->workers[i].thread, NULL);
  /* no worker runs now: files, the disk cache (and its lock), the transport
   * go now, even while the caller holds batches (they need only the pool) */
  lade__pipeline_close(&L->p);
  pthread_mutex_lock(&L->mu);
  L->destroyed = true;
  bool last = L->pool.held == 0;
  pthread_mutex_unlock(&L->mu);
  if (last) free_all(L);
}
