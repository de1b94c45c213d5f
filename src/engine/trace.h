/* trace.h - Chrome trace-event JSON (opens in Perfetto / chrome://tracing):
 * one complete ("X") event per sample, batch and consumer wait. */
#ifndef LADE__TRACE_H
#define LADE__TRACE_H

#include <stdint.h>

#define LADE__TRACE_CONSUMER 100000 /* tid of the consumer's wait events */

typedef struct lade__trace lade__trace_t;

int lade__trace_open(lade__trace_t **out, const char *path);
/* ts_us: monotonic microseconds (lade__now() * 1e6); index UINT64_MAX: none.
 * tid 0 is the scheduler (batch events), 1..n the workers. Thread-safe. */
void lade__trace_event(lade__trace_t *t, const char *name, uint32_t tid, uint64_t ts_us, uint64_t dur_us,
                       uint64_t epoch, uint64_t step, uint64_t index);
/* Writes the closing bracket and closes the file. NULL does nothing. */
void lade__trace_close(lade__trace_t *t);

#endif
