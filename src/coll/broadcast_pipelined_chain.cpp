// broadcast_pipelined_chain.cpp — broadcast for large buffers: a pipelined chain.
//
// Algorithm: ranks form a chain in order from the root (v = (r - root) mod P: 0 -> 1 -> ... ->
// P-1). The buffer is cut into chunks of chunk_bytes (kChainChunkBytes). Every non-root rank posts
// receives for all chunks up front, straight into buf; as soon as chunk k has arrived it is
// forwarded to the next rank, so chunk k travels down the chain while chunk k+1 arrives. The time
// is about (P - 2 + chunks) chunk transfers: the whole buffer once, plus the chain's fill.
// Compared with a binomial tree (log2 P times the whole buffer) this wins once the buffer is
// several chunks long.
//
// Tags: every chunk between a pair uses step 0 (delivered in order).
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <algorithm>

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

void broadcast_pipelined_chain_chunked(Channel &ch, void *buf, size_t count, pstate_dtype_t dtype, int root,
                                       uint32_t tag_base, size_t chunk_bytes) {
  const size_t esize = detail::element_size(dtype, "broadcast_pipelined_chain");
  detail::require_root(ch, root, "broadcast_pipelined_chain");
  if (count == 0 || ch.size() == 1) return;
  const int p = ch.size(), v = mod(ch.rank() - root, p);
  const bool has_prev = v > 0, has_next = v + 1 < p;
  const int prev = mod(v - 1 + root, p), next = mod(v + 1 + root, p);
  const uint32_t tag = step_tag(tag_base, 0);
  const size_t total = count * esize;
  const size_t chunk = std::max(esize, chunk_bytes / esize * esize);  // whole elements
  const size_t chunks = (total + chunk - 1) / chunk;
  auto chunk_len = [&](size_t k) { return std::min(chunk, total - k * chunk); };

  std::vector<Channel::Request> recvs, sends;
  if (has_prev)
    for (size_t k = 0; k < chunks; ++k) recvs.push_back(ch.irecv(prev, bytes(buf) + k * chunk, chunk_len(k), tag));
  for (size_t k = 0; k < chunks; ++k) {
    if (has_prev) ch.wait_all(&recvs[k], 1);
    if (has_next) sends.push_back(ch.isend(next, bytes(buf) + k * chunk, chunk_len(k), tag));
  }
  if (!sends.empty()) ch.wait_all(sends.data(), sends.size());
}

void broadcast_pipelined_chain(Channel &ch, void *buf, size_t count, pstate_dtype_t dtype, int root,
                               uint32_t tag_base) {
  broadcast_pipelined_chain_chunked(ch, buf, count, dtype, root, tag_base, kChainChunkBytes);
}

}  // namespace pstate::coll
