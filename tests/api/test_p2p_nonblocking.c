/*
 * test_p2p_nonblocking.c — pstate_isend / pstate_irecv / pstate_wait / pstate_test and
 * pstate_p2p_batch on CPU contexts: a ring where every rank sends (4 MiB, too large to go out
 * eagerly) before it receives, which deadlocks with blocking calls; several requests pending on
 * one group with a collective in between, polled with pstate_test; blocking and non-blocking
 * calls mixed between two ranks in order; a batch with every peer listed in reversed orders on
 * alternate ranks; a SIGKILLed peer with requests pending (PEER_LOST on every survivor); requests
 * still pending at destroy_model_parallel / finalize / abort (ABORTED, freed by their wait); a
 * request that never matches (TIMEOUT); a size mismatch; and every argument error. Each on 2, 3
 * and 4 processes and as threads where it applies. Expected values are computed here from the
 * sender's rank and the element index.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"

/* Under ThreadSanitizer (CI's tsan job runs this file for its threads) the processes sweeps stop at
 * 2 processes: 3 and 4 repeat them in more processes; the plain and ASan runs take 2, 3 and 4. */
#if defined(__SANITIZE_THREAD__)
#define MAX_PROCESSES 2
#else
#define MAX_PROCESSES 4
#endif

#define TIMEOUT_MS 20000
#define RING_COUNT (1u << 20) /* floats: 4 MiB */

/* What rank `from` sends in message `msg` at element i: exact in float (< 2^24). */
static float value(int from, int msg, size_t i) { return (float)(from * 100000 + msg * 1000 + (int)(i % 997)); }

static void fill(float *buf, size_t n, int from, int msg) {
  for (size_t i = 0; i < n; ++i) buf[i] = value(from, msg, i);
}

/* 0 when buf holds what rank `from` sent as message `msg`; else the first bad index + 1. */
static size_t check_from(const float *buf, size_t n, int from, int msg) {
  for (size_t i = 0; i < n; ++i)
    if (buf[i] != value(from, msg, i)) return i + 1;
  return 0;
}

static pstate_group_t *world_of(pstate_t *ps) {
  pstate_group_t *g = NULL;
  return pstate_get_group(ps, PSTATE_GROUP_WORLD, &g) == PSTATE_OK ? g : NULL;
}

/* ---- the ring: every rank isends to the right before it irecvs from the left ------------------ */

static int ring_send_before_receive(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  RANK_CHECK(self, w != NULL, "world group");
  const int n = self->world_size, r = self->rank, right = (r + 1) % n, left = (r + n - 1) % n;
  float *out = malloc(RING_COUNT * sizeof(float)), *in = malloc(RING_COUNT * sizeof(float));
  RANK_CHECK(self, out != NULL && in != NULL, "malloc");
  fill(out, RING_COUNT, r, 0);
  memset(in, 0, RING_COUNT * sizeof(float));
  pstate_request_t *s = NULL, *q = NULL;
  RANK_OK(self, pstate_isend(w, out, RING_COUNT, PSTATE_FLOAT32, right, NULL, &s));
  RANK_CHECK(self, s != NULL, "isend returned a request");
  RANK_OK(self, pstate_irecv(w, in, RING_COUNT, PSTATE_FLOAT32, left, NULL, &q));
  RANK_OK(self, pstate_wait(s));
  RANK_OK(self, pstate_wait(q));
  size_t bad = check_from(in, RING_COUNT, left, 0);
  RANK_CHECK(self, bad == 0, "element %zu from rank %d is %g", bad - 1, left, (double)in[bad - 1]);
  free(out);
  free(in);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_ring_isend_before_irecv_2_3_4_processes(void **state) {
  (void)state;
  for (int n = 2; n <= MAX_PROCESSES; ++n)
    assert_int_equal(pstate_test_run_processes(n, 120, ring_send_before_receive, NULL, NULL), 0);
}

static void test_ring_isend_before_irecv_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(3, 120, ring_send_before_receive, NULL), 0);
}

/* ---- several pending at once, a collective in between, pstate_test polling -------------------- */

#define PENDING 3
#define SMALL 4096

