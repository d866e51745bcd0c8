// allreduce_ring.cpp — allreduce for large buffers: ring reduce-scatter then ring allgather
// (bandwidth-optimal: each rank sends and receives 2(P-1)/P of the buffer, reduces (P-1)/P).
//
// Algorithm (gloo's AllreduceRing, Baidu's ring allreduce):
//   The buffer is cut into P blocks (BlockPartition: sizes differ by at most one element).
//   Reduce-scatter, steps s = 0..P-2: rank r sends block (r - s) to its right neighbour and
//     receives block (r - s - 1) from its left one, setting recv[block] = incoming op own[block].
//     At step 0 the outgoing block is the caller's send buffer; later it is the partial sum
//     received and reduced at the previous step. After P-1 steps rank r holds the full
//     reduction of block (r + 1) mod P. AVG: rank r divides that block by P, once.
//   Allgather, steps s = 0..P-2: rank r sends block (r + 1 - s) and receives block (r - s),
//     straight into recv, so every rank ends with every block as its owner computed it.
//
// Pipelining and memory: each reduce-scatter step moves its block in chunks of chunk_bytes
// (kRingChunkBytes) through two scratch slots, reducing chunk k while chunk k+1 is in flight
// (detail::RingReduceStep). Out of place, own contributions are read from send and results
// written to recv, so no copy of the input is made; in place works the same with send == recv.
//
// Reduction order (identical bits on every rank, since only the owner computes a block):
//   block b = ((...((x[b] op x[b+1]) op x[b+2]) ...) op x[b-1]), ranks mod P,
//   computed along the ring b -> b+1 -> ... -> b-1, whose last rank (b-1) owns the block.
//
// Tags: reduce-scatter step s = step s; allgather step s = step (P - 1 + s).
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <algorithm>

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void allreduce_ring_chunked(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                            pstate_reduce_op_t op, uint32_t tag_base, size_t chunk_bytes) {
  detail::require_reduction(dtype, op, "allreduce_ring");
  const size_t esize = dtype_size(dtype);
  if (count == 0) return;
  const int p = ch.size(), r = ch.rank();
  if (p == 1) {
    detail::copy_if_distinct(recv, send, count * esize);
    return;
  }
  const detail::BlockPartition blocks{count, p};
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  const uint8_t *in = bytes(send);
  uint8_t *out = bytes(recv);
  auto at = [&](const uint8_t *base, int b) { return base + blocks.offset(b) * esize; };

  // Reduce-scatter.
  std::vector<uint8_t> scratch;
  for (int s = 0; s < p - 1; ++s) {
    const int send_block = mod(r - s, p), recv_block = mod(r - s - 1, p);
    detail::RingReduceStep step{ch, right, left, esize, std::max<size_t>(1, chunk_bytes / esize), dtype, op,
                                step_tag(tag_base, static_cast<uint32_t>(s)), scratch};
    const uint8_t *outgoing = s == 0 ? at(in, send_block) : at(out, send_block);
    step.run(outgoing, blocks.size(send_block), out + blocks.offset(recv_block) * esize, at(in, recv_block),
             blocks.size(recv_block));
  }
  const int owned = mod(r + 1, p);
  if (op == PSTATE_AVG) finish_avg(out + blocks.offset(owned) * esize, blocks.size(owned), dtype, p);

  // Allgather: circulate the owned blocks.
  for (int s = 0; s < p - 1; ++s) {
    const int send_block = mod(r + 1 - s, p), recv_block = mod(r - s, p);
    const uint32_t tag = step_tag(tag_base, static_cast<uint32_t>(p - 1 + s));
    Channel::Request reqs[2];
    size_t n = 0;
    if (blocks.size(recv_block) != 0)
      reqs[n++] = ch.irecv(left, out + blocks.offset(recv_block) * esize, blocks.size(recv_block) * esize, tag);
    if (blocks.size(send_block) != 0)
      reqs[n++] = ch.isend(right, at(out, send_block), blocks.size(send_block) * esize, tag);
    if (n != 0) ch.wait_all(reqs, n);
  }
}

void allreduce_ring(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                    pstate_reduce_op_t op, uint32_t tag_base) {
  allreduce_ring_chunked(ch, send, recv, count, dtype, op, tag_base, kRingChunkBytes);
}

}  // namespace pstate::coll
