// test_coll_reduce.cpp — reduce_binomial and reduce_ring over the thread harness
// (tests/support/thread_channel.hpp): every group size 1..9 × counts {0, 1, 7, 1000, 30011}
// × every reducible dtype × every op against an independent reference, the root moving through
// every group rank as the sweep goes on; every root of every group size in place and out of
// place; deep pipelines (ring with tiny chunks); the documented reduction orders reproduced bit
// for bit with random floats (the ring's is allreduce_ring's: the root gets all_reduce's bits);
// fp8 and a bad root refused on every rank before any message. The ranks other than the root
// always pass recv = nullptr, so a write there would crash the test. Under ASan and TSan the
// sweeps take fewer dtypes, ops and counts (tests/support/coll_cases.hpp, kSweep*).
#include "coll/algorithms.hpp"
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

constexpr uint32_t kTagBase = 0x7FFF0000;  // the largest sequence number the group layer can pass

using ReduceFn = std::function<void(Channel &, const void *, void *, size_t, pstate_dtype_t, pstate_reduce_op_t, int,
                                    uint32_t)>;
struct Algo {
  const char *name;
  ReduceFn fn;
};

const Algo kBinomial{"reduce_binomial", pstate::coll::reduce_binomial};
const Algo kRing{"reduce_ring", pstate::coll::reduce_ring};
// Tiny chunks: a 1000-element block becomes dozens of pipelined messages.
const Algo kRingTinyChunks{"reduce_ring(chunk 24 B)", [](Channel &ch, const void *s, void *r, size_t n,
                                                         pstate_dtype_t d, pstate_reduce_op_t op, int root,
                                                         uint32_t tag) {
                             pstate::coll::reduce_ring_chunked(ch, s, r, n, d, op, root, tag, 24);
                           }};

// One reduce of rank inputs `in` to `root`; in place on the root when asked. Returns "" or what
// went wrong. want[i] is the expected bits of element i on the root.
std::string run_case(const Algo &algo, std::vector<std::vector<uint8_t>> in, const std::vector<uint64_t> &want,
                     pstate_dtype_t d, pstate_reduce_op_t op, int root, bool in_place) {
  const int p = static_cast<int>(in.size());
  const size_t count = want.size(), esize = esize_of(d);
  std::vector<uint8_t> out(count * esize + 1, 0xEE);
  std::string err = run_ranks(p, [&](Channel &ch) {
    auto &mine = in[static_cast<size_t>(ch.rank())];
    void *recv = ch.rank() != root ? nullptr : in_place ? mine.data() : out.data();
    algo.fn(ch, mine.data(), recv, count, d, op, root, kTagBase);
  });
  const std::string what = case_name(algo.name, p, count, d, op) + " root=" + std::to_string(root) +
                           (in_place ? " in place" : "");
  if (!err.empty()) return what + ": " + err;
  const uint8_t *result = in_place ? in[static_cast<size_t>(root)].data() : out.data();
  for (size_t i = 0; i < count; ++i) {
    const uint64_t got = get_bits(result, i, esize);
    if (got != want[i]) return mismatch(what, root, i, got, want[i]);
  }
  if (!in_place && out[count * esize] != 0xEE) return what + ": wrote past the end of recv";
  return "";
}

std::string run_case(const Algo &algo, int p, size_t count, pstate_dtype_t d, pstate_reduce_op_t op, int root,
                     bool in_place) {
  auto in = rank_inputs(d, op, p, count);
  std::vector<uint64_t> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = fold_ranks(in, d, op, i);
  return run_case(algo, std::move(in), want, d, op, root, in_place);
}

// Every root of every group size, in and out of place. The sanitizer builds keep the larger
// count and one dtype (the sweep above already moves the root through every rank there too).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr size_t kEveryRootCounts[] = {1000};
constexpr pstate_dtype_t kEveryRootDtypes[] = {PSTATE_FLOAT32};
#else
constexpr size_t kEveryRootCounts[] = {7, 1000};
constexpr pstate_dtype_t kEveryRootDtypes[] = {PSTATE_FLOAT32, PSTATE_INT64};
#endif

