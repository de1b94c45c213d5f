/*
 * gen_jpeg.c - a deterministic synthetic ImageNet-like JPEG dataset, for
 * benchmarks and tests without downloading anything. The pictures are
 * photo-like enough to stress a decoder the way ImageNet does (smooth
 * gradients, a few flat "objects" with edges, periodic texture and sensor-like
 * noise, 4:2:0 at quality 90, ~100 KB each): a flat or pure-noise image would
 * make the entropy decoder unrealistically cheap or expensive.
 *
 * Uses the public header only (tools/ must not include src/), its own PRNG
 * (splitmix64 + xorshift) and libjpeg directly.
 */
#include "gen_jpeg.h"

#include <stdarg.h>
#include <stdio.h>

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

#ifndef LADE_HAVE_JPEG
int lade_tool_gen_jpeg(const char *dir, uint64_t count, uint64_t seed, char *err, size_t errlen) {
  (void)dir, (void)count, (void)seed;
  seterr(err, errlen, "JPEG support is not built in (install libjpeg-turbo and reconfigure)");
  return -1;
}
int lade_tool_gen_jpeg_one(uint64_t seed, uint64_t index, uint8_t **out, size_t *len, char *err, size_t errlen) {
  (void)seed, (void)index, (void)out, (void)len;
  seterr(err, errlen, "JPEG support is not built in (install libjpeg-turbo and reconfigure)");
  return -1;
}
#else

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jerror.h>
#include <jpeglib.h>

#define NCLASSES 10
#define QUALITY 90
#define MAXDIM 640
#define NOISE (1 << 16)
#define GEN_MIN(a, b) ((a) < (b) ? (a) : (b))

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int uniform(uint64_t *s, int lo, int hi) { return lo + (int)(splitmix(s) % (uint64_t)(hi - lo + 1)); }

typedef struct gen {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr jerr;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
  uint32_t row32[MAXDIM];
  int16_t colv[3][MAXDIM], rowv[3][MAXDIM], sx[MAXDIM], sy[MAXDIM];
  uint8_t noise[NOISE];
  uint8_t plane[3][MAXDIM];
} gen_t;

static void gen_error_exit(j_common_ptr c) {
  gen_t *g = (gen_t *)((char *)c - offsetof(gen_t, c));
  (*c->err->format_message)(c, g->msg);
  longjmp(g->jb, 1);
}

static void gen_output(j_common_ptr c) { (void)c; }

typedef struct rect {
  int x0, x1, y0, y1, d[3];
} rect_t;

static inline uint8_t clamp8(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* Encodes image `index`; the destination manager must already be set.
 * Runs under g->jb. */
static void encode(gen_t *g, uint64_t seed, uint64_t index) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ (index + 1) * 0xD1B54A32D192ED03ull;
  splitmix(&s);
  static const int sizes[][2] = {{500, 375}, {500, 375}, {500, 375}, {500, 375}, {500, 375}, {500, 375},
                                 {375, 500}, {375, 500}, {500, 333}, {500, 400}, {480, 360}, {640, 480},
                                 {333, 500}, {500, 357}, {453, 340}, {500, 375}};
  int pick = (int)(splitmix(&s) % (sizeof(sizes) / sizeof(sizes[0])));
  int W = sizes[pick][0], H = sizes[pick][1];
  int base[3], gx[3], gy[3];
  for (int c = 0; c < 3; c++) {
    base[c] = uniform(&s, 40, 200);
    gx[c] = uniform(&s, -80, 80);
    gy[c] = uniform(&s, -80, 80);
  }
  double fx = 0.02 + (splitmix(&s) % 1000) * 0.0004, fy = 0.02 + (splitmix(&s) % 1000) * 0.0004;
  double px = (splitmix(&s) % 628) * 0.01, py = (splitmix(&s) % 628) * 0.01;
  for (int x = 0; x < W; x++) {
    for (int c = 0; c < 3; c++) g->colv[c][x] = (int16_t)(base[c] + gx[c] * x / W);
    g->sx[x] = (int16_t)(64.0 * sin(x * fx + px) + 0.5 * 64.0 * sin(x * fx * 3.7 + py));
  }
  for (int y = 0; y < H; y++) {
    for (int c = 0; c < 3; c++) g->rowv[c][y] = (int16_t)(gy[c] * y / H);
    g->sy[y] = (int16_t)(64.0 * sin(y * fy + py) + 0.5 * 64.0 * cos(y * fy * 2.9 + px));
  }
  rect_t r[6];
  int nr = uniform(&s, 2, 6);
  for (int i = 0; i < nr; i++) {
    r[i].x0 = uniform(&s, 0, W - 20);
    int rw = uniform(&s, 20, W / 2), rh = uniform(&s, 20, H / 2);
    r[i].x1 = GEN_MIN(W, r[i].x0 + rw);
    r[i].y0 = uniform(&s, 0, H - 20);
    r[i].y1 = GEN_MIN(H, r[i].y0 + rh);
    for (int c = 0; c < 3; c++) r[i].d[c] = uniform(&s, -70, 70);
  }
  int amp = uniform(&s, 52, 70); /* noise amplitude: sets the file size */
  uint64_t ns = splitmix(&s) | 1;

  g->c.image_width = (JDIMENSION)W;
  g->c.image_height = (JDIMENSION)H;
  g->c.input_components = 4;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  g->c.in_color_space = JCS_EXT_XBGR; /* the uint32 R | G<<8 | B<<16 in memory order */
#else
  g->c.in_color_space = JCS_EXT_RGBX;
#endif
  jpeg_set_defaults(&g->c);
  jpeg_set_quality(&g->c, QUALITY, TRUE);
  g->c.dct_method = JDCT_IFAST; /* faster forward DCT; the files are still ordinary baseline JPEGs */
  jpeg_start_compress(&g->c, TRUE);
  for (int y = 0; y < H; y++) {
    const int ty = g->sy[y];
    /* Noise comes from a per-generator table read at a random offset per
     * row: looks like sensor noise to the encoder and keeps this loop free of
     * serial PRNG dependencies, so it vectorises. */
    ns ^= ns << 13;
    ns ^= ns >> 7;
    ns ^= ns << 17;
    const uint8_t *nz = g->noise + (ns % (NOISE - 2 * MAXDIM));
    const int r0 = g->rowv[0][y], r1 = g->rowv[1][y], r2 = g->rowv[2][y];
    uint8_t *pr = g->plane[0], *pg = g->plane[1], *pb = g->plane[2];
    for (int x = 0; x < W; x++) { /* planar first: this loop vectorises */
      int t = (g->sx[x] * ty) >> 7;
      int lum = ((nz[x] * amp) >> 8) - amp / 2 + t;
      int cr = (nz[x + MAXDIM] & 15) - 8, cb = (nz[x + MAXDIM] >> 4) - 8;
      pr[x] = clamp8(g->colv[0][x] + r0 + lum + cr);
      pg[x] = clamp8(g->colv[1][x] + r1 + lum);
      pb[x] = clamp8(g->colv[2][x] + r2 + lum + cb);
    }
    for (int i = 0; i < nr; i++) {
      if (y < r[i].y0 || y >= r[i].y1) continue;
      const int d0 = r[i].d[0], d1 = r[i].d[1], d2 = r[i].d[2];
      for (int x = r[i].x0; x < r[i].x1; x++) {
        pr[x] = clamp8(pr[x] + d0);
        pg[x] = clamp8(pg[x] + d1);
        pb[x] = clamp8(pb[x] + d2);
      }
    }
    uint32_t *p32 = g->row32; /* RGBX, so the interleave vectorises too */
    for (int x = 0; x < W; x++) p32[x] = (uint32_t)pr[x] | (uint32_t)pg[x] << 8 | (uint32_t)pb[x] << 16;
    JSAMPROW rows[1] = {(JSAMPROW)g->row32};
    jpeg_write_scanlines(&g->c, rows, 1);
  }
  jpeg_finish_compress(&g->c);
}

