/* devring.c - the device ring (devring.h): lade's stream, the device
 * buffers and the events that fence them. */
#include "engine/devring.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/cuda.h"

#define MAX_USERS 4   /* consumer streams one batch may be exported to */
#define ALIGN 256     /* the labels' offset in a buffer */
#define LEGACY ((void *)1) /* cudaStreamLegacy */

struct lade__dbuf {
  void *dev;           /* data, then the labels at the ring's label_off */
  int64_t *dlabels;    /* the labels in dev */
  int64_t *staged;     /* page-locked labels, the source of their copy */
  void *start, *copied; /* on lade's stream, around the copy */
  void *done[MAX_USERS]; /* recorded at back on each consumer stream */
  void *users[MAX_USERS];
  uint32_t nusers, fenced; /* streams using it now; done events of its last use to wait on */
  void *pre, *post;    /* on the first consumer stream, around its wait */
  bool wait_pending;   /* pre/post recorded, not yet counted */
  struct lade__dbuf *next; /* the free list */
};

struct lade__devring {
  int ordinal;
  const lade__cuda_api_t *C;
  void *stream;          /* lade's own */
  size_t data_bytes, label_off, cap;
  uint32_t batch;
  pthread_mutex_t mu;
  lade__dbuf_t *free;    /* under mu */
  lade__dbuf_t **all;    /* every buffer (freed at close), under mu */
  uint32_t n, ncap;
  lade__devring_stats_t st; /* under mu */
};

/* The caller's current device switched to the ring's; returns the one to restore. */
static int enter(const lade__devring_t *r) {
  int prev = -1;
  if (r->C->cudaGetDevice(&prev) != 0 || prev != r->ordinal) r->C->cudaSetDevice(r->ordinal);
  return prev;
}
static void leave(const lade__devring_t *r, int prev) {
  if (prev >= 0 && prev != r->ordinal) r->C->cudaSetDevice(prev);
}

static int cuda_fail(const lade__devring_t *r, int e, const char *what) {
  return lade__fail(LADE_EIO, "device=cuda:%d: %s failed: %s (CUDA error %d)", r->ordinal, what,
                    r->C->cudaGetErrorString(e), e);
}

int lade__devring_open(lade__devring_t **out, int ordinal, size_t data_bytes, uint32_t batch) {
  lade__devring_t *r = calloc(1, sizeof *r);
  if (!r) return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  r->ordinal = ordinal;
  r->C = lade__cuda();
  r->batch = batch;
  r->data_bytes = data_bytes;
  r->label_off = (data_bytes + ALIGN - 1) / ALIGN * ALIGN;
  r->cap = r->label_off + (size_t)batch * sizeof(int64_t);
  pthread_mutex_init(&r->mu, NULL);
  int prev = enter(r);
  int e = r->C->cudaStreamCreateWithFlags(&r->stream, LADE__CUDA_STREAM_NONBLOCKING);
  leave(r, prev);
  if (e) {
    int rc = cuda_fail(r, e, "creating lade's copy stream (cudaStreamCreateWithFlags)");
    pthread_mutex_destroy(&r->mu);
    free(r);
    return rc;
  }
  *out = r;
  return 0;
}

int lade__devring_ordinal(const lade__devring_t *r) { return r->ordinal; }
void *lade__dbuf_data(const lade__dbuf_t *b) { return b->dev; }

static void dbuf_free(lade__devring_t *r, lade__dbuf_t *b) {
  void *ev[] = {b->start, b->copied, b->pre, b->post, b->done[0], b->done[1], b->done[2], b->done[3]};
  for (size_t i = 0; i < sizeof ev / sizeof *ev; i++)
    if (ev[i]) r->C->cudaEventDestroy(ev[i]);
  if (b->dev) r->C->cudaFree(b->dev);
  if (b->staged) r->C->cudaFreeHost(b->staged);
  free(b);
}

