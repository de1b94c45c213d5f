/*
 * prefetch.c - DELI's prefetcher (paper 004, docs/references.md; the
 * cache side in docs/cache.md).
 *
 * It walks this learner's future sample sequence (position = (epoch *
 * steps + step) * B + i, the order the consumer will use them) and,
 * whenever the samples it has fetched but the consumer has not yet used
 * fall to `threshold`, fetches the next `fetch_size` samples into the disk
 * tier: background submit()s of the window in chunks (a remote source has
 * them in flight at once, yet starts the workers' own misses first), then a
 * read and a disk put per sample in plan order. The trigger is checked
 * after every put, with up to two windows outstanding, so the next window
 * is requested while the last one still arrives (checked only between
 * windows, the source ran dry at the end of each window: 18-20% of a cold
 * epoch's samples were then fetched by the workers themselves, against 5%).
 * It starts past the engine's own window (the batches the engine is filling
 * itself), so the two never fetch the same sample; a worker that needs a
 * sample the prefetcher has requested waits for it instead of sending a
 * second request (lade__prefetch_wait). It does not wait for a sample that
 * is only selected into the ring: a dataset the window holds whole puts
 * the first window's samples in the ring again for a later epoch, and
 * waiting for that position held the first batch of a 2-epoch run until
 * nearly every sample had been fetched (2.45 s against 0.41 s, 1,100
 * objects behind 5 ms). A worker takes such a sample instead: it leaves
 * the ring (its chunk skips it), and the worker reads it and puts it into
 * the tier for the later position. So does a sample the engine's
 * read-ahead requests first (lade__prefetch_take_ahead marks it TAKEN in
 * the set): this thread does not select it again for a later epoch, and
 * the worker that reads it puts it (one rank: 300 GETs for 300 objects
 * over 3 epochs, against 355, tests/s3 test_prefetcher_one_get_per_sample).
 * Not in node mode, where the node's claims decide who fetches and every
 * worker's read puts already; there the marks cost the node's prefetchers
 * their lead (GETs in the second epoch under mpirun -np 4).
 *
 * Lock: the piece's own `mu` (prefetch.h) guards the positions, the
 * in-flight set and the flags; it is never held while calling a cache tier,
 * the source, the cursor or the fetch stage's callback.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "engine/prefetch.h"

static int idxset_init(lade__idxset_t *s, size_t want) {
  size_t cap = 64;
  while (cap < want * 2) cap <<= 1;
  s->key = malloc(cap * sizeof *s->key);
  s->state = calloc(cap, sizeof *s->state);
  s->cap = cap;
  s->n = 0;
  return s->key && s->state ? 0 : -1;
}

static void idxset_free(lade__idxset_t *s) {
  free(s->key);
  free(s->state);
}

static size_t idxset_slot(const lade__idxset_t *s, uint64_t k) {
  size_t m = s->cap - 1, i = (size_t)lade__mix64(k) & m;
  while (s->state[i] && s->key[i] != k) i = (i + 1) & m;
  return i;
}

/* A sample in the set is SELECTED (in the ring, not requested yet) or
 * REQUESTED (submitted to the source): only a requested one is worth a
 * reader's wait. */
enum { SELECTED = 1, REQUESTED = 2, TAKEN = 3 /* by the engine's read-ahead: its worker reads and puts it */ };

static bool idxset_requested(const lade__idxset_t *s, uint64_t k) {
  return s->state[idxset_slot(s, k)] == REQUESTED;
}

static bool idxset_selected(const lade__idxset_t *s, uint64_t k) {
  return s->state[idxset_slot(s, k)] == SELECTED;
}

static void idxset_mark_requested(lade__idxset_t *s, uint64_t k) {
  size_t i = idxset_slot(s, k);
  if (s->state[i]) s->state[i] = REQUESTED;
}

/* Adds k; false when it was already there (or the set is full). */
static bool idxset_add(lade__idxset_t *s, uint64_t k) {
  size_t i = idxset_slot(s, k);
  if (s->state[i]) return false;
  if ((s->n + 1) * 2 > s->cap) return false;
  s->key[i] = k;
  s->state[i] = SELECTED;
  s->n++;
  return true;
}

