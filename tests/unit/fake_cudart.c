/*
 * fake_cudart.c - a stand-in for libcudart in the CPU tests of the device
 * ring (test_devring.c, LADE_CUDA_LIB), never shipped: the real runtime is
 * tested by tests/gpu/run.sh on a GPU machine.
 *
 * It keeps what the ring's correctness rests on and a CPU can check:
 *  - streams run their work later, not at once: each call enqueues an op,
 *    and ops run in stream order only when something forces them (an event
 *    or stream synchronised, or a wait on another stream that is forced), so
 *    a missing fence lets a later copy overwrite a buffer before a consumer
 *    op queued earlier read it, as on a GPU;
 *  - cudaStreamWaitEvent orders across streams (forcing the waiter forces
 *    the event's stream up to the record);
 *  - a copy from host memory that is not page-locked (cudaHostRegister or
 *    cudaMallocHost) fails, as a DMA would not be one; device pointers are
 *    tracked, so a test can ask whether a batch is in "device" memory.
 * Two devices, and each thread's current one. It is built as
 * libcudart.so.99, so that a test which loads it first finds lade taking the
 * runtime already in the process, as it takes PyTorch's.
 * The test enqueues its own reads (fake_enqueue_read) to play a consumer.
 * One lock guards everything (lade calls from several threads).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

enum { OP_COPY, OP_MARK, OP_WAIT };
struct stream;
typedef struct ev {
  struct stream *s;   /* the stream of its last record */
  uint64_t mark;      /* that record's op number */
  bool recorded;
} ev_t;
typedef struct op {
  int kind;
  void *dst;
  const void *src;
  size_t n;
  uint64_t no;        /* its number: marks are found by it */
  struct stream *ws;  /* OP_WAIT: the event's stream and record, as they were when the wait was queued */
  uint64_t wmark;
  struct op *next;
} op_t;
typedef struct stream {
  op_t *head, *tail;
  uint64_t done_upto; /* every op numbered <= this has run */
} stream_t;

typedef struct range {
  const char *p;
  size_t n;
  bool device;
} range_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static stream_t legacy, per_thread;
static uint64_t next_no = 1;
static range_t ranges[4096];
static int nranges;
static long counts[8]; /* 0 copies, 1 pageable copies refused, 2 waits, 3 device bytes live, 4 streams made */

static stream_t *S(void *s) {
  if (s == NULL || s == (void *)1) return &legacy;
  if (s == (void *)2) return &per_thread;
  return s;
}

static void run_until(stream_t *s, uint64_t no);
static void run_op(op_t *o) {
  if (o->kind == OP_COPY) memcpy(o->dst, o->src, o->n);
  else if (o->kind == OP_WAIT && o->ws) run_until(o->ws, o->wmark);
}
/* Runs s's ops numbered <= no, in order (locked). */
static void run_until(stream_t *s, uint64_t no) {
  while (s->head && s->head->no <= no) {
    op_t *o = s->head;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    run_op(o);
    s->done_upto = o->no;
    free(o);
  }
}
static uint64_t push(stream_t *s, op_t *o) {
  o->no = next_no++;
  o->next = NULL;
  if (s->tail) s->tail->next = o;
  else s->head = o;
  s->tail = o;
  return o->no;
}
static bool in_range(const void *p, size_t n, bool device) {
  for (int i = 0; i < nranges; i++) {
    const range_t *r = &ranges[i];
    if (r->device == device && (const char *)p >= r->p && (const char *)p + n <= r->p + r->n) return true;
  }
  return false;
}
static void add_range(void *p, size_t n, bool device) {
  if (nranges < 4096) ranges[nranges++] = (range_t){p, n, device};
}
static size_t drop_range(void *p, bool device) {
  for (int i = 0; i < nranges; i++)
    if (ranges[i].p == p && ranges[i].device == device) {
      size_t n = ranges[i].n;
      ranges[i] = ranges[--nranges];
      return n;
    }
  return 0;
}

