// deadline.hpp — a point in time every blocking call measures itself against.
//
// The context timeout (timeout_ms / PSTATE_TIMEOUT_MS, default 600 s) becomes a Deadline for each
// blocking call; loops ask remaining_ms() to size their poll()/epoll waits, so no wait is ever
// unbounded. A collective's deadline is lazy (after_ms_from_first_wait): it starts counting the
// first time a wait asks it, so a call that never has to wait (a small shared-memory collective
// whose peers are already there) never reads the clock, which costs as much here as the rest of
// the call (~22 ns a read against a ~100 ns all_reduce). The difference is the microseconds
// before the first wait, against timeouts of seconds. A Deadline belongs to one thread.
#pragma once

#include <chrono>
#include <cstdint>

#include <time.h>

namespace pstate {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after_ms(int64_t ms) { return after_ms_from(Clock::now(), ms); }
  static Deadline after_ms_from(Clock::time_point start, int64_t ms) {
    return Deadline(start + std::chrono::milliseconds(ms));
  }
  // ms after the first call of expired(), remaining_ms() or at() on this object (or on a copy:
  // each copy starts on its own first question).
  static Deadline after_ms_from_first_wait(int64_t ms) {
    Deadline d(Clock::time_point{});
    d.pending_ms_ = ms < 0 ? 0 : ms;
    return d;
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // Now, from CLOCK_MONOTONIC_COARSE (steady_clock's clock, a tick of a few ms behind): ~4 ns
  // where Clock::now() costs ~25 ns here; for start times of timeouts of seconds, which it makes
  // end at most one tick early.
  static Clock::time_point coarse_now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }

  bool expired() const { return Clock::now() >= at(); }
  // The same against a time the caller already read (a clock read costs ~25 ns here).
  bool expired_at(Clock::time_point now) const { return now >= at(); }
  // Milliseconds left, clamped to [0, INT32_MAX] so it fits poll()'s timeout argument.
  int remaining_ms() const {
    if (at() == Clock::time_point::max()) return INT32_MAX;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }
  Clock::time_point at() const {
    if (pending_ms_ >= 0) {
      at_ = Clock::now() + std::chrono::milliseconds(pending_ms_);
      pending_ms_ = -1;
    }
    return at_;
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  mutable Clock::time_point at_;
  mutable int64_t pending_ms_ = -1;  // >= 0: a lazy deadline that has not started yet
};

}  // namespace pstate
