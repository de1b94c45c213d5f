/*
 * plan_model.c - `lade model`: the analytical models of lade/plan.h from
 * the command line: paper 000's per-epoch model (one line, or a sweep over
 * the learners with a gnuplot picture), its node model (--ranks-per-node)
 * and two tiers (--tiers), with the balancing traffic measured by the
 * simulator; paper 004's cloud cost (--cost); U and R measured on this
 * machine (--calibrate, model_calibrate.c). Public headers only.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lade/lade.h"
#include "lade/plan.h"
#include "plan_cli.h"
#include "plan_opts.h"
#include "shown.h"

int lade_tool_model_calibrate(const char *dir, double *U, double *R); /* model_calibrate.c */

/* beta (balancing traffic / dataset) measured with the locality plan. */
static double sim_beta(const opts_t *o, double p) {
  lade_plan_settings_t s = o->s;
  s.kind = LADE_PLAN_LOCALITY;
  s.learners = (uint32_t)p;
  s.ranks_per_node = 1; /* paper 000: every learner its own node */
  uint64_t G = (uint64_t)s.batch_size * s.learners;
  s.samples = (uint64_t)o->m.D;
  if (s.samples > 200 * G) s.samples = 200 * G;
  if (s.samples < G) s.samples = G;
  s.cache = (s.samples + s.learners - 1) / s.learners;
  s.epochs = 2;
  lade_sim_epoch_t ep[2];
  if (lade_simulate(&s, sizeof s, NULL, ep, sizeof *ep, NULL)) return -1;
  return (double)ep[1].from_peer / (double)(ep[1].steps * G);
}

/* The node model's beta (inter-node balancing / samples) and gamma
 * (intra-node handoffs / samples), measured with the node-aware locality
 * plan, whole dataset cached, as sim_beta. */
static int sim_nodes(const opts_t *o, double p, double r, double *beta, double *gamma) {
  lade_plan_settings_t s = o->s;
  s.kind = LADE_PLAN_LOCALITY;
  s.learners = (uint32_t)p;
  s.ranks_per_node = (uint32_t)r;
  uint64_t G = (uint64_t)s.batch_size * s.learners, n = s.learners / s.ranks_per_node;
  s.samples = (uint64_t)o->m.D;
  if (s.samples > 200 * G) s.samples = 200 * G;
  if (s.samples < G) s.samples = G;
  s.cache = (s.samples + n - 1) / n;
  s.epochs = 2;
  lade_sim_epoch_t ep[2];
  if (lade_simulate(&s, sizeof s, NULL, ep, sizeof *ep, NULL)) return -1;
  *beta = (double)ep[1].from_peer / (double)(ep[1].steps * G);
  *gamma = (double)ep[1].from_node / (double)(ep[1].steps * G);
  return 0;
}

/* lade model --tiers: the solar plan with the memory tier alone and with a
 * disk tier under it, its reads and writes per tier measured with the
 * simulator (steady epochs 1-2 of 4), evaluated with the node model. */
static int model_tiers(opts_t *o, const lade_model_params_t *m) {
  lade_model_nodes_t nd = o->mn;
  if (!(nd.r >= 1) || !(m->p >= nd.r) || fmod(m->p, nd.r) != 0)
    return die("model", "--ranks-per-node must divide --p%s", "");
  if (o->mem_frac < 0 || o->disk_frac < 0 || o->mem_frac + o->disk_frac > 1)
    return die("model", "--mem-frac and --disk-frac are shares of the dataset, together at most 1%s", "");
  lade_plan_settings_t s = o->s;
  s.kind = LADE_PLAN_SOLAR;
  s.learners = (uint32_t)m->p;
  s.ranks_per_node = (uint32_t)nd.r;
  uint64_t G = (uint64_t)s.batch_size * s.learners, n = s.learners / s.ranks_per_node;
  s.samples = (uint64_t)m->D;
  if (s.samples > 100 * G) s.samples = 100 * G;
  if (s.samples < G) s.samples = G;
  s.epochs = 4;
  printf("two tiers (solar, %llu samples, p=%u, r=%u): memory %.3f and disk %.3f of the dataset, R_intra=%g "
         "R_disk=%g R=%g samples/s\n", (unsigned long long)s.samples, s.learners, s.ranks_per_node, o->mem_frac,
         o->disk_frac, nd.R_intra, nd.R_disk, m->R);
  printf("  %-14s %9s %9s %9s %9s %12s %12s\n", "tiers", "h_mem", "h_disk", "w_disk", "storage", "I/O s", "epoch s");
  for (int two = 0; two < 2; two++) {
    s.cache = (uint64_t)(o->mem_frac * (double)s.samples / (double)n);
    s.cache_disk = two ? (uint64_t)(o->disk_frac * (double)s.samples / (double)n) : 0;
    if (two && !s.cache_disk) break;
    lade_sim_epoch_t ep[4];
    if (lade_simulate(&s, sizeof s, NULL, ep, sizeof ep[0], NULL)) return die("model", "%s", lade_tool_error());
    double tot = 0, hm = 0, hd = 0, wd = 0;
    for (int e = 1; e <= 2; e++) {
      uint64_t cached = ep[e].from_cache + ep[e].from_node + ep[e].from_peer;
      tot += (double)(ep[e].steps * G);
      hm += (double)(cached - ep[e].from_disk);
      hd += (double)ep[e].from_disk;
      wd += (double)(ep[e].admits_disk + ep[e].moves_down);
    }
    nd.h_mem = hm / tot;
    nd.h_disk = hd / tot;
    nd.w_disk = wd / tot;
    lade_model_nodes_result_t x;
    if (lade_model_nodes_eval(m, &nd, sizeof nd, &x, sizeof x)) return die("model", "%s", lade_tool_error());
    printf("  %-14s %9.4f %9.4f %9.4f %9.4f %12.2f %12.2f\n", two ? "memory + disk" : "memory", nd.h_mem, nd.h_disk,
           nd.w_disk, 1 - nd.h_mem - nd.h_disk, x.io_tiers, x.epoch_tiers);
  }
  return 0;
}

