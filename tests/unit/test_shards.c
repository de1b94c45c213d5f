/* test_shards.c - the shards order (src/planner/shards.h): every sample once per
 * epoch over the groups (plus the documented padding / dropped tails), equal
 * lengths, determinism, independence from threads, the split and the buffer,
 * the model-parallel rank mapping, odd inputs, and the quality metrics. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "planner/shards.h"

#define GOLDEN 0x1ef17426d951a7d9ull

static int cmp64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* S shards with sizes drawn in [0, max] (some empty), at least one sample. */
static uint64_t *random_offsets(uint64_t S, uint64_t max, uint64_t seed) {
  uint64_t *off = malloc((S + 1) * sizeof *off);
  lade__rng_t r;
  lade__rng_init(&r, seed, 0, 77);
  off[0] = 0;
  for (uint64_t s = 0; s < S; s++) off[s + 1] = off[s] + lade__rng_below(&r, max + 1);
  if (off[S] == 0) off[S] = 1;
  return off;
}

static uint64_t *uniform_offsets(uint64_t N, uint64_t size, uint64_t *S) {
  *S = (N + size - 1) / size;
  uint64_t *off = malloc((*S + 1) * sizeof *off);
  for (uint64_t s = 0; s <= *S; s++) off[s] = LADE__MIN(s * size, N);
  return off;
}

static lade__shards_params_t params(const uint64_t *off, uint64_t S, uint32_t D, uint32_t B, uint64_t b, int drop) {
  lade__shards_params_t p = {S, off, 1234, b, D, B, drop};
  return p;
}

/* Every group's epoch: lengths, padding, exactly once / at most once. Returns 1 if all good. */
static int check_epoch(const lade__shards_params_t *p, uint64_t epoch, uint64_t **seqs) {
  uint64_t N = lade__shards_samples(p), L = lade__shards_len(p), D = p->groups, B = p->batch_size;
  int ok = 1;
  uint32_t *seen = calloc(N, sizeof *seen);
  uint64_t total_valid = 0;
  for (uint32_t d = 0; d < D; d++) {
    uint64_t n = 0, valid = 0, start, count;
    CHECK_OK(lade__shards_epoch(p, epoch, d, seqs[d], &n, &valid));
    lade__shards_part(p, d, &start, &count);
    if (n != L) ok = 0;
    if (valid != LADE__MIN(count, L)) ok = 0;
    for (uint64_t i = 0; i < valid; i++) {
      if (seqs[d][i] >= N) ok = 0;
      else seen[seqs[d][i]]++;
    }
    for (uint64_t i = valid; i < n; i++) /* padding repeats the group's own start */
      if (seqs[d][i] != seqs[d][(i - valid) % valid]) ok = 0;
    total_valid += valid;
  }
  if (p->drop_last) {
    if (L != N / (B * D) * B || L % B) ok = 0;
    if (total_valid != L * D) ok = 0;
    for (uint64_t x = 0; x < N; x++)
      if (seen[x] > 1) ok = 0;
  } else {
    if (L != (N + D - 1) / D) ok = 0;
    if (total_valid != N) ok = 0;
    for (uint64_t x = 0; x < N; x++)
      if (seen[x] != 1) ok = 0;
    if (L * D - N >= D) ok = 0; /* fewer than one padding sample per group */
  }
  free(seen);
  return ok;
}

static uint64_t **alloc_seqs(uint32_t D, uint64_t L) {
  uint64_t **s = calloc(D, sizeof *s);
  for (uint32_t d = 0; d < D; d++) s[d] = calloc(L + 1, sizeof **s);
  return s;
}

static void free_seqs(uint64_t **s, uint32_t D) {
  for (uint32_t d = 0; d < D; d++) free(s[d]);
  free(s);
}

