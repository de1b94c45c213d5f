/* hugemem.c - per-sample arrays on transparent huge pages (hugemem.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hugemem.h"

void *lade__plan_calloc_huge(size_t n, size_t size) {
  if (!n) n = 1;
  if (size && n > SIZE_MAX / size) return NULL;
  size_t bytes = n * size, page = (size_t)2 << 20;
  if (bytes < LADE__PLAN_HUGE_MIN) return calloc(n, size);
  void *p = NULL;
  if (posix_memalign(&p, page, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
  (void)madvise(p, bytes & ~(page - 1), MADV_HUGEPAGE); /* advice only: plain pages if it fails */
#endif
  memset(p, 0, bytes); /* before the first random access: faults the pages in order */
  return p;
}
