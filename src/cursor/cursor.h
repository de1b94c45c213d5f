/*
 * cursor.h - the plan cursor: the loader's one source of the sample order.
 *
 * The engine, the DELI prefetcher and clairvoyant eviction all ask the
 * cursor which samples this rank trains on at global step q (= epoch *
 * steps + step); nothing else in the engine works out an order. For the
 * `regular` plan the order is a pure function of (seed, epoch, step, rank)
 * (regular.h) and every sample's route is "any tier" (memory, disk, source,
 * as the cache policy decides). For every other plan kind the cursor drives
 * the same planner as `lade plan` and `lade simulate` (planner.h, one file
 * per kind) and hands out, for this rank, the step's samples, where each
 * comes from (own cache, peer K, storage: the plan's from[]) and the step's
 * cache admits and evicts, so the loader executes the plan that the
 * simulator predicts.
 *
 * Memory: the planner's state, O(samples + learners * cache), plus two
 * cached epoch permutations for order queries; the engine keeps the steps it
 * has planned in its batch slots (a window of prefetch + 1 steps), not the
 * run. A planner kind with cache state computes steps strictly in order:
 * asking for an earlier step than the last (a seek back) replays from the
 * start of the run, as lade_plan_seek() does; asking ahead runs the steps
 * in between.
 *
 * The last step of an epoch when drop_last is off: a planned global batch is
 * always full (the simulator's model), so the short last step of the
 * loader's epoch (DataLoader's short last batch, DistributedSampler's
 * padding) is the regular slice of the same shuffle epoch with every sample
 * routed "any tier" and no admits: the samples of each epoch are still each
 * delivered exactly once. Counts equal the simulator's with drop_last.
 *
 * The `shards` order (LADE_PLAN_SHARDS) is a function of (seed, epoch,
 * data-parallel group) too: the cursor keeps this group's sequence of two
 * epochs (O(samples / groups) each); its routes are "any tier".
 *
 * Resume (docs/plan.md "Resume"): a run that starts from a saved position
 * (lade_position_t, any world size and batch size) delivers the rest of the
 * position's epoch re-striped over this layout and then the epochs of an
 * uninterrupted run. Regular and planned kinds: the consumed part is a
 * prefix of the epoch's order, and its rest is cut into this layout's global
 * batches (lade__plan_rest_params); shards: the rest of every saver group's
 * sequence, concatenated in group order, is split over this layout's groups
 * as the stream is (contiguous parts), each part delivered as it stands.
 * The rest's steps are the last of the epoch: the run's first step is
 * lade__cursor_first(), and steps before it are not part of the run.
 * Planned kinds plan from there with empty caches.
 *
 * The three orders (regular, shards, planned) sit behind one interface,
 * orders.h, one file each; this file holds the lock and the checks.
 *
 * Thread-safe: one lock; get() is called by the one planning worker, order
 * and first_use by the prefetcher and the next-use maps.
 */
#ifndef LADE__PLAN_CURSOR_H
#define LADE__PLAN_CURSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "lade/plan.h"

/* A route in lade__cursor_step_t.from beside LADE_FROM_CACHE (own cache),
 * LADE_FROM_STORAGE and a peer's rank (>= 0): no plan route, the fetch
 * stage's tiers decide (the regular plan, and the short last step). */
#define LADE__ROUTE_ANY (-3)
/* Two tiers (plan.cache_disk > 0): the own cache's disk tier; LADE_FROM_CACHE
 * is then its memory tier (the plan's tier[] at the start of the step). */
#define LADE__ROUTE_OWN_DISK (-4)
#define LADE__CURSOR_NONE32 UINT32_MAX
/* Whether a plan kind routes samples (own cache / peer / storage) and keeps
 * a cache model: every kind but regular and shards. */
static inline bool lade__plan_kind_routed(int kind) {
  return kind != LADE_PLAN_REGULAR && kind != LADE_PLAN_SHARDS && kind != LADE_PLAN_DLIO;
}

enum { LADE__DLIO_PYTORCH = 0, LADE__DLIO_TENSORFLOW = 1 };

typedef struct lade__cursor_params {
  lade_plan_settings_t plan; /* kind, samples, learners (world size), batch_size, epochs, seed, cache (samples)
                              * and the kinds' options; drop_last here is ignored (see below) */
  uint32_t rank;
  bool shuffle;   /* false: the regular plan without shuffling (routed kinds always shuffle) */
  bool drop_last; /* the loader's drop_last */
  /* shards: the source's shards (S + 1 offsets; the samples of shard s are
   * [off[s], off[s+1])), the shuffle buffer, and the ranks' layout */
  const uint64_t *shard_offsets;
  uint64_t shards;
  uint64_t shuffle_buffer;
  uint32_t model_parallel, devices_per_node; /* devices_per_node 0: all ranks on one node */
  /* dlio (dlio.c): DLIO's reader (LADE__DLIO_PYTORCH or
   * LADE__DLIO_TENSORFLOW), DLIO samples per sample of a source without
   * shards (a file DLIO reads that often), and tensorflow's interleave
   * (files read at once, DLIO's read_threads); shuffle_buffer and shuffle
   * are its sample_shuffle */
  int dlio_reader;
  uint32_t dlio_rep, dlio_interleave;
  /* resumed: the run starts at `resume` (lade_position_t, saved at any world
   * size): the rest of its epoch re-striped over this layout (see Resume above) */
  bool resumed;
  lade_position_t resume;
} lade__cursor_params_t;

