// allreduce_recursive_doubling.cpp — allreduce for small buffers: log2(P) exchanges of the whole
// buffer (latency-optimal; every rank reduces the full count each round).
//
// Algorithm (MPICH's recursive doubling, with its fold for non-powers of two):
//   Let p2 be the largest power of two <= P and rem = P - p2.
//   1. Fold: among the first 2*rem ranks, each even rank 2i sends its buffer to 2i+1 and sits
//      out; 2i+1 keeps x[2i] op x[2i+1]. p2 ranks remain, renumbered 0..p2-1 in rank order
//      (new rank i is 2i+1 for i < rem, else i + rem).
//   2. Recursive doubling: in round k (mask = 2^k), new rank n exchanges its buffer with
//      n ^ mask and both keep (lower's buffer) op (higher's buffer). After round k every aligned
//      group of 2^(k+1) new ranks holds the same bits.
//   3. AVG: the p2 ranks divide by P (finish_avg) — once, identically.
//   4. Unfold: each 2i+1 sends the result back to 2i.
//
// Reduction order (the same bits on every rank): a balanced binary tree over the p2 new ranks,
// each leaf being x[2i] op x[2i+1] (folded pair) or x[r]; inner nodes are left-subtree op
// right-subtree. Both partners of a round evaluate the same node (op is commutative bit for bit,
// NaNs included, by the kernels' canonical-NaN rule), and we still pass operands in tree order.
//
// Tags: fold = step 0, round k = step 1 + k, unfold = step 63. Scratch: one buffer of count.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::step_tag;

namespace {

constexpr uint32_t kFoldStep = 0;
constexpr uint32_t kFirstRoundStep = 1;
constexpr uint32_t kUnfoldStep = 63;

// The real rank of new rank n after the fold.
int real_rank(int n, int rem) { return n < rem ? 2 * n + 1 : n + rem; }

}  // namespace

void allreduce_recursive_doubling(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                                  pstate_reduce_op_t op, uint32_t tag_base) {
  detail::require_reduction(dtype, op, "allreduce_recursive_doubling");
  const size_t nbytes = count * dtype_size(dtype);
  if (count == 0) return;
  detail::copy_if_distinct(recv, send, nbytes);
  const int p = ch.size(), r = ch.rank();
  if (p == 1) return;  // AVG over one rank divides by 1: nothing to do

  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;
  std::vector<uint8_t> incoming(nbytes);

  // 1. Fold the first 2*rem ranks in pairs.
  int new_rank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      ch.send(r + 1, recv, nbytes, step_tag(tag_base, kFoldStep));
      new_rank = -1;
    } else {
      ch.recv(r - 1, incoming.data(), nbytes, step_tag(tag_base, kFoldStep));
      reduce_into(recv, incoming.data(), recv, count, dtype, op);  // x[r-1] op x[r]
      new_rank = r / 2;
    }
  } else {
    new_rank = r - rem;
  }

  // 2. Recursive doubling among the p2 remaining ranks; 3. AVG once.
  if (new_rank >= 0) {
    uint32_t round = 0;
    for (int mask = 1; mask < p2; mask <<= 1, ++round) {
      const int partner_new = new_rank ^ mask;
      const int partner = real_rank(partner_new, rem);
      ch.sendrecv(partner, recv, nbytes, partner, incoming.data(), nbytes, step_tag(tag_base, kFirstRoundStep + round));
      if (partner_new < new_rank) reduce_into(recv, incoming.data(), recv, count, dtype, op);
      else reduce_into(recv, recv, incoming.data(), count, dtype, op);
    }
    if (op == PSTATE_AVG) finish_avg(recv, count, dtype, p);
  }

  // 4. Unfold: hand the result back to the ranks that sat out.
  if (r < 2 * rem) {
    if (r % 2 == 1) ch.send(r - 1, recv, nbytes, step_tag(tag_base, kUnfoldStep));
    else ch.recv(r + 1, recv, nbytes, step_tag(tag_base, kUnfoldStep));
  }
}

}  // namespace pstate::coll
