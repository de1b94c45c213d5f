/* test_engine.c - the engine end to end on real files: determinism across
 * thread counts, plan semantics, seek/resume, errors, skip, lifetime. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/npyfmt.h"
#include "harness.h"
#include "lade/lade.h"
#include "source/source.h"

#define DIM 16

/* Sample i of the test datasets holds floats i*1000 + k, k < DIM. */
static void fill_sample(float *v, uint64_t i) {
  for (int k = 0; k < DIM; k++) v[k] = (float)(i * 1000 + (uint64_t)k);
}

static void write_npy(const char *path, int64_t n0, int ndim, const int64_t *shape, const float *data, size_t count) {
  char hdr[256];
  int hl = lade__npy_write_header(hdr, sizeof hdr, LADE_DTYPE_FLOAT32, ndim, shape);
  FILE *f = fopen(path, "wb");
  fwrite(hdr, 1, (size_t)hl, f);
  fwrite(data, sizeof(float), count, f);
  fclose(f);
  (void)n0;
}

static const char *make_stacked(const char *name, uint64_t n) {
  static char path[4096];
  const char *dir = lade_test_tmpdir(name);
  snprintf(path, sizeof path, "%s/data.npy", dir);
  float *all = malloc(n * DIM * sizeof *all);
  for (uint64_t i = 0; i < n; i++) fill_sample(all + i * DIM, i);
  int64_t shape[2] = {(int64_t)n, DIM};
  write_npy(path, (int64_t)n, 2, shape, all, n * DIM);
  free(all);
  return path;
}

/* A folder of per-sample .npy files in 3 class folders: file i in class i%3,
 * holding the data of its dataset index (classes sorted, then names), so the
 * same content check works for both layouts. n must be a multiple of 3. */
static const char *make_folder(const char *name, uint64_t n) {
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s", lade_test_tmpdir(name));
  for (int c = 0; c < 3; c++) lade_test_sh("mkdir -p %s/c%d", dir, c);
  float v[DIM];
  int64_t shape[1] = {DIM};
  for (uint64_t i = 0; i < n; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/c%d/s%05llu.npy", dir, (int)(i % 3), (unsigned long long)i);
    fill_sample(v, (i % 3) * (n / 3) + i / 3);
    write_npy(path, 0, 1, shape, v, DIM);
  }
  return dir;
}

static lade_config_t *config(const char *source, const char *extra[]) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  lade_config_set(c, "source", source);
  for (int i = 0; extra && extra[i]; i++) {
    int rc = lade_config_parse(c, extra[i]);
    if (rc) fprintf(stderr, "bad setting %s: %s\n", extra[i], lade_last_error());
  }
  return c;
}

typedef struct run {
  uint64_t batches, samples;
  uint64_t sum;
  uint64_t per_batch[4096];
  int64_t idx[65536];
  uint64_t nidx;
  int content_ok;
  int rc;
  char err[1024];
} run_t;

static void drain(lade_loader_t *L, run_t *r) {
  r->content_ok = 1;
  for (;;) {
    lade_batch_t *b = NULL;
    r->rc = lade_loader_next(L, &b);
    if (r->rc) {
      snprintf(r->err, sizeof r->err, "%s", lade_last_error());
      return;
    }
    if (!b) return;
    const float *v = b->data;
    for (int64_t i = 0; i < b->shape[0]; i++) {
      float want[DIM];
      fill_sample(want, (uint64_t)b->indices[i]);
      if (memcmp(want, v + i * DIM, sizeof want) != 0) r->content_ok = 0;
      if (r->nidx < 65536) r->idx[r->nidx++] = b->indices[i];
    }
    uint64_t h = lade_checksum(b->data, b->nbytes, 0);
    if (r->batches < 4096) r->per_batch[r->batches] = h;
    r->sum = lade_checksum(b->data, b->nbytes, r->sum);
    r->batches++;
    r->samples += (uint64_t)b->shape[0];
    lade_batch_release(b);
  }
}

static run_t *run_config(lade_config_t *c) {
  run_t *r = calloc(1, sizeof *r);
  lade_loader_t *L = NULL;
  r->rc = lade_loader_create(&L, c);
  if (r->rc) {
    snprintf(r->err, sizeof r->err, "%s", lade_last_error());
    return r;
  }
  drain(L, r);
  lade_loader_destroy(L);
  return r;
}

static void test_same_batches_any_thread_count(void) {
  const char *src = make_stacked("threads", 1000);
  run_t *ref = NULL;
  const char *threads[] = {"threads=1", "threads=2", "threads=7", "threads=16"};
  for (int t = 0; t < 4; t++) {
    const char *extra[] = {threads[t], "batch_size=32", "epochs=2", "seed=5", "prefetch=3", NULL};
    lade_config_t *c = config(src, extra);
    run_t *r = run_config(c);
    lade_config_destroy(c);
    CHECK_OK(r->rc);
    CHECK(r->content_ok);
    CHECK_EQ_INT(r->batches, 2 * 32); /* ceil(1000/32) = 32 steps, the last of 8 */
    CHECK_EQ_INT(r->samples, 2 * 1000);
    if (!ref) {
      ref = r;
    } else {
      CHECK(r->sum == ref->sum);
      CHECK(memcmp(r->idx, ref->idx, ref->nidx * sizeof *ref->idx) == 0);
      free(r);
    }
  }
  /* each epoch: every sample exactly once (no padding with one learner) */
  for (int e = 0; e < 2; e++) {
    int *seen = calloc(1000, sizeof *seen);
    for (uint64_t i = 0; i < 1000; i++) seen[ref->idx[e * 1000 + i]]++;
    int once = 0;
    for (int i = 0; i < 1000; i++) once += seen[i] == 1;
    CHECK_EQ_INT(once, 1000);
    free(seen);
  }
  /* the two epochs are shuffled differently */
  CHECK(memcmp(ref->idx, ref->idx + 1000, 1000 * sizeof(int64_t)) != 0);
  free(ref);
}

