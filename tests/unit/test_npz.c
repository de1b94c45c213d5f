/* test_npz.c - the zip reader (core/zipfmt.c) and the npz transform
 * (transform/npz.c) on archives built here byte by byte: stored and
 * deflated members, Python's zip64 local headers, zip64 directory fields and
 * end records, data descriptors, and the broken ones a parser of outside
 * bytes must refuse with a reason: a wrong CRC, every truncation, offsets
 * past the end, another method, encryption, a missing member, another shape.
 * tests/python/test_npz.py checks the same against np.savez / np.load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LADE_HAVE_ZLIB
#include <zlib.h>
#endif

#include "core/npyfmt.h"
#include "core/zipfmt.h"
#include "harness.h"
#include "lade/lade.h"
#include "transform/transform.h"

/* ---- a zip writer, with every knob a test needs */

typedef struct spec {
  const char *name;
  const uint8_t *data; /* the member's uncompressed bytes */
  size_t len;
  int method;          /* 0 stored, 8 deflated (zlib when built with it, else deflate's stored blocks) */
  int zip64_local;     /* Python's force_zip64: local sizes 0xFFFFFFFF, the real ones in a zip64 extra */
  int zip64_central;   /* the directory's sizes and offset 0xFFFFFFFF, in a zip64 extra */
  int descriptor;      /* flag bit 3: no sizes or CRC in the local header, a data descriptor after the data */
  uint16_t flags;      /* more flag bits (encryption) */
  int method_field;    /* > 0: this method written instead (the data stays as `method` made it) */
  int bad_crc;         /* the directory's CRC off by one */
} spec_t;

typedef struct zbuf {
  uint8_t b[1 << 16];
  size_t n;
} zbuf_t;

static void put(zbuf_t *z, const void *p, size_t n) {
  if (z->n + n > sizeof z->b) abort();
  memcpy(z->b + z->n, p, n);
  z->n += n;
}
static void put16(zbuf_t *z, uint32_t v) {
  uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put(z, b, 2);
}
static void put32(zbuf_t *z, uint32_t v) {
  put16(z, v & 0xffff);
  put16(z, v >> 16);
}
static void put64(zbuf_t *z, uint64_t v) {
  put32(z, (uint32_t)v);
  put32(z, (uint32_t)(v >> 32));
}

