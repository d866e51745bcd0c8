/*
 * test_shrink.c — a dead rank costs its share, not the job: pstate_shrink and pstate_grow on real
 * processes whose job store is served by `pstate store` (as `pstate run` serves it), so it
 * outlives every rank.
 *
 * - world 6, rank 3 SIGKILLs itself in the middle of a 4 MiB all_reduce: the five survivors get
 *   PEER_LOST or ABORTED, shrink (new ranks 0 1 2 -1 3 4), initialize tp 5, and every collective
 *   is exact again (references computed here from the launch ranks); each prints the time from
 *   the kill to its first exact collective after the shrink;
 * - two ranks (1 and 4) killed at once: four survivors, tp 2 x pp 2, exact;
 * - a rank (2) killed mid all_reduce and another (5) killed while it is inside pstate_shrink:
 *   the four others still end with one answer, the same on each, and exact collectives;
 * - rank 0 serving the store itself (no external store) dies: pstate_shrink fails with PEER_LOST
 *   naming the reason and the fix, on every survivor, within the timeout;
 * - a replacement: rank 2 dies, the survivors shrink to 3, the test harness starts a new process
 *   with PSTATE_REJOIN=1 and RANK=2, the survivors pstate_grow: four ranks again (the newcomer is
 *   rank 3), tp 2 x pp 2, exact;
 * - the same while a process without the job token holds 400 connections to the job's store
 *   (from before rank 2 dies; each one the store closes is opened again): issue 27, item 10, the
 *   replacement's pstate_init used to fail with TIMEOUT, the flood holding every connection the
 *   store would take;
 * - strangers: a process with the wrong job token never gets in (AUTH), one claiming a live
 *   rank's RANK is refused at the store, pstate_grow then times out with the world unchanged and
 *   usable; bad arguments of both calls.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"

#define TIMEOUT_MS 10000
#define BIG (1 << 20) /* floats: 4 MiB, so a kill lands inside an all_reduce */
#define MAX_WORLD 8

/* Shared between the forked ranks (MAP_SHARED). */
typedef struct shared_t {
  double killed_at_ms;              /* CLOCK_MONOTONIC of the first kill */
  double first_exact_ms[MAX_WORLD]; /* per launch rank: kill -> first exact collective after shrink */
  char job[64];                     /* the job id (from a flight-recorder dump): its shm names */
  int flood;                        /* > 0: rank 0 has a stranger hold this many store connections */
} shared_t;

typedef struct scenario_t {
  int victims[2];        /* launch ranks killed mid all_reduce (-1: none) */
  int shrink_victim;     /* launch rank killed during the survivors' pstate_shrink (-1: none) */
  int shrink_victim_delay_us; /* -1: it never calls pstate_shrink; else: dies this long after calling it */
  int iterations_before; /* all-reduces before the kill */
  int tp_after, pp_after;
  shared_t *shared;
} scenario_t;

static shared_t *shared_new(void) {
  void *p = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(p != MAP_FAILED);
  return (shared_t *)p;
}

/* The SIGKILL comes from a timer's SIGALRM (no second thread: ThreadSanitizer's job picks tests
 * that make threads, and a multi-process test adds nothing there), so the process dies wherever
 * its main thread is then: inside a collective, or inside pstate_shrink. */
static shared_t *g_kill_note; /* where the kill time goes (NULL: not noted) */

static void kill_now(int sig) {
  (void)sig;
  if (g_kill_note != NULL && g_kill_note->killed_at_ms == 0) g_kill_note->killed_at_ms = pstate_test_now_ms();
  kill(getpid(), SIGKILL);
}

/* This process dies delay_us from now, whatever its main thread is doing then. */
static void die_in(int delay_us, shared_t *shared) {
  g_kill_note = shared;
  signal(SIGALRM, kill_now);
  struct itimerval t;
  memset(&t, 0, sizeof t);
  t.it_value.tv_sec = delay_us / 1000000;
  t.it_value.tv_usec = delay_us % 1000000;
  setitimer(ITIMER_REAL, &t, NULL);
}

static float contribution(int launch_rank, size_t i) { return (float)((launch_rank + 1) * (int)(1 + i % 7)); }

