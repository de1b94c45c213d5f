/*
 * plan_simulate.c - `lade simulate`: plans run without I/O (lade_simulate),
 * per epoch where the samples come from, the storage requests, the
 * imbalance and the modelled time; the paper reproductions (--fig6,
 * --ablation, --orders) and a gnuplot picture (--plot, plan_plot.c).
 * Public headers only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lade/lade.h"
#include "lade/plan.h"
#include "plan_cli.h"
#include "plan_opts.h"
#include "shown.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double quant(const double *v, size_t n, double q) {
  if (!n) return 0;
  double pos = q * (double)(n - 1);
  size_t i = (size_t)pos;
  double f = pos - (double)i;
  return i + 1 < n ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

static void print_epochs(const char *name, const lade_plan_settings_t *s, const lade_sim_epoch_t *ep,
                         const lade_tool_warm_t *w) {
  int nodes = s->ranks_per_node > 1 && (s->kind == LADE_PLAN_DISTCACHE || s->kind == LADE_PLAN_LOCALITY ||
                                         s->kind == LADE_PLAN_SOLAR); /* planned per node: the handoff column */
  printf("plan %s: N=%llu p=%u B=%u cache=%llu/%s epochs=%llu", name, (unsigned long long)s->samples, s->learners,
         s->batch_size, (unsigned long long)s->cache, nodes ? "node" : "learner", (unsigned long long)s->epochs);
  if (nodes) printf(" ranks_per_node=%u (peer: between nodes)", s->ranks_per_node);
  if (s->cache_disk) printf(" cache_disk=%llu", (unsigned long long)s->cache_disk);
  if (w) /* the samples handed to the plan; a kind keeps those it would have admitted */
    printf(" warm=%llu", (unsigned long long)lade_tool_warm_handed(w, s->cache_bytes && s->sample_bytes
                                                                           ? s->cache_bytes / s->sample_bytes
                                                                           : s->cache));
  printf("\n  %5s %12s %12s %12s", "epoch", "storage", "peer", "cache");
  if (nodes) printf(" %12s", "handoff");
  printf(" %10s %9s %10s %9s %9s %11s\n", "requests", "numPFS", "numPFSmax", "imbal%", "batch", "time_s");
  for (uint64_t e = 0; e < s->epochs; e++) {
    const lade_sim_epoch_t *x = &ep[e];
    char b[32];
    snprintf(b, sizeof b, "%llu-%llu", (unsigned long long)x->batch_min, (unsigned long long)x->batch_max);
    printf("  %5llu %12llu %12llu %12llu", (unsigned long long)e, (unsigned long long)x->from_storage,
           (unsigned long long)x->from_peer, (unsigned long long)x->from_cache);
    if (nodes) printf(" %12llu", (unsigned long long)x->from_node);
    printf(" %10llu %9.1f %10llu %9.2f %9s %11.1f\n", (unsigned long long)x->storage_requests,
           x->steps ? (double)x->max_storage_sum / (double)x->steps : 0, (unsigned long long)x->max_storage_peak,
           x->imbalance_pct, b, x->time_s);
  }
  if (s->cache_disk) { /* two tiers: reads from each, admits to each, moves between them */
    printf("  %5s %12s %12s %12s %12s %12s %12s\n", "epoch", "mem_reads", "disk_reads", "admit_mem", "admit_disk",
           "to_mem", "to_disk");
    for (uint64_t e = 0; e < s->epochs; e++) {
      const lade_sim_epoch_t *x = &ep[e];
      uint64_t cached = x->from_cache + x->from_node + x->from_peer;
      printf("  %5llu %12llu %12llu %12llu %12llu %12llu %12llu\n", (unsigned long long)e,
             (unsigned long long)(cached - x->from_disk), (unsigned long long)x->from_disk,
             (unsigned long long)x->admits_mem, (unsigned long long)x->admits_disk, (unsigned long long)x->moves_up,
             (unsigned long long)x->moves_down);
    }
  }
}

