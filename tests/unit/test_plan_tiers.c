/* test_plan_tiers.c - two tiers under a plan (cache_disk, docs/plan.md "Two
 * tiers"): solar with `cache` samples in memory and `cache_disk` on disk per
 * holder (learner or node). Each step is replayed into an independent model
 * of every holder's two tiers from the plan's own admits (with their tier),
 * evicts and moves: every cached read names the tier the sample is in at the
 * start of the step, storage reads name none; admits are new, evicts and
 * moves name held samples (a move to the other tier); each tier stays within
 * its capacity; the hierarchy holds exactly what one tier of cache +
 * cache_disk would (the same samples and routes); a sample trained in a step
 * ends on disk only if its next use is no nearer than every next use in its
 * holder's memory (the placement rule of src/planner/tiers.c); and
 * lade_simulate's per-tier counts equal the replay's. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "lade/plan.h"
#include "planner/regular.h"

static uint64_t route_hash(const lade_plan_step_t *v) {
  uint64_t h = 1469598103934665603ull;
  h = lade__hash64(v->samples, v->total * 8, h);
  h = lade__hash64(v->from, v->total * 4, h);
  h = lade__hash64(v->offset, (v->learners + 1) * 8, h);
  h = lade__hash64(v->admit, v->admit_offset[v->learners] * 8, h);
  h = lade__hash64(v->evict, v->evict_offset[v->learners] * 8, h);
  return h;
}

typedef struct counts {
  uint64_t disk_reads, mem_reads, admits_mem, admits_disk, up, down;
} counts_t;

static void check_tiers(const lade_plan_settings_t *s) {
  lade_plan_settings_t one = *s; /* the same hierarchy as one tier */
  one.cache = s->cache + s->cache_disk;
  one.cache_disk = 0;
  lade_plan_t *pl = NULL, *p1 = NULL;
  CHECK_OK(lade_plan_create(&pl, s, sizeof *s));
  CHECK_OK(lade_plan_create(&p1, &one, sizeof one));
  if (!pl || !p1) {
    lade_plan_destroy(pl);
    lade_plan_destroy(p1);
    return;
  }
  uint64_t N = s->samples, p = s->learners, E = s->epochs, steps = lade_plan_steps_per_epoch(pl);
  uint32_t rpn = lade_plan_settings(pl)->ranks_per_node, n = (uint32_t)(p / rpn);
  int32_t *holder = malloc(N * sizeof *holder);
  uint8_t *tier = calloc(N, 1);
  memset(holder, 0xff, N * sizeof *holder);
  uint64_t *mem = calloc(n, sizeof *mem), *disk = calloc(n, sizeof *disk);
  counts_t *want = calloc(E, sizeof *want);
  int bad_read = 0, bad_event = 0, bad_cap = 0, bad_same = 0, bad_place = 0;
  /* next use of a sample trained in epoch e: its position in epoch e+1's shuffle */
  lade__plan_params_t rp = {N, s->batch_size, (uint32_t)p, E, s->seed, true, s->drop_last != 0};
  const uint64_t *order = lade_plan_epoch_order(pl);
  uint64_t *perm = malloc(N * sizeof *perm), *inv = malloc(N * sizeof *inv), *mmax = calloc(n, sizeof *mmax);
  for (uint64_t e = 0; e < E; e++) {
    if (e + 1 < E) {
      lade__shuffle_epoch(&rp, order[e + 1], perm);
      for (uint64_t i = 0; i < N; i++) inv[perm[i]] = i;
    }
    for (uint64_t t = 0; t < steps; t++) {
      const lade_plan_step_t *v, *w;
      CHECK_OK(lade_plan_next(pl, &v));
      CHECK_OK(lade_plan_next(p1, &w));
      if (!v || !w) break;
      if (route_hash(v) != route_hash(w)) bad_same++;
      if (!v->tier || !v->admit_tier || !v->move || !v->move_offset || !v->move_to || w->tier) {
        bad_event++;
        break;
      }
      for (uint64_t r = 0; r < p; r++)
        for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
          uint64_t x = v->samples[i];
          if (v->from[i] == LADE_FROM_STORAGE) {
            if (v->tier[i] != LADE_TIER_NONE) bad_read++;
            continue;
          }
          if (holder[x] < 0 || v->tier[i] != tier[x]) bad_read++;
          if (v->tier[i] == LADE_TIER_DISK) want[e].disk_reads++;
          else want[e].mem_reads++;
        }
      /* evicts, admits (to their tier), then moves */
      for (uint64_t r = 0; r < p; r++)
        for (uint64_t i = v->evict_offset[r]; i < v->evict_offset[r + 1]; i++) {
          uint64_t x = v->evict[i];
          if (holder[x] != (int32_t)r) bad_event++;
          (tier[x] == LADE_TIER_MEM ? mem : disk)[r / rpn]--;
          holder[x] = -1;
          tier[x] = 0;
        }
      for (uint64_t r = 0; r < p; r++)
        for (uint64_t i = v->admit_offset[r]; i < v->admit_offset[r + 1]; i++) {
          uint64_t x = v->admit[i];
          uint8_t to = v->admit_tier[i];
          if (holder[x] >= 0 || (to != LADE_TIER_MEM && to != LADE_TIER_DISK)) bad_event++;
          holder[x] = (int32_t)r;
          tier[x] = to;
          (to == LADE_TIER_MEM ? mem : disk)[r / rpn]++;
          if (to == LADE_TIER_MEM) want[e].admits_mem++;
          else want[e].admits_disk++;
        }
      for (uint64_t r = 0; r < p; r++)
        for (uint64_t i = v->move_offset[r]; i < v->move_offset[r + 1]; i++) {
          uint64_t x = v->move[i];
          uint8_t to = v->move_to[i];
          if (holder[x] != (int32_t)r || tier[x] == to || (to != LADE_TIER_MEM && to != LADE_TIER_DISK)) {
            bad_event++;
            continue;
          }
          (tier[x] == LADE_TIER_MEM ? mem : disk)[r / rpn]--;
          (to == LADE_TIER_MEM ? mem : disk)[r / rpn]++;
          tier[x] = to;
          if (to == LADE_TIER_MEM) want[e].up++;
          else want[e].down++;
        }
      for (uint32_t m = 0; m < n; m++)
        if (mem[m] > s->cache || disk[m] > s->cache_disk) bad_cap++;
      if (e + 1 < E) { /* placement: trained samples left on disk are no nearer than memory's farthest */
        memset(mmax, 0, n * sizeof *mmax);
        for (uint64_t r = 0; r < p; r++)
          for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
            uint64_t x = v->samples[i];
            if (holder[x] >= 0 && tier[x] == LADE_TIER_MEM) /* a trained sample's key is its next use */
              mmax[(uint32_t)holder[x] / rpn] = LADE__MAX(mmax[(uint32_t)holder[x] / rpn], inv[x] + 1);
          }
        for (uint64_t r = 0; r < p; r++)
          for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
            uint64_t x = v->samples[i];
            if (holder[x] >= 0 && tier[x] == LADE_TIER_DISK && mem[(uint32_t)holder[x] / rpn] < s->cache) bad_place++;
            if (holder[x] >= 0 && tier[x] == LADE_TIER_DISK && inv[x] + 1 < mmax[(uint32_t)holder[x] / rpn])
              bad_place++;
          }
      }
    }
  }
  CHECK_EQ_INT(bad_read, 0);
  CHECK_EQ_INT(bad_event, 0);
  CHECK_EQ_INT(bad_cap, 0);
  CHECK_EQ_INT(bad_same, 0);
  CHECK_EQ_INT(bad_place, 0);
  lade_sim_epoch_t *sim = calloc(E, sizeof *sim), *sim1 = calloc(E, sizeof *sim1);
  CHECK_OK(lade_simulate(s, sizeof *s, NULL, sim, sizeof *sim, NULL));
  CHECK_OK(lade_simulate(&one, sizeof one, NULL, sim1, sizeof *sim1, NULL));
  int bad_sim = 0;
  for (uint64_t e = 0; e < E; e++) {
    uint64_t cached = sim[e].from_cache + sim[e].from_node + sim[e].from_peer;
    if (sim[e].from_disk != want[e].disk_reads || cached - sim[e].from_disk != want[e].mem_reads ||
        sim[e].admits_mem != want[e].admits_mem || sim[e].admits_disk != want[e].admits_disk ||
        sim[e].moves_up != want[e].up || sim[e].moves_down != want[e].down)
      bad_sim++;
    if (sim[e].from_storage != sim1[e].from_storage || sim1[e].from_disk || sim1[e].admits_mem) bad_sim++;
  }
  CHECK_EQ_INT(bad_sim, 0);
  if (bad_read || bad_event || bad_cap || bad_same || bad_sim || bad_place)
    fprintf(stderr, "  in solar N=%llu p=%llu r=%u B=%u mem=%llu disk=%llu seed=%llu\n", (unsigned long long)N,
            (unsigned long long)p, rpn, s->batch_size, (unsigned long long)s->cache,
            (unsigned long long)s->cache_disk, (unsigned long long)s->seed);
  free(perm);
  free(inv);
  free(mmax);
  free(sim);
  free(sim1);
  free(want);
  free(holder);
  free(tier);
  free(mem);
  free(disk);
  lade_plan_destroy(pl);
  lade_plan_destroy(p1);
}

