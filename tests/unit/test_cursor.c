/* test_cursor.c - the plan cursor (src/cursor/cursor.h) over its three orders
 * (src/cursor/orders.h): regular, shards and planned, each checked against the code
 * it must agree with (the regular slices, lade_shards_epoch, lade_plan_next)
 * and for what it refuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lade/plan.h"
#include "cursor/cursor.h"
#include "planner/regular.h"

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
  p.plan.kind = LADE_PLAN_DLIO + 1;
  CHECK(lade__cursor_open(&c, &p) == LADE_EINVAL);
  CHECK(c == NULL);
}

/* ---- resume at another layout (cursor.h "Resume", docs/plan.md) */

static uint64_t g_off[8];

static lade__cursor_params_t rparams(int kind, uint32_t rank, uint32_t world, uint32_t batch, bool drop_last) {
  lade__cursor_params_t p = params(kind, rank, world, drop_last);
  p.plan.batch_size = batch;
  p.plan.cache = 12;
  for (int s = 0; s <= 7; s++) g_off[s] = (uint64_t)s * N / 7;
  if (kind == LADE_PLAN_SHARDS) {
    p.shard_offsets = g_off;
    p.shards = 7;
    p.shuffle_buffer = 40;
  }
  return p;
}

/* world cursors of (kind, batch), resumed from pos when given. */
static int open_world(lade__cursor_t **cs, int kind, uint32_t world, uint32_t batch, bool drop_last,
                      const lade_position_t *pos) {
  for (uint32_t r = 0; r < world; r++) {
    lade__cursor_params_t p = rparams(kind, r, world, batch, drop_last);
    if (pos) {
      p.resumed = true;
      p.resume = *pos;
    }
    cs[r] = NULL;
    int rc = lade__cursor_open(&cs[r], &p);
    if (rc) {
      fprintf(stderr, "  open %s rank %u/%u: %s\n", lade_plan_kind_name(kind), r, world, lade_last_error());
      return rc;
    }
  }
  return 0;
}

static void close_world(lade__cursor_t **cs, uint32_t world) {
  for (uint32_t r = 0; r < world; r++) lade__cursor_close(cs[r]);
}

/* Counts into cnt[] the real samples the world's ranks get in steps [from, to). */
static int deliver(lade__cursor_t **cs, uint32_t world, uint64_t from, uint64_t to, uint32_t *cnt) {
  lade__cursor_step_t s;
  memset(&s, 0, sizeof s);
  int rc = 0;
  for (uint64_t q = from; q < to && !rc; q++)
    for (uint32_t r = 0; r < world && !rc; r++) {
      rc = lade__cursor_get(cs[r], q, &s);
      for (uint32_t i = 0; !rc && i < s.valid; i++) cnt[s.idx[i]]++;
    }
  lade__cursor_step_free(&s);
  return rc;
}

/* Per step, the sorted samples of all ranks (the global batch); with
 * per_rank each rank's own too: a and b agree on steps [from, to). */
static int same_steps(lade__cursor_t **a, lade__cursor_t **b, uint32_t world, uint64_t from, uint64_t to,
                      bool per_rank) {
  lade__cursor_step_t x, y;
  memset(&x, 0, sizeof x);
  memset(&y, 0, sizeof y);
  int same = 1;
  for (uint64_t q = from; q < to && same; q++) {
    uint32_t ca[N] = {0}, cb[N] = {0};
    for (uint32_t r = 0; r < world && same; r++) {
      if (lade__cursor_get(a[r], q, &x) || lade__cursor_get(b[r], q, &y)) same = 0;
      for (uint32_t i = 0; same && i < x.n; i++) ca[x.idx[i]]++;
      for (uint32_t i = 0; same && i < y.n; i++) cb[y.idx[i]]++;
      if (same && per_rank && (x.n != y.n || memcmp(x.idx, y.idx, x.n * sizeof *x.idx))) same = 0;
    }
    if (same && memcmp(ca, cb, sizeof ca)) same = 0;
  }
  lade__cursor_step_free(&x);
  lade__cursor_step_free(&y);
  return same;
}

/* P ranks of batch BP run epoch 1 to step `stop`; rank 0's position (every
 * rank's is the same) opens Q ranks of batch BQ: they deliver the rest of
 * epoch 1, none of the consumed samples and each remaining one once (all of
 * them without drop_last), start at the position they were given, and from
 * epoch 2 on run as an uninterrupted run at Q (each rank's samples for the
 * kinds that slice the regular order, the global batch for the others). */
