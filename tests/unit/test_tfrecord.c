/* test_tfrecord.c - the tfrecord source's pieces in C, under ASan with leak
 * checks in scripts/test.sh: CRC-32C against its published vectors (RFC
 * 3720) with the instruction and the tables agreeing on every length and
 * alignment, TFRecord's masked CRC, the tf.train.Example decoder on
 * Examples encoded here field by field (packed and unpacked lists,
 * unknown fields of every wire type, groups, a key given twice, lengths
 * past the end, overlong varints), the record walk's errors, and the
 * source end to end through its vtable (bytes, labels, a flipped data bit
 * caught by the read), and gzip/zlib files: the inflating walk, the cache
 * of inflate cursors (in order, behind a ring, after its file's state was
 * dropped, from four threads, cut or damaged streams), a gzip file
 * through the source and a remote one refused. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "harness.h"
#include "lade/lade.h"
#include "source/source.h"
#include "source/tar_impl.h"
#include "source/tfrec_gzip.h"
#include "source/tfrecfmt.h"

#ifdef LADE_HAVE_ZLIB
#include <pthread.h>
#include <zlib.h>
#endif

/* ------------------------------------------------------------ encoding */

typedef struct enc {
  uint8_t b[8192];
  size_t n;
} enc_t;

static void put(enc_t *e, const void *p, size_t n) {
  if (e->n + n > sizeof e->b) abort();
  memcpy(e->b + e->n, p, n);
  e->n += n;
}

static void put_varint(enc_t *e, uint64_t v) {
  do {
    uint8_t c = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) c |= 0x80;
    put(e, &c, 1);
  } while (v);
}

static void put_tag(enc_t *e, uint32_t num, int wire) { put_varint(e, (uint64_t)num << 3 | (uint64_t)wire); }

/* A length-delimited field holding `sub`. */
static void put_len(enc_t *e, uint32_t num, const void *p, size_t n) {
  put_tag(e, num, 2);
  put_varint(e, n);
  put(e, p, n);
}

/* A map entry (key = 1, value = 2: the Feature bytes) into Features. */
static void put_entry(enc_t *features, const char *key, const enc_t *feature) {
  enc_t me = {.n = 0};
  put_len(&me, 1, key, strlen(key));
  put_len(&me, 2, feature->b, feature->n);
  put_len(features, 1, me.b, me.n);
}

static void example_of(enc_t *ex, const enc_t *features) {
  ex->n = 0;
  put_len(ex, 1, features->b, features->n);
}

static void bytes_feature(enc_t *f, const void *p, size_t n) {
  enc_t l = {.n = 0};
  put_len(&l, 1, p, n);
  f->n = 0;
  put_len(f, 1, l.b, l.n);
}

static void int64_feature(enc_t *f, const int64_t *v, size_t k, int packed) {
  enc_t l = {.n = 0}, pk = {.n = 0};
  for (size_t i = 0; i < k; i++) {
    if (packed) {
      put_varint(&pk, (uint64_t)v[i]);
    } else {
      put_tag(&l, 1, 0);
      put_varint(&l, (uint64_t)v[i]);
    }
  }
  if (packed) put_len(&l, 1, pk.b, pk.n);
  f->n = 0;
  put_len(f, 3, l.b, l.n);
}

static void float_feature(enc_t *f, const float *v, size_t k, int packed) {
  enc_t l = {.n = 0};
  if (packed) {
    put_len(&l, 1, v, k * 4);
  } else {
    for (size_t i = 0; i < k; i++) {
      put_tag(&l, 1, 5);
      put(&l, &v[i], 4);
    }
  }
  f->n = 0;
  put_len(f, 2, l.b, l.n);
}

/* ------------------------------------------------------------------ crc */

