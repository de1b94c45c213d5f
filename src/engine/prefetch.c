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
 * sample the prefetcher has in flight waits for it instead of sending a
 * second request (lade__prefetch_wait).
 *
 * Lock: the fetch stage's mu guards the positions, the in-flight set and
 * the flags; it is never held while calling a cache tier or the source.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "engine/fetch_impl.h"


static int idxset_init(lade__idxset_t *s, size_t want) {
  size_t cap = 64;
  while (cap < want * 2) cap <<= 1;
  s->key = malloc(cap * sizeof *s->key);
  s->count = calloc(cap, sizeof *s->count);
  s->cap = cap;
  s->n = 0;
  return s->key && s->count ? 0 : -1;
}

static void idxset_free(lade__idxset_t *s) {
  free(s->key);
  free(s->count);
}

static size_t idxset_slot(const lade__idxset_t *s, uint64_t k) {
  size_t m = s->cap - 1, i = (size_t)lade__mix64(k) & m;
  while (s->count[i] && s->key[i] != k) i = (i + 1) & m;
  return i;
}

static bool idxset_has(const lade__idxset_t *s, uint64_t k) { return s->count[idxset_slot(s, k)] != 0; }

/* Adds k; false when it was already there (or the set is full). */
static bool idxset_add(lade__idxset_t *s, uint64_t k) {
  size_t i = idxset_slot(s, k);
  if (s->count[i]) return false;
  if ((s->n + 1) * 2 > s->cap) return false;
  s->key[i] = k;
  s->count[i] = 1;
  s->n++;
  return true;
}

static void idxset_del(lade__idxset_t *s, uint64_t k) {
  size_t m = s->cap - 1, i = idxset_slot(s, k);
  if (!s->count[i]) return;
  s->count[i] = 0;
  s->n--;
  for (size_t j = (i + 1) & m; s->count[j]; j = (j + 1) & m) {
    size_t home = (size_t)lade__mix64(s->key[j]) & m;
    /* move j back into the hole i when its home is not in (i, j] */
    if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
      s->key[i] = s->key[j];
      s->count[i] = s->count[j];
      s->count[j] = 0;
      i = j;
    }
  }
}

bool lade__prefetch_inflight(lade__fetch_t *f, uint64_t idx) {
  if (!f->pf_on) return false;
  pthread_mutex_lock(&f->mu);
  bool r = idxset_has(&f->inflight, idx);
  pthread_mutex_unlock(&f->mu);
  return r;
}

bool lade__prefetch_wait(lade__fetch_t *f, uint64_t idx) {
  bool waited = false;
  pthread_mutex_lock(&f->mu);
  while (!f->stop && idxset_has(&f->inflight, idx)) {
    waited = true;
    pthread_cond_wait(&f->cv_inflight, &f->mu);
  }
  pthread_mutex_unlock(&f->mu);
  if (waited) atomic_fetch_add_explicit(&f->waited, 1, memory_order_relaxed);
  return waited;
}