static void test_tier_invariants(void) {
  const uint32_t shapes[][2] = {{1, 1}, {2, 1}, {4, 1}, {4, 2}, {6, 3}, {8, 4}}; /* p, r */
  const uint32_t bs[] = {1, 4, 9};
  int runs = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (size_t bi = 0; bi < 3; bi++)
      for (int ci = 0; ci < 4; ci++) {
        lade_plan_settings_t s;
        lade_plan_settings_default(&s, sizeof s);
        s.kind = LADE_PLAN_SOLAR;
        s.learners = shapes[si][0];
        s.ranks_per_node = shapes[si][1];
        s.batch_size = bs[bi];
        s.seed = si * 100 + bi * 10 + (size_t)ci;
        uint64_t G = (uint64_t)s.learners * s.batch_size, nodes = s.learners / s.ranks_per_node;
        s.samples = G * (3 + s.seed % 4) + (ci % 2 ? s.seed % G : 0);
        s.epochs = 3 + (uint64_t)(ci % 2);
        uint64_t share = s.samples / nodes;
        s.cache = ci == 0 ? 0 : ci == 1 ? share / 8 : share / 4;       /* memory per holder */
        s.cache_disk = ci == 3 ? share - s.cache : share / 3 + 1;       /* disk per holder */
        s.imbalance = ci == 2 ? s.batch_size : 0;
        s.coalesce = ci & 1;
        s.reorder = ci != 1;
        check_tiers(&s);
        runs++;
      }
  CHECK_EQ_INT(runs, 6 * 3 * 4);
}

