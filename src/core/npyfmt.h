/* npyfmt.h - the .npy header (NumPy format 1.0/2.0/3.0): parse and write.
 * Shared by the npy source, the npy transform, the generator and fuzzing. */
#ifndef LADE_NPYFMT_H
#define LADE_NPYFMT_H

#include <stddef.h>
#include <stdint.h>

#include "lade/lade.h"

typedef struct lade__npy_header {
  int dtype;                     /* lade_dtype_t */
  int ndim;
  int64_t shape[LADE_MAX_DIMS];
  size_t header_len;             /* bytes before the payload */
  size_t payload_bytes;          /* product(shape) * dtype size */
} lade__npy_header_t;

/* Parses the header at the start of `data` (len bytes available). Rejects
 * fortran_order=True, big-endian multi-byte dtypes, unsupported dtypes,
 * more than LADE_MAX_DIMS dimensions and any malformation, with the reason in
 * lade_last_error() and LADE_EFORMAT. Returns LADE_ERANGE when `len` is too
 * short to hold the whole header (read more and retry). */
int lade__npy_parse(const uint8_t *data, size_t len, lade__npy_header_t *out);

/* Writes a version 1.0 header for (dtype, shape) into buf (at most `size`
 * bytes); returns the header length or a negative code. */
int lade__npy_write_header(char *buf, size_t size, int dtype, int ndim, const int64_t *shape);

#endif
