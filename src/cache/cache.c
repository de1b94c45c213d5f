/* cache.c - picks the tier (memory without a folder, disk with one, the
 * node's shared-memory tier with node_dir and no folder: shmcache.c) and
 * forwards each call through the tier's vtable. */
#include "cache/cache.h"

#include "cache/cindex.h"

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

void lade__cache_close(lade__cache_t *c) {
  if (c) c->ops->close(c);
}

int lade__cache_get(lade__cache_t *c, uint64_t key, lade__buf_t *out) { return c->ops->get(c, key, 0, out); }

int lade__cache_get_ver(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out) {
  return c->ops->get(c, key, ver, out);
}

int lade__cache_get_claim(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed) {
  *claimed = false;
  return c->ops->get_claim ? c->ops->get_claim(c, key, ver, out, claimed) : c->ops->get(c, key, ver, out);
}

int lade__cache_view(lade__cache_t *c, uint64_t key, uint64_t ver, const void **data, size_t *len, uint64_t *token) {
  return c->ops->view ? c->ops->view(c, key, ver, data, len, token) : LADE_EUNSUPPORTED;
}

bool lade__cache_view_ok(lade__cache_t *c, uint64_t token) { return c->ops->view_ok && c->ops->view_ok(c, token); }

void lade__cache_release(lade__cache_t *c, uint64_t key) {
  if (c->ops->release) c->ops->release(c, key);
}

bool lade__cache_contains(lade__cache_t *c, uint64_t key) {
  if (c->ops->contains) return c->ops->contains(c, key);
  pthread_mutex_lock(&c->mu);
  bool r = lade__cindex_find(&c->ix, key) != NULL;
  pthread_mutex_unlock(&c->mu);
  return r;
}

lade__centry_t *lade__cache_pin(lade__cache_t *c, uint64_t key, uint64_t ver) {
  pthread_mutex_lock(&c->mu);
  lade__centry_t *e = lade__cindex_find(&c->ix, key);
  if (e && e->ver != ver) { /* the sample changed since it was stored */
    c->ops->drop(c, e);
    c->st.stale++;
    e = NULL;
  }
  if (e) {
    e->refs++;
    lade__cindex_touch(&c->ix, e);
  } else {
    c->st.misses++;
  }
  pthread_mutex_unlock(&c->mu);
  return e;
}

bool lade__cache_touch(lade__cache_t *c, uint64_t key) {
  if (c->ops->touch) return c->ops->touch(c, key);
  pthread_mutex_lock(&c->mu);
  lade__centry_t *e = lade__cindex_find(&c->ix, key);
  if (e) lade__cindex_touch(&c->ix, e);
  pthread_mutex_unlock(&c->mu);
  return e != NULL;
}

bool lade__cache_evict(lade__cache_t *c, uint64_t key) {
  if (c->ops->evict) return c->ops->evict(c, key);
  pthread_mutex_lock(&c->mu);
  lade__centry_t *e = lade__cindex_find(&c->ix, key);
  if (e) {
    c->ops->drop(c, e);
    c->st.evictions++;
  }
  pthread_mutex_unlock(&c->mu);
  return e != NULL;
}

void lade__cache_clear(lade__cache_t *c) {
  if (c->ops->clear) {
    c->ops->clear(c);
    return;
  }
  pthread_mutex_lock(&c->mu);
  lade__centry_t *e;
  while ((e = c->ix.head) != NULL) { /* every policy keeps every entry on the list */
    c->ops->drop(c, e);
    c->st.evictions++;
  }
  pthread_mutex_unlock(&c->mu);
}

int lade__cache_put(lade__cache_t *c, uint64_t key, const void *data, size_t len) {
  return c->ops->put(c, key, 0, data, len);
}

int lade__cache_put_ver(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len) {
  return c->ops->put(c, key, ver, data, len);
}

void lade__cache_stats(lade__cache_t *c, lade__cache_stats_t *out) {
  if (c->ops->stats) {
    c->ops->stats(c, out);
    return;
  }
  pthread_mutex_lock(&c->mu);
  *out = c->st;
  out->entries = c->ix.count;
  out->used = c->ix.used;
  out->capacity = c->ix.capacity;
  pthread_mutex_unlock(&c->mu);
}
