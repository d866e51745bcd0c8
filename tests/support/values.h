/*
 * values.h — element access for every pstate dtype, written independently of the library's
 * reduce kernels so tests can compute reference results themselves: load/store through double,
 * with the test's own float16/bfloat16 conversions (round to nearest even).
 */
#ifndef PSTATE_TEST_VALUES_H
#define PSTATE_TEST_VALUES_H

#include <pstate/pstate.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

double pstate_test_load(pstate_dtype_t dtype, const void *buf, size_t i);
void pstate_test_store(pstate_dtype_t dtype, void *buf, size_t i, double v);
uint16_t pstate_test_f32_to_f16(float f);
float pstate_test_f16_to_f32(uint16_t h);
uint16_t pstate_test_f32_to_bf16(float f);
float pstate_test_bf16_to_f32(uint16_t h);
int pstate_test_is_float(pstate_dtype_t dtype);
int pstate_test_is_signed(pstate_dtype_t dtype);

/* The reduction tests' inputs and references (test_collectives, test_reduce_and_scatter,
 * test_gatherv): group rank r's element i for a reduction with op, small integers every dtype
 * holds exactly (PROD: 1s and a few 2s; MAX/MIN: negative too where the dtype has them); the
 * reduction of ranks 0..n-1 computed in double (AVG: divided once, integers floored); and whether
 * a result read back is that reference (exact, but for float AVG within the dtype's rounding). */
double pstate_test_reduce_input(pstate_dtype_t dtype, pstate_reduce_op_t op, int rank, size_t i);
double pstate_test_reduce_reference(pstate_dtype_t dtype, pstate_reduce_op_t op, int n, size_t i);
int pstate_test_reduce_close_enough(pstate_dtype_t dtype, pstate_reduce_op_t op, double got, double want);

#ifdef __cplusplus
}
#endif

#endif
