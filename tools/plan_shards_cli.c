/*
 * plan_shards_cli.c - `lade plan --plan shards` and `lade simulate --plan
 * shards`: the shards order of Parax data loading (paper 001), its batches
 * and its shuffle quality. Not a plan kind (it has its own API in
 * lade/plan.h, lade_shards_*; docs/plan.md). Public headers only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lade/lade.h"
#include "lade/plan.h"
#include "plan_opts.h"
#include "shown.h"

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
int lade_tool_plan_shards(const opts_t *o) {
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
int lade_tool_simulate_shards(const opts_t *o) {
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
