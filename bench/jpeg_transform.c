/*
 * jpeg_transform.c - single-thread throughput of the imagenet transforms
 * (crop-aware decode + resize + flip + normalise to 224x224) against the
 * best whole-image decode libjpeg-turbo offers for the same files: the
 * scanline API reading the image in blocks of rows into one buffer (as
 * TurboJPEG does), TurboJPEG's tjDecompress2 itself when the build found
 * it, and, for reference, the scanline API one row per call (the old
 * baseline, which understates the decoder). The ceiling is the fastest of
 * the whole-image decodes; every ratio is against it. A last reference
 * line times the entropy (Huffman) decode alone, the part of a decode that
 * a crop cannot skip for the rows above it. Images: the
 * synthetic generator's (tools/gen_jpeg.c), or the JPEGs of a folder.
 *   usage: bench_jpeg_transform [images=200] [rounds=5] [seed=1] [--dir DIR]
 *                               [--only train|train8|eval|decode] [--decode-scale] [--no-stages]
 * --only runs one contender (for a profiler: perf record -g ... --only eval).
 * After the rates, the stage account of train and eval (tools/jpeg_stages.c:
 * where a crop's time goes, stage by stage, beside the whole decode) unless
 * --no-stages.
 * --decode-scale runs the transforms with decode_scale=auto (the opt-in DCT
 * scaling, whose pixels differ from torchvision's: never the default).
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef LADE_BENCH_TURBOJPEG
#include <turbojpeg.h>
#endif
#ifdef LADE_HAVE_JPEG
#include <jpeglib.h>
#endif

#include "ceiling.h"
#include "core/config.h"
#include "engine/resolve.h"
#include "gen_jpeg.h"
#include "jpeg_stages.h"
#include "transform/transform.h"

/* rows: 1 = one row per call, 0 = as many as the decoder gives */
static double scanline_decode(uint8_t **img, size_t *len, int n, int rows, uint64_t *sink) {
  uint8_t *buf = NULL;
  size_t cap = 0;
  double t0 = lade__now();
  for (int i = 0; i < n; i++) {
    if (lade_tool_decode_whole(img[i], len[i], rows, &buf, &cap)) {
      fprintf(stderr, "image %d: not a JPEG libjpeg-turbo decodes\n", i);
      exit(1);
    }
    *sink += buf[0];
  }
  double t = lade__now() - t0;
  free(buf);
  return (double)n / t;
}

#ifdef LADE_BENCH_TURBOJPEG
static double turbo_decode(uint8_t **img, size_t *len, int n, uint64_t *sink) {
  tjhandle tj = tjInitDecompress();
  uint8_t *buf = NULL;
  size_t cap = 0;
  double t0 = lade__now();
  for (int i = 0; i < n; i++) {
    int w, h, sub, cs;
    if (tjDecompressHeader3(tj, img[i], (unsigned long)len[i], &w, &h, &sub, &cs)) exit(1);
    size_t need = (size_t)w * (size_t)h * 3;
    if (need > cap) buf = realloc(buf, cap = need);
    if (!buf || tjDecompress2(tj, img[i], (unsigned long)len[i], buf, w, 0, h, TJPF_RGB, 0)) {
      fprintf(stderr, "image %d: tjDecompress2: %s\n", i, tjGetErrorStr2(tj));
      exit(1);
    }
    *sink += buf[0];
  }
  double t = lade__now() - t0;
  free(buf);
  tjDestroy(tj);
  return (double)n / t;
}
#endif

/* The .jpg/.jpeg/.JPEG files under dir (one level of class folders, as
 * ImageFolder), up to max, read into memory. */
