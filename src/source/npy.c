/*
 * npy.c - the `npy` source: one stacked .npy (N x ...) or a folder of .npy
 * files of one dtype and shape (flat, or in class folders for labels).
 *
 * read_payload() puts the payload straight into the batch slot: for a
 * stacked file one pread at header + i * sample_bytes; for a folder one
 * readv() whose first buffer takes the header and whose second is the slot,
 * after which the header bytes are compared with the dataset's (a memcmp;
 * a full parse only when they differ, to name the shape or dtype mismatch).
 *
 * Files numpy writes that are not C order in the host's byte order (np.save
 * of a transposed array, dtype '>f4') are converted on the way into the
 * slot, still with no buffer in between: a byte-swapped payload is read as
 * above and swapped in place; a fortran-order payload is mapped (mmap) and
 * gathered into the slot in C order - for a stacked file the whole file is
 * mapped once, since row i is strided across all of it. Every file of a
 * folder must have the first file's dtype, shape, order and byte order.
 *
 * What np.load reads loads: zero-size samples (a folder of float32[0], a
 * stacked (3, 0)) give batches of shape (B, 0) as np.stack makes them;
 * Python 2 headers ((1L, 2L)) parse. A stacked file with 0 rows is an empty
 * dataset (an error, as an empty folder is). A sample of more than
 * LADE__NPY_SAMPLE_DIMS dimensions has no batch shape (lade_batch_t's fixed
 * arrays): it is refused naming the file, the limit and why, except with
 * transform=raw, which takes each sample as .npy bytes and needs no shape (a
 * stacked file's row header is written up to LADE_MAX_DIMS dimensions).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/npyfmt.h"
#include "source.h"

#define HDR_MAX 4096

typedef struct npy_impl {
  bool stacked;
  int fd;                    /* stacked: the file */
  lade__file_ver_t ver;      /* stacked: the file as open saw it, checked after every row */
  int rootfd;                /* folder: the root */
  lade__listing_t list;
  char root[LADE__PATH_MAX];
  lade__npy_header_t hdr;    /* the dataset's (first file's) header */
  uint8_t hdr_bytes[HDR_MAX];
  size_t sample_bytes;
  const uint8_t *map;        /* stacked, fortran order: the whole file */
  size_t map_len;
  char row_hdr[256];         /* stacked: a C-order .npy header of one row, for read() */
  size_t row_hdr_len;
  uint64_t max_sample;       /* max_sample_bytes */
} npy_impl_t;

static int parse_expected(const struct lade_config *cfg, const char *what, const lade__npy_header_t *h, int skip_first) {
  /* optional npy_dtype / npy_shape settings must match the data */
  if (cfg->npy_dtype[0] && strcmp(cfg->npy_dtype, lade_dtype_name(h->dtype)) != 0)
    return lade__fail(LADE_ESHAPE, "%s: dtype is %s, expected %s (setting npy_dtype)", what, lade_dtype_name(h->dtype),
                      cfg->npy_dtype);
  if (cfg->npy_shape[0]) {
    char got[128];
    size_t n = 0;
    got[0] = '\0';
    for (int i = skip_first; i < h->ndim; i++)
      n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", i > skip_first ? "," : "", (long long)h->shape[i]);
    if (strcmp(got, cfg->npy_shape) != 0)
      return lade__fail(LADE_ESHAPE, "%s: sample shape is (%s), expected (%s) (setting npy_shape)", what, got,
                        cfg->npy_shape);
  }
  return 0;
}

/* A sample of ndim > LADE__NPY_SAMPLE_DIMS dimensions (of the array h in
 * file what): why it is refused, and the ways that work. */
