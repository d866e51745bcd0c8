// allgatherv_ring.cpp — allgather with a count per rank (MPI_Allgatherv, SGLang's all_gatherv):
// rank b contributes counts[b] elements, and every rank's recv holds all parts packed in rank
// order (part b at offset counts[0] + ... + counts[b-1]).
//
// Algorithm: allgather_ring with blocks of different sizes. Rank r first places its own part at
// its offset in recv. At step s = 0..P-2 it sends part (r - s) to its right neighbour and receives
// part (r - s - 1) from its left neighbour, straight into its final place; the part sent at step
// s is the one received at step s-1 (or its own at step 0). Every rank knows every part's size,
// so an empty part is skipped by both ends of its hop without a message (a step whose two parts
// are empty costs nothing), and each byte crosses each link at most once: (total - own) bytes in
// and out per rank, the bandwidth optimum of a ring.
//
// In place: send == recv + offset(r) * dtype_size (then the own part is already there).
// Tags: step s = step s.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void allgatherv_ring(Channel &ch, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                     uint32_t tag_base) {
  const size_t esize = detail::element_size(dtype, "allgatherv_ring");
  const int p = ch.size(), r = ch.rank();
  const detail::VarBlocks parts(counts, p, esize);
  if (parts.total_bytes() == 0) return;
  uint8_t *out = bytes(recv);
  detail::copy_if_distinct(out + parts.offset(r), send, parts.size(r));

  const int right = mod(r + 1, p), left = mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    const uint32_t tag = step_tag(tag_base, static_cast<uint32_t>(s));
    const int in = mod(r - s - 1, p), outgoing = mod(r - s, p);
    Channel::Request reqs[2];
    size_t n = 0;
    if (parts.size(in) != 0) reqs[n++] = ch.irecv(left, out + parts.offset(in), parts.size(in), tag);
    if (parts.size(outgoing) != 0) reqs[n++] = ch.isend(right, out + parts.offset(outgoing), parts.size(outgoing), tag);
    if (n != 0) ch.wait_all(reqs, n);
  }
}

}  // namespace pstate::coll
