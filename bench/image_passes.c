/* image_passes.c - the image pipeline's passes alone, per path: the
 * horizontal pass over rows of W RGB pixels (RGBX where the path takes no
 * RGB rows) resampled to 224, for the widths a crop of ImageNet meets; then
 * the vertical pass with the float32 and with the uint8 store (the
 * pipeline's finish) of 330 -> 224 rows, on the kernels this CPU picks
 * (LADE_NO_AVX512=1, LADE_NO_VBMI=1, LADE_NO_SIMD=1 as for the loader).
 * Prints ns per row, the best of REPS rounds (4,000 rows; 50 finishes).
 * No decoder: the stage account of bench_jpeg_transform times the passes
 * in place.
 *
 *   build/tests/bench_image_passes [REPS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "transform/imgkern.h"
#include "transform/imgpipe.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A pipeline for a W x H image whose box is the whole image, to 224; NULL
 * (said on stderr) when it cannot be made. */
static lade__imgdec_t *open_pipe(int W, int H, lade__imgplan_t *plan) {
  lade__imgdec_t *d = NULL;
  lade__imgbox_t box = {.left = 0, .top = 0, .w = W, .h = H, .clip_to_box = true};
  if (lade__imgpipe_new(&d) || lade__imgpipe_begin(d, W, H, 1, W, H, &box, 224, plan)) {
    fprintf(stderr, "bench_image_passes: %s\n", lade_last_error());
    lade__imgpipe_free(d);
    return NULL;
  }
  return d;
}

int main(int argc, char **argv) {
  static const int widths[] = {250, 330, 500, 800, 1200};
  const int reps = argc > 1 ? atoi(argv[1]) : 10, H = 64, ROWS = 4000;
  unsigned sink = 0;
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
    const int W = widths[wi];
    lade__imgplan_t plan;
    lade__imgdec_t *d = open_pipe(W, H, &plan);
    if (!d) return 1;
    const resample_h_fn f = d->resample_h_rgb ? d->resample_h_rgb : d->resample_h;
    const size_t bpp = d->resample_h_rgb ? 3 : 4, len = (size_t)W * 4 * (size_t)H + (size_t)plan.pad;
    uint8_t *in = malloc(len), *out = malloc(224 * 4 + 64);
    if (!in || !out) return 1;
    for (size_t j = 0; j < len; j++) in[j] = (uint8_t)(j * 131 + 7);
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
      const double t0 = now();
      for (int it = 0; it < ROWS; it++) {
        f(&d->ch, in + (size_t)(it % H) * (size_t)W * bpp, out, 224);
        sink += out[it % 224];
      }
      const double t = (now() - t0) / ROWS;
      if (t < best) best = t;
    }
    char k[128];
    lade__imgpipe_kernels(d, k, sizeof k);
    printf("%5d -> 224, %s rows, %d taps: %7.1f ns a row  (%s)\n", W, bpp == 3 ? "RGB " : "RGBX", d->ch.taps,
           best * 1e9, k);
    free(in);
    free(out);
    lade__imgpipe_free(d);
  }
  /* the vertical pass and the stores: 330 box rows (3 taps) to 224 */
  for (int dt = 0; dt < 2; dt++) {
    const int W = 330, HB = 330, dtype = dt ? LADE_DTYPE_UINT8 : LADE_DTYPE_FLOAT32;
    lade__imgplan_t plan;
    lade__imgdec_t *d = open_pipe(W, HB, &plan);
    if (!d) return 1;
    uint8_t *row = malloc((size_t)W * 4 + plan.pad);
    float *out = malloc(224 * 224 * 3 * sizeof(float));
    if (!row || !out) return 1;
    for (int r = 0; r < plan.nrows; r++) {
      for (size_t j = 0; j < (size_t)W * 4 + plan.pad; j++) row[j] = (uint8_t)(j * 131 + (size_t)r * 7);
      lade__imgpipe_row(d, r, row);
    }
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
      const double t0 = now();
      for (int it = 0; it < 50; it++) {
        lade__imgpipe_finish(d, it & 1, dtype, out);
        sink += ((const uint8_t *)out)[it];
      }
      const double t = (now() - t0) / (50.0 * 224);
      if (t < best) best = t;
    }
    char k[128];
    lade__imgpipe_kernels(d, k, sizeof k);
    printf("  %d -> 224 rows, vertical pass and %s store: %7.1f ns a row  (%s)\n", HB, dt ? "uint8" : "float32",
           best * 1e9, k);
    free(row);
    free(out);
    lade__imgpipe_free(d);
  }
  return (int)(sink & 0); /* the sink keeps the rows from being optimised away */
}
