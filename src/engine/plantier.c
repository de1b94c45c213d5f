/* plantier.c - the tier a routed plan drives (plantier.h: the tables, the
 * locks and why). */
#include "engine/plantier.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "core/core.h"

#define ADMIT_WAIT_S 1

int lade__plantier_open(lade__plantier_t *pt, lade__cache_t *tier, lade__cache_t *disk, uint64_t samples,
                        uint64_t first, const char *plan) {
  *pt = (lade__plantier_t){.tier = tier, .disk = disk, .samples = samples};
  if (!tier) return 0;
  pthread_mutex_init(&pt->mu, NULL);
  pthread_mutex_init(&pt->put_mu, NULL);
  pthread_cond_init(&pt->cv, NULL);
  pt->adm_q = calloc(samples, sizeof *pt->adm_q);
  pt->adm_pending = calloc(samples, sizeof *pt->adm_pending);
  if (disk) {
    pt->adm_tier = calloc(samples, sizeof *pt->adm_tier);
    pt->mv_n = calloc(samples, sizeof *pt->mv_n);
    atomic_store(&pt->done_q, first);
  }
  if (!pt->adm_q || !pt->adm_pending || (disk && (!pt->adm_tier || !pt->mv_n)))
    return lade__fail(LADE_ENOMEM, "plan=%s: out of memory for the cache's admit table of %llu samples", plan,
                      (unsigned long long)samples);
  return 0;
}

void lade__plantier_close(lade__plantier_t *pt) {
  if (!pt->tier) return;
  free((void *)pt->adm_q);
  free((void *)pt->adm_pending);
  free((void *)pt->adm_tier);
  free((void *)pt->mv_n);
  pthread_mutex_destroy(&pt->mu);
  pthread_mutex_destroy(&pt->put_mu);
  pthread_cond_destroy(&pt->cv);
  *pt = (lade__plantier_t){0};
}

static void wake(lade__plantier_t *pt) {
  pthread_mutex_lock(&pt->mu);
  pthread_cond_broadcast(&pt->cv);
  pthread_mutex_unlock(&pt->mu);
}

void lade__plantier_quiesce(lade__plantier_t *pt) {
  if (!pt->tier) return;
  pthread_mutex_lock(&pt->mu);
  pt->stop = true;
  pthread_cond_broadcast(&pt->cv);
  pthread_mutex_unlock(&pt->mu);
}

bool lade__plantier_owns(const lade__plantier_t *pt, const lade__cache_t *t) {
  return pt->tier && (t == pt->tier || t == pt->disk);
}

/* ---------------------------------------------------------------- reads */

bool lade__plantier_admitting(lade__plantier_t *pt, uint64_t idx, uint64_t q) {
  return pt->tier && atomic_load_explicit(&pt->adm_q[idx], memory_order_relaxed) == q + 1 &&
         atomic_load_explicit(&pt->adm_pending[idx], memory_order_acquire);
}

bool lade__plantier_pending(lade__plantier_t *pt, uint64_t idx) {
  return pt->tier && atomic_load_explicit(&pt->adm_pending[idx], memory_order_acquire);
}

/* Waits on cv until done() is false, at most ADMIT_WAIT_S. */
static void wait_while(lade__plantier_t *pt, bool (*done)(lade__plantier_t *, uint64_t, uint64_t), uint64_t idx,
                       uint64_t q) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ADMIT_WAIT_S;
  pthread_mutex_lock(&pt->mu);
  while (!pt->stop && done(pt, idx, q))
    if (pthread_cond_timedwait(&pt->cv, &pt->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&pt->mu);
}

static bool admit_pending(lade__plantier_t *pt, uint64_t idx, uint64_t q) {
  (void)q;
  return atomic_load_explicit(&pt->adm_pending[idx], memory_order_acquire);
}

bool lade__plantier_wait_admit(lade__plantier_t *pt, uint64_t idx) {
  if (!lade__plantier_pending(pt, idx)) return false;
  wait_while(pt, admit_pending, idx, 0);
  return !atomic_load_explicit(&pt->adm_pending[idx], memory_order_acquire);
}

bool lade__plantier_move_pending(lade__plantier_t *pt, uint64_t idx, uint64_t q) {
  return pt->disk && atomic_load_explicit(&pt->mv_n[idx], memory_order_acquire) &&
         atomic_load_explicit(&pt->done_q, memory_order_acquire) < q;
}

void lade__plantier_wait_move(lade__plantier_t *pt, uint64_t idx, uint64_t q) {
  if (lade__plantier_move_pending(pt, idx, q)) wait_while(pt, lade__plantier_move_pending, idx, q);
}

lade__cache_t *lade__plantier_admit_tier(lade__plantier_t *pt, uint64_t idx) {
  if (pt->disk && atomic_load_explicit(&pt->adm_tier[idx], memory_order_relaxed) == LADE_TIER_DISK) return pt->disk;
  return pt->tier;
}

void lade__plantier_put(lade__plantier_t *pt, lade__cache_t *t, uint64_t idx, uint64_t ver, const void *data,
                        size_t len) {
  bool planned = lade__plantier_owns(pt, t);
  if (planned) pthread_mutex_lock(&pt->put_mu);
  lade__cache_put_ver(t, idx, ver, data, len);
  if (planned) pthread_mutex_unlock(&pt->put_mu);
}

void lade__plantier_put_admit(lade__plantier_t *pt, lade__cache_t *t, uint64_t idx, uint64_t ver, const void *data,
                              size_t len) {
  lade__plantier_put(pt, t, idx, ver, data, len);
  if (pt->disk) atomic_fetch_add_explicit(&pt->admits[t == pt->disk], 1, memory_order_relaxed);
}

