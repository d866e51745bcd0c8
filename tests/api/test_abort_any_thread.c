/*
 * test_abort_any_thread.c — pstate_abort and pstate_revoke from another thread (issue 32, item 3):
 * a serving runtime's watchdog (torch's ProcessGroupNCCL watchdog, vLLM's, SGLang's) stops a call
 * that hangs from its own thread, as ncclCommAbort does for NCCL.
 *
 * The setting of every case: the driving thread of rank 0 is blocked in a call whose peer never
 * comes (its context timeout is 60 s, far beyond what the case waits), and a watchdog thread of
 * the same process stops it:
 *   - pstate_abort from the watchdog: the blocked call returns PSTATE_ERR_ABORTED naming the abort,
 *     and pstate_abort returns OK once it has returned, having freed the context; on shared memory
 *     (a world all_reduce; recv over the shared-memory rings) and over UCX (PSTATE_SHM=0: recv,
 *     all_reduce, and the wait of an irecv);
 *   - pstate_revoke from the watchdog: the same ABORTED, nothing freed: every later call on the
 *     context is ABORTED at entry, and the driving thread frees it with pstate_abort;
 *   - its peer is told: both ranks blocked in a recv from each other, the watchdog aborts rank 0,
 *     and rank 1's recv ends with an error from rank 0's failure notice (not its own 60 s timeout);
 *   - pstate_abort from inside the call on the same thread (the interrupt check, where a language
 *     runtime runs its signal handlers) is PSTATE_ERR_BUSY at once, the call then returns ABORTED,
 *     and a second pstate_abort frees;
 *   - pstate_finalize from another thread while a call is inside is PSTATE_ERR_BUSY naming that
 *     call, nothing freed (the context still works afterwards);
 *   - as threads of one process (ranks as threads, so ThreadSanitizer sees every thread of both
 *     ranks): rank 0's watchdog aborts its all_reduce while rank 1 stays away.
 * "Within milliseconds" is what the abort is for; these tests only assert that the call ended by
 * the abort (ABORTED, well before the 60 s timeout), and print the time it took.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* clang-format off: cmocka.h needs the four above first */
#include <cmocka.h>
/* clang-format on */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"

#define TIMEOUT_MS 60000
#define WATCHDOG_DELAY_MS 300
#define BOUND_MS 10000 /* ended by the abort, not by the 60 s timeout */

typedef enum { kAllReduce, kRecv, kIrecvWait } blocked_op_t;
typedef enum { kAbort, kRevoke } stop_t;

typedef struct case_t {
  blocked_op_t op;
  stop_t stop;
  int ucx;           /* PSTATE_SHM=0 in the ranks */
  int peer_blocked;  /* rank 1 blocks in a recv from rank 0 instead of staying away */
} case_t;

typedef struct watchdog_t {
  pstate_t *ps;
  stop_t stop;
  atomic_int armed;
  double fired_at_ms;
  pstate_status_t status;
  char error[1024];
} watchdog_t;

/* Fires once the driving thread is inside its call (a probe that finds the context busy: a
 * pstate_abort before the call began would free the context under it), then WATCHDOG_DELAY_MS
 * later, so the call is deep in its wait. The probe may itself make the driver's entry BUSY for
 * a moment: the driver retries on BUSY (blocked_call). */
static void *watchdog_thread(void *arg) {
  watchdog_t *w = arg;
  while (!atomic_load(&w->armed)) usleep(1000);
  pstate_group_t *g = NULL;
  while (pstate_get_group(w->ps, PSTATE_GROUP_WORLD, &g) != PSTATE_ERR_BUSY) usleep(1000);
  usleep(WATCHDOG_DELAY_MS * 1000);
  w->fired_at_ms = pstate_test_now_ms();
  w->status = w->stop == kAbort ? pstate_abort(w->ps) : pstate_revoke(w->ps);
  snprintf(w->error, sizeof w->error, "%s", w->status == PSTATE_OK ? "" : pstate_last_error());
  return NULL;
}

static const char *op_name(blocked_op_t op) {
  return op == kAllReduce ? "all_reduce" : op == kRecv ? "recv" : "irecv+wait";
}

