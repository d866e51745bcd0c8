// context.hpp — pstate_t: one rank's parallel state and its lifecycle (the spine of the library).
//
// A Context is SGLang's module-level state of parallel_state.py made into an object: the launch
// facts of this rank, the rendezvous store, the UCX worker, every peer's published record, the
// world group, and after initialize_model_parallel one group object per canonical group kind
// (aliased kinds share the object, as in SGLang). Nothing is global, so N contexts in one process
// (N ranks as N threads) are independent.
//
// The class is declared here whole; its parts live along their seams:
//   context.cpp         the lifecycle: pstate_init's steps, finalize, abort, the flight recorder's
//                       lifecycle entries and dumps
//   rendezvous.cpp      pstate_init's rendezvous: the store, the UCX worker, the rank directory,
//                       the world group; what start-up cost (log_counts); the dump watcher
//   peer_table.hpp      PeerTable (owned): every launch rank's record, its UCX address read on
//                       first use, the start-up checks on the records
//   failure_notices.cpp the failure of the context: fail, the failure notices sent and taken,
//                       abort from any thread, the interrupt check, the live ranks
//   model_parallel.cpp  initialize/destroy_model_parallel, the group of a kind, making groups,
//                       device communicators split from the world's
//   group_registry.hpp  GroupRegistry (owned): every group object, their ids, their teardown
//   graph_capture.cpp   the device side: the CUDA device, host-memory checks, graph capture
//   custom_group.cpp    pstate_new_group;  shrink.cpp  pstate_shrink, pstate_grow;
//   undelivered.cpp     dropping messages no receive took;  host_order.cpp  host awareness
//
// A CUDA context (device = PSTATE_DEVICE_CUDA) also owns the DeviceContext of
// src/transport/device_comm.hpp: the CUDA runtime and NCCL loaded at run time, the device
// and its context stream, and graph-capture mode. It is made before the store is opened, so a
// host without a usable GPU fails pstate_init at once and locally (UNSUPPORTED "no CUDA
// device: ..."), leaving no rendezvous half-done. Each group makes its own device communicator
// lazily (group_device.cpp); the context only drives them all at capture begin, abort and
// finalize.
//
// Lifecycle states and the calls each allows:
//   kReady     after pstate_init: world-group ops, initialize_model_parallel, finalize, abort
//   kParallel  after initialize_model_parallel: every group, destroy_model_parallel
//   kFailed    a blocking call failed (TIMEOUT, PEER_LOST, TRANSPORT, INTERRUPTED): every collective
//              returns ABORTED naming the first failure; only finalize/abort make progress
// Calls out of order throw INVALID_STATE naming the expected step.
#pragma once

#include "bootstrap/launch_env.hpp"
#include "bootstrap/store.hpp"
#include "common/deadline.hpp"
#include "common/log.hpp"
#include "common/trace.hpp"
#include "group/call_hooks.hpp"
#include "group/call_observer.hpp"
#include "group/metrics_endpoint.hpp"
#include "group/group_registry.hpp"
#include "group/peer_table.hpp"
#include "layout/layout.hpp"
#include "transport/device_comm.hpp"
#include "common/process_watch.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pstate {

class DumpWatcher;  // group/dump_watcher.hpp

class Context {
 public:
  enum class State { kReady, kParallel, kFailed, kClosed };

  // ---- the lifecycle (context.cpp) ----
  // init_distributed_environment: rendezvous, world group, transports; collective.
  explicit Context(const pstate_init_params_t *params);
  ~Context();
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;
  // Graceful: world barrier (skipped when failed), device communicators finalized, then close
  // transports and store. INVALID_STATE in graph-capture mode (nothing is released then).
  void finalize();
  // Local, never blocks on peers: device communicators are aborted (ncclCommAbort).
  void abort() noexcept;

