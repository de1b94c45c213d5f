/*
 * tar_list.c - the shard lists of the tar source's formats and backends
 * (tar_impl.h): the string arrays they are kept in, brace patterns
 * (`train-{000000..000146}.tar`), list files, URLs. Below tar.c and the
 * backends (tar_local.c, tar_http.c), which call it; it calls neither.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tar_impl.h"

#define MAX_SHARDS 10000000u /* a brace pattern naming more is refused */

int lade__tar_strs_push(lade__tar_strs_t *s, const char *p, size_t n) {
  int rc = lade__reserve_bytes(&s->a, &s->cap, s->len + n + 1, 4096, "tar source");
  if (!rc && s->n == s->ncap) {
    size_t cap = s->ncap ? s->ncap * 2 : 64;
    rc = lade__resize_u64(&s->off, cap, "tar source");
    if (!rc) s->ncap = cap;
  }
  if (rc) return rc;
  s->off[s->n++] = s->len;
  memcpy(s->a + s->len, p, n);
  s->a[s->len + n] = '\0';
  s->len += n + 1;
  return 0;
}

void lade__tar_strs_free(lade__tar_strs_t *s) {
  free(s->a);
  free(s->off);
  memset(s, 0, sizeof *s);
}



int lade__tar_has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}


/* Reads a small whole file (a list file, a stored index) into b; errors
 * name the file as given. */
int lade__tar_read_small(const char *path, uint64_t max, lade__buf_t *b) {
  struct stat st;
  int fd = lade__open_regular(AT_FDCWD, path, path, &st);
  if (fd < 0) return fd;
  int rc = 0;
  if ((uint64_t)st.st_size > max)
    rc = lade__fail(LADE_ERANGE, "%s: %llu bytes, more than the %llu expected", path, (unsigned long long)st.st_size,
                    (unsigned long long)max);
  if (!rc) rc = lade__buf_reserve(b, (size_t)st.st_size + 1);
  size_t got = 0;
  while (!rc && got < (size_t)st.st_size) {
    ssize_t n = pread(fd, b->data + got, (size_t)st.st_size - got, (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) rc = lade__fail(LADE_EIO, "cannot read %s: %s", path, strerror(errno));
    if (n == 0) rc = lade__fail(LADE_EIO, "%s changed while it was read", path);
    if (n > 0) got += (size_t)n;
  }
  close(fd);
  b->len = rc ? 0 : got;
  return rc;
}

/* A remote shard's name: an http(s):// URL or an s3:// object. */
int lade__tar_is_url(const char *s) {
  return !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8) || !strncmp(s, "s3://", 5);
}

/* The lines of a shard list `file` (its bytes in b): one shard per line;
 * blank lines and lines starting with '#' skipped; a URL is kept as it is,
 * another relative path is relative to `base` (the list's folder or URL
 * folder, which ends with '/' for a URL). */
int lade__tar_list_lines(lade__tar_strs_t *out, const lade__buf_t *b, const char *base, const char *file) {
  int rc = 0;
  size_t pos = 0;
  uint64_t line = 0;
  while (!rc && pos < b->len) {
    line++;
    uint8_t *nl = memchr(b->data + pos, '\n', b->len - pos);
    size_t end = nl ? (size_t)(nl - b->data) : b->len, s = pos, e = end;
    pos = end + 1;
    while (s < e && (b->data[s] == ' ' || b->data[s] == '\t')) s++;
    while (e > s && (b->data[e - 1] == ' ' || b->data[e - 1] == '\t' || b->data[e - 1] == '\r')) e--;
    if (s == e || b->data[s] == '#') continue;
    if (memchr(b->data + s, 0, e - s) || e - s >= LADE__PATH_MAX) {
      rc = lade__fail(LADE_EFORMAT, "shard list %s, line %llu: not a path", file, (unsigned long long)line);
      break;
    }
    char rel[LADE__PATH_MAX], path[LADE__PATH_MAX * 2];
    memcpy(rel, b->data + s, e - s);
    rel[e - s] = '\0';
    if (rel[0] == '/' || lade__tar_is_url(rel))
      snprintf(path, sizeof path, "%s", rel);
    else if (lade__tar_is_url(base))
      snprintf(path, sizeof path, "%s%s", base, rel);
    else
      lade__path_join(path, sizeof path, base, rel);
    rc = lade__tar_strs_push(out, path, strlen(path));
  }
  if (!rc && out->n == 0) rc = lade__fail(LADE_EEMPTY, "shard list %s names no shards", file);
  return rc;
}


int lade__tar_parse_u64(const char *s, size_t n, uint64_t *v) {
  if (!n || n > 18) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    x = x * 10 + (uint64_t)(s[i] - '0');
  }
  *v = x;
  return 0;
}

/* Expands the first {a..b} or {x,y,z} of pat (then the rest, recursively),
 * as the braceexpand package WebDataset uses: a numeric range keeps the
 * width of an endpoint written with a leading zero. */
int lade__tar_brace_expand(lade__tar_strs_t *out, const char *pat, const char *whole) {
  const char *o = strchr(pat, '{');
  if (!o) {
    if (out->n >= MAX_SHARDS) return lade__fail(LADE_ERANGE, "brace pattern %s gives more than %u shards", whole, MAX_SHARDS);
    return lade__tar_strs_push(out, pat, strlen(pat));
  }
  const char *c = strchr(o, '}');
  if (!c || memchr(o + 1, '{', (size_t)(c - o - 1)))
    return lade__fail(LADE_EINVAL, "brace pattern %s: unbalanced or nested braces", whole);
  const char *body = o + 1;
  size_t blen = (size_t)(c - body), plen = (size_t)(o - pat);
  char *buf = malloc(strlen(pat) + 64);
  if (!buf) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  int rc = 0;
  const char *dots = NULL;
  for (size_t i = 0; i + 1 < blen; i++)
    if (body[i] == '.' && body[i + 1] == '.') {
      dots = body + i;
      break;
    }
  uint64_t a, b;
  if (dots && lade__tar_parse_u64(body, (size_t)(dots - body), &a) == 0 && lade__tar_parse_u64(dots + 2, (size_t)(c - dots - 2), &b) == 0) {
    size_t wa = (size_t)(dots - body), wb = (size_t)(c - dots - 2);
    int pad = (wa > 1 && body[0] == '0') || (wb > 1 && dots[2] == '0');
    int width = pad ? (int)(wa > wb ? wa : wb) : 0;
    if ((a <= b ? b - a : a - b) >= MAX_SHARDS) {
      free(buf);
      return lade__fail(LADE_ERANGE, "brace pattern %s gives more than %u shards", whole, MAX_SHARDS);
    }
    for (uint64_t k = a;; k = a <= b ? k + 1 : k - 1) {
      snprintf(buf, strlen(pat) + 64, "%.*s%0*llu%s", (int)plen, pat, width, (unsigned long long)k, c + 1);
      rc = lade__tar_brace_expand(out, buf, whole);
      if (rc || k == b) break;
    }
  } else {
    const char *s = body;
    for (;;) {
      const char *comma = memchr(s, ',', (size_t)(c - s));
      const char *e = comma ? comma : c;
      snprintf(buf, strlen(pat) + 64, "%.*s%.*s%s", (int)plen, pat, (int)(e - s), s, c + 1);
      rc = lade__tar_brace_expand(out, buf, whole);
      if (rc || !comma) break;
      s = comma + 1;
    }
  }
  free(buf);
  return rc;
}
