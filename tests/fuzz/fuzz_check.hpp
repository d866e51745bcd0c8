// fuzz_check.hpp — what the fuzz targets share: a property check that aborts (so libFuzzer, or
// the replay runner under a sanitizer, reports the input), and a helper that runs a parser and
// accepts only pstate::Error(INVALID_ARGUMENT) as a refusal. Any other exception escaping a
// parser (std::out_of_range, bad_alloc on a tiny input, an INTERNAL error) is a bug.
#pragma once

#include "common/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>

#define FUZZ_CHECK(cond, ...)                                                    \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "fuzz property failed: %s (%s:%d): ", #cond, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                         \
      std::fprintf(stderr, "\n");                                                \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

namespace pstate::fuzz {

// Runs fn(); returns true when it returned, false when it refused the input with
// INVALID_ARGUMENT; aborts on any other exception.
template <typename Fn>
bool accepts(Fn &&fn) {
  try {
    fn();
    return true;
  } catch (const pstate::Error &e) {
    FUZZ_CHECK(e.status() == PSTATE_ERR_INVALID_ARGUMENT, "refused with status %d instead of INVALID_ARGUMENT: %s",
               static_cast<int>(e.status()), e.what());
    FUZZ_CHECK(e.what()[0] != '\0', "a refusal without a message");
    return false;
  } catch (const std::exception &e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return false;
}

}  // namespace pstate::fuzz
