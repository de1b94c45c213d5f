/*
 * s3.c - the `s3` source: one object per sample under s3://bucket/prefix on
 * any S3-compatible endpoint (AWS, MinIO, Ceph RGW, s3rver).
 *
 * Design. open() lists the prefix once (paginated ListObjectsV2, blocking,
 * on the engine's worker) or takes the listing from index_dir, else
 * cache_dir. The processes that share that folder (a node's ranks; a job's
 * nodes when index_dir is on a file system they share) list once between
 * them (single flight):
 * the first to find no fresh listing flock()s the listing file while it
 * lists and stores; the others wait for that lock (bounded: nodefile.h,
 * then they list alone, warned) and read what it stored. A lister that dies
 * drops its lock with its last descriptor. Every GET
 * after that goes through the HTTP module (http*.c, docs/http.md: one curl-multi thread,
 * queues, concurrency tuning, retries, size caps, the result table), so this
 * file holds what is S3's own: where and who (endpoint, addressing, SigV4
 * credentials), the listing and its cache, labels, and the words of S3's
 * <Error> replies. A GET expects the listed size; a reply of another size is
 * checked with one HEAD (`refresh`): a replaced object is fetched again at
 * its new size and a cached listing that said otherwise is removed.
 * Listings must end with their closing tag, never repeat a continuation
 * token, and never name a key twice. Secrets live in the impl struct and in
 * curl's options only: no message built here contains them.
 *
 * Locking: none of its own. After open() the impl is read-only but for
 * `cache_dropped`, which only the HTTP module's loop thread touches (the
 * stale and note hooks run there, under the module's lock).
 */
#ifdef LADE_HAVE_CURL

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "source.h"
#include "source/nodefile.h"
#include "http/http.h"
#include "source/labels.h"
#include "source/s3auth.h"
#include "source/s3xml.h"


typedef struct s3_impl {
  /* listing: keys back to back in one arena, no allocation per object */
  char *arena;
  size_t arena_len, arena_cap;
  uint64_t *off, *size;
  int32_t *label;
  uint64_t count, cap;
  /* where: the bucket and the listed folder (prefix ending in '/'), then
   * the endpoint, addressing and credentials (secrets: never printed) */
  char bucket[256], prefix[1024];
  lade__s3_where_t w;
  uint64_t max_sample;             /* max_sample_bytes: no body is read past this */
  /* the listing cache file (cache_dir and listing_ttl set), for messages */
  char cache_file[LADE__PATH_MAX + 64];
  int from_cache, cache_dropped;
  uint64_t cache_created;          /* wall-clock seconds */
  uint64_t listing_ttl;
  int listing_fd;                  /* the listing file's lock while this process lists (-1: none) */
  lade__http_t *http;              /* every request */
} s3_impl_t;

static const char *key_of(const s3_impl_t *d, uint64_t i) { return d->arena + d->off[i]; }

/* ------------------------------------------------------------- listing */

static int list_push(s3_impl_t *d, const char *key, size_t klen, uint64_t size) {
  if (d->count == d->cap) {
    uint64_t cap = d->cap ? d->cap * 2 : 1024;
    int rc = lade__resize_u64(&d->off, cap, "s3 listing");
    if (!rc) rc = lade__resize_u64(&d->size, cap, "s3 listing");
    if (rc) return rc;
    d->cap = cap;
  }
  int rc = lade__reserve_bytes(&d->arena, &d->arena_cap, d->arena_len + klen + 1, 65536, "s3 listing");
  if (rc) return rc;
  memcpy(d->arena + d->arena_len, key, klen);
  d->arena[d->arena_len + klen] = '\0';
  d->off[d->count] = d->arena_len;
  d->size[d->count] = size;
  d->arena_len += klen + 1;
  d->count++;
  return 0;
}

static int list_push_cb(void *ctx, const char *key, size_t klen, uint64_t size) {
  s3_impl_t *d = ctx;
  size_t plen = strlen(d->prefix);
  if (klen == 0 || key[klen - 1] == '/') return 0;  /* folder marker */
  if (strncmp(key, d->prefix, plen) != 0) return 0; /* not ours (a server ignoring prefix) */
  if (d->count % 1000 == 0) lade__nodefile_progress(d->listing_fd); /* a page's worth: the waiters see it */
  return list_push(d, key, klen, size);
}

