/*
 * test_lifecycle.c — the order of the lifecycle, handles after destroy, the CPU-context rules,
 * and N ranks as N threads of one process.
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

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

#define RANK_ERR(self, call, want, phrase)                                                              \
  do {                                                                                                  \
    pstate_status_t s_ = (call);                                                                        \
    RANK_CHECK(self, s_ == (want), "%s returned %s, want %s (%s)", #call, pstate_status_string(s_),     \
               pstate_status_string(want), pstate_last_error());                                        \
    RANK_CHECK(self, contains(pstate_last_error(), phrase), "%s: message '%s' lacks '%s'", #call,      \
               pstate_last_error(), phrase);                                                            \
  } while (0)

static int out_of_order(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_group_t *g = NULL;
  /* before initialize_model_parallel: only the world group */
  RANK_CHECK(self, pstate_model_parallel_is_initialized(ps) == 0, "not initialized yet");
  RANK_ERR(self, pstate_get_group(ps, PSTATE_GROUP_TP, &g), PSTATE_ERR_INVALID_STATE, "pstate_initialize_model_parallel");
  RANK_ERR(self, pstate_destroy_model_parallel(ps), PSTATE_ERR_INVALID_STATE, "pstate_initialize_model_parallel");
  float x = 1.0f;
  RANK_ERR(self, pstate_tp_allreduce(ps, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL), PSTATE_ERR_INVALID_STATE,
           "initialize_model_parallel");
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  RANK_OK(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == (float)self->world_size, "world all_reduce before model parallel: %g", x);

  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  RANK_CHECK(self, pstate_model_parallel_is_initialized(ps) == 1, "initialized");
  RANK_ERR(self, pstate_initialize_model_parallel(ps, &cfg), PSTATE_ERR_INVALID_STATE, "pstate_destroy_model_parallel");
  pstate_group_t *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  RANK_ERR(self, pstate_get_group(ps, PSTATE_GROUP_DCP, &g), PSTATE_ERR_UNSUPPORTED, "decode_context_parallel_size");

  /* CPU context: a stream is an error; graph capture is unsupported with the reason */
  int fake_stream = 0;
  RANK_ERR(self, pstate_all_reduce(tp, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, &fake_stream), PSTATE_ERR_INVALID_ARGUMENT,
           "stream");
  void *cap = NULL;
  RANK_ERR(self, pstate_graph_capture_begin(ps, NULL, &cap), PSTATE_ERR_UNSUPPORTED, "CUDA");
  RANK_ERR(self, pstate_graph_capture_end(ps), PSTATE_ERR_UNSUPPORTED, "CUDA");

  /* bad arguments are refused on every rank, before any data moves (so no rank hangs) */
  RANK_ERR(self, pstate_broadcast(tp, &x, 1, PSTATE_FLOAT32, self->world_size, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "rank_in_group");
  RANK_ERR(self, pstate_all_reduce(tp, NULL, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "send is NULL");
  RANK_ERR(self, pstate_all_reduce(tp, &x, &x, 1, PSTATE_FP8_E4M3, PSTATE_SUM, NULL), PSTATE_ERR_UNSUPPORTED, "fp8");
  RANK_ERR(self, pstate_all_reduce(tp, &x, &x, 1, (pstate_dtype_t)99, PSTATE_SUM, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "dtype");
  RANK_ERR(self, pstate_all_reduce(tp, &x, &x, 1, PSTATE_FLOAT32, (pstate_reduce_op_t)9, NULL),
           PSTATE_ERR_INVALID_ARGUMENT, "op");
  RANK_ERR(self, pstate_all_reduce(tp, &x, &x, SIZE_MAX / 2, PSTATE_FLOAT32, PSTATE_SUM, NULL),
           PSTATE_ERR_INVALID_ARGUMENT, "overflows");

  /* destroyed handles answer INVALID_STATE instead of crashing */
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_ERR(self, pstate_all_reduce(tp, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL), PSTATE_ERR_INVALID_STATE,
           "destroyed");
  RANK_ERR(self, pstate_barrier(tp), PSTATE_ERR_INVALID_STATE, "destroyed");
  /* and a second initialize works with fresh groups */
  cfg.tensor_parallel_size = 1;
  cfg.pipeline_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *pp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_PP, &pp));
  x = (float)self->rank;
  RANK_OK(self, pstate_all_reduce(pp, &x, &x, 1, PSTATE_FLOAT32, PSTATE_MAX, NULL));
  RANK_CHECK(self, x == (float)(self->world_size - 1), "pp max after re-init: %g", x);
  RANK_OK(self, pstate_finalize(ps));
  RANK_OK(self, pstate_finalize(NULL));
  RANK_OK(self, pstate_abort(NULL));
  return 0;
}

static void test_calls_out_of_lifecycle_order_name_the_step(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, out_of_order, NULL, NULL), 0);
}

static void test_init_rejects_bad_params(void **state) {
  (void)state;
  pstate_t *ps = (pstate_t *)0x1;
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.struct_size = 3;
  assert_int_equal(pstate_init(&p, &ps), PSTATE_ERR_INVALID_ARGUMENT);
  assert_null(ps);
  assert_non_null(strstr(pstate_last_error(), "PSTATE_INIT_PARAMS_INIT"));
  pstate_init_params_t q = PSTATE_INIT_PARAMS_INIT;
  q.init_method = "smoke-signals://here";
  q.rank = 0;
  q.world_size = 1;
  assert_int_not_equal(pstate_init(&q, &ps), PSTATE_OK);
  assert_true(strlen(pstate_last_error()) > 0);
  assert_int_equal(pstate_init(&q, NULL), PSTATE_ERR_INVALID_ARGUMENT);
}

/* N ranks as N threads: every context is independent of the others. */
static int threads_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = self->world_size / 2;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  for (int iter = 0; iter < 50; ++iter) {
    double v[33];
    for (int i = 0; i < 33; ++i) v[i] = self->rank + i + iter;
    RANK_OK(self, pstate_tp_allreduce(ps, v, 33, PSTATE_FLOAT64, PSTATE_SUM, NULL));
    int base = self->rank & ~1;
    for (int i = 0; i < 33; ++i)
      RANK_CHECK(self, v[i] == (double)(base + base + 1 + 2 * (i + iter)), "thread tp sum [%d] = %g", i, v[i]);
    pstate_group_t *pp = NULL;
    RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_PP, &pp));
    int32_t w[4] = {self->rank, iter, 0, 0}, all[16];
    RANK_OK(self, pstate_all_gather(pp, w, all, 4, PSTATE_INT32, NULL));
    for (int k = 0; k < self->world_size / 2; ++k)
      RANK_CHECK(self, all[k * 4] == (self->rank & 1) + 2 * k && all[k * 4 + 1] == iter, "pp all_gather");
  }
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_ranks_as_threads_of_one_process(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(4, 120, threads_rank, NULL), 0);
}

static void test_ranks_as_processes_same_program(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 120, threads_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init_rejects_bad_params),
      cmocka_unit_test(test_calls_out_of_lifecycle_order_name_the_step),
      cmocka_unit_test(test_ranks_as_threads_of_one_process),
      cmocka_unit_test(test_ranks_as_processes_same_program),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
