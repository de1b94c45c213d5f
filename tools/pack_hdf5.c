/*
 * pack_hdf5.c - `lade pack SRC --to hdf5 OUT.h5`: writes what the loader
 * delivers for SRC (unshuffled, the npy transform unless --transform says
 * otherwise) as dataset `data` (N x sample shape, the samples' dtype, a
 * contiguous layout: the fastest for the hdf5 source to read) and, when SRC
 * has classes, `labels` (int64, N). Read back with source=OUT.h5, sample i
 * is sample i of SRC, same label.
 *
 * Image folders have no fixed shape, so they are refused unless a transform
 * that gives one is named (--transform imagenet-eval --set image_dtype=uint8
 * stores the decoded, resized, centre-cropped HxWxC images).
 *
 * Resume (as tar packing keeps complete shards): everything goes to
 * OUT.h5.part, whose attributes say the settings checksum (lade_pack_sum)
 * and how many leading samples are written and flushed (lade_pack_done);
 * the count is raised only after H5Fflush + fsync of the data, about once a
 * second, and flushed and synced itself. A second
 * run with the same settings reopens the .part and goes on from there; any
 * other .part is replaced. The finished file is renamed to OUT.h5.
 * LADE_PACK_STOP_AFTER=N (a test hook) makes the run exit, as a crash
 * would, once N samples are committed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lade/lade.h"
#include "pack.h"
#include "shown.h"

#ifndef LADE_HAVE_HDF5
int lade_tool_pack_hdf5(lade_config_t *cfg, const char *src, const char *out, const char *transform) {
  (void)cfg, (void)src, (void)out, (void)transform;
  fprintf(stderr, "lade pack: --to hdf5 needs libhdf5, which this build lacks (configure with LADE_WITH_HDF5=ON "
                  "after apt-get install libhdf5-dev)\n");
  return 1;
}
#else
#include <hdf5.h>

#define PACK_BATCH 64

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The HDF5 file type h5py writes for a lade dtype (a new type the caller
 * closes); -1 for none. */
static hid_t file_type(int dtype) {
  switch (dtype) {
    case LADE_DTYPE_UINT8: return H5Tcopy(H5T_STD_U8LE);
    case LADE_DTYPE_INT8: return H5Tcopy(H5T_STD_I8LE);
    case LADE_DTYPE_INT16: return H5Tcopy(H5T_STD_I16LE);
    case LADE_DTYPE_UINT16: return H5Tcopy(H5T_STD_U16LE);
    case LADE_DTYPE_INT32: return H5Tcopy(H5T_STD_I32LE);
    case LADE_DTYPE_UINT32: return H5Tcopy(H5T_STD_U32LE);
    case LADE_DTYPE_INT64: return H5Tcopy(H5T_STD_I64LE);
    case LADE_DTYPE_UINT64: return H5Tcopy(H5T_STD_U64LE);
    case LADE_DTYPE_FLOAT32: return H5Tcopy(H5T_IEEE_F32LE);
    case LADE_DTYPE_FLOAT64: return H5Tcopy(H5T_IEEE_F64LE);
    case LADE_DTYPE_FLOAT16: { /* IEEE half, as h5py writes numpy float16 */
      hid_t t = H5Tcopy(H5T_IEEE_F32LE);
      if (t < 0 || H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0)
        return -1;
      return t;
    }
    case LADE_DTYPE_BOOL: { /* h5py's bool: enum int8 {FALSE = 0, TRUE = 1} */
      hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
      int8_t f = 0, v = 1;
      if (t < 0 || H5Tenum_insert(t, "FALSE", &f) < 0 || H5Tenum_insert(t, "TRUE", &v) < 0) return -1;
      return t;
    }
  }
  return -1;
}

