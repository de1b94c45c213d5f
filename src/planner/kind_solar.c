/* kind_solar.c - `solar`, SOLAR's offline shuffle plan (paper 002): the
 * shuffles of all epochs drawn ahead and the epoch order chosen at create
 * (open-path TSP, epoch_order.c); node-to-sample remapping (a cached sample
 * trains on the learner caching it); load balancing that lets local batch
 * sizes differ by up to `imbalance` and water-fills storage reads; farthest-
 * next-use eviction over disjoint caches (the driver's owner[]), where the
 * next use of a sample is its position in the next training epoch (remapping
 * keeps it on the learner that caches it); each learner's storage reads
 * sorted and coalesced into ranges.
 *
 * With ranks_per_node r > 1 the caches are the nodes' (one heap and `cache`
 * samples per node): a cached sample goes to its node, there to the rank that
 * admitted it while that rank has room, else to another rank of the node (an
 * intra-node handoff); the load balance sees each node's cached samples
 * spread evenly over its ranks.
 *
 * With cache_disk > 0 the cache is a hierarchy of `cache` samples in memory
 * and `cache_disk` on disk per holder: farthest-next-use runs over both
 * together, and tiers.c keeps the nearest next uses in memory. */
#include <assert.h>
#include <string.h>

#include "planner.h"

/* What phase 2 reads of a sample, in one cache line: at millions of samples
 * each visit is a cache miss, so one struct instead of three arrays. */
typedef struct sstate {
  uint64_t key;  /* the live eviction key while cached */
  uint32_t next; /* position in the shuffle of the next training epoch */
  int32_t owner; /* = the driver's owner[s] (solar_own/solar_disown keep both) */
} sstate_t;

typedef struct solar {
  sstate_t *st;            /* N */
  uint64_t inv_next_epoch; /* training epoch whose successor's inverse is in st[].next (NONE: none) */
  uint64_t *perm_tmp;      /* N */
  lade__kheap_t *heaps;    /* one per node: (next use, sample), stale entries skipped */
  uint64_t *rd_tmp;        /* G: one learner's storage reads, sorted */
  uint64_t *vcnt, *nquota, *nkept; /* p: per rank its node's cached samples spread evenly; per node */
  uint8_t *mark;           /* G: 1 kept on its holder's node, 2 placed */
  uint32_t *seed_inv;      /* N, warm starts only: positions in the shuffle of the epoch after the start's */
} solar_t;

/* Prefetch distances (entries ahead) of the loops over a step's samples, a
 * heap's entries and a permutation: the per-sample state they touch (owner,
 * key, next use) is N entries, at millions of samples a cache miss each. */
enum { AHEAD = 32, AHEAD_INV = 32 };

static int solar_create(lade_plan_t *pl) {
  solar_t *k = calloc(1, sizeof *k);
  if (!k) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  pl->ks = k;
  const lade_plan_settings_t *s = &pl->s;
  if (!pl->order)
    return lade__fail(LADE_EINVAL, "plan solar: it plans the epoch order of the whole run, so at most %llu epochs "
                      "(%llu given)", (unsigned long long)LADE__PLAN_ORDER_MAX, (unsigned long long)s->epochs);
  uint64_t N = pl->N;
  int rc = lade__plan_owners_init(pl, 1);
  if (rc) return rc;
  LADE__PLAN_ALLOC_HUGE(k->st, N);
  LADE__PLAN_ALLOC_HUGE(k->perm_tmp, N);
  LADE__PLAN_ALLOC(k->heaps, pl->p);
  LADE__PLAN_ALLOC(k->vcnt, pl->p);
  LADE__PLAN_ALLOC(k->nquota, pl->p);
  LADE__PLAN_ALLOC(k->nkept, pl->p);
  LADE__PLAN_ALLOC(k->mark, pl->G);
  if (s->coalesce) LADE__PLAN_ALLOC(k->rd_tmp, pl->G);
  if (s->reorder && s->epochs > 1) {
    uint64_t *cost;
    LADE__PLAN_ALLOC(cost, s->epochs * s->epochs);
    uint64_t buf = LADE__MIN(N, (s->cache + s->cache_disk) * pl->n_nodes);
    rc = lade_plan_order_costs(s, sizeof *s, buf, cost);
    if (!rc) rc = lade_plan_order_solve(cost, s->epochs, s->order_algo, s->seed, pl->order, NULL);
    free(cost);
    if (rc) return rc;
  }
  return 0;
}

