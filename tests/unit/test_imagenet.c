/* test_imagenet.c - the image pipeline: RandomResizedCrop parameters (bounds,
 * determinism, the centre-crop fallback), decode of RGB/grayscale images,
 * flip and normalisation, DCT-scaled decode, clean errors on truncated and
 * garbage input, the train/eval vtables, and the dispatch by content (PNG
 * decoded, or refused when built without libspng; other formats named).
 * JPEGs are made in memory with libjpeg's compressor, PNGs by hand. (The
 * torchvision comparison is tests/python/jpeg_reference.py.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "engine/resolve.h"
#include "harness.h"
#include "transform/imagenet.h"
#include "transform/transform.h"

static void test_rrc_bounds_and_determinism(void) {
  static const int sizes[][2] = {{500, 375}, {375, 500}, {1, 1}, {2, 3}, {64, 48}, {1000, 10}, {10, 1000}, {4096, 17}};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    int W = sizes[s][0], H = sizes[s][1];
    for (uint64_t seed = 0; seed < 300; seed++) {
      lade__rng_t a, b;
      lade__rng_init(&a, seed, s, LADE__RNG_AUGMENT);
      lade__rng_init(&b, seed, s, LADE__RNG_AUGMENT);
      int t1, l1, h1, w1, t2, l2, h2, w2;
      lade__rrc_params(&a, W, H, 0.08, 1.0, 0.75, 4.0 / 3.0, &t1, &l1, &h1, &w1);
      lade__rrc_params(&b, W, H, 0.08, 1.0, 0.75, 4.0 / 3.0, &t2, &l2, &h2, &w2);
      CHECK(t1 == t2 && l1 == l2 && h1 == h2 && w1 == w2);
      CHECK(h1 > 0 && w1 > 0 && t1 >= 0 && l1 >= 0 && t1 + h1 <= H && l1 + w1 <= W);
      /* The RNG must advance identically too (the flip draw follows). */
      CHECK(lade__rng_u64(&a) == lade__rng_u64(&b));
    }
  }
}

/* Replays the first try by hand: the box must come from the same formula. */
static void test_rrc_first_try_formula(void) {
  int matched = 0;
  for (uint64_t seed = 0; seed < 200; seed++) {
    lade__rng_t r, c;
    lade__rng_init(&r, seed, 1, 2);
    c = r;
    int t, l, h, w;
    lade__rrc_params(&r, 500, 375, 0.08, 1.0, 0.75, 4.0 / 3.0, &t, &l, &h, &w);
    double area = 500.0 * 375.0 * (0.08 + 0.92 * lade__rng_double(&c));
    double ar = exp(log(0.75) + (log(4.0 / 3.0) - log(0.75)) * lade__rng_double(&c));
    int ew = (int)nearbyint(sqrt(area * ar)), eh = (int)nearbyint(sqrt(area / ar));
    if (ew <= 500 && eh <= 375) {
      CHECK_EQ_INT(w, ew);
      CHECK_EQ_INT(h, eh);
      CHECK_EQ_INT(t, (int)lade__rng_below(&c, (uint64_t)(375 - eh + 1)));
      CHECK_EQ_INT(l, (int)lade__rng_below(&c, (uint64_t)(500 - ew + 1)));
      matched++;
    }
  }
  CHECK(matched > 100);
}

static void test_rrc_fallback(void) {
  for (uint64_t seed = 0; seed < 50; seed++) {
    lade__rng_t r;
    lade__rng_init(&r, seed, 0, 0);
    int t, l, h, w;
    /* 1000x10: every try is too tall, so the fallback: h = 10, w = round(10 * 4/3). */
    lade__rrc_params(&r, 1000, 10, 0.08, 1.0, 0.75, 4.0 / 3.0, &t, &l, &h, &w);
    CHECK(t == 0 && h == 10 && w == 13 && l == (1000 - 13) / 2);
    lade__rrc_params(&r, 10, 1000, 0.08, 1.0, 0.75, 4.0 / 3.0, &t, &l, &h, &w);
    CHECK(l == 0 && w == 10 && h == 13 && t == (1000 - 13) / 2);
  }
}


