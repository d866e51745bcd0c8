/*
 * test_cuda_context.c — asking for a CUDA context where none can be had, and graph capture on
 * CPU contexts, through the public API.
 *
 * CI machines have the CUDA toolkit (libcudart, NCCL) but no GPU: pstate_init with
 * device = PSTATE_DEVICE_CUDA must return PSTATE_ERR_UNSUPPORTED with a plain "no CUDA device"
 * message, set *out to NULL, leave nothing behind (the next init works), and fail before it
 * contacts the rendezvous store (so no peer is left waiting on a half-done rendezvous). With
 * PSTATE_NCCL_LIBRARY naming a missing file, the message says so too. On a machine with a GPU
 * the no-device tests skip (tests/gpu/ covers CUDA contexts there); in a build without the CUDA
 * backend the message says that instead.
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

#include "expect_error.h"
#include "ranks.h"

static int contains(const char *hay, const char *needle) {
  return strstr(hay, needle) != NULL;
}

/* pstate_init for rank `rank` of `world` ranks whose store is at 127.0.0.1:port. */
static pstate_status_t init_at(pstate_device_t device, int world, int rank, int port, pstate_t **out) {
  char method[64];
  snprintf(method, sizeof method, "tcp://127.0.0.1:%d", port);
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.world_size = world;
  p.rank = rank;
  p.local_rank = 0;
  p.init_method = method;
  p.device = device;
  p.timeout_ms = 60000;
  return pstate_init(&p, out);
}

/* A world of one: rank 0 serves its own store. */
static pstate_status_t init_alone(pstate_device_t device, pstate_t **out) {
  return init_at(device, 1, 0, pstate_test_free_port(), out);
}

/* Skips the calling test unless this host fails CUDA contexts with "no CUDA device" (a GPU
 * host) or the backend is not built (then `*built` is 0 and the message says so). */
static void require_no_cuda_device(int *built) {
  pstate_t *ps = NULL;
  pstate_status_t s = init_alone(PSTATE_DEVICE_CUDA, &ps);
  if (s == PSTATE_OK) {
    pstate_finalize(ps);
    skip(); /* a usable GPU: tests/gpu/ covers this host */
  }
  *built = !contains(pstate_last_error(), "without the CUDA backend");
}

static void test_cuda_context_without_gpu_is_unsupported_no_cuda_device(void **state) {
  (void)state;
  int built = 1;
  require_no_cuda_device(&built);
  pstate_t *ps = (pstate_t *)&built; /* must be reset to NULL */
  PSTATE_EXPECT_ERROR(init_alone(PSTATE_DEVICE_CUDA, &ps), PSTATE_ERR_UNSUPPORTED,
                      built ? "no CUDA device" : "without the CUDA backend");
  assert_null(ps);
  assert_true(contains(pstate_last_error(), "PSTATE_DEVICE_CPU")); /* says what to do */
  if (built) assert_true(contains(pstate_last_error(), "cudaGetDeviceCount"));
}

/* Rank 1 of 2 with nobody serving the store: the device check must come first, so the call
 * fails at once with UNSUPPORTED, never TIMEOUT or TRANSPORT from the store. */
static void test_cuda_context_fails_before_contacting_the_store(void **state) {
  (void)state;
  int built = 1;
  require_no_cuda_device(&built);
  pstate_t *ps = NULL;
  PSTATE_EXPECT_ERROR(init_at(PSTATE_DEVICE_CUDA, 2, 1, pstate_test_free_port(), &ps), PSTATE_ERR_UNSUPPORTED,
                      built ? "no CUDA device" : "without the CUDA backend");
  assert_null(ps);
}

static void unset_nccl_variable(void) {
  unsetenv("PSTATE_NCCL_LIBRARY");
}

/* With more than one rank NCCL is needed: a PSTATE_NCCL_LIBRARY naming no file is reported with
 * the path and the variable, whether or not a GPU is present. */
