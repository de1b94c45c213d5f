/*
 * xform_imagenet.c - the imagenet-train and imagenet-eval transforms: the
 * torchvision recipes (RandomResizedCrop + RandomHorizontalFlip, and
 * Resize + CenterCrop) expressed as one source-pixel box per image so the
 * decoder only decodes what the box needs (see imagenet.c).
 *
 * JPEG and PNG are told apart by content (imagenet.c), whatever the file
 * name says.
 *
 * Randomness order per sample (part of the reproducibility contract): the
 * crop parameters first (lade__rrc_params), then one lade__rng_double for the
 * flip.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transform/imagenet.h"
#include "transform/transform.h"

typedef struct xf_state {
  int crop, resize, dtype;
  bool decode_scale;
  double scale_min, scale_max, ratio_min, ratio_max, hflip;
  /* the first worker decoder's timed choices (describe): 0 none, 1 being
   * written by the worker that claimed it, 2 written */
  atomic_int choices_state;
  char choices[96];
} xf_state_t;

/* After a decode: the first decoder to have made its choices publishes them. */
static void publish_choices(xf_state_t *s, const lade__imgdec_t *d) {
  if (atomic_load_explicit(&s->choices_state, memory_order_relaxed)) return;
  char buf[sizeof s->choices];
  int zero = 0;
  if (!lade__imgdec_choices(d, buf, sizeof buf) ||
      !atomic_compare_exchange_strong_explicit(&s->choices_state, &zero, 1, memory_order_relaxed,
                                               memory_order_relaxed))
    return;
  memcpy(s->choices, buf, sizeof buf);
  atomic_store_explicit(&s->choices_state, 2, memory_order_release);
}

static void xf_describe(void *state, char *buf, size_t size) {
  xf_state_t *s = state;
  if (size) buf[0] = 0;
  if (s && atomic_load_explicit(&s->choices_state, memory_order_acquire) == 2) snprintf(buf, size, "%s", s->choices);
}

static int xf_init(void **state, const lade__xform_conf_t *cfg, const uint8_t *first, size_t first_len,
                   lade__sample_shape_t *shape) {
  LADE__UNUSED(first);
  LADE__UNUSED(first_len);
  *state = NULL;
#ifndef LADE_HAVE_JPEG
  LADE__UNUSED(cfg);
  LADE__UNUSED(shape);
  return lade__fail(LADE_EUNSUPPORTED,
                    "the imagenet transforms need JPEG support, which is not built in (install libjpeg-turbo and "
                    "reconfigure)");
#else
  if (cfg->crop_size == 0) return lade__fail(LADE_EINVAL, "crop_size must be > 0");
  if (cfg->image_dtype != LADE_DTYPE_FLOAT32 && cfg->image_dtype != LADE_DTYPE_UINT8)
    return lade__fail(LADE_EINVAL, "image_dtype must be float32 or uint8");
  xf_state_t *s = calloc(1, sizeof(*s));
  if (!s) return lade__fail(LADE_ENOMEM, "out of memory");
  s->crop = (int)cfg->crop_size;
  s->resize = (int)cfg->resize_size;
  s->dtype = cfg->image_dtype;
  s->decode_scale = cfg->decode_scale;
  s->scale_min = cfg->scale_min;
  s->scale_max = cfg->scale_max;
  s->ratio_min = cfg->ratio_min;
  s->ratio_max = cfg->ratio_max;
  s->hflip = cfg->hflip;
  shape->dtype = s->dtype;
  shape->ndim = 3;
  if (s->dtype == LADE_DTYPE_FLOAT32) {
    shape->dims[0] = 3;
    shape->dims[1] = s->crop;
    shape->dims[2] = s->crop;
  } else {
    shape->dims[0] = s->crop;
    shape->dims[1] = s->crop;
    shape->dims[2] = 3;
  }
  shape->bytes = (size_t)3 * (size_t)s->crop * (size_t)s->crop * lade_dtype_size(s->dtype);
  *state = s;
  return 0;
#endif
}

static void xf_destroy(void *state) { free(state); }

