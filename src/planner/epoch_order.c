/*
 * epoch_order.c - SOLAR's epoch order (paper 002 section 4.2.1). All epochs'
 * shuffles are known ahead, so the order in which they are trained can be
 * chosen to maximise reuse: the cost of going from epoch u to epoch v is
 * N(u,v) = |first buffer of v minus last buffer of u| (eq. 1) and the order is
 * an open-path TSP over epochs (eq. 2). The paper uses a discrete PSO; we also
 * solve it exactly (Held-Karp) for small epoch counts and with a
 * nearest-neighbour + swap/relocate local search for large ones, so the
 * heuristics can be measured against the optimum on the same matrix.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "hugemem.h"
#include "lade/plan.h"
#include "planner.h"
#include "regular.h"

#define DP_MAX_EPOCHS 16

int lade_plan_order_costs(const lade_plan_settings_t *in, size_t size, uint64_t buffer, uint64_t *cost) {
  lade_plan_settings_t s;
  int rc = lade__plan_settings_in(&s, in, size, "lade_plan_order_costs");
  if (rc) return rc;
  lade__plan_params_t rp = lade__plan_params_of(&s, true, s.drop_last != 0);
  rc = lade__plan_check(&rp);
  if (rc) return rc;
  uint64_t n = s.samples, E = s.epochs;
  uint64_t used = lade__plan_steps(&rp) * (uint64_t)s.batch_size * s.learners;
  uint64_t buf = LADE__MIN(buffer, used);
  uint64_t words = (n + 63) / 64;
  uint64_t *perm = lade__plan_calloc_huge(n, sizeof *perm);
  uint64_t *first = calloc(E * words, sizeof *first);
  uint64_t *last = calloc(E * words, sizeof *last);
  if (!perm || !first || !last) {
    free(perm);
    free(first);
    free(last);
    return lade__fail(LADE_ENOMEM, "epoch order: out of memory for %llu epochs of %llu samples",
                      (unsigned long long)E, (unsigned long long)n);
  }
  for (uint64_t e = 0; e < E; e++) {
    lade__shuffle_epoch(&rp, e, perm);
    for (uint64_t i = 0; i < buf; i++) {
      uint64_t a = perm[i % n], b = perm[(used - buf + i) % n];
      first[e * words + a / 64] |= 1ull << (a % 64);
      last[e * words + b / 64] |= 1ull << (b % 64);
    }
  }
  for (uint64_t u = 0; u < E; u++)
    for (uint64_t v = 0; v < E; v++) {
      uint64_t c = 0;
      if (u != v)
        for (uint64_t w = 0; w < words; w++) c += (uint64_t)__builtin_popcountll(first[v * words + w] & ~last[u * words + w]);
      cost[u * E + v] = c;
    }
  free(perm);
  free(first);
  free(last);
  return 0;
}

static uint64_t path_cost(const uint64_t *cost, uint64_t E, const uint64_t *order) {
  uint64_t c = 0;
  for (uint64_t i = 1; i < E; i++) c += cost[order[i - 1] * E + order[i]];
  return c;
}

static int solve_dp(const uint64_t *cost, uint64_t E, uint64_t *order) {
  size_t states = (size_t)1 << E;
  uint64_t *dp = malloc(states * E * sizeof *dp);
  uint8_t *par = malloc(states * E);
  if (!dp || !par) {
    free(dp);
    free(par);
    return lade__fail(LADE_ENOMEM, "epoch order: out of memory for the DP over %llu epochs", (unsigned long long)E);
  }
  for (size_t i = 0; i < states * E; i++) dp[i] = UINT64_MAX;
  for (uint64_t v = 0; v < E; v++) dp[((size_t)1 << v) * E + v] = 0;
  for (size_t m = 1; m < states; m++)
    for (uint64_t v = 0; v < E; v++) {
      uint64_t d = dp[m * E + v];
      if (d == UINT64_MAX) continue;
      for (uint64_t w = 0; w < E; w++) {
        if (m & ((size_t)1 << w)) continue;
        size_t m2 = m | ((size_t)1 << w);
        uint64_t d2 = d + cost[v * E + w];
        if (d2 < dp[m2 * E + w]) {
          dp[m2 * E + w] = d2;
          par[m2 * E + w] = (uint8_t)v;
        }
      }
    }
  size_t full = states - 1;
  uint64_t best = 0;
  for (uint64_t v = 1; v < E; v++)
    if (dp[full * E + v] < dp[full * E + best]) best = v;
  size_t m = full;
  for (uint64_t i = E; i-- > 0;) {
    order[i] = best;
    uint64_t prev = par[m * E + best];
    m &= ~((size_t)1 << best);
    best = prev;
  }
  free(dp);
  free(par);
  return 0;
}

/* Swap and relocate moves until none improves; asymmetric costs rule out 2-opt reversals. */
static void improve(const uint64_t *cost, uint64_t E, uint64_t *o, uint64_t *tmp) {
  uint64_t cur = path_cost(cost, E, o);
  for (int again = 1; again;) {
    again = 0;
    for (uint64_t i = 0; i < E; i++)
      for (uint64_t j = i + 1; j < E; j++) {
        uint64_t t = o[i];
        o[i] = o[j];
        o[j] = t;
        uint64_t c = path_cost(cost, E, o);
        if (c < cur) {
          cur = c;
          again = 1;
        } else {
          o[j] = o[i];
          o[i] = t;
        }
      }
    for (uint64_t i = 0; i < E; i++)
      for (uint64_t j = 0; j < E; j++) {
        if (i == j) continue;
        /* move o[i] to position j */
        uint64_t k = 0, x = o[i];
        for (uint64_t a = 0; a < E; a++) {
          if (a == i) continue;
          if (k == j) tmp[k++] = x;
          tmp[k++] = o[a];
        }
        if (k == j) tmp[k++] = x;
        assert(k == E);
        uint64_t c = path_cost(cost, E, tmp);
        if (c < cur) {
          cur = c;
          memcpy(o, tmp, E * sizeof *o);
          again = 1;
        }
      }
  }
}