static void test_exactly_once(void) {
  const uint32_t Ds[] = {1, 2, 3, 4, 7, 16};
  const uint32_t Bs[] = {1, 5, 32};
  const uint64_t bufs[] = {0, 1, 7, 100, 100000};
  int configs = 0, bad = 0, same_epoch = 0, nondet = 0;
  for (uint64_t cfg = 0; cfg < 12; cfg++) {
    uint64_t S = 1 + cfg * 7 % 40, *off = random_offsets(S, 1 + cfg * 13 % 90, cfg);
    for (size_t di = 0; di < sizeof Ds / sizeof *Ds; di++)
      for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++)
        for (size_t ui = 0; ui < sizeof bufs / sizeof *bufs; ui++)
          for (int drop = 0; drop < 2; drop++) {
            lade__shards_params_t p = params(off, S, Ds[di], Bs[bi], bufs[ui], drop);
            p.seed = cfg;
            if (lade__shards_check(&p)) { /* too few samples for D groups / a whole batch each */
              uint64_t N = off[S];
              CHECK(N < Ds[di] || (drop && N < (uint64_t)Ds[di] * Bs[bi]));
              CHECK_EQ_INT(lade__shards_len(&p), 0);
              continue;
            }
            uint64_t L = lade__shards_len(&p), steps = lade__shards_steps(&p);
            CHECK_EQ_INT(steps, (L + Bs[bi] - 1) / Bs[bi]);
            uint64_t **a = alloc_seqs(Ds[di], L), **b = alloc_seqs(Ds[di], L);
            for (uint64_t e = 0; e < 2; e++) {
              if (!check_epoch(&p, e, a)) bad++;
              configs++;
              /* same inputs, same output */
              for (uint32_t d = 0; d < Ds[di]; d++) {
                uint64_t n, v;
                CHECK_OK(lade__shards_epoch(&p, e, d, b[d], &n, &v));
                if (memcmp(a[d], b[d], L * 8)) nondet++;
              }
            }
            /* a[] holds epoch 1 now; epoch 0 into b[] and compare group 0 */
            uint64_t n, v;
            CHECK_OK(lade__shards_epoch(&p, 0, 0, b[0], &n, &v));
            if (L >= 50 && !memcmp(a[0], b[0], L * 8)) same_epoch++;
            free_seqs(a, Ds[di]);
            free_seqs(b, Ds[di]);
          }
    free(off);
  }
  CHECK(configs > 1000);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(nondet, 0);
  CHECK_EQ_INT(same_epoch, 0);
}

/* buffer 0: group d reads the shuffled shard list's stream positions [start, start+count) in order */
static void test_sequential_split(void) {
  uint64_t S = 37, *off = random_offsets(S, 60, 5), N = off[S];
  uint64_t *perm = malloc(S * 8), *stream = malloc(N * 8), *prev = malloc(S * 8), *seq = malloc(N * 8);
  uint64_t *seqb = malloc(N * 8);
  for (uint32_t D = 1; D <= 9; D += 4) {
    lade__shards_params_t p = params(off, S, D, 8, 0, 0), pb = params(off, S, D, 8, 50, 0);
    for (uint64_t e = 0; e < 3; e++) {
      lade__shards_order(&p, e, perm);
      uint64_t *mark = calloc(S, 8), k = 0;
      for (uint64_t i = 0; i < S; i++) {
        CHECK(perm[i] < S && !mark[perm[i]]);
        mark[perm[i] % S] = 1;
        for (uint64_t x = off[perm[i]]; x < off[perm[i] + 1]; x++) stream[k++] = x;
      }
      free(mark);
      CHECK_EQ_INT(k, N);
      if (e > 0) CHECK(memcmp(prev, perm, S * 8) != 0); /* the shard order changes every epoch */
      memcpy(prev, perm, S * 8);
      uint64_t expect_start = 0;
      for (uint32_t d = 0; d < D; d++) {
        uint64_t start, count, n, v, nb, vb;
        lade__shards_part(&p, d, &start, &count);
        CHECK_EQ_INT(start, expect_start); /* contiguous, in group order */
        CHECK(count == N / D || count == N / D + 1);
        expect_start += count;
        CHECK_OK(lade__shards_epoch(&p, e, d, seq, &n, &v));
        CHECK_EQ_INT(v, count);
        CHECK(memcmp(seq, stream + start, count * 8) == 0);
        /* a buffer only reorders the group's own samples */
        CHECK_OK(lade__shards_epoch(&pb, e, d, seqb, &nb, &vb));
        CHECK_EQ_INT(vb, v);
        CHECK(memcmp(seq, seqb, v * 8) != 0 || v < 3);
        qsort(seq, v, 8, cmp64);
        qsort(seqb, v, 8, cmp64);
        CHECK(memcmp(seq, seqb, v * 8) == 0);
      }
      CHECK_EQ_INT(expect_start, N);
    }
  }
  free(perm);
  free(stream);
  free(prev);
  free(seq);
  free(seqb);
  free(off);
}

