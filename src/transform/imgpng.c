/*
 * imgpng.c - the PNG backend of the image pipeline (libspng).
 *
 * The result equals PIL's Image.open(f).convert("RGB") (torchvision's
 * default loader): grey is replicated, alpha is dropped (not composited),
 * palette entries looked up, tRNS and gAMA ignored. 16-bit samples follow
 * Pillow 9.4's unpackers: RGB, RGBA and grey+alpha keep the high byte
 * (v >> 8); 16-bit grey opens as mode "I" and convert("RGB") clips it to
 * 0..255 (so almost every 16-bit grey photo comes out white, as in
 * torchvision).
 *
 * A PNG is decoded whole (deflate streams cannot be cropped), into a per
 * thread buffer that only grows; libspng allocates its context and inflate
 * state per image. Truncated files, CRC errors in critical chunks and bad
 * deflate data are LADE_EFORMAT "corrupt PNG: <libspng's reason>",
 * whatever the crop.
 */
#include <stdlib.h>
#include <string.h>

#include "transform/imgpipe.h"

#ifdef LADE_HAVE_PNG

#include <spng.h>

typedef struct png_state {
  uint8_t *img; /* the decoded image */
  size_t img_cap;
  uint8_t *row; /* one converted row, RGBX (16-bit input only) */
  size_t row_cap;
} png_state_t;

static int pb_create(void **out) {
  *out = calloc(1, sizeof(png_state_t));
  return *out ? 0 : lade__fail(LADE_ENOMEM, "out of memory (PNG decoder)");
}

static void pb_destroy(void *st) {
  png_state_t *s = st;
  if (!s) return;
  lade__aligned_free(s->img);
  lade__aligned_free(s->row);
  free(s);
}

static int png_fail(int err) { return lade__fail(LADE_EFORMAT, "corrupt PNG: %s", spng_strerror(err)); }

/* A context on the buffer with its header read; *ctx is NULL on error. */
static int png_open(const uint8_t *buf, size_t len, spng_ctx **ctx, struct spng_ihdr *ih) {
  int e;
  *ctx = spng_ctx_new(0);
  if (!*ctx) return lade__fail(LADE_ENOMEM, "out of memory (PNG context)");
  /* Bound what a hostile file can make libspng allocate. */
  if ((e = spng_set_chunk_limits(*ctx, (size_t)1 << 26, (size_t)1 << 26)) != 0 ||
      (e = spng_set_png_buffer(*ctx, buf, len)) != 0 || (e = spng_get_ihdr(*ctx, ih)) != 0) {
    spng_ctx_free(*ctx);
    *ctx = NULL;
    return png_fail(e);
  }
  return 0;
}

static int pb_size(void *st, const uint8_t *buf, size_t len, int *width, int *height) {
  LADE__UNUSED(st);
  spng_ctx *ctx;
  struct spng_ihdr ih;
  int rc = png_open(buf, len, &ctx, &ih);
  if (rc) return rc;
  spng_ctx_free(ctx);
  if (ih.width > INT32_MAX || ih.height > INT32_MAX)
    return lade__fail(LADE_EFORMAT, "PNG of %ux%u pixels is larger than supported", ih.width, ih.height);
  *width = (int)ih.width;
  *height = (int)ih.height;
  return 0;
}

/* One row of 16-bit host-endian samples in the PNG's own layout -> RGBX. */
static void row16_to_rgbx(const uint16_t *in, uint8_t *out, int n, int color_type) {
  for (int x = 0; x < n; x++) {
    uint8_t r, g, b;
    switch (color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE: /* Pillow mode "I", then I -> RGB clips */
      r = g = b = in[x] > 255 ? 255 : (uint8_t)in[x];
      break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: /* "LA;16B": high bytes */
      r = g = b = (uint8_t)(in[2 * x] >> 8);
      break;
    case SPNG_COLOR_TYPE_TRUECOLOR: /* "RGB;16B" */
      r = (uint8_t)(in[3 * x] >> 8), g = (uint8_t)(in[3 * x + 1] >> 8), b = (uint8_t)(in[3 * x + 2] >> 8);
      break;
    default: /* SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: "RGBA;16B" */
      r = (uint8_t)(in[4 * x] >> 8), g = (uint8_t)(in[4 * x + 1] >> 8), b = (uint8_t)(in[4 * x + 2] >> 8);
      break;
    }
    out[4 * x] = r;
    out[4 * x + 1] = g;
    out[4 * x + 2] = b;
    out[4 * x + 3] = 255;
  }
}

static int decode_into(png_state_t *s, spng_ctx *ctx, const struct spng_ihdr *ih, lade__imgdec_t *d,
                       const lade__imgbox_t *b, int out_size) {
  int rc, e;
  const int W = (int)ih->width, H = (int)ih->height;
  if ((uint64_t)ih->width * ih->height > LADE__IMG_MAX_PIXELS)
    return lade__fail(LADE_EFORMAT, "PNG of %ux%u pixels is larger than supported", ih->width, ih->height);
  lade__imgplan_t pl;
  if ((rc = lade__imgpipe_begin(d, W, H, 1, W, H, b, out_size, &pl)) != 0) return rc;
  /* 8-bit and smaller: libspng expands palette/grey/bit depths to RGBA8
   * (without tRNS: alpha is dropped anyway). 16-bit: the native layout, so
   * the reduction to 8 bits is Pillow's, not libspng's. */
  const bool wide = ih->bit_depth == 16;
  const int fmt = wide ? SPNG_FMT_PNG : SPNG_FMT_RGBA8;
  size_t bytes;
  if ((e = spng_decoded_image_size(ctx, fmt, &bytes)) != 0) return png_fail(e);
  if ((rc = lade__imgpipe_grow(&s->img, &s->img_cap, bytes + pl.pad)) != 0) return rc;
  memset(s->img + bytes, 0, pl.pad);
  if ((e = spng_decode_image(ctx, s->img, bytes, fmt, 0)) != 0) return png_fail(e);
  const size_t stride = bytes / (size_t)H;
  if (wide && (rc = lade__imgpipe_grow(&s->row, &s->row_cap, (size_t)pl.rw * 4 + pl.pad)) != 0) return rc;
  if (wide) memset(s->row + (size_t)pl.rw * 4, 0, pl.pad);
  const size_t px = wide ? stride / (size_t)W : 4; /* bytes per pixel */
  for (int r = 0; r < pl.nrows; r++) {
    const uint8_t *src = s->img + (size_t)(pl.y0 + r) * stride + (size_t)pl.rx0 * px;
    if (wide) {
      row16_to_rgbx((const uint16_t *)src, s->row, pl.rw, ih->color_type);
      src = s->row;
    }
    lade__imgpipe_row(d, r, src);
  }
  return 0;
}

static int pb_decode(void *st, lade__imgdec_t *d, const uint8_t *buf, size_t len, const lade__imgbox_t *b,
                      int out_size) {
  spng_ctx *ctx;
  struct spng_ihdr ih;
  int rc = png_open(buf, len, &ctx, &ih);
  if (rc) return rc;
  rc = decode_into(st, ctx, &ih, d, b, out_size);
  spng_ctx_free(ctx);
  return rc;
}

const lade__imgbackend_t lade__img_png = {"PNG", pb_create, pb_destroy, pb_size, pb_decode, NULL};

#endif /* LADE_HAVE_PNG; without it imgdecode.c has a table that says so */
