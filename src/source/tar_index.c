/*
 * tar_index.c - a shard's index (tar_impl.h: every member's data offset and
 * size, the value of each .cls, the format's aux values and names) and its
 * stored, checksummed form keyed by the shard's version; the samples'
 * arrays an index is added to (lade__tar_push_sample). Below tar.c, the
 * formats (tar.c's tar, tar_tfrecord.c) and the backends, which call it; it
 * calls none of them (a format's walk and bind come in through t->fmt).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/nodefile.h"
#include "tar_impl.h"

typedef struct idx_hdr {
  char magic[8];
  uint64_t shard_size, mtime_sec, mtime_nsec;
  uint64_t count, names_len;
  uint64_t bind;
} idx_hdr_t;

void lade__tar_index_free(lade__tar_index_t *x) {
  free(x->m);
  free(x->aux);
  lade__tar_strs_free(&x->names);
  memset(x, 0, sizeof *x);
}

int lade__tar_index_push(lade__tar_index_t *x, const lade__tar_entry_t *e, uint64_t aux, const char *name, size_t nlen) {
  if (x->n == x->cap) {
    size_t cap = x->cap ? x->cap * 2 : 256;
    int rc = LADE__RESIZE(x->m, cap, "tar source's index");
    if (!rc) rc = LADE__RESIZE(x->aux, cap, "tar source's index");
    if (rc) return rc;
    x->cap = cap;
  }
  x->aux[x->n] = aux;
  x->m[x->n++] = *e;
  return name ? lade__tar_strs_push(&x->names, name, nlen) : 0;
}

/* Parses a stored index's bytes: whole (checksum), of this format and
 * settings (magic; t->index_seed seeds the checksum), made from version v
 * of the shard (only its size when any_version: a sidecar, whose mtime or
 * validator fields describe another copy of the shard) and inside it;
 * else -1, x empty and *why the first check that failed. The stored form
 * is the header, the entries, their aux values (formats with aux), then
 * the names (formats with names), then the checksum. Pure: no I/O. */
int lade__tar_index_parse(const lade__tar_t *t, lade__tar_index_t *x, const uint8_t *data, size_t len,
                          lade__tar_ver_t v, bool any_version, const char **why) {
  const lade__tar_format_t *f = t->fmt;
  const char *w = "shorter than an index header";
  idx_hdr_t h;
  if (len < sizeof h + 8) goto out;
  memcpy(&h, data, sizeof h);
  uint64_t sum;
  memcpy(&sum, data + len - 8, 8);
  int comp = -1;
  for (int k = 0; k < 3 && comp < 0; k++) {
    const char *m = k ? f->zmagic[k - 1] : f->magic;
    if (m && memcmp(h.magic, m, 8) == 0) comp = k; /* LADE__GZ_NONE, _GZIP, _ZLIB */
  }
  w = "not a lade index of this format (its magic)";
  if (comp < 0) goto out;
  w = "its checksum fails (truncated, damaged, or made with other tfrecord_* settings)";
  if (sum != lade__hash64(data, len - 8, t->index_seed)) goto out;
  w = any_version ? "made for a shard of another size" : "made from another version of the shard (size or mtime)";
  if (h.shard_size != v.size || (!any_version && (h.mtime_sec != v.a || h.mtime_nsec != v.b))) goto out;
  w = "an entry outside the shard";
  /* a compressed shard's offsets are in its uncompressed bytes, of no known size */
  uint64_t end = comp ? UINT64_MAX : h.shard_size;
  size_t per = sizeof(lade__tar_entry_t) + (f->aux ? 8 : 0);
  if (h.count > (len - sizeof h) / per || h.names_len != len - 8 - sizeof h - h.count * per ||
      (!f->names && h.names_len))
    goto out;
  const uint8_t *mp = data + sizeof h, *ap = mp + h.count * sizeof(lade__tar_entry_t);
  const char *names = (const char *)mp + h.count * per, *np = names, *nend = names + h.names_len;
  if (h.names_len && nend[-1] != '\0') goto out;
  for (uint64_t i = 0; i < h.count; i++) {
    lade__tar_entry_t m;
    uint64_t aux = 0;
    memcpy(&m, mp + i * sizeof m, sizeof m);
    if (f->aux) memcpy(&aux, ap + i * 8, 8);
    const char *z = f->names && np < nend ? memchr(np, 0, (size_t)(nend - np)) : NULL;
    if ((f->names && !z) || m.data_off > end || end - m.data_off < f->tail || m.size > end - m.data_off - f->tail ||
        aux / 8 > m.size ||
        (m.cls != LADE__TAR_NO_CLS && (m.cls < 0 || m.cls >= (1 << 24))))
      goto out;
    if (lade__tar_index_push(x, &m, aux, f->names ? np : NULL, f->names ? (size_t)(z - np) : 0) != 0) goto out;
    if (f->names) np = z + 1;
  }
  if (np != nend) goto out;
  x->bind = h.bind;
  x->comp = comp;
  if (why) *why = NULL;
  return 0;
out:
  lade__clear_error();
  lade__tar_index_free(x);
  if (why) *why = w;
  return -1;
}

