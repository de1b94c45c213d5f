/*
 * plan_opts.c - the options `lade plan`, `lade simulate` and `lade model`
 * share (plan_opts.h): their defaults, their parsing and their help.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lade/lade.h"
#include "lade/plan.h"
#include "plan_cli.h"
#include "plan_opts.h"
#include "shown.h"

static int num_u64(const char *cmd, const char *flag, const char *v, uint64_t *out) {
  char *end;
  errno = 0;
  if (!v || !*v || *v == '-') return die(cmd, "%s needs a non-negative integer", flag);
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end) {
    fprintf(stderr, "lade %s: %s needs a non-negative integer, got '%s'\n", cmd, flag, v);
    return 2;
  }
  *out = x;
  return 0;
}

static int num_f(const char *cmd, const char *flag, const char *v, double *out) {
  char *end;
  if (!v || !*v) return die(cmd, "%s needs a number", flag);
  double x = strtod(v, &end);
  if (*end || !isfinite(x)) {
    fprintf(stderr, "lade %s: %s needs a number, got '%s'\n", cmd, flag, v);
    return 2;
  }
  *out = x;
  return 0;
}

void lade_tool_plan_defaults(opts_t *o) {
  memset(o, 0, sizeof *o);
  lade_plan_settings_default(&o->s, sizeof o->s);
  o->s.samples = 1281167;
  o->s.learners = 16;
  o->s.batch_size = 32;
  o->s.epochs = 5;
  /* simulator rates (samples/s): assumptions of an ImageNet/ResNet-50 cluster, see docs/model.md */
  o->c.storage_rate = 20000;
  o->c.peer_rate = 5000;
  o->c.cache_rate = 50000;
  o->c.train_rate = 400;
  o->m = (lade_model_params_t){1281167, 64, 400, 20000, 100000, 100000, 600, 1, -1};
  lade_model_nodes_default(&o->mn, sizeof o->mn);
  lade_cost_defaults(&o->k);
  o->pmax = 1024;
  o->mem_frac = 0.1;
  o->disk_frac = 0.4;
  o->model_parallel = 1;
  o->buffers[0] = 0;
  o->buffers[1] = 1000;
  o->buffers[2] = 10000;
  o->nbuffers = 3;
}

#define U64(flag, dst) else if (!strcmp(a, flag)) { if ((rc = num_u64(cmd, flag, v, &u))) return rc; dst = u; }
#define F64(flag, dst) else if (!strcmp(a, flag)) { if ((rc = num_f(cmd, flag, v, &d))) return rc; dst = d; }

/* The parse_* of a flag with a value a (its value v, NULL after the last
 * argument) return 0 when they took it, 2 (said) when v is wrong, -1 when a
 * is not theirs. */