static int too_many_dims(const char *what, const lade__npy_header_t *h, int ndim, bool stacked, bool raw_works) {
  char shape[LADE__NPY_MAX_DIMS * 22 + 8];
  size_t n = 0;
  for (int i = 0; i < h->ndim && n < sizeof shape; i++)
    n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? ", " : "", (long long)h->shape[i]);
  return lade__fail(LADE_ESHAPE,
                    "%s: samples of %d dimensions; a lade batch holds at most %d sample dimensions: lade_batch_t's "
                    "shape and strides are fixed arrays of LADE_MAX_DIMS (%d) entries in the C ABI, one of them the "
                    "batch dimension (the array's shape is (%s); numpy allows 32 dimensions, 64 from numpy 2; DLPack "
                    "has no limit). Save the arrays with at most %d sample dimensions (%s, the shape restored after "
                    "loading)%s",
                    what, ndim, LADE__NPY_SAMPLE_DIMS, LADE_MAX_DIMS, shape, LADE__NPY_SAMPLE_DIMS,
                    stacked ? "a.reshape(len(a), -1)" : "a.reshape(-1)",
                    raw_works ? ", or read each sample as the bytes of a .npy with transform=raw (a uint8 row: "
                                "np.load(io.BytesIO(row)))"
                              : "");
}

static int read_header_fd(int fd, const char *what, uint8_t *buf, lade__npy_header_t *h) {
  ssize_t n = pread(fd, buf, HDR_MAX, 0);
  if (n < 0) return lade__fail(LADE_EIO, "cannot read %s: %s", what, strerror(errno));
  int rc = lade__npy_parse(buf, (size_t)n, h);
  if (rc == LADE_ERANGE && (size_t)n == HDR_MAX) rc = lade__fail(LADE_EFORMAT, "npy header longer than %d bytes", HDR_MAX);
  if (rc) return lade__fail_prefix(rc == LADE_ERANGE ? LADE_EFORMAT : rc, "%s: ", what);
  return 0;
}

