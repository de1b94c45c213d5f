/*
 * tar_tfrecord.c - the tfrecord format of the tar source family
 * (tar_impl.h, docs/sources.md "tfrecord"): TensorFlow's TFRecord files,
 * one sample per record, in file order, files in the order the source
 * names them. Everything about shards - lists, folders, brace patterns,
 * URLs, the stored index, local preads and remote Range requests, the
 * `shards` plan's offsets - is the tar source's (tar.c and its backends);
 * this file says what a TFRecord file holds (framing and Example decoding
 * are tfrecfmt.c).
 *
 * The index: one sequential pass per file checks every record's length CRC
 * and keeps its data offset and length; when a feature or a label is to be
 * read it also reads each record's data, checks its CRC and decodes the
 * Example for the label (kept as tar's .cls values are) and for the size of
 * the sample (the index's aux value, so source->sizes is exact). A read
 * takes the record's data and its 4-byte CRC in one pread (one Range
 * request remotely), checks the CRC and decodes the Example again on the
 * worker (cheap next to the read) to cut the feature out. A damaged record
 * is an error naming the file, the record and (for a read) the sample,
 * never a short or shifted sample.
 *
 * The stored index has its own magic (LADETFR1: never taken for a tar
 * index) and is bound to tfrecord_feature and tfrecord_label through the
 * checksum's seed (t->index_seed): other settings index the files again.
 *
 * Compressed files (gzip, zlib: TFRecordOptions; by name or by
 * tfrecord_compression) are one deflate stream each: the pass reads the
 * uncompressed bytes through an inflating stream (tfrec_gzip.c), so the
 * index's offsets are in those bytes, and its magic says so (LADETFG1,
 * LADETFZ1: never taken for an uncompressed file's index, nor the
 * reverse); local reads go through tfrec_gzip.c's inflate cursors
 * (tar_local.c). Remote ones are refused, as is any without zlib.
 *
 * Read-only after open: no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tar_impl.h"
#include "tfrecfmt.h"

#define IDX_MAGIC "LADETFR1"
#define IDX_MAGIC_GZIP "LADETFG1" /* a gzip file's: offsets in its uncompressed bytes */
#define IDX_MAGIC_ZLIB "LADETFZ1"
#define BIND_HEAD 16384 /* a compressed file's bytes its bind hashes */
#define LABEL_MAX (1 << 24) /* as tar's .cls values */

typedef struct tfr_state {
  char feature[256]; /* "": the record's data */
  char label[256];   /* "": no labels */
  int compression;   /* LADE__TFREC_COMP_* as set */
} tfr_state_t;

static const tfr_state_t *S(const lade__tar_t *t) { return t->fmt_state; }

static int has_suffix(const char *s, size_t n, const char *suf) {
  size_t k = strlen(suf);
  return n >= k && !memcmp(s + n - k, suf, k);
}

int lade__tfrec_is_name(const char *name, size_t len) {
  if (has_suffix(name, len, ".gz")) len -= 3;
  else if (has_suffix(name, len, ".zlib")) len -= 5;
  return has_suffix(name, len, ".tfrecord") || has_suffix(name, len, ".tfrecords");
}

/* The compression of a file: the setting, or (auto) its name's. */
static int compression_of(const lade__tar_t *t, const char *shard) {
  size_t n = strlen(shard);
  if (S(t)->compression != LADE__TFREC_COMP_AUTO) return S(t)->compression;
  return has_suffix(shard, n, ".gz") ? LADE__TFREC_COMP_GZIP
         : has_suffix(shard, n, ".zlib") ? LADE__TFREC_COMP_ZLIB
                                         : LADE__TFREC_COMP_NONE;
}

/* The same as LADE__GZ_*, for the tar source. */
static int tfr_compression(const lade__tar_t *t, const char *shard) {
  int c = compression_of(t, shard);
  return c == LADE__TFREC_COMP_GZIP ? LADE__GZ_GZIP : c == LADE__TFREC_COMP_ZLIB ? LADE__GZ_ZLIB : LADE__GZ_NONE;
}

