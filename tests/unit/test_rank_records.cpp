// test_rank_records.cpp — the rendezvous' values (group/rank_records.hpp), byte for byte: the
// compact directory every rank reads (no UCX address, host ids and interface texts kept once), the
// whole one pstate_grow hands a newcomer, the first peers' records, and that anything malformed is
// PSTATE_ERR_MISMATCH, never a read out of bounds. The expected sizes are written out from the
// documented layout, not taken from the encoder.
#include "group/rank_records.hpp"

#include "common/error.hpp"

#include <cstdarg>
#include <csetjmp>
#include <cstddef>
#include <functional>
#include <set>
extern "C" {
#include <cmocka.h>
}

using namespace pstate;

namespace {

RankRecord record(int rank, const std::string &host, const std::string &ifaces) {
  RankRecord r;
  r.local_rank = rank % 3 == 0 ? -1 : rank % 4;
  r.interfaces = ifaces;
  r.peer.address.assign(static_cast<size_t>(40 + rank), static_cast<uint8_t>(rank));
  r.peer.pid = 1000 + rank;
  r.peer.host_id = host;
  return r;
}

std::vector<RankRecord> world(int n) {
  std::vector<RankRecord> w;
  for (int r = 0; r < n; ++r)
    w.push_back(record(r, r < n / 2 ? "host-a" : "host-b", r < n / 2 ? "eth0 10.0.0.1" : "eth0 10.0.0.2"));
  return w;
}

pstate_status_t status_of(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.status();
  }
  return PSTATE_OK;
}

void test_the_compact_directory_has_every_fact_but_the_address(void **) {
  const std::vector<RankRecord> w = world(10);
  Bytes bytes = encode_compact_directory("job-1", w);
  // "PSD2", job id, 4 distinct texts (2 hosts, 2 interface texts), 10 ranks of 20 bytes.
  const size_t texts = (4 + 6) + (4 + 13) + (4 + 6) + (4 + 13);
  assert_int_equal(bytes.size(), 4 + (4 + 5) + 4 + texts + 4 + 10 * 20);
  RankDirectory d = decode_rank_directory(bytes);
  assert_true(d.addresses_on_store);
  assert_string_equal(d.job_id.c_str(), "job-1");
  assert_int_equal(d.ranks.size(), 10);
  for (size_t r = 0; r < w.size(); ++r) {
    assert_int_equal(d.ranks[r].local_rank, w[r].local_rank);
    assert_string_equal(d.ranks[r].interfaces.c_str(), w[r].interfaces.c_str());
    assert_string_equal(d.ranks[r].peer.host_id.c_str(), w[r].peer.host_id.c_str());
    assert_int_equal(d.ranks[r].peer.pid, w[r].peer.pid);
    assert_true(d.ranks[r].peer.address.empty());
  }
}

void test_the_whole_directory_keeps_every_address(void **) {
  const std::vector<RankRecord> w = world(5);
  std::vector<Bytes> raw;
  for (const auto &r : w) raw.push_back(encode_rank_record(r));
  RankDirectory d = decode_rank_directory(encode_rank_directory("job-2", raw));
  assert_false(d.addresses_on_store);
  assert_int_equal(d.ranks.size(), 5);
  for (size_t r = 0; r < w.size(); ++r) assert_true(d.ranks[r].peer.address == w[r].peer.address);
}

void test_world_barrier_peers_are_r_plus_and_minus_powers_of_two(void **) {
  for (int n = 1; n <= 33; ++n)
    for (int r = 0; r < n; ++r) {
      std::set<int> want;
      for (int d = 1; d < n; d <<= 1) {
        want.insert((r + d) % n);
        want.insert(((r - d) % n + n) % n);
      }
      want.erase(r);
      std::vector<int> got = world_barrier_peers(r, n);
      assert_int_equal(got.size(), want.size());  // each once
      assert_true(std::set<int>(got.begin(), got.end()) == want);
    }
}

void test_anything_malformed_is_a_mismatch(void **) {
  Bytes good = encode_compact_directory("job", world(4));
  // Every truncation, and every single-byte change of the header's magic.
  for (size_t len = 0; len < good.size(); ++len) {
    Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));
    assert_int_equal(status_of([&] { decode_rank_directory(cut); }), PSTATE_ERR_MISMATCH);
  }
  Bytes trailing = good;
  trailing.push_back(0);
  assert_int_equal(status_of([&] { decode_rank_directory(trailing); }), PSTATE_ERR_MISMATCH);
  Bytes magic = good;
  magic[3] = '9';
  assert_int_equal(status_of([&] { decode_rank_directory(magic); }), PSTATE_ERR_MISMATCH);
  // A rank's host text index past the table (the first rank's entry starts 20 * 4 bytes before the end).
  Bytes index = good;
  index[good.size() - 4 * 20] = 0xff;
  assert_int_equal(status_of([&] { decode_rank_directory(index); }), PSTATE_ERR_MISMATCH);
  // A rank count that the bytes cannot hold.
  Bytes count = good;
  const size_t at = good.size() - 4 * 20 - 4;
  count[at + 3] = 0x7f;
  assert_int_equal(status_of([&] { decode_rank_directory(count); }), PSTATE_ERR_MISMATCH);
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_compact_directory_has_every_fact_but_the_address),
      cmocka_unit_test(test_the_whole_directory_keeps_every_address),
      cmocka_unit_test(test_world_barrier_peers_are_r_plus_and_minus_powers_of_two),
      cmocka_unit_test(test_anything_malformed_is_a_mismatch),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
