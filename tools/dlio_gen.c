/* dlio_gen.c - `lade dlio datagen`: the files DLIO's generators write
 * (data_generator/npz_generator.py, tf_generator.py), with the same names
 * and the same record shapes, so that `lade dlio run` and DLIO itself read
 * the same bytes per sample.
 *
 * Shapes come from numpy's legacy RandomState, reproduced bit for bit here
 * (MT19937 seeded as np.random.seed(10), the polar-method gauss with its
 * cached second value): DLIO draws every file's dims from it, and the dims
 * decide the bytes a reader moves. Contents are not DLIO's (its uint8
 * values come from a generator that depends on the rank count, or from an
 * unseeded one on HEAD); ours are a fast xorshift64* stream keyed by
 * (seed, file), values 0..254 as np.random.randint(255) gives.
 *
 * Files are streamed through one 4 MiB buffer, never held whole (a unet3d
 * file is ~140 MB, a member can pass 4 GiB): the npz member's CRC-32 is
 * patched into its local header once the member is written, a TFRecord's
 * CRC-32C runs over the chunks as they go out. Every file is written as
 * NAME.tmp and renamed, so an interrupted datagen never leaves a short file
 * under the real name.
 *
 * Bit-exactness note: dlio_mt_normal computes loc + scale * gauss as numpy
 * does, without a fused multiply-add; x86-64 builds without -mfma never
 * contract it. */
#include "dlio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lade/lade.h>

#define OUT_BUF (4u << 20)
#define ZIP_MAX32 0xFFFFFFFFu

/* ------------------------------------------------------------ numpy's RNG */

#define MT_N 624
#define MT_M 397

void dlio_mt_seed(dlio_mt_t *m, uint32_t seed) {
  m->mt[0] = seed;
  for (uint32_t i = 1; i < MT_N; i++) m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) + i;
  m->mti = MT_N;
  m->has_gauss = 0;
  m->gauss = 0.0;
}

static uint32_t mt_twist(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t y = (a & 0x80000000u) | (b & 0x7fffffffu);
  return c ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
}

static void mt_refill(dlio_mt_t *m) {
  int k = 0;
  for (; k < MT_N - MT_M; k++) m->mt[k] = mt_twist(m->mt[k], m->mt[k + 1], m->mt[k + MT_M]);
  for (; k < MT_N - 1; k++) m->mt[k] = mt_twist(m->mt[k], m->mt[k + 1], m->mt[k + MT_M - MT_N]);
  m->mt[MT_N - 1] = mt_twist(m->mt[MT_N - 1], m->mt[0], m->mt[MT_M - 1]);
  m->mti = 0;
}

