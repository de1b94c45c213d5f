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

static double mono(void) {
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
  double t0 = mono();
  int started = 0;
  for (int t = 0; t < threads; t++) {
    jobs[t] = (job_t){paths, data, len, n, threads, t, phase, 0, 0};
    if (pthread_create(&tid[t], NULL, worker, &jobs[t]) == 0) started++;
    else jobs[t].failed = -1;
  }
  for (int t = 0; t < threads; t++)
    if (jobs[t].failed != -1) pthread_join(tid[t], NULL);
  double dt = mono() - t0;
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

void lade_tool_ceiling(const char *const *paths, uint64_t n, int threads, int decode, lade_tool_ceiling_t *out) {
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
    }
  }
  for (uint64_t i = 0; data && i < n; i++) free(data[i]);
  free(data);
  free(len);
}
