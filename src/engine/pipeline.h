/*
 * pipeline.h - a loader's opened stages (pipeline.c): the source listed,
 * the settings resolved against it (engine/resolve.h), the transport, the
 * plan cursor, the fetch stage, the transform and the trace, with what the
 * run needs to know of them (the sample's shape, steps per epoch, the
 * first step).
 *
 * Rule: a record, with no lock of its own. lade__pipeline_open() writes it
 * before any worker starts, lade__pipeline_close() once every worker is
 * joined; in between nobody writes it, so the run (engine.c) and the
 * reports (engine_stats.c) read its fields as they are. The stages it points
 * at keep their own locks (their headers). The run's mutable state (the
 * slots, the workers, the counters) is engine.c's alone.
 */
#ifndef LADE__PIPELINE_H
#define LADE__PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/core.h"
#include "cursor/cursor.h"
#include "engine/fetch.h"
#include "engine/resolve.h"
#include "engine/trace.h"
#include "source/source.h"
#include "transform/transform.h"
#include "transport/transport.h"

typedef struct lade__pipeline {
  struct lade_config cfg;
  lade__resolved_t res;  /* the settings resolved against the source */
  uint64_t names_digest; /* of the samples' names, where the disk tier or a transport needs it (else 0) */
  lade__source_t src;
  const lade__source_ops_t *src_ops;
  const lade__transform_ops_t *xf;
  void *xf_state;
  lade__sample_shape_t shape;
  lade__cursor_t *cursor;   /* the one source of the order (cursor/cursor.h) */
  bool routed;              /* the plan routes samples: steps finish in order */
  lade__transport_t *dist;  /* the transport between learners (routed plans under mpirun, torchrun), or NULL */
  uint64_t steps, total;    /* steps per epoch, epochs * steps */
  uint64_t first;           /* the run's first step: 0, or a resumed run's (lade_config_set_position) */
  bool direct_payload;      /* npy source + npy transform: read into the slot */
  lade__fetch_t *fetch;     /* cache tiers, remote submits, prefetcher */
  bool async;               /* the fetch stage has bytes ready out of order: claim those samples first */
  lade__trace_t *trace;     /* or NULL */
  bool closed;
} lade__pipeline_t;

/* lade_loader_create's checks before any file is touched: the source kind
 * chosen (*ops), the settings checked alone, the device opened (*device:
 * its number, the current one for `cuda`; -1 for cpu). */
int lade__pipeline_check(const lade_config_t *cfg, const lade__source_ops_t **ops, int *device);

/* Opens the stages in order (trace, source, settings resolved, transport,
 * cursor, fetch stage, transform); on failure the caller closes what opened
 * (lade__pipeline_close). wake(ctx) is the source's on_ready: bytes of a
 * submitted read arrived. */
int lade__pipeline_open(lade__pipeline_t *P, const lade_config_t *cfg, const lade__source_ops_t *ops,
                        void (*wake)(void *), void *ctx);

/* Closes the stages only running workers use: the transport, the fetch stage
 * (cache tiers, the disk cache's folder lock, prefetcher threads), the
 * transform, the source's files, the cursor and the trace; wipes the
 * secrets. Idempotent. */
void lade__pipeline_close(lade__pipeline_t *P);

/* lade_loader_allgather over the pipeline's transport (lade.h). */
int lade__pipeline_allgather(lade__pipeline_t *P, const void *mine, size_t len, void *all);

#endif
