/* kind_belady.c - `regular+belady`: regular slices; each learner evicts the
 * cached sample whose next use is farthest (Belady), with bypass when
 * everything cached is needed sooner than the newcomer. The next use of a
 * sample by learner r is the next epoch whose regular slice gives it to r,
 * found through the inverse permutation of every epoch (4*E*N bytes, drawn
 * at create). Caches may overlap: entries are the driver's node pool, and a
 * lazy max-heap per learner (cachestate.h) orders them by next use. */
#include <assert.h>

#include "planner.h"

typedef struct belady {
  lade__kheap_t *heaps;  /* per learner: (next use, node), stale entries skipped */
  uint32_t *inv_all;     /* inv_all[e*N + s]: position of s in epoch e's shuffle */
} belady_t;

static int belady_create(lade_plan_t *pl) {
  belady_t *k = calloc(1, sizeof *k);
  if (!k) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  pl->ks = k;
  int rc = lade__plan_nodes_init(pl);
  if (rc) return rc;
  uint64_t N = pl->N, *perm;
  LADE__PLAN_ALLOC(k->heaps, pl->p);
  LADE__PLAN_ALLOC_HUGE(k->inv_all, pl->s.epochs * N);
  LADE__PLAN_ALLOC_HUGE(perm, N);
  for (uint64_t e = 0; e < pl->s.epochs; e++) {
    lade__shuffle_epoch(&pl->rp, e, perm);
    for (uint64_t i = 0; i < N; i++) k->inv_all[e * N + perm[i]] = (uint32_t)i;
  }
  free(perm);
  return 0;
}

static void belady_reset(lade_plan_t *pl) {
  belady_t *k = pl->ks;
  for (uint32_t r = 0; r < pl->p; r++) k->heaps[r].n = 0;
}

/* Next epoch after e whose regular slice gives s to learner r, as a key (INF_KEY: never). */
static uint64_t belady_next(const lade_plan_t *pl, const belady_t *k, uint32_t r, uint64_t s, uint64_t e) {
  for (uint64_t f = e + 1; f < pl->s.epochs; f++) {
    uint64_t pos = k->inv_all[f * pl->N + s];
    for (; pos < pl->used; pos += pl->N)
      if ((pos % pl->G) / pl->B == r) return f * pl->used + pos;
  }
  return LADE__PLAN_INF_KEY;
}

static int belady_step(lade_plan_t *pl, lade__plan_out_t *out) {
  belady_t *k = pl->ks;
  const uint64_t C = lade__plan_nodes_slices(pl, out);
  if (!C) return 0;
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    uint64_t s = out->samples[i], n = 0;
    int have = lade__hmap_get(&pl->map, lade__plan_mkey(r, s), &n);
    uint64_t nk = belady_next(pl, k, r, s, pl->epoch);
    lade__kheap_t *h = &k->heaps[r];
    if (have) {
      if (nk == LADE__PLAN_INF_KEY) {
        lade__plan_node_drop(pl, r, n);
        continue;
      }
      pl->nodes[n].key = nk;
      int rc = lade__kheap_push(h, nk, n);
      if (rc) return rc;
      continue;
    }
    if (nk == LADE__PLAN_INF_KEY) continue;
    if (pl->ucount[r] == C) {
      /* find the live entry with the farthest next use */
      while (h->n) {
        uint64_t hn = h->val[0];
        lade__plan_node_t *x = &pl->nodes[hn];
        if (x->sample != LADE__PLAN_NONE && x->key == h->key[0]) break;
        lade__kheap_pop(h);
      }
      assert(h->n);
      if (h->key[0] <= nk) continue; /* bypass: everything cached is needed sooner */
      uint64_t victim = h->val[0];
      lade__kheap_pop(h);
      lade__plan_node_drop(pl, r, victim);
    }
    int rc = lade__plan_node_add(pl, r, s, nk, &n);
    if (!rc) rc = lade__kheap_push(h, nk, n);
    if (rc) return rc;
    if (h->n > 2 * pl->ucount[r] + 64) { /* compact: drop the stale entries */
      uint64_t w = 0;
      for (uint64_t j = 0; j < h->n; j++) {
        lade__plan_node_t *x = &pl->nodes[h->val[j]];
        if (x->sample != LADE__PLAN_NONE && x->key == h->key[j]) {
          h->key[w] = h->key[j];
          h->val[w++] = h->val[j];
        }
      }
      h->n = w;
      lade__kheap_heapify(h);
    }
  }
  return 0;
}

static void belady_destroy(lade_plan_t *pl) {
  belady_t *k = pl->ks;
  if (!k) return;
  if (k->heaps) {
    for (uint32_t r = 0; r < pl->p; r++) lade__kheap_free(&k->heaps[r]);
    free(k->heaps);
  }
  free(k->inv_all);
  free(k);
}

/* Warm start: a survivor keyed by its next use from the start's epoch on
 * (a use earlier in that epoch than the start only makes it look sooner);
 * one never used again is not kept. */
static int belady_seed(lade_plan_t *pl, uint32_t r, uint64_t s) {
  belady_t *k = pl->ks;
  uint64_t n = 0, nk = belady_next(pl, k, r, s, pl->epoch - 1); /* epochs from pl->epoch (wraps for 0) */
  if (pl->ucount[r] >= pl->s.cache || nk == LADE__PLAN_INF_KEY || lade__hmap_get(&pl->map, lade__plan_mkey(r, s), &n))
    return 0;
  int rc = lade__plan_node_add(pl, r, s, nk, &n);
  return rc ? rc : lade__kheap_push(&k->heaps[r], nk, n);
}

const lade__plan_ops_t lade__kind_regular_belady = {
    .create = belady_create,
    .reset = belady_reset,
    .step = belady_step,
    .destroy = belady_destroy,
    .seed = belady_seed,
};
