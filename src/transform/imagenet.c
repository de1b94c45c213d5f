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
  void *bufs[] = {d->tmp, d->vrow, d->acc, d->ch.k, d->ch.bounds, d->ch.pre, d->ch.k2, d->ch.k4, d->ch.qidx,
                  d->cv.k, d->cv.bounds, d->cv.pre, d->cv.k2, d->cv.k4, d->cv.qidx};
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

static void resample_h_from(const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int from,
                            int out_size) {
  resample_h_bpp(c, in, out, from, out_size, 4);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* the x86 kernels below: AVX2, and AVX-512 (VNNI, VBMI) chosen at run time by cpuid */
#define LADE__HAVE_X86_SIMD 1
/*
 * Two output pixels per 256-bit register, two taps per multiply: pmaddwd on
 * 16-bit lanes {tap a, tap b} per channel gives a*ka + b*kb in 32 bits. The
 * 22-bit coefficients are split into high and low 11-bit halves (two
 * pmaddwd), so the sum is exactly Pillow's 32-bit fixed-point sum. Every pair
 * runs ceil(taps/2) tap pairs (taps: the most any pixel has; ksize, the
 * filter's window, is an upper bound that can be one or two more): padded
 * coefficients are zero and the input row has ksize*4+16 readable bytes
 * past its end. (A fixed trip count also
 * avoids a branch mispredict per pair.) Tap pairs go two at a time: one
 * 16-byte load per pixel of the pair (its window's four taps, one 128-bit
 * lane each) and two in-lane byte shuffles that zero-extend each tap pair's
 * channels into 16-bit lanes, where one pair at a time took two 8-byte loads,
 * an unpack, a shuffle and a cross-lane widening (twice the shuffle port's
 * work, which bounds this loop on Intel). RGB rows (bpp 3) shuffle zeros into
 * the X lanes. An odd last tap pair goes alone. Two pairs of pixels share
 * one pack and store. The trip count is a constant for up to 8 taps (below),
 * which halved the pass: the loop over taps, its counters and the reloads
 * of c's fields after each byte store cost as much as the arithmetic. The
 * pass alone (build/tests/bench_image_passes, Zen 5, LADE_NO_AVX512=1):
 * 330->224 490 -> 420 -> 144 ns a row, 1200->224 1,020 -> 600 -> 440 ns
 * (bench/RESULTS.md).
 */
/* Output pixels xx and xx+1 as Pillow's fixed-point sums, shifted: 8 lanes.
 * p0 and p1 are the pair's window starts, k its coefficients; ntp is a
 * constant where the caller is specialised, so the tap loop unrolls. */
__attribute__((target("avx2"), always_inline)) static inline __m256i h_avx2_pair(const uint8_t *p0, const uint8_t *p1,
                                                                                const int16_t *k2, const int ntp,
                                                                                const int bpp, __m256i even,
                                                                                __m256i odd) {
  __m256i lo = _mm256_set1_epi32(1 << (PRECISION_BITS - 1)), hi = _mm256_setzero_si256();
  int tp = 0;
  for (; tp + 1 < ntp; tp += 2) {
    const __m256i w = _mm256_loadu2_m128i((const __m128i *)(p1 + 2 * bpp * tp), (const __m128i *)(p0 + 2 * bpp * tp));
    const __m256i pa = _mm256_shuffle_epi8(w, even), pb = _mm256_shuffle_epi8(w, odd);
    const int16_t *k = k2 + 32 * tp;
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(pa, _mm256_load_si256((const __m256i *)k)));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(pa, _mm256_load_si256((const __m256i *)(k + 16))));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(pb, _mm256_load_si256((const __m256i *)(k + 32))));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(pb, _mm256_load_si256((const __m256i *)(k + 48))));
  }
  if (tp < ntp) {
    const __m128i a = _mm_loadl_epi64((const __m128i *)(p0 + 2 * bpp * tp));
    const __m128i b = _mm_loadl_epi64((const __m128i *)(p1 + 2 * bpp * tp));
    const __m256i pa = _mm256_shuffle_epi8(_mm256_set_m128i(b, a), even);
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(pa, _mm256_load_si256((const __m256i *)(k2 + 32 * tp))));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(pa, _mm256_load_si256((const __m256i *)(k2 + 32 * tp + 16))));
  }
  return _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, 11), lo), PRECISION_BITS);
}

