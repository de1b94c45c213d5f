/*
 * nextuse.c - clairvoyant eviction's next-use maps (fetch_impl.h).
 *
 * A cache tier under the clairvoyant policy asks next_use(key): the position
 * of key's next use at or after the consumer's position, from first-use maps
 * of the consumer's epoch and the one after (a sample not used again in
 * those two epochs counts as never), asked of the plan cursor. The planning
 * worker builds the maps of the epochs it plans in (three kept: the
 * consumer's epoch may lag the planner's by one), so no epoch boundary costs
 * the consumer thread a shuffle. With padding (drop_last=false) a sample may
 * appear twice in an epoch; the map keeps its first position.
 *
 * Lock: nu_mu guards the maps and the consumer's position; it is taken
 * inside a cache tier's lock (next_use is called with it held), so nothing
 * here calls into a cache tier while holding it.
 */
#include <stdlib.h>

#include "core/core.h"
#include "engine/fetch_impl.h"

#define NONE32 UINT32_MAX

/* The map of epoch e, or NULL. Under nu_mu. */
static const uint32_t *map_of(const lade__fetch_t *f, uint64_t e) {
  for (int i = 0; i < LADE__NMAPS; i++)
    if (f->nu_map[i] && f->nu_ep[i] == e) return f->nu_map[i];
  return NULL;
}

void lade__nextuse_ensure(lade__fetch_t *f, uint64_t e) {
  if (!f->nu_on || e >= f->conf.epochs) return;
  pthread_mutex_lock(&f->nu_mu);
  bool have = map_of(f, e) != NULL;
  pthread_mutex_unlock(&f->nu_mu);
  if (have) return;
  uint32_t *m = malloc(f->samples_n * sizeof *m);
  if (!m || lade__cursor_first_use(f->p.cursor, e, m) != 0) { /* eviction gets less exact, never wrong */
    free(m);
    lade__clear_error();
    return;
  }
  pthread_mutex_lock(&f->nu_mu);
  int v = 0;
  for (int i = 1; i < LADE__NMAPS; i++) /* an empty slot, else the oldest epoch */
    if (!f->nu_map[v]) break;
    else if (!f->nu_map[i] || f->nu_ep[i] < f->nu_ep[v]) v = i;
  free(f->nu_map[v]);
  f->nu_map[v] = m;
  f->nu_ep[v] = e;
  pthread_mutex_unlock(&f->nu_mu);
}

int lade__nextuse_open(lade__fetch_t *f) {
  pthread_mutex_init(&f->nu_mu, NULL);
  for (int i = 0; i < LADE__NMAPS; i++) f->nu_ep[i] = UINT64_MAX;
  f->nu_on = f->conf.next_use;
  if (!f->nu_on) return 0;
  f->used = calloc(f->samples_n, sizeof *f->used);
  if (f->used) lade__nextuse_ensure(f, 0), lade__nextuse_ensure(f, 1);
  if (!f->nu_map[0]) { /* no memory for the maps: LRU, the next best without them */
    f->nu_on = false;
    f->conf.policy = LADE__CACHE_LRU;
  }
  return 0;
}

void lade__nextuse_close(lade__fetch_t *f) {
  for (int i = 0; i < LADE__NMAPS; i++) free(f->nu_map[i]);
  free((void *)f->used);
  pthread_mutex_destroy(&f->nu_mu);
}

/* Before the tiers see the read: a hit's refreshed next use is the one after this. */
void lade__nextuse_mark(lade__fetch_t *f, uint64_t idx, uint64_t q) {
  if (!f->used || idx >= f->samples_n) return;
  uint64_t epoch = f->p.steps ? q / f->p.steps : 0;
  atomic_store_explicit(&f->used[idx], (uint32_t)LADE__MIN(epoch + 1, UINT32_MAX), memory_order_relaxed);
}

void lade__nextuse_consumed(lade__fetch_t *f, uint64_t pos) {
  if (!f->nu_on) return;
  pthread_mutex_lock(&f->nu_mu);
  f->nu_cursor = pos;
  pthread_mutex_unlock(&f->nu_mu);
}

uint64_t lade__nextuse(void *ctx, uint64_t key) {
  lade__fetch_t *f = ctx;
  uint64_t r = UINT64_MAX;
  pthread_mutex_lock(&f->nu_mu);
  uint64_t e = f->per_epoch ? f->nu_cursor / f->per_epoch : 0;
  const uint32_t *m0 = map_of(f, e), *m1 = map_of(f, e + 1);
  if ((m0 || m1) && key < f->samples_n) {
    uint64_t base = e * f->per_epoch;
    uint64_t off = f->nu_cursor > base ? f->nu_cursor - base : 0;
    uint32_t p0 = m0 ? m0[key] : NONE32, p1 = m1 ? m1[key] : NONE32;
    uint64_t used = atomic_load_explicit(&f->used[key], memory_order_relaxed);
    if (used > e + 1) /* read ahead for the next epoch already */
      r = UINT64_MAX;
    else if (used == e + 1) /* read this epoch already (the engine's window runs ahead of the consumer) */
      r = p1 != NONE32 ? base + f->per_epoch + p1 : UINT64_MAX;
    else if (p0 != NONE32 && p0 >= off)
      r = base + p0;
    else if (p1 != NONE32)
      r = base + f->per_epoch + p1;
  }
  pthread_mutex_unlock(&f->nu_mu);
  return r;
}

