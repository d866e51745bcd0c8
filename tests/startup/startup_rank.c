/*
 * startup_rank.c — one rank started by hand, as an operator starts it: pstate_init from the
 * environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), then one line on stdout saying how it went and
 * how long pstate_init took:
 *
 *   startup_rank: rank 1: PSTATE_ERR_MISMATCH in 12 ms: pstate_init: the job cannot start: ...
 *   startup_rank: rank 0: PSTATE_OK in 85 ms
 *
 * (the first line of pstate_last_error() only). The start-up tests (tests/startup/startup.sh) run
 * several of these with deliberately wrong settings and check each rank's line; the same lines,
 * run against an older libpstate, are the "before" of the table. Public API only.
 *
 * usage: startup_rank [--init-method URL] [--after finalize|abort|exit|hang|fault]
 *        startup_rank --free-port
 * After a successful pstate_init: finalize (default), abort, exit without either, hang (sleep
 * for an hour: a rank stuck in user code), or fault: all-reduce in a loop; the rank named by
 * STARTUP_VICTIM SIGKILLs itself after 20 all-reduces (or, with STARTUP_VICTIM_FILE, once that
 * file exists), the others report the error they get after STARTUP_REPORT_DELAY_MS (a survivor
 * that takes a while to write its report) and exit 1.
 * Exit status: 0 when everything asked for worked, 10 + the status of pstate_init otherwise.
 */
#define _GNU_SOURCE
#include <pstate/pstate.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const char *rank_name(void) {
  const char *r = getenv("RANK");
  return r != NULL && *r ? r : "?";
}

/* The first line of the last error (messages are one line today; a future one may not be). */
static void first_line(char *out, size_t n) {
  const char *e = pstate_last_error();
  size_t i = 0;
  for (; e[i] != '\0' && e[i] != '\n' && i + 1 < n; ++i) out[i] = e[i];
  out[i] = '\0';
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  close(fd);
  return ntohs(a.sin_port);
}

static int fault_loop(pstate_t *ps) {
  const char *victim = getenv("STARTUP_VICTIM");
  const char *delay = getenv("STARTUP_REPORT_DELAY_MS");
  const char *trigger = getenv("STARTUP_VICTIM_FILE");
  int me = atoi(rank_name());
  pstate_group_t *world = NULL;
  if (pstate_get_group(ps, PSTATE_GROUP_WORLD, &world) != PSTATE_OK) return 1;
  float x[64];
  pstate_status_t s = PSTATE_OK;
  for (long iter = 0; s == PSTATE_OK; ++iter) {
    if (victim != NULL && atoi(victim) == me && (trigger != NULL ? access(trigger, F_OK) == 0 : iter == 20))
      raise(SIGKILL);
    for (int i = 0; i < 64; ++i) x[i] = 1.0f;
    s = pstate_all_reduce(world, x, x, 64, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  }
  char line[1024];
  first_line(line, sizeof line);
  if (delay != NULL) usleep((useconds_t)atoi(delay) * 1000u);
  printf("startup_rank: rank %s reported: %s: %s\n", rank_name(), pstate_status_string(s), line);
  fflush(stdout);
  pstate_abort(ps);
  return 1;
}

int main(int argc, char **argv) {
  const char *init_method = NULL, *after = "finalize";
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--free-port") == 0) {
      int port = free_port();
      printf("%d\n", port);
      return port > 0 ? 0 : 1;
    } else if (strcmp(argv[i], "--init-method") == 0 && i + 1 < argc) {
      init_method = argv[++i];
    } else if (strcmp(argv[i], "--after") == 0 && i + 1 < argc) {
      after = argv[++i];
    } else {
      fprintf(stderr,
              "usage: startup_rank [--init-method URL] [--after finalize|abort|exit|hang|fault] | --free-port\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.init_method = init_method;
  pstate_t *ps = NULL;
  double t0 = now_ms();
  pstate_status_t s = pstate_init(&p, &ps);
  double took = now_ms() - t0;
  if (s != PSTATE_OK) {
    char line[1024];
    first_line(line, sizeof line);
    printf("startup_rank: rank %s: %s in %.0f ms: %s\n", rank_name(), pstate_status_string(s), took, line);
    return 10 + (int)s;
  }
  printf("startup_rank: rank %s: PSTATE_OK in %.0f ms\n", rank_name(), took);
  if (strcmp(after, "hang") == 0) {
    sleep(3600);
    return 0;
  }
  if (strcmp(after, "exit") == 0) return 0;
  if (strcmp(after, "abort") == 0) return pstate_abort(ps) == PSTATE_OK ? 0 : 1;
  if (strcmp(after, "fault") == 0) return fault_loop(ps);
  s = pstate_finalize(ps);
  if (s != PSTATE_OK) {
    printf("startup_rank: rank %s: finalize: %s: %s\n", rank_name(), pstate_status_string(s), pstate_last_error());
    return 1;
  }
  return 0;
}
