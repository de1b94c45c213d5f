/*
 * memcache.c - the memory tier: each entry's bytes in one malloc'd block,
 * charged its length plus LADE__MEMCACHE_OVERHEAD.
 *
 * Lock: `mu` guards the index, every entry's fields and the stats. Copies
 * run outside it: get pins the entry (refs), copies, and re-locks to unpin;
 * put copies into a fresh block before locking. An entry evicted or replaced
 * while pinned leaves the index at once (its bytes no longer count) and is
 * freed by the last unpin. No other lock is taken while holding mu.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/tier.h"

#define LADE__MEMCACHE_OVERHEAD 64

typedef struct memcache {
  lade__cache_t base; /* ops, mu, ix, st */
  uint64_t seq;
} memcache_t;

static void entry_free(lade__centry_t *e) {
  free(e->data);
  free(e);
}

/* Takes e out of the index; frees it unless a reader holds it. */
static void drop(memcache_t *m, lade__centry_t *e) {
  lade__cindex_remove(&m->base.ix, e);
  if (e->refs == 0) entry_free(e);
}

static void mem_close(lade__cache_t *c) {
  memcache_t *m = (memcache_t *)c;
  lade__centry_t *e;
  while ((e = m->base.ix.head)) drop(m, e);
  lade__cache_base_free(&m->base);
  free(m);
}

static void mem_drop(lade__cache_t *c, lade__centry_t *e) { drop((memcache_t *)c, e); }

static int mem_get(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out) {
  memcache_t *m = (memcache_t *)c;
  lade__centry_t *e = lade__cache_pin(c, key, ver);
  if (!e) return LADE_ENOENT;

  int rc = lade__buf_reserve(out, e->len);
  if (rc == 0) {
    memcpy(out->data, e->data, e->len);
    out->len = e->len;
  }

  pthread_mutex_lock(&m->base.mu);
  if (rc == 0) {
    m->base.st.hits++;
    m->base.st.bytes_read += e->len;
  }
  if (--e->refs == 0 && !e->live) entry_free(e);
  pthread_mutex_unlock(&m->base.mu);
  return rc;
}

uint64_t lade__memcache_charge(uint64_t len) { return len + LADE__MEMCACHE_OVERHEAD; }

static int mem_put(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len) {
  memcache_t *m = (memcache_t *)c;
  uint64_t charge = (uint64_t)len + LADE__MEMCACHE_OVERHEAD;
  if (charge > m->base.ix.capacity) {
    pthread_mutex_lock(&m->base.mu);
    m->base.st.rejected++;
    pthread_mutex_unlock(&m->base.mu);
    return 0;
  }
  lade__centry_t *e = calloc(1, sizeof *e);
  void *copy = malloc(len ? len : 1);
  if (!e || !copy) {
    free(e);
    free(copy);
    return lade__fail(LADE_ENOMEM, "memory cache: out of memory for a %zu-byte entry", len);
  }
  memcpy(copy, data, len);
  e->key = key;
  e->ver = ver;
  e->len = len;
  e->charge = charge;
  e->data = copy;

  pthread_mutex_lock(&m->base.mu);
  lade__centry_t *old = lade__cindex_find(&m->base.ix, key);
  if (old) drop(m, old);
  int rc = 0;
  if (!lade__cindex_admit(&m->base.ix, key, charge)) {
    m->base.st.rejected++;
    entry_free(e);
  } else {
    while (m->base.ix.used + charge > m->base.ix.capacity) {
      drop(m, lade__cindex_victim(&m->base.ix));
      m->base.st.evictions++;
    }
    e->seq = ++m->seq;
    rc = lade__cindex_insert(&m->base.ix, e);
    if (rc) {
      entry_free(e);
    } else {
      m->base.st.inserts++;
      m->base.st.bytes_written += len;
    }
  }
  pthread_mutex_unlock(&m->base.mu);
  return rc;
}

static const lade__cache_ops_t mem_ops = {.close = mem_close, .get = mem_get, .put = mem_put, .drop = mem_drop};

int lade__memcache_open(lade__cache_t **out, const lade__cache_opts_t *o) {
  memcache_t *m = calloc(1, sizeof *m);
  if (!m) return lade__fail(LADE_ENOMEM, "memory cache: out of memory");
  int rc = lade__cache_base_init(&m->base, &mem_ops, o, "memory cache");
  if (rc) {
    free(m);
    return rc;
  }
  *out = &m->base;
  return 0;
}