static int npy_open(lade__source_t *s, const struct lade_config *cfg) {
  npy_impl_t *m = calloc(1, sizeof *m);
  if (!m) return lade__fail(LADE_ENOMEM, "npy source: out of memory");
  m->fd = m->rootfd = -1;
  m->max_sample = cfg->max_sample_bytes;
  snprintf(m->root, sizeof m->root, "%s", cfg->source);
  struct stat st;
  int rc = 0;
  bool wide = false; /* samples of more than LADE__NPY_SAMPLE_DIMS dimensions (transform=raw): untyped */
  if (stat(cfg->source, &st) != 0) {
    rc = lade__fail(LADE_ENOENT, "dataset %s: %s", cfg->source, strerror(errno));
    goto fail;
  }
  if (S_ISREG(st.st_mode)) {
    m->stacked = true;
    struct stat fst;
    m->fd = lade__open_regular(AT_FDCWD, cfg->source, cfg->source, &fst);
    if (m->fd < 0) {
      rc = m->fd;
      m->fd = -1;
      goto fail;
    }
    lade__file_ver_of(&m->ver, &fst);
    rc = read_header_fd(m->fd, cfg->source, m->hdr_bytes, &m->hdr);
    if (rc) goto fail;
    if (m->hdr.ndim < 1) {
      rc = lade__fail(LADE_ESHAPE, "%s: a stacked .npy needs at least one dimension (N x ...)", cfg->source);
      goto fail;
    }
    if (m->hdr.shape[0] == 0) {
      rc = lade__fail(LADE_EEMPTY, "%s: the stacked array has 0 samples", cfg->source);
      goto fail;
    }
    /* transform=raw: a row of any rank a .npy header can be written for */
    int sd = m->hdr.ndim - 1;
    wide = sd > LADE__NPY_SAMPLE_DIMS;
    bool raw = cfg->transform == LADE__XF_RAW && sd <= LADE_MAX_DIMS;
    rc = wide && !raw ? too_many_dims(cfg->source, &m->hdr, sd, true, sd <= LADE_MAX_DIMS) : 0;
    if (!rc) rc = parse_expected(cfg, cfg->source, &m->hdr, 1);
    if (rc) goto fail;
    if ((uint64_t)st.st_size < m->hdr.header_len + m->hdr.payload_bytes) {
      rc = lade__fail(LADE_EFORMAT, "%s is truncated: %lld bytes, header says %zu", cfg->source,
                      (long long)st.st_size, m->hdr.header_len + m->hdr.payload_bytes);
      goto fail;
    }
    s->count = (uint64_t)m->hdr.shape[0];
    m->sample_bytes = m->hdr.payload_bytes / (size_t)m->hdr.shape[0];
    s->ndim = wide ? 0 : sd; /* wide (raw): no typed sample */
    for (int i = 0; i < s->ndim; i++) s->shape[i] = m->hdr.shape[i + 1];
    int hl = lade__npy_write_header(m->row_hdr, sizeof m->row_hdr, m->hdr.dtype, sd, m->hdr.shape + 1);
    if (hl < 0) {
      rc = lade__fail_prefix(hl, "%s: ", cfg->source);
      goto fail;
    }
    m->row_hdr_len = (size_t)hl;
    if (m->hdr.fortran) {
      m->map_len = m->hdr.header_len + m->hdr.payload_bytes;
      void *p = mmap(NULL, m->map_len, PROT_READ, MAP_SHARED, m->fd, 0);
      if (p == MAP_FAILED) {
        rc = lade__fail(LADE_EIO, "cannot map %s (a fortran-order stacked file): %s", cfg->source, strerror(errno));
        goto fail;
      }
      m->map = p;
    }
  } else {
    rc = lade__listing_build(&m->list, cfg->source);
    if (rc) goto fail;
    if (m->list.count == 0) {
      rc = lade__fail(LADE_EEMPTY, "dataset folder %s holds no .npy files", cfg->source);
      goto fail;
    }
    m->rootfd = open(cfg->source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (m->rootfd < 0) {
      rc = lade__fail(LADE_EIO, "cannot open %s: %s", cfg->source, strerror(errno));
      goto fail;
    }
    char what[LADE__PATH_MAX + 256];
    snprintf(what, sizeof what, "%s/%s", m->root, lade__listing_path(&m->list, 0));
    struct stat fst;
    int fd = lade__open_regular(m->rootfd, lade__listing_path(&m->list, 0), what, &fst);
    if (fd < 0) {
      rc = fd;
      goto fail;
    }
    rc = read_header_fd(fd, what, m->hdr_bytes, &m->hdr);
    close(fd);
    if (rc) goto fail;
    /* transform=raw: the files' bytes, of any rank */
    wide = m->hdr.ndim > LADE__NPY_SAMPLE_DIMS;
    rc = wide && cfg->transform != LADE__XF_RAW ? too_many_dims(what, &m->hdr, m->hdr.ndim, false, true) : 0;
    if (!rc) rc = parse_expected(cfg, what, &m->hdr, 0);
    if (rc) goto fail;
    s->count = m->list.count;
    s->labels = m->list.label;
    s->classes = m->list.classes;
    s->class_names = (const char *const *)m->list.class_names;
    m->sample_bytes = m->hdr.payload_bytes;
    s->ndim = wide ? 0 : m->hdr.ndim;
    for (int i = 0; i < s->ndim; i++) s->shape[i] = m->hdr.shape[i];
  }
  s->dtype = wide ? 0 : m->hdr.dtype;
  s->payload_bytes = m->sample_bytes;
  s->impl = m;
  return 0;
fail:
  if (m->map) munmap((void *)m->map, m->map_len);
  if (m->fd >= 0) close(m->fd);
  if (m->rootfd >= 0) close(m->rootfd);
  lade__listing_free(&m->list);
  free(m);
  return rc;
}

static void npy_close(lade__source_t *s) {
  npy_impl_t *m = s->impl;
  if (!m) return;
  if (m->map) munmap((void *)m->map, m->map_len);
  if (m->fd >= 0) close(m->fd);
  if (m->rootfd >= 0) close(m->rootfd);
  lade__listing_free(&m->list);
  free(m);
  s->impl = NULL;
}

static void npy_describe(lade__source_t *s, uint64_t idx, char *buf, size_t size) {
  npy_impl_t *m = s->impl;
  if (m->stacked)
    snprintf(buf, size, "%s[%llu]", m->root, (unsigned long long)idx);
  else
    snprintf(buf, size, "%s/%s", m->root, lade__listing_path(&m->list, idx));
}

static int pread_full(int fd, void *dst, size_t len, off_t off, const char *root, uint64_t idx) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (uint8_t *)dst + got, len - got, off + (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return lade__fail(LADE_EIO, "cannot read %s[%llu]: %s", root, (unsigned long long)idx, strerror(errno));
    if (n == 0) return lade__fail(LADE_EIO, "%s[%llu]: file ended early", root, (unsigned long long)idx);
    got += (size_t)n;
  }
  return 0;
}