static _Thread_local const s3_impl_t *sort_impl;
static int cmp_by_label_key(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  const s3_impl_t *d = sort_impl;
  int32_t lx = d->label ? d->label[x] : -1, ly = d->label ? d->label[y] : -1;
  if (lx != ly) return lx < ly ? -1 : 1;
  return strcmp(d->arena + d->off[x], d->arena + d->off[y]);
}

static const char *rel_key_of(void *ctx, uint64_t i) {
  const s3_impl_t *d = ctx;
  return key_of(d, i) + strlen(d->prefix);
}

/* Labels from the keys' folders under the prefix (labels.c: the rule of the
 * dir and tar sources too); the class names are not kept. */
static int labels_from_folders(s3_impl_t *d, uint32_t *classes) {
  char what[1400];
  snprintf(what, sizeof what, "s3://%s/%s", d->bucket, d->prefix);
  lade__classes_t c;
  int rc = lade__labels_from_folders(d->count, rel_key_of, d, 0, d->label, &c, what);
  *classes = c.n;
  lade__classes_free(&c);
  return rc;
}

typedef struct label_line {
  const char *key;
  size_t n;
  int32_t label;
} label_line_t;

static int cmp_label_line(const void *a, const void *b) {
  const label_line_t *x = a, *y = b;
  return lade__cmp_names(x->key, x->n, y->key, y->n);
}

/* label_file: lines "KEY LABEL", KEY relative to the prefix. */
/* Labels are class indices 0..S3_MAX_CLASSES-1 (or -1): the classes are 0..max. */
#define S3_MAX_CLASSES (1 << 24)

