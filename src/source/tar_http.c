/*
 * tar_http.c - the tar source's backend for http(s):// and s3:// shards
 * (tar_impl.h, docs/sources.md "remote tar shards"), for both container
 * formats (tar shards, TFRecord files). Every request goes
 * through one http module handle (http.c: the curl-multi loop, retries,
 * concurrency); s3:// shards are addressed and signed as the s3 source's
 * objects (s3auth.c).
 *
 * open() lists the shards a URL names (a brace pattern, one .tar, a list
 * file on the server, an s3:// prefix's .tar objects). A shard's index comes
 * from index_dir or cache_dir when made from its current version (one HEAD: size and
 * ETag, else Last-Modified), else from its sidecar SHARD.ladeidx (one GET,
 * sent with the HEAD) when the sidecar is bound to it (its size, then the
 * format's bind() over Range requests of the sampled headers), else from
 * one streamed GET parsed as it arrives. The sidecar GETs and the binding
 * Ranges of every shard go through a second http handle, open_http, many
 * in flight, that lives until start(). Reads are Range requests; submit() coalesces the neighbours of
 * one shard into one request (the chunk loading of SOLAR, Sun et al.,
 * for tar members). Every request of a shard, its index pass included, is
 * pinned to that HEAD's size and validator (the http module's pin hook:
 * If-Match, the reply's Content-Range and ETag checked), so offsets from
 * one version are never read against the bytes of another.
 * The per-sample arrays of lade__tar_t are read-only after open; the http
 * module does its own locking. During open, index threads write only their
 * own shard's slots of http_state_t (shard_ver, shard_size, shard_val) and
 * add to `rejected` atomically; open_http is created before them and
 * destroyed by start() after them.
 */
#ifdef LADE_HAVE_CURL

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>

#include "core/coalesce.h"
#include "source/remote.h"
#include "source/s3auth.h"
#include "tar_impl.h"

typedef struct http_state {
  lade__http_t *http;
  int s3;                /* s3:// shards, all in w's bucket, signed as w says */
  lade__s3_where_t w;
  uint64_t gap, max_req; /* coalescing: the largest gap inside one request, its most bytes */
  uint64_t *shard_ver;   /* per shard: a hash of its size and ETag/Last-Modified (version op) */
  /* per shard: its size and validator ("etag X", "modified DATE", "") as
   * the HEAD at open found them, the version its index describes: every
   * Range request is pinned to it (the pin hook, docs/http.md) */
  uint64_t *shard_size;
  char **shard_val;
  lade__http_opts_t o;     /* http's options, for open_http */
  lade__http_t *open_http; /* open only: sidecar GETs (obj SIDE0 + shard) and binding Ranges (obj shard) */
  uint64_t open_requests, open_bytes; /* open_http's counters, once it is gone */
  uint64_t rejected;       /* sidecars ignored (atomic) */
  pthread_mutex_t probe_mu; /* the index threads' one probe (sidecars_wanted) */
  int probe;               /* 0: not made, 1: sidecars are asked for, 2: the first shard has none */
} http_state_t;

/* The open handle's results, by key: shard i's binding reads are
 * i * BIND_READS + k, its sidecar SIDE0 + i (also its object number, so a
 * whole-body GET is one part keyed by its object). */
#define BIND_READS 32 /* the most reads a format's bind() makes (tar 8, tfrecord 16) */
#define SIDE0(t) ((uint64_t)(t)->shards.n * BIND_READS)

static http_state_t *H(const lade__tar_t *t) { return t->be_state; }

/* The http module's hooks: an object is a shard, named by its URL. */
/* The key of an s3:// name in the source's bucket, or NULL for another bucket. */
static const char *s3_key(const lade__tar_t *t, const char *name) {
  size_t bl = strlen(H(t)->w.bucket);
  if (strncmp(name, "s3://", 5) || strncmp(name + 5, H(t)->w.bucket, bl) || name[5 + bl] != '/') return NULL;
  return name + 5 + bl + 1;
}

