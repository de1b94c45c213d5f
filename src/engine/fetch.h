/*
 * fetch.h - the fetch stage: where a sample's bytes come from. Each read
 * comes with the route the plan gave it (cursor/cursor.h): "any tier" (the
 * regular plan: memory tier, then disk tier, then the source), the own
 * cache, storage, or a peer. It hands a planned batch's misses to a remote
 * source ahead of time (submit), tells the engine which samples can be read
 * without waiting for the network, runs the DELI prefetcher that keeps the
 * disk tier filled ahead of the consumer, and, under a routed plan, makes
 * the memory tier admit and evict exactly what the plan says (cache policy
 * `plan`). Only the engine uses it.
 */
#ifndef LADE__FETCH_H
#define LADE__FETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"
#include "transport/transport.h"
#include "cursor/cursor.h"
#include "source/source.h"

enum { LADE__TIER_STORAGE = 0, LADE__TIER_MEM = 1, LADE__TIER_DISK = 2, LADE__TIER_PEER = 3, LADE__TIER_COUNT = 4 };

typedef struct lade__fetch lade__fetch_t;

/* The settings the fetch stage acts on, resolved once (engine/resolve.c). */
typedef struct lade__fetch_conf {
  const char *source;        /* the dataset (borrowed from the settings): the disk tier's identity */
  const char *cache_dir;     /* "" : no disk tier */
  uint64_t mem_capacity;     /* bytes the memory tier keeps (0: no memory tier) */
  uint64_t disk_capacity;    /* bytes the disk tier keeps (0 with cache_dir "") */
  int policy;                /* LADE__CACHE_FIFO | LRU | CLAIRVOYANT | PLAN (cache/cache.h) */
  bool next_use;             /* clairvoyant: next-use maps are kept */
  bool routed;               /* the plan routes samples and drives its tier (or two) */
  bool two_tiers;            /* routed with cache_disk: the plan drives the memory and the disk tier as one
                              * hierarchy (docs/plan.md, Two tiers) */
  bool warm;                 /* routed with a disk tier: its entries may seed the plan (lade__fetch_survivors) */
  bool prefetcher;           /* the DELI prefetcher fills the disk tier */
  uint64_t fetch_size, threshold; /* its window and trigger, in samples */
  uint64_t ra_samples;       /* remote read-ahead in samples (0: off) */
  uint64_t ra_steps;         /* steps read ahead (regular order without the prefetcher), else 0 */
  uint64_t mean_bytes;       /* the mean sample size the capacities were made from (0: not needed) */
  uint32_t window;           /* batches the engine prepares at once (prefetch + 1) */
  uint64_t epochs;
  /* the node cache (engine/resolve.c lade__resolve_node_cache; docs/cache.md): the memory tier is shared by
   * the node's ranks, mem_capacity bytes per node */
  bool node_cache;
  bool node_disk;            /* the disk tier's folder is shared by the node's ranks of the job (cache_disk_bytes per node) */
  const char *shm_dir;       /* its segments' tmpfs folder (borrowed from the settings) */
  const char *job_key;       /* borrowed from the resolved settings */
  uint64_t node_slots;       /* index slots */
  uint32_t node_timeout_ms;  /* peer_timeout_ms: the wait for another rank making the segment */
  /* a node-aware plan's node cache (docs/plan.md "Nodes"): the plan's tier is the node's segment in plan mode,
   * shared by its ranks; intra-node handoffs are read from it, not sent */
  bool node_plan;
  uint32_t node_local, node_ranks; /* this rank among its node's (rank % ranks_per_node), and how many */
  uint32_t node_base;              /* the node's first rank */
  uint64_t node_nonce;             /* the same on every rank of the loader's job, new for each loader */
} lade__fetch_conf_t;

typedef struct lade__fetch_params {
  const lade__fetch_conf_t *conf; /* copied at open */
  lade__source_t *src; /* opened; borrowed, outlives the fetch stage */
  const lade__source_ops_t *ops;
  uint64_t steps;      /* steps per epoch for this learner */
  uint32_t batch;      /* local batch size B: sample position = (epoch*steps+step)*B + i */
  lade__cursor_t *cursor; /* the order (borrowed): the prefetcher's walk and the next-use maps */
  lade__transport_t *dist; /* the transport between learners (borrowed; NULL: peer routes read storage) */
  uint64_t names_digest;   /* of the samples' names relative to the source, in index order (with cache_dir) */
} lade__fetch_params_t;

/* The serving side of the transport (lade__transport_serve_fn; ctx is the fetch
 * stage): sample idx's bytes from this learner's cache, or from storage
 * (counted) when the cache does not hold them. */
int lade__fetch_serve(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out);

/* Opens the cache tiers the settings ask for and starts the prefetcher when
 * it is on. Errors name the cache folder. */
int lade__fetch_open(lade__fetch_t **out, const lade__fetch_params_t *p);
void lade__fetch_close(lade__fetch_t *f);
/* The workers have stopped (the loader closes): nothing waits any more for
 * an admit or a move that steps planned but never read would have made, so
 * the transport's last sends are served at once (from the cache, else
 * storage) instead of each waiting out its bound. Before the transport's
 * close; lade__fetch_close follows. */
void lade__fetch_quiesce(lade__fetch_t *f);

/* True when any cache tier is on. */
bool lade__fetch_cached(const lade__fetch_t *f);
/* True when lade__fetch_step_done must be called for every step, even one
 * with no evicts, admits, sends or moves (two tiers: it marks the steps done). */
