/* plan_warm.h - a plan's initial caches as a loader's warm restart gives
 * them (docs/plan.md "Warm restarts"), read from a loader's disk cache
 * folder or from a listing (plan_warm.c): for `lade plan --warm` and `lade
 * simulate --warm` (plan_cli.c, plan_simulate.c) and for `lade bench`'s
 * prediction of a run that starts warm (main.c). Private to the tools. */
#ifndef LADE_TOOLS_PLAN_WARM_H
#define LADE_TOOLS_PLAN_WARM_H

#include <stddef.h>
#include <stdint.h>

#include "lade/plan.h"

/* What each learner's cache holds at the start: list[r][0 .. n[r]), in
 * ascending order, each sample once (the order in which the loader hands
 * its disk's entries to lade_plan_warm). {0} is empty; lade_tool_warm_free
 * frees it. */
typedef struct lade_tool_warm {
  uint32_t learners; /* entries of n, cap and list */
  uint64_t *n, *cap;
  uint64_t **list;
  uint64_t total; /* sum of n */
} lade_tool_warm_t;

/* Adds to w what `path` says is cached, for a plan of `samples` samples and
 * `learners` learners:
 *  - a folder: a loader's disk cache (its cache_dir, or one dataset's
 *    folder in it, the one holding NAMESPACE; of several datasets, the one
 *    of `samples` samples): its sound entries (header, key and length
 *    checked as the loader's scan checks them) are learner `learner`'s;
 *  - a file: a listing, one cached sample a line, "SAMPLE" (learner
 *    `learner`'s) or "LEARNER SAMPLE"; blank lines and # comments skipped.
 * Errors are said on stderr as "lade CMD: PATH[:LINE]: reason"; returns 0
 * or 2. */
int lade_tool_warm_add(const char *cmd, const char *path, uint32_t learner, uint64_t samples, uint32_t learners,
                       lade_tool_warm_t *w);

/* lade bench: learner 0's entries in cache_dir of the dataset `source` (as
 * the loader names it: realpath unless a URL), read before the loader opens
 * the folder. *samples: the dataset's sample count its folder names (0 and
 * nothing added when cache_dir holds none of it). Returns 0, or -1 with
 * why set when it cannot tell (several folders of that dataset). */
int lade_tool_warm_of_source(const char *cache_dir, const char *source, uint64_t *samples, lade_tool_warm_t *w,
                             char *why, size_t wsize);

/* lade_plan_create(s) seeded with w (NULL or empty: a cold start) as the
 * loader seeds its plan at a warm restart: learners in rank order, each
 * with its first `cache` samples (the plan's, resolved) in ascending order.
 * Returns 0 or the LADE_E* code (lade_last_error() says why). */
int lade_tool_plan_open(const lade_plan_settings_t *s, const lade_tool_warm_t *w, lade_plan_t **out);

/* The samples w hands a plan of `cache` samples per learner: sum over
 * learners of min(n[r], cache). */
uint64_t lade_tool_warm_handed(const lade_tool_warm_t *w, uint64_t cache);

void lade_tool_warm_free(lade_tool_warm_t *w);

#endif
