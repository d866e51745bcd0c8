// tcp_store.cpp — the TCP store's client (see tcp_store.hpp).
#include "bootstrap/tcp_store.hpp"

#include "bootstrap/handshake.hpp"
#include "bootstrap/crypto.hpp"
#include "bootstrap/netif.hpp"
#include "bootstrap/roster.hpp"
#include "common/error.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace pstate {
namespace {

using Clock = std::chrono::steady_clock;

// How much longer than the wait it asked for a client waits for the server's answer.
constexpr int kReplyGraceMs = 2000;
// Longest single connect attempt; later attempts retry until the open deadline.
constexpr int kConnectAttemptMs = 5000;
// A rank 0 that finds its port taken looks at the holder this long at most.
constexpr int kPortHolderProbeMs = 2000;

// Up to 100 bytes of what a foreign service said, printable: "HTTP/1.0 400 Bad request ...".
std::string printable(const Bytes &b) {
  std::string out;
  for (size_t i = 0; i < b.size() && out.size() < 100; ++i) {
    unsigned char c = b[i];
    if (c == '\r' || c == '\n') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

Deadline earlier(Deadline a, Deadline b) { return a.at() < b.at() ? a : b; }

}  // namespace

std::unique_ptr<TcpStore> TcpStore::open(const StoreOptions &options, const InitMethod &method, const Logger &logger) {
  std::unique_ptr<TcpStore> store(new TcpStore(options, method, logger));
  if (store->port_in_use_)
    store->join_port_holder(Deadline::after_ms(options.timeout_ms));
  else
    store->connect(Deadline::after_ms(options.timeout_ms));
  return store;
}

std::unique_ptr<TcpStore> TcpStore::open_unconnected(const StoreOptions &options, const InitMethod &method,
                                                     const Logger &logger) {
  StoreOptions client = options;
  client.serve = false;
  return std::unique_ptr<TcpStore>(new TcpStore(client, method, logger));
}

// This rank was to serve, but the port is taken. Whatever holds it is asked, as rank 0 would ask
// its own store: a store of this job answers that rank 0 is taken (and, being this job's, tells
// its waiting ranks); another job's store refuses the token or job id; a foreign service is named.
// A store that admits rank 0 (one served by no rank) is simply used.
void TcpStore::join_port_holder(Deadline deadline) {
  const Error &bind_error = *port_in_use_;
  try {
    connect(earlier(deadline, Deadline::after_ms(kPortHolderProbeMs)));
  } catch (const Error &e) {
    if (e.status() == PSTATE_ERR_TIMEOUT)  // nothing there answers as a store: the original cause
      throw Error(bind_error.status(), cat(bind_error.what(), " (its holder did not answer as a pstate store within ",
                                           kPortHolderProbeMs, " ms)"));
    if (e.status() == PSTATE_ERR_AUTH)
      throw_error(PSTATE_ERR_TRANSPORT, "cannot serve the store on port ", method_.port,
                  ": it is held by another job's pstate store (", e.what(),
                  "): choose another MASTER_PORT / init_method port");
    throw Error(e.status(),
                cat(e.what(), " (this process, RANK=0, found port ", method_.port, " in use and asked its holder)"));
  }
  logger_.info("store: port ", method_.port, " is served by another process that admitted rank 0; using its store");
}

TcpStore::TcpStore(const StoreOptions &options, const InitMethod &method, const Logger &logger)
    : options_(options), method_(method), logger_(logger) {
  if (method.kind != InitMethod::Kind::kTcp)
    throw_error(PSTATE_ERR_INTERNAL, "TcpStore opened with ", method.url());
  port_ = method.port;
  if (options.rank == 0 && options.serve) {
    StoreServerOptions so;
    so.host = method.host;
    so.port = method.port;
    so.world_size = options.world_size;
    so.job_token = options.job_token;
    so.job_id = options.job_id;
    so.owner_rank = 0;
    int bind_errno = 0;
    try {
      server_ = TcpStoreServer::start(so, logger, &bind_errno);
      port_ = server_->port();
    } catch (const Error &e) {
      if (bind_errno != EADDRINUSE || method.port == 0) throw;
      port_in_use_ = e;
    }
  }
  if (port_ == 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", method.url(),
                ": port 0 (any free port) only works on the rank that serves the store; the others must "
                "know its port");
  InitMethod actual = method;
  actual.port = port_;
  url_ = actual.url();
  if (!options.socket_ifname.empty()) {
    InterfaceAddress chosen = interface_toward(options.socket_ifname, method.host);
    net::SocketAddress src;
    auto *in = reinterpret_cast<sockaddr_in *>(&src.storage);
    in->sin_family = AF_INET;
    inet_pton(AF_INET, chosen.ipv4.c_str(), &in->sin_addr);
    src.length = sizeof(sockaddr_in);
    source_ = src;
    source_name_ = cat(chosen.name, " (", chosen.ipv4, ")");
  }
}

TcpStore::~TcpStore() = default;

// ---- connecting -----------------------------------------------------------------------------

void TcpStore::connect(Deadline deadline) {
  auto start = Clock::now();
  std::string last_problem = "no attempt made";
  int backoff_ms = 10;
  for (;;) {
    if (interrupted_.load()) throw_error(PSTATE_ERR_ABORTED, "connecting to the store at ", url_, ": interrupted");
    std::string resolve_error;
    auto addresses = net::resolve(method_.host, port_, &resolve_error);
    if (addresses.empty()) last_problem = cat("cannot resolve ", method_.host, ": ", resolve_error);
    for (const auto &address : addresses) {
      const net::SocketAddress *source = source_ && source_->family() == address.family() ? &*source_ : nullptr;
      int err = 0;
      net::Fd fd = net::connect_to(address, source, earlier(deadline, Deadline::after_ms(kConnectAttemptMs)), &err);
      if (!fd.valid()) {
        last_problem = cat(address.text(), ": ", std::strerror(err));
        // With an interface named, a refusal of the kernel to connect from it is the interface's
        // fault, not rank 0's: say so, at once when it is certain (EINVAL: a loopback source for
        // an outside address).
        if (source != nullptr && (err == EINVAL || err == ENETUNREACH || err == EHOSTUNREACH || err == EADDRNOTAVAIL)) {
          last_problem =
              cat("interface ", source_name_, " has no route to ", method_.host, " (connect: ", std::strerror(err),
                  "): check PSTATE_SOCKET_IFNAME=", options_.socket_ifname, route_hint(method_.host));
          if (err == EINVAL)
            throw_error(PSTATE_ERR_INVALID_ARGUMENT, "cannot reach the store at ", url_, ": ", last_problem);
        }
        continue;
      }
      adopt_connection(std::move(fd));  // from here on interrupt() reaches it
      if (handshake(fd_, deadline, &last_problem)) {
        connects_.fetch_add(1, std::memory_order_relaxed);
        logger_.info("store: rank ", options_.rank, " connected to ", url_, " from ",
                     net::local_address(fd_.get()).text());
        return;
      }
      drop_connection();
    }
    if (deadline.expired())
      throw_error(PSTATE_ERR_TIMEOUT, "could not reach the store at ", url_, " within ", ms_since(start),
                  " ms: ", last_problem,
                  last_problem.rfind("interface ", 0) == 0
                      ? ""
                      : " (is rank 0 running, and do MASTER_ADDR/MASTER_PORT or init_method name its host and port?)");
    // The pause before the next attempt, in short naps so that interrupt() ends it at once too.
    for (Deadline pause = earlier(deadline, Deadline::after_ms(backoff_ms)); !pause.expired() && !interrupted_.load();)
      net::sleep_until_at_most(10, pause);
    backoff_ms = std::min(backoff_ms * 2, 1000);
  }
}

// Runs the handshake on a fresh connection, within wire::kHandshakeMs (the server closes a
// connection that takes longer; a pstate store answers at once, and so does a foreign line-based
// service, with its own words). Returns false (with the reason) when the server closed the
// connection before answering or the attempt ran out of time, which is worth a retry on a fresh
// connection; throws on a definite refusal.
bool TcpStore::handshake(net::Fd &fd, Deadline open_deadline, std::string *retry_reason) {
  const Deadline deadline = earlier(open_deadline, Deadline::after_ms(wire::kHandshakeMs));
  HandshakeInputs hs;
  hs.rank = options_.rank;
  hs.world_size = options_.world_size;
  crypto::fill_random(hs.client_nonce.data(), hs.client_nonce.size());
  const size_t limit = wire::kMaxTextBytes + 64;
  const std::string what = "the handshake";
  // The server's next answer, or nullopt when the attempt's time ran out first (retried).
  auto next_reply = [&]() -> std::optional<wire::Message> {
    try {
      return read_reply(fd, deadline, limit, what, true);
    } catch (const Error &e) {
      if (e.status() != PSTATE_ERR_TIMEOUT) throw;
      *retry_reason = cat("the store at ", url_, " did not finish the handshake within ", wire::kHandshakeMs,
                          " ms (a busy or stuck store?)");
      return std::nullopt;
    }
  };
  try {
    wire::Hello hello;
    hello.rank = hs.rank;
    hello.world_size = hs.world_size;
    hello.client_nonce = hs.client_nonce;
    hello.pid = static_cast<int64_t>(::getpid());
    hello.job_id = options_.job_id;
    // The preamble and the Hello leave together: the client speaks first.
    Bytes frame(wire::kClientPreamble.begin(), wire::kClientPreamble.end());
    Bytes hello_frame = wire::encode(hello);
    frame.insert(frame.end(), hello_frame.begin(), hello_frame.end());
    int err = 0;
    if (net::send_all(fd.get(), frame.data(), frame.size(), deadline, &err) != net::IoResult::kDone)
      throw_error(PSTATE_ERR_PEER_LOST, "sending hello failed");
    if (!read_server_preamble(fd, deadline, retry_reason)) return false;
    std::optional<wire::Message> reply = next_reply();
    if (!reply) return false;
    wire::Message m = std::move(*reply);
    auto *challenge = std::get_if<wire::Challenge>(&m);
    if (challenge == nullptr) fail_from_reply(m, what);
    if (challenge->token_required && options_.job_token.empty())
      throw_error(PSTATE_ERR_AUTH, "job token refused by the store at ", url_,
                  ": the store requires a job token and this process has none: set PSTATE_JOB_TOKEN to the "
                  "job's token");
    bool store_has_token = challenge->token_required;
    hs.server_nonce = challenge->server_nonce;
    frame = wire::encode(wire::Proof{client_proof(options_.job_token, hs)});
    if (net::send_all(fd.get(), frame.data(), frame.size(), deadline, &err) != net::IoResult::kDone)
      throw_error(PSTATE_ERR_PEER_LOST, "sending proof failed");
    reply = next_reply();
    if (!reply) return false;
    m = std::move(*reply);
    if (auto *fail = std::get_if<wire::Fail>(&m); fail && fail->status == PSTATE_ERR_AUTH)
      throw_error(PSTATE_ERR_AUTH, "job token refused by the store at ", url_,
                  ": set PSTATE_JOB_TOKEN to the job's token",
                  store_has_token ? "" : " (this store has no token: unset PSTATE_JOB_TOKEN, or this is another job's store)");
    auto *welcome = std::get_if<wire::Welcome>(&m);
    if (welcome == nullptr) fail_from_reply(m, cat("joining as rank ", options_.rank));
    if (!crypto::constant_time_equal(welcome->mac, server_proof(options_.job_token, hs)))
      throw_error(PSTATE_ERR_AUTH, "the store at ", url_,
                  " could not prove it holds this job's token: it may be another job's store on the same port");
    world_size_ = welcome->world_size;
    return true;
  } catch (const Error &e) {
    if (e.status() != PSTATE_ERR_PEER_LOST) throw;
    *retry_reason = cat("the store closed the connection during the handshake (", e.what(), ")");
    return false;
  }
}

// Reads the server's line. True when it is the store's; false (with the reason) when the peer
// said nothing in time or closed the connection first, which is worth a retry; throws when the
// peer answered with anything else: it is not a pstate store (or another version of one).
bool TcpStore::read_server_preamble(net::Fd &fd, Deadline deadline, std::string *retry_reason) {
  const std::string_view want = wire::kServerPreamble;
  std::string peer = net::peer_address(fd.get()).text();
  const Deadline &attempt = deadline;  // the handshake's (wire::kHandshakeMs at most)
  Bytes got;
  auto foreign = [&] {
    // What else did it say? A moment more, for the message.
    Deadline more = Deadline::after_ms(100);
    uint8_t buf[128];
    while (got.size() < 200) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, more.remaining_ms()) <= 0) break;
      ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) break;
      got.insert(got.end(), buf, buf + n);
    }
    reset_fd(fd);
    std::string said = printable(got);
    std::string stem(wire::kPreambleStem);
    if (said.rfind(stem, 0) == 0)
      throw_error(PSTATE_ERR_MISMATCH, "the store at ", url_, " speaks another pstate store protocol ('", said,
                  "'; this rank speaks '", printable(Bytes(want.begin(), want.end())),
                  "'): run the same pstate version on every rank");
    throw_error(
        PSTATE_ERR_TRANSPORT, "the service at ", peer, " (", url_, ") is not a pstate store: it answered '", said,
        "' to the store's greeting",
        said.rfind("HTTP/", 0) == 0 || said.find("<html") != std::string::npos ? " (an HTTP server)" : "",
        ": is MASTER_PORT / the init_method port another service's port? Choose a free port for rank 0's store");
  };
  while (got.size() < want.size()) {
    uint8_t buf[64];
    ssize_t n = ::recv(fd.get(), buf, std::min(sizeof buf, want.size() - got.size()), MSG_DONTWAIT);
    if (n > 0) {
      got.insert(got.end(), buf, buf + n);
      if (std::memcmp(got.data(), want.data(), got.size()) != 0) foreign();
      continue;
    }
    if (n == 0) {
      *retry_reason = got.empty() ? cat(peer, " closed the connection without a word (a busy or closing store?)")
                                  : cat(peer, " closed the connection in the middle of the store's greeting");
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *retry_reason = cat(peer, ": ", std::strerror(errno));
      return false;
    }
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, attempt.remaining_ms()) == 0 && attempt.expired()) {
      *retry_reason = cat(peer, " accepted the connection but said nothing for ", wire::kHandshakeMs,
                          " ms: a pstate store answers at once (is it a pstate store, or is rank 0 stuck?)");
      return false;
    }
  }
  return true;
}

