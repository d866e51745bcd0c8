// tcp_store.hpp — the client of the TCP store (every rank, rank 0 too), owning the server on the
// serving rank.
//
// Opening connects (retrying until the open deadline, since rank 0's server may start later) and
// runs the handshake: the preambles (the client's line, then the server's: anything else back is
// a foreign service, named at once with what it answered), Hello, Challenge, Proof (HMAC of the
// job token), Welcome. A rank 0 that cannot serve because the port is taken joins whatever holds
// it as rank 0, and so learns what it is: a store of this job whose rank 0 is taken, another
// job's store (token, job id), a foreign service. Each call then
// sends one request frame and reads one reply frame, bounded by the call's Deadline; a get or
// wait tells the server how long to hold it, so waiting costs no CPU on either side. When the
// server goes away every call fails with PSTATE_ERR_PEER_LOST naming the store's address; when a
// reply does not arrive in time the call fails with PSTATE_ERR_TIMEOUT and the next call opens a
// fresh connection (the old one may still carry the late reply). A get or wait is sent in slices
// of a few seconds: each timed-out slice brings the server's picture of the world (who joined,
// who is absent and why), logged at INFO while waiting and named in the final TIMEOUT.
//
// interrupt() stops a call that another thread is blocked in (and every later call) at once with
// PSTATE_ERR_ABORTED: it shuts the connection down (shutdown(2)), which wakes the blocked poll.
// The context's dump watcher (group/dump_watcher.hpp) waits in a get for as long as the context
// lives and is stopped this way. The connection's descriptor changes only under fd_guard_, so
// interrupt() never shuts down a number that was closed and reused meanwhile.
#pragma once

#include "bootstrap/init_method.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/store.hpp"
#include "bootstrap/tcp_store_server.hpp"
#include "bootstrap/wire.hpp"
#include "common/log.hpp"

#include <atomic>
#include <functional>
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
  // The same without connecting (and without a server: a client only): the first call connects,
  // within its own deadline, so that a thread of its own does it, where interrupt() reaches it.
  static std::unique_ptr<TcpStore> open_unconnected(const StoreOptions &options, const InitMethod &method,
                                                    const Logger &logger);
  ~TcpStore() override;

  void set(const std::string &key, const Bytes &value, Deadline deadline) override;
  Bytes get(const std::string &key, Deadline deadline) override;
  std::vector<Bytes> get_many(const std::vector<std::string> &keys, Deadline deadline) override;
  void set_many(const std::vector<std::pair<std::string, Bytes>> &items, Deadline deadline) override;
  int64_t add(const std::string &key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string> &keys, Deadline deadline) override;
  bool check(const std::string &key, Deadline deadline) override;
  std::optional<std::vector<int>> members(Deadline deadline) override;
  Bytes set_if_absent(const std::string &key, const Bytes &value, Deadline deadline) override;
  bool erase(const std::string &key, Deadline deadline) override;
  void abandon(pstate_status_t status, const std::string &why) noexcept override;
  std::string describe() const override { return url_; }
  StoreTraffic traffic() const override;
  bool close(Deadline deadline) override;
  // Any thread: the call blocked in this store now, and every later one, fail with
  // PSTATE_ERR_ABORTED at once (the connection is shut down). Never blocks on the calls; not
  // while the store is being destroyed.
  void interrupt() noexcept override;
  // A get or wait is sent in slices of this many ms (default 3000), each timed-out slice a
  // progress report (logged at INFO); a caller that waits for ever (the dump watcher) asks for
  // long slices, so that waiting costs the server one parked request, not one every 3 s.
  void set_wait_slice_ms(int64_t ms) { slice_ms_ = ms; }

  int port() const { return port_; }
  // The world size the store announced (useful to an observer, rank -1).
  int world_size() const { return world_size_; }
  // The server this object runs, or nullptr on ranks that only connect.
  const TcpStoreServer *server() const { return server_.get(); }

 private:
  TcpStore(const StoreOptions &options, const InitMethod &method, const Logger &logger);
  void connect(Deadline deadline);
  void join_port_holder(Deadline deadline);
  bool handshake(net::Fd &fd, Deadline deadline, std::string *retry_reason);
  bool read_server_preamble(net::Fd &fd, Deadline deadline, std::string *retry_reason);
  // request(wait_ms, continuation): continuation is false for the first slice only (one request,
  // however many frames: StoreTraffic).
  wire::Message wait_in_slices(const std::string &what, Deadline deadline,
                               const std::function<wire::Message(uint32_t wait_ms, bool continuation)> &request);
  [[noreturn]] void fail_waiting(const wire::TimedOut &t, const std::string &what, int64_t waited_ms,
                                 const std::string &keys_text);
  // call() and call_many()'s parts, under mutex_.
  void begin_call(const std::string &what, Deadline deadline);
  void send_request(const wire::Message &request, Deadline deadline, const std::string &what, bool continuation);
  // `deadline` bounds the request (its wait_ms for the server); the reply is awaited until the later
  // of it and `reply_by` (a sliced wait's whole deadline), plus kReplyGraceMs.
  wire::Message call(const wire::Message &request, Deadline deadline, const std::string &what,
                     bool continuation = false, std::optional<Deadline> reply_by = std::nullopt);
  // call() of many requests, pipelined: up to kPipelineDepth in flight on the connection (the
  // server answers a connection's requests one at a time, in order). Every reply is read before
  // it returns, whatever it is, so the connection stays in step.
  std::vector<wire::Message> call_many(const std::vector<wire::Message> &requests, Deadline deadline,
                                       const std::string &what);
  wire::Message read_reply(net::Fd &fd, Deadline deadline, size_t limit, const std::string &what, bool handshaking);
  [[noreturn]] void fail_lost(const std::string &what, const std::string &detail);
  // fd_ changes only through these (under fd_guard_); reset_fd(f) resets f, through
  // drop_connection() when f is fd_.
  void adopt_connection(net::Fd fd);
  void drop_connection() noexcept;
  void reset_fd(net::Fd &fd) noexcept;
  [[noreturn]] void fail_from_reply(const wire::Message &reply, const std::string &what);
  uint32_t wait_ms_for(Deadline deadline) const;

  StoreOptions options_;
  InitMethod method_;
  Logger logger_;
  std::unique_ptr<TcpStoreServer> server_;  // declared before fd_: the connection closes first
  int port_ = 0;
  std::string url_;
  std::optional<net::SocketAddress> source_;  // from socket_ifname
  std::string source_name_;                   // "lo (127.0.0.1)", for messages
  int world_size_ = 0;
  std::optional<Error> port_in_use_;  // rank 0 could not serve: the port is taken

  std::mutex mutex_;  // one request at a time on the connection
  net::Fd fd_;
  std::mutex fd_guard_;  // fd_'s value: written by the calling thread, read by interrupt()
  std::atomic<bool> interrupted_{false};
  int64_t slice_ms_ = 3000;
  bool lost_ = false;
  bool closed_ = false;
  std::string lost_detail_;
  // StoreTraffic, written under mutex_ (connects: by connect(), under it too), read by traffic().
  size_t last_reply_bytes_ = 0;  // read_reply's last frame (under mutex_, or in the handshake)
  std::atomic<uint64_t> requests_{0}, frames_{0}, bytes_sent_{0}, bytes_received_{0}, connects_{0};
};

}  // namespace pstate