static void test_nccl_library_missing_is_named_with_its_variable(void **state) {
  (void)state;
  int built = 1;
  pstate_t *ps = NULL;
  pstate_status_t s = init_alone(PSTATE_DEVICE_CUDA, &ps);
  if (s == PSTATE_OK)
    pstate_finalize(ps);
  else
    built = !contains(pstate_last_error(), "without the CUDA backend");
  if (!built) skip();
  setenv("PSTATE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  ps = NULL;
  s = init_at(PSTATE_DEVICE_CUDA, 2, 1, pstate_test_free_port(), &ps);
  char message[4096];
  snprintf(message, sizeof message, "%s", pstate_last_error());
  unset_nccl_variable();
  assert_int_equal(s, PSTATE_ERR_UNSUPPORTED);
  assert_null(ps);
  if (!contains(message, "NCCL library not found") || !contains(message, "/nonexistent/libnccl.so.2") ||
      !contains(message, "PSTATE_NCCL_LIBRARY"))
    fail_msg("message does not name the missing NCCL library: %s", message);
}

/* A world of one needs no NCCL: a broken PSTATE_NCCL_LIBRARY does not matter there. */
static void test_world_of_one_does_not_load_nccl(void **state) {
  (void)state;
  int built = 1;
  require_no_cuda_device(&built);
  if (!built) skip();
  setenv("PSTATE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  pstate_t *ps = NULL;
  pstate_status_t s = init_alone(PSTATE_DEVICE_CUDA, &ps);
  char message[4096];
  snprintf(message, sizeof message, "%s", pstate_last_error());
  unset_nccl_variable();
  assert_int_equal(s, PSTATE_ERR_UNSUPPORTED);
  if (contains(message, "NCCL")) fail_msg("a world of one mentions NCCL: %s", message);
}

/* Failed CUDA inits leave no state behind: after several, a CPU context of this process
 * initializes, runs a collective and finalizes normally. */
static void test_failed_cuda_inits_leave_the_process_usable(void **state) {
  (void)state;
  int built = 1;
  require_no_cuda_device(&built);
  for (int i = 0; i < 3; ++i) {
    pstate_t *ps = NULL;
    assert_int_equal(init_alone(PSTATE_DEVICE_CUDA, &ps), PSTATE_ERR_UNSUPPORTED);
    assert_null(ps);
  }
  pstate_t *ps = NULL;
  PSTATE_EXPECT_OK(init_alone(PSTATE_DEVICE_CPU, &ps));
  pstate_group_t *world = NULL;
  PSTATE_EXPECT_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float x = 2.0f;
  PSTATE_EXPECT_OK(pstate_all_reduce(world, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  assert_true(x == 2.0f);
  PSTATE_EXPECT_OK(pstate_finalize(ps));
}

static void test_bad_device_value_is_invalid_argument(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  PSTATE_EXPECT_ERROR(init_alone((pstate_device_t)7, &ps), PSTATE_ERR_INVALID_ARGUMENT, "device");
  assert_null(ps);
}

/* CPU contexts: capture begin and end are UNSUPPORTED with the reason, begin clears
 * *capture_stream, and the context stays usable (finalize is not refused: no capture mode). */
static void test_graph_capture_on_cpu_context_is_unsupported_with_the_reason(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  PSTATE_EXPECT_OK(init_alone(PSTATE_DEVICE_CPU, &ps));
  void *capture = &capture;
  PSTATE_EXPECT_ERROR(pstate_graph_capture_begin(ps, NULL, &capture), PSTATE_ERR_UNSUPPORTED, "CUDA context");
  assert_null(capture);
  PSTATE_EXPECT_ERROR(pstate_graph_capture_begin(ps, NULL, &capture), PSTATE_ERR_UNSUPPORTED, "PSTATE_DEVICE_CUDA");
  PSTATE_EXPECT_ERROR(pstate_graph_capture_end(ps), PSTATE_ERR_UNSUPPORTED, "CUDA context");
  PSTATE_EXPECT_ERROR(pstate_graph_capture_begin(ps, NULL, NULL), PSTATE_ERR_INVALID_ARGUMENT, "capture_stream");
  PSTATE_EXPECT_ERROR(pstate_graph_capture_begin(NULL, NULL, &capture), PSTATE_ERR_INVALID_ARGUMENT, "ps");
  PSTATE_EXPECT_ERROR(pstate_graph_capture_end(NULL), PSTATE_ERR_INVALID_ARGUMENT, "ps");
  pstate_group_t *world = NULL;
  PSTATE_EXPECT_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  PSTATE_EXPECT_OK(pstate_barrier(world));
  PSTATE_EXPECT_OK(pstate_finalize(ps));
}

/* The same over two processes: the refused calls send nothing, so the ranks stay in step. */
static int capture_refused_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  void *capture = NULL;
  RANK_CHECK(self, pstate_graph_capture_begin(ps, NULL, &capture) == PSTATE_ERR_UNSUPPORTED, "begin: %s",
             pstate_last_error());
  RANK_CHECK(self, pstate_graph_capture_end(ps) == PSTATE_ERR_UNSUPPORTED, "end: %s", pstate_last_error());
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  int32_t v = self->rank + 1;
  RANK_OK(self, pstate_all_reduce(world, &v, &v, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, v == 3, "all_reduce after refused capture: %d", v);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_graph_capture_refused_on_cpu_keeps_ranks_in_step(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, capture_refused_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_context_without_gpu_is_unsupported_no_cuda_device),
      cmocka_unit_test(test_cuda_context_fails_before_contacting_the_store),
      cmocka_unit_test(test_nccl_library_missing_is_named_with_its_variable),
      cmocka_unit_test(test_world_of_one_does_not_load_nccl),
      cmocka_unit_test(test_failed_cuda_inits_leave_the_process_usable),
      cmocka_unit_test(test_bad_device_value_is_invalid_argument),
      cmocka_unit_test(test_graph_capture_on_cpu_context_is_unsupported_with_the_reason),
      cmocka_unit_test(test_graph_capture_refused_on_cpu_keeps_ranks_in_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
