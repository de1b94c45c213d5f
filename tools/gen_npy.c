/* gen_npy.c - writes float32 .npy samples (values from a seeded xorshift, so
 * the same arguments give the same bytes) in a 10-class ImageFolder layout
 * or as one stacked file. */
#include "gen_npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NCLASSES 10

static uint64_t next_u64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static int header(char *buf, size_t size, const long long *dims, int ndim) {
  char dict[256];
  int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  for (int i = 0; i < ndim; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", dims[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  size_t total = ((size_t)(10 + n + 1) + 63) / 64 * 64;
  if (total > size) return -1;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)((total - 10) & 0xff);
  buf[9] = (char)((total - 10) >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
  buf[total - 1] = '\n';
  return (int)total;
}

static int mkdir_p(const char *path, char *err, size_t errlen) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
      snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
      return -1;
    }
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
  return 0;
}

int lade_tool_gen_npy(const char *dir, uint64_t count, uint64_t seed, const char *shape, int stacked, char *err,
                      size_t errlen) {
  long long dims[9];
  int ndim = 0;
  const char *p = shape;
  size_t elems = 1;
  while (*p) {
    char *end;
    long long d = strtoll(p, &end, 10);
    if (end == p || d <= 0 || ndim == 7) {
      snprintf(err, errlen, "--shape '%s' must be 1 to 7 positive integers separated by commas", shape);
      return -1;
    }
    dims[1 + ndim++] = d;
    elems *= (size_t)d;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') {
      snprintf(err, errlen, "--shape '%s' must be positive integers separated by commas", shape);
      return -1;
    }
  }
  if (ndim == 0) {
    snprintf(err, errlen, "--shape is empty");
    return -1;
  }
  if (mkdir_p(dir, err, errlen)) return -1;
  float *buf = malloc(elems * sizeof *buf);
  if (!buf) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  char hdr[512];
  char path[4096];
  FILE *f = NULL;
  int rc = 0;
  if (stacked) {
    dims[0] = (long long)count;
    int hl = header(hdr, sizeof hdr, dims, ndim + 1);
    snprintf(path, sizeof path, "%s/data.npy", dir);
    f = fopen(path, "wb");
    if (!f || hl < 0 || fwrite(hdr, 1, (size_t)hl, f) != (size_t)hl) rc = -1;
  } else {
    for (int c = 0; !rc && c < NCLASSES && (uint64_t)c < count; c++) {
      snprintf(path, sizeof path, "%s/class_%02d", dir, c);
      rc = mkdir_p(path, err, errlen);
    }
    if (rc) {
      free(buf);
      return -1;
    }
  }
  int hl = header(hdr, sizeof hdr, dims + 1, ndim);
  for (uint64_t i = 0; !rc && i < count; i++) {
    uint64_t s = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull;
    if (!s) s = 1;
    for (size_t k = 0; k < elems; k++) buf[k] = (float)(next_u64(&s) >> 40) * (1.0f / 16777216.0f);
    if (!stacked) {
      snprintf(path, sizeof path, "%s/class_%02d/sample_%08llu.npy", dir, (int)(i % NCLASSES), (unsigned long long)i);
      f = fopen(path, "wb");
      if (!f || fwrite(hdr, 1, (size_t)hl, f) != (size_t)hl) rc = -1;
    }
    if (!rc && fwrite(buf, sizeof *buf, elems, f) != elems) rc = -1;
    if (!stacked && f) {
      if (fclose(f) != 0) rc = -1;
      f = NULL;
    }
  }
  if (stacked && f && fclose(f) != 0) rc = -1;
  if (rc) snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
  free(buf);
  return rc;
}
