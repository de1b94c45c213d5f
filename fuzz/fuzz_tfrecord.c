/*
 * fuzz_tfrecord.c - libFuzzer target for the tfrecord format
 * (src/source/tfrecfmt.c): TFRecord framing and the tf.train.Example
 * decoder. The first input byte picks what the rest is: odd, one record's
 * data (a serialized Example: random bytes rarely get past the framing's
 * CRCs, so the decoder is reached directly too); even, a whole file, walked
 * record by record through a pread callback over the input, each record's
 * data CRC checked and its Example decoded. Checks the promises: a record
 * lies inside the file and the walk moves forward; a found feature's bytes
 * and a bytes value lie inside the record; the number of values and the
 * sample's size agree, and the values written fill exactly that; an error
 * always leaves a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "lade/lade.h"
#include "fuzz_mem.h"
#include "source/tfrecfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const uint8_t *p, size_t n, const uint8_t *base, size_t size) {
  return p >= base && n <= size && (size_t)(p - base) <= size - n;
}

static void decode(const uint8_t *ex, size_t n) {
  static const char *const names[] = {"image", "size", "label", "", "\x0a"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    lade__tfrec_feature_t f;
    int rc = lade__tfrec_find(ex, n, names[i], &f);
    if (rc < 0 && !lade_last_error()[0]) abort();
    if (rc != 1) continue;
    if (f.kind && !inside(f.p, f.n, ex, n)) abort();
    uint64_t sz = 0;
    rc = lade__tfrec_value_size(&f, &sz);
    if (rc < 0 && !lade_last_error()[0]) abort();
    if (f.kind == LADE__TFREC_BYTES && rc == 0) {
      const uint8_t *p;
      size_t len;
      if (lade__tfrec_first_bytes(&f, &p, &len) != 0 || len != sz || !inside(p, len, ex, n)) abort();
    }
    if ((f.kind == LADE__TFREC_INT64 || f.kind == LADE__TFREC_FLOAT) && rc == 0) {
      uint64_t k = 0, w = f.kind == LADE__TFREC_INT64 ? 8 : 4;
      if (sz / w > n) abort(); /* a value takes at least one byte of its list */
      uint8_t *v = malloc(sz ? (size_t)sz : 1);
      if (!v) continue;
      if (lade__tfrec_numbers(&f, v, sz / w, &k) != 0 || k * w != sz) abort();
      free(v);
    }
  }
  char buf[64];
  lade__tfrec_names(ex, n, buf, sizeof buf);
  if (strlen(buf) >= sizeof buf) abort();
  lade__clear_error();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t mode = data[0];
  data++;
  size--;
  if (mode & 1) {
    decode(data, size);
    return 0;
  }
  mem_t m = {data, size};
  lade__tfrec_reader_t r;
  lade__tfrec_init(&r, mem_pread, &m, size);
  lade__tfrec_record_t rec;
  uint64_t last = 0;
  int rc;
  while ((rc = lade__tfrec_next(&r, &rec)) == 1) {
    if (rec.off < last || rec.data_off != rec.off + LADE__TFREC_HEAD) abort();
    if (rec.data_off > size || rec.len > size - rec.data_off || size - rec.data_off - rec.len < LADE__TFREC_TAIL) abort();
    if (r.pos <= rec.off) abort();
    last = r.pos;
    uint32_t s, c;
    if (lade__tfrec_check(data + rec.data_off, (size_t)rec.len, data + rec.data_off + rec.len, &s, &c) == 0)
      decode(data + rec.data_off, (size_t)rec.len);
  }
  if (rc < 0 && !lade_last_error()[0]) abort();
  lade__clear_error();
  return 0;
}
