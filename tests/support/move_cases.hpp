// tests/support/move_cases.hpp: in the one folder of test helpers (every suite's, found through
// pstate_test_support's include path); used by tests/unit/test_coll_allgather, _alltoall_barrier,
// _broadcast_gather, _object and _scatter.
//
// move_cases.hpp — inputs for the data-movement algorithm tests (allgather, broadcast, gather,
// all_to_all, objects): every byte is a hash of (rank, destination block, byte index), so a byte
// in the wrong place, from the wrong rank, or never written (buffers start as 0xEE) is caught.
#pragma once

#include "coll_cases.hpp"

#include <pstate/pstate.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ptest {

// One dtype per element size (1, 2, 4, 8 bytes); fp8 included since it moves like any other.
inline constexpr pstate_dtype_t kMoveDtypes[] = {PSTATE_FP8_E4M3, PSTATE_BFLOAT16, PSTATE_INT32, PSTATE_FLOAT64};

// Byte i is byte i % 8 of a hash of (rank, block, i / 8).
inline uint8_t pattern_byte(int rank, int block, size_t i) {
  const uint64_t word = mix((static_cast<uint64_t>(rank) << 48) ^ (static_cast<uint64_t>(block) << 32) ^ (i / 8));
  return static_cast<uint8_t>(word >> (8 * (i % 8)));
}

inline std::vector<uint8_t> pattern(int rank, int block, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = pattern_byte(rank, block, i);
  return v;
}

// "" when got[0..bytes) is pattern(rank, block), else where it first differs.
inline std::string check_pattern(const uint8_t *got, int rank, int block, size_t bytes, const std::string &where) {
  const std::vector<uint8_t> want = pattern(rank, block, bytes);
  for (size_t i = 0; i < bytes; ++i)
    if (got[i] != want[i])
      return where + ": byte " + std::to_string(i) + " is not rank " + std::to_string(rank) + "'s block " +
             std::to_string(block);
  return "";
}

inline std::string move_case(const char *algo, int p, size_t count, pstate_dtype_t d, int root = -1) {
  std::string s = std::string(algo) + " P=" + std::to_string(p) + " count=" + std::to_string(count) + " " +
                  pstate_dtype_name(d);
  if (root >= 0) s += " root=" + std::to_string(root);
  return s;
}

}  // namespace ptest
