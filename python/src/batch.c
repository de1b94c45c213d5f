/*
 * batch.c - the batch holder (batch_ref_t, ladepy.h), DLPack tensors of
 * batches and arrays, and the Array (labels, indices) and Batch types of the
 * CPython extension. The ownership rules are _lade.c's opening comment.
 */
#include "ladepy.h"

/* ------------------------------------------------------------ batch holder */

atomic_ullong g_released;

batch_ref_t *ref_new(lade_batch_t *b) {
  batch_ref_t *r = malloc(sizeof *r);
  if (!r) return NULL;
  atomic_init(&r->refs, 1);
  r->batch = b;
  return r;
}
static void ref_inc(batch_ref_t *r) { atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); }
void ref_dec(batch_ref_t *r) {
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

/* mt as a 1-D int64 tensor of n values at data (labels, indices). */
static void managed_int64(managed_t *mt, void *data, int64_t n, DLDeviceType type, int32_t id) {
  mt->shape[0] = n;
  mt->strides[0] = 1;
  mt->m.dl_tensor.data = data;
  mt->m.dl_tensor.device.device_type = type;
  mt->m.dl_tensor.device.device_id = id;
  mt->m.dl_tensor.ndim = 1;
  mt->m.dl_tensor.dtype.code = kDLInt;
  mt->m.dl_tensor.dtype.bits = 64;
  mt->m.dl_tensor.dtype.lanes = 1;
  mt->m.dl_tensor.shape = mt->shape;
  mt->m.dl_tensor.strides = mt->strides;
  mt->m.dl_tensor.byte_offset = 0;
  mt->m.manager_ctx = mt;
  mt->m.deleter = managed_deleter;
}

/* ------------------------------------------------------------ Array (labels, indices) */

typedef struct {
  PyObject_HEAD
  int64_t *data;
  Py_ssize_t n;
  Py_ssize_t shape[1];
  Py_ssize_t strides[1];
} ArrayObject;


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
  managed_int64(mt, mt->owned, a->n, kDLCPU, 0);
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

PyTypeObject ArrayType = {
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


PyObject *batch_wrap(lade_batch_t *b) {
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

/* DLPack's stream protocol (the array API's __dlpack__): a device batch
 * makes the consumer's stream wait for its copy (lade_batch_use_stream);
 * None, 0 and 1 are the legacy default stream, 2 the per-thread one, -1 no
 * synchronisation. The other keywords (max_version, dl_device, copy) are
 * accepted and a legacy capsule is returned, which every consumer takes. */
static int dlpack_stream(BatchObject *o, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$OOO:__dlpack__", kw, &stream, &max_version, &dl_device, &copy))
    return -1;
  if (copy != Py_None && PyObject_IsTrue(copy) == 1) {
    PyErr_SetString(PyExc_BufferError, "lade.Batch.__dlpack__: copy=True is not supported (the batch is exported "
                    "without a copy; copy the tensor made from it)");
    return -1;
  }
  if (batch_check(o)) return -1;
  if (o->b->device < 0) return 0;
  void *s = NULL;
  if (stream != Py_None) {
    long long v = PyLong_AsLongLong(stream);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v == -1) return 0;
    s = v == 0 ? NULL : (void *)(intptr_t)v;
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = lade_batch_use_stream(o->b, s);
  Py_END_ALLOW_THREADS if (rc) {
    raise_last(rc);
    return -1;
  }
  return 0;
}

static PyObject *batch_dlpack(BatchObject *o, PyObject *args, PyObject *kwargs) {
  return dlpack_stream(o, args, kwargs) ? NULL : batch_dlpack_typed(o, 0);
}
static PyObject *batch_dlpack_u8(BatchObject *o, PyObject *args, PyObject *kwargs) {
  return dlpack_stream(o, args, kwargs) ? NULL : batch_dlpack_typed(o, 1);
}

/* A device batch's labels (shape[0] int64 on its device, no copy), as a
 * DLPack capsule holding the batch; made after the data's __dlpack__ on the
 * same stream, which already waits for the labels' copy too. */
static PyObject *batch_device_labels(BatchObject *o, PyObject *unused) {
  if (batch_check(o)) return NULL;
  const lade_batch_t *b = o->b;
  if (b->device < 0 || !b->device_labels)
    return raise_lade(LADE_EINVAL, "batch is in host memory: its labels are batch.labels");
  managed_t *mt = calloc(1, sizeof *mt);
  if (!mt) return PyErr_NoMemory();
  managed_int64(mt, (void *)b->device_labels, b->shape[0], kDLCUDA, b->device);
  mt->ref = o->ref;
  ref_inc(o->ref);
  return wrap_managed(mt);
}

static PyObject *batch_device(BatchObject *o, void *c) {
  if (batch_check(o)) return NULL;
  if (o->b->device < 0) return PyUnicode_FromString("cpu");
  return PyUnicode_FromFormat("cuda:%d", o->b->device);
}


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
  if (b->device >= 0) {
    PyErr_Format(PyExc_BufferError, "the batch is in GPU memory (device=cuda:%d): take it with DLPack "
                 "(torch.from_dlpack, output='torch'), not the buffer protocol", b->device);
    return -1;
  }
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
    {"device", (getter)batch_device, NULL, "where the batch is: 'cpu' or 'cuda:N' (setting device)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef batch_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))batch_dlpack, METH_VARARGS | METH_KEYWORDS,
     "DLPack capsule viewing the batch buffer (no copy); the buffer returns to the pool when the last view is freed"},
    {"__dlpack_device__", (PyCFunction)batch_dlpack_device, METH_NOARGS, "(device_type, device_id)"},
    {"_device_labels", (PyCFunction)batch_device_labels, METH_NOARGS,
     "a device batch's labels on its device: a DLPack capsule (no copy), after the data's __dlpack__"},
    {"_dlpack_uint8_bool", (PyCFunction)(void (*)(void))batch_dlpack_u8, METH_VARARGS | METH_KEYWORDS,
     "like __dlpack__, but a bool batch is typed uint8 (for torch versions without DLPack bool)"},
    {"close", (PyCFunction)batch_close, METH_NOARGS,
     "drop this object's reference (views made by __dlpack__ stay valid)"},
    {NULL, NULL, 0, NULL}};

PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lade.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_as_buffer = &batch_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One lade batch: the buffer (DLPack, zero-copy) plus labels, indices, epoch, step.",
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
};
