/*
 * test_local_rank.c — ranks started without LOCAL_RANK (a plain launcher, a shell loop, an
 * orchestrator) get their local rank from the rendezvous: the rank's place among the ranks of its
 * host, in rank order; an explicit LOCAL_RANK is kept; values that would put two ranks of a host on
 * one local rank are MISMATCH on every rank of the host, naming both ranks and where each value
 * came from.
 *
 * Processes get RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from tests/support/ranks.c; each case
 * unsets or overrides LOCAL_RANK and LOCAL_WORLD_SIZE before pstate_init.
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

#define N 4

/* what LOCAL_RANK each rank of a case gets: -1 = unset */
typedef struct local_case_t {
  int local_rank[N];
  int want_mismatch;
  const char *needle; /* in the MISMATCH message */
} local_case_t;

static int local_rank_rank(const pstate_test_rank_t *self) {
  const local_case_t *c = self->arg;
  unsetenv("LOCAL_WORLD_SIZE");
  if (c->local_rank[self->rank] < 0) {
    unsetenv("LOCAL_RANK");
  } else {
    char v[16];
    snprintf(v, sizeof v, "%d", c->local_rank[self->rank]);
    setenv("LOCAL_RANK", v, 1);
  }
  pstate_t *ps = NULL;
  double t0 = pstate_test_now_ms();
  pstate_status_t s = pstate_init(NULL, &ps);
  if (c->want_mismatch) {
    const char *m = pstate_last_error();
    RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "pstate_init -> %s (%s)", pstate_status_string(s), m);
    RANK_CHECK(self, strstr(m, c->needle) != NULL, "message lacks \"%s\": %s", c->needle, m);
    RANK_CHECK(self, pstate_test_now_ms() - t0 < 20000, "took %.0f ms", pstate_test_now_ms() - t0);
    return 0;
  }
  RANK_OK(self, s);
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(world, &info));
  /* one host: the local rank is the given one, else the rank's place in rank order */
  int want = c->local_rank[self->rank] >= 0 ? c->local_rank[self->rank] : self->rank;
  RANK_CHECK(self, info.local_rank == want, "local_rank %d, want %d", info.local_rank, want);
  int32_t x = self->rank + 1, sum = 0;
  RANK_OK(self, pstate_all_reduce(world, &x, &sum, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, sum == N * (N + 1) / 2, "sum %d", sum);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run(const local_case_t *c) {
  assert_int_equal(pstate_test_run_processes(N, 120, local_rank_rank, (void *)c, NULL), 0);
}

static void test_no_local_rank_anywhere_is_derived_in_rank_order(void **state) {
  (void)state;
  local_case_t c = {{-1, -1, -1, -1}, 0, NULL};
  run(&c);
}

static void test_explicit_local_ranks_are_kept_even_out_of_rank_order(void **state) {
  (void)state;
  local_case_t c = {{3, 2, 1, 0}, 0, NULL};
  run(&c);
}

static void test_explicit_duplicate_local_ranks_are_mismatch(void **state) {
  (void)state;
  local_case_t c = {{0, 1, 0, 3}, 1, "ranks 0 and 2 on host"};
  run(&c);
  local_case_t d = {{0, 1, 0, 3}, 1, "both have local_rank 0: give each rank of a host its own LOCAL_RANK"};
  run(&d);
}

static void test_given_and_derived_colliding_is_mismatch_naming_both_origins(void **state) {
  (void)state;
  /* rank 3 has none: its place on the host is 3, which rank 0 was given */
  local_case_t c = {{3, 1, 2, -1}, 1, "rank 0 has LOCAL_RANK 3, rank 3 has none (derived 3)"};
  run(&c);
  local_case_t d = {{3, 1, 2, -1}, 1, "set LOCAL_RANK on every rank of a host, or on none"};
  run(&d);
}

/* Threads of one process, local_rank -1 in the parameters: derived too. */
static int thread_rank(const pstate_test_rank_t *self) {
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.init_method = self->init_method;
  p.rank = self->rank;
  p.world_size = self->world_size;
  p.timeout_ms = 20000;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_init(&p, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(world, &info));
  RANK_CHECK(self, info.local_rank == self->rank, "local_rank %d", info.local_rank);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_threads_without_local_rank_parameter_are_derived(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(3, 120, thread_rank, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_local_rank_anywhere_is_derived_in_rank_order),
      cmocka_unit_test(test_explicit_local_ranks_are_kept_even_out_of_rank_order),
      cmocka_unit_test(test_explicit_duplicate_local_ranks_are_mismatch),
      cmocka_unit_test(test_given_and_derived_colliding_is_mismatch_naming_both_origins),
      cmocka_unit_test(test_threads_without_local_rank_parameter_are_derived),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
