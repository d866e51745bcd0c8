/*
 * test_request_handles.c — what pstate_wait / pstate_test answer for a handle that is not a live
 * request: one an earlier wait or completed test already freed, a stale one whose number a later
 * request might have reused, a garbage pointer, NULL. Each is INVALID_ARGUMENT ("not a live
 * request"), reads no freed memory (valgrind- and ASan-clean: `valgrind --error-exitcode=1
 * build/tests/test_request_handles`) and never touches another request. The stale case is the one that
 * did harm: a request's handle was its heap address, so the next request often got the same one,
 * and wait(r1) completed (and freed) r2. Here r2 must be a different handle, stay pending through
 * the stale wait and test, and complete with its own message on its own wait.
 *
 * Also: a request pending while thousands of others are made and freed, and 400 pending at once,
 * keep their handles and messages (the registry's table skips and grows); a request cancelled at
 * pstate_finalize is freed by its ABORTED wait like any other; garbage handles need no context
 * (none of them is dereferenced, so an unmapped address is refused, not a crash); and a process
 * forked while threads post and complete requests can still use requests (the handle registry's
 * lock is never inherited locked).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"

#define TIMEOUT_MS 20000
#define NOT_LIVE "not a live request"

static pstate_group_t *world_of(pstate_t *ps) {
  pstate_group_t *g = NULL;
  return pstate_get_group(ps, PSTATE_GROUP_WORLD, &g) == PSTATE_OK ? g : NULL;
}

/* call must return INVALID_ARGUMENT saying that req is not a live request. */
#define EXPECT_NOT_LIVE(self, call)                                                                                 \
  do {                                                                                                              \
    pstate_status_t s_ = (call);                                                                                    \
    RANK_CHECK(self, s_ == PSTATE_ERR_INVALID_ARGUMENT, "%s -> %s (%s)", #call, pstate_status_string(s_),           \
               pstate_last_error());                                                                                \
    RANK_CHECK(self, strstr(pstate_last_error(), NOT_LIVE) != NULL, "%s: message '%s' lacks '" NOT_LIVE "'", #call, \
               pstate_last_error());                                                                                \
  } while (0)

/* What rank `from` sends as message `msg`. */
static float message(int from, int msg) { return (float)(from * 100 + msg); }

/* ---- freed and stale handles: refused, and the request made after them is untouched ----------- */

static int stale_handles(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  RANK_CHECK(self, w != NULL, "world group");
  const int me = self->rank, peer = 1 - me;
  float out1 = message(me, 1), in1 = -1, out2 = message(me, 2), in2 = -1;

  /* Message 1, completed by wait. */
  pstate_request_t *r1 = NULL, *s1 = NULL;
  RANK_OK(self, pstate_irecv(w, &in1, 1, PSTATE_FLOAT32, peer, NULL, &r1));
  RANK_OK(self, pstate_isend(w, &out1, 1, PSTATE_FLOAT32, peer, NULL, &s1));
  RANK_OK(self, pstate_wait(s1));
  RANK_OK(self, pstate_wait(r1));
  RANK_CHECK(self, in1 == message(peer, 1), "message 1: %g", (double)in1);

  /* Message 2's receive, pending: the peer sends it only after the barrier below, which this rank
   * enters after its checks. It is posted right after r1 was freed, as a reused address would be. */
  pstate_request_t *r2 = NULL;
  RANK_OK(self, pstate_irecv(w, &in2, 1, PSTATE_FLOAT32, peer, NULL, &r2));
  RANK_CHECK(self, r2 != r1 && r2 != s1, "a new request got the handle of a freed one (%p)", (void *)r2);

  int done = 7;
  EXPECT_NOT_LIVE(self, pstate_wait(r1));
  EXPECT_NOT_LIVE(self, pstate_wait(s1));
  EXPECT_NOT_LIVE(self, pstate_test(r1, &done));
  RANK_CHECK(self, done == 0, "a refused test says not done (%d)", done);
  /* A handle near a live one, never made: refused too. */
  EXPECT_NOT_LIVE(self, pstate_wait((pstate_request_t *)((char *)r2 + ((uintptr_t)1 << 30))));

  /* r2 is still this rank's pending request: not completed by any of the refused calls. */
  RANK_OK(self, pstate_test(r2, &done));
  RANK_CHECK(self, done == 0, "r2 completed before its message was sent");
  RANK_CHECK(self, in2 == -1, "r2's buffer was written before its message was sent: %g", (double)in2);

  RANK_OK(self, pstate_barrier(w));
  pstate_request_t *s2 = NULL;
  RANK_OK(self, pstate_isend(w, &out2, 1, PSTATE_FLOAT32, peer, NULL, &s2));
  RANK_OK(self, pstate_wait(r2));
  RANK_CHECK(self, in2 == message(peer, 2), "r2 holds %g, not message 2 of rank %d", (double)in2, peer);
  /* s2 completed by test: a second test and a wait on it are refused. */
  do {
    RANK_OK(self, pstate_test(s2, &done));
  } while (!done);
  done = 7;
  EXPECT_NOT_LIVE(self, pstate_test(s2, &done));
  RANK_CHECK(self, done == 0, "a refused test says not done (%d)", done);
  EXPECT_NOT_LIVE(self, pstate_wait(s2));
  EXPECT_NOT_LIVE(self, pstate_wait(r2));
  RANK_OK(self, pstate_finalize(ps));
  /* After the context is gone: still refused, nothing to read. */
  EXPECT_NOT_LIVE(self, pstate_wait(r2));
  return 0;
}

