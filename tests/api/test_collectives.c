/*
 * test_collectives.c — every collective on every group kind, real processes over UCX.
 *
 * For each layout below, world_size processes start (tests/support/ranks.c), initialize model
 * parallel, and on every group kind that exists run: all_reduce (every reducible dtype x every
 * op, counts 0/1/7/1000, in and out of place), all_gather (every dtype incl. fp8), reduce_scatter,
 * broadcast and gather from every root, all_to_all, send/recv pairs, the three object operations
 * with sizes that differ per rank (0 included), and barrier. Inputs are small integers chosen so
 * every exact result is representable in every dtype (bf16 holds integers up to 256 exactly);
 * the reference is computed here by walking the group's ranks. AVG is compared with a stated
 * tolerance (one rounding of sum/n in the dtype).
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
static const size_t kCounts[] = {0, 1, 7, 1000};
#define N_COUNTS (sizeof kCounts / sizeof kCounts[0])

static double reference(pstate_dtype_t d, pstate_reduce_op_t op, const int *ranks, int n, size_t i) {
  double acc = pstate_test_reduce_input(d, op, ranks[0], i);
  for (int k = 1; k < n; ++k) {
    double v = pstate_test_reduce_input(d, op, ranks[k], i);
    if (op == PSTATE_SUM || op == PSTATE_AVG) acc += v;
    else if (op == PSTATE_PROD) acc *= v;
    else if (op == PSTATE_MAX) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  if (op == PSTATE_AVG) acc = pstate_test_is_float(d) ? acc / n : floor(acc / n);
  return acc;
}

static double avg_tolerance(pstate_dtype_t d, double want) {
  double rel = d == PSTATE_BFLOAT16 ? 1.0 / 128 : d == PSTATE_FLOAT16 ? 1.0 / 1024 : d == PSTATE_FLOAT32 ? 1e-6 : 1e-12;
  return fabs(want) * rel + 1e-30;
}

typedef struct layout_case_t {
  int world;
  int tp, pp, ep, attn_dp, attn_cp, moe_dp, dcp, shared;
} layout_case_t;

static int check_all_reduce(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n,
                            const char *name) {
  unsigned char *send = malloc(1000 * 8), *recv = malloc(1000 * 8);
  for (size_t di = 0; di < N_REDUCIBLE; ++di) {
    pstate_dtype_t d = kReducible[di];
    for (int op = 0; op < PSTATE_REDUCE_OP_COUNT; ++op) {
      for (size_t ci = 0; ci < N_COUNTS; ++ci) {
        size_t count = kCounts[ci];
        int in_place = (ci + (size_t)op) % 2 == 0;
        for (size_t i = 0; i < count; ++i) pstate_test_store(d, send, i, pstate_test_reduce_input(d, op, self->rank, i));
        if (in_place) memcpy(recv, send, count * pstate_dtype_size(d));
        RANK_OK(self, pstate_all_reduce(g, in_place ? recv : send, recv, count, d, op, NULL));
        for (size_t i = 0; i < count; ++i) {
          double want = reference(d, op, ranks, n, i), got = pstate_test_load(d, recv, i);
          int ok = op == PSTATE_AVG && pstate_test_is_float(d) ? fabs(got - want) <= avg_tolerance(d, want) : got == want;
          RANK_CHECK(self, ok, "%s all_reduce %s %s count %zu%s [%zu]: got %g want %g", name, pstate_dtype_name(d),
                     pstate_reduce_op_name(op), count, in_place ? " in place" : "", i, got, want);
        }
      }
    }
  }
  free(send);
  free(recv);
  return 0;
}

static int check_all_gather(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n,
                            const char *name) {
  for (int d = 0; d < PSTATE_DTYPE_COUNT; ++d) {
    for (size_t ci = 0; ci < N_COUNTS; ++ci) {
      size_t count = kCounts[ci], es = pstate_dtype_size(d);
      unsigned char *send = malloc(count * es + 1), *recv = malloc((size_t)n * count * es + 1);
      for (size_t i = 0; i < count; ++i) pstate_test_store(d, send, i, (double)((self->rank * 11 + (int)i) % 100));
      RANK_OK(self, pstate_all_gather(g, send, recv, count, d, NULL));
      for (int k = 0; k < n; ++k)
        for (size_t i = 0; i < count; ++i) {
          double got = pstate_test_load(d, recv, (size_t)k * count + i), want = (double)((ranks[k] * 11 + (int)i) % 100);
          RANK_CHECK(self, got == want, "%s all_gather %s count %zu block %d [%zu]: got %g want %g", name,
                     pstate_dtype_name(d), count, k, i, got, want);
        }
      free(send);
      free(recv);
    }
  }
  return 0;
}

static int check_reduce_scatter(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                                const char *name) {
  static const pstate_dtype_t types[] = {PSTATE_FLOAT32, PSTATE_INT32, PSTATE_BFLOAT16, PSTATE_UINT8};
  static const size_t counts[] = {0, 1, 3, 500};
  for (size_t ti = 0; ti < 4; ++ti)
    for (size_t ci = 0; ci < 4; ++ci)
      for (int op = 0; op < PSTATE_REDUCE_OP_COUNT; op += 2) { /* sum, max, avg */
        pstate_dtype_t d = types[ti];
        size_t rc = counts[ci], total = rc * (size_t)n;
        unsigned char *send = malloc(total * 8 + 1), *recv = malloc(rc * 8 + 1);
        for (size_t i = 0; i < total; ++i) pstate_test_store(d, send, i, pstate_test_reduce_input(d, op, self->rank, i));
        RANK_OK(self, pstate_reduce_scatter(g, send, recv, rc, d, op, NULL));
        for (size_t i = 0; i < rc; ++i) {
          double want = reference(d, op, ranks, n, (size_t)me * rc + i), got = pstate_test_load(d, recv, i);
          int ok = op == PSTATE_AVG && pstate_test_is_float(d) ? fabs(got - want) <= avg_tolerance(d, want) : got == want;
          RANK_CHECK(self, ok, "%s reduce_scatter %s %s count %zu [%zu]: got %g want %g", name, pstate_dtype_name(d),
                     pstate_reduce_op_name(op), rc, i, got, want);
        }
        free(send);
        free(recv);
      }
  return 0;
}

