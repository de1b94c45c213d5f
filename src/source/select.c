/* select.c - which source backend reads a `source` setting (source_type,
 * or auto: a file, brace pattern or URL ending in .tfrecord or .tfrecords
 * (.gz, .zlib after it too), or a folder holding such files and no
 * sub-folder, is tfrecord, remote for http(s):// and s3://; s3:// is s3; a
 * .npy file, or a folder holding only .npy files, is
 * npy; a .tar, a folder of shards, a brace pattern or a list of shards is
 * tar, remote tar for http(s):// URLs, lists of them and s3:// shards
 * (source_type=tar, or a .tar, brace pattern or .txt); a file ending in .h5,
 * .hdf5 or .he5 is hdf5; any other folder is dir). Separate from every backend so that each
 * backend file holds one backend. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "source.h"

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

/* auto: a regular file ending in .npy is stacked npy; a folder whose first
 * file found (depth-first, sorted enough for a decision) ends in .npy is npy;
 * otherwise dir. */
static int folder_looks_npy(const char *root, int depth) {
  if (depth > 3) return 0;
  DIR *d = opendir(root);
  if (!d) return 0;
  struct dirent *e;
  int verdict = -1;
  char sub[LADE__PATH_MAX];
  sub[0] = '\0';
  while (verdict < 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (e->d_type == DT_DIR) {
      if (!sub[0]) snprintf(sub, sizeof sub, "%s/%s", root, e->d_name);
      continue;
    }
    verdict = has_suffix(e->d_name, ".npy");
  }
  closedir(d);
  if (verdict >= 0) return verdict;
  return sub[0] ? folder_looks_npy(sub, depth + 1) : 0;
}

enum { NO_SHARDS, TAR_SHARDS, TFRECORD_FILES };

/* auto: a folder with .tar files (else TFRecord files) and no sub-folders
 * holds shards. One pass over the folder for both. */
static int folder_shards(const char *root) {
  DIR *d = opendir(root);
  if (!d) return NO_SHARDS;
  struct dirent *e;
  int tars = 0, tfrs = 0, dirs = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    int is_dir = e->d_type == DT_DIR ||
                 (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK ? fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
                                                                        S_ISDIR(st.st_mode)
                                                                  : 0);
    if (is_dir) dirs++;
    else if (has_suffix(e->d_name, ".tar")) tars++;
    else if (lade__tfrec_is_name(e->d_name, strlen(e->d_name))) tfrs++;
  }
  closedir(d);
  return dirs ? NO_SHARDS : tars ? TAR_SHARDS : tfrs ? TFRECORD_FILES : NO_SHARDS;
}

