/* test_plan_exec.c - the loader executing every plan kind (setting `plan`,
 * docs/plan.md) on a local dataset, checked against the planner and
 * the simulator run with the same settings: each rank trains on exactly the
 * samples the plan gives it, in its order; every sample once per epoch over
 * the ranks; the bytes are the source's; the per-rank cache/storage/peer
 * counts equal the plan's and their sums the simulator's; runs repeat bit
 * for bit; a resumed run delivers the rest bit for bit, reading from
 * storage (counted) what its empty cache does not hold yet. The ranks run
 * one after another in this process: peers are not reachable here (no
 * transport yet), so a sample routed to a peer is read from storage and
 * counted as such. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lade/lade.h"
#include "lade/plan.h"

#define N 96
#define SZ 256
#define B 4
#define EPOCHS 4
#define MAXW 4
#define CHARGE (SZ + 64) /* the memory tier's charge of one entry */
#define DISK_CHARGE 4096 /* the disk tier's: a 56-byte header and the payload in whole 4 KiB blocks */

static int g_disk; /* 1: the plan drives a disk cache (cache_dir) instead of the memory tier */
static uint64_t g_two; /* > 0: solar's two tiers: the memory cache and g_two samples on disk under it */
static const lade_position_t *g_pos; /* open_loader's loaders resume it (lade_config_set_position) */

static uint8_t byte_of(uint64_t i, int k) { return (uint8_t)(i * 31 + (uint64_t)k * 7 + 1); }

static const char *make_dataset(void) {
  static char dir[4096];
  if (dir[0]) return dir;
  snprintf(dir, sizeof dir, "%s", lade_test_tmpdir("planexec"));
  uint8_t buf[SZ];
  for (int c = 0; c < 3; c++) {
    lade_test_sh("mkdir -p %s/data/c%d", dir, c);
    for (int j = 0; j < N / 3; j++) {
      uint64_t idx = (uint64_t)c * (N / 3) + (uint64_t)j;
      for (int k = 0; k < SZ; k++) buf[k] = byte_of(idx, k);
      char path[4300];
      snprintf(path, sizeof path, "%s/data/c%d/f%05d.bin", dir, c, j);
      FILE *f = fopen(path, "wb");
      fwrite(buf, 1, SZ, f);
      fclose(f);
    }
  }
  return dir;
}

/* What one rank's loader delivered. */
typedef struct rank_run {
  int rc;
  uint64_t steps;                /* per epoch */
  uint64_t nbatches;
  int64_t idx[EPOCHS * N];       /* delivered indices in order */
  uint32_t n[EPOCHS * N];        /* batch sizes */
  uint64_t sum;                  /* checksum of every delivered byte, order-sensitive */
  int content_ok;
  lade_stats_t st;
  lade_epoch_stats_t ep[EPOCHS];
} rank_run_t;

static lade_loader_t *open_loader(const char *kind, uint32_t rank, uint32_t world, uint64_t cache_bytes,
                                  const char *extra) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char src[4200], v[64];
  snprintf(src, sizeof src, "%s/data", make_dataset());
  lade_config_set(c, "source", src);
  lade_config_set(c, "source_type", "dir");
  lade_config_set(c, "transform", "raw");
  lade_config_set(c, "raw_size", "256");
  lade_config_set(c, "batch_size", "4");
  lade_config_set(c, "threads", "3");
  lade_config_set(c, "seed", "7");
  lade_config_set(c, "drop_last", "true");
  snprintf(v, sizeof v, "%d", EPOCHS);
  lade_config_set(c, "epochs", v);
  lade_config_set(c, "plan", kind);
  snprintf(v, sizeof v, "%u", rank);
  lade_config_set(c, "rank", v);
  snprintf(v, sizeof v, "%u", world);
  lade_config_set(c, "world_size", v);
  if (g_disk) { /* the same number of samples as cache_bytes in memory */
    snprintf(v, sizeof v, "%llu", (unsigned long long)(cache_bytes / CHARGE * DISK_CHARGE));
    lade_config_set(c, "cache_disk_bytes", v);
    snprintf(src, sizeof src, "%s/cache", make_dataset());
    lade_config_set(c, "cache_dir", src);
  } else {
    snprintf(v, sizeof v, "%llu", (unsigned long long)cache_bytes);
    lade_config_set(c, "cache_mem_bytes", v);
  }
  if (g_two) {
    snprintf(v, sizeof v, "%llu", (unsigned long long)(g_two * DISK_CHARGE));
    lade_config_set(c, "cache_disk_bytes", v);
    snprintf(src, sizeof src, "%s/cache2", make_dataset());
    lade_config_set(c, "cache_dir", src);
  }
  if (extra && lade_config_parse(c, extra)) fprintf(stderr, "bad setting %s: %s\n", extra, lade_last_error());
  if (g_pos && lade_config_set_position(c, g_pos, sizeof *g_pos)) fprintf(stderr, "position: %s\n", lade_last_error());
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, c);
  lade_config_destroy(c);
  return rc ? NULL : L;
}

