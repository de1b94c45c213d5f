/* listing.c - walks an ImageFolder-style tree into one arena. A million
 * files cost two growing arrays and one growing string arena, never a
 * malloc per file; entries are sorted with qsort over offsets.
 *
 * The order is torchvision 0.14's ImageFolder order, exactly: a class's
 * files are walked in any order and then sorted as sorted(os.walk(...))
 * sorts them, by (folder path as one string, file name) - which is not a
 * depth-first walk, because '-' and '.' sort before '/'. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source.h"
#include "source/labels.h"

static int arena_add(lade__listing_t *l, const char *prefix, const char *name, uint64_t *off) {
  size_t plen = prefix ? strlen(prefix) : 0, nlen = strlen(name);
  size_t need = l->arena_len + plen + 1 + nlen + 1;
  int rc = lade__reserve_bytes(&l->arena, &l->arena_cap, need, 65536, "listing");
  if (rc) return rc;
  *off = l->arena_len;
  char *p = l->arena + l->arena_len;
  if (plen) {
    memcpy(p, prefix, plen);
    p[plen] = '/';
    p += plen + 1;
  }
  memcpy(p, name, nlen + 1);
  l->arena_len = need;
  return 0;
}

static int push_file(lade__listing_t *l, uint64_t off) {
  if (l->count == l->cap) {
    uint64_t cap = l->cap ? l->cap * 2 : 1024;
    int rc = lade__resize_u64(&l->offset, cap, "listing");
    if (rc) return rc;
    l->cap = cap;
  }
  l->offset[l->count++] = off;
  return 0;
}

const char *const lade__image_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                        ".pgm", ".tif", ".tiff", ".webp", NULL};

/* torchvision's has_file_allowed_extension: name.lower().endswith(ext).
 * No non-ASCII character lower-cases to one of the extensions' letters, so
 * an ASCII case fold gives the same answer. */
static bool has_image_ext(const char *name) {
  size_t n = strlen(name);
  for (const char *const *e = lade__image_exts; *e; e++) {
    size_t k = strlen(*e);
    if (n >= k && strcasecmp(name + n - k, *e) == 0) return true;
  }
  return false;
}

static void ext_list(char *buf, size_t size) {
  size_t pos = 0;
  buf[0] = '\0';
  for (const char *const *e = lade__image_exts; *e && pos < size; e++)
    pos += (size_t)snprintf(buf + pos, size - pos, "%s%s", pos ? " " : "", *e);
}

void lade__path_join(char *buf, size_t size, const char *root, const char *rel) {
  size_t n = strlen(root);
  snprintf(buf, size, "%s%s%s", root, n && root[n - 1] == '/' ? "" : "/", rel);
}

/* qsort over offsets into the arena (the arena pointer is passed through a
 * thread-local variable: one listing is built by one thread). */
static _Thread_local const char *sort_arena;
static int cmp_off(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return strcmp(sort_arena + x, sort_arena + y);
}

/* sorted(os.walk(class)) then sorted(fnames): by the folder's whole path as
 * one string ("c/a-b" < "c/a.b" < "c/a/b", unlike a depth-first walk), then
 * by file name. Bytes compare unsigned, which is code-point order for UTF-8. */
static int cmp_walk(const void *a, const void *b) {
  const char *x = sort_arena + *(const uint64_t *)a, *y = sort_arena + *(const uint64_t *)b;
  const char *sx = strrchr(x, '/'), *sy = strrchr(y, '/');
  size_t dx = sx ? (size_t)(sx - x) : 0, dy = sy ? (size_t)(sy - y) : 0;
  int c = memcmp(x, y, dx < dy ? dx : dy);
  if (c) return c;
  if (dx != dy) return dx < dy ? -1 : 1;
  return strcmp(sx ? sx + 1 : x, sy ? sy + 1 : y);
}

/* Offsets of names in the arena (a folder's sub-folders or files). */
typedef struct names {
  uint64_t *off;
  size_t n, cap;
} names_t;

static const char *why(int e) {
  return e == ELOOP ? "too many levels of symbolic links (a symlink loop?)" : strerror(e);
}

/* Reads the non-hidden names in folder `rel` (relative to rootfd; NULL: the
 * root) into the arena: sub-folders (symlinks followed) into dirs, sorted,
 * and the regular files `which` keeps into files, sorted. */
