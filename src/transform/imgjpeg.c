/*
 * imgjpeg.c - the JPEG backend of the image pipeline (libjpeg-turbo).
 *
 * Crop-aware: jpeg_crop_scanline for the columns (it widens to iMCU
 * boundaries; the returned xoffset is accounted for), jpeg_skip_scanlines to
 * the first row the resampler needs, read only up to the last one, then
 * jpeg_abort_decompress. With decode_scale=auto the IDCT may also shrink the
 * image (1/2, 1/4, 1/8) when the box is at least 2x the output.
 *
 * Verdict on the file, not on the rows: since rows after the box are never
 * read, libjpeg alone would call a truncated file corrupt for some crops and
 * fine for others. PIL (torchvision's loader) raises "image file is
 * truncated" for any file whose decode runs out of bytes before the
 * end-of-image marker, i.e. any file without its EOI. jpeg_complete() walks
 * the marker segments and the entropy-coded data (a memchr for 0xFF, far
 * cheaper than a decode) and gives that verdict first.
 *
 * Rows per call and the row kind, tuned at run time. libjpeg hands its
 * output out row by row or in blocks, as RGB or RGBX, and the pipeline has
 * an exact horizontal pass for either kind (imagenet.c, pick_hpasses);
 * which is fastest depends on the CPU: 16-row blocks measured 1.24-1.35x
 * faster than single rows on a Zen 4 EPYC and 0.96-0.97x on a Zen 5 one
 * (bench/RESULTS.md), and on an Intel Xeon the horizontal pass cost 4x what
 * it does on Zen 5 (issue 32). The pixels are the same whichever runs, so
 * each decoder (one per worker thread) tries every pair on its first
 * images, in turns, timing the thread's CPU time from after the skip (the
 * entropy decode of the rows above the region, which no choice changes,
 * would only add noise) per decoded region pixel, and keeps the fastest:
 * the batches never depend on it. The trials cost the difference between
 * the four pairs on 8 images each (1.4-3.9 ms on Zen 5; each decoder says).
 * LADE_JPEG_ROWS=1 or 16 and LADE_HPASS=NAME fix a choice (for benchmarks).
 *
 * Errors: libjpeg errors and warnings longjmp back to the single setjmp in
 * jb_decode(); the message goes into lade_last_error(). Nothing is printed
 * and nothing exits; the decoder is reset and reusable.
 */
#include <stdlib.h>
#include <string.h>

#include "transform/imgpipe.h"

#ifdef LADE_HAVE_JPEG

#include <setjmp.h>
#include <stdio.h>
#include <time.h>

#include <jerror.h>
#include <jpeglib.h>

typedef struct err_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} err_mgr_t;

/* candidates: 2 rows-per-call choices x the pipeline's passes (at most 2: RGB and RGBX rows) */
enum { BLOCK_ROWS = 16, TUNE_CYCLES = 8, MAX_CAND = 4 };
#define SWITCH_MARGIN 0.05
static const int ROWS[2] = {1, BLOCK_ROWS};

typedef struct jpeg_state {
  struct jpeg_decompress_struct cinfo;
  err_mgr_t err;
  uint8_t *row; /* one decoded row (up to 4 components) */
  size_t row_cap;
  uint8_t *rgb; /* the row converted to RGBX (CMYK input only) */
  size_t rgb_cap;
  /* the tuner: candidate c is ROWS[c % nrows] rows per call with the
   * pipeline's horizontal pass c / nrows; until `chosen` (c + 1) is set,
   * image i uses candidate i % ncand and adds its CPU seconds and decoded
   * pixels to that candidate's sums */
  int ncand, nrows, rows0, chosen, trials;
  double secs[MAX_CAND], pixels[MAX_CAND];
} jpeg_state_t;

static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int tune_rows(const jpeg_state_t *s, int c) { return ROWS[s->rows0 + c % s->nrows]; }

