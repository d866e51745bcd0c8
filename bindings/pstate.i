/*
 * pstate.i — the one SWIG interface over include/pstate/pstate.h, for Python and Go.
 *
 * SWIG reads the public header itself (%include below), so every C entry point is wrapped
 * without a hand-written wrapper per function; what this file adds are typemaps, chosen by
 * parameter *name* (the header names its parameters consistently), that give each language a
 * natural shape for the kinds of C parameter that need one:
 *
 *   status codes     pstate_status_t results. Python: raise pstate.Error subclasses carrying the
 *                    status and pstate_last_error() (pstate/_errors.py maps number -> class).
 *                    Go: an `error` value (*StatusError, nil on PSTATE_OK); the message is copied
 *                    on the C side of the wrapper, on the thread that failed, so Go's moving of
 *                    goroutines between threads cannot lose the thread-local text.
 *   buffers          send/recv/buf. Python: any object with the buffer protocol (C-contiguous;
 *                    writable for outputs; the buffer is held for the whole call), an int
 *                    (device pointer) or None. Go: unsafe.Pointer (cgo checks it).
 *   out-parameters   handles (**out), counts (*count, *index), returned arrays (pstate.h's
 *                    (T *out, size_t capacity, size_t *count): ranks, same_node, new_rank, sizes;
 *                    Python passes the capacity and gets a list of *count entries),
 *                    object bytes (pstate_bytes_t *out, freed here with pstate_bytes_free),
 *                    capture streams. Python: extra return values. Go: pointers/slices filled
 *                    by C (Go memory without Go pointers, as cgo requires).
 *   parameter structs pstate_init_params_t, pstate_parallel_config_t, pstate_group_info_t get
 *                    constructors that apply their PSTATE_*_INIT macro (struct_size included),
 *                    and string members that own a copy.
 *   tensor dicts     (tensors, count): Python a sequence of (name, dtype, shape, buffer)
 *                    tuples, Go a TensorArray in C memory. (alloc, user): the allocation callback,
 *                    written here in C for both languages (pstate_swig_dict: malloc per tensor,
 *                    no runtime entered while the library calls it); the language takes the
 *                    tensors after the call (Python: numpy over the malloc'd blocks, no copy; Go:
 *                    copied into Go memory).
 *
 * The idiomatic packages (bindings/python/pstate, bindings/go) sit on top of this raw module,
 * named `capi` in both languages (Python: pstate.capi + pstate._capi; Go: internal/capi, whose
 * capi.swig is a link to this file so that `go build` runs SWIG itself). C function names lose
 * their `pstate_` prefix (capi.all_reduce, capi.All_reduce); constants keep their C names.
 * The GIL is released around every C call (threads="1"), except ReceivedDict.take and
 * .cuda_tensor, which build Python objects (%nothread).
 */
%module(package="pstate", threads="1") capi

%{
#include "pstate/pstate.h"
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A malloc'd copy of s (NULL stays NULL): struct string members own their text. */
static char *pstate_swig_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *copy = (char *)malloc(n);
  if (copy) memcpy(copy, s, n);
  return copy;
}
%}

%include <stdint.i>

#define PSTATE_API
%rename("%(strip:[pstate_])s", %$isfunction) "";

/* Not wrapped: the function table is for dlopen users (bindings link the library directly), and
 * pstate_bytes_free is called by the pstate_bytes_t typemaps. */
%ignore pstate_get_api;
%ignore pstate_api_t;
%ignore pstate_bytes_free;
%ignore pstate_bytes_t;

/* ---------------------------------------------------------------------------------------------
 * Parameter structs: constructors apply the C initializer macros; string members own a copy.
 * ------------------------------------------------------------------------------------------- */
%typemap(memberin) const char *init_method, const char *job_token, const char *socket_ifname {
  free((char *)$1);
  $1 = pstate_swig_strdup($input);
}
%immutable pstate_init_params_t::struct_size;
%immutable pstate_parallel_config_t::struct_size;
%immutable pstate_group_info_t::struct_size;
%immutable pstate_group_info_t::name;

%extend pstate_init_params_t {
  pstate_init_params_t() {
    static const pstate_init_params_t defaults = PSTATE_INIT_PARAMS_INIT;
    pstate_init_params_t *p = (pstate_init_params_t *)malloc(sizeof *p);
    if (p) *p = defaults;
    return p;
  }
  ~pstate_init_params_t() {
    free((char *)$self->init_method);
    free((char *)$self->job_token);
    free((char *)$self->socket_ifname);
    free($self);
  }
}
%extend pstate_parallel_config_t {
  pstate_parallel_config_t() {
    static const pstate_parallel_config_t defaults = PSTATE_PARALLEL_CONFIG_INIT;
    pstate_parallel_config_t *p = (pstate_parallel_config_t *)malloc(sizeof *p);
    if (p) *p = defaults;
    return p;
  }
  ~pstate_parallel_config_t() { free($self); }
}
%immutable pstate_mem_info_t::struct_size;
%immutable pstate_mem_stats_t::struct_size;
%extend pstate_mem_info_t {
  pstate_mem_info_t() {
    static const pstate_mem_info_t defaults = PSTATE_MEM_INFO_INIT;
    pstate_mem_info_t *p = (pstate_mem_info_t *)malloc(sizeof *p);
    if (p) *p = defaults;
    return p;
  }
  ~pstate_mem_info_t() { free($self); }
}
%extend pstate_mem_stats_t {
  pstate_mem_stats_t() {
    static const pstate_mem_stats_t defaults = PSTATE_MEM_STATS_INIT;
    pstate_mem_stats_t *p = (pstate_mem_stats_t *)malloc(sizeof *p);
    if (p) *p = defaults;
    return p;
  }
  ~pstate_mem_stats_t() { free($self); }
}
%extend pstate_group_info_t {
  pstate_group_info_t() {
    static const pstate_group_info_t defaults = PSTATE_GROUP_INFO_INIT;
    pstate_group_info_t *p = (pstate_group_info_t *)malloc(sizeof *p);
    if (p) *p = defaults;
    return p;
  }
  ~pstate_group_info_t() { free($self); }
}

/* ---------------------------------------------------------------------------------------------
 * Tensor dicts: the allocation callback of both languages, in C.
 *
 * The receiving calls (pstate_broadcast_tensor_dict on the ranks other than src,
 * pstate_recv_tensor_dict) ask a pstate_alloc_fn for each tensor's memory while they run: with
 * the GIL released in Python, on a cgo call's thread in Go. Neither runtime may be entered there
 * (no Python object without the GIL; no Go pointer kept by C, no Go memory handed back to C), so
 * the callback is this C collector: pstate_swig_dict_alloc records the tensor's name, dtype,
 * device and shape in a pstate_swig_dict and returns malloc'd memory for its bytes. After the
 * call the language side takes the tensors (Python: each block becomes, without a copy, the
 * buffer of a HostBuffer object that frees it, wrapped into a numpy array; Go: copied into Go
 * memory) and clears the dict, which frees whatever was not taken (also after a failed call).
 *
 * Host memory only: the bindings have no CUDA allocator, so a CUDA tensor gets no memory (NULL:
 * the call fails with NO_MEMORY on every rank, nothing is transferred); the dict remembers the
 * first such tensor so that the binding can name the reason (UNSUPPORTED).
 *
 * The typemaps below turn `(pstate_alloc_fn alloc, void *user)` into one argument: a
 * ReceivedDict (this collector) or None/nil (src of a broadcast needs none), and
 * `(const pstate_tensor_t *tensors, size_t count)` into the language's description of a dict.
 * ------------------------------------------------------------------------------------------- */