static int list_dir(lade__listing_t *l, int rootfd, const char *rel, const char *root, int which, names_t *dirs,
                    names_t *files) {
  int fd = rel ? openat(rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : dup(rootfd);
  if (fd < 0) return lade__fail(LADE_EIO, "cannot open folder %s/%s: %s", root, rel ? rel : "", why(errno));
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return lade__fail(LADE_EIO, "cannot read folder %s/%s: %s", root, rel ? rel : "", why(e));
  }
  int rc = 0;
  struct dirent *e;
  dirs->n = files->n = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue; /* ., .., hidden files and folders */
    int is_dir = 0, is_file = 0;
    if (e->d_type == DT_DIR) {
      is_dir = 1;
    } else if (e->d_type == DT_REG) {
      is_file = 1;
    } else {
      struct stat st;
      if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) continue; /* dangling link */
      is_dir = S_ISDIR(st.st_mode);
      is_file = S_ISREG(st.st_mode);
    }
    if (!is_dir && !is_file) continue;
    if (is_file && which == LADE__LIST_IMAGES && !has_image_ext(e->d_name)) continue;
    names_t *v = is_dir ? dirs : files;
    if (v->n == v->cap) {
      size_t cap = v->cap ? v->cap * 2 : 256;
      rc = lade__resize_u64(&v->off, cap, "listing");
      if (rc) break;
      v->cap = cap;
    }
    rc = arena_add(l, rel, e->d_name, &v->off[v->n]);
    if (rc) break;
    v->n++;
  }
  closedir(d);
  if (rc) return rc;
  sort_arena = l->arena;
  if (dirs->n > 1) qsort(dirs->off, dirs->n, sizeof *dirs->off, cmp_off);
  if (files->n > 1) qsort(files->off, files->n, sizeof *files->off, cmp_off);
  return 0;
}

/* Appends every kept file below folder dir_off (any order; the caller sorts
 * the class's range with cmp_walk). */
static int walk(lade__listing_t *l, int rootfd, const char *root, int which, uint64_t dir_off, int depth) {
  if (depth > 64)
    return lade__fail(LADE_EFORMAT, "folder tree under %s is deeper than 64 levels (a symlink loop?) at %.200s...",
                      root, l->arena + dir_off);
  /* copy the folder's path: the arena may move while this folder is listed */
  char rel[LADE__PATH_MAX];
  if (strlen(l->arena + dir_off) >= sizeof rel) return lade__fail(LADE_ERANGE, "path too long under %s", root);
  strcpy(rel, l->arena + dir_off);
  names_t dirs = {0}, files = {0};
  int rc = list_dir(l, rootfd, rel, root, which, &dirs, &files);
  for (size_t i = 0; !rc && i < files.n; i++) rc = push_file(l, files.off[i]);
  for (size_t i = 0; !rc && i < dirs.n; i++) rc = walk(l, rootfd, root, which, dirs.off[i], depth + 1);
  free(dirs.off);
  free(files.off);
  return rc;
}

/* LADE_EEMPTY naming (up to 8 of) the class folders with no kept file. */
static int fail_empty_classes(const lade__listing_t *l, const names_t *dirs, const char *root, int which,
                              const uint8_t *empty, uint32_t nempty) {
  char names[640] = "";
  size_t pos = 0;
  uint32_t shown = 0;
  for (size_t i = 0; i < dirs->n && shown < 8; i++) {
    if (!empty[i] || pos >= sizeof names) continue;
    pos += (size_t)snprintf(names + pos, sizeof names - pos, "%s'%s'", shown ? ", " : "", l->arena + dirs->off[i]);
    shown++;
  }
  char more[48] = "", exts[96];
  if (nempty > shown) snprintf(more, sizeof more, " and %u more", nempty - shown);
  ext_list(exts, sizeof exts);
  if (which == LADE__LIST_IMAGES)
    return lade__fail(LADE_EEMPTY, "dataset folder %s: class folder%s %s%s %s no images (extensions, any case: %s)",
                      root, nempty > 1 ? "s" : "", names, more, nempty > 1 ? "have" : "has", exts);
  return lade__fail(LADE_EEMPTY, "dataset folder %s: class folder%s %s%s %s no files", root, nempty > 1 ? "s" : "",
                    names, more, nempty > 1 ? "have" : "has");
}

static const char *listing_path_of(void *ctx, uint64_t i) { return lade__listing_path(ctx, i); }

/* Labels by the rule of labels.c, the one of s3 and tar too: the class
 * folders walked above, in order, are classes 0..C-1 (an empty one was an
 * error), and a flat folder's files are -1. */
