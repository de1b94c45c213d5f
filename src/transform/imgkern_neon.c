/*
 * imgkern_neon.c - the image pipeline's kernels for aarch64 (NEON, which
 * every aarch64 CPU has): the horizontal pass over RGBX and RGB rows, the
 * vertical pass, the uint8 store and the float32 store. imagenet.c picks
 * them (LADE_NO_SIMD=1: the C loops instead).
 *
 * The arithmetic is the C loops' (imgkern.h): Pillow's 22-bit fixed point
 * in int32 lanes, one lane per channel, so a 128-bit register holds one RGBX
 * pixel of sums; the products are exact and integer addition does not care
 * about order, so the sums equal the C loop's to the bit. The clip is the
 * shift and two saturating narrows. The float store computes
 * (v/255 - mean) / std with FMA corrections like the x86 stores, and is
 * used only after store_f32_exact (imagenet.c) found it equal to the LUT.
 *
 * SVE is not used: on the cores that have it in servers (Neoverse V1 256-bit,
 * V2 and Grace 128-bit) the wider registers would help only the vertical
 * pass, the horizontal pass's unit is one 4-channel pixel (128 bits), and no
 * SVE machine is at hand to show a gain; NEON runs on every aarch64 CPU.
 * No timing has been taken under emulation (qemu-user checks correctness).
 */
#include "transform/imgkern.h"

#ifdef LADE__HAVE_NEON
#include <arm_neon.h>

static inline int32x4_t widen_lo(uint16x8_t v) { return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(v))); }
static inline int32x4_t widen_hi(uint16x8_t v) { return vreinterpretq_s32_u32(vmovl_high_u16(v)); }

/* clip8 of 16 sums to 16 bytes: the shift, then saturating narrows (below
 * 0 to 0, above 255 to 255). */
static inline uint8x16_t clip16(int32x4_t s0, int32x4_t s1, int32x4_t s2, int32x4_t s3) {
  const uint16x8_t w01 = vcombine_u16(vqmovun_s32(vshrq_n_s32(s0, PRECISION_BITS)),
                                      vqmovun_s32(vshrq_n_s32(s1, PRECISION_BITS)));
  const uint16x8_t w23 = vcombine_u16(vqmovun_s32(vshrq_n_s32(s2, PRECISION_BITS)),
                                      vqmovun_s32(vshrq_n_s32(s3, PRECISION_BITS)));
  return vcombine_u8(vqmovn_u16(w01), vqmovn_u16(w23));
}

/*
 * One output pixel per register, four taps per step from one 16-byte load
 * (RGB rows: 12 bytes spread to RGBX with a zero X by a table lookup), each
 * tap's pixel widened to int32 and multiplied by its coefficient. Every
 * pixel runs ceil(taps/4) quads over its coefficients padded with zeros
 * (c->kn, LAYOUT_PADDED), with the count a constant for up to 12 taps so
 * the loop unrolls, and four pixels share one clip and one 16-byte store.
 * A pixel's window is read up to 4*ceil(taps/4) pixels (+4 bytes for RGB)
 * from its start, which the rows' pad covers. The coefficients' fields are
 * read once per row: a byte store may alias them. (Before: the taps one by
 * one past the last whole quad, so a 3-tap pixel, the usual downscale, ran
 * three scalar-sized steps, and a store per pixel. Counted under qemu, not
 * timed: bench/RESULTS.md.)
 */
__attribute__((always_inline)) static inline int32x4_t h_neon_px(const uint8_t *p, const int32_t *k, const int ntq,
                                                              const int bpp, uint8x16_t spread) {
  int32x4_t s0 = vdupq_n_s32(1 << (PRECISION_BITS - 1)), s1 = vdupq_n_s32(0);
  for (int tq = 0; tq < ntq; tq++) {
    uint8x16_t b = vld1q_u8(p + 4 * bpp * tq);
    if (bpp == 3) b = vqtbl1q_u8(b, spread); /* index 255: a zero byte */
    const int32x4_t kv = vld1q_s32(k + 4 * tq);
    const uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
    s0 = vmlaq_laneq_s32(s0, widen_lo(lo), kv, 0);
    s1 = vmlaq_laneq_s32(s1, widen_hi(lo), kv, 1);
    s0 = vmlaq_laneq_s32(s0, widen_lo(hi), kv, 2);
    s1 = vmlaq_laneq_s32(s1, widen_hi(hi), kv, 3);
  }
  return vaddq_s32(s0, s1);
}

/* Quads of output pixels up to out_size (rounded down to 4); returns the
 * first pixel not written. */
__attribute__((always_inline)) static inline int h_neon_quads(const coeffs_t *c, const uint8_t *restrict in,
                                                           uint8_t *restrict out, int out_size, const int ntq,
                                                           const int bpp) {
  static const uint8_t rgb_to_rgbx[16] = {0, 1, 2, 255, 3, 4, 5, 255, 6, 7, 8, 255, 9, 10, 11, 255};
  const uint8x16_t spread = vld1q_u8(rgb_to_rgbx);
  const int *bd = c->bounds;
  const int32_t *kn = c->kn;
  const size_t kstep = 4 * (size_t)ntq; /* int32 per pixel */
  int xx = 0;
  for (; xx + 3 < out_size; xx += 4, bd += 8, kn += 4 * kstep) {
    const int32x4_t s0 = h_neon_px(in + (size_t)bd[0] * bpp, kn, ntq, bpp, spread);
    const int32x4_t s1 = h_neon_px(in + (size_t)bd[2] * bpp, kn + kstep, ntq, bpp, spread);
    const int32x4_t s2 = h_neon_px(in + (size_t)bd[4] * bpp, kn + 2 * kstep, ntq, bpp, spread);
    const int32x4_t s3 = h_neon_px(in + (size_t)bd[6] * bpp, kn + 3 * kstep, ntq, bpp, spread);
    vst1q_u8(out + 4 * (size_t)xx, clip16(s0, s1, s2, s3));
  }
  return xx;
}