static void test_crc32c_vectors(void) {
  uint8_t b[48];
  CHECK_EQ_INT(lade_crc32c("123456789", 9, 0), 0xE3069283u);
  CHECK_EQ_INT(lade__crc32c_sw(0, "123456789", 9), 0xE3069283u);
  CHECK_EQ_INT(lade_crc32c(NULL, 0, 0), 0);
  memset(b, 0, 32); /* RFC 3720, B.4 */
  CHECK_EQ_INT(lade_crc32c(b, 32, 0), 0x8A9136AAu);
  memset(b, 0xff, 32);
  CHECK_EQ_INT(lade_crc32c(b, 32, 0), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
  CHECK_EQ_INT(lade_crc32c(b, 32, 0), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
  CHECK_EQ_INT(lade_crc32c(b, 32, 0), 0x113FDB5Cu);
  /* chained: the CRC of a followed by b */
  CHECK_EQ_INT(lade_crc32c("56789", 5, lade_crc32c("1234", 4, 0)), 0xE3069283u);
  /* the instruction (where the CPU has it) and the tables agree on every
   * length and alignment */
  uint8_t *r = malloc(4096 + 16);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < 4096 + 16; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    r[i] = (uint8_t)x;
  }
  int bad = 0;
  for (size_t off = 0; off < 9; off++)
    for (size_t n = 0; n < 300; n += 1 + n / 16)
      bad += lade__crc32c(0x1234, r + off, n) != lade__crc32c_sw(0x1234, r + off, n);
  bad += lade__crc32c(0, r, 4096) != lade__crc32c_sw(0, r, 4096);
  CHECK_EQ_INT(bad, 0);
  free(r);
  fprintf(stderr, "  crc32c: %s\n", lade__crc32c_hw() ? "SSE4.2 instruction and tables" : "tables only");
}

static void test_masked_crc(void) {
  CHECK_EQ_INT(lade__tfrec_mask(0), 0xa282ead8u);
  uint32_t c = 0xE3069283u;
  uint32_t rot = (c >> 15) | (c << 17); /* a rotation right by 15 */
  CHECK_EQ_INT(lade__tfrec_mask(c), (uint32_t)(rot + 0xa282ead8u));
  CHECK_EQ_INT(lade__tfrec_masked_crc("123456789", 9), lade__tfrec_mask(0xE3069283u));
  /* TF's own framing of an empty record: 8 zero bytes of length */
  uint8_t zero[8] = {0};
  CHECK_EQ_INT(lade__tfrec_masked_crc(zero, 8), lade__tfrec_mask(lade_crc32c(zero, 8, 0)));
}

/* --------------------------------------------------------------- Example */

static void test_example_decoding(void) {
  enc_t feats = {.n = 0}, f, ex;
  static const uint8_t img[] = "\x00\x01image bytes\xff";
  bytes_feature(&f, img, sizeof img);
  put_entry(&feats, "image", &f);
  int64_t ints[] = {3, -1, 1ll << 40, INT64_MIN};
  int64_feature(&f, ints, 4, 1);
  put_entry(&feats, "packed", &f);
  int64_feature(&f, ints, 4, 0);
  put_entry(&feats, "unpacked", &f);
  float fl[] = {0.5f, -2.25f, 3e7f};
  float_feature(&f, fl, 3, 1);
  put_entry(&feats, "fpacked", &f);
  float_feature(&f, fl, 3, 0);
  put_entry(&feats, "funpacked", &f);
  example_of(&ex, &feats);

  lade__tfrec_feature_t ft;
  const uint8_t *p;
  size_t n;
  CHECK_EQ_INT(lade__tfrec_find(ex.b, ex.n, "image", &ft), 1);
  CHECK_EQ_INT(ft.kind, LADE__TFREC_BYTES);
  CHECK_OK(lade__tfrec_first_bytes(&ft, &p, &n));
  CHECK(n == sizeof img && memcmp(p, img, n) == 0);
  uint64_t size = 0, k = 0;
  CHECK_OK(lade__tfrec_value_size(&ft, &size));
  CHECK_EQ_INT(size, sizeof img);
  for (int packed = 0; packed < 2; packed++) {
    uint8_t v[64];
    CHECK_EQ_INT(lade__tfrec_find(ex.b, ex.n, packed ? "packed" : "unpacked", &ft), 1);
    CHECK_EQ_INT(ft.kind, LADE__TFREC_INT64);
    CHECK_OK(lade__tfrec_numbers(&ft, v, 8, &k));
    CHECK_EQ_INT(k, 4);
    CHECK(memcmp(v, ints, 32) == 0); /* little-endian int64 (x86, arm64) */
    CHECK_OK(lade__tfrec_value_size(&ft, &size));
    CHECK_EQ_INT(size, 32);
    CHECK_EQ_INT(lade__tfrec_find(ex.b, ex.n, packed ? "fpacked" : "funpacked", &ft), 1);
    CHECK_EQ_INT(ft.kind, LADE__TFREC_FLOAT);
    memset(v, 0, sizeof v);
    CHECK_OK(lade__tfrec_numbers(&ft, v, 2, &k)); /* only the first 2 written */
    CHECK_EQ_INT(k, 3);
    CHECK(memcmp(v, fl, 8) == 0 && v[8] == 0);
  }
  CHECK_EQ_INT(lade__tfrec_find(ex.b, ex.n, "absent", &ft), 0);
  CHECK_EQ_INT(lade__tfrec_find(ex.b, ex.n, "imag", &ft), 0);
  CHECK(lade__tfrec_first_bytes(&(lade__tfrec_feature_t){LADE__TFREC_INT64, ft.p, ft.n}, &p, &n) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "not bytes_list") != NULL);
  char names[256];
  CHECK_EQ_INT(lade__tfrec_names(ex.b, ex.n, names, sizeof names), 5);
  CHECK(strcmp(names, "'image', 'packed', 'unpacked', 'fpacked', 'funpacked'") == 0);
  CHECK_EQ_INT(lade__tfrec_names(ex.b, ex.n, names, 20), 5); /* cut */
  CHECK(strlen(names) < 20 && strstr(names, "...") != NULL);
  /* an empty Example, and an empty record */
  CHECK_EQ_INT(lade__tfrec_find((const uint8_t *)"", 0, "image", &ft), 0);
}

/* Unknown fields of every wire type at every level, a group, a key twice
 * (the last wins) and a Feature's kind twice (the last wins). */