// ---- requests -------------------------------------------------------------------------------

uint32_t TcpStore::wait_ms_for(Deadline deadline) const {
  return static_cast<uint32_t>(std::max(0, deadline.remaining_ms()));
}

StoreTraffic TcpStore::traffic() const {
  StoreTraffic t;
  t.requests = requests_.load(std::memory_order_relaxed);
  t.frames = frames_.load(std::memory_order_relaxed);
  t.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  t.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  t.connects = connects_.load(std::memory_order_relaxed);
  return t;
}

// Under mutex_: refuses a call on an interrupted, closed or lost store, and connects if needed.
void TcpStore::begin_call(const std::string &what, Deadline deadline) {
  if (interrupted_.load())
    throw_error(PSTATE_ERR_ABORTED, what, " on the store at ", url_, ": interrupted by this process");
  if (closed_) throw_error(PSTATE_ERR_INVALID_STATE, what, ": the store at ", url_, " was closed by this rank");
  if (lost_) fail_lost(what, lost_detail_);
  if (!fd_.valid()) connect(deadline);
}

// Under mutex_: one request's frame onto the connection, counted (a continuation is a frame of a
// request already counted).
void TcpStore::send_request(const wire::Message &request, Deadline deadline, const std::string &what,
                            bool continuation) {
  Bytes frame = wire::encode(request);
  if (!continuation) requests_.fetch_add(1, std::memory_order_relaxed);
  frames_.fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(frame.size(), std::memory_order_relaxed);
  int err = 0;
  switch (net::send_all(fd_.get(), frame.data(), frame.size(), deadline, &err)) {
    case net::IoResult::kDone:
      return;
    case net::IoResult::kTimeout:
      drop_connection();  // a partial frame is on the wire: this connection is unusable
      throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, ": timed out sending the request");
    case net::IoResult::kClosed:
      fail_lost(what, "connection closed");
    case net::IoResult::kError:
      fail_lost(what, std::strerror(err));
  }
}

