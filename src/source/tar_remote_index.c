/* tar_remote_index.c - the sidecar index of a remote shard
 * (tar_remote_index.h). */
#include "source/tar_remote_index.h"

#ifdef LADE_HAVE_CURL

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"
#include "source/remote.h"
#include "source/s3auth.h"

/* The walk's reads up to this size are kept whole (tar headers, class
 * members, TFRecord headers), and the last KEEP_TAIL bytes of a larger one
 * (a TFRecord record's data CRC, read with its data when features are
 * decoded): what bind() reads again. */
#define KEEP_MAX 4096
#define KEEP_TAIL 64

/* A small read the walk made: len bytes at off of the shard, kept at `at`
 * of the tee's bytes. */
typedef struct piece {
  uint64_t off;
  size_t at, len;
} piece_t;

/* The shard's stream, and the small reads made of it in offset order (a
 * stream reads forward). */
typedef struct tee {
  lade__http_stream_t *s;
  piece_t *p;
  size_t n, cap;
  lade__buf_t bytes;
  int missed;    /* bind() asked a byte the walk never read */
  int keep_none; /* test hook LADE_TEST_HOOK_TEE_KEEP_NONE: nothing kept, so bind() takes the second stream */
} tee_t;

static long tee_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  tee_t *t = ctx;
  long n = lade__http_stream_pread(t->s, dst, len, off);
  if (n <= 0 || t->keep_none) return n;
  size_t skip = n > KEEP_MAX ? (size_t)n - KEEP_TAIL : 0, k = (size_t)n - skip;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    piece_t *p = realloc(t->p, cap * sizeof *p);
    if (!p) return -ENOMEM;
    t->p = p;
    t->cap = cap;
  }
  if (lade__buf_reserve(&t->bytes, t->bytes.len + k) != 0) return -ENOMEM;
  memcpy(t->bytes.data + t->bytes.len, (const uint8_t *)dst + skip, k);
  t->p[t->n++] = (piece_t){off + skip, t->bytes.len, k};
  t->bytes.len += k;
  return n;
}

/* bind()'s reads, served from the kept pieces (one read may span two: a
 * tar header and the class member after it); a byte not kept fails it. */
static long tee_served(void *ctx, void *dst, size_t len, uint64_t off) {
  tee_t *t = ctx;
  size_t lo = 0, hi = t->n, done = 0;
  while (lo < hi) { /* the first piece that ends past off */
    size_t mid = lo + (hi - lo) / 2;
    if (t->p[mid].off + t->p[mid].len <= off) lo = mid + 1;
    else hi = mid;
  }
  for (size_t k = lo; k < t->n && done < len && t->p[k].off <= off + done; k++) {
    const piece_t *q = &t->p[k];
    uint64_t want = off + done, end = q->off + q->len;
    if (end <= want) continue;
    size_t c = (size_t)LADE__MIN((uint64_t)(len - done), end - want);
    memcpy((uint8_t *)dst + done, t->bytes.data + q->at + (want - q->off), c);
    done += c;
  }
  if (done == len) return (long)len;
  t->missed = 1;
  return -EIO;
}

/* The sidecar of the shard at url (shown names it) into out, its requests on h. */
static int sidecar_of(const lade__tar_t *t, lade__http_t *h, const char *url, const char *shown, const char *out) {
  uint64_t size = 0;
  char val[256];
  int rc = lade__http_head(h, url, shown, &size, val, sizeof val);
  if (rc) return rc;
  tee_t tee = {.keep_none = getenv("LADE_TEST_HOOK_TEE_KEEP_NONE") != NULL};
  lade__tar_index_t x = {0};
  rc = lade__http_stream_open(h, url, shown, size, val, &tee.s);
  if (!rc) {
    rc = t->fmt->walk(t, &x, tee_pread, &tee, size, shown);
    if (rc && lade__http_stream_error(tee.s)) rc = lade__http_stream_error(tee.s); /* the network's words */
  }
  lade__http_stream_close(tee.s);
  if (!rc) x.bind = t->fmt->bind(t, &x, tee_served, &tee);
  if (!rc && tee.missed) { /* bytes the walk did not keep: bind() reads them from a second stream, in its order,
                              which is the file's */
    lade__http_stream_t *s = NULL;
    rc = lade__http_stream_open(h, url, shown, size, val, &s);
    if (!rc) x.bind = t->fmt->bind(t, &x, lade__http_stream_pread, s);
    if (!rc && lade__http_stream_error(s)) rc = lade__http_stream_error(s);
    lade__http_stream_close(s);
  }
  if (!rc) {
    lade__tar_ver_t side = {size, LADE__TAR_SIDECAR_A, LADE__TAR_SIDECAR_B};
    if (lade__tar_index_store(t, &x, out, side, NULL) != 0)
      rc = lade__fail(LADE_EIO, "cannot write %s: %s", out, strerror(errno));
  }
  lade__tar_index_free(&x);
  free(tee.p);
  lade__buf_free(&tee.bytes);
  return rc;
}

static void no_name(void *ctx, uint64_t obj, char *buf, size_t size) {
  (void)ctx;
  (void)obj;
  snprintf(buf, size, "shard");
}

int lade__tar_remote_sidecar(const lade__tar_t *t, const struct lade_config *cfg, const char *shard, const char *out) {
  lade__http_opts_t o;
  lade__s3_where_t w;
  char url[8192];
  int s3 = !strncmp(shard, "s3://", 5), rc = 0;
  if (s3) {
    if ((rc = lade__s3_where_init(&w, cfg, shard)) != 0) return rc;
    lade__s3_http_opts(&w, cfg, NULL, &o);
    if (lade__s3_url(&w, w.path, NULL, url, sizeof url)) rc = lade__fail(LADE_ERANGE, "%s: too long", shard);
  } else {
    lade__remote_http_opts(&o, cfg, NULL);
    if (snprintf(url, sizeof url, "%s", shard) >= (int)sizeof url) rc = lade__fail(LADE_ERANGE, "%s: too long", shard);
  }
  o.what = "lade index";
  o.name = no_name; /* the loop's requests' names: none are made here */
  lade__http_t *h = NULL;
  if (!rc) rc = lade__http_create(&h, &o);
  if (!rc) rc = sidecar_of(t, h, url, shard, out);
  lade__http_destroy(h);
  if (s3) lade__s3_where_free(&w);
  return rc;
}

#else

int lade__tar_remote_sidecar(const lade__tar_t *t, const struct lade_config *cfg, const char *shard, const char *out) {
  (void)t;
  (void)cfg;
  (void)out;
  return lade__fail(LADE_EUNSUPPORTED, "%s: a URL, and this build has no libcurl (no remote sources)", shard);
}

#endif /* LADE_HAVE_CURL */