/* Pairs of pairs up to out_size (rounded down to 4); returns the first pixel
 * not written. The bounds, the coefficients and the rows are read through
 * locals: the stores are bytes, which may alias anything, so fields of c
 * would be read again after every store. */
__attribute__((target("avx2"), always_inline)) static inline int h_avx2_quads(const coeffs_t *c,
                                                                             const uint8_t *restrict in,
                                                                             uint8_t *restrict out, int out_size,
                                                                             const int ntp, const int bpp) {
  const int8_t Z = -128;
  /* pair 2q of a lane's four taps, then pair 2q+1: {tap a, tap b} per channel as 16-bit lanes */
  const __m128i e4 = _mm_setr_epi8(0, Z, 4, Z, 1, Z, 5, Z, 2, Z, 6, Z, 3, Z, 7, Z),
                e3 = _mm_setr_epi8(0, Z, 3, Z, 1, Z, 4, Z, 2, Z, 5, Z, Z, Z, Z, Z),
                o4 = _mm_setr_epi8(8, Z, 12, Z, 9, Z, 13, Z, 10, Z, 14, Z, 11, Z, 15, Z),
                o3 = _mm_setr_epi8(6, Z, 9, Z, 7, Z, 10, Z, 8, Z, 11, Z, Z, Z, Z, Z);
  const __m256i even = _mm256_broadcastsi128_si256(bpp == 4 ? e4 : e3);
  const __m256i odd = _mm256_broadcastsi128_si256(bpp == 4 ? o4 : o3);
  /* packs and packus leave pixels 0, 2 | 1, 3 in the lanes' low 8 bytes */
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int *bd = c->bounds;
  const int16_t *k2 = c->k2;
  const size_t kstep = (size_t)ntp * 32; /* int16 per pair */
  int xx = 0;
  for (; xx + 3 < out_size; xx += 4, bd += 8, k2 += 2 * kstep) {
    const __m256i s01 = h_avx2_pair(in + (size_t)bd[0] * bpp, in + (size_t)bd[2] * bpp, k2, ntp, bpp, even, odd);
    const __m256i s23 =
        h_avx2_pair(in + (size_t)bd[4] * bpp, in + (size_t)bd[6] * bpp, k2 + kstep, ntp, bpp, even, odd);
    const __m256i w = _mm256_packus_epi16(_mm256_packs_epi32(s01, s23), _mm256_setzero_si256());
    _mm_storeu_si128((__m128i *)(out + 4 * xx), _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(w, order)));
  }
  if (xx + 1 < out_size) {
    const __m256i s = h_avx2_pair(in + (size_t)bd[0] * bpp, in + (size_t)bd[2] * bpp, k2, ntp, bpp, even, odd);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    _mm_storel_epi64((__m128i *)(out + 4 * xx), _mm_packus_epi16(w, w));
    xx += 2;
  }
  return xx;
}

/* The trip count as a constant for the usual downscales (ntp 1-4: up to 8
 * taps, about 3.5x), so the tap loop unrolls; any other count loops. */
__attribute__((target("avx2"), always_inline)) static inline void resample_h_avx2_bpp(const coeffs_t *c,
                                                                                    const uint8_t *restrict in,
                                                                                    uint8_t *restrict out,
                                                                                    int out_size, const int bpp) {
  const int ntp = (c->taps + 1) / 2;
  int xx;
  switch (ntp) {
    case 1: xx = h_avx2_quads(c, in, out, out_size, 1, bpp); break;
    case 2: xx = h_avx2_quads(c, in, out, out_size, 2, bpp); break;
    case 3: xx = h_avx2_quads(c, in, out, out_size, 3, bpp); break;
    case 4: xx = h_avx2_quads(c, in, out, out_size, 4, bpp); break;
    default: xx = h_avx2_quads(c, in, out, out_size, ntp, bpp); break;
  }
  resample_h_bpp(c, in, out, xx, out_size, bpp); /* the odd last pixel */
}

