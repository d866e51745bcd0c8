/*
 * test_large_and_bitwise.c — big buffers (up to 64 MiB per rank) through every data path, and
 * bit-identical results on every rank for random floats (where the reduction order matters).
 *
 * Large: all_reduce of 64 MiB float32 (16 Mi elements, integer-valued so the sum is exact in any
 * order), bf16 with an odd count, reduce_scatter and all_gather of 16 MiB blocks, broadcast of
 * 64 MiB. Bitwise: random float32/bf16/fp16 all_reduce sums; each rank's result bytes are then
 * all-gathered and compared with rank 0's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"
#include "values.h"

static int large(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 120000, &ps));
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  int n = self->world_size, me = self->rank;

  size_t count = (size_t)16 << 20; /* 64 MiB of float32 */
  float *f = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) f[i] = (float)((i + (size_t)me) % 1000);
  RANK_OK(self, pstate_all_reduce(w, f, f, count, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += (double)((i + (size_t)r) % 1000);
    if (f[i] != (float)want) RANK_CHECK(self, 0, "64 MiB all_reduce [%zu] = %g want %g", i, f[i], want);
  }

  size_t bcount = ((size_t)1 << 20) + 3;
  uint16_t *b = malloc(bcount * 2);
  for (size_t i = 0; i < bcount; ++i) b[i] = pstate_test_f32_to_bf16((float)((i * 7 + (size_t)me) % 30));
  RANK_OK(self, pstate_all_reduce(w, b, b, bcount, PSTATE_BFLOAT16, PSTATE_SUM, NULL));
  for (size_t i = 0; i < bcount; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += (double)((i * 7 + (size_t)r) % 30);
    if (pstate_test_bf16_to_f32(b[i]) != (float)want) RANK_CHECK(self, 0, "bf16 all_reduce [%zu]", i);
  }

  size_t block = (size_t)4 << 20; /* 16 MiB of float32 per rank */
  float *rs_in = malloc(block * (size_t)n * sizeof(float)), *rs_out = malloc(block * sizeof(float));
  for (size_t i = 0; i < block * (size_t)n; ++i) rs_in[i] = (float)((i / 1024 + (size_t)me) % 50);
  RANK_OK(self, pstate_reduce_scatter(w, rs_in, rs_out, block, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  for (size_t i = 0; i < block; ++i) {
    size_t gi = (size_t)me * block + i;
    double want = 0;
    for (int r = 0; r < n; ++r) want += (double)((gi / 1024 + (size_t)r) % 50);
    if (rs_out[i] != (float)want) RANK_CHECK(self, 0, "16 MiB reduce_scatter [%zu]", i);
  }
  for (size_t i = 0; i < block; ++i) rs_out[i] = (float)(me * 3 + (int)(i % 97));
  RANK_OK(self, pstate_all_gather(w, rs_out, rs_in, block, PSTATE_FLOAT32, NULL));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < block; ++i)
      if (rs_in[(size_t)r * block + i] != (float)(r * 3 + (int)(i % 97))) RANK_CHECK(self, 0, "16 MiB all_gather");

  for (size_t i = 0; i < count; ++i) f[i] = me == n - 1 ? (float)(i % 4093) : -1.0f;
  RANK_OK(self, pstate_broadcast(w, f, count, PSTATE_FLOAT32, n - 1, NULL));
  for (size_t i = 0; i < count; ++i)
    if (f[i] != (float)(i % 4093)) RANK_CHECK(self, 0, "64 MiB broadcast [%zu]", i);

  free(f);
  free(b);
  free(rs_in);
  free(rs_out);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static uint32_t xorshift(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static int bitwise(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  static const pstate_dtype_t types[] = {PSTATE_FLOAT32, PSTATE_BFLOAT16, PSTATE_FLOAT16, PSTATE_FLOAT64};
  static const size_t counts[] = {5, 1001, 70001, 300007};
  int n = self->world_size;
  for (size_t t = 0; t < 4; ++t)
    for (size_t c = 0; c < 4; ++c) {
      pstate_dtype_t d = types[t];
      size_t count = counts[c], bytes = count * pstate_dtype_size(d);
      unsigned char *buf = malloc(bytes), *all = malloc(bytes * (size_t)n);
      uint32_t seed = 12345u + (uint32_t)self->rank * 7919u + (uint32_t)c;
      for (size_t i = 0; i < count; ++i)
        pstate_test_store(d, buf, i, ((double)(xorshift(&seed) % 2000000) - 1000000.0) / 3333.3);
      RANK_OK(self, pstate_all_reduce(w, buf, buf, count, d, PSTATE_SUM, NULL));
      RANK_OK(self, pstate_all_gather(w, buf, all, bytes, PSTATE_UINT8, NULL));
      for (int r = 1; r < n; ++r)
        RANK_CHECK(self, memcmp(all, all + (size_t)r * bytes, bytes) == 0,
                   "%s sum of %zu random values: rank %d's bits differ from rank 0's", pstate_dtype_name(d), count, r);
      free(buf);
      free(all);
    }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_large_buffers_up_to_64mib_two_ranks(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 300, large, NULL, NULL), 0);
}
static void test_large_buffers_up_to_64mib_three_ranks(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 300, large, NULL, NULL), 0);
}
static void test_random_float_sums_are_bit_identical_on_every_rank_3(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 300, bitwise, NULL, NULL), 0);
}
static void test_random_float_sums_are_bit_identical_on_every_rank_5(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(5, 300, bitwise, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_large_buffers_up_to_64mib_two_ranks),
      cmocka_unit_test(test_large_buffers_up_to_64mib_three_ranks),
      cmocka_unit_test(test_random_float_sums_are_bit_identical_on_every_rank_3),
      cmocka_unit_test(test_random_float_sums_are_bit_identical_on_every_rank_5),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
