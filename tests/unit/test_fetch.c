/* test_fetch.c - the fetch stage through the public API on a local dataset:
 * memory and disk tiers in front of the source, warm second runs, the DELI
 * prefetcher, clairvoyant versus FIFO/LRU eviction, seek with caches, and
 * per-epoch metrics. (The same paths against a real S3 server are tested in
 * tests/s3/.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "lade/lade.h"

#define N 96
#define SZ 256

/* Byte k of dataset sample i; a sample rewritten by a test holds its bytes
 * xor g_flip[i]. */
static uint8_t g_flip[N];
static uint8_t byte_of(uint64_t i, int k) { return (uint8_t)(i * 31 + (uint64_t)k * 7 + 1) ^ g_flip[i % N]; }

/* N files of SZ bytes in 3 class folders; sorted order gives index
 * c * (N/3) + j for file j of class c. */
static const char *make_dataset(const char *name) {
  static char dir[4096];
  memset(g_flip, 0, sizeof g_flip);
  snprintf(dir, sizeof dir, "%s", lade_test_tmpdir(name));
  uint8_t buf[SZ];
  for (int c = 0; c < 3; c++) {
    lade_test_sh("mkdir -p %s/data/c%d", dir, c);
    for (int j = 0; j < N / 3; j++) {
      uint64_t idx = (uint64_t)c * (N / 3) + (uint64_t)j;
      for (int k = 0; k < SZ; k++) buf[k] = byte_of(idx, k);
      char path[4300];
      snprintf(path, sizeof path, "%s/data/c%d/f%05d.bin", dir, c, j);
      FILE *f = fopen(path, "wb");
      fwrite(buf, 1, SZ, f);
      fclose(f);
    }
  }
  return dir;
}

typedef struct result {
  uint64_t sum, batches, samples;
  int content_ok;
  lade_stats_t st;
  lade_epoch_stats_t ep[8];
  int rc;
  char err[2048];
} result_t;

/* The raw loader over dir/data in batches of 8, plus `extra` settings. */
static lade_config_t *config(const char *dir, const char *extra[]) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char src[4200];
  snprintf(src, sizeof src, "%s/data", dir);
  lade_config_set(c, "source", src);
  lade_config_set(c, "source_type", "dir");
  lade_config_set(c, "transform", "raw");
  lade_config_set(c, "raw_size", "256"); /* so sample 0 is not read alone at open: exact tier counts */
  lade_config_set(c, "batch_size", "8");
  for (int i = 0; extra && extra[i]; i++)
    if (lade_config_parse(c, extra[i])) fprintf(stderr, "bad setting %s: %s\n", extra[i], lade_last_error());
  return c;
}

static int run(const char *dir, const char *extra[], result_t *r, int sleep_us) {
  memset(r, 0, sizeof *r);
  r->content_ok = 1;
  lade_config_t *c = config(dir, extra);
  lade_loader_t *L = NULL;
  r->rc = lade_loader_create(&L, c);
  lade_config_destroy(c);
  if (r->rc) {
    snprintf(r->err, sizeof r->err, "%s", lade_last_error());
    return r->rc;
  }
  for (;;) {
    lade_batch_t *b = NULL;
    r->rc = lade_loader_next(L, &b);
    if (r->rc || !b) break;
    r->sum = lade_checksum(b->data, b->nbytes, r->sum);
    const uint8_t *d = b->data;
    for (int64_t s = 0; s < b->shape[0]; s++)
      for (int k = 0; k < SZ; k++)
        if (d[s * SZ + k] != byte_of((uint64_t)b->indices[s], k)) r->content_ok = 0;
    r->batches++;
    r->samples += (uint64_t)b->shape[0];
    lade_batch_release(b);
    if (sleep_us) {
      struct timespec ts = {0, sleep_us * 1000L};
      nanosleep(&ts, NULL);
    }
  }
  if (r->rc) snprintf(r->err, sizeof r->err, "%s", lade_last_error());
  lade_loader_stats(L, &r->st, sizeof(lade_stats_t));
  for (uint64_t e = 0; e < 8; e++) lade_loader_epoch_stats(L, e, &r->ep[e], sizeof(lade_epoch_stats_t));
  lade_loader_destroy(L);
  return r->rc;
}