static void check_resize(int kind, uint32_t P, uint32_t BP, uint32_t Q, uint32_t BQ, bool drop_last, uint64_t stop) {
  lade__cursor_t *a[8], *b[8], *u[8];
  uint32_t cons[N] = {0}, got[N] = {0};
  if (open_world(a, kind, P, BP, drop_last, NULL)) {
    CHECK(0);
    return;
  }
  uint64_t sp = lade__cursor_steps(a[0]);
  CHECK_OK(deliver(a, P, sp, sp + stop, cons));
  lade_position_t pos, other;
  CHECK_OK(lade__cursor_position(a[0], sp + stop, &pos));
  CHECK_OK(lade__cursor_position(a[P - 1], sp + stop, &other));
  CHECK(memcmp(&pos, &other, sizeof pos) == 0); /* global: any rank's */
  CHECK_EQ_INT(pos.epoch, 1);
  close_world(a, P);
  if (open_world(b, kind, Q, BQ, drop_last, &pos) || open_world(u, kind, Q, BQ, drop_last, NULL)) {
    CHECK(0);
    return;
  }
  uint64_t sq = lade__cursor_steps(b[0]), first = lade__cursor_first(b[0]);
  CHECK(first >= sq && first <= 2 * sq);
  for (uint32_t r = 1; r < Q; r++) CHECK_EQ_INT(lade__cursor_first(b[r]), first);
  lade__cursor_step_t s;
  memset(&s, 0, sizeof s);
  if (first > sq) CHECK(lade__cursor_get(b[0], first - 1, &s) == LADE_ERANGE); /* before the start */
  lade__cursor_step_free(&s);
  CHECK_OK(deliver(b, Q, first, 2 * sq, got));
  uint64_t left = 0, twice = 0, again = 0;
  for (uint64_t x = 0; x < N; x++) {
    again += cons[x] && got[x];
    twice += got[x] > 1 || cons[x] > 1;
    left += !cons[x] && !got[x];
  }
  CHECK_EQ_INT(again, 0);
  CHECK_EQ_INT(twice, 0);
  if (drop_last) CHECK(left < (uint64_t)BP * P + (uint64_t)BQ * Q);
  else CHECK_EQ_INT(left, 0);
  /* a position taken where the resumed run starts names what was consumed */
  lade_position_t back;
  CHECK_OK(lade__cursor_position(b[0], first, &back));
  if (kind != LADE_PLAN_SHARDS && first < 2 * sq) CHECK_EQ_INT(back.consumed, pos.consumed);
  CHECK_EQ_INT(back.epoch, first < 2 * sq ? 1 : 2);
  bool per_rank = kind == LADE_PLAN_REGULAR || kind == LADE_PLAN_SHARDS || kind == LADE_PLAN_DISTCACHE ||
                  kind == LADE_PLAN_REGULAR_LRU || kind == LADE_PLAN_REGULAR_BELADY;
  CHECK(same_steps(b, u, Q, 2 * sq, 3 * sq, per_rank));
  close_world(b, Q);
  close_world(u, Q);
}

static void test_resize_every_order(void) {
  const int kinds[] = {LADE_PLAN_REGULAR,   LADE_PLAN_SHARDS,   LADE_PLAN_DISTCACHE,     LADE_PLAN_LOCALITY,
                       LADE_PLAN_SOLAR,     LADE_PLAN_REGULAR_LRU, LADE_PLAN_REGULAR_BELADY};
  const uint32_t pq[][4] = {{4, 5, 2, 5}, {2, 5, 4, 5}, {4, 5, 3, 5}, {4, 5, 3, 7}, {3, 4, 3, 6}, {4, 5, 4, 5}};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (size_t i = 0; i < sizeof pq / sizeof pq[0]; i++)
      for (int dl = 0; dl < 2; dl++) {
        int before = lade_test_failed_checks;
        check_resize(kinds[k], pq[i][0], pq[i][1], pq[i][2], pq[i][3], dl, 3);
        if (lade_test_failed_checks != before)
          fprintf(stderr, "  ^ %s %u(B=%u) -> %u(B=%u) drop_last=%d\n", lade_plan_kind_name(kinds[k]), pq[i][0],
                  pq[i][1], pq[i][2], pq[i][3], dl);
      }
}

