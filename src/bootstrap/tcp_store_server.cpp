// tcp_store_server.cpp — the TCP store's server: one thread, one epoll loop (see the header).
//
// The rendezvous watch (see the header): every rank's first join, refusals and departures are
// noted; a refusal of a proven member before the world is complete fails the job (fail_job); a
// wait's TimedOut carries absent_ranks(). Job failure and notes never change what a healthy job
// sees.
//
// The loop, per turn:
//   1. epoll_wait on the wake-up eventfd, the listening sockets and every connection (a connection
//      asks for EPOLLIN when it can take a request, EPOLLOUT while a reply is queued, only
//      EPOLLRDHUP while parked), with a timeout that is the nearest timer (parked wait, handshake
//      limit);
//   2. accept new connections; read and decode frames; answer requests;
//   3. answer parked requests whose keys now exist (after a set/add) or whose time has passed;
//   4. resume connections that were blocked and may hold already-buffered requests;
//   5. tell epoll the new interest of each connection this turn touched; drop dead connections,
//      releasing their rank claims.
// Every step costs what the turn's events cost, never a pass over every connection: the kernel
// keeps the interest list (epoll, level-triggered, so what a turn leaves unread is reported again),
// timers are a min-heap (entries made stale by a reply are skipped when they surface), a parked
// request is filed under the one key it waits for next (a set or add wakes only that key's
// waiters), and the dead are swept from a list. With poll() every turn handed the kernel all N
// descriptors and walked all N connections twice, and a rendezvous of N ranks takes O(N) turns: the
// start-up grew 2.5x per doubling at 2048-4096 ranks (docs/bench/startup.md). epoll is the
// kernel's own readiness API, in glibc, with nothing to install; an event library (libevent,
// libuv) would bring the same epoll underneath and a second loop abstraction to learn.
// A connection handles one request at a time, in order: while its reply is queued or its request
// is parked, its later frames wait in the socket. That bounds each connection's buffers to one
// frame in and one reply out (large values are shared between readers, not copied).
//
// Strangers: a connection that is not the job's must never starve the job's own. Anyone who reaches
// the port can open connections; only the job's processes can finish the handshake. So the two are
// counted apart: members (past the handshake) up to max_members, and connections in the handshake
// up to max_handshakes, each of those closed when it has not finished within handshake_timeout_ms
// (wire::kHandshakeMs, which the client uses for its attempts too: a legitimate client needs a few
// round trips). When a newcomer finds the handshake budget full, one connection in the handshake is
// shed, not the newcomer refused: refusing would let a flood that holds the budget lock every
// legitimate client out for as long as it keeps its connections open (what happened before: 400
// silent connections held the store's every place, and a replacement rank timed out). Shedding
// makes a flood out-pace the handshake instead, and the order it sheds in makes that hard:
//   1. the least advanced first: a connection being refused, then one that has not sent the
//      whole preamble (a silent connection), then one that sent it but no Hello, then one that
//      sent its Hello and owes its Proof. A pstate client sends its preamble and Hello at once,
//      and a newcomer is read as it is accepted, so a legitimate client is past the preamble
//      before the next one arrives: a flood of connections that say nothing never sheds it;
//   2. among equals, those of the source address that holds the most connections in the
//      handshake: a flood from one host sheds itself, not the ranks of another host;
//   3. among those, the oldest: a newcomer always outlives the next max_handshakes arrivals.
// A turn accepts at most max_handshakes newcomers, so members are served between bursts and a
// newcomer is read in the turn it arrives. What was shed is logged as one WARN per 10 s at most,
// naming the source addresses (a flood must not flood the log either).
#include "bootstrap/tcp_store_server.hpp"

#include "bootstrap/handshake.hpp"
#include "bootstrap/crypto.hpp"
#include "bootstrap/roster.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/wire.hpp"
#include "common/error.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace pstate {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds until t, rounded up so epoll_wait does not wake just before a timer is due.
int ms_until(Clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(t - Clock::now()).count();
  if (left <= 0) return 0;
  int64_t ms = (left + 999) / 1000;
  return ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
}

// One queued piece of a reply: owned bytes, or a value shared with the key-value map.
struct OutChunk {
  Bytes owned;
  std::shared_ptr<const Bytes> shared;
  size_t offset = 0;
  const uint8_t *data() const { return shared ? shared->data() : owned.data(); }
  size_t size() const { return shared ? shared->size() : owned.size(); }
};

// A get or wait held until its keys exist or its time passes. It is filed under one missing key
// at a time (waiting_on, in the server's waiters): keys before `next` were there when last looked.
struct Parked {
  std::vector<std::string> keys;
  bool is_get = false;
  Clock::time_point until;
  size_t next = 0;
  std::string waiting_on;  // empty: filed under no key
};

// A deadline in the server's min-heap: a connection's handshake limit or its parked request's
// time. An entry whose connection has since moved on (joined, was answered, died) is stale and
// skipped when it reaches the top.
struct Timer {
  Clock::time_point at;
  uint64_t id;
  bool parked;  // false: the handshake limit
  bool operator>(const Timer &o) const { return at > o.at; }
};

// epoll's data word: a connection's id, or one of these.
constexpr uint64_t kWakeEvent = ~0ull;
constexpr uint64_t kListenerEvent = 1ull << 63;  // | index into listeners

struct Connection {
  enum class Phase { kPreamble, kHello, kProof, kMember };

  uint64_t id = 0;
  net::Fd fd;
  std::string peer;  // "127.0.0.1:40112"
  std::string host;  // "127.0.0.1": the source address, whose connections in the handshake are counted
  Phase phase = Phase::kPreamble;
  Clock::time_point handshake_until;
  Bytes in;  // received, not yet decoded bytes start at in_start
  size_t in_start = 0;
  std::deque<OutChunk> out;
  bool close_after_reply = false;
  bool dead = false;
  HandshakeInputs hs;  // rank, world size, nonces announced in the handshake
  int64_t pid = 0;     // the client's pid, as its Hello says
  bool claims_rank = false;
  std::optional<Parked> parked;
  uint32_t armed = 0;  // the events epoll watches for it

  int rank() const { return hs.rank; }
  std::string who() const {
    return hs.rank >= 0 && phase == Phase::kMember ? cat("rank ", hs.rank, " (", peer, ")") : peer;
  }
  // "pid 77 from 127.0.0.1:40112" (the pid once the Hello said it)
  std::string origin() const { return pid > 0 ? cat("pid ", pid, " from ", peer) : cat("from ", peer); }
  // How far a connection in the handshake has come; the least advanced is shed first.
  int progress() const {
    if (close_after_reply) return 0;  // refused: only its reply is left to send
    switch (phase) {
      case Phase::kPreamble:
        return 1;
      case Phase::kHello:
        return 2;
      case Phase::kProof:
        return 3;
      case Phase::kMember:
        break;
    }
    return 4;
  }
};

