/*
 * _lade.c - the CPython extension behind the `lade` Python package.
 *
 * Written against the public header lade/lade.h only.
 *
 * Ownership (see docs/python.md):
 *  - A lade_batch_t handed out by lade_loader_next() is wrapped in a small
 *    C refcounted holder (batch_ref_t, atomic counter). The Python Batch
 *    object owns one reference; every DLPack capsule / DLManagedTensor made
 *    by Batch.__dlpack__() owns one more. When the count drops to zero the
 *    holder calls lade_batch_release() exactly once. The DLPack deleter does
 *    not touch Python objects, so it is safe from any thread, with or without
 *    the GIL, and after the loader (and even the Loader object) is gone:
 *    lade_batch_release() is thread-safe and valid after
 *    lade_loader_destroy().
 *  - Labels and indices are small: they are copied into Array objects (buffer
 *    protocol + DLPack), which own their memory.
 *
 * GIL and Ctrl-C: lade_loader_next() runs on a per-loader fetcher thread
 * while the calling thread waits on a condition variable with the GIL
 * released, waking every 50 ms to re-take the GIL and run
 * PyErr_CheckSignals(). On a pending signal (KeyboardInterrupt) or a
 * Loader.interrupt() from another thread it calls lade_loader_interrupt()
 * (again every 50 ms until the fetcher is back: it only wakes a next() that
 * waits), keeps any batch that still arrived as `pending` for the next call,
 * and raises.
 *
 * Nothing lost: a batch taken from the engine is either returned to the
 * caller or put back in `pending` (a reference of its holder), and tell()
 * counts a pending batch as not consumed. Iteration is a C iterator (Iter),
 * not a Python generator, so no Python code runs between taking a batch and
 * handing it to the for loop except the converter, and an exception there
 * (a KeyboardInterrupt from a signal that arrived meanwhile) puts the batch
 * back; a last signal check before returning does the same.
 *
 * fork(): the fetcher thread and the engine's workers do not exist in a
 * child; a Loader used there raises (pid differs from the creator's), and its
 * close()/dealloc touch neither the threads nor the locks.
 */
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

/* ------------------------------------------------------------ errors */

static PyObject *LadeError; /* lade.Error, subclass of RuntimeError */

/* Messages are text for people: bytes that are not UTF-8 (a file or tar
 * member name in another encoding, a name cut by the 1024-byte limit) are
 * shown as \xNN, as the library already shows control bytes, so raising the
 * error never fails with a UnicodeDecodeError. (Names returned as data,
 * classes() and samples(), decode as os.fsdecode does instead, so
 * os.fsencode gives the bytes back.) */
static PyObject *raise_lade(int code, const char *detail) {
  const char *msg = (detail && detail[0]) ? detail : lade_strerror(code);
  PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "backslashreplace");
  if (!text) return NULL;
  PyObject *args = PyTuple_Pack(1, text);
  Py_DECREF(text);
  if (!args) return NULL;
  PyObject *exc = PyObject_Call(LadeError, args, NULL);
  Py_DECREF(args);
  if (!exc) return NULL;
  PyObject *c = PyLong_FromLong(code);
  PyObject *n = PyUnicode_FromString(lade_error_name(code));
  if (c) PyObject_SetAttrString(exc, "code", c);
  if (n) PyObject_SetAttrString(exc, "name", n);
  Py_XDECREF(c);
  Py_XDECREF(n);
  PyErr_Clear();
  PyErr_SetObject(LadeError, exc);
  Py_DECREF(exc);
  return NULL;
}

/* On the calling thread: message is lade_last_error(). */
static PyObject *raise_last(int code) { return raise_lade(code, lade_last_error()); }

/* ------------------------------------------------------------ batch holder */

/* test hook: number of batches released through the holder (all threads) */
static atomic_ullong g_released;

typedef struct batch_ref {
  atomic_long refs;
  lade_batch_t *batch;
} batch_ref_t;

static batch_ref_t *ref_new(lade_batch_t *b) {
  batch_ref_t *r = malloc(sizeof *r);
  if (!r) return NULL;
  atomic_init(&r->refs, 1);
  r->batch = b;
  return r;
}
static void ref_inc(batch_ref_t *r) { atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); }
static void ref_dec(batch_ref_t *r) {
  if (!r) return;
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
    lade_batch_release(r->batch);
    free(r);
    atomic_fetch_add(&g_released, 1);
  }
}

/* ------------------------------------------------------------ DLPack helpers */

typedef struct managed {
  DLManagedTensor m;
  int64_t shape[LADE_MAX_DIMS];
  int64_t strides[LADE_MAX_DIMS];
  batch_ref_t *ref; /* batch tensors */
  void *owned;      /* array tensors: malloc'd copy */
} managed_t;

static void managed_deleter(DLManagedTensor *self) {
  managed_t *mt = (managed_t *)self->manager_ctx;
  if (mt->ref) ref_dec(mt->ref);
  free(mt->owned);
  free(mt);
}

static void capsule_destructor(PyObject *cap) {
  /* Only an unconsumed capsule still owns its tensor. */
  if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
}

static int dl_dtype(int dtype, DLDataType *out) {
  out->lanes = 1;
  switch (dtype) {
    case LADE_DTYPE_UINT8: out->code = kDLUInt; out->bits = 8; return 0;
    case LADE_DTYPE_INT8: out->code = kDLInt; out->bits = 8; return 0;
    case LADE_DTYPE_INT16: out->code = kDLInt; out->bits = 16; return 0;
    case LADE_DTYPE_UINT16: out->code = kDLUInt; out->bits = 16; return 0;
    case LADE_DTYPE_INT32: out->code = kDLInt; out->bits = 32; return 0;
    case LADE_DTYPE_INT64: out->code = kDLInt; out->bits = 64; return 0;
    case LADE_DTYPE_FLOAT16: out->code = kDLFloat; out->bits = 16; return 0;
    case LADE_DTYPE_FLOAT32: out->code = kDLFloat; out->bits = 32; return 0;
    case LADE_DTYPE_FLOAT64: out->code = kDLFloat; out->bits = 64; return 0;
    case LADE_DTYPE_BOOL: out->code = kDLBool; out->bits = 8; return 0;
    case LADE_DTYPE_UINT32: out->code = kDLUInt; out->bits = 32; return 0;
    case LADE_DTYPE_UINT64: out->code = kDLUInt; out->bits = 64; return 0;
    default: return -1;
  }
}

static PyObject *wrap_managed(managed_t *mt) {
  PyObject *cap = PyCapsule_New(&mt->m, "dltensor", capsule_destructor);
  if (!cap) mt->m.deleter(&mt->m);
  return cap;
}

/* ------------------------------------------------------------ Array (labels, indices) */

typedef struct {
  PyObject_HEAD
  int64_t *data;
  Py_ssize_t n;
  Py_ssize_t shape[1];
  Py_ssize_t strides[1];
} ArrayObject;

static PyTypeObject ArrayType;

static PyObject *array_new_copy(const int64_t *src, Py_ssize_t n) {
  ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
  if (!a) return NULL;
  a->n = n;
  a->data = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
  if (!a->data) {
    a->n = 0;
    Py_DECREF(a);
    return PyErr_NoMemory();
  }
  if (src && n) memcpy(a->data, src, (size_t)n * sizeof(int64_t));
  else if (n) memset(a->data, 0xff, (size_t)n * sizeof(int64_t)); /* -1 */
  a->shape[0] = n;
  a->strides[0] = sizeof(int64_t);
  return (PyObject *)a;
}

static void array_dealloc(ArrayObject *a) {
  free(a->data);
  PyObject_Free(a);
}

static int array_getbuffer(ArrayObject *a, Py_buffer *view, int flags) {
  view->buf = a->data;
  view->obj = (PyObject *)a;
  Py_INCREF(a);
  view->len = a->n * (Py_ssize_t)sizeof(int64_t);
  view->readonly = 0;
  view->itemsize = sizeof(int64_t);
  view->format = (flags & PyBUF_FORMAT) ? "q" : NULL;
  view->ndim = 1;
  view->shape = (flags & PyBUF_ND) ? a->shape : NULL;
  view->strides = (flags & PyBUF_STRIDES) ? a->strides : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  return 0;
}

