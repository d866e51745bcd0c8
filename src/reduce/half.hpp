// half.hpp — scalar float16 / bfloat16 <-> float32 conversions (the reference the SIMD paths match).
//
// Widening is exact (every fp16/bf16 value is a float32 value). Narrowing rounds to nearest, ties
// to even, handles subnormals and overflow to infinity, and turns every NaN into the canonical
// quiet NaN (0x7E00 fp16, 0x7FC0 bf16): the reduction kernels promise the same bits on every path,
// and a NaN's payload is not something worth carrying (see kernels.hpp for the NaN rule).
//
// Include only from baseline (non-ISA) translation units: these are inline functions, and an
// inline function compiled with -mavx2 in one object may be the copy the linker keeps for all.
#pragma once

#include <bit>
#include <cstdint>

namespace pstate::half {

inline constexpr uint16_t kF16CanonicalNaN = 0x7E00;
inline constexpr uint16_t kBF16CanonicalNaN = 0x7FC0;

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {  // inf or NaN (a signalling NaN is quieted, as F16C does)
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  }
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  // zero or subnormal: mant * 2^-24, exact in float32 (a normal float32 for every mant > 0)
  const float magnitude = static_cast<float>(mant) * 0x1p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

// Shifts m right by s (1..31) rounding to nearest, ties to even.
inline uint32_t shift_right_rne(uint32_t m, uint32_t s) {
  const uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  return q + ((rem > halfway || (rem == halfway && (q & 1u))) ? 1u : 0u);
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t mag = x & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return kF16CanonicalNaN;
  if (mag >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (halfway past 65504): infinity
  const uint32_t exp = mag >> 23;
  if (exp >= 113) {  // normal fp16: rebias the exponent, round 23 mantissa bits to 10
    const uint32_t h = ((exp - 112u) << 10) | ((mag & 0x7FFFFFu) >> 13);
    const uint32_t rem = mag & 0x1FFFu;
    const uint32_t up = (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (h + up));  // a carry into the exponent is correct
  }
  if (exp < 102) return sign;  // below 2^-25: rounds to zero
  // subnormal fp16: value / 2^-24 rounded; may round up to the smallest normal (0x0400)
  const uint32_t m = (mag & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint16_t>(sign | shift_right_rne(m, 126u - exp));
}

inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return kBF16CanonicalNaN;
  // bf16 keeps float32's exponent, so subnormals and overflow fall out of the same rounding.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace pstate::half