/* A buffer at least as large as the group's part is a uniform shuffle of the
 * part: the metrics move from "sequential" (b = 0) to those of a random order
 * of the group's samples, monotonically with b. */
static void test_buffer_quality(void) {
  uint64_t S, *off = uniform_offsets(40000, 200, &S); /* 200 shards of 200 */
  const uint64_t bufs[] = {0, 100, 1000, 10000};
  lade_shards_quality_t q[4], g;
  for (int i = 0; i < 4; i++) {
    lade__shards_params_t p = params(off, S, 4, 64, bufs[i], 0);
    CHECK_OK(lade__shards_quality(&p, 1, 0, &q[i]));
  }
  lade__shards_params_t p = params(off, S, 4, 64, 0, 0);
  CHECK_OK(lade__shards_quality(&p, 1, 1, &g));
  /* b = 0: shards read in order */
  CHECK(q[0].jump_mean < 0.01);
  CHECK(q[0].jump_median * 40000 < 1.5);
  CHECK(q[0].same_shard > 0.99);
  CHECK(q[0].rank_autocorr > 0.99);
  CHECK(q[0].one_shard_batches > 0.6);
  CHECK(q[0].shards_per_batch < 1.4);
  /* better with every buffer size */
  for (int i = 1; i < 4; i++) {
    CHECK(q[i].jump_mean > q[i - 1].jump_mean);
    CHECK(q[i].same_shard < q[i - 1].same_shard);
    CHECK(q[i].shards_per_batch > q[i - 1].shards_per_batch);
    CHECK(q[i].rank_autocorr < q[i - 1].rank_autocorr);
    CHECK(q[i].neighbour_gap > q[i - 1].neighbour_gap);
  }
  /* b = 10000 = the whole part: a uniform shuffle of 50 shards' samples.
   * Expected: |X-Y|/N ~ 1/3; same shard 1/50; distinct shards in 64 draws
   * from 50 equal shards 50 (1 - (49/50)^64) = 36.2; autocorrelation ~ 0. */
  CHECK(q[3].jump_mean > 0.30 && q[3].jump_mean < 0.37);
  CHECK(q[3].same_shard > 0.015 && q[3].same_shard < 0.025);
  CHECK(q[3].shards_per_batch > 34.5 && q[3].shards_per_batch < 38);
  CHECK(q[3].one_shard_batches == 0);
  CHECK(q[3].rank_autocorr > -0.03 && q[3].rank_autocorr < 0.03);
  CHECK(q[3].neighbour_gap > 0.30 && q[3].neighbour_gap < 0.37);
  /* the regular global shuffle: 200 shards */
  CHECK(g.jump_mean > 0.31 && g.jump_mean < 0.36);
  CHECK(g.same_shard > 0.003 && g.same_shard < 0.007);
  CHECK(g.shards_per_batch > 50 && g.shards_per_batch < 56); /* 200 (1 - (199/200)^64) = 54.6 */
  CHECK(g.rank_autocorr > -0.03 && g.rank_autocorr < 0.03);
  free(off);
}

