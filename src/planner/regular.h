/*
 * regular.h - the regular order every plan starts from: which samples each
 * learner trains on at every (epoch, step) under global shuffling.
 *
 * (The public planner API, every plan kind, is include/lade/plan.h; each
 * kind starts from this order.) Plans are pure, deterministic functions of
 * (parameters, seed, world size): every learner computes the same plan
 * without messages, and any (epoch, step) of this order can be computed
 * directly (seek). The `regular` plan is PyTorch's
 * DistributedSampler applied to global batches: one permutation of [0, N)
 * per epoch from the counter-based RNG keyed (seed, epoch), cut into global
 * batches of G = batch_size * world_size, learner r taking the contiguous
 * slice [r*B, (r+1)*B) of each. With drop_last the incomplete last global
 * batch is dropped. Otherwise the last step is short, as DataLoader's last
 * batch: the epoch's order is extended cyclically from its start only to a
 * multiple of world_size (DistributedSampler's padding; none with one
 * learner), and the last global batch of R such positions gives each learner
 * R / world_size of them. Padding positions come last, so a learner's batch
 * is `valid` real samples followed by repeats.
 *
 * (The simulator's lade__regular_global still pads the last global batch to
 * a full G; with its default drop_last the two agree.)
 */
#ifndef LADE__PLAN_REGULAR_H
#define LADE__PLAN_REGULAR_H

#include <stdbool.h>
#include <stdint.h>

typedef struct lade__plan_params {
  uint64_t samples;     /* N */
  uint32_t batch_size;  /* local batch B */
  uint32_t world_size;  /* p */
  uint64_t epochs;
  uint64_t seed;
  bool shuffle;
  bool drop_last;
} lade__plan_params_t;

struct lade_plan_settings;
/* The regular order under plan settings s (samples, batch, learners,
 * epochs, seed) with the given shuffle and drop_last: the one place plan
 * settings become these parameters. */
lade__plan_params_t lade__plan_params_of(const struct lade_plan_settings *s, bool shuffle, bool drop_last);

/* Steps per epoch: floor(N/G) with drop_last, else ceil(N/G). */
uint64_t lade__plan_steps(const lade__plan_params_t *p);

/* Checks the parameters (zero learners, batch larger than the dataset with
 * drop_last, ...). Returns 0 or LADE_EINVAL with the reason. */
int lade__plan_check(const lade__plan_params_t *p);

/* The permutation of an epoch (identity without shuffle): perm[i] for i in
 * [0, N). Fisher-Yates driven by lade__rng keyed (seed, epoch, SHUFFLE). */
void lade__shuffle_epoch(const lade__plan_params_t *p, uint64_t epoch, uint64_t *perm);

/*
 * The regular plan with its current epoch's permutation cached. Not
 * thread-safe: one caller at a time.
 */
typedef struct lade__regular lade__regular_t;

int lade__regular_create(lade__regular_t **out, const lade__plan_params_t *p);
void lade__regular_destroy(lade__regular_t *r);
const lade__plan_params_t *lade__regular_params(const lade__regular_t *r);
/* The epoch whose permutation r holds now, UINT64_MAX for none. */
uint64_t lade__regular_cached_epoch(const lade__regular_t *r);
/* How many permutations r has drawn itself (not adopted): O(N) each, the
 * planner's largest cost per epoch at millions of samples. */
uint64_t lade__regular_shuffles(const lade__regular_t *r);
/* Hands r the permutation of `epoch` (lade__shuffle_epoch of r's parameters)
 * that a caller computed ahead in *perm, and gives r's old buffer back in
 * *perm (N entries, its contents undefined): a planner that looks one epoch
 * ahead saves r the same shuffle. */
void lade__regular_adopt(lade__regular_t *r, uint64_t epoch, uint64_t **perm);
/* The G = B*p indices of global batch (epoch, step). */
int lade__regular_global(lade__regular_t *r, uint64_t epoch, uint64_t step, uint64_t *out);
/* Positions of an epoch's (padded) order that are trained on: floor(N/G)*G
 * with drop_last, else N rounded up to a multiple of world_size. */
uint64_t lade__plan_epoch_len(const lade__plan_params_t *p);

/* Learner `rank`'s slice of step `step`: positions [*start, *start + *count)
 * of the epoch's padded order; the first *valid of them are real samples
 * (positions below N), the rest repeat the epoch's start. *count is B except
 * in a short last step. */
void lade__plan_slice(const lade__plan_params_t *p, uint64_t step, uint32_t rank, uint64_t *start, uint32_t *count,
                      uint32_t *valid);

/* The indices of learner `rank` in (epoch, step): *n (at most B, see
 * lade__plan_slice) written to out, the first *valid of them real. */
int lade__regular_local(lade__regular_t *r, uint64_t epoch, uint64_t step, uint32_t rank, uint64_t *out,
                        uint32_t *n, uint32_t *valid);

/* The rest of an epoch after its first `consumed` positions (a run resumed
 * at another world size, docs/plan.md "Resume"): positions [consumed, N) of
 * the epoch's permutation form an order of their own of M = N - consumed
 * samples, cut into global batches and slices exactly as the regular order
 * cuts an epoch (p with samples M: lade__plan_steps, lade__plan_slice).
 * Padding repeats the epoch's start, as the regular order's does. */
lade__plan_params_t lade__plan_rest_params(const lade__plan_params_t *p, uint64_t consumed);
/* Positions [start, start + count) of the rest's order of epoch `epoch`
 * into out (past M: the epoch's start again). consumed < N. */
int lade__regular_rest(lade__regular_t *r, uint64_t epoch, uint64_t consumed, uint64_t start, uint64_t count,
                       uint64_t *out);

#endif
