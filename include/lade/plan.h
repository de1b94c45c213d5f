/*
 * lade/plan.h - the planner, simulator and analytical models of liblade.
 *
 * A plan says, for every (epoch, step, learner), which sample indices the
 * learner trains on and where each one comes from (its own cache, a named
 * peer's cache, or storage), plus which samples each learner admits to and
 * evicts from its cache at the end of the step. Plans are deterministic
 * functions of (settings, seed, learners): every learner computes the same
 * plan without messages. They are computed a step at a time (memory stays
 * O(samples + learners * cache)), and lade_plan_seek() jumps anywhere.
 *
 * Cache semantics of a step: every `from` refers to the caches as they are at
 * the START of the step; the step's evictions and admissions take effect at
 * its END (so a peer never loses a sample it must send in the same step).
 * After the step no learner holds more than `cache` samples.
 *
 * Nodes (ranks_per_node r > 1; docs/plan.md, "Nodes"): distcache, locality
 * and solar plan with nodes as the cache holders. Learners are grouped in
 * blocks of r consecutive ranks, each node keeps one cache of `cache`
 * samples (the capacity is then per node), and a sample in the node's cache
 * is local to every rank of the node. A cached sample is still admitted,
 * evicted and served to other nodes by one rank, the rank of its node that
 * admitted it (at most one admit per node), so routes stay ranks: from[] is
 * LADE_FROM_CACHE when the learner itself admitted the sample, the admitting
 * rank otherwise, an intra-node handoff (no transfer) when that rank is on
 * the learner's node and a transfer between nodes when not
 * (lade_plan_route_class). regular, regular+lru and regular+belady ignore
 * ranks_per_node (per-learner caches of `cache` samples).
 *
 * Kept in its own header because the tools and benchmarks use it while the
 * loader itself (lade.h) drives plans internally. Same conventions as lade.h:
 * 0 or a negative LADE_E* code, detail in lade_last_error(), handles not
 * thread-safe.
 */
#ifndef LADE_PLAN_PUBLIC_H
#define LADE_PLAN_PUBLIC_H

#include <stdint.h>

