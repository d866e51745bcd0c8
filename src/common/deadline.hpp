// deadline.hpp — a point in time every blocking call measures itself against.
//
// The context timeout (timeout_ms / PSTATE_TIMEOUT_MS, default 600 s) becomes a Deadline at the
// start of each blocking call; loops ask remaining_ms() to size their poll()/epoll waits, so no
// wait is ever unbounded.
#pragma once

#include <chrono>
#include <cstdint>

namespace pstate {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after_ms(int64_t ms) { return Deadline(Clock::now() + std::chrono::milliseconds(ms)); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, INT32_MAX] so it fits poll()'s timeout argument.
  int remaining_ms() const {
    if (at_ == Clock::time_point::max()) return INT32_MAX;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }
  Clock::time_point at() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace pstate
