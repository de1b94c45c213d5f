/*
 * fuzz_npy.c - libFuzzer target for the .npy header parser
 * (lade__npy_parse, src/core/npyfmt.c). Checks the parser's promises on
 * success: the header fits in the input and the shape is sane.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/npyfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lade__npy_header_t h;
  if (lade__npy_parse(data, size, &h) != 0) return 0;
  if (h.header_len > size || h.ndim < 0 || h.ndim > LADE_MAX_DIMS) abort();
  for (int i = 0; i < h.ndim; i++)
    if (h.shape[i] < 0) abort();
  return 0;
}
