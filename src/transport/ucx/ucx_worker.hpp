// ucx_worker.hpp — one rank's UCX (ucp) engine: context, worker, endpoints, progress, failures.
//
// One UcxWorker per pstate_t (no global state: N ranks as N threads in one process each own
// one). It owns a ucp context (UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP) and one single-threaded
// worker whose address (bytes) the caller publishes through the rendezvous store. Endpoints to
// peers are created lazily, on first use, from a caller-provided directory that maps a world rank
// to the peer's worker address, pid and host id.
//
// Messages are tagged sends/receives (ucx_tag.hpp gives the 64-bit tag layout). A wait
// spins on ucp_worker_progress for a short budget (WaitPolicy::spin_us), then arms the worker
// and sleeps in poll() on its wake-up fd, at most WaitPolicy::max_block_ms at a time, so a
// waiting rank costs ~no CPU and still checks its deadline and its peers' liveness.
//
// Failure is an exception, never a hang (pstate::Error):
//   - PSTATE_ERR_TIMEOUT     the wait's Deadline passed (names op, peer, elapsed time);
//   - PSTATE_ERR_PEER_LOST   a peer died: same-host peers are watched through a pidfd (UCX's
//                            shared-memory transports report nothing), other-host peers use
//                            UCP_ERR_HANDLING_MODE_PEER endpoints and their error callback;
//   - PSTATE_ERR_MISMATCH    a message of another length than the receive expected;
//   - PSTATE_ERR_TRANSPORT   UCX reported an error (ucs_status_string in the text).
// After a failed wait, every outstanding request of the same owner (channel) is cancelled and
// freed; endpoints whose requests cannot be cancelled are force-closed so UCX never touches the
// caller's buffers again.
//
// Threads: a UcxWorker and all channels over it are driven by one thread at a time (the worker
// runs in UCS_THREAD_MODE_SINGLE). Different UcxWorkers are independent.
#pragma once

#include "common/call_position.hpp"
#include "common/deadline.hpp"
#include "common/log.hpp"
#include "common/process_watch.hpp"
#include "transport/ucx/ucx_tag.hpp"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace pstate {

// What a rank publishes about itself so others can reach and watch it.
struct PeerEntry {
  std::vector<uint8_t> address;  // the peer's ucp worker address (UcxWorker::address())
  int64_t pid = 0;               // its process id
  std::string host_id;           // equal host ids = same host AND same pid namespace
};

// Serialized form for the store: magic "PSU1", u32 address length, address, i64 pid, u32 host
// id length, host id (little-endian). decode throws PSTATE_ERR_MISMATCH on anything malformed.
std::vector<uint8_t> encode_peer_entry(const PeerEntry &entry);
PeerEntry decode_peer_entry(const std::vector<uint8_t> &bytes);

// world rank -> its entry; may block (e.g. a store get); may throw pstate::Error. `urgent`: the
// worker is sending failure notices (a failure is on its way to the caller): a directory that
// would have to block (a store read, maybe over a cut network) may return an entry with no
// address instead, and the worker skips that peer, which learns of the failure by itself.
using PeerDirectory = std::function<PeerEntry(int world_rank, bool urgent)>;

// How a wait burns CPU before sleeping. Spinning only pays when the peer has a core of its
// own: when ranks share cores, a spinning rank delays the very peer it waits for by the whole
// budget (measured with tests/unit/test_ucx_perf.cpp on a 2-core box: 8 ranks, ring + small
// all-to-all per round, ~0.3-0.5 ms per round at spin 0-5 µs, ~1 ms at 50 µs, ~3-5 ms at
// 200 µs, ~20-40 ms at 1 ms; 2 ranks, 8-byte round trip ~20-30 µs at spin 0 and ~2x the
// budget at 50-200 µs once other load shares the cores). Hence the default: no spin beyond one
// progress pass; wait_policy_for_host() turns spinning on where cores are free.
//
// A wait on a peer of another host is sized to the network instead: one UCX wake-up
// over TCP costs ~12 us more per message than polling (ucx_perftest -t tag_lat on a veth: 10.0 us
// one way polling, 22.4 us with -E sleep), so a budget sized for shared memory would make every
// cross-host message pay a sleep and a wake-up. Such a wait spins network_spin_budget_us(): about
// twice the typical time this worker's recent network waits took to complete while spinning (a
// running average over the waits the spin ended, each counted at most network_spin_max_us; a
// wait that slept is left out: it was long for another reason than the wire, a late peer or
// CPUs taken by other load, and spinning longer for it only burns the CPU the peer needs),
// within [spin_us, network_spin_max_us]. So the budget settles near 2 round trips of the wire,
// at least the host's spin_us. The CPU an idle
// waiter burns stays bounded: at most network_spin_max_us after the wait begins and after each
// wake-up, and a wait whose peer never comes wakes at most every max_block_ms, so an idle rank
// uses at most network_spin_max_us / max_block_ms of a core (250 us / 100 ms = 0.25%).
struct WaitPolicy {
  int spin_us = 0;         // busy-poll budget per wait (and per wake-up) before blocking
  // Ceiling of the adaptive spin of waits on a peer of another host; 0: such waits spin spin_us
  // as any other (wait_policy_for_host sets 250 where it spins at all).
  int network_spin_max_us = 0;
  int max_block_ms = 100;  // longest single poll(): bounds deadline and liveness checks
  // After a peer is seen dead, keep progressing this long before PEER_LOST: what it sent before
  // dying may sit in a shared-memory FIFO behind a slot another (descheduled) sender has
  // reserved but not yet filled.
  int peer_lost_grace_ms = 200;
};

