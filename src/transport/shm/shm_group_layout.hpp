// shm_group_layout.hpp — the in-segment structures of ShmGroup, shared by its .cpp files only.
//
// Control: one rank's step counters and futex word, alone on a 128-byte block. Line: one line of
// the inline protocol, 56 payload bytes then the word that flags them (stored last, release):
// the call's code in the upper 32 bits, the step (modulo 2^32) in the lower (see "Agreement" in
// shm_group.hpp).
#pragma once

#include "transport/shm/shm_group.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pstate::shm {

constexpr size_t kControlStride = 128;
constexpr size_t kLineData = 56;

struct ShmGroup::Control {
  alignas(64) std::atomic<uint64_t> in;  // last step whose input this rank staged (staged protocol)
  std::atomic<uint64_t> out;             // last step whose slice this rank reduced (staged all_reduce)
  std::atomic<uint64_t> done;            // last step after which this rank reads no peer's memory
  ShmSignal signal;                      // notified after each store above and each inline publish
  std::atomic<uint32_t> gather_kind[2];  // rank 0 only: the staging stores of medium all_gather
                                         // call n, in slot n % 2 (see staged_all_gather)
  // Why and when this rank gave up on a call (written before its verdict CAS; see "One call, one
  // verdict" in shm_group.hpp).
  std::atomic<int64_t> gave_up_unix_ms;
  std::atomic<int32_t> gave_up_status;
  // By reference (shm_group_cma.cpp): the address of this rank's part of the current call, in
  // its own address space (stored before `in`), and, in the group's first such call, whether it
  // could read every peer's (1) or not (2; stored before `out`).
  std::atomic<uint64_t> ref_addr;
  std::atomic<uint32_t> ref_ok;
};
static_assert(sizeof(ShmGroup::Control) <= kControlStride);

// The group's verdict block, after the last rank's control block: written only when a call fails
// or a waiter gives up, so on the fast path every rank reads it from its own cache.
struct ShmGroup::Verdict {
  alignas(64) std::atomic<uint64_t> watch;  // the highest first step of a call some rank gave up on
  std::atomic<uint64_t> word;               // step << 16 | state << 14 | group rank (see below)
};
static_assert(sizeof(ShmGroup::Verdict) <= kControlStride);
inline constexpr uint64_t kVerdictCommitted = 1, kVerdictFailed = 2;
constexpr uint64_t verdict_word(uint64_t step, uint64_t state, int rank) {
  return step << 16 | state << 14 | static_cast<uint64_t>(rank);
}
constexpr uint64_t verdict_step(uint64_t w) { return w >> 16; }
constexpr uint64_t verdict_state(uint64_t w) { return (w >> 14) & 3u; }
constexpr int verdict_rank(uint64_t w) { return static_cast<int>(w & 0x3fffu); }

struct ShmGroup::Line {
  alignas(64) uint8_t data[kLineData];
  std::atomic<uint64_t> word;  // code << 32 | step, stored (release) after data
};
static_assert(sizeof(ShmGroup::Line) == 64);

// Defined here, not in shm_group.cpp, so that the inline protocol's per-line loops inline them.
inline ShmGroup::Control &ShmGroup::control(int rank) const {
  return *reinterpret_cast<Control *>(controls_ + kControlStride * static_cast<size_t>(rank));
}

inline ShmGroup::Line *ShmGroup::inline_line(int rank, uint64_t step, size_t index) const {
  const auto depth = static_cast<size_t>(options_.inline_depth);
  size_t slot = static_cast<size_t>(rank) * depth + static_cast<size_t>(step % depth);
  return reinterpret_cast<Line *>(inline_) + slot * inline_lines_ + index;
}

}  // namespace pstate::shm