static void test_unknown_fields_and_repeats(void) {
  enc_t feats = {.n = 0}, f, ex = {.n = 0}, me = {.n = 0}, l = {.n = 0};
  bytes_feature(&f, "first", 5);
  put_entry(&feats, "image", &f);
  /* an entry with junk around key and value, and a second "image" */
  put_tag(&me, 9, 0), put_varint(&me, 123456789);
  put_len(&me, 1, "image", 5);
  put_tag(&me, 10, 1), put(&me, "12345678", 8);
  put_len(&l, 1, "dropped", 7);
  enc_t feat2 = {.n = 0};
  put_len(&feat2, 1, l.b, l.n); /* a bytes_list ... */
  l.n = 0;
  put_tag(&l, 4, 5), put(&l, "abcd", 4); /* unknown field inside the list */
  put_len(&l, 1, "second", 6);
  put_len(&l, 1, "third", 5);
  put_tag(&feat2, 7, 3); /* a group, with a nested group inside */
  put_tag(&feat2, 1, 0), put_varint(&feat2, 5);
  put_tag(&feat2, 8, 3), put_tag(&feat2, 8, 4);
  put_tag(&feat2, 7, 4);
  put_len(&feat2, 1, l.b, l.n); /* ... given again: the last wins */
  put_len(&me, 2, feat2.b, feat2.n);
  put_tag(&me, 11, 5), put(&me, "wxyz", 4);
  put_len(&feats, 1, me.b, me.n);
  put_tag(&feats, 3, 0), put_varint(&feats, 1);
  put_tag(&ex, 2, 0), put_varint(&ex, UINT64_MAX);
  put_len(&ex, 1, feats.b, feats.n);
  put_len(&ex, 15, "trailing", 8);
  lade__tfrec_feature_t ft;
  const uint8_t *p;
  size_t n;
  CHECK_EQ_INT(lade__tfrec_find(ex.b, ex.n, "image", &ft), 1);
  CHECK_OK(lade__tfrec_first_bytes(&ft, &p, &n));
  CHECK(n == 6 && memcmp(p, "second", 6) == 0);
  /* two Features messages: entries of both are seen */
  enc_t ex2 = {.n = 0}, g = {.n = 0};
  put_len(&ex2, 1, ex.b + 0, 0);
  bytes_feature(&f, "x", 1);
  put_entry(&g, "other", &f);
  put_len(&ex2, 1, g.b, g.n);
  put_len(&ex2, 1, feats.b, feats.n);
  char names[256];
  CHECK_EQ_INT(lade__tfrec_names(ex2.b, ex2.n, names, sizeof names), 3);
  CHECK(strcmp(names, "'other', 'image', 'image'") == 0);
  /* an entry without a value: an empty feature */
  enc_t e3 = {.n = 0}, fs3 = {.n = 0}, me3 = {.n = 0};
  put_len(&me3, 1, "image", 5);
  put_len(&fs3, 1, me3.b, me3.n);
  example_of(&e3, &fs3);
  CHECK_EQ_INT(lade__tfrec_find(e3.b, e3.n, "image", &ft), 1);
  CHECK_EQ_INT(ft.kind, LADE__TFREC_NONE);
  CHECK(lade__tfrec_value_size(&ft, &(uint64_t){0}) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "empty") != NULL);
}

/* Malformed Examples: each an error saying so, never a read past the end
 * (ASan). */
