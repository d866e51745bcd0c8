// reduce_avx2.cpp — AVX2 + F16C reduction kernels; bit-identical to reduce_scalar.cpp.
//
// Compiled with -mavx2 -mfma -mf16c (CMake, by file name) and entered only through the table that
// reduce.cpp builds after __builtin_cpu_supports says yes. Everything here lives in an anonymous
// namespace and includes no inline library code (no half.hpp, no std algorithms): an inline
// function compiled for AVX2 here could otherwise become the copy the linker keeps for baseline
// callers. Tails shorter than one vector go to the scalar kernel of the same (dtype, op).
//
// How each path keeps the scalar bits (see kernels.hpp for the rules):
//   - floats: vaddps/vmulps are IEEE like the scalar ops and no FMA is ever written; NaN lanes are
//     replaced by the canonical NaN; max/min fix up equal lanes (+0/-0) with AND/OR of the bits.
//   - fp16: vcvtph2ps widens exactly; vcvtps2ph with round-to-nearest-even narrows like
//     half::f32_to_f16 (a canonical float32 NaN becomes 0x7E00 either way).
//   - bf16: widen by shifting into the high half; narrow with the same add-0x7FFF-plus-lsb rounding
//     as half::f32_to_bf16, which maps the canonical float32 NaN to 0x7FC0.
//   - integers: lane-wise wrap-around; 8-bit and 64-bit products are assembled from 16-bit and
//     32×32→64-bit multiplies.
#include "reduce/kernels.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace pstate::reduce_detail {

namespace {

using Bytes = unsigned char;

// Applies body to every full vector of kLanes elements; the tail goes to the scalar kernel.
template <size_t kElem, size_t kLanes, pstate_dtype_t kDtype, int kOp, typename Body>
inline void vector_loop(void *out, const void *a, const void *b, size_t n, Body body) {
  auto *o = static_cast<Bytes *>(out);
  auto *pa = static_cast<const Bytes *>(a);
  auto *pb = static_cast<const Bytes *>(b);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) body(o + i * kElem, pa + i * kElem, pb + i * kElem);
  if (i < n) scalar_kernel_table().binary[kDtype][kOp](o + i * kElem, pa + i * kElem, pb + i * kElem, n - i);
}

template <size_t kElem, size_t kLanes, pstate_dtype_t kDtype, typename Body>
inline void avg_loop(void *buf, size_t n, int divisor, Body body) {
  auto *p = static_cast<Bytes *>(buf);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) body(p + i * kElem);
  if (i < n) scalar_kernel_table().avg[kDtype](p + i * kElem, n - i, divisor);
}