static int label_files(lade__listing_t *l, const char *root) {
  l->label = malloc((l->count ? l->count : 1) * sizeof *l->label);
  if (!l->label) return lade__fail(LADE_ENOMEM, "listing: out of memory");
  char what[LADE__PATH_MAX + 32];
  snprintf(what, sizeof what, "dataset folder %s", root);
  lade__classes_t c;
  int rc = lade__labels_from_folders(l->count, listing_path_of, l, 0, l->label, &c, what);
  if (rc) return rc;
  l->classes = c.n;
  l->class_names = c.names;
  l->class_arena = c.arena;
  return 0;
}

int lade__listing_scan(lade__listing_t *l, const char *root, int which) {
  memset(l, 0, sizeof *l);
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return lade__fail(errno == ENOENT ? LADE_ENOENT : LADE_EIO, "cannot open dataset folder %s: %s", root,
                      strerror(errno));
  names_t dirs = {0}, files = {0};
  uint8_t *empty = NULL;
  uint32_t nempty = 0;
  int rc = list_dir(l, rootfd, NULL, root, which, &dirs, &files);
  if (!rc && dirs.n == 0) {
    /* a flat folder: an unlabelled dataset */
    for (size_t i = 0; !rc && i < files.n; i++) rc = push_file(l, files.off[i]);
  } else if (!rc) {
    /* class folders: files at the root are not samples (as in ImageFolder) */
    if (!(empty = calloc(dirs.n, 1))) rc = lade__fail(LADE_ENOMEM, "listing: out of memory");
    for (size_t i = 0; !rc && i < dirs.n; i++) {
      uint64_t first = l->count;
      rc = walk(l, rootfd, root, which, dirs.off[i], 1);
      if (rc) break;
      sort_arena = l->arena;
      if (l->count - first > 1) qsort(l->offset + first, l->count - first, sizeof *l->offset, cmp_walk);
      if (l->count == first) {
        empty[i] = 1;
        nempty++;
      }
    }
    if (!rc && nempty) rc = fail_empty_classes(l, &dirs, root, which, empty, nempty);
  }
  if (!rc && l->count == 0) {
    char exts[96];
    ext_list(exts, sizeof exts);
    if (which == LADE__LIST_IMAGES)
      rc = lade__fail(LADE_EEMPTY, "no images found under %s (extensions, any case: %s; hidden files are skipped)",
                      root, exts);
    else
      rc = lade__fail(LADE_EEMPTY, "no files found under %s (hidden files are skipped)", root);
  }
  if (!rc) rc = label_files(l, root);
  assert(rc || l->classes == dirs.n); /* every class folder walked holds a file */
  free(empty);
  free(dirs.off);
  free(files.off);
  close(rootfd);
  if (rc) lade__listing_free(l);
  return rc;
}

int lade__listing_build(lade__listing_t *l, const char *root) { return lade__listing_scan(l, root, LADE__LIST_ALL); }

void lade__listing_free(lade__listing_t *l) {
  free(l->arena);
  free(l->offset);
  free(l->label);
  free(l->class_arena);
  free(l->class_names);
  memset(l, 0, sizeof *l);
}

int lade__open_regular(int dirfd, const char *rel, const char *shown, struct stat *st) {
  /* O_NONBLOCK: open() of a FIFO with no writer would wait for ever */
  int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return lade__fail(errno == ENOENT ? LADE_ENOENT : LADE_EIO, "cannot open %s: %s", shown, strerror(errno));
  if (fstat(fd, st) != 0) {
    int e = errno;
    close(fd);
    return lade__fail(LADE_EIO, "cannot stat %s: %s", shown, strerror(e));
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    const char *kind = S_ISFIFO(st->st_mode)  ? "a FIFO"
                       : S_ISSOCK(st->st_mode) ? "a socket"
                       : S_ISCHR(st->st_mode)  ? "a character device"
                       : S_ISBLK(st->st_mode)  ? "a block device"
                       : S_ISDIR(st->st_mode)  ? "a folder"
                                               : "not a regular file";
    return lade__fail(LADE_EFORMAT, "%s is %s, not a regular file: not read", shown, kind);
  }
  return fd;
}

