/* nodeplan.c - a node-aware plan's handoffs through the node cache (nodeplan.h). */
#include "engine/nodeplan.h"

#include <stdlib.h>
#include <time.h>

#include "core/core.h"

bool lade__nodeplan_is_node_rank(const lade__nodeplan_t *np, int32_t route) {
  return np->p.node && route >= 0 && (uint32_t)route - np->p.base < np->p.ranks;
}

bool lade__nodeplan_get(lade__nodeplan_t *np, uint64_t idx, uint64_t q, int32_t route, uint64_t ver,
                        lade__buf_t *out, int *fail, const atomic_bool *stop) {
  lade__cache_t *c = np->p.node;
  uint32_t owner = (uint32_t)route - np->p.base;
  double t_end = 0;
  for (;;) {
    if (lade__cache_contains(c, idx) && lade__cache_get_ver(c, idx, ver, out) == 0) return true;
    uint64_t mark = lade__shmcache_step_of(c, owner);
    if (mark >= q) return lade__cache_get_ver(c, idx, ver, out) == 0;
    if (t_end == 0) t_end = lade__now() + np->p.timeout_ms / 1000.0;
    if (atomic_load(stop)) return false;
    if (lade__now() > t_end) {
      *fail = lade__fail(LADE_ETIMEOUT, "sample %llu of step %llu did not arrive from rank %d of this node within "
                         "peer_timeout_ms (%u ms): it has not put it into the node's cache and has finished only the "
                         "steps before %llu (stopped, or far behind)", (unsigned long long)idx,
                         (unsigned long long)q, route, np->p.timeout_ms, (unsigned long long)mark);
      lade__transport_lost(np->p.dist, (uint32_t)route);
      return false;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

void lade__nodeplan_sends(lade__nodeplan_t *np, const lade__cursor_step_t *st, const uint64_t **idx,
                          const uint32_t **dst, uint32_t *n) {
  *idx = st->send_idx;
  *dst = st->send_dst;
  *n = st->nsend;
  if (!np->p.node || !st->nsend) return;
  if (st->nsend > np->send_cap) {
    free(np->send_idx);
    free(np->send_dst);
    np->send_idx = malloc(st->nsend * sizeof *np->send_idx);
    np->send_dst = malloc(st->nsend * sizeof *np->send_dst);
    np->send_cap = np->send_idx && np->send_dst ? st->nsend : 0;
  }
  uint32_t k = 0;
  for (uint32_t i = 0; i < st->nsend && np->send_cap; i++)
    if (st->send_dst[i] - np->p.base >= np->p.ranks) {
      np->send_idx[k] = st->send_idx[i];
      np->send_dst[k++] = st->send_dst[i];
    }
  *idx = np->send_idx;
  *dst = np->send_dst;
  *n = k; /* out of memory: none sent, the receivers time out naming this rank */
}

int lade__nodeplan_step_done(lade__nodeplan_t *np, const lade__cursor_step_t *st) {
  if (!np->p.node) return 0;
  lade__shmcache_mark_step(np->p.node, np->p.local, st->q + 1);
  uint32_t late = 0;
  if (!st->nevict || lade__shmcache_wait_steps(np->p.node, np->p.ranks, st->q + 1, np->p.timeout_ms, &late) == 0) return 0;
  int rc = lade__fail(LADE_ETIMEOUT, "step %llu: no word from rank %u of this node: it has not finished reading "
                       "the step within peer_timeout_ms (%u ms), so this rank cannot evict from the node's cache what "
                       "it may still read (stopped, or far behind)", (unsigned long long)st->q, np->p.base + late,
                       np->p.timeout_ms);
  lade__transport_lost(np->p.dist, np->p.base + late);
  return rc;
}

void lade__nodeplan_mark(lade__nodeplan_t *np, uint64_t q) {
  if (np->p.node) lade__shmcache_mark_step(np->p.node, np->p.local, q);
}

void lade__nodeplan_open(lade__nodeplan_t *np, const lade__nodeplan_params_t *p, uint64_t first) {
  *np = (lade__nodeplan_t){.p = *p};
  lade__nodeplan_mark(np, first);
}

void lade__nodeplan_close(lade__nodeplan_t *np) {
  free(np->send_idx);
  free(np->send_dst);
  *np = (lade__nodeplan_t){0};
}
