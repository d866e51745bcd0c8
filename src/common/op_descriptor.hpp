// op_descriptor.hpp — what one rank says it is doing in a collective: the descriptor every rank
// of a group compares before it reads or reduces anything (issue "no wrong answer").
//
// A descriptor names the operation kind, the group's sequence number, the count, dtype, reduce
// op and root. Ranks that disagree about any of them get PSTATE_ERR_MISMATCH on every rank of
// the call. How the descriptors travel depends on the transport: inside a host they ride in the
// flag words of the shared-memory protocol (src/transport/shm/, packed by pack_call_code), over
// UCX they are exchanged before the operation (src/group/group.cpp).
#pragma once

#include <pstate/pstate.h>

#include <cstdint>
#include <string>

namespace pstate {

enum class OpKind : uint32_t {
  kAllReduce = 1, kAllGather, kReduceScatter, kBroadcast, kGather, kAllToAll, kBarrier,
  kBroadcastObject, kAllGatherObject, kSend, kRecv, kDeviceCommInit,
  kFinalize,  // the barrier of pstate_finalize: a finalizing peer is never a partner
  kDestroy,   // the barrier of pstate_destroy_model_parallel
  kReduce,    // 15
  kScatter,   // 16: the last kind the 4-bit code can hold (see pack_call_code)
};
static_assert(static_cast<uint32_t>(OpKind::kScatter) == 16,
              "pack_call_code holds 16 kinds (4 bits): widen the code before adding another");
const char *op_kind_name(OpKind kind);

// 32 bytes on the wire (PSTATE_CHECK's exchange sends it as raw bytes).
struct OpDescriptor {
  uint32_t op = 0;  // OpKind
  uint32_t seq = 0;
  uint64_t count = 0;
  int32_t dtype = -1;
  int32_t reduce_op = -1;
  int32_t root = -1;
  int32_t reserved = 0;
};
static_assert(sizeof(OpDescriptor) == 32);

inline OpDescriptor make_op(OpKind kind, uint64_t count, int dtype = -1, int reduce_op = -1, int root = -1) {
  return OpDescriptor{static_cast<uint32_t>(kind), 0, count, dtype, reduce_op, root, 0};
}

// "all_reduce count 4 float32 sum" (with_seq: "all_reduce #17 count 4 float32 sum").
std::string describe_op(const OpDescriptor &d, bool with_seq = false);

// The descriptor packed into 32 bits, exactly where it can be:
//   bits  0..3   kind - 1 (kinds 1..16)
//   bits  4..7   dtype + 1 (0: none)
//   bits  8..10  reduce op + 1 (0: none)
//   bits 11..19  root + 1 (0: none; roots up to kMaxCodedRoot)
//   bits 20..31  count, or kCodedCountLarge for counts of kCodedCountLarge and more (the
//                shared-memory protocol then carries the full count beside the code)
// Two descriptors without sequence numbers are equal iff their codes are equal, provided their
// counts are below kCodedCountLarge (else the full counts must be compared too) and their roots
// at most kMaxCodedRoot (shared-memory groups are limited to kMaxCodedRoot + 1 ranks).
inline constexpr uint32_t kCodedCountLarge = 0xfff;
inline constexpr int kMaxCodedRoot = 510;

inline uint32_t pack_call_code(const OpDescriptor &d) {
  const uint32_t count = d.count >= kCodedCountLarge ? kCodedCountLarge : static_cast<uint32_t>(d.count);
  return ((d.op - 1) & 0xfu) | (static_cast<uint32_t>(d.dtype + 1) & 0xfu) << 4 |
         (static_cast<uint32_t>(d.reduce_op + 1) & 0x7u) << 8 | (static_cast<uint32_t>(d.root + 1) & 0x1ffu) << 11 |
         count << 20;
}

// The descriptor a code stands for (count: kCodedCountLarge when it did not fit; seq 0).
inline OpDescriptor unpack_call_code(uint32_t code) {
  OpDescriptor d;
  d.op = (code & 0xfu) + 1;
  d.dtype = static_cast<int32_t>((code >> 4) & 0xfu) - 1;
  d.reduce_op = static_cast<int32_t>((code >> 8) & 0x7u) - 1;
  d.root = static_cast<int32_t>((code >> 11) & 0x1ffu) - 1;
  d.count = code >> 20;
  return d;
}

}  // namespace pstate
