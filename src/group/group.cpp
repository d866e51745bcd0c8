// group.cpp — GroupCoordinator operations: argument-checked calls become numbered, verified,
// deadline-bounded calls of this group's host communicator (transport/host_comm.hpp).
#include "group/group.hpp"

#include "group/context.hpp"
#include "reduce/reduce.hpp"
#include "transport/shm/shm_comm.hpp"
#include "transport/shm/shm_names.hpp"
#include "transport/ucx/ucx_comm.hpp"

#include <cstdlib>

#include <algorithm>
#include <cstring>
#include <optional>

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
    : ctx_(ctx), kind_(kind), ranks_(std::move(ranks)), group_id_(group_id),
      explain_(ctx.log(), name_, static_cast<int>(ranks_.size())) {
  name_ = pstate::cat(pstate_group_kind_name(kind), ":", index);
  auto it = std::find(ranks_.begin(), ranks_.end(), ctx.launch_rank());
  if (it == ranks_.end())
    pstate::throw_error(PSTATE_ERR_INTERNAL, "group ", name_, " does not contain launch rank ", ctx.launch_rank());
  rank_in_group_ = static_cast<int>(it - ranks_.begin());
  for (int r : ranks_) global_.push_back(ctx.global_rank_of(r));
  position_.group_id = group_id_;
  position_.members = ranks_;
  device_ = ctx.device_context() != nullptr;  // made before any group, kept until the last is gone
  comm_ = make_host_comm();
  network_ = &comm_->network();
  path_ = comm_->path();
  object_path_ = comm_->object_path();
  if (pstate::TraceRecorder *tr = ctx.trace()) trace_group_ = tr->add_group(name_, ranks_, rank_in_group_);
  metrics_ = ctx.observer().group(name_);
  observed_cells_ = metrics_->cells();
  hooks_ = &ctx.hooks();
  hooked_ = hooks_->active();
  timeout_ms_.store(ctx.timeout_ms(), std::memory_order_relaxed);
}

pstate::Deadline pstate_group_s::op_deadline() const {
  return ctx_.op_deadline(timeout_ms());
}

void pstate_group_s::set_timeout_ms(int64_t timeout_ms) {
  own_timeout_ = timeout_ms > 0;
  timeout_ms_.store(own_timeout_ ? timeout_ms : ctx_.timeout_ms(), std::memory_order_relaxed);
  if (device_comm_) device_comm_->set_timeout_ms(this->timeout_ms());
  ctx_.log().info("group ", name_, ": every call's timeout is now ", this->timeout_ms(), " ms on this rank (",
                  own_timeout_ ? "pstate_group_set_timeout" : "the context's", ")");
}

pstate::Error pstate_group_s::timeout_named(const pstate::Error &e) const {
  return pstate::Error(e.status(),
                       pstate::cat(e.what(), " [group ", name_, "'s own timeout on this rank: ", timeout_ms(),
                                   " ms (pstate_group_set_timeout); the context's is ", ctx_.timeout_ms(), " ms]"));
}

// The one place that chooses how this group's bytes move: shared memory when every rank is on
// this host (PSTATE_SHM=0 turns it off), holding a UCX communicator of the same ranks for what it
// does not carry; UCX otherwise.
std::unique_ptr<pstate::HostComm> pstate_group_s::make_host_comm() {
  pstate::HostCommSetup setup;
  setup.name = name_;
  setup.ranks = ranks_;
  setup.rank = rank_in_group_;
  setup.group_id = group_id_;
  setup.log = &ctx_.log();
  setup.explain = &explain_;
  auto ucx = pstate::make_ucx_comm(ctx_.worker(), setup, &position_);
  const char *shm_env = std::getenv("PSTATE_SHM");
  bool shm_wanted = shm_env == nullptr || std::string(shm_env) != "0";
  bool one_host = true;
  for (int r : ranks_) one_host = one_host && ctx_.host_id(r) == ctx_.host_id(ctx_.launch_rank());
  const bool shm_allowed = shm_wanted && one_host && ranks_.size() > 1 && size() <= pstate::kMaxCodedRoot + 1;
  if (ranks_.size() > 1)
    ctx_.log().info("group ", name_, ": ",
                    shm_allowed ? "shared memory for all_reduce/all_gather/reduce_scatter/broadcast/reduce/scatter/barrier/"
                                  "all_gatherv/reduce_scatterv, UCX for the rest"
                    : !one_host ? "spans hosts: UCX for every operation"
                                : "UCX for every operation (PSTATE_SHM=0)");
  if (!shm_allowed) return ucx;
  pstate::shm::ShmCommHooks hooks;
  // Groups of one kind, and the groups of one pstate_new_group call, share a group id (their
  // ranks are disjoint), so the first rank of the group makes the names unique among them.
  hooks.names = pstate::cat("/", pstate::shm::job_name_prefix(ctx_.job_id()), group_id_, "-", ranks_.front(), "-");
  hooks.global = global_;
  hooks.pid_of = [this](int r) { return ctx_.peer_pid(ranks_[static_cast<size_t>(r)]); };
  hooks.notices = [this] { check_notices_in_shm(); };
  hooks.stop = [this] { check_stop_in_shm(); };
  return pstate::shm::make_shm_comm(setup, std::move(hooks), std::move(ucx));
}

