/* ranks.c — the process and thread launchers of ranks.h. */
#define _GNU_SOURCE
#include "ranks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double pstate_test_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int pstate_test_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    perror("pstate_test_free_port");
    abort();
  }
  close(fd);
  return ntohs(a.sin_port);
}

pstate_status_t pstate_test_init(const pstate_test_rank_t *self, int64_t timeout_ms, pstate_t **out) {
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.init_method = self->init_method;
  p.rank = self->rank;
  p.world_size = self->world_size;
  p.local_rank = self->rank;
  p.timeout_ms = timeout_ms;
  return pstate_init(&p, out);
}

/* Forks rank r of a job whose store is at 127.0.0.1:port; the child runs fn and exits with its
 * verdict. rejoin: a replacement (PSTATE_REJOIN=1, self.rejoined = 1). */
static pid_t start_rank(int r, const char *world, const char *port, const char *token, pstate_test_rank_fn fn,
                        void *arg, int rejoin) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  char rank[16];
  snprintf(rank, sizeof rank, "%d", r);
  setenv("RANK", rank, 1);
  setenv("LOCAL_RANK", rank, 1);
  setenv("WORLD_SIZE", world, 1);
  setenv("LOCAL_WORLD_SIZE", world, 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port, 1);
  setenv("PSTATE_JOB_TOKEN", token, 1);
  if (rejoin) setenv("PSTATE_REJOIN", "1", 1);
  pstate_test_rank_t self;
  memset(&self, 0, sizeof self);
  self.rank = r;
  self.world_size = atoi(world);
  snprintf(self.init_method, sizeof self.init_method, "env://");
  self.arg = arg;
  self.rejoined = rejoin;
  int rc = fn(&self);
  fflush(stdout);
  fflush(stderr);
  /* PSTATE_TEST_EXIT=1 (coverage runs): exit(), so every instrumented library writes its counts */
  if (getenv("PSTATE_TEST_EXIT") != NULL) exit(rc);
  _exit(rc);
}

int pstate_test_run_processes_kill(int world_size, int timeout_s, pstate_test_rank_fn fn, void *arg, int *statuses,
                                   int victim, int kill_after_ms) {
  pstate_test_job_t job;
  memset(&job, 0, sizeof job);
  job.world_size = world_size;
  job.timeout_s = timeout_s;
  job.fn = fn;
  job.arg = arg;
  job.statuses = statuses;
  job.victim = victim;
  job.kill_after_ms = kill_after_ms;
  return pstate_test_run_job(&job);
}

int pstate_test_run_processes(int world_size, int timeout_s, pstate_test_rank_fn fn, void *arg, int *statuses) {
  return pstate_test_run_processes_kill(world_size, timeout_s, fn, arg, statuses, -1, 0);
}

typedef struct thread_job_t {
  pstate_test_rank_t self;
  pstate_test_rank_fn fn;
  int rc;
} thread_job_t;

static void *thread_main(void *p) {
  thread_job_t *job = p;
  job->rc = job->fn(&job->self);
  return NULL;
}

int pstate_test_run_threads(int world_size, int timeout_s, pstate_test_rank_fn fn, void *arg) {
  (void)timeout_s; /* each rank's pstate timeout bounds the threads; ctest's TIMEOUT backs it */
  int port = pstate_test_free_port();
  thread_job_t *jobs = calloc((size_t)world_size, sizeof(thread_job_t));
  pthread_t *threads = calloc((size_t)world_size, sizeof(pthread_t));
  for (int r = 0; r < world_size; ++r) {
    jobs[r].self.rank = r;
    jobs[r].self.world_size = world_size;
    jobs[r].self.arg = arg;
    snprintf(jobs[r].self.init_method, sizeof jobs[r].self.init_method, "tcp://127.0.0.1:%d", port);
    jobs[r].fn = fn;
    pthread_create(&threads[r], NULL, thread_main, &jobs[r]);
  }
  int failed = 0;
  for (int r = 0; r < world_size; ++r) {
    pthread_join(threads[r], NULL);
    if (jobs[r].rc != 0) failed++;
  }
  free(jobs);
  free(threads);
  return failed;
}

