/*
 * tar.c - the `tar` source: WebDataset shards on a local file system. A
 * sample is a group of consecutive members sharing a key (the name up to the
 * first '.' of its last path component: `a/n01_10026.jpg` and
 * `a/n01_10026.cls` are sample `a/n01_10026`); the member the transform needs
 * is its bytes, its label comes from the `.cls` member or else from the
 * key's folder.
 *
 * Random access for any plan comes from an index per shard (every regular
 * member's data offset and size, and the value of each `.cls`), built by one
 * sequential pass over the shard's headers the first time it is opened and
 * stored beside the shard (`SHARD.tar.ladeidx`) or in cache_dir
 * (`tarindex-HASH.bin`), checksummed and keyed by the shard's size and
 * mtime: a changed shard, or a damaged index, is indexed again. Reads are
 * one pread of the member's data: thread-safe, no lock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source.h"
#include "tarfmt.h"
#ifdef LADE_HAVE_CURL
#include "source/http.h"
#include "source/s3auth.h"
#endif

#define IDX_MAGIC "LADETAR1"
#define MAX_SHARDS 10000000u
#define KEEP_OPEN 512u  /* more shards than this are opened per read */
#define CLS_MAX 64u     /* bytes of a .cls member */
#define NO_CLS INT64_MIN

/* Strings back to back in one arena, found by offset. */
typedef struct strs {
  char *a;
  size_t len, cap;
  uint64_t *off;
  size_t n, ncap;
} strs_t;

static int strs_push(strs_t *s, const char *p, size_t n) {
  if (s->len + n + 1 > s->cap) {
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + n + 1) cap *= 2;
    char *a = realloc(s->a, cap);
    if (!a) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
    s->a = a;
    s->cap = cap;
  }
  if (s->n == s->ncap) {
    size_t cap = s->ncap ? s->ncap * 2 : 64;
    uint64_t *o = realloc(s->off, cap * sizeof *o);
    if (!o) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
    s->off = o;
    s->ncap = cap;
  }
  s->off[s->n++] = s->len;
  memcpy(s->a + s->len, p, n);
  s->a[s->len + n] = '\0';
  s->len += n + 1;
  return 0;
}

static void strs_free(strs_t *s) {
  free(s->a);
  free(s->off);
  memset(s, 0, sizeof *s);
}

static const char *strs_at(const strs_t *s, size_t i) { return s->a + s->off[i]; }

/* One shard's index: its regular members in archive order. */
typedef struct member {
  uint64_t data_off, size;
  int64_t cls; /* the .cls value, or NO_CLS */
} member_t;

typedef struct shard_index {
  member_t *m;
  size_t n, cap;
  strs_t names;
} shard_index_t;

typedef struct tar_impl {
  strs_t shards;      /* shard paths as shown */
  int *fd;            /* per shard, or NULL: opened per read */
  strs_t names;       /* per sample: its chosen member's name */
  uint32_t *shard;    /* per sample */
  uint64_t *shard_off; /* shards + 1: the shards plan's offsets */
  uint64_t *off;      /* per sample: data offset of its member */
  uint64_t *sizes;    /* per sample: bytes of its member */
  int32_t *labels;
  uint64_t count, cap;
  char **class_names;
  char *class_arena;
  uint64_t max_sample;
  uint64_t skipped;   /* groups without the member the transform needs */
  /* remote shards (http(s)://): reads are Range requests through `http` */
  int remote;
  uint64_t gap, max_req; /* coalescing: the largest gap inside one request, its most bytes */
  uint64_t *shard_ver;   /* per remote shard: a hash of its size and ETag/Last-Modified (version op) */
#ifdef LADE_HAVE_CURL
  lade__http_t *http;
  int s3;             /* s3:// shards, all in w's bucket, signed as w says */
  lade__s3_where_t w;
#endif
} tar_impl_t;

/* ------------------------------------------------------------ shard list */

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The .tar files directly in folder root, sorted byte-wise. */
static int list_folder(strs_t *out, const char *root) {
  DIR *d = opendir(root);
  if (!d) return lade__fail(LADE_EIO, "cannot read folder %s: %s", root, strerror(errno));
  strs_t tmp = {0};
  int rc = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !has_suffix(e->d_name, ".tar")) continue;
    rc = strs_push(&tmp, e->d_name, strlen(e->d_name));
  }
  closedir(d);
  char **v = rc || !tmp.n ? NULL : malloc(tmp.n * sizeof *v);
  if (!rc && tmp.n && !v) rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
  if (!rc && !tmp.n) rc = lade__fail(LADE_EEMPTY, "no .tar files in folder %s", root);
  if (!rc) {
    for (size_t i = 0; i < tmp.n; i++) v[i] = tmp.a + tmp.off[i];
    qsort(v, tmp.n, sizeof *v, cmp_str);
    char path[LADE_PATH_MAX * 2];
    for (size_t i = 0; !rc && i < tmp.n; i++) {
      lade__path_join(path, sizeof path, root, v[i]);
      rc = strs_push(out, path, strlen(path));
    }
  }
  free(v);
  strs_free(&tmp);
  return rc;
}

/* Reads a small whole file (a list file, a stored index) into b; errors
 * name the file as given. */
static int read_small(const char *path, uint64_t max, lade__buf_t *b) {
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
static int is_url(const char *s) {
  return !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8) || !strncmp(s, "s3://", 5);
}

/* The lines of a shard list `file` (its bytes in b): one shard per line;
 * blank lines and lines starting with '#' skipped; a URL is kept as it is,
 * another relative path is relative to `base` (the list's folder or URL
 * folder, which ends with '/' for a URL). */
