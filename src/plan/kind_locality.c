/* kind_locality.c - `locality`, locality-aware loading of Accelerating Data
 * Loading (paper 000 V): every learner trains on its cached samples of the
 * global batch up to its share B; uncached samples are read from storage by
 * learners with a deficit (those with cache room first, so the aggregate
 * cache fills); the surplus goes to the remaining deficits by Algorithm 1
 * (balance.c), as peer sends or storage reloads. Caches are disjoint (the
 * driver's owner[]), filled from storage reads, no replacement. */
#include <assert.h>
#include <string.h>

#include "planner.h"

typedef struct locality {
  uint64_t *sur, *sur_l, *sur_tmp; /* G: surplus samples and their holders; misses, then surplus by holder */
  uint64_t *sur_off;               /* p+1: surplus per holder */
  int64_t *imb;                    /* p: Algorithm 1 input */
} locality_t;

static int locality_create(lade_plan_t *pl) {
  locality_t *k = calloc(1, sizeof *k);
  if (!k) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  pl->ks = k;
  LADE__PLAN_ALLOC(k->imb, pl->p);
  LADE__PLAN_ALLOC(k->sur, pl->G);
  LADE__PLAN_ALLOC(k->sur_l, pl->G);
  LADE__PLAN_ALLOC(k->sur_tmp, pl->G);
  LADE__PLAN_ALLOC(k->sur_off, pl->p + 1);
  return lade__plan_owners_init(pl, 0);
}

static int locality_step(lade_plan_t *pl, lade__plan_out_t *out) {
  locality_t *k = pl->ks;
  uint32_t p = pl->p;
  uint64_t B = pl->B, G = pl->G;
  out->view.deficit = lade__plan_count_holders(pl);
  for (uint32_t r = 0; r <= p; r++) out->off[r] = (uint64_t)r * B;
  memset(pl->kept, 0, p * sizeof *pl->kept);
  memset(k->sur_off, 0, (p + 1) * sizeof *k->sur_off);
  uint64_t nsur = 0, nmiss = 0;
  /* 1. every learner trains on its cached samples, up to its share */
  for (uint64_t i = 0; i < G; i++) {
    int32_t o = pl->holder[i];
    if (o >= 0 && pl->kept[o] < B) {
      uint64_t at = out->off[o] + pl->kept[o]++;
      out->samples[at] = pl->gb[i];
      out->from[at] = LADE_FROM_CACHE;
    } else if (o >= 0) {
      k->sur[nsur] = pl->gb[i];
      k->sur_l[nsur++] = (uint64_t)o;
      k->sur_off[o + 1]++;
    } else {
      k->sur_tmp[nmiss++] = pl->gb[i];
    }
  }
  /* 2. uncached samples are read from storage by learners with a deficit,
   * first by those whose cache still has room (so the aggregate cache fills up) */
  uint64_t j = 0, C = pl->s.cache;
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t r = 0; r < p && j < nmiss; r++) {
      uint64_t take = B - pl->kept[r];
      if (pass == 0) take = LADE__MIN(take, pl->ucount[r] < C ? C - pl->ucount[r] : 0);
      for (; take > 0 && j < nmiss; take--, j++) {
        uint64_t at = out->off[r] + pl->kept[r]++;
        out->samples[at] = k->sur_tmp[j];
        out->from[at] = LADE_FROM_STORAGE;
      }
    }
  assert(j == nmiss);
  /* 3. Algorithm 1 moves the surplus to the remaining deficits */
  for (uint32_t q = 0; q < p; q++) {
    k->imb[q] = (int64_t)pl->cnt[q] > (int64_t)B ? (int64_t)(pl->cnt[q] - B) : -(int64_t)(B - pl->kept[q]);
    k->sur_off[q + 1] += k->sur_off[q];
  }
  int rc = lade_plan_balance(p, k->imb, out->tr, &out->view.transfers);
  if (rc) return rc;
  /* surplus samples grouped by holder, in batch order */
  for (uint32_t q = 0; q < p; q++) pl->quota[q] = k->sur_off[q];
  for (uint64_t i = 0; i < nsur; i++) k->sur_tmp[pl->quota[k->sur_l[i]]++] = k->sur[i];
  for (uint32_t q = 0; q < p; q++) pl->quota[q] = k->sur_off[q];
  for (uint64_t t = 0; t < out->view.transfers; t++) {
    lade_plan_transfer_t *x = &out->tr[t];
    for (uint64_t c = 0; c < x->count; c++) {
      uint64_t at = out->off[x->dst] + pl->kept[x->dst]++;
      assert(pl->quota[x->src] < k->sur_off[x->src + 1]);
      out->samples[at] = k->sur_tmp[pl->quota[x->src]++];
      out->from[at] = pl->s.balance_peer ? (int32_t)x->src : LADE_FROM_STORAGE;
    }
  }
  for (uint32_t q = 0; q < p; q++) assert(pl->kept[q] == B);
  /* phase 2: populate caches with what was read from storage (no replacement) */
  for (uint32_t q = 0; q < p; q++)
    for (uint64_t i = out->off[q]; i < out->off[q + 1]; i++) {
      uint64_t s = out->samples[i];
      if (out->from[i] == LADE_FROM_STORAGE && pl->owner[s] < 0 && pl->ucount[q] < pl->s.cache)
        lade__plan_own(pl, q, s);
    }
  return 0;
}

static void locality_destroy(lade_plan_t *pl) {
  locality_t *k = pl->ks;
  if (!k) return;
  free(k->sur);
  free(k->sur_l);
  free(k->sur_tmp);
  free(k->sur_off);
  free(k->imb);
  free(k);
}


/* Warm start: a sample survives in the first cache that holds it, while there is room. */
static int locality_seed(lade_plan_t *pl, uint32_t r, uint64_t s) {
  if (pl->owner[s] < 0 && pl->ucount[r] < pl->s.cache) lade__plan_own(pl, r, s);
  return 0;
}

const lade__plan_ops_t lade__kind_locality = {
    .create = locality_create,
    .step = locality_step,
    .destroy = locality_destroy,
    .seed = locality_seed,
};