static PyBufferProcs array_as_buffer = {(getbufferproc)array_getbuffer, NULL};

static Py_ssize_t array_len(ArrayObject *a) { return a->n; }

static PyObject *array_item(ArrayObject *a, Py_ssize_t i) {
  if (i < 0 || i >= a->n) {
    PyErr_SetString(PyExc_IndexError, "index out of range");
    return NULL;
  }
  return PyLong_FromLongLong(a->data[i]);
}

static PySequenceMethods array_as_sequence = {
    .sq_length = (lenfunc)array_len,
    .sq_item = (ssizeargfunc)array_item,
};

static PyObject *array_tolist(ArrayObject *a, PyObject *unused) {
  PyObject *l = PyList_New(a->n);
  if (!l) return NULL;
  for (Py_ssize_t i = 0; i < a->n; i++) {
    PyObject *v = PyLong_FromLongLong(a->data[i]);
    if (!v) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, i, v);
  }
  return l;
}

static PyObject *array_dlpack(ArrayObject *a, PyObject *args, PyObject *kwargs) {
  managed_t *mt = calloc(1, sizeof *mt);
  if (!mt) return PyErr_NoMemory();
  mt->owned = malloc((size_t)(a->n ? a->n : 1) * sizeof(int64_t));
  if (!mt->owned) {
    free(mt);
    return PyErr_NoMemory();
  }
  if (a->n) memcpy(mt->owned, a->data, (size_t)a->n * sizeof(int64_t));
  mt->shape[0] = a->n;
  mt->strides[0] = 1;
  mt->m.dl_tensor.data = mt->owned;
  mt->m.dl_tensor.device.device_type = kDLCPU;
  mt->m.dl_tensor.device.device_id = 0;
  mt->m.dl_tensor.ndim = 1;
  mt->m.dl_tensor.dtype.code = kDLInt;
  mt->m.dl_tensor.dtype.bits = 64;
  mt->m.dl_tensor.dtype.lanes = 1;
  mt->m.dl_tensor.shape = mt->shape;
  mt->m.dl_tensor.strides = mt->strides;
  mt->m.dl_tensor.byte_offset = 0;
  mt->m.manager_ctx = mt;
  mt->m.deleter = managed_deleter;
  return wrap_managed(mt);
}

static PyObject *cpu_device(PyObject *self, PyObject *unused) { return Py_BuildValue("(ii)", (int)kDLCPU, 0); }

static PyObject *array_repr(ArrayObject *a) {
  PyObject *l = array_tolist(a, NULL);
  if (!l) return NULL;
  PyObject *r = PyUnicode_FromFormat("lade.Array(%R)", l);
  Py_DECREF(l);
  return r;
}

