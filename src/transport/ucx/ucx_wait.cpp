// ucx_wait.cpp — UcxWorker::wait: drive UCX until a set of requests completes, without burning a
// core and without ever hanging.
//
// The loop, each round:
//   1. progress the worker until it has nothing more to do, and start any probed receives;
//   2. done? — return; a request that finished with an error throws (see throw_failed_op);
//   3. a peer of a pending request dead? (process watch or PEER-mode error callback) — throw
//      PEER_LOST once it has been dead for WaitPolicy::peer_lost_grace_ms while we kept
//      progressing, so messages it sent before dying are still delivered;
//   4. deadline passed? — throw TIMEOUT; pstate_abort/pstate_revoke called from another thread
//      (the context's abort flag; that thread also wakes poll with ucp_worker_signal) — throw
//      ABORTED; the interrupt check (pstate_set_interrupt_check) asked to stop — throw
//      INTERRUPTED; both at the liveness checks of step 3 (every 50 ms, and after a wake-up);
//   5. within the spin budget (WaitPolicy::spin_us after the wait began or after a wake-up, or
//      for a wait on a peer of another host the adaptive network_spin_budget_us, see WaitPolicy;
//      while spinning, steps 3-5 run every 8th round, as a clock read costs about a round)?
//      — go round again; otherwise arm the worker (ucp_worker_arm; BUSY means events are
//      pending: go round) and sleep in poll() on the UCX wake-up fd plus the pidfds of the
//      peers we wait on, for at most max_block_ms, so deadline and liveness are re-checked.
// On any throw the owner's outstanding requests are cancelled and freed (cancel_owner).
#include "transport/ucx/ucx_tag.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include "common/host_cpus.hpp"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <cerrno>
#include <chrono>

namespace pstate {

namespace {

using Clock = Deadline::Clock;
constexpr auto kLivenessInterval = std::chrono::milliseconds(50);
constexpr int kProcFallbackPollMs = 50;  // poll period when a peer has no pidfd

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

}  // namespace

WaitPolicy wait_policy_for_host(int local_ranks) {
  WaitPolicy policy;
  // The machine's CPUs (host_cpus.hpp), not this rank's affinity: before, ranks that pstate run
  // pinned never spun, and a 2-rank 8 B all_reduce over UCX paid a sleep and a wake-up per
  // message (3.6 us instead of 1.6 on the 2-core CI machine, BENCHMARKS.md).
  const int cpus = online_cpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  const bool pinned = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1;
  // A pinned rank has its core when the ranks fit the machine; an unpinned one spins only with a
  // core to spare for whatever else runs (the measurements in ucx_worker.hpp).
  // PSTATE_SPIN=0: the launcher could not give this rank a CPU of its own (another job's ranks
  // run on it), so a spin would take the CPU from them.
  policy.spin_us = spinning_allowed() && (pinned ? local_ranks <= cpus : local_ranks < cpus) ? 50 : 0;
  // Waits on another host spin up to about a network round trip or two (WaitPolicy), only where
  // spinning is on at all: a core shared with other ranks is better given to them.
  policy.network_spin_max_us = policy.spin_us > 0 ? 250 : 0;
  return policy;
}

int network_spin_budget_us(const WaitPolicy &policy, double typical_us) {
  if (policy.spin_us <= 0 || policy.network_spin_max_us <= 0) return policy.spin_us > 0 ? policy.spin_us : 0;
  const double budget = std::clamp(2.0 * typical_us, static_cast<double>(policy.spin_us),
                                   static_cast<double>(std::max(policy.network_spin_max_us, policy.spin_us)));
  return static_cast<int>(budget + 0.5);
}

// True when a pending op of the wait has its peer on another host (the network budget applies).
bool UcxWorker::waits_on_network(const OpId *ops, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Op *op = find_op(ops[i]);
    if (op != nullptr && op->state != OpState::kDone && !peer(op->target.peer_world).same_host) return true;
  }
  return false;
}

void UcxWorker::progress_until_idle() {
  if (no_progress_) return;  // an abandoned receive could write a freed buffer (cancel_owner)
  // Bounded, so the caller's deadline and liveness checks always come round: toward a host whose
  // link is cut UCX reports progress on every call while it retries the connection.
  for (int i = 0; i < 1024 && ucp_worker_progress(worker_) != 0; ++i) {
  }
}

