/*
 * fetch.c - the fetch stage: a sample's bytes by its route, as chains of
 * tiers (fetch_impl.h), the plan-driven tier, and the hooks the engine
 * calls as steps are planned, read and delivered.
 *
 * Chains. At open, each route gets one chain of hops, and every read walks
 * its chain in one loop (read_chain): the first hop that has the bytes
 * wins, the hops before it marked FILL get them, a hit refreshes the hops
 * after it marked TOUCH. The write-back rules are data on the chain:
 *
 *   any tier (the regular plan)  memory [claim and fill unless routed] -> disk
 *                                [versioned, touch, wait for the prefetcher,
 *                                fill unless the prefetcher fills it or
 *                                routed; a node's shared folder: claim and
 *                                fill unless routed] -> source
 *   own cache (routed)           the plan's tier [wait for its admit,
 *                                planned, fill] -> source; admits
 *   own cache, two tiers         the plan's tier of the read (memory or
 *                                disk) [wait for an earlier step's move
 *                                of it, wait for its admit, planned,
 *                                fill] -> the other tier [planned: a move
 *                                not applied yet] -> source; admits
 *   storage (routed)             source; admits
 *   peer K (routed)              the transport; admits (without one: the
 *                                source, reported as a peer read from storage)
 *   peer K of this node          the node's segment [wait for K's admit,
 *   (node-aware plan, node       planned] -> source; admits
 *   cache)
 *
 * Claims (issue 30): the memory hop of "any tier" claims its miss
 * (lade__cache_get_claim), so another worker of this process (at an
 * epoch's boundary, the next step's) or another rank of the node (the node
 * cache) that misses the same sample waits for this read instead of reading
 * storage too. So does the disk hop of a node's shared folder (node mode,
 * cache/claims.h: a claim file beside the entry), where the DELI prefetchers
 * of the node's ranks claim each request too: a sample one rank is fetching
 * is waited for by the others, not fetched again. read_chain ends the
 * claims on every path: the hops are FILL, so a read that found the bytes
 * (disk tier or source) puts them, and the put ends them, stored or
 * refused; a failed read releases them.
 *
 * Routed plans (every kind but regular and shards; cursor/cursor.h): the
 * plan's tier follows the plan, admits as reads put, evicts as steps end,
 * and with two tiers moves between them; how, and why reads wait, is the
 * plan tier's essay (plantier.h).
 *
 * Locks: this file holds none of its own. Each piece it composes owns its
 * lock (nextuse.h, readahead.h, prefetch.h, plantier.h, each says its rule
 * at its top); no piece calls another or this file while holding its lock,
 * except that a cache tier calls the next-use maps under the tier's lock
 * (order: cache lock, then the maps' lock). The engine's callback
 * (on_ready) is called with no lock held.
 */
#include "engine/fetch.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "engine/fetch_impl.h"

/* The dataset's identity for the disk tier: where the source is (a URI as
 * given, a local path made absolute, symlinks resolved, so two datasets
 * both called `ds` never share entries), its size, and a digest of every
 * sample's name, so a changed listing (samples added or removed, which
 * shifts indices) never reuses entries. Sizes are not in it: a sample
 * whose bytes changed is caught by its own version (lade__fetch_version). */
