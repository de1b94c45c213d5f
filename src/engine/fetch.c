/*
 * fetch.c - the fetch stage: reads by route (any tier: memory tier -> disk
 * tier -> source; or the plan's own cache / storage / peer), remote
 * requests started when a batch is planned, the DELI prefetcher, and the
 * plan-driven memory tier.
 *
 * Routed plans (every kind but regular; plan/cursor.h). The memory tier runs
 * the `plan` policy: it never evicts by itself. A step's admits are put as
 * its samples are read (each admitted sample is one the learner reads in
 * that step); its evicts are applied when every sample of the step has been
 * read (lade__fetch_step_done), unless a later planned step admits the
 * sample again (adm_q). Steps are filled concurrently (the engine's window),
 * so a read routed to the cache may come before the read of an earlier step
 * that admits the sample: it waits for that admit (adm_pending, bounded by
 * ADMIT_WAIT_S, then it falls back), which with local sources makes the
 * cache hits equal the plan's. Admits run ahead of the evicts of the steps
 * before them by at most the engine's window, so the tier's byte capacity
 * is cache_mem_bytes plus (prefetch + 2) batches of mean-sized samples
 * (docs/cache.md); the plan's cache count is cache_mem_bytes over the mean
 * entry charge.
 *
 * The prefetcher (paper 004) walks this learner's future sample sequence
 * (position = (epoch * steps + step) * B + i, the order the consumer will
 * use them) and, whenever the samples it has fetched but the consumer has
 * not yet used fall to `threshold`, fetches the next `fetch_size` samples
 * into the disk tier: one background submit() of the window (a remote
 * source has them all in flight at once, paper 003, yet starts the
 * workers' own misses first), then a read and a disk put per sample in
 * plan order. The trigger is checked after every put, with up to two
 * windows outstanding, so the next window is requested while the last one
 * still arrives (checked only between windows, the source ran dry at the
 * end of each window: 18-20% of a cold epoch's samples were then fetched by
 * the workers themselves, against 5% now). It starts past the engine's
 * own window (the batches the engine is filling itself), so the two never
 * fetch the same sample; a worker that needs a sample the prefetcher has
 * in flight waits for it instead of sending a second GET.
 *
 * Clairvoyant eviction asks next_use(key): the position of key's next use
 * at or after the consumer's position, from first-use maps of the
 * consumer's epoch and the one after (a sample not used again in those two
 * epochs counts as never), asked of the plan cursor. The planning worker
 * builds the maps of the epochs it plans in (three kept: the consumer's
 * epoch may lag the planner's by one), so no epoch boundary costs the
 * consumer thread a shuffle. With padding (drop_last=false) a sample may
 * appear twice in an epoch; the map keeps its first position.
 *
 * Locks: `mu` guards the consumer position, the prefetcher's cursor, the
 * in-flight set and the flags; `nu_mu` guards the next-use maps and is
 * taken inside a cache tier's lock (next_use is called with it held), so
 * nothing here calls into a cache tier while holding nu_mu. Order: cache
 * lock, then nu_mu; mu is never held while calling a cache tier or the
 * source, and the engine's callback (on_ready) is called with no lock held.
 */
#include "engine/fetch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "cache/cache.h"
#include "core/core.h"
#include "plan/regular.h"

#define NONE32 UINT32_MAX
#define NMAPS 3
#define ADMIT_WAIT_S 1
#define RA_MAX_SAMPLES 1024
#define SR_MAX_SAMPLES 1400

/* A small multiset of sample indices (open addressing, backward-shift
 * deletion): the prefetcher's requests in flight. */
typedef struct idxset {
  uint64_t *key;
  uint32_t *count;
  size_t cap, n; /* cap: power of two */
} idxset_t;

static int idxset_init(idxset_t *s, size_t want) {
  size_t cap = 64;
  while (cap < want * 2) cap <<= 1;
  s->key = malloc(cap * sizeof *s->key);
  s->count = calloc(cap, sizeof *s->count);
  s->cap = cap;
  s->n = 0;
  return s->key && s->count ? 0 : -1;
}

static void idxset_free(idxset_t *s) {
  free(s->key);
  free(s->count);
}

static size_t idxset_slot(const idxset_t *s, uint64_t k) {
  size_t m = s->cap - 1, i = (size_t)lade__mix64(k) & m;
  while (s->count[i] && s->key[i] != k) i = (i + 1) & m;
  return i;
}

static bool idxset_has(const idxset_t *s, uint64_t k) { return s->count[idxset_slot(s, k)] != 0; }

/* Adds k; false when it was already there (or the set is full). */
static bool idxset_add(idxset_t *s, uint64_t k) {
  size_t i = idxset_slot(s, k);
  if (s->count[i]) return false;
  if ((s->n + 1) * 2 > s->cap) return false;
  s->key[i] = k;
  s->count[i] = 1;
  s->n++;
  return true;
}

static void idxset_del(idxset_t *s, uint64_t k) {
  size_t m = s->cap - 1, i = idxset_slot(s, k);
  if (!s->count[i]) return;
  s->count[i] = 0;
  s->n--;
  for (size_t j = (i + 1) & m; s->count[j]; j = (j + 1) & m) {
    size_t home = (size_t)lade__mix64(s->key[j]) & m;
    /* move j back into the hole i when its home is not in (i, j] */
    if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
      s->key[i] = s->key[j];
      s->count[i] = s->count[j];
      s->count[j] = 0;
      i = j;
    }
  }
}

struct lade__fetch {
  lade__fetch_params_t p;
  const struct lade_config *cfg;
  lade__plan_params_t pp;
  uint64_t per_epoch; /* positions per epoch: steps * B */
  uint64_t total;     /* positions in the run */
  uint64_t mean;      /* mean sample bytes (mean_of), 0 until needed */
  lade__cache_t *mem, *disk;
  bool remote;        /* the source has submit() */

  pthread_mutex_t mu;
  pthread_cond_t cv_pf;       /* the prefetcher waits here */
  pthread_cond_t cv_inflight; /* readers wait for the prefetcher's request of their sample */
  uint64_t consumed;          /* the consumer took every position below this */
  uint64_t planned;           /* batches the engine planned (submitted) since open */
  uint64_t window;            /* positions past `consumed` the engine fetches itself */
  uint64_t seek_gen;
  bool stop;
  bool pf_on, pf_started;
  pthread_t pf_thread;
  uint64_t pf_pos; /* the prefetcher fetched every position below this (that it is responsible for) */
  uint64_t fetch_size, threshold;
  idxset_t inflight;
  /* remote read-ahead: the samples of steps up to ra_steps past the one
   * being planned are requested as soon as it is planned (non-routed plans
   * without the prefetcher); with the prefetcher, ra_samples bounds its
   * submitted-but-unread samples instead */
  uint64_t ra_steps, ra_samples;
  uint64_t ra_next; /* the first step not yet requested (under mu) */
  /* plan=shards over a remote source: read ahead in the shard stream's
   * order (front to back, what the shuffle buffer consumes), so a shard is
   * read with few large Range requests however the buffer mixes it */
  bool sr_on;
  uint64_t sr_count, sr_cap, sr_ahead; /* stream samples an epoch, the buffer, samples read past it */
  uint64_t sr_next;                    /* global stream position (epoch * sr_count + pos) not yet requested (mu) */
  uint64_t plan_hi; /* 1 + the latest step the engine planned (under mu): the prefetcher leaves those to it */