/* The URL a request for `name` goes to (signed for s3:// names). */
static int name_url(const lade__tar_t *t, const char *name, char *url, size_t size) {
  if (H(t)->s3) {
    const char *key = s3_key(t, name);
    return key ? lade__s3_url(&H(t)->w, key, NULL, url, size) : -1;
  }
  int n = snprintf(url, size, "%s", name);
  return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* Object obj's name: a shard's, or the sidecar's of shard obj - SIDE0. */
static int obj_name(const lade__tar_t *t, uint64_t obj, char *buf, size_t size) {
  int side = obj >= SIDE0(t);
  int n = snprintf(buf, size, "%s%s", lade__tar_strs_at(&t->shards, side ? obj - SIDE0(t) : obj),
                   side ? LADE__TAR_SIDECAR_SUFFIX : "");
  return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int shard_url(void *ctx, uint64_t obj, char *url, size_t size) {
  const lade__tar_t *t = ctx;
  char name[LADE__PATH_MAX + 64];
  return obj_name(t, obj, name, sizeof name) ? -1 : name_url(t, name, url, size);
}

static void shard_name(void *ctx, uint64_t obj, char *buf, size_t size) {
  obj_name(ctx, obj, buf, size);
}

/* The version a shard's offsets come from: its Range requests carry
 * If-Match, and a reply of another version or total size fails. Read-only
 * once open() has indexed every shard. */
static const char *shard_pin(void *ctx, uint64_t obj, uint64_t *size) {
  const lade__tar_t *t = ctx;
  *size = UINT64_MAX;
  if (obj >= SIDE0(t)) return NULL; /* a sidecar: any version (it is bound to its shard by what it says) */
  *size = H(t)->shard_size[obj];
  return H(t)->shard_val[obj];
}

/* The http module for the shards `first` is one of; s3:// shards get the
 * s3 source's endpoint, addressing and credentials (s3auth.c). */
static int remote_http(lade__tar_t *t, const struct lade_config *cfg, lade__source_t *s, const char *first) {
  lade__http_opts_t o;
  H(t)->s3 = !strncmp(first, "s3://", 5);
  if (H(t)->s3) {
    int rc = lade__s3_where_init(&H(t)->w, cfg, first);
    if (rc) return rc;
    lade__s3_http_opts(&H(t)->w, cfg, s, &o);
  } else {
    lade__remote_http_opts(&o, cfg, s);
  }
  o.what = "tar source";
  o.ctx = t;
  o.url = shard_url;
  o.name = shard_name;
  o.pin = shard_pin;
  H(t)->gap = cfg->coalesce_gap_bytes;
  H(t)->max_req = LADE__MIN(cfg->max_sample_bytes, (uint64_t)16 << 20);
  H(t)->o = o;
  return lade__http_create(&H(t)->http, &o);
}

/* The shards a URL source names: a brace pattern, one .tar, or a list file
 * fetched from the server (relative lines are relative to its folder). */
typedef struct tar_listing {
  lade__tar_t *t;
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
  int n = snprintf(name, sizeof name, "s3://%s/%.*s", H(l->t)->w.bucket, (int)klen, key);
  if (n < 0 || (size_t)n >= sizeof name)
    return lade__fail(LADE_ERANGE, "s3://%s/%.*s...: name too long", H(l->t)->w.bucket, (int)LADE__MIN(klen, 200), key);
  return lade__tar_strs_push(&l->t->shards, name, (size_t)n);
}

static int remote_shards(lade__tar_t *t, const char *src) {
  if (strchr(src, '{')) return lade__tar_brace_expand(&t->shards, src, src);
  if (t->fmt->is_shard(src, strlen(src))) return lade__tar_strs_push(&t->shards, src, strlen(src));
  if (H(t)->s3 && !lade__tar_has_suffix(src, ".txt")) { /* a prefix: its .tar objects (the listing is sorted by key) */
    char prefix[1100];
    size_t pl = strlen(H(t)->w.path);
    snprintf(prefix, sizeof prefix, "%s%s", H(t)->w.path, pl && H(t)->w.path[pl - 1] != '/' ? "/" : "");
    tar_listing_t l = {t, strlen(prefix)};
    int rc = lade__s3_list(&H(t)->w, H(t)->http, prefix, src, push_tar_key, &l);
    if (!rc && !t->shards.n) rc = lade__fail(LADE_EEMPTY, "%s holds no %s objects", src, t->fmt->shard_kind);
    return rc;
  }
  char url[8192];
  if (name_url(t, src, url, sizeof url)) return lade__fail(LADE_ERANGE, "%s: name too long", src);
  lade__buf_t b = {0};
  int rc = lade__http_get_blocking(H(t)->http, url, src, &b, 64u << 20, 0, NULL);
  if (!rc) {
    char base[LADE__PATH_MAX];
    const char *slash = strrchr(src, '/');
    snprintf(base, sizeof base, "%.*s", (int)(slash - src + 1), src);
    rc = lade__tar_list_lines(&t->shards, &b, base, src);
  }
  lade__buf_free(&b);
  return rc;
}

/* ------------------------------------------------------ sidecar indexes */

/* The reads a format's bind() makes, recorded by a first call (every read
 * answered in full, with zeros), fetched all at once, then served in the
 * same order to a second call. */
typedef struct bind_reads {
  uint64_t off[BIND_READS];
  size_t len[BIND_READS];
  lade__buf_t got[BIND_READS];
  size_t n, served;
} bind_reads_t;

static long record_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  bind_reads_t *r = ctx;
  if (r->n == BIND_READS) return -1;
  r->off[r->n] = off;
  r->len[r->n++] = len;
  memset(dst, 0, len);
  return (long)len;
}

/* A read other than the one recorded fails, so the bind differs: never a
 * sidecar trusted on bytes that were not compared. */
static long served_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  bind_reads_t *r = ctx;
  size_t k = r->served++;
  if (k >= r->n || r->off[k] != off || r->len[k] != len) return -1;
  size_t n = LADE__MIN(len, r->got[k].len);
  if (n) memcpy(dst, r->got[k].data, n);
  return (long)n;
}

