/*
 * dlio_run.c - `lade dlio run`: DLIO's training loop with lade as the
 * reader (docs/dlio.md).
 *
 * Each rank is one emulated accelerator, as in DLIO's main.py: it takes a
 * batch from the loader, sleeps computation_time (the model's step), then
 * meets the other ranks at a barrier; the score is the accelerator
 * utilisation AU = time computing / wall time. The barrier and the metric
 * gathering are lade_loader_allgather() over the loader's own transport (MPI
 * under mpirun, UCX under torchrun), so the emulation needs no second
 * communication library.
 *
 * Metrics follow DLIO's utils/statscounter.py to the formula (the tests
 * recompute them from the per-step log): per rank and epoch (one block, no
 * checkpoints) over the steps [exclude_start, steps - 1 - exclude_end],
 *   AU         = sum(compute) / (block wall time - proc of the excluded steps)
 *   throughput = (steps - 2) / that time * batch     (DLIO's hard-coded -2)
 * then AU averaged and throughput summed over ranks per epoch, mean and
 * population stdev over epochs, I/O MB/s = samples/s x record_length_bytes
 * / 2^20. The files DLIO writes are written with DLIO's keys (summary.json,
 * RANK_per_epoch_stats.json, RANK_output.json, dlio.log), the [METRIC] block
 * goes to stdout and dlio.log, and lade adds what DLIO cannot show: its
 * stages, its cache, peer and storage bytes (summary.json "lade") and a
 * per-step log (RANK_steps.csv: load, compute, proc and barrier seconds).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lade/lade.h>
#include <lade/plan.h>

#include "dlio.h"
#include "shown.h"

#ifdef LADE_HAVE_MPI
#include <mpi.h>
#endif

typedef struct rank_env {
  uint32_t rank, world;
  int launcher; /* 0 none, 1 mpirun, 2 torchrun */
} rank_env_t;

static uint32_t env_u32(const char *a, const char *b) {
  const char *v = getenv(a);
  if (!v && b) v = getenv(b);
  return v ? (uint32_t)strtoul(v, NULL, 10) : 0;
}

