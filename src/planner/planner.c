/*
 * planner.c - the driver behind lade/plan.h: settings, the position, the
 * regular global batch of each step, the step's events and output, and the
 * cache models more than one plan kind uses. The kinds themselves are one
 * file each (kind_*.c) behind the step interface of planner.h.
 *
 * Each step starts from the `regular` global batch of (shuffle epoch, step),
 * so invariant 1 of docs/plan.md holds by construction: plans only decide which
 * learner trains on which sample of that batch and where it comes from.
 * Sources are decided against the caches at the start of the step (phase 1);
 * cache admissions and evictions are then applied in batch order (phase 2)
 * and reported as the net change of the step.
 *
 * Cache state: distcache, locality and solar keep caches disjoint (a sample
 * lives in at most one learner's cache), so one owner[] array of N entries is
 * the whole directory. regular+lru and regular+belady let every learner cache
 * what it loads, so they key a hash map by (learner, sample) into a node pool.
 *
 * Nodes (ranks_per_node r > 1, docs/plan.md): the disjoint caches are the
 * nodes' (blocks of r consecutive learners), each of `cache` samples. owner[]
 * still names the learner that admitted a sample (it admits and evicts it,
 * and serves it to the other nodes); ncount[] counts each node's occupancy.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plankinds.h"
#include "planner.h"

static const lade__plan_ops_t *const kinds[LADE_PLAN_KIND_COUNT] = {
    [LADE_PLAN_REGULAR] = &lade__kind_regular,     [LADE_PLAN_REGULAR_LRU] = &lade__kind_regular_lru,
    [LADE_PLAN_REGULAR_BELADY] = &lade__kind_regular_belady, [LADE_PLAN_DISTCACHE] = &lade__kind_distcache,
    [LADE_PLAN_LOCALITY] = &lade__kind_locality,   [LADE_PLAN_SOLAR] = &lade__kind_solar};

/* The names (core/plankinds.h), indexed by kind; the list must be in enum
 * order, since the config's choices number them by position. */
#define NAME_AT(kind, name) [kind] = name,
static const char *const names[LADE__PLAN_KIND_ALL] = {LADE__PLAN_KINDS(NAME_AT)};
#undef NAME_AT
#define POS(kind, name) POS_##kind,
enum { LADE__PLAN_KINDS(POS) POS_END };
#undef POS
#define IN_ORDER(kind, name) _Static_assert((int)POS_##kind == (int)(kind), "plankinds.h: " name " is out of enum order");
LADE__PLAN_KINDS(IN_ORDER)
#undef IN_ORDER
_Static_assert(POS_END == LADE__PLAN_KIND_ALL, "plankinds.h names every kind");

static void settings_default(lade_plan_settings_t *s) {
  memset(s, 0, sizeof *s);
  s->kind = LADE_PLAN_REGULAR;
  s->epochs = 1;
  s->drop_last = 1;
  s->balance_peer = 1;
  s->reorder = 1;
  s->order_algo = LADE_ORDER_AUTO;
  s->coalesce = 1;
  s->ranks_per_node = 1;
}

void lade_plan_settings_default(lade_plan_settings_t *out, size_t size) {
  lade_plan_settings_t s;
  settings_default(&s);
  lade__struct_out(out, size, &s, sizeof s);
}

int lade__plan_settings_in(lade_plan_settings_t *s, const lade_plan_settings_t *in, size_t size, const char *fn) {
  settings_default(s);
  if (!in) return lade__fail(LADE_EINVAL, "%s: the settings are NULL", fn);
  return lade__struct_in(s, sizeof *s, in, size, sizeof(uint64_t), fn);
}

const char *lade_plan_kind_name(int kind) {
  return kind >= 0 && kind < LADE__PLAN_KIND_ALL ? names[kind] : "unknown";
}

int lade_plan_kind_parse(const char *name) {
  for (int k = 0; k < LADE__PLAN_KIND_ALL; k++)
    if (name && !strcmp(name, names[k])) return k;
  char known[256];
  size_t n = 0;
  for (int k = 0; k < LADE__PLAN_KIND_ALL && n < sizeof known; k++)
    n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", k ? ", " : "", names[k]);
  return lade__fail(LADE_EINVAL, "plan: unknown plan '%s' (known: %s)", name ? name : "(null)", known);
}

