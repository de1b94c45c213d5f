/* test_plan_nodes.c - node-aware plans (ranks_per_node > 1, docs/plan.md
 * "Nodes"): for distcache, locality and solar over many world sizes, node
 * sizes, batches and caches, each step is checked against an independent
 * model of the nodes' caches rebuilt from the plan's own admit/evict lists:
 * every sample of the regular global batch once; every route true at the
 * start of the step (own cache: this rank admitted it; a rank of the node:
 * it holds it; another node: it holds it); at most one admit of a sample per
 * step and at most one node holding it; each node's cache within `cache`;
 * node balance (each node trains on r*B samples, B per rank; locality keeps
 * min(r*B, cached on the node) of the batch on the node and moves exactly
 * Algorithm 1's counts between nodes); and the simulator's counts equal the
 * routes counted here. Plus: ranks_per_node 1 and 0 are today's plans, the
 * kinds without disjoint caches ignore it, plan files keep it, and the node
 * model. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "lade/plan.h"
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
  return h;
}

/* Runs one node plan and checks every step; counts route classes into cls[epoch][4]. */
static void check_nodes(const lade_plan_settings_t *s) {
  lade_plan_t *pl = NULL;
  int rc = lade_plan_create(&pl, s, sizeof *s);
  CHECK_OK(rc);
  if (rc) return;
  const lade_plan_settings_t *u = lade_plan_settings(pl);
  uint64_t N = s->samples, p = s->learners, B = s->batch_size, G = B * p, C = u->cache;
  uint32_t rpn = u->ranks_per_node, n = (uint32_t)(p / rpn);
  CHECK_EQ_INT(rpn, s->ranks_per_node);
  uint64_t steps = lade_plan_steps_per_epoch(pl), E = s->epochs;
  lade__plan_params_t rp = {N, (uint32_t)B, (uint32_t)p, E, s->seed, true, s->drop_last != 0};
  lade__regular_t *reg = NULL;
  CHECK_OK(lade__regular_create(&reg, &rp));
  int32_t *holder = malloc(N * sizeof *holder); /* the model: the rank that admitted each sample, or -1 */
  memset(holder, 0xff, N * sizeof *holder);
  uint64_t *occ = calloc(n, sizeof *occ), *cached = calloc(n, sizeof *cached), *kept = calloc(n, sizeof *kept);
  uint64_t *a = malloc(G * 8), *b = malloc(G * 8);
  uint8_t *adm = calloc(N, 1);
  uint64_t (*cls)[4] = calloc(E, sizeof *cls);
  int bad_set = 0, bad_src = 0, bad_cache = 0, bad_bal = 0, bad_loc = 0;
  for (uint64_t e = 0; e < E; e++)
    for (uint64_t t = 0; t < steps; t++) {
      const lade_plan_step_t *v;
      CHECK_OK(lade_plan_next(pl, &v));
      if (!v) break;
      CHECK_EQ_INT(v->ranks_per_node, rpn);
      /* each sample of the global batch exactly once */
      CHECK_OK(lade__regular_global(reg, v->shuffle_epoch, t, a));
      memcpy(b, v->samples, G * 8);
      memset(cached, 0, n * sizeof *cached);
      for (uint64_t i = 0; i < G; i++)
        if (holder[a[i]] >= 0) cached[(uint32_t)holder[a[i]] / rpn]++;
      qsort(a, G, 8, cmp64);
      qsort(b, G, 8, cmp64);
      if (v->offset[p] != G || memcmp(a, b, G * 8)) bad_set++;
      memset(kept, 0, n * sizeof *kept);
      uint64_t inter = 0;
      for (uint64_t r = 0; r < p; r++) {
        uint64_t len = v->offset[r + 1] - v->offset[r];
        if (u->kind != LADE_PLAN_SOLAR || !u->imbalance ? len != B : len + u->imbalance < B || len > B + u->imbalance)
          bad_bal++;
        for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
          uint64_t x = v->samples[i];
          int32_t f = v->from[i];
          lade_plan_route_class_t k = lade_plan_route_class(f, (uint32_t)r, rpn);
          cls[e][k]++;
          if (k == LADE_ROUTE_OWN && holder[x] != (int32_t)r) bad_src++;
          if ((k == LADE_ROUTE_NODE || k == LADE_ROUTE_PEER) && ((uint64_t)f >= p || f == (int32_t)r || holder[x] != f))
            bad_src++;
          if (k == LADE_ROUTE_STORAGE && holder[x] >= 0 && u->kind != LADE_PLAN_LOCALITY && u->kind != LADE_PLAN_SOLAR)
            bad_src++; /* distcache reads storage only for what no node holds */
          if (k == LADE_ROUTE_NODE && (uint32_t)f / rpn != r / rpn) bad_src++;
          if (k == LADE_ROUTE_OWN || k == LADE_ROUTE_NODE) kept[r / rpn]++;
          if (k == LADE_ROUTE_PEER) inter++;
        }
      }
      if (u->kind == LADE_PLAN_DISTCACHE) { /* the regular slices */
        CHECK_OK(lade__regular_global(reg, v->shuffle_epoch, t, a));
        if (memcmp(a, v->samples, G * 8)) bad_set++;
      }
      if (u->kind == LADE_PLAN_LOCALITY) {
        /* a node trains on its cached samples up to its share; Algorithm 1 moves the rest between nodes */
        uint64_t moved = 0;
        for (uint32_t m = 0; m < n; m++)
          if (kept[m] != LADE__MIN(cached[m], (uint64_t)rpn * B)) bad_loc++;
        for (uint64_t j = 0; j < v->transfers; j++) {
          moved += v->transfer[j].count;
          if (v->transfer[j].src >= n || v->transfer[j].dst >= n || v->transfer[j].src == v->transfer[j].dst) bad_loc++;
        }
        if (v->transfers > (n ? n - 1 : 0)) bad_loc++;
        if (u->balance_peer ? inter != moved : inter != 0) bad_loc++;
      }
      /* apply the step: evictions, then admissions; one admit per sample, one node holds it */
      for (uint64_t r = 0; r < p; r++)
        for (uint64_t i = v->evict_offset[r]; i < v->evict_offset[r + 1]; i++) {
          uint64_t x = v->evict[i];
          if (holder[x] != (int32_t)r) bad_cache++;
          holder[x] = -1;
          occ[r / rpn]--;
        }
      for (uint64_t r = 0; r < p; r++)
        for (uint64_t i = v->admit_offset[r]; i < v->admit_offset[r + 1]; i++) {
          uint64_t x = v->admit[i];
          if (holder[x] >= 0 || adm[x]) bad_cache++;
          adm[x] = 1;
          holder[x] = (int32_t)r;
          occ[r / rpn]++;
        }
      for (uint64_t r = 0; r < p; r++)
        for (uint64_t i = v->admit_offset[r]; i < v->admit_offset[r + 1]; i++) adm[v->admit[i]] = 0;
      for (uint32_t m = 0; m < n; m++)
        if (occ[m] > C) bad_cache++;
    }
  CHECK_EQ_INT(bad_set, 0);
  CHECK_EQ_INT(bad_src, 0);
  CHECK_EQ_INT(bad_cache, 0);
  CHECK_EQ_INT(bad_bal, 0);
  CHECK_EQ_INT(bad_loc, 0);
  /* the simulator counts the same routes */
  lade_sim_epoch_t *sim = calloc(E, sizeof *sim);
  CHECK_OK(lade_simulate(s, sizeof *s, NULL, sim, sizeof *sim, NULL));
  int bad_sim = 0;
  for (uint64_t e = 0; e < E; e++)
    if (sim[e].from_cache != cls[e][LADE_ROUTE_OWN] || sim[e].from_node != cls[e][LADE_ROUTE_NODE] ||
        sim[e].from_peer != cls[e][LADE_ROUTE_PEER] || sim[e].from_storage != cls[e][LADE_ROUTE_STORAGE])
      bad_sim++;
  CHECK_EQ_INT(bad_sim, 0);
  if (rpn == p) /* one node: no transfers at all */
    for (uint64_t e = 0; e < E; e++) CHECK_EQ_INT(sim[e].from_peer, 0);
  /* seeking gives the same steps as running to them */
  if (E * steps > 2) {
    const lade_plan_step_t *v;
    uint64_t h1 = 0, i = E * steps / 2;
    CHECK_OK(lade_plan_seek(pl, i / steps, i % steps));
    CHECK_OK(lade_plan_next(pl, &v));
    h1 = step_hash(v);
    CHECK_OK(lade_plan_seek(pl, 0, 0));
    for (uint64_t j = 0; j <= i; j++) CHECK_OK(lade_plan_next(pl, &v));
    CHECK(step_hash(v) == h1);
  }
  if (bad_set || bad_src || bad_cache || bad_bal || bad_loc || bad_sim)
    fprintf(stderr, "  in plan %s N=%llu p=%llu r=%u B=%llu C=%llu seed=%llu\n", lade_plan_kind_name(u->kind),
            (unsigned long long)N, (unsigned long long)p, rpn, (unsigned long long)B, (unsigned long long)C,
            (unsigned long long)s->seed);
  free(sim);
  lade_plan_destroy(pl);
  lade__regular_destroy(reg);
  free(holder);
  free(occ);
  free(cached);
  free(kept);
  free(a);
  free(b);
  free(adm);
  free(cls);
}