__attribute__((target("avx2"))) static void resample_h_avx2(const coeffs_t *c, const uint8_t *restrict in,
                                                             uint8_t *restrict out, int out_size) {
  resample_h_avx2_bpp(c, in, out, out_size, 4);
}

__attribute__((target("avx2"))) static void resample_h_avx2_rgb(const coeffs_t *c, const uint8_t *restrict in,
                                                                 uint8_t *restrict out, int out_size) {
  resample_h_avx2_bpp(c, in, out, out_size, 3);
}

/*
 * Four output pixels per 512-bit register, four taps per multiply: vpdpbusd
 * adds, per 32-bit lane, four products of an unsigned byte (one channel of
 * four consecutive input pixels, gathered by a byte shuffle from the RGBX
 * row) and a signed byte (the same four taps' coefficients). The 22-bit
 * coefficients (0..2^22 for the bilinear filter) are split into four 7-bit
 * pieces, one accumulator each, recombined with shifts: the sum is Pillow's
 * 32-bit fixed-point sum exactly (no partial sum can overflow). Every quad
 * runs ceil(taps/4) tap quads (a downscale below 1.5x has at most 4 taps:
 * one quad); padded coefficients are zero and the row
 * has ksize*4+16 readable bytes past its end, which covers the last 16-byte
 * load.
 */
