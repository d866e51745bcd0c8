// test_coll_broadcast_gather.cpp — broadcast_binomial, broadcast_pipelined_chain (default and
// tiny chunks) and gather_linear over the thread harness: every group size 1..9 × every root ×
// counts {0, 1, 7, 1000, 30011} × element sizes, byte for byte, plus a chain long enough to span
// many default chunks and an invalid root refused on every rank before any message. Under TSan
// the counts stop at 1000 (tests/support/coll_cases.hpp, kSweepCounts).
#include "coll/algorithms.hpp"
#include "move_cases.hpp"
#include "thread_channel.hpp"

#include <cstdint>
#include <functional>
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

constexpr uint32_t kTagBase = 0x12340000;
using BroadcastFn = std::function<void(Channel &, void *, size_t, pstate_dtype_t, int, uint32_t)>;

std::string run_broadcast(const char *name, const BroadcastFn &fn, int p, int root, size_t count, pstate_dtype_t d) {
  const size_t bytes = count * esize_of(d);
  std::vector<std::vector<uint8_t>> buf(static_cast<size_t>(p), std::vector<uint8_t>(bytes, 0xEE));
  buf[static_cast<size_t>(root)] = pattern(root, 0, bytes);
  std::string err = run_ranks(p, [&](Channel &ch) { fn(ch, buf[static_cast<size_t>(ch.rank())].data(), count, d, root, kTagBase); });
  const std::string what = move_case(name, p, count, d, root);
  if (!err.empty()) return what + ": " + err;
  for (int r = 0; r < p; ++r) {
    std::string bad = check_pattern(buf[static_cast<size_t>(r)].data(), root, 0, bytes, what + " rank " + std::to_string(r));
    if (!bad.empty()) return bad;
  }
  return "";
}

void check_broadcast(const char *name, const BroadcastFn &fn, size_t max_count = SIZE_MAX) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (int root = 0; root < p; ++root)
      for (size_t count : kSweepCounts)
        if (count <= max_count)
        for (pstate_dtype_t d : {PSTATE_FP8_E5M2, PSTATE_FLOAT64}) {
          std::string err = run_broadcast(name, fn, p, root, count, d);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

std::string run_gather(int p, int root, size_t count, pstate_dtype_t d, bool in_place) {
  const size_t block = count * esize_of(d);
  std::vector<std::vector<uint8_t>> send(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) send[static_cast<size_t>(r)] = pattern(r, 0, block);
  std::vector<uint8_t> recv(block * static_cast<size_t>(p), 0xEE);
  if (in_place) std::copy(send[static_cast<size_t>(root)].begin(), send[static_cast<size_t>(root)].end(),
                          recv.begin() + static_cast<long>(static_cast<size_t>(root) * block));
  std::string err = run_ranks(p, [&](Channel &ch) {
    const int r = ch.rank();
    const void *src = (in_place && r == root) ? recv.data() + static_cast<size_t>(r) * block : send[static_cast<size_t>(r)].data();
    pstate::coll::gather_linear(ch, src, r == root ? recv.data() : nullptr, count, d, root, kTagBase);
  });
  const std::string what = move_case("gather_linear", p, count, d, root) + (in_place ? " in place" : "");
  if (!err.empty()) return what + ": " + err;
  for (int j = 0; j < p; ++j) {
    std::string bad = check_pattern(recv.data() + static_cast<size_t>(j) * block, j, 0, block, what + " block " + std::to_string(j));
    if (!bad.empty()) return bad;
  }
  return "";
}

}  // namespace

static void test_broadcast_binomial_reaches_every_rank_from_every_root(void **) {
  check_broadcast("broadcast_binomial", pstate::coll::broadcast_binomial);
}

static void test_broadcast_pipelined_chain_reaches_every_rank_from_every_root(void **) {
  check_broadcast("broadcast_pipelined_chain", pstate::coll::broadcast_pipelined_chain);
}

static void test_broadcast_pipelined_chain_with_tiny_chunks_reaches_every_rank(void **) {
  // 20 bytes: rounded down to whole elements (2 float64), so chunks never split an element.
  check_broadcast("broadcast_pipelined_chain(chunk 20 B)", [](Channel &ch, void *b, size_t n, pstate_dtype_t d, int root,
                                                               uint32_t tag) {
    pstate::coll::broadcast_pipelined_chain_chunked(ch, b, n, d, root, tag, 20);
  }, 1000);  // 1000 float64 in 20-byte chunks: 400 chunks per link is deep enough
}

static void test_broadcast_pipelined_chain_spans_many_default_chunks(void **) {
  std::string err = run_broadcast("broadcast_pipelined_chain", pstate::coll::broadcast_pipelined_chain, 5, 3,
                                  (size_t{1} << 18) + 3, PSTATE_FLOAT32);
  if (!err.empty()) fail_msg("%s", err.c_str());
}

static void test_gather_linear_collects_every_block_at_every_root(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (int root = 0; root < p; ++root)
      for (size_t count : kSweepCounts)
        for (pstate_dtype_t d : {PSTATE_FP8_E4M3, PSTATE_FLOAT64})  // bytes are bytes: two sizes suffice
          for (bool in_place : {false, true}) {
            std::string err = run_gather(p, root, count, d, in_place);
            if (!err.empty()) fail_msg("%s", err.c_str());
          }
}

static void test_invalid_root_is_refused_on_every_rank_before_any_message(void **) {
  for (int root : {-1, 4}) {
    std::vector<std::vector<uint8_t>> buf(4, std::vector<uint8_t>(64));
    std::string err = run_ranks(4, [&](Channel &ch) {
      int refused = 0;
      auto expect_invalid = [&](const std::function<void()> &call) {
        try {
          call();
        } catch (const pstate::Error &e) {
          if (e.status() == PSTATE_ERR_INVALID_ARGUMENT) ++refused;
        }
      };
      auto &b = buf[static_cast<size_t>(ch.rank())];
      expect_invalid([&] { pstate::coll::broadcast_binomial(ch, b.data(), 4, PSTATE_INT32, root, kTagBase); });
      expect_invalid([&] { pstate::coll::broadcast_pipelined_chain(ch, b.data(), 4, PSTATE_INT32, root, kTagBase); });
      expect_invalid([&] { pstate::coll::gather_linear(ch, b.data(), b.data(), 4, PSTATE_INT8, root, kTagBase); });
      if (refused != 3) pstate::throw_error(PSTATE_ERR_INTERNAL, "root ", root, " accepted by ", 3 - refused, " calls");
    });
    if (!err.empty()) fail_msg("%s", err.c_str());
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_broadcast_binomial_reaches_every_rank_from_every_root),
      cmocka_unit_test(test_broadcast_pipelined_chain_reaches_every_rank_from_every_root),
      cmocka_unit_test(test_broadcast_pipelined_chain_with_tiny_chunks_reaches_every_rank),
      cmocka_unit_test(test_broadcast_pipelined_chain_spans_many_default_chunks),
      cmocka_unit_test(test_gather_linear_collects_every_block_at_every_root),
      cmocka_unit_test(test_invalid_root_is_refused_on_every_rank_before_any_message),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
