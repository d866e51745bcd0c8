// api_ops.cpp — the C entry points of collectives, point-to-point, object operations, the TP
// shortcuts of communication_op.py and graph capture: validate arguments, then call the group.
#include "api/boundary.hpp"
#include "api/handles.hpp"

#include <cstdlib>
#include <cstring>

using namespace pstate::api;

namespace {

// Common prologue of every tensor operation.
void check_op(const pstate_group_t *g, pstate_dtype_t dtype, void *stream, const char *call) {
  require_group(g, call);
  require_dtype(dtype);
  require_cpu_stream(g, stream);
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

pstate_group_t *tp_group(pstate_t *ps) {
  require_context(ps);
  return ps->group(PSTATE_GROUP_TP);
}

}  // namespace

extern "C" {

PSTATE_API pstate_status_t pstate_all_reduce(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_all_reduce");
    require_reducible(dtype, op);
    require_buffer(send, count, dtype, 1, "send");
    require_buffer(recv, count, dtype, 1, "recv");
    g->all_reduce(send, recv, count, dtype, op);
  });
}

PSTATE_API pstate_status_t pstate_all_gather(pstate_group_t *g, const void *send, void *recv, size_t send_count,
                                             pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_all_gather");
    require_buffer(send, send_count, dtype, 1, "send");
    require_buffer(recv, send_count, dtype, static_cast<size_t>(g->size()), "recv");
    g->all_gather(send, recv, send_count, dtype);
  });
}

PSTATE_API pstate_status_t pstate_reduce_scatter(pstate_group_t *g, const void *send, void *recv, size_t recv_count,
                                                 pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_reduce_scatter");
    require_reducible(dtype, op);
    require_buffer(send, recv_count, dtype, static_cast<size_t>(g->size()), "send");
    require_buffer(recv, recv_count, dtype, 1, "recv");
    g->reduce_scatter(send, recv, recv_count, dtype, op);
  });
}

PSTATE_API pstate_status_t pstate_broadcast(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int src,
                                            void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_broadcast");
    require_rank(g, src, "src");
    require_buffer(buf, count, dtype, 1, "buf");
    g->broadcast(buf, count, dtype, src);
  });
}

PSTATE_API pstate_status_t pstate_gather(pstate_group_t *g, const void *send, void *recv, size_t send_count,
                                         pstate_dtype_t dtype, int dst, void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_gather");
    require_rank(g, dst, "dst");
    require_buffer(send, send_count, dtype, 1, "send");
    if (g->rank_in_group() == dst) require_buffer(recv, send_count, dtype, static_cast<size_t>(g->size()), "recv");
    g->gather(send, recv, send_count, dtype, dst);
  });
}

PSTATE_API pstate_status_t pstate_all_to_all(pstate_group_t *g, const void *send, void *recv, size_t count_per_rank,
                                             pstate_dtype_t dtype, void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_all_to_all");
    require_buffer(send, count_per_rank, dtype, static_cast<size_t>(g->size()), "send");
    require_buffer(recv, count_per_rank, dtype, static_cast<size_t>(g->size()), "recv");
    g->all_to_all(send, recv, count_per_rank, dtype);
  });
}

PSTATE_API pstate_status_t pstate_send(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype, int dst,
                                       void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_send");
    require_rank(g, dst, "dst");
    require(dst != g->rank_in_group(), "dst is this rank: pstate_send needs another rank of the group");
    require_buffer(buf, count, dtype, 1, "buf");
    g->send(buf, count, dtype, dst);
  });
}

PSTATE_API pstate_status_t pstate_recv(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int src,
                                       void *stream) {
  return PSTATE_GUARD({
    check_op(g, dtype, stream, "pstate_recv");
    require_rank(g, src, "src");
    require(src != g->rank_in_group(), "src is this rank: pstate_recv needs another rank of the group");
    require_buffer(buf, count, dtype, 1, "buf");
    g->recv(buf, count, dtype, src);
  });
}

PSTATE_API pstate_status_t pstate_barrier(pstate_group_t *g) {
  return PSTATE_GUARD({
    require_group(g, "pstate_barrier");
    g->barrier();
  });
}

PSTATE_API pstate_status_t pstate_tp_allreduce(pstate_t *ps, void *buf, size_t count, pstate_dtype_t dtype,
                                               pstate_reduce_op_t op, void *stream) {
  pstate_group_t *g = nullptr;
  pstate_status_t s = PSTATE_GUARD({ g = tp_group(ps); });
  return s != PSTATE_OK ? s : pstate_all_reduce(g, buf, buf, count, dtype, op, stream);
}