static int tfr_open(lade__tar_t *t, const struct lade_config *cfg) {
  tfr_state_t *st = calloc(1, sizeof *st);
  if (!st) return lade__fail(LADE_ENOMEM, "tfrecord source: out of memory");
  t->fmt_state = st;
  snprintf(st->feature, sizeof st->feature, "%s", cfg->tfrecord_feature);
  snprintf(st->label, sizeof st->label, "%s", cfg->tfrecord_label);
  st->compression = cfg->tfrecord_compression;
  /* what a stored index depends on besides the file */
  uint64_t h = lade__hash64(st->feature, strlen(st->feature) + 1, 0x74667265636f7264ull);
  t->index_seed = lade__hash64(st->label, strlen(st->label) + 1, h) | 1;
  return 0;
}

static void tfr_close(lade__tar_t *t) {
  free(t->fmt_state);
  t->fmt_state = NULL;
}

/* ---------------------------------------------------------- records */

/* What a record's data gives under the settings: the sample's size and
 * label (LADE__TAR_NO_CLS: none). Errors are the record's ("feature
 * 'image': ..."), without the file. */
static int decode(const lade__tar_t *t, const uint8_t *data, size_t len, uint64_t *size, int64_t *cls) {
  const tfr_state_t *st = S(t);
  lade__tfrec_feature_t f;
  *size = len;
  *cls = LADE__TAR_NO_CLS;
  if (st->feature[0]) {
    int rc = lade__tfrec_find(data, len, st->feature, &f);
    if (rc < 0) return rc;
    if (rc == 0) {
      char names[512];
      size_t k = lade__tfrec_names(data, len, names, sizeof names);
      return lade__fail(LADE_EFORMAT, "no feature '%s' (its %zu feature%s: %s; tfrecord_feature names the one a "
                        "sample is, \"\" the whole record)", st->feature, k, k == 1 ? "" : "s", k ? names : "none");
    }
    rc = lade__tfrec_value_size(&f, size);
    if (rc) return lade__fail_prefix(rc, "feature '%s': ", st->feature);
  }
  if (st->label[0]) {
    int rc = lade__tfrec_find(data, len, st->label, &f);
    if (rc < 0 && !st->feature[0]) { /* whole records need not be Examples: no label then */
      lade__clear_error();
      return 0;
    }
    if (rc <= 0) return rc;
    uint8_t v[8];
    uint64_t k = 0;
    if (f.kind != LADE__TFREC_INT64)
      return lade__fail(LADE_EFORMAT, "label feature '%s' is %s, not int64_list", st->label,
                        lade__tfrec_kind_name(f.kind));
    rc = lade__tfrec_numbers(&f, v, 1, &k);
    if (rc) return lade__fail_prefix(rc, "label feature '%s': ", st->label);
    if (!k) return lade__fail(LADE_EFORMAT, "label feature '%s' holds no value", st->label);
    int64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (int64_t)((uint64_t)x << 8 | v[i]);
    if (x < 0 || x >= LABEL_MAX)
      return lade__fail(LADE_EFORMAT, "label feature '%s': %lld is not a class number in 0..%d", st->label,
                        (long long)x, LABEL_MAX - 1);
    *cls = x;
  }
  return 0;
}

/* The first bytes of a file that a compressed TFRecord file would start
 * with: gzip's magic, or a zlib header (CMF 0x78, FCHECK). */
static const char *looks_compressed(const uint8_t *b, long n) {
  if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return "gzip";
  if (n >= 2 && b[0] == 0x78 && ((b[0] << 8) | b[1]) % 31 == 0) return "zlib";
  return NULL;
}

/* A compressed file that cannot be read: why, and what to do. */
static int compressed_error(const char *shard, int comp, const char *why) {
  return lade__fail(LADE_EUNSUPPORTED, "%s: %s-compressed TFRecord: %s; decompress it first (%s)", shard,
                    lade__gz_name(comp), why,
                    comp == LADE__GZ_GZIP ? "gunzip -k FILE" : "zlib-flate -uncompress < FILE > OUT");
}