/* The metrics on hand-made sequences. */
static void test_measure(void) {
  uint64_t S, *off = uniform_offsets(100, 10, &S), seq[100];
  lade__shards_params_t p = params(off, S, 1, 10, 0, 0);
  lade_shards_quality_t q;
  for (int i = 0; i < 100; i++) seq[i] = (uint64_t)i;
  CHECK_OK(lade__shards_measure(&p, seq, 100, &q));
  CHECK(q.jump_mean > 0.0099 && q.jump_mean < 0.0101);
  CHECK(q.jump_median > 0.0099 && q.jump_median < 0.0101);
  CHECK(q.same_shard > 90.0 / 99 - 1e-9 && q.same_shard < 90.0 / 99 + 1e-9);
  CHECK(q.shards_per_batch == 1 && q.one_shard_batches == 1);
  CHECK(q.rank_autocorr > 0.999999);
  CHECK(q.neighbour_gap > 0.0099 && q.neighbour_gap < 0.0101);
  /* round robin over the shards: 0, 10, 20, ..., 90, 1, 11, ... */
  for (int i = 0; i < 100; i++) seq[i] = (uint64_t)(i % 10 * 10 + i / 10);
  CHECK_OK(lade__shards_measure(&p, seq, 100, &q));
  CHECK(q.same_shard == 0);
  CHECK(q.shards_per_batch == 10 && q.one_shard_batches == 0);
  /* jumps: 10 (x9 per run of 10) and 89 (at the 9 wraps): median 10, mean (90*10 + 9*89) / 99;
   * storage neighbours x, x+1: 10 positions apart, 89 at x = 9, 19, ..., 89 */
  CHECK(q.jump_median > 0.0999 && q.jump_median < 0.1001);
  double m = (90.0 * 10 + 9.0 * 89) / 99 / 100;
  CHECK(q.jump_mean > m - 1e-9 && q.jump_mean < m + 1e-9);
  CHECK(q.neighbour_gap > m - 1e-9 && q.neighbour_gap < m + 1e-9);
  /* batches of 10 with a short last one: 25 samples, 3 batches */
  for (int i = 0; i < 25; i++) seq[i] = (uint64_t)i;
  CHECK_OK(lade__shards_measure(&p, seq, 25, &q));
  CHECK(q.shards_per_batch == 1 && q.one_shard_batches == 1);
  seq[20] = 99;
  CHECK_OK(lade__shards_measure(&p, seq, 25, &q));
  CHECK(q.shards_per_batch > 4.0 / 3 - 1e-9 && q.shards_per_batch < 4.0 / 3 + 1e-9);
  CHECK(q.one_shard_batches > 2.0 / 3 - 1e-9 && q.one_shard_batches < 2.0 / 3 + 1e-9);
  /* reversed: rank autocorrelation still 1 (ranks move by one each step) */
  for (int i = 0; i < 100; i++) seq[i] = (uint64_t)(99 - i);
  CHECK_OK(lade__shards_measure(&p, seq, 100, &q));
  CHECK(q.rank_autocorr > 0.999999);
  free(off);
}