static void test_ranks_partition_global_batches(void) {
  const char *src = make_stacked("ranks", 1000);
  int64_t *all = calloc(4 * 65536, sizeof *all);
  uint64_t n[4] = {0};
  for (int r = 0; r < 4; r++) {
    char rank[32];
    snprintf(rank, sizeof rank, "rank=%d", r);
    const char *extra[] = {rank, "world_size=4", "batch_size=10", "drop_last=true", "seed=9", "threads=2", NULL};
    lade_config_t *c = config(src, extra);
    run_t *res = run_config(c);
    lade_config_destroy(c);
    CHECK_OK(res->rc);
    CHECK(res->content_ok);
    CHECK_EQ_INT(res->batches, 25); /* floor(1000 / 40) */
    memcpy(all + r * 65536, res->idx, res->nidx * sizeof *all);
    n[r] = res->nidx;
    free(res);
  }
  /* disjoint and complete over the epoch (1000 = 25 * 40: nothing dropped) */
  int *seen = calloc(1000, sizeof *seen);
  for (int r = 0; r < 4; r++)
    for (uint64_t i = 0; i < n[r]; i++) seen[all[r * 65536 + i]]++;
  int ok = 1;
  for (int i = 0; i < 1000; i++) ok &= seen[i] == 1;
  CHECK(ok);
  /* rank r's batch s is the slice [r*10, r*10+10) of global batch s: rank 0 of
   * a world of 1 with batch 40 sees the concatenation */
  const char *extra[] = {"batch_size=40", "drop_last=true", "seed=9", NULL};
  lade_config_t *c = config(src, extra);
  run_t *g = run_config(c);
  lade_config_destroy(c);
  int slices = 1;
  for (int s = 0; s < 25; s++)
    for (int r = 0; r < 4; r++)
      slices &= memcmp(g->idx + s * 40 + r * 10, all + r * 65536 + s * 10, 10 * sizeof(int64_t)) == 0;
  CHECK(slices);
  free(g);
  free(seen);
  free(all);
}

static void test_seek_resumes_exactly(void) {
  const char *src = make_folder("seek", 300);
  const char *extra[] = {"batch_size=16", "epochs=3", "seed=1", "threads=3", NULL};
  lade_config_t *c = config(src, extra);
  run_t *ref = run_config(c);
  CHECK_OK(ref->rc);
  CHECK(ref->content_ok);
  uint64_t steps = 19; /* ceil(300/16) */
  CHECK_EQ_INT(ref->batches, 3 * steps);
  /* a fresh loader seeking to (1, 7) continues like the uninterrupted run */
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  CHECK_OK(lade_loader_seek(L, 1, 7));
  run_t *r = calloc(1, sizeof *r);
  drain(L, r);
  CHECK_OK(r->rc);
  CHECK_EQ_INT(r->batches, 3 * steps - (steps + 7));
  CHECK(memcmp(r->per_batch, ref->per_batch + steps + 7, r->batches * sizeof(uint64_t)) == 0);
  /* seeking backwards in a loader that has prefetched ahead */
  CHECK_OK(lade_loader_seek(L, 0, 2));
  lade_batch_t *b = NULL;
  CHECK_OK(lade_loader_next(L, &b));
  CHECK(b && b->epoch == 0 && b->step == 2);
  if (b) {
    CHECK(lade_checksum(b->data, b->nbytes, 0) == ref->per_batch[2]);
    lade_batch_release(b);
  }
  uint64_t e, s;
  CHECK_OK(lade_loader_tell(L, &e, &s));
  CHECK(e == 0 && s == 3);
  CHECK_EQ_INT(lade_loader_seek(L, 3, 1), LADE_ERANGE);
  CHECK_EQ_INT(lade_loader_seek(L, 0, 19), LADE_ERANGE);
  /* an epoch past the last (a wrapped -1 included) names the value and the range */
  CHECK_EQ_INT(lade_loader_seek(L, 4, 0), LADE_ERANGE);
  CHECK_EQ_INT(lade_loader_seek(L, UINT64_MAX, 0), LADE_ERANGE);
  CHECK(strstr(lade_last_error(), "epoch 18446744073709551615") &&
        strstr(lade_last_error(), "epochs are 0 to 2 and steps 0 to 18") &&
        strstr(lade_last_error(), "(3, 0) is the end"));
  CHECK_EQ_INT(lade_loader_seek(L, 1, UINT64_MAX), LADE_ERANGE);
  CHECK_OK(lade_loader_tell(L, &e, &s));
  CHECK(e == 0 && s == 3); /* a refused seek moves nothing */
  CHECK_OK(lade_loader_seek(L, 3, 0)); /* the end is a position */
  CHECK_OK(lade_loader_next(L, &b));
  CHECK(b == NULL);
  lade_loader_destroy(L);
  lade_config_destroy(c);
  free(r);
  free(ref);
}

/* Per-epoch counters exist for the epochs a loader touched, not for every
 * epoch before them: seeking to epoch 10^7 or 10^9 - 1 (epochs=None in
 * Python) costs one entry, not gigabytes, and its stats are there. */