static int labels_from_file(s3_impl_t *d, const char *path, uint32_t *classes) {
  lade__buf_t buf = {0};
  int rc;
  if (!strncmp(path, "s3://", 5)) {
    const char *slash = strchr(path + 5, '/');
    size_t blen = slash ? (size_t)(slash - path - 5) : strlen(path + 5);
    if (!slash || blen != strlen(d->bucket) || strncmp(path + 5, d->bucket, blen))
      return lade__fail(LADE_EINVAL, "label_file %s: must be an object in the dataset's bucket s3://%s", path,
                        d->bucket);
    char url[8192];
    if (lade__s3_url(&d->w, slash + 1, NULL, url, sizeof url)) return lade__fail(LADE_ERANGE, "label_file %s: too long", path);
    rc = lade__http_get_blocking(d->http, url, path, &buf, d->max_sample, 0, NULL);
  } else {
    rc = lade__read_file_max(AT_FDCWD, path, ".", d->max_sample, &buf);
    if (rc) rc = lade__fail_prefix(rc, "label_file: ");
  }
  if (!rc) rc = lade__buf_reserve(&buf, buf.len + 1);
  if (rc) {
    lade__buf_free(&buf);
    return rc;
  }
  buf.data[buf.len] = '\0';
  size_t nl = 1;
  for (size_t i = 0; i < buf.len; i++) nl += buf.data[i] == '\n';
  label_line_t *lines = malloc(nl * sizeof *lines);
  if (!lines) {
    lade__buf_free(&buf);
    return lade__fail(LADE_ENOMEM, "label_file: out of memory");
  }
  size_t n = 0, lineno = 0;
  int32_t maxl = -1;
  for (char *p = (char *)buf.data; !rc && *p;) {
    char *eol = strchr(p, '\n');
    if (eol) *eol = '\0';
    lineno++;
    size_t len = strlen(p);
    while (len && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t')) p[--len] = '\0';
    if (len && p[0] != '#') {
      char *sp = p + len;
      while (sp > p && sp[-1] != ' ' && sp[-1] != '\t') sp--;
      char *e;
      errno = 0;
      long v = strtol(sp, &e, 10);
      size_t klen = (size_t)(sp - p);
      while (klen && (p[klen - 1] == ' ' || p[klen - 1] == '\t')) klen--;
      if (sp == p || *e || errno || v < -1 || klen == 0)
        rc = lade__fail(LADE_EFORMAT, "label_file %s line %zu: expected 'KEY LABEL'", path, lineno);
      else if (v >= S3_MAX_CLASSES) /* the classes are 0..max label: a huge label is a huge class list */
        rc = lade__fail(LADE_EFORMAT, "label_file %s line %zu: label %ld is not below %d", path, lineno, v,
                        S3_MAX_CLASSES);
      else {
        lines[n++] = (label_line_t){p, klen, (int32_t)v};
        if ((int32_t)v > maxl) maxl = (int32_t)v;
      }
    }
    if (!eol) break;
    p = eol + 1;
  }
  if (!rc) {
    qsort(lines, n, sizeof *lines, cmp_label_line);
    size_t plen = strlen(d->prefix);
    for (uint64_t i = 0; i < d->count; i++) {
      const char *rel = key_of(d, i) + plen;
      label_line_t k = {rel, strlen(rel), 0};
      label_line_t *hit = bsearch(&k, lines, n, sizeof *lines, cmp_label_line);
      d->label[i] = hit ? hit->label : -1;
    }
    *classes = (uint32_t)(maxl + 1);
  }
  free(lines);
  lade__buf_free(&buf);
  return rc;
}

/* Orders the listing by (label, key) - ImageFolder order: objects at the
 * prefix first, then class by class - and compacts the arena in that order. */
static int reorder(s3_impl_t *d) {
  uint64_t *perm = malloc((d->count ? d->count : 1) * sizeof *perm);
  char *arena = malloc(d->arena_len ? d->arena_len : 1);
  uint64_t *off = malloc((d->count ? d->count : 1) * sizeof *off), *size = malloc((d->count ? d->count : 1) * 8);
  int32_t *label = malloc((d->count ? d->count : 1) * sizeof *label);
  if (!perm || !arena || !off || !size || !label) {
    free(perm), free(arena), free(off), free(size), free(label);
    return lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
  }
  for (uint64_t i = 0; i < d->count; i++) perm[i] = i;
  sort_impl = d;
  qsort(perm, d->count, sizeof *perm, cmp_by_label_key);
  size_t pos = 0;
  for (uint64_t i = 0; i < d->count; i++) {
    const char *k = key_of(d, perm[i]);
    size_t n = strlen(k) + 1;
    memcpy(arena + pos, k, n);
    off[i] = pos;
    pos += n;
    size[i] = d->size[perm[i]];
    label[i] = d->label[perm[i]];
  }
  free(perm), free(d->arena), free(d->off), free(d->size), free(d->label);
  d->arena = arena, d->arena_cap = d->arena_len, d->off = off, d->size = size, d->label = label;
  d->cap = d->count;
  return 0;
}

/* A key listed twice (a server or proxy that repeats objects across pages)
 * would become two samples of one object: refused. Keys are sorted by
 * (label, key) and a key has one label, so repeats are neighbours. */
static int check_unique(const s3_impl_t *d, const char *shown) {
  for (uint64_t i = 1; i < d->count; i++)
    if (!strcmp(key_of(d, i - 1), key_of(d, i)))
      return lade__fail(LADE_EFORMAT,
                        "%s: the listing names s3://%s/%s twice (%llu and %llu bytes): the server (or a proxy) "
                        "repeated it; one object is not made two samples",
                        shown, d->bucket, key_of(d, i), (unsigned long long)d->size[i - 1],
                        (unsigned long long)d->size[i]);
  return 0;
}

/* ---------------------------------------------------------- listing cache */

#define S3_CACHE_MAGIC "LADES3L1"

typedef struct cache_hdr {
  char magic[8];
  uint64_t created;  /* wall-clock seconds */
  uint64_t count, arena_len;
  uint32_t classes, pad;
  uint64_t checksum; /* of the body: sizes, labels, offsets, arena */
} cache_hdr_t;

/* The folder of the stored listing: index_dir (which the job's nodes may
 * share), else cache_dir. */
static const char *listing_dir(const struct lade_config *cfg) {
  return cfg->index_dir[0] ? cfg->index_dir : cfg->cache_dir;
}

static void cache_path(const s3_impl_t *d, const struct lade_config *cfg, char *out, size_t size) {
  uint64_t h = lade__hash64(d->w.endpoint, strlen(d->w.endpoint), 0xcbf29ce484222325ull);
  h = lade__hash64("\n", 1, h);
  h = lade__hash64(d->bucket, strlen(d->bucket), h);
  h = lade__hash64("\n", 1, h);
  h = lade__hash64(d->prefix, strlen(d->prefix), h);
  h = lade__hash64("\n", 1, h);
  h = lade__hash64(cfg->label_file, strlen(cfg->label_file), h);
  snprintf(out, size, "%s/listing-%016llx.bin", listing_dir(cfg), (unsigned long long)h);
}

static uint64_t body_checksum(const s3_impl_t *d) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  h = lade__hash64(d->size, d->count * sizeof *d->size, h);
  h = lade__hash64(d->label, d->count * sizeof *d->label, h);
  h = lade__hash64(d->off, d->count * sizeof *d->off, h);
  return lade__hash64(d->arena, d->arena_len, h);
}

