/* kind_locality.c - `locality`, locality-aware loading of Accelerating Data
 * Loading (paper 000 V): every learner trains on its cached samples of the
 * global batch up to its share B; uncached samples are read from storage by
 * learners with a deficit (those with cache room first, so the aggregate
 * cache fills); the surplus goes to the remaining deficits by Algorithm 1
 * (balance.c), as peer sends or storage reloads. Caches are disjoint (the
 * driver's owner[]), filled from storage reads, no replacement.
 *
 * With ranks_per_node r > 1 the learners of this description are the nodes
 * (share r*B, the node's cache, Algorithm 1 between nodes); each node's share
 * is then split among its ranks, B each, a cached sample first to the rank
 * that admitted it (node_split). */
#include <assert.h>
#include <string.h>

#include "planner.h"

typedef struct locality {
  uint64_t *sur, *sur_l, *sur_tmp; /* G: surplus samples and their holder nodes; misses, then surplus by holder */
  int32_t *sur_h, *sur_hg;         /* G: the rank holding each surplus sample; the same grouped by node */
  uint64_t *sur_off;               /* p+1: surplus per holder node */
  int64_t *imb;                    /* p: Algorithm 1 input */
  /* each node's share of the batch (r*B entries at node * r*B), before it is
   * split among its ranks: the sample and its route (a rank of this node
   * that caches it, LADE_FROM_STORAGE, or the holder on another node) */
  uint64_t *nl_s;
  int32_t *nl_f;
  uint8_t *nl_local;               /* 1: cached on this node; 2: placed at its holder */
  uint64_t *rkept;                 /* p: samples placed per rank */
} locality_t;

static int locality_create(lade_plan_t *pl) {
  locality_t *k = calloc(1, sizeof *k);
  if (!k) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  pl->ks = k;
  LADE__PLAN_ALLOC(k->imb, pl->p);
  LADE__PLAN_ALLOC(k->sur, pl->G);
  LADE__PLAN_ALLOC(k->sur_l, pl->G);
  LADE__PLAN_ALLOC(k->sur_h, pl->G);
  LADE__PLAN_ALLOC(k->sur_hg, pl->G);
  LADE__PLAN_ALLOC(k->sur_tmp, pl->G);
  LADE__PLAN_ALLOC(k->sur_off, pl->p + 1);
  LADE__PLAN_ALLOC(k->nl_s, pl->G);
  LADE__PLAN_ALLOC(k->nl_f, pl->G);
  LADE__PLAN_ALLOC(k->nl_local, pl->G);
  LADE__PLAN_ALLOC(k->rkept, pl->p);
  return lade__plan_owners_init(pl, 0);
}

/* Appends sample s with route f (local: cached on this node) to node m's share. */
static void node_put(lade_plan_t *pl, locality_t *k, uint32_t m, uint64_t s, int32_t f, uint8_t local) {
  uint64_t at = (uint64_t)m * pl->rpn * pl->B + pl->kept[m]++;
  k->nl_s[at] = s;
  k->nl_f[at] = f;
  k->nl_local[at] = local;
}

/* Splits node m's share among its ranks, B each: first every cached sample
 * to the rank that admitted it (its own cache) while that rank has room, then
 * the rest in order to the ranks with room; a sample cached by another rank
 * of the node is an intra-node handoff from it. With one rank per node this
 * is the node's share in order. */
static void node_split(lade_plan_t *pl, locality_t *k, uint32_t m, lade__plan_out_t *out) {
  uint32_t r0 = m * pl->rpn, q = r0;
  uint64_t S = (uint64_t)pl->rpn * pl->B, base = (uint64_t)m * S;
  for (uint64_t j = base; j < base + S; j++) {
    uint32_t h = (uint32_t)k->nl_f[j];
    if (k->nl_local[j] && k->rkept[h] < pl->B) {
      uint64_t at = out->off[h] + k->rkept[h]++;
      out->samples[at] = k->nl_s[j];
      out->from[at] = LADE_FROM_CACHE;
      k->nl_local[j] = 2;
    }
  }
  for (uint64_t j = base; j < base + S; j++) {
    if (k->nl_local[j] == 2) continue;
    while (k->rkept[q] >= pl->B) q++;
    assert(q < r0 + pl->rpn);
    uint64_t at = out->off[q] + k->rkept[q]++;
    out->samples[at] = k->nl_s[j];
    out->from[at] = k->nl_f[j];
  }
}

