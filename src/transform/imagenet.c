/*
 * imagenet.c - the JPEG image pipeline behind the imagenet transforms.
 *
 * Why it looks like this: a training crop usually covers a fraction of the
 * image and is then shrunk to 224x224, so decoding the whole picture at full
 * resolution is wasted work. We decode only the box (jpeg_crop_scanline for
 * the columns, jpeg_skip_scanlines up to the first row, abort after the last
 * row) and, when the box is at least 2x larger than the output, let the IDCT
 * do part of the shrinking (DCT scaling 1/2, 1/4, 1/8). The rest is Pillow's
 * antialiased bilinear resample (triangle filter whose support grows with the
 * downscale factor), reproduced with its 22-bit fixed-point coefficients and
 * its horizontal-then-vertical order so that at scale 1/1 the result is
 * bit-identical to torchvision's resized_crop on a PIL image.
 *
 * Decoding streams: each decoded row is resampled horizontally right away,
 * so only out_size*3 bytes per box row are kept, never the decoded box.
 *
 * Errors: libjpeg errors and warnings (a truncated file is a warning there)
 * longjmp back to the single setjmp in run_guarded(); the message goes into
 * lade_last_error(). Nothing is printed and nothing exits.
 */
#include "transform/imagenet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
  double rmin = LADE_MIN(ratio_min, ratio_max), rmax = LADE_MAX(ratio_min, ratio_max);
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

#ifdef LADE_HAVE_JPEG

#include <setjmp.h>
#include <stdio.h>

#include <jerror.h>
#include <jpeglib.h>

#define PRECISION_BITS 22 /* Pillow's fixed point for 8-bit images */

typedef struct err_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} err_mgr_t;

/* Coefficients of one resample direction (Pillow's precompute_coeffs). */
typedef struct coeffs {
  int32_t *k;    /* out * ksize */
  int *bounds;   /* out * 2: first input index, tap count */
  double *pre;   /* ksize, the float weights of one output pixel */
  int16_t *k2;   /* SIMD layout, see resample_h_avx2 */
  size_t kcap, bcap, pcap, k2cap;
  int ksize;
} coeffs_t;

struct lade__imgdec {
  struct jpeg_decompress_struct cinfo;
  err_mgr_t err;
  bool cinfo_ok;
  uint8_t *row;      /* one decoded row (up to 4 components) */
  size_t row_cap;
  uint8_t *rgb;      /* the row converted to RGB (CMYK input only) */
  size_t rgb_cap;
  uint8_t *tmp;      /* horizontally resampled box rows: rows * out*3 */
  size_t tmp_cap;
  uint8_t *vrow;     /* one output row, RGB */
  size_t vrow_cap;
  int32_t *acc;      /* vertical accumulators, out*3 */
  size_t acc_cap;
  coeffs_t ch, cv;
  float lut[3][256]; /* (v/255 - mean) / std */
  void (*resample_h)(const coeffs_t *, const uint8_t *, uint8_t *, int);
};

typedef void (*resample_h_fn)(const coeffs_t *, const uint8_t *, uint8_t *, int);
static resample_h_fn pick_resample_h(void);

static void on_error_exit(j_common_ptr c) {
  err_mgr_t *e = (err_mgr_t *)c->err;
  (*c->err->format_message)(c, e->msg);
  longjmp(e->jb, 1);
}

static void on_emit(j_common_ptr c, int level) {
  if (level >= 0) return; /* trace messages */
  /* Warnings: corrupt data or a truncated file (libjpeg would pad with grey).
   * Extraneous bytes between markers are harmless and PIL accepts them. */
  if (c->err->msg_code == JWRN_EXTRANEOUS_DATA) return;
  on_error_exit(c);
}

static void on_output(j_common_ptr c) { LADE_UNUSED(c); }

/* Scratch buffers only grow and do not keep their contents. */
static int grow_align(void *pp, size_t *cap, size_t need, size_t align) {
  void **p = (void **)pp;
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 256;
  while (n < need) n *= 2;
  lade__aligned_free(*p);
  *cap = 0;
  if (!(*p = lade__aligned_alloc(n, align))) return lade__fail(LADE_ENOMEM, "out of memory (%zu bytes of image scratch)", n);
  *cap = n;
  return 0;
}

