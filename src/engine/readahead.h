/*
 * readahead.h - remote requests ahead of the workers, a piece the fetch
 * stage composes (fetch.c): a planned step's storage reads are handed to a
 * remote source at once (its submit), and, with readahead_bytes, the steps
 * after it in chunks; plan=shards over a remote source reads the shard
 * stream front to back (readahead.c says how and why). The piece owns its
 * struct and lock; of the fetch stage it knows one callback, `wanted`.
 */
#ifndef LADE__READAHEAD_H
#define LADE__READAHEAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cursor/cursor.h"
#include "source/source.h"

typedef struct lade__readahead_params {
  lade__source_t *src; /* borrowed, as the fetch stage's */
  const lade__source_ops_t *ops;
  lade__cursor_t *cursor;
  uint64_t steps, batch, epochs; /* steps per epoch, local batch, epochs of the run */
  uint64_t window;               /* the engine's window of batches in preparation */
  uint64_t ra_steps, ra_samples; /* steps read ahead; samples submitted ahead (resolve.c) */
  uint64_t mean_bytes;           /* of a sample: what the source's bound on unread results must hold */
  bool routed;                   /* a routed plan: only storage routes read the source */
  bool peers;                    /* a transport carries the peer routes (else they read storage) */
  bool tiers;                    /* a cache tier keeps what is read (an epoch is requested ahead once the one before
                                    is delivered) */
  /* Whether sample idx must be requested (not in flight elsewhere, not in a
   * tier); called without any lock of this piece. */
  bool (*wanted)(void *ctx, uint64_t idx);
  void *ctx;
} lade__readahead_params_t;

typedef struct lade__readahead {
  lade__readahead_params_t p; /* copied at open */
  bool remote;                /* the source has submit(): else every call does nothing */
  /* plan=shards over a remote source: the stream read in its order */
  bool sr_on;
  uint64_t sr_count, sr_cap, sr_ahead; /* stream samples an epoch, the shuffle buffer, samples read past it */
  /* `mu` (a leaf: nothing is called under it) guards the two positions */
  pthread_mutex_t mu;
  uint64_t ra_next; /* the first step not yet requested */
  uint64_t sr_next; /* global stream position (epoch * sr_count + pos) not yet requested */
} lade__readahead_t;

/* Also raises the source's bound on unread results to what the window and
 * the read-ahead hold (its reserve). */
void lade__readahead_open(lade__readahead_t *ra, const lade__readahead_params_t *p);
void lade__readahead_close(lade__readahead_t *ra);
/* Step st was planned (the engine's one planning worker, in step order). */
void lade__readahead_step(lade__readahead_t *ra, const lade__cursor_step_t *st);
/* Whether a read by this route goes to the source. */
bool lade__readahead_reads_storage(const lade__readahead_t *ra, int32_t route);
/* The engine moved to step q: read ahead from there. */
void lade__readahead_seek(lade__readahead_t *ra, uint64_t q);

#endif
