/*
 * main.c - the `lade` command: gen, bench, demo (here), ls (ls.c), pack (pack.c,
 * pack_hdf5.c), probe (probe.c), dlio (dlio*.c) and plan, simulate, model
 * (plan_cli.c, plan_simulate.c, plan_model.c). Uses the public header only.
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
#include "jpeg_stages.h"
#include "ls.h"
#include "lade/lade.h"
#include "lade/plan.h"
#ifdef LADE_HAVE_MPI
#include <mpi.h>
#endif
#include "pack.h"
#include "plan_cli.h"
#include "plan_warm.h"
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
          "  index SHARD...     write each shard's sidecar index (SHARD.ladeidx) for remote opens\n"
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
          "                    (from a warm start when cache_dir holds what an earlier run left)\n"
          "                    (options: --set plan_balance=..., plan_reorder=..., plan_order=...)\n"
          "  --set KEY=VALUE   any loader setting (repeatable; `lade settings` lists them)\n"
          "  --max-batches N   stop after N batches\n"
          "  --no-checksum     do not read the delivered bytes (pure loader rate)\n"
          "  --step-ms MS      sleep MS per batch after taking it (a stand-in for the training step,\n"
          "                    so the loader can work ahead; the consumer wait is what it could not hide)\n"
          "  --no-ceiling      skip the ceiling: after the run, the machine's bare read rate of\n"
          "                    (up to 256 of) the same files and, for the imagenet transforms, its bare\n"
          "                    whole-image JPEG decode rate, with the same threads, and lade's fraction\n"
          "                    of each (local folders only; about a second); for raw samples (raw, npy,\n"
          "                    npz) also the copy ceiling: a memcpy of each sample's bytes from the page\n"
          "                    cache (mapped), with the same threads (lade_loader_sample_extent)\n"
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
 * the loader runs, from the caches w gives at the start (NULL: empty; a warm
 * restart, plan_warm.h); PRED_HANDOFF: of the peer samples, those from a
 * rank of its own node (a node-aware plan's intra-node handoffs). */
