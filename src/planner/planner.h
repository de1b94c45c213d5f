/*
 * planner.h - the inside of lade_plan_t: what every plan kind shares, and the
 * small step interface each kind fills (one file per kind, kind_*.c).
 *
 * The driver (planner.c) owns the position (epoch, step), the epoch order,
 * the regular global batch of the step, the step's event list and its output
 * buffers, and the cache models more than one kind uses (a directory of
 * disjoint caches; a node pool of overlapping ones). A kind owns what only it
 * needs (eviction heaps, next-use tables, balancing scratch) behind
 * lade_plan_t.ks, and answers one step at a time:
 *
 *   step(pl, out): on entry pl->gb holds the regular global batch of
 *   (order[pl->epoch], pl->step), the event list is empty and out->view's
 *   header is filled (other fields zero). The kind writes out->samples,
 *   out->from and out->off (a permutation of gb: invariant 1 of docs/plan.md),
 *   records its cache admits/evicts as events (lade__plan_event, or the
 *   cache-model helpers below, which emit them), and may set
 *   out->view.deficit, out->view.transfers with out->tr, and out->rd_*.
 *   The driver then groups the events into out's admit/evict lists.
 *
 * Steps come strictly in order: a kind may carry state from one step to the
 * next (its caches), reset() takes it back to empty caches before (0, 0),
 * and seeking replays (unless the kind is LADE__KIND_STATELESS). The output
 * buffers are a separate lade__plan_out_t so that a driver can keep a window
 * of computed steps (the engine's plan cursor, cursor.h) without the kinds
 * knowing: state is O(N + p*cache), each step in the window O(G + p).
 *
 * Not thread-safe, as lade_plan_t.
 */
#ifndef LADE__PLAN_PLANNER_H
#define LADE__PLAN_PLANNER_H

#include <stdint.h>
#include <stdlib.h>

#include "cachestate.h"
#include "core/core.h"
#include "hugemem.h"
#include "lade/plan.h"
#include "regular.h"

#define LADE__PLAN_NONE UINT64_MAX
/* Runs of more epochs keep no epoch-order array (identity; solar refuses them). */
#define LADE__PLAN_ORDER_MAX (1ull << 20)
#define LADE__PLAN_INF_KEY (UINT64_MAX - 1) /* "never used again" in farthest-next-use keys */

/* calloc of n entries (at least one) into ptr; on failure returns
 * LADE_ENOMEM from the enclosing function, whose caller destroys the plan
 * (which frees whatever was allocated). */
#define LADE__PLAN_ALLOC(ptr, n)                                                            \
  do {                                                                                      \
    size_t n_ = (size_t)(n);                                                                \
    (ptr) = calloc(n_ ? n_ : 1, sizeof *(ptr));                                             \
    if (!(ptr))                                                                             \
      return lade__fail(LADE_ENOMEM, "plan: out of memory (%s, %llu entries)", #ptr,        \
                        (unsigned long long)(n));                                           \
  } while (0)

/* LADE__PLAN_ALLOC for an array of one entry per sample, which the plan
 * reaches at random: on huge pages (hugemem.h). Released with free(). */
#define LADE__PLAN_ALLOC_HUGE(ptr, n)                                                       \
  do {                                                                                      \
    (ptr) = lade__plan_calloc_huge((size_t)(n), sizeof *(ptr));                             \
    if (!(ptr))                                                                             \
      return lade__fail(LADE_ENOMEM, "plan: out of memory (%s, %llu entries)", #ptr,        \
                        (unsigned long long)(n));                                           \
  } while (0)

/* One computed step: the arrays lade_plan_step_t points into. */
typedef struct lade__plan_out {
  lade_plan_step_t view;
  uint64_t *samples, *off;                   /* G samples; offset[p+1] */
  int32_t *from;                             /* G sources */
  uint64_t *admit, *admit_off, *evict, *evict_off;
  lade_plan_transfer_t *tr;                  /* p entries: at most p-1 transfers */
  uint8_t *tier, *admit_tier, *move_to;      /* two tiers (cache_disk > 0): G; admits; moves */
  uint64_t *move, *move_off;                 /* two tiers: moves between them; offset[p+1] */
  uint64_t *rd_start, *rd_count, *rd_off;    /* NULL unless the kind coalesces reads */
} lade__plan_out_t;

enum {
  LADE__KIND_STATELESS = 1, /* a step depends on (epoch, step) only: seek jumps */
  LADE__KIND_READS = 2      /* with the coalesce setting, fills out->rd_* */
};


