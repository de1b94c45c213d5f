/* regular.c - the regular plan: per-epoch global shuffle, contiguous slices. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "hugemem.h"
#include "lade/plan.h"
#include "regular.h"

struct lade__regular {
  lade__plan_params_t p;
  uint64_t *perm;     /* permutation of perm_epoch */
  uint64_t perm_epoch;
  bool have_perm;
  uint64_t shuffles;  /* permutations drawn (lade__regular_shuffles) */
};

lade__plan_params_t lade__plan_params_of(const lade_plan_settings_t *s, bool shuffle, bool drop_last) {
  return (lade__plan_params_t){.samples = s->samples,
                               .batch_size = s->batch_size,
                               .world_size = s->learners,
                               .epochs = s->epochs,
                               .seed = s->seed,
                               .shuffle = shuffle,
                               .drop_last = drop_last};
}

uint64_t lade__plan_steps(const lade__plan_params_t *p) {
  uint64_t g = (uint64_t)p->batch_size * p->world_size;
  if (g == 0) return 0;
  return p->drop_last ? p->samples / g : (p->samples + g - 1) / g;
}

static int check_basic(const lade__plan_params_t *p) {
  if (p->world_size == 0) return lade__fail(LADE_EINVAL, "plan: world_size is 0 (zero learners)");
  if (p->batch_size == 0) return lade__fail(LADE_EINVAL, "plan: batch_size is 0");
  if (p->samples == 0) return lade__fail(LADE_EEMPTY, "plan: the dataset has no samples");
  return 0;
}

int lade__plan_check(const lade__plan_params_t *p) {
  int rc = check_basic(p);
  if (rc) return rc;
  uint64_t g = (uint64_t)p->batch_size * p->world_size;
  if (p->drop_last && g > p->samples)
    return lade__fail(LADE_EINVAL,
                      "plan: global batch %llu (batch_size %u x world_size %u) is larger than the dataset (%llu "
                      "samples) and drop_last is set, so an epoch has no step",
                      (unsigned long long)g, p->batch_size, p->world_size, (unsigned long long)p->samples);
  return 0;
}

/* Fisher-Yates from the end, as always; the swap partners j are drawn
 * SHUFFLE_AHEAD positions early (the RNG's sequence is the same: one draw per
 * i, in order) so that perm[j] is prefetched: at millions of samples every
 * swap is a cache miss, and this overlaps them (about 3x faster at 14.2M). */
enum { SHUFFLE_AHEAD = 32 };

