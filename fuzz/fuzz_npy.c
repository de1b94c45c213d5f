/*
 * fuzz_npy.c - libFuzzer target for the .npy header parser
 * (lade__npy_parse, src/core/npyfmt.c) and the layout conversion behind it
 * (lade__npy_to_c: fortran order, byte swapping). Checks the parser's
 * promises on success: the header fits in the input, the shape is sane, and
 * when the input holds the whole payload, converting it (as one array and as
 * its last stacked row) reads and writes only inside the buffers (ASan).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/npyfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lade__npy_header_t h;
  if (lade__npy_parse(data, size, &h) != 0) return 0;
  if (h.header_len > size || h.ndim < 0 || h.ndim > LADE__NPY_MAX_DIMS) abort();
  uint64_t count = 1;
  for (int i = 0; i < h.ndim; i++) {
    if (h.shape[i] < 0) abort();
    count *= (uint64_t)h.shape[i];
  }
  if (h.payload_bytes != count * lade_dtype_size(h.dtype)) abort();
  if (h.payload_bytes == 0 || h.payload_bytes > (1u << 20) || size - h.header_len < h.payload_bytes) return 0;
  /* exactly the payload, in its own allocation, so a read past it is caught */
  uint8_t *payload = malloc(h.payload_bytes), *out = malloc(h.payload_bytes);
  if (!payload || !out) abort();
  memcpy(payload, data + h.header_len, h.payload_bytes);
  lade__npy_to_c(&h, -1, payload, out);
  if (h.ndim >= 1) lade__npy_to_c(&h, h.shape[0] - 1, payload, out);
  free(payload);
  free(out);
  return 0;
}
