// test_log_format.cpp — the log line formats of src/common/log.hpp (PSTATE_LOG_FORMAT, issue 45
// item 4): JSON escaping of quotes, backslashes and control characters; valid UTF-8 kept and every
// byte of invalid UTF-8 replaced by U+FFFD; a JSON line with every field and one with the nulls,
// against lines written out by hand; the text line as it always was; the variable's parsing.
// tests/cli/test_log_json.sh checks the lines of a real job with Python's json module.
#include "common/log.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace pstate;

namespace {

std::string escaped(std::string_view s) {
  std::string out;
  json_escape_into(out, s);
  return out;
}

void expect_escaped(std::string_view in, const char *want) {
  const std::string got = escaped(in);
  if (got != want) print_error("escaped: got [%s], want [%s]\n", got.c_str(), want);
  assert_string_equal(got.c_str(), want);
}

void test_json_escapes_quotes_backslashes_and_control_characters(void **) {
  expect_escaped("plain text, 100% ascii", "plain text, 100% ascii");
  expect_escaped("say \"hi\" \\ bye", "say \\\"hi\\\" \\\\ bye");
  expect_escaped("a\nb\rc\td\be\ff", "a\\nb\\rc\\td\\be\\ff");
  expect_escaped(std::string_view("\x00\x01\x1f\x7f/", 5), "\\u0000\\u0001\\u001f\\u007f/");
  expect_escaped("", "");
}

void test_json_keeps_valid_utf8(void **) {
  expect_escaped("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF",
                 "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF");  // é € 😀 U+10FFFF
  expect_escaped("\xED\x9F\xBF \xEE\x80\x80", "\xED\x9F\xBF \xEE\x80\x80");        // U+D7FF, U+E000
}

#define FFFD "\xEF\xBF\xBD"

void test_json_replaces_each_invalid_utf8_byte(void **) {
  expect_escaped("a\xFF" "b", "a" FFFD "b");                        // never a UTF-8 byte
  expect_escaped("a\x80" "b", "a" FFFD "b");                        // a stray continuation byte
  expect_escaped("end\xC3", "end" FFFD);                            // truncated at the end
  expect_escaped("\xE2\x82" "A", FFFD FFFD "A");                    // truncated before ASCII
  expect_escaped("\xC0\xAF", FFFD FFFD);                            // overlong '/'
  expect_escaped("\xE0\x80\xAF", FFFD FFFD FFFD);                   // overlong, 3 bytes
  expect_escaped("\xED\xA0\x80", FFFD FFFD FFFD);                   // a UTF-16 surrogate (U+D800)
  expect_escaped("\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD);          // above U+10FFFF
  expect_escaped("\xF5\x80\x80\x80", FFFD FFFD FFFD FFFD);          // no such lead byte
  expect_escaped("\"\xFF\n", "\\\"" FFFD "\\n");                     // both kinds in one
}

void test_json_line_with_every_field(void **) {
  // 1700000000 s after the epoch is 2023-11-14T22:13:20Z.
  const std::string line =
      format_json_log_line(1700000000123456789LL, "INFO", 3, "node7", LogFields{"tp", "all_reduce", PSTATE_ERR_MISMATCH},
                           "group tp: all_reduce failed (PSTATE_ERR_MISMATCH): count \"12\" != 16\n(PSTATE_CHECK)");
  assert_string_equal(line.c_str(),
                      "{\"time\":\"2023-11-14T22:13:20.123456Z\",\"level\":\"INFO\",\"rank\":3,\"host\":\"node7\","
                      "\"group\":\"tp\",\"call\":\"all_reduce\",\"message\":\"group tp: all_reduce failed "
                      "(PSTATE_ERR_MISMATCH): count \\\"12\\\" != 16\\n(PSTATE_CHECK)\",\"status\":"
                      "\"PSTATE_ERR_MISMATCH\"}\n");
}

void test_json_line_without_rank_host_and_fields_has_nulls(void **) {
  const std::string line = format_json_log_line(0, "WARN", -1, "", LogFields{}, "flight recorder: pipe2 failed");
  assert_string_equal(line.c_str(),
                      "{\"time\":\"1970-01-01T00:00:00.000000Z\",\"level\":\"WARN\",\"rank\":null,\"host\":null,"
                      "\"group\":null,\"call\":null,\"message\":\"flight recorder: pipe2 failed\",\"status\":null}\n");
  const std::string ok = format_json_log_line(0, "INFO", 0, "h", LogFields{{}, {}, PSTATE_OK}, "m");
  assert_non_null(std::strstr(ok.c_str(), ",\"status\":\"PSTATE_OK\"}"));
}

void test_text_line_is_unchanged(void **) {
  assert_string_equal(format_text_log_line("INFO", 3, "init: store tcp://127.0.0.1:29500 open").c_str(),
                      "[pstate 3] INFO init: store tcp://127.0.0.1:29500 open\n");
  assert_string_equal(format_text_log_line("WARN", -1, "x \"y\"\n").c_str(), "[pstate] WARN x \"y\"\n\n");
}

void test_log_format_from_env(void **) {
  unsetenv("PSTATE_LOG_FORMAT");
  assert_int_equal(static_cast<int>(log_format_from_env()), static_cast<int>(LogFormat::kText));
  setenv("PSTATE_LOG_FORMAT", "json", 1);
  assert_int_equal(static_cast<int>(log_format_from_env()), static_cast<int>(LogFormat::kJson));
  setenv("PSTATE_LOG_FORMAT", "JSON", 1);
  assert_int_equal(static_cast<int>(log_format_from_env()), static_cast<int>(LogFormat::kJson));
  assert_int_equal(static_cast<int>(Logger().format()), static_cast<int>(LogFormat::kJson));
  setenv("PSTATE_LOG_FORMAT", "text", 1);
  assert_int_equal(static_cast<int>(log_format_from_env()), static_cast<int>(LogFormat::kText));
  setenv("PSTATE_LOG_FORMAT", "yaml", 1);
  assert_int_equal(static_cast<int>(log_format_from_env()), static_cast<int>(LogFormat::kText));
  unsetenv("PSTATE_LOG_FORMAT");
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_escapes_quotes_backslashes_and_control_characters),
      cmocka_unit_test(test_json_keeps_valid_utf8),
      cmocka_unit_test(test_json_replaces_each_invalid_utf8_byte),
      cmocka_unit_test(test_json_line_with_every_field),
      cmocka_unit_test(test_json_line_without_rank_host_and_fields_has_nulls),
      cmocka_unit_test(test_text_line_is_unchanged),
      cmocka_unit_test(test_log_format_from_env),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
