// fuzz_launch_env.cpp — libFuzzer target for resolve_launch_env (src/bootstrap/launch_env.hpp):
// how a rank reads its launch facts from pstate_init_params_t and a launcher's environment
// (torchrun, mpirun, srun), fed through fixed_environment so the process's own is untouched.
//
// Input is text, one setting a line (easy to seed and to mutate with the dictionary
// launch_env.dict):
//   @world=N @rank=N @local=N @timeout=N   integer parameters (anything atoll reads)
//   @init=TEXT @token=TEXT @ifname=TEXT      string parameters (NULL unless given)
//   NAME=VALUE                               an environment variable
// Properties: accepted or refused with INVALID_ARGUMENT and a message, nothing else; an accepted
// launch satisfies 0 <= rank < world_size, 0 <= local_rank < world_size, local_rank <
// local_world_size <= world_size when known, timeout >= 1, a tcp:// or file:// store (env://
// resolved), an interface name of at most 15 bytes; describe() does not depend on the token.
#include "bootstrap/launch_env.hpp"
#include "bootstrap/netif.hpp"
#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>

using namespace pstate;

namespace {

struct Input {
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  std::map<std::string, std::string> env;
  std::optional<std::string> init, token, ifname;  // own the parameter strings
};

Input parse(std::string_view text) {
  Input in;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string key(line.substr(0, eq)), value(line.substr(eq + 1));
    long long number = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "@world") in.params.world_size = static_cast<int>(number);
    else if (key == "@rank") in.params.rank = static_cast<int>(number);
    else if (key == "@local") in.params.local_rank = static_cast<int>(number);
    else if (key == "@timeout") in.params.timeout_ms = number;
    else if (key == "@init") in.init = value;
    else if (key == "@token") in.token = value;
    else if (key == "@ifname") in.ifname = value;
    else in.env[key] = value;
  }
  if (in.init) in.params.init_method = in.init->c_str();
  if (in.token) in.params.job_token = in.token->c_str();
  if (in.ifname) in.params.socket_ifname = in.ifname->c_str();
  return in;
}

void check(const LaunchEnv &l) {
  FUZZ_CHECK(l.world_size >= 1, "world_size %d", l.world_size);
  FUZZ_CHECK(l.rank >= 0 && l.rank < l.world_size, "rank %d of %d", l.rank, l.world_size);
  FUZZ_CHECK(l.local_rank >= 0 && l.local_rank < l.world_size, "local rank %d of %d", l.local_rank, l.world_size);
  if (l.local_world_size != -1)
    FUZZ_CHECK(l.local_world_size >= 1 && l.local_world_size <= l.world_size && l.local_rank < l.local_world_size,
               "local %d of %d (world %d)", l.local_rank, l.local_world_size, l.world_size);
  FUZZ_CHECK(l.timeout_ms >= 1, "timeout %lld", static_cast<long long>(l.timeout_ms));
  FUZZ_CHECK(l.store.kind != InitMethod::Kind::kEnv, "env:// left unresolved");
  FUZZ_CHECK(l.socket_ifname.size() <= 255, "interface rule of %zu bytes", l.socket_ifname.size());
  FUZZ_CHECK(l.init_timeout_ms >= 1, "init timeout %lld", static_cast<long long>(l.init_timeout_ms));
  FUZZ_CHECK(l.socket_ifname.empty() || fuzz::accepts([&] { parse_interface_rule(l.socket_ifname); }),
             "an accepted interface rule does not parse again");
  FUZZ_CHECK(l.job_token.size() <= kMaxJobTokenBytes, "token of %zu bytes", l.job_token.size());
  FUZZ_CHECK(!l.launcher.empty(), "no launcher named");
  // describe() may say whether a token is set, never what it is: the line must not change when
  // the token's bytes do. (Searching the line for the token is no proof: a token may equal a
  // piece of the line itself, as the fuzzer found.)
  std::string line = l.describe();
  LaunchEnv other = l;
  other.job_token.assign(l.job_token.size(), l.job_token.empty() ? '\0' : static_cast<char>(l.job_token[0] ^ 1));
  FUZZ_CHECK(other.describe() == line, "describe() depends on the token's bytes");
  StoreOptions o = l.store_options();
  FUZZ_CHECK(o.timeout_ms == l.init_timeout_ms, "the store is opened with another deadline than the rendezvous'");
  FUZZ_CHECK(o.rank == l.rank && o.world_size == l.world_size && o.job_token == l.job_token,
             "store options disagree with the launch");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 16384) return 0;  // a launch environment is small; keep runs fast
  Input in = parse(std::string_view(reinterpret_cast<const char *>(data), size));
  LaunchEnv l;
  if (fuzz::accepts([&] { l = resolve_launch_env(in.params, fixed_environment(in.env)); })) check(l);
  return 0;
}
