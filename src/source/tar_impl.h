/*
 * tar_impl.h - inside the tar source: what tar.c shares with its two shard
 * backends. tar.c turns shards into samples (each shard's member index, the
 * stored index, grouping members into samples, labels, the shard lists);
 * a backend says where a shard's bytes come from and fills one vtable:
 *
 *   tar_local.c  files on a file system: the index beside the shard or in
 *                cache_dir, reads are one pread() each
 *   tar_http.c   http(s):// and s3:// shards: the index from one streamed
 *                GET, reads are Range requests through the http module,
 *                neighbours coalesced (needs libcurl)
 *
 * Not an interface outside src/source/tar*.c.
 */
#ifndef LADE__TAR_IMPL_H
#define LADE__TAR_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "source.h"
#include "tarfmt.h"

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

/* One shard's index: its regular members in archive order. */
typedef struct lade__tar_index {
  lade__tar_entry_t *m;
  size_t n, cap;
  lade__tar_strs_t names;
  uint64_t bind; /* lade__tar_index_bind() of its shard, stored with it (0: none) */
} lade__tar_index_t;

/* The version of a shard an index was made from: a local shard's size and
 * mtime (ns), a remote one's size and a hash of its ETag (else its
 * Last-Modified). */
typedef struct lade__tar_ver {
  uint64_t size, a, b;
} lade__tar_ver_t;

/* One pass over a shard's headers read through `fn` (buffered preads, or a
 * streamed GET); errors name `shard`. */
int lade__tar_index_walk(lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx, uint64_t size, const char *shard);
/* What binds an index to the shard it was made from: a hash of the header
 * block of up to 8 members spread over the index (first and last included)
 * and of the data of those that are .cls members, read through fn. A stored
 * index whose bind differs from its shard's is another shard's (or the
 * shard changed without a new size or mtime): it is not used. */
uint64_t lade__tar_index_bind(const lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx);
/* Loads a stored index when it is whole (checksum) and made from version v
 * of the shard; else -1 and x is empty (no error set). */
int lade__tar_index_load(lade__tar_index_t *x, const char *path, lade__tar_ver_t v);
/* Stores it (temp file + rename); a failure only means the next open
 * indexes again. */
void lade__tar_index_store(const lade__tar_index_t *x, const char *path, lade__tar_ver_t v,
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

struct lade__tar_backend;

/* The source's state. The per-sample arrays are filled by open (tar.c) and
 * read-only after it: backends read them from any thread. */
typedef struct lade__tar {
  lade__tar_strs_t shards; /* as shown in messages: paths, URLs or s3:// names */
  lade__tar_strs_t names;  /* per sample: its chosen member's name */
  uint32_t *shard;         /* per sample */
  uint64_t *off;           /* per sample: data offset of its member */
  uint64_t *sizes;         /* per sample: bytes of its member */
  int32_t *labels;
  uint64_t *shard_off;     /* shards + 1: the shards plan's offsets */
  uint64_t count, cap;
  char **class_names;
  char *class_arena;
  uint64_t max_sample;
  uint64_t skipped;        /* groups without the member the transform needs */
  const struct lade__tar_backend *be;
  void *be_state;          /* the backend's */
} lade__tar_t;

/* A shard backend. */
typedef struct lade__tar_backend {
  /* Sets up for t->shards (a backend whose source names its shards itself,
   * a URL, lists them into t->shards first). */
  int (*open)(lade__tar_t *t, const struct lade_config *cfg, lade__source_t *s);
  /* The member index of shard i: stored, or built and stored. */
  int (*index)(lade__tar_t *t, const struct lade_config *cfg, size_t i, lade__tar_index_t *x);
  /* Optional: every shard is indexed, t->count samples are known. */
  int (*start)(lade__tar_t *t);
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
#ifdef LADE_HAVE_CURL
extern const lade__tar_backend_t lade__tar_http;
#endif

#endif
