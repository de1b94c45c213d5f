#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lade/lade.h"

int lade_test_failed_checks;
static int passed, failed;

void lade_test_run(const char *name, void (*fn)(void)) {
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
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
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
