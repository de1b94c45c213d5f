/*
 * test_devring.c - batches on the device (engine/devring.h) against the
 * stand-in runtime of fake_cudart.c (LADE_CUDA_LIB): its streams run work
 * only when forced, so a missing fence lets a later copy overwrite a device
 * buffer before a consumer's queued read of it ran, as on a GPU. The same
 * checks on a real GPU are tests/gpu/run.sh.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/npyfmt.h"
#include "harness.h"
#include "lade/lade.h"

#define DIM 16
#define N 60 /* samples: 3 classes of 20 */

static void *fake;
static void (*enqueue_read)(void *s, void *dst, const void *src, size_t n);
static long (*fake_count)(int i);
static int (*fake_is_device)(const void *p, size_t n);
static int (*stream_create)(void **s, unsigned flags);
static int (*stream_sync)(void *s);
static int (*stream_destroy)(void *s);
static int (*set_device)(int d);

static const char *make_folder(void) {
  static char dir[4096];
  if (dir[0]) return dir;
  snprintf(dir, sizeof dir, "%s", lade_test_tmpdir("devring"));
  for (int c = 0; c < 3; c++) lade_test_sh("mkdir -p %s/c%d", dir, c);
  int64_t shape[1] = {DIM};
  char hdr[256];
  int hl = lade__npy_write_header(hdr, sizeof hdr, LADE_DTYPE_FLOAT32, 1, shape);
  for (int i = 0; i < N; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/c%d/s%03d.npy", dir, i % 3, i);
    float v[DIM];
    for (int k = 0; k < DIM; k++) v[k] = (float)(i * 1000 + k);
    FILE *f = fopen(path, "wb");
    fwrite(hdr, 1, (size_t)hl, f);
    fwrite(v, sizeof v, 1, f);
    fclose(f);
  }
  return dir;
}

static lade_loader_t *open_loader(const char *device, const char *prefetch) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  lade_config_set(c, "source", make_folder());
  const char *kv[] = {"batch_size=8", "epochs=3", "threads=2", "seed=5", "prefetch=3"};
  for (size_t i = 0; i < sizeof kv / sizeof *kv; i++) lade_config_parse(c, kv[i]);
  if (device) lade_config_set(c, "device", device);
  if (prefetch) lade_config_set(c, "device_prefetch", prefetch);
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, c);
  if (rc) fprintf(stderr, "  create: %s\n", lade_last_error());
  lade_config_destroy(c);
  return L;
}

typedef struct copy {
  float data[8 * DIM];
  int64_t labels[8];
  int64_t n;
} copy_t;

/* Every batch of a device loader read by a consumer on stream `use` (which
 * lade is told of) or `other` (which it is not), each read queued and the
 * batch released at once; compared with a host loader's once all ran.
 * Returns the batches that differ. */
static int consume(const char *prefetch, bool announce, long *pageable) {
  lade_loader_t *D = open_loader("cuda", prefetch), *H = open_loader(NULL, NULL);
  CHECK(D && H);
  if (!D || !H) return -1;
  void *s = NULL;
  CHECK_EQ_INT(stream_create(&s, 1), 0);
  copy_t *got = calloc(64, sizeof *got), *want = calloc(64, sizeof *want);
  int n = 0, differ = 0;
  uint64_t h2d = 0;
  for (;; n++) {
    lade_batch_t *b = NULL, *h = NULL;
    CHECK_OK(lade_loader_next(D, &b));
    CHECK_OK(lade_loader_next(H, &h));
    if (!b || !h || n == 64) {
      CHECK(!b && !h);
      lade_batch_release(b);
      lade_batch_release(h);
      break;
    }
    CHECK_EQ_INT(b->device, 0);
    CHECK(fake_is_device(b->data, b->nbytes) && fake_is_device(b->device_labels, (size_t)b->shape[0] * 8));
    CHECK(b->labels && !fake_is_device(b->labels, 8)); /* the host copy stays */
    CHECK_EQ_INT(b->shape[0], h->shape[0]);
    CHECK_EQ_INT(b->epoch * 100 + b->step, h->epoch * 100 + h->step);
    if (announce) CHECK_OK(lade_batch_use_stream(b, s));
    else CHECK_OK(lade_batch_use_stream(b, NULL)); /* the legacy stream, while the reads go on s */
    got[n].n = want[n].n = h->shape[0];
    enqueue_read(s, got[n].data, b->data, b->nbytes);
    enqueue_read(s, got[n].labels, b->device_labels, (size_t)b->shape[0] * 8);
    memcpy(want[n].data, h->data, h->nbytes);
    memcpy(want[n].labels, h->labels, (size_t)h->shape[0] * 8);
    h2d += b->nbytes + (uint64_t)b->shape[0] * 8;
    lade_batch_release(b); /* before the read ran: lade must fence the buffer on s */
    lade_batch_release(h);
  }
  CHECK_EQ_INT(n, 3 * ((N + 7) / 8));
  stream_sync(s);
  for (int i = 0; i < n; i++) differ += memcmp(&got[i], &want[i], sizeof got[i]) != 0;
  lade_stats_t st;
  CHECK_OK(lade_loader_stats(D, &st, sizeof st));
  CHECK_EQ_INT(st.h2d_bytes, h2d);
  CHECK(st.device_buffers >= 1 && st.device_buffers <= (uint64_t)atoi(prefetch) + 2);
  CHECK(st.h2d_seconds > 0);
  *pageable = fake_count(1);
  lade_loader_destroy(D);
  lade_loader_destroy(H);
  stream_destroy(s);
  free(got);
  free(want);
  return differ;
}