static gen_t *gen_new(char *err, size_t errlen) {
  gen_t *g = calloc(1, sizeof(*g));
  if (!g) {
    seterr(err, errlen, "out of memory");
    return NULL;
  }
  g->c.err = jpeg_std_error(&g->jerr);
  g->jerr.error_exit = gen_error_exit;
  g->jerr.output_message = gen_output;
  uint64_t s = 0x6e6f697365ull; /* the noise table is fixed; images differ by offsets and parameters */
  for (size_t i = 0; i < NOISE; i += 8) {
    uint64_t v = splitmix(&s);
    memcpy(g->noise + i, &v, 8);
  }
  jpeg_create_compress(&g->c);
  return g;
}

static void gen_free(gen_t *g) {
  if (!g) return;
  jpeg_destroy_compress(&g->c);
  free(g);
}

int lade_tool_gen_jpeg_one(uint64_t seed, uint64_t index, uint8_t **out, size_t *len, char *err, size_t errlen) {
  gen_t *g = gen_new(err, errlen);
  if (!g) return -1;
  unsigned char *buf = NULL;
  unsigned long n = 0;
  if (setjmp(g->jb)) {
    seterr(err, errlen, "JPEG encoder: %s", g->msg);
    gen_free(g);
    free(buf);
    return -1;
  }
  jpeg_mem_dest(&g->c, &buf, &n);
  encode(g, seed, index);
  gen_free(g);
  *out = buf;
  *len = n;
  return 0;
}

static int mkdir_p(const char *path) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(tmp)) return -1;
  memcpy(tmp, path, n + 1);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

int lade_tool_gen_jpeg(const char *dir, uint64_t count, uint64_t seed, char *err, size_t errlen) {
  char path[4096];
  if (!dir || !*dir) {
    seterr(err, errlen, "no output directory");
    return -1;
  }
  for (int c = 0; c < NCLASSES; c++) {
    snprintf(path, sizeof(path), "%s/class_%02d", dir, c);
    if (mkdir_p(path) != 0) {
      seterr(err, errlen, "cannot create %s: %s", path, strerror(errno));
      return -1;
    }
  }
  gen_t *g = gen_new(err, errlen);
  if (!g) return -1;
  FILE *volatile f = NULL;
  if (setjmp(g->jb)) {
    seterr(err, errlen, "JPEG encoder: %s", g->msg);
    if (f) fclose(f);
    gen_free(g);
    return -1;
  }
  for (uint64_t i = 0; i < count; i++) {
    snprintf(path, sizeof(path), "%s/class_%02d/img_%08llu.jpg", dir, (int)(i % NCLASSES), (unsigned long long)i);
    f = fopen(path, "wb");
    if (!f) {
      seterr(err, errlen, "cannot create %s: %s", path, strerror(errno));
      gen_free(g);
      return -1;
    }
    jpeg_stdio_dest(&g->c, f);
    encode(g, seed, i);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
      f = NULL;
      seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
      gen_free(g);
      return -1;
    }
    f = NULL;
  }
  gen_free(g);
  return 0;
}
#endif /* LADE_HAVE_JPEG */