static PyMethodDef array_methods[] = {
    {"tolist", (PyCFunction)array_tolist, METH_NOARGS, "the values as a list of ints"},
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "DLPack capsule of a copy (int64, 1-D, CPU)"},
    {"__dlpack_device__", (PyCFunction)cpu_device, METH_NOARGS, "(kDLCPU, 0)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lade._lade.Array",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_dealloc = (destructor)array_dealloc,
    .tp_repr = (reprfunc)array_repr,
    .tp_as_sequence = &array_as_sequence,
    .tp_as_buffer = &array_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A 1-D int64 array (a copy of a batch's labels or indices); buffer protocol and DLPack.",
    .tp_methods = array_methods,
};

/* ------------------------------------------------------------ Batch */

typedef struct {
  PyObject_HEAD
  batch_ref_t *ref; /* NULL after close() */
  lade_batch_t *b;
} BatchObject;

static PyTypeObject BatchType;

static PyObject *batch_wrap(lade_batch_t *b) {
  BatchObject *o = PyObject_New(BatchObject, &BatchType);
  if (!o) {
    lade_batch_release(b);
    return NULL;
  }
  o->b = b;
  o->ref = ref_new(b);
  if (!o->ref) {
    lade_batch_release(b);
    o->b = NULL;
    Py_DECREF(o);
    return PyErr_NoMemory();
  }
  return (PyObject *)o;
}

static void batch_dealloc(BatchObject *o) {
  batch_ref_t *r = o->ref;
  o->ref = NULL;
  ref_dec(r);
  PyObject_Free(o);
}

static int batch_check(BatchObject *o) {
  if (!o->ref) {
    PyErr_SetString(LadeError, "batch was closed");
    return -1;
  }
  return 0;
}

/* bool_as_u8: a bool batch typed uint8 (same bytes), for consumers that
 * reject kDLBool (torch 1.13 raises "Unsupported code 6"); the Python
 * wrapper views the tensor as torch.bool again, without a copy. */
static PyObject *batch_dlpack_typed(BatchObject *o, int bool_as_u8) {
  if (batch_check(o)) return NULL;
  const lade_batch_t *b = o->b;
  if (b->ndim < 1 || b->ndim > LADE_MAX_DIMS) return raise_lade(LADE_EFORMAT, "batch has an invalid ndim");
  managed_t *mt = calloc(1, sizeof *mt);
  if (!mt) return PyErr_NoMemory();
  if (dl_dtype(bool_as_u8 && b->dtype == LADE_DTYPE_BOOL ? LADE_DTYPE_UINT8 : b->dtype, &mt->m.dl_tensor.dtype)) {
    free(mt);
    return raise_lade(LADE_EUNSUPPORTED, "batch dtype has no DLPack equivalent");
  }
  for (int i = 0; i < b->ndim; i++) {
    mt->shape[i] = b->shape[i];
    mt->strides[i] = b->strides[i];
  }
  mt->m.dl_tensor.data = b->data;
  if (b->device < 0) {
    mt->m.dl_tensor.device.device_type = kDLCPU;
    mt->m.dl_tensor.device.device_id = 0;
  } else {
    mt->m.dl_tensor.device.device_type = kDLCUDA;
    mt->m.dl_tensor.device.device_id = b->device;
  }
  mt->m.dl_tensor.ndim = b->ndim;
  mt->m.dl_tensor.shape = mt->shape;
  mt->m.dl_tensor.strides = mt->strides;
  mt->m.dl_tensor.byte_offset = 0;
  mt->m.manager_ctx = mt;
  mt->m.deleter = managed_deleter;
  mt->ref = o->ref;
  ref_inc(o->ref);
  return wrap_managed(mt);
}

static PyObject *batch_dlpack(BatchObject *o, PyObject *args, PyObject *kwargs) { return batch_dlpack_typed(o, 0); }
static PyObject *batch_dlpack_u8(BatchObject *o, PyObject *unused) { return batch_dlpack_typed(o, 1); }

static PyObject *batch_dlpack_device(BatchObject *o, PyObject *unused) {
  if (batch_check(o)) return NULL;
  if (o->b->device < 0) return Py_BuildValue("(ii)", (int)kDLCPU, 0);
  return Py_BuildValue("(ii)", (int)kDLCUDA, o->b->device);
}

static PyObject *batch_close(BatchObject *o, PyObject *unused) {
  batch_ref_t *r = o->ref;
  o->ref = NULL;
  ref_dec(r);
  Py_RETURN_NONE;
}

static PyObject *batch_labels(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return array_new_copy(o->b->labels, (Py_ssize_t)o->b->shape[0]);
}
static PyObject *batch_indices(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return array_new_copy(o->b->indices, (Py_ssize_t)o->b->shape[0]);
}
static PyObject *batch_epoch(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return PyLong_FromUnsignedLongLong(o->b->epoch);
}
static PyObject *batch_step(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return PyLong_FromUnsignedLongLong(o->b->step);
}
static PyObject *batch_shape(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  PyObject *t = PyTuple_New(o->b->ndim);
  if (!t) return NULL;
  for (int i = 0; i < o->b->ndim; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(o->b->shape[i]));
  return t;
}
static PyObject *batch_strides(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  PyObject *t = PyTuple_New(o->b->ndim);
  if (!t) return NULL;
  for (int i = 0; i < o->b->ndim; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(o->b->strides[i]));
  return t;
}
static PyObject *batch_dtype(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return PyUnicode_FromString(lade_dtype_name(o->b->dtype));
}
static PyObject *batch_nbytes(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return PyLong_FromSize_t(o->b->nbytes);
}
static PyObject *batch_data_ptr(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return PyLong_FromVoidPtr(o->b->data);
}
static PyObject *batch_substituted(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return PyLong_FromUnsignedLong(o->b->substituted);
}
static PyObject *batch_valid(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  return PyLong_FromUnsignedLong(o->b->valid);
}

static PyObject *batch_refs(BatchObject *o, void *c) {
  if (!o->ref) return PyLong_FromLong(0);
  return PyLong_FromLong(atomic_load(&o->ref->refs));
}

/* Buffer protocol (NumPy: np.asarray(batch), writable, no copy): each export
 * holds its own reference on the holder, dropped in releasebuffer. */
static const char *buffer_format(int dtype) {
  switch (dtype) {
    case LADE_DTYPE_UINT8: return "B";
    case LADE_DTYPE_INT8: return "b";
    case LADE_DTYPE_INT16: return "h";
    case LADE_DTYPE_UINT16: return "H";
    case LADE_DTYPE_INT32: return "i";
    case LADE_DTYPE_INT64: return "q";
    case LADE_DTYPE_FLOAT16: return "e";
    case LADE_DTYPE_FLOAT32: return "f";
    case LADE_DTYPE_FLOAT64: return "d";
    case LADE_DTYPE_BOOL: return "?";
    case LADE_DTYPE_UINT32: return "I";
    case LADE_DTYPE_UINT64: return "Q";
    default: return NULL;
  }
}

typedef struct {
  batch_ref_t *ref;
  Py_ssize_t shape[LADE_MAX_DIMS];
  Py_ssize_t strides[LADE_MAX_DIMS];
} bufinfo_t;

static int batch_getbuffer(BatchObject *o, Py_buffer *view, int flags) {
  view->obj = NULL;
  if (batch_check(o)) return -1;
  const lade_batch_t *b = o->b;
  const char *fmt = buffer_format(b->dtype);
  size_t isz = lade_dtype_size(b->dtype);
  if (!fmt || !isz || b->ndim < 1 || b->ndim > LADE_MAX_DIMS) {
    PyErr_SetString(PyExc_BufferError, "batch dtype has no buffer format");
    return -1;
  }
  bufinfo_t *bi = malloc(sizeof *bi);
  if (!bi) {
    PyErr_NoMemory();
    return -1;
  }
  bi->ref = o->ref;
  ref_inc(o->ref);
  for (int i = 0; i < b->ndim; i++) {
    bi->shape[i] = (Py_ssize_t)b->shape[i];
    bi->strides[i] = (Py_ssize_t)(b->strides[i] * (int64_t)isz);
  }
  view->buf = b->data;
  view->obj = (PyObject *)o;
  Py_INCREF(o);
  view->len = (Py_ssize_t)b->nbytes;
  view->readonly = 0;
  view->itemsize = (Py_ssize_t)isz;
  view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
  view->ndim = b->ndim;
  view->shape = bi->shape;
  view->strides = bi->strides;
  view->suboffsets = NULL;
  view->internal = bi;
  return 0;
}

static void batch_releasebuffer(BatchObject *o, Py_buffer *view) {
  bufinfo_t *bi = view->internal;
  if (bi) {
    ref_dec(bi->ref);
    free(bi);
  }
}

static PyBufferProcs batch_as_buffer = {(getbufferproc)batch_getbuffer, (releasebufferproc)batch_releasebuffer};

static PyGetSetDef batch_getset[] = {
    {"labels", (getter)batch_labels, NULL, "class labels (int64 Array copy; -1 where none)", NULL},
    {"indices", (getter)batch_indices, NULL, "dataset indices of the samples (int64 Array copy)", NULL},
    {"epoch", (getter)batch_epoch, NULL, "0-based epoch", NULL},
    {"step", (getter)batch_step, NULL, "0-based step within the epoch", NULL},
    {"shape", (getter)batch_shape, NULL, "tensor shape", NULL},
    {"strides", (getter)batch_strides, NULL, "strides in elements", NULL},
    {"dtype", (getter)batch_dtype, NULL, "dtype name", NULL},
    {"nbytes", (getter)batch_nbytes, NULL, "bytes of the batch tensor", NULL},
    {"data_ptr", (getter)batch_data_ptr, NULL, "address of the batch buffer", NULL},
    {"substituted", (getter)batch_substituted, NULL, "samples replaced by on_error=skip", NULL},
    {"valid", (getter)batch_valid, NULL,
     "samples that are real: the first `valid`; the rest pad the epoch (world_size > 1, drop_last=False)", NULL},
    {"_refs", (getter)batch_refs, NULL, "owners of the buffer (this object + live DLPack exports)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef batch_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))batch_dlpack, METH_VARARGS | METH_KEYWORDS,
     "DLPack capsule viewing the batch buffer (no copy); the buffer returns to the pool when the last view is freed"},
    {"__dlpack_device__", (PyCFunction)batch_dlpack_device, METH_NOARGS, "(device_type, device_id)"},
    {"_dlpack_uint8_bool", (PyCFunction)batch_dlpack_u8, METH_NOARGS,
     "like __dlpack__, but a bool batch is typed uint8 (for torch versions without DLPack bool)"},
    {"close", (PyCFunction)batch_close, METH_NOARGS,
     "drop this object's reference (views made by __dlpack__ stay valid)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lade.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_as_buffer = &batch_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One lade batch: the buffer (DLPack, zero-copy) plus labels, indices, epoch, step.",
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
};

/* ------------------------------------------------------------ Loader */

typedef struct {
  PyObject_HEAD
  lade_loader_t *loader;
  /* fetcher thread */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_req, cv_done;
  int req, done, quit;
  int rc;
  lade_batch_t *out;
  char err[1024];
  batch_ref_t *pending; /* a batch taken but not handed out (interrupted): handed out next */
  int busy;
  int waiting;     /* a next() waits for the fetcher (guarded by mu) */
  int intr;        /* Loader.interrupt() asked that next() to stop (guarded by mu) */
  int interrupted; /* the last next() was interrupted: the next iter() continues there */
  pid_t pid;       /* the process that created this object (its fetcher thread and loader) */
  lade_position_t position; /* Loader(settings, position): where a resumed loader starts */
  int has_position;
  int iters;                 /* Iter objects over this loader not yet at their end */
  unsigned long iter_thread; /* the thread that last created or advanced one of them */
} LoaderObject;

/* The loader was inherited through fork(): its threads are the parent's. */
static int loader_forked(const LoaderObject *L) { return L->pid != getpid(); }

static PyTypeObject LoaderType;

static void *fetcher_main(void *arg) {
  LoaderObject *L = arg;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (!L->req && !L->quit) pthread_cond_wait(&L->cv_req, &L->mu);
    if (L->quit) break;
    L->req = 0;
    pthread_mutex_unlock(&L->mu);
    lade_batch_t *b = NULL;
    int rc = lade_loader_next(L->loader, &b);
    char err[sizeof L->err];
    err[0] = '\0';
    if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
    pthread_mutex_lock(&L->mu);
    L->rc = rc;
    L->out = b;
    memcpy(L->err, err, sizeof err);
    L->done = 1;
    pthread_cond_signal(&L->cv_done);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

static int loader_open(LoaderObject *L, PyObject *settings) {
  lade_config_t *cfg = NULL;
  int rc = lade_config_create(&cfg);
  if (rc) {
    raise_last(rc);
    return -1;
  }
  PyObject *seq = PySequence_Fast(settings, "settings must be a sequence of (key, value) pairs");
  if (!seq) goto fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    const char *k, *v;
    if (!PyArg_ParseTuple(item, "ss", &k, &v)) {
      Py_DECREF(seq);
      goto fail;
    }
    rc = lade_config_set(cfg, k, v);
    if (rc) {
      raise_last(rc);
      Py_DECREF(seq);
      goto fail;
    }
  }
  Py_DECREF(seq);
  if (L->has_position && (rc = lade_config_set_position(cfg, &L->position, sizeof L->position)) != 0) {
    raise_last(rc);
    goto fail;
  }
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_create(&L->loader, cfg);
  if (rc) snprintf(L->err, sizeof L->err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) {
    L->loader = NULL;
    raise_lade(rc, L->err);
    goto fail;
  }
  lade_config_destroy(cfg);
  return 0;
fail:
  lade_config_destroy(cfg);
  return -1;
}

static int loader_init(LoaderObject *L, PyObject *args, PyObject *kwargs) {
  PyObject *settings, *position = Py_None;
  static char *kw[] = {"settings", "position", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O", kw, &settings, &position)) return -1;
  if (L->loader) {
    PyErr_SetString(LadeError, "loader already initialised");
    return -1;
  }
  L->has_position = 0;
  if (position != Py_None) { /* the tuple position() returns */
    unsigned long long v[12];
    if (!PyArg_ParseTuple(position, "KKKKKKKKKKKK", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
                          &v[9], &v[10], &v[11]))
      return -1;
    L->position = (lade_position_t){.epoch = v[0], .consumed = v[1], .shuffle_epoch = v[2],
                                    .world_size = (uint32_t)v[3], .batch_size = (uint32_t)v[4],
                                    .groups = (uint32_t)v[5], .kind = (int32_t)v[6], .samples = v[7], .seed = v[8],
                                    .base_consumed = v[9], .base_groups = (uint32_t)v[10],
                                    .base_batch = (uint32_t)v[11]};
    L->has_position = 1;
  }
  return loader_open(L, settings);
}

static PyObject *loader_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  LoaderObject *L = (LoaderObject *)type->tp_alloc(type, 0);
  if (!L) return NULL;
  pthread_mutex_init(&L->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&L->cv_done, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&L->cv_req, NULL);
  L->pid = getpid();
  return (PyObject *)L;
}

static void loader_shutdown(LoaderObject *L) {
  if (loader_forked(L)) {
    /* the parent's fetcher thread and workers: nothing to stop or join
     * here; lade_loader_destroy() and lade_batch_release() leave the copy alone */
    L->thread_started = 0;
    ref_dec(L->pending);
    L->pending = NULL;
    lade_loader_destroy(L->loader);
    L->loader = NULL;
    return;
  }
  if (L->thread_started) {
    pthread_mutex_lock(&L->mu);
    L->quit = 1;
    pthread_cond_signal(&L->cv_req);
    pthread_mutex_unlock(&L->mu);
    Py_BEGIN_ALLOW_THREADS pthread_join(L->thread, NULL);
    Py_END_ALLOW_THREADS L->thread_started = 0;
  }
  ref_dec(L->pending);
  L->pending = NULL;
  if (L->loader) {
    lade_loader_t *ld = L->loader;
    L->loader = NULL;
    Py_BEGIN_ALLOW_THREADS lade_loader_destroy(ld);
    Py_END_ALLOW_THREADS
  }
}

static void loader_dealloc(LoaderObject *L) {
  int forked = loader_forked(L);
  loader_shutdown(L);
  if (forked) { /* the parent's fetcher may have held these at the fork */
    Py_TYPE(L)->tp_free((PyObject *)L);
    return;
  }
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv_req);
  pthread_cond_destroy(&L->cv_done);
  Py_TYPE(L)->tp_free((PyObject *)L);
}

#define FORK_ADVICE                                                                                            \
  "lade parallelises loading itself (its threads setting): iterate one lade.Loader(..., threads=N) in the "   \
  "training process instead of wrapping it in torch.utils.data.DataLoader(num_workers>0) or a worker pool, or " \
  "create a new Loader in the child process"

static int loader_ready(LoaderObject *L) {
  if (!L->loader) {
    raise_lade(LADE_ESTATE, "loader is closed");
    return -1;
  }
  if (loader_forked(L)) {
    char msg[1024];
    snprintf(msg, sizeof msg,
             "this lade.Loader was created in process %d and this process (%d) is a fork of it (a DataLoader "
             "worker, multiprocessing, os.fork()): a loader cannot be used across fork(). " FORK_ADVICE,
             (int)L->pid, (int)getpid());
    raise_lade(LADE_ESTATE, msg);
    return -1;
  }
  if (L->busy) {
    raise_lade(LADE_ESTATE, "loader is in use by another thread");
    return -1;
  }
  return 0;
}

/* owned(who): raises "in use by another thread" when another thread is in
 * next() or iterates this loader (an Iter of it, not at its end, last
 * advanced there): load_state_dict() swaps the handle under that thread. */
static PyObject *loader_owned(LoaderObject *L, PyObject *args) {
  const char *who = "loader";
  if (!PyArg_ParseTuple(args, "|s", &who)) return NULL;
  if (L->busy || (L->iters > 0 && L->iter_thread != PyThread_get_thread_ident())) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: loader is in use by another thread (%s)", who,
             L->busy ? "it waits in next()" : "it iterates the loader");
    return raise_lade(LADE_ESTATE, msg);
  }
  Py_RETURN_NONE;
}

