/*
 * imgkern.h - what the image pipeline (imagenet.c) and its kernels in other
 * files (imgkern_x86.c, imgkern_neon.c) share: the coefficients, the decoder's state, the
 * kernel signatures and the C loops. Internal to src/transform/.
 *
 * The C loops below are the reference: Pillow's fixed-point arithmetic,
 * which every SIMD kernel reproduces to the bit (tests/unit/test_imgkern.c
 * compares them). The kernels run them for the pixels past their last whole
 * vector.
 */
#ifndef LADE__IMGKERN_H
#define LADE__IMGKERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transform/imagenet.h"

#define PRECISION_BITS 22 /* Pillow's fixed point for 8-bit images */

/* The arguments a coeffs_t was made for: an image of the same size and box
 * as the one before (eval over a folder of equal sizes) reuses them. */
typedef struct {
  double in0, in1;
  int in_size, out_size, layout;
  bool valid;
} coeffs_made_t;

/* Coefficients of one resample direction (Pillow's precompute_coeffs). */
typedef struct coeffs {
  int32_t *k;    /* out * ksize */
  int *bounds;   /* out * 2: first input index, tap count */
  double *pre;   /* ksize, the float weights of one output pixel */
  int16_t *k2;   /* SIMD layout, see lade__resample_h_avx2 (imgkern_x86.c) */
  int8_t *k4;    /* SIMD layout, see lade__resample_h_vnni (imgkern_x86.c) */
  uint8_t *qidx; /* per output quad, byte shuffles for RGBX and RGB rows, see resample_h_vbmi */
  int32_t *kn;   /* per output pixel, k padded with zeros to 4*ceil(taps/4): see lade__resample_h_neon */
  size_t kcap, bcap, pcap, k2cap, k4cap, qidxcap, kncap;
  int qspan;     /* the most input pixels between a quad's first and last window start */
  int ksize;
  int taps;      /* the most taps any output pixel has (<= ksize): the SIMD passes' trip count */
  coeffs_made_t made;
} coeffs_t;

/* The coefficient layout a horizontal pass reads besides k. */
enum { LAYOUT_C, LAYOUT_PAIRS, LAYOUT_QUADS, LAYOUT_PADDED };

/* One row (RGBX, or RGB for the _rgb passes) -> out_size RGBX pixels. */
typedef void (*resample_h_fn)(const coeffs_t *, const uint8_t *, uint8_t *, int);
/* One output row of the vertical pass: k, taps, rows, stride, acc, out, n bytes. */
typedef void (*resample_v_fn)(const int32_t *, int, const uint8_t *, size_t, int32_t *, uint8_t *, size_t);
/* An output row of RGBX (mirrored with flip) to RGB bytes, or to three float planes. */
typedef void (*store_u8_fn)(const uint8_t *, int, bool, uint8_t *);
typedef void (*store_f32_fn)(const struct lade__imgdec *, const uint8_t *, int, bool, float *, float *, float *);

/* A horizontal pass: the RGBX-row kernel and, where it has one and it is
 * used, the RGB-row one that goes with it. */
typedef struct hpass {
  resample_h_fn rgbx, rgb;
  const char *name;
} hpass_t;

enum { MAX_HPASSES = 6 };

struct lade__imgdec {
  bool decode_scale; /* decode_scale=auto: the JPEG IDCT may shrink (not bit-exact) */
  void *be_state[2]; /* per backend (JPEG, PNG), created on first use */
  uint8_t *tmp;      /* horizontally resampled box rows: rows * out*4 */
  size_t tmp_cap;
  uint8_t *vrow;     /* one output row, RGBX */
  size_t vrow_cap;
  int32_t *acc;      /* vertical accumulators, out*4 */
  size_t acc_cap;
  coeffs_t ch, cv;
  int out_size, vfirst;
  float lut[3][256]; /* (v/255 - mean) / std */
  float norm[3][4];  /* per channel: mean, std, 1/std, 1/255 (the SIMD stores' constants) */
  store_f32_fn store_f32; /* one output row's RGBX -> its three float planes */
  store_u8_fn store_u8;   /* one output row's RGBX -> RGB */
  resample_h_fn resample_h;
  resample_h_fn resample_h_rgb; /* for RGB rows; NULL where RGBX rows are the only SIMD kind */
  hpass_t hp[MAX_HPASSES];      /* the passes this CPU may run: [0] by default, the rest for a tuner */
  int nhp, hcur;
  int tuned_rows;               /* rows per libjpeg call the backend's tuner chose, 0 before it chose */
  double tuned_cost;            /* seconds its trials cost over the choice */
  resample_v_fn resample_v;
  lade__imgacct_t acct;         /* the stage account (imagenet.h); stop OFF unless a bench sets it */
};

/* For tests: the kernel each stage of d runs, as "h=H rgb=R v=V u8=U
 * f32=F" ("c": the C loop; rgb "none": RGB rows are not taken). */
void lade__imgpipe_kernels(const struct lade__imgdec *d, char *buf, size_t cap);

/* ---- the C loops (the reference) */