// ---- float32 lane ops (shared by float32, float16 and bfloat16) -------------------------------
inline __m256 canonical_nan_ps(__m256 r) {
  return _mm256_blendv_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)), _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
}
// a op b for lanes where a == b (only +0/-0 can differ) and NaN lanes, after the plain max/min.
inline __m256 fix_equal_and_nan_ps(__m256 m, __m256 a, __m256 b, __m256 equal_bits) {
  m = _mm256_blendv_ps(m, equal_bits, _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
  return _mm256_blendv_ps(m, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
struct PsSum {
  static constexpr int kOp = PSTATE_SUM;
  static __m256 apply(__m256 a, __m256 b) { return canonical_nan_ps(_mm256_add_ps(a, b)); }
};
struct PsProd {
  static constexpr int kOp = PSTATE_PROD;
  static __m256 apply(__m256 a, __m256 b) { return canonical_nan_ps(_mm256_mul_ps(a, b)); }
};
struct PsMax {
  static constexpr int kOp = PSTATE_MAX;
  static __m256 apply(__m256 a, __m256 b) {
    return fix_equal_and_nan_ps(_mm256_max_ps(a, b), a, b, _mm256_and_ps(a, b));
  }
};
struct PsMin {
  static constexpr int kOp = PSTATE_MIN;
  static __m256 apply(__m256 a, __m256 b) {
    return fix_equal_and_nan_ps(_mm256_min_ps(a, b), a, b, _mm256_or_ps(a, b));
  }
};

// ---- float64 lane ops -------------------------------------------------------------------------
inline __m256d nan_pd() { return _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FF8000000000000ll)); }
inline __m256d canonical_nan_pd(__m256d r) { return _mm256_blendv_pd(r, nan_pd(), _mm256_cmp_pd(r, r, _CMP_UNORD_Q)); }
inline __m256d fix_equal_and_nan_pd(__m256d m, __m256d a, __m256d b, __m256d equal_bits) {
  m = _mm256_blendv_pd(m, equal_bits, _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
  return _mm256_blendv_pd(m, nan_pd(), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}
struct PdSum {
  static constexpr int kOp = PSTATE_SUM;
  static __m256d apply(__m256d a, __m256d b) { return canonical_nan_pd(_mm256_add_pd(a, b)); }
};
struct PdProd {
  static constexpr int kOp = PSTATE_PROD;
  static __m256d apply(__m256d a, __m256d b) { return canonical_nan_pd(_mm256_mul_pd(a, b)); }
};
struct PdMax {
  static constexpr int kOp = PSTATE_MAX;
  static __m256d apply(__m256d a, __m256d b) {
    return fix_equal_and_nan_pd(_mm256_max_pd(a, b), a, b, _mm256_and_pd(a, b));
  }
};
struct PdMin {
  static constexpr int kOp = PSTATE_MIN;
  static __m256d apply(__m256d a, __m256d b) {
    return fix_equal_and_nan_pd(_mm256_min_pd(a, b), a, b, _mm256_or_pd(a, b));
  }
};

// ---- 16-bit float codecs (8 lanes in a __m128i <-> a __m256) ----------------------------------
struct F16Lanes {
  static constexpr pstate_dtype_t kDtype = PSTATE_FLOAT16;
  static __m256 widen(const Bytes *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
  static void narrow(Bytes *p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};
struct BF16Lanes {
  static constexpr pstate_dtype_t kDtype = PSTATE_BFLOAT16;
  static __m256 widen(const Bytes *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  // v's NaNs are canonical already (0x7FC00000 rounds to 0x7FC0 like any other value).
  static void narrow(Bytes *p, __m256 v) {
    __m256i x = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm256_castsi256_si128(packed));
  }
};

// ---- float kernels ------------------------------------------------------------------------------
template <typename Op>
void f32_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<4, 8, PSTATE_FLOAT32, Op::kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    _mm256_storeu_ps(reinterpret_cast<float *>(o), Op::apply(_mm256_loadu_ps(reinterpret_cast<const float *>(x)),
                                                             _mm256_loadu_ps(reinterpret_cast<const float *>(y))));
  });
}

template <typename Op>
void f64_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<8, 4, PSTATE_FLOAT64, Op::kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    _mm256_storeu_pd(reinterpret_cast<double *>(o), Op::apply(_mm256_loadu_pd(reinterpret_cast<const double *>(x)),
                                                              _mm256_loadu_pd(reinterpret_cast<const double *>(y))));
  });
}

template <typename Lanes, typename Op>
void half_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<2, 8, Lanes::kDtype, Op::kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    Lanes::narrow(o, Op::apply(Lanes::widen(x), Lanes::widen(y)));
  });
}

void f32_avg(void *buf, size_t n, int divisor) {
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  avg_loop<4, 8, PSTATE_FLOAT32>(buf, n, divisor, [d](Bytes *p) {
    auto *f = reinterpret_cast<float *>(p);
    _mm256_storeu_ps(f, canonical_nan_ps(_mm256_div_ps(_mm256_loadu_ps(f), d)));
  });
}

void f64_avg(void *buf, size_t n, int divisor) {
  const __m256d d = _mm256_set1_pd(static_cast<double>(divisor));
  avg_loop<8, 4, PSTATE_FLOAT64>(buf, n, divisor, [d](Bytes *p) {
    auto *f = reinterpret_cast<double *>(p);
    _mm256_storeu_pd(f, canonical_nan_pd(_mm256_div_pd(_mm256_loadu_pd(f), d)));
  });
}

template <typename Lanes>
void half_avg(void *buf, size_t n, int divisor) {
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  avg_loop<2, 8, Lanes::kDtype>(buf, n, divisor, [d](Bytes *p) {
    Lanes::narrow(p, canonical_nan_ps(_mm256_div_ps(Lanes::widen(p), d)));
  });
}

// ---- integer lane ops ---------------------------------------------------------------------------
inline __m256i mul_epi8(__m256i a, __m256i b) {
  const __m256i low_bytes = _mm256_set1_epi16(0x00FF);
  __m256i even = _mm256_mullo_epi16(a, b);
  __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
  return _mm256_or_si256(_mm256_and_si256(even, low_bytes), _mm256_slli_epi16(odd, 8));
}
inline __m256i mul_epi64(__m256i a, __m256i b) {
  __m256i low = _mm256_mul_epu32(a, b);
  __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                   _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}
inline __m256i flip_sign_epi64(__m256i a) { return _mm256_xor_si256(a, _mm256_set1_epi64x(INT64_MIN)); }
inline __m256i max_epi64(__m256i a, __m256i b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }
inline __m256i min_epi64(__m256i a, __m256i b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
inline __m256i max_epu64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(flip_sign_epi64(a), flip_sign_epi64(b)));
}
inline __m256i min_epu64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(flip_sign_epi64(a), flip_sign_epi64(b)));
}

