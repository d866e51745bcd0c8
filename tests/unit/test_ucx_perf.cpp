// test_ucx_perf.cpp — measurements of the UCX transport, printed (never asserted: speed depends
// on the machine): 8-byte round-trip latency and 64 MiB bandwidth between two processes, and
// how the spin budget (WaitPolicy::spin_us) trades latency for CPU with 8 ranks on this box.
// The tests assert only that the data arrived intact. PSTATE_UCX_PERF_SWEEP=1 widens the sweep.
#include "test_ucx_harness.hpp"

#include <algorithm>

using namespace ucxtest;
using pstate::Channel;

namespace {

constexpr int kLimitS = 120;

void run_latency(int spin_us) {
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    auto o = test_options(rank, 2);
    o.wait.spin_us = spin_us;
    UcxWorker w(o);
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    constexpr int kWarmup = 500, kIters = 5000;
    uint64_t v = 0;
    double t0 = 0, c0 = 0;
    for (int i = 0; i < kWarmup + kIters; ++i) {
      if (i == kWarmup) {
        t0 = now_s();
        c0 = cpu_seconds();
      }
      if (rank == 0) {
        v = static_cast<uint64_t>(i);
        ch->send(1, &v, 8, 1);
        ch->recv(1, &v, 8, 2);
        CHILD_CHECK(v == static_cast<uint64_t>(i) + 1);
      } else {
        ch->recv(0, &v, 8, 1);
        ++v;
        ch->send(0, &v, 8, 2);
      }
    }
    double wall = now_s() - t0;
    if (rank == 0)
      std::printf("ucx perf: 2 processes, spin_us %4d: 8-byte round trip %6.2f us, rank 0 CPU %.0f%% of wall\n", spin_us,
                  wall / kIters * 1e6, (cpu_seconds() - c0) / wall * 100);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

void test_measure_8_byte_round_trip_latency(void **) {
  std::vector<int> budgets = {0, 20, 100};
  const char *sweep = std::getenv("PSTATE_UCX_PERF_SWEEP");
  if (sweep != nullptr && sweep[0] == '1') budgets = {0, 5, 10, 20, 50, 100, 200, 1000};
  for (int b : budgets) run_latency(b);
}

void test_measure_64MiB_bandwidth(void **) {
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    constexpr size_t kBytes = 64u << 20;
    constexpr int kIters = 10;
    std::vector<uint8_t> buf(kBytes);
    if (rank == 0) fill_pattern(buf, 7);
    uint8_t ack = 0;
    double best = 1e9, total = 0;
    for (int i = 0; i < kIters + 1; ++i) {  // the first one registers memory: warm-up
      double t0 = now_s();
      if (rank == 0) {
        ch->send(1, buf.data(), kBytes, 1);
        ch->recv(1, &ack, 1, 2);
      } else {
        ch->recv(0, buf.data(), kBytes, 1);
        ch->send(0, &ack, 1, 2);
      }
      double dt = now_s() - t0;
      if (i > 0) {
        best = std::min(best, dt);
        total += dt;
      }
    }
    if (rank == 1) CHILD_CHECK(matches_pattern(buf, 7));
    if (rank == 0)
      std::printf("ucx perf: 64 MiB one way: mean %.2f GB/s, best %.2f GB/s\n", kBytes / (total / kIters) / 1e9,
                  kBytes / best / 1e9);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// 8 ranks on this box: rounds of a ring shift (8 bytes) and a small all-to-all (1 KiB blocks),
// the pattern of a small all-reduce; per spin budget, wall time per round and CPU per rank.
void run_spin_config(int spin_us) {
  TempDir dir;
  constexpr int kWorld = 8, kRounds = 300;
  auto codes = run_ranks(kWorld, kLimitS, [&](int rank) {
    auto o = test_options(rank, kWorld);
    o.wait.spin_us = spin_us;
    UcxWorker w(o);
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    int next = (rank + 1) % kWorld, prev = (rank + kWorld - 1) % kWorld;
    std::vector<uint8_t> out(kWorld * 1024, static_cast<uint8_t>(rank)), in(kWorld * 1024);
    ch->sendrecv(next, &rank, 4, prev, &in[0], 4, 0);  // connect first
    double t0 = now_s(), c0 = cpu_seconds();
    for (uint32_t r = 1; r <= kRounds; ++r) {
      uint64_t v = r * 100 + static_cast<uint64_t>(rank), got = 0;
      ch->sendrecv(next, &v, 8, prev, &got, 8, r);
      CHILD_CHECK(got == r * 100 + static_cast<uint64_t>(prev));
      std::vector<Channel::Request> reqs;
      for (int k = 1; k < kWorld; ++k) {
        int to = (rank + k) % kWorld, from = (rank - k + kWorld) % kWorld;
        reqs.push_back(ch->irecv(from, &in[static_cast<size_t>(from) * 1024], 1024, 100000 + r));
        reqs.push_back(ch->isend(to, &out[static_cast<size_t>(to) * 1024], 1024, 100000 + r));
      }
      ch->wait_all(reqs.data(), reqs.size());
      for (int p = 0; p < kWorld; ++p)
        if (p != rank) CHILD_CHECK(in[static_cast<size_t>(p) * 1024 + 1023] == p);
    }
    double wall = now_s() - t0, cpu = cpu_seconds() - c0;
    if (rank == 0)
      std::printf("ucx perf: 8 ranks, spin_us %4d: %7.1f us per round (ring 8 B + all-to-all 1 KiB), "
                  "rank 0 CPU %.0f%% of wall\n",
                  spin_us, wall / kRounds * 1e6, cpu / wall * 100);
    ch->sendrecv(next, &rank, 4, prev, &in[0], 4, 999999);
    ch->sendrecv(prev, &rank, 4, next, &in[0], 4, 999998);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

void test_measure_spin_budget_with_8_ranks_on_this_box(void **) {
  std::vector<int> budgets = {0, 20, 200};
  const char *sweep = std::getenv("PSTATE_UCX_PERF_SWEEP");
  if (sweep != nullptr && sweep[0] == '1') budgets = {0, 5, 10, 20, 50, 100, 200, 1000, 5000};
  for (int b : budgets) run_spin_config(b);
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_measure_8_byte_round_trip_latency),
      cmocka_unit_test(test_measure_64MiB_bandwidth),
      cmocka_unit_test(test_measure_spin_budget_with_8_ranks_on_this_box),
  };
  if (const char *only = std::getenv("PSTATE_TEST_FILTER")) cmocka_set_test_filter(only);  // e.g. "*threads*"
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