  /* clairvoyant next-use maps: local position within the epoch, per sample */
  pthread_mutex_t nu_mu;
  uint32_t *nu_map[NMAPS]; /* of epochs nu_ep[i] (UINT64_MAX: empty) */
  uint64_t nu_ep[NMAPS];
  uint64_t nu_cursor;
  bool nu_on;
  _Atomic uint32_t *used; /* epoch + 1 of each sample's latest read (0: never) */

  /* routed plans: the memory tier follows the plan */
  bool routed;
  _Atomic uint64_t *adm_q;      /* q + 1 of the latest planned step admitting each sample (0: none) */
  _Atomic uint8_t *adm_pending; /* 1 while that admit has not been put */
  pthread_cond_t cv_admit;      /* with mu: a pending admit ended */
  pthread_mutex_t plan_mu;      /* orders an evict's adm_q check and its evict against an admit's put */
  lade__cache_t *ptier;         /* the tier the plan drives: mem, else disk (NULL: no cache) */

  _Atomic uint64_t samples[LADE__TIER_COUNT], bytes[LADE__TIER_COUNT];
  _Atomic uint64_t misses, prefetched, pf_errors, waited;
  _Atomic uint64_t plan_hits, plan_fallbacks, plan_peer, served_storage;
};

/* ------------------------------------------------------------ next use */

/* The map of epoch e, or NULL. Under nu_mu. */
static const uint32_t *map_of(const lade__fetch_t *f, uint64_t e) {
  for (int i = 0; i < NMAPS; i++)
    if (f->nu_map[i] && f->nu_ep[i] == e) return f->nu_map[i];
  return NULL;
}

/* Makes sure the first-use map of epoch e exists, replacing the oldest.
 * Called by the planning worker (and at open): never the consumer. */
static void ensure_map(lade__fetch_t *f, uint64_t e) {
  if (!f->nu_on || e >= f->pp.epochs) return;
  pthread_mutex_lock(&f->nu_mu);
  bool have = map_of(f, e) != NULL;
  pthread_mutex_unlock(&f->nu_mu);
  if (have) return;
  uint32_t *m = malloc(f->pp.samples * sizeof *m);
  if (!m || lade__cursor_first_use(f->p.cursor, e, m) != 0) { /* eviction gets less exact, never wrong */
    free(m);
    lade__clear_error();
    return;
  }
  pthread_mutex_lock(&f->nu_mu);
  int v = 0;
  for (int i = 1; i < NMAPS; i++) /* an empty slot, else the oldest epoch */
    if (!f->nu_map[v]) break;
    else if (!f->nu_map[i] || f->nu_ep[i] < f->nu_ep[v]) v = i;
  free(f->nu_map[v]);
  f->nu_map[v] = m;
  f->nu_ep[v] = e;
  pthread_mutex_unlock(&f->nu_mu);
}

static uint64_t next_use(void *ctx, uint64_t key) {
  lade__fetch_t *f = ctx;
  uint64_t r = UINT64_MAX;
  pthread_mutex_lock(&f->nu_mu);
  uint64_t e = f->per_epoch ? f->nu_cursor / f->per_epoch : 0;
  const uint32_t *m0 = map_of(f, e), *m1 = map_of(f, e + 1);
  if ((m0 || m1) && key < f->pp.samples) {
    uint64_t base = e * f->per_epoch;
    uint64_t off = f->nu_cursor > base ? f->nu_cursor - base : 0;
    uint32_t p0 = m0 ? m0[key] : NONE32, p1 = m1 ? m1[key] : NONE32;
    uint64_t used = atomic_load_explicit(&f->used[key], memory_order_relaxed);
    if (used > e + 1) /* read ahead for the next epoch already */
      r = UINT64_MAX;
    else if (used == e + 1) /* read this epoch already (the engine's window runs ahead of the consumer) */
      r = p1 != NONE32 ? base + f->per_epoch + p1 : UINT64_MAX;
    else if (p0 != NONE32 && p0 >= off)
      r = base + p0;
    else if (p1 != NONE32)
      r = base + f->per_epoch + p1;
  }
  pthread_mutex_unlock(&f->nu_mu);
  return r;
}

/* ---------------------------------------------------------------- open */

/* The dataset's identity for the disk tier: where the source is (a URI as
 * given, a local path made absolute, symlinks resolved, so two datasets
 * both called `ds` never share entries), its size, and a digest of every
 * sample's name, so a changed listing (samples added or removed, which
 * shifts indices) never reuses entries. Sizes are not in it: a sample
 * whose bytes changed is caught by its own version (sample_version). */
static void dataset_ns(lade__fetch_t *f, char *ns, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  char name[LADE__PATH_MAX + 64];
  for (uint64_t i = 0; i < f->p.src->count; i++) {
    f->p.ops->describe(f->p.src, i, name, sizeof name);
    h = lade__hash64(name, strlen(name) + 1, h);
  }
  const char *where = f->cfg->source;
  char abs[PATH_MAX];
  if (!strstr(where, "://") && realpath(where, abs)) where = abs;
  snprintf(ns, size, "%s|%llu samples|names %016llx", where, (unsigned long long)f->p.src->count,
           (unsigned long long)h);
}

/* The version of sample idx that the disk tier stores with its bytes and
 * checks on every get: a remote object's listed size (the listing has no
 * ETag) unless the source has a version op (remote tar shards: the shard's
 * ETag); for a local source, what its version op says (size, mtime in ns
 * and inode of the file holding the sample). Taken before the source is
 * read, so bytes read after a change are never stored under the older
 * version. Costs one fstatat() per read while a disk tier is on (measured
 * in docs/cache.md). */
static uint64_t sample_version(lade__fetch_t *f, uint64_t idx) {
  if (!f->disk) return 0;
  if (f->remote && !f->p.ops->version) return f->p.src->sizes && idx < f->p.src->count ? f->p.src->sizes[idx] : 0;
  return f->p.ops->version ? f->p.ops->version(f->p.src, idx) : LADE__VERSION_UNKNOWN;
}

