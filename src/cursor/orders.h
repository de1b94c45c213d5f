/*
 * orders.h - the cursor's one order interface (cursor.h): what a plan
 * cursor asks of the order it hands out, behind a small vtable with four
 * implementations, one file each:
 *
 *   slices.c         the regular order (planner/regular.h): a pure function of
 *                    (seed, epoch, step, rank), every route "any tier";
 *   shard_stream.c   Parax's shard streaming (paper 001) (shards.h): a pure
 *                    function of (seed, epoch, data-parallel group), routes
 *                    "any tier", and a shard stream before the buffer;
 *   planned.c        every planner kind (planner/planner.h): this rank's part of
 *                    each planned step, with routes, admits, evicts and
 *                    sends; the short last step is the regular slice;
 *   dlio.c           DLIO's readers' sharding (docs/dlio.md), routes "any
 *                    tier".
 *
 * The cursor checks the position against the run and holds its lock around
 * every call but stream (which must be pure); an order needs no lock of its
 * own. An order reads the cursor's copy of the parameters (o->p), which
 * outlives it.
 */
#ifndef LADE__PLAN_ORDER_OPS_H
#define LADE__PLAN_ORDER_OPS_H

#include "core/core.h"
#include "cursor.h"
#include "planner/regular.h"

typedef struct lade__order lade__order_t;

typedef struct lade__order_ops {
  /* This rank's step q (its epoch below the run's epochs): samples and
   * routes, the step's admits, evicts and sends (none for unrouted orders). */
  int (*get)(lade__order_t *o, uint64_t q, lade__cursor_step_t *out);
  /* The samples of step q alone (at most max_batch into idx), for
   * look-ahead and first-use maps; NULL when the order depends on the
   * caches, so only get() in order knows it. */
  int (*samples)(lade__order_t *o, uint64_t q, uint64_t *idx, uint32_t *n, uint32_t *valid);
  /* The shard stream (lade__cursor_stream_info/stream); NULL: none. */
  void (*stream_info)(const lade__order_t *o, uint64_t *count, uint64_t *buffer);
  int (*stream)(const lade__order_t *o, uint64_t e, uint64_t pos, uint64_t n, uint64_t *idx, uint64_t *got);
  /* The settings as run (lade__cursor_settings); NULL: the cursor's
   * parameters with the loader's drop_last. */
  void (*settings)(const lade__order_t *o, lade_plan_settings_t *out);
  /* The global position of step q (lade__cursor_position): consumed and
   * shuffle epoch (the cursor fills the rest). */
  int (*position)(lade__order_t *o, uint64_t q, lade_position_t *out);
  /* lade__cursor_warm; NULL: an order without caches ignores it */
  int (*warm)(lade__order_t *o, uint32_t learners, const uint64_t *const *lists, const uint64_t *counts,
              uint8_t *kept);
  void (*close)(lade__order_t *o);
} lade__order_ops_t;

/* What every order has; each implementation's state starts with it. */
struct lade__order {
  const lade__order_ops_t *ops;
  const lade__cursor_params_t *p;
  uint64_t steps;     /* the loader's steps per epoch */
  uint32_t max_batch; /* the most samples of one step for this rank */
  uint64_t first;     /* the run's first step (cursor.h, Resume) */
  bool routed;        /* routes samples (lade__plan_kind_routed) */
};

/* Each opens its order for p (borrowed: the cursor's copy); errors name the
 * reason, the cursor prefixes the plan. */
int lade__order_regular_open(lade__order_t **out, const lade__cursor_params_t *p);
int lade__order_shards_open(lade__order_t **out, const lade__cursor_params_t *p);
int lade__order_planned_open(lade__order_t **out, const lade__cursor_params_t *p);
int lade__order_dlio_open(lade__order_t **out, const lade__cursor_params_t *p);

/* ---- the regular order as a part: planned.c's short last step */

typedef struct lade__order_slices {
  lade__plan_params_t rp;  /* the loader's regular order (drop_last as given) */
  lade__regular_t *reg[2]; /* two cached epoch permutations (get()'s epoch and the prefetcher's) */
  uint64_t tick[2], clock;
  /* a resumed run (p->resumed, regular and planned kinds): training epoch
   * rest_epoch is the rest of its shuffle epoch after rest_consumed
   * positions, cut as rest_rp (lade__plan_rest_params), its steps from
   * rest_first to the epoch's end */
  bool rest;
  uint64_t rest_epoch, rest_consumed, rest_first;
  lade__plan_params_t rest_rp;
  uint64_t first; /* the run's first step */
} lade__order_slices_t;

/* Also sets the resume fields from p (rest, first). */
int lade__order_slices_init(lade__order_slices_t *r, const lade__cursor_params_t *p);
void lade__order_slices_fini(lade__order_slices_t *r);
/* This rank's regular slice of step st of training epoch e, which uses
 * shuffle epoch se (the rest of it in a resumed run's first epoch), routes
 * "any tier". */
int lade__order_slices_get(lade__order_slices_t *r, uint32_t rank, uint64_t e, uint64_t se, uint64_t st,
                           lade__cursor_step_t *out);
/* Its samples alone (none for a step before the run's first). */
int lade__order_slices_samples(lade__order_slices_t *r, uint32_t rank, uint64_t e, uint64_t se, uint64_t st,
                               uint64_t *idx, uint32_t *n, uint32_t *valid);
/* Positions of training epoch e's order consumed before its step st. */
uint64_t lade__order_slices_consumed(const lade__order_slices_t *r, uint64_t e, uint64_t st);

/* ---- helpers of cursor.c for the orders */

/* Grows *arr to hold n entries of `size` bytes; *cap counts entries. */
int lade__cursor_grow(void **arr, uint32_t *cap, uint64_t n, size_t size);
/* Room for n samples (idx and from share `cap`). */
int lade__cursor_grow_samples(lade__cursor_step_t *out, uint64_t n);
/* Routes the n samples of out "any tier" with no admits, evicts or sends. */
void lade__cursor_unrouted(lade__cursor_step_t *out);

#endif