/* The memory type of a delivered batch (the host's order). */
static hid_t mem_type(int dtype, hid_t ft) {
  switch (dtype) {
    case LADE_DTYPE_UINT8: return H5Tcopy(H5T_NATIVE_UINT8);
    case LADE_DTYPE_INT8: return H5Tcopy(H5T_NATIVE_INT8);
    case LADE_DTYPE_INT16: return H5Tcopy(H5T_NATIVE_INT16);
    case LADE_DTYPE_UINT16: return H5Tcopy(H5T_NATIVE_UINT16);
    case LADE_DTYPE_INT32: return H5Tcopy(H5T_NATIVE_INT32);
    case LADE_DTYPE_UINT32: return H5Tcopy(H5T_NATIVE_UINT32);
    case LADE_DTYPE_INT64: return H5Tcopy(H5T_NATIVE_INT64);
    case LADE_DTYPE_UINT64: return H5Tcopy(H5T_NATIVE_UINT64);
    case LADE_DTYPE_FLOAT32: return H5Tcopy(H5T_NATIVE_FLOAT);
    case LADE_DTYPE_FLOAT64: return H5Tcopy(H5T_NATIVE_DOUBLE);
    default: { /* float16, bool: the file's type in the host's order */
      hid_t t = H5Tcopy(ft);
      if (t >= 0 && H5Tget_size(t) > 1) H5Tset_order(t, H5Tget_order(H5T_NATIVE_INT));
      return t;
    }
  }
}

