// shrink.cpp — surviving a dead rank: pstate_shrink (the survivors agree and rebuild the world),
// pstate_grow (the survivors admit replacement processes started with PSTATE_REJOIN=1).
//
// The agreement of pstate_shrink lives in the job's store, which outlives every rank when
// `pstate run` or `pstate store` serves it, and which sees every rank's connection close on any
// host (Store::members). Epoch E (the world's rebuilds so far, plus one; the same on every
// survivor, since every rebuild was collective over them):
//   1. each survivor sets "pstate/shrink/E/here/<launch rank>";
//   2. it waits until every member of the current world is either here or dead — dead meaning
//      its process ended (its store connection closed, or, same host, its pid exited); a rank
//      that is merely slow is waited for, up to the context timeout, and then named;
//   3. it proposes the members that are here and alive, in world order, with the next group
//      generation, by Store::set_if_absent("pstate/shrink/E/result"): the first proposal stored is
//      the answer every survivor reads back, so they all rebuild the same world even when a rank
//      dies during the agreement (a dead proposer's proposal, once stored, still stands);
//   4. it renumbers the world (new global rank = index in the answer), takes up a fresh UCX
//      worker (made in step 1, its address published with "here": see rebuild_world; the old
//      worker and every endpoint of it, the dead's included, are closed) and makes a new world
//      group (a fresh group id and fresh shared-memory names);
//   5. it sets "ready" and settles the outcome the same way: the first to see every member of the
//      answer ready stores "ok", the first to see one of them dead without it stores "retry"
//      (set_if_absent again), and all go on, or all agree again at epoch E+1 without the dead.
//      No survivor goes on while another agrees again. A rank that dies after "ok" is found by
//      the next collective (PEER_LOST, on every survivor: the first to see it tells the others,
//      see UcxWorker::post_notices), and the survivors call pstate_shrink again.
// Every model-parallel and custom group is dropped first (device communicators aborted: a dead
// peer cannot finalize one; they are re-created on first use, or split from the new world's);
// old handles stay valid and answer INVALID_STATE. The world's NCCL communicator is kept, where
// NCCL has ncclCommShrink (2.27; from 2.28 a failed one is revoked, not aborted, so it survives
// its failure), and the new world's is shrunk from it once the outcome is "ok"
// (shrink_device_world), without a unique id; otherwise it is made anew on first use. The world
// group's memory (pstate_mem_alloc, the pool) is handed to the new world group and its windows
// registered on the new communicator before pstate_shrink returns (group memory survives a shrink);
// pstate_grow drops it with the world group (the newcomers hold none, and registration is
// collective).
//
// pstate_grow: a replacement process (PSTATE_REJOIN=1, the RANK of a dead rank) connects to the
// job's store (the job token checked in the handshake as at start), adds its record under
// "pstate/rejoin/<n>" (n from a counter) and waits for "pstate/rejoin/<n>/admit". The survivors'
// rank 0 waits up to timeout_ms for records past the ones it has seen, checks them (the launch rank
// must be one of a dead rank, once), broadcasts the decision over the world group, and writes each
// admitted process its admission: epoch, group generation, job id, the new member list and the
// peer directory. Everyone then rebuilds the world with the newcomers appended in launch-rank
// order and meets in its barrier.
#include "bootstrap/netif.hpp"
#include "bootstrap/store_wait.hpp"
#include "bootstrap/wire.hpp"
#include "common/le_bytes.hpp"
#include "group/context.hpp"
#include "group/group.hpp"
#include "group/rank_records.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace pstate {