/* Raw deflate of n bytes into out. */
static size_t deflate_raw(const uint8_t *in, size_t n, uint8_t *out, size_t cap) {
#ifdef LADE_HAVE_ZLIB
  z_stream s;
  memset(&s, 0, sizeof s);
  if (deflateInit2(&s, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
  s.next_in = (Bytef *)in;
  s.avail_in = (uInt)n;
  s.next_out = out;
  s.avail_out = (uInt)cap;
  if (deflate(&s, Z_FINISH) != Z_STREAM_END) abort();
  size_t k = s.total_out;
  deflateEnd(&s);
  return k;
#else
  /* one final stored block: valid deflate data without zlib */
  if (n > 65535 || n + 5 > cap) abort();
  out[0] = 1;
  out[1] = (uint8_t)n, out[2] = (uint8_t)(n >> 8);
  out[3] = (uint8_t)~n, out[4] = (uint8_t)(~n >> 8);
  memcpy(out + 5, in, n);
  return n + 5;
#endif
}

/* Writes the members, the central directory and the end record(s); zip64_end
 * adds the zip64 end record and locator (and 0xFFFF counts in the end record). */
static void build(zbuf_t *z, const spec_t *m, int n, int zip64_end) {
  static uint8_t comp[1 << 16];
  uint64_t off[16], csize[16];
  uint32_t crc[16];
  z->n = 0;
  for (int i = 0; i < n; i++) {
    const spec_t *s = &m[i];
    size_t cl = s->method == 8 ? deflate_raw(s->data, s->len, comp, sizeof comp) : s->len;
    if (s->method != 8) memcpy(comp, s->data, s->len);
    off[i] = z->n;
    csize[i] = cl;
    crc[i] = lade__zip_crc32(0, s->data, s->len);
    size_t nl = strlen(s->name);
    put32(z, 0x04034b50);
    put16(z, s->zip64_local ? 45 : 20);
    put16(z, (s->descriptor ? 8 : 0) | s->flags);
    put16(z, s->method_field > 0 ? (uint32_t)s->method_field : (uint32_t)s->method);
    put16(z, 0), put16(z, 0x21);
    put32(z, s->descriptor ? 0 : crc[i]);
    put32(z, s->descriptor ? 0 : s->zip64_local ? 0xFFFFFFFF : (uint32_t)cl);
    put32(z, s->descriptor ? 0 : s->zip64_local ? 0xFFFFFFFF : (uint32_t)s->len);
    put16(z, (uint32_t)nl);
    put16(z, s->zip64_local ? 20 : 0);
    put(z, s->name, nl);
    if (s->zip64_local) {
      put16(z, 1), put16(z, 16);
      put64(z, s->len);
      put64(z, cl);
    }
    put(z, comp, cl);
    if (s->descriptor) {
      put32(z, 0x08074b50);
      put32(z, crc[i]);
      put32(z, (uint32_t)cl);
      put32(z, (uint32_t)s->len);
    }
  }
  uint64_t cd = z->n;
  for (int i = 0; i < n; i++) {
    const spec_t *s = &m[i];
    size_t nl = strlen(s->name);
    put32(z, 0x02014b50);
    put16(z, 0x031e), put16(z, s->zip64_central ? 45 : 20);
    put16(z, (s->descriptor ? 8 : 0) | s->flags);
    put16(z, s->method_field > 0 ? (uint32_t)s->method_field : (uint32_t)s->method);
    put16(z, 0), put16(z, 0x21);
    put32(z, crc[i] + (s->bad_crc ? 1 : 0));
    put32(z, s->zip64_central ? 0xFFFFFFFF : (uint32_t)csize[i]);
    put32(z, s->zip64_central ? 0xFFFFFFFF : (uint32_t)s->len);
    put16(z, (uint32_t)nl);
    put16(z, s->zip64_central ? 28 : 0);
    put16(z, 0), put16(z, 0), put16(z, 0), put32(z, 0x81a40000);
    put32(z, s->zip64_central ? 0xFFFFFFFF : (uint32_t)off[i]);
    put(z, s->name, nl);
    if (s->zip64_central) {
      put16(z, 1), put16(z, 24);
      put64(z, s->len);
      put64(z, csize[i]);
      put64(z, off[i]);
    }
  }
  uint64_t cd_len = z->n - cd;
  if (zip64_end) {
    uint64_t at = z->n;
    put32(z, 0x06064b50);
    put64(z, 44);
    put16(z, 45), put16(z, 45);
    put32(z, 0), put32(z, 0);
    put64(z, (uint64_t)n), put64(z, (uint64_t)n);
    put64(z, cd_len), put64(z, cd);
    put32(z, 0x07064b50);
    put32(z, 0);
    put64(z, at);
    put32(z, 1);
  }
  put32(z, 0x06054b50);
  put16(z, 0), put16(z, 0);
  put16(z, zip64_end ? 0xFFFF : (uint32_t)n), put16(z, zip64_end ? 0xFFFF : (uint32_t)n);
  put32(z, zip64_end ? 0xFFFFFFFF : (uint32_t)cd_len);
  put32(z, zip64_end ? 0xFFFFFFFF : (uint32_t)cd);
  put16(z, 0);
}

/* A .npy of float32 (rows, cols), C order, holding base + k. */
static size_t npy_f32(uint8_t *out, int64_t rows, int64_t cols, float base) {
  int64_t shape[2] = {rows, cols};
  int hl = lade__npy_write_header((char *)out, 1024, LADE_DTYPE_FLOAT32, 2, shape);
  if (hl < 0) abort();
  for (int64_t k = 0; k < rows * cols; k++) {
    float v = base + (float)k;
    memcpy(out + hl + k * 4, &v, 4);
  }
  return (size_t)hl + (size_t)(rows * cols * 4);
}

/* The same (rows, cols) array stored fortran order, big-endian ('>f4'), as
 * np.save(np.asfortranarray(a.astype('>f4'))) lays it out. */
static size_t npy_f32_fortran_big(uint8_t *out, int64_t rows, int64_t cols, float base) {
  char dict[128];
  int n = snprintf(dict, sizeof dict, "{'descr': '>f4', 'fortran_order': True, 'shape': (%lld, %lld), }",
                   (long long)rows, (long long)cols);
  size_t hl = 128;
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  out[8] = (uint8_t)(hl - 10), out[9] = 0;
  memcpy(out + 10, dict, (size_t)n);
  memset(out + 10 + n, ' ', hl - 10 - (size_t)n - 1);
  out[hl - 1] = '\n';
  for (int64_t j = 0, at = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++, at++) {
      float v = base + (float)(i * cols + j);
      uint8_t b[4];
      memcpy(b, &v, 4);
      for (int k = 0; k < 4; k++) out[hl + at * 4 + k] = b[3 - k]; /* the host is little-endian here */
    }
  return hl + (size_t)(rows * cols * 4);
}

static uint8_t X[2048], Y[2048];
static size_t XL, YL;

static void setup(void) {
  XL = npy_f32(X, 2, 3, 10.0f);
  YL = npy_f32(Y, 4, 1, 100.0f);
}

/* Runs the npz transform over one archive: init from `first` (NULL: the
 * archive itself), then apply. Returns apply's (or init's) code; out gets
 * the floats. */
static int run_xf(const char *member, const zbuf_t *first, const zbuf_t *z, float *out, size_t out_floats,
                  lade__sample_shape_t *shape) {
  lade__xform_conf_t conf = {.npz_member = member};
  lade__sample_shape_t sh;
  void *st = NULL, *ws = NULL;
  const zbuf_t *f = first ? first : z;
  int rc = lade__xform_npz.init(&st, &conf, f->b, f->n, &sh);
  if (rc) return rc;
  if (shape) *shape = sh;
  CHECK_OK(lade__xform_npz.worker_init(st, &ws));
  uint32_t payload = 0;
  float *buf = calloc(sh.bytes / 4 + 1, 4);
  rc = lade__xform_npz.apply(st, ws, z->b, z->n, NULL, buf, &payload);
  if (!rc) {
    CHECK_EQ_INT(payload, sh.bytes);
    memcpy(out, buf, LADE__MIN(sh.bytes, out_floats * 4));
  }
  free(buf);
  lade__xform_npz.worker_free(st, ws);
  lade__xform_npz.destroy(st);
  return rc;
}

/* The npz transform with raw_size (and raw_overflow=cut): init from
 * `first`, apply to z into a slot of exactly raw_size bytes. */
static int run_slot(const zbuf_t *first, const zbuf_t *z, uint64_t raw_size, bool cut, uint8_t *out,
                    uint32_t *payload) {
  lade__xform_conf_t conf = {.npz_member = "x", .raw_size = raw_size, .raw_cut = cut};
  lade__sample_shape_t sh;
  void *st = NULL, *ws = NULL;
  int rc = lade__xform_npz.init(&st, &conf, first->b, first->n, &sh);
  if (rc) return rc;
  CHECK_EQ_INT(sh.dtype, LADE_DTYPE_UINT8);
  CHECK_EQ_INT(sh.ndim, 1);
  CHECK_EQ_INT(sh.dims[0], raw_size);
  CHECK_EQ_INT(sh.bytes, raw_size);
  CHECK_OK(lade__xform_npz.worker_init(st, &ws));
  uint8_t *slot = malloc(raw_size); /* exactly the slot: ASan sees a write past it */
  memset(slot, 0xee, raw_size);
  rc = lade__xform_npz.apply(st, ws, z->b, z->n, NULL, slot, payload);
  if (!rc) memcpy(out, slot, raw_size);
  free(slot);
  lade__xform_npz.worker_free(st, ws);
  lade__xform_npz.destroy(st);
  return rc;
}

static int floats_are(const float *v, int n, float base) {
  for (int k = 0; k < n; k++)
    if (v[k] != base + (float)k) return 0;
  return 1;
}

static int error_has(const char *what) {
  if (strstr(lade_last_error(), what)) return 1;
  fprintf(stderr, "  error '%s' lacks '%s'\n", lade_last_error(), what);
  return 0;
}

/* ---- cases */

static void test_crc32(void) {
  CHECK_EQ_INT(lade__zip_crc32(0, (const uint8_t *)"123456789", 9), 0xCBF43926u);
  CHECK_EQ_INT(lade__zip_crc32(0, (const uint8_t *)"", 0), 0);
  /* in pieces equals at once */
  uint32_t c = lade__zip_crc32(0, (const uint8_t *)"1234", 4);
  CHECK_EQ_INT(lade__zip_crc32(c, (const uint8_t *)"56789", 5), 0xCBF43926u);
#ifdef LADE_HAVE_ZLIB
  /* the folding path (64 bytes and more) equals zlib's crc32 at every length and alignment near its bounds,
   * and for a 128 KiB array, continued from a running value */
  enum { BIG = 131072 + 77 };
  uint8_t *b = malloc(BIG);
  uint32_t r = 12345;
  for (int i = 0; i < BIG; i++) r = r * 1103515245u + 12345u, b[i] = (uint8_t)(r >> 16);
  int bad = 0;
  for (size_t off = 0; off < 17; off++)
    for (size_t n = 0; n < 300; n++)
      bad += lade__zip_crc32(0, b + off, n) != (uint32_t)crc32(0, b + off, (uInt)n);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(lade__zip_crc32(0, b, BIG), (uint32_t)crc32(0, b, BIG));
  CHECK_EQ_INT(lade__zip_crc32(0xdeadbeefu, b + 3, BIG - 3), (uint32_t)crc32(0xdeadbeefu, b + 3, BIG - 3));
  free(b);
#endif
}

static void test_stored_and_deflated_members(void) {
  for (int method = 0; method <= 8; method += 8) {
    spec_t m[2] = {{.name = "x.npy", .data = X, .len = XL, .method = method},
                   {.name = "y.npy", .data = Y, .len = YL, .method = method}};
    zbuf_t *z = malloc(sizeof *z);
    build(z, m, 2, 0);
    lade__zip_t zip;
    CHECK_OK(lade__zip_open(&zip, z->b, z->n));
    CHECK_EQ_INT(zip.entries, 2);
    lade__zip_entry_t e;
    CHECK_OK(lade__zip_find(&zip, "y.npy", &e));
    CHECK_EQ_INT(e.usize, YL);
    CHECK_EQ_INT(e.method, method);
    CHECK_EQ_INT(lade__zip_find(&zip, "y", &e), LADE_ENOENT); /* the reader matches names exactly */
    float v[8];
    lade__sample_shape_t sh;
#ifndef LADE_HAVE_ZLIB
    if (method == 8) {
      CHECK_EQ_INT(run_xf("x", NULL, z, v, 8, &sh), LADE_EUNSUPPORTED);
      CHECK(error_has("built without zlib"));
      free(z);
      continue;
    }
#endif
    CHECK_OK(run_xf("x", NULL, z, v, 8, &sh));
    CHECK_EQ_INT(sh.dtype, LADE_DTYPE_FLOAT32);
    CHECK_EQ_INT(sh.ndim, 2);
    CHECK_EQ_INT(sh.dims[0], 2);
    CHECK_EQ_INT(sh.dims[1], 3);
    CHECK(floats_are(v, 6, 10.0f));
    /* NAME and NAME.npy both name member NAME.npy, as np.load(f)[NAME] */
    CHECK_OK(run_xf("y.npy", NULL, z, v, 8, &sh));
    CHECK_EQ_INT(sh.dims[0], 4);
    CHECK(floats_are(v, 4, 100.0f));
    CHECK_OK(run_xf("y", NULL, z, v, 8, NULL));
    CHECK(floats_are(v, 4, 100.0f));
    free(z);
  }
}

static void test_corrupted_crc(void) {
  for (int method = 0; method <= 8; method += 8) {
#ifndef LADE_HAVE_ZLIB
    if (method == 8) continue;
#endif
    spec_t m[1] = {{.name = "x.npy", .data = X, .len = XL, .method = method, .bad_crc = 1}};
    zbuf_t *z = malloc(sizeof *z);
    build(z, m, 1, 0);
    spec_t good = m[0];
    good.bad_crc = 0;
    zbuf_t *g = malloc(sizeof *g);
    build(g, &good, 1, 0);
    float v[8];
    CHECK_EQ_INT(run_xf("x", g, z, v, 8, NULL), LADE_EFORMAT);
    CHECK(error_has("CRC-32"));
    CHECK(error_has("'x.npy'"));
    /* one byte of the stored array flipped: the CRC says so */
    memcpy(z, g, sizeof *z);
    if (method == 0) {
      z->b[30 + 5 + XL - 1] ^= 0x40; /* the last payload byte */
      CHECK_EQ_INT(run_xf("x", g, z, v, 8, NULL), LADE_EFORMAT);
      CHECK(error_has("CRC-32"));
    }
    free(z);
    free(g);
  }
}

static void test_every_truncation_fails(void) {
  spec_t m[2] = {{.name = "x.npy", .data = X, .len = XL, .method = 0, .zip64_local = 1},
                 {.name = "y.npy", .data = Y, .len = YL, .method = 8}};
  zbuf_t *z = malloc(sizeof *z);
  build(z, m, 2, 1);
  lade__zip_t zip;
  CHECK_OK(lade__zip_open(&zip, z->b, z->n));
  int opened = 0;
  for (size_t n = 0; n < z->n; n++) {
    /* a copy of exactly n bytes: ASan sees a read past it */
    uint8_t *p = malloc(n ? n : 1);
    memcpy(p, z->b, n);
    int rc = lade__zip_open(&zip, p, n);
    if (rc == 0) opened++;
    else CHECK_EQ_INT(rc, LADE_EFORMAT);
    free(p);
  }
  CHECK_EQ_INT(opened, 0);
  /* the messages say what is wrong */
  CHECK_EQ_INT(lade__zip_open(&zip, z->b, z->n - 1), LADE_EFORMAT);
  CHECK(error_has("no end-of-central-directory record"));
  CHECK_EQ_INT(lade__zip_open(&zip, z->b, 2), LADE_EFORMAT);
  CHECK(error_has("not a zip archive"));
  CHECK_EQ_INT(lade__zip_open(&zip, z->b, 0), LADE_EFORMAT);
  CHECK(error_has("empty"));
  /* the end records kept, bytes cut out before them: the directory is not where they say */
  size_t tail = 22 + 20 + 56;
  zbuf_t *c = malloc(sizeof *c);
  c->n = z->n - 10;
  memcpy(c->b, z->b, z->n - tail - 10);
  memcpy(c->b + z->n - tail - 10, z->b + z->n - tail, tail);
  CHECK_EQ_INT(lade__zip_open(&zip, c->b, c->n), LADE_EFORMAT);
  free(c);
  free(z);
}

static void test_offsets_past_the_end(void) {
  spec_t m[1] = {{.name = "x.npy", .data = X, .len = XL}};
  zbuf_t *z = malloc(sizeof *z);
  build(z, m, 1, 0);
  size_t cd = 30 + 5 + XL;
  lade__zip_t zip;
  /* the local header offset (directory entry + 42) past the data */
  zbuf_t *b = malloc(sizeof *b);
  memcpy(b, z, sizeof *z);
  b->b[cd + 42] = 0xff, b->b[cd + 43] = 0xff, b->b[cd + 44] = 0x00, b->b[cd + 45] = 0x01;
  CHECK_EQ_INT(lade__zip_open(&zip, b->b, b->n), LADE_EFORMAT);
  CHECK(error_has("local header at offset 16842751"));
  /* the compressed size past the data: found by the member's read */
  memcpy(b, z, sizeof *z);
  b->b[cd + 20] = (uint8_t)(XL + 1);
  b->b[cd + 21] = (uint8_t)((XL + 1) >> 8);
  b->b[cd + 24] = (uint8_t)(XL + 1);
  b->b[cd + 25] = (uint8_t)((XL + 1) >> 8);
  CHECK_OK(lade__zip_open(&zip, b->b, b->n));
  lade__zip_entry_t e;
  const uint8_t *data;
  CHECK_OK(lade__zip_find(&zip, "x.npy", &e));
  CHECK_EQ_INT(lade__zip_data(&zip, &e, &data), LADE_EFORMAT);
  CHECK(error_has("run past"));
  /* the local header's name length pushes the data past the directory */
  memcpy(b, z, sizeof *z);
  b->b[26] = 0xff;
  CHECK_OK(lade__zip_open(&zip, b->b, b->n));
  CHECK_OK(lade__zip_find(&zip, "x.npy", &e));
  CHECK_EQ_INT(lade__zip_data(&zip, &e, &data), LADE_EFORMAT);
  CHECK(error_has("run past"));
  /* the directory's offset past the end of the archive */
  memcpy(b, z, sizeof *z);
  b->b[b->n - 6 + 3] = 0x70;
  CHECK_EQ_INT(lade__zip_open(&zip, b->b, b->n), LADE_EFORMAT);
  CHECK(error_has("central directory"));
  /* an entry count that disagrees with the directory's bytes */
  memcpy(b, z, sizeof *z);
  b->b[b->n - 12] = 2, b->b[b->n - 14] = 2;
  CHECK_EQ_INT(lade__zip_open(&zip, b->b, b->n), LADE_EFORMAT);
  CHECK(error_has("holds 1 entries, the end record says 2"));
  /* the local header names another file */
  memcpy(b, z, sizeof *z);
  b->b[30] = 'q';
  CHECK_OK(lade__zip_open(&zip, b->b, b->n));
  CHECK_OK(lade__zip_find(&zip, "x.npy", &e));
  CHECK_EQ_INT(lade__zip_data(&zip, &e, &data), LADE_EFORMAT);
  CHECK(error_has("names another file"));
  free(b);
  free(z);
}

static void test_zip64(void) {
  for (int method = 0; method <= 8; method += 8) {
#ifndef LADE_HAVE_ZLIB
    if (method == 8) continue;
#endif
    /* Python's force_zip64 local headers, zip64 directory fields, zip64 end records */
    spec_t m[2] = {{.name = "x.npy", .data = X, .len = XL, .method = method, .zip64_local = 1, .zip64_central = 1},
                   {.name = "y.npy", .data = Y, .len = YL, .method = method, .zip64_local = 1}};
    zbuf_t *z = malloc(sizeof *z);
    build(z, m, 2, 1);
    lade__zip_t zip;
    CHECK_OK(lade__zip_open(&zip, z->b, z->n));
    CHECK_EQ_INT(zip.entries, 2);
    lade__zip_entry_t e;
    CHECK_OK(lade__zip_find(&zip, "x.npy", &e));
    CHECK_EQ_INT(e.usize, XL);
    CHECK_EQ_INT(e.local_off, 0);
    float v[8];
    CHECK_OK(run_xf("x", NULL, z, v, 8, NULL));
    CHECK(floats_are(v, 6, 10.0f));
    CHECK_OK(run_xf("y", NULL, z, v, 8, NULL));
    CHECK(floats_are(v, 4, 100.0f));
    /* a zip64 extra that lacks the field the directory defers to it */
    size_t cd = zip.cd_off;
    zbuf_t *b = malloc(sizeof *b);
    memcpy(b, z, sizeof *z);
    b->b[cd + 30] = 8;                  /* the entry's extra data: 8 of its 28 bytes */
    b->b[cd + 46 + 5 + 2] = 4;          /* the zip64 field's own size: 4 */
    CHECK_EQ_INT(lade__zip_open(&zip, b->b, b->n), LADE_EFORMAT);
    CHECK(error_has("lacks the uncompressed size"));
    /* the locator pointing elsewhere */
    memcpy(b, z, sizeof *z);
    b->b[b->n - 22 - 20 + 8] ^= 1;
    CHECK_EQ_INT(lade__zip_open(&zip, b->b, b->n), LADE_EFORMAT);
    CHECK(error_has("zip64 end record"));
    free(b);
    free(z);
  }
}

static void test_data_descriptor(void) {
  for (int method = 0; method <= 8; method += 8) {
#ifndef LADE_HAVE_ZLIB
    if (method == 8) continue;
#endif
    spec_t m[1] = {{.name = "x.npy", .data = X, .len = XL, .method = method, .descriptor = 1}};
    zbuf_t *z = malloc(sizeof *z);
    build(z, m, 1, 0);
    float v[8];
    CHECK_OK(run_xf("x", NULL, z, v, 8, NULL));
    CHECK(floats_are(v, 6, 10.0f));
    free(z);
  }
}

static void test_missing_member_lists_the_others(void) {
  spec_t m[3] = {{.name = "a.npy", .data = X, .len = XL},
                 {.name = "b.npy", .data = Y, .len = YL},
                 {.name = "c\001d.npy", .data = Y, .len = YL}};
  zbuf_t *z = malloc(sizeof *z);
  build(z, m, 3, 0);
  float v[8];
  CHECK_EQ_INT(run_xf("x", NULL, z, v, 8, NULL), LADE_ENOENT);
  CHECK(error_has("no member 'x' (nor 'x.npy')"));
  CHECK(error_has("'a.npy', 'b.npy', 'c?d.npy' (3 members)"));
  CHECK(error_has("npz_member"));
  /* an empty archive (np.savez with no arrays) */
  build(z, m, 0, 0);
  CHECK_EQ_INT(run_xf("x", NULL, z, v, 8, NULL), LADE_ENOENT);
  CHECK(error_has("(0 members)"));
  free(z);
}

static void test_last_of_a_name_wins(void) {
  /* zipfile keeps the last directory entry of a name; so does lade */
  spec_t m[2] = {{.name = "x.npy", .data = Y, .len = YL}, {.name = "x.npy", .data = X, .len = XL}};
  zbuf_t *z = malloc(sizeof *z);
  build(z, m, 2, 0);
  float v[8];
  lade__sample_shape_t sh;
  CHECK_OK(run_xf("x", NULL, z, v, 8, &sh));
  CHECK_EQ_INT(sh.dims[0], 2);
  CHECK(floats_are(v, 6, 10.0f));
  free(z);
}

static void test_methods_and_encryption_refused(void) {
  spec_t m[1] = {{.name = "x.npy", .data = X, .len = XL, .method_field = 12}};
  zbuf_t *z = malloc(sizeof *z);
  build(z, m, 1, 0);
  float v[8];
  CHECK_EQ_INT(run_xf("x", NULL, z, v, 8, NULL), LADE_EFORMAT);
  CHECK(error_has("method 12 (bzip2)"));
  m[0].method_field = 0;
  m[0].flags = 1;
  build(z, m, 1, 0);
  CHECK_EQ_INT(run_xf("x", NULL, z, v, 8, NULL), LADE_EFORMAT);
  CHECK(error_has("encrypted"));
  free(z);
}

static void test_other_shape_and_bad_members(void) {
  spec_t m[1] = {{.name = "x.npy", .data = X, .len = XL}};
  zbuf_t *first = malloc(sizeof *first), *z = malloc(sizeof *z);
  build(first, m, 1, 0);
  float v[8];
  /* another shape: named with the dataset's */
  m[0].data = Y, m[0].len = YL;
  build(z, m, 1, 0);
  CHECK_EQ_INT(run_xf("x", first, z, v, 8, NULL), LADE_ESHAPE);
  CHECK(error_has("float32 (4,1)"));
  CHECK(error_has("float32 (2,3)"));
  /* a member that is not a .npy */
  m[0].data = (const uint8_t *)"hello, world", m[0].len = 12;
  build(z, m, 1, 0);
  CHECK_EQ_INT(run_xf("x", first, z, v, 8, NULL), LADE_EFORMAT);
  CHECK(error_has("'x.npy'"));
  /* a .npy cut short (its CRC matches: the array's bytes are missing) */
  m[0].data = X, m[0].len = XL - 4;
  build(z, m, 1, 0);
  CHECK_EQ_INT(run_xf("x", first, z, v, 8, NULL), LADE_EFORMAT);
  CHECK(error_has("header and array"));
  /* not a zip at all: a bare .npy */
  zbuf_t *npy = malloc(sizeof *npy);
  memcpy(npy->b, X, XL);
  npy->n = XL;
  CHECK_EQ_INT(run_xf("x", first, npy, v, 8, NULL), LADE_EFORMAT);
  CHECK(error_has("not a zip archive"));
  free(npy);
#ifdef LADE_HAVE_ZLIB
  /* a deflated member whose data is damaged, and one that says it is longer */
  m[0].len = XL, m[0].method = 8;
  build(z, m, 1, 0);
  zbuf_t *b = malloc(sizeof *b);
  memcpy(b, z, sizeof *z);
  for (size_t k = 40; k < 60; k++) b->b[k] ^= 0x5a;
  CHECK(run_xf("x", first, b, v, 8, NULL) == LADE_EFORMAT);
  CHECK(error_has("'x.npy'"));
  free(b);
#endif
  free(first);
  free(z);
}

/* raw_size > 0 (lade dlio): each array's C-order bytes in a uint8 slot,
 * whatever its shape: zero padded, refused when longer, or cut
 * (raw_overflow=cut), a fortran-order big-endian one converted first. */
static void test_raw_size_slot(void) {
  zbuf_t *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  static uint8_t fb[1024];
  size_t fl = npy_f32_fortran_big(fb, 2, 3, 10.0f);
  for (int method = 0; method <= 8; method += 8) {
#ifndef LADE_HAVE_ZLIB
    if (method == 8) continue;
#endif
    spec_t ma = {.name = "x.npy", .data = X, .len = XL, .method = method}; /* float32 (2,3): 24 bytes */
    spec_t mb = {.name = "x.npy", .data = Y, .len = YL, .method = method}; /* float32 (4,1): 16 bytes */
    build(a, &ma, 1, 0);
    build(b, &mb, 1, 0);
    uint8_t out[64];
    uint32_t payload = 0;
    float v[16];
    /* shorter: the array's bytes, then zeros */
    CHECK_OK(run_slot(a, b, 20, false, out, &payload));
    CHECK_EQ_INT(payload, 16);
    memcpy(v, out, 16);
    CHECK(floats_are(v, 4, 100.0f));
    CHECK(out[16] == 0 && out[17] == 0 && out[18] == 0 && out[19] == 0);
    /* longer: refused, or cut */
    CHECK_EQ_INT(run_slot(b, a, 20, false, out, &payload), LADE_ESHAPE);
    CHECK(error_has("larger than the raw slot of 20 bytes"));
    CHECK(error_has("raw_overflow=cut"));
    CHECK_OK(run_slot(b, a, 20, true, out, &payload));
    CHECK_EQ_INT(payload, 20);
    memcpy(v, out, 20);
    CHECK(floats_are(v, 5, 10.0f));
    /* fortran order, big-endian: C order and the host's byte order, then cut */
    spec_t mf = {.name = "x.npy", .data = fb, .len = fl, .method = method};
    build(b, &mf, 1, 0);
    CHECK_OK(run_slot(a, b, 20, true, out, &payload));
    CHECK_EQ_INT(payload, 20);
    memcpy(v, out, 20);
    CHECK(floats_are(v, 5, 10.0f));
    CHECK_OK(run_slot(a, b, 32, false, out, &payload));
    CHECK_EQ_INT(payload, 24);
    memcpy(v, out, 24);
    CHECK(floats_are(v, 6, 10.0f));
    CHECK(out[24] == 0 && out[31] == 0);
    /* typed (no raw_size): another layout than sample 0's is converted, not refused */
    CHECK_OK(run_xf("x", a, b, v, 16, NULL));
    CHECK(floats_are(v, 6, 10.0f));
  }
  free(a);
  free(b);
}

/* A folder of .npz files loads with nothing but source= (auto picks npz),
 * with labels from class folders, and an archive without the member fails
 * at create naming the file. */
static void test_loader_over_a_folder(void) {
  const char *dir = lade_test_tmpdir("npz_folder");
  char path[4200];
  zbuf_t *z = malloc(sizeof *z);
  uint8_t *npy = malloc(1024);
  for (int i = 0; i < 6; i++) {
    size_t n = npy_f32(npy, 2, 3, (float)(i * 100));
    spec_t m[2] = {{.name = "x.npy", .data = npy, .len = n, .method = i % 2 ? 8 : 0, .zip64_local = 1},
                   {.name = "y.npy", .data = Y, .len = YL}};
#ifndef LADE_HAVE_ZLIB
    m[0].method = 0;
#endif
    build(z, m, 2, 0);
    snprintf(path, sizeof path, "%s/%s", dir, i < 3 ? "cat" : "dog");
    lade_test_sh("mkdir -p '%s'", path);
    snprintf(path, sizeof path, "%s/%s/s%d.npz", dir, i < 3 ? "cat" : "dog", i);
    FILE *f = fopen(path, "wb");
    fwrite(z->b, 1, z->n, f);
    fclose(f);
  }
  lade_config_t *c;
  CHECK_OK(lade_config_create(&c));
  lade_config_set(c, "source", dir);
  lade_config_set(c, "batch_size", "6");
  lade_config_set(c, "shuffle", "false");
  lade_config_set(c, "threads", "2");
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  if (L) {
    lade_batch_t *b = NULL;
    CHECK_OK(lade_loader_next(L, &b));
    if (b) {
      CHECK_EQ_INT(b->dtype, LADE_DTYPE_FLOAT32);
      CHECK_EQ_INT(b->ndim, 3);
      CHECK_EQ_INT(b->shape[0], 6);
      for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(b->labels[i], i < 3 ? 0 : 1);
        CHECK(floats_are((const float *)b->data + 6 * i, 6, (float)(i * 100)));
      }
      lade_batch_release(b);
    }
    lade_loader_destroy(L);
  }
  /* npz_member=y: the other array; refused with another transform */
  lade_config_set(c, "npz_member", "y");
  CHECK_OK(lade_loader_create(&L, c));
  lade_loader_destroy(L);
  L = NULL;
  lade_config_set(c, "transform", "raw");
  CHECK_EQ_INT(lade_loader_create(&L, c), LADE_EINVAL);
  CHECK(error_has("npz_member"));
  /* sample 0 without the member: create fails naming the file */
  lade_config_set(c, "transform", "npz");
  lade_config_set(c, "npz_member", "z");
  CHECK_EQ_INT(lade_loader_create(&L, c), LADE_ENOENT);
  CHECK(error_has("s0.npz"));
  CHECK(error_has("no member 'z'"));
  lade_config_destroy(c);
  free(z);
  free(npy);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  setup();
  RUN(test_crc32);
  RUN(test_stored_and_deflated_members);
  RUN(test_corrupted_crc);
  RUN(test_every_truncation_fails);
  RUN(test_offsets_past_the_end);
  RUN(test_zip64);
  RUN(test_data_descriptor);
  RUN(test_missing_member_lists_the_others);
  RUN(test_last_of_a_name_wins);
  RUN(test_methods_and_encryption_refused);
  RUN(test_other_shape_and_bad_members);
  RUN(test_raw_size_slot);
  RUN(test_loader_over_a_folder);
  return lade_test_finish();
}