template <pstate_dtype_t kDtype, int kOp, size_t kElem, __m256i (*Lane)(__m256i, __m256i)>
void int_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<kElem, 32 / kElem, kDtype, kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(o),
                        Lane(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x)),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y))));
  });
}

// Intrinsics are not addressable everywhere; wrap the ones used as template arguments.
inline __m256i add8(__m256i a, __m256i b) { return _mm256_add_epi8(a, b); }
inline __m256i max_i8(__m256i a, __m256i b) { return _mm256_max_epi8(a, b); }
inline __m256i min_i8(__m256i a, __m256i b) { return _mm256_min_epi8(a, b); }
inline __m256i max_u8(__m256i a, __m256i b) { return _mm256_max_epu8(a, b); }
inline __m256i min_u8(__m256i a, __m256i b) { return _mm256_min_epu8(a, b); }
inline __m256i add32(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
inline __m256i mul32(__m256i a, __m256i b) { return _mm256_mullo_epi32(a, b); }
inline __m256i max_i32(__m256i a, __m256i b) { return _mm256_max_epi32(a, b); }
inline __m256i min_i32(__m256i a, __m256i b) { return _mm256_min_epi32(a, b); }
inline __m256i max_u32(__m256i a, __m256i b) { return _mm256_max_epu32(a, b); }
inline __m256i min_u32(__m256i a, __m256i b) { return _mm256_min_epu32(a, b); }
inline __m256i add64(__m256i a, __m256i b) { return _mm256_add_epi64(a, b); }

template <pstate_dtype_t kDtype, size_t kElem, __m256i (*Sum)(__m256i, __m256i), __m256i (*Prod)(__m256i, __m256i),
          __m256i (*Max)(__m256i, __m256i), __m256i (*Min)(__m256i, __m256i)>
void set_int_row(KernelTable &t) {
  t.binary[kDtype][PSTATE_SUM] = &int_kernel<kDtype, PSTATE_SUM, kElem, Sum>;
  t.binary[kDtype][PSTATE_PROD] = &int_kernel<kDtype, PSTATE_PROD, kElem, Prod>;
  t.binary[kDtype][PSTATE_MAX] = &int_kernel<kDtype, PSTATE_MAX, kElem, Max>;
  t.binary[kDtype][PSTATE_MIN] = &int_kernel<kDtype, PSTATE_MIN, kElem, Min>;
}

template <typename Lanes>
void set_half_row(KernelTable &t) {
  t.binary[Lanes::kDtype][PSTATE_SUM] = &half_kernel<Lanes, PsSum>;
  t.binary[Lanes::kDtype][PSTATE_PROD] = &half_kernel<Lanes, PsProd>;
  t.binary[Lanes::kDtype][PSTATE_MAX] = &half_kernel<Lanes, PsMax>;
  t.binary[Lanes::kDtype][PSTATE_MIN] = &half_kernel<Lanes, PsMin>;
  t.avg[Lanes::kDtype] = &half_avg<Lanes>;
}

}  // namespace

void fill_avx2_kernels(KernelTable &t) {
  set_int_row<PSTATE_INT8, 1, add8, mul_epi8, max_i8, min_i8>(t);
  set_int_row<PSTATE_UINT8, 1, add8, mul_epi8, max_u8, min_u8>(t);
  set_int_row<PSTATE_INT32, 4, add32, mul32, max_i32, min_i32>(t);
  set_int_row<PSTATE_UINT32, 4, add32, mul32, max_u32, min_u32>(t);
  set_int_row<PSTATE_INT64, 8, add64, mul_epi64, max_epi64, min_epi64>(t);
  set_int_row<PSTATE_UINT64, 8, add64, mul_epi64, max_epu64, min_epu64>(t);
  t.binary[PSTATE_FLOAT32][PSTATE_SUM] = &f32_kernel<PsSum>;
  t.binary[PSTATE_FLOAT32][PSTATE_PROD] = &f32_kernel<PsProd>;
  t.binary[PSTATE_FLOAT32][PSTATE_MAX] = &f32_kernel<PsMax>;
  t.binary[PSTATE_FLOAT32][PSTATE_MIN] = &f32_kernel<PsMin>;
  t.avg[PSTATE_FLOAT32] = &f32_avg;
  t.binary[PSTATE_FLOAT64][PSTATE_SUM] = &f64_kernel<PdSum>;
  t.binary[PSTATE_FLOAT64][PSTATE_PROD] = &f64_kernel<PdProd>;
  t.binary[PSTATE_FLOAT64][PSTATE_MAX] = &f64_kernel<PdMax>;
  t.binary[PSTATE_FLOAT64][PSTATE_MIN] = &f64_kernel<PdMin>;
  t.avg[PSTATE_FLOAT64] = &f64_avg;
  set_half_row<F16Lanes>(t);
  set_half_row<BF16Lanes>(t);
}

}  // namespace pstate::reduce_detail
