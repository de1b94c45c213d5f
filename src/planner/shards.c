/* shards.c - the `shards` order (see shards.h for the design), the
 * per-device rank mapping and the shuffle-quality metrics. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "regular.h"
#include "shards.h"

uint64_t lade__shards_samples(const lade__shards_params_t *p) {
  return p->offsets && p->shards ? p->offsets[p->shards] : 0;
}

int lade__shards_check(const lade__shards_params_t *p) {
  if (p->shards == 0 || !p->offsets) return lade__fail(LADE_EINVAL, "shards: no shards given");
  if (p->offsets[0] != 0)
    return lade__fail(LADE_EINVAL, "shards: the first shard must start at sample 0 (offsets[0] = %llu)",
                      (unsigned long long)p->offsets[0]);
  for (uint64_t s = 0; s < p->shards; s++)
    if (p->offsets[s + 1] < p->offsets[s])
      return lade__fail(LADE_EINVAL, "shards: offsets decrease at shard %llu (%llu then %llu)", (unsigned long long)s,
                        (unsigned long long)p->offsets[s], (unsigned long long)p->offsets[s + 1]);
  uint64_t N = p->offsets[p->shards];
  if (N == 0) return lade__fail(LADE_EEMPTY, "shards: the %llu shards hold no samples", (unsigned long long)p->shards);
  if (p->groups == 0) return lade__fail(LADE_EINVAL, "shards: zero data-parallel groups");
  if (p->batch_size == 0) return lade__fail(LADE_EINVAL, "shards: batch_size is 0");
  if (N < p->groups)
    return lade__fail(LADE_EINVAL, "shards: %llu samples are fewer than the %u data-parallel groups, so a group "
                      "would have no sample of its own", (unsigned long long)N, p->groups);
  uint64_t g = (uint64_t)p->batch_size * p->groups;
  if (p->drop_last && N < g)
    return lade__fail(LADE_EINVAL, "shards: %llu samples make no whole batch of %u for each of %u groups and "
                      "drop_last is set", (unsigned long long)N, p->batch_size, p->groups);
  return 0;
}

static int valid_quiet(const lade__shards_params_t *p) {
  if (p->shards == 0 || !p->offsets || p->groups == 0 || p->batch_size == 0) return 0;
  uint64_t N = p->offsets[p->shards];
  if (N < p->groups || N == 0) return 0;
  if (p->drop_last && N < (uint64_t)p->batch_size * p->groups) return 0;
  return 1;
}

uint64_t lade__shards_len(const lade__shards_params_t *p) {
  if (!valid_quiet(p)) return 0;
  uint64_t N = lade__shards_samples(p), D = p->groups, B = p->batch_size;
  return p->drop_last ? N / (B * D) * B : (N + D - 1) / D;
}

uint64_t lade__shards_steps(const lade__shards_params_t *p) {
  uint64_t L = lade__shards_len(p), B = p->batch_size;
  return L ? (L + B - 1) / B : 0;
}

void lade__shards_part(const lade__shards_params_t *p, uint32_t d, uint64_t *start, uint64_t *count) {
  uint64_t N = lade__shards_samples(p), D = p->groups ? p->groups : 1, base = N / D, extra = N % D;
  *start = d * base + LADE__MIN((uint64_t)d, extra);
  *count = base + (d < extra);
}

void lade__shards_order(const lade__shards_params_t *p, uint64_t epoch, uint64_t *perm) {
  uint64_t S = p->shards;
  for (uint64_t i = 0; i < S; i++) perm[i] = i;
  lade__rng_t r;
  lade__rng_init(&r, p->seed, epoch, LADE__RNG_SHARDS);
  for (uint64_t i = S; i > 1; i--) {
    uint64_t j = lade__rng_below(&r, i);
    uint64_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

/* The shuffle buffer between the shard reader and the output. */
typedef struct sbuf {
  uint64_t *buf, cap, fill;
  uint64_t *out, n, lim; /* written: n; only the first lim are kept (drop_last) */
  lade__rng_t rng;
} sbuf_t;