static int sim_fig6(opts_t *o) {
  const uint32_t bs[] = {32, 64, 128};
  const uint32_t ps[] = {4, 8, 16, 32, 64, 128, 256};
  sbuf_t data = {0}, lab = {0};
  int col = 0;
  printf("paper 000 Fig. 6: imbalance traffic %% (sum of deficits / global batch), locality plan,\n"
         "whole dataset cached (N=%llu, cache ceil(N/p)), steps of epochs >= 1, seed %llu\n",
         (unsigned long long)o->s.samples, (unsigned long long)o->s.seed);
  printf("  %5s %5s %7s %7s %7s %7s %7s %7s %6s\n", "B", "p", "min", "q1", "median", "q3", "max", "mean", "steps");
  for (size_t bi = 0; bi < 3; bi++)
    for (size_t pi = 0; pi < 7; pi++) {
      lade_plan_settings_t s = o->s;
      s.kind = LADE_PLAN_LOCALITY;
      s.batch_size = bs[bi];
      s.learners = ps[pi];
      s.cache = (s.samples + s.learners - 1) / s.learners;
      if (s.epochs < 2) s.epochs = 2;
      uint64_t G = (uint64_t)s.batch_size * s.learners, steps = s.drop_last ? s.samples / G : (s.samples + G - 1) / G;
      lade_sim_epoch_t *ep = calloc(s.epochs, sizeof *ep);
      double *imb = calloc(s.epochs * steps + 1, sizeof *imb);
      if (!ep || !imb || lade_simulate(&s, sizeof s, NULL, ep, sizeof *ep, imb)) {
        free(ep);
        free(imb);
        return die("simulate", "%s", lade_tool_error());
      }
      size_t n = (size_t)((s.epochs - 1) * steps);
      double *v = imb + steps, mean = 0;
      qsort(v, n, sizeof *v, cmp_d);
      for (size_t i = 0; i < n; i++) mean += v[i] / (double)n;
      double q[5] = {v[0], quant(v, n, 0.25), quant(v, n, 0.5), quant(v, n, 0.75), v[n - 1]};
      printf("  %5u %5u %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %6zu\n", bs[bi], ps[pi], q[0], q[1], q[2], q[3], q[4],
             mean, n);
      col++;
      lade_tool_sbuf_printf(&data, "%d %g %g %g %g %g %d\n", col + (int)bi, q[1], q[0], q[4], q[3], q[2], (int)bi);
      lade_tool_sbuf_printf(&lab, "%s\"%u/%u\" %d", col > 1 ? ", " : "", bs[bi], ps[pi], col + (int)bi);
      free(ep);
      free(imb);
    }
  int rc = 0;
  if (o->plot) {
    sbuf_t sc = {0};
    lade_tool_sbuf_printf(&sc,
       "$d << EOD\n%sEOD\nset title 'Imbalance traffic (paper 000 Fig. 6): local batch / learners'\n"
       "set ylabel 'sum of deficits / global batch (%%)'\nset xtics rotate by 60 right (%s)\nset bmargin 5\nset boxwidth 0.6\n"
       "set style fill solid 0.4\nset key off\nset grid y\nset xrange [0:%d]\n"
       "plot $d using 1:2:3:4:5:(0.6):($7+1) with candlesticks whiskerbars lc variable, "
       "$d using 1:6:6:6:6:(0.6) with candlesticks lc rgb 'black'\n",
       data.p, lab.p, col + 4);
    rc = lade_tool_gnuplot("simulate", o->plot, sc.p);
    free(sc.p);
  }
  free(data.p);
  free(lab.p);
  return rc;
}

static int sim_run(const lade_plan_settings_t *s, const lade_sim_costs_t *c, lade_sim_epoch_t **ep) {
  *ep = calloc(s->epochs ? s->epochs : 1, sizeof **ep);
  if (!*ep) return die("simulate", "out of memory%s", "");
  if (lade_simulate(s, sizeof *s, c, *ep, sizeof **ep, NULL)) {
    free(*ep);
    *ep = NULL;
    return die("simulate", "%s", lade_tool_error());
  }
  return 0;
}

/* lade_simulate, or with --warm the same over a plan seeded as the loader
 * seeds it at a warm restart (plan_warm.c); LADE_E* as lade_simulate. */
