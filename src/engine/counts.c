/* counts.c - the loader's run counters (counts.h). */
#include "engine/counts.h"

#include <stdlib.h>
#include <string.h>

void lade__counts_open(lade__counts_t *c, double now) {
  memset(c, 0, sizeof *c);
  c->t_create = now;
}

void lade__counts_batch(lade__counts_t *c, uint64_t n, double collate_s, double now) {
  c->batches++;
  c->samples += n;
  if (c->batches == 1) c->t_first = now - c->t_create;
  c->t_collate += collate_s;
}

void lade__counts_wait(lade__counts_t *c, double s) { c->t_wait += s; }

void lade__counts_latency(lade__counts_t *c, double s) { c->lat[c->nlat++ % LADE__LAT_RING] = s; }

void lade__counts_peer_node(lade__counts_t *c, uint64_t bytes) {
  c->peer_node++;
  c->peer_node_bytes += bytes;
}

void lade__counts_node_read(lade__counts_t *c) { c->node_reads++; }

uint64_t lade__counts_copy(const lade__counts_t *c, lade_stats_t *out, double *lat) {
  out->batches = c->batches;
  out->samples = c->samples;
  out->stage_seconds[LADE_STAGE_COLLATE] = c->t_collate;
  out->stage_seconds[LADE_STAGE_WAIT] = c->t_wait;
  out->first_batch_seconds = c->t_first;
  out->peer_samples_node = c->peer_node;
  out->peer_bytes_node = c->peer_node_bytes;
  out->plan_node_reads = c->node_reads;
  uint64_t n = c->nlat < LADE__LAT_RING ? c->nlat : LADE__LAT_RING;
  memcpy(lat, c->lat, n * sizeof *lat);
  return n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void lade__counts_report(double *lat, uint64_t n, lade_stats_t *out) {
  if (!n) return;
  qsort(lat, n, sizeof *lat, cmp_double);
  out->batch_latency_p50 = lat[(n - 1) * 50 / 100];
  out->batch_latency_p90 = lat[(n - 1) * 90 / 100];
  out->batch_latency_p99 = lat[(n - 1) * 99 / 100];
  out->batch_latency_max = lat[n - 1];
}
