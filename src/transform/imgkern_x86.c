/*
 * imgkern_x86.c - the image pipeline's kernels for x86-64: the horizontal
 * passes (AVX2, AVX-512 VNNI, AVX-512 VBMI) over RGBX and RGB rows, the
 * vertical passes (AVX-512, AVX2), the float32 stores (AVX-512, AVX2+FMA)
 * and the uint8 stores (VBMI, AVX2). imagenet.c picks them by cpuid
 * (pick_hpasses, pick_resample_v, pick_store_*; LADE_NO_SIMD,
 * LADE_NO_AVX512, LADE_NO_VBMI as documented there) and builds the
 * coefficient layouts they read (make_coeffs: LAYOUT_PAIRS for the AVX2
 * pass, LAYOUT_QUADS for VNNI and VBMI). Each function carries its own
 * target attribute, so this file builds for baseline x86-64 and nothing
 * here runs on a CPU without the feature.
 *
 * The arithmetic is the C loops' (imgkern.h): Pillow's 22-bit fixed point,
 * exact, so every kernel gives the C loop's bytes (tests/unit/test_imgkern.c
 * runs each path against them). The float stores are used only after
 * store_f32_exact (imagenet.c) found them equal to the LUT.
 */
#include "transform/imgkern.h"

#ifdef LADE__HAVE_X86_SIMD
#include <immintrin.h>

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

__attribute__((target("avx2"))) void lade__resample_h_avx2(const coeffs_t *c, const uint8_t *restrict in,
                                                             uint8_t *restrict out, int out_size) {
  resample_h_avx2_bpp(c, in, out, out_size, 4);
}

__attribute__((target("avx2"))) void lade__resample_h_avx2_rgb(const coeffs_t *c, const uint8_t *restrict in,
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
/* The VNNI and VBMI passes' common steps. A tap quad's bytes px (4 pixels'
 * channels, 4 taps each) against the coefficients' four byte planes at k
 * (dpbusd into a[0..3]); then a quad's 4 output pixels from those sums
 * (a0 + a1 << 7 + a2 << 14 + a3 << 21), shifted, clipped (the lower bound
 * here, the upper in the saturating store) and stored. */
__attribute__((target("avx512f,avx512vnni"), always_inline)) static inline void quad_dot(__m512i a[4], __m512i px,
                                                                                         const int8_t *k) {
  for (int j = 0; j < 4; j++) a[j] = _mm512_dpbusd_epi32(a[j], px, _mm512_load_si512((const void *)(k + 64 * j)));
}
__attribute__((target("avx512f"), always_inline)) static inline void quad_store(const __m512i a[4], uint8_t *out) {
  __m512i s = _mm512_add_epi32(a[0], _mm512_slli_epi32(a[1], 7));
  s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_slli_epi32(a[2], 14), _mm512_slli_epi32(a[3], 21)));
  s = _mm512_max_epi32(_mm512_srai_epi32(s, PRECISION_BITS), _mm512_setzero_si512());
  _mm_storeu_si128((__m128i *)out, _mm512_cvtusepi32_epi8(s));
}

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
    __m512i a[4] = {half, _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int tq = 0; tq < ntq; tq++) {
      __m512i px = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p0 + 4 * bpp * tq)));
      px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(p1 + 4 * bpp * tq)), 1);
      px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(p2 + 4 * bpp * tq)), 2);
      px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(p3 + 4 * bpp * tq)), 3);
      px = _mm512_shuffle_epi8(px, by_channel);
      quad_dot(a, px, k4 + 256 * tq);
    }
    quad_store(a, out + 4 * xx);
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

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void lade__resample_h_vnni(const coeffs_t *c,
                                                                                   const uint8_t *restrict in,
                                                                                   uint8_t *restrict out,
                                                                                   int out_size) {
  resample_h_vnni_bpp(c, in, out, out_size, 4);
}

/* RGB rows: libjpeg's colour conversion to 3 bytes a pixel is cheaper than to 4. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void lade__resample_h_vnni_rgb(const coeffs_t *c,
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
    __m512i a[4] = {half, _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int tq = 0; tq < ntq; tq++) {
      const __m512i px =
          _mm512_maskz_permutexvar_epi8(keep, idx, _mm512_loadu_si512((const void *)(p0 + 4 * bpp * tq)));
      quad_dot(a, px, k4 + 256 * tq);
    }
    quad_store(a, out + 4 * xx);
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

__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"))) void lade__resample_h_vbmi(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size) {
  resample_h_vbmi_bpp(c, in, out, out_size, 4);
}

__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"))) void lade__resample_h_vbmi_rgb(
    const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int out_size) {
  resample_h_vbmi_bpp(c, in, out, out_size, 3);
}

/*
 * The vertical pass 64 bytes (16 RGBX pixels) at a time with the sums in
 * four registers through all taps, instead of an accumulator row in memory
 * read and written once per tap; the same int32 arithmetic (vpmulld is the
 * low 32 bits of the product, which is the whole product here).
 */
__attribute__((target("avx512f"))) void lade__resample_v_avx512(const int32_t *restrict k, int taps,
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
  if (i < n) resample_v_c(k, taps, rows + i, stride, acc, out + i, n - i); /* the last n % 64 bytes */
}

