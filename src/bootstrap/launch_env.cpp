// launch_env.cpp — resolving a rank's launch settings from parameters and environment (see the
// header for the precedence rules and the launchers recognized).
#include "bootstrap/launch_env.hpp"

#include "bootstrap/netif.hpp"
#include "bootstrap/wire.hpp"
#include "common/error.hpp"

#include <cstdlib>
#include <string_view>

namespace pstate {
namespace {

struct Launcher {
  const char *name;
  const char *rank;
  const char *world_size;
  const char *local_rank;
  const char *local_world_size;  // nullptr: this launcher does not say
};

constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

constexpr std::string_view kLaunchHint =
    "set pstate_init_params_t.world_size and pstate_init_params_t.rank, or start the program with torchrun (or "
    "`pstate run`), "
    "mpirun, srun or in a Kubernetes LeaderWorkerSet (LWS_GROUP_SIZE, LWS_WORKER_INDEX)";

// Kubernetes LeaderWorkerSet: one group of LWS_GROUP_SIZE pods, the leader (LWS_WORKER_INDEX 0)
// reachable at LWS_LEADER_ADDRESS. It says nothing about processes inside a pod: LOCAL_WORLD_SIZE
// (with LOCAL_RANK) gives ranks per pod, one without it; ranks are numbered pod by pod.
constexpr const char *kLwsGroupSize = "LWS_GROUP_SIZE";
constexpr const char *kLwsWorkerIndex = "LWS_WORKER_INDEX";
constexpr const char *kLwsLeaderAddress = "LWS_LEADER_ADDRESS";
// The store's port when MASTER_PORT is not set: every pod of a group runs the same template, so
// one fixed port is the same on all of them (torch's default).
constexpr int kLwsDefaultPort = 29500;

// An environment lookup that treats an empty value as unset.
std::optional<std::string> lookup(const EnvLookup &env, const char *name) {
  std::optional<std::string> v = env(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

// A value and where it came from, for messages: "RANK=4" or "rank parameter 4".
struct Sourced {
  int value = -1;
  std::string origin;  // "RANK" or "the rank parameter"
  std::string shown() const { return origin.find(' ') == std::string::npos ? cat(origin, "=", value) : cat(origin, " ", value); }
};

// Digits only, at most 10^9. `name` names the variable in the error.
int parse_non_negative(const std::string &text, const std::string &name) {
  if (text.find_first_not_of("0123456789") != std::string::npos)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, "='", text, "' is not a non-negative integer");
  long long v = 0;
  for (char c : text) {
    v = v * 10 + (c - '0');
    if (v > 1000000000) throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, "='", text, "' is too large");
  }
  return static_cast<int>(v);
}

const Launcher *detect_launcher(const EnvLookup &env) {
  for (const Launcher &l : kLaunchers)
    if (lookup(env, l.rank) || lookup(env, l.world_size)) return &l;
  return nullptr;
}

// Reads one of the launcher's variables; `other` names its sibling for the "set but not" message.
Sourced read_launcher_var(const EnvLookup &env, const Launcher &l, const char *var, const char *other) {
  std::optional<std::string> text = lookup(env, var);
  if (!text)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, other, " is set but ", var, " is not (", l.name,
                " sets both): set ", var, ", or pass it as a parameter");
  return Sourced{parse_non_negative(*text, var), var};
}

void check_param(int value, const char *name) {
  if (value < -1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, " ", value, " is invalid: use a value >= 0, or -1 to take it from ",
                "the environment");
}

struct Ranks {
  Sourced world, rank, local_rank, local_world;
  std::string launcher;
};

bool lws_present(const EnvLookup &env) {
  return lookup(env, kLwsGroupSize) || lookup(env, kLwsWorkerIndex);
}

// Rank and world size from a LeaderWorkerSet pod (torchrun, mpirun and srun inside the pod come
// first): world = LWS_GROUP_SIZE x LOCAL_WORLD_SIZE, rank = LWS_WORKER_INDEX x LOCAL_WORLD_SIZE +
// LOCAL_RANK. Parameters, when given, win field by field as for the other launchers.
Ranks resolve_lws_ranks(const pstate_init_params_t &p, const EnvLookup &env) {
  auto need = [&](const char *var, const char *other) {
    std::optional<std::string> text = lookup(env, var);
    if (!text)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, other, " is set but ", var,
                  " is not (a LeaderWorkerSet sets both in every pod): set ", var, ", or pass world_size and rank");
    return Sourced{parse_non_negative(*text, var), var};
  };
  Sourced pods = need(kLwsGroupSize, kLwsWorkerIndex);
  Sourced index = need(kLwsWorkerIndex, kLwsGroupSize);
  if (pods.value < 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, pods.shown(), ": a LeaderWorkerSet group has at least 1 pod");
  if (index.value >= pods.value)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, index.shown(), " is out of range for ", pods.shown(), " (pods are 0..",
                pods.value - 1, ")");
  Ranks r;
  r.local_world = {1, "one rank per pod (no LOCAL_WORLD_SIZE)"};
  r.local_rank = {0, "derived"};
  if (auto text = lookup(env, "LOCAL_WORLD_SIZE")) {
    r.local_world = {parse_non_negative(*text, "LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE"};
    if (r.local_world.value < 1)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, r.local_world.shown(), ": the ranks per pod must be at least 1");
  }
  if (p.local_rank != -1) {
    r.local_rank = {p.local_rank, "the local_rank parameter"};
  } else if (auto text = lookup(env, "LOCAL_RANK")) {
    r.local_rank = {parse_non_negative(*text, "LOCAL_RANK"), "LOCAL_RANK"};
  } else if (r.local_world.value > 1) {
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, r.local_world.shown(),
                " ranks per pod of a LeaderWorkerSet need LOCAL_RANK ", "(0..", r.local_world.value - 1,
                ") in each, to number them: set it, or pass local_rank");
  }
  if (r.local_rank.value >= r.local_world.value)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "local rank ", r.local_rank.value, " is out of range for ",
                r.local_world.value, " ranks per pod (", r.local_rank.shown(), ", ", r.local_world.shown(), ")");
  r.world =
      p.world_size != -1
          ? Sourced{p.world_size, "the world_size parameter"}
          : Sourced{pods.value * r.local_world.value,
                    cat(kLwsGroupSize, " x ", r.local_world.origin == "LOCAL_WORLD_SIZE" ? "LOCAL_WORLD_SIZE" : "1")};
  r.rank = p.rank != -1 ? Sourced{p.rank, "the rank parameter"}
                        : Sourced{index.value * r.local_world.value + r.local_rank.value,
                                  cat(kLwsWorkerIndex, "=", index.value, " x ", r.local_world.value, " + local rank")};
  r.launcher = p.world_size != -1 && p.rank != -1 ? "parameters" : "LeaderWorkerSet";
  if (p.world_size != -1) r.local_world = {-1, "unknown"};  // describes the pod group, not this world
  return r;
}

