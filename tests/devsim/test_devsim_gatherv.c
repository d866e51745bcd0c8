/*
 * test_devsim_gatherv.c — pstate_all_gatherv and pstate_reduce_scatterv in CUDA contexts (one NCCL
 * group of ncclBroadcast / ncclReduce per call), on the devsim stand-ins: 1, 2 and 3 ranks as
 * processes and 3 as threads, on the world group (NULL: the context's stream) and on the TP group
 * (a non-blocking stream of the test).
 *
 * Counts arrays (every rank passes the same): uneven without zeros, every other rank empty (group
 * rank 0 among them), one rank only, all zero, and one part past the stand-in's 256 KiB chunk.
 * all_gatherv: every dtype x every array, in place (send == recv + this rank's offset) for one
 * dtype; a rank with an empty part passes send NULL. reduce_scatterv: every dtype (fp8 included:
 * the stand-in reduces it) x every op x the small arrays, the large one for two, in place (recv ==
 * send + this rank's offset) for one; a rank with an empty part passes recv NULL. Buffers are the
 * stand-in's device memory and results are read back on the call's stream, so a missing stream
 * order gives wrong bytes. References: every rank's input is computed from (op, rank, index).
 *
 * Agreement: under PSTATE_CHECK=1 ranks that pass different counts arrays get MISMATCH on every
 * rank naming the call, nothing is enqueued, and the context stays usable (the next calls work).
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

#define MAX_RANKS 4
#define N_PATTERNS 5 /* the last one is the large one */
#define LARGE 70001

typedef struct {
  const pstate_test_rank_t *self;
  pstate_group_t *g;
  int n, r;
  cudaStream_t stream;
  const char *name;
} ctx_t;

static void fill_counts(int pattern, int n, size_t *counts) {
  for (int i = 0; i < n; ++i) {
    switch (pattern) {
      case 0: counts[i] = (size_t)(3 * i + 1); break;
      case 1: counts[i] = i % 2 == 0 ? 0 : (size_t)(5 + i); break;
      case 2: counts[i] = i == n - 1 ? 1000 : 0; break;
      case 3: counts[i] = 0; break;
      default: counts[i] = i == 0 ? LARGE : (size_t)(2 * i); break;
    }
  }
}

static size_t offset_of(const size_t *counts, int r) {
  size_t off = 0;
  for (int i = 0; i < r; ++i) off += counts[i];
  return off;
}