void pstate_group_s::check_notices_in_shm() {
  ctx_.check_notices(name_, "waiting in shared memory", &position_);
}

void pstate_group_s::check_stop_in_shm() {
  if (ctx_.abort_requested())
    ctx_.throw_abort_requested(pstate::cat(name_, ": while it waited for its peers in shared memory"));
  if (ctx_.interrupted())
    pstate::throw_error(PSTATE_ERR_INTERRUPTED, name_, ": interrupted while rank ", ctx_.rank(),
                        " waited for its peers in shared memory (the interrupt check asked to stop, e.g. Ctrl-C); "
                        "the peers were left inside the operation, so the context is failed: call pstate_abort");
}

pstate_group_s::~pstate_group_s() {
  abort_requests();  // a group freed without retire() (a failed init) leaves no request pointing at it
  magic_ = 0;  // comm_ goes with the members: its segments and their names (shm_comm.hpp)
}

void pstate_group_s::retire(pstate::DroppedBy by) noexcept {
  abort_requests();  // first: the communicator and the worker are still there to cancel them
  if (!retired_) dropped_by_ = by;
  retired_ = true;
  if (memory_) memory_->release(device_comm_.get());  // windows before their communicator
  memory_.reset();
  device_comm_.reset();  // graceful (ncclCommFinalize, bounded), or nothing after abort_device()
  network_ = nullptr;
  comm_.reset();  // removes its segments' names: a later group of the same name starts afresh
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
// HostComm::arrive); a group on UCX exchanges them before the operation (verify_same_op), and so
// does PSTATE_CHECK=1 on every group. On a UCX group a small all_reduce, all_gather, reduce or
// broadcast rides in that exchange (its data in each rank's record, coll/agreement_exchange.hpp)
// and a barrier is the exchange alone: no round trip of the agreement's own (which calls may
// ride is the communicator's fold mask). A mismatch found by
// the exchange moved no data (nothing was written to a user's buffer) and every rank saw it: the
// context stays usable. One found inside the shared-memory protocol leaves the segment mid-call:
// the context fails like after a timeout.
bool pstate_group_s::exchanges() const {
#ifndef PSTATE_NO_AGREEMENT
  return size() > 1 && (!comm_->agrees_in_protocol() || ctx_.check_enabled());
#else
  return size() > 1 && ctx_.check_enabled();
#endif
}

bool pstate_group_s::can_fold(OpKind family, size_t count, pstate_dtype_t dtype) const {
  // count first: count * size must not wrap (the API refuses such counts, but this decides alone)
  if (comm_ == nullptr || !comm_->folds(family) || !exchanges() || count == 0 || count > pstate::agree::kFoldMax)
    return false;  // (no communicator: retired, refused by run())
  const size_t esize = pstate::dtype_size(dtype);
  if (esize == 0) return false;
  // the cap of the table the last exchange sized (no division per call), else computed
  return count * esize <= (agree_.ranks == size() ? agree_.cap : pstate::agree::fold_cap(size()));
}

inline void pstate_group_s::check_alive_now(const char *call) const {
  if (!retired_ && ctx_.usable_now()) [[likely]]
    return;
  check_alive(call);
}

template <typename Body>
void pstate_group_s::run(const OpDescriptor &desc_in, Body &&body, const void *fold_payload, bool traced) {
  // The hooked call out of line (cold): the call without hooks keeps run_core inlined here, as
  // the 8 B all_reduce's instruction count wants (docs/bench/metrics.md).
  if (traced && hooked_ && hooked_kind(desc_in.op)) [[unlikely]] {
    [this, &desc_in, &body, fold_payload]() __attribute__((noinline, cold)) {  // no local's address escapes
      if (!hooks_->wanted()) return run_core(desc_in, body, fold_payload, true);  // inside a hooked call
      HookedCall h = hook_begin(pstate::op_kind_name(static_cast<OpKind>(desc_in.op)), position_.begun,
                                desc_in.count, desc_in.dtype, desc_in.root, -1, path_, false);
      hooked(h, [&] {
        if (h.refusal.hook != 0) refuse(static_cast<OpKind>(desc_in.op), desc_in.root, desc_in.count, hook_refusal(h));
        run_core(desc_in, body, fold_payload, true);
      });
    }();
    return;
  }
  run_core(desc_in, body, fold_payload, traced);
}

template <typename Body>
__attribute__((always_inline)) inline void pstate_group_s::run_core(const OpDescriptor &desc_in, Body &&body,
                                                                    const void *fold_payload, bool traced) {
  pstate::TraceRecorder *tr = traced ? ctx_.trace() : nullptr;
  const char *op_name = pstate::op_kind_name(static_cast<OpKind>(desc_in.op));
  try {
    check_alive_now(op_name);
  } catch (const pstate::Error &e) {  // refused before it was numbered: recorded without a seq
    if (traced) {
      observe(desc_in, path_, pstate::observer_ticks(), e.status());
      ctx_.trace_call_failed(tr ? trace_begin(*tr, desc_in, false) : 0, e, name_, op_name);
    } else {
      ctx_.log_call_failed(e, name_, op_name);
    }
    throw;
  }
  const uint64_t t0 = pstate::observer_ticks();
  const uint64_t tid = tr ? trace_begin(*tr, desc_in, true) : 0;
  OpDescriptor desc = desc_in;
  desc.seq = position_.begun++;
  const pstate::HostCall call{&desc_in, desc.seq, pstate::tag_base(desc.seq), op_name, op_deadline(), tr, tid, path_};
  bool agreeing = true;
  try {
    if (exchanges()) {
      verify_same_op(call, desc, fold_payload);
      if (tid != 0) tr->started(tid);  // agreed; in shared memory the agreement is part of the call
    }
    agreeing = false;
    body(call);
  } catch (const pstate::Error &caught) {
    // (Named here, in the handler, rather than by naming_timeout around the body: the call path
    // stays as it was; the handler is out of line.)
    std::optional<pstate::Error> named;
    if (caught.status() == PSTATE_ERR_TIMEOUT && own_timeout_) named.emplace(timeout_named(caught));
    const pstate::Error &e = named ? *named : caught;
    // The exchange moved no data, and every rank saw what it saw: a mismatch or a refusal there
    // leaves the context usable.
    const bool agreed_error = e.status() == PSTATE_ERR_MISMATCH || e.status() == PSTATE_ERR_INVALID_ARGUMENT;
    // An abort from another thread fails the context too, and tells the peers (ctx_.fail's notices).
    // A body's own agreement step (AgreedError: all_to_all_v's counts) counts as the exchange.
    const bool agreed_step = agreeing || dynamic_cast<const pstate::AgreedError *>(&caught) != nullptr;
    if (ctx_.abort_requested() || (agreed_step ? !agreed_error : pstate::is_fatal(e.status())))
      ctx_.fail(e);  // its notices say this call had not returned here
    position_.returned.store(desc.seq + 1, std::memory_order_relaxed);
    if (traced) {  // else the caller's entry records it (and dumps)
      observe(desc_in, call.path, t0, e.status());
      ctx_.trace_call_failed(tid, e, name_, op_name);
    } else {
      ctx_.log_call_failed(e, name_, op_name);
    }
    if (named) throw *named;
    throw;
  }
  position_.returned.store(desc.seq + 1, std::memory_order_relaxed);
  if (tid != 0) tr->completed(tid);
  if (traced) observe(desc_in, call.path, t0, PSTATE_OK);
}

uint64_t pstate_group_s::trace_outer_begin(pstate::TraceOp op, int rank) {
  pstate::TraceRecorder *tr = ctx_.trace();
  if (tr == nullptr || retired_) return 0;
  using pstate::TraceOp;
  const auto path = on_device() ? pstate::TracePath::kNccl : path_;
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
  return tr.begin(pstate::TraceClass::kColl, pstate::trace_op_of(d.op), trace_group_,
                  numbered ? pstate::TraceRecorder::next_coll(trace_group_) : UINT64_MAX, d.count, d.dtype,
                  d.reduce_op, d.root, -1, path_);
}

// Every rank gathers every rank's record (descriptor, and a folded call's data) and compares the
// descriptors with its own; all ranks see the same table, so all of them report the mismatch
// (and none of them hangs in the real operation).
void pstate_group_s::verify_same_op(const pstate::HostCall &call, const OpDescriptor &desc, const void *fold_payload) {
  comm_->exchange(call, desc, fold_payload, call.tag | pstate::kCheckStepBase, &agree_);
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
                    can_fold(OpKind::kAllReduce, count, dtype);
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](const pstate::HostCall &call) {
    if (!fold) return comm_->all_reduce(call, send, recv, count, dtype, op);
    explain_(OpKind::kAllReduce, "folded into the agreement exchange", fold_bytes);
    check_peers_stayed(call);
    reduce_folded(recv, count, dtype, op);
  }, fold ? send : nullptr);
}