static void dataset_ns(lade__fetch_t *f, char *ns, size_t size) {
  uint64_t h = f->p.names_digest;
  const char *where = f->conf.source;
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
uint64_t lade__fetch_version(lade__fetch_t *f, uint64_t idx) {
  if (!f->disk) return 0;
  if (f->remote && !f->p.ops->version) {
    const uint64_t size = f->p.src->sizes && idx < f->p.src->count ? f->p.src->sizes[idx] : 0;
    /* a 1-byte object's size is LADE__VERSION_UNKNOWN's value, which would
     * keep it out of the disk tier (read again each epoch, and by a worker
     * and the prefetcher both): moved out of its way */
    return size == LADE__VERSION_UNKNOWN ? size | (UINT64_C(1) << 63) : size;
  }
  return f->p.ops->version ? f->p.ops->version(f->p.src, idx) : LADE__VERSION_UNKNOWN;
}


bool lade__fetch_resident(lade__fetch_t *f, uint64_t idx) {
  return (f->mem && lade__cache_contains(f->mem, idx)) || (f->disk && lade__cache_contains(f->disk, idx));
}

/* ---------------------------------------------------------------- chains */

static void hop_add(lade__chain_t *c, int kind, lade__cache_t *cache, unsigned flags) {
  if (kind == LADE__HOP_CACHE && !cache) return;
  c->hop[c->n++] = (lade__hop_t){.kind = kind, .cache = cache, .flags = flags};
}

static void make_chains(lade__fetch_t *f) {
  bool routed = f->routed, pf = f->pf_on;
  lade__chain_t *c = &f->chain[LADE__CHAIN_ANY];
  hop_add(c, LADE__HOP_CACHE, f->mem, routed ? 0 : LADE__HOP_FILL | LADE__HOP_CLAIM);
  /* a node's shared disk folder: a miss claims the sample node-wide and the read fills it, prefetcher or not,
   * so the node's ranks read each sample from storage once between them */
  bool node = f->conf.node_disk && !routed;
  hop_add(c, LADE__HOP_CACHE, f->disk,
          LADE__HOP_VERSIONED | LADE__HOP_TOUCH | (pf ? LADE__HOP_WAIT_PF : 0) |
              ((pf && !node) || routed ? 0 : LADE__HOP_FILL) | (node ? LADE__HOP_CLAIM : 0));
  hop_add(c, LADE__HOP_SOURCE, NULL, 0);
  unsigned own = LADE__HOP_WAIT_ADMIT | LADE__HOP_PLANNED | LADE__HOP_FILL | (f->plan_disk ? LADE__HOP_WAIT_MOVE : 0);
  c = &f->chain[LADE__CHAIN_OWN];
  hop_add(c, LADE__HOP_CACHE, f->plan_tier, own);
  hop_add(c, LADE__HOP_CACHE, f->plan_disk, LADE__HOP_PLANNED);
  hop_add(c, LADE__HOP_SOURCE, NULL, 0);
  c->admits = true;
  c = &f->chain[LADE__CHAIN_OWN_DISK];
  hop_add(c, LADE__HOP_CACHE, f->plan_disk, own);
  hop_add(c, LADE__HOP_CACHE, f->plan_disk ? f->plan_tier : NULL, LADE__HOP_PLANNED);
  hop_add(c, LADE__HOP_SOURCE, NULL, 0);
  c->admits = true;
  c = &f->chain[LADE__CHAIN_STORAGE];
  hop_add(c, LADE__HOP_SOURCE, NULL, 0);
  c->admits = true;
  c = &f->chain[LADE__CHAIN_PEER];
  hop_add(c, f->p.dist ? LADE__HOP_PEER : LADE__HOP_SOURCE, NULL, 0);
  c->admits = true;
  c->note = f->p.dist ? LADE__ROUTE_MET : LADE__ROUTE_PEER_STORAGE;
  c = &f->chain[LADE__CHAIN_NODE];
  hop_add(c, LADE__HOP_CACHE, f->conf.node_plan ? f->plan_tier : NULL, LADE__HOP_WAIT_NODE | LADE__HOP_PLANNED);
  hop_add(c, LADE__HOP_SOURCE, NULL, 0);
  c->admits = true;
}

/* ---------------------------------------------------------------- open */

/* The read-ahead's `wanted`: not requested by the prefetcher, not in a
 * tier. The prefetcher's set is asked first (lade__prefetch_take_ahead,
 * which makes the sample the engine's): it leaves the set only after its
 * put, so a sample it just fetched is found in one or the other. */
static bool wanted_ahead(void *ctx, uint64_t idx) {
  lade__fetch_t *f = ctx;
  if (!lade__prefetch_take_ahead(&f->pf, idx)) return false;
  if (!lade__fetch_resident(f, idx)) return true;
  lade__prefetch_untake(&f->pf, idx);
  return false;
}

static uint64_t version_of(void *ctx, uint64_t idx) { return lade__fetch_version(ctx, idx); }

int lade__fetch_open(lade__fetch_t **out, const lade__fetch_params_t *p) {
  *out = NULL;
  lade__fetch_t *f = calloc(1, sizeof *f);
  if (!f) return lade__fail(LADE_ENOMEM, "fetch: out of memory");
  f->p = *p;
  f->conf = *p->conf;
  f->samples_n = p->src->count;
  f->per_epoch = p->steps * p->batch;
  f->total = f->per_epoch * f->conf.epochs;
  f->remote = p->ops->submit != NULL;
  f->routed = f->conf.routed;
  /* no memory for the maps: LRU, the next best without them */
  f->nu_on = f->conf.next_use &&
             lade__nextuse_open(&f->nu, p->cursor, f->samples_n, p->steps, p->batch, f->conf.epochs);
  if (f->conf.next_use && !f->nu_on) f->conf.policy = LADE__CACHE_LRU;
  int rc = 0;
  const lade__fetch_conf_t *c = &f->conf;
  if (!rc && c->mem_capacity) {
    lade__cache_opts_t o = {.dir = NULL, .ns = c->source, .capacity = c->mem_capacity, .policy = c->policy,
                            .next_use = lade__nextuse, .next_use_ctx = &f->nu};
    char ns[LADE__PATH_MAX + 128];
    if (c->node_cache) { /* one per node: its name says which job and which dataset it holds */
      dataset_ns(f, ns, sizeof ns);
      if (c->node_plan) /* and which loader: a plan's starts empty */
        snprintf(ns + strlen(ns), sizeof ns - strlen(ns), "|plan %016llx", (unsigned long long)c->node_nonce);
      o.ns = ns;
      o.node_dir = c->shm_dir;
      o.node_job = c->job_key;
      o.node_slots = c->node_slots;
      o.node_timeout_ms = c->node_timeout_ms;
    }
    rc = lade__cache_open(&f->mem, &o);
  }
  if (!rc && c->cache_dir[0]) {
    char ns[LADE__PATH_MAX + 128];
    dataset_ns(f, ns, sizeof ns);
    lade__cache_opts_t o = {.dir = c->cache_dir, .ns = ns, .capacity = c->disk_capacity, .policy = c->policy,
                            .next_use = lade__nextuse, .next_use_ctx = &f->nu};
    if (c->node_disk) { /* one folder for the node's ranks of this job */
      o.node_job = c->job_key;
      o.node_timeout_ms = c->node_timeout_ms;
    }
    rc = lade__cache_open(&f->disk, &o);
    /* the plan's model starts empty at (0, 0): entries of an earlier run would
     * hold room the plan does not know of, so they go */
    if (!rc && f->routed && !c->warm) lade__cache_clear(f->disk);
  }
  f->pf_on = !rc && c->prefetcher && f->disk;
  if (!rc && f->routed) { /* the tiers the plan drives: memory, else disk; two tiers: the disk under memory */
    f->plan_tier = f->mem ? f->mem : f->disk;
    f->plan_disk = c->two_tiers && f->mem ? f->disk : NULL;
    rc = lade__plantier_open(&f->pt, f->plan_tier, f->plan_disk, f->samples_n, lade__cursor_first(p->cursor),
                             lade_plan_kind_name(lade__cursor_kind(p->cursor)));
  }
  if (!rc && c->node_plan) {
    lade__nodeplan_params_t np = {.node = f->mem, .dist = p->dist, .base = c->node_base, .ranks = c->node_ranks,
                                  .local = c->node_local, .timeout_ms = c->node_timeout_ms};
    lade__nodeplan_open(&f->np, &np, lade__cursor_first(p->cursor));
  }
  make_chains(f);
  if (!rc) {
    lade__readahead_params_t rp = {.src = p->src, .ops = p->ops, .cursor = p->cursor, .steps = p->steps,
                                   .batch = p->batch, .epochs = c->epochs, .window = (uint64_t)c->window,
                                   .ra_steps = c->ra_steps, .ra_samples = c->ra_samples,
                                   .mean_bytes = c->mean_bytes, .routed = f->routed, .peers = p->dist != NULL,
                                   .tiers = f->mem || f->disk, .wanted = wanted_ahead, .ctx = f};
    lade__readahead_open(&f->ra, &rp);
  }
  if (!rc && f->pf_on) {
    lade__prefetch_params_t pp = {.src = p->src, .ops = p->ops, .cursor = p->cursor, .disk = f->disk,
                                  .batch = p->batch, .steps = p->steps, .epochs = c->epochs,
                                  .window = (uint64_t)c->window, .fetch_size = c->fetch_size,
                                  .threshold = c->threshold, .ra_samples = c->ra_samples,
                                  .node = c->node_disk, .version = version_of, .ctx = f};
    rc = lade__prefetch_start(&f->pf, &pp);
  }
  if (rc) {
    lade__fetch_close(f);
    return rc;
  }
  *out = f;
  return 0;
}

int lade__fetch_survivors(lade__fetch_t *f, bool keep, uint64_t most, uint64_t **keys, uint64_t *n) {
  *keys = NULL;
  *n = 0;
  if (!f->disk) return 0;
  if (!keep) {
    lade__cache_clear(f->disk);
    return 0;
  }
  uint64_t *k = malloc((f->samples_n ? f->samples_n : 1) * sizeof *k), m = 0;
  if (!k)
    return lade__fail(LADE_ENOMEM, "out of memory for the disk cache's %llu keys", (unsigned long long)f->samples_n);
  lade__buf_t b = {0};
  for (uint64_t i = 0; i < f->samples_n; i++) {
    if (!lade__cache_contains(f->disk, i)) continue;
    /* a stale or corrupt entry is removed and counted by the get */
    if (m < most && lade__cache_get_ver(f->disk, i, lade__fetch_version(f, i), &b) == 0) k[m++] = i;
    else lade__cache_evict(f->disk, i);
    lade__clear_error();
  }
  lade__buf_free(&b);
  *keys = k;
  *n = m;
  return 0;
}

void lade__fetch_drop(lade__fetch_t *f, uint64_t key) {
  if (f->disk) lade__cache_evict(f->disk, key);
}

void lade__fetch_quiesce(lade__fetch_t *f) {
  if (!f) return;
  atomic_store(&f->stop, true);
  lade__plantier_quiesce(&f->pt);
  lade__prefetch_quiesce(&f->pf);
}

void lade__fetch_close(lade__fetch_t *f) {
  if (!f) return;
  lade__fetch_quiesce(f);
  lade__prefetch_close(&f->pf);
  lade__cache_close(f->mem);
  lade__cache_close(f->disk);
  lade__nextuse_close(&f->nu);
  lade__readahead_close(&f->ra);
  lade__plantier_close(&f->pt);
  lade__nodeplan_close(&f->np);
  free(f);
}

bool lade__fetch_cached(const lade__fetch_t *f) { return f->mem || f->disk; }
bool lade__fetch_every_step(const lade__fetch_t *f) { return f->plan_disk != NULL || f->conf.node_plan; }
bool lade__fetch_async(const lade__fetch_t *f) { return f->remote || f->pf_on; }

/* ---------------------------------------------------------------- reads */

static void count(lade__fetch_t *f, int tier, size_t len) {
  atomic_fetch_add_explicit(&f->samples[tier], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&f->bytes[tier], len, memory_order_relaxed);
}

/* A cache hop: a hit, after the waits its flags ask for. *claimed: the
 * hop's miss was claimed (CLAIM: the memory tier, or the node's disk
 * folder): the read must put it or release. *took: the sample was taken
 * from this process's prefetcher (WAIT_PF), so the read puts it into this
 * tier in the prefetcher's place. */
static bool hop_get(lade__fetch_t *f, const lade__hop_t *h, uint64_t idx, uint64_t q, int32_t route, uint64_t ver,
                    lade__buf_t *out, bool *claimed, bool *took, int *fail) {
  if (h->flags & LADE__HOP_WAIT_NODE) return lade__nodeplan_get(&f->np, idx, q, route, ver, out, fail, &f->stop);
  if (h->flags & LADE__HOP_WAIT_MOVE) lade__plantier_wait_move(&f->pt, idx, q);
  for (int pass = 0;; pass++) {
    /* a claiming hop claims on its last look (after the wait for this process's prefetcher) */
    if ((h->flags & LADE__HOP_CLAIM) && !((h->flags & LADE__HOP_WAIT_PF) && pass == 0))
      return lade__cache_get_claim(h->cache, idx, ver, out, claimed) == 0;
    if (lade__cache_get_ver(h->cache, idx, ver, out) == 0) return true;
    /* the prefetcher may be fetching this very sample: wait for it rather
     * than send a second request. Then the tier is asked again even if
     * nothing was waited for: the prefetcher may have put the sample and
     * left its set between the miss above and this look at the set (it
     * leaves the set only after the put) */
    if ((h->flags & LADE__HOP_WAIT_PF) && pass == 0) {
      *took = lade__prefetch_wait(&f->pf, idx) == LADE__PF_TAKEN;
      continue;
    }
    if ((h->flags & LADE__HOP_WAIT_ADMIT) && lade__plantier_wait_admit(&f->pt, idx)) continue;
    return false;
  }
}

static int read_chain(lade__fetch_t *f, const lade__chain_t *c, uint64_t idx, uint64_t q, int32_t route,
                      lade__buf_t *out, int *tier, int *note) {
  uint64_t ver = lade__fetch_version(f, idx);
  bool known = ver != LADE__VERSION_UNKNOWN;
  *note = c->note;
  if (c->note == LADE__ROUTE_PEER_STORAGE) atomic_fetch_add_explicit(&f->plan_peer, 1, memory_order_relaxed);
  int i = 0, nclaim = 0;
  lade__cache_t *claim[LADE__MAX_HOPS], *fill_too = NULL;
  for (; i < c->n; i++) {
    const lade__hop_t *h = &c->hop[i];
    if (h->kind != LADE__HOP_CACHE) break;
    if ((h->flags & LADE__HOP_VERSIONED) && !known) continue;
    bool claimed = false, took = false;
    int fail = 0;
    bool hit = hop_get(f, h, idx, q, route, ver, out, &claimed, &took, &fail);
    if (took) fill_too = h->cache; /* taken from the prefetcher, whose put it was to be */
    if (fail) {
      while (nclaim) lade__cache_release(claim[--nclaim], idx);
      return fail;
    }
    if (claimed) claim[nclaim++] = h->cache;
    if (!hit) {
      /* the plan's cache does not hold it: a fallback unless the next hop is the own cache's other tier */
      bool last = i + 1 >= c->n || !(c->hop[i + 1].flags & LADE__HOP_PLANNED);
      if ((h->flags & LADE__HOP_PLANNED) && last) {
        atomic_fetch_add_explicit(&f->plan_fallbacks, 1, memory_order_relaxed);
        *note = LADE__ROUTE_FALLBACK;
      }
      continue;
    }
    if (h->flags & LADE__HOP_PLANNED) atomic_fetch_add_explicit(&f->plan_hits, 1, memory_order_relaxed);
    *tier = h->cache == f->mem ? LADE__TIER_MEM : LADE__TIER_DISK;
    count(f, *tier, out->len);
    for (int j = i + 1; j < c->n; j++) /* keep the tiers below's policy state true */
      if (c->hop[j].flags & LADE__HOP_TOUCH) lade__cache_touch(c->hop[j].cache, idx);
    break;
  }
  int rc = 0;
  bool admit = false;
  if (i < c->n && c->hop[i].kind != LADE__HOP_CACHE) { /* the last hop: the source or a peer */
    bool peer = c->hop[i].kind == LADE__HOP_PEER;
    admit = c->admits && lade__plantier_admitting(&f->pt, idx, q);
    lade__clear_error();
    rc = peer ? lade__transport_recv(f->p.dist, q, idx, (uint32_t)route, out) : f->p.ops->read(f->p.src, idx, out);
    if (!rc && peer && f->p.src->sizes && out->len != f->p.src->sizes[idx]) {
      /* the listing knows the size (object stores, tar shards): the peer's copy differs from this one */
      char name[LADE__PATH_MAX + 64];
      f->p.ops->describe(f->p.src, idx, name, sizeof name);
      rc = lade__fail(LADE_EIO, "sample %llu (%s) of step %llu came from rank %d with %zu bytes; this learner's "
                      "listing says %llu: the learners' copies of the dataset differ", (unsigned long long)idx, name,
                      (unsigned long long)q, route, out->len, (unsigned long long)f->p.src->sizes[idx]);
    }
    if (!rc) {
      *tier = peer ? LADE__TIER_PEER : LADE__TIER_STORAGE;
      count(f, *tier, out->len);
      if (!peer && (f->mem || f->disk)) atomic_fetch_add_explicit(&f->misses, 1, memory_order_relaxed);
    }
  }
  if (!rc) { /* the bytes go to the hops before the one that had them, as marked */
    lade__cache_t *at = admit ? lade__plantier_admit_tier(&f->pt, idx) : NULL;
    for (int j = 0; j < i && j < c->n; j++) {
      const lade__hop_t *h = &c->hop[j];
      if (!((h->flags & LADE__HOP_FILL) || h->cache == fill_too) || ((h->flags & LADE__HOP_VERSIONED) && !known))
        continue;
      if (h->cache == at) at = NULL;
      lade__plantier_put(&f->pt, h->cache, idx, ver, out->data, out->len);
    }
    if (at) lade__plantier_put_admit(&f->pt, at, idx, ver, out->data, out->len); /* an admit of this step */
  }
  if (admit) lade__plantier_end_admit(&f->pt, idx);
  /* a put ended it otherwise (the claiming hop is FILL: every read that found the bytes put them there) */
  while (rc && nclaim) lade__cache_release(claim[--nclaim], idx);
  return rc;
}

int lade__fetch_read(lade__fetch_t *f, uint64_t idx, uint64_t q, int32_t route, lade__buf_t *out, int *tier,
                     int *note) {
  int ch = LADE__CHAIN_ANY;
  if (f->routed && route != LADE__ROUTE_ANY)
    ch = route == LADE_FROM_CACHE       ? LADE__CHAIN_OWN
         : route == LADE__ROUTE_OWN_DISK ? (f->plan_disk ? LADE__CHAIN_OWN_DISK : LADE__CHAIN_OWN)
         : route == LADE_FROM_STORAGE    ? LADE__CHAIN_STORAGE
         : lade__nodeplan_is_node_rank(&f->np, route) ? LADE__CHAIN_NODE
                                                         : LADE__CHAIN_PEER;
  else
    lade__nextuse_mark(&f->nu, idx, q);
  return read_chain(f, &f->chain[ch], idx, q, route, out, tier, note);
}

int lade__fetch_view(lade__fetch_t *f, uint64_t idx, uint64_t q, int32_t route, lade__fetch_view_t *v) {
  if (!f->conf.node_cache || !f->mem || (f->routed && route != LADE__ROUTE_ANY)) return LADE_ENOENT;
  lade__nextuse_mark(&f->nu, idx, q);
  const void *p = NULL;
  int rc = lade__cache_view(f->mem, idx, lade__fetch_version(f, idx), &p, &v->len, &v->token);
  v->data = p;
  return rc ? LADE_ENOENT : 0;
}

bool lade__fetch_view_done(lade__fetch_t *f, uint64_t idx, const lade__fetch_view_t *v) {
  if (!lade__cache_view_ok(f->mem, v->token)) return false;
  count(f, LADE__TIER_MEM, v->len);
  const lade__chain_t *c = &f->chain[LADE__CHAIN_ANY]; /* as read_chain does for a hit of its first hop */
  for (int j = 1; j < c->n; j++)
    if (c->hop[j].flags & LADE__HOP_TOUCH) lade__cache_touch(c->hop[j].cache, idx);
  return true;
}

void lade__fetch_step_planned(lade__fetch_t *f, const lade__cursor_step_t *st) {
  const uint64_t *idx = st->idx;
  uint32_t n = st->n;
  /* push what the other learners read from this cache in this step (with
   * the node's cache, the other nodes'); a failure to queue (memory) shows
   * at the receivers, which time out naming this rank */
  const uint64_t *sidx;
  const uint32_t *sdst;
  uint32_t nsend;
  lade__nodeplan_sends(&f->np, st, &sidx, &sdst, &nsend);
  if (f->p.dist && nsend && lade__transport_send(f->p.dist, st->q, sdst, sidx, nsend) != 0) {
    fprintf(stderr, "lade: %s\n", lade_last_error());
    lade__clear_error();
  }
  lade__plantier_planned(&f->pt, st);
  if (f->nu_on) {
    uint64_t e = f->p.steps ? st->q / f->p.steps : 0;
    lade__nextuse_ensure(&f->nu, e);
    lade__nextuse_ensure(&f->nu, e + 1);
  }
  lade__prefetch_planned(&f->pf, st->q);
  if (f->p.ops->plan_batch) { /* a local source that coalesces reads (hdf5); cached samples are not read */
    uint64_t keep[512];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (lade__readahead_reads_storage(&f->ra, st->from[i]) && !lade__fetch_resident(f, idx[i])) keep[k++] = idx[i];
      if (k == 512 || i + 1 == n) f->p.ops->plan_batch(f->p.src, keep, k), k = 0;
    }
  }
  lade__readahead_step(&f->ra, st);
}