wire::Message TcpStore::call(const wire::Message &request, Deadline deadline, const std::string &what,
                             bool continuation, std::optional<Deadline> reply_by) {
  std::lock_guard<std::mutex> lock(mutex_);
  begin_call(what, deadline);
  send_request(request, deadline, what, continuation);
  // The server answers a wait by itself when the wait time passes; the grace covers its reply's
  // trip back. A slice of a longer wait may be answered late by a busy server (one thread, and
  // thousands of ranks arriving at once): that is no failure while the whole wait's deadline
  // holds, so the reply is awaited until then. A client-side timeout means the server is stuck or
  // unreachable for longer than the caller allowed.
  uint32_t wait_ms = wait_ms_for(deadline);
  if (reply_by) wait_ms = std::max(wait_ms, wait_ms_for(*reply_by));
  Deadline reply_deadline = Deadline::after_ms(int64_t{wait_ms} + kReplyGraceMs);
  wire::Message reply = read_reply(fd_, reply_deadline, wire::kMaxFrameBytes, what, false);
  bytes_received_.fetch_add(last_reply_bytes_, std::memory_order_relaxed);
  return reply;
}

std::vector<wire::Message> TcpStore::call_many(const std::vector<wire::Message> &requests, Deadline deadline,
                                                const std::string &what) {
  constexpr size_t kPipelineDepth = 64;  // requests in flight: bounds what waits in the socket buffers
  std::lock_guard<std::mutex> lock(mutex_);
  begin_call(what, deadline);
  std::vector<wire::Message> replies;
  replies.reserve(requests.size());
  const Deadline reply_deadline = Deadline::after_ms(int64_t{wait_ms_for(deadline)} + kReplyGraceMs);
  size_t sent = 0;
  while (replies.size() < requests.size()) {
    for (; sent < requests.size() && sent - replies.size() < kPipelineDepth; ++sent)
      send_request(requests[sent], deadline, what, false);
    replies.push_back(read_reply(fd_, reply_deadline, wire::kMaxFrameBytes, what, false));
    bytes_received_.fetch_add(last_reply_bytes_, std::memory_order_relaxed);
  }
  return replies;
}

