/* harness.h - a tiny assertion harness for unit tests. Each test file defines
 * main(argc, argv) calling lade_test_args(argc, argv) first and RUN(test_fn)
 * for every case; a failed CHECK prints the expression, file and line and the
 * case counts as failed. The final line is "N passed, N failed" so CI reads
 * the result. `build/tests/test_engine` runs every case,
 * `build/tests/test_engine test_interrupt test_seek_resumes_exactly` those
 * cases only, `build/tests/test_engine --list` prints the case names. */
#ifndef LADE_HARNESS_H
#define LADE_HARNESS_H
#include <stdio.h>
#include <stdint.h>

extern int lade_test_failed_checks;
/* The command line: no argument runs every case; CASE... only the cases of
 * those names (a name that matches no case fails the run, so a typo never
 * passes); --list prints each case's name and runs none. Exits with 2 on an
 * unknown option. What main() does before its first RUN runs in every mode. */
void lade_test_args(int argc, char **argv);
/* Runs fn as the case `name`, unless the command line left it out. */
void lade_test_run(const char *name, void (*fn)(void));
/* Prints the counts; returns main's exit status (1 if a case failed or a
 * named case did not exist). */
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
