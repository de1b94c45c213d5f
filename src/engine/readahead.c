/*
 * readahead.c - remote requests ahead of the workers (readahead.h): a
 * planned step's storage reads are handed to a remote source at once (its
 * submit), and, with readahead_bytes, the steps after it, in plan order and
 * in chunks, so neighbours coalesce across steps; plan=shards over a remote
 * source reads the shard stream front to back. Called by the engine's one
 * planning worker, in step order (seek by the engine's seek); the positions
 * under the piece's own `mu`, never held while calling out.
 */
#include <stdlib.h>

#include "core/core.h"
#include "engine/readahead.h"

/* Unread results a remote source keeps by default (docs/http.md): what the
 * shards stream holds in the shuffle buffer and ahead must fit, unless the
 * source can raise its bound (reserve). */
#define SR_MAX_SAMPLES 1400
#define RA_MAX_SAMPLES 1024

/* Whether a read by this route goes to the source: under a plan, a peer sends
 * what it routes to a peer (with a transport), and a cache route that misses
 * is read once when found missing, so neither is requested ahead. */
bool lade__readahead_reads_storage(const lade__readahead_t *ra, int32_t route) {
  return !ra->p.routed || route == LADE__ROUTE_ANY || route == LADE_FROM_STORAGE || (route >= 0 && !ra->p.peers);
}

static bool wanted(const lade__readahead_t *ra, uint64_t idx) { return ra->p.wanted(ra->p.ctx, idx); }

void lade__readahead_open(lade__readahead_t *ra, const lade__readahead_params_t *p) {
  *ra = (lade__readahead_t){.p = *p, .remote = p->ops->submit != NULL};
  pthread_mutex_init(&ra->mu, NULL);
  uint64_t count = 0, cap = 0, B = p->batch;
  /* the engine's window of batches and the steps read ahead wait as unread
   * results: a source that drops the oldest beyond its bound would fetch
   * them twice (a prefetch of 8 batches of 400 TFRecord records over S3
   * did, every epoch: AU 16% instead of 99% in bench/dlio_vs_reference.py) */
  if (ra->remote && p->ops->reserve) {
    uint64_t held = (p->window + 2 + p->ra_steps) * B + p->ra_samples;
    p->ops->reserve(p->src, held + RA_MAX_SAMPLES, held * p->mean_bytes + (64u << 20));
  }
  if (!ra->remote || !p->ra_steps || lade__cursor_stream_info(p->cursor, &count, &cap) != 0) {
    lade__clear_error();
    return;
  }
  /* the buffer's samples wait as unread results too (as WebDataset holds
   * its shuffle buffer in memory): a source that can raise its bound on
   * them (reserve) streams with any buffer; else it must fit the default
   * bound, or steps are read ahead as usual */
  uint64_t room = SR_MAX_SAMPLES > cap + B ? SR_MAX_SAMPLES - cap - B : 0;
  ra->sr_ahead = p->ops->reserve ? p->ra_samples : LADE__MIN(p->ra_samples, room);
  ra->sr_on = ra->sr_ahead >= B;
  ra->sr_count = count;
  ra->sr_cap = cap;
  if (ra->sr_on && p->ops->reserve) {
    uint64_t held = cap + ra->sr_ahead + 2 * B;
    p->ops->reserve(p->src, held + RA_MAX_SAMPLES, held * p->mean_bytes + (64u << 20));
  }
}

void lade__readahead_close(lade__readahead_t *ra) {
  if (ra->p.ops) pthread_mutex_destroy(&ra->mu); /* opened */
  *ra = (lade__readahead_t){0};
}

/* Requests the samples of one step that the source will be asked for: one
 * submit() per step, so the source's queue starts them step by step in the
 * order they will be used. from may be NULL (every sample reads storage). */
static void submit_step(lade__readahead_t *ra, const uint64_t *idx, const int32_t *from, uint32_t n) {
  uint64_t stackbuf[512];
  uint64_t *want = n <= 512 ? stackbuf : malloc(n * sizeof *want);
  if (!want) return; /* the workers' reads then fetch one by one: slower, not wrong */
  size_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    if ((!from || lade__readahead_reads_storage(ra, from[i])) && wanted(ra, idx[i])) want[k++] = idx[i];
  }
  if (k) ra->p.ops->submit(ra->p.src, want, k, 0);
  if (want != stackbuf) free(want);
}

/* *epochs: how many epochs from the start may be read ahead once step q is
 * planned; false when there is no bound. With a cache tier, an epoch's samples are requested ahead only once every
 * step of the epoch before was delivered (and so cached, as far as the tier
 * keeps it): planning step q means the steps up to q - window were
 * delivered (engine.c prepares [next_deliver, next_deliver + window)). Else
 * a sample the last steps of an epoch still read, and cache, would be
 * requested again for the next. Without a tier: no bound. */
static bool ahead_epochs(const lade__readahead_t *ra, uint64_t q, uint64_t *epochs) {
  if (!ra->p.tiers || !ra->p.steps) return false;
  uint64_t window = ra->p.window;
  *epochs = (q + 1 > window ? q + 1 - window : 0) / ra->p.steps + 1;
  return true;
}

/* Remote read-ahead: step q was planned; the steps up to q + ra_steps are
 * requested ahead, in chunks: when fewer than half of them are requested,
 * every step up to q + ra_steps not yet requested goes out in ONE submit(),
 * so the source can coalesce neighbours across steps (plan=shards streams a
 * shard through a shuffle buffer: the samples of one step are far apart,
 * those of 16 steps cover a stretch of the shard; remote tar shards were
 * read with 0.96 requests per sample when each step was submitted alone)
 * while it keeps the order of first use between its requests (tar_http.c).
 * The engine plans steps in order from one worker at a time; a seek moves
 * ra_next back to the new position (requests of abandoned steps are dropped
 * by the source's bound on unread results). */