static void test_node_invariants(void) {
  const int kinds[] = {LADE_PLAN_DISTCACHE, LADE_PLAN_LOCALITY, LADE_PLAN_SOLAR};
  const uint32_t shapes[][2] = {{2, 2}, {4, 2}, {4, 4}, {6, 3}, {8, 2}, {8, 4}, {12, 4}, {16, 8}}; /* p, r */
  const uint32_t bs[] = {1, 3, 8};
  int runs = 0;
  for (size_t ki = 0; ki < 3; ki++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      for (size_t bi = 0; bi < 3; bi++)
        for (int ci = 0; ci < 4; ci++) {
          lade_plan_settings_t s;
          lade_plan_settings_default(&s, sizeof s);
          s.kind = kinds[ki];
          s.learners = shapes[si][0];
          s.ranks_per_node = shapes[si][1];
          s.batch_size = bs[bi];
          s.seed = (uint64_t)(ki * 1000 + si * 100 + bi * 10 + (size_t)ci);
          uint64_t G = (uint64_t)s.learners * s.batch_size;
          s.samples = G * (2 + s.seed % 5) + (ci % 2 ? s.seed % G : 0);
          if (s.samples > 1500) s.samples = 1500 - 1500 % G;
          s.epochs = 3 + (uint64_t)(ci % 2);
          uint64_t nodes = s.learners / s.ranks_per_node, share = (s.samples + nodes - 1) / nodes;
          s.cache = ci == 0 ? 0 : ci == 1 ? share / 2 : ci == 2 ? share : s.samples; /* per node */
          s.balance_peer = ci != 1;
          s.imbalance = ci == 3 ? s.batch_size : 0;
          s.coalesce = ci & 1;
          check_nodes(&s);
          runs++;
        }
  CHECK_EQ_INT(runs, 3 * 8 * 3 * 4);
}

/* A whole-dataset node cache: after epoch 0 locality and solar read nothing
 * from storage that fits; with one node nothing crosses nodes. */
static void test_node_targets(void) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = LADE_PLAN_LOCALITY;
  s.samples = 512;
  s.learners = 8;
  s.ranks_per_node = 4;
  s.batch_size = 16;
  s.epochs = 3;
  s.cache = 256; /* two nodes hold the dataset */
  lade_sim_epoch_t ep[3];
  CHECK_OK(lade_simulate(&s, sizeof s, NULL, ep, sizeof ep[0], NULL));
  CHECK_EQ_INT(ep[1].from_storage, 0);
  CHECK_EQ_INT(ep[2].from_storage, 0);
  CHECK(ep[1].from_node > 0);           /* a node's share is split among its ranks */
  CHECK(ep[1].from_peer < 512 / 8);     /* Algorithm 1 moves a few between the two nodes */
  s.ranks_per_node = 8;
  s.cache = 512;
  CHECK_OK(lade_simulate(&s, sizeof s, NULL, ep, sizeof ep[0], NULL));
  CHECK_EQ_INT(ep[1].from_storage, 0);
  CHECK_EQ_INT(ep[1].from_peer, 0);
  CHECK_EQ_INT(ep[1].transfers, 0);
  CHECK_EQ_INT(ep[1].from_cache + ep[1].from_node, 512);
  /* distcache with one node: every cached sample is an own hit or a handoff */
  s.kind = LADE_PLAN_DISTCACHE;
  CHECK_OK(lade_simulate(&s, sizeof s, NULL, ep, sizeof ep[0], NULL));
  CHECK_EQ_INT(ep[1].from_peer, 0);
  CHECK_EQ_INT(ep[1].from_storage, 0);
  CHECK(ep[1].from_node > ep[1].from_cache);
}