static void test_memory_tier_serves_later_epochs(void) {
  const char *dir = make_dataset("memtier");
  result_t plain, cached;
  /* two workers: the last step of an epoch and the first of the next are
   * read at once, and a sample in both is read from storage once (the
   * memory tier's claim: the other read waits for it), by either step, so
   * only the two epochs' sum is exact */
  const char *base[] = {"epochs=3", "threads=2", "seed=5", NULL};
  const char *mem[] = {"epochs=3", "threads=2", "seed=5", "cache_mem_bytes=10000000", NULL};
  CHECK_OK(run(dir, base, &plain, 0));
  CHECK_OK(run(dir, mem, &cached, 0));
  CHECK(plain.content_ok && cached.content_ok);
  CHECK(plain.sum == cached.sum); /* a cache never changes a batch */
  CHECK_EQ_INT(cached.ep[0].samples_by_source[0] + cached.ep[1].samples_by_source[0], N);
  for (int e = 0; e < 3; e++) {
    CHECK_EQ_INT(cached.ep[e].samples_by_source[0] + cached.ep[e].samples_by_source[1], N);
    CHECK_EQ_INT(cached.ep[e].bytes_by_source[0] + cached.ep[e].bytes_by_source[1], (uint64_t)N * SZ);
  }
  CHECK(cached.ep[0].samples_by_source[0] >= N - 8); /* at most the next epoch's first step came first */
  CHECK_EQ_INT(cached.ep[2].samples_by_source[1], N);
  CHECK(cached.ep[2].miss_rate == 0.0);
  CHECK_EQ_INT(cached.st.cache_misses, N);
  CHECK_EQ_INT(cached.st.samples_by_source[0], N); /* one storage read per sample */
  CHECK_EQ_INT(cached.st.samples_by_source[1], 2 * N);
  CHECK(plain.ep[1].miss_rate == 0.0); /* no cache: no miss rate */
}

/* n samples of `bytes` bytes in one class folder (indices 0 .. n - 1),
 * each starting with the SZ bytes of make_dataset's sample of its index. */
static const char *make_small_dataset(const char *name, int n, size_t bytes) {
  static char dir[4096];
  memset(g_flip, 0, sizeof g_flip);
  snprintf(dir, sizeof dir, "%s", lade_test_tmpdir(name));
  lade_test_sh("mkdir -p %s/data/c0", dir);
  uint8_t *buf = calloc(1, bytes);
  for (int j = 0; j < n && buf; j++) {
    for (int k = 0; k < SZ; k++) buf[k] = byte_of((uint64_t)j, k);
    char path[4300];
    snprintf(path, sizeof path, "%s/data/c0/f%05d.bin", dir, j);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, bytes, f);
    fclose(f);
  }
  free(buf);
  return dir;
}

/* Issue 30, no request storms: two workers of one process never read one
 * sample from storage twice. A step is the whole (tiny) dataset, so every
 * step holds every sample, and the samples are large (1 MiB, of which the
 * raw transform keeps the first SZ bytes), so a read takes long enough for
 * the worker on the next step to miss the sample the other one is still
 * reading; without the memory tier's claim most runs read a sample twice. */
static void test_memory_tier_one_read_per_sample(void) {
  enum { SMALL = 4, RUNS = 40 };
  const char *dir = make_small_dataset("memonce", SMALL, 1 << 20);
  int twice = 0;
  for (int i = 0; i < RUNS; i++) {
    char seed[32];
    snprintf(seed, sizeof seed, "seed=%d", i);
    const char *s[] = {"epochs=6", "threads=2", "batch_size=4", "raw_overflow=cut", "cache_mem_bytes=100000000",
                       seed, NULL};
    result_t r;
    CHECK_OK(run(dir, s, &r, 0));
    CHECK(r.content_ok);
    CHECK_EQ_INT(r.samples, 6 * SMALL);
    CHECK_EQ_INT(r.st.samples_by_source[0] + r.st.samples_by_source[1], 6 * SMALL);
    if (r.st.samples_by_source[0] != SMALL || r.st.cache_misses != SMALL) twice++;
  }
  if (twice) fprintf(stderr, "  %d of %d runs read a sample from storage twice\n", twice, RUNS);
  CHECK_EQ_INT(twice, 0);
}

