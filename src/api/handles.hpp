// handles.hpp — checks of the opaque handles and of the arguments every group call shares.
//
// Handles: a pstate_t or pstate_group_t used after pstate_finalize/abort freed it is undefined
// behaviour (as an NCCL communicator after ncclCommDestroy); nothing here tries to detect it, since
// any such test would read freed memory. A group after pstate_destroy_model_parallel is retired,
// not freed: it stays readable and its calls answer INVALID_STATE (Group::check_alive). Requests
// differ: their handles are registry tokens, never addresses, so a freed one is detected
// (request_handles.hpp).
//
// Threads: one thread at a time drives a pstate_t and its groups. ContextEntry enforces it with
// one atomic exchange per call on the context's busy flag: a second thread that enters while a
// call runs gets PSTATE_ERR_BUSY at once instead of corrupting the transports.
#pragma once

#include "api/boundary.hpp"
#include "common/arith.hpp"
#include "group/context.hpp"
#include "common/limits.hpp"
#include "common/op_descriptor.hpp"
#include "group/group.hpp"
#include "reduce/reduce.hpp"

#include <cstdint>
#include <limits>
#include <string_view>
#include <utility>

namespace pstate::api {

inline void require_context(const pstate_t *ps) { require_nonnull(ps, "ps"); }

// A group handle: non-NULL and carrying a group's magic number, which catches another kind of
// pointer passed as g (a pstate_t, a tensor). A retired group (after destroy_model_parallel)
// passes and answers INVALID_STATE from its own check_alive. A group of a finalized or aborted
// context is freed memory: undefined behaviour, not detected (see the top of this file).
inline void require_group(const pstate_group_t *g, const char *call) {
  require_nonnull(g, "g");
  if (!g->valid_magic())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, call, ": g is not a pstate_group_t (pass a group from pstate_get_group)");
}

inline void require_rank(const pstate_group_t *g, int rank, const char *name) {
  if (rank < 0 || rank >= g->size())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, " ", rank, " is not a rank of group ", g->name(), " (0..",
                g->size() - 1, "): ranks are ranks in the group (rank_in_group), not global ranks");
}

// kMaxBufferBytes (common/limits.hpp): the largest buffer one operation accepts.

// The bytes of count elements of dtype times `blocks`: INVALID_ARGUMENT when that overflows size_t
// or exceeds kMaxBufferBytes. Checked on every rank (a gather's recv size too), so a bad count
// fails the call everywhere alike, before any data moves.
// Element sizes, inline: the exported pstate_dtype_size is a call through the PLT on every use.
inline size_t element_size(pstate_dtype_t dtype) {
  constexpr size_t kSizes[PSTATE_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  auto i = static_cast<unsigned>(dtype);
  return i < PSTATE_DTYPE_COUNT ? kSizes[i] : 0;
}

inline size_t require_fits(size_t count, pstate_dtype_t dtype, size_t blocks, const char *name) {
  size_t elements = 0, bytes = 0;  // multiplications with overflow flags: no division on the fast path
  if (__builtin_mul_overflow(count, blocks, &elements) ||
      __builtin_mul_overflow(elements, element_size(dtype), &bytes)) [[unlikely]]
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, ": count ", count, " x ", blocks, " elements of ",
                pstate_dtype_name(dtype), " overflows size_t");
  if (bytes > kMaxBufferBytes) [[unlikely]]
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, ": count ", count, " x ", blocks, " elements of ",
                pstate_dtype_name(dtype), " = ", bytes, " bytes, more than 2^47 bytes (128 TiB, the most one "
                "operation accepts): no address space holds it; is the count right?");
  return bytes;
}

// count elements of dtype times `blocks` must fit (require_fits); buf may be NULL only when empty.
// Returns the buffer's size in bytes.
inline void require_present(const void *buf, size_t bytes, size_t count, const char *name) {
  if (bytes != 0 && buf == nullptr) [[unlikely]]
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, " is NULL with count ", count);
}
inline size_t require_buffer(const void *buf, size_t count, pstate_dtype_t dtype, size_t blocks, const char *name) {
  size_t bytes = require_fits(count, dtype, blocks, name);
  require_present(buf, bytes, count, name);
  return bytes;
}

