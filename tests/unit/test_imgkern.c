/* test_imgkern.c - the image pipeline's SIMD kernels (x86: AVX2, AVX-512
 * VNNI/VBMI; aarch64: NEON) against its C loops, with no decoder: random
 * RGBX rows (and the same pixels as RGB rows where the pipeline takes them)
 * go through lade__imgpipe_begin/row/finish on the path this CPU picks and
 * on each path an environment switch fixes, and every output byte and float
 * must equal the LADE_NO_SIMD=1 pipeline's, for many widths (odd tails of
 * every vector width), boxes (downscales up to 100x, upscales, clipped or
 * not), both dtypes and flip on and off. Needs no JPEG library, so the
 * cross build runs it under qemu-user (scripts/test_arm.sh). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "transform/imgkern.h"
#include "transform/imgpipe.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { /* xorshift64*: the same cases on every machine */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }

/* Was LADE_NO_SIMD set for the whole run (scripts/test_arm.sh runs this test
 * both ways)? Then every pipeline is the C one. */
static bool all_c(void) { return getenv("LADE_NO_SIMD") != NULL; }

/* A pipeline made with `var` set (NULL: as the environment has it). */
static lade__imgdec_t *make(const char *var) {
  const bool set = var && !getenv(var);
  if (set) setenv(var, "1", 1);
  lade__imgdec_t *d = NULL;
  CHECK_OK(lade__imgpipe_new(&d));
  if (set) unsetenv(var);
  return d;
}

static void kernels(const lade__imgdec_t *d, char *buf) { lade__imgpipe_kernels(d, buf, 128); }

/* LADE_NO_SIMD gives the C loops everywhere; without it an aarch64 build
 * runs NEON in every stage, and an x86 one with AVX2 and FMA none of the C
 * loops. */
static void test_kernels_chosen(void) {
  char buf[128];
  lade__imgdec_t *c = make("LADE_NO_SIMD"), *d = make(NULL);
  kernels(c, buf);
  printf("  LADE_NO_SIMD=1: %s\n", buf);
  CHECK(strcmp(buf, "h=c rgb=none v=c u8=c f32=c") == 0);
  kernels(d, buf);
  printf("  this CPU: %s\n", buf);
  if (all_c()) {
    CHECK(strcmp(buf, "h=c rgb=none v=c u8=c f32=c") == 0);
  } else {
#if defined(__aarch64__)
    CHECK(strcmp(buf, "h=neon rgb=neon v=neon u8=neon f32=neon") == 0);
    CHECK(strcmp(lade__imgdec_store_f32_name(d), "neon") == 0);
#elif defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      CHECK(strstr(buf, "h=c ") == NULL && strstr(buf, "v=c ") == NULL && strstr(buf, "u8=c ") == NULL);
      CHECK(strstr(buf, "f32=c") == NULL);
    }
#endif
  }
  lade__imgpipe_free(c);
  lade__imgpipe_free(d);
}

typedef struct {
  int W, H, out;
  lade__imgbox_t box;
} kcase_t;

/* The four outputs (uint8 and float32, flip off and on) of one pipeline for
 * case k over the image (RGBX img4, or RGB img3 when rgb), into u8 and f32. */
static void run_case(lade__imgdec_t *d, const kcase_t *k, const uint8_t *img4, const uint8_t *img3, bool rgb,
                     uint8_t *u8[2], float *f32[2]) {
  lade__imgplan_t plan;
  CHECK_OK(lade__imgpipe_begin(d, k->W, k->H, 1, k->W, k->H, &k->box, k->out, &plan));
  for (int r = 0; r < plan.nrows; r++) {
    const size_t px = (size_t)(plan.y0 + r) * (size_t)k->W + (size_t)plan.rx0;
    if (rgb) lade__imgpipe_row_rgb(d, r, img3 + px * 3);
    else lade__imgpipe_row(d, r, img4 + px * 4);
  }
  for (int flip = 0; flip < 2; flip++) {
    lade__imgpipe_finish(d, flip, LADE_DTYPE_UINT8, u8[flip]);
    lade__imgpipe_finish(d, flip, LADE_DTYPE_FLOAT32, f32[flip]);
  }
}

/* Cases: output widths around every vector width's tail, then random ones;
 * boxes from 100x downscales to 8x upscales, inside the image or touching its
 * edges, with and without clip_to_box. */
