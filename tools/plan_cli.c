/*
 * plan_cli.c - `lade plan`, `lade simulate` and `lade model`: the planner,
 * simulator and analytical models (lade/plan.h) from the command line, plus
 * the paper reproductions (--fig6, --ablation, --orders) and gnuplot pictures,
 * and the shards order of Parax data loading (paper 001; --plan shards: its
 * batches and its shuffle quality; not a plan kind, see docs/plan.md).
 * Public headers only. Plots are drawn by gnuplot (Debian: gnuplot-nox) fed
 * through a pipe; when it is missing the numbers are still printed and the
 * command says so and exits 1.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lade/lade.h"
#include "lade/plan.h"
#include "plan_cli.h"
#include "shown.h"

int lade_tool_model_calibrate(const char *dir, double *U, double *R); /* model_calibrate.c */

typedef struct opts {
  lade_plan_settings_t s;
  int tiers;
  int all, dump, timeit, fig6, ablation, orders, box, sweep, cost, have_beta;
  const char *out, *in, *plot, *calibrate;
  lade_sim_costs_t c;
  lade_model_params_t m;
  lade_model_nodes_t mn;
  int counts, have_gamma, have_rpn;
  double mem_frac, disk_frac; /* lade model --tiers: the memory and disk tiers' share of the dataset */
  lade_cost_params_t k;
  double pmax;
  /* --plan shards (not a lade_plan_kind_t, see shards_*) */
  int shards;
  uint64_t shard_size, nshards, model_parallel, devices_per_node;
  uint64_t buffers[16];
  int nbuffers;
} opts_t;

static int die(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "lade %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  return 2;
}

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

