// tensor_dict.hpp — SGLang's broadcast_tensor_dict / send_tensor_dict / recv_tensor_dict, composed
// from a group's operations (see tensor_dict.cpp for the protocol).
//
// A dict is an array of pstate_tensor_t. The sender's metadata (names, dtypes, shapes, devices)
// and the bytes of its small CPU tensors travel as one object over the CPU communicator; large
// CPU tensors follow on the CPU communicator and CUDA tensors on the device communicator. The
// receiving ranks get their memory from the caller's pstate_alloc_fn, tensor by tensor.
// Arguments were checked by src/api/ (handles, ranks, NULL callbacks); the dict itself is
// checked here, on the sending rank, which tells the receivers when it refuses it.
#pragma once

#include "group/group.hpp"

#include <pstate/pstate.h>

#include <cstddef>

namespace pstate {

using Group = pstate_group_s;

// The receiving side's allocation callback and its user pointer.
struct TensorAllocator {
  pstate_alloc_fn fn = nullptr;
  void *user = nullptr;
};

// Collective over g. On src, tensors[0..count) are sent and alloc is not used; elsewhere,
// tensors are ignored and every received tensor comes from alloc.
void broadcast_tensor_dict(Group &g, const pstate_tensor_t *tensors, size_t count, int src,
                           const TensorAllocator &alloc, void *stream);
// Point to point between two ranks of g (group ranks).
void send_tensor_dict(Group &g, const pstate_tensor_t *tensors, size_t count, int dst, void *stream);
void recv_tensor_dict(Group &g, int src, const TensorAllocator &alloc, void *stream);

// all_gather_group (tensor_dict_sliced.cpp). A tensor whose element count divides by
// ag's size travels as this rank's 1/size slice; the receiver all-gathers the slices over its ag.
void send_tensor_dict_sliced(Group &g, const pstate_tensor_t *tensors, size_t count, int dst, Group &ag,
                             void *stream);
void recv_tensor_dict_sliced(Group &g, int src, Group &ag, const TensorAllocator &alloc, void *stream);

}  // namespace pstate