/* The header of a folder file whose bytes differ from the dataset's: parsed
 * into *h; an error naming the file unless it has the same dtype, shape,
 * order and byte order (it may still be laid out differently: other
 * version, padding or key order). */
static int other_header(npy_impl_t *m, int fd, const char *rel, lade__npy_header_t *h) {
  uint8_t buf[HDR_MAX];
  char what[LADE__PATH_MAX + 256];
  snprintf(what, sizeof what, "%s/%s", m->root, rel);
  int rc = read_header_fd(fd, what, buf, h);
  if (rc) return rc;
  if (!lade__npy_same(h, &m->hdr)) {
    char a[192], b[192];
    lade__npy_describe(h, a, sizeof a);
    lade__npy_describe(&m->hdr, b, sizeof b);
    return lade__fail(LADE_ESHAPE, "%s: %s differs from the dataset's %s", what, a, b);
  }
  return 0;
}

/* Reads len payload bytes at offset off of a folder file into dst. */
static int pread_file(npy_impl_t *m, int fd, const char *rel, void *dst, size_t len, size_t off) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (uint8_t *)dst + got, len - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return lade__fail(LADE_EIO, "cannot read %s/%s: %s", m->root, rel, strerror(errno));
    if (n == 0)
      return lade__fail(LADE_EFORMAT, "%s/%s is truncated: payload has %zu of %zu bytes", m->root, rel, got, len);
    got += (size_t)n;
  }
  return 0;
}

