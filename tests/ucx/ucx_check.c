/* ucx_check.c - every plan kind across ranks over the UCX transport, with
 * no MPI anywhere (docs/transport.md, UCX): one process per rank, started by
 * test_ucx.sh or torchrun, the addresses exchanged through a rendezvous
 * folder.
 *   ucx_check DIR RANK WORLD MODE RENDEZVOUS_DIR JOB_ID
 * RANK/WORLD "-" take torchrun's RANK/WORLD_SIZE (and JOB_ID "-" its run
 * id). Each rank checks against the planner and the simulator of the same
 * settings, as mpi_check does under mpirun: its samples in the plan's
 * order, every byte equal to the source's (peer bytes included), its
 * per-epoch cache / peer / storage counts equal to the plan's with no
 * fallback. What needs every rank (the counts summed against the
 * simulator's, samples sent = received) it writes to DIR/out/MODE.RANK for
 * the script to add up. Modes: all (every kind, the aggregate cache holding
 * the dataset and half of it); mismatch (rank 2's seed differs: every rank's
 * create must fail naming the setting and rank 2); fault-stop (rank 1 stops
 * early in epoch 1 and closes its loader: the others fail within the bound
 * naming rank 1); lag (rank 1 far behind: what it holds stays within its
 * window); run (distcache for many epochs until killed: the script
 * kills a rank); warm (as mpi_check's: every rank runs locality with a
 * disk cache into epoch 1 and stops, then restarts from its position: the
 * plan starts from every rank's surviving entries, exchanged at open by the
 * transport's allgather; per-rank counts equal lade_plan_warm's plan from
 * them, no fallback, and fewer storage reads than a cold restart, whose
 * sums the script compares; once with the loader's nodes, one node of every
 * rank on one machine, and once with ranks_per_node 1); warm-skip, warm-die
 * (rank 2 does not join that exchange, alive or exiting at once: the others
 * fail within the bound, or when it dies, naming it). Prints one line per check; exits non-zero on
 * failure. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lade/lade.h"
#include "lade/plan.h"

#define N 192
#define SZ 256
#define B 4
#define EPOCHS 3
#define CHARGE (SZ + 64)

static int g_rank, g_world, g_fail;
static const char *g_seed = "7";
static const char *g_rdv, *g_job;
static const char *g_prefetch = NULL; /* NULL: the default */
/* node_cache: off for the transport's own checks (every handoff a message); auto for check_node_shared */
static const char *g_node_cache = "off";
static unsigned g_step_us;            /* sleep after each batch */
static char g_dir[2048];
static FILE *g_out;

static uint8_t byte_of(uint64_t i, int k) { return (uint8_t)(i * 31 + (uint64_t)k * 7 + 1); }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void check(int ok, const char *what) {
  printf("rank %d: %s %s\n", g_rank, ok ? "ok  " : "FAIL", what);
  fflush(stdout);
  if (!ok) g_fail = 1;
}

/* Rank 0 writes the dataset and then a marker; the others wait for it. */
static void make_dataset(void) {
  char path[2300], done[2300];
  snprintf(done, sizeof done, "%s/data.done", g_dir);
  if (g_rank == 0) {
    uint8_t buf[SZ];
    for (int c = 0; c < 4; c++) {
      snprintf(path, sizeof path, "%s/data/c%d", g_dir, c);
      char cmd[2400];
      snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
      if (system(cmd) != 0) abort();
      for (int j = 0; j < N / 4; j++) {
        uint64_t idx = (uint64_t)c * (N / 4) + (uint64_t)j;
        for (int k = 0; k < SZ; k++) buf[k] = byte_of(idx, k);
        snprintf(path, sizeof path, "%s/data/c%d/f%05d.bin", g_dir, c, j);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, SZ, f) != SZ) abort();
        fclose(f);
      }
    }
    FILE *f = fopen(done, "w");
    if (f) fclose(f);
  } else {
    double t0 = now();
    while (access(done, F_OK) != 0) {
      if (now() - t0 > 60) {
        fprintf(stderr, "rank %d: rank 0 did not write the dataset within 60 s\n", g_rank);
        exit(1);
      }
      usleep(20000);
    }
  }
}

