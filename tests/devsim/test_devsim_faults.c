/*
 * test_devsim_faults.c — faults of the device path, injected by the devsim stand-ins.
 *
 * - an NCCL call that fails (DEVSIM_NCCL_FAIL) maps to the documented status (ncclSystemError ->
 *   TRANSPORT, ncclRemoteError -> PEER_LOST, ncclInvalidArgument -> INVALID_ARGUMENT and the
 *   context stays usable) with a message naming group, rank, call and remedy; later calls are
 *   ABORTED after a fatal one; communicator creation and unique-id failures reach every rank;
 * - an asynchronous error (DEVSIM_NCCL_ASYNC) is reported by the next call;
 * - a failed cudaMalloc inside ncclCommInitRank is TRANSPORT naming cudaMalloc;
 * - an NCCL call that never completes (DEVSIM_NCCL_HANG) is TIMEOUT within the timeout plus the
 *   README's slack (2 s), and pstate_abort then returns at once; the same hang (an all_reduce, the
 *   communicator's init) is stopped from a watchdog thread by pstate_abort: ABORTED in ms (issue 32);
 *   under the world's own timeout (pstate_group_set_timeout, 300 ms against the context's 2 s) the
 *   hang ends at the group's timeout, naming it;
 * - a peer SIGKILLed during device all_reduces: every survivor returns PEER_LOST within the
 *   README's bound (timeout + 2 s) of the kill, then pstate_abort returns at once;
 * - no thread, fd or shared segment is left behind by a context that failed and was aborted.
 */
/* cmocka.h needs these first */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devsim_test_util.h"
#include "ranks.h"

#define TIMEOUT_MS 2000
#define SLACK_MS 2000 /* README: a device call that never completes is TIMEOUT within timeout + 2 s */
#define N 256

#define HAS(msg, needle) (strstr((msg), (needle)) != NULL)

typedef struct {
  const char *var; /* environment variable set on every rank before init */
  const char *value;
  int fail_rank; /* the rank whose call fails (-1: every rank) */
  pstate_status_t want;
  const char *call; /* in the message */
  int fatal;
} inject_t;

static pstate_t *init_world(const pstate_test_rank_t *self, pstate_group_t **world, void **d) {
  pstate_t *ps = NULL;
  if (devsim_init(self, TIMEOUT_MS, &ps) != PSTATE_OK) {
    fprintf(stderr, "rank %d: init: %s\n", self->rank, pstate_last_error());
    return NULL;
  }
  pstate_get_group(ps, PSTATE_GROUP_WORLD, world);
  *d = devsim_device_copy(NULL, N * sizeof(float));
  cudaMemset(*d, 0, N * sizeof(float));
  return ps;
}

static int injected_rank(const pstate_test_rank_t *self) {
  const inject_t *in = self->arg;
  setenv(in->var, in->value, 1);
  pstate_group_t *world = NULL;
  void *d = NULL;
  pstate_t *ps = init_world(self, &world, &d);
  RANK_CHECK(self, ps != NULL, "init");
  int async = strcmp(in->var, "DEVSIM_NCCL_ASYNC") == 0;
  pstate_status_t s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL); /* call 1 */
  /* An asynchronous error set by call 1's work may already surface while call 1 settles. */
  if (!async || s == PSTATE_OK) {
    RANK_OK(self, s);
    /* the error appears when call 1's work runs on the stream, as with NCCL's kernels: wait for it,
     * or call 2 may be checked before it exists */
    if (async) RANK_CHECK(self, cudaStreamSynchronize(NULL) == cudaSuccess, "sync after call 1");
    s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL); /* call 2 */
  }
  int fails = in->fail_rank < 0 || in->fail_rank == self->rank;
  if (!fails) {
    RANK_OK(self, s);
    pstate_abort(ps); /* the peer will not take part any more */
    return 0;
  }
  const char *m = pstate_last_error();
  RANK_CHECK(self, s == in->want, "%s: %s (%s), expected %s", in->value, pstate_status_string(s), m,
             pstate_status_string(in->want));
  RANK_CHECK(self, HAS(m, "world:0") && HAS(m, "all_reduce") && HAS(m, in->call), "names group and call: %s", m);
  char rank_text[32];
  snprintf(rank_text, sizeof rank_text, "rank %d of %d", self->rank, self->world_size);
  RANK_CHECK(self, HAS(m, rank_text), "names the rank (%s): %s", rank_text, m);
  if (in->fatal) {
    RANK_CHECK(self, HAS(m, "pstate_abort"), "names the remedy: %s", m);
    s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    RANK_CHECK(self, s == PSTATE_ERR_ABORTED, "after a fatal error: %s", pstate_status_string(s));
  } else {
    /* every rank failed the same call and nothing was enqueued: the group goes on */
    RANK_OK(self, pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL));
    RANK_CHECK(self, cudaStreamSynchronize(NULL) == cudaSuccess, "sync");
  }
  double t0 = pstate_test_now_ms();
  RANK_OK(self, pstate_abort(ps));
  RANK_CHECK(self, pstate_test_now_ms() - t0 < 1000, "pstate_abort took %.0f ms", pstate_test_now_ms() - t0);
  return 0;
}

