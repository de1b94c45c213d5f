/* test_labels.c - class labels from folders (source/labels.c), the one rule
 * of the dir, s3 and tar sources: the first folder of a sample's path under
 * the root is its class, classes sorted byte-wise, a path without a folder
 * -1. Checked on the rule itself, then on a dir listing and on tar shards of
 * one tree of awkward names, which must all give the same labels. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "lade/lade.h"
#include "source/labels.h"
#include "source/source.h"

/* Class folders in byte order: 'B' (0x42) before 'a', then "a" before every
 * longer name it begins, ' ' < '&' < '-' < '.' < '0', and UTF-8 "\xc3\xbc"
 * (u-umlaut) after every ASCII name. */
static const char *const classes[] = {"B", "a", "a b", "a&b'q", "a-b", "a.b", "a0", "\xc3\xbc"};
enum { NCLASSES = sizeof classes / sizeof *classes };

static const char *path_at(void *ctx, uint64_t i) { return ((const char *const *)ctx)[i]; }

static void test_folder_of_a_path(void) {
  const char *p;
  CHECK_EQ_INT(lade__label_folder("a/b/c.jpg", &p), 1);
  CHECK(p && strncmp(p, "a/", 2) == 0);
  CHECK_EQ_INT(lade__label_folder("top.jpg", &p), 0);
  CHECK_EQ_INT(lade__label_folder("", &p), 0);
  CHECK_EQ_INT(lade__label_folder("./n01/x.jpg", &p), 3); /* tar -C root -cf s.tar . */
  CHECK(strncmp(p, "n01/", 4) == 0);
  CHECK_EQ_INT(lade__label_folder("/./abs/x", &p), 3);
  CHECK(strncmp(p, "abs/", 4) == 0);
  CHECK_EQ_INT(lade__label_folder("./top.jpg", &p), 0);
  CHECK_EQ_INT(lade__label_folder("..x/y", &p), 3); /* "..x" is a name */
}

/* Paths in no particular order, one folder coming back after others. */
static void test_rule(void) {
  const char *paths[] = {"a0/z.bin",       "a/y.bin",          "top.bin",   "\xc3\xbc/u.bin", "a/sub/deep/x.bin",
                         "a.b/c/z.bin",    "a b/1.bin",        "B/2.bin",   "a-b/3.bin",      "./a&b'q/4.bin",
                         "a/again.bin",    "./loose.bin"};
  const int32_t want[] = {6, 1, -1, 7, 1, 5, 2, 0, 4, 3, 1, -1};
  enum { N = sizeof paths / sizeof *paths };
  int32_t label[N];
  memset(label, 0x55, sizeof label);
  lade__classes_t c;
  CHECK_OK(lade__labels_from_folders(N, path_at, (void *)paths, 0, label, &c, "test"));
  CHECK_EQ_INT(c.n, NCLASSES);
  for (uint32_t i = 0; i < c.n && i < NCLASSES; i++) {
    if (strcmp(c.names[i], classes[i]) != 0) fprintf(stderr, "  class %u: '%s', want '%s'\n", i, c.names[i], classes[i]);
    CHECK(strcmp(c.names[i], classes[i]) == 0);
  }
  for (int i = 0; i < N; i++) {
    if (label[i] != want[i]) fprintf(stderr, "  %s: label %d, want %d\n", paths[i], label[i], want[i]);
    CHECK_EQ_INT(label[i], want[i]);
  }
  lade__classes_free(&c);
  CHECK(c.n == 0 && !c.names && !c.arena);

  /* no folder anywhere: no classes, every label -1 */
  const char *flat[] = {"x.bin", "./y.bin"};
  CHECK_OK(lade__labels_from_folders(2, path_at, (void *)flat, 0, label, &c, "test"));
  CHECK(c.n == 0 && !c.names && label[0] == -1 && label[1] == -1);
  lade__classes_free(&c);
  CHECK_OK(lade__labels_from_folders(0, path_at, (void *)flat, 0, label, &c, "test"));
  CHECK_EQ_INT(c.n, 0);
}