/* A run resumed at Q and saved again inside that epoch: at Q it continues
 * its own order exactly; at R the rest is re-striped again, still each
 * sample once; a shards epoch resumed at a third layout and saved inside it
 * has no position (refused, saying why). */
static void test_resize_twice(void) {
  const int kinds[] = {LADE_PLAN_REGULAR, LADE_PLAN_SHARDS, LADE_PLAN_LOCALITY};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    int kind = kinds[k];
    lade__cursor_t *a[8], *b[8], *c[8], *d[8];
    uint32_t cnt[N] = {0};
    CHECK_OK(open_world(a, kind, 4, 5, false, NULL));
    uint64_t sp = lade__cursor_steps(a[0]);
    CHECK_OK(deliver(a, 4, sp, sp + 2, cnt));
    lade_position_t p1, p2, p3;
    CHECK_OK(lade__cursor_position(a[0], sp + 2, &p1));
    close_world(a, 4);
    CHECK_OK(open_world(b, kind, 3, 5, false, &p1));
    uint64_t sq = lade__cursor_steps(b[0]), f = lade__cursor_first(b[0]);
    CHECK_OK(deliver(b, 3, f, f + 2, cnt));
    CHECK_OK(lade__cursor_position(b[0], f + 2, &p2));
    /* at the same layout: the same steps as b's (a planned kind's caches
     * start empty again, so only its global batches are b's) */
    CHECK_OK(open_world(c, kind, 3, 5, false, &p2));
    CHECK_EQ_INT(lade__cursor_first(c[0]), f + 2);
    if (!same_steps(b, c, 3, f + 2, 3 * sq, kind != LADE_PLAN_LOCALITY))
      CHECK(!fprintf(stderr, "  %s: not the same steps\n", lade_plan_kind_name(kind)));
    close_world(c, 3);
    close_world(b, 3);
    /* at a third layout */
    CHECK_OK(open_world(d, kind, 2, 5, false, &p2));
    uint64_t sr = lade__cursor_steps(d[0]), g = lade__cursor_first(d[0]);
    CHECK_OK(deliver(d, 2, g, 2 * sr, cnt));
    int once = 1;
    for (uint64_t x = 0; x < N; x++) once &= cnt[x] == 1;
    CHECK(once);
    int rc = g + 1 < 2 * sr ? lade__cursor_position(d[0], g + 1, &p3) : 0;
    if (kind == LADE_PLAN_SHARDS) {
      CHECK(rc == LADE_EUNSUPPORTED);
      CHECK(strstr(lade_last_error(), "save at the epoch's end") != NULL);
    } else {
      CHECK_OK(rc);
    }
    CHECK_OK(lade__cursor_position(d[0], 2 * sr, &p3)); /* the next epoch's start: always */
    CHECK_EQ_INT(p3.epoch, 2);
    CHECK_EQ_INT(p3.consumed, 0);
    close_world(d, 2);
  }
}