void lade__plantier_counts(const lade__plantier_t *pt, uint64_t admits[2], uint64_t *moves_up, uint64_t *moves_down) {
  admits[0] = atomic_load(&pt->admits[0]);
  admits[1] = atomic_load(&pt->admits[1]);
  *moves_up = atomic_load(&pt->moves_up);
  *moves_down = atomic_load(&pt->moves_down);
}

void lade__plantier_end_admit(lade__plantier_t *pt, uint64_t idx) {
  atomic_store_explicit(&pt->adm_pending[idx], 0, memory_order_release);
  wake(pt);
}

/* ---------------------------------------------------------------- steps */

void lade__plantier_planned(lade__plantier_t *pt, const lade__cursor_step_t *st) {
  if (!pt->tier) return;
  for (uint32_t i = 0; i < st->nadmit; i++) {
    uint64_t x = st->admit[i];
    if (pt->disk) atomic_store_explicit(&pt->adm_tier[x], st->admit_tier[i], memory_order_relaxed);
    atomic_store_explicit(&pt->adm_q[x], st->q + 1, memory_order_relaxed);
    atomic_store_explicit(&pt->adm_pending[x], 1, memory_order_release);
  }
  if (pt->disk)
    for (uint32_t i = 0; i < st->nmove; i++) atomic_fetch_add_explicit(&pt->mv_n[st->move[i]], 1, memory_order_release);
}

/* Two tiers: step st's moves, after its evicts. A sample a later planned
 * step admits again is copied but kept where it was too: reads before that
 * admit find it in the moved-to tier, and the evict before the admit drops
 * the copy the admit's tier does not keep. A sample not in the tier it
 * leaves (a refused put, a fallback) is not moved; reads of it fall back. */
static void do_moves(lade__plantier_t *pt, const lade__cursor_step_t *st, uint64_t (*version)(void *, uint64_t),
                     void *ctx) {
  lade__buf_t b = {0};
  for (uint32_t i = 0; i < st->nmove; i++) {
    uint64_t x = st->move[i];
    bool up = st->move_to[i] == LADE_TIER_MEM;
    lade__cache_t *to = up ? pt->tier : pt->disk, *from = up ? pt->disk : pt->tier;
    uint64_t ver = version(ctx, x);
    pthread_mutex_lock(&pt->put_mu);
    bool readmit = atomic_load_explicit(&pt->adm_q[x], memory_order_relaxed) > st->q + 1;
    if (lade__cache_get_ver(from, x, ver, &b) == 0) {
      lade__cache_put_ver(to, x, ver, b.data, b.len);
      if (!readmit) lade__cache_evict(from, x);
      atomic_fetch_add_explicit(up ? &pt->moves_up : &pt->moves_down, 1, memory_order_relaxed);
    }
    lade__clear_error();
    pthread_mutex_unlock(&pt->put_mu);
    uint16_t n = atomic_load_explicit(&pt->mv_n[x], memory_order_relaxed);
    while (n && !atomic_compare_exchange_weak_explicit(&pt->mv_n[x], &n, (uint16_t)(n - 1), memory_order_release,
                                                       memory_order_relaxed)) {
    } /* 0 after a seek cleared it */
  }
  lade__buf_free(&b);
}

void lade__plantier_done(lade__plantier_t *pt, const lade__cursor_step_t *st,
                         uint64_t (*version)(void *ctx, uint64_t idx), void *ctx) {
  if (!pt->tier) return;
  for (uint32_t i = 0; i < st->nevict; i++) {
    uint64_t x = st->evict[i];
    /* admitted by this step too (evicted, then admitted again: the kinds
     * cancel an admit followed by an evict in one step) or by a later one:
     * the admit wins (two tiers: the admit's tier keeps it, the other
     * drops it) */
    pthread_mutex_lock(&pt->put_mu);
    bool readmit = atomic_load_explicit(&pt->adm_q[x], memory_order_relaxed) >= st->q + 1;
    if (!pt->disk) {
      if (!readmit) lade__cache_evict(pt->tier, x);
    } else {
      lade__cache_t *keep = readmit ? lade__plantier_admit_tier(pt, x) : NULL;
      if (keep != pt->tier) lade__cache_evict(pt->tier, x);
      if (keep != pt->disk) lade__cache_evict(pt->disk, x);
    }
    pthread_mutex_unlock(&pt->put_mu);
  }
  for (uint32_t i = 0; i < st->nadmit; i++) { /* admits whose read failed or was substituted */
    uint64_t x = st->admit[i];
    if (atomic_load_explicit(&pt->adm_q[x], memory_order_relaxed) == st->q + 1 &&
        atomic_load_explicit(&pt->adm_pending[x], memory_order_acquire))
      lade__plantier_end_admit(pt, x);
  }
  if (!pt->disk) return;
  if (st->nmove) do_moves(pt, st, version, ctx);
  atomic_store_explicit(&pt->done_q, st->q + 1, memory_order_release); /* the reads waiting for it go on */
  wake(pt);
}

void lade__plantier_seek(lade__plantier_t *pt, uint64_t q) {
  if (!pt->tier) return;
  pthread_mutex_lock(&pt->mu);
  for (uint64_t i = 0; i < pt->samples; i++) atomic_store_explicit(&pt->adm_pending[i], 0, memory_order_relaxed);
  if (pt->disk) {
    for (uint64_t i = 0; i < pt->samples; i++) atomic_store_explicit(&pt->mv_n[i], 0, memory_order_relaxed);
    atomic_store(&pt->done_q, q);
  }
  pthread_cond_broadcast(&pt->cv);
  pthread_mutex_unlock(&pt->mu);
}
