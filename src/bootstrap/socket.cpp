// socket.cpp — socket helpers of the TCP store (see socket.hpp).
#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace pstate::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in *>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6 *>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::set_port(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in *>(&storage)->sin_port = htons(static_cast<uint16_t>(port));
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6 *>(&storage)->sin6_port = htons(static_cast<uint16_t>(port));
}

std::string SocketAddress::host() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(&storage)->sin_addr, host, sizeof host);
  else if (family() == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 *>(&storage)->sin6_addr, host, sizeof host);
  else
    return "(unknown address family)";
  return host;
}

std::string SocketAddress::text() const {
  if (family() == AF_INET) return host() + ":" + std::to_string(port());
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return "(unknown address family)";
}

std::vector<SocketAddress> resolve(const std::string &host, int port, std::string *error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo *found = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  std::vector<SocketAddress> out;
  if (rc != 0) {
    *error = rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc);
    return out;
  }
  for (addrinfo *ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SocketAddress a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    bool seen = std::any_of(out.begin(), out.end(), [&](const SocketAddress &b) {
      return b.length == a.length && std::memcmp(&b.storage, &a.storage, a.length) == 0;
    });
    if (!seen) out.push_back(a);
  }
  freeaddrinfo(found);
  if (out.empty()) *error = "no IPv4 or IPv6 address";
  return out;
}

SocketAddress peer_address(int fd) {
  SocketAddress a;
  a.length = sizeof a.storage;
  if (getpeername(fd, reinterpret_cast<sockaddr *>(&a.storage), &a.length) != 0) a.length = 0;
  return a;
}

SocketAddress local_address(int fd) {
  SocketAddress a;
  a.length = sizeof a.storage;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&a.storage), &a.length) != 0) a.length = 0;
  return a;
}

void tune_stream_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  // A peer whose host vanished (no FIN, no RST) is noticed after ~10 s idle + 3 probes 5 s apart.
  int idle_s = 10, interval_s = 5, probes = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

Fd listen_on(const SocketAddress &address, int backlog, int *err) {
  Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    *err = errno;
    return Fd();
  }
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (address.family() == AF_INET6) {
    // "::" then accepts IPv4 too; a specific IPv6 address is unaffected.
    int zero = 0;
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  }
  if (::bind(fd.get(), address.sa(), address.length) != 0 || ::listen(fd.get(), backlog) != 0) {
    *err = errno;
    return Fd();
  }
  return fd;
}

namespace {

// Waits for events on fd until deadline; returns revents, 0 on timeout, -1 with errno on error.
int wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return p.revents;
    if (rc == 0) {
      if (deadline.expired()) return 0;
      continue;  // remaining_ms() rounds down; poll again for the last fraction
    }
    if (errno != EINTR) return -1;
  }
}

bool is_connection_gone(int e) { return e == ECONNRESET || e == EPIPE || e == ENOTCONN || e == ECONNABORTED; }

}  // namespace

Fd connect_to(const SocketAddress &address, const SocketAddress *source, Deadline deadline, int *err) {
  Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    *err = errno;
    return Fd();
  }
  if (source != nullptr && ::bind(fd.get(), source->sa(), source->length) != 0) {
    *err = errno;
    return Fd();
  }
  if (::connect(fd.get(), address.sa(), address.length) != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      return Fd();
    }
    int revents = wait_for(fd.get(), POLLOUT, deadline);
    if (revents <= 0) {
      *err = revents == 0 ? ETIMEDOUT : errno;
      return Fd();
    }
    int so_error = 0;
    socklen_t len = sizeof so_error;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      *err = so_error;
      return Fd();
    }
  }
  tune_stream_socket(fd.get());
  return fd;
}

IoResult send_all(int fd, const uint8_t *data, size_t n, Deadline deadline, int *err) {
  size_t done = 0;
  while (done < n) {
    ssize_t sent = ::send(fd, data + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      done += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int revents = wait_for(fd, POLLOUT, deadline);
      if (revents == 0) return IoResult::kTimeout;
      if (revents < 0) {
        *err = errno;
        return IoResult::kError;
      }
      continue;  // POLLERR/POLLHUP: the next send() reports what happened
    }
    *err = errno;
    return is_connection_gone(errno) ? IoResult::kClosed : IoResult::kError;
  }
  return IoResult::kDone;
}

IoResult recv_exact(int fd, uint8_t *data, size_t n, Deadline deadline, int *err) {
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::recv(fd, data + done, n - done, MSG_DONTWAIT);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int revents = wait_for(fd, POLLIN, deadline);
      if (revents == 0) return IoResult::kTimeout;
      if (revents < 0) {
        *err = errno;
        return IoResult::kError;
      }
      continue;
    }
    *err = errno;
    return is_connection_gone(errno) ? IoResult::kClosed : IoResult::kError;
  }
  return IoResult::kDone;
}

void sleep_until_at_most(int ms, Deadline deadline) {
  int wait = std::min(ms, deadline.remaining_ms());
  if (wait > 0) std::this_thread::sleep_for(std::chrono::milliseconds(wait));
}

}  // namespace pstate::net
