// test_coll_scatter.cpp — scatter_linear over the thread harness: every group size 1..9 × every
// root × counts {0, 1, 7, 1000, 30011} × element sizes, byte for byte (every byte a hash of the
// destination block and its index, so a block sent to the wrong rank or a byte never written is
// caught), in place on the root (recv == send + root * recv_count) and out of place; the ranks
// other than the root pass send = nullptr; a bad root is refused on every rank before any
// message. Under TSan the counts stop at 1000 (tests/support/coll_cases.hpp, kSweepCounts).
#include "coll/algorithms.hpp"
#include "move_cases.hpp"
#include "thread_channel.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
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

constexpr uint32_t kTagBase = 0x00050000;

// The root's send: block j is pattern(root, j). Rank r must end with pattern(root, r).
std::string run_scatter(int p, int root, size_t count, pstate_dtype_t d, bool in_place) {
  const size_t block = count * esize_of(d);
  std::vector<uint8_t> send;
  for (int j = 0; j < p; ++j) {
    const std::vector<uint8_t> b = pattern(root, j, block);
    send.insert(send.end(), b.begin(), b.end());
  }
  std::vector<std::vector<uint8_t>> recv(static_cast<size_t>(p), std::vector<uint8_t>(block + 1, 0xEE));
  std::string err = run_ranks(p, [&](Channel &ch) {
    const int r = ch.rank();
    if (r != root) return pstate::coll::scatter_linear(ch, nullptr, recv[static_cast<size_t>(r)].data(), count, d, root, kTagBase);
    void *dst = in_place ? send.data() + static_cast<size_t>(root) * block : recv[static_cast<size_t>(r)].data();
    pstate::coll::scatter_linear(ch, send.data(), dst, count, d, root, kTagBase);
  });
  const std::string what = move_case("scatter_linear", p, count, d, root) + (in_place ? " in place" : "");
  if (!err.empty()) return what + ": " + err;
  for (int r = 0; r < p; ++r) {
    const uint8_t *got = (in_place && r == root) ? send.data() + static_cast<size_t>(root) * block
                                                 : recv[static_cast<size_t>(r)].data();
    std::string bad = check_pattern(got, root, r, block, what + " rank " + std::to_string(r));
    if (!bad.empty()) return bad;
    if (!(in_place && r == root) && recv[static_cast<size_t>(r)][block] != 0xEE)
      return what + ": rank " + std::to_string(r) + " wrote past its block";
  }
  // The root's send is only read: every other block is still there.
  for (int j = 0; j < p; ++j) {
    std::string bad = check_pattern(send.data() + static_cast<size_t>(j) * block, root, j, block, what + " send");
    if (!bad.empty()) return bad;
  }
  return "";
}

}  // namespace

static void test_scatter_linear_delivers_every_block_from_every_root(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (int root = 0; root < p; ++root)
      for (size_t count : kSweepCounts)
        for (pstate_dtype_t d : {PSTATE_FP8_E5M2, PSTATE_FLOAT64})  // bytes are bytes: two sizes suffice
          for (bool in_place : {false, true}) {
            std::string err = run_scatter(p, root, count, d, in_place);
            if (!err.empty()) fail_msg("%s", err.c_str());
          }
}

static void test_scatter_linear_every_element_size(void **) {
  for (pstate_dtype_t d : kMoveDtypes) {
    std::string err = run_scatter(5, 3, 1001, d, false);
    if (!err.empty()) fail_msg("%s", err.c_str());
  }
}

static void test_scatter_invalid_root_is_refused_on_every_rank_before_any_message(void **) {
  for (int root : {-1, 4}) {
    std::vector<std::vector<uint8_t>> buf(4, std::vector<uint8_t>(64));
    std::string err = run_ranks(4, [&](Channel &ch) {
      auto &b = buf[static_cast<size_t>(ch.rank())];
      try {
        pstate::coll::scatter_linear(ch, b.data(), b.data(), 4, PSTATE_INT8, root, kTagBase);
      } catch (const pstate::Error &e) {
        if (e.status() == PSTATE_ERR_INVALID_ARGUMENT) return;
        throw;
      }
      pstate::throw_error(PSTATE_ERR_INTERNAL, "root ", root, " accepted");
    });
    if (!err.empty()) fail_msg("%s", err.c_str());
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scatter_linear_delivers_every_block_from_every_root),
      cmocka_unit_test(test_scatter_linear_every_element_size),
      cmocka_unit_test(test_scatter_invalid_root_is_refused_on_every_rank_before_any_message),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