static void test_device_batches_equal_host_batches(void) {
  const char *prefetch[] = {"0", "1", "2", "4"};
  for (int i = 0; i < 4; i++) {
    long pageable = -1;
    int differ = consume(prefetch[i], true, &pageable);
    if (differ) fprintf(stderr, "  device_prefetch=%s: %d batches differ\n", prefetch[i], differ);
    CHECK_EQ_INT(differ, 0);
    CHECK_EQ_INT(pageable, 0); /* every copy was a DMA from page-locked memory */
  }
  CHECK_EQ_INT(fake_count(3), 0); /* every device buffer freed */
}

/* The check above can fail: reads on a stream lade was not told of are not
 * fenced, and later copies overwrite the buffers before they run. */
static void test_unannounced_stream_reads_later_batches(void) {
  long pageable = -1;
  int differ = consume("2", false, &pageable);
  CHECK(differ > 0);
}

static void test_seek_hold_and_release_after_destroy(void) {
  lade_loader_t *D = open_loader("cuda", "2");
  CHECK(D != NULL);
  if (!D) return;
  lade_batch_t *first = NULL, *b = NULL;
  CHECK_OK(lade_loader_next(D, &first));
  float keep[8 * DIM];
  void *s = NULL;
  stream_create(&s, 1);
  CHECK_OK(lade_batch_use_stream(first, s));
  enqueue_read(s, keep, first->data, first->nbytes);
  stream_sync(s);
  for (int i = 0; i < 5; i++) { /* the copies ahead of these are queued, then dropped by the seek */
    CHECK_OK(lade_loader_next(D, &b));
    lade_batch_release(b);
  }
  CHECK_OK(lade_loader_seek(D, 0, 0));
  CHECK_OK(lade_loader_next(D, &b));
  CHECK(b && b->data != first->data && b->epoch == 0 && b->step == 0);
  float again[8 * DIM];
  CHECK_OK(lade_batch_use_stream(b, s));
  enqueue_read(s, again, b->data, b->nbytes);
  stream_sync(s);
  CHECK(memcmp(keep, again, sizeof keep) == 0);
  /* errors: a fifth stream, a host batch */
  void *more[4];
  for (int i = 0; i < 4; i++) stream_create(&more[i], 1);
  for (int i = 0; i < 3; i++) CHECK_OK(lade_batch_use_stream(b, more[i]));
  CHECK_EQ_INT(lade_batch_use_stream(b, more[3]), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "more than 4 CUDA streams") != NULL);
  lade_batch_release(b);
  lade_batch_release(b); /* a second release: a message, nothing touched */
  lade_loader_destroy(D); /* `first` is still held: the ring lives on */
  float late[8 * DIM];
  enqueue_read(s, late, first->data, first->nbytes);
  stream_sync(s);
  CHECK(memcmp(keep, late, sizeof keep) == 0);
  lade_batch_release(first); /* the last one: the ring and its buffers go */
  CHECK_EQ_INT(fake_count(3), 0);
  for (int i = 0; i < 4; i++) stream_destroy(more[i]);
  stream_destroy(s);
  lade_loader_t *H = open_loader(NULL, NULL);
  CHECK_OK(lade_loader_next(H, &b));
  CHECK_EQ_INT(lade_batch_use_stream(b, NULL), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "in host memory") != NULL);
  lade_batch_release(b);
  lade_loader_destroy(H);
}