/* Quads up to out_size (rounded down to 4), ntq a constant where the caller
 * is specialised; returns the first pixel not written (c's fields in locals,
 * as for the AVX2 pass). */
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline int h_vnni_quads(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size, const int ntq,
    const int bpp) {
  const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
  /* RGBX: bytes t*4 + ch to ch*4 + t; RGB: t*3 + ch, and zeros for X */
  const __m512i by_channel = _mm512_broadcast_i32x4(
      bpp == 4 ? _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)
               : _mm_setr_epi8(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -128, -128, -128, -128));
  const int *bd = c->bounds;
  const int8_t *k4 = c->k4;
  int xx = 0;
  for (; xx + 3 < out_size; xx += 4, bd += 8, k4 += (size_t)ntq * 256) {
    const uint8_t *p0 = in + (size_t)bd[0] * bpp, *p1 = in + (size_t)bd[2] * bpp, *p2 = in + (size_t)bd[4] * bpp,
                  *p3 = in + (size_t)bd[6] * bpp;
    __m512i a0 = half, a1 = _mm512_setzero_si512(), a2 = a1, a3 = a1;
    for (int tq = 0; tq < ntq; tq++) {
      __m512i px = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p0 + 4 * bpp * tq)));
      px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(p1 + 4 * bpp * tq)), 1);
      px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(p2 + 4 * bpp * tq)), 2);
      px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(p3 + 4 * bpp * tq)), 3);
      px = _mm512_shuffle_epi8(px, by_channel);
      const int8_t *k = k4 + 256 * tq;
      a0 = _mm512_dpbusd_epi32(a0, px, _mm512_load_si512((const void *)k));
      a1 = _mm512_dpbusd_epi32(a1, px, _mm512_load_si512((const void *)(k + 64)));
      a2 = _mm512_dpbusd_epi32(a2, px, _mm512_load_si512((const void *)(k + 128)));
      a3 = _mm512_dpbusd_epi32(a3, px, _mm512_load_si512((const void *)(k + 192)));
    }
    __m512i s = _mm512_add_epi32(a0, _mm512_slli_epi32(a1, 7));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_slli_epi32(a2, 14), _mm512_slli_epi32(a3, 21)));
    s = _mm512_srai_epi32(s, PRECISION_BITS);
    s = _mm512_max_epi32(s, _mm512_setzero_si512()); /* clip8's lower bound; the store saturates above */
    _mm_storeu_si128((__m128i *)(out + 4 * xx), _mm512_cvtusepi32_epi8(s));
  }
  return xx;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void resample_h_vnni_bpp(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size, const int bpp) {
  const int ntq = (c->taps + 3) / 4;
  /* the trip count as a constant for up to 12 taps, so the tap loop unrolls */
  const int xx = ntq == 1   ? h_vnni_quads(c, in, out, out_size, 1, bpp)
                 : ntq == 2 ? h_vnni_quads(c, in, out, out_size, 2, bpp)
                 : ntq == 3 ? h_vnni_quads(c, in, out, out_size, 3, bpp)
                            : h_vnni_quads(c, in, out, out_size, ntq, bpp);
  resample_h_bpp(c, in, out, xx, out_size, bpp); /* the last out_size % 4 pixels */
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void resample_h_vnni(const coeffs_t *c,
                                                                                   const uint8_t *restrict in,
                                                                                   uint8_t *restrict out,
                                                                                   int out_size) {
  resample_h_vnni_bpp(c, in, out, out_size, 4);
}

/* RGB rows: libjpeg's colour conversion to 3 bytes a pixel is cheaper than to 4. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void resample_h_vnni_rgb(const coeffs_t *c,
                                                                                       const uint8_t *restrict in,
                                                                                       uint8_t *restrict out,
                                                                                       int out_size) {
  resample_h_vnni_bpp(c, in, out, out_size, 3);
}

/*
 * The same arithmetic with one 64-byte load per quad and tap quad: a quad's
 * four windows lie within 64 bytes of the first when the downscale is small
 * (qspan * bpp + 16 <= 64: up to ~4x for RGBX), and vpermb (AVX512_VBMI)
 * picks every lane's byte from that one load by the quad's precomputed
 * indices, where the VNNI pass loads each window and inserts and shuffles
 * them. Wider quads take the VNNI pass. Reads 64 bytes from a window start:
 * the rows have ksize*4+80 readable bytes past their end.
 */
/* Quads up to out_size (rounded down to 4), ntq a constant where the caller
 * is specialised; returns the first pixel not written. Fields of c are read
 * into locals: the byte stores may alias them. */
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"), always_inline)) static inline int h_vbmi_quads(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size, const int ntq,
    const int bpp) {
  const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
  const __mmask64 keep = bpp == 4 ? ~(__mmask64)0 : (__mmask64)0x0FFF0FFF0FFF0FFFull; /* RGB: X lanes 0 */
  const int *bd = c->bounds;
  const uint8_t *qidx = c->qidx + (bpp == 4 ? 0 : 64);
  const int8_t *k4 = c->k4;
  int xx = 0;
  for (; xx + 3 < out_size; xx += 4, bd += 8, qidx += 128, k4 += (size_t)ntq * 256) {
    const uint8_t *p0 = in + (size_t)bd[0] * bpp;
    const __m512i idx = _mm512_load_si512((const void *)qidx);
    __m512i a0 = half, a1 = _mm512_setzero_si512(), a2 = a1, a3 = a1;
    for (int tq = 0; tq < ntq; tq++) {
      const __m512i px =
          _mm512_maskz_permutexvar_epi8(keep, idx, _mm512_loadu_si512((const void *)(p0 + 4 * bpp * tq)));
      const int8_t *k = k4 + 256 * tq;
      a0 = _mm512_dpbusd_epi32(a0, px, _mm512_load_si512((const void *)k));
      a1 = _mm512_dpbusd_epi32(a1, px, _mm512_load_si512((const void *)(k + 64)));
      a2 = _mm512_dpbusd_epi32(a2, px, _mm512_load_si512((const void *)(k + 128)));
      a3 = _mm512_dpbusd_epi32(a3, px, _mm512_load_si512((const void *)(k + 192)));
    }
    __m512i s = _mm512_add_epi32(a0, _mm512_slli_epi32(a1, 7));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_slli_epi32(a2, 14), _mm512_slli_epi32(a3, 21)));
    s = _mm512_srai_epi32(s, PRECISION_BITS);
    s = _mm512_max_epi32(s, _mm512_setzero_si512());
    _mm_storeu_si128((__m128i *)(out + 4 * xx), _mm512_cvtusepi32_epi8(s));
  }
  return xx;
}

