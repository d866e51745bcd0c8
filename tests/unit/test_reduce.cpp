// test_reduce.cpp — the reduction kernels (src/reduce/): every dtype × op of the scalar reference
// against an independent test-side reference, every SIMD path (AVX2, AVX-512, when this CPU has
// them) against the scalar path bit for bit, and each documented edge rule by name.
//
// Inputs mix random bit patterns, special values (NaN with payloads, signalling NaN, ±inf, ±0,
// subnormals, extremes) and pairs of nearby values (so float16/bfloat16 sums hit rounding ties),
// over odd lengths and unaligned buffers, out of place and in place.
#include "common/error.hpp"
#include "reduce/kernels.hpp"
#include "reduce/reduce.hpp"
#include "float_ref.hpp"
#include "reduce_ref.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
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

using pstate::reduce_detail::KernelIsa;
using pstate::reduce_detail::KernelTable;
using ptest::half_round;
using ptest::half_value;
using ptest::kBf16;
using ptest::kFp16;
using ptest::avg_reference;
using ptest::reference;

namespace {

const pstate_dtype_t kReducible[] = {PSTATE_INT8,   PSTATE_UINT8,   PSTATE_INT32,   PSTATE_UINT32,  PSTATE_INT64,
                                     PSTATE_UINT64, PSTATE_FLOAT16, PSTATE_FLOAT32, PSTATE_FLOAT64, PSTATE_BFLOAT16};
const pstate_reduce_op_t kKernelOps[] = {PSTATE_SUM, PSTATE_PROD, PSTATE_MAX, PSTATE_MIN};
const size_t kLengths[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 1000, 1023, 4099};

// ---- input generation ------------------------------------------------------------------------
std::vector<uint64_t> special_bits(pstate_dtype_t dtype) {
  switch (dtype) {
    case PSTATE_FLOAT16:
      return {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7D01, 0xFE55, 0x0001, 0x8001, 0x03FF,
              0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x6800, 0x0200};
    case PSTATE_BFLOAT16:
      return {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFA5, 0x0001, 0x8001, 0x007F,
              0x0080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x4380};
    case PSTATE_FLOAT32:
      return {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFA00001, 0x7F800001,
              0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000};
    case PSTATE_FLOAT64:
      return {0x0, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000,
              0xFFF4000000000001, 0x7FF0000000000001, 0x1, 0x800FFFFFFFFFFFFF, 0x0010000000000000,
              0x7FEFFFFFFFFFFFFF, 0x3FF0000000000000};
    default:  // integers: zero, one, minus one, and the extremes of every width
      return {0, 1, ~0ull, 0x7F, 0x80, 0xFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x7FFFFFFFFFFFFFFF,
              0x8000000000000000};
  }
}

void put(std::vector<unsigned char> &buf, size_t offset, size_t i, size_t esize, uint64_t bits) {
  std::memcpy(buf.data() + offset + i * esize, &bits, esize);  // little-endian: the low bytes
}
uint64_t get(const unsigned char *p, size_t i, size_t esize) {
  uint64_t bits = 0;
  std::memcpy(&bits, p + i * esize, esize);
  return bits;
}

// Fills a and b (n elements each, at byte offset `offset`) with a mix of random bits, special
// values, and b-values a few ulps from a (ties and cancellations for the 16-bit floats).
void fill_pair(std::mt19937_64 &rng, pstate_dtype_t dtype, size_t n, size_t offset, std::vector<unsigned char> &a,
               std::vector<unsigned char> &b) {
  const size_t esize = pstate::dtype_size(dtype);
  const std::vector<uint64_t> specials = special_bits(dtype);
  a.assign(offset + n * esize, 0);
  b.assign(offset + n * esize, 0);
  for (size_t i = 0; i < n; ++i) {
    uint64_t x = rng(), y = rng();
    switch (rng() % 6) {
      case 0: x = specials[rng() % specials.size()]; break;
      case 1: y = specials[rng() % specials.size()]; break;
      case 2: y = x + (rng() % 129) - 64; break;  // nearby magnitude, same sign (mostly)
      case 3: y = x ^ (uint64_t{1} << (esize * 8 - 1)); y += rng() % 5; break;  // near-cancellation
      default: break;
    }
    put(a, offset, i, esize, x);
    put(b, offset, i, esize, y);
  }
}


std::string describe(const char *path, pstate_dtype_t dtype, int op, size_t n, size_t i, uint64_t a, uint64_t b,
                     uint64_t got, uint64_t want) {
  char line[320];
  std::snprintf(line, sizeof line, "%s %s op %d n %zu: element %zu: a=0x%llx b=0x%llx got 0x%llx want 0x%llx", path,
                pstate_dtype_name(dtype), op, n, i, (unsigned long long)a, (unsigned long long)b,
                (unsigned long long)got, (unsigned long long)want);
  return line;
}

const KernelTable &scalar() { return *pstate::reduce_detail::kernel_table(KernelIsa::kScalar); }

// ---- helpers for the named edge tests ---------------------------------------------------------
uint64_t reduce_one(pstate_dtype_t dtype, pstate_reduce_op_t op, uint64_t a, uint64_t b) {
  const size_t esize = pstate::dtype_size(dtype);
  unsigned char x[8] = {}, y[8] = {}, out[8] = {};
  std::memcpy(x, &a, esize);
  std::memcpy(y, &b, esize);
  pstate::reduce_into(out, x, y, 1, dtype, op);
  return get(out, 0, esize);
}

uint16_t fp16(double v) { return half_round(kFp16, v); }
uint16_t bf16(double v) { return half_round(kBf16, v); }

}  // namespace

