/* test_plan.c - the invariants every plan keeps (docs/plan.md), checked for every
 * plan over many seeds, world sizes, batch and cache sizes, by replaying each
 * plan's own admit/evict lists into an independent model of the caches. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "lade/plan.h"
#include "planner/planner.h"
#include "planner/regular.h"

static int cmp64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t step_hash(const lade_plan_step_t *v) {
  uint64_t h = 1469598103934665603ull;
  h = lade__hash64(v->samples, v->total * 8, h);
  h = lade__hash64(v->from, v->total * 4, h);
  h = lade__hash64(v->offset, (v->learners + 1) * 8, h);
  h = lade__hash64(v->admit, v->admit_offset[v->learners] * 8, h);
  h = lade__hash64(v->evict, v->evict_offset[v->learners] * 8, h);
  h = lade__hash64(v->admit_offset, (v->learners + 1) * 8, h);
  h = lade__hash64(v->evict_offset, (v->learners + 1) * 8, h);
  return h;
}

/* Runs one configuration and checks everything; returns total storage reads after epoch 0. */
static uint64_t check_plan(const lade_plan_settings_t *s) {
  lade_plan_t *pl = NULL;
  int rc = lade_plan_create(&pl, s, sizeof *s);
  CHECK_OK(rc);
  if (rc) return 0;
  const lade_plan_settings_t *u = lade_plan_settings(pl);
  uint64_t N = s->samples, p = s->learners, B = s->batch_size, G = B * p, C = u->cache;
  uint64_t steps = lade_plan_steps_per_epoch(pl), E = s->epochs;
  lade__plan_params_t rp = {N, (uint32_t)B, (uint32_t)p, E, s->seed, true, s->drop_last != 0};
  lade__regular_t *reg = NULL;
  CHECK_OK(lade__regular_create(&reg, &rp));
  uint8_t *held = calloc(N * p, 1); /* held[r*N+s]: the model of learner r's cache */
  uint64_t *occ = calloc(p, sizeof *occ);
  uint32_t *seen = calloc(N, sizeof *seen);
  uint64_t *a = malloc(G * 8), *b = malloc(G * 8), *hashes = malloc(E * steps * 8);
  uint64_t storage_late = 0;
  int bad_src = 0, bad_cache = 0, bad_set = 0, bad_size = 0;
  const uint64_t *order = lade_plan_epoch_order(pl);
  for (uint64_t e = 0; e < E; e++) {
    memset(seen, 0, N * sizeof *seen);
    for (uint64_t t = 0; t < steps; t++) {
      const lade_plan_step_t *v;
      CHECK_OK(lade_plan_next(pl, &v));
      CHECK_EQ_INT(v->epoch, e);
      CHECK_EQ_INT(v->step, t);
      CHECK_EQ_INT(v->shuffle_epoch, order[e]);
      if (!u->reorder) CHECK_EQ_INT(v->shuffle_epoch, e);
      hashes[e * steps + t] = step_hash(v);
      /* invariant 1: the multiset union equals the regular global batch */
      CHECK_OK(lade__regular_global(reg, v->shuffle_epoch, t, a));
      memcpy(b, v->samples, G * 8);
      qsort(a, G, 8, cmp64);
      qsort(b, G, 8, cmp64);
      if (v->offset[p] != G || memcmp(a, b, G * 8)) bad_set++;
      uint64_t mn = UINT64_MAX, mx = 0;
      for (uint64_t r = 0; r < p; r++) {
        uint64_t n = v->offset[r + 1] - v->offset[r];
        mn = LADE__MIN(mn, n);
        mx = LADE__MAX(mx, n);
        for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
          uint64_t x = v->samples[i];
          seen[x]++;
          int32_t f = v->from[i];
          if (f == LADE_FROM_CACHE && !held[r * N + x]) bad_src++;
          if (f >= 0 && ((uint64_t)f >= p || (uint64_t)f == r || !held[(uint64_t)f * N + x])) bad_src++;
          if (f == LADE_FROM_STORAGE && e > 0) storage_late++;
          if (f < LADE_FROM_STORAGE) bad_src++;
        }
      }
      uint64_t spread = u->kind == LADE_PLAN_SOLAR ? u->imbalance : 0;
      if (mx - mn > spread) bad_size++;
      /* apply the step's cache changes */
      for (uint64_t r = 0; r < p; r++) {
        for (uint64_t i = v->evict_offset[r]; i < v->evict_offset[r + 1]; i++) {
          uint64_t x = v->evict[i];
          if (!held[r * N + x]) bad_cache++;
          held[r * N + x] = 0;
          occ[r]--;
        }
        for (uint64_t i = v->admit_offset[r]; i < v->admit_offset[r + 1]; i++) {
          uint64_t x = v->admit[i];
          if (held[r * N + x]) bad_cache++;
          held[r * N + x] = 1;
          occ[r]++;
        }
        if (occ[r] > C) bad_cache++;
      }
      if (u->kind >= LADE_PLAN_DISTCACHE) /* disjoint caches */
        for (uint64_t i = 0; i < G; i++) {
          int n = 0;
          for (uint64_t r = 0; r < p; r++) n += held[r * N + v->samples[i]];
          if (n > 1) bad_cache++;
        }
    }
    /* invariant 2: every sample once per epoch (drop_last: at most once, steps*G in all) */
    uint64_t total = 0;
    for (uint64_t x = 0; x < N; x++) {
      total += seen[x];
      if (s->drop_last && seen[x] > 1) bad_set++;
      if (!s->drop_last && seen[x] < 1) bad_set++;
    }
    CHECK_EQ_INT(total, steps * G);
  }
  CHECK_EQ_INT(bad_set, 0);
  CHECK_EQ_INT(bad_src, 0);
  CHECK_EQ_INT(bad_cache, 0);
  CHECK_EQ_INT(bad_size, 0);
  const lade_plan_step_t *v;
  CHECK(lade_plan_next(pl, &v) == LADE_ERANGE);
  /* invariant 3: seeking (backwards and forwards) gives the same steps */
  lade__rng_t r;
  lade__rng_init(&r, s->seed, 77, 1);
  for (int k = 0; k < 4; k++) {
    uint64_t i = lade__rng_below(&r, E * steps);
    CHECK_OK(lade_plan_seek(pl, i / steps, i % steps));
    CHECK_OK(lade_plan_next(pl, &v));
    CHECK(step_hash(v) == hashes[i]);
    if (i + 1 < E * steps) {
      CHECK_OK(lade_plan_next(pl, &v));
      CHECK(step_hash(v) == hashes[i + 1]);
    }
  }
  if (bad_set || bad_src || bad_cache || bad_size)
    fprintf(stderr, "  in plan %s N=%llu p=%llu B=%llu C=%llu seed=%llu drop_last=%d\n", lade_plan_kind_name(u->kind),
            (unsigned long long)N, (unsigned long long)p, (unsigned long long)B, (unsigned long long)C,
            (unsigned long long)s->seed, s->drop_last);
  lade_plan_destroy(pl);
  lade__regular_destroy(reg);
  free(held);
  free(occ);
  free(seen);
  free(a);
  free(b);
  free(hashes);
  return storage_late;
}