/* Both tiers serve reads once warm, memory holds the nearest next uses
 * (more memory reads than its share of the hierarchy's capacity would give
 * by chance is not promised, at least its capacity per epoch is), and
 * settings that cannot be planned are refused, naming why. */
static void test_tier_targets(void) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = LADE_PLAN_SOLAR;
  s.samples = 2000;
  s.learners = 4;
  s.batch_size = 16;
  s.epochs = 4;
  s.cache = 100;
  s.cache_disk = 300;
  lade_sim_epoch_t ep[4], one[4];
  CHECK_OK(lade_simulate(&s, sizeof s, NULL, ep, sizeof ep[0], NULL));
  lade_plan_settings_t m = s;
  m.cache_disk = 0;
  CHECK_OK(lade_simulate(&m, sizeof m, NULL, one, sizeof one[0], NULL));
  for (int e = 1; e < 4; e++) {
    uint64_t cached = ep[e].from_cache + ep[e].from_peer + ep[e].from_node;
    CHECK(ep[e].from_disk > 0);
    CHECK(cached - ep[e].from_disk >= one[e].from_cache * 9 / 10); /* memory serves about what it served alone */
    CHECK(ep[e].from_storage < one[e].from_storage);              /* the disk tier saves storage reads */
  }
  lade_plan_t *pl = NULL;
  s.kind = LADE_PLAN_LOCALITY;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "solar only") != NULL);
  s.kind = LADE_PLAN_SOLAR;
  s.cache_disk = 1901;
  CHECK(lade_plan_create(&pl, &s, sizeof s) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "together are larger than the dataset") != NULL);
  s.cache_disk = 300;
  char path[512];
  snprintf(path, sizeof path, "%s/tiers.plan", LADE_TEST_TMP);
  CHECK(lade_plan_write(&s, sizeof s, path) == LADE_EUNSUPPORTED);
  CHECK(strstr(lade_last_error(), "two tiers") != NULL);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_tier_targets);
  RUN(test_tier_invariants);
  return lade_test_finish();
}
