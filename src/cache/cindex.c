/*
 * cindex.c - key -> entry map and the three eviction orders.
 *
 * The map is open addressing with linear probing over entry pointers and
 * backward-shift deletion (no tombstones), grown at 70% load. Every entry is
 * also on one doubly linked list: appended on insert, and under LRU moved to
 * the back on every read, so the head is the FIFO/LRU victim in O(1).
 *
 * Clairvoyant keeps a binary max-heap on each entry's next use as last
 * computed (at insert and on every read). Next uses change as the consumer
 * advances, so the heap may be stale; the victim is found lazily: look at the
 * top, ask next_use() again, and if the answer changed, store it, sift the
 * entry to its new place and look again, until the top is confirmed. Each
 * re-check fixes one entry for good (until its next use changes again), so an
 * eviction costs O(log n) plus O(log n) per stale entry met, never a scan of
 * all entries. It is exact when an entry's next use only changes through
 * reads of this tier; an entry whose use was consumed elsewhere keeps an old,
 * smaller next use until it reaches the top, so such an entry may be evicted
 * later than Belady would.
 */
#include "cache/cindex.h"

#include <assert.h>
#include <stdlib.h>

static size_t home(const lade__cindex_t *ix, uint64_t key) {
  return (size_t)(lade__mix64(key) & (ix->nslot - 1));
}

int lade__cindex_init(lade__cindex_t *ix, const lade__cache_opts_t *o) {
  *ix = (lade__cindex_t){0};
  ix->nslot = 64;
  ix->slot = calloc(ix->nslot, sizeof *ix->slot);
  if (!ix->slot) return lade__fail(LADE_ENOMEM, "cache: out of memory for the index");
  ix->capacity = o->capacity;
  ix->policy = o->policy;
  ix->next_use = o->next_use;
  ix->next_use_ctx = o->next_use_ctx;
  return 0;
}

void lade__cindex_free(lade__cindex_t *ix) {
  free(ix->slot);
  free(ix->heap);
  *ix = (lade__cindex_t){0};
}

lade__centry_t *lade__cindex_find(const lade__cindex_t *ix, uint64_t key) {
  for (size_t i = home(ix, key);; i = (i + 1) & (ix->nslot - 1)) {
    lade__centry_t *e = ix->slot[i];
    if (!e) return NULL;
    if (e->key == key) return e;
  }
}

static void map_put(lade__centry_t **slot, size_t nslot, lade__centry_t *e) {
  size_t i = (size_t)(lade__mix64(e->key) & (nslot - 1));
  while (slot[i]) i = (i + 1) & (nslot - 1);
  slot[i] = e;
}

static int map_grow(lade__cindex_t *ix) {
  size_t n = ix->nslot * 2;
  lade__centry_t **s = calloc(n, sizeof *s);
  if (!s) return lade__fail(LADE_ENOMEM, "cache: out of memory growing the index to %zu slots", n);
  for (size_t i = 0; i < ix->nslot; i++)
    if (ix->slot[i]) map_put(s, n, ix->slot[i]);
  free(ix->slot);
  ix->slot = s;
  ix->nslot = n;
  return 0;
}

static void map_del(lade__cindex_t *ix, uint64_t key) {
  size_t mask = ix->nslot - 1, i = home(ix, key);
  while (ix->slot[i]->key != key) i = (i + 1) & mask;
  /* backward shift: move later members of the cluster into the hole when
   * their home position does not lie cyclically in (hole, j]. */
  size_t hole = i;
  for (size_t j = (i + 1) & mask; ix->slot[j]; j = (j + 1) & mask) {
    size_t h = home(ix, ix->slot[j]->key);
    bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (!stays) {
      ix->slot[hole] = ix->slot[j];
      hole = j;
    }
  }
  ix->slot[hole] = NULL;
}

/* ---- list */
static void list_unlink(lade__cindex_t *ix, lade__centry_t *e) {
  if (e->prev) e->prev->next = e->next; else ix->head = e->next;
  if (e->next) e->next->prev = e->prev; else ix->tail = e->prev;
  e->prev = e->next = NULL;
}

static void list_append(lade__cindex_t *ix, lade__centry_t *e) {
  e->prev = ix->tail;
  e->next = NULL;
  if (ix->tail) ix->tail->next = e; else ix->head = e;
  ix->tail = e;
}

