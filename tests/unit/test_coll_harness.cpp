// test_coll_harness.cpp — the algorithm unit-test harness itself
// (tests/support/thread_channel.hpp): the properties the algorithm tests lean on. A deadlock
// becomes an error within the timeout (never a hang), a size mismatch fails both sides, a message
// nobody receives is reported, a send completes only once received (rendezvous), and receives
// match in post order.
#include "thread_channel.hpp"

#include <atomic>
#include <string>
#include <vector>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using pstate::Channel;
using ptest::run_ranks;

namespace {
constexpr auto kShort = std::chrono::milliseconds(300);
bool contains(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }
}  // namespace

static void test_deadlock_is_reported_as_timeout_not_a_hang(void **) {
  // Both ranks receive before sending: a real deadlock.
  std::string err = run_ranks(2, [](Channel &ch) {
    int x = 0;
    ch.recv(1 - ch.rank(), &x, sizeof x, 1);
    ch.send(1 - ch.rank(), &x, sizeof x, 1);
  }, kShort);
  assert_true(contains(err, "not matched within"));
}

static void test_blocking_sends_on_both_sides_deadlock_as_over_rendezvous(void **) {
  // An eager transport would hide this bug; the harness, like UCX for large messages, does not.
  std::string err = run_ranks(2, [](Channel &ch) {
    std::vector<uint8_t> out(64), in(64);
    ch.send(1 - ch.rank(), out.data(), out.size(), 1);
    ch.recv(1 - ch.rank(), in.data(), in.size(), 1);
  }, kShort);
  assert_false(err.empty());
}

static void test_size_mismatch_fails_both_sides(void **) {
  std::string err = run_ranks(2, [](Channel &ch) {
    uint64_t x = 0;
    if (ch.rank() == 0) ch.send(1, &x, 8, 3);
    else ch.recv(0, &x, 4, 3);
  }, kShort);
  assert_true(contains(err, "rank 0"));
  assert_true(contains(err, "rank 1"));
  assert_true(contains(err, "8 bytes but the receive expects 4"));
}

static void test_unreceived_message_is_reported(void **) {
  std::string err = run_ranks(2, [](Channel &ch) {
    static const int x = 5;
    if (ch.rank() == 0) ch.isend(1, &x, sizeof x, 9);  // never waited, never received
  }, kShort);
  assert_true(contains(err, "unmatched send 0 -> 1 tag 0x9"));
}

static void test_receives_match_in_post_order_even_when_waited_out_of_order(void **) {
  std::vector<int> got(3, -1);
  std::string err = run_ranks(2, [&](Channel &ch) {
    if (ch.rank() == 0) {
      for (int v : {10, 20, 30}) ch.send(1, &v, sizeof v, 4);
    } else {
      Channel::Request r[3];
      for (int i = 0; i < 3; ++i) r[i] = ch.irecv(0, &got[static_cast<size_t>(i)], sizeof(int), 4);
      ch.wait_all(&r[2], 1);
      ch.wait_all(&r[0], 2);
    }
  }, kShort);
  assert_string_equal(err.c_str(), "");
  assert_int_equal(got[0], 10);
  assert_int_equal(got[1], 20);
  assert_int_equal(got[2], 30);
}

static void test_one_failing_rank_makes_the_others_fail_fast(void **) {
  std::string err = run_ranks(4, [](Channel &ch) {
    if (ch.rank() == 2) pstate::throw_error(PSTATE_ERR_INTERNAL, "rank 2 gives up");
    int x = 0;
    ch.recv(2, &x, sizeof x, 1);  // would wait forever without the abort
  }, std::chrono::seconds(60));
  assert_true(contains(err, "rank 2 gives up"));
  assert_true(contains(err, "aborted"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deadlock_is_reported_as_timeout_not_a_hang),
      cmocka_unit_test(test_blocking_sends_on_both_sides_deadlock_as_over_rendezvous),
      cmocka_unit_test(test_size_mismatch_fails_both_sides),
      cmocka_unit_test(test_unreceived_message_is_reported),
      cmocka_unit_test(test_receives_match_in_post_order_even_when_waited_out_of_order),
      cmocka_unit_test(test_one_failing_rank_makes_the_others_fail_fast),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