wire::Message TcpStore::read_reply(net::Fd &fd, Deadline deadline, size_t limit, const std::string &what,
                                   bool handshaking) {
  auto closed = [&](const std::string &detail) -> wire::Message {
    if (handshaking) throw_error(PSTATE_ERR_PEER_LOST, detail);
    fail_lost(what, detail);
  };
  Bytes frame(wire::kHeaderBytes);
  int err = 0;
  net::IoResult r = net::recv_exact(fd.get(), frame.data(), frame.size(), deadline, &err);
  if (r == net::IoResult::kDone) {
    uint32_t body = uint32_t{frame[0]} | (uint32_t{frame[1]} << 8) | (uint32_t{frame[2]} << 16) |
                    (uint32_t{frame[3]} << 24);
    if (body > limit) {
      reset_fd(fd);
      throw_error(PSTATE_ERR_TRANSPORT, what, ": the peer at ", url_, " sent a ", body,
                  "-byte frame: it does not speak the pstate store protocol");
    }
    frame.resize(wire::kHeaderBytes + body);
    r = net::recv_exact(fd.get(), frame.data() + wire::kHeaderBytes, body, deadline, &err);
  }
  if (r == net::IoResult::kTimeout) {
    reset_fd(fd);
    throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, ": no reply in time");
  }
  if (r == net::IoResult::kClosed) return closed("connection closed");
  if (r == net::IoResult::kError) return closed(std::strerror(err));
  last_reply_bytes_ = frame.size();
  wire::Decoded d = wire::decode_frame(frame, limit);
  if (d.status != wire::DecodeStatus::kFrame) {
    reset_fd(fd);
    throw_error(PSTATE_ERR_TRANSPORT, what, ": the peer at ", url_,
                " does not speak the pstate store protocol (", d.error, ")");
  }
  return std::move(d.message);
}