static void defaults(opts_t *o) {
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

/* Parses the flags every subcommand shares; returns 0, 1 for --help, or 2. */
static int parse(const char *cmd, int argc, char **argv, opts_t *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t u;
    double d;
    int rc = 0, used = 1;
#define U64(flag, dst) else if (!strcmp(a, flag)) { if ((rc = num_u64(cmd, flag, v, &u))) return rc; dst = u; }
#define F64(flag, dst) else if (!strcmp(a, flag)) { if ((rc = num_f(cmd, flag, v, &d))) return rc; dst = d; }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
    else if (!strcmp(a, "--plan")) {
      if (!v) return die(cmd, "%s needs a plan name", a);
      if (!strcmp(v, "all")) o->all = 1;
      else {
        int k = lade_plan_kind_parse(v);
        if (k < 0) return die(cmd, "%s", lade_tool_error());
        if (k == LADE_PLAN_SHARDS) o->shards = 1; /* its own API, see shards_* */
        else o->s.kind = k;
      }
    }
    U64("--samples", o->s.samples)
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
    else if (!strcmp(a, "--learners")) {
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
    F64("--R-intra", o->mn.R_intra)
    F64("--R-disk", o->mn.R_disk)
    F64("--mem-frac", o->mem_frac)
    F64("--disk-frac", o->disk_frac)
    F64("--R-inter", o->mn.R_inter)
    else if (!strcmp(a, "--gamma")) {
      if ((rc = num_f(cmd, a, v, &o->mn.gamma))) return rc;
      o->have_gamma = 1;
    }
    U64("--epochs", o->s.epochs)
    U64("--cache", o->s.cache)
    U64("--cache-bytes", o->s.cache_bytes)
    U64("--cache-disk", o->s.cache_disk)
    U64("--sample-bytes", o->s.sample_bytes)
    U64("--seed", o->s.seed)
    U64("--imbalance", o->s.imbalance)
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
    else if (!strcmp(a, "--beta")) {
      if ((rc = num_f(cmd, a, v, &o->m.beta))) return rc;
      o->have_beta = 1;
    }
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
    else if (!strcmp(a, "--out")) { if (!v) return die(cmd, "%s needs a file", a); o->out = v; }
    else if (!strcmp(a, "--in")) { if (!v) return die(cmd, "%s needs a file", a); o->in = v; }
    else if (!strcmp(a, "--plot")) { if (!v) return die(cmd, "%s needs a file", a); o->plot = v; }
    else if (!strcmp(a, "--calibrate")) { if (!v) return die(cmd, "%s needs a dataset folder", a); o->calibrate = v; }
    else {
      used = 0;
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
      else return die(cmd, "unknown option '%s' (see --help)", a);
    }
    i += used;
#undef U64
#undef F64
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
    "  --plan shards      paper 001 shard streaming (docs/plan.md), with:\n"
    "    --shard-size K | --shards S   shards of K samples (default 1000) or S shards of equal size\n"
    "    --buffer b[,b..]  shuffle buffer sizes (plan: the first; simulate: each, default 0,1000,10000)\n"
    "    --model-parallel M   consecutive ranks per model-parallel group (default 1): --learners is the\n"
    "                      world size, D = P / M data-parallel groups\n"
    "    --devices-per-node n   devices per node (default: all on one node), for the rank table\n";

/* ---------------------------------------------------------------- shards */

/* The shards order's settings from the options: shard offsets (*off, the
 * caller frees), D = learners / model_parallel groups, the first buffer. */
static int shards_setup(const char *cmd, const opts_t *o, lade_shards_settings_t *st, uint64_t **off) {
  uint64_t N = o->s.samples, S;
  *off = NULL;
  if (o->shard_size && o->nshards) return die(cmd, "give --shard-size or --shards, not both%s", "");
  if (N == 0) return die(cmd, "--samples must be positive%s", "");
  if (o->nshards) {
    S = o->nshards;
    if (S > N) return die(cmd, "--shards is larger than --samples%s", "");
  } else {
    uint64_t k = o->shard_size ? o->shard_size : 1000;
    S = (N + k - 1) / k;
  }
  if (o->model_parallel == 0 || o->model_parallel > o->s.learners || o->s.learners % o->model_parallel)
    return die(cmd, "--learners (the world size) must be a positive multiple of --model-parallel%s", "");
  *off = malloc((S + 1) * sizeof **off);
  if (!*off) return die(cmd, "out of memory%s", "");
  uint64_t k = o->shard_size ? o->shard_size : 1000;
  for (uint64_t s = 0; s <= S; s++) /* S equal shards (sizes differ by <= 1), or shards of k, the last shorter */
    (*off)[s] = o->nshards ? (uint64_t)((unsigned __int128)s * N / S) : (s * k < N ? s * k : N);
  memset(st, 0, sizeof *st);
  st->shards = S;
  st->offsets = *off;
  st->seed = o->s.seed;
  st->buffer = o->buffers[0];
  st->groups = (uint32_t)(o->s.learners / o->model_parallel);
  st->batch_size = o->s.batch_size;
  st->drop_last = o->s.drop_last;
  if (lade_shards_len(st) == 0) {
    free(*off);
    *off = NULL;
    return die(cmd, "%s", lade_tool_error());
  }
  return 0;
}

/* Padding positions (those >= valid) in [a, z). */
static uint64_t pad_in(uint64_t a, uint64_t z, uint64_t valid) { return z > valid ? z - (a > valid ? a : valid) : 0; }

/* lade plan --plan shards --dump: one JSON line per (epoch, step, group). */
static int plan_shards(const opts_t *o) {
  if (o->out || o->timeit || o->in)
    return die("plan", "--plan shards has no plan file and no --time (it is not a plan kind, docs/plan.md); use "
               "--dump%s", "");
  if (!o->dump) return die("plan", "give --dump%s", "");
  lade_shards_settings_t st;
  uint64_t *off;
  int rc = shards_setup("plan", o, &st, &off);
  if (rc) return rc;
  uint64_t L = lade_shards_len(&st), B = st.batch_size, M = o->model_parallel;
  uint64_t *seq = malloc(L * sizeof *seq);
  if (!seq) {
    free(off);
    return die("plan", "out of memory%s", "");
  }
  for (uint64_t e = 0; e < o->s.epochs && !rc; e++)
    for (uint32_t d = 0; d < st.groups; d++) {
      uint64_t n, valid;
      if (lade_shards_epoch(&st, e, d, seq, &n, &valid)) {
        rc = die("plan", "%s", lade_tool_error());
        break;
      }
      for (uint64_t t = 0; t * B < n; t++) {
        printf("{\"epoch\":%llu,\"step\":%llu,\"group\":%u,\"ranks\":[", (unsigned long long)e,
               (unsigned long long)t, d);
        for (uint64_t m = 0; m < M; m++) printf("%s%llu", m ? "," : "", (unsigned long long)(d * M + m));
        printf("],\"samples\":[");
        for (uint64_t i = t * B; i < n && i < (t + 1) * B; i++)
          printf("%s%llu", i > t * B ? "," : "", (unsigned long long)seq[i]);
        printf("],\"padding\":%llu}\n", (unsigned long long)pad_in(t * B, (t + 1) * B < n ? (t + 1) * B : n, valid));
      }
    }
  free(seq);
  free(off);
  return rc;
}

/* lade simulate --plan shards: the split, the ranks and the shuffle quality. */
static int sim_shards(const opts_t *o) {
  lade_shards_settings_t st;
  uint64_t *off;
  int rc = shards_setup("simulate", o, &st, &off);
  if (rc) return rc;
  uint64_t N = o->s.samples, S = st.shards, D = st.groups, M = o->model_parallel, P = o->s.learners;
  uint64_t L = lade_shards_len(&st), smin = UINT64_MAX, smax = 0;
  double rand_same = 0;
  for (uint64_t s = 0; s < S; s++) {
    uint64_t k = off[s + 1] - off[s];
    smin = k < smin ? k : smin;
    smax = k > smax ? k : smax;
    rand_same += (double)k / (double)N * ((double)k / (double)N);
  }
  printf("shards order (paper 001): N=%llu in %llu shards of %llu-%llu samples; %llu ranks = %llu data-parallel "
         "groups x model-parallel %llu; batch %u per group; seed %llu; %s\n",
         (unsigned long long)N, (unsigned long long)S, (unsigned long long)smin, (unsigned long long)smax,
         (unsigned long long)P, (unsigned long long)D, (unsigned long long)M, st.batch_size,
         (unsigned long long)st.seed, st.drop_last ? "drop_last" : "padding");
  printf("  every group delivers %llu samples = %llu batches per epoch; per epoch %llu samples %s\n",
         (unsigned long long)L, (unsigned long long)lade_shards_steps(&st),
         (unsigned long long)(st.drop_last ? N - L * D : L * D - N), st.drop_last ? "dropped" : "padded");
  uint64_t dpn = o->devices_per_node ? o->devices_per_node : P;
  if (M > 1 || o->devices_per_node) {
    printf("  rank -> (node, device): data-parallel group\n");
    for (uint64_t r = 0; r < P && r < 32; r++) {
      lade_shards_rank_t k;
      if (lade_shards_rank((uint32_t)r, (uint32_t)P, (uint32_t)dpn, (uint32_t)M, &k)) {
        free(off);
        return die("simulate", "%s", lade_tool_error());
      }
      printf("    rank %3llu -> (%u, %u): group %u%s\n", (unsigned long long)r, k.node, k.device, k.group,
             M > 1 && !k.mp_in_node ? " (its model-parallel group spans nodes)" : "");
    }
    if (P > 32) printf("    ...\n");
  }
  printf("shuffle quality, mean over the %llu groups (a uniformly random order: jump ~0.333, same shard ~%.4f,\n"
         "rank autocorrelation ~0, neighbour gap ~0.333; shards read in order: ~0, ~1, ~1, ~0)\n",
         (unsigned long long)D, rand_same);
  printf("  %5s %-16s %9s %9s %9s %9s %9s %9s %9s\n", "epoch", "order", "jump", "jump_med", "same_shd", "shd/batch",
         "1shd_bat", "rank_ac", "nbr_gap");
  for (uint64_t e = 0; e < o->s.epochs; e++)
    for (int i = 0; i <= o->nbuffers; i++) {
      lade_shards_quality_t q;
      char name[40];
      int global = i == o->nbuffers;
      if (!global) {
        st.buffer = o->buffers[i];
        snprintf(name, sizeof name, "shards b=%llu", (unsigned long long)st.buffer);
      } else {
        snprintf(name, sizeof name, "global shuffle");
      }
      if (lade_shards_quality(&st, e, global, &q)) {
        free(off);
        return die("simulate", "%s", lade_tool_error());
      }
      printf("  %5llu %-16s %9.4f %9.4f %9.4f %9.2f %9.4f %9.4f %9.4f\n", (unsigned long long)e, name, q.jump_mean,
             q.jump_median, q.same_shard, q.shards_per_batch, q.one_shard_batches, q.rank_autocorr,
             q.neighbour_gap);
    }
  free(off);
  return 0;
}

/* ---------------------------------------------------------------- plan */

static const char *from_name(int32_t f, uint32_t r, uint32_t rpn, char *buf, size_t n) {
  if (f == LADE_FROM_CACHE) return "cache";
  if (f == LADE_FROM_STORAGE) return "storage";
  snprintf(buf, n, "%s:%d", lade_plan_route_class(f, r, rpn) == LADE_ROUTE_NODE ? "node" : "peer", f);
  return buf;
}

/* Per epoch, one JSON line per learner and per node of where its samples
 * come from (lade_plan_route_class), its admits, evicts and the samples it
 * serves to other nodes; inter-node bytes with --sample-bytes. */
static int print_counts(const lade_plan_settings_t *s, int json, FILE *out) {
  lade_plan_t *pl;
  if (lade_plan_create(&pl, s, sizeof *s)) return die("plan", "%s", lade_tool_error());
  const lade_plan_settings_t *u = lade_plan_settings(pl);
  uint32_t p = u->learners, rpn = u->ranks_per_node, n = p / rpn;
  uint64_t steps = lade_plan_steps_per_epoch(pl), sb = u->sample_bytes;
  enum { OWN, NODE, PEER, STORAGE, ADMIT, EVICT, SERVED, NCOL };
  uint64_t *c = calloc((size_t)p * NCOL, sizeof *c);
  if (!c) {
    lade_plan_destroy(pl);
    return die("plan", "out of memory%s", "");
  }
  if (!json)
    printf("  nodes: %u x %u ranks, cache %llu samples per %s\n  %5s %6s %5s %10s %10s %10s %10s %9s %9s %10s\n", n,
           rpn, (unsigned long long)u->cache, rpn > 1 ? "node" : "learner", "epoch", "rank", "node", "own",
           "handoff", "inter", "storage", "admits", "evicts", "served");
  for (uint64_t e = 0; e < u->epochs; e++) {
    memset(c, 0, (size_t)p * NCOL * sizeof *c);
    const lade_plan_step_t *v;
    for (uint64_t t = 0; t < steps; t++) {
      if (lade_plan_next(pl, &v)) {
        free(c);
        lade_plan_destroy(pl);
        return die("plan", "%s", lade_tool_error());
      }
      for (uint32_t r = 0; r < p; r++) {
        for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++) {
          lade_plan_route_class_t k = lade_plan_route_class(v->from[i], r, rpn);
          c[r * NCOL + (k == LADE_ROUTE_OWN ? OWN : k == LADE_ROUTE_NODE ? NODE : k == LADE_ROUTE_PEER ? PEER : STORAGE)]++;
          if (k == LADE_ROUTE_PEER) c[(uint32_t)v->from[i] * NCOL + SERVED]++;
        }
        c[r * NCOL + ADMIT] += v->admit_offset[r + 1] - v->admit_offset[r];
        c[r * NCOL + EVICT] += v->evict_offset[r + 1] - v->evict_offset[r];
      }
    }
    for (uint32_t r = 0; r < p; r++) {
      const uint64_t *x = c + (size_t)r * NCOL;
      if (json)
        fprintf(out, "{\"epoch\":%llu,\"rank\":%u,\"node\":%u,\"own\":%llu,\"handoff\":%llu,\"inter\":%llu,"
                "\"storage\":%llu,\"admits\":%llu,\"evicts\":%llu,\"served\":%llu}\n", (unsigned long long)e, r,
                r / rpn, (unsigned long long)x[OWN], (unsigned long long)x[NODE], (unsigned long long)x[PEER],
                (unsigned long long)x[STORAGE], (unsigned long long)x[ADMIT], (unsigned long long)x[EVICT],
                (unsigned long long)x[SERVED]);
      else
        printf("  %5llu %6u %5u %10llu %10llu %10llu %10llu %9llu %9llu %10llu\n", (unsigned long long)e, r, r / rpn,
               (unsigned long long)x[OWN], (unsigned long long)x[NODE], (unsigned long long)x[PEER],
               (unsigned long long)x[STORAGE], (unsigned long long)x[ADMIT], (unsigned long long)x[EVICT],
               (unsigned long long)x[SERVED]);
    }
    if (!json)
      printf("  %5s %6s %5s %10s %10s %10s %10s %9s %9s %10s %14s\n", "epoch", "", "node", "cache", "handoff", "in",
             "storage", "admits", "evicts", "out", "inter_bytes");
    for (uint32_t m = 0; m < n; m++) {
      uint64_t y[NCOL] = {0};
      for (uint32_t r = m * rpn; r < (m + 1) * rpn; r++)
        for (int j = 0; j < NCOL; j++) y[j] += c[(size_t)r * NCOL + j];
      /* a node's cache hits: its ranks' own and handed-off samples; in/out: samples between nodes */
      if (json)
        fprintf(out, "{\"epoch\":%llu,\"node\":%u,\"cache\":%llu,\"handoff\":%llu,\"in\":%llu,\"storage\":%llu,"
                "\"admits\":%llu,\"evicts\":%llu,\"out\":%llu,\"inter_bytes\":%llu}\n", (unsigned long long)e, m,
                (unsigned long long)(y[OWN] + y[NODE]), (unsigned long long)y[NODE], (unsigned long long)y[PEER],
                (unsigned long long)y[STORAGE], (unsigned long long)y[ADMIT], (unsigned long long)y[EVICT],
                (unsigned long long)y[SERVED], (unsigned long long)(y[PEER] * sb));
      else
        printf("  %5llu %6s %5u %10llu %10llu %10llu %10llu %9llu %9llu %10llu %14llu\n", (unsigned long long)e, "",
               m, (unsigned long long)(y[OWN] + y[NODE]), (unsigned long long)y[NODE], (unsigned long long)y[PEER],
               (unsigned long long)y[STORAGE], (unsigned long long)y[ADMIT], (unsigned long long)y[EVICT],
               (unsigned long long)y[SERVED], (unsigned long long)(y[PEER] * sb));
    }
  }
  free(c);
  lade_plan_destroy(pl);
  return 0;
}

static void dump_step(const lade_plan_step_t *v, FILE *out) {
  char buf[32];
  for (uint32_t r = 0; r < v->learners; r++) {
    fprintf(out, "{\"epoch\":%llu,\"step\":%llu,\"learner\":%u,\"samples\":[", (unsigned long long)v->epoch,
            (unsigned long long)v->step, r);
    for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++)
      fprintf(out, "%s%llu", i > v->offset[r] ? "," : "", (unsigned long long)v->samples[i]);
    if (v->tier) { /* two tiers: where each cached sample is read from */
      fputs("],\"tier\":[", out);
      for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++)
        fprintf(out, "%s\"%s\"", i > v->offset[r] ? "," : "",
                v->tier[i] == LADE_TIER_MEM ? "mem" : v->tier[i] == LADE_TIER_DISK ? "disk" : "-");
    }
    fputs("],\"from\":[", out);
    for (uint64_t i = v->offset[r]; i < v->offset[r + 1]; i++)
      fprintf(out, "%s\"%s\"", i > v->offset[r] ? "," : "",
              from_name(v->from[i], r, v->ranks_per_node, buf, sizeof buf));
    fputs("]}\n", out);
  }
}

