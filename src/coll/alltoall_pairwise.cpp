// alltoall_pairwise.cpp — all_to_all: block j of rank i's send ends up as block i of rank j's recv.
//
// Algorithm (pairwise exchange): the own block is copied locally; then at step s = 1..P-1 rank r
// sends its block for rank (r + s) to that rank and receives the block of rank (r - s) from it.
// Each step is one exchange with a different pair, so no rank receives from two at once and every
// link is used once per step; it works for every group size (no power-of-two XOR pairing).
//
// In place (send == recv): the outgoing blocks are copied to scratch first, since incoming blocks
// overwrite recv while later steps still have to send from it.
// Tags: step s = step s.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <cstring>

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void alltoall_pairwise(Channel &ch, const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype,
                       uint32_t tag_base) {
  const size_t block_bytes = count_per_rank * detail::element_size(dtype, "alltoall_pairwise");
  if (count_per_rank == 0) return;
  const int p = ch.size(), r = ch.rank();
  std::vector<uint8_t> copy;
  const uint8_t *src = bytes(send);
  if (send == recv) {
    copy.assign(src, src + static_cast<size_t>(p) * block_bytes);
    src = copy.data();
  }
  auto out_block = [&](int b) { return bytes(recv) + static_cast<size_t>(b) * block_bytes; };
  auto in_block = [&](int b) { return src + static_cast<size_t>(b) * block_bytes; };

  std::memcpy(out_block(r), in_block(r), block_bytes);
  for (int s = 1; s < p; ++s) {
    const int to = mod(r + s, p), from = mod(r - s, p);
    ch.sendrecv(to, in_block(to), block_bytes, from, out_block(from), block_bytes, step_tag(tag_base, static_cast<uint32_t>(s)));
  }
}

}  // namespace pstate::coll
