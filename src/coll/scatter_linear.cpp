// scatter_linear.cpp — scatter: block r of the root's send lands in rank r's recv.
//
// Algorithm (gather_linear run backwards): the root posts one send per other rank, straight from
// that rank's place in send, copies its own block into recv, and waits for all; every other rank
// receives its block from the root. One message per rank and no scratch. The root's link carries
// (P-1)/P of its buffer whatever the algorithm; a tree would only save the root posting P-1
// messages, which matters for tiny blocks on large groups, not for what scatter is used for
// (handing out shards of a tensor or of a batch).
//
// In place: on the root, recv == send + root * recv_count * dtype_size (then nothing is copied).
// Tags: every message at step 0.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::bytes;
using detail::step_tag;

void scatter_linear(Channel &ch, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root,
                    uint32_t tag_base) {
  const size_t block_bytes = recv_count * detail::element_size(dtype, "scatter_linear");
  detail::require_root(ch, root, "scatter_linear");
  if (recv_count == 0) return;
  const uint32_t tag = step_tag(tag_base, 0);
  if (ch.rank() != root) {
    ch.recv(root, recv, block_bytes, tag);
    return;
  }
  std::vector<Channel::Request> sends;
  for (int i = 0; i < ch.size(); ++i)
    if (i != root) sends.push_back(ch.isend(i, bytes(send) + static_cast<size_t>(i) * block_bytes, block_bytes, tag));
  detail::copy_if_distinct(recv, bytes(send) + static_cast<size_t>(root) * block_bytes, block_bytes);
  if (!sends.empty()) ch.wait_all(sends.data(), sends.size());
}

}  // namespace pstate::coll