static void test_disk_tier_warm_second_run_and_listing_change(void) {
  const char *dir = make_dataset("disktier");
  char cache[4200], opt[4300];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  snprintf(opt, sizeof opt, "cache_dir=%s", cache);
  const char *s[] = {"epochs=1", "threads=2", "prefetcher=off", "cache_disk_bytes=100000000", opt, NULL};
  result_t r1, r2, r3;
  CHECK_OK(run(dir, s, &r1, 0));
  CHECK_EQ_INT(r1.st.samples_by_source[0], N);
  CHECK_OK(run(dir, s, &r2, 0));
  CHECK(r1.sum == r2.sum && r2.content_ok);
  CHECK_EQ_INT(r2.st.samples_by_source[2], N); /* every sample from the disk tier */
  CHECK_EQ_INT(r2.st.samples_by_source[0], 0);
  CHECK_EQ_INT(r2.st.cache_misses, 0);
  struct stat st;
  CHECK(stat(cache, &st) == 0 && (st.st_mode & 0777) == 0700);
  /* a new file shifts the indices: the old entries must not be served */
  lade_test_sh("cp %s/data/c0/f00000.bin %s/data/c0/a-new.bin", dir, dir);
  CHECK_OK(run(dir, s, &r3, 0));
  /* 97 samples in 13 batches of 8, the last one short: no entry may hit */
  CHECK_EQ_INT(r3.st.samples_by_source[0], N + 1);
  CHECK_EQ_INT(r3.st.samples_by_source[2], 0);
  CHECK_EQ_INT(r3.st.samples, N + 1);
}

/* Writes sample idx's file (class idx / 32, file idx % 32) with its bytes
 * xor flip, in place (same inode) or as a new file renamed over it. */
static void rewrite_sample(const char *dir, uint64_t idx, uint8_t flip, int in_place) {
  char path[4300], tmp[4400];
  snprintf(path, sizeof path, "%s/data/c%d/f%05d.bin", dir, (int)(idx / (N / 3)), (int)(idx % (N / 3)));
  snprintf(tmp, sizeof tmp, "%s.new", path);
  g_flip[idx] = flip;
  uint8_t buf[SZ];
  for (int k = 0; k < SZ; k++) buf[k] = byte_of(idx, k);
  FILE *f = fopen(in_place ? path : tmp, in_place ? "r+b" : "wb");
  CHECK(f != NULL);
  if (!f) return;
  fwrite(buf, 1, SZ, f);
  fclose(f);
  if (!in_place) CHECK(rename(tmp, path) == 0);
}

/* A file replaced under the same name, with the same size,
 * is not served from the disk tier's old entry: in place (same inode; only
 * the mtime's nanoseconds differ) or renamed over (a new inode with the old
 * mtime). */
static void test_disk_tier_replaced_file_is_refetched(void) {
  const char *dir = make_dataset("replaced");
  char opt[4300];
  snprintf(opt, sizeof opt, "cache_dir=%s/cache", dir);
  const char *s[] = {"epochs=1", "threads=2", "prefetcher=off", "cache_disk_bytes=100000000", opt, NULL};
  result_t r1, r2, r3;
  CHECK_OK(run(dir, s, &r1, 0));
  CHECK_EQ_INT(r1.st.samples_by_source[0], N);
  /* sample 5 rewritten in place; its mtime then set 1 ns off its old one */
  char p5[4300], p40[4300];
  snprintf(p5, sizeof p5, "%s/data/c0/f00005.bin", dir);
  snprintf(p40, sizeof p40, "%s/data/c1/f00008.bin", dir);
  struct stat st5, st40;
  CHECK(stat(p5, &st5) == 0 && stat(p40, &st40) == 0);
  rewrite_sample(dir, 5, 0x5a, 1);
  struct timespec t5[2] = {st5.st_atim, st5.st_mtim};
  t5[1].tv_nsec = (t5[1].tv_nsec + 1) % 1000000000L;
  CHECK(utimensat(AT_FDCWD, p5, t5, 0) == 0);
  /* sample 40 replaced by a new file carrying the old mtime */
  rewrite_sample(dir, 40, 0xa5, 0);
  struct timespec t40[2] = {st40.st_atim, st40.st_mtim};
  CHECK(utimensat(AT_FDCWD, p40, t40, 0) == 0);
  CHECK_OK(run(dir, s, &r2, 0));
  CHECK(r2.content_ok); /* the new bytes of 5 and 40, the cached ones of the rest */
  CHECK_EQ_INT(r2.st.samples_by_source[0], 2);
  CHECK_EQ_INT(r2.st.samples_by_source[2], N - 2);
  CHECK_EQ_INT(r2.st.cache_misses, 2);
  CHECK_EQ_INT(r2.st.cache_corrupt, 0);
  /* and the new bytes are what the disk tier holds now */
  CHECK_OK(run(dir, s, &r3, 0));
  CHECK(r3.content_ok && r3.sum == r2.sum);
  CHECK_EQ_INT(r3.st.samples_by_source[2], N);
}