static void idxset_del(lade__idxset_t *s, uint64_t k) {
  size_t m = s->cap - 1, i = idxset_slot(s, k);
  if (!s->state[i]) return;
  s->state[i] = 0;
  s->n--;
  for (size_t j = (i + 1) & m; s->state[j]; j = (j + 1) & m) {
    size_t home = (size_t)lade__mix64(s->key[j]) & m;
    /* move j back into the hole i when its home is not in (i, j] */
    if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
      s->key[i] = s->key[j];
      s->state[i] = s->state[j];
      s->state[j] = 0;
      i = j;
    }
  }
}

/* The TAKEN marks are kept in order too (pf->marks, bounded), so that
 * those nobody collects (the sample was on disk when its worker looked)
 * leave the set: the oldest when the list is full (its worker had the time
 * of the list's length to come), all at a seek. Locked. */
static void marks_pop(lade__prefetch_t *pf) {
  uint64_t k = pf->marks[pf->marks_head];
  pf->marks_head = (pf->marks_head + 1) % pf->marks_cap;
  pf->marks_n--;
  if (pf->inflight.state[idxset_slot(&pf->inflight, k)] == TAKEN) idxset_del(&pf->inflight, k);
}

static void marks_push(lade__prefetch_t *pf, uint64_t idx) {
  if (pf->marks_n == pf->marks_cap) marks_pop(pf);
  pf->marks[(pf->marks_head + pf->marks_n++) % pf->marks_cap] = idx;
}

bool lade__prefetch_inflight(lade__prefetch_t *pf, uint64_t idx) {
  if (!pf->on) return false;
  pthread_mutex_lock(&pf->mu);
  bool r = idxset_requested(&pf->inflight, idx);
  pthread_mutex_unlock(&pf->mu);
  return r;
}

bool lade__prefetch_take_ahead(lade__prefetch_t *pf, uint64_t idx) {
  if (!pf->on) return true;
  pthread_mutex_lock(&pf->mu);
  size_t at = idxset_slot(&pf->inflight, idx);
  uint32_t st = pf->inflight.state[at];
  if (st == SELECTED) pf->inflight.state[at] = TAKEN;
  else if (!st && !pf->p.node && idxset_add(&pf->inflight, idx))
    pf->inflight.state[at] = TAKEN; /* the set full: not marked */
  if (pf->inflight.state[at] == TAKEN && st != TAKEN) marks_push(pf, idx);
  pthread_mutex_unlock(&pf->mu);
  return st != REQUESTED;
}

void lade__prefetch_untake(lade__prefetch_t *pf, uint64_t idx) {
  if (!pf->on) return;
  pthread_mutex_lock(&pf->mu);
  if (pf->inflight.state[idxset_slot(&pf->inflight, idx)] == TAKEN) idxset_del(&pf->inflight, idx);
  pthread_mutex_unlock(&pf->mu);
}

int lade__prefetch_wait(lade__prefetch_t *pf, uint64_t idx) {
  if (!pf->on) return LADE__PF_NONE;
  int r = LADE__PF_NONE;
  pthread_mutex_lock(&pf->mu);
  while (!pf->stop && idxset_requested(&pf->inflight, idx)) {
    r = LADE__PF_WAITED;
    pthread_cond_wait(&pf->cv_inflight, &pf->mu);
  }
  size_t at = idxset_slot(&pf->inflight, idx);
  if (r == LADE__PF_NONE && pf->inflight.state[at] >= SELECTED) { /* the caller's now: the chunk will skip it */
    idxset_del(&pf->inflight, idx);
    pthread_cond_broadcast(&pf->cv_inflight);
    r = LADE__PF_TAKEN;
  }
  pthread_mutex_unlock(&pf->mu);
  if (r == LADE__PF_WAITED) atomic_fetch_add_explicit(&pf->waited, 1, memory_order_relaxed);
  return r;
}

void lade__prefetch_planned(lade__prefetch_t *pf, uint64_t q) {
  if (!pf->on) return;
  /* before the fetch stage asks whether the thread has the step's samples in
   * flight: from now on it does not take them (it checks plan_hi as it adds) */
  pthread_mutex_lock(&pf->mu);
  if (q + 1 > pf->plan_hi) pf->plan_hi = q + 1;
  if (++pf->planned <= pf->p.window) pthread_cond_broadcast(&pf->cv_work);
  pthread_mutex_unlock(&pf->mu);
}

void lade__prefetch_consumed(lade__prefetch_t *pf, uint64_t pos) {
  if (!pf->on) return;
  pthread_mutex_lock(&pf->mu);
  pf->consumed = pos;
  pthread_cond_broadcast(&pf->cv_work);
  pthread_mutex_unlock(&pf->mu);
}