__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"), always_inline)) static inline void resample_h_vbmi_bpp(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size, const int bpp) {
  if (c->qspan * bpp + 16 > 64) {
    resample_h_vnni_bpp(c, in, out, out_size, bpp);
    return;
  }
  const int ntq = (c->taps + 3) / 4;
  /* the trip count as a constant for up to 12 taps (about 5x), so the tap loop unrolls */
  const int xx = ntq == 1   ? h_vbmi_quads(c, in, out, out_size, 1, bpp)
                 : ntq == 2 ? h_vbmi_quads(c, in, out, out_size, 2, bpp)
                 : ntq == 3 ? h_vbmi_quads(c, in, out, out_size, 3, bpp)
                            : h_vbmi_quads(c, in, out, out_size, ntq, bpp);
  resample_h_bpp(c, in, out, xx, out_size, bpp); /* the last out_size % 4 pixels */
}

__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"))) static void resample_h_vbmi(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size) {
  resample_h_vbmi_bpp(c, in, out, out_size, 4);
}

__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"))) static void resample_h_vbmi_rgb(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size) {
  resample_h_vbmi_bpp(c, in, out, out_size, 3);
}
#endif


static void resample_h_c(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size) {
  resample_h_from(c, in, out, 0, out_size);
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
 * aarch64 the NEON passes (imgkern_neon.c).
 */
static int pick_hpasses(hpass_t *hp) {
  int n = 0;
#ifdef LADE__HAVE_X86_SIMD
  if (!getenv("LADE_NO_SIMD")) {
    const bool rgb = !getenv("LADE_NO_RGB");
    if (!getenv("LADE_NO_AVX512") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni")) {
      if (!getenv("LADE_NO_VBMI") && __builtin_cpu_supports("avx512vbmi")) {
        if (rgb) hp[n++] = (hpass_t){resample_h_vbmi, resample_h_vbmi_rgb, "vbmi-rgb"};
        hp[n++] = (hpass_t){resample_h_vbmi, NULL, "vbmi-rgbx"};
      }
      if (rgb) hp[n++] = (hpass_t){resample_h_vnni, resample_h_vnni_rgb, "vnni-rgb"};
      hp[n++] = (hpass_t){resample_h_vnni, NULL, "vnni-rgbx"};
    }
    if (__builtin_cpu_supports("avx2")) {
      if (rgb) hp[n++] = (hpass_t){resample_h_avx2, resample_h_avx2_rgb, "avx2-rgb"};
      hp[n++] = (hpass_t){resample_h_avx2, NULL, "avx2-rgbx"};
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
  if (f == resample_h_vnni || f == resample_h_vbmi) return LAYOUT_QUADS;
  if (f == resample_h_avx2) return LAYOUT_PAIRS;
#endif
  LADE__UNUSED(f);
  return LAYOUT_C;
}

/* One output row of the vertical pass over n bytes of RGBX. */
LADE__CLONES static void resample_v(const int32_t *restrict k, int taps, const uint8_t *restrict rows, size_t stride,
                                   int32_t *restrict acc, uint8_t *restrict out, size_t n) {
  resample_v_c(k, taps, rows, stride, acc, out, n);
}

#ifdef LADE__HAVE_X86_SIMD
/*
 * The vertical pass 64 bytes (16 RGBX pixels) at a time with the sums in
 * four registers through all taps, instead of an accumulator row in memory
 * read and written once per tap; the same int32 arithmetic (vpmulld is the
 * low 32 bits of the product, which is the whole product here).
 */
__attribute__((target("avx512f"))) static void resample_v_avx512(const int32_t *restrict k, int taps,
                                                                 const uint8_t *restrict rows, size_t stride,
                                                                 int32_t *restrict acc, uint8_t *restrict out,
                                                                 size_t n) {
  const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1)), zero = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512i s0 = half, s1 = half, s2 = half, s3 = half;
    const uint8_t *p = rows + i;
    for (int y = 0; y < taps; y++, p += stride) {
      const __m512i kv = _mm512_set1_epi32(k[y]);
      s0 = _mm512_add_epi32(s0, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)), kv));
      s1 = _mm512_add_epi32(s1, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))), kv));
      s2 = _mm512_add_epi32(s2, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 32))), kv));
      s3 = _mm512_add_epi32(s3, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 48))), kv));
    }
    /* clip8: the shift, the lower bound here, the upper in the saturating store */
    s0 = _mm512_max_epi32(_mm512_srai_epi32(s0, PRECISION_BITS), zero);
    s1 = _mm512_max_epi32(_mm512_srai_epi32(s1, PRECISION_BITS), zero);
    s2 = _mm512_max_epi32(_mm512_srai_epi32(s2, PRECISION_BITS), zero);
    s3 = _mm512_max_epi32(_mm512_srai_epi32(s3, PRECISION_BITS), zero);
    _mm_storeu_si128((__m128i *)(out + i), _mm512_cvtusepi32_epi8(s0));
    _mm_storeu_si128((__m128i *)(out + i + 16), _mm512_cvtusepi32_epi8(s1));
    _mm_storeu_si128((__m128i *)(out + i + 32), _mm512_cvtusepi32_epi8(s2));
    _mm_storeu_si128((__m128i *)(out + i + 48), _mm512_cvtusepi32_epi8(s3));
  }
  if (i < n) resample_v(k, taps, rows + i, stride, acc, out + i, n - i); /* the last n % 64 bytes */
}
#endif