static int check_settings(lade_plan_settings_t *s) {
  if (s->kind == LADE_PLAN_SHARDS)
    return lade__fail(LADE_EINVAL, "plan: shards is the loader's shard streaming, not a permutation of the regular "
                      "global batch, so it has no plan to make or simulate (see lade_shards_epoch, docs/plan.md)");
  if (s->kind == LADE_PLAN_DLIO)
    return lade__fail(LADE_EINVAL, "plan: dlio is DLIO's sharding for the loader (docs/dlio.md), not a permutation of "
                      "the regular global batch, so it has no plan to make or simulate");
  if (s->kind < 0 || s->kind >= LADE_PLAN_KIND_COUNT) return lade__fail(LADE_EINVAL, "plan: unknown plan kind %d", s->kind);
  if (s->learners == 0) return lade__fail(LADE_EINVAL, "plan: zero learners");
  if (s->samples == 0) return lade__fail(LADE_EEMPTY, "plan: the dataset has no samples");
  if (s->batch_size == 0) return lade__fail(LADE_EINVAL, "plan: the local batch size is 0");
  if (s->epochs == 0) return lade__fail(LADE_EINVAL, "plan: zero epochs");
  if (s->batch_size > s->samples)
    return lade__fail(LADE_EINVAL, "plan: the local batch (%u samples) is larger than the dataset (%llu samples)",
                      s->batch_size, (unsigned long long)s->samples);
  if (s->cache_bytes) {
    if (!s->sample_bytes) return lade__fail(LADE_EINVAL, "plan: cache_bytes is set but sample_bytes is 0");
    s->cache = s->cache_bytes / s->sample_bytes;
  }
  if (s->ranks_per_node == 0) s->ranks_per_node = 1;
  if (s->learners % s->ranks_per_node)
    return lade__fail(LADE_EINVAL, "plan: ranks_per_node (%u) must divide the learners (%u)", s->ranks_per_node,
                      s->learners);
  if (s->cache_disk && s->kind != LADE_PLAN_SOLAR)
    return lade__fail(LADE_EINVAL, "plan %s: cache_disk (a disk tier under the memory cache) is planned by solar only, "
                      "whose next-use order places the samples in the two tiers", names[s->kind]);
  if (s->cache_disk > s->samples - LADE__MIN(s->cache, s->samples))
    return lade__fail(LADE_EINVAL, "plan: the cache (%llu samples) and cache_disk (%llu samples) together are larger "
                      "than the dataset (%llu samples)", (unsigned long long)s->cache,
                      (unsigned long long)s->cache_disk, (unsigned long long)s->samples);
  if (s->cache > s->samples)
    return lade__fail(LADE_EINVAL, "plan: the cache (%llu samples per %s) is larger than the dataset (%llu samples)",
                      (unsigned long long)s->cache, s->ranks_per_node > 1 ? "node" : "learner",
                      (unsigned long long)s->samples);
  if (s->samples >= (1ull << 32) || s->learners >= (1u << 24))
    return lade__fail(LADE_ERANGE, "plan: at most 2^32-1 samples and 2^24-1 learners are supported");
  if (s->kind != LADE_PLAN_SOLAR) s->reorder = 0;
  /* only the kinds with disjoint caches plan per node */
  if (s->kind != LADE_PLAN_DISTCACHE && s->kind != LADE_PLAN_LOCALITY && s->kind != LADE_PLAN_SOLAR)
    s->ranks_per_node = 1;
  if (s->resume > 1) return lade__fail(LADE_EINVAL, "plan: resume is %llu, not 0 or 1", (unsigned long long)s->resume);
  if (s->resume && (s->resume_epoch >= s->epochs || s->resume_shuffle_epoch >= s->epochs ||
                    s->resume_consumed > s->samples))
    return lade__fail(LADE_EINVAL, "plan: the resume point (epoch %llu, shuffle epoch %llu, %llu positions consumed) "
                      "is outside a run of %llu epochs of %llu samples", (unsigned long long)s->resume_epoch,
                      (unsigned long long)s->resume_shuffle_epoch, (unsigned long long)s->resume_consumed,
                      (unsigned long long)s->epochs, (unsigned long long)s->samples);
  return 0;
}