/* The same with AVX2: 32 bytes (8 pixels) per step in four registers. */
__attribute__((target("avx2"))) void lade__resample_v_avx2(const int32_t *restrict k, int taps,
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
  if (i < n) resample_v_c(k, taps, rows + i, stride, acc, out + i, n - i); /* the last n % 32 bytes */
}

/* (v/255 - mean) / std of one channel's 16 values (see imagenet.c,
 * store_f32_exact): m, s, rs the channel's mean, std and 1/std, r255 1/255.
 * The constants come in registers, loaded before the loop: read from d
 * inside it, they were read again after every float store (which may alias
 * them). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 norm16(__m512i v, __m512 m, __m512 s, __m512 rs,
                                                                             __m512 r255) {
  const __m512 x = _mm512_cvtepi32_ps(v), k255 = _mm512_set1_ps(255.0f);
  __m512 q = _mm512_mul_ps(x, r255);
  q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, k255, x), r255, q); /* q + (x - q*255) / 255 */
  const __m512 y = _mm512_sub_ps(q, m);
  __m512 z = _mm512_mul_ps(y, rs);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(z, s, y), rs, z); /* z + (y - z*std) / std */
}

__attribute__((target("avx512f"))) void lade__store_f32_avx512(const lade__imgdec_t *d, const uint8_t *vrow, int n,
                                                                bool flip, float *o0, float *o1, float *o2) {
  const __m512i lo = _mm512_set1_epi32(0xFF), rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512 r255 = _mm512_set1_ps(d->norm[0][3]);
  __m512 m[3], sd[3], rs[3];
  for (int c = 0; c < 3; c++) {
    m[c] = _mm512_set1_ps(d->norm[c][0]);
    sd[c] = _mm512_set1_ps(d->norm[c][1]);
    rs[c] = _mm512_set1_ps(d->norm[c][2]);
  }
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m512i p;
    if (flip) p = _mm512_permutexvar_epi32(rev, _mm512_loadu_si512(vrow + (size_t)(n - 16 - x) * 4));
    else p = _mm512_loadu_si512(vrow + (size_t)x * 4);
    _mm512_storeu_ps(o0 + x, norm16(_mm512_and_si512(p, lo), m[0], sd[0], rs[0], r255));
    _mm512_storeu_ps(o1 + x, norm16(_mm512_and_si512(_mm512_srli_epi32(p, 8), lo), m[1], sd[1], rs[1], r255));
    _mm512_storeu_ps(o2 + x, norm16(_mm512_and_si512(_mm512_srli_epi32(p, 16), lo), m[2], sd[2], rs[2], r255));
  }
  /* the last n % 16 pixels: outputs x.. read the first n - x pixels mirrored, or those from x on */
  if (x < n) store_f32_lut(d, flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o0 + x, o1 + x, o2 + x);
}

__attribute__((target("avx2,fma"), always_inline)) static inline __m256 norm8(__m256i v, __m256 m, __m256 s, __m256 rs,
                                                                             __m256 r255) {
  const __m256 x = _mm256_cvtepi32_ps(v), k255 = _mm256_set1_ps(255.0f);
  __m256 q = _mm256_mul_ps(x, r255);
  q = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, k255, x), r255, q);
  const __m256 y = _mm256_sub_ps(q, m);
  __m256 z = _mm256_mul_ps(y, rs);
  return _mm256_fmadd_ps(_mm256_fnmadd_ps(z, s, y), rs, z);
}

__attribute__((target("avx2,fma"))) void lade__store_f32_avx2(const lade__imgdec_t *d, const uint8_t *vrow, int n,
                                                               bool flip, float *o0, float *o1, float *o2) {
  const __m256i lo = _mm256_set1_epi32(0xFF), rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256 r255 = _mm256_set1_ps(d->norm[0][3]);
  __m256 m[3], sd[3], rs[3];
  for (int c = 0; c < 3; c++) {
    m[c] = _mm256_set1_ps(d->norm[c][0]);
    sd[c] = _mm256_set1_ps(d->norm[c][1]);
    rs[c] = _mm256_set1_ps(d->norm[c][2]);
  }
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    __m256i p;
    if (flip) p = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(vrow + (size_t)(n - 8 - x) * 4)), rev);
    else p = _mm256_loadu_si256((const __m256i *)(vrow + (size_t)x * 4));
    _mm256_storeu_ps(o0 + x, norm8(_mm256_and_si256(p, lo), m[0], sd[0], rs[0], r255));
    _mm256_storeu_ps(o1 + x, norm8(_mm256_and_si256(_mm256_srli_epi32(p, 8), lo), m[1], sd[1], rs[1], r255));
    _mm256_storeu_ps(o2 + x, norm8(_mm256_and_si256(_mm256_srli_epi32(p, 16), lo), m[2], sd[2], rs[2], r255));
  }
  if (x < n) store_f32_lut(d, flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o0 + x, o1 + x, o2 + x);
}

/* 16 pixels per step: one vpermb drops the X bytes (and mirrors, with flip). */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void lade__store_u8_vbmi(const uint8_t *vrow, int n, bool flip,
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
__attribute__((target("avx2"))) void lade__store_u8_avx2(const uint8_t *vrow, int n, bool flip, uint8_t *o) {
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