static int list_lines(strs_t *out, const lade__buf_t *b, const char *base, const char *file) {
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
    if (memchr(b->data + s, 0, e - s) || e - s >= LADE_PATH_MAX) {
      rc = lade__fail(LADE_EFORMAT, "shard list %s, line %llu: not a path", file, (unsigned long long)line);
      break;
    }
    char rel[LADE_PATH_MAX], path[LADE_PATH_MAX * 2];
    memcpy(rel, b->data + s, e - s);
    rel[e - s] = '\0';
    if (rel[0] == '/' || is_url(rel))
      snprintf(path, sizeof path, "%s", rel);
    else if (is_url(base))
      snprintf(path, sizeof path, "%s%s", base, rel);
    else
      lade__path_join(path, sizeof path, base, rel);
    rc = strs_push(out, path, strlen(path));
  }
  if (!rc && out->n == 0) rc = lade__fail(LADE_EEMPTY, "shard list %s names no shards", file);
  return rc;
}

/* A local list file (list_lines). */
static int list_file(strs_t *out, const char *file) {
  lade__buf_t b = {0};
  int rc = read_small(file, 64u << 20, &b);
  if (rc) {
    lade__buf_free(&b);
    return rc;
  }
  char dir[LADE_PATH_MAX];
  const char *slash = strrchr(file, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
  if (slash == file) snprintf(dir, sizeof dir, "/");
  rc = list_lines(out, &b, dir, file);
  lade__buf_free(&b);
  return rc;
}

static int parse_u64(const char *s, size_t n, uint64_t *v) {
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
static int brace_expand(strs_t *out, const char *pat, const char *whole) {
  const char *o = strchr(pat, '{');
  if (!o) {
    if (out->n >= MAX_SHARDS) return lade__fail(LADE_ERANGE, "brace pattern %s gives more than %u shards", whole, MAX_SHARDS);
    return strs_push(out, pat, strlen(pat));
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
  if (dots && parse_u64(body, (size_t)(dots - body), &a) == 0 && parse_u64(dots + 2, (size_t)(c - dots - 2), &b) == 0) {
    size_t wa = (size_t)(dots - body), wb = (size_t)(c - dots - 2);
    int pad = (wa > 1 && body[0] == '0') || (wb > 1 && dots[2] == '0');
    int width = pad ? (int)(wa > wb ? wa : wb) : 0;
    if ((a <= b ? b - a : a - b) >= MAX_SHARDS) {
      free(buf);
      return lade__fail(LADE_ERANGE, "brace pattern %s gives more than %u shards", whole, MAX_SHARDS);
    }
    for (uint64_t k = a;; k = a <= b ? k + 1 : k - 1) {
      snprintf(buf, strlen(pat) + 64, "%.*s%0*llu%s", (int)plen, pat, width, (unsigned long long)k, c + 1);
      rc = brace_expand(out, buf, whole);
      if (rc || k == b) break;
    }
  } else {
    const char *s = body;
    for (;;) {
      const char *comma = memchr(s, ',', (size_t)(c - s));
      const char *e = comma ? comma : c;
      snprintf(buf, strlen(pat) + 64, "%.*s%.*s%s", (int)plen, pat, (int)(e - s), s, c + 1);
      rc = brace_expand(out, buf, whole);
      if (rc || !comma) break;
      s = comma + 1;
    }
  }
  free(buf);
  return rc;
}

/* ------------------------------------------------------------- the index */

/* Buffered sequential reads of a shard for the tar reader. */
typedef struct rd {
  int fd;
  uint8_t *buf;
  size_t cap, len;
  uint64_t at; /* file offset of buf[0] */
} rd_t;

static long rd_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  rd_t *r = ctx;
  size_t done = 0;
  while (done < len) {
    uint64_t o = off + done;
    if (o >= r->at && o < r->at + r->len) {
      size_t k = (size_t)LADE_MIN(r->at + r->len - o, (uint64_t)(len - done));
      memcpy((uint8_t *)dst + done, r->buf + (o - r->at), k);
      done += k;
      continue;
    }
    if (len - done >= r->cap) { /* a large read goes straight to dst */
      ssize_t n = pread(r->fd, (uint8_t *)dst + done, len - done, (off_t)o);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -errno;
      if (n == 0) break;
      done += (size_t)n;
      continue;
    }
    ssize_t n = pread(r->fd, r->buf, r->cap, (off_t)o);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    r->at = o;
    r->len = (size_t)n;
    if (n == 0) break;
  }
  return (long)done;
}

static void index_free(shard_index_t *x) {
  free(x->m);
  strs_free(&x->names);
  memset(x, 0, sizeof *x);
}

static int index_push(shard_index_t *x, uint64_t off, uint64_t size, int64_t cls, const char *name, size_t nlen) {
  if (x->n == x->cap) {
    size_t cap = x->cap ? x->cap * 2 : 256;
    member_t *m = realloc(x->m, cap * sizeof *m);
    if (!m) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
    x->m = m;
    x->cap = cap;
  }
  x->m[x->n++] = (member_t){off, size, cls};
  return strs_push(&x->names, name, nlen);
}

static int is_cls(const char *name) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  const char *dot = strchr(base, '.');
  return dot && strcmp(dot + 1, "cls") == 0;
}

/* A .cls member's value: a decimal integer in [0, 2^24), spaces around. */
static int parse_cls(const uint8_t *d, size_t n, int64_t *v) {
  size_t s = 0, e = n;
  while (s < e && (d[s] == ' ' || d[s] == '\t' || d[s] == '\n' || d[s] == '\r')) s++;
  while (e > s && (d[e - 1] == ' ' || d[e - 1] == '\t' || d[e - 1] == '\n' || d[e - 1] == '\r')) e--;
  uint64_t x;
  if (parse_u64((const char *)d + s, e - s, &x) != 0 || x >= (1u << 24)) return -1;
  *v = (int64_t)x;
  return 0;
}

/* One pass over the shard's headers, read through `fn` (a local shard's
 * buffered preads, or a remote shard's streamed GET). */
static int index_walk(shard_index_t *x, lade__tar_pread_fn fn, void *ctx, uint64_t size, const char *shard) {
  lade__tar_reader_t t;
  lade__tar_init(&t, fn, ctx, size);
  lade__tar_member_t m;
  int rc;
  while ((rc = lade__tar_next(&t, &m)) == 1) {
    if (!m.regular) continue;
    int64_t cls = NO_CLS;
    if (is_cls(m.name)) {
      uint8_t b[CLS_MAX];
      long n = m.size <= CLS_MAX ? fn(ctx, b, (size_t)m.size, m.data_off) : -1;
      if (n != (long)m.size || parse_cls(b, (size_t)m.size, &cls) != 0) {
        char v[CLS_MAX + 1] = "";
        if (n > 0) snprintf(v, sizeof v, "%.*s", (int)n, (const char *)b);
        rc = lade__fail(LADE_EFORMAT, "%s: member '%s': not a class number below 2^24 (%llu bytes%s%s%s)", shard, m.name,
                        (unsigned long long)m.size, n > 0 ? ": \"" : "", v, n > 0 ? "\"" : "");
        break;
      }
    }
    rc = index_push(x, m.data_off, m.size, cls, m.name, m.name_len);
    if (rc) break;
  }
  if (rc < 0 && strncmp(lade_last_error(), shard, strlen(shard)) != 0) lade__fail_prefix(rc, "%s: ", shard);
  lade__tar_free(&t);
  return rc < 0 ? rc : 0;
}

static int index_build(shard_index_t *x, int fd, uint64_t size, const char *shard) {
  rd_t r = {.fd = fd, .cap = 1u << 20};
  r.buf = malloc(r.cap);
  if (!r.buf) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  int rc = index_walk(x, rd_pread, &r, size, shard);
  free(r.buf);
  return rc;
}

typedef struct idx_hdr {
  char magic[8];
  uint64_t shard_size, mtime_sec, mtime_nsec;
  uint64_t count, names_len;
} idx_hdr_t;

static void index_path(char *out, size_t size, const struct lade_config *cfg, const char *shard) {
  if (cfg->cache_dir[0]) {
    char abs[PATH_MAX];
    const char *p = realpath(shard, abs) ? abs : shard;
    snprintf(out, size, "%s/tarindex-%016llx.bin", cfg->cache_dir,
             (unsigned long long)lade__hash64(p, strlen(p), 0x7461726964780000ull));
  } else {
    snprintf(out, size, "%s.ladeidx", shard);
  }
}

/* The version of a shard an index was made from: a local shard's size and
 * mtime (ns), a remote one's size and a hash of its ETag (else its
 * Last-Modified). */
typedef struct shard_ver {
  uint64_t size, a, b;
} shard_ver_t;

static shard_ver_t ver_of_stat(const struct stat *st) {
  return (shard_ver_t){(uint64_t)st->st_size, (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec};
}

/* Loads a stored index when it is whole (checksum) and made from this
 * version of the shard; else returns -1 and x is empty. */
static int index_load_ver(shard_index_t *x, const char *path, shard_ver_t v) {
  lade__buf_t b = {0};
  int ok = 0;
  if (read_small(path, 1ull << 34, &b) != 0) goto out;
  idx_hdr_t h;
  if (b.len < sizeof h + 8) goto out;
  memcpy(&h, b.data, sizeof h);
  uint64_t sum;
  memcpy(&sum, b.data + b.len - 8, 8);
  if (memcmp(h.magic, IDX_MAGIC, 8) != 0 || sum != lade__hash64(b.data, b.len - 8, 0)) goto out;
  if (h.shard_size != v.size || h.mtime_sec != v.a || h.mtime_nsec != v.b) goto out;
  if (h.count > (b.len - sizeof h) / sizeof(member_t) || h.names_len != b.len - 8 - sizeof h - h.count * sizeof(member_t))
    goto out;
  const uint8_t *mp = b.data + sizeof h;
  const char *names = (const char *)mp + h.count * sizeof(member_t), *np = names, *nend = names + h.names_len;
  if (h.names_len && nend[-1] != '\0') goto out;
  for (uint64_t i = 0; i < h.count; i++) {
    member_t m;
    memcpy(&m, mp + i * sizeof m, sizeof m);
    const char *z = np < nend ? memchr(np, 0, (size_t)(nend - np)) : NULL;
    if (!z || m.data_off > h.shard_size || m.size > h.shard_size - m.data_off ||
        (m.cls != NO_CLS && (m.cls < 0 || m.cls >= (1 << 24))))
      goto out;
    if (index_push(x, m.data_off, m.size, m.cls, np, (size_t)(z - np)) != 0) goto out;
    np = z + 1;
  }
  ok = np == nend;
out:
  lade__buf_free(&b);
  lade__clear_error();
  if (!ok) index_free(x);
  return ok ? 0 : -1;
}

static int index_load(shard_index_t *x, const char *path, const struct stat *st) {
  return index_load_ver(x, path, ver_of_stat(st));
}

/* Stores the index (temp file + rename, so a reader never sees half of it).
 * A failure (read-only folder) is not an error: the next open indexes again. */
static void index_store(const shard_index_t *x, const char *path, shard_ver_t v, const struct lade_config *cfg) {
  if (cfg->cache_dir[0] && lade__mkdir_private(cfg->cache_dir) != 0) {
    lade__clear_error();
    return;
  }
  idx_hdr_t h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, IDX_MAGIC, 8);
  h.shard_size = v.size;
  h.mtime_sec = v.a;
  h.mtime_nsec = v.b;
  h.count = x->n;
  h.names_len = x->names.len;
  size_t total = sizeof h + x->n * sizeof(member_t) + x->names.len + 8;
  uint8_t *b = malloc(total);
  if (!b) return;
  memcpy(b, &h, sizeof h);
  if (x->n) memcpy(b + sizeof h, x->m, x->n * sizeof(member_t));
  if (x->names.len) memcpy(b + sizeof h + x->n * sizeof(member_t), x->names.a, x->names.len);
  uint64_t sum = lade__hash64(b, total - 8, 0);
  memcpy(b + total - 8, &sum, 8);
  char tmp[LADE_PATH_MAX + 160];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    size_t done = 0;
    while (done < total) {
      ssize_t n = write(fd, b + done, total - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += (size_t)n;
    }
    int bad = done != total;
    if (close(fd) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) unlink(tmp);
  }
  free(b);
}

/* --------------------------------------------------------------- samples */

enum { WANT_IMAGE, WANT_NPY, WANT_RAW };

/* The rank of a member's extension for the transform: lower is preferred,
 * -1 never taken. Images in lade__image_exts order (.jpg first), then .npy
 * (raw only), then any other extension but .cls (raw only). */
static int ext_rank(const char *ext, int want) {
  int r = 0;
  if (want != WANT_NPY)
    for (const char *const *e = lade__image_exts; *e; e++, r++)
      if (strcasecmp(ext, *e + 1) == 0) return r;
  if (strcasecmp(ext, "npy") == 0) return want == WANT_IMAGE ? -1 : 100;
  if (want == WANT_RAW && strcmp(ext, "cls") != 0) return 200;
  return -1;
}

static int push_sample(tar_impl_t *t, uint32_t shard, const member_t *m, const char *name, int32_t label) {
  if (t->count == t->cap) {
    uint64_t cap = t->cap ? t->cap * 2 : 1024;
    uint32_t *s = realloc(t->shard, cap * sizeof *s);
    if (s) t->shard = s;
    uint64_t *o = realloc(t->off, cap * sizeof *o);
    if (o) t->off = o;
    uint64_t *z = realloc(t->sizes, cap * sizeof *z);
    if (z) t->sizes = z;
    int32_t *l = realloc(t->labels, cap * sizeof *l);
    if (l) t->labels = l;
    if (!s || !o || !z || !l) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
    t->cap = cap;
  }
  t->shard[t->count] = shard;
  t->off[t->count] = m->data_off;
  t->sizes[t->count] = m->size;
  t->labels[t->count] = label; /* the .cls value, or -1 (none) for now */
  t->count++;
  return strs_push(&t->names, name, strlen(name));
}

/* Length of the key of a member name (up to the first '.' of its last
 * component), or 0 when the last component has no '.' (not a sample's). */
static size_t key_len(const char *name) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  const char *dot = strchr(base, '.');
  return dot && dot > base ? (size_t)(dot - name) : 0;
}

