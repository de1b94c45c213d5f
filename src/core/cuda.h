/*
 * cuda.h - the CUDA runtime, opened on first use (cuda.c).
 *
 * lade is built and runs without CUDA: libcudart is opened with dlopen only
 * when a loader asks for the device (setting `device=cuda[:N]`) or for
 * pinned host batches (`pin_memory=true`), or when lade_features() is asked
 * whether a device is usable. LADE_CUDA_LIB names the library; else the
 * dynamic loader's search finds libcudart.so (.13, .12, .11.0).
 */
#ifndef LADE__CUDA_H
#define LADE__CUDA_H

#include <stdbool.h>
#include <stddef.h>

/* Loads the runtime and checks that device `ordinal` exists. `what` names
 * the setting for messages ("device=cuda:1", "pin_memory=true"). Returns 0,
 * or LADE_EUNSUPPORTED naming the library, the device and what to install. */
int lade__cuda_open(int ordinal, const char *what);

/* Page-locks [p, p + n) for DMA (cudaHostRegister), on a runtime opened by
 * lade__cuda_open; LADE_EIO with the runtime's reason. Undone by unpin. */
int lade__cuda_pin(void *p, size_t n);
void lade__cuda_unpin(void *p);

/* True when the runtime loads and reports at least one device (cached). */
bool lade__cuda_usable(void);

#endif