static void test_invariants_all_plans(void) {
  const uint32_t ps[] = {1, 2, 3, 5, 8, 16, 64};
  const uint32_t bs[] = {1, 3, 8};
  int runs = 0;
  for (int kind = 0; kind < LADE_PLAN_KIND_COUNT; kind++)
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
      for (size_t bi = 0; bi < sizeof bs / sizeof bs[0]; bi++)
        for (int ci = 0; ci < 4; ci++) {
          lade_plan_settings_t s;
          lade_plan_settings_default(&s, sizeof s);
          s.kind = kind;
          s.learners = ps[pi];
          s.batch_size = bs[bi];
          s.seed = (uint64_t)(kind * 1000 + pi * 100 + bi * 10 + ci);
          uint64_t G = (uint64_t)ps[pi] * bs[bi];
          s.samples = G * (2 + (s.seed % 5)) + (ci % 2 ? s.seed % G : 0);
          if (s.samples > 1500) s.samples = 1500 - 1500 % G + (ci % 2);
          if (s.samples < G) s.samples = G;
          s.epochs = 3 + ci % 2;
          uint64_t share = (s.samples + ps[pi] - 1) / ps[pi];
          s.cache = ci == 0 ? 0 : ci == 1 ? (share / 3) : ci == 2 ? share : s.samples;
          s.drop_last = (ci != 3);
          s.balance_peer = ci % 2;
          s.imbalance = ci == 3 ? 2 * bs[bi] + 1 : (uint32_t)ci;
          s.coalesce = ci & 1;
          s.order_algo = ci == 3 ? LADE_ORDER_PSO : LADE_ORDER_AUTO;
          check_plan(&s);
          runs++;
        }
  CHECK(runs == 6 * 7 * 3 * 4);
}