static int solve_local(const uint64_t *cost, uint64_t E, uint64_t *order) {
  uint64_t *o = malloc(3 * E * sizeof *o);
  char *seen = malloc(E);
  if (!o || !seen) {
    free(o);
    free(seen);
    return lade__fail(LADE_ENOMEM, "epoch order: out of memory");
  }
  uint64_t *tmp = o + E, *best = o + 2 * E, bestc = UINT64_MAX;
  uint64_t starts = LADE__MIN(E, 16);
  for (uint64_t s0 = 0; s0 < starts; s0++) {
    memset(seen, 0, E);
    o[0] = s0;
    seen[s0] = 1;
    for (uint64_t i = 1; i < E; i++) {
      uint64_t nb = UINT64_MAX, bc = UINT64_MAX;
      for (uint64_t w = 0; w < E; w++)
        if (!seen[w] && cost[o[i - 1] * E + w] < bc) {
          bc = cost[o[i - 1] * E + w];
          nb = w;
        }
      o[i] = nb;
      seen[nb] = 1;
    }
    improve(cost, E, o, tmp);
    uint64_t c = path_cost(cost, E, o);
    if (c < bestc) {
      bestc = c;
      memcpy(best, o, E * sizeof *o);
    }
  }
  memcpy(order, best, E * sizeof *order);
  free(o);
  free(seen);
  return 0;
}

/* Discrete PSO for TSP after Shi et al. (paper 002 ref. [39]): a velocity is a
 * sequence of swaps; each swap of the old velocity and of the swap sequences
 * leading to the particle's and the swarm's best is kept with probability
 * w, c1, c2; a small random swap keeps the swarm from collapsing. */
