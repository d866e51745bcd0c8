// boundary.hpp — what every C entry point does at the ABI edge (libuv's uv_ vs uv__ split).
//
// PSTATE_GUARD runs the body of an entry point, catches every C++ exception, stores its message in
// the thread-local last error (prefixed with the function name) and returns the status, so no
// exception or abort() crosses into the caller. require_*() helpers turn bad arguments into
// PSTATE_ERR_INVALID_ARGUMENT with a message that names the argument and the fix.
#pragma once

#include "common/error.hpp"

#include <pstate/pstate.h>

#include <cstring>
#include <new>
#include <string>

namespace pstate::api {

void set_last_error(const std::string &message);
const char *last_error_cstr();

template <typename Body>
pstate_status_t guard(const char *function, Body &&body) noexcept {
  try {
    body();
    return PSTATE_OK;
  } catch (const Error &e) {
    set_last_error(std::string(function) + ": " + e.what());
    return e.status();
  } catch (const std::bad_alloc &) {
    set_last_error(std::string(function) + ": out of memory");
    return PSTATE_ERR_NO_MEMORY;
  } catch (const std::exception &e) {
    set_last_error(std::string(function) + ": internal error: " + e.what() + " (please report this)");
    return PSTATE_ERR_INTERNAL;
  } catch (...) {
    set_last_error(std::string(function) + ": internal error: unknown exception (please report this)");
    return PSTATE_ERR_INTERNAL;
  }
}

#define PSTATE_GUARD(...) ::pstate::api::guard(__func__, [&]() __VA_ARGS__)

inline void require(bool ok, const char *what) {
  if (!ok) throw_error(PSTATE_ERR_INVALID_ARGUMENT, what);
}
inline void require_nonnull(const void *p, const char *name) {
  if (p == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, " is NULL");
}
// Parameter structs: common/struct_io.hpp (read_struct, write_struct, read_struct_array).

// Returned arrays (pstate.h, "Returned arrays"): *count is set to the whole answer's size n, also
// when capacity is too small, which is INVALID_ARGUMENT naming `needed` (what n is) with nothing
// written; out may be NULL only then. The caller set *count = 0 first, for the other errors.
inline void require_capacity(const void *out, size_t capacity, size_t *count, size_t n, const char *name,
                             const std::string &needed) {
  *count = n;
  if (capacity < n)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, ": capacity ", capacity, " < ", n, " = ", needed,
                "; *count holds the number needed (ask with capacity 0 first)");
  if (n != 0 && out == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, " is NULL with capacity ", capacity);
}
template <typename T>
void return_array(T *out, size_t capacity, size_t *count, const T *answer, size_t n, const char *name,
                  const std::string &needed) {
  require_capacity(out, capacity, count, n, name, needed);
  if (n != 0) std::memcpy(out, answer, n * sizeof(T));
}

void require_dtype(pstate_dtype_t dtype);
void require_op(pstate_reduce_op_t op);
void require_group_kind(pstate_group_kind_t kind);

}  // namespace pstate::api
