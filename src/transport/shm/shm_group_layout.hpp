// shm_group_layout.hpp — the in-segment structures of ShmGroup, shared by its .cpp files only.
//
// Control: one rank's step counters and futex word, alone on a 128-byte block. Line: one line of
// the inline protocol, 56 payload bytes then the step that wrote them (stored last, release).
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
};
static_assert(sizeof(ShmGroup::Control) <= kControlStride);

struct ShmGroup::Line {
  alignas(64) uint8_t data[kLineData];
  std::atomic<uint64_t> step;  // stored (release) after data
};
static_assert(sizeof(ShmGroup::Line) == 64);

}  // namespace pstate::shm