static void detect_env(rank_env_t *e) {
  e->rank = 0;
  e->world = 1;
  e->launcher = 0;
  uint32_t w = env_u32("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
  if (w > 1) {
    e->world = w;
    e->rank = env_u32("OMPI_COMM_WORLD_RANK", "PMI_RANK");
    e->launcher = 1;
    return;
  }
  w = env_u32("WORLD_SIZE", NULL);
  if (w > 1 && getenv("RANK")) {
    e->world = w;
    e->rank = env_u32("RANK", NULL);
    e->launcher = 2;
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* DLIO's utcnow(): local time with microseconds. */
static void stamp(char *buf, size_t size) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  localtime_r(&ts.tv_sec, &tm);
  char b[24];
  if (!strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm)) b[0] = '\0';
  snprintf(buf, size, "%.19s.%06ld", b, ts.tv_nsec / 1000);
}

static void sleep_s(double s) {
  if (s <= 0) return;
  double end = now_s() + s;
  for (;;) {
    double left = end - now_s();
    if (left <= 0) break;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

static int mkdirs(const char *path) {
  char tmp[DLIO_PATH];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

/* ------------------------------------------------------------ statistics */

static double mean_of(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i];
  return n ? s / (double)n : NAN;
}

static double std_of(const double *v, size_t n) { /* numpy's np.std: population */
  if (!n) return NAN;
  double m = mean_of(v, n), s = 0;
  for (size_t i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
  return sqrt(s / (double)n);
}

/* One epoch of one rank (DLIO: one block). */
typedef struct epoch_rec {
  double *load, *proc, *compute, *barrier;
  double *benter;           /* when the step's barrier was entered (CLOCK_MONOTONIC: one clock for the host) */
  uint64_t *samples;        /* lade.log_samples: the batch's indices, batch per step */
  uint64_t steps;
  double t0, t1;            /* block start and end (monotonic) */
  double au, throughput;    /* percent, samples/s */
  char start[40], end[40];  /* DLIO's time stamps */
} epoch_rec_t;

/* DLIO's compute_metrics_train for one block. */
static void block_metrics(epoch_rec_t *r, const dlio_cfg_t *c) {
  uint64_t n = r->steps, s0 = c->exclude_start;
  int64_t e0 = (int64_t)n - 1 - (int64_t)c->exclude_end; /* inclusive */
  double compute = 0, excluded = 0;
  for (uint64_t i = 0; i < n; i++) {
    if ((int64_t)i >= (int64_t)s0 && (int64_t)i <= e0) compute += r->compute[i];
    else excluded += r->proc[i];
  }
  double total = (r->t1 - r->t0) - excluded;
  r->au = compute == 0 ? 0.0 : compute / total * 100.0;
  r->throughput = ((double)n - 2.0) / total * c->batch_size;
}

/* ------------------------------------------------------------ JSON output */

static void json_list(FILE *f, const double *v, size_t n, const char *fmt) {
  fputc('[', f);
  for (size_t i = 0; i < n; i++) {
    fprintf(f, i ? ", " : "");
    fprintf(f, fmt, v[i]);
  }
  fputc(']', f);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static int write_rank_files(const dlio_cfg_t *c, const char *out, uint32_t rank, const epoch_rec_t *ep, uint64_t E,
                            double t_origin) {
  char path[DLIO_PATH + 64];
  snprintf(path, sizeof path, "%s/%u_output.json", out, rank);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  fprintf(f, "{\n");
  for (uint64_t e = 0; e < E; e++) {
    const epoch_rec_t *r = &ep[e];
    fprintf(f, "    \"%llu\": {\n", (unsigned long long)(e + 1));
    fprintf(f, "        \"load\": {\"block1\": ");
    json_list(f, r->load, r->steps, "%.9g");
    fprintf(f, "},\n        \"proc\": {\"block1\": ");
    json_list(f, r->proc, r->steps, "%.9g");
    fprintf(f, "},\n        \"throughput\": {\"block1\": %.17g},\n", r->throughput);
    fprintf(f, "        \"au\": {\"block1\": %.17g},\n", r->au);
    fprintf(f, "        \"compute\": {\"block1\": ");
    json_list(f, r->compute, r->steps, "%.9g");
    fprintf(f, "},\n        \"lade\": {\"block1_start_s\": %.9f, \"block1_end_s\": %.9f, \"barrier\": ", r->t0 - t_origin,
            r->t1 - t_origin);
    json_list(f, r->barrier, r->steps, "%.9g");
    fprintf(f, "}\n    },\n");
  }
  fprintf(f, "    \"hostname\": ");
  json_str(f, host);
  fprintf(f, "\n}\n");
  int rc = fclose(f);
  snprintf(path, sizeof path, "%s/%u_per_epoch_stats.json", out, rank);
  f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\n");
  for (uint64_t e = 0; e < E; e++) {
    const epoch_rec_t *r = &ep[e];
    fprintf(f, "    \"%llu\": {\n        \"start\": \"%s\",\n        \"block1\": {\n            \"start\": \"%s\",\n"
               "            \"end\": \"%s\",\n            \"duration\": \"%.2f\"\n        },\n        \"end\": \"%s\",\n"
               "        \"duration\": \"%.2f\"\n    }%s\n",
            (unsigned long long)(e + 1), r->start, r->start, r->end, r->t1 - r->t0, r->end, r->t1 - r->t0,
            e + 1 < E ? "," : "");
  }
  fprintf(f, "}\n");
  rc |= fclose(f);
  /* the per-step log: everything the figures are made of */
  snprintf(path, sizeof path, "%s/%u_steps.csv", out, rank);
  f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "epoch,step,load_s,compute_s,proc_s,barrier_s,block_start_s,block_end_s,barrier_enter_mono_s\n");
  for (uint64_t e = 0; e < E; e++)
    for (uint64_t s = 0; s < ep[e].steps; s++)
      fprintf(f, "%llu,%llu,%.9f,%.9f,%.9f,%.9f,%.9f,%.9f,%.9f\n", (unsigned long long)(e + 1),
              (unsigned long long)(s + 1), ep[e].load[s], ep[e].compute[s], ep[e].proc[s], ep[e].barrier[s],
              ep[e].t0 - t_origin, ep[e].t1 - t_origin, ep[e].benter[s]);
  rc |= fclose(f);
  if (c->log_samples) { /* every sample this rank trained on, in order */
    snprintf(path, sizeof path, "%s/%u_samples.csv", out, rank);
    f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "epoch,step,indices\n");
    for (uint64_t e = 0; e < E; e++)
      for (uint64_t s = 0; s < ep[e].steps; s++) {
        fprintf(f, "%llu,%llu,", (unsigned long long)(e + 1), (unsigned long long)(s + 1));
        for (uint32_t k = 0; k < c->batch_size; k++)
          fprintf(f, "%s%llu", k ? " " : "", (unsigned long long)ep[e].samples[s * c->batch_size + k]);
        fputc('\n', f);
      }
    rc |= fclose(f);
  }
  return rc ? -1 : 0;
}

/* ------------------------------------------------------------ the loader */

static int set(lade_config_t *cfg, const char *k, const char *v, char *err, size_t errlen) {
  if (lade_config_set(cfg, k, v) == 0) return 0;
  snprintf(err, errlen, "setting %s=%s: %s", k, v, lade_tool_error());
  return -1;
}

static int setu(lade_config_t *cfg, const char *k, uint64_t v, char *err, size_t errlen) {
  char b[32];
  snprintf(b, sizeof b, "%llu", (unsigned long long)v);
  return set(cfg, k, b, err, errlen);
}

/* The bytes of DLIO's resized_image: max_dimension^2 (the sample every
 * DLIO reader returns, whatever it read). */
static uint64_t resized_bytes(const dlio_cfg_t *c) {
  double rl = c->record_length_resize > 0 ? c->record_length_resize : c->record_length;
  uint64_t d = (uint64_t)sqrt(rl);
  return d ? d * d : 1;
}

/* The source: the exact files DLIO reads (its names, the first
 * num_files_train), as a list file for TFRecord; the train folder for npz.
 * The list's path is a function of its contents (a cache_dir keys entries
 * by the source's identity, so the next run finds them), written by rename
 * so ranks writing it at once never read half of it. */
static int dataset_source(const dlio_cfg_t *c, uint32_t rank, char *src, size_t size, char *err, size_t errlen) {
  char folder[DLIO_PATH + 16];
  snprintf(folder, sizeof folder, "%s/train", c->data_folder);
  if (c->format == DLIO_FMT_NPZ) {
    snprintf(src, size, "%s%s", folder, strstr(folder, "://") ? "/" : "");
    return 0;
  }
  char name[DLIO_PATH + 256];
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the names */
  for (uint64_t i = 0; i < c->num_files_train; i++) {
    dlio_file_name(c, false, i, name, sizeof name);
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    h = (h ^ '\n') * 1099511628211ull;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[DLIO_PATH], part[DLIO_PATH + 128];
  snprintf(dir, sizeof dir, "%s/lade-dlio-%u", tmp && tmp[0] ? tmp : "/tmp", (unsigned)geteuid());
  if (mkdirs(dir)) {
    snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
    return -1;
  }
  snprintf(src, size, "%s/train-%016llx.txt", dir, (unsigned long long)h);
  snprintf(part, sizeof part, "%s.%u.%d", src, rank, (int)getpid());
  FILE *f = fopen(part, "w");
  if (!f) {
    snprintf(err, errlen, "cannot write %s: %s", part, strerror(errno));
    return -1;
  }
  for (uint64_t i = 0; i < c->num_files_train; i++) {
    dlio_file_name(c, false, i, name, sizeof name);
    fprintf(f, "%s\n", name);
  }
  if (fclose(f) || rename(part, src)) {
    snprintf(err, errlen, "cannot write %s: %s", src, strerror(errno));
    unlink(part);
    return -1;
  }
  return 0;
}

static int make_loader(const dlio_cfg_t *c, const rank_env_t *env, lade_loader_t **L, char *err,
                       size_t errlen) {
  lade_config_t *cfg = NULL;
  if (lade_config_create(&cfg)) {
    snprintf(err, errlen, "%s", lade_tool_error());
    return -1;
  }
  char src[DLIO_PATH + 64];
  int rc = dataset_source(c, env->rank, src, sizeof src, err, errlen);
  bool tf = c->data_loader == DLIO_FW_TENSORFLOW;
  if (!rc) rc = set(cfg, "source", src, err, errlen);
  if (!rc) rc = set(cfg, "source_type", c->format == DLIO_FMT_NPZ ? (strstr(src, "s3://") ? "s3" : "dir")
                                                                  : "tfrecord", err, errlen);
  if (!rc) rc = set(cfg, "transform", c->format == DLIO_FMT_NPZ ? "npz" : "raw", err, errlen);
  if (!rc) rc = setu(cfg, "raw_size", resized_bytes(c), err, errlen);
  if (!rc) rc = set(cfg, "raw_overflow", "cut", err, errlen);
  if (!rc) rc = setu(cfg, "batch_size", c->batch_size, err, errlen);
  if (!rc) rc = setu(cfg, "epochs", c->epochs, err, errlen);
  if (!rc) rc = setu(cfg, "seed", c->seed, err, errlen);
  if (!rc) rc = set(cfg, "drop_last", "1", err, errlen);
  if (!rc) rc = setu(cfg, "threads", c->read_threads ? c->read_threads : 1, err, errlen);
  /* DLIO's batches in flight: its torch loader gives each of read_threads
   * workers prefetch_factor = ceil(prefetch_size / read_threads) batches
   * (2 when that is 0), tf.data prefetches prefetch_size */
  uint64_t rt = c->read_threads, depth = c->prefetch_size;
  if (!tf && rt) {
    uint64_t pf = (c->prefetch_size + rt - 1) / rt;
    depth = rt * (pf ? pf : 2);
  }
  if (!rc) rc = setu(cfg, "prefetch", depth ? depth : 1, err, errlen);
  if (!rc) rc = set(cfg, "plan", c->plan, err, errlen);
  if (!rc && !strcmp(c->plan, "dlio")) {
    rc = set(cfg, "dlio_reader", tf ? "tensorflow" : "pytorch", err, errlen);
    if (!rc && c->format == DLIO_FMT_NPZ) rc = setu(cfg, "dlio_samples_per_file", c->num_samples_per_file, err, errlen);
    if (!rc) rc = setu(cfg, "dlio_interleave", c->read_threads ? c->read_threads : 1, err, errlen);
    /* tf.data shuffles records in a buffer (sample_shuffle); DLIO's torch
     * sampler reads in order whatever sample_shuffle says */
    if (!rc) rc = set(cfg, "shuffle", tf && c->sample_shuffle != DLIO_SHUFFLE_OFF ? "1" : "0", err, errlen);
    if (!rc) rc = setu(cfg, "shuffle_buffer", c->shuffle_size, err, errlen);
  }
  if (!rc && env->world > 1) {
    rc = setu(cfg, "world_size", env->world, err, errlen);
    if (!rc) rc = setu(cfg, "rank", env->rank, err, errlen);
    if (!rc) rc = set(cfg, "transport", env->launcher == 2 ? "ucx" : "mpi", err, errlen);
    if (!rc && env->launcher == 2) {
      char rdv[DLIO_PATH + 32];
      snprintf(rdv, sizeof rdv, "%s/.lade-rendezvous", c->output_folder[0] ? c->output_folder : ".");
      mkdirs(rdv);
      rc = set(cfg, "rendezvous_dir", rdv, err, errlen);
    }
  }
  for (size_t i = 0; !rc && i < c->nlade_sets; i++) rc = set(cfg, c->lade_sets[i][0], c->lade_sets[i][1], err, errlen);
  if (!rc && lade_loader_create(L, cfg)) {
    snprintf(err, errlen, "rank %u: %s", env->rank, lade_tool_error());
    rc = -1;
  }
  lade_config_destroy(cfg);
  return rc;
}

static int barrier(lade_loader_t *L, char *err, size_t errlen) {
  if (lade_loader_allgather(L, NULL, 0, NULL) == 0) return 0;
  snprintf(err, errlen, "barrier: %s", lade_tool_error());
  return -1;
}

/* lade.evict_cache: the page cache of the files a batch came from is
 * dropped after its step, so every read is a cold read (a dataset larger
 * than the host's memory, as DLIO's sizing rule asks for). A thread of its
 * own does it (a DONTNEED of a few MB takes milliseconds): the emulation's
 * own work stays out of the step it measures. */
typedef struct evictor {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char (*ring)[DLIO_PATH];
  size_t cap, head, n;
  bool stop;
  pthread_t th;
  bool started;
} evictor_t;

static void *evict_main(void *arg) {
  evictor_t *v = arg;
  char path[DLIO_PATH];
  pthread_mutex_lock(&v->mu);
  for (;;) {
    while (!v->n && !v->stop) pthread_cond_wait(&v->cv, &v->mu);
    if (!v->n) break;
    memcpy(path, v->ring[v->head], sizeof path);
    v->head = (v->head + 1) % v->cap;
    v->n--;
    pthread_mutex_unlock(&v->mu);
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      close(fd);
    }
    pthread_mutex_lock(&v->mu);
  }
  pthread_mutex_unlock(&v->mu);
  return NULL;
}

static int evictor_start(evictor_t *v) {
  memset(v, 0, sizeof *v);
  v->cap = 4096;
  v->ring = malloc(v->cap * sizeof *v->ring);
  if (!v->ring) return -1;
  pthread_mutex_init(&v->mu, NULL);
  pthread_cond_init(&v->cv, NULL);
  if (pthread_create(&v->th, NULL, evict_main, v)) return -1;
  v->started = true;
  return 0;
}

static void evictor_stop(evictor_t *v) {
  if (!v->started) {
    free(v->ring);
    return;
  }
  pthread_mutex_lock(&v->mu);
  v->stop = true;
  pthread_cond_signal(&v->cv);
  pthread_mutex_unlock(&v->mu);
  pthread_join(v->th, NULL);
  pthread_mutex_destroy(&v->mu);
  pthread_cond_destroy(&v->cv);
  free(v->ring);
}

static void evict_batch(evictor_t *v, lade_loader_t *L, const lade_batch_t *b) {
  char path[DLIO_PATH], last[DLIO_PATH] = "";
  for (uint32_t i = 0; i < b->valid; i++) {
    if (lade_loader_sample(L, b->indices[i], path, sizeof path, NULL)) continue;
    char *member = strstr(path, ".tfrecord");
    if (member) member[9] = '\0'; /* a record names its file first */
    if (!strcmp(path, last)) continue;
    snprintf(last, sizeof last, "%s", path);
    pthread_mutex_lock(&v->mu);
    if (v->n < v->cap) { /* a full ring drops the request: the file stays cached, never a wait */
      memcpy(v->ring[(v->head + v->n) % v->cap], path, sizeof path);
      v->n++;
      pthread_cond_signal(&v->cv);
    }
    pthread_mutex_unlock(&v->mu);
  }
}

/* ------------------------------------------------------------ the run */

typedef struct gathered {
  double au, throughput;
} gathered_t;

static void print_metric(FILE *f, const dlio_cfg_t *c, uint32_t world, const double *au, const double *tp, uint64_t E,
                         const char *verdict) {
  fprintf(f, "[OUTPUT] Averaged metric over all steps/epochs\n");
  fprintf(f, "[METRIC] ==========================================================\n");
  fprintf(f, "[METRIC] Number of Simulated Accelerators: %u \n", world);
  fprintf(f, "[METRIC] Training Accelerator Utilization [AU] (%%): %.4f (%.4f)\n", mean_of(au, E), std_of(au, E));
  fprintf(f, "[METRIC] Training Throughput (samples/second): %.4f (%.4f)\n", mean_of(tp, E), std_of(tp, E));
  fprintf(f, "[METRIC] Training I/O Throughput (MB/second): %.4f (%.4f)\n",
          mean_of(tp, E) * c->record_length / 1024 / 1024, std_of(tp, E) * c->record_length / 1024 / 1024);
  fprintf(f, "[METRIC] train_au_meet_expectation: %s\n", verdict);
  fprintf(f, "[METRIC] ==========================================================\n\n");
}

static double host_mem_gb(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return pages > 0 && psize > 0 ? (double)pages * (double)psize / 1073741824.0 : 0;
}

static void write_summary(const dlio_cfg_t *c, const char *out, uint32_t world, uint32_t hosts, const double *au,
                          const double *tp, uint64_t E, const char *start, const char *end, const char *verdict,
                          const lade_stats_t *st, const char *plan) {
  char path[DLIO_PATH + 32];
  snprintf(path, sizeof path, "%s/summary.json", out);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "lade dlio: cannot write %s: %s\n", path, strerror(errno));
    return;
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  double mem = host_mem_gb();
  double data_per_host = (double)((world / (hosts ? hosts : 1)) * c->num_samples_per_file * c->num_files_train / world) *
                         c->record_length / 1073741824.0;
  fprintf(f, "{\n    \"start\": \"%s\",\n    \"num_accelerators\": %u,\n    \"num_hosts\": %u,\n    \"hostname\": ",
          start, world, hosts);
  json_str(f, host);
  fprintf(f, ",\n    \"metric\": {\n        \"train_au_percentage\": ");
  json_list(f, au, E, "%.17g");
  fprintf(f, ",\n        \"train_au_mean_percentage\": %.17g,\n", mean_of(au, E));
  fprintf(f, "        \"train_au_meet_expectation\": \"%s\",\n", verdict);
  fprintf(f, "        \"train_au_stdev_percentage\": %.17g,\n", std_of(au, E));
  fprintf(f, "        \"train_throughput_samples_per_second\": ");
  json_list(f, tp, E, "%.17g");
  fprintf(f, ",\n        \"train_throughput_mean_samples_per_second\": %.17g,\n", mean_of(tp, E));
  fprintf(f, "        \"train_throughput_stdev_samples_per_second\": %.17g,\n", std_of(tp, E));
  fprintf(f, "        \"train_io_mean_MB_per_second\": %.17g,\n", mean_of(tp, E) * c->record_length / 1048576.0);
  fprintf(f, "        \"train_io_stdev_MB_per_second\": %.17g\n    },\n", std_of(tp, E) * c->record_length / 1048576.0);
  fprintf(f, "    \"num_files_train\": %llu,\n    \"num_files_eval\": %llu,\n    \"num_samples_per_file\": %llu,\n",
          (unsigned long long)c->num_files_train, (unsigned long long)c->num_files_eval,
          (unsigned long long)c->num_samples_per_file);
  fprintf(f, "    \"host_cpu_count\": [%ld],\n    \"host_processor_name\": \"x86_64\",\n", sysconf(_SC_NPROCESSORS_ONLN));
  fprintf(f, "    \"potential_caching\": [%d],\n", mem <= data_per_host ? 0 : 1);
  fprintf(f, "    \"host_memory_GB\": [%.6f],\n    \"data_size_per_host_GB\": %.17g,\n    \"epochs\": %llu,\n", mem,
          data_per_host, (unsigned long long)E);
  /* lade's own: what DLIO's reader cannot report */
  fprintf(f, "    \"lade\": {\n        \"version\": \"%s\",\n        \"plan\": \"%s\",\n", lade_version(), plan);
  fprintf(f, "        \"rank0_stage_seconds\": {\"read\": %.6f, \"transform\": %.6f, \"collate\": %.6f, \"wait\": %.6f},\n",
          st->stage_seconds[LADE_STAGE_READ], st->stage_seconds[LADE_STAGE_TRANSFORM],
          st->stage_seconds[LADE_STAGE_COLLATE], st->stage_seconds[LADE_STAGE_WAIT]);
  fprintf(f, "        \"rank0_samples_by_source\": {\"storage\": %llu, \"memory\": %llu, \"disk\": %llu, \"peer\": %llu},\n",
          (unsigned long long)st->samples_by_source[0], (unsigned long long)st->samples_by_source[1],
          (unsigned long long)st->samples_by_source[2], (unsigned long long)st->samples_by_source[3]);
  fprintf(f, "        \"rank0_bytes_by_source\": {\"storage\": %llu, \"memory\": %llu, \"disk\": %llu, \"peer\": %llu},\n",
          (unsigned long long)st->bytes_by_source[0], (unsigned long long)st->bytes_by_source[1],
          (unsigned long long)st->bytes_by_source[2], (unsigned long long)st->bytes_by_source[3]);
  fprintf(f, "        \"rank0_get_requests\": %llu,\n        \"rank0_first_batch_seconds\": %.6f\n    },\n",
          (unsigned long long)st->get_requests, st->first_batch_seconds);
  fprintf(f, "    \"end\": \"%s\"\n}\n", end);
  fclose(f);
}

/* The per-rank numbers every rank sends to rank 0 (fixed size). */
typedef struct rank_sum {
  char host[64];
  double mem_gb;
  uint64_t bytes_by_source[4];
} rank_sum_t;

/* DLIO's output folder: output.folder, or its Hydra default
 * hydra_log/MODEL/DATE-TIME on this rank's clock (rank 0's name is shared
 * once the loader's transport is up: share_output). out: DLIO_PATH bytes. */
static void output_name(const dlio_cfg_t *c, char *out) {
  bool default_out = !c->output_folder[0];
  if (default_out) {
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char d[32];
    strftime(d, sizeof d, "%Y-%m-%d-%H-%M-%S", &tm);
    snprintf(out, DLIO_PATH, "hydra_log/%s/%s", c->model, d);
  } else {
    snprintf(out, DLIO_PATH, "%s", c->output_folder);
  }
}

/* One output folder for all ranks: rank 0's name into out (DLIO_PATH
 * bytes), created. */
static int share_output(lade_loader_t *L, const rank_env_t *env, char *out, char *err, size_t errlen) {
  int rc = 0;
  char *names = malloc((size_t)env->world * DLIO_PATH);
  if (!names) rc = -1, snprintf(err, errlen, "out of memory");
  if (!rc && lade_loader_allgather(L, out, DLIO_PATH, names))
    rc = -1, snprintf(err, errlen, "sharing the output folder: %s", lade_tool_error());
  if (!rc) snprintf(out, DLIO_PATH, "%s", names);
  free(names);
  if (!rc && mkdirs(out)) rc = -1, snprintf(err, errlen, "cannot create output folder %s: %s", out, strerror(errno));
  return rc;
}

/* The loader against the workload: the samples it holds, and its *steps
 * per epoch against DLIO's, *max_steps = floor(files x samples per file /
 * batch / ranks), of which *run_steps run (train.total_training_steps). */
static int check_steps(const dlio_cfg_t *c, const rank_env_t *env, lade_loader_t *L, uint64_t *steps,
                       uint64_t *max_steps, uint64_t *run_steps, char *err, size_t errlen) {
  uint64_t samples = 0;
  if (lade_loader_info(L, &samples, steps, NULL)) {
    snprintf(err, errlen, "%s", lade_tool_error());
    return -1;
  }
  uint64_t expect_files = c->num_files_train;
  uint64_t expect = c->format == DLIO_FMT_NPZ ? expect_files : expect_files * c->num_samples_per_file;
  if (samples != expect) {
    snprintf(err, errlen, "%s holds %llu %s, the workload says %llu (dataset.num_files_train=%llu%s): run `lade "
             "dlio datagen` with the same settings, or give the count the folder holds",
             c->data_folder, (unsigned long long)samples, c->format == DLIO_FMT_NPZ ? "files" : "records",
             (unsigned long long)expect, (unsigned long long)c->num_files_train,
             c->format == DLIO_FMT_NPZ ? "" : " x dataset.num_samples_per_file");
    return -1;
  }
  *max_steps = c->num_files_train * c->num_samples_per_file / c->batch_size / env->world;
  *run_steps = c->total_training_steps > 0 && (uint64_t)c->total_training_steps < *max_steps
                   ? (uint64_t)c->total_training_steps : *max_steps;
  if (*steps < *run_steps) {
    snprintf(err, errlen, "the loader has %llu steps per epoch, DLIO's workload %llu (plan %s)",
             (unsigned long long)*steps, (unsigned long long)*run_steps, c->plan);
    return -1;
  }
  if (*run_steps < 3) {
    snprintf(err, errlen, "%llu steps per epoch: DLIO's metrics need at least 3 (its throughput counts steps "
             "- 2); give more files or a smaller batch", (unsigned long long)*run_steps);
    return -1;
  }
  return 0;
}

/* Rank 0's first lines. */
static void print_start(const dlio_cfg_t *c, const rank_env_t *env, uint64_t max_steps) {
  char ts[40];
  stamp(ts, sizeof ts);
  printf("[OUTPUT] %s Running DLIO with lade %s [Training] with %u process(es)\n", ts, lade_version(), env->world);
  printf("[OUTPUT] %s Max steps per epoch: %llu = %llu * %llu / %u / %u (samples per file * num files / batch size "
         "/ comm size)\n", ts, (unsigned long long)max_steps, (unsigned long long)c->num_samples_per_file,
         (unsigned long long)c->num_files_train, c->batch_size, env->world);
  printf("[OUTPUT] %s lade: plan %s, %u read threads per rank, source %s\n", ts, c->plan, c->read_threads,
         c->data_folder);
  fflush(stdout);
}

/* Epoch e (DLIO: its one block) of run_steps steps into r: each step takes
 * a batch (load), sleeps the computation time (compute), and meets the
 * other ranks at a barrier; then the block's metrics. */
static int run_epoch(const dlio_cfg_t *c, const rank_env_t *env, lade_loader_t *L, evictor_t *evict, uint64_t e,
                     uint64_t steps, uint64_t run_steps, epoch_rec_t *r, char *err, size_t errlen) {
  int rc = 0;
  r->load = calloc(run_steps, sizeof(double));
  r->proc = calloc(run_steps, sizeof(double));
  r->compute = calloc(run_steps, sizeof(double));
  r->barrier = calloc(run_steps, sizeof(double));
  r->benter = calloc(run_steps, sizeof(double));
  r->samples = c->log_samples ? calloc(run_steps * c->batch_size, sizeof(uint64_t)) : NULL;
  if (!r->load || !r->proc || !r->compute || !r->barrier || !r->benter || (c->log_samples && !r->samples)) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (e && run_steps < steps && lade_loader_seek(L, e, 0)) { /* a capped epoch's rest is skipped */
    snprintf(err, errlen, "%s", lade_tool_error());
    return -1;
  }
  stamp(r->start, sizeof r->start);
  if (env->rank == 0) printf("[OUTPUT] %s Starting epoch %llu: %llu steps expected\n", r->start,
                             (unsigned long long)(e + 1), (unsigned long long)run_steps);
  r->t0 = now_s();
  double t_load = r->t0;
  for (uint64_t s = 0; s < run_steps; s++) {
    lade_batch_t *b = NULL;
    if (lade_loader_next(L, &b) || !b) {
      snprintf(err, errlen, "rank %u epoch %llu step %llu: %s", env->rank, (unsigned long long)(e + 1),
               (unsigned long long)(s + 1), b ? "" : lade_tool_error());
      return -1;
    }
    double t_loaded = now_s();
    r->load[s] = t_loaded - t_load;
    double t_c = now_s();
    sleep_s(dlio_dist_draw(&c->computation_time, c->seed, env->rank, e * run_steps + s));
    double t_done = now_s();
    r->compute[s] = t_done - t_c;
    r->proc[s] = t_done - t_load;
    if (c->evict_cache) evict_batch(evict, L, b);
    for (uint32_t k = 0; r->samples && k < b->valid && k < c->batch_size; k++)
      r->samples[s * c->batch_size + k] = b->indices[k];
    lade_batch_release(b);
    double t_b = now_s();
    if ((rc = barrier(L, err, errlen)) != 0) return rc;
    t_load = now_s();
    r->barrier[s] = t_load - t_b;
    r->benter[s] = t_b;
    r->steps = s + 1;
  }
  r->t1 = now_s();
  stamp(r->end, sizeof r->end);
  block_metrics(r, c);
  rc = barrier(L, err, errlen);
  if (env->rank == 0) {
    printf("[OUTPUT] %s Ending block 1 - %llu steps completed in %.2f s\n", r->end, (unsigned long long)r->steps,
           r->t1 - r->t0);
    printf("[OUTPUT] %s Epoch %llu - Block 1 [Training] Accelerator Utilization [AU] (%%): %.4f\n", r->end,
           (unsigned long long)(e + 1), r->au);
    printf("[OUTPUT] %s Epoch %llu - Block 1 [Training] Throughput (samples/second): %.4f\n", r->end,
           (unsigned long long)(e + 1), r->throughput * env->world);
    printf("[OUTPUT] %s Ending epoch %llu - %llu steps completed in %.2f s\n", r->end, (unsigned long long)(e + 1),
           (unsigned long long)r->steps, r->t1 - r->t0);
    fflush(stdout);
  }
  return rc;
}

/* Every rank's per-epoch AU and throughput (*all: E per rank) and its host
 * and bytes by source (*rsall) to every rank; *st: this rank's stats. The
 * caller frees *all and *rsall. */
static int gather(const dlio_cfg_t *c, const rank_env_t *env, lade_loader_t *L, const epoch_rec_t *ep,
                  gathered_t **all, rank_sum_t **rsall, lade_stats_t *st, char *err, size_t errlen) {
  uint64_t E = c->epochs;
  gathered_t *mine = calloc(E, sizeof *mine);
  *all = calloc(E * env->world, sizeof **all);
  int rc = 0;
  if (!mine || !*all) rc = -1, snprintf(err, errlen, "out of memory");
  for (uint64_t e = 0; !rc && e < E; e++) mine[e] = (gathered_t){ep[e].au, ep[e].throughput};
  if (!rc && lade_loader_allgather(L, mine, E * sizeof *mine, *all))
    rc = -1, snprintf(err, errlen, "gathering the metrics: %s", lade_tool_error());
  free(mine);
  if (rc) return rc;
  lade_loader_stats(L, st, sizeof *st);
  rank_sum_t rs = {0};
  *rsall = calloc(env->world, sizeof **rsall);
  gethostname(rs.host, sizeof rs.host - 1);
  rs.mem_gb = host_mem_gb();
  memcpy(rs.bytes_by_source, st->bytes_by_source, sizeof rs.bytes_by_source);
  if (!*rsall || lade_loader_allgather(L, &rs, sizeof rs, *rsall))
    rc = -1, snprintf(err, errlen, "gathering the hosts: %s", *rsall ? lade_tool_error() : "out of memory");
  return rc;
}

/* Rank 0: the metrics over all ranks (AU averaged, throughput summed per
 * epoch) on stdout and in the log, lade's bytes by source, summary.json. */
static void report(const dlio_cfg_t *c, const rank_env_t *env, const char *out, const char *start, FILE *log,
                   const gathered_t *all, const rank_sum_t *rsall, const lade_stats_t *st) {
  uint64_t E = c->epochs;
  double *au = calloc(E, sizeof *au), *tp = calloc(E, sizeof *tp);
  uint32_t hosts = 0;
  for (uint32_t i = 0; i < env->world; i++) {
    bool seen = false;
    for (uint32_t j = 0; j < i; j++) seen |= !strcmp(rsall[i].host, rsall[j].host);
    hosts += !seen;
  }
  for (uint64_t e = 0; au && tp && e < E; e++) {
    for (uint32_t k = 0; k < env->world; k++) {
      au[e] += all[k * E + e].au;
      tp[e] += all[k * E + e].throughput;
    }
    au[e] /= env->world;
  }
  const char *verdict = mean_of(au, E) >= c->au * 100 ? "success" : "fail";
  char end[40];
  stamp(end, sizeof end);
  printf("[OUTPUT] %s Saved outputs in %s\n", end, out);
  print_metric(stdout, c, env->world, au, tp, E, verdict);
  if (log) {
    fprintf(log, "[OUTPUT] %s Saved outputs in %s\n", end, out);
    print_metric(log, c, env->world, au, tp, E, verdict);
  }
  /* lade's own account: where the bytes came from, over all ranks */
  uint64_t by[4] = {0};
  for (uint32_t k = 0; k < env->world; k++)
    for (int i = 0; i < 4; i++) by[i] += rsall[k].bytes_by_source[i];
  printf("[LADE] plan %s: bytes from storage %.1f MB, memory cache %.1f MB, disk cache %.1f MB, peers %.1f MB "
         "(all ranks)\n", c->plan, by[0] / 1e6, by[1] / 1e6, by[2] / 1e6, by[3] / 1e6);
  fflush(stdout);
  write_summary(c, out, env->world, hosts, au, tp, E, start, end, verdict, st, c->plan);
  free(au);
  free(tp);
}

static void free_epochs(epoch_rec_t *ep, uint64_t n) {
  for (uint64_t e = 0; ep && e < n; e++) {
    free(ep[e].load);
    free(ep[e].proc);
    free(ep[e].compute);
    free(ep[e].barrier);
    free(ep[e].benter);
    free(ep[e].samples);
  }
  free(ep);
}

int dlio_run(const dlio_cfg_t *c0, char *err, size_t errlen);
int dlio_run(const dlio_cfg_t *c0, char *err, size_t errlen) {
  dlio_cfg_t c = *c0;
  rank_env_t env;
  detect_env(&env);
  if (c.format != DLIO_FMT_NPZ && c.format != DLIO_FMT_TFRECORD) {
    snprintf(err, errlen, "dataset.format: lade reads npz and tfrecord");
    return -1;
  }
  if (c.preprocess_time.type != DLIO_DIST_NONE && env.rank == 0)
    fprintf(stderr, "lade dlio: warning: reader.preprocess_time is not emulated (a sleep per sample in the reader)\n");
  char start[40];
  stamp(start, sizeof start);
  char out[DLIO_PATH];
  output_name(&c, out);
  lade_loader_t *L = NULL;
  if (make_loader(&c, &env, &L, err, errlen)) return -1;
  uint64_t steps = 0, max_steps = 0, run_steps = 0;
  int rc = share_output(L, &env, out, err, errlen);
  if (!rc) rc = check_steps(&c, &env, L, &steps, &max_steps, &run_steps, err, errlen);
  FILE *log = NULL;
  if (!rc) {
    char lp[DLIO_PATH + 300];
    snprintf(lp, sizeof lp, "%s/%s", out, c.log_file);
    log = fopen(lp, "a");
  }
  epoch_rec_t *ep = rc ? NULL : calloc(c.epochs, sizeof *ep);
  if (!rc && !ep) rc = -1, snprintf(err, errlen, "out of memory");
  if (!rc && env.rank == 0) print_start(&c, &env, max_steps);
  evictor_t evict = {0};
  if (!rc && c.evict_cache && evictor_start(&evict)) rc = -1, snprintf(err, errlen, "cannot start the evictor");
  if (!rc) rc = barrier(L, err, errlen);
  double t_origin = now_s();
  for (uint64_t e = 0; !rc && e < c.epochs; e++)
    rc = run_epoch(&c, &env, L, &evict, e, steps, run_steps, &ep[e], err, errlen);
  if (c.evict_cache) evictor_stop(&evict);
  gathered_t *all = NULL;
  rank_sum_t *rsall = NULL;
  lade_stats_t st;
  memset(&st, 0, sizeof st);
  if (!rc) rc = gather(&c, &env, L, ep, &all, &rsall, &st, err, errlen);
  if (!rc && write_rank_files(&c, out, env.rank, ep, c.epochs, t_origin))
    rc = -1, snprintf(err, errlen, "cannot write the rank files in %s: %s", out, strerror(errno));
  if (!rc && env.rank == 0) report(&c, &env, out, start, log, all, rsall, &st);
  if (log) fclose(log);
  free(all);
  free(rsall);
  free_epochs(ep, c.epochs);
  lade_loader_destroy(L);
  return rc;
}
