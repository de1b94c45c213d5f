/*
 * plan_plot.c - the gnuplot pictures of `lade simulate` and `lade model`
 * (--plot): gnuplot (Debian: gnuplot-nox) fed a script through a pipe, and
 * the growing string the scripts are written into. When gnuplot is missing
 * the numbers are still printed and the command says so and exits 1.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan_opts.h"

static int have_gnuplot(void) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  char buf[4096];
  for (const char *p = path; *p;) {
    const char *c = strchr(p, ':');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)n, p);
    if (access(buf, X_OK) == 0) return 1;
    p += n + (c != NULL);
  }
  return 0;
}

int lade_tool_gnuplot(const char *cmd, const char *svg, const char *script) {
  if (!have_gnuplot()) {
    fprintf(stderr,
            "lade %s: gnuplot is not installed, so %s was not drawn (Debian: apt-get install gnuplot-nox)\n", cmd,
            svg);
    return 1;
  }
  FILE *g = popen("gnuplot", "w");
  if (!g) return die(cmd, "cannot start gnuplot%s", "");
  fprintf(g, "set terminal svg size 900,540 dynamic enhanced font 'sans,12'\nset output '%s'\n%s\n", svg, script);
  int st = pclose(g);
  if (st != 0) return die(cmd, "gnuplot failed drawing %s", svg);
  fprintf(stderr, "lade %s: wrote %s\n", cmd, svg);
  return 0;
}

void lade_tool_sbuf_printf(sbuf_t *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t nc = (b->cap + (size_t)k + 1) * 2;
    char *np = realloc(b->p, nc);
    if (!np) return;
    b->p = np;
    b->cap = nc;
  }
}
