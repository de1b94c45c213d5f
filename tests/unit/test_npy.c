/* test_npy.c - .npy files as numpy writes them: fortran order, big-endian,
 * bool and unsigned dtypes, parsed and delivered in C order and the host's
 * byte order, through both layouts of the npy source (folder, stacked), with
 * and without a cache tier in front (the npy transform's path). The files
 * are written here byte by byte as np.save lays them out; tests/python/
 * test_npy_numpy.py checks the same against np.save / np.load themselves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/npyfmt.h"
#include "harness.h"
#include "lade/lade.h"

/* ---- writing .npy files the way numpy does */

static size_t header(char *buf, const char *descr, int fortran, int ndim, const int64_t *shape) {
  char dict[512];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': (", descr,
                   fortran ? "True" : "False");
  for (int i = 0; i < ndim; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)shape[i], i + 1 < ndim ? " " : "");
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)((total - 10) & 0xff);
  buf[9] = (char)((total - 10) >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
  buf[total - 1] = '\n';
  return total;
}

/* The bytes of a C-order array `c` (ndim, shape, esize) laid out in fortran
 * order and/or with each element's bytes reversed. */
static void relayout(uint8_t *dst, const uint8_t *c, int ndim, const int64_t *shape, size_t esize, int fortran,
                     int swap) {
  int64_t count = 1;
  for (int i = 0; i < ndim; i++) count *= shape[i];
  for (int64_t e = 0; e < count; e++) {
    int64_t rem = e, off = 0, stride = 1, idx[LADE_MAX_DIMS];
    for (int i = ndim - 1; i >= 0; i--) {
      idx[i] = rem % shape[i];
      rem /= shape[i];
    }
    for (int i = 0; i < ndim; i++) {
      off += idx[i] * stride;
      stride *= shape[i];
    }
    int64_t at = fortran ? off : e;
    for (size_t b = 0; b < esize; b++) dst[at * (int64_t)esize + (int64_t)b] = c[e * (int64_t)esize + (int64_t)(swap ? esize - 1 - b : b)];
  }
}

static void write_file(const char *path, const char *descr, int fortran, int swap, int ndim, const int64_t *shape,
                       const void *c_data, size_t esize) {
  char hdr[1024];
  size_t hl = header(hdr, descr, fortran, ndim, shape);
  int64_t count = 1;
  for (int i = 0; i < ndim; i++) count *= shape[i];
  uint8_t *payload = malloc((size_t)count * esize);
  relayout(payload, c_data, ndim, shape, esize, fortran, swap);
  FILE *f = fopen(path, "wb");
  fwrite(hdr, 1, hl, f);
  fwrite(payload, esize, (size_t)count, f);
  fclose(f);
  free(payload);
}

/* Sample i holds floats i*1000 + k (k in C order). */
#define D0 2
#define D1 3
#define D2 4
#define SAMPLE (D0 * D1 * D2)
static void fill(float *v, uint64_t i) {
  for (int k = 0; k < SAMPLE; k++) v[k] = (float)(i * 1000 + (uint64_t)k);
}

/* ---- the parser */

static void test_parse_layouts(void) {
  char buf[1024];
  lade__npy_header_t h;
  int64_t s2[2] = {3, 4}, s1[1] = {5}, s3[3] = {1, 4, 1};

  header(buf, "<f4", 1, 2, s2);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(h.fortran && !h.swap && h.dtype == LADE_DTYPE_FLOAT32 && h.ndim == 2 && h.payload_bytes == 48);
  /* fortran order with one dimension longer than 1 is the same bytes as C order */
  header(buf, "<f4", 1, 1, s1);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(!h.fortran);
  header(buf, "<f4", 1, 3, s3);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(!h.fortran);

  header(buf, ">i8", 0, 2, s2);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(h.swap && !h.fortran && h.dtype == LADE_DTYPE_INT64 && h.payload_bytes == 96);
  header(buf, ">f2", 1, 2, s2);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(h.swap && h.fortran && h.dtype == LADE_DTYPE_FLOAT16);
  /* one-byte types have no byte order to swap */
  header(buf, ">u1", 0, 2, s2);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(!h.swap && h.dtype == LADE_DTYPE_UINT8);
  header(buf, "|b1", 0, 2, s2);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(!h.swap && h.dtype == LADE_DTYPE_BOOL && h.payload_bytes == 12);

  header(buf, "<u4", 0, 2, s2);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(h.dtype == LADE_DTYPE_UINT32 && h.payload_bytes == 48);
  header(buf, ">u8", 0, 2, s2);
  CHECK_OK(lade__npy_parse((uint8_t *)buf, sizeof buf, &h));
  CHECK(h.dtype == LADE_DTYPE_UINT64 && h.swap && h.payload_bytes == 96);
  CHECK(strcmp(lade_dtype_name(LADE_DTYPE_UINT32), "uint32") == 0 && lade_dtype_size(LADE_DTYPE_UINT32) == 4);
  CHECK(strcmp(lade_dtype_name(LADE_DTYPE_UINT64), "uint64") == 0 && lade_dtype_size(LADE_DTYPE_UINT64) == 8);
  CHECK_EQ_INT(LADE_DTYPE_BOOL, 10); /* appended, never renumbered */
  CHECK_EQ_INT(LADE_DTYPE_UINT32, 11);
  CHECK_EQ_INT(LADE_DTYPE_UINT64, 12);

  /* still refused, with the reason */
  header(buf, "<c8", 0, 2, s2);
  CHECK_EQ_INT(lade__npy_parse((uint8_t *)buf, sizeof buf, &h), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "'<c8' is not supported") != NULL);
  header(buf, "<f4", 0, 2, s2);
  char *t = memmem(buf, sizeof buf, "False", 5);
  memcpy(t, "Maybe", 5);
  CHECK_EQ_INT(lade__npy_parse((uint8_t *)buf, sizeof buf, &h), LADE_EFORMAT);
}

