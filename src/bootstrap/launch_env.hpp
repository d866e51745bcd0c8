// launch_env.hpp — how this rank starts: world size, rank, local rank, store address, timeout,
// job token and socket interface, from pstate_init_params_t and the environment.
//
// Precedence, field by field: an explicit parameter (world_size/rank/local_rank != -1, a non-NULL
// string, timeout_ms != 0) wins; then the launcher's variables; then the default. The launcher is
// recognized by its variables, first match wins (so torchrun inside an srun step, or mpirun inside
// a Slurm allocation, is read as torchrun / mpirun):
//   torchrun  RANK  WORLD_SIZE  LOCAL_RANK  LOCAL_WORLD_SIZE
//   mpirun    OMPI_COMM_WORLD_RANK  OMPI_COMM_WORLD_SIZE  OMPI_COMM_WORLD_LOCAL_RANK
//             OMPI_COMM_WORLD_LOCAL_SIZE
//   srun      SLURM_PROCID  SLURM_NTASKS  SLURM_LOCALID
//   Kubernetes LeaderWorkerSet (checked last: a launcher inside a pod wins)
//             LWS_GROUP_SIZE pods, this pod LWS_WORKER_INDEX (0: the leader), LOCAL_WORLD_SIZE
//             ranks per pod (default 1; more need LOCAL_RANK): world = pods x ranks per pod,
//             rank = LWS_WORKER_INDEX x ranks per pod + LOCAL_RANK; env:// is
//             tcp://LWS_LEADER_ADDRESS:MASTER_PORT (MASTER_ADDR wins when set; port default 29500,
//             the same in every pod of the template)
// and rank and world size are both read from that launcher's variables (never mixed across
// launchers). An empty variable counts as unset.
// init_method NULL or "env://" means PSTATE_STORE when set (any init method but env://, e.g.
// etcd://h1:2379,h2:2379,h3:2379/job7: the etcd store, etcd_store.hpp), else
// tcp://MASTER_ADDR:MASTER_PORT. mpirun and srun do not set
// those: export them (MASTER_ADDR = the host of rank 0, e.g. the first of
// `scontrol show hostnames "$SLURM_JOB_NODELIST"`; MASTER_PORT = a free port agreed by the job,
// e.g. 29500) or pass init_method; pstate does not guess them, since a guess that is wrong on one
// node is a 10-minute hang instead of a clear error.
// Own knobs: PSTATE_TIMEOUT_MS (default 600000), PSTATE_INIT_TIMEOUT_MS, PSTATE_JOB_TOKEN,
// PSTATE_JOB_ID, PSTATE_SOCKET_IFNAME (a rule in NCCL_SOCKET_IFNAME's syntax: netif.hpp).
// The rendezvous has its own deadline, shorter than a collective's (a slow peer in a collective
// is normal; a rank missing at start-up is a deployment mistake to report soon):
// PSTATE_INIT_TIMEOUT_MS when set, else the timeout_ms parameter when given (the caller's word
// for this call), else 120000 ms or PSTATE_TIMEOUT_MS when that is shorter.
//
// Every problem is PSTATE_ERR_INVALID_ARGUMENT with one message per cause that names the
// variable or parameter, its value and the fix. The environment is passed in as a lookup
// function, so tests and fuzzers can feed any environment without touching the process's.
#pragma once

#include "bootstrap/init_method.hpp"
#include "bootstrap/store.hpp"

#include <pstate/pstate.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace pstate {

// Returns the variable's value, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string &name)>;

// The real environment (getenv), and a fixed one for tests and fuzzers.
EnvLookup process_environment();
EnvLookup fixed_environment(std::map<std::string, std::string> vars);

struct LaunchEnv {
  int world_size = 1;
  int rank = 0;
  int local_rank = 0;         // LOCAL_RANK & co., or the local_rank parameter
  bool local_rank_given = true;  // false: nothing gave it; the rendezvous derives it (the rank's
                                 // index among the ranks of its host, in rank order)
  int local_world_size = -1;  // -1 = unknown (srun, or world_size given as a parameter)
  InitMethod store;           // kTcp, kFile or kEtcd; env:// is already resolved (PSTATE_STORE, MASTER_ADDR)
  int64_t timeout_ms = 600000;
  int64_t init_timeout_ms = 120000;  // the rendezvous' deadline (see above)
  std::string init_timeout_origin;   // "PSTATE_INIT_TIMEOUT_MS", "the timeout_ms parameter", ...
  std::string job_token;      // empty = none
  std::string job_id;         // PSTATE_JOB_ID; empty = none
  std::string socket_ifname;  // an interface rule (netif.hpp); empty = none
  // PSTATE_STORE_EXTERNAL=1: another process serves the tcp:// store (`pstate run`, `pstate
  // store`), so rank 0 only connects to it; the store then outlives every rank.
  bool store_external = false;
  // PSTATE_REJOIN=1: this process replaces a dead rank of a running job (its RANK): pstate_init
  // waits until the survivors admit it with pstate_grow instead of meeting a new world.
  bool rejoin = false;
  // With resolve_launch_env(..., defer_rank_range = true): the error of a rank outside the world
  // (rank >= world size), kept so the caller can tell the store before failing; rank and world
  // size are then as given.
  std::string rank_out_of_range;
  std::string launcher;       // where rank and world size came from: "torchrun", "mpirun", "srun",
                              // "LeaderWorkerSet", "parameters"

  // One line for INFO logs: "rank 3 of 8 (local 1 of 4, from torchrun), store tcp://10.0.0.1:29500,
  // timeout 600000 ms, job token set, interface eth1". Never prints the token.
  std::string describe() const;
  // Options to open this rank's store with (rank 0 serves a tcp:// store).
  StoreOptions store_options() const;
};

inline constexpr int64_t kDefaultTimeoutMs = 600000;
inline constexpr int64_t kDefaultInitTimeoutMs = 120000;
inline constexpr size_t kMaxJobTokenBytes = 4096;

// Resolves params (a complete struct: the caller copies an older, shorter caller's struct into a
// PSTATE_INIT_PARAMS_INIT-filled one first) against env. Throws INVALID_ARGUMENT.
LaunchEnv resolve_launch_env(const pstate_init_params_t &params, const EnvLookup &env, bool defer_rank_range = false);

}  // namespace pstate