static inline uint8_t clip8(int32_t v) {
  v >>= PRECISION_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One row of RGBX (bpp 4) or RGB (bpp 3, X out = 0) pixels -> out_size RGBX
 * pixels, from output pixel `from` on. */
static inline void resample_h_bpp(const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int from,
                                  int out_size, const int bpp) {
  const int ksize = c->ksize;
  for (int xx = from; xx < out_size; xx++) {
    const int xmin = c->bounds[2 * xx], n = c->bounds[2 * xx + 1];
    const int32_t *k = c->k + (size_t)xx * ksize;
    const uint8_t *p = in + (size_t)xmin * (size_t)bpp;
    int32_t s[4] = {1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1),
                    1 << (PRECISION_BITS - 1)};
    for (int x = 0; x < n; x++) {
      const int32_t kv = k[x];
      for (int ch = 0; ch < bpp; ch++) s[ch] += p[bpp * x + ch] * kv;
    }
    for (int ch = 0; ch < 4; ch++) out[4 * xx + ch] = ch < bpp ? clip8(s[ch]) : 0;
  }
}

/* One output row of the vertical pass over n bytes of RGBX. */
static inline void resample_v_c(const int32_t *restrict k, int taps, const uint8_t *restrict rows, size_t stride,
                                int32_t *restrict acc, uint8_t *restrict out, size_t n) {
  for (size_t i = 0; i < n; i++) acc[i] = 1 << (PRECISION_BITS - 1);
  for (int y = 0; y < taps; y++) {
    const uint8_t *p = rows + (size_t)y * stride;
    const int32_t kv = k[y];
    for (size_t i = 0; i < n; i++) acc[i] += p[i] * kv;
  }
  for (size_t i = 0; i < n; i++) out[i] = clip8(acc[i]);
}

/* The uint8 store: an output row of RGBX bytes (mirrored with flip) to RGB. */
static inline void store_u8_c(const uint8_t *vrow, int n, bool flip, uint8_t *o) {
  for (int x = 0; x < n; x++) {
    const uint8_t *s = vrow + (size_t)(flip ? n - 1 - x : x) * 4;
    o[3 * x] = s[0];
    o[3 * x + 1] = s[1];
    o[3 * x + 2] = s[2];
  }
}

/* The float32 store from the LUT (see store_f32_exact in imagenet.c). */
static inline void store_f32_lut(const struct lade__imgdec *d, const uint8_t *vrow, int n, bool flip, float *o0,
                                 float *o1, float *o2) {
  const float *l0 = d->lut[0], *l1 = d->lut[1], *l2 = d->lut[2];
  for (int x = 0; x < n; x++) {
    const uint8_t *s = vrow + (size_t)(flip ? n - 1 - x : x) * 4;
    o0[x] = l0[s[0]];
    o1[x] = l1[s[1]];
    o2[x] = l2[s[2]];
  }
}

/* ---- the x86-64 kernels (imgkern_x86.c), each compiled for its own
 * target and chosen by cpuid in imagenet.c's pick_* functions. The
 * horizontal passes read up to 16 bytes (VBMI: 64) past a window's start:
 * the rows' pad (lade__imgpipe_begin) covers it. */
#if defined(__x86_64__) && defined(__GNUC__)
#define LADE__HAVE_X86_SIMD 1
void lade__resample_h_avx2(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_h_avx2_rgb(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_h_vnni(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_h_vnni_rgb(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_h_vbmi(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_h_vbmi_rgb(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_v_avx512(const int32_t *k, int taps, const uint8_t *rows, size_t stride, int32_t *acc,
                             uint8_t *out, size_t n);
void lade__resample_v_avx2(const int32_t *k, int taps, const uint8_t *rows, size_t stride, int32_t *acc,
                           uint8_t *out, size_t n);
void lade__store_f32_avx512(const struct lade__imgdec *d, const uint8_t *vrow, int n, bool flip, float *o0,
                            float *o1, float *o2);
void lade__store_f32_avx2(const struct lade__imgdec *d, const uint8_t *vrow, int n, bool flip, float *o0, float *o1,
                          float *o2);
void lade__store_u8_vbmi(const uint8_t *vrow, int n, bool flip, uint8_t *o);
void lade__store_u8_avx2(const uint8_t *vrow, int n, bool flip, uint8_t *o);
#endif

/* ---- the Arm kernels (imgkern_neon.c): NEON is baseline on aarch64, so
 * they need no run-time check; imagenet.c's pick_* functions choose them
 * unless LADE_NO_SIMD is set, the float store only after store_f32_exact.
 * Each reads no byte before or past what the C loop reads, except the
 * horizontal pass, which reads whole quads of taps: up to 3 pixels (and 4
 * bytes more for RGB rows) past a window, inside the rows' pad. */
#if defined(__aarch64__) && defined(__ARM_NEON)
#define LADE__HAVE_NEON 1
void lade__resample_h_neon(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_h_neon_rgb(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size);
void lade__resample_v_neon(const int32_t *k, int taps, const uint8_t *rows, size_t stride, int32_t *acc,
                           uint8_t *out, size_t n);
void lade__store_u8_neon(const uint8_t *vrow, int n, bool flip, uint8_t *o);
void lade__store_f32_neon(const struct lade__imgdec *d, const uint8_t *vrow, int n, bool flip, float *o0, float *o1,
                          float *o2);
#endif

#endif