/* All-reduces of the world (BIG floats) until one fails; 0 when it failed as a dead peer makes it. */
static int all_reduce_until_failure(const pstate_test_rank_t *self, pstate_t *ps, const scenario_t *sc, float *buf) {
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  int victim = self->rank == sc->victims[0] || self->rank == sc->victims[1];
  for (int iter = 0; iter < 100000; ++iter) {
    if (victim && iter == sc->iterations_before) die_in(300, sc->shared);
    for (size_t i = 0; i < BIG; ++i) buf[i] = contribution(self->rank, i);
    pstate_status_t s = pstate_all_reduce(world, buf, buf, BIG, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (s == PSTATE_OK) continue;
    fprintf(stderr, "rank %d: all_reduce #%d: %s: %s\n", self->rank, iter, pstate_status_string(s), pstate_last_error());
    RANK_CHECK(self, s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_ABORTED || s == PSTATE_ERR_TIMEOUT, "status %s",
               pstate_status_string(s));
    RANK_CHECK(self, !victim, "the victim lived on");
    return 0;
  }
  RANK_CHECK(self, 0, "no all_reduce failed");
  return 1;
}

/* RANK_OK, but 2 when the call failed because a peer died (the caller shrinks again). */
#define OK_OR_LOST(self, call)                                                                              \
  do {                                                                                                   \
    pstate_status_t s_ = (call);                                                                         \
    if (s_ == PSTATE_ERR_PEER_LOST || s_ == PSTATE_ERR_ABORTED) {                                        \
      fprintf(stderr, "rank %d: %s: %s: %s\n", (self)->rank, #call, pstate_status_string(s_), pstate_last_error()); \
      return 2;                                                                                          \
    }                                                                                                    \
    RANK_OK(self, s_);                                                                                   \
  } while (0)

/* Every kind of collective checked on the rebuilt world: tp all_reduce of BIG floats, world
 * all_gather, broadcast, reduce_scatter and all_to_all, a pp send/recv ring step when pp > 1,
 * barrier. members[k] = the launch rank of new rank k. */
static int exact_after(const pstate_test_rank_t *self, pstate_t *ps, const int *members, int n, int tp, int pp,
                       float *buf) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = tp;
  cfg.pipeline_parallel_size = pp;
  OK_OR_LOST(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *world = NULL, *tpg = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tpg));
  pstate_group_info_t wi = PSTATE_GROUP_INFO_INIT, ti = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(world, &wi));
  RANK_OK(self, pstate_group_info(tpg, &ti));
  RANK_CHECK(self, wi.world_size == n, "world size %d, expected %d", wi.world_size, n);
  RANK_CHECK(self, members[wi.rank] == self->rank, "new rank %d is launch rank %d, not this one (%d)", wi.rank,
             members[wi.rank], self->rank);
  int tp_ranks[MAX_WORLD];
  size_t got = 0;
  RANK_OK(self, pstate_group_ranks(tpg, tp_ranks, MAX_WORLD, &got));
  RANK_CHECK(self, (int)got == tp && tp_ranks[0] == (wi.rank / tp) * tp, "tp group of %zu from %d", got, tp_ranks[0]);
  for (size_t i = 0; i < BIG; ++i) buf[i] = contribution(self->rank, i);
  OK_OR_LOST(self, pstate_all_reduce(tpg, buf, buf, BIG, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  for (size_t i = 0; i < BIG; ++i) {
    float want = 0;
    for (int k = 0; k < tp; ++k) want += contribution(members[tp_ranks[k]], i);
    RANK_CHECK(self, buf[i] == want, "tp all_reduce [%zu] = %g, expected %g", i, buf[i], want);
  }
  int32_t mine = 100 + self->rank, all[MAX_WORLD];
  OK_OR_LOST(self, pstate_all_gather(world, &mine, all, 1, PSTATE_INT32, NULL));
  for (int k = 0; k < n; ++k)
    RANK_CHECK(self, all[k] == 100 + members[k], "world all_gather [%d] = %d, expected %d", k, all[k], 100 + members[k]);
  /* broadcast from the last rank, reduce_scatter and all_to_all of the world */
  int32_t b[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4 && wi.rank == n - 1; ++k) b[k] = 500 + self->rank * 10 + k;
  OK_OR_LOST(self, pstate_broadcast(world, b, 4, PSTATE_INT32, n - 1, NULL));
  for (int k = 0; k < 4; ++k) RANK_CHECK(self, b[k] == 500 + members[n - 1] * 10 + k, "broadcast [%d] = %d", k, b[k]);
  int32_t rs_send[2 * MAX_WORLD], rs_recv[2];
  for (int j = 0; j < 2 * n; ++j) rs_send[j] = (self->rank + 1) * (j + 1);
  OK_OR_LOST(self, pstate_reduce_scatter(world, rs_send, rs_recv, 2, PSTATE_INT32, PSTATE_SUM, NULL));
  for (int t = 0; t < 2; ++t) {
    int32_t want = 0;
    for (int k = 0; k < n; ++k) want += (members[k] + 1) * (wi.rank * 2 + t + 1);
    RANK_CHECK(self, rs_recv[t] == want, "reduce_scatter [%d] = %d, expected %d", t, rs_recv[t], want);
  }
  int32_t a2a_send[MAX_WORLD], a2a_recv[MAX_WORLD];
  for (int k = 0; k < n; ++k) a2a_send[k] = self->rank * 100 + k;
  OK_OR_LOST(self, pstate_all_to_all(world, a2a_send, a2a_recv, 1, PSTATE_INT32, NULL));
  for (int k = 0; k < n; ++k)
    RANK_CHECK(self, a2a_recv[k] == members[k] * 100 + wi.rank, "all_to_all [%d] = %d", k, a2a_recv[k]);
  if (pp > 1) {
    pstate_group_t *ppg = NULL;
    RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_PP, &ppg));
    pstate_group_info_t pi = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(ppg, &pi));
    int32_t out = 7000 + self->rank, in = -1;
    int next = (pi.rank_in_group + 1) % pi.world_size, prev = (pi.rank_in_group + pi.world_size - 1) % pi.world_size;
    if (pi.rank_in_group % 2 == 0) {
      OK_OR_LOST(self, pstate_send(ppg, &out, 1, PSTATE_INT32, next, NULL));
      OK_OR_LOST(self, pstate_recv(ppg, &in, 1, PSTATE_INT32, prev, NULL));
    } else {
      OK_OR_LOST(self, pstate_recv(ppg, &in, 1, PSTATE_INT32, prev, NULL));
      OK_OR_LOST(self, pstate_send(ppg, &out, 1, PSTATE_INT32, next, NULL));
    }
    RANK_CHECK(self, in == 7000 + members[pi.prev_rank], "pp ring: got %d from new rank %d", in, pi.prev_rank);
  }
  OK_OR_LOST(self, pstate_barrier(world));
  return 0;
}