static int several_pending_with_collective(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  const int n = self->world_size, r = self->rank, right = (r + 1) % n, left = (r + n - 1) % n;
  static __thread float out[PENDING][SMALL], in[PENDING][SMALL];
  pstate_request_t *sends[PENDING], *recvs[PENDING];
  for (int m = 0; m < PENDING; ++m) {
    fill(out[m], SMALL, r, m);
    memset(in[m], 0, sizeof in[m]);
    RANK_OK(self, pstate_irecv(w, in[m], SMALL, PSTATE_FLOAT32, left, NULL, &recvs[m]));
  }
  for (int m = 0; m < PENDING; ++m) RANK_OK(self, pstate_isend(w, out[m], SMALL, PSTATE_FLOAT32, right, NULL, &sends[m]));
  /* A collective while six requests are pending on the same group. */
  int64_t x = r + 1, sum = 0;
  RANK_OK(self, pstate_all_reduce(w, &x, &sum, 1, PSTATE_INT64, PSTATE_SUM, NULL));
  RANK_CHECK(self, sum == (int64_t)n * (n + 1) / 2, "all_reduce sum %lld", (long long)sum);
  /* Poll the last receive until it completes (test never blocks; it progresses the transport). */
  int done = 0;
  long polls = 0;
  while (!done) {
    RANK_OK(self, pstate_test(recvs[PENDING - 1], &done));
    ++polls;
  }
  RANK_CHECK(self, check_from(in[PENDING - 1], SMALL, left, PENDING - 1) == 0, "polled receive holds message %d",
             PENDING - 1);
  for (int m = PENDING - 1; m >= 0; --m) RANK_OK(self, pstate_wait(sends[m]));
  for (int m = 0; m < PENDING - 1; ++m) {
    RANK_OK(self, pstate_wait(recvs[m]));
    RANK_CHECK(self, check_from(in[m], SMALL, left, m) == 0, "receive %d holds message %d in order", m, m);
  }
  /* Blocking and non-blocking p2p mixed between group ranks 0 and 1 keep their order. */
  if (r < 2) {
    float a[16], b[16];
    if (r == 0) {
      pstate_request_t *q = NULL;
      fill(a, 16, 0, 7);
      fill(b, 16, 0, 8);
      RANK_OK(self, pstate_isend(w, a, 16, PSTATE_FLOAT32, 1, NULL, &q));
      RANK_OK(self, pstate_send(w, b, 16, PSTATE_FLOAT32, 1, NULL));
      RANK_OK(self, pstate_wait(q));
    } else {
      pstate_request_t *q = NULL;
      RANK_OK(self, pstate_recv(w, a, 16, PSTATE_FLOAT32, 0, NULL));
      RANK_OK(self, pstate_irecv(w, b, 16, PSTATE_FLOAT32, 0, NULL, &q));
      RANK_OK(self, pstate_wait(q));
      RANK_CHECK(self, check_from(a, 16, 0, 7) == 0 && check_from(b, 16, 0, 8) == 0,
                 "the blocking recv got the isend (first), the irecv the blocking send (second)");
    }
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_several_pending_with_a_collective_between_2_3_4_processes(void **state) {
  (void)state;
  for (int n = 2; n <= MAX_PROCESSES; ++n)
    assert_int_equal(pstate_test_run_processes(n, 120, several_pending_with_collective, NULL, NULL), 0);
}

static void test_several_pending_with_a_collective_between_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(4, 120, several_pending_with_collective, NULL), 0);
}

/* ---- a large send moves while its sender waits in a collective -------------------------------- */

/* Rank 0 isends RING_COUNT floats (4 MiB: more than a shared-memory pair ring holds) to rank 1 and
 * enters a barrier before it waits; rank 1 waits for the whole message first and only then enters
 * the barrier. So the rest of rank 0's send can only move while rank 0 waits in the barrier: pstate
 * must keep it moving there (shared memory: the waits' periodic check; UCX: the rendezvous), or
 * both ranks time out. */
static int large_send_during_collective(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  float *buf = malloc(RING_COUNT * sizeof(float));
  RANK_CHECK(self, buf != NULL, "malloc");
  pstate_request_t *r = NULL;
  if (self->rank == 0) {
    fill(buf, RING_COUNT, 0, 7);
    RANK_OK(self, pstate_isend(w, buf, RING_COUNT, PSTATE_FLOAT32, 1, NULL, &r));
    RANK_OK(self, pstate_barrier(w));
    RANK_OK(self, pstate_wait(r));
  } else if (self->rank == 1) {
    memset(buf, 0, RING_COUNT * sizeof(float));
    RANK_OK(self, pstate_irecv(w, buf, RING_COUNT, PSTATE_FLOAT32, 0, NULL, &r));
    RANK_OK(self, pstate_wait(r));
    size_t bad = check_from(buf, RING_COUNT, 0, 7);
    RANK_CHECK(self, bad == 0, "element %zu is %g", bad - 1, (double)buf[bad - 1]);
    RANK_OK(self, pstate_barrier(w));
  } else {
    RANK_OK(self, pstate_barrier(w));
  }
  free(buf);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_a_large_send_moves_while_its_sender_waits_in_a_collective(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, large_send_during_collective, NULL, NULL), 0);
  assert_int_equal(pstate_test_run_threads(2, 120, large_send_during_collective, NULL), 0);
}