  // ---- model parallel (model_parallel.cpp) ----
  void initialize_model_parallel(const pstate_parallel_config_t *cfg);
  void destroy_model_parallel();
  bool model_parallel_initialized() const { return groups_.model_parallel(); }
  Group *group(pstate_group_kind_t kind);
  Group *world() { return groups_.world(); }
  // Device communicators by splitting (no unique-id bootstrap per group): true when new groups'
  // NCCL communicators are split from the world's (a CUDA context of more than one rank whose
  // world communicator exists, an NCCL with ncclCommSplit, PSTATE_NCCL_SPLIT not 0). The same
  // answer on every rank.
  bool split_from_world() const;
  // Collective over the world: child (this rank's group of one creation step, or nullptr) gets its
  // communicator by ncclCommSplit from the world's.
  void split_from_world_into(Group *child);

  // ---- custom groups (pstate_new_group; custom_group.cpp) ----
  // Collective over the world: this rank's group of the call (nullptr when it joins none). Group
  // ids: GroupRegistry's custom range.
  Group *new_group(const int *ranks, size_t count);

  // ---- surviving a dead rank (shrink.cpp) ----
  // pstate_shrink: collective over the survivors after a failure; they agree on who is alive
  // through the job's store, every group is dropped and the world rebuilt from the survivors in
  // their old order. Returns, per rank of the world before the call, its new rank (-1: gone).
  std::vector<int> shrink();
  // pstate_grow: collective over the world; admits the processes started with PSTATE_REJOIN=1 that
  // are waiting, appended in launch-rank order. Returns how many joined.
  int grow(int64_t timeout_ms);
  // How many times the world was rebuilt (shrink or grow): names its store keys and group ids.
  uint32_t epoch() const { return epoch_; }

