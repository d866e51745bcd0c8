// test_startup_store_counts.cpp — what start-up costs at the store, counted (issue 30, item 5):
// N ranks as threads run pstate_init's store traffic (bench/store_protocol.hpp: the real TcpStore
// client and server and the rendezvous function pstate_init calls) and the counters must match
// the protocol's rules, written out here from the documented steps, not read from the code:
//   every rank: 1 connection; set its record, add to the barrier, wait for it, and
//     ranks 1..N-1: 1 get of the directory, 1 get of its first peers' records -> 5 requests
//     rank 0: N gets of the records, 1 set of the directory, N - 1 sets of the others' first
//       peers' records -> 2N + 3
//     the barrier's last arrival: 1 set more
//   so N ranks send 7N - 1 requests in all, a client rank O(1), rank 0 O(N);
//   the dump watcher of each rank: 1 connection (an observer), 1 check, 1 parked get -> 2;
//   the server accepts 2N connections and answers every frame the clients sent.
// The directory a rank receives is compact: "PSD2", u32 job id length, job id, u32 text count, the
// texts (u32 length + bytes: here the one host id and the empty interfaces), u32 rank count, and
// 20 bytes per rank (two text indices, local rank, pid): no address. Its first peers' records
// (r +- 2^k mod N, 2^k < N, without r) are "PSF1", u32 count, and per peer u32 rank, u32 length
// and the record ("PSR2", i32 local rank, u32 interfaces length, interfaces, then the peer entry
// "PSU1", u32 address length, address, i64 pid, u32 host id length, host id): what a client
// receives grows with N by exactly those two, and by nothing else.
#include "../../bench/store_protocol.hpp"

#include <sys/resource.h>

#include <cstdarg>
#include <csetjmp>
#include <cstddef>
#include <set>
extern "C" {
#include <cmocka.h>
}

using namespace pstate;
using namespace pstate::bench;

namespace {

constexpr size_t kAddressBytes = 200;
const std::string kHostId = "store-protocol-host";  // what store_protocol.hpp's ranks publish

size_t record_bytes() { return 4 + 4 + 4 + 0 + (4 + 4 + kAddressBytes + 8 + 4 + kHostId.size()); }
size_t directory_bytes(int n) {
  return 4 + 4 + 3 /* "job" */ + 4 + (4 + kHostId.size()) + 4 + 4 + static_cast<size_t>(n) * 20;
}
size_t first_peer_count(int rank, int n) {
  std::set<int> peers;
  for (int d = 1; d < n; d <<= 1) {
    peers.insert((rank + d) % n);
    peers.insert((rank - d + n * d) % n);
  }
  peers.erase(rank);
  return peers.size();
}
size_t first_bytes(int rank, int n) { return 4 + 4 + first_peer_count(rank, n) * (4 + 4 + record_bytes()); }

ProtocolResult run(int n, bool watcher) {
  ProtocolOptions o;
  o.world_size = n;
  o.address_bytes = kAddressBytes;
  o.watcher = watcher;
  o.timeout_ms = 60000;
  ProtocolResult r = run_store_protocol(o);
  if (!r.error.empty()) fail_msg("%d ranks: %s", n, r.error.c_str());
  return r;
}

uint64_t sum_frames(const std::vector<StoreTraffic> &v) {
  uint64_t s = 0;
  for (const auto &t : v) s += t.frames;
  return s;
}

// Per rank as the rules above say; the one last arrival may be any rank.
void check_rank_requests(const ProtocolResult &r, int n) {
  uint64_t total = 0;
  int extra = 0;
  for (int i = 0; i < n; ++i) {
    const StoreTraffic &t = r.rank[static_cast<size_t>(i)];
    const uint64_t base = i == 0 ? 2 * static_cast<uint64_t>(n) + 3 : 5;
    assert_true(t.requests == base || t.requests == base + 1);
    extra += t.requests == base + 1;
    assert_int_equal(t.connects, 1);
    assert_true(t.frames >= t.requests);  // a wait longer than a slice is sent again
    total += t.requests;
  }
  assert_int_equal(extra, 1);
  assert_int_equal(total, 7 * static_cast<uint64_t>(n) - 1);
}

void test_a_client_rank_sends_five_requests_whatever_the_world_size(void **) {
  for (int n : {4, 16, 48}) {
    ProtocolResult r = run(n, false);
    check_rank_requests(r, n);
    assert_int_equal(r.server.accepted, static_cast<uint64_t>(n));
    assert_int_equal(r.server.requests, sum_frames(r.rank));
  }
}

void test_the_dump_watcher_adds_one_connection_and_two_requests_per_rank(void **) {
  const int n = 8;
  ProtocolResult r = run(n, true);
  check_rank_requests(r, n);
  for (const auto &w : r.watcher) {
    assert_int_equal(w.requests, 2);
    assert_int_equal(w.frames, 2);  // its get is parked for an hour-long slice
    assert_int_equal(w.connects, 1);
  }
  assert_int_equal(r.server.accepted, 2 * static_cast<uint64_t>(n));
  assert_true(r.server.peak_connections <= 2 * static_cast<size_t>(n));
  assert_int_equal(r.server.requests, sum_frames(r.rank) + sum_frames(r.watcher));
}

void test_what_a_client_receives_grows_by_the_directory_and_nothing_else(void **) {
  ProtocolResult small = run(4, false), large = run(16, false);
  // A client rank that was not the barrier's last arrival in either run (that one also receives
  // the Ok of its extra set): its only reply that depends on N is the directory.
  size_t i = 1;
  while (small.rank[i].requests != 5 || large.rank[i].requests != 5) ++i;
  const int r = static_cast<int>(i);
  const uint64_t grew = large.rank[i].bytes_received - small.rank[i].bytes_received;
  assert_int_equal(grew, directory_bytes(16) + first_bytes(r, 16) - directory_bytes(4) - first_bytes(r, 4));
  // The server sends at least what every client received, and receives what they sent.
  uint64_t received = 0, sent = 0;
  for (const auto &t : large.rank) received += t.bytes_received, sent += t.bytes_sent;
  assert_true(large.server.bytes_sent >= received);
  assert_true(large.server.bytes_received >= sent);
}

}  // namespace

int main() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    setrlimit(RLIMIT_NOFILE, &l);
  }
  const CMUnitTest tests[] = {
      cmocka_unit_test(test_a_client_rank_sends_five_requests_whatever_the_world_size),
      cmocka_unit_test(test_the_dump_watcher_adds_one_connection_and_two_requests_per_rank),
      cmocka_unit_test(test_what_a_client_receives_grows_by_the_directory_and_nothing_else),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