typedef struct run {
  int rc;
  char err[2048];
  uint64_t n, steps;
  int64_t idx[EPOCHS * N];
  int content_ok;
  lade_stats_t st;
  lade_epoch_stats_t ep[EPOCHS];
  double seconds;
} run_t;

static lade_loader_t *open_loader(const char *kind, uint64_t cache_bytes, uint32_t timeout_ms, const char *epochs) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char v[2200];
  snprintf(v, sizeof v, "%s/data", g_dir);
  lade_config_set(c, "source", v);
  lade_config_set(c, "transform", "raw");
  lade_config_set(c, "raw_size", "256");
  lade_config_set(c, "batch_size", "4");
  lade_config_set(c, "threads", "2");
  lade_config_set(c, "seed", g_seed);
  lade_config_set(c, "drop_last", "true");
  lade_config_set(c, "epochs", epochs);
  lade_config_set(c, "plan", kind);
  if (g_prefetch) lade_config_set(c, "prefetch", g_prefetch);
  lade_config_set(c, "node_cache", g_node_cache);
  lade_config_set(c, "transport", "ucx");
  lade_config_set(c, "rendezvous_dir", g_rdv);
  if (g_job) lade_config_set(c, "job_id", g_job);
  snprintf(v, sizeof v, "%d", g_rank);
  lade_config_set(c, "rank", v);
  snprintf(v, sizeof v, "%d", g_world);
  lade_config_set(c, "world_size", v);
  snprintf(v, sizeof v, "%u", timeout_ms);
  lade_config_set(c, "peer_timeout_ms", v);
  snprintf(v, sizeof v, "%llu", (unsigned long long)cache_bytes);
  lade_config_set(c, "cache_mem_bytes", v);
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, c);
  lade_config_destroy(c);
  if (rc) fprintf(stderr, "rank %d: create(%s): %s\n", g_rank, kind, lade_last_error());
  return L;
}

static void run(const char *kind, uint64_t cache_bytes, uint64_t stop_after, uint32_t timeout_ms, run_t *r) {
  memset(r, 0, sizeof *r);
  r->content_ok = 1;
  double t0 = now();
  char ep[16];
  snprintf(ep, sizeof ep, "%d", EPOCHS);
  lade_loader_t *L = open_loader(kind, cache_bytes, timeout_ms, ep);
  if (!L) {
    r->rc = -1;
    snprintf(r->err, sizeof r->err, "%s", lade_last_error());
    r->seconds = now() - t0;
    return;
  }
  uint64_t samples, epochs;
  lade_loader_info(L, &samples, &r->steps, &epochs);
  uint64_t batches = 0;
  lade_batch_t *b = NULL;
  while (!r->rc && (!stop_after || batches < stop_after) && (r->rc = lade_loader_next(L, &b)) == 0 && b) {
    const uint8_t *d = b->data;
    for (int64_t i = 0; i < b->shape[0]; i++) {
      int64_t idx = b->indices[i];
      r->idx[r->n++] = idx;
      for (int k = 0; k < SZ; k++)
        if (d[(size_t)i * SZ + k] != byte_of((uint64_t)idx, k)) r->content_ok = 0;
    }
    batches++;
    lade_batch_release(b);
    if (g_step_us) usleep(g_step_us);
  }
  if (r->rc) snprintf(r->err, sizeof r->err, "%s", lade_last_error());
  lade_loader_stats(L, &r->st, sizeof(lade_stats_t));
  for (uint64_t e = 0; e < EPOCHS; e++) lade_loader_epoch_stats(L, e, &r->ep[e], sizeof(lade_epoch_stats_t));
  lade_loader_destroy(L);
  r->seconds = now() - t0;
}

/* rpn: the node size the loader planned with (its stats: the ranks on one
 * host share a node, and node-aware kinds plan with nodes as cache holders) */
static lade_plan_settings_t settings(const char *kind, uint64_t cache_bytes, uint32_t rpn) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = lade_plan_kind_parse(kind);
  s.samples = N;
  s.learners = (uint32_t)g_world;
  s.batch_size = B;
  s.epochs = EPOCHS;
  s.seed = 7;
  s.cache = cache_bytes / CHARGE;
  s.coalesce = 0;
  s.ranks_per_node = rpn;
  return s;
}