void TcpStore::fail_lost(const std::string &what, const std::string &detail) {
  drop_connection();
  if (interrupted_.load())  // interrupt() shut the connection down: not a lost store
    throw_error(PSTATE_ERR_ABORTED, what, " on the store at ", url_, ": interrupted by this process");
  lost_ = true;
  lost_detail_ = detail;
  throw_error(PSTATE_ERR_PEER_LOST, what, ": the store at ", url_, " is gone (", detail, "): ",
              options_.serve ? "rank 0, which serves it, has exited or was killed"
                             : "the process that serves it has exited or was killed");
}

void TcpStore::fail_from_reply(const wire::Message &reply, const std::string &what) {
  if (auto *fail = std::get_if<wire::Fail>(&reply)) {
    auto status = static_cast<pstate_status_t>(fail->status);
    if (fail->status > PSTATE_ERR_INTERNAL || fail->status == PSTATE_OK) status = PSTATE_ERR_TRANSPORT;
    // The whole job failed (another rank was refused): that is the news, this call is context.
    if (fail->text.rfind(wire::kJobFailedPrefix, 0) == 0)
      throw_error(status, fail->text, " (told by the store at ", url_, " in ", what, ")");
    throw_error(status, what, ": the store at ", url_, " refused: ", fail->text);
  }
  drop_connection();
  throw_error(PSTATE_ERR_TRANSPORT, what, ": the store at ", url_, " answered '", wire::op_name(wire::op_of(reply)),
              "', which makes no sense here (a pstate version mismatch?)");
}

