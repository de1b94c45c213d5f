/*
 * counts.h - the loader's run counters (lade_loader_stats): batches and
 * samples delivered, the time to the first batch, the consumer's wait and
 * collate times, the intra-node handoffs, and the last LADE__LAT_RING
 * batches' latencies (scheduled to ready). A piece of the engine with its
 * own struct, as epochs.h is: no lock of its own, the engine calls it under
 * the loader's mu (engine.c's lock rule), and lade__counts_report sorts its
 * copy of the latencies with no lock held.
 */
#ifndef LADE__COUNTS_H
#define LADE__COUNTS_H

#include <stdint.h>

#include "lade/lade.h"

#define LADE__LAT_RING 4096

typedef struct lade__counts {
  double t_create, t_first, t_wait, t_collate;
  uint64_t batches, samples;
  uint64_t peer_node, peer_node_bytes; /* peer samples read from a rank of this node */
  uint64_t node_reads;                 /* intra-node handoffs read from the node's cache */
  double lat[LADE__LAT_RING];
  uint64_t nlat;
} lade__counts_t;

/* The loader was created at `now` (the first batch's time counts from it). */
void lade__counts_open(lade__counts_t *c, double now);
/* A batch of n samples handed out at `now`, its collation having taken collate_s. */
void lade__counts_batch(lade__counts_t *c, uint64_t n, double collate_s, double now);
/* The consumer waited s seconds in one next() call. */
void lade__counts_wait(lade__counts_t *c, double s);
/* A batch became ready s seconds after it was scheduled. */
void lade__counts_latency(lade__counts_t *c, double s);
/* A peer sample of `bytes` read from a rank of this node. */
void lade__counts_peer_node(lade__counts_t *c, uint64_t bytes);
/* An intra-node handoff read from the node's cache. */
void lade__counts_node_read(lade__counts_t *c);
/* The counters into out (locked); the latencies copied into lat (LADE__LAT_RING), their number returned. */
uint64_t lade__counts_copy(const lade__counts_t *c, lade_stats_t *out, double *lat);
/* The latency percentiles of lat's n values (sorted here) into out (unlocked). */
void lade__counts_report(double *lat, uint64_t n, lade_stats_t *out);

#endif
