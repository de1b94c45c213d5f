/* coalesce.c - see coalesce.h. */
#include "core/coalesce.h"

size_t lade__coalesce(const lade__span_t *v, size_t n, uint64_t gap, uint64_t max_len, lade__run_t *out) {
  size_t runs = 0;
  for (size_t i = 0; i < n;) {
    uint64_t start = v[i].off, end = v[i].off + v[i].len;
    size_t j = i;
    while (j + 1 < n && v[j + 1].group == v[i].group && v[j + 1].off <= end + gap) {
      uint64_t e = v[j + 1].off + v[j + 1].len > end ? v[j + 1].off + v[j + 1].len : end;
      if (e - start > max_len) break;
      end = e;
      j++;
    }
    out[runs++] = (lade__run_t){i, j - i + 1, start, end};
    i = j + 1;
  }
  return runs;
}
