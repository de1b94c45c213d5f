/*
 * imagenet.c - the image pipeline behind the imagenet transforms: the
 * torchvision crop parameters and the resample/flip/normalise stages that
 * every decoder backend shares (imgjpeg.c, imgpng.c; contract in
 * imgpipe.h). The format dispatch by content and the decoder's entry points
 * are imgdecode.c, above the backends and this file; this file calls no
 * backend.
 *
 * Why it looks like this: a training crop usually covers a fraction of the
 * image and is then shrunk to 224x224, so decoding the whole picture at full
 * resolution is wasted work where the format allows it (JPEG: see
 * imgjpeg.c). The resample is Pillow's antialiased bilinear (triangle filter
 * whose support grows with the downscale factor), reproduced with its 22-bit
 * fixed-point coefficients and its horizontal-then-vertical order, so that
 * the result is bit-identical to torchvision's resized_crop on the PIL image.
 *
 * Streaming: each decoded row is resampled horizontally right away, so only
 * out_size*4 bytes per box row are kept, never the decoded box.
 *
 * The SIMD kernels are in imgkern_x86.c and imgkern_neon.c; this file makes
 * the coefficients in the layouts they read and picks them (pick_*).
 */
#include "transform/imagenet.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transform/imgkern.h"
#include "transform/imgpipe.h"

void lade__rrc_params(lade__rng_t *rng, int width, int height, double scale_min, double scale_max, double ratio_min,
                      double ratio_max, int *top, int *left, int *h, int *w) {
  double area = (double)width * (double)height;
  double lr0 = log(ratio_min), lr1 = log(ratio_max);
  for (int tries = 0; tries < 10; tries++) {
    double target = area * (scale_min + (scale_max - scale_min) * lade__rng_double(rng));
    double ar = exp(lr0 + (lr1 - lr0) * lade__rng_double(rng));
    /* Python's round(): half to even, which is nearbyint() in the default mode. */
    double fw = nearbyint(sqrt(target * ar)), fh = nearbyint(sqrt(target / ar));
    if (fw > 0 && fw <= width && fh > 0 && fh <= height) {
      int cw = (int)fw, ch = (int)fh;
      *top = (int)lade__rng_below(rng, (uint64_t)(height - ch + 1));
      *left = (int)lade__rng_below(rng, (uint64_t)(width - cw + 1));
      *h = ch;
      *w = cw;
      return;
    }
  }
  double in_ratio = (double)width / (double)height;
  double rmin = LADE__MIN(ratio_min, ratio_max), rmax = LADE__MAX(ratio_min, ratio_max);
  int cw, ch;
  if (in_ratio < rmin) {
    cw = width;
    ch = (int)nearbyint(cw / rmin);
  } else if (in_ratio > rmax) {
    ch = height;
    cw = (int)nearbyint(ch * rmax);
  } else {
    cw = width;
    ch = height;
  }
  /* Python's // floors; both operands are >= 0 here except in degenerate
   * rounding cases, which we clamp. */
  if (ch > height) ch = height;
  if (cw > width) cw = width;
  if (ch < 1) ch = 1;
  if (cw < 1) cw = 1;
  *top = (height - ch) / 2;
  *left = (width - cw) / 2;
  *h = ch;
  *w = cw;
}

static int make_coeffs_anew(coeffs_t *c, int in_size, double in0, double in1, int out_size, int layout);
static int pick_hpasses(hpass_t *hp);
static resample_v_fn pick_resample_v(void);
static store_f32_fn pick_store_f32(const lade__imgdec_t *d);
static store_u8_fn pick_store_u8(void);
static int resample_h_layout(resample_h_fn f);

int lade__imgpipe_grow(void *pp, size_t *cap, size_t need) {
  void **p = (void **)pp;
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 256;
  while (n < need) n *= 2;
  lade__aligned_free(*p);
  *cap = 0;
  /* 64-byte aligned: the SIMD pass's 32-byte loads must never split a cache line. */
  if (!(*p = lade__aligned_alloc(n, 64))) return lade__fail(LADE_ENOMEM, "out of memory (%zu bytes of image scratch)", n);
  *cap = n;
  return 0;
}

