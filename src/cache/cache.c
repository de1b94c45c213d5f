/* cache.c - picks the tier (memory without a folder, disk with one, the
 * node's shared-memory tier with node_dir and no folder: shmcache.c); every
 * later call goes through the tier's vtable (tier.c). */
#include "cache/cache.h"

#include "cache/tier.h"

int lade__cache_open(lade__cache_t **out, const lade__cache_opts_t *o) {
  *out = NULL;
  if (!o || o->capacity == 0) return lade__fail(LADE_EINVAL, "cache: capacity must be > 0");
  if (o->policy != LADE__CACHE_FIFO && o->policy != LADE__CACHE_LRU && o->policy != LADE__CACHE_CLAIRVOYANT &&
      o->policy != LADE__CACHE_PLAN)
    return lade__fail(LADE_EINVAL, "cache: policy %d is not fifo, lru, clairvoyant or plan", o->policy);
  if (o->policy == LADE__CACHE_CLAIRVOYANT && !o->next_use)
    return lade__fail(LADE_EINVAL, "cache: the clairvoyant policy needs a next_use function");
  if (o->node_dir && !o->dir) {
    if (!o->node_job || !o->node_job[0]) return lade__fail(LADE_EINVAL, "node cache: no job key");
    return lade__shmcache_open(out, o);
  }
  return o->dir ? lade__diskcache_open(out, o) : lade__memcache_open(out, o);
}
