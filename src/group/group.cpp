// group.cpp — GroupCoordinator operations: argument-checked calls become numbered, verified,
// deadline-bounded runs of the algorithms in src/coll/ over this group's channel.
#include "group/group.hpp"

#include "coll/algorithms.hpp"
#include "group/context.hpp"
#include "reduce/reduce.hpp"
#include "transport/shm/message_queue.hpp"
#include "transport/shm/shm_group.hpp"
#include "transport/shm/shm_names.hpp"
#include "transport/shm/shm_p2p.hpp"
#include "transport/ucx/process_watch.hpp"
#include "transport/ucx/ucx_channel.hpp"
#include "transport/ucx/ucx_tag.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <cstring>

namespace pstate {

namespace {

// Collective tags: bit 31 clear, bits 30..16 the operation's sequence number, bits 15..0 left to
// the algorithm. Point-to-point tags: see ucx_tag.hpp.
// PSTATE_CHECK's descriptor exchange uses the last algorithm step of the operation's tag space.
constexpr uint32_t kCheckStepBase = 0xff00u;

uint32_t tag_base(uint32_t seq) { return (seq & 0x7fffu) << 16; }

// Errors after which the group's peers are at unknown points: NO_MEMORY too (a segment this rank
// could not make is one its peers wait on; it fails the context, and its notice tells them).
bool is_fatal(pstate_status_t s) {
  return s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TRANSPORT ||
         s == PSTATE_ERR_INTERNAL || s == PSTATE_ERR_MISMATCH || s == PSTATE_ERR_INTERRUPTED ||
         s == PSTATE_ERR_NO_MEMORY;
}

}  // namespace

}  // namespace pstate

using pstate::Bytes;
using pstate::OpDescriptor;
using pstate::OpKind;

pstate_group_s::pstate_group_s(pstate::Context &ctx, pstate_group_kind_t kind, size_t index, std::vector<int> ranks,
                               uint32_t group_id)
    : ctx_(ctx), kind_(kind), ranks_(std::move(ranks)), group_id_(group_id) {
  name_ = pstate::cat(pstate_group_kind_name(kind), ":", index);
  auto it = std::find(ranks_.begin(), ranks_.end(), ctx.launch_rank());
  if (it == ranks_.end())
    pstate::throw_error(PSTATE_ERR_INTERNAL, "group ", name_, " does not contain launch rank ", ctx.launch_rank());
  rank_in_group_ = static_cast<int>(it - ranks_.begin());
  for (int r : ranks_) global_.push_back(ctx.global_rank_of(r));
  channel_ = std::make_unique<pstate::UcxChannel>(ctx.worker(), ranks_, rank_in_group_, group_id_, name_);
  position_.group_id = group_id_;
  position_.members = ranks_;
  channel_->set_position(&position_);
  p2p_sent_.assign(2 * ranks_.size(), 0);
  p2p_received_.assign(2 * ranks_.size(), 0);
  if (pstate::TraceRecorder *tr = ctx.trace()) trace_group_ = tr->add_group(name_, ranks_, rank_in_group_);
  const char *shm_env = std::getenv("PSTATE_SHM");
  bool shm_wanted = shm_env == nullptr || std::string(shm_env) != "0";
  bool one_host = true;
  for (int r : ranks_) one_host = one_host && ctx.host_id(r) == ctx.host_id(ctx.launch_rank());
  shm_allowed_ = shm_wanted && one_host && ranks_.size() > 1 && size() <= pstate::kMaxCodedRoot + 1;
  if (ranks_.size() > 1)
    ctx.log().info("group ", name_, ": ",
                   shm_allowed_ ? "shared memory for all_reduce/all_gather/reduce_scatter/broadcast/reduce/scatter/barrier/"
                                   "all_gatherv/reduce_scatterv, UCX for the rest"
                   : !one_host  ? "spans hosts: UCX for every operation"
                                : "UCX for every operation (PSTATE_SHM=0)");
}

std::string pstate_group_s::shm_name(const char *what) const {
  // Groups of one kind, and the groups of one pstate_new_group call, share a group id (their
  // ranks are disjoint), so the first rank of the group makes the name unique among them.
  return pstate::cat("/", pstate::shm::job_name_prefix(ctx_.job_id()), group_id_, "-", ranks_.front(), "-", what);
}

void pstate_group_s::check_peers_alive() {
  if (watches_.empty()) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      int64_t pid = ctx_.peer_pid(ranks_[i]);
      if (static_cast<int>(i) == rank_in_group_ || pid == ::getpid()) continue;
      watches_.push_back(std::make_unique<pstate::ucx::ProcessWatch>(static_cast<pid_t>(pid)));
    }
  }
  for (auto &w : watches_) {
    if (!w->exited()) continue;
    int dead = -1;
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (ctx_.peer_pid(ranks_[i]) == w->pid()) dead = global_[i];
    pstate::throw_error(PSTATE_ERR_PEER_LOST, name_, ": rank ", dead, " (pid ", w->pid(), ") exited while rank ",
                        ctx_.rank(), " waited for it in shared memory; ", pstate::ucx::kPeerLostWayOut);
  }
}