static int put(const char *root, const char *rel) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')) != NULL; s++) {
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  FILE *f = fopen(p, "w");
  if (!f) return -1;
  fputs(rel, f);
  return fclose(f);
}

static int class_of(const char *name) {
  for (int i = 0; i < NCLASSES; i++) {
    size_t n = strlen(classes[i]);
    if (strncmp(name, classes[i], n) == 0 && name[n] == '/') return i;
  }
  return -1;
}

static int open_tar(lade__source_t *s, const char *source) {
  struct lade_config cfg;
  lade__config_defaults(&cfg);
  snprintf(cfg.source, sizeof cfg.source, "%s", source);
  cfg.transform = LADE__XF_RAW;
  memset(s, 0, sizeof *s);
  const lade__source_ops_t *ops = NULL;
  int rc = lade__source_select(&cfg, &ops);
  if (rc) return rc;
  if (ops != &lade__source_tar) return -100;
  s->ops = ops;
  return ops->open(s, &cfg);
}

/* Checks a tar source's labels against the class of each sample's key
 * (after `skip` leading bytes of its name). */
static void check_tar(const char *shard, size_t skip, uint64_t want_count) {
  lade__source_t s;
  CHECK_OK(open_tar(&s, shard));
  if (!s.impl) return;
  CHECK_EQ_INT(s.count, want_count);
  CHECK_EQ_INT(s.classes, NCLASSES);
  CHECK(s.labels && s.class_names);
  for (uint32_t i = 0; s.class_names && i < s.classes && i < NCLASSES; i++)
    CHECK(strcmp(s.class_names[i], classes[i]) == 0);
  for (uint64_t i = 0; s.labels && i < s.count; i++) {
    char name[2048];
    s.ops->describe(&s, i, name, sizeof name);
    const char *rel = name + strlen(shard) + 1 + skip;
    if (s.labels[i] != class_of(rel)) fprintf(stderr, "  %s: label %d\n", name, s.labels[i]);
    CHECK_EQ_INT(s.labels[i], class_of(rel));
  }
  s.ops->close(&s);
}

/* A tar shard has no root folder: its members' shared folders are the
 * root, as deep as every member keeps a folder below it. */
static void test_root_where_none_is_given(void) {
  const char *wrapped[] = {"train/n01/a.jpg", "./train/n02/b.jpg", "train/n01/sub/c.jpg"};
  CHECK_EQ_INT(lade__labels_root(3, path_at, (void *)wrapped), 6);
  const char *one[] = {"n01/a.jpg", "n01/b.jpg"}; /* one class keeps it */
  CHECK_EQ_INT(lade__labels_root(2, path_at, (void *)one), 0);
  const char *deep[] = {"x/y/z/a.jpg", "./x/y/w/b.jpg"};
  CHECK_EQ_INT(lade__labels_root(2, path_at, (void *)deep), 4);
  const char *flat[] = {"a/b/c.jpg", "a/d.jpg"}; /* a/d.jpg has no folder below a/ */
  CHECK_EQ_INT(lade__labels_root(2, path_at, (void *)flat), 0);
  const char *prefix[] = {"train/n01/a.jpg", "trains/n01/b.jpg"}; /* not a shared folder */
  CHECK_EQ_INT(lade__labels_root(2, path_at, (void *)prefix), 0);
  const char *top[] = {"a.jpg", "n01/b.jpg"};
  CHECK_EQ_INT(lade__labels_root(2, path_at, (void *)top), 0);
  int32_t label[3];
  lade__classes_t c;
  CHECK_OK(lade__labels_from_folders(3, path_at, (void *)wrapped, 6, label, &c, "test"));
  CHECK_EQ_INT(c.n, 2);
  CHECK(c.n == 2 && strcmp(c.names[0], "n01") == 0 && strcmp(c.names[1], "n02") == 0);
  CHECK(label[0] == 0 && label[1] == 1 && label[2] == 0);
  lade__classes_free(&c);
}

