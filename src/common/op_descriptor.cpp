// op_descriptor.cpp — names and text of collective descriptors (see op_descriptor.hpp).
#include "common/op_descriptor.hpp"

#include "common/error.hpp"

namespace pstate {

const char *op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kGather: return "gather";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kBroadcastObject: return "broadcast_object";
    case OpKind::kAllGatherObject: return "all_gather_object";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kDeviceCommInit: return "device communicator init";
    case OpKind::kFinalize: return "pstate_finalize";
    case OpKind::kDestroy: return "pstate_destroy_model_parallel";
    case OpKind::kReduce: return "reduce";
    case OpKind::kScatter: return "scatter";
  }
  return "an unknown operation";
}

std::string describe_op(const OpDescriptor &d, bool with_seq) {
  std::string s = op_kind_name(static_cast<OpKind>(d.op));
  if (with_seq) s += cat(" #", d.seq);
  const auto kind = static_cast<OpKind>(d.op);
  if (kind == OpKind::kBarrier || kind == OpKind::kFinalize || kind == OpKind::kDestroy) return s;
  if (kind != OpKind::kBroadcastObject && kind != OpKind::kAllGatherObject) s += cat(" count ", d.count);
  if (d.dtype >= 0) s += cat(" ", pstate_dtype_name(static_cast<pstate_dtype_t>(d.dtype)));
  if (d.reduce_op >= 0) s += cat(" ", pstate_reduce_op_name(static_cast<pstate_reduce_op_t>(d.reduce_op)));
  if (d.root >= 0) s += cat(" root ", d.root);
  return s;
}

}  // namespace pstate