void TcpStore::set(const std::string &key, const Bytes &value, Deadline deadline) {
  validate_key(key);
  validate_value(key, value);
  std::string what = cat("set(", quote_key(key), ")");
  wire::Message reply = call(wire::Set{key, value}, deadline, what);
  if (!std::holds_alternative<wire::Ok>(reply)) fail_from_reply(reply, what);
}

// Sends request(slice) until it is answered with anything but TimedOut or the deadline passes;
// each timed-out slice is logged (INFO) when the store says ranks are missing. Returns the last
// reply (a TimedOut when the deadline passed).
wire::Message TcpStore::wait_in_slices(const std::string &what, Deadline deadline,
                                       const std::function<wire::Message(uint32_t wait_ms, bool continuation)> &request) {
  auto start = Clock::now();
  for (bool continuation = false;; continuation = true) {
    Deadline slice = earlier(deadline, Deadline::after_ms(slice_ms_));
    wire::Message reply = request(wait_ms_for(slice), continuation);
    auto *t = std::get_if<wire::TimedOut>(&reply);
    if (t == nullptr || deadline.expired()) return reply;
    if (!t->waiting_for.empty())
      logger_.info("store: ", what, " waiting ", ms_since(start) / 1000, " s: ", t->joined, " of ", world_size_,
                   " ranks joined; waiting for ", t->waiting_for, " (", t->absent, ")");
  }
}

