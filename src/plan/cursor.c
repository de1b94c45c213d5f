/* cursor.c - the plan cursor (cursor.h): the regular order from regular.c,
 * every other kind through the planner driver (planner.c) positioned at the
 * loader's step, this rank's part of each planned step copied out. */
#include "cursor.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "regular.h"
#include "shards.h"

struct lade__cursor {
  lade__cursor_params_t p;
  pthread_mutex_t mu;
  lade__plan_params_t rp;  /* the loader's regular order (drop_last as given) */
  uint64_t steps;          /* the loader's steps per epoch */
  lade__regular_t *reg[2]; /* two cached epoch permutations (the planner's epoch and the prefetcher's) */
  uint64_t reg_tick[2], tick;
  lade_plan_t *pl;         /* routed kinds: the planner (drop_last: whole global batches only) */
  uint64_t plan_steps;     /* its steps per epoch */
  uint32_t max_batch;      /* the most samples of one step for this rank */
  /* shards: this group's sequence of two epochs */
  bool shards;
  lade__shards_params_t sp;
  uint32_t group;
  uint64_t len;            /* samples per group per epoch */
  uint64_t *seq[2], seq_ep[2], seq_valid[2], seq_tick[2];
};

/* This group's shards sequence of epoch e (cached: two epochs). Locked. */
static int shards_seq(lade__cursor_t *c, uint64_t e, const uint64_t **seq, uint64_t *valid) {
  int pick = -1;
  for (int i = 0; i < 2; i++)
    if (c->seq_ep[i] == e) pick = i;
  if (pick < 0) {
    pick = c->seq_tick[0] <= c->seq_tick[1] ? 0 : 1;
    uint64_t n = 0;
    c->seq_ep[pick] = UINT64_MAX;
    int rc = lade__shards_epoch(&c->sp, e, c->group, c->seq[pick], &n, &c->seq_valid[pick]);
    if (rc) return rc;
    c->seq_ep[pick] = e;
  }
  c->seq_tick[pick] = ++c->tick;
  *seq = c->seq[pick];
  *valid = c->seq_valid[pick];
  return 0;
}

/* Step q of the shards order (at most batch_size into idx). Locked. */
static int shards_step(lade__cursor_t *c, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid) {
  const uint64_t *seq = NULL;
  uint64_t v = 0, B = c->p.plan.batch_size, start = (q % c->steps) * B;
  int rc = shards_seq(c, q / c->steps, &seq, &v);
  if (rc) return rc;
  uint64_t cnt = LADE__MIN(B, c->len - start);
  memcpy(idx, seq + start, cnt * sizeof *idx);
  *n = (uint32_t)cnt;
  *valid = (uint32_t)(v > start ? LADE__MIN(cnt, v - start) : 0);
  return 0;
}

static int shards_open(lade__cursor_t *c) {
  const lade__cursor_params_t *in = &c->p;
  if (!in->shard_offsets || !in->shards)
    return lade__fail(LADE_EINVAL, "it streams shards, and this source has none (use tar shards)");
  lade_shards_rank_t rk;
  uint32_t dpn = in->devices_per_node ? in->devices_per_node : in->plan.learners;
  int rc = lade__shards_rank(in->rank, in->plan.learners, dpn, in->model_parallel ? in->model_parallel : 1, &rk);
  if (rc) return rc;
  c->shards = true;
  c->group = rk.group;
  c->sp = (lade__shards_params_t){.shards = in->shards,
                                  .offsets = in->shard_offsets,
                                  .seed = in->plan.seed,
                                  .buffer = in->shuffle_buffer,
                                  .groups = rk.groups,
                                  .batch_size = in->plan.batch_size,
                                  .drop_last = in->drop_last};
  c->len = lade__shards_len(&c->sp);
  if (!c->len) return lade__fail(LADE_EINVAL, "%s", lade_last_error());
  c->steps = lade__shards_steps(&c->sp);
  for (int i = 0; i < 2; i++) {
    c->seq[i] = malloc(c->len * sizeof *c->seq[i]);
    c->seq_ep[i] = UINT64_MAX;
    if (!c->seq[i]) return lade__fail(LADE_ENOMEM, "out of memory for an epoch of %llu samples",
                                      (unsigned long long)c->len);
  }
  return 0;
}

