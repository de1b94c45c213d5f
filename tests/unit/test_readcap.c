/* test_readcap.c - max_sample_bytes on local files: a huge file
 * named like a sample (here a 3 GiB sparse .jpg) fails at once naming the
 * file and both sizes, instead of being read whole into memory first. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"
#include "lade/lade.h"
#include "source/source.h"

static void write_file(const char *path, off_t size, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  if (text) CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  if (size) CHECK(ftruncate(fd, size) == 0); /* sparse: no disk, no time */
  close(fd);
}

/* Opens the dir source on root with extra settings; returns the source. */
static int open_dir(lade__source_t *s, const char *root, const char *setting) {
  lade_config_t *cfg = NULL;
  CHECK_OK(lade_config_create(&cfg));
  char kv[4200];
  snprintf(kv, sizeof kv, "source=%s", root);
  CHECK_OK(lade_config_parse(cfg, kv));
  CHECK_OK(lade_config_parse(cfg, "transform=raw"));
  if (setting) CHECK_OK(lade_config_parse(cfg, setting));
  memset(s, 0, sizeof *s);
  s->ops = &lade__source_dir;
  int rc = s->ops->open(s, cfg);
  lade_config_destroy(cfg);
  return rc;
}

static uint64_t index_of(lade__source_t *s, const char *name) {
  char buf[4200];
  for (uint64_t i = 0; i < s->count; i++) {
    s->ops->describe(s, i, buf, sizeof buf);
    if (strstr(buf, name)) return i;
  }
  return UINT64_MAX;
}

static void test_huge_sparse_jpg(void) {
  const char *root = lade_test_tmpdir("readcap");
  char path[4200];
  snprintf(path, sizeof path, "%s/big.jpg", root);
  write_file(path, (off_t)3 << 30, NULL);
  snprintf(path, sizeof path, "%s/small.jpg", root);
  write_file(path, 0, "ten bytes!");
  lade__source_t s;
  CHECK_OK(open_dir(&s, root, NULL)); /* default max_sample_bytes: 1 GiB */
  lade__buf_t buf = {0};
  uint64_t big = index_of(&s, "big.jpg"), small = index_of(&s, "small.jpg");
  CHECK(big != UINT64_MAX && small != UINT64_MAX);
  CHECK_EQ_INT(s.ops->read(&s, big, &buf), LADE_ERANGE);
  char want[4300];
  snprintf(want, sizeof want, "%s/big.jpg: 3221225472 bytes, more than max_sample_bytes (1073741824); not read", root);
  CHECK(strcmp(lade_last_error(), want) == 0);
  CHECK(buf.cap < (1u << 20)); /* nothing was allocated for it */
  CHECK_OK(s.ops->read(&s, small, &buf));
  CHECK_EQ_INT(buf.len, 10);
  CHECK(memcmp(buf.data, "ten bytes!", 10) == 0);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  CHECK(ru.ru_maxrss < 1024 * 1024); /* KiB: far below the 3 GiB file */
  s.ops->close(&s);

  /* a lower limit: a file just over it fails, one at it is read */
  CHECK_OK(open_dir(&s, root, "max_sample_bytes=9"));
  CHECK_EQ_INT(s.ops->read(&s, index_of(&s, "small.jpg"), &buf), LADE_ERANGE);
  CHECK(strstr(lade_last_error(), "small.jpg: 10 bytes, more than max_sample_bytes (9)") != NULL);
  s.ops->close(&s);
  CHECK_OK(open_dir(&s, root, "max_sample_bytes=10"));
  CHECK_OK(s.ops->read(&s, index_of(&s, "small.jpg"), &buf));
  CHECK_EQ_INT(buf.len, 10);
  s.ops->close(&s);
  lade__buf_free(&buf);
  lade_test_sh("rm -rf '%s'", root);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_huge_sparse_jpg);
  return lade_test_finish();
}