static int grow(void *pp, size_t *cap, size_t need) { return grow_align(pp, cap, need, 16); }

int lade__imgdec_create(lade__imgdec_t **out) {
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  *out = NULL;
  lade__imgdec_t *d = calloc(1, sizeof(*d));
  if (!d) return lade__fail(LADE_ENOMEM, "out of memory (JPEG decoder)");
  d->cinfo.err = jpeg_std_error(&d->err.pub);
  d->err.pub.error_exit = on_error_exit;
  d->err.pub.emit_message = on_emit;
  d->err.pub.output_message = on_output;
  if (setjmp(d->err.jb)) {
    int rc = lade__fail(LADE_ENOMEM, "cannot create JPEG decoder: %s", d->err.msg);
    free(d);
    return rc;
  }
  jpeg_create_decompress(&d->cinfo);
  d->cinfo_ok = true;
  d->resample_h = pick_resample_h();
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) d->lut[c][v] = ((float)v / 255.0f - mean[c]) / stdv[c];
  *out = d;
  return 0;
}

void lade__imgdec_destroy(lade__imgdec_t *d) {
  if (!d) return;
  if (d->cinfo_ok) jpeg_destroy_decompress(&d->cinfo);
  void *bufs[] = {d->row, d->rgb, d->tmp, d->vrow, d->acc, d->ch.k, d->ch.bounds, d->ch.pre, d->ch.k2,
                  d->cv.k, d->cv.bounds, d->cv.pre, d->cv.k2};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) lade__aligned_free(bufs[i]);
  free(d);
}

/* Headers claiming more pixels than this are refused before any allocation
 * (the largest real photos are far below; a hostile header is not). */
#define MAX_PIXELS ((uint64_t)1 << 28)

static void read_header(lade__imgdec_t *d, const uint8_t *jpeg, size_t len) {
  jpeg_mem_src(&d->cinfo, jpeg, (unsigned long)len);
  jpeg_read_header(&d->cinfo, TRUE);
}

int lade__jpeg_size(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, int *width, int *height) {
  if (!jpeg || len == 0) return lade__fail(LADE_EFORMAT, "corrupt JPEG: empty input");
  if (setjmp(d->err.jb)) {
    jpeg_abort_decompress(&d->cinfo);
    return lade__fail(LADE_EFORMAT, "corrupt JPEG: %s", d->err.msg);
  }
  read_header(d, jpeg, len);
  *width = (int)d->cinfo.image_width;
  *height = (int)d->cinfo.image_height;
  jpeg_abort_decompress(&d->cinfo);
  return 0;
}