static uint64_t late_reads(int kind, uint64_t N, uint32_t p, uint32_t B, uint64_t C, uint64_t E) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = kind;
  s.samples = N;
  s.learners = p;
  s.batch_size = B;
  s.cache = C;
  s.epochs = E;
  s.seed = 42;
  return check_plan(&s);
}

static void test_targets(void) {
  /* locality with the whole dataset cached in aggregate: no storage after epoch 0 */
  CHECK_EQ_INT(late_reads(LADE_PLAN_LOCALITY, 4096, 16, 16, 256, 3), 0);
  CHECK_EQ_INT(late_reads(LADE_PLAN_REGULAR, 4096, 16, 16, 256, 3), 2 * 4096);
  /* solar beats the best eviction without remapping when caches are small */
  uint64_t bel = late_reads(LADE_PLAN_REGULAR_BELADY, 4096, 16, 16, 128, 4);
  uint64_t sol = late_reads(LADE_PLAN_SOLAR, 4096, 16, 16, 128, 4);
  uint64_t lru = late_reads(LADE_PLAN_REGULAR_LRU, 4096, 16, 16, 128, 4);
  CHECK(sol < bel);
  CHECK(bel <= lru);
  CHECK(lru < 3 * 4096);
  /* solar's quota with skewed caches: level 0 may overshoot the global batch by more than 2p */
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = LADE_PLAN_SOLAR;
  s.samples = 262896;
  s.learners = 16;
  s.batch_size = 64;
  s.cache = 8215;
  s.epochs = 10;
  s.imbalance = 16;
  check_plan(&s);
}

static void test_balance(void) {
  lade__rng_t r;
  lade__rng_init(&r, 9, 0, 0);
  lade_plan_transfer_t tr[300];
  int64_t imb[300], left[300];
  for (int it = 0; it < 2000; it++) {
    uint32_t p = 1 + (uint32_t)lade__rng_below(&r, 256);
    uint64_t total = lade__rng_below(&r, 40 * p + 1), sum = 0;
    uint64_t load[300];
    for (uint32_t q = 0; q < p; q++) load[q] = 0;
    for (uint64_t k = 0; k < total; k++) load[lade__rng_below(&r, p)]++;
    /* shares: total/p, the first total%p learners one more */
    for (uint32_t q = 0; q < p; q++) {
      int64_t share = (int64_t)(total / p + (q < total % p));
      imb[q] = (int64_t)load[q] - share;
      left[q] = (int64_t)load[q];
      sum += share;
    }
    CHECK_EQ_INT(sum, total);
    uint64_t n = 0;
    CHECK_OK(lade_plan_balance(p, imb, tr, &n));
    CHECK(p == 0 || n <= p - 1);
    for (uint64_t k = 0; k < n; k++) {
      CHECK(tr[k].count > 0);
      left[tr[k].src] -= (int64_t)tr[k].count;
      left[tr[k].dst] += (int64_t)tr[k].count;
    }
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (uint32_t q = 0; q < p; q++) {
      mn = LADE__MIN(mn, left[q]);
      mx = LADE__MAX(mx, left[q]);
      CHECK(left[q] == (int64_t)(total / p + (q < total % p)));
    }
    CHECK(mx - mn <= 1);
  }
  int64_t bad[2] = {1, 0};
  uint64_t n;
  CHECK(lade_plan_balance(2, bad, tr, &n) == LADE_EINVAL);
}

static uint64_t brute(const uint64_t *cost, uint64_t E, uint64_t *perm, uint64_t k) {
  if (k == E) {
    uint64_t c = 0;
    for (uint64_t i = 1; i < E; i++) c += cost[perm[i - 1] * E + perm[i]];
    return c;
  }
  uint64_t best = UINT64_MAX;
  for (uint64_t i = k; i < E; i++) {
    uint64_t t = perm[k];
    perm[k] = perm[i];
    perm[i] = t;
    uint64_t c = brute(cost, E, perm, k + 1);
    if (c < best) best = c;
    perm[i] = perm[k];
    perm[k] = t;
  }
  return best;
}