void UcxWorker::wait(const OpId *ops, size_t n, const WaitScope &scope) {
  if (worker_ == nullptr)
    throw_error(PSTATE_ERR_INVALID_STATE, scope.text(), ": rank ", options_.world_rank, " UCX worker is closed");
  try {
    for (size_t i = 0; i < n; ++i)
      if (find_op(ops[i]) == nullptr)
        throw_error(PSTATE_ERR_INTERNAL, scope.text(), ": request ", ops[i], " was already waited for or never posted");
    run_wait_loop(ops, n, scope);
  } catch (...) {
    cancel_owner(scope.owner);
    throw;
  }
  for (size_t i = 0; i < n; ++i)
    if (Op *op = find_op(ops[i])) release_op(*op);
}

bool UcxWorker::test(OpId id, const WaitScope &scope) {
  if (worker_ == nullptr)
    throw_error(PSTATE_ERR_INVALID_STATE, scope.text(), ": rank ", options_.world_rank, " UCX worker is closed");
  try {
    if (find_op(id) == nullptr)
      throw_error(PSTATE_ERR_INTERNAL, scope.text(), ": request ", id, " was already waited for or never posted");
    wait_start_ = scope.since.value_or(Clock::now());
    progress_until_idle();
    start_probed_recvs();
    if (!all_done(&id, 1, scope)) {
      // A dead peer's grace period runs across calls (Peer::lost_at), so polling ends in PEER_LOST.
      check_peers(&id, 1, scope);
      if (abort_requested()) throw_aborted(&id, 1, scope);
      if (interrupt_check_ && interrupt_check_()) throw_interrupted(&id, 1, scope);
      if (scope.deadline.expired()) throw_timeout(&id, 1, scope);
      return false;
    }
  } catch (...) {
    cancel_owner(scope.owner);
    throw;
  }
  release_op(*find_op(id));
  return true;
}

void UcxWorker::run_wait_loop(const OpId *ops, size_t n, const WaitScope &scope) {
  wait_start_ = Clock::now();
  last_liveness_check_ = wait_start_;
  ++stats_.waits;
  const bool network = options_.wait.network_spin_max_us > 0 && options_.wait.spin_us > 0 && waits_on_network(ops, n);
  if (network) ++stats_.network_waits;
  const auto spin = std::chrono::microseconds(network ? network_spin_us() : options_.wait.spin_us);
  auto spin_until = wait_start_ + spin;
  bool woke = false;
  bool spinning = false;
  bool slept = false;
  int grace_left_ms = INT32_MAX;  // INT32_MAX: no peer we wait on is dying
  for (unsigned round = 0;; ++round) {
    progress_until_idle();
    start_probed_recvs();
    if (all_done(ops, n, scope)) {
      if (slept) ++stats_.blocked_waits;
      // The running average the next network budget is sized from: waits the spin ended only.
      // A wait that slept was longer than the budget for another reason than the wire (a late
      // peer, or its CPU taken by other load): counting it made the budget climb to the cap at
      // load 16 on the 2-core machine, where spinning that long made an 8 B all_reduce 3x slower
      // while as many waits slept (bench/across_hosts.sh's wait counters).
      if (network && !slept) {
        const double took_us = std::chrono::duration<double, std::micro>(Clock::now() - wait_start_).count();
        net_typical_us_ += (std::min(took_us, static_cast<double>(options_.wait.network_spin_max_us)) - net_typical_us_) / 8;
      }
      return;
    }
    // While spinning, the clock is read every 8th round only: a read costs about what a round of
    // progress does, and it delays noticing the message that ends the wait (a 2-rank 8 B
    // all_reduce over UCX spends a fifth of its time in clock_gettime otherwise).
    if (spinning && (round & 7u) != 0) continue;
    const auto now = Clock::now();
    if (woke || grace_left_ms < INT32_MAX || now - last_liveness_check_ >= kLivenessInterval) {
      grace_left_ms = check_peers(ops, n, scope);
      last_liveness_check_ = now;
      if (auto notice = take_notice(true, scope.position)) throw_notice(*notice, scope);
      if (abort_requested()) throw_aborted(ops, n, scope);
      if (interrupt_check_ && interrupt_check_()) throw_interrupted(ops, n, scope);
    }
    if (scope.deadline.expired_at(now)) throw_timeout(ops, n, scope);
    woke = false;
    spinning = now < spin_until && grace_left_ms == INT32_MAX;
    if (now < spin_until) continue;
    if (block(ops, n, scope, grace_left_ms)) {
      ++stats_.blocks;
      slept = true;
      woke = true;
      spin_until = Clock::now() + spin;
    }
  }
}

