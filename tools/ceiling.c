/*
 * ceiling.c - the machine's bare read and decode rates (ceiling.h).
 *
 * The read rate is what the page cache and the disk give to plain pread()s
 * of whole files, the decode rate what libjpeg-turbo gives for a whole
 * image decoded in blocks of rows into one buffer (the scanline API used as
 * TurboJPEG's tjDecompress2 uses it; bench/jpeg_transform.c measures the
 * two against each other). Both use the same number of threads as the
 * loader, one file at a time each, so lade's rate divided by them says how
 * close lade is to what this machine can do.
 */
#include "ceiling.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef LADE_HAVE_JPEG
#include <jpeglib.h>
#endif

double lade_tool_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void lade_tool_cpu_model(char *out, size_t size) {
  char line[512], name[256] = "", fam[32] = "", mod[32] = "";
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f) && !(name[0] && fam[0] && mod[0])) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    v[strcspn(v, "\n")] = '\0';
    if (!name[0] && !strncmp(line, "model name", 10)) snprintf(name, sizeof name, "%s", v);
    else if (!fam[0] && !strncmp(line, "cpu family", 10)) snprintf(fam, sizeof fam, "%s", v);
    else if (!mod[0] && !strncmp(line, "model", 5) && (line[5] == '\t' || line[5] == ' ')) snprintf(mod, sizeof mod, "%s", v);
  }
  if (f) fclose(f);
  if (!name[0]) snprintf(out, size, "unknown CPU");
  else if (fam[0]) snprintf(out, size, "%s (family %s model %s)", name, fam, mod);
  else snprintf(out, size, "%s", name);
}

#ifdef LADE_HAVE_JPEG
typedef struct jerr {
  struct jpeg_error_mgr mgr;
  jmp_buf jb;
} jerr_t;
static void jerr_exit(j_common_ptr c) { longjmp(((jerr_t *)c->err)->jb, 1); }
static void jerr_emit(j_common_ptr c, int level) { (void)c, (void)level; }

/* volatile: the values live across the setjmp */
int lade_tool_decode_whole(const uint8_t *jpeg, size_t len, int rows, uint8_t **buf, size_t *cap) {
  struct jpeg_decompress_struct ci;
  jerr_t je;
  JSAMPROW *volatile ptrs = NULL;
  ci.err = jpeg_std_error(&je.mgr);
  je.mgr.error_exit = jerr_exit;
  je.mgr.emit_message = jerr_emit;
  jpeg_create_decompress(&ci);
  if (setjmp(je.jb)) {
    free(ptrs);
    jpeg_destroy_decompress(&ci);
    return -1;
  }
  jpeg_mem_src(&ci, jpeg, (unsigned long)len);
  jpeg_read_header(&ci, TRUE);
  ci.out_color_space = JCS_RGB;
  jpeg_start_decompress(&ci);
  size_t stride = (size_t)ci.output_width * (size_t)ci.output_components, need = stride * ci.output_height;
  if (need > *cap) {
    uint8_t *p = realloc(*buf, need);
    if (!p) longjmp(je.jb, 1);
    *buf = p;
    *cap = need;
  }
  ptrs = malloc(sizeof *ptrs * ci.output_height);
  if (!ptrs) longjmp(je.jb, 1);
  for (JDIMENSION y = 0; y < ci.output_height; y++) ptrs[y] = *buf + stride * y;
  while (ci.output_scanline < ci.output_height) {
    JDIMENSION left = ci.output_height - ci.output_scanline;
    JDIMENSION ask = rows > 0 && (JDIMENSION)rows < left ? (JDIMENSION)rows : left;
    if (jpeg_read_scanlines(&ci, ptrs + ci.output_scanline, ask) == 0) longjmp(je.jb, 1);
  }
  jpeg_finish_decompress(&ci);
  jpeg_destroy_decompress(&ci);
  free(ptrs);
  return 0;
}
#else
int lade_tool_decode_whole(const uint8_t *jpeg, size_t len, int rows, uint8_t **buf, size_t *cap) {
  (void)jpeg, (void)len, (void)rows, (void)buf, (void)cap;
  return -1;
}
#endif

typedef struct job {
  const char *const *paths;
  uint8_t **data;
  size_t *len;
  uint64_t n;
  int threads, t, phase; /* phase 0: read, 1: decode */
  int failed;            /* read: the index + 1 of a file that failed; decode: 1 */
  int err;
} job_t;