/* The start of a resumed plan: the rest of the resume epoch is cut into
 * global batches of this plan (lade__plan_rest_params), which end where the
 * epoch's steps end; none left: the next epoch's start. */
static void resume_start(lade_plan_t *pl) {
  pl->start_epoch = pl->start_step = pl->rest_first = 0;
  if (!pl->s.resume) return;
  lade__plan_params_t rest = lade__plan_rest_params(&pl->rp, pl->s.resume_consumed);
  uint64_t rest_steps = rest.samples ? lade__plan_steps(&rest) : 0;
  pl->rest_first = pl->steps - rest_steps;
  pl->start_epoch = pl->s.resume_epoch + (rest_steps == 0);
  pl->start_step = rest_steps ? pl->rest_first : 0;
}

static int reset_state(lade_plan_t *pl) {
  pl->epoch = pl->start_epoch;
  pl->step = pl->start_step;
  pl->serial = pl->start_epoch * pl->steps + pl->start_step;
  if (pl->owner) memset(pl->owner, 0xff, pl->N * sizeof *pl->owner);
  if (pl->ucount) memset(pl->ucount, 0, pl->p * sizeof *pl->ucount);
  if (pl->ncount) memset(pl->ncount, 0, pl->n_nodes * sizeof *pl->ncount);
  if (pl->adm_serial) memset(pl->adm_serial, 0xff, pl->N * sizeof *pl->adm_serial);
  lade__hmap_clear(&pl->map);
  pl->nnodes = 0;
  pl->freelist = LADE__PLAN_NONE;
  lade__tiers_reset(pl);
  if (pl->ops->reset) pl->ops->reset(pl);
  /* a warm start: the caches hold what survived; the seeding's events are
   * not a step's, and nothing seeded counts as admitted by the first step */
  int rc = 0;
  for (uint64_t i = 0; !rc && pl->ops->seed && i < pl->nwarm; i++) {
    rc = pl->ops->seed(pl, pl->warm_l[i], pl->warm_s[i]);
    pl->nev = 0;
  }
  if (pl->adm_serial) memset(pl->adm_serial, 0xff, pl->N * sizeof *pl->adm_serial);
  for (uint64_t n = 0; n < pl->nnodes; n++) pl->nodes[n].adm_serial = LADE__PLAN_NONE;
  return rc;
}

bool lade__plan_holds(lade_plan_t *pl, uint32_t r, uint64_t s) {
  if (r >= pl->p || s >= pl->N) return false;
  if (pl->owner) return pl->owner[s] == (int32_t)r;
  uint64_t v = 0;
  return pl->ops->seed && lade__hmap_get(&pl->map, lade__plan_mkey(r, s), &v);
}

int lade_plan_warm(lade_plan_t *pl, uint32_t learner, const uint64_t *samples, uint64_t n) {
  if (learner >= pl->p)
    return lade__fail(LADE_EINVAL, "lade_plan_warm: learner %u is not below %u learners", learner, pl->p);
  for (uint64_t i = 0; i < n; i++)
    if (samples[i] >= pl->N)
      return lade__fail(LADE_EINVAL, "lade_plan_warm: sample %llu is not below the dataset's %llu",
                        (unsigned long long)samples[i], (unsigned long long)pl->N);
  if (pl->nwarm + n > pl->warm_cap) {
    uint64_t cap = LADE__MAX(pl->warm_cap * 2, pl->nwarm + n);
    uint32_t *l = realloc(pl->warm_l, cap * sizeof *l);
    if (l) pl->warm_l = l;
    uint64_t *s = l ? realloc(pl->warm_s, cap * sizeof *s) : NULL;
    if (!s) return lade__fail(LADE_ENOMEM, "lade_plan_warm: out of memory for %llu samples", (unsigned long long)cap);
    pl->warm_s = s;
    pl->warm_cap = cap;
  }
  for (uint64_t i = 0; i < n; i++) {
    pl->warm_l[pl->nwarm] = learner;
    pl->warm_s[pl->nwarm++] = samples[i];
  }
  return reset_state(pl);
}