int lade__cursor_open(lade__cursor_t **out, const lade__cursor_params_t *in) {
  *out = NULL;
  const lade_plan_settings_t *s = &in->plan;
  if (s->kind < 0 || s->kind > LADE__PLAN_SHARDS) return lade__fail(LADE_EINVAL, "plan: unknown plan kind %d", s->kind);
  bool routed = lade__plan_kind_routed(s->kind);
  if (routed && !in->shuffle)
    return lade__fail(LADE_EINVAL, "plan %s shuffles every epoch; shuffle=false applies to the regular plan only",
                      lade_plan_kind_name(s->kind));
  if (s->kind == LADE_PLAN_SOLAR && s->epochs > LADE__PLAN_ORDER_MAX)
    return lade__fail(LADE_EINVAL, "plan solar plans the epoch order of the whole run: set epochs (at most %llu; "
                      "%llu given)", (unsigned long long)LADE__PLAN_ORDER_MAX, (unsigned long long)s->epochs);
  lade__cursor_t *c = calloc(1, sizeof *c);
  if (!c) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  c->p = *in;
  c->max_batch = s->batch_size + (s->kind == LADE_PLAN_SOLAR ? s->imbalance : 0);
  pthread_mutex_init(&c->mu, NULL);
  c->rp = (lade__plan_params_t){.samples = s->samples,
                                .batch_size = s->batch_size,
                                .world_size = s->learners,
                                .epochs = s->epochs,
                                .seed = s->seed,
                                .shuffle = in->shuffle,
                                .drop_last = in->drop_last};
  c->steps = lade__plan_steps(&c->rp);
  int rc = 0;
  for (int i = 0; i < 2 && !rc; i++) rc = lade__regular_create(&c->reg[i], &c->rp);
  if (!rc && s->kind == LADE__PLAN_SHARDS) rc = shards_open(c);
  if (!rc && routed) {
    lade_plan_settings_t ps = *s;
    ps.drop_last = 1;
    ps.cache_bytes = 0;
    /* a batch larger than the dataset's whole global batches: nothing to plan */
    rc = lade_plan_create(&c->pl, &ps);
    if (!rc) c->plan_steps = lade_plan_steps_per_epoch(c->pl);
  }
  if (rc) {
    lade__cursor_close(c);
    return lade__fail_prefix(rc, "plan %s: ", s->kind == LADE__PLAN_SHARDS ? "shards" : lade_plan_kind_name(s->kind));
  }
  *out = c;
  return 0;
}