/* The recorded reads of shard i (cut at its size), all in flight at once
 * on open_http; 0 or the first error
 * (412: the shard changed since the HEAD; the retries ran out). */
static int fetch_reads(lade__tar_t *t, size_t i, bind_reads_t *r) {
  http_state_t *h = H(t);
  lade__span_t sp[BIND_READS];
  lade__run_t runs[BIND_READS];
  size_t order[BIND_READS], m = 0;
  for (size_t k = 0; k < r->n; k++) {
    uint64_t end = LADE__MIN(r->off[k] + r->len[k], h->shard_size[i]);
    if (r->off[k] >= end) continue; /* past the end: served as 0 bytes */
    size_t at = m++;
    while (at && sp[at - 1].off > r->off[k]) sp[at] = sp[at - 1], order[at] = order[at - 1], at--;
    sp[at] = (lade__span_t){0, r->off[k], end - r->off[k]};
    order[at] = k;
  }
  /* only reads that overlap share a request: a gap between sampled headers
   * is a shard's data, which is what a sidecar spares */
  size_t nr = lade__coalesce(sp, m, 0, h->max_req, runs);
  lade__http_part_t parts[BIND_READS];
  lade__http_get_t gets[BIND_READS];
  for (size_t g = 0; g < nr; g++) {
    const lade__run_t *u = &runs[g];
    for (size_t q = u->first; q < u->first + u->count; q++)
      parts[q] = (lade__http_part_t){i * BIND_READS + order[q], sp[q].off - u->start, sp[q].len};
    gets[g] = (lade__http_get_t){.obj = i, .off = u->start, .len = u->end - u->start, .expect = u->end - u->start,
                                 .nparts = (uint32_t)u->count, .parts = parts + u->first};
  }
  int rc = nr ? lade__http_submit(h->open_http, gets, nr, 0) : 0;
  for (size_t q = 0; !rc && q < m; q++) { /* every want taken, so none is left in the table */
    lade__http_get_t one = {.obj = i, .off = sp[q].off, .len = sp[q].len, .expect = sp[q].len, .nparts = 1,
                            .parts = &parts[q]};
    int e = lade__http_read(h->open_http, parts[q].idx, &one, &r->got[order[q]]);
    if (e && !rc) rc = e;
  }
  return rc;
}

/* A sidecar not used for its shard: counted, and said once, naming both. */
static void reject(lade__tar_t *t, const char *shown, const char *why) {
  __atomic_fetch_add(&H(t)->rejected, 1, __ATOMIC_RELAXED);
  fprintf(stderr, "lade: warning: %s" LADE__TAR_SIDECAR_SUFFIX ": sidecar index not used for %s: %s; indexing the "
          "shard by reading it whole\n", shown, shown, why);
}

/* Shard i's index from its sidecar, fetched (the GET sent before the HEAD)
 * into b: 0 when it is the shard's (x filled), 1 when it is missing or not
 * the shard's (x empty: index the shard as before), or an error reading
 * the shard's sampled headers. */