static run_t g_run;

static void check_kind(const char *kind, uint64_t cache_bytes) {
  char what[256];
  run_t *r = &g_run;
  run(kind, cache_bytes, 0, 20000, r);
  snprintf(what, sizeof what, "%s, cache %llu: ran to the end", kind, (unsigned long long)cache_bytes);
  if (r->rc) fprintf(stderr, "rank %d: %s\n", g_rank, r->err);
  check(r->rc == 0, what);
  snprintf(what, sizeof what, "%s: delivered bytes equal the source's (peer samples included)", kind);
  check(r->content_ok, what);
  lade_plan_settings_t s = settings(kind, cache_bytes, r->st.ranks_per_node);
  lade_plan_t *pl = NULL;
  int ok = lade_plan_create(&pl, &s, sizeof s) == 0;
  uint64_t pos = 0, cnt[EPOCHS][3] = {{0}};
  int order_ok = 1;
  const lade_plan_step_t *v = NULL;
  for (uint64_t e = 0; ok && e < EPOCHS; e++)
    for (uint64_t st = 0; st < lade_plan_steps_per_epoch(pl); st++) {
      if (lade_plan_next(pl, &v)) {
        ok = 0;
        break;
      }
      for (uint64_t i = v->offset[g_rank]; i < v->offset[g_rank + 1]; i++) {
        if (pos >= r->n || r->idx[pos++] != (int64_t)v->samples[i]) order_ok = 0;
        cnt[e][v->from[i] == LADE_FROM_CACHE ? 0 : v->from[i] >= 0 ? 1 : 2]++;
      }
    }
  lade_plan_destroy(pl);
  snprintf(what, sizeof what, "%s: this rank trains on exactly the plan's samples in its order", kind);
  check(ok && order_ok && pos == r->n, what);
  int counts_ok = 1;
  for (uint64_t e = 0; e < EPOCHS; e++) {
    const lade_epoch_stats_t *es = &r->ep[e];
    if (es->samples_by_source[1] != cnt[e][0] || es->samples_by_source[3] != cnt[e][1] ||
        es->samples_by_source[0] != cnt[e][2] || es->plan_fallbacks || es->plan_peer_storage) {
      counts_ok = 0;
      fprintf(stderr, "rank %d %s epoch %llu: cache/peer/storage %llu/%llu/%llu, plan %llu/%llu/%llu, fallbacks %llu\n",
              g_rank, kind, (unsigned long long)e, (unsigned long long)es->samples_by_source[1],
              (unsigned long long)es->samples_by_source[3], (unsigned long long)es->samples_by_source[0],
              (unsigned long long)cnt[e][0], (unsigned long long)cnt[e][1], (unsigned long long)cnt[e][2],
              (unsigned long long)es->plan_fallbacks);
    }
    fprintf(g_out, "count %s %llu %llu %llu %llu %llu\n", kind, (unsigned long long)cache_bytes, (unsigned long long)e,
            (unsigned long long)es->samples_by_source[1], (unsigned long long)es->samples_by_source[3],
            (unsigned long long)es->samples_by_source[0]);
  }
  snprintf(what, sizeof what, "%s: per-rank cache/peer/storage counts equal the plan's, no fallback", kind);
  check(counts_ok, what);
  lade_sim_costs_t costs = {0};
  lade_sim_epoch_t sim[EPOCHS];
  int sim_ok = lade_simulate(&s, sizeof s, &costs, sim, sizeof sim[0], NULL) == 0;
  for (uint64_t e = 0; sim_ok && e < EPOCHS; e++)
    fprintf(g_out, "sim %s %llu %llu %llu %llu %llu\n", kind, (unsigned long long)cache_bytes, (unsigned long long)e,
            (unsigned long long)sim[e].from_cache, (unsigned long long)(sim[e].from_peer + sim[e].from_node),
            (unsigned long long)sim[e].from_storage); /* peers: other nodes' and the node's own ranks' (handoffs) */
  fprintf(g_out, "sent %s %llu %llu\n", kind, (unsigned long long)cache_bytes,
          (unsigned long long)r->st.peer_messages_sent);
  fflush(g_out);
}

