// reduce_ring.cpp — reduce for large buffers: a ring reduce-scatter, then every reduced block to
// the root. Each rank sends and receives (P-1)/P of the buffer in the ring and the root receives
// another (P-1)/P, where a binomial tree moves the whole buffer log2(P) times into the root.
//
// Algorithm (the first half of allreduce_ring, then gather_linear's pattern):
//   The buffer is cut into P blocks (BlockPartition: sizes differ by at most one element).
//   Reduce-scatter, steps s = 0..P-2, exactly as allreduce_ring: rank r sends block (r - s) to
//     its right neighbour and receives block (r - s - 1) from its left one, setting
//     partial[block] = incoming op own[block]. At step 0 the outgoing block is the caller's send
//     buffer; later it is the partial result of the previous step. After P-1 steps rank r holds
//     the full reduction of block (r + 1) mod P; AVG divides it there, once.
//   Gather: every rank but the root sends its block to the root, which receives each one
//     straight into its place in recv (its own block is already there).
//
// Memory: on the root, partial results land in recv as in allreduce_ring (in place works the
// same way: send == recv). The other ranks are given no recv: their partial results alternate
// between two scratch blocks, so a step never overwrites the block it is still sending
// (RingReduceStep waits for its sends before it returns). Each step is chunked and pipelined
// through two more chunk-sized slots (detail::RingReduceStep).
//
// Reduction order: allreduce_ring's, so the root gets the bits all_reduce gives over UCX:
//   block b = ((...((x[b] op x[b+1]) op x[b+2]) ...) op x[b-1]), ranks mod P.
//
// Tags: reduce-scatter step s = step s; the blocks to the root = step P - 1.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <algorithm>

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void reduce_ring_chunked(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                         pstate_reduce_op_t op, int root, uint32_t tag_base, size_t chunk_bytes) {
  detail::require_reduction(dtype, op, "reduce_ring");
  detail::require_root(ch, root, "reduce_ring");
  const size_t esize = dtype_size(dtype);
  if (count == 0) return;
  const int p = ch.size(), r = ch.rank();
  if (p == 1) {
    detail::copy_if_distinct(recv, send, count * esize);
    return;
  }
  const bool is_root = r == root;
  const detail::BlockPartition blocks{count, p};
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  const uint8_t *in = bytes(send);
  auto at = [&](const uint8_t *base, int b) { return base + blocks.offset(b) * esize; };

  // Where step s leaves its partial result of block (r - s - 1).
  std::vector<uint8_t> scratch_blocks[2];
  auto partial = [&](int s, int block) -> uint8_t * {
    if (is_root) return bytes(recv) + blocks.offset(block) * esize;
    auto &buf = scratch_blocks[s % 2];
    if (buf.empty()) buf.resize(std::max<size_t>(1, blocks.size(0) * esize));
    return buf.data();
  };

  // Reduce-scatter.
  std::vector<uint8_t> scratch;
  const uint8_t *outgoing = nullptr;
  uint8_t *owned = nullptr;
  for (int s = 0; s < p - 1; ++s) {
    const int send_block = mod(r - s, p), recv_block = mod(r - s - 1, p);
    detail::RingReduceStep step{ch, right, left, esize, std::max<size_t>(1, chunk_bytes / esize), dtype, op,
                                step_tag(tag_base, static_cast<uint32_t>(s)), scratch};
    if (s == 0) outgoing = at(in, send_block);
    uint8_t *target = partial(s, recv_block);
    step.run(outgoing, blocks.size(send_block), target, at(in, recv_block), blocks.size(recv_block));
    outgoing = owned = target;
  }
  const int owned_block = mod(r + 1, p);
  const size_t owned_count = blocks.size(owned_block);
  if (op == PSTATE_AVG) finish_avg(owned, owned_count, dtype, p);

  // The reduced blocks to the root: block b is owned by rank b - 1.
  const uint32_t tag = step_tag(tag_base, static_cast<uint32_t>(p - 1));
  if (!is_root) {
    if (owned_count != 0) ch.send(root, owned, owned_count * esize, tag);
    return;
  }
  std::vector<Channel::Request> recvs;
  for (int b = 0; b < p; ++b) {
    if (b == owned_block || blocks.size(b) == 0) continue;
    recvs.push_back(ch.irecv(mod(b - 1, p), bytes(recv) + blocks.offset(b) * esize, blocks.size(b) * esize, tag));
  }
  if (!recvs.empty()) ch.wait_all(recvs.data(), recvs.size());
}

void reduce_ring(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                 int root, uint32_t tag_base) {
  reduce_ring_chunked(ch, send, recv, count, dtype, op, root, tag_base, kRingChunkBytes);
}

}  // namespace pstate::coll
