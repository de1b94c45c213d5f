/* cache_tiers.c - put and get rates of the memory and disk cache tiers.
 *
 *   bench_cache_tiers [folder]    (default /tmp/lade_bench_cache; removed after)
 *
 * For each tier, entry size (4 KiB, 128 KiB) and thread count (1, 2): the
 * threads put disjoint keys (32 MiB or 64 MiB in all, capacity large enough
 * that nothing is evicted), then get them all back, checking the length;
 * each case runs 3 times on a fresh tier and the best time is printed.
 * Disk gets read from the page cache (the files were just written): this is
 * the tier's own overhead (open, preadv, checksum), not the device's. Then
 * puts into a full disk tier (each reuses an evicted entry's file) and the
 * time to reopen 20,000 entries from INDEX and by scanning, and the cost of
 * the version check (one stat() per read). */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/cache.h"

typedef struct job {
  lade__cache_t *c;
  uint64_t first, count;
  size_t size;
  const uint8_t *data;
  int failed;
} job_t;

static void *do_put(void *arg) {
  job_t *j = arg;
  for (uint64_t k = j->first; k < j->first + j->count; k++)
    if (lade__cache_put(j->c, k, j->data, j->size) != 0) j->failed++;
  return NULL;
}

static void *do_get(void *arg) {
  job_t *j = arg;
  lade__buf_t b = {0};
  for (uint64_t k = j->first; k < j->first + j->count; k++)
    if (lade__cache_get(j->c, k, &b) != 0 || b.len != j->size) j->failed++;
  lade__buf_free(&b);
  return NULL;
}