/* The node's shared cache under UCX (docs/plan.md, Nodes): the ranks of
 * this machine are one node; locality and solar read their intra-node
 * handoffs from the node's segment: none is sent, each rank's memory reads
 * are its own cache's and its handoffs, as the plan routes them. */
static void check_node_shared(const char *kind, uint64_t cache_bytes) {
  char what[256];
  g_node_cache = "auto";
  run_t *r = &g_run;
  run(kind, cache_bytes, 0, 20000, r);
  g_node_cache = "off";
  if (r->rc) fprintf(stderr, "rank %d: %s\n", g_rank, r->err);
  snprintf(what, sizeof what, "node cache, %s: ran to the end with the source's bytes", kind);
  check(r->rc == 0 && r->content_ok, what);
  lade_plan_settings_t s = settings(kind, cache_bytes, r->st.ranks_per_node);
  lade_plan_t *pl = NULL;
  int ok = r->st.ranks_per_node == (uint32_t)g_world && lade_plan_create(&pl, &s, sizeof s) == 0;
  uint64_t own[EPOCHS] = {0}, node[EPOCHS] = {0}, storage[EPOCHS] = {0}, all_node = 0;
  const lade_plan_step_t *v = NULL;
  for (uint64_t e = 0; ok && e < EPOCHS; e++)
    for (uint64_t st = 0; st < lade_plan_steps_per_epoch(pl); st++) {
      if (lade_plan_next(pl, &v)) {
        ok = 0;
        break;
      }
      for (uint64_t i = v->offset[g_rank]; i < v->offset[g_rank + 1]; i++) {
        int32_t f = v->from[i];
        if (f == LADE_FROM_CACHE) own[e]++;
        else if (f >= 0) node[e]++; /* one node: every peer is a rank of it */
        else storage[e]++;
      }
    }
  lade_plan_destroy(pl);
  for (uint64_t e = 0; ok && e < EPOCHS; e++) {
    const lade_epoch_stats_t *es = &r->ep[e];
    all_node += node[e];
    if (es->samples_by_source[1] != own[e] + node[e] || es->plan_node_reads != node[e] ||
        es->samples_by_source[3] || es->samples_by_source[0] != storage[e] || es->plan_fallbacks) {
      ok = 0;
      fprintf(stderr, "rank %d %s epoch %llu: memory %llu (handoffs %llu), peer %llu, storage %llu; plan own %llu, "
              "handoffs %llu, storage %llu\n", g_rank, kind, (unsigned long long)e,
              (unsigned long long)es->samples_by_source[1], (unsigned long long)es->plan_node_reads,
              (unsigned long long)es->samples_by_source[3], (unsigned long long)es->samples_by_source[0],
              (unsigned long long)own[e], (unsigned long long)node[e], (unsigned long long)storage[e]);
    }
  }
  snprintf(what, sizeof what, "node cache, %s: per-rank own/handoff/storage counts equal the plan's (%llu handoffs "
           "here), all read from the node's cache, none sent", kind, (unsigned long long)all_node);
  check(ok && r->st.peer_messages_sent == 0 && r->st.plan_node_reads == all_node, what);
}

/* Rank 1 stops early in epoch 1 and closes its loader: the others fail
 * within the bound, naming whom they waited for. */
static void check_fault_stop(void) {
  uint64_t stop = g_rank == 1 ? (uint64_t)N / (B * (uint64_t)g_world) + 3 : 0;
  run("distcache", (uint64_t)(N / 4) * CHARGE, stop, 2000, &g_run);
  if (g_rank == 1) {
    check(g_run.rc == 0, "fault-stop: rank 1 stopped early and closed its loader");
    return;
  }
  fprintf(stderr, "rank %d: failed after %.1f s as expected: %s\n", g_rank, g_run.seconds, g_run.err);
  check(g_run.rc != 0 && strstr(g_run.err, "did not arrive from rank") && g_run.seconds < 30,
        "fault-stop: this rank failed within the bound, naming whom it waited for");
  fprintf(g_out, "names1 %d\n", strstr(g_run.err, "from rank 1 ") != NULL);
  fflush(g_out);
}

