/* test_cursor.c - the plan cursor (src/plan/cursor.h) over its three orders
 * (order_ops.h): regular, shards and planned, each checked against the code
 * it must agree with (the regular slices, lade_shards_epoch, lade_plan_next)
 * and for what it refuses. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lade/plan.h"
#include "plan/cursor.h"
#include "plan/regular.h"

#define N 203
#define B 5

static lade__cursor_params_t params(int kind, uint32_t rank, uint32_t world, bool drop_last) {
  lade__cursor_params_t p;
  memset(&p, 0, sizeof p);
  lade_plan_settings_default(&p.plan, sizeof p.plan);
  p.plan.kind = kind;
  p.plan.samples = N;
  p.plan.learners = world;
  p.plan.batch_size = B;
  p.plan.epochs = 3;
  p.plan.seed = 9;
  p.plan.cache = 30;
  p.rank = rank;
  p.shuffle = true;
  p.drop_last = drop_last;
  return p;
}

/* regular: get() is the regular slice with "any" routes, order() and
 * first_use() agree with it, and every sample is used once per epoch over
 * the ranks. */
static void test_regular(void) {
  const uint32_t W = 3;
  uint32_t seen[3][N];
  memset(seen, 0, sizeof seen);
  for (uint32_t r = 0; r < W; r++) {
    lade__cursor_params_t p = params(LADE_PLAN_REGULAR, r, W, false);
    lade__cursor_t *c = NULL;
    CHECK_OK(lade__cursor_open(&c, &p));
    if (!c) return;
    lade__plan_params_t rp = lade__plan_params_of(&p.plan, true, false);
    CHECK_EQ_INT(lade__cursor_steps(c), lade__plan_steps(&rp));
    CHECK(!lade__cursor_routed(c));
    CHECK_EQ_INT(lade__cursor_max_batch(c), B);
    uint64_t steps = lade__cursor_steps(c), cnt = 0, buf = 0;
    CHECK(lade__cursor_stream_info(c, &cnt, &buf) == LADE_EINVAL);
    lade__cursor_step_t s;
    memset(&s, 0, sizeof s);
    uint32_t *map = malloc(N * sizeof *map);
    for (uint64_t e = 0; e < 3; e++) {
      CHECK_OK(lade__cursor_first_use(c, e, map));
      for (uint64_t st = 0; st < steps; st++) {
        uint64_t q = e * steps + st, idx[B];
        uint32_t n = 0, valid = 0;
        CHECK_OK(lade__cursor_get(c, q, &s));
        CHECK_OK(lade__cursor_order(c, q, idx, &n, &valid));
        CHECK_EQ_INT(s.q, q);
        CHECK_EQ_INT(s.n, n);
        CHECK_EQ_INT(s.valid, valid);
        CHECK(memcmp(s.idx, idx, n * sizeof *idx) == 0);
        CHECK_EQ_INT(s.nadmit + s.nevict + s.nsend, 0);
        for (uint32_t i = 0; i < s.n; i++) {
          CHECK_EQ_INT(s.from[i], LADE__ROUTE_ANY);
          if (i < s.valid) seen[e][s.idx[i]]++;
          CHECK(map[s.idx[i]] <= st * B + i);
        }
      }
    }
    CHECK(lade__cursor_get(c, 3 * steps, &s) == LADE_ERANGE);
    lade_plan_settings_t u;
    lade__cursor_settings(c, &u);
    CHECK_EQ_INT(u.kind, LADE_PLAN_REGULAR);
    CHECK_EQ_INT(u.drop_last, 0);
    free(map);
    lade__cursor_step_free(&s);
    lade__cursor_close(c);
  }
  for (int e = 0; e < 3; e++)
    for (int i = 0; i < N; i++) CHECK_EQ_INT(seen[e][i], 1);
}

/* shards: the steps are lade_shards_epoch's batches of this rank's group,
 * the stream is the group's part, and the kind reads as "shards". */
