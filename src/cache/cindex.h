/*
 * cindex.h - the index and eviction policy shared by the memory and disk
 * tiers: a hash map from key to entry, an intrusive doubly linked list in
 * insertion (FIFO) or recency (LRU) order, and for clairvoyant a max-heap on
 * each entry's remembered next use. Not thread-safe: the owning tier calls
 * every function with its own lock held.
 */
#ifndef LADE__CINDEX_H
#define LADE__CINDEX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"


int lade__memcache_open(lade__cache_t **out, const lade__cache_opts_t *o);
int lade__diskcache_open(lade__cache_t **out, const lade__cache_opts_t *o);
int lade__shmcache_open(lade__cache_t **out, const lade__cache_opts_t *o);

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

/* The tier-specific calls; contains, touch and stats need only the shared
 * index and are done once in cache.c. */
typedef struct lade__cache_ops {
  void (*close)(lade__cache_t *c);
  int (*get)(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out);
  int (*put)(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len);
  /* Locked: takes e out of the index and removes its bytes (the disk tier
   * unlinks its file); frees e unless a reader holds it. */
  void (*drop)(lade__cache_t *c, lade__centry_t *e);
  /* A tier with its own index (the node tier) sets these; NULL: cache.c's
   * over `ix`. */
  bool (*contains)(lade__cache_t *c, uint64_t key);
  bool (*touch)(lade__cache_t *c, uint64_t key);
  bool (*evict)(lade__cache_t *c, uint64_t key);
  void (*clear)(lade__cache_t *c);
  void (*stats)(lade__cache_t *c, lade__cache_stats_t *out);
  int (*get_claim)(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed);
  void (*release)(lade__cache_t *c, uint64_t key);
  int (*view)(lade__cache_t *c, uint64_t key, uint64_t ver, const void **data, size_t *len, uint64_t *token);
  bool (*view_ok)(lade__cache_t *c, uint64_t token);
} lade__cache_ops_t;

/* Every tier's handle starts with this: the vtable, and the lock, index and
 * counters every tier has. `mu` guards ix and st. */
struct lade__cache {
  const lade__cache_ops_t *ops;
  pthread_mutex_t mu;
  lade__cindex_t ix;
  lade__cache_stats_t st;
};

int lade__cindex_init(lade__cindex_t *ix, const lade__cache_opts_t *o);
/* A tier's common part: its ops, lock and index (errors name `what`);
 * lade__cache_base_free undoes it, not the entries. */
int lade__cache_base_init(lade__cache_t *c, const lade__cache_ops_t *ops, const lade__cache_opts_t *o,
                          const char *what);
void lade__cache_base_free(lade__cache_t *c);
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

/* The start of every tier's get: finds key and pins it (refs++; a use for
 * the policy), or counts a miss and returns NULL. An entry stored under
 * another version than `ver` is stale: it is dropped (ops->drop), counted in
 * `stale` and `misses`, and NULL returned. Takes and releases the tier's
 * lock; the caller unpins under it. */
lade__centry_t *lade__cache_pin(lade__cache_t *c, uint64_t key, uint64_t ver);

#endif