bool lade__fetch_every_step(const lade__fetch_t *f);
/* A warm restart (docs/plan.md "Warm restarts"): the disk tier's entries whose
 * stored version is the sample's now, in index order, at most `most` (the
 * rest, and with keep false all, are dropped: the plan's model holds nothing
 * else). *keys is the caller's to free. Reads every entry (checksums). */
int lade__fetch_survivors(lade__fetch_t *f, bool keep, uint64_t most, uint64_t **keys, uint64_t *n);
/* Drops key from the disk tier (a survivor the plan did not keep). */
void lade__fetch_drop(lade__fetch_t *f, uint64_t key);

/* Reads the bytes of sample idx for the batch of global step q into out,
 * by `route` (LADE__ROUTE_ANY, LADE_FROM_CACHE, LADE_FROM_STORAGE or a
 * peer's rank); *tier says where they came from. A sample the plan routes
 * to the own cache that is not there (bytes budget, a refused put, a seek)
 * is read from storage, counted as a fallback, and put back. A sample the
 * plan routes to a peer comes through the transport (src/transport/), or,
 * without one, from storage, counted. A sample step q admits is put in the
 * plan's tier after its read. Thread-safe. */
enum { LADE__ROUTE_MET = 0, LADE__ROUTE_FALLBACK = 1, LADE__ROUTE_PEER_STORAGE = 2 };
/* *note: LADE__ROUTE_MET, or how the route was not followed. */
int lade__fetch_read(lade__fetch_t *f, uint64_t idx, uint64_t q, int32_t route, lade__buf_t *out, int *tier,
                     int *note);

/* A sample found in the node cache, seen in place (cache/cache.h
 * lade__cache_view): the engine transforms it straight from the shared
 * segment into the batch slot, one copy. */
typedef struct lade__fetch_view {
  const uint8_t *data;
  size_t len;
  uint64_t token;
} lade__fetch_view_t;

/* The view of sample idx when the route reads the "any tier" chain and the
 * node cache holds it: 0, or LADE_ENOENT (read it with lade__fetch_read).
 * Thread-safe. */
int lade__fetch_view(lade__fetch_t *f, uint64_t idx, uint64_t q, int32_t route, lade__fetch_view_t *v);

/* After using a view: true when its bytes stayed the sample's meanwhile
 * (counted as a read from the memory tier); false: another rank's put
 * reused them, so what was made of them is thrown away and the sample read
 * with lade__fetch_read. */
bool lade__fetch_view_done(lade__fetch_t *f, uint64_t idx, const lade__fetch_view_t *v);

/* A step was planned: records its admits, starts remote requests for its
 * samples that no tier holds and the prefetcher is not already fetching,
 * and prepares the next-use maps of its epoch (off the consumer thread).
 * Called in step order by the engine's planning worker. */
void lade__fetch_step_planned(lade__fetch_t *f, const lade__cursor_step_t *st);

/* Every sample of step st was read: applies its evictions (unless a later
 * planned step admits the sample again), ends its pending admits, and with
 * two tiers moves the step's samples between them. Called in step order.
 * A node-aware plan's node cache evicts once the node's ranks have all read
 * the step: LADE_ETIMEOUT, naming the rank, when one has not within
 * peer_timeout_ms (nothing evicted; the loader fails). */
int lade__fetch_step_done(lade__fetch_t *f, const lade__cursor_step_t *st);

/* True when lade__fetch_read(idx) would not wait for the network now. */
bool lade__fetch_ready(lade__fetch_t *f, uint64_t idx);

/* Whether readiness is worth asking about (a remote source or a prefetcher). */
bool lade__fetch_async(const lade__fetch_t *f);

/* The consumer has taken every sample before position pos (delivery). Wakes
 * the prefetcher; clairvoyant eviction measures "next use" from here. */
void lade__fetch_consumed(lade__fetch_t *f, uint64_t pos);

/* A seek: the consumer restarts at pos; the prefetcher follows. */
void lade__fetch_seek(lade__fetch_t *f, uint64_t pos);

typedef struct lade__fetch_stats {
  uint64_t samples[LADE__TIER_COUNT], bytes[LADE__TIER_COUNT];
  uint64_t misses;        /* storage reads while a cache tier was on */
  uint64_t prefetched;    /* samples the prefetcher stored in the disk tier */
  uint64_t prefetch_errors;
  uint64_t corrupt;       /* disk entries that failed their checksum */
  uint64_t stale;         /* entries (either tier) found stored under an older version of their sample (refetched) */
  uint64_t waited_prefetch; /* reads that waited for the prefetcher's request of the same sample */
  uint64_t plan_hits;      /* routed to the own cache and found there */
  uint64_t plan_fallbacks; /* routed to the own cache, not there: read from storage */
  uint64_t plan_peer;      /* routed to a peer: read from storage (no transport) */
  uint64_t served_from_storage; /* sends whose sample was not in the cache */
  uint64_t served_from_disk;    /* two tiers: sends read from the disk tier */
  uint64_t admits[2];           /* two tiers: admits put in memory, on disk */
  uint64_t moves_up, moves_down; /* two tiers: moves done between them */
  lade__transport_stats_t dist;
  lade__source_stats_t src;
  uint64_t fetch_size, threshold;
  bool node_cache;
  lade__node_cache_stats_t node; /* when node_cache */
} lade__fetch_stats_t;

void lade__fetch_stats(lade__fetch_t *f, lade__fetch_stats_t *out);

#endif