/* Rank 1 is far behind (prefetch 1, 30 ms a batch) while the others plan 40
 * steps ahead and push as they plan: what rank 1 holds of their early
 * messages must stay within its own grant, 2 * (prefetch + 1) + 2 steps of
 * at most B samples (backpressure, as mpi_check's lag). */
static void check_lag(void) {
  g_prefetch = g_rank == 1 ? "1" : "40";
  g_step_us = g_rank == 1 ? 30000 : 0;
  run("distcache", (uint64_t)(N / g_world) * CHARGE, 0, 20000, &g_run);
  if (g_run.rc) fprintf(stderr, "rank %d: %s\n", g_rank, g_run.err);
  check(g_run.rc == 0 && g_run.content_ok && g_run.n == (uint64_t)EPOCHS * N / (uint64_t)g_world,
        "lag: every rank runs to the end with the source's bytes while rank 1 is far behind");
  uint64_t bound = (2 * (1 + 1) + 2) * (uint64_t)B * SZ, peak = g_run.st.peer_bytes_held_peak;
  fprintf(stderr, "rank %d: peer bytes held at most %llu (rank 1's bound %llu)\n", g_rank, (unsigned long long)peak,
          (unsigned long long)bound);
  if (g_rank == 1) {
    check(peak > 0 && peak <= bound, "lag: the peer bytes rank 1 holds early stay within its window (backpressure)");
    check(g_run.st.samples_by_source[3] > 0, "lag: rank 1 received samples from its peers");
  }
}

/* ---- warm restarts: every rank's surviving disk cache seeds the plan */

static const char *g_warm_rpn; /* ranks_per_node for the warm case; NULL: the loader's (one machine: one node) */
static const char *g_warm_timeout = "20000";
static bool g_warm_mem; /* the plan's cache in memory, no cache_dir: no warm start, no exchange at open */

/* Waits (bounded) until every rank reached the point `name` (a file each in DIR). */
static void barrier(const char *name) {
  char path[2300];
  snprintf(path, sizeof path, "%s/bar.%s.%s.%d", g_dir, name, g_warm_rpn ? g_warm_rpn : "d", g_rank);
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
  double t0 = now();
  for (int r = 0; r < g_world; r++) {
    snprintf(path, sizeof path, "%s/bar.%s.%s.%d", g_dir, name, g_warm_rpn ? g_warm_rpn : "d", r);
    while (access(path, F_OK) != 0) {
      if (now() - t0 > 120) {
        fprintf(stderr, "rank %d: rank %d did not reach %s within 120 s\n", g_rank, r, name);
        exit(1);
      }
      usleep(20000);
    }
  }
}

static lade_loader_t *open_warm(const lade_position_t *pos) {
  char dir[2300], bytes[64];
  snprintf(dir, sizeof dir, "%s/warm%d.%s", g_dir, g_rank, g_warm_rpn ? g_warm_rpn : "d");
  snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)(N / (uint64_t)g_world / 2) * 4096); /* 4 KiB an entry */
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char v[2200];
  snprintf(v, sizeof v, "%s/data", g_dir);
  const char *kv[][2] = {{"source", v}, {"transform", "raw"}, {"raw_size", "256"}, {"batch_size", "4"},
                         {"threads", "2"}, {"seed", "7"}, {"drop_last", "true"}, {"epochs", "3"},
                         {"plan", "locality"}, {"transport", "ucx"}, {"rendezvous_dir", g_rdv},
                         {"peer_timeout_ms", g_warm_timeout}, {"cache_dir", dir}, {"cache_disk_bytes", bytes},
                         {"node_cache", "off"}}; /* warm-skip's rank 2 keeps a memory cache of its own */
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) lade_config_set(c, kv[i][0], kv[i][1]);
  if (g_warm_mem) { /* the same cache count, in memory */
    lade_config_set(c, "cache_dir", "");
    lade_config_set(c, "cache_disk_bytes", "0");
    snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)(N / (uint64_t)g_world / 2) * CHARGE);
    lade_config_set(c, "cache_mem_bytes", bytes);
  }
  if (g_job) lade_config_set(c, "job_id", g_job);
  if (g_warm_rpn) lade_config_set(c, "ranks_per_node", g_warm_rpn);
  char r[16], w[16];
  snprintf(r, sizeof r, "%d", g_rank);
  snprintf(w, sizeof w, "%d", g_world);
  lade_config_set(c, "rank", r);
  lade_config_set(c, "world_size", w);
  if (pos) lade_config_set_position(c, pos, sizeof *pos);
  lade_loader_t *L = NULL;
  if (lade_loader_create(&L, c)) fprintf(stderr, "rank %d: create: %s\n", g_rank, lade_last_error());
  lade_config_destroy(c);
  return L;
}

