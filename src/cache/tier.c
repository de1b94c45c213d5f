/* tier.c - a tier's common part (tier.h: its lock and shared index) and the
 * cache API's calls through the tier's vtable (cache.h), with the shared
 * index's contains/touch/evict/clear/stats for tiers that have no own. */
#include <string.h>
#include <time.h>

#include "cache/claims.h"
#include "cache/tier.h"

int lade__cache_base_init(lade__cache_t *c, const lade__cache_ops_t *ops, const lade__cache_opts_t *o,
                          const char *what) {
  int rc = lade__cindex_init(&c->ix, o);
  if (rc) return rc;
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    lade__cindex_free(&c->ix);
    return lade__fail(LADE_ETHREAD, "%s: cannot create its lock", what);
  }
  c->ops = ops;
  return 0;
}

void lade__cache_base_free(lade__cache_t *c) {
  lade__cindex_free(&c->ix);
  pthread_mutex_destroy(&c->mu);
}

void lade__cache_close(lade__cache_t *c) {
  if (c) c->ops->close(c);
}

int lade__cache_get(lade__cache_t *c, uint64_t key, lade__buf_t *out) { return c->ops->get(c, key, 0, out); }

int lade__cache_get_ver(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out) {
  return c->ops->get(c, key, ver, out);
}

/* A tier whose fetches are claimed node-wide (claim_fetch: the disk tier in
 * node mode): a miss claims the key (a demand claim); while another process
 * of the node holds a fresh demand claim on it (a read in progress for a
 * reader), polls for its put every millisecond for at most CLAIM_WAIT_S,
 * past which the caller reads storage itself, unclaimed (a claimer that is
 * that late, or died: a second read, never a lost sample). Another
 * process's prefetch claim is not waited for: its request may be queued
 * behind a whole chunk, and waiting for it stalled a job's first batches
 * by seconds; the caller reads the key itself, unclaimed, and its put (the
 * hop fills) ends that claim. A wait that ends in a hit counts a miss and
 * a hit. */
#define CLAIM_WAIT_S 5.0

static int get_claim_node(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed) {
  if (c->ops->get(c, key, ver, out) == 0) return 0;
  double end = lade__now() + CLAIM_WAIT_S;
  for (;;) {
    int who = c->ops->claim_fetch(c, key, true);
    if (who == LADE__CLAIM_AHEAD) return LADE_ENOENT;
    if (who == LADE__CLAIM_MINE) {
      /* put just before the claim was made: the claim is this caller's, but the bytes are there */
      if (lade__cache_contains(c, key) && c->ops->get(c, key, ver, out) == 0) {
        c->ops->end_fetch(c, key);
        return 0;
      }
      *claimed = true;
      return LADE_ENOENT;
    }
    if (lade__now() > end) return LADE_ENOENT;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    if (lade__cache_contains(c, key) && c->ops->get(c, key, ver, out) == 0) return 0;
  }
}

int lade__cache_get_claim(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed) {
  *claimed = false;
  if (c->ops->get_claim) return c->ops->get_claim(c, key, ver, out, claimed);
  if (c->ops->claim_fetch) return get_claim_node(c, key, ver, out, claimed);
  return c->ops->get(c, key, ver, out);
}

int lade__cache_view(lade__cache_t *c, uint64_t key, uint64_t ver, const void **data, size_t *len, uint64_t *token) {
  return c->ops->view ? c->ops->view(c, key, ver, data, len, token) : LADE_EUNSUPPORTED;
}

bool lade__cache_view_ok(lade__cache_t *c, uint64_t token) { return c->ops->view_ok && c->ops->view_ok(c, token); }

void lade__cache_release(lade__cache_t *c, uint64_t key) {
  if (c->ops->release) c->ops->release(c, key);
  else if (c->ops->end_fetch) c->ops->end_fetch(c, key);
}

bool lade__cache_claim_fetch(lade__cache_t *c, uint64_t key) {
  return !c->ops->claim_fetch || c->ops->claim_fetch(c, key, false) == LADE__CLAIM_MINE;
}

void lade__cache_end_fetch(lade__cache_t *c, uint64_t key) {
  if (c->ops->end_fetch) c->ops->end_fetch(c, key);
}

bool lade__cache_contains(lade__cache_t *c, uint64_t key) {
  if (c->ops->contains) return c->ops->contains(c, key);
  pthread_mutex_lock(&c->mu);
  bool r = lade__cindex_find(&c->ix, key) != NULL;
  pthread_mutex_unlock(&c->mu);
  return r;
}

lade__centry_t *lade__cache_pin_locked(lade__cache_t *c, uint64_t key, uint64_t ver) {
  lade__centry_t *e = lade__cindex_find(&c->ix, key);
  if (e && e->ver != ver) { /* the sample changed since it was stored */
    c->ops->drop(c, e);
    c->st.stale++;
    e = NULL;
  }
  if (e) {
    e->refs++;
    lade__cindex_touch(&c->ix, e);
  }
  return e;
}

lade__centry_t *lade__cache_pin(lade__cache_t *c, uint64_t key, uint64_t ver) {
  pthread_mutex_lock(&c->mu);
  lade__centry_t *e = lade__cache_pin_locked(c, key, ver);
  if (!e) c->st.misses++;
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

int lade__cache_put_ver(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len) {
  int rc = c->ops->put(c, key, ver, data, len);
  if (c->ops->end_fetch) c->ops->end_fetch(c, key); /* a put ends a node-wide claim, stored or refused */
  return rc;
}

int lade__cache_put(lade__cache_t *c, uint64_t key, const void *data, size_t len) {
  return lade__cache_put_ver(c, key, 0, data, len);
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