static PyObject *loader_close(LoaderObject *L, PyObject *unused) {
  if (L->busy) return raise_lade(LADE_ESTATE, "loader is in use by another thread");
  loader_shutdown(L);
  Py_RETURN_NONE;
}

static void add_ms(struct timespec *ts, long ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_nsec += ms * 1000000L;
  while (ts->tv_nsec >= 1000000000L) {
    ts->tv_nsec -= 1000000000L;
    ts->tv_sec++;
  }
}

static PyObject *batch_wrap_ref(batch_ref_t *r) {
  BatchObject *o = PyObject_New(BatchObject, &BatchType);
  if (!o) {
    ref_dec(r);
    return NULL;
  }
  o->b = r->batch;
  o->ref = r;
  return (PyObject *)o;
}

/* next() -> Batch, or None at the end of the last epoch. */
static PyObject *loader_next(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  if (L->pending) {
    batch_ref_t *r = L->pending;
    L->pending = NULL;
    L->interrupted = 0;
    return batch_wrap_ref(r);
  }
  if (!L->thread_started) {
    if (pthread_create(&L->thread, NULL, fetcher_main, L) != 0)
      return raise_lade(LADE_ETHREAD, "cannot start the fetcher thread");
    L->thread_started = 1;
  }
  L->busy = 1;
  int interrupted = 0; /* 1: a signal (the Python exception is set); 2: Loader.interrupt() */
  PyThreadState *ts = PyEval_SaveThread();
  pthread_mutex_lock(&L->mu);
  L->done = 0;
  L->req = 1;
  L->waiting = 1;
  pthread_cond_signal(&L->cv_req);
  for (;;) {
    if (L->intr && !interrupted) {
      interrupted = 2;
      lade_loader_interrupt(L->loader);
    }
    L->intr = 0;
    if (L->done) break;
    struct timespec dl;
    add_ms(&dl, 50);
    int w = pthread_cond_timedwait(&L->cv_done, &L->mu, &dl);
    if (w != ETIMEDOUT || L->done || L->intr) continue;
    if (interrupted) {
      lade_loader_interrupt(L->loader); /* the fetcher's next() may not have been waiting yet */
      continue;
    }
    pthread_mutex_unlock(&L->mu);
    PyEval_RestoreThread(ts);
    int sig = PyErr_CheckSignals();
    ts = PyEval_SaveThread();
    pthread_mutex_lock(&L->mu);
    if (sig) {
      interrupted = 1;
      lade_loader_interrupt(L->loader);
    }
  }
  L->waiting = 0;
  int rc = L->rc;
  lade_batch_t *b = L->out;
  L->out = NULL;
  char err[sizeof L->err];
  memcpy(err, L->err, sizeof err);
  pthread_mutex_unlock(&L->mu);
  PyEval_RestoreThread(ts);
  L->busy = 0;

  if (interrupted) {
    L->interrupted = 1;
    if (rc == 0 && b) {
      /* arrived while we stopped: the next call hands it out */
      L->pending = ref_new(b);
      if (!L->pending) lade_batch_release(b);
    }
    if (interrupted == 1) return NULL; /* KeyboardInterrupt from PyErr_CheckSignals */
    return raise_lade(LADE_EINTR, "lade.Loader.next: interrupted by Loader.interrupt()");
  }
  if (rc) return raise_lade(rc, err);
  if (!b) Py_RETURN_NONE;
  L->interrupted = 0;
  return batch_wrap(b);
}

