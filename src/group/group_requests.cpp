// group_requests.cpp — non-blocking and batched point-to-point of a group (pstate_isend,
// pstate_irecv, pstate_wait, pstate_test, pstate_p2p_batch).
//
// A request is an operation of the group's host communicator (HostComm::post, test, wait,
// cancel). In a shared-memory group it is an operation of the pair rings (ShmP2p, shm_p2p.hpp: one
// FIFO per direction of each pair is the whole matching); its wait/test drive the rings, and so
// does every other wait of the group, so a large send moves while its rank waits in a collective.
// On UCX it is a message posted on the group's channel under a worker owner of its own
// (UcxChannel::new_request_owner). The channel's owner is cancelled whenever a collective or a
// blocking call fails; a request must survive that (it belongs to the caller until completed),
// so it never shares that owner, and its own failure cancels only itself. Its tag is the next
// per-peer point-to-point tag, the counter pstate_send/pstate_recv take, so the k-th send from a
// to b matches b's k-th receive from a whichever of the calls made them; point-to-point tags
// live in their own space (bit 31), apart from every collective's, so collectives run while
// requests are pending. Any wait on the worker progresses every posted message, so a pending
// request moves while the caller runs other operations.
//
// The group keeps its pending states (request.hpp): retire() at finalize or abort cancels them
// in the worker and finishes them with ABORTED, so pstate never touches their buffers after that,
// and a later wait/test frees the handle without following a pointer into the freed context.
// (destroy_model_parallel refuses while any is pending: UCX cannot cancel a send in flight
// without closing the endpoint to its peer, which every other group shares.)
//
// A batch is one blocking call: every op posted (tags in list order), then one wait for all under
// one deadline, so no listing order deadlocks; in a CUDA context one NCCL group on the stream.
#include "group/context.hpp"
#include "group/group.hpp"
#include "reduce/reduce.hpp"

#include <algorithm>

namespace {

bool is_fatal_p2p(pstate_status_t s) {
  return s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TRANSPORT ||
         s == PSTATE_ERR_INTERNAL || s == PSTATE_ERR_MISMATCH || s == PSTATE_ERR_INTERRUPTED ||
         s == PSTATE_ERR_NO_MEMORY;  // as blocking p2p
}

bool sends(pstate::TraceOp op) { return op == pstate::TraceOp::kSend; }

// A batch's bytes for the call observer: every op's, sent and received.
uint64_t batch_bytes(const pstate_p2p_op_t *ops, size_t n) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) bytes += ops[i].count * pstate::dtype_size(ops[i].dtype);
  return bytes;
}

}  // namespace

using pstate::RequestState;
using pstate::TraceOp;

void pstate_group_s::post_request(RequestState &r, TraceOp top, void *buf, size_t count, pstate_dtype_t dtype,
                                  int peer) {
  const char *op = sends(top) ? "isend" : "irecv";
  pstate::TraceRecorder *tr = ctx_.trace();
  auto record = [&](bool numbered) -> uint64_t {
    if (tr == nullptr) return 0;
    return tr->begin(pstate::TraceClass::kP2P, top, trace_group_,
                     numbered ? pstate::TraceRecorder::next_p2p(trace_group_, peer, sends(top)) : UINT64_MAX, count,
                     dtype, -1, -1, peer, path_);
  };
  const uint32_t observed_op = sends(top) ? pstate::kObservedIsend : pstate::kObservedIrecv;
  r.observed_t0 = pstate::observer_ticks();
  r.observed_bytes = count * pstate::dtype_size(dtype);
  if (hooked_ && hooks_->wanted()) [[unlikely]]
    hook_post(r, op, count, dtype, peer);
  auto hook_failed = [&](const pstate::Error &e) {
    if (r.hooked) {
      r.hooked = false;
      hook_after(r.hook_info, r.hook_t0, e.status(), e.what());
    }
  };
  try {
    check_alive(op);
  } catch (const pstate::Error &e) {
    hook_failed(e);
    metrics_->record(observed_op, path_, r.observed_bytes, r.observed_t0, e.status());
    ctx_.trace_call_failed(record(false), e, name_, op);
    throw;
  }
  r.trace_op = top;
  r.peer = peer;
  r.trace_id = record(true);
  r.posted = pstate::Deadline::coarse_now();
  r.test_deadline = pstate::Deadline::after_ms_from(r.posted, timeout_ms());
  requests_.reserve(requests_.size() + 1);  // no allocation after the post: the state is always held
  try {
    comm_->post(r.transfer, sends(top), peer, buf, count * pstate::dtype_size(dtype),
                pstate::p2p_what(pstate::TensorKind::kSend, dtype), op_deadline());
  } catch (const pstate::Error &e) {
    if (is_fatal_p2p(e.status())) ctx_.fail(e);
    hook_failed(e);
    metrics_->record(observed_op, path_, r.observed_bytes, r.observed_t0, e.status());
    ctx_.trace_call_failed(r.trace_id, e, name_, op);
    throw;
  }
  r.group = this;
  requests_.push_back(&r);
}