/* Runs a loader from pos to the end: bytes checked, per-epoch (disk cache, peer, storage, fallbacks). */
static int run_warm(const lade_position_t *pos, uint64_t (*got)[4]) {
  lade_loader_t *L = open_warm(pos);
  if (!L) return 0;
  int ok = 1, rc;
  lade_batch_t *b = NULL;
  while ((rc = lade_loader_next(L, &b)) == 0 && b) {
    for (int64_t i = 0; i < b->shape[0]; i++)
      for (int k = 0; k < SZ; k++)
        if (((const uint8_t *)b->data)[(size_t)i * SZ + k] != byte_of((uint64_t)b->indices[i], k)) ok = 0;
    lade_batch_release(b);
  }
  if (rc) fprintf(stderr, "rank %d: %s\n", g_rank, lade_last_error());
  for (uint64_t e = pos->epoch; e < EPOCHS; e++) {
    lade_epoch_stats_t es;
    if (lade_loader_epoch_stats(L, e, &es, sizeof es)) ok = 0;
    got[e][0] = es.samples_by_source[2];
    got[e][1] = es.samples_by_source[3];
    got[e][2] = es.samples_by_source[0];
    got[e][3] = es.plan_fallbacks + es.plan_peer_storage;
  }
  lade_loader_destroy(L);
  return ok && rc == 0;
}

