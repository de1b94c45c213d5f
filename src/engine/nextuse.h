/*
 * nextuse.h - clairvoyant eviction's next-use maps, a piece the fetch stage
 * composes (fetch.c): a cache tier under the clairvoyant policy asks
 * lade__nextuse(ctx = the lade__nextuse_t) for a key's next use. The piece
 * owns its struct and its lock (nextuse.c's opening comment); it asks only
 * the plan cursor.
 */
#ifndef LADE__NEXTUSE_H
#define LADE__NEXTUSE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cursor/cursor.h"

#define LADE__NMAPS 3

typedef struct lade__nextuse {
  /* given at open, read-only after */
  lade__cursor_t *cursor;
  uint64_t samples;   /* the dataset's */
  uint64_t steps;     /* steps per epoch */
  uint64_t per_epoch; /* positions per epoch: steps * batch */
  uint64_t epochs;
  bool on;            /* maps kept (false: open found no memory for them, or not asked) */
  /* `mu` guards the maps and the consumer's position */
  pthread_mutex_t mu;
  uint32_t *map[LADE__NMAPS]; /* local position within the epoch per sample, of epochs ep[i] (UINT64_MAX: empty) */
  uint64_t ep[LADE__NMAPS];
  uint64_t consumer;          /* the consumer's position */
  _Atomic uint32_t *used;     /* epoch + 1 of each sample's latest read (0: never); atomics, no lock */
} lade__nextuse_t;

/* Opens the maps of epochs 0 and 1. Returns false when they cannot be kept
 * (no memory): the caller's tiers then use LRU, the next best without them.
 * lade__nextuse_close() either way. */
bool lade__nextuse_open(lade__nextuse_t *nu, lade__cursor_t *cursor, uint64_t samples, uint64_t steps,
                        uint64_t batch, uint64_t epochs);
void lade__nextuse_close(lade__nextuse_t *nu);
/* The map of epoch e (made by the planning worker, never the consumer). */
void lade__nextuse_ensure(lade__nextuse_t *nu, uint64_t e);
/* A cache tier's next_use callback: ctx is the lade__nextuse_t. */
uint64_t lade__nextuse(void *ctx, uint64_t key);
/* A read of sample idx at step q, before the tiers see it: a hit's refreshed next use is the one after this. */
void lade__nextuse_mark(lade__nextuse_t *nu, uint64_t idx, uint64_t q);
/* The consumer took every position below pos. */
void lade__nextuse_consumed(lade__nextuse_t *nu, uint64_t pos);

#endif
