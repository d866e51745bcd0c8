// test_shm_reduce_stub.hpp — TEMPORARY stand-in for src/reduce/ so the shm tests link before the
// real kernels land. Delete this file and its #include lines once src/reduce/*.cpp is merged
// (it disables itself when it sees a src/reduce/reduce*.cpp on the include path).
//
// It implements src/reduce/reduce.hpp element by element with the tests' own reference
// arithmetic, so until the real kernels arrive the shm tests prove the shared-memory algorithms
// (placement, ordering, bit identity), not the kernels. It is never part of libpstate.
#pragma once

#if !__has_include("reduce/reduce.cpp") && !__has_include("reduce/reduce_scalar.cpp") && \
    !__has_include("reduce/reduce_dispatch.cpp") && !__has_include("reduce/reduce_kernels.cpp")

#include "reduce/reduce.hpp"
#include "test_shm_util.hpp"

namespace pstate {

bool is_reducible(pstate_dtype_t dtype) {
  return dtype >= PSTATE_INT8 && dtype <= PSTATE_BFLOAT16;
}

size_t dtype_size(pstate_dtype_t dtype) { return shmtest::esize_of(dtype); }

void reduce_inplace(void *acc, const void *in, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op) {
  size_t n = dtype_size(dtype);
  auto *a = static_cast<uint8_t *>(acc);
  auto *b = static_cast<const uint8_t *>(in);
  if (dtype == PSTATE_FLOAT32 && op == PSTATE_SUM) {  // keep the 64 MiB tests quick
    auto *fa = static_cast<float *>(acc);
    auto *fb = static_cast<const float *>(in);
    for (size_t i = 0; i < count; ++i) fa[i] += fb[i];
    return;
  }
  for (size_t i = 0; i < count; ++i) shmtest::ref_fold(dtype, op, a + i * n, b + i * n);
}

void reduce_into(void *out, const void *a, const void *b, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op) {
  if (dtype == PSTATE_FLOAT32 && op == PSTATE_SUM) {  // one pass, like the real kernels
    auto *o = static_cast<float *>(out);
    auto *fa = static_cast<const float *>(a);
    auto *fb = static_cast<const float *>(b);
    for (size_t i = 0; i < count; ++i) o[i] = fa[i] + fb[i];
    return;
  }
  size_t bytes = count * dtype_size(dtype);
  std::vector<uint8_t> b_copy;
  if (out == b && out != a) {  // b is about to be overwritten by a
    b_copy.assign(static_cast<const uint8_t *>(b), static_cast<const uint8_t *>(b) + bytes);
    b = b_copy.data();
  }
  if (out != a) std::memmove(out, a, bytes);
  reduce_inplace(out, b, count, dtype, op);
}

void finish_avg(void *buf, size_t count, pstate_dtype_t dtype, int divisor) {
  size_t n = dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) shmtest::ref_divide(dtype, static_cast<uint8_t *>(buf) + i * n, divisor);
}

const char *reduce_kernel_name() { return "shm-test-stub"; }

}  // namespace pstate

#endif