// The policy for a host running local_ranks ranks: spin 50 µs when every rank can have a core
// of its own: with one to spare (local_ranks < online CPUs), or, for a rank its launcher pinned
// to one CPU, local_ranks <= online CPUs; else no spin.
WaitPolicy wait_policy_for_host(int local_ranks);

// The spin budget (us) of a wait on a peer of another host, given the typical completion time
// (us) of this worker's recent such waits that ended while spinning: 2 x typical_us within
// [spin_us, network_spin_max_us]; spin_us when network_spin_max_us is 0 (no network sizing), 0
// when the policy never spins.
int network_spin_budget_us(const WaitPolicy &policy, double typical_us);

// What a worker's waits did, for INFO logs at close and for tests (counted, never timed).
struct WaitStats {
  uint64_t waits = 0;          // wait() calls that ran the wait loop
  uint64_t network_waits = 0;  // ... of them on a peer of another host (the network budget)
  uint64_t blocked_waits = 0;  // ... of them that slept in poll() at least once
  uint64_t blocks = 0;         // sleeps in poll() (the spin budget ran out, nothing pending)
};

struct UcxWorkerOptions {
  int world_rank = 0;
  int world_size = 1;
  std::string host_id;        // this rank's host id (compared with PeerEntry::host_id)
  std::string socket_ifname;  // PSTATE_SOCKET_IFNAME rule (netif.hpp): its interfaces become UCX_NET_DEVICES
  // Extra UCX settings applied with ucp_config_modify (name without "UCX_", e.g. {"TLS","tcp"});
  // the process environment (UCX_*) is read first, so these win.
  std::vector<std::pair<std::string, std::string>> ucx_config;
  WaitPolicy wait;
  int64_t default_timeout_ms = 600000;  // waits whose caller set no deadline use this
  bool watch_with_pidfd = true;         // false: watch same-host peers via /proc only (tests)
  Logger logger;                        // copied; its rank prefix is set to world_rank
};

// Who is waiting, for error messages and cancellation.
struct WaitScope {
  uint32_t owner = 0;     // channel id from UcxWorker::register_owner (0 = the worker itself)
  // The waiting operation for messages: what, then a space and op when op is set ("tp:0" and
  // "all_reduce"); text() joins them only when a message is built, so a wait that succeeds
  // builds no string (two allocations per collective over UCX otherwise).
  std::string_view what;
  const char *op = nullptr;
  std::string text() const {
    std::string s(what);
    if (op != nullptr) s.append(" ").append(op);
    return s;
  }
  Deadline deadline = Deadline::never();
  int my_group_rank = -1;  // -1: messages name world ranks only
  // When the waiting began, for messages ("timed out after N ms"); unset: at this wait() or
  // test(). A request polled with test() sets its posting time.
  std::optional<Deadline::Clock::time_point> since;
  // The group waited in, for failure notices (Notice::decides); nullptr: none.
  const CallPosition *position = nullptr;
};

// One message as seen by the worker: to/from which world rank, with which full tag.
struct OpTarget {
  uint32_t owner = 0;
  int peer_world = 0;
  int peer_in_group = -1;  // for messages only
  uint64_t tag = 0;        // full 64-bit tag (ucx_tag.hpp)
  // Receives: tag bits not matched but compared with the sender's once the message arrived (a
  // difference is PSTATE_ERR_MISMATCH): point-to-point's "what" field (ucx_tag.hpp).
  uint64_t check_mask = 0;
  bool compare_checked = true;  // false: those bits are neither matched nor compared (draining)
};

