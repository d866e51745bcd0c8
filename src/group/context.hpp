// context.hpp — pstate_t: one rank's parallel state and its lifecycle (the spine of the library).
//
// A Context is SGLang's module-level state of parallel_state.py made into an object: the launch
// facts of this rank, the rendezvous store, the UCX worker, every peer's published entry (address,
// pid, host), the world group, and after initialize_model_parallel one group object per canonical
// group kind (aliased kinds share the object, as in SGLang). Nothing is global, so N contexts in
// one process (N ranks as N threads) are independent.
//
// Lifecycle states and the calls each allows:
//   kReady     after pstate_init: world-group ops, initialize_model_parallel, finalize, abort
//   kParallel  after initialize_model_parallel: every group, destroy_model_parallel
//   kFailed    a blocking call failed (TIMEOUT, PEER_LOST, TRANSPORT): every collective returns
//              ABORTED naming the first failure; only finalize/abort make progress
// Calls out of order throw INVALID_STATE naming the expected step.
#pragma once

#include "bootstrap/launch_env.hpp"
#include "bootstrap/store.hpp"
#include "common/deadline.hpp"
#include "common/log.hpp"
#include "layout/layout.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <pstate/pstate.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct pstate_group_s;

namespace pstate {

using Group = pstate_group_s;

class Context {
 public:
  enum class State { kReady, kParallel, kFailed, kClosed };

  // init_distributed_environment: rendezvous, world group, transports; collective.
  explicit Context(const pstate_init_params_t *params);
  ~Context();
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;

  void initialize_model_parallel(const pstate_parallel_config_t *cfg);
  void destroy_model_parallel();
  bool model_parallel_initialized() const { return layout_.has_value(); }
  // Graceful: world barrier (skipped when failed), then close transports and store.
  void finalize();
  // Local, never blocks on peers.
  void abort() noexcept;

  Group *group(pstate_group_kind_t kind);
  Group *world() { return world_.get(); }

  // Facts.
  int rank() const { return launch_.rank; }
  int world_size() const { return launch_.world_size; }
  int local_rank() const { return launch_.local_rank; }
  pstate_device_t device() const { return device_; }
  const Logger &log() const { return log_; }
  int64_t timeout_ms() const { return launch_.timeout_ms; }
  Deadline op_deadline() const { return Deadline::after_ms(launch_.timeout_ms); }
  bool check_enabled() const { return check_; }
  const std::string &host_id(int world_rank) const { return peers_.at(static_cast<size_t>(world_rank)).host_id; }
  UcxWorker &worker() { return *worker_; }
  int64_t peer_pid(int world_rank) const { return peers_.at(static_cast<size_t>(world_rank)).pid; }
  const std::string &job_id() const { return job_id_; }

  // Failure bookkeeping: the first fatal error poisons the context.
  State state() const { return state_; }
  void fail(const std::string &why);
  // Throws ABORTED when failed, INVALID_STATE when closed.
  void require_usable(const char *call) const;

 private:
  void rendezvous();
  void exchange_peers();
  void check_local_ranks();
  std::unique_ptr<Group> make_group(pstate_group_kind_t kind, size_t index, const std::vector<int> &ranks,
                                    uint32_t group_id);
  void close_groups() noexcept;

  LaunchEnv launch_;
  pstate_device_t device_ = PSTATE_DEVICE_CPU;
  Logger log_;
  bool check_ = false;
  std::string job_id_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<UcxWorker> worker_;
  std::vector<PeerEntry> peers_;
  std::unique_ptr<Group> world_;

  std::optional<layout::Layout> layout_;
  uint32_t generation_ = 0;  // how many times initialize_model_parallel ran (tags stay distinct)
  std::vector<std::unique_ptr<Group>> groups_;           // the live model-parallel groups
  std::array<Group *, PSTATE_GROUP_KIND_COUNT> by_kind_{};  // kind -> (shared) group object
  std::vector<std::unique_ptr<Group>> retired_;          // destroyed groups: kept to answer
                                                         // INVALID_STATE instead of a crash
  State state_ = State::kReady;
  std::string failure_;
};

}  // namespace pstate

// The C handle is the Context itself.
struct pstate_s final : pstate::Context {
  using pstate::Context::Context;
};