// The test-side rounding must itself be right: cross-check it against the compiler's _Float16.
static void test_reference_fp16_rounding_agrees_with_compiler_float16(void **) {
#ifdef __FLT16_MAX__
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    double x = std::ldexp(static_cast<double>(rng() % (1u << 20)), static_cast<int>(rng() % 50) - 45);
    if (rng() & 1) x = -x;
    _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    if (half_round(kFp16, x) != want) fail_msg("x=%a: ref 0x%x, _Float16 0x%x", x, half_round(kFp16, x), want);
  }
#else
  skip();
#endif
}

static void test_scalar_kernels_match_independent_reference(void **) {
  std::mt19937_64 rng(1);
  std::vector<unsigned char> a, b, out;
  for (pstate_dtype_t dtype : kReducible) {
    const size_t esize = pstate::dtype_size(dtype);
    for (pstate_reduce_op_t op : kKernelOps) {
      const size_t n = 20000;
      fill_pair(rng, dtype, n, 0, a, b);
      out.assign(n * esize, 0);
      scalar().binary[dtype][op](out.data(), a.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        uint64_t xa = get(a.data(), i, esize), xb = get(b.data(), i, esize);
        uint64_t want = reference(dtype, op, xa, xb), got = get(out.data(), i, esize);
        if (got != want) fail_msg("%s", describe("scalar", dtype, op, n, i, xa, xb, got, want).c_str());
      }
    }
  }
}

static void test_scalar_avg_matches_independent_reference(void **) {
  std::mt19937_64 rng(2);
  std::vector<unsigned char> a, b;
  for (pstate_dtype_t dtype : kReducible) {
    const size_t esize = pstate::dtype_size(dtype);
    for (int divisor : {1, 2, 3, 7, 9, 200, 1000}) {
      const size_t n = 5000;
      fill_pair(rng, dtype, n, 0, a, b);
      std::vector<unsigned char> buf = a;
      scalar().avg[dtype](buf.data(), n, divisor);
      for (size_t i = 0; i < n; ++i) {
        uint64_t x = get(a.data(), i, esize), want = avg_reference(dtype, x, divisor), got = get(buf.data(), i, esize);
        if (got != want) fail_msg("%s", describe("scalar avg", dtype, divisor, n, i, x, 0, got, want).c_str());
      }
    }
  }
}

