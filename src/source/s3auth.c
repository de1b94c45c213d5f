/*
 * s3auth.c - where and who for S3 requests, S3's error words and
 * ListObjectsV2 pagination (s3auth.h). No threads, no locks: filled once
 * in open() and read-only after.
 */
#ifdef LADE_HAVE_CURL

#include "source/s3auth.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "source/s3xml.h"

#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_PAGE_CAP ((uint64_t)64 << 20) /* a listing page (1000 keys of at most 1 KiB) is far smaller */

/* RFC 3986 encoding as SigV4 wants it: unreserved characters kept, '/' kept
 * when keep_slash, everything else %XX with upper-case hex. */
int lade__s3_url_encode(char *dst, size_t size, const char *src, int keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
    int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
    if (n + (plain ? 1 : 3) >= size) return -1;
    if (plain) {
      dst[n++] = (char)*p;
    } else {
      dst[n++] = '%';
      dst[n++] = hex[*p >> 4];
      dst[n++] = hex[*p & 15];
    }
  }
  dst[n] = '\0';
  return 0;
}

/* The http module's error_body hook: S3's <Error><Code>/<Message>, and the
 * codes S3-compatible servers use for transient errors and throttling. */
static void s3_error_body(void *ctx, const char *b, size_t len, char *what, size_t size, int *retry, int *throttle) {
  (void)ctx;
  char code[128], msg[512];
  lade__xml_text(b, b + len, "Code", code, sizeof code);
  lade__xml_text(b, b + len, "Message", msg, sizeof msg);
  *retry = !strcmp(code, "SlowDown") || !strcmp(code, "RequestTimeout") || !strcmp(code, "InternalError") ||
           !strcmp(code, "ServiceUnavailable") || !strcmp(code, "Throttling") || !strcmp(code, "RequestLimitExceeded");
  *throttle = !strcmp(code, "SlowDown");
  snprintf(what, size, "%s%s%s%s", code[0] ? " " : "", code, msg[0] ? ": " : "", msg);
}

int lade__s3_url(const lade__s3_where_t *w, const char *key, const char *query, char *url, size_t size) {
  char enc[3 * 1024 + 16];
  if (key && lade__s3_url_encode(enc, sizeof enc, key, 1)) return -1;
  int n = snprintf(url, size, "%s/%s%s%s", w->base_url, key ? enc : "", query ? "?" : "", query ? query : "");
  return n < 0 || (size_t)n >= size ? -1 : 0;
}

void lade__s3_http_opts(const lade__s3_where_t *w, const struct lade_config *cfg, lade__source_t *src,
                        lade__http_opts_t *o) {
  lade__remote_http_opts(o, cfg, src);
  o->headers = w->headers;
  o->userpwd = w->userpwd;
  o->sigv4 = w->sigv4;
  o->error_body = s3_error_body;
}

void lade__s3_where_free(lade__s3_where_t *d) {
  /* secrets are wiped before their memory goes back (lade__wipe: a memset
   * before free() may be dropped as a dead store) */
  if (d->userpwd) {
    lade__wipe(d->userpwd, strlen(d->userpwd));
    free(d->userpwd);
  }
  for (struct curl_slist *l = d->headers; l; l = l->next) /* x-amz-security-token */
    if (l->data) lade__wipe(l->data, strlen(l->data));
  curl_slist_free_all(d->headers);
  d->userpwd = NULL;
  d->headers = NULL;
}

/* A LIST page that does not end with its closing tag was cut short (with a
 * Content-Length to match): what is left may parse, but its <IsTruncated>
 * and later objects are gone, so it is fetched again. */
static int list_cut(const lade__buf_t *b, char *what, size_t size) {
  if (lade__s3_list_complete((const char *)b->data, b->len)) return 0;
  snprintf(what, size, "the listing page (%zu bytes) ends before </ListBucketResult>: cut short", b->len);
  return 1;
}

/* The continuation tokens seen so far, as 64-bit hashes in an open-addressed
 * set: a server that hands out a token again (IsTruncated=true forever, or a
 * cycle of pages) would otherwise be listed without end. */
