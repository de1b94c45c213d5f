/*
 * shards.h - the `shards` order (Parax data loading, paper 001 section 3.2: WebDataset shards,
 * random shard order, sequential reads inside a shard, an in-memory shuffle
 * buffer, the shard list split per data-parallel group), as a pure function.
 *
 * Epoch e of group d (of D), for N samples in S shards:
 *
 *   1. the shard list is shuffled (Fisher-Yates, lade__rng keyed (seed, e,
 *      LADE__RNG_SHARDS)); concatenated, the shuffled shards are a stream of
 *      the N dataset indices (each shard front to back);
 *   2. the stream is cut into D contiguous parts of floor(N/D) or
 *      floor(N/D)+1 samples (the first N mod D parts are the longer ones):
 *      group d reads positions [start_d, start_d + n_d). Balance is by
 *      sample count and exact, whatever the shard sizes; a shard on a cut is
 *      read partly by each of the two groups (disjoint contiguous ranges of
 *      the shard, still sequential), at most D-1 shards an epoch. A split of
 *      whole shards (the paper's shards[rank::D], or greedy by size) would
 *      leave groups up to a shard apart, and equal lengths would then cost
 *      up to a shard of padding or dropped samples per group;
 *   3. the part passes through a shuffle buffer of b samples (tf.data /
 *      WebDataset shuffle(b) without WebDataset's start-up ramp): the
 *      buffer fills with the first b samples, then each incoming sample
 *      replaces a uniformly drawn one, which is delivered; at the end the
 *      buffer drains in random order. Randomness keyed (seed, e, d) (stream
 *      LADE__RNG_SHARDBUF). b <= 1 delivers the part unchanged; b >= n_d
 *      delivers a uniform random permutation of the part;
 *   4. equal lengths (a group that delivers less than the others deadlocks
 *      distributed training): every group delivers L = lade__shards_len()
 *      samples. Without drop_last L = ceil(N/D): a group with n_d < L
 *      repeats its own first delivered sample(s) at the end (at most one;
 *      DistributedSampler pads the same amount from the epoch's start).
 *      With drop_last L = floor(N/(B*D))*B (whole batches only, the same
 *      steps as the regular plan's drop_last): the last n_d - L delivered
 *      samples are dropped (fewer than B+1 per group).
 *
 * Every sample is delivered exactly once per epoch across the groups, except
 * the padding repeats (without drop_last) or the dropped tails (with it).
 * The sequence depends on (settings, epoch, d) only: not on thread count,
 * the number of model-parallel ranks, or which group computed first. So
 * resuming is (epoch, position): recompute the epoch and skip `position`
 * samples (batch t is out[t*B .. min((t+1)*B, L))). Memory: O(L + S + b).
 *
 * Per-device delivery (paper 001 section 3.2.1 and 3.2.3): with model
 * parallelism of size M, the M consecutive ranks of one model-parallel group
 * share one data-parallel group d = rank / M (lade__shards_rank) and so
 * receive identical batches; the D = world / M groups read disjoint parts.
 * Every rank computes its own sequence from the settings, so no batch takes a
 * hop through another rank (the paper's baseline copied through gpu:0).
 *
 * Not a planned kind: invariant 1 of docs/plan.md (the learners' samples of a
 * step are the regular global batch) does not hold, the order is different
 * by design; invariants 2 and 3 hold as stated above.
 *
 * All functions are thread-safe (no shared state).
 */
#ifndef LADE__PLAN_SHARDS_H
#define LADE__PLAN_SHARDS_H

#include <stdint.h>

#include "lade/plan.h"

/* The settings: one struct, public (lade/plan.h) so the CLI fills it. */
typedef lade_shards_settings_t lade__shards_params_t;