uint32_t dlio_mt_u32(dlio_mt_t *m) {
  if (m->mti >= MT_N) mt_refill(m);
  uint32_t y = m->mt[m->mti++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

double dlio_mt_double(dlio_mt_t *m) {
  uint32_t a = dlio_mt_u32(m) >> 5, b = dlio_mt_u32(m) >> 6;
  return ((double)a * 67108864.0 + (double)b) / 9007199254740992.0;
}

/* numpy's legacy_gauss: two values per accepted pair, the second cached. */
static double mt_gauss(dlio_mt_t *m) {
  if (m->has_gauss) {
    m->has_gauss = 0;
    return m->gauss;
  }
  double x1, x2, r2;
  do {
    x1 = 2.0 * dlio_mt_double(m) - 1.0;
    x2 = 2.0 * dlio_mt_double(m) - 1.0;
    r2 = x1 * x1 + x2 * x2;
  } while (r2 >= 1.0 || r2 == 0.0);
  double f = sqrt(-2.0 * log(r2) / r2);
  m->gauss = f * x1;
  m->has_gauss = 1;
  return f * x2;
}

double dlio_mt_normal(dlio_mt_t *m, double loc, double scale) {
  double g = mt_gauss(m);
  double s = scale * g; /* a separate rounding, as numpy's */
  return loc + s;
}

int64_t *dlio_dims(const dlio_cfg_t *c, uint64_t files) {
  if (files > (SIZE_MAX / sizeof(int64_t) - 1) / 2) return NULL;
  size_t n = (size_t)(2 * files);
  int64_t *dims = malloc((n ? n : 1) * sizeof *dims);
  if (!dims) return NULL;
  double root = c->record_length > 0 ? sqrt(c->record_length) : 0.0;
  int64_t dimension = (int64_t)root;
  double stdev = root > 0 ? c->record_length_stdev / 2.0 / root : 0.0;
  if (stdev > 0) {
    dlio_mt_t m;
    dlio_mt_seed(&m, 10);
    for (size_t k = 0; k < n; k++) {
      int64_t d = (int64_t)dlio_mt_normal(&m, (double)dimension, stdev);
      dims[k] = d > 1 ? d : 1;
    }
  } else {
    for (size_t k = 0; k < n; k++) dims[k] = dimension;
  }
  return dims;
}

/* ------------------------------------------------------------ checksums */

/* zip's CRC-32 (reflected 0xEDB88320), slicing-by-8: the npz members are
 * hundreds of MB, a byte-at-a-time table would cost more than the write. */
static uint32_t g_crc_tab[8][256];

static void crc32_init(void) {
  if (g_crc_tab[0][1]) return;
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    g_crc_tab[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int k = 1; k < 8; k++) g_crc_tab[k][i] = (g_crc_tab[k - 1][i] >> 8) ^ g_crc_tab[0][g_crc_tab[k - 1][i] & 0xffu];
}

static uint32_t zip_crc32(const void *data, size_t n, uint32_t crc) {
  const uint8_t *p = data;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    c = g_crc_tab[7][lo & 0xff] ^ g_crc_tab[6][(lo >> 8) & 0xff] ^ g_crc_tab[5][(lo >> 16) & 0xff] ^
        g_crc_tab[4][lo >> 24] ^ g_crc_tab[3][hi & 0xff] ^ g_crc_tab[2][(hi >> 8) & 0xff] ^
        g_crc_tab[1][(hi >> 16) & 0xff] ^ g_crc_tab[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = g_crc_tab[0][(c ^ *p++) & 0xffu] ^ (c >> 8);
  return ~c;
}

static uint32_t tfrec_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ------------------------------------------------------------ random bytes */

/* Four xorshift64* lanes (independent chains, so the CPU overlaps them). */
typedef struct fill_rng {
  uint64_t s[4];
} fill_rng_t;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void fill_rng_init(fill_rng_t *r, uint64_t seed, uint64_t file, uint64_t record) {
  uint64_t x = seed;
  x = splitmix64(&x) ^ file;
  x = splitmix64(&x) ^ record;
  for (int k = 0; k < 4; k++) {
    r->s[k] = splitmix64(&x);
    if (!r->s[k]) r->s[k] = 0x2545F4914F6CDD1Dull;
  }
}

static uint64_t xs64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Every 0xFF byte of w becomes 0x00 (exact, no carries across bytes). */
static uint64_t no_ff(uint64_t w) {
  const uint64_t lo7 = 0x7F7F7F7F7F7F7F7Full;
  uint64_t t = ~w;
  uint64_t z = ~(((t & lo7) + lo7) | t | lo7); /* 0x80 where t's byte is 0 */
  return w & ~((z >> 7) * 0xFFu);
}

static void fill_random(fill_rng_t *r, uint8_t *p, size_t n) {
  for (; n >= 32; p += 32, n -= 32) {
    uint64_t w[4] = {no_ff(xs64(&r->s[0])), no_ff(xs64(&r->s[1])), no_ff(xs64(&r->s[2])), no_ff(xs64(&r->s[3]))};
    memcpy(p, w, 32);
  }
  while (n) {
    uint64_t w = no_ff(xs64(&r->s[0]));
    size_t k = n < 8 ? n : 8;
    memcpy(p, &w, k);
    p += k;
    n -= k;
  }
}

/* ------------------------------------------------------------ buffered output */

typedef uint32_t (*crc_fn_t)(const void *data, size_t n, uint32_t crc);

typedef struct gen_out {
  int fd;
  const char *path; /* the .tmp name, for messages */
  uint8_t *buf;
  size_t len;
  uint64_t flushed;  /* bytes already handed to write() */
  crc_fn_t crc_fn;   /* non-NULL: a running CRC of what is put */
  uint32_t crc;
  char *err;
  size_t errlen;
} gen_out_t;

static uint64_t out_pos(const gen_out_t *o) { return o->flushed + o->len; }

static int out_flush(gen_out_t *o) {
  size_t done = 0;
  while (done < o->len) {
    ssize_t w = write(o->fd, o->buf + done, o->len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(o->err, o->errlen, "datagen: %s: write failed: %s", o->path, w < 0 ? strerror(errno) : "no progress");
      return -1;
    }
    done += (size_t)w;
  }
  o->flushed += o->len;
  o->len = 0;
  return 0;
}

/* Room for up to `want` bytes at the end of the buffer (at least 1). */
static uint8_t *out_room(gen_out_t *o, size_t want, size_t *got) {
  if (o->len == OUT_BUF && out_flush(o) != 0) return NULL;
  size_t room = OUT_BUF - o->len;
  *got = want < room ? want : room;
  return o->buf + o->len;
}

static void out_commit(gen_out_t *o, size_t n) {
  if (o->crc_fn) o->crc = o->crc_fn(o->buf + o->len, n, o->crc);
  o->len += n;
}

static int out_put(gen_out_t *o, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n) {
    size_t k;
    uint8_t *dst = out_room(o, n, &k);
    if (!dst) return -1;
    memcpy(dst, p, k);
    out_commit(o, k);
    p += k;
    n -= k;
  }
  return 0;
}

static int out_random(gen_out_t *o, fill_rng_t *r, uint64_t n) {
  while (n) {
    size_t k;
    uint8_t *dst = out_room(o, n > OUT_BUF ? OUT_BUF : (size_t)n, &k);
    if (!dst) return -1;
    fill_random(r, dst, k);
    out_commit(o, k);
    n -= k;
  }
  return 0;
}

static int out_zeros(gen_out_t *o, uint64_t n) {
  while (n) {
    size_t k;
    uint8_t *dst = out_room(o, n > OUT_BUF ? OUT_BUF : (size_t)n, &k);
    if (!dst) return -1;
    memset(dst, 0, k);
    out_commit(o, k);
    n -= k;
  }
  return 0;
}

/* Overwrites n bytes at file offset off, flushed already or still buffered. */
static int out_patch(gen_out_t *o, uint64_t off, const uint8_t *p, size_t n) {
  for (; n && off < o->flushed; off++, p++, n--) {
    if (pwrite(o->fd, p, 1, (off_t)off) != 1) {
      snprintf(o->err, o->errlen, "datagen: %s: pwrite failed: %s", o->path, strerror(errno));
      return -1;
    }
  }
  if (n) memcpy(o->buf + (off - o->flushed), p, n);
  return 0;
}

static void crc_begin(gen_out_t *o, crc_fn_t fn) {
  o->crc_fn = fn;
  o->crc = 0;
}

static uint32_t crc_end(gen_out_t *o) {
  o->crc_fn = NULL;
  return o->crc;
}

/* ------------------------------------------------------------ npz */

static void le16(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void le32(uint8_t *p, uint32_t v) {
  le16(p, v & 0xffffu);
  le16(p + 2, v >> 16);
}
static void le64(uint8_t *p, uint64_t v) {
  le32(p, (uint32_t)v);
  le32(p + 4, (uint32_t)(v >> 32));
}

#ifdef DLIO_GEN_TESTING
static bool g_force_zip64;
/* tests/tools/dlio_gen_check.c: every npz written with zip64 fields and end
 * records, as if each member passed 4 GiB. */
void dlio_gen_force_zip64(bool on);
void dlio_gen_force_zip64(bool on) { g_force_zip64 = on; }
#else
static const bool g_force_zip64 = false;
#endif

/* numpy 1.24's format 1.0 header of a C-order array: the dict, 21 minus the
 * digits of shape[0] spaces (room to grow that axis in place), then spaces
 * and '\n' to a multiple of 64 bytes in all (64 more when already one). */
static size_t npy_header(uint8_t *buf, const char *descr, const uint64_t *shape, int ndim) {
  char dict[256], sh[128] = "";
  int n = 0;
  for (int k = 0; k < ndim; k++)
    n += snprintf(sh + n, sizeof sh - (size_t)n, "%s%" PRIu64, k ? ", " : "", shape[k]);
  if (ndim == 1) snprintf(sh + n, sizeof sh - (size_t)n, ",");
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh);
  char d0[32];
  int grow = 21 - snprintf(d0, sizeof d0, "%" PRIu64, ndim ? shape[0] : 0);
  if (ndim == 0 || grow < 0) grow = 0;
  size_t hlen = (size_t)len + (size_t)grow + 1;
  size_t pad = 64 - (10 + hlen) % 64;
  size_t total = 10 + hlen + pad;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  le16(buf + 8, (uint32_t)(hlen + pad));
  memcpy(buf + 10, dict, (size_t)len);
  memset(buf + 10 + len, ' ', (size_t)grow + pad);
  buf[total - 1] = '\n';
  return total;
}

typedef struct zip_member {
  const char *name;
  uint64_t off, size; /* local header offset, stored (= uncompressed) size */
  uint32_t crc;
  bool zip64;         /* sizes in a zip64 extra field */
} zip_member_t;

#define DOS_DATE_1980 0x0021u /* 1980-01-01, time 00:00 */

static int zip_local_header(gen_out_t *o, zip_member_t *m) {
  uint8_t h[30 + 16 + 20];
  size_t nlen = strlen(m->name), xlen = m->zip64 ? 20 : 0;
  m->off = out_pos(o);
  le32(h, 0x04034b50u);
  le16(h + 4, m->zip64 ? 45 : 20);
  le16(h + 6, 0);
  le16(h + 8, 0); /* stored */
  le16(h + 10, 0);
  le16(h + 12, DOS_DATE_1980);
  le32(h + 14, 0); /* CRC: patched by zip_member_end */
  le32(h + 18, m->zip64 ? ZIP_MAX32 : (uint32_t)m->size);
  le32(h + 22, m->zip64 ? ZIP_MAX32 : (uint32_t)m->size);
  le16(h + 26, (uint32_t)nlen);
  le16(h + 28, (uint32_t)xlen);
  memcpy(h + 30, m->name, nlen);
  if (m->zip64) {
    uint8_t *x = h + 30 + nlen;
    le16(x, 0x0001);
    le16(x + 2, 16);
    le64(x + 4, m->size); /* uncompressed, then compressed */
    le64(x + 12, m->size);
  }
  return out_put(o, h, 30 + nlen + xlen);
}

static int zip_member_end(gen_out_t *o, zip_member_t *m) {
  uint8_t c[4];
  m->crc = crc_end(o);
  le32(c, m->crc);
  return out_patch(o, m->off + 14, c, 4);
}

static int zip_central_entry(gen_out_t *o, const zip_member_t *m) {
  uint8_t h[46 + 16 + 28];
  size_t nlen = strlen(m->name);
  bool big_off = g_force_zip64 || m->off >= ZIP_MAX32;
  size_t xdata = (m->zip64 ? 16u : 0u) + (big_off ? 8u : 0u);
  size_t xlen = xdata ? 4 + xdata : 0;
  bool v45 = xlen != 0;
  le32(h, 0x02014b50u);
  le16(h + 4, 0x0300u | (v45 ? 45 : 20)); /* made by: unix */
  le16(h + 6, v45 ? 45 : 20);
  le16(h + 8, 0);
  le16(h + 10, 0);
  le16(h + 12, 0);
  le16(h + 14, DOS_DATE_1980);
  le32(h + 16, m->crc);
  le32(h + 20, m->zip64 ? ZIP_MAX32 : (uint32_t)m->size);
  le32(h + 24, m->zip64 ? ZIP_MAX32 : (uint32_t)m->size);
  le16(h + 28, (uint32_t)nlen);
  le16(h + 30, (uint32_t)xlen);
  le16(h + 32, 0);                /* comment */
  le16(h + 34, 0);                /* disk */
  le16(h + 36, 0);                /* internal attributes */
  le32(h + 38, 0100644u << 16);   /* a regular file, rw-r--r-- */
  le32(h + 42, big_off ? ZIP_MAX32 : (uint32_t)m->off);
  memcpy(h + 46, m->name, nlen);
  uint8_t *x = h + 46 + nlen;
  if (xlen) {
    /* zip64 fields in APPNOTE's order, only those whose header field is 0xFFFFFFFF */
    le16(x, 0x0001);
    le16(x + 2, (uint32_t)xdata);
    x += 4;
    if (m->zip64) {
      le64(x, m->size);
      le64(x + 8, m->size);
      x += 16;
    }
    if (big_off) le64(x, m->off);
  }
  return out_put(o, h, 46 + nlen + xlen);
}

static int zip_end(gen_out_t *o, uint64_t cd_off, uint64_t nmembers) {
  uint64_t cd_len = out_pos(o) - cd_off;
  bool z64 = g_force_zip64 || cd_off >= ZIP_MAX32 || cd_len >= ZIP_MAX32;
  uint8_t e[56 + 20 + 22];
  size_t n = 0;
  if (z64) {
    uint64_t rec = out_pos(o);
    le32(e, 0x06064b50u);
    le64(e + 4, 44); /* the record's size after this field */
    le16(e + 12, 0x0300u | 45);
    le16(e + 14, 45);
    le32(e + 16, 0);
    le32(e + 20, 0);
    le64(e + 24, nmembers);
    le64(e + 32, nmembers);
    le64(e + 40, cd_len);
    le64(e + 48, cd_off);
    le32(e + 56, 0x07064b50u); /* the locator */
    le32(e + 60, 0);
    le64(e + 64, rec);
    le32(e + 72, 1);
    n = 76;
  }
  le32(e + n, 0x06054b50u);
  le16(e + n + 4, 0);
  le16(e + n + 6, 0);
  le16(e + n + 8, (uint32_t)nmembers);
  le16(e + n + 10, (uint32_t)nmembers);
  le32(e + n + 12, cd_len >= ZIP_MAX32 ? ZIP_MAX32 : (uint32_t)cd_len);
  le32(e + n + 16, z64 ? ZIP_MAX32 : (uint32_t)cd_off);
  le16(e + n + 20, 0);
  return out_put(o, e, n + 22);
}

/* np.savez(out, x=records, y=[0] * n): x is (d1, d2, n) uint8, the sample
 * on the last axis; its bytes are random, so they go out in file order. */
static int write_npz(gen_out_t *o, const dlio_cfg_t *c, uint64_t file, uint64_t d1, uint64_t d2) {
  uint64_t n = c->num_samples_per_file;
  uint8_t hx[512], hy[512];
  uint64_t shape_x[3] = {d1, d2, n};
  size_t lx = npy_header(hx, "|u1", shape_x, 3), ly = npy_header(hy, "<i8", &n, 1);
  zip_member_t x = {.name = "x.npy", .size = lx + d1 * d2 * n};
  zip_member_t y = {.name = "y.npy", .size = ly + 8 * n};
  x.zip64 = g_force_zip64 || x.size >= ZIP_MAX32;
  y.zip64 = g_force_zip64 || y.size >= ZIP_MAX32;
  fill_rng_t r;
  fill_rng_init(&r, c->seed, file, 0);
  if (zip_local_header(o, &x) != 0) return -1;
  crc_begin(o, zip_crc32);
  if (out_put(o, hx, lx) != 0 || out_random(o, &r, d1 * d2 * n) != 0 || zip_member_end(o, &x) != 0) return -1;
  if (zip_local_header(o, &y) != 0) return -1;
  crc_begin(o, zip_crc32);
  if (out_put(o, hy, ly) != 0 || out_zeros(o, 8 * n) != 0 || zip_member_end(o, &y) != 0) return -1;
  uint64_t cd_off = out_pos(o);
  if (zip_central_entry(o, &x) != 0 || zip_central_entry(o, &y) != 0) return -1;
  return zip_end(o, cd_off, 2);
}

/* ------------------------------------------------------------ tfrecord */

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* A length-delimited field's tag and length. */
static size_t put_len_field(uint8_t *p, uint32_t field, uint64_t len) {
  p[0] = (uint8_t)(field << 3 | 2);
  return 1 + put_varint(p + 1, len);
}

static size_t len_field_size(uint64_t len) { return 1 + varint_len(len) + len; }

/* The serialized tf.train.Example {image: bytes_list [N bytes], size:
 * int64_list [N]} around its N image bytes: pre (everything before them)
 * and post (the size entry after them). Returns the whole length. */
static uint64_t example_frame(uint64_t nbytes, uint8_t *pre, size_t *npre, uint8_t *post, size_t *npost) {
  uint64_t bytes_list = len_field_size(nbytes);            /* BytesList{1: image} */
  uint64_t feat_img = len_field_size(bytes_list);          /* Feature{1: bytes_list} */
  uint64_t entry_img = len_field_size(5) + len_field_size(feat_img);
  uint64_t int64_list = len_field_size(varint_len(nbytes)); /* Int64List{1: packed [N]} */
  uint64_t feat_size = len_field_size(int64_list);         /* Feature{3: int64_list} */
  uint64_t entry_size = len_field_size(4) + len_field_size(feat_size);
  uint64_t features = len_field_size(entry_img) + len_field_size(entry_size);
  size_t k = put_len_field(pre, 1, features);              /* Example{1: features} */
  k += put_len_field(pre + k, 1, entry_img);               /* Features{1: entry} */
  k += put_len_field(pre + k, 1, 5);
  memcpy(pre + k, "image", 5);
  k += 5;
  k += put_len_field(pre + k, 2, feat_img);
  k += put_len_field(pre + k, 1, bytes_list);
  k += put_len_field(pre + k, 1, nbytes);
  *npre = k;
  k = put_len_field(post, 1, entry_size);
  k += put_len_field(post + k, 1, 4);
  memcpy(post + k, "size", 4);
  k += 4;
  k += put_len_field(post + k, 2, feat_size);
  post[k++] = 3 << 3 | 2;
  k += put_varint(post + k, int64_list);
  k += put_len_field(post + k, 1, varint_len(nbytes));
  k += put_varint(post + k, nbytes);
  *npost = k;
  return len_field_size(features);
}

static uint32_t crc32c_fn(const void *data, size_t n, uint32_t crc) { return lade_crc32c(data, n, crc); }

/* TFRecordWriter's framing around each of the file's Examples; every
 * record gets fresh random image bytes of the file's dims. */
static int write_tfrecord(gen_out_t *o, const dlio_cfg_t *c, uint64_t file, uint64_t d1, uint64_t d2) {
  uint8_t pre[96], post[96], head[12], tail[4];
  size_t npre, npost;
  uint64_t nbytes = d1 * d2;
  uint64_t len = example_frame(nbytes, pre, &npre, post, &npost);
  le64(head, len);
  le32(head + 8, tfrec_mask(lade_crc32c(head, 8, 0)));
  for (uint64_t rec = 0; rec < c->num_samples_per_file; rec++) {
    fill_rng_t r;
    fill_rng_init(&r, c->seed, file, rec + 1);
    if (out_put(o, head, sizeof head) != 0) return -1;
    crc_begin(o, crc32c_fn);
    if (out_put(o, pre, npre) != 0 || out_random(o, &r, nbytes) != 0 || out_put(o, post, npost) != 0) return -1;
    le32(tail, tfrec_mask(crc_end(o)));
    if (out_put(o, tail, sizeof tail) != 0) return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ files and folders */

static int mkdir_p(const char *path, char *err, size_t errlen) {
  char tmp[DLIO_PATH];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
    snprintf(err, errlen, "datagen: %s: path too long", path);
    return -1;
  }
  for (char *p = tmp + 1;; p++) {
    if (*p && *p != '/') continue;
    char was = *p;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
      snprintf(err, errlen, "datagen: cannot create folder %s: %s", tmp, strerror(errno));
      return -1;
    }
    if (!was) return 0;
    *p = '/';
  }
}

static int mkdir_parent(const char *path, char *err, size_t errlen) {
  char dir[DLIO_PATH];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0;
  *slash = '\0';
  return mkdir_p(dir, err, errlen);
}

/* DLIO's rank 0 part: data_folder, train/, valid/ and the zero-padded
 * subfolders (add_padding(k, len(str(num_subfolders)))). */
static int make_folders(const dlio_cfg_t *c, char *err, size_t errlen) {
  const char *split[2] = {"train", "valid"};
  uint64_t subs[2] = {c->num_subfolders_train, c->num_subfolders_eval};
  char path[DLIO_PATH + 64];
  if (mkdir_p(c->data_folder, err, errlen) != 0) return -1;
  for (int s = 0; s < 2; s++) {
    snprintf(path, sizeof path, "%s/%s", c->data_folder, split[s]);
    if (mkdir_p(path, err, errlen) != 0) return -1;
    if (subs[s] <= 1) continue;
    int digits = snprintf(NULL, 0, "%" PRIu64, subs[s]);
    for (uint64_t k = 0; k < subs[s]; k++) {
      snprintf(path, sizeof path, "%s/%s/%0*" PRIu64, c->data_folder, split[s], digits, k);
      if (mkdir_p(path, err, errlen) != 0) return -1;
    }
  }
  return 0;
}

/* A TFRecord file's sidecar index, NAME.ladeidx (docs/sources.md, "Sidecar
 * indexes"): lade's reader of these files in a bucket (or behind a web
 * server) fetches it instead of reading each file whole at open. DLIO's own
 * reader lists only names ending in the format, so it never sees it. The
 * settings are the ones `lade dlio run` reads the files with. */
static int write_sidecar(const char *name, char *err, size_t errlen) {
  lade_config_t *cfg = NULL;
  int rc = lade_config_create(&cfg) || lade_config_set(cfg, "source_type", "tfrecord") ||
           lade_shard_index_write(cfg, name);
  if (rc) snprintf(err, errlen, "datagen: %s: its sidecar index: %s", name, lade_last_error());
  lade_config_destroy(cfg);
  return rc ? -1 : 0;
}

/* One file, as NAME.tmp renamed to NAME once whole. */
static int write_file(const dlio_cfg_t *c, const char *name, uint64_t file, uint64_t d1, uint64_t d2, uint8_t *buf,
                      uint64_t *bytes, char *err, size_t errlen) {
  char tmp[DLIO_PATH + 8];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", name) >= (int)sizeof tmp) {
    snprintf(err, errlen, "datagen: %s: path too long", name);
    return -1;
  }
  if (mkdir_parent(name, err, errlen) != 0) return -1;
  gen_out_t o = {.path = tmp, .buf = buf, .err = err, .errlen = errlen};
  o.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (o.fd < 0) {
    snprintf(err, errlen, "datagen: cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
  int rc = c->format == DLIO_FMT_NPZ ? write_npz(&o, c, file, d1, d2) : write_tfrecord(&o, c, file, d1, d2);
  if (rc == 0) rc = out_flush(&o);
  if (close(o.fd) != 0 && rc == 0) {
    snprintf(err, errlen, "datagen: %s: close failed: %s", tmp, strerror(errno));
    rc = -1;
  }
  if (rc == 0 && rename(tmp, name) != 0) {
    snprintf(err, errlen, "datagen: cannot rename %s to %s: %s", tmp, name, strerror(errno));
    rc = -1;
  }
  if (rc != 0) {
    unlink(tmp);
    return -1;
  }
  *bytes += out_pos(&o);
  return c->format == DLIO_FMT_TFRECORD ? write_sidecar(name, err, errlen) : 0;
}

/* The sizes that would overflow 64 bits (or a write) are refused up front. */
static int check_dims(const dlio_cfg_t *c, const char *name, uint64_t d1, uint64_t d2, char *err, size_t errlen) {
  uint64_t px, all;
  if (__builtin_mul_overflow(d1, d2, &px) || __builtin_mul_overflow(px, c->num_samples_per_file, &all) ||
      all > (UINT64_MAX >> 2)) {
    snprintf(err, errlen, "datagen: %s: %" PRIu64 " x %" PRIu64 " x %" PRIu64 " samples is too large", name, d1, d2,
             c->num_samples_per_file);
    return -1;
  }
  return 0;
}

static bool remote_folder(const char *f) {
  return !strncmp(f, "s3://", 5) || !strncmp(f, "http://", 7) || !strncmp(f, "https://", 8);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check_cfg(const dlio_cfg_t *c, uint32_t rank, uint32_t world, char *err, size_t errlen) {
  if (world == 0 || rank >= world) {
    snprintf(err, errlen, "datagen: rank %" PRIu32 " of %" PRIu32 " ranks is not a rank", rank, world);
    return -1;
  }
  if (remote_folder(c->data_folder)) {
    snprintf(err, errlen,
             "datagen: data_folder %s: datagen writes local folders only; generate into a local folder and "
             "upload it with your tool (e.g. aws s3 sync)",
             c->data_folder);
    return -1;
  }
  if (!c->data_folder[0]) {
    snprintf(err, errlen, "datagen: dataset.data_folder is empty");
    return -1;
  }
  if (c->format != DLIO_FMT_NPZ && c->format != DLIO_FMT_TFRECORD) {
    snprintf(err, errlen, "datagen: format %d: only npz and tfrecord are generated", c->format);
    return -1;
  }
  return 0;
}

int dlio_datagen(const dlio_cfg_t *c, uint32_t rank, uint32_t world, char *err, size_t errlen) {
  if (check_cfg(c, rank, world, err, errlen) != 0) return -1;
  if (rank == 0 && c->compression[0] && strcmp(c->compression, "none") != 0)
    fprintf(stderr, "datagen: note: compression %s is ignored; DLIO's generators write uncompressed files too\n",
            c->compression);
  if (rank == 0 && make_folders(c, err, errlen) != 0) return -1;
  uint64_t total = c->num_files_train + c->num_files_eval;
  uint64_t mine = total > rank ? (total - rank - 1) / world + 1 : 0;
  int64_t *dims = dlio_dims(c, total);
  uint8_t *buf = malloc(OUT_BUF);
  if (!dims || !buf) {
    snprintf(err, errlen, "datagen: out of memory for %" PRIu64 " files", total);
    free(dims);
    free(buf);
    return -1;
  }
  crc32_init();
  double t0 = now_s();
  uint64_t done = 0, bytes = 0;
  int rc = 0;
  for (uint64_t i = rank; i < total && rc == 0; i += world) {
    char name[DLIO_PATH];
    bool eval = i >= c->num_files_train;
    dlio_file_name(c, eval, eval ? i - c->num_files_train : i, name, sizeof name);
    uint64_t d1 = (uint64_t)dims[2 * i], d2 = (uint64_t)dims[2 * i + 1];
    rc = check_dims(c, name, d1, d2, err, errlen);
    if (rc == 0) rc = write_file(c, name, i, d1, d2, buf, &bytes, err, errlen);
    if (rc != 0) break;
    done++;
    if (rank == 0 && done * 10 / mine != (done - 1) * 10 / mine) {
      if (world == 1)
        fprintf(stderr, "datagen: %" PRIu64 "/%" PRIu64 " files\n", done, total);
      else
        fprintf(stderr, "datagen: %" PRIu64 "/%" PRIu64 " files of rank 0 (%" PRIu64 " in all, %" PRIu32 " ranks)\n",
                done, mine, total, world);
    }
  }
  free(dims);
  free(buf);
  if (rc != 0) return -1;
  double dt = now_s() - t0;
  fprintf(stderr, "datagen: rank %" PRIu32 " wrote %" PRIu64 " files, %" PRIu64 " bytes (%.2f GB) in %.1f s\n", rank,
          done, bytes, (double)bytes / 1e9, dt);
  return 0;
}
