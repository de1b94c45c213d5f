/* tar_nodelist.c - a remote tar source's shards: what its URL names, and
 * its open made once per node and job (tar_nodelist.h). The listing file:
 * magic, the job's hash, the shard count, then per shard its name, size and
 * validator (each string a u32 length and its bytes), and a checksum of all
 * before it. */
#ifdef LADE_HAVE_CURL

#include "source/tar_nodelist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/nodefile.h"

/* ------------------------------------------------ what a URL source names */

typedef struct tar_listing {
  lade__tar_t *t;
  const char *bucket;
  size_t plen; /* the prefix's length: keys with a '/' after it are in sub-folders */
} tar_listing_t;

/* A listed object that is a shard: a .tar (.tfrecord) directly under the
 * prefix, as a local folder's shards are its .tar files and not its
 * sub-folders'. */
static int push_tar_key(void *ctx, const char *key, size_t klen, uint64_t size) {
  tar_listing_t *l = ctx;
  (void)size;
  if (klen <= l->plen || !l->t->fmt->is_shard(key, klen) || memchr(key + l->plen, '/', klen - l->plen))
    return 0;
  char name[LADE__PATH_MAX + 300];
  int n = snprintf(name, sizeof name, "s3://%s/%.*s", l->bucket, (int)klen, key);
  if (n < 0 || (size_t)n >= sizeof name)
    return lade__fail(LADE_ERANGE, "s3://%s/%.*s...: name too long", l->bucket, (int)LADE__MIN(klen, 200), key);
  return lade__tar_strs_push(&l->t->shards, name, (size_t)n);
}

int lade__tar_remote_shards(lade__tar_t *t, const char *src, lade__http_t *http, const lade__s3_where_t *w,
                            const char *url) {
  if (strchr(src, '{')) return lade__tar_brace_expand(&t->shards, src, src);
  if (t->fmt->is_shard(src, strlen(src))) return lade__tar_strs_push(&t->shards, src, strlen(src));
  if (w && !lade__tar_has_suffix(src, ".txt")) { /* a prefix: its .tar objects (the listing is sorted by key) */
    char prefix[1100];
    size_t pl = strlen(w->path);
    snprintf(prefix, sizeof prefix, "%s%s", w->path, pl && w->path[pl - 1] != '/' ? "/" : "");
    tar_listing_t l = {t, w->bucket, strlen(prefix)};
    int rc = lade__s3_list(w, http, prefix, src, push_tar_key, &l);
    if (!rc && !t->shards.n) rc = lade__fail(LADE_EEMPTY, "%s holds no %s objects", src, t->fmt->shard_kind);
    return rc;
  }
  if (!url[0]) return lade__fail(LADE_ERANGE, "%s: name too long", src);
  lade__buf_t b = {0};
  int rc = lade__http_get_blocking(http, url, src, &b, 64u << 20, 0, NULL);
  if (!rc) {
    char base[LADE__PATH_MAX];
    const char *slash = strrchr(src, '/');
    snprintf(base, sizeof base, "%.*s", (int)(slash - src + 1), src);
    rc = lade__tar_list_lines(&t->shards, &b, base, src);
  }
  lade__buf_free(&b);
  return rc;
}

/* ------------------------------------------------- the node's single open */

#define NL_MAGIC 0x4c4e4544414c0001ull /* "LADENL" v1 */
#define NL_SEED 0x6e6f64656c697374ull

