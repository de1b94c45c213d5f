/*
 * dlio.c - the `lade dlio` command: datagen, run and sweep over DLIO's
 * workload files (docs/dlio.md; dlio.h says which file does what).
 *
 * Ranks come from the launcher, as DLIO's do: `mpirun -np N lade dlio run
 * ...` (MPI is initialised here with MPI_THREAD_MULTIPLE, before the
 * loader's transport starts beside it), or `torchrun --no_python ... lade
 * dlio run ...` (UCX, through a rendezvous folder). `sweep` runs `run` at
 * increasing rank counts through a launcher and reports the most emulated
 * accelerators this host keeps at AU >= metric.au: MLPerf Storage's figure
 * of merit.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lade/lade.h>

#include "dlio.h"

#ifdef LADE_HAVE_MPI
#include <mpi.h>
#endif

int dlio_run(const dlio_cfg_t *c, char *err, size_t errlen);

static int usage(FILE *f) {
  fprintf(f,
          "usage: lade dlio datagen WORKLOAD.yaml [KEY=VALUE ...]\n"
          "       lade dlio run WORKLOAD.yaml [KEY=VALUE ...]          (under mpirun -np N or torchrun: N accelerators)\n"
          "       lade dlio sweep WORKLOAD.yaml [KEY=VALUE ...] [--max N] [--launcher mpirun|torchrun]\n"
          "       lade dlio show WORKLOAD.yaml [KEY=VALUE ...]         (the configuration as lade reads it)\n"
          "\n"
          "WORKLOAD.yaml is a DLIO workload file as it is (unet3d_h100.yaml, resnet50_h100.yaml, ...); KEY=VALUE\n"
          "overrides DLIO's keys (dataset.num_files_train=64, dataset.data_folder=s3://bucket/unet3d, also Hydra's\n"
          "++workload.dataset...), and lade.KEY=VALUE sets lade's own: lade.plan=locality (default dlio: DLIO's\n"
          "sharding), lade.cache_mem_bytes=..., lade.evict_cache=1 (drop the page cache of what each step read).\n"
          "Writes DLIO's summary.json, RANK_output.json, RANK_per_epoch_stats.json and dlio.log, a per-step\n"
          "RANK_steps.csv, and prints DLIO's [METRIC] block (docs/dlio.md).\n");
  return f == stdout ? 0 : 2;
}

static int load(dlio_cfg_t *c, int argc, char **argv, int first, char *err, size_t errlen) {
  dlio_cfg_default(c);
  const char *yaml = NULL;
  int nover = 0;
  char **over = calloc((size_t)argc + 1, sizeof *over);
  if (!over) return snprintf(err, errlen, "out of memory"), -1;
  for (int i = first; i < argc; i++) {
    if (!strchr(argv[i], '=') && !yaml) yaml = argv[i];
    else over[nover++] = argv[i];
  }
  int rc = dlio_cfg_load(c, yaml, nover, over, err, errlen);
  free(over);
  return rc;
}

/* ------------------------------------------------------------ sweep */

/* A number after "key": in a JSON file (the summary's flat metric keys). */
static int json_number(const char *path, const char *key, double *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(buf, pat);
  if (!p) return -1;
  *out = strtod(p + strlen(pat), NULL);
  return 0;
}

typedef struct sweep_row {
  uint32_t n;
  double au, sps, mbps;
  int ok;
} sweep_row_t;

