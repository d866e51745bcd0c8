// shm_wait.hpp — how a rank waits for a flag another process sets in shared memory.
//
// Every shared-memory protocol in this folder is "the owner stores a sequence number with release
// semantics, peers load it with acquire semantics until it reaches the value they need". This file
// is the waiting half, built so that it is fast when ranks have a core each and still progresses
// when ranks outnumber cores (4 ranks on 2 cores):
//
//   1. spin: poll the predicate with a CPU pause between polls, for up to WaitOptions::spin_ns —
//      adaptively: the budget halves each time a wait outlasts it (the peer is probably not
//      running, e.g. it shares our core) and doubles back each time a wait ends within it;
//   2. yield: poll with sched_yield() between polls, for WaitOptions::yield_ns, so a peer that shares
//      our core gets to run;
//   3. sleep: block in futex(FUTEX_WAIT) on the owner's ShmSignal word; after each store the owner
//      checks for sleepers and, only if there are any, bumps the word and wakes them
//      (ShmSignal::notify), so no wake-up is lost and a sleeping rank uses no CPU.
//
// Every wait is bounded: past the Deadline it throws PSTATE_ERR_TIMEOUT with a message naming what
// it waited for; while sleeping/yielding it calls the caller's liveness check every
// liveness_interval_ms (the group layer wires it to pidfds; it throws PSTATE_ERR_PEER_LOST), and once
// more before reporting a timeout, so a dead peer is reported as PEER_LOST rather than TIMEOUT.
//
// Lost wake-ups are excluded by a Dekker-style handshake between the flag and a sleeper count:
//   waiter: sleepers++ ; FENCE ; v = word ; if (!ready()) futex_wait(word, v) ; sleepers--
//   owner : <release-store of the flag> ; fence ; if (sleepers) { word++ ; futex_wake(word) }
// Either the owner sees sleepers != 0 and wakes (futex_wait refuses to sleep once word changed),
// or the waiter's re-check after its fence sees the flag. The owner's side runs on every store of
// every collective, so it is made free where the kernel allows: with membarrier(2)'s
// GLOBAL_EXPEDITED command the waiter's FENCE forces a full barrier on every CPU running a
// registered process, and the owner needs only a compiler barrier (an asymmetric fence, as in
// userspace RCU). Every rank registers; if any rank of a group cannot, the whole group uses real
// fences on both sides (ShmWaiter::set_light_notify(false), the default until agreed).
#pragma once

#include "common/deadline.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pstate::shm {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// The wake-up word of one flag owner, placed in shared memory next to the flags it guards.
// Zero-initialized memory is a valid ShmSignal.
struct ShmSignal {
  std::atomic<uint32_t> word;
  std::atomic<uint32_t> sleepers;

  // Call after every release-store a peer may be waiting for. light: the group agreed on
  // asymmetric fences (see above), so no fence instruction is needed here.
  void notify(bool light) {
    if (light)
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_relaxed) != 0) wake_all();
  }
  void wake_all();  // word++ and FUTEX_WAKE
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be lock-free");
static_assert(sizeof(ShmSignal) == 8, "ShmSignal is two futex-compatible 32-bit words");

struct WaitOptions {
  // -1 = choose: a rank with a core to itself spins, an oversubscribed one yields at once.
  int64_t spin_ns = -1;
  int64_t yield_ns = -1;
  // How often a wait that sleeps checks its peers (pidfds, failure notices, the interrupt check):
  // the detection latency of a dead rank, for a few microseconds per check.
  int liveness_interval_ms = 20;
  // Use membarrier-based asymmetric fences when every rank of the group can register (false:
  // real fences on both sides; for tests, and kernels where membarrier is slow).
  bool asymmetric_fences = true;
};

// Registers this process as a target of membarrier(GLOBAL_EXPEDITED); false where the kernel
// or a seccomp filter refuses (then the group falls back to real fences).
bool register_for_asymmetric_fences();

// True when the group has more ranks than the machine has CPUs (the same answer on every rank
// of a host, so it may shape protocol choices).
bool oversubscribed(int group_size);

// WaitOptions with the -1s resolved for a group of group_size ranks on this machine (fewer usable
// CPUs than ranks = oversubscribed: no spinning; otherwise spin up to 50 us; then in both cases
// yield up to 200 us, then futex). Oversubscribed ranks used to sleep after 20 us of yielding:
// a futex wake-up costs several microseconds here, and broadcast_object of 1 KiB on 4 ranks on 2
// cores went from 5.9 to 3.8 us with the longer yield phase (bench/analysis.md).
WaitOptions resolve_wait_options(WaitOptions requested, int group_size);