// BEFORE of isend/irecv, on the calling thread at the post. The nesting is left at once: the calls
// made while the request is pending are the caller's own, each hooked. A refusal: its AFTER, then
// the error (nothing was posted; the peer's matching operation is not told, as for an argument
// error of point-to-point).
void pstate_group_s::hook_post(RequestState &r, const char *op, size_t count, pstate_dtype_t dtype, int peer) {
  HookedCall h = hook_begin(op, UINT64_MAX, count, dtype, -1, peer, path_, false);
  hooks_->leave();
  if (h.refusal.hook != 0) {
    const pstate::Error why = hook_refusal(h);
    hook_after(h.info, h.t0, why.status(), why.what());
    throw why;
  }
  r.hooked = true;
  r.hook_t0 = h.t0;
  r.hook_info = h.info;
}

// Every way a pending request ends goes through here: the call observer records it then (its
// time: from the post to this completion), and the hooks' AFTER runs.
void pstate_group_s::finish_request(RequestState &r, pstate_status_t status, std::string message) noexcept {
  metrics_->record(sends(r.trace_op) ? pstate::kObservedIsend : pstate::kObservedIrecv, path_, r.observed_bytes,
                   r.observed_t0, status);
  auto it = std::find(requests_.begin(), requests_.end(), &r);
  if (it != requests_.end()) requests_.erase(it);
  r.group = nullptr;
  r.pending = false;
  r.status = status;
  r.message = std::move(message);
  if (r.hooked) [[unlikely]] {  // AFTER: the request's status, its time from the post
    r.hooked = false;
    hook_after(r.hook_info, r.hook_t0, status, status == PSTATE_OK ? nullptr : r.message.c_str());
  }
}

bool pstate_group_s::complete_request(RequestState &r, bool block) {
  if (!r.pending) return true;
  const char *op = sends(r.trace_op) ? "isend" : "irecv";
  pstate::TraceRecorder *tr = ctx_.trace();
  try {
    bool done = false;
    naming_timeout([&] {
      if (ctx_.state() == pstate::Context::State::kFailed) {
        // The context failed while the request was pending: what already arrived is kept, the
        // rest is cancelled (its peer may be the one that failed).
        done = comm_->settle(r.transfer, op, r.test_deadline, r.posted);
        if (!done) {
          comm_->cancel(r.transfer);
          check_alive(op);  // throws ABORTED naming the first failure
        }
      } else if (block) {
        comm_->wait(r.transfer, op, op_deadline());
        done = true;
      } else {
        done = comm_->test(r.transfer, op, r.peer, r.test_deadline, r.posted);
      }
    });
    if (!done) return false;
  } catch (const pstate::Error &e) {
    // The buffer is the caller's again: the transport must never move into or out of it later
    // (a no-op when the operation already left it).
    comm_->cancel(r.transfer);
    if (is_fatal_p2p(e.status())) ctx_.fail(e);
    ctx_.trace_call_failed(r.trace_id, e, name_, op);
    finish_request(r, e.status(), e.what());
    return true;
  }
  if (tr != nullptr && r.trace_id != 0) tr->completed(r.trace_id);
  finish_request(r, PSTATE_OK, std::string());
  return true;
}

void pstate_group_s::abort_requests() noexcept {
  while (!requests_.empty()) {
    RequestState &r = *requests_.back();
    if (comm_) comm_->cancel(r.transfer);
    if (pstate::TraceRecorder *tr = ctx_.trace(); tr != nullptr && r.trace_id != 0)
      tr->failed(r.trace_id, PSTATE_ERR_ABORTED);
    std::string why;
    try {
      why = pstate::cat(name_, " ", sends(r.trace_op) ? "isend to" : "irecv from", " group rank ", r.peer,
                        ": the request was still pending when pstate_finalize or pstate_abort released its "
                        "group; the transfer was cancelled (the buffer is the caller's "
                        "again, a receive buffer holds no defined data)");
    } catch (...) {  // no memory for the text: the status says it
    }
    finish_request(r, PSTATE_ERR_ABORTED, std::move(why));
  }
}