static void *worker(void *arg) {
  job_t *j = arg;
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (uint64_t i = (uint64_t)j->t; i < j->n && !j->failed; i += (uint64_t)j->threads) {
    if (j->phase == 0) {
      int fd = open(j->paths[i], O_RDONLY | O_CLOEXEC);
      struct stat st;
      if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        j->err = fd < 0 ? errno : EINVAL;
        j->failed = (int)i + 1;
        if (fd >= 0) close(fd);
        break;
      }
      uint8_t *p = malloc(st.st_size ? (size_t)st.st_size : 1);
      size_t got = 0;
      while (p && got < (size_t)st.st_size) {
        ssize_t r = pread(fd, p + got, (size_t)st.st_size - got, (off_t)got);
        if (r <= 0) break;
        got += (size_t)r;
      }
      close(fd);
      if (!p || got != (size_t)st.st_size) {
        free(p);
        j->err = p ? EIO : ENOMEM;
        j->failed = (int)i + 1;
        break;
      }
      j->data[i] = p;
      j->len[i] = got;
    } else if (lade_tool_decode_whole(j->data[i], j->len[i], 0, &buf, &cap)) {
      j->failed = 1;
    }
  }
  free(buf);
  return NULL;
}

/* Runs one phase on `threads` threads; returns the seconds it took, or -1
 * with out->why set. */
static double run_phase(const char *const *paths, uint8_t **data, size_t *len, uint64_t n, int threads, int phase,
                        lade_tool_ceiling_t *out) {
  job_t jobs[64];
  pthread_t tid[64];
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  double t0 = lade_tool_mono();
  int started = 0;
  for (int t = 0; t < threads; t++) {
    jobs[t] = (job_t){paths, data, len, n, threads, t, phase, 0, 0};
    if (pthread_create(&tid[t], NULL, worker, &jobs[t]) == 0) started++;
    else jobs[t].failed = -1;
  }
  for (int t = 0; t < threads; t++)
    if (jobs[t].failed != -1) pthread_join(tid[t], NULL);
  double dt = lade_tool_mono() - t0;
  for (int t = 0; t < threads; t++) {
    if (jobs[t].failed == -1 || started == 0) {
      snprintf(out->why, sizeof out->why, "could not start %d threads", threads);
      return -1;
    }
    if (jobs[t].failed && phase == 0) {
      snprintf(out->why, sizeof out->why, "%.100s: %s", paths[jobs[t].failed - 1],
               jobs[t].err == EINVAL ? "not a regular file" : strerror(jobs[t].err));
      return -1;
    }
    if (jobs[t].failed && phase == 1) {
      snprintf(out->why, sizeof out->why, "not every file is a JPEG libjpeg-turbo decodes");
      return -1;
    }
  }
  return dt > 0 ? dt : 1e-9;
}

void lade_tool_ceiling(const char *const *paths, uint64_t n, int threads, int decode, lade_tool_ceiling_t *out,
                       lade_tool_bytes_fn then, void *ctx) {
  memset(out, 0, sizeof *out);
  out->threads = threads < 1 ? 1 : threads;
  uint8_t **data = calloc(n ? n : 1, sizeof *data);
  size_t *len = calloc(n ? n : 1, sizeof *len);
  if (!data || !len) {
    snprintf(out->why, sizeof out->why, "out of memory");
  } else {
    double t = run_phase(paths, data, len, n, out->threads, 0, out);
    if (t > 0) {
      out->files = n;
      for (uint64_t i = 0; i < n; i++) out->bytes += len[i];
      out->read_per_s = (double)n / t;
#ifndef LADE_HAVE_JPEG
      if (decode) snprintf(out->why, sizeof out->why, "this build has no libjpeg-turbo");
#else
      if (decode) {
        double d = run_phase(paths, data, len, n, out->threads, 1, out);
        if (d > 0) out->decode_per_s = (double)n / d;
      }
#endif
      if (then) then(ctx, data, len, n);
    }
  }
  for (uint64_t i = 0; data && i < n; i++) free(data[i]);
  free(data);
  free(len);
}

/* ------------------------------------------------ the copy ceiling of raw samples */

#include <lade/lade.h>
#include <sys/mman.h>
#include <sys/resource.h>

enum { COPY_MAX = 16384 };         /* samples measured at most */
#define COPY_BYTES ((uint64_t)4 << 30) /* and at most about this many bytes */
#define COPY_MIN_SECONDS 0.25      /* copied again until this much time has passed */
#define RING_MAX ((size_t)64 << 20) /* a thread's slots at most */

typedef struct ranges {
  uint64_t n;
  char **path;         /* one per sample, strdup'ed */
  uint64_t *off, *len;
  const uint8_t **src; /* each sample's bytes in its mapping */
  void **maps;         /* per sample: the pages that hold its range (only those: a file may be huge) */
  size_t *map_len;
  uint32_t *file;      /* each sample's file, an index into fds */
  int *fds;            /* kept open for the pread pass (-1: closed, when there are too many) */
  uint64_t nfiles;
} ranges_t;