static int sidecar_index(lade__tar_t *t, size_t i, lade__buf_t *b, lade__tar_index_t *x) {
  const char *shown = lade__tar_strs_at(&t->shards, i);
  const char *why = NULL;
  lade__tar_ver_t v = {H(t)->shard_size[i], 0, 0};
  if (lade__tar_index_parse(t, x, b->data, b->len, v, true, &why) != 0) {
    reject(t, shown, why);
    return 1;
  }
  if (x->comp) {
    lade__tar_index_free(x);
    reject(t, shown, "it describes a compressed file");
    return 1;
  }
  bind_reads_t r;
  memset(&r, 0, sizeof r);
  t->fmt->bind(t, x, record_pread, &r);
  size_t nb = r.n; /* then the end-of-archive block, after the binding's reads */
  uint64_t toff;
  size_t tlen;
  if (lade__tar_index_tail(t, x, H(t)->shard_size[i], &toff, &tlen) != 0) {
    lade__tar_index_free(x);
    reject(t, shown, "its last member does not end the shard");
    return 1;
  }
  if (tlen && nb < BIND_READS) r.off[r.n] = toff, r.len[r.n++] = tlen;
  int rc = fetch_reads(t, i, &r);
  size_t n = r.n;
  r.n = nb;
  uint64_t bind = rc ? 0 : t->fmt->bind(t, x, served_pread, &r);
  int zeros = 1;
  for (size_t k = 0; !rc && n > nb && k < r.got[nb].len; k++) zeros &= r.got[nb].data[k] == 0;
  for (size_t k = 0; k < BIND_READS; k++) lade__buf_free(&r.got[k]);
  if (rc) {
    lade__tar_index_free(x);
    return rc;
  }
  if (bind == x->bind && !zeros) {
    lade__tar_index_free(x);
    reject(t, shown, "a member follows its last one (the shard grew within its end padding)");
    return 1;
  }
  if (bind != x->bind) {
    lade__tar_index_free(x);
    reject(t, shown, "its sampled member headers differ from the shard's (another shard's index, or the shard was "
           "rewritten after it)");
    return 1;
  }
  return 0;
}

/* The sidecar GET of shard i, taken from open_http: 0 with its bytes in
 * b, or 1 (missing: 404, or it could not be read: said). */
static int sidecar_get(lade__tar_t *t, size_t i, lade__buf_t *b) {
  uint64_t key = SIDE0(t) + i;
  lade__http_get_t g = {.obj = key, .expect = UINT64_MAX};
  int rc = lade__http_read(H(t)->open_http, key, &g, b);
  if (!rc) return 0;
  if (rc != LADE_ENOENT)
    fprintf(stderr, "lade: warning: %s; indexing the shard by reading it whole\n", lade_last_error());
  lade__clear_error();
  return 1;
}

/* Whether a shard without a stored index asks for its sidecar. Sidecars are
 * asked for when the first shard has one (lade pack and lade index write
 * one beside every shard): the first index thread that would ask sends one
 * HEAD of the first shard's sidecar, and the others wait for its answer, so
 * a dataset without sidecars costs one HEAD per open, not a 404 GET per
 * shard. A HEAD that fails otherwise (a 403 for a missing key on S3 without
 * ListBucket, a timeout) asks per shard. One shard: its GET is the probe. */
static int sidecars_wanted(lade__tar_t *t) {
  http_state_t *h = H(t);
  pthread_mutex_lock(&h->probe_mu);
  if (!h->probe) {
    char name[LADE__PATH_MAX + 64], url[8192], val[256];
    uint64_t size = 0;
    h->probe = 1;
    if (t->shards.n > 1 && !obj_name(t, SIDE0(t), name, sizeof name) && !name_url(t, name, url, sizeof url) &&
        lade__http_head(h->http, url, name, &size, val, sizeof val) == LADE_ENOENT)
      h->probe = 2;
    lade__clear_error();
  }
  int want = h->probe == 1;
  pthread_mutex_unlock(&h->probe_mu);
  return want;
}

/* A remote shard's index: from index_dir (else cache_dir) when it was made
 * from the shard's current version (a HEAD: size and ETag or
 * Last-Modified), else from its sidecar when that is the shard's, else one
 * streamed GET of the shard whose headers are parsed as they arrive. The
 * sidecar's GET goes out before the HEAD, unless index_dir holds an index
 * of this URL (then it is asked only when that one is stale). */
