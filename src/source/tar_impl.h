/*
 * tar_impl.h - inside the tar source family: what tar.c shares with its
 * container formats and its two shard backends. tar.c turns shards (any
 * container file: one file, a folder, a brace pattern, a list file, URLs)
 * into samples: the shard lists, each shard's index and its stored form,
 * the per-sample arrays, the source's vtable. Two axes plug into it:
 *
 * a format (lade__tar_format_t) says what a shard holds:
 *   tar.c          WebDataset tar shards: a sample is a group of members
 *   tar_tfrecord.c TFRecord files: a sample is a record (tfrecfmt.c)
 * a backend (lade__tar_backend_t) says where a shard's bytes come from:
 *   tar_local.c    files on a file system: the index beside the shard or in
 *                  cache_dir, reads are one pread() each
 *   tar_http.c     http(s):// and s3:// shards: the index from one streamed
 *                  GET, reads are Range requests through the http module,
 *                  neighbours coalesced (needs libcurl)
 * so a TFRecord file over https:// is the tfrecord format on the http
 * backend, with nothing written twice.
 *
 * Not an interface outside src/source/tar*.c.
 */
#ifndef LADE__TAR_IMPL_H
#define LADE__TAR_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "source.h"
#include "tarfmt.h"
#include "tfrec_gzip.h"

#define LADE__TAR_NO_CLS INT64_MIN

/* Strings back to back in one arena, found by offset. */
typedef struct lade__tar_strs {
  char *a;
  size_t len, cap;
  uint64_t *off;
  size_t n, ncap;
} lade__tar_strs_t;

int lade__tar_strs_push(lade__tar_strs_t *s, const char *p, size_t n);
void lade__tar_strs_free(lade__tar_strs_t *s);
static inline const char *lade__tar_strs_at(const lade__tar_strs_t *s, size_t i) { return s->a + s->off[i]; }

/* One regular member of a shard. */
typedef struct lade__tar_entry {
  uint64_t data_off, size;
  int64_t cls; /* the .cls value, or LADE__TAR_NO_CLS */
} lade__tar_entry_t;

/* One shard's index: its regular members in archive order (tar), its
 * records in file order (tfrecord). */
typedef struct lade__tar_index {
  lade__tar_entry_t *m;
  uint64_t *aux; /* per entry, for formats with aux (tfrecord: the sample's bytes) */
  size_t n, cap;
  lade__tar_strs_t names; /* per entry, for formats with names (tar: the member's) */
  uint64_t bind; /* the format's bind() of its shard, stored with it (0: none) */
  int comp;      /* LADE__GZ_*: the shard is one gzip or zlib stream (tfrecord), its offsets are in the
                  * uncompressed bytes; a stored index says so by its magic (the format's zmagic) */
} lade__tar_index_t;

/* The version of a shard an index was made from: a local shard's size and
 * mtime (ns), a remote one's size and a hash of its ETag (else its
 * Last-Modified). */
typedef struct lade__tar_ver {
  uint64_t size, a, b;
} lade__tar_ver_t;

struct lade__tar;

/* The version a sidecar index carries (lade__tar_local_sidecar: `lade
 * pack`, `lade index`, docs/sources.md "Sidecar indexes"): the shard's size
 * and this mark where a local index has the shard's mtime, which a copy
 * does not keep (never a nanoseconds field, nor a remote ETag's 2 << 32).
 * Such an index is bound to its shard by its size and bind() alone. */
#define LADE__TAR_SIDECAR_A 0x6c61646573696465ull /* "ladeside" */
#define LADE__TAR_SIDECAR_B ((uint64_t)3 << 32)
#define LADE__TAR_SIDECAR_SUFFIX ".ladeidx"

/* The entries a format's bind() samples, the rule both formats follow (a
 * remote sidecar's binding, checked in two steps, rebuilds them: tar_http.c):
 * k = min(n, LADE__TAR_BIND_ENTRIES) entries spread over the n, the first
 * and the last included; entry j of them is lade__tar_bind_at(n, j). */
#define LADE__TAR_BIND_ENTRIES 8
static inline size_t lade__tar_bind_at(size_t n, size_t j) {
  size_t k = n < LADE__TAR_BIND_ENTRIES ? n : LADE__TAR_BIND_ENTRIES;
  return k <= 1 ? 0 : j * (n - 1) / (k - 1);
}

/* Appends an entry (name: NULL for formats without names). */
int lade__tar_index_push(lade__tar_index_t *x, const lade__tar_entry_t *e, uint64_t aux, const char *name, size_t nlen);
/* Loads a stored index when it is whole (checksum, seeded with
 * t->index_seed), of t's format (its magic, or a zmagic: x->comp says
 * which) and made from version v of the shard; else -1 and x is empty (no
 * error set). */
int lade__tar_index_load(const struct lade__tar *t, lade__tar_index_t *x, const char *path, lade__tar_ver_t v);
/* The checks of lade__tar_index_load on the bytes of a stored index
 * (data, len), with any_version: only v.size is compared (a sidecar
 * fetched beside a remote shard: the mtime or validator it was stored with
 * belongs to another copy). 0, or -1 with x empty and *why (optional) the
 * reason in words. Pure. */