int lade__imgpipe_new(lade__imgdec_t **out) {
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  *out = NULL;
  lade__imgdec_t *d = calloc(1, sizeof(*d));
  if (!d) return lade__fail(LADE_ENOMEM, "out of memory (image decoder)");
  d->nhp = pick_hpasses(d->hp);
  lade__imgpipe_hpass_use(d, 0);
  d->resample_v = pick_resample_v();
  for (int c = 0; c < 3; c++) {
    for (int v = 0; v < 256; v++) d->lut[c][v] = ((float)v / 255.0f - mean[c]) / stdv[c];
    d->norm[c][0] = mean[c];
    d->norm[c][1] = stdv[c];
    d->norm[c][2] = 1.0f / stdv[c];
    d->norm[c][3] = 1.0f / 255.0f;
  }
  d->store_f32 = pick_store_f32(d);
  d->store_u8 = pick_store_u8();
  *out = d;
  return 0;
}

void **lade__imgpipe_codec_state(lade__imgdec_t *d, int i) { return &d->be_state[i]; }

lade__imgacct_t *lade__imgdec_account(lade__imgdec_t *d) { return &d->acct; }

void lade__imgpipe_free(lade__imgdec_t *d) {
  if (!d) return;
  void *bufs[] = {d->tmp,   d->vrow, d->acc,       d->ch.k,   d->ch.bounds, d->ch.pre, d->ch.k2,   d->ch.k4, d->ch.qidx,
                  d->ch.kn, d->cv.k, d->cv.bounds, d->cv.pre, d->cv.k2,     d->cv.k4,  d->cv.qidx, d->cv.kn};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) lade__aligned_free(bufs[i]);
  free(d);
}

void lade__imgdec_set_decode_scale(lade__imgdec_t *d, bool on) { d->decode_scale = on; }

