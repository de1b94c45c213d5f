/*
 * main.c - the `lade` command: gen, bench, demo, ls (here), pack (pack.c,
 * pack_hdf5.c), probe (probe.c) and plan, simulate, model (plan_cli.c). Uses the public header only.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ceiling.h"
#include "dlio.h"
#include "gen_jpeg.h"
#include "gen_npy.h"
#include "lade/lade.h"
#include "lade/plan.h"
#ifdef LADE_HAVE_MPI
#include <mpi.h>
#endif
#include "pack.h"
#include "plan_cli.h"
#include "probe.h"
#include "shown.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int usage_main(FILE *f) {
  fprintf(f,
          "lade %s - a data loader for deep-learning training\n\n"
          "usage: lade <command> [options]   (lade <command> --help for each)\n\n"
          "commands:\n"
          "  gen jpeg|npy DIR   generate a deterministic synthetic dataset\n"
          "  bench DIR          load a dataset and report throughput, latency, memory, checksum\n"
          "  demo               generate ./lade-demo if absent and benchmark it\n"
          "  ls SOURCE          list the samples as the loader sees them\n"
          "  pack DIR --to tar  write a dataset as WebDataset tar shards (--to hdf5: one HDF5 file)\n"
          "  probe FILE.h5      time per-sample vs coalesced HDF5 reads; prints the hdf5_gap to use\n"
          "  plan               compute a loading plan (which learner loads which sample from where)\n"
          "  simulate           run plans without I/O and report storage/peer/cache traffic\n"
          "  model              evaluate the analytical performance and cost models\n"
          "  dlio               DLIO / MLPerf Storage workloads: datagen, run (accelerator utilisation), sweep\n"
          "  settings           list every loader setting with its default\n",
          lade_version());
  return f == stderr ? 2 : 0;
}

/* ------------------------------------------------------------------ gen */

static int usage_gen(FILE *f) {
  fprintf(f,
          "usage: lade gen jpeg DIR --count N [--seed S]\n"
          "       lade gen npy DIR --count N [--shape D1,D2,...] [--seed S] [--stacked]\n\n"
          "jpeg: ImageNet-like JPEGs (about 500x375, quality 90, ~100 KB) in ImageFolder layout,\n"
          "      10 classes class_00..class_09.\n"
          "npy:  float32 .npy samples of the given shape (default 32,32,32 = 128 KiB) in the same\n"
          "      10-class layout, or one stacked N x shape file DIR/data.npy with --stacked.\n"
          "The same arguments always produce the same bytes.\n");
  return f == stderr ? 2 : 0;
}

static int parse_u64(const char *s, uint64_t *out, const char *what) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!s[0] || *end || errno || s[0] == '-') {
    fprintf(stderr, "lade: %s '%s' is not a non-negative integer\n", what, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int cmd_gen(int argc, char **argv) {
  static const struct option opts[] = {{"count", required_argument, 0, 'n'}, {"seed", required_argument, 0, 's'},
                                       {"shape", required_argument, 0, 'S'}, {"stacked", no_argument, 0, 'k'},
                                       {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
  uint64_t count = 0, seed = 0;
  const char *shape = "32,32,32";
  int stacked = 0, have_count = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "n:s:S:kh", opts, NULL)) != -1) {
    switch (c) {
      case 'n':
        if (parse_u64(optarg, &count, "--count")) return 2;
        have_count = 1;
        break;
      case 's':
        if (parse_u64(optarg, &seed, "--seed")) return 2;
        break;
      case 'S': shape = optarg; break;
      case 'k': stacked = 1; break;
      case 'h': return usage_gen(stdout);
      default: return usage_gen(stderr);
    }
  }
  if (argc - optind != 2 || !have_count) return usage_gen(stderr);
  const char *kind = argv[optind], *dir = argv[optind + 1];
  if (count == 0) {
    fprintf(stderr, "lade gen: --count must be at least 1\n");
    return 2;
  }
  char err[512] = "";
  double t0 = now();
  int rc;
  if (strcmp(kind, "jpeg") == 0) {
    rc = lade_tool_gen_jpeg(dir, count, seed, err, sizeof err);
  } else if (strcmp(kind, "npy") == 0) {
    rc = lade_tool_gen_npy(dir, count, seed, shape, stacked, err, sizeof err);
  } else {
    fprintf(stderr, "lade gen: unknown kind '%s' (jpeg|npy)\n", kind);
    return 2;
  }
  if (rc) {
    fprintf(stderr, "lade gen: %s\n", err);
    return 1;
  }
  printf("generated %llu %s samples in %s (%.1f s)\n", (unsigned long long)count, kind, dir, now() - t0);
  return 0;
}

/* ---------------------------------------------------------------- bench */

static int usage_bench(FILE *f) {
  fprintf(f,
          "usage: lade bench DIR [options]\n\n"
          "Loads every batch of the dataset at DIR and reports samples/s, MB/s, first-batch\n"
          "latency, peak RSS, the per-stage time breakdown and a checksum of all delivered\n"
          "batch bytes in order (equal checksums = identical batches).\n\n"
          "  --transform T     raw|npy|imagenet-train|imagenet-eval (default: by source)\n"
          "  --batch-size B    samples per batch (default 32)\n"
          "  --epochs E        epochs (default 1)\n"
          "  --threads T       worker threads (default: online cores)\n"
          "  --prefetch K      batches prepared ahead (default 2)\n"
          "  --seed S          shuffle and augmentation seed (default 0)\n"
          "  --plan NAME       %s (default regular);\n"
          "                    prints per epoch where samples came from beside the plan's prediction\n"
          "                    (options: --set plan_balance=..., plan_reorder=..., plan_order=...)\n"
          "  --set KEY=VALUE   any loader setting (repeatable; `lade settings` lists them)\n"
          "  --max-batches N   stop after N batches\n"
          "  --no-checksum     do not read the delivered bytes (pure loader rate)\n"
          "  --step-ms MS      sleep MS per batch after taking it (a stand-in for the training step,\n"
          "                    so the loader can work ahead; the consumer wait is what it could not hide)\n"
          "  --no-ceiling      skip the ceiling: after the run, the machine's bare read rate of\n"
          "                    (up to 256 of) the same files and, for the imagenet transforms, its bare\n"
          "                    whole-image JPEG decode rate, with the same threads, and lade's fraction\n"
          "                    of each (local folders only; about a second)\n"
          "  --json            one JSON object on stdout instead of text\n",
          lade_tool_plan_names("|"));
  return f == stderr ? 2 : 0;
}

/* Peak RSS of this process. VmHWM belongs to the address space, so unlike
 * getrusage's ru_maxrss it does not inherit a parent's peak across exec. */
static double peak_rss_mib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kib = strtod(line + 6, NULL);
  if (f) fclose(f);
  if (kib < 0) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    kib = (double)ru.ru_maxrss;
  }
  return kib / 1024.0;
}

