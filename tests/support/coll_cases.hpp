// tests/support/coll_cases.hpp: in the one folder of test helpers (every suite's, found through
// pstate_test_support's include path); used by tests/unit/test_coll_allreduce, _reduce,
// _reduce_scatter, _v and move_cases.hpp.
//
// coll_cases.hpp — inputs and independent expected results for the collective algorithm tests.
//
// Inputs are chosen so the exact result does not depend on reduction order, which lets one
// reference serve every algorithm:
//   - integers: pseudo-random full-width bits (sum/prod wrap, max/min compare: all are
//     associative and commutative in modular arithmetic);
//   - floats: small integers (sum/avg: -8..8; prod: ±1, ±2; max/min: -100..100 with zeros of
//     both signs), so every partial result is exact in float16/bfloat16 too.
// fold_ranks() folds reduce_ref.hpp's single-step reference over ranks in rank order, then
// applies the AVG division once. Order-sensitive checks (random floats) live in the tests.
#pragma once

#include "reduce_ref.hpp"

#include <pstate/pstate.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace ptest {

inline constexpr pstate_dtype_t kReducibleDtypes[] = {PSTATE_INT8,   PSTATE_UINT8,   PSTATE_INT32,  PSTATE_UINT32,
                                                      PSTATE_INT64,  PSTATE_UINT64,  PSTATE_FLOAT16, PSTATE_FLOAT32,
                                                      PSTATE_FLOAT64, PSTATE_BFLOAT16};
inline constexpr pstate_reduce_op_t kAllOps[] = {PSTATE_SUM, PSTATE_PROD, PSTATE_MAX, PSTATE_MIN, PSTATE_AVG};
inline constexpr size_t kCounts[] = {0, 1, 7, 1000, 30011};  // 30011: odd, prime, > most block sizes
// Group sizes 1..kMaxGroup. TSan stops at 6 (still 1, powers of two, and odd and even sizes that
// are not): a race is between two threads' steps, which every size from 2 on has; the sizes 7-9
// cost a third of its job in threads' interleavings. The plain and ASan runs take 1..9.
#if defined(__SANITIZE_THREAD__)
inline constexpr int kMaxGroup = 6;
#else
inline constexpr int kMaxGroup = 9;
#endif

// What the threads-as-ranks sweeps iterate. The plain build runs all of the above: it is the one
// that checks every dtype × op result. The sanitizer builds (CI's asan and tsan jobs) keep every
// group size (TSan: up to kMaxGroup), root, algorithm and in-place form, one dtype per element size (1, 2, 4, 8 bytes,
// integer and float kernels) and three ops (SUM, MAX, AVG and its division pass): a buffer overrun
// or a race is about which thread touches which bytes when, and the kernels of every dtype × op
// are under ASan in test_reduce. TSan also stops the counts at 1000 (its check of every element
// made the full sweeps 6 of its job's 7 minutes); multi-chunk paths keep their own tests there
// (tiny chunks, a buffer spanning many default chunks). A race does not depend on the kernel, so
// TSan keeps the smallest and the largest element (chunk and block boundaries move with it) and
// SUM and AVG (AVG's division is a second pass over the result).
#if defined(__SANITIZE_THREAD__)
inline constexpr pstate_dtype_t kSweepDtypes[] = {PSTATE_INT8, PSTATE_UINT64};
inline constexpr pstate_reduce_op_t kSweepOps[] = {PSTATE_SUM, PSTATE_AVG};
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr pstate_dtype_t kSweepDtypes[] = {PSTATE_INT8, PSTATE_FLOAT16, PSTATE_FLOAT32, PSTATE_UINT64};
inline constexpr pstate_reduce_op_t kSweepOps[] = {PSTATE_SUM, PSTATE_MAX, PSTATE_AVG};
#else
inline constexpr const auto &kSweepDtypes = kReducibleDtypes;
inline constexpr const auto &kSweepOps = kAllOps;
#endif
#if defined(__SANITIZE_THREAD__)
inline constexpr size_t kSweepCounts[] = {0, 1, 7, 1000};
#else
inline constexpr const auto &kSweepCounts = kCounts;
#endif

inline size_t esize_of(pstate_dtype_t d) { return pstate_dtype_size(d); }

inline bool is_float(pstate_dtype_t d) {
  return d == PSTATE_FLOAT16 || d == PSTATE_BFLOAT16 || d == PSTATE_FLOAT32 || d == PSTATE_FLOAT64;
}

