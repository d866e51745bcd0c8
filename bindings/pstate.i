/*
 * pstate.i — the one SWIG interface over include/pstate/pstate.h, for Python and Go.
 *
 * SWIG reads the public header itself (%include below), so every C entry point is wrapped
 * without a hand-written wrapper per function; what this file adds are typemaps, chosen by
 * parameter *name* (the header names its parameters consistently), that give each language a
 * natural shape for the four kinds of C parameter that need one:
 *
 *   status codes     pstate_status_t results. Python: raise pstate.Error subclasses carrying the
 *                    status and pstate_last_error() (pstate/_errors.py maps number -> class).
 *                    Go: an `error` value (*StatusError, nil on PSTATE_OK); the message is copied
 *                    on the C side of the wrapper, on the thread that failed, so Go's moving of
 *                    goroutines between threads cannot lose the thread-local text.
 *   buffers          send/recv/buf. Python: any object with the buffer protocol (C-contiguous;
 *                    writable for outputs; the buffer is held for the whole call), an int
 *                    (device pointer) or None. Go: unsafe.Pointer (cgo checks it).
 *   out-parameters   handles (**out), counts (*count, *index), rank arrays (ranks+capacity),
 *                    object bytes (pstate_bytes_t *out, freed here with pstate_bytes_free),
 *                    capture streams. Python: extra return values. Go: pointers/slices filled
 *                    by C (Go memory without Go pointers, as cgo requires).
 *   parameter structs pstate_init_params_t, pstate_parallel_config_t, pstate_group_info_t get
 *                    constructors that apply their PSTATE_*_INIT macro (struct_size included),
 *                    and string members that own a copy.
 *
 * The idiomatic packages (bindings/python/pstate, bindings/go) sit on top of this raw module,
 * named `capi` in both languages (Python: pstate.capi + pstate._capi; Go: internal/capi, whose
 * capi.swig is a link to this file so that `go build` runs SWIG itself). C function names lose
 * their `pstate_` prefix (capi.all_reduce, capi.All_reduce); constants keep their C names.
 * The GIL is released around every C call (threads="1").
 */
%module(package="pstate", threads="1") capi

%{
#include "pstate/pstate.h"
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
%extend pstate_group_info_t {
  pstate_group_info_t() {
    static const pstate_group_info_t defaults = PSTATE_GROUP_INFO_INIT;
    pstate_group_info_t *p = (pstate_group_info_t *)malloc(sizeof *p);
    if (p) *p = defaults;
    return p;
  }
  ~pstate_group_info_t() { free($self); }
}

/* =============================================================================================
 * Python
 * =========================================================================================== */
#ifdef SWIGPYTHON

%{
/* Raises the pstate.Error subclass for status with this thread's pstate_last_error() text. The
 * mapping lives in Python (pstate/_errors.py: _raise_status) so that the classes, their
 * docstrings and their builtin bases are ordinary Python. Returns with a Python error set. */
static void pstate_py_raise(pstate_status_t status) {
  const char *detail = pstate_last_error();
  PyObject *errors = PyImport_ImportModule("pstate._errors");
  if (!errors) return;
  PyObject *r = PyObject_CallMethod(errors, "_raise_status", "is", (int)status, detail ? detail : "");
  Py_XDECREF(r);
  Py_DECREF(errors);
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "pstate._errors._raise_status did not raise");
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
%}

/* ---- status: raise on failure, return None (plus any out-values) on success ---- */
%typemap(out) pstate_status_t {
  if ($1 != PSTATE_OK) {
    pstate_py_raise($1);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* ---- buffers ---- */
%typemap(in) const void *send (Py_buffer view), const void *buf (Py_buffer view) {
  if (pstate_py_buffer($input, &view, (void **)&$1, 0) != 0) SWIG_fail;
}
%typemap(in) void *recv (Py_buffer view), void *buf (Py_buffer view) {
  if (pstate_py_buffer($input, &view, &$1, 1) != 0) SWIG_fail;
}
%typemap(freearg) const void *send, const void *buf, void *recv, void *buf {
  if (view$argnum.obj) PyBuffer_Release(&view$argnum);
}
/* Object payloads: any bytes-like object, read-only. */
%typemap(in) (const void *data, size_t size) (Py_buffer view) {
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
%typemap(in) (int *same_node, size_t capacity) {
  if (pstate_py_capacity($input, &$2) != 0) SWIG_fail;
  $1 = (int *)calloc($2 ? $2 : 1, sizeof(int));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
}
%typemap(argout) (int *ranks, size_t capacity, size_t *count) {
  PyObject *list = PyList_New((Py_ssize_t)filled$argnum);
  if (!list) SWIG_fail;
  for (size_t i = 0; i < filled$argnum; ++i) PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromLong($1[i]));
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(argout) (int *same_node, size_t capacity) {
  PyObject *list = PyList_New((Py_ssize_t)$2);
  if (!list) SWIG_fail;
  for (size_t i = 0; i < $2; ++i) PyList_SET_ITEM(list, (Py_ssize_t)i, PyBool_FromLong($1[i]));
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(freearg) (int *ranks, size_t capacity, size_t *count), (int *same_node, size_t capacity) {
  free($1);
}

/* ---- object results: bytes, always released with pstate_bytes_free ---- */
%typemap(in, numinputs=0) pstate_bytes_t *out (pstate_bytes_t bytes) {
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
%typemap(in) (size_t *sizes, size_t capacity) {
  if (pstate_py_capacity($input, &$2) != 0) SWIG_fail;
  $1 = (size_t *)calloc($2 ? $2 : 1, sizeof(size_t));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
}
%typemap(argout) (size_t *sizes, size_t capacity) {
  PyObject *list = PyList_New((Py_ssize_t)$2);
  if (!list) SWIG_fail;
  for (size_t i = 0; i < $2; ++i) PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromSize_t($1[i]));
  $result = SWIG_Python_AppendOutput($result, list);
}
%typemap(freearg) (size_t *sizes, size_t capacity) {
  free($1);
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
%typemap(gotype) pstate_status_t s, pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t "int"
%typemap(imtype) pstate_status_t s, pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t "int"
%typemap(in) pstate_status_t s, pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t %{ $1 = ($1_ltype)$input; %}
%typemap(out) pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t %{ $result = (intgo)$1; %}
%typemap(goout) pstate_dtype_t, pstate_reduce_op_t, pstate_device_t, pstate_group_kind_t ""

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
%typemap(gotype) void **capture_stream "*uintptr"
%typemap(imtype) void **capture_stream "*uintptr"
%typemap(in) void **capture_stream %{ $1 = (void **)$input; %}
%typemap(gotype) (int *ranks, size_t capacity), (int *same_node, size_t capacity) "[]int32"
%typemap(in) (int *ranks, size_t capacity), (int *same_node, size_t capacity) %{
  $1 = (int *)$input.array;
  $2 = (size_t)$input.len;
%}
%typemap(gotype) (size_t *sizes, size_t capacity) "[]uint64"
%typemap(in) (size_t *sizes, size_t capacity) %{
  $1 = (size_t *)$input.array;
  $2 = (size_t)$input.len;
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

#endif /* SWIGGO */

%include "pstate/pstate.h"