static const char *g_extra;   /* one more setting for run_rank's loaders */
static uint32_t g_imbalance;  /* solar's plan_imbalance in make_plan */

/* Runs rank's loader from (epoch, step) to the end. */
static void run_rank(const char *kind, uint32_t rank, uint32_t world, uint64_t cache_bytes, uint64_t from_epoch,
                     uint64_t from_step, rank_run_t *r) {
  memset(r, 0, sizeof *r);
  r->content_ok = 1;
  lade_loader_t *L = open_loader(kind, rank, world, cache_bytes, g_extra);
  if (!L) {
    r->rc = -1;
    fprintf(stderr, "  create(%s, rank %u/%u): %s\n", kind, rank, world, lade_last_error());
    return;
  }
  uint64_t samples = 0, epochs = 0;
  lade_loader_info(L, &samples, &r->steps, &epochs);
  if (from_epoch || from_step) r->rc = lade_loader_seek(L, from_epoch, from_step);
  uint64_t k = 0, h = 1469598103934665603ull;
  lade_batch_t *b = NULL;
  while (!r->rc && (r->rc = lade_loader_next(L, &b)) == 0 && b) {
    const uint8_t *d = b->data;
    r->n[r->nbatches++] = (uint32_t)b->shape[0];
    for (uint32_t i = 0; i < (uint32_t)b->shape[0]; i++) {
      int64_t idx = b->indices[i];
      r->idx[k++] = idx;
      for (int j = 0; j < SZ; j++) {
        if (d[(size_t)i * SZ + j] != byte_of((uint64_t)idx, j)) r->content_ok = 0;
        h = (h ^ d[(size_t)i * SZ + j]) * 1099511628211ull;
      }
    }
    lade_batch_release(b);
  }
  if (r->rc) fprintf(stderr, "  next(%s, rank %u/%u): %s\n", kind, rank, world, lade_last_error());
  r->sum = h;
  lade_loader_stats(L, &r->st, sizeof(lade_stats_t));
  for (uint64_t e = from_epoch; e < EPOCHS; e++) lade_loader_epoch_stats(L, e, &r->ep[e], sizeof(lade_epoch_stats_t));
  lade_loader_destroy(L);
}

/* The planner's settings the loaders run with. */
static lade_plan_settings_t settings_of(const char *kind, uint32_t world, uint64_t cache_bytes) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = lade_plan_kind_parse(kind);
  s.samples = N;
  s.learners = world;
  s.batch_size = B;
  s.epochs = EPOCHS;
  s.seed = 7;
  s.cache = cache_bytes / CHARGE;
  s.cache_disk = g_two;
  s.coalesce = 0;
  s.imbalance = g_imbalance;
  return s;
}

/* The plan of the same settings, through the public planner. */
static lade_plan_t *make_plan(const char *kind, uint32_t world, uint64_t cache_bytes) {
  lade_plan_settings_t s = settings_of(kind, world, cache_bytes);
  lade_plan_t *pl = NULL;
  if (lade_plan_create(&pl, &s, sizeof s)) fprintf(stderr, "  plan %s: %s\n", kind, lade_last_error());
  return pl;
}

static rank_run_t g_runs[MAXW];