/* Groups a shard's members into samples. */
static int add_shard_samples(tar_impl_t *t, uint32_t si, const shard_index_t *x, int want, uint64_t *with_cls) {
  const char *shard = strs_at(&t->shards, si);
  size_t i = 0;
  while (i < x->n) {
    const char *first = strs_at(&x->names, i);
    size_t kl = key_len(first);
    if (!kl) {
      i++;
      continue;
    }
    size_t j = i + 1;
    while (j < x->n) {
      const char *nm = strs_at(&x->names, j);
      if (key_len(nm) != kl || memcmp(nm, first, kl) != 0) break;
      for (size_t k = i; k < j; k++)
        if (strcmp(strs_at(&x->names, k) + kl, nm + kl) == 0)
          return lade__fail(LADE_EFORMAT, "%s: member '%s' appears twice in sample '%.*s'", shard, nm, (int)kl, first);
      j++;
    }
    int best = -1, best_rank = INT32_MAX;
    int64_t cls = NO_CLS;
    for (size_t k = i; k < j; k++) {
      const char *ext = strs_at(&x->names, k) + kl + 1;
      if (x->m[k].cls != NO_CLS) cls = x->m[k].cls;
      int r = ext_rank(ext, want);
      if (r >= 0 && r < best_rank) best = (int)k, best_rank = r;
    }
    if (best < 0) {
      t->skipped++;
    } else {
      int rc = push_sample(t, si, &x->m[best], strs_at(&x->names, (size_t)best), cls == NO_CLS ? -1 : (int32_t)cls);
      if (rc) return rc;
      if (cls != NO_CLS) (*with_cls)++;
    }
    i = j;
  }
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  return strcmp(*x, *y);
}

