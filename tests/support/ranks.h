/*
 * ranks.h — start N ranks of a test as real processes (fork) or as threads, the way a launcher
 * would, and collect their verdicts.
 *
 * Processes: each child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
 * (127.0.0.1), MASTER_PORT (a free port, or PSTATE_TEST_MASTER_PORT when the caller set it) and
 * PSTATE_JOB_TOKEN in its environment, runs fn and
 * _exit()s with its return value. Children never use cmocka asserts (they would longjmp into the
 * parent's test): they use RANK_CHECK, which prints what failed and returns 1. The parent waits
 * at most timeout_s seconds, then SIGKILLs every child: a hang is a failure, never a stuck test.
 *
 * Threads: each thread runs fn with the same environment passed as pstate_init_params_t fields
 * (init_method tcp://127.0.0.1:PORT, rank, world_size), since threads share one environment.
 */
#ifndef PSTATE_TEST_RANKS_H
#define PSTATE_TEST_RANKS_H

#include <pstate/pstate.h>

#include <stdio.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pstate_test_rank_t {
  int rank;
  int world_size;
  char init_method[64]; /* "tcp://127.0.0.1:PORT" (threads) or "env://" (processes) */
  void *arg;
  int rejoined; /* pstate_test_run_job with respawn: 1 in the replacement of a dead rank */
} pstate_test_rank_t;

typedef int (*pstate_test_rank_fn)(const pstate_test_rank_t *self);

/* Forks world_size ranks running fn. Returns the number of ranks that failed (non-zero exit,
 * signal, or killed at the timeout); statuses (may be NULL) receives each rank's wait status. */
int pstate_test_run_processes(int world_size, int timeout_s, pstate_test_rank_fn fn, void *arg, int *statuses);
/* Like above; rank `victim` is SIGKILLed kill_after_ms after start (-1: nobody). */
int pstate_test_run_processes_kill(int world_size, int timeout_s, pstate_test_rank_fn fn, void *arg, int *statuses,
                                   int victim, int kill_after_ms);
/* A job for pstate_test_run_job: processes as above, and optionally
 *  - external_store: `pstate store` of the build tree ($PSTATE_BUILD_DIR/pstate) serves the
 *    job's store and the ranks get PSTATE_STORE_EXTERNAL=1, so the store outlives every rank;
 *  - may_die: a bit per rank whose death by a signal is expected (it kills itself), not a failure;
 *  - respawn: such a rank, once dead, is started again as a replacement (PSTATE_REJOIN=1,
 *    self->rejoined = 1), once; its verdict is the rank's;
 *  - victim: as pstate_test_run_processes_kill. Zero-initialize the struct, then set victim = -1
 *    unless a victim is wanted. */
typedef struct pstate_test_job_t {
  int world_size;
  int timeout_s;
  pstate_test_rank_fn fn;
  void *arg;
  int *statuses; /* may be NULL: each rank's last wait status */
  int external_store;
  unsigned long may_die;
  int respawn;
  int victim;        /* this rank is SIGKILLed kill_after_ms after start (its end is no failure); -1: none */
  int kill_after_ms;
} pstate_test_job_t;
/* Returns the number of ranks that failed. */
int pstate_test_run_job(const pstate_test_job_t *job);
/* Runs world_size ranks as threads of this process; returns the number that failed. */
int pstate_test_run_threads(int world_size, int timeout_s, pstate_test_rank_fn fn, void *arg);

/* pstate_init with the rank's facts (processes: env://; threads: explicit fields). */
pstate_status_t pstate_test_init(const pstate_test_rank_t *self, int64_t timeout_ms, pstate_t **out);

/* A free TCP port on 127.0.0.1. */
int pstate_test_free_port(void);
/* Milliseconds on a monotonic clock. */
double pstate_test_now_ms(void);

#define RANK_CHECK(self, cond, ...)                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", (self)->rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                         \
      fprintf(stderr, "\n");                                                                \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

#define RANK_OK(self, call)                                                                 \
  do {                                                                                      \
    pstate_status_t rank_ok_s_ = (call);                                                    \
    if (rank_ok_s_ != PSTATE_OK) {                                                          \
      fprintf(stderr, "rank %d: %s:%d: %s -> %s: %s\n", (self)->rank, __FILE__, __LINE__, #call, \
              pstate_status_string(rank_ok_s_), pstate_last_error());                      \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* PSTATE_TEST_RANKS_H */