static void run_injected(const char *var, const char *value, int fail_rank, pstate_status_t want, const char *call,
                         int fatal) {
  inject_t in = {var, value, fail_rank, want, call, fatal};
  assert_int_equal(pstate_test_run_processes(2, 60, injected_rank, &in, NULL), 0);
}

static void test_nccl_system_error_is_transport_naming_group_rank_call_remedy(void **state) {
  (void)state;
  run_injected("DEVSIM_NCCL_FAIL", "ncclAllReduce:1:2:ncclSystemError", 1, PSTATE_ERR_TRANSPORT, "ncclAllReduce", 1);
}
static void test_nccl_remote_error_is_peer_lost(void **state) {
  (void)state;
  run_injected("DEVSIM_NCCL_FAIL", "ncclAllReduce:0:2:ncclRemoteError", 0, PSTATE_ERR_PEER_LOST, "ncclAllReduce", 1);
}
static void test_nccl_invalid_argument_is_invalid_argument_and_not_fatal(void **state) {
  (void)state;
  run_injected("DEVSIM_NCCL_FAIL", "ncclAllReduce:*:2:ncclInvalidArgument", -1, PSTATE_ERR_INVALID_ARGUMENT,
               "ncclAllReduce", 0);
}
static void test_nccl_async_error_is_reported_by_the_next_call(void **state) {
  (void)state;
  /* all_reduce 1 sets it when it runs; call 2 reads it first (ncclCommGetAsyncError) */
  run_injected("DEVSIM_NCCL_ASYNC", "ncclAllReduce:1:1:ncclRemoteError", 1, PSTATE_ERR_PEER_LOST, "DEVSIM_NCCL_ASYNC",
               1);
}

/* Communicator creation fails on one rank (injected, or its cudaMalloc fails): that rank gets the
 * mapped status naming ncclCommInitRankConfig. */
typedef struct {
  const char *var, *value;
  pstate_status_t want;
  const char *needle;
} init_fault_t;

