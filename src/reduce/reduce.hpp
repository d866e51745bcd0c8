// reduce.hpp — dtype × op reduction kernels: the arithmetic of every reducing collective.
//
// reduce_inplace(acc, in, n, dtype, op) sets acc[i] = acc[i] op in[i]. Integers wrap (sum/prod)
// as in two's complement; float16/bfloat16 are widened to float32, combined, and rounded back
// with round-to-nearest-even at every call, so a fixed reduction order gives the same bits on
// every rank and every CPU. finish_avg divides by the group size after a SUM (integers: truncating
// division). fp8 types are move-only: is_reducible() is false and callers return UNSUPPORTED.
// Kernels are chosen at run time by CPU features (scalar, AVX2/F16C, AVX-512); every path gives
// the same bits as the scalar one.
#pragma once

#include <pstate/pstate.h>

#include <cstddef>

namespace pstate {

// The size of one element; 0 for an invalid dtype. Inline table look-ups: every collective asks
// (the 8 B all_reduce twice), and a call to a switch cost it ~8 instructions (docs/bench/metrics.md).
inline size_t dtype_size(pstate_dtype_t dtype) {
  // pstate.h's order: int8 uint8 int32 uint32 int64 uint64 float16 float32 float64 bfloat16 fp8_e4m3 fp8_e5m2
  static constexpr unsigned char kSize[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  static_assert(sizeof(kSize) == PSTATE_DTYPE_COUNT, "a new dtype: add its size above");
  return static_cast<unsigned>(dtype) < PSTATE_DTYPE_COUNT ? kSize[dtype] : 0;
}
// Whether reductions take the dtype: every valid one but the fp8 types (move-only on CPU), which
// are the last two.
inline bool is_reducible(pstate_dtype_t dtype) {
  static_assert(PSTATE_FP8_E4M3 == PSTATE_DTYPE_COUNT - 2 && PSTATE_FP8_E5M2 == PSTATE_DTYPE_COUNT - 1,
                "the fp8 dtypes are no longer the last: is_reducible needs a table");
  return static_cast<unsigned>(dtype) < static_cast<unsigned>(PSTATE_FP8_E4M3);
}

// acc[i] = acc[i] op in[i] for i < count. op AVG accumulates like SUM.
void reduce_inplace(void *acc, const void *in, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op);
// out[i] = a[i] op b[i] (out may alias a or b).
void reduce_into(void *out, const void *a, const void *b, size_t count, pstate_dtype_t dtype,
                 pstate_reduce_op_t op);
// buf[i] /= divisor (after a SUM, for AVG).
void finish_avg(void *buf, size_t count, pstate_dtype_t dtype, int divisor);

// The kernel set chosen on this CPU ("avx512", "avx2", "scalar"), for logs and `pstate info`.
const char *reduce_kernel_name();

}  // namespace pstate