/* The candidate for this image; the pipeline uses its horizontal pass. */
static int tune_pick(jpeg_state_t *s, lade__imgdec_t *d) {
  if (!s->ncand) {
    const char *env = getenv("LADE_JPEG_ROWS");
    const bool fixed = env && (!strcmp(env, "1") || atoi(env) == BLOCK_ROWS);
    s->nrows = fixed ? 1 : 2;
    s->rows0 = fixed && atoi(env) == BLOCK_ROWS;
    s->ncand = LADE__MIN(s->nrows * lade__imgpipe_hpass_count(d), MAX_CAND);
    if (s->ncand == 1) { /* fixed: nothing to try */
      s->chosen = 1;
      lade__imgpipe_tuned(d, tune_rows(s, 0), 0);
    }
  }
  const int c = s->chosen ? s->chosen - 1 : s->trials % s->ncand;
  lade__imgpipe_hpass_use(d, c / s->nrows);
  return c;
}

/* After a decode in the tuning phase: books it, and when every candidate has
 * had its images chooses the one with the least CPU time per pixel; but a
 * horizontal pass other than the default (measured fastest where lade was
 * tuned) only when it beats the default's best by SWITCH_MARGIN: timing on
 * a few images is noisy, and a wrong switch costs more than a missed one. */
static void tune_book(jpeg_state_t *s, lade__imgdec_t *d, int c, double secs, double pixels) {
  s->secs[c] += secs;
  s->pixels[c] += pixels;
  if (++s->trials < s->ncand * TUNE_CYCLES) return;
  int best = 0, best0 = 0; /* overall; with the default pass (candidates 0 .. nrows - 1) */
  for (int i = 1; i < s->ncand; i++) {
    const double per = s->secs[i] / s->pixels[i];
    if (per < s->secs[best] / s->pixels[best]) best = i;
    if (i < s->nrows && per < s->secs[best0] / s->pixels[best0]) best0 = i;
  }
  if (s->secs[best] / s->pixels[best] * (1 + SWITCH_MARGIN) > s->secs[best0] / s->pixels[best0]) best = best0;
  s->chosen = best + 1;
  /* what the trials cost: their time over what the chosen candidate would
   * have taken for the same pixels */
  double spent = 0, px = 0;
  for (int i = 0; i < s->ncand; i++) spent += s->secs[i], px += s->pixels[i];
  lade__imgpipe_tuned(d, tune_rows(s, best), LADE__MAX(0.0, spent - px * s->secs[best] / s->pixels[best]));
}

static void on_error_exit(j_common_ptr c) {
  err_mgr_t *e = (err_mgr_t *)c->err;
  (*c->err->format_message)(c, e->msg);
  longjmp(e->jb, 1);
}

static void on_emit(j_common_ptr c, int level) {
  if (level >= 0) return; /* trace messages */
  /* Warnings: corrupt data (libjpeg would pad with grey). Extraneous bytes
   * between markers are harmless and PIL accepts them. */
  if (c->err->msg_code == JWRN_EXTRANEOUS_DATA) return;
  on_error_exit(c);
}

static void on_output(j_common_ptr c) { LADE__UNUSED(c); }

static int jb_create(void **out) {
  *out = NULL;
  jpeg_state_t *s = calloc(1, sizeof(*s));
  if (!s) return lade__fail(LADE_ENOMEM, "out of memory (JPEG decoder)");
  s->cinfo.err = jpeg_std_error(&s->err.pub);
  s->err.pub.error_exit = on_error_exit;
  s->err.pub.emit_message = on_emit;
  s->err.pub.output_message = on_output;
  if (setjmp(s->err.jb)) {
    int rc = lade__fail(LADE_ENOMEM, "cannot create JPEG decoder: %s", s->err.msg);
    free(s);
    return rc;
  }
  jpeg_create_decompress(&s->cinfo);
  *out = s;
  return 0;
}

static void jb_destroy(void *st) {
  jpeg_state_t *s = st;
  if (!s) return;
  jpeg_destroy_decompress(&s->cinfo);
  lade__aligned_free(s->row);
  lade__aligned_free(s->rgb);
  free(s);
}

/*
 * True when the file reaches its EOI marker: from SOI, length-prefixed
 * segments are skipped; after each SOS the entropy-coded data runs to the
 * first 0xFF that is neither a stuffed 0xFF00 nor a restart marker (fill
 * 0xFF bytes before a marker are skipped, as libjpeg does). Bytes that are
 * not a marker where one is expected are skipped like libjpeg's
 * next_marker(). Running out of bytes anywhere means truncated.
 */
