// broadcast_object.cpp — broadcast of variable-length bytes whose size only the root knows
// (SGLang's broadcast_object_list, with the pickling left to the caller).
//
// Algorithm: the binomial tree of broadcast_binomial.cpp (ranks relative to the root; a rank
// receives once from v minus its lowest set bit and forwards to v + 2^j below that bit), where
// each receive is Channel::irecv_any_size: the transport learns the length from the message
// itself, so no size round precedes the payload and the cost is one message per tree edge.
// Each rank forwards the bytes it received from the buffer it received them into.
//
// Tags: one message per (parent, child) pair, at step 0. An empty object is a zero-byte message.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::mod;
using detail::step_tag;

void broadcast_object(Channel &ch, const void *data, size_t size, int root, std::vector<uint8_t> *out,
                      uint32_t tag_base) {
  detail::require_root(ch, root, "broadcast_object");
  const int p = ch.size(), v = mod(ch.rank() - root, p);
  const uint32_t tag = step_tag(tag_base, 0);
  const void *payload = data;
  size_t length = size;

  int mask = 1;
  if (v == 0) {
    while (mask < p) mask <<= 1;  // the root sends to v + mask for every power of two below p
    if (out != nullptr) {
      const auto *d = static_cast<const uint8_t *>(data);
      out->assign(d, d + size);
    }
  } else {
    if (out == nullptr)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "broadcast_object: rank ", ch.rank(), " is not the root (", root,
                  ") and must pass an output buffer");
    while (!(v & mask)) mask <<= 1;
    Channel::Request r = ch.irecv_any_size(mod(v - mask + root, p), out, tag);
    ch.wait_all(&r, 1);
    payload = out->data();
    length = out->size();
  }

  std::vector<Channel::Request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) sends.push_back(ch.isend(mod(v + mask + root, p), payload, length, tag));
  if (!sends.empty()) ch.wait_all(sends.data(), sends.size());
}

}  // namespace pstate::coll
