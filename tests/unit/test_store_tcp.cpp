// test_store_tcp.cpp — what only the TCP store does, over real sockets on 127.0.0.1 (ephemeral
// ports): waits parked server-side; requests pipelined; strangers sending garbage, oversized frames
// or requests before the handshake, and floods of them; the handshake's token proof; the refusals
// the server notes; the serving rank's close; a server of its own; the server killed under its
// clients; clients that start before the server; ports, addresses and interfaces. What every
// store does (set, get, add, wait, rank claims, tokens, refusals, absent ranks) is
// test_store_contract.cpp's, which CTest runs over this store as test_store_contract_tcp. Every
// wait has a deadline and every child a time limit, so a bug fails a test instead of hanging it.
#include "bootstrap/handshake.hpp"
#include "bootstrap/crypto.hpp"
#include "bootstrap/init_method.hpp"
#include "bootstrap/roster.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/tcp_store.hpp"
#include "bootstrap/wire.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <optional>
#include <thread>

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using pstest::ChildBody;
using pstest::expect_error;
using pstest::kLongMs;
using pstest::soon;

namespace {

StoreOptions options_for(int rank, int world, int port, const std::string &token = "", const std::string &host = "127.0.0.1") {
  StoreOptions o;
  InitMethod m;
  m.kind = InitMethod::Kind::kTcp;
  m.host = host;
  m.port = port;
  o.init_method = m.url();
  o.rank = rank;
  o.world_size = world;
  o.job_token = token;
  o.timeout_ms = kLongMs;
  return o;
}

std::unique_ptr<TcpStore> open_tcp(const StoreOptions &o) {
  return TcpStore::open(o, parse_init_method(o.init_method), Logger(LogLevel::kNone));
}

// Rank 0 of a world, serving on a fresh port of 127.0.0.1.
std::unique_ptr<TcpStore> serve(int world, const std::string &token = "") {
  return open_tcp(options_for(0, world, 0, token));
}

std::unique_ptr<TcpStore> join(const TcpStore &server, int rank, int world, const std::string &token = "") {
  return open_tcp(options_for(rank, world, server.port(), token));
}

// Polls cond every millisecond until it holds; fails the test if it does not within kLongMs.
template <typename Cond>
void wait_until(Cond cond) {
  Deadline d = Deadline::after_ms(kLongMs);
  while (!cond()) {
    assert_false(d.expired());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- a raw client, to speak the protocol wrong on purpose ----------------------------------

// Connects; with `greet`, exchanges the preambles first (the client's line, the server's line), as
// every pstate client does, so what follows is frames.
net::Fd raw_connect(int port, bool greet = true) {
  std::string error;
  auto addrs = net::resolve("127.0.0.1", port, &error);
  assert_false(addrs.empty());
  int err = 0;
  net::Fd fd = net::connect_to(addrs.front(), nullptr, soon(), &err);
  assert_true(fd.valid());
  if (!greet) return fd;
  Bytes line(wire::kClientPreamble.begin(), wire::kClientPreamble.end());
  assert_int_equal(static_cast<int>(net::send_all(fd.get(), line.data(), line.size(), soon(), &err)),
                   static_cast<int>(net::IoResult::kDone));
  Bytes answer(wire::kServerPreamble.size());
  assert_int_equal(static_cast<int>(net::recv_exact(fd.get(), answer.data(), answer.size(), soon(), &err)),
                   static_cast<int>(net::IoResult::kDone));
  assert_true(std::string(answer.begin(), answer.end()) == wire::kServerPreamble);
  return fd;
}

void raw_send(int fd, const Bytes &b) {
  int err = 0;
  assert_int_equal(static_cast<int>(net::send_all(fd, b.data(), b.size(), soon(), &err)),
                   static_cast<int>(net::IoResult::kDone));
}

// The next frame from the server, or nullopt when it closed the connection first.
std::optional<wire::Message> raw_read(int fd) {
  Bytes header(4);
  int err = 0;
  auto r = net::recv_exact(fd, header.data(), 4, soon(), &err);
  assert_int_not_equal(static_cast<int>(r), static_cast<int>(net::IoResult::kTimeout));
  if (r != net::IoResult::kDone) return std::nullopt;
  uint32_t n = header[0] | (header[1] << 8) | (header[2] << 16) | (uint32_t(header[3]) << 24);
  assert_true(n <= wire::kMaxFrameBytes);
  header.resize(4 + n);
  r = net::recv_exact(fd, header.data() + 4, n, soon(), &err);
  if (r != net::IoResult::kDone) return std::nullopt;
  wire::Decoded d = wire::decode_frame(header, wire::kMaxFrameBytes);
  assert_int_equal(static_cast<int>(d.status), static_cast<int>(wire::DecodeStatus::kFrame));
  return std::move(d.message);
}

// True once the server has closed fd (any bytes it sent before are discarded), false when it did
// not by the deadline.
bool closed_by_server(int fd, Deadline d = soon()) {
  uint8_t buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, d.remaining_ms()) <= 0) return false;
    ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
    if (got < 0) return false;
  }
}

