// tests/support/reduce_ref.hpp: in the one folder of test helpers (every suite's, found through
// pstate_test_support's include path); used by tests/unit/test_reduce.cpp and coll_cases.hpp.
//
// reduce_ref.hpp — test-side reference for one reduction step, independent of src/reduce/.
//
// reference(dtype, op, a, b) gives the bits the library must produce for a op b (operands and
// result as raw little-endian bits in a uint64_t): integers by modular arithmetic on uint64_t and
// C++ comparisons; float32 by the op in double rounded once to float; float16/bfloat16 by the op
// in double on decoded values rounded once by float_ref.hpp; NaN results canonical, max/min by the
// documented rule (NaN wins, then +0 above -0). avg_reference(dtype, x, d) is finish_avg's x / d.
#pragma once

#include <pstate/pstate.h>

#include "float_ref.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ptest {

template <typename T>
inline uint64_t int_ref(uint64_t xa, uint64_t xb, pstate_reduce_op_t op, size_t esize) {
  const uint64_t mask = esize == 8 ? ~0ull : ((1ull << (esize * 8)) - 1);
  T a, b;
  std::memcpy(&a, &xa, sizeof(T));
  std::memcpy(&b, &xb, sizeof(T));
  switch (op) {
    case PSTATE_SUM: return (xa + xb) & mask;  // modular: the two's complement wrap
    case PSTATE_PROD: return (xa * xb) & mask;
    case PSTATE_MAX: return (a > b ? xa : xb) & mask;
    case PSTATE_MIN: return (a < b ? xa : xb) & mask;
    default: return 0;
  }
}

// max/min on doubles by the library's documented rule: NaN wins, then +0 > -0.
inline double minmax_ref(double a, double b, bool is_max) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) {
    if (a != 0) return a;
    bool negative = is_max ? (std::signbit(a) && std::signbit(b)) : (std::signbit(a) || std::signbit(b));
    return negative ? -0.0 : 0.0;
  }
  return is_max ? (a > b ? a : b) : (a < b ? a : b);
}

inline double combine_double(double a, double b, pstate_reduce_op_t op) {
  switch (op) {
    case PSTATE_SUM: return a + b;
    case PSTATE_PROD: return a * b;
    case PSTATE_MAX: return minmax_ref(a, b, true);
    default: return minmax_ref(a, b, false);
  }
}

inline uint64_t f32_bits(float f) { return std::isnan(f) ? 0x7FC00000u : std::bit_cast<uint32_t>(f); }
inline uint64_t f64_bits(double d) { return std::isnan(d) ? 0x7FF8000000000000ull : std::bit_cast<uint64_t>(d); }

inline uint64_t reference(pstate_dtype_t dtype, pstate_reduce_op_t op, uint64_t xa, uint64_t xb) {
  switch (dtype) {
    case PSTATE_INT8: return int_ref<int8_t>(xa, xb, op, 1);
    case PSTATE_UINT8: return int_ref<uint8_t>(xa, xb, op, 1);
    case PSTATE_INT32: return int_ref<int32_t>(xa, xb, op, 4);
    case PSTATE_UINT32: return int_ref<uint32_t>(xa, xb, op, 4);
    case PSTATE_INT64: return int_ref<int64_t>(xa, xb, op, 8);
    case PSTATE_UINT64: return int_ref<uint64_t>(xa, xb, op, 8);
    case PSTATE_FLOAT16:
      return half_round(kFp16, combine_double(half_value(kFp16, uint16_t(xa)), half_value(kFp16, uint16_t(xb)), op));
    case PSTATE_BFLOAT16:
      return half_round(kBf16, combine_double(half_value(kBf16, uint16_t(xa)), half_value(kBf16, uint16_t(xb)), op));
    case PSTATE_FLOAT32: {
      // One IEEE op in double then one rounding to float equals the float op (53 >= 2*24+2).
      double a = std::bit_cast<float>(uint32_t(xa)), b = std::bit_cast<float>(uint32_t(xb));
      return f32_bits(static_cast<float>(combine_double(a, b, op)));
    }
    case PSTATE_FLOAT64:
      return f64_bits(combine_double(std::bit_cast<double>(xa), std::bit_cast<double>(xb), op));
    default: return 0;
  }
}

inline uint64_t avg_reference(pstate_dtype_t dtype, uint64_t x, int d) {
  switch (dtype) {
    case PSTATE_INT8: return uint8_t(int8_t(x) / d);
    case PSTATE_UINT8: return uint8_t(uint8_t(x) / d);
    case PSTATE_INT32: return uint32_t(int32_t(x) / d);
    case PSTATE_UINT32: return uint32_t(uint32_t(x) / uint32_t(d));
    case PSTATE_INT64: return uint64_t(int64_t(x) / d);
    case PSTATE_UINT64: return x / uint64_t(d);
    case PSTATE_FLOAT16: return half_round(kFp16, half_value(kFp16, uint16_t(x)) / d);
    case PSTATE_BFLOAT16: return half_round(kBf16, half_value(kBf16, uint16_t(x)) / d);
    case PSTATE_FLOAT32: return f32_bits(static_cast<float>(double(std::bit_cast<float>(uint32_t(x))) / d));
    case PSTATE_FLOAT64: return f64_bits(std::bit_cast<double>(x) / d);
    default: return 0;
  }
}

}  // namespace ptest
