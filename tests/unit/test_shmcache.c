/* test_shmcache.c - the node tier (cache/shmcache.c, docs/cache.md "Node
 * cache"): processes of one job share one copy; bytes always the put's under
 * concurrent puts, evictions and SIGKILLed processes; a process dying with
 * the lock held empties the cache and the others go on; a killed job's
 * segment is removed by the next open, a live one never (its unreaped
 * zombies are dead; a process whose main thread exited, or that is
 * stopped, lives); a process stopped holding the lock holds the others up
 * for peer_timeout_ms at most and corrupts nothing; too small a tmpfs is an
 * error at open. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "cache/cache.h"
#include "harness.h"

static char g_dir[4096];

static size_t plen(uint64_t key) { return 40 + (size_t)(lade__mix64(key * 7 + 3) % 2000); }

static void pfill(uint64_t key, uint8_t *p, size_t len) {
  for (size_t i = 0; i < len; i += 8) {
    uint64_t w = lade__mix64(key * 0x9e3779b97f4a7c15ull + i);
    memcpy(p + i, &w, LADE__MIN(8, len - i));
  }
}

static bool pok(uint64_t key, const lade__buf_t *b) {
  uint8_t want[4096];
  size_t len = plen(key);
  pfill(key, want, len);
  return b->len == len && memcmp(b->data, want, len) == 0;
}

static int put(lade__cache_t *c, uint64_t key) {
  uint8_t p[4096];
  size_t len = plen(key);
  pfill(key, p, len);
  return lade__cache_put(c, key, p, len);
}

static lade__cache_t *open_node(const char *job, uint64_t capacity, int *rc_out) {
  lade__cache_opts_t o = {.ns = "test://node", .capacity = capacity, .policy = LADE__CACHE_FIFO,
                          .node_dir = g_dir, .node_job = job, .node_slots = 4096, .node_timeout_ms = 5000};
  lade__cache_t *c = NULL;
  int rc = lade__cache_open(&c, &o);
  if (rc_out) *rc_out = rc;
  return c;
}

static int segments(void) {
  int n = 0;
  DIR *d = opendir(g_dir);
  struct dirent *de;
  while (d && (de = readdir(d)))
    n += strncmp(de->d_name, "lade-", 5) == 0;
  if (d) closedir(d);
  return n;
}

static lade__cache_t *open_plan(const char *job, uint64_t capacity) {
  lade__cache_opts_t o = {.ns = "test://node", .capacity = capacity, .policy = LADE__CACHE_PLAN,
                          .node_dir = g_dir, .node_job = job, .node_slots = 4096, .node_timeout_ms = 5000};
  lade__cache_t *c = NULL;
  return lade__cache_open(&c, &o) == 0 ? c : NULL;
}

/* Plan mode: the plan's evicts only. With the ring's tail live, a put moves
 * live records forward instead of evicting them; every entry put and not
 * evicted stays readable with its bytes; a put the live entries leave no
 * room for is refused, the others kept. A FIFO cache of the same job and
 * settings is another segment. */