void pstate_group_s::check_peers_stayed(const pstate::HostCall &call) {
  ctx_.check_notices(name_, call.op, "its part of the call had arrived; the peer's verdict came first", &position_);
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
  const bool fold = can_fold(OpKind::kAllGather, send_count, dtype);
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](const pstate::HostCall &call) {
    if (!fold) return comm_->all_gather(call, send, recv, send_count, dtype);
    explain_(OpKind::kAllGather, "folded into the agreement exchange", fold_bytes);
    check_peers_stayed(call);
    for (int r = 0; r < size(); ++r)
      std::memcpy(static_cast<uint8_t *>(recv) + static_cast<size_t>(r) * fold_bytes, agree_.payload(r), fold_bytes);
  }, fold ? send : nullptr);
}

void pstate_group_s::reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                                    pstate_reduce_op_t op) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kReduceScatter), 0, recv_count, dtype, op, -1, 0};
  run(d, [&](const pstate::HostCall &call) { comm_->reduce_scatter(call, send, recv, recv_count, dtype, op); });
}

void pstate_group_s::broadcast(void *buf, size_t count, pstate_dtype_t dtype, int src) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kBroadcast), 0, count, dtype, -1, src, 0};
  const size_t fold_bytes = count * pstate::dtype_size(dtype);
  const bool fold = src >= 0 && src < size() && can_fold(OpKind::kBroadcast, count, dtype);  // only the root's record carries data
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](const pstate::HostCall &call) {
    if (!fold) return comm_->broadcast(call, buf, count, dtype, src);
    explain_(OpKind::kBroadcast, "folded into the agreement exchange", fold_bytes);
    check_peers_stayed(call);
    if (rank_in_group_ != src) std::memcpy(buf, agree_.payload(src), fold_bytes);
  }, fold && rank_in_group_ == src ? buf : nullptr);
}

