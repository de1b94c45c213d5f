/* fuzz_mem.h - the input buffer as a file: a pread callback over it, for
 * the targets that walk a whole shard (fuzz_tar.c, fuzz_tfrecord.c). */
#ifndef LADE_FUZZ_MEM_H
#define LADE_FUZZ_MEM_H

#include <stdint.h>
#include <string.h>

typedef struct mem {
  const uint8_t *p;
  size_t n;
} mem_t;

static inline long mem_pread(void *ctx, void *buf, size_t len, uint64_t off) {
  mem_t *m = ctx;
  if (off >= m->n) return 0;
  size_t k = m->n - (size_t)off < len ? m->n - (size_t)off : len;
  memcpy(buf, m->p + off, k);
  return (long)k;
}

#endif