static void solar_reset(lade_plan_t *pl) {
  solar_t *k = pl->ks;
  for (uint32_t m = 0; m < pl->n_nodes; m++) k->heaps[m].n = 0;
  for (uint64_t s = 0; s < pl->N; s++) k->st[s].owner = -1; /* as the driver's owner[] */
  k->inv_next_epoch = LADE__PLAN_NONE;
}

/* lade__plan_own and lade__plan_disown, with st[].owner kept equal to owner[]. */
static void solar_own(lade_plan_t *pl, solar_t *k, uint32_t r, uint64_t s) {
  lade__plan_own(pl, r, s);
  k->st[s].owner = (int32_t)r;
}

static void solar_disown(lade_plan_t *pl, solar_t *k, uint64_t s) {
  assert(k->st[s].owner == pl->owner[s]);
  lade__plan_disown(pl, s);
  k->st[s].owner = -1;
}

/* SOLAR load balancing: local batch sizes b_r in [lo, hi] summing to G that
 * minimise the largest storage load max(0, b_r - cnt[r]) (water filling). */
static void solar_quota(lade_plan_t *pl, const uint64_t *cnt) {
  uint32_t p = pl->p;
  uint64_t B = pl->B, K = pl->s.imbalance;
  if (!K) {
    for (uint32_t r = 0; r < p; r++) pl->quota[r] = B;
    return;
  }
  uint64_t lo = B > K / 2 ? B - K / 2 : 0, hi = B + (K - K / 2);
  uint64_t a = 0, b = hi; /* smallest level L with sum clamp(cnt + L) >= G */
  while (a < b) {
    uint64_t L = (a + b) / 2, sum = 0;
    for (uint32_t r = 0; r < p; r++) sum += LADE__MAX(lo, LADE__MIN(hi, cnt[r] + L));
    if (sum >= pl->G) b = L; else a = L + 1;
  }
  uint64_t sum = 0;
  for (uint32_t r = 0; r < p; r++) {
    pl->quota[r] = LADE__MAX(lo, LADE__MIN(hi, cnt[r] + a));
    sum += pl->quota[r];
  }
  /* trim the excess: first learners exactly at the level (their load drops),
   * then round robin over any learner above lo (only when level 0 overshoots) */
  for (uint32_t r = 0; r < p && sum > pl->G && a > 0; r++)
    if (pl->quota[r] > lo && pl->quota[r] == cnt[r] + a) {
      pl->quota[r]--;
      sum--;
    }
  while (sum > pl->G)
    for (uint32_t r = 0; r < p && sum > pl->G; r++)
      if (pl->quota[r] > lo) {
        pl->quota[r]--;
        sum--;
      }
  assert(sum == pl->G);
}

