// fuzz_init_method.cpp — libFuzzer target for parse_init_method, validate_host and parse_port
// (src/bootstrap/init_method.hpp): the text users type into init_method and MASTER_ADDR/PORT.
//
// Properties: every input is either accepted or refused with INVALID_ARGUMENT and a message
// (nothing else escapes); an accepted init_method prints (url()) to text that parses back to
// the same method; a tcp host passes validate_host; ports are 0..65535.
#include "bootstrap/init_method.hpp"
#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace pstate;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  InitMethod m;
  if (fuzz::accepts([&] { m = parse_init_method(text); })) {
    std::string url = m.url();
    InitMethod back;
    FUZZ_CHECK(fuzz::accepts([&] { back = parse_init_method(url); }), "url() '%s' does not parse back", url.c_str());
    FUZZ_CHECK(back.kind == m.kind && back.host == m.host && back.port == m.port && back.path == m.path,
               "'%s' parses back differently", url.c_str());
    FUZZ_CHECK(back.url() == url, "url() is not stable for '%s'", url.c_str());
    if (m.kind == InitMethod::Kind::kTcp) {
      FUZZ_CHECK(m.port >= 0 && m.port <= 65535, "port %d out of range", m.port);
      FUZZ_CHECK(fuzz::accepts([&] { validate_host(m.host, "host"); }), "accepted host fails validate_host");
    }
    if (m.kind == InitMethod::Kind::kFile) FUZZ_CHECK(!m.path.empty() && m.path[0] == '/', "relative file path");
  }
  int port = -1;
  if (fuzz::accepts([&] { port = parse_port(text, "MASTER_PORT"); }))
    FUZZ_CHECK(port >= 0 && port <= 65535 && !text.empty() && text.size() <= 5, "port %d from %zu bytes", port, size);
  if (fuzz::accepts([&] { validate_host(text, "MASTER_ADDR"); }))
    FUZZ_CHECK(!text.empty() && text.size() <= 253, "host of %zu bytes accepted", size);
  return 0;
}