static int xf_worker_init(void *state, void **wstate) {
  const xf_state_t *s = state;
  lade__imgdec_t *d = NULL;
  int rc = lade__imgdec_create(&d);
  if (d) lade__imgdec_set_decode_scale(d, s->decode_scale);
  *wstate = d;
  return rc;
}

static void xf_worker_free(void *state, void *wstate) {
  LADE__UNUSED(state);
  lade__imgdec_destroy(wstate);
}

static int train_apply(void *state, void *wstate, const uint8_t *in, size_t len, const lade__xform_ctx_t *ctx,
                       void *out, uint32_t *payload) {
  const xf_state_t *s = state;
  lade__imgdec_t *d = wstate;
  int W, H, top, left, h, w, rc;
  if ((rc = lade__img_size(d, in, len, &W, &H)) != 0) return rc;
  lade__rrc_params(ctx->rng, W, H, s->scale_min, s->scale_max, s->ratio_min, s->ratio_max, &top, &left, &h, &w);
  bool flip = lade__rng_double(ctx->rng) < s->hflip;
  if ((rc = lade__imgdec_crop(d, in, len, top, left, h, w, s->crop, flip, s->dtype, out)) != 0) return rc;
  publish_choices(state, d);
  *payload = (uint32_t)(3u * (unsigned)s->crop * (unsigned)s->crop * lade_dtype_size(s->dtype));
  return 0;
}

/*
 * torchvision Resize(resize) on a WxH image gives (new_w, new_h) with the
 * shorter side = resize and the longer int(resize * long / short); CenterCrop
 * starts at int(round((new - crop) / 2.0)). The crop window maps back to the
 * source box [left * W/new_w, (left + crop) * W/new_w) and likewise in y.
 */
static void eval_box(int W, int H, int resize, int crop, double *top, double *left, double *h, double *w) {
  int nw, nh;
  if (W <= H) {
    nw = resize;
    nh = (int)((double)resize * H / W);
  } else {
    nh = resize;
    nw = (int)((double)resize * W / H);
  }
  if (nw < 1) nw = 1;
  if (nh < 1) nh = 1;
  /* A crop larger than the resized image would be zero-padded by
   * torchvision; we clamp the window to the image instead. */
  int cw = LADE__MIN(crop, nw), ch = LADE__MIN(crop, nh);
  int cl = (int)nearbyint((nw - cw) / 2.0), ct = (int)nearbyint((nh - ch) / 2.0);
  double sx = (double)W / nw, sy = (double)H / nh;
  *left = cl * sx;
  *w = cw * sx;
  *top = ct * sy;
  *h = ch * sy;
}

static int eval_apply(void *state, void *wstate, const uint8_t *in, size_t len, const lade__xform_ctx_t *ctx,
                      void *out, uint32_t *payload) {
  LADE__UNUSED(ctx);
  const xf_state_t *s = state;
  lade__imgdec_t *d = wstate;
  int W, H, rc;
  double top, left, h, w;
  if ((rc = lade__img_size(d, in, len, &W, &H)) != 0) return rc;
  eval_box(W, H, s->resize > 0 ? s->resize : s->crop, s->crop, &top, &left, &h, &w);
  if ((rc = lade__imgdec_resize_crop(d, in, len, top, left, h, w, s->crop, false, s->dtype, out)) != 0) return rc;
  publish_choices(state, d);
  *payload = (uint32_t)(3u * (unsigned)s->crop * (unsigned)s->crop * lade_dtype_size(s->dtype));
  return 0;
}

const lade__transform_ops_t lade__xform_imagenet_train = {.name = "imagenet-train",
                                                         .init = xf_init,
                                                         .destroy = xf_destroy,
                                                         .worker_init = xf_worker_init,
                                                         .worker_free = xf_worker_free,
                                                         .apply = train_apply,
                                                         .describe = xf_describe};

const lade__transform_ops_t lade__xform_imagenet_eval = {.name = "imagenet-eval",
                                                         .init = xf_init,
                                                         .destroy = xf_destroy,
                                                         .worker_init = xf_worker_init,
                                                         .worker_free = xf_worker_free,
                                                         .apply = eval_apply,
                                                         .describe = xf_describe};
