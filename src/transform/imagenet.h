/*
 * imagenet.h - the JPEG image pipeline (libjpeg-turbo): crop-aware decode,
 * resize, flip, normalise. Used by the imagenet-train / imagenet-eval
 * transforms and directly by tests and fuzz targets.
 */
#ifndef LADE_IMAGENET_H
#define LADE_IMAGENET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* Per-thread decoder state (a jpeg_decompress_struct and scratch buffers). */
typedef struct lade__imgdec lade__imgdec_t;

int lade__imgdec_create(lade__imgdec_t **out);
void lade__imgdec_destroy(lade__imgdec_t *d);

/* Reads width and height from a JPEG header without decoding. */
int lade__jpeg_size(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, int *width, int *height);

/* torchvision RandomResizedCrop.get_params: 10 tries then the centre-crop
 * fallback. Writes the box (top, left, height, width) in source pixels. */
void lade__rrc_params(lade__rng_t *rng, int width, int height, double scale_min, double scale_max, double ratio_min,
                      double ratio_max, int *top, int *left, int *h, int *w);

/*
 * Decodes the box (top, left, h, w) of the JPEG, resizes it to out_size x
 * out_size (bilinear with antialiasing, as PIL/torchvision), optionally flips
 * it horizontally, and writes float32 CHW normalised with the ImageNet
 * mean/std (dtype LADE_DTYPE_FLOAT32) or uint8 HWC (LADE_DTYPE_UINT8).
 * Grayscale and CMYK input decode to RGB. Only what the box needs is decoded.
 */
int lade__imgdec_crop(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, int top, int left, int h, int w,
                      int out_size, bool flip, int dtype, void *out);

/*
 * Like lade__imgdec_crop for a fractional box, with "resize the whole image,
 * then crop" semantics: pixels just outside the box feed the filter at its
 * edges, as in torchvision's Resize + CenterCrop (imagenet-eval).
 */
int lade__imgdec_resize_crop(lade__imgdec_t *d, const uint8_t *jpeg, size_t len, double top, double left, double h,
                             double w, int out_size, bool flip, int dtype, void *out);

#endif