void lade__prefetch_seek(lade__prefetch_t *pf, uint64_t pos, uint64_t q) {
  if (!pf->on) return;
  pthread_mutex_lock(&pf->mu);
  pf->seek_gen++;
  pf->pos = pos;
  pf->plan_hi = q;
  pf->consumed = pos;
  pthread_cond_broadcast(&pf->cv_work);
  pthread_mutex_unlock(&pf->mu);
}

/* A ring entry not to fetch after all: in the tier already, claimed by
 * another rank of the node, or taken by the engine (a worker, the
 * read-ahead). */
#define LEFT_OUT UINT64_MAX

/* The node-wide claims (lade__cache_claim_fetch) of the nsub submitted
 * samples from ring[head], dropped unread (a seek, the stop). Without mu:
 * the ring is the prefetcher thread's own. */
static void end_claims(lade__prefetch_t *pf, const uint64_t *ring, size_t cap, size_t head, size_t nsub) {
  for (; nsub; nsub--, head = (head + 1) % cap)
    if (ring[head] != LEFT_OUT) lade__cache_end_fetch(pf->p.disk, ring[head]);
}

/* Drops the ring's n samples from head (a seek, the stop): out of the set
 * with the TAKEN marks (their workers will not come), and the node-wide
 * claims of the nsub submitted ended. Called with mu; returns without it. */
static void drop_ring(lade__prefetch_t *pf, const uint64_t *ring, size_t cap, size_t head, size_t n, size_t nsub) {
  for (size_t h = head, k = n; k; k--, h = (h + 1) % cap)
    if (ring[h] != LEFT_OUT) idxset_del(&pf->inflight, ring[h]);
  while (pf->marks_n) marks_pop(pf);
  pthread_cond_broadcast(&pf->cv_inflight);
  pthread_mutex_unlock(&pf->mu);
  end_claims(pf, ring, cap, head, nsub);
}

/* Claims the k samples of the next chunk (ring[at...]) node-wide before
 * they are requested, so that the prefetchers of a node's ranks sharing the
 * disk tier fetch each once between them. One that another rank has
 * claimed (its put is coming; the workers read it from the tier, or
 * storage if it is late), one in the tier already, and one the engine took
 * since it was selected (lade__prefetch_take_ahead, lade__prefetch_wait)
 * become LEFT_OUT and leave the set, but a read-ahead's TAKEN mark outside
 * node mode, which its worker collects (below). Compacts the claimed ones into
 * want; returns their count. Without mu; takes it for the set. */
static size_t claim_chunk(lade__prefetch_t *pf, uint64_t *ring, size_t cap, size_t at, size_t k, uint64_t *want) {
  size_t m = 0;
  for (size_t j = 0; j < k; j++) {
    uint64_t *e = &ring[(at + j) % cap];
    bool cached = lade__cache_contains(pf->p.disk, *e), mine = !cached && lade__cache_claim_fetch(pf->p.disk, *e);
    pthread_mutex_lock(&pf->mu);
    if (mine && !idxset_selected(&pf->inflight, *e)) {
      /* the engine took it meanwhile: a worker (lade__prefetch_wait: gone
       * from the set), or the read-ahead (TAKEN): then, but in node mode
       * (where every worker's read puts), it stays in the set until its
       * worker's lade__prefetch_wait collects it, and that worker puts it
       * into the tier in this thread's place */
      if (pf->p.node) idxset_del(&pf->inflight, *e);
      pthread_mutex_unlock(&pf->mu);
      lade__cache_end_fetch(pf->p.disk, *e);
      *e = LEFT_OUT;
      continue;
    }
    if (mine) {
      idxset_mark_requested(&pf->inflight, *e);
      want[m++] = *e;
    } else {
      idxset_del(&pf->inflight, *e);
      pthread_cond_broadcast(&pf->cv_inflight);
    }
    pthread_mutex_unlock(&pf->mu);
    if (!mine) *e = LEFT_OUT;
  }
  return m;
}

/* The samples at positions [start, end) in plan order, minus those cached
 * or repeated, into want (added to the in-flight set); their count. Called
 * without mu. */
