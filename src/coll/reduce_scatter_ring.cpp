// reduce_scatter_ring.cpp — reduce_scatter: rank r gets the reduction of block r of everyone's
// send buffer (P blocks of recv_count elements). Bandwidth-optimal ring, any group size.
//
// Algorithm (the first half of the ring allreduce, shifted so rank r ends owning block r):
//   Steps s = 0..P-2: rank r sends block (r - s - 1) to its right neighbour and receives block
//   (r - s - 2) from its left one, reducing incoming op own (own = block of its send buffer).
//   At step 0 the outgoing block is taken straight from send; later it is the partial result
//   reduced at the previous step. The block received at the last step is block r, complete.
//   AVG: rank r divides its block by P, once.
//
// Memory: partial results alternate between two buffers so that a step never overwrites what it
// is sending. The last step writes recv, so the buffer before it is a scratch block, and recv
// serves as the other one when it does not overlap send; in place (recv == send + r * block)
// recv must keep rank r's own contribution until the last step, so two scratch blocks are used.
// Each step is chunked and pipelined like allreduce_ring (detail::RingReduceStep).
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

namespace {

bool overlaps(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len) {
  return a < b + b_len && b < a + a_len;
}

}  // namespace

void reduce_scatter_ring_chunked(Channel &ch, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                                 pstate_reduce_op_t op, uint32_t tag_base, size_t chunk_bytes) {
  detail::require_reduction(dtype, op, "reduce_scatter_ring");
  const size_t esize = dtype_size(dtype), block_bytes = recv_count * esize;
  if (recv_count == 0) return;
  const int p = ch.size(), r = ch.rank();
  const uint8_t *in = bytes(send);
  uint8_t *out = bytes(recv);
  if (p == 1) {
    detail::copy_if_distinct(out, in, block_bytes);
    return;
  }
  auto block = [&](int b) { return in + static_cast<size_t>(b) * block_bytes; };

  // partial(s): where step s writes. Steps alternate parity; the last step (P-2) writes recv.
  const bool recv_is_free = !overlaps(out, block_bytes, in, block_bytes * static_cast<size_t>(p));
  std::vector<uint8_t> scratch_blocks[2];
  auto partial = [&](int s) -> uint8_t * {
    const int parity = (p - 2 - s) % 2;
    if (s == p - 2 || (parity == 0 && recv_is_free)) return out;
    auto &buf = scratch_blocks[parity];
    if (buf.size() != block_bytes) buf.resize(block_bytes);
    return buf.data();
  };

  std::vector<uint8_t> scratch;
  const uint8_t *outgoing = block(mod(r - 1, p));
  for (int s = 0; s < p - 1; ++s) {
    const int recv_block = mod(r - s - 2, p);
    uint8_t *target = partial(s);
    detail::RingReduceStep step{ch, mod(r + 1, p), mod(r - 1, p), esize, std::max<size_t>(1, chunk_bytes / esize),
                                dtype, op, step_tag(tag_base, static_cast<uint32_t>(s)), scratch};
    step.run(outgoing, recv_count, target, block(recv_block), recv_count);
    outgoing = target;
  }
  if (op == PSTATE_AVG) finish_avg(out, recv_count, dtype, p);
}

void reduce_scatter_ring(Channel &ch, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                         pstate_reduce_op_t op, uint32_t tag_base) {
  reduce_scatter_ring_chunked(ch, send, recv, recv_count, dtype, op, tag_base, kRingChunkBytes);
}

}  // namespace pstate::coll
