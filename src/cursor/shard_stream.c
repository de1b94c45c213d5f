/* shard_stream.c - Parax data loading's shard streaming (paper 001) behind
 * the cursor (orders.h, planner/shards.h): each data-parallel group reads its
 * part of the epoch's shuffled shard list through a shuffle buffer. The
 * order is a pure function of (seed, epoch, group); this group's sequences
 * of two epochs stay cached (O(samples / groups) each), routes are "any
 * tier". */
#include <stdlib.h>
#include <string.h>

#include "orders.h"
#include "planner/shards.h"

typedef struct shards_layout {
  uint32_t groups, batch;
  uint64_t consumed;
} shards_layout_t;

typedef struct shards_order {
  lade__order_t o;
  lade__shards_params_t sp;
  uint32_t group;
  uint64_t len; /* samples per group per epoch */
  uint64_t *seq[2], seq_ep[2], seq_valid[2], tick[2], clock;
  /* a resumed run (cursor.h, Resume): epoch rest_epoch delivers rest[0..rest_len)
   * (rest_valid real) from step rest_first; it is the rest of the layouts in
   * lv[0..nlv) (groups, batch, consumed per group), which a position of it
   * names, the last one first consumed */
  bool resumed;
  uint64_t rest_epoch, rest_first, rest_len, rest_valid, *rest;
  shards_layout_t lv[2];
  int nlv;
} shards_order_t;

/* This group's sequence of epoch e (cached: two epochs). */
static int sequence(shards_order_t *s, uint64_t e, const uint64_t **seq, uint64_t *valid) {
  int pick = -1;
  for (int i = 0; i < 2; i++)
    if (s->seq_ep[i] == e) pick = i;
  if (pick < 0) {
    pick = s->tick[0] <= s->tick[1] ? 0 : 1;
    uint64_t n = 0;
    s->seq_ep[pick] = UINT64_MAX;
    int rc = lade__shards_epoch(&s->sp, e, s->group, s->seq[pick], &n, &s->seq_valid[pick]);
    if (rc) return rc;
    s->seq_ep[pick] = e;
  }
  s->tick[pick] = ++s->clock;
  *seq = s->seq[pick];
  *valid = s->seq_valid[pick];
  return 0;
}

static int shards_samples(lade__order_t *o, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid) {
  shards_order_t *s = (shards_order_t *)o;
  const uint64_t *seq = NULL;
  uint64_t v = 0, B = o->p->plan.batch_size, st = q % o->steps, start = st * B, len = s->len;
  if (s->resumed && q / o->steps == s->rest_epoch) {
    if (st < s->rest_first) { /* before the run's start: not part of it */
      *n = *valid = 0;
      return 0;
    }
    seq = s->rest;
    v = s->rest_valid;
    len = s->rest_len;
    start = (st - s->rest_first) * B;
  } else {
    int rc = sequence(s, q / o->steps, &seq, &v);
    if (rc) return rc;
  }
  uint64_t cnt = LADE__MIN(B, len - start);
  memcpy(idx, seq + start, cnt * sizeof *idx);
  *n = (uint32_t)cnt;
  *valid = (uint32_t)(v > start ? LADE__MIN(cnt, v - start) : 0);
  return 0;
}

static int shards_get(lade__order_t *o, uint64_t q, lade__cursor_step_t *out) {
  int rc = lade__cursor_grow_samples(out, o->p->plan.batch_size);
  if (!rc) rc = shards_samples(o, q, out->idx, &out->n, &out->valid);
  if (!rc) lade__cursor_unrouted(out);
  return rc;
}

static void shards_stream_info(const lade__order_t *o, uint64_t *count, uint64_t *buffer) {
  const shards_order_t *s = (const shards_order_t *)o;
  uint64_t start = 0;
  lade__shards_part(&s->sp, s->group, &start, count);
  *buffer = s->sp.buffer > 1 ? LADE__MIN(s->sp.buffer, *count) : 0;
}

