#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lade/lade.h"

int lade_test_failed_checks;
static int passed, failed;

/* the command line (argv outlives main's cases); matched[i] counts runs of wanted[i] */
#define MAX_WANTED 64
static const char *wanted[MAX_WANTED];
static int n_wanted, matched[MAX_WANTED], listing;
static const char *listed[256]; /* names printed by --list (a file may RUN a case twice) */
static int n_listed;

void lade_test_args(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--list")) {
      listing = 1;
    } else if (!strcmp(argv[i], "--help") || argv[i][0] == '-') {
      fprintf(stderr, "usage: %s [--list] [CASE...]\n  no CASE: run every case; --list: print the case names\n",
              argv[0]);
      exit(strcmp(argv[i], "--help") ? 2 : 0);
    } else if (n_wanted < MAX_WANTED) {
      wanted[n_wanted++] = argv[i];
    } else {
      fprintf(stderr, "%s: more than %d case names\n", argv[0], MAX_WANTED);
      exit(2);
    }
  }
}

static int selected(const char *name) {
  if (!n_wanted) return 1;
  int hit = 0;
  for (int i = 0; i < n_wanted; i++)
    if (!strcmp(wanted[i], name)) matched[i]++, hit = 1;
  return hit;
}

void lade_test_run(const char *name, void (*fn)(void)) {
  if (listing) {
    for (int i = 0; i < n_listed; i++)
      if (!strcmp(listed[i], name)) return;
    if (n_listed < (int)(sizeof listed / sizeof *listed)) listed[n_listed++] = name;
    printf("%s\n", name);
    return;
  }
  if (!selected(name)) return;
  int before = lade_test_failed_checks;
  fprintf(stderr, "[ RUN  ] %s\n", name);
  fn();
  if (lade_test_failed_checks == before) {
    passed++;
    fprintf(stderr, "[  OK  ] %s\n", name);
  } else {
    failed++;
    fprintf(stderr, "[ FAIL ] %s\n", name);
  }
}

int lade_test_finish(void) {
  if (listing) return 0;
  int unknown = 0;
  for (int i = 0; i < n_wanted; i++)
    if (!matched[i]) {
      fprintf(stderr, "no case named %s (--list prints the names)\n", wanted[i]);
      unknown++;
    }
  printf("%d passed, %d failed\n", passed, failed + unknown);
  return failed || unknown ? 1 : 0;
}

int lade_test_sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  return rc == -1 ? -1 : (rc >> 8) & 0xff;
}

const char *lade_test_tmpdir(const char *name) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/%s-%d", LADE_TEST_TMP, name, (int)getpid());
  lade_test_sh("rm -rf '%s' && mkdir -p '%s'", path, path);
  return path;
}