/* ranks_per_node 1 and 0 plan exactly as without the field; the kinds with
 * per-learner caches ignore it; it must divide the learners. */
static void test_node_settings(void) {
  for (int kind = 0; kind < LADE_PLAN_KIND_COUNT; kind++) {
    lade_plan_settings_t s;
    lade_plan_settings_default(&s, sizeof s);
    CHECK_EQ_INT(s.ranks_per_node, 1);
    s.kind = kind;
    s.samples = 203;
    s.learners = 4;
    s.batch_size = 5;
    s.epochs = 3;
    s.cache = 30;
    s.seed = 3;
    lade_plan_settings_t z = s, two = s;
    z.ranks_per_node = 0;
    two.ranks_per_node = 2;
    lade_plan_t *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(lade_plan_create(&a, &s, sizeof s));
    CHECK_OK(lade_plan_create(&b, &z, sizeof z));
    CHECK_OK(lade_plan_create(&c, &two, sizeof two));
    if (!a || !b || !c) break;
    int routed = kind == LADE_PLAN_DISTCACHE || kind == LADE_PLAN_LOCALITY || kind == LADE_PLAN_SOLAR;
    CHECK_EQ_INT(lade_plan_settings(b)->ranks_per_node, 1);
    CHECK_EQ_INT(lade_plan_settings(c)->ranks_per_node, routed ? 2 : 1);
    const lade_plan_step_t *va, *vb, *vc;
    int same_b = 1, same_c = 1;
    while (lade_plan_next(a, &va) == 0) {
      uint64_t ha = step_hash(va);
      CHECK_OK(lade_plan_next(b, &vb));
      CHECK_OK(lade_plan_next(c, &vc));
      if (step_hash(vb) != ha) same_b = 0;
      if (step_hash(vc) != ha) same_c = 0;
    }
    CHECK(same_b);
    CHECK(same_c == !routed); /* two nodes of two change the node-aware plans */
    lade_plan_destroy(a);
    lade_plan_destroy(b);
    lade_plan_destroy(c);
  }
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = LADE_PLAN_LOCALITY;
  s.samples = 100;
  s.learners = 6;
  s.batch_size = 2;
  s.ranks_per_node = 4;
  lade_plan_t *pl = NULL;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "ranks_per_node (4) must divide the learners (6)") != NULL);
  s.ranks_per_node = 3;
  s.cache = 101;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "samples per node") != NULL);
}