void pstate_group_s::check_waiting() {
  if (p2p_) p2p_->progress();  // pending shared-memory sends move while this rank waits for anything
  ctx_.check_notices(name_, "waiting in shared memory", &position_);  // first: a peer's notice says why, its exit only that it left
  check_peers_alive();
  if (ctx_.abort_requested())
    ctx_.throw_abort_requested(pstate::cat(name_, ": while it waited for its peers in shared memory"));
  if (ctx_.interrupted())
    pstate::throw_error(PSTATE_ERR_INTERRUPTED, name_, ": interrupted while rank ", ctx_.rank(),
                        " waited for its peers in shared memory (the interrupt check asked to stop, e.g. Ctrl-C); "
                        "the peers were left inside the operation, so the context is failed: call pstate_abort");
}

pstate::shm::ShmP2p &pstate_group_s::p2p() {
  if (!p2p_) {
    pstate::shm::ShmP2pOptions o;
    o.label = name_;
    o.liveness = [this] { check_waiting(); };
    o.peer_gone = [this](int r) {
      const int64_t pid = ctx_.peer_pid(ranks_[static_cast<size_t>(r)]);
      return pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    };
    o.same_process = [this](int r) { return ctx_.peer_pid(ranks_[static_cast<size_t>(r)]) == ::getpid(); };
    o.spin = !pstate::shm::oversubscribed(size());
    o.global_ranks = ranks_;
    // PSTATE_SHM_CMA=0: large messages by value through the rings too (two copies), never by
    // reference (process_vm_readv, one copy)
    const char *cma = std::getenv("PSTATE_SHM_CMA");
    if (cma != nullptr && std::string(cma) == "0") o.cma_bytes = 0;
    o.on_cma_refused = [this](int peer, int err) {
      ctx_.log().info("group ", name_, ": this rank may not read the memory of group rank ", peer,
                      " (process_vm_readv: ", std::strerror(err),
                      "; a ptrace policy or seccomp filter?): its large messages to this rank go through the ring "
                      "(two copies) from now on");
    };
    p2p_ = std::make_unique<pstate::shm::ShmP2p>(shm_name("p2p"), rank_in_group_, size(), o);
    ctx_.log().info(p2p_->describe());
  }
  return *p2p_;
}

pstate::shm::ShmGroup &pstate_group_s::shm() {
  if (!shm_) {
    pstate::shm::ShmGroupOptions o;
    o.label = name_;
    o.liveness = [this] { check_waiting(); };
    o.global_ranks = ranks_;
    // PSTATE_SHM_GATHERV_CMA_BYTES=N: all_gatherv whose largest part is N bytes or more reads the
    // peers' parts from their memory (off by default; every rank must set the same N).
    // PSTATE_SHM_CMA=0: no collective reads a peer's memory either (the group decides together).
    if (const char *n = std::getenv("PSTATE_SHM_GATHERV_CMA_BYTES"); n != nullptr && *n != '\0')
      o.cma_bytes = std::strtoull(n, nullptr, 10);
    const char *cma = std::getenv("PSTATE_SHM_CMA");
    if (cma != nullptr && std::string(cma) == "0") o.cma_allowed = false;
    shm_ = std::make_unique<pstate::shm::ShmGroup>(shm_name("coll"), rank_in_group_, size(), ctx_.op_deadline(), o);
    ctx_.log().info(shm_->describe());
  }
  return *shm_;
}

pstate::shm::ShmGroup &pstate_group_s::shm_for_call() {
  auto &s = shm();
  s.set_seq(position_.begun - 1);  // run() numbered this call
  return s;
}

void pstate_group_s::arrive_in_shm(const OpDescriptor &desc) {
  if (!use_shm()) return;
  // run() recorded this call last: the recorder's newest entry is this call's
  if (pstate::TraceRecorder *tr = ctx_.trace()) tr->set_path(tr->recorded(), pstate::TracePath::kUcx);
  shm_for_call().arrive(desc, ctx_.op_deadline());
}

pstate::shm::ShmMessageQueue &pstate_group_s::message_queue() {
  if (!mq_) {
    pstate::shm::ShmMessageQueueOptions o;
    o.label = name_ + " mq";
    o.liveness = [this] { check_waiting(); };
    mq_ = std::make_unique<pstate::shm::ShmMessageQueue>(shm_name("mq"), rank_in_group_, size(), 0,
                                                         ctx_.op_deadline(), o);
    ctx_.log().info(mq_->describe());
  }
  return *mq_;
}

pstate_group_s::~pstate_group_s() {
  abort_requests();  // a group freed without retire() (a failed init) leaves no request pointing at it
  release_p2p();
  magic_ = 0;
}

// The pair segments of this rank: the engine's teardown decides which names go (shm_p2p.hpp); a
// rank that never made one still removes the names its peers may have made for it.
void pstate_group_s::release_p2p() noexcept {
  if (p2p_released_) return;  // once: retire(), then the destructor
  p2p_released_ = true;
  if (p2p_)
    p2p_.reset();
  else if (shm_allowed_ && rank_in_group_ >= 0)
    try {
      pstate::shm::ShmP2p::remove_pair_names(shm_name("p2p"), rank_in_group_, size());
    } catch (...) {  // no memory for the base name
    }
}

void pstate_group_s::retire(pstate::DroppedBy by) noexcept {
  abort_requests();  // first: the channel and the worker are still there to cancel them
  if (!retired_) dropped_by_ = by;
  retired_ = true;
  if (memory_) memory_->release(device_comm_.get());  // windows before their communicator
  memory_.reset();
  device_comm_.reset();  // graceful (ncclCommFinalize, bounded), or nothing after abort_device()
  mq_.reset();
  shm_.reset();
  release_p2p();  // removes its pairs' names: a later group of the same name starts afresh
  watches_.clear();
  channel_.reset();
}