static int solve_pso(const uint64_t *cost, uint64_t E, uint64_t seed, uint64_t *order) {
  enum { PARTICLES = 32, ITERS = 300 };
  const double w = 0.5, c1 = 0.6, c2 = 0.6, mut = 0.2;
  uint64_t vmax = 2 * E + 2;
  uint64_t *x = malloc(PARTICLES * E * sizeof *x), *pb = malloc(PARTICLES * E * sizeof *pb);
  uint64_t *pbc = malloc(PARTICLES * sizeof *pbc), *gb = malloc(E * sizeof *gb), *tmp = malloc(E * sizeof *tmp);
  uint32_t *vel = malloc(PARTICLES * vmax * 2 * sizeof *vel), *nv = malloc(3 * vmax * 2 * sizeof *nv);
  uint64_t *vlen = calloc(PARTICLES, sizeof *vlen);
  int rc = 0;
  if (!x || !pb || !pbc || !gb || !tmp || !vel || !nv || !vlen) {
    rc = lade__fail(LADE_ENOMEM, "epoch order: out of memory for PSO");
    goto out;
  }
  lade__rng_t r;
  lade__rng_init(&r, seed, E, LADE__RNG_PLAN + 1);
  uint64_t gbc = UINT64_MAX;
  for (int k = 0; k < PARTICLES; k++) {
    uint64_t *xi = x + k * E;
    for (uint64_t i = 0; i < E; i++) xi[i] = i;
    for (uint64_t i = E; i-- > 1;) {
      uint64_t j = lade__rng_below(&r, i + 1), t = xi[i];
      xi[i] = xi[j];
      xi[j] = t;
    }
    memcpy(pb + k * E, xi, E * sizeof *xi);
    pbc[k] = path_cost(cost, E, xi);
    if (pbc[k] < gbc) {
      gbc = pbc[k];
      memcpy(gb, xi, E * sizeof *gb);
    }
  }
  for (int it = 0; it < ITERS; it++)
    for (int k = 0; k < PARTICLES; k++) {
      uint64_t *xi = x + k * E, n = 0;
      for (uint64_t i = 0; i < vlen[k]; i++)
        if (lade__rng_double(&r) < w) {
          nv[2 * n] = vel[(k * vmax + i) * 2];
          nv[2 * n + 1] = vel[(k * vmax + i) * 2 + 1];
          n++;
        }
      for (int pass = 0; pass < 2; pass++) {
        const uint64_t *target = pass == 0 ? pb + k * E : gb;
        double keep = pass == 0 ? c1 : c2;
        memcpy(tmp, xi, E * sizeof *tmp);
        for (uint64_t i = 0; i < E; i++) {
          if (tmp[i] == target[i]) continue;
          uint64_t j = i + 1;
          while (tmp[j] != target[i]) j++;
          uint64_t t = tmp[i];
          tmp[i] = tmp[j];
          tmp[j] = t;
          if (lade__rng_double(&r) < keep) {
            nv[2 * n] = (uint32_t)i;
            nv[2 * n + 1] = (uint32_t)j;
            n++;
          }
        }
      }
      if (E > 1 && lade__rng_double(&r) < mut) {
        nv[2 * n] = (uint32_t)lade__rng_below(&r, E);
        nv[2 * n + 1] = (uint32_t)lade__rng_below(&r, E);
        n++;
      }
      if (n > vmax) n = vmax;
      for (uint64_t i = 0; i < n; i++) {
        uint32_t a = nv[2 * i], b = nv[2 * i + 1];
        uint64_t t = xi[a];
        xi[a] = xi[b];
        xi[b] = t;
        vel[(k * vmax + i) * 2] = a;
        vel[(k * vmax + i) * 2 + 1] = b;
      }
      vlen[k] = n;
      uint64_t c = path_cost(cost, E, xi);
      if (c < pbc[k]) {
        pbc[k] = c;
        memcpy(pb + k * E, xi, E * sizeof *xi);
      }
      if (c < gbc) {
        gbc = c;
        memcpy(gb, xi, E * sizeof *gb);
      }
    }
  memcpy(order, gb, E * sizeof *order);
out:
  free(x);
  free(pb);
  free(pbc);
  free(gb);
  free(tmp);
  free(vel);
  free(nv);
  free(vlen);
  return rc;
}

int lade_plan_order_solve(const uint64_t *cost, uint64_t E, int algo, uint64_t seed, uint64_t *order,
                          uint64_t *total) {
  int rc = 0;
  if (E == 0) {
    if (total) *total = 0;
    return 0;
  }
  if (algo == LADE_ORDER_AUTO) algo = E <= DP_MAX_EPOCHS ? LADE_ORDER_DP : LADE_ORDER_LOCAL;
  switch (algo) {
    case LADE_ORDER_DP:
      if (E > DP_MAX_EPOCHS)
        return lade__fail(LADE_EINVAL, "epoch order: the exact DP handles at most %d epochs, not %llu",
                          DP_MAX_EPOCHS, (unsigned long long)E);
      rc = solve_dp(cost, E, order);
      break;
    case LADE_ORDER_LOCAL: rc = solve_local(cost, E, order); break;
    case LADE_ORDER_PSO: rc = solve_pso(cost, E, seed, order); break;
    default: return lade__fail(LADE_EINVAL, "epoch order: unknown solver %d", algo);
  }
  if (!rc && total) *total = path_cost(cost, E, order);
  return rc;
}