#include "lade/lade.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Source codes in lade_plan_step_t.from; a value >= 0 is the rank that
 * holds the sample (on the learner's own node: an intra-node handoff). */
#define LADE_FROM_CACHE (-1)
#define LADE_FROM_STORAGE (-2)

/* Tiers of a cached sample with cache_disk > 0 (lade_plan_step_t.tier). */
#define LADE_TIER_NONE 0 /* not from a cache (storage) */
#define LADE_TIER_MEM 1
#define LADE_TIER_DISK 2

/* What a route means for learner `rank` with ranks_per_node r (1: every
 * rank its own node): its own cache, its node's cache through another rank of
 * the node (an intra-node handoff), another node (a transfer), or storage. */
typedef enum lade_plan_route_class {
  LADE_ROUTE_OWN = 0,
  LADE_ROUTE_NODE,
  LADE_ROUTE_PEER,
  LADE_ROUTE_STORAGE
} lade_plan_route_class_t;

static inline lade_plan_route_class_t lade_plan_route_class(int32_t from, uint32_t rank, uint32_t ranks_per_node) {
  if (from == LADE_FROM_CACHE) return LADE_ROUTE_OWN;
  if (from < 0) return LADE_ROUTE_STORAGE;
  uint32_t r = ranks_per_node ? ranks_per_node : 1;
  return (uint32_t)from / r == rank / r ? LADE_ROUTE_NODE : LADE_ROUTE_PEER;
}

typedef enum lade_plan_kind {
  LADE_PLAN_REGULAR = 0,     /* global shuffle, contiguous slices, no reuse */
  LADE_PLAN_REGULAR_LRU,     /* regular slices + per-learner LRU cache */
  LADE_PLAN_REGULAR_BELADY,  /* regular slices + per-learner farthest-next-use cache */
  LADE_PLAN_DISTCACHE,       /* regular slices, misses served by the peer caching the sample (paper 000 III-C) */
  LADE_PLAN_LOCALITY,        /* train on cached samples, Algorithm 1 balancing (paper 000 V) */
  LADE_PLAN_SOLAR,           /* epoch order + remapping + load balance + chunks (paper 002) */
  /* The kinds the planner and simulator plan are [0, LADE_PLAN_KIND_COUNT):
   * loop up to it to try every plannable kind. */
  LADE_PLAN_KIND_COUNT,
  /* The loader's shard streaming (paper 001; the `plan=shards` setting and
   * lade_stats_t.plan). Not a permutation of the regular global batch, so
   * lade_plan_create() and lade_simulate() refuse it: its order is the
   * lade_shards_* API below. It takes the value after the plannable kinds
   * (equal to LADE_PLAN_KIND_COUNT), so that loop never meets it. */
  LADE_PLAN_SHARDS = LADE_PLAN_KIND_COUNT,
  /* DLIO's sharding (the `plan=dlio` setting, `lade dlio run`): each rank
   * reads what DLIO's pytorch reader (a contiguous block of the sample range,
   * the same every epoch) or tensorflow reader (files round-robin to ranks,
   * records interleaved, a shuffle buffer) reads. Not a permutation of the
   * regular global batch either: lade_plan_create() refuses it. */
  LADE_PLAN_DLIO
} lade_plan_kind_t;

/* Epoch-order solvers for solar. */
typedef enum lade_plan_order_algo {
  LADE_ORDER_AUTO = 0,   /* exact DP up to 16 epochs, local search beyond */
  LADE_ORDER_DP,         /* Held-Karp dynamic program (exact; at most 16 epochs) */
  LADE_ORDER_LOCAL,      /* nearest neighbour from every start + swap/relocate local search */
  LADE_ORDER_PSO         /* discrete particle swarm (swap sequences), as in paper 002 */
} lade_plan_order_algo_t;

/*
 * Settings of a plan. The struct only grows at its end, and every function
 * that takes it takes its size too: sizeof(lade_plan_settings_t) as the
 * caller was compiled, as out_size of lade_loader_stats (lade.h). Reading
 * one, the library takes the fields within size and the defaults
 * (lade_plan_settings_default) for the rest; a newer caller's fields that
 * this library does not know must be zero, else LADE_EUNSUPPORTED. Writing
 * one, it writes size bytes (zeros past the fields it knows). LADE_EINVAL
 * for a size below 8. The pointers lade_plan_settings() and
 * lade_plan_file_settings() return are this library's struct: read only
 * the fields the caller knows.
 */
typedef struct lade_plan_settings {
  int kind;                /* lade_plan_kind_t */
  uint64_t samples;        /* N, the dataset size */
  uint32_t learners;       /* p */
  uint32_t batch_size;     /* B, each learner's local batch; global batch G = B * p */
  uint64_t epochs;
  uint64_t seed;
  uint64_t cache;          /* cache capacity in samples per learner, per node with ranks_per_node > 1 (0: no cache) */
  uint64_t cache_bytes;    /* if nonzero, cache = cache_bytes / sample_bytes (overrides cache) */
  uint64_t sample_bytes;   /* sample size used with cache_bytes (uniform sizes assumed) */
  int drop_last;           /* 1: drop the incomplete last global batch; 0: pad cyclically */
  int balance_peer;        /* locality: 1 = balancing transfers are peer sends, 0 = receiver reloads from storage */
  int reorder;             /* solar: 1 = optimise the epoch order (changes which epoch's shuffle a step uses) */
  int order_algo;          /* solar: lade_plan_order_algo_t */
  uint32_t imbalance;      /* solar: local batch sizes may differ by at most this (0: all equal B) */
  int coalesce;            /* solar: sort each learner's storage reads and coalesce adjacent indices */
  uint32_t ranks_per_node; /* r: distcache, locality, solar plan per node of r consecutive learners (see the top
                            * of this header); it divides learners. 1 (and 0): every learner its own node */
  uint64_t cache_disk;     /* solar: a second tier of this many samples per holder (learner or node) on its local
                            * disk under the `cache` samples in memory: one hierarchy (docs/plan.md, Two tiers);
                            * 0: one tier */
  /* Resume at another world size (docs/plan.md "Resume"): with resume set,
   * the plan starts inside training epoch resume_epoch with empty caches.
   * The first resume_consumed positions of that epoch's order (the regular
   * order of shuffle epoch resume_shuffle_epoch, which the stopped run saved:
   * solar's epoch order depends on the world size) were trained on before;
   * the rest, positions [resume_consumed, N), is cut into this plan's global
   * batches, which are the epoch's last floor((N - resume_consumed) / G)
   * steps (lade_plan_start() gives the first). Later epochs are this plan's
   * own. Steps before the start are not part of the plan. */
  uint64_t resume;               /* 0: the plan starts at (0, 0) with empty caches; 1: as above */
  uint64_t resume_epoch, resume_shuffle_epoch, resume_consumed;
} lade_plan_settings_t;

/* Fills the size bytes of *s (size: sizeof(lade_plan_settings_t)) with the
 * defaults: regular, epochs 1, drop_last 1, balance_peer 1, reorder 1, order
 * AUTO, imbalance 0, coalesce 1, seed 0, cache 0, ranks_per_node 1; zeros
 * past the fields this library knows. */
LADE_API void lade_plan_settings_default(lade_plan_settings_t *s, size_t size);

/* "regular", "regular+lru", "regular+belady", "distcache", "locality", "solar",
 * "shards", "dlio" for the kinds in enum order (0 .. LADE_PLAN_DLIO); "unknown"
 * for any other value. The same names as the loader's `plan` setting. */
LADE_API const char *lade_plan_kind_name(int kind);
/* The kind for a name (LADE_PLAN_SHARDS for "shards"), or LADE_EINVAL. */
LADE_API int lade_plan_kind_parse(const char *name);

/* One Algorithm 1 transfer: `count` samples go from learner src to dst
 * (from node src to node dst in a plan with ranks_per_node > 1). */
typedef struct lade_plan_transfer {
  uint32_t src, dst;
  uint64_t count;
} lade_plan_transfer_t;

/*
 * One step of a plan. All arrays are borrowed from the plan and valid until
 * the next lade_plan_next()/lade_plan_seek()/lade_plan_destroy().
 * Learner r trains on samples[offset[r] .. offset[r+1]) with sources
 * from[offset[r] ..]; it admits admit[admit_offset[r] .. admit_offset[r+1])
 * and evicts evict[evict_offset[r] ..] at the end of the step. Its storage
 * reads, sorted and coalesced (only when coalesce is set), are the ranges
 * [read_start[i], read_start[i] + read_count[i]) for i in
 * [read_offset[r], read_offset[r+1]).
 */
typedef struct lade_plan_step {
  uint64_t epoch, step;        /* position in training order */
  uint64_t shuffle_epoch;      /* the regular epoch whose global batch this step is */
  uint32_t learners;
  uint64_t total;              /* samples in the global batch */
  const uint64_t *samples;
  const int32_t *from;
  const uint64_t *offset;
  const uint64_t *admit, *admit_offset;
  const uint64_t *evict, *evict_offset;
  uint64_t transfers;          /* locality: the Algorithm 1 schedule of this step */
  const lade_plan_transfer_t *transfer;
  uint64_t deficit;            /* locality/solar: sum over learners (nodes) of max(0, share - cached samples of the batch) */
  const uint64_t *read_start, *read_count, *read_offset; /* NULL unless coalesce */
  uint32_t ranks_per_node;     /* the plan's (1 for kinds that ignore it); classify from[] with lade_plan_route_class */
  /* two tiers (cache_disk > 0; else NULL): tier[i] is the tier samples[i] is read from (LADE_TIER_*: the
   * holder's, at the start of the step); admit_tier[j] the tier admit[j] goes to; learner r moves
   * move[move_offset[r] .. move_offset[r+1]) it holds to tier move_to[..] at the end of the step, after
   * the evicts and admits */
  const uint8_t *tier, *admit_tier;
  const uint64_t *move, *move_offset;
  const uint8_t *move_to;
} lade_plan_step_t;

typedef struct lade_plan lade_plan_t;

/* Validates the settings (zero learners, batch or cache larger than the
 * dataset, kind LADE_PLAN_SHARDS, ...) and builds a plan positioned at (0, 0). solar computes its
 * epoch order here (all epochs' shuffles are drawn ahead). */
LADE_API int lade_plan_create(lade_plan_t **out, const lade_plan_settings_t *s, size_t size);
LADE_API void lade_plan_destroy(lade_plan_t *plan);
/* The settings as used (cache resolved from cache_bytes). Borrowed. */
LADE_API const lade_plan_settings_t *lade_plan_settings(const lade_plan_t *plan);
LADE_API uint64_t lade_plan_steps_per_epoch(const lade_plan_t *plan);
/* Warm start: learner `learner`'s cache holds samples[0..n) when the plan
 * starts (lade_plan_start()), e.g. a disk cache that survived a restart
 * (docs/plan.md "Warm restarts"); n entries are copied. A kind takes them as
 * it would have admitted them, up to its `cache` per learner, in the order
 * given (disjoint kinds: a sample one learner already holds is not taken
 * again); regular ignores them. Call before the first lade_plan_next():
 * the plan goes back to its start, and replays (seeking back) start from
 * these caches again. The caches of the first step's sources are these.
 * LADE_EINVAL for a learner or a sample out of range. */
LADE_API int lade_plan_warm(lade_plan_t *plan, uint32_t learner, const uint64_t *samples, uint64_t n);
/* The first step the plan computes: (0, 0), or with the settings' resume
 * the resume point ((epochs, 0) when nothing is left to plan). */
LADE_API void lade_plan_start(const lade_plan_t *plan, uint64_t *epoch, uint64_t *step);
/* Computes the next step; LADE_ERANGE after the last one. *out is borrowed. */
LADE_API int lade_plan_next(lade_plan_t *plan, const lade_plan_step_t **out);
/* Positions the plan so the next lade_plan_next() gives (epoch, step). Plans
 * with cache state replay from the start (or from the current position when
 * seeking forward): the result is identical to reaching it sequentially.
 * A position before lade_plan_start() is LADE_ERANGE. */
LADE_API int lade_plan_seek(lade_plan_t *plan, uint64_t epoch, uint64_t step);
/* The epoch order (shuffle epoch of each training epoch); borrowed, `epochs` long; NULL for runs of more
 * than 2^20 epochs (the order is then the identity). */
LADE_API const uint64_t *lade_plan_epoch_order(const lade_plan_t *plan);

/* The plan a loader runs (setting `plan` and its options), as settings for
 * lade_plan_create()/lade_simulate(): the same code, so a plan made from
 * them predicts the loader's routes exactly. The cache is resolved to
 * samples (cache_mem_bytes over the charge of a mean-sized entry). For
 * kinds other than regular drop_last is 1: with the loader's drop_last off
 * its short last step is the regular slice, read through the tiers and not
 * planned. ranks_per_node is the loader's node size when its nodes are
 * blocks of consecutive ranks, else 1 (docs/plan.md, Nodes). *rank (may be
 * NULL): this learner's rank in the plan (from MPI under transport=mpi).
 * out_size: sizeof(lade_plan_settings_t) (see there). */
LADE_API int lade_loader_plan_settings(lade_loader_t *loader, lade_plan_settings_t *out, size_t out_size,
                                       uint32_t *rank);

/* ---- epoch order (paper 002 eq. 1-2), exposed for comparison and tests */

/* cost[u*E+v] = N(u,v) = |first `buffer` samples of epoch v's shuffle minus the
 * last `buffer` of epoch u's|, for the shuffles of the settings' seed. The
 * caller owns cost (E*E entries). size: sizeof(lade_plan_settings_t). */
LADE_API int lade_plan_order_costs(const lade_plan_settings_t *s, size_t size, uint64_t buffer, uint64_t *cost);
/* Solves the open-path TSP over cost (E x E) with `algo`; writes the order and
 * its total cost. seed drives PSO. */
LADE_API int lade_plan_order_solve(const uint64_t *cost, uint64_t epochs, int algo, uint64_t seed, uint64_t *order,
                                   uint64_t *total);

/* Algorithm 1 of paper 000: imbalance[r] = load_r - share_r (surplus > 0,
 * deficit < 0, summing to 0). Writes at most p-1 transfers; returns their
 * number in *count. */
LADE_API int lade_plan_balance(uint32_t p, const int64_t *imbalance, lade_plan_transfer_t *out, uint64_t *count);

/* ---- plan files: versioned, checksummed, memory-mappable */

#define LADE_PLAN_FILE_VERSION 1u

/* Writes every step of the plan to path (see docs/plan.md for the layout).
 * size: sizeof(lade_plan_settings_t). */
LADE_API int lade_plan_write(const lade_plan_settings_t *s, size_t size, const char *path);

typedef struct lade_plan_file lade_plan_file_t;
/* Maps path read-only and checks magic, version and checksum. */
LADE_API int lade_plan_file_open(lade_plan_file_t **out, const char *path);
LADE_API void lade_plan_file_close(lade_plan_file_t *f);
LADE_API const lade_plan_settings_t *lade_plan_file_settings(const lade_plan_file_t *f);
LADE_API uint64_t lade_plan_file_steps(const lade_plan_file_t *f);
/* The i-th step in training order (i = epoch * steps_per_epoch + step). The
 * arrays point into the mapping (read_* are NULL) and *out is owned by f. */
LADE_API int lade_plan_file_step(lade_plan_file_t *f, uint64_t i, const lade_plan_step_t **out);

/* ---- the shards order (paper 001: WebDataset-style shard streaming)
 *
 * Not a planned kind (LADE_PLAN_SHARDS names it, lade_plan_create refuses
 * it): its batches are not a permutation of the regular global batch
 * (invariant 1 of docs/plan.md), so it has its own small API. Each
 * epoch the shard list is shuffled, the shuffled stream of samples is cut
 * into D contiguous, equal parts (one per data-parallel group; a shard on a
 * cut is read partly by each side), and every group reads its part front to
 * back through a shuffle buffer of `buffer` samples. Every group delivers
 * lade_shards_len() samples per epoch: ceil(N/D), the short groups repeating
 * their own first sample(s) at the end; with drop_last
 * floor(N/(B*D))*B, the rest of the group's part is dropped. The sequence is
 * a pure function of (settings, epoch, group): resuming is (epoch, position).
 * docs/plan.md has the details and the shuffle quality. */

typedef struct lade_shards_settings {
  uint64_t shards;          /* S >= 1 */
  const uint64_t *offsets;  /* S+1 nondecreasing dataset indices, offsets[0] = 0: shard s holds the samples
                               [offsets[s], offsets[s+1]) (empty shards allowed); N = offsets[S]. Borrowed: it
                               must stay valid during every call given these settings */
  uint64_t seed;
  uint64_t buffer;          /* shuffle buffer in samples (0 or 1: none, the shards are read in order) */
  uint32_t groups;          /* D data-parallel groups (lade_shards_rank) */
  uint32_t batch_size;      /* B, each group's batch */
  int drop_last;            /* 1: each group delivers whole batches only */
} lade_shards_settings_t;

/* Samples each group delivers per epoch, and its batches (steps) per epoch;
 * 0 for settings lade_shards_epoch refuses (lade_shards_len then says why in
 * lade_last_error()). */
LADE_API uint64_t lade_shards_len(const lade_shards_settings_t *s);
LADE_API uint64_t lade_shards_steps(const lade_shards_settings_t *s);

/* Writes group `group`'s sample indices of `epoch` to out (room for
 * lade_shards_len(s) entries, caller-owned): *n = lade_shards_len(s), the
 * first *valid of them real, the rest repeats of its first samples (padding).
 * Batch t is out[t*B .. min((t+1)*B, *n)). LADE_EINVAL for bad settings
 * (offsets, zero groups or batch, fewer samples than groups, drop_last with
 * fewer than B*D samples). Thread-safe (no shared state). */
LADE_API int lade_shards_epoch(const lade_shards_settings_t *s, uint64_t epoch, uint32_t group, uint64_t *out,
                               uint64_t *n, uint64_t *valid);

/* Where a rank's data comes from under data + model parallelism. */
typedef struct lade_shards_rank {
  uint32_t group;     /* d = rank / model_parallel: its data-parallel group */
  uint32_t groups;    /* D = world / model_parallel */
  uint32_t mp_rank;   /* rank % model_parallel: its place in the model-parallel group */
  uint32_t node;      /* rank / devices_per_node */
  uint32_t device;    /* rank % devices_per_node: the device on its node */
  int mp_in_node;     /* 1: the whole model-parallel group is on this node */
} lade_shards_rank_t;

/* Maps a global rank to its data-parallel group, Megatron / PyTorch
 * DeviceMesh((D, M)) convention: M = model_parallel consecutive ranks form a
 * model-parallel group and get identical batches (same group d). Each rank
 * computes its own group's sequence with lade_shards_epoch, so no batch
 * passes through another rank. LADE_EINVAL unless rank < world, world is a
 * multiple of model_parallel and of devices_per_node (all > 0). */
LADE_API int lade_shards_rank(uint32_t rank, uint32_t world, uint32_t devices_per_node, uint32_t model_parallel,
                              lade_shards_rank_t *out);

/* Shuffle quality of one epoch, averaged over the groups (every group's
 * whole delivered sequence, padding included). In brackets: a uniformly
 * random order / the shards read in order without a buffer. */
typedef struct lade_shards_quality {
  double jump_mean;          /* mean |idx[i+1] - idx[i]| / N  (~1/3 / ~1/N) */
  double jump_median;        /* median of the same */
  double same_shard;         /* fraction of consecutive pairs from one shard (sum (n_s/N)^2 / ~1) */
  double shards_per_batch;   /* mean distinct shards in a batch */
  double one_shard_batches;  /* fraction of batches from a single shard */
  double rank_autocorr;      /* lag-1 Spearman autocorrelation of idx (~0 / ~1) */
  double neighbour_gap;      /* mean |pos(x+1) - pos(x)| / len over storage neighbours x, x+1 both in the
                                sequence (~1/3 / ~1/len) */
} lade_shards_quality_t;

/* The quality of the shards order of `epoch` (global = 0), or of the regular
 * global shuffle with D learners of batch B and the same seed and drop_last
 * (global = 1), measured against the same shards. */
LADE_API int lade_shards_quality(const lade_shards_settings_t *s, uint64_t epoch, int global,
                                 lade_shards_quality_t *out);

/* ---- simulator: runs a plan without I/O */

typedef struct lade_sim_costs {
  double storage_rate;   /* R: samples/s from storage, whole system (0: not modelled) */
  double peer_rate;      /* R_c: samples/s between learners, per learner */
  double cache_rate;     /* samples/s from a learner's own cache */
  double train_rate;     /* V: samples/s trained per learner */
} lade_sim_costs_t;

typedef struct lade_sim_epoch {
  uint64_t epoch;
  uint64_t steps;
  uint64_t from_storage, from_peer, from_cache; /* peer: between nodes; cache: the learner's own admits */
  uint64_t storage_requests;   /* coalesced storage reads (ranges); = from_storage without coalescing */
  uint64_t max_storage_sum;    /* sum over steps of max over learners of storage reads (numPFS) */
  uint64_t max_storage_peak;   /* the largest per-step maximum */
  double imbalance_pct;        /* mean over steps of deficit / global batch * 100 */
  uint64_t batch_min, batch_max; /* local batch sizes seen */
  uint64_t transfers;          /* Algorithm 1 messages */
  double time_s;               /* modelled epoch time */
  uint64_t from_node;          /* intra-node handoffs: from the node's cache through another rank of the node
                                * (0 with ranks_per_node 1); modelled at cache_rate */
  /* two tiers (cache_disk > 0): of from_cache + from_node + from_peer, the samples read from a disk tier
   * (the rest from memory); admits to each tier; moves between them */
  uint64_t from_disk;
  uint64_t admits_mem, admits_disk;
  uint64_t moves_up, moves_down;
} lade_sim_epoch_t;

/* Runs the plan of s (size: sizeof(lade_plan_settings_t)); out has `epochs`
 * entries of out_size bytes each: sizeof(lade_sim_epoch_t) as the caller was
 * compiled, the stride of its array. The struct only grows at its end; each
 * entry gets out_size bytes (a newer library leaves out the fields an older
 * caller does not know, an older one zeroes those it does not know);
 * LADE_EINVAL for an out_size below 8. costs may be NULL (nothing
 * modelled). If step_imbalance is not NULL it receives the per-step
 * imbalance percentage (epochs * steps entries). */
LADE_API int lade_simulate(const lade_plan_settings_t *s, size_t size, const lade_sim_costs_t *costs,
                           lade_sim_epoch_t *out, size_t out_size, double *step_imbalance);
/* The same for a plan the caller made and has not stepped yet, and may have
 * seeded with lade_plan_warm() (a warm start): runs it from its start to its
 * end, out and step_imbalance as above. The plan stays the caller's. */
LADE_API int lade_simulate_plan(lade_plan_t *plan, const lade_sim_costs_t *costs, lade_sim_epoch_t *out,
                                size_t out_size, double *step_imbalance);

/* ---- analytical model of paper 000, eqs. (1)-(8), per epoch in seconds */

typedef struct lade_model_params {
  double D;      /* samples in the dataset */
  double p;      /* learners */
  double V;      /* training rate per learner, samples/s */
  double R;      /* storage rate, samples/s (aggregate) */
  double Rc;     /* remote cache rate, samples/s (aggregate) */
  double Rb;     /* load-balancing rate, samples/s (aggregate) */
  double U;      /* preprocessing rate per learner, samples/s */
  double alpha;  /* fraction of the dataset in the aggregated cache */
  double beta;   /* balancing traffic / dataset (<0: unset) */
} lade_model_params_t;

typedef struct lade_model_result {
  double train;            /* (1) D/(pV) */
  double io_regular;       /* (2) D/R */
  double preprocess;       /* (3) D/(pU) */
  double loading_regular;  /* (4) */
  double true_regular;     /* (6) */
  double io_distcache;     /* (7) */
  double io_locality;      /* (8) */
  double epoch_regular, epoch_distcache, epoch_locality; /* max(train, io + preprocess) */
  double crossover_p;      /* (5) R/V */
} lade_model_result_t;

LADE_API void lade_model_eval(const lade_model_params_t *m, lade_model_result_t *r);

/* The same model with nodes of r learners (docs/model.md, "Nodes"): a node
 * caches for all its ranks, so of the cached fraction alpha a learner finds
 * 1/p in its own cache, (r-1)/p in another rank's of its node (an intra-node
 * handoff) and (n-1)/n on the other n = p/r nodes (a transfer). Rates are
 * per node and add up over the n nodes. Sizes as for lade_plan_settings_t:
 * in_size = sizeof(lade_model_nodes_t), out_size = sizeof(lade_model_nodes_result_t)
 * as the caller was compiled; the fields past in_size take the defaults of
 * lade_model_nodes_default. */
typedef struct lade_model_nodes {
  double r;        /* ranks per node (divides p; 1: paper 000's model with Rc = Rb = p * R_inter) */
  double R_intra;  /* intra-node handoffs per node, samples/s (shared memory or the node's loopback) */
  double R_inter;  /* transfers between nodes per node, samples/s (one node's network link) */
  double beta;     /* locality: samples moved between nodes / dataset (<0: 0) */
  double gamma;    /* locality: intra-node handoffs / dataset (<0: 0) */
  /* two tiers (docs/model.md, Two tiers): the node's memory read at R_intra, its local disk at R_disk */
  double R_disk;   /* disk-tier reads and writes per node, samples/s */
  double h_mem;    /* samples read from a memory tier / dataset (<0: 0) */
  double h_disk;   /* samples read from a disk tier / dataset (<0: 0) */
  double w_disk;   /* samples written to a disk tier (admits and moves down) / dataset (<0: 0) */
} lade_model_nodes_t;

typedef struct lade_model_nodes_result {
  double nodes;                   /* n = p / r */
  double io_distcache;            /* (1-a)D/R + a*D*(r-1)/p / (n R_intra) + a*D*(n-1)/n / (n R_inter) */
  double io_locality;             /* (1-a)D/R + gamma*D / (n R_intra) + beta*D / (n R_inter) */
  double intra_distcache, inter_distcache; /* the two peer terms of io_distcache, seconds */
  double epoch_distcache, epoch_locality;  /* max(train, I/O + preprocessing) */
  double io_tiers;         /* (1-h_mem-h_disk)D/R + h_mem*D/(n R_intra) + (h_disk+w_disk)*D/(n R_disk) */
  double epoch_tiers;
} lade_model_nodes_result_t;

/* Defaults (docs/model.md): r 8, R_intra 200,000, R_inter 12,500 and
 * R_disk 20,000 samples/s per node; beta, gamma, h_mem, h_disk, w_disk -1
 * (unset). */
LADE_API void lade_model_nodes_default(lade_model_nodes_t *n, size_t size);
/* Evaluates the node model (train and preprocessing as lade_model_eval);
 * LADE_EINVAL for sizes below 8, r < 1 or not dividing p, or rates <= 0. */
LADE_API int lade_model_nodes_eval(const lade_model_params_t *m, const lade_model_nodes_t *nodes, size_t in_size,
                                   lade_model_nodes_result_t *out, size_t out_size);

/* Cloud cost of paper 004 (section III-C), in dollars. */
typedef struct lade_cost_params {
  double nodes;                 /* n */
  double epochs;                /* E */
  double samples;               /* N */
  double compute_s;             /* T_c: compute seconds per epoch */
  double load_s;                /* T_l: data-wait seconds per epoch */
  double vm_hour;               /* $ per node-hour */
  double disk_gb_month;         /* $ per GB-month of node disk */
  double os_gb;                 /* GB of OS and dependencies per node */
  double cache_gb;              /* GB of cache per node */
  double bucket_gb_month;       /* $ per GB-month in the bucket */
  double dataset_gb;
  double class_a;               /* $ per list request */
  double class_b;               /* $ per get request */
  double page;                  /* samples per list page */
  double fetch;                 /* samples per prefetch (0: no prefetcher listing) */
  double miss_rate;             /* fraction of samples fetched from the bucket */
} lade_cost_params_t;

typedef struct lade_cost_result {
  double hours, vm, disk, bucket, requests, total;
} lade_cost_result_t;

LADE_API void lade_cost_defaults(lade_cost_params_t *c);
LADE_API void lade_cost_eval(const lade_cost_params_t *c, lade_cost_result_t *r);

#ifdef __cplusplus
}
#endif
#endif /* LADE_PLAN_PUBLIC_H */