/* Mean bytes per sample: from the listing, else from sample 0. */
static uint64_t mean_sample_bytes(lade__source_t *s, const lade__source_ops_t *ops) {
  if (s->sizes && s->count) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < s->count; i++) sum += s->sizes[i];
    return LADE__MAX(sum / s->count, 1);
  }
  lade__buf_t b = {0};
  uint64_t n = ops->read(s, 0, &b) == 0 ? b.len : 4096;
  lade__buf_free(&b);
  lade__clear_error();
  return LADE__MAX(n, 1);
}

/* The mean sample size, worked out once per open (only where needed: a
 * source without listed sizes reads sample 0 for it). */
static uint64_t mean_of(lade__fetch_t *f) {
  if (!f->mean) f->mean = mean_sample_bytes(f->p.src, f->p.ops);
  return f->mean;
}

uint64_t lade__fetch_plan_cache_samples(const struct lade_config *cfg, lade__source_t *src,
                                        const lade__source_ops_t *ops, uint64_t *mean) {
  *mean = 0;
  if (cfg->cache_mem_bytes) {
    *mean = mean_sample_bytes(src, ops);
    return LADE__MIN(cfg->cache_mem_bytes / lade__memcache_charge(*mean), src->count);
  }
  if (cfg->cache_dir[0] && cfg->cache_disk_bytes) {
    *mean = mean_sample_bytes(src, ops);
    return LADE__MIN(cfg->cache_disk_bytes / lade__diskcache_charge(*mean), src->count);
  }
  return 0;
}

static void *prefetch_main(void *arg);

int lade__fetch_open(lade__fetch_t **out, const lade__fetch_params_t *p) {
  *out = NULL;
  const struct lade_config *cfg = p->cfg;
  lade__fetch_t *f = calloc(1, sizeof *f);
  if (!f) return lade__fail(LADE_ENOMEM, "fetch: out of memory");
  f->p = *p;
  f->cfg = cfg;
  f->pp = (lade__plan_params_t){.samples = p->src->count,
                                .batch_size = p->batch,
                                .world_size = cfg->world_size,
                                .epochs = cfg->epochs,
                                .seed = cfg->seed,
                                .shuffle = cfg->shuffle,
                                .drop_last = cfg->drop_last};
  f->per_epoch = p->steps * p->batch;
  f->total = f->per_epoch * cfg->epochs;
  f->remote = p->ops->submit != NULL;
  pthread_mutex_init(&f->mu, NULL);
  pthread_mutex_init(&f->nu_mu, NULL);
  pthread_cond_init(&f->cv_pf, NULL);
  pthread_cond_init(&f->cv_inflight, NULL);
  pthread_cond_init(&f->cv_admit, NULL);
  pthread_mutex_init(&f->plan_mu, NULL);
  for (int i = 0; i < NMAPS; i++) f->nu_ep[i] = UINT64_MAX;
  f->routed = lade__cursor_routed(p->cursor);

  int policy = cfg->cache_policy;
  const char *plan = lade_plan_kind_name(lade__cursor_kind(p->cursor));
  int rc = 0;
  if (f->routed && policy != LADE__CACHE_AUTO && policy != LADE__CACHE_PLAN)
    rc = lade__fail(LADE_EINVAL, "plan=%s drives the memory cache by its own admits and evicts: cache_policy must be "
                    "auto or plan", plan);
  else if (f->routed && cfg->cache_dir[0] && cfg->cache_mem_bytes)
    rc = lade__fail(LADE_EINVAL, "plan=%s drives one cache per learner: set cache_mem_bytes or cache_dir, not both",
                    plan);
  else if (f->routed && cfg->cache_dir[0] && !cfg->cache_disk_bytes)
    rc = lade__fail(LADE_EINVAL, "plan=%s with a disk cache: set cache_disk_bytes (the plan's cache size)", plan);
  else if (f->routed && cfg->prefetcher == LADE__TRISTATE_ON)
    rc = lade__fail(LADE_EINVAL, "plan=%s decides what the cache holds; the DELI prefetcher (prefetcher=on) runs with "
                    "the regular plan only", plan);
  else if (!f->routed && policy == LADE__CACHE_PLAN)
    rc = lade__fail(LADE_EINVAL, "cache_policy=plan follows a plan's admits and evicts: set plan to one other than "
                    "regular (e.g. regular+belady, locality)");
  if (rc) {
    lade__fetch_close(f);
    return rc;
  }
  if (f->routed) policy = LADE__CACHE_PLAN;
  if (policy == LADE__CACHE_AUTO) policy = LADE__CACHE_CLAIRVOYANT;
  if (policy == LADE__CACHE_CLAIRVOYANT && p->src->count >= NONE32) policy = LADE__CACHE_LRU;
  bool any = cfg->cache_mem_bytes || cfg->cache_dir[0];
  f->nu_on = any && policy == LADE__CACHE_CLAIRVOYANT;
  if (f->nu_on) {
    f->used = calloc(p->src->count, sizeof *f->used);
    if (f->used) ensure_map(f, 0), ensure_map(f, 1);
  }
  if (f->nu_on && !f->nu_map[0]) policy = LADE__CACHE_LRU, f->nu_on = false;

  char ns[LADE__PATH_MAX + 128] = "";
  if (cfg->cache_dir[0]) dataset_ns(f, ns, sizeof ns);
  if (f->routed && (cfg->cache_mem_bytes || cfg->cache_dir[0])) {
    f->adm_q = calloc(p->src->count, sizeof *f->adm_q);
    f->adm_pending = calloc(p->src->count, sizeof *f->adm_pending);
    if (!f->adm_q || !f->adm_pending)
      rc = lade__fail(LADE_ENOMEM, "plan=%s: out of memory for the cache's admit table of %llu samples", plan,
                      (unsigned long long)p->src->count);
  }
  /* a plan's admits run ahead of the evicts of earlier steps by the engine's window */
  uint64_t slack = f->routed ? (uint64_t)(cfg->prefetch + 2) * p->batch : 0;
  if (cfg->cache_mem_bytes) {
    uint64_t cap = cfg->cache_mem_bytes + slack * lade__memcache_charge(p->sample_bytes);
    lade__cache_opts_t o = {.dir = NULL, .ns = cfg->source, .capacity = cap, .policy = policy,
                            .next_use = next_use, .next_use_ctx = f};
    if (!rc) rc = lade__cache_open(&f->mem, &o);
  }
  if (!rc && cfg->cache_dir[0]) {
    uint64_t cap = cfg->cache_disk_bytes;
    if (!cap) {
      struct statvfs v;
      rc = lade__mkdir_private(cfg->cache_dir);
      if (!rc && statvfs(cfg->cache_dir, &v) != 0)
        rc = lade__fail(LADE_EIO, "cache_dir %s: %s", cfg->cache_dir, strerror(errno));
      if (!rc) cap = (uint64_t)v.f_bavail * v.f_frsize / 2;
    }
    if (!rc && !cap) rc = lade__fail(LADE_EIO, "cache_dir %s: its file system has no free space", cfg->cache_dir);
    if (!rc) {
      lade__cache_opts_t o = {.dir = cfg->cache_dir, .ns = ns, .capacity = cap + slack * lade__diskcache_charge(p->sample_bytes),
                              .policy = policy, .next_use = next_use, .next_use_ctx = f};
      rc = lade__cache_open(&f->disk, &o);
    }
    /* the plan's model starts empty at (0, 0): entries of an earlier run would
     * hold room the plan does not know of, so they go */
    if (!rc && f->routed) lade__cache_clear(f->disk);
    if (!rc && !f->routed)
      f->pf_on = cfg->prefetcher == LADE__TRISTATE_ON || (cfg->prefetcher == LADE__TRISTATE_AUTO && f->remote);
    if (!rc && f->pf_on) {
      /* DELI's 50/50 rule: fetch size = threshold = half the cache, in
       * samples (entries are charged in whole 4 KiB blocks on disk) */
      uint64_t per = (mean_of(f) + 64 + 4095) / 4096 * 4096;
      uint64_t slots = cap / per, window = (uint64_t)(cfg->prefetch + 1) * p->batch;
      /* the engine's own window of batches is resident too while it is read */
      uint64_t half = LADE__MAX((slots > window ? slots - window : 0) / 2, 1);
      f->fetch_size = cfg->fetch_size ? cfg->fetch_size : half;
      f->threshold = cfg->prefetch_threshold ? cfg->prefetch_threshold : f->fetch_size;
    }
  }
  f->ptier = f->routed ? (f->mem ? f->mem : f->disk) : NULL;
  if (!rc && f->remote && cfg->readahead_bytes) {
    /* in samples: bounded so that what arrives ahead always fits the remote
     * source's table of unread results (http.c keeps 1,536 at least) */
    f->ra_samples = LADE__MAX(LADE__MIN(cfg->readahead_bytes / mean_of(f), RA_MAX_SAMPLES), 1);
    if (!f->routed && !f->pf_on) f->ra_steps = f->ra_samples / p->batch;
    uint64_t count = 0, cap = 0;
    if (f->ra_steps && lade__cursor_stream_info(p->cursor, &count, &cap) == 0) {
      /* the buffer's samples wait as unread results too (as WebDataset
       * holds its shuffle buffer in memory): a source that can raise its
       * bound on them (reserve) streams with any buffer; else it must fit
       * the default bound (1,536), or steps are read ahead as usual */
      uint64_t room = SR_MAX_SAMPLES > cap + p->batch ? SR_MAX_SAMPLES - cap - p->batch : 0;
      f->sr_ahead = p->ops->reserve ? f->ra_samples : LADE__MIN(f->ra_samples, room);
      f->sr_on = f->sr_ahead >= p->batch;
      f->sr_count = count;
      f->sr_cap = cap;
      if (f->sr_on && p->ops->reserve) {
        uint64_t held = cap + f->sr_ahead + 2 * p->batch;
        p->ops->reserve(p->src, held + RA_MAX_SAMPLES, held * mean_of(f) + (64u << 20));
      }
    }
    lade__clear_error();
  }
  if (!rc && cfg->prefetcher == LADE__TRISTATE_ON && !f->disk)
    rc = lade__fail(LADE_EINVAL, "prefetcher=on needs a disk cache: set cache_dir");
  if (!rc && f->pf_on) {
    if (idxset_init(&f->inflight, 2 * f->fetch_size) != 0) rc = lade__fail(LADE_ENOMEM, "prefetcher: out of memory");
  }
  if (!rc && f->pf_on) {
    if (pthread_create(&f->pf_thread, NULL, prefetch_main, f) != 0)
      rc = lade__fail(LADE_ETHREAD, "cannot start the prefetcher thread: %s", strerror(errno));
    else
      f->pf_started = true;
  }
  if (rc) {
    lade__fetch_close(f);
    return rc;
  }
  *out = f;
  return 0;
}

