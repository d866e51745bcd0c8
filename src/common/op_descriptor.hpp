// op_descriptor.hpp — what one rank says it is doing in a collective: the descriptor every rank of
// a group compares before it reads or reduces anything, so that no rank ever returns a wrong
// answer.
//
// A descriptor names the operation kind, the group's sequence number, the count, dtype, reduce
// op and root; the variable-size collectives (all_gatherv, reduce_scatterv) put the total of
// their counts array in count and a hash of the array in detail, so ranks that pass different
// arrays with the same total disagree too. Ranks that disagree about any of them get
// PSTATE_ERR_MISMATCH on every rank of the call. How the descriptors travel depends on the
// transport: inside a host they ride in the flag words of the shared-memory protocol
// (src/transport/shm/, packed by pack_call_code; the counts hash beside the code), over UCX they
// are exchanged before the operation, a small operation's data riding in the same exchange
// (src/coll/agreement_exchange.hpp: detail then holds the bytes of data each record carries).
#pragma once

#include <pstate/pstate.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace pstate {

enum class OpKind : uint32_t {
  kAllReduce = 1, kAllGather, kReduceScatter, kBroadcast, kGather, kAllToAll, kBarrier,
  kBroadcastObject, kAllGatherObject, kSend, kRecv, kDeviceCommInit,
  kFinalize,  // the barrier of pstate_finalize: a finalizing peer is never a partner
  kDestroy,   // the barrier of pstate_destroy_model_parallel
  kReduce,    // 15
  kScatter,         // 16
  kAllGatherV,      // 17: counts array (count = its total, detail = its hash)
  kReduceScatterV,  // 18: the same
  // pstate's own exchanges (agreement covers every message pstate sends): each has a kind of its
  // own, so a rank in one of them and a rank in a user call (or in another of them) disagree like
  // any two different collectives, instead of handing pstate's bytes to the user or the user's to
  // pstate.
  kNewGroup,             // 19: pstate_new_group's member-list exchange (over the world)
  kModelParallelConfig,  // 20: pstate_initialize_model_parallel's config exchange
  kModelParallelReady,   // 21: its closing barrier
  kDestroyExchange,      // 22: pstate_destroy_model_parallel's count of undelivered messages
  kTensorDictMeta,       // 23: broadcast_tensor_dict's metadata (root = its src)
  kTensorDictAgree,      // 24: broadcast_tensor_dict's agreement before CUDA payload
  kSlicedDictAgree,      // 25: recv_tensor_dict_sliced's agreement over the ag group
  kGrowDecision,         // 26: pstate_grow's decision from rank 0
  // 27: a rank refused its part of a collective object call (a size past 2^47 bytes, NULL data;
  // group memory's calls, whose agreement is an object call, for 0 bytes, out NULL or a pointer
  // that is no group memory): it still takes part in the call's agreement with this kind, count =
  // the refused size, so every rank of the call fails at once with INVALID_ARGUMENT naming it (a
  // rank that refuses a call tells its peers, never leaves them waiting) and nothing is sent.
  kRefused,
  // Group memory (pstate_mem_alloc / pstate_mem_free / pstate_mem_pool_reserve): the kinds of
  // their agreement (an all_gather_object of each rank's size and, for a free, which allocation;
  // count 0), so ranks that disagree get MISMATCH naming every rank's record.
  kMemAlloc,    // 28
  kMemFree,     // 29
  kMemReserve,  // 30
  // 31: pstate_all_to_all_v. Its descriptor is alike on every rank (count 0, the dtype): the
  // per-pair counts differ by design, so they are compared by an exchange of every rank's counts
  // after the descriptors agree (coll/alltoallv_pairwise.cpp, agree_alltoallv_counts).
  kAllToAllV,
  kLast = kAllToAllV,
};
// pack_call_code holds 32 kinds (5 bits).
static_assert(static_cast<uint32_t>(OpKind::kLast) <= 32,
              "pack_call_code holds 32 kinds (5 bits): widen the code before adding another");
// Inline: every call names its kind (check_alive, the host call) before it begins, and a call
// through the library costs the 8 B all_reduce ~6 instructions more than the switch the compiler
// turns into a table here (docs/bench/metrics.md).
inline const char *op_kind_name(OpKind kind) {
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
    case OpKind::kAllGatherV: return "all_gatherv";
    case OpKind::kReduceScatterV: return "reduce_scatterv";
    case OpKind::kNewGroup: return "pstate_new_group";
    case OpKind::kModelParallelConfig: return "pstate_initialize_model_parallel (config exchange)";
    case OpKind::kModelParallelReady: return "pstate_initialize_model_parallel (closing barrier)";
    case OpKind::kDestroyExchange: return "pstate_destroy_model_parallel";
    case OpKind::kTensorDictMeta: return "broadcast_tensor_dict";
    case OpKind::kTensorDictAgree: return "broadcast_tensor_dict (agreement before CUDA payload)";
    case OpKind::kSlicedDictAgree: return "recv_tensor_dict_sliced (agreement over the ag group)";
    case OpKind::kGrowDecision: return "pstate_grow";
    case OpKind::kRefused: return "a call it refused";
    case OpKind::kMemAlloc: return "pstate_mem_alloc";
    case OpKind::kMemFree: return "pstate_mem_free";
    case OpKind::kMemReserve: return "pstate_mem_pool_reserve";
    case OpKind::kAllToAllV: return "all_to_all_v";
  }
  return "an unknown operation";
}
// Whether the kind is one of pstate's own exchanges (kNewGroup and after): described by name.
inline bool internal_kind(uint32_t kind) {
  return kind >= static_cast<uint32_t>(OpKind::kNewGroup) && kind <= static_cast<uint32_t>(OpKind::kMemReserve);
}