/* Labels: from .cls members when every sample has one; else from the key's
 * folder (its last folder component) when every key has a folder; else
 * none (-1). Some samples with a .cls and some without is an error. */
static int assign_labels(tar_impl_t *t, uint64_t with_cls, lade__source_t *s) {
  if (with_cls == t->count) {
    int32_t mx = -1;
    for (uint64_t i = 0; i < t->count; i++) mx = LADE_MAX(mx, t->labels[i]);
    s->classes = (uint32_t)(mx + 1);
    s->labels = t->labels;
    return 0;
  }
  if (with_cls) {
    for (uint64_t i = 0; i < t->count; i++)
      if (t->labels[i] < 0) {
        const char *nm = strs_at(&t->names, i);
        return lade__fail(LADE_EFORMAT, "%s: sample '%.*s' has no .cls member while %llu other samples have one",
                          strs_at(&t->shards, t->shard[i]), (int)key_len(nm), nm, (unsigned long long)with_cls);
      }
  }
  /* the folder of each key, as a NUL-terminated copy */
  char *arena = malloc(t->names.len + 1);
  char **fold = malloc((t->count ? t->count : 1) * sizeof *fold);
  char **uniq = malloc((t->count ? t->count : 1) * sizeof *uniq);
  int rc = 0;
  if (!arena || !fold || !uniq) {
    rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
    goto out;
  }
  size_t pos = 0;
  for (uint64_t i = 0; i < t->count; i++) {
    const char *nm = strs_at(&t->names, i);
    const char *base = nm + key_len(nm);
    while (base > nm && base[-1] != '/') base--;
    if (base == nm) goto out; /* a key without a folder: unlabelled */
    const char *b = base - 1, *a = b;
    while (a > nm && a[-1] != '/') a--;
    fold[i] = arena + pos;
    memcpy(arena + pos, a, (size_t)(b - a));
    arena[pos + (size_t)(b - a)] = '\0';
    pos += (size_t)(b - a) + 1;
    uniq[i] = fold[i];
  }
  qsort(uniq, t->count, sizeof *uniq, cmp_name);
  size_t nc = 0;
  for (uint64_t i = 0; i < t->count; i++)
    if (!nc || strcmp(uniq[nc - 1], uniq[i]) != 0) uniq[nc++] = uniq[i];
  if (nc > (1u << 24)) {
    rc = lade__fail(LADE_ERANGE, "tar source: more than 2^24 class folders");
    goto out;
  }
  for (uint64_t i = 0; i < t->count; i++) {
    char **hit = bsearch(&fold[i], uniq, nc, sizeof *uniq, cmp_name);
    t->labels[i] = (int32_t)(hit - uniq);
  }
  t->class_names = uniq;
  t->class_arena = arena;
  uniq = NULL;
  arena = NULL;
  s->classes = (uint32_t)nc;
  s->labels = t->labels;
  s->class_names = (const char *const *)t->class_names;
out:
  free(arena);
  free(fold);
  free(uniq);
  return rc;
}

