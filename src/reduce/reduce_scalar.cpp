// reduce_scalar.cpp — the portable reduction kernels: complete for every dtype × op, baseline
// x86-64, and the reference every SIMD path must match bit for bit (semantics in kernels.hpp).
//
// Loads and stores go through memcpy so unaligned user buffers are fine; integer arithmetic is
// done in the unsigned type so wrap-around is defined; float results pass through canonical_nan()
// so NaN bits never depend on operand order.
#include "reduce/half.hpp"
#include "reduce/kernels.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace pstate::reduce_detail {

namespace {

template <typename T>
T load(const void *base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char *>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store(void *base, size_t i, T v) {
  std::memcpy(static_cast<unsigned char *>(base) + i * sizeof(T), &v, sizeof(T));
}

// ---- integer ops (wrap-around in the unsigned type) -----------------------------------------
template <typename T>
struct IntOps {
  using U = std::make_unsigned_t<T>;
  static T sum(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  static T prod(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
  static T max(T a, T b) { return a > b ? a : b; }
  static T min(T a, T b) { return a < b ? a : b; }
  // The divisor (a group size, > 0) may not fit T (int8 and 200 ranks): divide in T's common
  // type with int, which keeps the signedness of T for 32/64-bit types.
  static T div(T a, int d) {
    using W = std::common_type_t<T, int>;
    return static_cast<T>(static_cast<W>(a) / static_cast<W>(d));
  }
};

// ---- float ops (canonical NaN, signed-zero rule) --------------------------------------------
template <typename F>
struct FloatBits;
template <>
struct FloatBits<float> {
  using U = uint32_t;
  static constexpr U kNaN = 0x7FC00000u;
};
template <>
struct FloatBits<double> {
  using U = uint64_t;
  static constexpr U kNaN = 0x7FF8000000000000ull;
};

template <typename F>
struct FloatOps {
  using U = typename FloatBits<F>::U;
  static F nan() { return std::bit_cast<F>(FloatBits<F>::kNaN); }
  static F canonical_nan(F r) { return r != r ? nan() : r; }
  static F sum(F a, F b) { return canonical_nan(a + b); }
  static F prod(F a, F b) { return canonical_nan(a * b); }
  // Equal operands can only differ as +0/-0: AND of the bits gives +0 for max, OR gives -0 for min.
  static F max(F a, F b) {
    if (a != a || b != b) return nan();
    if (a > b) return a;
    if (b > a) return b;
    return std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) & std::bit_cast<U>(b)));
  }
  static F min(F a, F b) {
    if (a != a || b != b) return nan();
    if (a < b) return a;
    if (b < a) return b;
    return std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) | std::bit_cast<U>(b)));
  }
  static F div(F a, int d) { return canonical_nan(a / static_cast<F>(d)); }
};

// ---- 16-bit floats: widen, combine as float32, round back ------------------------------------
struct F16Codec {
  static float widen(uint16_t h) { return half::f16_to_f32(h); }
  static uint16_t narrow(float f) { return half::f32_to_f16(f); }
};
struct BF16Codec {
  static float widen(uint16_t h) { return half::bf16_to_f32(h); }
  static uint16_t narrow(float f) { return half::f32_to_bf16(f); }
};

template <typename Codec>
struct HalfOps {
  using F = FloatOps<float>;
  static uint16_t sum(uint16_t a, uint16_t b) { return Codec::narrow(F::sum(Codec::widen(a), Codec::widen(b))); }
  static uint16_t prod(uint16_t a, uint16_t b) { return Codec::narrow(F::prod(Codec::widen(a), Codec::widen(b))); }
  static uint16_t max(uint16_t a, uint16_t b) { return Codec::narrow(F::max(Codec::widen(a), Codec::widen(b))); }
  static uint16_t min(uint16_t a, uint16_t b) { return Codec::narrow(F::min(Codec::widen(a), Codec::widen(b))); }
  static uint16_t div(uint16_t a, int d) { return Codec::narrow(F::div(Codec::widen(a), d)); }
};

// ---- kernels: one loop per (storage type, op) -------------------------------------------------
template <typename T, T (*Op)(T, T)>
void binary_kernel(void *out, const void *a, const void *b, size_t n) {
  for (size_t i = 0; i < n; ++i) store<T>(out, i, Op(load<T>(a, i), load<T>(b, i)));
}

template <typename T, T (*Div)(T, int)>
void avg_kernel(void *buf, size_t n, int divisor) {
  for (size_t i = 0; i < n; ++i) store<T>(buf, i, Div(load<T>(buf, i), divisor));
}

template <typename T, typename Ops>
void set_row(KernelTable &t, pstate_dtype_t dtype) {
  t.binary[dtype][PSTATE_SUM] = &binary_kernel<T, &Ops::sum>;
  t.binary[dtype][PSTATE_PROD] = &binary_kernel<T, &Ops::prod>;
  t.binary[dtype][PSTATE_MAX] = &binary_kernel<T, &Ops::max>;
  t.binary[dtype][PSTATE_MIN] = &binary_kernel<T, &Ops::min>;
  t.avg[dtype] = &avg_kernel<T, &Ops::div>;
}

KernelTable build_scalar_table() {
  KernelTable t{};
  t.name = "scalar";
  set_row<int8_t, IntOps<int8_t>>(t, PSTATE_INT8);
  set_row<uint8_t, IntOps<uint8_t>>(t, PSTATE_UINT8);
  set_row<int32_t, IntOps<int32_t>>(t, PSTATE_INT32);
  set_row<uint32_t, IntOps<uint32_t>>(t, PSTATE_UINT32);
  set_row<int64_t, IntOps<int64_t>>(t, PSTATE_INT64);
  set_row<uint64_t, IntOps<uint64_t>>(t, PSTATE_UINT64);
  set_row<uint16_t, HalfOps<F16Codec>>(t, PSTATE_FLOAT16);
  set_row<float, FloatOps<float>>(t, PSTATE_FLOAT32);
  set_row<double, FloatOps<double>>(t, PSTATE_FLOAT64);
  set_row<uint16_t, HalfOps<BF16Codec>>(t, PSTATE_BFLOAT16);
  return t;  // fp8 rows stay nullptr: move-only
}

}  // namespace

const KernelTable &scalar_kernel_table() {
  static const KernelTable table = build_scalar_table();
  return table;
}

}  // namespace pstate::reduce_detail
