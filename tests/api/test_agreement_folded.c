/*
 * test_agreement_folded.c — small collectives folded into the agreement exchange on UCX groups
 * (issue 30 item 3; src/coll/agreement_exchange.hpp), on real processes with PSTATE_SHM=0 at 2,
 * 3 and 4 ranks.
 *
 * On a UCX group an all_reduce, all_gather, reduce or broadcast of at most a few KiB per rank
 * (4096 bytes for groups of up to 8 ranks) sends its data inside each rank's agreement record
 * and finishes locally; larger calls exchange bare descriptors and then run their algorithm.
 * Both paths are checked here at counts around that threshold (T - 1 element, T, T + 1 element,
 * and small ones), for every reducible dtype and op (all_reduce; reduce and the data movers for a
 * few dtypes), in place and out of place, every root. References are computed here from the
 * inputs (tests/support/values.h), never by pstate. Then:
 *   - the folded result's bits: float32 sums of inexact values equal, bit for bit, the test's own
 *     evaluation of the documented order (recursive doubling's balanced tree: p=2 x0+x1, p=3
 *     (x0+x1)+x2, p=4 (x0+x1)+(x2+x3)), on every rank, folded and unfolded alike;
 *   - mismatches, each on every rank -> PSTATE_ERR_MISMATCH, recv untouched, and the context
 *     still usable (a correct all_reduce right after): folded calls of different counts; a
 *     folded call against an unfolded one (count past T); folded all_reduce against a barrier,
 *     against a folded broadcast, against a folded all_gather of the same count, and against a
 *     reduce; a broadcast whose ranks name different roots (both folded);
 *   - a barrier (the exchange alone) and a zero-count all_reduce still work between them.
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

#define T_BYTES 4096 /* the library's fold threshold for groups of up to 8 ranks */
#define MAX_BYTES (T_BYTES + 64)
#define MAX_RANKS 4
#define SENTINEL 0x5a

static const pstate_dtype_t kReducible[] = {PSTATE_INT8,  PSTATE_UINT8,   PSTATE_INT32,   PSTATE_UINT32,
                                            PSTATE_INT64, PSTATE_UINT64,  PSTATE_FLOAT16, PSTATE_FLOAT32,
                                            PSTATE_FLOAT64, PSTATE_BFLOAT16};
#define N_REDUCIBLE (sizeof kReducible / sizeof kReducible[0])

static int untouched(const unsigned char *p, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != SENTINEL) return 0;
  return 1;
}

/* Counts around the threshold for a dtype of es bytes, and small ones. */
static size_t counts_for(size_t es, size_t out[5]) {
  const size_t t = T_BYTES / es;
  out[0] = 1;
  out[1] = 3;
  out[2] = t - 1;
  out[3] = t;
  out[4] = t + 1;
  return 5;
}

/* send holds this rank's reduce inputs, recv and 8 bytes past it the sentinel. */
static void fill_reduce_inputs(pstate_dtype_t d, pstate_reduce_op_t op, int me, size_t count, unsigned char *send,
                               unsigned char *recv) {
  for (size_t i = 0; i < count; ++i) pstate_test_store(d, send, i, pstate_test_reduce_input(d, op, me, i));
  memset(recv, SENTINEL, count * pstate_dtype_size(d) + 8);
}

static int check_all_reduce(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d, pstate_reduce_op_t op,
                            size_t count, int in_place, unsigned char *send, unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  const size_t bytes = count * pstate_dtype_size(d);
  fill_reduce_inputs(d, op, me, count, send, recv);
  unsigned char *out = in_place ? send : recv;
  RANK_OK(self, pstate_all_reduce(g, send, out, count, d, op, NULL));
  for (size_t i = 0; i < count; ++i) {
    double got = pstate_test_load(d, out, i), want = pstate_test_reduce_reference(d, op, n, i);
    RANK_CHECK(self, pstate_test_reduce_close_enough(d, op, got, want), "all_reduce %s %s count %zu%s [%zu]: got %g want %g",
               pstate_dtype_name(d), pstate_reduce_op_name(op), count, in_place ? " in place" : "", i, got, want);
  }
  if (!in_place) {
    RANK_CHECK(self, untouched(recv + bytes, 8), "all_reduce wrote past recv");
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(self, pstate_test_load(d, send, i) == pstate_test_reduce_input(d, op, me, i), "all_reduce changed send");
  }
  return 0;
}

