// group.hpp — pstate_group_t: SGLang's GroupCoordinator for one group seen from one rank.
//
// A group knows its ranks (global, in group order), this rank's place in it, and owns its host
// communicator (transport/host_comm.hpp), chosen once when the group is made: shared memory
// (ShmComm) when every rank is on this host, else UCX (UcxComm). Every operation goes through
// run(): it refuses work on a failed context, numbers the operation (the sequence number becomes
// the tag base, so messages of different operations never mix), makes every rank agree on what is
// being called (kind, count, dtype, op, root, the v-collectives' counts array as its total and
// hash: inside the shared-memory protocol where the communicator carries it, else by a descriptor
// exchange on the communicator's network; PSTATE_CHECK=1 adds the exchange everywhere) and reports
// a mismatch on every rank instead of a wrong answer or a hang, sets the deadline, hands the
// operation to the communicator, and on a fatal error (TIMEOUT, PEER_LOST, TRANSPORT) poisons the
// context so every later collective returns ABORTED. What a call is (its number, its agreement,
// a small call folded into the exchange, its flight-recorder entry, what its failure does) is the
// group's, the same for every communicator; how its bytes move is the communicator's.
//
// In a CUDA context the group also owns a device communicator (DeviceComm: NCCL), made on its
// first device operation. The tensor operations src/api/ calls (they take a stream) go there
// through run_device() (group_device.cpp), or to the host communicator in a CPU context: the
// choice is made here (group_tensors.cpp), once per call in one place; barriers of the library
// itself, objects and metadata stay on the host communicator in every context.
#pragma once

#include "bootstrap/store.hpp"
#include "coll/agreement_exchange.hpp"
#include "common/call_position.hpp"
#include "common/error.hpp"
#include "common/op_descriptor.hpp"
#include "common/p2p_message_kind.hpp"
#include "common/trace.hpp"
#include "group/call_hooks.hpp"
#include "group/call_observer.hpp"
#include "group/group_memory.hpp"
#include "group/group_registry.hpp"
#include "group/request.hpp"
#include "transport/device_comm.hpp"
#include "transport/host_comm.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstate {

class Context;

}  // namespace pstate

struct pstate_group_s {
 public:
  pstate_group_s(pstate::Context &ctx, pstate_group_kind_t kind, size_t index, std::vector<int> ranks,
                 uint32_t group_id);
  ~pstate_group_s();
  pstate_group_s(const pstate_group_s &) = delete;
  pstate_group_s &operator=(const pstate_group_s &) = delete;