// What the server shed since it last said so: one WARN per kShedReportEveryMs at most.
struct ShedReport {
  static constexpr int kShedReportEveryMs = 10000;
  static constexpr size_t kMaxHosts = 256;  // addresses counted one by one; the rest together
  uint64_t for_newcomers = 0;               // shed to make room in the handshake budget
  uint64_t too_slow = 0;                    // past the handshake deadline
  std::map<std::string, uint64_t> by_host;
  uint64_t other_hosts = 0;
  Clock::time_point next{};  // no report before this
  bool pending() const { return for_newcomers + too_slow > 0; }
};

// Why a rank is absent: its last refusal or its departure, and when.
struct RankNote {
  Clock::time_point when;
  const char *what;    // "refused", "left"
  std::string detail;  // "pid 77 from 127.0.0.1:40112: job token refused"
};

std::string seconds_ago(Clock::time_point t) {
  double s = std::chrono::duration<double>(Clock::now() - t).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s ago", s);
  return buf;
}

}  // namespace

struct TcpStoreServer::Impl {
  StoreServerOptions options;
  Logger logger;
  std::vector<net::Fd> listeners;
  int port = 0;
  net::Fd wake;
  net::Fd epoll;
  bool listeners_armed = true;
  std::atomic<bool> stop{false};
  std::thread thread;

  // ---- owned by the serving thread ----
  std::map<uint64_t, Connection> connections;
  // the rendezvous watch
  std::vector<bool> ever_joined;  // index = rank
  size_t ever_joined_count = 0;   // == world size: the world is complete
  std::map<int, RankNote> notes;  // absent ranks: last refusal or departure
  std::optional<wire::Fail> job_failure;
  uint64_t rank_claims = 0;  // processes of this job (by token and job id) that claimed a rank
  bool warned_extra_claims = false;
  std::unordered_map<int, uint64_t> rank_holders;  // rank -> connection id
  std::unordered_map<std::string, std::shared_ptr<const Bytes>> values;
  size_t total_bytes = 0;
  uint64_t next_id = 1;
  std::vector<uint64_t> runnable;  // connections unblocked this turn, to resume decoding
  std::vector<uint64_t> touched;   // connections whose interest may have changed this turn
  std::vector<uint64_t> dead;      // dropped this turn, erased at its end
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> waiters;  // key -> parked ids
  size_t parked_count = 0;
  Clock::time_point accept_paused_until{};
  std::set<uint64_t> handshaking;  // live connections in the handshake, oldest first
  size_t members = 0;              // live connections past the handshake
  ShedReport shed;

  // ---- read by stats() from other threads ----
  std::atomic<size_t> stat_connections{0}, stat_members{0}, stat_ranks{0}, stat_parked{0}, stat_keys{0};
  std::atomic<size_t> stat_ever_joined{0};
  std::atomic<size_t> stat_handshaking{0};
  std::atomic<uint64_t> stat_refused{0}, stat_dropped{0}, stat_shed{0};
  std::atomic<uint64_t> stat_accepted{0}, stat_requests{0}, stat_bytes_in{0}, stat_bytes_out{0};
  std::atomic<size_t> stat_peak_connections{0};
  uint64_t shed_total = 0;  // published with the handshake count (publish_stats), so the two agree
  mutable std::mutex ranks_mutex;  // with ranks_changed: wakes wait_for_ranks_at_most
  mutable std::condition_variable ranks_changed;

  void run();
  void serve_one_turn();
  uint32_t interest(const Connection &c) const;
  void watch(int fd, int op, uint32_t events, uint64_t data);
  void arm_listeners(bool on);
  void sync_interest();
  bool timer_is_live(const Timer &t);
  int next_timer_ms();
  void accept_all(int listener);
  void on_events(Connection &c, uint32_t revents);
  void read_input(Connection &c);
  void process_input(Connection &c);
  void dispatch(Connection &c, wire::Message &&m);
  void on_preamble(Connection &c);
  void on_hello(Connection &c, const wire::Hello &h);
  void on_proof(Connection &c, const wire::Proof &p);
  std::optional<std::string> membership_problem(Connection &c);
  std::optional<std::string> job_id_problem(const wire::Hello &h) const;
  bool complete() const { return ever_joined_count == static_cast<size_t>(options.world_size); }
  void note_refusal(Connection &c, pstate_status_t status, const std::string &why, bool member);
  void count_claim(Connection &c);
  void fail_job(pstate_status_t status, const std::string &why);
  void absent_ranks(wire::TimedOut &t) const;
  void on_request(Connection &c, wire::Message &&m);
  void on_set(Connection &c, wire::Set &&m);
  void on_get(Connection &c, const wire::Get &m);
  void on_add(Connection &c, const wire::Add &m);
  void on_wait(Connection &c, const wire::Wait &m);
  void on_erase(Connection &c, const wire::Erase &m);
  bool store_value(Connection &c, const std::string &key, std::shared_ptr<const Bytes> value);
  std::vector<std::string> missing_keys(const std::vector<std::string> &keys) const;
  void park(Connection &c, std::vector<std::string> keys, bool is_get, uint32_t wait_ms);
  void file_parked(Connection &c);
  void unfile_parked(Connection &c);
  void finish_parked(Connection &c);
  void wake_waiters(const std::string &key);
  void expire_timers();
  void reply(Connection &c, const wire::Message &m);
  void reply_value(Connection &c, std::shared_ptr<const Bytes> value);
  void refuse(Connection &c, pstate_status_t status, const std::string &text);
  void write_some(Connection &c);
  void shed_one_for_a_newcomer();
  void note_shed(const Connection &c, bool too_slow);
  void report_shed();
  void drop(Connection &c, const std::string &why, LogLevel level = LogLevel::kInfo);
  bool holder_is_alive(uint64_t id);
  void sweep();
  void publish_stats();
  void publish_ranks();
};

// ---- the loop -------------------------------------------------------------------------------