static void progress(double frac, double rate, int done) {
  int width = 30, fill = (int)(frac * width + 0.5);
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = '\0';
  fprintf(stderr, "\r[%s] %5.1f%%  %10.0f samples/s%s", bar, frac * 100.0, rate, done ? "\n" : "");
  fflush(stderr);
}

/* The plan's prediction for one rank: per epoch, samples from its own cache,
 * from peers and from storage (lade_plan_step_t.from), by the same planner
 * the loader runs; PRED_HANDOFF: of the peer samples, those from a rank of
 * its own node (a node-aware plan's intra-node handoffs). */
enum { PRED_CACHE = 0, PRED_PEER, PRED_STORAGE, PRED_HANDOFF };
static int predict_rank(const lade_plan_settings_t *s, uint32_t rank, uint64_t epochs, uint64_t (*pred)[4]) {
  lade_plan_t *pl = NULL;
  int rc = lade_plan_create(&pl, s, sizeof *s);
  const lade_plan_step_t *v = NULL;
  while (!rc && (rc = lade_plan_next(pl, &v)) == 0 && v->epoch < epochs)
    for (uint64_t i = v->offset[rank]; i < v->offset[rank + 1]; i++) {
      pred[v->epoch][v->from[i] == LADE_FROM_CACHE ? PRED_CACHE : v->from[i] >= 0 ? PRED_PEER : PRED_STORAGE]++;
      pred[v->epoch][PRED_HANDOFF] += lade_plan_route_class(v->from[i], rank, v->ranks_per_node) == LADE_ROUTE_NODE;
    }
  lade_plan_destroy(pl);
  return rc == LADE_ERANGE || (v && v->epoch >= epochs) ? 0 : rc;
}

#ifdef LADE_HAVE_MPI
/* Under mpirun/srun `lade bench` is an MPI program: it initialises MPI with
 * MPI_THREAD_MULTIPLE before the loader (which then runs its transport
 * beside it, as beside mpi4py) so it can sum every rank's counts at the end. */
static int g_cli_mpi;
static void cli_mpi_init(void) {
  const char *w = getenv("OMPI_COMM_WORLD_SIZE");
  if (!w) w = getenv("PMI_SIZE");
  if (!w || strtoul(w, NULL, 10) < 2) return;
  int prov = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &prov) == MPI_SUCCESS) g_cli_mpi = 1 + (prov >= MPI_THREAD_MULTIPLE);
}
static void cli_mpi_done(void) {
  if (g_cli_mpi) MPI_Finalize();
  g_cli_mpi = 0;
}
#else
static void cli_mpi_init(void) {}
static void cli_mpi_done(void) {}
#endif

typedef struct bench_opts {
  const char *dir;
  uint64_t max_batches;
  int json, checksum, ceiling;
  double step_ms;
} bench_opts_t;

enum { CEILING_FILES = 256 };

/* The loader's world size (1 when it has no plan settings). */
static uint32_t planned_world(lade_loader_t *L) {
  lade_plan_settings_t ps;
  uint32_t rank = 0;
  return lade_loader_plan_settings(L, &ps, sizeof ps, &rank) == 0 && ps.learners ? ps.learners : 1;
}

/* The paths of up to CEILING_FILES samples spread evenly over the dataset,
 * for the ceiling (NULL with *why set when the source has no local files). */
static char **ceiling_paths(lade_loader_t *L, const char *dir, uint64_t nsamples, uint64_t *n, char *why, size_t wsize) {
  *n = 0;
  if (strstr(dir, "://")) {
    snprintf(why, wsize, "a remote source");
    return NULL;
  }
  uint64_t k = nsamples < CEILING_FILES ? nsamples : CEILING_FILES;
  char **paths = calloc(k ? k : 1, sizeof *paths);
  for (uint64_t i = 0; paths && i < k; i++) {
    char path[2 * 4096];
    struct stat st;
    if (lade_loader_sample(L, i * nsamples / k, path, sizeof path, NULL) || stat(path, &st) || !S_ISREG(st.st_mode)) {
      snprintf(why, wsize, "samples that are not files of their own (tar, HDF5, stacked .npy)");
      for (uint64_t j = 0; j < i; j++) free(paths[j]);
      free(paths);
      return NULL;
    }
    paths[i] = strdup(path);
  }
  *n = k;
  return paths;
}

