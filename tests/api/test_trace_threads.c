/*
 * test_trace_threads.c — the flight recorder with ranks as threads (issue 14), the test CI runs
 * under ThreadSanitizer: two ranks in one process run all_reduces and broadcasts while, in each,
 * a second thread keeps writing that rank's dump with pstate_trace_dump and the process keeps
 * receiving SIGUSR1 (PSTATE_TRACE_SIGNAL=1: its watchdog thread dumps both ranks). Each context
 * also runs its dump watcher (a thread parked in a store get, group/dump_watcher.hpp), started
 * at init and stopped at finalize. The writer and the readers of the
 * ring race by design; every dump must still be whole (first line, end line, entries that count
 * up), and the collectives exact.
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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"

#define ITERS 3000

static char g_dir[256];

typedef struct {
  pstate_t *ps;
  int rank;
  atomic_int stop;
  atomic_int dumps;
  int bad;
} dumper_t;

/* 0 when the file is a whole dump whose entry ids count up by one. */
static int check_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 1;
  char line[1024];
  int ok_first = fgets(line, sizeof line, f) != NULL && strcmp(line, "pstate-trace 1\n") == 0;
  int ended = 0;
  long prev = -1;
  int ordered = 1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strcmp(line, "end\n") == 0) ended = 1;
    if (strncmp(line, "e ", 2) == 0) {
      long id = atol(line + 2);
      if (prev >= 0 && id <= prev) ordered = 0;
      prev = id;
    }
  }
  fclose(f);
  return ok_first && ended && ordered ? 0 : 1;
}

static void *dump_loop(void *arg) {
  dumper_t *d = arg;
  char path[400];
  snprintf(path, sizeof path, "%s/api-rank%d.txt", g_dir, d->rank);
  while (!atomic_load(&d->stop)) {
    if (d->rank == 0 && atomic_load(&d->dumps) % 10 == 0) kill(getpid(), SIGUSR1);
    if (pstate_trace_dump(d->ps, path) != PSTATE_OK || check_file(path) != 0) ++d->bad;
    atomic_fetch_add(&d->dumps, 1);
    usleep(2000);
  }
  return NULL;
}

static int rank_fn(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  dumper_t d = {ps, self->rank, 0, 0, 0};
  pthread_t t;
  RANK_CHECK(self, pthread_create(&t, NULL, dump_loop, &d) == 0, "pthread_create");
  int wrong = 0;
  /* at least ITERS rounds, and until both dumpers have raced with them 30 times (agreed by an
     all_reduce every 500 rounds, so both ranks make the same calls) */
  for (int i = 0;;) {
    for (int k = 0; k < 500; ++k, ++i) {
      float x[4] = {(float)(self->rank + i % 1000), 1, 2, 3}, y[4];
      RANK_OK(self, pstate_all_reduce(world, x, y, 4, PSTATE_FLOAT32, PSTATE_SUM, NULL));
      if (y[0] != (float)(2 * (i % 1000) + 1) || y[1] != 2.0f) ++wrong;
      if (i % 100 == 0) RANK_OK(self, pstate_broadcast(world, x, 4, PSTATE_FLOAT32, i % 2, NULL));
    }
    int32_t enough = i >= ITERS && atomic_load(&d.dumps) >= 30, all = 0;
    RANK_OK(self, pstate_all_reduce(world, &enough, &all, 1, PSTATE_INT32, PSTATE_MIN, NULL));
    if (all) break;
  }
  atomic_store(&d.stop, 1);
  pthread_join(t, NULL);
  RANK_CHECK(self, wrong == 0, "%d wrong all_reduce results", wrong);
  RANK_CHECK(self, d.bad == 0, "%d of %d dumps were not whole", d.bad, atomic_load(&d.dumps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_dumps_race_with_the_ranks(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/pstate-test-trace-threads.XXXXXX");
  assert_non_null(mkdtemp(g_dir));
  setenv("PSTATE_TRACE_DIR", g_dir, 1);
  setenv("PSTATE_TRACE_ENTRIES", "64", 1); /* wraps often */
  setenv("PSTATE_TRACE_SIGNAL", "1", 1);    /* the SIGUSR1 handler is opt-in */
  assert_int_equal(pstate_test_run_threads(2, 120, rank_fn, NULL), 0);
  char path[400];
  for (int r = 0; r < 2; ++r) { /* the watchdog's SIGUSR1 dumps of both ranks */
    snprintf(path, sizeof path, "%s/rank%d.pstate-trace", g_dir, r);
    assert_int_equal(check_file(path), 0);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  assert_int_equal(system(cmd), 0);
  unsetenv("PSTATE_TRACE_ENTRIES");
  unsetenv("PSTATE_TRACE_SIGNAL");
  unsetenv("PSTATE_TRACE_DIR");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dumps_race_with_the_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