/* Ranks of one model-parallel group get the same sequence; groups are disjoint. */
static void test_model_parallel(void) {
  lade_shards_rank_t r;
  const uint32_t world = 16, dpn = 8, M = 2;
  uint64_t S, *off = uniform_offsets(5000, 100, &S);
  lade__shards_params_t p = params(off, S, world / M, 16, 500, 0);
  uint64_t L = lade__shards_len(&p);
  uint64_t **seq = alloc_seqs(world, L);
  for (uint32_t k = 0; k < world; k++) {
    CHECK_OK(lade__shards_rank(k, world, dpn, M, &r));
    CHECK_EQ_INT(r.group, k / M);
    CHECK_EQ_INT(r.groups, world / M);
    CHECK_EQ_INT(r.mp_rank, k % M);
    CHECK_EQ_INT(r.node, k / dpn);
    CHECK_EQ_INT(r.device, k % dpn);
    CHECK_EQ_INT(r.mp_in_node, 1);
    uint64_t n, v;
    CHECK_OK(lade__shards_epoch(&p, 3, r.group, seq[k], &n, &v));
  }
  for (uint32_t k = 0; k < world; k += M) CHECK(memcmp(seq[k], seq[k + 1], L * 8) == 0);
  /* disjoint across groups: mark every group's samples */
  uint8_t *owner = calloc(5000, 1);
  int clash = 0;
  for (uint32_t k = 0; k < world; k += M)
    for (uint64_t i = 0; i < L; i++) {
      if (owner[seq[k][i]] && owner[seq[k][i]] != k / M + 1) clash++;
      owner[seq[k][i]] = (uint8_t)(k / M + 1);
    }
  CHECK_EQ_INT(clash, 0);
  free(owner);
  free_seqs(seq, world);
  /* a model-parallel group across nodes */
  CHECK_OK(lade__shards_rank(5, 12, 4, 3, &r));
  CHECK_EQ_INT(r.group, 1);
  CHECK_EQ_INT(r.mp_rank, 2);
  CHECK_EQ_INT(r.node, 1);
  CHECK_EQ_INT(r.mp_in_node, 0); /* ranks 3, 4, 5 on nodes 0, 1, 1 */
  CHECK_OK(lade__shards_rank(7, 8, 2, 4, &r));
  CHECK_EQ_INT(r.mp_in_node, 0);
  CHECK_EQ_INT(r.groups, 2);
  /* bad inputs */
  CHECK(lade__shards_rank(16, 16, 8, 2, &r) == LADE_EINVAL);
  CHECK(lade__shards_rank(0, 16, 8, 3, &r) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "model-parallel size 3") != NULL);
  CHECK(lade__shards_rank(0, 12, 8, 2, &r) == LADE_EINVAL);
  CHECK(lade__shards_rank(0, 16, 0, 2, &r) == LADE_EINVAL);
  CHECK(lade__shards_rank(0, 16, 8, 0, &r) == LADE_EINVAL);
  CHECK(lade_shards_rank(3, 4, 4, 1, &r) == 0 && r.group == 3 && r.groups == 4);
  free(off);
}

/* Threads: every group computed concurrently (and in reverse order) gives
 * the same sequences as one after another. */
typedef struct job {
  const lade__shards_params_t *p;
  uint32_t d;
  uint64_t *out;
  int rc;
} job_t;

static void *run_job(void *a) {
  job_t *j = a;
  uint64_t n, v;
  j->rc = lade__shards_epoch(j->p, 2, j->d, j->out, &n, &v);
  return NULL;
}

static void test_threads(void) {
  uint64_t S = 50, *off = random_offsets(S, 300, 9);
  enum { D = 6 };
  lade__shards_params_t p = params(off, S, D, 32, 777, 1);
  uint64_t L = lade__shards_len(&p);
  uint64_t **seq = alloc_seqs(D, L), **par = alloc_seqs(D, L);
  for (int d = D - 1; d >= 0; d--) {
    uint64_t n, v;
    CHECK_OK(lade__shards_epoch(&p, 2, (uint32_t)d, seq[d], &n, &v));
  }
  pthread_t th[D];
  job_t jobs[D];
  for (int d = 0; d < D; d++) {
    jobs[d] = (job_t){&p, (uint32_t)d, par[d], -1};
    CHECK(pthread_create(&th[d], NULL, run_job, &jobs[d]) == 0);
  }
  for (int d = 0; d < D; d++) {
    pthread_join(th[d], NULL);
    CHECK_EQ_INT(jobs[d].rc, 0);
    CHECK(memcmp(seq[d], par[d], L * 8) == 0);
  }
  free_seqs(seq, D);
  free_seqs(par, D);
  free(off);
}

/* A fixed sequence, so a change of the order (RNG streams, split, buffer)
 * is a deliberate one: resumed runs depend on it. */
static void test_golden(void) {
  uint64_t S, *off = uniform_offsets(40, 10, &S), out[20], n, v;
  lade__shards_params_t p = params(off, S, 2, 4, 3, 0);
  CHECK_OK(lade__shards_epoch(&p, 0, 1, out, &n, &v));
  CHECK_EQ_INT(n, 20);
  CHECK_EQ_INT(v, 20);
  uint64_t h = lade__hash64(out, sizeof out, 1469598103934665603ull);
  fprintf(stderr, "  golden hash %016llx:", (unsigned long long)h);
  for (int i = 0; i < 20; i++) fprintf(stderr, " %llu", (unsigned long long)out[i]);
  fprintf(stderr, "\n");
  CHECK(h == GOLDEN);
  free(off);
}

