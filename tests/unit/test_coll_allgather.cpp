// test_coll_allgather.cpp — allgather_ring and allgather_bruck over the thread harness: every
// group size 1..9 × counts {0, 1, 7, 1000, 30011} × element sizes 1/2/4/8, out of place and in
// place (send = recv + rank * block), every block checked byte for byte on every rank. Under TSan
// the counts stop at 1000 (tests/support/coll_cases.hpp, kSweepCounts).
#include "coll/algorithms.hpp"
#include "move_cases.hpp"
#include "thread_channel.hpp"

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

constexpr uint32_t kTagBase = 0x00070000;
using AllgatherFn = void (*)(Channel &, const void *, void *, size_t, pstate_dtype_t, uint32_t);

std::string run_case(const char *name, AllgatherFn fn, int p, size_t count, pstate_dtype_t d, bool in_place) {
  const size_t block = count * esize_of(d);
  std::vector<std::vector<uint8_t>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    send[static_cast<size_t>(r)] = pattern(r, 0, block);
    recv[static_cast<size_t>(r)].assign(block * static_cast<size_t>(p), 0xEE);
    if (in_place) std::copy(send[static_cast<size_t>(r)].begin(), send[static_cast<size_t>(r)].end(),
                            recv[static_cast<size_t>(r)].begin() + static_cast<long>(static_cast<size_t>(r) * block));
  }
  std::string err = run_ranks(p, [&](Channel &ch) {
    const size_t r = static_cast<size_t>(ch.rank());
    const void *src = in_place ? recv[r].data() + r * block : send[r].data();
    fn(ch, src, recv[r].data(), count, d, kTagBase);
  });
  const std::string what = move_case(name, p, count, d) + (in_place ? " in place" : "");
  if (!err.empty()) return what + ": " + err;
  for (int r = 0; r < p; ++r)
    for (int j = 0; j < p; ++j) {
      std::string bad = check_pattern(recv[static_cast<size_t>(r)].data() + static_cast<size_t>(j) * block, j, 0, block,
                                      what + " rank " + std::to_string(r) + " block " + std::to_string(j));
      if (!bad.empty()) return bad;
    }
  return "";
}

void check_all(const char *name, AllgatherFn fn) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (size_t count : kSweepCounts)
      for (pstate_dtype_t d : kMoveDtypes)
        for (bool in_place : {false, true}) {
          std::string err = run_case(name, fn, p, count, d, in_place);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

}  // namespace

static void test_allgather_ring_places_every_block_on_every_rank(void **) {
  check_all("allgather_ring", pstate::coll::allgather_ring);
}

static void test_allgather_bruck_places_every_block_on_every_rank(void **) {
  check_all("allgather_bruck", pstate::coll::allgather_bruck);
}

static void test_allgather_rejects_an_invalid_dtype_on_every_rank(void **) {
  std::vector<uint8_t> a(8), b(32);
  std::string err = run_ranks(4, [&](Channel &ch) {
    try {
      pstate::coll::allgather_ring(ch, a.data(), b.data(), 1, static_cast<pstate_dtype_t>(42), kTagBase);
    } catch (const pstate::Error &e) {
      if (e.status() == PSTATE_ERR_INVALID_ARGUMENT) return;
      throw;
    }
    pstate::throw_error(PSTATE_ERR_INTERNAL, "invalid dtype accepted");
  });
  if (!err.empty()) fail_msg("%s", err.c_str());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allgather_ring_places_every_block_on_every_rank),
      cmocka_unit_test(test_allgather_bruck_places_every_block_on_every_rank),
      cmocka_unit_test(test_allgather_rejects_an_invalid_dtype_on_every_rank),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
