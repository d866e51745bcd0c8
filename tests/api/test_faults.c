/*
 * test_faults.c — errors instead of hangs: a SIGKILLed peer, a duplicate rank, a stranger at the
 * store, and mismatched collectives under PSTATE_CHECK=1.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"

#define FAULT_TIMEOUT_MS 3000

/* pstate_live_ranks of ps: the world less `dead` (-1: the whole world). */
static int live_ranks_are(const pstate_test_rank_t *self, pstate_t *ps, int dead) {
  int ranks[16];
  size_t n = 99;
  RANK_OK(self, pstate_live_ranks(ps, ranks, 16, &n));
  size_t want = 0;
  for (int r = 0; r < self->world_size; ++r) {
    if (r == dead) continue;
    RANK_CHECK(self, want < n && ranks[want] == r, "live rank #%zu is %d, expected %d (dead: %d)", want,
               want < n ? ranks[want] : -1, r, dead);
    ++want;
  }
  RANK_CHECK(self, n == want, "%zu live ranks, expected %zu", n, want);
  size_t need = 0;
  RANK_CHECK(self, pstate_live_ranks(ps, ranks, 1, &need) == PSTATE_ERR_INVALID_ARGUMENT && need == want,
             "capacity 1: INVALID_ARGUMENT with the count needed (%zu)", need);
  return 0;
}

/* Loops all-reduces until one fails; the victim (*arg) is SIGKILLed by the harness meanwhile.
 * The survivor must fail with PEER_LOST or TIMEOUT within the timeout + 2 s of its last success,
 * learn from pstate_live_ranks that the victim alone is gone, get ABORTED afterwards, and
 * pstate_abort must return. */
typedef struct {
  int victim;
  int *checked; /* shared (MAP_SHARED) between the forked ranks: survivors that checked live ranks */
} victim_t;