int lade__tar_index_parse(const struct lade__tar *t, lade__tar_index_t *x, const uint8_t *data, size_t len,
                          lade__tar_ver_t v, bool any_version, const char **why);
/* Where a shard whose index is x (all its members, a sidecar says) must
 * end, for the binding of a sidecar, which no mtime guards: a member
 * appended within a tar's end padding keeps the size and every sampled
 * header. A tar: [*off, *off + *len) must be zeros (the end-of-archive
 * block after the last member; *len 0: nothing to read); a TFRecord file:
 * the last record's CRC ends the file. 0, or -1: x cannot be the whole
 * shard. Pure. */
int lade__tar_index_tail(const struct lade__tar *t, const lade__tar_index_t *x, uint64_t size, uint64_t *off,
                         size_t *len);
/* Stores it (temp file + rename; cfg NULL: no folder to make): 0, or -1
 * with errno set; a failure at open only means the next open indexes
 * again. */
int lade__tar_index_store(const struct lade__tar *t, const lade__tar_index_t *x, const char *path, lade__tar_ver_t v,
                          const struct lade_config *cfg);
void lade__tar_index_free(lade__tar_index_t *x);
/* The folder that keeps indexes: index_dir, else cache_dir, else NULL. */
const char *lade__tar_index_dir(const struct lade_config *cfg);

/* Shard names and lists. */
int lade__tar_is_url(const char *s); /* http(s):// or s3:// */
int lade__tar_has_suffix(const char *s, const char *suf);
/* WebDataset's brace patterns, {000..123} and {a,b}; errors name `whole`. */
int lade__tar_brace_expand(lade__tar_strs_t *out, const char *pat, const char *whole);
/* The shards of a list file's bytes b; relative lines are relative to base. */
int lade__tar_list_lines(lade__tar_strs_t *out, const lade__buf_t *b, const char *base, const char *file);
/* Up to max bytes of a local file into b (tar_list.c). */
int lade__tar_read_small(const char *path, uint64_t max, lade__buf_t *b);
/* A decimal number of n characters (no sign, no spaces), 0 or -1. */
int lade__tar_parse_u64(const char *s, size_t n, uint64_t *v);

struct lade__tar_backend;
struct lade__tar_format;

/* The source's state. The per-sample arrays are filled by open (tar.c) and
 * read-only after it: backends read them from any thread. */
typedef struct lade__tar {
  const struct lade__tar_format *fmt;
  void *fmt_state;         /* the format's (its settings) */
  uint64_t index_seed;     /* the format's settings a stored index depends on (seeds its checksum) */
  lade__tar_strs_t shards; /* as shown in messages: paths, URLs or s3:// names */
  lade__tar_strs_t names;  /* per sample, formats with names: its chosen member's name */
  uint32_t *shard;         /* per sample */
  uint64_t *off;           /* per sample: data offset of its member */
  uint64_t *sizes;         /* per sample: the bytes it delivers */
  uint64_t *span;          /* per sample: the bytes read at off when they differ from sizes (tfrecord: the
                            * record's data and CRC), else NULL */
  int32_t *labels;
  uint64_t *shard_off;     /* shards + 1: the shards plan's offsets */
  uint32_t index_threads;  /* set by a backend's open to bound them (its requests in flight); 0: be's */
  uint64_t count, cap;
  char **class_names;
  char *class_arena;
  uint64_t max_sample;
  uint64_t skipped;        /* groups without the member the transform needs */
  int want;                /* tar: which member the transform needs */
  uint64_t with_cls;       /* samples with a label of their own (a .cls member, a label feature) */
  const struct lade__tar_backend *be;
  void *be_state;          /* the backend's */
} lade__tar_t;

/* The bytes a read of sample i takes at t->off[i]. */
static inline uint64_t lade__tar_span(const lade__tar_t *t, uint64_t i) { return t->span ? t->span[i] : t->sizes[i]; }
/* Appends a sample: span 0 when it is its size; name NULL for formats
 * without names. */
int lade__tar_push_sample(lade__tar_t *t, uint32_t shard, uint64_t off, uint64_t size, uint64_t span, int32_t label,
                          const char *name);

