/* npyfmt.h - the .npy header (NumPy format 1.0/2.0/3.0): parse and write.
 * Shared by the npy source, the npy transform, the generator and fuzzing. */
#ifndef LADE__NPYFMT_H
#define LADE__NPYFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lade/lade.h"

/* The most dimensions a header may have: numpy 2's NPY_MAXDIMS (numpy 1
 * allows 32). The parser reads every header np.load reads; a sample of more
 * than LADE__NPY_SAMPLE_DIMS dimensions is refused by its user, which names
 * the file and the limit. */
#define LADE__NPY_MAX_DIMS 64
/* The most dimensions of one sample: lade_batch_t.shape holds LADE_MAX_DIMS,
 * one of them the batch dimension (raising it changes the public ABI). */
#define LADE__NPY_SAMPLE_DIMS (LADE_MAX_DIMS - 1)

typedef struct lade__npy_header {
  int dtype;                     /* lade_dtype_t */
  int ndim;
  int64_t shape[LADE__NPY_MAX_DIMS];
  size_t header_len;             /* bytes before the payload */
  size_t payload_bytes;          /* product(shape) * dtype size */
  /* The payload's layout, when it is not C order in the host's byte order.
   * fortran is set only when it changes the element order (more than one
   * dimension longer than 1); swap only for multi-byte types. */
  bool fortran;                  /* fortran_order: True (column-major) */
  bool swap;                     /* the other byte order than the host's */
} lade__npy_header_t;

/* Parses the header at the start of `data` (len bytes available). Accepts
 * what np.load accepts of the supported dtypes: C and fortran order, either
 * byte order, zero-size shapes ((0,), (3, 0)), up to LADE__NPY_MAX_DIMS
 * dimensions, and the 'L' suffix of Python 2's long integers in the shape
 * of version 1.0 and 2.0 headers ((1L, 2L), as numpy's _filter_header
 * drops it). Rejects unsupported dtypes and any malformation, with the
 * reason in lade_last_error() and LADE_EFORMAT. Returns LADE_ERANGE when
 * `len` is too short to hold the whole header (read more and retry). */
int lade__npy_parse(const uint8_t *data, size_t len, lade__npy_header_t *out);

/* True when the payload is already C order in the host's byte order, so it
 * can be read straight into a batch slot. */
static inline bool lade__npy_plain(const lade__npy_header_t *h) { return !h->fortran && !h->swap; }

/* Same dtype, shape and layout (the header bytes may still differ). */
bool lade__npy_same(const lade__npy_header_t *a, const lade__npy_header_t *b);

/* 0, or LADE_ESHAPE naming `what` when a sample of `ndim` dimensions (the
 * header's, less one for a stacked file) is more than a batch can hold. */
int lade__npy_check_sample_dims(int ndim, const char *what);

/* Writes "float32 (3,4)" plus ", fortran order" / ", big-endian" as they
 * apply: for error messages naming what differs. */
void lade__npy_describe(const lade__npy_header_t *h, char *buf, size_t size);

/* Copies one sample from its file layout into dst in C order and the host's
 * byte order. `payload` is the first byte after the header. row < 0: the
 * whole array (a file per sample; h->payload_bytes are written); row >= 0:
 * row `row` of a stacked N x ... array (payload_bytes / N are written). For
 * a fortran-order stacked file the row is strided over the whole payload,
 * so all of it must be readable. */
void lade__npy_to_c(const lade__npy_header_t *h, int64_t row, const uint8_t *payload, void *dst);

/* Reverses the bytes of each of `count` elements of `esize` bytes, in place. */
void lade__npy_swap(void *buf, size_t count, size_t esize);

/* Writes a version 1.0 header for (dtype, shape) into buf (at most `size`
 * bytes); returns the header length or a negative code. */
int lade__npy_write_header(char *buf, size_t size, int dtype, int ndim, const int64_t *shape);

#endif