// True when every op is done and succeeded; throws for the first op that failed.
bool UcxWorker::all_done(const OpId *ops, size_t n, const WaitScope &scope) {
  bool done = true;
  for (size_t i = 0; i < n; ++i) {
    Op &op = *find_op(ops[i]);
    if (!test_op(op)) {
      done = false;
      continue;
    }
    // post_recv_upto: any length up to the buffer's (UCX truncates longer ones: an error status)
    bool size_ok = op.kind != OpKind::kRecv || op.received == op.bytes || op.received_out != nullptr;
    if (op.status != UCS_OK || !size_ok || op.foreign()) throw_failed_op(op, scope);
  }
  return done;
}

// Throws PEER_LOST when the peer of a pending op is known dead and its grace period (see
// WaitPolicy::peer_lost_grace_ms) is over. Returns the ms left of the shortest running grace
// period, INT32_MAX when no peer we wait on is dying.
int UcxWorker::check_peers(const OpId *ops, size_t n, const WaitScope &scope) {
  int grace_left = INT32_MAX;
  auto now = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    Op &op = *find_op(ops[i]);
    if (op.state == OpState::kDone) continue;
    Peer &p = peer(op.target.peer_world);
    if (p.watch && !p.exited) p.exited = p.watch->exited();
    if (!p.departed) p.departed = departed(p.world_rank);
    if (!p.lost()) continue;
    if (!p.lost_at) p.lost_at = now;
    auto left = std::chrono::milliseconds(options_.wait.peer_lost_grace_ms) - (now - *p.lost_at);
    if (left <= Clock::duration::zero()) throw_peer_lost(p, op, scope);
    grace_left = std::min(grace_left, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count()));
  }
  return grace_left;
}

// Arms the worker and sleeps until UCX has events, a watched peer exits, or max_block_ms /
// the deadline passes. Returns false when arming found events pending (nothing slept).
bool UcxWorker::block(const OpId *ops, size_t n, const WaitScope &scope, int max_ms) {
  ucs_status_t st = ucp_worker_arm(worker_);
  if (st == UCS_ERR_BUSY) return false;
  if (st != UCS_OK)
    throw_error(PSTATE_ERR_TRANSPORT, scope.text(), ": rank ", options_.world_rank,
                " could not arm its UCX worker for sleeping: ", ucs_status_string(st));
  poll_fds_.assign(1, pollfd{efd_, POLLIN, 0});
  poll_peers_.assign(1, nullptr);
  int timeout = std::min({scope.deadline.remaining_ms(), options_.wait.max_block_ms, max_ms});
  for (size_t i = 0; i < n; ++i) {
    Op &op = *find_op(ops[i]);
    if (op.state == OpState::kDone) continue;
    Peer &p = peer(op.target.peer_world);
    if (!p.watch || p.exited || std::find(poll_peers_.begin(), poll_peers_.end(), &p) != poll_peers_.end()) continue;
    if (p.watch->uses_pidfd()) {
      poll_fds_.push_back(pollfd{p.watch->fd(), POLLIN, 0});
      poll_peers_.push_back(&p);
    } else {
      timeout = std::min(timeout, kProcFallbackPollMs);
    }
  }
  int ready = ::poll(poll_fds_.data(), poll_fds_.size(), timeout);
  if (ready < 0 && errno != EINTR)
    throw_error(PSTATE_ERR_TRANSPORT, scope.text(), ": poll on the UCX wake-up fd failed: errno ", errno);
  for (size_t i = 1; ready > 0 && i < poll_fds_.size(); ++i)
    if (poll_fds_[i].revents != 0) poll_peers_[i]->exited = true;
  return true;
}

// ---- error messages: what, who, how long, what to do ------------------------------------------

std::string UcxWorker::describe_self(const WaitScope &scope) const {
  if (scope.my_group_rank < 0) return cat("rank ", options_.world_rank);
  return cat("rank ", options_.world_rank, " (group rank ", scope.my_group_rank, ")");
}

std::string UcxWorker::describe_peer(const Peer &p, const Op &op) const {
  std::string s = cat("rank ", p.world_rank);
  if (op.target.peer_in_group >= 0) s += cat(" (group rank ", op.target.peer_in_group);
  s += op.target.peer_in_group >= 0 ? ", " : " (";
  if (p.same_host)
    s += cat("pid ", p.pid, ")");
  else
    s += cat("host ", p.host_id, ")");
  return s;
}

