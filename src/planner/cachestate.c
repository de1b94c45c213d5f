/* cachestate.c - hash map and lazy max-heap used by the caching planners (see cachestate.h). */
#include <stdlib.h>
#include <string.h>

#include "cachestate.h"
#include "core/core.h"

int lade__hmap_init(lade__hmap_t *m, uint64_t cap) {
  uint64_t c = 16;
  while (c < cap * 2) c <<= 1;
  m->keys = malloc(c * sizeof *m->keys);
  m->vals = malloc(c * sizeof *m->vals);
  if (!m->keys || !m->vals) {
    free(m->keys);
    free(m->vals);
    m->keys = m->vals = NULL;
    return lade__fail(LADE_ENOMEM, "plan: out of memory for a cache map of %llu entries", (unsigned long long)c);
  }
  memset(m->keys, 0xff, c * sizeof *m->keys);
  m->cap = c;
  m->n = 0;
  return 0;
}

void lade__hmap_free(lade__hmap_t *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

void lade__hmap_clear(lade__hmap_t *m) {
  if (m->keys) memset(m->keys, 0xff, m->cap * sizeof *m->keys);
  m->n = 0;
}

int lade__hmap_get(const lade__hmap_t *m, uint64_t key, uint64_t *val) {
  uint64_t mask = m->cap - 1, i = lade__mix64(key) & mask;
  for (;;) {
    uint64_t k = m->keys[i];
    if (k == key) {
      *val = m->vals[i];
      return 1;
    }
    if (k == LADE__HMAP_EMPTY) return 0;
    i = (i + 1) & mask;
  }
}

static void insert_raw(uint64_t *keys, uint64_t *vals, uint64_t mask, uint64_t key, uint64_t val) {
  uint64_t i = lade__mix64(key) & mask;
  while (keys[i] != LADE__HMAP_EMPTY && keys[i] != key) i = (i + 1) & mask;
  keys[i] = key;
  vals[i] = val;
}

int lade__hmap_put(lade__hmap_t *m, uint64_t key, uint64_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    uint64_t nc = m->cap * 2;
    uint64_t *nk = malloc(nc * sizeof *nk), *nvl = malloc(nc * sizeof *nvl);
    if (!nk || !nvl) {
      free(nk);
      free(nvl);
      return lade__fail(LADE_ENOMEM, "plan: out of memory growing a cache map to %llu entries",
                        (unsigned long long)nc);
    }
    memset(nk, 0xff, nc * sizeof *nk);
    for (uint64_t i = 0; i < m->cap; i++)
      if (m->keys[i] != LADE__HMAP_EMPTY) insert_raw(nk, nvl, nc - 1, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nvl;
    m->cap = nc;
  }
  uint64_t mask = m->cap - 1, i = lade__mix64(key) & mask;
  while (m->keys[i] != LADE__HMAP_EMPTY && m->keys[i] != key) i = (i + 1) & mask;
  if (m->keys[i] == LADE__HMAP_EMPTY) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}

/* Linear probing with backward-shift deletion: no tombstones to sweep. */
void lade__hmap_del(lade__hmap_t *m, uint64_t key) {
  uint64_t mask = m->cap - 1, i = lade__mix64(key) & mask;
  while (m->keys[i] != key) {
    if (m->keys[i] == LADE__HMAP_EMPTY) return;
    i = (i + 1) & mask;
  }
  m->n--;
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (m->keys[j] == LADE__HMAP_EMPTY) break;
    uint64_t h = lade__mix64(m->keys[j]) & mask;
    /* move keys[j] into the hole at i unless its home lies cyclically in (i, j] */
    if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      i = j;
    }
  }
  m->keys[i] = LADE__HMAP_EMPTY;
}

static void swap(lade__kheap_t *h, uint64_t a, uint64_t b) {
  uint64_t tk = h->key[a], tv = h->val[a];
  h->key[a] = h->key[b];
  h->val[a] = h->val[b];
  h->key[b] = tk;
  h->val[b] = tv;
}

static void sift_up(lade__kheap_t *h, uint64_t i) {
  while (i > 0) {
    uint64_t p = (i - 1) / 2;
    if (h->key[p] >= h->key[i]) return;
    swap(h, p, i);
    i = p;
  }
}

static void sift_down(lade__kheap_t *h, uint64_t i) {
  for (;;) {
    uint64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && h->key[l] > h->key[m]) m = l;
    if (r < h->n && h->key[r] > h->key[m]) m = r;
    if (m == i) return;
    swap(h, m, i);
    i = m;
  }
}

int lade__kheap_push(lade__kheap_t *h, uint64_t key, uint64_t val) {
  if (h->n == h->cap) {
    uint64_t nc = h->cap ? h->cap * 2 : 16;
    int rc = lade__resize_u64(&h->key, nc, "plan: an eviction heap");
    if (!rc) rc = lade__resize_u64(&h->val, nc, "plan: an eviction heap");
    if (rc) return rc;
    h->cap = nc;
  }
  h->key[h->n] = key;
  h->val[h->n] = val;
  sift_up(h, h->n++);
  return 0;
}

void lade__kheap_pop(lade__kheap_t *h) {
  if (!h->n) return;
  h->n--;
  h->key[0] = h->key[h->n];
  h->val[0] = h->val[h->n];
  sift_down(h, 0);
}

void lade__kheap_heapify(lade__kheap_t *h) {
  for (uint64_t i = h->n / 2; i-- > 0;) sift_down(h, i);
}

void lade__kheap_free(lade__kheap_t *h) {
  free(h->key);
  free(h->val);
  h->key = h->val = NULL;
  h->n = h->cap = 0;
}
