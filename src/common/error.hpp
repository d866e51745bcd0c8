// error.hpp — the one way internals report failure: throw pstate::Error(status, message).
//
// Inside the library C++ exceptions carry a pstate_status_t and a full message ("tp group:
// all_reduce count 12 != 16 on rank 3 (PSTATE_CHECK)"). Only src/api/ catches them: it stores the
// text in the thread-local last error and returns the status, so no exception crosses the C ABI.
#pragma once

#include <pstate/pstate.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace pstate {

class Error : public std::runtime_error {
 public:
  Error(pstate_status_t status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  // The error a peer's failure notice causes on this rank (UcxWorker::notice_error): the peer has
  // told every rank already, so the context it fails sends no notices of its own (Context::fail).
  static Error from_notice(pstate_status_t status, std::string message) {
    Error e(status, std::move(message));
    e.from_notice_ = true;
    return e;
  }
  pstate_status_t status() const noexcept { return status_; }
  bool is_from_notice() const noexcept { return from_notice_; }

 private:
  pstate_status_t status_;
  bool from_notice_ = false;
};

// A verdict that every rank of a collective reached alike before any data moved (an agreement
// step inside the call: all_to_all_v's exchange of counts): the group stays in step, so the
// context stays usable, as after a disagreement found by the descriptor exchange. Rethrown as it
// is (`throw;`); a copy made as an Error is an ordinary error again.
class AgreedError : public Error {
 public:
  using Error::Error;
};

// Why a call was stopped by pstate_abort / pstate_revoke from another thread (Context::request_abort):
// every wait that notices the abort says it in these words (tests and bindings look for them).
inline constexpr const char *kAbortedByAnotherThread =
    "pstate_abort or pstate_revoke was called on this context from another thread";

namespace detail {
inline void append_all(std::ostringstream &) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream &os, T &&first, Rest &&...rest) {
  os << std::forward<T>(first);
  append_all(os, std::forward<Rest>(rest)...);
}
}  // namespace detail

// Concatenates the pieces with operator<< into one string.
template <typename... Parts>
std::string cat(Parts &&...parts) {
  std::ostringstream os;
  detail::append_all(os, std::forward<Parts>(parts)...);
  return os.str();
}

// throw_error(PSTATE_ERR_TIMEOUT, "tp group: all_reduce waited ", ms, " ms for rank ", r)
template <typename... Parts>
[[noreturn]] void throw_error(pstate_status_t status, Parts &&...parts) {
  throw Error(status, cat(std::forward<Parts>(parts)...));
}

}  // namespace pstate