void TcpStoreServer::Impl::run() {
  while (!stop.load(std::memory_order_acquire)) {
    try {
      serve_one_turn();
    } catch (const std::exception &e) {
      // Per-connection failures are handled inside; this is epoll itself failing (ENOMEM).
      logger.warn("store: serving loop: ", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void TcpStoreServer::Impl::serve_one_turn() {
  arm_listeners(Clock::now() >= accept_paused_until);
  // Level-triggered: what does not fit here is reported again next turn.
  constexpr int kMaxEvents = 1024;
  epoll_event events[kMaxEvents];
  int n = ::epoll_wait(epoll.get(), events, kMaxEvents, next_timer_ms());
  if (n < 0 && errno != EINTR) throw_error(PSTATE_ERR_TRANSPORT, "epoll_wait: ", std::strerror(errno));
  if (n > 0) {
    std::vector<int> ready_listeners;
    // Connections first: what a client in the handshake sent is read before newcomers can shed it.
    for (int i = 0; i < n; ++i) {
      const uint64_t what = events[i].data.u64;
      if (what == kWakeEvent) {
        uint64_t ignored;
        ssize_t got = ::read(wake.get(), &ignored, sizeof ignored);
        (void)got;
      } else if ((what & kListenerEvent) != 0) {
        ready_listeners.push_back(listeners[what & ~kListenerEvent].get());
      } else {
        auto it = connections.find(what);
        if (it != connections.end() && !it->second.dead) on_events(it->second, events[i].events);
      }
    }
    if (stop.load(std::memory_order_acquire)) return;
    for (int fd : ready_listeners) accept_all(fd);
  }
  if (stop.load(std::memory_order_acquire)) return;
  expire_timers();
  while (!runnable.empty()) {
    std::vector<uint64_t> batch;
    batch.swap(runnable);
    for (uint64_t id : batch) {
      auto it = connections.find(id);
      if (it != connections.end()) process_input(it->second);
    }
  }
  sync_interest();
  sweep();
  report_shed();
  publish_stats();
}

uint32_t TcpStoreServer::Impl::interest(const Connection &c) const {
  if (!c.out.empty()) return EPOLLOUT | EPOLLRDHUP;
  if (c.parked) return EPOLLRDHUP;  // only notice the client leaving
  return EPOLLIN | EPOLLRDHUP;
}

void TcpStoreServer::Impl::watch(int fd, int op, uint32_t events, uint64_t data) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = data;
  if (::epoll_ctl(epoll.get(), op, fd, &ev) != 0)
    throw_error(PSTATE_ERR_TRANSPORT, "store server: epoll_ctl: ", std::strerror(errno));
}

// While accepting is paused (out of descriptors), the listeners are not watched, so a full backlog
// does not wake every turn.
void TcpStoreServer::Impl::arm_listeners(bool on) {
  if (on == listeners_armed) return;
  for (size_t i = 0; i < listeners.size(); ++i)
    watch(listeners[i].get(), EPOLL_CTL_MOD, on ? static_cast<uint32_t>(EPOLLIN) : 0u, kListenerEvent | i);
  listeners_armed = on;
}

// Tells epoll what each connection touched this turn waits for now.
void TcpStoreServer::Impl::sync_interest() {
  for (uint64_t id : touched) {
    auto it = connections.find(id);
    if (it == connections.end() || it->second.dead || !it->second.fd.valid()) continue;
    Connection &c = it->second;
    const uint32_t want = interest(c);
    if (want == c.armed) continue;
    try {
      watch(c.fd.get(), EPOLL_CTL_MOD, want, c.id);
      c.armed = want;
    } catch (const Error &e) {
      drop(c, e.what());
    }
  }
  touched.clear();
}

// Whether a timer still stands for what its connection is doing.
bool TcpStoreServer::Impl::timer_is_live(const Timer &t) {
  auto it = connections.find(t.id);
  if (it == connections.end() || it->second.dead) return false;
  const Connection &c = it->second;
  if (t.parked) return c.parked && c.parked->until == t.at;
  return c.phase != Connection::Phase::kMember && c.handshake_until == t.at;
}

int TcpStoreServer::Impl::next_timer_ms() {
  int wait = 60000;
  if (Clock::now() < accept_paused_until) wait = std::min(wait, ms_until(accept_paused_until));
  if (shed.pending()) wait = std::min(wait, ms_until(shed.next));
  while (!timers.empty() && !timer_is_live(timers.top())) timers.pop();
  if (!timers.empty()) wait = std::min(wait, ms_until(timers.top().at));
  return wait;
}

// Accepts up to max_handshakes newcomers (the rest wait in the backlog for the next turn), reads
// what each has sent already, and sheds a connection in the handshake for each one over budget.
void TcpStoreServer::Impl::accept_all(int listener) {
  for (size_t accepted = 0; accepted < options.max_handshakes; ++accepted) {
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays in the backlog; stop polling the listener for a moment
        // instead of spinning on it.
        logger.warn("store: cannot accept connections: ", std::strerror(errno), " (pausing 100 ms)");
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    net::tune_stream_socket(fd);
    net::SocketAddress address = net::peer_address(fd);
    Connection fresh;
    fresh.id = next_id++;
    fresh.fd = net::Fd(fd);
    fresh.peer = address.text();
    fresh.host = address.host();
    fresh.handshake_until = Clock::now() + std::chrono::milliseconds(options.handshake_timeout_ms);
    logger.trace("store: connection from ", fresh.peer);
    Connection &c = connections.emplace(fresh.id, std::move(fresh)).first->second;
    c.armed = interest(c);
    try {
      watch(fd, EPOLL_CTL_ADD, c.armed, c.id);
    } catch (const Error &e) {
      logger.warn("store: cannot watch the connection from ", c.peer, ": ", e.what());
      connections.erase(c.id);
      return;
    }
    timers.push(Timer{c.handshake_until, c.id, false});
    stat_accepted.fetch_add(1, std::memory_order_relaxed);
    if (connections.size() > stat_peak_connections.load(std::memory_order_relaxed))
      stat_peak_connections.store(connections.size(), std::memory_order_relaxed);
    handshaking.insert(c.id);
    read_input(c);  // a pstate client's preamble and Hello are usually here already
    if (handshaking.size() > options.max_handshakes) shed_one_for_a_newcomer();
  }
}

// Closes the connection in the handshake that matters least (the head comment gives the order).
void TcpStoreServer::Impl::shed_one_for_a_newcomer() {
  std::unordered_map<std::string_view, size_t> per_host;
  for (uint64_t id : handshaking) ++per_host[connections.at(id).host];
  auto rank = [&](const Connection &c) {
    return std::make_tuple(c.progress(), -static_cast<int64_t>(per_host[c.host]), c.id);
  };
  Connection *victim = nullptr;
  for (uint64_t id : handshaking) {
    Connection &c = connections.at(id);
    if (victim == nullptr || rank(c) < rank(*victim)) victim = &c;
  }
  if (victim == nullptr) return;
  note_shed(*victim, false);
  drop(*victim, cat("shed: more than ", options.max_handshakes, " connections in the handshake"), LogLevel::kTrace);
  victim->fd.reset();  // now, not at the end of the turn: a burst must not pile up descriptors
}

void TcpStoreServer::Impl::note_shed(const Connection &c, bool too_slow) {
  ++shed_total;
  (too_slow ? shed.too_slow : shed.for_newcomers) += 1;
  if (shed.by_host.size() < ShedReport::kMaxHosts || shed.by_host.count(c.host) != 0)
    shed.by_host[c.host] += 1;
  else
    shed.other_hosts += 1;
}

// One WARN for everything shed since the last one, at most every kShedReportEveryMs.
void TcpStoreServer::Impl::report_shed() {
  auto now = Clock::now();
  if (!shed.pending() || now < shed.next) return;
  std::vector<std::pair<uint64_t, std::string>> hosts;
  for (const auto &[host, n] : shed.by_host) hosts.emplace_back(n, host);
  std::sort(hosts.begin(), hosts.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
  std::string from;
  constexpr size_t kNamed = 8;
  for (size_t i = 0; i < hosts.size() && i < kNamed; ++i)
    from += cat(i ? ", " : "", hosts[i].second, " (", hosts[i].first, ")");
  uint64_t unnamed = shed.other_hosts;
  for (size_t i = kNamed; i < hosts.size(); ++i) unnamed += hosts[i].first;
  if (unnamed > 0) from += cat(" and ", unnamed, " from other addresses");
  std::string why;
  if (shed.for_newcomers > 0)
    why = cat(shed.for_newcomers, " for newer ones (more than ", options.max_handshakes,
              " were in the handshake at once)");
  if (shed.too_slow > 0)
    why += cat(why.empty() ? "" : ", ", shed.too_slow, " unfinished after ", options.handshake_timeout_ms, " ms");
  const uint64_t total = shed.for_newcomers + shed.too_slow;
  logger.warn("store: shed ", total, total == 1 ? " connection" : " connections",
              " that had not finished the handshake, from ", from, ": ", why,
              "; processes without this job's token are connecting to its port (a port scanner, another job, a "
              "flood); the job's own connections are not affected (said every ",
              ShedReport::kShedReportEveryMs / 1000, " s at most)");
  shed = ShedReport{};
  shed.next = now + std::chrono::milliseconds(ShedReport::kShedReportEveryMs);
}

void TcpStoreServer::Impl::on_events(Connection &c, uint32_t revents) {
  if (revents & EPOLLERR) return drop(c, "socket error");
  if (revents & EPOLLOUT) {
    write_some(c);
    if (c.out.empty() && !c.dead) runnable.push_back(c.id);
  }
  if (revents & EPOLLIN) {
    read_input(c);
  } else if (revents & (EPOLLHUP | EPOLLRDHUP)) {
    // The client shut its side while we were not reading (parked or replying): it is gone.
    return drop(c, "closed by the client", LogLevel::kTrace);
  }
}

// ---- input ----------------------------------------------------------------------------------

void TcpStoreServer::Impl::read_input(Connection &c) {
  size_t limit = c.phase == Connection::Phase::kMember ? wire::kMaxFrameBytes : wire::kMaxHandshakeFrameBytes;
  if (c.phase == Connection::Phase::kPreamble) limit = wire::kClientPreamble.size();
  size_t cap = wire::kHeaderBytes + limit;
  constexpr size_t kChunk = 64 * 1024;
  for (;;) {
    size_t buffered = c.in.size() - c.in_start;
    if (buffered >= cap) break;  // a whole frame is here; decode before reading more
    size_t want = std::min(kChunk, cap - buffered);
    size_t old_size = c.in.size();
    c.in.resize(old_size + want);
    ssize_t got = ::recv(c.fd.get(), c.in.data() + old_size, want, MSG_DONTWAIT);
    c.in.resize(old_size + static_cast<size_t>(std::max<ssize_t>(got, 0)));
    if (got > 0) {
      stat_bytes_in.fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
      if (static_cast<size_t>(got) < want) break;
      continue;
    }
    if (got == 0) return drop(c, "closed by the client", LogLevel::kTrace);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return drop(c, cat("receive failed: ", std::strerror(errno)));
  }
  process_input(c);
}

void TcpStoreServer::Impl::process_input(Connection &c) {
  if (c.phase == Connection::Phase::kPreamble) on_preamble(c);
  while (!c.dead && !c.close_after_reply && !c.parked && c.out.empty() && c.phase != Connection::Phase::kPreamble) {
    size_t limit = c.phase == Connection::Phase::kMember ? wire::kMaxFrameBytes : wire::kMaxHandshakeFrameBytes;
    std::span<const uint8_t> pending(c.in.data() + c.in_start, c.in.size() - c.in_start);
    wire::Decoded d = wire::decode_frame(pending, limit);
    if (d.status == wire::DecodeStatus::kNeedMore) break;
    if (d.status == wire::DecodeStatus::kMalformed) {
      stat_dropped.fetch_add(1);
      return drop(c, "malformed frame: " + d.error);
    }
    c.in_start += d.consumed;
    try {
      dispatch(c, std::move(d.message));
    } catch (const std::exception &e) {
      logger.warn("store: request from ", c.who(), " failed: ", e.what());
      refuse(c, PSTATE_ERR_INTERNAL, cat("the store failed: ", e.what()));
    }
  }
  // Keep the buffer small: drop consumed bytes once they are most of it.
  if (c.in_start > 0 && c.in_start * 2 >= c.in.size()) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_start));
    c.in_start = 0;
    if (c.in.capacity() > 4 * c.in.size() + 65536) c.in.shrink_to_fit();
  }
}

void TcpStoreServer::Impl::dispatch(Connection &c, wire::Message &&m) {
  switch (c.phase) {
    case Connection::Phase::kPreamble:
      break;  // never: process_input reads the preamble first
    case Connection::Phase::kHello:
      if (auto *h = std::get_if<wire::Hello>(&m)) return on_hello(c, *h);
      break;
    case Connection::Phase::kProof:
      if (auto *p = std::get_if<wire::Proof>(&m)) return on_proof(c, *p);
      break;
    case Connection::Phase::kMember:
      return on_request(c, std::move(m));
  }
  stat_dropped.fetch_add(1);
  drop(c, cat("protocol violation: '", wire::op_name(wire::op_of(m)), "' before the handshake completed"));
}

// ---- handshake ------------------------------------------------------------------------------

// The client's line, byte for byte, or the connection is dropped (a stranger gets no answer);
// then the server's line goes out, ahead of the Challenge.
void TcpStoreServer::Impl::on_preamble(Connection &c) {
  const std::string_view want = wire::kClientPreamble;
  size_t have = std::min(c.in.size() - c.in_start, want.size());
  if (std::memcmp(c.in.data() + c.in_start, want.data(), have) != 0) {
    stat_dropped.fetch_add(1);
    return drop(c, "not a pstate store client (its first bytes are not the store's preamble)");
  }
  if (have < want.size()) return;
  c.in_start += want.size();
  c.phase = Connection::Phase::kHello;
  c.out.push_back(OutChunk{Bytes(wire::kServerPreamble.begin(), wire::kServerPreamble.end()), nullptr, 0});
  write_some(c);
}

std::optional<std::string> TcpStoreServer::Impl::job_id_problem(const wire::Hello &h) const {
  if (h.job_id == options.job_id) return std::nullopt;
  if (options.job_id.empty())
    return cat("this store has no job id and you are job '", h.job_id,
               "': another job (without PSTATE_JOB_ID) uses this port; give each job its own MASTER_PORT");
  if (h.job_id.empty())
    return cat(
        "this store belongs to job '", options.job_id,
        "' and you have no PSTATE_JOB_ID: set the job's PSTATE_JOB_ID on every rank, or use another MASTER_PORT");
  return cat("this store belongs to job '", options.job_id, "', you are job '", h.job_id,
             "': two jobs use one port; give each its own MASTER_PORT");
}

void TcpStoreServer::Impl::on_hello(Connection &c, const wire::Hello &h) {
  c.hs.rank = h.rank;
  c.hs.world_size = h.world_size;
  c.hs.client_nonce = h.client_nonce;
  c.pid = h.pid;
  if (h.version != wire::kVersion)
    return refuse(c, PSTATE_ERR_MISMATCH,
                  cat("the store speaks protocol version ", wire::kVersion, " but rank ", h.rank, " speaks version ",
                      h.version, ": run the same pstate version on every rank"));
  if (auto problem = job_id_problem(h)) {
    logger.warn("store: refused ", c.origin(), " (says rank ", c.rank(), "): ", *problem);
    note_refusal(c, PSTATE_ERR_MISMATCH, *problem, false);
    return refuse(c, PSTATE_ERR_MISMATCH, *problem);
  }
  crypto::fill_random(c.hs.server_nonce.data(), c.hs.server_nonce.size());
  wire::Challenge challenge;
  challenge.token_required = !options.job_token.empty();
  challenge.server_nonce = c.hs.server_nonce;
  c.phase = Connection::Phase::kProof;
  reply(c, challenge);
}

void TcpStoreServer::Impl::on_proof(Connection &c, const wire::Proof &p) {
  wire::Mac expected = client_proof(options.job_token, c.hs);
  if (!crypto::constant_time_equal(expected, p.mac)) {
    logger.warn("store: refused ", c.origin(), " (says rank ", c.rank(), "): wrong or missing job token");
    note_refusal(c, PSTATE_ERR_AUTH, "job token refused", false);
    return refuse(c, PSTATE_ERR_AUTH, "job token refused");
  }
  // From here on the process has shown it belongs to this job (token and job id).
  if (auto problem = membership_problem(c)) {
    logger.warn("store: refused ", c.origin(), ": ", *problem);
    note_refusal(c, PSTATE_ERR_MISMATCH, *problem, true);
    return refuse(c, PSTATE_ERR_MISMATCH, *problem);
  }
  if (job_failure) return refuse(c, static_cast<pstate_status_t>(job_failure->status), job_failure->text);
  if (c.rank() < 0 && members >= options.max_members) {
    std::string why =
        cat("the store already holds ", members, " connections of this job (its limit: ", options.max_members,
            "): an observer is refused; ranks are still admitted. Close the observers "
            "(launchers, `pstate store` clients) this job no longer needs");
    logger.warn("store: refused an observer ", c.origin(), ": ", why);
    return refuse(c, PSTATE_ERR_NO_MEMORY, why);
  }
  if (c.rank() >= 0) {
    rank_holders[c.rank()] = c.id;
    c.claims_rank = true;
    publish_ranks();
    // A rank claimed again after its process left is a replacement (PSTATE_REJOIN, pstate_grow),
    // not a second job on this port: only first claims count toward that warning.
    if (ever_joined[static_cast<size_t>(c.rank())])
      logger.info("store: rank ", c.rank(), " claimed again by ", c.origin(), " (its earlier process left)");
    else
      count_claim(c);
    notes.erase(c.rank());
    if (!ever_joined[static_cast<size_t>(c.rank())]) {
      ever_joined[static_cast<size_t>(c.rank())] = true;
      ++ever_joined_count;
      stat_ever_joined.store(ever_joined_count);
    }
  }
  c.phase = Connection::Phase::kMember;
  handshaking.erase(c.id);
  ++members;
  logger.info("store: ", c.rank() >= 0 ? cat("rank ", c.rank()) : std::string("an observer"), " joined from ", c.peer);
  wire::Welcome welcome;
  welcome.mac = server_proof(options.job_token, c.hs);
  welcome.world_size = options.world_size;
  reply(c, welcome);
}

std::optional<std::string> TcpStoreServer::Impl::membership_problem(Connection &c) {
  int rank = c.rank(), world = c.hs.world_size;
  std::string owner = options.owner_rank >= 0 ? cat("rank ", options.owner_rank) : std::string("the store");
  if (rank < -1) return cat("rank ", rank, " is invalid (ranks are 0..", options.world_size - 1, ")");
  if (rank == -1 && world == 0) return std::nullopt;  // an observer that does not claim a world size
  if (world != options.world_size)
    return cat(rank >= 0 ? cat("rank ", rank) : std::string("an observer"), " says world_size ", world, ", ", owner,
               " says ", options.world_size);
  if (rank >= world)
    return cat("rank ", rank, " is out of range for world_size ", world, " (ranks are 0..", world - 1, ")");
  if (rank >= 0) {
    auto holder = rank_holders.find(rank);
    if (holder != rank_holders.end() && holder_is_alive(holder->second)) {
      const Connection &h = connections.at(holder->second);
      return cat("rank ", rank, " is already taken by another process (connected from ", h.peer,
                 h.pid > 0 ? cat(", pid ", h.pid) : std::string(),
                 rank == options.owner_rank ? ", the process that serves this store" : "",
                 "): start exactly one process with RANK=", rank);
    }
  }
  return std::nullopt;
}

// A rank holder whose client has gone but whose close we have not read yet must not block a
// legitimate reconnect: peek at its socket and drop it if it reads end-of-file.
bool TcpStoreServer::Impl::holder_is_alive(uint64_t id) {
  auto it = connections.find(id);
  if (it == connections.end() || it->second.dead) return false;
  uint8_t byte;
  ssize_t got = ::recv(it->second.fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    drop(it->second, "closed by the client", LogLevel::kTrace);
    return false;
  }
  return true;
}

// ---- the rendezvous watch ---------------------------------------------------------------------

// Notes why the rank c claimed is absent; a member refused before the world is complete fails
// the job (its rank, or the rank it displaced, will never be there).
void TcpStoreServer::Impl::note_refusal(Connection &c, pstate_status_t status, const std::string &why, bool member) {
  int rank = c.rank();
  bool valid = rank >= 0 && rank < options.world_size;
  if (valid && rank_holders.find(rank) == rank_holders.end())
    notes[rank] = RankNote{Clock::now(), "refused", cat(c.origin(), ": ", why)};
  if (!member) return;
  count_claim(c);
  if (!complete()) fail_job(status, refused_reason(rank, c.origin(), why));
}

void TcpStoreServer::Impl::count_claim(Connection &c) {
  if (c.rank() < 0) return;
  ++rank_claims;
  if (rank_claims <= static_cast<uint64_t>(options.world_size) || warned_extra_claims) return;
  warned_extra_claims = true;
  logger.warn("store: ", rank_claims, " processes claimed ranks of this world of ", options.world_size,
              " (the latest: rank ", c.rank(), ", ", c.origin(),
              "): another job may be using this port and merging "
              "with this one; give each job its own PSTATE_JOB_ID (or job token) and MASTER_PORT");
}

// The job cannot start: answer every parked request now, and every later one, with why.
void TcpStoreServer::Impl::fail_job(pstate_status_t status, const std::string &why) {
  if (job_failure) return;
  job_failure = wire::Fail{static_cast<uint32_t>(status), std::string(wire::kJobFailedPrefix) + why};
  logger.warn("store: ", job_failure->text);
  for (auto &[id, other] : connections) {
    if (other.dead || !other.parked) continue;
    other.parked.reset();
    reply(other, *job_failure);
    runnable.push_back(id);
  }
}

// Fills t's picture of the world: who is connected, who is absent and why.
void TcpStoreServer::Impl::absent_ranks(wire::TimedOut &t) const {
  t.joined = static_cast<uint32_t>(rank_holders.size());
  if (rank_holders.size() >= static_cast<size_t>(options.world_size)) return;
  constexpr size_t kListed = 64;  // ranks of each kind named at most (the counts stay exact)
  AbsentRanks absent(options.world_size, {}, kListed);
  for (int r = 0; r < options.world_size; ++r) {
    if (rank_holders.count(r)) continue;
    auto note = notes.find(r);
    Absence why = ever_joined[static_cast<size_t>(r)] ? Absence::kLeft
                  : note != notes.end()               ? Absence::kRefused
                                                      : Absence::kNeverConnected;
    std::string seen;
    if (note != notes.end() && !absent.full(why))
      seen = cat(note->second.what, " ", seconds_ago(note->second.when), " (", note->second.detail, ")");
    absent.add(r, why, std::move(seen));
  }
  t.absent = absent.describe().substr(0, wire::kMaxTextBytes);
  t.waiting_for = absent.waiting_for().substr(0, wire::kMaxTextBytes);
}

// ---- requests -------------------------------------------------------------------------------

void TcpStoreServer::Impl::on_request(Connection &c, wire::Message &&m) {
  stat_requests.fetch_add(1, std::memory_order_relaxed);
  if (job_failure && !std::holds_alternative<wire::Members>(m))
    return reply(c, std::holds_alternative<wire::Abandon>(m) ? wire::Message(wire::Ok{}) : wire::Message(*job_failure));
  if (auto *set = std::get_if<wire::Set>(&m)) return on_set(c, std::move(*set));
  if (auto *get = std::get_if<wire::Get>(&m)) return on_get(c, *get);
  if (auto *add = std::get_if<wire::Add>(&m)) return on_add(c, *add);
  if (auto *wait = std::get_if<wire::Wait>(&m)) return on_wait(c, *wait);
  if (auto *check = std::get_if<wire::Check>(&m)) return reply(c, wire::Bool{missing_keys(check->keys).empty()});
  if (auto *erase = std::get_if<wire::Erase>(&m)) return on_erase(c, *erase);
  if (auto *sia = std::get_if<wire::SetIfAbsent>(&m)) {
    if (auto it = values.find(sia->key); it != values.end()) return reply_value(c, it->second);
    auto value = std::make_shared<const Bytes>(std::move(sia->value));
    if (!store_value(c, sia->key, value)) return;
    reply_value(c, value);
    return wake_waiters(sia->key);
  }
  if (std::holds_alternative<wire::Members>(m)) {
    std::vector<int32_t> ranks;
    for (const auto &[id, other] : connections)
      if (other.phase == Connection::Phase::kMember && other.rank() >= 0) ranks.push_back(other.rank());
    std::sort(ranks.begin(), ranks.end());
    Bytes value(ranks.size() * 4);
    for (size_t i = 0; i < ranks.size(); ++i)
      for (int b = 0; b < 4; ++b) value[i * 4 + b] = static_cast<uint8_t>(static_cast<uint32_t>(ranks[i]) >> (8 * b));
    return reply(c, wire::Value{std::move(value)});
  }
  if (auto *abandon = std::get_if<wire::Abandon>(&m)) {
    pstate_status_t status = abandon->status > PSTATE_OK && abandon->status <= PSTATE_ERR_INTERNAL
                                 ? static_cast<pstate_status_t>(abandon->status)
                                 : PSTATE_ERR_INTERNAL;
    fail_job(status, gave_up_reason(c.rank(), abandon->text));
    return reply(c, wire::Ok{});
  }
  stat_dropped.fetch_add(1);
  drop(c, cat("protocol violation: '", wire::op_name(wire::op_of(m)), "' is not a request"));
}

void TcpStoreServer::Impl::on_set(Connection &c, wire::Set &&m) {
  auto value = std::make_shared<const Bytes>(std::move(m.value));
  if (!store_value(c, m.key, std::move(value))) return;
  reply(c, wire::Ok{});
  wake_waiters(m.key);
}

// Stores key = value within the limits; on refusal replies with the reason and returns false.
bool TcpStoreServer::Impl::store_value(Connection &c, const std::string &key, std::shared_ptr<const Bytes> value) {
  auto it = values.find(key);
  size_t old_bytes = it == values.end() ? 0 : key.size() + it->second->size();
  size_t new_bytes = key.size() + value->size();
  bool too_many_keys = it == values.end() && values.size() >= options.max_keys;
  bool too_many_bytes = total_bytes - old_bytes + new_bytes > options.max_total_bytes;
  if (too_many_keys || too_many_bytes) {
    reply(c, wire::Fail{PSTATE_ERR_NO_MEMORY,
                        cat("the store is full (", values.size(), " keys, ", total_bytes, " bytes; limits ",
                            options.max_keys, " keys, ", options.max_total_bytes, " bytes): cannot set ",
                            quote_key(key))});
    return false;
  }
  total_bytes = total_bytes - old_bytes + new_bytes;
  if (it == values.end())
    values.emplace(key, std::move(value));
  else
    it->second = std::move(value);
  return true;
}

void TcpStoreServer::Impl::on_get(Connection &c, const wire::Get &m) {
  auto it = values.find(m.key);
  if (it != values.end()) return reply_value(c, it->second);
  park(c, {m.key}, true, m.wait_ms);
}

void TcpStoreServer::Impl::on_add(Connection &c, const wire::Add &m) {
  int64_t current = 0;
  auto it = values.find(m.key);
  if (it != values.end() && !counter_from_bytes(*it->second, &current))
    return reply(c, wire::Fail{PSTATE_ERR_INVALID_ARGUMENT,
                               cat("add(", quote_key(m.key), "): the key holds ", it->second->size(),
                                   " bytes that are not a decimal integer")});
  int64_t next = 0;
  if (__builtin_add_overflow(current, m.delta, &next))
    return reply(c, wire::Fail{PSTATE_ERR_INVALID_ARGUMENT,
                               cat("add(", quote_key(m.key), "): ", current, " + ", m.delta, " overflows int64")});
  if (!store_value(c, m.key, std::make_shared<const Bytes>(counter_to_bytes(next)))) return;
  reply(c, wire::Int{next});
  wake_waiters(m.key);
}

void TcpStoreServer::Impl::on_wait(Connection &c, const wire::Wait &m) {
  if (missing_keys(m.keys).empty()) return reply(c, wire::Ok{});
  park(c, m.keys, false, m.wait_ms);
}

void TcpStoreServer::Impl::on_erase(Connection &c, const wire::Erase &m) {
  auto it = values.find(m.key);
  bool existed = it != values.end();
  if (existed) {
    total_bytes -= m.key.size() + it->second->size();
    values.erase(it);
  }
  reply(c, wire::Bool{existed});
}

std::vector<std::string> TcpStoreServer::Impl::missing_keys(const std::vector<std::string> &keys) const {
  std::vector<std::string> missing;
  for (const auto &k : keys)
    if (values.find(k) == values.end()) missing.push_back(k);
  return missing;
}

// ---- parked requests ------------------------------------------------------------------------

void TcpStoreServer::Impl::park(Connection &c, std::vector<std::string> keys, bool is_get, uint32_t wait_ms) {
  c.parked = Parked{std::move(keys), is_get, Clock::now() + std::chrono::milliseconds(wait_ms), 0, std::string()};
  ++parked_count;
  touched.push_back(c.id);
  if (wait_ms == 0) return finish_parked(c);  // "look once": answer TimedOut right away
  timers.push(Timer{c.parked->until, c.id, true});
  file_parked(c);
}

// Files c's parked request under the first of its keys still missing (from its cursor on), or
// answers it when none is. A key that was there and has since been erased is found by the full
// look at the end, and the request waits for it again.
void TcpStoreServer::Impl::file_parked(Connection &c) {
  Parked &p = *c.parked;
  while (p.next < p.keys.size() && values.count(p.keys[p.next]) != 0) ++p.next;
  if (p.next == p.keys.size()) {
    p.next = 0;
    while (p.next < p.keys.size() && values.count(p.keys[p.next]) != 0) ++p.next;
    if (p.next == p.keys.size()) return finish_parked(c);
  }
  p.waiting_on = p.keys[p.next];
  waiters[p.waiting_on].insert(c.id);
}

void TcpStoreServer::Impl::unfile_parked(Connection &c) {
  if (!c.parked || c.parked->waiting_on.empty()) return;
  auto it = waiters.find(c.parked->waiting_on);
  if (it != waiters.end()) {
    it->second.erase(c.id);
    if (it->second.empty()) waiters.erase(it);
  }
  c.parked->waiting_on.clear();
}

// Replies to c's parked request now (its keys exist, or its time is up) and unblocks c.
void TcpStoreServer::Impl::finish_parked(Connection &c) {
  unfile_parked(c);
  Parked p = std::move(*c.parked);
  c.parked.reset();
  --parked_count;
  touched.push_back(c.id);
  std::vector<std::string> missing = missing_keys(p.keys);
  if (missing.empty()) {
    if (p.is_get)
      reply_value(c, values.at(p.keys.front()));
    else
      reply(c, wire::Ok{});
  } else {
    wire::TimedOut t;
    t.missing_count = static_cast<uint32_t>(missing.size());
    missing.resize(std::min(missing.size(), wire::kMaxTimedOutKeys));
    t.missing = std::move(missing);
    absent_ranks(t);
    reply(c, t);
  }
  runnable.push_back(c.id);
}

// A set or add of key: the requests filed under it look again (each is answered, or filed under
// its next missing key).
void TcpStoreServer::Impl::wake_waiters(const std::string &key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::unordered_set<uint64_t> ids = std::move(it->second);
  waiters.erase(it);
  for (uint64_t id : ids) {
    auto c = connections.find(id);
    if (c == connections.end() || c->second.dead || !c->second.parked) continue;
    c->second.parked->waiting_on.clear();
    file_parked(c->second);
  }
}

void TcpStoreServer::Impl::expire_timers() {
  auto now = Clock::now();
  while (!timers.empty() && timers.top().at <= now) {
    Timer t = timers.top();
    timers.pop();
    if (!timer_is_live(t)) continue;
    Connection &c = connections.at(t.id);
    if (t.parked) {
      finish_parked(c);
    } else {
      note_shed(c, true);
      drop(c, cat("no handshake within ", options.handshake_timeout_ms, " ms"), LogLevel::kTrace);
    }
  }
}

// ---- output ---------------------------------------------------------------------------------

void TcpStoreServer::Impl::reply(Connection &c, const wire::Message &m) {
  c.out.push_back(OutChunk{wire::encode(m), nullptr, 0});
  write_some(c);
}

void TcpStoreServer::Impl::reply_value(Connection &c, std::shared_ptr<const Bytes> value) {
  c.out.push_back(OutChunk{wire::encode_value_prefix(value->size()), nullptr, 0});
  if (!value->empty()) c.out.push_back(OutChunk{{}, std::move(value), 0});
  write_some(c);
}

// Replies with a failure, then closes the connection once the reply is out.
void TcpStoreServer::Impl::refuse(Connection &c, pstate_status_t status, const std::string &text) {
  stat_refused.fetch_add(1);
  c.close_after_reply = true;
  reply(c, wire::Fail{static_cast<uint32_t>(status), text});
}

void TcpStoreServer::Impl::write_some(Connection &c) {
  touched.push_back(c.id);
  while (!c.out.empty() && !c.dead) {
    OutChunk &chunk = c.out.front();
    ssize_t sent = ::send(c.fd.get(), chunk.data() + chunk.offset, chunk.size() - chunk.offset,
                          MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return drop(c, cat("send failed: ", std::strerror(errno)));
    }
    chunk.offset += static_cast<size_t>(sent);
    stat_bytes_out.fetch_add(static_cast<uint64_t>(sent), std::memory_order_relaxed);
    if (chunk.offset == chunk.size()) c.out.pop_front();
  }
  if (c.out.empty() && c.close_after_reply && !c.dead) {
    // Half-close so the client reads the reply, then EOF; closing outright could turn unread
    // input into a reset that destroys the reply.
    ::shutdown(c.fd.get(), SHUT_WR);
    drop(c, "refused", LogLevel::kTrace);
  }
}

void TcpStoreServer::Impl::drop(Connection &c, const std::string &why, LogLevel level) {
  if (c.dead) return;
  c.dead = true;
  dead.push_back(c.id);
  if (c.parked) {
    unfile_parked(c);
    c.parked.reset();
    --parked_count;
  }
  if (c.phase == Connection::Phase::kMember)
    --members;
  else
    handshaking.erase(c.id);
  if (level == LogLevel::kTrace)
    logger.trace("store: ", c.who(), ": ", why);
  else
    logger.info("store: closing the connection of ", c.who(), ": ", why);
  if (c.claims_rank) {
    auto it = rank_holders.find(c.rank());
    if (it != rank_holders.end() && it->second == c.id) {
      rank_holders.erase(it);
      notes[c.rank()] =
          RankNote{Clock::now(), "left", cat(c.origin(), ": its connection closed: it exited, was killed or finished")};
    }
    c.claims_rank = false;
    publish_ranks();
  }
}

void TcpStoreServer::Impl::sweep() {
  for (uint64_t id : dead) connections.erase(id);  // closing its descriptor takes it out of epoll
  dead.clear();
}

// Publishes the number of connected ranks at once (before the Welcome goes out, right when a
// rank's connection is dropped), so a rank waiting in close() never acts on a stale count.
void TcpStoreServer::Impl::publish_ranks() {
  std::lock_guard<std::mutex> lock(ranks_mutex);
  stat_ranks.store(rank_holders.size());
  ranks_changed.notify_all();
}

void TcpStoreServer::Impl::publish_stats() {
  const size_t parked = parked_count;
  stat_connections.store(connections.size());
  stat_members.store(members);
  stat_handshaking.store(handshaking.size());
  stat_shed.store(shed_total);  // after the handshake count: who sees this total sees that count too
  stat_parked.store(parked);
  stat_keys.store(values.size());
}

// ---- the public face ------------------------------------------------------------------------

namespace {

bool is_loopback(const net::SocketAddress &a) {
  if (a.family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in *>(&a.storage)->sin_addr.s_addr) >> 24) == 127;
  if (a.family() == AF_INET6) {
    const in6_addr &v6 = reinterpret_cast<const sockaddr_in6 *>(&a.storage)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

[[noreturn]] void throw_bind_error(const StoreServerOptions &o, const net::SocketAddress &a, int err) {
  std::string where = cat(o.host, " (", a.text(), ")");
  if (err == EADDRINUSE)
    throw_error(PSTATE_ERR_TRANSPORT, "cannot serve the store on ", where,
                ": the port is already in use (another job or a stale rank 0 holds it): choose another "
                "MASTER_PORT / init_method port");
  if (err == EADDRNOTAVAIL)
    throw_error(PSTATE_ERR_TRANSPORT, "cannot serve the store on ", where,
                ": that address is not on this host: rank 0 must run on the host MASTER_ADDR names");
  if (err == EACCES)
    throw_error(PSTATE_ERR_TRANSPORT, "cannot serve the store on ", where,
                ": permission denied (ports below 1024 need privileges): choose a port >= 1024");
  throw_error(PSTATE_ERR_TRANSPORT, "cannot serve the store on ", where, ": ", std::strerror(err));
}

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const StoreServerOptions &options, const Logger &logger,
                                                      int *bind_errno) {
  if (bind_errno != nullptr) *bind_errno = 0;
  if (options.world_size < 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store server: world_size ", options.world_size, " must be >= 1");
  auto impl = std::make_unique<Impl>();
  impl->ever_joined.assign(static_cast<size_t>(options.world_size), false);
  impl->options = options;
  const size_t world = static_cast<size_t>(options.world_size);
  if (impl->options.max_members == 0) impl->options.max_members = 4 * world + 64;
  if (impl->options.max_handshakes == 0) impl->options.max_handshakes = world + 64;
  impl->logger = logger;

  std::string error;
  std::vector<net::SocketAddress> addresses = net::resolve(options.host, options.port, &error);
  if (addresses.empty())
    throw_error(PSTATE_ERR_TRANSPORT, "cannot serve the store on ", options.host, ": cannot resolve it: ", error);
  // Listen on every address the host resolves to ("localhost" is 127.0.0.1 and ::1), all on one
  // port: the first successful bind picks it when the port is 0. An address family this host
  // lacks (no IPv6) is skipped as long as another address works.
  int port = options.port;
  int first_error = 0;
  bool reachable_from_elsewhere = false;
  const net::SocketAddress *first_failed = nullptr;
  for (const net::SocketAddress &resolved : addresses) {
    net::SocketAddress a = resolved;
    a.set_port(port);
    int err = 0;
    net::Fd fd = net::listen_on(a, 1024, &err);
    if (!fd.valid()) {
      if (bind_errno != nullptr) *bind_errno = err;
      if (err != EADDRNOTAVAIL && err != EAFNOSUPPORT) throw_bind_error(options, a, err);
      if (first_failed == nullptr) {
        first_failed = &resolved;
        first_error = err;
      }
      continue;
    }
    if (port == 0) port = net::local_address(fd.get()).port();
    reachable_from_elsewhere = reachable_from_elsewhere || !is_loopback(a);
    impl->listeners.push_back(std::move(fd));
  }
  if (bind_errno != nullptr) *bind_errno = 0;
  if (impl->listeners.empty()) throw_bind_error(options, *first_failed, first_error);
  impl->port = port;
  impl->wake = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl->wake.valid()) throw_error(PSTATE_ERR_TRANSPORT, "store server: eventfd: ", std::strerror(errno));
  impl->epoll = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!impl->epoll.valid()) throw_error(PSTATE_ERR_TRANSPORT, "store server: epoll_create1: ", std::strerror(errno));
  impl->watch(impl->wake.get(), EPOLL_CTL_ADD, EPOLLIN, kWakeEvent);
  for (size_t i = 0; i < impl->listeners.size(); ++i)
    impl->watch(impl->listeners[i].get(), EPOLL_CTL_ADD, EPOLLIN, kListenerEvent | i);
  Impl *raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  std::string url =
      cat("tcp://", options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host, ":", port);
  logger.info("store: serving ", url, " for ", options.world_size, " ranks",
              options.job_token.empty() ? " (no job token)" : " (job token required)",
              options.job_id.empty() ? std::string() : cat(", job '", options.job_id, "'"));
  if (options.job_token.empty() && reachable_from_elsewhere)
    logger.warn("store: serving ", url,
                " without a job token: any process that reaches this port can join this job, "
                "and a second job started on the same port would merge with it; set PSTATE_JOB_TOKEN on every rank "
                "(pstate run does), and PSTATE_JOB_ID to tell jobs apart");
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t n = ::write(impl_->wake.get(), &one, sizeof one);
  (void)n;
  if (impl_->thread.joinable()) impl_->thread.join();
}

int TcpStoreServer::port() const { return impl_->port; }

std::string TcpStoreServer::url() const {
  const std::string &h = impl_->options.host;
  return cat("tcp://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":", impl_->port);
}

bool TcpStoreServer::wait_for_ranks_at_most(size_t ranks, Deadline deadline) const {
  std::unique_lock<std::mutex> lock(impl_->ranks_mutex);
  return impl_->ranks_changed.wait_until(lock, deadline.at(), [&] { return impl_->stat_ranks.load() <= ranks; });
}

StoreServerStats TcpStoreServer::stats() const {
  StoreServerStats s;
  s.connections = impl_->stat_connections.load();
  s.members = impl_->stat_members.load();
  s.ever_joined = impl_->stat_ever_joined.load();
  s.ranks = impl_->stat_ranks.load();
  s.parked_requests = impl_->stat_parked.load();
  s.keys = impl_->stat_keys.load();
  s.refused = impl_->stat_refused.load();
  s.dropped = impl_->stat_dropped.load();
  s.handshaking = impl_->stat_handshaking.load();
  s.shed = impl_->stat_shed.load();
  s.accepted = impl_->stat_accepted.load();
  s.peak_connections = impl_->stat_peak_connections.load();
  s.requests = impl_->stat_requests.load();
  s.bytes_received = impl_->stat_bytes_in.load();
  s.bytes_sent = impl_->stat_bytes_out.load();
  return s;
}

std::string describe_server_traffic(const StoreServerStats &s) {
  return cat("accepted ", s.accepted, " peak_connections ", s.peak_connections, " requests ", s.requests,
             " received_bytes ", s.bytes_received, " sent_bytes ", s.bytes_sent);
}

}  // namespace pstate