/* two devices; each thread's current one, as the runtime keeps it */
static _Thread_local int current;
API int cudaGetDeviceCount(int *n) { *n = 2; return 0; }
API const char *cudaGetErrorString(int e) { return e == 1 ? "invalid argument (fake)" : "error (fake)"; }
API int cudaGetDevice(int *d) { *d = current; return 0; }
API int cudaSetDevice(int d) {
  if (d < 0 || d > 1) return 101;
  current = d;
  return 0;
}
API int cudaHostRegister(void *p, size_t n, unsigned f) {
  (void)f;
  pthread_mutex_lock(&mu);
  add_range(p, n, false);
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cudaHostUnregister(void *p) {
  pthread_mutex_lock(&mu);
  drop_range(p, false);
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cudaMallocHost(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? cudaHostRegister(*p, n, 0) : 2;
}
API int cudaFreeHost(void *p) {
  cudaHostUnregister(p);
  free(p);
  return 0;
}
API int cudaMalloc(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  if (!*p) return 2;
  pthread_mutex_lock(&mu);
  add_range(*p, n, true);
  counts[3] += (long)n;
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cudaFree(void *p) {
  pthread_mutex_lock(&mu);
  counts[3] -= (long)drop_range(p, true);
  pthread_mutex_unlock(&mu);
  free(p);
  return 0;
}
API int cudaStreamCreateWithFlags(void **s, unsigned f) {
  (void)f;
  *s = calloc(1, sizeof(stream_t));
  pthread_mutex_lock(&mu);
  counts[4]++;
  pthread_mutex_unlock(&mu);
  return *s ? 0 : 2;
}
API int cudaStreamSynchronize(void *s) {
  pthread_mutex_lock(&mu);
  run_until(S(s), UINT64_MAX);
  pthread_mutex_unlock(&mu);
  return 0;
}
/* A destroyed stream is kept (reachable, not leaked): waits queued on other
 * streams may still name it, as the real runtime allows. */
static stream_t *destroyed[1024];
static int ndestroyed;
API int cudaStreamDestroy(void *s) {
  cudaStreamSynchronize(s);
  pthread_mutex_lock(&mu);
  if (ndestroyed < 1024) destroyed[ndestroyed++] = s;
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cudaEventCreateWithFlags(void **e, unsigned f) {
  (void)f;
  *e = calloc(1, sizeof(ev_t));
  return *e ? 0 : 2;
}
API int cudaEventDestroy(void *e) {
  free(e);
  return 0;
}
API int cudaEventRecord(void *e, void *s) {
  ev_t *ev = e;
  op_t *o = calloc(1, sizeof *o);
  if (!o) return 2;
  o->kind = OP_MARK;
  pthread_mutex_lock(&mu);
  ev->s = S(s);
  ev->mark = push(ev->s, o);
  ev->recorded = true;
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cudaEventSynchronize(void *e) {
  ev_t *ev = e;
  pthread_mutex_lock(&mu);
  if (ev->recorded) run_until(ev->s, ev->mark);
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cudaEventQuery(void *e) {
  ev_t *ev = e;
  pthread_mutex_lock(&mu);
  bool done = !ev->recorded || ev->s->done_upto >= ev->mark;
  pthread_mutex_unlock(&mu);
  return done ? 0 : 600;
}
API int cudaEventElapsedTime(float *ms, void *a, void *b) {
  (void)a, (void)b;
  *ms = 0.25f;
  return 0;
}
API int cudaStreamWaitEvent(void *s, void *e, unsigned f) {
  (void)f;
  ev_t *ev = e;
  op_t *o = calloc(1, sizeof *o);
  if (!o) return 2;
  o->kind = OP_WAIT;
  pthread_mutex_lock(&mu);
  if (ev->recorded) {
    o->ws = ev->s;
    o->wmark = ev->mark;
  }
  push(S(s), o);
  counts[2]++;
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s) {
  pthread_mutex_lock(&mu);
  int rc = 0;
  if (kind != 1 || !in_range(dst, n, true)) rc = 1;
  else if (!in_range(src, n, false)) rc = 1, counts[1]++; /* pageable: no DMA */
  op_t *o = rc ? NULL : calloc(1, sizeof *o);
  if (o) {
    o->kind = OP_COPY;
    o->dst = dst;
    o->src = src;
    o->n = n;
    push(S(s), o);
    counts[0]++;
  }
  pthread_mutex_unlock(&mu);
  return rc ? rc : o ? 0 : 2;
}

/* ---- for the test */

/* A consumer's read of device memory into dst, queued on stream s. */
API void fake_enqueue_read(void *s, void *dst, const void *src, size_t n) {
  op_t *o = calloc(1, sizeof *o);
  o->kind = OP_COPY;
  o->dst = dst;
  o->src = src;
  o->n = n;
  pthread_mutex_lock(&mu);
  push(S(s), o);
  pthread_mutex_unlock(&mu);
}
API long fake_count(int i) {
  pthread_mutex_lock(&mu);
  long v = counts[i];
  pthread_mutex_unlock(&mu);
  return v;
}
API int fake_is_device(const void *p, size_t n) {
  pthread_mutex_lock(&mu);
  bool d = in_range(p, n, true);
  pthread_mutex_unlock(&mu);
  return d;
}
