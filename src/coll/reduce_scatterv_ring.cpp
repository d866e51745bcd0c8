// reduce_scatterv_ring.cpp — reduce_scatter with a count per rank (MPI_Reduce_scatter, SGLang's
// reduce_scatterv): every rank's send holds sum(counts) elements cut into P blocks, block b of
// counts[b] elements at offset counts[0] + ... + counts[b-1]; rank r's recv gets the reduction
// over the ranks of block r (counts[r] elements).
//
// Algorithm: reduce_scatter_ring with blocks of different sizes (the first half of the ring
// allreduce, shifted so rank r ends owning block r):
//   Steps s = 0..P-2: rank r sends block (r - s - 1) to its right neighbour and receives block
//   (r - s - 2) from its left one, reducing incoming op own (own = that block of its send
//   buffer). At step 0 the outgoing block is taken straight from send; later it is the partial
//   result reduced at the previous step. The block received at the last step is block r,
//   complete. Both ends of a hop know the block's size, so an empty block moves no message. Each
//   step is chunked and pipelined like allreduce_ring (detail::RingReduceStep, which takes the
//   sizes of the outgoing and the incoming block separately). AVG: rank r divides its block by P,
//   once.
//
// Memory: partial results alternate between two buffers so that a step never overwrites what it
// is sending. The last step writes recv. The others use two scratch buffers as large as the
// largest block they hold, except that a step of the last step's parity writes recv instead when
// recv does not overlap send and the block fits in it (recv has room for counts[r] elements only,
// unlike reduce_scatter_ring's equal blocks); in place (recv == send + offset(r)) recv must keep
// rank r's own contribution until the last step, so only the scratch buffers are used.
//
// Reduction order: block b = ((...((x[b+1] op x[b+2]) op x[b+3]) ...) op x[b]), ranks mod P,
// computed along the ring b+1 -> b+2 -> ... -> b; only rank b computes its final value.
//
// Tags: step s = step s.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <algorithm>

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void reduce_scatterv_ring_chunked(Channel &ch, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                                  pstate_reduce_op_t op, uint32_t tag_base, size_t chunk_bytes) {
  detail::require_reduction(dtype, op, "reduce_scatterv_ring");
  const size_t esize = dtype_size(dtype);
  const int p = ch.size(), r = ch.rank();
  const detail::VarBlocks blocks(counts, p, esize);
  if (blocks.total_bytes() == 0) return;
  const uint8_t *in = bytes(send);
  uint8_t *out = bytes(recv);
  const size_t own_bytes = blocks.size(r);
  if (p == 1) {
    detail::copy_if_distinct(out, in, own_bytes);
    return;
  }
  auto block = [&](int b) { return in + blocks.offset(b); };
  auto elems = [&](int b) { return blocks.size(b) / esize; };

  // partial(s, b): where step s writes block b. Steps alternate parity; the last step (P-2)
  // writes recv, and so may the steps of its parity whose block fits in recv.
  const bool recv_is_free = own_bytes == 0 || in + blocks.total_bytes() <= out || out + own_bytes <= in;
  std::vector<uint8_t> scratch_blocks[2];
  auto partial = [&](int s, int b) -> uint8_t * {
    const int parity = (p - 2 - s) % 2;
    if (s == p - 2 || (parity == 0 && recv_is_free && blocks.size(b) <= own_bytes)) return out;
    auto &buf = scratch_blocks[parity];
    if (buf.size() < blocks.size(b)) buf.resize(blocks.size(b));
    return buf.data();
  };

  std::vector<uint8_t> scratch;
  const size_t chunk_elems = std::max<size_t>(1, chunk_bytes / esize);
  int outgoing_block = mod(r - 1, p);
  const uint8_t *outgoing = block(outgoing_block);
  for (int s = 0; s < p - 1; ++s) {
    const int recv_block = mod(r - s - 2, p);
    uint8_t *target = partial(s, recv_block);
    const uint32_t tag = step_tag(tag_base, static_cast<uint32_t>(s));
    detail::RingReduceStep step{ch, mod(r + 1, p), mod(r - 1, p), esize, chunk_elems, dtype, op, tag, scratch};
    step.run(outgoing, elems(outgoing_block), target, block(recv_block), elems(recv_block));
    outgoing = target;
    outgoing_block = recv_block;
  }
  if (op == PSTATE_AVG) finish_avg(out, elems(r), dtype, p);
}

void reduce_scatterv_ring(Channel &ch, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                          pstate_reduce_op_t op, uint32_t tag_base) {
  reduce_scatterv_ring_chunked(ch, send, recv, counts, dtype, op, tag_base, kRingChunkBytes);
}

}  // namespace pstate::coll
