/* values.c — see values.h. Conversions are bit manipulation written for the tests. */
#include "values.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t pstate_test_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return (uint16_t)(u >> 16);
}
float pstate_test_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* float -> half via exact arithmetic: scale into the half grid with ldexp and round with rint
 * (the FPU's default round-to-nearest-even), which avoids duplicating the library's bit tricks. */
uint16_t pstate_test_f32_to_f16(float f) {
  uint16_t sign = (f32_bits(f) >> 16) & 0x8000u;
  float a = fabsf(f);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
  if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u); /* overflow rounds to inf */
  if (a < 6.103515625e-05f) {                             /* subnormal: units of 2^-24 */
    double m = rint((double)a * 16777216.0);
    return (uint16_t)(sign | (uint16_t)m);
  }
  int e;
  frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  double mant = rint(ldexp((double)a, 11 - e)); /* 11 significant bits */
  if (mant >= 2048.0) {
    mant /= 2.0;
    e += 1;
  }
  int exp_field = e - 1 + 15;
  if (exp_field >= 31) return (uint16_t)(sign | 0x7c00u);
  return (uint16_t)(sign | (uint16_t)(exp_field << 10) | ((uint16_t)mant & 0x3ffu));
}

float pstate_test_f16_to_f32(uint16_t h) {
  int sign = (h & 0x8000u) ? -1 : 1;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  if (exp == 0) return (float)(sign * ldexp((double)mant, -24));
  if (exp == 31) return mant ? NAN : (float)sign * INFINITY;
  return (float)(sign * ldexp((double)(mant | 0x400), exp - 25));
}

int pstate_test_is_float(pstate_dtype_t d) {
  return d == PSTATE_FLOAT16 || d == PSTATE_FLOAT32 || d == PSTATE_FLOAT64 || d == PSTATE_BFLOAT16;
}
int pstate_test_is_signed(pstate_dtype_t d) { return d == PSTATE_INT8 || d == PSTATE_INT32 || d == PSTATE_INT64; }

double pstate_test_load(pstate_dtype_t dtype, const void *buf, size_t i) {
  switch (dtype) {
    case PSTATE_INT8: return ((const int8_t *)buf)[i];
    case PSTATE_UINT8: case PSTATE_FP8_E4M3: case PSTATE_FP8_E5M2: return ((const uint8_t *)buf)[i];
    case PSTATE_INT32: return ((const int32_t *)buf)[i];
    case PSTATE_UINT32: return ((const uint32_t *)buf)[i];
    case PSTATE_INT64: return (double)((const int64_t *)buf)[i];
    case PSTATE_UINT64: return (double)((const uint64_t *)buf)[i];
    case PSTATE_FLOAT16: return pstate_test_f16_to_f32(((const uint16_t *)buf)[i]);
    case PSTATE_BFLOAT16: return pstate_test_bf16_to_f32(((const uint16_t *)buf)[i]);
    case PSTATE_FLOAT32: return ((const float *)buf)[i];
    case PSTATE_FLOAT64: return ((const double *)buf)[i];
  }
  return 0;
}

void pstate_test_store(pstate_dtype_t dtype, void *buf, size_t i, double v) {
  switch (dtype) {
    case PSTATE_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case PSTATE_UINT8: case PSTATE_FP8_E4M3: case PSTATE_FP8_E5M2: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case PSTATE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case PSTATE_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case PSTATE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case PSTATE_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case PSTATE_FLOAT16: ((uint16_t *)buf)[i] = pstate_test_f32_to_f16((float)v); break;
    case PSTATE_BFLOAT16: ((uint16_t *)buf)[i] = pstate_test_f32_to_bf16((float)v); break;
    case PSTATE_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case PSTATE_FLOAT64: ((double *)buf)[i] = v; break;
  }
}

double pstate_test_reduce_input(pstate_dtype_t d, pstate_reduce_op_t op, int r, size_t i) {
  switch (op) {
    case PSTATE_PROD:
      return ((i + (size_t)r) % 5 == 0) ? 2.0 : 1.0;
    case PSTATE_MAX:
    case PSTATE_MIN: {
      int v = (int)((r * 5 + (int)(i % 1000) * 3) % 17);
      return pstate_test_is_signed(d) || pstate_test_is_float(d) ? v - 8 : v;
    }
    default:
      return (double)((r * 7 + (int)(i % 1000) * 3) % 16);
  }
}

double pstate_test_reduce_reference(pstate_dtype_t d, pstate_reduce_op_t op, int n, size_t i) {
  double acc = pstate_test_reduce_input(d, op, 0, i);
  for (int k = 1; k < n; ++k) {
    double v = pstate_test_reduce_input(d, op, k, i);
    if (op == PSTATE_SUM || op == PSTATE_AVG)
      acc += v;
    else if (op == PSTATE_PROD)
      acc *= v;
    else if (op == PSTATE_MAX)
      acc = v > acc ? v : acc;
    else
      acc = v < acc ? v : acc;
  }
  if (op == PSTATE_AVG) acc = pstate_test_is_float(d) ? acc / n : floor(acc / n);
  return acc;
}

int pstate_test_reduce_close_enough(pstate_dtype_t d, pstate_reduce_op_t op, double got, double want) {
  if (op != PSTATE_AVG || !pstate_test_is_float(d)) return got == want;
  double rel = d == PSTATE_BFLOAT16 ? 1.0 / 128 : d == PSTATE_FLOAT16 ? 1.0 / 1024 : d == PSTATE_FLOAT32 ? 1e-6 : 1e-12;
  return fabs(got - want) <= fabs(want) * rel + 1e-30;
}