static int attr_u64(hid_t obj, const char *name, uint64_t *v, int write) {
  if (write) {
    hid_t a = H5Aexists(obj, name) > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
    if (a < 0) {
      hid_t sp = H5Screate(H5S_SCALAR);
      a = H5Acreate2(obj, name, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
      H5Sclose(sp);
    }
    int rc = a >= 0 && H5Awrite(a, H5T_NATIVE_UINT64, v) >= 0 ? 0 : -1;
    if (a >= 0) H5Aclose(a);
    return rc;
  }
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  int rc = a >= 0 && H5Aread(a, H5T_NATIVE_UINT64, v) >= 0 ? 0 : -1;
  if (a >= 0) H5Aclose(a);
  return rc;
}

/* fsync of the file under libhdf5's (sec2) driver: the data reaches the
 * disk before the count that vouches for it, as tar packing's manifest. */
static int sync_file(hid_t f) {
  void *h = NULL;
  if (H5Fget_vfd_handle(f, H5P_DEFAULT, &h) < 0 || !h) return -1;
  return fsync(*(int *)h) ? -1 : 0;
}

/* The settings checksum: what was asked (source, transform, every other
 * setting through the batch shape and dtype), the listing (names, labels) and
 * each sample file's size and mtime. */
static int settings_sum(lade_loader_t *L, const lade_batch_t *b, const char *src, const char *transform,
                        uint64_t n, int64_t *labels, uint64_t *out) {
  uint64_t h = 14695981039346656037ull;
  h = fnv(h, "lade-pack hdf5 1", 17);
  h = fnv(h, src, strlen(src) + 1);
  h = fnv(h, transform, strlen(transform) + 1);
  h = fnv(h, &n, sizeof n);
  h = fnv(h, &b->dtype, sizeof b->dtype);
  h = fnv(h, &b->ndim, sizeof b->ndim);
  h = fnv(h, b->shape + 1, sizeof(int64_t) * (size_t)(b->ndim - 1));
  static char path[2 * 4096 + 64];
  struct stat st;
  if (stat(src, &st) == 0 && S_ISREG(st.st_mode)) {
    h = fnv(h, &st.st_size, sizeof st.st_size);
    h = fnv(h, &st.st_mtim, sizeof st.st_mtim);
  }
  for (uint64_t i = 0; i < n; i++) {
    if (lade_loader_sample(L, i, path, sizeof path, &labels[i])) return -1;
    h = fnv(h, path, strlen(path) + 1);
    h = fnv(h, &labels[i], sizeof labels[i]);
    if (stat(path, &st) == 0) {
      h = fnv(h, &st.st_size, sizeof st.st_size);
      h = fnv(h, &st.st_mtim, sizeof st.st_mtim);
    }
  }
  *out = h;
  return 0;
}

/* Opens OUT.part of an earlier run with the same settings: *done samples kept. */
static hid_t reopen_part(const char *part, uint64_t sum, uint64_t n, hid_t *dset, uint64_t *done) {
  struct stat st;
  if (stat(part, &st) != 0) return -1;
  hid_t f = H5Fopen(part, H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return -1;
  uint64_t s = 0, d = 0;
  hid_t ds = H5Lexists(f, "data", H5P_DEFAULT) > 0 ? H5Dopen2(f, "data", H5P_DEFAULT) : -1;
  if (ds >= 0 && attr_u64(f, "lade_pack_sum", &s, 0) == 0 && s == sum && attr_u64(f, "lade_pack_done", &d, 0) == 0 &&
      d <= n) {
    *dset = ds;
    *done = d;
    return f;
  }
  if (ds >= 0) H5Dclose(ds);
  H5Fclose(f);
  return -1;
}

static hid_t create_part(const char *part, const lade_batch_t *b, uint64_t n, const int64_t *labels, int classes,
                         uint64_t sum, hid_t ft, hid_t *dset) {
  unlink(part);
  hid_t f = H5Fcreate(part, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return -1;
  hsize_t dims[LADE_MAX_DIMS];
  dims[0] = n;
  for (int d = 1; d < b->ndim; d++) dims[d] = (hsize_t)b->shape[d];
  hid_t sp = H5Screate_simple(b->ndim, dims, NULL);
  hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_alloc_time(pl, H5D_ALLOC_TIME_EARLY); /* the data's place is fixed before any metadata flush */
  *dset = sp >= 0 && pl >= 0 ? H5Dcreate2(f, "data", ft, sp, H5P_DEFAULT, pl, H5P_DEFAULT) : -1;
  if (sp >= 0) H5Sclose(sp);
  if (pl >= 0) H5Pclose(pl);
  int rc = *dset >= 0 ? 0 : -1;
  if (!rc && classes) {
    hsize_t ln = n;
    hid_t ls = H5Screate_simple(1, &ln, NULL);
    hid_t ld = ls >= 0 ? H5Dcreate2(f, "labels", H5T_STD_I64LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (ld < 0 || H5Dwrite(ld, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels) < 0) rc = -1;
    if (ld >= 0) H5Dclose(ld);
    if (ls >= 0) H5Sclose(ls);
  }
  uint64_t zero = 0;
  if (!rc && (attr_u64(f, "lade_pack_sum", &sum, 1) || attr_u64(f, "lade_pack_done", &zero, 1))) rc = -1;
  if (!rc && H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) rc = -1;
  if (rc) {
    if (*dset >= 0) H5Dclose(*dset);
    H5Fclose(f);
    return -1;
  }
  return f;
}

/* NULL when OUT may be replaced: it does not exist, or it is an HDF5 file
 * an earlier `lade pack --to hdf5` wrote (its lade_pack_sum attribute says
 * so); else why not. As the tar output refuses a file where its folder
 * goes, a pack never replaces what it did not write. */
static const char *out_taken(const char *out) {
  struct stat st;
  if (stat(out, &st) != 0) return NULL; /* absent (or unreadable: the rename at the end says why) */
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return "is not an HDF5 file";
  int ours = H5Aexists(f, "lade_pack_sum") > 0;
  H5Fclose(f);
  return ours ? NULL : "is an HDF5 file that lade pack did not write";
}

/* Refuses an OUT that is not ours and an HDF5 SRC, then sets up cfg for
 * the pack: unshuffled batches of PACK_BATCH, one epoch, one rank. Returns
 * 0 or the exit status (said). */
static int pack_setup(lade_config_t *cfg, const char *src, const char *out, const char *transform) {
  int auto_xf = !strcmp(transform, "auto");
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  const char *taken = out_taken(out);
  if (taken) {
    fprintf(stderr, "lade pack: %s exists and %s: not overwritten (remove it, or choose another OUT)\n", out, taken);
    return 1;
  }
  size_t sl = strlen(src);
  char st_buf[16] = "";
  lade_config_get(cfg, "source_type", st_buf, sizeof st_buf);
  if (!strcmp(st_buf, "hdf5") || (sl > 3 && !strcmp(src + sl - 3, ".h5")) || (sl > 5 && !strcmp(src + sl - 5, ".hdf5")) ||
      (sl > 4 && !strcmp(src + sl - 4, ".he5"))) {
    /* the loader's workers would call the serial libhdf5 while this thread writes */
    fprintf(stderr, "lade pack: %s is an HDF5 file already (use h5repack or h5py to rewrite it)\n", src);
    return 2;
  }
  char bs[16];
  snprintf(bs, sizeof bs, "%d", PACK_BATCH);
  if (lade_config_set(cfg, "source", src) || lade_config_set(cfg, "transform", auto_xf ? "npy" : transform) ||
      lade_config_set(cfg, "shuffle", "false") || lade_config_set(cfg, "batch_size", bs) ||
      lade_config_set(cfg, "epochs", "1") || lade_config_set(cfg, "drop_last", "false") ||
      lade_config_set(cfg, "rank", "0") || lade_config_set(cfg, "world_size", "1")) {
    fprintf(stderr, "lade pack: %s\n", lade_tool_error());
    return 2;
  }
  return 0;
}

/* Writes batch b (at sample done) and the loader's batches after it into
 * dset (file space fsp) of f, the .part file, up to sample n; commits the
 * count about once a second (see the top of the file). *bp: the batch not
 * yet written, if any, for the caller to release. Returns 0 or 1 (said). */
static int write_batches(lade_loader_t *L, lade_batch_t **bp, hid_t f, hid_t dset, hid_t mt, hid_t fsp,
                         const char *part, uint64_t n, uint64_t done) {
  lade_batch_t *b = *bp;
  int rc = 0;
  const char *stop_env = getenv("LADE_PACK_STOP_AFTER");
  uint64_t stop_after = stop_env ? strtoull(stop_env, NULL, 10) : 0;
  int tty = isatty(2);
  double last_commit = now_s(), last_show = 0;
  uint64_t pos = done;
  while (!rc && b && pos < n) {
    hsize_t start[LADE_MAX_DIMS] = {0}, cnt[LADE_MAX_DIMS];
    start[0] = pos;
    cnt[0] = (hsize_t)b->shape[0];
    for (int d = 1; d < b->ndim; d++) cnt[d] = (hsize_t)b->shape[d];
    hid_t ms = H5Screate_simple(b->ndim, cnt, NULL);
    if ((uint64_t)b->indices[0] != pos || ms < 0 ||
        H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, cnt, NULL) < 0 ||
        H5Dwrite(dset, mt, ms, fsp, H5P_DEFAULT, b->data) < 0) {
      fprintf(stderr, "lade pack: cannot write samples %llu.. to %s\n", (unsigned long long)pos, part);
      rc = 1;
    }
    if (ms >= 0) H5Sclose(ms);
    pos += (uint64_t)b->shape[0];
    lade_batch_release(b);
    b = NULL;
    double t = now_s();
    if (!rc && (t - last_commit > 1.0 || pos == n || (stop_after && pos >= stop_after))) {
      /* data first, then the count that vouches for it */
      if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0 || sync_file(f) || attr_u64(f, "lade_pack_done", &pos, 1) ||
          H5Fflush(f, H5F_SCOPE_GLOBAL) < 0 || sync_file(f)) {
        fprintf(stderr, "lade pack: cannot flush %s\n", part);
        rc = 1;
      }
      last_commit = t;
      if (!rc && stop_after && pos >= stop_after && pos < n) _exit(3); /* the test hook: a crash */
    }
    if (tty && (t - last_show > 0.2 || pos == n)) {
      last_show = t;
      fprintf(stderr, "\rlade pack: sample %llu/%llu", (unsigned long long)pos, (unsigned long long)n);
    }
    if (!rc && pos < n && (lade_loader_next(L, &b) || !b)) {
      fprintf(stderr, "%slade pack: %s\n", tty ? "\n" : "", b ? lade_tool_error() : "the loader ended early");
      rc = 1;
    }
  }
  *bp = b;
  return rc;
}

int lade_tool_pack_hdf5(lade_config_t *cfg, const char *src, const char *out, const char *transform) {
  int rc = pack_setup(cfg, src, out, transform);
  if (rc) return rc;
  const char *hint = !strcmp(transform, "auto")
                         ? " (pack --to hdf5 stores fixed-shape arrays: a folder of images has none; use "
                           "--transform imagenet-eval --set image_dtype=uint8 to store decoded HxWxC images)"
                         : "";
  lade_loader_t *L = NULL;
  if (lade_loader_create(&L, cfg)) {
    fprintf(stderr, "lade pack: %s%s\n", lade_tool_error(), hint);
    return 1;
  }
  uint64_t n = 0;
  uint32_t classes = 0;
  lade_batch_t *b = NULL;
  rc = lade_loader_info(L, &n, NULL, NULL) || lade_loader_classes(L, &classes) || lade_loader_next(L, &b) || !b;
  if (rc) {
    fprintf(stderr, "lade pack: %s%s\n", lade_tool_error(), hint);
    lade_loader_destroy(L);
    return 1;
  }
  int64_t *labels = calloc(n, sizeof *labels);
  uint64_t sum = 0;
  if (!labels || settings_sum(L, b, src, transform, n, labels, &sum)) {
    fprintf(stderr, "lade pack: %s\n", labels ? lade_tool_error() : "out of memory");
    lade_batch_release(b);
    lade_loader_destroy(L);
    free(labels);
    return 1;
  }
  size_t plen = strlen(out) + 6;
  char *part = malloc(plen);
  snprintf(part, plen, "%s.part", out);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t ft = file_type(b->dtype), mt = ft >= 0 ? mem_type(b->dtype, ft) : -1, dset = -1;
  uint64_t done = 0;
  hid_t f = ft >= 0 ? reopen_part(part, sum, n, &dset, &done) : -1;
  int resumed = f >= 0 && done > 0;
  if (f < 0 && ft >= 0) f = create_part(part, b, n, labels, classes != 0, sum, ft, &dset);
  if (f < 0 || mt < 0) {
    fprintf(stderr, "lade pack: cannot %s %s (%s batches)\n", ft < 0 ? "store" : "create", part,
            lade_dtype_name(b->dtype));
    rc = 1;
  }
  /* committed counts are multiples of the batch size, except the last */
  done -= done % PACK_BATCH;
  if (!rc && done && done < n) {
    lade_batch_release(b);
    b = NULL;
    if (lade_loader_seek(L, 0, done / PACK_BATCH) || lade_loader_next(L, &b) || !b) {
      fprintf(stderr, "lade pack: %s\n", lade_tool_error());
      rc = 1;
    }
  }
  hid_t fsp = rc ? -1 : H5Dget_space(dset);
  if (!rc) rc = write_batches(L, &b, f, dset, mt, fsp, part, n, done);
  if (isatty(2)) fputc('\n', stderr);
  lade_batch_release(b);
  lade_loader_destroy(L);
  if (fsp >= 0) H5Sclose(fsp);
  if (dset >= 0) H5Dclose(dset);
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  if (f >= 0 && H5Fclose(f) < 0) rc = 1;
  if (!rc && rename(part, out)) {
    fprintf(stderr, "lade pack: %s: %s\n", out, strerror(errno));
    rc = 1;
  }
  if (!rc) {
    printf("packed %llu samples into %s (dataset 'data'%s)", (unsigned long long)n, out,
           classes ? " and 'labels'" : "");
    if (resumed) printf("; resumed at sample %llu", (unsigned long long)done);
    printf("\n");
  }
  free(part);
  free(labels);
  return rc;
}
#endif
