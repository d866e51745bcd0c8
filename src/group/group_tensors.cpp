// group_tensors.cpp — the tensor operations src/api/ calls (collectives, send/recv, requests,
// batches, each with its stream): where a group's tensors go is chosen here, once per call in one
// place (tensors(), group.hpp), as SGLang's GroupCoordinator does. In a CUDA context the device
// communicator (NCCL) enqueues the call on the stream (run_device: group_device.cpp); in a CPU
// context the host communicator carries it (run: group.cpp). src/api/ only validates and converts.
//
// The host path also turns the in-place forms the CPU accepts beyond NCCL's into the ones every
// host communicator supports (in a CUDA context src/api/ refuses them): an all_gather's or a
// gather's send == recv on a rank r >= 1, a reduce_scatter's recv == send on r >= 1, a scatter's
// recv == send on a root r >= 1.
#include "group/group.hpp"
#include "reduce/reduce.hpp"

#include <cstring>

using pstate::DeviceComm;
using pstate::OpDescriptor;
using pstate::OpKind;

namespace {

// What PSTATE_CHECK compares for a device operation (the host operations fill the same fields).
OpDescriptor describe(OpKind kind, size_t count, int dtype, int op, int root) {
  return OpDescriptor{static_cast<uint32_t>(kind), 0, count, dtype, op, root, 0};
}

// all_gather / gather with send == recv on a rank r >= 1: send is recv's block 0, which the
// algorithms overwrite with rank 0's data before (shared memory: while) they read send. Copying
// it to recv's block r (disjoint from block 0 when r >= 1) turns the call into the in-place form
// send == recv + r * block that every path supports, at the cost of one local copy and no
// allocation. Returns the send pointer to use.
const void *own_block_in_place(const void *send, void *recv, int r, size_t block_bytes) {
  if (send != recv || r == 0 || block_bytes == 0) return send;
  uint8_t *own = static_cast<uint8_t *>(recv) + static_cast<size_t>(r) * block_bytes;
  std::memcpy(own, send, block_bytes);
  return own;
}

}  // namespace

void pstate_group_s::all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                                void *stream) {
  // The host path first, before anything of the device path is built (the compiler builds
  // tensors()'s descriptor and closures before its branch: ~25 instructions of the 8 B call).
  if (!on_device()) [[likely]]
    return all_reduce(send, recv, count, dtype, op);
  tensors(
      describe(OpKind::kAllReduce, count, dtype, op, -1),
      [&](DeviceComm &d) {
        const size_t bytes = count * pstate::dtype_size(dtype);
        note_device_call(send, bytes, recv, bytes, "pstate_all_reduce");
        d.all_reduce(send, recv, count, dtype, op, stream);
      },
      [&] { all_reduce(send, recv, count, dtype, op); });
}

void pstate_group_s::all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, void *stream) {
  const size_t block = send_count * pstate::dtype_size(dtype);
  tensors(
      describe(OpKind::kAllGather, send_count, dtype, -1, -1),
      [&](DeviceComm &d) {
        note_device_call(send, block, recv, block * static_cast<size_t>(size()), "pstate_all_gather");
        d.all_gather(send, recv, send_count, dtype, stream);
      },
      [&] { all_gather(own_block_in_place(send, recv, rank_in_group_, block), recv, send_count, dtype); });
}

void pstate_group_s::reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                                    pstate_reduce_op_t op, void *stream) {
  const size_t block = recv_count * pstate::dtype_size(dtype);
  tensors(
      describe(OpKind::kReduceScatter, recv_count, dtype, op, -1),
      [&](DeviceComm &d) {
        note_device_call(send, block * static_cast<size_t>(size()), recv, block, "pstate_reduce_scatter");
        d.reduce_scatter(send, recv, recv_count, dtype, op, stream);
      },
      [&] {
        // recv == send on a rank r >= 1: block 0 of this rank's send is still being read by the
        // others while the result would land on it (shared memory reads it in place). Reduce into
        // block r instead (the in-place form: only this rank reads it) and move the result to the
        // front, which is what the caller asked for; block r of the buffer is scratch then.
        if (recv != send || rank_in_group_ == 0 || block == 0) return reduce_scatter(send, recv, recv_count, dtype, op);
        uint8_t *own = static_cast<uint8_t *>(recv) + static_cast<size_t>(rank_in_group_) * block;
        reduce_scatter(send, own, recv_count, dtype, op);
        std::memcpy(recv, own, block);
      });
}

