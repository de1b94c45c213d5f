/* cache.c - picks the tier (memory without a folder, disk with one) and
 * forwards each call through the tier's vtable. */
#include "cache/cache.h"

#include "cache/cindex.h"

int lade__cache_open(lade__cache_t **out, const lade__cache_opts_t *o) {
  *out = NULL;
  if (!o || o->capacity == 0) return lade__fail(LADE_EINVAL, "cache: capacity must be > 0");
  if (o->policy != LADE_CACHE_FIFO && o->policy != LADE_CACHE_LRU && o->policy != LADE_CACHE_CLAIRVOYANT)
    return lade__fail(LADE_EINVAL, "cache: policy %d is not fifo, lru or clairvoyant", o->policy);
  if (o->policy == LADE_CACHE_CLAIRVOYANT && !o->next_use)
    return lade__fail(LADE_EINVAL, "cache: the clairvoyant policy needs a next_use function");
  return o->dir ? lade__diskcache_open(out, o) : lade__memcache_open(out, o);
}

void lade__cache_close(lade__cache_t *c) {
  if (c) c->ops->close(c);
}

int lade__cache_get(lade__cache_t *c, uint64_t key, lade__buf_t *out) { return c->ops->get(c, key, out); }

bool lade__cache_contains(lade__cache_t *c, uint64_t key) { return c->ops->contains(c, key); }

bool lade__cache_touch(lade__cache_t *c, uint64_t key) { return c->ops->touch(c, key); }

int lade__cache_put(lade__cache_t *c, uint64_t key, const void *data, size_t len) {
  return c->ops->put(c, key, data, len);
}

void lade__cache_stats(lade__cache_t *c, lade__cache_stats_t *out) { c->ops->stats(c, out); }