int lade_tool_plan(int argc, char **argv) {
  opts_t o;
  defaults(&o);
  int rc = parse("plan", argc, argv, &o);
  if (rc == 1) {
    printf("usage: lade plan --plan NAME --samples N --learners P --batch-size B --epochs E [--cache C]\n"
           "                 [--seed S] (--out FILE | --dump)\n"
           "       lade plan --in FILE [--dump]    check (and print) a plan file\n"
           "       lade plan ... --time            measure planning speed (assignments/s)\n"
           "Computes which learner trains on which sample at every (epoch, step) and where each\n"
           "sample comes from. --out writes a versioned, checksummed binary file the engine can\n"
           "memory-map (docs/plan.md); --dump prints JSON lines, one per (epoch, step, learner):\n"
           "{\"epoch\",\"step\",\"learner\",\"samples\":[...],\"from\":[\"cache\"|\"node:K\"|\"peer:K\"|\"storage\"]}\n"
           "(node:K: rank K of the learner's node holds it, an intra-node handoff; peer:K: another node's).\n"
           "--counts prints, per epoch, one JSON line per learner {\"epoch\",\"rank\",\"node\",\"own\",\"handoff\",\n"
           "\"inter\",\"storage\",\"admits\",\"evicts\",\"served\"} and per node {\"epoch\",\"node\",\"cache\",\"handoff\",\n"
           "\"in\",\"storage\",\"admits\",\"evicts\",\"out\",\"inter_bytes\"} (bytes with --sample-bytes).\n"
           "With --plan shards (--dump only), one line per (epoch, step, data-parallel group):\n"
           "{\"epoch\",\"step\",\"group\",\"ranks\":[...],\"samples\":[...],\"padding\":K}, the last K samples\n"
           "repeating the group's first ones.\n\n");
    printf(common_help, lade_tool_plan_names(" | "), "");
    return 0;
  }
  if (rc) return rc;
  if (o.shards) return plan_shards(&o);
  if (o.in) {
    lade_plan_file_t *f;
    if (lade_plan_file_open(&f, o.in)) return die("plan", "%s", lade_tool_error());
    for (uint64_t i = 0; o.dump && i < lade_plan_file_steps(f); i++) {
      const lade_plan_step_t *v;
      if (lade_plan_file_step(f, i, &v)) {
        lade_plan_file_close(f);
        return die("plan", "%s", lade_tool_error());
      }
      dump_step(v, stdout);
    }
    if (!o.dump)
      printf("%s: plan %s, %llu steps, checksum ok\n", o.in, lade_plan_kind_name(lade_plan_file_settings(f)->kind),
             (unsigned long long)lade_plan_file_steps(f));
    lade_plan_file_close(f);
    return 0;
  }
  if (o.timeit) { /* planning speed: every step computed, nothing written */
    lade_plan_t *pl;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (lade_plan_create(&pl, &o.s, sizeof o.s)) return die("plan", "%s", lade_tool_error());
    const lade_plan_step_t *v;
    uint64_t n = 0;
    while (lade_plan_next(pl, &v) == 0) n += v->total;
    lade_plan_destroy(pl);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("plan %s: %llu sample assignments in %.3f s = %.1f M/s (one thread)\n", lade_plan_kind_name(o.s.kind),
           (unsigned long long)n, s, (double)n / s / 1e6);
    return 0;
  }
  if (!o.out && !o.dump && !o.counts) return die("plan", "give --out FILE, --dump, --counts or --time%s", "");
  if (o.out) {
    if (lade_plan_write(&o.s, sizeof o.s, o.out)) return die("plan", "%s", lade_tool_error());
    fprintf(stderr, "lade plan: wrote %s\n", o.out);
  }
  if (o.dump) {
    lade_plan_t *pl;
    if (lade_plan_create(&pl, &o.s, sizeof o.s)) return die("plan", "%s", lade_tool_error());
    const lade_plan_step_t *v;
    while (lade_plan_next(pl, &v) == 0) dump_step(v, stdout);
    lade_plan_destroy(pl);
  }
  if (o.counts) return print_counts(&o.s, 1, stdout);
  return 0;
}

