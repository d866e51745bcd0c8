// test_coll_allreduce.cpp — allreduce_recursive_doubling and allreduce_ring over the thread
// harness (tests/support/thread_channel.hpp): every group size 1..9 × counts {0, 1, 7,
// 1000, 30011} × every reducible dtype × every op against an independent reference, in place and
// out of place, deep pipelines (tiny chunks), and with random floats: the documented reduction
// order reproduced bit for bit, hence the same bits on every rank. Under ASan and TSan the sweeps take
// fewer dtypes, ops and counts (tests/support/coll_cases.hpp, kSweep*).
#include "coll/algorithms.hpp"
#include "coll/select.hpp"
#include "coll_cases.hpp"
#include "thread_channel.hpp"

#include <functional>
#include <random>
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

constexpr uint32_t kTagBase = 0x002A0000;  // as the group layer would pass for sequence 42

struct Algo {
  const char *name;
  std::function<void(Channel &, const void *, void *, size_t, pstate_dtype_t, pstate_reduce_op_t, uint32_t)> fn;
};

const Algo kRecursiveDoubling{"recursive_doubling", pstate::coll::allreduce_recursive_doubling};
const Algo kRing{"ring", pstate::coll::allreduce_ring};
// Tiny chunks: a 1000-element block becomes dozens of pipelined messages.
const Algo kRingTinyChunks{"ring(chunk 24 B)", [](Channel &ch, const void *s, void *r, size_t n, pstate_dtype_t d,
                                                  pstate_reduce_op_t op, uint32_t tag) {
                             pstate::coll::allreduce_ring_chunked(ch, s, r, n, d, op, tag, 24);
                           }};

// The inputs of every rank and the expected result of one (dtype, op, group size, count).
struct Case {
  pstate_dtype_t d;
  pstate_reduce_op_t op;
  int p;
  size_t count;
  std::vector<std::vector<uint8_t>> in;
  std::vector<uint64_t> want;
};

Case make_case(pstate_dtype_t d, pstate_reduce_op_t op, int p, size_t count) {
  Case c{d, op, p, count, rank_inputs(d, op, p, count), std::vector<uint64_t>(count)};
  for (size_t i = 0; i < count; ++i) c.want[i] = fold_ranks(c.in, d, op, i);
  return c;
}

// Runs one allreduce case; returns "" or what went wrong.
std::string run_case(const Algo &algo, const Case &c, bool in_place) {
  const size_t esize = esize_of(c.d);
  std::vector<std::vector<uint8_t>> in = c.in;
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(c.p), std::vector<uint8_t>(c.count * esize, 0xEE));
  std::string err = run_ranks(c.p, [&](Channel &ch) {
    auto &mine = in[static_cast<size_t>(ch.rank())];
    void *recv = in_place ? mine.data() : out[static_cast<size_t>(ch.rank())].data();
    algo.fn(ch, mine.data(), recv, c.count, c.d, c.op, kTagBase);
  });
  const std::string what = case_name(algo.name, c.p, c.count, c.d, c.op) + (in_place ? " in place" : "");
  if (!err.empty()) return what + ": " + err;
  auto &result = in_place ? in : out;
  for (int r = 0; r < c.p; ++r)
    for (size_t i = 0; i < c.count; ++i) {
      const uint64_t got = get_bits(result[static_cast<size_t>(r)].data(), i, esize);
      if (got != c.want[i]) return mismatch(what, r, i, got, c.want[i]);
    }
  return "";
}

std::string run_case(const Algo &algo, int p, size_t count, pstate_dtype_t d, pstate_reduce_op_t op, bool in_place) {
  return run_case(algo, make_case(d, op, p, count), in_place);
}

