/*
 * test_trace.c — the flight recorder through the public API (issue 14): SIGUSR1, where
 * PSTATE_TRACE_SIGNAL=1 asked for its handler, dumps a rank blocked inside a call (in_call names
 * it, the entry is pending) and a rank idle outside pstate (in_call -); without it pstate leaves
 * SIGUSR1 alone (issue 27: a launcher asks through the store, tests/cli/test_run_dumps.sh);
 * pstate_trace_dump writes where it is told, atomically, in the documented format
 * (docs/trace-format.md); the ring keeps the newest entries when it wraps and counts the dropped
 * ones; the recorder's settings are checked (PSTATE_TRACE_ENTRIES=0 turns it off, a bad value
 * fails pstate_init); a failing call writes its dump by itself (TIMEOUT here); a tensor dict is
 * one entry (send_tensor_dict / recv_tensor_dict) around its own operations.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "ranks.h"

static char g_dir[256];

static void fresh_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/pstate-test-trace.XXXXXX");
  assert_non_null(mkdtemp(g_dir));
  setenv("PSTATE_TRACE_DIR", g_dir, 1);
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  unsetenv("PSTATE_TRACE_DIR");
}

/* The whole file (caller frees), or NULL. */

/* The value of header line "key ..." (the rest of the line, into out), 0 when absent. */
static int header(const char *text, const char *key, char *out, size_t cap) {
  size_t k = strlen(key);
  for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, key, k) == 0 && p[k] == ' ') {
      const char *e = strchr(p, '\n');
      size_t n = e ? (size_t)(e - p - (ptrdiff_t)k - 1) : strlen(p + k + 1);
      if (n >= cap) n = cap - 1;
      memcpy(out, p + k + 1, n);
      out[n] = '\0';
      return 1;
    }
  }
  return 0;
}

/* The last line starting with "e " (into out). */
static int last_entry(const char *text, char *out, size_t cap) {
  const char *last = NULL;
  for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    if (strncmp(p, "e ", 2) == 0) last = p;
  if (last == NULL) return 0;
  const char *e = strchr(last, '\n');
  size_t n = e ? (size_t)(e - last) : strlen(last);
  if (n >= cap) n = cap - 1;
  memcpy(out, last, n);
  out[n] = '\0';
  return 1;
}

/* ---- SIGUSR1 while blocked in a broadcast, then while idle ---- */

static void *raise_later(void *arg) {
  usleep((useconds_t)(intptr_t)arg * 1000);
  kill(getpid(), SIGUSR1);
  return NULL;
}

/* Waits up to 3 s for the dump of rank r whose header `key` is `want`; returns its text or NULL. */
static char *wait_dump(int r, const char *key, const char *want) {
  char path[400], v[256];
  snprintf(path, sizeof path, "%s/rank%d.pstate-trace", g_dir, r);
  for (int i = 0; i < 300; ++i) {
    char *t = pstate_test_slurp(path);
    if (t != NULL && header(t, key, v, sizeof v) && strcmp(v, want) == 0) return t;
    free(t);
    usleep(10000);
  }
  return NULL;
}

static void *into_got(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape, size_t bytes,
                      pstate_device_t device) {
  (void)name, (void)dtype, (void)ndim, (void)shape, (void)bytes, (void)device;
  return user;
}