static void test_a_freed_or_stale_request_is_refused_and_never_completes_a_new_one(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 120, stale_handles, NULL), 0);
  assert_int_equal(pstate_test_run_processes(2, 120, stale_handles, NULL, NULL), 0);
}

/* A request cancelled at finalize: its wait returns ABORTED and frees it; a second one is refused. */
static int freed_after_finalize(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  RANK_CHECK(self, w != NULL, "world group");
  float in = -1;
  pstate_request_t *q = NULL;
  RANK_OK(self, pstate_irecv(w, &in, 1, PSTATE_FLOAT32, 1 - self->rank, NULL, &q));
  RANK_OK(self, pstate_barrier(w));
  RANK_OK(self, pstate_finalize(ps));
  pstate_status_t st = pstate_wait(q);
  RANK_CHECK(self, st == PSTATE_ERR_ABORTED, "wait after finalize: %s", pstate_status_string(st));
  int done = 7;
  EXPECT_NOT_LIVE(self, pstate_test(q, &done));
  RANK_CHECK(self, done == 0, "a refused test says not done (%d)", done);
  EXPECT_NOT_LIVE(self, pstate_wait(q));
  return 0;
}

static void test_a_request_freed_after_finalize_is_refused(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 60, freed_after_finalize, NULL), 0);
}

/* ---- many requests: pending ones keep their handles while thousands come and go ------------- */

#define CHURN 1000 /* request pairs made and freed while `held` stays pending */
#define MANY 200   /* receives and sends pending at once */

static int many_and_long_lived(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps), *other = NULL;
  RANK_CHECK(self, w != NULL, "world group");
  const int both[2] = {0, 1}, me = self->rank, peer = 1 - me;
  RANK_OK(self, pstate_new_group(ps, both, 2, &other)); /* its own message order, apart from w's */

  /* held: pending on `other` until the end (the peer sends it last). */
  float held_in = -1, held_out = message(me, 0);
  pstate_request_t *held = NULL;
  RANK_OK(self, pstate_irecv(other, &held_in, 1, PSTATE_FLOAT32, peer, NULL, &held));

  /* Churn on w: the handles cycle far past held's; each pair holds its own message. */
  for (int i = 0; i < CHURN; ++i) {
    float out = message(me, i % 97), in = -1;
    pstate_request_t *s = NULL, *q = NULL;
    RANK_OK(self, pstate_irecv(w, &in, 1, PSTATE_FLOAT32, peer, NULL, &q));
    RANK_OK(self, pstate_isend(w, &out, 1, PSTATE_FLOAT32, peer, NULL, &s));
    RANK_CHECK(self, q != held && s != held, "a new request got the handle of one still pending");
    RANK_OK(self, pstate_wait(q));
    RANK_OK(self, pstate_wait(s));
    RANK_CHECK(self, in == message(peer, i % 97), "churn %d: got %g", i, (double)in);
  }

  /* MANY receives and MANY sends pending at once, completed in reverse order. */
  float ins[MANY], outs[MANY];
  pstate_request_t *rq[MANY], *sq[MANY];
  for (int i = 0; i < MANY; ++i) {
    ins[i] = -1;
    outs[i] = message(me, i);
    RANK_OK(self, pstate_irecv(w, &ins[i], 1, PSTATE_FLOAT32, peer, NULL, &rq[i]));
  }
  for (int i = 0; i < MANY; ++i) RANK_OK(self, pstate_isend(w, &outs[i], 1, PSTATE_FLOAT32, peer, NULL, &sq[i]));
  for (int i = 0; i < MANY; ++i)
    for (int j = 0; j < i; ++j)
      RANK_CHECK(self, rq[i] != rq[j] && sq[i] != sq[j] && rq[i] != sq[j] && sq[i] != rq[j] && rq[i] != held,
                 "two pending requests share a handle (%d, %d)", i, j);
  for (int i = MANY - 1; i >= 0; --i) {
    RANK_OK(self, pstate_wait(rq[i]));
    RANK_OK(self, pstate_wait(sq[i]));
    RANK_CHECK(self, ins[i] == message(peer, i), "message %d: got %g", i, (double)ins[i]);
  }

  int done = 7;
  RANK_OK(self, pstate_test(held, &done));
  RANK_CHECK(self, done == 0 && held_in == -1, "held completed before its message was sent");
  RANK_OK(self, pstate_barrier(w));
  RANK_OK(self, pstate_send(other, &held_out, 1, PSTATE_FLOAT32, peer, NULL));
  RANK_OK(self, pstate_wait(held));
  RANK_CHECK(self, held_in == message(peer, 0), "held got %g", (double)held_in);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_pending_requests_keep_their_handles_while_thousands_come_and_go(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 120, many_and_long_lived, NULL), 0);
}