static void test_malformed_examples(void) {
  enc_t feats = {.n = 0}, f, ex;
  bytes_feature(&f, "payload", 7);
  put_entry(&feats, "image", &f);
  example_of(&ex, &feats);
  lade__tfrec_feature_t ft;
  /* every cut of a good Example is an error or a shorter good one, never
   * a crash; the cut inside the feature's bytes is an error */
  int errors = 0;
  for (size_t cut = 0; cut < ex.n; cut++) {
    uint8_t *b = malloc(cut ? cut : 1);
    memcpy(b, ex.b, cut);
    int rc = lade__tfrec_find(b, cut, "image", &ft);
    if (rc < 0) {
      errors++;
      CHECK(strstr(lade_last_error(), "not a tf.train.Example") != NULL);
    }
    CHECK(rc != 1); /* the whole entry is needed to find it */
    free(b);
  }
  CHECK(errors >= (int)ex.n - 2);
  /* a nested length past the end of its message (but inside the record) */
  enc_t bad = {.n = 0}, me = {.n = 0};
  put_len(&me, 1, "image", 5);
  put_tag(&me, 2, 2), put_varint(&me, 64); /* says 64 bytes, 2 follow */
  put(&me, "\x0a\x00", 2);
  enc_t fs = {.n = 0};
  put_len(&fs, 1, me.b, me.n);
  example_of(&bad, &fs);
  put(&bad, "pad pad pad pad pad pad pad pad pad pad pad pad pad pad pad pad pad", 67);
  CHECK(lade__tfrec_find(bad.b, bad.n, "image", &ft) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "a length past the end of its message") != NULL);
  /* varints: 11 bytes, 10 bytes overflowing 64 bits, cut short */
  uint8_t v11[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  CHECK(lade__tfrec_find(v11, sizeof v11, "x", &ft) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "varint longer than 64 bits") != NULL);
  uint8_t v10[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
  CHECK(lade__tfrec_find(v10, sizeof v10, "x", &ft) == LADE_EFORMAT);
  uint8_t vmax[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}; /* UINT64_MAX: fine */
  CHECK_EQ_INT(lade__tfrec_find(vmax, sizeof vmax, "x", &ft), 0);
  uint8_t vcut[] = {0x08, 0xff};
  CHECK(lade__tfrec_find(vcut, sizeof vcut, "x", &ft) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "cut short") != NULL);
  /* field number 0, wire types 6 and 7, a stray end-group, an open group */
  uint8_t f0[] = {0x00, 0x01};
  CHECK(lade__tfrec_find(f0, sizeof f0, "x", &ft) == LADE_EFORMAT);
  uint8_t w6[] = {0x0e};
  CHECK(lade__tfrec_find(w6, sizeof w6, "x", &ft) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "wire type") != NULL);
  uint8_t eg[] = {0x0c};
  CHECK(lade__tfrec_find(eg, sizeof eg, "x", &ft) == LADE_EFORMAT);
  uint8_t og[] = {0x0b, 0x10, 0x01};
  CHECK(lade__tfrec_find(og, sizeof og, "x", &ft) == LADE_EFORMAT);
  uint8_t deep[80]; /* groups nested past the bound */
  for (int i = 0; i < 80; i++) deep[i] = 0x0b;
  CHECK(lade__tfrec_find(deep, sizeof deep, "x", &ft) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "nested too deep") != NULL);
  /* a packed float list of 5 bytes; a packed int64 list with a cut varint */
  enc_t l = {.n = 0}, ff = {.n = 0}, fs2 = {.n = 0}, ex2;
  put_len(&l, 1, "abcde", 5);
  put_len(&ff, 2, l.b, l.n);
  put_entry(&fs2, "w", &ff);
  example_of(&ex2, &fs2);
  CHECK(lade__tfrec_find(ex2.b, ex2.n, "w", &ft) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "multiple of 4") != NULL);
  l.n = ff.n = fs2.n = 0;
  put_len(&l, 1, "\x01\x80", 2);
  put_len(&ff, 3, l.b, l.n);
  put_entry(&fs2, "ids", &ff);
  example_of(&ex2, &fs2);
  CHECK(lade__tfrec_find(ex2.b, ex2.n, "ids", &ft) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "cut short") != NULL);
}

/* ---------------------------------------------------------- record walk */

typedef struct mem {
  const uint8_t *p;
  size_t n;
} mem_t;

static long mem_pread(void *ctx, void *buf, size_t len, uint64_t off) {
  mem_t *m = ctx;
  if (off >= m->n) return 0;
  size_t k = m->n - (size_t)off < len ? m->n - (size_t)off : len;
  memcpy(buf, m->p + off, k);
  return (long)k;
}

static void put_record(enc_t *e, const void *data, size_t n) {
  uint8_t h[12];
  for (int i = 0; i < 8; i++) h[i] = (uint8_t)((uint64_t)n >> (8 * i));
  uint32_t c = lade__tfrec_masked_crc(h, 8);
  for (int i = 0; i < 4; i++) h[8 + i] = (uint8_t)(c >> (8 * i));
  put(e, h, 12);
  put(e, data, n);
  c = lade__tfrec_masked_crc(data, n);
  uint8_t t[4] = {(uint8_t)c, (uint8_t)(c >> 8), (uint8_t)(c >> 16), (uint8_t)(c >> 24)};
  put(e, t, 4);
}

/* Walks buf: the number of records, or the error code. */
static int walk(const uint8_t *p, size_t n, uint64_t *count) {
  mem_t m = {p, n};
  lade__tfrec_reader_t r;
  lade__tfrec_init(&r, mem_pread, &m, n);
  lade__tfrec_record_t rec;
  int rc;
  *count = 0;
  while ((rc = lade__tfrec_next(&r, &rec)) == 1) {
    uint32_t s, c;
    if (lade__tfrec_check(p + rec.data_off, (size_t)rec.len, p + rec.data_off + rec.len, &s, &c) != 0)
      return -1000 - (int)rec.index;
    (*count)++;
  }
  return rc;
}

