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
 * sent with the HEAD, which is then a Range of the shard's first 4 KiB:
 * size and validator from its reply, and the bytes of the first entry's
 * binding reads) when the sidecar is bound to it (its size, then the
 * format's bind() over Range requests of the sampled headers: below), else
 * from one streamed GET parsed as it arrives. The sidecar GETs and the
 * binding Ranges of every shard go through a second http handle,
 * open_http, many in flight, that lives until start() (until close() when
 * a binding waits for a first read). Reads are Range requests; submit() coalesces the neighbours of
 * one shard into one request (the chunk loading of SOLAR, Sun et al.,
 * for tar members). Every request of a shard, its index pass included, is
 * pinned to that HEAD's size and validator (the http module's pin hook:
 * If-Match, the reply's Content-Range and ETag checked), so offsets from
 * one version are never read against the bytes of another.
 *
 * A sidecar is bound in two steps, so that an open costs at most 2 Range
 * requests per shard besides its HEAD and its sidecar's GET (1 when the
 * first entry's reads lie in the first 4 KiB, as a tar's do): at open its
 * size, checksum and bounds, the framing of its first and last sampled
 * entries (format.check_entry) and its end; the rest of bind() (the other
 * sampled entries) before the shard's first sample is served
 * (check_shard, by the binding piece, tar_bind.h; submit() sends those Ranges with the shard's first
 * samples, and ready() waits for them too, so it costs no round trip).
 * Its samples' offsets came from the sidecar, so a shard whose rest then
 * differs fails every read of it (it cannot switch to other offsets
 * mid-run); a shard of at most 2 sampled entries, or whose bind() reads
 * lie within 64 KiB, is bound whole at open in one Range.
 *
 * Threads and locks. The per-sample arrays of lade__tar_t are read-only
 * after open; the http module does its own locking. During open, index
 * threads write only their own shard's slots of http_state_t (shard_ver,
 * shard_size, shard_val, and through tar_bind.h its state, rest and pend)
 * and add to `rejected` atomically; open_http is created before them and
 * destroyed by start() after them, or by close() when a binding waits.
 * After open the bindings are the binding piece's, under its own lock
 * (tar_bind.h), which it holds while it sends their reads through
 * open_http (lock order: the piece's, then the http module's; its hooks
 * take no lock of this file or the piece). probe_mu is taken only during
 * open, never with the piece's.
 */
#ifdef LADE_HAVE_CURL

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/coalesce.h"
#include "source/remote.h"
#include "source/s3auth.h"
#include "tar_impl.h"
#include "source/tar_bind.h"
#include "source/tar_nodelist.h"
#include "source/tar_reads.h"

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
  lade__tar_bind_t bind;   /* the rest of sidecars' bindings, at each shard's first read (tar_bind.h) */
  int started;             /* start() ran: open_http's arrivals wake the workers (atomic) */
  lade__tar_nodelist_t nl; /* the open made once per node and job (tar_nodelist.h) */
} http_state_t;

#define OPEN_GAP (64u << 10)     /* open: the last entry's framing and the end in one Range when this close */
#define LAZY_GAP (16u << 10)     /* the rest: a small record's header and CRC in one Range */
#define FIRST_BYTES 4096u        /* open: a shard's first bytes, asked instead of a HEAD when its sidecar is */

/* The open handle's results, by key: shard i's binding reads are
 * i * LADE__TAR_READS + k, its sidecar SIDE0 + i (also its object number, so a
 * whole-body GET is one part keyed by its object). */
#define SIDE0(t) ((uint64_t)(t)->shards.n * LADE__TAR_READS)

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

/* The stale hook: a shard answered as another version than its listing's
 * (rewritten since the node's listing was made): that listing is removed,
 * so the next open sends the shards' HEADs again (tar_nodelist.h). */