// Runs the handshake by hand; returns the server's last answer (Welcome or Fail).
wire::Message raw_join(int fd, const std::string &token, int rank, int world, const wire::Mac *forced_mac = nullptr) {
  HandshakeInputs hs;
  hs.rank = rank;
  hs.world_size = world;
  hs.client_nonce.fill(5);
  wire::Hello hello;
  hello.rank = rank;
  hello.world_size = world;
  hello.client_nonce = hs.client_nonce;
  raw_send(fd, wire::encode(hello));
  auto challenge = raw_read(fd);
  assert_true(challenge && std::holds_alternative<wire::Challenge>(*challenge));
  hs.server_nonce = std::get<wire::Challenge>(*challenge).server_nonce;
  raw_send(fd, wire::encode(wire::Proof{forced_mac ? *forced_mac : client_proof(token, hs)}));
  auto answer = raw_read(fd);
  assert_true(answer.has_value());
  return *answer;
}

// A port on 127.0.0.1 that is bound but not listening: connecting to it is refused, as when
// rank 0 has not started yet, and nobody else can take the port while fd is open.
int reserve_port(net::Fd *fd) {
  fd->reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(::bind(fd->get(), reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  return net::local_address(fd->get()).port();
}

// A pipe through which rank 0's child tells the other children its port.
struct PortPipe {
  int fds[2] = {-1, -1};
  PortPipe() { assert_int_equal(::pipe(fds), 0); }
  ~PortPipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void publish(int port, int readers) {
    for (int i = 0; i < readers; ++i) (void)!::write(fds[1], &port, sizeof port);
  }
  int receive() {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, kLongMs) != 1) return -1;
    int port = -1;
    if (::read(fds[0], &port, sizeof port) != sizeof port) return -1;
    return port;
  }
};

// ---- waits parked on the server ----------------------------------------------------------------

void test_tcp_get_is_parked_on_the_server_until_a_set(void **) {
  auto rank0 = serve(2);
  std::string got;
  std::thread reader([&] {
    try {
      got = text_of(join(*rank0, 1, 2)->get("late/key", soon()));
    } catch (const Error &e) {
      got = std::string("error: ") + e.what();
    }
  });
  // The get is parked on the server before the key exists...
  wait_until([&] { return rank0->server()->stats().parked_requests == 1; });
  assert_false(rank0->check("late/key", soon()));
  // ...and answered by the set.
  rank0->set("late/key", bytes_of("worth the wait"), soon());
  reader.join();
  assert_string_equal(got.c_str(), "worth the wait");
}

void test_tcp_parked_waits_of_many_clients_are_released_by_one_set(void **) {
  constexpr int kWaiters = 3;
  auto rank0 = serve(kWaiters + 1);
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int rank = 1; rank <= kWaiters; ++rank)
    threads.emplace_back([&, rank] {
      try {
        join(*rank0, rank, kWaiters + 1)->wait({"go"}, soon());
        ++released;
      } catch (const Error &e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
    });
  wait_until([&] { return rank0->server()->stats().parked_requests == kWaiters; });
  rank0->set("go", bytes_of("1"), soon());
  for (auto &t : threads) t.join();
  assert_int_equal(released.load(), kWaiters);
}

// A wait for several keys is answered only when all of them exist at once: keys set out of order,
// one of them erased after the server had seen it, and set again. (The server files a waiting
// request under one missing key at a time and the next one when that key comes: this is the case
// where a key it has passed is gone again.)
void test_tcp_wait_for_several_keys_sees_every_key_even_one_erased_again(void **) {
  auto rank0 = serve(2);
  std::atomic<bool> answered{false};
  std::string error;
  std::thread waiter([&] {
    try {
      join(*rank0, 1, 2)->wait({"k/a", "k/b", "k/c"}, soon());
      answered = true;
    } catch (const Error &e) {
      error = e.what();
    }
  });
  wait_until([&] { return rank0->server()->stats().parked_requests == 1; });
  auto still_parked = [&] {
    (void)rank0->check("k/none", soon());  // served in a later turn: the stats include the set's
    return rank0->server()->stats().parked_requests == 1 && !answered.load();
  };
  rank0->set("k/c", bytes_of("c"), soon());
  assert_true(still_parked());
  rank0->set("k/a", bytes_of("a"), soon());
  assert_true(still_parked());
  assert_true(rank0->erase("k/a", soon()));
  rank0->set("k/b", bytes_of("b"), soon());
  assert_true(still_parked());
  rank0->set("k/a", bytes_of("a again"), soon());
  waiter.join();
  assert_string_equal(error.c_str(), "");
  assert_true(answered.load());
  (void)rank0->check("k/none", soon());
  assert_int_equal(rank0->server()->stats().parked_requests, 0);
}

// ---- deadlines --------------------------------------------------------------------------------

void test_tcp_unreachable_store_times_out_naming_the_address(void **) {
  net::Fd reserved;
  int port = reserve_port(&reserved);
  StoreOptions o = options_for(1, 2, port);
  o.timeout_ms = 300;
  expect_error([&] { open_tcp(o); }, PSTATE_ERR_TIMEOUT,
               {"could not reach the store at tcp://127.0.0.1:" + std::to_string(port), "refused"});
}

// ---- strangers and broken frames --------------------------------------------------------------