static int sim_one(const lade_plan_settings_t *s, const lade_sim_costs_t *c, const lade_tool_warm_t *w,
                   lade_sim_epoch_t *out, double *imb) {
  if (!w) return lade_simulate(s, sizeof *s, c, out, sizeof *out, imb);
  lade_plan_t *pl = NULL;
  int rc = lade_tool_plan_open(s, w, &pl);
  if (!rc) rc = lade_simulate_plan(pl, c, out, sizeof *out, imb);
  lade_plan_destroy(pl);
  return rc;
}

static int sim_ablation(opts_t *o) {
  struct {
    const char *name;
    int kind, reorder, coalesce;
    uint32_t imb;
  } rows[] = {
      {"regular", LADE_PLAN_REGULAR, 0, 0, 0},
      {"regular+lru", LADE_PLAN_REGULAR_LRU, 0, 0, 0},
      {"regular+belady", LADE_PLAN_REGULAR_BELADY, 0, 0, 0},
      {"solar: remap", LADE_PLAN_SOLAR, 0, 0, 0},
      {"solar: +epoch order", LADE_PLAN_SOLAR, 1, 0, 0},
      {"solar: +load balance", LADE_PLAN_SOLAR, 1, 0, o->s.imbalance ? o->s.imbalance : o->s.batch_size / 4},
      {"solar: +chunks", LADE_PLAN_SOLAR, 1, 1, o->s.imbalance ? o->s.imbalance : o->s.batch_size / 4},
  };
  printf("paper 002 Fig. 10-12 style ablation: N=%llu p=%u B=%u cache=%llu/learner epochs=%llu seed=%llu\n",
         (unsigned long long)o->s.samples, o->s.learners, o->s.batch_size, (unsigned long long)o->s.cache,
         (unsigned long long)o->s.epochs, (unsigned long long)o->s.seed);
  printf("  %-22s %12s %12s %14s %14s %12s %8s\n", "plan", "storage", "requests", "numPFS/step", "numPFS max",
         "batch", "time_s");
  sbuf_t data = {0};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    lade_plan_settings_t s = o->s;
    s.kind = rows[i].kind;
    s.reorder = rows[i].reorder;
    s.coalesce = rows[i].coalesce;
    s.imbalance = rows[i].imb;
    lade_sim_epoch_t *ep;
    int rc = sim_run(&s, &o->c, &ep);
    if (rc) return rc;
    uint64_t st = 0, rq = 0, ms = 0, mp = 0, steps = 0, bmin = UINT64_MAX, bmax = 0;
    double t = 0;
    for (uint64_t e = 0; e < s.epochs; e++) {
      st += ep[e].from_storage;
      rq += ep[e].storage_requests;
      ms += ep[e].max_storage_sum;
      mp = ep[e].max_storage_peak > mp ? ep[e].max_storage_peak : mp;
      steps += ep[e].steps;
      t += ep[e].time_s;
      bmin = ep[e].batch_min < bmin ? ep[e].batch_min : bmin;
      bmax = ep[e].batch_max > bmax ? ep[e].batch_max : bmax;
    }
    char b[32];
    snprintf(b, sizeof b, "%llu-%llu", (unsigned long long)bmin, (unsigned long long)bmax);
    printf("  %-22s %12llu %12llu %14.2f %14llu %12s %8.1f\n", rows[i].name, (unsigned long long)st,
           (unsigned long long)rq, steps ? (double)ms / (double)steps : 0, (unsigned long long)mp, b, t);
    lade_tool_sbuf_printf(&data, "\"%s\" %llu %llu %g\n", rows[i].name, (unsigned long long)st, (unsigned long long)rq,
       steps ? (double)ms / (double)steps : 0);
    free(ep);
  }
  int rc = 0;
  if (o->plot) {
    sbuf_t sc = {0};
    lade_tool_sbuf_printf(&sc,
       "$d << EOD\n%sEOD\nset title 'Storage reads, all epochs (paper 002 ablation)'\nset style data histograms\n"
       "set style fill solid 0.6\nset xtics rotate by 30 right\nset yrange [0:*]\nset format y '%%.1s%%c'\nset bmargin 6\nset ylabel 'samples'\nset grid y\n"
       "plot $d using 2:xtic(1) title 'storage reads', '' using 3 title 'storage requests (coalesced)'\n",
       data.p);
    rc = lade_tool_gnuplot("simulate", o->plot, sc.p);
    free(sc.p);
  }
  free(data.p);
  return rc;
}