/* Gives a batch that was taken but not handed out back to the loader: the
 * next next() returns it. */
static void loader_put_back(LoaderObject *L, BatchObject *o) {
  if (!o->ref) return;
  if (L->pending || !L->loader) return; /* cannot happen through Iter; the Batch keeps its reference */
  L->pending = o->ref;
  o->ref = NULL;
  L->interrupted = 1;
}

/* An integer argument (anything with __index__) as a uint64_t: 0 when it
 * is one, 1 when it is an integer out of 0..2^64-1 (a negative or huge
 * epoch must fail naming its value, not wrap as "K" wraps it), -1 with
 * TypeError when it is no integer. */
static int u64_of(PyObject *o, uint64_t *out) {
  PyObject *i = PyNumber_Index(o);
  if (!i) return -1;
  int over = 0;
  long long sv = PyLong_AsLongLongAndOverflow(i, &over);
  int bad = over < 0 || (!over && sv < 0);
  unsigned long long v = (unsigned long long)sv;
  if (!bad && over > 0) {
    v = PyLong_AsUnsignedLongLong(i);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      bad = 1;
    }
  }
  Py_DECREF(i);
  if (bad) return 1;
  *out = v;
  return 0;
}

/* lade.Error (LADE_ERANGE): "`who`: `what` `value` is out of range: `range`". */
static PyObject *raise_range(const char *who, const char *what, PyObject *value, const char *range) {
  PyObject *m = PyUnicode_FromFormat("%s: %s %S is out of range: %s", who, what, value, range);
  if (!m) return NULL;
  const char *t = PyUnicode_AsUTF8(m);
  PyObject *r = t ? raise_lade(LADE_ERANGE, t) : NULL;
  Py_DECREF(m);
  return r;
}

/* seek(epoch, step, who="seek"): `who` names the caller (set_epoch,
 * load_state_dict) in the errors. */
static PyObject *loader_seek(LoaderObject *L, PyObject *args) {
  PyObject *eo, *so;
  const char *who = "seek";
  if (!PyArg_ParseTuple(args, "OO|s", &eo, &so, &who)) return NULL;
  if (loader_ready(L)) return NULL;
  uint64_t e = 0, s = 0;
  int re = u64_of(eo, &e), rs = re < 0 ? -1 : u64_of(so, &s);
  if (re < 0 || rs < 0) return NULL;
  if (re || rs) {
    uint64_t n = 0, spe = 0, ep = 0;
    int rc = lade_loader_info(L->loader, &n, &spe, &ep);
    if (rc) return raise_last(rc);
    char range[256];
    if (re)
      snprintf(range, sizeof range, "epochs are 0 to %llu on this loader (%llu epochs; (%llu, 0) is the end)",
               (unsigned long long)(ep ? ep - 1 : 0), (unsigned long long)ep, (unsigned long long)ep);
    else
      snprintf(range, sizeof range, "steps are 0 to %llu (%llu steps per epoch on this loader)",
               (unsigned long long)(spe ? spe - 1 : 0), (unsigned long long)spe);
    return raise_range(who, re ? "epoch" : "step", re ? eo : so, range);
  }
  ref_dec(L->pending);
  L->pending = NULL;
  L->interrupted = 0;
  int rc;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_seek(L->loader, e, s);
  if (rc) snprintf(err, sizeof err, "%s%s%s", strcmp(who, "seek") ? who : "", strcmp(who, "seek") ? ": " : "",
                   lade_last_error());
  Py_END_ALLOW_THREADS if (rc) return raise_lade(rc, err);
  Py_RETURN_NONE;
}

static PyObject *loader_tell(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  if (L->pending) return Py_BuildValue("(KK)", (unsigned long long)L->pending->batch->epoch,
                                       (unsigned long long)L->pending->batch->step);
  uint64_t e = 0, s = 0;
  int rc = lade_loader_tell(L->loader, &e, &s);
  if (rc) return raise_last(rc);
  return Py_BuildValue("(KK)", (unsigned long long)e, (unsigned long long)s);
}

/* position(): the global position of the next batch as the tuple
 * Loader(settings, position) takes (lade_position_t's fields in order). */
static PyObject *loader_position(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  uint64_t e = 0, s = 0;
  int rc = 0;
  if (L->pending) {
    e = (uint64_t)L->pending->batch->epoch;
    s = (uint64_t)L->pending->batch->step;
  } else if ((rc = lade_loader_tell(L->loader, &e, &s)) != 0) {
    return raise_last(rc);
  }
  lade_position_t p;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_position(L->loader, e, s, &p, sizeof p);
  if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) return raise_lade(rc, err);
  return Py_BuildValue("(KKKKKKLKKKKK)", (unsigned long long)p.epoch, (unsigned long long)p.consumed,
                       (unsigned long long)p.shuffle_epoch, (unsigned long long)p.world_size,
                       (unsigned long long)p.batch_size, (unsigned long long)p.groups, (long long)p.kind,
                       (unsigned long long)p.samples, (unsigned long long)p.seed,
                       (unsigned long long)p.base_consumed, (unsigned long long)p.base_groups,
                       (unsigned long long)p.base_batch);
}

static PyObject *loader_start(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  uint64_t e = 0, s = 0;
  int rc = lade_loader_start(L->loader, &e, &s);
  if (rc) return raise_last(rc);
  return Py_BuildValue("(KK)", (unsigned long long)e, (unsigned long long)s);
}

static PyObject *loader_info(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  uint64_t n = 0, spe = 0, ep = 0;
  int rc;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_info(L->loader, &n, &spe, &ep);
  if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) return raise_lade(rc, err);
  return Py_BuildValue("(KKK)", (unsigned long long)n, (unsigned long long)spe, (unsigned long long)ep);
}

/* Wakes the next() that waits now (it raises lade.Error LADE_EINTR and takes
 * no batch); True if there was one, else False and nothing happens. */
static PyObject *loader_interrupt(LoaderObject *L, PyObject *unused) {
  int woke = 0;
  if (L->loader && !loader_forked(L)) {
    pthread_mutex_lock(&L->mu);
    if (L->waiting) {
      L->intr = 1;
      woke = 1;
      pthread_cond_signal(&L->cv_done);
    }
    pthread_mutex_unlock(&L->mu);
  }
  return PyBool_FromLong(woke);
}

static PyObject *loader_interrupted(LoaderObject *L, void *c) { return PyBool_FromLong(L->interrupted); }