static int check_rooted(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                        const char *name) {
  enum { COUNT = 1000, GCOUNT = 33 };
  int32_t buf[COUNT];
  int64_t gsend[GCOUNT], *grecv = malloc(sizeof(int64_t) * GCOUNT * (size_t)n);
  for (int root = 0; root < n; ++root) {
    for (int i = 0; i < COUNT; ++i) buf[i] = me == root ? root * 100000 + i : -1;
    RANK_OK(self, pstate_broadcast(g, buf, COUNT, PSTATE_INT32, root, NULL));
    for (int i = 0; i < COUNT; ++i)
      RANK_CHECK(self, buf[i] == root * 100000 + i, "%s broadcast root %d [%d]: got %d", name, root, i, buf[i]);
    uint8_t fp8[5];
    for (int i = 0; i < 5; ++i) fp8[i] = me == root ? (uint8_t)(0x80 | (root + i)) : 0;
    RANK_OK(self, pstate_broadcast(g, fp8, 5, PSTATE_FP8_E4M3, root, NULL));
    for (int i = 0; i < 5; ++i) RANK_CHECK(self, fp8[i] == (uint8_t)(0x80 | (root + i)), "%s fp8 broadcast", name);

    for (int i = 0; i < GCOUNT; ++i) gsend[i] = (int64_t)self->rank * 1000 + i;
    memset(grecv, 0xff, sizeof(int64_t) * GCOUNT * (size_t)n);
    RANK_OK(self, pstate_gather(g, gsend, me == root ? grecv : NULL, GCOUNT, PSTATE_INT64, root, NULL));
    if (me == root)
      for (int k = 0; k < n; ++k)
        for (int i = 0; i < GCOUNT; ++i)
          RANK_CHECK(self, grecv[k * GCOUNT + i] == (int64_t)ranks[k] * 1000 + i, "%s gather root %d block %d [%d]",
                     name, root, k, i);
  }
  free(grecv);
  return 0;
}