#ifdef LADE__HAVE_X86_SIMD
/* The same with AVX2: 32 bytes (8 pixels) per step in four registers. */
__attribute__((target("avx2"))) static void resample_v_avx2(const int32_t *restrict k, int taps,
                                                            const uint8_t *restrict rows, size_t stride,
                                                            int32_t *restrict acc, uint8_t *restrict out, size_t n) {
  const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i s0 = half, s1 = half, s2 = half, s3 = half;
    const uint8_t *p = rows + i;
    for (int y = 0; y < taps; y++, p += stride) {
      const __m256i kv = _mm256_set1_epi32(k[y]);
      s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)), kv));
      s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))), kv));
      s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 16))), kv));
      s3 = _mm256_add_epi32(s3, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 24))), kv));
    }
    /* clip8 by the shift and two saturating packs (which work per 128-bit
     * half: the permute puts the 4-byte groups back in order) */
    const __m256i w01 = _mm256_packs_epi32(_mm256_srai_epi32(s0, PRECISION_BITS), _mm256_srai_epi32(s1, PRECISION_BITS));
    const __m256i w23 = _mm256_packs_epi32(_mm256_srai_epi32(s2, PRECISION_BITS), _mm256_srai_epi32(s3, PRECISION_BITS));
    _mm256_storeu_si256((__m256i *)(out + i), _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), order));
  }
  if (i < n) resample_v(k, taps, rows + i, stride, acc, out + i, n - i); /* the last n % 32 bytes */
}
#endif

/* The vertical pass for this CPU (LADE_NO_SIMD and LADE_NO_AVX512 as for
 * the horizontal one). */
static resample_v_fn pick_resample_v(void) {
#ifdef LADE__HAVE_X86_SIMD
  if (getenv("LADE_NO_SIMD")) return resample_v;
  if (!getenv("LADE_NO_AVX512") && __builtin_cpu_supports("avx512f")) return resample_v_avx512;
  if (__builtin_cpu_supports("avx2")) return resample_v_avx2;
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
#ifdef LADE__HAVE_X86_SIMD
/* (v/255 - mean) / std of one channel's 16 values (see above). */
__attribute__((target("avx512f"))) static inline __m512 norm16(__m512i v, const float *nc) {
  const __m512 x = _mm512_cvtepi32_ps(v), r255 = _mm512_set1_ps(nc[3]), k255 = _mm512_set1_ps(255.0f);
  const __m512 s = _mm512_set1_ps(nc[1]), rs = _mm512_set1_ps(nc[2]);
  __m512 q = _mm512_mul_ps(x, r255);
  q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, k255, x), r255, q); /* q + (x - q*255) / 255 */
  const __m512 y = _mm512_sub_ps(q, _mm512_set1_ps(nc[0]));
  __m512 z = _mm512_mul_ps(y, rs);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(z, s, y), rs, z); /* z + (y - z*std) / std */
}