static PyObject *stats_dict(const lade_stats_t *s) {
  PyObject *d = Py_BuildValue(
      "{sKsKsKs(KKKK)s(KKKK)sKs{sdsdsdsd}sdsdsdsdsdsKsI}", "batches", (unsigned long long)s->batches, "samples",
      (unsigned long long)s->samples, "bytes_read", (unsigned long long)s->bytes_read, "samples_by_source",
      (unsigned long long)s->samples_by_source[0], (unsigned long long)s->samples_by_source[1],
      (unsigned long long)s->samples_by_source[2], (unsigned long long)s->samples_by_source[3], "bytes_by_source",
      (unsigned long long)s->bytes_by_source[0], (unsigned long long)s->bytes_by_source[1],
      (unsigned long long)s->bytes_by_source[2], (unsigned long long)s->bytes_by_source[3], "substituted",
      (unsigned long long)s->substituted, "stage_seconds", "read", s->stage_seconds[LADE_STAGE_READ], "transform",
      s->stage_seconds[LADE_STAGE_TRANSFORM], "collate", s->stage_seconds[LADE_STAGE_COLLATE], "wait",
      s->stage_seconds[LADE_STAGE_WAIT], "first_batch_seconds", s->first_batch_seconds, "batch_latency_p50",
      s->batch_latency_p50, "batch_latency_p90", s->batch_latency_p90, "batch_latency_p99", s->batch_latency_p99,
      "batch_latency_max", s->batch_latency_max, "peak_pool_bytes", (unsigned long long)s->peak_pool_bytes,
      "threads", (unsigned int)s->threads);
  if (!d) return NULL;
  PyObject *more = Py_BuildValue(
      "{sIsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsIsIsIsI}", "concurrency", (unsigned int)s->concurrency, "get_requests",
      (unsigned long long)s->get_requests, "list_requests", (unsigned long long)s->list_requests, "retries",
      (unsigned long long)s->retries, "remote_bytes", (unsigned long long)s->remote_bytes, "cache_misses",
      (unsigned long long)s->cache_misses, "prefetched", (unsigned long long)s->prefetched, "cache_corrupt",
      (unsigned long long)s->cache_corrupt, "fetch_size", (unsigned long long)s->fetch_size, "prefetch_threshold",
      (unsigned long long)s->prefetch_threshold, "plan_cache_hits", (unsigned long long)s->plan_cache_hits,
      "plan_fallbacks", (unsigned long long)s->plan_fallbacks, "plan_peer_storage",
      (unsigned long long)s->plan_peer_storage, "peer_messages_sent", (unsigned long long)s->peer_messages_sent,
      "peer_bytes_sent", (unsigned long long)s->peer_bytes_sent, "peer_served_from_storage",
      (unsigned long long)s->peer_served_from_storage, "peer_bytes_held_peak",
      (unsigned long long)s->peer_bytes_held_peak, "node", (unsigned int)s->node, "nodes", (unsigned int)s->nodes,
      "local_rank", (unsigned int)s->local_rank, "ranks_per_node", (unsigned int)s->ranks_per_node);
  if (more) { /* and a node-aware plan's intra-node handoffs (docs/plan.md, Nodes) */
    int bad = PyDict_Update(d, more) != 0;
    Py_DECREF(more);
    more = bad ? NULL
               : Py_BuildValue("{sKsK}", "peer_samples_node", (unsigned long long)s->peer_samples_node,
                               "peer_bytes_node", (unsigned long long)s->peer_bytes_node);
  }
  if (!more || PyDict_Update(d, more) != 0) {
    Py_XDECREF(more);
    Py_DECREF(d);
    return NULL;
  }
  Py_DECREF(more);
  PyObject *node = Py_BuildValue(
      "{sKsKsKsKsKsKsKsI}", "node_cache_used_bytes", (unsigned long long)s->node_cache_used_bytes,
      "node_cache_capacity", (unsigned long long)s->node_cache_capacity, "node_cache_segment_bytes",
      (unsigned long long)s->node_cache_segment_bytes, "node_cache_entries", (unsigned long long)s->node_cache_entries,
      "node_cache_hits", (unsigned long long)s->node_cache_hits, "node_cache_misses",
      (unsigned long long)s->node_cache_misses, "node_cache_recovered", (unsigned long long)s->node_cache_recovered,
      "node_cache_ranks", (unsigned int)s->node_cache_ranks);
  if (node) { /* and two tiers under a plan (docs/plan.md, Two tiers) */
    int bad = PyDict_Update(d, node) != 0;
    Py_DECREF(node);
    node = bad ? NULL
               : Py_BuildValue("{sKsKsKsKsKsKsK}", "cache_stale", (unsigned long long)s->cache_stale,
                               "plan_node_reads", (unsigned long long)s->plan_node_reads,
                               "plan_admits_mem", (unsigned long long)s->plan_admits_mem,
                               "plan_admits_disk", (unsigned long long)s->plan_admits_disk, "plan_moves_up",
                               (unsigned long long)s->plan_moves_up, "plan_moves_down",
                               (unsigned long long)s->plan_moves_down, "peer_served_from_disk",
                               (unsigned long long)s->peer_served_from_disk);
  }
  if (!node || PyDict_Update(d, node) != 0) {
    Py_XDECREF(node);
    Py_DECREF(d);
    return NULL;
  }
  Py_DECREF(node);
  return d;
}

static PyObject *loader_epoch_stats(LoaderObject *L, PyObject *args) {
  PyObject *eo;
  if (!PyArg_ParseTuple(args, "O", &eo)) return NULL;
  uint64_t epoch = 0;
  int r = u64_of(eo, &epoch);
  if (r < 0) return NULL;
  if (r) return raise_range("epoch_stats", "epoch", eo, "epochs are counted from 0");
  if (!L->loader) return raise_lade(LADE_ESTATE, "loader is closed");
  lade_epoch_stats_t e;
  int rc = lade_loader_epoch_stats(L->loader, epoch, &e, sizeof(lade_epoch_stats_t));
  if (rc) return raise_last(rc);
  return Py_BuildValue("{sKsKsKs(KKKK)s(KKKK)sdsdsKsKsKsKsKsKsKsK}", "epoch", (unsigned long long)e.epoch, "batches",
                       (unsigned long long)e.batches, "samples", (unsigned long long)e.samples, "samples_by_source",
                       (unsigned long long)e.samples_by_source[0], (unsigned long long)e.samples_by_source[1],
                       (unsigned long long)e.samples_by_source[2], (unsigned long long)e.samples_by_source[3],
                       "bytes_by_source", (unsigned long long)e.bytes_by_source[0],
                       (unsigned long long)e.bytes_by_source[1], (unsigned long long)e.bytes_by_source[2],
                       (unsigned long long)e.bytes_by_source[3], "miss_rate", e.miss_rate, "wait_seconds",
                       e.wait_seconds, "get_requests", (unsigned long long)e.get_requests, "list_requests",
                       (unsigned long long)e.list_requests, "remote_bytes", (unsigned long long)e.remote_bytes,
                       "plan_fallbacks", (unsigned long long)e.plan_fallbacks, "plan_peer_storage",
                       (unsigned long long)e.plan_peer_storage, "peer_samples_node",
                       (unsigned long long)e.peer_samples_node, "peer_bytes_node", (unsigned long long)e.peer_bytes_node,
                       "plan_node_reads", (unsigned long long)e.plan_node_reads);
}

static PyObject *loader_stats(LoaderObject *L, PyObject *unused) {
  if (!L->loader) return raise_lade(LADE_ESTATE, "loader is closed");
  lade_stats_t s;
  memset(&s, 0, sizeof s);
  int rc = lade_loader_stats(L->loader, &s, sizeof(lade_stats_t));
  if (rc) return raise_last(rc);
  return stats_dict(&s);
}

/* Waits for the listing with the GIL released; 0 or -1 with the error raised.
 * After it the class and sample accessors do not block. */
static int loader_listed(LoaderObject *L) {
  if (!L->loader) {
    raise_lade(LADE_ESTATE, "loader is closed");
    return -1;
  }
  int rc;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_info(L->loader, NULL, NULL, NULL);
  if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) {
    raise_lade(rc, err);
    return -1;
  }
  return 0;
}

/* classes() -> [name, ...] (names decoded as os.fsdecode does, like os.scandir's). */
static PyObject *loader_classes(LoaderObject *L, PyObject *unused) {
  if (loader_listed(L)) return NULL;
  uint32_t n = 0;
  int rc = lade_loader_classes(L->loader, &n);
  if (rc) return raise_last(rc);
  PyObject *list = PyList_New(n);
  if (!list) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    const char *name = NULL;
    rc = lade_loader_class_name(L->loader, i, &name);
    PyObject *o = rc ? raise_last(rc) : PyUnicode_DecodeFSDefault(name);
    if (!o) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, o);
  }
  return list;
}

static PyObject *sample_tuple(LoaderObject *L, uint64_t i, char *buf, size_t size) {
  int64_t label = -1;
  int rc = lade_loader_sample(L->loader, i, buf, size, &label);
  if (rc) return raise_last(rc);
  return Py_BuildValue("(NL)", PyUnicode_DecodeFSDefault(buf), (long long)label);
}

