/* dlio_gen_check.c - drives tools/dlio_gen.c for tests/python/test_dlio_gen.py,
 * which checks its output against numpy, zipfile and a TFRecord reader of
 * its own (the CLI's `lade dlio datagen` is the same function behind a
 * workload file). Usage:
 *
 *   dlio_gen_check normal SEED LOC SCALE COUNT     np.random.seed(SEED);
 *                                                  np.random.normal(LOC, SCALE, COUNT), %.17g a line
 *   dlio_gen_check dims RECORD_LENGTH STDEV FILES  dlio_dims() as a JSON list
 *   dlio_gen_check gen DATA_FOLDER FORMAT FILES SAMPLES_PER_FILE RECORD_LENGTH STDEV
 *                  [eval=N] [subfolders=N] [rank=R] [world=W] [seed=S] [compression=C] [zip64=1]
 *
 * Built with tools/dlio_config.c (HAVE_DLIO_CONFIG) where it exists, which
 * names the files; without it a copy of DLIO's naming here does. zip64=1
 * needs dlio_gen.c built with DLIO_GEN_TESTING (tests/CMakeLists.txt). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlio.h"

#ifdef DLIO_GEN_TESTING
void dlio_gen_force_zip64(bool on);
#endif

#ifndef HAVE_DLIO_CONFIG
/* DLIO's file_spec: DATA/{train|valid}[/SUB]/PREFIX_{i}_of_{n}.EXT, i and SUB
 * zero padded to the digits of their counts. */
void dlio_file_name(const dlio_cfg_t *c, bool eval, uint64_t i, char *buf, size_t size) {
  uint64_t n = eval ? c->num_files_eval : c->num_files_train;
  uint64_t subs = eval ? c->num_subfolders_eval : c->num_subfolders_train;
  int nd = snprintf(NULL, 0, "%" PRIu64, n), sd = snprintf(NULL, 0, "%" PRIu64, subs);
  const char *split = eval ? "valid" : "train", *ext = c->format == DLIO_FMT_NPZ ? "npz" : "tfrecord";
  char sub[32] = "";
  if (subs > 1) snprintf(sub, sizeof sub, "/%0*" PRIu64, sd, i % subs);
  snprintf(buf, size, "%s/%s%s/%s_%0*" PRIu64 "_of_%" PRIu64 ".%s", c->data_folder, split, sub, c->file_prefix, nd, i,
           n, ext);
}
#endif

static int usage(void) {
  fprintf(stderr, "usage: dlio_gen_check normal SEED LOC SCALE COUNT | dims RECORD_LENGTH STDEV FILES |\n"
                  "       gen DATA_FOLDER npz|tfrecord FILES SAMPLES RECORD_LENGTH STDEV [key=value...]\n");
  return 2;
}

static void cfg_init(dlio_cfg_t *c) {
#ifdef HAVE_DLIO_CONFIG
  dlio_cfg_default(c);
#else
  memset(c, 0, sizeof *c);
#endif
  snprintf(c->file_prefix, sizeof c->file_prefix, "img");
  snprintf(c->compression, sizeof c->compression, "none");
  c->num_files_eval = 0;
  c->num_subfolders_train = c->num_subfolders_eval = 0;
  c->seed = 123;
}

static int opt(dlio_cfg_t *c, const char *kv, uint32_t *rank, uint32_t *world) {
  const char *eq = strchr(kv, '=');
  if (!eq) return -1;
  size_t k = (size_t)(eq - kv);
  const char *v = eq + 1;
  if (k == 4 && !strncmp(kv, "eval", k)) c->num_files_eval = strtoull(v, NULL, 10);
  else if (k == 10 && !strncmp(kv, "subfolders", k)) c->num_subfolders_train = c->num_subfolders_eval = strtoull(v, NULL, 10);
  else if (k == 4 && !strncmp(kv, "rank", k)) *rank = (uint32_t)strtoul(v, NULL, 10);
  else if (k == 5 && !strncmp(kv, "world", k)) *world = (uint32_t)strtoul(v, NULL, 10);
  else if (k == 4 && !strncmp(kv, "seed", k)) c->seed = strtoull(v, NULL, 10);
  else if (k == 11 && !strncmp(kv, "compression", k)) snprintf(c->compression, sizeof c->compression, "%s", v);
#ifdef DLIO_GEN_TESTING
  else if (k == 5 && !strncmp(kv, "zip64", k)) dlio_gen_force_zip64(atoi(v) != 0);
#endif
  else return -1;
  return 0;
}

static int cmd_gen(int argc, char **argv) {
  if (argc < 8) return usage();
  dlio_cfg_t c;
  cfg_init(&c);
  snprintf(c.data_folder, sizeof c.data_folder, "%s", argv[2]);
  if (!strcmp(argv[3], "npz")) c.format = DLIO_FMT_NPZ;
  else if (!strcmp(argv[3], "tfrecord")) c.format = DLIO_FMT_TFRECORD;
  else c.format = 99; /* dlio_datagen refuses it */
  c.num_files_train = strtoull(argv[4], NULL, 10);
  c.num_samples_per_file = strtoull(argv[5], NULL, 10);
  c.record_length = strtod(argv[6], NULL);
  c.record_length_stdev = strtod(argv[7], NULL);
  uint32_t rank = 0, world = 1;
  for (int k = 8; k < argc; k++)
    if (opt(&c, argv[k], &rank, &world) != 0) {
      fprintf(stderr, "dlio_gen_check: unknown option %s\n", argv[k]);
      return 2;
    }
  char err[DLIO_PATH + 256];
  if (dlio_datagen(&c, rank, world, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  return 0;
}

static int cmd_dims(int argc, char **argv) {
  if (argc != 5) return usage();
  dlio_cfg_t c;
  cfg_init(&c);
  c.record_length = strtod(argv[2], NULL);
  c.record_length_stdev = strtod(argv[3], NULL);
  uint64_t files = strtoull(argv[4], NULL, 10);
  int64_t *d = dlio_dims(&c, files);
  if (!d) {
    fprintf(stderr, "dlio_gen_check: dlio_dims: out of memory\n");
    return 1;
  }
  printf("[");
  for (uint64_t k = 0; k < 2 * files; k++) printf("%s%" PRId64, k ? ", " : "", d[k]);
  printf("]\n");
  free(d);
  return 0;
}

static int cmd_normal(int argc, char **argv) {
  if (argc != 6) return usage();
  dlio_mt_t m;
  dlio_mt_seed(&m, (uint32_t)strtoul(argv[2], NULL, 10));
  double loc = strtod(argv[3], NULL), scale = strtod(argv[4], NULL);
  long n = strtol(argv[5], NULL, 10);
  for (long k = 0; k < n; k++) printf("%.17g\n", dlio_mt_normal(&m, loc, scale));
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  if (!strcmp(argv[1], "gen")) return cmd_gen(argc, argv);
  if (!strcmp(argv[1], "dims")) return cmd_dims(argc, argv);
  if (!strcmp(argv[1], "normal")) return cmd_normal(argc, argv);
  return usage();
}