class UcxWorker {
 public:
  using OpId = uint64_t;  // slot index (low 32) + generation (high 32); 0 is never valid

  explicit UcxWorker(UcxWorkerOptions options);
  ~UcxWorker();  // force_close() when close() was not called
  UcxWorker(const UcxWorker &) = delete;
  UcxWorker &operator=(const UcxWorker &) = delete;

  int world_rank() const { return options_.world_rank; }
  int world_size() const { return options_.world_size; }
  const Logger &logger() const { return options_.logger; }
  const WaitPolicy &wait_policy() const { return options_.wait; }
  const WaitStats &wait_stats() const { return stats_; }
  // The spin budget the next wait on a peer of another host gets (network_spin_budget_us).
  int network_spin_us() const { return network_spin_budget_us(options_.wait, net_typical_us_); }
  int64_t default_timeout_ms() const { return options_.default_timeout_ms; }

  // This worker's address, to publish; and the entry others need (address, getpid(), host id).
  const std::vector<uint8_t> &address() const { return address_; }
  PeerEntry self_entry() const;
  // Must be set before the first message to another rank.
  void set_directory(PeerDirectory directory) { directory_ = std::move(directory); }
  // Creates the endpoint to world_rank now (normally lazy, on first send) — e.g. at group
  // creation, so an unreachable peer is reported there. Sends nothing.
  void connect(int world_rank);
  // One line naming the transports of the worker's interfaces (for INFO logs).
  std::string describe_transports() const;
  // The transport/device pairs UCX opened ("tcp/lo", "sysv/memory", ...).
  std::vector<std::string> transport_resources() const;
  // One line naming the lanes of the endpoint to world_rank (creates it if needed).
  std::string describe_endpoint(int world_rank);

  // A fresh owner id for a channel; its requests are cancelled together.
  uint32_t register_owner() { return ++last_owner_; }

  // Non-blocking posts. Buffers stay in use until wait() returns or throws.
  OpId post_send(const OpTarget &target, const void *buf, size_t bytes);
  // Exactly `bytes`; any other length is PSTATE_ERR_MISMATCH at wait().
  OpId post_recv(const OpTarget &target, void *buf, size_t bytes);
  // At most `capacity` bytes (a longer message is PSTATE_ERR_MISMATCH at wait()); the length that
  // arrived is written to *received when the receive completes. For the agreement exchange's
  // self-describing records (src/coll/agreement_exchange.hpp), whose length the receiver learns.
  OpId post_recv_upto(const OpTarget &target, void *buf, size_t capacity, size_t *received);
  // Unknown length: probed (ucp_tag_probe_nb, remove) then received into *out (resized).
  // Any-size receives on one tag are matched in the order they were posted.
  OpId post_recv_any_size(const OpTarget &target, std::vector<uint8_t> *out);

  // Waits for all ops (spin, then block); releases them. On failure throws pstate::Error and
  // cancels + frees every outstanding op of scope.owner.
  void wait(const OpId *ops, size_t n, const WaitScope &scope);
  // Never blocks: progresses the worker once, then true when op is done (released, like after
  // wait()), false while it is pending. Throws as wait() does, cancelling scope.owner's ops: the op
  // failed, its peer is dead (once the grace period has passed over calls), scope.deadline passed,
  // or the interrupt check asks to stop. For requests that outlive one call (pstate_test).
  bool test(OpId op, const WaitScope &scope);
  // The interrupt check of the context (pstate_set_interrupt_check; empty: none): wait() asks it
  // with its liveness checks (every ~50 ms of a wait, and after a signal woke its poll) and throws
  // PSTATE_ERR_INTERRUPTED when it returns true.
  void set_interrupt_check(std::function<bool()> check) { interrupt_check_ = std::move(check); }
  // The context's abort flag (Context::request_abort; nullptr: none). wait() and test() read it at
  // their liveness checks and throw PSTATE_ERR_ABORTED once it is set; the aborting thread wakes a
  // sleeping wait with signal(), so a wait ends within a round of progress.
  void set_abort_flag(const std::atomic<bool> *flag) { abort_flag_ = flag; }
  // The context's departed flags (nullptr: none), one per world rank: set from the job's store
  // (Store::watch_departures: an etcd lease lapsed, the rank's process or host is gone). wait()
  // reads them with its liveness checks and takes such a peer for lost, as an exited one.
  void set_departed_flags(const std::atomic<bool> *flags, int count) {
    departed_flags_ = flags;
    departed_count_ = count;
  }
  // Wakes a wait of another thread that sleeps on this worker (ucp_worker_signal, which UCX allows
  // from any thread, whatever the worker's thread mode). Never blocks; no-op once closed.
  void signal() noexcept;
  // Cancels and frees every outstanding op of owner (no-op when none). Never blocks.
  void cancel_owner(uint32_t owner) noexcept;
  // Outstanding ops of owner (0 = all owners); for tests and leak checks.
  size_t outstanding(uint32_t owner = 0) const;