enum { PRED_CACHE = 0, PRED_PEER, PRED_STORAGE, PRED_HANDOFF };
static int predict_rank(const lade_plan_settings_t *s, const lade_tool_warm_t *w, uint32_t rank, uint64_t epochs,
                        uint64_t (*pred)[4]) {
  lade_plan_t *pl = NULL;
  int rc = lade_tool_plan_open(s, w, &pl);
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

enum { MAX_EPOCH_T = 64, MAX_EPOCH_LINES = 64 };

/* One `lade bench` run, shared by its parts: what the run loop counts
 * (bench_loop), what the loader reports after it and the ceiling
 * (bench_finish), the plan's prediction and every rank's sums
 * (bench_predict, bench_aggregate), and the report of all of it. */
typedef struct bench_run {
  lade_loader_t *L;
  uint64_t nsamples, total; /* samples in the dataset; batches to take */
  uint64_t sum, batches, samples, out_bytes;
  double t0, first, elapsed, t_end; /* create; the first batch after it; the run's time; its end */
  double ep_start[MAX_EPOCH_T + 1]; /* when each epoch's first batch came (epoch 0: create) */
  char shape[128];
  const char *dtype;
  lade_stats_t st;
  lade_epoch_stats_t eps[MAX_EPOCH_LINES];
  int neps;
  lade_plan_settings_t ps;
  uint32_t prank;
  int planned;
  char transform[64];
  lade_tool_ceiling_t cl;
  lade_tool_copy_t cp; /* raw samples: the copy ceiling */
  double rss;          /* peak RSS (MiB) before the ceilings, which map or read the files */
  char cpu[256];
  uint64_t pred[MAX_EPOCH_LINES][4];
  double ep_secs[MAX_EPOCH_LINES];
  /* every rank's counts summed (under mpirun): cache, peer, storage, the
   * plan's three, fallbacks; the slowest rank's epoch time, the waits summed */
  uint64_t agg[MAX_EPOCH_LINES][7];
  double agg_t[MAX_EPOCH_LINES], agg_w[MAX_EPOCH_LINES];
  int aggregated, my_rank;
  double rate, mbs_in, mbs_out;
  /* a warm start: what cache_dir held of the dataset (warm_samples samples)
   * before the loader opened it (bench_warm_before); warm_on: the
   * prediction starts from it, warm_handed samples handed to the plan */
  lade_tool_warm_t warm;
  uint64_t warm_samples, warm_handed;
  int warm_on;
  /* the stage account of an imagenet transform over the ceiling's files
   * (stg_why says why not, when it was not measured) */
  lade_tool_stages_t stg;
  char stg_why[160];
  double steady;  /* steady_rate: what the ceilings are set against */
  int steady_ep;  /* its epoch, -1 for the whole run */
} bench_run_t;

/* The rate of the last whole epoch after its first batch, when the run had
 * two or more (*epoch: which), else the whole run's (*epoch -1): steady
 * state, threads warm, to set beside a ceiling that is also warm. */
static double steady_rate(const bench_run_t *r, int *epoch) {
  *epoch = -1;
  const int e = r->neps - 1;
  if (e < 1 || e >= MAX_EPOCH_T || r->ep_secs[e] <= 0 || r->eps[e].batches < 2) return r->rate;
  *epoch = e;
  return (double)r->eps[e].samples * (double)(r->eps[e].batches - 1) / (double)r->eps[e].batches / r->ep_secs[e];
}

/* An epoch's samples by the plan's routes: the own cache (memory and disk
 * tiers), peers (intra-node handoffs read from the node's shared cache too:
 * docs/plan.md, Nodes); storage is samples_by_source[0] - plan_peer_storage. */
static uint64_t cached(const lade_epoch_stats_t *e) {
  return e->samples_by_source[1] + e->samples_by_source[2] - e->plan_node_reads;
}
static uint64_t peered(const lade_epoch_stats_t *e) {
  return e->samples_by_source[3] + e->plan_peer_storage + e->plan_node_reads;
}

/* Takes the run's batches (r->total) from r->L, counting and checksumming
 * them, with a progress bar on a terminal or else a line per finished
 * epoch; returns 0 or the loader's error (said). */
static int bench_loop(bench_run_t *r, const bench_opts_t *o) {
  int tty = isatty(2) && !o->json;
  uint64_t last_epoch = 0;
  double last_report = r->t0;
  int rc = 0;
  while (r->batches < r->total) {
    lade_batch_t *b = NULL;
    rc = lade_loader_next(r->L, &b);
    if (rc) {
      fprintf(stderr, "%slade bench: error: %s\n", tty ? "\n" : "", lade_tool_error());
      break;
    }
    if (!b) break;
    if (r->batches == 0) {
      r->first = now() - r->t0;
      size_t n = 0;
      for (int i = 0; i < b->ndim; i++)
        n += (size_t)snprintf(r->shape + n, sizeof r->shape - n, "%s%lld", i ? "x" : "", (long long)b->shape[i]);
      r->dtype = lade_dtype_name(b->dtype);
    }
    if (o->checksum && b->device >= 0) {
      fprintf(stderr, "%slade bench: error: the batches are in GPU memory (device=cuda:%d) and the checksum reads "
              "them on the host: add --no-checksum\n", tty ? "\n" : "", b->device);
      lade_batch_release(b);
      rc = LADE_EINVAL;
      break;
    }
    if (o->checksum) r->sum = lade_checksum(b->data, b->nbytes, r->sum);
    r->samples += (uint64_t)b->shape[0];
    r->out_bytes += b->nbytes;
    r->batches++;
    uint64_t ep = b->epoch;
    if (ep > 0 && ep < MAX_EPOCH_T && r->ep_start[ep] == 0) r->ep_start[ep] = now();
    lade_batch_release(b);
    if (o->step_ms > 0) {
      struct timespec ts = {(time_t)(o->step_ms / 1e3), (long)(fmod(o->step_ms, 1e3) * 1e6)};
      nanosleep(&ts, NULL);
    }
    double t = now();
    if (tty && (t - last_report > 0.2 || r->batches == r->total)) {
      progress((double)r->batches / (double)r->total, (double)r->samples / (t - r->t0), r->batches == r->total);
      last_report = t;
    } else if (!tty && !o->json) {
      /* a plain line per finished epoch (the batch just counted may be the
       * first of the next one) */
      if (ep != last_epoch)
        printf("epoch %llu done: %llu batches, %.0f samples/s so far\n", (unsigned long long)last_epoch,
               (unsigned long long)(r->batches - 1), (double)r->samples / (t - r->t0));
      if (r->batches == r->total)
        printf("epoch %llu done: %llu batches, %.0f samples/s so far\n", (unsigned long long)ep,
               (unsigned long long)r->batches, (double)r->samples / (t - r->t0));
      last_epoch = ep;
    }
  }
  return rc;
}

/* The stage account of the transform over up to STAGE_FILES of the
 * ceiling's files (spread over them), on the bytes the ceiling read. */
enum { STAGE_FILES = 128 };
typedef struct stages_ctx {
  bench_run_t *r;
  const lade_config_t *cfg;
} stages_ctx_t;

static void bench_stages(void *arg, uint8_t *const *data, const size_t *len, uint64_t n) {
  stages_ctx_t *c = arg;
  uint8_t *img[STAGE_FILES];
  size_t ln[STAGE_FILES];
  const int k = (int)(n < STAGE_FILES ? n : STAGE_FILES);
  for (int i = 0; i < k; i++) {
    const uint64_t j = (uint64_t)i * n / (uint64_t)k;
    img[i] = data[j];
    ln[i] = len[j];
  }
  if (lade_tool_jpeg_stages(img, ln, k, c->cfg, 3, &c->r->stg, c->r->stg_why, sizeof c->r->stg_why))
    c->r->stg.s.images = 0;
}

/* A message made safe to print inside a JSON string as it is. */
static void json_safe(char *s) {
  for (char *c = s; *c; c++)
    if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '?';
}

/* After the run (rc: its status): the loader's stats, per epoch too, its
 * plan, the CPU model; then the loader is destroyed and, after a run
 * without error, the ceiling measured with nothing beside it. */
static void bench_finish(bench_run_t *r, lade_config_t *cfg, const bench_opts_t *o, int rc) {
  r->rss = peak_rss_mib();
  lade_loader_stats(r->L, &r->st, sizeof(lade_stats_t));
  while (r->neps < MAX_EPOCH_LINES &&
         lade_loader_epoch_stats(r->L, (uint64_t)r->neps, &r->eps[r->neps], sizeof(lade_epoch_stats_t)) == 0)
    r->neps++;
  r->planned = !lade_loader_plan_settings(r->L, &r->ps, sizeof r->ps, &r->prank) &&
               r->ps.kind != LADE_PLAN_REGULAR && r->ps.kind < LADE_PLAN_KIND_COUNT;
  lade_config_get(cfg, "transform", r->transform, sizeof r->transform);
  r->cl.threads = (int)r->st.threads;
  lade_tool_cpu_model(r->cpu, sizeof r->cpu);
  uint64_t nceil = 0;
  int ceiling = o->ceiling;
  if (ceiling && planned_world(r->L) > 1) {
    snprintf(r->cl.why, sizeof r->cl.why, "%u ranks share the machine", planned_world(r->L));
    ceiling = 0;
  }
  char **cpaths =
      !rc && ceiling ? ceiling_paths(r->L, o->dir, r->nsamples, &nceil, r->cl.why, sizeof r->cl.why) : NULL;
  int decodes = !strncmp(r->transform, "imagenet", 8), copy = 0;
  char bs[32] = "1";
  lade_config_get(cfg, "batch_size", bs, sizeof bs);
  if (!ceiling) snprintf(r->cp.why, sizeof r->cp.why, "%s", o->ceiling ? r->cl.why : "");
  else if (decodes) snprintf(r->cp.why, sizeof r->cp.why, "a decoding transform (the decode is its ceiling)");
  else copy = !rc && !lade_tool_copy_ranges(r->L, r->nsamples, &r->cp);
  lade_loader_destroy(r->L);
  if (copy) lade_tool_copy_measure(&r->cp, (int)r->st.threads, strtoull(bs, NULL, 10));
  if (cpaths) { /* after the loader is gone: nothing else runs beside it */
    stages_ctx_t sc = {r, cfg};
    lade_tool_ceiling((const char *const *)cpaths, nceil, (int)r->st.threads, decodes, &r->cl,
                      decodes ? bench_stages : NULL, &sc);
    for (uint64_t i = 0; i < nceil; i++) free(cpaths[i]);
    free(cpaths);
  }
  json_safe(r->cl.why); /* they go into JSON as they are */
  json_safe(r->stg_why);
  json_safe(r->cp.why);
}

/* A planned kind's loader that reopens its cache_dir (no cache_mem_bytes)
 * starts from what the folder holds of the dataset (docs/plan.md "Warm
 * restarts"): read here, before the loader opens (and changes) it. */
static void bench_warm_before(bench_run_t *r, const lade_config_t *cfg) {
  char dir[4096], mem[32], plan[64], src[4096], why[1024];
  if (lade_config_get(cfg, "cache_dir", dir, sizeof dir) || !dir[0] ||
      lade_config_get(cfg, "cache_mem_bytes", mem, sizeof mem) || strcmp(mem, "0") ||
      lade_config_get(cfg, "plan", plan, sizeof plan) || !strcmp(plan, "regular") ||
      lade_config_get(cfg, "source", src, sizeof src))
    return;
  if (lade_tool_warm_of_source(dir, src, &r->warm_samples, &r->warm, why, sizeof why))
    fprintf(stderr, "lade bench: note: the plan's prediction assumes empty caches: %s\n", why);
}

/* The plan's prediction for this rank (none when it fails: said), from a
 * warm start when the loader made one, and each epoch's time, from when its
 * first batch came to the next one's. The loader takes the entries of its
 * namespace, of this many samples; several ranks would need every rank's
 * folder (exchanged by the loader, not read here). */
static void bench_predict(bench_run_t *r) {
  const lade_tool_warm_t *w = NULL;
  if (r->planned && r->warm.total && r->warm_samples == r->nsamples) {
    if (r->ps.learners == 1) {
      w = &r->warm;
      r->warm_on = 1;
      r->warm_handed = lade_tool_warm_handed(w, r->ps.cache);
    } else {
      fprintf(stderr, "lade bench: note: with %u ranks the plan's prediction assumes empty caches (a warm start "
              "needs every rank's cache_dir)\n", r->ps.learners);
    }
  }
  if (r->planned && predict_rank(&r->ps, w, r->prank, (uint64_t)r->neps, r->pred)) {
    fprintf(stderr, "lade bench: the plan's prediction: %s\n", lade_tool_error());
    r->planned = 0;
  }
  for (int e = 0; e < r->neps && e < MAX_EPOCH_T; e++) {
    double next = e + 1 < MAX_EPOCH_T && e + 1 < r->neps && r->ep_start[e + 1] > 0 ? r->ep_start[e + 1] : r->t_end;
    r->ep_secs[e] = next - r->ep_start[e];
  }
}

/* Under mpirun with a plan: every rank's counts summed into r->agg (the
 * epoch times: the slowest rank's; the waits summed), r->aggregated set. */
static void bench_aggregate(bench_run_t *r) {
#ifdef LADE_HAVE_MPI
  if (r->planned && g_cli_mpi == 2) {
    static uint64_t mine[MAX_EPOCH_LINES][7];
    double t[MAX_EPOCH_LINES], w[MAX_EPOCH_LINES];
    for (int e = 0; e < r->neps; e++) {
      uint64_t v[7] = {cached(&r->eps[e]), peered(&r->eps[e]),
                       r->eps[e].samples_by_source[0] - r->eps[e].plan_peer_storage, r->pred[e][PRED_CACHE],
                       r->pred[e][PRED_PEER], r->pred[e][PRED_STORAGE], r->eps[e].plan_fallbacks};
      memcpy(mine[e], v, sizeof v);
      t[e] = r->ep_secs[e];
      w[e] = r->eps[e].wait_seconds;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &r->my_rank);
    r->aggregated = MPI_Allreduce(mine, r->agg, r->neps * 7, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS &&
                    MPI_Allreduce(t, r->agg_t, r->neps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS &&
                    MPI_Allreduce(w, r->agg_w, r->neps, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
  }
#endif
}

/* The report as one JSON object on stdout. */
static void bench_report_json(const bench_run_t *r, const bench_opts_t *o) {
  char sumtxt[32] = "null";
  if (o->checksum) snprintf(sumtxt, sizeof sumtxt, "\"%016llx\"", (unsigned long long)r->sum);
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
         o->dir, r->transform, (unsigned long long)r->nsamples, (unsigned long long)r->batches,
         (unsigned long long)r->samples, r->shape, r->dtype, r->elapsed, r->rate, r->mbs_in, r->mbs_out, r->first * 1e3,
         r->rss, (double)r->st.peak_pool_bytes / 1048576.0, r->st.threads, r->st.stage_seconds[LADE_STAGE_READ],
         r->st.stage_seconds[LADE_STAGE_TRANSFORM], r->st.stage_seconds[LADE_STAGE_COLLATE],
         r->st.stage_seconds[LADE_STAGE_WAIT], r->st.batch_latency_p50 * 1e3, r->st.batch_latency_p90 * 1e3,
         r->st.batch_latency_p99 * 1e3, (unsigned long long)r->st.substituted, sumtxt,
         (unsigned long long)r->st.samples_by_source[0], (unsigned long long)r->st.samples_by_source[1],
         (unsigned long long)r->st.samples_by_source[2], (unsigned long long)r->st.bytes_by_source[0],
         (unsigned long long)r->st.bytes_by_source[1], (unsigned long long)r->st.bytes_by_source[2],
         (unsigned long long)r->st.cache_misses, (unsigned long long)r->st.prefetched,
         (unsigned long long)r->st.get_requests, (unsigned long long)r->st.list_requests,
         (unsigned long long)r->st.retries, (unsigned long long)r->st.remote_bytes, r->st.concurrency,
         (unsigned long long)r->st.fetch_size, (unsigned long long)r->st.prefetch_threshold, r->prank, r->ps.learners,
         r->st.node, r->st.nodes, r->st.local_rank, r->st.ranks_per_node, (unsigned long long)r->st.peer_messages_sent,
         (unsigned long long)r->st.peer_bytes_sent, (unsigned long long)r->st.peer_served_from_storage,
         (unsigned long long)r->st.node_cache_used_bytes, (unsigned long long)r->st.node_cache_segment_bytes,
         (unsigned long long)r->st.node_cache_entries, (unsigned long long)r->st.node_cache_hits,
         r->st.node_cache_ranks);
  /* the plan's cache in samples, and the samples a warm start handed it (docs/plan.md "Warm restarts") */
  printf("\"plan_cache\":%llu,\"warm_start\":%llu,", (unsigned long long)(r->planned ? r->ps.cache : 0),
         (unsigned long long)r->warm_handed);
  /* device=cuda (docs/device.md) */
  printf("\"h2d_bytes\":%llu,\"h2d_s\":%.4f,\"h2d_wait_s\":%.4f,\"device_buffers\":%llu,",
         (unsigned long long)r->st.h2d_bytes, r->st.h2d_seconds, r->st.h2d_wait_seconds,
         (unsigned long long)r->st.device_buffers);
  /* a plan's two tiers and the node's shared plan cache (docs/plan.md) */
  printf("\"plan_admits_mem\":%llu,\"plan_admits_disk\":%llu,\"plan_moves_up\":%llu,\"plan_moves_down\":%llu,"
         "\"plan_node_reads\":%llu,\"cache_corrupt\":%llu,\"cache_stale\":%llu,\"epochs\":[",
         (unsigned long long)r->st.plan_admits_mem, (unsigned long long)r->st.plan_admits_disk,
         (unsigned long long)r->st.plan_moves_up, (unsigned long long)r->st.plan_moves_down,
         (unsigned long long)r->st.plan_node_reads, (unsigned long long)r->st.cache_corrupt,
         (unsigned long long)r->st.cache_stale);
  for (int e = 0; e < r->neps; e++) {
    if (r->planned)
      printf("%s{\"plan\":\"%s\",\"cache\":%llu,\"peer\":%llu,\"storage\":%llu,\"fallbacks\":%llu,"
             "\"predicted_cache\":%llu,\"predicted_peer\":%llu,\"predicted_storage\":%llu,\"handoff\":%llu,"
             "\"predicted_handoff\":%llu,",
             e ? "," : "", lade_plan_kind_name(r->ps.kind), (unsigned long long)cached(&r->eps[e]),
             (unsigned long long)peered(&r->eps[e]),
             (unsigned long long)(r->eps[e].samples_by_source[0] - r->eps[e].plan_peer_storage),
             (unsigned long long)r->eps[e].plan_fallbacks, (unsigned long long)r->pred[e][PRED_CACHE],
             (unsigned long long)r->pred[e][PRED_PEER], (unsigned long long)r->pred[e][PRED_STORAGE],
             (unsigned long long)(r->eps[e].peer_samples_node + r->eps[e].plan_node_reads),
             (unsigned long long)r->pred[e][PRED_HANDOFF]);
    double es = r->ep_secs[e];
    printf("%s\"epoch\":%d,\"seconds\":%.4f,\"peer_bytes\":%llu,\"miss_rate\":%.4f,\"wait_s\":%.4f,\"get_requests\":%llu,\"list_requests\":%llu,"
           "\"remote_bytes\":%llu,\"samples_by_source\":[%llu,%llu,%llu],\"bytes_by_source\":[%llu,%llu,%llu]}",
           r->planned ? "" : e ? ",{" : "{", e, es, (unsigned long long)r->eps[e].bytes_by_source[3],
           r->eps[e].miss_rate, r->eps[e].wait_seconds, (unsigned long long)r->eps[e].get_requests,
           (unsigned long long)r->eps[e].list_requests, (unsigned long long)r->eps[e].remote_bytes,
           (unsigned long long)r->eps[e].samples_by_source[0], (unsigned long long)r->eps[e].samples_by_source[1],
           (unsigned long long)r->eps[e].samples_by_source[2], (unsigned long long)r->eps[e].bytes_by_source[0],
           (unsigned long long)r->eps[e].bytes_by_source[1], (unsigned long long)r->eps[e].bytes_by_source[2]);
  }
  printf("]");
  if (r->aggregated) {
    printf(",\"aggregate\":[");
    for (int e = 0; e < r->neps; e++)
      printf("%s{\"epoch\":%d,\"seconds\":%.4f,\"wait_s\":%.4f,\"cache\":%llu,\"peer\":%llu,\"storage\":%llu,"
             "\"predicted_cache\":%llu,\"predicted_peer\":%llu,\"predicted_storage\":%llu,\"fallbacks\":%llu}",
             e ? "," : "", e, r->agg_t[e], r->agg_w[e], (unsigned long long)r->agg[e][0],
             (unsigned long long)r->agg[e][1], (unsigned long long)r->agg[e][2], (unsigned long long)r->agg[e][3],
             (unsigned long long)r->agg[e][4], (unsigned long long)r->agg[e][5], (unsigned long long)r->agg[e][6]);
    printf("]");
  }
  printf(",\"cpu\":\"%s\"", r->cpu);
  if (o->ceiling) {
    printf(",\"ceiling\":{\"files\":%llu,\"threads\":%d,\"read_per_s\":%.1f,\"decode_per_s\":%.1f,"
           "\"fraction_of_read\":%.4f,\"fraction_of_decode\":%.4f,\"why\":\"%s\"}",
           (unsigned long long)r->cl.files, r->cl.threads, r->cl.read_per_s, r->cl.decode_per_s,
           r->cl.read_per_s > 0 ? r->rate / r->cl.read_per_s : 0.0,
           r->cl.decode_per_s > 0 ? r->rate / r->cl.decode_per_s : 0.0, r->cl.why);
    const int se = r->steady_ep;
    const double steady = r->steady;
    printf(",\"steady\":{\"epoch\":%d,\"samples_per_s\":%.1f,\"fraction_of_read\":%.4f,\"fraction_of_decode\":%.4f,"
           "\"fraction_of_copy\":%.4f}",
           se, steady, r->cl.read_per_s > 0 ? steady / r->cl.read_per_s : 0.0,
           r->cl.decode_per_s > 0 ? steady / r->cl.decode_per_s : 0.0, r->cp.per_s > 0 ? steady / r->cp.per_s : 0.0);
    if (r->stg.s.images) lade_tool_stages_json(stdout, ",\"account\":", &r->stg);
    else if (r->stg_why[0]) printf(",\"account\":{\"why\":\"%s\"}", r->stg_why);
    printf(",\"copy_ceiling\":{\"samples\":%llu,\"bytes\":%llu,\"threads\":%d,\"samples_per_s\":%.1f,\"gb_per_s\":%.3f,"
           "\"fraction\":%.4f,\"pread_per_s\":%.1f,\"why\":\"%s\"}",
           (unsigned long long)r->cp.samples, (unsigned long long)r->cp.bytes, r->cp.threads, r->cp.per_s,
           r->cp.gb_per_s, r->cp.per_s > 0 ? r->rate / r->cp.per_s : 0.0, r->cp.pread_per_s, r->cp.why);
  }
  printf(",\"image_kernels\":\"%s\"}\n", r->st.image_kernels);
}

/* The report as text lines on stdout. */
static void bench_report_text(const bench_run_t *r, const bench_opts_t *o) {
  int tiers = r->st.samples_by_source[1] || r->st.samples_by_source[2] || r->st.cache_misses || r->st.prefetched;
  int remote = r->st.get_requests || r->st.list_requests;
  printf("dataset      %s (%llu samples), transform %s, batches %s %s\n", o->dir, (unsigned long long)r->nsamples,
         r->transform, r->shape, r->dtype);
  printf("throughput   %.0f samples/s, %.1f MB/s read, %.1f MB/s delivered (%llu batches in %.3f s, %u threads)\n",
         r->rate, r->mbs_in, r->mbs_out, (unsigned long long)r->batches, r->elapsed, r->st.threads);
  printf("first batch  %.2f ms after create\n", r->first * 1e3);
  printf("memory       peak RSS %.1f MiB, batch pool %.1f MiB\n", r->rss,
         (double)r->st.peak_pool_bytes / 1048576.0);
  if (r->st.h2d_bytes)
    printf("device       %.1f MB copied to the GPU on lade's stream in %.3f s of GPU time, %llu device buffers; the "
           "consumer's stream waited %.3f s for copies\n", (double)r->st.h2d_bytes / 1e6, r->st.h2d_seconds,
           (unsigned long long)r->st.device_buffers, r->st.h2d_wait_seconds);
  printf("stages       read %.3f s, transform %.3f s (summed over threads); collate %.4f s; consumer wait %.3f s\n",
         r->st.stage_seconds[LADE_STAGE_READ], r->st.stage_seconds[LADE_STAGE_TRANSFORM],
         r->st.stage_seconds[LADE_STAGE_COLLATE], r->st.stage_seconds[LADE_STAGE_WAIT]);
  printf("batch time   p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n", r->st.batch_latency_p50 * 1e3,
         r->st.batch_latency_p90 * 1e3, r->st.batch_latency_p99 * 1e3, r->st.batch_latency_max * 1e3);
  if (r->st.substituted)
    printf("substituted  %llu bad samples (on_error=skip)\n", (unsigned long long)r->st.substituted);
  /* a local source counting its reads (hdf5) */
  int local_reads = remote && !r->st.list_requests && !r->st.remote_bytes;
  if (local_reads)
    printf("reads        %llu issued, %.3f per sample\n", (unsigned long long)r->st.get_requests,
           r->samples ? (double)r->st.get_requests / (double)r->samples : 0.0);
  else if (remote)
    printf("remote       %llu GET, %llu LIST, %llu retries, %.1f MB received, %u requests in flight allowed\n",
           (unsigned long long)r->st.get_requests, (unsigned long long)r->st.list_requests,
           (unsigned long long)r->st.retries, (double)r->st.remote_bytes / 1e6, r->st.concurrency);
  if (tiers) {
    printf("tiers        storage %llu, memory %llu, disk %llu samples; %llu misses",
           (unsigned long long)r->st.samples_by_source[0], (unsigned long long)r->st.samples_by_source[1],
           (unsigned long long)r->st.samples_by_source[2], (unsigned long long)r->st.cache_misses);
    if (r->st.cache_stale || r->st.cache_corrupt)
      printf(" (%llu stale: the sample changed since it was stored; %llu corrupt)",
             (unsigned long long)r->st.cache_stale, (unsigned long long)r->st.cache_corrupt);
    if (r->st.fetch_size)
      printf("; prefetcher stored %llu (fetch %llu, threshold %llu)", (unsigned long long)r->st.prefetched,
             (unsigned long long)r->st.fetch_size, (unsigned long long)r->st.prefetch_threshold);
    printf("\n");
  }
  if (tiers || (remote && !local_reads))
    for (int e = 0; e < r->neps; e++)
      printf("epoch %-6d miss rate %.3f, consumer wait %.3f s, %llu GET, %llu LIST, %.1f MB from storage, "
             "%.1f MB memory, %.1f MB disk\n",
             e, r->eps[e].miss_rate, r->eps[e].wait_seconds, (unsigned long long)r->eps[e].get_requests,
             (unsigned long long)r->eps[e].list_requests, (double)r->eps[e].bytes_by_source[0] / 1e6,
             (double)r->eps[e].bytes_by_source[1] / 1e6, (double)r->eps[e].bytes_by_source[2] / 1e6);
  if (r->planned) {
    char warm[96] = "";
    if (r->warm_on)
      snprintf(warm, sizeof warm, " from a warm start: %llu samples in cache_dir",
               (unsigned long long)r->warm_handed);
    printf("plan         %s, rank %u of %u: per epoch, samples from this rank's cache / peers / storage, measured "
           "(predicted by the plan%s)%s\n", lade_plan_kind_name(r->ps.kind), r->prank, r->ps.learners, warm,
           r->st.plan_peer_storage ? "; no transport: peer samples were read from storage" : "");
    if (r->st.peer_messages_sent)
      printf("transport    sent %llu samples (%.1f MB) to peers, %llu of them read from storage\n",
             (unsigned long long)r->st.peer_messages_sent, (double)r->st.peer_bytes_sent / 1e6,
             (unsigned long long)r->st.peer_served_from_storage);
    for (int e = 0; e < r->neps; e++)
      printf("epoch %-6d cache %llu (%llu), peer %llu (%llu), storage %llu (%llu), fallbacks %llu, consumer wait "
             "%.3f s\n",
             e, (unsigned long long)cached(&r->eps[e]), (unsigned long long)r->pred[e][PRED_CACHE],
             (unsigned long long)peered(&r->eps[e]),
             (unsigned long long)r->pred[e][PRED_PEER],
             (unsigned long long)(r->eps[e].samples_by_source[0] - r->eps[e].plan_peer_storage),
             (unsigned long long)r->pred[e][PRED_STORAGE], (unsigned long long)r->eps[e].plan_fallbacks,
             r->eps[e].wait_seconds);
  }
  if (r->aggregated && r->my_rank == 0) {
    printf("all ranks    %s, %u ranks: per epoch, samples from the ranks' caches / peers / storage, measured "
           "(predicted), the slowest rank's epoch time and the consumer waits summed\n",
           lade_plan_kind_name(r->ps.kind), r->ps.learners);
    for (int e = 0; e < r->neps; e++)
      printf("epoch %-6d cache %llu (%llu), peer %llu (%llu), storage %llu (%llu), fallbacks %llu, %.3f s, wait "
             "%.3f s\n",
             e, (unsigned long long)r->agg[e][0], (unsigned long long)r->agg[e][3], (unsigned long long)r->agg[e][1],
             (unsigned long long)r->agg[e][4], (unsigned long long)r->agg[e][2], (unsigned long long)r->agg[e][5],
             (unsigned long long)r->agg[e][6], r->agg_t[e], r->agg_w[e]);
  }
  if (o->checksum) printf("checksum     %016llx\n", (unsigned long long)r->sum);
  printf("cpu          %s\n", r->cpu);
  if (r->st.image_kernels[0]) printf("decoder      %s (chosen by timing the first images)\n", r->st.image_kernels);
  if (r->stg.s.images) lade_tool_stages_print(stdout, "account      ", "             ", &r->stg);
  else if (r->stg_why[0]) printf("account      not measured: %s\n", r->stg_why);
  if (o->ceiling && r->cl.read_per_s > 0) {
    const int se = r->steady_ep;
    const double steady = r->steady;
    char when[64] = "the whole run, start-up included";
    if (se >= 0) snprintf(when, sizeof when, "epoch %d, after its first batch", se);
    printf("ceiling      bare read %.0f files/s", r->cl.read_per_s);
    if (r->cl.decode_per_s > 0) printf(", bare whole-image JPEG decode %.0f images/s", r->cl.decode_per_s);
    printf(" (%llu of the files, %d threads); lade at %.0f samples/s (%s) is at %.2fx of the read",
           (unsigned long long)r->cl.files, r->cl.threads, steady, when, steady / r->cl.read_per_s);
    if (r->cl.decode_per_s > 0) printf(", %.2fx of the decode", steady / r->cl.decode_per_s);
    printf("%s%s\n", r->cl.why[0] ? "; decode not measured: " : "", r->cl.why);
    if (r->cl.decode_per_s > 0)
      printf("             (both warm, the same files and threads: above 1.00x lade delivers its crops faster than "
             "the machine decodes the whole images)\n");
  } else if (o->ceiling) {
    printf("ceiling      not measured: %s\n", r->cl.why);
  }
  if (o->ceiling && r->cp.per_s > 0) {
    const int se = r->steady_ep;
    const double steady = r->steady;
    char rd[64] = "pread of them not measured: too many files to hold open";
    if (r->cp.pread_per_s > 0) snprintf(rd, sizeof rd, "pread of them %.0f samples/s", r->cp.pread_per_s);
    printf("copy ceiling memcpy of the same bytes from the page cache %.0f samples/s, %.2f GB/s (%llu samples, "
           "%.1f KB each on average, %d threads; %s); lade at %.0f samples/s (%s) is at %.2fx of the copy\n",
           r->cp.per_s, r->cp.gb_per_s, (unsigned long long)r->cp.samples,
           (double)r->cp.bytes / (double)r->cp.samples / 1e3, r->cp.threads, rd, steady,
           se >= 0 ? "its last epoch" : "the whole run", steady / r->cp.per_s);
  }
  else if (o->ceiling && r->cp.why[0] && strncmp(r->transform, "imagenet", 8)) /* a decode has its own */
    printf("copy ceiling not measured: %s\n", r->cp.why);
}

static int run_bench(lade_config_t *cfg, const bench_opts_t *o) {
  bench_run_t *r = calloc(1, sizeof *r); /* some 20 KB */
  if (!r) {
    fprintf(stderr, "lade bench: out of memory\n");
    return 1;
  }
  r->t0 = now();
  r->ep_start[0] = r->t0;
  r->dtype = "";
  uint64_t steps = 0, epochs = 0;
  int rc = 1;
  bench_warm_before(r, cfg);
  if (lade_loader_create(&r->L, cfg)) {
    fprintf(stderr, "lade bench: %s\n", lade_tool_error());
  } else if (lade_loader_info(r->L, &r->nsamples, &steps, &epochs)) {
    fprintf(stderr, "lade bench: %s\n", lade_tool_error());
    lade_loader_destroy(r->L);
  } else {
    r->total = steps * epochs;
    if (o->max_batches && o->max_batches < r->total) r->total = o->max_batches;
    rc = bench_loop(r, o);
    r->elapsed = now() - r->t0;
    r->t_end = now();
    bench_finish(r, cfg, o, rc);
  }
  if (!rc) {
    bench_predict(r);
    bench_aggregate(r);
    r->rate = r->elapsed > 0 ? (double)r->samples / r->elapsed : 0;
    r->steady = steady_rate(r, &r->steady_ep);
    r->mbs_in = r->elapsed > 0 ? (double)r->st.bytes_read / r->elapsed / 1e6 : 0;
    r->mbs_out = r->elapsed > 0 ? (double)r->out_bytes / r->elapsed / 1e6 : 0;
    if (o->json) bench_report_json(r, o);
    else bench_report_text(r, o);
  }
  lade_tool_warm_free(&r->warm);
  free(r);
  return rc ? 1 : 0;
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
      case 't': bad = lade_tool_set(cfg, "transform", optarg); break;
      case 'b': bad = lade_tool_set(cfg, "batch_size", optarg); break;
      case 'e': bad = lade_tool_set(cfg, "epochs", optarg); break;
      case 'j': bad = lade_tool_set(cfg, "threads", optarg); break;
      case 'p': bad = lade_tool_set(cfg, "prefetch", optarg); break;
      case 's': bad = lade_tool_set(cfg, "seed", optarg); break;
      case 'P': bad = lade_tool_set(cfg, "plan", optarg); break;
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
  int rc = lade_tool_set(cfg, "source", o.dir) ? 2 : run_bench(cfg, &o);
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
  if (!strcmp(cmd, "ls")) return lade_tool_ls(argc - 1, argv + 1);
  if (!strcmp(cmd, "pack")) return lade_tool_pack(argc - 1, argv + 1);
  if (!strcmp(cmd, "index")) return lade_tool_index(argc - 1, argv + 1);
  if (!strcmp(cmd, "probe")) return lade_tool_probe(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan")) return lade_tool_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "simulate")) return lade_tool_simulate(argc - 1, argv + 1);
  if (!strcmp(cmd, "model")) return lade_tool_model(argc - 1, argv + 1);
  if (!strcmp(cmd, "dlio")) return lade_tool_dlio(argc - 1, argv + 1);
  fprintf(stderr, "lade: unknown command '%s'\n\n", cmd);
  return usage_main(stderr);
}