static void check_simd_table_matches_scalar(const KernelTable &simd) {
  std::mt19937_64 rng(3);
  std::vector<unsigned char> a, b, out_simd, out_scalar, in_place;
  for (pstate_dtype_t dtype : kReducible) {
    const size_t esize = pstate::dtype_size(dtype);
    for (pstate_reduce_op_t op : kKernelOps) {
      for (size_t n : kLengths) {
        for (size_t offset : {size_t{0}, size_t{1}}) {  // 1: every load and store unaligned
          fill_pair(rng, dtype, n, offset, a, b);
          out_simd.assign(offset + n * esize, 0);
          out_scalar.assign(offset + n * esize, 0);
          simd.binary[dtype][op](out_simd.data() + offset, a.data() + offset, b.data() + offset, n);
          scalar().binary[dtype][op](out_scalar.data() + offset, a.data() + offset, b.data() + offset, n);
          in_place = a;
          simd.binary[dtype][op](in_place.data() + offset, in_place.data() + offset, b.data() + offset, n);
          for (size_t i = 0; i < n; ++i) {
            uint64_t got = get(out_simd.data() + offset, i, esize), want = get(out_scalar.data() + offset, i, esize);
            if (got != want || get(in_place.data() + offset, i, esize) != want)
              fail_msg("%s", describe(simd.name, dtype, op, n, i, get(a.data() + offset, i, esize),
                                      get(b.data() + offset, i, esize), got, want).c_str());
          }
        }
      }
    }
    for (int divisor : {1, 3, 8, 9}) {
      for (size_t n : kLengths) {
        fill_pair(rng, dtype, n, 1, a, b);
        std::vector<unsigned char> x = a, y = a;
        simd.avg[dtype](x.data() + 1, n, divisor);
        scalar().avg[dtype](y.data() + 1, n, divisor);
        if (x != y) fail_msg("%s avg %s n %zu divisor %d differs from scalar", simd.name, pstate_dtype_name(dtype), n, divisor);
      }
    }
  }
}

static void test_avx2_kernels_match_scalar_bit_for_bit(void **) {
  const KernelTable *t = pstate::reduce_detail::kernel_table(KernelIsa::kAvx2);
  if (t == nullptr) skip();
  // The table must really hold SIMD kernels, or this test proves nothing.
  assert_true(t->binary[PSTATE_FLOAT32][PSTATE_SUM] != scalar().binary[PSTATE_FLOAT32][PSTATE_SUM]);
  assert_true(t->binary[PSTATE_BFLOAT16][PSTATE_MAX] != scalar().binary[PSTATE_BFLOAT16][PSTATE_MAX]);
  check_simd_table_matches_scalar(*t);
}

static void test_avx512_kernels_match_scalar_bit_for_bit(void **) {
  const KernelTable *t = pstate::reduce_detail::kernel_table(KernelIsa::kAvx512);
  if (t == nullptr) skip();
  const KernelTable *avx2 = pstate::reduce_detail::kernel_table(KernelIsa::kAvx2);
  assert_true(t->binary[PSTATE_FLOAT16][PSTATE_SUM] != avx2->binary[PSTATE_FLOAT16][PSTATE_SUM]);
  assert_true(t->binary[PSTATE_INT64][PSTATE_PROD] != avx2->binary[PSTATE_INT64][PSTATE_PROD]);
  check_simd_table_matches_scalar(*t);
}

static void test_fp16_sum_rounds_ties_to_even(void **) {
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, fp16(2048), fp16(1)), 0x6800);  // 2049 -> 2048
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, fp16(2050), fp16(1)), fp16(2052));
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, fp16(1), 0x1000), 0x3C00);  // 1 + 2^-11 -> 1
}

static void test_bf16_sum_rounds_ties_to_even(void **) {
  assert_int_equal(reduce_one(PSTATE_BFLOAT16, PSTATE_SUM, bf16(256), bf16(1)), 0x4380);  // 257 -> 256
  assert_int_equal(reduce_one(PSTATE_BFLOAT16, PSTATE_SUM, bf16(258), bf16(1)), bf16(260));
  assert_int_equal(reduce_one(PSTATE_BFLOAT16, PSTATE_SUM, bf16(256), bf16(1.5)), bf16(258));  // above the tie
}

static void test_fp16_sum_past_max_rounds_to_infinity(void **) {
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, 0x7BFF, fp16(16)), 0x7C00);  // 65520: tie -> inf
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, 0x7BFF, fp16(8)), 0x7BFF);   // 65512 -> 65504
  assert_int_equal(reduce_one(PSTATE_BFLOAT16, PSTATE_PROD, 0x7F7F, bf16(2)), 0x7F80);
}

static void test_fp16_subnormals_add_exactly_and_carry_into_normals(void **) {
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, 0x0001, 0x0001), 0x0002);
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, 0x03FF, 0x0001), 0x0400);
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_SUM, 0x8001, 0x0001), 0x0000);
  assert_int_equal(reduce_one(PSTATE_BFLOAT16, PSTATE_SUM, 0x0001, 0x007F), 0x0080);
}