static double run(lade__cache_t *c, int threads, uint64_t n, size_t size, const uint8_t *data, void *(*fn)(void *),
                  int *failed) {
  pthread_t t[2];
  job_t j[2];
  double t0 = lade__now();
  for (int i = 0; i < threads; i++) {
    j[i] = (job_t){c, n / (uint64_t)threads * (uint64_t)i, n / (uint64_t)threads, size, data, 0};
    pthread_create(&t[i], NULL, fn, &j[i]);
  }
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    *failed += j[i].failed;
  }
  return lade__now() - t0;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/tmp/lade_bench_cache";
  const size_t sizes[2] = {4096, 128 * 1024};
  uint8_t *data = malloc(sizes[1]);
  for (size_t i = 0; i < sizes[1]; i++) data[i] = (uint8_t)(i * 131 + 7);
  int failed = 0;
  for (int disk = 0; disk < 2; disk++)
    for (int s = 0; s < 2; s++)
      for (int threads = 1; threads <= 2; threads++) {
        size_t size = sizes[s];
        uint64_t n = s == 0 ? 8192 : 512;
        double tp = 1e30, tg = 1e30;
        for (int rep = 0; rep < 3; rep++) {
          char cmd[4200];
          snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
          if (system(cmd) != 0) return 1;
          lade__cache_opts_t o = {.dir = disk ? dir : NULL, .ns = "bench", .capacity = 1ull << 30,
                                  .policy = LADE__CACHE_LRU};
          lade__cache_t *c = NULL;
          if (lade__cache_open(&c, &o) != 0) {
            fprintf(stderr, "open: %s\n", lade_last_error());
            return 1;
          }
          tp = LADE__MIN(tp, run(c, threads, n, size, data, do_put, &failed));
          tg = LADE__MIN(tg, run(c, threads, n, size, data, do_get, &failed));
          lade__cache_close(c);
        }
        double mb = (double)n * (double)size / 1e6;
        printf("%-6s size=%-6zu threads=%d  put %9.0f entries/s %7.0f MB/s   get %9.0f entries/s %7.0f MB/s\n",
               disk ? "disk" : "memory", size, threads, (double)n / tp, mb / tp, (double)n / tg, mb / tg);
        fflush(stdout);
      }
  /* disk tier, 4 KiB entries: puts into a full tier (each evicts one entry
   * and reuses its file) against puts into an empty one; then reopening
   * 20,000 entries from the INDEX a clean close wrote against a scan of
   * every entry's header (INDEX removed, as after a crash) */
  {
    const uint64_t n = 20000;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    lade__cache_opts_t o = {.dir = dir, .ns = "bench", .capacity = 4096 * 2 * 1024, .policy = LADE__CACHE_FIFO};
    lade__cache_t *c = NULL;
    if (lade__cache_open(&c, &o) != 0) return 1;
    double fill = run(c, 1, 1024, 2048, data, do_put, &failed); /* 2048 + header: one block each */
    job_t j = {c, 1024, 4096, 2048, data, 0};
    double t0 = lade__now();
    do_put(&j);
    double churn = lade__now() - t0;
    failed += j.failed;
    lade__cache_stats_t st;
    lade__cache_stats(c, &st);
    printf("disk   size=2048   full tier   put %9.0f entries/s (empty tier %.0f/s); %llu of %llu puts reused an evicted "
           "file\n",
           4096 / churn, 1024 / fill, (unsigned long long)st.recycled_puts, (unsigned long long)st.inserts);
    lade__cache_close(c);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    o.capacity = 1ull << 30;
    if (lade__cache_open(&c, &o) != 0) return 1;
    run(c, 2, n, 512, data, do_put, &failed);
    lade__cache_close(c);
    double topen[2];
    for (int scan = 0; scan < 2; scan++) {
      if (scan) {
        snprintf(cmd, sizeof cmd, "rm -f '%s'/*/INDEX", dir);
        if (system(cmd) != 0) return 1;
      }
      t0 = lade__now();
      if (lade__cache_open(&c, &o) != 0) return 1;
      topen[scan] = lade__now() - t0;
      lade__cache_stats(c, &st);
      if (st.entries != n || st.from_index != (scan ? 0 : n)) failed++;
      lade__cache_close(c);
    }
    printf("disk   reopen %llu entries: from INDEX %.1f ms, scanning the headers %.1f ms (page cache warm)\n",
           (unsigned long long)n, topen[0] * 1e3, topen[1] * 1e3);
    /* the node's shared folder (node mode): 4 ranks of one job put n/4
     * entries each and close; the last one out merges their parts into
     * INDEX; the next job's first open from it against a scan */
    {
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
      if (system(cmd) != 0) return 1;
      lade__cache_opts_t on = o;
      on.node_job = "bench-job-1";
      on.node_timeout_ms = 10000;
      lade__cache_t *r[4] = {0};
      for (int i = 0; i < 4; i++)
        if (lade__cache_open(&r[i], &on) != 0) return 1;
      for (int i = 0; i < 4; i++) { /* rank i puts keys i*n/4 .. (i+1)*n/4 - 1 */
        job_t jr = {r[i], (uint64_t)i * (n / 4), n / 4, 512, data, 0};
        do_put(&jr);
        failed += jr.failed;
      }
      double tclose = 0;
      for (int i = 0; i < 4; i++) {
        t0 = lade__now();
        lade__cache_close(r[i]);
        tclose = lade__now() - t0; /* the last close: its part, and the merge */
      }
      double tnode[2];
      for (int scan = 0; scan < 2; scan++) {
        if (scan) {
          snprintf(cmd, sizeof cmd, "rm -f '%s'/*/INDEX", dir);
          if (system(cmd) != 0) return 1;
        }
        on.node_job = scan ? "bench-job-3" : "bench-job-2";
        t0 = lade__now();
        if (lade__cache_open(&c, &on) != 0) return 1;
        tnode[scan] = lade__now() - t0;
        lade__cache_stats(c, &st);
        if (st.from_index != (scan ? 0 : st.entries)) failed++;
        lade__cache_close(c);
      }
      printf("disk   node folder, %llu entries of 4 ranks: the last close (its part + the merge) %.1f ms; the next "
             "job's first open from INDEX %.1f ms, scanning %.1f ms\n",
             (unsigned long long)st.entries, tclose * 1e3, tnode[0] * 1e3, tnode[1] * 1e3);
    }
    /* the version check fetch.c makes on every read while a disk tier is
     * on: one stat() of the sample's path (here: of each entry file, a path
     * as deep as a dataset's root/class/file) */
    char ns[4200] = "";
    DIR *dd = opendir(dir);
    struct dirent *de;
    while (dd && (de = readdir(dd)))
      if (strlen(de->d_name) == 16) snprintf(ns, sizeof ns, "%s/%s", dir, de->d_name);
    if (dd) closedir(dd);
    double tstat = 1e30;
    for (int rep = 0; rep < 3; rep++) {
      t0 = lade__now();
      for (uint64_t k = 0; k < n; k++) {
        char path[4300];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%02x/%016llx", ns, (unsigned)(k & 0xff), (unsigned long long)k);
        if (stat(path, &sb) != 0) failed++;
      }
      tstat = LADE__MIN(tstat, lade__now() - t0);
    }
    printf("disk   version check: stat() of a sample's path %.2f us (%.0f/s; page cache warm)\n", tstat / (double)n * 1e6,
           (double)n / tstat);
  }
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) failed++;
  free(data);
  if (failed) fprintf(stderr, "%d operations failed: %s\n", failed, lade_last_error());
  return failed ? 1 : 0;
}