static void test_shards(void) {
  uint64_t off[8];
  for (int s = 0; s <= 7; s++) off[s] = (uint64_t)s * N / 7;
  const uint32_t W = 4, M = 2; /* two data-parallel groups of two ranks */
  for (uint32_t r = 0; r < W; r++) {
    lade__cursor_params_t p = params(LADE_PLAN_SHARDS, r, W, false);
    p.shard_offsets = off;
    p.shards = 7;
    p.shuffle_buffer = 40;
    p.model_parallel = M;
    lade__cursor_t *c = NULL;
    CHECK_OK(lade__cursor_open(&c, &p));
    if (!c) return;
    CHECK(!lade__cursor_routed(c));
    lade_shards_settings_t st = {.shards = 7, .offsets = off, .seed = 9, .buffer = 40, .groups = W / M,
                                 .batch_size = B, .drop_last = 0};
    uint64_t L = lade_shards_len(&st), steps = lade_shards_steps(&st);
    CHECK_EQ_INT(lade__cursor_steps(c), steps);
    uint64_t cnt = 0, buf = 0;
    CHECK_OK(lade__cursor_stream_info(c, &cnt, &buf));
    CHECK_EQ_INT(buf, 40);
    CHECK(cnt > 0 && cnt <= L);
    uint64_t *seq = malloc(L * sizeof *seq), *stream = malloc(cnt * sizeof *stream), got = 0;
    lade__cursor_step_t s;
    memset(&s, 0, sizeof s);
    for (uint64_t e = 0; e < 3; e++) {
      uint64_t n = 0, valid = 0;
      CHECK_OK(lade_shards_epoch(&st, e, r / M, seq, &n, &valid));
      CHECK_OK(lade__cursor_stream(c, e, 0, cnt, stream, &got));
      CHECK_EQ_INT(got, cnt);
      for (uint64_t t = 0; t < steps; t++) {
        CHECK_OK(lade__cursor_get(c, e * steps + t, &s));
        uint64_t want = L - t * B < B ? L - t * B : B;
        CHECK_EQ_INT(s.n, want);
        CHECK(memcmp(s.idx, seq + t * B, want * sizeof *seq) == 0);
        for (uint32_t i = 0; i < s.n; i++) CHECK_EQ_INT(s.from[i], LADE__ROUTE_ANY);
      }
    }
    lade_plan_settings_t u;
    lade__cursor_settings(c, &u);
    CHECK_EQ_INT(u.kind, LADE_PLAN_SHARDS);
    CHECK(strcmp(lade_plan_kind_name(lade__cursor_kind(c)), "shards") == 0);
    free(seq);
    free(stream);
    lade__cursor_step_free(&s);
    lade__cursor_close(c);
  }
  lade__cursor_params_t p = params(LADE_PLAN_SHARDS, 0, 1, false);
  lade__cursor_t *c = NULL;
  CHECK(lade__cursor_open(&c, &p) == LADE_EINVAL); /* no shards */
  CHECK(strstr(lade_last_error(), "plan shards: ") != NULL);
  CHECK(c == NULL);
}

/* planned: each rank's step is its part of lade_plan_next's step (routes,
 * admits, evicts, and the sends the other ranks' routes name), also after
 * seeking back; the short last step is the regular slice; no look-ahead. */