/* The driver's buffers: the step's output and the scratch every kind shares. */
static int alloc_shared(lade_plan_t *pl) {
  uint64_t G = pl->G, p = pl->p;
  lade__plan_out_t *o = &pl->out;
  /* the epoch order is identity unless a kind reorders; a run of more epochs
   * than LADE__PLAN_ORDER_MAX (the loader's epochs=None) keeps no array */
  if (pl->s.epochs <= LADE__PLAN_ORDER_MAX) {
    LADE__PLAN_ALLOC(pl->order, pl->s.epochs);
    for (uint64_t e = 0; e < pl->s.epochs; e++) pl->order[e] = e;
  }
  LADE__PLAN_ALLOC(pl->gb, G);
  LADE__PLAN_ALLOC(o->samples, G);
  LADE__PLAN_ALLOC(o->from, G);
  LADE__PLAN_ALLOC(pl->holder, G);
  LADE__PLAN_ALLOC(o->off, p + 1);
  LADE__PLAN_ALLOC(pl->cnt, p);
  LADE__PLAN_ALLOC(pl->kept, p);
  LADE__PLAN_ALLOC(pl->quota, p);
  LADE__PLAN_ALLOC(pl->room, p);
  pl->evcap = 3 * G + 16 + (pl->s.cache_disk ? 6 * G : 0); /* two tiers: moves too */
  LADE__PLAN_ALLOC(pl->ev_l, pl->evcap);
  LADE__PLAN_ALLOC(pl->ev_s, pl->evcap);
  LADE__PLAN_ALLOC(pl->ev_t, pl->evcap);
  LADE__PLAN_ALLOC(o->admit, pl->evcap);
  LADE__PLAN_ALLOC(o->evict, pl->evcap);
  LADE__PLAN_ALLOC(o->admit_off, p + 1);
  LADE__PLAN_ALLOC(o->evict_off, p + 1);
  LADE__PLAN_ALLOC(o->tr, p);
  LADE__PLAN_ALLOC(pl->ucount, p);
  LADE__PLAN_ALLOC(pl->ncount, pl->n_nodes);
  if (pl->s.cache_disk) {
    LADE__PLAN_ALLOC(o->tier, G);
    LADE__PLAN_ALLOC(o->admit_tier, pl->evcap);
    LADE__PLAN_ALLOC(o->move, pl->evcap);
    LADE__PLAN_ALLOC(o->move_to, pl->evcap);
    LADE__PLAN_ALLOC(o->move_off, p + 1);
    int rc = lade__tiers_init(pl);
    if (rc) return rc;
  }
  if ((pl->ops->flags & LADE__KIND_READS) && pl->s.coalesce) {
    LADE__PLAN_ALLOC(o->rd_start, G);
    LADE__PLAN_ALLOC(o->rd_count, G);
    LADE__PLAN_ALLOC(o->rd_off, p + 1);
  }
  return 0;
}

int lade_plan_create(lade_plan_t **out, const lade_plan_settings_t *in, size_t size) {
  lade_plan_settings_t s;
  int rc = lade__plan_settings_in(&s, in, size, "lade_plan_create");
  if (!rc) rc = check_settings(&s);
  if (rc) return rc;
  lade_plan_t *pl = calloc(1, sizeof *pl);
  if (!pl) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  pl->ops = kinds[s.kind];
  pl->s = s;
  pl->rp = lade__plan_params_of(&s, true, s.drop_last != 0);
  rc = lade__plan_check(&pl->rp); /* the simulator needs at least one step */
  if (!rc) rc = lade__regular_create(&pl->reg, &pl->rp);
  if (rc) {
    free(pl);
    return rc;
  }
  pl->N = s.samples;
  pl->p = s.learners;
  pl->B = s.batch_size;
  pl->G = (uint64_t)s.batch_size * s.learners;
  pl->rpn = s.ranks_per_node;
  pl->n_nodes = s.learners / s.ranks_per_node;
  pl->steps = lade__plan_steps(&pl->rp);
  pl->used = pl->steps * pl->G;
  rc = alloc_shared(pl);
  if (!rc && pl->ops->create) rc = pl->ops->create(pl);
  if (!rc && s.resume) { /* the resume epoch is the stopped run's shuffle epoch; the others this plan's own */
    if (pl->order) pl->order[s.resume_epoch] = s.resume_shuffle_epoch;
    else if (s.resume_shuffle_epoch != s.resume_epoch)
      rc = lade__fail(LADE_EINVAL, "plan: a run of more than %llu epochs keeps the identity epoch order, so it cannot "
                      "resume epoch %llu with shuffle epoch %llu", (unsigned long long)LADE__PLAN_ORDER_MAX,
                      (unsigned long long)s.resume_epoch, (unsigned long long)s.resume_shuffle_epoch);
  }
  resume_start(pl);
  if (rc) {
    lade_plan_destroy(pl);
    return rc;
  }
  reset_state(pl); /* nothing to seed yet: cannot fail */
  *out = pl;
  return 0;
}