%{
/* One received tensor. Layout mirrored in the Go preamble (cgo_comment_typedefs) below. */
typedef struct pstate_swig_tensor {
  char *name;                            /* malloc'd copy */
  int dtype;                             /* pstate_dtype_t */
  int device;                            /* pstate_device_t */
  int ndim;                              /* 0..PSTATE_TENSOR_MAX_NDIM */
  int64_t shape[PSTATE_TENSOR_MAX_NDIM]; /* ndim extents */
  void *data;                            /* malloc'd, `bytes` long; NULL when bytes is 0 or taken */
  size_t bytes;
} pstate_swig_tensor;

/* The tensors of one receiving call, in dict order. */
typedef struct pstate_swig_dict {
  pstate_swig_tensor *items;
  size_t count;
  size_t capacity;
  char *cuda_tensor; /* malloc'd name of the first CUDA tensor offered (it got no memory), or NULL */
} pstate_swig_dict;

/* Frees every tensor still held (names, shapes, data not taken) and empties the dict. */
void pstate_swig_dict_clear(pstate_swig_dict *d) {
  if (!d) return;
  for (size_t i = 0; i < d->count; ++i) {
    free(d->items[i].name);
    free(d->items[i].data);
  }
  free(d->items);
  free(d->cuda_tensor);
  d->items = NULL;
  d->count = d->capacity = 0;
  d->cuda_tensor = NULL;
}

/* The pstate_alloc_fn of the bindings (user = a pstate_swig_dict). Plain C: it runs inside the
 * library call, without the GIL / on a cgo thread. NULL (the call then fails with NO_MEMORY)
 * when malloc fails or for a non-empty CUDA tensor; NULL is also the answer for 0 bytes. */
void *pstate_swig_dict_alloc(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                             size_t bytes, pstate_device_t device) {
  pstate_swig_dict *d = (pstate_swig_dict *)user;
  if (!d || ndim < 0 || ndim > PSTATE_TENSOR_MAX_NDIM) return NULL;
  if (device != PSTATE_DEVICE_CPU && bytes > 0) {
    if (!d->cuda_tensor) d->cuda_tensor = pstate_swig_strdup(name ? name : "");
    return NULL;
  }
  if (d->count == d->capacity) {
    size_t capacity = d->capacity ? 2 * d->capacity : 8;
    pstate_swig_tensor *items = (pstate_swig_tensor *)realloc(d->items, capacity * sizeof *items);
    if (!items) return NULL;
    d->items = items;
    d->capacity = capacity;
  }
  pstate_swig_tensor *t = &d->items[d->count];
  memset(t, 0, sizeof *t);
  t->name = pstate_swig_strdup(name ? name : "");
  t->data = bytes ? malloc(bytes) : NULL;
  if (!t->name || (bytes && !t->data)) {
    free(t->name);
    free(t->data);
    return NULL;
  }
  t->dtype = (int)dtype;
  t->device = (int)device;
  t->ndim = ndim;
  if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
  t->bytes = bytes;
  d->count++;
  return t->data;
}
%}

/* Handled by the typemaps: no wrappers of their own. */
%ignore pstate_tensor_t;
%ignore pstate_alloc_fn;
%ignore pstate_interrupt_fn;
%ignore pstate_hook_fn;
%ignore pstate_call_info_t; /* each binding builds its own CallInfo from it (the hook typemaps) */

/* =============================================================================================
 * Python
 * =========================================================================================== */
#ifdef SWIGPYTHON

%{
#include <stdarg.h>

/* Raises the pstate.Error subclass for status with this thread's pstate_last_error() text. The
 * mapping lives in Python (pstate/_errors.py: _raise_status) so that the classes, their
 * docstrings and their builtin bases are ordinary Python. Returns with a Python error set. */
static void pstate_py_raise_detail(pstate_status_t status, const char *detail) {
  PyObject *errors = PyImport_ImportModule("pstate._errors");
  if (!errors) return;
  PyObject *r = PyObject_CallMethod(errors, "_raise_status", "is", (int)status, detail ? detail : "");
  Py_XDECREF(r);
  Py_DECREF(errors);
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "pstate._errors._raise_status did not raise");
}
static void pstate_py_raise(pstate_status_t status) {
  pstate_py_raise_detail(status, pstate_last_error());
}
/* An argument the C call must not see: pstate.InvalidArgumentError with a formatted text. */
static void pstate_py_invalid(const char *format, ...) {
  va_list args;
  va_start(args, format);
  PyObject *text = PyUnicode_FromFormatV(format, args);
  va_end(args);
  if (!text) return;
  const char *utf8 = PyUnicode_AsUTF8(text);
  if (utf8) pstate_py_raise_detail(PSTATE_ERR_INVALID_ARGUMENT, utf8);
  Py_DECREF(text);
}

/* A buffer argument: None -> NULL, int -> that address (device memory), else the buffer
 * protocol, C-contiguous, writable when `writable`. The view stays held until freearg. */
static int pstate_py_buffer(PyObject *obj, Py_buffer *view, void **ptr, int writable) {
  view->obj = NULL;
  if (obj == Py_None) {
    *ptr = NULL;
    return 0;
  }
  if (PyLong_Check(obj)) {
    *ptr = PyLong_AsVoidPtr(obj);
    return PyErr_Occurred() ? -1 : 0;
  }
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, view, flags) != 0) {
    view->obj = NULL;
    return -1;
  }
  *ptr = view->buf;
  return 0;
}

/* An int (or None = 0) as a C pointer: streams and device addresses. */
static int pstate_py_address(PyObject *obj, void **ptr) {
  if (obj == Py_None) {
    *ptr = NULL;
    return 0;
  }
  if (!PyLong_Check(obj)) {
    PyErr_SetString(PyExc_TypeError, "expected an int address (cudaStream_t / device pointer) or None");
    return -1;
  }
  *ptr = PyLong_AsVoidPtr(obj);
  return PyErr_Occurred() ? -1 : 0;
}

/* A non-negative Python int as a capacity (number of elements the caller expects at most). */
static int pstate_py_capacity(PyObject *obj, size_t *capacity) {
  size_t v = PyLong_AsSize_t(obj);
  if (v == (size_t)-1 && PyErr_Occurred()) return -1;
  if (v > ((size_t)1 << 40)) {
    PyErr_SetString(PyExc_ValueError, "capacity too large");
    return -1;
  }
  *capacity = v;
  return 0;
}

/* The interrupt check pstate.init() installs on every PState (pstate_set_interrupt_check): runs
 * inside a blocked call, on its thread, while the GIL is released. It takes the GIL and lets
 * Python run its signal handlers (PyErr_CheckSignals: main thread only, a no-op elsewhere); when
 * one raised (SIGINT: KeyboardInterrupt) the exception stays pending on this thread, the wait
 * stops with PSTATE_ERR_INTERRUPTED and the status typemap raises that exception. */
static int pstate_py_interrupt_check(void *user) {
  (void)user;
  PyGILState_STATE gil = PyGILState_Ensure();
  int stop = PyErr_CheckSignals() != 0;
  PyGILState_Release(gil);
  return stop;
}

/* The pending exception of an interrupted call (a signal handler's) gets the library's text as a
 * note (pstate._errors._note_interrupt) and stays the one raised. */
static void pstate_py_note_interrupt(void) {
  PyObject *type = NULL, *value = NULL, *tb = NULL;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject *errors = PyImport_ImportModule("pstate._errors");
  if (errors) {
    PyObject *r = PyObject_CallMethod(errors, "_note_interrupt", "Os", value ? value : Py_None, pstate_last_error());
    Py_XDECREF(r);
    Py_DECREF(errors);
  }
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}
%}

/* ---- status: raise on failure, return None (plus any out-values) on success; an interrupted
 * call raises what the signal handler raised (KeyboardInterrupt) ---- */
%typemap(out) pstate_status_t {
  if ($1 != PSTATE_OK) {
    if ($1 == PSTATE_ERR_INTERRUPTED && PyErr_Occurred())
      pstate_py_note_interrupt();
    else
      pstate_py_raise($1);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* ---- the interrupt check: True installs pstate_py_interrupt_check, False/None removes it ---- */
%typemap(in) (pstate_interrupt_fn fn, void *user) {
  int on = PyObject_IsTrue($input);
  if (on < 0) SWIG_fail;
  $1 = on ? pstate_py_interrupt_check : NULL;
  $2 = NULL;
}

/* ---- hooks (pstate_add_hook): fn is a Python callable, called with one tuple (the fields of
 * pstate_call_info_t in its order, send as an int address) that returns a status int; the caller
 * (PState.add_hook) keeps the callable alive while it is registered. The GIL is taken for it: a
 * hook runs on the thread of the call, or of pstate_revoke, where the GIL is released. ---- */
%{
static pstate_status_t pstate_py_hook(void *user, const pstate_call_info_t *i) {
  PyGILState_STATE gil = PyGILState_Ensure();
  pstate_status_t status = PSTATE_OK;
  PyObject *info = Py_BuildValue("(iiKssKKiiiiKsLKKz)", (int)i->phase, (int)i->status, (unsigned long long)i->call_id,
                                 i->group, i->operation, (unsigned long long)i->seq, (unsigned long long)i->count,
                                 (int)i->dtype, (int)i->root, (int)i->peer, (int)i->on_device,
                                 (unsigned long long)i->bytes, i->path, (long long)i->duration_ns,
                                 (unsigned long long)(uintptr_t)i->send, (unsigned long long)i->send_bytes, i->message);
  PyObject *r = info ? PyObject_CallFunctionObjArgs((PyObject *)user, info, NULL) : NULL;
  if (r != NULL && PyLong_Check(r)) status = (pstate_status_t)PyLong_AsLong(r);
  if (PyErr_Occurred()) PyErr_WriteUnraisable((PyObject *)user);
  Py_XDECREF(r);
  Py_XDECREF(info);
  PyGILState_Release(gil);
  return status;
}
%}
%typemap(in) (pstate_hook_fn fn, void *user) {
  if (!PyCallable_Check($input)) {
    PyErr_SetString(PyExc_TypeError, "a hook must be callable");
    SWIG_fail;
  }
  $1 = pstate_py_hook;
  $2 = (void *)$input;
}
%typemap(in, numinputs=0) uint64_t *id (uint64_t value) {
  value = 0;
  $1 = &value;
}
%typemap(argout) uint64_t *id {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromUnsignedLongLong(value$argnum));
}
/* pstate_group_timeout's out: returned */
%typemap(in, numinputs=0) int64_t *timeout_ms (int64_t value) {
  value = 0;
  $1 = &value;
}
%typemap(argout) int64_t *timeout_ms {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromLongLong(value$argnum));
}