static double tri_filter(double x) {
  if (x < 0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/*
 * Pillow's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter:
 * output pixel xx samples input [in0, in1) (float box inside [0, in_size)),
 * window clipped to [0, in_size).
 */
static int make_coeffs(coeffs_t *c, int in_size, double in0, double in1, int out_size, bool pairs) {
  double scale = (in1 - in0) / out_size, fscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * fscale;
  int ksize = (int)ceil(support) * 2 + 1;
  int rc;
  if ((rc = grow(&c->k, &c->kcap, (size_t)out_size * (size_t)ksize * sizeof(int32_t))) != 0) return rc;
  if ((rc = grow(&c->bounds, &c->bcap, (size_t)out_size * 2 * sizeof(int))) != 0) return rc;
  if ((rc = grow(&c->pre, &c->pcap, (size_t)ksize * sizeof(double))) != 0) return rc;
  c->ksize = ksize;
  double *pre = c->pre;
  double ss = 1.0 / fscale;
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
  }
  if (pairs) {
    /* Per output pair pi and tap pair tp: 16 int16 of the low 11 bits of
     * the coefficients, then 16 of the high bits, each as
     * {k0[2tp], k0[2tp+1]} x4 channels, then the same for the pair's second
     * pixel k1. The bilinear coefficients are >= 0 and <= 2^22. */
    const size_t np = (size_t)out_size / 2, ntp = (size_t)(ksize + 1) / 2;
    /* 64-byte aligned: its 32-byte loads must never split a cache line. */
    if ((rc = grow_align(&c->k2, &c->k2cap, np * ntp * 32 * sizeof(int16_t), 64)) != 0) return rc;
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
  return 0;
}

static inline uint8_t clip8(int32_t v) {
  v >>= PRECISION_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Hot loops get an AVX2 clone picked at load time (ifunc); the arithmetic is
 * the same integer arithmetic, so results do not depend on the CPU. Pixels
 * are RGBX (4 bytes) so one tap is one 4-lane multiply-add. */
/* ifunc resolvers run before a sanitizer runtime is up and crash in
 * instrumented builds: no clones there (gcc and clang spell it differently). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LADE_NO_CLONES 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LADE_NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(LADE_NO_CLONES)
#define LADE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LADE_CLONES
#endif

/* One row of RGBX pixels -> out_size RGBX pixels. */
static void resample_h_from(const coeffs_t *c, const uint8_t *restrict in, uint8_t *restrict out, int from,
                            int out_size) {
  const int ksize = c->ksize;
  for (int xx = from; xx < out_size; xx++) {
    const int xmin = c->bounds[2 * xx], n = c->bounds[2 * xx + 1];
    const int32_t *k = c->k + (size_t)xx * ksize;
    const uint8_t *p = in + (size_t)xmin * 4;
    int32_t s[4] = {1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1),
                    1 << (PRECISION_BITS - 1)};
    for (int x = 0; x < n; x++) {
      const int32_t kv = k[x];
      for (int ch = 0; ch < 4; ch++) s[ch] += p[4 * x + ch] * kv;
    }
    for (int ch = 0; ch < 4; ch++) out[4 * xx + ch] = clip8(s[ch]);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LADE_HAVE_AVX2_PATH 1
/*
 * Two output pixels per 256-bit register, two taps per multiply: pmaddwd on
 * 16-bit lanes {tap a, tap b} per channel gives a*ka + b*kb in 32 bits. The
 * 22-bit coefficients are split into high and low 11-bit halves (two
 * pmaddwd), so the sum is exactly Pillow's 32-bit fixed-point sum. Every pair
 * runs ceil(ksize/2) tap pairs: padded coefficients are zero and the input
 * row has ksize*4+16 readable bytes past its end. (A fixed trip count also
 * avoids a branch mispredict per pair.)
 */
__attribute__((target("avx2"))) static void resample_h_avx2(const coeffs_t *c, const uint8_t *restrict in,
                                                             uint8_t *restrict out, int out_size) {
  const int ntp = (c->ksize + 1) / 2;
  const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
  const __m128i interleave = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  int xx = 0;
  for (; xx + 1 < out_size; xx += 2) {
    const uint8_t *p0 = in + (size_t)c->bounds[2 * xx] * 4, *p1 = in + (size_t)c->bounds[2 * xx + 2] * 4;
    const int16_t *k2 = c->k2 + (size_t)(xx / 2) * ntp * 32;
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int tp = 0; tp < ntp; tp++) {
      __m128i a = _mm_loadl_epi64((const __m128i *)(p0 + 8 * tp));
      __m128i b = _mm_loadl_epi64((const __m128i *)(p1 + 8 * tp));
      __m256i px = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_unpacklo_epi64(a, b), interleave));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(px, _mm256_loadu_si256((const __m256i *)(k2 + 32 * tp))));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(px, _mm256_loadu_si256((const __m256i *)(k2 + 32 * tp + 16))));
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, 11), lo), half);
    s = _mm256_srai_epi32(s, PRECISION_BITS);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    w = _mm_packus_epi16(w, w);
    _mm_storel_epi64((__m128i *)(out + 4 * xx), w);
  }
  resample_h_from(c, in, out, xx, out_size); /* the odd last pixel */
}
#endif


static void resample_h_c(const coeffs_t *c, const uint8_t *in, uint8_t *out, int out_size) {
  resample_h_from(c, in, out, 0, out_size);
}

