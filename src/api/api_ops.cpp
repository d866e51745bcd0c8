// api_ops.cpp — the C entry points of collectives, point-to-point, object operations, the TP
// shortcuts of communication_op.py and graph capture: validate arguments, then call the group.
//
// Where a tensor goes depends on the context, as in SGLang's GroupCoordinator: in a CUDA
// context to the group's device communicator (NCCL, enqueued on the stream; it checks that the
// buffers are device memory of the context's device), in a CPU context to the CPU
// communicator (after checking that no buffer is CUDA device memory, which costs nothing while
// the process has not loaded CUDA). Object operations always use the CPU communicator.
//
// Argument checks of a collective run inside check_together: a refusal that only this rank can
// see (a root's recv or send, its own NULL, overlapping or device buffer, its own count, dtype or
// stream) takes part in the call's agreement, so the other ranks fail with it instead of pairing
// the call with this rank's next one (and returning its data with PSTATE_OK).
#include "api/boundary.hpp"
#include "api/handles.hpp"

#include <cstdlib>
#include <cstring>

using namespace pstate::api;
using pstate::DeviceComm;
using pstate::OpDescriptor;
using pstate::OpKind;

namespace {

// The argument checks every tensor collective shares (after its group and context entry).
void check_op(const pstate_group_t *g, pstate_dtype_t dtype, void *stream) {
  require_dtype(dtype);
  require_cpu_stream(g, stream);
}

const uint8_t *at(const void *p, size_t offset) { return static_cast<const uint8_t *>(p) + offset; }

// all_gather / gather with send == recv on a rank r >= 1: send is recv's block 0, which the
// algorithms overwrite with rank 0's data before (shared memory: while) they read send. Copying
// it to recv's block r (disjoint from block 0 when r >= 1) turns the call into the in-place form
// send == recv + r * block that every path supports, at the cost of one local copy and no
// allocation. Returns the send pointer to use. CUDA contexts keep NCCL's in-place forms only
// (the caller refuses send == recv there).
const void *own_block_in_place(const void *send, void *recv, int r, size_t block_bytes) {
  if (send != recv || r == 0 || block_bytes == 0) return send;
  uint8_t *own = static_cast<uint8_t *>(recv) + static_cast<size_t>(r) * block_bytes;
  std::memcpy(own, send, block_bytes);
  return own;
}

// What PSTATE_CHECK compares for a device operation (the CPU operations fill the same fields).
OpDescriptor describe(OpKind kind, size_t count, int dtype, int op, int root) {
  return OpDescriptor{static_cast<uint32_t>(kind), 0, count, dtype, op, root, 0};
}

// A buffer the CPU communicator will read or write must not be CUDA device memory.
void require_host(pstate_group_t *g, const void *p, const char *name, const char *op) {
  g->context().require_host_memory(p, name, g->name().c_str(), op);
}
void require_host(pstate_group_t *g, const void *send, const void *recv, const char *op) {
  g->context().require_host_memory(send, "send", recv, "recv", g->name().c_str(), op);
}

// A buffer the device communicator will read or write, checked before the call's exchange under
// PSTATE_CHECK=1, where device refusals reach the peers (check_together): one rank's host or
// other-device buffer then fails every rank, instead of the others' NCCL call waiting on their
// streams for a rank that refused it. Without PSTATE_CHECK the device communicator checks it
// (once, locally) as before.
void require_device(pstate_group_t *g, const void *p, size_t bytes, const char *name, const char *call) {
  if (bytes == 0 || !g->context().check_enabled()) return;
  g->context().device_context()->require_device_pointer(p, name, pstate::cat(g->name(), ": ", call));
}

// Copies bytes into a pstate_bytes_t the caller frees with pstate_bytes_free.
void export_bytes(const pstate::Bytes &in, pstate_bytes_t *out) {
  out->data = nullptr;
  out->size = 0;
  if (in.empty()) return;
  void *p = std::malloc(in.size());
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, in.data(), in.size());
  out->data = p;
  out->size = in.size();
}

