/*
 * stages.c - the stage account of the image transforms (lade.h,
 * lade_image_stages): where a crop's time goes on this machine, without a
 * profiler.
 *
 * Each decoder stage is timed by subtraction: the decoder is told to stop
 * after it (lade__imgacct_t.stop, transform/imagenet.h), and the same
 * images with the same boxes (the same seeds) run once per stop, so a stage
 * costs the difference between its stop and the one before. lade's own
 * steps are timed directly in a last, full run (a clock read per block of
 * rows; its cost shows as that run's excess over the untimed one). What is
 * left of the untimed transform after the decoder's stops and lade's steps
 * is the two slowing each other (the caches they share), which no single
 * stage shows. The transform's states are made here as a loader's worker
 * makes them, so the passes are the ones a loader runs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "engine/resolve.h"
#include "transform/imagenet.h"
#include "transform/transform.h"

typedef struct run {
  const lade__transform_ops_t *ops;
  void *st, *ws; /* the imagenet transforms' worker state is their decoder (xform_imagenet.c) */
  uint8_t *out;
  const uint8_t *const *img;
  const size_t *len;
  size_t n;
  uint64_t seed;
} run_t;

/* One pass over the images with the account stopping at `stop`: seconds per
 * image in *secs and the account in *acct; or a LADE code. */
static int pass(const run_t *r, int stop, double *secs, lade__imgacct_t *acct) {
  lade__imgacct_t *a = lade__imgdec_account(r->ws);
  memset(a, 0, sizeof *a);
  a->stop = stop;
  const double t0 = lade__now();
  int rc = 0;
  for (size_t i = 0; i < r->n && !rc; i++) {
    lade__rng_t rng;
    lade__rng_init(&rng, r->seed, (uint64_t)i, LADE__RNG_AUGMENT);
    lade__xform_ctx_t ctx = {(uint64_t)i, 0, &rng};
    uint32_t payload;
    if ((rc = r->ops->apply(r->st, r->ws, r->img[i], r->len[i], &ctx, r->out, &payload)) != 0)
      lade__fail_prefix(rc, "image %zu: ", i);
  }
  *secs = (lade__now() - t0) / (double)r->n;
  *acct = *a;
  a->stop = LADE__ACCT_OFF;
  return rc;
}

static int rounds_of(const run_t *r, int rounds, lade_image_stages_t *o) {
  static const int stops[5] = {LADE__ACCT_OFF, LADE__ACCT_HEADER, LADE__ACCT_ENTROPY, LADE__ACCT_DECODE,
                               LADE__ACCT_FULL};
  double best[5];
  for (int k = 0; k < 5; k++) best[k] = INFINITY;
  lade__imgacct_t a;
  double t;
  int rc;
  /* the decoder's timed choices first, so that every stop runs the same
   * passes (its trials take 4 x 8 JPEGs; none without a JPEG) */
  for (size_t seen = 0; seen < 64 && !lade__imgdec_choices(r->ws, NULL, 0); seen += r->n)
    if ((rc = pass(r, LADE__ACCT_OFF, &t, &a)) != 0) return rc;
  lade__imgdec_choices(r->ws, o->choices, sizeof o->choices);
  for (int i = 0; i < rounds; i++)
    for (int k = 0; k < 5; k++) {
      if ((rc = pass(r, stops[k], &t, &a)) != 0) return rc;
      if (t >= best[k]) continue;
      best[k] = t;
      if (stops[k] != LADE__ACCT_FULL || a.images == 0) continue;
      const double im = (double)a.images;
      o->plan = a.plan_s / im;
      o->decoder = a.decoder_s / im;
      o->hpass = a.hpass_s / im;
      o->finish = a.finish_s / im;
      o->rows_frac = a.rows_frac / im;
      o->area_frac = a.area_frac / im;
    }
  o->transform = best[0];
  o->header = best[1];
  o->entropy = best[2];
  o->decode = best[3];
  o->timed = best[4];
  return 0;
}

int lade_image_stages(const lade_config_t *cfg, const uint8_t *const *images, const size_t *lens, size_t n,
                      int rounds, lade_image_stages_t *out, size_t out_size) {
  lade_image_stages_t o;
  memset(&o, 0, sizeof o);
  if (!cfg || !out || out_size < 8 || (n && (!images || !lens)))
    return lade__fail(LADE_EINVAL, "lade_image_stages: NULL argument or out_size below 8");
  if (n == 0) return lade__fail(LADE_EINVAL, "lade_image_stages: no images");
  run_t r = {.img = images, .len = lens, .n = n, .seed = cfg->seed};
  if (cfg->transform == LADE__XF_IMAGENET_TRAIN) r.ops = &lade__xform_imagenet_train;
  else if (cfg->transform == LADE__XF_IMAGENET_EVAL) r.ops = &lade__xform_imagenet_eval;
  else return lade__fail(LADE_EUNSUPPORTED, "lade_image_stages: the transform must be imagenet-train or imagenet-eval");
  o.images = (uint32_t)LADE__MIN(n, UINT32_MAX);
  o.rounds = (uint32_t)(rounds < 1 ? 1 : rounds);
  lade__sample_shape_t shape;
  lade__xform_conf_t xc = lade__resolve_xform(cfg);
  int rc = r.ops->init(&r.st, &xc, NULL, 0, &shape);
  if (rc) return rc;
  if (!(r.out = malloc(shape.bytes))) rc = lade__fail(LADE_ENOMEM, "out of memory");
  else if ((rc = r.ops->worker_init(r.st, &r.ws)) == 0) {
    rc = rounds_of(&r, (int)o.rounds, &o);
    r.ops->worker_free(r.st, r.ws);
  }
  free(r.out);
  r.ops->destroy(r.st);
  if (rc == 0) memcpy(out, &o, LADE__MIN(out_size, sizeof o));
  return rc;
}