/* lade model --ranks-per-node r: the node model beside paper 000's. */
static int model_nodes(opts_t *o, const lade_model_params_t *m) {
  lade_model_nodes_t nd = o->mn;
  int measured = 0;
  if (!o->have_beta || !o->have_gamma) {
    double b = 0, g = 0;
    if (o->s.batch_size && m->p >= nd.r && fmod(m->p, nd.r) == 0 && sim_nodes(o, m->p, nd.r, &b, &g) == 0) {
      if (!o->have_beta) nd.beta = b;
      if (!o->have_gamma) nd.gamma = g;
      measured = 1;
    }
  }
  if (o->have_beta) nd.beta = m->beta;
  lade_model_nodes_result_t x;
  if (lade_model_nodes_eval(m, &nd, sizeof nd, &x, sizeof x)) return die("model", "%s", lade_tool_error());
  printf("nodes: r=%g ranks per node, n=%g nodes, R_intra=%g R_inter=%g samples/s per node, beta=%.4f gamma=%.4f%s\n",
         nd.r, x.nodes, nd.R_intra, nd.R_inter, nd.beta, nd.gamma, measured ? " (simulated)" : "");
  printf("  I/O, distributed cache  %12.2f s  (intra-node %.2f s, inter-node %.2f s)\n", x.io_distcache,
         x.intra_distcache, x.inter_distcache);
  printf("  I/O, locality-aware     %12.2f s\n", x.io_locality);
  printf("  epoch time max(train, I/O+prep): distcache %.2f s, locality %.2f s\n", x.epoch_distcache,
         x.epoch_locality);
  return 0;
}

