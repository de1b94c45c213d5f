/*
 * pool.h - the batch pool, a piece of the engine (engine.c, "Design"):
 * every batch buffer (slot) of a loader, the rule by which their number
 * grows and shrinks, and the handles a caller holds.
 *
 * A slot cycles FREE -> PLANNING -> FILLING -> READY -> HELD -> FREE; the
 * pool moves it into PLANNING (take), into HELD (hand_out) and out of HELD
 * (take_back); the engine the rest. The pool starts at `window` slots and
 * grows only while the caller holds more than two batches (the target:
 * what it holds plus prefetch - 1, at least window; capped by pool_max),
 * and gives a released buffer back while it is above its target: a caller
 * that keeps batches costs exactly the memory it keeps.
 *
 * The caller holds handles, not slots: a handle's first member is the
 * lade_batch_t view; it lives as long as the loader and is reused oldest
 * released first, once HANDLE_QUARANTINE others were released after it,
 * so a second release of a batch finds its handle not held and touches
 * nothing, and a slot freed when the pool shrinks is never reached through
 * a stale handle.
 *
 * Lock: the pool has none of its own. Its state changes together with the
 * slots' states, which the loader's `mu` guards, so every call but open,
 * buffers, slot_free and close is made with that `mu` held; `buffers`
 * allocates a slot's arrays unlocked (the one worker planning the slot owns
 * it) and `account` adds their bytes under `mu`.
 */
#ifndef LADE__POOL_H
#define LADE__POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "cursor/cursor.h"
#include "engine/fetch.h"

enum { SLOT_FREE = 0, SLOT_PLANNING, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct slot {
  uint8_t *data;
  size_t cap;
  bool pinned; /* data is page-locked (pin_memory): unpinned before it is freed */
  int64_t *labels;
  int64_t *indices;
  uint32_t *sizes;
  uint64_t seq;
  uint32_t n, valid, claimed, done; /* n <= batch_size: the last step may be short */
  int state;
  bool stale;        /* a seek made this batch obsolete: free it once done */
  int err;           /* first sample error (on_error=fail) */
  char errmsg[1200];
  uint32_t substituted;
  double t_sched;
  /* remote sources: samples are claimed in arrival order, not index order */
  uint8_t *taken;
  uint32_t first_free;  /* every sample before it is taken */
  uint64_t tier_samples[LADE__TIER_COUNT], tier_bytes[LADE__TIER_COUNT]; /* guarded by mu */
  uint64_t plan_fallbacks, plan_peer; /* guarded by mu: reads that did not follow the plan's route */
  uint64_t peer_node, peer_node_bytes; /* guarded by mu: peer samples from a rank of this node */
  uint64_t node_reads;                 /* guarded by mu: intra-node handoffs read from the node's cache */
  lade__cursor_step_t cs;             /* the plan's step: samples, routes, admits, evicts */
  bool finishing;                     /* its evicts are being applied (routed plans) */
  struct lade__dbuf *dbuf;            /* device=cuda: its copy in device memory (devring.h), once queued */
} slot_t;

/* The handle a caller holds: a lade_batch_t* is the view of one handle. */
typedef struct handle {
  lade_batch_t view; /* must stay first: lade_batch_t* <-> handle_t* */
  struct lade_loader *L;
  slot_t *slot; /* the batch's slot while held; NULL once released */
  uint64_t seq; /* the batch it was last handed out for */
  bool held;
  bool releasing; /* a release is giving its device buffer back (unlocked): a second one is a double release */
} handle_t;

#define HANDLE_QUARANTINE 64

typedef struct lade__pool {
  /* fixed at open */
  struct lade_loader *L; /* stamped into each handle */
  uint32_t window;       /* prefetch + 1: the slots it starts with and never goes below */
  uint32_t ahead;        /* batches prepared ahead of those held: max(prefetch, 2) - 1 */
  uint32_t max;          /* pool_max (0: no cap) */
  bool has_allocator;
  lade_allocator_t allocator;
  bool pin; /* pin_memory: every buffer page-locked (core/cuda.h) */
  /* under the loader's mu */
  slot_t **slots; /* every buffer (each allocated alone: views stay put); readable by the engine */
  uint32_t n, cap;
  uint32_t held; /* slots HELD by the caller */
  handle_t **handles; /* every handle made (freed with the pool) */
  uint32_t nhandles, handles_cap;
  handle_t **hfree; /* released handles, a FIFO ring: reused oldest first */
  uint32_t hfree_head, hfree_len;
  uint64_t bytes, peak_bytes;
  bool warned_growth;
} lade__pool_t;

/* window FREE slots without buffers. */
int lade__pool_open(lade__pool_t *p, struct lade_loader *L, const struct lade_config *cfg);
/* Frees every slot and handle (the caller holds none any more). */
void lade__pool_close(lade__pool_t *p);

/* A FREE slot for the next batch to plan, marked PLANNING, or a new one
 * when every buffer is busy because the caller holds batches; NULL when
 * none can be had now. batch_bytes is for the growth warning. Locked. */
slot_t *lade__pool_take(lade__pool_t *p, size_t batch_bytes);
/* A slot's arrays for batches of up to B samples of `bytes` bytes, once;
 * returns the bytes now allocated (0 when it had them), or SIZE_MAX with
 * the error set. Unlocked: the planning worker owns the slot. */
size_t lade__pool_buffers(lade__pool_t *p, slot_t *s, uint32_t B, size_t bytes);
/* Counts bytes that buffers allocated. Locked. */
void lade__pool_account(lade__pool_t *p, size_t bytes);
/* The READY slot s handed to the caller: a handle viewing it (its view is
 * the caller's to fill), s HELD. NULL when out of memory. Locked. */
handle_t *lade__pool_hand_out(lade__pool_t *p, slot_t *s);
/* The held handle h given back: its slot FREE, the handle queued for reuse.
 * Returns the slot when the pool is above its target and gives this buffer
 * back (the caller frees it with slot_free, unlocked), else NULL. keep: the
 * pool is not to shrink (a destroyed loader frees everything at once).
 * Locked. */
slot_t *lade__pool_take_back(lade__pool_t *p, handle_t *h, bool keep);
void lade__pool_slot_free(lade__pool_t *p, slot_t *s);

#endif