void lade_plan_destroy(lade_plan_t *pl) {
  if (!pl) return;
  if (pl->ops->destroy) pl->ops->destroy(pl);
  lade__regular_destroy(pl->reg);
  lade__plan_out_t *o = &pl->out;
  free(pl->warm_l);
  free(pl->warm_s);
  void *bufs[] = {pl->order,    pl->gb,        pl->holder,  pl->cnt,      pl->kept,      pl->quota,
                  pl->room,     pl->ev_l,      pl->ev_s,    pl->ev_t,     pl->ucount,    pl->owner,
                  pl->adm_serial, pl->pend,    pl->nodes,   o->samples,   o->off,        o->from,
                  o->admit,     o->admit_off,  o->evict,    o->evict_off, o->tr,         o->rd_start,
                  o->rd_count,  o->rd_off,     pl->ncount};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  void *tiers[] = {o->tier, o->admit_tier, o->move, o->move_to, o->move_off};
  for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) free(tiers[i]);
  lade__tiers_free(pl);
  lade__hmap_free(&pl->map);
  free(pl);
}

const lade_plan_settings_t *lade_plan_settings(const lade_plan_t *pl) { return &pl->s; }
uint64_t lade_plan_steps_per_epoch(const lade_plan_t *pl) { return pl->steps; }

void lade_plan_start(const lade_plan_t *pl, uint64_t *epoch, uint64_t *step) {
  if (epoch) *epoch = pl->start_epoch;
  if (step) *step = pl->start_step;
}
const uint64_t *lade_plan_epoch_order(const lade_plan_t *pl) { return pl->order; }

/* ---------------------------------------------------------------- events */


/* Groups the surviving events by learner (stable counting sort). Codes:
 * +1 admit (to memory with two tiers), +2 admit to disk, -1 evict, and with
 * two tiers +3 / -3 a move to memory / to disk (tiers.c). */
static void finish_moves(lade_plan_t *pl, lade__plan_out_t *o) {
  uint32_t p = pl->p;
  memset(o->move_off, 0, (p + 1) * sizeof *o->move_off);
  for (uint64_t i = 0; i < pl->nev; i++)
    if (pl->ev_t[i] == 3 || pl->ev_t[i] == -3) o->move_off[pl->ev_l[i] + 1]++;
  for (uint32_t r = 0; r < p; r++) o->move_off[r + 1] += o->move_off[r];
  for (uint32_t r = 0; r < p; r++) pl->quota[r] = o->move_off[r];
  for (uint64_t i = 0; i < pl->nev; i++)
    if (pl->ev_t[i] == 3 || pl->ev_t[i] == -3) {
      uint64_t at = pl->quota[pl->ev_l[i]]++;
      o->move[at] = pl->ev_s[i];
      o->move_to[at] = pl->ev_t[i] > 0 ? LADE_TIER_MEM : LADE_TIER_DISK;
    }
}