int lade_tool_model(int argc, char **argv) {
  opts_t o;
  lade_tool_plan_defaults(&o);
  int rc = lade_tool_plan_parse("model", argc, argv, &o);
  if (rc == 1) {
    printf("usage: lade model [--D N] [--p P] [--V V] [--R R] [--Rc Rc] [--Rb Rb] [--U U] [--alpha A] [--beta B]\n"
           "                  [--batch-size B] [--sweep [--pmax P]] [--plot FILE.svg]\n"
           "       lade model --cost [--nodes n --epochs E --samples N --compute-s T --load-s T --miss-rate m\n"
           "                  --vm-hour $ --disk-gb-month $ --os-gb G --cache-gb G --bucket-gb-month $\n"
           "                  --dataset-gb G --class-a $ --class-b $ --page n --fetch n]\n"
           "       lade model --calibrate DIR   measure U and R on this machine with the real loader\n"
           "Paper 000's per-epoch model, eqs. (1)-(8): D samples, p learners, V training and U preprocessing\n"
           "rates per learner, R storage, Rc remote-cache and Rb balancing rates (aggregate, samples/s),\n"
           "alpha the cached fraction, beta the balancing traffic / dataset (default: measured with the\n"
           "locality simulator at --batch-size, default 32). Prints the crossover p = R/V.\n"
           "Defaults: D=1281167 p=64 V=400 R=20000 Rc=Rb=100000 U=600 alpha=1 (see docs/model.md).\n"
           "--cost: paper 004's cloud cost (defaults: GCP prices, docs/model.md).\n"
           "--ranks-per-node r [--R-intra X] [--R-inter Y] [--gamma G]: the same with nodes of r learners\n"
           "sharing one cache: intra-node handoffs at X and transfers between nodes at Y samples/s per node\n"
           "(defaults 200000 and 12500); beta (between nodes) and gamma (handoffs) / dataset measured with\n"
           "the node-aware locality simulator unless given (docs/model.md, Nodes).\n"
           "--tiers --mem-frac A --disk-frac B [--R-disk X] [--ranks-per-node r]: solar with a memory tier of A\n"
           "and a disk tier of B of the dataset (over all nodes), reads and writes per tier simulated, disk at\n"
           "X samples/s per node (default 20000): the epoch time with memory alone and with both.\n");
    return 0;
  }
  if (rc) return rc;
  if (o.calibrate) {
    double U = 0, R = 0;
    int crc = lade_tool_model_calibrate(o.calibrate, &U, &R);
    if (crc) {
      const char *e = lade_tool_error();
      fprintf(stderr, "lade model: --calibrate %s: %s\n", o.calibrate, e && *e ? e : lade_strerror(crc));
      return 1;
    }
    printf("calibrated on %s: U = %.1f samples/s per learner (preprocessing), R = %.1f samples/s (storage reads)\n",
           o.calibrate, U, R);
    o.m.U = U;
    o.m.R = R;
  }
  if (o.cost) {
    lade_cost_result_t r;
    lade_cost_eval(&o.k, &r);
    printf("paper 004 cost model: %g nodes, %g epochs of %g samples, %.0f s compute + %.0f s loading per epoch,\n"
           "miss rate %.2f, fetch %g, page %g\n",
           o.k.nodes, o.k.epochs, o.k.samples, o.k.compute_s, o.k.load_s, o.k.miss_rate, o.k.fetch, o.k.page);
    printf("  hours %.3f  VMs $%.4f  disks $%.4f  bucket $%.4f  requests $%.4f  total $%.4f\n", r.hours, r.vm, r.disk,
           r.bucket, r.requests, r.total);
    return 0;
  }
  if (o.s.batch_size == 0) return die("model", "--batch-size must be positive%s", "");
  if (o.m.p < 1 || o.m.V <= 0 || o.m.R <= 0 || o.m.Rc <= 0 || o.m.Rb <= 0 || o.m.D <= 0)
    return die("model", "D, p, V, R, Rc and Rb must be positive%s", "");
  if (!o.sweep && !o.plot) {
    lade_model_params_t m = o.m;
    if (!o.have_beta) m.beta = sim_beta(&o, m.p);
    lade_model_result_t r;
    lade_model_eval(&m, &r);
    printf("paper 000 model: D=%g p=%g V=%g R=%g Rc=%g Rb=%g U=%g alpha=%g beta=%.4f%s\n", m.D, m.p, m.V, m.R, m.Rc,
           m.Rb, m.U, m.alpha, m.beta, o.have_beta ? "" : " (simulated)");
    printf("  (1) training time        D/(pV)   %12.2f s\n", r.train);
    printf("  (2) sample I/O time      D/R      %12.2f s\n", r.io_regular);
    printf("  (3) preprocessing        D/(pU)   %12.2f s\n", r.preprocess);
    printf("  (4) data loading         (2)+(3)  %12.2f s\n", r.loading_regular);
    printf("  (5) crossover            p = R/V  %12.2f learners\n", r.crossover_p);
    printf("  (6) true cost, regular            %12.2f s\n", r.true_regular);
    printf("  (7) I/O, distributed cache        %12.2f s\n", r.io_distcache);
    printf("  (8) I/O, locality-aware           %12.2f s\n", r.io_locality);
    printf("  epoch time max(train, I/O+prep): regular %.2f s, distcache %.2f s, locality %.2f s\n", r.epoch_regular,
           r.epoch_distcache, r.epoch_locality);
    if (o.tiers) return model_tiers(&o, &m);
    if (o.have_rpn) return model_nodes(&o, &m);
    return 0;
  }
  sbuf_t data = {0};
  printf("  %6s %8s %12s %12s %12s %12s\n", "p", "beta", "train", "regular", "distcache", "locality");
  for (double p = 1; p <= o.pmax; p *= 2) {
    lade_model_params_t m = o.m;
    m.p = p;
    if (!o.have_beta) m.beta = p > 1 ? sim_beta(&o, p) : 0;
    lade_model_result_t r;
    lade_model_eval(&m, &r);
    printf("  %6g %8.4f %12.2f %12.2f %12.2f %12.2f\n", p, m.beta, r.train, r.epoch_regular, r.epoch_distcache,
           r.epoch_locality);
    lade_tool_sbuf_printf(&data, "%g %g %g %g %g\n", p, r.train, r.epoch_regular, r.epoch_distcache, r.epoch_locality);
  }
  printf("  crossover p = R/V = %.2f\n", o.m.R / o.m.V);
  if (o.plot) {
    sbuf_t sc = {0};
    lade_tool_sbuf_printf(&sc,
       "$d << EOD\n%sEOD\nset title 'Modelled epoch time (paper 000 eqs. 1-8), R/V = %.0f'\nset logscale xy\n"
       "set xlabel 'learners p'\nset ylabel 'seconds per epoch'\nset grid\nset arrow from %g, graph 0 to %g, "
       "graph 1 nohead dt 2\nplot $d using 1:2 with lines dt 3 title 'training D/(pV)', "
       "$d using 1:3 with linespoints lw 2 title 'regular', $d using 1:4 with linespoints lw 2 title 'distributed cache', "
       "$d using 1:5 with linespoints lw 2 title 'locality-aware'\n",
       data.p, o.m.R / o.m.V, o.m.R / o.m.V, o.m.R / o.m.V);
    rc = lade_tool_gnuplot("model", o.plot, sc.p);
    free(sc.p);
  }
  free(data.p);
  return rc;
}