static int locality_step(lade_plan_t *pl, lade__plan_out_t *out) {
  locality_t *k = pl->ks;
  uint32_t p = pl->p, n = pl->n_nodes;
  uint64_t B = pl->B, G = pl->G, S = (uint64_t)pl->rpn * B; /* S: a node's share */
  out->view.deficit = lade__plan_count_holders(pl);
  for (uint32_t r = 0; r <= p; r++) out->off[r] = (uint64_t)r * B;
  memset(pl->kept, 0, n * sizeof *pl->kept);
  memset(k->rkept, 0, p * sizeof *k->rkept);
  memset(k->sur_off, 0, (n + 1) * sizeof *k->sur_off);
  uint64_t nsur = 0, nmiss = 0;
  /* 1. every node trains on its cached samples, up to its share */
  for (uint64_t i = 0; i < G; i++) {
    int32_t o = pl->holder[i];
    uint32_t m = o >= 0 ? lade__plan_node_of(pl, (uint32_t)o) : 0;
    if (o >= 0 && pl->kept[m] < S) {
      node_put(pl, k, m, pl->gb[i], o, 1);
    } else if (o >= 0) {
      k->sur[nsur] = pl->gb[i];
      k->sur_h[nsur] = o;
      k->sur_l[nsur++] = m;
      k->sur_off[m + 1]++;
    } else {
      k->sur_tmp[nmiss++] = pl->gb[i];
    }
  }
  /* 2. uncached samples are read from storage by nodes with a deficit, first
   * by those whose cache still has room (so the aggregate cache fills up) */
  uint64_t j = 0, C = pl->s.cache;
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t m = 0; m < n && j < nmiss; m++) {
      uint64_t take = S - pl->kept[m];
      if (pass == 0) take = LADE__MIN(take, pl->ncount[m] < C ? C - pl->ncount[m] : 0);
      for (; take > 0 && j < nmiss; take--, j++) node_put(pl, k, m, k->sur_tmp[j], LADE_FROM_STORAGE, 0);
    }
  assert(j == nmiss);
  /* 3. Algorithm 1 moves the surplus to the remaining deficits, between nodes */
  for (uint32_t m = 0; m < n; m++) {
    k->imb[m] = (int64_t)pl->cnt[m] > (int64_t)S ? (int64_t)(pl->cnt[m] - S) : -(int64_t)(S - pl->kept[m]);
    k->sur_off[m + 1] += k->sur_off[m];
  }
  int rc = lade_plan_balance(n, k->imb, out->tr, &out->view.transfers);
  if (rc) return rc;
  /* surplus samples grouped by holder node, in batch order (their holder ranks in sur_hg) */
  for (uint32_t m = 0; m < n; m++) pl->quota[m] = k->sur_off[m];
  for (uint64_t i = 0; i < nsur; i++) {
    uint64_t at = pl->quota[k->sur_l[i]]++;
    k->sur_tmp[at] = k->sur[i];
    k->sur_hg[at] = k->sur_h[i];
  }
  for (uint32_t m = 0; m < n; m++) pl->quota[m] = k->sur_off[m];
  for (uint64_t t = 0; t < out->view.transfers; t++) {
    lade_plan_transfer_t *x = &out->tr[t];
    for (uint64_t c = 0; c < x->count; c++) {
      assert(pl->quota[x->src] < k->sur_off[x->src + 1]);
      uint64_t at = pl->quota[x->src]++;
      node_put(pl, k, x->dst, k->sur_tmp[at], pl->s.balance_peer ? k->sur_hg[at] : LADE_FROM_STORAGE, 0);
    }
  }
  for (uint32_t m = 0; m < n; m++) {
    assert(pl->kept[m] == S);
    node_split(pl, k, m, out);
  }
  /* phase 2: populate caches with what was read from storage (no replacement) */
  for (uint32_t q = 0; q < p; q++)
    for (uint64_t i = out->off[q]; i < out->off[q + 1]; i++) {
      uint64_t s = out->samples[i];
      if (out->from[i] == LADE_FROM_STORAGE && pl->owner[s] < 0 && lade__plan_room(pl, q))
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
  free(k->sur_h);
  free(k->sur_hg);
  free(k->nl_s);
  free(k->nl_f);
  free(k->nl_local);
  free(k->rkept);
  free(k->imb);
  free(k);
}


const lade__plan_ops_t lade__kind_locality = {
    .create = locality_create,
    .step = locality_step,
    .destroy = locality_destroy,
    .seed = lade__plan_seed_first_holder, /* warm start: models.c */
};
