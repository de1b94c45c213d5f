/*
 * http_impl.h - what the files of the http module share (http.h is the
 * interface its users include): the request, result and handle structs,
 * and the functions each file offers the others.
 *
 *   http.c         the entry points: create/start/destroy, submit, ready,
 *                  read, stats
 *   http_loop.c    the loop thread: queues, starting and finishing
 *                  transfers, refresh HEADs
 *   http_tune.c    the limit on requests in flight, fixed or tuned
 *   http_table.c   the table of arrived, unread results keyed by sample index
 *   http_retry.c   judging a finished transfer (retry, fail, refresh) and
 *                  the backoff between tries
 *   http_easy.c    one curl easy handle: options, headers, the body capped
 *   http_oneshot.c blocking GETs and HEADs, and streamed GETs, on the
 *                  caller's thread
 *
 * The locking rules are those of http.c's opening comment: "locked" below
 * means the caller holds h->mu.
 */
#ifndef LADE__HTTP_IMPL_H
#define LADE__HTTP_IMPL_H

#include <curl/curl.h>
#include <pthread.h>

#include "core/core.h"
#include "http/http.h"

#define LADE__HTTP_BACKOFF_CAP_MS 20000.0
#define LADE__HTTP_MIN_AUTO 4
#define LADE__HTTP_START_AUTO 32
#define LADE__HTTP_WINDOW_S 0.5
#define LADE__HTTP_WHAT 768
#define LADE__HTTP_ERROR_CAP ((uint64_t)64 << 10) /* an error reply: only its first words are read */

/* ------------------------------------------------------------------ types */

typedef struct lade__http_result {
  uint64_t idx;
  int rc;                          /* 0 or the final error */
  lade__buf_t body;
  char *msg;                       /* error text (malloc), NULL on success */
  struct lade__http_result *next_idx; /* same index, arrival order */
  struct lade__http_result *prev, *next; /* all stored results, oldest first */
} lade__http_result_t;

typedef struct lade__http_waiter { /* a read() that started its own request */
  int done, rc;
  lade__buf_t body;
  char msg[LADE__HTTP_MSG];
} lade__http_waiter_t;

typedef struct lade__http_req {
  lade__http_get_t get;            /* get.parts points at `one` or a malloc'd copy */
  lade__http_part_t one;
  lade__http_waiter_t *waiter;     /* NULL: a submitted want, answered through the table */
  CURL *easy;
  lade__buf_t body;                /* the reply's bytes; with `parts`, only body.len counts them */
  lade__buf_t *parts;              /* a 2xx reply of several parts: each part's bytes, written as they arrive */
  uint32_t part_next;              /* the first part not complete */
  char validator[256];             /* the reply's ETag, else its Last-Modified */
  int has_etag;
  /* the version the object's offsets were read from (the pin hook): its
   * validator (borrowed; NULL: none) and size (UINT64_MAX: not known) */
  const char *pin;
  uint64_t pin_size;
  struct curl_slist *hdrs;         /* the handle's headers and the precondition the pin asks for */
  /* the reply as on_header reads it: its status line, its Content-Range
   * (crange: 0 none, 1 read, -1 unreadable; total UINT64_MAX for '*') */
  long hstatus;
  int crange;
  uint64_t cr_first, cr_last, cr_total;
  char cr_text[96];
  int refused;                     /* the headers showed a reply that must not be read: FINAL (2: another
                                      version than the pinned one: lade__http_check_reply) */
  char refused_what[LADE__HTTP_WHAT];
  uint32_t retries;
  double not_before;               /* retry timer (monotonic s) */
  int bg;                          /* a background submit */
  uint64_t cap;                    /* a 2xx body past this many bytes is stopped (error bodies:
                                      LADE__HTTP_ERROR_CAP) */
  int64_t clen;                    /* the reply's Content-Length, -1 when none */
  int over;                        /* the body passed cap (or its Content-Length did) */
  int head_agreed;                 /* the HEAD found the size the listing has */
  int head;                        /* this turn is a HEAD refreshing `expect` */
  int probe;                       /* a Range from byte 0 standing for a HEAD: the reply may end at the
                                      object's end, before the Range's (lade__http_head_first) */
  int refreshed;                   /* a HEAD has been made (once per request) */
  char size_what[LADE__HTTP_WHAT]; /* the size mismatch that sent it to the HEAD */
  char errbuf[CURL_ERROR_SIZE];
  struct lade__http_req *next, *prev; /* a queue, or the active list while in flight */
} lade__http_req_t;

/* The results of submitted requests by sample index (http_table.c owns
 * every field; the others call its functions). Guarded by the handle's mu:
 * every function is called with it held. */