PSTATE_API pstate_status_t pstate_tp_allgather(pstate_t *ps, const void *send, void *recv, size_t send_count,
                                               pstate_dtype_t dtype, void *stream) {
  pstate_group_t *g = nullptr;
  pstate_status_t s = PSTATE_GUARD({ g = tp_group(ps); });
  return s != PSTATE_OK ? s : pstate_all_gather(g, send, recv, send_count, dtype, stream);
}

PSTATE_API pstate_status_t pstate_broadcast_object(pstate_group_t *g, const void *data, size_t size, int src,
                                                   pstate_bytes_t *out) {
  return PSTATE_GUARD({
    require_group(g, "pstate_broadcast_object");
    require_rank(g, src, "src");
    bool is_src = g->rank_in_group() == src;
    if (is_src) require(data != nullptr || size == 0, "data is NULL with size > 0");
    else require_nonnull(out, "out");
    if (out != nullptr) *out = pstate_bytes_t{nullptr, 0};
    pstate::Bytes got = g->broadcast_object(data, size, src);
    if (out != nullptr) export_bytes(got, out);
  });
}

PSTATE_API pstate_status_t pstate_all_gather_object(pstate_group_t *g, const void *data, size_t size,
                                                    pstate_bytes_t *out, size_t *sizes, size_t capacity) {
  return PSTATE_GUARD({
    require_group(g, "pstate_all_gather_object");
    require(data != nullptr || size == 0, "data is NULL with size > 0");
    require_nonnull(out, "out");
    require_nonnull(sizes, "sizes");
    if (capacity < static_cast<size_t>(g->size()))
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "capacity ", capacity, " < group size ", g->size(), " (",
                          g->name(), ")");
    *out = pstate_bytes_t{nullptr, 0};
    std::vector<size_t> got_sizes;
    pstate::Bytes got = g->all_gather_object(data, size, &got_sizes);
    export_bytes(got, out);
    std::memcpy(sizes, got_sizes.data(), got_sizes.size() * sizeof(size_t));
  });
}

PSTATE_API pstate_status_t pstate_send_object(pstate_group_t *g, const void *data, size_t size, int dst) {
  return PSTATE_GUARD({
    require_group(g, "pstate_send_object");
    require_rank(g, dst, "dst");
    require(dst != g->rank_in_group(), "dst is this rank: pstate_send_object needs another rank of the group");
    require(data != nullptr || size == 0, "data is NULL with size > 0");
    g->send_object(data, size, dst);
  });
}

PSTATE_API pstate_status_t pstate_recv_object(pstate_group_t *g, int src, pstate_bytes_t *out) {
  return PSTATE_GUARD({
    require_group(g, "pstate_recv_object");
    require_rank(g, src, "src");
    require(src != g->rank_in_group(), "src is this rank: pstate_recv_object needs another rank of the group");
    require_nonnull(out, "out");
    *out = pstate_bytes_t{nullptr, 0};
    export_bytes(g->recv_object(src), out);
  });
}

PSTATE_API void pstate_bytes_free(pstate_bytes_t *b) {
  if (b == nullptr) return;
  std::free(b->data);
  b->data = nullptr;
  b->size = 0;
}

PSTATE_API pstate_status_t pstate_graph_capture_begin(pstate_t *ps, void *stream, void **capture_stream) {
  return PSTATE_GUARD({
    require_context(ps);
    require_nonnull(capture_stream, "capture_stream");
    *capture_stream = nullptr;
    ps->require_usable("pstate_graph_capture_begin");
    if (ps->device() == PSTATE_DEVICE_CPU)
      pstate::throw_error(PSTATE_ERR_UNSUPPORTED,
                          "graph capture needs a CUDA context (device = PSTATE_DEVICE_CUDA); this context is CPU, "
                          "where collectives run eagerly and there is no graph to record");
    pstate::throw_error(PSTATE_ERR_UNSUPPORTED, "graph capture: the CUDA backend is not available in this build");
  });
}

PSTATE_API pstate_status_t pstate_graph_capture_end(pstate_t *ps) {
  return PSTATE_GUARD({
    require_context(ps);
    ps->require_usable("pstate_graph_capture_end");
    if (ps->device() == PSTATE_DEVICE_CPU)
      pstate::throw_error(PSTATE_ERR_UNSUPPORTED,
                          "graph capture needs a CUDA context (device = PSTATE_DEVICE_CUDA); this context is CPU");
    pstate::throw_error(PSTATE_ERR_UNSUPPORTED, "graph capture: the CUDA backend is not available in this build");
  });
}

}  // extern "C"