static void ranges_free(ranges_t *g) {
  if (!g) return;
  for (uint64_t i = 0; g->maps && i < g->n; i++)
    if (g->maps[i]) munmap(g->maps[i], g->map_len[i]);
  for (uint64_t f = 0; f < g->nfiles; f++)
    if (g->fds[f] >= 0) close(g->fds[f]);
  for (uint64_t i = 0; g->path && i < g->n; i++) free(g->path[i]);
  free(g->path), free(g->off), free(g->len), free(g->src), free(g->maps), free(g->map_len), free(g->fds), free(g->file);
  free(g);
}

/* One sample's range, or -1 with why set. */
static int range_of(struct lade_loader *L, ranges_t *g, uint64_t idx, char *why, size_t wsize) {
  char path[2 * 4096];
  uint64_t i = g->n;
  int rc = lade_loader_sample_extent(L, idx, path, sizeof path, &g->off[i], &g->len[i]);
  if (rc || !(g->path[i] = strdup(path))) {
    snprintf(why, wsize, "%s", rc ? lade_last_error() : "out of memory");
    return -1;
  }
  g->n++;
  return 0;
}

int lade_tool_copy_ranges(struct lade_loader *L, uint64_t nsamples, lade_tool_copy_t *out) {
  uint64_t k = nsamples < COPY_MAX ? nsamples : COPY_MAX;
  ranges_t *g = calloc(1, sizeof *g);
  if (g) {
    g->path = calloc(k ? k : 1, sizeof *g->path);
    g->off = calloc(k ? k : 1, sizeof *g->off);
    g->len = calloc(k ? k : 1, sizeof *g->len);
  }
  int rc = !g || !g->path || !g->off || !g->len ? -1 : 0;
  if (rc) snprintf(out->why, sizeof out->why, "out of memory");
  /* sample 0's size sets how many fit in COPY_BYTES; then they are spread evenly */
  if (!rc && k) rc = range_of(L, g, 0, out->why, sizeof out->why);
  if (!rc && k && g->len[0] > 0 && COPY_BYTES / g->len[0] < k) k = COPY_BYTES / g->len[0] ? COPY_BYTES / g->len[0] : 1;
  for (uint64_t i = 1; !rc && i < k; i++) rc = range_of(L, g, i * nsamples / k, out->why, sizeof out->why);
  if (rc) {
    ranges_free(g);
    return -1;
  }
  out->ranges = g;
  return 0;
}

/* Maps the pages of each sample's range, populated: read into the page
 * cache and mapped before any copy is timed. Each file is opened once (its
 * samples are consecutive, or it is opened again); the descriptors stay
 * open for the pread pass when the process may hold them all (*kept).
 * 0, or -1 with why set. */
static int ranges_map(ranges_t *g, int *kept, char *why, size_t wsize) {
  uint64_t files = 0, page = (uint64_t)sysconf(_SC_PAGESIZE);
  for (uint64_t i = 0; i < g->n; i++) files += !i || strcmp(g->path[i], g->path[i - 1]);
  struct rlimit rl;
  *kept = !getrlimit(RLIMIT_NOFILE, &rl) && (rl.rlim_cur == RLIM_INFINITY || files + 64 < rl.rlim_cur);
  g->src = calloc(g->n ? g->n : 1, sizeof *g->src);
  g->maps = calloc(g->n ? g->n : 1, sizeof *g->maps);
  g->map_len = calloc(g->n ? g->n : 1, sizeof *g->map_len);
  g->fds = calloc(files ? files : 1, sizeof *g->fds);
  g->file = calloc(g->n ? g->n : 1, sizeof *g->file);
  if (!g->src || !g->maps || !g->map_len || !g->fds || !g->file) {
    snprintf(why, wsize, "out of memory");
    return -1;
  }
  static const uint8_t none[1];
  struct stat st;
  int fd = -1;
  for (uint64_t i = 0; i < g->n; i++) {
    if (!i || strcmp(g->path[i], g->path[i - 1])) {
      if (fd >= 0 && !*kept) close(fd);
      fd = open(g->path[i], O_RDONLY | O_CLOEXEC);
      if (fd < 0 || fstat(fd, &st)) {
        snprintf(why, wsize, "cannot open %.100s: %s", g->path[i], strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
      }
      g->fds[g->nfiles++] = *kept ? fd : -1;
    }
    g->file[i] = (uint32_t)(g->nfiles - 1);
    if (g->off[i] + g->len[i] > (uint64_t)st.st_size) {
      snprintf(why, wsize, "%.100s: sample %llu's range ends past the file", g->path[i], (unsigned long long)i);
      break;
    }
    g->src[i] = none;
    if (!g->len[i]) continue;
    uint64_t at = g->off[i] / page * page;
    void *p = mmap(NULL, (size_t)(g->off[i] + g->len[i] - at), PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)at);
    if (p == MAP_FAILED) {
      snprintf(why, wsize, "cannot map %.100s: %s", g->path[i], strerror(errno));
      break;
    }
    g->maps[i] = p;
    g->map_len[i] = (size_t)(g->off[i] + g->len[i] - at);
    g->src[i] = (const uint8_t *)p + (g->off[i] - at);
  }
  if (fd >= 0 && !*kept) close(fd);
  return why[0] ? -1 : 0;
}