typedef struct lade__http_table {
  const char *what;                     /* the source in messages */
  void (*name)(void *ctx, uint64_t obj, char *buf, size_t size); /* an object's name (the opts' hook) */
  void *name_ctx;
  uint64_t n_idx;                       /* results are keyed by sample index 0..n_idx-1 */
  uint32_t *wants;                      /* per index: parts submitted and not read yet */
  lade__http_result_t **res;            /* per index: arrived results, arrival order */
  lade__http_result_t *oldest, *newest; /* every stored result */
  size_t count, bytes, max_count, max_bytes;
  lade__buf_t free_bufs[32];            /* bodies' memory kept for later bodies */
  size_t n_free_bufs;
} lade__http_table_t;

/* Idle curl easy handles kept for the next request (under the handle's mu). */
typedef struct lade__http_easies {
  CURL **e;
  size_t n, cap, most; /* most: how many are kept (0: no bound) */
} lade__http_easies_t;

typedef struct lade__http_fifo {
  lade__http_req_t *head, *tail;
  size_t n;
} lade__http_fifo_t;

/* The limit on requests in flight (http_tune.c owns every field; the loop
 * calls its functions under the handle's mu). */
typedef struct lade__http_tuner {
  uint32_t limit;     /* requests in flight allowed now */
  uint32_t fixed;     /* fixed_conc: the limit, never tuned (0: tuned) */
  uint32_t max;       /* max_conc: the tuned limit's ceiling */
  double win_start, win_prev_rate, last_throttle;
  uint64_t win_bytes; /* completed in the window */
  int win_starved;    /* the window ran out of queued demand: it says nothing */
  int flat_windows;
  int slow_start;     /* doubling the limit until the rate stops growing */
} lade__http_tuner_t;

/* The loop thread's state (http_loop.c owns every field; http.c calls its
 * functions). The queues, the active list, the idle requests and handles,
 * the counts in flight and the tuner are under the handle's mu; the multi
 * handle is the loop thread's alone (curl_multi_wakeup excepted). */
typedef struct lade__http_loop {
  pthread_t thread;
  int thread_started;
  CURLM *multi;
  lade__http_fifo_t urgent, queue, bg, timers; /* bg: background submits; timers: unsorted, scanned each turn */
  lade__http_req_t *active;      /* in flight (doubly linked) */
  lade__http_req_t *free_reqs;
  lade__http_easies_t free_easy; /* idle easy handles (their connections are the multi's) */
  uint32_t in_flight;
  uint32_t bg_in_flight;         /* background requests among in_flight */
  lade__http_tuner_t tune;
  uint64_t truncated, throttled, refreshed;
} lade__http_loop_t;

struct lade__http {
  lade__http_opts_t o;
  char *ca_file; /* o.ca_file points here: the resolved CA bundle, NULL for libcurl's default */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  lade__http_loop_t loop; /* the loop thread's (http_loop.c) */
  /* the blocking calls' idle easy handles (http_oneshot.c): each keeps its
   * live connection, so a run of HEADs and listing pages reuses connections
   * (and TLS sessions) instead of opening one per request */
  lade__http_easies_t idle_easy;
  lade__http_table_t tab; /* the results by sample index (http_table.c; under mu) */
  /* counters of the loop and the blocking calls (under mu) */
  uint64_t get_requests, list_requests, retried, bytes;
};

static inline void lade__http_fifo_push(lade__http_fifo_t *f, lade__http_req_t *r) {
  r->next = NULL;
  if (f->tail) f->tail->next = r;
  else f->head = r;
  f->tail = r;
  f->n++;
}

static inline lade__http_req_t *lade__http_fifo_pop(lade__http_fifo_t *f) {
  lade__http_req_t *r = f->head;
  if (!r) return NULL;
  f->head = r->next;
  if (!f->head) f->tail = NULL;
  f->n--;
  r->next = NULL;
  return r;
}

static inline void lade__http_name_of(const lade__http_t *h, const lade__http_req_t *r, char *buf, size_t size) {
  h->o.name(h->o.ctx, r->get.obj, buf, size);
}

/* ------------------------------------------------- http_retry.c: verdicts */


/* LADE__HTTP_SIZE: a complete reply of another size than expected (the listed
 * size, or more than the cap): the object may have been replaced since it
 * was listed, so with `refresh` the size is checked with a HEAD first. */
enum { LADE__HTTP_OK = 0, LADE__HTTP_RETRY, LADE__HTTP_FINAL, LADE__HTTP_SIZE };

typedef struct lade__http_verdict {
  int kind;          /* LADE__HTTP_OK, LADE__HTTP_RETRY, LADE__HTTP_FINAL, LADE__HTTP_SIZE */
  int code;          /* lade error code when not OK */
  int throttled;     /* 503/429/SlowDown: the tuner backs off */
  int truncated;
  int changed;       /* the object is another version than the pinned one (412, another validator or size) */
  long status;       /* HTTP status, 0 when none arrived */
  uint64_t size;     /* a HEAD's Content-Length: the object's size now */
  char what[LADE__HTTP_WHAT]; /* "HTTP 503 SlowDown: message" */
} lade__http_verdict_t;