/* ------------------------------------------------------------ the vtable */

static void tar_close(lade__source_t *s) {
  tar_impl_t *t = s->impl;
  if (!t) return;
#ifdef LADE_HAVE_CURL
  lade__http_destroy(t->http); /* first: its thread reads the shard list */
  lade__s3_where_free(&t->w);
#endif
  if (t->fd)
    for (size_t i = 0; i < t->shards.n; i++)
      if (t->fd[i] >= 0) close(t->fd[i]);
  free(t->fd);
  free(t->shard_ver);
  strs_free(&t->shards);
  strs_free(&t->names);
  free(t->shard);
  free(t->shard_off);
  free(t->off);
  free(t->sizes);
  free(t->labels);
  free(t->class_names);
  free(t->class_arena);
  free(t);
  s->impl = NULL;
  s->labels = NULL;
  s->sizes = NULL;
  s->class_names = NULL;
}

/* ------------------------------------------------------- remote shards */

/* A source naming remote shards: a URL (a shard, a brace pattern, a list
 * file), or a local list file whose first shard is a URL. */
int lade__tar_source_remote(const char *source) {
  if (is_url(source)) return 1;
  struct stat st;
  if (stat(source, &st) != 0 || !S_ISREG(st.st_mode) || has_suffix(source, ".tar")) return 0;
  strs_t one = {0};
  lade__buf_t b = {0};
  int remote = read_small(source, 64u << 20, &b) == 0 && list_lines(&one, &b, ".", source) == 0 &&
               is_url(strs_at(&one, 0));
  lade__clear_error();
  lade__buf_free(&b);
  strs_free(&one);
  return remote;
}

#ifdef LADE_HAVE_CURL

/* The http module's hooks: an object is a shard, named by its URL. */
/* The key of an s3:// name in the source's bucket, or NULL for another bucket. */
static const char *s3_key(const tar_impl_t *t, const char *name) {
  size_t bl = strlen(t->w.bucket);
  if (strncmp(name, "s3://", 5) || strncmp(name + 5, t->w.bucket, bl) || name[5 + bl] != '/') return NULL;
  return name + 5 + bl + 1;
}