static void read_ahead(lade__readahead_t *ra, const lade__cursor_step_t *st) {
  uint64_t last = ra->p.steps * ra->p.epochs, q0 = st->q;
  pthread_mutex_lock(&ra->mu);
  uint64_t from = LADE__MAX(ra->ra_next, q0), to = LADE__MIN(q0 + ra->p.ra_steps + 1, last);
  uint64_t ne;
  if (ahead_epochs(ra, q0, &ne)) to = LADE__MAX(LADE__MIN(to, ne * ra->p.steps), LADE__MIN(q0 + 1, last));
  /* the current step always; the rest once half of the read-ahead is used */
  if (from > q0 && from - q0 > ra->p.ra_steps / 2) to = from;
  if (to > ra->ra_next) ra->ra_next = to;
  pthread_mutex_unlock(&ra->mu);
  if (from >= to) return;
  uint32_t B = lade__cursor_max_batch(ra->p.cursor);
  uint64_t *all = malloc((size_t)(to - from) * B * sizeof *all), *buf = malloc(B * sizeof *buf);
  size_t k = 0;
  for (uint64_t q = from; all && buf && q < to; q++) {
    const uint64_t *idx = st->idx;
    const int32_t *route = st->from;
    uint32_t n = st->n, valid = 0;
    if (q != q0) {
      if (lade__cursor_order(ra->p.cursor, q, buf, &n, &valid) != 0) {
        lade__clear_error(); /* the step's own planning reports it */
        break;
      }
      idx = buf;
      route = NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
      if ((!route || lade__readahead_reads_storage(ra, route[i])) && wanted(ra, idx[i])) all[k++] = idx[i];
    }
  }
  if (k) ra->p.ops->submit(ra->p.src, all, k, 0);
  else if (!all || !buf) submit_step(ra, st->idx, st->from, st->n); /* no memory: the step alone */
  free(all);
  free(buf);
}

/* plan=shards over a remote source: step q was planned; the shard stream is
 * requested in read order up to where it covers the steps through q + R
 * (R * batch = sr_ahead samples): the sample delivered at position i of an
 * epoch entered the shuffle buffer at a stream position of at most i + cap
 * (shards.h), so positions below o + sr_ahead + batch + cap hold every
 * sample of those steps. Requested in chunks of half of sr_ahead, in one
 * submit() each: consecutive members of a shard coalesce into a few large
 * Range requests, as WebDataset reads a shard with one GET. A sample of the
 * stream still in the buffer after a seek (or a padding repeat) has no
 * request and is read alone when needed. */
static void stream_ahead(lade__readahead_t *ra, const lade__cursor_step_t *st) {
  uint64_t S = ra->p.steps, B = ra->p.batch, C = ra->sr_count;
  if (!S || !C) return;
  uint64_t e = st->q / S, o = (st->q % S) * B, end = C * ra->p.epochs;
  uint64_t out = o + ra->sr_ahead + B; /* output positions to cover, from epoch e's start */
  uint64_t goal = out < S * B ? e * C + LADE__MIN(C, out + ra->sr_cap)
                              : (e + 1) * C + LADE__MIN(C, out - S * B + ra->sr_cap);
  uint64_t need = e * C + LADE__MIN(C, o + B + ra->sr_cap); /* step q's samples: now */
  uint64_t ne;
  if (ahead_epochs(ra, st->q, &ne)) goal = LADE__MAX(LADE__MIN(goal, ne * C), need);
  goal = LADE__MIN(goal, end);
  pthread_mutex_lock(&ra->mu);
  uint64_t from = ra->sr_next;
  if (from < e * C) from = e * C; /* the consumer went ahead (a seek): what lies behind is not needed */
  uint64_t chunk = LADE__MAX(ra->sr_ahead / 2, B);
  bool go = from < goal && (from < need || goal - from >= chunk || goal == end);
  if (go) ra->sr_next = goal;
  pthread_mutex_unlock(&ra->mu);
  if (!go) return;
  uint64_t *all = malloc((size_t)(goal - from) * sizeof *all), k = 0;
  if (!all) return; /* the workers' reads fetch one by one: slower, not wrong */
  for (uint64_t g = from; g < goal;) {
    uint64_t ep = g / C, pos = g % C, n = LADE__MIN(goal - g, C - pos), got = 0;
    if (lade__cursor_stream(ra->p.cursor, ep, pos, n, all + k, &got) != 0) {
      lade__clear_error();
      break;
    }
    uint64_t w = k;
    for (uint64_t i = k; i < k + got; i++)
      if (wanted(ra, all[i])) all[w++] = all[i];
    k = w;
    g += n;
  }
  if (k) ra->p.ops->submit(ra->p.src, all, k, 0);
  free(all);
}

void lade__readahead_step(lade__readahead_t *ra, const lade__cursor_step_t *st) {
  if (!ra->remote) return;
  if (ra->sr_on)
    stream_ahead(ra, st);
  else if (ra->p.ra_steps)
    read_ahead(ra, st);
  else
    submit_step(ra, st->idx, st->from, st->n);
}

void lade__readahead_seek(lade__readahead_t *ra, uint64_t q) {
  if (!ra->remote) return;
  pthread_mutex_lock(&ra->mu);
  ra->ra_next = q;
  if (ra->sr_on && ra->p.steps) { /* the stream from where the buffer may still hold samples of the new position */
    uint64_t e = q / ra->p.steps, o = (q % ra->p.steps) * ra->p.batch;
    ra->sr_next = e * ra->sr_count + LADE__MIN(ra->sr_count, o > ra->sr_cap ? o - ra->sr_cap : 0);
  }
  pthread_mutex_unlock(&ra->mu);
}
