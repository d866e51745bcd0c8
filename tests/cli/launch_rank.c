/*
 * launch_rank.c — one rank of the jobs tests/cli/test_run_dumps.sh, test_run_shm.sh and
 * test_log_json.sh run under `pstate run` (issue 27, items 11, 13 and 16; issue 45, item 4).
 * Public API only.
 *
 * usage: launch_rank block | undisturbed | log_json | metrics    (files go to $LAUNCH_DIR)
 *
 *   block        2 ranks. Each writes $LAUNCH_DIR/init-rank<R>.pstate-trace (pstate_trace_dump:
 *                its `job` line names the job's shared-memory names), then rank 0 waits in
 *                pstate_barrier on the world and rank 1 in pstate_recv from rank 0, for ever (the
 *                test stops them with Ctrl-C to `pstate run`): rank 0 has made the world's
 *                collective segment (group rank 0 makes it), rank 1 the pair's point-to-point
 *                segment, and neither peer ever attaches to the other's.
 *   undisturbed  3 ranks. Ranks 1 and 2 make a group of their own (pstate_new_group), so rank 0's
 *                death reaches neither of their waits. Rank 1 waits in pstate_recv from rank 2
 *                on it; rank 2 is idle in its own code. In both, program threads wait in system
 *                calls while `pstate run` asks for dumps: one in nanosleep (100 ms at a time: in
 *                rank 2 the main thread, which the kernel gives a signal sent to the process
 *                first), one in poll + read on a pipe. The nanosleep loop runs until its
 *                rank's dump, asked for by the launcher, is there ($PSTATE_TRACE_DIR/rank<R>.
 *                pstate-trace with reason "a request through the store ..."), then wakes the
 *                reader and prints one line: "rank R: undisturbed: ..." when no nanosleep
 *                returned early and neither poll nor read failed (EINTR), else "rank R: DISTURBED:
 *                ...". Rank 0 exits 1 once rank 1 says it is ready (the file $LAUNCH_DIR/ready),
 *                after pstate_abort: `pstate run` then asks the others for their dumps.
 *   log_json     2 ranks, for the log lines they make: an all_reduce of the world that succeeds,
 *                one whose count differs between the ranks (PSTATE_ERR_MISMATCH on both, which
 *                the library logs at INFO with group, call and status; it fails the context),
 *                pstate_abort; then rank 1 exits 3 so that `pstate run` logs a failure of its own.
 *   metrics      any number of ranks, on UCX (PSTATE_SHM=0: a MISMATCH leaves the context usable),
 *                for test_metrics_prometheus.sh: on the world 5 all_reduce, 3 all_gather, 2
 *                broadcast, 4 barrier, then one all_reduce whose count differs on rank 0
 *                (PSTATE_ERR_MISMATCH on every rank), then rank 0 alone a recv from rank 1 that
 *                never comes (PSTATE_ERR_TIMEOUT at PSTATE_TIMEOUT_MS). Each rank then writes
 *                $LAUNCH_DIR/done-<R> and waits (at most 300 s) for $LAUNCH_DIR/finish while a
 *                Prometheus server scrapes it, then pstate_abort and exits 0.
 */
#define _GNU_SOURCE
#include <pstate/pstate.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1;
static char g_dir[512];
static int g_pipe[2] = {-1, -1};

static void die_on(pstate_status_t s, const char *what) {
  if (s == PSTATE_OK) return;
  fprintf(stderr, "launch_rank %d: %s: %s: %s\n", g_rank, what, pstate_status_string(s), pstate_last_error());
  exit(1);
}

static void touch(const char *name) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  if (f != NULL) fclose(f);
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static const char kRequested[] = "reason a request through the store";

/* True when this rank's dump exists and was asked for through the store (its reason line). */
static int requested_dump_written(void) {
  const char *dir = getenv("PSTATE_TRACE_DIR");
  char path[600], line[512];
  snprintf(path, sizeof path, "%s/rank%d.pstate-trace", dir != NULL ? dir : "pstate-trace", g_rank);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f) != NULL)
    found = strncmp(line, kRequested, strlen(kRequested)) == 0;
  fclose(f);
  return found;
}

