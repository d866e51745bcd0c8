/*
 * devsim_test_util.h — what the devsim tests share: CUDA-context init, inputs and host
 * references for every dtype (fp8 included), device buffers, and a bounded stream wait.
 *
 * Inputs are small integers, so every reduction is exact in every dtype whatever the order, except
 * float AVG (NCCL multiplies each input by 1/n first), which compares with a per-dtype tolerance.
 * Written independently of libpstate and of the stand-ins.
 */
#ifndef PSTATE_DEVSIM_TEST_UTIL_H
#define PSTATE_DEVSIM_TEST_UTIL_H

#include <pstate/pstate.h>

#include <cuda_runtime_api.h>

#include <stddef.h>
#include <stdint.h>

#include "ranks.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pstate_init of a CUDA context for this test rank (device_ordinal -1: the local rank). */
pstate_status_t devsim_init(const pstate_test_rank_t *self, int64_t timeout_ms, pstate_t **out);

/* Element i of rank r's input for a collective with `op` (moves: PSTATE_SUM). */
double devsim_input(pstate_reduce_op_t op, int rank, size_t i, pstate_dtype_t t);
/* The reduction over ranks 0..n-1 of element i (AVG truncates for integers). */
double devsim_reduced(pstate_reduce_op_t op, int n, size_t i, pstate_dtype_t t);
/* Whether got is the expected value (exact, or within the float-AVG tolerance). */
int devsim_close(pstate_dtype_t t, pstate_reduce_op_t op, double got, double want);

double devsim_load(pstate_dtype_t t, const void *buf, size_t i);
void devsim_store(pstate_dtype_t t, void *buf, size_t i, double v);

/* cudaMalloc'ed device buffer of n bytes filled with host bytes (or 0xEE when host is NULL). */
void *devsim_device_copy(const void *host, size_t n);
/* Copies n device bytes to host through `stream` and waits for it (cudaStreamSynchronize). */
int devsim_to_host(void *host, const void *dev, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
