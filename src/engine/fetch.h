/*
 * fetch.h - the fetch stage: where a sample's bytes come from. It asks the
 * memory tier, then the disk tier, then the source; it hands a planned
 * batch's misses to a remote source ahead of time (submit), tells the
 * engine which samples can be read without waiting for the network, and
 * runs the DELI prefetcher that keeps the disk tier filled ahead of the
 * consumer. Only the engine uses it.
 */
#ifndef LADE_FETCH_H
#define LADE_FETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "source/source.h"

enum { LADE_TIER_STORAGE = 0, LADE_TIER_MEM = 1, LADE_TIER_DISK = 2, LADE_TIER_COUNT = 3 };

typedef struct lade__fetch lade__fetch_t;

typedef struct lade__fetch_params {
  const struct lade_config *cfg;
  lade__source_t *src; /* opened; borrowed, outlives the fetch stage */
  const lade__source_ops_t *ops;
  uint64_t steps;      /* steps per epoch for this learner */
  uint32_t batch;      /* local batch size B: sample position = (epoch*steps+step)*B + i */
} lade__fetch_params_t;

/* Opens the cache tiers the settings ask for and starts the prefetcher when
 * it is on. Errors name the cache folder. */
int lade__fetch_open(lade__fetch_t **out, const lade__fetch_params_t *p);
void lade__fetch_close(lade__fetch_t *f);

/* True when any cache tier is on. */
bool lade__fetch_cached(const lade__fetch_t *f);

/* Reads the bytes of sample idx for a batch of `epoch` into out; *tier says
 * where they came from. Thread-safe. */
int lade__fetch_read(lade__fetch_t *f, uint64_t idx, uint64_t epoch, lade__buf_t *out, int *tier);

/* A batch was planned: start remote requests for its samples that no tier
 * holds and the prefetcher is not already fetching. Thread-safe. */
void lade__fetch_batch_planned(lade__fetch_t *f, const uint64_t *idx, uint32_t n);

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
  uint64_t samples[LADE_TIER_COUNT], bytes[LADE_TIER_COUNT];
  uint64_t misses;        /* storage reads while a cache tier was on */
  uint64_t prefetched;    /* samples the prefetcher stored in the disk tier */
  uint64_t prefetch_errors;
  uint64_t corrupt;       /* disk entries that failed their checksum */
  uint64_t stale;         /* disk entries found stored under an older version of their sample (refetched) */
  uint64_t waited_prefetch; /* reads that waited for the prefetcher's request of the same sample */
  lade__source_stats_t src;
  uint64_t fetch_size, threshold;
} lade__fetch_stats_t;

void lade__fetch_stats(lade__fetch_t *f, lade__fetch_stats_t *out);

#endif
