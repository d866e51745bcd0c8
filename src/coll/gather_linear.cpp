// gather_linear.cpp — gather: every rank's block lands in rank order in the root's recv.
//
// Algorithm: the root posts one receive per other rank, straight into that rank's place in recv,
// copies its own block, and waits for all; every other rank sends its block to the root. One
// message per rank, no scratch; the root's link is the bottleneck, which is fine for what gather
// is used for (collecting results or metadata at one rank).
//
// In place: on the root, send == recv + root * send_count * dtype_size.
// Tags: every message at step 0.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::bytes;
using detail::step_tag;

void gather_linear(Channel &ch, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int root,
                   uint32_t tag_base) {
  const size_t block_bytes = send_count * detail::element_size(dtype, "gather_linear");
  detail::require_root(ch, root, "gather_linear");
  if (send_count == 0) return;
  const uint32_t tag = step_tag(tag_base, 0);
  if (ch.rank() != root) {
    ch.send(root, send, block_bytes, tag);
    return;
  }
  std::vector<Channel::Request> recvs;
  for (int i = 0; i < ch.size(); ++i)
    if (i != root) recvs.push_back(ch.irecv(i, bytes(recv) + static_cast<size_t>(i) * block_bytes, block_bytes, tag));
  detail::copy_if_distinct(bytes(recv) + static_cast<size_t>(root) * block_bytes, send, block_bytes);
  if (!recvs.empty()) ch.wait_all(recvs.data(), recvs.size());
}

}  // namespace pstate::coll