void pstate_group_s::broadcast(void *buf, size_t count, pstate_dtype_t dtype, int root, void *stream) {
  tensors(
      describe(OpKind::kBroadcast, count, dtype, -1, root),
      [&](DeviceComm &d) { d.broadcast(buf, count, dtype, root, stream); },
      [&] { broadcast(buf, count, dtype, root); });
}

void pstate_group_s::gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int root,
                            void *stream) {
  tensors(
      describe(OpKind::kGather, send_count, dtype, -1, root),
      [&](DeviceComm &d) { d.gather(send, recv, send_count, dtype, root, stream); },
      [&] {
        const size_t block = send_count * pstate::dtype_size(dtype);
        gather(rank_in_group_ == root ? own_block_in_place(send, recv, root, block) : send, recv, send_count, dtype,
               root);
      });
}

void pstate_group_s::all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype,
                                void *stream) {
  tensors(
      describe(OpKind::kAllToAll, count_per_rank, dtype, -1, -1),
      [&](DeviceComm &d) { d.all_to_all(send, recv, count_per_rank, dtype, stream); },
      [&] { all_to_all(send, recv, count_per_rank, dtype); });
}

void pstate_group_s::reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                            int root, void *stream) {
  tensors(
      describe(OpKind::kReduce, count, dtype, op, root),
      [&](DeviceComm &d) { d.reduce(send, recv, count, dtype, op, root, stream); },
      [&] { reduce(send, recv, count, dtype, op, root); });
}

void pstate_group_s::scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root,
                             void *stream) {
  // On the host, recv == send on a root r >= 1: recv's front is block 0 of send, which still has
  // to reach rank 0. Scatter into block r (the in-place form: nothing is copied for the root) and
  // move it to the front once the call has returned, when every block has left.
  const size_t block = recv_count * pstate::dtype_size(dtype);
  const bool via_own = rank_in_group_ == root && recv == send && root != 0 && block != 0;
  uint8_t *own = static_cast<uint8_t *>(recv) + (via_own ? static_cast<size_t>(root) * block : 0);
  tensors(
      describe(OpKind::kScatter, recv_count, dtype, -1, root),
      [&](DeviceComm &d) { d.scatter(send, recv, recv_count, dtype, root, stream); },
      [&] {
        scatter(send, own, recv_count, dtype, root);
        if (via_own) std::memcpy(recv, own, block);
      });
}

// The variable-size collectives: the descriptor every path compares carries the total of counts
// and a hash of the array (make_v_op), so ranks that pass different arrays get MISMATCH (host:
// always; CUDA: under PSTATE_CHECK=1, like every device collective), whose message gets this
// rank's counts array appended.
void pstate_group_s::all_gatherv(const void *send, void *recv, const size_t *counts, size_t total, pstate_dtype_t dtype,
                                 void *stream) {
  const OpDescriptor d = pstate::make_v_op(OpKind::kAllGatherV, counts, ranks_.size(), total, dtype);
  naming_counts_on_mismatch(counts, [&] {
    tensors(
        d, [&](DeviceComm &dc) { dc.all_gatherv(send, recv, counts, dtype, stream); },
        [&] { host_all_gatherv(d, send, recv, counts, total, dtype); });
  });
}

void pstate_group_s::reduce_scatterv(const void *send, void *recv, const size_t *counts, size_t total,
                                     pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  const OpDescriptor d = pstate::make_v_op(OpKind::kReduceScatterV, counts, ranks_.size(), total, dtype, op);
  naming_counts_on_mismatch(counts, [&] {
    tensors(
        d, [&](DeviceComm &dc) { dc.reduce_scatterv(send, recv, counts, dtype, op, stream); },
        [&] { host_reduce_scatterv(d, send, recv, counts, total, dtype, op); });
  });
}