static char g_reader_result[256] = "reader never ran";

static void *reader(void *arg) {
  (void)arg;
  struct pollfd p = {g_pipe[0], POLLIN, 0};
  int n = poll(&p, 1, -1);
  if (n != 1) {
    snprintf(g_reader_result, sizeof g_reader_result, "poll returned %d (%s)", n, n < 0 ? strerror(errno) : "-");
  } else {
    char b = 0;
    ssize_t got = read(g_pipe[0], &b, 1);
    if (got != 1)
      snprintf(g_reader_result, sizeof g_reader_result, "read returned %zd (%s)", got, got < 0 ? strerror(errno) : "-");
    else
      snprintf(g_reader_result, sizeof g_reader_result, "poll and read returned the byte");
  }
  if (strcmp(g_reader_result, "poll and read returned the byte") != 0) { /* said at once */
    printf("rank %d: DISTURBED: %s\n", g_rank, g_reader_result);
    fflush(stdout);
  }
  return NULL;
}

/* Sleeps in nanosleep until the requested dump is there (at most 60 s), wakes the reader and
 * says how both fared; then waits until pstate run stops the job. */
static void *sleeper(void *reader_thread) {
  int early = 0, naps = 0;
  while (!requested_dump_written() && naps < 600) {
    struct timespec nap = {0, 100 * 1000 * 1000}, left = {0, 0};
    if (nanosleep(&nap, &left) != 0 && early++ == 0) { /* EINTR: a signal handler ran in this thread */
      printf("rank %d: DISTURBED: nanosleep returned early (%s)\n", g_rank, strerror(errno));
      fflush(stdout);
    }
    ++naps;
  }
  const int dumped = requested_dump_written();
  char b = 'x';
  if (write(g_pipe[1], &b, 1) != 1) perror("launch_rank: write");
  pthread_join(*(pthread_t *)reader_thread, NULL);
  const int fine = dumped && early == 0 && strcmp(g_reader_result, "poll and read returned the byte") == 0;
  printf("rank %d: %s: %s; %s\n", g_rank, fine ? "undisturbed" : "DISTURBED",
         !dumped ? "no requested dump within 60 s" : early == 0 ? "no nanosleep returned early" : "a nanosleep returned early",
         g_reader_result);
  fflush(stdout);
  for (;;) pause(); /* until pstate run stops the job */
  return NULL;
}

static void run_undisturbed(pstate_t *ps) {
  /* ranks 1 and 2 make a group; rank 0 joins none */
  const int pair[2] = {1, 2};
  pstate_group_t *g = NULL;
  die_on(pstate_new_group(ps, g_rank == 0 ? NULL : pair, g_rank == 0 ? 0 : 2, &g), "new_group");
  if (g_rank == 0) {
    char ready[600];
    snprintf(ready, sizeof ready, "%s/ready", g_dir);
    for (int i = 0; i < 6000 && !exists(ready); ++i) usleep(10000);
    fprintf(stderr, "launch_rank 0: failing on purpose\n");
    pstate_abort(ps); /* no pstate_finalize: the others are not told; nothing leaked (LeakSanitizer) */
    exit(1);
  }
  if (pipe(g_pipe) != 0) exit(2);
  static pthread_t r;
  pthread_create(&r, NULL, reader, NULL);
  if (g_rank == 2) sleeper(&r); /* the main thread: the one a signal sent to the process goes to first */
  pthread_t s;
  pthread_create(&s, NULL, sleeper, &r);
  touch("ready");
  float x[4];
  pstate_status_t st = pstate_recv(g, x, 4, PSTATE_FLOAT32, 1, NULL); /* rank 2 never sends */
  fprintf(stderr, "launch_rank 1: recv returned %s: %s\n", pstate_status_string(st), pstate_last_error());
  pthread_join(s, NULL);
}

