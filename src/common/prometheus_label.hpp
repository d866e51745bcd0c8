// prometheus_label.hpp — a Prometheus label value as the text exposition format writes it
// (backslash, double quote and line feed escaped), for the library's /metrics
// (group/call_observer.cpp: group names) and the launcher's merged one (cli/job_metrics.cpp:
// host names). One helper, so that both endpoints escape alike.
#pragma once

#include <string>
#include <string_view>

namespace pstate {

inline std::string prometheus_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace pstate