/* The call the watchdog stops; BUSY (the watchdog's probe held the context at that moment) is
 * retried. */
static pstate_status_t blocked_call(pstate_group_t *g, blocked_op_t op, float *x, int peer) {
  pstate_status_t s;
  if (op == kAllReduce) {
    while ((s = pstate_all_reduce(g, x, x, 4, PSTATE_FLOAT32, PSTATE_SUM, NULL)) == PSTATE_ERR_BUSY) {
    }
    return s;
  }
  if (op == kRecv) {
    while ((s = pstate_recv(g, x, 4, PSTATE_FLOAT32, peer, NULL)) == PSTATE_ERR_BUSY) {
    }
    return s;
  }
  pstate_request_t *req = NULL;
  while ((s = pstate_irecv(g, x, 4, PSTATE_FLOAT32, peer, NULL, &req)) == PSTATE_ERR_BUSY) {
  }
  if (s != PSTATE_OK) return s;
  while ((s = pstate_wait(req)) == PSTATE_ERR_BUSY) {
  }
  return s;
}

static int stopped_rank(const pstate_test_rank_t *self) {
  const case_t *c = self->arg;
  if (c->ucx) setenv("PSTATE_SHM", "0", 1);
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[4] = {1, 2, 3, 4};
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_barrier(world)); /* both up: what follows blocks only on the missing peer */
  if (self->rank == 1) {
    if (!c->peer_blocked) { /* never joins: stays away until rank 0 is done, then leaves */
      usleep(2 * WATCHDOG_DELAY_MS * 1000 + 1500 * 1000);
      RANK_OK(self, pstate_abort(ps));
      return 0;
    }
    double t0 = pstate_test_now_ms();
    pstate_status_t s = pstate_recv(world, x, 4, PSTATE_FLOAT32, 0, NULL); /* rank 0 never sends */
    double took = pstate_test_now_ms() - t0;
    RANK_CHECK(self, s != PSTATE_OK && s != PSTATE_ERR_TIMEOUT && took < BOUND_MS,
               "rank 1's recv after rank 0 aborted: %s after %.0f ms (%s)", pstate_status_string(s), took,
               pstate_last_error());
    printf("rank 1: recv ended %s after %.0f ms: %s\n", pstate_status_string(s), took, pstate_last_error());
    RANK_OK(self, pstate_abort(ps));
    return 0;
  }
  watchdog_t w;
  memset(&w, 0, sizeof w);
  w.ps = ps;
  w.stop = c->stop;
  pthread_t t;
  RANK_CHECK(self, pthread_create(&t, NULL, watchdog_thread, &w) == 0, "watchdog thread");
  atomic_store(&w.armed, 1);
  pstate_status_t s = blocked_call(world, c->op, x, 1);
  double done = pstate_test_now_ms();
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", pstate_last_error());
  pthread_join(t, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED, "%s -> %s (%s)", op_name(c->op), pstate_status_string(s), msg);
  RANK_CHECK(self, strstr(msg, "from another thread") != NULL, "the message names the abort: %s", msg);
  RANK_CHECK(self, done - w.fired_at_ms < BOUND_MS, "%s returned %.0f ms after the watchdog fired", op_name(c->op),
             done - w.fired_at_ms);
  RANK_CHECK(self, w.status == PSTATE_OK, "%s from the watchdog: %s (%s)", c->stop == kAbort ? "abort" : "revoke",
             pstate_status_string(w.status), w.error);
  printf("rank 0: %s on %s returned ABORTED %.1f ms after the watchdog's %s\n", op_name(c->op),
         c->ucx ? "UCX" : "shared memory", done - w.fired_at_ms, c->stop == kAbort ? "pstate_abort" : "pstate_revoke");
  if (c->stop == kRevoke) { /* nothing freed: later calls are refused at entry, abort frees */
    s = pstate_barrier(world);
    RANK_CHECK(self, s == PSTATE_ERR_ABORTED && strstr(pstate_last_error(), "from another thread"),
               "barrier after revoke: %s (%s)", pstate_status_string(s), pstate_last_error());
    RANK_OK(self, pstate_revoke(ps)); /* idempotent */
    RANK_OK(self, pstate_abort(ps));
  }
  /* kAbort: the watchdog's pstate_abort freed ps; nothing may touch it now */
  return 0;
}

