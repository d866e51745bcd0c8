// p2p_object.cpp — send_object / recv_object: point-to-point variable-length bytes whose size
// the receiver does not know (SGLang's send_object / recv_object, without the pickling).
//
// Algorithm: one message. The sender posts the bytes as they are; the receiver posts
// Channel::irecv_any_size, and the transport sizes the output from the message itself (UCX:
// probe-then-receive), so no separate size message is needed. Successive objects between the
// same pair with the same tag arrive in the order they were sent.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

namespace {

void require_peer(const Channel &ch, int peer, const char *what) {
  if (peer < 0 || peer >= ch.size() || peer == ch.rank())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, ": peer ", peer, " is not another rank of this group of ",
                ch.size(), " (this rank is ", ch.rank(), ")");
}

}  // namespace

void send_object(Channel &ch, const void *data, size_t size, int dst, uint32_t tag) {
  require_peer(ch, dst, "send_object");
  ch.send(dst, data, size, tag);
}

void recv_object(Channel &ch, int src, std::vector<uint8_t> *out, uint32_t tag) {
  require_peer(ch, src, "recv_object");
  if (out == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "recv_object: out must not be null");
  Channel::Request r = ch.irecv_any_size(src, out, tag);
  ch.wait_all(&r, 1);
}

}  // namespace pstate::coll