static void test_plan_mode(void) {
  uint64_t cap = 0;
  for (uint64_t k = 0; k < 40; k++) cap += lade__shmcache_charge(plen(k));
  lade__cache_t *c = open_plan("job-plan", cap);
  CHECK(c != NULL);
  if (!c) return;
  bool in[400] = {false};
  uint64_t used = 0;
  lade__buf_t b = {0};
  /* 30 entries, then rounds of: evict every third live one, put new ones while they fit */
  uint64_t next = 0;
  for (; next < 30; next++) {
    CHECK_OK(put(c, next));
    in[next] = true;
    used += lade__shmcache_charge(plen(next));
  }
  for (int round = 0; round < 12; round++) {
    int j = 0;
    for (uint64_t k = 0; k < next; k++)
      if (in[k] && j++ % 3 == round % 3) {
        CHECK(lade__cache_evict(c, k));
        in[k] = false;
        used -= lade__shmcache_charge(plen(k));
      }
    while (next < 400 && used + lade__shmcache_charge(plen(next)) <= cap * 3 / 4) {
      CHECK_OK(put(c, next));
      in[next] = true;
      used += lade__shmcache_charge(plen(next));
      next++;
    }
    for (uint64_t k = 0; k < next; k++)
      CHECK_EQ_INT(lade__cache_get(c, k, &b) == 0 && pok(k, &b), in[k]);
  }
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(c, &ns);
  fprintf(stderr, "  %llu puts, %llu records moved forward, %llu evictions (all the plan's)\n",
          (unsigned long long)next, (unsigned long long)ns.moved, (unsigned long long)ns.evictions);
  CHECK(ns.moved > 0 && ns.rejected == 0 && ns.used == used);
  /* fill it: the put that does not fit is refused, nothing else goes */
  uint64_t before = ns.entries;
  while (next < 400 && used + lade__shmcache_charge(plen(next)) <= cap) {
    CHECK_OK(put(c, next));
    in[next] = true;
    used += lade__shmcache_charge(plen(next));
    next++;
  }
  CHECK_OK(put(c, next)); /* refused (counted), not an error */
  lade__shmcache_node_stats(c, &ns);
  CHECK(ns.rejected == 1 && ns.used == used && ns.entries > before);
  for (uint64_t k = 0; k <= next; k++) CHECK_EQ_INT(lade__cache_get(c, k, &b) == 0 && pok(k, &b), k < 400 && in[k]);
  /* each process evicts what it put: another's entry of the key stays */
  uint64_t k0 = 0;
  while (k0 < 399 && !in[k0]) k0++;
  CHECK(lade__cache_evict(c, k0));
  pid_t pid = fork();
  if (pid == 0) {
    lade__cache_t *d = open_plan("job-plan", cap);
    int bad = !d || put(d, k0) != 0 || !lade__cache_contains(d, k0);
    lade__cache_close(d);
    _exit(bad);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(!lade__cache_evict(c, k0));
  CHECK(lade__cache_get(c, k0, &b) == 0 && pok(k0, &b));
  lade__cache_t *fifo = open_node("job-plan", cap, NULL);
  CHECK(fifo != NULL && segments() == 2);
  lade__cache_close(fifo);
  lade__buf_free(&b);
  lade__cache_close(c);
}

/* A process that holds the lock and stops (SIGSTOP, a debugger) holds the
 * others up at most peer_timeout_ms: the get fails then, and every later
 * call at once (the process reads from storage from then on). */
static void test_lock_held_too_long(void) {
  lade__cache_opts_t o = {.ns = "test://node", .capacity = 1 << 16, .policy = LADE__CACHE_FIFO,
                          .node_dir = g_dir, .node_job = "job-held", .node_slots = 1024, .node_timeout_ms = 300};
  lade__cache_t *c = NULL;
  CHECK_OK(lade__cache_open(&c, &o));
  if (!c) return;
  CHECK_OK(put(c, 1));
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    lade__cache_t *d = NULL;
    if (lade__cache_open(&d, &o) == 0) lade__shmcache_hold_lock_for_test(d);
    char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(1);
    pause(); /* alive, holding it */
    _exit(0);
  }
  char one = 0;
  CHECK(read(ready[0], &one, 1) == 1);
  lade__buf_t b = {0};
  double t0 = lade__now();
  CHECK(lade__cache_get(c, 1, &b) != 0);
  double waited = lade__now() - t0;
  t0 = lade__now();
  CHECK(lade__cache_get(c, 1, &b) != 0);
  CHECK(!lade__cache_contains(c, 1));
  double again = lade__now() - t0;
  fprintf(stderr, "  the first call waited %.2f s, the later ones %.4f s\n", waited, again);
  CHECK(waited >= 0.25 && waited < 3.0 && again < 0.05);
  lade__cache_close(c); /* the holder still holds the lock: close cannot take it (one more bounded wait) to
                         * remove the segment; once the holder dies, the next open does (stale) */
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(ready[0]);
  close(ready[1]);
  lade__buf_free(&b);
  o.node_job = "job-held-next";
  CHECK_OK(lade__cache_open(&c, &o));
  lade__cache_stats_t cs;
  lade__cache_stats(c, &cs);
  CHECK(cs.stale_segments == 1);
  lade__cache_close(c);
  CHECK(segments() == 0);
}

/* Plan mode under four processes at once: each puts and evicts its own keys
 * (k % 4 == its number) in a cache that holds about half of them, so records
 * keep moving forward while the others read any key, in copies and in place;
 * every hit is the put's bytes, next to no put is refused while there is
 * room (3 in 620,000 before the put waited for a copy in progress at the
 * tail), and every process's live keys are there at the end. */