/* One plan kind. Every function but step may be NULL. create allocates
 * pl->ks and whatever shared model the kind uses (lade__plan_owners_init,
 * lade__plan_nodes_init) and may set pl->order; on failure it returns the
 * error and the driver calls destroy. reset() runs after create and before
 * any replay, once the driver has emptied the shared models. The kind's
 * name is in core/plankinds.h. */
typedef struct lade__plan_ops {
  unsigned flags;   /* LADE__KIND_* */
  int (*create)(lade_plan_t *pl);
  void (*reset)(lade_plan_t *pl);
  int (*step)(lade_plan_t *pl, lade__plan_out_t *out);
  void (*destroy)(lade_plan_t *pl);
  /* Warm start (lade_plan_warm): learner r's cache holds s at the plan's
   * start, if the kind would keep it (room, not held elsewhere). Called by
   * the driver after reset(); the events it records are dropped. NULL: the
   * kind has no cache. */
  int (*seed)(lade_plan_t *pl, uint32_t r, uint64_t s);
} lade__plan_ops_t;

extern const lade__plan_ops_t lade__kind_regular, lade__kind_regular_lru, lade__kind_regular_belady,
    lade__kind_distcache, lade__kind_locality, lade__kind_solar;

/* Two tiers under a plan (tiers.c): where each cached sample is. */
typedef struct lade__tiers {
  uint8_t *tier;                  /* N: LADE_TIER_MEM or LADE_TIER_DISK while cached; NULL: one tier */
  uint64_t *mcount, *dcount;      /* per holder: samples in memory, on disk */
  lade__kheap_t *mem;             /* per holder: memory's samples by farthest next use */
  uint64_t *touched, ntouched;    /* the step's admitted and re-keyed samples (2G) */
} lade__tiers_t;

/* A (learner, sample) entry of the overlapping caches, in one pool. */
typedef struct lade__plan_node {
  uint64_t sample, key, prev, next, adm_serial, pend;
} lade__plan_node_t;

struct lade_plan {
  const lade__plan_ops_t *ops;
  void *ks; /* the kind's own state */
  lade_plan_settings_t s;
  lade__plan_params_t rp;
  lade__regular_t *reg;
  uint64_t N, G, B, steps, used; /* used: positions of an epoch trained (steps * G) */
  uint32_t p;
  uint64_t epoch, step, serial;  /* the next step to compute; serial counts steps from (0, 0) */
  /* where the plan starts ((0, 0), or the resume point of the settings'
   * resume) and, with resume, the planner step where the rest of the resume
   * epoch begins (its global batches are the rest's: lade__regular_rest) */
  uint64_t start_epoch, start_step, rest_first;
  /* warm start (lade_plan_warm): the caches' contents at the start */
  uint32_t *warm_l;
  uint64_t *warm_s, nwarm, warm_cap;
  uint64_t *order;               /* shuffle epoch of each training epoch */
  lade__plan_out_t out;          /* the step lade_plan_next() hands out */

  /* scratch of one step, shared by the kinds */
  uint64_t *gb;                  /* the regular global batch (G) */
  int32_t *holder;               /* G */
  uint64_t *cnt, *kept, *quota, *room; /* p each */

  /* admit/evict events of the step: (learner, sample, +1/-1/0 cancelled) */
  uint32_t *ev_l;
  uint64_t *ev_s;
  int8_t *ev_t;
  uint64_t nev, evcap;

  uint64_t *ucount;              /* cache occupancy per learner (every kind) */

  /* nodes (ranks_per_node > 1): blocks of rpn consecutive learners share one
   * cache of s.cache samples; ncount is its occupancy (= ucount with rpn 1) */
  uint32_t rpn, n_nodes;
  uint64_t *ncount;              /* nodes entries */
  lade__tiers_t tiers;           /* cache_disk > 0 (solar): memory and disk tiers per holder */

  /* disjoint caches (distcache, locality, solar): owner[sample] or -1 */
  int32_t *owner;
  uint64_t *adm_serial, *pend;   /* optional: cancel an admit in the step that made it */

  /* overlapping caches (regular+lru/belady): (learner, sample) -> node */
  lade__hmap_t map;
  lade__plan_node_t *nodes;
  uint64_t nnodes, nodecap, freelist;
};

/* A caller's settings of `size` bytes (lade/plan.h) into *s: the fields it
 * lacks get the defaults. `fn` names the public function in errors. */
int lade__plan_settings_in(lade_plan_settings_t *s, const lade_plan_settings_t *in, size_t size, const char *fn);

/* The shuffle epoch that training epoch e uses. */
static inline uint64_t lade__plan_shuffle_epoch(const lade_plan_t *pl, uint64_t e) {
  return pl->order ? pl->order[e] : e;
}

