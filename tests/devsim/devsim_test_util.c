/* devsim_test_util.c — see devsim_test_util.h. */
#include "devsim_test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "values.h"

pstate_status_t devsim_init(const pstate_test_rank_t *self, int64_t timeout_ms, pstate_t **out) {
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.init_method = self->init_method;
  p.rank = self->rank;
  p.world_size = self->world_size;
  p.local_rank = self->rank;
  p.timeout_ms = timeout_ms;
  p.device = PSTATE_DEVICE_CUDA;
  p.device_ordinal = -1;
  return pstate_init(&p, out);
}

static int is_fp8(pstate_dtype_t t) {
  return t == PSTATE_FP8_E4M3 || t == PSTATE_FP8_E5M2;
}

double devsim_input(pstate_reduce_op_t op, int rank, size_t i, pstate_dtype_t t) {
  if (op == PSTATE_PROD) return 1.0 + (double)(((size_t)rank + i) % 2);
  if (is_fp8(t)) return (double)(((size_t)rank + i) % 3);
  return (double)(((size_t)rank * 7 + i * 3) % 9);
}

double devsim_reduced(pstate_reduce_op_t op, int n, size_t i, pstate_dtype_t t) {
  double acc = devsim_input(op, 0, i, t);
  for (int r = 1; r < n; ++r) {
    double v = devsim_input(op, r, i, t);
    switch (op) {
      case PSTATE_PROD:
        acc *= v;
        break;
      case PSTATE_MAX:
        acc = v > acc ? v : acc;
        break;
      case PSTATE_MIN:
        acc = v < acc ? v : acc;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == PSTATE_AVG) acc = pstate_test_is_float(t) || is_fp8(t) ? acc / n : trunc(acc / n);
  return acc;
}

int devsim_close(pstate_dtype_t t, pstate_reduce_op_t op, double got, double want) {
  if (op != PSTATE_AVG || !(pstate_test_is_float(t) || is_fp8(t))) return got == want;
  double a = fabs(want), tol;
  switch (t) {
    case PSTATE_FLOAT16:
      tol = 4e-3 * a + 4e-3;
      break;
    case PSTATE_BFLOAT16:
      tol = 3e-2 * a + 3e-2;
      break;
    case PSTATE_FLOAT32:
      tol = 1e-5 * a + 1e-6;
      break;
    case PSTATE_FLOAT64:
      tol = 1e-12 * a + 1e-12;
      break;
    case PSTATE_FP8_E4M3:
      tol = 0.13 * a + 0.1;
      break;
    default:
      tol = 0.26 * a + 0.1;
      break; /* e5m2 */
  }
  return fabs(got - want) <= tol;
}

/* fp8: e4m3 (fn: no infinity) and e5m2, decoded by the formula; encoded by searching the 256
 * codes for the nearest value (inputs are small integers: always exact). */
static double fp8_decode(pstate_dtype_t t, uint8_t b) {
  int ebits = t == PSTATE_FP8_E4M3 ? 4 : 5, mbits = 7 - ebits, bias = (1 << (ebits - 1)) - 1;
  int s = b >> 7, e = (b >> mbits) & ((1 << ebits) - 1), m = b & ((1 << mbits) - 1);
  double v;
  if (t == PSTATE_FP8_E4M3 && e == 15 && m == 7) return NAN;
  if (t == PSTATE_FP8_E5M2 && e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
  if (e == 0)
    v = ldexp((double)m, 1 - bias - mbits);
  else
    v = ldexp(1.0 + ldexp((double)m, -mbits), e - bias);
  return s ? -v : v;
}

static uint8_t fp8_encode(pstate_dtype_t t, double v) {
  int best = 0;
  for (int b = 0; b < 256; ++b) {
    double d = fp8_decode(t, (uint8_t)b);
    if (!isnan(d) && fabs(d - v) < fabs(fp8_decode(t, (uint8_t)best) - v)) best = b;
  }
  return (uint8_t)best;
}

double devsim_load(pstate_dtype_t t, const void *buf, size_t i) {
  if (is_fp8(t)) return fp8_decode(t, ((const uint8_t *)buf)[i]);
  return pstate_test_load(t, buf, i);
}

void devsim_store(pstate_dtype_t t, void *buf, size_t i, double v) {
  if (is_fp8(t))
    ((uint8_t *)buf)[i] = fp8_encode(t, v);
  else
    pstate_test_store(t, buf, i, v);
}

void *devsim_device_copy(const void *host, size_t n) {
  void *d = NULL;
  if (cudaMalloc(&d, n == 0 ? 1 : n) != cudaSuccess) return NULL;
  if (host != NULL)
    cudaMemcpy(d, host, n, cudaMemcpyHostToDevice);
  else
    cudaMemset(d, 0xEE, n);
  return d;
}

int devsim_to_host(void *host, const void *dev, size_t n, cudaStream_t stream) {
  if (cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, stream) != cudaSuccess) return -1;
  return cudaStreamSynchronize(stream) == cudaSuccess ? 0 : -1;
}
