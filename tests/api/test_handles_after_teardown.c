/*
 * test_handles_after_teardown.c — the documented answers of handles after teardown, none of
 * which reads freed memory (the test is part of the ASan job, .ci/sanitizers.sh asan).
 *
 * pstate.h, "Handles after teardown": groups dropped by pstate_destroy_model_parallel stay
 * allocated until finalize and every operation on them returns INVALID_STATE, also after a new
 * pstate_initialize_model_parallel (a stale group never works on the new layout's groups); their
 * facts stay readable; pstate_finalize(NULL) and pstate_abort(NULL) are no-ops;
 * pstate_model_parallel_is_initialized(NULL) is 0. Using a pstate_t or a group after
 * pstate_finalize/abort freed it is undefined behaviour and deliberately not tested.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ranks.h"

#define RANK_DESTROYED(self, call)                                                                        \
  do {                                                                                                    \
    pstate_status_t s_ = (call);                                                                          \
    RANK_CHECK(self, s_ == PSTATE_ERR_INVALID_STATE && strstr(pstate_last_error(), "destroyed"),          \
               "%s on a destroyed group: %s (%s)", #call, pstate_status_string(s_), pstate_last_error());  \
  } while (0)

static int destroyed_groups_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->world_size;
  pstate_group_t *old_tp[3] = {NULL, NULL, NULL};
  for (int round = 0; round < 3; ++round) {
    RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
    RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &old_tp[round]));
    float x = 1.0f;
    RANK_OK(self, pstate_all_reduce(old_tp[round], &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
    RANK_CHECK(self, x == (float)self->world_size, "round %d: tp sum %g", round, x);
    /* every group of every earlier round still answers INVALID_STATE on the new layout */
    for (int old = 0; old < round; ++old) {
      pstate_group_t *g = old_tp[old];
      RANK_DESTROYED(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
      RANK_DESTROYED(self, pstate_barrier(g));
    }
    RANK_OK(self, pstate_destroy_model_parallel(ps));
    pstate_group_t *g = old_tp[round];
    int32_t v[4] = {0, 0, 0, 0}, all[16];
    RANK_DESTROYED(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
    RANK_DESTROYED(self, pstate_all_gather(g, v, all, 1, PSTATE_INT32, NULL));
    RANK_DESTROYED(self, pstate_broadcast(g, v, 1, PSTATE_INT32, 0, NULL));
    RANK_DESTROYED(self, pstate_barrier(g));
    pstate_bytes_t out = {NULL, 0};
    RANK_DESTROYED(self, pstate_broadcast_object(g, "x", 1, 0, &out));
    pstate_bytes_free(&out);
    /* facts stay readable: the group is retired, not freed */
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(g, &info));
    RANK_CHECK(self, info.world_size == self->world_size && info.rank == self->rank, "info of a destroyed group");
    RANK_CHECK(self, pstate_model_parallel_is_initialized(ps) == 0, "destroyed");
  }
  /* the world group is untouched by destroy */
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  RANK_OK(self, pstate_barrier(w));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_destroyed_groups_answer_invalid_state_across_reinitializations(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, destroyed_groups_rank, NULL, NULL), 0);
}

static void test_null_handles_are_no_ops_or_invalid_argument(void **state) {
  (void)state;
  assert_int_equal(pstate_finalize(NULL), PSTATE_OK);
  assert_int_equal(pstate_abort(NULL), PSTATE_OK);
  assert_int_equal(pstate_model_parallel_is_initialized(NULL), 0);
  assert_int_equal(pstate_destroy_model_parallel(NULL), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pstate_barrier(NULL), PSTATE_ERR_INVALID_ARGUMENT);
  pstate_group_t *g = (pstate_group_t *)1;
  assert_int_equal(pstate_get_group(NULL, PSTATE_GROUP_WORLD, &g), PSTATE_ERR_INVALID_ARGUMENT);
  assert_null(g);
}

/* Finalize and abort of a live context, then nothing more on it: the paths ASan watches. */
static int teardown_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));  /* live and retired groups at finalize */
  int *abort_instead = self->arg;
  if (*abort_instead) RANK_OK(self, pstate_abort(ps));
  else RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_finalize_with_live_and_destroyed_groups_frees_all(void **state) {
  (void)state;
  int abort_instead = 0;
  assert_int_equal(pstate_test_run_processes(2, 120, teardown_rank, &abort_instead, NULL), 0);
}

static void test_abort_with_live_and_destroyed_groups_frees_all(void **state) {
  (void)state;
  int abort_instead = 1;
  assert_int_equal(pstate_test_run_processes(2, 120, teardown_rank, &abort_instead, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_handles_are_no_ops_or_invalid_argument),
      cmocka_unit_test(test_destroyed_groups_answer_invalid_state_across_reinitializations),
      cmocka_unit_test(test_finalize_with_live_and_destroyed_groups_frees_all),
      cmocka_unit_test(test_abort_with_live_and_destroyed_groups_frees_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
