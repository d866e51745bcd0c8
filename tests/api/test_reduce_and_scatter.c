/*
 * test_reduce_and_scatter.c — pstate_reduce and pstate_scatter through the public API, on real
 * processes: 1, 2, 3 and 4 ranks, over shared memory (PSTATE_SHM unset) and over UCX
 * (PSTATE_SHM=0).
 *
 * reduce: every reducible dtype x every op x counts 0, 1, 7 (odd), 1000 and 70001 (past the shared
 * memory's whole-input size and UCX's binomial/ring crossover, so every protocol and algorithm
 * runs), the root moving through every group rank as the cases go; then every root with the
 * in-place form (send == recv on the root). scatter: every dtype (fp8 included) x the same counts,
 * the root moving likewise; then every root with both in-place forms (recv == send + root *
 * recv_count, and recv == send). Off the root, the unused buffer (reduce's recv, scatter's send)
 * is NULL in half of the calls and a sentinel buffer in the other half, which must come back
 * untouched. Inputs are small integers, so every exact result is representable in every dtype
 * and the reference is computed here by walking the ranks; float AVG is compared with one
 * rounding's tolerance. The dlopen table's new members reach the same functions and work.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"
#include "values.h"

static const pstate_dtype_t kReducible[] = {PSTATE_INT8,  PSTATE_UINT8,   PSTATE_INT32,   PSTATE_UINT32,
                                            PSTATE_INT64, PSTATE_UINT64,  PSTATE_FLOAT16, PSTATE_FLOAT32,
                                            PSTATE_FLOAT64, PSTATE_BFLOAT16};
#define N_REDUCIBLE (sizeof kReducible / sizeof kReducible[0])
static const size_t kCounts[] = {0, 1, 7, 1000, 70001};
#define N_COUNTS (sizeof kCounts / sizeof kCounts[0])
#define MAX_COUNT 70001
#define SENTINEL 0x5a

typedef struct job_t {
  int ucx; /* 1: PSTATE_SHM=0 */
} job_t;

/* Inputs and references: tests/support/values.h (pstate_test_reduce_*). */

/* Element i of block j of a scatter root's send: a value of every dtype, fp8 too (bytes < 0x78
 * are finite in both fp8 formats, so they travel as any byte does). */
static uint8_t scatter_byte(int root, int block, size_t i) { return (uint8_t)((root * 31 + block * 7 + (int)i) % 0x78); }

static int untouched(const unsigned char *p, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != SENTINEL) return 0;
  return 1;
}

/* One reduce to root; off the root recv is NULL (odd `variant`) or a sentinel buffer. */
static int check_reduce(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d, pstate_reduce_op_t op,
                        size_t count, int root, int in_place, int variant, unsigned char *send, unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  const size_t es = pstate_dtype_size(d), bytes = count * es;
  for (size_t i = 0; i < count; ++i) pstate_test_store(d, send, i, pstate_test_reduce_input(d, op, me, i));
  memset(recv, SENTINEL, bytes + 8);
  const int is_root = me == root;
  void *out = is_root ? (in_place ? send : recv) : (variant % 2 ? NULL : recv);
  RANK_OK(self, pstate_reduce(g, send, out, count, d, op, root, NULL));
  if (!is_root) {
    RANK_CHECK(self, untouched(recv, bytes + 8), "reduce %s %s count %zu root %d: recv off the root was written",
               pstate_dtype_name(d), pstate_reduce_op_name(op), count, root);
    for (size_t i = 0; i < count; ++i) /* send is only read */
      RANK_CHECK(self, pstate_test_load(d, send, i) == pstate_test_reduce_input(d, op, me, i), "reduce: send changed off the root");
    return 0;
  }
  const unsigned char *result = in_place ? send : recv;
  for (size_t i = 0; i < count; ++i) {
    double got = pstate_test_load(d, result, i), want = pstate_test_reduce_reference(d, op, n, i);
    RANK_CHECK(self, pstate_test_reduce_close_enough(d, op, got, want), "reduce %s %s count %zu root %d%s [%zu]: got %g want %g",
               pstate_dtype_name(d), pstate_reduce_op_name(op), count, root, in_place ? " in place" : "", i, got, want);
  }
  if (!in_place) RANK_CHECK(self, untouched(recv + bytes, 8), "reduce wrote past recv");
  return 0;
}

/* form 0: separate recv; 1: recv == send + root * count on the root; 2: recv == send there. */
static int check_scatter(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d, size_t count, int root,
                         int form, int variant, unsigned char *send, unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  const size_t es = pstate_dtype_size(d), block = count * es;
  const int is_root = me == root;
  memset(send, SENTINEL, block * (size_t)n + 8);
  memset(recv, 0xee, block + 8);
  if (is_root)
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < block; ++i) send[(size_t)j * block + i] = scatter_byte(root, j, i);
  unsigned char *dst = recv;
  if (is_root && form == 1) dst = send + (size_t)root * block;
  if (is_root && form == 2) dst = send;
  const void *src = is_root ? send : (variant % 2 ? NULL : send);
  RANK_OK(self, pstate_scatter(g, src, dst, count, d, root, NULL));
  for (size_t i = 0; i < block; ++i)
    RANK_CHECK(self, dst[i] == scatter_byte(root, me, i), "scatter %s count %zu root %d form %d: byte %zu is %u, want %u",
               pstate_dtype_name(d), count, root, form, i, dst[i], scatter_byte(root, me, i));
  if (dst == recv) RANK_CHECK(self, recv[block] == 0xee, "scatter wrote past recv");
  if (!is_root) RANK_CHECK(self, untouched(send, block * (size_t)n + 8), "scatter: send off the root was written");
  if (is_root && form == 0)
    for (int j = 0; j < n; ++j) /* send is only read */
      for (size_t i = 0; i < block; ++i)
        RANK_CHECK(self, send[(size_t)j * block + i] == scatter_byte(root, j, i), "scatter: send changed on the root");
  return 0;
}