static int sim_orders(opts_t *o) {
  uint64_t E = o->s.epochs, buf = o->s.cache * o->s.learners;
  if (buf > o->s.samples) buf = o->s.samples;
  uint64_t *cost = calloc(E * E, sizeof *cost), *order = calloc(E, sizeof *order);
  if (!cost || !order || lade_plan_order_costs(&o->s, sizeof o->s, buf, cost)) {
    free(cost);
    free(order);
    return die("simulate", "%s", lade_tool_error());
  }
  printf("epoch order (paper 002 eq. 1-2): %llu epochs, buffer %llu samples (p x cache)\n", (unsigned long long)E,
         (unsigned long long)buf);
  uint64_t ident = 0;
  for (uint64_t e = 1; e < E; e++) ident += cost[(e - 1) * E + e];
  printf("  %-8s %14llu\n", "identity", (unsigned long long)ident);
  const char *names[] = {"auto", "dp", "local", "pso"};
  for (int a = 1; a <= 3; a++) {
    uint64_t total;
    if (a == LADE_ORDER_DP && E > 16) {
      printf("  %-8s %14s\n", names[a], "(E > 16)");
      continue;
    }
    if (lade_plan_order_solve(cost, E, a, o->s.seed, order, &total)) {
      free(cost);
      free(order);
      return die("simulate", "%s", lade_tool_error());
    }
    printf("  %-8s %14llu  order:", names[a], (unsigned long long)total);
    for (uint64_t e = 0; e < E && e < 24; e++) printf(" %llu", (unsigned long long)order[e]);
    printf("%s\n", E > 24 ? " ..." : "");
  }
  free(cost);
  free(order);
  return 0;
}