/* What is planned: --plan, the shards order's flags, and the files. */
static int parse_plan(const char *cmd, const char *a, const char *v, opts_t *o) {
  uint64_t u;
  int rc;
  if (!strcmp(a, "--plan")) {
    if (!v) return die(cmd, "%s needs a plan name", a);
    if (!strcmp(v, "all")) o->all = 1;
    else {
      int k = lade_plan_kind_parse(v);
      if (k < 0) return die(cmd, "%s", lade_tool_error());
      if (k == LADE_PLAN_SHARDS) o->shards = 1; /* its own API, see plan_shards_cli.c */
      else o->s.kind = k;
    }
  }
  else if (!strcmp(a, "--shard-size") || !strcmp(a, "--shards") || !strcmp(a, "--devices-per-node") ||
           !strcmp(a, "--model-parallel")) {
    if ((rc = num_u64(cmd, a, v, &u))) return rc;
    if (u == 0 || u > 0xffffffffu) return die(cmd, "%s needs a positive integer below 2^32", a);
    if (!strcmp(a, "--shard-size")) o->shard_size = u;
    else if (!strcmp(a, "--shards")) o->nshards = u;
    else if (!strcmp(a, "--devices-per-node")) o->devices_per_node = u;
    else o->model_parallel = u;
  }
  else if (!strcmp(a, "--buffer")) { /* a comma-separated list */
    if (!v) return die(cmd, "%s needs buffer sizes, e.g. 0,1000,10000", a);
    o->nbuffers = 0;
    for (const char *c = v; *c;) {
      char *end;
      errno = 0;
      if (*c < '0' || *c > '9' || o->nbuffers == 16)
        return die(cmd, "--buffer takes up to 16 non-negative integers separated by commas, got '%s'", v);
      unsigned long long x = strtoull(c, &end, 10);
      if (errno || (*end && *end != ','))
        return die(cmd, "--buffer takes up to 16 non-negative integers separated by commas, got '%s'", v);
      o->buffers[o->nbuffers++] = x;
      c = *end ? end + 1 : end;
      if (*end && !*c) return die(cmd, "--buffer: trailing comma in '%s'", v);
    }
  }
  else if (!strcmp(a, "--warm")) {
    if (!v) return die(cmd, "%s needs a cache folder or a listing (see --help)", a);
    if (o->nwarm == WARM_MAX)
      return die(cmd, "--warm: at most 256 of them; a listing of LEARNER SAMPLE lines names any number of learners%s",
                 "");
    o->warm[o->nwarm++] = v;
  }
  else if (!strcmp(a, "--out")) { if (!v) return die(cmd, "%s needs a file", a); o->out = v; }
  else if (!strcmp(a, "--in")) { if (!v) return die(cmd, "%s needs a file", a); o->in = v; }
  else if (!strcmp(a, "--plot")) { if (!v) return die(cmd, "%s needs a file", a); o->plot = v; }
  else if (!strcmp(a, "--calibrate")) { if (!v) return die(cmd, "%s needs a dataset folder", a); o->calibrate = v; }
  else return -1;
  return 0;
}

/* The plan's settings (lade_plan_settings_t). */
static int parse_settings(const char *cmd, const char *a, const char *v, opts_t *o) {
  uint64_t u;
  int rc;
  if (!strcmp(a, "--learners")) {
    if ((rc = num_u64(cmd, a, v, &u))) return rc;
    if (u > 0xffffff) return die(cmd, "--learners %s is too many", v);
    o->s.learners = (uint32_t)u;
    o->m.p = (double)u;
  }
  else if (!strcmp(a, "--batch-size")) {
    if ((rc = num_u64(cmd, a, v, &u))) return rc;
    if (u > 1u << 24) return die(cmd, "--batch-size %s is too large", v);
    o->s.batch_size = (uint32_t)u;
  }
  else if (!strcmp(a, "--ranks-per-node")) {
    if ((rc = num_u64(cmd, a, v, &u))) return rc;
    if (u == 0 || u > 0xffffff) return die(cmd, "--ranks-per-node needs a positive integer, got '%s'", v);
    o->s.ranks_per_node = (uint32_t)u;
    o->mn.r = (double)u;
    o->have_rpn = 1;
  }
  U64("--samples", o->s.samples)
  U64("--epochs", o->s.epochs)
  U64("--cache", o->s.cache)
  U64("--cache-bytes", o->s.cache_bytes)
  U64("--cache-disk", o->s.cache_disk)
  U64("--sample-bytes", o->s.sample_bytes)
  U64("--seed", o->s.seed)
  U64("--imbalance", o->s.imbalance)
  else if (!strcmp(a, "--resume")) { /* EPOCH:CONSUMED[:SHUFFLE_EPOCH] */
    unsigned long long e = 0, c = 0, se = 0;
    int nf = 0, len = 0;
    if (v) nf = sscanf(v, "%llu:%llu%n:%llu%n", &e, &c, &len, &se, &len);
    if (!v || nf < 2 || v[len] || strchr(v, '-'))
      return die(cmd, "--resume takes EPOCH:CONSUMED[:SHUFFLE_EPOCH] (non-negative integers), got '%s'", v ? v : "");
    o->s.resume = 1;
    o->s.resume_epoch = e;
    o->s.resume_consumed = c;
    o->s.resume_shuffle_epoch = nf == 3 ? se : e;
  }
  else if (!strcmp(a, "--balance")) {
    if (!v || (strcmp(v, "peer") && strcmp(v, "storage"))) return die(cmd, "--balance takes peer or storage", "");
    o->s.balance_peer = !strcmp(v, "peer");
  }
  else if (!strcmp(a, "--order")) {
    const char *names[] = {"auto", "dp", "local", "pso"};
    int k = -1;
    for (int j = 0; j < 4; j++)
      if (v && !strcmp(v, names[j])) k = j;
    if (k < 0) return die(cmd, "--order takes auto, dp, local or pso", "");
    o->s.order_algo = k;
  }
  else return -1;
  return 0;
}

