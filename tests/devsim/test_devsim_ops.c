/*
 * test_devsim_ops.c — every device operation × dtype × reduce op in CUDA contexts, on every group
 * kind, at 1, 2, 3 and 4 ranks as processes and as threads, against host references (reduce
 * and scatter with the root moving over the group's ranks, in place and not, NULL for the buffer
 * a rank other than the root does not use).
 *
 * Runs on the devsim stand-ins (PSTATE_CUDA_RUNTIME_LIBRARY, PSTATE_NCCL_LIBRARY set by ctest):
 * buffers come from the stand-in's cudaMalloc, operations are enqueued on a non-blocking stream
 * (the world group: on NULL, the context's stream) and the results are read back on the same
 * stream, so a missing stream order in pstate gives wrong bytes, not a pass. Each rank computes
 * every rank's input from (op, rank, index) and so the exact expected output.
 */
/* cmocka.h needs these first */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devsim_test_util.h"
#include "ranks.h"

static const pstate_dtype_t kDtypes[] = {PSTATE_INT8,    PSTATE_UINT8,    PSTATE_INT32,    PSTATE_UINT32,
                                         PSTATE_INT64,   PSTATE_UINT64,   PSTATE_FLOAT16,  PSTATE_FLOAT32,
                                         PSTATE_FLOAT64, PSTATE_BFLOAT16, PSTATE_FP8_E4M3, PSTATE_FP8_E5M2};
static const pstate_reduce_op_t kOps[] = {PSTATE_SUM, PSTATE_PROD, PSTATE_MAX, PSTATE_MIN, PSTATE_AVG};
#define NDTYPES (sizeof kDtypes / sizeof kDtypes[0])
#define NOPS (sizeof kOps / sizeof kOps[0])

typedef struct {
  int tp, pp;
  int full; /* 1: every dtype on every group; 0: every dtype on the world group, three elsewhere */
} config_t;

typedef struct {
  const pstate_test_rank_t *self;
  pstate_group_t *g;
  int n, r;
  cudaStream_t stream;
  const char *name;
} ctx_t;

/* host buffer of `count` elements of rank `rank`'s input, starting at element `first` */
static void *input(pstate_dtype_t t, pstate_reduce_op_t op, int rank, size_t first, size_t count) {
  void *h = malloc(count * pstate_dtype_size(t) + 1);
  for (size_t i = 0; i < count; ++i) devsim_store(t, h, i, devsim_input(op, rank, first + i, t));
  return h;
}

/* Compares got[i] with want(i) for i < count; prints the first difference. */
#define EXPECT_ELEMENTS(c, what, t, op, got, count, want_expr)                                                   \
  do {                                                                                                           \
    for (size_t i_ = 0; i_ < (count); ++i_) {                                                                    \
      size_t i = i_;                                                                                             \
      double want_ = (want_expr), got_ = devsim_load((t), (got), i_);                                            \
      RANK_CHECK((c)->self, devsim_close((t), (op), got_, want_), "%s %s %s %s: element %zu is %g, expected %g", \
                 (c)->name, what, pstate_dtype_name(t), pstate_reduce_op_name(op), i_, got_, want_);             \
    }                                                                                                            \
  } while (0)

static int check_all_reduce(const ctx_t *c, pstate_dtype_t t, pstate_reduce_op_t op, size_t count, int in_place) {
  size_t es = pstate_dtype_size(t), bytes = count * es;
  void *h = input(t, op, c->r, 0, count);
  void *dsend = devsim_device_copy(h, bytes);
  void *drecv = in_place ? dsend : devsim_device_copy(NULL, bytes);
  RANK_CHECK(c->self, dsend != NULL && drecv != NULL, "cudaMalloc");
  pstate_status_t s = pstate_all_reduce(c->g, dsend, drecv, count, t, op, c->stream);
  RANK_OK(c->self, s);
  RANK_CHECK(c->self, devsim_to_host(h, drecv, bytes, c->stream) == 0, "copy back");
  EXPECT_ELEMENTS(c, "all_reduce", t, op, h, count, devsim_reduced(op, c->n, i, t));
  cudaFree(dsend);
  if (!in_place) cudaFree(drecv);
  free(h);
  return 0;
}