static void test_epoch_order(void) {
  for (uint64_t E = 2; E <= 7; E++) {
    lade_plan_settings_t s;
    lade_plan_settings_default(&s, sizeof s);
    s.kind = LADE_PLAN_SOLAR;
    s.samples = 600;
    s.learners = 4;
    s.batch_size = 5;
    s.epochs = E;
    s.seed = E;
    uint64_t cost[49], order[7], perm[7], dp, ls, pso;
    CHECK_OK(lade_plan_order_costs(&s, sizeof s, 150, cost));
    for (uint64_t u = 0; u < E; u++) {
      CHECK_EQ_INT(cost[u * E + u], 0);
      for (uint64_t v = 0; v < E; v++) CHECK(cost[u * E + v] <= 150);
    }
    for (uint64_t i = 0; i < E; i++) perm[i] = i;
    uint64_t opt = brute(cost, E, perm, 0);
    CHECK_OK(lade_plan_order_solve(cost, E, LADE_ORDER_DP, 1, order, &dp));
    CHECK_EQ_INT(dp, opt);
    CHECK_OK(lade_plan_order_solve(cost, E, LADE_ORDER_LOCAL, 1, order, &ls));
    CHECK_OK(lade_plan_order_solve(cost, E, LADE_ORDER_PSO, 1, order, &pso));
    CHECK(ls >= opt);
    CHECK(pso >= opt);
    /* order is a permutation */
    uint64_t mask = 0;
    for (uint64_t i = 0; i < E; i++) mask |= 1ull << order[i];
    CHECK_EQ_INT(mask, (1ull << E) - 1);
  }
  uint64_t cost[17 * 17] = {0}, order[17];
  CHECK(lade_plan_order_solve(cost, 17, LADE_ORDER_DP, 1, order, NULL) == LADE_EINVAL);
  CHECK_OK(lade_plan_order_solve(cost, 17, LADE_ORDER_AUTO, 1, order, NULL));
}

static void test_bad_input(void) {
  lade_plan_settings_t s;
  lade_plan_t *pl = NULL;
  lade_plan_settings_default(&s, sizeof s);
  s.samples = 100;
  s.learners = 0;
  s.batch_size = 4;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "zero learners") != NULL);
  s.learners = 2;
  s.cache = 101;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "larger than the dataset") != NULL);
  s.cache = 0;
  s.batch_size = 101;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  s.batch_size = 60; /* G = 120 > 100 with drop_last */
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(lade_plan_kind_parse("nope") == LADE_EINVAL);
  CHECK_EQ_INT(lade_plan_kind_parse("regular+belady"), LADE_PLAN_REGULAR_BELADY);
  CHECK(pl == NULL);
}

/* One list of kind names (core/plankinds.h): every kind, shards included,
 * names itself, parses back, and is a value of the loader's `plan` setting;
 * the planner refuses shards by name. */
static void test_kind_names(void) {
  const char *want[] = {"regular", "regular+lru", "regular+belady", "distcache", "locality", "solar", "shards", "dlio"};
  CHECK_EQ_INT(LADE_PLAN_KIND_COUNT, 6); /* never renumbered: the plannable kinds */
  CHECK_EQ_INT(LADE_PLAN_SHARDS, 6);
  CHECK_EQ_INT(LADE_PLAN_DLIO, 7);
  lade_config_t *cfg = NULL;
  CHECK_OK(lade_config_create(&cfg));
  for (int k = 0; k <= LADE_PLAN_DLIO; k++) {
    CHECK(strcmp(lade_plan_kind_name(k), want[k]) == 0);
    CHECK_EQ_INT(lade_plan_kind_parse(want[k]), k);
    char buf[64] = "";
    CHECK_OK(lade_config_set(cfg, "plan", want[k]));
    CHECK_OK(lade_config_get(cfg, "plan", buf, sizeof buf));
    CHECK(strcmp(buf, want[k]) == 0);
  }
  lade_config_destroy(cfg);
  CHECK(strcmp(lade_plan_kind_name(LADE_PLAN_DLIO + 1), "unknown") == 0);
  CHECK(strcmp(lade_plan_kind_name(-1), "unknown") == 0);
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = LADE_PLAN_SHARDS;
  s.samples = 100;
  s.learners = 2;
  s.batch_size = 4;
  lade_plan_t *pl = NULL;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "shards") && strstr(lade_last_error(), "not a permutation"));
  CHECK(pl == NULL);
  lade_sim_epoch_t ep[1];
  CHECK(lade_simulate(&s, sizeof s, NULL, ep, sizeof ep[0], NULL) == LADE_EINVAL);
  s.kind = LADE_PLAN_DLIO; /* DLIO's sharding is the loader's too */
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "dlio") && strstr(lade_last_error(), "not a permutation"));
  CHECK(pl == NULL);
}