void lade__fetch_close(lade__fetch_t *f) {
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->stop = true;
  pthread_cond_broadcast(&f->cv_pf);
  pthread_cond_broadcast(&f->cv_inflight);
  pthread_cond_broadcast(&f->cv_admit);
  pthread_mutex_unlock(&f->mu);
  if (f->pf_started) pthread_join(f->pf_thread, NULL);
  lade__cache_close(f->mem);
  lade__cache_close(f->disk);
  idxset_free(&f->inflight);
  for (int i = 0; i < NMAPS; i++) free(f->nu_map[i]);
  free((void *)f->used);
  free((void *)f->adm_q);
  free((void *)f->adm_pending);
  pthread_mutex_destroy(&f->mu);
  pthread_mutex_destroy(&f->nu_mu);
  pthread_cond_destroy(&f->cv_pf);
  pthread_cond_destroy(&f->cv_inflight);
  pthread_cond_destroy(&f->cv_admit);
  pthread_mutex_destroy(&f->plan_mu);
  free(f);
}

bool lade__fetch_cached(const lade__fetch_t *f) { return f->mem || f->disk; }
bool lade__fetch_async(const lade__fetch_t *f) { return f->remote || f->pf_on; }

/* ---------------------------------------------------------------- reads */

static void count(lade__fetch_t *f, int tier, size_t len) {
  atomic_fetch_add_explicit(&f->samples[tier], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&f->bytes[tier], len, memory_order_relaxed);
}

/* Waits (bounded) while a planned admit of idx has not been put; true when
 * it was put meanwhile, so the cache is worth asking again. */