/* Two datasets both given as the relative path `data`
 * (run from two folders) with the same names and sizes share one
 * cache_dir without sharing entries. */
static void test_disk_tier_same_relative_name(void) {
  char a[4096], b[4096], cache[4200], opt[4300];
  snprintf(a, sizeof a, "%s", make_dataset("samename_a"));
  snprintf(b, sizeof b, "%s", make_dataset("samename_b"));
  for (uint64_t i = 0; i < N; i++) rewrite_sample(b, i, 0x33, 1); /* b: other bytes, same names and sizes */
  snprintf(cache, sizeof cache, "%s/cache", a);
  snprintf(opt, sizeof opt, "cache_dir=%s", cache);
  const char *s[] = {"epochs=1", "threads=2", "prefetcher=off", "cache_disk_bytes=100000000", opt, NULL};
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  result_t ra, rb;
  memset(g_flip, 0, sizeof g_flip);
  CHECK(chdir(a) == 0);
  CHECK_OK(run(".", s, &ra, 0)); /* source = ./data, relative */
  CHECK(ra.content_ok);
  CHECK_EQ_INT(ra.st.samples_by_source[0], N);
  memset(g_flip, 0x33, sizeof g_flip);
  CHECK(chdir(b) == 0);
  CHECK_OK(run(".", s, &rb, 0));
  CHECK(chdir(cwd) == 0);
  CHECK(rb.content_ok); /* b's own bytes, not a's from the cache */
  CHECK_EQ_INT(rb.st.samples_by_source[0], N);
  CHECK_EQ_INT(rb.st.samples_by_source[2], 0);
  memset(g_flip, 0, sizeof g_flip);
}

/* The version check stats each sample by its absolute path: a loader over
 * a relative source keeps its warm disk tier after the process changes
 * folder (as Hydra and notebooks do). */
/* FIFOs planted in cache_dir: an entry file and INDEX
 * replaced by FIFOs never block; the entry is a corrupt miss refetched from
 * storage, INDEX is ignored (the folder is scanned); a FIFO NAMESPACE is a
 * clear error naming cache_dir. */
static void test_disk_tier_fifos_never_block(void) {
  alarm(60);
  const char *dir = make_dataset("cachefifo");
  char cache[4200], opt[4300];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  snprintf(opt, sizeof opt, "cache_dir=%s", cache);
  const char *s[] = {"epochs=1", "threads=2", "prefetcher=off", "cache_disk_bytes=100000000", opt, NULL};
  result_t r1, r2;
  CHECK_OK(run(dir, s, &r1, 0));
  /* the first entry file found, and INDEX (written at the clean close) */
  lade_test_sh("f=$(find %s -type f -regextype posix-extended -regex '.*/[0-9a-f]{16}' | head -1) && rm \"$f\" && mkfifo \"$f\"", cache);
  lade_test_sh("i=$(find %s -name INDEX | head -1) && rm \"$i\" && mkfifo \"$i\"", cache);
  CHECK_OK(run(dir, s, &r2, 0));
  CHECK(r2.sum == r1.sum && r2.content_ok);
  CHECK_EQ_INT(r2.st.samples_by_source[0], 1); /* the FIFO'd entry, from storage */
  CHECK_EQ_INT(r2.st.samples_by_source[2], N - 1);
  lade_test_sh("n=$(find %s -name NAMESPACE | head -1) && rm \"$n\" && mkfifo \"$n\"", cache);
  result_t r3;
  CHECK(run(dir, s, &r3, 0) == LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "NAMESPACE") != NULL);
  alarm(0);
}

