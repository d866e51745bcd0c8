// failure_notices.cpp — the failure of a context and the failure notices: the first fatal error
// poisons the context (later calls are ABORTED naming it) and is told to the peers at once
// (UcxWorker::post_notices), unless it is itself a peer's notice; the notices a rank takes while
// it waits (check_notices); abort from any thread and the interrupt check; which ranks are alive.
#include "group/context.hpp"

#include "group/group.hpp"

#include <unistd.h>

#include <algorithm>
#include <optional>

namespace pstate {

// The failure itself reaches the caller as the failing call's error, so it is said once, there;
// the log repeats it only at INFO (PSTATE_DEBUG=INFO), for the trail of lifecycle events.
// The line has the failure's status as a field where one is known (JSON logs); the group and the
// call are named by the failed call's own line (trace_call_failed), which follows.
void Context::fail(const std::string &why) { poison(why, std::nullopt); }

bool Context::poison(const std::string &why, std::optional<pstate_status_t> status) {
  if (state_ == State::kFailed || state_ == State::kClosed) return false;
  state_ = State::kFailed;
  failure_ = why;
  observer_add(observer_.context().context_failures, 1);
  dumped_since_failure_ = false;
  if (trace_) trace_->set_failure(why);
  log_.info_at(LogFields{{}, {}, status}, "context failed: ", why,
               " — further collectives return PSTATE_ERR_ABORTED; call pstate_abort");
  hooks_.abort("context_failed", status.value_or(PSTATE_ERR_ABORTED), why);
  return true;
}

void Context::fail(const std::string &why, pstate_status_t status, bool tell_peers) {
  const bool first = poison(why, status);
  if (first) failure_status_ = status;
  // Every peer hears it at once, with the cause, unless the failure is itself a peer's notice: a
  // rank that gave up (a timeout, a mismatch only it could see, no memory for a segment its
  // peers wait on, an interruption) must not leave them waiting for it until their deadline, nor
  // let a late peer complete the call it gave up on (one verdict per call: a call that one rank
  // gave up on fails on every rank).
  if (first && worker_ && tell_peers) {
    observer_add(observer_.context().notices_sent, 1);
    read_addresses_for_notices(status);
    worker_->post_notices(members_, -1, status, why, calls_returned());
  }
}

// Where this rank's collectives stood, for its notices: per live group, the calls that returned
// (a peer inside one of those calls completes it; the notice decides only the calls after).
std::vector<std::pair<uint32_t, uint32_t>> Context::calls_returned() const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  try {
    for (const Group *g : groups_.live()) out.emplace_back(g->group_id(), g->calls_returned());
  } catch (...) {  // no memory: the notice decides whatever its receivers wait for, as before
    out.clear();
  }
  return out;
}

// The notices of a death (PEER_LOST) go to every member, over new endpoints where needed (the
// hosts stay reachable); those of any other failure, which may be a cut network, to this host's
// members and over endpoints already open (UcxWorker::post_notices). The members among those
// whose address this rank never read (rank_records.hpp) are read here in one pipelined batch,
// bounded to 1 s; if the store does not answer, those peers learn of the failure by themselves.
void Context::read_addresses_for_notices(pstate_status_t status) noexcept {
  if (store_) peers_.read_addresses(members_, /*same_host_only=*/status != PSTATE_ERR_PEER_LOST, *store_, timeout_ms());
}

// A notice waits (check_notices): take it; one of another epoch is dropped, one of a later call
// is held for it (UcxWorker::take_notice), and the call goes on.
void Context::throw_waiting_notice(const std::string &group, const char *op, const char *self,
                                   const CallPosition *at) {
  if (auto n = worker_->take_notice(/*progress=*/false, at, /*arrived=*/true))
    throw UcxWorker::notice_error(*n, cat(group, " ", op), cat("rank ", rank(), " (", self, ")"), global_rank_of(n->from));
}

void Context::check_notices(const std::string &where, const char *self, const CallPosition *at) {
  if (!worker_ || worker_->closed()) return;
  if (auto n = worker_->take_notice(true, at))
    throw UcxWorker::notice_error(*n, where, cat("rank ", rank(), " (", self, ")"), global_rank_of(n->from));
}

void Context::set_interrupt_check(pstate_interrupt_fn fn, void *user) {
  interrupt_fn_ = fn;
  interrupt_user_ = fn != nullptr ? user : nullptr;
  if (worker_) worker_->set_interrupt_check(fn != nullptr ? std::function<bool()>([this] { return interrupted(); }) : nullptr);
}