static int check_reduce(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d, pstate_reduce_op_t op,
                        size_t count, int root, unsigned char *send, unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  const size_t bytes = count * pstate_dtype_size(d);
  fill_reduce_inputs(d, op, me, count, send, recv);
  RANK_OK(self, pstate_reduce(g, send, recv, count, d, op, root, NULL));
  if (me != root) {
    RANK_CHECK(self, untouched(recv, bytes + 8), "reduce %zu root %d: recv written off the root", count, root);
    return 0;
  }
  for (size_t i = 0; i < count; ++i) {
    double got = pstate_test_load(d, recv, i), want = pstate_test_reduce_reference(d, op, n, i);
    RANK_CHECK(self, pstate_test_reduce_close_enough(d, op, got, want), "reduce %s %s count %zu root %d [%zu]: got %g want %g",
               pstate_dtype_name(d), pstate_reduce_op_name(op), count, root, i, got, want);
  }
  RANK_CHECK(self, untouched(recv + bytes, 8), "reduce wrote past recv");
  return 0;
}

static uint8_t data_byte(int r, int call, size_t j) { return (uint8_t)((r * 31 + call * 7 + (int)j) % 251); }

static int check_movers(const pstate_test_rank_t *self, pstate_group_t *g, size_t bytes, int call, unsigned char *send,
                        unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  for (size_t j = 0; j < bytes; ++j) send[j] = data_byte(me, call, j);
  memset(recv, SENTINEL, (size_t)n * bytes + 8);
  RANK_OK(self, pstate_all_gather(g, send, recv, bytes, PSTATE_UINT8, NULL));
  for (int r = 0; r < n; ++r)
    for (size_t j = 0; j < bytes; ++j)
      RANK_CHECK(self, recv[(size_t)r * bytes + j] == data_byte(r, call, j), "all_gather %zu B: block %d byte %zu", bytes,
                 r, j);
  RANK_CHECK(self, untouched(recv + (size_t)n * bytes, 8), "all_gather wrote past recv");
  /* in place: this rank's block already in recv */
  memset(recv, SENTINEL, (size_t)n * bytes);
  for (size_t j = 0; j < bytes; ++j) recv[(size_t)me * bytes + j] = data_byte(me, call + 1, j);
  RANK_OK(self, pstate_all_gather(g, recv + (size_t)me * bytes, recv, bytes, PSTATE_UINT8, NULL));
  for (int r = 0; r < n; ++r)
    for (size_t j = 0; j < bytes; ++j)
      RANK_CHECK(self, recv[(size_t)r * bytes + j] == data_byte(r, call + 1, j), "all_gather in place %zu B", bytes);
  for (int root = 0; root < n; ++root) {
    for (size_t j = 0; j < bytes; ++j) recv[j] = me == root ? data_byte(root, call + 2, j) : SENTINEL;
    recv[bytes] = SENTINEL;
    RANK_OK(self, pstate_broadcast(g, recv, bytes, PSTATE_UINT8, root, NULL));
    for (size_t j = 0; j < bytes; ++j)
      RANK_CHECK(self, recv[j] == data_byte(root, call + 2, j), "broadcast %zu B root %d: byte %zu", bytes, root, j);
    RANK_CHECK(self, recv[bytes] == SENTINEL, "broadcast wrote past buf");
  }
  return 0;
}

static float inexact(int r, size_t i) { return 0.1f * (float)(r + 1) + 1.0e-3f * (float)i + 1.0f / (float)(3 + r); }

/* The documented order's float32 sum of group ranks 0..n-1 (n = 2, 3, 4). */
static float tree_sum(int n, size_t i) {
  float x[MAX_RANKS];
  for (int r = 0; r < n; ++r) x[r] = inexact(r, i);
  if (n == 2) return x[0] + x[1];
  if (n == 3) {
    float a = x[0] + x[1];
    return a + x[2];
  }
  float a = x[0] + x[1], b = x[2] + x[3];
  return a + b;
}