/* ---- buffers ---- */
%typemap(in) const void *send (Py_buffer view = {0}), const void *buf (Py_buffer view = {0}) {
  if (pstate_py_buffer($input, &view, (void **)&$1, 0) != 0) SWIG_fail;
}
%typemap(in) void *recv (Py_buffer view = {0}), void *buf (Py_buffer view = {0}) {
  if (pstate_py_buffer($input, &view, &$1, 1) != 0) SWIG_fail;
}
%typemap(freearg) const void *send, const void *buf, void *recv, void *buf {
  if (view$argnum.obj) PyBuffer_Release(&view$argnum);
}
/* Object payloads: any bytes-like object, read-only. */
%typemap(in) (const void *data, size_t size) (Py_buffer view = {0}) {
  view.obj = NULL;
  if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS) != 0) {
    view.obj = NULL;
    SWIG_fail;
  }
  $1 = view.buf;
  $2 = (size_t)view.len;
}
%typemap(freearg) (const void *data, size_t size) {
  if (view$argnum.obj) PyBuffer_Release(&view$argnum);
}

/* ---- addresses: streams as ints ---- */
%typemap(in) void *stream {
  if (pstate_py_address($input, &$1) != 0) SWIG_fail;
}
%typemap(in, numinputs=0) void **capture_stream (void *captured) {
  captured = NULL;
  $1 = &captured;
}
%typemap(argout) void **capture_stream {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromVoidPtr(captured$argnum));
}
/* ---- group memory (pstate_mem_*): device addresses as ints ---- */
%typemap(in) void *ptr {
  if (pstate_py_address($input, &$1) != 0) SWIG_fail;
}
%typemap(in) const void *ptr (void *address) {
  if (pstate_py_address($input, &address) != 0) SWIG_fail;
  $1 = address;
}
%typemap(in, numinputs=0) void **out (void *address) {
  address = NULL;
  $1 = &address;
}
%typemap(argout) void **out {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromVoidPtr(address$argnum));
}

/* ---- handles returned through **out ---- */
%typemap(in, numinputs=0) pstate_t **out (pstate_t *handle), pstate_group_t **out (pstate_group_t *handle),
                          pstate_layout_t **out (pstate_layout_t *handle) {
  handle = NULL;
  $1 = &handle;
}
%typemap(argout) pstate_t **out, pstate_group_t **out, pstate_layout_t **out {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(handle$argnum, $*1_descriptor, 0));
}

/* ---- counts and indices ---- */
%typemap(in, numinputs=0) size_t *count (size_t value), size_t *index (size_t value) {
  value = 0;
  $1 = &value;
}
%typemap(argout) size_t *count, size_t *index {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromSize_t(value$argnum));
}

/* ---- int arrays the caller sizes: Python passes the capacity, gets a list back ---- */
%typemap(in) (int *ranks, size_t capacity, size_t *count) (size_t filled) {
  filled = 0;
  if (pstate_py_capacity($input, &$2) != 0) SWIG_fail;
  $1 = (int *)calloc($2 ? $2 : 1, sizeof(int));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  $3 = &filled;
}
%typemap(in) (int *same_node, size_t capacity, size_t *count) (size_t filled) {
  filled = 0;
  if (pstate_py_capacity($input, &$2) != 0) SWIG_fail;
  $1 = (int *)calloc($2 ? $2 : 1, sizeof(int));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  $3 = &filled;
}
%typemap(in) (int *new_rank, size_t capacity, size_t *count) (size_t filled) {
  filled = 0;
  if (pstate_py_capacity($input, &$2) != 0) SWIG_fail;
  $1 = (int *)malloc(($2 ? $2 : 1) * sizeof(int));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  for (size_t i = 0; i < $2; ++i) $1[i] = -1;
  $3 = &filled;
}
%typemap(argout) (int *ranks, size_t capacity, size_t *count) {
  PyObject *list = PyList_New((Py_ssize_t)filled$argnum);
  if (!list) SWIG_fail;
  for (size_t i = 0; i < filled$argnum; ++i) PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromLong($1[i]));
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(argout) (int *same_node, size_t capacity, size_t *count) {
  PyObject *list = PyList_New((Py_ssize_t)filled$argnum);
  if (!list) SWIG_fail;
  for (size_t i = 0; i < filled$argnum; ++i) PyList_SET_ITEM(list, (Py_ssize_t)i, PyBool_FromLong($1[i]));
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(argout) (int *new_rank, size_t capacity, size_t *count) {
  PyObject *list = PyList_New((Py_ssize_t)filled$argnum);
  if (!list) SWIG_fail;
  for (size_t i = 0; i < filled$argnum; ++i) PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromLong($1[i]));
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(freearg) (int *ranks, size_t capacity, size_t *count), (int *same_node, size_t capacity, size_t *count),
                  (int *new_rank, size_t capacity, size_t *count) {
  free($1);
}

/* ---- object results: bytes, always released with pstate_bytes_free ---- */
%typemap(in, numinputs=0) pstate_bytes_t *out (pstate_bytes_t bytes = {0}) {
  bytes.data = NULL;
  bytes.size = 0;
  $1 = &bytes;
}
%typemap(argout) pstate_bytes_t *out {
  PyObject *b = PyBytes_FromStringAndSize((const char *)bytes$argnum.data, (Py_ssize_t)bytes$argnum.size);
  if (!b) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, b);
}
%typemap(freearg) pstate_bytes_t *out {
  pstate_bytes_free(&bytes$argnum);
}
%typemap(in) (size_t *sizes, size_t capacity, size_t *count) (size_t filled) {
  filled = 0;
  if (pstate_py_capacity($input, &$2) != 0) SWIG_fail;
  $1 = (size_t *)calloc($2 ? $2 : 1, sizeof(size_t));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  $3 = &filled;
}
%typemap(argout) (size_t *sizes, size_t capacity, size_t *count) {
  PyObject *list = PyList_New((Py_ssize_t)filled$argnum);
  if (!list) SWIG_fail;
  for (size_t i = 0; i < filled$argnum; ++i) PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromSize_t($1[i]));
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(freearg) (size_t *sizes, size_t capacity, size_t *count) {
  free($1);
}

/* ---- tensor dicts ----
 * In:  (tensors, count) is a sequence of (name: str, dtype: int, shape: sequence of int, data)
 *      tuples, data a C-contiguous buffer of exactly prod(shape) * dtype size bytes (None when
 *      that is 0), or None for no dict (receiving ranks). Names are copied and the buffers held
 *      until the call returns, so another thread changing the sequence cannot free them.
 * Out: (alloc, user) is a ReceivedDict (or None on src); after the call ReceivedDict.take()
 *      returns [(name, dtype, shape, HostBuffer or None, device), ...] in dict order. */