void Context::request_abort() noexcept {
  if (abort_requested_.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard<std::mutex> lock(wake_mutex_);
  if (worker_) worker_->signal();  // a UCX wait asleep in poll() wakes and reads the flag
  if (store_) store_->interrupt();  // a store wait (shrink, grow, live ranks) ends with ABORTED
}

void Context::throw_abort_requested(const std::string &where) const {
  throw_error(PSTATE_ERR_ABORTED, where, " on rank ", rank_, ": ", kAbortedByAnotherThread,
              "; only pstate_abort or pstate_finalize may follow");
}

void Context::require_usable(const char *call) const {
  if (abort_requested()) throw_abort_requested(call);
  if (state_ == State::kFailed)
    throw_error(PSTATE_ERR_ABORTED, call, " refused: this context failed earlier (", failure_,
                "); call pstate_abort or pstate_finalize");
  if (state_ == State::kClosed) throw_error(PSTATE_ERR_INVALID_STATE, call, ": the context is finalized");
}

std::vector<int> Context::live_ranks() {
  bool store_answered = false;
  std::vector<int> launch_live = live_launch_ranks(false, &store_answered);
  // A peer was lost, yet everyone is still here: the news (a notice from the rank that saw the
  // death) may have outrun the store's thread, which has not yet read the dead's connection end.
  // Ask again, briefly; a loss that is no process's end (a broken link) stays "all live".
  if (state_ == State::kFailed && failure_status_ == PSTATE_ERR_PEER_LOST && store_answered &&
      launch_live.size() == members_.size()) {
    const Deadline settle = Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 1000));
    const auto t0 = Deadline::Clock::now();
    while (store_answered && launch_live.size() == members_.size() && !settle.expired()) {
      ::usleep(5000);
      launch_live = live_launch_ranks(false, &store_answered);
    }
    log_.info("live ranks: the store listed every rank after a lost peer; asked again for ",
              std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - t0).count(), " ms: ",
              members_.size() - launch_live.size(), " gone");
  }
  std::vector<int> live;
  for (int r : launch_live) live.push_back(global_rank_of(r));
  return live;
}

// The members (launch ranks, in world order) not known to be dead. for_agreement (pstate_shrink):
// only a process's end counts — its store connection closed (any host) or its pid exited (same
// host); a UCX endpoint error does not, since a survivor that gave up on a collective may have
// force-closed its endpoints to live peers. Without a store that can tell, UCX's word counts too.
std::vector<int> Context::live_launch_ranks(bool for_agreement, bool *store_answered) {
  const int n = launch_.world_size;
  if (live_watches_.size() != static_cast<size_t>(n)) live_watches_.resize(static_cast<size_t>(n));
  // The store's view first: it sees the connection of every rank close, on any host.
  std::optional<std::vector<int>> connected;
  if (store_) {
    try {
      connected = store_->members(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 2000)));
      if (store_answered) *store_answered = connected.has_value();
    } catch (const Error &e) {
      if (for_agreement) throw;
      log_.info("live ranks: the store cannot tell (", e.what(), "); what this rank saw itself decides");
    }
  }
  std::vector<int> live;
  live.reserve(members_.size());
  for (int r : members_) {
    bool dead = false;
    if (r != launch_rank()) {
      dead = connected && !std::binary_search(connected->begin(), connected->end(), r);
      if (!dead && worker_ && (!for_agreement || !connected)) dead = worker_->peer_lost(r);
      const int64_t pid = peers_.pid(r);
      if (!dead && peers_.host_id(r) == peers_.host_id(launch_rank()) && pid > 0 && pid != ::getpid()) {
        auto &w = live_watches_[static_cast<size_t>(r)];
        if (!w || w->pid() != static_cast<pid_t>(pid)) w = std::make_unique<ProcessWatch>(static_cast<pid_t>(pid));
        dead = w->exited();
      }
    }
    if (!dead) live.push_back(r);
  }
  return live;
}

void Context::tell_peers_aborted(const char *call) noexcept {
  if (state_ == State::kFailed || state_ == State::kClosed) return;  // told already, or nothing to tell
  try {
    fail(cat(call, " on rank ", rank_, ": the application stopped this rank's context while no call of it was in "
             "flight (a watchdog or a shutdown); it takes part in no further call"),
         PSTATE_ERR_ABORTED);
  } catch (...) {  // no memory for the text: the peers learn of it by themselves
  }
}

}  // namespace pstate