std::string UcxWorker::describe_op(const Op &op) const {
  std::string tag = cat("tag ", ucx::tag_algo(op.target.tag), " of group id ", ucx::tag_group(op.target.tag));
  switch (op.kind) {
    case OpKind::kSend:
      return cat("send of ", op.bytes, " bytes, ", tag);
    case OpKind::kRecv:
      return cat("receive of ", op.bytes, " bytes, ", tag);
    case OpKind::kRecvAnySize:
      return cat("receive of a message of any size, ", tag);
  }
  return tag;
}

void UcxWorker::throw_notice(const Notice &n, const WaitScope &scope) {
  throw notice_error(n, std::string(scope.text()), describe_self(scope), n.from);
}

namespace {
// "12:00:03.123 UTC, 2.5 s ago"
std::string when_text(int64_t unix_ms) {
  if (unix_ms <= 0) return "at an unknown time";
  const time_t secs = static_cast<time_t>(unix_ms / 1000);
  tm t{};
  gmtime_r(&secs, &t);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const int64_t ago = static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000 - unix_ms;
  char buf[64];
  std::snprintf(buf, sizeof buf, "at %02d:%02d:%02d.%03d UTC, %.3f s ago", t.tm_hour, t.tm_min, t.tm_sec,
                static_cast<int>(unix_ms % 1000), static_cast<double>(ago) / 1000.0);
  return buf;
}
}  // namespace

Error UcxWorker::notice_error(const Notice &n, const std::string &what, const std::string &self, int from_rank) {
  if (n.status == PSTATE_ERR_PEER_LOST || n.status == PSTATE_OK)
    return Error::from_notice(PSTATE_ERR_PEER_LOST,
                              cat(what, ": ", ucx::kNoticeMarker, from_rank,
                                  n.dead >= 0 ? cat(" saw rank ", n.dead, " die") : std::string(" lost a peer"),
                                  " and left the job's collectives, so ", self, " cannot complete this wait; ",
                                  kPeerLostWayOut));
  const pstate_status_t status = n.status == PSTATE_ERR_INTERRUPTED ? PSTATE_ERR_ABORTED : n.status;
  return Error::from_notice(
      status, cat(what, ": ", ucx::kNoticeMarker, from_rank, " failed ", when_text(n.unix_ms), " with ",
                  pstate_status_string(n.status), " and left the job's collectives, so ", self,
                  " cannot complete this call (its error: \"", n.text, n.text.size() >= kNoticeTextBytes ? "..." : "",
                  "\"); the context is failed: call pstate_abort"));
}

void UcxWorker::throw_peer_lost(const Peer &p, const Op &op, const WaitScope &scope) {
  std::string what = cat(scope.text(), ": ", describe_peer(p, op));
  std::string waited = cat("while ", describe_self(scope),
                           op.kind == OpKind::kSend ? " waited to send to it (" : " waited for its message (",
                           describe_op(op), "; ",
                           ms_since(wait_start_), " ms into the wait)");
  if (p.ep_error != UCS_OK)
    throw_error(PSTATE_ERR_PEER_LOST, what, " became unreachable (UCX: ", ucs_status_string(p.ep_error), ") ", waited,
                "; ", kPeerLostWayOut);
  if (p.departed && !p.exited)
    throw_error(PSTATE_ERR_PEER_LOST, what, " is gone: its lease in the job's store lapsed (its process or its "
                "whole host ended) ", waited, "; ", kPeerLostWayOut);
  throw_error(PSTATE_ERR_PEER_LOST, what, " exited ", waited, "; ", kPeerLostWayOut);
}

void UcxWorker::throw_failed_op(const Op &op, const WaitScope &scope) {
  Peer &p = peer(op.target.peer_world);
  if (p.watch && !p.exited) p.exited = p.watch->exited();
  if (op.status != UCS_OK && p.lost()) throw_peer_lost(p, op, scope);
  std::string peer = describe_peer(p, op);
  if (op.foreign()) throw_foreign(op, p, scope);
  if (op.status == UCS_ERR_MESSAGE_TRUNCATED || (op.status == UCS_OK && op.kind == OpKind::kRecv))
    throw_error(PSTATE_ERR_MISMATCH, scope.text(), ": ", peer, " sent ",
                op.status == UCS_OK ? cat(op.received, " bytes") : std::string("a longer message"), " but ",
                describe_self(scope), " expected exactly ", op.bytes, " (", describe_op(op),
                "): the ranks disagree on count or dtype of this operation");
  if (op.status == UCS_ERR_NO_MEMORY && op.kind == OpKind::kRecvAnySize)
    throw_error(PSTATE_ERR_NO_MEMORY, scope.text(), ": no memory for the ", op.bytes, "-byte message from ", peer,
                " (", describe_op(op), ")");
  // A live peer that failed (aborted, interrupted, gave up) and closed its worker leaves UCX errors
  // behind ("Shared memory error"): its notice, already here, names the real cause.
  if (auto n = take_notice(true, scope.position)) throw_notice(*n, scope);
  if (op.status == UCS_ERR_NOT_CONNECTED && p.ep_closed)
    throw_error(PSTATE_ERR_TRANSPORT, scope.text(), ": the endpoint to ", peer,
                " was closed after an earlier error; call pstate_abort");
  throw_error(PSTATE_ERR_TRANSPORT, scope.text(), ": UCX failed the ", describe_op(op), " between ", describe_self(scope),
              " and ", peer, ": ", ucs_status_string(op.status));
}