/* The job's id, from a flight-recorder dump (its "job <id>" line), into shared->job. */
static int note_job_id(const pstate_test_rank_t *self, pstate_t *ps, shared_t *shared) {
  char path[128], line[256];
  snprintf(path, sizeof path, "/tmp/pstate-test-shrink-%d.trace", (int)getpid());
  RANK_OK(self, pstate_trace_dump(ps, path));
  FILE *f = fopen(path, "r");
  RANK_CHECK(self, f != NULL, "cannot read %s", path);
  while (fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, "job ", 4) == 0) {
      line[strcspn(line, "\n")] = 0;
      line[4 + sizeof shared->job - 1] = 0; /* a job id is short: cut, never overrun */
      memcpy(shared->job, line + 4, strlen(line + 4) + 1);
    }
  fclose(f);
  unlink(path);
  RANK_CHECK(self, shared->job[0] != 0, "no job line in the dump");
  return 0;
}

/* The shared-memory segments of the job left in /dev/shm (names "pstate-<job>-..."). */
static int segments_left(const char *job) {
  char prefix[80];
  snprintf(prefix, sizeof prefix, "pstate-%s-", job);
  DIR *dir = opendir("/dev/shm");
  int n = 0;
  if (dir == NULL) return 0;
  for (struct dirent *e; (e = readdir(dir)) != NULL;)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
      fprintf(stderr, "left behind: /dev/shm/%s\n", e->d_name);
      ++n;
    }
  closedir(dir);
  return n;
}

