// reduce_avx512.cpp — AVX-512 (F, BW, DQ, VL) reduction kernels; bit-identical to reduce_scalar.cpp.
//
// The same construction as reduce_avx2.cpp with 512-bit vectors and mask registers (read that
// file's header for how each dtype keeps the scalar bits, and why nothing inline is shared with
// baseline code). Entered only through the table reduce.cpp builds after checking the CPU; the
// AVX-512 table starts from the AVX2 one, so any entry not set here stays AVX2.
#include "reduce/kernels.hpp"

// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*() and then warn about it at -O2
// (GCC bug 105593); the values are fully overwritten, so the warning is noise for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace pstate::reduce_detail {

namespace {

using Bytes = unsigned char;

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
inline __m512 nan_ps() { return _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)); }
inline __m512 canonical_nan_ps(__m512 r) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), r, nan_ps()); }
inline __m512 fix_equal_and_nan_ps(__m512 m, __m512 a, __m512 b, __m512 equal_bits) {
  m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), m, equal_bits);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), m, nan_ps());
}
struct PsSum {
  static constexpr int kOp = PSTATE_SUM;
  static __m512 apply(__m512 a, __m512 b) { return canonical_nan_ps(_mm512_add_ps(a, b)); }
};
struct PsProd {
  static constexpr int kOp = PSTATE_PROD;
  static __m512 apply(__m512 a, __m512 b) { return canonical_nan_ps(_mm512_mul_ps(a, b)); }
};
struct PsMax {
  static constexpr int kOp = PSTATE_MAX;
  static __m512 apply(__m512 a, __m512 b) { return fix_equal_and_nan_ps(_mm512_max_ps(a, b), a, b, _mm512_and_ps(a, b)); }
};
struct PsMin {
  static constexpr int kOp = PSTATE_MIN;
  static __m512 apply(__m512 a, __m512 b) { return fix_equal_and_nan_ps(_mm512_min_ps(a, b), a, b, _mm512_or_ps(a, b)); }
};

// ---- float64 lane ops -------------------------------------------------------------------------
inline __m512d nan_pd() { return _mm512_castsi512_pd(_mm512_set1_epi64(0x7FF8000000000000ll)); }
inline __m512d canonical_nan_pd(__m512d r) { return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(r, r, _CMP_UNORD_Q), r, nan_pd()); }
inline __m512d fix_equal_and_nan_pd(__m512d m, __m512d a, __m512d b, __m512d equal_bits) {
  m = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), m, equal_bits);
  return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), m, nan_pd());
}
struct PdSum {
  static constexpr int kOp = PSTATE_SUM;
  static __m512d apply(__m512d a, __m512d b) { return canonical_nan_pd(_mm512_add_pd(a, b)); }
};
struct PdProd {
  static constexpr int kOp = PSTATE_PROD;
  static __m512d apply(__m512d a, __m512d b) { return canonical_nan_pd(_mm512_mul_pd(a, b)); }
};
struct PdMax {
  static constexpr int kOp = PSTATE_MAX;
  static __m512d apply(__m512d a, __m512d b) { return fix_equal_and_nan_pd(_mm512_max_pd(a, b), a, b, _mm512_and_pd(a, b)); }
};
struct PdMin {
  static constexpr int kOp = PSTATE_MIN;
  static __m512d apply(__m512d a, __m512d b) { return fix_equal_and_nan_pd(_mm512_min_pd(a, b), a, b, _mm512_or_pd(a, b)); }
};

// ---- 16-bit float codecs (16 lanes in a __m256i <-> a __m512) ---------------------------------
struct F16Lanes {
  static constexpr pstate_dtype_t kDtype = PSTATE_FLOAT16;
  static __m512 widen(const Bytes *p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }
  static void narrow(Bytes *p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};
struct BF16Lanes {
  static constexpr pstate_dtype_t kDtype = PSTATE_BFLOAT16;
  static __m512 widen(const Bytes *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  // v's NaNs are canonical already (0x7FC00000 rounds to 0x7FC0 like any other value).
  static void narrow(Bytes *p, __m512 v) {
    __m512i x = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm512_cvtepi32_epi16(rounded));
  }
};

// ---- float kernels ------------------------------------------------------------------------------
template <typename Op>
void f32_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<4, 16, PSTATE_FLOAT32, Op::kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    _mm512_storeu_ps(o, Op::apply(_mm512_loadu_ps(x), _mm512_loadu_ps(y)));
  });
}

template <typename Op>
void f64_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<8, 8, PSTATE_FLOAT64, Op::kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    _mm512_storeu_pd(o, Op::apply(_mm512_loadu_pd(x), _mm512_loadu_pd(y)));
  });
}