static int signal_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[4] = {1, 2, 3, 4};
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  if (self->rank == 1) {
    usleep(1500 * 1000); /* rank 0 waits in the broadcast meanwhile */
    RANK_OK(self, pstate_broadcast(world, x, 4, PSTATE_FLOAT32, 0, NULL));
  } else {
    pthread_t t;
    pthread_create(&t, NULL, raise_later, (void *)(intptr_t)500); /* while the broadcast waits */
    RANK_OK(self, pstate_broadcast(world, x, 4, PSTATE_FLOAT32, 0, NULL));
    pthread_join(t, NULL);
    char *blocked = wait_dump(0, "reason", "SIGUSR1");
    RANK_CHECK(self, blocked != NULL, "no SIGUSR1 dump while blocked in %s", g_dir);
    char v[256], e[512];
    RANK_CHECK(self, header(blocked, "in_call", v, sizeof v) && strcmp(v, "pstate_broadcast") == 0,
               "in_call while blocked: %s", v);
    RANK_CHECK(self, last_entry(blocked, e, sizeof e) && strstr(e, " broadcast 4 float32 - 0 - ") != NULL &&
                         (strstr(e, " started - ") != NULL || strstr(e, " posted - ") != NULL),
               "the pending broadcast is not the last entry: %s", e);
    RANK_CHECK(self, header(blocked, "in_call_since_unix_ns", v, sizeof v) && strcmp(v, "-") != 0,
               "no in_call_since: %s", v);
    free(blocked);
    /* idle outside pstate: the same route, the broadcast now completed */
    char path[400];
    snprintf(path, sizeof path, "%s/rank0.pstate-trace", g_dir);
    unlink(path);
    kill(getpid(), SIGUSR1);
    char *idle = wait_dump(0, "in_call", "-");
    RANK_CHECK(self, idle != NULL, "no SIGUSR1 dump while idle");
    RANK_CHECK(self, last_entry(idle, e, sizeof e) && strstr(e, " broadcast 4 float32 - 0 - shm completed OK ") != NULL,
               "the broadcast is not completed in the idle dump: %s", e);
    RANK_CHECK(self, strstr(idle, "\nend\n") != NULL, "no end line");
    free(idle);
  }
  /* a tensor dict is one entry around its own operations, on both sides */
  static float data[3] = {1, 2, 3};
  static float got[3];
  const int64_t shape[1] = {3};
  pstate_tensor_t t = PSTATE_TENSOR_INIT;
  t.name = "w";
  t.ndim = 1;
  t.shape = shape;
  t.data = data;
  if (self->rank == 0) {
    RANK_OK(self, pstate_send_tensor_dict(world, &t, 1, 1, NULL));
  } else {
    RANK_OK(self, pstate_recv_tensor_dict(world, 0, into_got, got, NULL));
  }
  char path[400], e[512];
  snprintf(path, sizeof path, "%s/dict-rank%d.txt", g_dir, self->rank);
  RANK_OK(self, pstate_trace_dump(ps, path));
  char *dump = pstate_test_slurp(path);
  RANK_CHECK(self, dump != NULL, "no dump %s", path);
  const char *want = self->rank == 0 ? " p2p 0 0 send_tensor_dict - - - - 1 shm completed OK "
                                     : " p2p 0 0 recv_tensor_dict - - - - 0 shm completed OK ";
  RANK_CHECK(self, strstr(dump, want) != NULL, "no '%s' entry", want);
  RANK_CHECK(self, last_entry(dump, e, sizeof e) && strstr(e, self->rank == 0 ? " send_tensor_dict " : " recv_tensor_dict ") == NULL,
             "the dict's own operations come after its entry: %s", e);
  free(dump);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_sigusr1_dumps_a_blocked_and_an_idle_rank_when_asked_for(void **state) {
  (void)state;
  fresh_dir();
  setenv("PSTATE_TRACE_SIGNAL", "1", 1);
  assert_int_equal(pstate_test_run_processes(2, 60, signal_rank, NULL, NULL), 0);
  unsetenv("PSTATE_TRACE_SIGNAL");
  remove_dir();
}

/* ---- without PSTATE_TRACE_SIGNAL=1, SIGUSR1 stays the program's ---- */

static int disposition_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  struct sigaction now;
  RANK_CHECK(self, sigaction(SIGUSR1, NULL, &now) == 0, "sigaction");
  RANK_CHECK(self, now.sa_handler == SIG_DFL && !(now.sa_flags & SA_SIGINFO),
             "pstate installed a SIGUSR1 handler without PSTATE_TRACE_SIGNAL=1 (PSTATE_TRACE_SIGNAL=%s)",
             getenv("PSTATE_TRACE_SIGNAL") ? getenv("PSTATE_TRACE_SIGNAL") : "unset");
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_sigusr1_is_left_alone_unless_asked_for(void **state) {
  (void)state;
  unsetenv("PSTATE_TRACE_SIGNAL");
  assert_int_equal(pstate_test_run_processes(2, 60, disposition_rank, NULL, NULL), 0);
  setenv("PSTATE_TRACE_SIGNAL", "0", 1);
  assert_int_equal(pstate_test_run_processes(1, 60, disposition_rank, NULL, NULL), 0);
  unsetenv("PSTATE_TRACE_SIGNAL");
}