static int survive_and_shrink(const pstate_test_rank_t *self) {
  const scenario_t *sc = (const scenario_t *)self->arg;
  static float buf[BIG];
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = self->world_size / 2;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg)); /* groups that the shrink must drop */
  pstate_group_t *old_tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &old_tp));
  if (all_reduce_until_failure(self, ps, sc, buf) != 0) return 1;
  int small[1];
  size_t needed = 0;
  RANK_CHECK(self, pstate_shrink(ps, small, 1, &needed) == PSTATE_ERR_INVALID_ARGUMENT, "capacity 1 < world refused");
  RANK_CHECK(self, needed == (size_t)self->world_size, "*count %zu on a too-small capacity: the world size %d", needed,
             self->world_size);
  if (self->rank == sc->shrink_victim) {
    if (sc->shrink_victim_delay_us < 0) { /* never arrives: dies while the others wait inside pstate_shrink */
      usleep(300000);
      kill(getpid(), SIGKILL);
    }
    die_in(sc->shrink_victim_delay_us, NULL); /* dies somewhere inside pstate_shrink, or just after it */
  }
  /* Shrink until every collective is exact: a rank that dies after the survivors agreed makes the
   * first collective of the new world fail, and the survivors shrink again (as a serving loop does). */
  int members[MAX_WORLD], n = self->world_size;
  for (int r = 0; r < n; ++r) members[r] = r;
  for (int round = 0;; ++round) {
    RANK_CHECK(self, round < 3, "still no exact world after %d shrinks", round);
    int new_rank[MAX_WORLD];
    for (int i = 0; i < MAX_WORLD; ++i) new_rank[i] = -9;
    size_t old_world = 0;
    pstate_status_t s = pstate_shrink(ps, new_rank, MAX_WORLD, &old_world);
    RANK_CHECK(self, s == PSTATE_OK, "pstate_shrink: %s: %s", pstate_status_string(s), pstate_last_error());
    RANK_CHECK(self, old_world == (size_t)n, "*count %zu, the world before the call had %d ranks", old_world, n);
    int next[MAX_WORLD], m = 0;
    for (int i = 0; i < n; ++i) {
      RANK_CHECK(self, new_rank[i] == -1 || new_rank[i] == m, "new_rank[%d] = %d, expected -1 or %d", i, new_rank[i], m);
      if (new_rank[i] >= 0) next[m++] = members[i];
    }
    memcpy(members, next, sizeof next);
    n = m;
    if (round == 0) {
      RANK_CHECK(self, pstate_all_reduce(old_tp, buf, buf, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_ERR_INVALID_STATE,
                 "a group of before the shrink answers INVALID_STATE");
      RANK_CHECK(self,
                 strstr(pstate_last_error(), "replaced by pstate_shrink") &&
                     !strstr(pstate_last_error(), "pstate_destroy_model_parallel"),
                 "the old tp group says: %s", pstate_last_error());
    }
    int rc = exact_after(self, ps, members, n, sc->tp_after, sc->pp_after, buf);
    if (rc == 0) break;
    if (rc != 2) return 1;
    fprintf(stderr, "rank %d: the new world lost a rank again: shrinking once more\n", self->rank);
  }
  /* the final world: every rank not killed, in launch order */
  int want = 0;
  for (int r = 0; r < self->world_size; ++r) {
    if (r == sc->victims[0] || r == sc->victims[1] || r == sc->shrink_victim) continue;
    RANK_CHECK(self, want < n && members[want] == r, "final member %d is launch rank %d, expected %d", want,
               want < n ? members[want] : -1, r);
    ++want;
  }
  RANK_CHECK(self, n == want, "final world of %d, expected %d", n, want);
  double ms = pstate_test_now_ms() - sc->shared->killed_at_ms;
  sc->shared->first_exact_ms[self->rank] = ms;
  if (note_job_id(self, ps, sc->shared)) return 1;
  fprintf(stderr, "rank %d: kill -> first exact collective after the shrink: %.0f ms\n", self->rank, ms);
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run_scenario(int world, scenario_t *sc) {
  sc->shared = shared_new();
  unsigned long may_die = 0;
  for (int i = 0; i < 2; ++i)
    if (sc->victims[i] >= 0) may_die |= 1ul << sc->victims[i];
  if (sc->shrink_victim >= 0) may_die |= 1ul << sc->shrink_victim;
  pstate_test_job_t job = {world, 120, survive_and_shrink, sc, NULL, 1, may_die, 0, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
  double worst = 0;
  for (int r = 0; r < world; ++r)
    if (sc->shared->first_exact_ms[r] > worst) worst = sc->shared->first_exact_ms[r];
  printf("kill -> first exact collective on every survivor (world %d): %.0f ms\n", world, worst);
  /* the dead ranks' segments and the old world's are gone with the survivors' finalize */
  assert_int_equal(segments_left(sc->shared->job), 0);
  munmap(sc->shared, sizeof(shared_t));
}

static void test_one_of_six_killed_mid_all_reduce(void **state) {
  (void)state;
  scenario_t sc = {{3, -1}, -1, 0, 3, 5, 1, NULL};
  run_scenario(6, &sc);
}

static void test_two_of_six_killed_at_once(void **state) {
  (void)state;
  scenario_t sc = {{1, 4}, -1, 0, 3, 2, 2, NULL};
  run_scenario(6, &sc);
}

static void test_rank_killed_while_the_others_shrink(void **state) {
  (void)state;
  scenario_t sc = {{2, -1}, 5, -1, 2, 2, 2, NULL};
  run_scenario(6, &sc);
}

static void test_rank_killed_inside_its_shrink(void **state) {
  (void)state;
  scenario_t sc = {{2, -1}, 5, 1000, 2, 2, 2, NULL};
  run_scenario(6, &sc);
}

/* ---- rank 0 serves the store and dies ---- */

static int store_dies_with_rank0(const pstate_test_rank_t *self) {
  static float buf[BIG];
  scenario_t sc = {{0, -1}, -1, 0, 2, 1, 1, NULL};
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  if (all_reduce_until_failure(self, ps, &sc, buf) != 0) return 1;
  double t0 = pstate_test_now_ms();
  size_t count = 99;
  pstate_status_t s = pstate_shrink(ps, NULL, 0, &count);
  RANK_CHECK(self, count == 0, "*count is 0 on an error other than a small capacity: %zu", count);
  const char *e = pstate_last_error();
  fprintf(stderr, "rank %d: pstate_shrink: %s: %s\n", self->rank, pstate_status_string(s), e);
  RANK_CHECK(self, s == PSTATE_ERR_PEER_LOST, "status %s", pstate_status_string(s));
  RANK_CHECK(self, strstr(e, "launch rank 0 served it") != NULL && strstr(e, "pstate run") != NULL &&
                       strstr(e, "PSTATE_STORE_EXTERNAL=1") != NULL,
             "the error says why and what to do: %s", e);
  RANK_CHECK(self, pstate_test_now_ms() - t0 < TIMEOUT_MS + 2000, "within the timeout");
  RANK_OK(self, pstate_abort(ps));
  return 0;
}

static void test_rank0_store_dies_documented_error(void **state) {
  (void)state;
  pstate_test_job_t job = {4, 120, store_dies_with_rank0, NULL, NULL, 0, 1ul << 0, 0, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
}

/* ---- a replacement rejoins ---- */

/* A stranger: a process without the job token that holds n connections to the job's store
 * (MASTER_PORT) until it is killed (or its parent ends), as an attacker would: a connection the
 * store closes is opened again 50 ms later. Every tenth stops inside the store's greeting; the
 * others never say a word. Returns its pid once every connection was opened once, or -1. */
#define FLOOD_MAX 1000
#define FLOOD_REOPEN_MS 50.0

static int flood_connect(const struct sockaddr_in *a, int i) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, (const struct sockaddr *)a, sizeof *a) != 0) {
    close(fd);
    return -1;
  }
  if (i % 10 == 0) (void)!write(fd, "PSTATE-STO", 10);
  return fd;
}

