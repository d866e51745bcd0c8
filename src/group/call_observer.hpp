// call_observer.hpp — the one seam that sees every call of a group end: which group, which
// operation, which path carried it (shared memory, UCX, NCCL, local), how many bytes, how it ended
// and how long it took; the always-on metrics (docs/metrics.md) are what it keeps.
//
// The group's call points (group.cpp run / run_p2p / traced, group_device.cpp, group_requests.cpp:
// the same points where the flight recorder's entries begin and end) take a start tick and, at
// the end, record(). What a group keeps is a table of cells, one per (operation, path), in a
// GroupCallMetrics that the context owns by group name, so the counters of "world:0" go on
// across pstate_shrink / pstate_grow, which rebuild the group (Prometheus counters never go back).
//
// Cost (the 8 B shared-memory all_reduce may take at most 2% more instructions: docs/bench/
// metrics.md): a call reads the tick counter twice (rdtsc: no system call, no vDSO) and adds to
// three words of its cell: the log2 bucket of its duration (one clz), the duration's sum and the
// bytes; a failed call adds one more (its status). The owning thread writes (one thread drives a
// context at a time: Context::try_enter), so an add is a relaxed load and a relaxed store (plain
// moves on x86), and a thread that renders the metrics meanwhile reads relaxed atomics: no lock,
// no allocation, no locked instruction on the call path, and TSan-clean. Calls are not counted
// apart: the buckets of a cell sum to its calls. Ticks become ns by one multiplication (the rate
// measured once per process), so that every rank's buckets have the same bounds (2^b ns).
#pragma once

#include "common/trace.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace pstate {

// The observer's clock: the time-stamp counter where there is one (constant-rate on every x86
// this runs on), else the monotonic clock in ns.
inline uint64_t observer_ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
#endif
}
// Nanoseconds per tick in 32.32 fixed point, measured once per process against CLOCK_MONOTONIC
// (observer_calibrate, at the first pstate_init: from the library's load, at least 2 ms, which
// gives the rate to within ~1e-4); 0 until then (calls before it are recorded as 0 ns).
inline std::atomic<uint64_t> g_observer_ns_per_tick{0};
void observer_calibrate();
inline uint64_t observer_ns(uint64_t ticks) {
  return static_cast<uint64_t>(
      (static_cast<unsigned __int128>(ticks) * g_observer_ns_per_tick.load(std::memory_order_relaxed)) >> 32);
}

// The operations a cell is kept for: the flight recorder's (TraceOp), then the non-blocking
// point-to-point calls and the batch, which the recorder records as send/recv.
inline constexpr uint32_t kObservedIsend = static_cast<uint32_t>(TraceOp::kCount);
inline constexpr uint32_t kObservedIrecv = kObservedIsend + 1;
inline constexpr uint32_t kObservedP2PBatch = kObservedIsend + 2;
inline constexpr uint32_t kObservedOps = kObservedIsend + 3;
inline constexpr uint32_t kObservedPaths = 8;      // TracePath values (index op * 8 + path)
inline constexpr uint32_t kObservedStatuses = 16;  // pstate_status_t 0..13; later ones count as 15
inline constexpr uint32_t kObservedBuckets = 64;   // bucket b: durations in [2^b, 2^(b+1)) ns (b 0: 0..1)
const char *observed_op_name(uint32_t op);
const char *observed_path_name(uint32_t path);
const char *observed_status_name(uint32_t status);

// The operation a group descriptor's kind is recorded as (OpKind 1..30 -> TraceOp): a table, so
// that the call path pays one load.
inline uint32_t observed_op_of_kind(uint32_t op_kind) {
  static constexpr uint8_t kTable[32] = {
      0,
      static_cast<uint8_t>(TraceOp::kAllReduce),
      static_cast<uint8_t>(TraceOp::kAllGather),
      static_cast<uint8_t>(TraceOp::kReduceScatter),
      static_cast<uint8_t>(TraceOp::kBroadcast),
      static_cast<uint8_t>(TraceOp::kGather),
      static_cast<uint8_t>(TraceOp::kAllToAll),
      static_cast<uint8_t>(TraceOp::kBarrier),
      static_cast<uint8_t>(TraceOp::kBroadcastObject),
      static_cast<uint8_t>(TraceOp::kAllGatherObject),
      static_cast<uint8_t>(TraceOp::kSend),
      static_cast<uint8_t>(TraceOp::kRecv),
      static_cast<uint8_t>(TraceOp::kDeviceCommInit),
      static_cast<uint8_t>(TraceOp::kFinalizeBarrier),
      static_cast<uint8_t>(TraceOp::kDestroyBarrier),
      static_cast<uint8_t>(TraceOp::kReduce),
      static_cast<uint8_t>(TraceOp::kScatter),
      static_cast<uint8_t>(TraceOp::kAllGatherV),
      static_cast<uint8_t>(TraceOp::kReduceScatterV),
      static_cast<uint8_t>(TraceOp::kNewGroup),
      static_cast<uint8_t>(TraceOp::kModelParallelConfig),
      static_cast<uint8_t>(TraceOp::kModelParallelReady),
      static_cast<uint8_t>(TraceOp::kDestroyExchange),
      static_cast<uint8_t>(TraceOp::kTensorDictMeta),
      static_cast<uint8_t>(TraceOp::kTensorDictAgree),
      static_cast<uint8_t>(TraceOp::kSlicedDictAgree),
      static_cast<uint8_t>(TraceOp::kGrowDecision),
      static_cast<uint8_t>(TraceOp::kRefused),
      static_cast<uint8_t>(TraceOp::kMemAlloc),
      static_cast<uint8_t>(TraceOp::kMemFree),
      static_cast<uint8_t>(TraceOp::kMemReserve),
      static_cast<uint8_t>(TraceOp::kAllToAllV),
  };
  static_assert(static_cast<uint32_t>(OpKind::kLast) == 31, "a new OpKind: add it to the table above");
  return kTable[op_kind & 31u];
}

