/*
 * model_calibrate.c - `lade model --calibrate DIR`: measures the model's U
 * (preprocessing rate of one learner) and R (storage read rate) on this
 * machine with the real loader through the public API, so the model can be
 * evaluated with local numbers instead of the paper's.
 *   R: raw transform (bytes only), all threads: samples/s of one epoch.
 *   U: the imagenet-train transform with one worker thread: samples/s.
 */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lade/lade.h"

/* The raw transform needs a fixed slot: the largest file of the dataset. */
static uint64_t max_size;
static int note_size(const char *path, const struct stat *st, int type, struct FTW *f) {
  (void)path;
  (void)f;
  if (type == FTW_F && (uint64_t)st->st_size > max_size) max_size = (uint64_t)st->st_size;
  return 0;
}

int lade_tool_model_calibrate(const char *dir, double *U, double *R);

static int rate(const char *dir, const char *transform, const char *threads, double *out) {
  lade_config_t *cfg = NULL;
  lade_loader_t *ld = NULL;
  int rc = lade_config_create(&cfg);
  if (!rc) rc = lade_config_set(cfg, "source", dir);
  if (!rc) rc = lade_config_set(cfg, "transform", transform);
  if (!rc) rc = lade_config_set(cfg, "threads", threads);
  if (!rc) rc = lade_config_set(cfg, "epochs", "1");
  if (!rc) rc = lade_config_set(cfg, "batch_size", "16");
  if (!rc && strcmp(transform, "raw") == 0) {
    char size[32];
    max_size = 0;
    nftw(dir, note_size, 16, FTW_PHYS);
    snprintf(size, sizeof size, "%llu", (unsigned long long)(max_size ? max_size : 1));
    rc = lade_config_set(cfg, "raw_size", size);
  }
  if (!rc) rc = lade_loader_create(&ld, cfg);
  lade_config_destroy(cfg);
  if (rc) return rc;
  lade_batch_t *b;
  int n = 0;
  while (n < 64 && (rc = lade_loader_next(ld, &b)) == 0 && b) { /* NULL batch: end of the epoch */
    lade_batch_release(b);
    n++;
  }
  lade_stats_t st;
  if (!rc) rc = lade_loader_stats(ld, &st, sizeof(lade_stats_t));
  if (!rc) {
    double busy = st.stage_seconds[LADE_STAGE_READ] + st.stage_seconds[LADE_STAGE_TRANSFORM] + st.stage_seconds[LADE_STAGE_COLLATE];
    *out = busy > 0 ? (double)st.samples / busy * (st.threads ? st.threads : 1) : 0;
    if (threads[0] == '1') *out = busy > 0 ? (double)st.samples / busy : 0;
  }
  lade_loader_destroy(ld);
  return rc;
}

int lade_tool_model_calibrate(const char *dir, double *U, double *R) {
  int rc = rate(dir, "raw", "0", R);
  if (!rc) rc = rate(dir, "imagenet-train", "1", U);
  return rc;
}
