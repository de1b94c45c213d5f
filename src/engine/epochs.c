/* epochs.c - the loader's per-epoch counters (epochs.h). */
#include "engine/epochs.h"

#include <stdlib.h>
#include <string.h>

/* The first entry whose epoch is >= e (t->n when none). Epochs mostly go
 * up one at a time, so the last entry is tried first. */
static uint64_t epoch_pos(const lade__epochs_t *t, uint64_t e) {
  if (t->n == 0 || t->ep[t->n - 1].epoch < e) return t->n;
  if (t->ep[t->n - 1].epoch == e) return t->n - 1;
  uint64_t lo = 0, hi = t->n - 1;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (t->ep[mid].epoch < e) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

struct epoch_acc *lade__epochs_find(lade__epochs_t *t, uint64_t e) {
  uint64_t i = epoch_pos(t, e);
  return i < t->n && t->ep[i].epoch == e ? &t->ep[i] : NULL;
}

struct epoch_acc *lade__epochs_acc(lade__epochs_t *t, uint64_t e) {
  uint64_t i = epoch_pos(t, e);
  if (i < t->n && t->ep[i].epoch == e) return &t->ep[i];
  if (t->n == t->cap) {
    uint64_t n = t->cap ? t->cap * 2 : 16;
    struct epoch_acc *p = realloc(t->ep, n * sizeof *p);
    if (!p) return NULL;
    t->ep = p;
    t->cap = n;
  }
  memmove(&t->ep[i + 1], &t->ep[i], (t->n - i) * sizeof *t->ep);
  t->n++;
  memset(&t->ep[i], 0, sizeof *t->ep);
  t->ep[i].epoch = e;
  return &t->ep[i];
}

void lade__epochs_free(lade__epochs_t *t) {
  free(t->ep);
  *t = (lade__epochs_t){0};
}