// The bytes of count elements of dtype (-1, or no dtype: count itself, which the object calls and
// pstate's own exchanges set to their bytes or 0): a shift by a table entry.
inline uint64_t observed_bytes(uint64_t count, int dtype) {
  // log2 of each dtype's size, at dtype + 1 (pstate.h's order: int8 uint8 int32 uint32 int64
  // uint64 float16 float32 float64 bfloat16 fp8_e4m3 fp8_e5m2)
  static constexpr uint8_t kShift[16] = {0, 0, 0, 2, 2, 3, 3, 1, 2, 3, 1, 0, 0, 0, 0, 0};
  static_assert(PSTATE_DTYPE_COUNT == 12, "a new dtype: add its size to the table above");
  return count << kShift[static_cast<uint32_t>(dtype + 1) & 15u];
}

// One (operation, path) of one group.
struct CallCell {
  std::atomic<uint64_t> buckets[kObservedBuckets];  // calls by log2 of their duration in ns
  std::atomic<uint64_t> ns;                         // the durations' sum
  std::atomic<uint64_t> bytes;                      // the calls' bytes (docs/metrics.md: which)
  std::atomic<uint64_t> failed[kObservedStatuses];  // calls that returned status s (s > 0)
};

// One writer: a relaxed load and store, no locked read-modify-write.
inline void observer_add(std::atomic<uint64_t> &a, uint64_t v) {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

// The cells of one group name (for as long as the context lives).
class GroupCallMetrics {
 public:
  explicit GroupCallMetrics(std::string name);
  GroupCallMetrics(const GroupCallMetrics &) = delete;
  GroupCallMetrics &operator=(const GroupCallMetrics &) = delete;

  const std::string &name() const { return name_; }
  CallCell &cell(uint32_t op, uint32_t path) const { return cells_.get()[op * kObservedPaths + path]; }

  // A call of op over path that began at tick t0 returned PSTATE_OK (the call path: no branch).
  CallCell &record_ok(uint32_t op, TracePath path, uint64_t bytes, uint64_t t0) const {
    CallCell &c = cell(op, static_cast<uint32_t>(path));
    const uint64_t d = observer_ns(observer_ticks() - t0);
    observer_add(c.buckets[63 - __builtin_clzll(d | 1)], 1);
    observer_add(c.ns, d);
    observer_add(c.bytes, bytes);
    return c;
  }
  // ... returned status (pstate_status_t; PSTATE_OK too).
  void record(uint32_t op, TracePath path, uint64_t bytes, uint64_t t0, int status) const {
    CallCell &c = record_ok(op, path, bytes, t0);
    if (status != 0)
      observer_add(c.failed[static_cast<uint32_t>(status) < kObservedStatuses ? status : kObservedStatuses - 1], 1);
  }

 private:
  struct Free {
    void operator()(CallCell *p) const { std::free(p); }
  };
  std::string name_;
  // calloc'd: zero pages that only the cells a group uses make resident (~50 KB a group name)
  std::unique_ptr<CallCell, Free> cells_;
};

// The context's own counters (lifecycle steps by TraceOp and status, and the facts below): set at
// the points where they happen, rendered by any thread.
struct ContextMetrics {
  struct Step {
    std::atomic<uint64_t> ok{0}, failed{0};
    std::atomic<uint64_t> ns{0};  // the steps' durations' sum (CLOCK_MONOTONIC)
  };
  Step steps[static_cast<size_t>(TraceOp::kCount)];
  std::atomic<uint64_t> rendezvous_ns{0};  // pstate_init's rendezvous (the store, the peers' records)
  std::atomic<uint64_t> epoch{0};          // world rebuilds so far (pstate_shrink, pstate_grow)
  std::atomic<int64_t> world_size{0};
  std::atomic<int64_t> rank{-1};
  std::atomic<uint64_t> notices_sent{0};    // failures this rank told its peers of
  std::atomic<uint64_t> store_requests{0};  // requests to the job's store (as of the last update)
  std::atomic<uint64_t> context_failures{0};
};

// Every group name's cells and the context's counters; renders them (Prometheus text format).
class CallObserver {
 public:
  // The cells of group `name` (made on first use; the same object for a rebuilt group of that
  // name). Owner thread, at group creation.
  GroupCallMetrics *group(const std::string &name);
  ContextMetrics &context() const { return context_; }  // atomics: written by any holder
  // The Prometheus text exposition (docs/metrics.md); any thread, while the context lives.
  std::string render() const;

 private:
  mutable std::mutex mutex_;  // groups_'s list (not the cells)
  std::deque<GroupCallMetrics> groups_;
  mutable ContextMetrics context_;
};

}  // namespace pstate
