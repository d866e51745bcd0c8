// p2p_message_kind.hpp — what a point-to-point message is (its stream, kind and dtype), in 6 bits
// that travel with it, so that a receive never takes a message of another call.
//
// pstate's point-to-point is "the k-th send from a to b is b's k-th receive from a", per group
// and per stream. There are two streams per (group, peer, direction), on every path:
//   - tensors: pstate_send / recv / isend / irecv / p2p_batch and the CPU payload of tensor
//     dicts (shared-memory rings inside a host, UCX otherwise; NCCL carries CUDA tensors);
//   - objects: pstate_send_object / recv_object, and the metadata, acknowledgements and plans of
//     tensor dicts (UCX on every path).
// Calls of the two streams never meet (as NCCL tensors and CPU objects cannot), so a program that
// sends a tensor and then an object gets each where it asked for it. Within a stream, every
// message says what it is: its kind and its dtype. The receive checks them with the size before
// the bytes are anyone's: a message of another kind, dtype or size is PSTATE_ERR_MISMATCH naming
// both sides, never data handed to the wrong call. Where it travels:
//   - UCX: bits 29..24 of the tag (ucx_tag.hpp); receives match every other bit and compare these
//     with the sender's tag when the message has arrived;
//   - shared-memory rings: bits 48..53 of the header's size word (shm_p2p.cpp).
//
//   bits 5..4  kind (stream-specific, below)
//   bits 3..0  dtype + 1 (0: none, for objects)
#pragma once

#include "common/error.hpp"

#include <pstate/pstate.h>

#include <cstdint>
#include <string>

namespace pstate {

enum class P2PStream : uint8_t { kTensors = 0, kObjects = 1 };

// Kinds on the tensor stream. kDeviceCheck: in a CUDA context under PSTATE_CHECK=1, the count of
// a device send (its dtype in the what bits) goes ahead of it on the CPU communicator, so NCCL
// never pairs two ranks that disagree about a point-to-point transfer.
enum class TensorKind : uint8_t { kSend = 0, kDictPayload = 1, kDeviceCheck = 2 };
// Kinds on the object stream.
enum class ObjectKind : uint8_t { kObject = 0, kDictMeta = 1, kDictAck = 2, kSlicedPlan = 3 };

inline constexpr uint32_t kP2PWhatBits = 6;
inline constexpr uint32_t kP2PWhatMask = (1u << kP2PWhatBits) - 1;

constexpr uint32_t p2p_what(uint32_t kind, int dtype) {
  return ((kind & 3u) << 4) | (static_cast<uint32_t>(dtype + 1) & 0xfu);
}
constexpr uint32_t p2p_what(TensorKind kind, pstate_dtype_t dtype) {
  return p2p_what(static_cast<uint32_t>(kind), static_cast<int>(dtype));
}
constexpr uint32_t p2p_what(ObjectKind kind) { return p2p_what(static_cast<uint32_t>(kind), -1); }

// The call a message belongs to, seen from its sender ("send of float32", "send_object",
// "send_tensor_dict's metadata") or its receiver ("recv of int32", "recv_object", ...).
inline std::string describe_p2p_what(P2PStream stream, uint32_t what, bool receiving = false) {
  const uint32_t kind = (what >> 4) & 3u;
  const int dtype = static_cast<int>(what & 0xfu) - 1;
  const char *dtype_name = dtype >= 0 ? pstate_dtype_name(static_cast<pstate_dtype_t>(dtype)) : nullptr;
  if (stream == P2PStream::kTensors) {
    const char *k = kind == 0   ? (receiving ? "recv" : "send")
                    : kind == 1 ? (receiving ? "recv_tensor_dict's payload" : "send_tensor_dict's payload")
                    : kind == 2 ? (receiving ? "recv (CUDA, PSTATE_CHECK)" : "send (CUDA, PSTATE_CHECK)")
                                : "a message of an unknown kind";
    return dtype_name != nullptr ? cat(k, " of ", dtype_name) : std::string(k);
  }
  switch (kind) {
    case 0: return receiving ? "recv_object" : "send_object";
    case 1: return receiving ? "recv_tensor_dict's metadata" : "send_tensor_dict's metadata";
    case 2: return receiving ? "send_tensor_dict's wait for the acknowledgement" : "recv_tensor_dict's acknowledgement";
    default: return receiving ? "recv_tensor_dict_sliced's plan" : "send_tensor_dict_sliced's plan";
  }
}

}  // namespace pstate