static void emit(sbuf_t *b, uint64_t x) {
  if (b->n < b->lim) b->out[b->n] = x;
  b->n++;
}

static void push(sbuf_t *b, uint64_t x) {
  if (b->cap == 0) {
    emit(b, x);
  } else if (b->fill < b->cap) {
    b->buf[b->fill++] = x;
  } else {
    uint64_t j = lade__rng_below(&b->rng, b->cap);
    emit(b, b->buf[j]);
    b->buf[j] = x;
  }
}

static void drain(sbuf_t *b) {
  while (b->fill) {
    uint64_t j = lade__rng_below(&b->rng, b->fill);
    emit(b, b->buf[j]);
    b->buf[j] = b->buf[--b->fill];
  }
}

int lade__shards_epoch(const lade__shards_params_t *p, uint64_t epoch, uint32_t d, uint64_t *out, uint64_t *n_out,
                       uint64_t *valid) {
  int rc = lade__shards_check(p);
  if (rc) return rc;
  if (d >= p->groups) return lade__fail(LADE_EINVAL, "shards: group %u is not below %u groups", d, p->groups);
  uint64_t S = p->shards, L = lade__shards_len(p), start, count;
  lade__shards_part(p, d, &start, &count);
  sbuf_t b = {0};
  b.cap = p->buffer > 1 ? LADE__MIN(p->buffer, count) : 0;
  b.out = out;
  b.lim = L;
  uint64_t *perm = malloc(S * sizeof *perm);
  if (b.cap) b.buf = malloc(b.cap * sizeof *b.buf);
  if (!perm || (b.cap && !b.buf)) {
    free(perm);
    free(b.buf);
    return lade__fail(LADE_ENOMEM, "shards: out of memory for %llu shards and a buffer of %llu",
                      (unsigned long long)S, (unsigned long long)b.cap);
  }
  lade__shards_order(p, epoch, perm);
  /* the group's own stream: the seed mixed with d, so groups never share one */
  lade__rng_init(&b.rng, p->seed ^ lade__mix64(0x5342000000000000ull + d), epoch, LADE__RNG_SHARDBUF);
  uint64_t end = start + count, pos = 0; /* pos: stream position of the shard's first sample */
  for (uint64_t k = 0; k < S && pos < end; k++) {
    uint64_t s = perm[k], lo = p->offsets[s], size = p->offsets[s + 1] - lo;
    uint64_t a = LADE__MAX(pos, start), z = LADE__MIN(pos + size, end);
    for (uint64_t x = a; x < z; x++) push(&b, lo + (x - pos));
    pos += size;
  }
  drain(&b);
  assert(b.n == count);
  free(perm);
  free(b.buf);
  uint64_t real = LADE__MIN(count, L);
  for (uint64_t i = real; i < L; i++) out[i] = out[(i - real) % real]; /* padding from the group's own start */
  *n_out = L;
  *valid = real;
  return 0;
}

int lade__shards_stream(const lade__shards_params_t *p, uint64_t epoch, uint32_t d, uint64_t pos, uint64_t n,
                        uint64_t *out, uint64_t *got) {
  *got = 0;
  int rc = lade__shards_check(p);
  if (rc) return rc;
  if (d >= p->groups) return lade__fail(LADE_EINVAL, "shards: group %u is not below %u groups", d, p->groups);
  uint64_t S = p->shards, start, count;
  lade__shards_part(p, d, &start, &count);
  if (pos >= count) return 0;
  n = LADE__MIN(n, count - pos);
  uint64_t *perm = malloc(S * sizeof *perm);
  if (!perm) return lade__fail(LADE_ENOMEM, "shards: out of memory for %llu shards", (unsigned long long)S);
  lade__shards_order(p, epoch, perm);
  /* stream positions [start + pos, start + pos + n) of the epoch's shard stream */
  uint64_t a = start + pos, z = a + n, at = 0, k = 0;
  for (uint64_t i = 0; i < S && at < z; i++) {
    uint64_t s = perm[i], lo = p->offsets[s], size = p->offsets[s + 1] - lo;
    for (uint64_t x = LADE__MAX(at, a); x < LADE__MIN(at + size, z); x++) out[k++] = lo + (x - at);
    at += size;
  }
  free(perm);
  *got = k;
  return 0;
}

