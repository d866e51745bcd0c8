/* fork_ranks.c — child processes for multi-process tests, bounded in time (see fork_ranks.h). */
#define _POSIX_C_SOURCE 200809L
#include "fork_ranks.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static int status_of(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 255;
}

pid_t pst_fork(pst_child_fn fn, int index, void *arg) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(0); /* the parent's alarm is not ours; the parent's pst_wait bounds us */
    int rc = fn(index, arg);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  return pid;
}

int pst_wait(pid_t pid, int timeout_ms) {
  long long until = now_ms() + timeout_ms;
  for (;;) {
    int wstatus = 0;
    pid_t got = waitpid(pid, &wstatus, WNOHANG);
    if (got == pid) return status_of(wstatus);
    if (got < 0 && errno != EINTR) return 255;
    if (now_ms() >= until) {
      fprintf(stderr, "fork_ranks: child %d still running after %d ms: killing it\n", (int)pid, timeout_ms);
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      return -1;
    }
    sleep_ms(2);
  }
}

int pst_run_children(int n, pst_child_fn fn, void *arg, int timeout_ms, int *statuses) {
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  int failed = 0;
  if (pids == NULL) return n;
  for (int i = 0; i < n; ++i) pids[i] = pst_fork(fn, i, arg);
  long long until = now_ms() + timeout_ms;
  for (int i = 0; i < n; ++i) {
    int st = 255;
    if (pids[i] > 0) {
      long long left = until - now_ms();
      st = pst_wait(pids[i], left > 0 ? (int)left : 0);
    }
    if (statuses != NULL) statuses[i] = st;
    if (st != 0) failed++;
  }
  free(pids);
  return failed;
}