  // ---- facts ----
  // rank() and world_size() are of the current world: the launch world until pstate_shrink /
  // pstate_grow renumber it. A process keeps its launch rank (the rank it was started with) for
  // life: the transports, the peer table, pids, hosts, shm names and the flight recorder speak
  // launch ranks; the groups translate (Group::ranks / launch_ranks).
  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(members_.size()); }
  int launch_rank() const { return launch_.rank; }
  int launch_world_size() const { return launch_.world_size; }
  // The current world's rank of a launch rank (-1: not a member), and the reverse.
  int global_rank_of(int launch_rank) const;
  int launch_rank_of(int global_rank) const { return members_.at(static_cast<size_t>(global_rank)); }
  int local_rank() const { return launch_.local_rank; }
  pstate_device_t device() const { return device_; }
  const Logger &log() const { return log_; }
  int64_t timeout_ms() const { return launch_.timeout_ms; }
  // The deadline of one operation: the context timeout, counted from the operation's first wait
  // (a call that never waits never reads the clock; see deadline.hpp).
  Deadline op_deadline() const { return op_deadline(launch_.timeout_ms); }
  // The same under another timeout (a group's own: pstate_group_set_timeout).
  Deadline op_deadline(int64_t timeout_ms) const {
    return Deadline::after_ms_from_first_wait(timeout_ms + op_extra_ms_);
  }
  // While alive, every operation's deadline is extra_ms longer: for pstate's own exchanges whose
  // peers may wait on purpose first (pstate_grow's rank 0 waits up to its timeout_ms for
  // replacements before the others hear its decision).
  class LongerOps {
   public:
    LongerOps(Context &c, int64_t extra_ms) : c_(c), saved_(c.op_extra_ms_) { c.op_extra_ms_ = extra_ms; }
    ~LongerOps() { c_.op_extra_ms_ = saved_; }
    LongerOps(const LongerOps &) = delete;
    LongerOps &operator=(const LongerOps &) = delete;

   private:
    Context &c_;
    int64_t saved_;
  };
  bool check_enabled() const { return check_; }
  // pstate_set_graph_registration: register captured buffers at pstate_graph_capture_end.
  bool graph_registration() const { return graph_registration_; }
  void set_graph_registration(bool on) { graph_registration_ = on; }
  const std::string &host_id(int world_rank) const { return peers_.host_id(world_rank); }
  UcxWorker &worker() { return *worker_; }
  int64_t peer_pid(int world_rank) const { return peers_.pid(world_rank); }
  const std::string &job_id() const { return peers_.job_id(); }

  // ---- the device side (graph_capture.cpp) ----
  // The CUDA side of a CUDA context; nullptr in a CPU context.
  DeviceContext *device_context() const { return device_ctx_.get(); }
  // Refuses device memory where the CPU communicator must read or write p (CPU contexts: only
  // when the process has loaded CUDA, ~free otherwise; CUDA contexts: by the CUDA runtime).
  // where: "world:0 all_reduce"; name: "send".
  void require_host_memory(const void *p, const char *name, const char *group, const char *call);
  // Same for two buffers (send and recv) at the cost of one: the scan for a loaded CUDA driver
  // runs once per call (p2 may be nullptr).
  void require_host_memory(const void *p, const char *name, const void *p2, const char *name2, const char *group,
                           const char *call);
  // pstate_graph_capture_begin/end: UNSUPPORTED in CPU contexts. begin creates every group's
  // device communicator first (collective over the world), then enters capture mode.
  void *begin_graph_capture(void *stream);
  void end_graph_capture();
  bool capturing() const { return device_ctx_ && device_ctx_->capturing(); }
  // INVALID_STATE naming `call` in graph-capture mode (the lifecycle calls refuse to run then).
  void require_not_capturing(const char *call) const;

  // ---- one thread at a time ----
  // Every C entry point that uses the context or its groups takes this flag at entry and gives it
  // back at exit (api::ContextEntry); false from try_enter means another thread is inside a call
  // now.
  bool try_enter() noexcept { return !busy_.exchange(true, std::memory_order_acquire); }
  void leave() noexcept { busy_.store(false, std::memory_order_release); }
  // The C entry point the thread inside is in (api::ContextEntry sets it; nullptr: none or not
  // named), for the messages of the calls that find the context busy.
  void set_inside_call(const char *call) noexcept { inside_call_.store(call, std::memory_order_release); }
  const char *inside_call() const noexcept { return inside_call_.load(std::memory_order_acquire); }
  // The context the calling thread is inside a call of (api::ContextEntry; nullptr: none): a
  // pstate_abort from a signal handler or callback that runs inside that call must not wait for
  // its own thread to leave.
  static const Context *&current_on_this_thread() noexcept {
    static thread_local const Context *current = nullptr;
    return current;
  }

  // ---- abort from any thread, the interrupt check (failure_notices.cpp) ----
  // request_abort (pstate_revoke; pstate_abort while another thread is inside): any thread, any
  // time while the context is allocated; idempotent; frees nothing. Every wait of a call in
  // flight then ends with PSTATE_ERR_ABORTED at its next check: shared memory at its liveness
  // check (every 20 ms of a sleeping wait), UCX at once (woken by ucp_worker_signal), the TCP
  // store at once (its socket shut down), NCCL at the next poll of a non-blocking call or of a
  // stream. Every later call is refused with ABORTED at entry.
  void request_abort() noexcept;
  bool abort_requested() const noexcept { return abort_requested_.load(std::memory_order_acquire); }
  // ABORTED naming call and the request (the refusal at entry, and the waits of the groups).
  [[noreturn]] void throw_abort_requested(const std::string &where) const;
  // The interrupt check of pstate_set_interrupt_check (fn NULL: none). interrupted() asks it: true
  // when it returned nonzero; the waits of the worker and of the groups' shared memory ask it at
  // their liveness checks (every 20 ms of a shared-memory wait, 50 ms of a UCX one) and throw
  // PSTATE_ERR_INTERRUPTED.
  void set_interrupt_check(pstate_interrupt_fn fn, void *user);
  bool interrupted() const { return interrupt_fn_ != nullptr && interrupt_fn_(interrupt_user_) != 0; }

  // ---- failure and notices (failure_notices.cpp) ----
  // The first fatal error poisons the context.
  State state() const { return state_; }
  void fail(const std::string &why);
  // The same for a call that failed with e, which is also told to every other member
  // (UcxWorker::post_notices), so ranks blocked on live peers learn it at once, unless e is itself
  // a peer's failure notice (Error::is_from_notice: that peer told everyone already).
  void fail(const Error &e) { fail(e.what(), e.status(), !e.is_from_notice()); }
  // The same for a failure this rank found without an exception (told to every other member).
  void fail(const std::string &why, pstate_status_t status) { fail(why, status, true); }
  // The shared-memory waits' check (every 20 ms): PEER_LOST when a failure notice of this
  // world arrived. where: the group and call ("tp:0 all_reduce").
  // self: how this rank is described in the error (default: waiting in shared memory).
  // at: the group's collectives (a notice of a call after the one in flight does not decide it).
  void check_notices(const std::string &where, const char *self = "waiting in shared memory",
                     const CallPosition *at = nullptr);
  // The same, naming "group op" (built only when a notice arrived: on every UCX call's fast path).
  // Without progressing the worker: the caller's wait has just progressed it until idle, so a
  // notice that had reached this host is in UCX's unexpected queue already; one more
  // ucp_worker_progress cost about as much as the rest of the check (agreement_cost.sh, 8 B).
  // Inline, the notice taken out of line: one probe is all it costs when none arrived.
  void check_notices(const std::string &group, const char *op, const char *self, const CallPosition *at) {
    if (worker_ && worker_->notice_waiting()) throw_waiting_notice(group, op, self, at);
  }
  // pstate_abort / pstate_revoke with no call in flight (the caller holds the context): fails the
  // context with ABORTED, which posts the failure notices, so a peer blocked in a call with this
  // rank ends at once instead of at its deadline. Nothing when the context failed already.
  void tell_peers_aborted(const char *call) noexcept;
  // Throws ABORTED when failed, INVALID_STATE when closed.
  void require_usable(const char *call) const;
  // require_usable's common case, inline for the call path: nothing to refuse.
  bool usable_now() const noexcept { return !abort_requested() && (state_ == State::kReady || state_ == State::kParallel); }
  // The world ranks this rank does not know to be dead, ascending (pstate_live_ranks): dead is a
  // peer whose connection to the TCP store has closed (the store sees that on every host: one
  // round trip), whose process has exited (same host: a pidfd per peer, made at the first call)
  // or whose UCX endpoint reported a peer failure. A rank that is merely slow is live. After this
  // context failed with PEER_LOST, while the store still lists every member, it asks the store
  // again for up to 1 s: the death can reach this rank (another rank's failure notice) before the
  // dead's connection end reaches the store's thread.
  std::vector<int> live_ranks();

  // ---- the call observer and its metrics (group/call_observer.hpp; always on) ----
  CallObserver &observer() { return observer_; }
  // The hooks of pstate_add_hook (call_hooks.hpp); PSTATE_NAN_CHECK=1's check is one.
  CallHooks &hooks() { return hooks_; }
  // After a hook was added or removed: every live group's hooked_ says whether there is one.
  void refresh_hooked();
  // pstate_metrics_text: any thread, while the context lives.
  std::string render_metrics() const { return observer_.render(); }

  // ---- the flight recorder (common/trace.hpp); nullptr when PSTATE_TRACE_ENTRIES=0 (context.cpp) ----
  TraceRecorder *trace() const { return trace_.get(); }
  // The C entry point a thread is inside now (api::ContextEntry), for dumps.
  void trace_enter(const char *call) {
    if (trace_) trace_->enter_call(call);
  }
  // A lifecycle step begins / ends (id 0: recorder off).
  uint64_t trace_life(TraceOp op);
  void trace_life_end(uint64_t id, pstate_status_t status);
  // A recorded call failed with e (after fail() when it was fatal): says so at INFO (below), marks
  // the entry and writes the automatic dump for TIMEOUT, PEER_LOST, MISMATCH and ABORTED (ABORTED:
  // once per failure). group, call: the group's name and the operation, for the log's fields.
  void trace_call_failed(uint64_t id, const Error &e, std::string_view group, std::string_view call) noexcept;
  // A call of a group failed with e: one INFO line "group G: CALL failed (STATUS): what", with the
  // group, the call and the status as fields of a JSON log line. Every failed call of a group says
  // it once (trace_call_failed, or this alone where the caller's own entry records the failure).
  void log_call_failed(const Error &e, std::string_view group, std::string_view call) const noexcept;
  // pstate_trace_dump: the file written.
  std::string trace_dump(const char *path);

 private:
  // ---- the lifecycle (context.cpp) ----
  // The steps behind the public lifecycle calls, which record them (trace_life) around these.
  template <typename F>
  auto traced_life(TraceOp op, F &&f) -> decltype(f());
  void finalize_now();

  // ---- rendezvous (rendezvous.cpp) ----
  [[noreturn]] void refuse_rank_out_of_range();
  void rendezvous();
  void rendezvous_with_store(Deadline deadline);
  std::unique_ptr<UcxWorker> make_worker() const;
  // Every rank's record through the store; the rank directory's facts become the peer table's.
  void exchange_peers(Deadline deadline);
  // The UCX worker's PeerDirectory: the peer table's entry of rank r (its address read from the
  // store on first use; `urgent`, a failure notice's: never read).
  PeerEntry peer_entry(int world_rank, bool urgent) {
    return peers_.entry(world_rank, urgent, *store_, timeout_ms());
  }
  // One INFO line of what start-up cost this rank so far (start-up is counted, not guessed):
  // "counts after pstate_init: store requests 5 frames 5 ... connects 1; ucx endpoints 3 peers 3".
  // Plain counters. With the process's CPU time so far and the wall time since the context was
  // made, so that the lines of one rank tell which phase worked and which waited (oversubscribed
  // start-up).
  void log_counts(const char *phase, const std::string &detail = {}) const;
  // The flight recorder's dump watcher (dump_watcher.hpp), when the recorder is on and the store
  // is a TCP store: a thread that connects by itself (a replacement first reads the request count
  // on the context's store); one that cannot connect is a warning from that thread, never a failed
  // init. stop: at once (interrupts its wait), idempotent.
  void start_dump_watcher();
  void stop_dump_watcher() noexcept;
  // Host awareness (host_order.cpp): PSTATE_ORDER_RANKS_BY_HOST=1 renumbers launch_.rank host by
  // host during rendezvous; a TP group spanning hosts is logged as a warning.
  void order_ranks_by_host(Deadline deadline);
  void warn_tensor_parallel_across_hosts() const;

  // ---- failure and notices (failure_notices.cpp) ----
  void fail(const std::string &why, pstate_status_t status, bool tell_peers);
  // Fails the context (the first failure only: returns whether this was it), logging it at INFO.
  bool poison(const std::string &why, std::optional<pstate_status_t> status);
  // check_notices found one waiting: takes it and throws its error (returns: another epoch's).
  void throw_waiting_notice(const std::string &group, const char *op, const char *self, const CallPosition *at);
  // The addresses the notices of a failure of `status` need, read from the store in one batch.
  void read_addresses_for_notices(pstate_status_t status) noexcept;
  // Per live group, the calls that returned on this rank (a notice decides only the later ones).
  std::vector<std::pair<uint32_t, uint32_t>> calls_returned() const;
  std::vector<int> live_launch_ranks(bool for_agreement, bool *store_answered = nullptr);

  // ---- model parallel (model_parallel.cpp) ----
  void initialize_model_parallel_now(const pstate_parallel_config_t *cfg);
  void destroy_model_parallel_now();
  // initialize_model_parallel: MISMATCH on every rank unless every rank passed the same sizes.
  void require_same_parallel_config(const layout::ParallelConfig &pc);
  std::unique_ptr<Group> make_group(pstate_group_kind_t kind, size_t index, const std::vector<int> &ranks,
                                    uint32_t group_id);
  // INVALID_STATE when a group pstate_destroy_model_parallel would retire has requests pending.
  void refuse_pending_requests() const;
  // Collective over the world: drops the UCX point-to-point messages of `groups` that no receive
  // took, before their ids can be reused (undelivered.cpp). call names the caller in errors.
  void drop_undelivered(const std::vector<Group *> &groups, const char *call);

  // ---- the device side (graph_capture.cpp) ----
  void open_device(int device_ordinal);
  void *begin_graph_capture_now(void *stream);
  void end_graph_capture_now();

  // ---- surviving a dead rank (shrink.cpp) ----
  std::vector<int> shrink_now();
  int grow_now(int64_t timeout_ms);
  void drop_all_groups(DroppedBy by) noexcept;
  void rebuild_world(std::vector<int> members, bool after_failure, std::unique_ptr<UcxWorker> fresh = nullptr);
  bool shrink_outcome_ok(uint32_t epoch, const Deadline &deadline);
  struct Arrivals {
    bool all_arrived = false;           // every member set its key
    std::vector<int> arrived_and_live;  // those that did and are alive, in world order
  };
  Arrivals await_members(uint32_t epoch, const char *what, const Deadline &deadline);
  // After the agreement: the new world's NCCL communicator shrunk from the failed world's
  // (`parent`, whose ranks were the launch ranks `old_members`) when every survivor kept it.
  void shrink_device_world(std::unique_ptr<DeviceComm> parent, const std::vector<int> &old_members,
                           const Deadline &deadline);
  void join_as_replacement(Deadline deadline);

  TracePtr trace_;  // first: destroyed last (the groups point into it)
  // A lifecycle step ended (its metrics; the facts the step may have changed).
  void observe_step(TraceOp op, std::chrono::steady_clock::time_point began, pstate_status_t status) noexcept;
  // Dumps on request through a tcp:// store (dump_watcher.hpp): started once the store is open,
  // stopped first at every teardown (finalize, abort, a failed init); after trace_ so that it
  // goes before the recorder it dumps.
  std::unique_ptr<DumpWatcher> dump_watcher_;
  bool dumped_since_failure_ = false;
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  LaunchEnv launch_;
  pstate_device_t device_ = PSTATE_DEVICE_CPU;
  Logger log_;
  bool check_ = false;
  bool graph_registration_ = false;
  int64_t op_extra_ms_ = 0;  // LongerOps
  int device_ordinal_param_ = -1;
  // One flag per launch rank: the store saw its lease lapse (Store::watch_departures); read by
  // every UCX worker's liveness checks. Declared before store_, whose thread writes it.
  std::unique_ptr<std::atomic<bool>[]> departed_;
  std::unique_ptr<Store> store_;
  bool directory_published_ = false;  // rank 0 set "pstate/peers" (init failing after that lingers: see the constructor)
  std::unique_ptr<UcxWorker> worker_;
  std::unique_ptr<DeviceContext> device_ctx_;  // before the groups: destroyed after them
  HostPointerCheck host_check_;
  PeerTable peers_;  // per launch rank
  std::vector<std::unique_ptr<ProcessWatch>> live_watches_;  // live_ranks(): same-host peers
  GroupRegistry groups_;
  std::vector<int> members_;  // the current world: launch rank of each global rank
  int rank_ = 0;              // this process's global rank in it
  uint32_t epoch_ = 0;        // world rebuilds so far (shrink.cpp)
  int64_t rejoins_seen_ = 0;  // replacement arrivals pstate_grow has looked at (shrink.cpp)

  State state_ = State::kReady;
  std::string failure_;
  pstate_status_t failure_status_ = PSTATE_OK;  // the status the failing call returned, if known
  pstate_interrupt_fn interrupt_fn_ = nullptr;
  void *interrupt_user_ = nullptr;
  std::atomic<bool> busy_{false};
  std::atomic<const char *> inside_call_{nullptr};
  std::atomic<bool> abort_requested_{false};
  // Held by request_abort while it wakes the transports, and by whatever replaces worker_ or
  // store_ after init (rebuild_world), so the waking thread never reads a pointer being replaced.
  mutable std::mutex wake_mutex_;
  // The call observer's cells (the groups point into them). Last: appended, so that adding it
  // moved no other member. Destroyed first, which is safe: a group records only while it is
  // alive or being retired, and every group is retired and destroyed before the members go
  // (abort(), finalize(): GroupRegistry::close), or, after a failed init, holds no request.
  CallObserver observer_;
  // PSTATE_METRICS_ADDR's endpoint (metrics_endpoint.hpp), or none. After observer_: stopped and
  // destroyed before the cells it renders.
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  // pstate_add_hook's hooks (call_hooks.hpp). Appended; the groups point at it (they are destroyed
  // before the members go, see observer_).
  CallHooks hooks_;
  void start_metrics_endpoint();
  void stop_metrics_endpoint() noexcept;
};

}  // namespace pstate

// The C handle is the Context itself.
struct pstate_s final : pstate::Context {
  using pstate::Context::Context;
};