/* A plan file keeps ranks_per_node; its steps equal the plan's. */
static void test_node_plan_file(void) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = LADE_PLAN_SOLAR;
  s.samples = 300;
  s.learners = 6;
  s.ranks_per_node = 3;
  s.batch_size = 4;
  s.epochs = 3;
  s.cache = 60;
  s.coalesce = 0;
  char path[512];
  snprintf(path, sizeof path, "%s/nodes.plan", LADE_TEST_TMP);
  if (system("mkdir -p '" LADE_TEST_TMP "'") != 0) CHECK(0);
  CHECK_OK(lade_plan_write(&s, sizeof s, path));
  lade_plan_file_t *f = NULL;
  CHECK_OK(lade_plan_file_open(&f, path));
  if (!f) return;
  CHECK_EQ_INT(lade_plan_file_settings(f)->ranks_per_node, 3);
  lade_plan_t *pl = NULL;
  CHECK_OK(lade_plan_create(&pl, &s, sizeof s));
  const lade_plan_step_t *v, *w;
  for (uint64_t i = 0; pl && i < lade_plan_file_steps(f); i++) {
    CHECK_OK(lade_plan_next(pl, &v));
    CHECK_OK(lade_plan_file_step(f, i, &w));
    CHECK(step_hash(v) == step_hash(w));
    CHECK_EQ_INT(w->ranks_per_node, 3);
  }
  lade_plan_destroy(pl);
  lade_plan_file_close(f);
  remove(path);
}