static int read_all(int fd, void *p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* Loads a cached listing younger than ttl; 0 on success, -1 to list anew
 * (absent, old, or corrupt: a bad file is simply rebuilt). */
static int cache_load(s3_impl_t *d, const char *path, uint64_t ttl, uint32_t *classes, uint64_t *created) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  cache_hdr_t h;
  struct stat st;
  int ok = fstat(fd, &st) == 0 && read_all(fd, &h, sizeof h) == 0 && !memcmp(h.magic, S3_CACHE_MAGIC, 8);
  uint64_t now = (uint64_t)time(NULL);
  ok = ok && h.created <= now + 60 && now - LADE__MIN(now, h.created) < ttl && h.count > 0 && h.count < (1ull << 40) &&
       h.arena_len < (1ull << 44) &&
       (uint64_t)st.st_size == sizeof h + h.count * (8 + 4 + 8) + h.arena_len;
  if (ok) {
    d->count = d->cap = h.count;
    d->arena_len = d->arena_cap = h.arena_len;
    d->size = malloc(h.count * 8);
    d->label = malloc(h.count * 4);
    d->off = malloc(h.count * 8);
    d->arena = malloc(h.arena_len + 1);
    ok = d->size && d->label && d->off && d->arena && read_all(fd, d->size, h.count * 8) == 0 &&
         read_all(fd, d->label, h.count * 4) == 0 && read_all(fd, d->off, h.count * 8) == 0 &&
         read_all(fd, d->arena, h.arena_len) == 0 && body_checksum(d) == h.checksum;
    /* every key inside the arena and NUL-terminated (the next offset is
     * bounded before the byte before it is read), every label a class */
    for (uint64_t i = 0; ok && i < h.count; i++) {
      uint64_t next = i + 1 < h.count ? d->off[i + 1] : h.arena_len;
      ok = d->off[i] < h.arena_len && next <= h.arena_len && next > d->off[i] && d->arena[next - 1] == '\0' &&
           d->label[i] >= -1 && (d->label[i] < 0 || (uint32_t)d->label[i] < h.classes);
    }
    ok = ok && h.classes <= S3_MAX_CLASSES;
    if (ok && h.arena_len) ok = d->arena[h.arena_len - 1] == '\0';
    if (!ok) {
      free(d->size), free(d->label), free(d->off), free(d->arena);
      d->size = d->off = NULL, d->label = NULL, d->arena = NULL;
      d->count = d->cap = d->arena_len = d->arena_cap = 0;
    }
  }
  close(fd);
  if (ok) *classes = h.classes, *created = h.created;
  return ok ? 0 : -1;
}

/* Stores the listing (temp file + rename, so readers never see half). A
 * failure to store is not an error: the next run lists again. */
static void cache_store(const s3_impl_t *d, const char *dir, const char *path, uint32_t classes) {
  if (lade__mkdir_private(dir) != 0) {
    lade__clear_error();
    return;
  }
  cache_hdr_t h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, S3_CACHE_MAGIC, 8);
  h.created = (uint64_t)time(NULL);
  h.count = d->count;
  h.arena_len = d->arena_len;
  h.classes = classes;
  h.checksum = body_checksum(d);
  const struct iovec piece[] = {{&h, sizeof h}, {d->size, d->count * 8}, {d->label, d->count * 4},
                                {d->off, d->count * 8}, {d->arena, d->arena_len}};
  lade__nodefile_store(path, piece, 5, 0600);
}