static double tri_filter(double x) {
  if (x < 0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/*
 * Pillow's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter:
 * output pixel xx samples input [in0, in1) (float box inside [0, in_size)),
 * window clipped to [0, in_size).
 */
static int make_coeffs(coeffs_t *c, int in_size, double in0, double in1, int out_size, int layout) {
  if (c->made.valid && c->made.in0 == in0 && c->made.in1 == in1 && c->made.in_size == in_size &&
      c->made.out_size == out_size && c->made.layout == layout)
    return 0;
  c->made.valid = false;
  int rc = make_coeffs_anew(c, in_size, in0, in1, out_size, layout);
  if (rc == 0) c->made = (coeffs_made_t){in0, in1, in_size, out_size, layout, true};
  return rc;
}

static int make_coeffs_anew(coeffs_t *c, int in_size, double in0, double in1, int out_size, int layout) {
  double scale = (in1 - in0) / out_size, fscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * fscale;
  int ksize = (int)ceil(support) * 2 + 1;
  int rc;
  if ((rc = lade__imgpipe_grow(&c->k, &c->kcap, (size_t)out_size * (size_t)ksize * sizeof(int32_t))) != 0) return rc;
  if ((rc = lade__imgpipe_grow(&c->bounds, &c->bcap, (size_t)out_size * 2 * sizeof(int))) != 0) return rc;
  if ((rc = lade__imgpipe_grow(&c->pre, &c->pcap, (size_t)ksize * sizeof(double))) != 0) return rc;
  c->ksize = ksize;
  double *pre = c->pre;
  double ss = 1.0 / fscale;
  c->taps = 0;
  for (int xx = 0; xx < out_size; xx++) {
    double center = in0 + (xx + 0.5) * scale, ww = 0.0;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    if (xmax > ksize) xmax = ksize; /* cannot happen; keeps the indexing provably in range */
    for (int x = 0; x < xmax; x++) {
      double wt = tri_filter((x + xmin - center + 0.5) * ss);
      pre[x] = wt;
      ww += wt;
    }
    int32_t *k = c->k + (size_t)xx * ksize;
    for (int x = 0; x < xmax; x++) {
      double v = ww != 0.0 ? pre[x] / ww : pre[x];
      k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS)) : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
    }
    for (int x = xmax; x < ksize; x++) k[x] = 0;
    c->bounds[2 * xx] = xmin;
    c->bounds[2 * xx + 1] = xmax;
    if (xmax > c->taps) c->taps = xmax;
  }
  if (layout == LAYOUT_PAIRS) {
    /* Per output pair pi and tap pair tp: 16 int16 of the low 11 bits of
     * the coefficients, then 16 of the high bits, each as
     * {k0[2tp], k0[2tp+1]} x4 channels, then the same for the pair's second
     * pixel k1. The bilinear coefficients are >= 0 and <= 2^22. */
    const size_t np = (size_t)out_size / 2, ntp = (size_t)(c->taps + 1) / 2;
    /* 64-byte aligned: its 32-byte loads must never split a cache line. */
    if ((rc = lade__imgpipe_grow(&c->k2, &c->k2cap, np * ntp * 32 * sizeof(int16_t))) != 0) return rc;
    for (size_t pi = 0; pi < np; pi++)
      for (size_t tp = 0; tp < ntp; tp++) {
        int16_t *o = c->k2 + (pi * ntp + tp) * 32;
        for (int half = 0; half < 2; half++) {
          const int32_t *k = c->k + (2 * pi + (size_t)half) * (size_t)ksize;
          for (int t = 0; t < 2; t++) {
            size_t x = 2 * tp + (size_t)t;
            int32_t kv = x < (size_t)ksize ? k[x] : 0;
            for (int ch = 0; ch < 4; ch++) {
              o[half * 8 + ch * 2 + t] = (int16_t)(kv & 2047);
              o[16 + half * 8 + ch * 2 + t] = (int16_t)(kv >> 11);
            }
          }
        }
      }
  }
  if (layout == LAYOUT_PADDED) {
    /* Per output pixel, its coefficients padded with zeros to whole quads of
     * taps (k's own stride, ksize, may be shorter than that). */
    const size_t nq4 = (size_t)(c->taps + 3) / 4 * 4;
    if ((rc = lade__imgpipe_grow(&c->kn, &c->kncap, (size_t)out_size * nq4 * sizeof(int32_t))) != 0) return rc;
    for (size_t xx = 0; xx < (size_t)out_size; xx++)
      for (size_t x = 0; x < nq4; x++)
        c->kn[xx * nq4 + x] = x < (size_t)ksize ? c->k[xx * (size_t)ksize + x] : 0;
  }
  if (layout == LAYOUT_QUADS) {
    /* Per output quad qi, tap quad tq and 7-bit piece j (k = sum over j of
     * piece_j << 7j, pieces 0..127 so they are valid signed bytes): 64 bytes,
     * for each of the quad's 4 pixels and each of its 4 channels the piece of
     * the 4 taps 4tq..4tq+3. */
    const size_t nq = (size_t)out_size / 4, ntq = (size_t)(c->taps + 3) / 4;
    if ((rc = lade__imgpipe_grow(&c->k4, &c->k4cap, nq * ntq * 4 * 64)) != 0) return rc;
    for (size_t qi = 0; qi < nq; qi++)
      for (size_t tq = 0; tq < ntq; tq++)
        for (int j = 0; j < 4; j++) {
          int8_t *o = c->k4 + ((qi * ntq + tq) * 4 + (size_t)j) * 64;
          for (int px = 0; px < 4; px++) {
            const int32_t *k = c->k + (4 * qi + (size_t)px) * (size_t)ksize;
            for (int t = 0; t < 4; t++) {
              const size_t x = 4 * tq + (size_t)t;
              const int32_t kv = x < (size_t)ksize ? k[x] : 0;
              for (int ch = 0; ch < 4; ch++) o[px * 16 + ch * 4 + t] = (int8_t)((kv >> (7 * j)) & 127);
            }
          }
        }
    /* For the one-load pass: per quad, 64 bytes for RGBX rows and 64 for RGB
     * rows, the byte of a 64-byte load from the quad's first window that each
     * lane of the channel-major layout takes (pixel o's window starts
     * (xmin_o - xmin_0) * bpp bytes in). */
    static const uint8_t by_channel[2][16] = {{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15},
                                              {0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, 0, 0, 0, 0}};
    if ((rc = lade__imgpipe_grow(&c->qidx, &c->qidxcap, nq * 128)) != 0) return rc;
    c->qspan = 0;
    for (size_t qi = 0; qi < nq; qi++) {
      const int *bd = c->bounds + 8 * qi;
      c->qspan = LADE__MAX(c->qspan, bd[6] - bd[0]);
      for (int v = 0; v < 2; v++)
        for (int px = 0; px < 4; px++)
          for (int b = 0; b < 16; b++)
            c->qidx[qi * 128 + (size_t)v * 64 + (size_t)px * 16 + (size_t)b] =
                (uint8_t)(((bd[2 * px] - bd[0]) * (4 - v) + by_channel[v][b]) & 63);
    }
  }
  return 0;
}