void pstate_group_s::check_alive(const char *call) const {
  if (retired_) {
    if (dropped_by_ == pstate::DroppedBy::kDestroyModelParallel)
      pstate::throw_error(PSTATE_ERR_INVALID_STATE, call, ": group ", name_,
                          " was destroyed by pstate_destroy_model_parallel; get "
                          "the group again after pstate_initialize_model_parallel");
    const char *by = dropped_by_ == pstate::DroppedBy::kShrink ? "pstate_shrink" : "pstate_grow";
    pstate::throw_error(PSTATE_ERR_INVALID_STATE, call, ": group ", name_, " was replaced by ", by,
                        " (it rebuilt the world and dropped every group of the old one): use the groups of the ",
                        dropped_by_ == pstate::DroppedBy::kShrink ? "shrunk" : "grown",
                        " context: pstate_get_group(PSTATE_GROUP_WORLD) again, and the model-parallel groups after "
                        "a new pstate_initialize_model_parallel");
  }
  ctx_.require_usable(call);
}

// Agreement: inside a host the descriptors ride in the shared-memory protocol itself (every
// operation of a shared-memory group takes part there: the ones UCX carries arrive first, see
// arrive_in_shm); a group on UCX exchanges them before the operation (verify_same_op), and so
// does PSTATE_CHECK=1 on every group. On a UCX group a small all_reduce, all_gather, reduce or
// broadcast rides in that exchange (its data in each rank's record, group/agreement_exchange.hpp)
// and a barrier is the exchange alone: no round trip of the agreement's own. A mismatch found by
// the exchange moved no data (nothing was written to a user's buffer) and every rank saw it: the
// context stays usable. One found inside the shared-memory protocol leaves the segment mid-call:
// the context fails like after a timeout.
bool pstate_group_s::exchanges() const {
#ifndef PSTATE_NO_AGREEMENT
  return size() > 1 && (!use_shm() || ctx_.check_enabled());
#else
  return size() > 1 && ctx_.check_enabled();
#endif
}

bool pstate_group_s::can_fold(size_t count, pstate_dtype_t dtype) const {
  // count first: count * size must not wrap (the API refuses such counts, but this decides alone)
  const size_t esize = pstate::dtype_size(dtype);
  if (use_shm() || !exchanges() || count == 0 || esize == 0 || count > pstate::agree::kFoldMax) return false;
  // the cap of the table the last exchange sized (no division per call), else computed
  return count * esize <= (agree_.ranks == size() ? agree_.cap : pstate::agree::fold_cap(size()));
}

template <typename Body>
void pstate_group_s::run(const OpDescriptor &desc_in, Body &&body, const void *fold_payload, bool traced) {
  pstate::TraceRecorder *tr = traced ? ctx_.trace() : nullptr;
  const char *op_name = pstate::op_kind_name(static_cast<OpKind>(desc_in.op));
  try {
    check_alive(op_name);
  } catch (const pstate::Error &e) {  // refused before it was numbered: recorded without a seq
    if (traced) ctx_.trace_call_failed(tr ? trace_begin(*tr, desc_in, false) : 0, e);
    throw;
  }
  const uint64_t tid = tr ? trace_begin(*tr, desc_in, true) : 0;
  OpDescriptor desc = desc_in;
  desc.seq = position_.begun++;
  channel_->set_deadline(ctx_.op_deadline());
  channel_->set_op_name(op_name);
  bool agreeing = true;
  try {
    if (exchanges()) {
      verify_same_op(desc, fold_payload);
      if (tid != 0) tr->started(tid);  // agreed; in shared memory the agreement is part of the call
    }
    agreeing = false;
    body(pstate::tag_base(desc.seq));
  } catch (const pstate::Error &e) {
    // The exchange moved no data, and every rank saw what it saw: a mismatch or a refusal there
    // leaves the context usable.
    const bool agreed_error = e.status() == PSTATE_ERR_MISMATCH || e.status() == PSTATE_ERR_INVALID_ARGUMENT;
    // An abort from another thread fails the context too, and tells the peers (ctx_.fail's notices).
    if (ctx_.abort_requested() || (agreeing ? !agreed_error : pstate::is_fatal(e.status())))
      ctx_.fail(e);  // its notices say this call had not returned here
    position_.returned.store(desc.seq + 1, std::memory_order_relaxed);
    if (traced) ctx_.trace_call_failed(tid, e);  // else the caller's entry records it (and dumps)
    throw;
  }
  position_.returned.store(desc.seq + 1, std::memory_order_relaxed);
  if (tid != 0) tr->completed(tid);
}