/* An idle handle of p (reset by the caller before use), else a new one
 * (NULL: out of memory). Thread-safe: takes h->mu. */
CURL *lade__http_easy_take(lade__http_t *h, lade__http_easies_t *p);
/* Keeps e in p for a later take (at most p->most), else closes it.
 * Thread-safe: takes h->mu. */
void lade__http_easy_keep(lade__http_t *h, lade__http_easies_t *p, CURL *e);

/* 1 when a transfer that ended with curl's code c is tried again (refused,
 * reset, timed out, cut short; not a TLS verification failure). */
int lade__http_curl_retryable(CURLcode c);
/* Judges one finished transfer of r from its curl code, HTTP status (0:
 * none arrived) and Content-Length (-1: none): r->get.expect is the size
 * the body must have (UINT64_MAX: any), r->over says on_body stopped it
 * past r->cap, and r->head that it was a HEAD (no body; the
 * Content-Length is the size). Calls h's error_body hook on an error
 * reply's body. */
void lade__http_judge(const lade__http_t *h, CURLcode cc, long status, int64_t clen, const lade__http_req_t *r,
                      lade__http_verdict_t *v);
/* Checks a 2xx reply's headers, as read into r, against r's request:
 * a Range request's 206 must carry a Content-Range naming exactly the
 * bytes asked, and its total must be r->pin_size when both are known; a
 * pinned request's reply must carry r->pin's ETag (compared weakly) or
 * Last-Modified when it carries one of that kind. 0, or with `what`
 * saying what differs (r->refused_what's words) 2 when the reply is from
 * another version of the object than the pinned one, 1 otherwise. */
int lade__http_check_reply(const lade__http_req_t *r, long status, char *what, size_t size);
/* The same, the status and Content-Length read from e. */
void lade__http_judge_easy(const lade__http_t *h, CURL *e, CURLcode cc, const lade__http_req_t *r,
                           lade__http_verdict_t *v);
/* Seconds to wait before retry number `retry` (1, 2, ...): full jitter,
 * uniform in [0, min(20 s, base_ms x 2^(retry-1))]. */
double lade__http_backoff_s(uint32_t base_ms, uint32_t retry, lade__rng_t *rng);
/* Counts a retry of a request made on the caller's thread and sleeps its
 * backoff there (blocking GETs, HEADs, streams). Takes h->mu. */
void lade__http_retry_sleep(lade__http_t *h, uint32_t retry, lade__rng_t *rng);
/* After a failed blocking attempt number `attempt` (0: the first): 1 when
 * it is tried again (the backoff slept), 0 with the final error in *rc
 * (lade_last_error() naming `shown`). */
int lade__http_blocking_again(lade__http_t *h, const lade__http_verdict_t *v, uint32_t attempt, const char *shown,
                              lade__rng_t *rng, int *rc);

/* ------------------------------------------------ http_easy.c: one handle */

/* Sets e's options for r's request of url: timeouts, the low-speed limit,
 * TLS, signing, r's Range and the precondition of its pin (r->hdrs, freed
 * by lade__http_req_headers_free), and the header and body callbacks
 * writing into r (bodies capped as lade__http_on_body says). 0, or -1 out
 * of memory. */
int lade__http_setup_easy(const lade__http_t *h, CURL *e, const char *url, lade__http_req_t *r);
/* curl's write callback for r (ud): appends to r->body, or scatters a
 * reply of several parts into r->parts; 0 (ending the transfer) past the
 * cap r may hold or out of memory. */
size_t lade__http_on_body(char *ptr, size_t size, size_t nmemb, void *ud);
/* curl's header callback for r (ud), one line at a time: the status line,
 * Content-Length (a larger one than the cap is refused), ETag /
 * Last-Modified, Content-Range. At the end of a 2xx reply's headers it
 * checks the reply against the request (lade__http_check_reply): a refused
 * reply returns 0, ending the transfer before its first body byte. */
size_t lade__http_on_header(char *ptr, size_t size, size_t nmemb, void *ud);
/* Frees r->hdrs (NULL after). */
void lade__http_req_headers_free(lade__http_req_t *r);

/* ---------------------------------------------- http_table.c: the results */

/* Allocates the wants and results of sample indexes 0..n_idx-1 and sets
 * the default bounds (4 x conc + 1024 results, 512 MiB). 0 or LADE_ENOMEM
 * (message set). */
int lade__http_table_init(lade__http_table_t *t, uint64_t n_idx, uint32_t conc, const char *what,
                          void (*name)(void *ctx, uint64_t obj, char *buf, size_t size), void *name_ctx);