// A point-to-point message of another kind or dtype than the receive's (ucx_tag.hpp): the
// stream is out of step, which the receiver reports naming both sides (the sender learns it
// from this rank's failure notice).
void UcxWorker::throw_foreign(const Op &op, const Peer &p, const WaitScope &scope) {
  const P2PStream stream = ucx::p2p_stream_of(op.target.tag);
  const std::string size = op.kind == OpKind::kRecv ? cat(op.bytes, " bytes") : std::string("an object");
  throw_error(PSTATE_ERR_MISMATCH, scope.text(), ": ", describe_peer(p, op), " sent its message #",
              ucx::p2p_counter_of(op.sender_tag), " with ", describe_p2p_what(stream, ucx::p2p_what_of(op.sender_tag)),
              op.kind == OpKind::kRecv ? cat(" (", op.received, " bytes)") : std::string(), ", but ",
              describe_self(scope), " took it in ",
              describe_p2p_what(stream, ucx::p2p_what_of(op.target.tag), /*receiving=*/true), " of ", size,
              ": the k-th send to a rank is its k-th receive from the sender on the same stream, with the same kind, "
              "dtype and count; the stream is out of step, so the context is failed on both sides");
}

void UcxWorker::throw_timeout(const OpId *ops, size_t n, const WaitScope &scope) {
  const Op *first = nullptr;
  size_t pending = 0;
  for (size_t i = 0; i < n; ++i) {
    const Op *op = find_op(ops[i]);
    if (op->state == OpState::kDone) continue;
    if (first == nullptr) first = op;
    ++pending;
  }
  const Peer &p = peer(first->target.peer_world);
  throw_error(PSTATE_ERR_TIMEOUT, scope.text(), ": timed out after ", ms_since(wait_start_), " ms: ",
              describe_self(scope), " still waits for ", describe_peer(p, *first), ", which is ",
              p.same_process ? "a thread of this process" : (p.same_host ? "alive" : "on another host"), " (",
              describe_op(*first), "; ", pending, " of ", n,
              " requests pending); the peer may be stuck or not in this operation — or slower than the "
              "timeout (timeout_ms / PSTATE_TIMEOUT_MS); PSTATE_CHECK=1 also compares sequence numbers and "
              "CUDA-context collectives");
}

// " for <the peer of the first pending op> (<that op>)", or "" when none is pending.
std::string UcxWorker::waiting_for(const OpId *ops, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (const Op *op = find_op(ops[i]); op->state != OpState::kDone)
      return cat(" for ", describe_peer(peer(op->target.peer_world), *op), " (", describe_op(*op), ")");
  return std::string();
}

void UcxWorker::throw_interrupted(const OpId *ops, size_t n, const WaitScope &scope) {
  const std::string waiting = waiting_for(ops, n);
  throw_error(PSTATE_ERR_INTERRUPTED, scope.text(), ": interrupted after ", ms_since(wait_start_), " ms while ",
              describe_self(scope), " waited", waiting,
              " (the interrupt check asked to stop, e.g. Ctrl-C); the peers were left inside the operation, so "
              "the context is failed: call pstate_abort");
}

void UcxWorker::throw_aborted(const OpId *ops, size_t n, const WaitScope &scope) {
  const std::string waiting = waiting_for(ops, n);
  throw_error(PSTATE_ERR_ABORTED, scope.text(), ": aborted after ", ms_since(wait_start_), " ms while ",
              describe_self(scope), " waited", waiting,
              ": ", kAbortedByAnotherThread, "; the peers were "
              "left inside the operation");
}

void UcxWorker::signal() noexcept {
  if (worker_ != nullptr) ucp_worker_signal(worker_);
}

}  // namespace pstate
