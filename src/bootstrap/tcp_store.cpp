// tcp_store.cpp — the TCP store's client (see tcp_store.hpp).
#include "bootstrap/tcp_store.hpp"

#include "bootstrap/handshake.hpp"
#include "bootstrap/hmac_sha256.hpp"
#include "bootstrap/netif.hpp"
#include "common/error.hpp"

#include <arpa/inet.h>

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

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

Deadline earlier(Deadline a, Deadline b) { return a.at() < b.at() ? a : b; }

}  // namespace

std::unique_ptr<TcpStore> TcpStore::open(const StoreOptions &options, const InitMethod &method, const Logger &logger) {
  std::unique_ptr<TcpStore> store(new TcpStore(options, method, logger));
  store->connect(Deadline::after_ms(options.timeout_ms));
  return store;
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
    so.owner_rank = 0;
    server_ = TcpStoreServer::start(so, logger);
    port_ = server_->port();
  }
  if (port_ == 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", method.url(),
                ": port 0 (any free port) only works on the rank that serves the store; the others must "
                "know its port");
  InitMethod actual = method;
  actual.port = port_;
  url_ = actual.url();
  if (!options.socket_ifname.empty()) {
    net::SocketAddress src;
    auto *in = reinterpret_cast<sockaddr_in *>(&src.storage);
    in->sin_family = AF_INET;
    inet_pton(AF_INET, ipv4_address_of(options.socket_ifname).c_str(), &in->sin_addr);
    src.length = sizeof(sockaddr_in);
    source_ = src;
  }
}

TcpStore::~TcpStore() = default;

// ---- connecting -----------------------------------------------------------------------------

void TcpStore::connect(Deadline deadline) {
  auto start = Clock::now();
  std::string last_problem = "no attempt made";
  int backoff_ms = 10;
  for (;;) {
    std::string resolve_error;
    auto addresses = net::resolve(method_.host, port_, &resolve_error);
    if (addresses.empty()) last_problem = cat("cannot resolve ", method_.host, ": ", resolve_error);
    for (const auto &address : addresses) {
      const net::SocketAddress *source = source_ && source_->family() == address.family() ? &*source_ : nullptr;
      int err = 0;
      net::Fd fd = net::connect_to(address, source, earlier(deadline, Deadline::after_ms(kConnectAttemptMs)), &err);
      if (!fd.valid()) {
        last_problem = cat(address.text(), ": ", std::strerror(err));
        continue;
      }
      if (handshake(fd, deadline, &last_problem)) {
        fd_ = std::move(fd);
        logger_.info("store: rank ", options_.rank, " connected to ", url_, " from ",
                     net::local_address(fd_.get()).text());
        return;
      }
    }
    if (deadline.expired())
      throw_error(PSTATE_ERR_TIMEOUT, "could not reach the store at ", url_, " within ", ms_since(start), " ms: ",
                  last_problem, " (is rank 0 running, and do MASTER_ADDR/MASTER_PORT or init_method name its "
                  "host and port?)");
    net::sleep_until_at_most(backoff_ms, deadline);
    backoff_ms = std::min(backoff_ms * 2, 1000);
  }
}