/* ---- dispatch by content (needs no libjpeg) */

static uint32_t crc32_of(const uint8_t *p, size_t n, uint32_t c) {
  c = ~c;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

static size_t put_be32(uint8_t *o, uint32_t v) {
  o[0] = (uint8_t)(v >> 24), o[1] = (uint8_t)(v >> 16), o[2] = (uint8_t)(v >> 8), o[3] = (uint8_t)v;
  return 4;
}

static size_t put_chunk(uint8_t *o, const char *type, const uint8_t *d, uint32_t n) {
  size_t at = put_be32(o, n);
  memcpy(o + at, type, 4);
  if (n) memcpy(o + at + 4, d, n);
  at += 4 + n;
  return at + put_be32(o + at, crc32_of(o + 4, 4 + (size_t)n, 0));
}

/* A solid-colour 8-bit RGBA PNG of W x H (W*4+1 < 65536), zlib "stored"
 * blocks, one per row. Caller frees. */
static uint8_t *make_png(int W, int H, const uint8_t rgba[4], size_t *len) {
  const size_t rowb = (size_t)W * 4 + 1, zlen = 2 + (size_t)H * (5 + rowb) + 4;
  uint8_t *z = malloc(zlen), *o = malloc(zlen + 64);
  size_t zi = 0;
  uint32_t a = 1, b = 0;
  z[zi++] = 0x78, z[zi++] = 0x01;
  for (int y = 0; y < H; y++) {
    z[zi++] = y == H - 1;
    z[zi++] = (uint8_t)rowb, z[zi++] = (uint8_t)(rowb >> 8), z[zi++] = (uint8_t)~rowb, z[zi++] = (uint8_t)(~rowb >> 8);
    for (size_t i = 0; i < rowb; i++) {
      uint8_t v = i == 0 ? 0 : rgba[(i - 1) % 4];
      z[zi++] = v;
      a = (a + v) % 65521, b = (b + a) % 65521;
    }
  }
  zi += put_be32(z + zi, b << 16 | a);
  uint8_t ihdr[13] = {0, 0, 0, 0, 0, 0, 0, 0, 8, 6, 0, 0, 0};
  put_be32(ihdr, (uint32_t)W);
  put_be32(ihdr + 4, (uint32_t)H);
  size_t at = 0;
  memcpy(o, "\x89PNG\r\n\x1a\n", 8);
  at = 8;
  at += put_chunk(o + at, "IHDR", ihdr, 13);
  at += put_chunk(o + at, "IDAT", z, (uint32_t)zi);
  at += put_chunk(o + at, "IEND", NULL, 0);
  free(z);
  *len = at;
  return o;
}

static void test_png_by_content(void) {
  const uint8_t col[4] = {12, 200, 99, 7}; /* alpha 7: dropped, not composited */
  size_t len;
  uint8_t *p = make_png(40, 30, col, &len);
  lade__imgdec_t *d;
  CHECK_OK(lade__imgdec_create(&d));
  static uint8_t o[16 * 16 * 3];
  int W = 0, H = 0;
  lade__clear_error();
  int rc = lade__img_size(d, p, len, &W, &H);
#ifdef LADE_HAVE_PNG
  CHECK_OK(rc);
  CHECK(W == 40 && H == 30);
  CHECK_OK(lade__imgdec_crop(d, p, len, 3, 4, 20, 30, 16, true, LADE_DTYPE_UINT8, o));
  int bad = 0;
  for (int i = 0; i < 16 * 16 * 3; i++) bad += o[i] != col[i % 3];
  CHECK_EQ_INT(bad, 0);
  /* Cut inside IDAT, or a flipped bit in IDAT's data: a clear error. */
  CHECK_EQ_INT(lade__imgdec_crop(d, p, len / 2, 0, 0, 2, 2, 16, false, LADE_DTYPE_UINT8, o), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "corrupt PNG") != NULL);
  p[60] ^= 4;
  CHECK_EQ_INT(lade__imgdec_crop(d, p, len, 0, 0, 2, 2, 16, false, LADE_DTYPE_UINT8, o), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "corrupt PNG") != NULL);