namespace {

std::string shrink_key(uint32_t epoch, const std::string &what) { return cat("pstate/shrink/", epoch, "/", what); }
std::string rejoin_key(int64_t n) { return cat("pstate/rejoin/", n); }

// Lists of launch ranks in store values: u32 count, then u32 each (common/le_bytes.hpp).
void put_list(Bytes &b, const std::vector<int> &v) {
  put_u32(b, static_cast<uint32_t>(v.size()));
  for (int x : v) put_u32(b, static_cast<uint32_t>(x));
}
std::vector<int> get_list(LeReader &r) {
  std::vector<int> v;
  for (uint32_t n = r.u32(); n > 0; --n) v.push_back(static_cast<int>(r.u32()));  // a bad count ends in take()
  return v;
}

std::string launch_list(const std::vector<int> &ranks) { return rank_list(ranks, ranks.size()); }

}  // namespace

void Context::drop_all_groups(DroppedBy by) noexcept {
  groups_.abort_device();  // a dead peer can never finalize a communicator with us
  groups_.retire_all(by);
}

// The world becomes `members` (launch ranks, in world order). After a failure (pstate_shrink)
// every survivor brings a fresh UCX worker (`fresh`), whose address it published with its "here"
// key: a failed wait force-closes the endpoints of its stuck sends, which over TCP fails the other
// side's endpoint some time later, and endpoints renewed in place race with UCX's own matching of
// the two sides' endpoints; a new worker has no endpoint, no connection and no stale message, and
// the old one is closed by force. The store has settled the outcome, so no barrier follows.
// Otherwise (pstate_grow, a rejoining process) only broken endpoints are renewed and one barrier
// over UCX proves the newcomers' transport.
void Context::rebuild_world(std::vector<int> members, bool after_failure, std::unique_ptr<UcxWorker> fresh) {
  members_ = std::move(members);
  rank_ = global_rank_of(launch_rank());
  if (store_) store_->world_resized(static_cast<int>(members_.size()));  // the last one out cleans up
  if (fresh) {
    worker_->force_close();
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);  // request_abort may signal the worker now
      worker_ = std::move(fresh);
    }
    // The survivors' fresh workers' addresses are in peers_; "pstate/peer/<r>" has old ones.
    peers_.forget_store_addresses();
    worker_->set_directory([this](int r, bool urgent) { return peer_entry(r, urgent); });
    if (interrupt_fn_ != nullptr) worker_->set_interrupt_check([this] { return interrupted(); });
  } else {
    for (int r : members_)
      if (r != launch_rank() && worker_->peer_broken(r)) worker_->forget_peer(r);
  }
  worker_->set_epoch(epoch_);  // failure notices of older worlds are ignored from now on
  state_ = State::kReady;
  if (trace_) trace_->begin_epoch(epoch_);
  groups_.set_world(make_group(PSTATE_GROUP_WORLD, 0, members_,
                               GroupRegistry::group_id_for(groups_.generation(), PSTATE_GROUP_WORLD)));
  if (!after_failure) world()->barrier(/*allow_shm=*/false);
}

// Step 5 of the agreement: did every member of the answer take it up? Each sets "ready"; the
// first to see them all proposes "ok", the first to see one dead without it proposes "retry";
// the first proposal stored is the outcome for all, so they never split between a rank that
// goes on and one that agrees again.
bool Context::shrink_outcome_ok(uint32_t epoch, const Deadline &deadline) {
  store_->set(shrink_key(epoch, cat("ready/", launch_rank())), Bytes{}, deadline);
  const std::string proposal = await_members(epoch, "ready", deadline).all_arrived ? "ok" : "retry";
  const Bytes outcome = store_->set_if_absent(shrink_key(epoch, "outcome"), Bytes(proposal.begin(), proposal.end()), deadline);
  return std::string(outcome.begin(), outcome.end()) == "ok";
}