/* Frees every stored result, the kept buffers and the table. */
void lade__http_table_free(lade__http_table_t *t);
/* Whether idx is one of the table's sample indexes. */
bool lade__http_table_has(const lade__http_table_t *t, uint64_t idx);
/* One more part of idx submitted. */
void lade__http_table_want(lade__http_table_t *t, uint64_t idx);
/* Parts of idx submitted and not read yet. */
uint32_t lade__http_table_wants(const lade__http_table_t *t, uint64_t idx);
/* Whether a read of idx would not wait: a result is stored, or none is wanted. */
bool lade__http_table_ready(const lade__http_table_t *t, uint64_t idx);
/* Raises the bounds on arrived, unread results to at least these. */
void lade__http_table_reserve(lade__http_table_t *t, uint64_t results, uint64_t bytes);
/* Stores a submitted request's outcome, one result per part; the oldest
 * unread results are dropped with their wants past the bounds. */
void lade__http_result_store(lade__http_table_t *t, lade__http_req_t *q, int rc, const char *msg);
/* Takes the oldest result of idx: 1 with *rc its code (message set) and,
 * on success, the body swapped into *out; 0 when none is stored. */
int lade__http_result_take(lade__http_table_t *t, uint64_t idx, lade__buf_t *out, int *rc);
/* Keeps b's memory for later bodies, or frees it; b is emptied. */
void lade__http_buf_recycle(lade__http_table_t *t, lade__buf_t *b);
/* A kept buffer into *b (empty), if one is kept. */
void lade__http_buf_reuse(lade__http_table_t *t, lade__buf_t *b);
/* Hands `b` to the caller's buffer by swapping (no copy); the caller's old
 * buffer is recycled for later bodies. */
void lade__http_hand_over(lade__http_table_t *t, lade__buf_t *b, lade__buf_t *out);

/* ------------------------------------------------- http_loop.c: the thread */

/* A request for g (copied, its parts too), answered to waiter w, or
 * through the table when w is NULL (locked). NULL: out of memory. */
lade__http_req_t *lade__http_req_new(lade__http_t *h, const lade__http_get_t *g, lade__http_waiter_t *w);
/* Puts r back for reuse: its body recycled, its parts freed (locked). */
void lade__http_req_release(lade__http_t *h, lade__http_req_t *r);
/* The loop's limit set from h->o (lade__http_create). */
void lade__http_loop_init(lade__http_t *h);
/* Starts the loop thread with its multi handle. 0 or an error (set). */
int lade__http_loop_start(lade__http_t *h);
/* Whether the loop thread runs. */
bool lade__http_loop_started(const lade__http_t *h);
/* Queues r (locked): LADE__HTTP_URGENT (a read() waits), LADE__HTTP_BATCH
 * (submitted) or LADE__HTTP_BG (a background submit). */
enum { LADE__HTTP_URGENT, LADE__HTTP_BATCH, LADE__HTTP_BG };
void lade__http_loop_push(lade__http_t *h, lade__http_req_t *r, int kind);
/* Wakes the loop thread from its poll (any thread, unlocked). */
void lade__http_loop_wake(lade__http_t *h);
/* Requests in flight and the limit on them now (locked). */
void lade__http_loop_load(const lade__http_t *h, uint32_t *in_flight, uint32_t *limit);
/* Stops the loop thread (h->stop set, blocked readers woken, joined) and
 * frees its multi handle, idle handles and requests. Unlocked. */
void lade__http_loop_close(lade__http_t *h);

/* ------------------------------------------------ http_tune.c: the limit */

/* A limit of `fixed` (never tuned), or tuned up to `max` from 32. */
void lade__http_tuner_init(lade__http_tuner_t *t, uint32_t fixed, uint32_t max);
/* The first window starts now. */
void lade__http_tuner_begin(lade__http_tuner_t *t, double now);
/* One tuning step: once a window of LADE__HTTP_WINDOW_S has passed, its
 * completed bytes/s moves the limit (slow start doubling, then steps of a
 * quarter up or down, a probe after 8 flat windows) unless the window was
 * starved of demand or throttled; nothing with a fixed limit. */
void lade__http_tune(lade__http_tuner_t *t, double now);
/* The server throttled (503/429): the limit halves, once a window. 1 when it did. */
int lade__http_tuner_throttle(lade__http_tuner_t *t, double now);
/* Background requests take at most three quarters of the limit, so a
 * batch's request finds a free connection at once. */
uint32_t lade__http_tuner_bg_cap(const lade__http_tuner_t *t);
/* A completed reply's bytes count in the window. */
void lade__http_tuner_done(lade__http_tuner_t *t, uint64_t bytes);
/* The window ran out of queued demand (it says nothing of the server). */
void lade__http_tuner_starved(lade__http_tuner_t *t);

#endif