static long max_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static void test_far_epochs_cost_nothing(void) {
  const char *src = make_stacked("far-epochs", 32);
  const char *extra[] = {"batch_size=8", "epochs=1000000000", "threads=2", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  const uint64_t far[] = {10000000, 999999999, 3};
  long before = max_rss_kb();
  for (int k = 0; k < 3; k++) {
    CHECK_OK(lade_loader_seek(L, far[k], 1));
    lade_batch_t *b = NULL;
    CHECK_OK(lade_loader_next(L, &b));
    CHECK(b && b->epoch == far[k] && b->step == 1);
    lade_batch_release(b);
    lade_epoch_stats_t st;
    int rc = lade_loader_epoch_stats(L, far[k], &st, sizeof st);
    if (rc) fprintf(stderr, "  epoch %llu: %s\n", (unsigned long long)far[k], lade_last_error());
    CHECK_OK(rc);
    CHECK(st.epoch == far[k] && st.batches == 1);
  }
  lade_epoch_stats_t st;
  CHECK_EQ_INT(lade_loader_epoch_stats(L, 4, &st, sizeof st), LADE_ERANGE);
  CHECK_EQ_INT(lade_loader_epoch_stats(L, 10000001, &st, sizeof st), LADE_ERANGE);
  long grew = max_rss_kb() - before;
  if (grew > 64 * 1024) fprintf(stderr, "  peak RSS grew by %ld KiB\n", grew);
  CHECK(grew <= 64 * 1024);
  lade_loader_destroy(L);
  lade_config_destroy(c);
}

static void test_labels_from_class_folders(void) {
  const char *src = make_folder("labels", 30);
  const char *extra[] = {"batch_size=30", "shuffle=false", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_batch_t *b = NULL;
  CHECK_OK(lade_loader_next(L, &b));
  if (b) {
    /* sorted classes c0, c1, c2; within a class sorted names */
    CHECK_EQ_INT(b->indices[0], 0);
    CHECK_EQ_INT(b->labels[0], 0);
    CHECK_EQ_INT(b->labels[10], 1);
    CHECK_EQ_INT(b->labels[29], 2);
    const float *v = b->data;
    CHECK(v[10 * DIM] == 10000.0f); /* c1/s00001.npy, dataset index 10 */
    CHECK_EQ_INT(b->ndim, 2);
    CHECK_EQ_INT(b->shape[1], DIM);
    CHECK_EQ_INT(b->dtype, LADE_DTYPE_FLOAT32);
    lade_batch_release(b);
  }
  lade_loader_destroy(L);
  lade_config_destroy(c);
}

static void test_errors_name_the_file(void) {
  lade_config_t *c = config("/nonexistent/lade-data", NULL);
  lade_loader_t *L = NULL;
  CHECK_EQ_INT(lade_loader_create(&L, c), LADE_ENOENT);
  CHECK(strstr(lade_last_error(), "/nonexistent/lade-data") != NULL);
  lade_config_destroy(c);

  const char *empty = lade_test_tmpdir("empty");
  const char *raw[] = {"transform=raw", NULL};
  c = config(empty, raw);
  CHECK_EQ_INT(lade_loader_create(&L, c), LADE_EEMPTY); /* at create, as ImageFolder */
  CHECK(strstr(lade_last_error(), empty) != NULL);
  lade_config_destroy(c);

  /* one sample of another shape: fail names it */
  const char *src = make_folder("badshape", 42);
  char bad[4200];
  snprintf(bad, sizeof bad, "%s/c1/s00013.npy", src);
  float v[DIM * 2] = {0};
  int64_t shape[1] = {DIM * 2};
  write_npy(bad, 0, 1, shape, v, DIM * 2);
  const char *extra[] = {"batch_size=8", "threads=2", NULL};
  c = config(src, extra);
  run_t *r = run_config(c);
  CHECK_EQ_INT(r->rc, LADE_ESHAPE);
  CHECK(strstr(r->err, "c1/s00013.npy") != NULL);
  CHECK(strstr(r->err, "(32)") != NULL);
  free(r);
  lade_config_destroy(c);

  /* on_error=skip: substitutes deterministically, batches keep their size */
  const char *skip[] = {"batch_size=6", "threads=2", "on_error=skip", "epochs=2", NULL};
  c = config(src, skip);
  lade_loader_t *L2 = NULL;
  CHECK_OK(lade_loader_create(&L2, c));
  run_t *r1 = calloc(1, sizeof *r1);
  drain(L2, r1);
  lade_stats_t st;
  lade_loader_stats(L2, &st, sizeof(lade_stats_t));
  lade_loader_destroy(L2);
  CHECK_OK(r1->rc);
  CHECK(r1->content_ok);
  CHECK_EQ_INT(r1->samples, 84); /* 2 epochs of 42/6 = 7 steps, no padding */
  CHECK_EQ_INT(st.substituted, 2); /* once per epoch */
  for (uint64_t i = 0; i < r1->nidx; i++) CHECK(r1->idx[i] != 18); /* c1/s00013.npy */
  const char *skip1[] = {"batch_size=6", "threads=1", "on_error=skip", "epochs=2", NULL};
  lade_config_t *c1 = config(src, skip1);
  run_t *r2 = run_config(c1);
  CHECK(r2->sum == r1->sum);
  free(r1);
  free(r2);
  lade_config_destroy(c);
  lade_config_destroy(c1);

  /* a truncated file in a stacked .npy */
  const char *st_path = make_stacked("trunc", 100);
  lade_test_sh("truncate -s 4000 %s", st_path);
  c = config(st_path, NULL);
  CHECK_EQ_INT(lade_loader_create(&L, c), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "truncated") && strstr(lade_last_error(), st_path));
  lade_config_destroy(c);

  /* rank >= world_size */
  const char *rk[] = {"rank=2", "world_size=2", NULL};
  c = config(st_path, rk);
  CHECK_EQ_INT(lade_loader_create(&L, c), LADE_EINVAL);
  lade_config_destroy(c);
}

static void test_batches_outlive_loader(void) {
  const char *src = make_stacked("lifetime", 64);
  const char *extra[] = {"batch_size=8", "prefetch=1", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_batch_t *a = NULL, *b = NULL, *x = NULL;
  CHECK_OK(lade_loader_next(L, &a));
  CHECK_OK(lade_loader_next(L, &b));
  /* both buffers of prefetch=1 held: the pool grows instead of failing */
  CHECK_OK(lade_loader_next(L, &x));
  CHECK(x && x->step == 2 && x != a && x != b);
  lade_batch_release(x);
  lade_loader_destroy(L);
  /* still readable after destroy */
  int ok = 1;
  for (int i = 0; i < 8; i++) {
    float want[DIM];
    fill_sample(want, (uint64_t)b->indices[i]);
    ok &= memcmp(want, (float *)b->data + i * DIM, sizeof want) == 0;
  }
  CHECK(ok);
  lade_batch_release(a);
  lade_batch_release(b);
  lade_batch_release(NULL);
  lade_loader_destroy(NULL);
  lade_config_destroy(c);
}


/* A batch held past lade_loader_destroy() keeps its buffer, not the
 * loader's stages: the disk cache's folder lock is free at once, so a new
 * loader on the same cache_dir opens (and reads the entries the first one
 * wrote) while the old batch is still readable. */
static void test_destroy_frees_cache_while_batch_held(void) {
  const char *src = make_stacked("destroy-cache", 64);
  char cache[4200], setting[4300];
  snprintf(cache, sizeof cache, "%s/cache", lade_test_tmpdir("destroy-cache-dir"));
  snprintf(setting, sizeof setting, "cache_dir=%s", cache);
  const char *extra[] = {"batch_size=8", "threads=2", setting, NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_batch_t *held = NULL;
  CHECK_OK(lade_loader_next(L, &held));
  CHECK(held != NULL);
  lade_loader_destroy(L);
  lade_loader_t *L2 = NULL;
  int rc = lade_loader_create(&L2, c);
  if (rc) fprintf(stderr, "reopen: %s\n", lade_last_error());
  CHECK_OK(rc);
  run_t *r = calloc(1, sizeof *r);
  if (!rc) {
    drain(L2, r);
    CHECK_OK(r->rc);
    CHECK(r->content_ok);
    CHECK_EQ_INT(r->samples, 64);
    lade_loader_destroy(L2);
  }
  if (held) {
    int ok = 1;
    for (int i = 0; i < 8; i++) {
      float want[DIM];
      fill_sample(want, (uint64_t)held->indices[i]);
      ok &= memcmp(want, (float *)held->data + i * DIM, sizeof want) == 0;
    }
    CHECK(ok);
    lade_batch_release(held);
  }
  free(r);
  lade_config_destroy(c);
}


/* Batch sizes, valid counts and index multisets of one loader, per step. */
typedef struct shape_run {
  uint64_t batches, samples;
  uint32_t n[256], valid[256];
  int64_t idx[8192];
  uint64_t nidx;
  int content_ok;
} shape_run_t;

static int shape_of_run(const char *src, const char *extra[], shape_run_t *r) {
  memset(r, 0, sizeof *r);
  r->content_ok = 1;
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, c);
  lade_config_destroy(c);
  if (rc) return rc;
  lade_batch_t *b = NULL;
  while ((rc = lade_loader_next(L, &b)) == 0 && b) {
    CHECK(b->size == sizeof(lade_batch_t));
    CHECK(b->nbytes == (size_t)b->shape[0] * DIM * sizeof(float));
    if (r->batches < 256) {
      r->n[r->batches] = (uint32_t)b->shape[0];
      r->valid[r->batches] = b->valid;
    }
    for (int64_t i = 0; i < b->shape[0]; i++) {
      float want[DIM];
      fill_sample(want, (uint64_t)b->indices[i]);
      if (memcmp(want, (float *)b->data + i * DIM, sizeof want) != 0) r->content_ok = 0;
      if (r->nidx < 8192) r->idx[r->nidx++] = b->indices[i];
    }
    r->batches++;
    r->samples += (uint64_t)b->shape[0];
    lade_batch_release(b);
  }
  lade_loader_destroy(L);
  return rc;
}

/* DataLoader(range(103), batch_size=8): 12 batches of 8 and one of 7;
 * drop_last drops the 7; a batch larger than the dataset is one short batch,
 * or no batch at all with drop_last (not an error). */
static void test_last_batch_like_dataloader(void) {
  const char *src = make_stacked("lastbatch", 103);
  shape_run_t *r = malloc(sizeof *r);
  const char *plain[] = {"batch_size=8", "seed=3", "threads=3", NULL};
  CHECK_OK(shape_of_run(src, plain, r));
  CHECK_EQ_INT(r->batches, 13);
  CHECK_EQ_INT(r->samples, 103);
  CHECK(r->content_ok);
  int sizes_ok = 1;
  for (int i = 0; i < 12; i++) sizes_ok &= r->n[i] == 8 && r->valid[i] == 8;
  CHECK(sizes_ok);
  CHECK_EQ_INT(r->n[12], 7);
  CHECK_EQ_INT(r->valid[12], 7);
  int *seen = calloc(103, sizeof *seen);
  for (uint64_t i = 0; i < r->nidx; i++) seen[r->idx[i]]++;
  int once = 0;
  for (int i = 0; i < 103; i++) once += seen[i] == 1;
  CHECK_EQ_INT(once, 103);
  free(seen);

  const char *drop[] = {"batch_size=8", "seed=3", "drop_last=true", NULL};
  CHECK_OK(shape_of_run(src, drop, r));
  CHECK_EQ_INT(r->batches, 12);
  CHECK_EQ_INT(r->samples, 96);

  const char *big[] = {"batch_size=200", "epochs=2", NULL};
  CHECK_OK(shape_of_run(src, big, r));
  CHECK_EQ_INT(r->batches, 2);
  CHECK_EQ_INT(r->n[0], 103);
  CHECK_EQ_INT(r->n[1], 103);

  const char *big_drop[] = {"batch_size=200", "epochs=2", "drop_last=true", NULL};
  CHECK_OK(shape_of_run(src, big_drop, r));
  CHECK_EQ_INT(r->batches, 0);
  /* and such a loader is at its end everywhere */
  lade_config_t *c = config(src, big_drop);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  uint64_t samples = 0, steps = 9, epochs = 0, e = 9, s = 9;
  CHECK_OK(lade_loader_info(L, &samples, &steps, &epochs));
  CHECK(samples == 103 && steps == 0 && epochs == 2);
  CHECK_OK(lade_loader_seek(L, 0, 0));
  CHECK_OK(lade_loader_tell(L, &e, &s));
  CHECK(e == 2 && s == 0);
  lade_loader_destroy(L);
  lade_config_destroy(c);
  free(r);
}

/* world_size 4, 103 samples, batch 8: DistributedSampler pads to 104 (each
 * rank 26 samples: batches 8, 8, 8, 2); the one repeat is the last sample of
 * rank 3 and is marked by valid; the valid samples of all ranks are the
 * dataset exactly once. */
static void test_distributed_padding_marked(void) {
  const char *src = make_stacked("distpad", 103);
  shape_run_t *r = malloc(sizeof *r);
  int *seen = calloc(103, sizeof *seen);
  uint64_t total_valid = 0;
  for (int k = 0; k < 4; k++) {
    char rank[32];
    snprintf(rank, sizeof rank, "rank=%d", k);
    const char *extra[] = {rank, "world_size=4", "batch_size=8", "seed=11", NULL};
    CHECK_OK(shape_of_run(src, extra, r));
    CHECK_EQ_INT(r->batches, 4);
    CHECK_EQ_INT(r->samples, 26);
    CHECK(r->n[0] == 8 && r->n[1] == 8 && r->n[2] == 8 && r->n[3] == 2);
    CHECK(r->content_ok);
    uint64_t pos = 0;
    for (uint64_t b = 0; b < r->batches; b++) {
      CHECK(r->valid[b] == (k == 3 && b == 3 ? 1u : r->n[b]));
      for (uint32_t i = 0; i < r->n[b]; i++, pos++)
        if (i < r->valid[b]) seen[r->idx[pos]]++, total_valid++;
    }
  }
  CHECK_EQ_INT(total_valid, 103);
  int once = 0;
  for (int i = 0; i < 103; i++) once += seen[i] == 1;
  CHECK_EQ_INT(once, 103);
  free(seen);
  free(r);
}

/* Keeping batches: every batch of an epoch held at once (torch.cat of the
 * epoch), then one batch held across the rest of the run (at prefetch=2 the
 * 4th next() used to wait forever for the held buffer). The pool grows to
 * what is held + prefetch, and gives the buffers back as they are released. */
static void test_holding_batches(void) {
  const char *src = make_stacked("holding", 100);
  const char *extra[] = {"batch_size=10", "prefetch=2", "epochs=3", "seed=2", "threads=2", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_batch_t *held[10] = {0};
  for (int i = 0; i < 10; i++) {
    CHECK_OK(lade_loader_next(L, &held[i]));
    CHECK(held[i] && held[i]->step == (uint64_t)i);
  }
  int ok = 1;
  int *seen = calloc(100, sizeof *seen);
  for (int i = 0; i < 10; i++)
    for (int j = 0; held[i] && j < 10; j++) {
      float want[DIM];
      int64_t idx = held[i]->indices[j];
      fill_sample(want, (uint64_t)idx);
      ok &= memcmp(want, (float *)held[i]->data + j * DIM, sizeof want) == 0;
      seen[idx]++;
    }
  CHECK(ok);
  for (int i = 0; i < 100; i++) ok &= seen[i] == 1;
  CHECK(ok);
  free(seen);
  lade_stats_t st;
  CHECK_OK(lade_loader_stats(L, &st, sizeof(lade_stats_t)));
  size_t bb = 10 * DIM * sizeof(float);
  CHECK(st.peak_pool_bytes >= 10 * bb && st.peak_pool_bytes <= 12 * bb);
  for (int i = 1; i < 10; i++) lade_batch_release(held[i]);
  /* keep batch 0; the other 20 batches still come, in order */
  uint64_t n = 0;
  lade_batch_t *b = NULL;
  while (lade_loader_next(L, &b) == 0 && b) {
    CHECK(b->epoch * 10 + b->step == 10 + n);
    n++;
    lade_batch_release(b);
  }
  CHECK_EQ_INT(n, 20);
  float want[DIM];
  fill_sample(want, (uint64_t)held[0]->indices[0]);
  CHECK(memcmp(want, held[0]->data, sizeof want) == 0); /* untouched meanwhile */
  lade_batch_release(held[0]);
  lade_loader_destroy(L);
  lade_config_destroy(c);

  /* pool_max caps the pool: the caller holding pool_max batches gets a clear
   * error instead of more memory; releasing one lets it go on */
  const char *capped[] = {"batch_size=10", "prefetch=2", "pool_max=4", NULL};
  c = config(src, capped);
  CHECK_OK(lade_loader_create(&L, c));
  lade_batch_t *h[5] = {0};
  for (int i = 0; i < 4; i++) CHECK_OK(lade_loader_next(L, &h[i]));
  CHECK_EQ_INT(lade_loader_next(L, &h[4]), LADE_ESTATE);
  CHECK(strstr(lade_last_error(), "pool_max") != NULL);
  lade_batch_release(h[0]);
  CHECK_OK(lade_loader_next(L, &h[4]));
  CHECK(h[4] && h[4]->step == 4);
  for (int i = 1; i < 5; i++) lade_batch_release(h[i]);
  lade_loader_destroy(L);
  lade_config_destroy(c);
  const char *too_small[] = {"prefetch=2", "pool_max=2", NULL};
  c = config(src, too_small);
  CHECK_EQ_INT(lade_loader_create(&L, c), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "pool_max") != NULL);
  lade_config_destroy(c);
}

/* on_error=skip against a broken store: every file bad
 * stops after skip_max_run failed reads in a row, naming the storage; 30%
 * bad files stop at skip_max_fraction; neither tries 64 substitutes per
 * sample for minutes. */
static void test_skip_is_bounded(void) {
  const char *src = make_folder("deadstore", 60);
  /* all but sample 0 (read at create for the dataset's .npy header) */
  lade_test_sh("for f in %s/c*/*.npy; do case $f in */c0/s00000.npy) ;; *) echo garbage > $f;; esac; done", src);
  const char *skip[] = {"batch_size=6", "threads=2", "on_error=skip", NULL};
  lade_config_t *c = config(src, skip);
  run_t *r = run_config(c);
  CHECK(r->rc != 0);
  CHECK(strstr(r->err, "reads in a row failed, so the storage is failing") != NULL);
  CHECK(strstr(r->err, "skip_max_run") != NULL);
  free(r);
  lade_config_destroy(c);

  /* 18 of 60 bad: the run resets on every good read, the fraction stops it */
  const char *src2 = make_folder("thirtybad", 60);
  lade_test_sh("for f in %s/c1/s*.npy; do case $f in *[02468].npy) echo garbage > $f;; esac; done", src2);
  lade_test_sh("for f in %s/c2/s*.npy; do case $f in *[0246].npy) echo garbage > $f;; esac; done", src2);
  c = config(src2, skip);
  r = run_config(c);
  CHECK(r->rc == LADE_EIO);
  CHECK(strstr(r->err, "skip_max_fraction") != NULL && strstr(r->err, "epoch 0") != NULL);
  free(r);
  lade_config_destroy(c);
  /* with the bound lifted, the same run completes, every bad sample substituted */
  const char *lifted[] = {"batch_size=6", "threads=2", "on_error=skip", "skip_max_fraction=1", NULL};
  c = config(src2, lifted);
  r = run_config(c);
  CHECK_OK(r->rc);
  CHECK_EQ_INT(r->samples, 60);
  free(r);
  lade_config_destroy(c);
}

/* A FIFO (or other special file) where a sample file was: a clear error
 * naming it, never an open() that waits for ever. The listing
 * skips special files, so the FIFO replaces a file after create(). */
static void test_special_files_never_block(void) {
  alarm(60); /* a hang fails the test instead of the CI run */
  char raw[4096];
  snprintf(raw, sizeof raw, "%s", lade_test_tmpdir("fifo-raw")); /* a static buffer, reused below */
  lade_test_sh("mkdir -p %s/a && for i in 0 1 2 3 4 5; do echo sample$i > %s/a/f$i.bin; done", raw, raw);
  const char *npy = make_folder("fifo-npy", 6);
  const char *dirs[] = {raw, npy};
  const char *victim[] = {"a/f3.bin", "c1/s00004.npy"};
  for (int k = 0; k < 2; k++) {
    const char *extra[] = {k ? "transform=npy" : "transform=raw", "batch_size=2", "threads=2", "epochs=3", NULL};
    lade_config_t *c = config(dirs[k], extra);
    lade_loader_t *L = NULL;
    CHECK_OK(lade_loader_create(&L, c));
    lade_test_sh("mkfifo %s/fifo.tmp && mv -f %s/fifo.tmp %s/%s", dirs[k], dirs[k], dirs[k], victim[k]); /* atomic */
    /* drained without drain()'s content check: raw samples are 8 bytes */
    lade_batch_t *b = NULL;
    int rc;
    while ((rc = lade_loader_next(L, &b)) == 0 && b) lade_batch_release(b);
    CHECK_EQ_INT(rc, LADE_EFORMAT);
    CHECK(strstr(lade_last_error(), victim[k]) != NULL && strstr(lade_last_error(), "is a FIFO") != NULL);
    lade_loader_destroy(L);
    lade_config_destroy(c);
  }
  /* a stacked .npy source that is a FIFO fails at create */
  const char *fifo_dir = lade_test_tmpdir("fifo-stacked");
  char fifo[4200];
  snprintf(fifo, sizeof fifo, "%s/data.npy", fifo_dir);
  lade_test_sh("mkfifo %s", fifo);
  lade_config_t *c = config(fifo, NULL);
  lade_loader_t *L = NULL;
  CHECK(lade_loader_create(&L, c) != 0);
  CHECK(strstr(lade_last_error(), "data.npy") != NULL);
  lade_config_destroy(c);
  alarm(0);
}

/* A missing or empty dataset fails in create(), not at the first next(). */
static void test_empty_dataset_fails_at_create(void) {
  const char *dir = lade_test_tmpdir("emptyds");
  lade_config_t *c = config(dir, (const char *[]){"transform=raw", NULL});
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, c);
  CHECK(rc == LADE_EEMPTY || rc == LADE_ENOENT);
  CHECK(L == NULL);
  CHECK(strstr(lade_last_error(), dir) != NULL);
  lade_config_destroy(c);
  if (L) lade_loader_destroy(L);
}

static atomic_long allocs, frees, ctx_set;
static void *count_alloc(void *ctx, size_t size, size_t align) {
  if (ctx) atomic_fetch_add(&ctx_set, 1);
  atomic_fetch_add(&allocs, 1);
  void *p = NULL;
  return posix_memalign(&p, align, size) ? NULL : p;
}
static void count_free(void *ctx, void *p, size_t size) {
  (void)ctx;
  (void)size;
  atomic_fetch_add(&frees, 1);
  free(p);
}

static void test_allocator_hook_and_bounded_pool(void) {
  const char *src = make_stacked("alloc", 500);
  const char *extra[] = {"batch_size=10", "prefetch=2", "epochs=3", NULL};
  lade_config_t *c = config(src, extra);
  lade_allocator_t a = {count_alloc, count_free, NULL};
  CHECK_OK(lade_config_set_allocator(c, &a, sizeof a));
  run_t *r = run_config(c);
  CHECK_OK(r->rc);
  CHECK_EQ_INT(r->batches, 150);
  CHECK_EQ_INT(atomic_load(&allocs), 3); /* prefetch + 1 buffers, never more */
  CHECK_EQ_INT(atomic_load(&frees), 3);
  CHECK_EQ_INT(atomic_load(&ctx_set), 0);
  free(r);
  lade_config_destroy(c);
}

/* lade_allocator_t grows at its end (lade.h): an older caller's struct
 * without ctx, its size passed, reads nothing past it (the bytes after it are
 * not NULL) and its ctx is NULL; a newer caller's unknown nonzero field is
 * refused; a size without free is refused. */
static void test_allocator_sized(void) {
  struct {
    struct { /* an older lade_allocator_t: the first two fields */
      void *(*alloc)(void *ctx, size_t size, size_t align);
      void (*free)(void *ctx, void *ptr, size_t size);
    } a;
    void *past; /* where a newer struct's ctx would be */
  } old = {{count_alloc, count_free}, &old};
  const char *src = make_stacked("allocsz", 100);
  const char *extra[] = {"batch_size=10", "prefetch=1", NULL};
  lade_config_t *c = config(src, extra);
  atomic_store(&allocs, 0);
  atomic_store(&frees, 0);
  atomic_store(&ctx_set, 0);
  CHECK_OK(lade_config_set_allocator(c, (const lade_allocator_t *)&old.a, sizeof old.a));
  run_t *r = run_config(c);
  CHECK_OK(r->rc);
  CHECK_EQ_INT(r->batches, 10);
  CHECK_EQ_INT(atomic_load(&allocs), 2);
  CHECK_EQ_INT(atomic_load(&frees), 2);
  CHECK_EQ_INT(atomic_load(&ctx_set), 0); /* ctx was not read from `past` */
  free(r);
  CHECK(lade_config_set_allocator(c, (const lade_allocator_t *)&old.a, sizeof old.a.alloc) == LADE_EINVAL);
  CHECK(lade_config_set_allocator(c, (const lade_allocator_t *)&old.a, 2) == LADE_EINVAL);
  struct {
    lade_allocator_t a;
    uint64_t future;
  } newer = {{count_alloc, count_free, NULL}, 0};
  CHECK_OK(lade_config_set_allocator(c, &newer.a, sizeof newer));
  newer.future = 1;
  CHECK(lade_config_set_allocator(c, &newer.a, sizeof newer) == LADE_EUNSUPPORTED);
  CHECK_OK(lade_config_set_allocator(c, NULL, 0));
  lade_config_destroy(c);
}

static void test_trace_and_stats(void) {
  const char *src = make_stacked("trace", 100);
  char tpath[4200];
  snprintf(tpath, sizeof tpath, "%s.trace.json", src);
  char tset[4300];
  snprintf(tset, sizeof tset, "trace=%s", tpath);
  const char *extra[] = {"batch_size=10", tset, "threads=2", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  run_t *r = calloc(1, sizeof *r);
  drain(L, r);
  lade_stats_t st;
  CHECK_OK(lade_loader_stats(L, &st, sizeof(lade_stats_t)));
  CHECK_EQ_INT(st.batches, 10);
  CHECK_EQ_INT(st.samples, 100);
  CHECK_EQ_INT(st.bytes_read, 100 * DIM * 4);
  CHECK(st.first_batch_seconds > 0);
  CHECK(st.batch_latency_p50 > 0 && st.batch_latency_p50 <= st.batch_latency_max);
  /* sized: a caller built with an older, shorter struct gets its prefix and
   * nothing past it; one built with a longer struct gets zeros for the
   * fields this library does not know; a size of 0 is refused */
  struct {
    lade_stats_t st;
    unsigned char tail[64];
  } big;
  memset(&big, 0xAB, sizeof big);
  size_t prefix = offsetof(lade_stats_t, bytes_read);
  CHECK_OK(lade_loader_stats(L, &big.st, prefix));
  CHECK_EQ_INT(big.st.batches, 10);
  CHECK_EQ_INT(big.st.samples, 100);
  const unsigned char *after = (const unsigned char *)&big + prefix;
  int untouched = 1;
  for (size_t i = 0; i < sizeof big - prefix; i++) untouched &= after[i] == 0xAB;
  CHECK(untouched);
  CHECK_OK(lade_loader_stats(L, &big.st, sizeof big));
  CHECK_EQ_INT(big.st.bytes_read, 100 * DIM * 4);
  int zeroed = 1;
  for (size_t i = 0; i < sizeof big.tail; i++) zeroed &= big.tail[i] == 0;
  CHECK(zeroed);
  CHECK_EQ_INT(lade_loader_stats(L, &st, 0), LADE_EINVAL);
  lade_epoch_stats_t es;
  CHECK_OK(lade_loader_epoch_stats(L, 0, &es, sizeof es));
  CHECK_EQ_INT(es.batches, 10);
  CHECK_EQ_INT(lade_loader_epoch_stats(L, 0, &es, 4), LADE_EINVAL);
  lade_loader_destroy(L);
  /* 100 sample events, 10 batch events, 10 waits; valid JSON per python */
  CHECK_EQ_INT(lade_test_sh("test $(grep -c '\"name\":\"sample\"' %s) -eq 100", tpath), 0);
  CHECK_EQ_INT(lade_test_sh("test $(grep -c '\"name\":\"batch\"' %s) -eq 10", tpath), 0);
  CHECK_EQ_INT(lade_test_sh("/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' %s", tpath), 0);
  free(r);
  lade_config_destroy(c);
}

static void test_listing_sorted_arena(void) {
  const char *d = lade_test_tmpdir("listing");
  lade_test_sh("mkdir -p %s/b/sub %s/a %s/c && touch %s/b/z.jpg %s/b/a.jpg %s/b/sub/m.jpg %s/a/x.jpg %s/a/.hidden "
               "%s/c/k.jpg %s/root.txt",
               d, d, d, d, d, d, d, d, d, d);
  lade__listing_t l;
  CHECK_OK(lade__listing_build(&l, d));
  CHECK_EQ_INT(l.count, 5);
  CHECK_EQ_INT(l.classes, 3);
  /* root.txt is not a sample when there are class folders (as in ImageFolder) */
  const char *want[] = {"a/x.jpg", "b/a.jpg", "b/z.jpg", "b/sub/m.jpg", "c/k.jpg"};
  const int labels[] = {0, 1, 1, 1, 2};
  for (uint64_t i = 0; i < l.count && i < 5; i++) {
    CHECK(strcmp(lade__listing_path(&l, i), want[i]) == 0);
    CHECK_EQ_INT(l.label[i], labels[i]);
  }
  if (l.classes == 3) CHECK(strcmp(l.class_names[2], "c") == 0);
  lade__listing_free(&l);
}

typedef struct next_call {
  lade_loader_t *L;
  lade_batch_t *b;
  int rc;
  atomic_int done;
} next_call_t;

static void *call_next(void *arg) {
  next_call_t *c = arg;
  c->rc = lade_loader_next(c->L, &c->b);
  atomic_store(&c->done, 1);
  return NULL;
}

/* An interrupt wakes a next() that waits now, exactly once, and takes no
 * batch; with nobody waiting it does nothing (it used to make a later next()
 * fail with LADE_EINTR). */
static void test_interrupt(void) {
  const char *src = make_stacked("intr", 20000);
  const char *extra[] = {"batch_size=2000", "threads=1", "prefetch=1", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  CHECK_EQ_INT(lade_loader_interrupt(L), 0); /* nobody waits: no effect */
  lade_batch_t *b = NULL;
  CHECK_OK(lade_loader_next(L, &b));
  CHECK(b != NULL && b->step == 0);
  lade_batch_release(b);

  /* next() waits for a batch that a seek made the workers start anew; an
   * interrupt repeated until it finds it waiting wakes it with LADE_EINTR,
   * and the batch it waited for comes from the next call */
  int woken = 0;
  for (int attempt = 0; attempt < 50 && woken < 3; attempt++) {
    uint64_t step = 1 + (uint64_t)(attempt % 8);
    CHECK_OK(lade_loader_seek(L, 0, step));
    next_call_t call = {.L = L};
    pthread_t t;
    pthread_create(&t, NULL, call_next, &call);
    int n = 0;
    while (!atomic_load(&call.done) && (n = lade_loader_interrupt(L)) == 0) {
    }
    pthread_join(t, NULL);
    if (n > 0) {
      CHECK_EQ_INT(n, 1);
      CHECK_EQ_INT(call.rc, LADE_EINTR);
      CHECK(call.b == NULL);
      woken++;
    } else {
      CHECK_OK(call.rc);
      CHECK(call.b != NULL && call.b->step == step);
      lade_batch_release(call.b);
      continue;
    }
    uint64_t e = 9, s = 9;
    CHECK_OK(lade_loader_tell(L, &e, &s));
    CHECK(e == 0 && s == step); /* nothing was consumed */
    CHECK_EQ_INT(lade_loader_interrupt(L), 0);
    b = NULL;
    CHECK_OK(lade_loader_next(L, &b)); /* the interrupt is not left over */
    CHECK(b != NULL && b->epoch == 0 && b->step == step);
    float want[DIM];
    if (b) {
      fill_sample(want, (uint64_t)b->indices[0]);
      CHECK(memcmp(want, b->data, sizeof want) == 0);
    }
    lade_batch_release(b);
  }
  CHECK(woken > 0);
  lade_loader_destroy(L);
  lade_config_destroy(c);
}

/* A second lade_batch_release() of a batch is ignored: it used to free the
 * slot that by then held a later batch, whose bytes then changed. */
static void test_double_release_ignored(void) {
  const char *src = make_stacked("dblrel", 400);
  const char *extra[] = {"batch_size=10", "threads=2", "prefetch=1", "shuffle=false", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_batch_t *a = NULL, *b1 = NULL, *b2 = NULL;
  CHECK_OK(lade_loader_next(L, &a));
  lade_batch_release(a);
  CHECK_OK(lade_loader_next(L, &b1));
  CHECK_OK(lade_loader_next(L, &b2)); /* with a pool of 2, b2 is in a's buffer */
  CHECK(b1 && b2 && b2->step == 2);
  float keep[10 * DIM];
  memcpy(keep, b2->data, sizeof keep);
  lade_batch_release(a); /* the bug under test: released twice */
  lade_batch_release(a);
  lade_batch_release(b1);
  for (int i = 0; i < 6; i++) {
    lade_batch_t *x = NULL;
    CHECK_OK(lade_loader_next(L, &x));
    CHECK(x && x->step == (uint64_t)(3 + i) && x != b2);
    if (x) {
      float want[DIM];
      fill_sample(want, (uint64_t)x->indices[0]);
      CHECK(memcmp(want, x->data, sizeof want) == 0);
    }
    lade_batch_release(x);
  }
  CHECK(b2->step == 2 && b2->indices[0] == 20);
  CHECK(memcmp(keep, b2->data, sizeof keep) == 0); /* b2 never changed */
  float want[DIM];
  fill_sample(want, 20);
  CHECK(memcmp(want, b2->data, sizeof want) == 0);
  lade_batch_release(b2);
  lade_batch_t *x = NULL;
  CHECK_OK(lade_loader_next(L, &x)); /* the pool is consistent afterwards */
  CHECK(x && x->step == 9);
  lade_batch_release(x);
  lade_loader_destroy(L);
  lade_config_destroy(c);
}

/* In a fork()ed child an inherited loader fails with LADE_ESTATE, and
 * releasing its batches, destroying it and exiting are safe (the child used
 * to hang in next() and crash in destroy); the parent goes on unaffected. */
static void test_fork_child_inert(void) {
  const char *src = make_stacked("fork", 400);
  const char *extra[] = {"batch_size=10", "threads=2", "shuffle=false", NULL};
  lade_config_t *c = config(src, extra);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_batch_t *b = NULL;
  CHECK_OK(lade_loader_next(L, &b));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20); /* a hang fails the test instead of stalling it */
    int code = 0;
    lade_batch_t *x = NULL;
    if (lade_loader_next(L, &x) != LADE_ESTATE || x) code |= 1;
    if (!strstr(lade_last_error(), "fork")) code |= 2;
    uint64_t e, s;
    if (lade_loader_tell(L, &e, &s) != LADE_ESTATE) code |= 4;
    if (lade_loader_interrupt(L) != 0) code |= 8;
    if (((const float *)b->data)[0] != 0.0f) code |= 16; /* the copy is readable */
    lade_batch_release(b);
    lade_loader_destroy(L);
    _exit(code);
  }
  CHECK(pid > 0);
  int status = 0;
  CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status));
  CHECK_EQ_INT(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
  lade_batch_release(b);
  run_t *r = calloc(1, sizeof *r);
  drain(L, r);
  CHECK_OK(r->rc);
  CHECK_EQ_INT(r->batches, 39);
  CHECK(r->content_ok);
  free(r);
  lade_loader_destroy(L);
  lade_config_destroy(c);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_listing_sorted_arena);
  RUN(test_same_batches_any_thread_count);
  RUN(test_ranks_partition_global_batches);
  RUN(test_seek_resumes_exactly);
  RUN(test_far_epochs_cost_nothing);
  RUN(test_labels_from_class_folders);
  RUN(test_errors_name_the_file);
  RUN(test_batches_outlive_loader);
  RUN(test_destroy_frees_cache_while_batch_held);
  RUN(test_last_batch_like_dataloader);
  RUN(test_distributed_padding_marked);
  RUN(test_holding_batches);
  RUN(test_empty_dataset_fails_at_create);
  RUN(test_skip_is_bounded);
  RUN(test_special_files_never_block);
  RUN(test_allocator_hook_and_bounded_pool);
  RUN(test_allocator_sized);
  RUN(test_trace_and_stats);
  RUN(test_interrupt);
  RUN(test_double_release_ignored);
  RUN(test_fork_child_inert);
  return lade_test_finish();
}