uint64_t pstate_group_s::trace_outer_begin(pstate::TraceOp op, int rank) {
  pstate::TraceRecorder *tr = ctx_.trace();
  if (tr == nullptr || retired_) return 0;
  using pstate::TraceOp;
  const auto path = on_device() ? pstate::TracePath::kNccl : size() == 1 ? pstate::TracePath::kLocal
                                : use_shm()   ? pstate::TracePath::kShm
                                              : pstate::TracePath::kUcx;
  if (op == TraceOp::kBroadcastTensorDict)
    return tr->begin(pstate::TraceClass::kColl, op, trace_group_, pstate::TraceRecorder::next_coll(trace_group_),
                     UINT64_MAX, -1, -1, rank, -1, path);
  return tr->begin(pstate::TraceClass::kP2P, op, trace_group_,
                   pstate::TraceRecorder::next_p2p(trace_group_, rank, op == TraceOp::kSendTensorDict, true), UINT64_MAX, -1,
                   -1, -1, rank, path);
}

void pstate_group_s::trace_outer_end(uint64_t id, const pstate::Error *e) {
  if (id == 0) return;
  if (e == nullptr) ctx_.trace()->completed(id);
  else ctx_.trace()->failed(id, e->status());  // the inner operation that failed wrote the dump
}

uint64_t pstate_group_s::trace_begin(pstate::TraceRecorder &tr, const OpDescriptor &d, bool numbered) {
  using pstate::TracePath;
  const TracePath path = size() == 1 ? TracePath::kLocal : use_shm() ? TracePath::kShm : TracePath::kUcx;
  return tr.begin(pstate::TraceClass::kColl, pstate::trace_op_of(d.op), trace_group_,
                  numbered ? pstate::TraceRecorder::next_coll(trace_group_) : UINT64_MAX, d.count, d.dtype,
                  d.reduce_op, d.root, -1, path);
}

// Every rank gathers every rank's record (descriptor, and a folded call's data) and compares the
// descriptors with its own; all ranks see the same table, so all of them report the mismatch
// (and none of them hangs in the real operation).
void pstate_group_s::verify_same_op(const OpDescriptor &desc, const void *fold_payload) {
  pstate::agree::exchange(*channel_, desc, fold_payload, pstate::tag_base(desc.seq) | pstate::kCheckStepBase, &agree_);
  // Every record equal to this rank's (the case of every call that works): done, in one pass.
  bool all_same = true;
  for (const OpDescriptor &d : agree_.desc) all_same &= std::memcmp(&d, &desc, sizeof(OpDescriptor)) == 0;
  if (!all_same) report_disagreement(desc);
}

// Out of line (the error texts need a large frame): the peers are visited from the next rank on,
// so every rank names the same kind of disagreement first.
[[gnu::noinline]] void pstate_group_s::report_disagreement(const OpDescriptor &desc) {
  const std::vector<OpDescriptor> &all = agree_.desc;
  constexpr auto kRefused = static_cast<uint32_t>(OpKind::kRefused);
  for (size_t n = 1; n < all.size(); ++n) {
    const size_t r = (static_cast<size_t>(rank_in_group_) + n) % all.size();
    if (desc.op == kRefused) return;  // this rank refused: the caller throws its own error
    if (all[r].op == kRefused)
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, name_, " #", desc.seq, " ",
                          pstate::op_kind_name(static_cast<OpKind>(desc.op)), ": rank ", global_[r], " (group rank ", r,
                          ") refused its part of this call (an argument only it could check: a NULL, too small or "
                          "overlapping buffer, a size past 2^47 bytes or of none, a pointer that is no group memory, "
                          "...; its own error names it; the count or size it passed: ", all[r].count, "), so no rank "
                          "sent anything and every rank of the call returns this error; the group is still in step "
                          "and usable: fix that rank's arguments");
    if (std::memcmp(&all[r], &desc, sizeof(OpDescriptor)) == 0) continue;
    if (all[r].op == pstate::agree::kUnparsed)
      pstate::throw_error(PSTATE_ERR_MISMATCH, name_, " #", desc.seq, ": rank ", ctx_.rank(), " (group rank ",
                          rank_in_group_, ") called ", pstate::describe_op(desc, true),
                          ", but the agreement record of group rank ", r, " (rank ", global_[r],
                          ") could not be read (a message of ", all[r].count,
                          " bytes that is not records of this pstate version): every rank of the group must run the "
                          "same pstate; the call fails on every rank before any data moved");
    // Equal but for detail: one rank folded its data into the exchange, the other did not.
    const bool fold_differs = !pstate::carries_counts_hash(desc.op) && all[r].detail != desc.detail &&
                              all[r].op == desc.op && all[r].count == desc.count && all[r].dtype == desc.dtype &&
                              all[r].reduce_op == desc.reduce_op && all[r].root == desc.root && all[r].seq == desc.seq;
    pstate::throw_error(PSTATE_ERR_MISMATCH, name_, " #", desc.seq, ": rank ", ctx_.rank(), " (group rank ",
                        rank_in_group_, ") called ", pstate::describe_op(desc, true), ", rank ", global_[r],
                        " (group rank ", r, ") called ", pstate::describe_op(all[r], true),
                        fold_differs ? " (one rank sent its data with the agreement, the other not: do PSTATE_SHM or "
                                       "PSTATE_CHECK differ between the ranks?)"
                                     : "",
                        ": every rank of a group must call the same collectives in the same order, with the same "
                        "counts, dtypes, reduce ops and roots (",
                        ctx_.check_enabled() ? "PSTATE_CHECK" : "UCX", " descriptor exchange; the call fails on every rank, before any data moved: the context stays usable, "
                        "and the next calls work once every rank makes the same ones)");
  }
}