  // Facts.
  pstate::Context &context() const { return ctx_; }
  pstate_group_kind_t kind() const { return kind_; }
  const std::string &name() const { return name_; }
  // The group's ranks as global ranks of the current world (what pstate_group_ranks and
  // pstate_group_info report; renumbered by pstate_shrink / pstate_grow), and as launch ranks (the
  // rank each process was started with: the identity of the transports, pids, hosts, shm names and
  // flight-recorder entries, which never changes for a process).
  const std::vector<int> &ranks() const { return global_; }
  const std::vector<int> &launch_ranks() const { return ranks_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int rank_in_group() const { return rank_in_group_; }
  bool retired() const { return retired_; }
  // destroy_model_parallel, shrink, grow (`by`: what its refusals name), finalize: the handle
  // stays valid, every call refused. The first call's `by` stays.
  void retire(pstate::DroppedBy by = pstate::DroppedBy::kDestroyModelParallel) noexcept;
  void check_alive(const char *call) const;  // throws INVALID_STATE / ABORTED
  // check_alive's common case inline (group.cpp, for run()): a retired group or an unusable
  // context take the call above.
  inline void check_alive_now(const char *call) const;
  bool valid_magic() const { return magic_ == kMagic; }

  // ---- the group's timeout (pstate_group_set_timeout) ----
  // Every later call of this group on this rank is bounded by timeout_ms (0: the context's again);
  // the device communicator's polls too. Local, not collective.
  void set_timeout_ms(int64_t timeout_ms);
  int64_t timeout_ms() const { return timeout_ms_.load(std::memory_order_relaxed); }
  // One operation's deadline: the group's timeout, from the operation's first wait.
  pstate::Deadline op_deadline() const;
  // Runs f; a TIMEOUT it throws under the group's own timeout names that timeout (the transports'
  // texts speak of the context's).
  template <typename F>
  void naming_timeout(F &&f) {
    try {
      f();
    } catch (const pstate::Error &e) {
      if (e.status() == PSTATE_ERR_TIMEOUT && own_timeout_) throw timeout_named(e);
      throw;
    }
  }

  // ---- tensor operations of src/api/ (group_tensors.cpp; arguments checked there) ----
  // The device communicator in a CUDA context (enqueued on stream), the host communicator
  // otherwise (stream NULL); the host path also turns the API's extra in-place forms into the
  // communicator's (an all_gather's send == recv on rank r >= 1, ...).
  void all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                  void *stream);
  void all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, void *stream);
  void reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                      void *stream);
  void broadcast(void *buf, size_t count, pstate_dtype_t dtype, int root, void *stream);
  void gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int root, void *stream);
  void all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype, void *stream);
  void reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, int root,
              void *stream);
  void scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root, void *stream);
  // The variable-size collectives: counts has size() entries summing to total (checked by
  // src/api/); the descriptor carries total and counts_hash(counts), so ranks that pass
  // different arrays get MISMATCH naming their arrays (naming_counts_on_mismatch).
  void all_gatherv(const void *send, void *recv, const size_t *counts, size_t total, pstate_dtype_t dtype,
                   void *stream);
  void reduce_scatterv(const void *send, void *recv, const size_t *counts, size_t total, pstate_dtype_t dtype,
                       pstate_reduce_op_t op, void *stream);
  // all_to_all_v: four arrays of size() entries (checked by src/api/). The descriptor is alike on
  // every rank (kind, dtype); the per-pair counts are agreed by an exchange of every rank's
  // counts (HostComm::agree_all_to_all_v_counts) before data moves: on the host always, on the
  // device under PSTATE_CHECK=1.
  void all_to_all_v(const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                    const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype, void *stream);
  void send(const void *buf, size_t count, pstate_dtype_t dtype, int dst, void *stream);
  void recv(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream);
  // pstate_isend / pstate_irecv into r (fresh, owned by the caller's handle): a CUDA context
  // enqueues the transfer and finishes r; a CPU context posts it (post_request below).
  void isend(pstate::RequestState &r, const void *buf, size_t count, pstate_dtype_t dtype, int dst, void *stream);
  void irecv(pstate::RequestState &r, void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream);
  void p2p_batch(const pstate_p2p_op_t *ops, size_t n, void *stream);
  // Before a point-to-point call makes anything: in a CUDA context, a group of more than two ranks
  // needs its NCCL communicator already (INVALID_STATE naming the fix); nothing in a CPU context.
  void require_p2p_ready(const char *call);

  // Operations on host memory (the host communicator), for src/group/ itself and the tensor
  // operations above.
  // kind: what the ranks agree on; pstate's own exchanges pass their own (op_descriptor.hpp), so
  // they never pair with a user's call of the same shape.
  void all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                  pstate::OpKind kind = pstate::OpKind::kAllReduce);
  void all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                  pstate::OpKind kind = pstate::OpKind::kAllGather);
  void reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, pstate_reduce_op_t op);
  void broadcast(void *buf, size_t count, pstate_dtype_t dtype, int src);
  void gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int dst);
  void all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype);
  // recv is nullptr on every rank but root; send is nullptr on every rank but root.
  void reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, int root);
  void scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root);
  // Point-to-point on the group's two streams per peer and direction (common/p2p_message_kind.hpp):
  // tensors (send/recv; kind: a user's send, or a tensor dict's CPU payload) and objects
  // (send_object/recv_object; kind: a user's object, or a tensor dict's metadata,
  // acknowledgement or plan). A receive takes only a message of its own kind, dtype and size:
  // another one is MISMATCH naming both.
  void send(const void *buf, size_t count, pstate_dtype_t dtype, int dst,
            pstate::TensorKind kind = pstate::TensorKind::kSend);
  void recv(void *buf, size_t count, pstate_dtype_t dtype, int src,
            pstate::TensorKind kind = pstate::TensorKind::kSend);
  // allow_shm false: on the communicator's network (UCX) even inside a host, to prove the transport.
  // kind: kBarrier, or kFinalize / kDestroy for the library's own barriers (named in mismatches).
  void barrier(bool allow_shm = true, pstate::OpKind kind = pstate::OpKind::kBarrier);
  pstate::Bytes broadcast_object(const void *data, size_t size, int src,
                                 pstate::OpKind kind = pstate::OpKind::kBroadcastObject);
  pstate::Bytes all_gather_object(const void *data, size_t size, std::vector<size_t> *sizes,
                                  pstate::OpKind kind = pstate::OpKind::kAllGatherObject);
  void send_object(const void *data, size_t size, int dst, pstate::ObjectKind kind = pstate::ObjectKind::kObject);
  pstate::Bytes recv_object(int src, pstate::ObjectKind kind = pstate::ObjectKind::kObject);

  // Runs body; a MISMATCH it throws (of a v-collective: the descriptors name only the counts
  // hashes) gets this rank's counts array appended, so the ranks' messages together show every
  // array that was passed.
  template <typename Body>
  void naming_counts_on_mismatch(const size_t *counts, Body &&body) {
    try {
      body();
    } catch (const pstate::Error &e) {
      if (e.status() != PSTATE_ERR_MISMATCH) throw;
      throw pstate::Error(e.status(),
                          pstate::cat(e.what(), "; this rank's counts: ", pstate::counts_text(counts, ranks_.size())));
    }
  }

  // A call made of several operations of this group (a tensor dict: its metadata object, then
  // its tensors), recorded by the flight recorder as one entry around theirs: kBroadcastTensorDict
  // (collective, root `rank`) or kSendTensorDict / kRecvTensorDict (point-to-point with `rank`).
  // The call observer records it as one call too (its inner operations as theirs).
  template <typename Body>
  void traced(pstate::TraceOp op, int rank, Body &&body) {
    if (hooked_ && hooks_->wanted()) [[unlikely]] {
      const bool rooted = op == pstate::TraceOp::kBroadcastTensorDict;
      HookedCall h = hook_begin(pstate::trace_op_name(op), UINT64_MAX, 0, -1, rooted ? rank : -1, rooted ? -1 : rank,
                                on_device() ? pstate::TracePath::kNccl : path_, on_device());
      hooked(h, [&] {
        if (h.refusal.hook != 0) throw hook_refusal(h);  // before any part of it moved
        traced_core(op, rank, body);
      });
      return;
    }
    traced_core(op, rank, body);
  }
  template <typename Body>
  void traced_core(pstate::TraceOp op, int rank, Body &&body) {
    const uint64_t t0 = pstate::observer_ticks();
    const uint64_t id = trace_outer_begin(op, rank);
    const pstate::TracePath path = on_device() ? pstate::TracePath::kNccl : path_;
    try {
      body();
    } catch (const pstate::Error &e) {
      metrics_->record(static_cast<uint32_t>(op), path, 0, t0, e.status());
      trace_outer_end(id, &e);
      throw;
    }
    metrics_->record(static_cast<uint32_t>(op), path, 0, t0, PSTATE_OK);
    trace_outer_end(id, nullptr);
  }

  // ---- hooks (group/call_hooks.hpp; docs/hooks.md) ----
  // A hooked call: its info (BEFORE's, then AFTER's), its start and what BEFORE said.
  struct HookedCall {
    pstate_call_info_t info;
    uint64_t t0;
    pstate::CallHooks::Refusal refusal;
  };
  // BEFORE of a call about to begin (the send buffer the API noted goes with it); then the call's
  // own operations are not hooked until hook_end. AFTER with the status and the error's text.
  HookedCall hook_begin(const char *op, uint64_t seq, uint64_t count, int dtype, int root, int peer,
                        pstate::TracePath path, bool on_device);
  void hook_end(HookedCall &h, pstate_status_t status, const char *message) noexcept;
  // AFTER alone (hook_end without leaving the nesting: a request's BEFORE left it at its post).
  void hook_after(pstate_call_info_t &info, uint64_t t0, pstate_status_t status, const char *message) noexcept;
  // The error of a call a BEFORE hook refused (INVALID_ARGUMENT naming the group, rank and hook).
  pstate::Error hook_refusal(const HookedCall &h) const;
  // Runs body between h's BEFORE (already run) and its AFTER, whatever way it ends.
  template <typename Body>
  void hooked(HookedCall &h, Body &&body) {
    try {
      body();
    } catch (const pstate::Error &e) {
      hook_end(h, e.status(), e.what());
      throw;
    } catch (const std::bad_alloc &) {
      hook_end(h, PSTATE_ERR_NO_MEMORY, "out of memory");
      throw;
    } catch (...) {
      hook_end(h, PSTATE_ERR_INTERNAL, "an unexpected exception");
      throw;
    }
    hook_end(h, PSTATE_OK, nullptr);
  }
  // The API notes the data a tensor call sends while hooks are on (api/handles.hpp note_send), for
  // BEFORE's info (the NaN check reads it).
  bool hooks_wanted() const { return hooked_ && hooks_->wanted(); }
  void set_hooked(bool on) { hooked_ = on; }  // Context::refresh_hooked
  void note_send(const void *p, uint64_t bytes) const {
    hook_send_ = p;
    hook_send_bytes_ = bytes;
  }

  // ---- the device communicator (CUDA contexts; group_device.cpp) ----
  // Whether tensors of this group go to the device communicator (the context is CUDA): the choice
  // of the tensor operations above, which src/api/ asks only to check the buffers for it.
  bool on_device() const { return device_; }
  // Runs body(DeviceComm &) as the device operation `desc` (count, dtype, op, root as the CPU
  // operations fill them): refuses a retired group or failed context, verifies the operation
  // across the group first under PSTATE_CHECK (a numbered CPU exchange), and poisons the
  // context when the device communicator reports a fatal error. Point-to-point (kSend, kRecv)
  // is not verified, as on the CPU.
  // The call observer records the time to enqueue it (the stream's time is NCCL's).
  template <typename Body>
  void run_device(const pstate::OpDescriptor &desc, Body &&body) {
    if (hooked_ && hooks_->wanted() && hooked_kind(desc.op)) [[unlikely]] {
      HookedCall h = hook_begin(pstate::op_kind_name(static_cast<pstate::OpKind>(desc.op)), UINT64_MAX, desc.count,
                                desc.dtype, desc.root, -1,
                                size() == 1 ? pstate::TracePath::kLocal : pstate::TracePath::kNccl, true);
      hooked(h, [&] {
        if (h.refusal.hook != 0) {
          const pstate::Error why = hook_refusal(h);
          if (refusals_reach_peers()) refuse(static_cast<pstate::OpKind>(desc.op), desc.root, desc.count, why);
          throw why;
        }
        run_device_core(desc, body);
      });
      return;
    }
    run_device_core(desc, body);
  }
  template <typename Body>
  void run_device_core(const pstate::OpDescriptor &desc, Body &&body) {
    const uint64_t t0 = pstate::observer_ticks();
    const pstate::TracePath path = size() == 1 ? pstate::TracePath::kLocal : pstate::TracePath::kNccl;
    uint64_t tid = 0;  // its flight-recorder entry
    pstate::DeviceComm *comm = nullptr;
    try {
      naming_timeout([&] { comm = &begin_device_op(desc, &tid); });  // may create the communicator
    } catch (const pstate::Error &e) {
      observe(desc, path, t0, e.status());
      throw;
    }
    try {
      naming_timeout([&] { body(*comm); });
    } catch (const pstate::Error &e) {
      device_op_failed(e, pstate::op_kind_name(static_cast<pstate::OpKind>(desc.op)), tid);
      observe(desc, path, t0, e.status());
      throw;
    }
    device_op_enqueued(tid);
    observe(desc, path, t0, PSTATE_OK);
  }
  // The kinds a user calls (the hooks see these; pstate's own exchanges are parts of other calls).
  static bool hooked_kind(uint32_t op) {
    using K = pstate::OpKind;
    constexpr uint32_t kMask = ((1u << (static_cast<uint32_t>(K::kRecv) + 1)) - 2) |
                               (1u << static_cast<uint32_t>(K::kReduce)) | (1u << static_cast<uint32_t>(K::kScatter)) |
                               (1u << static_cast<uint32_t>(K::kAllGatherV)) |
                               (1u << static_cast<uint32_t>(K::kReduceScatterV)) |
                               (1u << static_cast<uint32_t>(K::kAllToAllV));
    return op < 32 && ((kMask >> op) & 1u) != 0;
  }
  // Creates the NCCL communicator now if it does not exist (collective over the group).
  void ensure_device_ready(const char *call);
  // Point-to-point cannot create the NCCL communicator of a group of more than two ranks (the
  // others would have to join): INVALID_STATE naming the fix when it does not exist yet.
  void require_device_p2p_ready(const char *call);

  // ---- group memory and registered buffers (CUDA contexts; group_mem.cpp, group_memory.hpp) ----
  // refused: this rank's own arguments were refused (src/api/); where the call is collective
  // (no pool; a reserve) the refusal takes part in it, so every rank fails with INVALID_ARGUMENT
  // and the group goes on; where it is local (a pool; a CPU context) it is this rank's error only.
  void *mem_alloc(size_t bytes, const pstate::Error *refused);        // collective, or local from the pool
  void mem_free(void *p);                                             // local for a pool piece, else collective
  void mem_pool_reserve(size_t bytes, const pstate::Error *refused);  // collective, once
  void mem_register(void *p, size_t bytes);  // local
  void mem_deregister(void *p);              // local
  pstate_mem_info_t mem_query(const void *p);
  pstate_mem_stats_t mem_stats();
  // A device all_reduce/all_gather/reduce_scatter about to be enqueued: counts its memory path,
  // refuses symmetric memory in a capture on NCCL < 2.30.7, records capture buffers.
  void note_device_call(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes, const char *call);
  // pstate_graph_capture_end with graph registration on: register what the capture used.
  void register_graph_buffers();
  // A point every rank of the group reaches (graph capture begin, pstate_shrink): windows onto
  // the group's current communicator.
  void sync_memory(const char *call);
  // pstate_shrink: the world's memory passes from the failed world group to the new one.
  std::unique_ptr<pstate::GroupMemory> take_memory() { return std::move(memory_); }
  void adopt_memory(std::unique_ptr<pstate::GroupMemory> m);
  // ncclCommAbort, local; later device operations return ABORTED. Never throws.
  void abort_device() noexcept;
  // One numbered CPU operation that copies n bytes from group rank 0 to every rank (the NCCL
  // unique id); called by the device communicator on every rank at its creation.
  void broadcast_from_rank0(void *bytes, size_t n);
  // A rank that refuses its part of a collective call (an argument only it can see: a root's
  // recv or send, its own NULL, overlapping or device buffer, a size past 2^47 bytes, NULL data
  // of an object) still takes part in the call's agreement as OpKind::kRefused, so every rank of
  // the call fails at once with INVALID_ARGUMENT naming it, none pairs the call with this rank's
  // next one, and the group stays usable and in step; then throws `why` here. Over UCX (and
  // under PSTATE_CHECK=1) the exchange carries the refusal before any data moves; inside a host
  // the shared-memory protocol does (shm_group.hpp, "Refusals"). A retired group or a failed
  // context throws `why` at once (nobody can be waiting in its call). size: the refused count.
  [[noreturn]] void refuse(pstate::OpKind kind, int root, uint64_t size, const pstate::Error &why);
  // Whether refuse() reaches the other ranks of a call of this group: always for the CPU
  // communicator; for a device call only under PSTATE_CHECK=1, whose CPU exchange precedes each
  // device collective (without it NCCL carries the call alone and nothing meets on the CPU).
  bool refusals_reach_peers() const;
  // PSTATE_CHECK for an operation that another communicator carries: one numbered operation
  // whose only content is the cross-rank comparison of desc.
  void verify_only(const pstate::OpDescriptor &desc);

  // ---- non-blocking and batched point-to-point (group_requests.cpp; request.hpp) ----
  // isend / irecv on the host communicator (post_request): the request outlives the call (no
  // other operation's failure cancels it), takes the per-peer order of send/recv (mixing them
  // keeps order) and records the entry; the state is pending, and held by the group, until
  // complete_request.
  // Drives a pending state of this group: block = wait (until done or the context timeout from
  // now), else one non-blocking test. True when the state finished (status and message set;
  // a fatal error has failed the context); never throws pstate::Error.
  bool complete_request(pstate::RequestState &r, bool block);
  // retire(): every pending request cancelled in the worker and finished with ABORTED.
  void abort_requests() noexcept;
  // Requests posted and not completed yet (pstate_destroy_model_parallel refuses to run then: a
  // pending send cannot be cancelled without closing the endpoint to its peer for every group).
  size_t pending_requests() const { return requests_.size(); }
  // pstate_p2p_batch, ops checked by src/api/: host (post all, wait all, one deadline) and CUDA
  // (one NCCL group on stream).
  void p2p_batch(const pstate_p2p_op_t *ops, size_t n);
  void p2p_batch_device(const pstate_p2p_op_t *ops, size_t n, void *stream);
  // ---- messages no call took, at retirement (pstate_destroy_model_parallel, pstate_grow) ----
  // The network's (UCX) point-to-point messages this rank posted to / from group rank peer on
  // stream so far (shared-memory rings count their own, and go with the group).
  uint32_t p2p_posted(pstate::P2PStream stream, int peer, bool sending) const {
    return network_ != nullptr ? network_->posted(stream, peer, sending) : 0;
  }
  // Receives and drops the messages peer sent on stream up to its count `sent` that no receive of
  // this rank took (sent - p2p_posted(stream, peer, false) of them; all were sent and completed,
  // so they arrive). Returns how many it dropped. Throws as a receive does.
  uint32_t drop_undelivered(pstate::P2PStream stream, int peer, uint32_t sent);
  uint32_t group_id() const { return group_id_; }
  // How many collectives of this group returned on this rank (a failure notice's account).
  uint32_t calls_returned() const { return position_.returned.load(std::memory_order_relaxed); }
  // ---- device communicators split from a parent group's (group_device.cpp) ----
  // Whether this group's NCCL communicator exists and can be split (ncclCommSplit).
  bool device_splittable() const;
  // Collective over every rank of this (parent) group: child is this rank's group of the split,
  // or nullptr when it joins none or its group has one rank (no communicator). The child's
  // communicator is then made from this group's by ncclCommSplit instead of its own bootstrap.
  void split_device_into(pstate_group_s *child);
  // ---- the world's communicator across pstate_shrink (group_device.cpp) ----
  // Hands over this group's NCCL communicator when it can be shrunk (ncclCommShrink), else
  // nullptr (it stays, to be aborted with the group).
  std::unique_ptr<pstate::DeviceComm> take_shrinkable_device_comm();
  // Collective over the survivors: this (new world) group's communicator is made from the failed
  // world's by ncclCommShrink, `exclude` being the dead ranks' old world ranks.
  void shrink_device_from(pstate::DeviceComm &parent, const std::vector<int> &exclude);

 private:
  // The tensor operations' choice (the one place that makes it): device_body(DeviceComm &) as the
  // device operation desc in a CUDA context, else host_body().
  template <typename DeviceBody, typename HostBody>
  void tensors(const pstate::OpDescriptor &desc, DeviceBody &&device_body, HostBody &&host_body) {
    // The device path out of line: inlined, its size (hooks, error handling) cost the host path
    // ~20 instructions of register saves per call (docs/bench/metrics.md).
    // (Descriptor and body by value: nothing of the device path is built before the branch.)
    if (on_device())
      return [this](pstate::OpDescriptor d, std::decay_t<DeviceBody> body)
                 __attribute__((noinline)) { run_device(d, body); }(desc, device_body);
    host_body();
  }
  pstate::DeviceComm &begin_device_op(const pstate::OpDescriptor &desc, uint64_t *tid);
  pstate::DeviceComm &device_comm();
  pstate::DeviceCommOptions device_comm_options();
  // A device operation (tid: its flight-recorder entry, 0 = none) failed / is on the stream.
  void device_op_failed(const pstate::Error &e, const char *call, uint64_t tid = 0);
  void device_op_enqueued(uint64_t tid);

  static constexpr uint32_t kMagic = 0x70677270;  // "pgrp"
  // body(const HostCall &): the operation, numbered and agreed. fold_payload: the data of a call
  // folded into the agreement exchange (desc.detail = its bytes, see can_fold and
  // coll/agreement_exchange.hpp); the body then finds every rank's data in agree_.
  // traced false: no flight-recorder entry of its own (verify_only under PSTATE_CHECK=1: the
  // device operation it checks has the entry, so each device collective is recorded once).
  template <typename Body>
  void run(const pstate::OpDescriptor &desc, Body &&body, const void *fold_payload = nullptr, bool traced = true);
  template <typename Body>
  void run_core(const pstate::OpDescriptor &desc, Body &&body, const void *fold_payload, bool traced);
  template <typename Body>
  void run_p2p(pstate::TraceOp op, int peer, uint64_t count, int dtype, Body &&body);
  template <typename Body>
  void run_p2p_core(pstate::TraceOp op, int peer, uint64_t count, int dtype, Body &&body);
  uint64_t trace_outer_begin(pstate::TraceOp op, int rank);
  void trace_outer_end(uint64_t id, const pstate::Error *e);
  // The call observer (call_observer.hpp): a collective of descriptor d over path, begun at tick
  // t0, returned status. Its cell is its descriptor's kind's (no table), its elements are counted
  // by dtype (bytes at render). The cost is counted in docs/bench/metrics.md: every instruction
  // here is paid by the 8 B all_reduce.
  void observe(const pstate::OpDescriptor &d, pstate::TracePath path, uint64_t t0, int status) const {
    pstate::CallCell &c =
        observed_cells_[(pstate::kObservedKindBase + d.op) * pstate::kObservedPaths + static_cast<uint32_t>(path)];
    pstate::observer_time(c, t0);
    // dtype -1 (none) or a valid one: the API refused any other before the call began
    pstate::observer_add(c.elements[static_cast<ptrdiff_t>(d.dtype) + 1], d.count);
    if (status != PSTATE_OK) [[unlikely]]
      pstate::observer_failed(c, status);
  }
  // A flight-recorder entry for a collective (numbered: it takes the group's next trace seq).
  uint64_t trace_begin(pstate::TraceRecorder &tr, const pstate::OpDescriptor &d, bool numbered);
  void verify_same_op(const pstate::HostCall &call, const pstate::OpDescriptor &desc, const void *fold_payload);
  // verify_same_op found a record unlike desc: throws the error that names the first such rank
  // after this one (returns when this rank itself refused the call: the caller throws its own).
  void report_disagreement(const pstate::OpDescriptor &desc);
  // Whether run() exchanges descriptors before this group's calls (a communicator whose protocol
  // does not agree by itself: UCX; every group under PSTATE_CHECK=1), and whether a call of
  // operation `family` (kAllReduce, kAllGather, kBroadcast, kReduce) rides in that exchange: the
  // communicator folds it, 0 < count * dtype size <= agree::fold_cap(size()).
  bool exchanges() const;
  bool can_fold(pstate::OpKind family, size_t count, pstate_dtype_t dtype) const;
  // A folded all_reduce/reduce: every rank's payload in agree_, reduced into out in the order
  // recursive doubling uses (the same bits on every rank, and as the unfolded path).
  void reduce_folded(void *out, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op);
  // Before a call that the exchange completed returns: a peer that gave up on it (it timed out
  // waiting for this rank, failed and told every rank) makes it fail here too, as the algorithm's
  // wait would have (one call, one verdict: a late rank never returns OK from a call its peers
  // failed, although their records did reach it).
  void check_peers_stayed(const pstate::HostCall &call);
  // The v-collectives on the host communicator (d: make_v_op's; the caller names the counts).
  void host_all_gatherv(const pstate::OpDescriptor &d, const void *send, void *recv, const size_t *counts,
                        size_t total, pstate_dtype_t dtype);
  // A device all_to_all_v under PSTATE_CHECK=1 (else nothing): its counts compared on the host
  // (after begin_device_op's descriptor check), as one more numbered host call of its kind.
  void host_all_to_all_v(const pstate::OpDescriptor &d, const void *send, const size_t *send_counts,
                         const size_t *send_displs, void *recv, const size_t *recv_counts, const size_t *recv_displs,
                         pstate_dtype_t dtype);
  void verify_device_all_to_all_v(const pstate::OpDescriptor &d, const size_t *send_counts,
                                  const size_t *recv_counts);
  void host_reduce_scatterv(const pstate::OpDescriptor &d, const void *send, void *recv, const size_t *counts,
                            size_t total, pstate_dtype_t dtype, pstate_reduce_op_t op);
  void verify_device_p2p(const pstate::OpDescriptor &desc);  // PSTATE_CHECK, device send/recv
  // The host communicator of the group's ranks: shared memory when every rank is on this host
  // (and PSTATE_SHM is not 0), else UCX. The one place that chooses; logs the choice.
  std::unique_ptr<pstate::HostComm> make_host_comm();
  // What the shared-memory communicator's waits check of the context: a peer's failure notice of
  // this group's call; pstate_abort or the interrupt check (pstate_set_interrupt_check).
  void check_notices_in_shm();
  void check_stop_in_shm();
  // A point-to-point call (no sequence number) for the host communicator.
  pstate::HostCall p2p_call(const char *op, uint64_t trace_id = 0,
                            pstate::TracePath path = pstate::TracePath::kNone) const;

  uint32_t magic_ = kMagic;
  pstate::Context &ctx_;
  pstate_group_kind_t kind_;
  std::string name_;
  std::vector<int> ranks_;   // launch ranks, in group order
  std::vector<int> global_;  // the same ranks numbered in the current world
  int rank_in_group_ = -1;
  uint32_t group_id_;
  // The collectives' sequence (begun: the next call's seq) and the calls returned, for failure
  // notices: this rank's go out with its own (Context::fail), a peer's are read against it.
  pstate::CallPosition position_;
  pstate::agree::Table agree_;  // the last agreement exchange's records (reused between calls)
  pstate::Explainer explain_;   // the INFO lines of the choices, shared with the communicators
  std::unique_ptr<pstate::HostComm> comm_;  // until retire()
  pstate::HostComm *network_ = nullptr;      // comm_->network()
  // comm_'s paths for the flight recorder (its own calls; its objects), kept past retire(), whose
  // refused calls are recorded too.
  pstate::TracePath path_ = pstate::TracePath::kLocal, object_path_ = pstate::TracePath::kUcx;
  bool device_ = false;  // a CUDA context: tensors go to the device communicator (fixed for the context)
  std::unique_ptr<pstate::DeviceComm> device_comm_;  // CUDA contexts, after the first device op
  std::unique_ptr<pstate::GroupMemory> memory_;      // after the first pstate_mem_* call (group_mem.cpp)
  pstate::GroupMemory &memory(const char *call);
  int agree_min(int flag);
  void agree_memory_call(pstate::OpKind kind, const char *call, uint64_t bytes, uint64_t allocation);
  void *collective_block(size_t bytes, bool pool, pstate::OpKind kind, const char *call, const pstate::Error *refused);
  bool retired_ = false;
  pstate::DroppedBy dropped_by_ = pstate::DroppedBy::kDestroyModelParallel;
  pstate::TraceGroup *trace_group_ = nullptr;  // this group's record in the context's flight recorder

  // ---- non-blocking point-to-point (group_requests.cpp) ----
  // isend (sending) / irecv into r: the device's or the host's (post_request).
  void request(pstate::RequestState &r, bool sending, void *buf, size_t count, pstate_dtype_t dtype, int peer,
               void *stream);
  // Posts into r on the host communicator (listed by the group while pending).
  void post_request(pstate::RequestState &r, pstate::TraceOp op, void *buf, size_t count, pstate_dtype_t dtype,
                    int peer);
  void finish_request(pstate::RequestState &r, pstate_status_t status, std::string message) noexcept;
  // A request's BEFORE at its post (a refusal throws, after its AFTER); its AFTER is finish_request's.
  void hook_post(pstate::RequestState &r, const char *op, size_t count, pstate_dtype_t dtype, int peer);
  // Pending, in posting order. Not owning: a pending state is owned by its pstate_request_t handle,
  // which only a completing wait/test frees (and that removes it here first), so every state listed
  // is alive; holding no count keeps atomic reference counting off the post/complete path.
  std::vector<pstate::RequestState *> requests_;
  pstate::GroupCallMetrics *metrics_ = nullptr;  // this group name's cells (the context's observer)
  pstate::CallCell *observed_cells_ = nullptr;    // metrics_->cells(): one load less on the call path
  pstate::CallHooks *hooks_ = nullptr;            // the context's hooks (call_hooks.hpp)
  // Whether the context has any hook (Context::refresh_hooked sets it on every live group when a
  // hook is added or removed; a new group reads it): the call path's one load and branch when
  // none is registered. The hooked path asks hooks_->wanted() (nesting) itself.
  bool hooked_ = false;
  mutable const void *hook_send_ = nullptr;       // note_send: the next hooked call's send data
  mutable uint64_t hook_send_bytes_ = 0;
  // Every call's timeout on this rank: the context's, or set_timeout_ms's. Atomic: pstate_group_timeout
  // reads it without entering the context (any thread, a hook); a relaxed load is a plain load.
  std::atomic<int64_t> timeout_ms_{0};
  bool own_timeout_ = false;  // set_timeout_ms gave one
  [[gnu::cold, gnu::noinline]] pstate::Error timeout_named(const pstate::Error &e) const;
};