void lade__cursor_close(lade__cursor_t *c) {
  if (!c) return;
  lade_plan_destroy(c->pl);
  for (int i = 0; i < 2; i++) {
    lade__regular_destroy(c->reg[i]);
    free(c->seq[i]);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
}

uint64_t lade__cursor_steps(const lade__cursor_t *c) { return c->steps; }
bool lade__cursor_routed(const lade__cursor_t *c) { return c->pl != NULL; }
uint32_t lade__cursor_max_batch(const lade__cursor_t *c) { return c->max_batch; }
int lade__cursor_kind(const lade__cursor_t *c) { return c->p.plan.kind; }

void lade__cursor_settings(const lade__cursor_t *c, lade_plan_settings_t *out) {
  *out = c->pl ? *lade_plan_settings(c->pl) : c->p.plan;
  if (!c->pl) out->drop_last = c->p.drop_last;
}

void lade__cursor_step_free(lade__cursor_step_t *s) {
  free(s->idx);
  free(s->from);
  free(s->admit);
  free(s->evict);
  free(s->send_idx);
  free(s->send_dst);
  memset(s, 0, sizeof *s);
}

/* Grows *arr to hold n entries of `size` bytes; *cap counts entries. */
static int grow(void **arr, uint32_t *cap, uint64_t n, size_t size) {
  if (n <= *cap) return 0;
  if (n > UINT32_MAX) return lade__fail(LADE_ERANGE, "plan cursor: a step of %llu entries", (unsigned long long)n);
  void *p = realloc(*arr, (size_t)n * size);
  if (!p) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory for a step of %llu entries", (unsigned long long)n);
  *arr = p;
  *cap = (uint32_t)n;
  return 0;
}

/* The cached permutation holder for epoch e (the least recently used one is
 * recomputed on a miss). Locked. */
static lade__regular_t *reg_for(lade__cursor_t *c, uint64_t e) {
  int pick = -1;
  for (int i = 0; i < 2; i++)
    if (lade__regular_cached_epoch(c->reg[i]) == e) pick = i;
  if (pick < 0) pick = c->reg_tick[0] <= c->reg_tick[1] ? 0 : 1;
  c->reg_tick[pick] = ++c->tick;
  return c->reg[pick];
}

/* The shuffle epoch of training epoch e. */
static uint64_t shuffle_epoch(const lade__cursor_t *c, uint64_t e) {
  return c->pl ? lade__plan_shuffle_epoch(c->pl, e) : e;
}

/* Room for n samples (idx and from share `cap`). */
static int grow_samples(lade__cursor_step_t *out, uint64_t n) {
  uint32_t fcap = out->cap;
  int rc = grow((void **)&out->from, &fcap, n, sizeof *out->from);
  return rc ? rc : grow((void **)&out->idx, &out->cap, n, sizeof *out->idx);
}

/* The regular slice of step q (routes: any tier). Locked. */
static int regular_step(lade__cursor_t *c, uint64_t q, lade__cursor_step_t *out) {
  uint64_t e = shuffle_epoch(c, q / c->steps), st = q % c->steps;
  int rc = grow_samples(out, c->p.plan.batch_size);
  if (!rc) rc = lade__regular_local(reg_for(c, e), e, st, c->p.rank, out->idx, &out->n, &out->valid);
  if (rc) return rc;
  for (uint32_t i = 0; i < out->n; i++) out->from[i] = LADE__ROUTE_ANY;
  out->nadmit = out->nevict = out->nsend = 0;
  return 0;
}

/* This rank's part of planned step (e, st). Locked. */
static int planned_step(lade__cursor_t *c, uint64_t e, uint64_t st, lade__cursor_step_t *out) {
  lade_plan_t *pl = c->pl;
  int rc = 0;
  if (pl->epoch != e || pl->step != st) rc = lade_plan_seek(pl, e, st);
  const lade_plan_step_t *v = NULL;
  if (!rc) rc = lade_plan_next(pl, &v);
  if (rc) return rc;
  uint32_t r = c->p.rank;
  uint64_t a = v->offset[r], b = v->offset[r + 1];
  uint64_t aa = v->admit_offset[r], ab = v->admit_offset[r + 1];
  uint64_t ea = v->evict_offset[r], eb = v->evict_offset[r + 1];
  uint64_t most = c->max_batch;
  if (b - a > most)
    return lade__fail(LADE_ERANGE, "plan %s gives rank %u %llu samples at (epoch %llu, step %llu), more than its batch "
                      "of %llu", lade_plan_kind_name(c->p.plan.kind), r, (unsigned long long)(b - a),
                      (unsigned long long)e, (unsigned long long)st, (unsigned long long)most);
  rc = grow_samples(out, b - a);
  if (!rc) rc = grow((void **)&out->admit, &out->adm_cap, ab - aa, sizeof *out->admit);
  if (!rc) rc = grow((void **)&out->evict, &out->ev_cap, eb - ea, sizeof *out->evict);
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
  /* what the other learners read from this rank's cache, in global batch order */
  out->nsend = 0;
  for (uint32_t d = 0; d < c->p.plan.learners; d++) {
    if (d == r) continue;
    for (uint64_t i = v->offset[d]; i < v->offset[d + 1]; i++) {
      if (v->from[i] != (int32_t)r) continue;
      if (out->nsend == out->send_cap) {
        uint32_t dcap = out->send_cap;
        rc = grow((void **)&out->send_idx, &out->send_cap, (uint64_t)out->nsend * 2 + 16, sizeof *out->send_idx);
        if (!rc) rc = grow((void **)&out->send_dst, &dcap, out->send_cap, sizeof *out->send_dst);
        if (rc) return rc;
      }
      out->send_idx[out->nsend] = v->samples[i];
      out->send_dst[out->nsend++] = d;
    }
  }
  return 0;
}

int lade__cursor_get(lade__cursor_t *c, uint64_t q, lade__cursor_step_t *out) {
  pthread_mutex_lock(&c->mu);
  uint64_t e = q / c->steps, st = q % c->steps;
  int rc;
  if (e >= c->p.plan.epochs)
    rc = lade__fail(LADE_ERANGE, "plan: step %llu is past the run (%llu epochs of %llu steps)", (unsigned long long)q,
                    (unsigned long long)c->p.plan.epochs, (unsigned long long)c->steps);
  else if (c->pl && st < c->plan_steps)
    rc = planned_step(c, e, st, out);
  else if (c->shards) {
    rc = grow_samples(out, c->p.plan.batch_size);
    if (!rc) rc = shards_step(c, q, out->idx, &out->n, &out->valid);
    for (uint32_t i = 0; !rc && i < out->n; i++) out->from[i] = LADE__ROUTE_ANY;
    out->nadmit = out->nevict = out->nsend = 0;
  }
  else
    rc = regular_step(c, q, out);
  if (!rc) out->q = q;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int lade__cursor_order(lade__cursor_t *c, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid) {
  if (c->pl) return lade__fail(LADE_EINVAL, "plan %s: its order depends on the caches, ask get()",
                               lade_plan_kind_name(c->p.plan.kind));
  pthread_mutex_lock(&c->mu);
  uint64_t e = q / c->steps;
  int rc = c->shards ? shards_step(c, q, idx, n, valid)
                     : lade__regular_local(reg_for(c, e), e, q % c->steps, c->p.rank, idx, n, valid);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int lade__cursor_stream_info(const lade__cursor_t *c, uint64_t *count, uint64_t *buffer) {
  if (!c->shards) return lade__fail(LADE_EINVAL, "plan %s has no shard stream", lade_plan_kind_name(c->p.plan.kind));
  uint64_t start = 0;
  lade__shards_part(&c->sp, c->group, &start, count);
  *buffer = c->sp.buffer > 1 ? LADE__MIN(c->sp.buffer, *count) : 0;
  return 0;
}

int lade__cursor_stream(lade__cursor_t *c, uint64_t e, uint64_t pos, uint64_t n, uint64_t *idx, uint64_t *got) {
  if (!c->shards) return lade__fail(LADE_EINVAL, "plan %s has no shard stream", lade_plan_kind_name(c->p.plan.kind));
  return lade__shards_stream(&c->sp, e, c->group, pos, n, idx, got); /* pure: no lock */
}

int lade__cursor_first_use(lade__cursor_t *c, uint64_t e, uint32_t *map) {
  uint64_t N = c->p.plan.samples, B = c->p.plan.batch_size;
  for (uint64_t i = 0; i < N; i++) map[i] = LADE__CURSOR_NONE32;
  if (e >= c->p.plan.epochs) return 0;
  if (c->pl) return lade__fail(LADE_EINVAL, "plan %s: its order depends on the caches",
                               lade_plan_kind_name(c->p.plan.kind));
  uint64_t *batch = malloc(B * sizeof *batch);
  if (!batch) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  lade__regular_t *r = reg_for(c, e);
  for (uint64_t st = 0; st < c->steps && !rc; st++) {
    uint32_t n = 0, valid = 0;
    rc = c->shards ? shards_step(c, e * c->steps + st, batch, &n, &valid)
                   : lade__regular_local(r, e, st, c->p.rank, batch, &n, &valid);
    for (uint32_t i = 0; !rc && i < n; i++)
      if (map[batch[i]] == LADE__CURSOR_NONE32) map[batch[i]] = (uint32_t)(st * B + i);
  }
  pthread_mutex_unlock(&c->mu);
  free(batch);
  return rc;
}