/* One step of this rank; the arrays are the caller's, grown by get(). */
typedef struct lade__cursor_step {
  uint64_t q;
  uint32_t n, valid;     /* samples, of which the first `valid` are real (the rest: padding) */
  uint64_t *idx;         /* n */
  int32_t *from;         /* n routes */
  uint64_t *admit, *evict;
  uint32_t nadmit, nevict;
  /* two tiers (plan.cache_disk > 0; else admit_tier is unused): admit[i]
   * goes to tier admit_tier[i] (LADE_TIER_MEM or LADE_TIER_DISK); at the end
   * of the step, after the evicts, this rank's cached move[i] goes to tier
   * move_to[i] */
  uint8_t *admit_tier;
  uint64_t *move;
  uint8_t *move_to;
  uint32_t nmove, move_cap, admt_cap;
  /* the samples this rank's cache sends to other learners in this step
   * (their from[] names this rank): send_idx[i] goes to rank send_dst[i] */
  uint64_t *send_idx;
  uint32_t *send_dst;
  uint32_t nsend;
  uint32_t cap, adm_cap, ev_cap, send_cap;
} lade__cursor_step_t;

typedef struct lade__cursor lade__cursor_t;

/* Checks the settings (a kind that reorders epochs needs a bounded run;
 * learners, batch and cache as lade_plan_create checks them) and positions
 * the cursor at step 0. Errors name the plan and the reason. */
int lade__cursor_open(lade__cursor_t **out, const lade__cursor_params_t *p);
void lade__cursor_close(lade__cursor_t *c);

/* Steps per epoch of the loader (drop_last as given). */
uint64_t lade__cursor_steps(const lade__cursor_t *c);
/* The first step q of the run: 0, or where a resumed run starts (the
 * run's steps * epochs when nothing is left). */
uint64_t lade__cursor_first(const lade__cursor_t *c);
/* The global position of step q (lade_position_t), so that another layout
 * resumes from it. LADE_EUNSUPPORTED for shards inside an epoch resumed
 * twice at different layouts (the message says why). */
int lade__cursor_position(lade__cursor_t *c, uint64_t q, lade_position_t *out);
/* True when the plan routes samples (lade__plan_kind_routed). */
bool lade__cursor_routed(const lade__cursor_t *c);
/* The most samples one step gives this rank: batch_size, or more under
 * solar's plan_imbalance (local batches of unequal size). */
uint32_t lade__cursor_max_batch(const lade__cursor_t *c);
/* Warm start (docs/plan.md "Warm restarts"): learner r's cache holds
 * lists[r][0..counts[r]) at the run's start (lade_plan_warm), for each of
 * the plan's learners; before the first get(). kept[i] (for this rank's
 * list; may be NULL) says whether the plan keeps its i-th sample (room, not
 * held by an earlier learner of a disjoint kind): the caller drops the
 * others. An order without caches keeps none. */
int lade__cursor_warm(lade__cursor_t *c, uint32_t learners, const uint64_t *const *lists, const uint64_t *counts,
                      uint8_t *kept);
/* The plan kind (lade_plan_kind_t). */
int lade__cursor_kind(const lade__cursor_t *c);

/* The plan's settings as the cursor runs them (cache resolved to samples;
 * drop_last 1 for routed kinds, whose last short step is not planned). */
void lade__cursor_settings(const lade__cursor_t *c, lade_plan_settings_t *out);

/* This rank's step q: samples, routes, admits and evicts. */
int lade__cursor_get(lade__cursor_t *c, uint64_t q, lade__cursor_step_t *out);
void lade__cursor_step_free(lade__cursor_step_t *s);

/* The samples of step q alone (at most batch_size into idx), for look-ahead
 * that must not disturb get()'s position: the prefetcher's walk. Only for
 * plans whose order is a function of the step (!routed); LADE_EINVAL else. */
int lade__cursor_order(lade__cursor_t *c, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid);

/* plan=shards: this rank's shard stream before the shuffle buffer
 * (lade__shards_stream): *count samples an epoch, a buffer of *buffer
 * samples (0: none); LADE_EINVAL for other kinds. */
int lade__cursor_stream_info(const lade__cursor_t *c, uint64_t *count, uint64_t *buffer);
/* Stream positions [pos, pos + n) of epoch e into idx, *got of them. */
int lade__cursor_stream(lade__cursor_t *c, uint64_t e, uint64_t pos, uint64_t n, uint64_t *idx, uint64_t *got);

/* map[s] = this rank's first position (step * batch_size + i) of sample s
 * in epoch e, LADE__CURSOR_NONE32 when it does not train on s then (or e
 * is past the run); map has `samples` entries. Same restriction as order. */
int lade__cursor_first_use(lade__cursor_t *c, uint64_t e, uint32_t *map);

#endif
