/*
 * cindex.h - the index and eviction policy shared by the memory and disk
 * tiers: a hash map from key to entry, an intrusive doubly linked list in
 * insertion (FIFO) or recency (LRU) order, and for clairvoyant a max-heap on
 * each entry's remembered next use. Not thread-safe: the owning tier calls
 * every function with its own lock held. The tiers' vtable and common part
 * are tier.h.
 */
#ifndef LADE__CINDEX_H
#define LADE__CINDEX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"



typedef struct lade__centry {
  uint64_t key;
  uint64_t len;    /* payload bytes */
  uint64_t charge; /* bytes charged against capacity */
  uint64_t seq;    /* insertion sequence number (the disk tier stores it in the file) */
  uint64_t ver;    /* the sample's version when it was stored (see lade__cache_get_ver) */
  uint64_t nu;     /* clairvoyant: next use as of the last look */
  struct lade__centry *prev, *next;
  size_t heap_i;
  uint32_t refs;   /* pins held by readers outside the lock */
  bool live;       /* in the index; false once evicted or replaced */
  void *data;      /* memory tier: the payload */
} lade__centry_t;

typedef struct lade__cindex {
  lade__centry_t **slot; /* open addressing, linear probing; NULL: empty */
  size_t nslot, count;
  lade__centry_t *head, *tail; /* head: next FIFO/LRU victim */
  lade__centry_t **heap;       /* clairvoyant max-heap on nu */
  size_t heap_cap;
  uint64_t used, capacity;
  int policy;
  lade__next_use_fn next_use;
  void *next_use_ctx;
} lade__cindex_t;

int lade__cindex_init(lade__cindex_t *ix, const lade__cache_opts_t *o);
/* Frees the index's own arrays, not the entries. */
void lade__cindex_free(lade__cindex_t *ix);
lade__centry_t *lade__cindex_find(const lade__cindex_t *ix, uint64_t key);
/* Adds e (key, len, charge, seq set; key not present) and charges it. */
int lade__cindex_insert(lade__cindex_t *ix, lade__centry_t *e);
/* Takes e out of the index and uncharges it; e->live becomes false. */
void lade__cindex_remove(lade__cindex_t *ix, lade__centry_t *e);
/* A read of e: LRU moves it to the back, clairvoyant refreshes its next use. */
void lade__cindex_touch(lade__cindex_t *ix, lade__centry_t *e);
/* The entry the policy evicts next, or NULL when empty. */
lade__centry_t *lade__cindex_victim(lade__cindex_t *ix);
/* Whether a newcomer of `charge` bytes for key may be stored: it fits the
 * capacity at all, and under clairvoyant, when room must be made, its next
 * use is not farther than the farthest resident's. The caller removes an
 * older entry of the same key first. */
bool lade__cindex_admit(lade__cindex_t *ix, uint64_t key, uint64_t charge);

#endif