/* sample(index) -> (path, label) */
static PyObject *loader_sample(LoaderObject *L, PyObject *args) {
  PyObject *io;
  if (!PyArg_ParseTuple(args, "O", &io)) return NULL;
  uint64_t i = 0;
  int r = u64_of(io, &i);
  if (r < 0) return NULL;
  if (r) return raise_range("sample", "index", io, "dataset indices are counted from 0");
  if (loader_listed(L)) return NULL;
  char buf[2 * 4096 + 64];
  return sample_tuple(L, i, buf, sizeof buf);
}

/* samples() -> [(path, label), ...] in dataset index order, as ImageFolder.samples */
static PyObject *loader_samples(LoaderObject *L, PyObject *unused) {
  if (loader_listed(L)) return NULL;
  uint64_t n = 0;
  int rc = lade_loader_info(L->loader, &n, NULL, NULL);
  if (rc) return raise_last(rc);
  if (n > (uint64_t)PY_SSIZE_T_MAX) return raise_lade(LADE_ERANGE, "too many samples for a Python list");
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  char buf[2 * 4096 + 64];
  for (uint64_t i = 0; i < n; i++) {
    PyObject *t = sample_tuple(L, i, buf, sizeof buf);
    if (!t) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, t);
  }
  return list;
}

static PyObject *loader_closed(LoaderObject *L, void *c) { return PyBool_FromLong(L->loader == NULL); }

static PyMethodDef loader_methods[] = {
    {"owned", (PyCFunction)loader_owned, METH_VARARGS,
     "owned(who): raises lade.Error when another thread is in next() or iterates this loader"},
    {"next", (PyCFunction)loader_next, METH_NOARGS,
     "the next Batch in plan order, or None after the last epoch (GIL released; Ctrl-C interrupts)"},
    {"seek", (PyCFunction)loader_seek, METH_VARARGS,
     "seek(epoch, step, who='seek'): a value out of range raises lade.Error naming `who`, the value and the range"},
    {"tell", (PyCFunction)loader_tell, METH_NOARGS, "(epoch, step) of the next batch"},
    {"position", (PyCFunction)loader_position, METH_NOARGS,
     "the global position of the next batch (lade_position_t's fields), for Loader(settings, position)"},
    {"start", (PyCFunction)loader_start, METH_NOARGS, "(epoch, step) of the run's first batch (a resumed run's start)"},
    {"info", (PyCFunction)loader_info, METH_NOARGS, "(samples, steps_per_epoch, epochs)"},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "counters as a dict"},
    {"epoch_stats", (PyCFunction)loader_epoch_stats, METH_VARARGS,
     "epoch_stats(epoch): that epoch's miss rate, consumer wait, requests and bytes by tier, as a dict"},
    {"interrupt", (PyCFunction)loader_interrupt, METH_NOARGS,
     "wake the next() that waits now (it raises lade.Error LADE_EINTR): True if one waited, else False (no effect)"},
    {"classes", (PyCFunction)loader_classes, METH_NOARGS, "[class name, ...]: label i is the i-th name"},
    {"sample", (PyCFunction)loader_sample, METH_VARARGS, "sample(index) -> (path, label)"},
    {"samples", (PyCFunction)loader_samples, METH_NOARGS,
     "[(path, label), ...] for every dataset index, as torchvision ImageFolder.samples"},
    {"close", (PyCFunction)loader_close, METH_NOARGS, "stop the workers; live batches stay valid"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef loader_getset[] = {{"closed", (getter)loader_closed, NULL, "True after close()", NULL},
                                      {"interrupted", (getter)loader_interrupted, NULL,
                                       "the last next() was interrupted (nothing handed out since)", NULL},
                                      {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lade._lade.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Low-level loader handle: Loader([(key, value), ...]).",
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_init = (initproc)loader_init,
    .tp_new = loader_tp_new,
};

/* ------------------------------------------------------------ Iter */

/* Iter(loader, convert, count, meta, close): yields convert(batch) (plus the
 * Batch with meta) for `count` batches (-1: to the end). In C so that a batch
 * is never dropped between the engine and the for loop (see the top). */
typedef struct {
  PyObject_HEAD
  LoaderObject *owner;
  PyObject *conv;
  long long count;
  int meta, close;
  int live; /* counted in owner->iters: not yet at its end */
} IterObject;

/* The iterator is at its end (or gone): the loader no longer counts it. */
static void iter_done(IterObject *it) {
  if (!it->live) return;
  it->live = 0;
  it->owner->iters--;
}

static PyTypeObject IterType;

static PyObject *iter_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *owner, *conv;
  long long count;
  int meta, close;
  if (!PyArg_ParseTuple(args, "O!OLpp", &LoaderType, &owner, &conv, &count, &meta, &close)) return NULL;
  IterObject *it = (IterObject *)type->tp_alloc(type, 0);
  if (!it) return NULL;
  Py_INCREF(owner);
  Py_INCREF(conv);
  it->owner = (LoaderObject *)owner;
  it->conv = conv;
  it->count = count;
  it->meta = meta;
  it->close = close;
  if (count != 0) {
    it->live = 1;
    it->owner->iters++;
    it->owner->iter_thread = PyThread_get_thread_ident();
  }
  return (PyObject *)it;
}

static void iter_dealloc(IterObject *it) {
  if (it->owner) iter_done(it);
  Py_XDECREF(it->owner);
  Py_XDECREF(it->conv);
  Py_TYPE(it)->tp_free((PyObject *)it);
}

static PyObject *iter_next(IterObject *it) {
  if (it->count == 0) {
    iter_done(it);
    return NULL;
  }
  if (it->live) it->owner->iter_thread = PyThread_get_thread_ident();
  PyObject *b = loader_next(it->owner, NULL);
  if (!b) return NULL;
  if (b == Py_None) {
    Py_DECREF(b);
    it->count = 0;
    iter_done(it);
    return NULL;
  }
  PyObject *out = PyObject_CallOneArg(it->conv, b);
  if (out && it->meta) {
    PyObject *tail = PyTuple_Pack(1, b);
    PyObject *both = tail ? PySequence_Concat(out, tail) : NULL;
    Py_XDECREF(tail);
    Py_SETREF(out, both);
  }
  /* a signal that arrived since the fetcher's last check: raise it now, with
   * the batch put back, rather than in the caller after the batch is gone */
  if (out && PyErr_CheckSignals() < 0) Py_CLEAR(out);
  if (!out) {
    loader_put_back(it->owner, (BatchObject *)b);
    Py_DECREF(b);
    return NULL;
  }
  if (it->close) { /* the arrays hold the buffer now */
    BatchObject *o = (BatchObject *)b;
    batch_ref_t *r = o->ref;
    o->ref = NULL;
    ref_dec(r);
  }
  Py_DECREF(b);
  if (it->count > 0 && --it->count == 0) iter_done(it);
  return out;
}

static PyTypeObject IterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lade._lade.Iter",
    .tp_basicsize = sizeof(IterObject),
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Iter(loader, convert, count, meta, close): the batches of a lade.Loader, converted.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)iter_next,
    .tp_new = iter_tp_new,
};

/* ------------------------------------------------------------ module functions */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) {
    h ^= c[i];
    h *= 1099511628211ULL;
  }
  return h;
}
#define FNV_OFFSET 14695981039346656037ULL

static PyObject *mod_fnv1a(PyObject *m, PyObject *args) {
  Py_buffer buf;
  unsigned long long h = FNV_OFFSET;
  if (!PyArg_ParseTuple(args, "y*|K", &buf, &h)) return NULL;
  uint64_t r;
  Py_BEGIN_ALLOW_THREADS r = fnv1a(h, buf.buf, (size_t)buf.len);
  Py_END_ALLOW_THREADS PyBuffer_Release(&buf);
  return PyLong_FromUnsignedLongLong(r);
}

/*
 * c_run(settings, max_batches=-1, checksum=True) -> dict: iterates a loader
 * through the C API alone (no Python objects per batch), for checksums and the
 * C-API rate. Checksum: per batch, fnv1a over data bytes, then labels, then
 * indices (the same as the Python side computes with fnv1a()).
 */
