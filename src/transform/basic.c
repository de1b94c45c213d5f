/* basic.c - the `raw` and `npy` transforms, and the transform registry. */
#include <stdlib.h>
#include <string.h>

#include "core/npyfmt.h"
#include "transform.h"

/* ---- raw: the sample's bytes, zero padded to a fixed slot. */

typedef struct raw_state {
  size_t slot;
  bool cut; /* raw_overflow=cut: a longer sample's first slot bytes */
} raw_state_t;

static int raw_init(void **state, const lade__xform_conf_t *cfg, const uint8_t *first, size_t first_len,
                    lade__sample_shape_t *shape) {
  raw_state_t *st = calloc(1, sizeof *st);
  if (!st) return lade__fail(LADE_ENOMEM, "raw transform: out of memory");
  st->slot = cfg->raw_size ? (size_t)cfg->raw_size : first_len;
  st->cut = cfg->raw_cut;
  if (st->slot == 0) {
    free(st);
    return lade__fail(LADE_EINVAL, "raw transform: sample 0 is empty; set raw_size to the slot size in bytes");
  }
  if (st->slot > UINT32_MAX) {
    size_t slot = st->slot;
    free(st);
    return lade__fail(LADE_ERANGE, "raw transform: slot of %zu bytes is larger than 4 GiB", slot);
  }
  shape->dtype = LADE_DTYPE_UINT8;
  shape->ndim = 1;
  shape->dims[0] = (int64_t)st->slot;
  shape->bytes = st->slot;
  *state = st;
  (void)first;
  return 0;
}

static void raw_destroy(void *state) { free(state); }

static int raw_apply(void *state, void *wstate, const uint8_t *in, size_t len, const lade__xform_ctx_t *ctx, void *out,
                     uint32_t *payload) {
  raw_state_t *st = state;
  if (len > st->slot && !st->cut)
    return lade__fail(LADE_ESHAPE, "sample is %zu bytes, larger than the raw slot of %zu bytes (set raw_size, or "
                      "raw_overflow=cut to keep its first raw_size bytes)", len, st->slot);
  if (len > st->slot) len = st->slot;
  memcpy(out, in, len);
  memset((uint8_t *)out + len, 0, st->slot - len);
  *payload = (uint32_t)len;
  return 0;
}

const lade__transform_ops_t lade__xform_raw = {
    .name = "raw", .init = raw_init, .destroy = raw_destroy, .apply = raw_apply};

/* ---- npy: the typed payload of a .npy, its header checked against the
 * dataset's, delivered in C order and the host's byte order. (The npy source
 * bypasses apply() and reads the payload straight into the slot; this path
 * serves .npy files from a cache tier or inside other sources.) */

typedef struct npy_state {
  lade__npy_header_t hdr;
} npy_state_t;

static int npy_init(void **state, const lade__xform_conf_t *cfg, const uint8_t *first, size_t first_len,
                    lade__sample_shape_t *shape) {
  npy_state_t *st = calloc(1, sizeof *st);
  if (!st) return lade__fail(LADE_ENOMEM, "npy transform: out of memory");
  int rc = lade__npy_parse(first, first_len, &st->hdr);
  if (rc) {
    free(st);
    return lade__fail_prefix(rc == LADE_ERANGE ? LADE_EFORMAT : rc, "npy transform, sample 0: ");
  }
  rc = lade__npy_check_sample_dims(st->hdr.ndim, "npy transform, sample 0");
  if (rc) {
    free(st);
    return rc;
  }
  if (cfg->npy_dtype && cfg->npy_dtype[0] && strcmp(cfg->npy_dtype, lade_dtype_name(st->hdr.dtype)) != 0) {
    int dt = st->hdr.dtype;
    free(st);
    return lade__fail(LADE_ESHAPE, "npy transform, sample 0: dtype %s, expected %s", lade_dtype_name(dt),
                      cfg->npy_dtype);
  }
  shape->dtype = st->hdr.dtype;
  shape->ndim = st->hdr.ndim;
  for (int i = 0; i < st->hdr.ndim; i++) shape->dims[i] = st->hdr.shape[i];
  shape->bytes = st->hdr.payload_bytes;
  *state = st;
  return 0;
}

static int npy_apply(void *state, void *wstate, const uint8_t *in, size_t len, const lade__xform_ctx_t *ctx, void *out,
                     uint32_t *payload) {
  npy_state_t *st = state;
  lade__npy_header_t h;
  int rc = lade__npy_parse(in, len, &h);
  if (rc == LADE_ERANGE) return lade__fail_prefix(LADE_EFORMAT, "%s", "truncated .npy: ");
  if (rc) return rc;
  if (!lade__npy_same(&h, &st->hdr)) {
    char a[192], b[192];
    lade__npy_describe(&h, a, sizeof a);
    lade__npy_describe(&st->hdr, b, sizeof b);
    return lade__fail(LADE_ESHAPE, "npy %s differs from the dataset's %s", a, b);
  }
  if (h.header_len + h.payload_bytes > len)
    return lade__fail(LADE_EFORMAT, "npy payload truncated: %zu of %zu bytes", len - h.header_len, h.payload_bytes);
  /* C order, host byte order: one memcpy; else transposed / swapped */
  lade__npy_to_c(&h, -1, in + h.header_len, out);
  *payload = (uint32_t)h.payload_bytes;
  return 0;
}

const lade__transform_ops_t lade__xform_npy = {
    .name = "npy", .init = npy_init, .destroy = raw_destroy, .apply = npy_apply};