void test_tcp_garbage_bytes_close_only_that_connection(void **) {
  auto rank0 = serve(2);
  net::Fd stranger = raw_connect(rank0->port(), /*greet=*/false);
  raw_send(stranger.get(), bytes_of("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  assert_true(closed_by_server(stranger.get()));
  // The store still serves its members and admits new ones.
  rank0->set("k", bytes_of("v"), soon());
  auto rank1 = join(*rank0, 1, 2);
  assert_string_equal(text_of(rank1->get("k", soon())).c_str(), "v");
  assert_true(rank0->server()->stats().dropped >= 1);
}

void test_tcp_oversized_frame_closes_only_that_connection(void **) {
  auto rank0 = serve(1);
  net::Fd stranger = raw_connect(rank0->port());
  // Announces a 4 GiB hello; the server must not wait for (or allocate) it.
  raw_send(stranger.get(), Bytes{0x00, 0xff, 0xff, 0xff, static_cast<uint8_t>(wire::Op::kHello)});
  assert_true(closed_by_server(stranger.get()));
  rank0->set("still", bytes_of("serving"), soon());
  assert_string_equal(text_of(rank0->get("still", soon())).c_str(), "serving");
}

void test_tcp_member_sending_bad_frames_is_dropped_and_others_continue(void **) {
  auto rank0 = serve(2);
  // A member (it passed the handshake) that then sends an unknown opcode...
  net::Fd a = raw_connect(rank0->port());
  assert_true(std::holds_alternative<wire::Welcome>(raw_join(a.get(), "", -1, 0)));
  raw_send(a.get(), Bytes{1, 0, 0, 0, 99});
  assert_true(closed_by_server(a.get()));
  // ...and one announcing a frame over the 64 MiB limit.
  net::Fd b = raw_connect(rank0->port());
  assert_true(std::holds_alternative<wire::Welcome>(raw_join(b.get(), "", 1, 2)));
  uint32_t too_big = static_cast<uint32_t>(wire::kMaxFrameBytes + 1);
  raw_send(b.get(), Bytes{uint8_t(too_big), uint8_t(too_big >> 8), uint8_t(too_big >> 16), uint8_t(too_big >> 24),
                          static_cast<uint8_t>(wire::Op::kSet)});
  assert_true(closed_by_server(b.get()));
  // Rank 1's claim went with its connection; the store serves on.
  auto rank1 = join(*rank0, 1, 2);
  rank1->set("x", bytes_of("y"), soon());
  assert_string_equal(text_of(rank0->get("x", soon())).c_str(), "y");
}

void test_tcp_request_before_handshake_gets_nothing(void **) {
  auto rank0 = serve(1);
  rank0->set("secret", bytes_of("value"), soon());
  net::Fd stranger = raw_connect(rank0->port());
  raw_send(stranger.get(), wire::encode(wire::Get{"secret", 0}));
  assert_false(raw_read(stranger.get()).has_value());  // closed, no value
}

void test_tcp_other_protocol_version_is_mismatch(void **) {
  auto rank0 = serve(1);
  net::Fd c = raw_connect(rank0->port());
  wire::Hello hello;
  hello.version = 99;
  hello.rank = 0;
  hello.world_size = 1;
  raw_send(c.get(), wire::encode(hello));
  auto answer = raw_read(c.get());
  assert_true(answer && std::holds_alternative<wire::Fail>(*answer));
  assert_int_equal(std::get<wire::Fail>(*answer).status, PSTATE_ERR_MISMATCH);
  assert_true(closed_by_server(c.get()));
}

// ---- floods: strangers that never finish the handshake ----------------------------------------

// n connections to port, held open, each having sent `first` (nothing when empty).
std::vector<net::Fd> open_flood(int port, int n, const Bytes &first = {}) {
  std::vector<net::Fd> flood;
  for (int i = 0; i < n; ++i) {
    flood.push_back(raw_connect(port, /*greet=*/false));
    if (!first.empty()) ::send(flood.back().get(), first.data(), first.size(), MSG_NOSIGNAL);
  }
  return flood;
}

// Issue 27, item 10: a process without the token holds 400 silent connections, 20 that stop
// inside the greeting, 20 that send garbage and 20 that say Hello but never prove the token.
// A rank with the token still joins and works, and so does an observer, within a deadline far
// below the old 30 s handshake limit (before: the flood held every one of the store's 2 * world
// + 256 connections, so the rank was refused until its TIMEOUT).
void test_tcp_flood_of_strangers_leaves_room_for_the_job(void **) {
  const std::string token = "flood-token";
  auto rank0 = serve(2, token);
  const int port = rank0->port();
  std::vector<net::Fd> hellos;
  for (int i = 0; i < 20; ++i) {
    hellos.push_back(raw_connect(port));
    wire::Hello hello;
    hello.rank = 1;
    hello.world_size = 2;
    raw_send(hellos.back().get(), wire::encode(hello));
  }
  auto partial = open_flood(port, 20, Bytes(wire::kClientPreamble.begin(), wire::kClientPreamble.begin() + 10));
  auto garbage = open_flood(port, 20, bytes_of("\x16\x03\x01 not a pstate store client"));
  auto silent = open_flood(port, 400);

  StoreOptions o = options_for(1, 2, port, token);
  o.timeout_ms = 10000;
  auto rank1 = open_tcp(o);
  rank1->set("after-the-flood", bytes_of("joined"), soon());
  assert_string_equal(text_of(rank0->get("after-the-flood", soon())).c_str(), "joined");
  StoreOptions watcher = options_for(-1, 0, port, token);
  watcher.timeout_ms = 10000;
  auto observer = open_tcp(watcher);
  assert_string_equal(text_of(observer->get("after-the-flood", soon())).c_str(), "joined");
  // The flood holds no more than the handshake budget (world + 64); the rest was shed.
  StoreServerStats s = rank0->server()->stats();
  assert_true(s.handshaking <= 2 + 64);
  assert_true(s.shed >= 440 - (2 + 64));
  assert_int_equal(s.members, 3);
}

// The hand-made first half of a handshake: preambles, Hello; returns what the Proof needs.
HandshakeInputs raw_hello(int fd, int rank, int world) {
  HandshakeInputs hs;
  hs.rank = rank;
  hs.world_size = world;
  hs.client_nonce.fill(7);
  wire::Hello hello;
  hello.rank = rank;
  hello.world_size = world;
  hello.client_nonce = hs.client_nonce;
  raw_send(fd, wire::encode(hello));
  auto challenge = raw_read(fd);
  assert_true(challenge && std::holds_alternative<wire::Challenge>(*challenge));
  hs.server_nonce = std::get<wire::Challenge>(*challenge).server_nonce;
  return hs;
}

// The order of shedding (tcp_store_server.cpp): silent newcomers over the budget shed each other,
// never a client that has said its Hello and owes its Proof, however old it is; that client then
// finishes and is a member.
void test_tcp_silent_newcomers_never_shed_a_client_mid_handshake(void **) {
  StoreServerOptions so;
  so.world_size = 2;
  so.owner_rank = -1;
  so.job_token = "budget-token";
  so.max_handshakes = 4;
  auto server = TcpStoreServer::start(so, Logger(LogLevel::kNone));
  net::Fd client = raw_connect(server->port());
  HandshakeInputs hs = raw_hello(client.get(), 1, 2);
  auto flood = open_flood(server->port(), 20);
  wait_until([&] { return server->stats().shed >= 21 - 4; });
  assert_int_equal(server->stats().handshaking, 4);
  raw_send(client.get(), wire::encode(wire::Proof{client_proof("budget-token", hs)}));
  auto answer = raw_read(client.get());
  assert_true(answer && std::holds_alternative<wire::Welcome>(*answer));
  assert_int_equal(server->stats().ranks, 1);
}

// Among connections as far along, a flood from one address sheds its own: a silent connection
// from 127.0.0.2, older than every one of the flood from 127.0.0.1, stays, then joins.
void test_tcp_flood_from_one_address_sheds_its_own_connections(void **) {
  StoreServerOptions so;
  so.world_size = 2;
  so.owner_rank = -1;
  so.max_handshakes = 4;
  auto server = TcpStoreServer::start(so, Logger(LogLevel::kNone));
  std::string error;
  auto target = net::resolve("127.0.0.1", server->port(), &error);
  auto source = net::resolve("127.0.0.2", 0, &error);
  assert_false(target.empty() || source.empty());
  int err = 0;
  net::Fd other = net::connect_to(target.front(), &source.front(), soon(), &err);
  assert_true(other.valid());
  wait_until([&] { return server->stats().handshaking == 1; });
  auto flood = open_flood(server->port(), 20);
  wait_until([&] { return server->stats().shed >= 21 - 4; });
  Bytes line(wire::kClientPreamble.begin(), wire::kClientPreamble.end());
  raw_send(other.get(), line);
  Bytes answer(wire::kServerPreamble.size());
  assert_int_equal(static_cast<int>(net::recv_exact(other.get(), answer.data(), answer.size(), soon(), &err)),
                   static_cast<int>(net::IoResult::kDone));
  assert_true(std::holds_alternative<wire::Welcome>(raw_join(other.get(), "", 1, 2)));
}

// A connection that does not finish the handshake is closed within wire::kHandshakeMs (the
// deadline the client uses for its attempts too), whatever it sent: nothing, part of the
// greeting, or a Hello without the Proof (before: 30 s, and the flood kept its places that long).
void test_tcp_unfinished_handshakes_are_closed_within_the_handshake_deadline(void **) {
  assert_int_equal(StoreServerOptions{}.handshake_timeout_ms, wire::kHandshakeMs);
  auto rank0 = serve(2, "deadline-token");
  auto silent = open_flood(rank0->port(), 1);
  auto partial = open_flood(rank0->port(), 1, Bytes(wire::kClientPreamble.begin(), wire::kClientPreamble.begin() + 5));
  net::Fd hello = raw_connect(rank0->port());
  raw_hello(hello.get(), 1, 2);
  const Deadline bound = Deadline::after_ms(2 * wire::kHandshakeMs);
  assert_true(closed_by_server(silent.front().get(), bound));
  assert_true(closed_by_server(partial.front().get(), bound));
  assert_true(closed_by_server(hello.get(), bound));
  wait_until([&] {
    StoreServerStats s = rank0->server()->stats();
    return s.shed == 3 && s.handshaking == 0;
  });
}

// A store that sends its greeting and then nothing: the client gives up each attempt after
// wire::kHandshakeMs (when the server would close it anyway), retries on a fresh connection, and
// its TIMEOUT says why (before: one connection held until the open deadline, "no reply in time").
void test_tcp_client_retries_a_stalled_handshake_on_a_fresh_connection(void **) {
  std::string error;
  auto addrs = net::resolve("127.0.0.1", 0, &error);
  int err = 0;
  net::Fd listener = net::listen_on(addrs.front(), 16, &err);
  assert_true(listener.valid());
  const int port = net::local_address(listener.get()).port();
  std::atomic<int> accepted{0};
  std::atomic<bool> stop{false};
  std::thread stalled([&] {
    std::vector<net::Fd> held;
    while (!stop.load()) {
      pollfd p{listener.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) != 1) continue;
      net::Fd c(::accept(listener.get(), nullptr, nullptr));
      if (!c.valid()) continue;
      ::send(c.get(), wire::kServerPreamble.data(), wire::kServerPreamble.size(), MSG_NOSIGNAL);
      held.push_back(std::move(c));
      accepted.fetch_add(1);
    }
  });
  StoreOptions o = options_for(1, 2, port);
  o.timeout_ms = wire::kHandshakeMs + 1500;
  expect_error([&] { open_tcp(o); }, PSTATE_ERR_TIMEOUT,
               {"could not reach the store at tcp://127.0.0.1:" + std::to_string(port),
                "did not finish the handshake within " + std::to_string(wire::kHandshakeMs) + " ms"});
  stop.store(true);
  stalled.join();
  assert_true(accepted.load() >= 2);
}

// Members have a limit of their own: observers past it are refused with the reason, ranks are
// still admitted (there are at most world_size of them).
void test_tcp_observers_past_the_member_limit_are_refused_ranks_are_not(void **) {
  StoreServerOptions so;
  so.world_size = 2;
  so.owner_rank = -1;
  so.max_members = 2;
  auto server = TcpStoreServer::start(so, Logger(LogLevel::kNone));
  auto first = open_tcp(options_for(-1, 0, server->port()));
  auto second = open_tcp(options_for(-1, 0, server->port()));
  expect_error([&] { open_tcp(options_for(-1, 0, server->port())); }, PSTATE_ERR_NO_MEMORY,
               {"already holds 2 connections of this job (its limit: 2)", "ranks are still admitted"});
  StoreOptions o0 = options_for(0, 2, server->port());
  o0.serve = false;
  auto rank0 = open_tcp(o0);
  auto rank1 = open_tcp(options_for(1, 2, server->port()));
  rank1->set("k", bytes_of("v"), soon());
  assert_string_equal(text_of(rank0->get("k", soon())).c_str(), "v");
  assert_int_equal(server->stats().members, 4);
}

// ---- job token --------------------------------------------------------------------------------

void test_tcp_token_on_client_only_is_auth_error(void **) {
  auto rank0 = serve(2);
  expect_error([&] { join(*rank0, 1, 2, "some-token"); }, PSTATE_ERR_AUTH, {"job token refused", "has no token"});
}

void test_tcp_refused_proof_reads_and_writes_nothing(void **) {
  auto rank0 = serve(2, "right-token");
  rank0->set("secret", bytes_of("value"), soon());
  net::Fd c = raw_connect(rank0->port());
  wire::Mac forged{};
  forged.fill(0x42);
  wire::Message answer = raw_join(c.get(), "", 1, 2, &forged);
  assert_true(std::holds_alternative<wire::Fail>(answer));
  assert_int_equal(std::get<wire::Fail>(answer).status, PSTATE_ERR_AUTH);
  // Whatever it sends next is not answered; the connection ends.
  Bytes set = wire::encode(wire::Set{"secret", bytes_of("overwritten")});
  ::send(c.get(), set.data(), set.size(), MSG_NOSIGNAL);
  assert_false(raw_read(c.get()).has_value());
  assert_string_equal(text_of(rank0->get("secret", soon())).c_str(), "value");
}

// ---- interrupt, close, a server of its own -----------------------------------------------------

// interrupt() (the context's dump watcher is stopped this way): a get parked server-side with a
// deadline that never passes, in an hour-long slice, ends with ABORTED as soon as another thread
// interrupts it; so does every later call of that store, and the store itself serves on.
void test_tcp_interrupt_ends_a_parked_get_from_another_thread(void **) {
  auto rank0 = serve(2);
  auto observer = open_tcp(options_for(-1, 0, rank0->port()));
  observer->set_wait_slice_ms(3600 * 1000);
  std::atomic<int> status{-1};
  std::string message;
  std::thread waiter([&] {
    try {
      observer->get("never/set", Deadline::never());
      status = PSTATE_OK;
    } catch (const Error &e) {
      message = e.what();
      status = e.status();
    }
  });
  wait_until([&] { return rank0->server()->stats().parked_requests == 1; });  // it waits server-side
  observer->interrupt();
  waiter.join();
  if (status != PSTATE_ERR_ABORTED) std::fprintf(stderr, "got status %d: %s\n", status.load(), message.c_str());
  assert_int_equal(status.load(), PSTATE_ERR_ABORTED);
  assert_non_null(std::strstr(message.c_str(), "interrupted"));
  expect_error([&] { observer->check("never/set", soon()); }, PSTATE_ERR_ABORTED, {"interrupted"});
  rank0->set("still/served", bytes_of("yes"), soon());
  assert_string_equal(text_of(rank0->get("still/served", soon())).c_str(), "yes");
  wait_until([&] { return rank0->server()->stats().parked_requests == 0; });  // the server let it go
}

void test_tcp_close_on_the_serving_rank_waits_for_the_others_to_leave(void **) {
  auto rank0 = serve(2);
  auto rank1 = join(*rank0, 1, 2);
  // Rank 1 stays: close gives up at its deadline and says so.
  assert_false(rank0->close(Deadline::after_ms(50)));
  expect_error([&] { rank1->get("x", soon()); }, PSTATE_ERR_PEER_LOST, {"is gone"});
  expect_error([&] { rank0->get("x", soon()); }, PSTATE_ERR_INVALID_STATE, {"closed by this rank"});
  // Rank 1 leaves while rank 0 waits in close; a connected observer does not hold it up.
  auto again = serve(2);
  auto observer = open_tcp(options_for(-1, 0, again->port()));
  auto member = join(*again, 1, 2);
  std::atomic<bool> closing{false};
  std::thread leaver([&] {
    wait_until([&] { return closing.load(); });  // touches only its own store
    member->close(soon());
  });
  closing = true;
  assert_true(again->close(soon()));
  leaver.join();
}

void test_tcp_standalone_server_serves_ranks_that_only_connect(void **) {
  // A launcher can host the store itself (owner_rank -1); rank 0 then only connects.
  StoreServerOptions so;
  so.world_size = 2;
  so.owner_rank = -1;
  so.job_token = "launcher-token";
  auto server = TcpStoreServer::start(so, Logger(LogLevel::kNone));
  StoreOptions o0 = options_for(0, 2, server->port(), "launcher-token");
  o0.serve = false;
  auto rank0 = open_tcp(o0);
  assert_null(rank0->server());
  auto rank1 = open_tcp(options_for(1, 2, server->port(), "launcher-token"));
  rank1->set("k", bytes_of("v"), soon());
  assert_string_equal(text_of(rank0->get("k", soon())).c_str(), "v");
  expect_error([&] { open_tcp(options_for(-1, 3, server->port(), "launcher-token")); }, PSTATE_ERR_MISMATCH,
               {"an observer says world_size 3, the store says 2"});
  server.reset();
  expect_error([&] { rank0->get("k", soon()); }, PSTATE_ERR_PEER_LOST, {"the process that serves it"});
}

// ---- failures of the server -------------------------------------------------------------------

void test_tcp_killed_server_gives_clients_peer_lost_naming_the_address(void **) {
  PortPipe pipe;
  ChildBody server_body = [&](int) -> int {
    auto rank0 = serve(3);
    pipe.publish(rank0->port(), 2);
    ::sleep(120);  // until killed
    return 0;
  };
  pid_t server = pstest::fork_child(server_body, 0);
  ChildBody parked_client_body = [&](int) -> int {
    int port = pipe.receive();
    CHILD_CHECK(port > 0);
    auto rank2 = open_tcp(options_for(2, 3, port));
    rank2->set("rank2/parked", bytes_of("1"), soon());
    try {
      rank2->get("never", soon());
    } catch (const Error &e) {
      CHILD_CHECK(e.status() == PSTATE_ERR_PEER_LOST);
      CHILD_CHECK(std::strstr(e.what(), ("tcp://127.0.0.1:" + std::to_string(port)).c_str()) != nullptr);
      return 0;
    }
    return 1;
  };
  pid_t parked = pstest::fork_child(parked_client_body, 2);
  int port = pipe.receive();
  assert_true(port > 0);
  auto rank1 = open_tcp(options_for(1, 3, port));
  rank1->wait({"rank2/parked"}, soon());
  ::kill(server, SIGKILL);
  assert_int_equal(pst_wait(server, kLongMs), 128 + SIGKILL);
  std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  expect_error([&] { rank1->get("anything", soon()); }, PSTATE_ERR_PEER_LOST, {"get('anything')", url, "is gone"});
  expect_error([&] { rank1->set("again", bytes_of("x"), soon()); }, PSTATE_ERR_PEER_LOST, {url});
  assert_int_equal(pst_wait(parked, kLongMs), 0);
}

void test_tcp_client_retries_until_the_server_starts(void **) {
  net::Fd reserved;
  int port = reserve_port(&reserved);
  int started[2];
  assert_int_equal(::pipe(started), 0);
  ChildBody early_body = [&](int) -> int {
    reserved.reset();  // the parent's reservation, inherited: only the parent may hold the port
    (void)!::write(started[1], "x", 1);
    auto rank1 = open_tcp(options_for(1, 2, port));  // refused until rank 0 listens
    rank1->set("from/1", bytes_of("one"), soon());
    CHILD_CHECK(text_of(rank1->get("from/0", soon())) == "zero");
    store_barrier(*rank1, "end", 2, soon());
    return 0;
  };
  pid_t early = pstest::fork_child(early_body, 1);
  char c;
  pollfd p{started[0], POLLIN, 0};
  assert_int_equal(::poll(&p, 1, kLongMs), 1);
  assert_int_equal(::read(started[0], &c, 1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let it be refused a few times
  reserved.reset();
  auto rank0 = open_tcp(options_for(0, 2, port));
  rank0->set("from/0", bytes_of("zero"), soon());
  assert_string_equal(text_of(rank0->get("from/1", soon())).c_str(), "one");
  store_barrier(*rank0, "end", 2, soon());
  assert_true(rank0->close(soon()));
  assert_int_equal(pst_wait(early, kLongMs), 0);
  ::close(started[0]);
  ::close(started[1]);
}

void test_tcp_taken_port_is_a_clear_error(void **) {
  net::SocketAddress any;
  std::string error;
  any = net::resolve("127.0.0.1", 0, &error).front();
  int err = 0;
  net::Fd holder = net::listen_on(any, 16, &err);
  assert_true(holder.valid());
  int port = net::local_address(holder.get()).port();
  expect_error([&] { open_tcp(options_for(0, 2, port)); }, PSTATE_ERR_TRANSPORT,
               {"cannot serve the store on 127.0.0.1", std::to_string(port), "already in use", "MASTER_PORT"});
}

// ---- start-up deployed wrongly (issue 19) ------------------------------------------------------

double ms_now() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An HTTP server's answer to the client's greeting is named at once, with what it said.
void test_tcp_foreign_service_is_named_at_once(void **) {
  std::string error;
  net::SocketAddress any = net::resolve("127.0.0.1", 0, &error).front();
  int err = 0;
  net::Fd listener = net::listen_on(any, 16, &err);
  assert_true(listener.valid());
  int port = net::local_address(listener.get()).port();
  std::thread http([&] {
    pollfd p{listener.get(), POLLIN, 0};
    if (::poll(&p, 1, kLongMs) != 1) return;
    net::Fd c(::accept(listener.get(), nullptr, nullptr));
    char buf[256];
    (void)!::recv(c.get(), buf, sizeof buf, 0);  // the greeting line
    const char answer[] = "HTTP/1.0 501 Unsupported method ('PSTATE-STORE/2')\r\nServer: test\r\n\r\n";
    (void)!::send(c.get(), answer, sizeof answer - 1, MSG_NOSIGNAL);
    ::usleep(200000);
  });
  double t0 = ms_now();
  expect_error([&] { open_tcp(options_for(1, 2, port)); }, PSTATE_ERR_TRANSPORT,
               {"is not a pstate store", "it answered 'HTTP/1.0 501 Unsupported method", "(an HTTP server)"});
  assert_true(ms_now() - t0 < 1500);
  http.join();
}

// A wrong token ends nothing, but a wait that times out names the rank and the refusal.
void test_tcp_timeout_names_the_absent_ranks_and_what_the_store_saw(void **) {
  auto rank0 = serve(3, "right");
  expect_error([&] { join(*rank0, 1, 3, "wrong"); }, PSTATE_ERR_AUTH, {"job token refused"});
  expect_error([&] { rank0->wait({"pstate/init/done"}, Deadline::after_ms(200)); }, PSTATE_ERR_TIMEOUT,
               {"rank 2 of 0..2 never connected; rank 1 never joined; last seen: rank 1 refused", "job token refused",
                "1 of 1 keys never set"});
}

// A second rank 0 finds the port taken, asks its holder, and is told rank 0 is taken.
void test_tcp_second_rank_0_is_told_rank_0_is_taken(void **) {
  auto rank0 = serve(2, "t");
  expect_error([&] { open_tcp(options_for(0, 2, rank0->port(), "t")); }, PSTATE_ERR_MISMATCH,
               {"rank 0 is already taken by another process", "the process that serves this store"});
}

// ---- addresses, values, operations ------------------------------------------------------------

void test_tcp_ipv6_loopback_works(void **) {
  std::string error;
  auto v6 = net::resolve("::1", 0, &error);
  int err = 0;
  if (v6.empty() || !net::listen_on(v6.front(), 1, &err).valid()) {
    std::fprintf(stderr, "no IPv6 loopback here: skipping\n");
    skip();
  }
  auto rank0 = open_tcp(options_for(0, 2, 0, "", "::1"));
  assert_true(rank0->describe().rfind("tcp://[::1]:", 0) == 0);
  auto rank1 = open_tcp(options_for(1, 2, rank0->port(), "", "::1"));
  rank1->set("v6", bytes_of("yes"), soon());
  assert_string_equal(text_of(rank0->get("v6", soon())).c_str(), "yes");
}

void test_tcp_socket_ifname_binds_the_client_to_that_interface(void **) {
  auto rank0 = serve(2);
  StoreOptions o = options_for(1, 2, rank0->port());
  o.socket_ifname = "lo";
  auto rank1 = open_tcp(o);
  rank1->set("via", bytes_of("lo"), soon());
  assert_string_equal(text_of(rank0->get("via", soon())).c_str(), "lo");
  o.socket_ifname = "nosuchif0";
  expect_error([&] { open_tcp(o); }, PSTATE_ERR_INVALID_ARGUMENT, {"'nosuchif0'", "lo 127.0.0.1"});
}

// get_many / set_many pipeline their requests (rank 0's thousands at rendezvous): every value
// in order, one request each, and the connection still in step for the calls after them; a
// missing key fails like get() of it, naming it, and the connection stays usable.
void test_tcp_many_keys_pipelined_in_order_one_request_each(void **) {
  auto rank0 = serve(1);
  constexpr int kKeys = 300;  // several pipeline windows
  std::vector<std::pair<std::string, Bytes>> items;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back("many/" + std::to_string(i));
    items.emplace_back(keys.back(), bytes_of(std::string(static_cast<size_t>(i % 7) * 100, 'a') + std::to_string(i)));
  }
  const uint64_t before = rank0->traffic().requests;
  rank0->set_many(items, soon());
  std::vector<Bytes> got = rank0->get_many(keys, soon());
  assert_int_equal(rank0->traffic().requests - before, 2 * kKeys);
  assert_int_equal(got.size(), kKeys);
  for (int i = 0; i < kKeys; ++i) assert_true(got[static_cast<size_t>(i)] == items[static_cast<size_t>(i)].second);
  assert_string_equal(text_of(rank0->get("many/5", soon())).c_str(), text_of(items[5].second).c_str());
  keys.insert(keys.begin() + 100, "many/never");
  expect_error([&] { rank0->get_many(keys, Deadline::after_ms(200)); }, PSTATE_ERR_TIMEOUT, {"get('many/never')", "waiting for key 'many/never'"});
  assert_string_equal(text_of(rank0->get("many/7", soon())).c_str(), text_of(items[7].second).c_str());
}

void test_tcp_open_store_picks_the_tcp_store(void **) {
  StoreOptions o = options_for(0, 1, 0);
  auto store = open_store(o);
  assert_true(store->describe().rfind("tcp://127.0.0.1:", 0) == 0);
  store->set("a", bytes_of("b"), soon());
  assert_string_equal(text_of(store->get("a", soon())).c_str(), "b");
  o.init_method = "env://";
  expect_error([&] { open_store(o); }, PSTATE_ERR_INVALID_ARGUMENT, {"env://", "resolve"});
}

}  // namespace

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  alarm(600);  // the whole file, in the worst case; each test bounds itself far below this
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tcp_many_keys_pipelined_in_order_one_request_each),
      cmocka_unit_test(test_tcp_get_is_parked_on_the_server_until_a_set),
      cmocka_unit_test(test_tcp_parked_waits_of_many_clients_are_released_by_one_set),
      cmocka_unit_test(test_tcp_wait_for_several_keys_sees_every_key_even_one_erased_again),
      cmocka_unit_test(test_tcp_unreachable_store_times_out_naming_the_address),
      cmocka_unit_test(test_tcp_garbage_bytes_close_only_that_connection),
      cmocka_unit_test(test_tcp_oversized_frame_closes_only_that_connection),
      cmocka_unit_test(test_tcp_member_sending_bad_frames_is_dropped_and_others_continue),
      cmocka_unit_test(test_tcp_request_before_handshake_gets_nothing),
      cmocka_unit_test(test_tcp_other_protocol_version_is_mismatch),
      cmocka_unit_test(test_tcp_flood_of_strangers_leaves_room_for_the_job),
      cmocka_unit_test(test_tcp_silent_newcomers_never_shed_a_client_mid_handshake),
      cmocka_unit_test(test_tcp_flood_from_one_address_sheds_its_own_connections),
      cmocka_unit_test(test_tcp_unfinished_handshakes_are_closed_within_the_handshake_deadline),
      cmocka_unit_test(test_tcp_client_retries_a_stalled_handshake_on_a_fresh_connection),
      cmocka_unit_test(test_tcp_observers_past_the_member_limit_are_refused_ranks_are_not),
      cmocka_unit_test(test_tcp_token_on_client_only_is_auth_error),
      cmocka_unit_test(test_tcp_refused_proof_reads_and_writes_nothing),
      cmocka_unit_test(test_tcp_interrupt_ends_a_parked_get_from_another_thread),
      cmocka_unit_test(test_tcp_close_on_the_serving_rank_waits_for_the_others_to_leave),
      cmocka_unit_test(test_tcp_standalone_server_serves_ranks_that_only_connect),
      cmocka_unit_test(test_tcp_killed_server_gives_clients_peer_lost_naming_the_address),
      cmocka_unit_test(test_tcp_client_retries_until_the_server_starts),
      cmocka_unit_test(test_tcp_taken_port_is_a_clear_error),
      cmocka_unit_test(test_tcp_foreign_service_is_named_at_once),
      cmocka_unit_test(test_tcp_timeout_names_the_absent_ranks_and_what_the_store_saw),
      cmocka_unit_test(test_tcp_second_rank_0_is_told_rank_0_is_taken),
      cmocka_unit_test(test_tcp_ipv6_loopback_works),
      cmocka_unit_test(test_tcp_socket_ifname_binds_the_client_to_that_interface),
      cmocka_unit_test(test_tcp_open_store_picks_the_tcp_store),
  };
  if (const char *only = std::getenv("PSTATE_TEST_FILTER")) cmocka_set_test_filter(only);  // e.g. "*flood*"
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
