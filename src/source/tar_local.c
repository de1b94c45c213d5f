/*
 * tar_local.c - the tar source's backend for shards on a file system
 * (tar_impl.h, docs/sources.md "tar shards"), for both container formats
 * (tar shards, TFRecord files: `x.tfrecord.ladeidx`, `tfrindex-HASH.bin`,
 * reads of a record's data and CRC). A shard's index is built by
 * one sequential pass over its headers (1 MiB buffered preads) the first
 * time it is opened and stored beside it (`SHARD.tar.ladeidx`) or in
 * index_dir, else cache_dir (`tarindex-HASH.bin`), keyed by the shard's
 * size and mtime and bound to it by a hash of sampled member headers: a
 * changed shard, or an index of another shard, is indexed again. Reads are
 * one pread() of the member's data into the caller's buffer, then one
 * fstat() that fails the read when the shard changed since it was indexed
 * (rewritten in place, or another file under its name): thread-safe, no
 * lock. The first KEEP_OPEN shards stay open; later ones are opened per
 * read.
 *
 * A compressed shard (a gzip or zlib TFRecord file: its index's comp) is
 * read through tfrec_gzip.c's cache of inflate cursors instead of a pread
 * at the record's offset, which is in the uncompressed bytes; reads in file
 * order cost one pass, reads out of order inflate again (the first restart
 * from a file's start is warned about, once per source).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tar_impl.h"

#define KEEP_OPEN 512u /* more shards than this are opened per read */

typedef struct local_state {
  int *fd; /* per shard, or -1: opened per read */
  lade__file_ver_t *ver; /* per shard: the version indexed, checked after every read */
  uint8_t *comp;         /* per shard: LADE__GZ_* of its index */
  lade__gz_cache_t *gz;  /* when a shard is compressed */
  size_t n;
} local_state_t;

static local_state_t *L(const lade__tar_t *t) { return t->be_state; }

/* Buffered sequential reads of a shard for the index pass. */
typedef struct rd {
  int fd;
  uint8_t *buf;
  size_t cap, len;
  uint64_t at; /* file offset of buf[0] */
} rd_t;

static long rd_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  rd_t *r = ctx;
  size_t done = 0;
  while (done < len) {
    uint64_t o = off + done;
    if (o >= r->at && o < r->at + r->len) {
      size_t k = (size_t)LADE__MIN(r->at + r->len - o, (uint64_t)(len - done));
      memcpy((uint8_t *)dst + done, r->buf + (o - r->at), k);
      done += k;
      continue;
    }
    if (len - done >= r->cap) { /* a large read goes straight to dst */
      ssize_t n = pread(r->fd, (uint8_t *)dst + done, len - done, (off_t)o);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -errno;
      if (n == 0) break;
      done += (size_t)n;
      continue;
    }
    ssize_t n = pread(r->fd, r->buf, r->cap, (off_t)o);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    r->at = o;
    r->len = (size_t)n;
    if (n == 0) break;
  }
  return (long)done;
}

static int index_build(const lade__tar_t *t, lade__tar_index_t *x, int fd, uint64_t size, const char *shard) {
  rd_t r = {.fd = fd, .cap = 1u << 20};
  r.buf = malloc(r.cap);
  if (!r.buf) return lade__fail(LADE_ENOMEM, "%s source: out of memory", t->fmt->name);
  int rc = t->fmt->walk(t, x, rd_pread, &r, size, shard);
  free(r.buf);
  return rc;
}

static long fd_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(*(int *)ctx, (uint8_t *)dst + done, len - done, (off_t)(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += (size_t)n;
  }
  return (long)done;
}

/* The format's bind() of the shard open as fd. */
static uint64_t index_bound(const lade__tar_t *t, const lade__tar_index_t *x, int fd) {
  return t->fmt->bind(t, x, fd_pread, &fd);
}

/* A sidecar's shard ends where its index says (lade__tar_index_tail). */
static int tail_ok(const lade__tar_t *t, const lade__tar_index_t *x, int fd, uint64_t size) {
  uint64_t off;
  size_t len;
  uint8_t b[512];
  if (lade__tar_index_tail(t, x, size, &off, &len) != 0) return 0;
  if (!len) return 1;
  if (fd_pread(&fd, b, len, off) != (long)len) return 0;
  for (size_t k = 0; k < len; k++)
    if (b[k]) return 0;
  return 1;
}

static void index_path(const lade__tar_t *t, char *out, size_t size, const struct lade_config *cfg, const char *shard) {
  const char *dir = lade__tar_index_dir(cfg);
  if (dir) {
    char abs[PATH_MAX];
    const char *p = realpath(shard, abs) ? abs : shard;
    snprintf(out, size, "%s/%s-%016llx.bin", dir, t->fmt->index_name,
             (unsigned long long)lade__hash64(p, strlen(p), 0x7461726964780000ull));
  } else {
    snprintf(out, size, "%s.ladeidx", shard);
  }
}

