/*
 * imgpipe.h - between the image pipeline (imagenet.c) and its decoder
 * backends (imgjpeg.c: libjpeg-turbo, imgpng.c: libspng). Internal to
 * src/transform/.
 *
 * A backend fills one lade__imgbackend_t. Its decode() reads the header,
 * calls lade__imgpipe_begin() with the image size (and the DCT scale it
 * decodes at), then hands each row the plan asks for, as RGBX, to
 * lade__imgpipe_row() (or as RGB to lade__imgpipe_row_rgb() where
 * lade__imgpipe_takes_rgb()); the pipeline resamples it horizontally at once. The
 * caller then runs the vertical pass, the flip and the store
 * (lade__imgpipe_finish), identical for every format.
 */
#ifndef LADE__IMGPIPE_H
#define LADE__IMGPIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transform/imagenet.h"

/* Headers claiming more pixels than this are refused before any allocation
 * (the largest real photos are far below; a hostile header is not). */
#define LADE__IMG_MAX_PIXELS ((uint64_t)1 << 28)

typedef struct lade__imgbox {
  double top, left, h, w; /* source pixels */
  bool clip_to_box;       /* true: pixels outside the box never contribute (crop, then resize) */
} lade__imgbox_t;

/* What a backend must deliver, in decoded (possibly DCT-scaled) pixels. */
typedef struct lade__imgplan {
  int rx0, rw;      /* columns [rx0, rx0 + rw) */
  int y0, nrows;    /* rows [y0, y0 + nrows), in order */
  size_t pad;       /* readable bytes a row pointer must have after rw*4 */
} lade__imgplan_t;

typedef struct lade__imgbackend {
  const char *name; /* "JPEG", "PNG" */
  int (*create)(void **st);
  void (*destroy)(void *st);
  int (*size)(void *st, const uint8_t *buf, size_t len, int *width, int *height);
  /* Returns 0 after every planned row went to lade__imgpipe_row. */
  int (*decode)(void *st, lade__imgdec_t *d, const uint8_t *buf, size_t len, const lade__imgbox_t *b,
                int out_size);
  /* NULL in a build with the library; else why there is none (and the
   * functions are NULL): an image of this format fails with it */
  const char *missing;
} lade__imgbackend_t;

extern const lade__imgbackend_t lade__img_jpeg; /* imgjpeg.c, with LADE_HAVE_JPEG */
extern const lade__imgbackend_t lade__img_png;  /* imgpng.c, with LADE_HAVE_PNG */

/* The DCT scale f (1, 2, 4 or 8) the JPEG backend may decode at for this box:
 * 1 unless decode_scale=auto was set on the decoder. */
int lade__imgpipe_dct_factor(const lade__imgdec_t *d, const lade__imgbox_t *b, int out_size);

/* Checks the box against the W x H image, plans the decoded region for an
 * image decoded at 1/f scale (sw x sh pixels) and prepares the coefficients. */
int lade__imgpipe_begin(lade__imgdec_t *d, int W, int H, int f, int sw, int sh, const lade__imgbox_t *b,
                        int out_size, lade__imgplan_t *plan);

/* Row r (0-based, in plan order) of the region: rw RGBX pixels followed by
 * plan->pad readable bytes. */
void lade__imgpipe_row(lade__imgdec_t *d, int r, const uint8_t *rgbx);

/* True when this decoder also takes RGB rows (3 bytes a pixel) and they are
 * the cheaper kind to produce (the CPU's horizontal pass reads them as fast:
 * the AVX-512 VNNI and VBMI passes, the NEON one); then a backend may hand rows to
 * lade__imgpipe_row_rgb instead. */
bool lade__imgpipe_takes_rgb(const lade__imgdec_t *d);

/* Row r of the region as rw RGB pixels followed by plan->pad readable bytes;
 * only where lade__imgpipe_takes_rgb. */
void lade__imgpipe_row_rgb(lade__imgdec_t *d, int r, const uint8_t *rgb);

/* The horizontal passes a backend's tuner may try (all exact; at most 2: the
 * CPU's fastest kind on RGB and on RGBX rows): how many, and use one from
 * the next image on. 0 is the default (imgjpeg.c). */
int lade__imgpipe_hpass_count(const lade__imgdec_t *d);
void lade__imgpipe_hpass_use(lade__imgdec_t *d, int i);
/* The backend's tuner chose (the pass in use and `rows` rows per read); its
 * trials cost cost_s seconds more than the choice would have. */
void lade__imgpipe_tuned(lade__imgdec_t *d, int rows, double cost_s);

/* Scratch that only grows and does not keep its contents; 64-byte aligned. */
int lade__imgpipe_grow(void *pp, size_t *cap, size_t need);

/* ---- the decoder's side (imgdecode.c) */
/* A pipeline (the decoder's state) with its SIMD passes chosen for this CPU. */
int lade__imgpipe_new(lade__imgdec_t **out);
/* Frees it; the backends' states first (lade__imgpipe_codec_state). */
void lade__imgpipe_free(lade__imgdec_t *d);
/* Backend i's state (NULL until the decoder creates it on first use). */
void **lade__imgpipe_codec_state(lade__imgdec_t *d, int i);
/* The vertical pass, then flip and store into out (after a backend's decode). */
void lade__imgpipe_finish(lade__imgdec_t *d, bool flip, int dtype, void *out);

#endif
