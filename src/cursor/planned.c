/* planned.c - every planner kind behind the cursor (orders.h): the
 * planner driver (planner.c) positioned at the loader's step, this rank's
 * part of each planned step copied out with its routes, admits, evicts and
 * the samples its cache sends to the other learners.
 *
 * A planned global batch is always full (the simulator's model), so with
 * the loader's drop_last off its short last step is the regular slice of
 * the same shuffle epoch, routed "any tier" (cursor.h). A kind with cache
 * state computes steps in order; lade_plan_seek() replays for a step behind
 * the planner's position. */
#include <stdlib.h>
#include <string.h>

#include "orders.h"
#include "planner/planner.h"

typedef struct planned_order {
  lade__order_t o;
  lade_plan_t *pl;      /* drop_last: whole global batches only */
  uint64_t plan_steps;  /* its steps per epoch */
  uint64_t plan_first, plan_rest; /* a resumed run: the planner's first step in the resume epoch, and how many */
  lade__order_slices_t sl; /* the short last step */
} planned_order_t;

/* Two tiers: the own cache's reads from disk get their own route, and the
 * admits' tiers and this rank's moves are copied out. */
static int tiers_of(const lade_plan_step_t *v, uint32_t r, uint64_t a, uint64_t b, lade__cursor_step_t *out) {
  for (uint64_t i = a; i < b; i++)
    if (v->from[i] == LADE_FROM_CACHE && v->tier[i] == LADE_TIER_DISK) out->from[i - a] = LADE__ROUTE_OWN_DISK;
  uint64_t aa = v->admit_offset[r], ma = v->move_offset[r], mb = v->move_offset[r + 1];
  int rc = lade__cursor_grow((void **)&out->admit_tier, &out->admt_cap, out->nadmit, sizeof *out->admit_tier);
  uint32_t tcap = out->move_cap;
  if (!rc) rc = lade__cursor_grow((void **)&out->move_to, &tcap, mb - ma, sizeof *out->move_to);
  if (!rc) rc = lade__cursor_grow((void **)&out->move, &out->move_cap, mb - ma, sizeof *out->move);
  if (rc) return rc;
  if (out->nadmit) memcpy(out->admit_tier, v->admit_tier + aa, out->nadmit);
  out->nmove = (uint32_t)(mb - ma);
  if (mb > ma) {
    memcpy(out->move, v->move + ma, (mb - ma) * sizeof *out->move);
    memcpy(out->move_to, v->move_to + ma, mb - ma);
  }
  return 0;
}

/* This rank's part of planned step (e, st). */
static int planned_step(planned_order_t *po, uint64_t e, uint64_t st, lade__cursor_step_t *out) {
  lade_plan_t *pl = po->pl;
  int rc = 0;
  if (pl->epoch != e || pl->step != st) rc = lade_plan_seek(pl, e, st);
  const lade_plan_step_t *v = NULL;
  if (!rc) rc = lade_plan_next(pl, &v);
  if (rc) return rc;
  uint32_t r = po->o.p->rank;
  uint64_t a = v->offset[r], b = v->offset[r + 1];
  uint64_t aa = v->admit_offset[r], ab = v->admit_offset[r + 1];
  uint64_t ea = v->evict_offset[r], eb = v->evict_offset[r + 1];
  uint64_t most = po->o.max_batch;
  if (b - a > most)
    return lade__fail(LADE_ERANGE, "plan %s gives rank %u %llu samples at (epoch %llu, step %llu), more than its batch "
                      "of %llu", lade_plan_kind_name(pl->s.kind), r, (unsigned long long)(b - a),
                      (unsigned long long)e, (unsigned long long)st, (unsigned long long)most);
  rc = lade__cursor_grow_samples(out, b - a);
  if (!rc) rc = lade__cursor_grow((void **)&out->admit, &out->adm_cap, ab - aa, sizeof *out->admit);
  if (!rc) rc = lade__cursor_grow((void **)&out->evict, &out->ev_cap, eb - ea, sizeof *out->evict);
  if (rc) return rc;
  out->n = out->valid = (uint32_t)(b - a);
  if (b > a) {
    memcpy(out->idx, v->samples + a, (b - a) * sizeof *out->idx);
    memcpy(out->from, v->from + a, (b - a) * sizeof *out->from);
  }
  out->nadmit = (uint32_t)(ab - aa);
  out->nevict = (uint32_t)(eb - ea);
  if (ab > aa) memcpy(out->admit, v->admit + aa, (ab - aa) * sizeof *out->admit);
  if (eb > ea) memcpy(out->evict, v->evict + ea, (eb - ea) * sizeof *out->evict);
  out->nmove = 0;
  if (v->tier && (rc = tiers_of(v, r, a, b, out)) != 0) return rc;
  /* what the other learners read from this rank's cache, in global batch order */
  out->nsend = 0;
  for (uint32_t d = 0; d < v->learners; d++) {
    if (d == r) continue;
    for (uint64_t i = v->offset[d]; i < v->offset[d + 1]; i++) {
      if (v->from[i] != (int32_t)r) continue;
      if (out->nsend == out->send_cap) {
        uint32_t dcap = out->send_cap;
        rc = lade__cursor_grow((void **)&out->send_idx, &out->send_cap, (uint64_t)out->nsend * 2 + 16,
                               sizeof *out->send_idx);
        if (!rc) rc = lade__cursor_grow((void **)&out->send_dst, &dcap, out->send_cap, sizeof *out->send_dst);
        if (rc) return rc;
      }
      out->send_idx[out->nsend] = v->samples[i];
      out->send_dst[out->nsend++] = d;
    }
  }
  return 0;
}

