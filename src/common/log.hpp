// log.hpp — rank-prefixed logging to stderr, filtered by PSTATE_DEBUG (WARN, INFO, TRACE), as text
// or, with PSTATE_LOG_FORMAT=json, as one JSON object per line for a log pipeline.
//
// Each pstate_t owns a Logger that knows its rank, so N ranks as N threads log distinctly and no
// global mutable state is needed. The level and the format are read from the environment once
// per Logger. Text lines look like: "[pstate 3] INFO init: rendezvous tcp://127.0.0.1:29500 (4 ranks)";
// JSON lines like:
//   {"time":"2026-12-07T11:14:34.123456Z","level":"INFO","rank":3,"host":"node7","group":null,
//    "call":null,"message":"init: rendezvous tcp://127.0.0.1:29500 (4 ranks)","status":null}
// (on one line). The message is the text line without its "[pstate R] LEVEL " prefix; group, call
// and status are filled where the line's call site knows them (a failed call names its group, its
// operation and its status: the *_at calls with LogFields) and null elsewhere, so every line has
// every key. docs/environment.md (PSTATE_LOG_FORMAT) has the fields for users.
#pragma once

#include "common/error.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace pstate {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };
enum class LogFormat { kText = 0, kJson = 1 };

// Parses PSTATE_DEBUG ("WARN", "INFO", "TRACE", case-insensitive; unset or other = WARN).
LogLevel log_level_from_env();
// Parses PSTATE_LOG_FORMAT ("json", case-insensitive; unset or anything else = text).
LogFormat log_format_from_env();

// What a log line's call site knows beyond its text (empty / nullopt: JSON null).
struct LogFields {
  std::string_view group;                 // the group's name, as pstate_group_info gives it ("tp:0", "world:0")
  std::string_view call;                  // the operation ("all_reduce", "send", "pstate_shrink")
  std::optional<pstate_status_t> status;  // the status the call fails with, as pstate_status_string names it
};

// Appends s to out as the inside of a JSON string: '"' and '\' escaped, control characters (and
// DEL) as \n, \t, \r, \b, \f or \u00XX, valid UTF-8 copied as is, and every byte that is not part
// of a valid UTF-8 sequence (stray continuation bytes, truncated, overlong or surrogate sequences,
// code points above U+10FFFF) replaced by U+FFFD, so the line is always valid JSON in UTF-8.
void json_escape_into(std::string &out, std::string_view s);

// One JSON log line, newline included. rank < 0 and host empty are null; time_ns is the wall
// clock (CLOCK_REALTIME, ns since the epoch), written as RFC 3339 UTC with microseconds.
std::string format_json_log_line(long long time_ns, std::string_view level, int rank, std::string_view host,
                                 const LogFields &fields, std::string_view message);
// One text log line, newline included: "[pstate R] LEVEL message" ("[pstate] ..." when rank < 0).
std::string format_text_log_line(std::string_view level, int rank, std::string_view message);

// Writes one line to stderr in the given format with one write(2), so lines of ranks never
// interleave: the sink of Logger, and of pstate run's own lines in JSON (their text form, "pstate
// run: ...", is not a Logger's and stays as it was).
void write_log_line(LogFormat format, std::string_view level, int rank, const LogFields &fields,
                    std::string_view message);

class Logger {
 public:
  Logger() : level_(log_level_from_env()), format_(log_format_from_env()) {}
  explicit Logger(LogLevel level) : level_(level), format_(log_format_from_env()) {}

  void set_rank(int rank) { rank_ = rank; }
  bool enabled(LogLevel level) const { return level <= level_; }
  LogFormat format() const { return format_; }

  template <typename... Parts>
  void warn(Parts &&...parts) const {
    if (enabled(LogLevel::kWarn)) write(LogLevel::kWarn, {}, cat(std::forward<Parts>(parts)...));
  }
  template <typename... Parts>
  void info(Parts &&...parts) const {
    if (enabled(LogLevel::kInfo)) write(LogLevel::kInfo, {}, cat(std::forward<Parts>(parts)...));
  }
  template <typename... Parts>
  void trace(Parts &&...parts) const {
    if (enabled(LogLevel::kTrace)) write(LogLevel::kTrace, {}, cat(std::forward<Parts>(parts)...));
  }
  // The same with the fields the call site knows (JSON only; the text line is the same).
  template <typename... Parts>
  void warn_at(const LogFields &fields, Parts &&...parts) const {
    if (enabled(LogLevel::kWarn)) write(LogLevel::kWarn, fields, cat(std::forward<Parts>(parts)...));
  }
  template <typename... Parts>
  void info_at(const LogFields &fields, Parts &&...parts) const {
    if (enabled(LogLevel::kInfo)) write(LogLevel::kInfo, fields, cat(std::forward<Parts>(parts)...));
  }

 private:
  void write(LogLevel level, const LogFields &fields, const std::string &line) const;
  LogLevel level_;
  LogFormat format_;
  int rank_ = -1;
};

}  // namespace pstate