static int run_log_json(pstate_t *ps, pstate_group_t *world) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  die_on(pstate_all_reduce(world, x, x, 8, PSTATE_FLOAT32, PSTATE_SUM, NULL), "all_reduce");
  const pstate_status_t s = pstate_all_reduce(world, x, x, g_rank == 0 ? 4 : 8, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  if (s != PSTATE_ERR_MISMATCH) {
    fprintf(stderr, "launch_rank %d: the all_reduce of different counts returned %s, not PSTATE_ERR_MISMATCH\n",
            g_rank, pstate_status_string(s));
    return 1;
  }
  /* A MISMATCH fails the context (every later call is ABORTED): leave it the documented way. */
  die_on(pstate_abort(ps), "abort");
  return g_rank == 1 ? 3 : 0;
}

static int run_metrics(pstate_t *ps, pstate_group_t *world) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, all[8 * 64];
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  die_on(pstate_group_info(world, &info), "group info");
  if (info.world_size > 64) return 2;
  for (int i = 0; i < 5; ++i) die_on(pstate_all_reduce(world, x, x, 8, PSTATE_FLOAT32, PSTATE_SUM, NULL), "all_reduce");
  for (int i = 0; i < 3; ++i) die_on(pstate_all_gather(world, x, all, 8, PSTATE_FLOAT32, NULL), "all_gather");
  for (int i = 0; i < 2; ++i) die_on(pstate_broadcast(world, x, 8, PSTATE_FLOAT32, 0, NULL), "broadcast");
  for (int i = 0; i < 4; ++i) die_on(pstate_barrier(world), "barrier");
  pstate_status_t s = pstate_all_reduce(world, x, x, g_rank == 0 ? 4 : 8, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  if (s != PSTATE_ERR_MISMATCH) {
    fprintf(stderr, "launch_rank %d: the mismatched all_reduce returned %s\n", g_rank, pstate_status_string(s));
    return 1;
  }
  if (g_rank == 0 && (s = pstate_recv(world, x, 8, PSTATE_FLOAT32, 1, NULL)) != PSTATE_ERR_TIMEOUT) {
    fprintf(stderr, "launch_rank 0: the recv that never comes returned %s\n", pstate_status_string(s));
    return 1;
  }
  char name[32], finish[600];
  snprintf(name, sizeof name, "done-%d", g_rank);
  touch(name);
  snprintf(finish, sizeof finish, "%s/finish", g_dir);
  for (int i = 0; i < 3000 && !exists(finish); ++i) usleep(100000);
  pstate_abort(ps);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "block") != 0 && strcmp(argv[1], "undisturbed") != 0 &&
                    strcmp(argv[1], "log_json") != 0 && strcmp(argv[1], "metrics") != 0)) {
    fprintf(stderr, "usage: launch_rank block|undisturbed|log_json|metrics\n");
    return 2;
  }
  const char *dir = getenv("LAUNCH_DIR");
  snprintf(g_dir, sizeof g_dir, "%s", dir != NULL ? dir : ".");
  pstate_t *ps = NULL;
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  die_on(pstate_init(&params, &ps), "pstate_init");
  pstate_group_t *world = NULL;
  die_on(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world), "get world");
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  die_on(pstate_group_info(world, &info), "group info");
  g_rank = info.rank;
  if (strcmp(argv[1], "undisturbed") == 0) run_undisturbed(ps);
  if (strcmp(argv[1], "log_json") == 0) return run_log_json(ps, world);
  if (strcmp(argv[1], "metrics") == 0) return run_metrics(ps, world);

  char path[600];
  snprintf(path, sizeof path, "%s/init-rank%d.pstate-trace", g_dir, g_rank);
  die_on(pstate_trace_dump(ps, path), "trace_dump");
  printf("rank %d: blocking\n", g_rank);
  fflush(stdout);
  float x[4] = {0};
  if (g_rank == 0)
    die_on(pstate_barrier(world), "barrier");
  else
    die_on(pstate_recv(world, x, 4, PSTATE_FLOAT32, 0, NULL), "recv");
  return 0;
}
