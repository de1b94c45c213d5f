/*
 * probe.c - `lade probe FILE.h5`: measures, on this machine and this file,
 * what a read of k samples costs with the access patterns of SOLAR's
 * Table 3 (paper 002) - k samples at stride s (s = 1 is "chunk-cycle
 * loading", s > 1 "sequential stride access"), k random samples ("random
 * access") - once
 * as k reads of one sample each and once as ONE hyperslab read of the whole
 * span [first, last] ("full chunk loading" for s = 1; the samples in
 * between are read and thrown away). It prints both times and the largest
 * stride at which the one read still wins: the hdf5_gap to set for this
 * file system. With --cold, the file's pages are dropped from the page cache
 * (posix_fadvise DONTNEED) before every timed read, so it measures storage,
 * not memory. Calls libhdf5 directly (single-threaded: no lock needed).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

static int usage_probe(FILE *f) {
  fprintf(f,
          "usage: lade probe FILE.h5 [--data NAME] [--samples K] [--reps R] [--cold]\n\n"
          "Times reading K samples (default 64) of dataset NAME (default data) with the access\n"
          "patterns of paper 002 (SOLAR) Table 3: stride 1, 2, 4, 8, ... and random, each as K\n"
          "reads of one sample and as one hyperslab read of the whole span, R times (default 5,\n"
          "the median is shown), and prints the largest stride at which the one read is faster:\n"
          "the value to give the setting hdf5_gap on this machine. --cold drops the file from the\n"
          "page cache before every timed read (storage, not memory).\n");
  return f == stderr ? 2 : 0;
}

#ifndef LADE_HAVE_HDF5
int lade_tool_probe(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return usage_probe(stdout);
  fprintf(stderr, "lade probe: needs libhdf5, which this build lacks (configure with LADE_WITH_HDF5=ON after "
                  "apt-get install libhdf5-dev)\n");
  return 1;
}
#else
#include <hdf5.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct probe {
  hid_t dset, fspace, mtype, one;
  int rank;
  hsize_t dims[32];
  size_t sample_bytes, elems;
  int fd, cold;
  uint8_t *buf, *span;
} probe_t;

static void drop_cache(probe_t *p) {
  if (p->cold) posix_fadvise(p->fd, 0, 0, POSIX_FADV_DONTNEED);
}

static int read_rows(probe_t *p, uint64_t first, uint64_t count, void *dst) {
  hsize_t start[32] = {0}, cnt[32];
  start[0] = first;
  cnt[0] = count;
  for (int d = 1; d < p->rank; d++) cnt[d] = p->dims[d];
  hsize_t ne = count * p->elems;
  hid_t ms = count == 1 ? p->one : H5Screate_simple(1, &ne, NULL);
  int rc = H5Sselect_hyperslab(p->fspace, H5S_SELECT_SET, start, NULL, cnt, NULL) < 0 ||
                   H5Dread(p->dset, p->mtype, ms, p->fspace, H5P_DEFAULT, dst) < 0
               ? -1
               : 0;
  if (ms != p->one) H5Sclose(ms);
  return rc;
}

/* Seconds for idx[0..k) (sorted): one read each, or one read of the span
 * plus the copies out of it. */
