/* test_memcache.c - the memory tier's claim (single flight, issue 30): a
 * claim-get that misses claims the sample; another thread's claim-get of it
 * waits, and hits after the claimer's put; a claim ended without an entry
 * (the read failed, or the put was refused) wakes the waiter with a miss it
 * claims itself; every wait is bounded. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "harness.h"

static lade__cache_t *open_mem(uint64_t capacity, uint32_t claim_ms) {
  lade__cache_opts_t o = {.ns = "test://memcache", .capacity = capacity, .policy = LADE__CACHE_FIFO,
                          .claim_timeout_ms = claim_ms};
  lade__cache_t *c = NULL;
  int rc = lade__cache_open(&c, &o);
  if (rc) fprintf(stderr, "  open failed: %d %s\n", rc, lade_last_error());
  return c;
}

static lade__cache_stats_t stats(lade__cache_t *c) {
  lade__cache_stats_t s;
  lade__cache_stats(c, &s);
  return s;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const char PAYLOAD[] = "the bytes of sample 5";

/* A thread's claim-get of `key`: what it got and when it returned. */
typedef struct waiter {
  lade__cache_t *c;
  uint64_t key;
  int rc;
  bool claimed;
  char got[64];
  size_t len;
  double returned; /* lade__now() when the get returned */
  atomic_bool done;
  pthread_t t;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  lade__buf_t b = {0};
  w->rc = lade__cache_get_claim(w->c, w->key, 0, &b, &w->claimed);
  w->returned = lade__now();
  if (w->rc == 0) {
    w->len = b.len;
    memcpy(w->got, b.data, b.len < sizeof w->got ? b.len : sizeof w->got);
  }
  /* a waiter that ends up claiming (its loader failed) ends its own claim, as fetch.c does */
  if (w->claimed) lade__cache_release(w->c, w->key);
  lade__buf_free(&b);
  atomic_store(&w->done, true);
  return NULL;
}

static void start(waiter_t *w, lade__cache_t *c, uint64_t key) {
  memset(w, 0, sizeof *w);
  w->c = c;
  w->key = key;
  CHECK(pthread_create(&w->t, NULL, waiter_main, w) == 0);
}

/* A miss claims; a second claim-get of the key waits (still waiting 200 ms
 * on) and hits once the claimer puts: one storage read for the two. */
