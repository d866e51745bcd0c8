/*
 * test_shrink_threads.c — pstate_shrink and pstate_grow with ranks as threads of one process (so
 * that the TSan job runs them: the agreement's store polling, the world's rebuild, the failure
 * notices' worker progress, each context on its own thread).
 *
 * Nobody dies here (a thread cannot be killed alone; tests/api/test_shrink.c kills processes):
 * world 3, model parallel tp 3; every rank shrinks: the same world, renumbered as before, old
 * groups refused, the world and a new tp exact; pstate_grow with nobody waiting times out, the
 * world unchanged and usable; a second shrink works too (epochs go on); finalize.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ranks.h"

static int world_sum_is(const pstate_test_rank_t *self, pstate_t *ps, int want) {
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  int32_t mine = self->rank + 1, sum = 0;
  RANK_OK(self, pstate_all_reduce(world, &mine, &sum, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, sum == want, "world sum %d, expected %d", sum, want);
  return 0;
}

static int shrink_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 3;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *old_tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &old_tp));
  pstate_group_t *old_world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &old_world));
  for (int round = 0; round < 2; ++round) {
    int new_rank[3] = {-9, -9, -9};
    RANK_OK(self, pstate_shrink(ps, new_rank, 3, &(size_t){0}));
    RANK_CHECK(self, new_rank[0] == 0 && new_rank[1] == 1 && new_rank[2] == 2, "round %d: %d %d %d", round,
               new_rank[0], new_rank[1], new_rank[2]);
    int32_t x = 1;
    RANK_CHECK(self, pstate_all_reduce(old_tp, &x, &x, 1, PSTATE_INT32, PSTATE_SUM, NULL) == PSTATE_ERR_INVALID_STATE,
               "a group of before the shrink is refused");
    /* it names the call that dropped it and what to use (issue 44: it said pstate_destroy_model_parallel) */
    const char *why = pstate_last_error();
    RANK_CHECK(self,
               strstr(why, "replaced by pstate_shrink") && strstr(why, "use the groups of the shrunk context") &&
                   !strstr(why, "pstate_destroy_model_parallel"),
               "round %d: the old tp group says: %s", round, why);
    RANK_CHECK(self,
               pstate_barrier(old_world) == PSTATE_ERR_INVALID_STATE &&
                   strstr(pstate_last_error(), "replaced by pstate_shrink"),
               "round %d: the old world group says: %s", round, pstate_last_error());
    RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &old_world));
    if (world_sum_is(self, ps, 6)) return 1;
    RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
    RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &old_tp));
    float v = (float)(self->rank + 1);
    RANK_OK(self, pstate_all_reduce(old_tp, &v, &v, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
    RANK_CHECK(self, v == 6.0f, "tp sum %g", v);
  }
  pstate_status_t s = pstate_grow(ps, 200);
  RANK_CHECK(self, s == PSTATE_ERR_TIMEOUT, "grow with nobody waiting: %s: %s", pstate_status_string(s),
             pstate_last_error());
  if (world_sum_is(self, ps, 6)) return 1;
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_shrink_and_grow_with_ranks_as_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(3, 120, shrink_rank, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shrink_and_grow_with_ranks_as_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