static int run_at(const char *launcher, uint32_t n, int argc, char **argv, const char *outdir, sweep_row_t *row) {
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return -1;
  self[sl] = '\0';
  char **av = calloc((size_t)argc + 24, sizeof *av);
  char np[32], folder[4200], nproc[64];
  if (!av) return -1;
  int k = 0;
  snprintf(np, sizeof np, "%u", n);
  snprintf(nproc, sizeof nproc, "--nproc_per_node=%u", n);
  if (!strcmp(launcher, "torchrun")) {
    av[k++] = "torchrun";
    av[k++] = "--standalone";
    av[k++] = nproc;
    av[k++] = "--redirects";
    av[k++] = "2";
    av[k++] = "--tee";
    av[k++] = "2";
    av[k++] = "--no_python";
  } else {
    av[k++] = "mpirun";
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    av[k++] = "--oversubscribe";
    av[k++] = "-np";
    av[k++] = np;
  }
  av[k++] = self;
  av[k++] = "dlio";
  av[k++] = "run";
  for (int i = 0; i < argc; i++) av[k++] = argv[i];
  snprintf(folder, sizeof folder, "output.folder=%s/accelerators-%u", outdir, n);
  av[k++] = folder;
  av[k] = NULL;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execvp(av[0], av);
    fprintf(stderr, "lade dlio sweep: cannot run %s: %s\n", av[0], strerror(errno));
    _exit(127);
  }
  free(av);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status)) {
    fprintf(stderr, "lade dlio sweep: the run at %u accelerators failed (status %d)\n", n, status);
    return -1;
  }
  char summary[4300];
  snprintf(summary, sizeof summary, "%s/accelerators-%u/summary.json", outdir, n);
  row->n = n;
  if (json_number(summary, "train_au_mean_percentage", &row->au) ||
      json_number(summary, "train_throughput_mean_samples_per_second", &row->sps) ||
      json_number(summary, "train_io_mean_MB_per_second", &row->mbps)) {
    fprintf(stderr, "lade dlio sweep: no metrics in %s\n", summary);
    return -1;
  }
  return 0;
}

static int cmd_sweep(int argc, char **argv) {
  const char *launcher = "mpirun";
  uint32_t max = 64;
  int n = 0;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--max") && i + 1 < argc) max = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--launcher") && i + 1 < argc) launcher = argv[++i];
    else rest[n++] = argv[i];
  }
  if (strcmp(launcher, "mpirun") && strcmp(launcher, "torchrun")) {
    fprintf(stderr, "lade dlio sweep: --launcher is mpirun or torchrun, not %s\n", launcher);
    free(rest);
    return 2;
  }
  dlio_cfg_t c;
  char err[1024];
  if (load(&c, n, rest, 0, err, sizeof err)) {
    fprintf(stderr, "lade dlio: %s\n", err);
    free(rest);
    return 2;
  }
  char outdir[DLIO_PATH];
  snprintf(outdir, sizeof outdir, "%s", c.output_folder[0] ? c.output_folder : "hydra_log/sweep");
  /* the user's output.folder is the sweep's: each run gets its own below */
  int m = 0;
  for (int i = 0; i < n; i++)
    if (strncmp(rest[i], "output.folder=", 14) && strncmp(rest[i], "++workload.output.folder=", 25)) rest[m++] = rest[i];
  double mark = c.au * 100;
  sweep_row_t rows[64];
  int nrows = 0;
  uint32_t lo = 0, hi = 0; /* the most that passed, the fewest that failed */
  for (uint32_t k = 1; k <= max && nrows < 64; k *= 2) {
    sweep_row_t r = {0};
    if (run_at(launcher, k, m, rest, outdir, &r)) break;
    r.ok = r.au >= mark;
    rows[nrows++] = r;
    if (!r.ok) {
      hi = k;
      break;
    }
    lo = k;
  }
  while (hi && lo && hi - lo > 1 && nrows < 64) { /* bisect between the last pass and the first fail */
    uint32_t k = lo + (hi - lo) / 2;
    sweep_row_t r = {0};
    if (run_at(launcher, k, m, rest, outdir, &r)) break;
    r.ok = r.au >= mark;
    rows[nrows++] = r;
    if (r.ok) lo = k;
    else hi = k;
  }
  printf("\nlade dlio sweep: %s, plan %s, AU mark %.0f%%\n", c.model, c.plan, mark);
  printf("%12s %10s %14s %12s %s\n", "accelerators", "AU (%)", "samples/s", "MB/s", "");
  for (int i = 0; i < nrows; i++)
    printf("%12u %10.2f %14.2f %12.2f %s\n", rows[i].n, rows[i].au, rows[i].sps, rows[i].mbps,
           rows[i].ok ? "pass" : "fail");
  if (lo) printf("max accelerators at AU >= %.0f%%: %u%s\n", mark, lo, hi ? "" : " (the most tried: raise --max)");
  else printf("max accelerators at AU >= %.0f%%: none (one accelerator already misses it)\n", mark);
  free(rest);
  return lo ? 0 : 1;
}

/* ------------------------------------------------------------ show */

