/*
 * fuzz_tar_index.c - libFuzzer target for what the tar source reads back
 * from disk besides shards: its stored index (SHARD.tar.ladeidx or
 * cache_dir/tarindex-*.bin, lade__tar_index_load) and `.cls` values
 * (parse_cls, static in src/source/tar.c), so this file includes tar.c (and
 * the fuzzer is built without the library's copy).
 *
 * The first input byte picks the parser (bit 0: a .cls value, else an index;
 * bit 1: the tfrecord format's index, LADETFR1, instead of tar's). For the
 * index the harness appends a correct checksum (seeded as the format's
 * source seeds it) and passes a version that matches the header's size and
 * mtime, so the fuzzer gets past those two gates to the bounds checks behind
 * them; a loaded index must keep every member (record, with its CRC) inside
 * the shard (a gzip or zlib TFRecord file's index, LADETFG1/LADETFZ1: inside
 * 2^64 bytes of inflated stream).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tar.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t mode = data[0];
  data++;
  size--;
  if (mode & 1) {
    int64_t v;
    if (size <= CLS_MAX && parse_cls(data, size, &v) == 0 && (v < 0 || v >= (1 << 24))) abort();
    return 0;
  }
  static char path[64];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_tar_index.%ld", (long)getpid());
  lade__tar_t t = {.fmt = mode & 2 ? &lade__tar_fmt_tfrecord : &lade__tar_fmt_tar, .index_seed = mode & 2 ? 77 : 0};
  uint8_t *b = malloc(size + 8);
  if (!b) return 0;
  if (size) memcpy(b, data, size);
  uint64_t sum = lade__hash64(b, size, t.index_seed);
  memcpy(b + size, &sum, 8);
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(b);
    return 0;
  }
  fwrite(b, 1, size + 8, f);
  fclose(f);
  lade__tar_ver_t v = {0, 0, 0};
  if (size >= sizeof(idx_hdr_t)) {
    idx_hdr_t h;
    memcpy(&h, data, sizeof h);
    v = (lade__tar_ver_t){h.shard_size, h.mtime_sec, h.mtime_nsec};
  }
  lade__tar_index_t x = {0};
  if (lade__tar_index_load(&t, &x, path, v) == 0) {
    uint64_t end = x.comp ? UINT64_MAX : v.size; /* a compressed file's offsets are in its inflated bytes */
    if (x.comp && !(mode & 2)) abort();           /* tar has no compressed index */
    for (size_t i = 0; i < x.n; i++) {
      if (x.m[i].data_off > end || end - x.m[i].data_off < t.fmt->tail ||
          x.m[i].size > end - x.m[i].data_off - t.fmt->tail)
        abort();
      if (t.fmt->names && strlen(lade__tar_strs_at(&x.names, i)) + 1 > x.names.len) abort();
      if (x.aux[i] / 8 > x.m[i].size) abort();
    }
    if (x.names.n != (t.fmt->names ? x.n : 0)) abort();
    lade__tar_index_free(&x);
  }
  free(b);
  return 0;
}