int lade__shards_rest(const lade__shards_params_t *p, uint64_t epoch, uint32_t groups, uint32_t batch,
                      uint64_t consumed, uint64_t *out, uint64_t *m) {
  lade__shards_params_t q = *p;
  q.groups = groups;
  q.batch_size = batch;
  *m = 0;
  int rc = lade__shards_check(&q);
  if (rc) return rc;
  uint64_t L = lade__shards_len(&q), *seq = malloc((L ? L : 1) * sizeof *seq);
  if (!seq) return lade__fail(LADE_ENOMEM, "shards: out of memory for an epoch of %llu samples", (unsigned long long)L);
  for (uint32_t d = 0; d < groups && !rc; d++) {
    uint64_t n = 0, valid = 0;
    rc = lade__shards_epoch(&q, epoch, d, seq, &n, &valid);
    for (uint64_t i = consumed; !rc && i < valid; i++) out[(*m)++] = seq[i];
  }
  free(seq);
  return rc;
}

uint64_t lade__shards_rest_len(uint64_t m, uint32_t D, uint32_t B, int drop_last) {
  if (!D || !B) return 0;
  return drop_last ? m / ((uint64_t)B * D) * B : (m + D - 1) / D;
}

void lade__shards_rest_part(const uint64_t *rest, uint64_t m, uint32_t D, uint32_t d, uint32_t B, int drop_last,
                            uint64_t *out, uint64_t *valid) {
  uint64_t L = lade__shards_rest_len(m, D, B, drop_last), base = m / D, extra = m % D;
  uint64_t start = d * base + LADE__MIN((uint64_t)d, extra), count = base + (d < extra);
  uint64_t real = LADE__MIN(count, L);
  for (uint64_t i = 0; i < real; i++) out[i] = rest[start + i];
  for (uint64_t i = real; i < L; i++) out[i] = real ? out[(i - real) % real] : rest[0];
  *valid = real;
}

int lade__shards_rank(uint32_t rank, uint32_t world, uint32_t devices_per_node, uint32_t model_parallel,
                      lade_shards_rank_t *out) {
  if (world == 0 || devices_per_node == 0 || model_parallel == 0)
    return lade__fail(LADE_EINVAL, "shards: world size, devices per node and model-parallel size must be positive "
                      "(got %u, %u, %u)", world, devices_per_node, model_parallel);
  if (rank >= world) return lade__fail(LADE_EINVAL, "shards: rank %u is not below world size %u", rank, world);
  if (world % model_parallel)
    return lade__fail(LADE_EINVAL, "shards: world size %u is not a multiple of the model-parallel size %u", world,
                      model_parallel);
  if (world % devices_per_node)
    return lade__fail(LADE_EINVAL, "shards: world size %u is not a multiple of %u devices per node", world,
                      devices_per_node);
  out->group = rank / model_parallel;
  out->groups = world / model_parallel;
  out->mp_rank = rank % model_parallel;
  out->node = rank / devices_per_node;
  out->device = rank % devices_per_node;
  uint32_t first = rank - out->mp_rank, last = first + model_parallel - 1;
  out->mp_in_node = first / devices_per_node == last / devices_per_node;
  return 0;
}

/* ---------------------------------------------------------------- quality */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* (value, position) pairs sorted by value then position. */
typedef struct vp {
  uint64_t v, pos;
} vp_t;