static bool jpeg_complete(const uint8_t *p, size_t n) {
  size_t i = 2; /* after SOI */
  for (;;) {
    const uint8_t *ff = i < n ? memchr(p + i, 0xFF, n - i) : NULL;
    if (!ff) return false;
    i = (size_t)(ff - p);
    while (i < n && p[i] == 0xFF) i++;
    if (i >= n) return false;
    const uint8_t m = p[i++];
    if (m == 0xD9) return true;                        /* EOI */
    if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) continue; /* no length */
    if (i + 2 > n) return false;
    const size_t seg = (size_t)p[i] << 8 | p[i + 1];
    if (seg < 2) return true; /* a bad length: libjpeg reports it when it gets there */
    if (seg > n - i) return false;
    i += seg;
    if (m != 0xDA) continue;
    /* Entropy-coded data of one scan. */
    for (;;) {
      ff = i < n ? memchr(p + i, 0xFF, n - i) : NULL;
      if (!ff) return false;
      i = (size_t)(ff - p);
      size_t j = i + 1;
      while (j < n && p[j] == 0xFF) j++;
      if (j >= n) return false;
      if (p[j] == 0x00 || (p[j] >= 0xD0 && p[j] <= 0xD7)) {
        i = j + 1;
        continue;
      }
      break; /* a marker: back to the segment walk */
    }
  }
}

static void read_header(jpeg_state_t *s, const uint8_t *jpeg, size_t len) {
  jpeg_mem_src(&s->cinfo, jpeg, (unsigned long)len);
  jpeg_read_header(&s->cinfo, TRUE);
}