template <typename Lanes, typename Op>
void half_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<2, 16, Lanes::kDtype, Op::kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    Lanes::narrow(o, Op::apply(Lanes::widen(x), Lanes::widen(y)));
  });
}

void f32_avg(void *buf, size_t n, int divisor) {
  const __m512 d = _mm512_set1_ps(static_cast<float>(divisor));
  avg_loop<4, 16, PSTATE_FLOAT32>(buf, n, divisor, [d](Bytes *p) {
    _mm512_storeu_ps(p, canonical_nan_ps(_mm512_div_ps(_mm512_loadu_ps(p), d)));
  });
}

void f64_avg(void *buf, size_t n, int divisor) {
  const __m512d d = _mm512_set1_pd(static_cast<double>(divisor));
  avg_loop<8, 8, PSTATE_FLOAT64>(buf, n, divisor, [d](Bytes *p) {
    _mm512_storeu_pd(p, canonical_nan_pd(_mm512_div_pd(_mm512_loadu_pd(p), d)));
  });
}

template <typename Lanes>
void half_avg(void *buf, size_t n, int divisor) {
  const __m512 d = _mm512_set1_ps(static_cast<float>(divisor));
  avg_loop<2, 16, Lanes::kDtype>(buf, n, divisor, [d](Bytes *p) {
    Lanes::narrow(p, canonical_nan_ps(_mm512_div_ps(Lanes::widen(p), d)));
  });
}

// ---- integer lane ops ---------------------------------------------------------------------------
inline __m512i add8(__m512i a, __m512i b) { return _mm512_add_epi8(a, b); }
inline __m512i mul8(__m512i a, __m512i b) {
  __m512i even = _mm512_mullo_epi16(a, b);
  __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0x00FF)), _mm512_slli_epi16(odd, 8));
}
inline __m512i max_i8(__m512i a, __m512i b) { return _mm512_max_epi8(a, b); }
inline __m512i min_i8(__m512i a, __m512i b) { return _mm512_min_epi8(a, b); }
inline __m512i max_u8(__m512i a, __m512i b) { return _mm512_max_epu8(a, b); }
inline __m512i min_u8(__m512i a, __m512i b) { return _mm512_min_epu8(a, b); }
inline __m512i add32(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
inline __m512i mul32(__m512i a, __m512i b) { return _mm512_mullo_epi32(a, b); }
inline __m512i max_i32(__m512i a, __m512i b) { return _mm512_max_epi32(a, b); }
inline __m512i min_i32(__m512i a, __m512i b) { return _mm512_min_epi32(a, b); }
inline __m512i max_u32(__m512i a, __m512i b) { return _mm512_max_epu32(a, b); }
inline __m512i min_u32(__m512i a, __m512i b) { return _mm512_min_epu32(a, b); }
inline __m512i add64(__m512i a, __m512i b) { return _mm512_add_epi64(a, b); }
inline __m512i mul64(__m512i a, __m512i b) { return _mm512_mullo_epi64(a, b); }
inline __m512i max_i64(__m512i a, __m512i b) { return _mm512_max_epi64(a, b); }
inline __m512i min_i64(__m512i a, __m512i b) { return _mm512_min_epi64(a, b); }
inline __m512i max_u64(__m512i a, __m512i b) { return _mm512_max_epu64(a, b); }
inline __m512i min_u64(__m512i a, __m512i b) { return _mm512_min_epu64(a, b); }

template <pstate_dtype_t kDtype, int kOp, size_t kElem, __m512i (*Lane)(__m512i, __m512i)>
void int_kernel(void *out, const void *a, const void *b, size_t n) {
  vector_loop<kElem, 64 / kElem, kDtype, kOp>(out, a, b, n, [](Bytes *o, const Bytes *x, const Bytes *y) {
    _mm512_storeu_si512(o, Lane(_mm512_loadu_si512(x), _mm512_loadu_si512(y)));
  });
}

template <pstate_dtype_t kDtype, size_t kElem, __m512i (*Sum)(__m512i, __m512i), __m512i (*Prod)(__m512i, __m512i),
          __m512i (*Max)(__m512i, __m512i), __m512i (*Min)(__m512i, __m512i)>
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

void fill_avx512_kernels(KernelTable &t) {
  set_int_row<PSTATE_INT8, 1, add8, mul8, max_i8, min_i8>(t);
  set_int_row<PSTATE_UINT8, 1, add8, mul8, max_u8, min_u8>(t);
  set_int_row<PSTATE_INT32, 4, add32, mul32, max_i32, min_i32>(t);
  set_int_row<PSTATE_UINT32, 4, add32, mul32, max_u32, min_u32>(t);
  set_int_row<PSTATE_INT64, 8, add64, mul64, max_i64, min_i64>(t);
  set_int_row<PSTATE_UINT64, 8, add64, mul64, max_u64, min_u64>(t);
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