static void shards_stale(void *ctx) {
  lade__tar_t *t = ctx;
  lade__tar_nodelist_stale(&H(t)->nl);
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
  o.stale = shards_stale;
  H(t)->gap = cfg->coalesce_gap_bytes;
  H(t)->max_req = LADE__MIN(cfg->max_sample_bytes, (uint64_t)16 << 20);
  H(t)->o = o;
  /* each index thread has at most 2 requests in flight (its HEAD and its
   * sidecar's GET, then the binding Ranges): within this rank's share */
  t->index_threads = LADE__MAX((o.fixed_conc ? o.fixed_conc : o.max_conc) / 2, 1u);
  return lade__http_create(&H(t)->http, &o);
}

/* ------------------------------------------------------ sidecar indexes */

/* The Ranges of the reads of shard i that `mask` selects (cut at its
 * size): reads at most `gap` bytes apart share one. sp, order: room for
 * LADE__TAR_READS; runs: the Ranges. Returns their number. */
static size_t plan_reads(const lade__tar_t *t, size_t i, const lade__tar_reads_t *r, uint32_t mask, uint64_t gap,
                         lade__span_t *sp, size_t *order, size_t *nsp, lade__run_t *runs) {
  http_state_t *h = H(t);
  size_t m = 0;
  for (size_t k = 0; k < r->n; k++) {
    uint64_t end = LADE__MIN(r->off[k] + r->len[k], h->shard_size[i]);
    if (!(mask >> k & 1) || r->off[k] >= end) continue; /* past the end: served as 0 bytes */
    size_t at = m++;
    while (at && sp[at - 1].off > r->off[k]) sp[at] = sp[at - 1], order[at] = order[at - 1], at--;
    sp[at] = (lade__span_t){0, r->off[k], end - r->off[k]};
    order[at] = k;
  }
  /* reads far apart do not share a request: the bytes between sampled
   * headers are a shard's data, which is what a sidecar spares */
  *nsp = m;
  return lade__coalesce(sp, m, gap, h->max_req, runs);
}

/* Sends those Ranges on open_http; take_reads then takes the reads.
 * Returns at once. */
static int ask_reads(lade__tar_t *t, size_t i, const lade__tar_reads_t *r, uint32_t mask, uint64_t gap) {
  lade__span_t sp[LADE__TAR_READS];
  lade__run_t runs[LADE__TAR_READS];
  size_t order[LADE__TAR_READS], m;
  size_t nr = plan_reads(t, i, r, mask, gap, sp, order, &m, runs);
  lade__http_part_t parts[LADE__TAR_READS];
  lade__http_get_t gets[LADE__TAR_READS];
  for (size_t g = 0; g < nr; g++) {
    const lade__run_t *u = &runs[g];
    for (size_t q = u->first; q < u->first + u->count; q++)
      parts[q] = (lade__http_part_t){i * LADE__TAR_READS + order[q], sp[q].off - u->start, sp[q].len};
    gets[g] = (lade__http_get_t){.obj = i, .off = u->start, .len = u->end - u->start, .expect = u->end - u->start,
                                 .nparts = (uint32_t)u->count, .parts = parts + u->first};
  }
  return nr ? lade__http_submit(H(t)->open_http, gets, nr, 0) : 0;
}

/* Takes the reads ask_reads sent (waiting, bounded by the HTTP timeouts;
 * one dropped from the table is fetched again): 0, or the first error
 * (412: the shard changed since the HEAD; the retries ran out). Every want
 * is taken, so none is left in the table. */
static int take_reads(lade__tar_t *t, size_t i, lade__tar_reads_t *r, uint32_t mask) {
  http_state_t *h = H(t);
  int rc = 0;
  char *msg = NULL;
  for (size_t k = 0; k < r->n; k++) {
    uint64_t end = LADE__MIN(r->off[k] + r->len[k], h->shard_size[i]);
    if (!(mask >> k & 1)) continue;
    r->have |= 1u << k;
    if (r->off[k] >= end) continue;
    lade__http_part_t p = {i * LADE__TAR_READS + k, 0, end - r->off[k]};
    lade__http_get_t one = {.obj = i, .off = r->off[k], .len = p.len, .expect = p.len, .nparts = 1, .parts = &p};
    int e = lade__http_read(h->open_http, p.idx, &one, &r->got[k]);
    if (e && !rc) rc = e, msg = lade__strdup(lade_last_error());
  }
  if (msg) lade__set_error_text(msg);
  free(msg);
  return rc;
}