static void show(const dlio_cfg_t *c) {
  static const char *const dist[] = {"none", "fixed", "normal", "uniform", "gamma", "exponential", "poisson"};
  printf("model: %s\nframework: %s\nworkflow: generate_data=%d train=%d\n", c->model,
         c->framework == DLIO_FW_PYTORCH ? "pytorch" : "tensorflow", c->generate_data, c->train);
  printf("dataset: data_folder=%s format=%s num_files_train=%llu num_files_eval=%llu num_samples_per_file=%llu "
         "record_length_bytes=%.17g record_length_bytes_stdev=%.17g record_length_bytes_resize=%.17g "
         "num_subfolders_train=%llu file_prefix=%s compression=%s\n",
         c->data_folder, c->format == DLIO_FMT_NPZ ? "npz" : "tfrecord", (unsigned long long)c->num_files_train,
         (unsigned long long)c->num_files_eval, (unsigned long long)c->num_samples_per_file, c->record_length,
         c->record_length_stdev, c->record_length_resize, (unsigned long long)c->num_subfolders_train, c->file_prefix,
         c->compression);
  printf("reader: data_loader=%s batch_size=%u read_threads=%u prefetch_size=%u shuffle_size=%llu file_shuffle=%d "
         "sample_shuffle=%d\n", c->data_loader == DLIO_FW_PYTORCH ? "pytorch" : "tensorflow", c->batch_size,
         c->read_threads, c->prefetch_size, (unsigned long long)c->shuffle_size, c->file_shuffle, c->sample_shuffle);
  printf("train: epochs=%llu seed=%llu computation_time=%s(mean=%.17g stdev=%.17g) total_training_steps=%lld\n",
         (unsigned long long)c->epochs, (unsigned long long)c->seed, dist[c->computation_time.type],
         c->computation_time.mean, c->computation_time.stdev, (long long)c->total_training_steps);
  printf("metric: au=%.17g exclude_start_steps=%llu exclude_end_steps=%llu\n", c->au,
         (unsigned long long)c->exclude_start, (unsigned long long)c->exclude_end);
  printf("lade: plan=%s evict_cache=%d", c->plan, c->evict_cache);
  for (size_t i = 0; i < c->nlade_sets; i++) printf(" %s=%s", c->lade_sets[i][0], c->lade_sets[i][1]);
  printf("\n");
}

/* ------------------------------------------------------------ entry */

int lade_tool_dlio(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  const char *sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) return usage(stdout);
  if (!strcmp(sub, "sweep")) return cmd_sweep(argc - 1, argv + 1);
  bool gen = !strcmp(sub, "datagen"), run = !strcmp(sub, "run"), sh = !strcmp(sub, "show");
  if (!gen && !run && !sh) {
    fprintf(stderr, "lade dlio: unknown command '%s'\n\n", sub);
    return usage(stderr);
  }
  dlio_cfg_t c;
  char err[2048] = "";
  if (load(&c, argc, argv, 2, err, sizeof err)) {
    fprintf(stderr, "lade dlio: %s\n", err);
    dlio_cfg_free(&c);
    return 2;
  }
  if (sh) {
    show(&c);
    dlio_cfg_free(&c);
    return 0;
  }
  int mpi = 0;
#ifdef LADE_HAVE_MPI
  const char *w = getenv("OMPI_COMM_WORLD_SIZE");
  if (!w) w = getenv("PMI_SIZE");
  if (w && strtoul(w, NULL, 10) > 1) {
    int prov = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &prov) == MPI_SUCCESS) mpi = 1;
  }
#endif
  int rc = 0;
  if (gen) {
    uint32_t rank = 0, world = 1;
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMI_RANK");
    if (!r) r = getenv("RANK");
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (!ws) ws = getenv("PMI_SIZE");
    if (!ws) ws = getenv("WORLD_SIZE");
    if (r && ws) rank = (uint32_t)strtoul(r, NULL, 10), world = (uint32_t)strtoul(ws, NULL, 10);
    if (!world || rank >= world) rank = 0, world = 1;
    rc = dlio_datagen(&c, rank, world, err, sizeof err);
  } else {
    rc = dlio_run(&c, err, sizeof err);
  }
  if (rc) fprintf(stderr, "lade dlio %s: %s\n", sub, err);
#ifdef LADE_HAVE_MPI
  if (mpi) {
    if (rc) MPI_Abort(MPI_COMM_WORLD, 1); /* the other ranks may wait at a barrier */
    MPI_Finalize();
  }
#else
  (void)mpi;
#endif
  dlio_cfg_free(&c);
  return rc ? 1 : 0;
}