/* ---- large messages when the kernel refuses to let a rank read its peer's memory ------------- */

/* Inside a host, messages of 32 KiB and more are offered by reference: the receiver copies them
 * straight out of the sender with process_vm_readv. Where a ptrace policy or a seccomp filter
 * forbids that, they must still arrive, through the ring. Made real here: each rank marks itself
 * not dumpable and drops CAP_SYS_PTRACE from its effective set (the test runs as root), so the
 * kernel refuses process_vm_readv between them (EPERM, checked first). Then both ranks exchange
 * RING_COUNT floats in both directions, non-blocking and blocking. */
static int drop_ptrace_capability(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) return -1;
  d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  return (int)syscall(SYS_capset, &h, d);
}

static int large_messages_without_cma(const pstate_test_rank_t *self) {
  RANK_CHECK(self, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 && drop_ptrace_capability() == 0, "dropping ptrace rights");
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  const int peer = 1 - self->rank;
  int64_t pids[2], mine = (int64_t)getpid();
  RANK_OK(self, pstate_all_gather(w, &mine, pids, 1, PSTATE_INT64, NULL));
  char probe;
  struct iovec local = {&probe, 1}, remote = {&probe, 1};
  errno = 0;
  RANK_CHECK(self, process_vm_readv((pid_t)pids[peer], &local, 1, &remote, 1, 0) < 0 && errno == EPERM,
             "process_vm_readv of the peer was not refused (errno %d): the test proves nothing", errno);
  float *out = malloc(RING_COUNT * sizeof(float)), *in = malloc(RING_COUNT * sizeof(float));
  RANK_CHECK(self, out != NULL && in != NULL, "malloc");
  for (int round = 0; round < 2; ++round) {
    fill(out, RING_COUNT, self->rank, round);
    memset(in, 0, RING_COUNT * sizeof(float));
    if (round == 0) {
      pstate_request_t *s = NULL, *q = NULL;
      RANK_OK(self, pstate_isend(w, out, RING_COUNT, PSTATE_FLOAT32, peer, NULL, &s));
      RANK_OK(self, pstate_irecv(w, in, RING_COUNT, PSTATE_FLOAT32, peer, NULL, &q));
      RANK_OK(self, pstate_wait(s));
      RANK_OK(self, pstate_wait(q));
    } else if (self->rank == 0) {
      RANK_OK(self, pstate_send(w, out, RING_COUNT, PSTATE_FLOAT32, peer, NULL));
      RANK_OK(self, pstate_recv(w, in, RING_COUNT, PSTATE_FLOAT32, peer, NULL));
    } else {
      RANK_OK(self, pstate_recv(w, in, RING_COUNT, PSTATE_FLOAT32, peer, NULL));
      RANK_OK(self, pstate_send(w, out, RING_COUNT, PSTATE_FLOAT32, peer, NULL));
    }
    size_t bad = check_from(in, RING_COUNT, peer, round);
    RANK_CHECK(self, bad == 0, "round %d: element %zu is %g", round, bad - 1, (double)in[bad - 1]);
  }
  free(out);
  free(in);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_large_messages_arrive_when_the_kernel_refuses_cma(void **state) {
  (void)state;
  /* The fallback is the shared-memory rings'. UCX 1.13's own cma transport does not fall back: a
   * refused process_vm_readv is a fatal error inside UCX (ucs_fatal_error), so over UCX
   * (PSTATE_SHM=0) this case cannot run. */
  const char *shm = getenv("PSTATE_SHM");
  if (shm != NULL && strcmp(shm, "0") == 0) skip();
  assert_int_equal(pstate_test_run_processes(2, 120, large_messages_without_cma, NULL, NULL), 0);
}

/* ---- a batch with every peer, listed in reversed orders on alternate ranks -------------------- */

#define BATCH_COUNT (64u * 1024u) /* floats: 256 KiB per message */
#define MAX_RANKS 4

static int batch_with_every_peer(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  const int n = self->world_size, r = self->rank;
  /* Two messages to and from every peer: message m to peer p is value(r, p * 2 + m). */
  float *out = malloc((size_t)MAX_RANKS * 2 * BATCH_COUNT * sizeof(float));
  float *in = calloc((size_t)MAX_RANKS * 2 * BATCH_COUNT, sizeof(float));
  RANK_CHECK(self, out != NULL && in != NULL, "malloc");
  pstate_p2p_op_t ops[4 * MAX_RANKS];
  size_t k = 0;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    for (int m = 0; m < 2; ++m) {
      float *o = out + ((size_t)p * 2 + (size_t)m) * BATCH_COUNT;
      fill(o, BATCH_COUNT, r, p * 2 + m);
      pstate_p2p_op_t send = PSTATE_P2P_OP_INIT, recv = PSTATE_P2P_OP_INIT;
      send.is_send = 1;
      send.buf = o;
      send.count = BATCH_COUNT;
      send.peer = p;
      recv.buf = in + ((size_t)p * 2 + (size_t)m) * BATCH_COUNT;
      recv.count = BATCH_COUNT;
      recv.peer = p;
      ops[k++] = send;
      ops[k++] = recv;
    }
  }
  if (r % 2 == 1) { /* odd ranks: receives first, peers descending (each peer's two messages keep their order) */
    pstate_p2p_op_t rev[4 * MAX_RANKS];
    size_t j = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (int p = n - 1; p >= 0; --p)
        for (size_t i = 0; i < k; ++i)
          if (ops[i].peer == p && ops[i].is_send == pass) rev[j++] = ops[i];
    memcpy(ops, rev, k * sizeof ops[0]);
  }
  RANK_OK(self, pstate_p2p_batch(w, ops, k, NULL));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    for (int m = 0; m < 2; ++m) {
      size_t bad = check_from(in + ((size_t)p * 2 + (size_t)m) * BATCH_COUNT, BATCH_COUNT, p, r * 2 + m);
      RANK_CHECK(self, bad == 0, "message %d from rank %d wrong at element %zu", m, p, bad - 1);
    }
  }
  free(out);
  free(in);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_batch_with_every_peer_in_reversed_orders_2_3_4_processes(void **state) {
  (void)state;
  for (int n = 2; n <= MAX_PROCESSES; ++n)
    assert_int_equal(pstate_test_run_processes(n, 120, batch_with_every_peer, NULL, NULL), 0);
}

