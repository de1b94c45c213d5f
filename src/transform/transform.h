/*
 * transform.h - turning a sample's encoded bytes into its slot of a batch.
 *
 * A transform is one vtable. The engine creates it once per loader (init),
 * once per worker thread (worker_init: decoder objects, scratch buffers,
 * everything that would otherwise be allocated per sample), and calls apply()
 * for each sample with the bytes read by the fetch stage and a pointer into
 * the batch buffer. apply() must not allocate on the heap in the steady
 * state, and all its randomness must come from ctx->rng, which the engine keys
 * by (seed, epoch, sample index): that is what makes batches identical for
 * any thread count and after a resume.
 */
#ifndef LADE__TRANSFORM_H
#define LADE__TRANSFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* The settings a transform acts on (engine/resolve.c fills them). */
typedef struct lade__xform_conf {
  uint64_t raw_size;        /* raw: slot bytes (0: sample 0's size); npz: > 0 delivers the array's bytes flat */
  bool raw_cut;             /* raw_overflow=cut: a sample longer than raw_size keeps its first raw_size bytes */
  const char *npy_dtype;    /* npy: "" or the dtype every sample must have (borrowed) */
  const char *npz_member;   /* npz: the member (NAME or NAME.npy) each sample gives (borrowed) */
  uint32_t crop_size, resize_size;
  int image_dtype;          /* LADE_DTYPE_FLOAT32 (CHW, normalised) or LADE_DTYPE_UINT8 (HWC) */
  bool decode_scale;        /* libjpeg's scaled decode for large images (decode_scale=auto) */
  double scale_min, scale_max, ratio_min, ratio_max, hflip;
} lade__xform_conf_t;

/* The shape of one output sample (without the batch dimension). */
typedef struct lade__sample_shape {
  int dtype;
  int ndim;
  int64_t dims[LADE_MAX_DIMS - 1];
  size_t bytes; /* product(dims) * dtype size */
} lade__sample_shape_t;

typedef struct lade__xform_ctx {
  uint64_t index;   /* dataset index of the sample */
  uint64_t epoch;
  lade__rng_t *rng; /* keyed by (seed, epoch, index); owned by the engine */
} lade__xform_ctx_t;

typedef struct lade__transform_ops {
  const char *name;
  /* Creates the shared state; fills *shape. `first` / `first_len` are the
   * bytes of sample 0 (some transforms take their shape from it, e.g. raw and
   * npy); may be NULL when the source can say the shape itself. */
  int (*init)(void **state, const lade__xform_conf_t *cfg, const uint8_t *first, size_t first_len,
              lade__sample_shape_t *shape);
  void (*destroy)(void *state);
  /* Per worker thread scratch state; may be NULL for stateless transforms. */
  int (*worker_init)(void *state, void **wstate);
  void (*worker_free)(void *state, void *wstate);
  /* Writes exactly shape->bytes bytes at `out`; *payload is the useful byte
   * count (equals shape->bytes except for zero-padded raw samples). On bad
   * input returns a LADE_E* code with lade_last_error() saying why (the
   * engine prefixes the file name). */
  int (*apply)(void *state, void *wstate, const uint8_t *in, size_t len, const lade__xform_ctx_t *ctx, void *out,
               uint32_t *payload);
  /* Optional (NULL): the choices the transform made by measuring the
   * machine (the image decoder's pass and rows per read), "" before it made
   * them; called from any thread while workers apply. */
  void (*describe)(void *state, char *buf, size_t size);
} lade__transform_ops_t;

extern const lade__transform_ops_t lade__xform_raw;
extern const lade__transform_ops_t lade__xform_npy;
extern const lade__transform_ops_t lade__xform_npz; /* npz.c: one array of each .npz */
extern const lade__transform_ops_t lade__xform_imagenet_train;
extern const lade__transform_ops_t lade__xform_imagenet_eval;

#endif