/* A fortran-order folder file: map it and gather its payload into dst. */
static int read_fortran_file(npy_impl_t *m, int fd, const char *rel, void *dst) {
  lade__npy_header_t h = m->hdr;
  uint8_t hdr[HDR_MAX];
  size_t hl = m->hdr.header_len;
  ssize_t n = pread(fd, hdr, hl, 0);
  if (n < 0) return lade__fail(LADE_EIO, "cannot read %s/%s: %s", m->root, rel, strerror(errno));
  if ((size_t)n < hl || memcmp(hdr, m->hdr_bytes, hl) != 0) {
    int rc = other_header(m, fd, rel, &h);
    if (rc) return rc;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return lade__fail(LADE_EIO, "cannot stat %s/%s: %s", m->root, rel, strerror(errno));
  size_t need = h.header_len + h.payload_bytes;
  if ((uint64_t)st.st_size < need)
    return lade__fail(LADE_EFORMAT, "%s/%s is truncated: %lld bytes, header says %zu", m->root, rel,
                      (long long)st.st_size, need);
  void *p = mmap(NULL, need, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return lade__fail(LADE_EIO, "cannot map %s/%s: %s", m->root, rel, strerror(errno));
  lade__npy_to_c(&h, -1, (const uint8_t *)p + h.header_len, dst);
  munmap(p, need);
  return 0;
}

/* A folder file into dst: one readv (header, then payload into the slot);
 * a header that differs in its bytes is parsed and the payload re-read at its
 * own offset. Byte-swapped payloads are swapped in place. */
static int read_file_payload(npy_impl_t *m, int fd, const char *rel, void *dst, size_t len) {
  if (m->hdr.fortran) return read_fortran_file(m, fd, rel, dst);
  uint8_t hdr[HDR_MAX];
  size_t hl = m->hdr.header_len;
  struct iovec iov[2] = {{hdr, hl}, {dst, len}};
  ssize_t n = readv(fd, iov, 2);
  if (n < 0) return lade__fail(LADE_EIO, "cannot read %s/%s: %s", m->root, rel, strerror(errno));
  size_t got = (size_t)n;
  int rc = 0;
  if (got < hl || memcmp(hdr, m->hdr_bytes, hl) != 0) {
    /* a short readv (rare for regular files) or a different header: slow path */
    lade__npy_header_t h;
    rc = other_header(m, fd, rel, &h);
    if (!rc) rc = pread_file(m, fd, rel, dst, len, h.header_len);
  } else if (got < hl + len) {
    rc = pread_file(m, fd, rel, (uint8_t *)dst + (got - hl), len - (got - hl), got);
  }
  if (!rc && m->hdr.swap) lade__npy_swap(dst, len / lade_dtype_size(m->hdr.dtype), lade_dtype_size(m->hdr.dtype));
  return rc;
}

/* Row idx of a stacked file into dst (sample_bytes). */
static int read_row(npy_impl_t *m, uint64_t idx, void *dst) {
  size_t len = m->sample_bytes;
  /* then the file rewritten in place since open (new bytes at the old
   * header's offsets) fails the row */
  if (m->map) {
    lade__npy_to_c(&m->hdr, (int64_t)idx, m->map + m->hdr.header_len, dst);
    return lade__file_check(m->fd, &m->ver, m->root);
  }
  int rc = pread_full(m->fd, dst, len, (off_t)(m->hdr.header_len + idx * len), m->root, idx);
  if (!rc) rc = lade__file_check(m->fd, &m->ver, m->root);
  if (!rc && m->hdr.swap) lade__npy_swap(dst, len / lade_dtype_size(m->hdr.dtype), lade_dtype_size(m->hdr.dtype));
  return rc;
}

static int npy_read_payload(lade__source_t *s, uint64_t idx, void *dst, size_t len) {
  npy_impl_t *m = s->impl;
  if (len != m->sample_bytes) return lade__fail(LADE_EINVAL, "npy: slot of %zu bytes for %zu-byte samples", len, m->sample_bytes);
  if (m->stacked) return read_row(m, idx, dst);
  const char *rel = lade__listing_path(&m->list, idx);
  char what[LADE__PATH_MAX * 2 + 2];
  snprintf(what, sizeof what, "%s/%s", m->root, rel);
  struct stat fst;
  int fd = lade__open_regular(m->rootfd, rel, what, &fst);
  if (fd < 0) return fd;
  int rc = read_file_payload(m, fd, rel, dst, len);
  close(fd);
  return rc;
}

/* All bytes of a sample as a .npy: a folder file as it is (the npy transform
 * converts it); a row of a stacked file as a C-order, native .npy of its own,
 * so that a cached copy is a complete sample too. */
static int npy_read(lade__source_t *s, uint64_t idx, lade__buf_t *out) {
  npy_impl_t *m = s->impl;
  if (m->stacked) {
    int rc = lade__buf_reserve(out, m->row_hdr_len + m->sample_bytes);
    if (rc) return rc;
    memcpy(out->data, m->row_hdr, m->row_hdr_len);
    rc = read_row(m, idx, out->data + m->row_hdr_len);
    out->len = rc ? 0 : m->row_hdr_len + m->sample_bytes;
    return rc;
  }
  return lade__read_file_max(m->rootfd, lade__listing_path(&m->list, idx), m->root, m->max_sample, out);
}

/* A folder file's own version; every row of a stacked file has the file's. */
static uint64_t npy_version(lade__source_t *s, uint64_t idx) {
  npy_impl_t *m = s->impl;
  struct stat st;
  if (m->stacked) return lade__stat_version(fstat(m->fd, &st), &st);
  return lade__stat_version(fstatat(m->rootfd, lade__listing_path(&m->list, idx), &st, 0), &st);
}

/* The payload of a row or a file, when a read copies it unchanged: C
 * order in the host's byte order. A folder file is taken to have the
 * dataset's header length (read_payload reads a longer one at its own). */
static int npy_extent(lade__source_t *s, uint64_t idx, char *path, size_t size, uint64_t *off, uint64_t *len) {
  npy_impl_t *m = s->impl;
  if (m->hdr.fortran || m->hdr.swap)
    return lade__fail(LADE_EUNSUPPORTED, "%s: %s arrays are converted on the way into the batch, not copied",
                      m->root, m->hdr.fortran ? "Fortran-order" : "byte-swapped");
  if (m->stacked) snprintf(path, size, "%s", m->root);
  else snprintf(path, size, "%s/%s", m->root, lade__listing_path(&m->list, idx));
  *off = m->hdr.header_len + (m->stacked ? idx * m->sample_bytes : 0);
  *len = m->sample_bytes;
  return 0;
}

const lade__source_ops_t lade__source_npy = {.name = "npy",
                                             .extent = npy_extent,
                                             .open = npy_open,
                                             .close = npy_close,
                                             .read = npy_read,
                                             .read_payload = npy_read_payload,
                                             .describe = npy_describe,
                                             .version = npy_version};