/* The numbers of the simulator's time model, the analytical models and the
 * cost model. */
static int parse_rates(const char *cmd, const char *a, const char *v, opts_t *o) {
  double d;
  int rc;
  if (!strcmp(a, "--gamma")) {
    if ((rc = num_f(cmd, a, v, &o->mn.gamma))) return rc;
    o->have_gamma = 1;
  }
  else if (!strcmp(a, "--beta")) {
    if ((rc = num_f(cmd, a, v, &o->m.beta))) return rc;
    o->have_beta = 1;
  }
  F64("--R-intra", o->mn.R_intra)
  F64("--R-disk", o->mn.R_disk)
  F64("--mem-frac", o->mem_frac)
  F64("--disk-frac", o->disk_frac)
  F64("--R-inter", o->mn.R_inter)
  F64("--storage-rate", o->c.storage_rate)
  F64("--peer-rate", o->c.peer_rate)
  F64("--cache-rate", o->c.cache_rate)
  F64("--train-rate", o->c.train_rate)
  F64("--D", o->m.D)
  F64("--p", o->m.p)
  F64("--V", o->m.V)
  F64("--R", o->m.R)
  F64("--Rc", o->m.Rc)
  F64("--Rb", o->m.Rb)
  F64("--U", o->m.U)
  F64("--alpha", o->m.alpha)
  F64("--pmax", o->pmax)
  F64("--nodes", o->k.nodes)
  F64("--compute-s", o->k.compute_s)
  F64("--load-s", o->k.load_s)
  F64("--vm-hour", o->k.vm_hour)
  F64("--disk-gb-month", o->k.disk_gb_month)
  F64("--os-gb", o->k.os_gb)
  F64("--cache-gb", o->k.cache_gb)
  F64("--bucket-gb-month", o->k.bucket_gb_month)
  F64("--dataset-gb", o->k.dataset_gb)
  F64("--class-a", o->k.class_a)
  F64("--class-b", o->k.class_b)
  F64("--page", o->k.page)
  F64("--fetch", o->k.fetch)
  F64("--miss-rate", o->k.miss_rate)
  else return -1;
  return 0;
}

#undef U64
#undef F64

/* A flag without a value: 1 when a is one. */
static int parse_switch(const char *a, opts_t *o) {
  if (!strcmp(a, "--dump")) o->dump = 1;
  else if (!strcmp(a, "--time")) o->timeit = 1;
  else if (!strcmp(a, "--no-drop-last")) o->s.drop_last = 0;
  else if (!strcmp(a, "--no-reorder")) o->s.reorder = 0;
  else if (!strcmp(a, "--no-coalesce")) o->s.coalesce = 0;
  else if (!strcmp(a, "--fig6")) o->fig6 = 1;
  else if (!strcmp(a, "--ablation")) o->ablation = 1;
  else if (!strcmp(a, "--orders")) o->orders = 1;
  else if (!strcmp(a, "--box")) o->box = 1;
  else if (!strcmp(a, "--sweep")) o->sweep = 1;
  else if (!strcmp(a, "--cost")) o->cost = 1;
  else if (!strcmp(a, "--counts")) o->counts = 1;
  else if (!strcmp(a, "--tiers")) o->tiers = 1;
  else return 0;
  return 1;
}

int lade_tool_plan_parse(const char *cmd, int argc, char **argv, opts_t *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
    int rc = parse_plan(cmd, a, v, o);
    if (rc < 0) rc = parse_settings(cmd, a, v, o);
    if (rc < 0) rc = parse_rates(cmd, a, v, o);
    if (rc > 0) return rc;
    if (rc == 0) i++; /* its value */
    else if (!parse_switch(a, o)) return die(cmd, "unknown option '%s' (see --help)", a);
  }
  return 0;
}

