/* dir.c - the `dir` source: an ImageFolder tree, one file per sample. With a
 * decoding transform only image files are listed (torchvision's
 * IMG_EXTENSIONS); raw and npy transforms take every regular file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source.h"

typedef struct dir_impl {
  lade__listing_t list;
  int rootfd;
  uint64_t max_sample; /* max_sample_bytes */
  char root[LADE__PATH_MAX];
} dir_impl_t;

static int dir_open(lade__source_t *s, const struct lade_config *cfg) {
  dir_impl_t *d = calloc(1, sizeof *d);
  if (!d) return lade__fail(LADE_ENOMEM, "dir source: out of memory");
  snprintf(d->root, sizeof d->root, "%s", cfg->source);
  d->rootfd = -1;
  d->max_sample = cfg->max_sample_bytes;
  int t = cfg->transform;
  int which = t == LADE__XF_AUTO || t == LADE__XF_IMAGENET_TRAIN || t == LADE__XF_IMAGENET_EVAL ? LADE__LIST_IMAGES
                                                                                            : LADE__LIST_ALL;
  /* an empty dataset or class folder fails here, naming the root */
  int rc = lade__listing_scan(&d->list, d->root, which);
  if (rc) {
    free(d);
    return rc;
  }
  d->rootfd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d->rootfd < 0) {
    int e = errno;
    lade__listing_free(&d->list);
    free(d);
    return lade__fail(LADE_EIO, "cannot open dataset folder %s: %s", cfg->source, strerror(e));
  }
  s->impl = d;
  s->count = d->list.count;
  s->labels = d->list.label;
  s->classes = d->list.classes;
  s->class_names = (const char *const *)d->list.class_names;
  return 0;
}

static void dir_close(lade__source_t *s) {
  dir_impl_t *d = s->impl;
  if (!d) return;
  if (d->rootfd >= 0) close(d->rootfd);
  lade__listing_free(&d->list);
  free(d);
  s->impl = NULL;
}

static int dir_read(lade__source_t *s, uint64_t idx, lade__buf_t *out) {
  dir_impl_t *d = s->impl;
  return lade__read_file_max(d->rootfd, lade__listing_path(&d->list, idx), d->root, d->max_sample, out);
}

static void dir_describe(lade__source_t *s, uint64_t idx, char *buf, size_t size) {
  dir_impl_t *d = s->impl;
  lade__path_join(buf, size, d->root, lade__listing_path(&d->list, idx));
}

static uint64_t dir_version(lade__source_t *s, uint64_t idx) {
  dir_impl_t *d = s->impl;
  struct stat st;
  return lade__stat_version(fstatat(d->rootfd, lade__listing_path(&d->list, idx), &st, 0), &st);
}

const lade__source_ops_t lade__source_dir = {.name = "dir",
                                             .open = dir_open,
                                             .close = dir_close,
                                             .read = dir_read,
                                             .describe = dir_describe,
                                             .version = dir_version};
