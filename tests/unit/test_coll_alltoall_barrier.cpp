// test_coll_alltoall_barrier.cpp — alltoall_pairwise (every group size 1..9 × counts × element
// sizes, in and out of place, byte for byte) and barrier_dissemination (no rank leaves a barrier
// before every rank has entered it, over many consecutive barriers).
#include "coll/algorithms.hpp"
#include "move_cases.hpp"
#include "thread_channel.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace ptest;
using pstate::Channel;

namespace {

constexpr uint32_t kTagBase = 0x00030000;

// Rank i's block for rank j is pattern(i, j).
std::string run_alltoall(int p, size_t count, pstate_dtype_t d, bool in_place) {
  const size_t block = count * esize_of(d);
  std::vector<std::vector<uint8_t>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int i = 0; i < p; ++i) {
    for (int j = 0; j < p; ++j) {
      auto b = pattern(i, j, block);
      send[static_cast<size_t>(i)].insert(send[static_cast<size_t>(i)].end(), b.begin(), b.end());
    }
    recv[static_cast<size_t>(i)].assign(block * static_cast<size_t>(p), 0xEE);
  }
  std::string err = run_ranks(p, [&](Channel &ch) {
    const size_t r = static_cast<size_t>(ch.rank());
    void *out = in_place ? send[r].data() : recv[r].data();
    pstate::coll::alltoall_pairwise(ch, send[r].data(), out, count, d, kTagBase);
  });
  const std::string what = move_case("alltoall_pairwise", p, count, d) + (in_place ? " in place" : "");
  if (!err.empty()) return what + ": " + err;
  for (int j = 0; j < p; ++j) {
    const auto &result = in_place ? send[static_cast<size_t>(j)] : recv[static_cast<size_t>(j)];
    for (int i = 0; i < p; ++i) {
      std::string bad = check_pattern(result.data() + static_cast<size_t>(i) * block, i, j, block,
                                      what + " rank " + std::to_string(j) + " block from " + std::to_string(i));
      if (!bad.empty()) return bad;
    }
  }
  return "";
}

}  // namespace

static void test_alltoall_pairwise_delivers_each_block_to_its_rank(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{3001}})
      for (pstate_dtype_t d : kMoveDtypes)
        for (bool in_place : {false, true}) {
          std::string err = run_alltoall(p, count, d, in_place);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

// Before barrier k every rank bumps arrived[k]; after it, every rank must see all p arrivals.
// The last rank dawdles before entering, so an early exit would be seen.
static void test_barrier_releases_no_rank_before_all_have_entered(void **) {
  constexpr int kRounds = 20;
  for (int p = 1; p <= kMaxGroup; ++p) {
    std::vector<std::atomic<int>> arrived(kRounds);
    for (auto &a : arrived) a = 0;
    std::string err = run_ranks(p, [&](Channel &ch) {
      for (int k = 0; k < kRounds; ++k) {
        if (ch.rank() == p - 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
        arrived[static_cast<size_t>(k)].fetch_add(1);
        pstate::coll::barrier_dissemination(ch, static_cast<uint32_t>(k) << 16);
        const int seen = arrived[static_cast<size_t>(k)].load();
        if (seen != p) pstate::throw_error(PSTATE_ERR_INTERNAL, "left barrier ", k, " with ", seen, " of ", p, " arrived");
      }
    });
    if (!err.empty()) fail_msg("P=%d: %s", p, err.c_str());
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alltoall_pairwise_delivers_each_block_to_its_rank),
      cmocka_unit_test(test_barrier_releases_no_rank_before_all_have_entered),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