static void *prefetch_main(void *arg) {
  lade__fetch_t *f = arg;
  uint64_t B = f->p.batch;
  /* pending: the samples submitted and not yet read, in plan order (a ring
   * of up to two windows, so the next window is in flight while the last
   * one is still arriving and the source never runs dry between windows) */
  size_t cap = (size_t)f->conf.fetch_size * 2, head = 0, n = 0;
  /* of the ring's first entries, nsub are submitted: at most ra_samples
   * unread at once (a whole window in one submit overflowed the remote
   * source's table of unread results, which then dropped the very samples
   * needed next, and made the first sample wait for the whole window) */
  size_t nsub = 0, chunk = f->conf.ra_samples ? (size_t)LADE__MAX(f->conf.ra_samples / 2, 1) : cap;
  uint64_t *batch = malloc(B * sizeof *batch);
  uint64_t *want = malloc(LADE__MAX(f->conf.fetch_size, (uint64_t)LADE__MIN(chunk, cap)) * sizeof *want);
  uint64_t *ring = malloc(cap * sizeof *ring);
  lade__buf_t buf = {0};
  if (!batch || !want || !ring) {
    /* without its memory the prefetcher does nothing; reads still work */
    atomic_fetch_add_explicit(&f->pf_errors, 1, memory_order_relaxed);
    free(batch);
    free(want);
    free(ring);
    return NULL;
  }
  /* the engine fetches its own window (prefetch + 1 batches) itself */
  uint64_t window = (uint64_t)(f->conf.window) * B;
  uint64_t first = LADE__MIN((uint64_t)f->conf.window, f->p.steps * f->conf.epochs);
  pthread_mutex_lock(&f->mu);
  uint64_t gen = f->seek_gen;
  for (;;) {
    if (f->stop) break;
    /* start once the engine's first window is submitted: a remote source
     * starts requests in submission order, so speculative ones sent before
     * would hold every connection while the first batch waits */
    if (f->planned < first && f->consumed == 0) {
      pthread_cond_wait(&f->cv_pf, &f->mu);
      continue;
    }
    if (f->seek_gen != gen) { /* a seek: what is pending belongs to the old position */
      for (; n; n--, head = (head + 1) % cap) idxset_del(&f->inflight, ring[head]);
      head = 0;
      nsub = 0;
      gen = f->seek_gen;
      pthread_cond_broadcast(&f->cv_inflight);
    }
    uint64_t lo = f->consumed + window;
    if (f->pf_pos < lo) f->pf_pos = lo; /* the consumer overtook us: skip ahead */
    if (f->pf_pos < f->total && f->pf_pos - f->consumed <= f->conf.threshold + window && n + f->conf.fetch_size <= cap) {
      /* DELI's trigger: the samples fetched (or in flight) ahead of the
       * consumer fell to the threshold: fetch the next fetch_size */
      uint64_t start = f->pf_pos, end = LADE__MIN(start + f->conf.fetch_size, f->total);
      f->pf_pos = end;
      pthread_mutex_unlock(&f->mu);
      /* the window's samples in plan order, minus those cached or repeated */
      size_t k = 0;
      for (uint64_t q = start / B; q * B < end; q++) {
        uint32_t cnt, valid;
        if (lade__cursor_order(f->p.cursor, q, batch, &cnt, &valid) != 0) break;
        for (uint64_t i = 0; i < cnt; i++) {
          uint64_t pos = q * B + i;
          if (pos < start || pos >= end || lade__cache_contains(f->disk, batch[i])) continue;
          pthread_mutex_lock(&f->mu);
          /* a step the engine planned meanwhile is the engine's to fetch */
          bool added = q >= f->plan_hi && idxset_add(&f->inflight, batch[i]);
          pthread_mutex_unlock(&f->mu);
          if (added) want[k++] = batch[i];
        }
      }
      for (size_t j = 0; j < k; j++) ring[(head + n + j) % cap] = want[j];
      pthread_mutex_lock(&f->mu);
      n += k;
      continue;
    }
    if (n == 0) {
      pthread_cond_wait(&f->cv_pf, &f->mu);
      continue;
    }
    if (nsub < n && nsub <= chunk) {
      /* the next chunk in flight, in the background (the workers' own
       * misses, the batch the consumer needs now, start first), while the
       * last one still arrives */
      size_t k = LADE__MIN(chunk, n - nsub);
      for (size_t j = 0; j < k; j++) want[j] = ring[(head + nsub + j) % cap];
      nsub += k;
      pthread_mutex_unlock(&f->mu);
      if (f->p.ops->submit) f->p.ops->submit(f->p.src, want, k, 1);
      pthread_mutex_lock(&f->mu);
      continue;
    }
    uint64_t idx = ring[head];
    pthread_mutex_unlock(&f->mu);
    uint64_t ver = lade__fetch_version(f, idx);
    if (f->p.ops->read(f->p.src, idx, &buf) == 0) {
      if (ver != LADE__VERSION_UNKNOWN) lade__cache_put_ver(f->disk, idx, ver, buf.data, buf.len);
      atomic_fetch_add_explicit(&f->prefetched, 1, memory_order_relaxed);
    } else {
      atomic_fetch_add_explicit(&f->pf_errors, 1, memory_order_relaxed); /* the worker's own read reports it */
    }
    pthread_mutex_lock(&f->mu);
    if (f->seek_gen == gen) { /* else the seek branch above drops the ring, this one included */
      idxset_del(&f->inflight, idx);
      head = (head + 1) % cap;
      n--;
      nsub--;
    }
    pthread_cond_broadcast(&f->cv_inflight);
    pthread_mutex_unlock(&f->mu);
    if (f->p.src->on_ready) f->p.src->on_ready(f->p.src->on_ready_ctx);
    pthread_mutex_lock(&f->mu);
  }
  for (; n; n--, head = (head + 1) % cap) idxset_del(&f->inflight, ring[head]);
  pthread_cond_broadcast(&f->cv_inflight);
  pthread_mutex_unlock(&f->mu);
  lade__buf_free(&buf);
  free(batch);
  free(want);
  free(ring);
  return NULL;
}


int lade__prefetch_start(lade__fetch_t *f) {
  if (!f->pf_on) return 0;
  if (idxset_init(&f->inflight, 2 * f->conf.fetch_size) != 0) return lade__fail(LADE_ENOMEM, "prefetcher: out of memory");
  if (pthread_create(&f->pf_thread, NULL, prefetch_main, f) != 0)
    return lade__fail(LADE_ETHREAD, "cannot start the prefetcher thread: %s", strerror(errno));
  f->pf_started = true;
  return 0;
}

/* After stop was set and broadcast. */
void lade__prefetch_join(lade__fetch_t *f) {
  if (f->pf_started) pthread_join(f->pf_thread, NULL);
  idxset_free(&f->inflight);
}