// Waits until every member of the world has set "pstate/shrink/<epoch>/<what>/<launch rank>" or
// is dead (its process ended). A key seen once is not asked for again; the pause between looks
// grows from 1 to 8 ms, so a large world does not flood the store while one rank is slow.
Context::Arrivals Context::await_members(uint32_t epoch, const char *what, const Deadline &deadline) {
  const size_t n = members_.size();
  std::vector<char> seen(n, 0);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      if (!seen[i]) seen[i] = members_[i] == launch_rank() || store_->check(shrink_key(epoch, cat(what, "/", members_[i])), deadline);
      all = all && seen[i];
    }
    std::vector<int> live = all ? members_ : live_launch_ranks(/*for_agreement=*/true);
    std::vector<int> missing;
    for (size_t i = 0; i < n; ++i)
      if (!seen[i] && std::find(live.begin(), live.end(), members_[i]) != live.end()) missing.push_back(members_[i]);
    if (missing.empty()) {
      Arrivals a;
      a.all_arrived = all;
      for (size_t i = 0; i < n; ++i)
        if (seen[i] && std::find(live.begin(), live.end(), members_[i]) != live.end()) a.arrived_and_live.push_back(members_[i]);
      return a;
    }
    worker_->progress_notices();  // this rank's failure notices still reach the ranks that wait
    if (deadline.expired())
      throw_error(PSTATE_ERR_TIMEOUT, "pstate_shrink on rank ", rank(), ": launch ", ranks_phrase(missing, missing.size()),
                  " alive but ", std::string(what) == "here" ? "did not call pstate_shrink" : "did not take the answer up",
                  " within ", launch_.timeout_ms,
                  " ms (every live rank must call it; a rank that is merely slow is never declared dead)");
    await_store_change(*store_, pause);  // a sleep, or an etcd watch
    pause = std::min(pause * 2, std::chrono::milliseconds(8));
  }
}

// Every survivor said at "here" whether it holds the failed world's NCCL communicator; only when
// all do is it shrunk (ncclCommShrink is collective over every rank it keeps); else the new
// world's is made by a bootstrap on its first device use, as before NCCL 2.27. A shrink that
// fails (a survivor died during it) leaves the same fallback: the next collective finds the dead.
void Context::shrink_device_world(std::unique_ptr<DeviceComm> parent, const std::vector<int> &old_members,
                                  const Deadline &deadline) {
  // A world of one has no NCCL communicator (its device operations are local copies on the
  // stream, group_device.cpp): nothing to shrink into, and no one-rank communicator is kept.
  if (world_size() == 1) {
    if (parent) parent->abort();
    return;
  }
  bool all = parent != nullptr;
  for (int r : members_)
    if (all && r != launch_rank()) {
      const Bytes v = store_->get(shrink_key(epoch_, cat("nccl/", r)), deadline);
      all = v.size() == 1 && v[0] == 1;
    }
  if (all) {
    std::vector<int> exclude;  // the dead ranks' ranks in the failed world (= its communicator)
    for (size_t i = 0; i < old_members.size(); ++i)
      if (global_rank_of(old_members[i]) < 0) exclude.push_back(static_cast<int>(i));
    try {
      world()->shrink_device_from(*parent, exclude);
    } catch (const Error &e) {
      log_.warn("shrink: ncclCommShrink failed (", e.what(), "); the new world's NCCL communicator will be made "
                "anew at its first device operation");
    }
  } else if (world_size() > 1) {
    log_.info("shrink: ", parent ? "not every survivor" : "this rank does not",
              " hold the failed world's NCCL communicator (made, and NCCL >= 2.27 with ncclCommShrink)",
              ": the new world's is made anew at its first device operation");
  }
  if (parent) parent->abort();  // ncclCommShrink terminated its operations; free it (local)
}