/* ---- heap */
static void heap_set(lade__cindex_t *ix, size_t i, lade__centry_t *e) {
  ix->heap[i] = e;
  e->heap_i = i;
}

static void heap_up(lade__cindex_t *ix, size_t i) {
  lade__centry_t *e = ix->heap[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (ix->heap[p]->nu >= e->nu) break;
    heap_set(ix, i, ix->heap[p]);
    i = p;
  }
  heap_set(ix, i, e);
}

static void heap_down(lade__cindex_t *ix, size_t i) {
  size_t n = ix->count;
  lade__centry_t *e = ix->heap[i];
  for (;;) {
    size_t l = 2 * i + 1, best = i;
    uint64_t bv = e->nu;
    if (l < n && ix->heap[l]->nu > bv) best = l, bv = ix->heap[l]->nu;
    if (l + 1 < n && ix->heap[l + 1]->nu > bv) best = l + 1;
    if (best == i) break;
    heap_set(ix, i, ix->heap[best]);
    i = best;
  }
  heap_set(ix, i, e);
}

static void heap_fix(lade__cindex_t *ix, size_t i) {
  lade__centry_t *e = ix->heap[i];
  heap_up(ix, i);
  heap_down(ix, e->heap_i);
}

static bool clairvoyant(const lade__cindex_t *ix) { return ix->policy == LADE__CACHE_CLAIRVOYANT; }

int lade__cindex_insert(lade__cindex_t *ix, lade__centry_t *e) {
  assert(!lade__cindex_find(ix, e->key));
  if ((ix->count + 1) * 10 > ix->nslot * 7) {
    int rc = map_grow(ix);
    if (rc) return rc;
  }
  if (clairvoyant(ix) && ix->count + 1 > ix->heap_cap) {
    size_t n = ix->heap_cap ? ix->heap_cap * 2 : 64;
    lade__centry_t **h = realloc(ix->heap, n * sizeof *h);
    if (!h) return lade__fail(LADE_ENOMEM, "cache: out of memory growing the eviction heap");
    ix->heap = h;
    ix->heap_cap = n;
  }
  map_put(ix->slot, ix->nslot, e);
  list_append(ix, e);
  ix->count++;
  if (clairvoyant(ix)) {
    e->nu = ix->next_use(ix->next_use_ctx, e->key);
    heap_set(ix, ix->count - 1, e);
    heap_up(ix, ix->count - 1);
  }
  ix->used += e->charge;
  e->live = true;
  return 0;
}

void lade__cindex_remove(lade__cindex_t *ix, lade__centry_t *e) {
  assert(e->live && lade__cindex_find(ix, e->key) == e);
  map_del(ix, e->key);
  list_unlink(ix, e);
  ix->count--;
  if (clairvoyant(ix)) {
    size_t i = e->heap_i;
    if (i != ix->count) {
      heap_set(ix, i, ix->heap[ix->count]);
      heap_fix(ix, i);
    }
  }
  assert(ix->used >= e->charge);
  ix->used -= e->charge;
  e->live = false;
}

void lade__cindex_touch(lade__cindex_t *ix, lade__centry_t *e) {
  if (ix->policy == LADE__CACHE_LRU) {
    list_unlink(ix, e);
    list_append(ix, e);
  } else if (clairvoyant(ix)) {
    uint64_t nu = ix->next_use(ix->next_use_ctx, e->key);
    if (nu != e->nu) {
      e->nu = nu;
      heap_fix(ix, e->heap_i);
    }
  }
}

lade__centry_t *lade__cindex_victim(lade__cindex_t *ix) {
  if (ix->count == 0) return NULL;
  if (!clairvoyant(ix)) return ix->head;
  for (;;) {
    lade__centry_t *top = ix->heap[0];
    uint64_t nu = ix->next_use(ix->next_use_ctx, top->key);
    if (nu == top->nu) return top;
    top->nu = nu;
    heap_down(ix, 0);
  }
}

bool lade__cindex_admit(lade__cindex_t *ix, uint64_t key, uint64_t charge) {
  if (charge > ix->capacity) return false;
  /* plan: the plan evicts (lade__cache_evict); a put that does not fit is refused */
  if (ix->policy == LADE__CACHE_PLAN) return ix->used + charge <= ix->capacity;
  if (!clairvoyant(ix) || ix->used + charge <= ix->capacity) return true;
  lade__centry_t *v = lade__cindex_victim(ix);
  return !v || ix->next_use(ix->next_use_ctx, key) <= v->nu;
}