/* Hot loops get an AVX2 clone picked at load time (ifunc); the arithmetic is
 * the same integer arithmetic, so results do not depend on the CPU. Pixels
 * are RGBX (4 bytes) so one tap is one 4-lane multiply-add. */
/* ifunc resolvers run before a sanitizer runtime is up and crash in
 * instrumented builds: no clones there (gcc and clang spell it differently). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LADE__NO_CLONES 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LADE__NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(LADE__NO_CLONES)
#define LADE__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LADE__CLONES
#endif

static void resample_h_c(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size) {
  resample_h_bpp(c, in, out, 0, out_size, 4);
}

/*
 * The horizontal passes the JPEG backend's tuner tries (imgjpeg.c): the
 * fastest kind this CPU has (VBMI, else VNNI, else AVX2, else NEON, else
 * C) on RGB rows, the default, and on RGBX rows. The kinds themselves are
 * not tried against each other: on the CPUs measured they differ by a few
 * per cent of the pass (on the Intel Xeon of issue 32 all three were
 * equally slow), which timing on a few images cannot tell apart (the
 * tuner then picked a different kind run by run, for nothing, at some
 * 10 ms of trials; bench/RESULTS.md), while libjpeg's RGB or RGBX output
 * and its rows per call differ by more. Every pass is exact (the same
 * bytes); the others are there for LADE_HPASS and the switches. For tests and comparisons:
 * LADE_NO_SIMD=1 the C loop only; LADE_NO_AVX512=1 at most AVX2;
 * LADE_NO_VBMI=1 not the one-load VBMI pass; LADE_NO_RGB=1 RGBX rows only;
 * LADE_HPASS=NAME that pass alone (a name below; others are ignored). On
 * aarch64 the NEON passes (imgkern_neon.c); the x86 ones are in imgkern_x86.c.
 */