static int run_bench(lade_config_t *cfg, const bench_opts_t *o) {
  lade_loader_t *L = NULL;
  double t0 = now();
  if (lade_loader_create(&L, cfg)) {
    fprintf(stderr, "lade bench: %s\n", lade_tool_error());
    return 1;
  }
  uint64_t nsamples = 0, steps = 0, epochs = 0;
  if (lade_loader_info(L, &nsamples, &steps, &epochs)) {
    fprintf(stderr, "lade bench: %s\n", lade_tool_error());
    lade_loader_destroy(L);
    return 1;
  }
  uint64_t total = steps * epochs;
  if (o->max_batches && o->max_batches < total) total = o->max_batches;
  int tty = isatty(2) && !o->json;
  uint64_t sum = 0, batches = 0, samples = 0, out_bytes = 0, last_epoch = 0;
  double first = 0, last_report = t0;
  enum { MAX_EPOCH_T = 64 };
  double ep_start[MAX_EPOCH_T + 1] = {t0}; /* when each epoch's first batch came (epoch 0: create) */
  int rc = 0;
  char shape[128] = "";
  const char *dtype = "";
  while (batches < total) {
    lade_batch_t *b = NULL;
    rc = lade_loader_next(L, &b);
    if (rc) {
      fprintf(stderr, "%slade bench: error: %s\n", tty ? "\n" : "", lade_tool_error());
      break;
    }
    if (!b) break;
    if (batches == 0) {
      first = now() - t0;
      size_t n = 0;
      for (int i = 0; i < b->ndim; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? "x" : "", (long long)b->shape[i]);
      dtype = lade_dtype_name(b->dtype);
    }
    if (o->checksum) sum = lade_checksum(b->data, b->nbytes, sum);
    samples += (uint64_t)b->shape[0];
    out_bytes += b->nbytes;
    batches++;
    uint64_t ep = b->epoch;
    if (ep > 0 && ep < MAX_EPOCH_T && ep_start[ep] == 0) ep_start[ep] = now();
    lade_batch_release(b);
    if (o->step_ms > 0) {
      struct timespec ts = {(time_t)(o->step_ms / 1e3), (long)(fmod(o->step_ms, 1e3) * 1e6)};
      nanosleep(&ts, NULL);
    }
    double t = now();
    if (tty && (t - last_report > 0.2 || batches == total)) {
      progress((double)batches / (double)total, (double)samples / (t - t0), batches == total);
      last_report = t;
    } else if (!tty && !o->json) {
      /* a plain line per finished epoch (the batch just counted may be the
       * first of the next one) */
      if (ep != last_epoch)
        printf("epoch %llu done: %llu batches, %.0f samples/s so far\n", (unsigned long long)last_epoch,
               (unsigned long long)(batches - 1), (double)samples / (t - t0));
      if (batches == total)
        printf("epoch %llu done: %llu batches, %.0f samples/s so far\n", (unsigned long long)ep,
               (unsigned long long)batches, (double)samples / (t - t0));
      last_epoch = ep;
    }
  }
  double elapsed = now() - t0;
  double t_end = now();
  lade_stats_t st;
  lade_loader_stats(L, &st, sizeof(lade_stats_t));
  enum { MAX_EPOCH_LINES = 64 };
  lade_epoch_stats_t eps[MAX_EPOCH_LINES];
  int neps = 0;
  while (neps < MAX_EPOCH_LINES && lade_loader_epoch_stats(L, (uint64_t)neps, &eps[neps], sizeof(lade_epoch_stats_t)) == 0) neps++;
  lade_plan_settings_t ps;
  uint32_t prank = 0;
  int planned = !lade_loader_plan_settings(L, &ps, sizeof ps, &prank) && ps.kind != LADE_PLAN_REGULAR && ps.kind < LADE_PLAN_KIND_COUNT;
  char transform[64] = "";
  lade_config_get(cfg, "transform", transform, sizeof transform);
  lade_tool_ceiling_t cl = {.threads = (int)st.threads};
  char cpu[256];
  lade_tool_cpu_model(cpu, sizeof cpu);
  uint64_t nceil = 0;
  int ceiling = o->ceiling;
  if (ceiling && planned_world(L) > 1) {
    snprintf(cl.why, sizeof cl.why, "%u ranks share the machine", planned_world(L));
    ceiling = 0;
  }
  char **cpaths = !rc && ceiling ? ceiling_paths(L, o->dir, nsamples, &nceil, cl.why, sizeof cl.why) : NULL;
  lade_loader_destroy(L);
  if (cpaths) { /* after the loader is gone: nothing else runs beside it */
    lade_tool_ceiling((const char *const *)cpaths, nceil, (int)st.threads, !strncmp(transform, "imagenet", 8), &cl);
    for (uint64_t i = 0; i < nceil; i++) free(cpaths[i]);
    free(cpaths);
  }
  for (char *c = cl.why; *c; c++) /* it goes into JSON as it is */
    if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '?';
  if (rc) return 1;
  static uint64_t pred[MAX_EPOCH_LINES][4];
  memset(pred, 0, sizeof pred);
  if (planned && predict_rank(&ps, prank, (uint64_t)neps, pred)) {
    fprintf(stderr, "lade bench: the plan's prediction: %s\n", lade_tool_error());
    planned = 0;
  }
  double ep_secs[MAX_EPOCH_LINES] = {0};
  for (int e = 0; e < neps && e < MAX_EPOCH_T; e++) {
    double next = e + 1 < MAX_EPOCH_T && e + 1 < neps && ep_start[e + 1] > 0 ? ep_start[e + 1] : t_end;
    ep_secs[e] = next - ep_start[e];
  }
  /* by the plan's routes: the own cache (memory and disk tiers), peers (intra-node handoffs read from the node's
   * shared cache too: docs/plan.md, Nodes), storage */
#define CACHED(e) (eps[e].samples_by_source[1] + eps[e].samples_by_source[2] - eps[e].plan_node_reads)
#define PEERED(e) (eps[e].samples_by_source[3] + eps[e].plan_peer_storage + eps[e].plan_node_reads)
  /* every rank's counts summed (under mpirun): cache, peer, storage, the
   * plan's three, fallbacks; the slowest rank's epoch time, the waits summed */
  static uint64_t agg[MAX_EPOCH_LINES][7];
  static double agg_t[MAX_EPOCH_LINES], agg_w[MAX_EPOCH_LINES];
  int aggregated = 0, my_rank = 0;
#ifdef LADE_HAVE_MPI
  if (planned && g_cli_mpi == 2) {
    static uint64_t mine[MAX_EPOCH_LINES][7];
    double t[MAX_EPOCH_LINES], w[MAX_EPOCH_LINES];
    for (int e = 0; e < neps; e++) {
      uint64_t v[7] = {CACHED(e), PEERED(e),
                       eps[e].samples_by_source[0] - eps[e].plan_peer_storage, pred[e][PRED_CACHE],
                       pred[e][PRED_PEER], pred[e][PRED_STORAGE], eps[e].plan_fallbacks};
      memcpy(mine[e], v, sizeof v);
      t[e] = ep_secs[e];
      w[e] = eps[e].wait_seconds;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
    aggregated = MPI_Allreduce(mine, agg, neps * 7, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS &&
                 MPI_Allreduce(t, agg_t, neps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS &&
                 MPI_Allreduce(w, agg_w, neps, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
  }
#endif
  int tiers = st.samples_by_source[1] || st.samples_by_source[2] || st.cache_misses || st.prefetched;
  int remote = st.get_requests || st.list_requests;
  double rate = elapsed > 0 ? (double)samples / elapsed : 0;
  double mbs_in = elapsed > 0 ? (double)st.bytes_read / elapsed / 1e6 : 0;
  double mbs_out = elapsed > 0 ? (double)out_bytes / elapsed / 1e6 : 0;
  char sumtxt[32] = "null";
  if (o->checksum) snprintf(sumtxt, sizeof sumtxt, "\"%016llx\"", (unsigned long long)sum);
  if (o->json) {
    printf("{\"dataset\":\"%s\",\"transform\":\"%s\",\"samples_in_dataset\":%llu,\"batches\":%llu,\"samples\":%llu,"
           "\"batch_shape\":\"%s\",\"dtype\":\"%s\",\"seconds\":%.6f,\"samples_per_s\":%.1f,\"read_mb_per_s\":%.2f,"
           "\"output_mb_per_s\":%.2f,\"first_batch_ms\":%.3f,\"peak_rss_mib\":%.1f,\"pool_mib\":%.1f,\"threads\":%u,"
           "\"read_s\":%.4f,\"transform_s\":%.4f,\"collate_s\":%.4f,\"wait_s\":%.4f,\"latency_p50_ms\":%.3f,"
           "\"latency_p90_ms\":%.3f,\"latency_p99_ms\":%.3f,\"substituted\":%llu,\"checksum\":%s,"
           "\"samples_by_source\":[%llu,%llu,%llu],\"bytes_by_source\":[%llu,%llu,%llu],\"cache_misses\":%llu,"
           "\"prefetched\":%llu,\"get_requests\":%llu,\"list_requests\":%llu,\"retries\":%llu,"
           "\"remote_bytes\":%llu,\"concurrency\":%u,\"fetch_size\":%llu,\"prefetch_threshold\":%llu,\"rank\":%u,\"world\":%u,"
           "\"node\":%u,\"nodes\":%u,\"local_rank\":%u,\"ranks_per_node\":%u,\"peer_sent\":%llu,\"peer_sent_bytes\":%llu,\"peer_served_from_storage\":%llu,"
           "\"node_cache_used_bytes\":%llu,\"node_cache_segment_bytes\":%llu,\"node_cache_entries\":%llu,"
           "\"node_cache_hits\":%llu,\"node_cache_ranks\":%u,",
           o->dir, transform, (unsigned long long)nsamples, (unsigned long long)batches, (unsigned long long)samples,
           shape, dtype, elapsed, rate, mbs_in, mbs_out, first * 1e3, peak_rss_mib(),
           (double)st.peak_pool_bytes / 1048576.0, st.threads, st.stage_seconds[LADE_STAGE_READ],
           st.stage_seconds[LADE_STAGE_TRANSFORM], st.stage_seconds[LADE_STAGE_COLLATE],
           st.stage_seconds[LADE_STAGE_WAIT], st.batch_latency_p50 * 1e3, st.batch_latency_p90 * 1e3,
           st.batch_latency_p99 * 1e3, (unsigned long long)st.substituted, sumtxt,
           (unsigned long long)st.samples_by_source[0], (unsigned long long)st.samples_by_source[1],
           (unsigned long long)st.samples_by_source[2], (unsigned long long)st.bytes_by_source[0],
           (unsigned long long)st.bytes_by_source[1], (unsigned long long)st.bytes_by_source[2],
           (unsigned long long)st.cache_misses, (unsigned long long)st.prefetched, (unsigned long long)st.get_requests,
           (unsigned long long)st.list_requests, (unsigned long long)st.retries, (unsigned long long)st.remote_bytes,
           st.concurrency, (unsigned long long)st.fetch_size, (unsigned long long)st.prefetch_threshold, prank,
           ps.learners, st.node, st.nodes, st.local_rank, st.ranks_per_node, (unsigned long long)st.peer_messages_sent,
           (unsigned long long)st.peer_bytes_sent, (unsigned long long)st.peer_served_from_storage,
           (unsigned long long)st.node_cache_used_bytes, (unsigned long long)st.node_cache_segment_bytes,
           (unsigned long long)st.node_cache_entries, (unsigned long long)st.node_cache_hits, st.node_cache_ranks);
    /* a plan's two tiers and the node's shared plan cache (docs/plan.md) */
    printf("\"plan_admits_mem\":%llu,\"plan_admits_disk\":%llu,\"plan_moves_up\":%llu,\"plan_moves_down\":%llu,"
           "\"plan_node_reads\":%llu,\"cache_corrupt\":%llu,\"cache_stale\":%llu,\"epochs\":[",
           (unsigned long long)st.plan_admits_mem, (unsigned long long)st.plan_admits_disk,
           (unsigned long long)st.plan_moves_up, (unsigned long long)st.plan_moves_down,
           (unsigned long long)st.plan_node_reads, (unsigned long long)st.cache_corrupt,
           (unsigned long long)st.cache_stale);
    for (int e = 0; e < neps; e++) {
      if (planned)
        printf("%s{\"plan\":\"%s\",\"cache\":%llu,\"peer\":%llu,\"storage\":%llu,\"fallbacks\":%llu,"
               "\"predicted_cache\":%llu,\"predicted_peer\":%llu,\"predicted_storage\":%llu,\"handoff\":%llu,"
               "\"predicted_handoff\":%llu,",
               e ? "," : "", lade_plan_kind_name(ps.kind), (unsigned long long)CACHED(e),
               (unsigned long long)PEERED(e),
               (unsigned long long)(eps[e].samples_by_source[0] - eps[e].plan_peer_storage),
               (unsigned long long)eps[e].plan_fallbacks, (unsigned long long)pred[e][PRED_CACHE],
               (unsigned long long)pred[e][PRED_PEER], (unsigned long long)pred[e][PRED_STORAGE],
               (unsigned long long)(eps[e].peer_samples_node + eps[e].plan_node_reads),
               (unsigned long long)pred[e][PRED_HANDOFF]);
      double es = ep_secs[e];
      printf("%s\"epoch\":%d,\"seconds\":%.4f,\"peer_bytes\":%llu,\"miss_rate\":%.4f,\"wait_s\":%.4f,\"get_requests\":%llu,\"list_requests\":%llu,"
             "\"remote_bytes\":%llu,\"samples_by_source\":[%llu,%llu,%llu],\"bytes_by_source\":[%llu,%llu,%llu]}",
             planned ? "" : e ? ",{" : "{", e, es, (unsigned long long)eps[e].bytes_by_source[3], eps[e].miss_rate,
             eps[e].wait_seconds,
             (unsigned long long)eps[e].get_requests,
             (unsigned long long)eps[e].list_requests, (unsigned long long)eps[e].remote_bytes,
             (unsigned long long)eps[e].samples_by_source[0], (unsigned long long)eps[e].samples_by_source[1],
             (unsigned long long)eps[e].samples_by_source[2], (unsigned long long)eps[e].bytes_by_source[0],
             (unsigned long long)eps[e].bytes_by_source[1], (unsigned long long)eps[e].bytes_by_source[2]);
    }
    printf("]");
    if (aggregated) {
      printf(",\"aggregate\":[");
      for (int e = 0; e < neps; e++)
        printf("%s{\"epoch\":%d,\"seconds\":%.4f,\"wait_s\":%.4f,\"cache\":%llu,\"peer\":%llu,\"storage\":%llu,"
               "\"predicted_cache\":%llu,\"predicted_peer\":%llu,\"predicted_storage\":%llu,\"fallbacks\":%llu}",
               e ? "," : "", e, agg_t[e], agg_w[e], (unsigned long long)agg[e][0], (unsigned long long)agg[e][1],
               (unsigned long long)agg[e][2], (unsigned long long)agg[e][3], (unsigned long long)agg[e][4],
               (unsigned long long)agg[e][5], (unsigned long long)agg[e][6]);
      printf("]");
    }
    printf(",\"cpu\":\"%s\"", cpu);
    if (o->ceiling) {
      printf(",\"ceiling\":{\"files\":%llu,\"threads\":%d,\"read_per_s\":%.1f,\"decode_per_s\":%.1f,"
             "\"fraction_of_read\":%.4f,\"fraction_of_decode\":%.4f,\"why\":\"%s\"}",
             (unsigned long long)cl.files, cl.threads, cl.read_per_s, cl.decode_per_s,
             cl.read_per_s > 0 ? rate / cl.read_per_s : 0.0, cl.decode_per_s > 0 ? rate / cl.decode_per_s : 0.0,
             cl.why);
    }
    printf("}\n");
  } else {
    printf("dataset      %s (%llu samples), transform %s, batches %s %s\n", o->dir, (unsigned long long)nsamples,
           transform, shape, dtype);
    printf("throughput   %.0f samples/s, %.1f MB/s read, %.1f MB/s delivered (%llu batches in %.3f s, %u threads)\n",
           rate, mbs_in, mbs_out, (unsigned long long)batches, elapsed, st.threads);
    printf("first batch  %.2f ms after create\n", first * 1e3);
    printf("memory       peak RSS %.1f MiB, batch pool %.1f MiB\n", peak_rss_mib(),
           (double)st.peak_pool_bytes / 1048576.0);
    printf("stages       read %.3f s, transform %.3f s (summed over threads); collate %.4f s; consumer wait %.3f s\n",
           st.stage_seconds[LADE_STAGE_READ], st.stage_seconds[LADE_STAGE_TRANSFORM],
           st.stage_seconds[LADE_STAGE_COLLATE], st.stage_seconds[LADE_STAGE_WAIT]);
    printf("batch time   p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n", st.batch_latency_p50 * 1e3,
           st.batch_latency_p90 * 1e3, st.batch_latency_p99 * 1e3, st.batch_latency_max * 1e3);
    if (st.substituted) printf("substituted  %llu bad samples (on_error=skip)\n", (unsigned long long)st.substituted);
    int local_reads = remote && !st.list_requests && !st.remote_bytes; /* a local source counting its reads (hdf5) */
    if (local_reads)
      printf("reads        %llu issued, %.3f per sample\n", (unsigned long long)st.get_requests,
             samples ? (double)st.get_requests / (double)samples : 0.0);
    else if (remote)
      printf("remote       %llu GET, %llu LIST, %llu retries, %.1f MB received, %u requests in flight allowed\n",
             (unsigned long long)st.get_requests, (unsigned long long)st.list_requests,
             (unsigned long long)st.retries, (double)st.remote_bytes / 1e6, st.concurrency);
    if (tiers) {
      printf("tiers        storage %llu, memory %llu, disk %llu samples; %llu misses", (unsigned long long)st.samples_by_source[0],
             (unsigned long long)st.samples_by_source[1], (unsigned long long)st.samples_by_source[2],
             (unsigned long long)st.cache_misses);
      if (st.cache_stale || st.cache_corrupt)
        printf(" (%llu stale: the sample changed since it was stored; %llu corrupt)", (unsigned long long)st.cache_stale,
               (unsigned long long)st.cache_corrupt);
      if (st.fetch_size)
        printf("; prefetcher stored %llu (fetch %llu, threshold %llu)", (unsigned long long)st.prefetched,
               (unsigned long long)st.fetch_size, (unsigned long long)st.prefetch_threshold);
      printf("\n");
    }
    if (tiers || (remote && !local_reads))
      for (int e = 0; e < neps; e++)
        printf("epoch %-6d miss rate %.3f, consumer wait %.3f s, %llu GET, %llu LIST, %.1f MB from storage, "
               "%.1f MB memory, %.1f MB disk\n",
               e, eps[e].miss_rate, eps[e].wait_seconds, (unsigned long long)eps[e].get_requests,
               (unsigned long long)eps[e].list_requests, (double)eps[e].bytes_by_source[0] / 1e6,
               (double)eps[e].bytes_by_source[1] / 1e6, (double)eps[e].bytes_by_source[2] / 1e6);
    if (planned) {
      printf("plan         %s, rank %u of %u: per epoch, samples from this rank's cache / peers / storage, measured "
             "(predicted by the plan)%s\n", lade_plan_kind_name(ps.kind), prank, ps.learners,
             st.plan_peer_storage ? "; no transport: peer samples were read from storage" : "");
      if (st.peer_messages_sent)
        printf("transport    sent %llu samples (%.1f MB) to peers, %llu of them read from storage\n",
               (unsigned long long)st.peer_messages_sent, (double)st.peer_bytes_sent / 1e6,
               (unsigned long long)st.peer_served_from_storage);
      for (int e = 0; e < neps; e++)
        printf("epoch %-6d cache %llu (%llu), peer %llu (%llu), storage %llu (%llu), fallbacks %llu, consumer wait "
               "%.3f s\n",
               e, (unsigned long long)CACHED(e), (unsigned long long)pred[e][PRED_CACHE],
               (unsigned long long)PEERED(e),
               (unsigned long long)pred[e][PRED_PEER],
               (unsigned long long)(eps[e].samples_by_source[0] - eps[e].plan_peer_storage),
               (unsigned long long)pred[e][PRED_STORAGE], (unsigned long long)eps[e].plan_fallbacks,
               eps[e].wait_seconds);
    }
    if (aggregated && my_rank == 0) {
      printf("all ranks    %s, %u ranks: per epoch, samples from the ranks' caches / peers / storage, measured "
             "(predicted), the slowest rank's epoch time and the consumer waits summed\n", lade_plan_kind_name(ps.kind),
             ps.learners);
      for (int e = 0; e < neps; e++)
        printf("epoch %-6d cache %llu (%llu), peer %llu (%llu), storage %llu (%llu), fallbacks %llu, %.3f s, wait "
               "%.3f s\n",
               e, (unsigned long long)agg[e][0], (unsigned long long)agg[e][3], (unsigned long long)agg[e][1],
               (unsigned long long)agg[e][4], (unsigned long long)agg[e][2], (unsigned long long)agg[e][5],
               (unsigned long long)agg[e][6], agg_t[e], agg_w[e]);
    }
    if (o->checksum) printf("checksum     %016llx\n", (unsigned long long)sum);
    printf("cpu          %s\n", cpu);
    if (o->ceiling && cl.read_per_s > 0) {
      printf("ceiling      bare read %.0f files/s", cl.read_per_s);
      if (cl.decode_per_s > 0) printf(", bare whole-image JPEG decode %.0f images/s", cl.decode_per_s);
      printf(" (%llu files, %d threads); lade is at %.2fx of the read", (unsigned long long)cl.files,
             cl.threads, rate / cl.read_per_s);
      if (cl.decode_per_s > 0) printf(", %.2fx of the decode", rate / cl.decode_per_s);
      printf("%s%s\n", cl.why[0] ? "; decode not measured: " : "", cl.why);
    } else if (o->ceiling) {
      printf("ceiling      not measured: %s\n", cl.why);
    }
  }
  return 0;
}

static int set_or_fail(lade_config_t *cfg, const char *key, const char *value) {
  if (lade_config_set(cfg, key, value)) {
    fprintf(stderr, "lade: %s\n", lade_tool_error());
    return -1;
  }
  return 0;
}

static int cmd_bench(int argc, char **argv) {
  static const struct option opts[] = {
      {"transform", required_argument, 0, 't'}, {"batch-size", required_argument, 0, 'b'},
      {"epochs", required_argument, 0, 'e'},    {"threads", required_argument, 0, 'j'},
      {"prefetch", required_argument, 0, 'p'},  {"seed", required_argument, 0, 's'},
      {"set", required_argument, 0, 'S'},       {"json", no_argument, 0, 'J'},
      {"max-batches", required_argument, 0, 'm'}, {"no-checksum", no_argument, 0, 'C'},
      {"step-ms", required_argument, 0, 'T'},   {"plan", required_argument, 0, 'P'},
      {"no-ceiling", no_argument, 0, 'N'},
      {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
  lade_config_t *cfg = NULL;
  lade_config_create(&cfg);
  bench_opts_t o = {.checksum = 1, .ceiling = 1};
  int c, bad = 0;
  optind = 1;
  while (!bad && (c = getopt_long(argc, argv, "t:b:e:j:p:s:S:Jm:CT:P:Nh", opts, NULL)) != -1) {
    switch (c) {
      case 't': bad = set_or_fail(cfg, "transform", optarg); break;
      case 'b': bad = set_or_fail(cfg, "batch_size", optarg); break;
      case 'e': bad = set_or_fail(cfg, "epochs", optarg); break;
      case 'j': bad = set_or_fail(cfg, "threads", optarg); break;
      case 'p': bad = set_or_fail(cfg, "prefetch", optarg); break;
      case 's': bad = set_or_fail(cfg, "seed", optarg); break;
      case 'P': bad = set_or_fail(cfg, "plan", optarg); break;
      case 'S':
        if (lade_config_parse(cfg, optarg)) {
          fprintf(stderr, "lade: %s\n", lade_tool_error());
          bad = 1;
        }
        break;
      case 'J': o.json = 1; break;
      case 'T': {
        char *end = NULL;
        o.step_ms = strtod(optarg, &end);
        if (!end || *end || o.step_ms < 0 || o.step_ms > 1e6) {
          fprintf(stderr, "lade: --step-ms: '%s' is not a number of milliseconds\n", optarg);
          bad = 1;
        }
        break;
      }
      case 'C': o.checksum = 0; break;
      case 'N': o.ceiling = 0; break;
      case 'm':
        if (parse_u64(optarg, &o.max_batches, "--max-batches")) bad = 1;
        break;
      case 'h':
        lade_config_destroy(cfg);
        return usage_bench(stdout);
      default: bad = 1;
    }
  }
  if (bad || argc - optind != 1) {
    lade_config_destroy(cfg);
    if (!bad) usage_bench(stderr);
    return 2;
  }
  o.dir = argv[optind];
  cli_mpi_init();
  int rc = set_or_fail(cfg, "source", o.dir) ? 2 : run_bench(cfg, &o);
  cli_mpi_done();
  lade_config_destroy(cfg);
  return rc;
}

/* ----------------------------------------------------------------- demo */

static int cmd_demo(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: lade demo\n\nGenerates 1,000 synthetic JPEGs into ./lade-demo (once) and runs\n"
           "`lade bench ./lade-demo --transform imagenet-train --epochs 2` on it.\n");
    return 0;
  }
  const char *dir = "lade-demo";
  struct stat st;
  if (stat(dir, &st) != 0) {
    char err[512] = "";
    printf("generating 1000 synthetic ImageNet-like JPEGs into ./%s ...\n", dir);
    if (lade_tool_gen_jpeg(dir, 1000, 0, err, sizeof err)) {
      fprintf(stderr, "lade demo: %s\n", err);
      return 1;
    }
  } else {
    printf("using existing ./%s\n", dir);
  }
  char *args[] = {"bench", (char *)dir, "--transform", "imagenet-train", "--epochs", "2", "--batch-size", "64", NULL};
  return cmd_bench(8, args);
}

/* ------------------------------------------------------------------- ls */

static int usage_ls(FILE *f) {
  fprintf(f,
          "usage: lade ls SOURCE [--transform T] [--classes] [--set key=value ...]\n\n"
          "Lists the dataset as the loader sees it, one sample per line:\n"
          "INDEX<TAB>LABEL<TAB>CLASS<TAB>PATH (CLASS is - without one). With --classes,\n"
          "one class per line: LABEL<TAB>NAME. The transform (default auto) decides which\n"
          "files of a folder are samples: images only, or every file with raw.\n");
  return f == stderr ? 2 : 0;
}

static int cmd_ls(int argc, char **argv) {
  static const struct option opts[] = {{"transform", required_argument, 0, 't'}, {"set", required_argument, 0, 'S'},
                                       {"classes", no_argument, 0, 'c'},         {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  lade_config_t *cfg = NULL;
  lade_config_create(&cfg);
  int c, bad = 0, classes_only = 0;
  optind = 1;
  while (!bad && (c = getopt_long(argc, argv, "t:S:ch", opts, NULL)) != -1) {
    switch (c) {
      case 't': bad = set_or_fail(cfg, "transform", optarg); break;
      case 'S':
        if (lade_config_parse(cfg, optarg)) {
          fprintf(stderr, "lade: %s\n", lade_tool_error());
          bad = 1;
        }
        break;
      case 'c': classes_only = 1; break;
      case 'h':
        lade_config_destroy(cfg);
        return usage_ls(stdout);
      default: bad = 1;
    }
  }
  if (bad || argc - optind != 1) {
    lade_config_destroy(cfg);
    if (!bad) usage_ls(stderr);
    return 2;
  }
  /* one worker, one small batch: the loader is made for its listing only */
  if (set_or_fail(cfg, "source", argv[optind]) || set_or_fail(cfg, "threads", "1") ||
      set_or_fail(cfg, "batch_size", "1") || set_or_fail(cfg, "prefetch", "1")) {
    lade_config_destroy(cfg);
    return 2;
  }
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, cfg);
  lade_config_destroy(cfg);
  uint64_t n = 0;
  uint32_t nc = 0;
  if (!rc) rc = lade_loader_info(L, &n, NULL, NULL);
  if (!rc) rc = lade_loader_classes(L, &nc);
  const char **names = rc ? NULL : calloc(nc ? nc : 1, sizeof *names);
  for (uint32_t i = 0; !rc && i < nc; i++)
    if (lade_loader_class_name(L, i, &names[i])) names[i] = NULL; /* a source without names */
  /* names as the Python module's messages show them (shown.h): a 0xff byte as \xff */
  static char path[2 * 4096 + 64], shown_path[4 * sizeof path], shown_cls[4 * 4096 + 1];
  if (!rc && classes_only) {
    for (uint32_t i = 0; i < nc; i++)
      printf("%u\t%s\n", i, names[i] ? lade_tool_shown(names[i], shown_cls, sizeof shown_cls) : "-");
  } else if (!rc) {
    for (uint64_t i = 0; !rc && i < n; i++) {
      int64_t label = -1;
      rc = lade_loader_sample(L, i, path, sizeof path, &label);
      const char *cls = label >= 0 && (uint64_t)label < nc && names[label] ? names[label] : "-";
      if (!rc)
        printf("%llu\t%lld\t%s\t%s\n", (unsigned long long)i, (long long)label,
               lade_tool_shown(cls, shown_cls, sizeof shown_cls), lade_tool_shown(path, shown_path, sizeof shown_path));
    }
  }
  if (rc) fprintf(stderr, "lade ls: %s\n", lade_tool_error());
  free(names);
  lade_loader_destroy(L);
  return rc ? 1 : 0;
}

static int cmd_settings(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const char *def, *help;
  for (size_t i = 0; lade_config_key(i, &def, &help); i++)
    printf("%-14s default %-22s %s\n", lade_config_key(i, NULL, NULL), def[0] ? def : "\"\"", help);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage_main(stderr);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) return usage_main(stdout);
  if (!strcmp(cmd, "--version")) {
    printf("lade %s\nfeatures: %s\n", lade_version(), lade_features());
    return 0;
  }
  if (!strcmp(cmd, "gen")) return cmd_gen(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "demo")) return cmd_demo(argc - 1, argv + 1);
  if (!strcmp(cmd, "settings")) return cmd_settings(argc - 1, argv + 1);
  if (!strcmp(cmd, "ls")) return cmd_ls(argc - 1, argv + 1);
  if (!strcmp(cmd, "pack")) return lade_tool_pack(argc - 1, argv + 1);
  if (!strcmp(cmd, "probe")) return lade_tool_probe(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan")) return lade_tool_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "simulate")) return lade_tool_simulate(argc - 1, argv + 1);
  if (!strcmp(cmd, "model")) return lade_tool_model(argc - 1, argv + 1);
  if (!strcmp(cmd, "dlio")) return lade_tool_dlio(argc - 1, argv + 1);
  fprintf(stderr, "lade: unknown command '%s'\n\n", cmd);
  return usage_main(stderr);
}