static void test_record_walk(void) {
  enc_t f = {.n = 0};
  const char *data[] = {"", "a", "hello, records", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"};
  for (int i = 0; i < 4; i++) put_record(&f, data[i], strlen(data[i]));
  uint64_t k;
  CHECK_OK(walk(f.b, f.n, &k));
  CHECK_EQ_INT(k, 4);
  CHECK_OK(walk(f.b, 0, &k)); /* an empty file: no records */
  CHECK_EQ_INT(k, 0);
  uint8_t b[sizeof f.b];
  /* a flipped bit in record 2's length CRC */
  memcpy(b, f.b, f.n);
  size_t r2 = 12 + 0 + 4 + 12 + 1 + 4;
  b[r2 + 9] ^= 4;
  CHECK(walk(b, f.n, &k) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "record 2 (at byte 33): bad length CRC") != NULL);
  /* in its data CRC: the walk is sound, the data check fails */
  memcpy(b, f.b, f.n);
  b[r2 + 12 + 14 + 1] ^= 1;
  CHECK_EQ_INT(walk(b, f.n, &k), -1002);
  /* cut: in the last record's data, in a header, after a header */
  size_t r3 = r2 + 12 + 14 + 4;
  CHECK(walk(f.b, f.n - 5, &k) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "record 3 (at byte 63): its ") != NULL);
  CHECK(strstr(lade_last_error(), " bytes of data and 4-byte CRC run past the end of the file") != NULL);
  CHECK(walk(f.b, r3 + 7, &k) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "truncated: record 3 at byte 63 has 7 of its 12 header bytes") != NULL);
  CHECK(walk(f.b, r3 + 12, &k) == LADE_EFORMAT);
  CHECK(walk(f.b, f.n - 1, &k) == LADE_EFORMAT); /* only the data CRC cut */
  /* a length past the end with a good length CRC, and a huge one */
  enc_t g = {.n = 0};
  put_record(&g, "abc", 3);
  g.b[0] = 200;
  uint32_t c = lade__tfrec_masked_crc(g.b, 8);
  for (int i = 0; i < 4; i++) g.b[8 + i] = (uint8_t)(c >> (8 * i));
  CHECK(walk(g.b, g.n, &k) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "record 0 (at byte 0): its 200 bytes") != NULL);
  memset(g.b, 0xff, 8);
  c = lade__tfrec_masked_crc(g.b, 8);
  for (int i = 0; i < 4; i++) g.b[8 + i] = (uint8_t)(c >> (8 * i));
  CHECK(walk(g.b, g.n, &k) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "18446744073709551615 bytes") != NULL);
}

/* ------------------------------------------------- the source, end to end */

static int open_tfr(lade__source_t *s, struct lade_config *cfg) {
  memset(s, 0, sizeof *s);
  const lade__source_ops_t *ops = NULL;
  int rc = lade__source_select(cfg, &ops);
  if (rc) return rc;
  if (ops != &lade__source_tfrecord) return -100;
  s->ops = ops;
  return ops->open(s, cfg);
}

static void test_source_end_to_end(void) {
  const char *d = lade_test_tmpdir("source");
  char path[512];
  snprintf(path, sizeof path, "%s/data.tfrecord", d);
  enc_t file = {.n = 0};
  uint8_t payload[6][100];
  for (int i = 0; i < 6; i++) {
    for (int j = 0; j < 100; j++) payload[i][j] = (uint8_t)(i * 31 + j * 7);
    enc_t feats = {.n = 0}, f, ex;
    bytes_feature(&f, payload[i], (size_t)(50 + i * 10));
    put_entry(&feats, "image", &f);
    int64_t lab = 5 - i, sz = 50 + i * 10;
    int64_feature(&f, &sz, 1, i % 2);
    put_entry(&feats, "size", &f);
    int64_feature(&f, &lab, 1, 1);
    put_entry(&feats, "label", &f);
    example_of(&ex, &feats);
    put_record(&file, ex.b, ex.n);
  }
  FILE *fp = fopen(path, "wb");
  fwrite(file.b, 1, file.n, fp);
  fclose(fp);

  struct lade_config cfg;
  lade__config_defaults(&cfg);
  snprintf(cfg.source, sizeof cfg.source, "%s", path);
  cfg.transform = LADE__XF_RAW;
  lade__source_t s;
  /* the int64 feature as little-endian int64 */
  snprintf(cfg.tfrecord_feature, sizeof cfg.tfrecord_feature, "size");
  lade__buf_t b = {0};
  CHECK_OK(open_tfr(&s, &cfg));
  if (s.impl) {
    CHECK_OK(s.ops->read(&s, 3, &b));
    int64_t v = 0;
    CHECK(b.len == 8);
    memcpy(&v, b.data, 8);
    CHECK_EQ_INT(v, 80);
    s.ops->close(&s);
  }
  snprintf(cfg.tfrecord_feature, sizeof cfg.tfrecord_feature, "image");
  CHECK_OK(open_tfr(&s, &cfg)); /* indexed again: the stored index was made for "size" */
  if (!s.impl) return;
  CHECK_EQ_INT(s.count, 6);
  CHECK_EQ_INT(s.classes, 6);
  CHECK(s.shard_offsets && s.shards == 1 && s.shard_offsets[1] == 6);
  for (int i = 0; i < 6; i++) {
    CHECK_EQ_INT(s.labels[i], 5 - i);
    CHECK_EQ_INT(s.sizes[i], 50 + i * 10);
    CHECK_OK(s.ops->read(&s, (uint64_t)i, &b));
    CHECK(b.len == (size_t)(50 + i * 10) && memcmp(b.data, payload[i], b.len) == 0);
  }
  char name[600], want[600];
  s.ops->describe(&s, 4, name, sizeof name);
  snprintf(want, sizeof want, "%s: record 4", path);
  CHECK(strcmp(name, want) == 0);
  s.ops->close(&s);

  /* a bit of record 2's data flipped, size and mtime kept: the stored
   * index is taken, and the read of record 2 fails on its CRC */
  struct stat st;
  stat(path, &st);
  size_t at = 0;
  for (int i = 0; i < 2; i++) {
    uint64_t len = 0;
    memcpy(&len, file.b + at, 8);
    at += 12 + (size_t)len + 4;
  }
  file.b[at + 12 + 20] ^= 0x40;
  fp = fopen(path, "r+b");
  fwrite(file.b, 1, file.n, fp);
  fclose(fp);
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  utimensat(AT_FDCWD, path, ts, 0);
  CHECK_OK(open_tfr(&s, &cfg));
  if (s.impl) {
    CHECK_OK(s.ops->read(&s, 1, &b));
    CHECK(s.ops->read(&s, 2, &b) == LADE_EFORMAT);
    CHECK(strstr(lade_last_error(), path) == lade_last_error());
    CHECK(strstr(lade_last_error(), "record 2 (sample 2): bad data CRC") != NULL);
    s.ops->close(&s);
  }
  /* indexed again (another feature): the walk reads the data and fails */
  snprintf(cfg.tfrecord_feature, sizeof cfg.tfrecord_feature, "size");
  CHECK(open_tfr(&s, &cfg) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "record 2 (at byte") != NULL && strstr(lade_last_error(), "bad data CRC") != NULL);
  /* a feature no record has */
  snprintf(cfg.tfrecord_feature, sizeof cfg.tfrecord_feature, "nope");
  CHECK(open_tfr(&s, &cfg) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "record 0 (at byte 0): no feature 'nope' (its 3 features: 'image', 'size', 'label'") !=
        NULL);
  lade__buf_free(&b);
}

