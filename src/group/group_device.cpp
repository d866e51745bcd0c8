// group_device.cpp — the device side of a GroupCoordinator: its NCCL communicator in a CUDA
// context (SGLang's GroupCoordinator.device_communicator / PyNccl).
//
// The DeviceComm object is made on the group's first device operation and owns an NCCL
// communicator that it creates itself on first use (a group that never moves a device tensor
// costs nothing; SGLang's eager MoE communicators cost ~700 MB each). Creation is collective over
// the group: group rank 0 makes the NCCL unique id and broadcast_from_rank0 carries it over the
// group's host communicator as one numbered operation, so its tag cannot meet another collective's. A
// group of one never creates an NCCL communicator (its operations are device copies). A group made
// while the world's communicator exists gets its own at creation by split_device_into (ncclCommSplit
// from the world's, collective over the world; Context::split_from_world) instead. After
// pstate_shrink, the new world's is shrunk from the failed world's (ncclCommShrink, collective
// over the survivors; Context::shrink_device_world) where every survivor still holds that one.
//
// Failures follow the CPU rules: a fatal device error (TIMEOUT, PEER_LOST, TRANSPORT, an aborted
// communicator) poisons the context, and every later operation returns ABORTED; pstate_abort
// aborts every communicator (ncclCommAbort never waits for peers); retire() (destroy_model_parallel,
// finalize) destroys it gracefully.
#include "group/context.hpp"
#include "group/group.hpp"

namespace pstate {
namespace {

bool is_fatal_device_status(pstate_status_t s) {
  return s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TRANSPORT ||
         s == PSTATE_ERR_INTERNAL || s == PSTATE_ERR_ABORTED;
}

}  // namespace
}  // namespace pstate

pstate::DeviceCommOptions pstate_group_s::device_comm_options() {
  pstate::DeviceCommOptions o;
  o.group_name = name_;
  o.rank = rank_in_group_;
  o.size = size();
  o.timeout_ms = timeout_ms();  // the group's (set_timeout_ms passes a later change on)
  if (size() > 1) o.broadcast_from_rank0 = [this](void *bytes, size_t n) { broadcast_from_rank0(bytes, n); };
  return o;
}

pstate::DeviceComm &pstate_group_s::device_comm() {
  if (device_comm_) return *device_comm_;
  pstate::DeviceContext *device = ctx_.device_context();
  if (device == nullptr) pstate::throw_error(PSTATE_ERR_INTERNAL, name_, ": a device operation in a CPU context");
  device_comm_ = pstate::make_nccl_device_comm(*device, device_comm_options(), ctx_.log());
  if (size() == 1)
    ctx_.log().info(name_, ": no NCCL communicator (one rank: device operations are local copies on the stream)");
  return *device_comm_;
}

// ---- splitting ----

bool pstate_group_s::device_splittable() const {
  return !retired_ && device_comm_ && device_comm_->can_split();
}

void pstate_group_s::split_device_into(pstate_group_s *child) {
  check_alive("communicator split");
  const bool joins = child != nullptr && child->size() > 1 && !child->device_comm_;
  // The colour names the child by its first global rank (distinct among the disjoint groups of
  // one split); the key orders it by rank in group.
  const int color = joins ? child->ranks_.front() : -1;
  const int key = joins ? child->rank_in_group_ : 0;
  try {
    auto made = device_comm_->split(color, key, joins ? child->device_comm_options() : pstate::DeviceCommOptions{});
    if (joins) child->device_comm_ = std::move(made);
  } catch (const pstate::Error &e) {
    device_op_failed(e, "communicator split");
    throw;
  }
}

// ---- the world's communicator across pstate_shrink ----

std::unique_ptr<pstate::DeviceComm> pstate_group_s::take_shrinkable_device_comm() {
  if (!device_comm_ || !device_comm_->can_shrink()) return nullptr;
  return std::move(device_comm_);
}

void pstate_group_s::shrink_device_from(pstate::DeviceComm &parent, const std::vector<int> &exclude) {
  device_comm_ = parent.shrink(exclude, device_comm_options());
}