Ranks resolve_ranks(const pstate_init_params_t &p, const EnvLookup &env, std::string *rank_out_of_range) {
  check_param(p.world_size, "world_size");
  check_param(p.rank, "rank");
  check_param(p.local_rank, "local_rank");
  if (p.world_size == 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT,
                "world_size 0 is invalid: it must be at least 1, or -1 to take it "
                "from the environment");
  const Launcher *l = detect_launcher(env);
  if (l == nullptr && lws_present(env) && (p.world_size == -1 || p.rank == -1)) {
    Ranks r = resolve_lws_ranks(p, env);
    if (r.rank.value >= r.world.value) {
      std::string problem = cat("rank ", r.rank.value, " is out of range for world_size ", r.world.value,
                                " (ranks are 0..", r.world.value - 1, "; ", r.rank.shown(), ", ", r.world.shown(), ")");
      if (rank_out_of_range == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, problem);
      *rank_out_of_range = problem;
    }
    return r;
  }
  Ranks r;
  if (p.world_size != -1) {
    r.world = {p.world_size, "the world_size parameter"};
  } else if (l != nullptr) {
    r.world = read_launcher_var(env, *l, l->world_size, l->rank);
  } else {
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "world_size is not known: ", kLaunchHint);
  }
  if (p.rank != -1) {
    r.rank = {p.rank, "the rank parameter"};
  } else if (l != nullptr) {
    r.rank = read_launcher_var(env, *l, l->rank, l->world_size);
  } else {
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "rank is not known: ", kLaunchHint);
  }
  r.launcher = p.world_size != -1 && p.rank != -1 ? "parameters" : l->name;
  if (r.world.value < 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, r.world.shown(), ": the world size must be at least 1");
  if (r.rank.value >= r.world.value) {
    std::string problem = cat("rank ", r.rank.value, " is out of range for world_size ", r.world.value,
                              " (ranks are 0..", r.world.value - 1, "; ", r.rank.shown(), ", ", r.world.shown(), ")");
    if (rank_out_of_range == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, problem);
    *rank_out_of_range = problem;
  }

  r.local_rank = {0, "derived"};  // until a parameter or variable says otherwise
  if (p.local_rank != -1) {
    r.local_rank = {p.local_rank, "the local_rank parameter"};
  } else if (l != nullptr) {
    if (auto text = lookup(env, l->local_rank)) r.local_rank = {parse_non_negative(*text, l->local_rank), l->local_rank};
  }
  r.local_world = {-1, "unknown"};
  // The launcher's local world size only describes the launcher's world, not a world size given
  // as a parameter.
  if (p.world_size == -1 && l != nullptr && l->local_world_size != nullptr) {
    if (auto text = lookup(env, l->local_world_size))
      r.local_world = {parse_non_negative(*text, l->local_world_size), l->local_world_size};
  }
  if (r.local_world.value != -1) {
    if (r.local_world.value < 1 || r.local_world.value > r.world.value)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, r.local_world.shown(), ": the local world size must be 1..",
                  r.world.value, " (the world size, ", r.world.shown(), ")");
    if (r.local_rank.value >= r.local_world.value)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "local rank ", r.local_rank.value,
                  " is out of range for local world size ", r.local_world.value, " (", r.local_rank.shown(), ", ",
                  r.local_world.shown(), ")");
  }
  if (r.local_rank.value >= r.world.value && (rank_out_of_range == nullptr || rank_out_of_range->empty()))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "local rank ", r.local_rank.value, " is out of range for world_size ",
                r.world.value, " (", r.local_rank.shown(), ")");
  return r;
}

