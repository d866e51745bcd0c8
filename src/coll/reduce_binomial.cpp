// reduce_binomial.cpp — reduce for small buffers: a binomial tree towards the root, ceil(log2 P)
// rounds of the whole buffer (latency-optimal; the mirror image of broadcast_binomial).
//
// Algorithm (MPICH's binomial reduce): ranks are renumbered relative to the root
// (v = (r - root) mod P, the root is 0). For mask = 1, 2, 4, ...: a rank whose bit `mask` is set
// sends its partial result to its parent v - mask and is done; otherwise, when v + mask < P, it
// receives the partial result of the subtree rooted at v + mask (ranks v + mask .. v + 2*mask - 1
// below P) and folds it into its own: acc = acc op incoming. After the round of mask, rank v holds
// the reduction of ranks v .. v + 2*mask - 1 (those below P); the root ends with all of them and
// divides once for AVG.
//
// Reduction order (only the root's result is returned): with S(u, m) the subtree of relative rank
// u below mask m, acc(v) = ((x[v] op S(v+1, 1)) op S(v+2, 2)) op S(v+4, 4) ..., relative ranks.
//
// Memory: leaves (odd v) send their send buffer as it is. Folds go to recv on the root (in place
// works: the own buffer is the fold's first input, read before it is written) and to a scratch
// buffer of count elements on the other inner ranks (they are given no recv); one more scratch
// holds the incoming partial result. Tags: every message at step 0 (one per child-parent pair).
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void reduce_binomial(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                     pstate_reduce_op_t op, int root, uint32_t tag_base) {
  detail::require_reduction(dtype, op, "reduce_binomial");
  detail::require_root(ch, root, "reduce_binomial");
  const size_t nbytes = count * dtype_size(dtype);
  if (count == 0) return;
  const int p = ch.size(), v = mod(ch.rank() - root, p);
  const uint32_t tag = step_tag(tag_base, 0);

  std::vector<uint8_t> scratch, incoming;
  const uint8_t *acc = bytes(send);                       // the partial result so far
  uint8_t *folded = v == 0 ? bytes(recv) : nullptr;      // where folds go (scratch off the root)
  for (int mask = 1; mask < p; mask <<= 1) {
    if (v & mask) {  // my subtree is complete: hand it to the parent
      ch.send(mod(v - mask + root, p), acc, nbytes, tag);
      return;
    }
    if (v + mask >= p) continue;  // no child at this distance
    if (incoming.empty()) incoming.resize(nbytes);
    ch.recv(mod(v + mask + root, p), incoming.data(), nbytes, tag);
    if (folded == nullptr) {
      scratch.resize(nbytes);
      folded = scratch.data();
    }
    reduce_into(folded, acc, incoming.data(), count, dtype, op);
    acc = folded;
  }
  // Only the root gets here; with P == 1 it has folded nothing.
  if (p == 1) {
    detail::copy_if_distinct(recv, send, nbytes);
    return;
  }
  if (op == PSTATE_AVG) finish_avg(recv, count, dtype, p);
}

}  // namespace pstate::coll