std::vector<int> Context::shrink_now() {
  if (state_ == State::kClosed) throw_error(PSTATE_ERR_INVALID_STATE, "pstate_shrink: the context is finalized");
  require_not_capturing("pstate_shrink");
  const auto started = std::chrono::steady_clock::now();
  const Deadline deadline = Deadline::after_ms(launch_.timeout_ms);
  const std::vector<int> before = members_;
  const bool store_of_rank0 = launch_.store.kind == InitMethod::Kind::kTcp && !launch_.store_external;
  auto store_lost = [&](const Error &e) -> Error {
    if (e.status() == PSTATE_ERR_TIMEOUT) return e;
    if (store_of_rank0 && launch_rank() != 0)
      return Error(PSTATE_ERR_PEER_LOST,
                   cat("pstate_shrink on rank ", rank(), ": the job's store is gone (", e.what(),
                       "); launch rank 0 served it, so its death took the store with it and the survivors cannot "
                       "agree: the job must be restarted. Serve the store outside the ranks so it outlives any of "
                       "them: start the job with `pstate run` (its launcher serves the store), or run `pstate store` "
                       "and set PSTATE_STORE_EXTERNAL=1 on every rank"));
    return Error(e.status(), cat("pstate_shrink on rank ", rank(), ": the job's store failed (", e.what(),
                                 "); the survivors cannot agree without it: call pstate_abort"));
  };
  log_.info("shrink: rank ", rank(), " of ", world_size(), " (launch rank ", launch_rank(), ") starts",
            state_ == State::kFailed ? cat(" after: ", failure_) : std::string());
  // The failed world's NCCL communicator, kept for ncclCommShrink (PSTATE_NCCL_SHRINK=0: never)
  std::unique_ptr<DeviceComm> device_parent;
  const char *shrink_env = std::getenv("PSTATE_NCCL_SHRINK");
  if (world() && device_ctx_ && (shrink_env == nullptr || std::string(shrink_env) != "0"))
    device_parent = world()->take_shrinkable_device_comm();
  // The world group's memory (pstate_mem_alloc, its pool) survives: it passes to the new world group
  std::unique_ptr<GroupMemory> world_memory = world() ? world()->take_memory() : nullptr;
  drop_all_groups(DroppedBy::kShrink);
  for (;;) {
    const uint32_t epoch = epoch_ + 1;
    std::vector<int> live;
    std::unique_ptr<UcxWorker> fresh = make_worker();  // the new world's (see rebuild_world)
    try {
      if (device_ctx_)  // before "here": whoever sees this rank here finds it
        store_->set(shrink_key(epoch, cat("nccl/", launch_rank())), Bytes{static_cast<uint8_t>(device_parent ? 1 : 0)},
                    deadline);
      store_->set(shrink_key(epoch, cat("here/", launch_rank())), encode_peer_entry(fresh->self_entry()), deadline);
      // 2. every member here or dead; the proposal: those here and alive, in world order
      live = await_members(epoch, "here", deadline).arrived_and_live;
    } catch (const Error &e) {
      fail(e.what());
      throw store_lost(e);
    }
    // 3. the first proposal stored is the answer
    Bytes proposal;
    put_u32(proposal, groups_.generation() + 1);
    put_list(proposal, live);
    Bytes answer;
    try {
      answer = store_->set_if_absent(shrink_key(epoch, "result"), proposal, deadline);
    } catch (const Error &e) {
      fail(e.what());
      throw store_lost(e);
    }
    LeReader in(answer, "pstate_shrink: the survivors' answer on the store");
    const uint32_t generation = in.u32();
    std::vector<int> agreed = get_list(in);
    epoch_ = epoch;
    if (std::find(agreed.begin(), agreed.end(), launch_rank()) == agreed.end()) {
      fail("pstate_shrink: the survivors left this rank out");
      throw_error(PSTATE_ERR_PEER_LOST, "pstate_shrink: the survivors' agreement (epoch ", epoch, ": launch ranks ",
                  launch_list(agreed), ") left out this rank (launch rank ", launch_rank(),
                  "): they saw it dead (its store connection closed?); call pstate_abort");
    }
    groups_.set_generation(generation);
    // 4. the new world, 5. taken up by all its members, or agreed again without the dead
    bool ok = false;
    try {
      for (int r : agreed)  // every member of the answer was here: its new worker's address too
        if (r != launch_rank())
          peers_.set_entry(r, decode_peer_entry(store_->get(shrink_key(epoch, cat("here/", r)), deadline)));
      peers_.set_entry(launch_rank(), fresh->self_entry());
      rebuild_world(agreed, /*after_failure=*/true, std::move(fresh));
      ok = shrink_outcome_ok(epoch, deadline);
    } catch (const Error &e) {
      fail(e.what());
      if (e.status() == PSTATE_ERR_TIMEOUT) throw;
      throw store_lost(e);
    }
    if (ok) break;
    log_.info("shrink: epoch ", epoch, ": a rank of the answer died before taking it up; agreeing once more");
    groups_.retire_world();
  }
  failure_.clear();
  dumped_since_failure_ = false;
  if (trace_) trace_->clear_failure();
  if (device_ctx_) {
    try {
      world()->adopt_memory(std::move(world_memory));
      shrink_device_world(std::move(device_parent), before, deadline);
      // Its windows onto the survivors' communicator, now, while every survivor is here
      world()->sync_memory("pstate_shrink");
    } catch (const Error &e) {
      fail(e.what());
      throw store_lost(e);
    }
  }
  std::vector<int> new_rank;
  for (int r : before) new_rank.push_back(global_rank_of(r));
  std::vector<int> gone;
  for (size_t i = 0; i < before.size(); ++i)
    if (new_rank[i] < 0) gone.push_back(static_cast<int>(i));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  log_.info("shrink: epoch ", epoch_, ": world of ", world_size(), " ranks (was ", before.size(), "; ",
            gone.empty() ? std::string("none gone") : cat(ranks_phrase(gone, gone.size()), " gone"), "), this rank is ",
            rank(), ", ", ms.count(), " ms");
  return new_rank;
}

}  // namespace pstate

