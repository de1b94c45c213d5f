/*
 * epochs.h - the loader's per-epoch counters (lade_loader_epoch_stats), a
 * piece of the engine with its own struct: one entry per epoch a batch or
 * a sample of was seen, sorted by epoch (a seek to epoch 10^8 adds one
 * entry, not 10^8). No lock of its own: the engine calls it under the
 * loader's mu (engine.c's lock rule).
 */
#ifndef LADE__EPOCHS_H
#define LADE__EPOCHS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/fetch.h"
#include "source/source.h"

struct epoch_acc {
  uint64_t epoch;
  uint64_t batches, samples[LADE__TIER_COUNT], bytes[LADE__TIER_COUNT];
  double wait;
  uint64_t bad; /* samples of this epoch that failed (on_error=skip replaced them) */
  uint64_t plan_fallbacks, plan_peer;
  uint64_t peer_node, peer_node_bytes, node_reads;
  bool started;
  lade__source_stats_t at_start; /* the source's counters at the epoch's first batch */
};

typedef struct lade__epochs {
  struct epoch_acc *ep; /* n entries, sorted by epoch */
  uint64_t n, cap;
} lade__epochs_t;

/* Epoch e's counters, made (zeroed) when missing; NULL when out of memory. */
struct epoch_acc *lade__epochs_acc(lade__epochs_t *t, uint64_t e);
/* Epoch e's counters, or NULL when none were made. */
struct epoch_acc *lade__epochs_find(lade__epochs_t *t, uint64_t e);
void lade__epochs_free(lade__epochs_t *t);

#endif