// The counts array of a v-collective: one element count per group rank, whose sum (and that
// sum's bytes) must fit; checked the same way on every rank before any message, so a bad array
// fails the call everywhere alike. total: the sum; offset: the elements before this rank's part.
struct VarCounts {
  size_t total = 0, offset = 0, mine = 0;
};
VarCounts require_counts(const pstate_group_t *g, const size_t *counts, pstate_dtype_t dtype, const char *call) {
  if (counts == nullptr)
    pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "counts is NULL: ", call, " on group ", g->name(),
                        " needs one element count per group rank (", g->size(),
                        " entries, counts[i] = group rank i's part; zeros are fine)");
  VarCounts v;
  for (int i = 0; i < g->size(); ++i) {
    const size_t c = counts[static_cast<size_t>(i)];
    if (i == g->rank_in_group()) {
      v.offset = v.total;
      v.mine = c;
    }
    if (__builtin_add_overflow(v.total, c, &v.total))
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "counts: counts[0] + ... + counts[", i,
                          "] overflows size_t (counts[", i, "] = ", c, ") on group ", g->name(),
                          ": counts are element counts, one per group rank; is one a negative length cast to size_t?");
  }
  require_fits(v.total, dtype, 1, "counts (their sum)");
  return v;
}

pstate_group_t *tp_group(pstate_t *ps, const char *call) {
  require_context(ps);
  ContextEntry entry(*ps, call);
  return ps->group(PSTATE_GROUP_TP);
}

}  // namespace

extern "C" {

PSTATE_API pstate_status_t pstate_all_reduce(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_reduce");
    ContextEntry entry(g->context(), "pstate_all_reduce");
    size_t bytes = 0;
    check_together(g, OpKind::kAllReduce, -1, count, [&] {
      check_op(g, dtype, stream);
      require_op(op);
      bytes = require_buffer(send, count, dtype, 1, "send");
      require_present(recv, bytes, count, "recv");
      require_disjoint(g, "pstate_all_reduce", send, bytes, recv, bytes, send == recv, "send == recv");
      if (g->on_device()) {
        require_device(g, send, bytes, "send", "pstate_all_reduce");
        return require_device(g, recv, bytes, "recv", "pstate_all_reduce");
      }
      require_reducible(dtype, op);
      require_host(g, send, recv, "all_reduce");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kAllReduce, count, dtype, op, -1),
                           [&](DeviceComm &d) {
                             g->note_device_call(send, bytes, recv, bytes, "pstate_all_reduce");
                             d.all_reduce(send, recv, count, dtype, op, stream);
                           });
    g->all_reduce(send, recv, count, dtype, op);
  });
}