/* Every rank of `kind` at world size W: the plan's samples, routes and counts. */
static void check_kind(const char *kind, uint32_t W, uint64_t cache_bytes) {
  fprintf(stderr, "  %s, %u rank(s), cache %llu bytes\n", kind, W, (unsigned long long)cache_bytes);
  for (uint32_t r = 0; r < W; r++) {
    run_rank(kind, r, W, cache_bytes, 0, 0, &g_runs[r]);
    CHECK_EQ_INT(g_runs[r].rc, 0);
    CHECK(g_runs[r].content_ok);
  }
  lade_plan_t *pl = make_plan(kind, W, cache_bytes);
  CHECK(pl != NULL);
  if (!pl) return;
  uint64_t steps = lade_plan_steps_per_epoch(pl);
  CHECK_EQ_INT(g_runs[0].steps, steps);
  uint64_t pos[MAXW] = {0};
  uint64_t cache[MAXW][EPOCHS] = {{0}}, storage[MAXW][EPOCHS] = {{0}}, peer[MAXW][EPOCHS] = {{0}};
  int order_ok = 1, once_ok = 1;
  for (uint64_t e = 0; e < EPOCHS; e++) {
    uint8_t seen[N] = {0};
    for (uint64_t st = 0; st < steps; st++) {
      const lade_plan_step_t *v = NULL;
      CHECK_OK(lade_plan_next(pl, &v));
      if (!v) return;
      for (uint32_t r = 0; r < W; r++)
        for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
          if (g_runs[r].idx[pos[r]++] != (int64_t)v->samples[i]) order_ok = 0;
          if (seen[v->samples[i]]++) once_ok = 0;
          if (v->from[i] == LADE_FROM_CACHE) cache[r][e]++;
          else if (v->from[i] == LADE_FROM_STORAGE) storage[r][e]++;
          else peer[r][e]++;
        }
    }
  }
  lade_plan_destroy(pl);
  CHECK(order_ok);
  CHECK(once_ok);
  for (uint32_t r = 0; r < W; r++) CHECK_EQ_INT(pos[r], g_runs[r].st.samples);
  /* per rank and epoch: the plan's routes were followed exactly */
  for (uint32_t r = 0; r < W; r++)
    for (uint64_t e = 0; e < EPOCHS; e++) {
      const lade_epoch_stats_t *es = &g_runs[r].ep[e];
      CHECK_EQ_INT(es->samples_by_source[g_disk ? 2 : 1], cache[r][e]);
      CHECK_EQ_INT(es->samples_by_source[0], storage[r][e] + peer[r][e]);
      CHECK_EQ_INT(es->plan_peer_storage, peer[r][e]);
      CHECK_EQ_INT(es->plan_fallbacks, 0);
    }
  /* and their sums are the simulator's */
  lade_plan_settings_t s = settings_of(kind, W, cache_bytes);
  lade_sim_costs_t costs = {0};
  lade_sim_epoch_t sim[EPOCHS];
  CHECK_OK(lade_simulate(&s, sizeof s, &costs, sim, sizeof sim[0], NULL));
  for (uint64_t e = 0; e < EPOCHS; e++) {
    uint64_t c = 0, sto = 0, p = 0;
    for (uint32_t r = 0; r < W; r++) {
      c += g_runs[r].ep[e].samples_by_source[g_disk ? 2 : 1];
      p += g_runs[r].ep[e].plan_peer_storage;
      sto += g_runs[r].ep[e].samples_by_source[0] - g_runs[r].ep[e].plan_peer_storage;
    }
    CHECK_EQ_INT(c, sim[e].from_cache);
    CHECK_EQ_INT(p, sim[e].from_peer);
    CHECK_EQ_INT(sto, sim[e].from_storage);
  }
}

static const char *const kinds[] = {"regular+lru", "regular+belady", "distcache", "locality", "solar"};

/* Aggregate cache holding the dataset: from the second epoch the plans
 * that can read nothing from storage do not. */
static void test_every_plan_one_rank(void) {
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) check_kind(kinds[k], 1, (uint64_t)N * CHARGE);
  CHECK_EQ_INT(g_runs[0].ep[1].samples_by_source[0], 0); /* solar, last checked: all from cache */
}