static void run_case(blocked_op_t op, stop_t stop, int ucx, int peer_blocked) {
  case_t c = {op, stop, ucx, peer_blocked};
  assert_int_equal(pstate_test_run_processes(2, 90, stopped_rank, &c, NULL), 0);
}

static void test_abort_from_a_watchdog_stops_a_shared_memory_all_reduce(void **state) {
  (void)state;
  run_case(kAllReduce, kAbort, 0, 0);
}
static void test_abort_from_a_watchdog_stops_a_shared_memory_recv(void **state) {
  (void)state;
  run_case(kRecv, kAbort, 0, 0);
}
static void test_abort_from_a_watchdog_stops_a_ucx_recv(void **state) {
  (void)state;
  run_case(kRecv, kAbort, 1, 0);
}
static void test_abort_from_a_watchdog_stops_a_ucx_all_reduce(void **state) {
  (void)state;
  run_case(kAllReduce, kAbort, 1, 0);
}
static void test_abort_from_a_watchdog_stops_the_wait_of_an_irecv(void **state) {
  (void)state;
  run_case(kIrecvWait, kAbort, 1, 0);
  run_case(kIrecvWait, kAbort, 0, 0);
}
static void test_revoke_stops_the_call_frees_nothing_and_refuses_later_calls(void **state) {
  (void)state;
  run_case(kAllReduce, kRevoke, 0, 0);
  run_case(kRecv, kRevoke, 1, 0);
}
static void test_the_peer_of_an_aborted_rank_hears_it_before_its_timeout(void **state) {
  (void)state;
  run_case(kRecv, kAbort, 0, 1);
  run_case(kRecv, kAbort, 1, 1);
}

/* ---- an idle stop is heard (reliability round 3, item 5) ------------------------------------------
 * Rank 0 calls pstate_abort, or pstate_revoke, while no call of it is in flight, and stays alive;
 * rank 1 is blocked in a call with it (a shared-memory all_reduce; a UCX recv) with a 60 s
 * timeout. Rank 1's call must end with ABORTED from rank 0's failure notice, well before that
 * timeout (before the fix it waited the whole timeout and was told rank 0 "is alive"). After the
 * revoke, rank 0's own next call is ABORTED at entry and pstate_abort frees: the watchdog pattern. */