void check_in_place(const Algo &algo) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (size_t count : {size_t{7}, size_t{1000}})
      for (pstate_dtype_t d : kSweepDtypes)
        for (pstate_reduce_op_t op : {PSTATE_SUM, PSTATE_MAX, PSTATE_AVG}) {
          std::string err = run_case(algo, p, count, d, op, true);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

// ---- random floats: the documented reduction order, reproduced with the test's reference ------
uint64_t random_float_bits(std::mt19937_64 &rng, pstate_dtype_t d) {
  const int spread = (d == PSTATE_FLOAT16) ? 6 : 20;
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  const double v = std::ldexp(mantissa(rng), static_cast<int>(rng() % static_cast<uint64_t>(2 * spread)) - spread);
  return encode(d, v);
}

// allreduce_ring.cpp: block b = ((x[b] op x[b+1]) op ...) op x[b-1] (coll_cases.hpp).
uint64_t ring_order(const std::vector<std::vector<uint64_t>> &x, pstate_dtype_t d, pstate_reduce_op_t op, size_t i,
                    size_t count) {
  return ring_order_reference(x, d, op, i, count);
}

// allreduce_recursive_doubling.cpp: fold pairs, then a balanced tree, lower op higher.
uint64_t recursive_doubling_order(const std::vector<std::vector<uint64_t>> &x, pstate_dtype_t d,
                                  pstate_reduce_op_t op, size_t i, size_t) {
  const int p = static_cast<int>(x.size());
  const pstate_reduce_op_t step = op == PSTATE_AVG ? PSTATE_SUM : op;
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;
  std::vector<uint64_t> node(static_cast<size_t>(p2));
  for (int n = 0; n < p2; ++n)
    node[static_cast<size_t>(n)] = n < rem ? reference(d, step, x[static_cast<size_t>(2 * n)][i], x[static_cast<size_t>(2 * n + 1)][i])
                                           : x[static_cast<size_t>(n + rem)][i];
  for (int width = 1; width < p2; width *= 2)
    for (int n = 0; n < p2; n += 2 * width)
      node[static_cast<size_t>(n)] = reference(d, step, node[static_cast<size_t>(n)], node[static_cast<size_t>(n + width)]);
  return op == PSTATE_AVG ? avg_reference(d, node[0], p) : node[0];
}

using OrderFn = uint64_t (*)(const std::vector<std::vector<uint64_t>> &, pstate_dtype_t, pstate_reduce_op_t, size_t, size_t);

void check_documented_order(const Algo &algo, OrderFn order) {
  std::mt19937_64 rng(11);
  for (int p : {2, 3, 5, 6, 8, 9})
    for (pstate_dtype_t d : {PSTATE_FLOAT16, PSTATE_BFLOAT16, PSTATE_FLOAT32, PSTATE_FLOAT64})
      for (pstate_reduce_op_t op : {PSTATE_SUM, PSTATE_PROD, PSTATE_AVG}) {
        const size_t count = 2003, esize = esize_of(d);
        std::vector<std::vector<uint64_t>> x(static_cast<size_t>(p), std::vector<uint64_t>(count));
        std::vector<std::vector<uint8_t>> buf(static_cast<size_t>(p), std::vector<uint8_t>(count * esize));
        for (int r = 0; r < p; ++r)
          for (size_t i = 0; i < count; ++i) {
            x[static_cast<size_t>(r)][i] = random_float_bits(rng, d);
            put_bits(buf[static_cast<size_t>(r)], i, esize, x[static_cast<size_t>(r)][i]);
          }
        std::string err = run_ranks(p, [&](Channel &ch) {
          auto &mine = buf[static_cast<size_t>(ch.rank())];
          algo.fn(ch, mine.data(), mine.data(), count, d, op, kTagBase);
        });
        const std::string what = case_name(algo.name, p, count, d, op) + " random floats";
        if (!err.empty()) fail_msg("%s: %s", what.c_str(), err.c_str());
        for (size_t i = 0; i < count; ++i) {
          const uint64_t want = order(x, d, op, i, count);
          for (int r = 0; r < p; ++r) {
            const uint64_t got = get_bits(buf[static_cast<size_t>(r)].data(), i, esize);
            if (got != want) fail_msg("%s", mismatch(what, r, i, got, want).c_str());
          }
        }
      }
}

}  // namespace

