/*
 * memcache.c - the memory tier: each entry's bytes in one malloc'd block,
 * charged its length plus LADE__MEMCACHE_OVERHEAD.
 *
 * Single flight (lade__cache_get_claim, as the node tier's, shmcache.c): a
 * claim-get that misses records a claim {key, its thread} and returns
 * LADE_ENOENT with *claimed; the caller reads the sample and puts it, or
 * releases the claim (its read failed). Another claim-get of the key
 * meanwhile waits on claim_cv until the claim ends, then asks again: a hit,
 * or a miss that it claims itself (the put was refused or the read failed:
 * it reads the sample). A put of the key ends its claim whoever holds it,
 * whether the entry is stored or refused (larger than the tier, not
 * admitted, out of memory); a release ends it only from the thread that
 * holds it (the claim may have ended and been taken by another thread
 * since). Every wait is bounded by claim_ms: past it, a miss without a
 * claim (the holder still ends its own). Eviction and clear leave claims
 * alone: a claim is a read in progress, not an entry. A thread holds one
 * claim at a time (fetch.c claims one sample per read), so the list is as
 * short as the fetch workers are few.
 *
 * Lock: `mu` guards the index, every entry's fields, the stats and the
 * claims; claim_cv is waited on with mu. Copies run outside it: get pins
 * the entry (refs), copies, and re-locks to unpin; put copies into a fresh
 * block before locking. An entry evicted or replaced while pinned leaves
 * the index at once (its bytes no longer count) and is freed by the last
 * unpin. No other lock is taken while holding mu.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/tier.h"

#define LADE__MEMCACHE_OVERHEAD 64
#define CLAIM_WAIT_MS 60000 /* claim_timeout_ms 0: peer_timeout_ms's default */

typedef struct claim {
  uint64_t key;
  pthread_t owner; /* the thread reading the sample */
  struct claim *next;
} claim_t;

typedef struct memcache {
  lade__cache_t base; /* ops, mu, ix, st */
  uint64_t seq;
  claim_t *claims;         /* under mu: the samples a thread that missed them is reading */
  pthread_cond_t claim_cv; /* with mu (CLOCK_MONOTONIC): a claim ended */
  uint32_t claim_ms;
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
  while (m->claims) { /* none when every reader ended its claim; all the same, nothing leaks */
    claim_t *k = m->claims;
    m->claims = k->next;
    free(k);
  }
  pthread_cond_destroy(&m->claim_cv);
  lade__cache_base_free(&m->base);
  free(m);
}

static void mem_drop(lade__cache_t *c, lade__centry_t *e) { drop((memcache_t *)c, e); }

/* Where key's claim is linked (*p NULL: none). Locked. */
static claim_t **claim_at(memcache_t *m, uint64_t key) {
  claim_t **p = &m->claims;
  while (*p && (*p)->key != key) p = &(*p)->next;
  return p;
}

/* Ends the claim at *p and wakes the waiters (of every key: each asks again). Locked. */
static void claim_end(memcache_t *m, claim_t **p) {
  claim_t *k = *p;
  *p = k->next;
  free(k);
  pthread_cond_broadcast(&m->claim_cv);
}

/* Copies the pinned entry e out with no lock held, then unpins it and
 * counts the hit (`waited`: after a wait for another thread's read). */
static int copy_out(memcache_t *m, lade__centry_t *e, lade__buf_t *out, bool waited) {
  int rc = lade__buf_reserve(out, e->len);
  if (rc == 0) {
    memcpy(out->data, e->data, e->len);
    out->len = e->len;
  }
  pthread_mutex_lock(&m->base.mu);
  if (rc == 0) {
    m->base.st.hits++;
    m->base.st.bytes_read += e->len;
    m->base.st.waited += waited;
  }
  if (--e->refs == 0 && !e->live) entry_free(e);
  pthread_mutex_unlock(&m->base.mu);
  return rc;
}

static int mem_get(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out) {
  lade__centry_t *e = lade__cache_pin(c, key, ver);
  return e ? copy_out((memcache_t *)c, e, out, false) : LADE_ENOENT;
}

/* The get, single flight (see the top): a hit; or a miss this caller
 * claims; or, while another thread's claim of key stands, a wait (at most
 * claim_ms) for it to end, then the same again. */