int lade_tool_warm_load(const char *cmd, const opts_t *o, lade_tool_warm_t *w) {
  if (!o->nwarm) return 0;
  if (o->shards) return die(cmd, "--warm: the shards order keeps no caches%s", "");
  if (o->s.cache_disk) /* docs/plan.md "Warm restarts": the loader's two tiers start empty */
    return die(cmd, "--warm: a plan with two tiers (--cache-disk) starts with empty caches in the loader%s", "");
  for (int k = 0; k < o->nwarm; k++) {
    int rc = lade_tool_warm_add(cmd, o->warm[k], (uint32_t)k, o->s.samples, o->s.learners, w);
    if (rc) return rc;
  }
  return 0;
}

const char *lade_tool_plan_names(const char *sep) {
  static char buf[256];
  size_t n = 0;
  buf[0] = '\0';
  for (int k = 0; k <= LADE_PLAN_SHARDS && n < sizeof buf; k++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", k ? sep : "", lade_plan_kind_name(k));
  return buf;
}

/* printf'd with the plan names (lade_tool_plan_names) and a suffix */
static const char *common_help =
    "  --plan NAME        %s%s\n"
    "  --samples N        dataset size (default 1281167)\n"
    "  --learners P       learners (default 16)\n"
    "  --batch-size B     local batch per learner (default 32); global batch B*P\n"
    "  --epochs E         epochs (default 5)\n"
    "  --cache C          cache per learner (per node with --ranks-per-node > 1), in samples (default 0)\n"
    "  --cache-disk D     solar: a disk tier of D samples per learner (node) under the memory cache (default 0)\n"
    "  --ranks-per-node r distcache, locality, solar: nodes of r consecutive learners share one cache\n"
    "                     (default 1); peers are other nodes, a sample another rank of the node holds\n"
    "                     is an intra-node handoff (docs/plan.md, Nodes)\n"
    "  --cache-bytes X --sample-bytes S   cache given in bytes (uniform sample size)\n"
    "  --seed S           shuffle seed (default 0)\n"
    "  --no-drop-last     pad the last global batch cyclically instead of dropping it\n"
    "  --balance peer|storage   locality: balancing by peer sends (default) or storage reloads\n"
    "  --no-reorder       solar: keep the epoch order\n"
    "  --order auto|dp|local|pso   solar: epoch-order solver (default auto: DP up to 16 epochs)\n"
    "  --imbalance K      solar: local batch sizes may differ by up to K (default 0)\n"
    "  --no-coalesce      solar: do not coalesce adjacent storage reads\n"
    "  --resume E:C[:S]   start inside epoch E with empty caches, its first C positions trained on before\n"
    "                     (shuffle epoch S, default E), e.g. at another world size (docs/plan.md \"Resume\")\n"
    "  --warm PATH        start from caches that survived, as a loader restarted on its cache_dir does\n"
    "                     (docs/plan.md \"Warm restarts\"); the k-th --warm is learner k's: a loader's\n"
    "                     cache folder (its cache_dir, or the dataset's folder in it) or a listing, one\n"
    "                     cached sample a line: SAMPLE, or LEARNER SAMPLE to name the learner (# comments)\n"
    "  --plan shards      paper 001 shard streaming (docs/plan.md), with:\n"
    "    --shard-size K | --shards S   shards of K samples (default 1000) or S shards of equal size\n"
    "    --buffer b[,b..]  shuffle buffer sizes (plan: the first; simulate: each, default 0,1000,10000)\n"
    "    --model-parallel M   consecutive ranks per model-parallel group (default 1): --learners is the\n"
    "                      world size, D = P / M data-parallel groups\n"
    "    --devices-per-node n   devices per node (default: all on one node), for the rank table\n";

void lade_tool_plan_help(const char *all_suffix) { printf(common_help, lade_tool_plan_names(" | "), all_suffix); }
