/*
 * fuzz_tfrec_gzip.c - libFuzzer target for compressed TFRecord files
 * (src/source/tfrec_gzip.c): the inflating walk that indexes a gzip or zlib
 * file and the cache that reads it at random offsets. The first input byte
 * picks the kind (bit 0: gzip or zlib) and seeds the read sizes and
 * offsets; the rest is the compressed file. The oracle is zlib itself,
 * inflating the whole input as gunzip reads it (gzip members one after
 * another; a zlib stream's trailing bytes ignored). Checks the promises:
 *
 *   - the walk's bytes, read forward in reads of varied sizes (each starting
 *     at most 2 MiB before the end of the previous one), equal zlib's, for
 *     as long as both produce; a walk that reports no error has produced
 *     everything zlib did when zlib ended cleanly; produced() counts what
 *     came back; an error leaves words and a LADE_E* code;
 *   - the cache's reads at random offsets equal zlib's bytes there, come
 *     back short only where the stream ends, and fail with a message;
 *   - a failed read keeps failing (the walk's error sticks).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/core.h"
#include "fuzz_mem.h"
#include "lade/lade.h"
#include "source/tfrec_gzip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OUT_MAX ((size_t)4 << 20) /* inflated bytes looked at: zip bombs stop here */

/* zlib's inflation of the input, at most OUT_MAX bytes; *clean when the
 * stream ended as it should (every gzip member whole). */
static size_t reference(int kind, const uint8_t *in, size_t n, uint8_t *out, int *clean) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  *clean = 0;
  if (inflateInit2(&zs, kind == LADE__GZ_GZIP ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) abort();
  zs.next_in = (Bytef *)in;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = (uInt)OUT_MAX;
  for (;;) {
    int zr = inflate(&zs, Z_NO_FLUSH);
    if (zr == Z_STREAM_END) {
      if (kind == LADE__GZ_GZIP && zs.avail_in > 0 && zs.avail_out > 0) {
        if (inflateReset(&zs) != Z_OK) abort();
        continue;
      }
      *clean = 1;
      break;
    }
    if (zr != Z_OK || zs.avail_out == 0 || zs.avail_in == 0) break;
  }
  size_t got = OUT_MAX - zs.avail_out;
  inflateEnd(&zs);
  return got;
}

static uint32_t next_rand(uint32_t *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

/* The walk, read forward; returns what it produced (at most OUT_MAX). */
static size_t walk(int kind, mem_t *m, uint8_t *buf, uint32_t *seed, const uint8_t *ref, size_t nref, int clean) {
  lade__gz_walk_t *w = NULL;
  if (lade__gz_walk_open(&w, kind, mem_pread, m) != 0) {
    if (!lade_last_error()[0]) abort();
    return 0;
  }
  size_t off = 0;
  int failed = 0;
  while (off < OUT_MAX) {
    /* sometimes re-read a little of what came before (the walk allows 2 MiB) */
    size_t back = (next_rand(seed) & 3) == 0 ? next_rand(seed) % (off < 4096 ? off + 1 : 4096) : 0;
    size_t len = back + 1 + next_rand(seed) % 70000;
    if (len > OUT_MAX - off + back) len = OUT_MAX - off + back;
    long k = lade__gz_walk_pread(w, buf + off - back, len, off - back);
    if (k < 0) {
      int code = 0;
      const char *why = lade__gz_walk_error(w, &code);
      if (!why || !why[0] || code >= 0) abort();
      if (lade__gz_walk_pread(w, buf + off, 1, off) >= 0) abort(); /* the error sticks */
      failed = 1;
      break;
    }
    if ((size_t)k > len) abort();
    if ((size_t)k < back) abort(); /* the bytes before off were produced already */
    off = off - back + (size_t)k;
    if ((size_t)k < len) break; /* the stream ended */
  }
  size_t common = off < nref ? off : nref;
  if (memcmp(buf, ref, common) != 0) abort();
  if (!failed && off < OUT_MAX && lade__gz_walk_produced(w) != off) abort();
  if (!failed && clean && nref < OUT_MAX && off != nref) abort();
  lade__gz_walk_close(w);
  lade__clear_error();
  return off;
}

/* The cache at random offsets, against zlib's bytes. */
static void cache_reads(int kind, mem_t *m, uint32_t *seed, const uint8_t *ref, size_t nref, int clean) {
  lade__gz_cache_t *z = NULL;
  if (lade__gz_cache_create(&z, 1) != 0) abort();
  static uint8_t dst[65536];
  for (int i = 0; i < 12; i++) {
    uint64_t off = nref ? next_rand(seed) % (nref + 16) : next_rand(seed) % 16;
    size_t len = 1 + next_rand(seed) % 65536, got = 0;
    int first = 0;
    int rc = lade__gz_cache_read(z, 0, kind, mem_pread, m, off, dst, len, &got, &first);
    if (rc != 0) {
      if (!lade_last_error()[0]) abort();
      lade__clear_error();
      continue;
    }
    if (got > len) abort();
    if (off < nref) {
      size_t common = nref - off < got ? nref - off : got;
      if (memcmp(dst, ref + off, common) != 0) abort();
    }
    if (clean && nref < OUT_MAX && got < len && off + got != nref && off <= nref) abort();
    if (clean && nref < OUT_MAX && off >= nref && got != 0) abort();
  }
  uint64_t restarts = 0, resumes = 0;
  lade__gz_cache_counts(z, &restarts, &resumes);
  lade__gz_cache_destroy(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int kind = data[0] & 1 ? LADE__GZ_ZLIB : LADE__GZ_GZIP;
  uint32_t seed = data[0] >> 1;
  mem_t m = {data + 1, size - 1};
  static uint8_t *ref, *buf; /* once: a fresh 8 MiB per input costs more than the inflating */
  if (!ref && (!(ref = malloc(OUT_MAX)) || !(buf = malloc(OUT_MAX)))) abort();
  int clean = 0;
  size_t nref = reference(kind, m.p, m.n, ref, &clean);
  walk(kind, &m, buf, &seed, ref, nref, clean);
  cache_reads(kind, &m, &seed, ref, nref, clean);
  return 0;
}