static void test_disk_tier_chdir_after_create(void) {
  const char *dir = make_dataset("chdir");
  char opt[4300], cwd[4096];
  snprintf(opt, sizeof opt, "cache_dir=%s/cache", dir);
  const char *s[] = {"epochs=1", "threads=2", "prefetcher=off", "cache_disk_bytes=100000000", opt, NULL};
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(dir) == 0);
  result_t r1;
  CHECK_OK(run(".", s, &r1, 0)); /* warms the disk tier */
  lade_config_t *c = config(".", s);
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_config_destroy(c);
  CHECK(chdir("/") == 0);
  uint64_t sum = 0;
  int ok = 1;
  for (; L;) {
    lade_batch_t *b = NULL;
    if (lade_loader_next(L, &b) || !b) break;
    sum = lade_checksum(b->data, b->nbytes, sum);
    const uint8_t *d = b->data;
    for (int64_t j = 0; j < b->shape[0]; j++)
      for (int k = 0; k < SZ; k++) ok &= d[j * SZ + k] == byte_of((uint64_t)b->indices[j], k);
    lade_batch_release(b);
  }
  lade_stats_t st;
  memset(&st, 0, sizeof st);
  if (L) lade_loader_stats(L, &st, sizeof(lade_stats_t));
  lade_loader_destroy(L);
  CHECK(chdir(cwd) == 0);
  CHECK(ok && sum == r1.sum);
  CHECK_EQ_INT(st.samples_by_source[2], N); /* all from the disk tier */
  CHECK_EQ_INT(st.samples_by_source[0], 0);
}

static void test_prefetcher_fills_disk_ahead(void) {
  const char *dir = make_dataset("prefetcher");
  char opt[4300];
  snprintf(opt, sizeof opt, "cache_dir=%s/cache", dir);
  /* 48 samples of 4 KiB blocks fit: fetch 16 with threshold 16 */
  const char *s[] = {"epochs=2", "threads=2", "prefetch=1", "prefetcher=on", "fetch_size=16", "prefetch_threshold=16",
                     "cache_disk_bytes=196608", opt, NULL};
  const char *plain_s[] = {"epochs=2", "threads=2", "prefetch=1", NULL};
  result_t r, plain;
  CHECK_OK(run(dir, plain_s, &plain, 0));
  CHECK_OK(run(dir, s, &r, 20000)); /* a slow consumer (20 ms a batch): the prefetcher gets ahead */
  CHECK(r.content_ok && r.sum == plain.sum);
  fprintf(stderr, "  prefetched %llu, from disk %llu, storage %llu, misses %llu\n", (unsigned long long)r.st.prefetched,
          (unsigned long long)r.st.samples_by_source[2], (unsigned long long)r.st.samples_by_source[0],
          (unsigned long long)r.st.cache_misses);
  CHECK_EQ_INT(r.st.fetch_size, 16);
  CHECK_EQ_INT(r.st.prefetch_threshold, 16);
  /* everything past the engine's own first window (2 batches) comes from the
   * disk tier: prefetched, or still resident from epoch 0 (then not fetched
   * again); two batches of slack for a slow machine (under TSan with another
   * test beside it, the consumer once overtook the prefetcher by 9 samples
   * at start-up) */
  CHECK(r.st.prefetched >= N - 16);
  CHECK(r.st.prefetched < 2 * N);
  CHECK(r.st.samples_by_source[2] >= 2 * N - 16 - 16);
  CHECK_EQ_INT(r.st.samples_by_source[0] + r.st.samples_by_source[2], 2 * N);
  CHECK_EQ_INT(r.ep[0].samples_by_source[0] >= 16, 1); /* the engine's own first window */
  CHECK(r.ep[1].miss_rate < 0.1);
  /* FIFO (DELI's policy) must deliver the same bytes too */
  const char *fifo[] = {"epochs=2", "threads=2", "prefetch=1", "prefetcher=on", "fetch_size=16", "prefetch_threshold=16",
                        "cache_disk_bytes=196608", "cache_policy=fifo", opt, NULL};
  result_t rf;
  CHECK_OK(run(dir, fifo, &rf, 20000));
  CHECK(rf.content_ok && rf.sum == plain.sum);
  CHECK(rf.st.samples_by_source[2] > N);
}