void pstate_group_s::all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                                pstate_reduce_op_t op, OpKind kind) {
  OpDescriptor d{static_cast<uint32_t>(kind), 0, count, dtype, op, -1, 0};
  const size_t fold_bytes = count * pstate::dtype_size(dtype);
  const bool fold = pstate::is_reducible(dtype) && static_cast<int>(op) >= 0 && op < PSTATE_REDUCE_OP_COUNT &&
                    !selector_.allreduce_forced() && can_fold(count, dtype);
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](uint32_t tag) {
    size_t bytes = count * pstate::dtype_size(dtype);
    if (fold) {
      explain(OpKind::kAllReduce, "folded into the agreement exchange", bytes);
      check_peers_stayed();
      return reduce_folded(recv, count, dtype, op);
    }
    if (use_shm()) {
      explain(OpKind::kAllReduce, "shared memory", bytes);
      return shm_for_call().all_reduce(send, recv, count, dtype, op, ctx_.op_deadline(), kind);
    }
    auto choice = selector_.allreduce(size(), count, bytes);
    explain(OpKind::kAllReduce, choice.name, bytes);
    choice.fn(*channel_, send, recv, count, dtype, op, tag);
  }, fold ? send : nullptr);
}

void pstate_group_s::check_peers_stayed() {
  ctx_.check_notices(name_, channel_->op(), "its part of the call had arrived; the peer's verdict came first",
                     &position_);
}

// The balanced tree of allreduce_recursive_doubling.cpp over the payloads, in place in agree_:
// leaves x[2i] op x[2i+1] for i < rem (P = p2 + rem), else x[i + rem]; inner nodes left op right;
// the root (left op right of the top level) is written straight into out (the payloads are
// copies in agree_, so out may be the caller's send buffer).
void pstate_group_s::reduce_folded(void *out, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op) {
  const int p = size();
  if (p == 2) {  // the tree is its root alone: x[0] op x[1] (what the loops below do, without them)
    pstate::reduce_into(out, agree_.payload(0), agree_.payload(1), count, dtype, op);
    if (op == PSTATE_AVG) pstate::finish_avg(out, count, dtype, p);
    return;
  }
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;
  auto leaf = [&](int i) { return i < rem ? 2 * i + 1 : i + rem; };
  for (int i = 0; i < rem; ++i)
    pstate::reduce_into(agree_.payload(2 * i + 1), agree_.payload(2 * i), agree_.payload(2 * i + 1), count, dtype, op);
  for (int w = 1; 2 * w < p2; w *= 2)
    for (int i = 0; i + w < p2; i += 2 * w)
      pstate::reduce_into(agree_.payload(leaf(i)), agree_.payload(leaf(i)), agree_.payload(leaf(i + w)), count, dtype,
                          op);
  if (p2 == 1)  // one rank: never folded (fold_cap(1) is 0), but exact all the same
    std::memcpy(out, agree_.payload(leaf(0)), count * pstate::dtype_size(dtype));
  else
    pstate::reduce_into(out, agree_.payload(leaf(0)), agree_.payload(leaf(p2 / 2)), count, dtype, op);
  if (op == PSTATE_AVG) pstate::finish_avg(out, count, dtype, p);
}

void pstate_group_s::all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, OpKind kind) {
  OpDescriptor d{static_cast<uint32_t>(kind), 0, send_count, dtype, -1, -1, 0};
  const size_t fold_bytes = send_count * pstate::dtype_size(dtype);
  const bool fold = !selector_.allgather_forced() && can_fold(send_count, dtype);
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](uint32_t tag) {
    size_t bytes = send_count * pstate::dtype_size(dtype);
    if (fold) {
      explain(OpKind::kAllGather, "folded into the agreement exchange", bytes);
      check_peers_stayed();
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<uint8_t *>(recv) + static_cast<size_t>(r) * bytes, agree_.payload(r), bytes);
      return;
    }
    if (use_shm()) {
      explain(OpKind::kAllGather, "shared memory", bytes);
      return shm_for_call().all_gather(send, recv, send_count, dtype, ctx_.op_deadline(), kind);
    }
    auto choice = selector_.allgather(size(), bytes);
    explain(OpKind::kAllGather, choice.name, bytes);
    choice.fn(*channel_, send, recv, send_count, dtype, tag);
  }, fold ? send : nullptr);
}

void pstate_group_s::reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                                    pstate_reduce_op_t op) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kReduceScatter), 0, recv_count, dtype, op, -1, 0};
  run(d, [&](uint32_t tag) {
    size_t bytes = recv_count * pstate::dtype_size(dtype) * static_cast<size_t>(size());
    if (use_shm()) {
      explain(OpKind::kReduceScatter, "shared memory", bytes);
      return shm_for_call().reduce_scatter(send, recv, recv_count, dtype, op, ctx_.op_deadline());
    }
    auto choice = selector_.reduce_scatter(size(), bytes);
    explain(OpKind::kReduceScatter, choice.name, bytes);
    choice.fn(*channel_, send, recv, recv_count, dtype, op, tag);
  });
}