typedef struct token_set {
  uint64_t *h;
  size_t n, cap; /* cap: a power of two, or 0 */
} token_set_t;

/* 1 when token was already in the set, 0 when added, -1 out of memory. */
static int token_seen(token_set_t *t, const char *token) {
  uint64_t h = lade__hash64(token, strlen(token), 0x746f6b656e) | 1; /* 0 marks a free slot */
  if (2 * (t->n + 1) > t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    uint64_t *nh = calloc(cap, sizeof *nh);
    if (!nh) return -1;
    for (size_t i = 0; i < t->cap; i++) {
      if (!t->h[i]) continue;
      size_t j = t->h[i] & (cap - 1);
      while (nh[j]) j = (j + 1) & (cap - 1);
      nh[j] = t->h[i];
    }
    free(t->h);
    t->h = nh;
    t->cap = cap;
  }
  size_t j = h & (t->cap - 1);
  for (; t->h[j]; j = (j + 1) & (t->cap - 1))
    if (t->h[j] == h) return 1;
  t->h[j] = h;
  t->n++;
  return 0;
}

int lade__s3_list(const lade__s3_where_t *w, lade__http_t *h, const char *prefix, const char *shown,
                  lade__s3_push_fn push, void *ctx) {
  lade__buf_t page = {0};
  char token[2048] = "", etoken[6200], eprefix[3200], query[9600], url[12000];
  int rc = 0, more = 1;
  unsigned pages = 0;
  token_set_t seen = {0};
  if (lade__s3_url_encode(eprefix, sizeof eprefix, prefix, 0))
    return lade__fail(LADE_ERANGE, "%s: prefix too long", shown);
  while (!rc && more) {
    /* parameters in sorted order: curl 7.88's SigV4 signs the query as given */
    if (token[0]) {
      if (lade__s3_url_encode(etoken, sizeof etoken, token, 0)) {
        rc = lade__fail(LADE_ERANGE, "%s: continuation token too long", shown);
        break;
      }
      snprintf(query, sizeof query, "continuation-token=%s&list-type=2&prefix=%s", etoken, eprefix);
    } else {
      snprintf(query, sizeof query, "list-type=2&prefix=%s", eprefix);
    }
    if (lade__s3_url(w, NULL, query, url, sizeof url)) {
      rc = lade__fail(LADE_ERANGE, "%s: URL too long", shown);
      break;
    }
    rc = lade__http_get_blocking(h, url, shown, &page, S3_PAGE_CAP, 1, list_cut);
    if (rc) break;
    rc = lade__buf_reserve(&page, page.len + 1);
    if (rc) break;
    page.data[page.len] = '\0';
    rc = lade__s3_parse_list((const char *)page.data, page.len, push, ctx, token, sizeof token, &more, shown);
    pages++;
    int again = !rc && more ? token_seen(&seen, token) : 0;
    if (again < 0) rc = lade__fail(LADE_ENOMEM, "s3 listing: out of memory");
    if (again > 0) /* boto3's paginator stops the same way ("the same next token was received twice") */
      rc = lade__fail(LADE_EREMOTE,
                      "%s: listing page %u says IsTruncated=true with the continuation token '%.80s', which an "
                      "earlier page already gave: the server's listing does not advance; stopped",
                      shown, pages, token);
  }
  free(seen.h);
  lade__buf_free(&page);
  return rc;
}

static const char *env_or(const char *setting, const char *a, const char *b) {
  if (setting && setting[0]) return setting;
  const char *v = a ? getenv(a) : NULL;
  if (v && v[0]) return v;
  v = b ? getenv(b) : NULL;
  return v && v[0] ? v : NULL;
}

