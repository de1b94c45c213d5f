/*
 * jpeg_stages.c - the stage account of an imagenet transform beside a
 * whole-image decode (jpeg_stages.h): the library's lade_image_stages for
 * the transform's stages, libjpeg-turbo here for the whole decode and its
 * entropy-only part.
 */
#include "jpeg_stages.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef LADE_HAVE_JPEG
#include <jpeglib.h>
#endif

#include "ceiling.h"

#ifdef LADE_HAVE_JPEG
/* The entropy decode alone: jpeg_skip_scanlines to the last row Huffman-
 * decodes every iMCU row it passes and transforms none (only the last row is
 * read, to make it decode up to there). No crop can go below this for the
 * rows above it; a reference line, not a ceiling. */
double lade_tool_entropy_only(uint8_t *const *img, const size_t *len, int n) {
  struct jpeg_decompress_struct ci;
  struct jpeg_error_mgr je;
  ci.err = jpeg_std_error(&je); /* the images decode (the caller's whole decode read them) */
  jpeg_create_decompress(&ci);
  uint8_t *row = NULL;
  size_t cap = 0;
  double t0 = lade_tool_mono();
  for (int i = 0; i < n; i++) {
    jpeg_mem_src(&ci, img[i], (unsigned long)len[i]);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = JCS_RGB;
    jpeg_start_decompress(&ci);
    size_t need = (size_t)ci.output_width * 3;
    if (need > cap) row = realloc(row, cap = need);
    if (!row) exit(1);
    if (ci.output_height > 1) jpeg_skip_scanlines(&ci, ci.output_height - 1);
    JSAMPROW r = row;
    jpeg_read_scanlines(&ci, &r, 1);
    jpeg_abort_decompress(&ci);
  }
  double t = lade_tool_mono() - t0;
  jpeg_destroy_decompress(&ci);
  free(row);
  return (double)n / t;
}
#else
double lade_tool_entropy_only(uint8_t *const *img, const size_t *len, int n) {
  (void)img, (void)len, (void)n;
  return 0;
}
#endif

/* Seconds per image of a whole decode, or -1. */
static double whole_decode(uint8_t *const *img, const size_t *len, int n) {
  uint8_t *buf = NULL;
  size_t cap = 0;
  double t0 = lade_tool_mono();
  for (int i = 0; i < n; i++)
    if (lade_tool_decode_whole(img[i], len[i], 0, &buf, &cap)) {
      free(buf);
      return -1;
    }
  double t = lade_tool_mono() - t0;
  free(buf);
  return t / n;
}

int lade_tool_jpeg_stages(uint8_t *const *img, const size_t *len, int n, const lade_config_t *cfg, int rounds,
                          lade_tool_stages_t *out, char *why, size_t wsize) {
  memset(out, 0, sizeof *out);
  why[0] = 0;
  double whole = INFINITY, entropy = INFINITY;
  for (int r = 0; r < (rounds < 1 ? 1 : rounds); r++) {
    double w = whole_decode(img, len, n), e = lade_tool_entropy_only(img, len, n);
    if (w < 0 || e <= 0) {
      snprintf(why, wsize, "not every image is a JPEG this build's libjpeg-turbo decodes");
      return -1;
    }
    whole = fmin(whole, w);
    entropy = fmin(entropy, 1.0 / e);
  }
  out->whole = whole;
  out->entropy_whole = entropy;
  if (lade_image_stages(cfg, (const uint8_t *const *)img, len, (size_t)n, rounds, &out->s, sizeof out->s)) {
    snprintf(why, wsize, "%s", lade_last_error());
    return -1;
  }
  return 0;
}

void lade_tool_stages_print(FILE *fp, const char *first, const char *in, const lade_tool_stages_t *t) {
  const lade_image_stages_t *s = &t->s;
  const double ms = 1e3, rest = t->whole - t->entropy_whole;
  fprintf(fp, "%sstage account, %u images, 1 thread, ms per image (best of %u rounds); each decoder stage is the\n",
          first, s->images, s->rounds);
  fprintf(fp, "%sdifference between stopping after it and after the one before, on the same boxes:\n", in);
  fprintf(fp, "%s  whole decode (the ceiling)          %7.3f  = entropy %.3f + IDCT, upsampling, colour %.3f\n", in,
          t->whole * ms, t->entropy_whole * ms, rest * ms);
  fprintf(fp, "%s  the transform                       %7.3f  (%.2fx the decode's rate)\n", in, s->transform * ms,
          t->whole / s->transform);
  fprintf(fp, "%s    header, completeness, lade's plan %7.3f  (of it lade's plan %.3f)\n", in, s->header * ms,
          s->plan * ms);
  fprintf(fp, "%s    entropy to the region's last row  %7.3f  predicted %.3f: the whole entropy x %.1f%% of the rows\n",
          in, (s->entropy - s->header) * ms, t->entropy_whole * s->rows_frac * ms, 100 * s->rows_frac);
  fprintf(fp, "%s    decoder inside the region         %7.3f  predicted %.3f: the rest x %.1f%% of the pixels\n", in,
          (s->decode - s->entropy) * ms, rest * s->area_frac * ms, 100 * s->area_frac);
  fprintf(fp, "%s    lade horizontal pass              %7.3f\n", in, s->hpass * ms);
  fprintf(fp, "%s    lade vertical pass, flip, store   %7.3f\n", in, s->finish * ms);
  fprintf(fp, "%s    unattributed (stages interfering) %7.3f  (libjpeg's share of the timed run %.3f, alone %.3f)\n",
          in, (s->transform - s->decode - s->hpass - s->finish) * ms, s->decoder * ms, (s->decode - s->header) * ms);
  fprintf(fp, "%s  timed run %.3f (the clock reads' cost %.3f); the decoder's timed choices: %s\n", in, s->timed * ms,
          (s->timed - s->transform) * ms, s->choices[0] ? s->choices : "not made");
}

void lade_tool_stages_json(FILE *fp, const char *key, const lade_tool_stages_t *t) {
  const lade_image_stages_t *s = &t->s;
  fprintf(fp,
          "%s{\"images\":%u,\"rounds\":%u,\"whole_s\":%.6g,\"entropy_whole_s\":%.6g,\"transform_s\":%.6g,"
          "\"header_s\":%.6g,\"entropy_s\":%.6g,\"decode_s\":%.6g,\"timed_s\":%.6g,\"plan_s\":%.6g,"
          "\"decoder_s\":%.6g,\"hpass_s\":%.6g,\"finish_s\":%.6g,\"rows_frac\":%.4f,\"area_frac\":%.4f,"
          "\"choices\":\"%s\"}",
          key, s->images, s->rounds, t->whole, t->entropy_whole, s->transform, s->header, s->entropy, s->decode,
          s->timed, s->plan, s->decoder, s->hpass, s->finish, s->rows_frac, s->area_frac, s->choices);
}
