/* cursor.c - the plan cursor (cursor.h): one lock and the position checks
 * around the order of the plan kind, which the order interface
 * (orders.h) hides: regular, shards or planned, one file each. */
#include "cursor.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "orders.h"

struct lade__cursor {
  lade__cursor_params_t p;
  pthread_mutex_t mu; /* guards the order's caches and the planner's position */
  lade__order_t *o;
};

int lade__cursor_open(lade__cursor_t **out, const lade__cursor_params_t *in) {
  *out = NULL;
  int kind = in->plan.kind;
  if (kind < 0 || kind > LADE_PLAN_DLIO) return lade__fail(LADE_EINVAL, "plan: unknown plan kind %d", kind);
  lade__cursor_t *c = calloc(1, sizeof *c);
  if (!c) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  c->p = *in;
  pthread_mutex_init(&c->mu, NULL);
  int rc = kind == LADE_PLAN_REGULAR  ? lade__order_regular_open(&c->o, &c->p)
           : kind == LADE_PLAN_SHARDS ? lade__order_shards_open(&c->o, &c->p)
           : kind == LADE_PLAN_DLIO   ? lade__order_dlio_open(&c->o, &c->p)
                                      : lade__order_planned_open(&c->o, &c->p);
  if (rc) {
    lade__cursor_close(c);
    return lade__fail_prefix(rc, "plan %s: ", lade_plan_kind_name(kind));
  }
  assert(c->o->routed == lade__plan_kind_routed(kind));
  *out = c;
  return 0;
}

void lade__cursor_close(lade__cursor_t *c) {
  if (!c) return;
  if (c->o) c->o->ops->close(c->o);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

uint64_t lade__cursor_steps(const lade__cursor_t *c) { return c->o->steps; }
uint64_t lade__cursor_first(const lade__cursor_t *c) { return c->o->first; }

int lade__cursor_warm(lade__cursor_t *c, uint32_t learners, const uint64_t *const *lists, const uint64_t *counts,
                      uint8_t *kept) {
  if (learners != c->p.plan.learners)
    return lade__fail(LADE_EINVAL, "plan: caches of %u learners for a plan of %u", learners, c->p.plan.learners);
  if (!c->o->ops->warm) {
    if (kept) memset(kept, 0, counts[c->p.rank]);
    return 0;
  }
  pthread_mutex_lock(&c->mu);
  int rc = c->o->ops->warm(c->o, learners, lists, counts, kept);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int lade__cursor_position(lade__cursor_t *c, uint64_t q, lade_position_t *out) {
  const lade_plan_settings_t *s = &c->p.plan;
  uint32_t mp = c->p.model_parallel ? c->p.model_parallel : 1;
  *out = (lade_position_t){.world_size = s->learners,
                           .batch_size = s->batch_size,
                           .groups = s->kind == LADE_PLAN_SHARDS ? s->learners / mp : s->learners,
                           .kind = s->kind,
                           .samples = s->samples,
                           .seed = s->seed};
  uint64_t steps = c->o->steps;
  if (!steps || q >= steps * s->epochs) { /* the end */
    out->epoch = out->shuffle_epoch = s->epochs;
    return 0;
  }
  out->epoch = q / steps;
  pthread_mutex_lock(&c->mu);
  int rc = c->o->ops->position(c->o, q, out);
  pthread_mutex_unlock(&c->mu);
  return rc;
}
bool lade__cursor_routed(const lade__cursor_t *c) { return c->o->routed; }
uint32_t lade__cursor_max_batch(const lade__cursor_t *c) { return c->o->max_batch; }
int lade__cursor_kind(const lade__cursor_t *c) { return c->p.plan.kind; }

void lade__cursor_settings(const lade__cursor_t *c, lade_plan_settings_t *out) {
  if (c->o->ops->settings) {
    c->o->ops->settings(c->o, out);
    return;
  }
  *out = c->p.plan;
  out->drop_last = c->p.drop_last;
}

int lade__cursor_get(lade__cursor_t *c, uint64_t q, lade__cursor_step_t *out) {
  uint64_t steps = c->o->steps;
  if (q / steps >= c->p.plan.epochs)
    return lade__fail(LADE_ERANGE, "plan: step %llu is past the run (%llu epochs of %llu steps)", (unsigned long long)q,
                      (unsigned long long)c->p.plan.epochs, (unsigned long long)steps);
  if (q < c->o->first)
    return lade__fail(LADE_ERANGE,
                      "plan: (epoch %llu, step %llu) is before the run's start at (epoch %llu, step %llu), where it "
                      "resumed", (unsigned long long)(q / steps), (unsigned long long)(q % steps),
                      (unsigned long long)(c->o->first / steps), (unsigned long long)(c->o->first % steps));
  pthread_mutex_lock(&c->mu);
  int rc = c->o->ops->get(c->o, q, out);
  pthread_mutex_unlock(&c->mu);
  if (!rc) out->q = q;
  return rc;
}

int lade__cursor_order(lade__cursor_t *c, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid) {
  if (!c->o->ops->samples)
    return lade__fail(LADE_EINVAL, "plan %s: its order depends on the caches, ask get()",
                      lade_plan_kind_name(c->p.plan.kind));
  pthread_mutex_lock(&c->mu);
  int rc = c->o->ops->samples(c->o, q, idx, n, valid);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int lade__cursor_stream_info(const lade__cursor_t *c, uint64_t *count, uint64_t *buffer) {
  if (!c->o->ops->stream_info)
    return lade__fail(LADE_EINVAL, "plan %s has no shard stream", lade_plan_kind_name(c->p.plan.kind));
  c->o->ops->stream_info(c->o, count, buffer);
  return 0;
}

int lade__cursor_stream(lade__cursor_t *c, uint64_t e, uint64_t pos, uint64_t n, uint64_t *idx, uint64_t *got) {
  if (!c->o->ops->stream)
    return lade__fail(LADE_EINVAL, "plan %s has no shard stream", lade_plan_kind_name(c->p.plan.kind));
  return c->o->ops->stream(c->o, e, pos, n, idx, got); /* pure: no lock */
}

int lade__cursor_first_use(lade__cursor_t *c, uint64_t e, uint32_t *map) {
  uint64_t N = c->p.plan.samples, steps = c->o->steps;
  for (uint64_t i = 0; i < N; i++) map[i] = LADE__CURSOR_NONE32;
  if (e >= c->p.plan.epochs) return 0;
  if (!c->o->ops->samples)
    return lade__fail(LADE_EINVAL, "plan %s: its order depends on the caches", lade_plan_kind_name(c->p.plan.kind));
  uint32_t B = c->p.plan.batch_size;
  uint64_t *batch = malloc(c->o->max_batch * sizeof *batch);
  if (!batch) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  for (uint64_t st = 0; st < steps && !rc; st++) {
    uint32_t n = 0, valid = 0;
    rc = c->o->ops->samples(c->o, e * steps + st, batch, &n, &valid);
    for (uint32_t i = 0; !rc && i < n; i++)
      if (map[batch[i]] == LADE__CURSOR_NONE32) map[batch[i]] = (uint32_t)(st * B + i);
  }
  pthread_mutex_unlock(&c->mu);
  free(batch);
  return rc;
}