/* ---------------------------------------------------------------- gnuplot */

static int have_gnuplot(void) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  char buf[4096];
  for (const char *p = path; *p;) {
    const char *c = strchr(p, ':');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)n, p);
    if (access(buf, X_OK) == 0) return 1;
    p += n + (c != NULL);
  }
  return 0;
}

/* Runs a gnuplot script; the data lives in `data` (inline datablocks). Returns 0 or an exit code. */
static int gnuplot(const char *cmd, const char *svg, const char *script) {
  if (!have_gnuplot()) {
    fprintf(stderr,
            "lade %s: gnuplot is not installed, so %s was not drawn (Debian: apt-get install gnuplot-nox)\n", cmd,
            svg);
    return 1;
  }
  FILE *g = popen("gnuplot", "w");
  if (!g) return die(cmd, "cannot start gnuplot%s", "");
  fprintf(g, "set terminal svg size 900,540 dynamic enhanced font 'sans,12'\nset output '%s'\n%s\n", svg, script);
  int st = pclose(g);
  if (st != 0) return die(cmd, "gnuplot failed drawing %s", svg);
  fprintf(stderr, "lade %s: wrote %s\n", cmd, svg);
  return 0;
}

/* A growing string for gnuplot scripts. */
typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf_t;

static void sb(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void sb(sbuf_t *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t nc = (b->cap + (size_t)k + 1) * 2;
    char *np = realloc(b->p, nc);
    if (!np) return;
    b->p = np;
    b->cap = nc;
  }
}