static int mem_get_claim(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed) {
  memcache_t *m = (memcache_t *)c;
  struct timespec until = {0, 0};
  bool waited = false, late = false;
  lade__centry_t *e;
  pthread_mutex_lock(&m->base.mu);
  while (!(e = lade__cache_pin_locked(c, key, ver))) {
    claim_t **p = claim_at(m, key);
    if (!*p) { /* nobody is reading it: this caller does (no memory for the claim: it reads all the same) */
      claim_t *k = malloc(sizeof *k);
      if (k) {
        *k = (claim_t){.key = key, .owner = pthread_self(), .next = m->claims};
        m->claims = k;
        *claimed = true;
      }
      break;
    }
    if (late) break; /* waited claim_ms: a plain miss, the claim stays its holder's */
    if (!waited) {
      clock_gettime(CLOCK_MONOTONIC, &until);
      until.tv_sec += m->claim_ms / 1000;
      until.tv_nsec += (long)(m->claim_ms % 1000) * 1000000L;
      if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
      waited = true;
    }
    late = pthread_cond_timedwait(&m->claim_cv, &m->base.mu, &until) == ETIMEDOUT;
  }
  if (!e) m->base.st.misses++;
  pthread_mutex_unlock(&m->base.mu);
  return e ? copy_out(m, e, out, waited) : LADE_ENOENT;
}

static void mem_release(lade__cache_t *c, uint64_t key) {
  memcache_t *m = (memcache_t *)c;
  pthread_mutex_lock(&m->base.mu);
  claim_t **p = claim_at(m, key);
  if (*p && pthread_equal((*p)->owner, pthread_self())) claim_end(m, p);
  pthread_mutex_unlock(&m->base.mu);
}

uint64_t lade__memcache_charge(uint64_t len) { return len + LADE__MEMCACHE_OVERHEAD; }

/* Every path ends key's claim (under mu, with the entry's insert when
 * there is one), so its waiters ask again: a hit, or a miss they claim. */
static int mem_put(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len) {
  memcache_t *m = (memcache_t *)c;
  uint64_t charge = (uint64_t)len + LADE__MEMCACHE_OVERHEAD;
  lade__centry_t *e = NULL;
  int rc = 0;
  if (charge <= m->base.ix.capacity) {
    e = calloc(1, sizeof *e);
    void *copy = malloc(len ? len : 1);
    if (!e || !copy) {
      free(e);
      free(copy);
      e = NULL;
      rc = lade__fail(LADE_ENOMEM, "memory cache: out of memory for a %zu-byte entry", len);
    } else {
      memcpy(copy, data, len);
      e->key = key;
      e->ver = ver;
      e->len = len;
      e->charge = charge;
      e->data = copy;
    }
  }

  pthread_mutex_lock(&m->base.mu);
  claim_t **p = claim_at(m, key);
  if (*p) claim_end(m, p);
  if (!e) {
    if (!rc) m->base.st.rejected++; /* larger than the tier */
    pthread_mutex_unlock(&m->base.mu);
    return rc;
  }
  lade__centry_t *old = lade__cindex_find(&m->base.ix, key);
  if (old) drop(m, old);
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

static const lade__cache_ops_t mem_ops = {.close = mem_close, .get = mem_get, .put = mem_put, .drop = mem_drop,
                                          .get_claim = mem_get_claim, .release = mem_release};

int lade__memcache_open(lade__cache_t **out, const lade__cache_opts_t *o) {
  memcache_t *m = calloc(1, sizeof *m);
  if (!m) return lade__fail(LADE_ENOMEM, "memory cache: out of memory");
  pthread_condattr_t a;
  bool ok = pthread_condattr_init(&a) == 0;
  if (ok) {
    ok = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&m->claim_cv, &a) == 0;
    pthread_condattr_destroy(&a);
  }
  if (!ok) {
    free(m);
    return lade__fail(LADE_ETHREAD, "memory cache: cannot create its condition variable");
  }
  m->claim_ms = o->claim_timeout_ms ? o->claim_timeout_ms : CLAIM_WAIT_MS;
  int rc = lade__cache_base_init(&m->base, &mem_ops, o, "memory cache");
  if (rc) {
    pthread_cond_destroy(&m->claim_cv);
    free(m);
    return rc;
  }
  *out = &m->base;
  return 0;
}
