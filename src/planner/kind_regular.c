/* kind_regular.c - the `regular` plan kind: the regular order's contiguous
 * slices (regular.c), everything read from storage, no cache state, so a
 * step depends on (epoch, step) alone and seeking jumps. */
#include "planner.h"

static int regular_step(lade_plan_t *pl, lade__plan_out_t *out) {
  lade__plan_regular_slices(pl, out);
  for (uint64_t i = 0; i < pl->G; i++) out->from[i] = LADE_FROM_STORAGE;
  return 0;
}

const lade__plan_ops_t lade__kind_regular = {
    .flags = LADE__KIND_STATELESS,
    .step = regular_step,
};