static int http_index(lade__tar_t *t, const struct lade_config *cfg, size_t i, lade__tar_index_t *x) {
  const char *shown = lade__tar_strs_at(&t->shards, i);
  char url[8192];
  if (name_url(t, shown, url, sizeof url))
    return lade__fail(LADE_EINVAL, "%s: not in the bucket of the first shard (s3://%s), or too long", shown,
                      H(t)->w.bucket);
  char ipath[LADE__PATH_MAX + 64] = "";
  const char *dir = lade__tar_index_dir(cfg);
  struct stat st;
  if (dir)
    snprintf(ipath, sizeof ipath, "%s/%s-%016llx.bin", dir, t->fmt->index_name,
             (unsigned long long)lade__hash64(url, strlen(url), 0x7461726964780000ull)); /* endpoint included */
  lade__http_get_t side = {.obj = SIDE0(t) + i, .expect = UINT64_MAX};
  int asked = H(t)->open_http && !(ipath[0] && stat(ipath, &st) == 0) && sidecars_wanted(t);
  int rc = asked ? lade__http_submit(H(t)->open_http, &side, 1, 0) : 0;
  uint64_t size = 0;
  char val[256];
  if (!rc) rc = lade__http_head(H(t)->http, url, shown, &size, val, sizeof val);
  lade__buf_t b = {0};
  if (rc) {
    if (asked) { /* its want taken, the HEAD's error kept */
      char *msg = lade__strdup(lade_last_error());
      sidecar_get(t, i, &b);
      lade__set_error_text(msg ? msg : "tar source: HEAD failed");
      free(msg);
    }
    lade__buf_free(&b);
    return rc;
  }
  /* b = 2: never equal to a local shard's nanoseconds field by accident of a hash */
  lade__tar_ver_t v = {size, lade__hash64(val, strlen(val), 0x7661), (uint64_t)2 << 32};
  H(t)->shard_ver[i] = lade__hash64(&v, sizeof v, 0x76657273);
  H(t)->shard_size[i] = size;
  if (!(H(t)->shard_val[i] = strdup(val))) rc = lade__fail(LADE_ENOMEM, "%s: out of memory", shown);
  int found = !rc && ipath[0] && lade__tar_index_load(t, x, ipath, v) == 0;
  if (!rc && !found && !asked && H(t)->open_http && sidecars_wanted(t)) asked = !(rc = lade__http_submit(H(t)->open_http, &side, 1, 0));
  int got = asked && sidecar_get(t, i, &b) == 0;
  if (!rc && !found && got) {
    rc = sidecar_index(t, i, &b, x);
    found = rc == 0;
    if (rc == 1) rc = 0;
  }
  lade__buf_free(&b);
  if (rc || found) {
    if (!rc && got && ipath[0]) lade__tar_index_store(t, x, ipath, v, cfg);
    return rc;
  }
  lade__http_stream_t *s = NULL;
  rc = lade__http_stream_open(H(t)->http, url, shown, size, val, &s);
  if (!rc) {
    rc = t->fmt->walk(t, x, lade__http_stream_pread, s, size, shown);
    if (rc && lade__http_stream_error(s)) rc = lade__http_stream_error(s); /* the network's words, not EIO's */
  }
  lade__http_stream_close(s);
  if (!rc && ipath[0]) lade__tar_index_store(t, x, ipath, v, cfg);
  return rc;
}

/* Names the member (record) in an error of the module ("URL: what" becomes
 * "URL: member 'NAME': what"), as a local shard's read errors do. */
static int name_member(int rc, const char *url, const char *name) {
  static _Thread_local char msg[LADE__HTTP_MSG + LADE__PATH_MAX + 128];
  const char *e = lade_last_error();
  size_t ul = strlen(url);
  if (!strncmp(e, url, ul) && !strncmp(e + ul, ": ", 2)) {
    char rest[LADE__HTTP_MSG];
    snprintf(rest, sizeof rest, "%s", e + ul + 2);
    snprintf(msg, sizeof msg, "%s: %s: %s", url, name, rest);
    lade__set_error_text(msg);
    return rc;
  }
  return lade__fail_prefix(rc, "%s: %s: ", url, name);
}