static void test_nan_propagates_as_canonical_nan_in_every_float_op(void **) {
  struct Case { pstate_dtype_t dtype; uint64_t odd_nan, one, canonical; };
  const Case cases[] = {{PSTATE_FLOAT16, 0xFD01, 0x3C00, 0x7E00},
                        {PSTATE_BFLOAT16, 0xFF81, 0x3F80, 0x7FC0},
                        {PSTATE_FLOAT32, 0xFFA00001, 0x3F800000, 0x7FC00000},
                        {PSTATE_FLOAT64, 0xFFF4000000000001, 0x3FF0000000000000, 0x7FF8000000000000}};
  for (const Case &c : cases) {
    for (pstate_reduce_op_t op : kKernelOps) {
      assert_true(reduce_one(c.dtype, op, c.odd_nan, c.one) == c.canonical);
      assert_true(reduce_one(c.dtype, op, c.one, c.odd_nan) == c.canonical);
    }
  }
  // inf - inf creates a NaN: canonical too (x86 would give the negative default NaN).
  assert_int_equal(reduce_one(PSTATE_FLOAT32, PSTATE_SUM, 0x7F800000, 0xFF800000), 0x7FC00000);
}

static void test_max_and_min_of_signed_zeros_ignore_operand_order(void **) {
  assert_int_equal(reduce_one(PSTATE_FLOAT32, PSTATE_MAX, 0x80000000, 0x00000000), 0x00000000);
  assert_int_equal(reduce_one(PSTATE_FLOAT32, PSTATE_MAX, 0x00000000, 0x80000000), 0x00000000);
  assert_int_equal(reduce_one(PSTATE_FLOAT32, PSTATE_MIN, 0x80000000, 0x00000000), 0x80000000);
  assert_int_equal(reduce_one(PSTATE_FLOAT32, PSTATE_MIN, 0x00000000, 0x80000000), 0x80000000);
  assert_int_equal(reduce_one(PSTATE_FLOAT16, PSTATE_MAX, 0x8000, 0x0000), 0x0000);
  assert_int_equal(reduce_one(PSTATE_BFLOAT16, PSTATE_MIN, 0x0000, 0x8000), 0x8000);
  assert_true(reduce_one(PSTATE_FLOAT64, PSTATE_MIN, 0x0, 0x8000000000000000) == 0x8000000000000000);
}

static void test_integer_sum_and_prod_wrap_in_twos_complement(void **) {
  assert_int_equal(reduce_one(PSTATE_INT8, PSTATE_SUM, 127, 1), 0x80);
  assert_int_equal(reduce_one(PSTATE_UINT8, PSTATE_SUM, 255, 1), 0);
  assert_int_equal(reduce_one(PSTATE_INT8, PSTATE_PROD, 0x80, 0xFF), 0x80);  // -128 * -1 = -128
  assert_int_equal(reduce_one(PSTATE_INT32, PSTATE_PROD, 65536, 65536), 0);
  assert_true(reduce_one(PSTATE_INT64, PSTATE_SUM, 0x7FFFFFFFFFFFFFFF, 1) == 0x8000000000000000);
  assert_true(reduce_one(PSTATE_UINT64, PSTATE_PROD, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF) == 1);
}

static void test_integer_max_min_respect_signedness(void **) {
  assert_int_equal(reduce_one(PSTATE_INT8, PSTATE_MAX, 0xFF, 1), 1);     // -1 < 1
  assert_int_equal(reduce_one(PSTATE_UINT8, PSTATE_MAX, 0xFF, 1), 0xFF);  // 255 > 1
  assert_true(reduce_one(PSTATE_INT64, PSTATE_MIN, 0x8000000000000000, 0) == 0x8000000000000000);
  assert_true(reduce_one(PSTATE_UINT64, PSTATE_MIN, 0x8000000000000000, 0) == 0);
}

static void test_avg_on_integers_truncates_toward_zero(void **) {
  int32_t v[3] = {-7, 7, -1};
  pstate::finish_avg(v, 3, PSTATE_INT32, 2);
  assert_int_equal(v[0], -3);
  assert_int_equal(v[1], 3);
  assert_int_equal(v[2], 0);
  int8_t small = -100;  // a group larger than int8 can hold
  pstate::finish_avg(&small, 1, PSTATE_INT8, 200);
  assert_int_equal(small, 0);
  uint8_t u = 250;
  pstate::finish_avg(&u, 1, PSTATE_UINT8, 3);
  assert_int_equal(u, 83);
}

