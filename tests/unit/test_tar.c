/* test_tar.c - the tar source on shards written by GNU tar (the Python
 * tests use Python's tarfile): ustar, GNU and pax formats with long names,
 * the bytes and labels each sample reads back, the index reused on a second
 * open, and broken shards failing with the shard's name - under ASan with
 * leak checking, so error paths are checked for leaks too. */
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "lade/lade.h"
#include "source/source.h"

static int open_tar(lade__source_t *s, const char *source, const char *transform) {
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  snprintf(cfg.source, sizeof cfg.source, "%s", source);
  cfg.transform = strcmp(transform, "raw") == 0 ? LADE__XF_RAW : LADE__XF_IMAGENET_EVAL;
  memset(s, 0, sizeof *s);
  const lade__source_ops_t *ops = NULL;
  int rc = lade__source_select(&cfg, &ops);
  if (rc) return rc;
  if (ops != &lade__source_tar) return -100;
  s->ops = ops;
  return ops->open(s, &cfg);
}

/* Two samples per format: a long-named .bin with a .cls, and one with a
 * .jpg beside its .bin; members in the order given to tar. */
static void test_gnu_tar_formats(void) {
  const char *d = lade_test_tmpdir("formats");
  const char *fmts[] = {"ustar", "gnu", "posix"};
  for (int f = 0; f < 3; f++) {
    /* folder/key.bin is 131 bytes: ustar splits it into prefix + name, gnu
     * writes an 'L' long name, posix a pax path record */
    char dir[80], key[80];
    memset(dir, 'd', 61);
    dir[0] = 'c';
    dir[61] = '\0';
    memset(key, 'k', 60);
    snprintf(key + 60, sizeof key - 60, "%s", fmts[f]);
    CHECK_EQ_INT(lade_test_sh("cd %s && rm -rf m && mkdir -p m/%s && head -c 777 /dev/urandom > m/%s/%s.bin && "
                              "printf ' 5\\n' > m/%s/%s.cls && head -c 33 /dev/urandom > m/%s/b.bin && "
                              "printf 7 > m/%s/b.cls && cd m && tar --format=%s -cf ../%s.tar %s/%s.bin %s/%s.cls "
                              "%s/b.bin %s/b.cls",
                              d, dir, dir, key, dir, key, dir, dir, fmts[f], fmts[f], dir, key, dir, key, dir, dir),
                 0);
    char shard[512], path[1024];
    snprintf(shard, sizeof shard, "%s/%s.tar", d, fmts[f]);
    lade__source_t s;
    CHECK_OK(open_tar(&s, shard, "raw"));
    if (!s.impl) continue;
    CHECK_EQ_INT(s.count, 2);
    CHECK(s.labels && s.labels[0] == 5 && s.labels[1] == 7);
    CHECK_EQ_INT(s.classes, 8);
    CHECK(s.sizes && s.sizes[0] == 777 && s.sizes[1] == 33);
    lade__buf_t got = {0}, want = {0};
    CHECK_OK(s.ops->read(&s, 0, &got));
    snprintf(path, sizeof path, "%s/%s.bin", dir, key);
    char root[600];
    snprintf(root, sizeof root, "%s/m", d);
    int rfd = open(root, O_RDONLY | O_DIRECTORY);
    CHECK_OK(lade__read_file_at(rfd, path, root, &want));
    close(rfd);
    CHECK(got.len == want.len && memcmp(got.data, want.data, got.len) == 0);
    char name[2048], expect[2048];
    s.ops->describe(&s, 0, name, sizeof name);
    snprintf(expect, sizeof expect, "%s/%s/%s", shard, dir, key);
    CHECK(strcmp(name, expect) == 0);
    s.ops->close(&s);
    lade__buf_free(&got);
    lade__buf_free(&want);
    /* the archive really uses the format's long-name mechanism */
    const char *probe[] = {NULL, "grep -q ././@LongLink %s", "grep -q PaxHeaders %s"};
    if (f == 0)
      CHECK_EQ_INT(lade_test_sh("test $(head -c 100 %s | tr -d '\\0' | wc -c) -lt 100 && grep -q ustar %s", shard, shard), 0);
    else
      CHECK_EQ_INT(lade_test_sh(probe[f], shard), 0);
  }
}

/* The second open takes the stored index (the sidecar is not rewritten). */
static void test_index_reused(void) {
  const char *d = lade_test_tmpdir("reuse");
  CHECK_EQ_INT(lade_test_sh("cd %s && printf abc > x.bin && printf 1 > x.cls && tar -cf s.tar x.bin x.cls", d), 0);
  char shard[512], side[600];
  snprintf(shard, sizeof shard, "%s/s.tar", d);
  snprintf(side, sizeof side, "%s.ladeidx", shard);
  lade__source_t s;
  CHECK_OK(open_tar(&s, shard, "raw"));
  if (s.impl) s.ops->close(&s);
  struct stat a, b;
  CHECK(stat(side, &a) == 0);
  CHECK_OK(open_tar(&s, shard, "raw"));
  CHECK_EQ_INT(s.count, 1);
  if (s.impl) s.ops->close(&s);
  CHECK(stat(side, &b) == 0);
  CHECK(a.st_ino == b.st_ino && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec && a.st_mtim.tv_sec == b.st_mtim.tv_sec);
}

/* Broken shards fail open() naming the shard (and the member). */
static void test_broken_shards(void) {
  const char *d = lade_test_tmpdir("broken");
  CHECK_EQ_INT(lade_test_sh("cd %s && head -c 2000 /dev/zero | tr '\\0' x > a.bin && printf 1 > a.cls && "
                            "tar --format=ustar -cf good.tar a.bin a.cls && head -c 1300 good.tar > cut.tar && "
                            "cp good.tar sum.tar && printf Z | dd of=sum.tar bs=1 seek=0 conv=notrunc 2>/dev/null",
                            d),
               0);
  struct {
    const char *file, *words;
  } cases[] = {{"cut.tar", "member 'a.bin' (header at byte 0): its 2000 bytes run past the end of the file (1300 bytes)"},
               {"sum.tar", "header at byte 0 (member 'Z.bin'): bad checksum"}};
  for (int i = 0; i < 2; i++) {
    char shard[512];
    snprintf(shard, sizeof shard, "%s/%s", d, cases[i].file);
    lade__source_t s;
    CHECK_EQ_INT(open_tar(&s, shard, "raw"), LADE_EFORMAT);
    CHECK(strstr(lade_last_error(), shard) != NULL);
    CHECK(strstr(lade_last_error(), cases[i].words) != NULL);
    if (!strstr(lade_last_error(), cases[i].words)) fprintf(stderr, "  got: %s\n", lade_last_error());
    CHECK(s.impl == NULL);
  }
  /* no image member for an image transform: LADE_EEMPTY naming the shard */
  char shard[512];
  snprintf(shard, sizeof shard, "%s/good.tar", d);
  lade__source_t s;
  CHECK_EQ_INT(open_tar(&s, shard, "imagenet-eval"), LADE_EEMPTY);
  CHECK(strstr(lade_last_error(), shard) != NULL);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_gnu_tar_formats);
  RUN(test_index_reused);
  RUN(test_broken_shards);
  return lade_test_finish();
}