void check_every_root(const Algo &algo) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (int root = 0; root < p; ++root)
      for (size_t count : kEveryRootCounts)
        for (pstate_dtype_t d : kEveryRootDtypes)
          for (pstate_reduce_op_t op : {(d == PSTATE_INT64 ? PSTATE_SUM : PSTATE_AVG)})
            for (bool in_place : {false, true}) {
              std::string err = run_case(algo, p, count, d, op, root, in_place);
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

// reduce_binomial.cpp: acc(v) = ((x[v] op S(v+1, 1)) op S(v+2, 2)) op S(v+4, 4) ..., relative ranks.
uint64_t binomial_subtree(const std::vector<std::vector<uint64_t>> &x, pstate_dtype_t d, pstate_reduce_op_t step,
                          size_t i, int root, int v, int below) {
  const int p = static_cast<int>(x.size());
  uint64_t acc = x[static_cast<size_t>((v + root) % p)][i];
  for (int mask = 1; mask < below && v + mask < p; mask <<= 1)
    acc = reference(d, step, acc, binomial_subtree(x, d, step, i, root, v + mask, mask));
  return acc;
}

uint64_t binomial_order(const std::vector<std::vector<uint64_t>> &x, pstate_dtype_t d, pstate_reduce_op_t op,
                        size_t i, size_t, int root) {
  const int p = static_cast<int>(x.size());
  const pstate_reduce_op_t step = op == PSTATE_AVG ? PSTATE_SUM : op;
  const uint64_t acc = binomial_subtree(x, d, step, i, root, 0, 2 * p);
  return op == PSTATE_AVG ? avg_reference(d, acc, p) : acc;
}

// reduce_ring.cpp (allreduce_ring's): block b = ((x[b] op x[b+1]) op ...) op x[b-1].
uint64_t ring_order(const std::vector<std::vector<uint64_t>> &x, pstate_dtype_t d, pstate_reduce_op_t op, size_t i,
                    size_t count, int) {
  return ring_order_reference(x, d, op, i, count);
}

using OrderFn = uint64_t (*)(const std::vector<std::vector<uint64_t>> &, pstate_dtype_t, pstate_reduce_op_t, size_t,
                             size_t, int);

void check_documented_order(const Algo &algo, OrderFn order) {
  std::mt19937_64 rng(17);
  for (int p : {2, 3, 5, 6, 8, 9})
    for (int root : {0, p / 2, p - 1})
      for (pstate_dtype_t d : {PSTATE_FLOAT16, PSTATE_BFLOAT16, PSTATE_FLOAT32})
        for (pstate_reduce_op_t op : {PSTATE_SUM, PSTATE_AVG}) {
          const size_t count = 1003, esize = esize_of(d);
          std::vector<std::vector<uint64_t>> x(static_cast<size_t>(p), std::vector<uint64_t>(count));
          std::vector<std::vector<uint8_t>> in(static_cast<size_t>(p), std::vector<uint8_t>(count * esize));
          for (int r = 0; r < p; ++r)
            for (size_t i = 0; i < count; ++i) {
              x[static_cast<size_t>(r)][i] = random_float_bits(rng, d);
              put_bits(in[static_cast<size_t>(r)], i, esize, x[static_cast<size_t>(r)][i]);
            }
          std::vector<uint64_t> want(count);
          for (size_t i = 0; i < count; ++i) want[i] = order(x, d, op, i, count, root);
          std::string err = run_case(algo, in, want, d, op, root, false);
          if (!err.empty()) fail_msg("%s (random floats)", err.c_str());
        }
}

}  // namespace

