/*
 * cachestate.h - the bookkeeping planners keep about learners' caches: an
 * open-addressing map for caches that may overlap (regular+lru/belady: any
 * learner may hold any sample) and a max-heap with lazy deletion for
 * farthest-next-use eviction (entries are checked against the live state when
 * they reach the top instead of being removed on every hit).
 */
#ifndef LADE__PLAN_CACHESTATE_H
#define LADE__PLAN_CACHESTATE_H

#include <stdint.h>

#define LADE__HMAP_EMPTY UINT64_MAX

typedef struct lade__hmap {
  uint64_t *keys, *vals;
  uint64_t cap, n; /* cap is a power of two, load kept under 1/2 */
} lade__hmap_t;

int lade__hmap_init(lade__hmap_t *m, uint64_t cap);
void lade__hmap_free(lade__hmap_t *m);
void lade__hmap_clear(lade__hmap_t *m);
/* Returns 1 and *val when key is present. */
int lade__hmap_get(const lade__hmap_t *m, uint64_t key, uint64_t *val);
int lade__hmap_put(lade__hmap_t *m, uint64_t key, uint64_t val);
void lade__hmap_del(lade__hmap_t *m, uint64_t key);

typedef struct lade__kheap {
  uint64_t *key, *val;
  uint64_t n, cap;
} lade__kheap_t;

int lade__kheap_push(lade__kheap_t *h, uint64_t key, uint64_t val);
void lade__kheap_pop(lade__kheap_t *h);
void lade__kheap_heapify(lade__kheap_t *h);
void lade__kheap_free(lade__kheap_t *h);

#endif