namespace pstate {

namespace {

constexpr uint32_t kAdmitted = 1, kRefused = 2;
constexpr const char *kRejoinCount = "pstate/rejoin/count";

struct Arrival {
  int64_t n = 0;           // its number under pstate/rejoin/
  int launch_rank = -1;
  Bytes record;            // its RankRecord, encoded
  std::string refusal;     // empty: admitted
};

}  // namespace

// The replacement's side (PSTATE_REJOIN=1), at pstate_init after its UCX worker is up.
void Context::join_as_replacement(Deadline deadline) {
  RankRecord mine{
      launch_.local_rank_given ? launch_.local_rank : -1,
      launch_.socket_ifname.empty() ? std::string() : describe_interfaces(select_interfaces(launch_.socket_ifname)),
      worker_->self_entry()};
  const int64_t n = store_->add(kRejoinCount, 1, deadline);
  Bytes value;
  put_u32(value, static_cast<uint32_t>(launch_rank()));
  Bytes rec = encode_rank_record(mine);
  value.insert(value.end(), rec.begin(), rec.end());
  store_->set(rejoin_key(n), value, deadline);
  log_.info("init: rejoining as launch rank ", launch_rank(), " (arrival ", n,
            "): waiting for the survivors to admit this process (pstate_grow)");
  Bytes admit;
  try {
    admit = store_->get(rejoin_key(n) + "/admit", deadline);
  } catch (const Error &e) {
    if (e.status() != PSTATE_ERR_TIMEOUT) throw;
    throw_error(PSTATE_ERR_TIMEOUT, "pstate_init (PSTATE_REJOIN=1, launch rank ", launch_rank(),
                "): the survivors did not admit this process within ", launch_.init_timeout_ms,
                " ms (PSTATE_INIT_TIMEOUT_MS): they admit replacements in pstate_grow, which every survivor calls; is "
                "the job still running, and does it call pstate_grow? (", e.what(), ")");
  }
  LeReader in(admit, "pstate_init (rejoin): the survivors' admission");
  const uint32_t kind = in.u32();
  if (kind == kRefused) {
    const Bytes why = in.rest();
    throw_error(PSTATE_ERR_MISMATCH, "pstate_init (PSTATE_REJOIN=1, launch rank ", launch_rank(),
                "): the survivors refused this process: ", std::string(why.begin(), why.end()));
  }
  epoch_ = in.u32();
  groups_.set_generation(in.u32());
  rejoins_seen_ = in.u32();
  std::vector<int> members = get_list(in);
  peers_.adopt(decode_rank_directory(in.rest()), launch_.world_size, launch_rank(),
               "pstate_init (rejoin): the survivors' directory");
  peers_.set_entry(launch_rank(), worker_->self_entry());
  if (!launch_.local_rank_given) {  // this process's index among the members of its host
    int local = 0;
    for (int r : members)
      if (r < launch_rank() && peers_.host_id(r) == peers_.host_id(launch_rank()))
        ++local;
    launch_.local_rank = local;
  }
  if (device_ == PSTATE_DEVICE_CUDA && !device_ctx_) open_device(device_ordinal_param_);
  worker_->set_directory([this](int r, bool urgent) { return peer_entry(r, urgent); });
  rebuild_world(members, /*after_failure=*/false);
  log_.info("init: rejoined job ", peers_.job_id(), " as rank ", rank(), " of ", world_size(), " (epoch ", epoch_, ")");
}

int Context::grow_now(int64_t timeout_ms) {
  require_usable("pstate_grow");
  require_not_capturing("pstate_grow");
  if (timeout_ms < 0) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "pstate_grow: timeout_ms ", timeout_ms, " < 0");
  // Store calls get the context timeout each (rank 0's patience may be longer than it).
  Deadline deadline = Deadline::after_ms(launch_.timeout_ms);
  // Rank 0 looks at the store; every survivor gets its decision over the world group.
  Bytes decision;
  if (rank() == 0) {
    const Deadline patience = Deadline::after_ms(timeout_ms);
    int64_t count = 0;
    for (;;) {
      count = store_->add(kRejoinCount, 0, Deadline::after_ms(launch_.timeout_ms));
      if (count > rejoins_seen_ || patience.expired()) break;
      await_store_change(*store_, std::chrono::milliseconds(2));  // a sleep, or an etcd watch
    }
    deadline = Deadline::after_ms(launch_.timeout_ms);
    std::vector<Arrival> arrivals;
    std::vector<int> taken = members_;
    for (int64_t n = rejoins_seen_ + 1; n <= count; ++n) {
      Arrival a;
      a.n = n;
      Bytes v = store_->get(rejoin_key(n), deadline);  // it added the count, then set this
      LeReader in(v, "pstate_grow: a replacement's record on the store");
      a.launch_rank = static_cast<int>(in.u32());
      a.record = in.rest();
      if (a.launch_rank < 0 || a.launch_rank >= launch_.world_size)
        a.refusal = cat("launch rank ", a.launch_rank, " is outside the job's 0..", launch_.world_size - 1);
      else if (std::find(taken.begin(), taken.end(), a.launch_rank) != taken.end())
        a.refusal = cat("launch rank ", a.launch_rank, " is ",
                        global_rank_of(a.launch_rank) >= 0 ? cat("alive (rank ", global_rank_of(a.launch_rank), ")")
                                                           : std::string("claimed by an earlier replacement"),
                        ": a replacement takes the RANK of a dead rank");
      else
        taken.push_back(a.launch_rank);
      arrivals.push_back(std::move(a));
    }
    put_u32(decision, static_cast<uint32_t>(count));
    put_u32(decision, static_cast<uint32_t>(arrivals.size()));
    for (const Arrival &a : arrivals) {
      put_u32(decision, static_cast<uint32_t>(a.n));
      put_u32(decision, static_cast<uint32_t>(a.launch_rank));
      put_u32(decision, a.refusal.empty() ? kAdmitted : kRefused);
      put_u32(decision, static_cast<uint32_t>(a.record.size()));
      decision.insert(decision.end(), a.record.begin(), a.record.end());
    }
  }
  {
    // Rank 0 has waited up to timeout_ms for replacements before it broadcasts: the others' wait
    // for its decision is that long plus the context timeout, so a grow with no replacement ends
    // in TIMEOUT with the world unchanged on every rank, not in a failed world.
    LongerOps longer(*this, timeout_ms);
    decision = world()->broadcast_object(decision.data(), decision.size(), 0, OpKind::kGrowDecision);
  }
  LeReader in(decision, "pstate_grow: rank 0's decision");
  const int64_t count = in.u32();
  const uint32_t arrivals = in.u32();
  std::vector<std::pair<int64_t, int>> admitted;  // (n, launch rank)
  std::vector<int64_t> refused;
  for (uint32_t i = 0; i < arrivals; ++i) {
    int64_t n = in.u32();
    int rank = static_cast<int>(in.u32());
    bool ok = in.u32() == kAdmitted;
    const uint32_t len = in.u32();
    const uint8_t *bytes = in.take(len);
    Bytes rec(bytes, bytes + len);
    if (!ok) {
      refused.push_back(n);
      continue;
    }
    peers_.admit(rank, decode_rank_record(rec));
    worker_->forget_peer(rank);  // the dead process's endpoint, if any: the next use reaches the new one
    if (static_cast<size_t>(rank) < live_watches_.size()) live_watches_[static_cast<size_t>(rank)].reset();
    admitted.emplace_back(n, rank);
  }
  rejoins_seen_ = count;
  if (rank() == 0)
    for (int64_t n : refused) {  // the refused hear why, at once
      Bytes v;
      put_u32(v, kRefused);
      std::string why = "its launch rank is not one of a dead rank (see the survivors' log), or it came twice";
      v.insert(v.end(), why.begin(), why.end());
      store_->set(rejoin_key(n) + "/admit", v, deadline);
    }
  if (admitted.empty())
    throw_error(PSTATE_ERR_TIMEOUT, "pstate_grow: no replacement process (PSTATE_REJOIN=1) was admitted within ",
                timeout_ms, " ms", refused.empty() ? std::string() : cat(" (", refused.size(), " refused)"),
                "; the world is unchanged (", world_size(), " ranks) and usable");
  std::sort(admitted.begin(), admitted.end(), [](auto &a, auto &b) { return a.second < b.second; });
  std::vector<int> members = members_;
  for (auto &[n, r] : admitted) members.push_back(r);
  ++epoch_;
  groups_.next_generation();
  if (rank() == 0) {
    for (int r : members_) peer_entry(r, false);  // every member's address, read if not yet (the newcomer gets them)
    std::vector<Bytes> records;
    for (int r = 0; r < launch_.world_size; ++r) records.push_back(encode_rank_record(peers_.record(r)));
    Bytes admit;
    put_u32(admit, kAdmitted);
    put_u32(admit, epoch_);
    put_u32(admit, groups_.generation());
    put_u32(admit, static_cast<uint32_t>(rejoins_seen_));
    put_list(admit, members);
    Bytes dir = encode_rank_directory(peers_.job_id(), records);
    admit.insert(admit.end(), dir.begin(), dir.end());
    for (auto &[n, r] : admitted) store_->set(rejoin_key(n) + "/admit", admit, deadline);
  }
  const int before = world_size();
  drop_undelivered(groups_.live(), "pstate_grow");  // the old world's ids are free after this
  drop_all_groups(DroppedBy::kGrow);
  rebuild_world(members, /*after_failure=*/false);
  log_.info("grow: epoch ", epoch_, ": world of ", world_size(), " ranks (was ", before, "), this rank is ", rank());
  return static_cast<int>(admitted.size());
}

}  // namespace pstate