void lade__devring_close(lade__devring_t *r) {
  if (!r) return;
  int prev = enter(r);
  r->C->cudaStreamSynchronize(r->stream);
  for (uint32_t i = 0; i < r->n; i++) dbuf_free(r, r->all[i]);
  r->C->cudaStreamDestroy(r->stream);
  leave(r, prev);
  free(r->all);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

int64_t *lade__dbuf_labels(const lade__dbuf_t *b) { return b->dlabels; }

/* A new buffer with its events, counted in r->all. */
static int dbuf_new(lade__devring_t *r, lade__dbuf_t **out) {
  lade__dbuf_t *b = calloc(1, sizeof *b);
  if (!b) return lade__fail(LADE_ENOMEM, "device=cuda:%d: out of memory", r->ordinal);
  int e = r->C->cudaMalloc(&b->dev, r->cap);
  const char *what = "allocating a device batch buffer (cudaMalloc)";
  if (!e) {
    what = "allocating page-locked labels (cudaMallocHost)";
    e = r->C->cudaMallocHost((void **)&b->staged, (size_t)(r->batch ? r->batch : 1) * sizeof(int64_t));
  }
  void **timed[] = {&b->start, &b->copied, &b->pre, &b->post};
  for (size_t i = 0; !e && i < sizeof timed / sizeof *timed; i++) {
    what = "creating an event (cudaEventCreateWithFlags)";
    e = r->C->cudaEventCreateWithFlags(timed[i], 0);
  }
  for (int i = 0; !e && i < MAX_USERS; i++) e = r->C->cudaEventCreateWithFlags(&b->done[i], LADE__CUDA_EVENT_NO_TIMING);
  if (e) {
    int rc = cuda_fail(r, e, what);
    dbuf_free(r, b);
    return rc;
  }
  b->dlabels = (int64_t *)((char *)b->dev + r->label_off);
  pthread_mutex_lock(&r->mu);
  if (r->n == r->ncap) {
    uint32_t nc = r->ncap ? 2 * r->ncap : 8;
    lade__dbuf_t **a = realloc(r->all, nc * sizeof *a);
    if (!a) {
      pthread_mutex_unlock(&r->mu);
      dbuf_free(r, b);
      return lade__fail(LADE_ENOMEM, "device=cuda:%d: out of memory", r->ordinal);
    }
    r->all = a;
    r->ncap = nc;
  }
  r->all[r->n++] = b;
  r->st.buffers = r->n;
  pthread_mutex_unlock(&r->mu);
  *out = b;
  return 0;
}

/* The consumer's wait around b's copy, counted once both events ran. Locked. */
static void count_wait(lade__devring_t *r, lade__dbuf_t *b) {
  float ms = 0;
  if (b->wait_pending && r->C->cudaEventQuery(b->post) == 0) {
    if (r->C->cudaEventElapsedTime(&ms, b->pre, b->post) == 0 && ms > 0) r->st.wait_seconds += ms / 1e3;
    b->wait_pending = false;
  }
}

int lade__devring_copy(lade__devring_t *r, const void *data, size_t nbytes, const int64_t *labels, uint32_t n,
                       lade__dbuf_t **out) {
  if (nbytes > r->data_bytes || n > r->batch)
    return lade__fail(LADE_EINVAL, "device=cuda:%d: a batch of %zu bytes and %u samples does not fit the device "
                      "buffers (%zu bytes, %u samples)", r->ordinal, nbytes, n, r->data_bytes, r->batch);
  pthread_mutex_lock(&r->mu);
  lade__dbuf_t *b = r->free;
  if (b) r->free = b->next;
  pthread_mutex_unlock(&r->mu);
  int prev = enter(r), rc = b ? 0 : dbuf_new(r, &b);
  if (rc) {
    leave(r, prev);
    return rc;
  }
  int e = 0;
  const char *what = "waiting for the buffer's last consumers (cudaStreamWaitEvent)";
  for (uint32_t i = 0; !e && i < b->fenced; i++) e = r->C->cudaStreamWaitEvent(r->stream, b->done[i], 0);
  b->fenced = 0;
  if (n) memcpy(b->staged, labels, (size_t)n * sizeof(int64_t));
  if (!e && !(e = r->C->cudaEventRecord(b->start, r->stream))) {
    what = "copying a batch to the device (cudaMemcpyAsync)";
    e = r->C->cudaMemcpyAsync(b->dev, data, nbytes, LADE__CUDA_H2D, r->stream);
    if (!e && n) e = r->C->cudaMemcpyAsync(b->dlabels, b->staged, (size_t)n * sizeof(int64_t), LADE__CUDA_H2D, r->stream);
    if (!e) e = r->C->cudaEventRecord(b->copied, r->stream);
  }
  leave(r, prev);
  pthread_mutex_lock(&r->mu);
  if (e) {
    b->next = r->free;
    r->free = b;
  } else {
    r->st.bytes += nbytes + (size_t)n * sizeof(int64_t);
    r->st.copies++;
  }
  pthread_mutex_unlock(&r->mu);
  if (e) return cuda_fail(r, e, what);
  *out = b;
  return 0;
}

int lade__devring_use(lade__devring_t *r, lade__dbuf_t *b, void *stream) {
  void *s = stream ? stream : LEGACY;
  pthread_mutex_lock(&r->mu);
  bool known = false, first = b->nusers == 0;
  for (uint32_t i = 0; i < b->nusers; i++) known |= b->users[i] == s;
  if (!known && b->nusers == MAX_USERS) {
    pthread_mutex_unlock(&r->mu);
    return lade__fail(LADE_EINVAL, "device=cuda:%d: a batch is used on more than %d CUDA streams (each export with "
                      "another stream= adds one): copy it on one of them instead", r->ordinal, MAX_USERS);
  }
  if (!known) b->users[b->nusers++] = s;
  int prev = enter(r), e = 0;
  if (first) {
    count_wait(r, b);
    e = r->C->cudaEventRecord(b->pre, s);
  }
  if (!e) e = r->C->cudaStreamWaitEvent(s, b->copied, 0);
  if (!e && first && !(e = r->C->cudaEventRecord(b->post, s))) b->wait_pending = true;
  leave(r, prev);
  pthread_mutex_unlock(&r->mu);
  return e ? cuda_fail(r, e, "making the consumer's stream wait for the batch's copy (cudaStreamWaitEvent)") : 0;
}

void lade__devring_back(lade__devring_t *r, lade__dbuf_t *b) {
  if (!b) return;
  int prev = enter(r);
  pthread_mutex_lock(&r->mu);
  uint32_t k = 0;
  for (uint32_t i = 0; i < b->nusers; i++)
    if (r->C->cudaEventRecord(b->done[k], b->users[i]) == 0) k++;
  b->fenced = k;
  b->nusers = 0;
  pthread_mutex_unlock(&r->mu);
  /* the host slot is rewritten once this returns: its bytes must have left */
  r->C->cudaEventSynchronize(b->copied);
  float ms = 0;
  int e = r->C->cudaEventElapsedTime(&ms, b->start, b->copied);
  pthread_mutex_lock(&r->mu);
  if (!e && ms > 0) r->st.copy_seconds += ms / 1e3;
  count_wait(r, b);
  b->next = r->free;
  r->free = b;
  pthread_mutex_unlock(&r->mu);
  leave(r, prev);
}

void lade__devring_stats(lade__devring_t *r, lade__devring_stats_t *out) {
  pthread_mutex_lock(&r->mu);
  *out = r->st;
  pthread_mutex_unlock(&r->mu);
}