%{
/* HostBuffer: owns one malloc'd block received by pstate_swig_dict_alloc and exports it through
 * the buffer protocol (writable bytes), so numpy.frombuffer wraps it without a copy; the block
 * is freed when the last view of it goes. */
typedef struct pstate_py_host_buffer {
  PyObject_HEAD
  void *data;
  Py_ssize_t size;
} pstate_py_host_buffer;

static void pstate_py_host_buffer_dealloc(PyObject *self) {
  free(((pstate_py_host_buffer *)self)->data);
  Py_TYPE(self)->tp_free(self);
}

static int pstate_py_host_buffer_get(PyObject *self, Py_buffer *view, int flags) {
  pstate_py_host_buffer *b = (pstate_py_host_buffer *)self;
  return PyBuffer_FillInfo(view, self, b->data, b->size, 0, flags);
}

static PyBufferProcs pstate_py_host_buffer_procs = {pstate_py_host_buffer_get, NULL};

static PyTypeObject pstate_py_host_buffer_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pstate._capi.HostBuffer",
    .tp_basicsize = sizeof(pstate_py_host_buffer),
    .tp_dealloc = pstate_py_host_buffer_dealloc,
    .tp_as_buffer = &pstate_py_host_buffer_procs,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of one received tensor (malloc'd by the binding, freed with the last view).",
};

/* A HostBuffer that takes ownership of data (freed here on failure too). */
static PyObject *pstate_py_host_buffer_new(void *data, size_t size) {
  if (!(pstate_py_host_buffer_type.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&pstate_py_host_buffer_type) < 0) {
    free(data);
    return NULL;
  }
  pstate_py_host_buffer *b = PyObject_New(pstate_py_host_buffer, &pstate_py_host_buffer_type);
  if (!b) {
    free(data);
    return NULL;
  }
  b->data = data;
  b->size = (Py_ssize_t)size;
  return (PyObject *)b;
}

/* One received tensor as (name, dtype, shape, HostBuffer or None, device); its data moves into
 * the HostBuffer. */
static PyObject *pstate_py_received_tensor(pstate_swig_tensor *t) {
  PyObject *name = PyUnicode_DecodeUTF8(t->name, (Py_ssize_t)strlen(t->name), "surrogateescape");
  PyObject *shape = PyTuple_New(t->ndim);
  PyObject *owner = NULL;
  if (name && shape) {
    int ok = 1;
    for (int k = 0; k < t->ndim && ok; ++k) {
      PyObject *extent = PyLong_FromLongLong((long long)t->shape[k]);
      if (extent) PyTuple_SET_ITEM(shape, k, extent);
      else ok = 0;
    }
    if (ok && t->data) {
      owner = pstate_py_host_buffer_new(t->data, t->bytes);
      t->data = NULL;
    } else if (ok) {
      owner = Py_None;
      Py_INCREF(owner);
    }
  }
  PyObject *item = owner ? Py_BuildValue("(OiOOi)", name, t->dtype, shape, owner, t->device) : NULL;
  Py_XDECREF(name);
  Py_XDECREF(shape);
  Py_XDECREF(owner);
  return item;
}

/* ReceivedDict.take(): the received tensors as a list (GIL held: %nothread), then clear. */
static PyObject *pstate_py_dict_take(pstate_swig_dict *d) {
  PyObject *list = PyList_New((Py_ssize_t)d->count);
  for (size_t i = 0; list && i < d->count; ++i) {
    PyObject *item = pstate_py_received_tensor(&d->items[i]);
    if (!item) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, item);
  }
  pstate_swig_dict_clear(d);
  return list;
}

/* A tensor's size in bytes, prod(shape) * dtype size; *ok = 0 (and 0) for an unknown dtype, a
 * negative extent or an overflow. */
static size_t pstate_swig_tensor_bytes(int dtype, int ndim, const int64_t *shape, int *ok) {
  size_t n = pstate_dtype_size((pstate_dtype_t)dtype);
  *ok = n != 0;
  for (int i = 0; i < ndim && *ok; ++i) {
    if (shape[i] < 0 || (shape[i] > 0 && n > SIZE_MAX / (size_t)shape[i])) *ok = 0;
    else n *= (size_t)shape[i];
  }
  return *ok ? n : 0;
}

/* A dict to send, converted from Python: C arrays plus the buffer views held during the call. */
typedef struct pstate_py_dict_in {
  pstate_tensor_t *tensors;
  int64_t *shapes; /* count * PSTATE_TENSOR_MAX_NDIM */
  char **names;
  Py_buffer *views; /* views[i].obj != NULL: held */
  size_t count;     /* entries set so far (all freed by pstate_py_dict_in_free) */
} pstate_py_dict_in;

static void pstate_py_dict_in_free(pstate_py_dict_in *d) {
  for (size_t i = 0; i < d->count; ++i) {
    if (d->views[i].obj) PyBuffer_Release(&d->views[i]);
    free(d->names[i]);
  }
  free(d->tensors);
  free(d->shapes);
  free(d->names);
  free(d->views);
  memset(d, 0, sizeof *d);
}

/* Entry i of the dict from its (name, dtype, shape, data) tuple. */
static int pstate_py_dict_in_entry(pstate_py_dict_in *d, size_t i, PyObject *item) {
  static const pstate_tensor_t init = PSTATE_TENSOR_INIT;
  pstate_tensor_t *t = &d->tensors[i];
  *t = init; /* struct_size: the array's stride (pstate.h, struct arrays) */
  int64_t *shape = d->shapes + i * PSTATE_TENSOR_MAX_NDIM;
  if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
    pstate_py_invalid("tensors[%zu]: expected a (name, dtype, shape, data) tuple", i);
    return -1;
  }
  Py_ssize_t len = 0;
  const char *name = PyUnicode_Check(PyTuple_GET_ITEM(item, 0)) ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(item, 0), &len) : NULL;
  if (!name || (size_t)len != strlen(name)) {
    PyErr_Clear();
    pstate_py_invalid("tensors[%zu]: the name must be a str without NUL characters", i);
    return -1;
  }
  d->names[i] = pstate_swig_strdup(name);
  if (!d->names[i]) return PyErr_NoMemory(), -1;
  t->name = d->names[i];
  long dtype = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
  if (dtype == -1 && PyErr_Occurred()) return -1;
  t->dtype = (pstate_dtype_t)dtype;
  PyObject *dims = PySequence_Fast(PyTuple_GET_ITEM(item, 2), "shape must be a sequence of ints");
  if (!dims) return -1;
  Py_ssize_t ndim = PySequence_Fast_GET_SIZE(dims);
  if (ndim > PSTATE_TENSOR_MAX_NDIM) {
    Py_DECREF(dims);
    pstate_py_invalid("tensor '%s': %zd dimensions, at most %d", name, ndim, PSTATE_TENSOR_MAX_NDIM);
    return -1;
  }
  for (Py_ssize_t k = 0; k < ndim; ++k) {
    shape[k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(dims, k));
    if (shape[k] == -1 && PyErr_Occurred()) return Py_DECREF(dims), -1;
  }
  Py_DECREF(dims);
  t->ndim = (int)ndim;
  t->shape = shape;
  t->device = PSTATE_DEVICE_CPU;
  /* A size the library will refuse (bad dtype, negative extent, overflow) is left to it, so
   * that every rank fails with its message; no data is read then. */
  int ok = 0;
  size_t bytes = pstate_swig_tensor_bytes(t->dtype, t->ndim, shape, &ok);
  PyObject *data = PyTuple_GET_ITEM(item, 3);
  if (data == Py_None) {
    if (ok && bytes) {
      pstate_py_invalid("tensor '%s': data is None but the tensor has %zu bytes", name, bytes);
      return -1;
    }
    return 0;
  }
  if (PyObject_GetBuffer(data, &d->views[i], PyBUF_C_CONTIGUOUS) != 0) {
    d->views[i].obj = NULL;
    return -1;
  }
  if (ok && (size_t)d->views[i].len != bytes) {
    pstate_py_invalid("tensor '%s': the buffer holds %zd bytes, its dtype and shape need %zu", name, d->views[i].len,
                      bytes);
    return -1;
  }
  t->data = d->views[i].buf;
  return 0;
}

/* The whole dict; None is an empty one. -1 with a Python error set. */
static int pstate_py_dict_in_fill(PyObject *obj, pstate_py_dict_in *d) {
  if (obj == Py_None) return 0;
  PyObject *seq = PySequence_Fast(obj, "tensors: expected a sequence of (name, dtype, shape, data) tuples or None");
  if (!seq) return -1;
  size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
  size_t slots = n ? n : 1;
  d->tensors = (pstate_tensor_t *)calloc(slots, sizeof *d->tensors);
  d->shapes = (int64_t *)calloc(slots * PSTATE_TENSOR_MAX_NDIM, sizeof *d->shapes);
  d->names = (char **)calloc(slots, sizeof *d->names);
  d->views = (Py_buffer *)calloc(slots, sizeof *d->views);
  if (!d->tensors || !d->shapes || !d->names || !d->views) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; ++i) {
    d->count = i + 1;
    rc = pstate_py_dict_in_entry(d, i, PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i));
  }
  Py_DECREF(seq);
  return rc;
}
%}

