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

bool is_reducible(pstate_dtype_t dtype);
size_t dtype_size(pstate_dtype_t dtype);  // 0 for an invalid dtype

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
