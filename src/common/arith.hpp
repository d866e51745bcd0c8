// arith.hpp — the small sizes-and-ranges arithmetic every layer uses (rounding up to an
// alignment, dividing up, whether two byte ranges share a byte), in one place so that each file
// does not carry its own copy (and so a unity build, which compiles several files as one, sees
// one definition).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pstate {

constexpr size_t kPageBytes = 4096;  // the page size pstate lays shared memory out in

// n rounded up to a multiple of `to` (to > 0).
constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// n / d rounded up (d > 0).
constexpr size_t ceil_div(size_t n, size_t d) { return (n + d - 1) / d; }

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (no pointer arithmetic that could
// wrap; an empty range shares none).
inline bool ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x >= y ? x - y < b_bytes : y - x < a_bytes;
}

}  // namespace pstate
