/* dir.c - the `dir` source: an ImageFolder tree, one file per sample. With a
 * decoding transform only image files are listed (torchvision's
 * IMG_EXTENSIONS); raw, npy and npz transforms take every regular file.
 * Under transform=auto a tree of .npz files (a peek at its first file, as
 * select.c peeks for .npy) is listed whole and read with the npz transform. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "source.h"

typedef struct dir_impl {
  lade__listing_t list;
  int rootfd;
  uint64_t max_sample; /* max_sample_bytes */
  char root[LADE__PATH_MAX];
} dir_impl_t;

/* Whether the first file of the tree at path ends in .npz (any case): the
 * first, by name, of the folder's files, or when it has none (or, at the
 * root, when it has class folders: files beside them are not samples) of
 * its first sub-folder's, as the listing orders them. Hidden names are
 * skipped, as the listing skips them. */
static bool looks_npz(const char *path, int depth) {
  DIR *d = depth <= 8 ? opendir(path) : NULL;
  if (!d) return false;
  char file[256] = "", sub[256] = "";
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof file) continue;
    bool is_dir = e->d_type == DT_DIR, is_file = e->d_type == DT_REG;
    if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
      struct stat st;
      if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) continue;
      is_dir = S_ISDIR(st.st_mode);
      is_file = S_ISREG(st.st_mode);
    }
    char *best = is_dir ? sub : is_file ? file : NULL;
    if (best && (!best[0] || strcmp(e->d_name, best) < 0)) snprintf(best, sizeof file, "%s", e->d_name);
  }
  closedir(d);
  if (file[0] && !(depth == 0 && sub[0])) {
    size_t n = strlen(file);
    return n >= 4 && strcasecmp(file + n - 4, ".npz") == 0;
  }
  char next[LADE__PATH_MAX];
  if (!sub[0] || (size_t)snprintf(next, sizeof next, "%s/%s", path, sub) >= sizeof next) return false;
  return looks_npz(next, depth + 1);
}

static int dir_open(lade__source_t *s, const struct lade_config *cfg) {
  dir_impl_t *d = calloc(1, sizeof *d);
  if (!d) return lade__fail(LADE_ENOMEM, "dir source: out of memory");
  snprintf(d->root, sizeof d->root, "%s", cfg->source);
  d->rootfd = -1;
  d->max_sample = cfg->max_sample_bytes;
  int t = cfg->transform;
  bool npz = t == LADE__XF_AUTO && looks_npz(d->root, 0);
  int which = !npz && (t == LADE__XF_AUTO || t == LADE__XF_IMAGENET_TRAIN || t == LADE__XF_IMAGENET_EVAL)
                  ? LADE__LIST_IMAGES
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
  s->npz = npz;
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

/* A file's bytes are all its sample's. */
static int dir_extent(lade__source_t *s, uint64_t idx, char *path, size_t size, uint64_t *off, uint64_t *len) {
  dir_impl_t *d = s->impl;
  struct stat st;
  lade__path_join(path, size, d->root, lade__listing_path(&d->list, idx));
  if (fstatat(d->rootfd, lade__listing_path(&d->list, idx), &st, 0) || !S_ISREG(st.st_mode))
    return lade__fail(LADE_EIO, "cannot stat %s: %s", path, strerror(errno));
  *off = 0;
  *len = (uint64_t)st.st_size;
  return 0;
}

const lade__source_ops_t lade__source_dir = {.name = "dir",
                                             .extent = dir_extent,
                                             .open = dir_open,
                                             .close = dir_close,
                                             .read = dir_read,
                                             .describe = dir_describe,
                                             .version = dir_version};