static void test_batch_with_every_peer_in_reversed_orders_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(4, 120, batch_with_every_peer, NULL), 0);
}

/* ---- a peer SIGKILLed while requests to and from it are pending ------------------------------ */

static int peer_killed_with_requests_pending(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  const int victim = self->world_size - 1;
  float in[64];
  static float out[RING_COUNT];
  pstate_request_t *q = NULL, *s = NULL;
  if (self->rank != victim) {
    RANK_OK(self, pstate_irecv(w, in, 64, PSTATE_FLOAT32, victim, NULL, &q));
    RANK_OK(self, pstate_isend(w, out, RING_COUNT, PSTATE_FLOAT32, victim, NULL, &s));
  }
  RANK_OK(self, pstate_barrier(w));
  if (self->rank == victim) raise(SIGKILL);
  pstate_status_t first = pstate_wait(q);
  fprintf(stderr, "rank %d: wait -> %s: %s\n", self->rank, pstate_status_string(first), pstate_last_error());
  RANK_CHECK(self, first == PSTATE_ERR_PEER_LOST, "wait on a receive from the killed rank: %s",
             pstate_status_string(first));
  /* The first failure failed the context: the send's wait reports the lost peer or ABORTED. */
  pstate_status_t second = pstate_wait(s);
  RANK_CHECK(self, second == PSTATE_ERR_PEER_LOST || second == PSTATE_ERR_ABORTED, "second wait: %s",
             pstate_status_string(second));
  RANK_CHECK(self, pstate_barrier(w) == PSTATE_ERR_ABORTED, "a failed context refuses collectives");
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_peer_killed_with_requests_pending_is_peer_lost_on_every_survivor(void **state) {
  (void)state;
  for (int n = 3; n <= 4; ++n) {
    int statuses[4];
    int failed = pstate_test_run_processes(n, 120, peer_killed_with_requests_pending, NULL, statuses);
    assert_int_equal(failed, 1); /* the victim alone */
    assert_true(WIFSIGNALED(statuses[n - 1]) && WTERMSIG(statuses[n - 1]) == SIGKILL);
    for (int r = 0; r < n - 1; ++r) assert_true(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0);
  }
}

/* ---- teardown with requests pending: ABORTED from their wait/test, nothing leaks -------------- */

typedef enum { BY_FINALIZE, BY_ABORT } teardown_t;

static int teardown_with_request_pending(const pstate_test_rank_t *self) {
  const teardown_t how = *(const teardown_t *)self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *g = world_of(ps);
  const int peer = 1 - self->rank;
  float in[8], *big = malloc(RING_COUNT * sizeof(float));
  RANK_CHECK(self, big != NULL, "malloc");
  memset(big, 0, RING_COUNT * sizeof(float));
  pstate_request_t *q = NULL, *s = NULL;
  /* Nobody sends what q waits for, nobody receives what s sends. */
  RANK_OK(self, pstate_irecv(g, in, 8, PSTATE_FLOAT32, peer, NULL, &q));
  RANK_OK(self, pstate_isend(g, big, RING_COUNT, PSTATE_FLOAT32, peer, NULL, &s));
  RANK_OK(self, pstate_barrier(g));
  const char *step = how == BY_FINALIZE ? "pstate_finalize" : "pstate_abort";
  if (how == BY_FINALIZE) RANK_OK(self, pstate_finalize(ps));
  else RANK_OK(self, pstate_abort(ps));
  /* pstate no longer uses the buffers: freeing the send buffer now is safe (ASan would see). */
  free(big);
  pstate_status_t st = pstate_wait(q);
  RANK_CHECK(self, st == PSTATE_ERR_ABORTED, "wait after %s: %s", step, pstate_status_string(st));
  RANK_CHECK(self, strstr(pstate_last_error(), "still pending") != NULL, "the error says why: %s", pstate_last_error());
  int done = 0;
  st = pstate_test(s, &done);
  RANK_CHECK(self, st == PSTATE_ERR_ABORTED && done == 1, "test after %s: %s, done %d", step,
             pstate_status_string(st), done);
  return 0;
}

static void test_requests_pending_at_finalize_or_abort_wait_aborted(void **state) {
  (void)state;
  teardown_t hows[2] = {BY_FINALIZE, BY_ABORT};
  for (int i = 0; i < 2; ++i) {
    assert_int_equal(pstate_test_run_processes(2, 120, teardown_with_request_pending, &hows[i], NULL), 0);
    assert_int_equal(pstate_test_run_threads(2, 120, teardown_with_request_pending, &hows[i]), 0);
  }
}

/* destroy_model_parallel refuses while a request is pending on a model-parallel group, and works
 * once it completed; the context stays usable throughout. */
static int destroy_refused_while_pending(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  const int peer = 1 - self->rank;
  float got = -1, mine = (float)self->rank;
  pstate_request_t *q = NULL;
  RANK_OK(self, pstate_irecv(tp, &got, 1, PSTATE_FLOAT32, peer, NULL, &q));
  pstate_status_t st = pstate_destroy_model_parallel(ps);
  RANK_CHECK(self, st == PSTATE_ERR_INVALID_STATE, "destroy with a request pending: %s", pstate_status_string(st));
  RANK_CHECK(self, strstr(pstate_last_error(), "pending") != NULL, "says why: %s", pstate_last_error());
  RANK_CHECK(self, pstate_model_parallel_is_initialized(ps), "nothing was destroyed");
  RANK_OK(self, pstate_send(tp, &mine, 1, PSTATE_FLOAT32, peer, NULL));
  RANK_OK(self, pstate_wait(q));
  RANK_CHECK(self, got == (float)peer, "got %g from rank %d", (double)got, peer);
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_destroy_model_parallel_refused_while_a_request_is_pending(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 60, destroy_refused_while_pending, NULL), 0);
}