/* One pass over a file: every record's framing (its length CRC), and with
 * a feature or a label set its data (CRC, Example) too. A compressed file
 * is walked in its uncompressed bytes, through an inflating stream, whose
 * end may come after any whole record: each record's CRC is read to know
 * that its data is there. */
static int tfr_walk(const lade__tar_t *t, lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx, uint64_t size,
                    const char *shard) {
  const tfr_state_t *st = S(t);
  int comp = tfr_compression(t, shard);
  lade__gz_walk_t *gz = NULL;
  if (comp && lade__tar_is_url(shard))
    return compressed_error(shard, comp, "not read remotely (a record is reached only by inflating all before it, "
                            "a remote file is read by Range requests: copy it to a local file system)");
  if (comp) {
    int rc = lade__gz_walk_open(&gz, comp, fn, ctx);
    char why[256];
    snprintf(why, sizeof why, "%s", lade_last_error()); /* not lade__fail's own buffer */
    if (rc) return rc == LADE_EUNSUPPORTED ? compressed_error(shard, comp, why) : lade__fail_prefix(rc, "%s: ", shard);
    fn = lade__gz_walk_pread;
    ctx = gz;
    size = LADE__TFREC_STREAM;
    x->comp = comp;
  }
  uint8_t head[2] = {0, 0};
  long hn = !comp && size >= 2 ? fn(ctx, head, 2, 0) : 0;
  int need = st->feature[0] || st->label[0];
  lade__tfrec_reader_t r;
  lade__tfrec_init(&r, fn, ctx, size);
  lade__tfrec_record_t rec;
  lade__buf_t b = {0};
  unsigned long long no = 0, at = 0; /* the record being read */
  int rc;
  while ((no = (unsigned long long)r.record, at = (unsigned long long)r.pos, rc = lade__tfrec_next(&r, &rec)) == 1) {
    uint64_t got = rec.len;
    int64_t cls = LADE__TAR_NO_CLS;
    if (need) {
      if (rec.len > t->max_sample || rec.len >= SIZE_MAX - LADE__TFREC_TAIL) {
        rc = lade__fail(LADE_ERANGE, "record %llu (at byte %llu): %llu bytes, more than max_sample_bytes (%llu)", no,
                        at, (unsigned long long)rec.len, (unsigned long long)t->max_sample);
        break;
      }
      size_t want = (size_t)rec.len + LADE__TFREC_TAIL;
      if ((rc = lade__buf_reserve(&b, want)) != 0) {
        rc = lade__fail(rc, "record %llu: no memory for its %llu bytes", no, (unsigned long long)rec.len);
        break;
      }
      long n = fn(ctx, b.data, want, rec.data_off);
      if (n != (long)want) {
        rc = lade__fail(LADE_EIO, "record %llu (at byte %llu): %s", no, at,
                        n < 0 ? strerror((int)-n) : gz ? "its data and CRC run past the end of the uncompressed stream"
                        : "the file ended early (it changed while it was indexed?)");
        break;
      }
      uint32_t stored, computed;
      if (lade__tfrec_check(b.data, (size_t)rec.len, b.data + rec.len, &stored, &computed)) {
        rc = lade__fail(LADE_EFORMAT, "record %llu (at byte %llu): bad data CRC (stored 0x%08x, computed 0x%08x over "
                        "its %llu bytes)", no, at, stored, computed, (unsigned long long)rec.len);
        break;
      }
      if ((rc = decode(t, b.data, (size_t)rec.len, &got, &cls)) != 0) {
        lade__fail_prefix(rc, "record %llu (at byte %llu): ", no, at);
        break;
      }
    } else if (gz) {
      uint8_t crc[LADE__TFREC_TAIL];
      long n = fn(ctx, crc, sizeof crc, rec.data_off + rec.len);
      if (n != (long)sizeof crc) {
        rc = lade__fail(LADE_EFORMAT, "record %llu (at byte %llu): its %llu bytes of data and 4-byte CRC run past the "
                        "end of the uncompressed stream (%llu bytes): truncated?", no, at, (unsigned long long)rec.len,
                        (unsigned long long)lade__gz_walk_produced(gz));
        break;
      }
    }
    rc = lade__tar_index_push(x, &(lade__tar_entry_t){rec.data_off, rec.len, cls}, got, NULL, 0);
    if (rc) break;
  }
  lade__buf_free(&b);
  int code = 0;
  const char *why = lade__gz_walk_error(gz, &code);
  if (rc < 0 && why) /* the stream's words, not the EIO the record's read saw */
    rc = lade__fail(code, "%s: record %llu (at byte %llu of the uncompressed stream): %s", shard, no, at, why);
  lade__gz_walk_close(gz);
  const char *how = rc < 0 && r.record == 0 ? looks_compressed(head, hn) : NULL;
  if (how && S(t)->compression == LADE__TFREC_COMP_AUTO)
    return lade__fail(LADE_EFORMAT, "%s: looks like a %s-compressed TFRecord, but its name does not end in %s: set "
                      "tfrecord_compression=%s (or rename it)", shard, how, !strcmp(how, "gzip") ? ".gz" : ".zlib",
                      how);
  if (rc < 0 && strncmp(lade_last_error(), shard, strlen(shard)) != 0) lade__fail_prefix(rc, "%s: ", shard);
  return rc < 0 ? rc : 0;
}