// PSTATE_STORE names the store outright (etcd://..., tcp://..., file:///...): how a launcher
// without MASTER_ADDR's meaning (the etcd store has no rank 0 host) points ranks at it. It comes
// first under every launcher, a LeaderWorkerSet's included (else LWS pods would take the leader's
// tcp:// store and say nothing).
std::optional<InitMethod> pstate_store_variable(const EnvLookup &env) {
  std::optional<std::string> store = lookup(env, "PSTATE_STORE");
  if (!store) return std::nullopt;
  InitMethod m = parse_init_method(*store);
  if (m.kind == InitMethod::Kind::kEnv)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_STORE='env://' names no store: give etcd://HOST:PORT,.../PREFIX, "
                "tcp://HOST:PORT or file:///PATH, or unset it to use MASTER_ADDR and MASTER_PORT");
  return m;
}

// env:// under a LeaderWorkerSet: PSTATE_STORE; else MASTER_ADDR, else LWS_LEADER_ADDRESS (the
// leader pod runs rank 0, which serves the store); MASTER_PORT, else 29500.
InitMethod resolve_lws_store(const EnvLookup &env) {
  if (std::optional<InitMethod> named = pstate_store_variable(env)) return *named;
  std::optional<std::string> addr = lookup(env, "MASTER_ADDR");
  const char *addr_var = "MASTER_ADDR";
  if (!addr) {
    addr = lookup(env, kLwsLeaderAddress);
    addr_var = kLwsLeaderAddress;
  }
  if (!addr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method env:// in a LeaderWorkerSet needs ", kLwsLeaderAddress,
                " (the leader pod's address; LeaderWorkerSet sets it in every pod) or MASTER_ADDR, or pass "
                "init_method \"tcp://HOST:PORT\"");
  std::string host = *addr;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  validate_host(host, addr_var);
  InitMethod m;
  m.kind = InitMethod::Kind::kTcp;
  m.host = host;
  std::optional<std::string> port = lookup(env, "MASTER_PORT");
  m.port = port ? parse_port(*port, "MASTER_PORT") : kLwsDefaultPort;
  return m;
}

