/*
 * cuda.h - the CUDA runtime, opened on first use (cuda.c).
 *
 * lade is built and runs without CUDA: libcudart is opened with dlopen only
 * when a loader asks for the device (setting `device=cuda[:N]`) or for
 * pinned host batches (`pin_memory=true`), or when lade_features() is asked
 * whether a device is usable. LADE_CUDA_LIB names the library; else a
 * libcudart the process has loaded already (PyTorch's, CuPy's) is used;
 * else the dynamic loader's search finds libcudart.so (.13, .12, .11.0).
 */
#ifndef LADE__CUDA_H
#define LADE__CUDA_H

#include <stdbool.h>
#include <stddef.h>

/* The runtime's calls lade makes, with its C ABI (cudaError_t is an int,
 * 0 success; streams and events are opaque pointers; 1 and 2 as a stream
 * are the legacy and the per-thread default streams). */
enum {
  LADE__CUDA_NOT_READY = 600,   /* cudaErrorNotReady (cudaEventQuery) */
  LADE__CUDA_H2D = 1,           /* cudaMemcpyHostToDevice */
  LADE__CUDA_STREAM_NONBLOCKING = 1, /* cudaStreamNonBlocking: no implicit sync with the legacy stream */
  LADE__CUDA_EVENT_NO_TIMING = 2     /* cudaEventDisableTiming */
};
#define LADE__CUDA_CALLS(X)                                                                                           \
  X(int, cudaGetDeviceCount, (int *))                                                                                 \
  X(const char *, cudaGetErrorString, (int))                                                                         \
  X(int, cudaHostRegister, (void *, size_t, unsigned))                                                                \
  X(int, cudaHostUnregister, (void *))                                                                                \
  X(int, cudaGetDevice, (int *))                                                                                      \
  X(int, cudaSetDevice, (int))                                                                                        \
  X(int, cudaMalloc, (void **, size_t))                                                                               \
  X(int, cudaFree, (void *))                                                                                          \
  X(int, cudaMallocHost, (void **, size_t))                                                                           \
  X(int, cudaFreeHost, (void *))                                                                                      \
  X(int, cudaStreamCreateWithFlags, (void **, unsigned))                                                              \
  X(int, cudaStreamDestroy, (void *))                                                                                 \
  X(int, cudaStreamSynchronize, (void *))                                                                             \
  X(int, cudaStreamWaitEvent, (void *, void *, unsigned))                                                             \
  X(int, cudaMemcpyAsync, (void *, const void *, size_t, int, void *))                                                \
  X(int, cudaEventCreateWithFlags, (void **, unsigned))                                                               \
  X(int, cudaEventDestroy, (void *))                                                                                  \
  X(int, cudaEventRecord, (void *, void *))                                                                           \
  X(int, cudaEventSynchronize, (void *))                                                                              \
  X(int, cudaEventQuery, (void *))                                                                                    \
  X(int, cudaEventElapsedTime, (float *, void *, void *))

typedef struct lade__cuda_api {
#define LADE__CUDA_PTR(ret, name, args) ret(*name) args;
  LADE__CUDA_CALLS(LADE__CUDA_PTR)
#undef LADE__CUDA_PTR
} lade__cuda_api_t;

/* The calls, valid once lade__cuda_open() succeeded (engine/devring.c). */
const lade__cuda_api_t *lade__cuda(void);

/* Loads the runtime and checks that device *ordinal exists;
 * LADE__CUDA_CURRENT is replaced by the calling thread's current device
 * (cudaGetDevice, as torch.cuda.set_device set it when lade shares torch's
 * runtime). `what` names the setting for messages ("device=cuda:1",
 * "pin_memory=true"). Returns 0, or LADE_EUNSUPPORTED naming the library,
 * the device and what to install. */
#define LADE__CUDA_CURRENT (-2)
int lade__cuda_open(int *ordinal, const char *what);

/* Page-locks [p, p + n) for DMA (cudaHostRegister), on a runtime opened by
 * lade__cuda_open; LADE_EIO with the runtime's reason. Undone by unpin. */
int lade__cuda_pin(void *p, size_t n);
void lade__cuda_unpin(void *p);

/* True when the runtime loads and reports at least one device (cached). */
bool lade__cuda_usable(void);

#endif
