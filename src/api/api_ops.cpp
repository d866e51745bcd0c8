// api_ops.cpp — the C entry points of collectives, point-to-point, object operations, the TP
// shortcuts of communication_op.py and graph capture: validate arguments, then call the group.
//
// Where a tensor goes is the group's choice (group_tensors.cpp), as in SGLang's GroupCoordinator:
// in a CUDA context its device communicator (NCCL, enqueued on the stream), in a CPU context its
// host communicator. Here the arguments are checked for where they go (TensorChecks: device
// memory and NCCL's in-place forms, or host memory, the CPU's in-place forms and a CPU kernel for
// the reduction) and passed on. Object operations always use the host communicator.
//
// Argument checks of a collective run inside check_together: a refusal that only this rank can
// see (a root's recv or send, its own NULL, overlapping or device buffer, its own count, dtype or
// stream) takes part in the call's agreement, so the other ranks fail with it instead of pairing
// the call with this rank's next one (and returning its data with PSTATE_OK).
#include "api/boundary.hpp"
#include "api/handles.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace pstate::api;
using pstate::OpKind;

namespace {

// The argument checks every tensor collective shares (after its group and context entry).
void check_op(const pstate_group_t *g, pstate_dtype_t dtype, void *stream) {
  require_dtype(dtype);
  require_cpu_stream(g, stream);
}

const uint8_t *at(const void *p, size_t offset) { return static_cast<const uint8_t *>(p) + offset; }

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

// One side of an all_to_all_v: the arrays (size() entries, counts and displacements in elements),
// each part's end (displacement + count) within size_t and 2^47 bytes. Returns the bytes the buffer
// spans (the largest end of a non-empty part); part ends of empty parts do not count.
size_t require_v_side(const pstate_group_t *g, const size_t *counts, const size_t *displs, pstate_dtype_t dtype,
                      const char *counts_name, const char *displs_name, const char *buf_name) {
  if (counts == nullptr || displs == nullptr)
    pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, counts == nullptr ? counts_name : displs_name, " is NULL: ",
                        "pstate_all_to_all_v on group ", g->name(), " needs one entry per group rank (", g->size(),
                        " entries, in elements; zeros are fine)");
  size_t end_max = 0;
  for (size_t j = 0; j < static_cast<size_t>(g->size()); ++j) {
    if (counts[j] == 0) continue;
    size_t end = 0;
    if (__builtin_add_overflow(displs[j], counts[j], &end))
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, displs_name, "[", j, "] + ", counts_name, "[", j, "] = ",
                          displs[j], " + ", counts[j], " overflows size_t on group ", g->name(),
                          ": displacements and counts are element counts; is one a negative length cast to size_t?");
    end_max = end > end_max ? end : end_max;
  }
  return require_fits(end_max, dtype, 1, buf_name);
}

// The received parts of an all_to_all_v must not overlap one another (the order of their
// arrival is not defined): sorted by displacement, each non-empty part ends before the next begins.
void require_parts_apart(const pstate_group_t *g, const size_t *counts, const size_t *displs) {
  std::vector<size_t> order;
  for (size_t j = 0; j < static_cast<size_t>(g->size()); ++j)
    if (counts[j] != 0) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return displs[a] < displs[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t a = order[k - 1], b = order[k];
    if (displs[a] + counts[a] > displs[b])
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "recv parts overlap: recv_displs[", a, "] + recv_counts[", a,
                          "] = ", displs[a] + counts[a], " > recv_displs[", b, "] = ", displs[b], " on group ",
                          g->name(), ": every received part needs elements of its own");
  }
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
    const TensorChecks t(g, "pstate_all_reduce");
    check_together(g, OpKind::kAllReduce, -1, count, [&] {
      check_op(g, dtype, stream);
      require_op(op);
      const size_t bytes = require_buffer(send, count, dtype, 1, "send");
      require_present(recv, bytes, count, "recv");
      require_disjoint(g, "pstate_all_reduce", send, bytes, recv, bytes, send == recv, "send == recv");
      t.reducible(dtype, op);
      t.memory(send, bytes, recv, bytes);
    });
    note_send(g, send, [&] { return count * element_size(dtype); });
    g->all_reduce(send, recv, count, dtype, op, stream);
  });
}

