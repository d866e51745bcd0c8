// test_coll_reduce_scatter.cpp — reduce_scatter_ring over the thread harness: every group size
// 1..9 × recv counts {0, 1, 7, 1000, 3001} × every reducible dtype × every op against an
// independent reference, in place (recv = send + rank * block) and out of place, deep pipelines
// (tiny chunks), and the documented reduction order reproduced bit for bit with random floats.
// Under ASan and TSan the sweeps take fewer dtypes and ops (tests/support/coll_cases.hpp, kSweep*).
#include "coll/algorithms.hpp"
#include "coll_cases.hpp"
#include "thread_channel.hpp"

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

constexpr uint32_t kTagBase = 0xFFFF0000;  // the largest sequence number the group layer can pass

// send of rank r: p blocks of recv_count; runs with chunk_bytes (0 = the default entry point).
std::string run_case(int p, size_t recv_count, pstate_dtype_t d, pstate_reduce_op_t op, bool in_place,
                     size_t chunk_bytes) {
  const size_t esize = esize_of(d), block = recv_count * esize;
  auto in = rank_inputs(d, op, p, recv_count * static_cast<size_t>(p));
  const auto original = in;
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(p), std::vector<uint8_t>(block, 0xEE));
  std::string err = run_ranks(p, [&](Channel &ch) {
    const size_t r = static_cast<size_t>(ch.rank());
    void *recv = in_place ? in[r].data() + r * block : out[r].data();
    if (chunk_bytes == 0) pstate::coll::reduce_scatter_ring(ch, in[r].data(), recv, recv_count, d, op, kTagBase);
    else pstate::coll::reduce_scatter_ring_chunked(ch, in[r].data(), recv, recv_count, d, op, kTagBase, chunk_bytes);
  });
  const std::string what = case_name("reduce_scatter_ring", p, recv_count, d, op) + (in_place ? " in place" : "") +
                           (chunk_bytes ? " tiny chunks" : "");
  if (!err.empty()) return what + ": " + err;
  for (int r = 0; r < p; ++r) {
    const uint8_t *result = in_place ? in[static_cast<size_t>(r)].data() + static_cast<size_t>(r) * block
                                     : out[static_cast<size_t>(r)].data();
    for (size_t i = 0; i < recv_count; ++i) {
      const uint64_t want = fold_ranks(original, d, op, static_cast<size_t>(r) * recv_count + i);
      const uint64_t got = get_bits(result, i, esize);
      if (got != want) return mismatch(what, r, i, got, want);
    }
  }
  return "";
}

}  // namespace

static void test_reduce_scatter_matches_reference_for_every_group_count_dtype_op(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{3001}})
      for (pstate_dtype_t d : kSweepDtypes)
        for (pstate_reduce_op_t op : kSweepOps) {
          std::string err = run_case(p, count, d, op, false, 0);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

static void test_reduce_scatter_in_place_keeps_own_block_until_last_step(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (pstate_dtype_t d : kSweepDtypes)
      for (pstate_reduce_op_t op : {PSTATE_SUM, PSTATE_MIN, PSTATE_AVG}) {
        std::string err = run_case(p, 37, d, op, true, 0);
        if (!err.empty()) fail_msg("%s", err.c_str());
      }
}

static void test_reduce_scatter_with_tiny_chunks_matches_reference(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (pstate_dtype_t d : {PSTATE_UINT8, PSTATE_BFLOAT16, PSTATE_FLOAT64})
      for (pstate_reduce_op_t op : kSweepOps)
        for (bool in_place : {false, true}) {
          std::string err = run_case(p, 301, d, op, in_place, 40);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

// reduce_scatter_ring.cpp: block b = ((x[b+1] op x[b+2]) op ...) op x[b], ranks mod P.
static void test_reduce_scatter_follows_documented_order_with_random_floats(void **) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  for (int p : {2, 3, 5, 8, 9})
    for (pstate_dtype_t d : {PSTATE_FLOAT16, PSTATE_BFLOAT16, PSTATE_FLOAT32})
      for (pstate_reduce_op_t op : {PSTATE_SUM, PSTATE_AVG}) {
        const size_t count = 501, esize = esize_of(d);
        std::vector<std::vector<uint8_t>> in(static_cast<size_t>(p), std::vector<uint8_t>(count * esize * static_cast<size_t>(p)));
        for (auto &buf : in)
          for (size_t j = 0; j < count * static_cast<size_t>(p); ++j)
            put_bits(buf, j, esize, encode(d, std::ldexp(mantissa(rng), static_cast<int>(rng() % 12) - 6)));
        std::vector<std::vector<uint8_t>> out(static_cast<size_t>(p), std::vector<uint8_t>(count * esize));
        std::string err = run_ranks(p, [&](Channel &ch) {
          const size_t r = static_cast<size_t>(ch.rank());
          pstate::coll::reduce_scatter_ring_chunked(ch, in[r].data(), out[r].data(), count, d, op, kTagBase, 64);
        });
        const std::string what = case_name("reduce_scatter_ring", p, count, d, op) + " random floats";
        if (!err.empty()) fail_msg("%s: %s", what.c_str(), err.c_str());
        for (int b = 0; b < p; ++b)
          for (size_t i = 0; i < count; ++i) {
            const size_t j = static_cast<size_t>(b) * count + i;
            uint64_t acc = get_bits(in[static_cast<size_t>((b + 1) % p)].data(), j, esize);
            for (int k = 2; k <= p; ++k)
              acc = reference(d, PSTATE_SUM, acc, get_bits(in[static_cast<size_t>((b + k) % p)].data(), j, esize));
            if (op == PSTATE_AVG) acc = avg_reference(d, acc, p);
            const uint64_t got = get_bits(out[static_cast<size_t>(b)].data(), i, esize);
            if (got != acc) fail_msg("%s", mismatch(what, b, i, got, acc).c_str());
          }
      }
}

static void test_reduce_scatter_fp8_is_unsupported_before_any_message(void **) {
  std::vector<uint8_t> a(64), b(64);
  std::string err = run_ranks(3, [&](Channel &ch) {
    try {
      pstate::coll::reduce_scatter_ring(ch, a.data(), b.data(), 4, PSTATE_FP8_E5M2, PSTATE_MAX, kTagBase);
    } catch (const pstate::Error &e) {
      if (e.status() == PSTATE_ERR_UNSUPPORTED) return;
      throw;
    }
    pstate::throw_error(PSTATE_ERR_INTERNAL, "fp8 reduce_scatter did not throw");
  });
  if (!err.empty()) fail_msg("%s", err.c_str());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_scatter_matches_reference_for_every_group_count_dtype_op),
      cmocka_unit_test(test_reduce_scatter_in_place_keeps_own_block_until_last_step),
      cmocka_unit_test(test_reduce_scatter_with_tiny_chunks_matches_reference),
      cmocka_unit_test(test_reduce_scatter_follows_documented_order_with_random_floats),
      cmocka_unit_test(test_reduce_scatter_fp8_is_unsupported_before_any_message),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
