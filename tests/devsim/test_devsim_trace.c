/*
 * test_devsim_trace.c — the flight recorder in CUDA contexts, on the devsim stand-ins (issue 14):
 * device collectives are recorded with path nccl, state enqueued; with PSTATE_TRACE_CUDA_EVENTS=1
 * each one carries when the stream ran it (timing events: start <= end, within the job's time);
 * the NCCL communicator's creation is recorded (its unique-id broadcast, device_comm_init); a
 * collective that a peer never joins stays started-but-not-ended on the stream, which the dump
 * shows (a start time and no end) while the host call itself returned; and a TIMEOUT of a device
 * call writes the dump by itself.
 */
/* cmocka.h needs these first */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devsim_test_util.h"
#include "files.h"
#include "ranks.h"

#define N 64

static char g_dir[256];


/* Copies the k-th (0-based) entry line containing `needle` into out. */
static int find_entry(const char *text, const char *needle, int k, char *out, size_t cap) {
  for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, "e ", 2) != 0) continue;
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char line[1024];
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, p, n);
    line[n] = '\0';
    if (strstr(line, needle) != NULL && k-- == 0) {
      snprintf(out, cap, "%s", line);
      return 1;
    }
  }
  return 0;
}

/* The last three fields of an entry line: ended, dev_start, dev_end ("-" = -1). */
static void times_of(const char *line, long long *ended, long long *dev_start, long long *dev_end) {
  const char *f[20];
  int n = 0;
  for (const char *p = line; *p != '\0' && n < 20; ++p)
    if (p == line || p[-1] == ' ') f[n++] = p;
  *ended = f[15][0] == '-' ? -1 : atoll(f[15]);
  *dev_start = f[16][0] == '-' ? -1 : atoll(f[16]);
  *dev_end = f[17][0] == '-' ? -1 : atoll(f[17]);
}