/* all_gatherv: rank r's part is devsim_input(SUM, r, j); recv holds every part in rank order. */
static int check_all_gatherv(const ctx_t *c, pstate_dtype_t t, int pattern, int in_place) {
  size_t counts[MAX_RANKS];
  fill_counts(pattern, c->n, counts);
  const size_t es = pstate_dtype_size(t), total = offset_of(counts, c->n), off = offset_of(counts, c->r);
  const size_t mine = counts[c->r];
  void *h = malloc(total * es + 1);
  for (size_t j = 0; j < mine; ++j) devsim_store(t, h, j, devsim_input(PSTATE_SUM, c->r, j, t));
  char *drecv = devsim_device_copy(NULL, total * es + 1);
  void *dsend = NULL;
  if (in_place) {
    RANK_CHECK(c->self, cudaMemcpy(drecv + off * es, h, mine * es, cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
    dsend = drecv + off * es;
  } else if (mine != 0) {
    dsend = devsim_device_copy(h, mine * es);
  }
  RANK_OK(c->self, pstate_all_gatherv(c->g, dsend, drecv, counts, t, c->stream));
  RANK_CHECK(c->self, devsim_to_host(h, drecv, total * es, c->stream) == 0, "copy back");
  for (int q = 0; q < c->n; ++q)
    for (size_t j = 0; j < counts[q]; ++j) {
      double got = devsim_load(t, h, offset_of(counts, q) + j), want = devsim_input(PSTATE_SUM, q, j, t);
      RANK_CHECK(c->self, got == want, "%s all_gatherv %s pattern %d%s: element %zu of rank %d's part is %g, want %g",
                 c->name, pstate_dtype_name(t), pattern, in_place ? " in place" : "", j, q, got, want);
    }
  if (!in_place && dsend != NULL) cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  return 0;
}

/* reduce_scatterv: element i of every rank's send is devsim_input(op, rank, i); rank r gets the
 * reduction of elements offset(r) .. offset(r) + counts[r] - 1. */
static int check_reduce_scatterv(const ctx_t *c, pstate_dtype_t t, pstate_reduce_op_t op, int pattern, int in_place) {
  size_t counts[MAX_RANKS];
  fill_counts(pattern, c->n, counts);
  const size_t es = pstate_dtype_size(t), total = offset_of(counts, c->n), off = offset_of(counts, c->r);
  const size_t mine = counts[c->r];
  void *h = malloc(total * es + 1);
  for (size_t i = 0; i < total; ++i) devsim_store(t, h, i, devsim_input(op, c->r, i, t));
  char *dsend = devsim_device_copy(h, total * es + 1);
  void *drecv = in_place ? dsend + off * es : mine != 0 ? devsim_device_copy(NULL, mine * es) : NULL;
  RANK_OK(c->self, pstate_reduce_scatterv(c->g, dsend, drecv, counts, t, op, c->stream));
  if (mine != 0) RANK_CHECK(c->self, devsim_to_host(h, drecv, mine * es, c->stream) == 0, "copy back");
  for (size_t i = 0; i < mine; ++i) {
    double got = devsim_load(t, h, i), want = devsim_reduced(op, c->n, off + i, t);
    RANK_CHECK(c->self, devsim_close(t, op, got, want), "%s reduce_scatterv %s %s pattern %d%s: element %zu is %g, want %g",
               c->name, pstate_dtype_name(t), pstate_reduce_op_name(op), pattern, in_place ? " in place" : "", i, got,
               want);
  }
  if (!in_place && drecv != NULL) cudaFree(drecv);
  cudaFree(dsend);
  free(h);
  return 0;
}

static int check_group(const ctx_t *c, int every_dtype) {
  for (int t = 0; t < PSTATE_DTYPE_COUNT; ++t) {
    if (!every_dtype && t != PSTATE_BFLOAT16 && t != PSTATE_INT64 && t != PSTATE_FP8_E5M2) continue;
    for (int pattern = 0; pattern < N_PATTERNS - 1; ++pattern) {
      if (check_all_gatherv(c, (pstate_dtype_t)t, pattern, 0)) return 1;
      for (int op = 0; op < PSTATE_REDUCE_OP_COUNT; ++op)
        if (check_reduce_scatterv(c, (pstate_dtype_t)t, (pstate_reduce_op_t)op, pattern, 0)) return 1;
    }
  }
  for (int pattern = 0; pattern < N_PATTERNS; ++pattern) {
    if (check_all_gatherv(c, PSTATE_FLOAT32, pattern, 1)) return 1;
    if (check_reduce_scatterv(c, PSTATE_FLOAT32, PSTATE_SUM, pattern, 1)) return 1;
  }
  if (check_all_gatherv(c, PSTATE_UINT8, N_PATTERNS - 1, 0)) return 1;
  if (check_reduce_scatterv(c, PSTATE_FLOAT64, PSTATE_AVG, N_PATTERNS - 1, 0)) return 1;
  return 0;
}

static int data_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_parallel_config_t pc = PSTATE_PARALLEL_CONFIG_INIT;
  pc.tensor_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &pc));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  const pstate_group_kind_t kinds[2] = {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP};
  for (int k = 0; k < 2; ++k) {
    pstate_group_t *g = NULL;
    RANK_OK(self, pstate_get_group(ps, kinds[k], &g));
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(g, &info));
    ctx_t c = {self, g, info.world_size, info.rank_in_group, k == 0 ? NULL : stream, pstate_group_kind_name(kinds[k])};
    if (check_group(&c, k == 0)) return 1;
  }
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(stream);
  return 0;
}