__attribute__((target("avx512f"))) static void store_f32_avx512(const lade__imgdec_t *d, const uint8_t *vrow, int n,
                                                                bool flip, float *o0, float *o1, float *o2) {
  const __m512i lo = _mm512_set1_epi32(0xFF), rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m512i p;
    if (flip) p = _mm512_permutexvar_epi32(rev, _mm512_loadu_si512(vrow + (size_t)(n - 16 - x) * 4));
    else p = _mm512_loadu_si512(vrow + (size_t)x * 4);
    _mm512_storeu_ps(o0 + x, norm16(_mm512_and_si512(p, lo), d->norm[0]));
    _mm512_storeu_ps(o1 + x, norm16(_mm512_and_si512(_mm512_srli_epi32(p, 8), lo), d->norm[1]));
    _mm512_storeu_ps(o2 + x, norm16(_mm512_and_si512(_mm512_srli_epi32(p, 16), lo), d->norm[2]));
  }
  /* the last n % 16 pixels: outputs x.. read the first n - x pixels mirrored, or those from x on */
  if (x < n) store_f32_lut(d, flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o0 + x, o1 + x, o2 + x);
}

__attribute__((target("avx2,fma"))) static inline __m256 norm8(__m256i v, const float *nc) {
  const __m256 x = _mm256_cvtepi32_ps(v), r255 = _mm256_set1_ps(nc[3]), k255 = _mm256_set1_ps(255.0f);
  const __m256 s = _mm256_set1_ps(nc[1]), rs = _mm256_set1_ps(nc[2]);
  __m256 q = _mm256_mul_ps(x, r255);
  q = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, k255, x), r255, q);
  const __m256 y = _mm256_sub_ps(q, _mm256_set1_ps(nc[0]));
  __m256 z = _mm256_mul_ps(y, rs);
  return _mm256_fmadd_ps(_mm256_fnmadd_ps(z, s, y), rs, z);
}

__attribute__((target("avx2,fma"))) static void store_f32_avx2(const lade__imgdec_t *d, const uint8_t *vrow, int n,
                                                               bool flip, float *o0, float *o1, float *o2) {
  const __m256i lo = _mm256_set1_epi32(0xFF), rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    __m256i p;
    if (flip) p = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(vrow + (size_t)(n - 8 - x) * 4)), rev);
    else p = _mm256_loadu_si256((const __m256i *)(vrow + (size_t)x * 4));
    _mm256_storeu_ps(o0 + x, norm8(_mm256_and_si256(p, lo), d->norm[0]));
    _mm256_storeu_ps(o1 + x, norm8(_mm256_and_si256(_mm256_srli_epi32(p, 8), lo), d->norm[1]));
    _mm256_storeu_ps(o2 + x, norm8(_mm256_and_si256(_mm256_srli_epi32(p, 16), lo), d->norm[2]));
  }
  if (x < n) store_f32_lut(d, flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o0 + x, o1 + x, o2 + x);
}
#endif

