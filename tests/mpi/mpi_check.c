/* mpi_check.c - every plan kind across MPI ranks (docs/transport.md), run as
 *   mpirun -np 4 mpi_check DIR [all|fault-stop]
 * Each rank runs a loader with transport=mpi (initialised here first with
 * MPI_THREAD_MULTIPLE, as mpi4py does, so lade must coexist with it) and
 * checks, against the planner and the simulator of the same settings:
 * its samples in order; the bytes (peer bytes included) equal the source's;
 * its per-epoch cache / peer / storage counts equal the plan's exactly, with
 * no fallback; the union over ranks equals the simulator's counts and every
 * sample once per epoch; a second run gives the same checksums; a resumed
 * run delivers the rest bit for bit. fault-stop: rank 1 stops mid-epoch 1
 * and closes its loader; the others must fail within the bound, naming
 * rank 1. Every kind runs with ranks_per_node 1, 2 (2 nodes of 2 ranks) and
 * 4 (1 node of 4): node-aware plans (docs/plan.md, Nodes), their intra-node
 * handoffs counted apart (peer_samples_node) and per node. lag: rank 1
 * reads slowly with prefetch 1 while the others plan 40 steps ahead; what
 * rank 1 holds of their early messages must stay
 * within its own window (backpressure). topology: the node, local rank and
 * ranks per node each rank's stats report (check_topology). resize-save FILE
 * (under -np 4) runs locality into epoch 1 and writes rank 0's position and
 * what all ranks consumed; resize-load FILE (under -np 2) resumes it: the two
 * ranks deliver the rest of the epoch, each remaining sample once and none of
 * the consumed, with per-rank counts equal to the plan's from the resume
 * point (peer sends included), no fallback (docs/plan.md "Resume"). warm:
 * every rank runs locality with a disk cache into epoch 1, then restarts
 * from its position: the plan starts from every rank's surviving entries
 * (exchanged at open), per-rank counts equal the plan's from them, and it
 * reads less from storage than a cold restart (docs/plan.md "Warm restarts").
 * Prints one line per check on rank 0; exits non-zero on failure. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lade/lade.h"
#include "lade/plan.h"

#define N 192
#define SZ 256
#define B 4
#define EPOCHS 3
#define CHARGE (SZ + 64)

static int g_rank, g_world, g_fail;
static const char *g_seed = "7";
static const char *g_prefetch = NULL; /* NULL: the default */
static unsigned g_step_us;            /* sleep after each batch */
static const char *g_rpn = NULL;      /* ranks_per_node; NULL: the default (detect) */
static const char *g_transport = "mpi";
static uint64_t g_two; /* > 0: solar's two tiers, g_two samples per holder on disk under the memory cache */
static char g_dir[4096];

static uint8_t byte_of(uint64_t i, int k) { return (uint8_t)(i * 31 + (uint64_t)k * 7 + 1); }

static void check(int ok, const char *what) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!ok) fprintf(stderr, "rank %d: FAILED %s\n", g_rank, what);
  if (g_rank == 0) printf("%s %s\n", all ? "ok  " : "FAIL", what);
  if (!all) g_fail = 1;
}

static void make_dataset(void) {
  if (g_rank == 0) {
    uint8_t buf[SZ];
    char path[4400];
    for (int c = 0; c < 4; c++) {
      snprintf(path, sizeof path, "%s/data/c%d", g_dir, c);
      char cmd[4500];
      snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
      if (system(cmd) != 0) abort();
      for (int j = 0; j < N / 4; j++) {
        uint64_t idx = (uint64_t)c * (N / 4) + (uint64_t)j;
        for (int k = 0; k < SZ; k++) buf[k] = byte_of(idx, k);
        snprintf(path, sizeof path, "%s/data/c%d/f%05d.bin", g_dir, c, j);
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, SZ, f);
        fclose(f);
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

typedef struct run {
  int rc;
  char err[2048];
  uint64_t n, steps;
  int64_t idx[EPOCHS * N];
  uint64_t sum;
  int content_ok;
  lade_stats_t st;
  lade_epoch_stats_t ep[EPOCHS];
  double seconds;
  double close_seconds; /* lade_loader_destroy's */
} run_t;

static lade_loader_t *open_loader(const char *kind, uint64_t cache_bytes, uint32_t timeout_ms) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char v[4200];
  snprintf(v, sizeof v, "%s/data", g_dir);
  lade_config_set(c, "source", v);
  lade_config_set(c, "transform", "raw");
  lade_config_set(c, "raw_size", "256");
  lade_config_set(c, "batch_size", "4");
  lade_config_set(c, "threads", "2");
  lade_config_set(c, "seed", g_seed);
  lade_config_set(c, "drop_last", "true");
  snprintf(v, sizeof v, "%d", EPOCHS);
  lade_config_set(c, "epochs", v);
  lade_config_set(c, "plan", kind);
  if (g_prefetch) lade_config_set(c, "prefetch", g_prefetch);
  lade_config_set(c, "transport", g_transport);
  if (g_rpn && lade_config_set(c, "ranks_per_node", g_rpn) != 0) abort();
  snprintf(v, sizeof v, "%u", timeout_ms);
  lade_config_set(c, "peer_timeout_ms", v);
  snprintf(v, sizeof v, "%llu", (unsigned long long)cache_bytes);
  lade_config_set(c, "cache_mem_bytes", v);
  if (g_two) { /* a folder per rank: a routed plan plans each rank's own tiers */
    snprintf(v, sizeof v, "%s/two-%d", g_dir, g_rank);
    lade_config_set(c, "cache_dir", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)(g_two * 4096)); /* 256 bytes: one 4 KiB block each */
    lade_config_set(c, "cache_disk_bytes", v);
  }
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, c);
  lade_config_destroy(c);
  if (rc) fprintf(stderr, "rank %d: create(%s): %s\n", g_rank, kind, lade_last_error());
  return L;
}