/* The URL a request for `name` goes to (signed for s3:// names). */
static int name_url(const tar_impl_t *t, const char *name, char *url, size_t size) {
  if (t->s3) {
    const char *key = s3_key(t, name);
    return key ? lade__s3_url(&t->w, key, NULL, url, size) : -1;
  }
  int n = snprintf(url, size, "%s", name);
  return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int shard_url(void *ctx, uint64_t obj, char *url, size_t size) {
  const tar_impl_t *t = ctx;
  return name_url(t, strs_at(&t->shards, obj), url, size);
}

static void shard_name(void *ctx, uint64_t obj, char *buf, size_t size) {
  const tar_impl_t *t = ctx;
  snprintf(buf, size, "%s", strs_at(&t->shards, obj));
}

/* The http module for the shards `first` is one of; s3:// shards get the
 * s3 source's endpoint, addressing and credentials (s3auth.c). */
static int remote_http(tar_impl_t *t, const struct lade_config *cfg, lade__source_t *s, const char *first) {
  lade__http_opts_t o = {.timeout_ms = cfg->s3_timeout_ms,
                         .connect_timeout_ms = cfg->s3_connect_timeout_ms,
                         .retries = cfg->s3_retries,
                         .retry_base_ms = cfg->s3_retry_base_ms,
                         .fixed_conc = cfg->s3_concurrency,
                         .max_conc = cfg->s3_max_concurrency,
                         .max_body = cfg->max_sample_bytes};
  t->s3 = !strncmp(first, "s3://", 5);
  if (t->s3) {
    int rc = lade__s3_where_init(&t->w, cfg, first);
    if (rc) return rc;
    lade__s3_http_opts(&t->w, cfg, &o);
  }
  o.what = "tar source";
  o.ca_file = cfg->tls_ca_file; /* copied by lade__http_create */
  o.ctx = t;
  o.url = shard_url;
  o.name = shard_name;
  o.src = s;
  t->gap = cfg->coalesce_gap_bytes;
  t->max_req = LADE_MIN(cfg->max_sample_bytes, (uint64_t)16 << 20);
  return lade__http_create(&t->http, &o);
}

/* The shards a URL source names: a brace pattern, one .tar, or a list file
 * fetched from the server (relative lines are relative to its folder). */
typedef struct tar_listing {
  tar_impl_t *t;
  size_t plen; /* the prefix's length: keys with a '/' after it are in sub-folders */
} tar_listing_t;

/* A listed object that is a shard: a .tar directly under the prefix, as a
 * local folder's shards are its .tar files and not its sub-folders'. */
static int push_tar_key(void *ctx, const char *key, size_t klen, uint64_t size) {
  tar_listing_t *l = ctx;
  (void)size;
  if (klen < l->plen + 4 || memcmp(key + klen - 4, ".tar", 4) != 0 || memchr(key + l->plen, '/', klen - l->plen))
    return 0;
  char name[LADE_PATH_MAX + 300];
  int n = snprintf(name, sizeof name, "s3://%s/%.*s", l->t->w.bucket, (int)klen, key);
  if (n < 0 || (size_t)n >= sizeof name)
    return lade__fail(LADE_ERANGE, "s3://%s/%.*s...: name too long", l->t->w.bucket, (int)LADE_MIN(klen, 200), key);
  return strs_push(&l->t->shards, name, (size_t)n);
}

static int remote_shards(tar_impl_t *t, const char *src) {
  if (strchr(src, '{')) return brace_expand(&t->shards, src, src);
  if (has_suffix(src, ".tar")) return strs_push(&t->shards, src, strlen(src));
  if (t->s3 && !has_suffix(src, ".txt")) { /* a prefix: its .tar objects (the listing is sorted by key) */
    char prefix[1100];
    size_t pl = strlen(t->w.path);
    snprintf(prefix, sizeof prefix, "%s%s", t->w.path, pl && t->w.path[pl - 1] != '/' ? "/" : "");
    tar_listing_t l = {t, strlen(prefix)};
    int rc = lade__s3_list(&t->w, t->http, prefix, src, push_tar_key, &l);
    if (!rc && !t->shards.n) rc = lade__fail(LADE_EEMPTY, "%s holds no .tar objects", src);
    return rc;
  }
  char url[8192];
  if (name_url(t, src, url, sizeof url)) return lade__fail(LADE_ERANGE, "%s: name too long", src);
  lade__buf_t b = {0};
  int rc = lade__http_get_blocking(t->http, url, src, &b, 64u << 20, 0, NULL);
  if (!rc) {
    char base[LADE_PATH_MAX];
    const char *slash = strrchr(src, '/');
    snprintf(base, sizeof base, "%.*s", (int)(slash - src + 1), src);
    rc = list_lines(&t->shards, &b, base, src);
  }
  lade__buf_free(&b);
  return rc;
}

/* A remote shard's index: from cache_dir when it was made from the shard's
 * current version (a HEAD: size and ETag or Last-Modified), else one
 * streamed GET of the shard whose headers are parsed as they arrive. */
static int remote_index(tar_impl_t *t, const struct lade_config *cfg, size_t i, shard_index_t *x) {
  const char *shown = strs_at(&t->shards, i);
  char url[8192];
  if (name_url(t, shown, url, sizeof url))
    return lade__fail(LADE_EINVAL, "%s: not in the bucket of the first shard (s3://%s), or too long", shown, t->w.bucket);
  uint64_t size = 0;
  char val[256];
  int rc = lade__http_head(t->http, url, shown, &size, val, sizeof val);
  if (rc) return rc;
  /* b = 2: never equal to a local shard's nanoseconds field by accident of a hash */
  shard_ver_t v = {size, lade__hash64(val, strlen(val), 0x7661), (uint64_t)2 << 32};
  t->shard_ver[i] = lade__hash64(&v, sizeof v, 0x76657273);
  char ipath[LADE_PATH_MAX + 64] = "";
  if (cfg->cache_dir[0]) {
    snprintf(ipath, sizeof ipath, "%s/tarindex-%016llx.bin", cfg->cache_dir,
             (unsigned long long)lade__hash64(url, strlen(url), 0x7461726964780000ull)); /* endpoint included */
    if (index_load_ver(x, ipath, v) == 0) return 0;
  }
  lade__http_stream_t *st = NULL;
  rc = lade__http_stream_open(t->http, url, shown, size, val, &st);
  if (!rc) {
    rc = index_walk(x, lade__http_stream_pread, st, size, shown);
    if (rc && lade__http_stream_error(st)) rc = lade__http_stream_error(st); /* the network's words, not EIO's */
  }
  lade__http_stream_close(st);
  if (!rc && ipath[0]) index_store(x, ipath, v, cfg);
  return rc;
}

/* Names the member in an error of the module ("URL: what" becomes "URL:
 * member 'NAME': what"), as a local shard's read errors do. */
static int name_member(int rc, const char *url, const char *name) {
  static _Thread_local char msg[LADE_HTTP_MSG + LADE_PATH_MAX];
  const char *e = lade_last_error();
  size_t ul = strlen(url);
  if (!strncmp(e, url, ul) && !strncmp(e + ul, ": ", 2)) {
    char rest[LADE_HTTP_MSG];
    snprintf(rest, sizeof rest, "%s", e + ul + 2);
    snprintf(msg, sizeof msg, "%s: member '%s': %s", url, name, rest);
    lade__set_error_text(msg);
    return rc;
  }
  return lade__fail_prefix(rc, "%s: member '%s': ", url, name);
}

static int remote_read(tar_impl_t *t, uint64_t idx, lade__buf_t *out) {
  uint32_t si = t->shard[idx];
  lade__http_part_t p = {idx, 0, t->sizes[idx]};
  lade__http_get_t g = {.obj = si, .off = t->off[idx], .len = p.len, .expect = p.len, .nparts = 1, .parts = &p};
  int rc = lade__http_read(t->http, idx, &g, out);
  return rc ? name_member(rc, strs_at(&t->shards, si), strs_at(&t->names, idx)) : 0;
}

typedef struct span {
  uint64_t idx, off, size;
  uint32_t shard;
} span_t;

static int cmp_span(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
  if (x->off != y->off) return x->off < y->off ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* A batch's samples, sorted by (shard, offset); neighbours of one shard
 * whose gap is at most `gap` bytes share one Range request of at most
 * max_req bytes, split into samples when it arrives (paper 002's chunk
 * loading, for tar members). */
static int tar_submit(lade__source_t *s, const uint64_t *idx, size_t n, int background) {
  tar_impl_t *t = s->impl;
  span_t *v = malloc((n ? n : 1) * sizeof *v);
  lade__http_part_t *parts = malloc((n ? n : 1) * sizeof *parts);
  lade__http_get_t *gets = malloc((n ? n : 1) * sizeof *gets);
  int rc = !v || !parts || !gets ? lade__fail(LADE_ENOMEM, "tar source: out of memory") : 0;
  size_t k = 0, ng = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    if (idx[i] >= t->count) {
      rc = lade__fail(LADE_ERANGE, "tar source: sample %llu out of range (%llu samples)", (unsigned long long)idx[i],
                      (unsigned long long)t->count);
      break;
    }
    uint64_t size = t->sizes[idx[i]];
    if (size == 0 || size > t->max_sample) continue; /* read() answers these without a request */
    v[k++] = (span_t){idx[i], t->off[idx[i]], size, t->shard[idx[i]]};
  }
  if (!rc) qsort(v, k, sizeof *v, cmp_span);
  for (size_t i = 0; !rc && i < k;) {
    uint64_t start = v[i].off, end = v[i].off + v[i].size;
    size_t j = i;
    while (j + 1 < k && v[j + 1].shard == v[i].shard && v[j + 1].off <= end + t->gap &&
           LADE_MAX(end, v[j + 1].off + v[j + 1].size) - start <= t->max_req) {
      j++;
      end = LADE_MAX(end, v[j].off + v[j].size);
    }
    for (size_t m = i; m <= j; m++) parts[m] = (lade__http_part_t){v[m].idx, v[m].off - start, v[m].size};
    gets[ng++] = (lade__http_get_t){.obj = v[i].shard, .off = start, .len = end - start, .expect = end - start,
                                    .nparts = (uint32_t)(j - i + 1), .parts = parts + i};
    i = j + 1;
  }
  if (!rc && ng) rc = lade__http_submit(t->http, gets, ng, background);
  free(v);
  free(parts);
  free(gets);
  return rc;
}

/* The disk tier's version of a remote sample: its shard's size and ETag
 * (or Last-Modified) as the HEAD at open found them, and the member's place
 * and size, so a shard rewritten with members of the same sizes is not
 * served from the disk tier with its old bytes. */
static uint64_t tar_remote_version(lade__source_t *s, uint64_t idx) {
  tar_impl_t *t = s->impl;
  uint64_t k[3] = {t->shard_ver[t->shard[idx]], t->off[idx], t->sizes[idx]};
  return lade__hash64(k, sizeof k, 0x74617276) | 2; /* > LADE_VERSION_UNKNOWN */
}

static bool tar_ready(lade__source_t *s, uint64_t idx) {
  tar_impl_t *t = s->impl;
  return idx >= t->count || lade__http_ready(t->http, idx);
}

static void tar_stats(lade__source_t *s, lade__source_stats_t *out) {
  tar_impl_t *t = s->impl;
  memset(out, 0, sizeof *out);
  if (t && t->http) lade__http_stats(t->http, out);
}

#endif /* LADE_HAVE_CURL */

/* The shards the source names (see docs/sources.md). */
static int tar_shards(strs_t *out, const char *src) {
  struct stat st;
  if (stat(src, &st) != 0) {
    if (strchr(src, '{')) return brace_expand(out, src, src);
    return lade__fail(errno == ENOENT ? LADE_ENOENT : LADE_EIO, "dataset %s: %s", src, strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return list_folder(out, src);
  if (S_ISREG(st.st_mode) && !has_suffix(src, ".tar")) return list_file(out, src);
  return strs_push(out, src, strlen(src));
}

static int tar_open(lade__source_t *s, const struct lade_config *cfg) {
  tar_impl_t *t = calloc(1, sizeof *t);
  if (!t) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  s->impl = t;
  t->max_sample = cfg->max_sample_bytes;
  int want = cfg->transform == LADE_XF_NPY ? WANT_NPY : cfg->transform == LADE_XF_RAW ? WANT_RAW : WANT_IMAGE;
  int rc = is_url(cfg->source) ? 0 : tar_shards(&t->shards, cfg->source);
  t->remote = is_url(cfg->source) || (!rc && is_url(strs_at(&t->shards, 0)));
#ifdef LADE_HAVE_CURL
  if (!rc && t->remote) rc = remote_http(t, cfg, s, is_url(cfg->source) ? cfg->source : strs_at(&t->shards, 0));
  if (!rc && is_url(cfg->source)) rc = remote_shards(t, cfg->source);
#else
  if (!rc && t->remote)
    rc = lade__fail(LADE_EUNSUPPORTED, "dataset %s: http(s):// shards need libcurl, which this build lacks "
                    "(LADE_WITH_CURL)", cfg->source);
#endif
  for (size_t i = 0; !rc && i < t->shards.n; i++)
    if (is_url(strs_at(&t->shards, i)) != t->remote)
      rc = lade__fail(LADE_EINVAL, "dataset %s: shard %s is %s, the first is %s; shards are all local or all remote",
                      cfg->source, strs_at(&t->shards, i), t->remote ? "local" : "a URL", t->remote ? "a URL" : "local");
  if (!rc && t->shards.n > UINT32_MAX) rc = lade__fail(LADE_ERANGE, "dataset %s: too many shards", cfg->source);
  if (!rc && !(t->fd = malloc(t->shards.n * sizeof *t->fd))) rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
  for (size_t i = 0; !rc && i < t->shards.n; i++) t->fd[i] = -1;
  if (!rc && t->remote && !(t->shard_ver = calloc(t->shards.n, sizeof *t->shard_ver)))
    rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
  uint64_t with_cls = 0;
  for (size_t i = 0; !rc && i < t->shards.n; i++) {
    const char *shard = strs_at(&t->shards, i);
#ifdef LADE_HAVE_CURL
    if (t->remote) {
      shard_index_t x = {0};
      rc = remote_index(t, cfg, i, &x);
      if (!rc) rc = add_shard_samples(t, (uint32_t)i, &x, want, &with_cls);
      index_free(&x);
      continue;
    }
#endif
    struct stat st;
    int fd = lade__open_regular(AT_FDCWD, shard, shard, &st);
    if (fd < 0) {
      rc = fd;
      break;
    }
    char ipath[LADE_PATH_MAX + 64];
    index_path(ipath, sizeof ipath, cfg, shard);
    shard_index_t x = {0};
    if (index_load(&x, ipath, &st) != 0) {
      rc = index_build(&x, fd, (uint64_t)st.st_size, shard);
      if (!rc) index_store(&x, ipath, ver_of_stat(&st), cfg);
    }
    if (!rc) rc = add_shard_samples(t, (uint32_t)i, &x, want, &with_cls);
    index_free(&x);
    if (i < KEEP_OPEN)
      t->fd[i] = fd;
    else
      close(fd);
  }
  if (!rc && t->count == 0)
    rc = lade__fail(LADE_EEMPTY, "dataset %s: no samples with a%s member in %zu shard%s (%llu groups without one)",
                    cfg->source, want == WANT_NPY ? " .npy" : want == WANT_RAW ? " data" : "n image", t->shards.n,
                    t->shards.n == 1 ? "" : "s", (unsigned long long)t->skipped);
  if (!rc) rc = assign_labels(t, with_cls, s);
#ifdef LADE_HAVE_CURL
  if (!rc && t->remote) rc = lade__http_start(t->http, t->count);
#endif
  if (rc) {
    tar_close(s);
    return rc;
  }
  s->count = t->count;
  s->sizes = t->sizes;
  /* the samples of a shard are consecutive: the offsets of the shards plan */
  t->shard_off = calloc(t->shards.n + 1, sizeof *t->shard_off);
  if (!t->shard_off) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  for (uint64_t i = 0; i < t->count; i++) t->shard_off[t->shard[i] + 1]++;
  for (size_t i = 0; i < t->shards.n; i++) t->shard_off[i + 1] += t->shard_off[i];
  s->shard_offsets = t->shard_off;
  s->shards = t->shards.n;
  return 0;
}

static int tar_read(lade__source_t *s, uint64_t idx, lade__buf_t *out) {
  tar_impl_t *t = s->impl;
  uint32_t si = t->shard[idx];
  const char *shard = strs_at(&t->shards, si), *name = strs_at(&t->names, idx);
  uint64_t size = t->sizes[idx], off = t->off[idx];
  if (size > t->max_sample || size >= SIZE_MAX)
    return lade__fail(LADE_ERANGE, "%s: member '%s': %llu bytes, more than max_sample_bytes (%llu); not read", shard,
                      name, (unsigned long long)size, (unsigned long long)t->max_sample);
#ifdef LADE_HAVE_CURL
  if (t->remote && size) return remote_read(t, idx, out);
#endif
  int rc = lade__buf_reserve(out, (size_t)size + 1);
  if (rc) return lade__fail(rc, "%s: member '%s': no memory for its %llu bytes", shard, name, (unsigned long long)size);
  if (!size) {
    out->len = 0;
    return 0;
  }
  int fd = t->fd[si];
  if (fd < 0) {
    struct stat st;
    fd = lade__open_regular(AT_FDCWD, shard, shard, &st);
    if (fd < 0) return fd;
  }
  size_t got = 0;
  while (got < size) {
    ssize_t n = pread(fd, out->data + got, (size_t)size - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = lade__fail(LADE_EIO, "cannot read %s: member '%s': %s", shard, name, strerror(errno));
      break;
    }
    if (n == 0) {
      rc = lade__fail(LADE_EIO, "%s: member '%s' ends after %zu of %llu bytes (the shard changed since it was indexed?)",
                      shard, name, got, (unsigned long long)size);
      break;
    }
    got += (size_t)n;
  }
  if (fd != t->fd[si]) close(fd);
  out->len = rc ? 0 : (size_t)size;
  return rc;
}

/* The disk tier's version of a sample: its shard's, from the descriptor the
 * reads use (so the version always belongs to the bytes read), or a stat of
 * the path for shards opened per read. */
static uint64_t tar_version(lade__source_t *s, uint64_t idx) {
  tar_impl_t *t = s->impl;
  uint32_t si = t->shard[idx];
  struct stat st;
  int fd = t->fd[si];
  return lade__stat_version(fd >= 0 ? fstat(fd, &st) : stat(strs_at(&t->shards, si), &st), &st);
}

/* SHARD/KEY: the shard's path and the sample's key. */
static void tar_describe(lade__source_t *s, uint64_t idx, char *buf, size_t size) {
  tar_impl_t *t = s->impl;
  const char *name = strs_at(&t->names, idx);
  snprintf(buf, size, "%s/%.*s", strs_at(&t->shards, t->shard[idx]), (int)key_len(name), name);
}

const lade__source_ops_t lade__source_tar = {
    .name = "tar",
    .open = tar_open,
    .close = tar_close,
    .read = tar_read,
    .describe = tar_describe,
    .version = tar_version};

#ifdef LADE_HAVE_CURL
/* http(s):// shards: the same source, with submit/ready/stats so the
 * engine keeps many Range requests in flight (select.c picks it). */
const lade__source_ops_t lade__source_tar_remote = {
    .name = "tar",
    .open = tar_open,
    .close = tar_close,
    .read = tar_read,
    .describe = tar_describe,
    .version = tar_remote_version,
    .submit = tar_submit,
    .ready = tar_ready,
    .stats = tar_stats};
#endif