  // Start-up cost (counted, not guessed): endpoints this worker created (ucp_ep_create; each one
  // connects to that peer), and the peers it holds a record of (an endpoint, a process watch, or
  // both). Plain counters, read by the context's INFO lines; the worker's thread only.
  uint64_t endpoints_created() const { return endpoints_created_; }
  size_t peers_known() const { return peers_.size(); }

  // Graceful teardown: flushes and closes every endpoint (bounded by deadline, then forced),
  // destroys the worker and context. Throws nothing; idempotent.
  void close(Deadline deadline) noexcept;
  // Immediate teardown for pstate_abort: cancels everything, force-closes endpoints, never
  // waits for a peer. Idempotent.
  void force_close() noexcept;
  bool closed() const { return worker_ == nullptr; }

  // True when this worker has seen world_rank die: its process exited (same host) or its
  // endpoint failed (UCX peer failure). false for a peer it never connected to (unknown).
  bool peer_lost(int world_rank);
  // Drops what this worker holds for world_rank (its endpoint, force-closed; its process watch):
  // the rank is gone for good (pstate_shrink) or a new process takes its place (pstate_grow),
  // whose entry the directory gives at the next use. Never blocks.
  void forget_peer(int world_rank) noexcept;
  // True when the endpoint to world_rank was closed or reported an error (a failed collective
  // force-closes endpoints with stuck sends): a survivor's must be renewed (forget_peer) before
  // the rebuilt world uses it.
  bool peer_broken(int world_rank) const;

