/*
 * balance.c - Algorithm 1 of Accelerating Data Loading (paper 000,
 * locality-aware loading): given each learner's surplus or deficit against
 * its equal share, greedily match the largest surplus with the largest
 * deficit using two max-heaps. Each round
 * zeroes at least one learner, so at most p-1 transfers are emitted, and
 * O(p log p) time; the paper proves this a 2-approximation of the minimum
 * number of messages (the exact problem is NP-complete).
 */
#include <assert.h>
#include <stdlib.h>

#include "core/core.h"
#include "lade/plan.h"

typedef struct item {
  int64_t amount;
  uint32_t id;
} item_t;

/* Max-heap by amount; ties by smaller id so the schedule is deterministic. */
static int above(const item_t *a, const item_t *b) {
  return a->amount > b->amount || (a->amount == b->amount && a->id < b->id);
}

static void sift_down(item_t *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && above(&h[l], &h[m])) m = l;
    if (r < n && above(&h[r], &h[m])) m = r;
    if (m == i) return;
    item_t t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static void heapify(item_t *h, size_t n) {
  for (size_t i = n / 2; i-- > 0;) sift_down(h, n, i);
}

/* Removes the max if its amount is 0, else restores the heap after the root decreased. */
static void fix_root(item_t *h, size_t *n) {
  if (h[0].amount == 0) {
    h[0] = h[--*n];
  }
  if (*n) sift_down(h, *n, 0);
}

int lade_plan_balance(uint32_t p, const int64_t *imbalance, lade_plan_transfer_t *out, uint64_t *count) {
  item_t *hs = malloc(((size_t)p + 1) * 2 * sizeof *hs);
  if (!hs) return lade__fail(LADE_ENOMEM, "balance: out of memory for %u learners", p);
  item_t *hd = hs + p + 1;
  size_t ns = 0, nd = 0;
  int64_t sum = 0;
  for (uint32_t r = 0; r < p; r++) {
    sum += imbalance[r];
    if (imbalance[r] > 0) hs[ns++] = (item_t){imbalance[r], r};
    if (imbalance[r] < 0) hd[nd++] = (item_t){-imbalance[r], r};
  }
  if (sum != 0) {
    free(hs);
    return lade__fail(LADE_EINVAL, "balance: surpluses and deficits do not cancel (sum %lld)", (long long)sum);
  }
  heapify(hs, ns);
  heapify(hd, nd);
  uint64_t k = 0;
  while (ns) {
    assert(nd > 0);
    int64_t m = LADE__MIN(hs[0].amount, hd[0].amount);
    out[k++] = (lade_plan_transfer_t){hs[0].id, hd[0].id, (uint64_t)m};
    hs[0].amount -= m;
    hd[0].amount -= m;
    fix_root(hs, &ns);
    fix_root(hd, &nd);
  }
  assert(nd == 0);
  assert(p == 0 || k <= p - 1);
  *count = k;
  free(hs);
  return 0;
}