static int planned_get(lade__order_t *o, uint64_t q, lade__cursor_step_t *out) {
  planned_order_t *po = (planned_order_t *)o;
  uint64_t e = q / o->steps, st = q % o->steps, se = lade__plan_shuffle_epoch(po->pl, e);
  if (po->sl.rest && e == po->sl.rest_epoch) { /* the rest of a resumed epoch: its full global batches planned */
    uint64_t j = st - po->sl.rest_first;
    if (j < po->plan_rest) return planned_step(po, e, po->plan_first + j, out);
    return lade__order_slices_get(&po->sl, o->p->rank, e, se, st, out);
  }
  if (st < po->plan_steps) return planned_step(po, e, st, out);
  return lade__order_slices_get(&po->sl, o->p->rank, e, se, st, out);
}

static int planned_position(lade__order_t *o, uint64_t q, lade_position_t *out) {
  planned_order_t *po = (planned_order_t *)o;
  uint64_t e = q / o->steps;
  out->shuffle_epoch = lade__plan_shuffle_epoch(po->pl, e);
  out->consumed = lade__order_slices_consumed(&po->sl, e, q % o->steps);
  return 0;
}

static int planned_warm(lade__order_t *o, uint32_t learners, const uint64_t *const *lists, const uint64_t *counts,
                        uint8_t *kept) {
  lade_plan_t *pl = ((planned_order_t *)o)->pl;
  int rc = 0;
  for (uint32_t r = 0; r < learners && !rc; r++)
    if (counts[r]) rc = lade_plan_warm(pl, r, lists[r], counts[r]);
  uint32_t me = o->p->rank;
  for (uint64_t i = 0; !rc && kept && i < counts[me]; i++) kept[i] = lade__plan_holds(pl, me, lists[me][i]);
  return rc;
}

static void planned_settings(const lade__order_t *o, lade_plan_settings_t *out) {
  *out = *lade_plan_settings(((const planned_order_t *)o)->pl);
}

static void planned_close(lade__order_t *o) {
  planned_order_t *po = (planned_order_t *)o;
  lade_plan_destroy(po->pl);
  lade__order_slices_fini(&po->sl);
  free(po);
}

static const lade__order_ops_t planned_ops = {
    .get = planned_get,
    .settings = planned_settings,
    .position = planned_position,
    .warm = planned_warm,
    .close = planned_close,
};

int lade__order_planned_open(lade__order_t **out, const lade__cursor_params_t *p) {
  const lade_plan_settings_t *s = &p->plan;
  if (!p->shuffle)
    return lade__fail(LADE_EINVAL, "it shuffles every epoch; shuffle=false applies to the regular plan only");
  if (s->kind == LADE_PLAN_SOLAR && s->epochs > LADE__PLAN_ORDER_MAX)
    return lade__fail(LADE_EINVAL, "it plans the epoch order of the whole run: set epochs (at most %llu; %llu given)",
                      (unsigned long long)LADE__PLAN_ORDER_MAX, (unsigned long long)s->epochs);
  planned_order_t *po = calloc(1, sizeof *po);
  if (!po) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  po->o = (lade__order_t){.ops = &planned_ops,
                          .p = p,
                          .max_batch = s->batch_size + (s->kind == LADE_PLAN_SOLAR ? s->imbalance : 0),
                          .routed = true};
  int rc = lade__order_slices_init(&po->sl, p);
  if (!rc) {
    po->o.steps = lade__plan_steps(&po->sl.rp);
    lade_plan_settings_t ps = *s;
    ps.drop_last = 1;
    ps.cache_bytes = 0;
    if (po->sl.rest) { /* plan from the resume point, caches empty */
      ps.resume = 1;
      ps.resume_epoch = p->resume.epoch;
      ps.resume_shuffle_epoch = p->resume.shuffle_epoch;
      ps.resume_consumed = p->resume.consumed;
    }
    /* a batch larger than the dataset's whole global batches: nothing to plan */
    rc = lade_plan_create(&po->pl, &ps, sizeof ps);
  }
  if (rc) {
    planned_close(&po->o);
    return rc;
  }
  po->plan_steps = lade_plan_steps_per_epoch(po->pl);
  po->o.first = po->sl.first;
  if (po->sl.rest) {
    uint64_t e0 = 0, t0 = 0;
    lade_plan_start(po->pl, &e0, &t0);
    po->plan_first = t0;
    po->plan_rest = e0 == p->resume.epoch ? po->plan_steps - t0 : 0;
  }
  *out = &po->o;
  return 0;
}