InitMethod resolve_env_store(const EnvLookup &env) {
  if (std::optional<InitMethod> named = pstate_store_variable(env)) return *named;
  std::optional<std::string> addr = lookup(env, "MASTER_ADDR");
  if (!addr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT,
                "init_method env:// needs MASTER_ADDR (the host of rank 0, which serves the store); torchrun and "
                "`pstate run` set it; under mpirun or srun export it (e.g. the first host of "
                "`scontrol show hostnames \"$SLURM_JOB_NODELIST\"`) or pass init_method \"tcp://HOST:PORT\"");
  std::optional<std::string> port = lookup(env, "MASTER_PORT");
  if (!port)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT,
                "init_method env:// needs MASTER_PORT (the port of rank 0's store, e.g. 29500); torchrun and "
                "`pstate run` set it; under mpirun or srun export it, or pass init_method \"tcp://HOST:PORT\"");
  std::string host = *addr;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  validate_host(host, "MASTER_ADDR");
  InitMethod m;
  m.kind = InitMethod::Kind::kTcp;
  m.host = host;
  m.port = parse_port(*port, "MASTER_PORT");
  return m;
}

// Milliseconds from a variable: digits only, at least 1.
int64_t parse_ms_variable(const std::string &name, const std::string &text) {
  if (text.find_first_not_of("0123456789") != std::string::npos || text.size() > 15)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, "='", text,
                "' is not a number of milliseconds (e.g. 120000 for 2 minutes)");
  int64_t ms = std::strtoll(text.c_str(), nullptr, 10);
  if (ms < 1) throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, "=", text, ": the timeout must be at least 1 ms");
  return ms;
}

// The rendezvous' deadline (see the header): PSTATE_INIT_TIMEOUT_MS, the timeout_ms parameter,
// or 120 s (PSTATE_TIMEOUT_MS when shorter).
void resolve_init_timeout(const pstate_init_params_t &p, const EnvLookup &env, LaunchEnv &out) {
  if (std::optional<std::string> text = lookup(env, "PSTATE_INIT_TIMEOUT_MS")) {
    out.init_timeout_ms = parse_ms_variable("PSTATE_INIT_TIMEOUT_MS", *text);
    out.init_timeout_origin = "PSTATE_INIT_TIMEOUT_MS";
  } else if (p.timeout_ms > 0) {
    out.init_timeout_ms = p.timeout_ms;
    out.init_timeout_origin = "the timeout_ms parameter; PSTATE_INIT_TIMEOUT_MS overrides it";
  } else if (out.timeout_ms < kDefaultInitTimeoutMs) {
    out.init_timeout_ms = out.timeout_ms;
    out.init_timeout_origin = "PSTATE_TIMEOUT_MS; PSTATE_INIT_TIMEOUT_MS overrides it";
  } else {
    out.init_timeout_ms = kDefaultInitTimeoutMs;
    out.init_timeout_origin = "the default; set PSTATE_INIT_TIMEOUT_MS to change it";
  }
}

int64_t resolve_timeout(const pstate_init_params_t &p, const EnvLookup &env) {
  if (p.timeout_ms < 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "timeout_ms ", p.timeout_ms,
                " is invalid: use a positive number of milliseconds, or 0 for PSTATE_TIMEOUT_MS / the default ",
                kDefaultTimeoutMs);
  if (p.timeout_ms > 0) return p.timeout_ms;
  std::optional<std::string> text = lookup(env, "PSTATE_TIMEOUT_MS");
  if (!text) return kDefaultTimeoutMs;
  if (text->find_first_not_of("0123456789") != std::string::npos || text->size() > 15)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_TIMEOUT_MS='", *text,
                "' is not a number of milliseconds (e.g. 600000 for 10 minutes)");
  int64_t ms = std::strtoll(text->c_str(), nullptr, 10);
  if (ms < 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_TIMEOUT_MS=", *text, ": the timeout must be at least 1 ms");
  return ms;
}

