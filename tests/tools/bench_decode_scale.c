/*
 * bench_decode_scale.c - single-thread images/s of the imagenet-train and
 * imagenet-eval transforms (float32 224, eval from 256) with decode_scale=off
 * (exact, the default) and decode_scale=auto (scaled IDCT), over the files
 * given. Rounds alternate off/auto; the best round of each is printed.
 *   usage: bench_decode_scale ROUNDS FILE...
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/config.h"
#include "engine/resolve.h"
#include "transform/transform.h"

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Images per second of one pass over all files; -1 on a decode error. */
static double pass(const lade__transform_ops_t *ops, int scale, uint8_t **img, size_t *len, int n) {
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  cfg.decode_scale = scale;
  void *st = NULL, *ws = NULL;
  lade__sample_shape_t shape;
  lade__xform_conf_t xc = lade__resolve_xform(&cfg);
  if (ops->init(&st, &xc, NULL, 0, &shape) || ops->worker_init(st, &ws)) return -1;
  void *out = malloc(shape.bytes);
  double t0 = lade__now();
  int bad = 0;
  for (int i = 0; i < n; i++) {
    lade__rng_t rng;
    lade__rng_init(&rng, 1, (uint64_t)i, LADE__RNG_AUGMENT);
    lade__xform_ctx_t ctx = {(uint64_t)i, 0, &rng};
    uint32_t payload;
    bad |= ops->apply(st, ws, img[i], len[i], &ctx, out, &payload) != 0;
  }
  double t = lade__now() - t0;
  free(out);
  ops->worker_free(st, ws);
  ops->destroy(st);
  return bad ? -1 : n / t;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_decode_scale ROUNDS FILE...\n");
    return 2;
  }
  int rounds = atoi(argv[1]), n = argc - 2;
  uint8_t **img = calloc((size_t)n, sizeof *img);
  size_t *len = calloc((size_t)n, sizeof *len);
  for (int i = 0; i < n; i++)
    if (!(img[i] = slurp(argv[i + 2], &len[i]))) {
      fprintf(stderr, "cannot read %s\n", argv[i + 2]);
      return 1;
    }
  const lade__transform_ops_t *ops[2] = {&lade__xform_imagenet_train, &lade__xform_imagenet_eval};
  for (int o = 0; o < 2; o++) {
    double best[2] = {0, 0};
    for (int r = 0; r < rounds; r++)
      for (int sc = 0; sc < 2; sc++) {
        double v = pass(ops[o], sc ? LADE__DECODE_SCALE_AUTO : LADE__DECODE_SCALE_OFF, img, len, n);
        if (v < 0) {
          fprintf(stderr, "decode error: %s\n", lade_last_error());
          return 1;
        }
        if (v > best[sc]) best[sc] = v;
      }
    printf("%-15s decode_scale=off %7.1f img/s   auto %7.1f img/s   x%.2f\n", ops[o]->name, best[0], best[1],
           best[1] / best[0]);
  }
  for (int i = 0; i < n; i++) free(img[i]);
  free(img);
  free(len);
  return 0;
}