static int idle_stop_rank(const pstate_test_rank_t *self) {
  const case_t *c = self->arg;
  if (c->ucx) setenv("PSTATE_SHM", "0", 1);
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[4] = {1, 2, 3, 4};
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_barrier(world));
  if (self->rank == 0) {
    usleep(WATCHDOG_DELAY_MS * 1000); /* rank 1 is deep in its wait */
    if (c->stop == kRevoke) {
      RANK_OK(self, pstate_revoke(ps));
      pstate_status_t s = pstate_all_reduce(world, x, x, 4, PSTATE_FLOAT32, PSTATE_SUM, NULL);
      RANK_CHECK(self, s == PSTATE_ERR_ABORTED, "the driving thread's call after the revoke: %s (%s)",
                 pstate_status_string(s), pstate_last_error());
      usleep(3000 * 1000); /* alive: rank 1 must hear the revoke, not a death */
      RANK_OK(self, pstate_abort(ps));
    } else {
      RANK_OK(self, pstate_abort(ps));
      usleep(3000 * 1000); /* alive after the abort */
    }
    return 0;
  }
  double t0 = pstate_test_now_ms();
  pstate_status_t s = c->op == kAllReduce ? pstate_all_reduce(world, x, x, 4, PSTATE_FLOAT32, PSTATE_SUM, NULL)
                                          : pstate_recv(world, x, 4, PSTATE_FLOAT32, 0, NULL);
  double took = pstate_test_now_ms() - t0;
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED && took < BOUND_MS && strstr(pstate_last_error(), "failure notice: rank 0"),
             "rank 1's %s after rank 0's idle %s: %s after %.0f ms (%s)", op_name(c->op),
             c->stop == kAbort ? "pstate_abort" : "pstate_revoke", pstate_status_string(s), took, pstate_last_error());
  printf("rank 1: %s ended %s after %.0f ms\n", op_name(c->op), pstate_status_string(s), took);
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_an_idle_abort_or_revoke_is_heard_by_a_blocked_peer(void **state) {
  (void)state;
  const case_t cases[] = {{kAllReduce, kAbort, 0, 0}, {kRecv, kRevoke, 1, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    printf("  %s, rank 0 idle, %s\n", cases[i].ucx ? "UCX recv" : "shared-memory all_reduce",
           cases[i].stop == kAbort ? "pstate_abort" : "pstate_revoke then pstate_abort");
    fflush(stdout);
    assert_int_equal(pstate_test_run_processes(2, 60, idle_stop_rank, (void *)&cases[i], NULL), 0);
  }
}

/* ---- pstate_abort from inside a call on the same thread (a signal handler run by the interrupt
 * check): BUSY at once, the call returns ABORTED, a second abort frees ---------------------------- */

typedef struct inner_abort_t {
  pstate_t *ps;
  int calls;
  pstate_status_t status;
  char error[1024];
} inner_abort_t;

static int abort_from_the_check(void *user) {
  inner_abort_t *a = user;
  if (a->calls++ == 0) {
    a->status = pstate_abort(a->ps);
    snprintf(a->error, sizeof a->error, "%s", pstate_last_error());
  }
  return 0; /* the check does not interrupt: the abort it requested stops the wait */
}

static int inner_abort_rank(const pstate_test_rank_t *self) {
  const case_t *c = self->arg;
  if (c->ucx) setenv("PSTATE_SHM", "0", 1);
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[4] = {1, 2, 3, 4};
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_barrier(world));
  if (self->rank == 1) {
    usleep(1500 * 1000);
    RANK_OK(self, pstate_abort(ps));
    return 0;
  }
  inner_abort_t a = {ps, 0, PSTATE_OK, ""};
  RANK_OK(self, pstate_set_interrupt_check(ps, abort_from_the_check, &a));
  double t0 = pstate_test_now_ms();
  pstate_status_t s = blocked_call(world, c->op, x, 1);
  double took = pstate_test_now_ms() - t0;
  RANK_CHECK(self, a.status == PSTATE_ERR_BUSY && strstr(a.error, "same thread") != NULL,
             "pstate_abort from the interrupt check: %s (%s)", pstate_status_string(a.status), a.error);
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED && took < BOUND_MS, "%s: %s after %.0f ms (%s)", op_name(c->op),
             pstate_status_string(s), took, pstate_last_error());
  RANK_OK(self, pstate_abort(ps)); /* now nobody is inside: frees */
  return 0;
}

static void test_abort_from_inside_a_call_on_the_same_thread_is_busy_then_the_call_is_aborted(void **state) {
  (void)state;
  case_t shm = {kAllReduce, kAbort, 0, 0}, ucx = {kRecv, kAbort, 1, 0};
  assert_int_equal(pstate_test_run_processes(2, 90, inner_abort_rank, &shm, NULL), 0);
  assert_int_equal(pstate_test_run_processes(2, 90, inner_abort_rank, &ucx, NULL), 0);
}

/* ---- finalize from another thread: BUSY, nothing freed ---------------------------------------- */

typedef struct inside_t {
  pstate_group_t *g;
  atomic_int entering;
  pstate_status_t status;
} inside_t;

static void *barrier_thread(void *arg) {
  inside_t *b = arg;
  atomic_store(&b->entering, 1);
  b->status = pstate_barrier(b->g);
  return NULL;
}