int lade__fetch_serve(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out) {
  lade__fetch_t *f = ctx;
  lade__plantier_t *pt = &f->pt;
  lade__cache_t *t = pt->tier ? pt->tier : f->mem;
  uint64_t ver = t && t == f->disk ? lade__fetch_version(f, idx) : 0;
  if (pt->disk) { /* two tiers: where an earlier step's move put it, memory first */
    if (nonblock && lade__plantier_move_pending(pt, idx, q)) return LADE__DIST_AGAIN;
    lade__plantier_wait_move(pt, idx, q);
    ver = lade__fetch_version(f, idx);
    if (lade__cache_get_ver(t, idx, ver, out) == 0) return 0;
    if (lade__cache_get_ver(pt->disk, idx, ver, out) == 0) {
      atomic_fetch_add_explicit(&f->served_disk, 1, memory_order_relaxed);
      return 0;
    }
  } else if (t && lade__cache_get_ver(t, idx, ver, out) == 0) {
    return 0;
  }
  /* admitted by a step whose read has not put it yet: ask again later */
  if (nonblock && lade__plantier_pending(pt, idx)) return LADE__DIST_AGAIN;
  if (t && lade__plantier_wait_admit(pt, idx)) {
    t = pt->disk ? lade__plantier_admit_tier(pt, idx) : t;
    if (lade__cache_get_ver(t, idx, ver, out) == 0) {
      if (t == pt->disk) atomic_fetch_add_explicit(&f->served_disk, 1, memory_order_relaxed);
      return 0;
    }
  }
  /* the plan says this cache holds it and it does not (bytes budget, a
   * resumed run): the peer still gets the right bytes, from storage */
  atomic_fetch_add_explicit(&f->served_storage, 1, memory_order_relaxed);
  return f->p.ops->read(f->p.src, idx, out);
}

