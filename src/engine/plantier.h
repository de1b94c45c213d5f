/*
 * plantier.h - the tier a routed plan drives, a piece the fetch stage
 * composes (fetch.c: its chains "own cache" and "own cache, two tiers"):
 * which samples each planned step admits (put as they are read) and evicts
 * (when every sample of the step was read), and the moves between memory
 * and disk of two tiers.
 *
 * Routed plans (every kind but regular and shards; cursor/cursor.h): the
 * plan's tier (memory, else disk) runs the `plan` policy and never evicts
 * by itself. A step's admits are put as its samples are read (each admitted
 * sample is one the learner reads in that step); its evicts are applied
 * when every sample of the step has been read (lade__fetch_step_done),
 * unless a later planned step admits the sample again (adm_q). Steps are
 * filled concurrently (the engine's window), so a read routed to the cache
 * may come before the read of an earlier step that admits the sample: it
 * waits for that admit (adm_pending, bounded by ADMIT_WAIT_S, then it falls
 * back), which with local sources makes the cache hits equal the plan's.
 * Admits run ahead of the evicts of the steps before them by at most the
 * engine's window, so the tier's byte capacity is the plan's cache plus
 * (prefetch + 2) batches of mean-sized samples (engine/resolve.c,
 * docs/cache.md).
 *
 * Two tiers (solar with cache_disk; docs/plan.md "Two tiers"): the plan
 * drives the memory tier and the disk tier as one hierarchy. Each read
 * routed to the own cache names its tier (LADE__ROUTE_OWN_DISK), each admit
 * its tier (adm_tier), and the step's moves between the tiers are done by
 * lade__fetch_step_done after its evicts, in step order. A read of a later
 * step waits for a pending move of the sample (mv_n, done_q; bounded like
 * an admit's wait); an evict or a move of a sample that a later planned step
 * admits again leaves that admit's tier alone (the admit may have been put
 * already) and clears the other one.
 *
 * The bookkeeping of both (adm_q, adm_pending, adm_tier, mv_n, done_q)
 * is this piece's, with its locks:
 *
 *   `mu` + `cv`  a read waiting (bounded, ADMIT_WAIT_S) for a pending
 *                admit of its sample, or for an earlier step's move of it;
 *                broadcast when an admit is put, a step is done, a seek
 *                drops what was pending, or the stage quiesces
 *   `put_mu`     orders an evict's (or a move's) look at adm_q against an
 *                admit's put, so a sample a later step admits is not
 *                evicted under its put
 *
 * Neither is held while the other is taken, nor across anything but the
 * cache tier calls under put_mu; the per-sample tables are atomics.
 */
#ifndef LADE__PLANTIER_H
#define LADE__PLANTIER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cursor/cursor.h"

typedef struct lade__plantier {
  lade__cache_t *tier; /* the tier the plan drives: memory, else disk (NULL: no plan tier, every call a no-op) */
  lade__cache_t *disk; /* two tiers: the plan's disk tier under `tier` (else NULL) */
  uint64_t samples;
  _Atomic uint64_t *adm_q;      /* q + 1 of the latest planned step admitting each sample (0: none) */
  _Atomic uint8_t *adm_pending; /* 1 while that admit has not been put */
  /* two tiers: each admit's tier, and the moves: mv_n counts a sample's
   * moves planned and not done yet; done_q is q + 1 of the last step done
   * (steps end in order). A read of step q of a sample with moves pending
   * waits until done_q >= q: every move of an earlier step is then done,
   * and none of step q or later is waited for (that could wait for the
   * read itself) */
  _Atomic uint8_t *adm_tier;
  _Atomic uint16_t *mv_n;
  _Atomic uint64_t done_q;
  pthread_mutex_t mu, put_mu;
  pthread_cond_t cv;
  bool stop;
  _Atomic uint64_t admits[2], moves_up, moves_down; /* two tiers: admits to memory/disk, moves */
} lade__plantier_t;

/* tier NULL: none (the calls below do nothing). first: the run's first step. */
int lade__plantier_open(lade__plantier_t *pt, lade__cache_t *tier, lade__cache_t *disk, uint64_t samples,
                        uint64_t first, const char *plan);
void lade__plantier_close(lade__plantier_t *pt);
/* Ends every wait at once (a closing loader). */
void lade__plantier_quiesce(lade__plantier_t *pt);
/* Whether t is one of its tiers. */
bool lade__plantier_owns(const lade__plantier_t *pt, const lade__cache_t *t);

/* ---- the reads */
/* Whether step q's read of idx is the one that admits it (it must put it, then end_admit). */
bool lade__plantier_admitting(lade__plantier_t *pt, uint64_t idx, uint64_t q);
/* Whether an admit of idx is planned and not put yet. */
bool lade__plantier_pending(lade__plantier_t *pt, uint64_t idx);
/* Waits (bounded) while an admit of idx is pending; true when it was put meanwhile. */
bool lade__plantier_wait_admit(lade__plantier_t *pt, uint64_t idx);
/* Two tiers: whether a read of idx for step q must wait for earlier steps' moves. */
bool lade__plantier_move_pending(lade__plantier_t *pt, uint64_t idx, uint64_t q);
/* Waits (bounded) while move_pending, so the read finds the sample in the tier the plan says. */
void lade__plantier_wait_move(lade__plantier_t *pt, uint64_t idx, uint64_t q);
/* The tier an admit of idx goes to: the plan's (two tiers: its admit's). */
lade__cache_t *lade__plantier_admit_tier(lade__plantier_t *pt, uint64_t idx);
/* A put into t (under put_mu when t is one of the plan's tiers). */
void lade__plantier_put(lade__plantier_t *pt, lade__cache_t *t, uint64_t idx, uint64_t ver, const void *data,
                        size_t len);
/* The put of an admit of idx into t (admit_tier's), counted by tier with two tiers. */
void lade__plantier_put_admit(lade__plantier_t *pt, lade__cache_t *t, uint64_t idx, uint64_t ver, const void *data,
                              size_t len);
/* The admit of idx was put (or failed): its waiters go on. */
void lade__plantier_end_admit(lade__plantier_t *pt, uint64_t idx);

/* ---- the steps */
/* Step st was planned: its admits and moves are pending. */
void lade__plantier_planned(lade__plantier_t *pt, const lade__cursor_step_t *st);
/* Every sample of step st was read: its evicts, the admits that failed,
 * its moves (version: the version an entry is read and put with). */
void lade__plantier_done(lade__plantier_t *pt, const lade__cursor_step_t *st,
                         uint64_t (*version)(void *ctx, uint64_t idx), void *ctx);
/* The engine moved to step q: the admits and moves of abandoned steps will not come. */
void lade__plantier_seek(lade__plantier_t *pt, uint64_t q);
/* Two tiers: admits put in memory and on disk, moves up and down (stats). */
void lade__plantier_counts(const lade__plantier_t *pt, uint64_t admits[2], uint64_t *moves_up, uint64_t *moves_down);

#endif
