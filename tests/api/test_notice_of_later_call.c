/*
 * test_notice_of_later_call.c — one verdict per call: a failure notice of a later call never
 * decides an earlier one (reliability round 3, item 12; it made test_pairwise_matrix fail about
 * one fresh run in two).
 *
 * The race it pins down: rank 1 completes a barrier, then fails in its next call and tells every
 * member (a failure notice). Rank 2, still inside the same barrier with every part of it already
 * arrived, must return OK, as rank 1 did; before the fix it took the notice as the barrier's
 * verdict and returned another status (one barrier, two verdicts).
 *
 * Made deterministic without timing the library: rank 2 enters the barrier first and its
 * interrupt check (asked at the wait's liveness checks) holds it there, asleep, until rank 1
 * says (through a pipe) that it has failed and sent its notice; ranks 0 and 1 enter the barrier
 * only once rank 2 says (through another pipe) that its check was asked, i.e. that it is inside
 * the barrier's wait with its part sent (a fixed 150 ms head start was not enough under ASan on a
 * loaded machine: rank 2 had not reached its wait, the barrier completed without it waiting, and
 * the case failed with "the race was not made"); they then complete the barrier with rank 2's
 * part while it sleeps. Rank 1 fails its next call by
 * its own interrupt check (a receive nobody sends). Then:
 *   - rank 2's barrier returns OK (the notice is of a call after it);
 *   - rank 2's next call (another barrier) fails promptly with the held notice's verdict
 *     (ABORTED: rank 1 was interrupted), not at its timeout;
 *   - rank 0's barrier returned OK.
 * Both paths: UCX (PSTATE_SHM=0, the barrier folded into the agreement exchange: the case that
 * failed, on ranks 0 and 2) and shared memory (the barrier in the segment, notices over UCX; it
 * passed before the fix too, since the segment's wait looks at its flags before its liveness
 * check, and stays as the guard of that order).
 *
 * The converse (a rank that had not returned from the call still decides it: its peers fail
 * instead of completing what it gave up on) is test_no_wrong_answer's and test_faults' subject.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"

static int g_failed_pipe[2]; /* rank 1 writes a byte once its context failed (its notice is out) */
static int g_inside_pipe[2]; /* rank 2 writes two bytes (one for rank 0, one for rank 1) once inside */

/* Rank 2's check: the first time it is asked (inside the barrier), say so to ranks 0 and 1, then
 * sleep until rank 1 failed. */
static int hold_until_rank1_failed(void *user) {
  int *asked = (int *)user;
  if ((*asked)++ == 0) {
    const char two[2] = {1, 1};
    if (write(g_inside_pipe[1], two, 2) != 2) return 0;
    struct pollfd p = {g_failed_pipe[0], POLLIN, 0};
    (void)poll(&p, 1, 20000);
    usleep(100 * 1000); /* the notice is on its way: let it land in this rank's queue */
  }
  return 0;
}

static int stop_now(void *user) {
  (void)user;
  return 1;
}

static int notice_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  int asked = 0;
  RANK_OK(self, pstate_test_init(self, 10000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_barrier(world)); /* warm-up: every endpoint exists */

  if (self->rank == 2) {
    RANK_OK(self, pstate_set_interrupt_check(ps, hold_until_rank1_failed, &asked));
    pstate_status_t s = pstate_barrier(world);
    RANK_CHECK(self, asked > 0, "the interrupt check was never asked inside the barrier: the race was not made\n");
    RANK_CHECK(self, s == PSTATE_OK,
               "the barrier that every rank completed returned %s on rank 2 (%s): a notice of rank 1's later "
               "call decided it\n",
               pstate_status_string(s), pstate_last_error());
    double t0 = pstate_test_now_ms();
    s = pstate_barrier(world);
    double took = pstate_test_now_ms() - t0;
    RANK_CHECK(self, s == PSTATE_ERR_ABORTED, "the next barrier returned %s (%s): the held notice was lost\n",
               pstate_status_string(s), pstate_last_error());
    RANK_CHECK(self, took < 5000, "the next barrier took %.0f ms: the held notice did not decide it\n", took);
  } else {
    /* wait until rank 2 is asleep in its barrier's interrupt check (at most 20 s: if it never is,
     * its own check above fails the case) */
    struct pollfd p = {g_inside_pipe[0], POLLIN, 0};
    char one_byte = 0;
    if (poll(&p, 1, 20000) == 1) RANK_CHECK(self, read(g_inside_pipe[0], &one_byte, 1) == 1, "pipe read\n");
    RANK_OK(self, pstate_barrier(world));
    if (self->rank == 1) {
      int x = 0;
      RANK_OK(self, pstate_set_interrupt_check(ps, stop_now, NULL));
      pstate_status_t s = pstate_recv(world, &x, 1, PSTATE_INT32, 0, NULL);
      RANK_CHECK(self, s == PSTATE_ERR_INTERRUPTED, "rank 1's receive returned %s (%s)\n", pstate_status_string(s),
                 pstate_last_error());
      char one = 1;
      RANK_CHECK(self, write(g_failed_pipe[1], &one, 1) == 1, "pipe write\n");
    }
    usleep(1000 * 1000); /* stay until rank 2 has read the notice (an exit would be PEER_LOST) */
  }
  pstate_abort(ps);
  return 0;
}

static void run_case(const char *shm) {
  setenv("PSTATE_SHM", shm, 1);
  assert_int_equal(pipe(g_failed_pipe), 0);
  assert_int_equal(pipe(g_inside_pipe), 0);
  int statuses[3];
  int failed = pstate_test_run_processes(3, 60, notice_rank, NULL, statuses);
  close(g_failed_pipe[0]);
  close(g_failed_pipe[1]);
  close(g_inside_pipe[0]);
  close(g_inside_pipe[1]);
  unsetenv("PSTATE_SHM");
  assert_int_equal(failed, 0);
}

static void test_notice_of_later_call_does_not_decide_a_finished_barrier_ucx(void **state) {
  (void)state;
  run_case("0");
}

static void test_notice_of_later_call_does_not_decide_a_finished_barrier_shm(void **state) {
  (void)state;
  run_case("1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_notice_of_later_call_does_not_decide_a_finished_barrier_ucx),
      cmocka_unit_test(test_notice_of_later_call_does_not_decide_a_finished_barrier_shm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