void pstate_group_s::gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int dst) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kGather), 0, send_count, dtype, -1, dst, 0};
  run(d, [&](const pstate::HostCall &call) { comm_->gather(call, send, recv, send_count, dtype, dst); });
}

void pstate_group_s::all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kAllToAll), 0, count_per_rank, dtype, -1, -1, 0};
  run(d, [&](const pstate::HostCall &call) { comm_->all_to_all(call, send, recv, count_per_rank, dtype); });
}

void pstate_group_s::reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                            int root) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kReduce), 0, count, dtype, op, root, 0};
  const size_t fold_bytes = count * pstate::dtype_size(dtype);
  const bool fold = root >= 0 && root < size() && pstate::is_reducible(dtype) && static_cast<int>(op) >= 0 &&
                    op < PSTATE_REDUCE_OP_COUNT && can_fold(OpKind::kReduce, count, dtype);
  if (fold) d.detail = static_cast<uint32_t>(fold_bytes);
  run(d, [&](const pstate::HostCall &call) {
    if (!fold) return comm_->reduce(call, send, recv, count, dtype, op, root);
    explain_(OpKind::kReduce, "folded into the agreement exchange", fold_bytes);
    check_peers_stayed(call);
    if (rank_in_group_ == root) reduce_folded(recv, count, dtype, op);
  }, fold ? send : nullptr);
}