static void test_claim_waits_then_hits(void) {
  lade__cache_t *c = open_mem(1 << 20, 10000);
  if (!c) return;
  lade__buf_t b = {0};
  bool claimed = false;
  CHECK_EQ_INT(lade__cache_get_claim(c, 5, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  /* a plain get does not wait for a claim */
  CHECK_EQ_INT(lade__cache_get(c, 5, &b), LADE_ENOENT);
  waiter_t w;
  start(&w, c, 5);
  sleep_ms(200);
  CHECK(!atomic_load(&w.done)); /* waiting for the put */
  double put_at = lade__now();
  CHECK_OK(lade__cache_put(c, 5, PAYLOAD, sizeof PAYLOAD)); /* ends the claim */
  pthread_join(w.t, NULL);
  CHECK_EQ_INT(w.rc, 0);
  CHECK(!w.claimed);
  CHECK(w.len == sizeof PAYLOAD && memcmp(w.got, PAYLOAD, sizeof PAYLOAD) == 0);
  CHECK(w.returned >= put_at && w.returned - put_at < 5.0);
  lade__cache_stats_t s = stats(c);
  CHECK_EQ_INT(s.waited, 1);
  CHECK_EQ_INT(s.hits, 1);
  CHECK_EQ_INT(s.misses, 2); /* the claimer's, and the plain get's */
  /* resident now: a claim-get hits at once, claiming nothing */
  CHECK_EQ_INT(lade__cache_get_claim(c, 5, 0, &b, &claimed), 0);
  CHECK(!claimed && b.len == sizeof PAYLOAD);
  lade__buf_free(&b);
  lade__cache_close(c);
}

static void *release_9(void *c) {
  lade__cache_release(c, 9);
  return NULL;
}

/* The claimer's read fails: its release wakes the waiter at once (not at
 * the end of its wait) with a miss, claimed: the waiter reads the sample
 * itself. A release from a thread that does not hold the claim does
 * nothing. */
static void test_release_wakes_with_a_miss(void) {
  lade__cache_t *c = open_mem(1 << 20, 10000);
  if (!c) return;
  lade__buf_t b = {0};
  bool claimed = false;
  CHECK_EQ_INT(lade__cache_get_claim(c, 9, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  waiter_t w;
  start(&w, c, 9);
  sleep_ms(200);
  CHECK(!atomic_load(&w.done));
  double released_at = lade__now();
  lade__cache_release(c, 9);
  pthread_join(w.t, NULL);
  CHECK_EQ_INT(w.rc, LADE_ENOENT);
  CHECK(w.claimed);                          /* the waiter loads it now */
  CHECK(w.returned - released_at < 5.0);     /* woken, not timed out (10 s) */
  CHECK_EQ_INT(stats(c).waited, 0);
  /* the waiter released its claim (waiter_main): the next miss claims again */
  CHECK_EQ_INT(lade__cache_get_claim(c, 9, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  /* a thread that holds no claim of 9 cannot end this one */
  pthread_t other;
  CHECK(pthread_create(&other, NULL, release_9, c) == 0);
  pthread_join(other, NULL);
  start(&w, c, 9);
  sleep_ms(100);
  CHECK(!atomic_load(&w.done)); /* 9 still claimed */
  CHECK_OK(lade__cache_put(c, 9, PAYLOAD, sizeof PAYLOAD));
  pthread_join(w.t, NULL);
  CHECK(w.rc == 0 && !w.claimed && w.len == sizeof PAYLOAD);
  lade__buf_free(&b);
  lade__cache_close(c);
}

/* A put the tier refuses (larger than the tier) ends the claim all the
 * same: the waiter gets a miss it claims, at once. */
static void test_refused_put_ends_the_claim(void) {
  lade__cache_t *c = open_mem(4096, 10000);
  if (!c) return;
  lade__buf_t b = {0};
  bool claimed = false;
  CHECK_EQ_INT(lade__cache_get_claim(c, 3, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  waiter_t w;
  start(&w, c, 3);
  sleep_ms(200);
  CHECK(!atomic_load(&w.done));
  static char big[8192];
  double put_at = lade__now();
  CHECK_OK(lade__cache_put(c, 3, big, sizeof big)); /* refused: 0, counted in rejected */
  pthread_join(w.t, NULL);
  CHECK_EQ_INT(w.rc, LADE_ENOENT);
  CHECK(w.claimed);
  CHECK(w.returned - put_at < 5.0);
  CHECK_EQ_INT(stats(c).rejected, 1);
  CHECK_EQ_INT(stats(c).entries, 0);
  lade__buf_free(&b);
  lade__cache_close(c);
}

/* A claimer that neither puts nor releases holds a waiter up for
 * claim_timeout_ms at most: then a plain miss, with no claim (the claim is
 * still its holder's, whose put or release ends it). */
static void test_wait_is_bounded(void) {
  lade__cache_t *c = open_mem(1 << 20, 300);
  if (!c) return;
  lade__buf_t b = {0};
  bool claimed = false;
  CHECK_EQ_INT(lade__cache_get_claim(c, 11, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  waiter_t w;
  double t0 = lade__now();
  start(&w, c, 11);
  pthread_join(w.t, NULL);
  CHECK_EQ_INT(w.rc, LADE_ENOENT);
  CHECK(!w.claimed);
  double took = w.returned - t0;
  if (took < 0.29 || took > 5.0) fprintf(stderr, "  the waiter returned after %.3f s (bound 0.3 s)\n", took);
  CHECK(took >= 0.29 && took < 5.0);
  /* the claimer's release ends it: a claim-get then claims */
  lade__cache_release(c, 11);
  CHECK_EQ_INT(lade__cache_get_claim(c, 11, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  lade__cache_release(c, 11);
  CHECK_EQ_INT(stats(c).waited, 0);
  lade__buf_free(&b);
  lade__cache_close(c);
}

/* Eight threads claim-get the same 16 keys, each storing what it had to
 * read: every key is read (put) exactly once, every other get waited and
 * hit. */
typedef struct reader {
  lade__cache_t *c;
  atomic_int *reads;
  pthread_barrier_t *go;
  int hits;
} reader_t;

static void *reader_main(void *arg) {
  reader_t *r = arg;
  lade__buf_t b = {0};
  pthread_barrier_wait(r->go);
  for (uint64_t k = 0; k < 16; k++) {
    bool claimed = false;
    int rc = lade__cache_get_claim(r->c, k, 0, &b, &claimed);
    if (rc == 0) {
      r->hits += b.len == 8 && memcmp(b.data, &k, 8) == 0;
    } else if (claimed) {
      atomic_fetch_add(&r->reads[k], 1);
      sleep_ms(2); /* the storage read */
      lade__cache_put(r->c, k, &k, 8);
    }
  }
  lade__buf_free(&b);
  return NULL;
}

static void test_threads_read_each_key_once(void) {
  lade__cache_t *c = open_mem(1 << 20, 10000);
  if (!c) return;
  atomic_int reads[16];
  for (int k = 0; k < 16; k++) atomic_init(&reads[k], 0);
  reader_t r[8];
  pthread_t t[8];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 8);
  for (int i = 0; i < 8; i++) {
    r[i] = (reader_t){.c = c, .reads = reads, .go = &go};
    CHECK(pthread_create(&t[i], NULL, reader_main, &r[i]) == 0);
  }
  int hits = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    hits += r[i].hits;
  }
  pthread_barrier_destroy(&go);
  for (int k = 0; k < 16; k++) CHECK_EQ_INT(atomic_load(&reads[k]), 1);
  CHECK_EQ_INT(hits, 8 * 16 - 16);
  lade__cache_stats_t s = stats(c);
  CHECK_EQ_INT(s.misses, 16);
  CHECK_EQ_INT(s.hits, 8 * 16 - 16);
  CHECK(s.waited > 0);
  lade__cache_close(c);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_claim_waits_then_hits);
  RUN(test_release_wakes_with_a_miss);
  RUN(test_refused_put_ends_the_claim);
  RUN(test_wait_is_bounded);
  RUN(test_threads_read_each_key_once);
  return lade_test_finish();
}