/* Runs to the end (or stop_after batches), from (e0, s0). */
static void run(const char *kind, uint64_t cache_bytes, uint64_t e0, uint64_t s0, uint64_t stop_after,
                uint32_t timeout_ms, run_t *r) {
  memset(r, 0, sizeof *r);
  r->content_ok = 1;
  double t0 = MPI_Wtime();
  lade_loader_t *L = open_loader(kind, cache_bytes, timeout_ms);
  if (!L) {
    r->rc = -1;
    snprintf(r->err, sizeof r->err, "%s", lade_last_error());
    return;
  }
  uint64_t samples, epochs;
  lade_loader_info(L, &samples, &r->steps, &epochs);
  if (e0 || s0) r->rc = lade_loader_seek(L, e0, s0);
  uint64_t h = 1469598103934665603ull, batches = 0;
  lade_batch_t *b = NULL;
  while (!r->rc && (!stop_after || batches < stop_after) && (r->rc = lade_loader_next(L, &b)) == 0 && b) {
    const uint8_t *d = b->data;
    for (int64_t i = 0; i < b->shape[0]; i++) {
      int64_t idx = b->indices[i];
      r->idx[r->n++] = idx;
      for (int k = 0; k < SZ; k++) {
        if (d[(size_t)i * SZ + k] != byte_of((uint64_t)idx, k)) r->content_ok = 0;
        h = (h ^ d[(size_t)i * SZ + k]) * 1099511628211ull;
      }
    }
    batches++;
    lade_batch_release(b);
    if (g_step_us) {
      struct timespec ts = {(time_t)(g_step_us / 1000000), (long)(g_step_us % 1000000) * 1000};
      nanosleep(&ts, NULL);
    }
  }
  if (r->rc) snprintf(r->err, sizeof r->err, "%s", lade_last_error());
  r->sum = h;
  lade_loader_stats(L, &r->st, sizeof(lade_stats_t));
  for (uint64_t e = e0; e < EPOCHS; e++) lade_loader_epoch_stats(L, e, &r->ep[e], sizeof(lade_epoch_stats_t));
  double tc = MPI_Wtime();
  lade_loader_destroy(L);
  r->close_seconds = MPI_Wtime() - tc;
  r->seconds = MPI_Wtime() - t0;
}

/* Whether the kind plans per node (docs/plan.md, Nodes). */
static int node_aware(const char *kind) {
  return !strcmp(kind, "distcache") || !strcmp(kind, "locality") || !strcmp(kind, "solar");
}

static lade_plan_settings_t settings(const char *kind, uint64_t cache_bytes) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = lade_plan_kind_parse(kind);
  s.samples = N;
  s.learners = (uint32_t)g_world;
  s.batch_size = B;
  s.epochs = EPOCHS;
  s.seed = 7;
  s.cache = cache_bytes / CHARGE;
  s.cache_disk = g_two;
  s.coalesce = 0;
  s.ranks_per_node = g_rpn ? (uint32_t)atoi(g_rpn) : 1;
  return s;
}

static run_t g_run, g_run2;

