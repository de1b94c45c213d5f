/*
 * hugemem.h - the planner's arrays of one entry per sample (the cache
 * directory, eviction keys, next uses, permutations). At millions of samples
 * the plan reaches them in random order, so with 4 KiB pages nearly every
 * access also misses the TLB (a page walk, dearer still under a hypervisor);
 * backed by 2 MiB pages the same arrays need a few hundred TLB entries.
 */
#ifndef LADE__PLAN_HUGEMEM_H
#define LADE__PLAN_HUGEMEM_H

#include <stddef.h>

/* Zeroed memory for n entries of `size` bytes (at least one), as calloc;
 * from LADE__PLAN_HUGE_MIN bytes on it is 2 MiB-aligned and advised as
 * transparent huge pages (Linux's MADV_HUGEPAGE, a hint: plain pages where
 * the system has none). NULL when out of memory. Release with free().
 * Thread-safe. */
void *lade__plan_calloc_huge(size_t n, size_t size);

#define LADE__PLAN_HUGE_MIN ((size_t)8 << 20)

#endif