/* The framing of up to 8 records spread over the index (first and last
 * included): each one's length, length CRC and data CRC; a compressed
 * file's first 16 KiB. */
static uint64_t tfr_bind(const lade__tar_t *t, const lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx) {
  uint64_t h = lade__hash64(&x->n, sizeof x->n, t->index_seed);
  if (x->comp) { /* the offsets are not the file's: its first bytes instead (the stream's header and first blocks) */
    uint8_t b[BIND_HEAD];
    long n = fn(ctx, b, sizeof b, 0);
    h = lade__hash64(&n, sizeof n, h);
    if (n > 0) h = lade__hash64(b, (size_t)n, h);
    return h ? h : 1;
  }
  size_t k = LADE__MIN(x->n, (size_t)LADE__TAR_BIND_ENTRIES);
  for (size_t j = 0; j < k; j++) {
    size_t i = lade__tar_bind_at(x->n, j);
    uint8_t b[LADE__TFREC_HEAD + LADE__TFREC_TAIL];
    const lade__tar_entry_t *m = &x->m[i];
    long n = m->data_off >= LADE__TFREC_HEAD ? fn(ctx, b, LADE__TFREC_HEAD, m->data_off - LADE__TFREC_HEAD) : -1;
    if (n == LADE__TFREC_HEAD) n += fn(ctx, b + LADE__TFREC_HEAD, LADE__TFREC_TAIL, m->data_off + m->size);
    h = lade__hash64(&n, sizeof n, h);
    if (n > 0) h = lade__hash64(b, (size_t)n, h);
  }
  return h ? h : 1;
}

/* format.check_entry: record i's header is a length with its CRC, and the
 * index's length (its data CRC needs its data: bind() takes it). */
static int tfr_check_entry(const lade__tar_t *t, const lade__tar_index_t *x, size_t i, lade__tar_pread_fn fn,
                           void *ctx, const char **why) {
  (void)t;
  const lade__tar_entry_t *m = &x->m[i];
  uint8_t b[LADE__TFREC_HEAD];
  if (x->comp) return 0; /* its offsets are not the file's */
  *why = "a sampled record's header is not in the file";
  if (m->data_off < sizeof b || fn(ctx, b, sizeof b, m->data_off - sizeof b) != (long)sizeof b) return -1;
  uint64_t len = 0;
  for (int k = 7; k >= 0; k--) len = len << 8 | b[k];
  *why = "a sampled record's length CRC fails (not a record's header)";
  if (lade__tfrec_masked_crc(b, 8) != lade__tfrec_u32(b + 8)) return -1;
  *why = "a sampled record's length differs from the index's";
  return len == m->size ? 0 : -1;
}

