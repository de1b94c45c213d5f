/*
 * prefetch.h - DELI's prefetcher, a piece the fetch stage composes
 * (fetch.c): a thread that fetches this learner's future samples into the
 * disk tier ahead of the consumer (prefetch.c says how and why). The piece
 * owns its struct, its thread and its lock; of the fetch stage it knows one
 * callback, `version`, and the fetch stage tells it what the engine does
 * (planned, consumed, seek, quiesce).
 */
#ifndef LADE__PREFETCH_H
#define LADE__PREFETCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cursor/cursor.h"
#include "source/source.h"

/* A small set of sample indices (open addressing, backward-shift
 * deletion), each with its state: selected into the prefetcher's ring,
 * requested, or taken by the engine (prefetch.c; 0: an empty slot). */
typedef struct lade__idxset {
  uint64_t *key;
  uint32_t *state;
  size_t cap, n; /* cap: power of two */
} lade__idxset_t;

typedef struct lade__prefetch_params {
  lade__source_t *src; /* borrowed, as the fetch stage's */
  const lade__source_ops_t *ops;
  lade__cursor_t *cursor;
  lade__cache_t *disk;   /* the tier it fills (borrowed) */
  uint64_t batch, steps, epochs;
  uint64_t window;       /* the engine's window of batches: the engine fetches those itself */
  uint64_t fetch_size, threshold; /* DELI's: samples per fetch, and the trigger */
  uint64_t ra_samples;   /* at most this many submitted and unread at once (0: a window) */
  bool node;             /* the disk folder is the node's: node-wide claims decide who fetches and every
                          * worker's read puts, so the read-ahead's samples are not marked TAKEN */
  /* the version a sample's disk entry is put with (LADE__VERSION_UNKNOWN: not put) */
  uint64_t (*version)(void *ctx, uint64_t idx);
  void *ctx;
} lade__prefetch_params_t;

typedef struct lade__prefetch {
  lade__prefetch_params_t p;
  bool on;       /* started: the calls below do nothing otherwise */
  pthread_t thread;
  uint64_t total; /* positions in the run */
  /* `mu` guards what follows; it is never held while calling a cache tier,
   * the source, the cursor or the callback, and nothing else is locked
   * under it */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;     /* the thread waits here */
  pthread_cond_t cv_inflight; /* readers wait for its request of their sample */
  bool stop;
  uint64_t consumed; /* the consumer took every position below this */
  uint64_t planned;  /* steps the engine planned since open */
  uint64_t plan_hi;  /* 1 + the latest step the engine planned: the thread leaves those to it */
  uint64_t seek_gen;
  uint64_t pos;      /* it fetched every position below this (that it is responsible for) */
  lade__idxset_t inflight;
  uint64_t *marks;   /* the samples marked TAKEN, oldest first (a ring): the oldest leaves the set when it is */
  size_t marks_cap, marks_head, marks_n; /* full, all of them at a seek (prefetch.c, marks_pop) */
  _Atomic uint64_t prefetched, errors, waited; /* counters: stats */
} lade__prefetch_t;

/* Starts the thread. Returns 0 or a negative code (no memory, no thread);
 * lade__prefetch_close() either way. */
int lade__prefetch_start(lade__prefetch_t *pf, const lade__prefetch_params_t *p);
/* Its counters (stats): samples stored in the disk tier, failed requests,
 * reads that waited for one of its requests. */
void lade__prefetch_counts(const lade__prefetch_t *pf, uint64_t *prefetched, uint64_t *errors, uint64_t *waited);
/* Stops waits and the thread's work at once (a closing loader). */
void lade__prefetch_quiesce(lade__prefetch_t *pf);
/* Quiesces, joins the thread, frees. On a zeroed struct: nothing. */
void lade__prefetch_close(lade__prefetch_t *pf);
/* Whether sample idx is in flight: requested by the thread, which will put
 * it (a sample only selected into its ring is not). */
bool lade__prefetch_inflight(lade__prefetch_t *pf, uint64_t idx);
/* The engine's read-ahead would request sample idx: false when the thread
 * has requested it already. Else the sample is the engine's from now,
 * selected into the ring or not (marked TAKEN): the ring's chunk skips it,
 * the thread does not select it again, and lade__prefetch_wait hands it to
 * the worker that reads it as taken, to put into the tier in the thread's
 * place (before, a sample the read-ahead requested first could be
 * requested again by the thread for a later epoch, and one of the two
 * requests was wasted). Ask the tiers after this (the thread leaves the
 * set only after its put, so a sample it just fetched is found in one or
 * the other); one a tier holds is not wanted: lade__prefetch_untake. */
bool lade__prefetch_take_ahead(lade__prefetch_t *pf, uint64_t idx);
/* Undoes take_ahead's mark of idx: a tier holds it, the read-ahead leaves it. */
void lade__prefetch_untake(lade__prefetch_t *pf, uint64_t idx);
/* Waits while sample idx is in flight (LADE__PF_WAITED after a wait). A
 * sample only selected into the ring (or taken by the read-ahead) is taken
 * from it instead (LADE__PF_TAKEN): the caller reads it and puts it into the
 * tier, and the thread does not request it. LADE__PF_NONE: neither. */
enum { LADE__PF_NONE, LADE__PF_WAITED, LADE__PF_TAKEN };
int lade__prefetch_wait(lade__prefetch_t *pf, uint64_t idx);
/* The engine planned step q: its samples are the engine's to fetch. */
void lade__prefetch_planned(lade__prefetch_t *pf, uint64_t q);
/* The consumer took every position below pos. */
void lade__prefetch_consumed(lade__prefetch_t *pf, uint64_t pos);
/* The engine moved to position pos (step q): what is pending belongs to the old position. */
void lade__prefetch_seek(lade__prefetch_t *pf, uint64_t pos, uint64_t q);

#endif