static long long unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int timed_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  const long long t0 = unix_ns();
  RANK_OK(self, devsim_init(self, 2000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *d = devsim_device_copy(NULL, N * sizeof(float));
  RANK_CHECK(self, d != NULL, "cudaMalloc");
  for (int i = 0; i < 3; ++i) RANK_OK(self, pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_OK(self, pstate_broadcast(world, d, N, PSTATE_FLOAT32, 1, NULL));
  RANK_CHECK(self, cudaStreamSynchronize(NULL) == cudaSuccess, "sync");
  const long long t1 = unix_ns();
  RANK_OK(self, pstate_trace_dump(ps, NULL));
  char path[400], e[1024];
  snprintf(path, sizeof path, "%s/rank%d.pstate-trace", g_dir, self->rank);
  char *t = pstate_test_slurp(path);
  RANK_CHECK(self, t != NULL && strstr(t, "\ndevice cuda\n") != NULL, "no CUDA dump in %s", g_dir);
  RANK_CHECK(self, find_entry(t, " device_comm_init ", 0, e, sizeof e), "no device_comm_init entry");
  for (int i = 0; i < 3; ++i) {
    RANK_CHECK(self, find_entry(t, " all_reduce 64 float32 sum - - nccl enqueued OK ", i, e, sizeof e),
               "all_reduce %d is not an enqueued nccl entry", i);
    long long ended, ds, de;
    times_of(e, &ended, &ds, &de);
    RANK_CHECK(self, ds >= t0 && de >= ds && de <= t1 + 100000000LL, "device times of %s (job %lld..%lld)", e, t0, t1);
  }
  RANK_CHECK(self, find_entry(t, " broadcast 64 float32 - 1 - nccl enqueued OK ", 0, e, sizeof e), "broadcast entry");
  free(t);
  cudaFree(d);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_device_ops_are_recorded_with_their_stream_times(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/pstate-devsim-trace.XXXXXX");
  assert_non_null(mkdtemp(g_dir));
  setenv("PSTATE_TRACE_DIR", g_dir, 1);
  setenv("PSTATE_TRACE_CUDA_EVENTS", "1", 1);
  assert_int_equal(pstate_test_run_processes(2, 120, timed_rank, NULL, NULL), 0);
  unsetenv("PSTATE_TRACE_CUDA_EVENTS");
}

/* Under PSTATE_CHECK=1 a device collective is one entry, not two (issue 44: the CPU agreement
 * that precedes it was recorded as a collective of its own, so 5 all_reduces were 10 entries and
 * the doctor named the 5th call "#10"): 5 all_reduces are 5 nccl entries, numbered in a row after
 * the first (the communicator's unique-id broadcast, device_comm_init, takes the number after
 * the first one's). */
static int checked_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  RANK_OK(self, devsim_init(self, 2000, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *d = devsim_device_copy(NULL, N * sizeof(float));
  RANK_CHECK(self, d != NULL, "cudaMalloc");
  for (int i = 0; i < 5; ++i) RANK_OK(self, pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, cudaStreamSynchronize(NULL) == cudaSuccess, "sync");
  RANK_OK(self, pstate_trace_dump(ps, NULL));
  char path[400], e[1024];
  snprintf(path, sizeof path, "%s/rank%d.pstate-trace", g_dir, self->rank);
  char *t = pstate_test_slurp(path);
  RANK_CHECK(self, t != NULL, "no dump in %s", g_dir);
  int entries = 0;
  while (find_entry(t, " all_reduce ", entries, e, sizeof e)) ++entries;
  RANK_CHECK(self, entries == 5, "%d all_reduce entries for 5 calls under PSTATE_CHECK=1:\n%s", entries, t);
  long long first_seq = -1;
  for (int i = 0; i < 5; ++i) {
    RANK_CHECK(self, find_entry(t, " all_reduce 64 float32 sum - - nccl enqueued OK ", i, e, sizeof e),
               "all_reduce %d is not an enqueued nccl entry:\n%s", i, t);
    long long id, gid, seq;
    char cls[16];
    RANK_CHECK(self, sscanf(e, "e %lld %15s %lld %lld", &id, cls, &gid, &seq) == 4, "entry %s", e);
    if (i == 0) first_seq = seq;
    const long long want = i == 0 ? first_seq : first_seq + 1 + i; /* device_comm_init: first_seq + 1 */
    RANK_CHECK(self, seq == want, "all_reduce %d has seq %lld, expected %lld:\n%s", i, seq, want, t);
  }
  free(t);
  cudaFree(d);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_device_collectives_are_recorded_once_under_pstate_check(void **state) {
  (void)state;
  setenv("PSTATE_CHECK", "1", 1);
  const int failed = pstate_test_run_processes(2, 120, checked_rank, NULL, NULL);
  unsetenv("PSTATE_CHECK");
  assert_int_equal(failed, 0);
}

/* Rank 1 never joins the second all_reduce: rank 0's call returns (enqueued), the stream holds
 * it; the dump shows it started on the stream and not ended; the next call's wait (barrier)
 * times out and writes the dump by itself. */
static int stuck_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  RANK_OK(self, devsim_init(self, 1500, &ps));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *d = devsim_device_copy(NULL, N * sizeof(float));
  RANK_OK(self, pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, cudaStreamSynchronize(NULL) == cudaSuccess, "sync");
  if (self->rank == 1) {
    usleep(4000 * 1000);
    pstate_abort(ps);
    return 0;
  }
  RANK_OK(self, pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL)); /* enqueued */
  usleep(200 * 1000);
  RANK_OK(self, pstate_trace_dump(ps, NULL));
  char path[400], e[1024];
  snprintf(path, sizeof path, "%s/rank0.pstate-trace", g_dir);
  char *t = pstate_test_slurp(path);
  RANK_CHECK(self, t != NULL, "no dump");
  RANK_CHECK(self, find_entry(t, " all_reduce 64 float32 sum - - nccl enqueued OK ", 1, e, sizeof e), "2nd all_reduce");
  long long ended, ds, de;
  times_of(e, &ended, &ds, &de);
  RANK_CHECK(self, ds > 0 && de == -1, "the stuck all_reduce should have started and not ended on the stream: %s", e);
  free(t);
  unlink(path);
  /* a device barrier waits for the stream: TIMEOUT, and the dump is written by itself */
  pstate_status_t s = pstate_barrier(world);
  RANK_CHECK(self, s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_PEER_LOST, "barrier: %s", pstate_status_string(s));
  t = pstate_test_slurp(path);
  RANK_CHECK(self, t != NULL && strstr(t, "\nreason a call failed: ") != NULL, "no dump after %s", pstate_status_string(s));
  free(t);
  pstate_abort(ps);
  return 0;
}

static void test_a_collective_stuck_on_the_stream_shows_in_the_dump(void **state) {
  (void)state;
  setenv("PSTATE_TRACE_CUDA_EVENTS", "1", 1);
  assert_int_equal(pstate_test_run_processes(2, 120, stuck_rank, NULL, NULL), 0);
  unsetenv("PSTATE_TRACE_CUDA_EVENTS");
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_ops_are_recorded_with_their_stream_times),
      cmocka_unit_test(test_device_collectives_are_recorded_once_under_pstate_check),
      cmocka_unit_test(test_a_collective_stuck_on_the_stream_shows_in_the_dump),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
