/* slices.c - the regular order behind the cursor (orders.h):
 * DistributedSampler slices of each epoch's global shuffle (regular.h),
 * every route "any tier". Two epoch permutations stay cached, since get()
 * and the prefetcher's look-ahead may be an epoch apart. Also the slices
 * part that planned.c uses for its short last step. */
#include <stdlib.h>

#include "orders.h"

int lade__order_slices_init(lade__order_slices_t *r, const lade__cursor_params_t *p) {
  *r = (lade__order_slices_t){.rp = lade__plan_params_of(&p->plan, p->shuffle, p->drop_last)};
  int rc = 0;
  for (int i = 0; i < 2 && !rc; i++) rc = lade__regular_create(&r->reg[i], &r->rp);
  uint64_t steps = lade__plan_steps(&r->rp);
  if (!rc && p->resumed) {
    const lade_position_t *pos = &p->resume;
    if (pos->epoch >= r->rp.epochs) {
      r->first = steps * r->rp.epochs; /* saved at the end */
      return 0;
    }
    if (pos->consumed > r->rp.samples)
      return lade__fail(LADE_EINVAL, "the resume position says %llu samples of epoch %llu were consumed, more than the "
                        "dataset's %llu", (unsigned long long)pos->consumed, (unsigned long long)pos->epoch,
                        (unsigned long long)r->rp.samples);
    r->rest = true;
    r->rest_epoch = pos->epoch;
    r->rest_consumed = pos->consumed;
    r->rest_rp = lade__plan_rest_params(&r->rp, pos->consumed);
    uint64_t rest_steps = r->rest_rp.samples ? lade__plan_steps(&r->rest_rp) : 0;
    r->rest_first = steps - rest_steps;
    r->first = pos->epoch * steps + r->rest_first;
  }
  return rc;
}

uint64_t lade__order_slices_consumed(const lade__order_slices_t *r, uint64_t e, uint64_t st) {
  uint64_t g = (uint64_t)r->rp.batch_size * r->rp.world_size;
  if (r->rest && e == r->rest_epoch) return r->rest_consumed + (st - r->rest_first) * g;
  return st * g;
}

void lade__order_slices_fini(lade__order_slices_t *r) {
  for (int i = 0; i < 2; i++) lade__regular_destroy(r->reg[i]);
}

/* The cached permutation holder for epoch e (the least recently used one is
 * recomputed on a miss). */
static lade__regular_t *reg_for(lade__order_slices_t *r, uint64_t e) {
  int pick = -1;
  for (int i = 0; i < 2; i++)
    if (lade__regular_cached_epoch(r->reg[i]) == e) pick = i;
  if (pick < 0) pick = r->tick[0] <= r->tick[1] ? 0 : 1;
  r->tick[pick] = ++r->clock;
  return r->reg[pick];
}

int lade__order_slices_samples(lade__order_slices_t *r, uint32_t rank, uint64_t e, uint64_t se, uint64_t st,
                               uint64_t *idx, uint32_t *n, uint32_t *valid) {
  if (!r->rest || e != r->rest_epoch) return lade__regular_local(reg_for(r, se), se, st, rank, idx, n, valid);
  if (st < r->rest_first) { /* before the run's start: not part of it */
    *n = *valid = 0;
    return 0;
  }
  uint64_t start = 0;
  lade__plan_slice(&r->rest_rp, st - r->rest_first, rank, &start, n, valid);
  return lade__regular_rest(reg_for(r, se), se, r->rest_consumed, start, *n, idx);
}

int lade__order_slices_get(lade__order_slices_t *r, uint32_t rank, uint64_t e, uint64_t se, uint64_t st,
                           lade__cursor_step_t *out) {
  int rc = lade__cursor_grow_samples(out, r->rp.batch_size);
  if (!rc) rc = lade__order_slices_samples(r, rank, e, se, st, out->idx, &out->n, &out->valid);
  if (!rc) lade__cursor_unrouted(out);
  return rc;
}

typedef struct regular_order {
  lade__order_t o;
  lade__order_slices_t sl;
} regular_order_t;

static int regular_get(lade__order_t *o, uint64_t q, lade__cursor_step_t *out) {
  regular_order_t *r = (regular_order_t *)o;
  uint64_t e = q / o->steps;
  return lade__order_slices_get(&r->sl, o->p->rank, e, e, q % o->steps, out);
}

static int regular_samples(lade__order_t *o, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid) {
  regular_order_t *r = (regular_order_t *)o;
  uint64_t e = q / o->steps;
  return lade__order_slices_samples(&r->sl, o->p->rank, e, e, q % o->steps, idx, n, valid);
}

static int regular_position(lade__order_t *o, uint64_t q, lade_position_t *out) {
  regular_order_t *r = (regular_order_t *)o;
  out->shuffle_epoch = q / o->steps;
  out->consumed = lade__order_slices_consumed(&r->sl, q / o->steps, q % o->steps);
  return 0;
}

static void regular_close(lade__order_t *o) {
  regular_order_t *r = (regular_order_t *)o;
  lade__order_slices_fini(&r->sl);
  free(r);
}

static const lade__order_ops_t regular_ops = {
    .get = regular_get,
    .samples = regular_samples,
    .position = regular_position,
    .close = regular_close,
};

int lade__order_regular_open(lade__order_t **out, const lade__cursor_params_t *p) {
  regular_order_t *r = calloc(1, sizeof *r);
  if (!r) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  r->o = (lade__order_t){.ops = &regular_ops, .p = p, .max_batch = p->plan.batch_size};
  int rc = lade__order_slices_init(&r->sl, p);
  if (rc) {
    regular_close(&r->o);
    return rc;
  }
  r->o.steps = lade__plan_steps(&r->sl.rp);
  r->o.first = r->sl.first;
  *out = &r->o;
  return 0;
}
