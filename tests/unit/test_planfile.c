/* test_planfile.c - the plan file reader against what a writer gives
 * (every kind read back step for step) and against hostile files: the
 * findings of fuzz/fuzz_planfile.c, each a file with a right checksum that
 * made the reader load misaligned words, wrap an offset computation and
 * hand out arrays past the mapping, or promise slices (offset[r] ..
 * offset[r+1]) that lie outside the arrays. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "lade/plan.h"

static char g_dir[4096];

static size_t load(const char *path, uint8_t **out) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc((size_t)n + 64);
  size_t got = fread(*out, 1, (size_t)n, f);
  fclose(f);
  return got;
}

/* Writes body with a right trailer (checksum + "LADEEND") to path. */
static void save_with_trailer(const char *path, const uint8_t *body, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  uint64_t tr[2] = {lade__hash64(body, n, 1469598103934665603ull), 0};
  memcpy(&tr[1], "LADEEND", 8);
  fwrite(body, 1, n, f);
  fwrite(tr, 8, 2, f);
  fclose(f);
}

static lade_plan_settings_t settings(int kind) {
  lade_plan_settings_t s;
  lade_plan_settings_default(&s, sizeof s);
  s.kind = kind;
  s.samples = 12;
  s.learners = 2;
  s.batch_size = 4;
  s.epochs = 2;
  s.cache = 3;
  return s;
}

static void test_roundtrip_every_kind(void) {
  for (int kind = 0; kind < LADE_PLAN_KIND_COUNT; kind++) {
    lade_plan_settings_t s = settings(kind);
    char path[4200];
    snprintf(path, sizeof path, "%s/k%d.plan", g_dir, kind);
    CHECK_OK(lade_plan_write(&s, sizeof s, path));
    lade_plan_t *pl = NULL;
    lade_plan_file_t *f = NULL;
    CHECK_OK(lade_plan_create(&pl, &s, sizeof s));
    CHECK_OK(lade_plan_file_open(&f, path));
    if (!pl || !f) continue;
    for (uint64_t i = 0; i < lade_plan_file_steps(f); i++) {
      const lade_plan_step_t *a, *b;
      CHECK_OK(lade_plan_next(pl, &a));
      CHECK_OK(lade_plan_file_step(f, i, &b));
      if (!a || !b) break;
      uint32_t p = b->learners;
      CHECK(a->total == b->total && a->transfers == b->transfers && p == 2);
      CHECK(memcmp(a->transfer, b->transfer, b->transfers * sizeof *b->transfer) == 0);
      CHECK(memcmp(a->offset, b->offset, (p + 1) * 8) == 0);
      CHECK(memcmp(a->samples, b->samples, b->total * 8) == 0);
      CHECK(memcmp(a->admit_offset, b->admit_offset, (p + 1) * 8) == 0);
      CHECK(memcmp(a->evict_offset, b->evict_offset, (p + 1) * 8) == 0);
    }
    lade_plan_file_close(f);
    lade_plan_destroy(pl);
  }
}

/* A sound locality plan (it has transfers), then one field changed and the
 * checksum made right again: the reader must refuse the file or the step
 * with LADE_EFORMAT, never hand out what lies outside it. */