#else
  CHECK_EQ_INT(rc, LADE_EUNSUPPORTED);
  CHECK(strstr(lade_last_error(), "PNG support is not built in") != NULL);
  CHECK_EQ_INT(lade__imgdec_crop(d, p, len, 0, 0, 2, 2, 16, false, LADE_DTYPE_UINT8, o), LADE_EUNSUPPORTED);
#endif
  /* Other formats are named; unknown bytes are "not an image". */
#define B(s) s, sizeof(s) - 1
  static const struct {
    const char *bytes;
    size_t len;
    const char *name;
    int code;
  } other[] = {{B("GIF89a\x01\0\x01\0"), "GIF", LADE_EUNSUPPORTED},  {B("BM\x36\0\0\0\0\0"), "BMP", LADE_EUNSUPPORTED},
               {B("II*\0\x08\0\0\0"), "TIFF", LADE_EUNSUPPORTED},   {B("RIFF\0\0\0\0WEBPVP8 "), "WebP", LADE_EUNSUPPORTED},
               {B("P6\n2 2\n255\n"), "PPM", LADE_EUNSUPPORTED},      {B("P5 2 2 255 "), "PGM", LADE_EUNSUPPORTED},
               {B("hello, world"), "not an image (JPEG or PNG)", LADE_EFORMAT}};
#undef B
  for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
    lade__clear_error();
    CHECK_EQ_INT(lade__imgdec_crop(d, (const uint8_t *)other[i].bytes, other[i].len, 0, 0, 1, 1, 16, false,
                                   LADE_DTYPE_UINT8, o),
                 other[i].code);
    CHECK(strstr(lade_last_error(), other[i].name) != NULL);
  }
  lade__imgdec_destroy(d);
  free(p);
}

#ifdef LADE_HAVE_JPEG
#include <stdio.h>

#include <jpeglib.h>