static void test_every_plan_four_ranks(void) {
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) check_kind(kinds[k], 4, (uint64_t)(N / 4) * CHARGE);
  /* locality with the dataset in the aggregate cache: no storage reads after epoch 0 */
  check_kind("locality", 4, (uint64_t)(N / 4) * CHARGE);
  for (uint32_t r = 0; r < 4; r++)
    CHECK_EQ_INT(g_runs[r].ep[2].samples_by_source[0] - g_runs[r].ep[2].plan_peer_storage, 0);
}

static void test_half_cache(void) {
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) check_kind(kinds[k], 4, (uint64_t)(N / 8) * CHARGE);
}

/* solar with plan_imbalance: local batches of B-1..B+1, routes and counts
 * still the plan's, and fewer storage reads than with equal batches. */
static void test_solar_imbalance(void) {
  uint64_t cache = (uint64_t)(N / 4) * CHARGE, equal = 0, loose = 0;
  check_kind("solar", 4, cache);
  for (uint32_t r = 0; r < 4; r++)
    for (int e = 1; e < EPOCHS; e++) equal += g_runs[r].ep[e].samples_by_source[0];
  g_extra = "plan_imbalance=2";
  g_imbalance = 2;
  check_kind("solar", 4, cache);
  int sizes_vary = 0, sizes_ok = 1;
  for (uint32_t r = 0; r < 4; r++) {
    for (int e = 1; e < EPOCHS; e++) loose += g_runs[r].ep[e].samples_by_source[0];
    for (uint64_t b = 0; b < g_runs[r].nbatches; b++) {
      if (g_runs[r].n[b] != B) sizes_vary = 1;
      if (g_runs[r].n[b] < B - 1 || g_runs[r].n[b] > B + 1) sizes_ok = 0;
    }
  }
  g_extra = NULL;
  g_imbalance = 0;
  CHECK(sizes_vary && sizes_ok);
  fprintf(stderr, "  storage reads after epoch 0: %llu with equal batches, %llu with imbalance 2\n",
          (unsigned long long)equal, (unsigned long long)loose);
  CHECK(loose < equal);
}

/* The plans driving a disk cache (cache_dir + cache_disk_bytes): the same
 * routes and counts, the entries on disk. Entries deleted under a running
 * loader: read from storage, counted, never a wrong sample. */
static void test_disk_cache(void) {
  g_disk = 1;
  /* each from an empty disk: at world size 1 what an earlier run left is the plan's start (test_warm_restart) */
  lade_test_sh("rm -rf %s/cache", make_dataset());
  check_kind("locality", 4, (uint64_t)(N / 4) * CHARGE);
  lade_test_sh("rm -rf %s/cache", make_dataset());
  check_kind("regular+belady", 1, (uint64_t)(N / 2) * CHARGE);
  lade_test_sh("rm -rf %s/cache", make_dataset());
  check_kind("solar", 4, (uint64_t)(N / 8) * CHARGE);
  /* a loader whose entries vanish after epoch 1 starts */
  lade_loader_t *L = open_loader("locality", 0, 1, (uint64_t)N * CHARGE, NULL);
  CHECK(L != NULL);
  g_disk = 0;
  if (!L) return;
  lade_batch_t *b = NULL;
  int ok = 1, deleted = 0, rc;
  while ((rc = lade_loader_next(L, &b)) == 0 && b) {
    if (b->epoch == 1 && !deleted) {
      lade_test_sh("find %s/cache -type f ! -name LOCK ! -name NAMESPACE -delete", make_dataset());
      deleted = 1;
    }
    for (int64_t i = 0; i < b->shape[0]; i++)
      for (int k = 0; k < SZ; k++)
        if (((const uint8_t *)b->data)[(size_t)i * SZ + k] != byte_of((uint64_t)b->indices[i], k)) ok = 0;
    lade_batch_release(b);
  }
  CHECK_EQ_INT(rc, 0);
  CHECK(ok && deleted);
  lade_stats_t st;
  lade_loader_stats(L, &st, sizeof(lade_stats_t));
  fprintf(stderr, "  entries deleted under the loader: %llu fallbacks to storage\n",
          (unsigned long long)st.plan_fallbacks);
  CHECK(st.plan_fallbacks > 0);
  CHECK_EQ_INT(st.samples, (uint64_t)EPOCHS * N);
  lade_loader_destroy(L);
}