static int shards_stream(const lade__order_t *o, uint64_t e, uint64_t pos, uint64_t n, uint64_t *idx, uint64_t *got) {
  const shards_order_t *s = (const shards_order_t *)o;
  if (s->resumed && e == s->rest_epoch) { /* the rest is read as delivered: stream position = output position */
    uint64_t a = s->rest_first * o->p->plan.batch_size, k = 0;
    for (uint64_t i = pos; i < pos + n; i++)
      if (i >= a && i - a < s->rest_valid) idx[k++] = s->rest[i - a];
    *got = k;
    return 0;
  }
  return lade__shards_stream(&s->sp, e, s->group, pos, n, idx, got);
}

static int shards_position(lade__order_t *o, uint64_t q, lade_position_t *out) {
  shards_order_t *s = (shards_order_t *)o;
  uint64_t e = q / o->steps, st = q % o->steps, B = o->p->plan.batch_size;
  out->shuffle_epoch = e;
  out->consumed = st * B;
  if (!s->resumed || e != s->rest_epoch) return 0;
  /* the layouts this epoch's rest came from, then this one's consumed part */
  int n = s->nlv;
  uint64_t mine = (st - s->rest_first) * B;
  if (mine && n == 2)
    return lade__fail(LADE_EUNSUPPORTED, "plan shards: epoch %llu was resumed from a position saved inside an epoch "
                      "already resumed at another layout; a third layout in one epoch has no position (save at the "
                      "epoch's end, or resume at %u groups of batch %u)", (unsigned long long)e, s->lv[1].groups,
                      s->lv[1].batch);
  const uint64_t *c = &s->lv[n - 1].consumed;
  if (mine) {
    out->base_groups = s->lv[0].groups;
    out->base_batch = s->lv[0].batch;
    out->base_consumed = s->lv[0].consumed;
    out->consumed = mine;
    return 0;
  }
  out->groups = s->lv[n - 1].groups;
  out->batch_size = s->lv[n - 1].batch;
  out->consumed = *c;
  if (n == 2) {
    out->base_groups = s->lv[0].groups;
    out->base_batch = s->lv[0].batch;
    out->base_consumed = s->lv[0].consumed;
  }
  return 0;
}

/* The resume epoch's sequence of this group (cursor.h, Resume). A layout
 * equal to this one continues as it stood: its steps are skipped. */
static int shards_resume(shards_order_t *s, const lade__cursor_params_t *p) {
  const lade_position_t *pos = &p->resume;
  uint64_t steps = s->o.steps, epochs = p->plan.epochs;
  uint32_t B = p->plan.batch_size, D = s->sp.groups;
  if (pos->epoch >= epochs) {
    s->o.first = steps * epochs;
    return 0;
  }
  s->nlv = 0;
  if (pos->base_groups) s->lv[s->nlv++] = (shards_layout_t){pos->base_groups, pos->base_batch, pos->base_consumed};
  s->lv[s->nlv++] = (shards_layout_t){pos->groups, pos->batch_size, pos->consumed};
  uint64_t skip = 0;
  if (s->lv[s->nlv - 1].groups == D && s->lv[s->nlv - 1].batch == B) {
    uint64_t c = s->lv[--s->nlv].consumed;
    if (c % B)
      return lade__fail(LADE_EINVAL, "the resume position says %llu samples of each group were consumed, not whole "
                        "batches of %u", (unsigned long long)c, B);
    skip = c / B;
  }
  if (!s->nlv) { /* the same layout: the uninterrupted order, from the step it stood at */
    s->o.first = pos->epoch * steps + LADE__MIN(skip, steps);
    return 0;
  }
  uint64_t N = lade__shards_samples(&s->sp), m = 0, m2 = 0, *tmp = NULL;
  s->rest = malloc(N * sizeof *s->rest);
  if (!s->rest) return lade__fail(LADE_ENOMEM, "out of memory for the rest of an epoch of %llu samples",
                                  (unsigned long long)N);
  int rc = lade__shards_rest(&s->sp, pos->epoch, s->lv[0].groups, s->lv[0].batch, s->lv[0].consumed, s->rest, &m);
  if (!rc && s->nlv == 2) { /* that layout's parts of the rest, less what each of its groups consumed */
    uint32_t D1 = s->lv[1].groups, B1 = s->lv[1].batch;
    uint64_t L1 = lade__shards_rest_len(m, D1, B1, p->drop_last), v = 0;
    tmp = malloc((N + (L1 ? L1 : 1)) * sizeof *tmp);
    if (!tmp || !D1 || !B1) {
      rc = tmp ? lade__fail(LADE_EINVAL, "the resume position names %u groups of batch %u", D1, B1)
               : lade__fail(LADE_ENOMEM, "out of memory for the rest of an epoch");
    }
    for (uint32_t g = 0; !rc && g < D1; g++) {
      lade__shards_rest_part(s->rest, m, D1, g, B1, p->drop_last, tmp + N, &v);
      for (uint64_t i = s->lv[1].consumed; i < v; i++) tmp[m2++] = tmp[N + i];
    }
    if (!rc) {
      memcpy(s->rest, tmp, m2 * sizeof *tmp);
      m = m2;
    }
    free(tmp);
  }
  if (rc) return rc;
  s->resumed = true;
  s->rest_epoch = pos->epoch;
  s->rest_len = lade__shards_rest_len(m, D, B, p->drop_last);
  uint64_t *part = malloc((s->rest_len ? s->rest_len : 1) * sizeof *part);
  if (!part) return lade__fail(LADE_ENOMEM, "out of memory for the rest of an epoch");
  if (s->rest_len) lade__shards_rest_part(s->rest, m, D, s->group, B, p->drop_last, part, &s->rest_valid);
  free(s->rest);
  s->rest = part;
  uint64_t rest_steps = (s->rest_len + B - 1) / B;
  s->rest_first = steps - rest_steps;
  s->o.first = rest_steps ? pos->epoch * steps + s->rest_first + skip : (pos->epoch + 1) * steps;
  return 0;
}