// all_to_all_v: the descriptor (kind, dtype; count 0) is alike on every rank, the counts are
// compared by their own exchange (HostComm::agree_all_to_all_v_counts): on the host always, in a
// CUDA context under PSTATE_CHECK=1.
void pstate_group_s::all_to_all_v(const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                                  const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype,
                                  void *stream) {
  const OpDescriptor d = describe(OpKind::kAllToAllV, 0, dtype, -1, -1);
  tensors(
      d,
      [&](DeviceComm &dc) {
        verify_device_all_to_all_v(d, send_counts, recv_counts);  // PSTATE_CHECK=1 only
        dc.all_to_all_v(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype, stream);
      },
      [&] { host_all_to_all_v(d, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype); });
}

// Point-to-point: the device communicator of a group of more than two ranks must exist already
// (require_p2p_ready); PSTATE_CHECK compares no point-to-point call, on the host as on the device.
void pstate_group_s::send(const void *buf, size_t count, pstate_dtype_t dtype, int dst, void *stream) {
  require_p2p_ready("pstate_send");
  tensors(
      describe(OpKind::kSend, count, dtype, -1, dst), [&](DeviceComm &d) { d.send(buf, count, dtype, dst, stream); },
      [&] { send(buf, count, dtype, dst); });
}

void pstate_group_s::recv(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream) {
  require_p2p_ready("pstate_recv");
  tensors(
      describe(OpKind::kRecv, count, dtype, -1, src), [&](DeviceComm &d) { d.recv(buf, count, dtype, src, stream); },
      [&] { recv(buf, count, dtype, src); });
}

// A device request is complete once its transfer is on the stream (torch's Work on NCCL: the
// stream orders the rest); a host one is pending until pstate_wait / pstate_test.
void pstate_group_s::isend(pstate::RequestState &r, const void *buf, size_t count, pstate_dtype_t dtype, int dst,
                           void *stream) {
  request(r, true, const_cast<void *>(buf), count, dtype, dst, stream);
}

void pstate_group_s::irecv(pstate::RequestState &r, void *buf, size_t count, pstate_dtype_t dtype, int src,
                           void *stream) {
  request(r, false, buf, count, dtype, src, stream);
}

void pstate_group_s::request(pstate::RequestState &r, bool sending, void *buf, size_t count, pstate_dtype_t dtype,
                             int peer, void *stream) {
  tensors(
      describe(sending ? OpKind::kSend : OpKind::kRecv, count, dtype, -1, peer),
      [&](DeviceComm &d) {
        r.pending = false;
        if (sending) return d.send(buf, count, dtype, peer, stream);
        d.recv(buf, count, dtype, peer, stream);
      },
      [&] { post_request(r, sending ? pstate::TraceOp::kSend : pstate::TraceOp::kRecv, buf, count, dtype, peer); });
}

void pstate_group_s::p2p_batch(const pstate_p2p_op_t *ops, size_t n, void *stream) {
  require_p2p_ready("pstate_p2p_batch");
  auto body = [&] {
    if (on_device()) return p2p_batch_device(ops, n, stream);  // one NCCL group, recorded per op
    p2p_batch(ops, n);
  };
  if (hooked_ && hooks_->wanted()) [[unlikely]] {
    // One call to the hooks: count and dtype the ops' when they share one dtype, else dtype -1
    // and count in bytes; no peer; no send data (the NaN check reads one buffer). Refused locally.
    int dtype = n > 0 ? static_cast<int>(ops[0].dtype) : -1;
    uint64_t elements = 0, bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      elements += ops[i].count;
      bytes += ops[i].count * pstate::dtype_size(ops[i].dtype);
      if (static_cast<int>(ops[i].dtype) != dtype) dtype = -1;
    }
    hook_send_ = nullptr;
    HookedCall h = hook_begin("p2p_batch", UINT64_MAX, dtype < 0 ? bytes : elements, dtype, -1, -1,
                              on_device() ? pstate::TracePath::kNccl : path_, on_device());
    hooked(h, [&] {
      if (h.refusal.hook != 0) throw hook_refusal(h);
      body();
    });
    return;
  }
  body();
}
