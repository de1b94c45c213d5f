/*
 * http.h - many HTTP GETs in flight from one thread (docs/http.md). The
 * remote sources (s3.c, the tar source's http(s):// and s3:// shards) hand
 * their sample reads to one lade__http_t: it owns a curl multi handle on a
 * thread of its own, the queues (urgent reads, submitted batches, background
 * prefetch), the concurrency limit (fixed or tuned), retries with backoff on
 * transient errors, size caps, and a table of arrived bodies keyed by sample
 * index: the submit/want/ready/read semantics of source.h, so a source's ops
 * are thin wrappers. What is particular to a store (URLs, signing, the
 * words of its error replies, a listing that may be stale) comes in through
 * the hooks of lade__http_opts_t. Needs libcurl (LADE_HAVE_CURL).
 */
#ifndef LADE__HTTP_H
#define LADE__HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

struct curl_slist;

typedef struct lade__http lade__http_t;

/* The longest error message the module writes (a URL, the server's words,
 * a note from the hooks). */
#define LADE__HTTP_MSG (2304 + 4096)

typedef struct lade__http_opts {
  const char *what; /* the source in messages: "s3 source" (borrowed) */
  uint32_t timeout_ms, connect_timeout_ms; /* per request, and to connect */
  uint32_t retries;                        /* per request, after the first try */
  uint32_t retry_base_ms;                  /* full-jitter backoff base (doubles per retry, capped at 20 s) */
  uint32_t fixed_conc;                     /* requests in flight; 0: tuned between 4 and max_conc */
  uint32_t max_conc;
  /* The concurrency the bound on arrived, unread results (4 x it + 1024)
   * follows, when larger than max_conc and fixed_conc: a rank's share of the
   * node's bound (source/remote.c) must not shrink it, or results read
   * ahead would be dropped and fetched again. 0: max_conc. */
  uint32_t table_conc;
  uint64_t max_body;   /* max_sample_bytes: no request expecting more is sent */
  /* borrowed, must outlive the handle: extra headers, "AKID:SECRET" and
   * curl's CURLOPT_AWS_SIGV4 string (both NULL: unsigned requests) */
  const struct curl_slist *headers;
  const char *userpwd, *sigv4;
  /* PEM CA bundle that verifies https:// servers (CURLOPT_CAINFO, every
   * request); NULL or "": $SSL_CERT_FILE, else $CURL_CA_BUNDLE, else
   * libcurl's default. Copied by lade__http_create. Verification is never
   * turned off. */
  const char *ca_file;
  /* Hooks, called on the loop thread (url, name also on callers' threads)
   * with the module's lock held: they must not call into the module. */
  void *ctx;
  /* The URL of object `obj` (the caller's numbering). 0, or -1: too long. */
  int (*url)(void *ctx, uint64_t obj, char *url, size_t size);
  /* The object's name in messages ("s3://bucket/key", the URL). */
  void (*name)(void *ctx, uint64_t obj, char *buf, size_t size);
  /* Optional: reads a non-2xx reply's body (at most 64 KiB) into `what`
   * (e.g. " SlowDown: Please reduce..."); sets *retry for a transient
   * error and *throttle when the server asks to slow down. */
  void (*error_body)(void *ctx, const char *body, size_t len, char *what, size_t size, int *retry, int *throttle);
  /* Optional: an object was found replaced or deleted since it was listed
   * (or, pinned, another version than the pinned one answered). */
  void (*stale)(void *ctx);
  /* Optional: appended to errors about a listed size or a vanished object. */
  void (*note)(void *ctx, char *buf, size_t size);
  /* Optional: the version of object `obj` that the caller's offsets into
   * it were read from (an index): its validator as lade__http_head gives
   * it ("etag X", "modified DATE"; NULL or "": none; borrowed, valid until
   * the handle is destroyed) and *size its size then (UINT64_MAX: not
   * known). Its requests then carry If-Match (a strong ETag) or
   * If-Unmodified-Since, and a reply from another version (HTTP 412, or
   * another ETag / Last-Modified) or whose Content-Range gives another
   * total size fails at once, never retried (docs/http.md, "Integrity").
   * Called on the loop thread as each request starts, without the lock:
   * it reads what open() built. */
  const char *(*pin)(void *ctx, uint64_t obj, uint64_t *size);
  /* Optional: called on the loop thread, with no lock held, when submitted
   * samples have arrived (a source's on_ready), with arrived_ctx. */
  void (*arrived)(void *arrived_ctx);
  void *arrived_ctx;
} lade__http_opts_t;

/* A slice of a reply's body that is one sample's bytes. */
typedef struct lade__http_part {
  uint64_t idx;      /* sample index */
  uint64_t off, len; /* within the body */
} lade__http_part_t;

/* One GET. */
typedef struct lade__http_get {
  uint64_t obj;      /* which object (the hooks' number) */
  uint64_t off, len; /* len > 0: only bytes [off, off+len) (a Range request; a 206 whose
                        Content-Range names exactly these bytes expected) */
  uint64_t expect;   /* the size the body must have (the listed size, len); UINT64_MAX: any, up to max_body */
  int refresh;       /* a body of another size than `expect` is followed by one HEAD (listings) */
  /* the samples the body holds: parts[0..nparts); nparts 0 means one part,
   * sample `obj`, the whole body. Copied by submit. */
  uint32_t nparts;
  const lade__http_part_t *parts;
} lade__http_get_t;