/* ---- the conversion, against a C-order reference */

static void test_to_c_every_layout(void) {
  const int64_t shapes[2][3] = {{5, 7, 0}, {D0, D1, D2}};
  const int ndims[2] = {2, 3};
  for (int s = 0; s < 2; s++) {
    int64_t count = 1;
    for (int i = 0; i < ndims[s]; i++) count *= shapes[s][i];
    for (size_t esize = 1; esize <= 8; esize *= 2) {
      uint8_t *c = malloc((size_t)count * esize), *file = malloc((size_t)count * esize), *out = malloc((size_t)count * esize);
      for (int64_t k = 0; k < count * (int64_t)esize; k++) c[k] = (uint8_t)(k * 7 + 3);
      static const int dts[9] = {0, LADE_DTYPE_UINT8, LADE_DTYPE_INT16, 0, LADE_DTYPE_FLOAT32, 0, 0, 0, LADE_DTYPE_UINT64};
      for (int fortran = 0; fortran < 2; fortran++)
        for (int swap = 0; swap < 2; swap++) {
          lade__npy_header_t h = {.dtype = dts[esize], .ndim = ndims[s], .payload_bytes = (size_t)count * esize};
          for (int i = 0; i < ndims[s]; i++) h.shape[i] = shapes[s][i];
          h.fortran = fortran;
          h.swap = swap && esize > 1;
          relayout(file, c, ndims[s], shapes[s], esize, fortran, h.swap);
          /* the whole array (a file per sample) */
          memset(out, 0xee, (size_t)count * esize);
          lade__npy_to_c(&h, -1, file, out);
          CHECK(memcmp(out, c, (size_t)count * esize) == 0);
          /* each row of it as a stacked file */
          size_t row = (size_t)(count / shapes[s][0]) * esize;
          for (int64_t r = 0; r < shapes[s][0]; r++) {
            memset(out, 0xee, row);
            lade__npy_to_c(&h, r, file, out);
            if (memcmp(out, c + (size_t)r * row, row) != 0) {
              fprintf(stderr, "  row %lld of ndim %d esize %zu fortran %d swap %d differs\n", (long long)r, ndims[s],
                      esize, fortran, swap);
              CHECK(0);
            }
          }
        }
      free(c);
      free(file);
      free(out);
    }
  }
}

/* ---- through the loader */

typedef struct got {
  int rc;
  char err[1024];
  uint64_t samples;
  int ok;
} got_t;

static got_t load(const char *source, const char *extra) {
  got_t g = {0};
  g.ok = 1;
  lade_config_t *c = NULL;
  lade_config_create(&c);
  lade_config_set(c, "source", source);
  lade_config_parse(c, "batch_size=4");
  lade_config_parse(c, "threads=2");
  if (extra && lade_config_parse(c, extra)) fprintf(stderr, "bad setting %s: %s\n", extra, lade_last_error());
  lade_loader_t *L = NULL;
  g.rc = lade_loader_create(&L, c);
  lade_config_destroy(c);
  while (!g.rc) {
    lade_batch_t *b = NULL;
    g.rc = lade_loader_next(L, &b);
    if (g.rc || !b) break;
    if (b->dtype != LADE_DTYPE_FLOAT32 || b->ndim != 4 || b->shape[1] != D0 || b->shape[2] != D1 || b->shape[3] != D2)
      g.ok = 0;
    for (int64_t i = 0; i < b->shape[0]; i++) {
      float want[SAMPLE];
      fill(want, (uint64_t)b->indices[i]);
      if (memcmp(want, (const float *)b->data + i * SAMPLE, sizeof want) != 0) g.ok = 0;
    }
    g.samples += (uint64_t)b->shape[0];
    lade_batch_release(b);
  }
  if (g.rc) snprintf(g.err, sizeof g.err, "%s", lade_last_error());
  lade_loader_destroy(L);
  return g;
}