static void sort_u64(uint64_t *a, uint64_t n) {
  for (uint64_t i = 1; i < n; i++) {
    uint64_t x = a[i], j = i;
    while (j > 0 && a[j - 1] > x) {
      a[j] = a[j - 1];
      j--;
    }
    a[j] = x;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void coalesce(lade_plan_t *pl, solar_t *k, lade__plan_out_t *out) {
  uint64_t nr = 0;
  out->rd_off[0] = 0;
  for (uint32_t r = 0; r < pl->p; r++) {
    uint64_t n = 0;
    for (uint64_t i = out->off[r]; i < out->off[r + 1]; i++)
      if (out->from[i] == LADE_FROM_STORAGE) k->rd_tmp[n++] = out->samples[i];
    if (n <= 64) sort_u64(k->rd_tmp, n); else qsort(k->rd_tmp, n, sizeof *k->rd_tmp, cmp_u64);
    for (uint64_t i = 0; i < n; i++) {
      if (nr > out->rd_off[r] && out->rd_start[nr - 1] + out->rd_count[nr - 1] == k->rd_tmp[i]) {
        out->rd_count[nr - 1]++;
      } else if (nr > out->rd_off[r] && out->rd_start[nr - 1] + out->rd_count[nr - 1] > k->rd_tmp[i]) {
        /* a duplicate (padding): already covered */
      } else {
        out->rd_start[nr] = k->rd_tmp[i];
        out->rd_count[nr++] = 1;
      }
    }
    out->rd_off[r + 1] = nr;
  }
}

/* inv[perm[i]] = i */
static void invert(const uint64_t *perm, uint64_t n, uint32_t *inv) {
  for (uint64_t i = 0; i < n; i++) {
    if (i + AHEAD_INV < n) __builtin_prefetch(&inv[perm[i + AHEAD_INV]], 1);
    inv[perm[i]] = (uint32_t)i;
  }
}

static void solar_prepare_epoch(lade_plan_t *pl, solar_t *k) {
  if (k->inv_next_epoch == pl->epoch) return;
  k->inv_next_epoch = pl->epoch;
  if (pl->epoch + 1 >= pl->s.epochs) return;
  lade__shuffle_epoch(&pl->rp, pl->order[pl->epoch + 1], k->perm_tmp);
  for (uint64_t i = 0; i < pl->N; i++) { /* st[perm[i]].next = i */
    if (i + AHEAD_INV < pl->N) __builtin_prefetch(&k->st[k->perm_tmp[i + AHEAD_INV]], 1);
    k->st[k->perm_tmp[i]].next = (uint32_t)i;
  }
}

/* At the epoch's last step: the next epoch's permutation (in perm_tmp since
 * solar_prepare_epoch) goes to the regular order, which would shuffle it again. */
static void solar_hand_over(lade_plan_t *pl, solar_t *k) {
  if (pl->step + 1 == pl->steps && k->inv_next_epoch == pl->epoch && pl->epoch + 1 < pl->s.epochs)
    lade__regular_adopt(pl->reg, pl->order[pl->epoch + 1], &k->perm_tmp);
}


/* Whether sample s is cached on node m. */
static int on_node(const lade_plan_t *pl, const solar_t *k, uint64_t s, uint32_t m) {
  int32_t o = k->st[s].owner;
  return o >= 0 && lade__plan_node_of(pl, (uint32_t)o) == m;
}

static int solar_valid_top(lade_plan_t *pl, solar_t *k, uint32_t m) {
  lade__kheap_t *h = &k->heaps[m];
  while (h->n) {
    uint64_t s = h->val[0];
    if (on_node(pl, k, s, m) && k->st[s].key == h->key[0]) return 1;
    lade__kheap_pop(h);
  }
  return 0;
}

/* The output slot a sample cached by rank o will take (p ranks' batches: scattered writes). */
static inline void prefetch_slot(const lade_plan_t *pl, lade__plan_out_t *out, int32_t o) {
  if (o < 0) return;
  __builtin_prefetch(&out->samples[out->off[o] + pl->kept[o]], 1);
  __builtin_prefetch(&out->from[out->off[o] + pl->kept[o]], 1);
}

static int solar_step(lade_plan_t *pl, lade__plan_out_t *out) {
  solar_t *k = pl->ks;
  uint32_t p = pl->p;
  uint64_t G = pl->G;
  solar_prepare_epoch(pl, k);
  out->view.deficit = lade__plan_count_holders(pl);
  uint32_t rpn = pl->rpn;
  for (uint32_t r = 0; r < p; r++) { /* the node's cached samples, spread evenly over its ranks */
    uint32_t m = r / rpn, l = r % rpn;
    k->vcnt[r] = pl->cnt[m] / rpn + (l < pl->cnt[m] % rpn);
  }
  solar_quota(pl, k->vcnt);
  out->off[0] = 0;
  for (uint32_t r = 0; r < p; r++) out->off[r + 1] = out->off[r] + pl->quota[r];
  memset(pl->kept, 0, p * sizeof *pl->kept);
  memset(k->nquota, 0, pl->n_nodes * sizeof *k->nquota);
  memset(k->nkept, 0, pl->n_nodes * sizeof *k->nkept);
  for (uint32_t r = 0; r < p; r++) k->nquota[r / rpn] += pl->quota[r];
  /* remapping: a cached sample goes to the node that caches it, while the
   * node's local batches have room ... */
  uint64_t npool = 0;
  for (uint64_t i = 0; i < G; i++) {
    int32_t o = pl->holder[i];
    uint32_t m = o >= 0 ? lade__plan_node_of(pl, (uint32_t)o) : 0;
    k->mark[i] = o >= 0 && k->nkept[m] < k->nquota[m];
    if (k->mark[i]) k->nkept[m]++;
  }
  /* ... there to the rank that admitted it, while that rank has room ... */
  for (uint64_t i = 0; i < G; i++) {
    if (i + AHEAD < G) prefetch_slot(pl, out, pl->holder[i + AHEAD]);
    int32_t o = pl->holder[i];
    if (k->mark[i] && pl->kept[o] < pl->quota[o]) {
      uint64_t at = out->off[o] + pl->kept[o]++;
      out->samples[at] = pl->gb[i];
      out->from[at] = LADE_FROM_CACHE;
      k->mark[i] = 2;
    }
  }
  /* ... else to another rank of the node: an intra-node handoff */
  for (uint64_t i = 0; i < G; i++) {
    if (k->mark[i] != 1) continue;
    int32_t o = pl->holder[i];
    uint32_t q = lade__plan_node_of(pl, (uint32_t)o) * rpn;
    while (pl->kept[q] >= pl->quota[q]) q++;
    assert(q / rpn == (uint32_t)o / rpn);
    uint64_t at = out->off[q] + pl->kept[q]++;
    out->samples[at] = pl->gb[i];
    out->from[at] = o;
  }
  for (uint64_t i = 0; i < G; i++)
    if (!k->mark[i]) pl->holder[npool++] = (int32_t)i; /* reuse holder[] as the pool of batch positions */
  uint32_t r = 0;
  for (uint64_t j = 0; j < npool; j++) {
    while (pl->kept[r] >= pl->quota[r]) r++;
    uint64_t at = out->off[r] + pl->kept[r]++;
    out->samples[at] = pl->gb[pl->holder[j]];
    out->from[at] = LADE_FROM_STORAGE;
  }
  if (pl->s.coalesce) coalesce(pl, k, out);
  if (out->tier) /* where each cached sample is read from, before phase 2 changes it */
    for (uint64_t i = 0; i < G; i++)
      out->tier[i] = out->from[i] == LADE_FROM_STORAGE ? LADE_TIER_NONE : pl->tiers.tier[out->samples[i]];
  /* phase 2: farthest-next-use caching over the aggregate of disjoint caches */
  uint64_t C = pl->s.cache + pl->s.cache_disk;
  int last = pl->epoch + 1 >= pl->s.epochs;
  for (uint32_t q = 0; q < p; q++) {
    uint32_t m = q / rpn;
    lade__kheap_t *h = &k->heaps[m];
    for (uint64_t i = out->off[q]; i < out->off[q + 1]; i++) {
      if (i + AHEAD < G) __builtin_prefetch(&k->st[out->samples[i + AHEAD]]);
      uint64_t s = out->samples[i];
      uint64_t nk = last ? LADE__PLAN_INF_KEY : (pl->epoch + 1) * pl->used + k->st[s].next;
      if (on_node(pl, k, s, m)) { /* hit (on this node), or a duplicate just admitted */
        if (nk == LADE__PLAN_INF_KEY) {
          lade__tiers_remove(pl, m, s);
          solar_disown(pl, k, s);
        } else if (k->st[s].key != nk) {
          k->st[s].key = nk;
          int rc = lade__kheap_push(h, nk, s);
          if (!rc) rc = lade__tiers_rekey(pl, m, s, nk);
          if (rc) return rc;
        }
        continue;
      }
      if (k->st[s].owner >= 0) { /* moved: its holder's node had no room in its batches */
        lade__tiers_remove(pl, lade__plan_node_of(pl, (uint32_t)k->st[s].owner), s);
        solar_disown(pl, k, s);
      }
      if (nk == LADE__PLAN_INF_KEY || !C) continue;
      if (pl->ncount[m] >= C) {
        if (!solar_valid_top(pl, k, m) || h->key[0] <= nk) continue;
        uint64_t victim = h->val[0];
        lade__kheap_pop(h);
        lade__tiers_remove(pl, m, victim);
        solar_disown(pl, k, victim);
      }
      solar_own(pl, k, q, s);
      k->st[s].key = nk;
      int rc = lade__kheap_push(h, nk, s);
      if (!rc) rc = lade__tiers_place(pl, m, s, nk);
      if (rc) return rc;
      if (h->n > 2 * pl->ncount[m] + 64) { /* compact: drop the stale entries */
        uint64_t w = 0;
        for (uint64_t j = 0; j < h->n; j++) {
          if (j + AHEAD < h->n) __builtin_prefetch(&k->st[h->val[j + AHEAD]]);
          uint64_t x = h->val[j];
          if (on_node(pl, k, x, m) && k->st[x].key == h->key[j]) {
            h->key[w] = h->key[j];
            h->val[w++] = x;
          }
        }
        h->n = w;
        lade__kheap_heapify(h);
      }
    }
  }
  solar_hand_over(pl, k);
  return lade__tiers_rebalance(pl, &k->st[0].key, sizeof *k->st / sizeof k->st[0].key);
}

static void solar_destroy(lade_plan_t *pl) {
  solar_t *k = pl->ks;
  if (!k) return;
  if (k->heaps) {
    for (uint32_t m = 0; m < pl->p; m++) lade__kheap_free(&k->heaps[m]);
    free(k->heaps);
  }
  free(k->st);
  free(k->perm_tmp);
  free(k->rd_tmp);
  free(k->vcnt);
  free(k->nquota);
  free(k->nkept);
  free(k->mark);
  free(k->seed_inv);
  free(k);
}

/* Warm start: a survivor keyed by its next use, its position in the start's
 * epoch if that is still ahead, else in the next epoch (never again after
 * the last: not kept), while there is room; disjoint, so the first holder
 * keeps it. */
static int solar_seed(lade_plan_t *pl, uint32_t r, uint64_t s) {
  solar_t *k = pl->ks;
  if (k->st[s].owner >= 0 || pl->ucount[r] >= pl->s.cache) return 0;
  uint64_t e = pl->epoch, E = pl->s.epochs;
  if (k->inv_next_epoch != LADE__PLAN_NONE - 1) { /* the inverses of the start's epoch and the next, once per reset */
    if (!k->seed_inv) LADE__PLAN_ALLOC_HUGE(k->seed_inv, pl->N);
    lade__shuffle_epoch(&pl->rp, lade__plan_shuffle_epoch(pl, e), k->perm_tmp);
    for (uint64_t i = 0; i < pl->N; i++) k->st[k->perm_tmp[i]].next = (uint32_t)i;
    if (e + 1 < E) {
      lade__shuffle_epoch(&pl->rp, lade__plan_shuffle_epoch(pl, e + 1), k->perm_tmp);
      invert(k->perm_tmp, pl->N, k->seed_inv);
    }
    k->inv_next_epoch = LADE__PLAN_NONE - 1;
  }
  /* the first position of the start's epoch still to train */
  uint64_t ahead = pl->s.resume && e == pl->s.resume_epoch
                       ? pl->s.resume_consumed + (pl->step - pl->rest_first) * pl->G : pl->step * pl->G;
  uint64_t key;
  if (k->st[s].next >= ahead) key = e * pl->used + k->st[s].next;
  else if (e + 1 < E) key = (e + 1) * pl->used + k->seed_inv[s];
  else return 0;
  solar_own(pl, k, r, s);
  k->st[s].key = key;
  return lade__kheap_push(&k->heaps[r], key, s);
}

const lade__plan_ops_t lade__kind_solar = {
    .flags = LADE__KIND_READS,
    .create = solar_create,
    .reset = solar_reset,
    .step = solar_step,
    .destroy = solar_destroy,
    .seed = solar_seed,
};