PSTATE_API pstate_status_t pstate_all_gather(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_gather");
    ContextEntry entry(g->context(), "pstate_all_gather");
    const int r = g->rank_in_group();
    size_t block = 0, total = 0;
    check_together(g, OpKind::kAllGather, -1, count, [&] {
      check_op(g, dtype, stream);
      block = require_buffer(send, count, dtype, 1, "send");
      total = require_buffer(recv, count, dtype, static_cast<size_t>(g->size()), "recv");
      const bool nccl_in_place = send == at(recv, static_cast<size_t>(r) * block);
      if (g->on_device()) {
        require_device(g, send, block, "send", "pstate_all_gather");
        require_device(g, recv, total, "recv", "pstate_all_gather");
        return require_disjoint(g, "pstate_all_gather", send, block, recv, total, nccl_in_place,
                                "send == recv + rank_in_group * count (NCCL's; in a CUDA context send == recv works "
                                "on rank_in_group 0 only)");
      }
      require_disjoint(g, "pstate_all_gather", send, block, recv, total, nccl_in_place || send == recv,
                       "send == recv + rank_in_group * count, or send == recv");
      require_host(g, send, recv, "all_gather");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kAllGather, count, dtype, -1, -1),
                           [&](DeviceComm &d) {
                             g->note_device_call(send, block, recv, total, "pstate_all_gather");
                             d.all_gather(send, recv, count, dtype, stream);
                           });
    g->all_gather(own_block_in_place(send, recv, r, block), recv, count, dtype);
  });
}
PSTATE_API pstate_status_t pstate_reduce_scatter(pstate_group_t *g, const void *send, void *recv, size_t count,
                                                 pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_reduce_scatter");
    ContextEntry entry(g->context(), "pstate_reduce_scatter");
    const int r = g->rank_in_group();
    size_t total = 0, block = 0;
    check_together(g, OpKind::kReduceScatter, -1, count, [&] {
      check_op(g, dtype, stream);
      require_op(op);
      total = require_buffer(send, count, dtype, static_cast<size_t>(g->size()), "send");
      block = require_buffer(recv, count, dtype, 1, "recv");
      const bool nccl_in_place = recv == at(send, static_cast<size_t>(r) * block);
      if (g->on_device()) {
        require_device(g, send, total, "send", "pstate_reduce_scatter");
        require_device(g, recv, block, "recv", "pstate_reduce_scatter");
        return require_disjoint(g, "pstate_reduce_scatter", send, total, recv, block, nccl_in_place,
                                "recv == send + rank_in_group * count (NCCL's; in a CUDA context recv == send works "
                                "on rank_in_group 0 only)");
      }
      require_disjoint(g, "pstate_reduce_scatter", send, total, recv, block, nccl_in_place || recv == send,
                       "recv == send + rank_in_group * count, or recv == send");
      require_reducible(dtype, op);
      require_host(g, send, recv, "reduce_scatter");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kReduceScatter, count, dtype, op, -1),
                           [&](DeviceComm &d) {
                             g->note_device_call(send, total, recv, block, "pstate_reduce_scatter");
                             d.reduce_scatter(send, recv, count, dtype, op, stream);
                           });
    // recv == send on a rank r >= 1: block 0 of this rank's send is still being read by the
    // others while the result would land on it (shared memory reads it in place). Reduce into
    // block r instead (the in-place form: only this rank reads it) and move the result to the
    // front, which is what the caller asked for; block r of the buffer is scratch then.
    if (recv == send && r != 0 && block != 0) {
      uint8_t *own = static_cast<uint8_t *>(recv) + static_cast<size_t>(r) * block;
      g->reduce_scatter(send, own, count, dtype, op);
      std::memcpy(recv, own, block);
      return;
    }
    g->reduce_scatter(send, recv, count, dtype, op);
  });
}

PSTATE_API pstate_status_t pstate_broadcast(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int root,
                                            void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_broadcast");
    ContextEntry entry(g->context(), "pstate_broadcast");
    check_together(g, OpKind::kBroadcast, root, count, [&] {
      check_op(g, dtype, stream);
      require_rank(g, root, "root");
      const size_t bytes = require_buffer(buf, count, dtype, 1, "buf");
      if (g->on_device()) return require_device(g, buf, bytes, "buf", "pstate_broadcast");
      require_host(g, buf, "buf", "broadcast");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kBroadcast, count, dtype, -1, root),
                           [&](DeviceComm &d) { d.broadcast(buf, count, dtype, root, stream); });
    g->broadcast(buf, count, dtype, root);
  });
}

// gather: recv matters on root only, but its size (world_size * count) is checked on every
// rank, so a count whose gather cannot exist fails everywhere alike; the root's own checks of
// recv (NULL, overlap, device memory) reach the others through check_together.
PSTATE_API pstate_status_t pstate_gather(pstate_group_t *g, const void *send, void *recv, size_t count,
                                         pstate_dtype_t dtype, int root, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_gather");
    ContextEntry entry(g->context(), "pstate_gather");
    const bool is_root = g->rank_in_group() == root;
    size_t block = 0;
    check_together(g, OpKind::kGather, root, count, [&] {
      check_op(g, dtype, stream);
      require_rank(g, root, "root");
      block = require_buffer(send, count, dtype, 1, "send");
      const size_t total = require_fits(count, dtype, static_cast<size_t>(g->size()), "recv");
      if (g->on_device()) require_device(g, send, block, "send", "pstate_gather");
      else require_host(g, send, "send", "gather");
      if (!is_root) return;
      require_buffer(recv, count, dtype, static_cast<size_t>(g->size()), "recv");
      const bool nccl_in_place = send == at(recv, static_cast<size_t>(root) * block);
      if (g->on_device()) {
        require_device(g, recv, total, "recv", "pstate_gather");
        return require_disjoint(g, "pstate_gather", send, block, recv, total, nccl_in_place,
                                "send == recv + root * count on root (in a CUDA context send == recv works for root "
                                "0 only)");
      }
      require_disjoint(g, "pstate_gather", send, block, recv, total, nccl_in_place || send == recv,
                       "send == recv + root * count on root, or send == recv");
      require_host(g, recv, "recv", "gather");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kGather, count, dtype, -1, root),
                           [&](DeviceComm &d) { d.gather(send, recv, count, dtype, root, stream); });
    if (is_root) send = own_block_in_place(send, recv, root, block);
    g->gather(send, recv, count, dtype, root);
  });
}

