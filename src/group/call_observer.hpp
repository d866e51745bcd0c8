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
// three words of its cell: the log2 bucket of its duration (one bsr), the duration's sum, and its
// elements by dtype (the bytes are the render's multiplication); a failed call adds one more (its
// status). A collective's cell is its descriptor's kind's (no table), a cell is 1 KiB (its address
// a shift). The owning thread writes (one thread drives a context at a time: Context::try_enter),
// so an add is one non-locked `add` to memory on x86-64 (observer_add), and a thread that renders
// the metrics meanwhile reads relaxed atomics: no lock, no allocation, no locked instruction on the
// call path. Calls are not counted apart: the buckets of a cell sum to its calls. Ticks become ns
// by one multiplication (the rate measured once per process), so that every rank's buckets have
// the same bounds (2^b ns).
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
// point-to-point calls and the batch, which the recorder records as send/recv; then, from
// kObservedKindBase, one per OpKind: the collectives a descriptor describes are recorded by their
// descriptor's kind as it is (no table on the call path), and rendered under the flight recorder's
// name of that kind (trace_op_of), summed with the TraceOp cell of the same name.
inline constexpr uint32_t kObservedIsend = static_cast<uint32_t>(TraceOp::kCount);
inline constexpr uint32_t kObservedIrecv = kObservedIsend + 1;
inline constexpr uint32_t kObservedP2PBatch = kObservedIsend + 2;
inline constexpr uint32_t kObservedKindBase = kObservedIsend + 3;
inline constexpr uint32_t kObservedOps = kObservedKindBase + 32;  // OpKind 0..31
static_assert(static_cast<uint32_t>(OpKind::kLast) < 32, "OpKind grew past the observer's 32 cells");
inline constexpr uint32_t kObservedPaths = 8;      // TracePath values (index op * 8 + path)
inline constexpr uint32_t kObservedStatuses = 16;  // pstate_status_t 0..13; later ones count as 15
inline constexpr uint32_t kObservedBuckets = 64;   // bucket b: durations in [2^b, 2^(b+1)) ns (b 0: 0..1)
inline constexpr uint32_t kObservedDtypes = 16;    // elements by dtype + 1 (0: bytes counted as such)
const char *observed_op_name(uint32_t op);
const char *observed_path_name(uint32_t path);
const char *observed_status_name(uint32_t status);

// One (operation, path) of one group: 1 KiB, so that a cell's address is a shift.
struct CallCell {
  std::atomic<uint64_t> buckets[kObservedBuckets];    // calls by log2 of their duration in ns
  std::atomic<uint64_t> ns;                           // the durations' sum
  std::atomic<uint64_t> elements[kObservedDtypes];    // the calls' elements by dtype + 1 (bytes: render)
  std::atomic<uint64_t> failed[kObservedStatuses];    // calls that returned status s (s > 0)
  uint64_t unused[128 - kObservedBuckets - 1 - kObservedDtypes - kObservedStatuses];
};
static_assert(sizeof(CallCell) == 1024);

// One writer: no locked read-modify-write. On x86-64 one `add` to memory (an aligned 8-byte store
// is single-copy atomic there, so a reader's relaxed load sees the old or the new value; the
// compiler would emit a load, an add and a store for the portable form below: three instructions
// where the whole observer has a budget of ~18: docs/bench/metrics.md). Under TSan the portable
// form, so that the race detector sees the writes it checks the readers against.
#if defined(__SANITIZE_THREAD__)
#define PSTATE_OBSERVER_PORTABLE_ADD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PSTATE_OBSERVER_PORTABLE_ADD 1
#endif
#endif
inline void observer_add(std::atomic<uint64_t> &a, uint64_t v) {
#if defined(__x86_64__) && !defined(PSTATE_OBSERVER_PORTABLE_ADD)
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free);
  asm volatile("addq %1, %0" : "+m"(*reinterpret_cast<uint64_t *>(&a)) : "er"(v) : "cc");
#else
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
#endif
}

// The log2 bucket of a duration (its highest set bit; 0 and 1 ns in bucket 0).
inline uint64_t observer_bucket(uint64_t ns) {
#if defined(__x86_64__)
  uint64_t b;
  asm("bsrq %1, %0" : "=r"(b) : "rm"(ns | 1) : "cc");
  return b;
#else
  return 63u - static_cast<uint64_t>(__builtin_clzll(ns | 1));
#endif
}
// The duration of a call that began at tick t0, into its cell's histogram and sum.
inline void observer_time(CallCell &c, uint64_t t0) {
  const uint64_t d = observer_ns(observer_ticks() - t0);
  observer_add(c.buckets[observer_bucket(d)], 1);
  observer_add(c.ns, d);
}
inline void observer_failed(CallCell &c, int status) {
  observer_add(c.failed[static_cast<uint32_t>(status) < kObservedStatuses ? status : kObservedStatuses - 1], 1);
}

// The cells of one group name (for as long as the context lives).
class GroupCallMetrics {
 public:
  explicit GroupCallMetrics(std::string name);
  GroupCallMetrics(const GroupCallMetrics &) = delete;
  GroupCallMetrics &operator=(const GroupCallMetrics &) = delete;

  const std::string &name() const { return name_; }
  CallCell *cells() const { return cells_.get(); }
  CallCell &cell(uint32_t op, uint32_t path) const { return cells_.get()[op * kObservedPaths + path]; }

  // A call of op over path that began at tick t0 returned status (pstate_status_t); its bytes
  // given as such. The paths off the 8 B collectives' (point-to-point, objects, requests).
  void record(uint32_t op, TracePath path, uint64_t bytes, uint64_t t0, int status) const {
    CallCell &c = cell(op, static_cast<uint32_t>(path));
    observer_time(c, t0);
    observer_add(c.elements[0], bytes);
    if (status != 0) observer_failed(c, status);
  }

 private:
  struct Free {
    void operator()(CallCell *p) const { std::free(p); }
  };
  std::string name_;
  // calloc'd (kObservedOps x 8 KiB): zero pages that only the cells a group uses make resident
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