static int check_reduce_scatter(const ctx_t *c, pstate_dtype_t t, pstate_reduce_op_t op, size_t count) {
  size_t es = pstate_dtype_size(t), n = (size_t)c->n;
  void *h = input(t, op, c->r, 0, n * count);
  void *dsend = devsim_device_copy(h, n * count * es);
  void *drecv = devsim_device_copy(NULL, count * es);
  RANK_OK(c->self, pstate_reduce_scatter(c->g, dsend, drecv, count, t, op, c->stream));
  RANK_CHECK(c->self, devsim_to_host(h, drecv, count * es, c->stream) == 0, "copy back");
  EXPECT_ELEMENTS(c, "reduce_scatter", t, op, h, count, devsim_reduced(op, c->n, (size_t)c->r * count + i, t));
  cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  return 0;
}

/* reduce to root; recv only there (NULL elsewhere), in place there when asked */
static int check_reduce(const ctx_t *c, pstate_dtype_t t, pstate_reduce_op_t op, size_t count, int root,
                        int in_place) {
  size_t es = pstate_dtype_size(t), bytes = count * es;
  void *h = input(t, op, c->r, 0, count);
  void *dsend = devsim_device_copy(h, bytes);
  void *drecv = c->r != root ? NULL : in_place ? dsend : devsim_device_copy(NULL, bytes);
  RANK_CHECK(c->self, dsend != NULL && (c->r != root || drecv != NULL), "cudaMalloc");
  RANK_OK(c->self, pstate_reduce(c->g, dsend, drecv, count, t, op, root, c->stream));
  if (c->r == root) {
    RANK_CHECK(c->self, devsim_to_host(h, drecv, bytes, c->stream) == 0, "copy back");
    EXPECT_ELEMENTS(c, "reduce", t, op, h, count, devsim_reduced(op, c->n, i, t));
  } else {
    RANK_CHECK(c->self, devsim_to_host(h, dsend, bytes, c->stream) == 0, "copy back");
    EXPECT_ELEMENTS(c, "reduce (send untouched)", t, op, h, count, devsim_input(op, c->r, i, t));
  }
  cudaFree(dsend);
  if (c->r == root && !in_place) cudaFree(drecv);
  free(h);
  return 0;
}

/* scatter from root: block q of the root's send is rank q's input; send only there (NULL
 * elsewhere); in place there (recv == send + root * count) when asked */
static int check_scatter(const ctx_t *c, pstate_dtype_t t, size_t count, int root, int in_place) {
  size_t es = pstate_dtype_size(t), n = (size_t)c->n;
  void *all = malloc(n * count * es + 1);
  for (size_t j = 0; j < n * count; ++j)
    devsim_store(t, all, j, devsim_input(PSTATE_SUM, (int)(j / (count ? count : 1)), j % (count ? count : 1), t));
  void *dsend = c->r == root ? devsim_device_copy(all, n * count * es) : NULL;
  void *drecv = c->r == root && in_place ? (char *)dsend + (size_t)root * count * es : devsim_device_copy(NULL, count * es);
  RANK_OK(c->self, pstate_scatter(c->g, dsend, drecv, count, t, root, c->stream));
  RANK_CHECK(c->self, devsim_to_host(all, drecv, count * es, c->stream) == 0, "copy back");
  EXPECT_ELEMENTS(c, "scatter", t, PSTATE_SUM, all, count, devsim_input(PSTATE_SUM, c->r, i, t));
  if (dsend != NULL) cudaFree(dsend);
  if (!(c->r == root && in_place)) cudaFree(drecv);
  free(all);
  return 0;
}