void pstate_group_s::p2p_batch(const pstate_p2p_op_t *ops, size_t n) {
  constexpr const char *kOp = "p2p_batch";
  pstate::TraceRecorder *tr = ctx_.trace();
  std::vector<uint64_t> tids(n, 0);
  auto record = [&](size_t i, bool numbered) -> uint64_t {
    if (tr == nullptr) return 0;
    const bool s = ops[i].is_send != 0;
    return tr->begin(pstate::TraceClass::kP2P, s ? TraceOp::kSend : TraceOp::kRecv, trace_group_,
                     numbered ? pstate::TraceRecorder::next_p2p(trace_group_, ops[i].peer, s) : UINT64_MAX,
                     ops[i].count, ops[i].dtype, -1, -1, ops[i].peer, path_);
  };
  const uint64_t t0 = pstate::observer_ticks();
  const uint64_t bytes = batch_bytes(ops, n);
  try {
    check_alive(kOp);
  } catch (const pstate::Error &e) {
    metrics_->record(pstate::kObservedP2PBatch, path_, bytes, t0, e.status());
    ctx_.trace_call_failed(record(0, false), e, name_, kOp);
    throw;
  }
  try {
    naming_timeout([&] { comm_->p2p_batch(p2p_call(kOp), ops, n, [&](size_t i) { tids[i] = record(i, true); }); });
  } catch (const pstate::Error &e) {
    if (is_fatal_p2p(e.status())) ctx_.fail(e);
    metrics_->record(pstate::kObservedP2PBatch, path_, bytes, t0, e.status());
    ctx_.trace_call_failed(tids[0], e, name_, kOp);
    for (size_t i = 1; tr != nullptr && i < n; ++i)
      if (tids[i] != 0) tr->failed(tids[i], e.status());
    throw;
  }
  for (size_t i = 0; tr != nullptr && i < n; ++i) tr->completed(tids[i]);
  metrics_->record(pstate::kObservedP2PBatch, path_, bytes, t0, PSTATE_OK);
}

void pstate_group_s::p2p_batch_device(const pstate_p2p_op_t *ops, size_t n, void *stream) {
  constexpr const char *kOp = "p2p_batch";
  pstate::TraceRecorder *tr = ctx_.trace();
  std::vector<uint64_t> tids(n, 0);
  auto record = [&](size_t i, bool numbered) -> uint64_t {
    if (tr == nullptr) return 0;
    const bool s = ops[i].is_send != 0;
    return tr->begin(pstate::TraceClass::kP2P, s ? TraceOp::kSend : TraceOp::kRecv, trace_group_,
                     numbered ? pstate::TraceRecorder::next_p2p(trace_group_, ops[i].peer, s) : UINT64_MAX,
                     ops[i].count, ops[i].dtype, -1, -1, ops[i].peer, pstate::TracePath::kNccl);
  };
  const uint64_t t0 = pstate::observer_ticks();
  const uint64_t bytes = batch_bytes(ops, n);
  try {
    check_alive(kOp);
  } catch (const pstate::Error &e) {
    metrics_->record(pstate::kObservedP2PBatch, pstate::TracePath::kNccl, bytes, t0, e.status());
    ctx_.trace_call_failed(record(0, false), e, name_, kOp);
    throw;
  }
  for (size_t i = 0; i < n; ++i) tids[i] = record(i, true);
  try {
    naming_timeout([&] { device_comm().p2p_batch(ops, n, stream); });
  } catch (const pstate::Error &e) {
    device_op_failed(e, kOp, tids[0]);
    metrics_->record(pstate::kObservedP2PBatch, pstate::TracePath::kNccl, bytes, t0, e.status());
    for (size_t i = 1; tr != nullptr && i < n; ++i)
      if (tids[i] != 0) tr->failed(tids[i], e.status());
    throw;
  }
  for (size_t i = 0; tr != nullptr && i < n; ++i) tr->enqueued(tids[i]);
  metrics_->record(pstate::kObservedP2PBatch, pstate::TracePath::kNccl, bytes, t0, PSTATE_OK);
}