/* The first fields of lade_plan_settings_t, as an older caller compiled them. */
typedef struct old_settings {
  int kind;
  uint64_t samples;
  uint32_t learners, batch_size;
  uint64_t epochs, seed, cache;
} old_settings_t;

/* The first fields of lade_sim_epoch_t, likewise. */
typedef struct old_epoch {
  uint64_t epoch, steps, from_storage, from_peer, from_cache;
} old_epoch_t;

#define GUARD 0xa5

static int guard_intact(const unsigned char *g, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (g[i] != GUARD) return 0;
  return 1;
}

/* lade_plan_settings_t and lade_sim_epoch_t grow at their end (lade/plan.h):
 * an older caller's shorter structs, their sizes passed, get the same plan
 * and the same counts as the full structs, missing settings take their
 * defaults, and nothing past the caller's structs is written. */
static void test_sized_structs(void) {
  struct {
    old_settings_t s;
    unsigned char guard[64];
  } w;
  memset(&w, GUARD, sizeof w);
  lade_plan_settings_default((lade_plan_settings_t *)&w.s, sizeof w.s);
  CHECK(guard_intact(w.guard, sizeof w.guard));
  CHECK_EQ_INT(w.s.kind, LADE_PLAN_REGULAR);
  CHECK_EQ_INT(w.s.epochs, 1);
  CHECK_EQ_INT(w.s.cache, 0);
  CHECK_EQ_INT(w.s.seed, 0);
  w.s.kind = LADE_PLAN_LOCALITY;
  w.s.samples = 203;
  w.s.learners = 4;
  w.s.batch_size = 5;
  w.s.epochs = 3;
  w.s.seed = 7;
  w.s.cache = 30;
  lade_plan_settings_t full;
  lade_plan_settings_default(&full, sizeof full);
  memcpy(&full, &w.s, sizeof w.s);

  lade_plan_t *pl = NULL;
  CHECK_OK(lade_plan_create(&pl, (const lade_plan_settings_t *)&w.s, sizeof w.s));
  if (pl) { /* the fields the old struct lacks have their defaults */
    const lade_plan_settings_t *u = lade_plan_settings(pl);
    CHECK_EQ_INT(u->drop_last, 1);
    CHECK_EQ_INT(u->balance_peer, 1);
    CHECK_EQ_INT(u->coalesce, 1);
    CHECK_EQ_INT(u->cache_bytes, 0);
    CHECK_EQ_INT(u->cache, 30);
    CHECK_EQ_INT(u->seed, 7);
  }
  lade_plan_destroy(pl);

  enum { E = 3 };
  lade_sim_epoch_t want[E];
  CHECK_OK(lade_simulate(&full, sizeof full, NULL, want, sizeof want[0], NULL));
  CHECK(want[1].from_storage < want[0].from_storage); /* the cache serves something */
  struct {
    old_epoch_t ep[E];
    unsigned char guard[64];
  } o;
  memset(&o, GUARD, sizeof o);
  CHECK_OK(lade_simulate((const lade_plan_settings_t *)&w.s, sizeof w.s, NULL, (lade_sim_epoch_t *)o.ep,
                         sizeof o.ep[0], NULL));
  CHECK(guard_intact(o.guard, sizeof o.guard));
  CHECK(guard_intact(w.guard, sizeof w.guard));
  for (int e = 0; e < E; e++) {
    CHECK_EQ_INT(o.ep[e].epoch, (uint64_t)e);
    CHECK_EQ_INT(o.ep[e].steps, want[e].steps);
    CHECK_EQ_INT(o.ep[e].from_storage, want[e].from_storage);
    CHECK_EQ_INT(o.ep[e].from_peer, want[e].from_peer);
    CHECK_EQ_INT(o.ep[e].from_cache, want[e].from_cache);
  }
  /* a newer caller's longer entries: a stride of its size, zeros past ours */
  struct {
    lade_sim_epoch_t e;
    uint64_t future;
  } n[E];
  memset(n, GUARD, sizeof n);
  CHECK_OK(lade_simulate(&full, sizeof full, NULL, &n[0].e, sizeof n[0], NULL));
  for (int e = 0; e < E; e++) {
    CHECK_EQ_INT(n[e].future, 0);
    CHECK_EQ_INT(n[e].e.from_storage, want[e].from_storage);
    CHECK_EQ_INT(n[e].e.transfers, want[e].transfers);
  }
  CHECK(lade_simulate(&full, sizeof full, NULL, want, 4, NULL) == LADE_EINVAL);

  /* a newer caller's settings: unknown fields must be zero */
  struct {
    lade_plan_settings_t s;
    uint64_t future;
  } ns;
  memset(&ns, 0, sizeof ns);
  ns.s = full;
  CHECK_OK(lade_plan_create(&pl, &ns.s, sizeof ns));
  lade_plan_destroy(pl);
  pl = NULL;
  ns.future = 1;
  CHECK(lade_plan_create(&pl, &ns.s, sizeof ns) == LADE_EUNSUPPORTED);
  CHECK(lade_plan_create(&pl, &full, 4) == LADE_EINVAL);
  CHECK(pl == NULL);
  uint64_t cost[E * E], cost_old[E * E];
  CHECK_OK(lade_plan_order_costs(&full, sizeof full, 20, cost));
  CHECK_OK(lade_plan_order_costs((const lade_plan_settings_t *)&w.s, sizeof w.s, 20, cost_old));
  CHECK(memcmp(cost, cost_old, sizeof cost) == 0);
}