/* Whether learner r's cache holds s now in the plan's model (after
 * lade_plan_warm: which of the survivors the plan kept). */
bool lade__plan_holds(lade_plan_t *pl, uint32_t r, uint64_t s);

/* Records an admit (+1) or evict (-1) of sample s by learner r; returns its index. */
uint64_t lade__plan_event(lade_plan_t *pl, uint32_t r, uint64_t s, int t);

/* The regular slices: learner r trains on gb[r*B .. (r+1)*B). Sets samples and off. */
void lade__plan_regular_slices(lade_plan_t *pl, lade__plan_out_t *out);

/* ---- disjoint caches */

/* The node of learner r (blocks of ranks_per_node consecutive learners). */
static inline uint32_t lade__plan_node_of(const lade_plan_t *pl, uint32_t r) { return r / pl->rpn; }
/* Whether learner r's cache (its node's, with ranks_per_node > 1) has room for one more sample. */
static inline int lade__plan_room(const lade_plan_t *pl, uint32_t r) {
  return pl->ncount[r / pl->rpn] < pl->s.cache;
}
/* The route of sample s for learner r against the disjoint caches: storage
 * when no learner holds it, LADE_FROM_CACHE when r admitted it, else the
 * rank that did (a rank of r's own node: an intra-node handoff). */
static inline int32_t lade__plan_route(const lade_plan_t *pl, uint32_t r, uint64_t s) {
  int32_t o = pl->owner[s];
  return o < 0 ? LADE_FROM_STORAGE : (uint32_t)o == r ? LADE_FROM_CACHE : o;
}

/* Allocates owner[] (and adm_serial/pend with `cancel`: a sample admitted and
 * evicted in the same step then leaves no event). */
int lade__plan_owners_init(lade_plan_t *pl, int cancel);
void lade__plan_own(lade_plan_t *pl, uint32_t r, uint64_t s);
void lade__plan_disown(lade_plan_t *pl, uint64_t s);
/* The warm start of the kinds whose caches are disjoint and keep what they
 * hold (distcache, locality; their ops' seed): a survivor stays in the
 * first cache that holds it, while that cache has room. */
int lade__plan_seed_first_holder(lade_plan_t *pl, uint32_t r, uint64_t s);
/* Cached samples of gb per node (holder[i] = owner rank or -1, cnt[node])
 * and the deficit sum over nodes of max(0, ranks_per_node * B - cnt[node])
 * (with ranks_per_node 1: per learner, its share B). */
uint64_t lade__plan_count_holders(lade_plan_t *pl);

/* ---- overlapping caches */

int lade__plan_nodes_init(lade_plan_t *pl);
/* The map key of (learner, sample): samples < 2^32, learners < 2^24 (checked at create). */
static inline uint64_t lade__plan_mkey(uint32_t r, uint64_t s) { return ((uint64_t)r << 40) | s; }
/* The step of a kind whose caches overlap (lru, belady) begins here: the
 * regular slices, each sample's from[] against the caches at the start of
 * the step. Returns the learners' cache in samples (0: none, the step is
 * done). */
uint64_t lade__plan_nodes_slices(lade_plan_t *pl, lade__plan_out_t *out);
/* Adds sample s with eviction key `key` to learner r's cache (an admit event). */
int lade__plan_node_add(lade_plan_t *pl, uint32_t r, uint64_t s, uint64_t key, uint64_t *out);
/* Removes node n of learner r: an evict event, or cancels its admit of this step. */
void lade__plan_node_drop(lade_plan_t *pl, uint32_t r, uint64_t n);

/* ---- two tiers (tiers.c): memory holds a holder's nearest next uses, disk
 * the rest. Each is a no-op when cache_disk is 0. The kind calls place()
 * after lade__plan_own() of a sample with its next-use key, remove() before
 * lade__plan_disown(), rekey() when a cached sample's key changes, and
 * rebalance() once at the end of its step's phase 2. */
int lade__tiers_init(lade_plan_t *pl);
void lade__tiers_reset(lade_plan_t *pl);
void lade__tiers_free(lade_plan_t *pl);
int lade__tiers_place(lade_plan_t *pl, uint32_t holder, uint64_t s, uint64_t key);
void lade__tiers_remove(lade_plan_t *pl, uint32_t holder, uint64_t s);
int lade__tiers_rekey(lade_plan_t *pl, uint32_t holder, uint64_t s, uint64_t key);
/* key[s * stride]: the next-use key of cached sample s (a field of a kind's per-sample struct) */
int lade__tiers_rebalance(lade_plan_t *pl, const uint64_t *key, size_t stride);

#endif