/* A container format: what a shard holds and how its index is made. */
typedef struct lade__tar_format {
  const char *name;       /* the source's name: "tar", "tfrecord" */
  const char *magic;      /* 8 bytes: the stored index's format and version */
  const char *zmagic[2];  /* formats with compressed shards: the magic of a gzip / a zlib shard's index */
  const char *index_name; /* a stored index in index_dir/cache_dir is NAME-HASH.bin */
  const char *shard_kind; /* in messages: "no .tar files in folder X" */
  uint32_t tail;          /* bytes of a sample's span after the bytes max_sample_bytes counts (tfrecord: the CRC) */
  bool names, aux;        /* the index's entries have names / aux values */
  /* A shard by its name (a folder's files, an s3 prefix's objects, a URL). */
  int (*is_shard)(const char *name, size_t len);
  /* A local regular file given as the source is a list file, not a shard. */
  int (*is_list)(const char *path);
  /* Optional: a shard's compression (LADE__GZ_*) by the settings and its
   * name; a stored index of another is not used. NULL: none. */
  int (*compression)(const lade__tar_t *t, const char *shard);
  /* Optional: the format's settings into t->fmt_state and t->index_seed. */
  int (*open)(lade__tar_t *t, const struct lade_config *cfg);
  void (*close)(lade__tar_t *t);
  /* One pass over a shard read through fn (buffered preads, or a streamed
   * GET, so forward only): its index. Errors name `shard`. */
  int (*walk)(const lade__tar_t *t, lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx, uint64_t size,
              const char *shard);
  /* What binds an index to the shard it was made from: a hash of a few
   * entries' framing bytes, spread over the index (first and last
   * included), read again through fn. A stored index whose bind differs
   * from its shard's is another shard's (or the shard changed without a
   * new size or mtime): it is not used. */
  uint64_t (*bind)(const lade__tar_t *t, const lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx);
  /* Whether the framing bytes bind() reads for entry i (read again through
   * fn, which serves only those) are those of an entry like x's: tar, a
   * header block with a valid checksum, of a regular member of its size and
   * name (the name when it fits the block); tfrecord, a length with a valid
   * CRC equal to its length. What a remote sidecar is checked by at open for
   * its first and last entries, the rest of bind() waiting for the shard's
   * first read (tar_http.c). 0, or -1 with *why the difference in words. */
  int (*check_entry)(const lade__tar_t *t, const lade__tar_index_t *x, size_t i, lade__tar_pread_fn fn, void *ctx,
                     const char **why);
  /* A shard's index into samples (lade__tar_push_sample), in shard order. */
  int (*add)(lade__tar_t *t, uint32_t shard, const lade__tar_index_t *x);
  /* Every shard added: s->labels, s->classes (and class names). */
  int (*labels)(lade__tar_t *t, lade__source_t *s);
  /* No sample at all: the error. */
  int (*empty)(lade__tar_t *t, const struct lade_config *cfg);
  /* Optional: the span read (out) into the sample's bytes, checked. */
  int (*finish)(lade__tar_t *t, uint64_t idx, lade__buf_t *out);
  /* The sample within its shard for messages: "member 'a/x.jpg'", "record 17". */
  void (*what)(const lade__tar_t *t, uint64_t idx, char *buf, size_t size);
  /* source.h's describe(): "SHARD/KEY", "SHARD/record 17". */
  void (*describe)(const lade__tar_t *t, uint64_t idx, char *buf, size_t size);
} lade__tar_format_t;

extern const lade__tar_format_t lade__tar_fmt_tar;
extern const lade__tar_format_t lade__tar_fmt_tfrecord;

/* A shard backend. */
typedef struct lade__tar_backend {
  /* Shards indexed at once by open (tar.c's index_all): each index() waits
   * on latency (a file system's, a server's), so a remote backend takes
   * many. */
  uint32_t index_threads;
  /* Sets up for t->shards (a backend whose source names its shards itself,
   * a URL, lists them into t->shards first). */
  int (*open)(lade__tar_t *t, const struct lade_config *cfg, lade__source_t *s);
  /* The member index of shard i: stored, or built and stored. */
  int (*index)(lade__tar_t *t, const struct lade_config *cfg, size_t i, lade__tar_index_t *x);
  /* Optional: every shard is indexed, t->count samples are known. */
  int (*start)(lade__tar_t *t);
  /* Optional: 0 once the index of sample idx's shard is known to be the
   * shard's, else the error (naming shard and member) that every read of it
   * returns (tar_http.c: a sidecar's binding, whose rest is checked before
   * the shard's first sample is served; waits for it, bounded by the HTTP
   * timeouts). tar.c calls it before every read. Thread-safe. */
  int (*check_shard)(lade__tar_t *t, uint64_t idx);
  /* Sample idx's bytes into out (0 < size <= max_sample); errors name shard
   * and member. Thread-safe. */
  int (*read)(lade__tar_t *t, uint64_t idx, lade__buf_t *out);
  /* The disk tier's version of sample idx (source.h's version op). */
  uint64_t (*version)(lade__tar_t *t, uint64_t idx);
  void (*close)(lade__tar_t *t); /* NULL be_state: nothing was opened */
  /* Remote backends: source.h's submit, ready and stats. */
  int (*submit)(lade__tar_t *t, const uint64_t *idx, size_t n, int background);
  bool (*ready)(lade__tar_t *t, uint64_t idx);
  void (*stats)(lade__tar_t *t, lade__source_stats_t *out);
  void (*reserve)(lade__tar_t *t, uint64_t samples, uint64_t bytes);
} lade__tar_backend_t;

extern const lade__tar_backend_t lade__tar_local;
/* Writes the sidecar index of local shard `shard` to `out` (tar_local.c):
 * one pass over it, its bind(), stored with the LADE__TAR_SIDECAR_*
 * version. Errors name the shard or `out`. */
int lade__tar_local_sidecar(const lade__tar_t *t, const char *shard, const char *out);
#ifdef LADE_HAVE_CURL
extern const lade__tar_backend_t lade__tar_http;
#endif

#endif