/* ---- a request that never matches, and one of the wrong size ---------------------------------- */

static int never_matched_times_out(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 1500, &ps));
  pstate_group_t *w = world_of(ps);
  float in[4];
  pstate_request_t *q = NULL;
  RANK_OK(self, pstate_irecv(w, in, 4, PSTATE_FLOAT32, 1 - self->rank, NULL, &q));
  int done = 1;
  RANK_OK(self, pstate_test(q, &done));
  RANK_CHECK(self, done == 0, "nothing was sent: the request is pending");
  pstate_status_t st = PSTATE_OK;
  if (self->rank == 0) {
    /* Polling never blocks, and ends once the timeout has passed since the post. */
    while (st == PSTATE_OK && !done) {
      st = pstate_test(q, &done);
      if (st == PSTATE_OK && !done) usleep(1000); /* pacing only: other tests share the cores */
    }
    RANK_CHECK(self, done == 1, "a failed test completes the request");
  } else {
    st = pstate_wait(q);
  }
  RANK_CHECK(self, st == PSTATE_ERR_TIMEOUT, "%s: %s", self->rank == 0 ? "test" : "wait", pstate_status_string(st));
  RANK_CHECK(self, strstr(pstate_last_error(), "irecv: timed out after") != NULL, "names the call: %s",
             pstate_last_error());
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_a_request_that_never_matches_times_out(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 60, never_matched_times_out, NULL), 0);
}