static int pick_hpasses(hpass_t *hp) {
  int n = 0;
#ifdef LADE__HAVE_X86_SIMD
  if (!getenv("LADE_NO_SIMD")) {
    const bool rgb = !getenv("LADE_NO_RGB");
    if (!getenv("LADE_NO_AVX512") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni")) {
      if (!getenv("LADE_NO_VBMI") && __builtin_cpu_supports("avx512vbmi")) {
        if (rgb) hp[n++] = (hpass_t){lade__resample_h_vbmi, lade__resample_h_vbmi_rgb, "vbmi-rgb"};
        hp[n++] = (hpass_t){lade__resample_h_vbmi, NULL, "vbmi-rgbx"};
      }
      if (rgb) hp[n++] = (hpass_t){lade__resample_h_vnni, lade__resample_h_vnni_rgb, "vnni-rgb"};
      hp[n++] = (hpass_t){lade__resample_h_vnni, NULL, "vnni-rgbx"};
    }
    if (__builtin_cpu_supports("avx2")) {
      if (rgb) hp[n++] = (hpass_t){lade__resample_h_avx2, lade__resample_h_avx2_rgb, "avx2-rgb"};
      hp[n++] = (hpass_t){lade__resample_h_avx2, NULL, "avx2-rgbx"};
    }
  }
#elif defined(LADE__HAVE_NEON)
  if (!getenv("LADE_NO_SIMD")) {
    if (!getenv("LADE_NO_RGB")) hp[n++] = (hpass_t){lade__resample_h_neon, lade__resample_h_neon_rgb, "neon-rgb"};
    hp[n++] = (hpass_t){lade__resample_h_neon, NULL, "neon-rgbx"};
  }
#endif
  if (n == 0) hp[n++] = (hpass_t){resample_h_c, NULL, "c-rgbx"};
  const char *only = getenv("LADE_HPASS");
  for (int i = 0; only && i < n; i++)
    if (!strcmp(hp[i].name, only)) {
      hp[0] = hp[i];
      return 1;
    }
  int k = 1; /* the default kind's other row kind */
  for (int i = 1; i < n; i++)
    if (hp[i].rgbx == hp[0].rgbx) hp[k++] = hp[i];
  return k;
}

int lade__imgpipe_hpass_count(const lade__imgdec_t *d) { return d->nhp; }

void lade__imgpipe_hpass_use(lade__imgdec_t *d, int i) {
  d->hcur = i;
  d->resample_h = d->hp[i].rgbx;
  d->resample_h_rgb = d->hp[i].rgb;
}

void lade__imgpipe_tuned(lade__imgdec_t *d, int rows, double cost_s) {
  d->tuned_rows = rows;
  d->tuned_cost = cost_s;
}

bool lade__imgdec_choices(const lade__imgdec_t *d, char *buf, size_t size) {
  if (!d->tuned_rows) return false;
  if (size)
    snprintf(buf, size, "%s, %d rows per libjpeg call (trials cost %.1f ms)", d->hp[d->hcur].name, d->tuned_rows,
             d->tuned_cost * 1e3);
  return true;
}

static int resample_h_layout(resample_h_fn f) {
#ifdef LADE__HAVE_X86_SIMD
  if (f == lade__resample_h_vnni || f == lade__resample_h_vbmi) return LAYOUT_QUADS;
  if (f == lade__resample_h_avx2) return LAYOUT_PAIRS;
#elif defined(LADE__HAVE_NEON)
  if (f == lade__resample_h_neon) return LAYOUT_PADDED;
#endif
  LADE__UNUSED(f);
  return LAYOUT_C;
}

/* One output row of the vertical pass over n bytes of RGBX. */
LADE__CLONES static void resample_v(const int32_t *restrict k, int taps, const uint8_t *restrict rows, size_t stride,
                                   int32_t *restrict acc, uint8_t *restrict out, size_t n) {
  resample_v_c(k, taps, rows, stride, acc, out, n);
}

/* The vertical pass for this CPU (LADE_NO_SIMD and LADE_NO_AVX512 as for
 * the horizontal one). */
static resample_v_fn pick_resample_v(void) {
#ifdef LADE__HAVE_X86_SIMD
  if (getenv("LADE_NO_SIMD")) return resample_v;
  if (!getenv("LADE_NO_AVX512") && __builtin_cpu_supports("avx512f")) return lade__resample_v_avx512;
  if (__builtin_cpu_supports("avx2")) return lade__resample_v_avx2;
#elif defined(LADE__HAVE_NEON)
  if (!getenv("LADE_NO_SIMD")) return lade__resample_v_neon;
#endif
  return resample_v;
}

