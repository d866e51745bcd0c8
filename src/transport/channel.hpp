// channel.hpp — the small point-to-point interface every collective algorithm is written against.
//
// A Channel is one group seen from one rank: size() ranks, this one being rank(). Algorithms in
// src/coll/ post non-blocking sends and receives to group ranks with a 32-bit tag and wait for
// them; the transport below (UCX between processes and hosts, shared memory inside a node) is
// invisible to them, so one ring runs over every transport. Messages between the same pair with
// the same tag are delivered in order. wait_all throws pstate::Error (TIMEOUT, PEER_LOST,
// TRANSPORT) naming the peer; after a throw the channel's outstanding requests are cancelled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pstate {

class Channel {
 public:
  using Request = uint64_t;  // opaque; valid until passed to wait_all

  virtual ~Channel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Posts a send of bytes to group rank peer. buf must stay valid until wait_all returns.
  virtual Request isend(int peer, const void *buf, size_t bytes, uint32_t tag) = 0;
  // Posts a receive of exactly bytes from group rank peer; a longer message is MISMATCH.
  virtual Request irecv(int peer, void *buf, size_t bytes, uint32_t tag) = 0;
  // Posts a receive of a message of unknown length from peer; the payload is returned by
  // wait_all into *out (resized). Used by the object operations.
  virtual Request irecv_any_size(int peer, std::vector<uint8_t> *out, uint32_t tag) = 0;
  // Posts a receive of at most capacity bytes into buf; wait_all writes the length that arrived
  // to *received (a longer message is MISMATCH). The agreement exchange's self-describing records
  // (src/coll/agreement_exchange.hpp). Channels that do not carry it throw INTERNAL.
  virtual Request irecv_upto(int peer, void *buf, size_t capacity, uint32_t tag, size_t *received);
  // Waits for every request (spin briefly, then block) until done or the deadline of the
  // current operation; throws on failure.
  virtual void wait_all(const Request *requests, size_t n) = 0;

  // Conveniences over the above.
  void send(int peer, const void *buf, size_t bytes, uint32_t tag) {
    Request r = isend(peer, buf, bytes, tag);
    wait_all(&r, 1);
  }
  void recv(int peer, void *buf, size_t bytes, uint32_t tag) {
    Request r = irecv(peer, buf, bytes, tag);
    wait_all(&r, 1);
  }
  void sendrecv(int to, const void *sbuf, size_t sbytes, int from, void *rbuf, size_t rbytes, uint32_t tag) {
    Request r[2] = {irecv(from, rbuf, rbytes, tag), isend(to, sbuf, sbytes, tag)};
    wait_all(r, 2);
  }
};

}  // namespace pstate