static void check_kind(const char *kind, uint64_t cache_bytes) {
  char what[320], tag[96];
  uint32_t rpn = g_rpn ? (uint32_t)atoi(g_rpn) : 1, nodes = (uint32_t)g_world / rpn;
  snprintf(tag, sizeof tag, "%s, ranks_per_node %u, cache %llu", kind, rpn, (unsigned long long)cache_bytes);
  run_t *r = &g_run;
  run(kind, cache_bytes, 0, 0, 0, 20000, r);
  snprintf(what, sizeof what, "%s: every rank ran to the end", tag);
  if (r->rc) fprintf(stderr, "rank %d: %s\n", g_rank, r->err);
  check(r->rc == 0, what);
  snprintf(what, sizeof what, "%s: delivered bytes equal the source's (peer samples included)", tag);
  check(r->content_ok, what);
  /* the plan, computed here with the same settings; cnt: this rank's
   * own / node handoff / other node / storage; pnode: each node's */
  lade_plan_settings_t s = settings(kind, cache_bytes);
  lade_plan_t *pl = NULL;
  int ok = lade_plan_create(&pl, &s, sizeof s) == 0;
  uint64_t pos = 0, cnt[EPOCHS][4] = {{0}}, pnode[EPOCHS][64][4] = {{{0}}};
  /* two tiers: this rank's own reads from disk per epoch; its admits and moves (to memory, to disk); the run's reads
   * from any disk tier (own, or sent to another learner) */
  uint64_t cnt_disk[EPOCHS] = {0}, adm[2] = {0}, mv[2] = {0}, all_disk = 0;
  uint32_t prpn = ok ? lade_plan_settings(pl)->ranks_per_node : 1;
  int order_ok = 1, once_ok = 1;
  const lade_plan_step_t *v = NULL;
  for (uint64_t e = 0; ok && e < EPOCHS; e++) {
    uint8_t seen[N] = {0};
    for (uint64_t st = 0; st < lade_plan_steps_per_epoch(pl); st++) {
      if (lade_plan_next(pl, &v)) {
        ok = 0;
        break;
      }
      for (uint64_t i = 0; i < v->total; i++)
        if (seen[v->samples[i]]++) once_ok = 0;
      for (uint32_t q = 0; q < v->learners; q++)
        for (uint64_t i = v->offset[q]; i < v->offset[q + 1]; i++) {
          lade_plan_route_class_t k = lade_plan_route_class(v->from[i], q, prpn);
          if (q / rpn < 64) pnode[e][q / rpn][k]++;
          int disk = v->tier && v->tier[i] == LADE_TIER_DISK;
          all_disk += disk;
          if (q != (uint32_t)g_rank) continue;
          if (pos >= r->n || r->idx[pos++] != (int64_t)v->samples[i]) order_ok = 0;
          cnt[e][k]++;
          cnt_disk[e] += disk && k == LADE_ROUTE_OWN;
        }
      for (uint64_t j = v->tier ? v->admit_offset[g_rank] : 0; v->tier && j < v->admit_offset[g_rank + 1]; j++)
        adm[v->admit_tier[j] == LADE_TIER_DISK]++;
      for (uint64_t j = v->tier ? v->move_offset[g_rank] : 0; v->tier && j < v->move_offset[g_rank + 1]; j++)
        mv[v->move_to[j] == LADE_TIER_DISK]++;
    }
  }
  lade_plan_destroy(pl);
  snprintf(what, sizeof what, "%s: each rank trains on exactly the plan's samples, every sample once per epoch", tag);
  check(ok && order_ok && once_ok && pos == r->n, what);
  int counts_ok = 1;
  /* a node-aware plan with more than one rank per node and the memory cache alone shares the node's cache:
   * intra-node handoffs are reads of it (memory), not messages (docs/plan.md, Nodes) */
  int shared = node_aware(kind) && rpn > 1 && !g_two;
  for (uint64_t e = 0; e < EPOCHS; e++) {
    const lade_epoch_stats_t *es = &r->ep[e];
    uint64_t node = cnt[e][LADE_ROUTE_NODE], own = cnt[e][LADE_ROUTE_OWN] - cnt_disk[e];
    uint64_t peer = cnt[e][LADE_ROUTE_PEER] + (shared ? 0 : node), mem = own + (shared ? node : 0);
    if (es->samples_by_source[1] != mem || es->samples_by_source[2] != cnt_disk[e] ||
        es->samples_by_source[3] != peer || es->samples_by_source[0] != cnt[e][LADE_ROUTE_STORAGE] ||
        es->peer_samples_node != (shared ? 0 : node) || es->peer_bytes_node != (shared ? 0 : node) * SZ ||
        es->plan_node_reads != (shared ? node : 0) || es->plan_fallbacks || es->plan_peer_storage) {
      counts_ok = 0;
      fprintf(stderr, "rank %d %s epoch %llu: memory/peer/node sent/node read/storage %llu/%llu/%llu/%llu/%llu, plan "
              "own %llu, peer %llu, node %llu, storage %llu, fallbacks %llu\n", g_rank, tag, (unsigned long long)e,
              (unsigned long long)es->samples_by_source[1], (unsigned long long)es->samples_by_source[3],
              (unsigned long long)es->peer_samples_node, (unsigned long long)es->plan_node_reads,
              (unsigned long long)es->samples_by_source[0], (unsigned long long)cnt[e][LADE_ROUTE_OWN],
              (unsigned long long)cnt[e][LADE_ROUTE_PEER], (unsigned long long)cnt[e][LADE_ROUTE_NODE],
              (unsigned long long)cnt[e][LADE_ROUTE_STORAGE], (unsigned long long)es->plan_fallbacks);
    }
  }
  snprintf(what, sizeof what, "%s: per-rank cache/intra-node/inter-node/storage counts equal the plan's, no fallback%s",
           tag, shared ? " (intra-node handoffs read from the node's shared cache, no message)" : "");
  check(counts_ok, what);
  if (g_two) { /* two tiers: each tier's reads (above), admits and moves are the plan's; with the sends read from a
                * disk tier, the ranks' disk reads sum to the simulator's */
    const lade_stats_t *st = &r->st;
    int tiers_ok = st->plan_admits_mem == adm[0] && st->plan_admits_disk == adm[1] && st->plan_moves_up == mv[0] &&
                   st->plan_moves_down == mv[1];
    if (!tiers_ok)
      fprintf(stderr, "rank %d %s: admits %llu/%llu moves %llu/%llu, plan %llu/%llu, %llu/%llu\n", g_rank, tag,
              (unsigned long long)st->plan_admits_mem, (unsigned long long)st->plan_admits_disk,
              (unsigned long long)st->plan_moves_up, (unsigned long long)st->plan_moves_down,
              (unsigned long long)adm[0], (unsigned long long)adm[1], (unsigned long long)mv[0],
              (unsigned long long)mv[1]);
    snprintf(what, sizeof what, "%s: per-rank admits to each tier and moves between them equal the plan's", tag);
    check(tiers_ok, what);
    uint64_t d = st->peer_served_from_disk, dsum = 0;
    for (uint64_t e = 0; e < EPOCHS; e++) d += r->ep[e].samples_by_source[2];
    MPI_Allreduce(&d, &dsum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    snprintf(what, sizeof what, "%s: reads from disk tiers (own and sent) summed = the plan's (%llu)", tag,
             (unsigned long long)all_disk);
    check(dsum == all_disk && all_disk > 0, what);
  }
  /* per node: each rank adds its counts at its node; the sums equal the plan's per node */
  uint64_t mine[EPOCHS * 64 * 4] = {0}, sum[EPOCHS * 64 * 4];
  for (uint64_t e = 0; e < EPOCHS; e++) {
    uint64_t *m = mine + (e * 64 + (uint64_t)g_rank / rpn) * 4;
    m[LADE_ROUTE_OWN] = r->ep[e].samples_by_source[1] + r->ep[e].samples_by_source[2] - r->ep[e].plan_node_reads;
    m[LADE_ROUTE_NODE] = r->ep[e].peer_samples_node + r->ep[e].plan_node_reads;
    m[LADE_ROUTE_PEER] = r->ep[e].samples_by_source[3] - r->ep[e].peer_samples_node;
    m[LADE_ROUTE_STORAGE] = r->ep[e].samples_by_source[0];
  }
  MPI_Allreduce(mine, sum, EPOCHS * 64 * 4, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  int node_ok = prpn == (node_aware(kind) ? rpn : 1);
  for (uint64_t e = 0; e < EPOCHS; e++)
    for (uint32_t m = 0; m < nodes && m < 64; m++)
      for (int k = 0; k < 4; k++) node_ok &= sum[(e * 64 + m) * 4 + k] == pnode[e][m][k];
  snprintf(what, sizeof what, "%s: per-node counts (%u nodes) equal the plan's", tag, nodes);
  check(node_ok, what);
  /* the sums over ranks: the simulator's */
  lade_sim_costs_t costs = {0};
  lade_sim_epoch_t sim[EPOCHS];
  int sim_ok = lade_simulate(&s, sizeof s, &costs, sim, sizeof sim[0], NULL) == 0;
  for (uint64_t e = 0; sim_ok && e < EPOCHS; e++) {
    uint64_t tot[4] = {0};
    for (uint32_t m = 0; m < nodes && m < 64; m++)
      for (int k = 0; k < 4; k++) tot[k] += sum[(e * 64 + m) * 4 + k];
    sim_ok = tot[LADE_ROUTE_OWN] == sim[e].from_cache && tot[LADE_ROUTE_NODE] == sim[e].from_node &&
             tot[LADE_ROUTE_PEER] == sim[e].from_peer && tot[LADE_ROUTE_STORAGE] == sim[e].from_storage;
  }
  if (g_two && sim_ok) { /* the plan's disk reads (all_disk) and the ranks' admits and moves summed: the simulator's */
    uint64_t sd = 0, sims[4] = {0}, mine4[4] = {r->st.plan_admits_mem, r->st.plan_admits_disk, r->st.plan_moves_up,
                                                r->st.plan_moves_down}, tot4[4];
    for (uint64_t e = 0; e < EPOCHS; e++) {
      sd += sim[e].from_disk;
      sims[0] += sim[e].admits_mem, sims[1] += sim[e].admits_disk;
      sims[2] += sim[e].moves_up, sims[3] += sim[e].moves_down;
    }
    MPI_Allreduce(mine4, tot4, 4, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    sim_ok = sd == all_disk && !memcmp(tot4, sims, sizeof sims);
  }
  snprintf(what, sizeof what, "%s: the ranks' counts summed equal the simulator's", tag);
  check(sim_ok, what);
  uint64_t sent = r->st.peer_messages_sent, recv = r->st.samples_by_source[3], tot[2], my[2] = {sent, recv};
  MPI_Allreduce(my, tot, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  snprintf(what, sizeof what, "%s: samples sent = samples received (%llu)", tag, (unsigned long long)tot[0]);
  check(tot[0] == tot[1], what);
}

static void check_repeat_and_resume(void) {
  const char *kind = "locality";
  uint64_t cache = (uint64_t)(N / 4) * CHARGE;
  run(kind, cache, 0, 0, 0, 20000, &g_run);
  run(kind, cache, 0, 0, 0, 20000, &g_run2);
  check(g_run.rc == 0 && g_run2.rc == 0 && g_run.sum == g_run2.sum && g_run.n == g_run2.n,
        "locality: two runs give identical batches on every rank");
  uint64_t steps = g_run.steps, skip = (steps + steps / 2) * B;
  run(kind, cache, 1, steps / 2, 0, 20000, &g_run2);
  int ok = g_run2.rc == 0 && g_run2.content_ok && g_run2.n == g_run.n - skip &&
           memcmp(g_run2.idx, g_run.idx + skip, g_run2.n * sizeof *g_run2.idx) == 0;
  if (g_run2.rc) fprintf(stderr, "rank %d: resume: %s\n", g_rank, g_run2.err);
  check(ok, "locality: a run resumed mid-epoch 1 delivers the rest bit for bit");
  /* what the plan believed cached the resumed run reads from storage, counted */
  uint64_t fb = g_run2.st.plan_fallbacks + g_run2.st.peer_served_from_storage, all = 0;
  MPI_Allreduce(&fb, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  check(all > 0, "locality: the resumed run's cold caches are counted (fallbacks, peers served from storage)");
}

/* Rank 1 stops in epoch 1 and closes its loader: the others fail within the
 * bound, naming rank 1. */
/* Rank 1 stops early in epoch 1. rpn "1": a learner per machine,
 * distcache, the transport's bound; "4": one node of 4 sharing the node's
 * cache, solar with a quarter of the dataset cached (it evicts), the node
 * cache's bound: rank 1's step marks stop. (distcache and locality never
 * evict once their caches are full: there the others need nothing more of
 * rank 1 than its entries, and rightly run to the end.) */
static void check_fault_stop(const char *rpn) {
  g_rpn = rpn;
  uint32_t timeout_ms = 2000;
  int node = strcmp(rpn, "1") != 0;
  uint64_t stop = g_rank == 1 ? (uint64_t)N / (B * (uint64_t)g_world) + 3 : 0; /* early in epoch 1 */
  run(node ? "solar" : "distcache", (uint64_t)(N / 4) * CHARGE, 0, 0, stop, timeout_ms, &g_run);
  g_rpn = NULL;
  int ok, names1 = 0;
  if (g_rank == 1) {
    ok = g_run.rc == 0;
  } else {
    /* a rank waiting on rank 1 names it; one waiting on a rank that failed
     * in turn names that one: each fails within its bound */
    ok = g_run.rc != 0 && (strstr(g_run.err, "did not arrive from rank") || strstr(g_run.err, "no word from rank")) &&
         g_run.seconds < 30;
    names1 = strstr(g_run.err, "from rank 1 ") != NULL;
    fprintf(stderr, "rank %d: failed after %.1f s (rc %d, %llu samples) as expected: %s\n", g_rank, g_run.seconds, g_run.rc, (unsigned long long)g_run.n, g_run.err);
  }
  int any1 = 0;
  char what[200];
  MPI_Allreduce(&names1, &any1, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  snprintf(what, sizeof what, "ranks_per_node %s: a rank that stops mid-epoch is named by the ranks waiting for it",
           rpn);
  check(any1, what);
  snprintf(what, sizeof what, "ranks_per_node %s: a rank that stops mid-epoch: the others fail within the bound, "
           "naming whom they waited for", rpn);
  check(ok, what);
}

/* Every rank closes its loader partway through epoch 1 (a training loop
 * that breaks out), planned kinds whose steps ahead hold sends to peers
 * that close too: the close is prompt, not peer_timeout_ms (20 s here).
 * Before the transport's stop_waits a worker finishing a step waited for
 * its sends to a peer that had stopped granting: 20 s in most runs. */
static void check_close_early(void) {
  static const char *const kinds[] = {"distcache", "locality", "solar"};
  for (size_t k = 0; k < 3; k++) {
    g_rpn = "1"; /* every handoff a message */
    g_prefetch = "6";
    run(kinds[k], (uint64_t)(N / 8) * CHARGE, 0, 0, (uint64_t)N / (B * (uint64_t)g_world) + 5, 20000, &g_run);
    g_rpn = NULL;
    g_prefetch = NULL;
    double most = 0;
    MPI_Allreduce(&g_run.close_seconds, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    char what[160];
    snprintf(what, sizeof what, "%s: every rank closes its loader partway and promptly (slowest close %.2f s)",
             kinds[k], most);
    check(g_run.rc == 0 && most < 5, what);
  }
}

/* Rank 1 is far behind (prefetch 1, 30 ms a batch) while the others plan 40
 * steps ahead and push their sends as they plan them: rank 1's early
 * messages must stay within its own grant, 2 * (prefetch + 1) + 2 steps of
 * at most B samples, however far ahead the others plan. */
static void check_lag(void) {
  g_rpn = "1"; /* a learner per machine: the transport's backpressure */
  if (g_rank == 1) {
    g_prefetch = "1";
    g_step_us = 30000;
  } else {
    g_prefetch = "40";
  }
  run("distcache", (uint64_t)(N / g_world) * CHARGE, 0, 0, 0, 20000, &g_run);
  if (g_run.rc) fprintf(stderr, "rank %d: %s\n", g_rank, g_run.err);
  check(g_run.rc == 0 && g_run.content_ok && g_run.n == (uint64_t)EPOCHS * N / (uint64_t)g_world,
        "lag: every rank runs to the end with the source's bytes while rank 1 is far behind");
  uint64_t bound = (2 * (1 + 1) + 2) * (uint64_t)B * SZ, peak = g_run.st.peer_bytes_held_peak;
  fprintf(stderr, "rank %d: peer bytes held at most %llu (rank 1's bound %llu)\n", g_rank, (unsigned long long)peak,
          (unsigned long long)bound);
  uint64_t mine = g_rank == 1 ? g_run.st.samples_by_source[3] : 0, got = 0;
  MPI_Allreduce(&mine, &got, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  check(g_rank != 1 || (peak > 0 && peak <= bound),
        "lag: the peer bytes rank 1 holds early stay within its window (backpressure), however far ahead the others "
        "plan");
  check(got > 0, "lag: rank 1 received samples from its peers");
}

/* Opens a loader of `kind` and checks the node its stats report against
 * node = rank / rpn, local rank = rank % rpn; rank 0 prints every rank's. */
static void check_node(const char *kind, uint32_t rpn, const char *what) {
  lade_loader_t *L = open_loader(kind, (uint64_t)(N / 4) * CHARGE, 20000);
  lade_stats_t st;
  memset(&st, 0xff, sizeof st);
  int ok = L && lade_loader_stats(L, &st, sizeof st) == 0;
  if (L) lade_loader_destroy(L);
  unsigned mine[4] = {st.node, st.nodes, st.local_rank, st.ranks_per_node}, all[4 * 64] = {0};
  if (g_world <= 64) MPI_Gather(mine, 4, MPI_UNSIGNED, all, 4, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
  if (g_rank == 0) {
    printf("     %s: (node, local rank) by rank:", what);
    for (int r = 0; r < g_world && r < 64; r++) printf(" (%u, %u)", all[4 * r], all[4 * r + 2]);
    printf("\n");
  }
  ok = ok && st.node == (uint32_t)g_rank / rpn && st.nodes == (uint32_t)g_world / rpn &&
       st.local_rank == (uint32_t)g_rank % rpn && st.ranks_per_node == rpn;
  if (!ok) fprintf(stderr, "rank %d: %s: node %u of %u, local rank %u of %u\n", g_rank, what, st.node, st.nodes,
                   st.local_rank, st.ranks_per_node);
  check(ok, what);
}

/* Nodes (docs/transport.md, Nodes): the setting makes blocks of consecutive
 * ranks; detection finds this one machine (MPI's shared-memory split under
 * the mpi transport, the launcher's local rank and size without one); a
 * setting that does not divide the world, or that differs between ranks,
 * fails the creation on every rank, naming it. */
static void check_topology(void) {
  char what[160];
  g_rpn = "2";
  snprintf(what, sizeof what, "ranks_per_node=2: %d ranks in nodes of 2 consecutive ranks", g_world);
  check_node("locality", 2, what);
  g_rpn = NULL;
  /* without the launcher's local rank and size, only MPI's answer can tell */
  char lr[32] = "", ls[32] = "";
  const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (v) snprintf(lr, sizeof lr, "%s", v);
  if ((v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))) snprintf(ls, sizeof ls, "%s", v);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  snprintf(what, sizeof what, "detected under transport=mpi (MPI's shared split): one node of %d", g_world);
  check_node("locality", (uint32_t)g_world, what);
  if (lr[0]) setenv("OMPI_COMM_WORLD_LOCAL_RANK", lr, 1);
  if (ls[0]) setenv("OMPI_COMM_WORLD_LOCAL_SIZE", ls, 1);
  g_transport = "local";
  snprintf(what, sizeof what, "detected under transport=local (the launcher's local rank and size): one node of %d",
           g_world);
  check_node("regular", (uint32_t)g_world, what);
  g_transport = "mpi";
  g_rpn = "3";
  lade_loader_t *L = open_loader("locality", (uint64_t)(N / 4) * CHARGE, 20000);
  int ok = L == NULL && strstr(lade_last_error(), "'ranks_per_node' (3) must divide the world size");
  if (L) lade_loader_destroy(L);
  check(ok, "ranks_per_node=3 with 4 ranks fails the loader's creation on every rank, naming the setting");
  g_rpn = g_rank == 2 ? "1" : "2";
  L = open_loader("locality", (uint64_t)(N / 4) * CHARGE, 20000);
  ok = L == NULL && strstr(lade_last_error(), "setting 'ranks_per_node'") && strstr(lade_last_error(), "rank 2");
  if (L) lade_loader_destroy(L);
  check(ok, "a ranks_per_node that differs on rank 2 fails the loader's creation on every rank, naming it");
  g_rpn = NULL;
}

/* ---- resume at another world size: -np 4 saves, -np 2 loads */

#define RESIZE_STOP 3 /* steps of epoch 1 the saving run delivers */

static lade_loader_t *open_resize(const lade_position_t *pos) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char v[4200];
  snprintf(v, sizeof v, "%s/data", g_dir);
  const char *kv[][2] = {{"source", v}, {"transform", "raw"}, {"raw_size", "256"}, {"batch_size", "4"},
                         {"threads", "2"}, {"seed", "7"}, {"drop_last", "true"}, {"epochs", "3"},
                         {"plan", "locality"}, {"transport", "mpi"}, {"peer_timeout_ms", "5000"},
                         /* a learner per machine: the plan's caches are the ranks' (one machine runs them all) */
                         {"ranks_per_node", "1"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) lade_config_set(c, kv[i][0], kv[i][1]);
  char cache[64];
  snprintf(cache, sizeof cache, "%llu", (unsigned long long)(N / (uint64_t)g_world) * CHARGE); /* the dataset */
  lade_config_set(c, "cache_mem_bytes", cache);
  if (pos && lade_config_set_position(c, pos, sizeof *pos)) fprintf(stderr, "rank %d: %s\n", g_rank, lade_last_error());
  lade_loader_t *L = NULL;
  if (lade_loader_create(&L, c)) fprintf(stderr, "rank %d: create: %s\n", g_rank, lade_last_error());
  lade_config_destroy(c);
  return L;
}

static void check_resize_save(const char *file) {
  lade_loader_t *L = open_resize(NULL);
  uint64_t samples = 0, steps = 0, epochs = 0, mine[N], n = 0;
  int ok = L != NULL;
  if (L) lade_loader_info(L, &samples, &steps, &epochs);
  lade_batch_t *b = NULL;
  for (uint64_t k = 0; ok && k < steps + RESIZE_STOP; k++) {
    ok = lade_loader_next(L, &b) == 0 && b;
    if (!ok) break;
    if (b->epoch == 1)
      for (uint32_t i = 0; i < b->valid; i++) mine[n++] = (uint64_t)b->indices[i];
    lade_batch_release(b);
  }
  lade_position_t pos, all[64];
  memset(&pos, 0, sizeof pos);
  ok = ok && lade_loader_position(L, 1, RESIZE_STOP, &pos, sizeof pos) == 0;
  MPI_Gather(&pos, (int)sizeof pos, MPI_BYTE, all, (int)sizeof pos, MPI_BYTE, 0, MPI_COMM_WORLD);
  int same = 1;
  for (int r = 1; g_rank == 0 && r < g_world && r < 64; r++) same &= memcmp(&all[r], &all[0], sizeof pos) == 0;
  MPI_Bcast(&same, 1, MPI_INT, 0, MPI_COMM_WORLD);
  uint64_t cnt = n, counts[64] = {0}, cons[N], total = 0;
  MPI_Gather(&cnt, 1, MPI_UINT64_T, counts, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  int displs[64] = {0}, rc_counts[64] = {0};
  for (int r = 0; g_rank == 0 && r < g_world; r++) {
    rc_counts[r] = (int)counts[r];
    displs[r] = (int)total;
    total += counts[r];
  }
  MPI_Gatherv(mine, (int)n, MPI_UINT64_T, cons, rc_counts, displs, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (g_rank == 0 && ok) {
    FILE *f = fopen(file, "wb");
    ok = f && fwrite(&pos, sizeof pos, 1, f) == 1 && fwrite(&total, sizeof total, 1, f) == 1 &&
         fwrite(cons, sizeof *cons, total, f) == total;
    if (f) fclose(f);
  }
  if (L) lade_loader_destroy(L);
  check(ok, "resize: 4 ranks run locality into epoch 1; rank 0's position saved");
  check(same, "resize: the position is global (every rank's is rank 0's)");
  check(pos.consumed == (uint64_t)RESIZE_STOP * B * (uint64_t)g_world && pos.world_size == (uint32_t)g_world,
        "resize: the position counts what all ranks consumed");
}

static void check_resize_load(const char *file) {
  lade_position_t pos;
  uint64_t total = 0, cons[N];
  FILE *f = fopen(file, "rb");
  int ok = f && fread(&pos, sizeof pos, 1, f) == 1 && fread(&total, sizeof total, 1, f) == 1 && total <= N &&
           fread(cons, sizeof *cons, total, f) == total;
  if (f) fclose(f);
  check(ok, "resize: the saved position and consumed samples read back");
  if (!ok) return;
  lade_loader_t *L = open_resize(&pos);
  ok = L != NULL;
  uint64_t steps = 0, mine[N], n = 0, cnt[EPOCHS][3] = {{0}}, first_e = 0, first_s = 0;
  if (L) {
    lade_loader_info(L, NULL, &steps, NULL);
    lade_loader_start(L, &first_e, &first_s);
  }
  int bytes_ok = 1;
  lade_batch_t *b = NULL;
  int rc = 0;
  while (ok && (rc = lade_loader_next(L, &b)) == 0 && b) {
    for (int64_t i = 0; i < b->shape[0]; i++)
      for (int k = 0; k < SZ; k++)
        if (((const uint8_t *)b->data)[(size_t)i * SZ + k] != byte_of((uint64_t)b->indices[i], k)) bytes_ok = 0;
    if (b->epoch == 1)
      for (uint32_t i = 0; i < b->valid; i++) mine[n++] = (uint64_t)b->indices[i];
    lade_batch_release(b);
  }
  if (rc) fprintf(stderr, "rank %d: %s\n", g_rank, lade_last_error());
  ok = ok && rc == 0;
  check(ok && bytes_ok, "resize: 2 ranks resume 4 ranks' position and run to the end with the source's bytes");
  /* the plan from the same resume point, for 2 learners */
  lade_plan_settings_t s = settings("locality", (uint64_t)(N / (uint64_t)g_world) * CHARGE);
  s.resume = 1;
  s.resume_epoch = pos.epoch;
  s.resume_shuffle_epoch = pos.shuffle_epoch;
  s.resume_consumed = pos.consumed;
  lade_plan_t *pl = NULL;
  int plan_ok = lade_plan_create(&pl, &s, sizeof s) == 0;
  const lade_plan_step_t *v = NULL;
  while (plan_ok && lade_plan_next(pl, &v) == 0)
    for (uint64_t i = v->offset[g_rank]; i < v->offset[g_rank + 1]; i++)
      cnt[v->epoch][v->from[i] == LADE_FROM_CACHE ? 0 : v->from[i] >= 0 ? 1 : 2]++;
  lade_plan_destroy(pl);
  uint64_t peer = 0;
  for (uint64_t e = 1; ok && e < EPOCHS; e++) {
    lade_epoch_stats_t es;
    ok = lade_loader_epoch_stats(L, e, &es, sizeof es) == 0 && es.samples_by_source[1] == cnt[e][0] &&
         es.samples_by_source[3] == cnt[e][1] && es.samples_by_source[0] == cnt[e][2] && !es.plan_fallbacks &&
         !es.plan_peer_storage;
    peer += es.samples_by_source[3];
    if (!ok)
      fprintf(stderr, "rank %d epoch %llu: cache/peer/storage %llu/%llu/%llu, plan %llu/%llu/%llu\n", g_rank,
              (unsigned long long)e, (unsigned long long)es.samples_by_source[1],
              (unsigned long long)es.samples_by_source[3], (unsigned long long)es.samples_by_source[0],
              (unsigned long long)cnt[e][0], (unsigned long long)cnt[e][1], (unsigned long long)cnt[e][2]);
  }
  check(plan_ok && ok,
        "resize: per-rank cache/peer/storage counts equal the plan's from the resume point, no fallback");
  uint64_t all_peer = 0;
  MPI_Allreduce(&peer, &all_peer, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  check(all_peer > 0, "resize: the resumed ranks send each other samples over MPI");
  if (L) lade_loader_destroy(L);
  /* the rest of epoch 1 over both ranks and what the 4 ranks consumed: every sample once */
  uint64_t cn = n, counts[64] = {0}, rest[N], got = 0;
  MPI_Gather(&cn, 1, MPI_UINT64_T, counts, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  int displs[64] = {0}, rc_counts[64] = {0};
  for (int r = 0; g_rank == 0 && r < g_world; r++) {
    rc_counts[r] = (int)counts[r];
    displs[r] = (int)got;
    got += counts[r];
  }
  MPI_Gatherv(mine, (int)n, MPI_UINT64_T, rest, rc_counts, displs, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  int once = 1;
  if (g_rank == 0) {
    uint32_t seen[N] = {0};
    for (uint64_t i = 0; i < total; i++) seen[cons[i]]++;
    for (uint64_t i = 0; i < got && got <= N; i++) seen[rest[i]]++;
    for (uint64_t x = 0; x < N; x++) once &= seen[x] == 1;
    printf("     resize: %llu consumed by 4 ranks, %llu delivered after the resume by 2, from (epoch %llu, "
           "step %llu)\n",
           (unsigned long long)total, (unsigned long long)got, (unsigned long long)first_e,
           (unsigned long long)first_s);
  }
  MPI_Bcast(&once, 1, MPI_INT, 0, MPI_COMM_WORLD);
  check(once, "resize: the 4 ranks' part of epoch 1 and the 2 ranks' rest hold every sample exactly once");
}

/* ---- warm restarts over MPI: every rank's surviving disk cache seeds the plan */

static lade_loader_t *open_warm(const lade_position_t *pos) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char v[4200], dir[4200], bytes[64];
  snprintf(v, sizeof v, "%s/data", g_dir);
  snprintf(dir, sizeof dir, "%s/warm%d", g_dir, g_rank);
  snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)(N / (uint64_t)g_world / 2) * 4096); /* 4 KiB an entry */
  const char *kv[][2] = {{"source", v}, {"transform", "raw"}, {"raw_size", "256"}, {"batch_size", "4"},
                         {"threads", "2"}, {"seed", "7"}, {"drop_last", "true"}, {"epochs", "3"},
                         {"plan", "locality"}, {"transport", "mpi"}, {"peer_timeout_ms", "5000"},
                         {"cache_dir", dir}, {"cache_disk_bytes", bytes}, {"ranks_per_node", "1"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) lade_config_set(c, kv[i][0], kv[i][1]);
  if (pos) lade_config_set_position(c, pos, sizeof *pos);
  lade_loader_t *L = NULL;
  if (lade_loader_create(&L, c)) fprintf(stderr, "rank %d: create: %s\n", g_rank, lade_last_error());
  lade_config_destroy(c);
  return L;
}

/* Runs a loader from pos to the end: bytes checked, per-epoch (cache, peer, storage, fallbacks). */
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
  if (L) lade_loader_info(L, NULL, &steps, NULL);
  lade_batch_t *b = NULL;
  for (uint64_t k = 0; ok && k < steps + 2; k++) {
    ok = lade_loader_next(L, &b) == 0 && b;
    if (ok) lade_batch_release(b);
  }
  lade_position_t pos;
  ok = ok && lade_loader_position(L, 1, 2, &pos, sizeof pos) == 0;
  if (L) lade_loader_destroy(L);
  check(ok, "warm: every rank runs locality with a disk cache into epoch 1 and stops");
  MPI_Barrier(MPI_COMM_WORLD);
  /* what survived on every rank's disk: its entry files, in index order, at most the plan's cache */
  lade_plan_settings_t s = settings("locality", (uint64_t)(N / (uint64_t)g_world / 2) * CHARGE);
  s.resume = 1;
  s.resume_epoch = pos.epoch;
  s.resume_shuffle_epoch = pos.shuffle_epoch;
  s.resume_consumed = pos.consumed;
  lade_plan_t *pl = NULL;
  int plan_ok = lade_plan_create(&pl, &s, sizeof s) == 0;
  uint64_t total = 0;
  for (int r = 0; plan_ok && r < g_world; r++) {
    char cmd[4500];
    snprintf(cmd, sizeof cmd, "find '%s/warm%d' -type f | grep -E '/[0-9a-f]{16}$' | sed 's#.*/##' | sort", g_dir, r);
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
  MPI_Barrier(MPI_COMM_WORLD); /* every rank listed the files before any restart changes them */
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
  check(same, "warm: per-rank cache/peer/storage counts equal the plan's from every rank's surviving caches");
  char cmd[4500];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/warm%d'", g_dir, g_rank);
  if (system(cmd) != 0) ok = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  ok = run_warm(&pos, cold) && ok;
  uint64_t mine[2] = {0, 0}, sum[2];
  for (uint64_t e = pos.epoch; e < EPOCHS; e++) {
    mine[0] += got[e][2];
    mine[1] += cold[e][2];
  }
  MPI_Allreduce(mine, sum, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0)
    printf("     warm: %llu entries survived on %d ranks; storage reads after the restart %llu, cold %llu\n",
           (unsigned long long)total, g_world, (unsigned long long)sum[0], (unsigned long long)sum[1]);
  check(ok && sum[0] < sum[1], "warm: the warm restart reads less from storage than a cold one");
}

int main(int argc, char **argv) {
  int prov = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  if (argc < 2) {
    if (g_rank == 0) fprintf(stderr, "usage: mpirun -np P mpi_check DIR [all|fault-stop|lag|mismatch|topology]\n");
    MPI_Finalize();
    return 2;
  }
  if (prov < MPI_THREAD_MULTIPLE) {
    if (g_rank == 0) printf("skip: this MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n", prov);
    MPI_Finalize();
    return 77;
  }
  snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
  make_dataset();
  const char *mode = argc > 2 ? argv[2] : "all";
  if (!strcmp(mode, "fault-stop")) {
    check_fault_stop(argc > 3 ? argv[3] : "1");
  } else if (!strcmp(mode, "warm")) {
    check_warm();
  } else if (!strcmp(mode, "resize-save") && argc > 3) {
    check_resize_save(argv[3]);
  } else if (!strcmp(mode, "resize-load") && argc > 3) {
    check_resize_load(argv[3]);
  } else if (!strcmp(mode, "close-early")) {
    check_close_early();
  } else if (!strcmp(mode, "lag")) {
    check_lag();
  } else if (!strcmp(mode, "topology")) {
    check_topology();
  } else if (!strcmp(mode, "mismatch")) {
    if (g_rank == 2) g_seed = "8";
    lade_loader_t *L = open_loader("locality", (uint64_t)(N / 4) * CHARGE, 20000);
    const char *e = lade_last_error();
    int ok = L == NULL && strstr(e, "setting 'seed'") && strstr(e, "rank 2");
    if (!ok) fprintf(stderr, "rank %d: %s\n", g_rank, L ? "created" : e);
    if (L) lade_loader_destroy(L);
    check(ok, "a seed that differs on rank 2 fails the loader's creation on every rank, naming it");
  } else {
    static const char *const kinds[] = {"regular+lru", "regular+belady", "distcache", "locality", "solar"};
    /* one node per rank, 2 nodes of 2, 1 node of 4: the node-aware kinds' cache is per node */
    static const char *const rpns[] = {"1", "2", "4"};
    for (size_t n = 0; n < 3; n++) {
      g_rpn = rpns[n];
      uint32_t rpn = (uint32_t)atoi(g_rpn), holders;
      if (g_world % (int)rpn) continue;
      for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        /* the node-aware kinds cache per node; regular+lru/belady per learner, whatever the nodes */
        holders = node_aware(kinds[k]) ? (uint32_t)g_world / rpn : (uint32_t)g_world;
        check_kind(kinds[k], (uint64_t)(N / holders) * CHARGE);     /* the aggregate cache holds the dataset */
        check_kind(kinds[k], (uint64_t)(N / holders / 2) * CHARGE); /* half of it */
      }
    }
    /* solar's two tiers (docs/plan.md, Two tiers): a node's memory cache of an eighth, a disk tier of a quarter */
    for (size_t n = 0; n < 3; n++) {
      g_rpn = rpns[n];
      uint32_t rpn = (uint32_t)atoi(g_rpn);
      if (g_world % (int)rpn) continue;
      uint32_t holders = (uint32_t)g_world / rpn;
      g_two = N / holders / 4;
      check_kind("solar", (uint64_t)(N / holders / 8) * CHARGE);
      g_two = 0;
    }
    g_rpn = NULL;
    check_repeat_and_resume();
  }
  MPI_Finalize();
  return g_fail;
}