void pstate_group_s::scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kScatter), 0, recv_count, dtype, -1, root, 0};
  run(d, [&](const pstate::HostCall &call) { comm_->scatter(call, send, recv, recv_count, dtype, root); });
}

// The v-collectives (d: make_v_op's): the descriptor carries the counts' total and hash, so ranks
// that pass different arrays disagree wherever the agreement runs (the exchange, or the
// shared-memory protocol, which compares the whole descriptor).
void pstate_group_s::host_all_gatherv(const OpDescriptor &d, const void *send, void *recv, const size_t *counts,
                                      size_t total, pstate_dtype_t dtype) {
  run(d, [&](const pstate::HostCall &call) { comm_->all_gatherv(call, send, recv, counts, total, dtype); });
}

void pstate_group_s::host_reduce_scatterv(const OpDescriptor &d, const void *send, void *recv, const size_t *counts,
                                          size_t total, pstate_dtype_t dtype, pstate_reduce_op_t op) {
  run(d, [&](const pstate::HostCall &call) { comm_->reduce_scatterv(call, send, recv, counts, total, dtype, op); });
}

void pstate_group_s::host_all_to_all_v(const OpDescriptor &d, const void *send, const size_t *send_counts,
                                       const size_t *send_displs, void *recv, const size_t *recv_counts,
                                       const size_t *recv_displs, pstate_dtype_t dtype) {
  run(d, [&](const pstate::HostCall &call) {
    comm_->all_to_all_v(call, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  });
}

void pstate_group_s::verify_device_all_to_all_v(const OpDescriptor &d, const size_t *send_counts,
                                                const size_t *recv_counts) {
  if (!ctx_.check_enabled() || size() <= 1) return;
  run(d, [&](const pstate::HostCall &call) { network_->agree_all_to_all_v_counts(call, send_counts, recv_counts); },
      nullptr, /*traced=*/false);
}

// allow_shm false: the barrier runs on the network communicator (it proves the transport that
// crosses hosts, even inside one), whose own recorder path it takes.
void pstate_group_s::barrier(bool allow_shm, OpKind kind) {
  OpDescriptor d = pstate::make_op(kind, 0);
  run(d, [&](const pstate::HostCall &call) {
    pstate::HostComm &on = allow_shm ? *comm_ : *network_;
    if (&on != comm_.get()) call.took(on.path());
    if (exchanges() && on.folds(OpKind::kBarrier)) {  // every rank's record arrived: the exchange was a barrier
      explain_(OpKind::kBarrier, "the agreement exchange", 0);
      check_peers_stayed(call);
      return;
    }
    on.barrier(call);
  });
}

Bytes pstate_group_s::broadcast_object(const void *data, size_t size, int src, OpKind kind) {
  OpDescriptor d{static_cast<uint32_t>(kind), 0, 0, -1, -1, src, 0};
  Bytes out;
  run(d, [&](const pstate::HostCall &call) { comm_->broadcast_object(call, data, size, src, &out); });
  return out;
}

Bytes pstate_group_s::all_gather_object(const void *data, size_t size, std::vector<size_t> *sizes, OpKind kind) {
  OpDescriptor d{static_cast<uint32_t>(kind), 0, 0, -1, -1, -1, 0};
  Bytes out;
  run(d, [&](const pstate::HostCall &call) { comm_->all_gather_object(call, data, size, &out, sizes); });
  return out;
}

pstate::HostCall pstate_group_s::p2p_call(const char *op, uint64_t trace_id, pstate::TracePath path) const {
  return pstate::HostCall{nullptr, 0, 0, op, op_deadline(), ctx_.trace(), trace_id, path};
}

// Point-to-point calls do not take a sequence number (only the two ranks take part), but share
// the rest of run(): liveness, deadline, the operation's name in errors, poisoning on a fatal error.
// The flight recorder numbers them per peer and direction (its seq of a p2p entry).
template <typename Body>
void pstate_group_s::run_p2p(pstate::TraceOp top, int peer, uint64_t count, int dtype, Body &&body) {
  if (hooked_) [[unlikely]] {  // out of line, as in run()
    [this, top, peer, count, dtype, &body]() __attribute__((noinline, cold)) {
      if (!hooks_->wanted()) return run_p2p_core(top, peer, count, dtype, body);  // inside a hooked call
      const bool plain = top == pstate::TraceOp::kSend || top == pstate::TraceOp::kRecv;
      HookedCall h = hook_begin(pstate::trace_op_name(top), UINT64_MAX, count == UINT64_MAX ? 0 : count, dtype, -1,
                                peer, plain ? path_ : object_path_, false);
      hooked(h, [&] {
        if (h.refusal.hook != 0) throw hook_refusal(h);  // point-to-point: refused here only (as its argument errors)
        run_p2p_core(top, peer, count, dtype, body);
      });
    }();
    return;
  }
  run_p2p_core(top, peer, count, dtype, body);
}

template <typename Body>
__attribute__((always_inline)) inline void pstate_group_s::run_p2p_core(pstate::TraceOp top, int peer, uint64_t count,
                                                                        int dtype, Body &&body) {
  const char *op = pstate::trace_op_name(top);
  const bool sending = top == pstate::TraceOp::kSend || top == pstate::TraceOp::kSendObject;
  // send/recv take the communicator's path; objects its objects' (UCX inside a host too)
  const bool plain = top == pstate::TraceOp::kSend || top == pstate::TraceOp::kRecv;
  const pstate::TracePath path = plain ? path_ : object_path_;
  pstate::TraceRecorder *tr = ctx_.trace();
  const uint64_t t0 = pstate::observer_ticks();
  // a received object's size is known at its end: counted then (count UINT64_MAX: none yet)
  auto observed_bytes = [&] {
    return count == UINT64_MAX ? 0 : count * (dtype < 0 ? 1 : pstate::dtype_size(static_cast<pstate_dtype_t>(dtype)));
  };
  uint64_t tid = 0;
  try {
    check_alive(op);
  } catch (const pstate::Error &e) {
    metrics_->record(static_cast<uint32_t>(top), path, observed_bytes(), t0, e.status());
    if (tr) tid = tr->begin(pstate::TraceClass::kP2P, top, trace_group_, UINT64_MAX, count, dtype, -1, -1, peer,
                            path);
    ctx_.trace_call_failed(tid, e, name_, op);
    throw;
  }
  if (tr)
    tid = tr->begin(pstate::TraceClass::kP2P, top, trace_group_,
                    pstate::TraceRecorder::next_p2p(trace_group_, peer, sending, !plain),
                    count, dtype, -1, -1, peer, path);
  const pstate::HostCall call = p2p_call(op, tid, path);
  try {
    body(call);
  } catch (const pstate::Error &caught) {
    std::optional<pstate::Error> named;  // as in run_core
    if (caught.status() == PSTATE_ERR_TIMEOUT && own_timeout_) named.emplace(timeout_named(caught));
    const pstate::Error &e = named ? *named : caught;
    if (pstate::is_fatal(e.status()) || ctx_.abort_requested()) ctx_.fail(e);
    metrics_->record(static_cast<uint32_t>(top), call.path, observed_bytes(), t0, e.status());
    ctx_.trace_call_failed(tid, e, name_, op);
    if (named) throw *named;
    throw;
  }
  if (tid != 0) tr->completed(tid);
  metrics_->record(static_cast<uint32_t>(top), call.path, observed_bytes(), t0, PSTATE_OK);
}

void pstate_group_s::send(const void *buf, size_t count, pstate_dtype_t dtype, int dst, pstate::TensorKind kind) {
  run_p2p(pstate::TraceOp::kSend, dst, count, dtype, [&](const pstate::HostCall &call) {
    comm_->send(call, dst, buf, count * pstate::dtype_size(dtype), pstate::p2p_what(kind, dtype));
  });
}

void pstate_group_s::recv(void *buf, size_t count, pstate_dtype_t dtype, int src, pstate::TensorKind kind) {
  run_p2p(pstate::TraceOp::kRecv, src, count, dtype, [&](const pstate::HostCall &call) {
    comm_->recv(call, src, buf, count * pstate::dtype_size(dtype), pstate::p2p_what(kind, dtype));
  });
}

void pstate_group_s::send_object(const void *data, size_t size, int dst, pstate::ObjectKind kind) {
  run_p2p(pstate::TraceOp::kSendObject, dst, size, -1, [&](const pstate::HostCall &call) {
    comm_->send_object(call, dst, data, size, pstate::p2p_what(kind));
  });
}

Bytes pstate_group_s::recv_object(int src, pstate::ObjectKind kind) {
  Bytes out;
  run_p2p(pstate::TraceOp::kRecvObject, src, UINT64_MAX, -1, [&](const pstate::HostCall &call) {
    comm_->recv_object(call, src, &out, pstate::p2p_what(kind));
  });
  // its bytes, known now (run_p2p counted the call with 0)
  pstate::observer_add(metrics_->cell(static_cast<uint32_t>(pstate::TraceOp::kRecvObject),
                                      static_cast<uint32_t>(object_path_)).elements[0], out.size());
  return out;
}

uint32_t pstate_group_s::drop_undelivered(pstate::P2PStream stream, int peer, uint32_t sent) {
  return network_->drop_undelivered(p2p_call("pstate_destroy_model_parallel (dropping messages no receive took)"),
                                    stream, peer, sent);
}

void pstate_group_s::broadcast_from_rank0(void *bytes, size_t n) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kDeviceCommInit), 0, n, -1, -1, 0, 0};
  run(d, [&](const pstate::HostCall &call) { comm_->broadcast_bytes(call, bytes, n); });
}

