/*
 * buf.h - a growable byte buffer, reused across samples by one worker. Every
 * tier that hands out sample bytes (sources, cache tiers, the fetch stage)
 * fills one, so it lives in core/ and no module needs another for it.
 */
#ifndef LADE__CORE_BUF_H
#define LADE__CORE_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct lade__buf {
  uint8_t *data;
  size_t len;
  size_t cap;
} lade__buf_t;

/* Grows b to hold at least cap bytes (len is kept). 0 or LADE_ENOMEM. */
int lade__buf_reserve(lade__buf_t *b, size_t cap);
/* Frees the bytes and zeroes b; b may be reused. */
void lade__buf_free(lade__buf_t *b);

#endif