/* A handle for blocking GETs (lade__http_get_blocking: listings, index
 * passes); the loop starts with lade__http_start. *o is copied (its
 * borrowed pointers are kept). Returns 0 or a negative code with
 * lade_last_error() set. */
int lade__http_create(lade__http_t **out, const lade__http_opts_t *o);
/* Starts the loop thread, with results keyed by sample index
 * 0..n_idx-1. Once per handle; submit, ready and read need it. On failure
 * the handle is still destroyed with lade__http_destroy. */
int lade__http_start(lade__http_t *h, uint64_t n_idx);
/* Stops the thread (abandoning transfers; blocked readers get LADE_EINTR)
 * and frees everything. NULL does nothing. */
void lade__http_destroy(lade__http_t *h);

/* source.h's submit(): queues the GETs, each adding one want per part;
 * returns at once. Thread-safe. */
int lade__http_submit(lade__http_t *h, const lade__http_get_t *g, size_t n, int background);
/* source.h's reserve(): raises the bound on arrived, unread results to
 * at least `results` entries and `bytes` bytes (the defaults: 4 x max
 * concurrency + 1024 entries, 512 MiB). Thread-safe. */
void lade__http_reserve(lade__http_t *h, uint64_t results, uint64_t bytes);
/* source.h's ready(idx). Thread-safe. */
bool lade__http_ready(lade__http_t *h, uint64_t idx);
/* source.h's read(idx): takes one want's result of idx (waiting for it), or,
 * with no want, sends `g` (which must hold sample idx alone) ahead of the
 * queued batches and waits. The body is swapped into *out (no copy).
 * Thread-safe. */
int lade__http_read(lade__http_t *h, uint64_t idx, const lade__http_get_t *g, lade__buf_t *out);
/* The traffic counters of a handle. */
typedef struct lade__http_stats {
  uint64_t get_requests;  /* GET requests sent, retries included */
  uint64_t list_requests; /* blocking GETs of listings */
  uint64_t retries;       /* requests retried after a transient error */
  uint64_t bytes;         /* body bytes received */
  uint32_t in_flight;     /* requests in flight now */
  uint32_t concurrency;   /* the current limit on requests in flight */
} lade__http_stats_t;
/* Fills *out. Thread-safe. */
void lade__http_stats(lade__http_t *h, lade__http_stats_t *out);

/* A blocking GET of url into out, on the caller's thread, with the same
 * retries, caps and messages (listings, label files): `shown` names it in
 * errors; a body past `cap` bytes fails before it is buffered. `cut`
 * (optional) judges a complete 2xx body: nonzero with `what` filled means
 * it was cut short and is fetched again. `is_list` counts it as a LIST
 * request. Thread-safe. */
int lade__http_get_blocking(lade__http_t *h, const char *url, const char *shown, lade__buf_t *out, uint64_t cap,
                            int is_list, int (*cut)(const lade__buf_t *b, char *what, size_t size));

/* A blocking HEAD of url with retries: *size from its Content-Length, and
 * `validator` ("etag X", else "modified DATE", else "") names the version
 * of the object. Errors name `shown`. Thread-safe. */
int lade__http_head(lade__http_t *h, const char *url, const char *shown, uint64_t *size, char *validator,
                    size_t vsize);

/* lade__http_head in one request with the object's first bytes: a GET of
 * bytes 0..want-1 (want > 0), *size from its Content-Range's total, the
 * bytes (fewer when the object is shorter) into *first; the version as
 * lade__http_head gives it. An empty object is asked with a HEAD. A server
 * that answers a Range with the whole object (200) fails, as every Range
 * does. Thread-safe. */
int lade__http_head_first(lade__http_t *h, const char *url, const char *shown, uint64_t want, lade__buf_t *first,
                          uint64_t *size, char *validator, size_t vsize);

/* A streamed GET of a whole object of `size` bytes, read forward on the
 * caller's thread as tarfmt's pread callback (lade__http_stream_pread):
 * bytes arrive as they are asked for and only the window since the last
 * read's offset is kept, so an index pass over a shard costs one request
 * (plus one per resume) and little memory. A transfer that fails is
 * resumed with a Range request where it stopped (retries and backoff as
 * any request). Every request of the stream is pinned to `validator` and
 * `size` as the pin hook pins an object: a reply from another version
 * fails before its first byte is read. */
typedef struct lade__http_stream lade__http_stream_t;
int lade__http_stream_open(lade__http_t *h, const char *url, const char *shown, uint64_t size, const char *validator,
                           lade__http_stream_t **out);
/* tarfmt's lade__tar_pread_fn: reads at offsets never below the previous
 * read's; returns the bytes read (fewer only at the end) or -EIO, with the
 * reason (URL, HTTP status, curl's words) kept for lade__http_stream_error. */
long lade__http_stream_pread(void *stream, void *buf, size_t len, uint64_t off);
/* The failure that made pread return -EIO (0 when none); sets lade_last_error(). */
int lade__http_stream_error(lade__http_stream_t *s);
void lade__http_stream_close(lade__http_stream_t *s);

/* Initialises libcurl once per process. 0 or LADE_EREMOTE (message set). */
int lade__http_global_init(void);

#endif