static lade__tar_ver_t ver_of_stat(const struct stat *st) {
  return (lade__tar_ver_t){(uint64_t)st->st_size, (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec};
}

static int local_open(lade__tar_t *t, const struct lade_config *cfg, lade__source_t *s) {
  (void)cfg;
  (void)s;
  local_state_t *l = calloc(1, sizeof *l);
  if (!l) return lade__fail(LADE_ENOMEM, "%s source: out of memory", t->fmt->name);
  t->be_state = l;
  l->n = t->shards.n;
  l->fd = malloc((l->n ? l->n : 1) * sizeof *l->fd);
  l->ver = calloc(l->n ? l->n : 1, sizeof *l->ver);
  l->comp = calloc(l->n ? l->n : 1, 1);
  if (!l->fd || !l->ver || !l->comp) return lade__fail(LADE_ENOMEM, "%s source: out of memory", t->fmt->name);
  for (size_t i = 0; i < l->n; i++) l->fd[i] = -1;
  return 0;
}

static int local_index(lade__tar_t *t, const struct lade_config *cfg, size_t i, lade__tar_index_t *x) {
  const char *shard = lade__tar_strs_at(&t->shards, i);
  struct stat st;
  int fd = lade__open_regular(AT_FDCWD, shard, shard, &st);
  if (fd < 0) return fd;
  char ipath[LADE__PATH_MAX + 64];
  index_path(t, ipath, sizeof ipath, cfg, shard);
  int rc = 0;
  lade__file_ver_of(&L(t)->ver[i], &st);
  /* a stored index counts when it was made from this shard: its size and
   * mtime, then the headers it sampled (an index copied from another shard
   * of the same size and mtime has other names there); and as compressed
   * as the settings say the shard is */
  int comp = t->fmt->compression ? t->fmt->compression(t, shard) : LADE__GZ_NONE;
  int found = lade__tar_index_load(t, x, ipath, ver_of_stat(&st)) == 0;
  /* a sidecar (lade pack, lade index) beside the shard: bound by size and
   * the sampled headers alone, and kept as it is (byte-stable, and the
   * dataset's folder may be read-only) */
  lade__tar_ver_t side = {(uint64_t)st.st_size, LADE__TAR_SIDECAR_A, LADE__TAR_SIDECAR_B};
  if (!found) {
    char spath[LADE__PATH_MAX + 64];
    snprintf(spath, sizeof spath, "%s" LADE__TAR_SIDECAR_SUFFIX, shard);
    found = lade__tar_index_load(t, x, spath, side) == 0 && tail_ok(t, x, fd, (uint64_t)st.st_size);
  }
  if (!found || x->comp != comp || index_bound(t, x, fd) != x->bind) {
    lade__tar_index_free(x);
    rc = index_build(t, x, fd, (uint64_t)st.st_size, shard);
    if (!rc) x->bind = index_bound(t, x, fd);
    if (!rc) lade__tar_index_store(t, x, ipath, ver_of_stat(&st), cfg);
  }
  L(t)->comp[i] = (uint8_t)x->comp;
  if (i < KEEP_OPEN)
    L(t)->fd[i] = fd;
  else
    close(fd);
  return rc;
}

int lade__tar_local_sidecar(const lade__tar_t *t, const char *shard, const char *out) {
  struct stat st;
  int fd = lade__open_regular(AT_FDCWD, shard, shard, &st);
  if (fd < 0) return fd;
  lade__tar_index_t x = {0};
  int comp = t->fmt->compression ? t->fmt->compression(t, shard) : LADE__GZ_NONE;
  int rc = comp ? lade__fail(LADE_EUNSUPPORTED, "%s: a compressed file: no sidecar index (remote compressed files "
                             "are not read; decompress it)", shard)
                : index_build(t, &x, fd, (uint64_t)st.st_size, shard);
  if (!rc) {
    x.bind = index_bound(t, &x, fd);
    lade__tar_ver_t side = {(uint64_t)st.st_size, LADE__TAR_SIDECAR_A, LADE__TAR_SIDECAR_B};
    if (lade__tar_index_store(t, &x, out, side, NULL) != 0)
      rc = lade__fail(LADE_EIO, "cannot write %s: %s", out, strerror(errno));
  }
  lade__tar_index_free(&x);
  close(fd);
  return rc;
}

/* Every shard indexed: the inflate cursors when a shard is compressed. */
static int local_start(lade__tar_t *t) {
  local_state_t *l = L(t);
  for (size_t i = 0; i < l->n; i++)
    if (l->comp[i]) {
      int rc = lade__gz_cache_create(&l->gz, l->n);
      return rc ? lade__fail_prefix(rc, "%s: ", lade__tar_strs_at(&t->shards, i)) : 0;
    }
  return 0;
}

/* Sample idx's size bytes at uncompressed offset off of its compressed
 * shard si, open as fd. */
static int gz_read(lade__tar_t *t, uint64_t idx, uint32_t si, int fd, uint64_t off, uint8_t *dst, size_t size) {
  const char *shard = lade__tar_strs_at(&t->shards, si);
  char what[LADE__PATH_MAX + 64];
  size_t got = 0;
  int first = 0;
  int rc = lade__gz_cache_read(L(t)->gz, si, L(t)->comp[si], fd_pread, &fd, off, dst, size, &got, &first);
  if (first)
    fprintf(stderr, "lade: warning: %s: a read out of file order inflates a compressed TFRecord file again from its "
            "start (a shuffled plan?); plan=shards or shuffle=false read each file once, or decompress the files "
            "(docs/sources.md)\n", shard);
  if (rc || got != size) t->fmt->what(t, idx, what, sizeof what);
  if (rc) return lade__fail_prefix(rc, "%s: %s: ", shard, what);
  if (got != size)
    return lade__fail(LADE_EIO, "%s: %s: the uncompressed stream ends after %zu of its %zu bytes (the file changed "
                      "since it was indexed?)", shard, what, got, size);
  return 0;
}

static int local_read(lade__tar_t *t, uint64_t idx, lade__buf_t *out) {
  uint32_t si = t->shard[idx];
  const char *shard = lade__tar_strs_at(&t->shards, si);
  char name[LADE__PATH_MAX + 64]; /* the member or record, for messages: made only for one */
#define NAME (t->fmt->what(t, idx, name, sizeof name), name)
  uint64_t size = lade__tar_span(t, idx), off = t->off[idx];
  int rc = lade__buf_reserve(out, (size_t)size + 1);
  if (rc) return lade__fail(rc, "%s: %s: no memory for its %llu bytes", shard, NAME, (unsigned long long)size);
  int fd = L(t)->fd[si];
  if (fd < 0) {
    struct stat st;
    fd = lade__open_regular(AT_FDCWD, shard, shard, &st);
    if (fd < 0) return fd;
  }
  size_t got = 0;
  if (L(t)->comp[si]) {
    rc = gz_read(t, idx, si, fd, off, out->data, (size_t)size);
    got = (size_t)size;
  }
  while (!rc && got < size) {
    ssize_t n = pread(fd, out->data + got, (size_t)size - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno; /* before NAME's snprintf */
      rc = lade__fail(LADE_EIO, "cannot read %s: %s: %s", shard, NAME, strerror(e));
      break;
    }
    if (n == 0) {
      rc = lade__fail(LADE_EIO, "%s: %s ends after %zu of %llu bytes (the shard changed since it was indexed?)",
                      shard, NAME, got, (unsigned long long)size);
      break;
    }
    got += (size_t)n;
  }
  /* the shard rewritten in place since it was indexed: the bytes read may
   * be new bytes at old offsets */
  if (!rc) rc = lade__file_check(fd, &L(t)->ver[si], shard);
  if (fd != L(t)->fd[si]) close(fd);
  out->len = rc ? 0 : (size_t)size;
  return rc;
#undef NAME
}

/* The disk tier's version of a sample: its shard's, from the descriptor the
 * reads use (so the version always belongs to the bytes read), or a stat of
 * the path for shards opened per read. */
static uint64_t local_version(lade__tar_t *t, uint64_t idx) {
  uint32_t si = t->shard[idx];
  struct stat st;
  int fd = L(t)->fd[si];
  return lade__stat_version(fd >= 0 ? fstat(fd, &st) : stat(lade__tar_strs_at(&t->shards, si), &st), &st);
}

static void local_close(lade__tar_t *t) {
  local_state_t *l = L(t);
  if (!l) return;
  if (l->fd)
    for (size_t i = 0; i < l->n; i++)
      if (l->fd[i] >= 0) close(l->fd[i]);
  lade__gz_cache_destroy(l->gz);
  free(l->fd);
  free(l->ver);
  free(l->comp);
  free(l);
  t->be_state = NULL;
}

const lade__tar_backend_t lade__tar_local = {
    .index_threads = 4,
    .open = local_open,
    .index = local_index,
    .start = local_start,
    .read = local_read,
    .version = local_version,
    .close = local_close};