static void run(int world, int threads) {
  int failed = threads ? pstate_test_run_threads(world, 120, data_rank, NULL)
                       : pstate_test_run_processes(world, 120, data_rank, NULL, NULL);
  assert_int_equal(failed, 0);
}

static void test_device_gatherv_1_process(void **s) { (void)s; run(1, 0); }
static void test_device_gatherv_2_processes(void **s) { (void)s; run(2, 0); }
static void test_device_gatherv_3_processes(void **s) { (void)s; run(3, 0); }
static void test_device_gatherv_3_threads(void **s) { (void)s; run(3, 1); }

/* ---- PSTATE_CHECK=1: different counts arrays --------------------------------------------------- */

static int occurrences(const char *haystack, const char *needle) {
  int n = 0;
  for (const char *p = strstr(haystack, needle); p != NULL; p = strstr(p + 1, needle)) ++n;
  return n;
}

static int mismatch_rank(const pstate_test_rank_t *self) {
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 20000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  size_t ours[MAX_RANKS], theirs[MAX_RANKS];
  for (int i = 0; i < n; ++i) {
    ours[i] = (size_t)i + 1;
    theirs[i] = (size_t)(n - i); /* the same total, cut the other way round */
  }
  const size_t *counts = self->rank == 0 ? ours : theirs;
  const size_t total = (size_t)n * (size_t)(n + 1) / 2;
  float h[16];
  for (size_t i = 0; i < total; ++i) h[i] = (float)i;
  char *dsend = devsim_device_copy(h, total * sizeof(float)), *drecv = devsim_device_copy(NULL, total * sizeof(float));
  const size_t off = offset_of(counts, self->rank) * sizeof(float);
  pstate_status_t s = pstate_all_gatherv(g, dsend + off, drecv, counts, PSTATE_FLOAT32, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && occurrences(pstate_last_error(), "called all_gatherv") == 2 &&
                       strstr(pstate_last_error(), self->rank == 0 ? "this rank's counts: [1, 2]" : "this rank's counts: [2, 1]"),
             "all_gatherv with different counts -> %s: %s", pstate_status_string(s), pstate_last_error());
  s = pstate_reduce_scatterv(g, dsend, drecv, counts, PSTATE_FLOAT32, PSTATE_MAX, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && occurrences(pstate_last_error(), "called reduce_scatterv") == 2 &&
                       occurrences(pstate_last_error(), "float32 max counts ") == 2,
             "reduce_scatterv with different counts -> %s: %s", pstate_status_string(s), pstate_last_error());
  /* Nothing was enqueued and the context is usable: the same call with agreeing counts works. */
  RANK_OK(self, pstate_reduce_scatterv(g, dsend, drecv, ours, PSTATE_FLOAT32, PSTATE_MAX, NULL));
  const size_t mine = (size_t)self->rank + 1, at = offset_of(ours, self->rank);
  RANK_CHECK(self, devsim_to_host(h, drecv, mine * sizeof(float), NULL) == 0, "copy back");
  for (size_t i = 0; i < mine; ++i) RANK_CHECK(self, h[i] == (float)(at + i), "reduce_scatterv after the mismatch");
  cudaFree(dsend);
  cudaFree(drecv);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_different_counts_are_mismatch_under_check(void **s) {
  (void)s;
  char dir[64] = "/tmp/pstate-test-devsim-gatherv.XXXXXX", cmd[128];
  assert_non_null(mkdtemp(dir));
  setenv("PSTATE_TRACE_DIR", dir, 1); /* the MISMATCH dumps, not into the working directory */
  setenv("PSTATE_CHECK", "1", 1);
  int failed = pstate_test_run_processes(2, 60, mismatch_rank, NULL, NULL);
  unsetenv("PSTATE_CHECK");
  unsetenv("PSTATE_TRACE_DIR");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  assert_int_equal(failed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_gatherv_1_process),
      cmocka_unit_test(test_device_gatherv_2_processes),
      cmocka_unit_test(test_device_gatherv_3_processes),
      cmocka_unit_test(test_device_gatherv_3_threads),
      cmocka_unit_test(test_different_counts_are_mismatch_under_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
