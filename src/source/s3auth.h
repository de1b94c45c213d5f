/*
 * s3auth.h - where an S3 object lives and who asks for it: the endpoint
 * (setting, $AWS_ENDPOINT_URL_S3/$AWS_ENDPOINT_URL, or AWS's), path- or
 * virtual-host addressing, credentials signed with curl's AWS SigV4, URLs of
 * keys, the words of S3's <Error> replies, and ListObjectsV2 pagination. Used
 * by the s3 source (objects are samples) and the tar source (objects are
 * shards). Needs libcurl (LADE_HAVE_CURL). Secrets stay in this struct and
 * in curl's options: no message built here contains them.
 */
#ifndef LADE__S3AUTH_H
#define LADE__S3AUTH_H

#include "core/config.h"
#include "source/remote.h"
#include "source/s3xml.h"

typedef struct lade__s3_where {
  char bucket[256];
  char path[1024];       /* what follows s3://bucket/, as given */
  char endpoint[512], region[64];
  char base_url[1024];   /* endpoint + bucket in the chosen addressing, no trailing '/' */
  int virtual_host;
  char *userpwd;         /* "AKID:SECRET" (secret) or NULL: anonymous */
  char sigv4[128];
  struct curl_slist *headers; /* x-amz-content-sha256, x-amz-security-token (secret) */
} lade__s3_where_t;

/* Fills w for uri ("s3://bucket/path") from cfg's s3_* settings and the
 * AWS_* environment. Errors name cfg->source. On failure w is still freed
 * with lade__s3_where_free. */
int lade__s3_where_init(lade__s3_where_t *w, const struct lade_config *cfg, const char *uri);
/* Wipes and frees the secrets. */
void lade__s3_where_free(lade__s3_where_t *w);
/* RFC 3986 encoding as SigV4 wants it ('/' kept when keep_slash). -1: too long. */
int lade__s3_url_encode(char *dst, size_t size, const char *src, int keep_slash);
/* The URL of key (the bucket's when NULL), with ?query when not NULL. -1: too long. */
int lade__s3_url(const lade__s3_where_t *w, const char *key, const char *query, char *url, size_t size);
/* The http module's options for requests to w: lade__remote_http_opts's
 * (timeouts, retries, concurrency, caps, CA file, src's on_ready) plus
 * signing and S3's error words; the caller sets what, ctx, url, name and any
 * other hook. Borrows w's and cfg's strings. */
void lade__s3_http_opts(const lade__s3_where_t *w, const struct lade_config *cfg, lade__source_t *src,
                        lade__http_opts_t *o);
/* Lists every object under prefix (paginated ListObjectsV2, blocking, on h),
 * calling push per object in the server's order. Pages must end with their
 * closing tag (else fetched again) and never repeat a continuation token.
 * Errors name `shown`. */
int lade__s3_list(const lade__s3_where_t *w, lade__http_t *h, const char *prefix, const char *shown,
                  lade__s3_push_fn push, void *ctx);

#endif