static int load_dir(const char *dir, int max, uint8_t **img, size_t *len, size_t *total) {
  int n = 0;
  char path[8192];
  DIR *top = opendir(dir);
  if (!top) return -1;
  struct dirent *c;
  char **names = NULL;
  size_t nn = 0, cap = 0;
  while ((c = readdir(top))) {
    if (c->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, c->d_name);
    DIR *sub = opendir(path);
    struct dirent *f;
    while (sub && (f = readdir(sub))) {
      const char *dot = strrchr(f->d_name, '.');
      if (f->d_name[0] == '.' || !dot || (strcasecmp(dot, ".jpg") && strcasecmp(dot, ".jpeg"))) continue;
      if (nn == cap) names = realloc(names, (cap = cap ? cap * 2 : 256) * sizeof *names);
      char full[8192 + 512];
      snprintf(full, sizeof full, "%s/%s", path, f->d_name);
      names[nn++] = strdup(full);
    }
    if (sub) closedir(sub);
  }
  closedir(top);
  for (size_t i = 0; i < nn; i++) {
    if (n < max) {
      FILE *fp = fopen(names[i], "rb");
      struct stat st;
      if (fp && !fstat(fileno(fp), &st) && st.st_size > 0) {
        img[n] = malloc((size_t)st.st_size);
        len[n] = fread(img[n], 1, (size_t)st.st_size, fp);
        *total += len[n];
        n++;
      }
      if (fp) fclose(fp);
    }
    free(names[i]);
  }
  free(names);
  return n;
}

static bool decode_scale, no_stages;

static double run_xform(const lade__transform_ops_t *ops, int dtype, uint8_t **img, size_t *len, int n, int rounds,
                        uint64_t *sink) {
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  cfg.image_dtype = dtype;
  if (decode_scale) cfg.decode_scale = LADE__DECODE_SCALE_AUTO;
  void *st, *ws;
  lade__sample_shape_t shape;
  lade__xform_conf_t xc = lade__resolve_xform(&cfg);
  if (ops->init(&st, &xc, NULL, 0, &shape) || ops->worker_init(st, &ws)) {
    fprintf(stderr, "init: %s\n", lade_last_error());
    exit(1);
  }
  uint8_t *out = malloc(shape.bytes);
  double t0 = lade__now();
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) {
      lade__rng_t rng;
      lade__rng_init(&rng, 1, (uint64_t)i, LADE__RNG_AUGMENT);
      lade__xform_ctx_t ctx = {(uint64_t)i, (uint64_t)r, &rng};
      uint32_t payload;
      if (ops->apply(st, ws, img[i], len[i], &ctx, out, &payload)) {
        fprintf(stderr, "apply: %s\n", lade_last_error());
        exit(1);
      }
      *sink += out[shape.bytes / 2];
    }
  }
  double t = lade__now() - t0;
  free(out);
  ops->worker_free(st, ws);
  ops->destroy(st);
  return (double)n * rounds / t;
}

