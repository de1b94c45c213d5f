/*
 * dlio.c - DLIO's sharding behind the cursor (orders.h,
 * docs/dlio.md): what each emulated accelerator of DLIO (the benchmark
 * MLPerf Storage runs) reads, so that `lade dlio run` does DLIO's I/O with
 * lade's engine. Routes are "any tier".
 *
 * DLIO's samples: a source with shards (TFRecord files, tar shards) has one
 * DLIO sample per sample (record), file by file; a source without (a folder
 * of .npz files) has `dlio_rep` DLIO samples per file (num_samples_per_file:
 * DLIO's reader loads the whole file for each of them), so DLIO sample g is
 * sample g / rep. T DLIO samples, N ranks, batch B: every rank runs
 * floor(T / (B N)) steps per epoch (DLIO's max_steps; the rest is dropped).
 *
 *   pytorch     (DLIO's torch path, sampler "index"): rank r reads the
 *               contiguous block [r P, min((r+1) P, T)), P = ceil(T / N),
 *               in ascending order, the same every epoch (DLIO's sampler
 *               ignores sample_shuffle; so does this order, so the I/O is
 *               DLIO's). Where DLIO's last rank runs out of samples before
 *               the others (T not a multiple of N), its block wraps, so
 *               every rank runs the same steps and no barrier is left alone.
 *   tensorflow  (DLIO's tf.data path): rank r reads the files whose index
 *               is r mod N (all files, records r mod N, when there are
 *               fewer files than ranks), `dlio_interleave` files at a time
 *               with one record from each in turn (tf.data's interleave:
 *               a finished file's slot takes the next file), through a
 *               shuffle buffer of shuffle_buffer records when shuffle is on
 *               (keyed by (seed, epoch, rank)); each epoch restarts the
 *               stream, and a stream shorter than the steps wraps (repeat()).
 *
 * The tensorflow stream of an epoch is made once (O(records / N)) and kept
 * for two epochs, as the regular order keeps two permutations; pytorch needs
 * no state. A position is (epoch, whole global steps); it resumes at the
 * same world size and batch size only (DLIO's sharding depends on both).
 */
#include <stdlib.h>
#include <string.h>

#include "orders.h"

typedef struct dlio_order {
  lade__order_t o;
  uint64_t T;          /* DLIO samples */
  uint64_t files;      /* the shards, or the samples when there are none */
  /* tensorflow: the streams of two epochs */
  uint64_t *stream[2];
  uint64_t len;        /* records of this rank's stream (the same every epoch) */
  uint64_t epoch_of[2];
  uint64_t tick[2], clock;
} dlio_order_t;

/* DLIO sample g as a dataset index. */
static uint64_t sample_of(const dlio_order_t *d, uint64_t g) {
  const lade__cursor_params_t *p = d->o.p;
  return p->shard_offsets ? g : g / (p->dlio_rep ? p->dlio_rep : 1);
}

static uint64_t file_begin(const dlio_order_t *d, uint64_t f) {
  return d->o.p->shard_offsets ? d->o.p->shard_offsets[f] : f;
}
static uint64_t file_end(const dlio_order_t *d, uint64_t f) {
  return d->o.p->shard_offsets ? d->o.p->shard_offsets[f + 1] : f + 1;
}

