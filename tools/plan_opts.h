/* plan_opts.h - what `lade plan` (plan_cli.c), `lade simulate`
 * (plan_simulate.c) and `lade model` (plan_model.c) share: their options
 * (plan_opts.c), the shards order (plan_shards_cli.c), the counts table
 * (plan_cli.c) and the gnuplot pictures (plan_plot.c). Private to them. */
#ifndef LADE_TOOLS_PLAN_OPTS_H
#define LADE_TOOLS_PLAN_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lade/plan.h"
#include "plan_warm.h"

enum { WARM_MAX = 256 }; /* --warm options; a listing of LEARNER SAMPLE lines names any number of learners */

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
  /* --plan shards (not a lade_plan_kind_t, see plan_shards_cli.c) */
  int shards;
  uint64_t shard_size, nshards, model_parallel, devices_per_node;
  uint64_t buffers[16];
  int nbuffers;
  /* --warm PATH, in order: the k-th is learner k's cache unless a listing names the learners (plan_warm.h) */
  const char *warm[WARM_MAX];
  int nwarm;
} opts_t;

/* "lade CMD: " and fmt (one %s, arg) on stderr; returns 2, the exit status of a usage error. */
static inline int die(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "lade %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  return 2;
}

/* ---------------------------------------------------------------- plan_opts.c */

/* The defaults of every option (ImageNet on 16 learners, docs/model.md). */
void lade_tool_plan_defaults(opts_t *o);

/* Parses the flags every subcommand shares (cmd names it in errors);
 * returns 0, 1 for --help, or 2 (said on stderr). */
int lade_tool_plan_parse(const char *cmd, int argc, char **argv, opts_t *o);

/* Prints the help of the shared flags; all_suffix follows the plan names
 * (" | all" where --plan all is taken). */
void lade_tool_plan_help(const char *all_suffix);

/* The caches every --warm names (none: w stays empty), checked against the
 * plan's samples and learners; returns 0 or 2 (said on stderr, naming the
 * file and line). */
int lade_tool_warm_load(const char *cmd, const opts_t *o, lade_tool_warm_t *w);

/* ---------------------------------------------------------------- the commands' parts */

/* Per epoch, per learner and per node: where the samples come from, admits,
 * evicts, samples served (plan_cli.c), from the caches w gives at the start
 * (NULL: empty); JSON lines to out, or a table on stdout. Returns 0 or 2. */
int lade_tool_plan_counts(const lade_plan_settings_t *s, const lade_tool_warm_t *w, int json, FILE *out);

/* lade plan --plan shards and lade simulate --plan shards (plan_shards_cli.c);
 * return the exit status. */
int lade_tool_plan_shards(const opts_t *o);
int lade_tool_simulate_shards(const opts_t *o);

/* ---------------------------------------------------------------- plan_plot.c */

/* A growing string for gnuplot scripts; {0} is empty, free(p) frees it. */
typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf_t;

/* Appends to b as printf would (nothing when memory runs out). */
void lade_tool_sbuf_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs a gnuplot script drawing svg; the data lives in the script (inline
 * datablocks). Returns 0 or an exit code (1: gnuplot is not installed). */
int lade_tool_gnuplot(const char *cmd, const char *svg, const char *script);

#endif