static kcase_t make_case(int i) {
  static const int outs[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 45, 63, 64, 65, 224, 299};
  const int nouts = (int)(sizeof(outs) / sizeof(outs[0]));
  kcase_t k;
  k.out = i < 2 * nouts ? outs[i % nouts] : rnd_in(1, 320);
  switch (i % 4) {
    case 0: k.W = rnd_in(k.out, 3 * k.out + 8); break;      /* a mild downscale, the common case */
    case 1: k.W = rnd_in(1, 8 + k.out / 4); break;          /* upscale */
    case 2: k.W = rnd_in(1, 100 * k.out < 900 ? 100 * k.out : 900); break;
    default: k.W = rnd_in(1, 700); break;
  }
  k.H = rnd_in(1, i % 3 == 0 ? 3 * k.out + 8 : 160);
  const double bw = k.W * (0.25 + 0.75 * (rnd() % 1000) / 999.0), bh = k.H * (0.25 + 0.75 * (rnd() % 1000) / 999.0);
  k.box.w = i % 5 == 0 ? k.W : bw;
  k.box.h = i % 5 == 0 ? k.H : bh;
  k.box.left = (k.W - k.box.w) * (rnd() % 1001) / 1000.0;
  k.box.top = (k.H - k.box.h) * (rnd() % 1001) / 1000.0;
  if (i % 7 == 3) k.box.left = k.W - k.box.w; /* against the right edge */
  k.box.clip_to_box = i % 2 == 0;
  return k;
}

/* Every SIMD path this build has, fixed by its switch, against the C loops:
 * RGBX rows, and RGB rows where the path takes them. */
static void test_kernels_match_c(void) {
#if defined(__x86_64__)
  static const char *const vars[] = {NULL, "LADE_NO_AVX512", "LADE_NO_VBMI", "LADE_NO_RGB"};
#else
  static const char *const vars[] = {NULL, "LADE_NO_RGB"};
#endif
  enum { NV = sizeof(vars) / sizeof(vars[0]) };
  lade__imgdec_t *ref = make("LADE_NO_SIMD"), *d[NV];
  for (int v = 0; v < NV; v++) d[v] = make(vars[v]);
  int cases = 0, rgb_cases = 0, bad_cases = 0;
  for (int i = 0; i < 240; i++) {
    const kcase_t k = make_case(i);
    const size_t npx = (size_t)k.W * (size_t)k.H, n = (size_t)k.out * (size_t)k.out;
    /* the image's last row is followed by exactly the pad the plan asks for
     * (the same for every path), so that an over-read past it is a heap
     * overflow under AddressSanitizer */
    lade__imgplan_t plan;
    CHECK_OK(lade__imgpipe_begin(ref, k.W, k.H, 1, k.W, k.H, &k.box, k.out, &plan));
    const size_t pad = plan.pad;
    uint8_t *img4 = malloc(npx * 4 + pad), *img3 = malloc(npx * 3 + pad);
    for (size_t j = 0; j < npx * 4 + pad; j++) img4[j] = (uint8_t)rnd();
    if (i % 11 == 5) /* saturated pixels: 0 and 255 only */
      for (size_t j = 0; j < npx * 4; j++) img4[j] = img4[j] & 1 ? 255 : 0;
    for (size_t j = 0; j < npx; j++) memcpy(img3 + 3 * j, img4 + 4 * j, 3);
    memcpy(img3 + npx * 3, img4 + npx * 4, pad); /* the pad past the last row: not zeros */
    uint8_t *u8[2][2];
    float *f32[2][2];
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 2; b++) {
        u8[a][b] = malloc(n * 3);
        f32[a][b] = malloc(n * 12);
      }
    run_case(ref, &k, img4, img3, false, u8[0], f32[0]);
    for (int v = 0; v < NV; v++)
      for (int rgb = 0; rgb < 2; rgb++) {
        if (rgb && !lade__imgpipe_takes_rgb(d[v])) continue;
        run_case(d[v], &k, img4, img3, rgb, u8[1], f32[1]);
        int bad = 0;
        for (int flip = 0; flip < 2; flip++) {
          bad += memcmp(u8[0][flip], u8[1][flip], n * 3) != 0;
          bad += memcmp(f32[0][flip], f32[1][flip], n * 12) != 0;
        }
        if (bad) {
          char buf[128];
          kernels(d[v], buf);
          fprintf(stderr,
                  "  case %d: %dx%d image, box %.3f,%.3f %.3fx%.3f%s -> %d, %s rows, %s (%s): %d of 4 outputs differ\n",
                  i, k.W, k.H, k.box.left, k.box.top, k.box.w, k.box.h, k.box.clip_to_box ? " clipped" : "", k.out,
                  rgb ? "RGB" : "RGBX", vars[v] ? vars[v] : "default", buf, bad);
          bad_cases++;
        }
        cases++;
        rgb_cases += rgb;
      }
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 2; b++) {
        free(u8[a][b]);
        free(f32[a][b]);
      }
    free(img4);
    free(img3);
  }
  printf("  %d comparisons (%d with RGB rows), 4 outputs each\n", cases, rgb_cases);
  CHECK_EQ_INT(bad_cases, 0);
  CHECK(cases >= 240 * NV);
  lade__imgpipe_free(ref);
  for (int v = 0; v < NV; v++) lade__imgpipe_free(d[v]);
}