PSTATE_API pstate_status_t pstate_all_to_all(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_to_all");
    ContextEntry entry(g->context(), "pstate_all_to_all");
    check_together(g, OpKind::kAllToAll, -1, count, [&] {
      check_op(g, dtype, stream);
      const size_t total = require_buffer(send, count, dtype, static_cast<size_t>(g->size()), "send");
      require_buffer(recv, count, dtype, static_cast<size_t>(g->size()), "recv");
      if (g->on_device()) {  // NCCL has no in-place all_to_all: the device communicator refuses send == recv too.
        require_device(g, send, total, "send", "pstate_all_to_all");
        require_device(g, recv, total, "recv", "pstate_all_to_all");
        return require_disjoint(g, "pstate_all_to_all", send, total, recv, total, send == recv,
                                "none in a CUDA context (send == recv is refused too)");
      }
      require_disjoint(g, "pstate_all_to_all", send, total, recv, total, send == recv, "send == recv");
      require_host(g, send, recv, "all_to_all");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kAllToAll, count, dtype, -1, -1),
                           [&](DeviceComm &d) { d.all_to_all(send, recv, count, dtype, stream); });
    g->all_to_all(send, recv, count, dtype);
  });
}

// reduce: recv matters on root only. The other ranks' recv is neither checked nor passed on
// (the group and the device get NULL there), so it is never written, whatever the caller gave.
// The root's checks of recv reach the others through check_together.
PSTATE_API pstate_status_t pstate_reduce(pstate_group_t *g, const void *send, void *recv, size_t count,
                                         pstate_dtype_t dtype, pstate_reduce_op_t op, int root, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_reduce");
    ContextEntry entry(g->context(), "pstate_reduce");
    const bool is_root = g->rank_in_group() == root;
    void *out = is_root ? recv : nullptr;
    check_together(g, OpKind::kReduce, root, count, [&] {
      check_op(g, dtype, stream);
      require_op(op);
      require_rank(g, root, "root");
      const size_t bytes = require_buffer(send, count, dtype, 1, "send");
      if (is_root) {
        require_present(recv, bytes, count, "recv");
        require_disjoint(g, "pstate_reduce", send, bytes, recv, bytes, send == recv, "send == recv on root");
      }
      if (g->on_device()) {
        require_device(g, send, bytes, "send", "pstate_reduce");
        return require_device(g, is_root ? recv : nullptr, is_root ? bytes : 0, "recv", "pstate_reduce");
      }
      require_reducible(dtype, op);
      require_host(g, send, "send", "reduce");
      if (is_root) require_host(g, recv, "recv", "reduce");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kReduce, count, dtype, op, root),
                           [&](DeviceComm &d) { d.reduce(send, out, count, dtype, op, root, stream); });
    g->reduce(send, out, count, dtype, op, root);
  });
}