typedef struct copier {
  const ranges_t *g;
  int t, threads, pread; /* pread: read the ranges from the files' descriptors instead */
  int failed;
  uint8_t *ring;
  size_t slot, slots;
} copier_t;

/* One pass: this thread's samples (t, t + threads, ...) each copied into
 * the next slot of its ring, as workers fill the slots of a batch. */
static void *copy_pass(void *arg) {
  copier_t *c = arg;
  size_t s = 0;
  for (uint64_t i = (uint64_t)c->t; i < c->g->n; i += (uint64_t)c->threads) {
    uint8_t *dst = c->ring + s * c->slot;
    if (!c->pread) memcpy(dst, c->g->src[i], (size_t)c->g->len[i]);
    else if (pread(c->g->fds[c->g->file[i]], dst, (size_t)c->g->len[i], (off_t)c->g->off[i]) != (ssize_t)c->g->len[i])
      c->failed = 1;
    if (++s == c->slots) s = 0;
  }
  return NULL;
}

/* Runs one pass on every copier; the seconds it took, or -1. */
static double copy_run(copier_t *c, int threads) {
  pthread_t tid[64];
  int started = 0;
  double t0 = lade_tool_mono();
  for (int t = 0; t < threads; t++, started++)
    if (pthread_create(&tid[t], NULL, copy_pass, &c[t])) break;
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
  return started == threads ? lade_tool_mono() - t0 : -1;
}

/* Passes of one mode (after an untimed one: the rings' pages faulted in,
 * the bytes warm) until COPY_MIN_SECONDS; passes per second, or -1. */
static double copy_rate(copier_t *c, int threads, int pread_mode) {
  for (int t = 0; t < threads; t++) c[t].pread = pread_mode, c[t].failed = 0;
  double spent = 0, passes = 0, t = copy_run(c, threads);
  while (t >= 0 && spent < COPY_MIN_SECONDS && (t = copy_run(c, threads)) >= 0) spent += t, passes++;
  for (int i = 0; i < threads; i++)
    if (c[i].failed) t = -1;
  return t < 0 || spent <= 0 ? -1 : passes / spent;
}

void lade_tool_copy_measure(lade_tool_copy_t *out, int threads, uint64_t batch) {
  ranges_t *g = out->ranges;
  out->ranges = NULL;
  out->threads = threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
  if (!g) return;
  copier_t c[64];
  size_t slot = 1;
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < g->n; i++) {
    if (g->len[i] > slot) slot = (size_t)g->len[i];
    bytes += g->len[i];
  }
  size_t slots = batch ? (size_t)batch : 1;
  if (slots * slot > RING_MAX) slots = RING_MAX / slot ? RING_MAX / slot : 1;
  int made = 0, kept = 0, ok = !ranges_map(g, &kept, out->why, sizeof out->why);
  for (; ok && made < threads; made++) {
    c[made] = (copier_t){.g = g, .t = made, .threads = threads, .ring = malloc(slot * slots), .slot = slot,
                         .slots = slots};
    if (!c[made].ring) ok = 0, snprintf(out->why, sizeof out->why, "out of memory");
  }
  double copy = ok ? copy_rate(c, threads, 0) : -1, rd = ok && kept ? copy_rate(c, threads, 1) : -1;
  if (ok && copy < 0) {
    snprintf(out->why, sizeof out->why, "could not start %d threads", threads);
  } else if (ok) {
    out->samples = g->n;
    out->bytes = bytes;
    out->per_s = copy * (double)g->n;
    out->gb_per_s = copy * (double)bytes / 1e9;
    out->pread_per_s = rd > 0 ? rd * (double)g->n : 0;
  }
  for (int i = 0; i < made; i++) free(c[i].ring);
  ranges_free(g);
}
