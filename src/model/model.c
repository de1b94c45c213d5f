/*
 * model.c - closed-form models: the per-epoch time model of Accelerating Data
 * Loading (paper 000, docs/references.md), eqs. (1)-(8) (regular loading,
 * distributed caching, locality-aware loading) and the cloud cost model of
 * DELI (paper 004) section III-C. The DELI PDF text lost its formulas; the
 * form used here is reconstructed from its prose: VM hours for
 * compute + loading time, node disks (OS + cache) for the run's duration,
 * bucket storage, and Class A (list) + Class B (get) requests per epoch, the
 * list count multiplied by the number of prefetches when a prefetcher lists
 * the bucket on each fetch. The node model (lade_model_nodes_eval) splits
 * paper 000's remote-cache term of eqs. (7)-(8) into handoffs inside a node
 * and transfers between nodes, each at its own rate.
 */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "lade/plan.h"

static double dmax(double a, double b) { return a > b ? a : b; }

void lade_model_eval(const lade_model_params_t *m, lade_model_result_t *r) {
  memset(r, 0, sizeof *r);
  double D = m->D, p = m->p;
  r->train = D / (p * m->V);                                     /* (1) */
  r->io_regular = D / m->R;                                      /* (2) */
  r->preprocess = m->U > 0 ? D / (p * m->U) : 0;                 /* (3) */
  r->loading_regular = r->io_regular + r->preprocess;            /* (4) */
  r->crossover_p = m->R / m->V;                                  /* (5) */
  r->true_regular = p <= r->crossover_p ? r->train : r->io_regular; /* (6) */
  r->io_distcache = (1 - m->alpha) * D / m->R + m->alpha * D / m->Rc * (p - 1) / p; /* (7) */
  double beta = m->beta < 0 ? 0 : m->beta;
  r->io_locality = (1 - m->alpha) * D / m->R + m->alpha * D / m->Rb * beta;          /* (8) */
  r->epoch_regular = dmax(r->train, r->loading_regular);
  r->epoch_distcache = dmax(r->train, r->io_distcache + r->preprocess);
  r->epoch_locality = dmax(r->train, r->io_locality + r->preprocess);
}

void lade_model_nodes_default(lade_model_nodes_t *n, size_t size) {
  lade_model_nodes_t d = {.r = 8, .R_intra = 200000, .R_inter = 12500, .beta = -1, .gamma = -1,
                          .R_disk = 20000, .h_mem = -1, .h_disk = -1, .w_disk = -1};
  lade__struct_out(n, size, &d, sizeof d);
}

int lade_model_nodes_eval(const lade_model_params_t *m, const lade_model_nodes_t *in, size_t in_size,
                          lade_model_nodes_result_t *out, size_t out_size) {
  if (!m || !in || !out || out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_model_nodes_eval: NULL argument or out_size %zu below 8", out_size);
  lade_model_nodes_t nd;
  lade_model_nodes_default(&nd, sizeof nd);
  int rc = lade__struct_in(&nd, sizeof nd, in, in_size, sizeof(uint64_t), "lade_model_nodes_eval");
  if (rc) return rc;
  double p = m->p, r = nd.r;
  if (!(r >= 1) || !(p >= r) || fmod(p, r) != 0)
    return lade__fail(LADE_EINVAL, "lade_model_nodes_eval: ranks per node r = %g must be >= 1 and divide p = %g", r, p);
  if (!(nd.R_intra > 0) || !(nd.R_inter > 0) || !(nd.R_disk > 0) || !(m->R > 0))
    return lade__fail(LADE_EINVAL, "lade_model_nodes_eval: the rates R, R_intra, R_inter and R_disk must be positive");
  lade_model_result_t base;
  lade_model_eval(m, &base);
  lade_model_nodes_result_t x;
  memset(&x, 0, sizeof x);
  double D = m->D, a = m->alpha, n = p / r;
  x.nodes = n;
  double storage = (1 - a) * D / m->R;
  x.intra_distcache = a * D * (r - 1) / p / (n * nd.R_intra);
  x.inter_distcache = a * D * (n - 1) / n / (n * nd.R_inter);
  x.io_distcache = storage + x.intra_distcache + x.inter_distcache;
  double beta = nd.beta < 0 ? 0 : nd.beta, gamma = nd.gamma < 0 ? 0 : nd.gamma;
  x.io_locality = storage + gamma * D / (n * nd.R_intra) + beta * D / (n * nd.R_inter);
  x.epoch_distcache = dmax(base.train, x.io_distcache + base.preprocess);
  x.epoch_locality = dmax(base.train, x.io_locality + base.preprocess);
  double hm = nd.h_mem < 0 ? 0 : nd.h_mem, hd = nd.h_disk < 0 ? 0 : nd.h_disk, wd = nd.w_disk < 0 ? 0 : nd.w_disk;
  x.io_tiers = dmax(0, 1 - hm - hd) * D / m->R + hm * D / (n * nd.R_intra) + (hd + wd) * D / (n * nd.R_disk);
  x.epoch_tiers = dmax(base.train, x.io_tiers + base.preprocess);
  lade__struct_out(out, out_size, &x, sizeof x);
  return 0;
}

/* Defaults: Google Cloud list prices as quoted by DELI (Class A $0.05 and
 * Class B $0.002 per 10,000 requests) and GCP's 2021 list prices for an
 * n1-standard-8 + one V100 ($2.95/h), pd-standard disk ($0.04/GB-month) and
 * Standard bucket storage ($0.020/GB-month); a two-epoch CIFAR-10-sized run. */
void lade_cost_defaults(lade_cost_params_t *c) {
  memset(c, 0, sizeof *c);
  c->nodes = 3;
  c->epochs = 2;
  c->samples = 50000;
  c->compute_s = 300;
  c->load_s = 60;
  c->vm_hour = 2.95;
  c->disk_gb_month = 0.04;
  c->os_gb = 10;
  c->cache_gb = 0.2;
  c->bucket_gb_month = 0.020;
  c->dataset_gb = 0.17;
  c->class_a = 0.05 / 10000;
  c->class_b = 0.002 / 10000;
  c->page = 1000;
  c->fetch = 1024;
  c->miss_rate = 1;
}

void lade_cost_eval(const lade_cost_params_t *c, lade_cost_result_t *r) {
  memset(r, 0, sizeof *r);
  r->hours = c->epochs * (c->compute_s + c->load_s) / 3600.0;
  double months = r->hours / (24.0 * 30.0);
  r->vm = c->nodes * r->hours * c->vm_hour;
  r->disk = c->nodes * (c->os_gb + c->cache_gb) * c->disk_gb_month * months;
  r->bucket = c->dataset_gb * c->bucket_gb_month * months;
  double lists = c->page > 0 ? ceil(c->samples / c->page) : 0;
  if (c->fetch > 0) lists *= ceil(c->samples / c->fetch);
  double gets = c->samples * c->miss_rate;
  r->requests = c->epochs * (lists * c->class_a + gets * c->class_b);
  r->total = r->vm + r->disk + r->bucket + r->requests;
}