// scatter: send matters on root only, but its size (world_size * count) is checked on
// every rank, as gather's recv is, so a count no root could send fails the call everywhere
// alike; the root's checks of send reach the others through check_together.
PSTATE_API pstate_status_t pstate_scatter(pstate_group_t *g, const void *send, void *recv, size_t count,
                                          pstate_dtype_t dtype, int root, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_scatter");
    ContextEntry entry(g->context(), "pstate_scatter");
    const bool is_root = g->rank_in_group() == root;
    const void *in = is_root ? send : nullptr;
    size_t block = 0;
    check_together(g, OpKind::kScatter, root, count, [&] {
      check_op(g, dtype, stream);
      require_rank(g, root, "root");
      const size_t total = require_fits(count, dtype, static_cast<size_t>(g->size()), "send");
      block = require_buffer(recv, count, dtype, 1, "recv");
      if (g->on_device()) require_device(g, recv, block, "recv", "pstate_scatter");
      else require_host(g, recv, "recv", "scatter");
      if (!is_root) return;
      require_present(send, total, count, "send");
      const bool nccl_in_place = recv == at(send, static_cast<size_t>(root) * block);
      if (g->on_device()) {
        require_device(g, send, total, "send", "pstate_scatter");
        return require_disjoint(g, "pstate_scatter", send, total, recv, block, nccl_in_place,
                                "recv == send + root * count on root (in a CUDA context recv == send works for root 0 "
                                "only)");
      }
      require_disjoint(g, "pstate_scatter", send, total, recv, block, nccl_in_place || recv == send,
                       "recv == send + root * count on root, or recv == send");
      require_host(g, send, "send", "scatter");
    });
    if (g->on_device())
      return g->run_device(describe(OpKind::kScatter, count, dtype, -1, root),
                           [&](DeviceComm &d) { d.scatter(in, recv, count, dtype, root, stream); });
    // recv == send on a root r >= 1: recv's front is block 0 of send, which still has to
    // reach rank 0. Scatter into block r (the in-place form: nothing is copied for the root)
    // and move it to the front once the call has returned, when every block has left.
    if (is_root && recv == send && root != 0 && block != 0) {
      uint8_t *own = static_cast<uint8_t *>(recv) + static_cast<size_t>(root) * block;
      g->scatter(send, own, count, dtype, root);
      std::memcpy(recv, own, block);
      return;
    }
    g->scatter(in, recv, count, dtype, root);
  });
}

// The variable-size collectives. The descriptor every path compares carries the total of counts
// and a hash of the array (make_v_op), so ranks that pass different arrays get MISMATCH (CPU:
// always; CUDA: under PSTATE_CHECK=1, like every device collective).
PSTATE_API pstate_status_t pstate_all_gatherv(pstate_group_t *g, const void *send, void *recv, const size_t *counts,
                                              pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_gatherv");
    ContextEntry entry(g->context(), "pstate_all_gatherv");
    VarCounts v;
    check_together(g, OpKind::kAllGatherV, -1, 0, [&] {
      check_op(g, dtype, stream);
      v = require_counts(g, counts, dtype, "pstate_all_gatherv");
      const size_t part = require_buffer(send, v.mine, dtype, 1, "send");
      const size_t total = require_buffer(recv, v.total, dtype, 1, "recv");
      const bool in_place = recv != nullptr && send == at(recv, v.offset * element_size(dtype));
      require_disjoint(g, "pstate_all_gatherv", send, part, recv, total, in_place,
                       "send == recv + (counts[0] + ... + counts[rank_in_group - 1]) elements (this rank's part of "
                       "recv)");
      if (g->on_device()) {
        require_device(g, send, part, "send", "pstate_all_gatherv");
        return require_device(g, recv, total, "recv", "pstate_all_gatherv");
      }
      require_host(g, send, recv, "all_gatherv");
    });
    if (g->on_device())
      return g->naming_counts_on_mismatch(counts, [&] {
        g->run_device(pstate::make_v_op(OpKind::kAllGatherV, counts, static_cast<size_t>(g->size()), v.total, dtype),
                      [&](DeviceComm &d) { d.all_gatherv(send, recv, counts, dtype, stream); });
      });
    g->all_gatherv(send, recv, counts, v.total, dtype);
  });
}

