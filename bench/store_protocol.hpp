// store_protocol.hpp — the store traffic of a job's start-up, for N ranks as threads of one
// process against the real TCP store server (issue 30, item 5): no UCX, no collectives, only
// what each rank says to the store, through the library's own code.
//
// Each simulated rank does what pstate_init does on the store, with the same functions:
//   - opens its TcpStore (rank 0 first, serving; the others connect to it): one connection and
//     its handshake (TcpStore::open);
//   - with `watcher` (the default of a real rank: its flight recorder's dump watcher,
//     group/dump_watcher.cpp) a second connection as an observer that checks the dump counter
//     and then parks a get for the first dump request until the rank finalizes;
//   - exchange_rank_records (group/rank_records.cpp, the function pstate_init calls): its record
//     set, the store barrier, rank 0's reads, compact directory and first-peer records, the
//     others' gets of the directory and of their first peers' records.
// initialize_model_parallel sends nothing to the store (its agreement and barrier run over UCX),
// so nothing is simulated for it; the whole-process counts (bench/startup_curve.sh) show that.
// Then each rank closes its store as finalize does (rank 0 waits for the others to leave).
//
// A record is what a real rank publishes (encode_rank_record of a PeerEntry) with an address of
// `address_bytes` (a UCX worker address; see BENCHMARKS.md for the size on this host).
// Threads get small stacks (256 KiB) so that thousands fit; the caller raises RLIMIT_NOFILE
// (each rank holds 2 connections, 4 descriptors in this one process).
#pragma once

#include "bootstrap/init_method.hpp"
#include "bootstrap/tcp_store.hpp"
#include "bootstrap/tcp_store_server.hpp"
#include "group/dump_watcher.hpp"
#include "group/rank_records.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <vector>