static void test_avg_op_reduces_like_sum(void **) {
  float a[3] = {1.5f, -2.0f, 3.0f}, b[3] = {0.25f, 2.0f, -1.0f};
  pstate::reduce_inplace(a, b, 3, PSTATE_FLOAT32, PSTATE_AVG);
  assert_true(a[0] == 1.75f && a[1] == 0.0f && a[2] == 2.0f);
}

static void test_fp8_is_move_only_and_reductions_are_unsupported(void **) {
  assert_false(pstate::is_reducible(PSTATE_FP8_E4M3));
  assert_false(pstate::is_reducible(PSTATE_FP8_E5M2));
  assert_int_equal(pstate::dtype_size(PSTATE_FP8_E4M3), 1);
  uint8_t a = 1, b = 2;
  try {
    pstate::reduce_inplace(&a, &b, 1, PSTATE_FP8_E5M2, PSTATE_SUM);
    fail_msg("fp8 reduction did not throw");
  } catch (const pstate::Error &e) {
    assert_int_equal(e.status(), PSTATE_ERR_UNSUPPORTED);
  }
  for (pstate_dtype_t d : kReducible) assert_true(pstate::is_reducible(d));
  assert_int_equal(pstate::dtype_size(static_cast<pstate_dtype_t>(99)), 0);
}

static void test_invalid_op_is_an_invalid_argument(void **) {
  float a = 1, b = 2;
  try {
    pstate::reduce_inplace(&a, &b, 1, PSTATE_FLOAT32, static_cast<pstate_reduce_op_t>(9));
    fail_msg("invalid op did not throw");
  } catch (const pstate::Error &e) {
    assert_int_equal(e.status(), PSTATE_ERR_INVALID_ARGUMENT);
  }
}

static void test_count_zero_touches_nothing(void **) {
  pstate::reduce_into(nullptr, nullptr, nullptr, 0, PSTATE_FLOAT16, PSTATE_SUM);
  pstate::finish_avg(nullptr, 0, PSTATE_BFLOAT16, 3);
}

static void test_kernel_request_picks_that_table_or_falls_back_to_best(void **) {
  using pstate::reduce_detail::choose_kernel_table;
  assert_string_equal(choose_kernel_table("scalar").name, "scalar");
  const char *best = choose_kernel_table(nullptr).name;
  assert_string_equal(choose_kernel_table("no-such-kernel").name, best);
  if (pstate::reduce_detail::kernel_table(KernelIsa::kAvx2) != nullptr)
    assert_string_equal(choose_kernel_table("avx2").name, "avx2");
  if (pstate::reduce_detail::kernel_table(KernelIsa::kAvx512) != nullptr)
    assert_string_equal(choose_kernel_table("avx512").name, "avx512");
  else
    assert_string_equal(choose_kernel_table("avx512").name, best);
  // The process-wide choice is one of the three names.
  std::string active = pstate::reduce_kernel_name();
  assert_true(active == "scalar" || active == "avx2" || active == "avx512");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_fp16_rounding_agrees_with_compiler_float16),
      cmocka_unit_test(test_scalar_kernels_match_independent_reference),
      cmocka_unit_test(test_scalar_avg_matches_independent_reference),
      cmocka_unit_test(test_avx2_kernels_match_scalar_bit_for_bit),
      cmocka_unit_test(test_avx512_kernels_match_scalar_bit_for_bit),
      cmocka_unit_test(test_fp16_sum_rounds_ties_to_even),
      cmocka_unit_test(test_bf16_sum_rounds_ties_to_even),
      cmocka_unit_test(test_fp16_sum_past_max_rounds_to_infinity),
      cmocka_unit_test(test_fp16_subnormals_add_exactly_and_carry_into_normals),
      cmocka_unit_test(test_nan_propagates_as_canonical_nan_in_every_float_op),
      cmocka_unit_test(test_max_and_min_of_signed_zeros_ignore_operand_order),
      cmocka_unit_test(test_integer_sum_and_prod_wrap_in_twos_complement),
      cmocka_unit_test(test_integer_max_min_respect_signedness),
      cmocka_unit_test(test_avg_on_integers_truncates_toward_zero),
      cmocka_unit_test(test_avg_op_reduces_like_sum),
      cmocka_unit_test(test_fp8_is_move_only_and_reductions_are_unsupported),
      cmocka_unit_test(test_invalid_op_is_an_invalid_argument),
      cmocka_unit_test(test_count_zero_touches_nothing),
      cmocka_unit_test(test_kernel_request_picks_that_table_or_falls_back_to_best),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