PSTATE_API pstate_status_t pstate_all_gather(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_gather");
    ContextEntry entry(g->context(), "pstate_all_gather");
    const TensorChecks t(g, "pstate_all_gather");
    const int r = g->rank_in_group();
    check_together(g, OpKind::kAllGather, -1, count, [&] {
      check_op(g, dtype, stream);
      const size_t block = require_buffer(send, count, dtype, 1, "send");
      const size_t total = require_buffer(recv, count, dtype, static_cast<size_t>(g->size()), "recv");
      const bool nccl_in_place = send == at(recv, static_cast<size_t>(r) * block);
      t.apart(send, block, recv, total, nccl_in_place, send == recv,
              "send == recv + rank_in_group * count (NCCL's; in a CUDA context send == recv works on rank_in_group 0 "
              "only)",
              "send == recv + rank_in_group * count, or send == recv", [&] { t.memory(send, block, recv, total); });
    });
    note_send(g, send, [&] { return count * element_size(dtype); });
    g->all_gather(send, recv, count, dtype, stream);
  });
}
PSTATE_API pstate_status_t pstate_reduce_scatter(pstate_group_t *g, const void *send, void *recv, size_t count,
                                                 pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_reduce_scatter");
    ContextEntry entry(g->context(), "pstate_reduce_scatter");
    const TensorChecks t(g, "pstate_reduce_scatter");
    const int r = g->rank_in_group();
    check_together(g, OpKind::kReduceScatter, -1, count, [&] {
      check_op(g, dtype, stream);
      require_op(op);
      const size_t total = require_buffer(send, count, dtype, static_cast<size_t>(g->size()), "send");
      const size_t block = require_buffer(recv, count, dtype, 1, "recv");
      const bool nccl_in_place = recv == at(send, static_cast<size_t>(r) * block);
      t.apart(send, total, recv, block, nccl_in_place, recv == send,
              "recv == send + rank_in_group * count (NCCL's; in a CUDA context recv == send works on rank_in_group 0 "
              "only)",
              "recv == send + rank_in_group * count, or recv == send", [&] {
                t.reducible(dtype, op);
                t.memory(send, total, recv, block);
              });
    });
    note_send(g, send, [&] { return count * static_cast<size_t>(g->size()) * element_size(dtype); });
    g->reduce_scatter(send, recv, count, dtype, op, stream);
  });
}

PSTATE_API pstate_status_t pstate_broadcast(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int root,
                                            void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_broadcast");
    ContextEntry entry(g->context(), "pstate_broadcast");
    const TensorChecks t(g, "pstate_broadcast");
    check_together(g, OpKind::kBroadcast, root, count, [&] {
      check_op(g, dtype, stream);
      require_rank(g, root, "root");
      t.memory(buf, require_buffer(buf, count, dtype, 1, "buf"), "buf");
    });
    if (g->rank_in_group() == root) note_send(g, buf, [&] { return count * element_size(dtype); });
    g->broadcast(buf, count, dtype, root, stream);
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
    const TensorChecks t(g, "pstate_gather");
    const bool is_root = g->rank_in_group() == root;
    check_together(g, OpKind::kGather, root, count, [&] {
      check_op(g, dtype, stream);
      require_rank(g, root, "root");
      const size_t block = require_buffer(send, count, dtype, 1, "send");
      const size_t total = require_fits(count, dtype, static_cast<size_t>(g->size()), "recv");
      t.memory(send, block, "send");
      if (!is_root) return;
      require_buffer(recv, count, dtype, static_cast<size_t>(g->size()), "recv");
      const bool nccl_in_place = send == at(recv, static_cast<size_t>(root) * block);
      t.apart(send, block, recv, total, nccl_in_place, send == recv,
              "send == recv + root * count on root (in a CUDA context send == recv works for root 0 only)",
              "send == recv + root * count on root, or send == recv", [&] { t.memory(recv, total, "recv"); });
    });
    note_send(g, send, [&] { return count * element_size(dtype); });
    g->gather(send, recv, count, dtype, root, stream);
  });
}

PSTATE_API pstate_status_t pstate_all_to_all(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_to_all");
    ContextEntry entry(g->context(), "pstate_all_to_all");
    const TensorChecks t(g, "pstate_all_to_all");
    check_together(g, OpKind::kAllToAll, -1, count, [&] {
      check_op(g, dtype, stream);
      const size_t total = require_buffer(send, count, dtype, static_cast<size_t>(g->size()), "send");
      require_buffer(recv, count, dtype, static_cast<size_t>(g->size()), "recv");
      // NCCL has no in-place all_to_all: the device communicator refuses send == recv too.
      t.apart(send, total, recv, total, send == recv, send == recv, "none in a CUDA context (send == recv is refused too)",
              "send == recv", [&] { t.memory(send, total, recv, total); });
    });
    note_send(g, send, [&] { return count * static_cast<size_t>(g->size()) * element_size(dtype); });
    g->all_to_all(send, recv, count, dtype, stream);
  });
}

