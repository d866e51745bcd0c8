// tests/support/float_ref.hpp: in the one folder of test helpers (every suite's, found through
// pstate_test_support's include path); used by tests/unit/test_reduce.cpp and reduce_ref.hpp.
//
// float_ref.hpp — test-side reference arithmetic for float16/bfloat16, written independently of
// src/reduce/half.hpp so tests do not check the library against itself.
//
// Decoding builds the value with ldexp from the fields; rounding a double to a 16-bit format
// binary-searches the ordered bit patterns for the neighbours of |x| and picks the nearer one
// (ties to the even pattern), treating the pattern after the largest finite value as 2^(emax+1)
// so overflow rounds to infinity exactly as IEEE-754 says. Every NaN maps to the canonical NaN
// (the library's documented rule). For a single +, ×, or ÷ of two 16-bit values, doing the
// operation in double and rounding once gives the correctly rounded result (double has more
// than 2p+2 bits), which is the reference the library's widen-to-float32 path must equal.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace ptest {

struct Half16Format {
  int mant_bits;      // 10 for fp16, 7 for bf16
  int exp_bias;       // 15, 127
  uint16_t inf;       // 0x7C00, 0x7F80
  uint16_t nan;       // canonical NaN: 0x7E00, 0x7FC0
  double overflow;    // the value the pattern after max finite stands for: 2^16, 2^128
};

inline constexpr Half16Format kFp16{10, 15, 0x7C00, 0x7E00, 65536.0};
inline constexpr Half16Format kBf16{7, 127, 0x7F80, 0x7FC0, 0x1p128};

inline bool half_is_nan(const Half16Format &f, uint16_t h) { return (h & 0x7FFF) > f.inf; }

// The value of bit pattern h, from its fields (the definition of the format).
inline double half_value_from_fields(const Half16Format &f, uint16_t h) {
  const int exp_field = (h & 0x7FFF) >> f.mant_bits;
  const int mant = h & ((1 << f.mant_bits) - 1);
  const int exp_max = (f.inf >> f.mant_bits);
  double v;
  if (exp_field == exp_max) v = mant ? NAN : INFINITY;
  else if (exp_field == 0) v = std::ldexp(static_cast<double>(mant), 1 - f.exp_bias - f.mant_bits);
  else v = std::ldexp(static_cast<double>(mant + (1 << f.mant_bits)), exp_field - f.exp_bias - f.mant_bits);
  return (h & 0x8000) ? -v : v;
}

// All 65536 values of the format, decoded once (tests call this millions of times).
inline const std::vector<double> &half_table(const Half16Format &f) {
  static const std::vector<double> fp16 = [] {
    std::vector<double> t(0x10000);
    for (uint32_t h = 0; h < 0x10000; ++h) t[h] = half_value_from_fields(kFp16, static_cast<uint16_t>(h));
    return t;
  }();
  static const std::vector<double> bf16 = [] {
    std::vector<double> t(0x10000);
    for (uint32_t h = 0; h < 0x10000; ++h) t[h] = half_value_from_fields(kBf16, static_cast<uint16_t>(h));
    return t;
  }();
  return f.mant_bits == kFp16.mant_bits ? fp16 : bf16;
}

inline double half_value(const Half16Format &f, uint16_t h) { return half_table(f)[h]; }

inline uint16_t half_round(const Half16Format &f, double x) {
  if (std::isnan(x)) return f.nan;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a == INFINITY) return sign | f.inf;
  // Largest pattern p in [0, inf) with value(p) <= a.
  uint32_t lo = 0, hi = f.inf;  // value(lo) <= a < value(hi) (hi = inf stands for overflow)
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (half_value(f, static_cast<uint16_t>(mid)) <= a) lo = mid;
    else hi = mid;
  }
  const double below = half_value(f, static_cast<uint16_t>(lo));
  if (below == a) return sign | static_cast<uint16_t>(lo);
  const double above = hi == f.inf ? f.overflow : half_value(f, static_cast<uint16_t>(hi));
  const double d_below = a - below, d_above = above - a;
  uint32_t pick;
  if (d_below < d_above) pick = lo;
  else if (d_above < d_below) pick = hi;
  else pick = (lo & 1) ? hi : lo;
  return sign | static_cast<uint16_t>(pick);
}

}  // namespace ptest
