/* kind_distcache.c - `distcache`, the distributed cache of Accelerating Data
 * Loading (paper 000 III-C): regular slices; the caches fill in epoch 0 with
 * what each learner loads, disjoint and without replacement (the driver's
 * owner[] directory), and a miss is served by the peer that caches the
 * sample, else by storage. With ranks_per_node > 1 the caches are the
 * nodes': a sample is admitted when its learner's node has room, and one
 * cached by another rank of the node is an intra-node handoff. */
#include "planner.h"

static int distcache_create(lade_plan_t *pl) { return lade__plan_owners_init(pl, 0); }

static int distcache_step(lade_plan_t *pl, lade__plan_out_t *out) {
  lade__plan_regular_slices(pl, out);
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    out->from[i] = lade__plan_route(pl, r, out->samples[i]);
  }
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    uint64_t s = out->samples[i];
    if (pl->owner[s] < 0 && lade__plan_room(pl, r)) lade__plan_own(pl, r, s);
  }
  return 0;
}


const lade__plan_ops_t lade__kind_distcache = {
    .create = distcache_create,
    .step = distcache_step,
    .seed = lade__plan_seed_first_holder, /* warm start: models.c */
};