/* The records of this rank's files, interleaved (tensorflow). */
static int build_stream(dlio_order_t *d, uint64_t e, uint64_t *out) {
  const lade__cursor_params_t *p = d->o.p;
  uint32_t N = p->plan.learners, r = p->rank;
  bool by_file = d->files >= N;
  uint64_t nf = by_file ? (d->files - r + N - 1) / N : d->files;
  uint32_t cyc = p->dlio_interleave ? p->dlio_interleave : 1;
  if (cyc > nf) cyc = (uint32_t)nf;
  uint64_t *pos = calloc(cyc ? cyc : 1, sizeof *pos), *end = calloc(cyc ? cyc : 1, sizeof *end);
  if (!pos || !end) {
    free(pos);
    free(end);
    return lade__fail(LADE_ENOMEM, "out of memory for a dlio stream of %llu records", (unsigned long long)d->len);
  }
  uint64_t next_file = 0, n = 0, seen = 0; /* seen: records of all files so far (fewer files than ranks) */
  uint32_t open = 0;
  for (; open < cyc; open++, next_file++) {
    uint64_t f = by_file ? r + next_file * N : next_file;
    pos[open] = file_begin(d, f);
    end[open] = file_end(d, f);
  }
  while (open) {
    for (uint32_t k = 0; k < open;) {
      if (pos[k] == end[k]) { /* the slot takes the next file, or closes */
        if (next_file < nf) {
          uint64_t f = by_file ? r + next_file * N : next_file;
          next_file++;
          pos[k] = file_begin(d, f);
          end[k] = file_end(d, f);
        } else { /* closes: the others keep their turn order */
          open--;
          memmove(pos + k, pos + k + 1, (open - k) * sizeof *pos);
          memmove(end + k, end + k + 1, (open - k) * sizeof *end);
        }
        continue;
      }
      uint64_t rec = pos[k]++;
      if (by_file || seen++ % N == r) out[n++] = sample_of(d, rec);
      k++;
    }
  }
  free(pos);
  free(end);
  if (n != d->len)
    return lade__fail(LADE_ESTATE, "dlio stream of rank %u has %llu records, expected %llu", r, (unsigned long long)n,
                      (unsigned long long)d->len);
  /* the shuffle buffer: fill it, then each output takes a random slot and
   * the next record refills it */
  uint64_t S = p->shuffle ? p->shuffle_buffer : 0;
  if (S > 1 && n > 1) {
    if (S > n) S = n;
    lade__rng_t rng;
    lade__rng_init(&rng, p->plan.seed ^ lade__mix64(r + 1), e, LADE__RNG_SHARDBUF);
    /* in place: out[0..i) is output, out[i..i+S) the buffer, the rest input */
    for (uint64_t i = 0; i < n; i++) {
      uint64_t have = n - i < S ? n - i : S;
      uint64_t j = i + lade__rng_below(&rng, have);
      uint64_t t = out[i];
      out[i] = out[j];
      out[j] = t;
    }
  }
  return 0;
}

static const uint64_t *stream_for(dlio_order_t *d, uint64_t e, int *rc) {
  for (int i = 0; i < 2; i++)
    if (d->stream[i] && d->epoch_of[i] == e) {
      d->tick[i] = ++d->clock;
      return d->stream[i];
    }
  int pick = d->tick[0] <= d->tick[1] ? 0 : 1;
  if (!d->stream[pick]) d->stream[pick] = malloc((d->len ? d->len : 1) * sizeof(uint64_t));
  if (!d->stream[pick]) {
    *rc = lade__fail(LADE_ENOMEM, "out of memory for a dlio stream of %llu records", (unsigned long long)d->len);
    return NULL;
  }
  d->epoch_of[pick] = UINT64_MAX;
  *rc = build_stream(d, e, d->stream[pick]);
  if (*rc) return NULL;
  d->epoch_of[pick] = e;
  d->tick[pick] = ++d->clock;
  return d->stream[pick];
}

static int dlio_samples(lade__order_t *o, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid) {
  dlio_order_t *d = (dlio_order_t *)o;
  const lade__cursor_params_t *p = o->p;
  uint32_t B = p->plan.batch_size, N = p->plan.learners;
  uint64_t e = q / o->steps, st = q % o->steps;
  *n = *valid = 0;
  if (q < o->first) return 0;
  if (p->dlio_reader == LADE__DLIO_PYTORCH) {
    uint64_t P = (d->T + N - 1) / N, lo = (uint64_t)p->rank * P, hi = lo + P < d->T ? lo + P : d->T;
    uint64_t L = hi > lo ? hi - lo : 0;
    if (!L) return lade__fail(LADE_EEMPTY, "dlio: rank %u has no samples", p->rank);
    for (uint32_t k = 0; k < B; k++) idx[k] = sample_of(d, lo + (st * B + k) % L);
  } else {
    int rc = 0;
    const uint64_t *s = stream_for(d, e, &rc);
    if (!s) return rc;
    for (uint32_t k = 0; k < B; k++) idx[k] = s[(st * B + k) % d->len];
  }
  *n = *valid = B;
  return 0;
}

