/*
 * tiers.c - two storage classes under one plan (docs/plan.md, "Two tiers"):
 * each cache holder (a learner, or a node with ranks_per_node > 1) keeps
 * `cache` samples in memory and `cache_disk` more on its local disk, one
 * hierarchy. The kind decides what the hierarchy holds (solar: farthest next
 * use over both tiers together, as one cache of cache + cache_disk); this
 * file decides where, from the same next-use keys, as NoPFS puts the samples
 * it will need soonest in the fastest storage class.
 *
 * Tiers change only for the samples a step touches (trained on, or
 * admitted): their bytes are in memory then, so keeping one in memory costs
 * nothing. A touched sample stays in (or goes to) memory while memory has
 * room or while its next use is nearer than the farthest next use in memory,
 * which is then demoted to disk (a write); otherwise it stays on (or goes to)
 * disk, and a later use reads it from there. An untouched sample is never
 * read back into memory ahead of its use: that would cost the same disk read
 * as reading it when used. A move of a sample admitted in the same step
 * rewrites its admit's tier (no move is reported); other moves are events of
 * the rank that admitted it (+3 to memory, -3 to disk). Memory's farthest is
 * a max-heap per holder with lazy deletion: an entry is live while the
 * sample is cached on that holder, in memory, with that key.
 */
#include <assert.h>
#include <string.h>

#include "planner.h"

enum { MOVE_UP = 3, MOVE_DOWN = -3 };

int lade__tiers_init(lade_plan_t *pl) {
  lade__tiers_t *t = &pl->tiers;
  if (!pl->s.cache_disk) return 0;
  LADE__PLAN_ALLOC_HUGE(t->tier, pl->N);
  LADE__PLAN_ALLOC(t->mcount, pl->n_nodes);
  LADE__PLAN_ALLOC(t->dcount, pl->n_nodes);
  LADE__PLAN_ALLOC(t->mem, pl->n_nodes);
  LADE__PLAN_ALLOC(t->touched, 2 * pl->G);
  return 0;
}

void lade__tiers_reset(lade_plan_t *pl) {
  lade__tiers_t *t = &pl->tiers;
  if (!t->tier) return;
  memset(t->tier, 0, pl->N);
  memset(t->mcount, 0, pl->n_nodes * sizeof *t->mcount);
  memset(t->dcount, 0, pl->n_nodes * sizeof *t->dcount);
  for (uint32_t m = 0; m < pl->n_nodes; m++) t->mem[m].n = 0;
  t->ntouched = 0;
}

void lade__tiers_free(lade_plan_t *pl) {
  lade__tiers_t *t = &pl->tiers;
  if (t->mem)
    for (uint32_t m = 0; m < pl->n_nodes; m++) lade__kheap_free(&t->mem[m]);
  free(t->tier);
  free(t->mcount);
  free(t->dcount);
  free(t->mem);
  free(t->touched);
}

static void touch(lade_plan_t *pl, uint64_t s) {
  lade__tiers_t *t = &pl->tiers;
  assert(t->ntouched < 2 * pl->G);
  t->touched[t->ntouched++] = s;
}

int lade__tiers_place(lade_plan_t *pl, uint32_t m, uint64_t s, uint64_t key) {
  lade__tiers_t *t = &pl->tiers;
  if (!t->tier) return 0;
  assert(pl->owner[s] >= 0 && pl->adm_serial && pl->adm_serial[s] == pl->serial);
  t->tier[s] = LADE_TIER_DISK; /* until the rebalance: to memory if it belongs there */
  t->dcount[m]++;
  pl->ev_t[pl->pend[s]] = 2;
  (void)key;
  touch(pl, s);
  return 0;
}

void lade__tiers_remove(lade_plan_t *pl, uint32_t m, uint64_t s) {
  lade__tiers_t *t = &pl->tiers;
  if (!t->tier) return;
  if (t->tier[s] == LADE_TIER_MEM) t->mcount[m]--;
  else if (t->tier[s] == LADE_TIER_DISK) t->dcount[m]--;
  t->tier[s] = 0;
}