static size_t select_window(lade__prefetch_t *pf, uint64_t start, uint64_t end, uint64_t *batch, uint64_t *want) {
  const lade__prefetch_params_t *p = &pf->p;
  uint64_t B = p->batch;
  size_t k = 0;
  for (uint64_t q = start / B; q * B < end; q++) {
    uint32_t cnt, valid;
    if (lade__cursor_order(p->cursor, q, batch, &cnt, &valid) != 0) break;
    for (uint64_t i = 0; i < cnt; i++) {
      uint64_t pos = q * B + i;
      if (pos < start || pos >= end || lade__cache_contains(p->disk, batch[i])) continue;
      pthread_mutex_lock(&pf->mu);
      /* a step the engine planned meanwhile is the engine's to fetch */
      bool added = q >= pf->plan_hi && idxset_add(&pf->inflight, batch[i]);
      pthread_mutex_unlock(&pf->mu);
      if (added) want[k++] = batch[i];
    }
  }
  return k;
}

static void *prefetch_main(void *arg) {
  lade__prefetch_t *pf = arg;
  const lade__prefetch_params_t *p = &pf->p;
  uint64_t B = p->batch;
  /* pending: the samples submitted and not yet read, in plan order (a ring
   * of up to two windows, so the next window is in flight while the last
   * one is still arriving and the source never runs dry between windows) */
  size_t cap = (size_t)p->fetch_size * 2, head = 0, n = 0;
  /* of the ring's first entries, nsub are submitted: at most ra_samples
   * unread at once (a whole window in one submit overflowed the remote
   * source's table of unread results, which then dropped the very samples
   * needed next, and made the first sample wait for the whole window) */
  size_t nsub = 0, chunk = p->ra_samples ? (size_t)LADE__MAX(p->ra_samples / 2, 1) : cap;
  uint64_t *batch = malloc(B * sizeof *batch);
  uint64_t *want = malloc(LADE__MAX(p->fetch_size, (uint64_t)LADE__MIN(chunk, cap)) * sizeof *want);
  uint64_t *ring = malloc(cap * sizeof *ring);
  lade__buf_t buf = {0};
  if (!batch || !want || !ring) {
    /* without its memory the prefetcher does nothing; reads still work */
    atomic_fetch_add_explicit(&pf->errors, 1, memory_order_relaxed);
    free(batch);
    free(want);
    free(ring);
    return NULL;
  }
  /* the engine fetches its own window (prefetch + 1 batches) itself */
  uint64_t window = p->window * B;
  uint64_t first = LADE__MIN(p->window, p->steps * p->epochs);
  pthread_mutex_lock(&pf->mu);
  uint64_t gen = pf->seek_gen;
  for (;;) {
    if (pf->stop) break;
    /* start once the engine's first window is submitted: a remote source
     * starts requests in submission order, so speculative ones sent before
     * would hold every connection while the first batch waits */
    if (pf->planned < first && pf->consumed == 0) {
      pthread_cond_wait(&pf->cv_work, &pf->mu);
      continue;
    }
    if (pf->seek_gen != gen) { /* a seek: what is pending belongs to the old position */
      gen = pf->seek_gen;
      drop_ring(pf, ring, cap, head, n, nsub);
      head = n = nsub = 0;
      pthread_mutex_lock(&pf->mu);
      continue;
    }
    uint64_t lo = pf->consumed + window;
    if (pf->pos < lo) pf->pos = lo; /* the consumer overtook us: skip ahead */
    if (pf->pos < pf->total && pf->pos - pf->consumed <= p->threshold + window && n + p->fetch_size <= cap) {
      /* DELI's trigger: the samples fetched (or in flight) ahead of the
       * consumer fell to the threshold: fetch the next fetch_size */
      uint64_t start = pf->pos, end = LADE__MIN(start + p->fetch_size, pf->total);
      pf->pos = end;
      pthread_mutex_unlock(&pf->mu);
      size_t k = select_window(pf, start, end, batch, want);
      for (size_t j = 0; j < k; j++) ring[(head + n + j) % cap] = want[j];
      pthread_mutex_lock(&pf->mu);
      n += k;
      continue;
    }
    if (n == 0) {
      pthread_cond_wait(&pf->cv_work, &pf->mu);
      continue;
    }
    if (nsub < n && nsub <= chunk) {
      /* the next chunk in flight, in the background (the workers' own
       * misses, the batch the consumer needs now, start first), while the
       * last one still arrives */
      size_t k = LADE__MIN(chunk, n - nsub), at = head + nsub;
      nsub += k;
      pthread_mutex_unlock(&pf->mu);
      k = claim_chunk(pf, ring, cap, at, k, want);
      if (p->ops->submit && k) p->ops->submit(p->src, want, k, 1);
      pthread_mutex_lock(&pf->mu);
      continue;
    }
    uint64_t idx = ring[head];
    if (idx == LEFT_OUT) { /* another fetches it, or nobody needs to */
      head = (head + 1) % cap, n--, nsub--;
      continue;
    }
    pthread_mutex_unlock(&pf->mu);
    uint64_t ver = p->version(p->ctx, idx);
    if (p->ops->read(p->src, idx, &buf) == 0) {
      if (ver != LADE__VERSION_UNKNOWN) lade__cache_put_ver(p->disk, idx, ver, buf.data, buf.len);
      atomic_fetch_add_explicit(&pf->prefetched, 1, memory_order_relaxed);
    } else {
      atomic_fetch_add_explicit(&pf->errors, 1, memory_order_relaxed); /* the worker's own read reports it */
    }
    lade__cache_end_fetch(p->disk, idx);
    pthread_mutex_lock(&pf->mu);
    if (pf->seek_gen == gen) { /* else the seek branch above drops the ring, this one included */
      idxset_del(&pf->inflight, idx);
      head = (head + 1) % cap;
      n--;
      nsub--;
    }
    pthread_cond_broadcast(&pf->cv_inflight);
    pthread_mutex_unlock(&pf->mu);
    if (p->src->on_ready) p->src->on_ready(p->src->on_ready_ctx);
    pthread_mutex_lock(&pf->mu);
  }
  drop_ring(pf, ring, cap, head, n, nsub);
  lade__buf_free(&buf);
  free(batch);
  free(want);
  free(ring);
  return NULL;
}


