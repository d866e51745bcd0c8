/*
 * test_metrics.c — pstate_metrics_text counts what was done (issue 45, metrics): two ranks make a
 * known number of each collective, a send/recv pair and one MISMATCH, and the rendered counters
 * of the world group equal those numbers (the difference between the text before and after the
 * calls, so that whatever pstate_init itself ran does not count), with the bytes, the path and
 * the status; the histogram's +Inf bucket and _count equal the calls and its buckets never
 * decrease; the returned-array convention holds (a size query with NULL, a too-small buffer);
 * the text passes `promtool check metrics` where promtool is installed (Debian: prometheus);
 * without it that part says so and is skipped, the counts are still checked.
 *
 * Two jobs: shared memory (the MISMATCH found in the protocol fails the context, so it comes
 * last) and UCX (PSTATE_SHM=0: the exchange finds it before any data moves, the context stays
 * usable, and one more all_reduce follows it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"

enum { N_ALL_REDUCE = 5, N_ALL_GATHER = 3, N_BROADCAST = 2, N_BARRIER = 4, N_COUNT = 8 };

typedef struct job_t {
  const char *shm;  /* PSTATE_SHM value, or NULL for unset */
  const char *path; /* the path label the world group's calls take */
} job_t;

/* The whole metrics text (caller frees), through the size query first. */
static char *render(const pstate_test_rank_t *self, pstate_t *ps) {
  size_t need = 0; /* the size query: INVALID_ARGUMENT (capacity 0 is too small) with *count set */
  if (pstate_metrics_text(ps, NULL, 0, &need) != PSTATE_ERR_INVALID_ARGUMENT || need == 0) {
    fprintf(stderr, "rank %d: size query failed: %s\n", self->rank, pstate_last_error());
    return NULL;
  }
  need += 4096; /* room for what a call between the two may add */
  char *text = malloc(need);
  size_t got = 0;
  if (text == NULL || pstate_metrics_text(ps, text, need, &got) != PSTATE_OK || got == 0 || text[got - 1] != '\0' ||
      strlen(text) + 1 != got) {
    fprintf(stderr, "rank %d: render failed: %s\n", self->rank, pstate_last_error());
    free(text);
    return NULL;
  }
  return text;
}

/* The value of the sample whose name and labels are exactly `series`, or 0 when absent. */
static double sample(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
  return 0;
}

static double calls(const char *text, const char *op, const char *path, const char *status) {
  char series[256];
  snprintf(series, sizeof series, "pstate_calls_total{group=\"world:0\",op=\"%s\",path=\"%s\",status=\"%s\"}", op, path,
           status);
  return sample(text, series);
}

static double labelled(const char *text, const char *metric, const char *op, const char *path, const char *extra) {
  char series[256];
  snprintf(series, sizeof series, "%s{group=\"world:0\",op=\"%s\",path=\"%s\"%s}", metric, op, path, extra);
  return sample(text, series);
}

/* after - before of one calls_total series must be want. */
static int check_calls(const pstate_test_rank_t *self, const char *before, const char *after, const char *op,
                       const char *path, const char *status, double want) {
  const double got = calls(after, op, path, status) - calls(before, op, path, status);
  RANK_CHECK(self, got == want, "%s %s %s: %g calls counted, %g made\n", op, path, status, got, want);
  return 0;
}

/* The histogram of (op, path): buckets never decrease, +Inf == _count == every status's calls. */
static int check_histogram(const pstate_test_rank_t *self, const char *text, const char *op, const char *path) {
  char prefix[256];
  snprintf(prefix, sizeof prefix, "pstate_call_duration_seconds_bucket{group=\"world:0\",op=\"%s\",path=\"%s\",le=", op,
           path);
  double last = -1, le_last = -1;
  int buckets = 0;
  for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, prefix, strlen(prefix)) != 0) continue;
    const char *q = p + strlen(prefix) + 1; /* past the quote */
    const double le = strncmp(q, "+Inf", 4) == 0 ? 1e300 : strtod(q, NULL);
    const double v = strtod(strchr(q, ' ') + 1, NULL);
    RANK_CHECK(self, le > le_last && v >= last, "%s %s: bucket le %g holds %g after le %g held %g\n", op, path, le, v,
               le_last, last);
    le_last = le, last = v, ++buckets;
  }
  const double count = labelled(text, "pstate_call_duration_seconds_count", op, path, "");
  double all = 0;
  static const char *const statuses[] = {"ok", "invalid_argument", "mismatch", "timeout", "aborted", "peer_lost"};
  for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; ++i) all += calls(text, op, path, statuses[i]);
  RANK_CHECK(self, buckets > 2 && last == count && count == all, "%s %s: %d buckets, +Inf %g, _count %g, calls %g\n",
             op, path, buckets, last, count, all);
  RANK_CHECK(self, labelled(text, "pstate_call_duration_seconds_sum", op, path, "") > 0, "%s %s: no time summed\n", op,
             path);
  return 0;
}