/* Two runs: identical bytes. Resume from the middle of epoch 1: the rest bit
 * for bit, the empty cache's misses counted as fallbacks. */
static void test_repeat_and_resume(void) {
  static rank_run_t a, b, c;
  run_rank("locality", 1, 4, (uint64_t)(N / 4) * CHARGE, 0, 0, &a);
  run_rank("locality", 1, 4, (uint64_t)(N / 4) * CHARGE, 0, 0, &b);
  CHECK_EQ_INT(a.rc, 0);
  CHECK(a.sum == b.sum && a.st.samples == b.st.samples);
  uint64_t steps = a.steps, skip = (steps + steps / 2) * B;
  run_rank("locality", 1, 4, (uint64_t)(N / 4) * CHARGE, 1, steps / 2, &c);
  CHECK_EQ_INT(c.rc, 0);
  CHECK(c.content_ok);
  CHECK_EQ_INT(c.st.samples, a.st.samples - skip);
  CHECK(memcmp(c.idx, a.idx + skip, c.st.samples * sizeof *c.idx) == 0);
  CHECK(c.st.plan_fallbacks > 0);                 /* the plan believed them cached */
  /* about one per sample the rank would hold; a sample read twice inside the
   * engine's window (end of one epoch, start of the next) before its repair
   * put can miss twice */
  CHECK(c.st.plan_fallbacks <= (uint64_t)N / 4 + 3 * B);
}

/* drop_last=false under a plan: whole global batches follow the plan, the
 * short last step is the regular slice; every sample once per epoch. */
static void test_short_last_step(void) {
  lade_loader_t *L = NULL;
  uint32_t W = 4;
  int seen[EPOCHS][N];
  memset(seen, 0, sizeof seen);
  int ok = 1;
  for (uint32_t r = 0; r < W; r++) {
    lade_config_t *c = NULL;
    lade_config_create(&c);
    char src[4200], v[32];
    snprintf(src, sizeof src, "%s/data", make_dataset());
    lade_config_set(c, "source", src);
    lade_config_set(c, "transform", "raw");
    lade_config_set(c, "raw_size", "256");
    lade_config_set(c, "batch_size", "5"); /* 96 = 4 * (4*5) + 16: a short last step of 4 per rank */
    lade_config_set(c, "epochs", "4");
    lade_config_set(c, "plan", "locality");
    lade_config_set(c, "world_size", "4");
    snprintf(v, sizeof v, "%u", r);
    lade_config_set(c, "rank", v);
    lade_config_set(c, "cache_mem_bytes", "10000");
    CHECK_OK(lade_loader_create(&L, c));
    lade_config_destroy(c);
    if (!L) return;
    lade_batch_t *b = NULL;
    uint64_t k = 0;
    while (lade_loader_next(L, &b) == 0 && b) {
      uint64_t e = k++ / 5;
      for (uint32_t i = 0; i < b->valid; i++) seen[e][b->indices[i]]++;
      for (uint32_t i = 0; i < (uint32_t)b->shape[0]; i++)
        if (((const uint8_t *)b->data)[(size_t)i * SZ + 3] != byte_of((uint64_t)b->indices[i], 3)) ok = 0;
      lade_batch_release(b);
    }
    CHECK_EQ_INT(k, EPOCHS * 5);
    lade_loader_destroy(L);
  }
  for (int e = 0; e < EPOCHS; e++)
    for (int i = 0; i < N; i++)
      if (seen[e][i] != 1) ok = 0;
  CHECK(ok);
}

/* Two tiers under solar (docs/plan.md, Two tiers): the memory cache and a
 * disk tier of g_two samples under it. Each rank reads from memory and
 * from disk exactly what the plan's tier[] says, admits to each tier and
 * moves between them what the plan says, with no fallback; at world size 1
 * the sums equal the simulator's (at 4 ranks the peers' reads come from
 * storage here: no transport; tests/mpi covers them). */
