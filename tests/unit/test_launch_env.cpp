// test_launch_env.cpp — resolving a rank's launch settings from pstate_init_params_t and a fixed
// environment: torchrun variables, the Open MPI, Slurm and Kubernetes LeaderWorkerSet fallbacks
// and their precedence,
// parameters overriding the environment, init_method parsing (env://, tcp:// with IPv4, names
// and bracketed IPv6, file://), timeout, job token and socket interface; and one test per error
// message. Also the interface-name → IPv4 helper on this host's loopback.
#include "bootstrap/init_method.hpp"
#include "bootstrap/launch_env.hpp"
#include "bootstrap/netif.hpp"

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using pstest::expect_error;

namespace {

using Vars = std::map<std::string, std::string>;

const Vars kTorchrun = {{"RANK", "3"},          {"WORLD_SIZE", "8"},         {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};

pstate_init_params_t defaults() {
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  return p;
}

LaunchEnv resolve(const Vars &vars, pstate_init_params_t p = defaults()) {
  return resolve_launch_env(p, fixed_environment(vars));
}

Vars with(Vars base, const Vars &changes) {
  for (const auto &[k, v] : changes) base[k] = v;
  return base;
}

Vars without(Vars base, const std::string &name) {
  base.erase(name);
  return base;
}

void expect_invalid(const Vars &vars, std::initializer_list<std::string> fragments, pstate_init_params_t p = defaults()) {
  expect_error([&] { resolve(vars, p); }, PSTATE_ERR_INVALID_ARGUMENT, fragments);
}

// ---- launchers ----------------------------------------------------------------------------------

void test_torchrun_variables_give_ranks_and_store(void **) {
  LaunchEnv e = resolve(kTorchrun);
  assert_int_equal(e.rank, 3);
  assert_int_equal(e.world_size, 8);
  assert_int_equal(e.local_rank, 1);
  assert_int_equal(e.local_world_size, 4);
  assert_string_equal(e.launcher.c_str(), "torchrun");
  assert_int_equal(static_cast<int>(e.store.kind), static_cast<int>(InitMethod::Kind::kTcp));
  assert_string_equal(e.store.url().c_str(), "tcp://10.0.0.1:29500");
  assert_int_equal(e.timeout_ms, 600000);
  assert_true(e.job_token.empty());
  assert_true(e.socket_ifname.empty());
}

void test_open_mpi_variables_are_the_first_fallback(void **) {
  LaunchEnv e = resolve({{"OMPI_COMM_WORLD_RANK", "2"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                         {"SLURM_PROCID", "0"},  // mpirun inside a Slurm allocation
                         {"SLURM_NTASKS", "1"},
                         {"MASTER_ADDR", "node1"},
                         {"MASTER_PORT", "29500"}});
  assert_int_equal(e.rank, 2);
  assert_int_equal(e.world_size, 4);
  assert_int_equal(e.local_rank, 0);
  assert_int_equal(e.local_world_size, 2);
  assert_string_equal(e.launcher.c_str(), "mpirun");
}

void test_slurm_variables_are_the_second_fallback(void **) {
  LaunchEnv e = resolve({{"SLURM_PROCID", "5"},
                         {"SLURM_NTASKS", "6"},
                         {"SLURM_LOCALID", "1"},
                         {"MASTER_ADDR", "node1"},
                         {"MASTER_PORT", "29500"}});
  assert_int_equal(e.rank, 5);
  assert_int_equal(e.world_size, 6);
  assert_int_equal(e.local_rank, 1);
  assert_int_equal(e.local_world_size, -1);
  assert_string_equal(e.launcher.c_str(), "srun");
}

void test_torchrun_wins_over_slurm_and_open_mpi(void **) {
  LaunchEnv e = resolve(with(kTorchrun, {{"SLURM_PROCID", "0"},
                                         {"SLURM_NTASKS", "2"},
                                         {"OMPI_COMM_WORLD_RANK", "1"},
                                         {"OMPI_COMM_WORLD_SIZE", "2"}}));
  assert_int_equal(e.rank, 3);
  assert_int_equal(e.world_size, 8);
  assert_string_equal(e.launcher.c_str(), "torchrun");
}

// A LeaderWorkerSet pod: 3 pods, this one the second worker, the leader at a service name.
const Vars kLws = {{"LWS_GROUP_SIZE", "3"},
                   {"LWS_WORKER_INDEX", "2"},
                   {"LWS_LEADER_ADDRESS", "sgl-0.sgl.default"},
                   {"LWS_NAME", "sgl"}};

void test_leaderworkerset_pods_give_one_rank_each_and_the_leaders_store(void **) {
  LaunchEnv e = resolve(kLws);
  assert_int_equal(e.rank, 2);
  assert_int_equal(e.world_size, 3);
  assert_int_equal(e.local_rank, 0);
  assert_int_equal(e.local_world_size, 1);
  assert_string_equal(e.launcher.c_str(), "LeaderWorkerSet");
  assert_string_equal(e.store.url().c_str(), "tcp://sgl-0.sgl.default:29500");  // torch's default port
  LaunchEnv leader = resolve(with(kLws, {{"LWS_WORKER_INDEX", "0"}}));
  assert_int_equal(leader.rank, 0);
  assert_string_equal(leader.store.url().c_str(), "tcp://sgl-0.sgl.default:29500");
}

void test_leaderworkerset_with_local_world_size_numbers_ranks_pod_by_pod(void **) {
  LaunchEnv e = resolve(with(kLws, {{"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}, {"MASTER_PORT", "31000"}}));
  assert_int_equal(e.world_size, 12);
  assert_int_equal(e.rank, 2 * 4 + 3);
  assert_int_equal(e.local_rank, 3);
  assert_int_equal(e.local_world_size, 4);
  assert_string_equal(e.store.url().c_str(), "tcp://sgl-0.sgl.default:31000");
  assert_true(e.describe().find("rank 11 of 12 (local 3 of 4, from LeaderWorkerSet)") != std::string::npos);
  // MASTER_ADDR, when the job sets it, names the store instead of the leader's address.
  LaunchEnv m = resolve(with(kLws, {{"MASTER_ADDR", "10.1.2.3"}}));
  assert_string_equal(m.store.url().c_str(), "tcp://10.1.2.3:29500");
}

// PSTATE_STORE comes first in a LeaderWorkerSet pod too (an etcd cluster instead of the leader's
// store), and a pod whose world size and rank are parameters still finds the leader's store.
void test_leaderworkerset_honours_pstate_store_and_parameters(void **) {
  LaunchEnv e = resolve(with(kLws, {{"PSTATE_STORE", "etcd://10.0.0.5:2379,10.0.0.6:2379/jobs/sgl"},
                                    {"MASTER_ADDR", "10.1.2.3"}}));
  assert_string_equal(e.launcher.c_str(), "LeaderWorkerSet");
  assert_int_equal(e.rank, 2);
  assert_string_equal(e.store.url().c_str(), "etcd://10.0.0.5:2379,10.0.0.6:2379/jobs/sgl");
  expect_invalid(with(kLws, {{"PSTATE_STORE", "env://"}}), {"PSTATE_STORE='env://' names no store"});
  pstate_init_params_t p = defaults();
  p.rank = 1;
  p.world_size = 3;
  LaunchEnv given = resolve(kLws, p);
  assert_string_equal(given.launcher.c_str(), "parameters");
  assert_string_equal(given.store.url().c_str(), "tcp://sgl-0.sgl.default:29500");
  LaunchEnv given_etcd = resolve(with(kLws, {{"PSTATE_STORE", "etcd://e1:2379/j"}}), p);
  assert_string_equal(given_etcd.store.url().c_str(), "etcd://e1:2379/j");
}

void test_a_launcher_inside_a_leaderworkerset_pod_wins(void **) {
  LaunchEnv e = resolve(with(kLws, kTorchrun));
  assert_string_equal(e.launcher.c_str(), "torchrun");
  assert_int_equal(e.rank, 3);
  assert_string_equal(e.store.url().c_str(), "tcp://10.0.0.1:29500");
}

void test_leaderworkerset_errors_name_the_variable_and_the_fix(void **) {
  expect_invalid(without(kLws, "LWS_WORKER_INDEX"), {"LWS_GROUP_SIZE is set but LWS_WORKER_INDEX is not"});
  expect_invalid(without(kLws, "LWS_GROUP_SIZE"), {"LWS_WORKER_INDEX is set but LWS_GROUP_SIZE is not"});
  expect_invalid(with(kLws, {{"LWS_WORKER_INDEX", "3"}}), {"LWS_WORKER_INDEX=3 is out of range for LWS_GROUP_SIZE=3"});
  expect_invalid(with(kLws, {{"LWS_GROUP_SIZE", "0"}, {"LWS_WORKER_INDEX", "0"}}),
                 {"LWS_GROUP_SIZE=0", "at least 1 pod"});
  expect_invalid(with(kLws, {{"LWS_WORKER_INDEX", "x"}}), {"LWS_WORKER_INDEX='x' is not a non-negative integer"});
  expect_invalid(with(kLws, {{"LOCAL_WORLD_SIZE", "2"}}), {"LOCAL_WORLD_SIZE=2 ranks per pod", "need LOCAL_RANK"});
  expect_invalid(with(kLws, {{"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}),
                 {"local rank 2 is out of range for 2 ranks per pod"});
  expect_invalid(with(kLws, {{"LOCAL_WORLD_SIZE", "0"}}), {"LOCAL_WORLD_SIZE=0", "at least 1"});
  expect_invalid(without(kLws, "LWS_LEADER_ADDRESS"), {"needs LWS_LEADER_ADDRESS"});
  expect_invalid(with(kLws, {{"LWS_LEADER_ADDRESS", "bad host!"}}), {"LWS_LEADER_ADDRESS"});
}

void test_parameters_override_the_environment(void **) {
  pstate_init_params_t p = defaults();
  p.rank = 1;
  p.world_size = 2;
  p.local_rank = 0;
  p.init_method = "tcp://127.0.0.1:1234";
  p.timeout_ms = 1500;
  p.job_token = "from-params";
  p.socket_ifname = "eth7";
  LaunchEnv e = resolve(with(kTorchrun, {{"PSTATE_JOB_TOKEN", "from-env"}, {"PSTATE_TIMEOUT_MS", "9"}}), p);
  assert_int_equal(e.rank, 1);
  assert_int_equal(e.world_size, 2);
  assert_int_equal(e.local_rank, 0);
  assert_string_equal(e.launcher.c_str(), "parameters");
  assert_string_equal(e.store.url().c_str(), "tcp://127.0.0.1:1234");
  assert_int_equal(e.timeout_ms, 1500);
  assert_string_equal(e.job_token.c_str(), "from-params");
  assert_string_equal(e.socket_ifname.c_str(), "eth7");
}

void test_world_size_parameter_with_rank_from_environment(void **) {
  pstate_init_params_t p = defaults();
  p.world_size = 8;
  LaunchEnv e = resolve(without(kTorchrun, "WORLD_SIZE"), p);
  assert_int_equal(e.rank, 3);
  assert_int_equal(e.world_size, 8);
}

void test_local_rank_missing_is_left_to_the_rendezvous(void **) {
  LaunchEnv e = resolve(without(without(kTorchrun, "LOCAL_RANK"), "LOCAL_WORLD_SIZE"));
  assert_false(e.local_rank_given);
  assert_int_equal(e.local_world_size, -1);
  assert_non_null(std::strstr(e.describe().c_str(), "local rank from the host's ranks"));
  assert_true(resolve(kTorchrun).local_rank_given);
  pstate_init_params_t p = defaults();
  p.local_rank = 2;
  assert_true(resolve(without(kTorchrun, "LOCAL_RANK"), p).local_rank_given);
}

void test_empty_variables_count_as_unset(void **) {
  LaunchEnv e = resolve(with(kTorchrun, {{"LOCAL_RANK", ""}, {"PSTATE_JOB_TOKEN", ""}, {"SLURM_PROCID", ""}}));
  assert_int_equal(e.local_rank, 0);
  assert_true(e.job_token.empty());
}

// ---- rank and world size errors -------------------------------------------------------------

void test_non_numeric_rank_is_refused(void **) {
  expect_invalid(with(kTorchrun, {{"RANK", "abc"}}), {"RANK='abc' is not a non-negative integer"});
  expect_invalid(with(kTorchrun, {{"RANK", "-1"}}), {"RANK='-1' is not a non-negative integer"});
  expect_invalid(with(kTorchrun, {{"RANK", " 3"}}), {"RANK=' 3' is not a non-negative integer"});
  expect_invalid(with(kTorchrun, {{"WORLD_SIZE", "8x"}}), {"WORLD_SIZE='8x' is not a non-negative integer"});
  expect_invalid(with(kTorchrun, {{"LOCAL_RANK", "one"}}), {"LOCAL_RANK='one'"});
}

void test_too_large_world_size_is_refused(void **) {
  expect_invalid(with(kTorchrun, {{"WORLD_SIZE", "99999999999"}}), {"WORLD_SIZE='99999999999' is too large"});
}

void test_zero_world_size_is_refused(void **) {
  expect_invalid(with(kTorchrun, {{"WORLD_SIZE", "0"}, {"RANK", "0"}}), {"WORLD_SIZE=0: the world size must be at least 1"});
  pstate_init_params_t p = defaults();
  p.world_size = 0;
  expect_invalid(kTorchrun, {"world_size 0 is invalid"}, p);
}

void test_rank_not_below_world_size_is_refused(void **) {
  expect_invalid(with(kTorchrun, {{"RANK", "8"}}),
                 {"rank 8 is out of range for world_size 8 (ranks are 0..7; RANK=8, WORLD_SIZE=8)"});
  pstate_init_params_t p = defaults();
  p.rank = 4;
  p.world_size = 4;
  expect_invalid({}, {"rank 4 is out of range for world_size 4", "the rank parameter 4"}, p);
}

void test_half_of_a_launchers_pair_is_refused(void **) {
  expect_invalid(without(kTorchrun, "WORLD_SIZE"), {"RANK is set but WORLD_SIZE is not (torchrun sets both)"});
  expect_invalid(without(kTorchrun, "RANK"), {"WORLD_SIZE is set but RANK is not"});
  expect_invalid({{"SLURM_PROCID", "1"}}, {"SLURM_PROCID is set but SLURM_NTASKS is not (srun sets both)"});
}

void test_no_launcher_and_no_parameters_is_refused(void **) {
  expect_invalid({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, {"world_size is not known", "torchrun", "mpirun", "srun"});
  pstate_init_params_t p = defaults();
  p.world_size = 4;
  expect_invalid({}, {"rank is not known"}, p);
}

void test_negative_parameters_other_than_minus_one_are_refused(void **) {
  pstate_init_params_t p = defaults();
  p.rank = -2;
  expect_invalid(kTorchrun, {"rank -2 is invalid", "-1 to take it from the environment"}, p);
  p = defaults();
  p.local_rank = -5;
  expect_invalid(kTorchrun, {"local_rank -5 is invalid"}, p);
}

void test_local_rank_outside_local_world_is_refused(void **) {
  expect_invalid(with(kTorchrun, {{"LOCAL_RANK", "4"}}),
                 {"local rank 4 is out of range for local world size 4 (LOCAL_RANK=4, LOCAL_WORLD_SIZE=4)"});
  expect_invalid(with(kTorchrun, {{"LOCAL_WORLD_SIZE", "16"}}), {"LOCAL_WORLD_SIZE=16: the local world size must be 1..8"});
  expect_invalid(with(without(kTorchrun, "LOCAL_WORLD_SIZE"), {{"LOCAL_RANK", "9"}}),
                 {"local rank 9 is out of range for world_size 8"});
}

// ---- the store address ------------------------------------------------------------------------

void test_env_init_method_needs_master_addr_and_port(void **) {
  expect_invalid(without(kTorchrun, "MASTER_ADDR"), {"init_method env:// needs MASTER_ADDR", "scontrol show hostnames"});
  expect_invalid(without(kTorchrun, "MASTER_PORT"), {"init_method env:// needs MASTER_PORT"});
}

void test_master_port_must_be_a_port(void **) {
  expect_invalid(with(kTorchrun, {{"MASTER_PORT", "http"}}), {"MASTER_PORT 'http' is not a port number (1..65535)"});
  expect_invalid(with(kTorchrun, {{"MASTER_PORT", "70000"}}), {"MASTER_PORT 70000 is out of range (1..65535)"});
  expect_invalid(with(kTorchrun, {{"MASTER_PORT", "0"}}), {"port 0", "only works for world_size 1"});
}

void test_port_zero_is_allowed_for_a_world_of_one(void **) {
  LaunchEnv e = resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "0"}});
  assert_int_equal(e.store.port, 0);
}

void test_master_addr_must_be_a_host(void **) {
  expect_invalid(with(kTorchrun, {{"MASTER_ADDR", "a b"}}), {"MASTER_ADDR 'a b' is not a host name or address"});
  expect_invalid(with(kTorchrun, {{"MASTER_ADDR", "host/x"}}), {"MASTER_ADDR 'host/x'"});
}

void test_master_addr_may_be_ipv6_with_or_without_brackets(void **) {
  assert_string_equal(resolve(with(kTorchrun, {{"MASTER_ADDR", "::1"}})).store.url().c_str(), "tcp://[::1]:29500");
  assert_string_equal(resolve(with(kTorchrun, {{"MASTER_ADDR", "[fe80::1]"}})).store.url().c_str(),
                      "tcp://[fe80::1]:29500");
}

void test_tcp_init_method_forms(void **) {
  InitMethod a = parse_init_method("tcp://node-1.cluster:29500");
  assert_string_equal(a.host.c_str(), "node-1.cluster");
  assert_int_equal(a.port, 29500);
  InitMethod b = parse_init_method("tcp://[::1]:80");
  assert_string_equal(b.host.c_str(), "::1");
  assert_string_equal(b.url().c_str(), "tcp://[::1]:80");
  assert_string_equal(parse_init_method("tcp://0.0.0.0:1").host.c_str(), "0.0.0.0");
}

void test_bad_tcp_init_methods_are_refused_with_the_fix(void **) {
  auto bad = [](const char *text, std::initializer_list<std::string> fragments) {
    expect_error([&] { parse_init_method(text); }, PSTATE_ERR_INVALID_ARGUMENT, fragments);
  };
  bad("tcp://::1:29500", {"put IPv6 addresses in brackets: tcp://[::1]:29500"});
  bad("tcp://host", {"no port: use tcp://HOST:PORT"});
  bad("tcp://host:", {"port is empty"});
  bad("tcp://:29500", {"no host"});
  bad("tcp://host:29500/path", {"unexpected '/path' after the port"});
  bad("tcp://host:99999", {"port 99999 is out of range (1..65535)"});
  bad("tcp://host:12ab", {"'12ab' is not a port number"});
  bad("tcp://[::1:29500", {"'[' without ']'"});
  bad("tcp://[::1]29500", {"no port"});
  bad("tcp://[host]:1", {"brackets are only for IPv6 addresses"});
}

void test_other_init_method_errors(void **) {
  auto bad = [](const char *text, std::initializer_list<std::string> fragments) {
    expect_error([&] { parse_init_method(text); }, PSTATE_ERR_INVALID_ARGUMENT, fragments);
  };
  bad("", {"init_method is empty"});
  bad("localhost:29500", {"has no scheme", "env://, tcp://HOST:PORT or file:///PATH"});
  bad("http://x:1", {"scheme 'http' is not supported"});
  bad("env://x", {"env:// takes nothing after it"});
  bad("file://relative/dir", {"absolute path, with three slashes"});
  bad("file://", {"absolute path"});
}

void test_file_init_method_needs_no_master_variables(void **) {
  pstate_init_params_t p = defaults();
  p.init_method = "file:///shared/job42/";
  LaunchEnv e = resolve(without(without(kTorchrun, "MASTER_ADDR"), "MASTER_PORT"), p);
  assert_int_equal(static_cast<int>(e.store.kind), static_cast<int>(InitMethod::Kind::kFile));
  assert_string_equal(e.store.path.c_str(), "/shared/job42");
  assert_string_equal(e.store_options().init_method.c_str(), "file:///shared/job42");
}

// ---- timeout, token, interface --------------------------------------------------------------

void test_timeout_from_environment_and_its_errors(void **) {
  assert_int_equal(resolve(with(kTorchrun, {{"PSTATE_TIMEOUT_MS", "5000"}})).timeout_ms, 5000);
  expect_invalid(with(kTorchrun, {{"PSTATE_TIMEOUT_MS", "10s"}}), {"PSTATE_TIMEOUT_MS='10s' is not a number of milliseconds"});
  expect_invalid(with(kTorchrun, {{"PSTATE_TIMEOUT_MS", "0"}}), {"PSTATE_TIMEOUT_MS=0: the timeout must be at least 1 ms"});
  pstate_init_params_t p = defaults();
  p.timeout_ms = -1;
  expect_invalid(kTorchrun, {"timeout_ms -1 is invalid"}, p);
}

void test_job_token_from_environment_and_its_limit(void **) {
  assert_string_equal(resolve(with(kTorchrun, {{"PSTATE_JOB_TOKEN", "s3cret"}})).job_token.c_str(), "s3cret");
  expect_invalid(with(kTorchrun, {{"PSTATE_JOB_TOKEN", std::string(5000, 't')}}), {"5000 bytes; at most 4096"});
}

void test_empty_token_parameter_means_none_even_with_environment(void **) {
  pstate_init_params_t p = defaults();
  p.job_token = "";
  assert_true(resolve(with(kTorchrun, {{"PSTATE_JOB_TOKEN", "env-token"}}), p).job_token.empty());
}

void test_socket_ifname_from_environment_and_its_errors(void **) {
  assert_string_equal(resolve(with(kTorchrun, {{"PSTATE_SOCKET_IFNAME", "eth1"}})).socket_ifname.c_str(), "eth1");
  expect_invalid(with(kTorchrun, {{"PSTATE_SOCKET_IFNAME", "eth/1"}}), {"socket interface 'eth/1'", "not an interface name"});
  expect_invalid(with(kTorchrun, {{"PSTATE_SOCKET_IFNAME", "a-very-long-ifname"}}), {"at most 15 characters"});
}

void test_describe_never_prints_the_token(void **) {
  LaunchEnv e = resolve(with(kTorchrun, {{"PSTATE_JOB_TOKEN", "do-not-print-me"}, {"PSTATE_SOCKET_IFNAME", "eth1"}}));
  std::string line = e.describe();
  assert_null(std::strstr(line.c_str(), "do-not-print-me"));
  assert_non_null(std::strstr(line.c_str(), "rank 3 of 8 (local 1 of 4, from torchrun)"));
  assert_non_null(std::strstr(line.c_str(), "tcp://10.0.0.1:29500"));
  assert_non_null(std::strstr(line.c_str(), "job token set"));
  assert_non_null(std::strstr(line.c_str(), "interface eth1"));
}

void test_store_options_mirror_the_launch_settings(void **) {
  StoreOptions o = resolve(with(kTorchrun, {{"PSTATE_JOB_TOKEN", "t"}, {"PSTATE_TIMEOUT_MS", "777"}})).store_options();
  assert_string_equal(o.init_method.c_str(), "tcp://10.0.0.1:29500");
  assert_int_equal(o.rank, 3);
  assert_int_equal(o.world_size, 8);
  assert_string_equal(o.job_token.c_str(), "t");
  assert_int_equal(o.timeout_ms, 777);
  assert_true(o.serve);
}

// ---- the rendezvous' deadline, job id, deferred rank range ----------------------------------

void test_init_timeout_is_its_own_default_120_s_or_what_is_given(void **) {
  LaunchEnv e = resolve(kTorchrun);
  assert_int_equal(e.init_timeout_ms, 120000);  // collectives keep 600 s
  assert_int_equal(e.timeout_ms, 600000);
  assert_int_equal(resolve(with(kTorchrun, {{"PSTATE_TIMEOUT_MS", "5000"}})).init_timeout_ms, 5000);  // shorter wins
  assert_int_equal(resolve(with(kTorchrun, {{"PSTATE_TIMEOUT_MS", "900000"}})).init_timeout_ms, 120000);
  assert_int_equal(resolve(with(kTorchrun, {{"PSTATE_INIT_TIMEOUT_MS", "300000"}})).init_timeout_ms, 300000);
  pstate_init_params_t p = defaults();
  p.timeout_ms = 3000;  // the caller's word for this call
  assert_int_equal(resolve(kTorchrun, p).init_timeout_ms, 3000);
  LaunchEnv both = resolve(with(kTorchrun, {{"PSTATE_INIT_TIMEOUT_MS", "2000"}}), p);
  assert_int_equal(both.init_timeout_ms, 2000);
  assert_string_equal(both.init_timeout_origin.c_str(), "PSTATE_INIT_TIMEOUT_MS");
  assert_int_equal(both.store_options().timeout_ms, 2000);  // it bounds opening the store too
  expect_invalid(with(kTorchrun, {{"PSTATE_INIT_TIMEOUT_MS", "2m"}}),
                 {"PSTATE_INIT_TIMEOUT_MS='2m' is not a number of milliseconds"});
  expect_invalid(with(kTorchrun, {{"PSTATE_INIT_TIMEOUT_MS", "0"}}),
                 {"PSTATE_INIT_TIMEOUT_MS=0: the timeout must be at least 1 ms"});
}

void test_job_id_from_environment_and_its_limits(void **) {
  assert_string_equal(resolve(with(kTorchrun, {{"PSTATE_JOB_ID", "llama-70b #3"}})).job_id.c_str(), "llama-70b #3");
  assert_string_equal(resolve(with(kTorchrun, {{"PSTATE_JOB_ID", "j"}})).store_options().job_id.c_str(), "j");
  expect_invalid(with(kTorchrun, {{"PSTATE_JOB_ID", std::string(300, 'j')}}),
                 {"PSTATE_JOB_ID is 300 bytes; at most 256"});
  expect_invalid(with(kTorchrun, {{"PSTATE_JOB_ID", "a\nb"}}), {"PSTATE_JOB_ID has a control character"});
}

void test_rank_out_of_range_can_be_deferred_to_tell_the_store(void **) {
  auto env = with(kTorchrun, {{"RANK", "8"}, {"LOCAL_RANK", "0"}});
  expect_invalid(env, {"rank 8 is out of range for world_size 8"});
  pstate_init_params_t p = defaults();
  LaunchEnv e = resolve_launch_env(p, fixed_environment(env), /*defer_rank_range=*/true);
  assert_int_equal(e.rank, 8);
  assert_non_null(std::strstr(e.rank_out_of_range.c_str(), "rank 8 is out of range for world_size 8 (ranks are 0..7"));
  assert_string_equal(e.store_options().init_method.c_str(), "tcp://10.0.0.1:29500");
}

// ---- interfaces: NCCL_SOCKET_IFNAME's syntax ----------------------------------------------------

std::vector<std::string> names_of(const std::vector<InterfaceAddress> &list) {
  std::vector<std::string> out;
  for (const auto &i : list) out.push_back(i.name);
  return out;
}

void test_interface_rules_have_nccl_syntax(void **) {
  const std::vector<InterfaceAddress> host = {
      {"lo", "127.0.0.1"}, {"eth0", "10.0.0.2"}, {"eth1", "10.1.0.2"}, {"docker0", "172.17.0.1"}, {"ib0", "10.2.0.2"}};
  using V = std::vector<std::string>;
  assert_true(names_of(select_interfaces("eth", host)) == (V{"eth0", "eth1"}));  // prefix
  assert_true(names_of(select_interfaces("eth1", host)) == (V{"eth1"}));
  assert_true(names_of(select_interfaces("=eth0", host)) == (V{"eth0"}));                      // exact
  assert_true(names_of(select_interfaces("eth0,ib", host)) == (V{"eth0", "ib0"}));             // a list
  assert_true(names_of(select_interfaces("^lo,docker", host)) == (V{"eth0", "eth1", "ib0"}));  // exclusions
  assert_true(names_of(select_interfaces("^=eth0", host)) == (V{"lo", "eth1", "docker0", "ib0"}));
  expect_error([&] { select_interfaces("=eth", host); }, PSTATE_ERR_INVALID_ARGUMENT,
               {"socket interface '=eth'", "matches no interface", "eth0 10.0.0.2"});
  for (const char *bad : {"^", "eth0,,eth1", "=", "eth 0", "a-very-long-ifname"})
    expect_error([&] { parse_interface_rule(bad); }, PSTATE_ERR_INVALID_ARGUMENT,
                 {"PSTATE_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"});
  assert_string_equal(resolve(with(kTorchrun, {{"PSTATE_SOCKET_IFNAME", "^lo,docker0"}})).socket_ifname.c_str(),
                      "^lo,docker0");
}

void test_loopback_interface_of_this_host(void **) {
  auto lo = select_interfaces("=lo");
  assert_int_equal(lo.size(), 1);
  assert_string_equal(lo[0].ipv4.c_str(), "127.0.0.1");
  assert_string_equal(interface_toward("lo", "127.0.0.1").ipv4.c_str(), "127.0.0.1");
  assert_true(is_loopback_ipv4("127.0.0.1") && !is_loopback_ipv4("10.0.0.1"));
  expect_error([] { select_interfaces("nosuchif0"); }, PSTATE_ERR_INVALID_ARGUMENT,
               {"'nosuchif0'", "matches no interface with an IPv4 address", "lo 127.0.0.1"});
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_torchrun_variables_give_ranks_and_store),
      cmocka_unit_test(test_open_mpi_variables_are_the_first_fallback),
      cmocka_unit_test(test_slurm_variables_are_the_second_fallback),
      cmocka_unit_test(test_leaderworkerset_pods_give_one_rank_each_and_the_leaders_store),
      cmocka_unit_test(test_leaderworkerset_with_local_world_size_numbers_ranks_pod_by_pod),
      cmocka_unit_test(test_leaderworkerset_honours_pstate_store_and_parameters),
      cmocka_unit_test(test_a_launcher_inside_a_leaderworkerset_pod_wins),
      cmocka_unit_test(test_leaderworkerset_errors_name_the_variable_and_the_fix),
      cmocka_unit_test(test_torchrun_wins_over_slurm_and_open_mpi),
      cmocka_unit_test(test_parameters_override_the_environment),
      cmocka_unit_test(test_world_size_parameter_with_rank_from_environment),
      cmocka_unit_test(test_local_rank_missing_is_left_to_the_rendezvous),
      cmocka_unit_test(test_empty_variables_count_as_unset),
      cmocka_unit_test(test_non_numeric_rank_is_refused),
      cmocka_unit_test(test_too_large_world_size_is_refused),
      cmocka_unit_test(test_zero_world_size_is_refused),
      cmocka_unit_test(test_rank_not_below_world_size_is_refused),
      cmocka_unit_test(test_half_of_a_launchers_pair_is_refused),
      cmocka_unit_test(test_no_launcher_and_no_parameters_is_refused),
      cmocka_unit_test(test_negative_parameters_other_than_minus_one_are_refused),
      cmocka_unit_test(test_local_rank_outside_local_world_is_refused),
      cmocka_unit_test(test_env_init_method_needs_master_addr_and_port),
      cmocka_unit_test(test_master_port_must_be_a_port),
      cmocka_unit_test(test_port_zero_is_allowed_for_a_world_of_one),
      cmocka_unit_test(test_master_addr_must_be_a_host),
      cmocka_unit_test(test_master_addr_may_be_ipv6_with_or_without_brackets),
      cmocka_unit_test(test_tcp_init_method_forms),
      cmocka_unit_test(test_bad_tcp_init_methods_are_refused_with_the_fix),
      cmocka_unit_test(test_other_init_method_errors),
      cmocka_unit_test(test_file_init_method_needs_no_master_variables),
      cmocka_unit_test(test_timeout_from_environment_and_its_errors),
      cmocka_unit_test(test_job_token_from_environment_and_its_limit),
      cmocka_unit_test(test_empty_token_parameter_means_none_even_with_environment),
      cmocka_unit_test(test_socket_ifname_from_environment_and_its_errors),
      cmocka_unit_test(test_describe_never_prints_the_token),
      cmocka_unit_test(test_store_options_mirror_the_launch_settings),
      cmocka_unit_test(test_init_timeout_is_its_own_default_120_s_or_what_is_given),
      cmocka_unit_test(test_job_id_from_environment_and_its_limits),
      cmocka_unit_test(test_rank_out_of_range_can_be_deferred_to_tell_the_store),
      cmocka_unit_test(test_interface_rules_have_nccl_syntax),
      cmocka_unit_test(test_loopback_interface_of_this_host),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
