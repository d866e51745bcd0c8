// reduce.cpp — the public face of src/reduce/: argument checks, and the one-time choice of the
// kernel table (scalar, AVX2, AVX-512) from the CPU or PSTATE_REDUCE_KERNEL.
//
// The chosen table is a function-local constant computed on first use: immutable afterwards and
// identical for every pstate_t in the process, so it is not per-context state.
#include "reduce/reduce.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "reduce/kernels.hpp"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace pstate {

namespace reduce_detail {

namespace {

// F16C straight from CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

KernelTable build_avx2_table() {
  KernelTable t = scalar_kernel_table();
  t.name = "avx2";
  fill_avx2_kernels(t);
  return t;
}

KernelTable build_avx512_table() {
  KernelTable t = scalar_kernel_table();
  t.name = "avx512";
  fill_avx2_kernels(t);  // what AVX-512 does not vectorize keeps its AVX2 kernel
  fill_avx512_kernels(t);
  return t;
}

}  // namespace

const KernelTable *kernel_table(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kScalar:
      return &scalar_kernel_table();
    case KernelIsa::kAvx2: {
      if (!cpu_has_avx2()) return nullptr;
      static const KernelTable table = build_avx2_table();
      return &table;
    }
    case KernelIsa::kAvx512: {
      if (!cpu_has_avx512()) return nullptr;
      static const KernelTable table = build_avx512_table();
      return &table;
    }
  }
  return nullptr;
}

const KernelTable &choose_kernel_table(const char *request) {
  const KernelTable *best = kernel_table(KernelIsa::kAvx512);
  if (best == nullptr) best = kernel_table(KernelIsa::kAvx2);
  if (best == nullptr) best = kernel_table(KernelIsa::kScalar);
  if (request == nullptr || *request == '\0') return *best;

  const KernelTable *asked = nullptr;
  if (std::strcmp(request, "scalar") == 0) asked = kernel_table(KernelIsa::kScalar);
  else if (std::strcmp(request, "avx2") == 0) asked = kernel_table(KernelIsa::kAvx2);
  else if (std::strcmp(request, "avx512") == 0) asked = kernel_table(KernelIsa::kAvx512);
  else {
    Logger().warn("PSTATE_REDUCE_KERNEL=", request, " is not one of scalar, avx2, avx512; using ", best->name);
    return *best;
  }
  if (asked == nullptr) {
    Logger().warn("PSTATE_REDUCE_KERNEL=", request, " is not supported by this CPU; using ", best->name);
    return *best;
  }
  return *asked;
}

const KernelTable &active_kernel_table() {
  static const KernelTable &table = choose_kernel_table(std::getenv("PSTATE_REDUCE_KERNEL"));
  return table;
}

}  // namespace reduce_detail

namespace {

using reduce_detail::active_kernel_table;

void require_reducible(pstate_dtype_t dtype, const char *what) {
  if (dtype_size(dtype) == 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, ": dtype ", static_cast<int>(dtype), " is not a pstate_dtype_t");
  if (!is_reducible(dtype))
    throw_error(PSTATE_ERR_UNSUPPORTED, what, ": ", pstate_dtype_name(dtype),
                " is move-only on CPU (no reductions); convert to float16/bfloat16/float32 first");
}

reduce_detail::BinaryKernel binary_kernel(pstate_dtype_t dtype, pstate_reduce_op_t op, const char *what) {
  require_reducible(dtype, what);
  int index = static_cast<int>(op);
  if (op == PSTATE_AVG) index = PSTATE_SUM;  // AVG accumulates as SUM; finish_avg divides
  if (index < 0 || index >= reduce_detail::kKernelOps)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, ": op ", static_cast<int>(op), " is not a pstate_reduce_op_t");
  return active_kernel_table().binary[dtype][index];
}

}  // namespace

void reduce_inplace(void *acc, const void *in, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op) {
  reduce_into(acc, acc, in, count, dtype, op);
}

void reduce_into(void *out, const void *a, const void *b, size_t count, pstate_dtype_t dtype,
                 pstate_reduce_op_t op) {
  auto kernel = binary_kernel(dtype, op, "reduce");
  if (count != 0) kernel(out, a, b, count);
}

void finish_avg(void *buf, size_t count, pstate_dtype_t dtype, int divisor) {
  require_reducible(dtype, "avg");
  if (divisor <= 0) throw_error(PSTATE_ERR_INTERNAL, "avg: divisor ", divisor, " must be a positive group size");
  if (count != 0) active_kernel_table().avg[dtype](buf, count, divisor);
}

const char *reduce_kernel_name() { return active_kernel_table().name; }

}  // namespace pstate