static int init_fault_rank(const pstate_test_rank_t *self) {
  const init_fault_t *f = self->arg;
  if (self->rank == 1) setenv(f->var, f->value, 1);
  pstate_group_t *world = NULL;
  void *d = NULL;
  pstate_t *ps = init_world(self, &world, &d);
  RANK_CHECK(self, ps != NULL, "init");
  pstate_status_t s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  if (self->rank == 1) {
    RANK_CHECK(self,
               s == f->want && HAS(pstate_last_error(), "ncclCommInitRankConfig") &&
                   HAS(pstate_last_error(), f->needle) && HAS(pstate_last_error(), "world:0"),
               "%s -> %s: %s", f->value, pstate_status_string(s), pstate_last_error());
  } else {
    /* rank 0 either made its communicator (the peer then never arrives: TIMEOUT) or not */
    RANK_CHECK(self, s == PSTATE_OK || s == PSTATE_ERR_TIMEOUT, "rank 0: %s: %s", pstate_status_string(s),
               pstate_last_error());
  }
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_nccl_init_failure_names_the_call(void **state) {
  (void)state;
  init_fault_t f = {"DEVSIM_NCCL_FAIL", "ncclCommInitRankConfig:1:1:ncclSystemError", PSTATE_ERR_TRANSPORT,
                    "ncclSystemError"};
  assert_int_equal(pstate_test_run_processes(2, 60, init_fault_rank, &f, NULL), 0);
}
static void test_cuda_malloc_failure_in_nccl_init_is_transport_naming_cudamalloc(void **state) {
  (void)state;
  /* the rank's next cudaMalloc after init is NCCL's (the test allocated its buffer before) */
  init_fault_t f = {"DEVSIM_CUDA_MALLOC_FAIL", "2", PSTATE_ERR_TRANSPORT, "cudaMalloc"};
  assert_int_equal(pstate_test_run_processes(2, 60, init_fault_rank, &f, NULL), 0);
}

/* ncclGetUniqueId fails on group rank 0: rank 0 gets its error, the others are told why. */
static int unique_id_rank(const pstate_test_rank_t *self) {
  if (self->rank == 0) setenv("DEVSIM_NCCL_FAIL", "ncclGetUniqueId:*:1:ncclSystemError", 1);
  pstate_group_t *world = NULL;
  void *d = NULL;
  pstate_t *ps = init_world(self, &world, &d);
  RANK_CHECK(self, ps != NULL, "init");
  pstate_status_t s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_TRANSPORT, "%s: %s", pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, HAS(pstate_last_error(), self->rank == 0 ? "ncclGetUniqueId" : "unique id"), "%s",
             pstate_last_error());
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_nccl_unique_id_failure_reaches_every_rank(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 60, unique_id_rank, NULL, NULL), 0);
}

/* An NCCL call of rank 0 never completes: TIMEOUT within timeout + slack, then abort at once. */
typedef struct {
  const char *value;
  int64_t group_timeout_ms; /* pstate_group_set_timeout on the world (0: the context's) */
} hang_t;

static int hang_rank(const pstate_test_rank_t *self) {
  const hang_t *h = self->arg;
  setenv("DEVSIM_NCCL_HANG", h->value, 1);
  pstate_group_t *world = NULL;
  void *d = NULL;
  pstate_t *ps = init_world(self, &world, &d);
  RANK_CHECK(self, ps != NULL, "init");
  if (h->group_timeout_ms > 0) RANK_OK(self, pstate_group_set_timeout(world, h->group_timeout_ms));
  const int64_t limit = h->group_timeout_ms > 0 ? h->group_timeout_ms : TIMEOUT_MS;
  double t0 = pstate_test_now_ms();
  pstate_status_t s = PSTATE_OK;
  for (int i = 0; i < 3 && s == PSTATE_OK; ++i) s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  double took = pstate_test_now_ms() - t0;
  if (self->rank == 0) {
    RANK_CHECK(self, s == PSTATE_ERR_TIMEOUT, "%s: %s", pstate_status_string(s), pstate_last_error());
    /* the group's own timeout bounds NCCL's non-blocking polls: well before the context's */
    RANK_CHECK(self, took >= limit - 50 && took <= (h->group_timeout_ms > 0 ? TIMEOUT_MS - 500 : TIMEOUT_MS + SLACK_MS),
               "TIMEOUT after %.0f ms (limit %lld ms)", took, (long long)limit);
    if (h->group_timeout_ms > 0)
      RANK_CHECK(self, HAS(pstate_last_error(), "own timeout on this rank"), "%s", pstate_last_error());
    RANK_CHECK(self,
               HAS(pstate_last_error(), "world:0") && HAS(pstate_last_error(), "rank 0 of 2") &&
                   HAS(pstate_last_error(), "pstate_abort"),
               "%s", pstate_last_error());
    fprintf(stderr, "rank 0: TIMEOUT after %.0f ms (the limit %lld ms; the context timeout %d ms)\n", took,
            (long long)limit, TIMEOUT_MS);
  } else {
    usleep((TIMEOUT_MS + 500) * 1000); /* the peer waits in vain on the device, as with NCCL */
  }
  t0 = pstate_test_now_ms();
  RANK_OK(self, pstate_abort(ps));
  RANK_CHECK(self, pstate_test_now_ms() - t0 < 1000, "pstate_abort took %.0f ms", pstate_test_now_ms() - t0);
  return 0;
}

