/* test_listing.c - the dir source's listing (torchvision ImageFolder's files
 * and order) and the loader's class and sample accessors. The exhaustive
 * comparison with torchvision itself is tests/python/test_imagefolder.py. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lade/lade.h"
#include "source/source.h"

static lade_loader_t *loader_for(const char *source, const char *transform) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  lade_config_set(c, "source", source);
  lade_config_set(c, "transform", transform);
  lade_config_set(c, "batch_size", "2");
  lade_config_set(c, "threads", "1");
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, c);
  if (rc) fprintf(stderr, "create: %s\n", lade_last_error());
  lade_config_destroy(c);
  return L;
}

/* Folders ordered as sorted(os.walk()) orders them - by the whole path
 * string, so "a-b" and "a.b" come before "a/b" - not depth-first; image
 * extensions in any case; stray files, hidden files and files at the root
 * left out. */
static void test_imagefolder_order_and_filter(void) {
  const char *d = lade_test_tmpdir("order");
  CHECK_EQ_INT(lade_test_sh("cd %s && mkdir -p k/a/b k/a.b k/a-b k/a0 m .ipynb_checkpoints && "
                            "touch k/a/b/x.jpg k/a.b/y.PNG k/a-b/z.Jpeg k/a0/w.webp k/a/q.tif k/top.BMP "
                            "k/notes.txt k/README k/a/.hidden.jpg k/jpg m/p.ppm m/g.pgm m/t.tiff "
                            ".ipynb_checkpoints/c.jpg root.jpg",
                            d),
               0);
  lade__listing_t l;
  CHECK_OK(lade__listing_scan(&l, d, LADE__LIST_IMAGES));
  const char *want[] = {"k/top.BMP", "k/a/q.tif",  "k/a-b/z.Jpeg", "k/a.b/y.PNG", "k/a/b/x.jpg",
                        "k/a0/w.webp", "m/g.pgm", "m/p.ppm",      "m/t.tiff"};
  const int labels[] = {0, 0, 0, 0, 0, 0, 1, 1, 1};
  CHECK_EQ_INT(l.count, 9);
  CHECK_EQ_INT(l.classes, 2);
  for (uint64_t i = 0; i < l.count && i < 9; i++) {
    if (strcmp(lade__listing_path(&l, i), want[i]) != 0)
      fprintf(stderr, "  sample %llu: %s, want %s\n", (unsigned long long)i, lade__listing_path(&l, i), want[i]);
    CHECK(strcmp(lade__listing_path(&l, i), want[i]) == 0);
    CHECK_EQ_INT(l.label[i], labels[i]);
  }
  lade__listing_free(&l);

  /* raw data: every regular file, same order */
  CHECK_OK(lade__listing_scan(&l, d, LADE__LIST_ALL));
  CHECK_EQ_INT(l.count, 12);
  if (l.count == 12) {
    CHECK(strcmp(lade__listing_path(&l, 0), "k/README") == 0);
    CHECK(strcmp(lade__listing_path(&l, 1), "k/jpg") == 0);
    CHECK(strcmp(lade__listing_path(&l, 2), "k/notes.txt") == 0);
    CHECK(strcmp(lade__listing_path(&l, 3), "k/top.BMP") == 0);
  }
  lade__listing_free(&l);
}

static void test_empty_class_and_dataset_errors(void) {
  const char *d = lade_test_tmpdir("empty");
  CHECK_EQ_INT(lade_test_sh("mkdir -p %s/t/a %s/t/b %s/t/c %s/f && touch %s/t/a/x.jpg %s/t/b/notes.txt %s/f/n.txt",
                            d, d, d, d, d, d, d),
               0);
  char root[4200];
  lade__listing_t l;
  snprintf(root, sizeof root, "%s/t", d);
  CHECK_EQ_INT(lade__listing_scan(&l, root, LADE__LIST_IMAGES), LADE_EEMPTY);
  const char *e = lade_last_error();
  CHECK(strstr(e, root) && strstr(e, "class folders 'b', 'c' have no images") && strstr(e, ".webp"));
  CHECK_EQ_INT(l.count, 0);
  CHECK_EQ_INT(lade__listing_scan(&l, root, LADE__LIST_ALL), LADE_EEMPTY);
  CHECK(strstr(lade_last_error(), "class folder 'c' has no files"));

  /* a flat folder with no images */
  snprintf(root, sizeof root, "%s/f", d);
  CHECK_EQ_INT(lade__listing_scan(&l, root, LADE__LIST_IMAGES), LADE_EEMPTY);
  char want[4300];
  snprintf(want, sizeof want, "no images found under %s (extensions, any case: .jpg .jpeg", root);
  CHECK(strstr(lade_last_error(), want) != NULL);
  /* ...is an unlabelled dataset of raw files */
  CHECK_OK(lade__listing_scan(&l, root, LADE__LIST_ALL));
  CHECK_EQ_INT(l.count, 1);
  CHECK_EQ_INT(l.classes, 0);
  if (l.count) CHECK_EQ_INT(l.label[0], -1);
  lade__listing_free(&l);

  /* the loader reports the listing's error */
  snprintf(root, sizeof root, "%s/t", d);
  lade_loader_t *L = loader_for(root, "imagenet-eval");
  if (L) {
    uint32_t n = 99;
    CHECK_EQ_INT(lade_loader_classes(L, &n), LADE_EEMPTY);
    CHECK(strstr(lade_last_error(), "'b', 'c'") != NULL);
    lade_loader_destroy(L);
  }
}