namespace pstate::bench {

struct ProtocolOptions {
  int world_size = 8;
  size_t address_bytes = 200;
  bool watcher = true;
  int64_t timeout_ms = 600000;
  // > 0: at most this many ranks connect (open and handshake) at once, the others queue first.
  // The counts do not depend on it; a world that starts all at once can outrun the server's
  // handshake deadline (BENCHMARKS.md), and a real job's ranks seldom start in the same second.
  int connect_batch = 0;
};

struct ProtocolResult {
  std::vector<StoreTraffic> rank;     // the rank connection's counters, per rank
  std::vector<StoreTraffic> watcher;  // the watcher connection's, per rank (empty without one)
  StoreServerStats server;            // at rank 0's close, after every rank left
  double exchange_ms = 0;             // from the first open to the last rank's directory
  double total_ms = 0;                // to the last close
  std::string error;                  // the first rank's failure, or empty
};

namespace detail {

// Runs fn on a thread with a small stack; join with pthread_join.
inline pthread_t start_small_thread(std::function<void()> *fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t t{};
  int rc = pthread_create(
      &t, &attr,
      [](void *arg) -> void * {
        (*static_cast<std::function<void()> *>(arg))();
        return nullptr;
      },
      fn);
  pthread_attr_destroy(&attr);
  if (rc != 0) throw_error(PSTATE_ERR_NO_MEMORY, "store_protocol: cannot start a thread (errno ", rc, ")");
  return t;
}

inline StoreOptions options_for(int rank, int world, int port, int64_t timeout_ms) {
  InitMethod m;
  m.kind = InitMethod::Kind::kTcp;
  m.host = "127.0.0.1";
  m.port = port;
  StoreOptions o;
  o.init_method = m.url();
  o.rank = rank;
  o.world_size = world;
  o.timeout_ms = timeout_ms;
  return o;
}

}  // namespace detail

inline ProtocolResult run_store_protocol(const ProtocolOptions &opt) {
  using Clock = std::chrono::steady_clock;
  const int n = opt.world_size;
  ProtocolResult res;
  res.rank.resize(static_cast<size_t>(n));
  if (opt.watcher) res.watcher.resize(static_cast<size_t>(n));
  Logger quiet(LogLevel::kNone);
  const auto t0 = Clock::now();
  // Rank 0 serves on a free port; the others learn it from here (a launcher's MASTER_PORT).
  std::unique_ptr<TcpStore> store0 = TcpStore::open(detail::options_for(0, n, 0, opt.timeout_ms),
                                                    parse_init_method(detail::options_for(0, n, 0, 0).init_method), quiet);
  const int port = store0->port();
  std::vector<std::unique_ptr<TcpStore>> watchers(static_cast<size_t>(n));
  std::vector<std::function<void()>> watcher_fn(static_cast<size_t>(n)), rank_fn(static_cast<size_t>(n));
  std::vector<pthread_t> watcher_threads, rank_threads;
  std::atomic<int> exchanged{0};
  std::atomic<int64_t> last_exchange_ns{0};
  std::mutex error_mutex;
  auto note_error = [&](int r, const std::exception &e) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (res.error.empty()) res.error = cat("rank ", r, ": ", e.what());
  };
  const InitMethod method = parse_init_method(detail::options_for(0, n, port, 0).init_method);
  std::counting_semaphore<> connecting(opt.connect_batch > 0 ? opt.connect_batch : n + 1);
  struct Slot {  // one of the connect_batch places, held while connecting
    std::counting_semaphore<> &s;
    explicit Slot(std::counting_semaphore<> &sem) : s(sem) { s.acquire(); }
    ~Slot() { s.release(); }
  };
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<size_t>(r);
    if (opt.watcher) {
      // As DumpWatcher: an observer connection, opened by its own thread (open_unconnected).
      StoreOptions wo = detail::options_for(-1, n, port, opt.timeout_ms);
      watchers[i] = TcpStore::open_unconnected(wo, method, quiet);
      watchers[i]->set_wait_slice_ms(3600 * 1000);
      watcher_fn[i] = [&, r, i] {
        try {
          {
            Slot slot(connecting);
            watchers[i]->check(DumpWatcher::kCountKey, Deadline::after_ms(opt.timeout_ms));
          }
          watchers[i]->get(DumpWatcher::request_key(1), Deadline::never());
        } catch (const Error &e) {
          if (e.status() != PSTATE_ERR_ABORTED) note_error(r, e);
        }
      };
      watcher_threads.push_back(detail::start_small_thread(&watcher_fn[i]));
    }
    rank_fn[i] = [&, r, i] {
      try {
        std::unique_ptr<TcpStore> own;
        TcpStore *store = store0.get();
        if (r != 0) {
          Slot slot(connecting);
          own = TcpStore::open(detail::options_for(r, n, port, opt.timeout_ms), method, quiet);
          store = own.get();
        }
        RankRecord mine;
        mine.peer.address.assign(opt.address_bytes, static_cast<uint8_t>(r));
        mine.peer.pid = 100000 + r;
        mine.peer.host_id = "store-protocol-host";
        Rendezvous rv = exchange_rank_records(*store, r, n, encode_rank_record(mine), r == 0 ? "job" : "",
                                              Deadline::after_ms(opt.timeout_ms), world_barrier_peers);
        // One rank decodes it (a real rank decodes its own; here that would hold N copies at once).
        if (r == n - 1 && decode_rank_directory(rv.directory).ranks.size() != static_cast<size_t>(n))
          throw_error(PSTATE_ERR_INTERNAL, "the directory does not list ", n, " ranks");
        for (const auto &[peer, rec] : rv.first)  // the first peers' records are theirs, whole
          if (rec.peer.pid != 100000 + peer || rec.peer.address != Bytes(opt.address_bytes, static_cast<uint8_t>(peer)))
            throw_error(PSTATE_ERR_INTERNAL, "rank ", r, " got a wrong record for its first peer ", peer);
        rv = Rendezvous();
        exchanged.fetch_add(1);
        last_exchange_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
        res.rank[i] = store->traffic();
        if (r != 0) own->close(Deadline::after_ms(opt.timeout_ms));  // finalize: a client just leaves
      } catch (const std::exception &e) {
        note_error(r, e);
      }
    };
    rank_threads.push_back(detail::start_small_thread(&rank_fn[i]));
  }
  for (pthread_t t : rank_threads) pthread_join(t, nullptr);
  res.exchange_ms = static_cast<double>(last_exchange_ns.load()) / 1e6;
  // finalize: every watcher stops (DumpWatcher::stop), then rank 0 closes once the others left.
  for (auto &w : watchers)
    if (w) w->interrupt();
  for (pthread_t t : watcher_threads) pthread_join(t, nullptr);
  for (size_t i = 0; i < res.watcher.size(); ++i) {
    res.watcher[i] = watchers[i]->traffic();
    watchers[i].reset();
  }
  // Rank 0's close waits for the others to leave, then drops the server: read its counters there.
  store0->server()->wait_for_ranks_at_most(1, Deadline::after_ms(opt.timeout_ms));
  res.server = store0->server()->stats();
  store0->close(Deadline::after_ms(opt.timeout_ms));
  res.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return res;
}

}  // namespace pstate::bench