static void test_nccl_call_never_completing_is_timeout_then_abort_returns(void **state) {
  (void)state;
  hang_t h = {"ncclAllReduce:0:2", 0};
  assert_int_equal(pstate_test_run_processes(2, 60, hang_rank, &h, NULL), 0);
}
static void test_nccl_init_never_completing_is_timeout_then_abort_returns(void **state) {
  (void)state;
  hang_t h = {"ncclCommInitRankConfig:0:1", 0};
  assert_int_equal(pstate_test_run_processes(2, 60, hang_rank, &h, NULL), 0);
}
/* The same hang under the world's own timeout of 300 ms (the context's is 2 s): NCCL's polls end at
 * the group's, for the communicator's creation and for a call. */
static void test_nccl_hang_under_a_group_timeout_ends_at_the_groups_timeout(void **state) {
  (void)state;
  hang_t call = {"ncclAllReduce:0:2", 300};
  assert_int_equal(pstate_test_run_processes(2, 60, hang_rank, &call, NULL), 0);
  hang_t init = {"ncclCommInitRankConfig:0:1", 300};
  assert_int_equal(pstate_test_run_processes(2, 60, hang_rank, &init, NULL), 0);
}

/* The same hang, stopped from a watchdog thread by pstate_abort (issue 32): the blocked device
 * call returns ABORTED naming the abort long before its 30 s timeout, and pstate_abort returns OK
 * once it has, having freed the context (ncclCommAbort on the communicator). The watchdog fires
 * once the driving thread is inside the call (a probe that finds the context BUSY). */
typedef struct {
  pstate_t *ps;
  atomic_int armed;
  double fired_at_ms;
  pstate_status_t status;
} watchdog_t;

static void *watchdog_thread(void *arg) {
  watchdog_t *w = arg;
  while (!atomic_load(&w->armed)) usleep(1000);
  pstate_group_t *g = NULL;
  while (pstate_get_group(w->ps, PSTATE_GROUP_WORLD, &g) != PSTATE_ERR_BUSY) usleep(1000);
  usleep(300 * 1000);
  w->fired_at_ms = pstate_test_now_ms();
  w->status = pstate_abort(w->ps);
  return NULL;
}

static int abort_hang_rank(const pstate_test_rank_t *self) {
  const hang_t *h = self->arg;
  setenv("DEVSIM_NCCL_HANG", h->value, 1);
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *d = devsim_device_copy(NULL, N * sizeof(float));
  cudaMemset(d, 0, N * sizeof(float));
  if (self->rank == 1) {
    usleep(3000 * 1000); /* the peer waits in vain on the device, as with NCCL */
    RANK_OK(self, pstate_abort(ps));
    return 0;
  }
  watchdog_t w;
  memset(&w, 0, sizeof w);
  w.ps = ps;
  pthread_t t;
  RANK_CHECK(self, pthread_create(&t, NULL, watchdog_thread, &w) == 0, "watchdog thread");
  atomic_store(&w.armed, 1);
  pstate_status_t s = PSTATE_OK;
  for (int i = 0; i < 3 && (s == PSTATE_OK || s == PSTATE_ERR_BUSY);) {
    s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (s != PSTATE_ERR_BUSY) ++i; /* BUSY: the watchdog's probe held the context; again */
  }
  double done = pstate_test_now_ms();
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", pstate_last_error());
  pthread_join(t, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED && HAS(msg, "from another thread"), "%s: %s", pstate_status_string(s), msg);
  RANK_CHECK(self, w.status == PSTATE_OK, "pstate_abort from the watchdog: %s", pstate_status_string(w.status));
  RANK_CHECK(self, done - w.fired_at_ms < 10000, "returned %.0f ms after the abort", done - w.fired_at_ms);
  fprintf(stderr, "rank 0: %s stopped by pstate_abort from a watchdog thread after %.1f ms\n", h->value,
          done - w.fired_at_ms);
  return 0;
}