static PyObject *mod_c_run(PyObject *m, PyObject *args, PyObject *kwargs) {
  PyObject *settings;
  long long max_batches = -1;
  int checksum = 1;
  static char *kw[] = {"settings", "max_batches", "checksum", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Lp", kw, &settings, &max_batches, &checksum)) return NULL;
  LoaderObject tmp;
  memset(&tmp, 0, sizeof tmp);
  if (loader_open(&tmp, settings)) return NULL;
  lade_loader_t *ld = tmp.loader;
  PyObject *sums = PyList_New(0);
  if (!sums) {
    lade_loader_destroy(ld);
    return NULL;
  }
  unsigned long long batches = 0, samples = 0, bytes = 0;
  uint64_t chain = 0;
  int rc = 0;
  char err[1024] = "";
  double t0 = 0, t1 = 0;
  struct timespec a, z;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (;;) {
    if (max_batches >= 0 && (long long)batches >= max_batches) break;
    lade_batch_t *b = NULL;
    uint64_t h = FNV_OFFSET;
    Py_BEGIN_ALLOW_THREADS rc = lade_loader_next(ld, &b);
    if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
    if (!rc && b && checksum) {
      chain = lade_checksum(b->data, b->nbytes, chain);
      h = fnv1a(h, b->data, b->nbytes);
      h = fnv1a(h, b->labels, (size_t)b->shape[0] * sizeof(int64_t));
      h = fnv1a(h, b->indices, (size_t)b->shape[0] * sizeof(int64_t));
    }
    Py_END_ALLOW_THREADS if (rc || !b) break;
    batches++;
    samples += (unsigned long long)b->shape[0];
    bytes += b->nbytes;
    lade_batch_release(b);
    if (checksum) {
      PyObject *v = PyLong_FromUnsignedLongLong(h);
      if (!v || PyList_Append(sums, v)) {
        Py_XDECREF(v);
        Py_DECREF(sums);
        lade_loader_destroy(ld);
        return NULL;
      }
      Py_DECREF(v);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &z);
  t1 = (double)(z.tv_sec - a.tv_sec) + 1e-9 * (double)(z.tv_nsec - a.tv_nsec);
  (void)t0;
  Py_BEGIN_ALLOW_THREADS lade_loader_destroy(ld);
  Py_END_ALLOW_THREADS if (rc) {
    Py_DECREF(sums);
    return raise_lade(rc, err);
  }
  return Py_BuildValue("{sKsKsKsdsNsK}", "batches", batches, "samples", samples, "bytes", bytes, "seconds", t1,
                       "checksums", sums, "checksum", (unsigned long long)chain);
}

static PyObject *mod_checksum(PyObject *m, PyObject *args) {
  Py_buffer buf;
  unsigned long long seed = 0;
  if (!PyArg_ParseTuple(args, "y*|K", &buf, &seed)) return NULL;
  uint64_t r;
  Py_BEGIN_ALLOW_THREADS r = lade_checksum(buf.buf, (size_t)buf.len, seed);
  Py_END_ALLOW_THREADS PyBuffer_Release(&buf);
  return PyLong_FromUnsignedLongLong(r);
}

static PyObject *mod_released(PyObject *m, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(atomic_load(&g_released));
}

static PyObject *mod_config_keys(PyObject *m, PyObject *unused) {
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  for (size_t i = 0;; i++) {
    const char *def = NULL, *help = NULL;
    const char *k = lade_config_key(i, &def, &help);
    if (!k) break;
    PyObject *v = Py_BuildValue("(ss)", def ? def : "", help ? help : "");
    if (!v || PyDict_SetItemString(d, k, v)) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

static PyObject *mod_version(PyObject *m, PyObject *unused) { return PyUnicode_FromString(lade_version()); }

static PyObject *mod_features(PyObject *m, PyObject *unused) { return PyUnicode_FromString(lade_features()); }

/* The UCX transport's bootstrap (lade_ucx_address, lade_ucx_set_peers): the
 * Python module gathers the addresses over torch.distributed. */
static PyObject *mod_ucx_address(PyObject *m, PyObject *unused) {
  const char *a = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = lade_ucx_address(&a);
  Py_END_ALLOW_THREADS
  if (rc) return raise_last(rc);
  return PyUnicode_FromString(a);
}

static PyObject *mod_ucx_set_peers(PyObject *m, PyObject *args) {
  unsigned rank = 0;
  PyObject *list = NULL;
  if (!PyArg_ParseTuple(args, "IO!", &rank, &PyList_Type, &list)) return NULL;
  Py_ssize_t n = PyList_GET_SIZE(list);
  const char **addr = calloc(n ? (size_t)n : 1, sizeof *addr);
  if (!addr) return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n; i++) {
    addr[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(list, i));
    if (!addr[i]) {
      free(addr);
      return NULL;
    }
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = lade_ucx_set_peers(rank, (uint32_t)n, addr);
  Py_END_ALLOW_THREADS
  free(addr);
  if (rc) return raise_last(rc);
  Py_RETURN_NONE;
}

static PyObject *mod_is_secret(PyObject *m, PyObject *args) {
  const char *key;
  if (!PyArg_ParseTuple(args, "s", &key)) return NULL;
  return PyBool_FromLong(lade_config_key_is_secret(key));
}

static PyMethodDef mod_methods[] = {
    {"checksum", mod_checksum, METH_VARARGS,
     "checksum(buffer, seed=0) -> lade_checksum() of the bytes, chainable like `lade bench`"},
    {"fnv1a", mod_fnv1a, METH_VARARGS, "fnv1a(buffer, h=offset) -> 64-bit FNV-1a hash continuing from h"},
    {"c_run", (PyCFunction)(void (*)(void))mod_c_run, METH_VARARGS | METH_KEYWORDS,
     "c_run(settings, max_batches=-1, checksum=True): iterate through the C API only"},
    {"config_keys", mod_config_keys, METH_NOARGS, "{key: (default, help)} of every setting"},
    {"version", mod_version, METH_NOARGS, "the library version"},
    {"features", mod_features, METH_NOARGS, "lade_features(): the optional dependencies built in"},
    {"ucx_address", mod_ucx_address, METH_NOARGS, "this process's UCX address (lade_ucx_address)"},
    {"ucx_set_peers", mod_ucx_set_peers, METH_VARARGS,
     "ucx_set_peers(rank, [address by rank]): the peers of the UCX transport (lade_ucx_set_peers)"},
    {"is_secret", mod_is_secret, METH_VARARGS, "is_secret(key) -> True for a setting whose value is never shown"},
    {"_released", mod_released, METH_NOARGS, "test hook"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef lade_module = {PyModuleDef_HEAD_INIT, "_lade", "lade C extension", -1, mod_methods,
                                         NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__lade(void) {
  if (PyType_Ready(&ArrayType) < 0 || PyType_Ready(&BatchType) < 0 || PyType_Ready(&LoaderType) < 0 ||
      PyType_Ready(&IterType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&lade_module);
  if (!m) return NULL;
  LadeError = PyErr_NewExceptionWithDoc("lade.Error",
                                        "A lade error; str() is lade_last_error(), .code the LADE_E* code, "
                                        ".name its symbolic name.",
                                        PyExc_RuntimeError, NULL);
  if (!LadeError) goto fail;
  Py_INCREF(LadeError);
  if (PyModule_AddObject(m, "Error", LadeError) < 0) goto fail;
  Py_INCREF(&ArrayType);
  Py_INCREF(&BatchType);
  Py_INCREF(&LoaderType);
  Py_INCREF(&IterType);
  if (PyModule_AddObject(m, "Array", (PyObject *)&ArrayType) < 0 ||
      PyModule_AddObject(m, "Batch", (PyObject *)&BatchType) < 0 ||
      PyModule_AddObject(m, "Loader", (PyObject *)&LoaderType) < 0 ||
      PyModule_AddObject(m, "Iter", (PyObject *)&IterType) < 0)
    goto fail;
#define ADD_CODE(name, value, text) PyModule_AddIntConstant(m, #name, value);
  LADE_ERRORS(ADD_CODE)
#undef ADD_CODE
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
