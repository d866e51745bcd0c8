/*
 * test_config_agreement.c — pstate_initialize_model_parallel compares the parallel config of
 * every rank first: ranks that disagree all get PSTATE_ERR_MISMATCH naming both configs, nothing
 * is created, and the context stays usable (a second, agreeing call works; finalize and abort
 * work).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ranks.h"

typedef struct agreement_case_t {
  int then_abort; /* after the mismatch: 1 = abort, 0 = agree, use the groups, finalize */
} agreement_case_t;

static int disagree_rank(const pstate_test_rank_t *self) {
  const agreement_case_t *c = self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  /* rank 0: tp 1 x pp 2; rank 1: tp 2 (pp 1). Both are valid layouts of a world of 2. */
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->rank == 0 ? 1 : 2;
  cfg.pipeline_parallel_size = self->rank == 0 ? 2 : 1;
  double t0 = pstate_test_now_ms();
  pstate_status_t s = pstate_initialize_model_parallel(ps, &cfg);
  const char *m = pstate_last_error();
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "initialize_model_parallel -> %s (%s)", pstate_status_string(s), m);
  RANK_CHECK(self, strstr(m, "rank 0 tp 1 pp 2, rank 1 tp 2 pp 1") != NULL, "message lacks both configs: %s", m);
  RANK_CHECK(self, pstate_test_now_ms() - t0 < 10000, "the mismatch took %.0f ms (a timeout, not the comparison)",
             pstate_test_now_ms() - t0);
  RANK_CHECK(self, pstate_model_parallel_is_initialized(ps) == 0, "nothing may be created");
  pstate_group_t *g = NULL;
  RANK_CHECK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &g) == PSTATE_ERR_INVALID_STATE, "no TP group");
  if (c->then_abort) {
    RANK_OK(self, pstate_abort(ps));
    return 0;
  }
  /* the world still works, and an agreeing call creates the groups */
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  RANK_OK(self, pstate_barrier(g));
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 1;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  float x = 1.0f;
  RANK_OK(self, pstate_tp_allreduce(ps, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == 2.0f, "tp all_reduce after agreeing: %g", x);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_ranks_with_different_configs_all_get_mismatch_then_agree_and_finalize(void **state) {
  (void)state;
  agreement_case_t c = {0};
  assert_int_equal(pstate_test_run_processes(2, 120, disagree_rank, &c, NULL), 0);
}

static void test_ranks_with_different_configs_all_get_mismatch_then_abort(void **state) {
  (void)state;
  agreement_case_t c = {1};
  assert_int_equal(pstate_test_run_processes(2, 120, disagree_rank, &c, NULL), 0);
}

/* A config that is the same on every rank but invalid fails on every rank with INVALID_ARGUMENT
 * (the comparison runs first, so no rank is left waiting). */
static int same_invalid_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 3;
  pstate_status_t s = pstate_initialize_model_parallel(ps, &cfg);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT, "tp 3 on world 2 -> %s (%s)", pstate_status_string(s),
             pstate_last_error());
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_same_invalid_config_is_invalid_argument_on_every_rank(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, same_invalid_rank, NULL, NULL), 0);
}

/* pstate.h's defaults are applied before the comparison: tp 0 (= world / pp) on rank 0 and tp 2
 * on rank 1 mean the same layout of a world of 2 and agree. A default that cannot be applied (tp
 * 0 with pp 3) takes part as given: its peers get MISMATCH at once instead of waiting. */
static int defaults_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->rank == 0 ? 0 : 2;
  cfg.expert_parallel_size = self->rank == 0 ? 0 : 1;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  float x = 1.0f;
  RANK_OK(self, pstate_tp_allreduce(ps, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == 2.0f, "tp all_reduce: %g", x);
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  cfg.pipeline_parallel_size = self->rank == 0 ? 3 : 1;
  double t0 = pstate_test_now_ms();
  pstate_status_t s = pstate_initialize_model_parallel(ps, &cfg);
  const char *m = pstate_last_error();
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "tp 0 pp 3 vs tp 2 pp 1 -> %s (%s)", pstate_status_string(s), m);
  RANK_CHECK(self, pstate_test_now_ms() - t0 < 10000, "took %.0f ms", pstate_test_now_ms() - t0);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_zero_sizes_compare_as_their_defaults(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, defaults_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ranks_with_different_configs_all_get_mismatch_then_agree_and_finalize),
      cmocka_unit_test(test_ranks_with_different_configs_all_get_mismatch_then_abort),
      cmocka_unit_test(test_same_invalid_config_is_invalid_argument_on_every_rank),
      cmocka_unit_test(test_zero_sizes_compare_as_their_defaults),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