static double time_pattern(probe_t *p, const uint64_t *idx, size_t k, int coalesced) {
  drop_cache(p);
  double t0 = now_s();
  if (coalesced) {
    uint64_t span = idx[k - 1] - idx[0] + 1;
    if (read_rows(p, idx[0], span, p->span)) return -1;
    for (size_t j = 0; j < k; j++)
      memcpy(p->buf + j * p->sample_bytes, p->span + (idx[j] - idx[0]) * p->sample_bytes, p->sample_bytes);
  } else {
    for (size_t j = 0; j < k; j++)
      if (read_rows(p, idx[j], 1, p->buf + j * p->sample_bytes)) return -1;
  }
  return now_s() - t0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static int cmp_u(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Median seconds of reps runs of pattern (stride s, or random when s == 0) at
 * different places of the file. */
static double measure(probe_t *p, size_t k, uint64_t s, int reps, int coalesced, uint64_t seed) {
  uint64_t n = p->dims[0];
  uint64_t *idx = malloc(k * sizeof *idx);
  double *t = malloc((size_t)reps * sizeof *t);
  uint64_t rs = seed;
  for (int r = 0; r < reps; r++) {
    if (s) {
      uint64_t span = (k - 1) * s + 1, room = n - span + 1;
      uint64_t first = room > 1 ? rng_next(&rs) % room : 0;
      for (size_t j = 0; j < k; j++) idx[j] = first + j * s;
    } else {
      for (size_t j = 0; j < k; j++) { /* distinct random indices */
        uint64_t v;
        int dup;
        do {
          v = rng_next(&rs) % n;
          dup = 0;
          for (size_t q = 0; q < j; q++) dup |= idx[q] == v;
        } while (dup);
        idx[j] = v;
      }
      qsort(idx, k, sizeof *idx, cmp_u);
    }
    t[r] = time_pattern(p, idx, k, coalesced);
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_d);
  double m = t[reps / 2];
  free(idx);
  free(t);
  return m;
}

int lade_tool_probe(int argc, char **argv) {
  static const struct option opts[] = {{"data", required_argument, 0, 'd'}, {"samples", required_argument, 0, 'k'},
                                       {"reps", required_argument, 0, 'r'}, {"cold", no_argument, 0, 'c'},
                                       {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
  const char *dname = "data";
  long k = 64, reps = 5;
  int cold = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "d:k:r:ch", opts, NULL)) != -1) {
    switch (c) {
      case 'd': dname = optarg; break;
      case 'k': k = strtol(optarg, NULL, 10); break;
      case 'r': reps = strtol(optarg, NULL, 10); break;
      case 'c': cold = 1; break;
      case 'h': return usage_probe(stdout);
      default: return usage_probe(stderr);
    }
  }
  if (argc - optind != 1 || k < 2 || k > 100000 || reps < 1 || reps > 1000) return usage_probe(stderr);
  const char *path = argv[optind];
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  probe_t p = {.cold = cold, .one = -1};
  p.fd = open(path, O_RDONLY | O_CLOEXEC);
  hid_t f = p.fd >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
  if (f < 0) {
    fprintf(stderr, "lade probe: %s: not a readable HDF5 file%s%s\n", path, p.fd < 0 ? ": " : "",
            p.fd < 0 ? strerror(errno) : "");
    return 1;
  }
  p.dset = H5Lexists(f, dname, H5P_DEFAULT) > 0 ? H5Dopen2(f, dname, H5P_DEFAULT) : -1;
  hid_t ft = p.dset >= 0 ? H5Dget_type(p.dset) : -1;
  p.fspace = p.dset >= 0 ? H5Dget_space(p.dset) : -1;
  p.rank = p.fspace >= 0 ? H5Sget_simple_extent_ndims(p.fspace) : -1;
  H5T_class_t cls = ft >= 0 ? H5Tget_class(ft) : H5T_NO_CLASS;
  if (p.rank < 1 || p.rank > 32 || (cls != H5T_INTEGER && cls != H5T_FLOAT && cls != H5T_ENUM)) {
    fprintf(stderr, "lade probe: %s: no numeric dataset '%s' with samples along its first axis\n", path, dname);
    H5Fclose(f);
    return 1;
  }
  H5Sget_simple_extent_dims(p.fspace, p.dims, NULL);
  p.mtype = H5Tcopy(ft); /* the bytes as stored: a probe of I/O, not of type conversion */
  p.elems = 1;
  for (int d = 1; d < p.rank; d++) p.elems *= (size_t)p.dims[d];
  p.sample_bytes = p.elems * H5Tget_size(ft);
  hsize_t ne = p.elems;
  p.one = H5Screate_simple(1, &ne, NULL);
  uint64_t n = p.dims[0];
  if ((uint64_t)k > n) k = (long)n;
  hid_t dcpl = H5Dget_create_plist(p.dset);
  H5D_layout_t layout = H5Pget_layout(dcpl);
  int nfilters = layout == H5D_CHUNKED ? H5Pget_nfilters(dcpl) : 0;
  hsize_t chunk[32] = {0};
  if (layout == H5D_CHUNKED) H5Pget_chunk(dcpl, 32, chunk);
  H5Pclose(dcpl);

  /* strides 1, 2, 4, ... while k samples still fit and the span stays below 256 MiB */
  uint64_t strides[40];
  int ns = 0;
  for (uint64_t s = 1; ns < 39 && (uint64_t)(k - 1) * s + 1 <= n && ((uint64_t)(k - 1) * s + 1) * p.sample_bytes <= (256u << 20);
       s *= 2)
    strides[ns++] = s;
  uint64_t max_span = ns ? (uint64_t)(k - 1) * strides[ns - 1] + 1 : (uint64_t)k;
  p.buf = malloc((size_t)k * p.sample_bytes);
  uint64_t whole = n * p.sample_bytes <= (256u << 20) ? n : (uint64_t)k; /* the random pattern's span */
  p.span = malloc((size_t)(max_span > whole ? max_span : whole) * p.sample_bytes);
  if (!p.buf || !p.span) {
    fprintf(stderr, "lade probe: out of memory\n");
    return 1;
  }
  printf("file         %s, dataset '%s': %llu samples of %zu bytes, %s%s%s\n", path, dname, (unsigned long long)n,
         p.sample_bytes, layout == H5D_CHUNKED ? "chunked" : layout == H5D_CONTIGUOUS ? "contiguous" : "compact",
         nfilters ? ", filtered (compressed)" : "", cold ? "; page cache dropped before each read" : "");
  if (layout == H5D_CHUNKED) printf("chunk        %llu samples\n", (unsigned long long)chunk[0]);
  printf("k = %ld samples per read pattern, median of %ld runs\n\n", k, reps);
  printf("%-28s %14s %14s %9s\n", "pattern (paper 002 Table 3)", "k reads (ms)", "1 read (ms)", "speedup");
  uint64_t gap = 0;
  if (cold) fsync(p.fd); /* dirty pages (a file just written) cannot be dropped */
  for (int i = 0; i < ns; i++) {
    double a = measure(&p, (size_t)k, strides[i], (int)reps, 0, 42 + (uint64_t)i);
    double b = measure(&p, (size_t)k, strides[i], (int)reps, 1, 42 + (uint64_t)i);
    if (a < 0 || b < 0) {
      fprintf(stderr, "lade probe: %s: a read of dataset '%s' failed\n", path, dname);
      return 1;
    }
    char name[64];
    snprintf(name, sizeof name, strides[i] == 1 ? "contiguous (chunk-cycle)" : "stride %llu",
             (unsigned long long)strides[i]);
    printf("%-28s %14.3f %14.3f %8.2fx\n", name, a * 1e3, b * 1e3, a / b);
    if (b < a) gap = strides[i]; /* the cost of the one read grows with the stride: take the largest win */
  }
  if ((uint64_t)k <= n && n * p.sample_bytes <= (256u << 20)) {
    double a = measure(&p, (size_t)k, 0, (int)reps, 0, 7), b = measure(&p, (size_t)k, 0, (int)reps, 1, 7);
    printf("%-28s %14.3f %14.3f %8.2fx\n", "random", a * 1e3, b * 1e3, b > 0 ? a / b : 0);
  }
  printf("\ncoalescing wins up to stride %llu: set hdf5_gap=%llu for this file on this machine\n",
         (unsigned long long)gap, (unsigned long long)gap);
  free(p.buf);
  free(p.span);
  H5Sclose(p.one);
  H5Tclose(p.mtype);
  H5Tclose(ft);
  H5Sclose(p.fspace);
  H5Dclose(p.dset);
  H5Fclose(f);
  close(p.fd);
  return 0;
}
#endif