/* ---------------------------------------------------------------- simulate */

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

static void print_epochs(const char *name, const lade_plan_settings_t *s, const lade_sim_epoch_t *ep) {
  int nodes = s->ranks_per_node > 1 && (s->kind == LADE_PLAN_DISTCACHE || s->kind == LADE_PLAN_LOCALITY ||
                                         s->kind == LADE_PLAN_SOLAR); /* planned per node: the handoff column */
  printf("plan %s: N=%llu p=%u B=%u cache=%llu/%s epochs=%llu", name, (unsigned long long)s->samples, s->learners,
         s->batch_size, (unsigned long long)s->cache, nodes ? "node" : "learner", (unsigned long long)s->epochs);
  if (nodes) printf(" ranks_per_node=%u (peer: between nodes)", s->ranks_per_node);
  if (s->cache_disk) printf(" cache_disk=%llu", (unsigned long long)s->cache_disk);
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
      sb(&data, "%d %g %g %g %g %g %d\n", col + (int)bi, q[1], q[0], q[4], q[3], q[2], (int)bi);
      sb(&lab, "%s\"%u/%u\" %d", col > 1 ? ", " : "", bs[bi], ps[pi], col + (int)bi);
      free(ep);
      free(imb);
    }
  int rc = 0;
  if (o->plot) {
    sbuf_t sc = {0};
    sb(&sc,
       "$d << EOD\n%sEOD\nset title 'Imbalance traffic (paper 000 Fig. 6): local batch / learners'\n"
       "set ylabel 'sum of deficits / global batch (%%)'\nset xtics rotate by 60 right (%s)\nset bmargin 5\nset boxwidth 0.6\n"
       "set style fill solid 0.4\nset key off\nset grid y\nset xrange [0:%d]\n"
       "plot $d using 1:2:3:4:5:(0.6):($7+1) with candlesticks whiskerbars lc variable, "
       "$d using 1:6:6:6:6:(0.6) with candlesticks lc rgb 'black'\n",
       data.p, lab.p, col + 4);
    rc = gnuplot("simulate", o->plot, sc.p);
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
    sb(&data, "\"%s\" %llu %llu %g\n", rows[i].name, (unsigned long long)st, (unsigned long long)rq,
       steps ? (double)ms / (double)steps : 0);
    free(ep);
  }
  int rc = 0;
  if (o->plot) {
    sbuf_t sc = {0};
    sb(&sc,
       "$d << EOD\n%sEOD\nset title 'Storage reads, all epochs (paper 002 ablation)'\nset style data histograms\n"
       "set style fill solid 0.6\nset xtics rotate by 30 right\nset yrange [0:*]\nset format y '%%.1s%%c'\nset bmargin 6\nset ylabel 'samples'\nset grid y\n"
       "plot $d using 2:xtic(1) title 'storage reads', '' using 3 title 'storage requests (coalesced)'\n",
       data.p);
    rc = gnuplot("simulate", o->plot, sc.p);
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
  defaults(&o);
  int rc = parse("simulate", argc, argv, &o);
  if (rc == 1) {
    printf("usage: lade simulate --plan NAME|all --samples N --learners P --batch-size B --epochs E [--cache C]\n"
           "                     [--seed S] [--plot FILE.svg] [--box] [--fig6] [--ablation] [--orders]\n"
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
           "  --plot F.svg   draw storage reads per epoch by plan (or the --fig6/--ablation picture), gnuplot\n"
           "  --storage-rate R --peer-rate Rc --cache-rate X --train-rate V   samples/s for the time model\n"
           "                 (defaults 20000 aggregate, 5000, 50000, 400 per learner)\n\n");
    printf(common_help, lade_tool_plan_names(" | "), " | all");
    return 0;
  }
  if (rc) return rc;
  if (o.shards) return sim_shards(&o);
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
    if (lade_simulate(&s, sizeof s, &o.c, all[k], sizeof *all[k], imb)) {
      free(imb);
      rc = die("simulate", "%s", lade_tool_error());
      goto out;
    }
    print_epochs(lade_plan_kind_name(k), &s, all[k]);
    if ((s.ranks_per_node > 1 || o.counts) && (rc = print_counts(&s, 0, stdout))) {
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
      sb(&data, "%llu", (unsigned long long)e);
      for (int k = k0; k < k1; k++) sb(&data, " %llu", (unsigned long long)all[k][e].from_storage);
      sb(&data, "\n");
    }
    for (int k = k0; k < k1; k++)
      sb(&head, "%s$d using 1:%d with linespoints lw 2 title '%s'", k > k0 ? ", " : "", k - k0 + 2,
         lade_plan_kind_name(k));
    sbuf_t sc = {0};
    sb(&sc,
       "$d << EOD\n%sEOD\nset title 'Storage reads per epoch (N=%llu, p=%u, B=%u, cache=%llu)'\n"
       "set xlabel 'epoch'\nset ylabel 'samples read from storage'\nset grid\nset key outside right\n"
       "set xtics 1\nplot %s\n",
       data.p, (unsigned long long)o.s.samples, o.s.learners, o.s.batch_size, (unsigned long long)o.s.cache,
       head.p);
    rc = gnuplot("simulate", o.plot, sc.p);
    free(sc.p);
  }