static resample_h_fn pick_resample_h(void) {
#ifdef LADE_HAVE_AVX2_PATH
  if (!getenv("LADE_NO_SIMD") && __builtin_cpu_supports("avx2")) return resample_h_avx2;
#endif
  return resample_h_c;
}

/* One output row of the vertical pass over n bytes of RGBX. */
LADE_CLONES static void resample_v(const int32_t *restrict k, int taps, const uint8_t *restrict rows, size_t stride,
                                   int32_t *restrict acc, uint8_t *restrict out, size_t n) {
  for (size_t i = 0; i < n; i++) acc[i] = 1 << (PRECISION_BITS - 1);
  for (int y = 0; y < taps; y++) {
    const uint8_t *p = rows + (size_t)y * stride;
    const int32_t kv = k[y];
    for (size_t i = 0; i < n; i++) acc[i] += p[i] * kv;
  }
  for (size_t i = 0; i < n; i++) out[i] = clip8(acc[i]);
}

/* Pillow's CMYK;I (Adobe, inverted) or CMYK unpack followed by cmyk2rgb. */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, int n, bool inverted) {
  for (int x = 0; x < n; x++) {
    int c = in[4 * x], m = in[4 * x + 1], y = in[4 * x + 2], k = in[4 * x + 3];
    if (inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    int nk = 255 - k, t;
#define MULDIV255(a, b) (t = (a) * (b) + 128, ((t >> 8) + t) >> 8)
    int r = nk - MULDIV255(c, nk), g = nk - MULDIV255(m, nk), b = nk - MULDIV255(y, nk);
#undef MULDIV255
    out[4 * x] = (uint8_t)(r < 0 ? 0 : r);
    out[4 * x + 1] = (uint8_t)(g < 0 ? 0 : g);
    out[4 * x + 2] = (uint8_t)(b < 0 ? 0 : b);
    out[4 * x + 3] = 255;
  }
}

typedef struct box {
  double top, left, h, w; /* source pixels */
  bool clip_to_box;       /* true: pixels outside the box never contribute (crop, then resize) */
} box_t;

/* The body of a decode; may longjmp out through the error manager. Returns a
 * LADE code for errors found outside libjpeg. */
static int decode_box(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, const box_t *b, int out_size, bool flip,
                      int dtype, void *out) {
  struct jpeg_decompress_struct *ci = &d->cinfo;
  int rc;
  read_header(d, jpeg, len);
  const int W = (int)ci->image_width, H = (int)ci->image_height;
  if ((uint64_t)W * (uint64_t)H > MAX_PIXELS)
    return lade__fail(LADE_EFORMAT, "JPEG of %dx%d pixels is larger than supported", W, H);
  if (!(b->w > 0 && b->h > 0 && b->left >= 0 && b->top >= 0 && b->left + b->w <= W + 1e-6 &&
        b->top + b->h <= H + 1e-6))
    return lade__fail(LADE_EINVAL, "crop box (top %g, left %g, %gx%g) outside the %dx%d image", b->top, b->left,
                      b->w, b->h, W, H);

  /* DCT scaling: the largest reduction that keeps the box >= out_size. */
  int f = 1;
  while (f < 8 && b->w / (2 * f) >= out_size && b->h / (2 * f) >= out_size) f *= 2;
  ci->scale_num = 1;
  ci->scale_denom = (unsigned)f;
  ci->dct_method = JDCT_ISLOW;
  ci->do_fancy_upsampling = TRUE;
  bool cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
  bool inverted = cmyk && ci->saw_Adobe_marker;
  if (cmyk)
    ci->out_color_space = JCS_CMYK;
  else if (ci->num_components == 1 || ci->num_components == 3)
    ci->out_color_space = JCS_EXT_RGBX; /* gray and YCbCr alike; X pads for 4-lane SIMD */
  else
    return lade__fail(LADE_EFORMAT, "JPEG with %d components is not supported", ci->num_components);
  jpeg_start_decompress(ci);
  const int sw = (int)ci->output_width, sh = (int)ci->output_height, ncomp = ci->output_components;

  /* The box and the decoded region in scaled pixels. With clip_to_box the
   * region is the box rounded outwards; otherwise it also covers the filter
   * support so the edge pixels see their neighbours (resize, then crop). */
  double bx0 = b->left / f, bx1 = (b->left + b->w) / f, by0 = b->top / f, by1 = (b->top + b->h) / f;
  double mx = 0, my = 0;
  if (!b->clip_to_box) {
    mx = ceil(LADE_MAX(1.0, (bx1 - bx0) / out_size)) + 1;
    my = ceil(LADE_MAX(1.0, (by1 - by0) / out_size)) + 1;
  }
  int rx0 = (int)floor(bx0 - mx), rx1 = (int)ceil(bx1 + mx), ry0 = (int)floor(by0 - my), ry1 = (int)ceil(by1 + my);
  if (rx0 < 0) rx0 = 0;
  if (ry0 < 0) ry0 = 0;
  if (rx1 > sw) rx1 = sw;
  if (ry1 > sh) ry1 = sh;
  if (rx1 <= rx0) rx1 = LADE_MIN(sw, rx0 + 1);
  if (ry1 <= ry0) ry1 = LADE_MIN(sh, ry0 + 1);
  const int rw = rx1 - rx0, rh = ry1 - ry0;

  JDIMENSION xoff = (JDIMENSION)rx0, cw = (JDIMENSION)rw;
  if (rw < sw) jpeg_crop_scanline(ci, &xoff, &cw);
  else xoff = 0, cw = (JDIMENSION)sw;
  const size_t shift = (size_t)(rx0 - (int)xoff) * (size_t)ncomp;

  if ((rc = make_coeffs(&d->ch, rw, bx0 - rx0, bx1 - rx0, out_size, d->resample_h != resample_h_c)) != 0) return rc;
  if ((rc = make_coeffs(&d->cv, rh, by0 - ry0, by1 - ry0, out_size, false)) != 0) return rc;
  /* Only the rows the vertical filter reads are decoded (Pillow does the same). */
  int vfirst = d->cv.bounds[0], vlast = vfirst;
  for (int yy = 0; yy < out_size; yy++) {
    int e = d->cv.bounds[2 * yy] + d->cv.bounds[2 * yy + 1];
    if (e > vlast) vlast = e;
  }
  const int y_begin = ry0 + vfirst, nrows = vlast - vfirst;
  const size_t orow = (size_t)out_size * 4; /* RGBX */
  /* Rows are followed by `pad` readable bytes for the two-pixel SIMD loop. */
  const size_t pad = (size_t)d->ch.ksize * 4 + 16, rowbytes = (size_t)cw * (size_t)ncomp;
  if ((rc = grow(&d->row, &d->row_cap, rowbytes + pad)) != 0) return rc;
  memset(d->row + rowbytes, 0, pad);
  if (cmyk) {
    if ((rc = grow(&d->rgb, &d->rgb_cap, (size_t)rw * 4 + pad)) != 0) return rc;
    memset(d->rgb + (size_t)rw * 4, 0, pad);
  }
  if ((rc = grow(&d->tmp, &d->tmp_cap, (size_t)LADE_MAX(nrows, 1) * orow)) != 0) return rc;
  if ((rc = grow(&d->vrow, &d->vrow_cap, orow)) != 0) return rc;
  if ((rc = grow(&d->acc, &d->acc_cap, orow * sizeof(int32_t))) != 0) return rc;

  if (y_begin > 0) {
    JDIMENSION todo = (JDIMENSION)y_begin;
    while (todo > 0) {
      JDIMENSION n = jpeg_skip_scanlines(ci, todo);
      if (n == 0) return lade__fail(LADE_EFORMAT, "corrupt JPEG: cannot skip to row %d", y_begin);
      todo -= n;
    }
  }
  for (int r = 0; r < nrows; r++) {
    JSAMPROW rows[1] = {d->row};
    if (jpeg_read_scanlines(ci, rows, 1) != 1)
      return lade__fail(LADE_EFORMAT, "corrupt JPEG: no data at row %d", y_begin + r);
    const uint8_t *src = d->row + shift;
    if (cmyk) {
      cmyk_to_rgb(src, d->rgb, rw, inverted);
      src = d->rgb;
    }
    d->resample_h(&d->ch, src, d->tmp + (size_t)r * orow, out_size);
  }
  jpeg_abort_decompress(ci);

  /* Vertical pass, one output row at a time; then flip and store. */
  const int ksize = d->cv.ksize;
  int32_t *acc = d->acc;
  uint8_t *vrow = d->vrow;
  for (int yy = 0; yy < out_size; yy++) {
    const int ymin = d->cv.bounds[2 * yy] - vfirst, n = d->cv.bounds[2 * yy + 1];
    const int32_t *k = d->cv.k + (size_t)yy * ksize;
    resample_v(k, n, d->tmp + (size_t)ymin * orow, orow, acc, vrow, orow);
    if (dtype == LADE_DTYPE_UINT8) {
      uint8_t *o = (uint8_t *)out + (size_t)yy * out_size * 3;
      for (int x = 0; x < out_size; x++) {
        const uint8_t *s = vrow + (size_t)(flip ? out_size - 1 - x : x) * 4;
        o[3 * x] = s[0];
        o[3 * x + 1] = s[1];
        o[3 * x + 2] = s[2];
      }
    } else {
      const size_t plane = (size_t)out_size * out_size;
      float *o0 = (float *)out + (size_t)yy * out_size, *o1 = o0 + plane, *o2 = o1 + plane;
      const float *l0 = d->lut[0], *l1 = d->lut[1], *l2 = d->lut[2];
      for (int x = 0; x < out_size; x++) {
        const uint8_t *s = vrow + (size_t)(flip ? out_size - 1 - x : x) * 4;
        o0[x] = l0[s[0]];
        o1[x] = l1[s[1]];
        o2[x] = l2[s[2]];
      }
    }
  }
  return 0;
}

/* The one setjmp: libjpeg errors land here, and the decoder is reset so the
 * next image can reuse it. */
static int run_guarded(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, const box_t *b, int out_size, bool flip,
                       int dtype, void *out) {
  if (!jpeg || len == 0) return lade__fail(LADE_EFORMAT, "corrupt JPEG: empty input");
  if (out_size <= 0 || out_size > 65535) return lade__fail(LADE_EINVAL, "bad output size %d", out_size);
  if (dtype != LADE_DTYPE_UINT8 && dtype != LADE_DTYPE_FLOAT32)
    return lade__fail(LADE_EINVAL, "image dtype must be uint8 or float32, not %s", lade_dtype_name(dtype));
  if (setjmp(d->err.jb)) {
    jpeg_abort_decompress(&d->cinfo);
    return lade__fail(LADE_EFORMAT, "corrupt JPEG: %s", d->err.msg);
  }
  int rc = decode_box(d, jpeg, len, b, out_size, flip, dtype, out);
  if (rc != 0) jpeg_abort_decompress(&d->cinfo);
  return rc;
}

int lade__imgdec_crop(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, int top, int left, int h, int w,
                      int out_size, bool flip, int dtype, void *out) {
  box_t b = {top, left, h, w, true};
  return run_guarded(d, jpeg, len, &b, out_size, flip, dtype, out);
}

int lade__imgdec_resize_crop(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, double top, double left, double h,
                             double w, int out_size, bool flip, int dtype, void *out) {
  box_t b = {top, left, h, w, false};
  return run_guarded(d, jpeg, len, &b, out_size, flip, dtype, out);
}

#else /* !LADE_HAVE_JPEG */

#define NO_JPEG() lade__fail(LADE_EUNSUPPORTED, "JPEG support is not built in (configure with libjpeg-turbo installed)")

int lade__imgdec_create(lade__imgdec_t **out) {
  *out = NULL;
  return NO_JPEG();
}
void lade__imgdec_destroy(lade__imgdec_t *d) { LADE_UNUSED(d); }
int lade__jpeg_size(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, int *width, int *height) {
  return NO_JPEG();
}
int lade__imgdec_crop(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, int top, int left, int h, int w,
                      int out_size, bool flip, int dtype, void *out) {
  return NO_JPEG();
}
int lade__imgdec_resize_crop(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, double top, double left, double h,
                             double w, int out_size, bool flip, int dtype, void *out) {
  return NO_JPEG();
}

#endif
