/* test_allocfail.c - the allocation-failure run (curl's torture idea).
 *
 * Every allocation lade's own code makes (malloc, calloc, realloc,
 * posix_memalign in liblade's objects) goes through the wrappers below: the
 * test links with -Wl,--wrap=..., which rebinds exactly the calls made from
 * the objects linked into this executable, not libc's or libjpeg's own. A
 * scenario that touches every module (listing, plan, memory and disk cache
 * tiers, JPEG decode, npy, seek, stats) is first run once to count its
 * allocations, T; then, for every N in 1..T, a fresh process runs it with
 * the Nth allocation failing. Each must end either as if nothing happened
 * (some allocations are optional: a cache put, per-epoch counters) or with
 * LADE_ENOMEM and a message saying so; never a crash, a hang, another error
 * code, or (in the sanitizer build) a leak.
 *
 * Threads make the order of allocations vary a little between runs, so "the
 * Nth" is not always the same call; across all N every allocation site the
 * scenario reaches is hit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/npyfmt.h"
#include "harness.h"
#include "lade/lade.h"

extern char **environ;

/* ------------------------------------------------------------ the hook */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);

static atomic_bool counting;
static atomic_long allocs;
static long fail_at = -1;

static int fail_now(void) {
  if (!atomic_load_explicit(&counting, memory_order_relaxed)) return 0;
  return atomic_fetch_add(&allocs, 1) + 1 == fail_at;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
  return fail_now() ? ENOMEM : __real_posix_memalign(p, a, n);
}

/* ------------------------------------------------------------ scenario */

static char npy_dir[4096], jpg_dir[4096], cache_dir[4200];