static pid_t start_flood(int n) {
  const char *port_text = getenv("MASTER_PORT");
  int port = port_text != NULL ? atoi(port_text) : 0;
  int ready[2];
  if (port <= 0 || n > FLOOD_MAX || pipe(ready) != 0) return -1;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) {
    close(ready[1]);
    char c = 0;
    ssize_t got = pid > 0 ? read(ready[0], &c, 1) : -1;
    close(ready[0]);
    return got == 1 ? pid : -1;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);
  for (int fd = 3; fd < 1024; ++fd) /* none of rank 0's sockets: a stranger holds only its own */
    if (fd != ready[1]) close(fd);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  static struct pollfd fds[FLOOD_MAX];
  static double reopen_at[FLOOD_MAX];
  for (int i = 0; i < n; ++i) {
    fds[i].fd = flood_connect(&a, i);
    fds[i].events = POLLIN;
    if (fds[i].fd < 0) _exit(1);
  }
  (void)!write(ready[1], "r", 1);
  close(ready[1]);
  for (;;) {
    (void)poll(fds, (nfds_t)n, 10);
    double now = pstate_test_now_ms();
    for (int i = 0; i < n; ++i) {
      if (fds[i].fd >= 0 && fds[i].revents != 0) {
        char buf[256];
        if (read(fds[i].fd, buf, sizeof buf) > 0) continue; /* the store said something: ignored */
        close(fds[i].fd);
        fds[i].fd = -1; /* poll() skips it */
        reopen_at[i] = now + FLOOD_REOPEN_MS;
      } else if (fds[i].fd < 0 && now >= reopen_at[i]) {
        fds[i].fd = flood_connect(&a, i);
        if (fds[i].fd < 0) reopen_at[i] = now + FLOOD_REOPEN_MS;
      }
    }
  }
}