static const char *make_folder(const char *name, int n, int fortran, int swap) {
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s", lade_test_tmpdir(name));
  int64_t shape[3] = {D0, D1, D2};
  for (int i = 0; i < n; i++) {
    char path[4200];
    float v[SAMPLE];
    fill(v, (uint64_t)i);
    snprintf(path, sizeof path, "%s/s%05d.npy", dir, i);
    write_file(path, swap ? ">f4" : "<f4", fortran, swap, 3, shape, v, 4);
  }
  return dir;
}

static const char *make_stacked(const char *name, int n, int fortran, int swap) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/data.npy", lade_test_tmpdir(name));
  float *all = malloc((size_t)n * SAMPLE * sizeof *all);
  for (int i = 0; i < n; i++) fill(all + (size_t)i * SAMPLE, (uint64_t)i);
  int64_t shape[4] = {n, D0, D1, D2};
  write_file(path, swap ? ">f4" : "<f4", fortran, swap, 4, shape, all, 4);
  free(all);
  return path;
}

static void test_loader_fortran_and_big_endian(void) {
  const char *caching[2] = {NULL, "cache_mem_bytes=1000000"};
  for (int fortran = 0; fortran < 2; fortran++)
    for (int swap = 0; swap < 2; swap++)
      for (int stacked = 0; stacked < 2; stacked++)
        for (int cached = 0; cached < 2; cached++) {
          char name[64];
          snprintf(name, sizeof name, "l%d%d%d%d", fortran, swap, stacked, cached);
          const char *src = stacked ? make_stacked(name, 24, fortran, swap) : make_folder(name, 24, fortran, swap);
          got_t g = load(src, caching[cached]);
          if (g.rc || !g.ok || g.samples != 24)
            fprintf(stderr, "  fortran %d swap %d stacked %d cached %d: rc %d ok %d samples %llu %s\n", fortran, swap,
                    stacked, cached, g.rc, g.ok, (unsigned long long)g.samples, g.err);
          CHECK_OK(g.rc);
          CHECK(g.ok);
          CHECK_EQ_INT(g.samples, 24);
        }
}

/* npy_dtype / npy_shape still hold for converted files */
static void test_settings_still_checked(void) {
  const char *src = make_stacked("settings", 8, 1, 1);
  got_t g = load(src, "npy_shape=2,3,4");
  CHECK_OK(g.rc);
  CHECK(g.ok);
  g = load(src, "npy_dtype=float64");
  CHECK_EQ_INT(g.rc, LADE_ESHAPE);
  CHECK(strstr(g.err, "float32") && strstr(g.err, "float64"));
  g = load(src, "npy_shape=4,3,2");
  CHECK_EQ_INT(g.rc, LADE_ESHAPE);
}

/* One file of a folder in another order or byte order: an error naming it. */
static void test_odd_file_is_named(void) {
  for (int base = 0; base < 2; base++)
    for (int odd = 0; odd < 2; odd++)
      for (int cached = 0; cached < 2; cached++) {
        char name[64];
        snprintf(name, sizeof name, "odd%d%d%d", base, odd, cached);
        /* base 0: C-order little-endian files; base 1: fortran order */
        const char *dir = make_folder(name, 8, base, 0);
        char path[4200];
        float v[SAMPLE];
        fill(v, 5);
        snprintf(path, sizeof path, "%s/s00005.npy", dir);
        int64_t shape[3] = {D0, D1, D2};
        /* odd 0: the other order; odd 1: big-endian */
        write_file(path, odd ? ">f4" : "<f4", odd ? base : !base, odd, 3, shape, v, 4);
        got_t g = load(dir, cached ? "cache_mem_bytes=1000000" : NULL);
        CHECK_EQ_INT(g.rc, LADE_ESHAPE);
        CHECK(strstr(g.err, "s00005.npy") != NULL);
        CHECK(strstr(g.err, odd ? "big-endian" : "fortran order") != NULL);
        if (g.rc != LADE_ESHAPE) fprintf(stderr, "  base %d odd %d cached %d: %s\n", base, odd, cached, g.err);
      }
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_parse_layouts);
  RUN(test_to_c_every_layout);
  RUN(test_loader_fortran_and_big_endian);
  RUN(test_settings_still_checked);
  RUN(test_odd_file_is_named);
  return lade_test_finish();
}