static void make_data(void) {
  snprintf(npy_dir, sizeof npy_dir, "%s", lade_test_tmpdir("allocfail-npy"));
  snprintf(jpg_dir, sizeof jpg_dir, "%s", lade_test_tmpdir("allocfail-jpg"));
  lade_test_sh("%s gen npy %s/d --count 24 --shape 4,4 >/dev/null", LADE_CLI, npy_dir);
  lade_test_sh("%s gen jpeg %s/d --count 12 >/dev/null", LADE_CLI, jpg_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", npy_dir);
}

static int run_loader(const char *const *kv) {
  lade_config_t *c = NULL;
  int rc = lade_config_create(&c);
  for (int i = 0; !rc && kv[i]; i++) rc = lade_config_parse(c, kv[i]);
  lade_loader_t *L = NULL;
  if (!rc) rc = lade_loader_create(&L, c);
  lade_config_destroy(c);
  lade_batch_t *keep = NULL, *b = NULL;
  for (int n = 0; !rc; n++) {
    rc = lade_loader_next(L, &b);
    if (rc || !b) break;
    if (n == 3 && !keep) {
      keep = b; /* hold one: the pool grows past prefetch + 1 */
      continue;
    }
    lade_batch_release(b);
    if (n == 5) rc = lade_loader_seek(L, 1, 1);
  }
  if (L) {
    lade_stats_t st;
    lade_epoch_stats_t es;
    if (!rc) rc = lade_loader_stats(L, &st, sizeof(lade_stats_t));
    if (!rc) (void)lade_loader_epoch_stats(L, 0, &es, sizeof(lade_epoch_stats_t));
    uint32_t classes = 0;
    char path[512];
    if (!rc) rc = lade_loader_classes(L, &classes);
    if (!rc) rc = lade_loader_sample(L, 0, path, sizeof path, NULL);
  }
  lade_batch_release(keep);
  lade_loader_destroy(L);
  return rc;
}

static int scenario(void) {
  char src[4200], cache[4300], jsrc[4200];
  snprintf(src, sizeof src, "source=%s/d", npy_dir);
  snprintf(cache, sizeof cache, "cache_dir=%s", cache_dir);
  snprintf(jsrc, sizeof jsrc, "source=%s/d", jpg_dir);
  const char *npy[] = {src, "batch_size=5", "epochs=2", "threads=2", "prefetch=1", "cache_mem_bytes=100000",
                       cache, "cache_disk_bytes=1000000", NULL};
  int rc = run_loader(npy);
  if (rc) return rc;
  const char *jpg[] = {jsrc, "transform=imagenet-train", "crop_size=32", "batch_size=4", "epochs=2", "threads=2",
                       "on_error=skip", NULL};
  rc = run_loader(jpg);
  if (rc) return rc;
  const char *eval[] = {jsrc, "transform=imagenet-eval", "crop_size=32", "resize_size=40", "batch_size=6",
                        "threads=1", NULL};
  return run_loader(eval);
}

/* ------------------------------------------------------------ driver */

/* CHILD_UNREACHED: the scenario made fewer than n allocations, so none
 * failed (the counting run can make more than a child: threads move a few,
 * and a loaded machine, ctest -j2, moved 30 of 390); not counted as
 * absorbed, which would read as allocations lade does without. */
enum { CHILD_OK = 0, CHILD_ENOMEM = 3, CHILD_OTHER = 4, CHILD_UNREACHED = 5 };

static int child(long n) {
  fail_at = n;
  atomic_store(&counting, true);
  int rc = scenario();
  atomic_store(&counting, false);
  if (rc == 0) return atomic_load(&allocs) < n ? CHILD_UNREACHED : CHILD_OK;
  if (rc == LADE_ENOMEM && strstr(lade_last_error(), "memory")) return CHILD_ENOMEM;
  fprintf(stderr, "allocation %ld failing gave %s: %s\n", n, lade_error_name(rc), lade_last_error());
  return CHILD_OTHER;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--child")) {
    snprintf(npy_dir, sizeof npy_dir, "%s", argv[2]);
    snprintf(jpg_dir, sizeof jpg_dir, "%s", argv[3]);
    snprintf(cache_dir, sizeof cache_dir, "%s/cache-%d", npy_dir, (int)getpid());
    long n = strtol(getenv("LADE_FAIL_ALLOC_AT"), NULL, 10);
    int r = child(n);
    lade_test_sh("rm -rf %s", cache_dir);
    return r;
  }
  make_data();
  /* count: one run with nothing failing, twice (a warm disk cache takes
   * another path than a cold one, and the children run both) */
  atomic_store(&counting, true);
  int rc = scenario();
  long cold = atomic_load(&allocs);
  atomic_store(&allocs, 0);
  if (!rc) rc = scenario();
  long warm = atomic_load(&allocs);
  atomic_store(&counting, false);
  if (rc) {
    fprintf(stderr, "the scenario fails with nothing failing: %s\n", lade_last_error());
    return 1;
  }
  long total = (cold > warm ? cold : warm) + 16; /* + slack: thread timing moves a few */
  long ok = 0, enomem = 0, bad = 0, unreached = 0;
  const char *only = getenv("LADE_ALLOCFAIL_MAX");
  if (only) total = strtol(only, NULL, 10);
  for (long n = 1; n <= total; n++) {
    char nb[32], *args[] = {argv[0], "--child", npy_dir, jpg_dir, NULL};
    snprintf(nb, sizeof nb, "%ld", n);
    setenv("LADE_FAIL_ALLOC_AT", nb, 1);
    /* the child's stderr goes to a file, shown only when it failed badly
     * (the pool-growth warning of the held batch is expected) */
    char errf[4300];
    snprintf(errf, sizeof errf, "%s/child.err", npy_dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int sp = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (sp != 0) {
      fprintf(stderr, "posix_spawn: %s\n", strerror(sp));
      return 1;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    bool good = WIFEXITED(st) && (WEXITSTATUS(st) == CHILD_OK || WEXITSTATUS(st) == CHILD_ENOMEM ||
                                  WEXITSTATUS(st) == CHILD_UNREACHED);
    if (!good) lade_test_sh("grep -v 'lade: warning' %s >&2", errf);
    if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_OK) {
      ok++;
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_ENOMEM) {
      enomem++;
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_UNREACHED) {
      unreached++;
    } else {
      bad++;
      if (WIFSIGNALED(st))
        fprintf(stderr, "allocation %ld failing: killed by signal %d\n", n, WTERMSIG(st));
      else
        fprintf(stderr, "allocation %ld failing: exit %d\n", n, WEXITSTATUS(st));
    }
  }
  printf("allocation-failure run: %ld allocations (cold cache %ld, warm %ld); %ld failure points: %ld gave "
         "LADE_ENOMEM, %ld were absorbed, %ld failed badly, %ld not reached by the child\n",
         cold > warm ? cold : warm, cold, warm, total, enomem, ok, bad, unreached);
  CHECK_EQ_INT(bad, 0);
  CHECK(enomem > (total - unreached) / 2); /* most allocations are needed: their failure is an error */
  printf("%s\n", lade_test_failed_checks ? "FAILED" : "ok");
  return lade_test_failed_checks ? 1 : 0;
}