/* ---- garbage: no context needed, nothing dereferenced ----------------------------------------- */

static int refuses(pstate_request_t *req, const char *what) {
  pstate_status_t st = pstate_wait(req);
  if (st != PSTATE_ERR_INVALID_ARGUMENT || strstr(pstate_last_error(), what) == NULL) {
    fprintf(stderr, "pstate_wait(%p) -> %s (%s)\n", (void *)req, pstate_status_string(st), pstate_last_error());
    return 0;
  }
  int done = 7;
  st = pstate_test(req, &done);
  if (st != PSTATE_ERR_INVALID_ARGUMENT || done != 0 || strstr(pstate_last_error(), what) == NULL) {
    fprintf(stderr, "pstate_test(%p) -> %s, done %d (%s)\n", (void *)req, pstate_status_string(st), done,
            pstate_last_error());
    return 0;
  }
  return 1;
}

static void test_null_and_garbage_handles_are_refused_without_a_context(void **state) {
  (void)state;
  assert_true(refuses(NULL, "req is NULL"));
  uint64_t zeros[4] = {0}; /* memory that holds no request */
  assert_true(refuses((pstate_request_t *)zeros, NOT_LIVE));
  assert_true(refuses((pstate_request_t *)(uintptr_t)16, NOT_LIVE));  /* the old check read it: SIGSEGV */
  void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(gone != MAP_FAILED);
  assert_int_equal(munmap(gone, 4096), 0);
  assert_true(refuses((pstate_request_t *)gone, NOT_LIVE));  /* an unmapped address */
  assert_true(refuses((pstate_request_t *)(uintptr_t)-1, NOT_LIVE));
}

/* ---- fork while other threads post and complete requests -------------------------------------- */

static atomic_int stop_posting;               /* set by the forking thread when it is done */
static _Atomic(pstate_request_t *) last_freed; /* a handle a rank completed: stale from then on */

/* Both ranks exchange one int per round until rank 0 reads stop_posting; rank 0's value tells
 * rank 1 to stop too, so both do the same number of rounds. */
static int post_until_told(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  RANK_CHECK(self, w != NULL, "world group");
  const int peer = 1 - self->rank;
  for (int stop = 0; !stop;) {
    int out = self->rank == 0 ? atomic_load(&stop_posting) : 0, in = -1;
    pstate_request_t *s = NULL, *r = NULL;
    RANK_OK(self, pstate_irecv(w, &in, 1, PSTATE_INT32, peer, NULL, &r));
    RANK_OK(self, pstate_isend(w, &out, 1, PSTATE_INT32, peer, NULL, &s));
    RANK_OK(self, pstate_wait(s));
    RANK_OK(self, pstate_wait(r));
    atomic_store(&last_freed, s);
    stop = self->rank == 0 ? out : in;
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void *run_posting_ranks(void *failed) {
  *(int *)failed = pstate_test_run_threads(2, 120, post_until_told, NULL);
  return NULL;
}

/* The child's one call: a stale handle, refused (it takes the registry's lock); exit 0 on that.
 * A crash kills the child (cmocka's handlers would carry on with the parent's tests in it). */
static int child_refuses_a_stale_handle(void) {
  const int crashes[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS};
  for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; ++i) signal(crashes[i], SIG_DFL);
  pstate_request_t *stale = atomic_load(&last_freed);
  return stale != NULL && pstate_wait(stale) == PSTATE_ERR_INVALID_ARGUMENT ? 0 : 1;
}

/* 0 when the child exited 0; a child still running after 30 s is stuck (a lock inherited locked). */
static int reap(pid_t pid) {
  int status = 0;
  for (int i = 0; i < 3000; ++i) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  fprintf(stderr, "a child forked while requests were posted hung in pstate_wait\n");
  return 1;
}

static void test_a_process_forked_while_threads_post_requests_can_use_requests(void **state) {
  (void)state;
  atomic_store(&stop_posting, 0);
  atomic_store(&last_freed, NULL);
  int ranks_failed = -1;
  pthread_t ranks;
  assert_int_equal(pthread_create(&ranks, NULL, run_posting_ranks, &ranks_failed), 0);
  while (atomic_load(&last_freed) == NULL) usleep(1000);
  int children_failed = 0;
  for (int i = 0; i < 200; ++i) {
    pid_t pid = fork();
    if (pid == 0) _exit(child_refuses_a_stale_handle());
    assert_true(pid > 0);
    children_failed += reap(pid);
  }
  atomic_store(&stop_posting, 1);
  assert_int_equal(pthread_join(ranks, NULL), 0);
  assert_int_equal(ranks_failed, 0);
  assert_int_equal(children_failed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_and_garbage_handles_are_refused_without_a_context),
      cmocka_unit_test(test_a_freed_or_stale_request_is_refused_and_never_completes_a_new_one),
      cmocka_unit_test(test_a_request_freed_after_finalize_is_refused),
      cmocka_unit_test(test_pending_requests_keep_their_handles_while_thousands_come_and_go),
      cmocka_unit_test(test_a_process_forked_while_threads_post_requests_can_use_requests),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
