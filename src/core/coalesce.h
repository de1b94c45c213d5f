/*
 * coalesce.h - SOLAR's aggregated chunk loading (paper 002 section 4.4) for any
 * store: the reads of one batch, sorted by place, with neighbours merged
 * into one read when the gap between them costs less than another request.
 * One rule for every source that reads many samples from one object: the
 * tar source's Range requests (tar_http.c, gap in bytes) and the hdf5
 * source's hyperslabs (hdf5.c, gap in samples, converted to bytes).
 */
#ifndef LADE__COALESCE_H
#define LADE__COALESCE_H

#include <stddef.h>
#include <stdint.h>

/* One sample's bytes: [off, off + len) of object `group` (a shard, a file). */
typedef struct lade__span {
  uint64_t group, off, len;
} lade__span_t;

/* One read: spans [first, first + count) of the input, bytes [start, end). */
typedef struct lade__run {
  size_t first, count;
  uint64_t start, end;
} lade__run_t;

/*
 * v[0..n) sorted by (group, off). Writes to out (room for n) the runs in
 * which each next span is in the same group and starts at most `gap` bytes
 * after the run's end so far, and the run stays within max_len bytes (a
 * span longer than max_len is a run of its own; equal or overlapping spans,
 * a sample asked twice, merge). Returns the number of runs.
 */
size_t lade__coalesce(const lade__span_t *v, size_t n, uint64_t gap, uint64_t max_len, lade__run_t *out);

#endif