/*
 * The float32 store: an output row of RGBX bytes (mirrored with flip) to
 * three planes of (v/255 - mean) / std, as torchvision's ToTensor and
 * Normalize compute it in float32. The scalar store reads the values from
 * d->lut. The SIMD stores compute them 16 (8) pixels at a time, each
 * division as a multiply by the rounded reciprocal and one FMA correction
 * step; that is not the correctly rounded quotient for every input, but the
 * inputs here are 256 per channel, so pick_store_f32 runs the SIMD store
 * over all of them once and keeps it only when every value equals the
 * LUT's (on a CPU where one differed, the scalar store stays).
 */

static store_u8_fn pick_store_u8(void) {
#ifdef LADE__HAVE_X86_SIMD
  if (getenv("LADE_NO_SIMD")) return store_u8_c;
  if (!getenv("LADE_NO_AVX512") && !getenv("LADE_NO_VBMI") && __builtin_cpu_supports("avx512vbmi") &&
      __builtin_cpu_supports("avx512bw"))
    return lade__store_u8_vbmi;
  if (__builtin_cpu_supports("avx2")) return lade__store_u8_avx2;
#elif defined(LADE__HAVE_NEON)
  if (!getenv("LADE_NO_SIMD")) return lade__store_u8_neon;
#endif
  return store_u8_c;
}

/* True when f stores every value of every channel as the LUT holds it, both
 * ways round and with a tail: 263 pixels (v, 255-v, v*7 mod 256 for v = i
 * mod 256; blue also + 101 past the first 256, so that no pixel of the tail
 * equals one it could be mistaken for) run through f. */
static bool store_f32_exact(const lade__imgdec_t *d, store_f32_fn f) {
  enum { N = 263 }; /* every value, and N % 16 = N % 8 = 7 pixels past the last whole vector */
  uint8_t row[N * 4];
  float o[3][N];
  for (int i = 0; i < N; i++) {
    const int v = i % 256;
    row[4 * i] = (uint8_t)v;
    row[4 * i + 1] = (uint8_t)(255 - v);
    row[4 * i + 2] = (uint8_t)(v * 7 + (i >> 8) * 101);
    row[4 * i + 3] = 0x5A;
  }
  for (int flip = 0; flip < 2; flip++) {
    f(d, row, N, flip, o[0], o[1], o[2]);
    for (int x = 0; x < N; x++) {
      const uint8_t *p = row + (size_t)(flip ? N - 1 - x : x) * 4;
      for (int c = 0; c < 3; c++)
        if (memcmp(&o[c][x], &d->lut[c][p[c]], sizeof(float)) != 0) return false;
    }
  }
  return true;
}

/* The float32 store for this CPU (LADE_NO_SIMD and LADE_NO_AVX512 as for
 * the passes), kept only when exact. */
static store_f32_fn pick_store_f32(const lade__imgdec_t *d) {
  store_f32_fn f = store_f32_lut;
#ifdef LADE__HAVE_X86_SIMD
  if (getenv("LADE_NO_SIMD")) return f;
  if (!getenv("LADE_NO_AVX512") && __builtin_cpu_supports("avx512f")) f = lade__store_f32_avx512;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f = lade__store_f32_avx2;
#elif defined(LADE__HAVE_NEON)
  if (!getenv("LADE_NO_SIMD")) f = lade__store_f32_neon;
#endif
  return f == store_f32_lut || store_f32_exact(d, f) ? f : store_f32_lut;
}

const char *lade__imgdec_store_f32_name(const lade__imgdec_t *d) {
#ifdef LADE__HAVE_X86_SIMD
  if (d->store_f32 == lade__store_f32_avx512) return "avx512";
  if (d->store_f32 == lade__store_f32_avx2) return "avx2";
#elif defined(LADE__HAVE_NEON)
  if (d->store_f32 == lade__store_f32_neon) return "neon";
#endif
  return d->store_f32 == store_f32_lut ? "c" : "?";
}