static void test_plan_mode_concurrent(void) {
  enum { P = 4, KEYS = 400 };
  uint64_t cap = 0;
  for (uint64_t k = 0; k < KEYS / 2; k++) cap += lade__shmcache_charge(plen(k));
  lade__cache_t *c = open_plan("job-plan-conc", cap * 3 / 2);
  CHECK(c != NULL);
  if (!c) return;
  pid_t pids[P];
  for (int p = 0; p < P; p++) {
    pids[p] = fork();
    if (pids[p] != 0) continue;
    lade__cache_t *d = open_plan("job-plan-conc", cap * 3 / 2);
    int bad = !d;
    bool in[KEYS] = {false};
    uint64_t used = 0, rng = 0x9e3779b97f4a7c15ull * (uint64_t)(p + 1);
    lade__buf_t b = {0};
    double t_end = lade__now() + 1.5;
    while (d && !bad && lade__now() < t_end) {
      rng = lade__mix64(rng);
      uint64_t k = (rng % (KEYS / P)) * P + (uint64_t)p, ch = lade__shmcache_charge(plen(k));
      if (in[k]) {
        bad |= !lade__cache_evict(d, k);
        in[k] = false;
        used -= ch;
      } else if (used + ch <= cap / P) { /* its quarter of the live budget: refused only when a copy at the tail
                                           * outlasted the put's wait (a descheduled writer: rare, counted) */
        bad |= put(d, k) != 0;
        in[k] = lade__cache_contains(d, k);
        if (in[k]) used += ch;
      }
      uint64_t r = lade__mix64(rng) % KEYS; /* anyone's key: a hit is its bytes */
      if (lade__cache_get(d, r, &b) == 0) bad |= !pok(r, &b);
      const void *v = NULL;
      size_t n = 0;
      uint64_t tok = 0;
      if (lade__cache_view(d, r, 0, &v, &n, &tok) == 0) {
        lade__buf_t vb = {.data = (uint8_t *)v, .len = n};
        bool same = pok(r, &vb);
        bad |= lade__cache_view_ok(d, tok) && !same;
      }
    }
    for (uint64_t k = (uint64_t)p; d && k < KEYS; k += P) bad |= (lade__cache_get(d, k, &b) == 0) != in[k];
    lade__buf_free(&b);
    lade__cache_close(d);
    _exit(bad);
  }
  int all_ok = 1;
  for (int p = 0; p < P; p++) {
    int st = -1;
    waitpid(pids[p], &st, 0);
    all_ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(c, &ns);
  fprintf(stderr, "  %llu puts, %llu moved forward, %llu refused, %llu corrupt\n", (unsigned long long)ns.inserts,
          (unsigned long long)ns.moved, (unsigned long long)ns.rejected, (unsigned long long)ns.corrupt);
  CHECK(all_ok);
  CHECK(ns.moved > 0 && ns.rejected * 1000 <= ns.inserts && ns.corrupt == 0);
  lade__cache_close(c);
}

/* Plan mode's step marks: a rank waits for the others' marks, bounded. */
static void test_step_marks(void) {
  lade__cache_t *c = open_plan("job-marks", 1 << 16);
  CHECK(c != NULL);
  if (!c) return;
  lade__shmcache_mark_step(c, 0, 5);
  uint32_t late = 99;
  CHECK_EQ_INT(lade__shmcache_wait_steps(c, 2, 5, 50, &late), LADE_ETIMEOUT);
  CHECK_EQ_INT(late, 1);
  pid_t pid = fork();
  if (pid == 0) {
    lade__cache_t *d = open_plan("job-marks", 1 << 16);
    usleep(100000);
    if (d) lade__shmcache_mark_step(d, 1, 6);
    lade__cache_close(d);
    _exit(d ? 0 : 1);
  }
  CHECK_OK(lade__shmcache_wait_steps(c, 2, 5, 5000, &late));
  CHECK_EQ_INT(lade__shmcache_step_of(c, 1), 6);
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  lade__cache_close(c);
}

/* Two processes of one job: one copy; a put by one is a hit for the other. */
static void test_one_copy_two_processes(void) {
  lade__cache_t *c = open_node("job-one", 1 << 20, NULL);
  CHECK(c != NULL);
  for (uint64_t k = 0; k < 50; k++) CHECK_OK(put(c, k));
  pid_t pid = fork();
  if (pid == 0) {
    lade__cache_t *d = open_node("job-one", 1 << 20, NULL);
    int bad = !d;
    lade__buf_t b = {0};
    for (uint64_t k = 0; d && k < 50; k++) bad |= lade__cache_get(d, k, &b) != 0 || !pok(k, &b);
    for (uint64_t k = 50; d && k < 60; k++) bad |= put(d, k) != 0;
    lade__buf_free(&b);
    lade__cache_close(d);
    _exit(bad);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  lade__buf_t b = {0};
  for (uint64_t k = 0; k < 60; k++) CHECK(lade__cache_get(c, k, &b) == 0 && pok(k, &b));
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(c, &ns);
  uint64_t want = 0;
  for (uint64_t k = 0; k < 60; k++) want += lade__shmcache_charge(plen(k));
  CHECK(ns.entries == 60 && ns.used == want && ns.attached == 1);
  CHECK(segments() == 1);
  lade__buf_free(&b);
  lade__cache_close(c);
  CHECK(segments() == 0); /* the last one out removed it */
}

/* Four processes put and get random keys in a cache of ~30 entries (constant
 * eviction and wrapping); each verifies every hit. The parent SIGKILLs one
 * at random moments and starts another; at the end every hit of every
 * survivor was the put's bytes and used never exceeded the capacity. */
static void test_torture_with_kills(void) {
  uint64_t cap = 30 * 1200;
  lade__cache_t *c = open_node("job-torture", cap, NULL);
  CHECK(c != NULL);
  enum { N = 4, ROUNDS = 12 };
  pid_t run[N + ROUNDS];
  int nrun = 0, bad = 0, killed = 0;
  for (int round = 0; round <= ROUNDS; round++) {
    for (int i = 0; i < (round ? 1 : N); i++) { /* N to start with, then one more each round */
      pid_t pid = fork();
      if (pid == 0) {
        lade__cache_t *d = open_node("job-torture", cap, NULL);
        if (!d) _exit(3);
        lade__buf_t b = {0};
        uint64_t x = (uint64_t)getpid() * 0x9e37ull;
        int wrong = 0;
        double t_end = lade__now() + 0.3;
        while (lade__now() < t_end) {
          uint64_t k = (x = lade__mix64(x)) % 64;
          if ((x >> 40) & 1) {
            if (put(d, k)) wrong = 2;
          } else if ((x >> 41) & 1) { /* a view: bytes checked in place, kept only when still valid */
            const void *p;
            size_t n;
            uint64_t tok;
            if (lade__cache_view(d, k, 0, &p, &n, &tok) == 0) {
              lade__buf_t v = {.data = (uint8_t *)p, .len = n};
              bool same = pok(k, &v);
              if (lade__cache_view_ok(d, tok) && !same) wrong = 5;
            }
          } else if (lade__cache_get(d, k, &b) == 0 && !pok(k, &b)) {
            wrong = 1;
          }
          lade__node_cache_stats_t s;
          if (((x >> 20) & 255) == 0) {
            lade__shmcache_node_stats(d, &s);
            if (s.used > s.capacity) wrong = 4;
          }
        }
        lade__buf_free(&b);
        lade__cache_close(d);
        _exit(wrong);
      }
      run[nrun++] = pid;
    }
    if (round == ROUNDS) break;
    struct timespec ts = {0, (long)(lade__mix64((uint64_t)round) % 150) * 1000000L};
    nanosleep(&ts, NULL);
    pid_t victim = run[nrun - 1 - round % 2]; /* the newest or the one before: both still run */
    kill(victim, SIGKILL);
  }
  for (int i = 0; i < nrun; i++) {
    int st;
    waitpid(run[i], &st, 0);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) killed++;
    else if (!WIFEXITED(st) || WEXITSTATUS(st)) bad = WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(killed >= 6);
  lade__buf_t b = {0};
  for (uint64_t k = 0; k < 64; k++) CHECK(lade__cache_get(c, k, &b) != 0 || pok(k, &b));
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(c, &ns);
  CHECK(ns.used <= ns.capacity && ns.corrupt == 0);
  if (ns.used > ns.capacity || ns.corrupt)
    printf("  used %llu of %llu, %llu corrupt\n", (unsigned long long)ns.used, (unsigned long long)ns.capacity,
           (unsigned long long)ns.corrupt);
  printf("  %d processes killed, %llu lock recoveries, %llu hits, %llu misses, %llu inserts, %llu rejected, "
         "%llu evictions\n", killed, (unsigned long long)ns.recovered, (unsigned long long)ns.hits,
         (unsigned long long)ns.misses, (unsigned long long)ns.inserts, (unsigned long long)ns.rejected,
         (unsigned long long)ns.evictions);
  lade__buf_free(&b);
  lade__cache_close(c);
  CHECK(segments() == 0);
}

/* A process that dies holding the lock: the next locker empties the cache
 * (EOWNERDEAD) and everyone goes on. */
static void test_owner_dead(void) {
  lade__cache_t *c = open_node("job-dead", 1 << 20, NULL);
  for (uint64_t k = 0; k < 20; k++) CHECK_OK(put(c, k));
  pid_t pid = fork();
  if (pid == 0) {
    lade__cache_t *d = open_node("job-dead", 1 << 20, NULL);
    if (d) lade__shmcache_hold_lock_for_test(d);
    _exit(d ? 0 : 1); /* dies holding it */
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  lade__buf_t b = {0};
  CHECK_EQ_INT(lade__cache_get(c, 3, &b), LADE_ENOENT); /* emptied, not torn */
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(c, &ns);
  CHECK(ns.recovered == 1 && ns.entries == 0 && ns.used == 0);
  CHECK_OK(put(c, 3));
  CHECK(lade__cache_get(c, 3, &b) == 0 && pok(3, &b));
  lade__buf_free(&b);
  lade__cache_close(c);
}

/* A killed job's segment is removed by the next open of any job; a live
 * one is never. */
static void test_stale_and_live(void) {
  lade__cache_t *live = open_node("job-live", 1 << 16, NULL);
  int ready[2];
  CHECK_OK(pipe(ready));
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    lade__cache_t *d = open_node("job-killed", 1 << 16, NULL);
    if (d) put(d, 1);
    char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  /* killed once its segment is whole: a creator killed before its header
   * is written leaves a file that is stale only after STALE_EMPTY_S (a
   * loaded machine made that window, polling segments(), a CI flake) */
  char got = 0;
  CHECK(read(ready[0], &got, 1) == 1 && got == 1);
  close(ready[0]);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK(segments() == 2); /* its segment outlives it */
  int rc;
  lade__cache_t *next = open_node("job-next", 1 << 16, &rc);
  CHECK_OK(rc);
  lade__cache_stats_t s;
  lade__cache_stats(next, &s);
  CHECK(s.stale_segments == 1);
  CHECK(segments() == 2); /* job-live's and job-next's */
  lade__buf_t b = {0};
  CHECK_OK(put(live, 7));
  CHECK(lade__cache_get(live, 7, &b) == 0 && pok(7, &b));
  CHECK_EQ_INT(lade__cache_get(next, 7, &b), LADE_ENOENT); /* two jobs share nothing */
  lade__buf_free(&b);
  lade__cache_close(next);
  lade__cache_close(live);
  CHECK(segments() == 0);
}

/* The state letter of pid (field 3 of /proc/PID/stat) once it is one of
 * `want` (polled up to 5 s), else the last one read (0: none). */
static char state_of(pid_t pid, const char *want) {
  char path[64], buf[512], st = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  for (int i = 0; i < 5000; i++) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    char *s = strrchr(buf, ')');
    st = s && s[1] == ' ' ? s[2] : 0;
    if (st && strchr(want, st)) break;
    usleep(1000);
  }
  return st;
}

/* Forks a process that opens `job`, puts key 1 and says so on the pipe it
 * returns the read end of, then runs `then`. */
static pid_t start_holder(const char *job, void (*then)(lade__cache_t *, int), int *said) {
  int ready[2];
  CHECK_OK(pipe(ready));
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    lade__cache_t *d = open_node(job, 1 << 16, NULL);
    if (!d || put(d, 1)) _exit(1);
    then(d, ready[1]);
    _exit(0);
  }
  close(ready[1]);
  char got = 0;
  CHECK(read(ready[0], &got, 1) == 1 && got == 1);
  *said = ready[0];
  return pid;
}

static void say_and_exit(lade__cache_t *d, int fd) {
  (void)d;
  char one = 1;
  if (write(fd, &one, 1) != 1) _exit(1);
  _exit(0); /* no close: its segment stays, as a killed rank's does */
}

/* A job whose processes are zombies (exited, never reaped: a PID 1 that
 * does not reap, in a container without --init) is a killed job: the next
 * open removes its segment (issue 29, finding 4). The zombie is made on
 * purpose: this process does not wait for its child until the end. */
static void test_zombie_is_dead(void) {
  int said;
  pid_t pid = start_holder("job-zombie", say_and_exit, &said);
  close(said);
  CHECK_EQ_INT(state_of(pid, "Z"), 'Z'); /* a zombie now: kill(pid, 0) still succeeds */
  CHECK(kill(pid, 0) == 0);
  CHECK(segments() == 1);
  int rc;
  lade__cache_t *next = open_node("job-next", 1 << 16, &rc);
  CHECK_OK(rc);
  lade__cache_stats_t st;
  lade__cache_stats(next, &st);
  CHECK_EQ_INT(st.stale_segments, 1); /* the zombie's, removed */
  CHECK(segments() == 1);              /* job-next's alone */
  lade__cache_close(next);
  CHECK(segments() == 0);
  waitpid(pid, NULL, 0);
}

static int g_go[2]; /* test_leader_exited_threads_run: the parent's word to go on */
static lade__cache_t *g_held;

static void *wait_then_close(void *arg) {
  (void)arg;
  char go;
  if (read(g_go[0], &go, 1) != 1) _exit(1);
  lade__cache_close(g_held);
  _exit(0);
}

static void main_thread_exits(lade__cache_t *d, int fd) {
  g_held = d;
  pthread_t t;
  if (pthread_create(&t, NULL, wait_then_close, NULL)) _exit(1);
  char one = 1;
  if (write(fd, &one, 1) != 1) _exit(1);
  pthread_exit(NULL); /* /proc/PID/stat says Z from now on; its other thread runs on */
}

/* A process whose main thread exited while another runs on (pthread_exit in
 * main; also a process in the midst of exiting) shows state Z in
 * /proc/PID/stat, the leader thread's state: it lives, and so does its
 * segment. The earlier zombie test (state Z alone) took it for dead. */
static void test_leader_exited_threads_run(void) {
  int said;
  CHECK_OK(pipe(g_go));
  pid_t pid = start_holder("job-leader", main_thread_exits, &said);
  CHECK_EQ_INT(state_of(pid, "Z"), 'Z');
  int rc;
  lade__cache_t *next = open_node("job-next", 1 << 16, &rc);
  CHECK_OK(rc);
  lade__cache_stats_t st;
  lade__cache_stats(next, &st);
  CHECK_EQ_INT(st.stale_segments, 0);
  CHECK(segments() == 2);
  lade__cache_t *same = open_node("job-leader", 1 << 16, &rc); /* the same job: its entry is there */
  CHECK_OK(rc);
  lade__buf_t b = {0};
  CHECK(lade__cache_get(same, 1, &b) == 0 && pok(1, &b));
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(same, &ns);
  CHECK_EQ_INT(ns.attached, 2);
  /* go on: its thread closes (not the last out) and the process ends */
  char one = 1;
  CHECK(write(g_go[1], &one, 1) == 1);
  int wst;
  waitpid(pid, &wst, 0);
  CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
  lade__shmcache_node_stats(same, &ns);
  CHECK_EQ_INT(ns.attached, 1);
  close(said);
  close(g_go[0]);
  close(g_go[1]);
  lade__buf_free(&b);
  lade__cache_close(same);
  lade__cache_close(next);
  CHECK(segments() == 0);
}

/* A process stopped (SIGSTOP: a debugger, a scheduler's suspend) while it
 * holds the lock halfway through a put (the test hook
 * LADE_TEST_HOOK_STOP_IN_NODE_LOCK places the stop): another process's call
 * waits peer_timeout_ms at most and fails (that process reads from storage
 * from then on), an open fails as long, clearly; once resumed the stopped
 * put ends and every entry is its put's bytes, nothing recovered. */
static void test_stopped_holding_the_lock(void) {
  lade__cache_opts_t o = {.ns = "test://node", .capacity = 1 << 16, .policy = LADE__CACHE_FIFO,
                          .node_dir = g_dir, .node_job = "job-stop", .node_slots = 1024, .node_timeout_ms = 300};
  lade__cache_t *c = NULL;
  CHECK_OK(lade__cache_open(&c, &o));
  if (!c) return;
  for (uint64_t k = 0; k < 10; k++) CHECK_OK(put(c, k));
  pid_t pid = fork();
  if (pid == 0) {
    setenv("LADE_TEST_HOOK_STOP_IN_NODE_LOCK", "2", 1);
    lade__cache_t *d = NULL;
    int bad = lade__cache_open(&d, &o) != 0 || put(d, 20) != 0 || put(d, 21) != 0; /* stops in its second put */
    lade__buf_t b = {0};
    for (uint64_t k = 0; !bad && k < 22; k++) bad |= (k < 10 || k >= 20) && (lade__cache_get(d, k, &b) || !pok(k, &b));
    lade__buf_free(&b);
    lade__cache_close(d);
    _exit(bad);
  }
  int wst;
  CHECK(waitpid(pid, &wst, WUNTRACED) == pid && WIFSTOPPED(wst));
  CHECK_EQ_INT(state_of(pid, "T"), 'T');
  lade__buf_t b = {0};
  double t0 = lade__now();
  CHECK_EQ_INT(lade__cache_get(c, 1, &b), LADE_ETIMEOUT);
  double waited = lade__now() - t0;
  CHECK(strstr(lade_last_error(), "peer_timeout_ms") != NULL);
  t0 = lade__now();
  CHECK_EQ_INT(lade__cache_put(c, 30, "x", 1), LADE_ETIMEOUT); /* at once from now on */
  double again = lade__now() - t0;
  int rc;
  t0 = lade__now();
  lade__cache_t *late = NULL; /* an open (a rank that starts now) fails as clearly */
  rc = lade__cache_open(&late, &o);
  double opened = lade__now() - t0;
  CHECK(late == NULL && rc == LADE_ETIMEOUT);
  fprintf(stderr, "  a call waited %.2f s, the next %.4f s, an open %.2f s\n", waited, again, opened);
  CHECK(waited >= 0.25 && waited < 3.0 && again < 0.05 && opened >= 0.25 && opened < 3.0);
  kill(pid, SIGCONT);
  waitpid(pid, &wst, 0);
  CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
  lade__cache_t *after = NULL; /* a fresh handle: every entry the put's bytes, the stopped put's too */
  CHECK_OK(lade__cache_open(&after, &o));
  for (uint64_t k = 0; after && k < 22; k++)
    CHECK_EQ_INT(lade__cache_get(after, k, &b) == 0 && pok(k, &b), k < 10 || k >= 20);
  lade__node_cache_stats_t ns;
  if (after) lade__shmcache_node_stats(after, &ns);
  CHECK(after && ns.entries == 12 && ns.recovered == 0 && ns.corrupt == 0);
  lade__buf_free(&b);
  lade__cache_close(c); /* out without the lock it no longer takes */
  lade__cache_close(after); /* the last out: removes it */
  CHECK(segments() == 0);
}

/* Forks another process of `job` that says when it is about to ask, then
 * claim-gets key. It exits 0 when it got `want` (len bytes) without
 * claiming, no sooner than min_s after it said so (else it prints why).
 * Returns once it has said so: the caller's count starts from there, so a
 * slow fork or open (ASan on a loaded 2-core CI machine took over 0.3 s)
 * cannot let the caller's put come first. */
static pid_t start_waiter(const char *job, uint64_t capacity, uint64_t key, const uint8_t *want, size_t len,
                          double min_s) {
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    lade__cache_t *d = open_node(job, capacity, NULL);
    lade__buf_t bb = {0};
    bool cl = true;
    double t0 = lade__now();
    char one = 1;
    int bad = write(ready[1], &one, 1) != 1;
    int rc = d ? lade__cache_get_claim(d, key, 0, &bb, &cl) : -1;
    double took = lade__now() - t0;
    if (rc != 0 || cl || bb.len != len || memcmp(bb.data, want, len) != 0 || took < min_s) {
      fprintf(stderr, "  waiter: rc %d, claimed %d, %zu bytes, after %.3f s\n", rc, (int)cl, bb.len, took);
      bad = 1;
    }
    lade__buf_free(&bb);
    lade__cache_close(d);
    _exit(bad);
  }
  close(ready[1]);
  char one = 0;
  CHECK(read(ready[0], &one, 1) == 1);
  close(ready[0]);
  return pid;
}