static int job_rank(const pstate_test_rank_t *self) {
  const job_t *job = self->arg;
  if (job->ucx) setenv("PSTATE_SHM", "0", 1);
  else unsetenv("PSTATE_SHM");
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const int n = self->world_size;
  unsigned char *send = malloc((size_t)MAX_COUNT * 8 * (size_t)n + 8), *recv = malloc((size_t)MAX_COUNT * 8 + 8);
  RANK_CHECK(self, send != NULL && recv != NULL, "malloc");
  int k = 0; /* case number: picks the root and the variant */
  for (size_t di = 0; di < N_REDUCIBLE; ++di)
    for (int op = 0; op < PSTATE_REDUCE_OP_COUNT; ++op)
      for (size_t ci = 0; ci < N_COUNTS; ++ci, ++k)
        if (check_reduce(self, g, kReducible[di], (pstate_reduce_op_t)op, kCounts[ci], k % n, 0, k / n, send, recv))
          return 1;
  for (int root = 0; root < n; ++root)
    for (size_t count = 7; count <= MAX_COUNT; count += MAX_COUNT - 7)
      for (int in_place = 0; in_place < 2; ++in_place, ++k) {
        if (check_reduce(self, g, PSTATE_FLOAT32, PSTATE_SUM, count, root, in_place, k, send, recv)) return 1;
        if (check_reduce(self, g, PSTATE_INT32, PSTATE_MAX, count, root, in_place, k + 1, send, recv)) return 1;
      }
  for (int d = 0; d < PSTATE_DTYPE_COUNT; ++d)
    for (size_t ci = 0; ci < N_COUNTS; ++ci, ++k)
      if (check_scatter(self, g, (pstate_dtype_t)d, kCounts[ci], k % n, 0, k / n, send, recv)) return 1;
  for (int root = 0; root < n; ++root)
    for (size_t count = 7; count <= MAX_COUNT; count += MAX_COUNT - 7)
      for (int form = 0; form < 3; ++form, ++k)
        if (check_scatter(self, g, PSTATE_INT64, count, root, form, k, send, recv)) return 1;

  /* The dlopen table reaches the same entry points, and they work through it. */
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  RANK_CHECK(self, api != NULL && api->struct_size >= offsetof(pstate_api_t, scatter) + sizeof api->scatter,
             "the table has no scatter member");
  RANK_CHECK(self, api->reduce == pstate_reduce && api->scatter == pstate_scatter, "table members differ");
  int32_t x = self->rank + 1, sum = -1, part[4] = {10, 11, 12, 13}, mine = -1;
  RANK_OK(self, api->reduce(g, &x, self->rank == n - 1 ? &sum : NULL, 1, PSTATE_INT32, PSTATE_SUM, n - 1, NULL));
  if (self->rank == n - 1) RANK_CHECK(self, sum == n * (n + 1) / 2, "reduce through the table: %d", sum);
  RANK_OK(self, api->scatter(g, self->rank == 0 ? part : NULL, &mine, 1, PSTATE_INT32, 0, NULL));
  RANK_CHECK(self, mine == 10 + self->rank, "scatter through the table: %d", mine);
  free(send);
  free(recv);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run_job(int world, int ucx) {
  job_t job = {ucx};
  assert_int_equal(pstate_test_run_processes(world, 120, job_rank, &job, NULL), 0);
}

static void test_reduce_and_scatter_1_rank(void **s) { (void)s; run_job(1, 0); }
static void test_reduce_and_scatter_2_ranks_shm(void **s) { (void)s; run_job(2, 0); }
static void test_reduce_and_scatter_2_ranks_ucx(void **s) { (void)s; run_job(2, 1); }
static void test_reduce_and_scatter_3_ranks_shm(void **s) { (void)s; run_job(3, 0); }
static void test_reduce_and_scatter_3_ranks_ucx(void **s) { (void)s; run_job(3, 1); }
static void test_reduce_and_scatter_4_ranks_shm(void **s) { (void)s; run_job(4, 0); }
static void test_reduce_and_scatter_4_ranks_ucx(void **s) { (void)s; run_job(4, 1); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_and_scatter_1_rank),      cmocka_unit_test(test_reduce_and_scatter_2_ranks_shm),
      cmocka_unit_test(test_reduce_and_scatter_2_ranks_ucx), cmocka_unit_test(test_reduce_and_scatter_3_ranks_shm),
      cmocka_unit_test(test_reduce_and_scatter_3_ranks_ucx), cmocka_unit_test(test_reduce_and_scatter_4_ranks_shm),
      cmocka_unit_test(test_reduce_and_scatter_4_ranks_ucx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
