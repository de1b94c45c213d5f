/*
 * nextuse.c - clairvoyant eviction's next-use maps (nextuse.h).
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
 * Lock: `mu` guards the maps and the consumer's position; it is taken
 * inside a cache tier's lock (next_use is called with it held), so nothing
 * here calls into a cache tier while holding it.
 */
#include <stdlib.h>

#include "core/core.h"
#include "engine/nextuse.h"

#define NONE32 UINT32_MAX

/* The map of epoch e, or NULL. Under mu. */
static const uint32_t *map_of(const lade__nextuse_t *nu, uint64_t e) {
  for (int i = 0; i < LADE__NMAPS; i++)
    if (nu->map[i] && nu->ep[i] == e) return nu->map[i];
  return NULL;
}

void lade__nextuse_ensure(lade__nextuse_t *nu, uint64_t e) {
  if (!nu->on || e >= nu->epochs) return;
  pthread_mutex_lock(&nu->mu);
  bool have = map_of(nu, e) != NULL;
  pthread_mutex_unlock(&nu->mu);
  if (have) return;
  uint32_t *m = malloc(nu->samples * sizeof *m);
  if (!m || lade__cursor_first_use(nu->cursor, e, m) != 0) { /* eviction gets less exact, never wrong */
    free(m);
    lade__clear_error();
    return;
  }
  pthread_mutex_lock(&nu->mu);
  int v = 0;
  for (int i = 1; i < LADE__NMAPS; i++) /* an empty slot, else the oldest epoch */
    if (!nu->map[v]) break;
    else if (!nu->map[i] || nu->ep[i] < nu->ep[v]) v = i;
  free(nu->map[v]);
  nu->map[v] = m;
  nu->ep[v] = e;
  pthread_mutex_unlock(&nu->mu);
}

bool lade__nextuse_open(lade__nextuse_t *nu, lade__cursor_t *cursor, uint64_t samples, uint64_t steps,
                        uint64_t batch, uint64_t epochs) {
  *nu = (lade__nextuse_t){.cursor = cursor, .samples = samples, .steps = steps, .per_epoch = steps * batch,
                          .epochs = epochs, .on = true};
  pthread_mutex_init(&nu->mu, NULL);
  for (int i = 0; i < LADE__NMAPS; i++) nu->ep[i] = UINT64_MAX;
  nu->used = calloc(samples, sizeof *nu->used);
  if (nu->used) lade__nextuse_ensure(nu, 0), lade__nextuse_ensure(nu, 1);
  if (!nu->map[0]) nu->on = false;
  return nu->on;
}

void lade__nextuse_close(lade__nextuse_t *nu) {
  if (!nu->cursor) return; /* never opened */
  for (int i = 0; i < LADE__NMAPS; i++) free(nu->map[i]);
  free((void *)nu->used);
  pthread_mutex_destroy(&nu->mu);
  *nu = (lade__nextuse_t){0};
}

void lade__nextuse_mark(lade__nextuse_t *nu, uint64_t idx, uint64_t q) {
  if (!nu->on || idx >= nu->samples) return;
  uint64_t epoch = nu->steps ? q / nu->steps : 0;
  atomic_store_explicit(&nu->used[idx], (uint32_t)LADE__MIN(epoch + 1, UINT32_MAX), memory_order_relaxed);
}

void lade__nextuse_consumed(lade__nextuse_t *nu, uint64_t pos) {
  if (!nu->on) return;
  pthread_mutex_lock(&nu->mu);
  nu->consumer = pos;
  pthread_mutex_unlock(&nu->mu);
}

uint64_t lade__nextuse(void *ctx, uint64_t key) {
  lade__nextuse_t *nu = ctx;
  uint64_t r = UINT64_MAX;
  pthread_mutex_lock(&nu->mu);
  uint64_t e = nu->per_epoch ? nu->consumer / nu->per_epoch : 0;
  const uint32_t *m0 = map_of(nu, e), *m1 = map_of(nu, e + 1);
  if ((m0 || m1) && key < nu->samples) {
    uint64_t base = e * nu->per_epoch;
    uint64_t off = nu->consumer > base ? nu->consumer - base : 0;
    uint32_t p0 = m0 ? m0[key] : NONE32, p1 = m1 ? m1[key] : NONE32;
    uint64_t used = atomic_load_explicit(&nu->used[key], memory_order_relaxed);
    if (used > e + 1) /* read ahead for the next epoch already */
      r = UINT64_MAX;
    else if (used == e + 1) /* read this epoch already (the engine's window runs ahead of the consumer) */
      r = p1 != NONE32 ? base + nu->per_epoch + p1 : UINT64_MAX;
    else if (p0 != NONE32 && p0 >= off)
      r = base + p0;
    else if (p1 != NONE32)
      r = base + nu->per_epoch + p1;
  }
  pthread_mutex_unlock(&nu->mu);
  return r;
}