void pstate_group_s::broadcast(void *buf, size_t count, pstate_dtype_t dtype, int src) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kBroadcast), 0, count, dtype, -1, src, 0};
  const size_t fold_bytes = count * pstate::dtype_size(dtype);
  const bool fold = src >= 0 && src < size() && !selector_.broadcast_forced() && can_fold(count, dtype);  // only the root's record carries data
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](uint32_t tag) {
    size_t bytes = count * pstate::dtype_size(dtype);
    if (fold) {
      explain(OpKind::kBroadcast, "folded into the agreement exchange", bytes);
      check_peers_stayed();
      if (rank_in_group_ != src) std::memcpy(buf, agree_.payload(src), bytes);
      return;
    }
    if (use_shm()) {
      explain(OpKind::kBroadcast, "shared memory", bytes);
      return shm_for_call().broadcast(buf, count, dtype, src, ctx_.op_deadline());
    }
    auto choice = selector_.broadcast(size(), bytes);
    explain(OpKind::kBroadcast, choice.name, bytes);
    choice.fn(*channel_, buf, count, dtype, src, tag);
  }, fold && rank_in_group_ == src ? buf : nullptr);
}

void pstate_group_s::gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int dst) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kGather), 0, send_count, dtype, -1, dst, 0};
  run(d, [&](uint32_t tag) {
    arrive_in_shm(d);
    size_t bytes = send_count * pstate::dtype_size(dtype);
    auto choice = selector_.gather(size(), bytes);
    explain(OpKind::kGather, choice.name, bytes);
    choice.fn(*channel_, send, recv, send_count, dtype, dst, tag);
  });
}

void pstate_group_s::all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kAllToAll), 0, count_per_rank, dtype, -1, -1, 0};
  run(d, [&](uint32_t tag) {
    arrive_in_shm(d);
    size_t bytes = count_per_rank * pstate::dtype_size(dtype);
    auto choice = selector_.alltoall(size(), bytes);
    explain(OpKind::kAllToAll, choice.name, bytes);
    choice.fn(*channel_, send, recv, count_per_rank, dtype, tag);
  });
}

void pstate_group_s::reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                            int root) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kReduce), 0, count, dtype, op, root, 0};
  const size_t fold_bytes = count * pstate::dtype_size(dtype);
  const bool fold = root >= 0 && root < size() && pstate::is_reducible(dtype) && static_cast<int>(op) >= 0 &&
                    op < PSTATE_REDUCE_OP_COUNT && !selector_.reduce_forced() && can_fold(count, dtype);
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](uint32_t tag) {
    size_t bytes = count * pstate::dtype_size(dtype);
    if (fold) {
      explain(OpKind::kReduce, "folded into the agreement exchange", bytes);
      check_peers_stayed();
      if (rank_in_group_ == root) reduce_folded(recv, count, dtype, op);
      return;
    }
    if (use_shm()) {
      explain(OpKind::kReduce, "shared memory", bytes);
      return shm_for_call().reduce(send, recv, count, dtype, op, root, ctx_.op_deadline());
    }
    auto choice = selector_.reduce(size(), count, bytes);
    explain(OpKind::kReduce, choice.name, bytes);
    choice.fn(*channel_, send, recv, count, dtype, op, root, tag);
  }, fold ? send : nullptr);
}

void pstate_group_s::scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kScatter), 0, recv_count, dtype, -1, root, 0};
  run(d, [&](uint32_t tag) {
    size_t bytes = recv_count * pstate::dtype_size(dtype);
    if (use_shm()) {
      explain(OpKind::kScatter, "shared memory", bytes);
      return shm_for_call().scatter(send, recv, recv_count, dtype, root, ctx_.op_deadline());
    }
    auto choice = selector_.scatter(size(), bytes);
    explain(OpKind::kScatter, choice.name, bytes);
    choice.fn(*channel_, send, recv, recv_count, dtype, root, tag);
  });
}

// The v-collectives: in a shared-memory group they run there (inline or staged), their agreement
// comparing the descriptor, its counts hash included, with what every peer called; other groups
// run the rings over the channel.
void pstate_group_s::all_gatherv(const void *send, void *recv, const size_t *counts, size_t total,
                                 pstate_dtype_t dtype) {
  const OpDescriptor d = pstate::make_v_op(OpKind::kAllGatherV, counts, ranks_.size(), total, dtype);
  naming_counts_on_mismatch(counts, [&] {
    run(d, [&](uint32_t tag) {
      const size_t bytes = total * pstate::dtype_size(dtype);
      if (use_shm()) {
        explain(OpKind::kAllGatherV, "shared memory", bytes);
        return shm_for_call().all_gatherv(send, recv, counts, dtype, d, ctx_.op_deadline());
      }
      explain(OpKind::kAllGatherV, "ring", bytes);
      pstate::coll::allgatherv_ring(*channel_, send, recv, counts, dtype, tag);
    });
  });
}

void pstate_group_s::reduce_scatterv(const void *send, void *recv, const size_t *counts, size_t total,
                                     pstate_dtype_t dtype, pstate_reduce_op_t op) {
  const OpDescriptor d = pstate::make_v_op(OpKind::kReduceScatterV, counts, ranks_.size(), total, dtype, op);
  naming_counts_on_mismatch(counts, [&] {
    run(d, [&](uint32_t tag) {
      const size_t bytes = total * pstate::dtype_size(dtype);
      if (use_shm()) {
        explain(OpKind::kReduceScatterV, "shared memory", bytes);
        return shm_for_call().reduce_scatterv(send, recv, counts, dtype, op, d, ctx_.op_deadline());
      }
      explain(OpKind::kReduceScatterV, "ring", bytes);
      pstate::coll::reduce_scatterv_ring(*channel_, send, recv, counts, dtype, op, tag);
    });
  });
}