static int http_read(lade__tar_t *t, uint64_t idx, lade__buf_t *out) {
  uint32_t si = t->shard[idx];
  lade__http_part_t p = {idx, 0, lade__tar_span(t, idx)};
  lade__http_get_t g = {.obj = si, .off = t->off[idx], .len = p.len, .expect = p.len, .nparts = 1, .parts = &p};
  int rc = lade__http_read(H(t)->http, idx, &g, out);
  if (!rc) return 0;
  char what[LADE__PATH_MAX + 64];
  t->fmt->what(t, idx, what, sizeof what);
  return name_member(rc, lade__tar_strs_at(&t->shards, si), what);
}

typedef struct span {
  uint64_t idx, off, size;
  uint32_t shard;
  size_t pos; /* in the submitted order: the order of first use */
} span_t;

/* A request and the earliest position of its samples in the submit. */
typedef struct ranked {
  size_t run, first_pos;
} ranked_t;

static int cmp_ranked(const void *a, const void *b) {
  const ranked_t *x = a, *y = b;
  return x->first_pos < y->first_pos ? -1 : x->first_pos > y->first_pos;
}

static int cmp_span(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
  if (x->off != y->off) return x->off < y->off ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The submitted samples (one step, or the steps read ahead: fetch.c),
 * sorted by (shard, offset); neighbours of one shard whose gap is at most
 * `gap` bytes share one Range request of at most max_req bytes
 * (lade__coalesce, the rule the hdf5 source's hyperslabs follow too),
 * split into samples as it arrives (SOLAR's chunk loading, for tar
 * members). The requests are queued in the order their first sample was
 * submitted, so a later step's neighbours never go before an earlier
 * step's samples. */
static int http_submit(lade__tar_t *t, const uint64_t *idx, size_t n, int background) {
  span_t *v = malloc((n ? n : 1) * sizeof *v);
  lade__span_t *sp = malloc((n ? n : 1) * sizeof *sp);
  lade__run_t *runs = malloc((n ? n : 1) * sizeof *runs);
  lade__http_part_t *parts = malloc((n ? n : 1) * sizeof *parts);
  lade__http_get_t *gets = malloc((n ? n : 1) * sizeof *gets);
  int rc = !v || !sp || !runs || !parts || !gets ? lade__fail(LADE_ENOMEM, "tar source: out of memory") : 0;
  size_t k = 0, ng = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    if (idx[i] >= t->count) {
      rc = lade__fail(LADE_ERANGE, "tar source: sample %llu out of range (%llu samples)", (unsigned long long)idx[i],
                      (unsigned long long)t->count);
      break;
    }
    uint64_t size = lade__tar_span(t, idx[i]);
    if (size == 0 || size - t->fmt->tail > t->max_sample) continue; /* read() answers these without a request */
    v[k++] = (span_t){idx[i], t->off[idx[i]], size, t->shard[idx[i]], i};
  }
  if (!rc) {
    qsort(v, k, sizeof *v, cmp_span);
    for (size_t i = 0; i < k; i++) sp[i] = (lade__span_t){v[i].shard, v[i].off, v[i].size};
    ng = lade__coalesce(sp, k, H(t)->gap, H(t)->max_req, runs);
    ranked_t *rk = malloc((ng ? ng : 1) * sizeof *rk);
    if (!rk) ng = 0, rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
    for (size_t r = 0; r < ng; r++) {
      rk[r] = (ranked_t){r, SIZE_MAX};
      for (size_t m = runs[r].first; m < runs[r].first + runs[r].count; m++)
        if (v[m].pos < rk[r].first_pos) rk[r].first_pos = v[m].pos;
    }
    if (ng) qsort(rk, ng, sizeof *rk, cmp_ranked);
    for (size_t g = 0; g < ng; g++) {
      const lade__run_t *u = &runs[rk[g].run];
      for (size_t m = u->first; m < u->first + u->count; m++)
        parts[m] = (lade__http_part_t){v[m].idx, v[m].off - u->start, v[m].size};
      gets[g] = (lade__http_get_t){.obj = v[u->first].shard, .off = u->start, .len = u->end - u->start,
                                   .expect = u->end - u->start, .nparts = (uint32_t)u->count,
                                   .parts = parts + u->first};
    }
    free(rk);
  }
  if (!rc && ng) rc = lade__http_submit(H(t)->http, gets, ng, background);
  free(v);
  free(sp);
  free(runs);
  free(parts);
  free(gets);
  return rc;
}

/* The disk tier's version of a remote sample: its shard's size and ETag
 * (or Last-Modified) as the HEAD at open found them, and the member's place
 * and size, so a shard rewritten with members of the same sizes is not
 * served from the disk tier with its old bytes. */
static uint64_t http_version(lade__tar_t *t, uint64_t idx) {
  uint64_t k[3] = {H(t)->shard_ver[t->shard[idx]], t->off[idx], t->sizes[idx]};
  return lade__hash64(k, sizeof k, 0x74617276) | 2; /* > LADE__VERSION_UNKNOWN */
}

static bool http_ready(lade__tar_t *t, uint64_t idx) {
  return idx >= t->count || lade__http_ready(H(t)->http, idx);
}

/* The open's requests (HEADs, index passes, sidecars and their binding
 * Ranges) are list_requests; get_requests are the samples'. */
static void http_stats(lade__tar_t *t, lade__source_stats_t *out) {
  lade__remote_stats(H(t) ? H(t)->http : NULL, out);
  if (!H(t)) return;
  out->list_requests += H(t)->open_requests;
  out->bytes += H(t)->open_bytes;
  out->sidecar_rejected = __atomic_load_n(&H(t)->rejected, __ATOMIC_RELAXED);
}

/* The open's handle, once every shard is indexed: its counters kept. */
static void open_http_close(http_state_t *h) {
  if (!h->open_http) return;
  lade__http_stats_t st;
  lade__http_stats(h->open_http, &st);
  h->open_requests += st.get_requests;
  h->open_bytes += st.bytes;
  lade__http_destroy(h->open_http);
  h->open_http = NULL;
}

/* The open's handle: the sidecars and the Ranges that bind them, small
 * requests, as many in flight as http_max_concurrency allows (not tuned:
 * the open is short); a sidecar may be larger than max_sample_bytes. */
static int open_http_start(lade__tar_t *t) {
  lade__http_opts_t o = H(t)->o;
  o.fixed_conc = LADE__MAX(o.max_conc, o.fixed_conc);
  o.max_body = (uint64_t)1 << 30;
  o.arrived = NULL;
  o.arrived_ctx = NULL;
  int rc = lade__http_create(&H(t)->open_http, &o);
  return rc ? rc : lade__http_start(H(t)->open_http, SIDE0(t) + t->shards.n);
}


static int http_open(lade__tar_t *t, const struct lade_config *cfg, lade__source_t *s) {
  http_state_t *h = calloc(1, sizeof *h);
  if (!h) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  pthread_mutex_init(&h->probe_mu, NULL);
  t->be_state = h;
  const char *first = lade__tar_is_url(cfg->source) ? cfg->source : lade__tar_strs_at(&t->shards, 0);
  int rc = remote_http(t, cfg, s, first);
  if (!rc && lade__tar_is_url(cfg->source)) rc = remote_shards(t, cfg->source);
  size_t ns = t->shards.n ? t->shards.n : 1;
  if (!rc && (!(h->shard_ver = calloc(ns, sizeof *h->shard_ver)) ||
              !(h->shard_size = calloc(ns, sizeof *h->shard_size)) ||
              !(h->shard_val = calloc(ns, sizeof *h->shard_val))))
    rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
  if (!rc) rc = open_http_start(t);
  return rc;
}

static int http_start(lade__tar_t *t) {
  open_http_close(H(t));
  return lade__http_start(H(t)->http, t->count);
}

static void http_reserve(lade__tar_t *t, uint64_t samples, uint64_t bytes) {
  lade__http_reserve(H(t)->http, samples, bytes);
}

static void http_close(lade__tar_t *t) {
  http_state_t *h = H(t);
  if (!h) return;
  lade__http_destroy(h->open_http); /* first: their threads read the shard list */
  lade__http_destroy(h->http);
  lade__s3_where_free(&h->w);
  free(h->shard_ver);
  free(h->shard_size);
  for (size_t i = 0; h->shard_val && i < t->shards.n; i++) free(h->shard_val[i]);
  free(h->shard_val);
  pthread_mutex_destroy(&h->probe_mu);
  free(h);
  t->be_state = NULL;
}

const lade__tar_backend_t lade__tar_http = {
    .index_threads = 64, /* each waits on a HEAD and its sidecar, or streams a shard */
    .open = http_open,
    .index = http_index,
    .start = http_start,
    .read = http_read,
    .version = http_version,
    .close = http_close,
    .submit = http_submit,
    .ready = http_ready,
    .stats = http_stats,
    .reserve = http_reserve};

#endif /* LADE_HAVE_CURL */
