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
    int64_t rem = e, off = 0, stride = 1, idx[LADE_MAX_DIMS + 2];
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

/* A loader over source in batches of 4 on 2 threads, plus `extra` settings. */
static int create(const char *source, const char *extra, lade_loader_t **L) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  lade_config_set(c, "source", source);
  lade_config_parse(c, "batch_size=4");
  lade_config_parse(c, "threads=2");
  if (extra && lade_config_parse(c, extra)) fprintf(stderr, "bad setting %s: %s\n", extra, lade_last_error());
  int rc = lade_loader_create(L, c);
  lade_config_destroy(c);
  return rc;
}

static got_t load(const char *source, const char *extra) {
  got_t g = {0};
  g.ok = 1;
  lade_loader_t *L = NULL;
  g.rc = create(source, extra, &L);
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

/* ---- what np.load reads: Python 2 headers, zero-size and many-dimension arrays */

/* A header whose dictionary is `dict`, format version major.0, padded as numpy pads. */
static size_t raw_header(uint8_t *buf, int major, const char *dict) {
  size_t n = strlen(dict), pre = major == 1 ? 10 : 12;
  size_t total = (pre + n + 1 + 63) / 64 * 64, hl = total - pre;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (uint8_t)major;
  buf[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (uint8_t)(hl >> (8 * i));
  memcpy(buf + pre, dict, n);
  memset(buf + pre + n, ' ', hl - n - 1);
  buf[total - 1] = '\n';
  return total;
}

static void test_parse_what_numpy_reads(void) {
  uint8_t buf[4096];
  lade__npy_header_t h;
  /* Python 2's longs (numpy's own win64python2.npy has (2L,)): 1.0 and 2.0 headers */
  for (int major = 1; major <= 2; major++) {
    raw_header(buf, major, "{'descr': '<f8', 'fortran_order': False, 'shape': (1L, 2L), }");
    CHECK_OK(lade__npy_parse(buf, sizeof buf, &h));
    CHECK(h.ndim == 2 && h.shape[0] == 1 && h.shape[1] == 2 && h.payload_bytes == 16);
    raw_header(buf, major, "{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }");
    CHECK_OK(lade__npy_parse(buf, sizeof buf, &h));
    CHECK(h.ndim == 1 && h.shape[0] == 2);
  }
  /* numpy filters the suffix only in 1.0 and 2.0 headers; elsewhere it is malformed */
  raw_header(buf, 3, "{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }");
  CHECK_EQ_INT(lade__npy_parse(buf, sizeof buf, &h), LADE_EFORMAT);
  raw_header(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2LL,), }");
  CHECK_EQ_INT(lade__npy_parse(buf, sizeof buf, &h), LADE_EFORMAT);
  /* zero-size arrays */
  raw_header(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }");
  CHECK_OK(lade__npy_parse(buf, sizeof buf, &h));
  CHECK(h.ndim == 1 && h.shape[0] == 0 && h.payload_bytes == 0);
  raw_header(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 0), }");
  CHECK_OK(lade__npy_parse(buf, sizeof buf, &h));
  CHECK(h.ndim == 2 && h.shape[0] == 3 && h.shape[1] == 0 && h.payload_bytes == 0 && !h.fortran);
  /* up to numpy's 64 dimensions */
  char dict[1024];
  for (int nd = 9; nd <= 65; nd += 56) {
    int n = snprintf(dict, sizeof dict, "{'descr': '<i2', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < nd; i++) n += snprintf(dict + n, sizeof dict - (size_t)n, "%d, ", i == 3 ? 2 : 1);
    snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    raw_header(buf, 1, dict);
    if (nd <= LADE__NPY_MAX_DIMS) {
      CHECK_OK(lade__npy_parse(buf, sizeof buf, &h));
      CHECK(h.ndim == nd && h.payload_bytes == 4);
    } else {
      CHECK_EQ_INT(lade__npy_parse(buf, sizeof buf, &h), LADE_EFORMAT);
      CHECK(strstr(lade_last_error(), "more than 64 dimensions") != NULL);
    }
  }
  CHECK_EQ_INT(lade__npy_check_sample_dims(LADE_MAX_DIMS - 1, "x"), 0);
  CHECK_EQ_INT(lade__npy_check_sample_dims(LADE_MAX_DIMS, "dir/x.npy"), LADE_ESHAPE);
  CHECK(strstr(lade_last_error(), "dir/x.npy") && strstr(lade_last_error(), "at most 7 sample dimensions"));
}

/* Writes a float32 .npy of `ndim` dims (shape) holding value v + k at element k. */
static void write_f32(const char *path, int ndim, const int64_t *shape, float v) {
  int64_t count = 1;
  for (int i = 0; i < ndim; i++) count *= shape[i];
  float *data = malloc((size_t)(count ? count : 1) * sizeof *data);
  for (int64_t k = 0; k < count; k++) data[k] = v + (float)k;
  write_file(path, "<f4", 0, 0, ndim, shape, data, 4);
  free(data);
}

typedef struct shaped {
  int rc, ndim, ok;
  int64_t shape[LADE_MAX_DIMS];
  uint64_t samples, batches;
  char err[1024];
} shaped_t;

/* Loads every batch; records the first batch's shape, checks each sample's
 * values (v = 1000 * index + k) and that each batch is shape[0] samples of
 * the same sample shape with nbytes to match. */
static shaped_t load_shaped(const char *source, const char *extra) {
  shaped_t g = {.ok = 1};
  lade_loader_t *L = NULL;
  g.rc = create(source, extra, &L);
  while (!g.rc) {
    lade_batch_t *b = NULL;
    g.rc = lade_loader_next(L, &b);
    if (g.rc || !b) break;
    if (!g.batches) {
      g.ndim = b->ndim;
      memcpy(g.shape, b->shape, sizeof g.shape);
    }
    int64_t per = 1;
    for (int i = 1; i < b->ndim; i++) per *= b->shape[i];
    if (b->ndim != g.ndim || b->nbytes != (size_t)(b->shape[0] * per) * sizeof(float) || b->dtype != LADE_DTYPE_FLOAT32)
      g.ok = 0;
    for (int i = 1; i < b->ndim; i++) g.ok &= b->shape[i] == g.shape[i];
    for (int64_t i = 0; i < b->shape[0]; i++)
      for (int64_t k = 0; k < per; k++)
        g.ok &= ((const float *)b->data)[i * per + k] == (float)(1000 * b->indices[i] + k);
    g.samples += (uint64_t)b->shape[0];
    g.batches++;
    lade_batch_release(b);
  }
  if (g.rc) snprintf(g.err, sizeof g.err, "%s", lade_last_error());
  lade_loader_destroy(L);
  return g;
}

static void test_zero_size_samples(void) {
  const char *caching[2] = {NULL, "cache_mem_bytes=1000000"};
  for (int cached = 0; cached < 2; cached++) {
    /* a folder of float32[0] files: batches (4, 0), (4, 0), (2, 0) */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", lade_test_tmpdir(cached ? "zero-folder-c" : "zero-folder"));
    int64_t s0[1] = {0};
    for (int i = 0; i < 10; i++) {
      char path[4300];
      snprintf(path, sizeof path, "%s/s%02d.npy", dir, i);
      write_f32(path, 1, s0, 0);
    }
    shaped_t g = load_shaped(dir, caching[cached]);
    if (g.rc) fprintf(stderr, "  zero folder cached %d: %s\n", cached, g.err);
    CHECK_OK(g.rc);
    CHECK(g.ok && g.samples == 10 && g.batches == 3 && g.ndim == 2 && g.shape[0] == 4 && g.shape[1] == 0);
    /* a stacked (10, 3, 0): batches (4, 3, 0) */
    char path[4300];
    snprintf(path, sizeof path, "%s/data.npy", lade_test_tmpdir(cached ? "zero-stacked-c" : "zero-stacked"));
    int64_t s3[3] = {10, 3, 0};
    write_f32(path, 3, s3, 0);
    g = load_shaped(path, caching[cached]);
    if (g.rc) fprintf(stderr, "  zero stacked cached %d: %s\n", cached, g.err);
    CHECK_OK(g.rc);
    CHECK(g.ok && g.samples == 10 && g.ndim == 3 && g.shape[1] == 3 && g.shape[2] == 0);
    /* no rows at all is an empty dataset */
    int64_t e[2] = {0, 3};
    write_f32(path, 2, e, 0);
    g = load_shaped(path, caching[cached]);
    CHECK_EQ_INT(g.rc, LADE_EEMPTY);
  }
}

/* Sample dimensions up to what lade_batch_t holds (LADE_MAX_DIMS - 1), and
 * a clear error naming the file and the limit beyond, on every path. */
static void test_many_dimensions(void) {
  const char *caching[2] = {NULL, "cache_mem_bytes=1000000"};
  for (int cached = 0; cached < 2; cached++)
    for (int nd = LADE_MAX_DIMS - 1; nd <= LADE_MAX_DIMS + 1; nd++) {
      int64_t shape[LADE_MAX_DIMS + 2];
      for (int i = 0; i < nd + 1; i++) shape[i] = 1;
      shape[nd] = 3; /* the last sample dimension */
      char name[64], dir[4200], path[4300];
      snprintf(name, sizeof name, "dims-folder-%d-%d", nd, cached);
      snprintf(dir, sizeof dir, "%s", lade_test_tmpdir(name));
      for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/s%02d.npy", dir, i);
        write_f32(path, nd, shape + 1, (float)(1000 * i));
      }
      shaped_t g = load_shaped(dir, caching[cached]);
      if (nd <= LADE_MAX_DIMS - 1) {
        if (g.rc) fprintf(stderr, "  %d dims folder cached %d: %s\n", nd, cached, g.err);
        CHECK_OK(g.rc);
        CHECK(g.ok && g.samples == 6 && g.ndim == nd + 1 && g.shape[nd] == 3);
      } else {
        CHECK_EQ_INT(g.rc, LADE_ESHAPE);
        CHECK(strstr(g.err, "at most 7 sample dimensions") != NULL);
        CHECK(cached || strstr(g.err, "s00.npy") != NULL);
      }
      /* stacked: N x (nd sample dimensions) */
      snprintf(name, sizeof name, "dims-stacked-%d-%d", nd, cached);
      snprintf(path, sizeof path, "%s/data.npy", lade_test_tmpdir(name));
      shape[0] = 6;
      int64_t count = 3 * 6;
      float *all = malloc((size_t)count * sizeof *all);
      for (int64_t k = 0; k < count; k++) all[k] = (float)(1000 * (k / 3) + k % 3);
      write_file(path, "<f4", 0, 0, nd + 1, shape, all, 4);
      free(all);
      g = load_shaped(path, caching[cached]);
      if (nd <= LADE_MAX_DIMS - 1) {
        if (g.rc) fprintf(stderr, "  %d dims stacked cached %d: %s\n", nd, cached, g.err);
        CHECK_OK(g.rc);
        CHECK(g.ok && g.samples == 6 && g.ndim == nd + 1);
      } else {
        CHECK_EQ_INT(g.rc, LADE_ESHAPE);
        CHECK(strstr(g.err, "data.npy") && strstr(g.err, "at most 7 sample dimensions"));
      }
    }
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_parse_layouts);
  RUN(test_to_c_every_layout);
  RUN(test_loader_fortran_and_big_endian);
  RUN(test_settings_still_checked);
  RUN(test_odd_file_is_named);
  RUN(test_parse_what_numpy_reads);
  RUN(test_zero_size_samples);
  RUN(test_many_dimensions);
  return lade_test_finish();
}