void pstate_group_s::barrier(bool allow_shm, OpKind kind) {
  OpDescriptor d = pstate::make_op(kind, 0);
  run(d, [&](uint32_t tag) {
    if (allow_shm && use_shm()) {
      explain(OpKind::kBarrier, "shared memory", 0);
      return shm_for_call().barrier(ctx_.op_deadline(), kind);
    }
    if (pstate::TraceRecorder *tr = ctx_.trace(); tr != nullptr && use_shm())
      tr->set_path(tr->recorded(), pstate::TracePath::kUcx);  // run() recorded this call last
    if (exchanges() && !selector_.barrier_forced()) {  // every rank's record arrived: the exchange was a barrier
      explain(OpKind::kBarrier, "the agreement exchange", 0);
      check_peers_stayed();
      return;
    }
    auto choice = selector_.barrier(size());
    explain(OpKind::kBarrier, choice.name, 0);
    choice.fn(*channel_, tag);
  });
}

Bytes pstate_group_s::broadcast_object(const void *data, size_t size, int src, OpKind kind) {
  OpDescriptor d{static_cast<uint32_t>(kind), 0, 0, -1, -1, src, 0};
  Bytes out;
  run(d, [&](uint32_t tag) {
    arrive_in_shm(d);
    if (use_shm() && src == 0) return broadcast_object_mq(data, size, &out, tag);
    pstate::coll::broadcast_object(*channel_, data, size, src, &out, tag);
  });
  return out;
}

// broadcast_object from group rank 0 inside one host: SGLang's message-queue broadcaster. A
// payload larger than a ring chunk is announced through the ring and then sent over UCX.
void pstate_group_s::broadcast_object_mq(const void *data, size_t size, Bytes *out, uint32_t tag) {
  auto &mq = message_queue();
  if (rank_in_group_ == 0) {
    explain(OpKind::kBroadcastObject, "message queue", size);
    if (!mq.enqueue(data, size, ctx_.op_deadline())) pstate::coll::broadcast_object(*channel_, data, size, 0, out, tag);
    else if (out != nullptr) out->assign(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + size);
    return;
  }
  auto got = mq.dequeue(out, ctx_.op_deadline());
  if (got.overflow) pstate::coll::broadcast_object(*channel_, nullptr, 0, 0, out, tag);
}

Bytes pstate_group_s::all_gather_object(const void *data, size_t size, std::vector<size_t> *sizes, OpKind kind) {
  OpDescriptor d{static_cast<uint32_t>(kind), 0, 0, -1, -1, -1, 0};
  Bytes out;
  run(d, [&](uint32_t tag) {
    arrive_in_shm(d);
    pstate::coll::all_gather_object(*channel_, data, size, &out, sizes, tag);
  });
  return out;
}

void pstate_group_s::explain(OpKind op, const char *algorithm, size_t bytes) {
  // Two bits per operation kind: the first and (when it differs) a second algorithm seen.
  const auto &log = ctx_.log();
  if (!log.enabled(pstate::LogLevel::kInfo)) return;
  uint64_t bit = uint64_t{1} << (2 * (static_cast<unsigned>(op) - 1));
  if (logged_choices_ & bit) {
    if (logged_choices_ & (bit << 1)) return;
    bit <<= 1;
  }
  logged_choices_ |= bit;
  log.info(name_, " ", pstate::op_kind_name(op), ": ", bytes, " B on ", size(), " ranks -> ", algorithm);
}

uint32_t pstate_group_s::p2p_tag(int peer, bool sending, pstate::P2PStream stream, uint32_t what) {
  const size_t at = static_cast<size_t>(stream) * ranks_.size() + static_cast<size_t>(peer);
  auto &counter = sending ? p2p_sent_[at] : p2p_received_[at];
  return pstate::ucx::p2p_algo_tag(stream, what, counter++);
}

// Point-to-point calls do not take a sequence number (only the two ranks take part), but share
// the rest of run(): liveness, deadline, the operation's name in errors, poisoning on a fatal error.
// The flight recorder numbers them per peer and direction (its seq of a p2p entry).
template <typename Body>
void pstate_group_s::run_p2p(pstate::TraceOp top, int peer, uint64_t count, int dtype, Body &&body) {
  const char *op = pstate::trace_op_name(top);
  const bool sending = top == pstate::TraceOp::kSend || top == pstate::TraceOp::kSendObject;
  // send/recv of a shared-memory group go through its rings; objects stay on UCX
  const bool plain = top == pstate::TraceOp::kSend || top == pstate::TraceOp::kRecv;
  const pstate::TracePath path = plain && use_shm() ? pstate::TracePath::kShm : pstate::TracePath::kUcx;
  pstate::TraceRecorder *tr = ctx_.trace();
  uint64_t tid = 0;
  try {
    check_alive(op);
  } catch (const pstate::Error &e) {
    if (tr) tid = tr->begin(pstate::TraceClass::kP2P, top, trace_group_, UINT64_MAX, count, dtype, -1, -1, peer,
                            path);
    ctx_.trace_call_failed(tid, e);
    throw;
  }
  if (tr)
    tid = tr->begin(pstate::TraceClass::kP2P, top, trace_group_,
                    pstate::TraceRecorder::next_p2p(trace_group_, peer, sending, !plain),
                    count, dtype, -1, -1, peer, path);
  channel_->set_deadline(ctx_.op_deadline());
  channel_->set_op_name(op);
  try {
    body();
  } catch (const pstate::Error &e) {
    if (pstate::is_fatal(e.status()) || ctx_.abort_requested()) ctx_.fail(e);
    ctx_.trace_call_failed(tid, e);
    throw;
  }
  if (tid != 0) tr->completed(tid);
}