static int jb_size(void *st, const uint8_t *jpeg, size_t len, int *width, int *height) {
  jpeg_state_t *s = st;
  if (setjmp(s->err.jb)) {
    jpeg_abort_decompress(&s->cinfo);
    return lade__fail(LADE_EFORMAT, "corrupt JPEG: %s", s->err.msg);
  }
  read_header(s, jpeg, len);
  *width = (int)s->cinfo.image_width;
  *height = (int)s->cinfo.image_height;
  jpeg_abort_decompress(&s->cinfo);
  return 0;
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

/* Books an image in the stage account (imagenet.h; any stop but OFF) and
 * returns the row to skip to: skip_to, or for the entropy stop the region's
 * last row (which alone is read). */
static int account_image(lade__imgacct_t *a, const lade__imgplan_t *pl, int skip_to, int cw, int sw, int sh) {
  a->images++;
  a->rows_frac += (double)(pl->y0 + pl->nrows) / sh;
  a->area_frac += (double)cw * (double)(pl->y0 + pl->nrows - skip_to) / ((double)sw * (double)sh);
  return a->stop == LADE__ACCT_ENTROPY ? pl->y0 + pl->nrows - 1 : skip_to;
}

/* Rows r .. r + got - 1 of the region to the pipeline; CMYK converted first. */
static void hand_rows(jpeg_state_t *s, lade__imgdec_t *d, JSAMPROW *rows, JDIMENSION got, int r, size_t shift,
                      int rw, bool rgb, bool cmyk, bool inverted) {
  for (JDIMENSION i = 0; i < got; i++, r++) {
    const uint8_t *src = rows[i] + shift;
    if (cmyk) {
      cmyk_to_rgb(src, s->rgb, rw, inverted);
      src = s->rgb;
    }
    if (rgb) lade__imgpipe_row_rgb(d, r, src);
    else lade__imgpipe_row(d, r, src);
  }
}

/* The body of a decode; may longjmp out through the error manager. Returns a
 * LADE code for errors found outside libjpeg. */
static int decode_rows(jpeg_state_t *s, lade__imgdec_t *d, const uint8_t *jpeg, size_t len, const lade__imgbox_t *b,
                       int out_size) {
  struct jpeg_decompress_struct *ci = &s->cinfo;
  int rc;
  read_header(s, jpeg, len);
  const int W = (int)ci->image_width, H = (int)ci->image_height;
  if ((uint64_t)W * (uint64_t)H > LADE__IMG_MAX_PIXELS)
    return lade__fail(LADE_EFORMAT, "JPEG of %dx%d pixels is larger than supported", W, H);
  const int f = lade__imgpipe_dct_factor(d, b, out_size);
  ci->scale_num = 1;
  ci->scale_denom = (unsigned)f;
  ci->dct_method = JDCT_ISLOW;
  ci->do_fancy_upsampling = TRUE;
  const int cand = tune_pick(s, d), k = tune_rows(s, cand);
  bool cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
  bool inverted = cmyk && ci->saw_Adobe_marker;
  /* RGB where the pipeline's horizontal pass reads it: libjpeg converts to 3
   * bytes a pixel faster than to 4 (bench/RESULTS.md); the values are the same */
  const bool rgb = !cmyk && lade__imgpipe_takes_rgb(d);
  if (cmyk)
    ci->out_color_space = JCS_CMYK;
  else if (ci->num_components == 1 || ci->num_components == 3)
    ci->out_color_space = rgb ? JCS_RGB : JCS_EXT_RGBX; /* gray and YCbCr alike; X pads for 4-lane SIMD */
  else
    return lade__fail(LADE_EFORMAT, "JPEG with %d components is not supported", ci->num_components);
  jpeg_start_decompress(ci);
  const int sw = (int)ci->output_width, sh = (int)ci->output_height, ncomp = ci->output_components;

  lade__imgacct_t *a = lade__imgdec_account(d);
  const bool timed = a->stop == LADE__ACCT_FULL;
  double t = timed ? lade__now() : 0;
  lade__imgplan_t pl;
  if ((rc = lade__imgpipe_begin(d, W, H, f, sw, sh, b, out_size, &pl)) != 0) return rc;
  if (timed) a->plan_s += lade__now() - t;
  /* Decode a margin around the region, as small as keeps its pixels those of
   * a full decode. libjpeg's fancy (triangle) chroma upsampling treats the
   * edges of a cropped window as image edges, so the window's first and
   * last columns see a replicated chroma sample instead of the neighbour:
   * one output column on each side is enough (max_h_samp_factor, one chroma
   * sample, to be safe), and jpeg_crop_scanline widens the left edge to an
   * iMCU boundary anyway. Rows: see the skip below. (Both were one iMCU, 16
   * pixels, on each side before; bench/RESULTS.md.) */
  const int mx = ci->max_h_samp_factor, my = ci->max_v_samp_factor;
  const int dx0 = LADE__MAX(0, pl.rx0 - mx), dx1 = LADE__MIN(sw, pl.rx0 + pl.rw + mx);
  JDIMENSION xoff = (JDIMENSION)dx0, cw = (JDIMENSION)(dx1 - dx0);
  if (dx1 - dx0 < sw) jpeg_crop_scanline(ci, &xoff, &cw);
  else xoff = 0, cw = (JDIMENSION)sw;
  const size_t shift = (size_t)(pl.rx0 - (int)xoff) * (size_t)ncomp;
  const size_t rowbytes = (size_t)cw * (size_t)ncomp;
  const size_t stride = (rowbytes + pl.pad + 63) & ~(size_t)63;
  if ((rc = lade__imgpipe_grow(&s->row, &s->row_cap, stride * (size_t)k)) != 0) return rc;
  for (int i = 0; i < k; i++) memset(s->row + stride * (size_t)i + rowbytes, 0, pl.pad);
  if (cmyk) {
    if ((rc = lade__imgpipe_grow(&s->rgb, &s->rgb_cap, (size_t)pl.rw * 4 + pl.pad)) != 0) return rc;
    memset(s->rgb + (size_t)pl.rw * 4, 0, pl.pad);
  }
  /* jpeg_skip_scanlines(n) entropy-decodes the whole iMCU rows it passes
   * (the Huffman decode cannot be skipped) and fully decodes, without colour
   * conversion, from the iMCU row boundary R = ((n - 1) / L) * L on (L rows
   * per iMCU row), n - R >= 1 rows. With context-based (fancy 2x vertical)
   * upsampling, row R is the only one whose upper chroma neighbour is lost
   * in the skip; every row after it is exact. Skipping to my rows above the
   * region keeps R above it with a chroma row to spare. */
  int skip_to = LADE__MAX(0, pl.y0 - my);
  const int region_from = skip_to;
  if (a->stop != LADE__ACCT_OFF) {
    skip_to = account_image(a, &pl, skip_to, (int)cw, sw, sh);
    if (a->stop == LADE__ACCT_HEADER) {
      jpeg_abort_decompress(ci);
      return 0;
    }
  }
  if (timed) t = lade__now();
  JDIMENSION todo = (JDIMENSION)skip_to;
  while (todo > 0) {
    JDIMENSION n = jpeg_skip_scanlines(ci, todo);
    if (n == 0) return lade__fail(LADE_EFORMAT, "corrupt JPEG: cannot skip to row %d", skip_to);
    todo -= n;
  }
  const double t0 = s->chosen ? 0 : thread_cpu_seconds();
  JSAMPROW rows[BLOCK_ROWS];
  for (int i = 0; i < k; i++) rows[i] = s->row + stride * (size_t)i;
  if (a->stop == LADE__ACCT_ENTROPY) {
    if (jpeg_read_scanlines(ci, rows, 1) == 0) return lade__fail(LADE_EFORMAT, "corrupt JPEG: no data at row %d", skip_to);
    jpeg_abort_decompress(ci);
    return 0;
  }
  /* the margin rows above the region, then the region's rows, k at a time
   * (never past the region's last row: rows after it are not decoded) */
  for (int y = (int)ci->output_scanline; y < pl.y0;) {
    JDIMENSION got = jpeg_read_scanlines(ci, rows, (JDIMENSION)LADE__MIN(k, pl.y0 - y));
    if (got == 0) return lade__fail(LADE_EFORMAT, "corrupt JPEG: no data at row %d", y);
    y += (int)got;
  }
  const bool hand = a->stop == LADE__ACCT_OFF || a->stop == LADE__ACCT_FULL;
  for (int r = 0; r < pl.nrows;) {
    JDIMENSION got = jpeg_read_scanlines(ci, rows, (JDIMENSION)LADE__MIN(k, pl.nrows - r));
    if (got == 0) return lade__fail(LADE_EFORMAT, "corrupt JPEG: no data at row %d", pl.y0 + r);
    if (timed) {
      const double now = lade__now();
      a->decoder_s += now - t;
      t = now;
    }
    if (hand) hand_rows(s, d, rows, got, r, shift, pl.rw, rgb, cmyk, inverted);
    r += (int)got;
    if (timed) {
      const double now = lade__now();
      a->hpass_s += now - t;
      t = now;
    }
  }
  if (!s->chosen && hand)
    tune_book(s, d, cand, thread_cpu_seconds() - t0, (double)cw * (double)(pl.y0 + pl.nrows - region_from));
  jpeg_abort_decompress(ci);
  return 0;
}

/* The one setjmp: libjpeg errors land here, and the decoder is reset so the
 * next image can reuse it. */
static int jb_decode(void *st, lade__imgdec_t *d, const uint8_t *jpeg, size_t len, const lade__imgbox_t *b,
                       int out_size) {
  jpeg_state_t *s = st;
  if (!jpeg_complete(jpeg, len))
    return lade__fail(LADE_EFORMAT, "corrupt JPEG: image file is truncated (no end-of-image marker after %zu bytes)",
                      len);
  if (setjmp(s->err.jb)) {
    jpeg_abort_decompress(&s->cinfo);
    return lade__fail(LADE_EFORMAT, "corrupt JPEG: %s", s->err.msg);
  }
  int rc = decode_rows(s, d, jpeg, len, b, out_size);
  if (rc != 0) jpeg_abort_decompress(&s->cinfo);
  return rc;
}

const lade__imgbackend_t lade__img_jpeg = {"JPEG", jb_create, jb_destroy, jb_size, jb_decode, NULL};

#endif /* LADE_HAVE_JPEG; without it imgdecode.c has a table that says so */