#ifdef LADE__HAVE_X86_SIMD
/* 16 pixels per step: one vpermb drops the X bytes (and mirrors, with flip). */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void store_u8_vbmi(const uint8_t *vrow, int n, bool flip,
                                                                                 uint8_t *o) {
  /* byte j < 48 of the output: pixel j/3 (15 - j/3 mirrored), channel j%3 */
  static const uint8_t fwd[64] = {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20,
                                  21, 22, 24, 25, 26, 28, 29, 30, 32, 33, 34, 36, 37, 38, 40, 41,
                                  42, 44, 45, 46, 48, 49, 50, 52, 53, 54, 56, 57, 58, 60, 61, 62,
                                  63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};
  static const uint8_t bwd[64] = {60, 61, 62, 56, 57, 58, 52, 53, 54, 48, 49, 50, 44, 45, 46, 40,
                                  41, 42, 36, 37, 38, 32, 33, 34, 28, 29, 30, 24, 25, 26, 20, 21,
                                  22, 16, 17, 18, 12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2,
                                  63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};
  const __m512i idx = _mm512_loadu_si512(flip ? bwd : fwd);
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    const __m512i p = _mm512_loadu_si512(vrow + (size_t)(flip ? n - 16 - x : x) * 4);
    _mm512_mask_storeu_epi8(o + (size_t)x * 3, 0xFFFFFFFFFFFFull, _mm512_permutexvar_epi8(idx, p));
  }
  if (x < n) store_u8_c(flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o + (size_t)x * 3);
}

/* 8 pixels per step: pshufb drops the X bytes per 128-bit half, a dword
 * permute closes the gap (and mirrors, with flip). */
__attribute__((target("avx2"))) static void store_u8_avx2(const uint8_t *vrow, int n, bool flip, uint8_t *o) {
  const __m256i fwd = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6, 8, 9,
                                       10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i bwd = _mm256_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1, 12, 13, 14, 8, 9, 10, 4,
                                       5, 6, 0, 1, 2, -1, -1, -1, -1);
  const __m256i shuf = flip ? bwd : fwd;
  /* forward: low half's 3 dwords, then the high half's; mirrored: the high half first */
  const __m256i pack = flip ? _mm256_setr_epi32(4, 5, 6, 0, 1, 2, 3, 3) : _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    const __m256i p = _mm256_loadu_si256((const __m256i *)(vrow + (size_t)(flip ? n - 8 - x : x) * 4));
    const __m256i v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(p, shuf), pack);
    _mm_storeu_si128((__m128i *)(o + (size_t)x * 3), _mm256_castsi256_si128(v));
    _mm_storel_epi64((__m128i *)(o + (size_t)x * 3 + 16), _mm256_extracti128_si256(v, 1));
  }
  if (x < n) store_u8_c(flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o + (size_t)x * 3);
}
#endif

static store_u8_fn pick_store_u8(void) {
#ifdef LADE__HAVE_X86_SIMD
  if (getenv("LADE_NO_SIMD")) return store_u8_c;
  if (!getenv("LADE_NO_AVX512") && !getenv("LADE_NO_VBMI") && __builtin_cpu_supports("avx512vbmi") &&
      __builtin_cpu_supports("avx512bw"))
    return store_u8_vbmi;
  if (__builtin_cpu_supports("avx2")) return store_u8_avx2;
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
  if (!getenv("LADE_NO_AVX512") && __builtin_cpu_supports("avx512f")) f = store_f32_avx512;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f = store_f32_avx2;
#elif defined(LADE__HAVE_NEON)
  if (!getenv("LADE_NO_SIMD")) f = lade__store_f32_neon;
#endif
  return f == store_f32_lut || store_f32_exact(d, f) ? f : store_f32_lut;
}

const char *lade__imgdec_store_f32_name(const lade__imgdec_t *d) {
#ifdef LADE__HAVE_X86_SIMD
  if (d->store_f32 == store_f32_avx512) return "avx512";
  if (d->store_f32 == store_f32_avx2) return "avx2";
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
      {(any_fn)resample_h_avx2, "avx2"}, {(any_fn)resample_h_vnni, "vnni"}, {(any_fn)resample_h_vbmi, "vbmi"},
      {(any_fn)resample_h_vnni_rgb, "vnni"}, {(any_fn)resample_h_vbmi_rgb, "vbmi"}, {(any_fn)resample_h_avx2_rgb, "avx2"},
      {(any_fn)resample_v_avx512, "avx512"}, {(any_fn)resample_v_avx2, "avx2"},
      {(any_fn)store_u8_vbmi, "vbmi"}, {(any_fn)store_u8_avx2, "avx2"},
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