static int size_mismatch(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  float out[8] = {0}, in[4];
  pstate_request_t *s = NULL, *q = NULL;
  /* Both ranks send 8 elements and expect 4; each finishes its send before it leaves. */
  RANK_OK(self, pstate_isend(w, out, 8, PSTATE_FLOAT32, 1 - self->rank, NULL, &s));
  RANK_OK(self, pstate_irecv(w, in, 4, PSTATE_FLOAT32, 1 - self->rank, NULL, &q));
  RANK_OK(self, pstate_wait(s));
  pstate_status_t st = pstate_wait(q);
  RANK_CHECK(self, st == PSTATE_ERR_MISMATCH, "receiver: %s", pstate_status_string(st));
  RANK_CHECK(self, strstr(pstate_last_error(), "expected exactly 16") != NULL, "names the sizes: %s",
             pstate_last_error());
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_a_receive_of_another_size_is_mismatch(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 60, size_mismatch, NULL), 0);
}

/* ---- an unrelated failure does not cancel a pending request ---------------------------------- */

/* Rank 0 sends A (16 elements), then B (8). Rank 1 has an irecv pending for A when its blocking
 * recv of B expects 4 elements: MISMATCH, which fails the context and cancels what that recv's
 * wait owned, but not the request, whose data had arrived before B (same sender, in order): its
 * wait returns OK with A. */
static int failure_elsewhere_keeps_request(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  float a[16], b[8];
  if (self->rank == 0) {
    fill(a, 16, 0, 1);
    fill(b, 8, 0, 2);
    RANK_OK(self, pstate_send(w, a, 16, PSTATE_FLOAT32, 1, NULL));
    RANK_OK(self, pstate_send(w, b, 8, PSTATE_FLOAT32, 1, NULL));
  } else {
    pstate_request_t *q = NULL;
    memset(a, 0, sizeof a);
    RANK_OK(self, pstate_irecv(w, a, 16, PSTATE_FLOAT32, 0, NULL, &q));
    pstate_status_t st = pstate_recv(w, b, 4, PSTATE_FLOAT32, 0, NULL);
    RANK_CHECK(self, st == PSTATE_ERR_MISMATCH, "recv of the wrong size: %s", pstate_status_string(st));
    RANK_OK(self, pstate_wait(q));
    RANK_CHECK(self, check_from(a, 16, 0, 1) == 0, "the request kept its data");
  }
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_a_failure_elsewhere_does_not_cancel_a_completed_request(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 60, failure_elsewhere_keeps_request, NULL), 0);
}

/* ---- a receive that failed is never written later ---------------------------------------------- */

/* Rank 1 posts an irecv (q) from rank 0, then a blocking recv into A that times out (rank 0 has sent
 * nothing yet): the context fails and A is the caller's again. Only then does rank 0 send two
 * messages. Completing q in the failed context moves what arrived — the first message, q's — but
 * the second, which A would have matched, must not land in A. Ranks are threads: the phases are
 * ordered by an atomic flag. */
static atomic_int g_phase;

static int failed_receive_stays_untouched(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 400, &ps));
  pstate_group_t *w = world_of(ps);
  float first[4], second[4], a[4], q_buf[4];
  if (self->rank == 0) {
    fill(first, 4, 0, 1);
    fill(second, 4, 0, 2);
    while (atomic_load(&g_phase) < 1) usleep(1000);
    RANK_OK(self, pstate_send(w, first, 4, PSTATE_FLOAT32, 1, NULL));
    RANK_OK(self, pstate_send(w, second, 4, PSTATE_FLOAT32, 1, NULL));
    atomic_store(&g_phase, 2);
  } else {
    pstate_request_t *q = NULL;
    memset(q_buf, 0, sizeof q_buf);
    for (int i = 0; i < 4; ++i) a[i] = -1.0f;
    RANK_OK(self, pstate_irecv(w, q_buf, 4, PSTATE_FLOAT32, 0, NULL, &q));
    pstate_status_t st = pstate_recv(w, a, 4, PSTATE_FLOAT32, 0, NULL);
    RANK_CHECK(self, st == PSTATE_ERR_TIMEOUT, "the blocking recv: %s", pstate_status_string(st));
    atomic_store(&g_phase, 1);
    while (atomic_load(&g_phase) < 2) usleep(1000);
    usleep(20000);
    st = pstate_wait(q);
    RANK_CHECK(self, st == PSTATE_OK || st == PSTATE_ERR_ABORTED, "q: %s", pstate_status_string(st));
    if (st == PSTATE_OK) RANK_CHECK(self, check_from(q_buf, 4, 0, 1) == 0, "q holds the first message");
    for (int i = 0; i < 4; ++i) RANK_CHECK(self, a[i] == -1.0f, "the failed recv's buffer was written: a[%d] = %g", i, (double)a[i]);
  }
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_a_receive_that_failed_is_never_written_later(void **state) {
  (void)state;
  atomic_init(&g_phase, 0);
  assert_int_equal(pstate_test_run_threads(2, 60, failed_receive_stays_untouched, NULL), 0);
}