/* A JPEG in memory: RGB gradient (or gray), or a solid colour when solid != NULL. */
static uint8_t *make_jpeg(int W, int H, int gray, const uint8_t *solid, size_t *len) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char *buf = NULL;
  unsigned long n = 0;
  jpeg_mem_dest(&c, &buf, &n);
  c.image_width = (JDIMENSION)W;
  c.image_height = (JDIMENSION)H;
  c.input_components = gray ? 1 : 3;
  c.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  uint8_t *row = malloc((size_t)W * 3);
  for (int y = 0; y < H; y++) {
    for (int x = 0; x < W; x++) {
      for (int k = 0; k < c.input_components; k++)
        row[x * c.input_components + k] =
            solid ? solid[k] : (uint8_t)((k == 0 ? x * 255 / W : k == 1 ? y * 255 / H : (x + y) * 127 / (W + H)));
    }
    JSAMPROW rows[1] = {row};
    jpeg_write_scanlines(&c, rows, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  free(row);
  *len = n;
  return buf;
}

static void test_solid_colour_and_normalise(void) {
  const uint8_t col[3] = {200, 100, 30};
  size_t len;
  uint8_t *j = make_jpeg(96, 64, 0, col, &len);
  lade__imgdec_t *d;
  CHECK_OK(lade__imgdec_create(&d));
  int W, H;
  CHECK_OK(lade__img_size(d, j, len, &W, &H));
  CHECK(W == 96 && H == 64);
  uint8_t u8[32 * 32 * 3];
  float f[3 * 32 * 32];
  CHECK_OK(lade__imgdec_crop(d, j, len, 5, 7, 40, 50, 32, false, LADE_DTYPE_UINT8, u8));
  CHECK_OK(lade__imgdec_crop(d, j, len, 5, 7, 40, 50, 32, true, LADE_DTYPE_FLOAT32, f));
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  int bad = 0;
  for (int i = 0; i < 32 * 32; i++)
    for (int c = 0; c < 3; c++) {
      if (abs(u8[i * 3 + c] - col[c]) > 3) bad++;
      float expect = ((float)u8[(i / 32) * 96 + (31 - i % 32) * 3 + c] / 255.0f - mean[c]) / sd[c];
      if (fabsf(f[c * 1024 + i] - expect) > 1e-5f) bad++;
    }
  CHECK_EQ_INT(bad, 0);
  lade__imgdec_destroy(d);
  free(j);
}

static void test_flip_mirrors(void) {
  size_t len;
  uint8_t *j = make_jpeg(120, 90, 0, NULL, &len);
  lade__imgdec_t *d;
  CHECK_OK(lade__imgdec_create(&d));
  static uint8_t a[48 * 48 * 3], b[48 * 48 * 3];
  CHECK_OK(lade__imgdec_crop(d, j, len, 10, 20, 70, 90, 48, false, LADE_DTYPE_UINT8, a));
  CHECK_OK(lade__imgdec_crop(d, j, len, 10, 20, 70, 90, 48, true, LADE_DTYPE_UINT8, b));
  int bad = 0;
  for (int y = 0; y < 48; y++)
    for (int x = 0; x < 48; x++)
      for (int c = 0; c < 3; c++) bad += a[(y * 48 + x) * 3 + c] != b[(y * 48 + 47 - x) * 3 + c];
  CHECK_EQ_INT(bad, 0);
  /* The gradient runs left to right in red: the crop must too. */
  CHECK(a[(24 * 48 + 40) * 3] > a[(24 * 48 + 5) * 3] + 20);
  lade__imgdec_destroy(d);
  free(j);
}

/* The stores at output widths with and without a SIMD tail (7: no whole
 * vector; 45: 13 past 2x16, 5 past 5x8; 48; 299, Inception's), on the path
 * this CPU picks, the AVX2 one and the C one (LADE_NO_AVX512, LADE_NO_SIMD
 * at decoder creation): float32 equals (u8/255 - mean)/std computed in
 * float32 to the bit, and flip mirrors both dtypes. */
static void test_stores_any_width(void) {
  size_t len;
  uint8_t *j = make_jpeg(320, 240, 0, NULL, &len);
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  static const int sizes[] = {7, 45, 48, 299};
  static const char *const paths[] = {NULL, "LADE_NO_AVX512", "LADE_NO_SIMD"};
  for (int pi = 0; pi < 3; pi++) {
    if (paths[pi]) setenv(paths[pi], "1", 1);
    lade__imgdec_t *d;
    CHECK_OK(lade__imgdec_create(&d));
    /* the SIMD float store passed its exactness check where the CPU has it */
    const char *want = "c";
#if defined(__x86_64__) && defined(__GNUC__)
    if (pi == 0 && __builtin_cpu_supports("avx512f")) want = "avx512";
    else if (pi < 2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) want = "avx2";
#elif defined(__aarch64__)
    if (pi < 2) want = "neon"; /* NEON is baseline; LADE_NO_AVX512 does not apply */
#endif
    if (strcmp(lade__imgdec_store_f32_name(d), want) != 0)
      fprintf(stderr, "  %s: float32 store %s, not %s\n", paths[pi] ? paths[pi] : "default",
              lade__imgdec_store_f32_name(d), want);
    CHECK(strcmp(lade__imgdec_store_f32_name(d), want) == 0);
    for (int si = 0; si < 4; si++) {
      const int n = sizes[si];
      uint8_t *u[2] = {malloc((size_t)n * n * 3), malloc((size_t)n * n * 3)};
      float *f[2] = {malloc((size_t)n * n * 12), malloc((size_t)n * n * 12)};
      for (int flip = 0; flip < 2; flip++) {
        CHECK_OK(lade__imgdec_crop(d, j, len, 10, 15, 200, 290, n, flip, LADE_DTYPE_UINT8, u[flip]));
        CHECK_OK(lade__imgdec_crop(d, j, len, 10, 15, 200, 290, n, flip, LADE_DTYPE_FLOAT32, f[flip]));
      }
      int bad = 0;
      for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++)
          for (int c = 0; c < 3; c++) {
            const uint8_t v = u[0][((size_t)y * n + x) * 3 + c];
            const float want = ((float)v / 255.0f - mean[c]) / sd[c];
            bad += memcmp(&f[0][(size_t)c * n * n + (size_t)y * n + x], &want, 4) != 0;
            bad += memcmp(&f[1][(size_t)c * n * n + (size_t)y * n + (n - 1 - x)], &want, 4) != 0;
            bad += u[1][((size_t)y * n + (n - 1 - x)) * 3 + c] != v;
          }
      if (bad) fprintf(stderr, "  %s, width %d: %d values differ\n", paths[pi] ? paths[pi] : "default", n, bad);
      CHECK_EQ_INT(bad, 0);
      for (int k = 0; k < 2; k++) {
        free(u[k]);
        free(f[k]);
      }
    }
    lade__imgdec_destroy(d);
    if (paths[pi]) unsetenv(paths[pi]);
  }
  free(j);
}