pstate_group_s::HookedCall pstate_group_s::hook_begin(const char *op, uint64_t seq, uint64_t count, int dtype,
                                                      int root, int peer, pstate::TracePath path, bool on_device) {
  const uint64_t bytes = dtype < 0 ? count : count * pstate::dtype_size(static_cast<pstate_dtype_t>(dtype));
  HookedCall h{pstate::call_info(PSTATE_HOOK_BEFORE, hooks_->next_call_id(), name_.c_str(), op, seq, count, dtype, root,
                                 peer, on_device, bytes, pstate::observed_path_name(static_cast<uint32_t>(path))),
               0,
               {}};
  h.info.send = hook_send_;
  h.info.send_bytes = hook_send_ != nullptr ? hook_send_bytes_ : 0;
  hook_send_ = nullptr;
  hook_send_bytes_ = 0;
  h.t0 = pstate::observer_ticks();
  h.refusal = hooks_->before(h.info);
  hooks_->enter();
  return h;
}

void pstate_group_s::hook_end(HookedCall &h, pstate_status_t status, const char *message) noexcept {
  hooks_->leave();
  hook_after(h.info, h.t0, status, message);
}

void pstate_group_s::hook_after(pstate_call_info_t &info, uint64_t t0, pstate_status_t status,
                                const char *message) noexcept {
  info.phase = PSTATE_HOOK_AFTER;
  info.status = status;
  info.message = message;
  info.duration_ns = static_cast<int64_t>(pstate::observer_ns(pstate::observer_ticks() - t0));
  hooks_->after(info);
}