/* One tree as a dir source and as tar shards: the same classes and labels;
 * a file directly under the root is no dir sample (as in ImageFolder) and a
 * tar sample labelled -1. */
static void test_dir_and_tar_agree(void) {
  const char *d = lade_test_tmpdir("tree");
  char root[512];
  snprintf(root, sizeof root, "%s/root", d);
  const char *files[] = {"a/y.bin", "a/sub/deep/x.bin", "a/again.bin", "a0/z.bin", "\xc3\xbc/u.bin",
                         "a.b/c/z.bin", "a b/1.bin", "B/2.bin", "a-b/3.bin", "a&b'q/4.bin"};
  enum { NF = sizeof files / sizeof *files };
  CHECK_OK(mkdir(root, 0755));
  for (int i = 0; i < NF; i++) CHECK_OK(put(root, files[i]));
  CHECK_OK(put(root, "top.bin"));

  lade__listing_t l;
  CHECK_OK(lade__listing_scan(&l, root, LADE__LIST_ALL));
  CHECK_EQ_INT(l.count, NF);
  CHECK_EQ_INT(l.classes, NCLASSES);
  for (uint32_t i = 0; i < l.classes && i < NCLASSES; i++) CHECK(strcmp(l.class_names[i], classes[i]) == 0);
  int32_t last = -1;
  for (uint64_t i = 0; i < l.count; i++) {
    const char *p = lade__listing_path(&l, i);
    CHECK_EQ_INT(l.label[i], class_of(p));
    CHECK(l.label[i] >= last); /* class by class */
    last = l.label[i];
  }
  /* within class "a": folder "a" before "a/sub/deep" */
  CHECK(l.count > 3 && strcmp(lade__listing_path(&l, 1), "a/again.bin") == 0 &&
        strcmp(lade__listing_path(&l, 3), "a/sub/deep/x.bin") == 0);
  lade__listing_free(&l);

  /* members "./B/2.bin", ...: the "./" is no folder */
  CHECK_EQ_INT(lade_test_sh("cd %s && tar --sort=name -C root -cf dot.tar .", d), 0);
  char shard[600];
  snprintf(shard, sizeof shard, "%s/dot.tar", d);
  check_tar(shard, 2, NF + 1);
  /* members "B/2.bin", ..., and "top.bin" (label -1) */
  CHECK_EQ_INT(lade_test_sh("cd %s/root && tar --sort=name -cf ../plain.tar *", d), 0);
  snprintf(shard, sizeof shard, "%s/plain.tar", d);
  check_tar(shard, 0, NF + 1);

  /* `tar cf s.tar root` of the tree without a file directly under root:
   * the classes of ImageFolder("root") */
  CHECK_EQ_INT(lade_test_sh("cd %s && tar --sort=name --exclude=top.bin -cf inroot.tar root", d), 0);
  snprintf(shard, sizeof shard, "%s/inroot.tar", d);
  check_tar(shard, 5, NF);
  /* with top.bin the tree's root holds a sample: the root is the top, and
   * the one folder there is the one class */
  CHECK_EQ_INT(lade_test_sh("cd %s && tar --sort=name -cf wrapped.tar root", d), 0);
  snprintf(shard, sizeof shard, "%s/wrapped.tar", d);
  lade__source_t s;
  CHECK_OK(open_tar(&s, shard));
  if (s.impl) {
    CHECK_EQ_INT(s.count, NF + 1);
    CHECK_EQ_INT(s.classes, 1);
    CHECK(s.class_names && strcmp(s.class_names[0], "root") == 0);
    for (uint64_t i = 0; s.labels && i < s.count; i++) CHECK_EQ_INT(s.labels[i], 0);
    s.ops->close(&s);
  }
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_root_where_none_is_given);
  RUN(test_folder_of_a_path);
  RUN(test_rule);
  RUN(test_dir_and_tar_agree);
  return lade_test_finish();
}