static int cmp_vp(const void *a, const void *b) {
  const vp_t *x = a, *y = b;
  if (x->v != y->v) return x->v < y->v ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The shard holding sample x: the last s with offsets[s] <= x and a nonempty shard. */
static uint64_t shard_of(const lade__shards_params_t *p, uint64_t x) {
  uint64_t lo = 0, hi = p->shards; /* offsets[lo] <= x < offsets[hi] */
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (p->offsets[mid] <= x) lo = mid;
    else hi = mid;
  }
  return lo;
}

int lade__shards_measure(const lade__shards_params_t *p, const uint64_t *seq, uint64_t n, lade_shards_quality_t *q) {
  memset(q, 0, sizeof *q);
  uint64_t N = lade__shards_samples(p), B = p->batch_size ? p->batch_size : 1;
  if (n == 0 || N == 0) return 0;
  uint64_t *jump = malloc(n * sizeof *jump), *sh = malloc(n * sizeof *sh), *rank = malloc(n * sizeof *rank);
  vp_t *vp = malloc(n * sizeof *vp);
  if (!jump || !sh || !rank || !vp) {
    free(jump);
    free(sh);
    free(rank);
    free(vp);
    return lade__fail(LADE_ENOMEM, "shards: out of memory measuring %llu samples", (unsigned long long)n);
  }
  for (uint64_t i = 0; i < n; i++) sh[i] = shard_of(p, seq[i]);
  /* jumps and same-shard pairs */
  double jsum = 0;
  uint64_t same = 0;
  for (uint64_t i = 0; i + 1 < n; i++) {
    uint64_t a = seq[i], b = seq[i + 1];
    jump[i] = a > b ? a - b : b - a;
    jsum += (double)jump[i];
    same += sh[i] == sh[i + 1];
  }
  if (n > 1) {
    q->jump_mean = jsum / (double)(n - 1) / (double)N;
    qsort(jump, n - 1, sizeof *jump, cmp_u64);
    uint64_t m = n - 1;
    double med = m % 2 ? (double)jump[m / 2] : ((double)jump[m / 2 - 1] + (double)jump[m / 2]) / 2;
    q->jump_median = med / (double)N;
    q->same_shard = (double)same / (double)(n - 1);
  }
  /* batches: distinct shards (sort the batch's shard ids in jump[] as scratch) */
  uint64_t batches = 0, one = 0;
  double distinct = 0;
  for (uint64_t s0 = 0; s0 < n; s0 += B) {
    uint64_t k = LADE__MIN(B, n - s0), c = 1;
    memcpy(jump, sh + s0, k * sizeof *jump);
    qsort(jump, k, sizeof *jump, cmp_u64);
    for (uint64_t i = 1; i < k; i++) c += jump[i] != jump[i - 1];
    distinct += (double)c;
    one += c == 1;
    batches++;
  }
  q->shards_per_batch = distinct / (double)batches;
  q->one_shard_batches = (double)one / (double)batches;
  /* ranks of the values (ties by position), lag-1 Spearman; storage neighbours' gaps */
  for (uint64_t i = 0; i < n; i++) vp[i] = (vp_t){seq[i], i};
  qsort(vp, n, sizeof *vp, cmp_vp);
  double gsum = 0;
  uint64_t gn = 0;
  for (uint64_t i = 0; i < n; i++) {
    rank[vp[i].pos] = i;
    if (i + 1 < n && vp[i + 1].v == vp[i].v + 1) {
      uint64_t a = vp[i].pos, b = vp[i + 1].pos;
      gsum += (double)(a > b ? a - b : b - a);
      gn++;
    }
  }
  q->neighbour_gap = gn ? gsum / (double)gn / (double)n : 0;
  if (n > 2) {
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0, m = (double)(n - 1);
    for (uint64_t i = 0; i + 1 < n; i++) {
      mx += (double)rank[i];
      my += (double)rank[i + 1];
    }
    mx /= m;
    my /= m;
    for (uint64_t i = 0; i + 1 < n; i++) {
      double x = (double)rank[i] - mx, y = (double)rank[i + 1] - my;
      sxy += x * y;
      sxx += x * x;
      syy += y * y;
    }
    q->rank_autocorr = sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0;
  }
  free(jump);
  free(sh);
  free(rank);
  free(vp);
  return 0;
}

