/* order_shards.c - Parax data loading's shard streaming (paper 001) behind
 * the cursor (order_ops.h, shards.h): each data-parallel group reads its
 * part of the epoch's shuffled shard list through a shuffle buffer. The
 * order is a pure function of (seed, epoch, group); this group's sequences
 * of two epochs stay cached (O(samples / groups) each), routes are "any
 * tier". */
#include <stdlib.h>
#include <string.h>

#include "order_ops.h"
#include "shards.h"

typedef struct shards_order {
  lade__order_t o;
  lade__shards_params_t sp;
  uint32_t group;
  uint64_t len; /* samples per group per epoch */
  uint64_t *seq[2], seq_ep[2], seq_valid[2], tick[2], clock;
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
  uint64_t v = 0, B = o->p->plan.batch_size, start = (q % o->steps) * B;
  int rc = sequence(s, q / o->steps, &seq, &v);
  if (rc) return rc;
  uint64_t cnt = LADE__MIN(B, s->len - start);
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
  return lade__shards_stream(&s->sp, e, s->group, pos, n, idx, got);
}

static void shards_close(lade__order_t *o) {
  shards_order_t *s = (shards_order_t *)o;
  for (int i = 0; i < 2; i++) free(s->seq[i]);
  free(s);
}

static const lade__order_ops_t shards_ops = {
    .get = shards_get,
    .samples = shards_samples,
    .stream_info = shards_stream_info,
    .stream = shards_stream,
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
  if (rc) {
    shards_close(&s->o);
    return rc;
  }
  *out = &s->o;
  return 0;
}
