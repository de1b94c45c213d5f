/*
 * ladepy.h - what the pieces of the CPython extension share (batch.c: the
 * batch holder, DLPack, Array and Batch; loader.c: Loader and Iter; _lade.c:
 * errors, module functions, the module). Internal: every name here has
 * hidden visibility (python/CMakeLists.txt), and each type's struct is
 * declared here only when another piece reads its fields.
 */
#ifndef LADEPY_H
#define LADEPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lade/lade.h"

/* ------------------------------------------------------------ DLPack v0.8 */

typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;
typedef enum { kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U, kDLBfloat = 4U, kDLBool = 6U } DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* ---- errors (_lade.c) */

extern PyObject *LadeError; /* lade.Error, subclass of RuntimeError */
PyObject *raise_lade(int code, const char *detail);
PyObject *raise_last(int code); /* lade_last_error() of the calling thread */

/* ---- the batch holder and Batch (batch.c) */

/* A lade_batch_t shared by the Python Batch and the DLPack tensors made
 * from it: the last reference releases the batch (lade_batch_release) from
 * any thread. */
typedef struct batch_ref {
  atomic_long refs;
  lade_batch_t *batch;
} batch_ref_t;

typedef struct {
  PyObject_HEAD
  batch_ref_t *ref; /* NULL after close() */
  lade_batch_t *b;
} BatchObject;

extern atomic_ullong g_released; /* test hook: batches released through the holder (all threads) */
extern PyTypeObject ArrayType, BatchType;
batch_ref_t *ref_new(lade_batch_t *b);
void ref_dec(batch_ref_t *r);
PyObject *batch_wrap(lade_batch_t *b);      /* a new Batch owning b */
PyObject *batch_wrap_ref(batch_ref_t *r);   /* a new Batch taking the reference r */

/* ---- Loader and Iter (loader.c) */

extern PyTypeObject LoaderType, IterType;
/* _lade.c_run(settings, max_batches=-1, checksum=True): the C API's loop, no Python per batch */
PyObject *mod_c_run(PyObject *m, PyObject *args, PyObject *kwargs);

/* 64-bit FNV-1a, continuing from h (c_run's per-batch hashes, _lade.fnv1a) */
static inline uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) {
    h ^= c[i];
    h *= 1099511628211ULL;
  }
  return h;
}
#define FNV_OFFSET 14695981039346656037ULL

#endif