static void finish_events(lade_plan_t *pl, lade__plan_out_t *o) {
  uint32_t p = pl->p;
  if (o->move_off) finish_moves(pl, o);
  memset(o->admit_off, 0, (p + 1) * sizeof *o->admit_off);
  memset(o->evict_off, 0, (p + 1) * sizeof *o->evict_off);
  for (uint64_t i = 0; i < pl->nev; i++) {
    if (pl->ev_t[i] == 1 || pl->ev_t[i] == 2) o->admit_off[pl->ev_l[i] + 1]++;
    if (pl->ev_t[i] == -1) o->evict_off[pl->ev_l[i] + 1]++;
  }
  for (uint32_t r = 0; r < p; r++) {
    o->admit_off[r + 1] += o->admit_off[r];
    o->evict_off[r + 1] += o->evict_off[r];
  }
  /* use quota/room as write cursors */
  for (uint32_t r = 0; r < p; r++) {
    pl->quota[r] = o->admit_off[r];
    pl->room[r] = o->evict_off[r];
  }
  for (uint64_t i = 0; i < pl->nev; i++) {
    if (pl->ev_t[i] == 1 || pl->ev_t[i] == 2) {
      uint64_t at = pl->quota[pl->ev_l[i]]++;
      o->admit[at] = pl->ev_s[i];
      if (o->admit_tier) o->admit_tier[at] = pl->ev_t[i] == 2 ? LADE_TIER_DISK : LADE_TIER_MEM;
    }
    if (pl->ev_t[i] == -1) o->evict[pl->room[pl->ev_l[i]]++] = pl->ev_s[i];
  }
}


/* ---------------------------------------------------------------- driver */

int lade_plan_next(lade_plan_t *pl, const lade_plan_step_t **out) {
  if (pl->epoch >= pl->s.epochs)
    return lade__fail(LADE_ERANGE, "plan: past the last step (%llu epochs of %llu steps)",
                      (unsigned long long)pl->s.epochs, (unsigned long long)pl->steps);
  uint64_t se = lade__plan_shuffle_epoch(pl, pl->epoch);
  int rc = pl->s.resume && pl->epoch == pl->s.resume_epoch
               ? lade__regular_rest(pl->reg, se, pl->s.resume_consumed, (pl->step - pl->rest_first) * pl->G, pl->G,
                                    pl->gb)
               : lade__regular_global(pl->reg, se, pl->step, pl->gb);
  if (rc) return rc;
  lade__plan_out_t *o = &pl->out;
  lade_plan_step_t *v = &o->view;
  memset(v, 0, sizeof *v);
  v->epoch = pl->epoch;
  v->step = pl->step;
  v->shuffle_epoch = se;
  v->learners = pl->p;
  v->total = pl->G;
  v->ranks_per_node = pl->rpn;
  pl->nev = 0;
  rc = pl->ops->step(pl, o);
  if (rc) return rc;
  finish_events(pl, o);
  v->samples = o->samples;
  v->from = o->from;
  v->offset = o->off;
  v->admit = o->admit;
  v->admit_offset = o->admit_off;
  v->evict = o->evict;
  v->evict_offset = o->evict_off;
  v->transfer = o->tr;
  if (o->tier) {
    v->tier = o->tier;
    v->admit_tier = o->admit_tier;
    v->move = o->move;
    v->move_offset = o->move_off;
    v->move_to = o->move_to;
  }
  if (o->rd_start) {
    v->read_start = o->rd_start;
    v->read_count = o->rd_count;
    v->read_offset = o->rd_off;
  }
  pl->serial++;
  if (++pl->step == pl->steps) {
    pl->step = 0;
    pl->epoch++;
  }
  *out = v;
  return 0;
}

int lade_plan_seek(lade_plan_t *pl, uint64_t epoch, uint64_t step) {
  if (epoch >= pl->s.epochs || step >= pl->steps)
    return lade__fail(LADE_ERANGE, "plan: cannot seek to (epoch %llu, step %llu): %llu epochs of %llu steps",
                      (unsigned long long)epoch, (unsigned long long)step, (unsigned long long)pl->s.epochs,
                      (unsigned long long)pl->steps);
  uint64_t target = epoch * pl->steps + step, first = pl->start_epoch * pl->steps + pl->start_step;
  if (target < first)
    return lade__fail(LADE_ERANGE, "plan: cannot seek to (epoch %llu, step %llu): the plan resumes at (epoch %llu, "
                      "step %llu)", (unsigned long long)epoch, (unsigned long long)step,
                      (unsigned long long)pl->start_epoch, (unsigned long long)pl->start_step);
  if (pl->ops->flags & LADE__KIND_STATELESS) {
    pl->epoch = epoch;
    pl->step = step;
    pl->serial = target;
    return 0;
  }
  if (target < pl->serial) {
    int rc = reset_state(pl);
    if (rc) return rc;
  }
  const lade_plan_step_t *v;
  while (pl->serial < target) {
    int rc = lade_plan_next(pl, &v);
    if (rc) return rc;
  }
  return 0;
}