static inline void resample_h_neon_bpp(const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out,
                                       int out_size, const int bpp) {
  const int ntq = (c->taps + 3) / 4;
  const int xx = ntq == 1   ? h_neon_quads(c, in, out, out_size, 1, bpp)
                 : ntq == 2 ? h_neon_quads(c, in, out, out_size, 2, bpp)
                 : ntq == 3 ? h_neon_quads(c, in, out, out_size, 3, bpp)
                            : h_neon_quads(c, in, out, out_size, ntq, bpp);
  resample_h_bpp(c, in, out, xx, out_size, bpp); /* the last out_size % 4 pixels */
}

void lade__resample_h_neon(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size) {
  resample_h_neon_bpp(c, in, out, out_size, 4);
}

void lade__resample_h_neon_rgb(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size) {
  resample_h_neon_bpp(c, in, out, out_size, 3);
}

/* The vertical pass 16 bytes (4 RGBX pixels) at a time, the sums in four
 * registers through all taps; the last n % 16 bytes by the C loop. */
void lade__resample_v_neon(const int32_t *restrict k, int taps, const uint8_t *restrict rows, size_t stride,
                           int32_t *restrict acc, uint8_t *restrict out, size_t n) {
  const int32x4_t half = vdupq_n_s32(1 << (PRECISION_BITS - 1));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    int32x4_t s0 = half, s1 = half, s2 = half, s3 = half;
    const uint8_t *p = rows + i;
    for (int y = 0; y < taps; y++, p += stride) {
      const uint8x16_t b = vld1q_u8(p);
      const uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
      const int32_t kv = k[y];
      s0 = vmlaq_n_s32(s0, widen_lo(lo), kv);
      s1 = vmlaq_n_s32(s1, widen_hi(lo), kv);
      s2 = vmlaq_n_s32(s2, widen_lo(hi), kv);
      s3 = vmlaq_n_s32(s3, widen_hi(hi), kv);
    }
    vst1q_u8(out + i, clip16(s0, s1, s2, s3));
  }
  if (i < n) resample_v_c(k, taps, rows + i, stride, acc, out + i, n - i);
}

/* The 16 bytes in reverse order. */
static inline uint8x16_t reverse16(uint8x16_t v) {
  const uint8x16_t r = vrev64q_u8(v);
  return vextq_u8(r, r, 8);
}

/* 16 pixels per step: vld4 splits the channels, vst3 interleaves three of
 * them (with flip, the 16 pixels that mirror onto these, reversed). */
void lade__store_u8_neon(const uint8_t *vrow, int n, bool flip, uint8_t *o) {
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    const uint8x16x4_t p = vld4q_u8(vrow + (size_t)(flip ? n - 16 - x : x) * 4);
    uint8x16x3_t q;
    for (int c = 0; c < 3; c++) q.val[c] = flip ? reverse16(p.val[c]) : p.val[c];
    vst3q_u8(o + (size_t)x * 3, q);
  }
  /* the last n % 16 pixels: outputs x.. read the first n - x pixels mirrored, or those from x on */
  if (x < n) store_u8_c(flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o + (size_t)x * 3);
}

/* (v/255 - mean) / std of 4 values, each division a multiply by the rounded
 * reciprocal and one FMA correction (as imagenet.c's norm16 and norm8). */
static inline float32x4_t norm4(uint32x4_t v, const float *nc) {
  const float32x4_t x = vcvtq_f32_u32(v), r255 = vdupq_n_f32(nc[3]), k255 = vdupq_n_f32(255.0f);
  const float32x4_t s = vdupq_n_f32(nc[1]), rs = vdupq_n_f32(nc[2]);
  float32x4_t q = vmulq_f32(x, r255);
  q = vfmaq_f32(q, vfmsq_f32(x, q, k255), r255); /* q + (x - q*255) / 255 */
  const float32x4_t y = vsubq_f32(q, vdupq_n_f32(nc[0]));
  const float32x4_t z = vmulq_f32(y, rs);
  return vfmaq_f32(z, vfmsq_f32(y, z, s), rs); /* z + (y - z*std) / std */
}

void lade__store_f32_neon(const struct lade__imgdec *d, const uint8_t *vrow, int n, bool flip, float *o0, float *o1,
                          float *o2) {
  float *const o[3] = {o0, o1, o2};
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    const uint8x16x4_t p = vld4q_u8(vrow + (size_t)(flip ? n - 16 - x : x) * 4);
    for (int c = 0; c < 3; c++) {
      const uint8x16_t v = flip ? reverse16(p.val[c]) : p.val[c];
      const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
      vst1q_f32(o[c] + x, norm4(vmovl_u16(vget_low_u16(lo)), d->norm[c]));
      vst1q_f32(o[c] + x + 4, norm4(vmovl_high_u16(lo), d->norm[c]));
      vst1q_f32(o[c] + x + 8, norm4(vmovl_u16(vget_low_u16(hi)), d->norm[c]));
      vst1q_f32(o[c] + x + 12, norm4(vmovl_high_u16(hi), d->norm[c]));
    }
  }
  if (x < n) store_f32_lut(d, flip ? vrow : vrow + (size_t)x * 4, n - x, flip, o0 + x, o1 + x, o2 + x);
}
#else
typedef int lade__imgkern_neon_empty; /* ISO C: a translation unit declares something */
#endif