/* ---------------------------------------------------------- samples */

static int tfr_add(lade__tar_t *t, uint32_t si, const lade__tar_index_t *x) {
  for (size_t i = 0; i < x->n; i++) {
    const lade__tar_entry_t *m = &x->m[i];
    int32_t label = m->cls == LADE__TAR_NO_CLS ? -1 : (int32_t)m->cls;
    int rc = lade__tar_push_sample(t, si, m->data_off, x->aux[i], m->size + LADE__TFREC_TAIL, label, NULL);
    if (rc) return rc;
    if (m->cls != LADE__TAR_NO_CLS) t->with_cls++;
  }
  return 0;
}

/* A sample's record number in its file. */
static uint64_t record_of(const lade__tar_t *t, uint64_t idx) {
  if (t->shard_off) return idx - t->shard_off[t->shard[idx]];
  uint64_t first = idx;
  while (first > 0 && t->shard[first - 1] == t->shard[idx]) first--;
  return idx - first;
}

/* Labels from the label feature when every record has one; none at all:
 * -1 (DLIO's files); some: an error naming the first record without. */
static int tfr_labels(lade__tar_t *t, lade__source_t *s) {
  s->labels = t->labels;
  if (t->with_cls == t->count) {
    int32_t mx = -1;
    for (uint64_t i = 0; i < t->count; i++) mx = LADE__MAX(mx, t->labels[i]);
    s->classes = (uint32_t)(mx + 1);
    return 0;
  }
  for (uint64_t i = 0; t->with_cls && i < t->count; i++)
    if (t->labels[i] < 0)
      return lade__fail(LADE_EFORMAT, "%s: record %llu has no int64 feature '%s' while %llu other records have one "
                        "(tfrecord_label names the label feature; \"\" reads no labels)",
                        lade__tar_strs_at(&t->shards, t->shard[i]), (unsigned long long)record_of(t, i), S(t)->label,
                        (unsigned long long)t->with_cls);
  s->classes = 0;
  return 0;
}

static int tfr_empty(lade__tar_t *t, const struct lade_config *cfg) {
  return lade__fail(LADE_EEMPTY, "dataset %s: no records in %zu TFRecord file%s", cfg->source, t->shards.n,
                    t->shards.n == 1 ? "" : "s");
}

static void tfr_what(const lade__tar_t *t, uint64_t idx, char *buf, size_t size) {
  snprintf(buf, size, "record %llu (sample %llu)", (unsigned long long)record_of(t, idx), (unsigned long long)idx);
}

static void tfr_describe(const lade__tar_t *t, uint64_t idx, char *buf, size_t size) {
  snprintf(buf, size, "%s: record %llu", lade__tar_strs_at(&t->shards, t->shard[idx]),
           (unsigned long long)record_of(t, idx));
}

/* A read's span (the record's data and CRC) into the sample: the CRC
 * checked, the feature cut out (bytes moved to the front; numbers decoded
 * into a new array), its size checked against the index's. */