/* ---- pstate_trace_dump, the ring wrapping, the settings ---- */

static int wrap_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[2] = {1, 2}, y[2];
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  for (int i = 0; i < 20; ++i) RANK_OK(self, pstate_all_reduce(world, x, y, 2, PSTATE_FLOAT32, PSTATE_MAX, NULL));
  char file[400];
  snprintf(file, sizeof file, "%s/mine.txt", g_dir);
  RANK_OK(self, pstate_trace_dump(ps, file));
  char *t = pstate_test_slurp(file);
  RANK_CHECK(self, t != NULL, "no file %s", file);
  RANK_CHECK(self, strncmp(t, "pstate-trace 1\n", 15) == 0, "first line");
  char v[256], e[512];
  RANK_CHECK(self, header(t, "capacity", v, sizeof v) && strcmp(v, "8") == 0, "capacity %s", v);
  RANK_CHECK(self, header(t, "entries", v, sizeof v) && strcmp(v, "8") == 0, "entries %s", v);
  RANK_CHECK(self, header(t, "reason", v, sizeof v) && strcmp(v, "pstate_trace_dump") == 0, "reason %s", v);
  RANK_CHECK(self, header(t, "in_call", v, sizeof v) && strcmp(v, "-") == 0, "in_call %s", v);
  char rec[64], drop[64];
  RANK_CHECK(self, header(t, "recorded", rec, sizeof rec) && header(t, "dropped", drop, sizeof drop), "counts");
  long recorded = atol(rec), dropped = atol(drop);
  RANK_CHECK(self, recorded >= 21 && dropped == recorded - 8, "recorded %ld dropped %ld", recorded, dropped);
  /* the 8 newest, in order: ids recorded-7 .. recorded, all of them all_reduce */
  long expect = recorded - 7;
  for (const char *p = strstr(t, "\ne "); p != NULL; p = strstr(p + 1, "\ne ")) {
    long id = atol(p + 3);
    RANK_CHECK(self, id == expect, "entry id %ld, expected %ld", id, expect);
    ++expect;
  }
  RANK_CHECK(self, expect == recorded + 1, "entries end at %ld", expect - 1);
  /* the newest: the 20th all_reduce, a group of one (local), numbered after the init's barrier */
  RANK_CHECK(self, last_entry(t, e, sizeof e), "no entry");
  char want[128];
  snprintf(want, sizeof want, "e %ld coll 0 ", recorded);
  RANK_CHECK(self, strncmp(e, want, strlen(want)) == 0 && strstr(e, " all_reduce 2 float32 max - - local completed OK ") != NULL,
             "newest entry: %s", e);
  RANK_CHECK(self, header(t, "group", v, sizeof v) && strncmp(v, "0 world:0 1 0 0 ", 16) == 0, "group line %s", v);
  free(t);
  /* a directory: rank<R>.pstate-trace in it; NULL: PSTATE_TRACE_DIR */
  RANK_OK(self, pstate_trace_dump(ps, g_dir));
  RANK_OK(self, pstate_trace_dump(ps, NULL));
  snprintf(file, sizeof file, "%s/rank0.pstate-trace", g_dir);
  struct stat st;
  RANK_CHECK(self, stat(file, &st) == 0, "no %s", file);
  /* nothing half-written left behind */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", g_dir);
  RANK_CHECK(self, system(cmd) != 0, "a temporary file was left in %s", g_dir);
  /* a path that cannot be written */
  pstate_status_t s = pstate_trace_dump(ps, "/proc/no-such-dir/x");
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "/proc/no-such-dir/x") != NULL,
             "unwritable path: %s %s", pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, pstate_trace_dump(NULL, NULL) == PSTATE_ERR_INVALID_ARGUMENT, "NULL ps");
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_trace_dump_and_the_ring_wrapping(void **state) {
  (void)state;
  fresh_dir();
  setenv("PSTATE_TRACE_ENTRIES", "5", 1); /* rounded up to 8 */
  assert_int_equal(pstate_test_run_processes(1, 60, wrap_rank, NULL, NULL), 0);
  unsetenv("PSTATE_TRACE_ENTRIES");
  remove_dir();
}