static void test_hostile(void) {
  lade_plan_settings_t s = settings(lade_plan_kind_parse("locality"));
  s.samples = 64, s.learners = 4, s.batch_size = 8, s.epochs = 3, s.cache = 32; /* with transfers */
  char path[4200], bad[4200];
  snprintf(path, sizeof path, "%s/good.plan", g_dir);
  snprintf(bad, sizeof bad, "%s/bad.plan", g_dir);
  CHECK_OK(lade_plan_write(&s, sizeof s, path));
  uint8_t *file = NULL;
  size_t n = load(path, &file);
  CHECK(n > 160 + 16);
  if (n <= 160 + 16) return;
  size_t body = n - 16;
  uint64_t *h = (uint64_t *)file;
  uint64_t index_at = h[17], step0 = 0;
  memcpy(&step0, file + index_at, 8);

  /* 1. a size that is not a multiple of 8: the trailer was loaded misaligned */
  save_with_trailer(bad, file, body - 3);
  lade_plan_file_t *f = NULL;
  CHECK_EQ_INT(lade_plan_file_open(&f, bad), LADE_EFORMAT);

  struct {
    const char *what;
    size_t at;      /* byte offset of the u64 to change */
    uint64_t value;
    int at_open;    /* refused by open (else by step 0) */
  } cases[] = {
      {"step count whose index size wraps", 16 * 8, (uint64_t)1 << 61, 1},
      {"index offset past the end", 17 * 8, UINT64_MAX - 7, 1},
      {"no learners", 4 * 8, 0, 1},
      {"step offset past the end", 0, UINT64_MAX - 63, 0},          /* at: the index entry, set below */
      {"total that wraps the step size", 0, (uint64_t)1 << 61, 0},  /* rec[3] */
      {"admit count that wraps", 0, (uint64_t)1 << 61, 0},          /* rec[6] */
      {"transfer count that wraps", 0, (uint64_t)1 << 60, 0},       /* rec[4] */
      {"offset[1] past total", 0, 1000, 0},                         /* offset[1] */
      {"admit_offset[2] not the admit count", 0, 0, 0},             /* set below */
  };
  cases[3].at = index_at;
  cases[4].at = step0 + 3 * 8;
  cases[5].at = step0 + 6 * 8;
  cases[6].at = step0 + 4 * 8;
  cases[7].at = step0 + 64 + 8;
  uint64_t total;
  memcpy(&total, file + step0 + 3 * 8, 8);
  /* admit_offset follows offset[3], samples[total], from[total] padded */
  size_t admit_off = step0 + 64 + 3 * 8 + total * 8 + (total * 4 + 7) / 8 * 8;
  cases[8].at = admit_off + 2 * 8;
  uint64_t na;
  memcpy(&na, file + step0 + 6 * 8, 8);
  cases[8].value = na + 1;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint8_t *copy = malloc(body);
    memcpy(copy, file, body);
    memcpy(copy + cases[c].at, &cases[c].value, 8);
    save_with_trailer(bad, copy, body);
    free(copy);
    f = NULL;
    int rc = lade_plan_file_open(&f, bad);
    if (cases[c].at_open) {
      if (rc != LADE_EFORMAT) fprintf(stderr, "  %s: open gave %d\n", cases[c].what, rc);
      CHECK_EQ_INT(rc, LADE_EFORMAT);
      lade_plan_file_close(f);
      continue;
    }
    CHECK_OK(rc);
    if (rc) continue;
    const lade_plan_step_t *v = NULL;
    rc = lade_plan_file_step(f, 0, &v);
    if (rc != LADE_EFORMAT) fprintf(stderr, "  %s: step gave %d\n", cases[c].what, rc);
    CHECK_EQ_INT(rc, LADE_EFORMAT);
    CHECK(strstr(lade_last_error(), "step 0") != NULL);
    lade_plan_file_close(f);
  }
  /* 10. a transfer naming a learner the plan does not have */
  lade_plan_file_t *g = NULL;
  CHECK_OK(lade_plan_file_open(&g, path));
  uint64_t with_transfer = UINT64_MAX;
  for (uint64_t i = 0; g && i < lade_plan_file_steps(g) && with_transfer == UINT64_MAX; i++) {
    const lade_plan_step_t *v;
    if (lade_plan_file_step(g, i, &v) == 0 && v->transfers) with_transfer = i;
  }
  lade_plan_file_close(g);
  if (with_transfer != UINT64_MAX) {
    uint64_t at;
    memcpy(&at, file + index_at + with_transfer * 8, 8);
    uint64_t rec[8];
    memcpy(rec, file + at, sizeof rec);
    size_t tr = at + 64 + 3 * 8 + rec[3] * 8 + (rec[3] * 4 + 7) / 8 * 8 + 3 * 8 + rec[6] * 8 + 3 * 8 + rec[7] * 8;
    uint8_t *copy = malloc(body);
    memcpy(copy, file, body);
    uint32_t dst = 7;
    memcpy(copy + tr + 4, &dst, 4);
    save_with_trailer(bad, copy, body);
    free(copy);
    CHECK_OK(lade_plan_file_open(&g, bad));
    const lade_plan_step_t *v;
    CHECK_EQ_INT(lade_plan_file_step(g, with_transfer, &v), LADE_EFORMAT);
    CHECK(strstr(lade_last_error(), "inconsistent") != NULL);
    lade_plan_file_close(g);
  } else {
    CHECK(!"the locality plan has no transfers: case 10 not reached");
  }
  free(file);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  snprintf(g_dir, sizeof g_dir, "%s", lade_test_tmpdir("planfile"));
  RUN(test_roundtrip_every_kind);
  RUN(test_hostile);
  lade_test_sh("rm -rf '%s'", g_dir);
  return lade_test_finish();
}
