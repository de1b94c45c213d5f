/*
 * models.c - what the plan kinds (kind_*.c) and the tiers (tiers.c) share
 * of the planner's state (planner.h): a step's events, the regular slices
 * as a step's output, and the two cache models more than one kind uses,
 * overlapping caches ((learner, sample) nodes: regular+lru, regular+belady)
 * and disjoint ones (one owner per sample: distcache, locality, solar).
 * Below planner.c, the kinds and tiers.c, which call it; it calls none of
 * them.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

/* ---------------------------------------------------------------- events */

uint64_t lade__plan_event(lade_plan_t *pl, uint32_t r, uint64_t s, int t) {
  assert(pl->nev < pl->evcap);
  pl->ev_l[pl->nev] = r;
  pl->ev_s[pl->nev] = s;
  pl->ev_t[pl->nev] = (int8_t)t;
  return pl->nev++;
}

void lade__plan_regular_slices(lade_plan_t *pl, lade__plan_out_t *out) {
  for (uint32_t r = 0; r <= pl->p; r++) out->off[r] = (uint64_t)r * pl->B;
  memcpy(out->samples, pl->gb, pl->G * sizeof *out->samples);
}

/* ---------------------------------------------------------------- overlapping caches (regular+lru/belady) */

int lade__plan_nodes_init(lade_plan_t *pl) {
  return lade__hmap_init(&pl->map, LADE__MIN(pl->s.cache * pl->p, 1u << 20) + 16);
}

uint64_t lade__plan_nodes_slices(lade_plan_t *pl, lade__plan_out_t *out) {
  lade__plan_regular_slices(pl, out);
  uint64_t v;
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    out->from[i] = lade__hmap_get(&pl->map, lade__plan_mkey(r, out->samples[i]), &v) ? LADE_FROM_CACHE
                                                                                      : LADE_FROM_STORAGE;
  }
  return pl->s.cache;
}

static int node_new(lade_plan_t *pl, uint64_t *out) {
  if (pl->freelist != LADE__PLAN_NONE) {
    *out = pl->freelist;
    pl->freelist = pl->nodes[*out].next;
    return 0;
  }
  if (pl->nnodes == pl->nodecap) {
    uint64_t nc = pl->nodecap ? pl->nodecap * 2 : 1024;
    lade__plan_node_t *nn = realloc(pl->nodes, nc * sizeof *nn);
    if (!nn) return lade__fail(LADE_ENOMEM, "plan: out of memory for %llu cache entries", (unsigned long long)nc);
    pl->nodes = nn;
    pl->nodecap = nc;
  }
  *out = pl->nnodes++;
  return 0;
}

void lade__plan_node_drop(lade_plan_t *pl, uint32_t r, uint64_t n) {
  lade__plan_node_t *x = &pl->nodes[n];
  if (x->adm_serial == pl->serial) pl->ev_t[x->pend] = 0;
  else lade__plan_event(pl, r, x->sample, -1);
  lade__hmap_del(&pl->map, lade__plan_mkey(r, x->sample));
  pl->ucount[r]--;
  x->sample = LADE__PLAN_NONE;
  x->next = pl->freelist;
  pl->freelist = n;
}

int lade__plan_node_add(lade_plan_t *pl, uint32_t r, uint64_t s, uint64_t key, uint64_t *out) {
  uint64_t n = 0;
  int rc = node_new(pl, &n);
  if (rc) return rc;
  lade__plan_node_t *x = &pl->nodes[n];
  x->sample = s;
  x->key = key;
  x->adm_serial = pl->serial;
  x->pend = lade__plan_event(pl, r, s, +1);
  pl->ucount[r]++;
  *out = n;
  return lade__hmap_put(&pl->map, lade__plan_mkey(r, s), n);
}

/* ---------------------------------------------------------------- disjoint caches */

int lade__plan_owners_init(lade_plan_t *pl, int cancel) {
  LADE__PLAN_ALLOC_HUGE(pl->owner, pl->N);
  if (cancel) {
    LADE__PLAN_ALLOC_HUGE(pl->adm_serial, pl->N);
    LADE__PLAN_ALLOC_HUGE(pl->pend, pl->N);
  }
  return 0;
}

void lade__plan_own(lade_plan_t *pl, uint32_t r, uint64_t s) {
  pl->owner[s] = (int32_t)r;
  pl->ucount[r]++;
  pl->ncount[r / pl->rpn]++;
  uint64_t ev = lade__plan_event(pl, r, s, +1);
  if (pl->adm_serial) {
    pl->adm_serial[s] = pl->serial;
    pl->pend[s] = ev;
  }
}

int lade__plan_seed_first_holder(lade_plan_t *pl, uint32_t r, uint64_t s) {
  if (pl->owner[s] < 0 && pl->ucount[r] < pl->s.cache) lade__plan_own(pl, r, s);
  return 0;
}

void lade__plan_disown(lade_plan_t *pl, uint64_t s) {
  uint32_t r = (uint32_t)pl->owner[s];
  assert(pl->owner[s] >= 0);
  if (pl->adm_serial && pl->adm_serial[s] == pl->serial) pl->ev_t[pl->pend[s]] = 0;
  else lade__plan_event(pl, r, s, -1);
  pl->owner[s] = -1;
  pl->ucount[r]--;
  pl->ncount[r / pl->rpn]--;
}

uint64_t lade__plan_count_holders(lade_plan_t *pl) {
  memset(pl->cnt, 0, pl->n_nodes * sizeof *pl->cnt);
  for (uint64_t i = 0; i < pl->G; i++) {
    if (i + 16 < pl->G) __builtin_prefetch(&pl->owner[pl->gb[i + 16]]); /* N entries: a cache miss each */
    int32_t o = pl->owner[pl->gb[i]];
    pl->holder[i] = o;
    if (o >= 0) pl->cnt[(uint32_t)o / pl->rpn]++;
  }
  uint64_t d = 0, share = (uint64_t)pl->rpn * pl->B;
  for (uint32_t m = 0; m < pl->n_nodes; m++)
    if (pl->cnt[m] < share) d += share - pl->cnt[m];
  return d;
}