/* ------------------------------------------------ gzip and zlib streams */

/* A remote compressed file: refused by the walk before a byte is read
 * (a record is reached only by inflating all before it), with or without
 * zlib. */
static void test_gzip_remote_refused(void) {
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  lade__tar_t t = {.fmt = &lade__tar_fmt_tfrecord, .max_sample = cfg.max_sample_bytes};
  CHECK_OK(t.fmt->open(&t, &cfg));
  lade__tar_index_t x = {0};
  mem_t m = {(const uint8_t *)"", 0};
  const char *url = "https://host/a.tfrecord.gz";
  CHECK(t.fmt->walk(&t, &x, mem_pread, &m, 0, url) == LADE_EUNSUPPORTED);
  CHECK(strstr(lade_last_error(), "https://host/a.tfrecord.gz: gzip-compressed TFRecord: not read remotely") ==
        lade_last_error());
  lade__tar_index_free(&x);
  t.fmt->close(&t);
}

#ifdef LADE_HAVE_ZLIB
#define ZN 48              /* records */
#define ZREC (150u << 10)  /* bytes of each one's data: 7 MB in all, past a cursor's ring (2 MiB) and first points */

typedef struct zdata {
  uint8_t *raw, *z;
  size_t raw_n, z_n;
  uint64_t off[ZN]; /* each record's data offset in raw */
} zdata_t;

/* Records of compressible bytes, and their gzip or zlib stream. */
static void zdata_make(zdata_t *f, int kind) {
  f->raw_n = ZN * (12 + (size_t)ZREC + 4);
  f->raw = malloc(f->raw_n);
  size_t at = 0;
  uint32_t x = 12345;
  for (int i = 0; i < ZN; i++) {
    uint8_t *h = f->raw + at, *d = h + 12;
    for (int k = 0; k < 8; k++) h[k] = (uint8_t)((uint64_t)ZREC >> (8 * k));
    uint32_t c = lade__tfrec_masked_crc(h, 8);
    for (int k = 0; k < 4; k++) h[8 + k] = (uint8_t)(c >> (8 * k));
    for (size_t j = 0; j < ZREC; j++) {
      x = x * 1103515245u + 12345u;
      d[j] = (uint8_t)("tfrecord"[j % 8] + ((x >> 16) & 3));
    }
    c = lade__tfrec_masked_crc(d, ZREC);
    for (int k = 0; k < 4; k++) d[ZREC + k] = (uint8_t)(c >> (8 * k));
    f->off[i] = at + 12;
    at += 12 + ZREC + 4;
  }
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  CHECK(deflateInit2(&zs, 6, Z_DEFLATED, kind == LADE__GZ_GZIP ? 16 + MAX_WBITS : MAX_WBITS, 8,
                     Z_DEFAULT_STRATEGY) == Z_OK);
  f->z_n = deflateBound(&zs, (uLong)f->raw_n);
  f->z = malloc(f->z_n);
  zs.next_in = f->raw;
  zs.avail_in = (uInt)f->raw_n;
  zs.next_out = f->z;
  zs.avail_out = (uInt)f->z_n;
  CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  f->z_n = zs.total_out;
  deflateEnd(&zs);
}

static void zdata_free(zdata_t *f) {
  free(f->raw);
  free(f->z);
}