static int dlio_get(lade__order_t *o, uint64_t q, lade__cursor_step_t *out) {
  int rc = lade__cursor_grow_samples(out, o->p->plan.batch_size);
  if (!rc) rc = dlio_samples(o, q, out->idx, &out->n, &out->valid);
  if (!rc) lade__cursor_unrouted(out);
  return rc;
}

static int dlio_position(lade__order_t *o, uint64_t q, lade_position_t *out) {
  out->shuffle_epoch = q / o->steps;
  out->consumed = (q % o->steps) * o->p->plan.batch_size * o->p->plan.learners;
  return 0;
}

static void dlio_settings(const lade__order_t *o, lade_plan_settings_t *out) {
  *out = o->p->plan;
  out->drop_last = 1; /* DLIO drops the rest of every epoch */
}

static void dlio_close(lade__order_t *o) {
  dlio_order_t *d = (dlio_order_t *)o;
  free(d->stream[0]);
  free(d->stream[1]);
  free(d);
}

static const lade__order_ops_t dlio_ops = {
    .get = dlio_get,
    .samples = dlio_samples,
    .settings = dlio_settings,
    .position = dlio_position,
    .close = dlio_close,
};

int lade__order_dlio_open(lade__order_t **out, const lade__cursor_params_t *p) {
  uint32_t N = p->plan.learners, B = p->plan.batch_size;
  if (!N || !B || !p->plan.samples) return lade__fail(LADE_EINVAL, "an empty run (learners, batch or dataset 0)");
  dlio_order_t *d = calloc(1, sizeof *d);
  if (!d) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  d->o = (lade__order_t){.ops = &dlio_ops, .p = p, .max_batch = B};
  d->epoch_of[0] = d->epoch_of[1] = UINT64_MAX;
  uint64_t rep = p->shard_offsets ? 1 : (p->dlio_rep ? p->dlio_rep : 1);
  d->T = p->plan.samples * rep;
  d->files = p->shard_offsets ? p->shards : p->plan.samples;
  d->o.steps = d->T / ((uint64_t)B * N);
  int rc = 0;
  if (!d->o.steps)
    rc = lade__fail(LADE_EINVAL, "dlio: %llu samples make no step of %u ranks x batch %u (DLIO's floor(samples / "
                    "batch / ranks) steps per epoch)", (unsigned long long)d->T, N, B);
  if (!rc && p->dlio_reader == LADE__DLIO_TENSORFLOW) {
    uint32_t r = p->rank;
    if (d->files >= N) {
      for (uint64_t f = r; f < d->files; f += N) d->len += file_end(d, f) - file_begin(d, f);
    } else {
      d->len = d->T / N + (r < d->T % N); /* records r mod N */
    }
    if (!d->len) rc = lade__fail(LADE_EEMPTY, "dlio: rank %u reads no record", r);
  }
  if (!rc && p->resumed) {
    const lade_position_t *pos = &p->resume;
    uint64_t g = (uint64_t)B * N;
    if (pos->epoch >= p->plan.epochs) d->o.first = d->o.steps * p->plan.epochs;
    else if (pos->world_size != N || pos->batch_size != B || pos->consumed % g || pos->consumed / g > d->o.steps)
      rc = lade__fail(LADE_EUNSUPPORTED, "dlio: a position of %u ranks x batch %u after %llu samples resumes only at "
                      "the same world size and batch size (DLIO's sharding depends on both), in whole steps; this "
                      "loader is %u x %u", pos->world_size, pos->batch_size, (unsigned long long)pos->consumed, N, B);
    else d->o.first = pos->epoch * d->o.steps + pos->consumed / g;
  }
  if (rc) {
    dlio_close(&d->o);
    return rc;
  }
  *out = &d->o;
  return 0;
}
