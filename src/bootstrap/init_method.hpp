// init_method.hpp — parsing of pstate_init_params_t.init_method: "env://", "tcp://HOST:PORT",
// "file:///PATH", "etcd://HOST:PORT,HOST:PORT/PREFIX" (etcds:// for TLS).
//
// Strict: one clear PSTATE_ERR_INVALID_ARGUMENT message per cause (unknown scheme, missing port,
// port out of range, an IPv6 address without brackets, a relative file path, trailing text), so a
// typo fails at once instead of as a rendezvous timeout ten minutes later. Pure (no I/O), so the
// fuzzers can feed it anything.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstate {

struct InitMethod {
  enum class Kind { kEnv, kTcp, kFile, kEtcd };
  Kind kind = Kind::kEnv;
  std::string host;  // kTcp: a name, an IPv4 address or an IPv6 address (without brackets)
  int port = 0;      // kTcp: 0..65535 (0 = any free port; only a serving rank can use it)
  std::string path;  // kFile: an absolute path; kEtcd: the job's key prefix ("pstate/job7")
  std::vector<std::string> endpoints;  // kEtcd: "host:port" or "[v6]:port", in the given order
  bool tls = false;                    // kEtcd: etcds:// (https endpoints)

  // Canonical text: "env://", "tcp://10.0.0.1:29500", "tcp://[::1]:29500", "file:///tmp/x".
  std::string url() const;
};

// Parses text; throws pstate::Error(INVALID_ARGUMENT) naming what is wrong and the fix.
InitMethod parse_init_method(std::string_view text);

// Checks a host name or address (as in MASTER_ADDR): not empty, at most 253 bytes, no spaces,
// slashes or control characters. `what` names it in the error ("MASTER_ADDR").
void validate_host(std::string_view host, std::string_view what);

// Parses a port number "0".."65535" (digits only); `what` names it in the error.
int parse_port(std::string_view text, std::string_view what);

}  // namespace pstate