static int check_all_to_all(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                            const char *name) {
  enum { C = 17 };
  int64_t *send = malloc(sizeof(int64_t) * C * (size_t)n), *recv = malloc(sizeof(int64_t) * C * (size_t)n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < C; ++i) send[j * C + i] = (int64_t)self->rank * 1000000 + j * 1000 + i; /* for rank j */
  RANK_OK(self, pstate_all_to_all(g, send, recv, C, PSTATE_INT64, NULL));
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < C; ++i)
      RANK_CHECK(self, recv[k * C + i] == (int64_t)ranks[k] * 1000000 + me * 1000 + i, "%s all_to_all from %d [%d]",
                 name, k, i);
  free(send);
  free(recv);
  return 0;
}

/* Pairs (0,1), (2,3), ...: the even rank sends first. 1 MiB exercises UCX's rendezvous path. */
static int check_send_recv(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                           const char *name) {
  int partner = me ^ 1;
  if (partner >= n) return 0;
  size_t count = 1 << 18;
  float *buf = malloc(count * sizeof(float));
  for (int round = 0; round < 2; ++round) {
    int sender = (round == 0) ? (me & ~1) : (me | 1);
    if (me == sender) {
      for (size_t i = 0; i < count; ++i) buf[i] = (float)(self->rank + (int)(i % 1000));
      RANK_OK(self, pstate_send(g, buf, count, PSTATE_FLOAT32, partner, NULL));
    } else {
      RANK_OK(self, pstate_recv(g, buf, count, PSTATE_FLOAT32, partner, NULL));
      for (size_t i = 0; i < count; ++i)
        RANK_CHECK(self, buf[i] == (float)(ranks[partner] + (int)(i % 1000)), "%s recv from %d [%zu]", name, partner, i);
    }
  }
  /* objects: variable size chosen by the sender */
  size_t osize = (size_t)(ranks[me & ~1] % 3) * 777;
  if ((me & 1) == 0) {
    char *obj = malloc(osize + 1);
    for (size_t i = 0; i < osize; ++i) obj[i] = (char)(i * 7 + 1);
    RANK_OK(self, pstate_send_object(g, obj, osize, partner));
    free(obj);
  } else {
    pstate_bytes_t got = {NULL, 0};
    RANK_OK(self, pstate_recv_object(g, partner, &got));
    RANK_CHECK(self, got.size == osize, "%s recv_object size %zu want %zu", name, got.size, osize);
    for (size_t i = 0; i < osize; ++i) RANK_CHECK(self, ((char *)got.data)[i] == (char)(i * 7 + 1), "%s object byte", name);
    pstate_bytes_free(&got);
  }
  free(buf);
  return 0;
}

static size_t object_size(int global_rank) { return (size_t)((global_rank * 37) % 5) * 1001; /* 0 for some */ }

static int check_objects(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                         const char *name) {
  for (int root = 0; root < n; ++root) {
    size_t size = object_size(ranks[root]) + 3;
    unsigned char *obj = malloc(size);
    for (size_t i = 0; i < size; ++i) obj[i] = (unsigned char)(ranks[root] + i);
    pstate_bytes_t got = {NULL, 0};
    RANK_OK(self, pstate_broadcast_object(g, me == root ? obj : NULL, me == root ? size : 0, root, &got));
    RANK_CHECK(self, got.size == size && memcmp(got.data, obj, size) == 0, "%s broadcast_object root %d", name, root);
    pstate_bytes_free(&got);
    free(obj);
  }
  size_t mine = object_size(self->rank);
  unsigned char *obj = malloc(mine + 1);
  for (size_t i = 0; i < mine; ++i) obj[i] = (unsigned char)(self->rank * 3 + i);
  pstate_bytes_t all = {NULL, 0};
  size_t sizes[64];
  RANK_OK(self, pstate_all_gather_object(g, obj, mine, &all, sizes, 64, &(size_t){0}));
  size_t off = 0;
  for (int k = 0; k < n; ++k) {
    RANK_CHECK(self, sizes[k] == object_size(ranks[k]), "%s all_gather_object size of %d", name, k);
    for (size_t i = 0; i < sizes[k]; ++i)
      RANK_CHECK(self, ((unsigned char *)all.data)[off + i] == (unsigned char)(ranks[k] * 3 + i),
                 "%s all_gather_object byte %zu of %d", name, i, k);
    off += sizes[k];
  }
  RANK_CHECK(self, all.size == off, "%s all_gather_object total size", name);
  pstate_bytes_free(&all);
  free(obj);
  return 0;
}

