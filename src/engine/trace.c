/* trace.c - the trace file. Lock: `mu` guards the FILE and the first-event
 * flag; it is taken after the engine's lock when both are held. */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct lade__trace {
  pthread_mutex_t mu;
  FILE *f;
  uint64_t t0;
  int first;
};

int lade__trace_open(lade__trace_t **out, const char *path) {
  lade__trace_t *t = calloc(1, sizeof *t);
  if (!t) return lade__fail(LADE_ENOMEM, "trace: out of memory");
  t->f = fopen(path, "w");
  if (!t->f) {
    int e = errno;
    free(t);
    return lade__fail(LADE_EIO, "cannot write trace file %s: %s", path, strerror(e));
  }
  pthread_mutex_init(&t->mu, NULL);
  t->t0 = (uint64_t)(lade__now() * 1e6);
  t->first = 1;
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", t->f);
  fprintf(t->f,
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"batches\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"consumer\"}}",
          LADE__TRACE_CONSUMER);
  *out = t;
  return 0;
}

void lade__trace_event(lade__trace_t *t, const char *name, uint32_t tid, uint64_t ts_us, uint64_t dur_us,
                       uint64_t epoch, uint64_t step, uint64_t index) {
  uint64_t ts = ts_us >= t->t0 ? ts_us - t->t0 : 0;
  pthread_mutex_lock(&t->mu);
  if (index == UINT64_MAX)
    fprintf(t->f,
            ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"ts\":%llu,\"dur\":%llu,\"args\":{\"epoch\":%llu,"
            "\"step\":%llu}}",
            name, tid, (unsigned long long)ts, (unsigned long long)dur_us, (unsigned long long)epoch,
            (unsigned long long)step);
  else
    fprintf(t->f,
            ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"ts\":%llu,\"dur\":%llu,\"args\":{\"epoch\":%llu,"
            "\"step\":%llu,\"index\":%llu}}",
            name, tid, (unsigned long long)ts, (unsigned long long)dur_us, (unsigned long long)epoch,
            (unsigned long long)step, (unsigned long long)index);
  pthread_mutex_unlock(&t->mu);
}

void lade__trace_close(lade__trace_t *t) {
  if (!t) return;
  fputs("\n]}\n", t->f);
  fclose(t->f);
  pthread_mutex_destroy(&t->mu);
  free(t);
}
