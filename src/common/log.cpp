// log.cpp — the stderr sink of Logger: one write(2) per line so lines of ranks never interleave.
#include "common/log.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace pstate {

LogLevel log_level_from_env() {
  const char *v = std::getenv("PSTATE_DEBUG");
  if (v == nullptr) return LogLevel::kWarn;
  std::string s(v);
  for (auto &c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s == "TRACE") return LogLevel::kTrace;
  if (s == "INFO") return LogLevel::kInfo;
  if (s == "NONE" || s == "OFF") return LogLevel::kNone;
  return LogLevel::kWarn;
}

void Logger::write(LogLevel level, const std::string &line) const {
  static const char *const kNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  std::string out = "[pstate";
  if (rank_ >= 0) {
    out.push_back(' ');
    out.append(std::to_string(rank_));
  }
  out.append("] ");
  out += kNames[static_cast<int>(level)];
  out += " ";
  out += line;
  out += "\n";
  ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

}  // namespace pstate