static int check_moves(const ctx_t *c, pstate_dtype_t t, int variant, size_t count) {
  size_t es = pstate_dtype_size(t), n = (size_t)c->n;
  const pstate_reduce_op_t sum = PSTATE_SUM;
  void *out = malloc(n * count * es + 1);
  /* all_gather: block q is rank q's input */
  void *h = input(t, sum, c->r, 0, count);
  void *dsend = devsim_device_copy(h, count * es);
  void *drecv = devsim_device_copy(NULL, n * count * es);
  RANK_OK(c->self, pstate_all_gather(c->g, dsend, drecv, count, t, c->stream));
  RANK_CHECK(c->self, devsim_to_host(out, drecv, n * count * es, c->stream) == 0, "copy back");
  EXPECT_ELEMENTS(c, "all_gather", t, sum, out, n * count, devsim_input(sum, (int)(i / count), i % count, t));
  /* broadcast from root = variant % n, in place */
  int root = variant % c->n;
  void *dbuf = c->r == root ? devsim_device_copy(h, count * es) : devsim_device_copy(NULL, count * es);
  free(h);
  h = input(t, sum, root, 0, count);
  if (c->r == root) cudaMemcpy(dbuf, h, count * es, cudaMemcpyHostToDevice);
  RANK_OK(c->self, pstate_broadcast(c->g, dbuf, count, t, root, c->stream));
  RANK_CHECK(c->self, devsim_to_host(out, dbuf, count * es, c->stream) == 0, "copy back");
  EXPECT_ELEMENTS(c, "broadcast", t, sum, out, count, devsim_input(sum, root, i, t));
  cudaFree(dbuf);
  free(h);
  /* gather to dst = (variant + 1) % n; recv only on dst */
  int dst = (variant + 1) % c->n;
  cudaMemset(drecv, 0xEE, n * count * es);
  RANK_OK(c->self, pstate_gather(c->g, dsend, c->r == dst ? drecv : NULL, count, t, dst, c->stream));
  if (c->r == dst) {
    RANK_CHECK(c->self, devsim_to_host(out, drecv, n * count * es, c->stream) == 0, "copy back");
    EXPECT_ELEMENTS(c, "gather", t, sum, out, n * count, devsim_input(sum, (int)(i / count), i % count, t));
  }
  cudaFree(dsend);
  /* all_to_all: my block j goes to rank j; block q of recv comes from rank q */
  h = input(t, sum, c->r, 0, n * count);
  dsend = devsim_device_copy(h, n * count * es);
  RANK_OK(c->self, pstate_all_to_all(c->g, dsend, drecv, count, t, c->stream));
  RANK_CHECK(c->self, devsim_to_host(out, drecv, n * count * es, c->stream) == 0, "copy back");
  EXPECT_ELEMENTS(c, "all_to_all", t, sum, out, n * count,
                  devsim_input(sum, (int)(i / count), (size_t)c->r * count + i % count, t));
  cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  free(out);
  return 0;
}

/* Rank r sends its input to r+1 and receives r-1's (even ranks send first, odd ones receive first,
 * so that messages larger than the transport's buffer cannot deadlock). */
static int check_send_recv(const ctx_t *c, pstate_dtype_t t, size_t count) {
  if (c->n < 2) return 0;
  size_t es = pstate_dtype_size(t);
  int next = (c->r + 1) % c->n, prev = (c->r + c->n - 1) % c->n;
  void *h = input(t, PSTATE_SUM, c->r, 0, count);
  void *dsend = devsim_device_copy(h, count * es);
  void *drecv = devsim_device_copy(NULL, count * es);
  for (int step = 0; step < 2; ++step) {
    if ((step == 0) == (c->r % 2 == 0))
      RANK_OK(c->self, pstate_send(c->g, dsend, count, t, next, c->stream));
    else
      RANK_OK(c->self, pstate_recv(c->g, drecv, count, t, prev, c->stream));
  }
  RANK_CHECK(c->self, devsim_to_host(h, drecv, count * es, c->stream) == 0, "copy back");
  EXPECT_ELEMENTS(c, "send/recv", t, PSTATE_SUM, h, count, devsim_input(PSTATE_SUM, prev, i, t));
  cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  return 0;
}

static int check_group(ctx_t *c, int every_dtype) {
  const size_t count = 37;
  for (size_t d = 0; d < NDTYPES; ++d) {
    pstate_dtype_t t = kDtypes[d];
    if (!every_dtype && t != PSTATE_BFLOAT16 && t != PSTATE_INT64 && t != PSTATE_FP8_E4M3) continue;
    for (size_t o = 0; o < NOPS; ++o) {
      if (check_all_reduce(c, t, kOps[o], count, (int)(o % 2))) return 1;
      if (check_reduce_scatter(c, t, kOps[o], count)) return 1;
      if (check_reduce(c, t, kOps[o], count, (int)(d + o) % c->n, (int)(o % 2))) return 1;
    }
    if (check_moves(c, t, (int)d, count)) return 1;
    if (check_scatter(c, t, count, (int)(d + 2) % c->n, (int)(d % 2))) return 1;
    if (check_send_recv(c, t, count)) return 1;
  }
  /* larger than one chunk of the stand-in's transport (256 KiB per rank, 64 KiB rings) */
  if (check_all_reduce(c, PSTATE_FLOAT64, PSTATE_SUM, 40000, 0)) return 1;
  if (check_reduce_scatter(c, PSTATE_INT32, PSTATE_MAX, 20000)) return 1;
  if (check_moves(c, PSTATE_FLOAT32, 3, 20000)) return 1;
  if (check_reduce(c, PSTATE_FLOAT64, PSTATE_AVG, 40000, c->n - 1, 0)) return 1;
  if (check_scatter(c, PSTATE_INT32, 20000, c->n / 2, 1)) return 1;
  if (check_send_recv(c, PSTATE_UINT8, 200000)) return 1;
  return 0;
}