std::string resolve_text(const char *param, const EnvLookup &env, const char *var) {
  if (param != nullptr) return param;
  return lookup(env, var).value_or("");
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string &name) -> std::optional<std::string> {
    const char *v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup fixed_environment(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string &name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

LaunchEnv resolve_launch_env(const pstate_init_params_t &params, const EnvLookup &env, bool defer_rank_range) {
  LaunchEnv out;
  Ranks ranks = resolve_ranks(params, env, defer_rank_range ? &out.rank_out_of_range : nullptr);
  out.world_size = ranks.world.value;
  out.rank = ranks.rank.value;
  out.local_rank = ranks.local_rank.value;
  out.local_rank_given = ranks.local_rank.origin != "derived";
  out.local_world_size = ranks.local_world.value;
  out.launcher = ranks.launcher;

  InitMethod method = parse_init_method(params.init_method != nullptr ? params.init_method : "env://");
  // Inside a LeaderWorkerSet pod and under no other launcher, env:// finds the leader's store
  // even when world size and rank came as parameters.
  const bool lws_pod = detect_launcher(env) == nullptr && lws_present(env);
  out.store = method.kind != InitMethod::Kind::kEnv ? method
              : lws_pod                             ? resolve_lws_store(env)
                                                    : resolve_env_store(env);
  if (out.store.kind == InitMethod::Kind::kTcp && out.store.port == 0 && out.world_size > 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store port 0 (", out.store.url(),
                ") only works for world_size 1: every rank must know rank 0's port");

  out.timeout_ms = resolve_timeout(params, env);
  resolve_init_timeout(params, env, out);
  out.job_token = resolve_text(params.job_token, env, "PSTATE_JOB_TOKEN");
  if (out.job_token.size() > kMaxJobTokenBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "the job token (job_token / PSTATE_JOB_TOKEN) is ", out.job_token.size(),
                " bytes; at most ", kMaxJobTokenBytes);
  out.job_id = lookup(env, "PSTATE_JOB_ID").value_or("");
  if (out.job_id.size() > wire::kMaxJobIdBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_JOB_ID is ", out.job_id.size(), " bytes; at most ",
                wire::kMaxJobIdBytes);
  for (char ch : out.job_id)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_JOB_ID has a control character; use printable text");
  out.socket_ifname = resolve_text(params.socket_ifname, env, "PSTATE_SOCKET_IFNAME");
  if (!out.socket_ifname.empty()) parse_interface_rule(out.socket_ifname);  // its syntax, now
  if (auto ext = lookup(env, "PSTATE_STORE_EXTERNAL")) {
    if (*ext != "0" && *ext != "1")
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_STORE_EXTERNAL is '", *ext,
                  "'; use 1 (another process serves the store: pstate run, pstate store) or 0 (rank 0 serves it)");
    out.store_external = *ext == "1";
  }
  if (auto rejoin = lookup(env, "PSTATE_REJOIN")) {
    if (*rejoin != "0" && *rejoin != "1")
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_REJOIN is '", *rejoin,
                  "'; use 1 (this process replaces a dead rank of a running job, admitted by pstate_grow) or 0");
    out.rejoin = *rejoin == "1";
  }
  return out;
}

std::string LaunchEnv::describe() const {
  std::string local = !local_rank_given        ? std::string("local rank from the host's ranks")
                      : local_world_size >= 0 ? cat("local ", local_rank, " of ", local_world_size)
                                              : cat("local rank ", local_rank);
  return cat("rank ", rank, " of ", world_size, " (", local, ", from ", launcher, "), store ", store.url(),
             store_external ? " (served by another process)" : "", rejoin ? ", rejoining a running job" : "",
             ", timeout ", timeout_ms, " ms (rendezvous ", init_timeout_ms, " ms), ",
             job_token.empty() ? "no job token" : "job token set",
             job_id.empty() ? std::string() : ", job '" + job_id + "'",
             socket_ifname.empty() ? std::string() : ", interface " + socket_ifname);
}

StoreOptions LaunchEnv::store_options() const {
  StoreOptions o;
  o.init_method = store.url();
  o.rank = rank;
  o.world_size = world_size;
  o.job_token = job_token;
  o.job_id = job_id;
  o.socket_ifname = socket_ifname;
  o.timeout_ms = init_timeout_ms;
  o.serve = !store_external && !rejoin;  // a replacement never serves: the job's store is running
  o.rejoin = rejoin;
  return o;
}

}  // namespace pstate