%typemap(in) (const pstate_tensor_t *tensors, size_t count) (pstate_py_dict_in dict = {0}) {
  if (pstate_py_dict_in_fill($input, &dict) != 0) SWIG_fail;
  $1 = dict.tensors;
  $2 = dict.count;
}
%typemap(freearg) (const pstate_tensor_t *tensors, size_t count) {
  pstate_py_dict_in_free(&dict$argnum);
}
%typemap(in) (pstate_alloc_fn alloc, void *user) {
  $1 = NULL;
  $2 = NULL;
  if ($input != Py_None) {
    if (!SWIG_IsOK(SWIG_ConvertPtr($input, &$2, $descriptor(pstate_swig_dict *), 0))) {
      PyErr_SetString(PyExc_TypeError, "expected a pstate.capi.ReceivedDict or None");
      SWIG_fail;
    }
    $1 = pstate_swig_dict_alloc;
  }
}

/* ---- variable counts (all_gatherv, reduce_scatterv): any sequence of non-negative ints, copied
 * into a size_t array for the call (None passes NULL, which the library refuses). The idiomatic
 * layer checks that it has world_size entries: the library reads that many. ---- */
%{
static int pstate_py_sizes(PyObject *obj, size_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (obj == Py_None) return 0;
  PyObject *seq = PySequence_Fast(obj, "counts: expected a sequence of ints");
  if (!seq) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
  size_t *a = (size_t *)calloc(len ? (size_t)len : 1, sizeof *a);
  if (!a) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; ++i) {
    size_t v = PyLong_AsSize_t(PySequence_Fast_GET_ITEM(seq, i));
    if (v == (size_t)-1 && PyErr_Occurred()) {
      free(a);
      Py_DECREF(seq);
      return -1;
    }
    a[i] = v;
  }
  Py_DECREF(seq);
  *out = a;
  *n = (size_t)len;
  return 0;
}
%}
%typemap(in) const size_t *counts (size_t *array = NULL, size_t filled = 0) {
  if (pstate_py_sizes($input, &array, &filled) != 0) SWIG_fail;
  $1 = array;
}
%typemap(freearg) const size_t *counts {
  free(array$argnum);
}
/* all_to_all_v's four arrays (counts and displacements, one entry per group rank) likewise. */
%apply const size_t *counts { const size_t *send_counts, const size_t *send_displs, const size_t *recv_counts,
                              const size_t *recv_displs };

/* ---- custom groups: (ranks, count) from any sequence of ints ---- */
%typemap(in) (const int *ranks, size_t count) (int *array = NULL) {
  PyObject *seq = PySequence_Fast($input, "ranks: expected a sequence of ints");
  if (!seq) SWIG_fail;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
  array = (int *)calloc(len ? (size_t)len : 1, sizeof(int));
  if (!array) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    SWIG_fail;
  }
  for (Py_ssize_t i = 0; i < len; ++i) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
    if ((v == -1 && PyErr_Occurred()) || v < INT_MIN || v > INT_MAX) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "rank out of range");
      Py_DECREF(seq);
      SWIG_fail;
    }
    array[i] = (int)v;
  }
  Py_DECREF(seq);
  $1 = array;
  $2 = (size_t)len;
}
%typemap(freearg) (const int *ranks, size_t count) {
  free(array$argnum);
}

/* ---- requests: returned as opaque handles; pstate_test's *done as a bool ---- */
%typemap(in, numinputs=0) pstate_request_t **req (pstate_request_t *handle) {
  handle = NULL;
  $1 = &handle;
}
%typemap(argout) pstate_request_t **req {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(handle$argnum, $*1_descriptor, 0));
}
%typemap(in, numinputs=0) int *done (int flag) {
  flag = 0;
  $1 = &flag;
}
%typemap(argout) int *done {
  $result = SWIG_Python_AppendOutput($result, PyBool_FromLong(flag$argnum));
}

/* ---- p2p batches: (ops, n) from a sequence of (is_send, buffer, count, dtype, peer) tuples; the
 * buffers (writable for receives) are held until the call returns ---- */
%{
typedef struct pstate_py_ops_in {
  pstate_p2p_op_t *ops;
  Py_buffer *views;
  size_t count;
} pstate_py_ops_in;

static void pstate_py_ops_in_free(pstate_py_ops_in *d) {
  for (size_t i = 0; i < d->count; ++i)
    if (d->views[i].obj) PyBuffer_Release(&d->views[i]);
  free(d->ops);
  free(d->views);
  memset(d, 0, sizeof *d);
}

static int pstate_py_ops_in_fill(PyObject *obj, pstate_py_ops_in *d) {
  static const pstate_p2p_op_t init = PSTATE_P2P_OP_INIT;
  PyObject *seq = PySequence_Fast(obj, "ops: expected a sequence of (is_send, buffer, count, dtype, peer) tuples");
  if (!seq) return -1;
  size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
  d->ops = (pstate_p2p_op_t *)calloc(n ? n : 1, sizeof *d->ops);
  d->views = (Py_buffer *)calloc(n ? n : 1, sizeof *d->views);
  if (!d->ops || !d->views) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; ++i) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
    pstate_p2p_op_t *op = &d->ops[i];
    *op = init;
    d->count = i + 1;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5) {
      pstate_py_invalid("ops[%zu]: expected an (is_send, buffer, count, dtype, peer) tuple", i);
      rc = -1;
      break;
    }
    int is_send = PyObject_IsTrue(PyTuple_GET_ITEM(item, 0));
    size_t count = PyLong_AsSize_t(PyTuple_GET_ITEM(item, 2));
    long dtype = PyLong_AsLong(PyTuple_GET_ITEM(item, 3));
    long peer = PyLong_AsLong(PyTuple_GET_ITEM(item, 4));
    if (is_send < 0 || PyErr_Occurred()) {
      rc = -1;
      break;
    }
    if (pstate_py_buffer(PyTuple_GET_ITEM(item, 1), &d->views[i], &op->buf, !is_send) != 0) {
      rc = -1;
      break;
    }
    op->is_send = is_send;
    op->count = count;
    op->dtype = (pstate_dtype_t)dtype;
    op->peer = (int)peer;
  }
  Py_DECREF(seq);
  return rc;
}
%}
%typemap(in) (const pstate_p2p_op_t *ops, size_t n) (pstate_py_ops_in batch = {0}) {
  if (pstate_py_ops_in_fill($input, &batch) != 0) SWIG_fail;
  $1 = batch.ops;
  $2 = batch.count;
}
%typemap(freearg) (const pstate_p2p_op_t *ops, size_t n) {
  pstate_py_ops_in_free(&batch$argnum);
}
%ignore pstate_p2p_op_t;

/* The collector, as Python sees it: ReceivedDict() / take() / cuda_tensor(). */
%rename(ReceivedDict) pstate_swig_dict;
%nothread pstate_swig_dict::take;
%nothread pstate_swig_dict::cuda_tensor;
typedef struct pstate_swig_dict {
} pstate_swig_dict;
%extend pstate_swig_dict {
  pstate_swig_dict() { return (pstate_swig_dict *)calloc(1, sizeof(pstate_swig_dict)); }
  ~pstate_swig_dict() {
    pstate_swig_dict_clear($self);
    free($self);
  }
  /** [(name, dtype, shape, HostBuffer or None, device), ...] in dict order; empties the dict. */
  PyObject *take() { return pstate_py_dict_take($self); }
  /** The name of the first CUDA tensor offered (the binding gave it no memory), or None. */
  const char *cuda_tensor() { return $self->cuda_tensor; }
}

#endif /* SWIGPYTHON */

/* =============================================================================================
 * Go
 * =========================================================================================== */
#ifdef SWIGGO

%insert(cgo_comment_typedefs) %{
#include <stdlib.h>
#include "pstate/pstate.h"
// A failed call: its status and a malloc'd copy of pstate_last_error() (one block).
typedef struct pstate_go_failure {
  int status;
  char *message;
} pstate_go_failure;
%}

%{
typedef struct pstate_go_failure {
  int status;
  char *message;
} pstate_go_failure;

/* NULL for PSTATE_OK, else the status and this thread's detail text in one malloc'd block
 * (the Go side frees it). Copying here, in the wrapper, keeps the thread-local text intact. */
static void *pstate_go_failure_new(pstate_status_t status) {
  if (status == PSTATE_OK) return NULL;
  const char *detail = pstate_last_error();
  if (!detail) detail = "";
  size_t n = strlen(detail) + 1;
  pstate_go_failure *f = (pstate_go_failure *)malloc(sizeof *f + n);
  if (!f) abort(); /* cannot report an error without memory */
  f->status = (int)status;
  f->message = (char *)(f + 1);
  memcpy(f->message, detail, n);
  return f;
}
%}