static void check_two_tiers(uint32_t W, uint64_t mem, uint64_t disk) {
  const char *kind = "solar";
  g_two = disk;
  fprintf(stderr, "  solar, %u rank(s), %llu samples in memory and %llu on disk\n", W, (unsigned long long)mem,
          (unsigned long long)disk);
  for (uint32_t r = 0; r < W; r++) {
    lade_test_sh("rm -rf %s/cache2", make_dataset());
    run_rank(kind, r, W, mem * CHARGE, 0, 0, &g_runs[r]);
    CHECK_EQ_INT(g_runs[r].rc, 0);
    CHECK(g_runs[r].content_ok);
  }
  lade_plan_t *pl = make_plan(kind, W, mem * CHARGE);
  CHECK(pl != NULL);
  if (!pl) {
    g_two = 0;
    return;
  }
  uint64_t steps = lade_plan_steps_per_epoch(pl), pos[MAXW] = {0};
  uint64_t rd[MAXW][EPOCHS][3] = {{{0}}}; /* memory, disk, storage or peer */
  uint64_t adm[MAXW][2] = {{0}}, mv[MAXW][2] = {{0}}; /* to memory, to disk */
  int order_ok = 1;
  for (uint64_t e = 0; e < EPOCHS; e++)
    for (uint64_t st = 0; st < steps; st++) {
      const lade_plan_step_t *v = NULL;
      CHECK_OK(lade_plan_next(pl, &v));
      if (!v || !v->tier) {
        lade_plan_destroy(pl);
        g_two = 0;
        CHECK(!"the plan has two tiers");
        return;
      }
      for (uint32_t r = 0; r < W; r++) {
        for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
          if (g_runs[r].idx[pos[r]++] != (int64_t)v->samples[i]) order_ok = 0;
          int k = v->from[i] != LADE_FROM_CACHE ? 2 : v->tier[i] == LADE_TIER_DISK ? 1 : 0;
          rd[r][e][k]++;
        }
        for (uint64_t j = v->admit_offset[r]; j < v->admit_offset[r + 1]; j++)
          adm[r][v->admit_tier[j] == LADE_TIER_DISK]++;
        for (uint64_t j = v->move_offset[r]; j < v->move_offset[r + 1]; j++)
          mv[r][v->move_to[j] == LADE_TIER_DISK]++;
      }
    }
  lade_plan_destroy(pl);
  CHECK(order_ok);
  uint64_t tot_disk = 0, moves = 0;
  for (uint32_t r = 0; r < W; r++) {
    const lade_stats_t *st = &g_runs[r].st;
    for (uint64_t e = 0; e < EPOCHS; e++) {
      const lade_epoch_stats_t *es = &g_runs[r].ep[e];
      if (es->samples_by_source[1] != rd[r][e][0] || es->samples_by_source[2] != rd[r][e][1] ||
          es->samples_by_source[0] != rd[r][e][2] || es->plan_fallbacks)
        fprintf(stderr, "  rank %u epoch %llu: memory/disk/storage %llu/%llu/%llu, plan %llu/%llu/%llu, fallbacks "
                "%llu\n", r, (unsigned long long)e, (unsigned long long)es->samples_by_source[1],
                (unsigned long long)es->samples_by_source[2], (unsigned long long)es->samples_by_source[0],
                (unsigned long long)rd[r][e][0], (unsigned long long)rd[r][e][1], (unsigned long long)rd[r][e][2],
                (unsigned long long)es->plan_fallbacks);
      CHECK_EQ_INT(es->samples_by_source[1], rd[r][e][0]);
      CHECK_EQ_INT(es->samples_by_source[2], rd[r][e][1]);
      CHECK_EQ_INT(es->samples_by_source[0], rd[r][e][2]);
      CHECK_EQ_INT(es->plan_fallbacks, 0);
      tot_disk += rd[r][e][1];
    }
    CHECK_EQ_INT(st->plan_admits_mem, adm[r][0]);
    CHECK_EQ_INT(st->plan_admits_disk, adm[r][1]);
    CHECK_EQ_INT(st->plan_moves_up, mv[r][0]);
    CHECK_EQ_INT(st->plan_moves_down, mv[r][1]);
    moves += st->plan_moves_up + st->plan_moves_down;
  }
  fprintf(stderr, "  %llu reads from disk, %llu moves between the tiers\n", (unsigned long long)tot_disk,
          (unsigned long long)moves);
  CHECK(tot_disk > 0 && moves > 0); /* both tiers were used */
  if (W == 1) { /* the simulator's sums */
    lade_plan_settings_t s = settings_of(kind, W, mem * CHARGE);
    lade_sim_costs_t costs = {0};
    lade_sim_epoch_t sim[EPOCHS];
    CHECK_OK(lade_simulate(&s, sizeof s, &costs, sim, sizeof sim[0], NULL));
    uint64_t am = 0, ad = 0, mu = 0, md = 0;
    for (uint64_t e = 0; e < EPOCHS; e++) {
      CHECK_EQ_INT(g_runs[0].ep[e].samples_by_source[1] + g_runs[0].ep[e].samples_by_source[2], sim[e].from_cache);
      CHECK_EQ_INT(g_runs[0].ep[e].samples_by_source[2], sim[e].from_disk);
      CHECK_EQ_INT(g_runs[0].ep[e].samples_by_source[0], sim[e].from_storage);
      am += sim[e].admits_mem, ad += sim[e].admits_disk, mu += sim[e].moves_up, md += sim[e].moves_down;
    }
    CHECK_EQ_INT(g_runs[0].st.plan_admits_mem, am);
    CHECK_EQ_INT(g_runs[0].st.plan_admits_disk, ad);
    CHECK_EQ_INT(g_runs[0].st.plan_moves_up, mu);
    CHECK_EQ_INT(g_runs[0].st.plan_moves_down, md);
  }
  g_two = 0;
}