static void test_planned(void) {
  const uint32_t W = 2;
  const int kinds[] = {LADE_PLAN_LOCALITY, LADE_PLAN_DISTCACHE, LADE_PLAN_SOLAR};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (uint32_t r = 0; r < W; r++) {
      lade__cursor_params_t p = params(kinds[k], r, W, false);
      lade__cursor_t *c = NULL;
      CHECK_OK(lade__cursor_open(&c, &p));
      if (!c) return;
      CHECK(lade__cursor_routed(c));
      lade_plan_settings_t ps = p.plan;
      ps.drop_last = 1;
      lade_plan_t *pl = NULL;
      CHECK_OK(lade_plan_create(&pl, &ps, sizeof ps));
      if (!pl) return;
      uint64_t psteps = lade_plan_steps_per_epoch(pl), steps = lade__cursor_steps(c);
      CHECK_EQ_INT(steps, psteps + 1); /* N = 203, G = 10: a short last step */
      lade__cursor_step_t s;
      memset(&s, 0, sizeof s);
      const lade_plan_step_t *v = NULL;
      for (uint64_t e = 0; e < 3; e++)
        for (uint64_t t = 0; t < psteps; t++) {
          CHECK_OK(lade_plan_next(pl, &v));
          CHECK_OK(lade__cursor_get(c, e * steps + t, &s));
          uint64_t a = v->offset[r], b = v->offset[r + 1];
          CHECK_EQ_INT(s.n, b - a);
          CHECK(memcmp(s.idx, v->samples + a, (b - a) * sizeof *s.idx) == 0);
          CHECK(memcmp(s.from, v->from + a, (b - a) * sizeof *s.from) == 0);
          CHECK_EQ_INT(s.nadmit, v->admit_offset[r + 1] - v->admit_offset[r]);
          CHECK_EQ_INT(s.nevict, v->evict_offset[r + 1] - v->evict_offset[r]);
          uint64_t sends = 0;
          for (uint64_t i = v->offset[1 - r]; i < v->offset[2 - r]; i++) sends += v->from[i] == (int32_t)r;
          CHECK_EQ_INT(s.nsend, sends);
        }
      /* the short last step of epoch 1: the regular slice of its shuffle epoch */
      CHECK_OK(lade__cursor_get(c, steps + psteps, &s));
      const uint64_t *order = lade_plan_epoch_order(pl);
      lade__plan_params_t rp = lade__plan_params_of(&p.plan, true, false);
      lade__regular_t *reg = NULL;
      CHECK_OK(lade__regular_create(&reg, &rp));
      uint64_t idx[B];
      uint32_t n = 0, valid = 0;
      CHECK_OK(lade__regular_local(reg, order[1], psteps, r, idx, &n, &valid));
      CHECK_EQ_INT(s.n, n);
      CHECK(memcmp(s.idx, idx, n * sizeof *idx) == 0);
      CHECK_EQ_INT(s.nadmit + s.nevict + s.nsend, 0);
      lade__regular_destroy(reg);
      /* seeking back replays: step 3 of epoch 0 again */
      CHECK_OK(lade_plan_seek(pl, 0, 3));
      CHECK_OK(lade_plan_next(pl, &v));
      CHECK_OK(lade__cursor_get(c, 3, &s));
      CHECK(memcmp(s.idx, v->samples + v->offset[r], s.n * sizeof *s.idx) == 0);
      uint32_t *map = malloc(N * sizeof *map);
      CHECK(lade__cursor_order(c, 0, idx, &n, &valid) == LADE_EINVAL);
      CHECK(lade__cursor_first_use(c, 0, map) == LADE_EINVAL);
      lade_plan_settings_t u;
      lade__cursor_settings(c, &u);
      CHECK_EQ_INT(u.kind, kinds[k]);
      CHECK_EQ_INT(u.drop_last, 1);
      free(map);
      lade__cursor_step_free(&s);
      lade_plan_destroy(pl);
      lade__cursor_close(c);
    }
  lade__cursor_params_t p = params(LADE_PLAN_LOCALITY, 0, 1, false);
  p.shuffle = false;
  lade__cursor_t *c = NULL;
  CHECK(lade__cursor_open(&c, &p) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "shuffle=false applies to the regular plan only") != NULL);
  p.plan.kind = LADE_PLAN_SHARDS + 1;
  CHECK(lade__cursor_open(&c, &p) == LADE_EINVAL);
  CHECK(c == NULL);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_regular);
  RUN(test_shards);
  RUN(test_planned);
  return lade_test_finish();
}