  // ---- failure notices (pstate_shrink; one verdict per call, on every rank) ----
  // A rank whose context fails tells the other members of its world with a notice (on the
  // reserved group id kNoticeGroupId: the world's epoch, the dead rank it saw die or -1, the
  // status it failed with, when, and the first kNoticeTextBytes of its error), so a rank blocked
  // on a live peer that gave up learns it at its next liveness check (every ~50 ms of a wait)
  // instead of at its deadline. Notices of another epoch (an older world) are dropped unread.
  static constexpr uint32_t kNoticeGroupId = 4095;
  void set_epoch(uint32_t epoch) {
    epoch_ = epoch;
    held_notices_.clear();  // of the older world
  }
  // Fire and forget: never blocks, never throws; peers this worker knows dead are skipped.
  // status: why this rank failed (PEER_LOST for a death); text: its error (cut to
  // kNoticeTextBytes).
  // returned: where this rank's collectives stood (Notice::returned), so a peer still inside a
  // call this rank returned from is not failed by it.
  void post_notices(const std::vector<int> &world_ranks, int dead, pstate_status_t status = PSTATE_ERR_PEER_LOST,
                    const std::string &text = {},
                    const std::vector<std::pair<uint32_t, uint32_t>> &returned = {}) noexcept;
  static constexpr size_t kNoticeTextBytes = 600;
  // What a notice says of the sender's collectives: per group id, how many calls of that group
  // had returned on the sender when it failed (CallPosition::returned). At most this many
  // entries travel (a rank is in one group of each id: groups that share an id are disjoint).
  static constexpr size_t kNoticeMaxGroups = 256;
  struct Notice {
    int from = -1;  // the world rank that sent it
    int dead = -1;  // the rank it saw die (-1: unknown)
    pstate_status_t status = PSTATE_ERR_PEER_LOST;  // what the sender failed with
    int64_t unix_ms = 0;                           // when (the sender's clock; 0: unknown)
    std::string text;                              // the start of the sender's error
    std::vector<std::pair<uint32_t, uint32_t>> returned_calls;  // (group id, calls returned) of the sender
    // Whether this notice ends a wait of the group at `at` (nullptr: a wait of no group, which
    // every notice ends). A failure concerns a group when the failed rank, or the rank it saw
    // die, is a member; another group's waits go on (if they depend on it, a member's own notice
    // follows). Inside a collective, one verdict per call: a member that had returned from this
    // very call failed in a later one, so its notice decides the calls after (it is held), not
    // this one; a member's death decides it only while this rank still waits for parts
    // (arrived: every part of the call is here, the check after a folded call).
    bool decides(const CallPosition *at, bool arrived) const;
  };
  // The error a notice means for a rank that waits: a death is PEER_LOST, an interruption
  // ABORTED, anything else the sender's status; the text names the sender, when, and why. `what`
  // names the waiting call, `self` this rank ("rank 2 (group rank 1)"). Marked as a notice's
  // (Error::is_from_notice): the context it fails does not tell the peers again.
  static Error notice_error(const Notice &n, const std::string &what, const std::string &self, int from_rank);
  // Progresses the worker (connections and notices in flight); true when no notice is in flight.
  bool progress_notices() noexcept;
  // Progresses the worker once (progress false: not at all, for a caller whose wait just
  // progressed it until idle) and returns a notice of this epoch that arrived and decides the
  // call at `at` (Notice::decides), if any. Notices that do not decide it are held, in arrival
  // order, for the calls after it (a new epoch drops them).
  std::optional<Notice> take_notice(bool progress = true, const CallPosition *at = nullptr, bool arrived = false);
  // Whether a notice (of any epoch) has arrived and waits to be taken, without progress and
  // without taking it: one probe, for the per-call check of a collective that completed
  // (Context::check_notices); take_notice then reads it, or drops it when of another epoch.
  // Inline: it runs on every collective of a UCX group.
  bool notice_waiting() noexcept {
    if (worker_ == nullptr || no_progress_) return false;
    if (!held_notices_.empty()) return true;
    ucp_tag_recv_info_t info;
    return ucp_tag_probe_nb(worker_, ucx::make_tag(kNoticeGroupId, 0, 0), uint64_t{ucx::kMaxGroupId} << 52, 0,
                            &info) != nullptr;
  }
 private:
  enum class OpKind : uint8_t { kSend, kRecv, kRecvAnySize };
  enum class OpState : uint8_t { kFree, kProbing, kPending, kDone };
  struct Op {
    OpKind kind = OpKind::kSend;
    OpState state = OpState::kFree;
    uint32_t generation = 0;
    OpTarget target;
    const void *send_buf = nullptr;
    void *recv_buf = nullptr;
    size_t bytes = 0;                     // send size / exact receive size
    std::vector<uint8_t> *out = nullptr;  // any-size destination
    void *request = nullptr;              // UCX request while kPending
    ucs_status_t status = UCS_OK;         // final status once kDone
    size_t received = 0;                  // receives: bytes that arrived
    size_t *received_out = nullptr;       // post_recv_upto: where the arrived length goes
    uint64_t sender_tag = 0;              // receives: the arrived message's full tag ...
    bool sender_tag_known = false;        // ... once UCX said it
    // A receive whose message differs from target.tag in target.check_mask bits.
    bool foreign() const {
      return target.compare_checked && sender_tag_known && ((sender_tag ^ target.tag) & target.check_mask) != 0;
    }
  };
  struct Peer {
    UcxWorker *worker = nullptr;
    int world_rank = 0;
    int64_t pid = 0;
    std::string host_id;
    std::vector<uint8_t> address;
    bool same_host = false;
    bool same_process = false;  // threads as ranks: nothing to watch
    ucp_ep_h ep = nullptr;
    bool ep_closed = false;                  // force-closed after an error; never reopened
    ucs_status_t ep_error = UCS_OK;          // from the PEER-mode error callback
    std::optional<ProcessWatch> watch;  // same host, other process
    bool exited = false;                     // the watch fired
    bool departed = false;                   // the store saw its lease lapse (set_departed_flags)
    std::optional<Deadline::Clock::time_point> lost_at;  // when a wait first saw it dead
    bool lost() const { return exited || departed || ep_error != UCS_OK; }
  };

  void init_context();
  void init_worker();
  void check_socket_ifname() const;
  Peer &peer(int world_rank, bool urgent = false);
  ucp_ep_h endpoint(Peer &p);
  void own_endpoint(Peer &p);  // endpoint(p) before receiving, errors ignored (see the .cpp)
  void log_endpoint(Peer &p);
  static std::string describe_endpoint_lanes(ucp_ep_h ep);
  static void on_endpoint_error(void *arg, ucp_ep_h ep, ucs_status_t status);