/* Python releases a batch wherever its last tensor dies: from other
 * threads, while next() copies (ThreadSanitizer runs this one). */
static void *release_elsewhere(void *arg) {
  lade_batch_t *b = arg;
  void *s = NULL;
  stream_create(&s, 1);
  int rc = lade_batch_use_stream(b, s);
  float buf[8 * DIM];
  enqueue_read(s, buf, b->data, b->nbytes);
  lade_batch_release(b);
  stream_sync(s);
  stream_destroy(s);
  return (void *)(intptr_t)rc;
}

static void test_release_from_other_threads(void) {
  lade_loader_t *D = open_loader("cuda", "2");
  CHECK(D != NULL);
  if (!D) return;
  pthread_t th[3];
  int n = 0;
  for (;; n++) {
    lade_batch_t *b = NULL;
    CHECK_OK(lade_loader_next(D, &b));
    if (n >= 3) {
      void *rc = NULL;
      pthread_join(th[n % 3], &rc);
      CHECK(rc == NULL);
    }
    if (!b) break;
    CHECK(pthread_create(&th[n % 3], NULL, release_elsewhere, b) == 0);
  }
  for (int k = n >= 3 ? n - 2 : 0; k < n; k++) pthread_join(th[k % 3], NULL);
  CHECK_EQ_INT(n, 3 * ((N + 7) / 8));
  lade_loader_destroy(D);
  CHECK_EQ_INT(fake_count(3), 0);
}

/* device=cuda is the creating thread's current device (torch.cuda.set_device
 * under torchrun); cuda:N names one; a device the runtime lacks is said. */
static int first_batch_device(const char *device, int current) {
  set_device(current);
  lade_loader_t *D = open_loader(device, NULL);
  set_device(0);
  lade_batch_t *b = NULL;
  int d = -9;
  if (D && lade_loader_next(D, &b) == 0 && b) d = b->device;
  lade_batch_release(b);
  lade_loader_destroy(D);
  return d;
}

static void test_cuda_is_the_current_device(void) {
  CHECK_EQ_INT(first_batch_device("cuda", 1), 1);
  CHECK_EQ_INT(first_batch_device("cuda", 0), 0);
  CHECK_EQ_INT(first_batch_device("cuda:1", 0), 1);
  lade_loader_t *D = NULL;
  lade_config_t *c = NULL;
  lade_config_create(&c);
  lade_config_set(c, "source", make_folder());
  lade_config_set(c, "device", "cuda:2");
  CHECK_EQ_INT(lade_loader_create(&D, c), LADE_EUNSUPPORTED);
  CHECK(strstr(lade_last_error(), "device=cuda:2: no such device") && strstr(lade_last_error(), "sees 2 devices"));
  lade_config_destroy(c);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  /* no LADE_CUDA_LIB: lade takes the runtime already in the process (core/cuda.c), as it takes torch's */
  unsetenv("LADE_CUDA_LIB");
  fake = dlopen(FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
  if (!fake) {
    fprintf(stderr, "cannot load %s: %s\n", FAKE_CUDART, dlerror());
    return 1;
  }
  *(void **)&enqueue_read = dlsym(fake, "fake_enqueue_read");
  *(void **)&fake_count = dlsym(fake, "fake_count");
  *(void **)&fake_is_device = dlsym(fake, "fake_is_device");
  *(void **)&stream_create = dlsym(fake, "cudaStreamCreateWithFlags");
  *(void **)&stream_sync = dlsym(fake, "cudaStreamSynchronize");
  *(void **)&stream_destroy = dlsym(fake, "cudaStreamDestroy");
  *(void **)&set_device = dlsym(fake, "cudaSetDevice");
  RUN(test_device_batches_equal_host_batches);
  RUN(test_unannounced_stream_reads_later_batches);
  RUN(test_seek_hold_and_release_after_destroy);
  RUN(test_release_from_other_threads);
  RUN(test_cuda_is_the_current_device);
  return lade_test_finish();
}