static void test_two_tiers(void) {
  check_two_tiers(1, N / 8, N / 4);
  check_two_tiers(1, N / 4, N / 2);
  check_two_tiers(4, N / 16, N / 8);
  /* another kind with both: refused, saying which kind plans two tiers */
  g_two = N / 4;
  lade_loader_t *L = open_loader("locality", 0, 1, (uint64_t)(N / 8) * CHARGE, NULL);
  g_two = 0;
  CHECK(L == NULL && strstr(lade_last_error(), "plan=solar"));
  if (L) lade_loader_destroy(L);
}

static void expect_error(const char *kind, const char *extra, const char *words) {
  lade_loader_t *L = open_loader(kind, 0, 1, 10000, extra);
  CHECK(L == NULL);
  if (L) {
    lade_loader_destroy(L);
    return;
  }
  if (!strstr(lade_last_error(), words)) fprintf(stderr, "  unexpected error: %s\n", lade_last_error());
  CHECK(strstr(lade_last_error(), words) != NULL);
}

static void test_bad_settings(void) {
  char opt[4300];
  snprintf(opt, sizeof opt, "cache_dir=%s/cache", make_dataset());
  expect_error("locality", opt, "set cache_mem_bytes or cache_dir, not both");
  expect_error("locality", "prefetcher=on", "regular plan only");
  g_disk = 1;
  expect_error("locality", "cache_disk_bytes=0", "set cache_disk_bytes");
  g_disk = 0;
  expect_error("locality", "cache_policy=lru", "cache_policy must be auto or plan");
  expect_error("regular", "cache_policy=plan", "set plan to one other than regular");
  expect_error("solar", "epochs=1000000000", "set epochs");
  expect_error("locality", "shuffle=false", "shuffle=false applies to the regular plan only");
  lade_config_t *c = NULL;
  lade_config_create(&c);
  CHECK(lade_config_set(c, "plan", "nonsense") != 0);
  lade_config_destroy(c);
}

/* Warm restarts (docs/plan.md): a run stopped early in epoch 1 leaves its disk
 * cache; a restart from its position finds the entries that survived (the
 * files on disk: the test lists them), gives them to the planner, and its
 * per-epoch cache hits and storage reads are the plan's from those caches
 * (lade_plan_warm), with no fallback, and fewer storage reads than a cold
 * restart (the disk emptied). */