static int busy_finalize_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  if (self->rank == 1) {
    usleep(1000 * 1000); /* rank 0's barrier waits for this long */
    RANK_OK(self, pstate_barrier(g));
  } else {
    inside_t b = {g, 0, PSTATE_OK};
    pthread_t t;
    RANK_CHECK(self, pthread_create(&t, NULL, barrier_thread, &b) == 0, "thread");
    while (!atomic_load(&b.entering)) usleep(1000);
    usleep(200 * 1000);
    pstate_status_t s = pstate_finalize(ps);
    RANK_CHECK(self, s == PSTATE_ERR_BUSY && strstr(pstate_last_error(), "nothing freed") &&
                         strstr(pstate_last_error(), "pstate_barrier"),
               "finalize while a barrier is inside: %s (%s)", pstate_status_string(s), pstate_last_error());
    RANK_CHECK(self, strcmp(pstate_status_string(PSTATE_ERR_BUSY), "PSTATE_ERR_BUSY") == 0, "status string");
    pthread_join(t, NULL);
    RANK_CHECK(self, b.status == PSTATE_OK, "the barrier: %s", pstate_status_string(b.status));
  }
  float x = 1.0f;
  RANK_OK(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL)); /* still works */
  RANK_CHECK(self, x == 2.0f, "all_reduce after: %g", (double)x);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_finalize_while_another_thread_is_inside_is_busy_and_frees_nothing(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 90, busy_finalize_rank, NULL, NULL), 0);
}

/* ---- ranks as threads: ThreadSanitizer sees the watchdog, the blocked call and the peer ------- */

static int thread_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[4] = {1, 2, 3, 4};
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_barrier(world));
  if (self->rank == 1) {
    usleep(2 * WATCHDOG_DELAY_MS * 1000 + 1000 * 1000);
    RANK_OK(self, pstate_abort(ps));
    return 0;
  }
  watchdog_t w;
  memset(&w, 0, sizeof w);
  w.ps = ps;
  w.stop = kAbort;
  pthread_t t;
  RANK_CHECK(self, pthread_create(&t, NULL, watchdog_thread, &w) == 0, "watchdog thread");
  atomic_store(&w.armed, 1);
  pstate_status_t s = blocked_call(world, kAllReduce, x, 1);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", pstate_last_error());
  pthread_join(t, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED && strstr(msg, "from another thread"), "all_reduce: %s (%s)",
             pstate_status_string(s), msg);
  RANK_CHECK(self, w.status == PSTATE_OK, "abort from the watchdog: %s (%s)", pstate_status_string(w.status), w.error);
  return 0;
}

static void test_abort_from_a_watchdog_thread_with_ranks_as_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 90, thread_rank, NULL), 0);
  setenv("PSTATE_SHM", "0", 1);
  int r = pstate_test_run_threads(2, 90, thread_rank, NULL);
  unsetenv("PSTATE_SHM");
  assert_int_equal(r, 0);
}

static void test_revoke_and_abort_of_null(void **state) {
  (void)state;
  assert_int_equal(pstate_revoke(NULL), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pstate_abort(NULL), PSTATE_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_revoke_and_abort_of_null),
      cmocka_unit_test(test_abort_from_a_watchdog_stops_a_shared_memory_all_reduce),
      cmocka_unit_test(test_abort_from_a_watchdog_stops_a_shared_memory_recv),
      cmocka_unit_test(test_abort_from_a_watchdog_stops_a_ucx_recv),
      cmocka_unit_test(test_abort_from_a_watchdog_stops_a_ucx_all_reduce),
      cmocka_unit_test(test_abort_from_a_watchdog_stops_the_wait_of_an_irecv),
      cmocka_unit_test(test_revoke_stops_the_call_frees_nothing_and_refuses_later_calls),
      cmocka_unit_test(test_the_peer_of_an_aborted_rank_hears_it_before_its_timeout),
      cmocka_unit_test(test_an_idle_abort_or_revoke_is_heard_by_a_blocked_peer),
      cmocka_unit_test(test_abort_from_inside_a_call_on_the_same_thread_is_busy_then_the_call_is_aborted),
      cmocka_unit_test(test_finalize_while_another_thread_is_inside_is_busy_and_frees_nothing),
      cmocka_unit_test(test_abort_from_a_watchdog_thread_with_ranks_as_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