static int tfr_finish(lade__tar_t *t, uint64_t idx, lade__buf_t *out) {
  const tfr_state_t *st = S(t);
  const char *shard = lade__tar_strs_at(&t->shards, t->shard[idx]);
  unsigned long long no = (unsigned long long)record_of(t, idx), si = (unsigned long long)idx;
  uint64_t span = lade__tar_span(t, idx);
  if (out->len != span)
    return lade__fail(LADE_EIO, "%s: record %llu (sample %llu): %zu bytes read, %llu expected", shard, no, si, out->len,
                      (unsigned long long)span);
  size_t len = (size_t)(span - LADE__TFREC_TAIL);
  uint32_t stored, computed;
  if (lade__tfrec_check(out->data, len, out->data + len, &stored, &computed)) {
    out->len = 0;
    return lade__fail(LADE_EFORMAT, "%s: record %llu (sample %llu): bad data CRC (stored 0x%08x, computed 0x%08x over "
                      "its %zu bytes): the file is damaged, or changed since it was indexed", shard, no, si, stored,
                      computed, len);
  }
  int rc = 0;
  size_t got = len;
  lade__tfrec_feature_t f;
  if (st->feature[0]) {
    rc = lade__tfrec_find(out->data, len, st->feature, &f);
    if (rc == 0) {
      char names[512];
      size_t k = lade__tfrec_names(out->data, len, names, sizeof names);
      rc = lade__fail(LADE_EFORMAT, "no feature '%s' (its %zu feature%s: %s)", st->feature, k, k == 1 ? "" : "s",
                      k ? names : "none");
    } else if (rc == 1 && f.kind == LADE__TFREC_BYTES) {
      const uint8_t *p;
      rc = lade__tfrec_first_bytes(&f, &p, &got);
      if (!rc) memmove(out->data, p, got);
      if (rc) lade__fail_prefix(rc, "feature '%s': ", st->feature);
    } else if (rc == 1) {
      uint64_t k = 0, w = f.kind == LADE__TFREC_INT64 ? 8 : 4;
      uint64_t want = t->sizes[idx] / w; /* decoded into a new array: varints grow */
      uint8_t *v = malloc(want ? (size_t)(want * w) : 1);
      rc = v ? lade__tfrec_numbers(&f, v, want, &k) : lade__fail(LADE_ENOMEM, "out of memory");
      if (!rc && k == want && !(rc = lade__buf_reserve(out, (size_t)(k * w) + 1))) memcpy(out->data, v, (size_t)(k * w));
      if (!rc) got = (size_t)(k * w);
      if (rc) lade__fail_prefix(rc, "feature '%s': ", st->feature);
      free(v);
    }
  }
  if (!rc && got != t->sizes[idx])
    rc = lade__fail(LADE_EIO, "%s %zu bytes, the index says %llu: the file changed since it was indexed",
                    st->feature[0] ? "its feature has" : "it has", got, (unsigned long long)t->sizes[idx]);
  if (rc) {
    out->len = 0;
    return lade__fail_prefix(rc, "%s: record %llu (sample %llu): ", shard, no, si);
  }
  out->len = got;
  return 0;
}

/* ------------------------------------------------------------ names */

static int tfr_is_shard(const char *name, size_t len) { return lade__tfrec_is_name(name, len); }

/* A regular file given as the source: a TFRecord file by its name, its
 * first record header (TF's own files are often named train-00000-of-01024)
 * or a gzip/zlib header, else a list file of them. */
static int tfr_is_list(const char *path) {
  if (lade__tfrec_is_name(path, strlen(path))) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 1; /* the list reader names the error */
  uint8_t h[LADE__TFREC_HEAD];
  ssize_t n = pread(fd, h, sizeof h, 0);
  close(fd);
  /* gzip, or zlib at its usual levels: not a text file */
  if (n >= 2 && ((h[0] == 0x1f && h[1] == 0x8b) || (h[0] == 0x78 && (h[1] == 0x01 || h[1] == 0x9c || h[1] == 0xda))))
    return 0;
  return !(n == (ssize_t)sizeof h && lade__tfrec_masked_crc(h, 8) == lade__tfrec_u32(h + 8));
}

const lade__tar_format_t lade__tar_fmt_tfrecord = {
    .name = "tfrecord",
    .magic = IDX_MAGIC,
    .zmagic = {IDX_MAGIC_GZIP, IDX_MAGIC_ZLIB},
    .index_name = "tfrindex",
    .shard_kind = ".tfrecord",
    .tail = LADE__TFREC_TAIL,
    .aux = true,
    .is_shard = tfr_is_shard,
    .is_list = tfr_is_list,
    .compression = tfr_compression,
    .open = tfr_open,
    .close = tfr_close,
    .walk = tfr_walk,
    .bind = tfr_bind,
    .check_entry = tfr_check_entry,
    .add = tfr_add,
    .labels = tfr_labels,
    .empty = tfr_empty,
    .finish = tfr_finish,
    .what = tfr_what,
    .describe = tfr_describe};