/* Planning cost grows with epochs by O(N) shuffles, not by steps: the
 * regular order draws each epoch's permutation once, and solar, which
 * draws the next epoch's ahead for its next-use keys, hands it over, so the
 * driver's order draws only the first (counted, not timed). The shuffle
 * that draws its swap partners ahead (to prefetch them) is the textbook
 * Fisher-Yates on the same RNG draws, at sizes below and above its lookahead. */
static void test_plan_growth(void) {
  for (uint64_t n = 1; n <= 300; n += n < 40 ? 1 : 37) {
    lade__plan_params_t rp = {n, 1, 1, 1, 9, true, true};
    uint64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    lade__shuffle_epoch(&rp, 3, a);
    for (uint64_t i = 0; i < n; i++) b[i] = i;
    lade__rng_t r;
    lade__rng_init(&r, 9, 3, LADE__RNG_SHUFFLE);
    for (uint64_t i = n - 1; i > 0; i--) {
      uint64_t j = lade__rng_below(&r, i + 1), t = b[i];
      b[i] = b[j];
      b[j] = t;
    }
    CHECK(memcmp(a, b, n * sizeof *a) == 0);
    free(a);
    free(b);
  }
  const int kinds[] = {LADE_PLAN_REGULAR, LADE_PLAN_DISTCACHE, LADE_PLAN_LOCALITY, LADE_PLAN_SOLAR};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    for (uint32_t rpn = 1; rpn <= 2; rpn++) {
      lade_plan_settings_t s;
      lade_plan_settings_default(&s, sizeof s);
      s.kind = kinds[i];
      s.samples = 1000;
      s.learners = 4;
      s.ranks_per_node = rpn;
      s.batch_size = 8;
      s.epochs = 6;
      s.cache = 100;
      lade_plan_t *pl = NULL;
      CHECK_OK(lade_plan_create(&pl, &s, sizeof s));
      if (!pl) continue;
      const lade_plan_step_t *v;
      uint64_t steps = 0;
      while (lade_plan_next(pl, &v) == 0) steps++;
      CHECK_EQ_INT(steps, 6 * lade_plan_steps_per_epoch(pl));
      CHECK_EQ_INT(lade__regular_shuffles(pl->reg), kinds[i] == LADE_PLAN_SOLAR ? 1 : 6);
      lade_plan_destroy(pl);
    }
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_kind_names);
  RUN(test_sized_structs);
  RUN(test_balance);
  RUN(test_epoch_order);
  RUN(test_bad_input);
  RUN(test_targets);
  RUN(test_invariants_all_plans);
  RUN(test_plan_growth);
  return lade_test_finish();
}
