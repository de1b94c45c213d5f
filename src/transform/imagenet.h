/*
 * imagenet.h - the image pipeline: decode by content (JPEG with
 * libjpeg-turbo, crop-aware; PNG with libspng), resize, flip, normalise.
 * Used by the imagenet-train / imagenet-eval transforms and directly by
 * tests and fuzz targets. Other formats (GIF, BMP, TIFF, WebP, PPM/PGM/PBM,
 * ...) are recognised by their magic bytes and refused with
 * LADE_EUNSUPPORTED; unrecognised bytes are LADE_EFORMAT "not an image".
 */
#ifndef LADE__IMAGENET_H
#define LADE__IMAGENET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* Per-thread decoder state (the backends' decoders and scratch buffers).
 * Not thread-safe: one per worker thread. */
typedef struct lade__imgdec lade__imgdec_t;

int lade__imgdec_create(lade__imgdec_t **out);
void lade__imgdec_destroy(lade__imgdec_t *d);

/* decode_scale=auto: let the JPEG IDCT shrink a box at least 2x the output
 * (1/2, 1/4, 1/8). Faster, but no longer bit-identical to torchvision (see
 * docs/transform.md). Off by default. */
void lade__imgdec_set_decode_scale(lade__imgdec_t *d, bool on);
/* Which float32 store the decoder runs: "avx512", "avx2" or "c" (the SIMD
 * ones only where they passed the exactness check at creation). */
const char *lade__imgdec_store_f32_name(const lade__imgdec_t *d);

/*
 * The stage account (bench_jpeg_transform, `lade bench`): a JPEG decode
 * told to stop after a stage, so that timing the same boxes once per stage
 * attributes a crop's time to the stages without a profiler, and in the
 * last stage the seconds of each of lade's own steps. `stop` is the last
 * stage to run:
 *   OFF     everything, untimed (the default; the account is not touched)
 *   HEADER  the completeness check, header and plan (no rows, no output)
 *   ENTROPY ... and the entropy decode to the region's last row (skipped to)
 *   DECODE  ... and the decoder's rows of the region (IDCT, upsampling,
 *           colour), which the pipeline does not take (no output)
 *   FULL    everything, output included, with the seconds below booked
 * PNG images are decoded whole and booked nowhere.
 */
enum { LADE__ACCT_OFF, LADE__ACCT_HEADER, LADE__ACCT_ENTROPY, LADE__ACCT_DECODE, LADE__ACCT_FULL };
typedef struct lade__imgacct {
  int stop;
  uint64_t images;       /* JPEG decodes booked (any stop) */
  double rows_frac;      /* sum over images: rows decoded to the region's last, of the image's */
  double area_frac;      /* sum: the region's decoded pixels (cropped columns x rows), of the image's */
  /* FULL only: seconds in */
  double plan_s;         /* lade__imgpipe_begin: box check, coefficients, scratch */
  double decoder_s;      /* libjpeg's skip and read calls for the region */
  double hpass_s;        /* lade's horizontal pass over the rows handed to it */
  double finish_s;       /* lade's vertical pass, flip and store */
} lade__imgacct_t;

/* The decoder's account; set ->stop before decoding (zero the rest to start). */
lade__imgacct_t *lade__imgdec_account(lade__imgdec_t *d);

/* The choices this decoder made by timing its first JPEGs (imgjpeg.c):
 * false before it made them; else true with e.g. "vbmi-rgb, 16 rows per
 * libjpeg call (trials cost 1.2 ms)" in buf (when size > 0). */
bool lade__imgdec_choices(const lade__imgdec_t *d, char *buf, size_t size);

/* Reads width and height from the image header (JPEG or PNG) without
 * decoding. */
int lade__img_size(lade__imgdec_t *d, const uint8_t *buf, size_t len, int *width, int *height);

/* torchvision RandomResizedCrop.get_params: 10 tries then the centre-crop
 * fallback. Writes the box (top, left, height, width) in source pixels. */
void lade__rrc_params(lade__rng_t *rng, int width, int height, double scale_min, double scale_max, double ratio_min,
                      double ratio_max, int *top, int *left, int *h, int *w);

/*
 * Decodes the box (top, left, h, w) of the image, resizes it to out_size x
 * out_size (bilinear with antialiasing, as PIL/torchvision), optionally flips
 * it horizontally, and writes float32 CHW normalised with the ImageNet
 * mean/std (dtype LADE_DTYPE_FLOAT32) or uint8 HWC (LADE_DTYPE_UINT8).
 * Every input decodes to what PIL's Image.open(f).convert("RGB") gives
 * (grey replicated, alpha dropped, CMYK converted as Pillow does). A JPEG
 * is judged complete or truncated on the whole file, as PIL does, then only
 * what the box needs is decoded; a PNG is decoded whole.
 */
int lade__imgdec_crop(lade__imgdec_t *d, const uint8_t *buf, size_t len, int top, int left, int h, int w,
                      int out_size, bool flip, int dtype, void *out);

/*
 * Like lade__imgdec_crop for a fractional box, with "resize the whole image,
 * then crop" semantics: pixels just outside the box feed the filter at its
 * edges, as in torchvision's Resize + CenterCrop (imagenet-eval).
 */
int lade__imgdec_resize_crop(lade__imgdec_t *d, const uint8_t *buf, size_t len, double top, double left, double h,
                             double w, int out_size, bool flip, int dtype, void *out);

#endif