void TcpStore::fail_waiting(const wire::TimedOut &t, const std::string &what, int64_t waited_ms,
                            const std::string &keys_text) {
  if (t.absent.empty())
    throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, " ", timed_out_after(waited_ms), ": ", keys_text);
  throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, " ", timed_out_after(waited_ms), ": ", t.absent,
              " (", keys_text, ")");
}

Bytes TcpStore::get(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::string what = cat("get(", quote_key(key), ")");
  auto start = Clock::now();
  const bool spent = deadline.expired();
  wire::Message reply = wait_in_slices(what, deadline, [&](uint32_t wait_ms, bool continuation) {
    return call(wire::Get{key, wait_ms}, Deadline::after_ms(wait_ms), what, continuation, deadline);
  });
  if (auto *v = std::get_if<wire::Value>(&reply)) return std::move(v->value);
  if (auto *t = std::get_if<wire::TimedOut>(&reply))
    fail_waiting(*t, what, waited_for_timeout(start, spent),
                 cat("waiting for key ", quote_key(key), " (did the rank that sets it fail or not start?)"));
  fail_from_reply(reply, what);
}

std::vector<Bytes> TcpStore::get_many(const std::vector<std::string> &keys, Deadline deadline) {
  std::vector<wire::Message> requests;
  requests.reserve(keys.size());
  for (const auto &k : keys) {
    validate_key(k);
    requests.push_back(wire::Get{k, wait_ms_for(deadline)});
  }
  std::string what = cat("get of ", keys.size(), " keys (", quote_keys(keys, keys.size(), 3), ")");
  auto start = Clock::now();
  const bool spent = deadline.expired();
  std::vector<wire::Message> replies = call_many(requests, deadline, what);
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    if (auto *v = std::get_if<wire::Value>(&replies[i])) {
      out.push_back(std::move(v->value));
      continue;
    }
    std::string one = cat("get(", quote_key(keys[i]), ")");
    if (auto *t = std::get_if<wire::TimedOut>(&replies[i]))
      fail_waiting(*t, one, waited_for_timeout(start, spent),
                   cat("waiting for key ", quote_key(keys[i]), " (did the rank that sets it fail or not start?)"));
    fail_from_reply(replies[i], one);
  }
  return out;
}

void TcpStore::set_many(const std::vector<std::pair<std::string, Bytes>> &items, Deadline deadline) {
  std::vector<wire::Message> requests;
  requests.reserve(items.size());
  for (const auto &[k, v] : items) {
    validate_key(k);
    validate_value(k, v);
    requests.push_back(wire::Set{k, v});
  }
  std::vector<std::string> keys;
  for (size_t i = 0; i < items.size() && i < 3; ++i) keys.push_back(items[i].first);
  std::string what = cat("set of ", items.size(), " keys (", quote_keys(keys, items.size(), 3), ")");
  std::vector<wire::Message> replies = call_many(requests, deadline, what);
  for (size_t i = 0; i < replies.size(); ++i)
    if (!std::holds_alternative<wire::Ok>(replies[i])) fail_from_reply(replies[i], cat("set(", quote_key(items[i].first), ")"));
}

int64_t TcpStore::add(const std::string &key, int64_t delta, Deadline deadline) {
  validate_key(key);
  std::string what = cat("add(", quote_key(key), ", ", delta, ")");
  wire::Message reply = call(wire::Add{key, delta}, deadline, what);
  if (auto *i = std::get_if<wire::Int>(&reply)) return i->value;
  fail_from_reply(reply, what);
}

void TcpStore::wait(const std::vector<std::string> &keys, Deadline deadline) {
  if (keys.empty()) return;
  for (const auto &k : keys) validate_key(k);
  std::string what = cat("wait(", quote_keys(keys, keys.size(), 3), ")");
  auto start = Clock::now();
  const bool spent = deadline.expired();
  wire::Message reply = wait_in_slices(what, deadline, [&](uint32_t wait_ms, bool continuation) {
    return call(wire::Wait{keys, wait_ms}, Deadline::after_ms(wait_ms), what, continuation, deadline);
  });
  if (std::holds_alternative<wire::Ok>(reply)) return;
  if (auto *t = std::get_if<wire::TimedOut>(&reply))
    throw_wait_timeout(what, url_, waited_for_timeout(start, spent), t->absent, t->missing, t->missing_count,
                       keys.size());
  fail_from_reply(reply, what);
}

