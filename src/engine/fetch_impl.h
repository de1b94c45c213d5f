/*
 * fetch_impl.h - the fetch stage's own state (fetch.c: open, chains of
 * tiers, reads, plan hooks, stats), which composes four pieces, each owning
 * its struct and lock and taking only its params and callbacks, never this
 * struct: the next-use maps (nextuse.h), the remote read-ahead
 * (readahead.h), DELI's prefetcher (prefetch.h), the tier a routed plan
 * drives (plantier.h) and a node-aware plan's handoffs (nodeplan.h). Only
 * fetch.c includes it.
 */
#ifndef LADE__FETCH_IMPL_H
#define LADE__FETCH_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/cache.h"
#include "engine/fetch.h"
#include "engine/nextuse.h"
#include "engine/nodeplan.h"
#include "engine/plantier.h"
#include "engine/prefetch.h"
#include "engine/readahead.h"

/* One hop of a chain: where a read looks, and what it does with bytes that
 * a later hop found. */
enum { LADE__HOP_CACHE = 1, LADE__HOP_SOURCE, LADE__HOP_PEER };
enum {
  LADE__HOP_FILL = 1u << 0,       /* bytes a later hop found are put here */
  LADE__HOP_TOUCH = 1u << 1,      /* a hit in an earlier hop refreshes this tier's policy state */
  LADE__HOP_VERSIONED = 1u << 2,  /* skipped for a sample of unknown version (a stale entry could match) */
  LADE__HOP_WAIT_PF = 1u << 3,    /* on a miss, wait for the prefetcher's request of the sample, ask again */
  LADE__HOP_WAIT_ADMIT = 1u << 4, /* on a miss, wait for the plan's pending admit of the sample, ask again */
  LADE__HOP_PLANNED = 1u << 5,    /* the plan's own cache: hits and fallbacks are counted against the plan */
  LADE__HOP_CLAIM = 1u << 6,      /* the memory tier (the node's or this process's), or the node's shared disk
                                   * folder: a miss claims the sample, so the node's other ranks (and this
                                   * process's other workers) wait for this read instead of reading it too
                                   * (lade__cache_get_claim) */
  LADE__HOP_WAIT_MOVE = 1u << 7,  /* two tiers: wait for an earlier step's pending move of the sample first */
  LADE__HOP_WAIT_NODE = 1u << 8,  /* a node-aware plan's node cache: a miss waits for the node's rank that admits
                                   * the sample (the route) until it is put or that rank is past its admit */
};
#define LADE__MAX_HOPS 3
typedef struct lade__hop {
  int kind;
  unsigned flags;
  lade__cache_t *cache; /* LADE__HOP_CACHE */
} lade__hop_t;

/* A route's chain: its hops in order. `admits`: a sample the plan admits in
 * this step is put in the plan's tier once read (routed plans). `note`: how
 * the route is reported when its first hop is not followed. */
typedef struct lade__chain {
  lade__hop_t hop[LADE__MAX_HOPS];
  int n;
  bool admits;
  int note; /* LADE__ROUTE_MET or LADE__ROUTE_PEER_STORAGE (a peer route without a transport) */
} lade__chain_t;

enum {
  LADE__CHAIN_ANY = 0,
  LADE__CHAIN_OWN,      /* the plan's tier (two tiers: memory) */
  LADE__CHAIN_OWN_DISK, /* two tiers: the plan's disk tier */
  LADE__CHAIN_STORAGE,
  LADE__CHAIN_PEER,
  LADE__CHAIN_NODE,     /* a node-aware plan's node cache: an intra-node handoff */
  LADE__CHAIN_COUNT
};

struct lade__fetch {
  lade__fetch_params_t p;
  lade__fetch_conf_t conf; /* copied: the settings, resolved (engine/resolve.h) */
  uint64_t samples_n;      /* the dataset's samples */
  uint64_t per_epoch;      /* positions per epoch: steps * B */
  uint64_t total;          /* positions in the run */
  lade__cache_t *mem, *disk;
  bool remote;             /* the source has submit() */
  lade__chain_t chain[LADE__CHAIN_COUNT];

  /* the pieces: each owns its struct and lock (their headers) */
  bool pf_on;         /* DELI's prefetcher fills the disk tier (conf.prefetcher with a disk tier) */
  lade__prefetch_t pf;
  lade__nextuse_t nu; /* clairvoyant next-use maps: the tiers' next_use context */
  bool nu_on;         /* the maps are kept (conf.next_use, and the memory for them) */
  /* remote read-ahead (readahead.h; its own lock): the samples of steps up
   * to conf.ra_steps past the one being planned are requested as soon as it
   * is planned (non-routed plans without the prefetcher); with the
   * prefetcher, conf.ra_samples bounds its submitted-but-unread samples
   * instead; plan=shards reads the shard stream in its order */
  lade__readahead_t ra;

  /* routed plans: the plan's tier follows the plan (plantier.h: its tables and locks) */
  bool routed;
  lade__cache_t *plan_tier, *plan_disk; /* the tiers it drives: memory, else disk; two tiers: disk under memory */
  lade__plantier_t pt;
  lade__nodeplan_t np; /* a node-aware plan's handoffs through the node cache (nodeplan.h) */
  atomic_bool stop; /* the stage is closing: a node handoff's poll ends */

  _Atomic uint64_t samples[LADE__TIER_COUNT], bytes[LADE__TIER_COUNT];
  _Atomic uint64_t misses;
  _Atomic uint64_t plan_hits, plan_fallbacks, plan_peer, served_storage;
  _Atomic uint64_t served_disk;
};

/* fetch.c */
bool lade__fetch_resident(lade__fetch_t *f, uint64_t idx);
uint64_t lade__fetch_version(lade__fetch_t *f, uint64_t idx);

#endif
