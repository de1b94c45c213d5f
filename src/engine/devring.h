/*
 * devring.h - the device ring, a piece of the engine (engine.c): batches
 * delivered in GPU memory (setting device=cuda[:N]; docs/device.md).
 *
 * The ring owns lade's own CUDA stream (non-blocking: it never waits on the
 * legacy default stream) and the device buffers, each one batch of data and
 * labels, with the events that order them:
 *
 *   copy  (engine, next()): the buffer's previous consumers' `done` events
 *         are waited on by lade's stream (on the GPU: no host wait), the
 *         host batch (page-locked) and its labels are copied asynchronously,
 *         and `copied` is recorded on lade's stream.
 *   use   (consumer, __dlpack__(stream=s)): s waits on `copied` (on the GPU),
 *         and s is remembered as a consumer of the buffer.
 *   back  (release, any thread): `done` is recorded on every consumer stream,
 *         so the buffer is overwritten only after the work the consumer
 *         queued on it has run (what SPDL found PyTorch's caching allocator
 *         breaks without), then the caller waits until `copied` completed,
 *         so the host slot may be overwritten.
 *
 * No copy thread: cudaMemcpyAsync of page-locked memory returns at once, so
 * the copies are queued by next() itself (the batch handed out, and the
 * `device_prefetch` ready ones after it), and lade's stream runs them while
 * the GPU computes on earlier batches.
 *
 * Lock: `mu` (the ring's own) guards the free list, the buffer count and the
 * counters; a buffer's events and streams are its holder's alone (the engine
 * while it copies, under the loader's mu; the consumer; the releaser), but
 * its list of consumer streams is appended under `mu` (two threads may
 * export one batch). Lock order: the loader's mu, then the ring's. CUDA
 * calls are made with the caller's current device switched to the ring's
 * and back.
 */
#ifndef LADE__DEVRING_H
#define LADE__DEVRING_H

#include <stddef.h>
#include <stdint.h>

typedef struct lade__devring lade__devring_t;
typedef struct lade__dbuf lade__dbuf_t;

typedef struct lade__devring_stats {
  uint64_t bytes;      /* host-to-device bytes copied (data and labels) */
  uint64_t copies;     /* batches copied */
  uint64_t buffers;    /* device buffers allocated now */
  double copy_seconds; /* GPU time of the copies (events on lade's stream) */
  double wait_seconds; /* GPU time consumer streams waited for a copy (events around the wait) */
} lade__devring_stats_t;

/* A ring on device `ordinal` for batches of up to `batch` samples of
 * `data_bytes` bytes in all; the runtime is opened (core/cuda.h). */
int lade__devring_open(lade__devring_t **out, int ordinal, size_t data_bytes, uint32_t batch);
/* Waits for lade's stream, frees every buffer; none may be held. */
void lade__devring_close(lade__devring_t *r);
int lade__devring_ordinal(const lade__devring_t *r);

/* Queues the copy of n labels and nbytes of data (page-locked) into a
 * buffer, a new one when none is free. Non-blocking but for a first
 * allocation. */
int lade__devring_copy(lade__devring_t *r, const void *data, size_t nbytes, const int64_t *labels, uint32_t n,
                       lade__dbuf_t **out);
void *lade__dbuf_data(const lade__dbuf_t *b);
int64_t *lade__dbuf_labels(const lade__dbuf_t *b);
/* The consumer's stream (NULL: the legacy default stream) waits, on the
 * GPU, for b's copy; b is fenced on it at back. */
int lade__devring_use(lade__devring_t *r, lade__dbuf_t *b, void *stream);
/* b given back (see above); returns once its copy completed. */
void lade__devring_back(lade__devring_t *r, lade__dbuf_t *b);
void lade__devring_stats(lade__devring_t *r, lade__devring_stats_t *out);

#endif
