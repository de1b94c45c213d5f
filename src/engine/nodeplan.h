/*
 * nodeplan.h - a node-aware plan's handoffs between the ranks of one node
 * through the node cache (docs/plan.md "Nodes"), a piece the fetch stage
 * composes (fetch.c): a read routed to another rank of this node waits for
 * that rank's put, a step's evicts wait until every rank of the node has
 * read the step, and the step's sends skip the node's own ranks. Its struct
 * is its own; it has no lock: the send buffers are the planning worker's
 * (one at a time), the rest is read-only after open and the node cache's
 * step marks (shmcache.c).
 */
#ifndef LADE__NODEPLAN_H
#define LADE__NODEPLAN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cursor/cursor.h"
#include "transport/transport.h"

typedef struct lade__nodeplan_params {
  lade__cache_t *node;     /* the node cache (NULL: not a node-aware plan, every call a no-op) */
  lade__transport_t *dist; /* told of a rank of the node that fell behind (may be NULL) */
  uint32_t base, ranks;    /* the node's ranks are base .. base + ranks - 1 */
  uint32_t local;          /* this rank among them */
  uint32_t timeout_ms;     /* peer_timeout_ms */
} lade__nodeplan_params_t;

typedef struct lade__nodeplan {
  lade__nodeplan_params_t p;
  uint64_t *send_idx;      /* a step's sends less those to the node's ranks */
  uint32_t *send_dst;
  uint32_t send_cap;
} lade__nodeplan_t;

/* Whether route names another rank of this node. */
bool lade__nodeplan_is_node_rank(const lade__nodeplan_t *np, int32_t route);
/* An intra-node handoff: the node's rank `route` admitted idx in a step
 * before q and puts it as it reads it; polls until the entry is there, or
 * that rank has finished every step before q (its put is done or was
 * refused: a last look, then false). A rank that does neither within the
 * timeout fails the read, naming it (*fail, and the transport is told).
 * *stop ends the wait. */
bool lade__nodeplan_get(lade__nodeplan_t *np, uint64_t idx, uint64_t q, int32_t route, uint64_t ver,
                        lade__buf_t *out, int *fail, const atomic_bool *stop);
/* Step st's sends without those to the node's ranks (who read the node cache). */
void lade__nodeplan_sends(lade__nodeplan_t *np, const lade__cursor_step_t *st, const uint64_t **idx,
                          const uint32_t **dst, uint32_t *n);
/* This rank has read every sample of step st; its evicts wait until every
 * rank of the node has too (one may still read what this rank's plan
 * evicts). 0, or LADE_ETIMEOUT naming the rank that fell behind. */
int lade__nodeplan_step_done(lade__nodeplan_t *np, const lade__cursor_step_t *st);
/* Opens it for a run whose first step is `first`. */
void lade__nodeplan_open(lade__nodeplan_t *np, const lade__nodeplan_params_t *p, uint64_t first);
/* The run is at step q (open, seek). */
void lade__nodeplan_mark(lade__nodeplan_t *np, uint64_t q);
void lade__nodeplan_close(lade__nodeplan_t *np);

#endif
