// allgather_bruck.cpp — allgather for small buffers: ceil(log2 P) exchanges for any group size
// (latency-optimal; the price is one local rotation at the end).
//
// Algorithm (Bruck et al., 1997): rank r keeps a scratch array whose slot i will hold the block
// of rank (r + i) mod P; slot 0 is its own. In round k (distance d = 2^k) it sends its first
// min(d, P - d) slots to rank (r - d) and receives as many from rank (r + d) into slots d, d+1,
// ...: those are the blocks of ranks r + d, r + d + 1, ... . After the last round all P slots
// are filled, and slot i is copied to recv[(r + i) mod P].
//
// Scratch: P blocks (the buffers this is chosen for are small). In place (send == recv + r *
// block) is fine: the own block is copied to scratch before recv is written.
// Tags: round k = step k.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <algorithm>
#include <cstring>

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void allgather_bruck(Channel &ch, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                     uint32_t tag_base) {
  const size_t block_bytes = send_count * detail::element_size(dtype, "allgather_bruck");
  if (send_count == 0) return;
  const int p = ch.size(), r = ch.rank();
  std::vector<uint8_t> slots(static_cast<size_t>(p) * block_bytes);
  std::memcpy(slots.data(), send, block_bytes);

  uint32_t round = 0;
  for (int d = 1; d < p; d *= 2, ++round) {
    const size_t n = static_cast<size_t>(std::min(d, p - d)) * block_bytes;
    ch.sendrecv(mod(r - d, p), slots.data(), n, mod(r + d, p), slots.data() + static_cast<size_t>(d) * block_bytes, n,
                step_tag(tag_base, round));
  }
  for (int i = 0; i < p; ++i)
    std::memcpy(bytes(recv) + static_cast<size_t>(mod(r + i, p)) * block_bytes,
                slots.data() + static_cast<size_t>(i) * block_bytes, block_bytes);
}

}  // namespace pstate::coll