/* `pstate store` of the build tree on 127.0.0.1:port, until stop_store. */
static pid_t start_store(int world_size, const char *port, const char *token) {
  const char *dir = getenv("PSTATE_BUILD_DIR");
  char exe[4096], world[16];
  snprintf(exe, sizeof exe, "%s/pstate", dir != NULL ? dir : ".");
  snprintf(world, sizeof world, "%d", world_size);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("PSTATE_JOB_TOKEN", token, 1);
    execl(exe, exe, "store", "--world-size", world, "--host", "127.0.0.1", "--port", port, (char *)NULL);
    fprintf(stderr, "cannot run %s: %s (is PSTATE_BUILD_DIR set?)\n", exe, strerror(errno));
    _exit(127);
  }
  /* ready once it accepts a connection (it binds before it listens for ranks) */
  for (int i = 0; i < 1000; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (ok) return pid;
    if (waitpid(pid, NULL, WNOHANG) == pid) break;
    usleep(10000);
  }
  fprintf(stderr, "pstate store on port %s did not come up\n", port);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

int pstate_test_run_job(const pstate_test_job_t *job) {
  const int n = job->world_size;
  char port[16], world[16], token[48];
  /* PSTATE_TEST_MASTER_PORT: a port the caller chose (test_pairwise_matrix runs jobs at once and
   * gives each a port no other running job has; two free-port probes can return the same one) */
  const char *given = getenv("PSTATE_TEST_MASTER_PORT");
  snprintf(port, sizeof port, "%d", given != NULL && atoi(given) > 0 ? atoi(given) : pstate_test_free_port());
  snprintf(world, sizeof world, "%d", n);
  snprintf(token, sizeof token, "test-token-%d-%ld", (int)getpid(), (long)time(NULL));
  pid_t store = -1;
  if (job->external_store) {
    store = start_store(n, port, token);
    if (store < 0) return n;
    setenv("PSTATE_STORE_EXTERNAL", "1", 1);
  }
  pid_t *pids = calloc((size_t)n, sizeof(pid_t));
  int *done = calloc((size_t)n, sizeof(int));
  int *respawned = calloc((size_t)n, sizeof(int));
  for (int r = 0; r < n; ++r) pids[r] = start_rank(r, world, port, token, job->fn, job->arg, 0);
  if (job->external_store) unsetenv("PSTATE_STORE_EXTERNAL");
  double start = pstate_test_now_ms();
  int remaining = n, failed = 0, killed_victim = 0;
  while (remaining > 0) {
    if (job->victim >= 0 && job->victim < n && !killed_victim && pstate_test_now_ms() - start >= job->kill_after_ms) {
      kill(pids[job->victim], SIGKILL);
      killed_victim = 1;
    }
    if (pstate_test_now_ms() - start > job->timeout_s * 1000.0) {
      for (int r = 0; r < n; ++r)
        if (!done[r]) {
          fprintf(stderr, "rank %d: still running after %d s: killed (hang)\n", r, job->timeout_s);
          kill(pids[r], SIGKILL);
        }
    }
    int status = 0;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p <= 0) {
      usleep(2000);
      continue;
    }
    for (int r = 0; r < n; ++r) {
      if (pids[r] != p) continue;
      if (job->statuses != NULL) job->statuses[r] = status;
      const int may_die = ((job->may_die >> r) & 1) || r == job->victim;
      if (may_die && WIFSIGNALED(status) && job->respawn && !respawned[r]) {
        respawned[r] = 1; /* a replacement takes its rank: PSTATE_REJOIN=1 */
        if (job->external_store) setenv("PSTATE_STORE_EXTERNAL", "1", 1);
        pids[r] = start_rank(r, world, port, token, job->fn, job->arg, 1);
        if (job->external_store) unsetenv("PSTATE_STORE_EXTERNAL");
        continue;
      }
      done[r] = 1;
      remaining--;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !(may_die && WIFSIGNALED(status)) && r != job->victim) {
        failed++;
        if (WIFSIGNALED(status)) fprintf(stderr, "rank %d: killed by signal %d\n", r, WTERMSIG(status));
        else fprintf(stderr, "rank %d: exit status %d\n", r, WEXITSTATUS(status));
      }
    }
  }
  if (store > 0) {
    kill(store, SIGTERM);
    waitpid(store, NULL, 0);
  }
  free(pids);
  free(done);
  free(respawned);
  return failed;
}
