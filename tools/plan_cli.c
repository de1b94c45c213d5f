/*
 * plan_cli.c - `lade plan`: the planner (lade/plan.h) from the command line:
 * a plan file (--out), its steps as JSON lines (--dump), per-rank and
 * per-node counts (--counts), planning speed (--time), a plan file checked
 * (--in). The options all three plan commands share are in plan_opts.c,
 * `lade simulate` in plan_simulate.c, `lade model` in plan_model.c, the
 * shards order of Parax data loading (--plan shards) in plan_shards_cli.c.
 * Public headers only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lade/lade.h"
#include "lade/plan.h"
#include "plan_cli.h"
#include "plan_opts.h"
#include "shown.h"

static const char *from_name(int32_t f, uint32_t r, uint32_t rpn, char *buf, size_t n) {
  if (f == LADE_FROM_CACHE) return "cache";
  if (f == LADE_FROM_STORAGE) return "storage";
  snprintf(buf, n, "%s:%d", lade_plan_route_class(f, r, rpn) == LADE_ROUTE_NODE ? "node" : "peer", f);
  return buf;
}

/* Per epoch, one JSON line per learner and per node of where its samples
 * come from (lade_plan_route_class), its admits, evicts and the samples it
 * serves to other nodes; inter-node bytes with --sample-bytes. */
int lade_tool_plan_counts(const lade_plan_settings_t *s, const lade_tool_warm_t *w, int json, FILE *out) {
  lade_plan_t *pl;
  if (lade_tool_plan_open(s, w, &pl)) return die("plan", "%s", lade_tool_error());
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

/* lade plan's work once its options are read (w: the --warm caches). */
static int plan_run(const opts_t *o, const lade_tool_warm_t *w) {
  if (o->shards) return lade_tool_plan_shards(o);
  if (o->nwarm && (o->in || o->out))
    return die("plan", "--warm: a plan file holds a run from empty caches; use --dump or --counts%s", "");
  if (o->in) {
    lade_plan_file_t *f;
    if (lade_plan_file_open(&f, o->in)) return die("plan", "%s", lade_tool_error());
    for (uint64_t i = 0; o->dump && i < lade_plan_file_steps(f); i++) {
      const lade_plan_step_t *v;
      if (lade_plan_file_step(f, i, &v)) {
        lade_plan_file_close(f);
        return die("plan", "%s", lade_tool_error());
      }
      dump_step(v, stdout);
    }
    if (!o->dump)
      printf("%s: plan %s, %llu steps, checksum ok\n", o->in, lade_plan_kind_name(lade_plan_file_settings(f)->kind),
             (unsigned long long)lade_plan_file_steps(f));
    lade_plan_file_close(f);
    return 0;
  }
  if (o->timeit) { /* planning speed: every step computed, nothing written */
    lade_plan_t *pl;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (lade_tool_plan_open(&o->s, w, &pl)) return die("plan", "%s", lade_tool_error());
    const lade_plan_step_t *v;
    uint64_t n = 0;
    while (lade_plan_next(pl, &v) == 0) n += v->total;
    lade_plan_destroy(pl);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("plan %s: %llu sample assignments in %.3f s = %.1f M/s (one thread)\n", lade_plan_kind_name(o->s.kind),
           (unsigned long long)n, s, (double)n / s / 1e6);
    return 0;
  }
  if (!o->out && !o->dump && !o->counts) return die("plan", "give --out FILE, --dump, --counts or --time%s", "");
  if (o->out) {
    if (lade_plan_write(&o->s, sizeof o->s, o->out)) return die("plan", "%s", lade_tool_error());
    fprintf(stderr, "lade plan: wrote %s\n", o->out);
  }
  if (o->dump) {
    lade_plan_t *pl;
    if (lade_tool_plan_open(&o->s, w, &pl)) return die("plan", "%s", lade_tool_error());
    const lade_plan_step_t *v;
    while (lade_plan_next(pl, &v) == 0) dump_step(v, stdout);
    lade_plan_destroy(pl);
  }
  if (o->counts) return lade_tool_plan_counts(&o->s, w, 1, stdout);
  return 0;
}

int lade_tool_plan(int argc, char **argv) {
  opts_t o;
  lade_tool_plan_defaults(&o);
  int rc = lade_tool_plan_parse("plan", argc, argv, &o);
  if (rc == 1) {
    printf("usage: lade plan --plan NAME --samples N --learners P --batch-size B --epochs E [--cache C]\n"
           "                 [--seed S] [--warm PATH ...] (--out FILE | --dump | --counts)\n"
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
           "--warm PATH predicts a loader restarted on its cache_dir: the plan starts from the caches that\n"
           "survived (a cache folder or a listing, below), seeded as the loader seeds it (not with --out).\n"
           "With --plan shards (--dump only), one line per (epoch, step, data-parallel group):\n"
           "{\"epoch\",\"step\",\"group\",\"ranks\":[...],\"samples\":[...],\"padding\":K}, the last K samples\n"
           "repeating the group's first ones.\n\n");
    lade_tool_plan_help("");
    return 0;
  }
  if (rc) return rc;
  lade_tool_warm_t w = {0};
  rc = lade_tool_warm_load("plan", &o, &w);
  if (!rc) rc = plan_run(&o, &w);
  lade_tool_warm_free(&w);
  return rc;
}