static void shards_close(lade__order_t *o) {
  shards_order_t *s = (shards_order_t *)o;
  for (int i = 0; i < 2; i++) free(s->seq[i]);
  free(s->rest);
  free(s);
}

static const lade__order_ops_t shards_ops = {
    .get = shards_get,
    .samples = shards_samples,
    .stream_info = shards_stream_info,
    .stream = shards_stream,
    .position = shards_position,
    .close = shards_close,
};

int lade__order_shards_open(lade__order_t **out, const lade__cursor_params_t *p) {
  if (!p->shard_offsets || !p->shards)
    return lade__fail(LADE_EINVAL, "it streams shards, and this source has none (use tar shards)");
  lade_shards_rank_t rk;
  uint32_t dpn = p->devices_per_node ? p->devices_per_node : p->plan.learners;
  int rc = lade__shards_rank(p->rank, p->plan.learners, dpn, p->model_parallel ? p->model_parallel : 1, &rk);
  if (rc) return rc;
  shards_order_t *s = calloc(1, sizeof *s);
  if (!s) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory");
  s->o = (lade__order_t){.ops = &shards_ops, .p = p, .max_batch = p->plan.batch_size};
  s->group = rk.group;
  s->sp = (lade__shards_params_t){.shards = p->shards,
                                  .offsets = p->shard_offsets,
                                  .seed = p->plan.seed,
                                  .buffer = p->shuffle_buffer,
                                  .groups = rk.groups,
                                  .batch_size = p->plan.batch_size,
                                  .drop_last = p->drop_last};
  s->len = lade__shards_len(&s->sp);
  if (!s->len) rc = lade__fail(LADE_EINVAL, "%s", lade_last_error());
  s->o.steps = lade__shards_steps(&s->sp);
  for (int i = 0; i < 2 && !rc; i++) {
    s->seq[i] = malloc(s->len * sizeof *s->seq[i]);
    s->seq_ep[i] = UINT64_MAX;
    if (!s->seq[i])
      rc = lade__fail(LADE_ENOMEM, "out of memory for an epoch of %llu samples", (unsigned long long)s->len);
  }
  if (!rc && p->resumed) rc = shards_resume(s, p);
  if (rc) {
    shards_close(&s->o);
    return rc;
  }
  *out = &s->o;
  return 0;
}