static int replace_and_grow(const pstate_test_rank_t *self) {
  static float buf[BIG];
  shared_t *shared = (shared_t *)self->arg;
  scenario_t sc = {{2, -1}, -1, 0, 2, 1, 1, shared};
  const int members[4] = {0, 1, 3, 2}; /* the replacement of launch rank 2 is appended */
  pstate_t *ps = NULL;
  pid_t flood = -1;
  if (self->rejoined) {
    double t0 = pstate_test_now_ms();
    RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps)); /* returns once admitted */
    fprintf(stderr, "rank %d (replacement): admitted after %.0f ms\n", self->rank, pstate_test_now_ms() - t0);
  } else {
    RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
    if (shared->flood > 0 && self->rank == 0) { /* before rank 2 can die: the others wait for rank 0 */
      flood = start_flood(shared->flood);
      RANK_CHECK(self, flood > 0, "the stranger could not open %d connections to the store", shared->flood);
    }
    if (all_reduce_until_failure(self, ps, &sc, buf) != 0) return 1;
    int new_rank[4];
    RANK_OK(self, pstate_shrink(ps, new_rank, 4, &(size_t){0}));
    RANK_CHECK(self, new_rank[2] == -1 && new_rank[3] == 2, "new ranks %d %d %d %d", new_rank[0], new_rank[1],
               new_rank[2], new_rank[3]);
    if (exact_after(self, ps, members, 3, 3, 1, buf) != 0) return 1;
    pstate_group_t *world_before = NULL;
    RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world_before));
    RANK_OK(self, pstate_grow(ps, 60000)); /* the harness starts the replacement when rank 2 dies */
    pstate_group_t *tp = NULL;
    RANK_CHECK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp) == PSTATE_ERR_INVALID_STATE,
               "grow dropped the model-parallel groups");
    /* the world of before names the call that replaced it (issue 44: "pstate_destroy_model_parallel") */
    RANK_CHECK(self,
               pstate_barrier(world_before) == PSTATE_ERR_INVALID_STATE &&
                   strstr(pstate_last_error(), "replaced by pstate_grow") &&
                   strstr(pstate_last_error(), "use the groups of the grown context"),
               "the world of before the grow says: %s", pstate_last_error());
  }
  if (exact_after(self, ps, members, 4, 2, 2, buf) != 0) return 1;
  if (flood > 0) {
    kill(flood, SIGKILL);
    waitpid(flood, NULL, 0);
  }
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_replacement_rejoins_with_grow(void **state) {
  (void)state;
  shared_t *shared = shared_new();
  int statuses[4];
  pstate_test_job_t job = {4, 120, replace_and_grow, shared, statuses, 1, 1ul << 2, 1, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
  assert_true(WIFEXITED(statuses[2]) && WEXITSTATUS(statuses[2]) == 0); /* the replacement's verdict */
  munmap(shared, sizeof(shared_t));
}

static void test_replacement_rejoins_past_a_flood_of_strangers(void **state) {
  (void)state;
  shared_t *shared = shared_new();
  shared->flood = 400;
  int statuses[4];
  pstate_test_job_t job = {4, 120, replace_and_grow, shared, statuses, 1, 1ul << 2, 1, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
  assert_true(WIFEXITED(statuses[2]) && WEXITSTATUS(statuses[2]) == 0); /* the replacement's verdict */
  munmap(shared, sizeof(shared_t));
}

/* ---- strangers and bad arguments ---- */

/* A process that tries to join the job: its pstate_init status. */
static pstate_status_t try_to_join(const char *rank, const char *token, char *why, size_t why_size) {
  int fds[2];
  if (pipe(fds) != 0) return PSTATE_ERR_INTERNAL;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv("RANK", rank, 1);
    setenv("LOCAL_RANK", rank, 1);
    setenv("PSTATE_REJOIN", "1", 1);
    if (token != NULL) setenv("PSTATE_JOB_TOKEN", token, 1);
    pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
    p.init_method = "env://";
    p.timeout_ms = 3000;
    pstate_t *ps = NULL;
    pstate_status_t s = pstate_init(&p, &ps);
    char line[1024];
    snprintf(line, sizeof line, "%s", s == PSTATE_OK ? "" : pstate_last_error());
    (void)!write(fds[1], line, strlen(line));
    _exit((int)s);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], why, why_size - 1);
  why[got > 0 ? got : 0] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? (pstate_status_t)WEXITSTATUS(status) : PSTATE_ERR_INTERNAL;
}