// Runs the handshake on a fresh connection. Returns false (with the reason) when the server closed
// the connection before answering, which is worth a retry; throws on a definite refusal.
bool TcpStore::handshake(net::Fd &fd, Deadline deadline, std::string *retry_reason) {
  HandshakeInputs hs;
  hs.rank = options_.rank;
  hs.world_size = options_.world_size;
  crypto::fill_random(hs.client_nonce.data(), hs.client_nonce.size());
  const size_t limit = wire::kMaxTextBytes + 64;
  const std::string what = "the handshake";
  try {
    wire::Hello hello;
    hello.rank = hs.rank;
    hello.world_size = hs.world_size;
    hello.client_nonce = hs.client_nonce;
    Bytes frame = wire::encode(hello);
    int err = 0;
    if (net::send_all(fd.get(), frame.data(), frame.size(), deadline, &err) != net::IoResult::kDone)
      throw_error(PSTATE_ERR_PEER_LOST, "sending hello failed");
    wire::Message m = read_reply(fd, deadline, limit, what, true);
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
    m = read_reply(fd, deadline, limit, what, true);
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

// ---- requests -------------------------------------------------------------------------------

uint32_t TcpStore::wait_ms_for(Deadline deadline) const {
  return static_cast<uint32_t>(std::max(0, deadline.remaining_ms()));
}

wire::Message TcpStore::call(const wire::Message &request, Deadline deadline, const std::string &what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) throw_error(PSTATE_ERR_INVALID_STATE, what, ": the store at ", url_, " was closed by this rank");
  if (lost_) fail_lost(what, lost_detail_);
  if (!fd_.valid()) connect(deadline);
  Bytes frame = wire::encode(request);
  int err = 0;
  switch (net::send_all(fd_.get(), frame.data(), frame.size(), deadline, &err)) {
    case net::IoResult::kDone:
      break;
    case net::IoResult::kTimeout:
      fd_.reset();  // a partial frame is on the wire: this connection is unusable
      throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, ": timed out sending the request");
    case net::IoResult::kClosed:
      fail_lost(what, "connection closed");
    case net::IoResult::kError:
      fail_lost(what, std::strerror(err));
  }
  // The server answers a wait by itself when the wait time passes; the grace covers its reply's
  // trip back, so a client-side timeout means the server is stuck or unreachable.
  uint32_t wait_ms = wait_ms_for(deadline);
  Deadline reply_deadline = Deadline::after_ms(int64_t{wait_ms} + kReplyGraceMs);
  return read_reply(fd_, reply_deadline, wire::kMaxFrameBytes, what, false);
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
      fd.reset();
      throw_error(PSTATE_ERR_TRANSPORT, what, ": the peer at ", url_, " sent a ", body,
                  "-byte frame: it does not speak the pstate store protocol");
    }
    frame.resize(wire::kHeaderBytes + body);
    r = net::recv_exact(fd.get(), frame.data() + wire::kHeaderBytes, body, deadline, &err);
  }
  if (r == net::IoResult::kTimeout) {
    fd.reset();
    throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, ": no reply in time");
  }
  if (r == net::IoResult::kClosed) return closed("connection closed");
  if (r == net::IoResult::kError) return closed(std::strerror(err));
  wire::Decoded d = wire::decode_frame(frame, limit);
  if (d.status != wire::DecodeStatus::kFrame) {
    fd.reset();
    throw_error(PSTATE_ERR_TRANSPORT, what, ": the peer at ", url_,
                " does not speak the pstate store protocol (", d.error, ")");
  }
  return std::move(d.message);
}

void TcpStore::fail_lost(const std::string &what, const std::string &detail) {
  lost_ = true;
  lost_detail_ = detail;
  fd_.reset();
  throw_error(PSTATE_ERR_PEER_LOST, what, ": the store at ", url_, " is gone (", detail, "): ",
              options_.serve ? "rank 0, which serves it, has exited or was killed"
                             : "the process that serves it has exited or was killed");
}

void TcpStore::fail_from_reply(const wire::Message &reply, const std::string &what) {
  if (auto *fail = std::get_if<wire::Fail>(&reply)) {
    auto status = static_cast<pstate_status_t>(fail->status);
    if (fail->status > PSTATE_ERR_INTERNAL || fail->status == PSTATE_OK) status = PSTATE_ERR_TRANSPORT;
    throw_error(status, what, ": the store at ", url_, " refused: ", fail->text);
  }
  fd_.reset();
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

Bytes TcpStore::get(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::string what = cat("get(", quote_key(key), ")");
  auto start = Clock::now();
  wire::Message reply = call(wire::Get{key, wait_ms_for(deadline)}, deadline, what);
  if (auto *v = std::get_if<wire::Value>(&reply)) return std::move(v->value);
  if (std::holds_alternative<wire::TimedOut>(reply))
    throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, " timed out after ", ms_since(start),
                " ms waiting for key ", quote_key(key), " (did the rank that sets it fail or not start?)");
  fail_from_reply(reply, what);
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
  wire::Message reply = call(wire::Wait{keys, wait_ms_for(deadline)}, deadline, what);
  if (std::holds_alternative<wire::Ok>(reply)) return;
  if (auto *t = std::get_if<wire::TimedOut>(&reply))
    throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, " timed out after ", ms_since(start), " ms: ",
                t->missing_count, " of ", keys.size(), " keys never set: ", quote_keys(t->missing, t->missing_count));
  fail_from_reply(reply, what);
}

bool TcpStore::check(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::string what = cat("check(", quote_key(key), ")");
  wire::Message reply = call(wire::Check{{key}}, deadline, what);
  if (auto *b = std::get_if<wire::Bool>(&reply)) return b->value;
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
  fd_.reset();
  closed_ = true;
  server_.reset();
  return everyone_left;
}

bool TcpStore::erase(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::string what = cat("erase(", quote_key(key), ")");
  wire::Message reply = call(wire::Erase{key}, deadline, what);
  if (auto *b = std::get_if<wire::Bool>(&reply)) return b->value;
  fail_from_reply(reply, what);
}

}  // namespace pstate