// The send and recv buffers of one call must be disjoint unless `in_place` (the caller computed
// whether send and recv form one of the call's in-place forms, which `forms` spells out for the
// message). Anything else that overlaps is INVALID_ARGUMENT: the algorithms would read elements
// they already overwrote and return wrong data with PSTATE_OK.
inline void require_disjoint(const pstate_group_t *g, const char *call, const void *send, size_t send_bytes,
                             const void *recv, size_t recv_bytes, bool in_place, const char *forms) {
  if (in_place || !ranges_overlap(send, send_bytes, recv, recv_bytes)) return;
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, "group ", g->name(), " rank_in_group ", g->rank_in_group(), " ", call,
              ": send [", send, ", +", send_bytes, " B) and recv [", recv, ", +", recv_bytes,
              " B) overlap; the in-place forms are ", forms, "; otherwise pass disjoint buffers");
}

// One thread at a time per context: the busy flag is taken at entry (one atomic exchange) and
// released at exit. A second thread gets PSTATE_ERR_BUSY naming the rule and the call inside;
// nothing else is touched.
[[noreturn]] inline void throw_context_busy(const pstate::Context &ctx, const char *call) {
  const char *inside = ctx.inside_call();
  throw_error(PSTATE_ERR_BUSY, call, " on rank ", ctx.rank(), ": another thread is inside ",
              inside != nullptr ? inside : "a call", " on this pstate_t right now; one thread at a time drives a "
              "pstate_t and its groups (pstate.h, thread rules): serialize the calls (a mutex around them), give "
              "each thread its own pstate_t, or stop that call with pstate_abort / pstate_revoke");
}

class ContextEntry {
 public:
#ifndef PSTATE_NO_AGREEMENT
  // After the busy flag: a context whose abort was requested (pstate_revoke, or pstate_abort from
  // another thread that waits for this flag) refuses every call with ABORTED.
  ContextEntry(pstate::Context &ctx, const char *call) : ctx_(ctx) {
    if (!ctx_.try_enter()) {
      if (ctx_.abort_requested()) ctx_.throw_abort_requested(call);  // revoked: ABORTED, whoever holds it
      throw_context_busy(ctx_, call);
    }
    if (ctx_.abort_requested()) {
      ctx_.leave();
      ctx_.throw_abort_requested(call);
    }
    ctx_.set_inside_call(call);
    outer_ = std::exchange(*current_, &ctx_);
    ctx_.trace_enter(call);  // a dump names the call a blocked rank is in
  }
  ~ContextEntry() {
    *current_ = outer_;
    ctx_.set_inside_call(nullptr);
    ctx_.leave();
  }
#else  // compiled out with the agreement, to measure both (bench/agreement_cost.sh)
  ContextEntry(pstate::Context &ctx, const char *) : ctx_(ctx) {}
#endif
  ContextEntry(const ContextEntry &) = delete;
  ContextEntry &operator=(const ContextEntry &) = delete;

 private:
  pstate::Context &ctx_;
#ifndef PSTATE_NO_AGREEMENT
  const pstate::Context *outer_ = nullptr;  // the context this thread was inside before (another one's callback)
  // This thread's slot, looked up once per call (a thread-local of a shared library costs a call
  // to __tls_get_addr per lookup).
  const pstate::Context **current_ = &pstate::Context::current_on_this_thread();
#endif
};

inline void require_reducible(pstate_dtype_t dtype, pstate_reduce_op_t op) {
  require_op(op);
  if (!is_reducible(dtype))
    throw_error(PSTATE_ERR_UNSUPPORTED, "reduction ", pstate_reduce_op_name(op), " on ", pstate_dtype_name(dtype),
                " is not supported on CPU: fp8 types are move-only (all_gather, broadcast, send/recv)");
}

