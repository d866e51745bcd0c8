// api_tensor_dict.cpp — the C entry points of the tensor dicts (SGLang's broadcast_tensor_dict,
// send_tensor_dict, recv_tensor_dict): handle, rank and callback checks, then the protocol of
// src/group/tensor_dict.cpp (which reads the caller's array by its struct_size and checks the dict
// on the sending rank, inside the refusal path, so the receivers learn of a bad dict at once).
#include "api/boundary.hpp"
#include "api/handles.hpp"
#include "group/tensor_dict.hpp"

using namespace pstate::api;

namespace {

void check_dict(const pstate_tensor_t *tensors, size_t count) {
  if (count > 0 && tensors == nullptr)
    pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "tensors is NULL with count ", count);
}

void check_alloc(pstate_alloc_fn alloc) {
  if (alloc == nullptr)
    pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT,
                        "alloc is NULL: a receiving rank needs an allocation callback for the "
                        "tensors it receives");
}

}  // namespace

extern "C" {

PSTATE_API pstate_status_t pstate_broadcast_tensor_dict(pstate_group_t *g, const pstate_tensor_t *tensors, size_t count,
                                                        int root, pstate_alloc_fn alloc, void *user, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_broadcast_tensor_dict");
    ContextEntry entry(g->context(), "pstate_broadcast_tensor_dict");
    // The call begins with the metadata's broadcast_object on the CPU communicator in every
    // context: a refusal here meets it, so the other ranks fail at once (handles.hpp).
    check_together(
        g, pstate::OpKind::kTensorDictMeta, root, count,
        [&] {
          require_rank(g, root, "root");
          require_cpu_stream(g, stream);
          if (g->rank_in_group() == root)
            check_dict(tensors, count);
          else
            check_alloc(alloc);
        },
        true);
    g->traced(pstate::TraceOp::kBroadcastTensorDict, root, [&] {
      pstate::broadcast_tensor_dict(*g, tensors, count, root, pstate::TensorAllocator{alloc, user}, stream);
    });
  });
}

PSTATE_API pstate_status_t pstate_send_tensor_dict(pstate_group_t *g, const pstate_tensor_t *tensors, size_t count,
                                                   int peer, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_send_tensor_dict");
    ContextEntry entry(g->context(), "pstate_send_tensor_dict");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(), "peer is this rank: pstate_send_tensor_dict needs another rank of the group");
    require_cpu_stream(g, stream);
    check_dict(tensors, count);
    g->traced(pstate::TraceOp::kSendTensorDict, peer, [&] { pstate::send_tensor_dict(*g, tensors, count, peer, stream); });
  });
}

PSTATE_API pstate_status_t pstate_recv_tensor_dict(pstate_group_t *g, int peer, pstate_alloc_fn alloc, void *user,
                                                   void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_recv_tensor_dict");
    ContextEntry entry(g->context(), "pstate_recv_tensor_dict");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(), "peer is this rank: pstate_recv_tensor_dict needs another rank of the group");
    require_cpu_stream(g, stream);
    check_alloc(alloc);
    g->traced(pstate::TraceOp::kRecvTensorDict, peer, [&] {
      pstate::recv_tensor_dict(*g, peer, pstate::TensorAllocator{alloc, user}, stream);
    });
  });
}

// Sliced dicts (all_gather_group); ag must be a group of the same context.
namespace {
void check_ag(const pstate_group_t *g, const pstate_group_t *ag, const char *call) {
  require_group(ag, call);
  if (&ag->context() != &g->context())
    pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, call, ": ag (", ag->name(), ") belongs to another pstate_t than g (",
                        g->name(), "): pass a group of the same context (e.g. its PSTATE_GROUP_ATTN_TP)");
}
}  // namespace

PSTATE_API pstate_status_t pstate_send_tensor_dict_sliced(pstate_group_t *g, const pstate_tensor_t *tensors,
                                                          size_t count, int peer, pstate_group_t *ag, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_send_tensor_dict_sliced");
    check_ag(g, ag, "pstate_send_tensor_dict_sliced");
    ContextEntry entry(g->context(), "pstate_send_tensor_dict_sliced");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(),
            "peer is this rank: pstate_send_tensor_dict_sliced needs another rank of the group");
    require_cpu_stream(g, stream);
    check_dict(tensors, count);
    ag->check_alive("pstate_send_tensor_dict_sliced");
    g->traced(pstate::TraceOp::kSendTensorDict, peer,
              [&] { pstate::send_tensor_dict_sliced(*g, tensors, count, peer, *ag, stream); });
  });
}

PSTATE_API pstate_status_t pstate_recv_tensor_dict_sliced(pstate_group_t *g, int peer, pstate_group_t *ag,
                                                          pstate_alloc_fn alloc, void *user, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_recv_tensor_dict_sliced");
    check_ag(g, ag, "pstate_recv_tensor_dict_sliced");
    ContextEntry entry(g->context(), "pstate_recv_tensor_dict_sliced");
    require_rank(g, peer, "peer");
    require(peer != g->rank_in_group(),
            "peer is this rank: pstate_recv_tensor_dict_sliced needs another rank of the group");
    require_cpu_stream(g, stream);
    check_alloc(alloc);
    ag->check_alive("pstate_recv_tensor_dict_sliced");
    g->traced(pstate::TraceOp::kRecvTensorDict, peer, [&] {
      pstate::recv_tensor_dict_sliced(*g, peer, *ag, pstate::TensorAllocator{alloc, user}, stream);
    });
  });
}

}  // extern "C"