inline uint64_t mix(uint64_t x) {  // splitmix64 finalizer: a cheap, well-spread hash
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t encode(pstate_dtype_t d, double v) {
  switch (d) {
    case PSTATE_FLOAT16: return half_round(kFp16, v);
    case PSTATE_BFLOAT16: return half_round(kBf16, v);
    case PSTATE_FLOAT32: return std::bit_cast<uint32_t>(static_cast<float>(v));
    default: return std::bit_cast<uint64_t>(v);
  }
}

inline double decode(pstate_dtype_t d, uint64_t bits) {
  switch (d) {
    case PSTATE_FLOAT16: return half_value(kFp16, static_cast<uint16_t>(bits));
    case PSTATE_BFLOAT16: return half_value(kBf16, static_cast<uint16_t>(bits));
    case PSTATE_FLOAT32: return std::bit_cast<float>(static_cast<uint32_t>(bits));
    default: return std::bit_cast<double>(bits);
  }
}

// The element i of rank r's input, as raw bits.
inline uint64_t input_bits(pstate_dtype_t d, pstate_reduce_op_t op, int r, size_t i) {
  const uint64_t h = mix((static_cast<uint64_t>(r) << 40) ^ i ^ (static_cast<uint64_t>(d) << 56));
  if (!is_float(d)) {
    const size_t bits = esize_of(d) * 8;
    return bits == 64 ? h : h & ((1ull << bits) - 1);
  }
  double v;
  switch (op) {
    case PSTATE_PROD: {
      static const double kFactors[] = {-2, -1, 1, 2};
      v = kFactors[h % 4];
      break;
    }
    case PSTATE_MAX:
    case PSTATE_MIN:
      v = static_cast<double>(static_cast<int>(h % 201) - 100);
      if (v == 0 && (h & 1024)) v = -0.0;
      break;
    default: v = static_cast<double>(static_cast<int>(h % 17) - 8); break;
  }
  return encode(d, v);
}

inline void put_bits(std::vector<uint8_t> &buf, size_t i, size_t esize, uint64_t bits) {
  std::memcpy(buf.data() + i * esize, &bits, esize);
}
inline uint64_t get_bits(const uint8_t *p, size_t i, size_t esize) {
  uint64_t bits = 0;
  std::memcpy(&bits, p + i * esize, esize);
  return bits;
}

// One buffer per rank with that rank's inputs (count elements, starting at element `first`).
inline std::vector<std::vector<uint8_t>> rank_inputs(pstate_dtype_t d, pstate_reduce_op_t op, int p, size_t count,
                                                     size_t first = 0) {
  std::vector<std::vector<uint8_t>> in(static_cast<size_t>(p), std::vector<uint8_t>(count * esize_of(d)));
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < count; ++i) put_bits(in[static_cast<size_t>(r)], i, esize_of(d), input_bits(d, op, r, first + i));
  return in;
}

// The reduction of element i of every rank's buffer, folded in rank order (the inputs make the
// order irrelevant), then divided by the group size for AVG.
inline uint64_t fold_ranks(const std::vector<std::vector<uint8_t>> &in, pstate_dtype_t d, pstate_reduce_op_t op,
                           size_t i) {
  const pstate_reduce_op_t step = op == PSTATE_AVG ? PSTATE_SUM : op;
  const int p = static_cast<int>(in.size());
  uint64_t acc = get_bits(in[0].data(), i, esize_of(d));
  for (int r = 1; r < p; ++r) acc = reference(d, step, acc, get_bits(in[static_cast<size_t>(r)].data(), i, esize_of(d)));
  return op == PSTATE_AVG ? avg_reference(d, acc, p) : acc;
}

inline std::string case_name(const char *algo, int p, size_t count, pstate_dtype_t d, pstate_reduce_op_t op) {
  char s[200];
  std::snprintf(s, sizeof s, "%s P=%d count=%zu %s %s", algo, p, count, pstate_dtype_name(d), pstate_reduce_op_name(op));
  return s;
}

inline std::string mismatch(const std::string &what, int rank, size_t i, uint64_t got, uint64_t want) {
  char s[160];
  std::snprintf(s, sizeof s, ": rank %d element %zu got 0x%llx want 0x%llx", rank, i, (unsigned long long)got,
                (unsigned long long)want);
  return what + s;
}

// Element i of a ring reduction of the ranks' raw values x[rank][i] (allreduce_ring.cpp's and
// reduce_ring.cpp's order): the count is cut into p blocks (the first count % p one longer), and
// block b is ((x[b] op x[b+1]) op ...) op x[b-1]; AVG sums, then divides once.
inline uint64_t ring_order_reference(const std::vector<std::vector<uint64_t>> &x, pstate_dtype_t d,
                                     pstate_reduce_op_t op, size_t i, size_t count) {
  const int p = static_cast<int>(x.size());
  const size_t base = count / static_cast<size_t>(p), extra = count % static_cast<size_t>(p);
  int b = 0;  // the block holding element i
  for (size_t start = 0;; ++b) {
    const size_t len = base + (static_cast<size_t>(b) < extra ? 1 : 0);
    if (i < start + len) break;
    start += len;
  }
  const pstate_reduce_op_t step = op == PSTATE_AVG ? PSTATE_SUM : op;
  uint64_t acc = x[static_cast<size_t>(b)][i];
  for (int j = 1; j < p; ++j) acc = reference(d, step, acc, x[static_cast<size_t>((b + j) % p)][i]);
  return op == PSTATE_AVG ? avg_reference(d, acc, p) : acc;
}

}  // namespace ptest
