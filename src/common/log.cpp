// log.cpp — the stderr sink of Logger: one write(2) per line so lines of ranks never interleave;
// the text and JSON line formats (PSTATE_LOG_FORMAT) and the JSON string escaping.
#include "common/log.hpp"

#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pstate {

namespace {

std::string upper(const char *v) {
  std::string s(v);
  for (auto &c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

const char *level_name(LogLevel level) {
  static const char *const kNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  return kNames[static_cast<int>(level)];
}

// The length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates, at most
// U+10FFFF), or 0 when the byte there does not start one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

void append_json_string(std::string &out, std::string_view s) {
  out.push_back('"');
  json_escape_into(out, s);
  out.push_back('"');
}

void append_json_string_or_null(std::string &out, std::string_view s) {
  if (s.empty()) out += "null";
  else append_json_string(out, s);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

long long wall_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace

LogLevel log_level_from_env() {
  const char *v = std::getenv("PSTATE_DEBUG");
  if (v == nullptr) return LogLevel::kWarn;
  const std::string s = upper(v);
  if (s == "TRACE") return LogLevel::kTrace;
  if (s == "INFO") return LogLevel::kInfo;
  if (s == "NONE" || s == "OFF") return LogLevel::kNone;
  return LogLevel::kWarn;
}

LogFormat log_format_from_env() {
  const char *v = std::getenv("PSTATE_LOG_FORMAT");
  return v != nullptr && upper(v) == "JSON" ? LogFormat::kJson : LogFormat::kText;
}

void json_escape_into(std::string &out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7F) {
            out += "\\u00";
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 0xF]);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {  // not UTF-8: one replacement character per byte
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
}

std::string format_json_log_line(long long time_ns, std::string_view level, int rank, std::string_view host,
                                 const LogFields &fields, std::string_view message) {
  const time_t secs = static_cast<time_t>(time_ns / 1000000000LL);
  const long micros = static_cast<long>((time_ns % 1000000000LL) / 1000);
  tm utc{};
  ::gmtime_r(&secs, &utc);
  char when[96];  // room for any int fields: the format never truncates
  std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, micros);
  std::string out;
  out.reserve(160 + message.size());
  out += "{\"time\":\"";
  out += when;
  out += "\",\"level\":";
  append_json_string(out, level);
  out += ",\"rank\":";
  out += rank >= 0 ? std::to_string(rank) : std::string("null");
  out += ",\"host\":";
  append_json_string_or_null(out, host);
  out += ",\"group\":";
  append_json_string_or_null(out, fields.group);
  out += ",\"call\":";
  append_json_string_or_null(out, fields.call);
  out += ",\"message\":";
  append_json_string(out, message);
  out += ",\"status\":";
  if (fields.status) append_json_string(out, pstate_status_string(*fields.status));
  else out += "null";
  out += "}\n";
  return out;
}

std::string format_text_log_line(std::string_view level, int rank, std::string_view message) {
  std::string out = "[pstate";
  if (rank >= 0) {
    out.push_back(' ');
    out.append(std::to_string(rank));
  }
  out.append("] ");
  out += level;
  out += " ";
  out += message;
  out += "\n";
  return out;
}

void write_log_line(LogFormat format, std::string_view level, int rank, const LogFields &fields,
                    std::string_view message) {
  const std::string out = format == LogFormat::kJson
                              ? format_json_log_line(wall_now_ns(), level, rank, host_name(), fields, message)
                              : format_text_log_line(level, rank, message);
  ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

void Logger::write(LogLevel level, const LogFields &fields, const std::string &line) const {
  write_log_line(format_, level_name(level), rank_, fields, line);
}

}  // namespace pstate