/* ---- argument errors -------------------------------------------------------------------------- */

#define EXPECT(self, call, status, text)                                                                      \
  do {                                                                                                       \
    pstate_status_t s_ = (call);                                                                             \
    RANK_CHECK(self, s_ == (status), "%s -> %s (%s)", #call, pstate_status_string(s_), pstate_last_error()); \
    RANK_CHECK(self, strstr(pstate_last_error(), text) != NULL, "%s: message '%s' lacks '%s'", #call,        \
               pstate_last_error(), text);                                                                   \
  } while (0)

static int argument_errors(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = world_of(ps);
  const int me = self->rank, peer = 1 - me;
  float buf[4] = {0};
  pstate_request_t *q = (pstate_request_t *)&buf; /* must be reset to NULL on failure */
  EXPECT(self, pstate_isend(w, buf, 4, PSTATE_FLOAT32, peer, NULL, NULL), PSTATE_ERR_INVALID_ARGUMENT, "req is NULL");
  EXPECT(self, pstate_isend(w, buf, 4, PSTATE_FLOAT32, 2, NULL, &q), PSTATE_ERR_INVALID_ARGUMENT, "peer 2");
  RANK_CHECK(self, q == NULL, "a failed isend returns no request");
  EXPECT(self, pstate_irecv(w, buf, 4, PSTATE_FLOAT32, -1, NULL, &q), PSTATE_ERR_INVALID_ARGUMENT, "peer -1");
  EXPECT(self, pstate_isend(w, buf, 4, PSTATE_FLOAT32, me, NULL, &q), PSTATE_ERR_INVALID_ARGUMENT, "is this rank");
  EXPECT(self, pstate_irecv(w, buf, 4, PSTATE_FLOAT32, me, NULL, &q), PSTATE_ERR_INVALID_ARGUMENT, "is this rank");
  EXPECT(self, pstate_irecv(w, NULL, 4, PSTATE_FLOAT32, peer, NULL, &q), PSTATE_ERR_INVALID_ARGUMENT, "buf is NULL");
  EXPECT(self, pstate_irecv(w, buf, 4, (pstate_dtype_t)99, peer, NULL, &q), PSTATE_ERR_INVALID_ARGUMENT, "dtype");
  EXPECT(self, pstate_irecv(w, buf, 4, PSTATE_FLOAT32, peer, buf, &q), PSTATE_ERR_INVALID_ARGUMENT, "stream");
  EXPECT(self, pstate_irecv(NULL, buf, 4, PSTATE_FLOAT32, peer, NULL, &q), PSTATE_ERR_INVALID_ARGUMENT, "g is NULL");
  EXPECT(self, pstate_wait(NULL), PSTATE_ERR_INVALID_ARGUMENT, "req is NULL");
  int done = 7;
  EXPECT(self, pstate_test(NULL, &done), PSTATE_ERR_INVALID_ARGUMENT, "req is NULL");
  RANK_CHECK(self, done == 0, "a failed test says not done");
  uint64_t not_a_request[4] = {0};
  EXPECT(self, pstate_wait((pstate_request_t *)not_a_request), PSTATE_ERR_INVALID_ARGUMENT,
         "not a live request");

  /* count 0: legal, a zero-byte message (buf may be NULL). */
  pstate_request_t *z = NULL, *zz = NULL;
  RANK_OK(self, pstate_irecv(w, NULL, 0, PSTATE_FLOAT32, peer, NULL, &z));
  RANK_OK(self, pstate_isend(w, NULL, 0, PSTATE_FLOAT32, peer, NULL, &zz));
  /* test(req, NULL) is refused and leaves req valid. */
  EXPECT(self, pstate_test(z, NULL), PSTATE_ERR_INVALID_ARGUMENT, "done is NULL");
  RANK_OK(self, pstate_wait(z));
  RANK_OK(self, pstate_wait(zz));

  /* Batches: every op checked first, the error names its index; nothing moves. */
  pstate_p2p_op_t ops[2] = {PSTATE_P2P_OP_INIT, PSTATE_P2P_OP_INIT};
  ops[0].is_send = 1;
  ops[0].buf = buf;
  ops[0].count = 4;
  ops[0].peer = peer;
  float got[4] = {-1, -1, -1, -1};
  ops[1].buf = got;
  ops[1].count = 4;
  ops[1].peer = peer;
  pstate_p2p_op_t bad[2];
  memcpy(bad, ops, sizeof bad);
  bad[1].struct_size = 8;
  EXPECT(self, pstate_p2p_batch(w, bad, 2, NULL), PSTATE_ERR_INVALID_ARGUMENT, "ops[1].struct_size");
  memcpy(bad, ops, sizeof bad);
  bad[1].peer = me;
  EXPECT(self, pstate_p2p_batch(w, bad, 2, NULL), PSTATE_ERR_INVALID_ARGUMENT, "is this rank");
  memcpy(bad, ops, sizeof bad);
  bad[0].peer = 5;
  EXPECT(self, pstate_p2p_batch(w, bad, 2, NULL), PSTATE_ERR_INVALID_ARGUMENT, "ops[0].peer 5");
  memcpy(bad, ops, sizeof bad);
  bad[1].dtype = (pstate_dtype_t)-3;
  EXPECT(self, pstate_p2p_batch(w, bad, 2, NULL), PSTATE_ERR_INVALID_ARGUMENT, "ops[1].dtype");
  memcpy(bad, ops, sizeof bad);
  bad[0].buf = NULL;
  EXPECT(self, pstate_p2p_batch(w, bad, 2, NULL), PSTATE_ERR_INVALID_ARGUMENT, "ops[0] is NULL");
  EXPECT(self, pstate_p2p_batch(w, NULL, 2, NULL), PSTATE_ERR_INVALID_ARGUMENT, "ops is NULL");
  EXPECT(self, pstate_p2p_batch(w, ops, 2, buf), PSTATE_ERR_INVALID_ARGUMENT, "stream");
  RANK_OK(self, pstate_p2p_batch(w, NULL, 0, NULL));
  /* The good batch still works after all that (no refused op consumed a sequence number). */
  float mine[4] = {(float)me, (float)me, (float)me, (float)me};
  ops[0].buf = mine;
  RANK_OK(self, pstate_p2p_batch(w, ops, 2, NULL));
  for (int i = 0; i < 4; ++i) RANK_CHECK(self, got[i] == (float)peer, "batch received %g", (double)got[i]);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_argument_errors_name_the_argument(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 60, argument_errors, NULL), 0);
}