static void check_warm(void) {
  lade_loader_t *L = open_warm(NULL);
  uint64_t steps = 0;
  int ok = L != NULL;
  /* the plan the loader runs: its nodes (one machine: one node of every rank) and cache count */
  lade_plan_settings_t s;
  ok = ok && lade_loader_plan_settings(L, &s, sizeof s, NULL) == 0;
  if (L) lade_loader_info(L, NULL, &steps, NULL);
  lade_batch_t *b = NULL;
  for (uint64_t k = 0; ok && k < steps + 2; k++) {
    ok = lade_loader_next(L, &b) == 0 && b;
    if (ok) lade_batch_release(b);
  }
  lade_position_t pos;
  ok = ok && lade_loader_position(L, 1, 2, &pos, sizeof pos) == 0;
  if (!ok) fprintf(stderr, "rank %d: %s\n", g_rank, lade_last_error());
  if (L) lade_loader_destroy(L);
  check(ok, "warm: every rank runs locality with a disk cache into epoch 1 and stops");
  if (!ok) return;
  barrier("stopped");
  /* what survived on every rank's disk: its entry files, in index order, at most the plan's cache */
  s.resume = 1;
  s.resume_epoch = pos.epoch;
  s.resume_shuffle_epoch = pos.shuffle_epoch;
  s.resume_consumed = pos.consumed;
  lade_plan_t *pl = NULL;
  int plan_ok = lade_plan_create(&pl, &s, sizeof s) == 0;
  uint64_t total = 0;
  for (int r = 0; plan_ok && r < g_world; r++) {
    char cmd[2500];
    snprintf(cmd, sizeof cmd, "find '%s/warm%d.%s' -type f | grep -E '/[0-9a-f]{16}$' | sed 's#.*/##' | sort", g_dir,
             r, g_warm_rpn ? g_warm_rpn : "d");
    FILE *f = popen(cmd, "r");
    uint64_t keys[N], n = 0;
    unsigned long long key;
    while (f && fscanf(f, "%llx", &key) == 1)
      if (key < N && n < s.cache) keys[n++] = key;
    if (f) pclose(f);
    total += n;
    plan_ok = lade_plan_warm(pl, (uint32_t)r, keys, n) == 0;
  }
  uint64_t want[EPOCHS][3] = {{0}};
  const lade_plan_step_t *v = NULL;
  while (plan_ok && lade_plan_next(pl, &v) == 0)
    for (uint64_t i = v->offset[g_rank]; i < v->offset[g_rank + 1]; i++)
      want[v->epoch][v->from[i] == LADE_FROM_CACHE ? 0 : v->from[i] >= 0 ? 1 : 2]++;
  lade_plan_destroy(pl);
  barrier("listed"); /* every rank listed the files before any restart changes them */
  uint64_t got[EPOCHS][4] = {{0}}, cold[EPOCHS][4] = {{0}};
  ok = run_warm(&pos, got);
  check(ok, "warm: every rank restarts from the position with its surviving disk cache, the source's bytes");
  int same = plan_ok && total > 0;
  for (uint64_t e = pos.epoch; e < EPOCHS; e++) {
    same &= got[e][0] == want[e][0] && got[e][1] == want[e][1] && got[e][2] == want[e][2] && !got[e][3];
    if (got[e][0] != want[e][0] || got[e][1] != want[e][1] || got[e][2] != want[e][2] || got[e][3])
      fprintf(stderr, "rank %d epoch %llu: cache/peer/storage %llu/%llu/%llu, plan %llu/%llu/%llu, fallbacks %llu\n",
              g_rank, (unsigned long long)e, (unsigned long long)got[e][0], (unsigned long long)got[e][1],
              (unsigned long long)got[e][2], (unsigned long long)want[e][0], (unsigned long long)want[e][1],
              (unsigned long long)want[e][2], (unsigned long long)got[e][3]);
  }
  fprintf(stderr, "rank %d: %llu entries survived on %d ranks (ranks_per_node %u, cache %llu)\n", g_rank,
          (unsigned long long)total, g_world, s.ranks_per_node, (unsigned long long)s.cache);
  check(same, "warm: per-rank cache/peer/storage counts equal the plan's from every rank's surviving caches");
  barrier("warm");
  char cmd[2500];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/warm%d.%s'", g_dir, g_rank, g_warm_rpn ? g_warm_rpn : "d");
  if (system(cmd) != 0) ok = 0;
  barrier("removed");
  ok = run_warm(&pos, cold) && ok;
  check(ok, "warm: every rank restarts cold (its disk cache removed), the source's bytes");
  uint64_t sw = 0, sc = 0;
  for (uint64_t e = pos.epoch; e < EPOCHS; e++) sw += got[e][2], sc += cold[e][2];
  fprintf(g_out, "storage %u %llu %llu %llu\n", s.ranks_per_node, (unsigned long long)sw, (unsigned long long)sc,
          (unsigned long long)total);
  fflush(g_out);
}

/* Rank 2 opens its loader with its cache in memory (the same count, so the
 * settings agree), so it never joins the exchange of the surviving caches.
 * die 0: it keeps its loader open past the others' bound (3 s): their
 * creates fail at the bound, naming rank 2. die 1: it exits at once: the
 * others (bound 60 s) fail as soon as its connection breaks, naming it. */