static int off_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_status_t s = pstate_trace_dump(ps, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_UNSUPPORTED && strstr(pstate_last_error(), "PSTATE_TRACE_ENTRIES=0") != NULL,
             "recorder off: %s %s", pstate_status_string(s), pstate_last_error());
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static int bad_setting_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_status_t s = pstate_test_init(self, 20000, &ps);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "PSTATE_TRACE_ENTRIES") != NULL,
             "bad PSTATE_TRACE_ENTRIES: %s %s", pstate_status_string(s), pstate_last_error());
  return 0;
}

static void test_recorder_settings(void **state) {
  (void)state;
  setenv("PSTATE_TRACE_ENTRIES", "0", 1);
  assert_int_equal(pstate_test_run_processes(1, 60, off_rank, NULL, NULL), 0);
  setenv("PSTATE_TRACE_ENTRIES", "lots", 1);
  assert_int_equal(pstate_test_run_processes(1, 60, bad_setting_rank, NULL, NULL), 0);
  unsetenv("PSTATE_TRACE_ENTRIES");
}

/* ---- a failing call dumps by itself ---- */

static int timeout_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  float x[4] = {1, 2, 3, 4};
  RANK_OK(self, pstate_test_init(self, 1000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  if (self->rank == 1) {
    usleep(3000 * 1000); /* never joins the broadcast in time */
    pstate_abort(ps);
    return 0;
  }
  pstate_status_t s = pstate_broadcast(world, x, 4, PSTATE_FLOAT32, 0, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_TIMEOUT, "broadcast: %s", pstate_status_string(s));
  char path[400];
  snprintf(path, sizeof path, "%s/rank0.pstate-trace", g_dir);
  char *t = pstate_test_slurp(path);
  RANK_CHECK(self, t != NULL, "no dump after TIMEOUT in %s", g_dir);
  char v[512], e[512];
  RANK_CHECK(self, header(t, "reason", v, sizeof v) && strstr(v, "a call failed") != NULL && strstr(v, "timed out") != NULL,
             "reason: %s", v);
  RANK_CHECK(self, header(t, "failure", v, sizeof v) && strstr(v, "timed out") != NULL, "failure: %s", v);
  RANK_CHECK(self, last_entry(t, e, sizeof e) && strstr(e, " broadcast 4 float32 - 0 - shm failed TIMEOUT ") != NULL,
             "entry: %s", e);
  free(t);
  /* a later call refused with ABORTED does not rewrite the dump of the failure */
  unlink(path);
  s = pstate_broadcast(world, x, 4, PSTATE_FLOAT32, 0, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED, "after the failure: %s", pstate_status_string(s));
  struct stat st;
  RANK_CHECK(self, stat(path, &st) != 0, "ABORTED wrote a second dump");
  pstate_abort(ps);
  return 0;
}

static void test_a_failing_call_dumps_once(void **state) {
  (void)state;
  fresh_dir();
  assert_int_equal(pstate_test_run_processes(2, 60, timeout_rank, NULL, NULL), 0);
  remove_dir();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigusr1_dumps_a_blocked_and_an_idle_rank_when_asked_for),
      cmocka_unit_test(test_sigusr1_is_left_alone_unless_asked_for),
      cmocka_unit_test(test_trace_dump_and_the_ring_wrapping),
      cmocka_unit_test(test_recorder_settings),
      cmocka_unit_test(test_a_failing_call_dumps_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