// Whether descriptors of this kind carry a counts hash in detail (compared like every field).
inline bool carries_counts_hash(uint32_t kind) {
  return kind == static_cast<uint32_t>(OpKind::kAllGatherV) || kind == static_cast<uint32_t>(OpKind::kReduceScatterV);
}
// The hash of a counts array of n entries that the v-collectives' descriptors carry (FNV-1a over
// the 64-bit counts and n, folded to 32 bits; never 0). Two ranks that pass different arrays with
// the same total differ here except with probability ~2^-32.
uint32_t counts_hash(const size_t *counts, size_t n);
// "[3, 0, 5]": a counts array for messages (the first 16 entries, then how many there are).
std::string counts_text(const size_t *counts, size_t n);

// 32 bytes on the wire (PSTATE_CHECK's exchange sends it as raw bytes).
struct OpDescriptor {
  uint32_t op = 0;  // OpKind
  uint32_t seq = 0;
  uint64_t count = 0;
  int32_t dtype = -1;
  int32_t reduce_op = -1;
  int32_t root = -1;
  // all_gatherv / reduce_scatterv: counts_hash of the counts array; a call folded into a UCX
  // group's agreement exchange: the bytes of data its record carries; else 0
  uint32_t detail = 0;
};
static_assert(sizeof(OpDescriptor) == 32);

inline OpDescriptor make_op(OpKind kind, uint64_t count, int dtype = -1, int reduce_op = -1, int root = -1) {
  return OpDescriptor{static_cast<uint32_t>(kind), 0, count, dtype, reduce_op, root, 0};
}

// The descriptor of a v-collective: count = total of counts (n = group size entries), detail =
// counts_hash(counts, n); dtype and op as for the fixed-size kinds (op -1 for all_gatherv).
inline OpDescriptor make_v_op(OpKind kind, const size_t *counts, size_t n, uint64_t total, int dtype,
                              int reduce_op = -1) {
  OpDescriptor d = make_op(kind, total, dtype, reduce_op, -1);
  d.detail = counts_hash(counts, n);
  return d;
}

// "all_reduce count 4 float32 sum" (with_seq: "all_reduce #17 count 4 float32 sum"; a
// v-collective: "all_gatherv total 12 int32 counts 5f3a09c1", the array's hash).
std::string describe_op(const OpDescriptor &d, bool with_seq = false);

// The descriptor packed into 32 bits, exactly where it can be:
//   bits  0..4   kind - 1 (kinds 1..32)
//   bits  5..8   dtype + 1 (0: none)
//   bits  9..11  reduce op + 1 (0: none)
//   bits 12..19  root + 1 (0: none; roots up to kMaxCodedRoot)
//   bits 20..31  count, or kCodedCountLarge for counts of kCodedCountLarge and more (the
//                shared-memory protocol then carries the full count beside the code)
// Two descriptors without sequence numbers are equal iff their codes are equal, provided their
// counts are below kCodedCountLarge (else the full counts must be compared too), their roots at
// most kMaxCodedRoot (shared-memory groups are limited to kMaxCodedRoot + 1 ranks) and, for the
// kinds that carry one, their counts hashes are equal (the shared-memory protocol carries the
// hash beside the code too).
inline constexpr uint32_t kCodedCountLarge = 0xfff;
inline constexpr int kMaxCodedRoot = 254;

inline uint32_t pack_call_code(const OpDescriptor &d) {
  const uint32_t count = d.count >= kCodedCountLarge ? kCodedCountLarge : static_cast<uint32_t>(d.count);
  return ((d.op - 1) & 0x1fu) | (static_cast<uint32_t>(d.dtype + 1) & 0xfu) << 5 |
         (static_cast<uint32_t>(d.reduce_op + 1) & 0x7u) << 9 | (static_cast<uint32_t>(d.root + 1) & 0xffu) << 12 |
         count << 20;
}

// The descriptor a code stands for (count: kCodedCountLarge when it did not fit; seq 0; detail 0).
inline OpDescriptor unpack_call_code(uint32_t code) {
  OpDescriptor d;
  d.op = (code & 0x1fu) + 1;
  d.dtype = static_cast<int32_t>((code >> 5) & 0xfu) - 1;
  d.reduce_op = static_cast<int32_t>((code >> 9) & 0x7u) - 1;
  d.root = static_cast<int32_t>((code >> 12) & 0xffu) - 1;
  d.count = code >> 20;
  return d;
}

}  // namespace pstate