pstate::DeviceComm &pstate_group_s::begin_device_op(const pstate::OpDescriptor &desc, uint64_t *tid) {
  auto kind = static_cast<pstate::OpKind>(desc.op);
  bool point_to_point = kind == pstate::OpKind::kSend || kind == pstate::OpKind::kRecv;
  pstate::TraceRecorder *tr = ctx_.trace();
  auto record = [&](bool numbered) -> uint64_t {
    if (tr == nullptr) return 0;
    const auto path = size() == 1 ? pstate::TracePath::kLocal : pstate::TracePath::kNccl;
    const auto op = pstate::trace_op_of(desc.op);
    if (point_to_point)
      return tr->begin(pstate::TraceClass::kP2P, op, trace_group_,
                       numbered ? pstate::TraceRecorder::next_p2p(trace_group_, desc.root, kind == pstate::OpKind::kSend)
                                : UINT64_MAX,
                       desc.count, desc.dtype, -1, -1, desc.root, path);
    return tr->begin(pstate::TraceClass::kColl, op, trace_group_,
                     numbered ? pstate::TraceRecorder::next_coll(trace_group_) : UINT64_MAX, desc.count, desc.dtype,
                     desc.reduce_op, desc.root, -1, path);
  };
  try {
    check_alive(pstate::op_kind_name(kind));
  } catch (const pstate::Error &e) {
    ctx_.trace_call_failed(record(false), e, name_, pstate::op_kind_name(kind));
    throw;
  }
  *tid = record(true);
  if (*tid != 0) ctx_.device_context()->trace_op(*tid);
  try {
    // Every rank reaches its first device operation of this group at the same point of the
    // group's order, so the communicator (and the sequence number its id consumes) stay in step.
    pstate::DeviceComm &comm = device_comm();
    // Group memory's windows follow the communicator (group_memory.hpp): a collective is a point
    // every rank reaches (a point-to-point call only in a group of two).
    if (memory_ && !ctx_.capturing() && (!point_to_point || size() <= 2))
      memory_->sync(comm, true, [this](int flag) { return agree_min(flag); });
    if (ctx_.check_enabled() && size() > 1) {
      if (point_to_point) verify_device_p2p(desc);
      else verify_only(desc);
    }
    return comm;
  } catch (const pstate::Error &e) {
    device_op_failed(e, pstate::op_kind_name(kind), *tid);
    throw;
  }
}

// PSTATE_CHECK=1, device point-to-point: the sender's count goes ahead on the host communicator's
// network (kind kDeviceCheck, the dtype in its "what"), the receiver compares it with its own:
// another dtype is the transport's MISMATCH, another count this one, and NCCL is never given the
// transfer.
void pstate_group_s::verify_device_p2p(const pstate::OpDescriptor &desc) {
  const bool sending = static_cast<pstate::OpKind>(desc.op) == pstate::OpKind::kSend;
  const int peer = desc.root;
  const uint32_t what =
      pstate::p2p_what(pstate::TensorKind::kDeviceCheck, static_cast<pstate_dtype_t>(desc.dtype));
  const pstate::HostCall call = p2p_call(sending ? "send (PSTATE_CHECK)" : "recv (PSTATE_CHECK)");
  uint64_t count = desc.count;
  try {
    if (sending) return network_->send(call, peer, &count, sizeof count, what);
    network_->recv(call, peer, &count, sizeof count, what);
  } catch (const pstate::Error &e) {
    ctx_.fail(e);  // the stream is out of step, or the peer is gone
    throw;
  }
  if (count != desc.count) {
    const std::string why =
        pstate::cat(name_, " recv (PSTATE_CHECK): rank ", global_[static_cast<size_t>(peer)], " (group rank ", peer,
                    ") sends ", count, " elements, rank ", ctx_.rank(), " (group rank ", rank_in_group_, ") receives ",
                    desc.count, ": a send and its receive must have the same count and dtype; nothing was given to "
                    "NCCL, the stream is out of step, so the context is failed");
    ctx_.fail(why, PSTATE_ERR_MISMATCH);
    throw pstate::Error(PSTATE_ERR_MISMATCH, why);
  }
}

void pstate_group_s::device_op_failed(const pstate::Error &e, const char *call, uint64_t tid) {
  if (tid != 0) ctx_.device_context()->trace_op(0);
  if (pstate::is_fatal_device_status(e.status())) ctx_.fail(e);
  ctx_.trace_call_failed(tid, e, name_, call);
}

void pstate_group_s::device_op_enqueued(uint64_t tid) {
  if (tid == 0) return;
  ctx_.device_context()->trace_op(0);
  ctx_.trace()->enqueued(tid);
}

void pstate_group_s::ensure_device_ready(const char *call) {
  check_alive(call);
  try {
    device_comm().ensure_ready();
  } catch (const pstate::Error &e) {
    device_op_failed(e, call);
    throw;
  }
}

void pstate_group_s::require_p2p_ready(const char *call) {
  if (on_device()) require_device_p2p_ready(call);
}

void pstate_group_s::require_device_p2p_ready(const char *call) {
  check_alive(call);
  if (size() <= 2 || (device_comm_ && device_comm_->ready())) return;
  pstate::throw_error(PSTATE_ERR_INVALID_STATE, call, ": group ", name_, " (", size(),
                      " ranks) has no NCCL communicator yet, and point-to-point between two of its ranks cannot "
                      "create it (every rank of the group must take part): run a collective on the group first "
                      "on every rank (a 1-element all_reduce will do), or pstate_graph_capture_begin");
}

void pstate_group_s::abort_device() noexcept {
  if (memory_) memory_->abandon();  // no NCCL call, no free that may wait for the device
  if (device_comm_) device_comm_->abort();
}