int lade__source_select(const struct lade_config *cfg, const lade__source_ops_t **ops) {
  if (!cfg->source[0]) return lade__fail(LADE_EINVAL, "setting 'source' is empty: give the dataset path");
  int url = !strncmp(cfg->source, "http://", 7) || !strncmp(cfg->source, "https://", 8);
  int s3 = !strncmp(cfg->source, "s3://", 5);
  /* TFRecord files: the tar source family's tfrecord format, local or remote */
  int tfr = cfg->source_type == LADE__SRC_TFRECORD ||
            (cfg->source_type == LADE__SRC_AUTO && lade__tfrec_is_name(cfg->source, strlen(cfg->source)));
  if (tfr) {
    if (url || s3 || lade__tar_source_remote(cfg->source)) {
#ifdef LADE_HAVE_CURL
      *ops = &lade__source_tfrecord_remote;
      return 0;
#else
      return lade__fail(LADE_EUNSUPPORTED, "dataset %s: remote TFRecord files need libcurl, which this build lacks "
                        "(LADE_WITH_CURL)", cfg->source);
#endif
    }
    *ops = &lade__source_tfrecord; /* a brace pattern names no file itself; the source checks each file */
    return 0;
  }
  /* s3:// is the s3 source unless it names tar shards: source_type=tar, or
   * auto with a .tar object, a brace pattern or a .txt list */
  int s3_tar = s3 && (cfg->source_type == LADE__SRC_TAR ||
                      (cfg->source_type == LADE__SRC_AUTO && (has_suffix(cfg->source, ".tar") ||
                                                             has_suffix(cfg->source, ".txt") ||
                                                             strchr(cfg->source, '{'))));
  if (url || s3_tar ||
      (!s3 && (cfg->source_type == LADE__SRC_TAR || cfg->source_type == LADE__SRC_AUTO) &&
       lade__tar_source_remote(cfg->source))) {
#ifdef LADE_HAVE_CURL
    if (cfg->source_type != LADE__SRC_TAR && cfg->source_type != LADE__SRC_AUTO)
      return lade__fail(LADE_EINVAL, "dataset %s: an http(s):// URL is read as tar shards (source_type=tar or auto)",
                        cfg->source);
    *ops = &lade__source_tar_remote;
    return 0;
#else
    return lade__fail(LADE_EUNSUPPORTED, "dataset %s: remote tar shards need libcurl, which this build lacks (LADE_WITH_CURL)",
                      cfg->source);
#endif
  }
  if (cfg->source_type == LADE__SRC_S3 || strncmp(cfg->source, "s3://", 5) == 0) {
#ifdef LADE_HAVE_CURL
    if (strncmp(cfg->source, "s3://", 5) != 0)
      return lade__fail(LADE_EINVAL, "dataset %s: source_type=s3 needs source=s3://bucket/prefix", cfg->source);
    *ops = &lade__source_s3;
    return 0;
#else
    return lade__fail(LADE_EUNSUPPORTED, "dataset %s: the s3 source needs libcurl, which this build lacks (LADE_WITH_CURL)",
                      cfg->source);
#endif
  }
  struct stat st;
  int exists = stat(cfg->source, &st) == 0;
  if (cfg->source_type == LADE__SRC_HDF5 ||
      (cfg->source_type == LADE__SRC_AUTO && exists && S_ISREG(st.st_mode) &&
       (has_suffix(cfg->source, ".h5") || has_suffix(cfg->source, ".hdf5") || has_suffix(cfg->source, ".he5")))) {
#ifdef LADE_HAVE_HDF5
    if (!exists)
      return lade__fail(errno == ENOENT ? LADE_ENOENT : LADE_EIO, "dataset %s: %s", cfg->source, strerror(errno));
    *ops = &lade__source_hdf5;
    return 0;
#else
    return lade__fail(LADE_EUNSUPPORTED,
                      "dataset %s: the hdf5 source needs libhdf5, which this build lacks (configure with "
                      "LADE_WITH_HDF5=ON after apt-get install libhdf5-dev)", cfg->source);
#endif
  }
  if (cfg->source_type == LADE__SRC_TAR || (cfg->source_type == LADE__SRC_AUTO && !exists && strchr(cfg->source, '{'))) {
    *ops = &lade__source_tar; /* a brace pattern names no file itself; the source checks each shard */
    return 0;
  }
  if (!exists)
    return lade__fail(errno == ENOENT ? LADE_ENOENT : LADE_EIO, "dataset %s: %s", cfg->source, strerror(errno));
  switch (cfg->source_type) {
    case LADE__SRC_DIR:
      if (!S_ISDIR(st.st_mode)) return lade__fail(LADE_EINVAL, "dataset %s: source_type=dir needs a folder", cfg->source);
      *ops = &lade__source_dir;
      return 0;
    case LADE__SRC_NPY:
      *ops = &lade__source_npy;
      return 0;
    default:
      break;
  }
  if (S_ISREG(st.st_mode) && (has_suffix(cfg->source, ".tar") || has_suffix(cfg->source, ".txt"))) {
    *ops = &lade__source_tar;
    return 0;
  }
  if (S_ISREG(st.st_mode)) {
    if (!has_suffix(cfg->source, ".npy"))
      return lade__fail(LADE_EINVAL,
                        "dataset %s is a file but not a .npy, a .tar, a .tfrecord or a .txt list of shards; give a folder "
                        "or one of those (source_type=tfrecord for TFRecord files named otherwise)", cfg->source);
    *ops = &lade__source_npy;
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) return lade__fail(LADE_EINVAL, "dataset %s is neither a folder nor a file", cfg->source);
  int shards = folder_shards(cfg->source); /* a folder of TFRecord files is local: no remote check */
  *ops = shards == TAR_SHARDS ? &lade__source_tar
         : shards == TFRECORD_FILES ? &lade__source_tfrecord
         : folder_looks_npy(cfg->source, 0) ? &lade__source_npy
                                            : &lade__source_dir;
  return 0;
}