static int rank_main(const pstate_test_rank_t *self) {
  const config_t *cfg = (const config_t *)self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_parallel_config_t pc = PSTATE_PARALLEL_CONFIG_INIT;
  pc.tensor_parallel_size = cfg->tp;
  pc.pipeline_parallel_size = cfg->pp;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &pc));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");

  /* every distinct group of every kind (aliases are the same object) */
  pstate_group_t *seen[PSTATE_GROUP_SELF_PP + 1];
  int nseen = 0;
  for (int k = PSTATE_GROUP_WORLD; k <= PSTATE_GROUP_SELF_PP; ++k) {
    pstate_group_t *g = NULL;
    if (pstate_get_group(ps, (pstate_group_kind_t)k, &g) != PSTATE_OK) continue; /* DCP, shared experts */
    int dup = 0;
    for (int j = 0; j < nseen; ++j) dup |= seen[j] == g;
    if (dup) continue;
    seen[nseen++] = g;
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(g, &info));
    ctx_t c = {self,
               g,
               info.world_size,
               info.rank_in_group,
               k == PSTATE_GROUP_WORLD ? NULL : stream,
               pstate_group_kind_name((pstate_group_kind_t)k)};
    if (check_group(&c, cfg->full || k == PSTATE_GROUP_WORLD)) return 1;
  }
  /* pstate_tp_allreduce / tp_allgather: the TP group, in place */
  {
    pstate_group_t *tp = NULL;
    RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(tp, &info));
    size_t count = 1000;
    float *h = malloc(count * sizeof(float) * (size_t)info.world_size);
    for (size_t i = 0; i < count; ++i) h[i] = (float)devsim_input(PSTATE_SUM, info.rank_in_group, i, PSTATE_FLOAT32);
    void *d = devsim_device_copy(h, count * sizeof(float));
    void *all = devsim_device_copy(NULL, count * sizeof(float) * (size_t)info.world_size);
    RANK_OK(self, pstate_tp_allgather(ps, d, all, count, PSTATE_FLOAT32, stream));
    RANK_OK(self, pstate_tp_allreduce(ps, d, count, PSTATE_FLOAT32, PSTATE_SUM, stream));
    RANK_CHECK(self, devsim_to_host(h, d, count * sizeof(float), stream) == 0, "copy back");
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(self, h[i] == (float)devsim_reduced(PSTATE_SUM, info.world_size, i, PSTATE_FLOAT32),
                 "tp_allreduce element %zu: %g", i, h[i]);
    RANK_CHECK(self, devsim_to_host(h, all, count * sizeof(float) * (size_t)info.world_size, stream) == 0, "copy");
    for (size_t i = 0; i < count * (size_t)info.world_size; ++i)
      RANK_CHECK(self, h[i] == (float)devsim_input(PSTATE_SUM, (int)(i / count), i % count, PSTATE_FLOAT32),
                 "tp_allgather element %zu: %g", i, h[i]);
    cudaFree(d);
    cudaFree(all);
    free(h);
  }
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(stream);
  return 0;
}

static void run(int world, int tp, int pp, int threads) {
  config_t cfg = {tp, pp, 1};
  int failed = threads ? pstate_test_run_threads(world, 120, rank_main, &cfg)
                       : pstate_test_run_processes(world, 120, rank_main, &cfg, NULL);
  assert_int_equal(failed, 0);
}

static void test_device_ops_1_process(void **state) {
  (void)state;
  run(1, 1, 1, 0);
}
static void test_device_ops_2_processes_tp2(void **state) {
  (void)state;
  run(2, 2, 1, 0);
}
static void test_device_ops_3_processes_pp3(void **state) {
  (void)state;
  run(3, 1, 3, 0);
}
static void test_device_ops_4_processes_tp2_pp2(void **state) {
  (void)state;
  run(4, 2, 2, 0);
}
static void test_device_ops_2_threads_pp2(void **state) {
  (void)state;
  run(2, 1, 2, 1);
}
static void test_device_ops_3_threads_tp3(void **state) {
  (void)state;
  run(3, 3, 1, 1);
}
static void test_device_ops_4_threads_tp4(void **state) {
  (void)state;
  run(4, 4, 1, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_ops_1_process),       cmocka_unit_test(test_device_ops_2_processes_tp2),
      cmocka_unit_test(test_device_ops_3_processes_pp3), cmocka_unit_test(test_device_ops_4_processes_tp2_pp2),
      cmocka_unit_test(test_device_ops_2_threads_pp2),   cmocka_unit_test(test_device_ops_3_threads_tp3),
      cmocka_unit_test(test_device_ops_4_threads_tp4),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
