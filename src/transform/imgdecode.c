/*
 * imgdecode.c - the image decoder's entry points (imagenet.h): the format
 * by content (magic bytes, never the file name), its backend (imgjpeg.c,
 * imgpng.c) run into the pipeline (imagenet.c), and the decoder's life.
 * Above the backends and the pipeline: they never call back into it.
 */
#include <stdio.h>
#include <string.h>

#include "transform/imagenet.h"
#include "transform/imgpipe.h"

/* The backends by format (0: JPEG, 1: PNG); one whose library this build
 * lacks is a table that says so, and its images fail with that. */
#define MISSING(format, why) (&(const lade__imgbackend_t){.name = format, .missing = why})
static const lade__imgbackend_t *const backends[2] = {
#ifdef LADE_HAVE_JPEG
    &lade__img_jpeg,
#else
    MISSING("JPEG", "JPEG support is not built in (configure with libjpeg-turbo installed)"),
#endif
#ifdef LADE_HAVE_PNG
    &lade__img_png,
#else
    MISSING("PNG", "PNG support is not built in (install libspng-dev and reconfigure)"),
#endif
};

int lade__imgdec_create(lade__imgdec_t **out) { return lade__imgpipe_new(out); }

void lade__imgdec_destroy(lade__imgdec_t *d) {
  if (!d) return;
  for (int i = 0; i < 2; i++) {
    void **st = lade__imgpipe_codec_state(d, i);
    if (*st) backends[i]->destroy(*st);
  }
  lade__imgpipe_free(d);
}

/*
 * Format by content. torchvision's ImageFolder accepts .jpg .jpeg .png .ppm
 * .bmp .pgm .tif .tiff .webp by name; real datasets hold PNGs named .JPEG
 * and the like, so the name decides nothing here.
 */
static const char *sniff_other(const uint8_t *p, size_t n) {
  if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) return "GIF";
  if (n >= 2 && p[0] == 'B' && p[1] == 'M') return "BMP";
  if (n >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0)) return "TIFF";
  if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) return "WebP";
  if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7' && (p[2] == ' ' || p[2] == '\n' || p[2] == '\r' || p[2] == '\t'))
    return p[1] == '1' || p[1] == '4' ? "PBM" : p[1] == '2' || p[1] == '5' ? "PGM" : p[1] == '7' ? "PAM" : "PPM";
  if (n >= 12 && memcmp(p, "\0\0\0\x0cjP  \r\n\x87\n", 12) == 0) return "JPEG 2000";
  if (n >= 4 && memcmp(p, "\0\0\1\0", 4) == 0) return "ICO";
  if (n >= 12 && memcmp(p + 4, "ftyp", 4) == 0) return "HEIF/AVIF";
  return NULL;
}

static int pick_backend(lade__imgdec_t *d, const uint8_t *p, size_t n, const lade__imgbackend_t **be, void **st) {
  int i;
  if (!p || n == 0) return lade__fail(LADE_EFORMAT, "not an image (JPEG or PNG): empty file");
  if (n >= 2 && p[0] == 0xFF && p[1] == 0xD8)
    i = 0;
  else if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
    i = 1;
  else {
    const char *other = sniff_other(p, n);
    if (other)
      return lade__fail(LADE_EUNSUPPORTED, "%s image: only JPEG and PNG are decoded (convert the file)", other);
    char hex[3 * 8 + 1] = "";
    for (size_t k = 0, at = 0; k < n && k < 8; k++) at += (size_t)snprintf(hex + at, sizeof hex - at, "%s%02x", k ? " " : "", p[k]);
    return lade__fail(LADE_EFORMAT, "not an image (JPEG or PNG): the file starts with %s", hex);
  }
  if (backends[i]->missing)
    return lade__fail(LADE_EUNSUPPORTED, "%s image, but %s", backends[i]->name, backends[i]->missing);
  *be = backends[i];
  void **slot = lade__imgpipe_codec_state(d, i);
  if (!*slot) {
    int rc = backends[i]->create(slot);
    if (rc) return rc;
  }
  *st = *slot;
  return 0;
}

int lade__img_size(lade__imgdec_t *d, const uint8_t *buf, size_t len, int *width, int *height) {
  const lade__imgbackend_t *be = NULL; /* set when pick_backend returns 0 (gcc cannot tell in a build */
  void *st = NULL;                      /* with no codec, where every pick fails) */
  int rc = pick_backend(d, buf, len, &be, &st);
  if (rc) return rc;
  return be->size(st, buf, len, width, height);
}

static int run(lade__imgdec_t *d, const uint8_t *buf, size_t len, const lade__imgbox_t *b, int out_size, bool flip,
               int dtype, void *out) {
  if (out_size <= 0 || out_size > 65535) return lade__fail(LADE_EINVAL, "bad output size %d", out_size);
  if (dtype != LADE_DTYPE_UINT8 && dtype != LADE_DTYPE_FLOAT32)
    return lade__fail(LADE_EINVAL, "image dtype must be uint8 or float32, not %s", lade_dtype_name(dtype));
  const lade__imgbackend_t *be = NULL; /* set when pick_backend returns 0 (gcc cannot tell in a build */
  void *st = NULL;                      /* with no codec, where every pick fails) */
  int rc = pick_backend(d, buf, len, &be, &st);
  if (rc) return rc;
  if ((rc = be->decode(st, d, buf, len, b, out_size)) != 0) return rc;
  lade__imgacct_t *a = lade__imgdec_account(d);
  if (a->stop == LADE__ACCT_OFF || be != backends[0]) {
    lade__imgpipe_finish(d, flip, dtype, out);
  } else if (a->stop == LADE__ACCT_FULL) {
    const double t0 = lade__now();
    lade__imgpipe_finish(d, flip, dtype, out);
    a->finish_s += lade__now() - t0;
  } /* an earlier stop: the rows were not resampled, there is nothing to finish */
  return 0;
}

int lade__imgdec_crop(lade__imgdec_t *d, const uint8_t *buf, size_t len, int top, int left, int h, int w,
                      int out_size, bool flip, int dtype, void *out) {
  lade__imgbox_t b = {top, left, h, w, true};
  return run(d, buf, len, &b, out_size, flip, dtype, out);
}

int lade__imgdec_resize_crop(lade__imgdec_t *d, const uint8_t *buf, size_t len, double top, double left, double h,
                             double w, int out_size, bool flip, int dtype, void *out) {
  lade__imgbox_t b = {top, left, h, w, false};
  return run(d, buf, len, &b, out_size, flip, dtype, out);
}
