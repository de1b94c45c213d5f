/*
 * tier.h - what a cache tier is to the rest of cache/: its vtable, the
 * common part every tier's handle starts with (the vtable, the lock, the
 * shared index, the counters), and the calls through the vtable (cache.h's
 * lade__cache_* API, tier.c). The selector (cache.c) opens a tier; the
 * tiers (memcache.c, diskcache.c, shmcache.c) fill the vtable and use
 * tier.c's common part; nothing in a tier calls the selector, and a tier's
 * own calls (lade__shmcache_*) check the handle is theirs.
 */
#ifndef LADE__TIER_H
#define LADE__TIER_H

#include "cache/cindex.h"

/* The tier-specific calls; contains, touch and stats need only the shared
 * index and are done once in tier.c. */
typedef struct lade__cache_ops {
  void (*close)(lade__cache_t *c);
  int (*get)(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out);
  int (*put)(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len);
  /* Locked: takes e out of the index and removes its bytes (the disk tier
   * unlinks its file); frees e unless a reader holds it. */
  void (*drop)(lade__cache_t *c, lade__centry_t *e);
  /* A tier with its own index (the node tier) sets these; NULL: tier.c's
   * over `ix`. */
  bool (*contains)(lade__cache_t *c, uint64_t key);
  bool (*touch)(lade__cache_t *c, uint64_t key);
  bool (*evict)(lade__cache_t *c, uint64_t key);
  void (*clear)(lade__cache_t *c);
  void (*stats)(lade__cache_t *c, lade__cache_stats_t *out);
  int (*get_claim)(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed);
  void (*release)(lade__cache_t *c, uint64_t key);
  int (*view)(lade__cache_t *c, uint64_t key, uint64_t ver, const void **data, size_t *len, uint64_t *token);
  int (*claim_fetch)(lade__cache_t *c, uint64_t key, bool demand); /* claims.h's kinds; NULL: always mine */
  void (*end_fetch)(lade__cache_t *c, uint64_t key);
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

/* A tier's common part: its ops, lock and index (errors name `what`);
 * lade__cache_base_free undoes it, not the entries. */
int lade__cache_base_init(lade__cache_t *c, const lade__cache_ops_t *ops, const lade__cache_opts_t *o,
                          const char *what);
void lade__cache_base_free(lade__cache_t *c);
/* The start of every tier's get: finds key and pins it (refs++; a use for
 * the policy), or counts a miss and returns NULL. An entry stored under
 * another version than `ver` is stale: it is dropped (ops->drop), counted in
 * `stale` and `misses`, and NULL returned. Takes and releases the tier's
 * lock; the caller unpins under it. */
lade__centry_t *lade__cache_pin(lade__cache_t *c, uint64_t key, uint64_t ver);
/* lade__cache_pin with the tier's lock held, counting no miss. */
lade__centry_t *lade__cache_pin_locked(lade__cache_t *c, uint64_t key, uint64_t ver);


int lade__memcache_open(lade__cache_t **out, const lade__cache_opts_t *o);
int lade__diskcache_open(lade__cache_t **out, const lade__cache_opts_t *o);
int lade__shmcache_open(lade__cache_t **out, const lade__cache_opts_t *o);

#endif
