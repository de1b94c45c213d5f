/*
 * tar_reads.h - the reads a format's bind() makes (tar_impl.h), for a
 * sidecar bound to a remote shard (tar_http.c): recorded by a first call
 * (every read answered in full, with zeros), fetched (those of mask
 * `have`: Range requests, or the shard's first bytes), then served to a
 * second call in the same order, or in any order to check_entry. One
 * struct per binding, on its caller's stack; no lock.
 */
#ifndef LADE__TAR_READS_H
#define LADE__TAR_READS_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define LADE__TAR_READS 32 /* the most reads a format's bind() makes (tar 8, tfrecord 16) */

typedef struct lade__tar_reads {
  uint64_t off[LADE__TAR_READS];
  size_t len[LADE__TAR_READS];
  lade__buf_t got[LADE__TAR_READS];
  size_t n, served;
  uint32_t have; /* the reads fetched (bit k: read k) */
} lade__tar_reads_t;

/* lade__tar_pread_fn's: records a read (answered with zeros). */
long lade__tar_reads_record(void *ctx, void *dst, size_t len, uint64_t off);
/* Serves the recorded reads in their order; any other read fails, so the
 * bind differs: never a sidecar trusted on bytes that were not compared. */
long lade__tar_reads_served(void *ctx, void *dst, size_t len, uint64_t off);
/* Any part of a fetched read, in any order (check_entry's reads). */
long lade__tar_reads_kept(void *ctx, void *dst, size_t len, uint64_t off);
/* The reads of mask `now` that first (a shard's first bytes, from the
 * request that stood for its HEAD; NULL: none) holds, cut at the shard's
 * size: served from it. Returns their mask. */
uint32_t lade__tar_reads_first(lade__tar_reads_t *r, uint32_t now, const lade__buf_t *first, uint64_t size);
void lade__tar_reads_free(lade__tar_reads_t *r);

#endif