static int check_bits(const pstate_test_rank_t *self, pstate_group_t *g, size_t count) {
  float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
  RANK_CHECK(self, in != NULL && out != NULL, "malloc");
  for (size_t i = 0; i < count; ++i) in[i] = inexact(self->rank, i);
  RANK_OK(self, pstate_all_reduce(g, in, out, count, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  for (size_t i = 0; i < count; ++i) {
    const float want = tree_sum(self->world_size, i);
    RANK_CHECK(self, memcmp(&out[i], &want, sizeof want) == 0, "float32 sum count %zu [%zu]: got %.9g want %.9g bit for bit",
               count, i, (double)out[i], (double)want);
  }
  free(in);
  free(out);
  return 0;
}

/* A call that must fail with MISMATCH on this rank, leaving recv untouched. */
#define EXPECT_MISMATCH(self, what, call, recv, bytes)                                                        \
  do {                                                                                                        \
    memset((recv), SENTINEL, (bytes));                                                                        \
    pstate_status_t s_ = (call);                                                                              \
    RANK_CHECK(self, s_ == PSTATE_ERR_MISMATCH, "%s: got %s (%s), want MISMATCH", what, pstate_status_string(s_), \
               pstate_last_error());                                                                          \
    RANK_CHECK(self, untouched((recv), (bytes)), "%s: recv was written", what);                             \
  } while (0)

/* The context is usable after a mismatch: a correct all_reduce gives the right sum. */
static int still_usable(const pstate_test_rank_t *self, pstate_group_t *g, const char *after) {
  int32_t x = self->rank + 1, sum = -1;
  RANK_OK(self, pstate_all_reduce(g, &x, &sum, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, sum == self->world_size * (self->world_size + 1) / 2, "after %s: sum %d", after, sum);
  return 0;
}

static int check_mismatches(const pstate_test_rank_t *self, pstate_group_t *g, unsigned char *send,
                            unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  const size_t big = (size_t)n * MAX_BYTES + 8;
  memset(send, 1, MAX_BYTES);
  /* folded calls of different counts */
  EXPECT_MISMATCH(self, "folded counts 4 vs 5", pstate_all_reduce(g, send, recv, me == 0 ? 5 : 4, PSTATE_INT32,
                                                                  PSTATE_SUM, NULL), recv, big);
  if (still_usable(self, g, "counts 4 vs 5")) return 1;
  /* folded against unfolded: T bytes against T + 4 */
  EXPECT_MISMATCH(self, "folded vs unfolded",
                  pstate_all_reduce(g, send, recv, me == n - 1 ? T_BYTES / 4 + 1 : T_BYTES / 4, PSTATE_INT32, PSTATE_SUM,
                                    NULL),
                  recv, big);
  if (still_usable(self, g, "folded vs unfolded")) return 1;
  /* folded all_reduce against a barrier */
  memset(recv, SENTINEL, big);
  pstate_status_t s = me == 0 ? pstate_barrier(g) : pstate_all_reduce(g, send, recv, 2, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "all_reduce vs barrier: %s (%s)", pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, untouched(recv, big), "all_reduce vs barrier: recv written");
  if (still_usable(self, g, "all_reduce vs barrier")) return 1;
  /* folded all_reduce against a folded broadcast from rank 0 (its record carries data, theirs not) */
  EXPECT_MISMATCH(self, "all_reduce vs broadcast",
                  me == 1 ? pstate_all_reduce(g, send, recv, 16, PSTATE_UINT8, PSTATE_SUM, NULL)
                          : pstate_broadcast(g, recv, 16, PSTATE_UINT8, 0, NULL),
                  recv, (me == 0 ? 0 : big));
  if (still_usable(self, g, "all_reduce vs broadcast")) return 1;
  /* folded all_reduce against a folded all_gather of the same count */
  EXPECT_MISMATCH(self, "all_reduce vs all_gather",
                  me == n - 1 ? pstate_all_gather(g, send, recv, 8, PSTATE_UINT8, NULL)
                              : pstate_all_reduce(g, send, recv, 8, PSTATE_UINT8, PSTATE_SUM, NULL),
                  recv, big);
  if (still_usable(self, g, "all_reduce vs all_gather")) return 1;
  /* folded all_reduce against a reduce to rank 0 */
  EXPECT_MISMATCH(self, "all_reduce vs reduce",
                  me == 1 ? pstate_reduce(g, send, recv, 8, PSTATE_UINT8, PSTATE_SUM, 0, NULL)
                          : pstate_all_reduce(g, send, recv, 8, PSTATE_UINT8, PSTATE_SUM, NULL),
                  recv, big);
  if (still_usable(self, g, "all_reduce vs reduce")) return 1;
  /* broadcast whose ranks name different roots: two records carry data, or none */
  for (size_t j = 0; j < 16; ++j) recv[j] = SENTINEL;
  s = pstate_broadcast(g, recv, 16, PSTATE_UINT8, me == 0 ? 1 : 0, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "broadcast roots differ: %s (%s)", pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, untouched(recv, 16), "broadcast roots differ: buf written");
  if (still_usable(self, g, "broadcast roots differ")) return 1;
  return 0;
}

static int job_rank(const pstate_test_rank_t *self) {
  setenv("PSTATE_SHM", "0", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const int n = self->world_size;
  unsigned char *send = malloc(MAX_BYTES + 8), *recv = malloc((size_t)n * MAX_BYTES + 8);
  RANK_CHECK(self, send != NULL && recv != NULL, "malloc");
  int k = 0;
  for (size_t di = 0; di < N_REDUCIBLE; ++di) {
    const pstate_dtype_t d = kReducible[di];
    size_t counts[5];
    const size_t nc = counts_for(pstate_dtype_size(d), counts);
    for (int op = 0; op < PSTATE_REDUCE_OP_COUNT; ++op)
      for (size_t ci = 0; ci < nc; ++ci, ++k)
        if (check_all_reduce(self, g, d, (pstate_reduce_op_t)op, counts[ci], k % 3 == 0, send, recv)) return 1;
  }
  RANK_OK(self, pstate_barrier(g));
  RANK_OK(self, pstate_all_reduce(g, send, recv, 0, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  const pstate_dtype_t some[] = {PSTATE_FLOAT32, PSTATE_BFLOAT16, PSTATE_INT64};
  for (size_t di = 0; di < 3; ++di) {
    size_t counts[5];
    const size_t nc = counts_for(pstate_dtype_size(some[di]), counts);
    for (int op = 0; op < PSTATE_REDUCE_OP_COUNT; ++op)
      for (size_t ci = 0; ci < nc; ++ci, ++k)
        if (check_reduce(self, g, some[di], (pstate_reduce_op_t)op, counts[ci], k % n, send, recv)) return 1;
  }
  const size_t sizes[] = {1, 13, T_BYTES - 1, T_BYTES, T_BYTES + 1};
  for (size_t si = 0; si < 5; ++si)
    if (check_movers(self, g, sizes[si], (int)si * 3, send, recv)) return 1;
  RANK_OK(self, pstate_barrier(g));
  if (check_bits(self, g, 5) || check_bits(self, g, T_BYTES / 4) || check_bits(self, g, T_BYTES / 4 + 1)) return 1;
  if (check_mismatches(self, g, send, recv)) return 1;
  free(send);
  free(recv);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run_job(int world) { assert_int_equal(pstate_test_run_processes(world, 120, job_rank, NULL, NULL), 0); }

static void test_agreement_folded_2_ranks_ucx(void **s) { (void)s; run_job(2); }
static void test_agreement_folded_3_ranks_ucx(void **s) { (void)s; run_job(3); }
static void test_agreement_folded_4_ranks_ucx(void **s) { (void)s; run_job(4); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_agreement_folded_2_ranks_ucx),
      cmocka_unit_test(test_agreement_folded_3_ranks_ucx),
      cmocka_unit_test(test_agreement_folded_4_ranks_ucx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
