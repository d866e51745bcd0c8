// socket.hpp — the few socket operations the TCP store needs, each bounded by a Deadline.
//
// An owning file descriptor (Fd), address resolution and printing ("127.0.0.1:29500",
// "[::1]:29500"), listen, a non-blocking connect that waits with poll(), and exact sends and
// receives that wait with poll() until a Deadline. Nothing here throws for I/O: results are an
// IoResult plus errno, so the store can say which peer failed and in what call.
#pragma once

#include "common/deadline.hpp"

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pstate::net {

// Owns one file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd &operator=(Fd &&other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  const sockaddr *sa() const { return reinterpret_cast<const sockaddr *>(&storage); }
  int port() const;
  void set_port(int port);
  std::string text() const;  // "127.0.0.1:29500" or "[::1]:29500"
  std::string host() const;  // "127.0.0.1" or "::1": the address without the port
};

// Resolves host (name or numeric address) and port to stream addresses, IPv4 and IPv6, without
// duplicates. Empty with *error set (gai_strerror) when resolution fails.
std::vector<SocketAddress> resolve(const std::string &host, int port, std::string *error);

// The address of the other end / this end of a connected or bound socket.
SocketAddress peer_address(int fd);
SocketAddress local_address(int fd);

// Stream socket options used on both ends: TCP_NODELAY, keep-alive that notices a silent peer
// within about half a minute, close-on-exec.
void tune_stream_socket(int fd);
void set_nonblocking(int fd);

// A listening socket bound to address with SO_REUSEADDR; invalid Fd with *err = errno on failure.
Fd listen_on(const SocketAddress &address, int backlog, int *err);

// Connects a new socket to address (optionally from the local address `source`), waiting until
// deadline. Returns an invalid Fd with *err = errno (ETIMEDOUT when the deadline passed).
Fd connect_to(const SocketAddress &address, const SocketAddress *source, Deadline deadline, int *err);

enum class IoResult { kDone, kTimeout, kClosed, kError };

// Sends all n bytes / receives exactly n bytes, waiting with poll() until deadline. kClosed means
// the peer closed or reset the connection; kError sets *err.
IoResult send_all(int fd, const uint8_t *data, size_t n, Deadline deadline, int *err);
IoResult recv_exact(int fd, uint8_t *data, size_t n, Deadline deadline, int *err);

// Sleeps for ms milliseconds but not past deadline (retry back-off).
void sleep_until_at_most(int ms, Deadline deadline);

}  // namespace pstate::net
