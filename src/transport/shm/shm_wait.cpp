// shm_wait.cpp — the slow half of ShmWaiter (yield, then futex sleep) and the futex wake-up.
//
// See shm_wait.hpp for the protocol. The futexes are shared (not FUTEX_PRIVATE) because the word
// lives in a MAP_SHARED segment mapped by several processes.
#include "transport/shm/shm_wait.hpp"

#include "common/host_cpus.hpp"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <thread>

namespace pstate::shm {
namespace {

using Clock = std::chrono::steady_clock;

// True when the sleep ended by its timeout. EAGAIN (word changed), EINTR, a wake-up and a
// timeout all mean "look again"; the caller re-checks.
bool futex_wait(std::atomic<uint32_t> *word, uint32_t expected, int timeout_ms) {
  timespec ts{};
  ts.tv_sec = timeout_ms / 1000;
  ts.tv_nsec = static_cast<long>(timeout_ms % 1000) * 1000000L;
  long rc = syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
  return rc != 0 && errno == ETIMEDOUT;
}

}  // namespace

// The waiter's half of the fence pair (see shm_wait.hpp). False when membarrier failed: the
// caller then must not sleep long, since an owner may have missed it.
bool heavy_fence(bool light) {
  if (!light) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return true;
  }
  return syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

bool register_for_asymmetric_fences() {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

void ShmSignal::wake_all() {
  word.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool oversubscribed(int group_size) { return online_cpus() < group_size; }

WaitOptions resolve_wait_options(WaitOptions requested, int group_size) {
  const bool crowded = oversubscribed(group_size);
  // PSTATE_SPIN=0 (host_cpus.hpp): this rank shares its CPU with another job's; not `crowded`,
  // which also shapes protocols and must be the same on every rank of the group.
  if (requested.spin_ns < 0) requested.spin_ns = crowded || !spinning_allowed() ? 0 : 50000;
  if (requested.yield_ns < 0) requested.yield_ns = 200000;
  if (requested.liveness_interval_ms <= 0) requested.liveness_interval_ms = 20;
  return requested;
}

void ShmWaiter::slow_wait(ShmSignal &signal, const std::function<bool()> &ready, const Deadline &deadline,
                          const std::function<std::string()> &describe) {
  const auto interval = std::chrono::milliseconds(options_.liveness_interval_ms);
  auto now = Clock::now();
  const auto yield_until = now + std::chrono::nanoseconds(options_.yield_ns);
  auto next_liveness = now + interval;
  auto end = deadline.at();
  bool extended = false;
  ++stats_.slow_waits;
  for (;;) {
    if (ready()) return;
    now = Clock::now();
    if (now >= end) {
      const int d = guard_ != nullptr ? guard_->on_deadline(ready) : DeadlineGuard::kGiveUp;
      if (d == DeadlineGuard::kReady) return;
      if (d == DeadlineGuard::kKeepWaiting && !extended) {
        extended = true;  // a peer completed the call: what this rank waits for is on its way
        end = now + std::max<Clock::duration>(now - (yield_until - std::chrono::nanoseconds(options_.yield_ns)),
                                              std::chrono::milliseconds(100));
        continue;
      }
      timed_out(describe);
    }
    if (now >= next_liveness) {
      check_liveness();
      next_liveness = now + interval;
    }
    if (now < yield_until) {
      sched_yield();
      continue;
    }
    auto to_liveness = std::chrono::duration_cast<std::chrono::milliseconds>(next_liveness - now).count();
    int sleep_ms = static_cast<int>(std::clamp<int64_t>(to_liveness, 1, options_.liveness_interval_ms));
    sleep_ms = std::min(sleep_ms, std::max(deadline.remaining_ms(), 1));
    signal.sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!heavy_fence(light_notify_)) sleep_ms = 1;  // an owner may miss us: do not sleep long
    uint32_t seen = signal.word.load(std::memory_order_seq_cst);
    if (!ready()) {
      ++stats_.sleeps;
      if (futex_wait(&signal.word, seen, sleep_ms)) ++stats_.sleep_timeouts;
    }
    signal.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ShmWaiter::poll_wait(const std::function<bool()> &ready, const Deadline &deadline,
                          const std::function<std::string()> &describe) {
  const auto interval = std::chrono::milliseconds(options_.liveness_interval_ms);
  auto next_liveness = Clock::now() + interval;
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    if (ready()) return;
    auto now = Clock::now();
    if (now >= deadline.at()) timed_out(describe);
    if (now >= next_liveness) {
      check_liveness();
      next_liveness = now + interval;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
  }
}

void ShmWaiter::timed_out(const std::function<std::string()> &describe) const {
  check_liveness();  // a dead peer is the better explanation than a timeout
  throw_error(PSTATE_ERR_TIMEOUT, describe(),
              ": timed out (is that rank alive? A rank in another collective of this group would have been a "
              "MISMATCH, so it is elsewhere: in another group's collective, in point-to-point, computing, or "
              "stuck; PSTATE_CHECK=1 also compares sequence numbers and CUDA-context collectives; raise "
              "PSTATE_TIMEOUT_MS if it is just slow)");
}

}  // namespace pstate::shm
