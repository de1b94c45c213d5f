/* harness.h - a tiny assertion harness for unit tests. Each test file defines
 * main() calling RUN(test_fn) for every test; a failed CHECK prints the
 * expression, file and line and the test counts as failed. The final line is
 * "N passed, N failed" so CI reads the result. */
#ifndef LADE_HARNESS_H
#define LADE_HARNESS_H
#include <stdio.h>
#include <stdint.h>

extern int lade_test_failed_checks;
void lade_test_run(const char *name, void (*fn)(void));
int lade_test_finish(void);
/* A fresh, empty directory for this test process: LADE_TEST_TMP/<name>-<pid>. */
const char *lade_test_tmpdir(const char *name);
/* Runs a shell command, returns its exit status. */
int lade_test_sh(const char *fmt, ...);

#define RUN(fn) lade_test_run(#fn, fn)
#define CHECK(expr)                                                          \
  do {                                                                       \
    if (!(expr)) {                                                           \
      fprintf(stderr, "  CHECK failed: %s (%s:%d)\n", #expr, __FILE__, __LINE__); \
      lade_test_failed_checks++;                                             \
    }                                                                        \
  } while (0)
#define CHECK_EQ_INT(a, b)                                                                    \
  do {                                                                                        \
    long long _a = (long long)(a), _b = (long long)(b);                                       \
    if (_a != _b) {                                                                           \
      fprintf(stderr, "  CHECK failed: %s == %s (%lld vs %lld) (%s:%d)\n", #a, #b, _a, _b, __FILE__, \
              __LINE__);                                                                      \
      lade_test_failed_checks++;                                                              \
    }                                                                                         \
  } while (0)
#define CHECK_OK(expr)                                                                        \
  do {                                                                                        \
    int _rc = (expr);                                                                         \
    if (_rc != 0) {                                                                           \
      fprintf(stderr, "  CHECK failed: %s returned %d: %s (%s:%d)\n", #expr, _rc, lade_last_error(), \
              __FILE__, __LINE__);                                                            \
      lade_test_failed_checks++;                                                              \
    }                                                                                         \
  } while (0)
#endif