static int run_layout(const pstate_test_rank_t *self) {
  const layout_case_t *c = self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = c->tp;
  cfg.pipeline_parallel_size = c->pp;
  cfg.expert_parallel_size = c->ep;
  cfg.attention_data_parallel_size = c->attn_dp;
  cfg.attention_context_parallel_size = c->attn_cp;
  cfg.moe_data_parallel_size = c->moe_dp;
  cfg.decode_context_parallel_size = c->dcp;
  cfg.shared_experts_tensor_parallel_size = c->shared;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  for (int k = 0; k < PSTATE_GROUP_KIND_COUNT; ++k) {
    pstate_group_t *g = NULL;
    pstate_status_t s = pstate_get_group(ps, (pstate_group_kind_t)k, &g);
    if (s == PSTATE_ERR_UNSUPPORTED) continue; /* dcp / shared_experts_tp not configured */
    RANK_OK(self, s);
    int ranks[64];
    size_t n = 0;
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_ranks(g, ranks, 64, &n));
    RANK_OK(self, pstate_group_info(g, &info));
    RANK_CHECK(self, ranks[info.rank_in_group] == self->rank, "rank_in_group of %s", info.name);
    int me = info.rank_in_group;
    if (check_all_reduce(self, g, ranks, (int)n, info.name)) return 1;
    if (check_all_gather(self, g, ranks, (int)n, info.name)) return 1;
    if (check_reduce_scatter(self, g, ranks, (int)n, me, info.name)) return 1;
    if (check_rooted(self, g, ranks, (int)n, me, info.name)) return 1;
    if (check_all_to_all(self, g, ranks, (int)n, me, info.name)) return 1;
    if (check_send_recv(self, g, ranks, (int)n, me, info.name)) return 1;
    if (check_objects(self, g, ranks, (int)n, me, info.name)) return 1;
    RANK_OK(self, pstate_barrier(g));
  }
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run_case(layout_case_t c) {
  assert_int_equal(pstate_test_run_processes(c.world, 300, run_layout, &c, NULL), 0);
}

static void test_world1_every_op(void **state) { (void)state; run_case((layout_case_t){1, 1, 1, 1, 1, 1, 1, 1, 0}); }
static void test_world2_tp2_every_op(void **state) { (void)state; run_case((layout_case_t){2, 2, 1, 1, 1, 1, 1, 1, 0}); }
static void test_world3_tp3_every_op(void **state) { (void)state; run_case((layout_case_t){3, 3, 1, 1, 1, 1, 1, 1, 0}); }
static void test_world4_tp2_pp2_every_op(void **state) { (void)state; run_case((layout_case_t){4, 2, 2, 1, 1, 1, 1, 1, 0}); }
static void test_world4_tp4_ep2_dcp2_attn_dp2_every_op(void **state) {
  (void)state;
  run_case((layout_case_t){4, 4, 1, 2, 2, 1, 1, 2, 0});
}
static void test_world8_tp8_attn_cp2_ep4_moe_dp2_every_op(void **state) {
  (void)state;
  run_case((layout_case_t){8, 8, 1, 4, 1, 2, 2, 1, 0});
}
static void test_world8_tp4_pp2_ep2_shared_tp2_every_op(void **state) {
  (void)state;
  run_case((layout_case_t){8, 4, 2, 2, 1, 1, 1, 1, 2});
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_world1_every_op),
      cmocka_unit_test(test_world2_tp2_every_op),
      cmocka_unit_test(test_world3_tp3_every_op),
      cmocka_unit_test(test_world4_tp2_pp2_every_op),
      cmocka_unit_test(test_world4_tp4_ep2_dcp2_attn_dp2_every_op),
      cmocka_unit_test(test_world8_tp8_attn_cp2_ep4_moe_dp2_every_op),
      cmocka_unit_test(test_world8_tp4_pp2_ep2_shared_tp2_every_op),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