/* The regular plan's sequence of learner d for an epoch: its slices of every step. */
static int regular_sequence(const lade__shards_params_t *p, uint64_t epoch, uint32_t d, uint64_t *out, uint64_t *n) {
  lade__plan_params_t rp = {lade__shards_samples(p), p->batch_size, p->groups, epoch + 1, p->seed, true,
                            p->drop_last != 0};
  lade__regular_t *r = NULL;
  int rc = lade__regular_create(&r, &rp);
  if (rc) return rc;
  uint64_t steps = lade__plan_steps(&rp), k = 0;
  for (uint64_t t = 0; t < steps && !rc; t++) {
    uint32_t c, v;
    rc = lade__regular_local(r, epoch, t, d, out + k, &c, &v);
    k += c;
  }
  lade__regular_destroy(r);
  *n = k;
  return rc;
}

int lade__shards_quality(const lade__shards_params_t *p, uint64_t epoch, int global, lade_shards_quality_t *q) {
  memset(q, 0, sizeof *q);
  int rc = lade__shards_check(p);
  if (rc) return rc;
  uint64_t L = lade__shards_len(p), D = p->groups;
  /* the regular plan gives each learner ceil(N/D) (or floor(N/G)*B): L too */
  uint64_t *seq = malloc((L + p->batch_size) * sizeof *seq);
  if (!seq) return lade__fail(LADE_ENOMEM, "shards: out of memory for %llu samples", (unsigned long long)L);
  lade_shards_quality_t sum = {0}, one;
  for (uint32_t d = 0; d < D && !rc; d++) {
    uint64_t n, valid;
    rc = global ? regular_sequence(p, epoch, d, seq, &n) : lade__shards_epoch(p, epoch, d, seq, &n, &valid);
    if (!rc) rc = lade__shards_measure(p, seq, n, &one);
    if (rc) break;
    sum.jump_mean += one.jump_mean;
    sum.jump_median += one.jump_median;
    sum.same_shard += one.same_shard;
    sum.shards_per_batch += one.shards_per_batch;
    sum.one_shard_batches += one.one_shard_batches;
    sum.rank_autocorr += one.rank_autocorr;
    sum.neighbour_gap += one.neighbour_gap;
  }
  free(seq);
  if (rc) return rc;
  double k = (double)D;
  q->jump_mean = sum.jump_mean / k;
  q->jump_median = sum.jump_median / k;
  q->same_shard = sum.same_shard / k;
  q->shards_per_batch = sum.shards_per_batch / k;
  q->one_shard_batches = sum.one_shard_batches / k;
  q->rank_autocorr = sum.rank_autocorr / k;
  q->neighbour_gap = sum.neighbour_gap / k;
  return 0;
}

/* ---------------------------------------------------------------- public */

uint64_t lade_shards_len(const lade_shards_settings_t *s) {
  return lade__shards_check(s) ? 0 : lade__shards_len(s); /* the reason of a 0 in lade_last_error() */
}
uint64_t lade_shards_steps(const lade_shards_settings_t *s) { return lade__shards_steps(s); }

int lade_shards_epoch(const lade_shards_settings_t *s, uint64_t epoch, uint32_t group, uint64_t *out,
                               uint64_t *n, uint64_t *valid) {
  return lade__shards_epoch(s, epoch, group, out, n, valid);
}

int lade_shards_rank(uint32_t rank, uint32_t world, uint32_t devices_per_node, uint32_t model_parallel,
                              lade_shards_rank_t *out) {
  return lade__shards_rank(rank, world, devices_per_node, model_parallel, out);
}

int lade_shards_quality(const lade_shards_settings_t *s, uint64_t epoch, int global,
                                 lade_shards_quality_t *out) {
  return lade__shards_quality(s, epoch, global, out);
}