int main(int argc, char **argv) {
  const char *dir = NULL, *only = NULL;
  int pos[3] = {200, 5, 1}, npos = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--decode-scale")) decode_scale = true;
    else if (!strcmp(argv[i], "--no-stages")) no_stages = true;
    else if (npos < 3) pos[npos++] = atoi(argv[i]);
  }
  int n = pos[0], rounds = pos[1];
  uint64_t seed = (uint64_t)pos[2];
  uint8_t **img = calloc((size_t)n, sizeof(*img));
  size_t *len = calloc((size_t)n, sizeof(*len)), total = 0;
  char err[256], cpu[256];
  if (dir) {
    n = load_dir(dir, n, img, len, &total);
    if (n <= 0) {
      fprintf(stderr, "%s: no JPEGs in its class folders\n", dir);
      return 1;
    }
  } else {
    for (int i = 0; i < n; i++) {
      if (lade_tool_gen_jpeg_one(seed, (uint64_t)i, &img[i], &len[i], err, sizeof(err))) {
        fprintf(stderr, "gen: %s\n", err);
        return 1;
      }
      total += len[i];
    }
  }
  uint64_t sink = 0;
  lade_tool_cpu_model(cpu, sizeof cpu);
  printf("%d images (%s), mean %.1f KB, %d rounds, 1 thread, %s%s\n", n, dir ? dir : "synthetic", total / 1024.0 / n,
         rounds, cpu, decode_scale ? ", transforms with decode_scale=auto (not bit-exact)" : "");
  /* Rounds alternate between the contenders so drift in a shared machine's
   * speed hits all of them alike; each rate is the best round's (other
   * processes only ever slow a round down). */
  double row1 = 0, blocks = 0, turbo = 0, tr = 0, tr8 = 0, ev = 0, entropy = 0;
  if (only) {
    double rate;
    if (!strcmp(only, "train")) rate = run_xform(&lade__xform_imagenet_train, LADE_DTYPE_FLOAT32, img, len, n, rounds, &sink);
    else if (!strcmp(only, "train8")) rate = run_xform(&lade__xform_imagenet_train, LADE_DTYPE_UINT8, img, len, n, rounds, &sink);
    else if (!strcmp(only, "eval")) rate = run_xform(&lade__xform_imagenet_eval, LADE_DTYPE_FLOAT32, img, len, n, rounds, &sink);
    else if (!strcmp(only, "decode")) {
      rate = 0;
      for (int r = 0; r < rounds; r++) rate = fmax(rate, scanline_decode(img, len, n, 0, &sink));
    } else {
      fprintf(stderr, "--only: train, train8, eval or decode, not %s\n", only);
      return 2;
    }
    printf("%s: %.1f img/s (sink %llu)\n", only, rate, (unsigned long long)(sink & 1));
    return 0;
  }
  for (int r = 0; r < rounds; r++) {
    row1 = fmax(row1, scanline_decode(img, len, n, 1, &sink));
    blocks = fmax(blocks, scanline_decode(img, len, n, 0, &sink));
    entropy = fmax(entropy, lade_tool_entropy_only(img, len, n));
#ifdef LADE_BENCH_TURBOJPEG
    turbo = fmax(turbo, turbo_decode(img, len, n, &sink));
#endif
    tr = fmax(tr, run_xform(&lade__xform_imagenet_train, LADE_DTYPE_FLOAT32, img, len, n, 1, &sink));
    tr8 = fmax(tr8, run_xform(&lade__xform_imagenet_train, LADE_DTYPE_UINT8, img, len, n, 1, &sink));
    ev = fmax(ev, run_xform(&lade__xform_imagenet_eval, LADE_DTYPE_FLOAT32, img, len, n, 1, &sink));
  }
  double bare = fmax(blocks, turbo);
  printf("scanline decode, one row/call  : %8.1f img/s  (the old baseline)\n", row1);
  printf("scanline decode, row blocks    : %8.1f img/s\n", blocks);
  if (turbo > 0) printf("TurboJPEG tjDecompress2        : %8.1f img/s\n", turbo);
  else printf("TurboJPEG tjDecompress2        :      n/a (built without libturbojpeg0-dev)\n");
  printf("ceiling (fastest whole decode) : %8.1f img/s\n", bare);
  if (entropy > 0)
    printf("entropy decode only (skip all) : %8.1f img/s  (%.0f%% of a whole decode's time)\n", entropy,
           100.0 * bare / entropy);
  printf("imagenet-train float32 224     : %8.1f img/s  (%.2fx ceiling)\n", tr, tr / bare);
  printf("imagenet-train uint8 224       : %8.1f img/s  (%.2fx ceiling)\n", tr8, tr8 / bare);
  printf("imagenet-eval float32 256/224  : %8.1f img/s  (%.2fx ceiling)\n", ev, ev / bare);
  /* where each transform's time goes (tools/jpeg_stages.c) */
  static const struct {
    const char *label;
    int transform;
  } acct[2] = {{"imagenet-train float32", LADE__XF_IMAGENET_TRAIN}, {"imagenet-eval float32", LADE__XF_IMAGENET_EVAL}};
  for (int k = 0; k < 2 && !no_stages; k++) {
    struct lade_config cfg;
    lade__config_defaults(&cfg);
    if (decode_scale) cfg.decode_scale = LADE__DECODE_SCALE_AUTO;
    cfg.transform = acct[k].transform;
    cfg.seed = 1;
    lade_tool_stages_t stg;
    char why[256];
    printf("%s: ", acct[k].label);
    if (lade_tool_jpeg_stages(img, len, n, &cfg, rounds, &stg, why, sizeof why)) {
      printf("no stage account: %s\n", why);
      continue;
    }
    lade_tool_stages_print(stdout, "", "", &stg);
  }
  printf("(sink %llu)\n", (unsigned long long)(sink & 1));
  for (int i = 0; i < n; i++) free(img[i]);
  free(img);
  free(len);
  return 0;
}