static int put(lade__buf_t *b, const void *p, size_t n) {
  if (lade__buf_reserve(b, b->len + n) != 0) return -1;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

static int put_str(lade__buf_t *b, const char *s) {
  uint32_t n = (uint32_t)strlen(s);
  return put(b, &n, sizeof n) || put(b, s, n);
}

typedef struct rd {
  const uint8_t *p, *end;
} rd_t;

static int get(rd_t *r, void *out, size_t n) {
  if ((size_t)(r->end - r->p) < n) return -1;
  memcpy(out, r->p, n);
  r->p += n;
  return 0;
}

/* A string of the file (NUL-terminated in place of nothing: copied). */
static int get_str(rd_t *r, const char **s, uint32_t *n) {
  if (get(r, n, sizeof *n) || (size_t)(r->end - r->p) < *n) return -1;
  *s = (const char *)r->p;
  r->p += *n;
  return 0;
}

/* The listing in b when it is this job's and whole: shards pushed (or,
 * given, compared), sizes and validators kept. 0, 1 (not this job's, other
 * shards, or damaged: made again), or an error. */
static int parse(lade__tar_nodelist_t *nl, const lade__buf_t *b, lade__tar_strs_t *shards) {
  size_t given = shards->n;
  uint64_t magic, job, n, sum;
  if (b->len < 32) return 1;
  memcpy(&sum, b->data + b->len - 8, 8);
  if (lade__hash64(b->data, b->len - 8, NL_SEED) != sum) return 1;
  rd_t r = {b->data, b->data + b->len - 8};
  if (get(&r, &magic, 8) || get(&r, &job, 8) || get(&r, &n, 8) || magic != NL_MAGIC || job != nl->job ||
      n > (uint64_t)(r.end - r.p) / 16 || (given && n != given))
    return 1;
  if (!(nl->size = calloc(n ? n : 1, sizeof *nl->size)) || !(nl->val = calloc(n ? n : 1, sizeof *nl->val)))
    return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  for (uint64_t i = 0; i < n; i++) {
    const char *s, *v;
    uint32_t sl, vl;
    if (get_str(&r, &s, &sl) || get(&r, &nl->size[i], 8) || get_str(&r, &v, &vl)) return 1;
    if (given && (strlen(lade__tar_strs_at(shards, i)) != sl || memcmp(lade__tar_strs_at(shards, i), s, sl)))
      return 1;
    if ((!given && lade__tar_strs_push(shards, s, sl)) || !(nl->val[i] = malloc(vl + 1)))
      return lade__fail(LADE_ENOMEM, "tar source: out of memory");
    memcpy(nl->val[i], v, vl);
    nl->val[i][vl] = 0;
  }
  return r.p == r.end && n ? 0 : 1;
}

int lade__tar_nodelist_open(lade__tar_nodelist_t *nl, const char *dir, const char *index_name, uint64_t job,
                            const char *source, lade__tar_strs_t *shards) {
  memset(nl, 0, sizeof *nl);
  nl->fd = -1;
  nl->job = job;
  if (!dir || !job) return 0;
  snprintf(nl->path, sizeof nl->path, "%s/%s-shards-%016llx.lst", dir, index_name,
           (unsigned long long)lade__hash64(source, strlen(source), job));
  if ((nl->fd = lade__nodefile_lock(dir, nl->path, "index pass over the shards")) < 0) return 0;
  size_t given = shards->n;
  lade__buf_t b = {0};
  int rc = lade__nodefile_load(nl->path, &b) == 0 ? parse(nl, &b, shards) : 1;
  lade__buf_free(&b);
  if (rc == 0) {
    nl->loaded = 1;
    lade__nodefile_unlock(nl->fd, nl->path); /* nothing to make: the others need not wait */
    nl->fd = -1;
    return 0;
  }
  /* not usable: this process makes it (any shards pushed are dropped) */
  size_t n = shards->n;
  if (!given) {
    lade__tar_strs_free(shards);
    memset(shards, 0, sizeof *shards);
  }
  for (size_t i = 0; nl->val && i < n; i++) free(nl->val[i]);
  free(nl->val);
  free(nl->size);
  nl->val = NULL;
  nl->size = NULL;
  return rc < 0 ? rc : 0;
}

void lade__tar_nodelist_store(lade__tar_nodelist_t *nl, const lade__tar_strs_t *shards, const uint64_t *size,
                              char *const *val) {
  if (nl->fd < 0) return;
  lade__buf_t b = {0};
  uint64_t magic = NL_MAGIC, n = shards->n;
  int bad = put(&b, &magic, 8) || put(&b, &nl->job, 8) || put(&b, &n, 8);
  for (size_t i = 0; !bad && i < n; i++)
    bad = put_str(&b, lade__tar_strs_at(shards, i)) || put(&b, &size[i], 8) || put_str(&b, val[i] ? val[i] : "");
  uint64_t sum = bad ? 0 : lade__hash64(b.data, b.len, NL_SEED);
  if (!bad && !put(&b, &sum, 8)) lade__nodefile_store(nl->path, &(struct iovec){b.data, b.len}, 1, 0600);
  lade__clear_error();
  lade__buf_free(&b);
  lade__nodefile_unlock(nl->fd, nl->path);
  nl->fd = -1;
}

void lade__tar_nodelist_progress(lade__tar_nodelist_t *nl) { lade__nodefile_progress(nl->fd); }

void lade__tar_nodelist_stale(lade__tar_nodelist_t *nl) {
  if (nl->path[0] && !__atomic_exchange_n(&nl->dropped, 1, __ATOMIC_ACQ_REL)) unlink(nl->path);
}

void lade__tar_nodelist_close(lade__tar_nodelist_t *nl, size_t shards) {
  lade__nodefile_unlock(nl->fd, nl->path);
  nl->fd = -1;
  for (size_t i = 0; nl->val && i < shards; i++) free(nl->val[i]);
  free(nl->val);
  free(nl->size);
  nl->val = NULL;
  nl->size = NULL;
}

#endif /* LADE_HAVE_CURL */