static int strangers_stay_out(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  size_t count = 99;
  RANK_CHECK(self, pstate_shrink(NULL, NULL, 0, &count) == PSTATE_ERR_INVALID_ARGUMENT && count == 0, "NULL context");
  RANK_CHECK(self, pstate_shrink(ps, NULL, 0, NULL) == PSTATE_ERR_INVALID_ARGUMENT, "NULL count");
  RANK_CHECK(self, pstate_grow(NULL, 0) == PSTATE_ERR_INVALID_ARGUMENT, "NULL context");
  RANK_CHECK(self, pstate_grow(ps, -1) == PSTATE_ERR_INVALID_ARGUMENT, "negative timeout");
  if (self->rank == 0) {
    char why[1024];
    pstate_status_t s = try_to_join("1", "not-the-token", why, sizeof why);
    fprintf(stderr, "stranger with another token: %s: %s\n", pstate_status_string(s), why);
    RANK_CHECK(self, s == PSTATE_ERR_AUTH, "a wrong token is refused: %s (%s)", pstate_status_string(s), why);
    s = try_to_join("1", NULL, why, sizeof why); /* the right token, but rank 1 is alive */
    fprintf(stderr, "process claiming live rank 1: %s: %s\n", pstate_status_string(s), why);
    RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && strstr(why, "already taken") != NULL, "a live rank's RANK is refused: %s (%s)",
               pstate_status_string(s), why);
  }
  pstate_status_t s = pstate_grow(ps, 1500);
  RANK_CHECK(self, s == PSTATE_ERR_TIMEOUT && strstr(pstate_last_error(), "unchanged") != NULL, "grow: %s: %s",
             pstate_status_string(s), pstate_last_error());
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  int32_t one = 1, sum = 0;
  RANK_OK(self, pstate_all_reduce(world, &one, &sum, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, sum == self->world_size, "the world is unchanged: sum %d", sum);
  int new_rank[3];
  RANK_OK(self, pstate_shrink(ps, new_rank, 3, &count)); /* nobody died: the same world, renumbered as before */
  RANK_CHECK(self, count == 3, "*count %zu", count);
  RANK_CHECK(self, new_rank[0] == 0 && new_rank[1] == 1 && new_rank[2] == 2, "identity");
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  RANK_OK(self, pstate_all_reduce(world, &one, &sum, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, sum == self->world_size, "sum %d after a shrink with nobody dead", sum);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_strangers_cannot_join(void **state) {
  (void)state;
  pstate_test_job_t job = {3, 120, strangers_stay_out, NULL, NULL, 1, 0, 0, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_of_six_killed_mid_all_reduce),
      cmocka_unit_test(test_two_of_six_killed_at_once),
      cmocka_unit_test(test_rank_killed_while_the_others_shrink),
      cmocka_unit_test(test_rank_killed_inside_its_shrink),
      cmocka_unit_test(test_rank0_store_dies_documented_error),
      cmocka_unit_test(test_replacement_rejoins_with_grow),
      cmocka_unit_test(test_replacement_rejoins_past_a_flood_of_strangers),
      cmocka_unit_test(test_strangers_cannot_join),
  };
  if (getenv("PSTATE_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("PSTATE_TEST_FILTER")); /* e.g. "*flood*" */
  return cmocka_run_group_tests(tests, NULL, NULL);
}