// Both algorithms on the same inputs: group sizes 1..9 × counts {0, 1, 7, 1000, 30011} × every
// reducible dtype × every op, out of place.
static void test_every_allreduce_matches_reference_for_every_group_count_dtype_op(void **) {
  for (size_t count : kSweepCounts)
    for (pstate_dtype_t d : kSweepDtypes)
      for (pstate_reduce_op_t op : kSweepOps) {
        // Inputs of ranks 0..8 once; group size p uses the first p, and its expected value is
        // the running fold over ranks 0..p-1 (then / p for AVG).
        const auto all = rank_inputs(d, op, kMaxGroup, count);
        const pstate_reduce_op_t step = op == PSTATE_AVG ? PSTATE_SUM : op;
        std::vector<uint64_t> acc(count);
        for (size_t i = 0; i < count; ++i) acc[i] = get_bits(all[0].data(), i, esize_of(d));
        for (int p = 1; p <= kMaxGroup; ++p) {
          if (p > 1)
            for (size_t i = 0; i < count; ++i)
              acc[i] = reference(d, step, acc[i], get_bits(all[static_cast<size_t>(p - 1)].data(), i, esize_of(d)));
          Case c{d, op, p, count, {all.begin(), all.begin() + p}, acc};
          if (op == PSTATE_AVG)
            for (auto &w : c.want) w = avg_reference(d, w, p);
          for (const Algo *algo : {&kRecursiveDoubling, &kRing}) {
            std::string err = run_case(*algo, c, false);
            if (!err.empty()) fail_msg("%s", err.c_str());
          }
        }
      }
}
static void test_ring_with_tiny_chunks_matches_reference(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (size_t count : {size_t{7}, size_t{1000}, size_t{4099}})
      for (pstate_dtype_t d : {PSTATE_INT8, PSTATE_FLOAT16, PSTATE_FLOAT32, PSTATE_UINT64})
        for (pstate_reduce_op_t op : kSweepOps) {
          std::string err = run_case(kRingTinyChunks, p, count, d, op, p % 2 == 0);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}
static void test_ring_large_buffer_spans_many_default_chunks(void **) {
  // 3 ranks × (2^19 + 7) float32: blocks of ~700 KB, i.e. several kRingChunkBytes chunks each.
  for (bool in_place : {false, true}) {
    std::string err = run_case(kRing, 3, (size_t{1} << 19) + 7, PSTATE_FLOAT32, PSTATE_SUM, in_place);
    if (!err.empty()) fail_msg("%s", err.c_str());
  }
}
static void test_recursive_doubling_in_place_matches_reference(void **) { check_in_place(kRecursiveDoubling); }
static void test_ring_in_place_matches_reference(void **) { check_in_place(kRing); }

static void test_recursive_doubling_follows_documented_order_bit_identical_on_all_ranks(void **) {
  check_documented_order(kRecursiveDoubling, recursive_doubling_order);
}
static void test_ring_follows_documented_order_bit_identical_on_all_ranks(void **) {
  check_documented_order(kRing, ring_order);
  check_documented_order(kRingTinyChunks, ring_order);
}

static void test_nan_from_one_rank_reaches_every_rank_as_canonical_nan(void **) {
  for (const Algo *algo : {&kRecursiveDoubling, &kRing}) {
    for (int p : {3, 4, 7}) {
      std::vector<std::vector<float>> buf(static_cast<size_t>(p), std::vector<float>(50, 1.0f));
      buf[1][17] = std::bit_cast<float>(0xFFA00001u);  // a negative NaN with a payload
      std::string err = run_ranks(p, [&](Channel &ch) {
        auto &mine = buf[static_cast<size_t>(ch.rank())];
        algo->fn(ch, mine.data(), mine.data(), mine.size(), PSTATE_FLOAT32, PSTATE_MAX, kTagBase);
      });
      if (!err.empty()) fail_msg("%s: %s", algo->name, err.c_str());
      for (int r = 0; r < p; ++r) {
        assert_int_equal(std::bit_cast<uint32_t>(buf[static_cast<size_t>(r)][17]), 0x7FC00000u);
        assert_true(buf[static_cast<size_t>(r)][16] == 1.0f);
      }
    }
  }
}

static void test_fp8_allreduce_fails_unsupported_on_every_rank_before_any_message(void **) {
  for (const Algo *algo : {&kRecursiveDoubling, &kRing}) {
    std::vector<uint8_t> a(16), b(16);
    std::string err = run_ranks(4, [&](Channel &ch) {
      try {
        algo->fn(ch, a.data(), b.data(), 4, PSTATE_FP8_E4M3, PSTATE_SUM, kTagBase);
      } catch (const pstate::Error &e) {
        if (e.status() == PSTATE_ERR_UNSUPPORTED) return;  // the expected outcome, on every rank
        throw;
      }
      pstate::throw_error(PSTATE_ERR_INTERNAL, "fp8 allreduce did not throw");
    });
    if (!err.empty()) fail_msg("%s: %s", algo->name, err.c_str());  // also fails on unmatched messages
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_allreduce_matches_reference_for_every_group_count_dtype_op),
      cmocka_unit_test(test_ring_with_tiny_chunks_matches_reference),
      cmocka_unit_test(test_ring_large_buffer_spans_many_default_chunks),
      cmocka_unit_test(test_recursive_doubling_in_place_matches_reference),
      cmocka_unit_test(test_ring_in_place_matches_reference),
      cmocka_unit_test(test_recursive_doubling_follows_documented_order_bit_identical_on_all_ranks),
      cmocka_unit_test(test_ring_follows_documented_order_bit_identical_on_all_ranks),
      cmocka_unit_test(test_nan_from_one_rank_reaches_every_rank_as_canonical_nan),
      cmocka_unit_test(test_fp8_allreduce_fails_unsupported_on_every_rank_before_any_message),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