PSTATE_API pstate_status_t pstate_reduce_scatterv(pstate_group_t *g, const void *send, void *recv, const size_t *counts,
                                                  pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_reduce_scatterv");
    ContextEntry entry(g->context(), "pstate_reduce_scatterv");
    VarCounts v;
    check_together(g, OpKind::kReduceScatterV, -1, 0, [&] {
      check_op(g, dtype, stream);
      require_op(op);
      v = require_counts(g, counts, dtype, "pstate_reduce_scatterv");
      const size_t total = require_buffer(send, v.total, dtype, 1, "send");
      const size_t part = require_buffer(recv, v.mine, dtype, 1, "recv");
      const bool in_place = send != nullptr && recv == at(send, v.offset * element_size(dtype));
      require_disjoint(g, "pstate_reduce_scatterv", send, total, recv, part, in_place,
                       "recv == send + (counts[0] + ... + counts[rank_in_group - 1]) elements (this rank's part of "
                       "send)");
      if (g->on_device()) {
        require_device(g, send, total, "send", "pstate_reduce_scatterv");
        return require_device(g, recv, part, "recv", "pstate_reduce_scatterv");
      }
      require_reducible(dtype, op);
      require_host(g, send, recv, "reduce_scatterv");
    });
    if (g->on_device())
      return g->naming_counts_on_mismatch(counts, [&] {
        g->run_device(
            pstate::make_v_op(OpKind::kReduceScatterV, counts, static_cast<size_t>(g->size()), v.total, dtype, op),
            [&](DeviceComm &d) { d.reduce_scatterv(send, recv, counts, dtype, op, stream); });
      });
    g->reduce_scatterv(send, recv, counts, v.total, dtype, op);
  });
}

// Point-to-point is not verified under PSTATE_CHECK (it compares collectives only), on the CPU
// as on the device.
PSTATE_API pstate_status_t pstate_send(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype, int peer,
                                       void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_send");
    check_op(g, dtype, stream);
    ContextEntry entry(g->context(), "pstate_send");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(), "peer is this rank: pstate_send needs another rank of the group");
    require_buffer(buf, count, dtype, 1, "buf");
    if (g->on_device()) {
      g->require_device_p2p_ready("pstate_send");
      return g->run_device(describe(OpKind::kSend, count, dtype, -1, peer),
                           [&](DeviceComm &d) { d.send(buf, count, dtype, peer, stream); });
    }
    require_host(g, buf, "buf", "send");
    g->send(buf, count, dtype, peer);
  });
}

PSTATE_API pstate_status_t pstate_recv(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int peer,
                                       void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_recv");
    check_op(g, dtype, stream);
    ContextEntry entry(g->context(), "pstate_recv");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(), "peer is this rank: pstate_recv needs another rank of the group");
    require_buffer(buf, count, dtype, 1, "buf");
    if (g->on_device()) {
      g->require_device_p2p_ready("pstate_recv");
      return g->run_device(describe(OpKind::kRecv, count, dtype, -1, peer),
                           [&](DeviceComm &d) { d.recv(buf, count, dtype, peer, stream); });
    }
    require_host(g, buf, "buf", "recv");
    g->recv(buf, count, dtype, peer);
  });
}

PSTATE_API pstate_status_t pstate_barrier(pstate_group_t *g) {
  return PSTATE_GUARD({
    require_group(g, "pstate_barrier");
    ContextEntry entry(g->context(), "pstate_barrier");
    g->barrier();  // the CPU communicator in every context (SGLang: cpu_group barrier)
  });
}

PSTATE_API pstate_status_t pstate_tp_allreduce(pstate_t *ps, void *buf, size_t count, pstate_dtype_t dtype,
                                               pstate_reduce_op_t op, void *stream) {
  pstate_group_t *g = nullptr;
  pstate_status_t s = PSTATE_GUARD({ g = tp_group(ps, "pstate_tp_allreduce"); });
  return s != PSTATE_OK ? s : pstate_all_reduce(g, buf, buf, count, dtype, op, stream);
}

PSTATE_API pstate_status_t pstate_tp_allgather(pstate_t *ps, const void *send, void *recv, size_t count,
                                               pstate_dtype_t dtype, void *stream) {
  pstate_group_t *g = nullptr;
  pstate_status_t s = PSTATE_GUARD({ g = tp_group(ps, "pstate_tp_allgather"); });
  return s != PSTATE_OK ? s : pstate_all_gather(g, send, recv, count, dtype, stream);
}

