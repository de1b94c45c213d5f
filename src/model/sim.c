/*
 * sim.c - the simulator: runs a plan step by step without I/O and counts where
 * every sample comes from. It drives the same planner code as the loader, so
 * it also checks the planner at scales the unit tests do not reach. The
 * modelled step time overlaps loading with training (prefetch): a step takes
 * max over learners of its load time, or of its training time if longer.
 * With ranks_per_node > 1, peers are other nodes; a sample held by another
 * rank of the learner's node is an intra-node handoff (from_node), a read of
 * the node's cache modelled at the cache rate. With two tiers (cache_disk)
 * it counts the reads from each tier, the admits to each and the moves
 * between them (the time model reads both tiers at the cache rate; `lade
 * model --tiers` gives the disk its own rate).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "lade/plan.h"

static double rate_time(double n, double rate) { return rate > 0 ? n / rate : 0; }

int lade_simulate(const lade_plan_settings_t *s, size_t size, const lade_sim_costs_t *costs, lade_sim_epoch_t *out,
                  size_t out_size, double *step_imbalance) {
  if (!out) return lade__fail(LADE_EINVAL, "lade_simulate: out is NULL");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_simulate: out_size is %zu; pass sizeof(lade_sim_epoch_t)", out_size);
  lade_plan_t *pl = NULL;
  int rc = lade_plan_create(&pl, s, size);
  if (rc) return rc;
  rc = lade_simulate_plan(pl, costs, out, out_size, step_imbalance);
  lade_plan_destroy(pl);
  return rc;
}

int lade_simulate_plan(lade_plan_t *pl, const lade_sim_costs_t *costs, lade_sim_epoch_t *out, size_t out_size,
                       double *step_imbalance) {
  if (!pl || !out) return lade__fail(LADE_EINVAL, "lade_simulate_plan: NULL argument");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_simulate_plan: out_size is %zu; pass sizeof(lade_sim_epoch_t)", out_size);
  int rc = 0;
  const lade_plan_settings_t *u = lade_plan_settings(pl);
  uint64_t steps = lade_plan_steps_per_epoch(pl), p = u->learners, e0 = 0, t0 = 0;
  lade_plan_start(pl, &e0, &t0); /* a resumed plan: the epochs before its start have no steps */
  lade_sim_costs_t c = {0, 0, 0, 0};
  if (costs) c = *costs;
  for (uint64_t e = 0; e < u->epochs; e++) {
    lade_sim_epoch_t ours, *x = &ours; /* copied to the caller's entry of out_size bytes */
    memset(x, 0, sizeof *x);
    x->epoch = e;
    uint64_t first = e < e0 ? steps : e == e0 ? t0 : 0;
    x->steps = steps - first;
    x->batch_min = UINT64_MAX;
    double imb = 0;
    for (uint64_t t = first; t < steps; t++) {
      const lade_plan_step_t *v;
      rc = lade_plan_next(pl, &v);
      if (rc) goto out;
      uint64_t maxst = 0;
      double tstep = 0;
      for (uint64_t r = 0; r < p; r++) {
        uint64_t st = 0, pe = 0, ca = 0, nd = 0, n = v->offset[r + 1] - v->offset[r];
        for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
          switch (lade_plan_route_class(v->from[i], (uint32_t)r, v->ranks_per_node)) {
            case LADE_ROUTE_STORAGE: st++; break;
            case LADE_ROUTE_OWN: ca++; break;
            case LADE_ROUTE_NODE: nd++; break;
            case LADE_ROUTE_PEER: pe++; break;
          }
        }
        x->from_storage += st;
        x->from_peer += pe;
        x->from_cache += ca;
        x->from_node += nd;
        if (v->tier) {
          for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) x->from_disk += v->tier[i] == LADE_TIER_DISK;
          for (uint64_t i = v->admit_offset[r]; i < v->admit_offset[r + 1]; i++) {
            x->admits_disk += v->admit_tier[i] == LADE_TIER_DISK;
            x->admits_mem += v->admit_tier[i] == LADE_TIER_MEM;
          }
          for (uint64_t i = v->move_offset[r]; i < v->move_offset[r + 1]; i++) {
            x->moves_up += v->move_to[i] == LADE_TIER_MEM;
            x->moves_down += v->move_to[i] == LADE_TIER_DISK;
          }
        }
        maxst = LADE__MAX(maxst, st);
        x->batch_min = LADE__MIN(x->batch_min, n);
        x->batch_max = LADE__MAX(x->batch_max, n);
        /* storage is shared: each learner gets R/p of it while all read */
        double load = rate_time((double)st * (double)p, c.storage_rate) + rate_time((double)pe, c.peer_rate) +
                      rate_time((double)(ca + nd), c.cache_rate);
        double train = rate_time((double)n, c.train_rate);
        tstep = LADE__MAX(tstep, LADE__MAX(load, train));
      }
      x->storage_requests += v->read_offset ? v->read_offset[p] : 0;
      x->max_storage_sum += maxst;
      x->max_storage_peak = LADE__MAX(x->max_storage_peak, maxst);
      x->transfers += v->transfers;
      double pct = 100.0 * (double)v->deficit / (double)v->total;
      imb += pct;
      if (step_imbalance) step_imbalance[e * steps + t] = pct;
      x->time_s += tstep;
    }
    if (!u->coalesce || u->kind != LADE_PLAN_SOLAR) x->storage_requests = x->from_storage;
    x->imbalance_pct = x->steps ? imb / (double)x->steps : 0;
    if (x->batch_min == UINT64_MAX) x->batch_min = 0;
    lade__struct_out((char *)out + e * out_size, out_size, x, sizeof *x);
  }
out:
  return rc;
}