// reduce: recv matters on root only. The other ranks' recv is neither checked nor passed on
// (the group gets NULL there), so it is never written, whatever the caller gave.
// The root's checks of recv reach the others through check_together.
PSTATE_API pstate_status_t pstate_reduce(pstate_group_t *g, const void *send, void *recv, size_t count,
                                         pstate_dtype_t dtype, pstate_reduce_op_t op, int root, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_reduce");
    ContextEntry entry(g->context(), "pstate_reduce");
    const TensorChecks t(g, "pstate_reduce");
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
      t.reducible(dtype, op);
      t.memory(send, bytes, "send");
      if (is_root) t.memory(recv, bytes, "recv");
    });
    note_send(g, send, [&] { return count * element_size(dtype); });
    g->reduce(send, out, count, dtype, op, root, stream);
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
    const TensorChecks t(g, "pstate_scatter");
    const bool is_root = g->rank_in_group() == root;
    const void *in = is_root ? send : nullptr;
    check_together(g, OpKind::kScatter, root, count, [&] {
      check_op(g, dtype, stream);
      require_rank(g, root, "root");
      const size_t total = require_fits(count, dtype, static_cast<size_t>(g->size()), "send");
      const size_t block = require_buffer(recv, count, dtype, 1, "recv");
      t.memory(recv, block, "recv");
      if (!is_root) return;
      require_present(send, total, count, "send");
      const bool nccl_in_place = recv == at(send, static_cast<size_t>(root) * block);
      t.apart(send, total, recv, block, nccl_in_place, recv == send,
              "recv == send + root * count on root (in a CUDA context recv == send works for root 0 only)",
              "recv == send + root * count on root, or recv == send", [&] { t.memory(send, total, "send"); });
    });
    if (is_root) note_send(g, in, [&] { return count * static_cast<size_t>(g->size()) * element_size(dtype); });
    g->scatter(in, recv, count, dtype, root, stream);
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
    const TensorChecks t(g, "pstate_all_gatherv");
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
      t.memory(send, part, recv, total);
    });
    note_send(g, send, [&] { return v.mine * element_size(dtype); });
    g->all_gatherv(send, recv, counts, v.total, dtype, stream);
  });
}

// all_to_all_v: the pairs' counts are compared by the group (an exchange of every rank's counts,
// group.hpp); here each rank's own arrays, extents and buffers, refused together.
PSTATE_API pstate_status_t pstate_all_to_all_v(pstate_group_t *g, const void *send, const size_t *send_counts,
                                               const size_t *send_displs, void *recv, const size_t *recv_counts,
                                               const size_t *recv_displs, pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_to_all_v");
    ContextEntry entry(g->context(), "pstate_all_to_all_v");
    const TensorChecks t(g, "pstate_all_to_all_v");
    size_t send_span = 0;  // the bytes send spans (for the hooks)
    check_together(g, OpKind::kAllToAllV, -1, 0, [&] {
      check_op(g, dtype, stream);
      const size_t send_bytes = require_v_side(g, send_counts, send_displs, dtype, "send_counts", "send_displs", "send");
      send_span = send_bytes;
      const size_t recv_bytes = require_v_side(g, recv_counts, recv_displs, dtype, "recv_counts", "recv_displs", "recv");
      require_present(send, send_bytes, send_bytes / element_size(dtype), "send");
      require_present(recv, recv_bytes, recv_bytes / element_size(dtype), "recv");
      require_parts_apart(g, recv_counts, recv_displs);
      t.apart(send, send_bytes, recv, recv_bytes, false, false, "none (all_to_all_v has no in-place form)",
              "none (all_to_all_v has no in-place form)", [&] { t.memory(send, send_bytes, recv, recv_bytes); });
    });
    note_send(g, send, [&] { return send_span; });
    g->all_to_all_v(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype, stream);
  });
}

PSTATE_API pstate_status_t pstate_reduce_scatterv(pstate_group_t *g, const void *send, void *recv, const size_t *counts,
                                                  pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_reduce_scatterv");
    ContextEntry entry(g->context(), "pstate_reduce_scatterv");
    const TensorChecks t(g, "pstate_reduce_scatterv");
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
      t.reducible(dtype, op);
      t.memory(send, total, recv, part);
    });
    note_send(g, send, [&] { return v.total * element_size(dtype); });
    g->reduce_scatterv(send, recv, counts, v.total, dtype, op, stream);
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
    TensorChecks(g, "pstate_send").p2p_memory(buf, "buf");
    note_send(g, buf, [&] { return count * element_size(dtype); });
    g->send(buf, count, dtype, peer, stream);
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
    TensorChecks(g, "pstate_recv").p2p_memory(buf, "buf");
    g->recv(buf, count, dtype, peer, stream);
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