static int survive_peer_death(const pstate_test_rank_t *self) {
  const victim_t *v = (const victim_t *)self->arg;
  const int victim = v->victim;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, FAULT_TIMEOUT_MS, &ps));
  if (live_ranks_are(self, ps, -1) != 0) return 1;
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float buf[256];
  double last_ok = pstate_test_now_ms();
  pstate_status_t s = PSTATE_OK;
  for (long iter = 0; iter < 10000000 && s == PSTATE_OK; ++iter) {
    for (int i = 0; i < 256; ++i) buf[i] = 1.0f;
    s = pstate_all_reduce(world, buf, buf, 256, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (s == PSTATE_OK) last_ok = pstate_test_now_ms();
  }
  double waited = pstate_test_now_ms() - last_ok;
  fprintf(stderr, "rank %d: %s after %.0f ms: %s\n", self->rank, pstate_status_string(s), waited, pstate_last_error());
  RANK_CHECK(self, s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TIMEOUT, "status %s", pstate_status_string(s));
  RANK_CHECK(self, waited <= FAULT_TIMEOUT_MS + 2000, "survivor took %.0f ms to fail (bound %d ms)", waited,
             FAULT_TIMEOUT_MS + 2000);
  if (live_ranks_are(self, ps, victim) != 0) return 1;
  /* A survivor that returns ends its process, and the others would rightly count it dead: wait
   * (bounded) until every survivor has looked. */
  __atomic_add_fetch(v->checked, 1, __ATOMIC_SEQ_CST);
  for (int i = 0; i < 1000 && __atomic_load_n(v->checked, __ATOMIC_SEQ_CST) < self->world_size - 1; ++i)
    usleep(10000);
  RANK_CHECK(self, pstate_all_reduce(world, buf, buf, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_ERR_ABORTED,
             "a failed context refuses further collectives");
  RANK_CHECK(self, strstr(pstate_last_error(), "pstate_abort") != NULL, "ABORTED names the way out");
  double t0 = pstate_test_now_ms();
  RANK_OK(self, pstate_abort(ps));
  RANK_CHECK(self, pstate_test_now_ms() - t0 < 2000, "pstate_abort returned promptly");
  return 0;
}

static int *shared_counter(void) {
  void *p = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(p != MAP_FAILED);
  return (int *)p; /* zero */
}

static void test_sigkill_one_of_four_survivors_fail_fast_and_abort(void **state) {
  (void)state;
  int statuses[4];
  victim_t v = {2, shared_counter()};
  int failed = pstate_test_run_processes_kill(4, 60, survive_peer_death, &v, statuses, v.victim, 1500);
  munmap(v.checked, sizeof(int));
  assert_int_equal(failed, 0);
  assert_true(WIFSIGNALED(statuses[2]));
}

/* The rank-0 store is killed: the other ranks fail too (they lose their peer), no hang. */
static void test_sigkill_rank0_survivors_fail_fast(void **state) {
  (void)state;
  int statuses[3];
  victim_t v = {0, shared_counter()};
  assert_int_equal(pstate_test_run_processes_kill(3, 60, survive_peer_death, &v, statuses, v.victim, 1500), 0);
  munmap(v.checked, sizeof(int));
}

/* rank 2 claims rank 1: one of the two claimants is refused with MISMATCH naming the rank; the
 * job cannot complete, and every process ends with an error instead of hanging. */
static int duplicate_rank(const pstate_test_rank_t *self) {
  if (self->rank == 2) setenv("RANK", "1", 1);
  if (self->rank == 2) usleep(200000); /* let the real rank 1 claim first */
  pstate_t *ps = NULL;
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.timeout_ms = FAULT_TIMEOUT_MS;
  pstate_status_t s = pstate_init(&p, &ps);
  fprintf(stderr, "rank %d: init -> %s: %s\n", self->rank, pstate_status_string(s), pstate_last_error());
  if (s == PSTATE_OK) pstate_abort(ps);
  if (s == PSTATE_ERR_MISMATCH && strstr(pstate_last_error(), "rank 1") == NULL) return 99;
  return 10 + (int)s;
}

static void test_rank_claiming_a_taken_rank_is_refused(void **state) {
  (void)state;
  int st[3];
  pstate_test_run_processes(3, 60, duplicate_rank, NULL, st);
  int mismatches = 0;
  for (int r = 0; r < 3; ++r) {
    assert_true(WIFEXITED(st[r]));                 /* nobody hung or crashed */
    assert_int_not_equal(WEXITSTATUS(st[r]), 10);  /* nobody succeeded */
    assert_int_not_equal(WEXITSTATUS(st[r]), 99);  /* the message names the rank */
    if (WEXITSTATUS(st[r]) == 10 + PSTATE_ERR_MISMATCH) mismatches++;
  }
  assert_true(mismatches >= 1);
}

/* A stranger at the store port: raw garbage, then a pstate_init with the wrong job token. The
 * stranger is refused (AUTH) and the job keeps working.
 * The stranger is forked before rank 0's pstate_init, while rank 0 has one thread: a child forked
 * from a process with pstate's threads (store server, UCX, flight-recorder watchdog) may inherit a
 * lock one of them held, such as the sanitizer allocator's, and hang in its first malloc. It waits
 * on a pipe until rank 0 has sent the garbage. */
static int stranger_after(int go_fd) {
  char b = 0;
  if (read(go_fd, &b, 1) != 1 || b != 'g') _exit(2); /* rank 0 gave up before the garbage */
  setenv("PSTATE_JOB_TOKEN", "not-the-token", 1);
  setenv("RANK", "1", 1);
  pstate_t *intruder = NULL;
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.timeout_ms = 3000;
  pstate_status_t s = pstate_init(&p, &intruder);
  fprintf(stderr, "stranger: %s: %s\n", pstate_status_string(s), pstate_last_error());
  _exit(s == PSTATE_ERR_AUTH ? 0 : 1);
}

static int stranger_job(const pstate_test_rank_t *self) {
  int go[2] = {-1, -1};
  pid_t pid = -1;
  if (self->rank == 0) {
    RANK_CHECK(self, pipe(go) == 0, "pipe");
    pid = fork();
    RANK_CHECK(self, pid >= 0, "fork the stranger");
    if (pid == 0) {
      close(go[1]);
      stranger_after(go[0]);
    }
    close(go[0]);
  }
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  if (self->rank == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(getenv("MASTER_PORT")));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    RANK_CHECK(self, connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect to the store");
    const char garbage[] = "GET / HTTP/1.1\r\n\xff\xff\xff\xff\xff\xff\xff\xff garbage garbage";
    RANK_CHECK(self, write(fd, garbage, sizeof garbage) > 0, "write garbage");
    close(fd);
    RANK_CHECK(self, write(go[1], "g", 1) == 1, "start the stranger");
    close(go[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    RANK_CHECK(self, WIFEXITED(status) && WEXITSTATUS(status) == 0, "the stranger was refused with AUTH");
  }
  RANK_OK(self, pstate_barrier(world));
  for (int iter = 0; iter < 20; ++iter) {
    int64_t v = self->rank + iter;
    RANK_OK(self, pstate_all_reduce(world, &v, &v, 1, PSTATE_INT64, PSTATE_SUM, NULL));
    RANK_CHECK(self, v == 1 + 2 * iter, "job unaffected: %lld", (long long)v);
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_stranger_with_garbage_or_wrong_token_is_refused_job_unaffected(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, stranger_job, NULL, NULL), 0);
}

/* PSTATE_CHECK=1: different counts or different collectives are reported on every rank with both
 * sides named, and the group stays usable. */
static int mismatched(const pstate_test_rank_t *self) {
  setenv("PSTATE_CHECK", "1", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  float buf[16] = {0}, out[64];
  size_t count = self->rank == 2 ? 12 : 16;
  pstate_status_t s = pstate_all_reduce(tp, buf, buf, count, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "count mismatch -> %s", pstate_status_string(s));
  RANK_CHECK(self, strstr(pstate_last_error(), "count 12") && strstr(pstate_last_error(), "count 16") &&
                       strstr(pstate_last_error(), "PSTATE_CHECK"),
             "message names both sides: %s", pstate_last_error());
  if (self->rank == 1) s = pstate_all_gather(tp, buf, out, 4, PSTATE_FLOAT32, NULL);
  else s = pstate_all_reduce(tp, buf, buf, 4, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "op mismatch -> %s", pstate_status_string(s));
  RANK_CHECK(self, strstr(pstate_last_error(), "all_gather") && strstr(pstate_last_error(), "all_reduce"),
             "message names both operations: %s", pstate_last_error());
  /* still usable */
  for (int i = 0; i < 16; ++i) buf[i] = 1.0f;
  RANK_OK(self, pstate_all_reduce(tp, buf, buf, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, buf[15] == (float)self->world_size, "after a reported mismatch the group works");
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_check_reports_mismatched_collectives_on_every_rank(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 60, mismatched, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigkill_one_of_four_survivors_fail_fast_and_abort),
      cmocka_unit_test(test_sigkill_rank0_survivors_fail_fast),
      cmocka_unit_test(test_rank_claiming_a_taken_rank_is_refused),
      cmocka_unit_test(test_stranger_with_garbage_or_wrong_token_is_refused_job_unaffected),
      cmocka_unit_test(test_check_reports_mismatched_collectives_on_every_rank),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
