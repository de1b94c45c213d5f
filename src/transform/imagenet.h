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
