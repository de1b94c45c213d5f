/* plankinds.h - the names of the plan kinds (lade_plan_kind_t), in enum
 * order: the one list behind the loader's `plan` setting (config.c) and
 * lade_plan_kind_name()/lade_plan_kind_parse() (planner.c), through which
 * the CLI prints them. In core/ because config.c, which depends on nothing
 * in-tree, needs them; planner.c checks the order against the enum. */
#ifndef LADE__CORE_PLANKINDS_H
#define LADE__CORE_PLANKINDS_H

#include "lade/plan.h"

/* X(kind, "name") for every kind, LADE_PLAN_REGULAR .. LADE_PLAN_DLIO. */
#define LADE__PLAN_KINDS(X)                   \
  X(LADE_PLAN_REGULAR, "regular")             \
  X(LADE_PLAN_REGULAR_LRU, "regular+lru")     \
  X(LADE_PLAN_REGULAR_BELADY, "regular+belady") \
  X(LADE_PLAN_DISTCACHE, "distcache")         \
  X(LADE_PLAN_LOCALITY, "locality")           \
  X(LADE_PLAN_SOLAR, "solar")                 \
  X(LADE_PLAN_SHARDS, "shards")              \
  X(LADE_PLAN_DLIO, "dlio")

/* Every kind, planned or not. */
#define LADE__PLAN_KIND_ALL (LADE_PLAN_DLIO + 1)

/* "regular|regular+lru|...|shards", a config enum's choices: the list with
 * a leading '|' per name, less the first. */
#define LADE__PLAN_KIND_BAR_(kind, name) "|" name
#define LADE__PLAN_KIND_CHOICES (&(LADE__PLAN_KINDS(LADE__PLAN_KIND_BAR_))[1])

#endif
