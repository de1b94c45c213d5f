/* labels.c - class labels from folders (labels.h has the rule). One sort of
 * the distinct class folders, then one lookup per change of folder: a
 * listing in class order (dir's, s3's after the first pass) costs one
 * memcmp per sample beyond the sort. */
#include "labels.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct span {
  const char *p;
  size_t n;
} span_t;

/* strcmp's order on the folder names alone */
static int cmp_span(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  return lade__cmp_names(x->p, x->n, y->p, y->n);
}

size_t lade__label_folder(const char *rel, const char **start) {
  const char *p = rel;
  for (;;) {
    if (p[0] == '/')
      p++;
    else if (p[0] == '.' && p[1] == '/')
      p += 2;
    else
      break;
  }
  *start = p;
  const char *slash = strchr(p, '/');
  return slash ? (size_t)(slash - p) : 0;
}

static span_t span_of(lade__label_path_fn path, void *ctx, uint64_t i, size_t root) {
  const char *p;
  lade__label_folder(path(ctx, i), &p);
  span_t s;
  s.n = lade__label_folder(p + root, &s.p);
  return s;
}

/* The folder part of a normalised path, with its slash ("a/b/" of
 * "a/b/x.jpg"; 0 bytes without a folder). */
static size_t folder_part(const char *p) {
  const char *slash = strrchr(p, '/');
  return slash ? (size_t)(slash - p) + 1 : 0;
}

/* The length of the parent of folder part p[0, n) ("a/" of "a/b/"). */
static size_t parent_of(const char *p, size_t n) {
  while (n && p[n - 1] == '/') n--;
  while (n && p[n - 1] != '/') n--;
  return n;
}

size_t lade__labels_root(uint64_t count, lade__label_path_fn path, void *ctx) {
  const char *r0 = NULL;
  size_t r = 0;
  for (uint64_t i = 0; i < count; i++) {
    const char *p;
    lade__label_folder(path(ctx, i), &p);
    size_t d = folder_part(p);
    if (!r0) {
      r0 = p;
      r = parent_of(p, d);
      continue;
    }
    /* the part of r0[0, r) that p begins with, cut back to a slash */
    size_t k = 0;
    while (k < r && k < d && r0[k] == p[k]) k++;
    if (k < r) {
      while (k && r0[k - 1] != '/') k--;
      r = k;
    }
    if (r >= d) r = parent_of(p, d); /* p keeps a folder below the root */
    if (!r) return 0;
  }
  return r;
}

static int same(span_t a, span_t b) { return a.n == b.n && memcmp(a.p, b.p, a.n) == 0; }

int lade__labels_from_folders(uint64_t count, lade__label_path_fn path, void *ctx, size_t root, int32_t *label,
                              lade__classes_t *out, const char *what) {
  memset(out, 0, sizeof *out);
  /* the class folders, a run of one folder once */
  span_t *u = NULL;
  size_t n = 0, cap = 0;
  span_t prev = {NULL, 0};
  for (uint64_t i = 0; i < count; i++) {
    span_t s = span_of(path, ctx, i, root);
    if (!s.n || (prev.n && same(prev, s))) continue;
    prev = s;
    if (n == cap) {
      size_t c = cap ? cap * 2 : 64;
      span_t *v = realloc(u, c * sizeof *v);
      if (!v) {
        free(u);
        return lade__fail(LADE_ENOMEM, "%s: out of memory for class folders", what);
      }
      u = v;
      cap = c;
    }
    u[n++] = s;
  }
  if (n > 1) qsort(u, n, sizeof *u, cmp_span);
  size_t nc = 0, bytes = 0;
  for (size_t i = 0; i < n; i++)
    if (!nc || cmp_span(&u[nc - 1], &u[i]) != 0) u[nc++] = u[i];
  if (nc > LADE__MAX_CLASSES) {
    free(u);
    return lade__fail(LADE_ERANGE, "%s: %zu class folders, more than 2^24", what, nc);
  }
  /* labels: a lookup only where the folder changes */
  prev = (span_t){NULL, 0};
  int32_t prev_label = -1;
  for (uint64_t i = 0; i < count; i++) {
    span_t s = span_of(path, ctx, i, root);
    if (!s.n) {
      label[i] = -1;
      continue;
    }
    if (!prev.n || !same(prev, s)) {
      const span_t *hit = bsearch(&s, u, nc, sizeof *u, cmp_span);
      assert(hit); /* the first pass saw every folder */
      prev = s;
      prev_label = (int32_t)(hit - u);
    }
    label[i] = prev_label;
  }
  for (size_t i = 0; i < nc; i++) bytes += u[i].n + 1;
  if (nc) {
    out->arena = malloc(bytes);
    out->names = malloc(nc * sizeof *out->names);
    if (!out->arena || !out->names) {
      free(u);
      lade__classes_free(out);
      return lade__fail(LADE_ENOMEM, "%s: out of memory for class names", what);
    }
    size_t pos = 0;
    for (size_t i = 0; i < nc; i++) {
      memcpy(out->arena + pos, u[i].p, u[i].n);
      out->arena[pos + u[i].n] = '\0';
      out->names[i] = out->arena + pos;
      pos += u[i].n + 1;
    }
  }
  out->n = (uint32_t)nc;
  free(u);
  return 0;
}

void lade__classes_free(lade__classes_t *out) {
  if (!out) return;
  free(out->names);
  free(out->arena);
  memset(out, 0, sizeof *out);
}