// A blocking operation on the rings: on failure it is cancelled, so the buffer, the caller's again,
// is never touched by a later progress of the rings.
void pstate_group_s::wait_or_cancel(uint64_t id, const pstate::Deadline &deadline, const char *what) {
  try {
    p2p().wait(id, deadline, what);
  } catch (...) {
    p2p().cancel(id);
    throw;
  }
}

void pstate_group_s::send(const void *buf, size_t count, pstate_dtype_t dtype, int dst, pstate::TensorKind kind) {
  run_p2p(pstate::TraceOp::kSend, dst, count, dtype, [&] {
    const size_t bytes = count * pstate::dtype_size(dtype);
    const uint32_t what = pstate::p2p_what(kind, dtype);
    if (!use_shm()) return channel_->send(dst, buf, bytes, p2p_tag(dst, true, pstate::P2PStream::kTensors, what));
    const pstate::Deadline &d = ctx_.op_deadline();
    wait_or_cancel(p2p().post_send(dst, buf, bytes, d, what), d, "send");
  });
}

void pstate_group_s::recv(void *buf, size_t count, pstate_dtype_t dtype, int src, pstate::TensorKind kind) {
  run_p2p(pstate::TraceOp::kRecv, src, count, dtype, [&] {
    const size_t bytes = count * pstate::dtype_size(dtype);
    const uint32_t what = pstate::p2p_what(kind, dtype);
    if (!use_shm()) return channel_->recv(src, buf, bytes, p2p_tag(src, false, pstate::P2PStream::kTensors, what));
    const pstate::Deadline &d = ctx_.op_deadline();
    wait_or_cancel(p2p().post_recv(src, buf, bytes, d, what), d, "recv");
  });
}

void pstate_group_s::send_object(const void *data, size_t size, int dst, pstate::ObjectKind kind) {
  run_p2p(pstate::TraceOp::kSendObject, dst, size, -1, [&] {
    pstate::coll::send_object(*channel_, data, size, dst,
                              p2p_tag(dst, true, pstate::P2PStream::kObjects, pstate::p2p_what(kind)));
  });
}

Bytes pstate_group_s::recv_object(int src, pstate::ObjectKind kind) {
  Bytes out;
  run_p2p(pstate::TraceOp::kRecvObject, src, UINT64_MAX, -1, [&] {
    pstate::coll::recv_object(*channel_, src, &out,
                              p2p_tag(src, false, pstate::P2PStream::kObjects, pstate::p2p_what(kind)));
  });
  return out;
}

uint32_t pstate_group_s::drop_undelivered(pstate::P2PStream stream, int peer, uint32_t sent) {
  const size_t at = static_cast<size_t>(stream) * ranks_.size() + static_cast<size_t>(peer);
  const uint32_t missing = sent - p2p_received_[at];
  if (missing == 0 || missing > (1u << 31)) return 0;  // none, or this rank took more (a bug elsewhere)
  channel_->set_deadline(ctx_.op_deadline());
  channel_->set_op_name("pstate_destroy_model_parallel (dropping messages no receive took)");
  std::vector<std::vector<uint8_t>> scratch(missing);
  std::vector<pstate::Channel::Request> posted;
  for (uint32_t k = 0; k < missing; ++k)
    posted.push_back(channel_->irecv_any_what(
        peer, &scratch[k], pstate::ucx::p2p_algo_tag(stream, 0, p2p_received_[at]++)));
  channel_->wait_all(posted.data(), posted.size());
  return missing;
}

void pstate_group_s::broadcast_from_rank0(void *bytes, size_t n) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kDeviceCommInit), 0, n, -1, -1, 0, 0};
  run(d, [&](uint32_t tag) {
    arrive_in_shm(d);
    pstate::coll::broadcast_binomial(*channel_, bytes, n, PSTATE_UINT8, 0, tag);
  });
}

void pstate_group_s::refuse(OpKind kind, int root, uint64_t size, const pstate::Error &why) {
  try {
    check_alive(pstate::op_kind_name(kind));
  } catch (const pstate::Error &) {  // no rank can be inside a call of this group: nobody to tell
    throw why;
  }
  OpDescriptor d{static_cast<uint32_t>(OpKind::kRefused), 0, size, -1, -1, root, 0};
  // Where the exchange ran (UCX, PSTATE_CHECK=1) every peer has failed there already, before its
  // shared-memory part: arriving there too would leave this rank waiting for them.
  const bool exchanged = exchanges();
  run(d, [&](uint32_t) {
    if (!exchanged) arrive_in_shm(d);
  });
  throw why;
}

bool pstate_group_s::refusals_reach_peers() const {
  return size() == 1 || !on_device() || ctx_.check_enabled();
}

void pstate_group_s::verify_only(const OpDescriptor &desc) {
  auto nothing_to_move = [](uint32_t) {};
  run(desc, nothing_to_move, nullptr, /*traced=*/false);
}