%insert(go_wrapper) %{
// StatusError is a failed pstate call: the pstate_status_t number and the text that
// pstate_last_error() returned right after it, on the same thread.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string { return e.Message }

// swigPstateFailure turns the wrapper's result into an error. The C side returns the address of
// a malloc'd pstate_go_failure as an integer (SWIG gives an enum-typed function an integer C
// result); it is C memory, read and freed here.
func swigPstateFailure(addr int64) error {
	if addr == 0 {
		return nil
	}
	f := *(**C.pstate_go_failure)(unsafe.Pointer(&addr))
	err := &StatusError{Status: int(f.status), Message: C.GoString(f.message)}
	C.free(unsafe.Pointer(f))
	return err
}

%}

/* ---- status results: an error value (nil for PSTATE_OK) ---- */
%typemap(gotype) pstate_status_t "error"
%typemap(imtype) pstate_status_t "int64"
%typemap(out) pstate_status_t %{ $result = (intgo)(intptr_t)pstate_go_failure_new($1); %}
%typemap(goout) pstate_status_t %{ $result = swigPstateFailure($1) %}
/* ... but a status passed in (pstate_status_string) and the enums are plain ints */
%typemap(gotype) pstate_status_t s, pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t, pstate_engine_t "int"
%typemap(imtype) pstate_status_t s, pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t, pstate_engine_t "int"
%typemap(in) pstate_status_t s, pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t, pstate_engine_t %{ $1 = ($1_ltype)$input; %}
%typemap(out) pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t, pstate_engine_t %{ $result = (intgo)$1; %}
%typemap(goout) pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t, pstate_engine_t ""

/* ---- C strings returned (static names, last_error, group names): the C side hands Go a view
 * of the C text and the Go side copies it at once with strings.Clone (SWIG's default copy
 * converts a uintptr, which go vet's unsafeptr check rejects). The idiomatic layer never reads
 * Last_error from Go: failures arrive with their text through the status typemap above. ---- */
%go_import("strings")
%typemap(out) const char *, char [ANY] %{
  $result.p = (char *)$1;
  $result.n = $1 ? (intgo)strlen((const char *)$1) : 0;
%}
%typemap(goout) const char *, char [ANY] %{ $result = strings.Clone($1) %}

/* ---- handles: uintptr in the raw layer; the idiomatic package types them ---- */
%typemap(gotype) pstate_t *, const pstate_t *, pstate_group_t *, const pstate_group_t *,
                 pstate_layout_t *, const pstate_layout_t * "uintptr"
%typemap(imtype) pstate_t *, const pstate_t *, pstate_group_t *, const pstate_group_t *,
                 pstate_layout_t *, const pstate_layout_t * "uintptr"
%typemap(in) pstate_t *, const pstate_t *, pstate_group_t *, const pstate_group_t *,
             pstate_layout_t *, const pstate_layout_t * %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) pstate_t **out, pstate_group_t **out, pstate_layout_t **out "*uintptr"
%typemap(imtype) pstate_t **out, pstate_group_t **out, pstate_layout_t **out "*uintptr"
%typemap(in) pstate_t **out, pstate_group_t **out, pstate_layout_t **out %{ $1 = ($1_ltype)$input; %}

/* ---- buffers: unsafe.Pointer, so cgo sees (and checks) Go memory passed to C ---- */
%typemap(gotype) const void *send, void *recv, void *buf, const void *buf "unsafe.Pointer"
%typemap(imtype) const void *send, void *recv, void *buf, const void *buf "unsafe.Pointer"
%typemap(in) const void *send, void *recv, void *buf, const void *buf %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) (const void *data, size_t size) "[]byte"
%typemap(in) (const void *data, size_t size) %{
  $1 = $input.array;
  $2 = (size_t)$input.len;
%}

/* ---- out-values written by C into Go memory (no Go pointers inside) ---- */
%typemap(gotype) size_t *count, size_t *index "*uint64"
%typemap(imtype) size_t *count, size_t *index "*uint64"
%typemap(in) size_t *count, size_t *index %{ $1 = (size_t *)$input; %}
%typemap(gotype) void **capture_stream, void **out "*uintptr"
%typemap(imtype) void **capture_stream, void **out "*uintptr"
%typemap(in) void **capture_stream, void **out %{ $1 = (void **)$input; %}
/* ---- group memory (pstate_mem_*): device addresses, never Go memory ---- */
%typemap(gotype) void *ptr, const void *ptr "uintptr"
%typemap(imtype) void *ptr, const void *ptr "uintptr"
%typemap(in) void *ptr, const void *ptr %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) (int *ranks, size_t capacity), (int *same_node, size_t capacity), (int *new_rank, size_t capacity) "[]int32"
%typemap(in) (int *ranks, size_t capacity), (int *same_node, size_t capacity), (int *new_rank, size_t capacity) %{
  $1 = (int *)$input.array;
  $2 = (size_t)$input.len;
%}
%typemap(gotype) (size_t *sizes, size_t capacity) "[]uint64"
%typemap(in) (size_t *sizes, size_t capacity) %{
  $1 = (size_t *)$input.array;
  $2 = (size_t)$input.len;
%}

/* ---- the interrupt check: a flag in C memory (Go memory may not be kept by C) that
 * PState.Interrupt raises from any goroutine; Set_interrupt_check(h, flag) installs the check
 * that reads it (flag 0 removes it) ---- */
%insert(cgo_comment_typedefs) %{
// The interrupt flag of a PState (see pstate_go_interrupt_check in pstate.i).
uintptr_t pstate_go_flag_new(void);
void pstate_go_flag_raise(uintptr_t flag);
void pstate_go_flag_free(uintptr_t flag);
%}
%{
static int pstate_go_interrupt_check(void *flag) { return __atomic_load_n((int *)flag, __ATOMIC_ACQUIRE); }
uintptr_t pstate_go_flag_new(void) { return (uintptr_t)calloc(1, sizeof(int)); }
void pstate_go_flag_raise(uintptr_t flag) {
  if (flag) __atomic_store_n((int *)flag, 1, __ATOMIC_RELEASE);
}
void pstate_go_flag_free(uintptr_t flag) { free((void *)flag); }
%}
%insert(go_wrapper) %{
// NewInterruptFlag allocates a lowered interrupt flag in C memory (0 when out of memory).
func NewInterruptFlag() uintptr { return uintptr(C.pstate_go_flag_new()) }

// RaiseInterruptFlag raises it: the next check of a wait on the context that reads it stops
// the wait (PSTATE_ERR_INTERRUPTED). Safe from any goroutine.
func RaiseInterruptFlag(flag uintptr) { C.pstate_go_flag_raise(C.uintptr_t(flag)) }

// FreeInterruptFlag releases it (after the context that reads it is freed).
func FreeInterruptFlag(flag uintptr) { C.pstate_go_flag_free(C.uintptr_t(flag)) }
%}
%typemap(gotype) (pstate_interrupt_fn fn, void *user) "uintptr"
%typemap(imtype) (pstate_interrupt_fn fn, void *user) "uintptr"
%typemap(in) (pstate_interrupt_fn fn, void *user) %{
  $1 = $input ? pstate_go_interrupt_check : NULL;
  $2 = (void *)(uintptr_t)$input; /* the flag */
%}

/* ---- object results: a Go-side pstate_bytes_t that C fills; Take copies and frees ---- */
%insert(go_wrapper) %{
// Bytes receives an object result; Take copies it into Go memory and frees the C copy.
type Bytes C.pstate_bytes_t

func (b *Bytes) Take() []byte {
	if b.data == nil {
		return []byte{}
	}
	out := C.GoBytes(b.data, C.int(b.size))
	C.pstate_bytes_free((*C.pstate_bytes_t)(b))
	return out
}
%}
%typemap(gotype) pstate_bytes_t *out "*Bytes"
%typemap(imtype) pstate_bytes_t *out "unsafe.Pointer"
%typemap(goin) pstate_bytes_t *out %{ $result = unsafe.Pointer($input) %}
%typemap(in) pstate_bytes_t *out %{ $1 = (pstate_bytes_t *)$input; %}

