// broadcast_binomial.cpp — broadcast for small buffers: a binomial tree, ceil(log2 P) rounds.
//
// Algorithm: ranks are renumbered relative to the root (v = (r - root) mod P, root is 0). A
// non-root rank v receives the whole buffer once, from v minus its lowest set bit; then it sends
// to v + 2^j for every 2^j below that bit (largest first, so the deepest subtree starts first)
// with v + 2^j < P. The root sends to 1, 2, 4, ... . Every rank receives exactly once.
//
// Tags: one message per (parent, child) pair, all at step 0.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::mod;
using detail::step_tag;

void broadcast_binomial(Channel &ch, void *buf, size_t count, pstate_dtype_t dtype, int root, uint32_t tag_base) {
  const size_t nbytes = count * detail::element_size(dtype, "broadcast_binomial");
  detail::require_root(ch, root, "broadcast_binomial");
  if (count == 0) return;
  const int p = ch.size(), v = mod(ch.rank() - root, p);
  const uint32_t tag = step_tag(tag_base, 0);

  int mask = 1;
  while (mask < p) {  // find the bit we receive on (the root never does)
    if (v & mask) {
      ch.recv(mod(v - mask + root, p), buf, nbytes, tag);
      break;
    }
    mask <<= 1;
  }
  std::vector<Channel::Request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) sends.push_back(ch.isend(mod(v + mask + root, p), buf, nbytes, tag));
  if (!sends.empty()) ch.wait_all(sends.data(), sends.size());
}

}  // namespace pstate::coll