out:
  for (int k = 0; k < LADE_PLAN_KIND_COUNT; k++) free(all[k]);
  free(all);
  free(data.p);
  free(head.p);
  return rc;
}

/* ---------------------------------------------------------------- model */

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
  defaults(&o);
  int rc = parse("model", argc, argv, &o);
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
    sb(&data, "%g %g %g %g %g\n", p, r.train, r.epoch_regular, r.epoch_distcache, r.epoch_locality);
  }
  printf("  crossover p = R/V = %.2f\n", o.m.R / o.m.V);
  if (o.plot) {
    sbuf_t sc = {0};
    sb(&sc,
       "$d << EOD\n%sEOD\nset title 'Modelled epoch time (paper 000 eqs. 1-8), R/V = %.0f'\nset logscale xy\n"
       "set xlabel 'learners p'\nset ylabel 'seconds per epoch'\nset grid\nset arrow from %g, graph 0 to %g, "
       "graph 1 nohead dt 2\nplot $d using 1:2 with lines dt 3 title 'training D/(pV)', "
       "$d using 1:3 with linespoints lw 2 title 'regular', $d using 1:4 with linespoints lw 2 title 'distributed cache', "
       "$d using 1:5 with linespoints lw 2 title 'locality-aware'\n",
       data.p, o.m.R / o.m.V, o.m.R / o.m.V, o.m.R / o.m.V);
    rc = gnuplot("model", o.plot, sc.p);
    free(sc.p);
  }
  free(data.p);
  return rc;
}