int lade__read_file_max(int dirfd, const char *rel, const char *shown_root, uint64_t max, lade__buf_t *out) {
  char shown[LADE__PATH_MAX * 2 + 2];
  snprintf(shown, sizeof shown, "%s/%s", shown_root, rel);
  struct stat st;
  int fd = lade__open_regular(dirfd, rel, shown, &st);
  if (fd < 0) return fd;
  /* the size is known before a byte is read: a huge (or sparse) file named
   * like a sample is refused here, not after it filled the memory */
  if ((uint64_t)st.st_size > max || (uint64_t)st.st_size >= SIZE_MAX) {
    close(fd);
    return lade__fail(LADE_ERANGE, "%s/%s: %llu bytes, more than max_sample_bytes (%llu); not read", shown_root, rel,
                      (unsigned long long)st.st_size, (unsigned long long)max);
  }
  size_t size = (size_t)st.st_size;
  int rc = lade__buf_reserve(out, size + 1);
  if (rc) {
    close(fd);
    return lade__fail(rc, "%s/%s: no memory for its %zu bytes", shown_root, rel, size);
  }
  size_t got = 0;
  while (got < size) {
    ssize_t n = pread(fd, out->data + got, size - got, (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return lade__fail(LADE_EIO, "cannot read %s/%s: %s", shown_root, rel, strerror(e));
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (got != size)
    return lade__fail(LADE_EIO, "short read of %s/%s: %zu of %zu bytes (file changed while reading?)", shown_root,
                      rel, got, size);
  out->len = size;
  return 0;
}

int lade__read_file_at(int dirfd, const char *rel, const char *shown_root, lade__buf_t *out) {
  return lade__read_file_max(dirfd, rel, shown_root, UINT64_MAX, out);
}

uint64_t lade__stat_version(int stat_rc, const struct stat *st) {
  if (stat_rc != 0) return LADE__VERSION_UNKNOWN;
  uint64_t v[4] = {(uint64_t)st->st_size, (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec,
                   (uint64_t)st->st_ino};
  uint64_t h = lade__hash64(v, sizeof v, 0x5645525349304eull);
  return h > LADE__VERSION_UNKNOWN ? h : h + 2;
}

void lade__file_ver_of(lade__file_ver_t *v, const struct stat *st) {
  *v = (lade__file_ver_t){(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                          (int64_t)st->st_mtim.tv_sec, (int64_t)st->st_mtim.tv_nsec,
                          (int64_t)st->st_ctim.tv_sec, (int64_t)st->st_ctim.tv_nsec};
}

int lade__file_check(int fd, const lade__file_ver_t *v, const char *shown) {
  struct stat st;
  if (fstat(fd, &st) != 0) return lade__fail(LADE_EIO, "cannot stat %s: %s", shown, strerror(errno));
  lade__file_ver_t now;
  lade__file_ver_of(&now, &st);
  bool same_file = now.dev == v->dev && now.ino == v->ino;
  bool same_bytes = same_file && now.size == v->size && now.mtime_s == v->mtime_s && now.mtime_ns == v->mtime_ns;
  if (same_bytes && now.ctime_s == v->ctime_s && now.ctime_ns == v->ctime_ns) return 0;
  /* Unlinked (replaced by rename, or removed) with its size and mtime as
   * open saw them: the unlink moved ctime, not a byte, and the descriptor
   * still reads the old bytes, so the epoch goes on with them. A rewrite
   * moves mtime (caught above) or, mtime put back, ctime while the file is
   * still linked (caught below). */
  if (same_bytes && st.st_nlink == 0) return 0;
  if (!same_file) /* a descriptor opened per read: the name now opens another file */
    return lade__fail(LADE_EIO,
                      "%s changed since it was opened: it was replaced (its name now opens another file: inode %llu, "
                      "was %llu); a loader reads the files as it listed them: create the loader again to read the "
                      "new one",
                      shown, (unsigned long long)now.ino, (unsigned long long)v->ino);
  const char *what = now.size != v->size                                  ? "its size"
                     : now.mtime_s != v->mtime_s || now.mtime_ns != v->mtime_ns ? "its mtime"
                                                                                : "its ctime";
  return lade__fail(LADE_EIO,
                    "%s changed while it was open (%s differs: %llu bytes, mtime %lld.%09lld, then %llu bytes, "
                    "mtime %lld.%09lld); rewritten in place? Replace such a file by rename, then open it again",
                    shown, what, (unsigned long long)v->size, (long long)v->mtime_s, (long long)v->mtime_ns,
                    (unsigned long long)now.size, (long long)now.mtime_s, (long long)now.mtime_ns);
}