static void test_clairvoyant_beats_fifo_and_lru(void) {
  const char *dir = make_dataset("policies");
  /* memory for about half the dataset (256 + 64 bytes charged per entry) */
  const char *pol[] = {"fifo", "lru", "clairvoyant"};
  uint64_t hits[3], sums[3];
  for (int p = 0; p < 3; p++) {
    char o[64];
    snprintf(o, sizeof o, "cache_policy=%s", pol[p]);
    const char *s[] = {"epochs=4", "threads=1", "prefetch=1", "seed=9", "cache_mem_bytes=15360", o, NULL};
    result_t r;
    CHECK_OK(run(dir, s, &r, 0));
    CHECK(r.content_ok);
    hits[p] = r.st.samples_by_source[1];
    sums[p] = r.sum;
    fprintf(stderr, "  %s: %llu memory hits of %d reads\n", pol[p], (unsigned long long)hits[p], 4 * N);
  }
  CHECK(sums[0] == sums[1] && sums[1] == sums[2]);
  CHECK(hits[2] > hits[0]);
  CHECK(hits[2] >= hits[1]);
  CHECK(hits[2] > 0);
}

static void test_seek_with_caches(void) {
  const char *dir = make_dataset("seekcache");
  char opt[4300];
  snprintf(opt, sizeof opt, "cache_dir=%s/cache", dir);
  const char *s[] = {"epochs=2", "threads=2", "prefetcher=on", "fetch_size=8", "cache_mem_bytes=4000",
                     "cache_disk_bytes=100000000", opt, NULL};
  result_t full;
  CHECK_OK(run(dir, s, &full, 0));
  /* resume at (1, 3) and compare the remaining batches' checksum */
  lade_config_t *c = config(dir, s);
  uint64_t want = 0, got = 0;
  for (int pass = 0; pass < 2; pass++) {
    lade_loader_t *L = NULL;
    CHECK_OK(lade_loader_create(&L, c));
    uint64_t sum = 0, n = 0;
    if (pass == 1) CHECK_OK(lade_loader_seek(L, 1, 3));
    for (;;) {
      lade_batch_t *b = NULL;
      if (lade_loader_next(L, &b) || !b) break;
      if (pass == 1 || b->epoch * 12 + b->step >= 15) sum = lade_checksum(b->data, b->nbytes, sum);
      n++;
      lade_batch_release(b);
    }
    if (pass == 0) want = sum;
    else got = sum;
    lade_loader_destroy(L);
  }
  lade_config_destroy(c);
  CHECK(want == got);
}

static void test_bad_cache_settings(void) {
  const char *dir = make_dataset("badcache");
  result_t r;
  const char *s[] = {"prefetcher=on", NULL}; /* no cache_dir */
  run(dir, s, &r, 0);
  CHECK_EQ_INT(r.rc, LADE_EINVAL);
  CHECK(strstr(r.err, "cache_dir") != NULL);
  /* a cache folder that cannot be created names the folder */
  char opt[4300];
  snprintf(opt, sizeof opt, "cache_dir=%s/data/c0/f00000.bin/sub", dir);
  const char *s2[] = {"cache_disk_bytes=1000000", opt, NULL};
  run(dir, s2, &r, 0);
  CHECK(r.rc != 0);
  CHECK(strstr(r.err, "f00000.bin") != NULL);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_memory_tier_serves_later_epochs);
  RUN(test_memory_tier_one_read_per_sample);
  RUN(test_disk_tier_warm_second_run_and_listing_change);
  RUN(test_disk_tier_replaced_file_is_refetched);
  RUN(test_disk_tier_same_relative_name);
  RUN(test_disk_tier_chdir_after_create);
  RUN(test_disk_tier_fifos_never_block);
  RUN(test_prefetcher_fills_disk_ahead);
  RUN(test_clairvoyant_beats_fifo_and_lru);
  RUN(test_seek_with_caches);
  RUN(test_bad_cache_settings);
  return lade_test_finish();
}
