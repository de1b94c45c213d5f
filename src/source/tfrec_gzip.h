/*
 * tfrec_gzip.h - a gzip or zlib stream read at offsets of its uncompressed
 * bytes: TFRecord files written with TFRecordOptions(compression_type=
 * "GZIP" or "ZLIB"), where the whole file is one deflate stream
 * (docs/sources.md "tfrecord"). Two ways in, both over a pread-like
 * callback of the compressed bytes (tarfmt.h):
 *
 *   a walk      one forward pass (the index): a lade__tar_pread_fn over the
 *               uncompressed bytes;
 *   a cache     reads at any offset of any of a source's files, through a
 *               few inflate cursors per file and points to resume from
 *               (tfrec_gzip.c says how); thread-safe.
 *
 * Without zlib (LADE_HAVE_ZLIB unset) both fail to open, saying so.
 */
#ifndef LADE__TFREC_GZIP_H
#define LADE__TFREC_GZIP_H

#include <stddef.h>
#include <stdint.h>

#include "tarfmt.h" /* lade__tar_pread_fn */

/* A file's compression (a stored index keeps it: tar_impl.h). */
enum { LADE__GZ_NONE = 0, LADE__GZ_GZIP = 1, LADE__GZ_ZLIB = 2 };

/* "gzip", "zlib", "none": for messages. */
const char *lade__gz_name(int kind);

/* ---- one forward pass */

typedef struct lade__gz_walk lade__gz_walk_t;

/* A pass over a stream of `kind` whose compressed bytes come through fn/ctx
 * (borrowed, read forward only). 0, or LADE_ENOMEM / LADE_EUNSUPPORTED (no
 * zlib in this build) with a message. */
int lade__gz_walk_open(lade__gz_walk_t **out, int kind, lade__tar_pread_fn fn, void *ctx);
/* lade__tar_pread_fn over the uncompressed bytes (ctx: the walk). A read may
 * start up to 2 MiB before the end of the previous one; fewer bytes than
 * asked at the stream's end; a negative errno on an error, which then
 * sticks, its words in lade__gz_walk_error(). */
long lade__gz_walk_pread(void *ctx, void *dst, size_t len, uint64_t off);
/* The failed read's words ("the gzip stream is damaged (invalid block type)
 * at byte 4113 of the file ...") and its LADE_E* code, or NULL. */
const char *lade__gz_walk_error(const lade__gz_walk_t *w, int *code);
/* The uncompressed bytes produced so far: all of them once a read came back
 * short. */
uint64_t lade__gz_walk_produced(const lade__gz_walk_t *w);
void lade__gz_walk_close(lade__gz_walk_t *w); /* NULL: nothing */

/* ---- reads at random */

typedef struct lade__gz_cache lade__gz_cache_t;

/* A cache for `files` files (numbered from 0). 0, or LADE_ENOMEM /
 * LADE_EUNSUPPORTED (no zlib in this build) with a message. */
int lade__gz_cache_create(lade__gz_cache_t **out, size_t files);
void lade__gz_cache_destroy(lade__gz_cache_t *z); /* NULL: nothing */
/* len bytes at uncompressed offset off of file `file` (of `kind`, its
 * compressed bytes through fn/ctx, borrowed for the call) into dst. 0 with
 * *got (fewer than len: the stream ends first), or a LADE_E* code whose
 * message says what, not which file. *first_restart is set to 1 when this
 * read is the cache's first to inflate a file again from its start (the
 * caller warns once), else 0. Thread-safe; reads of one file take turns. */
int lade__gz_cache_read(lade__gz_cache_t *z, size_t file, int kind, lade__tar_pread_fn fn, void *ctx, uint64_t off,
                        void *dst, size_t len, size_t *got, int *first_restart);
/* Counters: reads that inflated a file again from its start (restarts),
 * and from a kept point inside it (resumes). Thread-safe. */
void lade__gz_cache_counts(lade__gz_cache_t *z, uint64_t *restarts, uint64_t *resumes);

#endif