/* The dlopen table reaches the new calls, appended at its end in order. */
static void test_api_table_has_the_requests_at_its_end(void **state) {
  (void)state;
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  assert_non_null(api);
  assert_true(offsetof(pstate_api_t, p2p_batch) < api->struct_size);
  assert_true(offsetof(pstate_api_t, trace_dump) < offsetof(pstate_api_t, isend));
  assert_true(offsetof(pstate_api_t, isend) < offsetof(pstate_api_t, irecv));
  assert_true(offsetof(pstate_api_t, irecv) < offsetof(pstate_api_t, wait));
  assert_true(offsetof(pstate_api_t, wait) < offsetof(pstate_api_t, test));
  assert_true(offsetof(pstate_api_t, test) < offsetof(pstate_api_t, p2p_batch));
  assert_ptr_equal(api->isend, pstate_isend);
  assert_ptr_equal(api->irecv, pstate_irecv);
  assert_ptr_equal(api->wait, pstate_wait);
  assert_ptr_equal(api->test, pstate_test);
  assert_ptr_equal(api->p2p_batch, pstate_p2p_batch);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_api_table_has_the_requests_at_its_end),
      cmocka_unit_test(test_argument_errors_name_the_argument),
      cmocka_unit_test(test_ring_isend_before_irecv_2_3_4_processes),
      cmocka_unit_test(test_ring_isend_before_irecv_threads),
      cmocka_unit_test(test_several_pending_with_a_collective_between_2_3_4_processes),
      cmocka_unit_test(test_several_pending_with_a_collective_between_threads),
      cmocka_unit_test(test_batch_with_every_peer_in_reversed_orders_2_3_4_processes),
      cmocka_unit_test(test_batch_with_every_peer_in_reversed_orders_threads),
      cmocka_unit_test(test_a_large_send_moves_while_its_sender_waits_in_a_collective),
      cmocka_unit_test(test_large_messages_arrive_when_the_kernel_refuses_cma),
      cmocka_unit_test(test_peer_killed_with_requests_pending_is_peer_lost_on_every_survivor),
      cmocka_unit_test(test_requests_pending_at_finalize_or_abort_wait_aborted),
      cmocka_unit_test(test_destroy_model_parallel_refused_while_a_request_is_pending),
      cmocka_unit_test(test_a_request_that_never_matches_times_out),
      cmocka_unit_test(test_a_receive_of_another_size_is_mismatch),
      cmocka_unit_test(test_a_failure_elsewhere_does_not_cancel_a_completed_request),
      cmocka_unit_test(test_a_receive_that_failed_is_never_written_later),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