/* ---- tensor dicts ----
 * Go memory may not hold the data pointers of a pstate_tensor_t array that C reads (Go 1.19
 * cannot pin, and cgo forbids Go pointers stored in memory passed to C), so a dict to send is
 * built in C memory: a TensorArray (names, shapes and data copied in; Go's Tensor data is copied
 * once). A receiving call takes a ReceivedDict, the C collector of the common section; Take
 * copies its tensors into Go memory and frees the C copies. No Go pointer is kept by C: the only
 * Go memory C sees is the argument of pstate_swig_tensors_set, copied during that call. */
%insert(cgo_comment_typedefs) %{
// Tensor dicts. The two collector structs mirror those of pstate.i's common C section, which
// defines them for the wrapper: keep both in step.
typedef struct pstate_swig_tensor {
  char *name;
  int dtype;
  int device;
  int ndim;
  int64_t shape[PSTATE_TENSOR_MAX_NDIM];
  void *data;
  size_t bytes;
} pstate_swig_tensor;
typedef struct pstate_swig_dict {
  pstate_swig_tensor *items;
  size_t count;
  size_t capacity;
  char *cuda_tensor;
} pstate_swig_dict;
void pstate_swig_dict_clear(pstate_swig_dict *d);
// A dict to send, in C memory (see pstate_swig_tensors_new in pstate.i).
typedef struct pstate_swig_tensors pstate_swig_tensors;
pstate_swig_tensors *pstate_swig_tensors_new(size_t count);
int pstate_swig_tensors_set(pstate_swig_tensors *a, size_t i, const char *name, size_t name_len, int dtype, int ndim,
                            const int64_t *shape, const void *data, size_t bytes);
void pstate_swig_tensors_free(pstate_swig_tensors *a);
%}

%{
/* A dict to send, in C memory: count tensors, each name, shape and data owned here. */
typedef struct pstate_swig_tensors {
  pstate_tensor_t *tensors;
  int64_t *shapes; /* count * PSTATE_TENSOR_MAX_NDIM */
  size_t count;
} pstate_swig_tensors;

/* NULL when out of memory. Entries start as empty float32 scalars without a name. */
pstate_swig_tensors *pstate_swig_tensors_new(size_t count) {
  pstate_swig_tensors *a = (pstate_swig_tensors *)calloc(1, sizeof *a);
  if (!a) return NULL;
  size_t slots = count ? count : 1;
  a->tensors = (pstate_tensor_t *)calloc(slots, sizeof *a->tensors);
  a->shapes = (int64_t *)calloc(slots * PSTATE_TENSOR_MAX_NDIM, sizeof *a->shapes);
  if (!a->tensors || !a->shapes) {
    free(a->tensors);
    free(a->shapes);
    free(a);
    return NULL;
  }
  static const pstate_tensor_t init = PSTATE_TENSOR_INIT; /* struct_size: the array's stride */
  for (size_t i = 0; i < slots; ++i) a->tensors[i] = init;
  a->count = count;
  return a;
}

/* Entry i: copies name (name_len bytes), shape (ndim, at most PSTATE_TENSOR_MAX_NDIM) and data
 * (bytes) into C memory; the caller's memory is not kept. 0, or -1 out of memory/range. */
int pstate_swig_tensors_set(pstate_swig_tensors *a, size_t i, const char *name, size_t name_len, int dtype, int ndim,
                            const int64_t *shape, const void *data, size_t bytes) {
  if (!a || i >= a->count || ndim < 0 || ndim > PSTATE_TENSOR_MAX_NDIM) return -1;
  pstate_tensor_t *t = &a->tensors[i];
  char *copy = (char *)malloc(name_len + 1);
  void *payload = bytes ? malloc(bytes) : NULL;
  if (!copy || (bytes && !payload)) {
    free(copy);
    free(payload);
    return -1;
  }
  if (name_len) memcpy(copy, name, name_len);
  copy[name_len] = '\0';
  if (bytes) memcpy(payload, data, bytes);
  int64_t *dims = a->shapes + i * PSTATE_TENSOR_MAX_NDIM;
  if (ndim) memcpy(dims, shape, (size_t)ndim * sizeof *dims);
  free((char *)t->name);
  free((void *)t->data);
  t->name = copy;
  t->dtype = (pstate_dtype_t)dtype;
  t->ndim = ndim;
  t->shape = dims;
  t->data = payload;
  t->device = PSTATE_DEVICE_CPU;
  return 0;
}

void pstate_swig_tensors_free(pstate_swig_tensors *a) {
  if (!a) return;
  for (size_t i = 0; i < a->count; ++i) {
    free((char *)a->tensors[i].name);
    free((void *)a->tensors[i].data);
  }
  free(a->tensors);
  free(a->shapes);
  free(a);
}
%}

%insert(go_wrapper) %{
// TensorArray is a tensor dict to send, held in C memory (cgo forbids C reading Go pointers out
// of Go memory). Set copies each tensor in; Free releases it. The zero count is an empty dict.
type TensorArray struct {
	c *C.pstate_swig_tensors
	n int
}

// NewTensorArray makes room for n tensors; nil when C memory is exhausted.
func NewTensorArray(n int) *TensorArray {
	c := C.pstate_swig_tensors_new(C.size_t(n))
	if c == nil {
		return nil
	}
	return &TensorArray{c: c, n: n}
}

// Set copies tensor i in: its name, dtype, shape and bytes (row-major). False when out of memory
// or i/len(shape) out of range. The caller checks len(data) against shape and dtype.
func (a *TensorArray) Set(i int, name string, dtype int, shape []int64, data []byte) bool {
	if i < 0 || i >= a.n {
		return false
	}
	nameBytes := []byte(name)
	var namePtr *C.char
	if len(nameBytes) > 0 {
		namePtr = (*C.char)(unsafe.Pointer(&nameBytes[0]))
	}
	var shapePtr *C.int64_t
	if len(shape) > 0 {
		shapePtr = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	var dataPtr unsafe.Pointer
	if len(data) > 0 {
		dataPtr = unsafe.Pointer(&data[0])
	}
	rc := C.pstate_swig_tensors_set(a.c, C.size_t(i), namePtr, C.size_t(len(nameBytes)), C.int(dtype), C.int(len(shape)),
		shapePtr, dataPtr, C.size_t(len(data)))
	return rc == 0
}

// Free releases the C copies (idempotent).
func (a *TensorArray) Free() {
	if a != nil && a.c != nil {
		C.pstate_swig_tensors_free(a.c)
		a.c = nil
	}
}

func (a *TensorArray) addr() uintptr {
	if a == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(a.c))
}

// ReceivedDict is the C allocation callback's collector for one receiving call: the library
// asks it for each tensor's memory (malloc'd in C) while the call runs.
type ReceivedDict struct{ c *C.pstate_swig_dict }

// NewReceivedDict returns an empty collector; nil when C memory is exhausted.
func NewReceivedDict() *ReceivedDict {
	c := (*C.pstate_swig_dict)(C.calloc(1, C.sizeof_pstate_swig_dict))
	if c == nil {
		return nil
	}
	return &ReceivedDict{c: c}
}

// ReceivedTensor is one received tensor, in Go memory.
type ReceivedTensor struct {
	Name   string
	DType  int
	Device int
	Shape  []int64
	Data   []byte
}

// Take copies the collected tensors into Go memory, in dict order, and empties the collector.
func (d *ReceivedDict) Take() []ReceivedTensor {
	items := unsafe.Slice(d.c.items, int(d.c.count))
	out := make([]ReceivedTensor, len(items))
	for i := range items {
		t := &items[i]
		shape := make([]int64, int(t.ndim))
		for k := range shape {
			shape[k] = int64(t.shape[k])
		}
		data := make([]byte, int(t.bytes))
		if t.bytes > 0 {
			copy(data, unsafe.Slice((*byte)(t.data), int(t.bytes)))
		}
		out[i] = ReceivedTensor{Name: C.GoString(t.name), DType: int(t.dtype), Device: int(t.device), Shape: shape, Data: data}
	}
	C.pstate_swig_dict_clear(d.c)
	return out
}

// CUDATensor is the name of the first CUDA tensor offered to the collector (it got no memory:
// the bindings allocate host memory only), or "".
func (d *ReceivedDict) CUDATensor() string {
	if d.c.cuda_tensor == nil {
		return ""
	}
	return C.GoString(d.c.cuda_tensor)
}

// Free releases the collector and any tensor not taken (idempotent).
func (d *ReceivedDict) Free() {
	if d != nil && d.c != nil {
		C.pstate_swig_dict_clear(d.c)
		C.free(unsafe.Pointer(d.c))
		d.c = nil
	}
}

func (d *ReceivedDict) addr() uintptr {
	if d == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(d.c))
}
%}