static void test_grayscale_decodes(void) {
  size_t len;
  uint8_t *j = make_jpeg(75, 51, 1, NULL, &len);
  lade__imgdec_t *d;
  CHECK_OK(lade__imgdec_create(&d));
  static uint8_t o[40 * 40 * 3];
  CHECK_OK(lade__imgdec_crop(d, j, len, 0, 0, 51, 75, 40, false, LADE_DTYPE_UINT8, o));
  int bad = 0, lo = 255, hi = 0;
  for (int i = 0; i < 40 * 40; i++) {
    bad += o[3 * i] != o[3 * i + 1] || o[3 * i] != o[3 * i + 2];
    lo = LADE__MIN(lo, o[3 * i]);
    hi = LADE__MAX(hi, o[3 * i]);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(hi - lo > 150); /* the gradient survived */
  lade__imgdec_destroy(d);
  free(j);
}

static void test_dct_scaled_decode(void) {
  const uint8_t col[3] = {10, 250, 128};
  size_t len;
  uint8_t *j = make_jpeg(1100, 900, 0, col, &len);
  lade__imgdec_t *d;
  CHECK_OK(lade__imgdec_create(&d));
  static uint8_t o[64 * 64 * 3];
  lade__imgdec_set_decode_scale(d, true);
  /* Boxes 2x, 4x, 8x and 14x the output: 1/2, 1/4, 1/8 scaling. */
  const int sides[] = {130, 260, 520, 900};
  for (int s = 0; s < 4; s++) {
    CHECK_OK(lade__imgdec_crop(d, j, len, 900 - sides[s], 1100 - sides[s], sides[s], sides[s], 64, s & 1,
                               LADE_DTYPE_UINT8, o));
    int bad = 0;
    for (int i = 0; i < 64 * 64 * 3; i++) bad += abs(o[i] - col[i % 3]) > 3;
    CHECK_EQ_INT(bad, 0);
  }
  lade__imgdec_destroy(d);
  free(j);
}

static void test_truncated_is_error(void) {
  size_t len;
  uint8_t *j = make_jpeg(200, 150, 0, NULL, &len);
  lade__imgdec_t *d;
  CHECK_OK(lade__imgdec_create(&d));
  static uint8_t o[32 * 32 * 3];
  for (size_t cut = 1; cut < len; cut += len / 17 + 1) {
    lade__clear_error();
    int rc = lade__imgdec_crop(d, j, cut, 0, 0, 150, 200, 32, false, LADE_DTYPE_UINT8, o);
    CHECK_EQ_INT(rc, LADE_EFORMAT);
    CHECK(strstr(lade_last_error(), cut < 2 ? "not an image" : "corrupt JPEG") != NULL);
  }
  lade__clear_error();
  CHECK_EQ_INT(lade__imgdec_crop(d, j, len / 2, 0, 0, 150, 200, 32, false, LADE_DTYPE_UINT8, o), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "image file is truncated") != NULL);
  /* Only the last byte missing, and a box in the first rows: still truncated
   * (the verdict is on the file, as PIL's), not a clean decode of the rows. */
  CHECK_EQ_INT(lade__imgdec_crop(d, j, len - 1, 0, 0, 8, 8, 8, false, LADE_DTYPE_UINT8, o), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "image file is truncated") != NULL);
  CHECK_EQ_INT(lade__imgdec_crop(d, j, 0, 0, 0, 150, 200, 32, false, LADE_DTYPE_UINT8, o), LADE_EFORMAT);
  /* The decoder is still usable after errors. */
  CHECK_OK(lade__imgdec_crop(d, j, len, 0, 0, 150, 200, 32, false, LADE_DTYPE_UINT8, o));
  /* A box outside the image is refused. */
  CHECK_EQ_INT(lade__imgdec_crop(d, j, len, 100, 0, 100, 200, 32, false, LADE_DTYPE_UINT8, o), LADE_EINVAL);
  lade__imgdec_destroy(d);
  free(j);
}