/* A sidecar not used for its shard: counted, and said once, naming both. */
static void reject(lade__tar_t *t, const char *shown, const char *why) {
  __atomic_fetch_add(&H(t)->rejected, 1, __ATOMIC_RELAXED);
  fprintf(stderr, "lade: warning: %s" LADE__TAR_SIDECAR_SUFFIX ": sidecar index not used for %s: %s; indexing the "
          "shard by reading it whole\n", shown, shown, why);
}

/* The reads of bind() (nb of them, `per` per entry, the end's after them
 * at nb when tail) that open makes: all when they fit one Range of
 * OPEN_GAP bytes or cannot be split per entry (*lazy 0); else the first
 * and the last entry's and the end, in at most 2 Ranges: the last entry's
 * (then the first's) reads after its header are left to the rest, then the
 * last entry's header, until they fit. */
static uint32_t open_reads(const lade__tar_t *t, size_t i, const lade__tar_reads_t *r, size_t nb, size_t per,
                           int *lazy) {
  lade__span_t sp[LADE__TAR_READS];
  lade__run_t runs[LADE__TAR_READS];
  size_t order[LADE__TAR_READS], m;
  uint32_t all = (uint32_t)((1ull << r->n) - 1), now = all;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t q = 0; q < r->n; q++) lo = LADE__MIN(lo, r->off[q]), hi = LADE__MAX(hi, r->off[q] + r->len[q]);
  if (!*lazy || hi - lo <= OPEN_GAP) {
    *lazy = 0;
    return all;
  }
  for (size_t q = per; q < nb - per; q++) now &= ~(1u << q);
  size_t drop[2 * LADE__BIND_READS], nd = 0;
  for (size_t q = nb - per + 1; q < nb; q++) drop[nd++] = q;
  for (size_t q = 1; q < per; q++) drop[nd++] = q;
  drop[nd++] = nb - per;
  for (size_t d = 0; d < nd && plan_reads(t, i, r, now, OPEN_GAP, sp, order, &m, runs) > 2; d++)
    now &= ~(1u << drop[d]);
  return now;
}

/* Shard i's index from its sidecar, fetched (the GET sent before the HEAD)
 * into b, with the shard's first bytes (NULL: none) from the request that
 * stood for its HEAD: 0 when it is the shard's as far as open checks (x filled), 1 when
 * it is missing or not the shard's (x empty: index the shard as before),
 * or an error reading the shard's bytes. Open checks the shard's size, the
 * sidecar's checksum and bounds, the end (the zeros after the last member),
 * and, by two Ranges, the framing of the first and the last sampled entries
 * (check_entry); the rest of bind() (the 6 sampled entries between) waits
 * for the shard's first read (check_shard). A shard of at most 2 entries,
 * or whose bind() reads are not per entry, is bound whole here. */
