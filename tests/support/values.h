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

#ifdef __cplusplus
}
#endif

#endif