static void test_nccl_call_never_completing_is_stopped_by_abort_from_another_thread(void **state) {
  (void)state;
  hang_t call = {"ncclAllReduce:0:2", 0};
  assert_int_equal(pstate_test_run_processes(2, 60, abort_hang_rank, &call, NULL), 0);
  hang_t init = {"ncclCommInitRankConfig:0:1", 0};
  assert_int_equal(pstate_test_run_processes(2, 60, abort_hang_rank, &init, NULL), 0);
}

/* Rank 2 of 3 is SIGKILLed by the harness during device all_reduces. */
#define KILL_AFTER_MS 1500
static int sigkill_rank(const pstate_test_rank_t *self) {
  pstate_group_t *world = NULL;
  void *d = NULL;
  pstate_t *ps = init_world(self, &world, &d);
  RANK_CHECK(self, ps != NULL, "init");
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  double start = pstate_test_now_ms(), last_ok = start;
  pstate_status_t st = PSTATE_OK;
  int done = 0;
  while (st == PSTATE_OK && pstate_test_now_ms() - start < 20000) {
    st = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_MAX, s);
    if (st != PSTATE_OK) break;
    /* a bounded look at the stream: an application keeps issuing work, it does not block for ever */
    double t = pstate_test_now_ms();
    while (cudaStreamQuery(s) == cudaErrorNotReady && pstate_test_now_ms() - t < 50) usleep(200);
    if (cudaStreamQuery(s) == cudaSuccess) {
      last_ok = pstate_test_now_ms();
      ++done;
    }
  }
  double failed_at = pstate_test_now_ms();
  RANK_CHECK(self, st == PSTATE_ERR_PEER_LOST, "after %d all_reduces: %s: %s", done, pstate_status_string(st),
             pstate_last_error());
  RANK_CHECK(self, failed_at - last_ok <= TIMEOUT_MS + SLACK_MS, "PEER_LOST %.0f ms after the last success",
             failed_at - last_ok);
  fprintf(stderr, "rank %d: PEER_LOST %.0f ms after its last completed all_reduce (%d before): %s\n", self->rank,
          failed_at - last_ok, done, pstate_last_error());
  double t0 = pstate_test_now_ms();
  RANK_OK(self, pstate_abort(ps));
  RANK_CHECK(self, pstate_test_now_ms() - t0 < 1000, "pstate_abort took %.0f ms", pstate_test_now_ms() - t0);
  return 0;
}

static void test_peer_sigkilled_during_device_all_reduce_survivors_peer_lost(void **state) {
  (void)state;
  int statuses[3];
  pstate_test_run_processes_kill(3, 60, sigkill_rank, NULL, statuses, 2, KILL_AFTER_MS);
  assert_int_equal(statuses[0], 0);
  assert_int_equal(statuses[1], 0);
}

/* Nothing left behind: two cycles of (init, collectives, a fatal injected error, abort) leave the
 * same threads and fds as one (the stand-in's stream workers stay, like CUDA's), and /dev/shm
 * holds no segment of this process. */
static int count_dir(const char *path, const char *prefix) {
  DIR *dir = opendir(path);
  int n = 0;
  if (dir == NULL) return -1;
  for (struct dirent *e; (e = readdir(dir)) != NULL;)
    if (e->d_name[0] != '.' && (prefix == NULL || strncmp(e->d_name, prefix, strlen(prefix)) == 0)) ++n;
  closedir(dir);
  return n;
}

