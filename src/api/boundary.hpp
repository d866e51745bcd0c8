// boundary.hpp — what every C entry point does at the ABI edge (libuv's uv_ vs uv__ split).
//
// PSTATE_GUARD runs the body of an entry point, catches every C++ exception, stores its message in
// the thread-local last error (prefixed with the function name) and returns the status, so no
// exception or abort() crosses into the caller. require_*() helpers turn bad arguments into
// PSTATE_ERR_INVALID_ARGUMENT with a message that names the argument and the fix.
#pragma once

#include "common/error.hpp"

#include <pstate/pstate.h>

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
// A parameter struct must come from its initializer macro: struct_size at least the first
// version's size and no larger than a size we can read (callers newer than the library are
// refused rather than silently truncated).
inline void require_struct(size_t got, size_t oldest, size_t ours, const char *name, const char *init) {
  if (got < oldest || got > ours)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, "->struct_size is ", got, " (expected ", ours,
                "): initialize it with ", init);
}
void require_dtype(pstate_dtype_t dtype);
void require_op(pstate_reduce_op_t op);
void require_group_kind(pstate_group_kind_t kind);

}  // namespace pstate::api