int lade__tar_index_load(const lade__tar_t *t, lade__tar_index_t *x, const char *path, lade__tar_ver_t v) {
  lade__buf_t b = {0};
  int rc = lade__tar_read_small(path, 1ull << 34, &b) == 0 ? lade__tar_index_parse(t, x, b.data, b.len, v, false, NULL)
                                                            : -1;
  lade__buf_free(&b);
  lade__clear_error();
  if (rc) lade__tar_index_free(x);
  return rc;
}

int lade__tar_index_tail(const lade__tar_t *t, const lade__tar_index_t *x, uint64_t size, uint64_t *off,
                         size_t *len) {
  *off = 0;
  *len = 0;
  if (!x->n) return 0;
  const lade__tar_entry_t *m = &x->m[x->n - 1];
  if (m->data_off > size || m->size > size - m->data_off) return -1;
  uint64_t end = m->data_off + m->size;
  if (!t->fmt->names) /* a TFRecord file: its last record's CRC ends it */
    return end <= size && size - end == t->fmt->tail ? 0 : -1;
  end = (end + 511) / 512 * 512; /* a tar: the data's padding, then the end-of-archive zero block */
  if (end > size) return end - size < 512 ? 0 : -1; /* no padding at the end: writers that omit it */
  *off = end;
  *len = (size_t)LADE__MIN(size - end, (uint64_t)512);
  return 0;
}

const char *lade__tar_index_dir(const struct lade_config *cfg) {
  return cfg->index_dir[0] ? cfg->index_dir : cfg->cache_dir[0] ? cfg->cache_dir : NULL;
}

int lade__tar_index_store(const lade__tar_t *t, const lade__tar_index_t *x, const char *path, lade__tar_ver_t v,
                          const struct lade_config *cfg) {
  const lade__tar_format_t *f = t->fmt;
  const char *dir = cfg ? lade__tar_index_dir(cfg) : NULL;
  if (dir && lade__mkdir_private(dir) != 0) {
    lade__clear_error();
    return -1;
  }
  idx_hdr_t h;
  memset(&h, 0, sizeof h);
  const char *magic = x->comp ? f->zmagic[x->comp - 1] : f->magic;
  if (!magic) return -1;
  memcpy(h.magic, magic, 8);
  h.shard_size = v.size;
  h.mtime_sec = v.a;
  h.mtime_nsec = v.b;
  h.count = x->n;
  h.names_len = f->names ? x->names.len : 0;
  h.bind = x->bind;
  size_t entries = x->n * sizeof(lade__tar_entry_t), auxes = f->aux ? x->n * 8 : 0;
  size_t total = sizeof h + entries + auxes + h.names_len + 8;
  uint8_t *b = malloc(total);
  if (!b) return -1;
  memcpy(b, &h, sizeof h);
  if (x->n) memcpy(b + sizeof h, x->m, entries);
  if (auxes) memcpy(b + sizeof h + entries, x->aux, auxes);
  if (h.names_len) memcpy(b + sizeof h + entries + auxes, x->names.a, h.names_len);
  uint64_t sum = lade__hash64(b, total - 8, t->index_seed);
  memcpy(b + total - 8, &sum, 8);
  int rc = lade__nodefile_store(path, &(struct iovec){b, total}, 1, 0644);
  free(b);
  return rc;
}

int lade__tar_push_sample(lade__tar_t *t, uint32_t shard, uint64_t off, uint64_t size, uint64_t span, int32_t label,
                          const char *name) {
  if (t->count == t->cap) {
    uint64_t cap = t->cap ? t->cap * 2 : 1024;
    /* side by side: one that fails leaves those resized before it larger, and cap as it was */
    const char *what = t->fmt->name;
    int rc = LADE__RESIZE(t->shard, cap, what);
    if (!rc) rc = LADE__RESIZE(t->off, cap, what);
    if (!rc) rc = LADE__RESIZE(t->sizes, cap, what);
    if (!rc) rc = LADE__RESIZE(t->labels, cap, what);
    if (!rc && t->fmt->tail) rc = LADE__RESIZE(t->span, cap, what);
    if (rc) return rc;
    t->cap = cap;
  }
  t->shard[t->count] = shard;
  t->off[t->count] = off;
  t->sizes[t->count] = size;
  if (t->span) t->span[t->count] = span ? span : size;
  t->labels[t->count] = label; /* the .cls value, or -1 (none) for now */
  t->count++;
  return name ? lade__tar_strs_push(&t->names, name, strlen(name)) : 0;
}