static bool wait_admit(lade__fetch_t *f, uint64_t idx) {
  if (!atomic_load_explicit(&f->adm_pending[idx], memory_order_acquire)) return false;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ADMIT_WAIT_S;
  pthread_mutex_lock(&f->mu);
  while (!f->stop && atomic_load_explicit(&f->adm_pending[idx], memory_order_acquire))
    if (pthread_cond_timedwait(&f->cv_admit, &f->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&f->mu);
  return !atomic_load_explicit(&f->adm_pending[idx], memory_order_acquire);
}

static void end_admit(lade__fetch_t *f, uint64_t idx) {
  atomic_store_explicit(&f->adm_pending[idx], 0, memory_order_release);
  pthread_mutex_lock(&f->mu);
  pthread_cond_broadcast(&f->cv_admit);
  pthread_mutex_unlock(&f->mu);
}

/* A read by a plan's route (not LADE__ROUTE_ANY). */
static int read_routed(lade__fetch_t *f, uint64_t idx, uint64_t q, int32_t route, lade__buf_t *out, int *tier,
                       int *note) {
  lade__cache_t *t = f->ptier; /* the plan's tier (NULL without a cache: every route is storage) */
  uint64_t ver = t == f->disk ? sample_version(f, idx) : 0;
  if (route == LADE_FROM_CACHE && t) {
    for (;;) {
      if (lade__cache_get_ver(t, idx, ver, out) == 0) {
        *tier = t == f->mem ? LADE__TIER_MEM : LADE__TIER_DISK;
        count(f, *tier, out->len);
        atomic_fetch_add_explicit(&f->plan_hits, 1, memory_order_relaxed);
        return 0;
      }
      if (!wait_admit(f, idx)) break;
    }
    atomic_fetch_add_explicit(&f->plan_fallbacks, 1, memory_order_relaxed);
    *note = LADE__ROUTE_FALLBACK;
  } else if (route >= 0 && !f->p.dist) {
    atomic_fetch_add_explicit(&f->plan_peer, 1, memory_order_relaxed);
    *note = LADE__ROUTE_PEER_STORAGE;
  }
  bool admit = t && atomic_load_explicit(&f->adm_q[idx], memory_order_relaxed) == q + 1 &&
               atomic_load_explicit(&f->adm_pending[idx], memory_order_acquire);
  lade__clear_error();
  bool peer = route >= 0 && f->p.dist;
  int rc = peer ? f->p.dist->ops->recv(f->p.dist, q, idx, (uint32_t)route, out) : f->p.ops->read(f->p.src, idx, out);
  if (!rc) {
    *tier = peer ? LADE__TIER_PEER : LADE__TIER_STORAGE;
    count(f, *tier, out->len);
    if (t && !peer) atomic_fetch_add_explicit(&f->misses, 1, memory_order_relaxed);
    /* an admit of this step, or a sample the plan believes cached: put it (back) */
    if (admit || (t && route == LADE_FROM_CACHE)) {
      pthread_mutex_lock(&f->plan_mu);
      lade__cache_put_ver(t, idx, ver, out->data, out->len);
      pthread_mutex_unlock(&f->plan_mu);
    }
  }
  if (admit) end_admit(f, idx);
  return rc;
}

int lade__fetch_read(lade__fetch_t *f, uint64_t idx, uint64_t q, int32_t route, lade__buf_t *out, int *tier,
                     int *note) {
  *note = LADE__ROUTE_MET;
  if (f->routed && route != LADE__ROUTE_ANY) return read_routed(f, idx, q, route, out, tier, note);
  uint64_t epoch = f->p.steps ? q / f->p.steps : 0;
  /* before the tiers see the read: a hit's refreshed next use is the one after this */
  if (f->used && idx < f->pp.samples)
    atomic_store_explicit(&f->used[idx], (uint32_t)LADE__MIN(epoch + 1, UINT32_MAX), memory_order_relaxed);
  uint64_t ver = sample_version(f, idx);
  /* an unknown version could match a stale entry stored as unknown too */
  lade__cache_t *disk = ver == LADE__VERSION_UNKNOWN ? NULL : f->disk;
  if (f->mem && lade__cache_get_ver(f->mem, idx, ver, out) == 0) {
    if (f->disk) lade__cache_touch(f->disk, idx); /* keep the disk tier's policy state true */
    *tier = LADE__TIER_MEM;
    count(f, *tier, out->len);
    return 0;
  }
  for (int pass = 0; pass < 2; pass++) {
    if (disk && lade__cache_get_ver(disk, idx, ver, out) == 0) {
      if (f->mem) lade__cache_put_ver(f->mem, idx, ver, out->data, out->len);
      *tier = LADE__TIER_DISK;
      count(f, *tier, out->len);
      return 0;
    }
    if (!f->pf_on || pass) break;
    /* the prefetcher may be fetching this very sample: wait for it rather
     * than send a second request. Then the disk tier is asked again even if
     * nothing was waited for: the prefetcher may have put the sample and
     * left the set between the miss above and this look at the set (it
     * leaves the set only after the put), which under ThreadSanitizer's
     * timing sent a second request for it */
    bool waited = false;
    pthread_mutex_lock(&f->mu);
    while (!f->stop && idxset_has(&f->inflight, idx)) {
      waited = true;
      pthread_cond_wait(&f->cv_inflight, &f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    if (waited) atomic_fetch_add_explicit(&f->waited, 1, memory_order_relaxed);
  }
  lade__clear_error();
  int rc = f->p.ops->read(f->p.src, idx, out);
  if (rc) return rc;
  *tier = LADE__TIER_STORAGE;
  count(f, *tier, out->len);
  if (f->mem || f->disk) atomic_fetch_add_explicit(&f->misses, 1, memory_order_relaxed);
  if (f->mem && !f->routed) lade__cache_put_ver(f->mem, idx, ver, out->data, out->len); /* routed: only the plan admits */
  /* with the prefetcher on, it alone fills the disk tier (DELI): a miss
   * written there would push out samples fetched for the near future */
  if (disk && !f->pf_on && !f->routed) lade__cache_put_ver(disk, idx, ver, out->data, out->len);
  return 0;
}

static bool resident(lade__fetch_t *f, uint64_t idx) {
  return (f->mem && lade__cache_contains(f->mem, idx)) || (f->disk && lade__cache_contains(f->disk, idx));
}

static bool pf_inflight(lade__fetch_t *f, uint64_t idx) {
  if (!f->pf_on) return false;
  pthread_mutex_lock(&f->mu);
  bool r = idxset_has(&f->inflight, idx);
  pthread_mutex_unlock(&f->mu);
  return r;
}

/* Whether a read by this route goes to the source: under a plan, a peer sends
 * what it routes to a peer (with a transport), and a cache route that misses
 * is read once when found missing, so neither is requested ahead. */
static bool reads_storage(const lade__fetch_t *f, int32_t route) {
  return !f->routed || route == LADE__ROUTE_ANY || route == LADE_FROM_STORAGE || (route >= 0 && !f->p.dist);
}

/* Whether a sample read ahead must be requested: not the prefetcher's, not
 * in a tier. The prefetcher's set is asked first: it leaves the set only
 * after its put, so a sample it just fetched is found in one or the other. */
static bool wanted(lade__fetch_t *f, uint64_t idx) { return !pf_inflight(f, idx) && !resident(f, idx); }

/* Requests the samples of one step that the source will be asked for: one
 * submit() per step, so the source's queue starts them step by step in the
 * order they will be used. from may be NULL (every sample reads storage). */
static void submit_step(lade__fetch_t *f, const uint64_t *idx, const int32_t *from, uint32_t n) {
  uint64_t stackbuf[512];
  uint64_t *want = n <= 512 ? stackbuf : malloc(n * sizeof *want);
  if (!want) return; /* the workers' reads then fetch one by one: slower, not wrong */
  size_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    if ((!from || reads_storage(f, from[i])) && wanted(f, idx[i])) want[k++] = idx[i];
  }
  if (k) f->p.ops->submit(f->p.src, want, k, 0);
  if (want != stackbuf) free(want);
}

/* *epochs: how many epochs from the start may be read ahead once step q is
 * planned; false when there is no bound. With a cache tier, an epoch's samples are requested ahead only once every
 * step of the epoch before was delivered (and so cached, as far as the tier
 * keeps it): planning step q means the steps up to q - window were
 * delivered (engine.c prepares [next_deliver, next_deliver + window)). Else
 * a sample the last steps of an epoch still read, and cache, would be
 * requested again for the next. Without a tier: no bound. */
static bool ahead_epochs(const lade__fetch_t *f, uint64_t q, uint64_t *epochs) {
  if (!(f->mem || f->disk) || !f->p.steps) return false;
  uint64_t window = (uint64_t)f->cfg->prefetch + 1;
  *epochs = (q + 1 > window ? q + 1 - window : 0) / f->p.steps + 1;
  return true;
}

/* Remote read-ahead: step q was planned; the steps up to q + ra_steps are
 * requested ahead, in chunks: when fewer than half of them are requested,
 * every step up to q + ra_steps not yet requested goes out in ONE submit(),
 * so the source can coalesce neighbours across steps (plan=shards streams a
 * shard through a shuffle buffer: the samples of one step are far apart,
 * those of 16 steps cover a stretch of the shard; remote tar shards were
 * read with 0.96 requests per sample when each step was submitted alone)
 * while it keeps the order of first use between its requests (tar_http.c).
 * The engine plans steps in order from one worker at a time; a seek moves
 * ra_next back to the new position (requests of abandoned steps are dropped
 * by the source's bound on unread results). */
static void read_ahead(lade__fetch_t *f, const lade__cursor_step_t *st) {
  uint64_t last = f->p.steps * f->cfg->epochs, q0 = st->q;
  pthread_mutex_lock(&f->mu);
  uint64_t from = LADE__MAX(f->ra_next, q0), to = LADE__MIN(q0 + f->ra_steps + 1, last);
  uint64_t ne;
  if (ahead_epochs(f, q0, &ne)) to = LADE__MAX(LADE__MIN(to, ne * f->p.steps), LADE__MIN(q0 + 1, last));
  /* the current step always; the rest once half of the read-ahead is used */
  if (from > q0 && from - q0 > f->ra_steps / 2) to = from;
  if (to > f->ra_next) f->ra_next = to;
  pthread_mutex_unlock(&f->mu);
  if (from >= to) return;
  uint32_t B = lade__cursor_max_batch(f->p.cursor);
  uint64_t *all = malloc((size_t)(to - from) * B * sizeof *all), *buf = malloc(B * sizeof *buf);
  size_t k = 0;
  for (uint64_t q = from; all && buf && q < to; q++) {
    const uint64_t *idx = st->idx;
    const int32_t *route = st->from;
    uint32_t n = st->n, valid = 0;
    if (q != q0) {
      if (lade__cursor_order(f->p.cursor, q, buf, &n, &valid) != 0) {
        lade__clear_error(); /* the step's own planning reports it */
        break;
      }
      idx = buf;
      route = NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
      if ((!route || reads_storage(f, route[i])) && wanted(f, idx[i])) all[k++] = idx[i];
    }
  }
  if (k) f->p.ops->submit(f->p.src, all, k, 0);
  else if (!all || !buf) submit_step(f, st->idx, st->from, st->n); /* no memory: the step alone */
  free(all);
  free(buf);
}

/* plan=shards over a remote source: step q was planned; the shard stream is
 * requested in read order up to where it covers the steps through q + R
 * (R * batch = sr_ahead samples): the sample delivered at position i of an
 * epoch entered the shuffle buffer at a stream position of at most i + cap
 * (shards.h), so positions below o + sr_ahead + batch + cap hold every
 * sample of those steps. Requested in chunks of half of sr_ahead, in one
 * submit() each: consecutive members of a shard coalesce into a few large
 * Range requests, as WebDataset reads a shard with one GET. A sample of the
 * stream still in the buffer after a seek (or a padding repeat) has no
 * request and is read alone when needed. */
static void stream_ahead(lade__fetch_t *f, const lade__cursor_step_t *st) {
  uint64_t S = f->p.steps, B = f->p.batch, C = f->sr_count;
  if (!S || !C) return;
  uint64_t e = st->q / S, o = (st->q % S) * B, end = C * f->cfg->epochs;
  uint64_t out = o + f->sr_ahead + B; /* output positions to cover, from epoch e's start */
  uint64_t goal = out < S * B ? e * C + LADE__MIN(C, out + f->sr_cap)
                              : (e + 1) * C + LADE__MIN(C, out - S * B + f->sr_cap);
  uint64_t need = e * C + LADE__MIN(C, o + B + f->sr_cap); /* step q's samples: now */
  uint64_t ne;
  if (ahead_epochs(f, st->q, &ne)) goal = LADE__MAX(LADE__MIN(goal, ne * C), need);
  goal = LADE__MIN(goal, end);
  pthread_mutex_lock(&f->mu);
  uint64_t from = f->sr_next;
  if (from < e * C) from = e * C; /* the consumer went ahead (a seek): what lies behind is not needed */
  uint64_t chunk = LADE__MAX(f->sr_ahead / 2, B);
  bool go = from < goal && (from < need || goal - from >= chunk || goal == end);
  if (go) f->sr_next = goal;
  pthread_mutex_unlock(&f->mu);
  if (!go) return;
  uint64_t *all = malloc((size_t)(goal - from) * sizeof *all), k = 0;
  if (!all) return; /* the workers' reads fetch one by one: slower, not wrong */
  for (uint64_t g = from; g < goal;) {
    uint64_t ep = g / C, pos = g % C, n = LADE__MIN(goal - g, C - pos), got = 0;
    if (lade__cursor_stream(f->p.cursor, ep, pos, n, all + k, &got) != 0) {
      lade__clear_error();
      break;
    }
    uint64_t w = k;
    for (uint64_t i = k; i < k + got; i++)
      if (wanted(f, all[i])) all[w++] = all[i];
    k = w;
    g += n;
  }
  if (k) f->p.ops->submit(f->p.src, all, k, 0);
  free(all);
}

void lade__fetch_step_planned(lade__fetch_t *f, const lade__cursor_step_t *st) {
  const uint64_t *idx = st->idx;
  uint32_t n = st->n;
  /* push what the other learners read from this cache in this step; a failure
   * to queue (memory) shows at the receivers, which time out naming this rank */
  if (f->p.dist && st->nsend && f->p.dist->ops->send(f->p.dist, st->q, st->send_dst, st->send_idx, st->nsend) != 0) {
    fprintf(stderr, "lade: %s\n", lade_last_error());
    lade__clear_error();
  }
  if (f->ptier)
    for (uint32_t i = 0; i < st->nadmit; i++) {
      uint64_t x = st->admit[i];
      atomic_store_explicit(&f->adm_q[x], st->q + 1, memory_order_relaxed);
      atomic_store_explicit(&f->adm_pending[x], 1, memory_order_release);
    }
  if (f->nu_on) {
    uint64_t e = f->p.steps ? st->q / f->p.steps : 0;
    ensure_map(f, e);
    ensure_map(f, e + 1);
  }
  if (f->pf_on) {
    /* before asking whether the prefetcher has its samples in flight: from
     * now on it does not take them (it checks plan_hi under mu as it adds) */
    pthread_mutex_lock(&f->mu);
    if (st->q + 1 > f->plan_hi) f->plan_hi = st->q + 1;
    if (++f->planned <= (uint64_t)f->cfg->prefetch + 1) pthread_cond_broadcast(&f->cv_pf);
    pthread_mutex_unlock(&f->mu);
  }
  if (f->p.ops->plan_batch) { /* a local source that coalesces reads (hdf5); cached samples are not read */
    uint64_t keep[512];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (reads_storage(f, st->from[i]) && !resident(f, idx[i])) keep[k++] = idx[i];
      if (k == 512 || i + 1 == n) f->p.ops->plan_batch(f->p.src, keep, k), k = 0;
    }
  }
  if (!f->remote) return;
  if (f->sr_on) {
    stream_ahead(f, st);
    return;
  }
  if (f->ra_steps) {
    read_ahead(f, st);
    return;
  }
  submit_step(f, idx, st->from, n);
}

int lade__fetch_serve(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out) {
  lade__fetch_t *f = ctx;
  (void)q;
  lade__cache_t *t = f->ptier ? f->ptier : f->mem;
  uint64_t ver = t && t == f->disk ? sample_version(f, idx) : 0;
  if (t && lade__cache_get_ver(t, idx, ver, out) == 0) return 0;
  /* admitted by a step whose read has not put it yet: ask again later */
  if (nonblock && f->adm_pending && atomic_load_explicit(&f->adm_pending[idx], memory_order_acquire))
    return LADE__DIST_AGAIN;
  if (t && f->adm_pending && wait_admit(f, idx) && lade__cache_get_ver(t, idx, ver, out) == 0) return 0;
  /* the plan says this cache holds it and it does not (bytes budget, a
   * resumed run): the peer still gets the right bytes, from storage */
  atomic_fetch_add_explicit(&f->served_storage, 1, memory_order_relaxed);
  return f->p.ops->read(f->p.src, idx, out);
}

void lade__fetch_step_done(lade__fetch_t *f, const lade__cursor_step_t *st) {
  /* the sends of this step read the cache as it was at the step's start */
  if (f->p.dist && st->nsend && f->p.dist->ops->wait_served(f->p.dist, st->q) != 0) {
    fprintf(stderr, "lade: %s\n", lade_last_error()); /* the receiver reports it too, naming this rank */
    lade__clear_error();
  }
  if (!f->ptier) return;
  for (uint32_t i = 0; i < st->nevict; i++) {
    uint64_t x = st->evict[i];
    /* admitted by this step too (evicted, then admitted again: the kinds
     * cancel an admit followed by an evict in one step) or by a later one:
     * the admit wins */
    pthread_mutex_lock(&f->plan_mu);
    if (atomic_load_explicit(&f->adm_q[x], memory_order_relaxed) < st->q + 1) lade__cache_evict(f->ptier, x);
    pthread_mutex_unlock(&f->plan_mu);
  }
  for (uint32_t i = 0; i < st->nadmit; i++) { /* admits whose read failed or was substituted */
    uint64_t x = st->admit[i];
    if (atomic_load_explicit(&f->adm_q[x], memory_order_relaxed) == st->q + 1 &&
        atomic_load_explicit(&f->adm_pending[x], memory_order_acquire))
      end_admit(f, x);
  }
}

bool lade__fetch_ready(lade__fetch_t *f, uint64_t idx) {
  if (resident(f, idx)) return true;
  if (pf_inflight(f, idx)) return false;
  return f->p.ops->ready ? f->p.ops->ready(f->p.src, idx) : true;
}

/* ----------------------------------------------------------- consumer */

void lade__fetch_consumed(lade__fetch_t *f, uint64_t pos) {
  if (f->nu_on) {
    pthread_mutex_lock(&f->nu_mu);
    f->nu_cursor = pos;
    pthread_mutex_unlock(&f->nu_mu);
  }
  pthread_mutex_lock(&f->mu);
  f->consumed = pos;
  pthread_cond_broadcast(&f->cv_pf);
  pthread_mutex_unlock(&f->mu);
  /* messages of delivered steps nobody read (a seek, a substitute) */
  if (f->p.dist && f->p.batch) f->p.dist->ops->forget_below(f->p.dist, pos / f->p.batch);
}

void lade__fetch_seek(lade__fetch_t *f, uint64_t pos) {
  pthread_mutex_lock(&f->mu);
  /* the admits of abandoned steps will not come: nobody waits for them */
  if (f->adm_pending)
    for (uint64_t i = 0; i < f->pp.samples; i++) atomic_store_explicit(&f->adm_pending[i], 0, memory_order_relaxed);
  pthread_cond_broadcast(&f->cv_admit);
  f->seek_gen++;
  f->pf_pos = pos;
  f->ra_next = f->p.batch ? pos / f->p.batch : 0;
  f->plan_hi = f->ra_next;
  if (f->sr_on && f->p.steps) { /* the stream from where the buffer may still hold samples of the new position */
    uint64_t e = f->ra_next / f->p.steps, o = (f->ra_next % f->p.steps) * f->p.batch;
    f->sr_next = e * f->sr_count + LADE__MIN(f->sr_count, o > f->sr_cap ? o - f->sr_cap : 0);
  }
  pthread_mutex_unlock(&f->mu);
  lade__fetch_consumed(f, pos);
}

/* --------------------------------------------------------- prefetcher */

static void *prefetch_main(void *arg) {
  lade__fetch_t *f = arg;
  uint64_t B = f->p.batch;
  /* pending: the samples submitted and not yet read, in plan order (a ring
   * of up to two windows, so the next window is in flight while the last
   * one is still arriving and the source never runs dry between windows) */
  size_t cap = (size_t)f->fetch_size * 2, head = 0, n = 0;
  /* of the ring's first entries, nsub are submitted: at most ra_samples
   * unread at once (a whole window in one submit overflowed the remote
   * source's table of unread results, which then dropped the very samples
   * needed next, and made the first sample wait for the whole window) */
  size_t nsub = 0, chunk = f->ra_samples ? (size_t)LADE__MAX(f->ra_samples / 2, 1) : cap;
  uint64_t *batch = malloc(B * sizeof *batch);
  uint64_t *want = malloc(LADE__MAX(f->fetch_size, (uint64_t)LADE__MIN(chunk, cap)) * sizeof *want);
  uint64_t *ring = malloc(cap * sizeof *ring);
  lade__buf_t buf = {0};
  if (!batch || !want || !ring) {
    /* without its memory the prefetcher does nothing; reads still work */
    atomic_fetch_add_explicit(&f->pf_errors, 1, memory_order_relaxed);
    free(batch);
    free(want);
    free(ring);
    return NULL;
  }
  /* the engine fetches its own window (prefetch + 1 batches) itself */
  uint64_t window = (uint64_t)(f->cfg->prefetch + 1) * B;
  uint64_t first = LADE__MIN((uint64_t)f->cfg->prefetch + 1, f->p.steps * f->cfg->epochs);
  pthread_mutex_lock(&f->mu);
  uint64_t gen = f->seek_gen;
  for (;;) {
    if (f->stop) break;
    /* start once the engine's first window is submitted: a remote source
     * starts requests in submission order, so speculative ones sent before
     * would hold every connection while the first batch waits */
    if (f->planned < first && f->consumed == 0) {
      pthread_cond_wait(&f->cv_pf, &f->mu);
      continue;
    }
    if (f->seek_gen != gen) { /* a seek: what is pending belongs to the old position */
      for (; n; n--, head = (head + 1) % cap) idxset_del(&f->inflight, ring[head]);
      head = 0;
      nsub = 0;
      gen = f->seek_gen;
      pthread_cond_broadcast(&f->cv_inflight);
    }
    uint64_t lo = f->consumed + window;
    if (f->pf_pos < lo) f->pf_pos = lo; /* the consumer overtook us: skip ahead */
    if (f->pf_pos < f->total && f->pf_pos - f->consumed <= f->threshold + window && n + f->fetch_size <= cap) {
      /* DELI's trigger: the samples fetched (or in flight) ahead of the
       * consumer fell to the threshold: fetch the next fetch_size */
      uint64_t start = f->pf_pos, end = LADE__MIN(start + f->fetch_size, f->total);
      f->pf_pos = end;
      pthread_mutex_unlock(&f->mu);
      /* the window's samples in plan order, minus those cached or repeated */
      size_t k = 0;
      for (uint64_t q = start / B; q * B < end; q++) {
        uint32_t cnt, valid;
        if (lade__cursor_order(f->p.cursor, q, batch, &cnt, &valid) != 0) break;
        for (uint64_t i = 0; i < cnt; i++) {
          uint64_t pos = q * B + i;
          if (pos < start || pos >= end || lade__cache_contains(f->disk, batch[i])) continue;
          pthread_mutex_lock(&f->mu);
          /* a step the engine planned meanwhile is the engine's to fetch */
          bool added = q >= f->plan_hi && idxset_add(&f->inflight, batch[i]);
          pthread_mutex_unlock(&f->mu);
          if (added) want[k++] = batch[i];
        }
      }
      for (size_t j = 0; j < k; j++) ring[(head + n + j) % cap] = want[j];
      pthread_mutex_lock(&f->mu);
      n += k;
      continue;
    }
    if (n == 0) {
      pthread_cond_wait(&f->cv_pf, &f->mu);
      continue;
    }
    if (nsub < n && nsub <= chunk) {
      /* the next chunk in flight, in the background (the workers' own
       * misses, the batch the consumer needs now, start first), while the
       * last one still arrives */
      size_t k = LADE__MIN(chunk, n - nsub);
      for (size_t j = 0; j < k; j++) want[j] = ring[(head + nsub + j) % cap];
      nsub += k;
      pthread_mutex_unlock(&f->mu);
      if (f->p.ops->submit) f->p.ops->submit(f->p.src, want, k, 1);
      pthread_mutex_lock(&f->mu);
      continue;
    }
    uint64_t idx = ring[head];
    pthread_mutex_unlock(&f->mu);
    uint64_t ver = sample_version(f, idx);
    if (f->p.ops->read(f->p.src, idx, &buf) == 0) {
      if (ver != LADE__VERSION_UNKNOWN) lade__cache_put_ver(f->disk, idx, ver, buf.data, buf.len);
      atomic_fetch_add_explicit(&f->prefetched, 1, memory_order_relaxed);
    } else {
      atomic_fetch_add_explicit(&f->pf_errors, 1, memory_order_relaxed); /* the worker's own read reports it */
    }
    pthread_mutex_lock(&f->mu);
    if (f->seek_gen == gen) { /* else the seek branch above drops the ring, this one included */
      idxset_del(&f->inflight, idx);
      head = (head + 1) % cap;
      n--;
      nsub--;
    }
    pthread_cond_broadcast(&f->cv_inflight);
    pthread_mutex_unlock(&f->mu);
    if (f->p.src->on_ready) f->p.src->on_ready(f->p.src->on_ready_ctx);
    pthread_mutex_lock(&f->mu);
  }
  for (; n; n--, head = (head + 1) % cap) idxset_del(&f->inflight, ring[head]);
  pthread_cond_broadcast(&f->cv_inflight);
  pthread_mutex_unlock(&f->mu);
  lade__buf_free(&buf);
  free(batch);
  free(want);
  free(ring);
  return NULL;
}

/* ---------------------------------------------------------------- stats */

void lade__fetch_stats(lade__fetch_t *f, lade__fetch_stats_t *out) {
  memset(out, 0, sizeof *out);
  for (int t = 0; t < LADE__TIER_COUNT; t++) {
    out->samples[t] = atomic_load(&f->samples[t]);
    out->bytes[t] = atomic_load(&f->bytes[t]);
  }
  out->misses = atomic_load(&f->misses);
  out->prefetched = atomic_load(&f->prefetched);
  out->prefetch_errors = atomic_load(&f->pf_errors);
  out->waited_prefetch = atomic_load(&f->waited);
  out->plan_hits = atomic_load(&f->plan_hits);
  out->plan_fallbacks = atomic_load(&f->plan_fallbacks);
  out->plan_peer = atomic_load(&f->plan_peer);
  out->served_from_storage = atomic_load(&f->served_storage);
  if (f->p.dist) f->p.dist->ops->stats(f->p.dist, &out->dist);
  if (f->disk) {
    lade__cache_stats_t cs;
    lade__cache_stats(f->disk, &cs);
    out->corrupt = cs.corrupt;
    out->stale = cs.stale;
  }
  if (f->p.ops->stats) f->p.ops->stats(f->p.src, &out->src);
  out->fetch_size = f->fetch_size;
  out->threshold = f->threshold;
}