%typemap(gotype) (const pstate_tensor_t *tensors, size_t count) "*TensorArray"
%typemap(imtype) (const pstate_tensor_t *tensors, size_t count) "uintptr"
%typemap(goin) (const pstate_tensor_t *tensors, size_t count) %{ $result = $input.addr() %}
%typemap(in) (const pstate_tensor_t *tensors, size_t count) %{
  $1 = $input ? ((pstate_swig_tensors *)$input)->tensors : NULL;
  $2 = $input ? ((pstate_swig_tensors *)$input)->count : 0;
%}
%typemap(gotype) (pstate_alloc_fn alloc, void *user) "*ReceivedDict"
%typemap(imtype) (pstate_alloc_fn alloc, void *user) "uintptr"
%typemap(goin) (pstate_alloc_fn alloc, void *user) %{ $result = $input.addr() %}
%typemap(in) (pstate_alloc_fn alloc, void *user) %{
  $1 = $input ? pstate_swig_dict_alloc : NULL;
  $2 = (void *)(uintptr_t)$input; /* the collector (SWIG types the parameter as the first one) */
%}

/* ---- variable counts: []uint64 (Go memory without pointers, read during the call) ---- */
%typemap(gotype) const size_t *counts "[]uint64"
%typemap(imtype) const size_t *counts "[]uint64"
%typemap(in) const size_t *counts %{ $1 = (size_t *)$input.array; %}
/* all_to_all_v's four arrays likewise. */
%apply const size_t *counts { const size_t *send_counts, const size_t *send_displs, const size_t *recv_counts,
                              const size_t *recv_displs };

/* ---- custom groups: the ranks as []int32 ---- */
%typemap(gotype) (const int *ranks, size_t count) "[]int32"
%typemap(in) (const int *ranks, size_t count) %{
  $1 = ($1_ltype)$input.array;
  $2 = (size_t)$input.len;
%}

/* ---- requests: uintptr handles; pstate_test's *done in Go memory ---- */
%typemap(gotype) pstate_request_t * "uintptr"
%typemap(imtype) pstate_request_t * "uintptr"
%typemap(in) pstate_request_t * %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) pstate_request_t **req "*uintptr"
%typemap(imtype) pstate_request_t **req "*uintptr"
%typemap(in) pstate_request_t **req %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) int *done "*int32"
%typemap(imtype) int *done "*int32"
%typemap(in) int *done %{ $1 = (int *)$input; %}

/* ---- C memory for the non-blocking and batched calls: C keeps a pending request's buffer after
 * the call returns and a batch's op array holds buffer pointers, and cgo lets C keep neither Go
 * memory nor Go pointers stored in memory, so the idiomatic layer stages those buffers in C
 * memory (CAlloc) and builds a batch's ops there (P2POps) ---- */
%ignore pstate_p2p_op_t;
%insert(cgo_comment_typedefs) %{
// Staging memory and p2p batches (see pstate_go_ops_new in pstate.i).
void *pstate_go_alloc(size_t n);
void pstate_go_free(void *p);
typedef struct pstate_go_ops pstate_go_ops;
pstate_go_ops *pstate_go_ops_new(size_t n);
void pstate_go_ops_set(pstate_go_ops *o, size_t i, int is_send, void *buf, size_t count, int dtype, int peer);
void pstate_go_ops_free(pstate_go_ops *o);
%}
%{
/* Zeroed C memory for at least one byte (NULL when out of memory). */
void *pstate_go_alloc(size_t n) { return calloc(n ? n : 1, 1); }
void pstate_go_free(void *p) { free(p); }
/* The op array of one batch: n ops from PSTATE_P2P_OP_INIT (NULL when out of memory). */
typedef struct pstate_go_ops {
  pstate_p2p_op_t *ops;
  size_t n;
} pstate_go_ops;
pstate_go_ops *pstate_go_ops_new(size_t n) {
  static const pstate_p2p_op_t init = PSTATE_P2P_OP_INIT;
  pstate_go_ops *o = (pstate_go_ops *)calloc(1, sizeof *o);
  if (!o) return NULL;
  o->ops = (pstate_p2p_op_t *)calloc(n ? n : 1, sizeof *o->ops);
  if (!o->ops) {
    free(o);
    return NULL;
  }
  for (size_t i = 0; i < n; ++i) o->ops[i] = init;
  o->n = n;
  return o;
}
void pstate_go_ops_set(pstate_go_ops *o, size_t i, int is_send, void *buf, size_t count, int dtype, int peer) {
  if (!o || i >= o->n) return;
  o->ops[i].is_send = is_send;
  o->ops[i].buf = buf;
  o->ops[i].count = count;
  o->ops[i].dtype = (pstate_dtype_t)dtype;
  o->ops[i].peer = peer;
}
void pstate_go_ops_free(pstate_go_ops *o) {
  if (!o) return;
  free(o->ops);
  free(o);
}
%}
%insert(go_wrapper) %{
// CAlloc returns n zeroed bytes of C memory (nil when out of memory); free them with CFree.
func CAlloc(n int) unsafe.Pointer { return C.pstate_go_alloc(C.size_t(n)) }

// CFree releases memory from CAlloc (nil is fine).
func CFree(p unsafe.Pointer) { C.pstate_go_free(p) }

// P2POps is the op array of one pstate_p2p_batch, in C memory; its buffers must be C memory too.
type P2POps struct {
	c *C.pstate_go_ops
	n int
}

// NewP2POps makes n ops (PSTATE_P2P_OP_INIT); nil when out of memory.
func NewP2POps(n int) *P2POps {
	c := C.pstate_go_ops_new(C.size_t(n))
	if c == nil {
		return nil
	}
	return &P2POps{c: c, n: n}
}

// Set fills op i; buf must be C memory (CAlloc) or a device address.
func (o *P2POps) Set(i int, isSend bool, buf unsafe.Pointer, count int, dtype int, peer int) {
	send := C.int(0)
	if isSend {
		send = 1
	}
	C.pstate_go_ops_set(o.c, C.size_t(i), send, buf, C.size_t(count), C.int(dtype), C.int(peer))
}

// Free releases the array (idempotent).
func (o *P2POps) Free() {
	if o != nil && o.c != nil {
		C.pstate_go_ops_free(o.c)
		o.c = nil
	}
}

func (o *P2POps) addr() uintptr {
	if o == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(o.c))
}
%}
%typemap(gotype) (const pstate_p2p_op_t *ops, size_t n) "*P2POps"
%typemap(imtype) (const pstate_p2p_op_t *ops, size_t n) "uintptr"
%typemap(goin) (const pstate_p2p_op_t *ops, size_t n) %{ $result = $input.addr() %}
%typemap(in) (const pstate_p2p_op_t *ops, size_t n) %{
  $1 = $input ? ((pstate_go_ops *)$input)->ops : NULL;
  $2 = $input ? ((pstate_go_ops *)$input)->n : 0;
%}

/* ---- hooks (pstate_add_hook): the C hook calls the exported Go function pstateGoHook
 * (internal/capi/hooks.go) with a runtime/cgo Handle of the Go func as its user value ---- */
%ignore pstate_add_hook;
%insert(cgo_comment_typedefs) %{
intptr_t pstate_go_add_hook(uintptr_t ps, uintptr_t handle, uint64_t *id);
%}
%{
extern int pstateGoHook(uintptr_t handle, pstate_call_info_t *info);
static pstate_status_t pstate_go_hook(void *user, const pstate_call_info_t *info) {
  return (pstate_status_t)pstateGoHook((uintptr_t)user, (pstate_call_info_t *)info);
}
intptr_t pstate_go_add_hook(uintptr_t ps, uintptr_t handle, uint64_t *id) {
  /* the status as the other wrappers return it: a malloc'd pstate_go_failure, or 0 */
  return (intptr_t)pstate_go_failure_new(pstate_add_hook((pstate_t *)ps, pstate_go_hook, (void *)handle, id));
}
%}
%insert(go_wrapper) %{
// AddHook registers the Go func behind handle (a runtime/cgo Handle that pstateGoHook resolves)
// as a hook of the context ps; *id receives its id.
func AddHook(ps uintptr, handle uintptr, id *uint64) error {
	var v C.uint64_t
	err := swigPstateFailure(int64(C.pstate_go_add_hook(C.uintptr_t(ps), C.uintptr_t(handle), &v)))
	*id = uint64(v)
	return err
}
%}

#endif /* SWIGGO */

%include "pstate/pstate.h"