static void test_garbage_is_error_not_crash(void) {
  size_t len;
  uint8_t *j = make_jpeg(64, 48, 0, NULL, &len);
  lade__imgdec_t *d;
  CHECK_OK(lade__imgdec_create(&d));
  static uint8_t o[16 * 16 * 3 * 4];
  uint8_t *buf = malloc(len);
  lade__rng_t r;
  lade__rng_init(&r, 99, 0, 0);
  int errors = 0;
  for (int it = 0; it < 300; it++) {
    size_t n = 1 + lade__rng_below(&r, len);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)lade__rng_u32(&r);
    if (it % 2) memcpy(buf, j, LADE__MIN(n, 2)); /* some start like a JPEG */
    int rc = lade__imgdec_crop(d, buf, n, 0, 0, 1, 1, 16, false, LADE_DTYPE_FLOAT32, o);
    /* Random bytes may look like a BMP ("BM") or a PPM: LADE_EUNSUPPORTED. */
    CHECK(rc == 0 || rc == LADE_EFORMAT || rc == LADE_EINVAL || rc == LADE_EUNSUPPORTED);
    errors += rc != 0;
  }
  CHECK_EQ_INT(errors, 300);
  /* Bit flips in a valid file: anything but a crash. */
  for (int it = 0; it < 300; it++) {
    memcpy(buf, j, len);
    for (int k = 0; k < 4; k++) buf[lade__rng_below(&r, len)] ^= (uint8_t)(1u << lade__rng_below(&r, 8));
    int W = 0, H = 0;
    if (lade__img_size(d, buf, len, &W, &H) == 0 && W > 0 && H > 0 && (uint64_t)W * H < 1u << 22) {
      int rc = lade__imgdec_crop(d, buf, len, 0, 0, H, W, 16, it & 1, LADE_DTYPE_UINT8, o);
      CHECK(rc == 0 || rc == LADE_EFORMAT);
    }
  }
  free(buf);
  lade__imgdec_destroy(d);
  free(j);
}

