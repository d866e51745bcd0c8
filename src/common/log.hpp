// log.hpp — rank-prefixed logging to stderr, filtered by PSTATE_DEBUG (WARN, INFO, TRACE).
//
// Each pstate_t owns a Logger that knows its rank, so N ranks as N threads log distinctly and no
// global mutable state is needed. The level is read from the environment once per Logger.
// Lines look like: "[pstate 3] INFO init: rendezvous tcp://127.0.0.1:29500 (4 ranks)".
#pragma once

#include "common/error.hpp"

#include <string>

namespace pstate {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// Parses PSTATE_DEBUG ("WARN", "INFO", "TRACE", case-insensitive; unset or other = WARN).
LogLevel log_level_from_env();

class Logger {
 public:
  Logger() : level_(log_level_from_env()) {}
  explicit Logger(LogLevel level) : level_(level) {}

  void set_rank(int rank) { rank_ = rank; }
  bool enabled(LogLevel level) const { return level <= level_; }

  template <typename... Parts>
  void warn(Parts &&...parts) const {
    if (enabled(LogLevel::kWarn)) write(LogLevel::kWarn, cat(std::forward<Parts>(parts)...));
  }
  template <typename... Parts>
  void info(Parts &&...parts) const {
    if (enabled(LogLevel::kInfo)) write(LogLevel::kInfo, cat(std::forward<Parts>(parts)...));
  }
  template <typename... Parts>
  void trace(Parts &&...parts) const {
    if (enabled(LogLevel::kTrace)) write(LogLevel::kTrace, cat(std::forward<Parts>(parts)...));
  }

 private:
  void write(LogLevel level, const std::string &line) const;
  LogLevel level_;
  int rank_ = -1;
};

}  // namespace pstate