/* dlio (order_dlio.c, docs/dlio.md): DLIO's readers' sharding, exactly. */
static void test_dlio(void) {
  /* pytorch: 10 DLIO samples over 4 ranks, batch 1: P = 3, the blocks [0,3),
   * [3,6), [6,9), [9,10); floor(10 / 4) = 2 steps; the last block wraps */
  lade__cursor_params_t p = params(LADE_PLAN_DLIO, 0, 4, true);
  p.plan.samples = 10;
  p.plan.batch_size = 1;
  p.dlio_reader = LADE__DLIO_PYTORCH;
  uint64_t want_pt[4][2] = {{0, 1}, {3, 4}, {6, 7}, {9, 9}};
  for (uint32_t r = 0; r < 4; r++) {
    p.rank = r;
    lade__cursor_t *c = NULL;
    CHECK_OK(lade__cursor_open(&c, &p));
    CHECK_EQ_INT(lade__cursor_steps(c), 2);
    lade__cursor_step_t st = {0};
    for (uint64_t e = 0; e < 2; e++) /* the same every epoch */
      for (uint64_t s = 0; s < 2; s++) {
        CHECK_OK(lade__cursor_get(c, e * 2 + s, &st));
        CHECK_EQ_INT(st.n, 1);
        CHECK_EQ_INT(st.idx[0], want_pt[r][s]);
        CHECK_EQ_INT(st.from[0], LADE__ROUTE_ANY);
      }
    lade__cursor_step_free(&st);
    lade__cursor_close(c);
  }
  /* a source without shards, 3 DLIO samples per file: sample g is file g / 3 */
  p.rank = 1;
  p.dlio_rep = 3;
  p.plan.learners = 2;
  p.plan.samples = 4; /* 12 DLIO samples, P = 6: rank 1 reads 6..11 = files 2, 2, 2, 3, 3, 3 */
  lade__cursor_t *c = NULL;
  CHECK_OK(lade__cursor_open(&c, &p));
  CHECK_EQ_INT(lade__cursor_steps(c), 6);
  lade__cursor_step_t st = {0};
  for (uint64_t s = 0; s < 6; s++) {
    CHECK_OK(lade__cursor_get(c, s, &st));
    CHECK_EQ_INT(st.idx[0], 2 + s / 3);
  }
  lade__cursor_close(c);
  /* tensorflow: files of 3, 2 and 4 records (shards), one rank, two files at
   * a time, one record from each in turn, a finished file's slot taking the
   * next: 0 3 1 4 2 5 6 7 8; batch 3 */
  const uint64_t off[] = {0, 3, 5, 9};
  p = params(LADE_PLAN_DLIO, 0, 1, true);
  p.plan.samples = 9;
  p.plan.batch_size = 3;
  p.dlio_reader = LADE__DLIO_TENSORFLOW;
  p.dlio_interleave = 2;
  p.shuffle = false;
  p.shard_offsets = off;
  p.shards = 3;
  const uint64_t want_tf[9] = {0, 3, 1, 4, 2, 5, 6, 7, 8};
  CHECK_OK(lade__cursor_open(&c, &p));
  for (uint64_t q = 0; q < 3; q++) {
    CHECK_OK(lade__cursor_get(c, q, &st));
    for (uint32_t k = 0; k < 3; k++) CHECK_EQ_INT(st.idx[k], want_tf[q * 3 + k]);
  }
  lade__cursor_close(c);
  /* two ranks: rank 1 reads file 1 alone (files i % 2 == 1), 2 records,
   * floor(9 / 2 / 1) = 4 steps: its stream repeats */
  p.plan.learners = 2;
  p.plan.batch_size = 1;
  p.rank = 1;
  CHECK_OK(lade__cursor_open(&c, &p));
  CHECK_EQ_INT(lade__cursor_steps(c), 4);
  for (uint64_t q = 0; q < 4; q++) {
    CHECK_OK(lade__cursor_get(c, q, &st));
    CHECK_EQ_INT(st.idx[0], 3 + q % 2);
  }
  lade__cursor_close(c);
  /* a shuffle buffer reorders within the stream, keyed by the epoch: each
   * record once per epoch all the same */
  p.plan.learners = 1;
  p.rank = 0;
  p.plan.batch_size = 9;
  p.shuffle = true;
  p.shuffle_buffer = 4;
  CHECK_OK(lade__cursor_open(&c, &p));
  uint64_t first[9];
  for (uint64_t e = 0; e < 3; e++) {
    CHECK_OK(lade__cursor_get(c, e, &st));
    uint32_t seen = 0;
    for (uint32_t k = 0; k < 9; k++) seen |= 1u << st.idx[k];
    CHECK_EQ_INT(seen, 0x1ff);
    if (!e) memcpy(first, st.idx, sizeof first);
  }
  CHECK(memcmp(first, st.idx, sizeof first) != 0 || memcmp(first, want_tf, sizeof first) != 0);
  lade__cursor_close(c);
  /* a resume at another world size is refused (DLIO's sharding depends on it) */
  p.resumed = true;
  p.resume = (lade_position_t){.epoch = 1, .consumed = 0, .world_size = 2, .batch_size = 9};
  CHECK(lade__cursor_open(&c, &p) == LADE_EUNSUPPORTED);
  p.resume.world_size = 1;
  CHECK_OK(lade__cursor_open(&c, &p));
  CHECK_EQ_INT(lade__cursor_first(c), 1);
  lade__cursor_close(c);
  lade__cursor_step_free(&st);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_dlio);
  RUN(test_regular);
  RUN(test_shards);
  RUN(test_planned);
  RUN(test_resize_every_order);
  RUN(test_resize_twice);
  return lade_test_finish();
}