/* The clip, which the bilinear filter's weights (>= 0, summing to 1) never
 * reach through the pipeline: the vertical pass called directly with weights
 * 1.5 and -0.5, whose sums run from -128 to 383, and the same through the
 * horizontal pass where it reads the plain coefficients (the C loop, NEON;
 * the x86 passes read pieces of weights in [0, 1] only). */
static void test_clip(void) {
  lade__imgdec_t *ref = make("LADE_NO_SIMD"), *d = make(NULL);
  enum { N = 4 * 67, W = 70 }; /* 67 pixels: a tail past every vector width */
  static uint8_t rows[2 * N + 64], in[W * 4 + 256], out[2][N];
  static int32_t acc[N];
  for (size_t j = 0; j < sizeof(rows); j++) rows[j] = (uint8_t)rnd();
  for (size_t j = 0; j < sizeof(in); j++) in[j] = (uint8_t)rnd();
  const int32_t k[2] = {3 << (PRECISION_BITS - 1), -(1 << (PRECISION_BITS - 1))};
  ref->resample_v(k, 2, rows, N, acc, out[0], N);
  d->resample_v(k, 2, rows, N, acc, out[1], N);
  int lo = 0, hi = 0;
  for (int j = 0; j < N; j++) {
    const int s = (3 * rows[j] - rows[N + j] + 1) / 2;
    lo += s < 0;
    hi += s > 255;
  }
  CHECK(lo > 0 && hi > 0); /* the clip was needed both ways */
  CHECK(memcmp(out[0], out[1], N) == 0);
  char buf[128];
  kernels(d, buf);
  if (strstr(buf, "h=c ") || strstr(buf, "h=neon ")) {
    /* output pixel x: input pixels x, x+1 and x+2 (the last: x, x+1) with
     * weights 1.5, -0.5, 0, or 1, -1, 1 for every third (sums from -255 to
     * 510: within int32 with the 22-bit fraction, so the C loop is defined) */
    const int32_t one = 1 << PRECISION_BITS;
    int32_t kh[67 * 3];
    int bounds[67 * 2];
    for (int x = 0; x < 67; x++) {
      kh[3 * x] = x % 3 == 0 ? one : k[0];
      kh[3 * x + 1] = x % 3 == 0 ? -one : k[1];
      kh[3 * x + 2] = x % 3 == 0 ? one : 0;
      bounds[2 * x] = x;
      bounds[2 * x + 1] = x == 66 ? 2 : 3;
    }
    int hlo = 0, hhi = 0; /* twice the sums of the 1.5, -0.5 pixels of RGBX rows */
    for (int x = 0; x < 66; x++)
      for (int ch = 0; ch < 3 && x % 3; ch++) {
        const int s2 = 3 * in[4 * x + ch] - in[4 * x + 4 + ch];
        hlo += s2 < -1;
        hhi += s2 > 511;
      }
    CHECK(hlo > 0 && hhi > 0);
    int32_t kn[67 * 4]; /* the NEON pass's layout (LAYOUT_PADDED): each pixel's taps padded to a quad */
    for (int x = 0; x < 67; x++)
      for (int t = 0; t < 4; t++) kn[4 * x + t] = t < 3 ? kh[3 * x + t] : 0;
    coeffs_t c = {.k = kh, .bounds = bounds, .kn = kn, .ksize = 3, .taps = 3};
    for (int bpp = 3; bpp <= 4; bpp++) {
      resample_h_fn f = bpp == 4 ? d->resample_h : d->resample_h_rgb;
      if (!f) continue;
      resample_h_bpp(&c, in, out[0], 0, 67, bpp);
      f(&c, in, out[1], 67);
      CHECK(memcmp(out[0], out[1], N) == 0);
    }
  }
  lade__imgpipe_free(ref);
  lade__imgpipe_free(d);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_kernels_chosen);
  RUN(test_kernels_match_c);
  RUN(test_clip);
  return lade_test_finish();
}