bool TcpStore::check(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::string what = cat("check(", quote_key(key), ")");
  wire::Message reply = call(wire::Check{{key}}, deadline, what);
  if (auto *b = std::get_if<wire::Bool>(&reply)) return b->value;
  fail_from_reply(reply, what);
}

Bytes TcpStore::set_if_absent(const std::string &key, const Bytes &value, Deadline deadline) {
  validate_key(key);
  validate_value(key, value);
  std::string what = cat("set_if_absent(", quote_key(key), ")");
  wire::Message reply = call(wire::SetIfAbsent{key, value}, deadline, what);
  if (auto *v = std::get_if<wire::Value>(&reply)) return std::move(v->value);
  fail_from_reply(reply, what);
}

std::optional<std::vector<int>> TcpStore::members(Deadline deadline) {
  const std::string what = "members()";
  wire::Message reply = call(wire::Members{}, deadline, what);
  if (auto *v = std::get_if<wire::Value>(&reply)) {
    std::vector<int> ranks(v->value.size() / 4);
    for (size_t i = 0; i < ranks.size(); ++i) {
      uint32_t r = 0;
      for (int b = 0; b < 4; ++b) r |= static_cast<uint32_t>(v->value[i * 4 + b]) << (8 * b);
      ranks[i] = static_cast<int>(r);
    }
    return ranks;
  }
  fail_from_reply(reply, what);
}

bool TcpStore::close(Deadline deadline) {
  bool everyone_left = true;
  if (server_) {
    // Our own rank is the one that stays until the others have gone; observers do not count.
    everyone_left = server_->wait_for_ranks_at_most(1, deadline);
    if (!everyone_left)
      logger_.warn("store: closing ", url_, " while ", server_->stats().ranks - 1,
                   " other ranks are still connected (they will see PEER_LOST)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  drop_connection();
  closed_ = true;
  if (server_) logger_.info("store: server ", url_, " at close: ", describe_server_traffic(server_->stats()));
  server_.reset();
  return everyone_left;
}

void TcpStore::interrupt() noexcept {
  interrupted_.store(true);
  std::lock_guard<std::mutex> guard(fd_guard_);
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);  // wakes the poll of a blocked call
}

void TcpStore::adopt_connection(net::Fd fd) {
  std::lock_guard<std::mutex> guard(fd_guard_);
  fd_ = std::move(fd);
  if (interrupted_.load()) ::shutdown(fd_.get(), SHUT_RDWR);  // interrupt() came first, saw no fd
}

void TcpStore::drop_connection() noexcept {
  std::lock_guard<std::mutex> guard(fd_guard_);
  fd_.reset();
}

void TcpStore::reset_fd(net::Fd &fd) noexcept {
  if (&fd == &fd_)
    drop_connection();
  else
    fd.reset();
}

void TcpStore::abandon(pstate_status_t status, const std::string &why) noexcept {
  try {
    // The server answers the ranks that wait before it answers this; the serving rank may then
    // close the server at once.
    call(wire::Abandon{static_cast<uint32_t>(status), why.substr(0, wire::kMaxTextBytes)}, Deadline::after_ms(1000),
         "abandon");
  } catch (const std::exception &) {
    // the store is gone or stuck: the others will time out, naming this rank
  }
}

bool TcpStore::erase(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::string what = cat("erase(", quote_key(key), ")");
  wire::Message reply = call(wire::Erase{key}, deadline, what);
  if (auto *b = std::get_if<wire::Bool>(&reply)) return b->value;
  fail_from_reply(reply, what);
}

}  // namespace pstate