/* promtool check metrics on the text; 77 when there is no promtool. */
static int promtool_check(const pstate_test_rank_t *self, const char *text) {
  if (system("command -v promtool >/dev/null 2>&1") != 0) return 77;
  char file[64];
  snprintf(file, sizeof file, "/tmp/pstate-test-metrics.%d.%d.prom", (int)getpid(), self->rank);
  FILE *f = fopen(file, "w");
  RANK_CHECK(self, f != NULL, "cannot write %s\n", file);
  fputs(text, f);
  fclose(f);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s", file);
  const int rc = system(cmd);
  if (rc == 0) unlink(file);
  RANK_CHECK(self, rc == 0, "promtool check metrics failed on %s (kept)\n", file);
  return 0;
}

static int rank_main(const pstate_test_rank_t *self) {
  const job_t *job = self->arg;
  pstate_t *ps = NULL;
  RANK_CHECK(self, pstate_test_init(self, 30000, &ps) == PSTATE_OK, "init: %s\n", pstate_last_error());
  pstate_group_t *w = NULL;
  RANK_CHECK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w) == PSTATE_OK, "%s\n", pstate_last_error());

  /* The convention: a too-small buffer is INVALID_ARGUMENT with *count the size needed. */
  char tiny[8] = "x";
  size_t need = 0;
  RANK_CHECK(
      self,
      pstate_metrics_text(ps, tiny, sizeof tiny, &need) == PSTATE_ERR_INVALID_ARGUMENT && need > 8 && tiny[0] == 'x',
      "a too-small buffer: need %zu\n", need);
  RANK_CHECK(self, pstate_metrics_text(ps, NULL, 0, NULL) == PSTATE_ERR_INVALID_ARGUMENT, "count NULL accepted\n");

  char *before = render(self, ps);
  RANK_CHECK(self, before != NULL, "no text\n");
  float in[N_COUNT], out[N_COUNT * 2];
  for (int i = 0; i < N_COUNT; ++i) in[i] = (float)(self->rank + i);
  for (int i = 0; i < N_ALL_REDUCE; ++i)
    RANK_CHECK(self, pstate_all_reduce(w, in, out, N_COUNT, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_OK, "%s\n",
               pstate_last_error());
  for (int i = 0; i < N_ALL_GATHER; ++i)
    RANK_CHECK(self, pstate_all_gather(w, in, out, N_COUNT, PSTATE_FLOAT32, NULL) == PSTATE_OK, "%s\n",
               pstate_last_error());
  for (int i = 0; i < N_BROADCAST; ++i)
    RANK_CHECK(self, pstate_broadcast(w, out, N_COUNT, PSTATE_FLOAT32, 0, NULL) == PSTATE_OK, "%s\n",
               pstate_last_error());
  for (int i = 0; i < N_BARRIER; ++i) RANK_CHECK(self, pstate_barrier(w) == PSTATE_OK, "%s\n", pstate_last_error());
  if (self->rank == 0)
    RANK_CHECK(self, pstate_send(w, in, N_COUNT, PSTATE_FLOAT32, 1, NULL) == PSTATE_OK, "%s\n", pstate_last_error());
  else
    RANK_CHECK(self, pstate_recv(w, out, N_COUNT, PSTATE_FLOAT32, 0, NULL) == PSTATE_OK, "%s\n", pstate_last_error());
  /* One MISMATCH: rank 1 reduces one element more. */
  const pstate_status_t s =
      pstate_all_reduce(w, in, out, (size_t)(N_COUNT - 1 + self->rank), PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "the mismatched all_reduce returned %s\n", pstate_status_string(s));
  const int usable = strcmp(job->path, "ucx") == 0; /* the exchange found it: the context goes on */
  if (usable)
    RANK_CHECK(self, pstate_all_reduce(w, in, out, N_COUNT, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_OK, "%s\n",
               pstate_last_error());
  char *after = render(self, ps);
  RANK_CHECK(self, after != NULL, "no text\n");

  const char *path = job->path;
  const double n_all_reduce = N_ALL_REDUCE + usable;
  if (check_calls(self, before, after, "all_reduce", path, "ok", n_all_reduce) ||
      check_calls(self, before, after, "all_reduce", path, "mismatch", 1) ||
      check_calls(self, before, after, "all_gather", path, "ok", N_ALL_GATHER) ||
      check_calls(self, before, after, "broadcast", path, "ok", N_BROADCAST) ||
      check_calls(self, before, after, "barrier", path, "ok", N_BARRIER) ||
      check_calls(self, before, after, self->rank == 0 ? "send" : "recv", path, "ok", 1))
    return 1;
  /* bytes: the all_reduce's count x 4 B (the mismatched call counts its own count), the
   * all_gather's block, the broadcast's buffer, the send's message */
  const double ar_bytes = labelled(after, "pstate_call_bytes_total", "all_reduce", path, "") -
                          labelled(before, "pstate_call_bytes_total", "all_reduce", path, "");
  const double ar_want = (n_all_reduce * N_COUNT + (N_COUNT - 1 + self->rank)) * 4;
  RANK_CHECK(self, ar_bytes == ar_want, "all_reduce bytes %g, want %g\n", ar_bytes, ar_want);
  const double ag_bytes = labelled(after, "pstate_call_bytes_total", "all_gather", path, "") -
                          labelled(before, "pstate_call_bytes_total", "all_gather", path, "");
  RANK_CHECK(self, ag_bytes == N_ALL_GATHER * N_COUNT * 4, "all_gather bytes %g\n", ag_bytes);
  if (check_histogram(self, after, "all_reduce", path) || check_histogram(self, after, "barrier", path)) return 1;
  /* the context's own */
  RANK_CHECK(self, sample(after, "pstate_lifecycle_steps_total{step=\"init\",status=\"ok\"}") == 1,
             "init not counted\n");
  RANK_CHECK(self,
             sample(after, "pstate_world_size") == 2 && sample(after, "pstate_rank") == self->rank &&
                 sample(after, "pstate_world_generation") == 0 && sample(after, "pstate_rendezvous_seconds") > 0,
             "context facts wrong:\n%s\n", after);
  RANK_CHECK(self, sample(after, "pstate_context_failures_total") == (usable ? 0 : 1),
             "context failures %g (shared memory's mismatch fails the context, UCX's not)\n",
             sample(after, "pstate_context_failures_total"));
  const int prom = promtool_check(self, after);
  if (prom == 77 && self->rank == 0)
    fprintf(stderr,
            "test_metrics: SKIPPED the promtool check: promtool is not installed "
            "(apt-get install prometheus, as build.sh's PACKAGES do)\n");
  else if (prom != 0)
    return 1;
  free(before);
  free(after);
  if (usable)
    RANK_CHECK(self, pstate_finalize(ps) == PSTATE_OK, "finalize: %s\n", pstate_last_error());
  else
    pstate_abort(ps);
  return 0;
}

static void run_job(const job_t *job) {
  if (job->shm)
    setenv("PSTATE_SHM", job->shm, 1);
  else
    unsetenv("PSTATE_SHM");
  assert_int_equal(pstate_test_run_processes(2, 120, rank_main, (void *)job, NULL), 0);
  unsetenv("PSTATE_SHM");
}

static void test_metrics_count_calls_over_shared_memory(void **state) {
  (void)state;
  const job_t job = {NULL, "shm"};
  run_job(&job);
}

static void test_metrics_count_calls_over_ucx(void **state) {
  (void)state;
  const job_t job = {"0", "ucx"};
  run_job(&job);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_metrics_count_calls_over_shared_memory),
      cmocka_unit_test(test_metrics_count_calls_over_ucx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
