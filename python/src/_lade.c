/*
 * _lade.c - the CPython extension behind the `lade` Python package: its
 * errors, module functions and module; the types are batch.c (Array, Batch,
 * DLPack) and loader.c (Loader, Iter), sharing ladepy.h.
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
#include "ladepy.h"

/* ------------------------------------------------------------ errors */

PyObject *LadeError;

/* Messages are text for people: bytes that are not UTF-8 (a file or tar
 * member name in another encoding, a name cut by the 1024-byte limit) are
 * shown as \xNN, as the library already shows control bytes, so raising the
 * error never fails with a UnicodeDecodeError. (Names returned as data,
 * classes() and samples(), decode as os.fsdecode does instead, so
 * os.fsencode gives the bytes back.) */
PyObject *raise_lade(int code, const char *detail) {
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
PyObject *raise_last(int code) { return raise_lade(code, lade_last_error()); }

/* ------------------------------------------------------------ module functions */

static PyObject *mod_fnv1a(PyObject *m, PyObject *args) {
  Py_buffer buf;
  unsigned long long h = FNV_OFFSET;
  if (!PyArg_ParseTuple(args, "y*|K", &buf, &h)) return NULL;
  uint64_t r;
  Py_BEGIN_ALLOW_THREADS r = fnv1a(h, buf.buf, (size_t)buf.len);
  Py_END_ALLOW_THREADS PyBuffer_Release(&buf);
  return PyLong_FromUnsignedLongLong(r);
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