static void test_vtables(void) {
  size_t len;
  uint8_t *j = make_jpeg(300, 200, 0, NULL, &len);
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  cfg.crop_size = 64;
  cfg.resize_size = 72;
  for (int dt = 0; dt < 2; dt++) {
    cfg.image_dtype = dt ? LADE_DTYPE_UINT8 : LADE_DTYPE_FLOAT32;
    void *st = NULL, *ws = NULL;
    lade__sample_shape_t shape;
    lade__xform_conf_t xc = lade__resolve_xform(&cfg);
    CHECK_OK(lade__xform_imagenet_train.init(&st, &xc, NULL, 0, &shape));
    CHECK_OK(lade__xform_imagenet_train.worker_init(st, &ws));
    CHECK_EQ_INT(shape.ndim, 3);
    CHECK_EQ_INT(shape.bytes, 64 * 64 * 3 * (dt ? 1 : 4));
    CHECK_EQ_INT(shape.dims[dt ? 2 : 0], 3);
    uint8_t *a = malloc(shape.bytes), *b = malloc(shape.bytes), *c = malloc(shape.bytes);
    uint32_t payload = 0;
    lade__rng_t r1, r2;
    lade__rng_init(&r1, 5, 17, LADE__RNG_AUGMENT);
    lade__rng_init(&r2, 5, 17, LADE__RNG_AUGMENT);
    lade__xform_ctx_t c1 = {17, 0, &r1}, c2 = {17, 0, &r2};
    CHECK_OK(lade__xform_imagenet_train.apply(st, ws, j, len, &c1, a, &payload));
    CHECK_EQ_INT(payload, shape.bytes);
    /* Same as doing it by hand: crop params, then one double for the flip. */
    int t, l, h, w;
    lade__rrc_params(&r2, 300, 200, cfg.scale_min, cfg.scale_max, cfg.ratio_min, cfg.ratio_max, &t, &l, &h, &w);
    bool flip = lade__rng_double(&r2) < cfg.hflip;
    lade__imgdec_t *d = ws;
    CHECK_OK(lade__imgdec_crop(d, j, len, t, l, h, w, 64, flip, cfg.image_dtype, b));
    CHECK(memcmp(a, b, shape.bytes) == 0);
    CHECK(memcmp(&r1, &r2, sizeof(r1)) == 0);
    /* A different sample index gives a different crop. */
    lade__rng_init(&r1, 5, 18, LADE__RNG_AUGMENT);
    c1.index = 18;
    CHECK_OK(lade__xform_imagenet_train.apply(st, ws, j, len, &c1, c, &payload));
    CHECK(memcmp(a, c, shape.bytes) != 0);
    /* Bad bytes: an error with a reason. */
    CHECK_EQ_INT(lade__xform_imagenet_train.apply(st, ws, j, len / 3, &c1, c, &payload), LADE_EFORMAT);
    lade__xform_imagenet_train.worker_free(st, ws);
    lade__xform_imagenet_train.destroy(st);

    CHECK_OK(lade__xform_imagenet_eval.init(&st, &xc, NULL, 0, &shape));
    CHECK_OK(lade__xform_imagenet_eval.worker_init(st, &ws));
    CHECK_OK(lade__xform_imagenet_eval.apply(st, ws, j, len, &c1, a, &payload));
    CHECK_OK(lade__xform_imagenet_eval.apply(st, ws, j, len, &c2, b, &payload));
    CHECK(memcmp(a, b, shape.bytes) == 0); /* eval ignores the RNG */
    lade__xform_imagenet_eval.worker_free(st, ws);
    lade__xform_imagenet_eval.destroy(st);
    free(a);
    free(b);
    free(c);
  }
  free(j);
}

/*
 * The decoder's tuner (imgjpeg.c) runs every pair of horizontal pass and
 * rows per libjpeg call on its first images: each image it decodes must be
 * byte for byte what the C loops give, whichever pair ran, and the tuner
 * must have finished (every candidate had its images).
 */
