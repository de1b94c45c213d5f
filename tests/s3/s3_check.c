/*
 * s3_check.c - drives lade against a live S3 server for tests/s3/test_s3.py,
 * printing what it got so the test can compare with what it uploaded.
 *
 *   s3_check loader KEY=VALUE...   the public API: every sample of every batch
 *       S epoch step index label size crc32
 *   s3_check source KEY=VALUE...   the source vtable directly: the listing, then
 *       submit()/ready()/read() of every index (in reverse, as a planner that
 *       submits ahead would), a read() without a want, and stats()
 *       O index label size s3://bucket/key
 *       G index size crc32
 *       S3_CHECK_IDX=a,b,...: submit these instead; S3_CHECK_PAUSE=1: print
 *       OPENED after open() and wait for a line on stdin
 *   both end with "OK" or "ERROR NAME message" (exit status 1).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lade/lade.h"
#include "source/source.h"

static uint32_t crc_table[256];

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

static uint32_t crc32(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

static int fail(int rc) {
  printf("ERROR %s %s\n", lade_error_name(rc), lade_last_error());
  return 1;
}

static int run_loader(lade_config_t *cfg) {
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, cfg);
  if (rc) return fail(rc);
  /* S3_CHECK_SEEK=N:E:S: after N batches, lade_loader_seek(E, S) (a resume
   * or a jump, with requests of the abandoned batches still in flight) */
  const char *seek = getenv("S3_CHECK_SEEK");
  unsigned long long seek_after = 0, seek_e = 0, seek_s = 0, nb = 0;
  int do_seek = seek && sscanf(seek, "%llu:%llu:%llu", &seek_after, &seek_e, &seek_s) == 3;
  for (;;) {
    if (do_seek && nb == seek_after) {
      do_seek = 0;
      rc = lade_loader_seek(L, seek_e, seek_s);
      if (rc) {
        fail(rc);
        lade_loader_destroy(L);
        return 1;
      }
      printf("SEEK %llu %llu\n", seek_e, seek_s);
    }
    nb++;
    lade_batch_t *b = NULL;
    rc = lade_loader_next(L, &b);
    if (rc) {
      fail(rc);
      lade_loader_destroy(L);
      return 1;
    }
    if (!b) break;
    size_t slot = (size_t)b->shape[1];
    for (int64_t i = 0; i < b->shape[0]; i++) {
      const uint8_t *p = (const uint8_t *)b->data + (size_t)i * slot;
      printf("S %" PRIu64 " %" PRIu64 " %" PRId64 " %" PRId64 " %u %08x\n", b->epoch, b->step, b->indices[i],
             b->labels[i], b->sizes[i], crc32(p, b->sizes[i]));
    }
    lade_batch_release(b);
  }
  lade_stats_t st;
  lade_loader_stats(L, &st, sizeof(lade_stats_t));
  printf("LSTATS get_requests=%" PRIu64 " list_requests=%" PRIu64 " retries=%" PRIu64 " storage=%" PRIu64
         " memory=%" PRIu64 " disk=%" PRIu64 " misses=%" PRIu64 " prefetched=%" PRIu64 " fetch_size=%" PRIu64
         " concurrency=%u\n",
         st.get_requests, st.list_requests, st.retries, st.samples_by_source[0], st.samples_by_source[1],
         st.samples_by_source[2], st.cache_misses, st.prefetched, st.fetch_size, st.concurrency);
  lade_epoch_stats_t es;
  for (uint64_t e = 0; lade_loader_epoch_stats(L, e, &es, sizeof(lade_epoch_stats_t)) == 0; e++)
    printf("EPOCH e=%" PRIu64 " storage=%" PRIu64 " disk=%" PRIu64 " get_requests=%" PRIu64 " list_requests=%" PRIu64
           " miss_permille=%d\n",
           e, es.samples_by_source[0], es.samples_by_source[2], es.get_requests, es.list_requests,
           (int)(es.miss_rate * 1000 + 0.5));
  lade_loader_destroy(L);
  printf("OK\n");
  return 0;
}

static atomic_int ready_calls;
static void on_ready(void *ctx) {
  (void)ctx;
  atomic_fetch_add(&ready_calls, 1);
}

