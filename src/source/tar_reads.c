/* tar_reads.c - the reads a format's bind() makes (tar_reads.h). */
#include "source/tar_reads.h"

#include <string.h>

#include "core/core.h"

long lade__tar_reads_record(void *ctx, void *dst, size_t len, uint64_t off) {
  lade__tar_reads_t *r = ctx;
  if (r->n == LADE__TAR_READS) return -1;
  r->off[r->n] = off;
  r->len[r->n++] = len;
  memset(dst, 0, len);
  return (long)len;
}

long lade__tar_reads_served(void *ctx, void *dst, size_t len, uint64_t off) {
  lade__tar_reads_t *r = ctx;
  size_t k = r->served++;
  if (k >= r->n || r->off[k] != off || r->len[k] != len || !(r->have >> k & 1)) return -1;
  size_t n = LADE__MIN(len, r->got[k].len);
  if (n) memcpy(dst, r->got[k].data, n);
  return (long)n;
}

long lade__tar_reads_kept(void *ctx, void *dst, size_t len, uint64_t off) {
  lade__tar_reads_t *r = ctx;
  for (size_t k = 0; k < r->n; k++) {
    if (!(r->have >> k & 1) || off < r->off[k] || off - r->off[k] > r->len[k] || len > r->len[k] - (off - r->off[k]))
      continue;
    size_t at = (size_t)(off - r->off[k]), n = at < r->got[k].len ? LADE__MIN(len, r->got[k].len - at) : 0;
    if (n) memcpy(dst, r->got[k].data + at, n);
    return (long)n;
  }
  return -1;
}

uint32_t lade__tar_reads_first(lade__tar_reads_t *r, uint32_t now, const lade__buf_t *first, uint64_t size) {
  uint32_t got = 0;
  for (size_t q = 0; q < r->n && first; q++) {
    uint64_t end = LADE__MIN(r->off[q] + r->len[q], size);
    if (!(now >> q & 1) || end > first->len) continue;
    size_t n = r->off[q] < end ? (size_t)(end - r->off[q]) : 0;
    if (lade__buf_reserve(&r->got[q], n ? n : 1) != 0) {
      lade__clear_error();
      continue; /* asked by a Range instead */
    }
    if (n) memcpy(r->got[q].data, first->data + r->off[q], n);
    r->got[q].len = n;
    r->have |= 1u << q;
    got |= 1u << q;
  }
  return got;
}

void lade__tar_reads_free(lade__tar_reads_t *r) {
  for (size_t k = 0; k < LADE__TAR_READS; k++) lade__buf_free(&r->got[k]);
}