void lade__imgpipe_kernels(const lade__imgdec_t *d, char *buf, size_t cap) {
  typedef void (*any_fn)(void); /* the kernels compared by address, whatever their type */
  const struct {
    any_fn f;
    const char *name;
  } names[] = {
      {(any_fn)resample_h_c, "c"}, {(any_fn)resample_v, "c"}, {(any_fn)store_u8_c, "c"},
#ifdef LADE__HAVE_X86_SIMD
      {(any_fn)lade__resample_h_avx2, "avx2"}, {(any_fn)lade__resample_h_vnni, "vnni"}, {(any_fn)lade__resample_h_vbmi, "vbmi"},
      {(any_fn)lade__resample_h_vnni_rgb, "vnni"}, {(any_fn)lade__resample_h_vbmi_rgb, "vbmi"}, {(any_fn)lade__resample_h_avx2_rgb, "avx2"},
      {(any_fn)lade__resample_v_avx512, "avx512"}, {(any_fn)lade__resample_v_avx2, "avx2"},
      {(any_fn)lade__store_u8_vbmi, "vbmi"}, {(any_fn)lade__store_u8_avx2, "avx2"},
#elif defined(LADE__HAVE_NEON)
      {(any_fn)lade__resample_h_neon, "neon"}, {(any_fn)lade__resample_h_neon_rgb, "neon"},
      {(any_fn)lade__resample_v_neon, "neon"}, {(any_fn)lade__store_u8_neon, "neon"},
#endif
  };
  const any_fn f[4] = {(any_fn)d->resample_h, (any_fn)d->resample_h_rgb, (any_fn)d->resample_v, (any_fn)d->store_u8};
  const char *nm[4] = {"?", "none", "?", "?"};
  for (int i = 0; i < 4; i++)
    for (size_t j = 0; f[i] && j < sizeof(names) / sizeof(names[0]); j++)
      if (names[j].f == f[i]) nm[i] = names[j].name;
  snprintf(buf, cap, "h=%s rgb=%s v=%s u8=%s f32=%s", nm[0], nm[1], nm[2], nm[3], lade__imgdec_store_f32_name(d));
}

int lade__imgpipe_dct_factor(const lade__imgdec_t *d, const lade__imgbox_t *b, int out_size) {
  int f = 1;
  if (d->decode_scale)
    while (f < 8 && b->w / (2 * f) >= out_size && b->h / (2 * f) >= out_size) f *= 2;
  return f;
}