static void check_warm(const char *kind, uint64_t cache_bytes) {
  g_disk = 1;
  lade_test_sh("rm -rf %s/cache", make_dataset());
  lade_loader_t *L = open_loader(kind, 0, 1, cache_bytes, NULL);
  CHECK(L != NULL);
  if (!L) return;
  uint64_t samples = 0, steps = 0, epochs = 0;
  lade_loader_info(L, &samples, &steps, &epochs);
  lade_batch_t *b = NULL;
  for (uint64_t k = 0; k < steps + 2 && lade_loader_next(L, &b) == 0 && b; k++) lade_batch_release(b);
  uint64_t e0 = 0, s0 = 0;
  lade_loader_tell(L, &e0, &s0);
  lade_position_t pos;
  CHECK_OK(lade_loader_position(L, e0, s0, &pos, sizeof pos));
  lade_loader_destroy(L);
  CHECK_EQ_INT(pos.epoch, 1);
  /* what survived: the entry files (<dir>/<namespace>/<2 hex>/<16 hex key>) */
  lade_plan_settings_t s = settings_of(kind, 1, cache_bytes);
  uint64_t surv[N], ns = 0;
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "find %s/cache -type f | grep -E '/[0-9a-f]{16}$' | sed 's#.*/##' | sort", make_dataset());
  FILE *f = popen(cmd, "r");
  unsigned long long key = 0;
  while (f && fscanf(f, "%llx", &key) == 1)
    if (key < N && ns < s.cache) surv[ns++] = key; /* the loader keeps the first `cache` in index order */
  if (f) pclose(f);
  rank_run_t *w = &g_runs[1], *cold = &g_runs[2];
  g_pos = &pos;
  run_rank(kind, 0, 1, cache_bytes, 0, 0, w);
  CHECK_EQ_INT(w->rc, 0);
  CHECK(w->content_ok);
  /* the plan from that position and those caches */
  s.resume = 1;
  s.resume_epoch = pos.epoch;
  s.resume_shuffle_epoch = pos.shuffle_epoch;
  s.resume_consumed = pos.consumed;
  lade_plan_t *pl = NULL;
  CHECK_OK(lade_plan_create(&pl, &s, sizeof s));
  if (pl) CHECK_OK(lade_plan_warm(pl, 0, surv, ns));
  uint64_t cache[EPOCHS] = {0}, storage[EPOCHS] = {0};
  const lade_plan_step_t *v = NULL;
  while (pl && lade_plan_next(pl, &v) == 0)
    for (uint64_t i = 0; i < v->offset[1]; i++) {
      cache[v->epoch] += v->from[i] == LADE_FROM_CACHE;
      storage[v->epoch] += v->from[i] != LADE_FROM_CACHE;
    }
  lade_plan_destroy(pl);
  for (uint64_t e = 1; e < EPOCHS; e++) {
    CHECK_EQ_INT(w->ep[e].samples_by_source[2], cache[e]);
    CHECK_EQ_INT(w->ep[e].samples_by_source[0], storage[e]);
    CHECK_EQ_INT(w->ep[e].plan_fallbacks, 0);
  }
  lade_test_sh("rm -rf %s/cache", make_dataset());
  run_rank(kind, 0, 1, cache_bytes, 0, 0, cold);
  g_pos = NULL;
  g_disk = 0;
  CHECK_EQ_INT(cold->rc, 0);
  uint64_t warm_reads = 0, cold_reads = 0;
  for (uint64_t e = 1; e < EPOCHS; e++) {
    warm_reads += w->ep[e].samples_by_source[0];
    cold_reads += cold->ep[e].samples_by_source[0];
  }
  fprintf(stderr, "  %s warm restart at (%llu, %llu): %llu entries survived; storage reads after it %llu (epoch 1: "
          "%llu, the plan's %llu), cold restart %llu\n", kind, (unsigned long long)e0, (unsigned long long)s0,
          (unsigned long long)ns, (unsigned long long)warm_reads, (unsigned long long)w->ep[1].samples_by_source[0],
          (unsigned long long)storage[1], (unsigned long long)cold_reads);
  CHECK(ns > 0);
  CHECK(warm_reads < cold_reads);
}

static void test_warm_restart(void) {
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) check_warm(kinds[k], (uint64_t)(N / 2) * CHARGE);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_every_plan_one_rank);
  RUN(test_every_plan_four_ranks);
  RUN(test_half_cache);
  RUN(test_solar_imbalance);
  RUN(test_disk_cache);
  RUN(test_repeat_and_resume);
  RUN(test_short_last_step);
  RUN(test_warm_restart);
  RUN(test_two_tiers);
  RUN(test_bad_settings);
  return lade_test_finish();
}