pstate::Error pstate_group_s::hook_refusal(const HookedCall &h) const {
  const std::string text =
      h.refusal.fn == pstate::CallHooks::nan_check
          ? pstate::CallHooks::nan_check_text()
          : pstate::cat(h.info.operation, " refused by hook ", h.refusal.hook, " (pstate_add_hook: its BEFORE returned ",
                        pstate_status_string(h.refusal.status), ")");
  return pstate::Error(PSTATE_ERR_INVALID_ARGUMENT,
                       pstate::cat("group ", name_, " (group rank ", rank_in_group_, "): ", text));
}

void pstate_group_s::refuse(OpKind kind, int root, uint64_t size, const pstate::Error &why) {
  hook_send_ = nullptr;  // a refused call's noted data is no later call's
  try {
    check_alive(pstate::op_kind_name(kind));
  } catch (const pstate::Error &) {  // no rank can be inside a call of this group: nobody to tell
    throw why;
  }
  OpDescriptor d{static_cast<uint32_t>(OpKind::kRefused), 0, size, -1, -1, root, 0};
  // Where the exchange ran (UCX, PSTATE_CHECK=1) every peer has failed there already, before its
  // shared-memory part: arriving there too would leave this rank waiting for them.
  const bool exchanged = exchanges();
  run(d, [&](const pstate::HostCall &call) {
    if (!exchanged) comm_->arrive(call);
  });
  throw why;
}

bool pstate_group_s::refusals_reach_peers() const {
  return size() == 1 || !on_device() || ctx_.check_enabled();
}

void pstate_group_s::verify_only(const OpDescriptor &desc) {
  run(desc, [](const pstate::HostCall &) {}, nullptr, /*traced=*/false);
}