/* Each cycle meets at its own store port (the parent picked them free): a rank that starts the
 * next cycle early cannot reach the closing store of the last one. */
static int cycle(const pstate_test_rank_t *self, int c) {
  setenv("DEVSIM_NCCL_FAIL", "", 1);
  pstate_test_rank_t me = *self;
  snprintf(me.init_method, sizeof me.init_method, "tcp://127.0.0.1:%d", ((const int *)self->arg)[c]);
  pstate_group_t *world = NULL;
  void *d = NULL;
  pstate_t *ps = init_world(&me, &world, &d);
  RANK_CHECK(self, ps != NULL, "init");
  RANK_OK(self, pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, cudaStreamSynchronize(NULL) == cudaSuccess, "sync");
  setenv("DEVSIM_NCCL_FAIL", "ncclAllReduce:*:1:ncclSystemError", 1);
  pstate_status_t s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_TRANSPORT, "%s", pstate_status_string(s));
  RANK_OK(self, pstate_abort(ps));
  cudaFree(d);
  return 0;
}

static int leak_rank(const pstate_test_rank_t *self) {
  if (cycle(self, 0)) return 1;
  int threads = count_dir("/proc/self/task", NULL), fds = count_dir("/proc/self/fd", NULL);
  for (int i = 1; i < 3; ++i)
    if (cycle(self, i)) return 1;
  usleep(100000);
  int threads2 = count_dir("/proc/self/task", NULL), fds2 = count_dir("/proc/self/fd", NULL);
  RANK_CHECK(self, threads2 == threads, "threads %d after one cycle, %d after three", threads, threads2);
  RANK_CHECK(self, fds2 == fds, "fds %d after one cycle, %d after three", fds, fds2);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "pstate-devsim-nccl-%d-", (int)getpid());
  /* names carry the creating (group rank 0) pid: only ours are counted, so ctest -j is safe */
  RANK_CHECK(self, count_dir("/dev/shm", prefix) == 0, "a shared segment %s* is left in /dev/shm", prefix);
  return 0;
}

static void test_nothing_left_behind_after_failures_and_abort(void **state) {
  (void)state;
  int ports[3] = {pstate_test_free_port(), pstate_test_free_port(), pstate_test_free_port()};
  assert_int_equal(pstate_test_run_processes(2, 60, leak_rank, ports, NULL), 0);
}

int main(void) {
  /* The rendezvous is not under test: on a loaded machine (load 30+ on 2 cores) the ranks' start-up
   * alone passed the 2 s call timeout, which bounds the rendezvous unless this is set, and every
   * test failed at init. The timeouts measured here are the device calls', still 2 s. */
  setenv("PSTATE_INIT_TIMEOUT_MS", "60000", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nccl_system_error_is_transport_naming_group_rank_call_remedy),
      cmocka_unit_test(test_nccl_remote_error_is_peer_lost),
      cmocka_unit_test(test_nccl_invalid_argument_is_invalid_argument_and_not_fatal),
      cmocka_unit_test(test_nccl_async_error_is_reported_by_the_next_call),
      cmocka_unit_test(test_nccl_init_failure_names_the_call),
      cmocka_unit_test(test_cuda_malloc_failure_in_nccl_init_is_transport_naming_cudamalloc),
      cmocka_unit_test(test_nccl_unique_id_failure_reaches_every_rank),
      cmocka_unit_test(test_nccl_call_never_completing_is_timeout_then_abort_returns),
      cmocka_unit_test(test_nccl_init_never_completing_is_timeout_then_abort_returns),
      cmocka_unit_test(test_nccl_hang_under_a_group_timeout_ends_at_the_groups_timeout),
      cmocka_unit_test(test_nccl_call_never_completing_is_stopped_by_abort_from_another_thread),
      cmocka_unit_test(test_peer_sigkilled_during_device_all_reduce_survivors_peer_lost),
      cmocka_unit_test(test_nothing_left_behind_after_failures_and_abort),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