int lade__imgpipe_begin(lade__imgdec_t *d, int W, int H, int f, int sw, int sh, const lade__imgbox_t *b,
                        int out_size, lade__imgplan_t *plan) {
  int rc;
  if ((uint64_t)W * (uint64_t)H > LADE__IMG_MAX_PIXELS)
    return lade__fail(LADE_EFORMAT, "image of %dx%d pixels is larger than supported", W, H);
  if (W <= 0 || H <= 0 || sw <= 0 || sh <= 0) return lade__fail(LADE_EFORMAT, "image of %dx%d pixels", W, H);
  if (!(b->w > 0 && b->h > 0 && b->left >= 0 && b->top >= 0 && b->left + b->w <= W + 1e-6 &&
        b->top + b->h <= H + 1e-6))
    return lade__fail(LADE_EINVAL, "crop box (top %g, left %g, %gx%g) outside the %dx%d image", b->top, b->left,
                      b->w, b->h, W, H);
  /* The box and the decoded region in scaled pixels. With clip_to_box the
   * region is the box rounded outwards; otherwise it also covers the filter
   * support so the edge pixels see their neighbours (resize, then crop). */
  double bx0 = b->left / f, bx1 = (b->left + b->w) / f, by0 = b->top / f, by1 = (b->top + b->h) / f;
  double mx = 0, my = 0;
  if (!b->clip_to_box) {
    mx = ceil(LADE__MAX(1.0, (bx1 - bx0) / out_size)) + 1;
    my = ceil(LADE__MAX(1.0, (by1 - by0) / out_size)) + 1;
  }
  int rx0 = (int)floor(bx0 - mx), rx1 = (int)ceil(bx1 + mx), ry0 = (int)floor(by0 - my), ry1 = (int)ceil(by1 + my);
  if (rx0 < 0) rx0 = 0;
  if (ry0 < 0) ry0 = 0;
  if (rx1 > sw) rx1 = sw;
  if (ry1 > sh) ry1 = sh;
  if (rx1 <= rx0) rx1 = LADE__MIN(sw, rx0 + 1);
  if (ry1 <= ry0) ry1 = LADE__MIN(sh, ry0 + 1);
  const int rw = rx1 - rx0, rh = ry1 - ry0;

  if ((rc = make_coeffs(&d->ch, rw, bx0 - rx0, bx1 - rx0, out_size, resample_h_layout(d->resample_h))) != 0)
    return rc;
  if ((rc = make_coeffs(&d->cv, rh, by0 - ry0, by1 - ry0, out_size, LAYOUT_C)) != 0) return rc;
  /* Only the rows the vertical filter reads are decoded (Pillow does the same). */
  int vfirst = d->cv.bounds[0], vlast = vfirst;
  for (int yy = 0; yy < out_size; yy++) {
    int e = d->cv.bounds[2 * yy] + d->cv.bounds[2 * yy + 1];
    if (e > vlast) vlast = e;
  }
  const size_t orow = (size_t)out_size * 4; /* RGBX */
  const int nrows = vlast - vfirst;
  if ((rc = lade__imgpipe_grow(&d->tmp, &d->tmp_cap, (size_t)LADE__MAX(nrows, 1) * orow)) != 0) return rc;
  if ((rc = lade__imgpipe_grow(&d->vrow, &d->vrow_cap, orow)) != 0) return rc;
  if ((rc = lade__imgpipe_grow(&d->acc, &d->acc_cap, orow * sizeof(int32_t))) != 0) return rc;
  d->out_size = out_size;
  d->vfirst = vfirst;
  plan->rx0 = rx0;
  plan->rw = rw;
  plan->y0 = ry0 + vfirst;
  plan->nrows = nrows;
  /* Rows are followed by `pad` readable bytes for the SIMD horizontal passes' over-reads. */
  plan->pad = (size_t)d->ch.ksize * 4 + 80; /* + 16 for the pair and quad passes, + 80 for the one-load pass */
  return 0;
}

void lade__imgpipe_row(lade__imgdec_t *d, int r, const uint8_t *rgbx) {
  d->resample_h(&d->ch, rgbx, d->tmp + (size_t)r * d->out_size * 4, d->out_size);
}

bool lade__imgpipe_takes_rgb(const lade__imgdec_t *d) { return d->resample_h_rgb != NULL; }

void lade__imgpipe_row_rgb(lade__imgdec_t *d, int r, const uint8_t *rgb) {
  assert(d->resample_h_rgb);
  d->resample_h_rgb(&d->ch, rgb, d->tmp + (size_t)r * d->out_size * 4, d->out_size);
}

/* Vertical pass, one output row at a time; then flip and store. */
void lade__imgpipe_finish(lade__imgdec_t *d, bool flip, int dtype, void *out) {
  const int out_size = d->out_size, ksize = d->cv.ksize;
  const size_t orow = (size_t)out_size * 4;
  int32_t *acc = d->acc;
  uint8_t *vrow = d->vrow;
  for (int yy = 0; yy < out_size; yy++) {
    const int ymin = d->cv.bounds[2 * yy] - d->vfirst, n = d->cv.bounds[2 * yy + 1];
    const int32_t *k = d->cv.k + (size_t)yy * ksize;
    d->resample_v(k, n, d->tmp + (size_t)ymin * orow, orow, acc, vrow, orow);
    if (dtype == LADE_DTYPE_UINT8) {
      d->store_u8(vrow, out_size, flip, (uint8_t *)out + (size_t)yy * out_size * 3);
    } else {
      const size_t plane = (size_t)out_size * out_size;
      float *o0 = (float *)out + (size_t)yy * out_size;
      d->store_f32(d, vrow, out_size, flip, o0, o0 + plane, o0 + 2 * plane);
    }
  }
}