int lade__tiers_rekey(lade_plan_t *pl, uint32_t m, uint64_t s, uint64_t key) {
  lade__tiers_t *t = &pl->tiers;
  if (!t->tier) return 0;
  touch(pl, s);
  return t->tier[s] == LADE_TIER_MEM ? lade__kheap_push(&t->mem[m], key, s) : 0;
}

/* Memory's farthest next use on holder m, stale entries dropped; 0 when empty. */
static int mem_top(lade_plan_t *pl, const uint64_t *key, size_t stride, uint32_t m, uint64_t *s, uint64_t *k) {
  lade__tiers_t *t = &pl->tiers;
  lade__kheap_t *h = &t->mem[m];
  while (h->n) {
    uint64_t x = h->val[0];
    int32_t o = pl->owner[x];
    if (o >= 0 && (uint32_t)o / pl->rpn == m && t->tier[x] == LADE_TIER_MEM && key[x * stride] == h->key[0]) {
      *s = x;
      *k = h->key[0];
      return 1;
    }
    lade__kheap_pop(h);
  }
  return 0;
}

/* Moves cached sample s of holder m to `tier`. */
static int move(lade_plan_t *pl, uint32_t m, uint64_t s, uint8_t tier, uint64_t key) {
  lade__tiers_t *t = &pl->tiers;
  if (tier == LADE_TIER_MEM) {
    t->dcount[m]--;
    t->mcount[m]++;
  } else {
    t->mcount[m]--;
    t->dcount[m]++;
  }
  t->tier[s] = tier;
  if (pl->adm_serial[s] == pl->serial) pl->ev_t[pl->pend[s]] = tier == LADE_TIER_MEM ? 1 : 2;
  else lade__plan_event(pl, (uint32_t)pl->owner[s], s, tier == LADE_TIER_MEM ? MOVE_UP : MOVE_DOWN);
  return tier == LADE_TIER_MEM ? lade__kheap_push(&t->mem[m], key, s) : 0;
}

int lade__tiers_rebalance(lade_plan_t *pl, const uint64_t *key, size_t stride) {
  lade__tiers_t *t = &pl->tiers;
  if (!t->tier) return 0;
  int rc = 0;
  for (uint64_t j = 0; j < t->ntouched && !rc; j++) {
    uint64_t s = t->touched[j], ms, mk;
    if (pl->owner[s] < 0 || t->tier[s] != LADE_TIER_DISK) continue; /* evicted since, or in memory */
    uint32_t m = lade__plan_node_of(pl, (uint32_t)pl->owner[s]);
    if (t->mcount[m] < pl->s.cache) {
      rc = move(pl, m, s, LADE_TIER_MEM, key[s * stride]);
    } else if (mem_top(pl, key, stride, m, &ms, &mk) && key[s * stride] < mk) {
      lade__kheap_pop(&t->mem[m]);
      rc = move(pl, m, ms, LADE_TIER_DISK, mk);
      if (!rc) rc = move(pl, m, s, LADE_TIER_MEM, key[s * stride]);
    }
  }
  t->ntouched = 0;
  if (rc) return rc;
  for (uint32_t m = 0; m < pl->n_nodes; m++) { /* compact heaps grown far past their tier (stale entries) */
    lade__kheap_t *h = &t->mem[m];
    if (h->n <= 2 * t->mcount[m] + 64) continue;
    uint64_t w = 0;
    for (uint64_t i = 0; i < h->n; i++) {
      uint64_t x = h->val[i];
      int32_t o = pl->owner[x];
      if (o >= 0 && (uint32_t)o / pl->rpn == m && t->tier[x] == LADE_TIER_MEM && key[x * stride] == h->key[i]) {
        h->key[w] = h->key[i];
        h->val[w++] = x;
      }
    }
    h->n = w;
    lade__kheap_heapify(h);
  }
  return 0;
}