int lade__prefetch_start(lade__prefetch_t *pf, const lade__prefetch_params_t *p) {
  *pf = (lade__prefetch_t){.p = *p, .total = p->steps * p->batch * p->epochs};
  /* the ring's two windows, and the read-ahead's samples marked TAKEN */
  pf->marks_cap = 2 * (size_t)(p->ra_samples + p->window * p->batch) + 64;
  pf->marks = malloc(pf->marks_cap * sizeof *pf->marks);
  if (!pf->marks || idxset_init(&pf->inflight, 2 * p->fetch_size + pf->marks_cap) != 0) {
    free(pf->marks);
    idxset_free(&pf->inflight);
    *pf = (lade__prefetch_t){0};
    return lade__fail(LADE_ENOMEM, "prefetcher: out of memory");
  }
  pthread_mutex_init(&pf->mu, NULL);
  pthread_cond_init(&pf->cv_work, NULL);
  pthread_cond_init(&pf->cv_inflight, NULL);
  if (pthread_create(&pf->thread, NULL, prefetch_main, pf) != 0) {
    int e = errno;
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv_work);
    pthread_cond_destroy(&pf->cv_inflight);
    idxset_free(&pf->inflight);
    free(pf->marks);
    *pf = (lade__prefetch_t){0};
    return lade__fail(LADE_ETHREAD, "cannot start the prefetcher thread: %s", strerror(e));
  }
  pf->on = true;
  return 0;
}

void lade__prefetch_counts(const lade__prefetch_t *pf, uint64_t *prefetched, uint64_t *errors, uint64_t *waited) {
  *prefetched = atomic_load(&pf->prefetched);
  *errors = atomic_load(&pf->errors);
  *waited = atomic_load(&pf->waited);
}

void lade__prefetch_quiesce(lade__prefetch_t *pf) {
  if (!pf->on) return;
  pthread_mutex_lock(&pf->mu);
  pf->stop = true;
  pthread_cond_broadcast(&pf->cv_work);
  pthread_cond_broadcast(&pf->cv_inflight);
  pthread_mutex_unlock(&pf->mu);
}

void lade__prefetch_close(lade__prefetch_t *pf) {
  if (!pf->on) return;
  lade__prefetch_quiesce(pf);
  pthread_join(pf->thread, NULL);
  idxset_free(&pf->inflight);
  free(pf->marks);
  pthread_mutex_destroy(&pf->mu);
  pthread_cond_destroy(&pf->cv_work);
  pthread_cond_destroy(&pf->cv_inflight);
  *pf = (lade__prefetch_t){0};
}