int lade__fetch_step_done(lade__fetch_t *f, const lade__cursor_step_t *st) {
  /* the sends of this step read the cache as it was at the step's start */
  if (f->p.dist && st->nsend && lade__transport_wait_served(f->p.dist, st->q) != 0) {
    fprintf(stderr, "lade: %s\n", lade_last_error()); /* the receiver reports it too, naming this rank */
    lade__clear_error();
  }
  if (!f->plan_tier) return 0;
  int rc = lade__nodeplan_step_done(&f->np, st);
  if (!rc) lade__plantier_done(&f->pt, st, version_of, f);
  return rc;
}

bool lade__fetch_ready(lade__fetch_t *f, uint64_t idx) {
  if (lade__fetch_resident(f, idx)) return true;
  if (lade__prefetch_inflight(&f->pf, idx)) return false;
  return f->p.ops->ready ? f->p.ops->ready(f->p.src, idx) : true;
}

/* ----------------------------------------------------------- consumer */

void lade__fetch_consumed(lade__fetch_t *f, uint64_t pos) {
  lade__nextuse_consumed(&f->nu, pos);
  lade__prefetch_consumed(&f->pf, pos);
  /* messages of delivered steps nobody read (a seek, a substitute) */
  if (f->p.dist && f->p.batch) lade__transport_forget_below(f->p.dist, pos / f->p.batch);
}

