/*
 * engine.h - what the engine's other files ask of a loader. engine.c owns
 * struct lade_loader (the run: its lock, slots, workers and counters; its
 * opening comment is the design and the lock rules) and composes the
 * opened pipeline (pipeline.h), the batch pool (pool.h), the run's
 * counters (counts.h) and the per-epoch ones (epochs.h). engine_stats.c
 * (the reports and the listing) reads a loader only through these calls.
 */
#ifndef LADE__ENGINE_H
#define LADE__ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/counts.h"
#include "engine/epochs.h"
#include "engine/pipeline.h"

/* The loader's opened pipeline in *P, to be read only (pipeline.h); or
 * LADE_ESTATE, naming fn, when this process is a fork() of the one that
 * created the loader (a loader cannot be used across fork()). */
int lade__engine_pipeline(const lade_loader_t *L, const char *fn, lade__pipeline_t **P);

/* The run's part of lade_loader_stats, read under the loader's lock: its
 * counters (counts.h) with the latency ring copied to lat
 * (LADE__LAT_RING entries; returns how many hold one), the workers' times,
 * bytes and samples by tier, the pool's peak and the threads started. */
uint64_t lade__engine_run_stats(lade_loader_t *L, lade_stats_t *out, double *lat);

/* Epoch `epoch`'s counters into *a (false when it has not started), and
 * where the source's counters stood when the next epoch started
 * (*have_next false: it has not). */
bool lade__engine_epoch(lade_loader_t *L, uint64_t epoch, struct epoch_acc *a, lade__source_stats_t *next_start,
                        bool *have_next);

#endif