// Group sizes 1..9 × counts {0, 1, 7, 1000, 30011} × every reducible dtype × every op, out of
// place; the root is the case number mod the group size, so every root of every size comes up.
static void test_every_reduce_matches_reference_for_every_group_count_dtype_op(void **) {
  int n = 0;
  for (size_t count : kSweepCounts)
    for (pstate_dtype_t d : kSweepDtypes)
      for (pstate_reduce_op_t op : kSweepOps) {
        // Inputs of ranks 0..8 once; group size p uses the first p, and its expected value is
        // the running fold over ranks 0..p-1 (then / p for AVG).
        const auto all = rank_inputs(d, op, kMaxGroup, count);
        const pstate_reduce_op_t step = op == PSTATE_AVG ? PSTATE_SUM : op;
        std::vector<uint64_t> acc(count), want(count);
        for (size_t i = 0; i < count; ++i) acc[i] = get_bits(all[0].data(), i, esize_of(d));
        for (int p = 1; p <= kMaxGroup; ++p, ++n) {
          for (size_t i = 0; i < count; ++i) {
            if (p > 1) acc[i] = reference(d, step, acc[i], get_bits(all[static_cast<size_t>(p - 1)].data(), i, esize_of(d)));
            want[i] = op == PSTATE_AVG ? avg_reference(d, acc[i], p) : acc[i];
          }
          for (const Algo *algo : {&kBinomial, &kRing}) {
            std::string err = run_case(*algo, {all.begin(), all.begin() + p}, want, d, op, n % p, false);
            if (!err.empty()) fail_msg("%s", err.c_str());
          }
        }
      }
}

static void test_reduce_binomial_from_every_root_in_and_out_of_place(void **) { check_every_root(kBinomial); }
static void test_reduce_ring_from_every_root_in_and_out_of_place(void **) { check_every_root(kRing); }

static void test_reduce_ring_with_tiny_chunks_matches_reference(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (size_t count : {size_t{7}, size_t{1000}})
      for (pstate_dtype_t d : {PSTATE_UINT8, PSTATE_BFLOAT16, PSTATE_FLOAT64})
        for (bool in_place : {false, true}) {
          std::string err = run_case(kRingTinyChunks, p, count, d, PSTATE_MAX, (p + 1) / 2 % p, in_place);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

static void test_reduce_binomial_follows_documented_order_with_random_floats(void **) {
  check_documented_order(kBinomial, binomial_order);
}
static void test_reduce_ring_follows_allreduce_ring_order_with_random_floats(void **) {
  check_documented_order(kRing, ring_order);
}

static void test_reduce_fp8_and_bad_root_are_refused_on_every_rank_before_any_message(void **) {
  std::vector<std::vector<uint8_t>> buf(4, std::vector<uint8_t>(64));
  std::string err = run_ranks(4, [&](Channel &ch) {
    auto &b = buf[static_cast<size_t>(ch.rank())];
    auto expect = [&](pstate_status_t status, const std::function<void()> &call, const char *what) {
      try {
        call();
      } catch (const pstate::Error &e) {
        if (e.status() == status) return;
        throw;
      }
      pstate::throw_error(PSTATE_ERR_INTERNAL, what, " was accepted");
    };
    for (const Algo *algo : {&kBinomial, &kRing}) {
      expect(PSTATE_ERR_UNSUPPORTED, [&] { algo->fn(ch, b.data(), b.data(), 4, PSTATE_FP8_E4M3, PSTATE_SUM, 0, kTagBase); },
             "fp8 reduce");
      for (int root : {-1, 4})
        expect(PSTATE_ERR_INVALID_ARGUMENT, [&] { algo->fn(ch, b.data(), b.data(), 4, PSTATE_INT32, PSTATE_SUM, root, kTagBase); },
               "a root outside the group");
    }
  });
  if (!err.empty()) fail_msg("%s", err.c_str());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_reduce_matches_reference_for_every_group_count_dtype_op),
      cmocka_unit_test(test_reduce_binomial_from_every_root_in_and_out_of_place),
      cmocka_unit_test(test_reduce_ring_from_every_root_in_and_out_of_place),
      cmocka_unit_test(test_reduce_ring_with_tiny_chunks_matches_reference),
      cmocka_unit_test(test_reduce_binomial_follows_documented_order_with_random_floats),
      cmocka_unit_test(test_reduce_ring_follows_allreduce_ring_order_with_random_floats),
      cmocka_unit_test(test_reduce_fp8_and_bad_root_are_refused_on_every_rank_before_any_message),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
