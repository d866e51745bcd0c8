// allgather_ring.cpp — allgather for large buffers: P-1 neighbour exchanges of one block each
// (bandwidth-optimal: every rank sends and receives (P-1)/P of the result once).
//
// Algorithm: rank r first places its own block at recv[r]. At step s = 0..P-2 it sends block
// (r - s) to its right neighbour and receives block (r - s - 1) from its left neighbour, straight
// into its final place in recv; the block sent at step s is the one received at step s-1 (or its
// own at step 0). No scratch memory, no copies beyond the caller's own block.
//
// In place: send == recv + r * send_count * dtype_size (then the own block is already there).
// Tags: step s = step s.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void allgather_ring(Channel &ch, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                    uint32_t tag_base) {
  const size_t block_bytes = send_count * detail::element_size(dtype, "allgather_ring");
  if (send_count == 0) return;
  const int p = ch.size(), r = ch.rank();
  uint8_t *out = bytes(recv);
  auto block = [&](int b) { return out + static_cast<size_t>(b) * block_bytes; };
  detail::copy_if_distinct(block(r), send, block_bytes);

  const int right = mod(r + 1, p), left = mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    const uint32_t tag = step_tag(tag_base, static_cast<uint32_t>(s));
    Channel::Request reqs[2] = {ch.irecv(left, block(mod(r - s - 1, p)), block_bytes, tag),
                                ch.isend(right, block(mod(r - s, p)), block_bytes, tag)};
    ch.wait_all(reqs, 2);
  }
}

}  // namespace pstate::coll