/* ------------------------------------------------------ the module's hooks */

static int s3_url_of(void *ctx, uint64_t obj, char *url, size_t size) {
  const s3_impl_t *d = ctx;
  return lade__s3_url(&d->w, key_of(d, obj), NULL, url, size);
}

static void s3_name_of(void *ctx, uint64_t obj, char *buf, size_t size) {
  const s3_impl_t *d = ctx;
  snprintf(buf, size, "s3://%s/%s", d->bucket, key_of(d, obj));
}

/* An object was found replaced or deleted: a cached listing is stale, and
 * is removed so the next run lists the bucket again. */
static void s3_stale(void *ctx) {
  s3_impl_t *d = ctx;
  if (d->from_cache && !d->cache_dropped) {
    unlink(d->cache_file);
    d->cache_dropped = 1;
  }
}

/* Where the listing came from, appended to errors about a listed size or
 * a listed object that is gone: a cached listing may be older than the
 * bucket. */
static void listing_note(void *ctx, char *buf, size_t size) {
  const s3_impl_t *d = ctx;

  buf[0] = '\0';
  if (!d->from_cache) return;
  char when[40] = "?";
  time_t t = (time_t)d->cache_created;
  struct tm tm;
  if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  snprintf(buf, size, "; the listing was cached in %s at %s (listing_ttl=%llu s)%s", d->cache_file, when,
           (unsigned long long)d->listing_ttl,
           d->cache_dropped ? ": that file is now removed, so the next run lists the bucket again"
                            : ": remove that file, or set listing_ttl=0, to list the bucket again");
}

/* Handles one finished transfer (unlocked on entry). A reply of another
 * size than listed sends the request to a HEAD first (once): if the object
 * was replaced, the GET is made again at its new size (no retry spent) and
 * the stale cached listing is removed; if the HEAD agrees with the listing,
 * the body was damaged in transit and the GET is retried as any transient
 * error. */

/* ------------------------------------------------------------------- ops */

static lade__http_get_t get_of(const s3_impl_t *d, uint64_t idx) {
  return (lade__http_get_t){.obj = idx, .expect = d->size[idx], .refresh = 1};
}

static int s3_submit(lade__source_t *s, const uint64_t *idx, size_t n, int background) {
  s3_impl_t *d = s->impl;
  lade__http_get_t g[256];
  for (size_t i = 0; i < n;) {
    size_t k = 0;
    for (; k < 256 && i < n; k++, i++) {
      if (idx[i] >= d->count)
        return lade__fail(LADE_ERANGE, "s3 source: sample %llu out of range (%llu samples)",
                          (unsigned long long)idx[i], (unsigned long long)d->count);
      g[k] = get_of(d, idx[i]);
    }
    int rc = lade__http_submit(d->http, g, k, background);
    if (rc) return rc;
  }
  return 0;
}

static bool s3_ready(lade__source_t *s, uint64_t idx) {
  s3_impl_t *d = s->impl;
  return idx >= d->count || lade__http_ready(d->http, idx);
}

static void s3_stats(lade__source_t *s, lade__source_stats_t *out) {
  s3_impl_t *d = s->impl;
  lade__remote_stats(d ? d->http : NULL, out);
}

static int s3_read(lade__source_t *s, uint64_t idx, lade__buf_t *out) {
  s3_impl_t *d = s->impl;
  if (idx >= d->count)
    return lade__fail(LADE_ERANGE, "s3 source: sample %llu out of range (%llu samples)", (unsigned long long)idx,
                      (unsigned long long)d->count);
  lade__http_get_t g = get_of(d, idx);
  return lade__http_read(d->http, idx, &g, out);
}

static void s3_describe(lade__source_t *s, uint64_t idx, char *buf, size_t size) {
  s3_impl_t *d = s->impl;
  if (!d || idx >= d->count) {
    snprintf(buf, size, "s3 sample %llu", (unsigned long long)idx);
    return;
  }
  snprintf(buf, size, "s3://%s/%s", d->bucket, key_of(d, idx));
}

static void impl_free(s3_impl_t *d) {
  if (!d) return;
  lade__http_destroy(d->http); /* first: its thread reads the listing */
  free(d->arena), free(d->off), free(d->size), free(d->label);
  lade__s3_where_free(&d->w);
  memset(d, 0, sizeof *d);
  free(d);
}

