/* step.c - a cursor step's buffers (cursor.h's lade__cursor_step_t): what
 * the orders (orders.h) fill them with, and freeing them. Below both the
 * cursor and the orders: neither calls back into the other through it. */
#include <stdlib.h>
#include <string.h>

#include "orders.h"

void lade__cursor_step_free(lade__cursor_step_t *s) {
  free(s->idx);
  free(s->from);
  free(s->admit);
  free(s->evict);
  free(s->admit_tier);
  free(s->move);
  free(s->move_to);
  free(s->send_idx);
  free(s->send_dst);
  memset(s, 0, sizeof *s);
}

int lade__cursor_grow(void **arr, uint32_t *cap, uint64_t n, size_t size) {
  if (n <= *cap) return 0;
  if (n > UINT32_MAX) return lade__fail(LADE_ERANGE, "plan cursor: a step of %llu entries", (unsigned long long)n);
  void *p = realloc(*arr, (size_t)n * size);
  if (!p) return lade__fail(LADE_ENOMEM, "plan cursor: out of memory for a step of %llu entries", (unsigned long long)n);
  *arr = p;
  *cap = (uint32_t)n;
  return 0;
}

int lade__cursor_grow_samples(lade__cursor_step_t *out, uint64_t n) {
  uint32_t fcap = out->cap;
  int rc = lade__cursor_grow((void **)&out->from, &fcap, n, sizeof *out->from);
  return rc ? rc : lade__cursor_grow((void **)&out->idx, &out->cap, n, sizeof *out->idx);
}

void lade__cursor_unrouted(lade__cursor_step_t *out) {
  for (uint32_t i = 0; i < out->n; i++) out->from[i] = LADE__ROUTE_ANY;
  out->nadmit = out->nevict = out->nsend = out->nmove = 0;
}