static int run_source(lade_config_t *cfg) {
  const lade__source_ops_t *ops = NULL;
  int rc = lade__source_select(cfg, &ops);
  if (rc) return fail(rc);
  if (!ops->submit || !ops->ready || !ops->stats) {
    printf("ERROR LADE_EUNSUPPORTED the %s source has no remote hooks\n", ops->name);
    return 1;
  }
  lade__source_t s;
  memset(&s, 0, sizeof s);
  s.ops = ops;
  s.on_ready = on_ready;
  rc = ops->open(&s, cfg);
  if (rc) return fail(rc);
  lade__source_stats_t st;
  ops->stats(&s, &st);
  printf("LISTED count=%" PRIu64 " classes=%u list_requests=%" PRIu64 " get_requests=%" PRIu64 "\n", s.count,
         s.classes, st.list_requests, st.get_requests);
  char name[8192];
  for (uint64_t i = 0; i < s.count; i++) {
    ops->describe(&s, i, name, sizeof name);
    printf("O %" PRIu64 " %d %" PRIu64 " %s\n", i, s.labels ? s.labels[i] : -1, s.sizes ? s.sizes[i] : 0, name);
  }
  /* S3_CHECK_PAUSE=1: "OPENED" once the source is open (indexed), then
   * wait for a line on stdin before the first read (the test changes the
   * data in between) */
  if (getenv("S3_CHECK_PAUSE")) {
    printf("OPENED\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) {
      printf("ERROR LADE_EINTR no line on stdin after OPENED\n");
      return 1;
    }
  }
  /* an index with no want is ready (read() would start it on purpose) */
  int bad = !ops->ready(&s, 0);
  /* S3_CHECK_IDX=a,b,c...: submit these (repeats allowed) instead of every
   * sample in reverse */
  uint64_t nidx = s.count;
  const char *list = getenv("S3_CHECK_IDX");
  if (list) {
    nidx = 1;
    for (const char *c = list; *c; c++) nidx += *c == ',';
  }
  uint64_t *idx = malloc((nidx ? nidx : 1) * sizeof *idx);
  if (list) {
    const char *c = list;
    for (uint64_t k = 0; k < nidx; k++) {
      idx[k] = strtoull(c, (char **)&c, 10);
      if (*c == ',') c++;
    }
  } else {
    for (uint64_t i = 0; i < s.count; i++) idx[i] = s.count - 1 - i;
  }
  rc = ops->submit(&s, idx, nidx, 0);
  if (rc) return fail(rc);
  /* wait until everything submitted has arrived, without reading */
  double t0 = 0;
  for (int spins = 0;; spins++) {
    uint64_t nready = 0;
    for (uint64_t k = 0; k < nidx; k++) nready += ops->ready(&s, idx[k]);
    if (nready == nidx) break;
    if (spins > 6000) {
      printf("ERROR LADE_ETIMEOUT only %" PRIu64 " of %" PRIu64 " submitted samples became ready in 60 s\n", nready,
             nidx);
      return 1;
    }
    usleep(10000);
  }
  (void)t0;
  ops->stats(&s, &st);
  uint64_t get_after_submit = st.get_requests;
  printf("ARRIVED get_requests=%" PRIu64 " retries=%" PRIu64 " in_flight=%u concurrency=%u ready_calls=%d\n",
         st.get_requests, st.retries, st.in_flight, st.concurrency, atomic_load(&ready_calls));
  lade__buf_t buf = {0};
  int err = 0;
  for (uint64_t k = 0; k < nidx; k++) {
    uint64_t i = idx[k];
    rc = ops->read(&s, i, &buf);
    if (rc) {
      fail(rc);
      err = 1;
      continue;
    }
    printf("G %" PRIu64 " %zu %08x\n", i, buf.len, crc32(buf.data, buf.len));
  }
  ops->stats(&s, &st);
  /* reading what was submitted sends nothing new */
  printf("READ get_requests=%" PRIu64 " new_requests=%" PRIu64 "\n", st.get_requests,
         st.get_requests - get_after_submit);
  /* a read without a want fetches on its own */
  if (s.count) {
    rc = ops->read(&s, 0, &buf);
    if (rc) {
      fail(rc);
      err = 1;
    } else {
      printf("G %d %zu %08x\n", 0, buf.len, crc32(buf.data, buf.len));
    }
  }
  ops->stats(&s, &st);
  printf("STATS get_requests=%" PRIu64 " list_requests=%" PRIu64 " retries=%" PRIu64 " bytes=%" PRIu64
         " in_flight=%u concurrency=%u ready_calls=%d ready0=%d\n",
         st.get_requests, st.list_requests, st.retries, st.bytes, st.in_flight, st.concurrency,
         atomic_load(&ready_calls), !bad);
  lade__buf_free(&buf);
  free(idx);
  ops->close(&s);
  if (err) return 1;
  printf("OK\n");
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  crc_init();
  if (argc < 2 || (strcmp(argv[1], "loader") && strcmp(argv[1], "source"))) {
    fprintf(stderr, "usage: s3_check loader|source KEY=VALUE...\n");
    return 2;
  }
  lade_config_t *cfg = NULL;
  lade_config_create(&cfg);
  for (int i = 2; i < argc; i++) {
    int rc = lade_config_parse(cfg, argv[i]);
    if (rc) return fail(rc);
  }
  int rc = !strcmp(argv[1], "loader") ? run_loader(cfg) : run_source(cfg);
  lade_config_destroy(cfg);
  fflush(stdout);
  return rc;
}