// The buffer checks of one tensor call, for where the group sends its tensors (asked once per
// call; the group dispatches the call itself, group_tensors.cpp). In a CUDA context: device memory
// of the context's device (checked here under PSTATE_CHECK=1, before the call's exchange, so one
// rank's host or other-device buffer fails every rank; without it the device communicator checks
// it, locally), overlapping only in NCCL's in-place forms. Otherwise: host memory (no CUDA device
// memory, which costs nothing while the process has not loaded CUDA), overlapping also in the CPU
// communicator's forms, and a CPU kernel for the dtype and op. Each place keeps its order of
// checks: the device's memory before overlap, the host's overlap first.
class TensorChecks {
 public:
  // call: the entry point ("pstate_all_reduce"); host memory checks name it without "pstate_".
  TensorChecks(const pstate_group_t *g, const char *call)
      : g_(g), call_(call), op_(call + sizeof("pstate_") - 1), device_(g->on_device()) {}
  bool device() const { return device_; }
  // A buffer the call's communicator reads or writes (bytes: its size; 0 = none).
  void memory(const void *p, size_t bytes, const char *name) const {
    if (!device_) return g_->context().require_host_memory(p, name, g_->name().c_str(), op_);
    if (bytes == 0 || !g_->context().check_enabled()) return;
    g_->context().device_context()->require_device_pointer(p, name, pstate::cat(g_->name(), ": ", call_));
  }
  // Both buffers of the call, send first (on the CPU one look at whether CUDA is loaded for both).
  void memory(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes) const {
    if (!device_) return g_->context().require_host_memory(send, "send", recv, "recv", g_->name().c_str(), op_);
    memory(send, send_bytes, "send");
    memory(recv, recv_bytes, "recv");
  }
  // A point-to-point buffer: host memory in a CPU context (the device communicator checks its own).
  void p2p_memory(const void *p, const char *name) const {
    if (!device_) g_->context().require_host_memory(p, name, g_->name().c_str(), op_);
  }
  // send and recv overlap only in an in-place form (require_disjoint): on the CPU nccl_in_place
  // or cpu_in_place (spelled cpu_forms), checked before `memory_checks`; on the device
  // nccl_in_place alone (nccl_forms), checked after them.
  template <typename MemoryChecks>
  void apart(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes, bool nccl_in_place,
             bool cpu_in_place, const char *nccl_forms, const char *cpu_forms, MemoryChecks &&memory_checks) const {
    if (!device_)
      require_disjoint(g_, call_, send, send_bytes, recv, recv_bytes, nccl_in_place || cpu_in_place, cpu_forms);
    memory_checks();
    if (device_) require_disjoint(g_, call_, send, send_bytes, recv, recv_bytes, nccl_in_place, nccl_forms);
  }
  // A reduction the CPU has a kernel for (NCCL has every dtype and op pstate names).
  void reducible(pstate_dtype_t dtype, pstate_reduce_op_t op) const {
    if (!device_) require_reducible(dtype, op);
  }

 private:
  const pstate_group_t *g_;
  const char *call_;
  const char *op_;
  bool device_;
};

// The data a tensor call sends, for its BEFORE hooks (group.hpp note_send): only while hooks are on
// (bytes(), its size, computed then only: the call without hooks pays one load and a branch).
template <typename Bytes>
inline void note_send(const pstate_group_t *g, const void *p, Bytes &&bytes) {
  if (g->hooks_wanted()) [[unlikely]]
    g->note_send(p, bytes());
}

inline void require_cpu_stream(const pstate_group_t *g, void *stream) {
  if (g->context().device() == PSTATE_DEVICE_CPU && stream != nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "stream must be NULL in a CPU context (group ", g->name(), ")");
}

// Runs the argument checks of one collective call of g. A check that fails on one rank only
// would let the other ranks go on into the collective, where they pair it with this rank's next
// call and return that call's data with PSTATE_OK (a gather with a bad recv on its root gave
// [20, 20, 11, 11] for [20, 20, 21, 21]). So the refusal takes part in the call's agreement
// (Group::refuse): every rank of the call returns INVALID_ARGUMENT at once, this rank its own
// error (naming the group and rank), the others one that names this rank; nothing is paired
// with a later call and the group stays usable. Checks that agree on every rank (a
// count past 2^47 bytes) cost one agreement round there, on an error path only. kind, root,
// count: the call's, for the flight recorder.
//
// on_cpu: the call begins on the CPU communicator in every context (objects, tensor dicts).
// Otherwise, in a CUDA context without PSTATE_CHECK=1, the ranks never meet on the CPU
// communicator for a device call (NCCL carries it alone), so the refusal stays local there, as
// NCCL's own argument errors do (Group::refusals_reach_peers).
template <typename Checks>
void check_together(pstate_group_t *g, OpKind kind, int root, size_t count, Checks &&checks, bool on_cpu = false) {
  try {
    checks();
  } catch (const pstate::Error &e) {
    // The entry point names itself first (PSTATE_GUARD); the group and rank go in unless named.
    const std::string_view what = e.what();
    const pstate::Error why = what.find(g->name()) != std::string_view::npos
                                  ? e
                                  : pstate::Error(e.status(), pstate::cat("group ", g->name(), " (group rank ",
                                                                          g->rank_in_group(), "): ", what));
    if (!on_cpu && !g->refusals_reach_peers()) throw why;
    g->refuse(kind, root, count, why);
  }
}

}  // namespace pstate::api