void lade__fetch_seek(lade__fetch_t *f, uint64_t pos) {
  uint64_t q = f->p.batch ? pos / f->p.batch : 0;
  lade__nodeplan_mark(&f->np, q);
  lade__plantier_seek(&f->pt, q); /* the admits and moves of abandoned steps will not come */
  lade__prefetch_seek(&f->pf, pos, q);
  lade__readahead_seek(&f->ra, q);
  lade__fetch_consumed(f, pos);
}

/* ---------------------------------------------------------------- stats */

void lade__fetch_stats(lade__fetch_t *f, lade__fetch_stats_t *out) {
  memset(out, 0, sizeof *out);
  for (int t = 0; t < LADE__TIER_COUNT; t++) {
    out->samples[t] = atomic_load(&f->samples[t]);
    out->bytes[t] = atomic_load(&f->bytes[t]);
  }
  out->misses = atomic_load(&f->misses);
  lade__prefetch_counts(&f->pf, &out->prefetched, &out->prefetch_errors, &out->waited_prefetch);
  out->plan_hits = atomic_load(&f->plan_hits);
  out->plan_fallbacks = atomic_load(&f->plan_fallbacks);
  out->plan_peer = atomic_load(&f->plan_peer);
  out->served_from_storage = atomic_load(&f->served_storage);
  out->served_from_disk = atomic_load(&f->served_disk);
  lade__plantier_counts(&f->pt, out->admits, &out->moves_up, &out->moves_down);
  if (f->p.dist) lade__transport_stats(f->p.dist, &out->dist);
  if (f->disk) {
    lade__cache_stats_t cs;
    lade__cache_stats(f->disk, &cs);
    out->corrupt = cs.corrupt;
    out->stale = cs.stale;
  }
  if (f->mem) {
    lade__cache_stats_t cs;
    lade__cache_stats(f->mem, &cs);
    out->stale += cs.stale;
  }
  if (f->p.ops->stats) f->p.ops->stats(f->p.src, &out->src);
  out->fetch_size = f->conf.fetch_size;
  out->threshold = f->conf.threshold;
  if (f->mem && f->conf.node_cache) {
    out->node_cache = true;
    lade__shmcache_node_stats(f->mem, &out->node);
  }
}
