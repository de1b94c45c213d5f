/*
 * jpeg_crop.c - a test helper that exposes the image pipeline (JPEG, PNG)
 * to scripts. Modes (a trailing "auto" sets decode_scale=auto):
 *   crop  FILE TOP LEFT H W SIZE FLIP u8|f32 OUT [auto]  one box -> raw bytes in OUT
 *   eval  FILE RESIZE CROP u8|f32 OUT [auto]             the imagenet-eval transform
 *   train FILE CROP SEED INDEX u8|f32 OUT [auto]         the imagenet-train transform
 *   seeds FILE CROP N                                    imagenet-train with seeds 0..N-1:
 *                                                        one line per seed, "ok" or the error name
 *   rrc   W H N SEED                                     N RandomResizedCrop boxes
 *   check FILE                                           decode a box; exit 0/1
 * Errors exit with status 1 and "error: NAME: detail" on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "engine/resolve.h"
#include "transform/imagenet.h"
#include "transform/transform.h"

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  for (;;) {
    if (n == cap) b = realloc(b, cap *= 2);
    size_t r = fread(b + n, 1, cap - n, f);
    if (r == 0) break;
    n += r;
  }
  fclose(f);
  *len = n;
  return b;
}

static int fail(int rc) {
  fprintf(stderr, "error: %s: %s\n", lade_error_name(rc), lade_last_error());
  return 1;
}

/* Everything main() allocates, freed on every exit path (LeakSanitizer). */
static uint8_t *g_jpg;
static lade__imgdec_t *g_dec;
static void *g_out;
static int finish(int status) {
  free(g_jpg);
  free(g_out);
  lade__imgdec_destroy(g_dec);
  return status;
}

static int dump(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  int bad = fwrite(p, 1, n, f) != n;
  return (fclose(f) != 0) | bad;
}

/* One transform applied with seeds 0..nseeds-1 (nseeds > 0), or once with
 * cfg->seed; writes the output of the single run to `out`. */
static int run_xform(const lade__transform_ops_t *ops, struct lade_config *cfg, const uint8_t *jpg, size_t len,
                     uint64_t index, const char *out, int nseeds) {
  void *st = NULL, *ws = NULL;
  lade__sample_shape_t shape;
  lade__xform_conf_t xc = lade__resolve_xform(cfg);
  int rc = ops->init(&st, &xc, NULL, 0, &shape);
  if (rc) return fail(rc);
  if ((rc = ops->worker_init(st, &ws)) != 0) {
    ops->destroy(st);
    return fail(rc);
  }
  void *buf = malloc(shape.bytes);
  g_out = buf;
  lade__rng_t rng;
  lade__xform_ctx_t ctx = {index, 0, &rng};
  uint32_t payload = 0;
  int e = 0;
  if (nseeds > 0) {
    for (int sd = 0; sd < nseeds; sd++) {
      lade__rng_init(&rng, (uint64_t)sd, index, LADE__RNG_AUGMENT);
      rc = ops->apply(st, ws, jpg, len, &ctx, buf, &payload);
      printf("%s\n", rc ? lade_error_name(rc) : "ok");
    }
  } else {
    lade__rng_init(&rng, cfg->seed, index, LADE__RNG_AUGMENT);
    rc = ops->apply(st, ws, jpg, len, &ctx, buf, &payload);
    e = rc ? fail(rc) : dump(out, buf, shape.bytes);
  }
  ops->worker_free(st, ws);
  ops->destroy(st);
  return e;
}

int main(int argc, char **argv) {
  if (argc < 2) goto usage;
  const char *mode = argv[1];
  if (strcmp(mode, "rrc") == 0 && argc == 6) {
    int W = atoi(argv[2]), H = atoi(argv[3]);
    long n = atol(argv[4]);
    uint64_t seed = strtoull(argv[5], NULL, 10);
    for (long i = 0; i < n; i++) {
      lade__rng_t rng;
      lade__rng_init(&rng, seed, (uint64_t)i, LADE__RNG_AUGMENT);
      int t, l, h, w;
      lade__rrc_params(&rng, W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, &t, &l, &h, &w);
      printf("%d %d %d %d\n", t, l, h, w);
    }
    return 0;
  }
  if (argc < 3) goto usage;
  size_t len = 0;
  uint8_t *jpg = g_jpg = slurp(argv[2], &len);
  if (!jpg) {
    fprintf(stderr, "error: cannot read %s\n", argv[2]);
    return 1;
  }
  lade__imgdec_t *d = NULL;
  int rc = lade__imgdec_create(&d);
  if (rc) return finish(fail(rc));
  g_dec = d;
  if (strcmp(mode, "check") == 0 && argc == 3) {
    int W, H;
    if ((rc = lade__img_size(d, jpg, len, &W, &H)) != 0) return finish(fail(rc));
    static uint8_t out[64 * 64 * 3];
    if ((rc = lade__imgdec_crop(d, jpg, len, 0, 0, H, W, 64, false, LADE_DTYPE_UINT8, out)) != 0)
      return finish(fail(rc));
    printf("ok %dx%d\n", W, H);
    return finish(0);
  }
  const bool scale = strcmp(argv[argc - 1], "auto") == 0;
  if (scale) argc--;
  lade__imgdec_set_decode_scale(d, scale);
  if (strcmp(mode, "crop") == 0 && argc == 11) {
    int top = atoi(argv[3]), left = atoi(argv[4]), h = atoi(argv[5]), w = atoi(argv[6]), size = atoi(argv[7]);
    bool flip = atoi(argv[8]) != 0;
    int dtype = strcmp(argv[9], "f32") == 0 ? LADE_DTYPE_FLOAT32 : LADE_DTYPE_UINT8;
    size_t n = (size_t)size * size * 3 * lade_dtype_size(dtype);
    void *out = g_out = malloc(n);
    if ((rc = lade__imgdec_crop(d, jpg, len, top, left, h, w, size, flip, dtype, out)) != 0)
      return finish(fail(rc));
    return finish(dump(argv[10], out, n));
  }
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  cfg.decode_scale = scale ? LADE__DECODE_SCALE_AUTO : LADE__DECODE_SCALE_OFF;
  if (strcmp(mode, "eval") == 0 && argc == 7) {
    cfg.resize_size = (uint32_t)atoi(argv[3]);
    cfg.crop_size = (uint32_t)atoi(argv[4]);
    cfg.image_dtype = strcmp(argv[5], "f32") == 0 ? LADE_DTYPE_FLOAT32 : LADE_DTYPE_UINT8;
    return finish(run_xform(&lade__xform_imagenet_eval, &cfg, jpg, len, 0, argv[6], 0));
  }
  if (strcmp(mode, "train") == 0 && argc == 8) {
    cfg.crop_size = (uint32_t)atoi(argv[3]);
    cfg.seed = strtoull(argv[4], NULL, 10);
    cfg.image_dtype = strcmp(argv[6], "f32") == 0 ? LADE_DTYPE_FLOAT32 : LADE_DTYPE_UINT8;
    return finish(run_xform(&lade__xform_imagenet_train, &cfg, jpg, len, strtoull(argv[5], NULL, 10), argv[7], 0));
  }
  if (strcmp(mode, "seeds") == 0 && argc == 5) {
    cfg.crop_size = (uint32_t)atoi(argv[3]);
    return finish(run_xform(&lade__xform_imagenet_train, &cfg, jpg, len, 0, NULL, atoi(argv[4])));
  }
usage:
  fprintf(stderr, "usage: jpeg_crop crop|eval|train|seeds|rrc|check ... (see the source)\n");
  return finish(2);
}
