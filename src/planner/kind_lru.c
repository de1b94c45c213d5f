/* kind_lru.c - `regular+lru`: regular slices; every learner caches what it
 * loads and evicts its least recently used sample. Caches may overlap, so
 * they live in the driver's (learner, sample) node pool; this file keeps one
 * recency list per learner through the nodes' prev/next. */
#include <string.h>

#include "planner.h"

typedef struct lru {
  uint64_t *head, *tail; /* most / least recently used node of each learner */
} lru_t;

static void lru_unlink(lade_plan_t *pl, lru_t *k, uint32_t r, uint64_t n) {
  lade__plan_node_t *x = &pl->nodes[n];
  if (x->prev != LADE__PLAN_NONE) pl->nodes[x->prev].next = x->next; else k->head[r] = x->next;
  if (x->next != LADE__PLAN_NONE) pl->nodes[x->next].prev = x->prev; else k->tail[r] = x->prev;
}

static void lru_push_front(lade_plan_t *pl, lru_t *k, uint32_t r, uint64_t n) {
  lade__plan_node_t *x = &pl->nodes[n];
  x->prev = LADE__PLAN_NONE;
  x->next = k->head[r];
  if (k->head[r] != LADE__PLAN_NONE) pl->nodes[k->head[r]].prev = n; else k->tail[r] = n;
  k->head[r] = n;
}

static int lru_create(lade_plan_t *pl) {
  lru_t *k = calloc(1, sizeof *k);
  if (!k) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  pl->ks = k;
  int rc = lade__plan_nodes_init(pl);
  if (rc) return rc;
  LADE__PLAN_ALLOC(k->head, pl->p);
  LADE__PLAN_ALLOC(k->tail, pl->p);
  return 0;
}

static void lru_reset(lade_plan_t *pl) {
  lru_t *k = pl->ks;
  memset(k->head, 0xff, pl->p * sizeof *k->head);
  memset(k->tail, 0xff, pl->p * sizeof *k->tail);
}

static int lru_step(lade_plan_t *pl, lade__plan_out_t *out) {
  lru_t *k = pl->ks;
  const uint64_t C = lade__plan_nodes_slices(pl, out);
  if (!C) return 0;
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    uint64_t s = out->samples[i], n = 0;
    if (lade__hmap_get(&pl->map, lade__plan_mkey(r, s), &n)) {
      lru_unlink(pl, k, r, n);
      lru_push_front(pl, k, r, n);
      continue;
    }
    if (pl->ucount[r] == C) {
      uint64_t t = k->tail[r];
      lru_unlink(pl, k, r, t);
      lade__plan_node_drop(pl, r, t);
    }
    int rc = lade__plan_node_add(pl, r, s, 0, &n);
    if (rc) return rc;
    lru_push_front(pl, k, r, n);
  }
  return 0;
}

static void lru_destroy(lade_plan_t *pl) {
  lru_t *k = pl->ks;
  if (!k) return;
  free(k->head);
  free(k->tail);
  free(k);
}

/* Warm start: the survivors, the first given the least recently used. */
static int lru_seed(lade_plan_t *pl, uint32_t r, uint64_t s) {
  uint64_t n = 0;
  if (pl->ucount[r] >= pl->s.cache || lade__hmap_get(&pl->map, lade__plan_mkey(r, s), &n)) return 0;
  int rc = lade__plan_node_add(pl, r, s, 0, &n);
  if (!rc) lru_push_front(pl, pl->ks, r, n);
  return rc;
}

const lade__plan_ops_t lade__kind_regular_lru = {
    .create = lru_create,
    .reset = lru_reset,
    .step = lru_step,
    .destroy = lru_destroy,
    .seed = lru_seed,
};