static int sidecar_index(lade__tar_t *t, size_t i, lade__buf_t *b, const lade__buf_t *first,
                         lade__tar_index_t *x) {
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
  uint64_t toff;
  size_t tlen;
  if (lade__tar_index_tail(t, x, H(t)->shard_size[i], &toff, &tlen) != 0) {
    lade__tar_index_free(x);
    reject(t, shown, "its last member does not end the shard");
    return 1;
  }
  lade__tar_reads_t r;
  memset(&r, 0, sizeof r);
  t->fmt->bind(t, x, lade__tar_reads_record, &r);
  size_t nb = r.n, k = LADE__MIN(x->n, (size_t)LADE__TAR_BIND_ENTRIES), per = k ? nb / k : 0;
  int lazy = k > 2 && per && per * k == nb && nb <= LADE__BIND_READS && t->fmt->check_entry;
  if (tlen && nb < LADE__TAR_READS) r.off[r.n] = toff, r.len[r.n++] = tlen; /* the end, after them */
  uint32_t now = open_reads(t, i, &r, nb, per, &lazy); /* the reads made now */
  uint32_t ask = now & ~lade__tar_reads_first(&r, now, first, H(t)->shard_size[i]);
  int rc = ask_reads(t, i, &r, ask, OPEN_GAP);
  if (!rc) rc = take_reads(t, i, &r, ask);
  size_t n = r.n;
  r.n = nb;
  int zeros = 1;
  for (size_t q = 0; !rc && n > nb && q < r.got[nb].len; q++) zeros &= r.got[nb].data[q] == 0;
  char bad[512] = "";
  if (!rc && lazy) { /* the first entry's header is always read now, the last one's when it fits */
    if (t->fmt->check_entry(t, x, 0, lade__tar_reads_kept, &r, &why) ||
        (now >> (nb - per) & 1 && t->fmt->check_entry(t, x, x->n - 1, lade__tar_reads_kept, &r, &why)))
      snprintf(bad, sizeof bad, "its sampled %s differ from the shard's (%s: another shard's index, or the shard "
               "was rewritten after it)", lade__tar_framing(t), why);
  } else if (!rc && t->fmt->bind(t, x, lade__tar_reads_served, &r) != x->bind) {
    snprintf(bad, sizeof bad, "its sampled %s differ from the shard's (another shard's index, or the shard was "
             "rewritten after it)", lade__tar_framing(t));
  }
  if (!rc && !bad[0] && !zeros)
    snprintf(bad, sizeof bad, "a member follows its last one (the shard grew within its end padding)");
  if (!rc && !bad[0] && lazy) rc = lade__tar_bind_keep(&H(t)->bind, i, x, &r, nb, now);
  lade__tar_reads_free(&r);
  if (rc || bad[0]) lade__tar_index_free(x);
  if (!rc && bad[0]) reject(t, shown, bad);
  return rc ? rc : bad[0] ? 1 : 0;
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

/* A sidecar's index into index_dir (else cache_dir), where a later open
 * takes it without a binding: under a pending name while the rest of its
 * binding waits (renamed when the shard's first read finds it whole). */
static void keep_index(lade__tar_t *t, size_t i, const lade__tar_index_t *x, const char *ipath, lade__tar_ver_t v,
                       const struct lade_config *cfg) {
  lade__tar_pend_t *p = H(t)->bind.pend[i];
  char pp[LADE__PATH_MAX + 96];
  if (!p) {
    lade__tar_index_store(t, x, ipath, v, cfg);
  } else if (snprintf(pp, sizeof pp, "%s" LADE__BIND_PENDING_SUFFIX, ipath) < (int)sizeof pp &&
             lade__tar_index_store(t, x, pp, v, cfg) == 0) {
    p->keep = lade__strdup(pp);
  }
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

/* The version a stored index of a remote shard names: its size and a hash
 * of its validator (b = 2: never equal to a local shard's nanoseconds field
 * by accident of a hash). */
static lade__tar_ver_t remote_ver(uint64_t size, const char *val) {
  return (lade__tar_ver_t){size, lade__hash64(val, strlen(val), 0x7661), (uint64_t)2 << 32};
}

/* Shard i's version: its size and validator (a HEAD's, or the node's
 * listing's), which its index describes and its requests are pinned to. */
static int set_version(lade__tar_t *t, size_t i, uint64_t size, const char *val, lade__tar_ver_t *v) {
  *v = remote_ver(size, val);
  H(t)->shard_ver[i] = lade__hash64(v, sizeof *v, 0x76657273);
  H(t)->shard_size[i] = size;
  if (!(H(t)->shard_val[i] = strdup(val)))
    return lade__fail(LADE_ENOMEM, "%s: out of memory", lade__tar_strs_at(&t->shards, i));
  return 0;
}

/* Shard i of the node's listing (tar_nodelist.h): its index as the rank that
 * made the listing stored it, with no request. One stored under its pending
 * name (a sidecar whose binding waits for a first read) is bound here as
 * there, but with all of its sampled entries at this process's first read
 * (their bytes from open are the other rank's). The other rank renames a
 * pending index when its first read finds the shard whole, so a pending one
 * missing is looked for again under its final name. 0, or 1: not stored (the
 * other rank's close removed it, or it was not the listing's): indexed as
 * without a listing. */
static int node_index(lade__tar_t *t, size_t i, const char *ipath, lade__tar_index_t *x) {
  lade__tar_ver_t v = remote_ver(H(t)->nl.size[i], H(t)->nl.val[i]);
  char pp[LADE__PATH_MAX + 96];
  if (lade__tar_index_load(t, x, ipath, v) == 0) return set_version(t, i, H(t)->nl.size[i], H(t)->nl.val[i], &v);
  snprintf(pp, sizeof pp, "%s" LADE__BIND_PENDING_SUFFIX, ipath);
  const char *hook = getenv("LADE_TEST_HOOK_PENDING_RENAMED"); /* the other rank's first read, just now */
  if (hook && strcmp(hook, "later")) rename(pp, ipath);
  if (lade__tar_index_load(t, x, pp, v) != 0) /* renamed whole by the other rank's first read meanwhile? */
    return lade__tar_index_load(t, x, ipath, v) == 0 ? set_version(t, i, H(t)->nl.size[i], H(t)->nl.val[i], &v) : 1;
  lade__tar_reads_t r;
  memset(&r, 0, sizeof r);
  t->fmt->bind(t, x, lade__tar_reads_record, &r);
  size_t nb = r.n, k = LADE__MIN(x->n, (size_t)LADE__TAR_BIND_ENTRIES), per = k ? nb / k : 0;
  int rc = k > 2 && per && per * k == nb && nb <= LADE__BIND_READS && t->fmt->check_entry ? 0 : 1;
  if (!rc) rc = set_version(t, i, H(t)->nl.size[i], H(t)->nl.val[i], &v);
  if (!rc) rc = lade__tar_bind_keep(&H(t)->bind, i, x, &r, nb, 0);
  if (!rc) H(t)->bind.pend[i]->keep = lade__strdup(pp), H(t)->bind.pend[i]->node = 1;
  lade__tar_reads_free(&r);
  if (rc) lade__tar_index_free(x);
  return rc;
}

/* A remote shard's index: from index_dir (else cache_dir) when it was made
 * from the shard's current version (a HEAD: size and ETag or
 * Last-Modified), else from its sidecar when that is the shard's, else one
 * streamed GET of the shard whose headers are parsed as they arrive. The
 * sidecar's GET goes out before the HEAD, unless index_dir holds an index
 * of this URL (then it is asked only when that one is stale). */
static int index_shard(lade__tar_t *t, const struct lade_config *cfg, size_t i, lade__tar_index_t *x) {
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
  int rc = H(t)->nl.loaded && ipath[0] ? node_index(t, i, ipath, x) : 1;
  if (rc <= 0) return rc;
  lade__http_get_t side = {.obj = SIDE0(t) + i, .expect = UINT64_MAX};
  int asked = H(t)->open_http && !(ipath[0] && stat(ipath, &st) == 0) && sidecars_wanted(t);
  rc = asked ? lade__http_submit(H(t)->open_http, &side, 1, 0) : 0;
  uint64_t size = 0;
  char val[256];
  lade__buf_t b = {0}, first = {0};
  /* with its sidecar asked, the HEAD is a Range of the shard's first bytes,
   * which hold what the binding reads of its first entry */
  if (!rc && asked) rc = lade__http_head_first(H(t)->http, url, shown, FIRST_BYTES, &first, &size, val, sizeof val);
  else if (!rc) rc = lade__http_head(H(t)->http, url, shown, &size, val, sizeof val);
  if (rc) {
    if (asked) { /* its want taken, the HEAD's error kept */
      char *msg = lade__strdup(lade_last_error());
      sidecar_get(t, i, &b);
      lade__set_error_text(msg ? msg : "tar source: HEAD failed");
      free(msg);
    }
    lade__buf_free(&b);
    lade__buf_free(&first);
    return rc;
  }
  lade__tar_ver_t v;
  rc = set_version(t, i, size, val, &v);
  int found = !rc && ipath[0] && lade__tar_index_load(t, x, ipath, v) == 0;
  if (!rc && !found && !asked && H(t)->open_http && sidecars_wanted(t)) asked = !(rc = lade__http_submit(H(t)->open_http, &side, 1, 0));
  int got = asked && sidecar_get(t, i, &b) == 0;
  if (!rc && !found && got) {
    rc = sidecar_index(t, i, &b, first.len ? &first : NULL, x);
    found = rc == 0;
    if (rc == 1) rc = 0;
  }
  lade__buf_free(&b);
  lade__buf_free(&first);
  if (rc || found) {
    if (!rc && got && ipath[0]) keep_index(t, i, x, ipath, v, cfg);
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

/* backend.index: a shard's index; the ranks waiting for this one's open
 * (tar_nodelist.h) see its progress. */
static int http_index(lade__tar_t *t, const struct lade_config *cfg, size_t i, lade__tar_index_t *x) {
  int rc = index_shard(t, cfg, i, x);
  lade__tar_nodelist_progress(&H(t)->nl);
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

/* ------------------------------------- the rest of a binding, at first read */

/* The binding piece's calls (tar_bind.h): its reads go through open_http,
 * coalesced by LAZY_GAP; a stored index names the HEAD's version. */
static int bind_ask(lade__tar_t *t, size_t si, const lade__tar_reads_t *r, uint32_t mask) {
  return ask_reads(t, si, r, mask, LAZY_GAP);
}
static lade__tar_ver_t bind_version(const lade__tar_t *t, size_t si) {
  return remote_ver(H(t)->shard_size[si], H(t)->shard_val[si]);
}

/* backend.check_shard: before the first sample of a shard whose sidecar
 * waits for the rest of its binding is served (tar_bind.h). */
static int http_check_shard(lade__tar_t *t, uint64_t idx) {
  uint32_t si = t->shard[idx];
  if (lade__tar_bind_state(&H(t)->bind, si) == LADE__BIND_BOUND) return 0;
  char what[LADE__PATH_MAX + 64];
  t->fmt->what(t, idx, what, sizeof what);
  int fetch, rc = lade__tar_bind_check(&H(t)->bind, si, what, &fetch);
  return rc && fetch ? name_member(rc, lade__tar_strs_at(&t->shards, si), what) : rc;
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
    uint32_t si = t->shard[idx[i]];
    if (lade__tar_bind_state(&H(t)->bind, si) == LADE__BIND_PENDING) lade__tar_bind_ask(&H(t)->bind, si); /* in the order of use */
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

/* Ready when the sample's bytes and, for a shard whose binding's rest is
 * in flight, those too have arrived (read() would wait for them). */
static bool http_ready(lade__tar_t *t, uint64_t idx) {
  if (idx >= t->count) return true;
  http_state_t *h = H(t);
  uint32_t si = t->shard[idx];
  if (lade__tar_bind_state(&h->bind, si) == LADE__BIND_ASKED)
    for (size_t k = 0; k < LADE__BIND_READS; k++)
      if (h->bind.rest[si] >> k & 1 && !lade__http_ready(h->open_http, (uint64_t)si * LADE__TAR_READS + k)) return false;
  return lade__http_ready(h->http, idx);
}

/* The open's requests (HEADs, index passes, sidecars and their binding
 * Ranges) are list_requests; get_requests are the samples'. */
static void http_stats(lade__tar_t *t, lade__source_stats_t *out) {
  lade__remote_stats(H(t) ? H(t)->http : NULL, out);
  if (!H(t)) return;
  out->list_requests += H(t)->open_requests;
  out->bytes += H(t)->open_bytes;
  if (H(t)->open_http) { /* alive after open: the bindings' rests */
    lade__http_stats_t st;
    lade__http_stats(H(t)->open_http, &st);
    out->list_requests += st.get_requests;
    out->bytes += st.bytes;
  }
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

/* open_http's arrivals: after start(), the rest of a binding that a
 * sample's readiness waits for (the workers are woken as for samples). */
static void open_arrived(void *ctx) {
  http_state_t *h = H(ctx);
  if (__atomic_load_n(&h->started, __ATOMIC_ACQUIRE) && h->o.arrived) h->o.arrived(h->o.arrived_ctx);
}

/* The open's handle: the sidecars and the Ranges that bind them, small
 * requests, as many in flight as this rank's share of http_max_concurrency
 * allows (not tuned: the open is short); a sidecar may be larger than
 * max_sample_bytes. */
static int open_http_start(lade__tar_t *t) {
  lade__http_opts_t o = H(t)->o;
  o.fixed_conc = LADE__MAX(o.max_conc, o.fixed_conc);
  o.max_body = (uint64_t)1 << 30;
  o.arrived = open_arrived;
  o.arrived_ctx = t;
  int rc = lade__http_create(&H(t)->open_http, &o);
  return rc ? rc : lade__http_start(H(t)->open_http, SIDE0(t) + t->shards.n);
}


static int http_open(lade__tar_t *t, const struct lade_config *cfg, lade__source_t *s) {
  http_state_t *h = calloc(1, sizeof *h);
  if (!h) return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  h->nl.fd = -1;
  pthread_mutex_init(&h->probe_mu, NULL);
  t->be_state = h;
  const char *first = lade__tar_is_url(cfg->source) ? cfg->source : lade__tar_strs_at(&t->shards, 0);
  int rc = remote_http(t, cfg, s, first);
  if (!rc)
    rc = lade__tar_nodelist_open(&h->nl, lade__tar_index_dir(cfg), t->fmt->index_name, s->job, cfg->source,
                                 &t->shards);
  if (!rc && lade__tar_is_url(cfg->source) && !h->nl.loaded) {
    char url[8192]; /* a list file's (an s3:// one too); "": too long to name */
    if (name_url(t, cfg->source, url, sizeof url)) url[0] = '\0';
    rc = lade__tar_remote_shards(t, cfg->source, h->http, h->s3 ? &h->w : NULL, url);
  }
  size_t ns = t->shards.n ? t->shards.n : 1;
  if (!rc && (!(h->shard_ver = calloc(ns, sizeof *h->shard_ver)) ||
              !(h->shard_size = calloc(ns, sizeof *h->shard_size)) ||
              !(h->shard_val = calloc(ns, sizeof *h->shard_val))))
    rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
  static const lade__tar_bind_ops_t bind_ops = {bind_ask, take_reads, bind_version};
  if (!rc) rc = lade__tar_bind_open(&h->bind, t, &bind_ops);
  if (!rc) rc = open_http_start(t);
  return rc;
}

static int http_start(lade__tar_t *t) {
  http_state_t *h = H(t);
  lade__tar_nodelist_store(&h->nl, &t->shards, h->shard_size, h->shard_val); /* every shard indexed */
  if (!__atomic_load_n(&h->bind.pending, __ATOMIC_RELAXED))
    open_http_close(h);
  else /* every shard's rest may be asked ahead of its reads (a read-ahead over all shards) */
    lade__http_reserve(h->open_http, (uint64_t)t->shards.n * LADE__BIND_READS + 1024, 0);
  __atomic_store_n(&h->started, 1, __ATOMIC_RELEASE);
  return lade__http_start(h->http, t->count);
}

static void http_reserve(lade__tar_t *t, uint64_t samples, uint64_t bytes) {
  lade__http_reserve(H(t)->http, samples, bytes);
}

static void http_close(lade__tar_t *t) {
  http_state_t *h = H(t);
  if (!h) return;
  lade__http_destroy(h->open_http); /* first: their threads read the shard list */
  lade__http_destroy(h->http);
  lade__tar_nodelist_close(&h->nl, t->shards.n);
  lade__s3_where_free(&h->w);
  free(h->shard_ver);
  free(h->shard_size);
  for (size_t i = 0; h->shard_val && i < t->shards.n; i++) free(h->shard_val[i]);
  free(h->shard_val);
  lade__tar_bind_close(&h->bind);
  pthread_mutex_destroy(&h->probe_mu);
  free(h);
  t->be_state = NULL;
}

const lade__tar_backend_t lade__tar_http = {
    .index_threads = 64, /* each waits on a HEAD and its sidecar, or streams a shard */
    .open = http_open,
    .index = http_index,
    .start = http_start,
    .check_shard = http_check_shard,
    .read = http_read,
    .version = http_version,
    .close = http_close,
    .submit = http_submit,
    .ready = http_ready,
    .stats = http_stats,
    .reserve = http_reserve};

#endif /* LADE_HAVE_CURL */