// Objects start on the CPU communicator in every context, so every refusal reaches the peers:
// the source's data or size, another rank's out.
PSTATE_API pstate_status_t pstate_broadcast_object(pstate_group_t *g, const void *data, size_t size, int root,
                                                   pstate_bytes_t *out) {
  if (out != nullptr) *out = pstate_bytes_t{nullptr, 0};
  return PSTATE_GUARD({
    require_group(g, "pstate_broadcast_object");
    ContextEntry entry(g->context(), "pstate_broadcast_object");
    const bool is_root = g->rank_in_group() == root;
    check_together(
        g, OpKind::kBroadcastObject, root, size,
        [&] {
          require_rank(g, root, "root");
          if (!is_root) return require_nonnull(out, "out");
          require(data != nullptr || size == 0, "data is NULL with size > 0");
          require_fits(size, PSTATE_UINT8, 1, "size");
        },
        true);
    pstate::Bytes got = g->broadcast_object(data, size, root);
    if (out != nullptr) export_bytes(got, out);
  });
}

// sizes is a returned array (*count = the group size); a too-small capacity is refused like a bad
// size, inside the call's agreement, so the other ranks fail at once instead of waiting.
PSTATE_API pstate_status_t pstate_all_gather_object(pstate_group_t *g, const void *data, size_t size,
                                                    pstate_bytes_t *out, size_t *sizes, size_t capacity,
                                                    size_t *count) {
  if (out != nullptr) *out = pstate_bytes_t{nullptr, 0};
  if (count != nullptr) *count = 0;
  return PSTATE_GUARD({
    require_group(g, "pstate_all_gather_object");
    ContextEntry entry(g->context(), "pstate_all_gather_object");
    const size_t n = static_cast<size_t>(g->size());
    check_together(
        g, OpKind::kAllGatherObject, -1, size,
        [&] {
          require_nonnull(out, "out");
          require_nonnull(count, "count");
          require(data != nullptr || size == 0, "data is NULL with size > 0");
          require_fits(size, PSTATE_UINT8, 1, "size");
          require_capacity(sizes, capacity, count, n, "sizes", pstate::cat("group ", g->name(), "'s size"));
        },
        true);  // *count says n on a small capacity
    *count = 0;  // until the call succeeds: another rank's refusal is not this rank's capacity
    std::vector<size_t> got_sizes;
    pstate::Bytes got = g->all_gather_object(data, size, &got_sizes);
    export_bytes(got, out);
    std::memcpy(sizes, got_sizes.data(), got_sizes.size() * sizeof(size_t));
    *count = n;
  });
}

PSTATE_API pstate_status_t pstate_send_object(pstate_group_t *g, const void *data, size_t size, int peer) {
  return PSTATE_GUARD({
    require_group(g, "pstate_send_object");
    ContextEntry entry(g->context(), "pstate_send_object");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(), "peer is this rank: pstate_send_object needs another rank of the group");
    require(data != nullptr || size == 0, "data is NULL with size > 0");
    require_fits(size, PSTATE_UINT8, 1, "size");
    g->send_object(data, size, peer);
  });
}

PSTATE_API pstate_status_t pstate_recv_object(pstate_group_t *g, int peer, pstate_bytes_t *out) {
  if (out != nullptr) *out = pstate_bytes_t{nullptr, 0};
  return PSTATE_GUARD({
    require_group(g, "pstate_recv_object");
    ContextEntry entry(g->context(), "pstate_recv_object");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(), "peer is this rank: pstate_recv_object needs another rank of the group");
    require_nonnull(out, "out");
    export_bytes(g->recv_object(peer), out);
  });
}

PSTATE_API void pstate_bytes_free(pstate_bytes_t *b) {
  if (b == nullptr) return;
  std::free(b->data);
  b->data = nullptr;
  b->size = 0;
}

PSTATE_API pstate_status_t pstate_graph_capture_begin(pstate_t *ps, void *stream, void **capture_stream) {
  if (capture_stream != nullptr) *capture_stream = nullptr;
  return PSTATE_GUARD({
    require_context(ps);
    ContextEntry entry(*ps, "pstate_graph_capture_begin");
    require_nonnull(capture_stream, "capture_stream");
    *capture_stream = ps->begin_graph_capture(stream);
  });
}

PSTATE_API pstate_status_t pstate_graph_capture_end(pstate_t *ps) {
  return PSTATE_GUARD({
    require_context(ps);
    ContextEntry entry(*ps, "pstate_graph_capture_end");
    ps->end_graph_capture();
  });
}

}  // extern "C"