static void test_tuned_paths_exact(void) {
  size_t len[3];
  uint8_t *j[3] = {make_jpeg(300, 200, 0, NULL, &len[0]), make_jpeg(257, 341, 0, NULL, &len[1]),
                   make_jpeg(120, 90, 1, NULL, &len[2])};
  const int W[3] = {300, 257, 120}, H[3] = {200, 341, 90};
  for (int dt = 0; dt < 2; dt++) {
    const int dtype = dt ? LADE_DTYPE_UINT8 : LADE_DTYPE_FLOAT32, out = 48;
    const size_t bytes = (size_t)out * out * 3 * (dt ? 1 : 4);
    lade__imgdec_t *tuned = NULL, *ref = NULL;
    CHECK_OK(lade__imgdec_create(&tuned));
    setenv("LADE_NO_SIMD", "1", 1);
    CHECK_OK(lade__imgdec_create(&ref));
    unsetenv("LADE_NO_SIMD");
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    char choices[96] = "";
    int bad = 0;
    for (int i = 0; i < 2 * 4 * 8 + 8; i++) { /* 4 candidates x 8 images, twice over */
      const int k = i % 3;
      lade__rng_t rng;
      lade__rng_init(&rng, 9, (uint64_t)i, LADE__RNG_AUGMENT);
      int t, l, h, w;
      lade__rrc_params(&rng, W[k], H[k], 0.08, 1.0, 3.0 / 4, 4.0 / 3, &t, &l, &h, &w);
      CHECK_OK(lade__imgdec_crop(tuned, j[k], len[k], t, l, h, w, out, i & 1, dtype, a));
      CHECK_OK(lade__imgdec_crop(ref, j[k], len[k], t, l, h, w, out, i & 1, dtype, b));
      bad += memcmp(a, b, bytes) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(lade__imgdec_choices(tuned, choices, sizeof choices));
    CHECK(strstr(choices, "rows per libjpeg call") != NULL);
    lade__imgdec_destroy(tuned);
    lade__imgdec_destroy(ref);
    free(a);
    free(b);
  }
  for (int k = 0; k < 3; k++) free(j[k]);
}

/* The stage account: an early stop writes no output and books the image;
 * the full stop gives the same bytes as no account, with lade's steps timed;
 * lade_image_stages runs over the images and names a bad one. */
static void test_stage_account(void) {
  size_t len;
  uint8_t *jp = make_jpeg(300, 200, 0, NULL, &len);
  lade__imgdec_t *d = NULL;
  CHECK_OK(lade__imgdec_create(&d));
  const size_t bytes = (size_t)64 * 64 * 3;
  uint8_t *ref = malloc(bytes), *o = malloc(bytes);
  CHECK_OK(lade__imgdec_crop(d, jp, len, 10, 20, 150, 200, 64, false, LADE_DTYPE_UINT8, ref));
  lade__imgacct_t *a = lade__imgdec_account(d);
  for (int stop = LADE__ACCT_HEADER; stop <= LADE__ACCT_FULL; stop++) {
    memset(a, 0, sizeof *a);
    a->stop = stop;
    memset(o, 0xA5, bytes);
    CHECK_OK(lade__imgdec_crop(d, jp, len, 10, 20, 150, 200, 64, false, LADE_DTYPE_UINT8, o));
    CHECK_EQ_INT(a->images, 1);
    CHECK(a->rows_frac > 0.5 && a->rows_frac <= 1.0); /* rows to 160 of 200 plus the filter's margin */
    CHECK(a->area_frac > 0.3 && a->area_frac <= 1.0);
    if (stop < LADE__ACCT_FULL) {
      CHECK(o[0] == 0xA5 && o[bytes - 1] == 0xA5);
    } else {
      CHECK(memcmp(o, ref, bytes) == 0);
      CHECK(a->decoder_s > 0 && a->hpass_s > 0 && a->finish_s > 0 && a->plan_s > 0);
    }
  }
  a->stop = LADE__ACCT_OFF;
  lade__imgdec_destroy(d);

  lade_config_t *cfg = NULL;
  CHECK_OK(lade_config_create(&cfg));
  CHECK_OK(lade_config_set(cfg, "transform", "imagenet-train"));
  const uint8_t *imgs[3] = {jp, jp, jp};
  size_t lens[3] = {len, len, len};
  lade_image_stages_t s;
  CHECK_OK(lade_image_stages(cfg, imgs, lens, 3, 1, &s, sizeof s));
  CHECK_EQ_INT(s.images, 3);
  CHECK(s.transform > 0 && s.header > 0 && s.entropy > 0 && s.decode > 0 && s.timed > 0);
  CHECK(s.hpass > 0 && s.finish > 0 && s.decoder > 0);
  CHECK(s.choices[0] != 0);
  lens[1] = len / 2; /* truncated: image 1 fails, named */
  CHECK_EQ_INT(lade_image_stages(cfg, imgs, lens, 3, 1, &s, sizeof s), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "image 1") != NULL);
  CHECK_OK(lade_config_set(cfg, "transform", "raw"));
  CHECK_EQ_INT(lade_image_stages(cfg, imgs, lens, 3, 1, &s, sizeof s), LADE_EUNSUPPORTED);
  lade_config_destroy(cfg);
  free(ref);
  free(o);
  free(jp);
}
#endif

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_rrc_bounds_and_determinism);
  RUN(test_rrc_first_try_formula);
  RUN(test_rrc_fallback);
  RUN(test_png_by_content);
#ifdef LADE_HAVE_JPEG
  RUN(test_solid_colour_and_normalise);
  RUN(test_flip_mirrors);
  RUN(test_stores_any_width);
  RUN(test_grayscale_decodes);
  RUN(test_dct_scaled_decode);
  RUN(test_truncated_is_error);
  RUN(test_garbage_is_error_not_crash);
  RUN(test_vtables);
  RUN(test_tuned_paths_exact);
  RUN(test_stage_account);
#else
  printf("JPEG support not built in: decode tests skipped\n");
#endif
  return lade_test_finish();
}