static void s3_close(lade__source_t *s) {
  s3_impl_t *d = s->impl;
  if (!d) return;
  impl_free(d);
  s->impl = NULL;
  s->labels = NULL;
  s->sizes = NULL;
  s->count = 0;
}

/* Where and who (s3auth.c), the listing's folder, and the http module. */
static int resolve(s3_impl_t *d, const struct lade_config *cfg, lade__source_t *owner) {
  int rc = lade__s3_where_init(&d->w, cfg, cfg->source);
  if (rc) return rc;
  snprintf(d->bucket, sizeof d->bucket, "%s", d->w.bucket);
  const char *prefix = d->w.path;
  size_t plen = strlen(prefix);
  if (plen + 2 >= sizeof d->prefix) return lade__fail(LADE_ERANGE, "dataset %s: prefix too long", cfg->source);
  /* the prefix is a folder: s3://b/train lists train/..., never training/... */
  snprintf(d->prefix, sizeof d->prefix, "%s%s", prefix, plen && prefix[plen - 1] != '/' ? "/" : "");
  d->max_sample = cfg->max_sample_bytes;
  d->listing_ttl = cfg->listing_ttl;
  lade__http_opts_t o;
  lade__s3_http_opts(&d->w, cfg, owner, &o);
  o.what = "s3 source";
  o.ctx = d;
  o.url = s3_url_of;
  o.name = s3_name_of;
  o.stale = s3_stale;
  o.note = listing_note;
  return lade__http_create(&d->http, &o);
}

static int s3_open(lade__source_t *s, const struct lade_config *cfg) {
  s3_impl_t *d = calloc(1, sizeof *d);
  if (!d) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
  int rc = resolve(d, cfg, s);
  char shown[2048];
  snprintf(shown, sizeof shown, "s3://%s/%s", d->bucket, d->prefix);
  uint32_t classes = 0;
  char cpath[LADE__PATH_MAX + 64] = "";
  int cached = 0, lk = -1;
  if (!rc && listing_dir(cfg)[0] && cfg->listing_ttl > 0) {
    cache_path(d, cfg, cpath, sizeof cpath);
    cached = cache_load(d, cpath, cfg->listing_ttl, &classes, &d->cache_created) == 0;
    /* another may have listed meanwhile */
    if (!cached && (lk = lade__nodefile_lock(listing_dir(cfg), cpath, "listing of the bucket")) >= 0)
      cached = cache_load(d, cpath, cfg->listing_ttl, &classes, &d->cache_created) == 0;
    snprintf(d->cache_file, sizeof d->cache_file, "%s", cpath);
    d->from_cache = cached;
  }
  d->listing_fd = lk;
  if (!rc && !cached) {
    rc = lade__s3_list(&d->w, d->http, d->prefix, shown, list_push_cb, d);
    if (!rc && d->count == 0)
      rc = lade__fail(LADE_EEMPTY, "%s (endpoint %s) holds no objects", shown, d->w.endpoint);
    if (!rc) {
      d->label = malloc(d->count * sizeof *d->label);
      if (!d->label) rc = lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
    }
    if (!rc) rc = cfg->label_file[0] ? labels_from_file(d, cfg->label_file, &classes) : labels_from_folders(d, &classes);
    if (!rc) rc = reorder(d);
    if (!rc) rc = check_unique(d, shown);
    if (!rc && cpath[0]) cache_store(d, listing_dir(cfg), cpath, classes);
  }
  lade__nodefile_unlock(lk, cpath);
  d->listing_fd = -1;
  if (!rc) rc = lade__http_start(d->http, d->count);
  if (rc) {
    impl_free(d);
    return rc;
  }
  s->impl = d;
  s->count = d->count;
  s->labels = d->label;
  s->classes = classes;
  s->sizes = d->size;
  return 0;
}

const lade__source_ops_t lade__source_s3 = {.name = "s3",
                                            .open = s3_open,
                                            .close = s3_close,
                                            .read = s3_read,
                                            .describe = s3_describe,
                                            .submit = s3_submit,
                                            .ready = s3_ready,
                                            .stats = s3_stats};

#endif /* LADE_HAVE_CURL */