// What the slow path did, for logs and tests: a sleep that ended by timeout while the peer was
// fast would be a lost wake-up.
struct WaitStats {
  uint64_t slow_waits = 0;      // waits that outlasted the spin phase
  uint64_t sleeps = 0;          // futex sleeps
  uint64_t sleep_timeouts = 0;  // futex sleeps ended by their timeout, not by a wake-up
};

// A wait's hook at its deadline (ShmGroup's "one call, one verdict"): kReady when, after the
// hook's fence, ready() holds; kKeepWaiting when the call must not be given up (once, up to as
// long again); kGiveUp to throw the timeout.
class DeadlineGuard {
 public:
  enum Decision { kReady = 0, kKeepWaiting = 1, kGiveUp = 2 };
  virtual int on_deadline(const std::function<bool()> &ready) = 0;

 protected:
  ~DeadlineGuard() = default;
};

// The waiter's half of the asymmetric fence pair: membarrier(GLOBAL_EXPEDITED) when light, a real
// fence otherwise. False when membarrier failed.
bool heavy_fence(bool light);

class ShmWaiter {
 public:
  // liveness may be empty; when set it is called periodically while waiting and should throw
  // pstate::Error(PSTATE_ERR_PEER_LOST, ...) when a peer of the group is gone.
  ShmWaiter(WaitOptions options, std::function<void()> liveness)
      : options_(options), liveness_(std::move(liveness)), spin_budget_ns_(options.spin_ns) {}

  // Returns once ready() is true (ready must load the flag with acquire semantics). signal is the
  // ShmSignal of the rank that will make ready() true. describe() builds the text of the error
  // ("tp:0 rank 1: all_reduce step 17: waiting for rank 3 to publish its input").
  template <typename Ready, typename Describe>
  void wait(ShmSignal &signal, Ready &&ready, const Deadline &deadline, Describe &&describe) {
    if (ready()) return;
    if (spin(ready)) return;
    slow_wait(signal, std::function<bool()>(std::ref(ready)), deadline,
              std::function<std::string()>(std::ref(describe)));
  }

  // Waits (sleeping with backoff, no futex) until ready(): for set-up steps where no ShmSignal
  // exists yet (the segment is not open). Same deadline and liveness rules.
  void poll_wait(const std::function<bool()> &ready, const Deadline &deadline,
                 const std::function<std::string()> &describe);

  void check_liveness() const {
    if (liveness_) liveness_();
  }
  const WaitOptions &options() const { return options_; }

  // Notify the waiters of `signal` after storing a flag they may wait for.
  void notify(ShmSignal &signal) const { signal.notify(light_notify_); }
  // true once every rank of the group registered for asymmetric fences (see above).
  void set_light_notify(bool light) { light_notify_ = light; }
  // The hook asked at a wait's deadline (nullptr: none).
  void set_guard(DeadlineGuard *guard) { guard_ = guard; }
  bool light_notify() const { return light_notify_; }
  const WaitStats &stats() const { return stats_; }

 private:
  static constexpr int64_t kMinSpinNs = 1000;  // a few cross-core round trips

  template <typename Ready>
  bool spin(Ready &ready) {
    if (options_.spin_ns <= 0) return false;
    // The budget is measured from the 16th poll: most waits end before it, and a clock read
    // (~22 ns here) would otherwise sit on every hand-off's critical path.
    std::chrono::steady_clock::time_point until{};
    for (uint32_t i = 1;; ++i) {
      cpu_relax();
      if (ready()) {
        spin_budget_ns_ = std::min(options_.spin_ns, spin_budget_ns_ * 2);
        return true;
      }
      if ((i & 15) != 0) continue;
      const auto now = std::chrono::steady_clock::now();
      if (i == 16) {
        until = now + std::chrono::nanoseconds(spin_budget_ns_);
      } else if (now >= until) {
        spin_budget_ns_ = std::max(std::min(kMinSpinNs, options_.spin_ns), spin_budget_ns_ / 2);
        return false;
      }
    }
  }
  void slow_wait(ShmSignal &signal, const std::function<bool()> &ready, const Deadline &deadline,
                 const std::function<std::string()> &describe);
  [[noreturn]] void timed_out(const std::function<std::string()> &describe) const;

  WaitOptions options_;
  std::function<void()> liveness_;
  DeadlineGuard *guard_ = nullptr;
  bool light_notify_ = false;
  int64_t spin_budget_ns_;
  WaitStats stats_;
};

}  // namespace pstate::shm
