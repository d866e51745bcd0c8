/*
 * test_interrupt.c — pstate_set_interrupt_check: a rank blocked in a call whose peer never comes
 * is stopped by its interrupt check (here: a flag a real signal handler sets, as a language
 * runtime's Ctrl-C would) with PSTATE_ERR_INTERRUPTED within a generous bound, on the UCX path
 * (recv) and in shared memory (a world all_reduce); the context is then failed (ABORTED naming
 * the interruption) and pstate_abort frees it. A check that answers 0 is asked at least every
 * ~100 ms of a wait and changes nothing.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "ranks.h"

typedef enum { kRecv, kAllReduce } blocked_op_t;

static volatile sig_atomic_t g_signalled;
static volatile double g_signalled_at_ms; /* written by the handler (clock_gettime is async-signal-safe) */

static void on_alarm(int sig) {
  (void)sig;
  g_signalled_at_ms = pstate_test_now_ms();
  g_signalled = 1;
}

static int flag_check(void *user) {
  (void)user;
  return g_signalled;
}

/* SIGALRM after ms, without SA_RESTART (so it interrupts poll/futex, as Python's handler does). */
static void arm_alarm(int ms) {
  struct sigaction sa;
  struct itimerval t;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  memset(&t, 0, sizeof t);
  t.it_value.tv_sec = ms / 1000;
  t.it_value.tv_usec = (ms % 1000) * 1000;
  setitimer(ITIMER_REAL, &t, NULL);
}

static int blocked_rank(const pstate_test_rank_t *self) {
  blocked_op_t op = *(const blocked_op_t *)self->arg;
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[4] = {1, 2, 3, 4};
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  if (self->rank == 1) { /* never joins: stays away until rank 0 is done, then leaves */
    usleep(2500 * 1000);
    RANK_OK(self, pstate_abort(ps));
    return 0;
  }
  RANK_OK(self, pstate_set_interrupt_check(ps, flag_check, NULL));
  g_signalled = 0;
  g_signalled_at_ms = 0;
  double t0 = pstate_test_now_ms();
  arm_alarm(300);
  pstate_status_t s = op == kRecv ? pstate_recv(world, x, 4, PSTATE_FLOAT32, 1, NULL)
                                  : pstate_all_reduce(world, x, x, 4, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  double done = pstate_test_now_ms();
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", pstate_last_error());
  RANK_CHECK(self, s == PSTATE_ERR_INTERRUPTED, "%s -> %s (%s)", op == kRecv ? "recv" : "all_reduce",
             pstate_status_string(s), msg);
  RANK_CHECK(self, strstr(msg, "interrupted") && strstr(msg, "pstate_abort"), "message: %s", msg);
  RANK_CHECK(self, g_signalled_at_ms > 0 && done - g_signalled_at_ms < 1000,
             "returned %.0f ms after the signal (%.0f ms after the start)",
             done - g_signalled_at_ms, done - t0);
  printf("rank 0: %s interrupted %.0f ms after the signal (%.0f ms after the call began)\n",
         op == kRecv ? "recv" : "all_reduce", done - g_signalled_at_ms, done - t0);
  /* the documented state: failed, later calls ABORTED naming the interruption; abort frees it */
  s = pstate_barrier(world);
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED && strstr(pstate_last_error(), "interrupted"), "barrier after: %s (%s)",
             pstate_status_string(s), pstate_last_error());
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_interrupt_check_stops_a_recv_whose_sender_never_comes(void **state) {
  blocked_op_t op = kRecv;
  assert_int_equal(pstate_test_run_processes(2, 60, blocked_rank, &op, NULL), 0);
}

static void test_interrupt_check_stops_a_shared_memory_all_reduce_a_peer_never_joins(void **state) {
  blocked_op_t op = kAllReduce;
  assert_int_equal(pstate_test_run_processes(2, 60, blocked_rank, &op, NULL), 0);
}

/* A check that answers 0: asked during the wait (at least every ~100 ms), the call completes. */
static int g_asked;
static int never(void *user) {
  ++*(int *)user;
  return 0;
}

static int patient_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[2] = {1, 2};
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_set_interrupt_check(ps, never, &g_asked));
  if (self->rank == 1) {
    usleep(700 * 1000);
    RANK_OK(self, pstate_send(world, x, 2, PSTATE_FLOAT32, 0, NULL));
  } else {
    double t0 = pstate_test_now_ms();
    RANK_OK(self, pstate_recv(world, x, 2, PSTATE_FLOAT32, 1, NULL));
    double waited = pstate_test_now_ms() - t0;
    RANK_CHECK(self, g_asked >= 3, "the check was asked %d times in a %.0f ms wait", g_asked, waited);
    RANK_OK(self, pstate_set_interrupt_check(ps, NULL, NULL));
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_a_check_that_answers_zero_is_asked_and_changes_nothing(void **state) {
  assert_int_equal(pstate_test_run_processes(2, 60, patient_rank, NULL, NULL), 0);
}

static void test_set_interrupt_check_refuses_a_null_context(void **state) {
  assert_int_equal(pstate_set_interrupt_check(NULL, never, NULL), PSTATE_ERR_INVALID_ARGUMENT);
  assert_string_equal(pstate_status_string(PSTATE_ERR_INTERRUPTED), "PSTATE_ERR_INTERRUPTED");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_set_interrupt_check_refuses_a_null_context),
      cmocka_unit_test(test_interrupt_check_stops_a_recv_whose_sender_never_comes),
      cmocka_unit_test(test_interrupt_check_stops_a_shared_memory_all_reduce_a_peer_never_joins),
      cmocka_unit_test(test_a_check_that_answers_zero_is_asked_and_changes_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