/* Record i (data and CRC) through the cache, compared with what was written. */
static int zread(lade__gz_cache_t *z, size_t file, int kind, mem_t *m, const zdata_t *f, int i, int *first) {
  uint8_t *buf = malloc(ZREC + 4);
  size_t got = 0;
  int rc = buf ? lade__gz_cache_read(z, file, kind, mem_pread, m, f->off[i], buf, ZREC + 4, &got, first) : -2;
  if (!rc && !(got == ZREC + 4 && memcmp(buf, f->raw + f->off[i], got) == 0)) rc = -1;
  free(buf);
  return rc;
}

typedef struct zjob {
  lade__gz_cache_t *z;
  const zdata_t *f;
  size_t file;
  int bad;
} zjob_t;

static void *zreader(void *arg) {
  zjob_t *j = arg;
  mem_t m = {j->f->z, j->f->z_n};
  int first;
  for (int i = 0; i < ZN; i++)
    if (zread(j->z, j->file, LADE__GZ_GZIP, &m, j->f, i, &first) != 0) j->bad++;
  return NULL;
}

static void test_gzip_streams(void) {
  for (int kind = LADE__GZ_GZIP; kind <= LADE__GZ_ZLIB; kind++) {
    zdata_t f;
    zdata_make(&f, kind);
    mem_t m = {f.z, f.z_n};
    /* the walk: every record, at its offset in the uncompressed bytes */
    lade__gz_walk_t *w = NULL;
    CHECK_OK(lade__gz_walk_open(&w, kind, mem_pread, &m));
    lade__tfrec_reader_t r;
    lade__tfrec_init(&r, lade__gz_walk_pread, w, LADE__TFREC_STREAM);
    lade__tfrec_record_t rec;
    int n = 0, rc;
    while ((rc = lade__tfrec_next(&r, &rec)) == 1) {
      CHECK(n < ZN && rec.data_off == f.off[n] && rec.len == ZREC);
      n++;
    }
    CHECK_OK(rc);
    CHECK_EQ_INT(n, ZN);
    CHECK_EQ_INT(lade__gz_walk_produced(w), f.raw_n);
    lade__gz_walk_close(w);

    /* reads in order: one pass; then behind the ring: from a point */
    lade__gz_cache_t *z = NULL;
    CHECK_OK(lade__gz_cache_create(&z, 10));
    int first = 0;
    uint64_t restarts = 9, resumes = 9;
    for (int i = 0; i < ZN; i++) CHECK_OK(zread(z, 0, kind, &m, &f, i, &first));
    lade__gz_cache_counts(z, &restarts, &resumes);
    CHECK(restarts == 0 && resumes == 0);
    CHECK_OK(zread(z, 0, kind, &m, &f, 20, &first));
    CHECK_OK(zread(z, 0, kind, &m, &f, 21, &first));
    CHECK_OK(zread(z, 0, kind, &m, &f, 46, &first)); /* the first cursor's ring */
    lade__gz_cache_counts(z, &restarts, &resumes);
    CHECK(restarts == 0 && resumes == 1 && first == 0);
    /* eight other files push file 0 out: its next read starts it again */
    for (size_t k = 1; k <= 8; k++) CHECK_OK(zread(z, k, kind, &m, &f, 0, &first));
    CHECK_OK(zread(z, 0, kind, &m, &f, 30, &first));
    CHECK_EQ_INT(first, 1);
    CHECK_OK(zread(z, 0, kind, &m, &f, 10, &first));
    CHECK_EQ_INT(first, 0);
    lade__gz_cache_counts(z, &restarts, &resumes);
    CHECK(restarts == 1 && resumes == 2);
    /* past the stream's end: short */
    uint8_t tail[16];
    size_t got = 99;
    CHECK_OK(lade__gz_cache_read(z, 0, kind, mem_pread, &m, f.raw_n - 2, tail, sizeof tail, &got, &first));
    CHECK(got == 2 && memcmp(tail, f.raw + f.raw_n - 2, 2) == 0);
    /* cut in half: the reads past the cut fail, naming the stream's end */
    mem_t half = {f.z, f.z_n / 2};
    CHECK(zread(z, 9, kind, &half, &f, 2, &first) == 0);
    CHECK(zread(z, 9, kind, &half, &f, ZN - 1, &first) == LADE_EFORMAT);
    CHECK(strstr(lade_last_error(), "stream is cut short") != NULL);
    lade__gz_cache_destroy(z);
    zdata_free(&f);
  }
  /* four threads reading two files in order, at once */
  zdata_t f;
  zdata_make(&f, LADE__GZ_GZIP);
  lade__gz_cache_t *z = NULL;
  CHECK_OK(lade__gz_cache_create(&z, 2));
  pthread_t th[4];
  zjob_t jobs[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (zjob_t){z, &f, (size_t)(i % 2), 0};
    pthread_create(&th[i], NULL, zreader, &jobs[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK_EQ_INT(jobs[i].bad, 0);
  }
  lade__gz_cache_destroy(z);
  /* a flipped byte in the deflate data: an inflate error, or bytes the
   * records' CRCs refuse (the source checks them) - never the same bytes */
  f.z[f.z_n / 3] ^= 0x55;
  CHECK_OK(lade__gz_cache_create(&z, 1));
  mem_t m = {f.z, f.z_n};
  int first, bad = 0;
  for (int i = 0; i < ZN && !bad; i++) bad = zread(z, 0, LADE__GZ_GZIP, &m, &f, i, &first) != 0;
  CHECK(bad);
  lade__gz_cache_destroy(z);
  zdata_free(&f);
}

/* A gzip file through the source: bytes, labels, the stored index's magic,
 * and a file cut short failing at open, naming the file. */
static void test_gzip_source(void) {
  const char *d = lade_test_tmpdir("gzsource");
  char path[512];
  snprintf(path, sizeof path, "%s/data.tfrecord.gz", d);
  enc_t file = {.n = 0};
  uint8_t payload[6][100];
  for (int i = 0; i < 6; i++) {
    for (int j = 0; j < 100; j++) payload[i][j] = (uint8_t)(i * 17 + j * 3);
    enc_t feats = {.n = 0}, f, ex;
    bytes_feature(&f, payload[i], (size_t)(40 + i * 10));
    put_entry(&feats, "image", &f);
    int64_t lab = i % 3;
    int64_feature(&f, &lab, 1, 1);
    put_entry(&feats, "label", &f);
    example_of(&ex, &feats);
    put_record(&file, ex.b, ex.n);
  }
  uint8_t gz[8192 + 64];
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  CHECK(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  zs.next_in = file.b;
  zs.avail_in = (uInt)file.n;
  zs.next_out = gz;
  zs.avail_out = sizeof gz;
  CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  size_t gz_n = zs.total_out;
  deflateEnd(&zs);
  FILE *fp = fopen(path, "wb");
  fwrite(gz, 1, gz_n, fp);
  fclose(fp);

  struct lade_config cfg;
  lade__config_defaults(&cfg);
  snprintf(cfg.source, sizeof cfg.source, "%s", path);
  cfg.transform = LADE__XF_RAW;
  lade__source_t s;
  lade__buf_t b = {0};
  for (int pass = 0; pass < 2; pass++) { /* indexed, then from the stored index */
    CHECK_OK(open_tfr(&s, &cfg));
    if (!s.impl) break;
    CHECK_EQ_INT(s.count, 6);
    CHECK_EQ_INT(s.classes, 3);
    const int order[] = {5, 0, 3, 1, 4, 2};
    for (int k = 0; k < 6; k++) {
      int i = order[k];
      CHECK_EQ_INT(s.labels[i], i % 3);
      CHECK_OK(s.ops->read(&s, (uint64_t)i, &b));
      CHECK(b.len == (size_t)(40 + i * 10) && memcmp(b.data, payload[i], b.len) == 0);
    }
    s.ops->close(&s);
    char ipath[600], magic[9] = "";
    snprintf(ipath, sizeof ipath, "%s.ladeidx", path);
    fp = fopen(ipath, "rb");
    CHECK(fp != NULL);
    if (fp) {
      CHECK(fread(magic, 1, 8, fp) == 8);
      fclose(fp);
    }
    CHECK(strcmp(magic, "LADETFG1") == 0);
  }
  /* cut short (a new size: indexed again) */
  fp = fopen(path, "wb");
  fwrite(gz, 1, gz_n - 20, fp);
  fclose(fp);
  CHECK(open_tfr(&s, &cfg) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), path) == lade_last_error());
  CHECK(strstr(lade_last_error(), "cut short") != NULL);
  lade__buf_free(&b);
}
#else
static void test_gzip_streams(void) {
  lade__gz_cache_t *z = NULL;
  CHECK(lade__gz_cache_create(&z, 1) == LADE_EUNSUPPORTED);
  CHECK(strstr(lade_last_error(), "without zlib") != NULL);
}

/* Refused at open, naming the file (the walk stops before reading it). */
static void test_gzip_source(void) {
  const char *d = lade_test_tmpdir("gzsource");
  char path[512];
  snprintf(path, sizeof path, "%s/data.tfrecord.gz", d);
  FILE *fp = fopen(path, "wb");
  fwrite("\x1f\x8b\x08\x00", 1, 4, fp);
  fclose(fp);
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  snprintf(cfg.source, sizeof cfg.source, "%s", path);
  cfg.transform = LADE__XF_RAW;
  lade__source_t s;
  CHECK(open_tfr(&s, &cfg) == LADE_EUNSUPPORTED);
  CHECK(strstr(lade_last_error(), path) == lade_last_error());
  CHECK(strstr(lade_last_error(), "gzip-compressed TFRecord: lade was built without zlib") != NULL);
}
#endif

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_crc32c_vectors);
  RUN(test_masked_crc);
  RUN(test_example_decoding);
  RUN(test_unknown_fields_and_repeats);
  RUN(test_malformed_examples);
  RUN(test_record_walk);
  RUN(test_source_end_to_end);
  RUN(test_gzip_remote_refused);
  RUN(test_gzip_streams);
  RUN(test_gzip_source);
  return lade_test_finish();
}