  OpId alloc_op(const OpTarget &target, OpKind kind);
  Op *find_op(OpId id);
  void release_op(Op &op) noexcept;
  void finish_post(Op &op, ucs_status_ptr_t result, size_t immediate_length);
  void start_probed_recvs();
  bool test_op(Op &op);

  void progress_until_idle();
  void run_wait_loop(const OpId *ops, size_t n, const WaitScope &scope);
  bool all_done(const OpId *ops, size_t n, const WaitScope &scope);
  int check_peers(const OpId *ops, size_t n, const WaitScope &scope);
  bool block(const OpId *ops, size_t n, const WaitScope &scope, int max_ms);
  void wait_requests(std::vector<void *> &requests, Deadline deadline) noexcept;

  std::string describe_self(const WaitScope &scope) const;
  std::string describe_peer(const Peer &p, const Op &op) const;
  std::string describe_op(const Op &op) const;
  [[noreturn]] void throw_peer_lost(const Peer &p, const Op &op, const WaitScope &scope);
  [[noreturn]] void throw_failed_op(const Op &op, const WaitScope &scope);
  [[noreturn]] void throw_foreign(const Op &op, const Peer &p, const WaitScope &scope);
  [[noreturn]] void throw_timeout(const OpId *ops, size_t n, const WaitScope &scope);
  [[noreturn]] void throw_interrupted(const OpId *ops, size_t n, const WaitScope &scope);
  [[noreturn]] void throw_aborted(const OpId *ops, size_t n, const WaitScope &scope);
  std::string waiting_for(const OpId *ops, size_t n);
  bool abort_requested() const { return abort_flag_ != nullptr && abort_flag_->load(std::memory_order_acquire); }

  void close_endpoint(Peer &p, bool force) noexcept;
  void destroy_all() noexcept;

  UcxWorkerOptions options_;
  PeerDirectory directory_;
  std::function<bool()> interrupt_check_;
  const std::atomic<bool> *abort_flag_ = nullptr;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::vector<uint8_t> address_;
  std::unordered_map<int, std::unique_ptr<Peer>> peers_;
  std::vector<std::unique_ptr<Peer>> forgotten_peers_;  // forget_peer: kept until the worker goes
  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;
  std::vector<uint32_t> probing_;  // any-size receives not matched yet, in posting order
  uint32_t last_owner_ = 0;
  bool poisoned_ = false;  // a request was abandoned while UCX still owned it: close by force
  // ... and it was a receive whose sender lives: progress could write its (freed) buffer, so the
  // worker is never progressed again (cancel_owner).
  bool no_progress_ = false;
  // How long cancel_owner lets receives from live senders finish before abandoning them.
  static constexpr std::chrono::milliseconds kDrainBudget{500};
  // Hosts (PeerEntry::host_id) whose first endpoint was logged at INFO: one line per host pair
  // proves which transport it uses (shared memory inside a host, TCP across); later endpoints to
  // the same host go to TRACE.
  std::unordered_set<std::string> logged_hosts_;
  uint64_t endpoints_created_ = 0;  // endpoints_created()
  Deadline::Clock::time_point wait_start_{};
  Deadline::Clock::time_point last_liveness_check_{};
  WaitStats stats_;
  // Running average (1/8 per wait) of how long network waits the spin ended took, each counted
  // at most network_spin_max_us; starts at half the cap, so the first budget is the cap.
  double net_typical_us_ = 0;
  bool waits_on_network(const OpId *ops, size_t n);
  uint32_t epoch_ = 0;
  const std::atomic<bool> *departed_flags_ = nullptr;  // set_departed_flags
  int departed_count_ = 0;
  bool departed(int world_rank) const {
    return departed_flags_ != nullptr && world_rank >= 0 && world_rank < departed_count_ &&
           departed_flags_[world_rank].load(std::memory_order_acquire);
  }
  std::optional<Notice> parse_notice(const std::vector<uint8_t> &bytes, int from) const;
  std::vector<Notice> held_notices_;  // taken, of this epoch, that decided no call yet (take_notice)
  std::deque<std::vector<uint8_t>> notice_words_;  // what post_notices sent (UCX reads them until done)
  std::vector<void *> notice_sends_;   // their requests, freed once complete
  [[noreturn]] void throw_notice(const Notice &n, const WaitScope &scope);
  std::vector<pollfd> poll_fds_;  // scratch for block(): wake-up fd + pidfds
  std::vector<Peer *> poll_peers_;
};

}  // namespace pstate