void lade__shuffle_epoch(const lade__plan_params_t *p, uint64_t epoch, uint64_t *perm) {
  uint64_t n = p->samples;
  for (uint64_t i = 0; i < n; i++) perm[i] = i;
  if (!p->shuffle || n < 2) return;
  lade__rng_t r;
  lade__rng_init(&r, p->seed, epoch, LADE__RNG_SHUFFLE);
  uint64_t js[SHUFFLE_AHEAD], next = n - 1; /* js[i % AHEAD]: the partner of i, drawn for i down to next+1 */
  for (; next > 0 && n - 1 - next < SHUFFLE_AHEAD; next--) {
    js[next % SHUFFLE_AHEAD] = lade__rng_below(&r, next + 1);
    __builtin_prefetch(&perm[js[next % SHUFFLE_AHEAD]], 1);
  }
  for (uint64_t i = n - 1; i > 0; i--) {
    uint64_t j = js[i % SHUFFLE_AHEAD];
    if (next > 0) { /* i's slot is free now: draw next's partner into it (next = i - AHEAD) */
      js[next % SHUFFLE_AHEAD] = lade__rng_below(&r, next + 1);
      __builtin_prefetch(&perm[js[next % SHUFFLE_AHEAD]], 1);
      next--;
    }
    uint64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

uint64_t lade__plan_epoch_len(const lade__plan_params_t *p) {
  uint64_t g = (uint64_t)p->batch_size * p->world_size;
  if (g == 0) return 0;
  if (p->drop_last) return p->samples / g * g;
  uint64_t w = p->world_size;
  return (p->samples + w - 1) / w * w;
}

void lade__plan_slice(const lade__plan_params_t *p, uint64_t step, uint32_t rank, uint64_t *start, uint32_t *count,
                      uint32_t *valid) {
  uint64_t g = (uint64_t)p->batch_size * p->world_size, len = lade__plan_epoch_len(p);
  uint64_t base = step * g, in_step = len > base ? LADE__MIN(g, len - base) : 0;
  uint64_t local = in_step / p->world_size; /* len and g are multiples of world_size */
  *start = base + (uint64_t)rank * local;
  *count = (uint32_t)local;
  uint64_t real = p->samples > *start ? p->samples - *start : 0;
  *valid = (uint32_t)LADE__MIN(local, real);
}

int lade__regular_create(lade__regular_t **out, const lade__plan_params_t *p) {
  /* not lade__plan_check: a batch larger than the dataset with drop_last is
   * a plan of zero steps for the engine, as for DataLoader */
  int rc = check_basic(p);
  if (rc) return rc;
  lade__regular_t *r = calloc(1, sizeof *r);
  if (!r) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  r->p = *p;
  r->perm = lade__plan_calloc_huge(p->samples, sizeof *r->perm);
  if (!r->perm) {
    free(r);
    return lade__fail(LADE_ENOMEM, "plan: out of memory for a permutation of %llu samples",
                      (unsigned long long)p->samples);
  }
  *out = r;
  return 0;
}

void lade__regular_destroy(lade__regular_t *r) {
  if (!r) return;
  free(r->perm);
  free(r);
}

const lade__plan_params_t *lade__regular_params(const lade__regular_t *r) { return &r->p; }

uint64_t lade__regular_cached_epoch(const lade__regular_t *r) { return r->have_perm ? r->perm_epoch : UINT64_MAX; }
uint64_t lade__regular_shuffles(const lade__regular_t *r) { return r->shuffles; }

void lade__regular_adopt(lade__regular_t *r, uint64_t epoch, uint64_t **perm) {
  uint64_t *old = r->perm;
  r->perm = *perm;
  *perm = old;
  r->perm_epoch = epoch;
  r->have_perm = true;
}

static int check_pos(lade__regular_t *r, uint64_t epoch, uint64_t step) {
  if (epoch >= r->p.epochs || step >= lade__plan_steps(&r->p))
    return lade__fail(LADE_ERANGE, "plan: (epoch %llu, step %llu) is past the end (%llu epochs of %llu steps)",
                      (unsigned long long)epoch, (unsigned long long)step, (unsigned long long)r->p.epochs,
                      (unsigned long long)lade__plan_steps(&r->p));
  if (!r->have_perm || r->perm_epoch != epoch) {
    lade__shuffle_epoch(&r->p, epoch, r->perm);
    r->shuffles++;
    r->perm_epoch = epoch;
    r->have_perm = true;
  }
  return 0;
}

/* out[i] = perm[(start + i) % n], in runs that wrap at n */
static void copy_range(const lade__regular_t *r, uint64_t start, uint64_t count, uint64_t *out) {
  uint64_t n = r->p.samples, at = start % n;
  while (count) {
    uint64_t run = LADE__MIN(count, n - at);
    memcpy(out, r->perm + at, run * sizeof *out);
    out += run;
    count -= run;
    at = 0;
  }
}

int lade__regular_global(lade__regular_t *r, uint64_t epoch, uint64_t step, uint64_t *out) {
  int rc = check_pos(r, epoch, step);
  if (rc) return rc;
  uint64_t g = (uint64_t)r->p.batch_size * r->p.world_size;
  copy_range(r, step * g, g, out);
  return 0;
}

lade__plan_params_t lade__plan_rest_params(const lade__plan_params_t *p, uint64_t consumed) {
  lade__plan_params_t q = *p;
  q.samples = p->samples > consumed ? p->samples - consumed : 0;
  return q;
}

int lade__regular_rest(lade__regular_t *r, uint64_t epoch, uint64_t consumed, uint64_t start, uint64_t count,
                       uint64_t *out) {
  uint64_t n = r->p.samples;
  if (epoch >= r->p.epochs || consumed >= n)
    return lade__fail(LADE_ERANGE, "plan: the rest of epoch %llu after %llu of its %llu positions is not in a run of "
                      "%llu epochs", (unsigned long long)epoch, (unsigned long long)consumed, (unsigned long long)n,
                      (unsigned long long)r->p.epochs);
  if (!r->have_perm || r->perm_epoch != epoch) {
    lade__shuffle_epoch(&r->p, epoch, r->perm);
    r->shuffles++;
    r->perm_epoch = epoch;
    r->have_perm = true;
  }
  /* past the rest's M positions the padding wraps to the epoch's start, as
   * the regular order pads: the same repeats however the epoch was cut */
  copy_range(r, consumed + start, count, out);
  return 0;
}

int lade__regular_local(lade__regular_t *r, uint64_t epoch, uint64_t step, uint32_t rank, uint64_t *out,
                        uint32_t *n, uint32_t *valid) {
  if (rank >= r->p.world_size)
    return lade__fail(LADE_EINVAL, "plan: rank %u is not below world_size %u", rank, r->p.world_size);
  int rc = check_pos(r, epoch, step);
  if (rc) return rc;
  uint64_t start;
  lade__plan_slice(&r->p, step, rank, &start, n, valid);
  copy_range(r, start, *n, out);
  return 0;
}
