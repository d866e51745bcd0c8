// kernels.hpp — the kernel tables behind reduce.hpp and how one is chosen (internal to src/reduce/).
//
// A KernelTable holds, per dtype, one elementwise kernel per op (sum, prod, max, min; AVG reduces
// as SUM) and the AVG finishing kernel. The scalar table is complete and is the reference; the
// AVX2 and AVX-512 tables start as copies of it and replace the entries they vectorize, so every
// table answers every (dtype, op) and a missing SIMD kernel is never a missing feature.
//
// Semantics every table implements identically (bit for bit):
//   - integers: two's complement wrap-around for sum and prod; signed/unsigned compare for max/min.
//   - float32/float64: IEEE-754 binary ops, round to nearest even, subnormals kept, no FMA
//     (no kernel multiplies into an add, so -ffp-contract cannot change a result). This assumes
//     the default MXCSR; a process that sets FTZ/DAZ (e.g. a -ffast-math program) flushes
//     subnormals, and then does so on every path alike.
//   - float16/bfloat16: widen to float32 (exact), combine as float32, round back to nearest even.
//   - NaN rule: NaN propagates through every op, and every NaN a kernel produces is the canonical
//     positive quiet NaN of the dtype (0x7E00, 0x7FC0, 0x7FC00000, 0x7FF8000000000000), so the
//     bits never depend on operand order or on which NaN came first.
//   - max/min of +0 and -0 are +0 and -0 in either operand order (IEEE 754-2019 maximum/minimum).
//   - AVG finish: integers divide truncating toward zero; floats divide (x / n, not x * (1/n)).
//
// The tables are built once, are immutable afterwards, and are chosen once per process from the
// CPU (__builtin_cpu_supports) or from PSTATE_REDUCE_KERNEL=scalar|avx2|avx512 (tests).
#pragma once

#include <pstate/pstate.h>

#include <cstddef>

namespace pstate::reduce_detail {

using BinaryKernel = void (*)(void *out, const void *a, const void *b, size_t n);
using AvgKernel = void (*)(void *buf, size_t n, int divisor);

inline constexpr int kKernelOps = 4;  // PSTATE_SUM, PSTATE_PROD, PSTATE_MAX, PSTATE_MIN

struct KernelTable {
  const char *name;
  BinaryKernel binary[PSTATE_DTYPE_COUNT][kKernelOps];  // nullptr for move-only dtypes
  AvgKernel avg[PSTATE_DTYPE_COUNT];                    // nullptr for move-only dtypes
};

enum class KernelIsa { kScalar, kAvx2, kAvx512 };

// The table for isa, or nullptr when this CPU (or OS) cannot run it.
const KernelTable *kernel_table(KernelIsa isa);
// The best table for this CPU, or the one requested by name ("scalar", "avx2", "avx512"); an
// unknown or unsupported request falls back to the best one with a warning on stderr.
const KernelTable &choose_kernel_table(const char *request);
// The table every reduce_* call uses: choose_kernel_table(getenv("PSTATE_REDUCE_KERNEL")), once.
const KernelTable &active_kernel_table();

// Implemented by reduce_scalar.cpp / reduce_avx2.cpp / reduce_avx512.cpp. The fill functions
// overwrite entries of a copy of the scalar table; call them only when the CPU supports the ISA.
const KernelTable &scalar_kernel_table();
void fill_avx2_kernels(KernelTable &table);
void fill_avx512_kernels(KernelTable &table);

}  // namespace pstate::reduce_detail