int lade_tool_simulate(int argc, char **argv) {
  opts_t o;
  lade_tool_plan_defaults(&o);
  int rc = lade_tool_plan_parse("simulate", argc, argv, &o);
  if (rc == 1) {
    printf("usage: lade simulate --plan NAME|all --samples N --learners P --batch-size B --epochs E [--cache C]\n"
           "                     [--seed S] [--warm PATH ...] [--plot FILE.svg] [--box] [--fig6] [--ablation]\n"
           "                     [--orders]\n"
           "Runs plans without I/O and reports per epoch: samples from storage, peers and own cache,\n"
           "storage requests after coalescing, numPFS (per step the largest storage load of any learner,\n"
           "mean and max), the imbalance traffic %% of paper 000, the local batch sizes, the modelled time.\n"
           "  --fig6         paper 000 Fig. 6: imbalance box statistics for B = 32/64/128, p = 4..256\n"
           "  --ablation     paper 002 ablation: regular, +lru, +belady, solar optimisations one at a time\n"
           "  --orders       epoch-order cost of the DP, the local search and PSO on one cost matrix\n"
           "  --box          imbalance box statistics of the plan's steps (epochs >= 1)\n"
           "  --counts       per-learner and per-node counts of each epoch (always with --ranks-per-node > 1):\n"
           "                 own cache, intra-node handoffs, inter-node peers, storage, admits, evicts, samples\n"
           "                 served to other nodes, inter-node bytes (with --sample-bytes)\n"
           "  --warm PATH    per epoch what a loader restarted on its cache_dir reads: the plan starts from\n"
           "                 the caches that survived (a cache folder or a listing, below; docs/plan.md)\n"
           "  --plot F.svg   draw storage reads per epoch by plan (or the --fig6/--ablation picture), gnuplot\n"
           "  --storage-rate R --peer-rate Rc --cache-rate X --train-rate V   samples/s for the time model\n"
           "                 (defaults 20000 aggregate, 5000, 50000, 400 per learner)\n\n");
    lade_tool_plan_help(" | all");
    return 0;
  }
  if (rc) return rc;
  if (o.nwarm && (o.fig6 || o.ablation || o.orders))
    return die("simulate", "--warm applies to the table of a plan (or --plan all), not to --fig6, --ablation or "
               "--orders%s", "");
  lade_tool_warm_t w = {0};
  if ((rc = lade_tool_warm_load("simulate", &o, &w))) return rc;
  const lade_tool_warm_t *warm = o.nwarm ? &w : NULL;
  if (o.shards) return lade_tool_simulate_shards(&o);
  if (o.fig6) return sim_fig6(&o);
  if (o.ablation) return sim_ablation(&o);
  if (o.orders) return sim_orders(&o);
  int k0 = o.all ? 0 : o.s.kind, k1 = o.all ? LADE_PLAN_KIND_COUNT : o.s.kind + 1;
  sbuf_t data = {0}, head = {0};
  lade_sim_epoch_t **all = calloc(LADE_PLAN_KIND_COUNT, sizeof *all);
  for (int k = k0; k < k1; k++) {
    lade_plan_settings_t s = o.s;
    s.kind = k;
    double *imb = NULL;
    all[k] = calloc(s.epochs ? s.epochs : 1, sizeof **all);
    if (o.box) {
      uint64_t G = (uint64_t)s.batch_size * s.learners;
      uint64_t steps = G ? (s.drop_last ? s.samples / G : (s.samples + G - 1) / G) : 0;
      imb = calloc(s.epochs * steps + 1, sizeof *imb);
    }
    if (!all[k] || sim_one(&s, &o.c, warm, all[k], imb)) {
      free(imb);
      rc = die("simulate", "%s", all[k] ? lade_tool_error() : "out of memory");
      goto out;
    }
    print_epochs(lade_plan_kind_name(k), &s, all[k], warm);
    if ((s.ranks_per_node > 1 || o.counts) && (rc = lade_tool_plan_counts(&s, warm, 0, stdout))) {
      free(imb);
      goto out;
    }
    if (o.box && s.epochs > 1) {
      uint64_t steps = all[k][0].steps;
      size_t n = (size_t)((s.epochs - 1) * steps);
      double *v = imb + steps;
      qsort(v, n, sizeof *v, cmp_d);
      printf("  imbalance %% over %zu steps of epochs >= 1: min %.2f q1 %.2f median %.2f q3 %.2f max %.2f\n", n,
             v[0], quant(v, n, .25), quant(v, n, .5), quant(v, n, .75), v[n - 1]);
    }
    free(imb);
  }
  if (o.plot) {
    for (uint64_t e = 0; e < o.s.epochs; e++) {
      lade_tool_sbuf_printf(&data, "%llu", (unsigned long long)e);
      for (int k = k0; k < k1; k++) lade_tool_sbuf_printf(&data, " %llu", (unsigned long long)all[k][e].from_storage);
      lade_tool_sbuf_printf(&data, "\n");
    }
    for (int k = k0; k < k1; k++)
      lade_tool_sbuf_printf(&head, "%s$d using 1:%d with linespoints lw 2 title '%s'", k > k0 ? ", " : "", k - k0 + 2,
         lade_plan_kind_name(k));
    sbuf_t sc = {0};
    lade_tool_sbuf_printf(&sc,
       "$d << EOD\n%sEOD\nset title 'Storage reads per epoch (N=%llu, p=%u, B=%u, cache=%llu)'\n"
       "set xlabel 'epoch'\nset ylabel 'samples read from storage'\nset grid\nset key outside right\n"
       "set xtics 1\nplot %s\n",
       data.p, (unsigned long long)o.s.samples, o.s.learners, o.s.batch_size, (unsigned long long)o.s.cache,
       head.p);
    rc = lade_tool_gnuplot("simulate", o.plot, sc.p);
    free(sc.p);
  }
out:
  lade_tool_warm_free(&w);
  for (int k = 0; k < LADE_PLAN_KIND_COUNT; k++) free(all[k]);
  free(all);
  free(data.p);
  free(head.p);
  return rc;
}
