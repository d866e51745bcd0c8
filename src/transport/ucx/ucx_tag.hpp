// ucx_tag.hpp — the 64-bit UCX tag every pstate message carries, and why it looks like this.
//
// UCX matches a receive against (tag, mask) on the whole worker, not per endpoint, so the tag
// itself must say which group and which sender a message belongs to, or two groups (or two
// senders) using the same algorithm tag would steal each other's messages:
//
//   bits 63..52  group id          12 bits: up to 4096 live groups per rank
//   bits 51..32  source world rank 20 bits: worlds of up to 1,048,576 ranks
//   bits 31..0   algorithm tag     32 bits: chosen by src/coll/ (step, phase, ...)
//
// Receives match the full 64 bits (mask = all ones): a message from rank 3 in group 5 with tag 7
// is only taken by a receive posted for exactly that triple. Messages with the same triple are
// delivered in order (UCX tag-matching order). The one exception is point-to-point's "what"
// field (below): matched by everything else, compared once the message has arrived.
//
// The algorithm tag of a collective: bit 31 clear, bits 30..16 the operation's sequence number,
// bits 15..0 the algorithm's step (group.cpp). Of point-to-point (common/p2p_message_kind.hpp):
//   bit  31      1
//   bit  30      the stream: 0 tensors, 1 objects
//   bits 29..24  what the message is (kind, dtype): not matched, compared after arrival, so a
//                receive that meets a message of another kind or dtype reports MISMATCH naming
//                both instead of waiting for a message that will never come
//   bits 23..0   the message's number on its stream (per group, peer, direction; wraps at 2^24)
#pragma once

#include "common/error.hpp"
#include "common/p2p_message_kind.hpp"

#include <cstdint>

namespace pstate::ucx {

inline constexpr int kTagGroupBits = 12;
inline constexpr int kTagRankBits = 20;
inline constexpr uint32_t kMaxGroupId = (1u << kTagGroupBits) - 1;  // 4095
inline constexpr int kMaxWorldSize = 1 << kTagRankBits;             // 1,048,576
inline constexpr uint64_t kTagMatchAll = ~uint64_t{0};
// The words that name the sender in the errors a failure notice causes (UcxWorker::notice_error);
// such an error is also marked (Error::is_from_notice), which is what Context::fail reads.
inline constexpr const char kNoticeMarker[] = "failure notice: rank ";
inline constexpr uint32_t kP2PTagBit = 0x80000000u;
inline constexpr uint32_t kP2PObjectStreamBit = 0x40000000u;
inline constexpr int kP2PWhatShift = 24;
inline constexpr uint32_t kP2PCounterMask = 0x00ffffffu;
// The tag bits a point-to-point receive compares after arrival instead of matching.
inline constexpr uint64_t kP2PCheckMask = uint64_t{kP2PWhatMask} << kP2PWhatShift;

constexpr uint32_t p2p_algo_tag(P2PStream stream, uint32_t what, uint32_t counter) {
  return kP2PTagBit | (stream == P2PStream::kObjects ? kP2PObjectStreamBit : 0u) |
         ((what & kP2PWhatMask) << kP2PWhatShift) | (counter & kP2PCounterMask);
}
constexpr bool is_p2p_tag(uint64_t tag) { return (tag & kP2PTagBit) != 0; }
constexpr P2PStream p2p_stream_of(uint64_t tag) {
  return (tag & kP2PObjectStreamBit) != 0 ? P2PStream::kObjects : P2PStream::kTensors;
}
constexpr uint32_t p2p_what_of(uint64_t tag) { return static_cast<uint32_t>(tag >> kP2PWhatShift) & kP2PWhatMask; }
constexpr uint32_t p2p_counter_of(uint64_t tag) { return static_cast<uint32_t>(tag) & kP2PCounterMask; }

constexpr uint64_t make_tag(uint32_t group_id, int source_world_rank, uint32_t algo_tag) {
  return (uint64_t{group_id & kMaxGroupId} << 52) |
         (uint64_t{static_cast<uint32_t>(source_world_rank) & (kMaxWorldSize - 1u)} << 32) | algo_tag;
}
constexpr uint32_t tag_group(uint64_t tag) { return static_cast<uint32_t>(tag >> 52); }
constexpr int tag_source(uint64_t tag) { return static_cast<int>((tag >> 32) & (kMaxWorldSize - 1u)); }
constexpr uint32_t tag_algo(uint64_t tag) { return static_cast<uint32_t>(tag); }

// Throws INVALID_ARGUMENT when a group id or world rank does not fit its field.
inline void check_tag_fields(uint32_t group_id, int world_rank) {
  if (group_id > kMaxGroupId)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx: group id ", group_id, " exceeds the tag's 12-bit field (max ",
                kMaxGroupId, "): too many live groups");
  if (world_rank < 0 || world_rank >= kMaxWorldSize)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx: world rank ", world_rank, " does not fit the tag's 20-bit field (max ",
                kMaxWorldSize - 1, ")");
}

}  // namespace pstate::ucx