static void reap_ok(pid_t pid) {
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Single flight: a miss claims the sample; another process's miss of it
 * waits for the claimer's put and hits (no second storage read); a claimer
 * that dies is taken over at once, not after the timeout. */
static void test_claim_waits_for_the_load(void) {
  lade__cache_t *c = open_node("job-claim", 1 << 20, NULL);
  lade__buf_t b = {0};
  bool claimed = false;
  CHECK_EQ_INT(lade__cache_get_claim(c, 5, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  uint8_t want[4096];
  pfill(5, want, plen(5));
  /* it waits for the put, 0.5 s after it asked */
  pid_t pid = start_waiter("job-claim", 1 << 20, 5, want, plen(5), 0.4);
  usleep(500000);
  CHECK_OK(put(c, 5)); /* ends the claim */
  reap_ok(pid);
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(c, &ns);
  CHECK(ns.waited == 1);
  /* a claimer that dies: the next one takes the claim over without waiting out the timeout */
  pid = fork();
  if (pid == 0) {
    lade__cache_t *d = open_node("job-claim", 1 << 20, NULL);
    lade__buf_t bb = {0};
    bool cl = false;
    int rc = d ? lade__cache_get_claim(d, 9, 0, &bb, &cl) : -1;
    _exit(rc == LADE_ENOENT && cl ? 0 : 1); /* dies holding the claim */
  }
  reap_ok(pid);
  double t0 = lade__now();
  CHECK_EQ_INT(lade__cache_get_claim(c, 9, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed && lade__now() - t0 < 1.0);
  /* released (the read failed): the next miss claims again */
  lade__cache_release(c, 9);
  CHECK_EQ_INT(lade__cache_get_claim(c, 9, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  CHECK_OK(put(c, 9));
  CHECK(lade__cache_get_claim(c, 9, 0, &b, &claimed) == 0 && !claimed && pok(9, &b));
  lade__buf_free(&b);
  lade__cache_close(c);
}

/* A claim-get that comes while the claimer's put is copying the bytes in
 * (the entry is WRITING) waits for them too: a miss there would be a second
 * storage read of a sample that is a few microseconds from the cache. The
 * 16 MiB payload keeps the copy long against the waiter's 0.2 ms polls. */
static void test_claim_waits_for_the_copy(void) {
  enum { BIG = 16 << 20 };
  lade__cache_t *c = open_node("job-copy", (uint64_t)BIG * 2, NULL);
  CHECK(c != NULL);
  if (!c) return;
  uint8_t *p = malloc(BIG);
  CHECK(p != NULL);
  for (size_t i = 0; i < BIG; i++) p[i] = (uint8_t)(i * 131 + (i >> 13));
  lade__buf_t b = {0};
  bool claimed = false;
  CHECK_EQ_INT(lade__cache_get_claim(c, 3, 0, &b, &claimed), LADE_ENOENT);
  CHECK(claimed);
  pid_t pid = start_waiter("job-copy", (uint64_t)BIG * 2, 3, p, BIG, 0);
  usleep(100000);
  CHECK_OK(lade__cache_put(c, 3, p, BIG));
  reap_ok(pid);
  free(p);
  lade__buf_free(&b);
  lade__cache_close(c);
}

/* A hit seen in place: the entry's bytes in the segment; view_ok says
 * whether they stayed its bytes (false once puts reused them). */
static void test_view_in_place(void) {
  lade__cache_t *c = open_node("job-view", 8 * 1200, NULL);
  CHECK_OK(put(c, 1));
  const void *p = NULL;
  size_t n = 0;
  uint64_t tok = 0;
  CHECK_OK(lade__cache_view(c, 1, 0, &p, &n, &tok));
  lade__buf_t b = {.data = (uint8_t *)p, .len = n};
  CHECK(pok(1, &b));
  CHECK(lade__cache_view_ok(c, tok));
  CHECK_EQ_INT(lade__cache_view(c, 1, 7, &p, &n, &tok), LADE_ENOENT); /* another version */
  CHECK_OK(lade__cache_view(c, 1, 0, &p, &n, &tok));
  for (uint64_t k = 100; k < 120; k++) CHECK_OK(put(c, k)); /* the ring turns: key 1's bytes are reused */
  CHECK(!lade__cache_view_ok(c, tok));
  CHECK_EQ_INT(lade__cache_view(c, 1, 0, &p, &n, &tok), LADE_ENOENT);
  lade__node_cache_stats_t ns;
  lade__shmcache_node_stats(c, &ns);
  CHECK(ns.hits == 1); /* only the view that stayed valid */
  lade__cache_close(c);
}

/* More than the tmpfs has: an error naming the setting, at open. */
static void test_too_big(void) {
  int rc;
  lade__cache_t *c = open_node("job-big", (uint64_t)1 << 50, &rc);
  CHECK(c == NULL && rc == LADE_ERANGE);
  CHECK(strstr(lade_last_error(), "cache_mem_bytes") && strstr(lade_last_error(), "node_cache=off"));
  CHECK(segments() == 0);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
  snprintf(g_dir, sizeof g_dir, "%s/lade-unit-%d", base ? base : lade_test_tmpdir("shm"), (int)getpid());
  mkdir(g_dir, 0700);
  RUN(test_one_copy_two_processes);
  RUN(test_owner_dead);
  RUN(test_stale_and_live);
  RUN(test_zombie_is_dead);
  RUN(test_leader_exited_threads_run);
  RUN(test_stopped_holding_the_lock);
  RUN(test_too_big);
  RUN(test_claim_waits_for_the_load);
  RUN(test_claim_waits_for_the_copy);
  RUN(test_view_in_place);
  RUN(test_torture_with_kills);
  RUN(test_plan_mode);
  RUN(test_plan_mode_concurrent);
  RUN(test_step_marks);
  RUN(test_lock_held_too_long);
  rmdir(g_dir);
  return lade_test_finish();
}