static void test_symlinks_followed_and_loops_named(void) {
  const char *d = lade_test_tmpdir("links");
  CHECK_EQ_INT(lade_test_sh("cd %s && mkdir -p out/deep/in t/a/sub-x && touch out/deep/s.jpg out/deep/in/i.jpg t/a/f.jpg t/a/sub-x/k.jpg && "
                            "ln -s ../out t/b && ln -s ../../out/deep t/a/sub && ln -s nowhere.jpg t/a/dangling.jpg",
                            d),
               0);
  char root[4200];
  snprintf(root, sizeof root, "%s/t", d);
  lade__listing_t l;
  CHECK_OK(lade__listing_scan(&l, root, LADE__LIST_IMAGES));
  const char *want[] = {"a/f.jpg", "a/sub/s.jpg", "a/sub-x/k.jpg", "a/sub/in/i.jpg", "b/deep/s.jpg",
                        "b/deep/in/i.jpg"};
  CHECK_EQ_INT(l.count, 6);
  CHECK_EQ_INT(l.classes, 2);
  /* the linked a/sub is walked in whole-path order: a/sub, a/sub-x, a/sub/in */
  for (uint64_t i = 0; i < l.count && i < 6; i++) CHECK(strcmp(lade__listing_path(&l, i), want[i]) == 0);
  lade__listing_free(&l);
  CHECK_EQ_INT(lade_test_sh("ln -s .. %s/t/a/loop", d), 0);
  CHECK(lade__listing_scan(&l, root, LADE__LIST_IMAGES) != 0);
  CHECK(strstr(lade_last_error(), "(a symlink loop?) at a/loop/a/loop/") != NULL);
}

/* The public accessors: class names, paths joined as os.path.join joins
 * them, labels, and the range and buffer checks. */
static void test_loader_classes_and_samples(void) {
  const char *d = lade_test_tmpdir("api");
  CHECK_EQ_INT(lade_test_sh("cd %s && mkdir -p ds/dog ds/cat/in && echo x > ds/dog/1.jpg && touch ds/cat/in/2.png ds/cat/3.JPG "
                            "ds/cat/x.txt",
                            d),
               0);
  char root[4200];
  snprintf(root, sizeof root, "%s/ds/", d); /* a trailing slash, joined without a second one */
  lade_loader_t *L = loader_for(root, "imagenet-train");
  CHECK(L != NULL);
  if (!L) return;
  uint32_t nc = 0;
  CHECK_OK(lade_loader_classes(L, &nc));
  CHECK_EQ_INT(nc, 2);
  const char *name = NULL;
  CHECK_OK(lade_loader_class_name(L, 0, &name));
  CHECK(name && strcmp(name, "cat") == 0);
  CHECK_OK(lade_loader_class_name(L, 1, &name));
  CHECK(name && strcmp(name, "dog") == 0);
  CHECK_EQ_INT(lade_loader_class_name(L, 2, &name), LADE_ERANGE);

  uint64_t n = 0;
  CHECK_OK(lade_loader_info(L, &n, NULL, NULL));
  CHECK_EQ_INT(n, 3);
  const char *rel[] = {"cat/3.JPG", "cat/in/2.png", "dog/1.jpg"};
  const int64_t lab[] = {0, 0, 1};
  for (uint64_t i = 0; i < 3; i++) {
    char path[8192], want[8192];
    int64_t label = 7;
    CHECK_OK(lade_loader_sample(L, i, path, sizeof path, &label));
    snprintf(want, sizeof want, "%s%s", root, rel[i]);
    CHECK(strcmp(path, want) == 0);
    CHECK_EQ_INT(label, lab[i]);
  }
  int64_t label = 7;
  CHECK_OK(lade_loader_sample(L, 2, NULL, 0, &label));
  CHECK_EQ_INT(label, 1);
  char small[8];
  CHECK_EQ_INT(lade_loader_sample(L, 0, small, sizeof small, NULL), LADE_ERANGE);
  CHECK(strstr(lade_last_error(), "needs") != NULL);
  CHECK_EQ_INT(lade_loader_sample(L, 3, NULL, 0, &label), LADE_ERANGE);
  lade_loader_destroy(L);

  /* a flat folder of raw files: no classes, label -1 */
  snprintf(root, sizeof root, "%s/ds/dog", d);
  L = loader_for(root, "raw");
  CHECK(L != NULL);
  if (!L) return;
  CHECK_OK(lade_loader_classes(L, &nc));
  CHECK_EQ_INT(nc, 0);
  char path[8192];
  CHECK_OK(lade_loader_sample(L, 0, path, sizeof path, &label));
  CHECK_EQ_INT(label, -1);
  char want[8192];
  snprintf(want, sizeof want, "%s/1.jpg", root);
  CHECK(strcmp(path, want) == 0);
  lade_loader_destroy(L);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_imagefolder_order_and_filter);
  RUN(test_empty_class_and_dataset_errors);
  RUN(test_symlinks_followed_and_loops_named);
  RUN(test_loader_classes_and_samples);
  return lade_test_finish();
}