int lade__s3_where_init(lade__s3_where_t *d, const struct lade_config *cfg, const char *uri) {
  memset(d, 0, sizeof *d);
  const char *src = uri + 5, *slash = strchr(src, '/');
  size_t blen = slash ? (size_t)(slash - src) : strlen(src);
  if (blen == 0 || blen >= sizeof d->bucket)
    return lade__fail(LADE_EINVAL, "dataset %s: expected s3://bucket/prefix", uri);
  memcpy(d->bucket, src, blen);
  d->bucket[blen] = '\0';
  if (strlen(slash ? slash + 1 : "") >= sizeof d->path)
    return lade__fail(LADE_ERANGE, "dataset %s: prefix too long", cfg->source);
  snprintf(d->path, sizeof d->path, "%s", slash ? slash + 1 : "");

  const char *region = env_or(cfg->s3_region, "AWS_REGION", "AWS_DEFAULT_REGION");
  snprintf(d->region, sizeof d->region, "%s", region ? region : "us-east-1");
  const char *ep = env_or(cfg->s3_endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
  if (ep) snprintf(d->endpoint, sizeof d->endpoint, "%s", ep);
  else snprintf(d->endpoint, sizeof d->endpoint, "https://s3.%s.amazonaws.com", d->region);
  size_t elen = strlen(d->endpoint);
  while (elen && d->endpoint[elen - 1] == '/') d->endpoint[--elen] = '\0';
  const char *host = strstr(d->endpoint, "://");
  if (!host || strchr(host + 3, '/') || strchr(host + 3, '@') || strchr(host + 3, '?'))
    return lade__fail(LADE_EINVAL, "s3 endpoint must look like scheme://host[:port] (no path, no user)");
  host += 3;
  int dns_ok = blen >= 3 && !strchr(d->bucket, '.') && !strchr(d->bucket, '_');
  for (const char *c = d->bucket; *c; c++) dns_ok = dns_ok && !(*c >= 'A' && *c <= 'Z');
  d->virtual_host = cfg->s3_addressing == LADE__S3_ADDR_VIRTUAL ||
                    (cfg->s3_addressing == LADE__S3_ADDR_AUTO && !ep && dns_ok);
  if (d->virtual_host)
    snprintf(d->base_url, sizeof d->base_url, "%.*s%s.%s", (int)(host - d->endpoint), d->endpoint, d->bucket, host);
  else
    snprintf(d->base_url, sizeof d->base_url, "%s/%s", d->endpoint, d->bucket);

  const char *akid = cfg->s3_access_key_id[0] ? cfg->s3_access_key_id : getenv("AWS_ACCESS_KEY_ID");
  const char *secret = cfg->s3_secret_access_key[0] ? cfg->s3_secret_access_key : getenv("AWS_SECRET_ACCESS_KEY");
  const char *token = cfg->s3_session_token[0] ? cfg->s3_session_token : getenv("AWS_SESSION_TOKEN");
  if (akid && !akid[0]) akid = NULL;
  if (secret && !secret[0]) secret = NULL;
  if (!akid != !secret)
    return lade__fail(LADE_EINVAL, "s3 credentials: %s is set but %s is not", akid ? "the access key id" : "the secret key",
                      akid ? "the secret key" : "the access key id");
  d->headers = curl_slist_append(NULL, "x-amz-content-sha256: " S3_EMPTY_SHA256);
  if (!d->headers) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
  if (akid) {
    if (strchr(akid, ':')) return lade__fail(LADE_EINVAL, "s3 credentials: the access key id must not contain ':'");
    size_t n = strlen(akid) + strlen(secret) + 2;
    d->userpwd = malloc(n);
    if (!d->userpwd) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
    snprintf(d->userpwd, n, "%s:%s", akid, secret);
    snprintf(d->sigv4, sizeof d->sigv4, "aws:amz:%s:s3", d->region);
    if (token && token[0]) {
      size_t tn = strlen(token) + 32;
      char *h = malloc(tn);
      if (!h) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
      snprintf(h, tn, "x-amz-security-token: %s", token);
      struct curl_slist *l = curl_slist_append(d->headers, h);
      lade__wipe(h, tn);
      free(h);
      if (!l) return lade__fail(LADE_ENOMEM, "s3 source: out of memory");
      d->headers = l;
    }
  }
  return 0;
}

#endif /* LADE_HAVE_CURL */