/* The node model: r = 1 is paper 000's eq. (7) with Rc = p * R_inter; one
 * node has no inter-node term; the intra-node term is a*D*(r-1)/p over n*R_intra. */
static void test_node_model(void) {
  lade_model_params_t m = {1281167, 64, 400, 20000, 0, 100000, 600, 0.8, -1};
  lade_model_nodes_t nd;
  lade_model_nodes_default(&nd, sizeof nd);
  CHECK(nd.r == 8 && nd.R_intra == 200000 && nd.R_inter == 12500);
  nd.r = 1;
  m.Rc = m.p * nd.R_inter;
  lade_model_result_t base;
  lade_model_eval(&m, &base);
  lade_model_nodes_result_t x;
  CHECK_OK(lade_model_nodes_eval(&m, &nd, sizeof nd, &x, sizeof x));
  CHECK(fabs(x.io_distcache - base.io_distcache) < 1e-9 * base.io_distcache);
  CHECK(x.intra_distcache == 0);
  CHECK(x.nodes == 64);
  nd.r = 64;
  CHECK_OK(lade_model_nodes_eval(&m, &nd, sizeof nd, &x, sizeof x));
  CHECK(x.inter_distcache == 0);
  double want = 0.8 * 1281167.0 * 63 / 64 / (1 * nd.R_intra);
  CHECK(fabs(x.intra_distcache - want) < 1e-9 * want);
  nd.r = 8;
  nd.beta = 0.05;
  nd.gamma = 0.5;
  CHECK_OK(lade_model_nodes_eval(&m, &nd, sizeof nd, &x, sizeof x));
  double loc = 0.2 * 1281167.0 / 20000 + 0.5 * 1281167.0 / (8 * nd.R_intra) + 0.05 * 1281167.0 / (8 * nd.R_inter);
  CHECK(fabs(x.io_locality - loc) < 1e-9 * loc);
  CHECK(x.epoch_locality >= base.train);
  nd.r = 3;
  CHECK(lade_model_nodes_eval(&m, &nd, sizeof nd, &x, sizeof x) == LADE_EINVAL);
  nd.r = 8;
  CHECK(lade_model_nodes_eval(&m, &nd, sizeof nd, &x, 4) == LADE_EINVAL);
  /* two tiers: storage for the rest, memory at R_intra, disk reads and writes at R_disk per node */
  CHECK(nd.R_disk == 20000 && nd.h_mem < 0 && nd.h_disk < 0 && nd.w_disk < 0);
  nd.h_mem = 0.1;
  nd.h_disk = 0.5;
  nd.w_disk = 0.3;
  CHECK_OK(lade_model_nodes_eval(&m, &nd, sizeof nd, &x, sizeof x));
  double tiers = 0.4 * 1281167.0 / 20000 + 0.1 * 1281167.0 / (8 * nd.R_intra) + 0.8 * 1281167.0 / (8 * nd.R_disk);
  CHECK(fabs(x.io_tiers - tiers) < 1e-9 * tiers);
  CHECK(x.epoch_tiers >= x.io_tiers);
  nd.R_disk = 0;
  CHECK(lade_model_nodes_eval(&m, &nd, sizeof nd, &x, sizeof x) == LADE_EINVAL);
  nd.R_disk = 20000;
  /* an older caller's shorter struct: the rest are defaults */
  CHECK_OK(lade_model_nodes_eval(&m, &nd, sizeof(double), &x, sizeof x));
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_node_settings);
  RUN(test_node_targets);
  RUN(test_node_plan_file);
  RUN(test_node_model);
  RUN(test_node_invariants);
  return lade_test_finish();
}
