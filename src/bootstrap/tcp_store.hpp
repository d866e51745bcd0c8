// tcp_store.hpp — the client of the TCP store (every rank, rank 0 too), owning the server on the
// serving rank.
//
// Opening connects (retrying until the open deadline, since rank 0's server may start later) and
// runs the handshake: Hello, Challenge, Proof (HMAC of the job token), Welcome. Each call then
// sends one request frame and reads one reply frame, bounded by the call's Deadline; a get or
// wait tells the server how long to hold it, so waiting costs no CPU on either side. When the
// server goes away every call fails with PSTATE_ERR_PEER_LOST naming the store's address; when a
// reply does not arrive in time the call fails with PSTATE_ERR_TIMEOUT and the next call opens a
// fresh connection (the old one may still carry the late reply).
#pragma once

#include "bootstrap/init_method.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/store.hpp"
#include "bootstrap/tcp_store_server.hpp"
#include "bootstrap/wire.hpp"
#include "common/log.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace pstate {

class TcpStore final : public Store {
 public:
  // method must be a tcp:// init method. Starts the server first when options.rank == 0 and
  // options.serve (a port of 0 then picks a free port: see port()).
  static std::unique_ptr<TcpStore> open(const StoreOptions &options, const InitMethod &method, const Logger &logger);
  ~TcpStore() override;

  void set(const std::string &key, const Bytes &value, Deadline deadline) override;
  Bytes get(const std::string &key, Deadline deadline) override;
  int64_t add(const std::string &key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string> &keys, Deadline deadline) override;
  bool check(const std::string &key, Deadline deadline) override;
  bool erase(const std::string &key, Deadline deadline) override;
  std::string describe() const override { return url_; }
  bool close(Deadline deadline) override;

  int port() const { return port_; }
  // The world size the store announced (useful to an observer, rank -1).
  int world_size() const { return world_size_; }
  // The server this object runs, or nullptr on ranks that only connect.
  const TcpStoreServer *server() const { return server_.get(); }

 private:
  TcpStore(const StoreOptions &options, const InitMethod &method, const Logger &logger);
  void connect(Deadline deadline);
  bool handshake(net::Fd &fd, Deadline deadline, std::string *retry_reason);
  wire::Message call(const wire::Message &request, Deadline deadline, const std::string &what);
  wire::Message read_reply(net::Fd &fd, Deadline deadline, size_t limit, const std::string &what, bool handshaking);
  [[noreturn]] void fail_lost(const std::string &what, const std::string &detail);
  [[noreturn]] void fail_from_reply(const wire::Message &reply, const std::string &what);
  uint32_t wait_ms_for(Deadline deadline) const;

  StoreOptions options_;
  InitMethod method_;
  Logger logger_;
  std::unique_ptr<TcpStoreServer> server_;  // declared before fd_: the connection closes first
  int port_ = 0;
  std::string url_;
  std::optional<net::SocketAddress> source_;  // from socket_ifname
  int world_size_ = 0;

  std::mutex mutex_;  // one request at a time on the connection
  net::Fd fd_;
  bool lost_ = false;
  bool closed_ = false;
  std::string lost_detail_;
};

}  // namespace pstate