static void test_odd_cases(void) {
  uint64_t one[2] = {0, 103};
  /* one shard, four groups: each reads a quarter of it, in order with b = 0 */
  lade__shards_params_t p = params(one, 1, 4, 8, 0, 0);
  uint64_t **seq = alloc_seqs(4, 26);
  CHECK(check_epoch(&p, 0, seq));
  CHECK_EQ_INT(lade__shards_len(&p), 26);
  for (uint32_t d = 0; d < 4; d++) {
    uint64_t start, count;
    lade__shards_part(&p, d, &start, &count);
    for (uint64_t i = 0; i < count; i++) CHECK_EQ_INT(seq[d][i], start + i);
    if (count < 26) CHECK_EQ_INT(seq[d][25], start); /* 103 = 26+26+26+25: group 3 repeats its first */
  }
  free_seqs(seq, 4);
  /* the buffer's randomness is the group's own: two groups with parts of the
   * same shape (halves of one shard) are not shuffled alike */
  uint64_t two[2] = {0, 400};
  p = params(two, 1, 2, 8, 1000, 0);
  seq = alloc_seqs(2, 200);
  CHECK(check_epoch(&p, 0, seq));
  int alike = 1;
  for (int i = 0; i < 200; i++) alike &= seq[1][i] == seq[0][i] + 200;
  CHECK(!alike);
  free_seqs(seq, 2);
  /* more groups than shards, empty shards among them (first, middle, last) */
  uint64_t off[7] = {0, 0, 5, 5, 5, 12, 12};
  p = params(off, 6, 8, 1, 2, 0);
  seq = alloc_seqs(8, 2);
  CHECK(check_epoch(&p, 0, seq));
  CHECK(check_epoch(&p, 1, seq));
  free_seqs(seq, 8);
  p.drop_last = 1; /* 12 samples, 8 groups of batch 1: 1 each, 4 dropped */
  seq = alloc_seqs(8, 1);
  CHECK_EQ_INT(lade__shards_len(&p), 1);
  CHECK(check_epoch(&p, 0, seq));
  free_seqs(seq, 8);
  /* errors */
  uint64_t out[16], n, v;
  p = params(off, 6, 13, 1, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "fewer than the 13 data-parallel groups") != NULL);
  lade__clear_error();
  CHECK_EQ_INT(lade_shards_len(&p), 0); /* the public one says why */
  CHECK(strstr(lade_last_error(), "fewer than the 13 data-parallel groups") != NULL);
  p = params(off, 6, 2, 7, 0, 1);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "drop_last") != NULL);
  p = params(off, 6, 2, 1, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 2, out, &n, &v) == LADE_EINVAL);
  p = params(off, 6, 0, 1, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EINVAL);
  p = params(off, 6, 2, 0, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EINVAL);
  uint64_t down[3] = {0, 5, 4}, late[2] = {1, 5}, none[3] = {0, 0, 0};
  p = params(down, 2, 1, 1, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "decrease") != NULL);
  p = params(late, 1, 1, 1, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EINVAL);
  p = params(none, 2, 1, 1, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EEMPTY);
  p = params(NULL, 0, 1, 1, 0, 0);
  CHECK(lade__shards_epoch(&p, 0, 0, out, &n, &v) == LADE_EINVAL);
  CHECK_EQ_INT(lade__shards_len(&p), 0);
  CHECK_EQ_INT(lade__shards_steps(&p), 0);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_measure);
  RUN(test_odd_cases);
  RUN(test_golden);
  RUN(test_sequential_split);
  RUN(test_exactly_once);
  RUN(test_buffer_quality);
  RUN(test_model_parallel);
  RUN(test_threads);
  return lade_test_finish();
}