/* Checks the settings; 0 or LADE_EINVAL (LADE_EEMPTY for N = 0) with the reason. */
int lade__shards_check(const lade__shards_params_t *p);
/* N = offsets[S]. */
uint64_t lade__shards_samples(const lade__shards_params_t *p);
/* L, the samples every group delivers per epoch (0 if the settings are bad). */
uint64_t lade__shards_len(const lade__shards_params_t *p);
/* Batches per group per epoch: ceil(L/B), = floor(N/(B*D)) with drop_last. */
uint64_t lade__shards_steps(const lade__shards_params_t *p);

/* Group d's part of an epoch's shard stream: positions [*start, *start + *count). */
void lade__shards_part(const lade__shards_params_t *p, uint32_t d, uint64_t *start, uint64_t *count);

/* The shard order of an epoch: perm[0..S), caller-owned. */
void lade__shards_order(const lade__shards_params_t *p, uint64_t epoch, uint64_t *perm);

/* Group d's sequence of an epoch (see the top of this file): writes
 * *n_out = L indices to out (caller-owned, room for L), the first *valid of
 * them real. 0, LADE_EINVAL (settings, d >= D) or LADE_ENOMEM (scratch of
 * S + min(b, n_d) entries). */
int lade__shards_epoch(const lade__shards_params_t *p, uint64_t epoch, uint32_t d, uint64_t *out, uint64_t *n_out,
                       uint64_t *valid);

/* Group d's shard stream of an epoch before the shuffle buffer (step 2
 * above): the samples at positions [pos, pos + n) of its part, in the order
 * they are read (each shard front to back), into out; *got of them (fewer
 * at the part's end). What a reader fetches ahead in read order: the sample
 * delivered at position i entered the buffer at a stream position of at
 * most i + min(b, n_d). */
int lade__shards_stream(const lade__shards_params_t *p, uint64_t epoch, uint32_t d, uint64_t pos, uint64_t n,
                        uint64_t *out, uint64_t *got);

/* ---- resume at another layout (docs/plan.md "Resume") */

/* The rest of epoch e after each of `groups` data-parallel groups with
 * batch `batch` (p's other settings) delivered `consumed` samples: the real
 * samples past that point of every group's sequence, concatenated in group
 * order, into out (room for N); *m of them. */
int lade__shards_rest(const lade__shards_params_t *p, uint64_t epoch, uint32_t groups, uint32_t batch,
                      uint64_t consumed, uint64_t *out, uint64_t *m);
/* The samples each of D groups delivers from a rest of m samples with
 * batch B: step 4's rule (ceil(m/D), or floor(m/(B*D))*B with drop_last). */
uint64_t lade__shards_rest_len(uint64_t m, uint32_t D, uint32_t B, int drop_last);
/* Group d's part of the rest (m samples): the split of step 2 (contiguous
 * parts, the first m mod D one longer), lade__shards_rest_len entries into
 * out, as they stand (they passed the shuffle buffer already); the first
 * *valid real, the padding repeats the part's start (rest[0] for an empty
 * part). */
void lade__shards_rest_part(const uint64_t *rest, uint64_t m, uint32_t D, uint32_t d, uint32_t B, int drop_last,
                            uint64_t *out, uint64_t *valid);

/* Global rank -> data-parallel group (see lade_shards_rank in lade/plan.h). */
int lade__shards_rank(uint32_t rank, uint32_t world, uint32_t devices_per_node, uint32_t model_parallel,
                      lade_shards_rank_t *out);

/* The quality metrics of any sequence seq[0..n) of dataset indices against
 * the shards of p, batches of p->batch_size (lade_shards_quality_t). */
int lade__shards_measure(const lade__shards_params_t *p, const uint64_t *seq, uint64_t n, lade_shards_quality_t *q);

/* The metrics of an epoch averaged over the D groups: the shards order
 * (global = 0) or the regular global shuffle (regular.h, D learners, batch B,
 * same seed and drop_last; global = 1). */
int lade__shards_quality(const lade__shards_params_t *p, uint64_t epoch, int global, lade_shards_quality_t *q);

#endif