static void check_warm_skip(int die) {
  g_warm_timeout = die ? "60000" : "3000";
  g_warm_mem = g_rank == 2;
  double t0 = now();
  lade_loader_t *L = open_warm(NULL);
  double took = now() - t0;
  if (g_rank == 2) {
    check(L != NULL, "warm-skip: rank 2 opened its loader without a disk cache");
    fflush(NULL);
    if (die) _exit(g_fail);
    usleep(8000000);
  } else if (die) {
    const char *e = lade_last_error();
    fprintf(stderr, "rank %d: failed after %.1f s as expected: %s\n", g_rank, took, L ? "(created)" : e);
    check(!L && strstr(e, "rank 2 died") && took < 30,
          "warm-die: this rank's create failed when rank 2 died, long before the bound, naming it");
  } else {
    const char *e = lade_last_error();
    fprintf(stderr, "rank %d: failed after %.1f s as expected: %s\n", g_rank, took, L ? "(created)" : e);
    check(!L && strstr(e, "rank 2 did not contribute") && strstr(e, "peer_timeout_ms") && took < 30,
          "warm-skip: this rank's create failed within the bound, naming rank 2, which did not join the exchange");
  }
  if (L) lade_loader_destroy(L);
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: ucx_check DIR RANK|- WORLD|- all|mismatch|fault-stop|lag|run|warm|warm-skip|warm-die RENDEZVOUS_DIR JOB_ID|-\n");
    return 2;
  }
  g_rank = atoi(strcmp(argv[2], "-") ? argv[2] : getenv("RANK") ? getenv("RANK") : "0");
  g_world = atoi(strcmp(argv[3], "-") ? argv[3] : getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
  const char *mode = argv[4];
  g_rdv = argv[5];
  g_job = strcmp(argv[6], "-") ? argv[6] : NULL;
  if (!strstr(lade_features(), "ucx")) {
    printf("skip: this build has no UCX\n");
    return 77;
  }
  snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
  make_dataset();
  char path[2300];
  snprintf(path, sizeof path, "%s/out", g_dir);
  mkdir(path, 0777);
  snprintf(path, sizeof path, "%s/out/%s.%d", g_dir, mode, g_rank);
  g_out = fopen(path, "w");
  if (!g_out) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    return 2;
  }
  if (!strcmp(mode, "fault-stop")) {
    check_fault_stop();
  } else if (!strcmp(mode, "warm-skip") || !strcmp(mode, "warm-die")) {
    check_warm_skip(!strcmp(mode, "warm-die"));
  } else if (!strcmp(mode, "warm")) {
    check_warm();      /* one node of every rank: one cache per node, each rank's disk holds its admits */
    g_warm_rpn = "1"; /* a node per rank: a cache per rank */
    check_warm();
  } else if (!strcmp(mode, "lag")) {
    check_lag();
  } else if (!strcmp(mode, "mismatch")) {
    if (g_rank == 2) g_seed = "8";
    lade_loader_t *L = open_loader("locality", (uint64_t)(N / 4) * CHARGE, 20000, "3");
    const char *e = lade_last_error();
    int ok = L == NULL && strstr(e, "setting 'seed'") && strstr(e, "rank 2");
    fprintf(stderr, "rank %d: %s\n", g_rank, L ? "created" : e);
    if (L) lade_loader_destroy(L);
    check(ok, "a seed that differs on rank 2 fails the loader's creation, naming the setting and rank 2");
  } else if (!strcmp(mode, "run")) {
    /* until a rank is killed: the others must fail within the bound */
    lade_loader_t *L = open_loader("distcache", (uint64_t)(N / 4) * CHARGE, 3000, "100000");
    if (!L) return 1;
    printf("rank %d: running\n", g_rank);
    fflush(stdout);
    lade_batch_t *b = NULL;
    int rc;
    while ((rc = lade_loader_next(L, &b)) == 0 && b) {
      lade_batch_release(b);
      usleep(2000);
    }
    fprintf(stderr, "rank %d: stopped: %s\n", g_rank, rc ? lade_last_error() : "the end");
    lade_loader_destroy(L);
    return rc ? 3 : 0;
  } else {
    static const char *const kinds[] = {"regular+lru", "regular+belady", "distcache", "locality", "solar"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      check_kind(kinds[k], (uint64_t)(N / g_world) * CHARGE);     /* the aggregate cache holds the dataset */
      check_kind(kinds[k], (uint64_t)(N / g_world / 2) * CHARGE); /* half of it */
    }
    /* the nodes from the exchanged host names: one machine, one node */
    lade_loader_t *L = open_loader("locality", (uint64_t)(N / 4) * CHARGE, 20000, "3");
    lade_stats_t st;
    memset(&st, 0xff, sizeof st);
    int ok = L && lade_loader_stats(L, &st, sizeof st) == 0 && st.node == 0 && st.nodes == 1 &&
             st.local_rank == (uint32_t)g_rank && st.ranks_per_node == (uint32_t)g_world;
    lade_loader_destroy(L);
    check(ok, "topology: the exchanged host names make one node of every rank");
    check_node_shared("locality", (uint64_t)(N / 2) * CHARGE);
    check_node_shared("solar", (uint64_t)(N / 4) * CHARGE);
  }
  fclose(g_out);
  return g_fail;
}
