/*
 * labels.h - class labels from folders: the one rule of the dir, s3 and tar
 * sources (tar when its samples have no `.cls`), written out in
 * docs/sources.md ("Labels from folders").
 *
 * A sample's path relative to the dataset's root (dir: under the root
 * folder; s3: under the prefix; tar: the member's name in its shard, below
 * the folders all members share: lade__labels_root), with
 * leading "/" and "./" skipped, has a class when it has a folder: its first
 * path component. The distinct class folders, sorted byte-wise (unsigned,
 * a name before any longer name it begins: Python's sorted() of str for
 * UTF-8 names), are classes 0..C-1 - torchvision ImageFolder's find_classes
 * over the folder the paths unpack to. A path without a folder is label -1.
 */
#ifndef LADE__LABELS_H
#define LADE__LABELS_H

#include <stddef.h>
#include <stdint.h>

/* At most this many classes (labels fit 24 bits, as `.cls` values and s3's
 * label_file labels do). */
#define LADE__MAX_CLASSES (1u << 24)

/* The class names of a labelling, owned by it. */
typedef struct lade__classes {
  uint32_t n;
  char **names; /* n pointers into arena, sorted byte-wise; NULL when n is 0 */
  char *arena;
} lade__classes_t;

/* The class folder of `rel` under the rule above: sets *start to its first
 * byte and returns its length, or 0 when rel has no folder (label -1). */
size_t lade__label_folder(const char *rel, const char **start);

/* Path of sample i relative to the dataset's root; borrowed, valid for the
 * call to lade__labels_from_folders. */
typedef const char *(*lade__label_path_fn)(void *ctx, uint64_t i);

/* Labels count samples by the rule above: label[i] (count entries, written)
 * is the class of path(ctx, i) or -1, and *out (filled; free with
 * lade__classes_free) names the classes. Paths in class order cost one
 * comparison each. Fails with LADE_ERANGE (`what` names the dataset) beyond
 * LADE__MAX_CLASSES classes, or LADE_ENOMEM; *out is then empty. Not
 * thread-safe across calls sharing label or out. */
int lade__labels_from_folders(uint64_t count, lade__label_path_fn path, void *ctx, size_t root, int32_t *label,
                              lade__classes_t *out, const char *what);

/* The dataset's root where none is given (tar shards: a member name is the
 * path the shard unpacks to): the folders that every path begins with, as
 * deep as every path still has a folder below them, in bytes of the
 * normalised paths (0: the root is the top). `tar cf s.tar train` of an
 * ImageFolder tree gives train/n01/x.jpg: the root is train/, the class
 * n01, as ImageFolder("train") has it; n01/a.jpg and n01/b.jpg alone keep
 * their one class n01. Pass it as lade__labels_from_folders' root. */
size_t lade__labels_root(uint64_t count, lade__label_path_fn path, void *ctx);

/* Frees out's names and empties it; NULL or empty does nothing. */
void lade__classes_free(lade__classes_t *out);

#endif
