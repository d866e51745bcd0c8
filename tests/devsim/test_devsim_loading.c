/*
 * test_devsim_loading.c — how a CUDA context finds the runtime and NCCL, what memory it accepts,
 * and the CPU context's view of device memory, on the devsim stand-ins.
 *
 * - PSTATE_CUDA_RUNTIME_LIBRARY naming a missing file or a file that is not a runtime, a runtime
 *   with no device, a device_ordinal past the device count, PSTATE_NCCL_LIBRARY naming a missing
 *   file or a non-NCCL file: UNSUPPORTED / INVALID_ARGUMENT saying which variable and what to do,
 *   before any peer is contacted;
 * - in a CUDA context: pageable and pinned host memory and another device's memory are
 *   INVALID_ARGUMENT naming the buffer; managed memory works;
 * - a CPU context in a process that loaded CUDA refuses device memory (through the driver entry
 *   cuPointerGetAttribute) and accepts pinned and managed memory;
 * - a failing ncclCommFinalize at pstate_finalize aborts the communicator instead (and finalize
 *   still frees everything);
 * - PSTATE_SOCKET_IFNAME becomes NCCL_SOCKET_IFNAME unless the user set that.
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

#include "devsim_test_util.h"
#include "expect_error.h"
#include "ranks.h"

static pstate_status_t init_one(pstate_device_t device, int world, int rank, int ordinal, pstate_t **out) {
  char method[64];
  snprintf(method, sizeof method, "tcp://127.0.0.1:%d", pstate_test_free_port());
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.world_size = world;
  p.rank = rank;
  p.local_rank = 0;
  p.init_method = method;
  p.device = device;
  p.device_ordinal = ordinal;
  p.timeout_ms = 20000;
  return pstate_init(&p, out);
}

/* Sets var to value for one call, then restores it. */
#define WITH_ENV(var, value, stmt)                                 \
  do {                                                             \
    char *old_ = getenv(var);                                      \
    char saved_[1024] = {0};                                       \
    if (old_ != NULL) snprintf(saved_, sizeof saved_, "%s", old_); \
    setenv(var, value, 1);                                         \
    stmt;                                                          \
    if (old_ != NULL)                                              \
      setenv(var, saved_, 1);                                      \
    else                                                           \
      unsetenv(var);                                               \
  } while (0)

static void test_runtime_variable_naming_a_missing_file_is_unsupported(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  WITH_ENV("PSTATE_CUDA_RUNTIME_LIBRARY", "/nonexistent/libcudart.so",
           PSTATE_EXPECT_ERROR(init_one(PSTATE_DEVICE_CUDA, 1, 0, -1, &ps), PSTATE_ERR_UNSUPPORTED,
                               "PSTATE_CUDA_RUNTIME_LIBRARY=/nonexistent/libcudart.so"));
  assert_null(ps);
  assert_non_null(strstr(pstate_last_error(), "fix or unset PSTATE_CUDA_RUNTIME_LIBRARY"));
}

static void test_runtime_variable_naming_a_non_runtime_is_unsupported(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  /* a library, but not a CUDA runtime (not the NCCL stand-in: it links the runtime stand-in, and
   * dlsym on a handle also searches what the library depends on) */
  WITH_ENV("PSTATE_CUDA_RUNTIME_LIBRARY", "libm.so.6",
           PSTATE_EXPECT_ERROR(init_one(PSTATE_DEVICE_CUDA, 1, 0, -1, &ps), PSTATE_ERR_UNSUPPORTED, "lacks cuda"));
}

static void test_runtime_without_devices_is_no_cuda_device(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  WITH_ENV("DEVSIM_DEVICE_COUNT", "0",
           PSTATE_EXPECT_ERROR(init_one(PSTATE_DEVICE_CUDA, 1, 0, -1, &ps), PSTATE_ERR_UNSUPPORTED,
                               "no CUDA device: cudaGetDeviceCount: no CUDA-capable device"));
}

static void test_device_ordinal_past_the_count_is_invalid_argument(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  PSTATE_EXPECT_ERROR(init_one(PSTATE_DEVICE_CUDA, 1, 0, 8, &ps), PSTATE_ERR_INVALID_ARGUMENT, "device_ordinal 8");
}

static void test_nccl_variable_naming_a_missing_file_fails_before_the_store(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  /* rank 1 of 2 with nobody serving the store: the NCCL check must come first */
  WITH_ENV("PSTATE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2",
           PSTATE_EXPECT_ERROR(init_one(PSTATE_DEVICE_CUDA, 2, 1, 0, &ps), PSTATE_ERR_UNSUPPORTED,
                               "PSTATE_NCCL_LIBRARY=/nonexistent/libnccl.so.2"));
}

static void test_nccl_variable_naming_a_non_nccl_is_unsupported(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  WITH_ENV("PSTATE_NCCL_LIBRARY", "libm.so.6",
           PSTATE_EXPECT_ERROR(init_one(PSTATE_DEVICE_CUDA, 2, 1, 0, &ps), PSTATE_ERR_UNSUPPORTED, "lacks nccl"));
}

/* Memory kinds in a CUDA context of one rank (device 0). */
static void test_cuda_context_refuses_host_and_other_device_memory_accepts_managed(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  PSTATE_EXPECT_OK(init_one(PSTATE_DEVICE_CUDA, 1, 0, 0, &ps));
  pstate_group_t *world = NULL;
  PSTATE_EXPECT_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float pageable[16] = {0};
  void *dev = devsim_device_copy(NULL, sizeof pageable), *pinned = NULL, *managed = NULL, *other = NULL;
  assert_int_equal(cudaMallocHost(&pinned, sizeof pageable), cudaSuccess);
  assert_int_equal(cudaMallocManaged(&managed, sizeof pageable, cudaMemAttachGlobal), cudaSuccess);
  assert_int_equal(cudaSetDevice(1), cudaSuccess);
  assert_int_equal(cudaMalloc(&other, sizeof pageable), cudaSuccess);
  assert_int_equal(cudaSetDevice(0), cudaSuccess);
  PSTATE_EXPECT_ERROR(pstate_all_reduce(world, pageable, dev, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL),
                      PSTATE_ERR_INVALID_ARGUMENT, "send");
  assert_non_null(strstr(pstate_last_error(), "pageable host memory"));
  PSTATE_EXPECT_ERROR(pstate_all_gather(world, dev, pinned, 16, PSTATE_FLOAT32, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "pinned host memory");
  PSTATE_EXPECT_ERROR(pstate_broadcast(world, other, 16, PSTATE_FLOAT32, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "is on CUDA device 1");
  for (int i = 0; i < 16; ++i) ((float *)managed)[i] = (float)i;
  PSTATE_EXPECT_OK(pstate_all_reduce(world, managed, dev, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  float back[16];
  assert_int_equal(devsim_to_host(back, dev, sizeof back, NULL), 0);
  for (int i = 0; i < 16; ++i) assert_true(back[i] == (float)i);
  PSTATE_EXPECT_OK(pstate_finalize(ps));
  cudaFree(dev);
  cudaFree(other);
  cudaFree(managed);
  cudaFreeHost(pinned);
}

/* A CPU context in this process (which loaded the runtime stand-in, and with it libcuda.so.1). */
static void test_cpu_context_refuses_device_memory_accepts_pinned_and_managed(void **state) {
  (void)state;
  pstate_t *ps = NULL;
  PSTATE_EXPECT_OK(init_one(PSTATE_DEVICE_CPU, 1, 0, -1, &ps));
  pstate_group_t *world = NULL;
  PSTATE_EXPECT_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *dev = NULL, *pinned = NULL, *managed = NULL;
  assert_int_equal(cudaMalloc(&dev, 64), cudaSuccess);
  assert_int_equal(cudaMallocHost(&pinned, 64), cudaSuccess);
  assert_int_equal(cudaMallocManaged(&managed, 64, cudaMemAttachGlobal), cudaSuccess);
  memset(pinned, 0, 64);
  memset(managed, 0, 64);
  PSTATE_EXPECT_ERROR(pstate_all_reduce(world, dev, pinned, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL),
                      PSTATE_ERR_INVALID_ARGUMENT, "is CUDA device memory");
  PSTATE_EXPECT_OK(pstate_all_reduce(world, pinned, managed, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  PSTATE_EXPECT_OK(pstate_finalize(ps));
  cudaFree(dev);
  cudaFree(managed);
  cudaFreeHost(pinned);
}

/* ncclCommFinalize fails on every rank at pstate_finalize: the communicators are aborted
 * instead, and finalize returns (the failure is a warning: the work was complete). */
static int finalize_fails_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 20000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *d = devsim_device_copy(NULL, 64);
  RANK_OK(self, pstate_all_reduce(world, d, d, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, cudaStreamSynchronize(NULL) == cudaSuccess, "sync");
  setenv("DEVSIM_NCCL_FAIL", "ncclCommFinalize:*:1:ncclSystemError", 1);
  double t0 = pstate_test_now_ms();
  pstate_status_t s = pstate_finalize(ps);
  RANK_CHECK(self, s == PSTATE_OK, "finalize: %s: %s", pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, pstate_test_now_ms() - t0 < 5000, "finalize took %.0f ms", pstate_test_now_ms() - t0);
  cudaFree(d);
  return 0;
}

static void test_failing_nccl_finalize_aborts_instead(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, finalize_fails_rank, NULL, NULL), 0);
}

/* No LOCAL_RANK and device_ordinal -1 (a plain launcher): the device is the local rank derived at
 * the rendezvous, opened after it; a device all_reduce then works on it. */
static int derived_ordinal_rank(const pstate_test_rank_t *self) {
  unsetenv("LOCAL_RANK");
  unsetenv("LOCAL_WORLD_SIZE");
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.timeout_ms = 20000;
  p.device = PSTATE_DEVICE_CUDA;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_init(&p, &ps));
  int dev = -1;
  RANK_CHECK(self, cudaGetDevice(&dev) == cudaSuccess && dev == self->rank, "device %d, want %d", dev, self->rank);
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float one = 1.0f, got = 0.0f;
  void *d = devsim_device_copy(&one, sizeof one);
  RANK_OK(self, pstate_all_reduce(world, d, d, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, devsim_to_host(&got, d, sizeof got, NULL) == 0 && got == 2.0f, "sum %g", got);
  RANK_OK(self, pstate_finalize(ps));
  cudaFree(d);
  return 0;
}

static void test_cuda_context_without_local_rank_uses_the_derived_local_rank(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, derived_ordinal_rank, NULL, NULL), 0);
}

/* One interface rule for every socket: PSTATE_SOCKET_IFNAME reaches NCCL as NCCL_SOCKET_IFNAME
 * (same syntax) when pstate loads it, unless the user set NCCL_SOCKET_IFNAME (rank 1 here). */
static int socket_ifname_rank(const pstate_test_rank_t *self) {
  setenv("PSTATE_SOCKET_IFNAME", "=lo", 1);
  if (self->rank == 1)
    setenv("NCCL_SOCKET_IFNAME", "^docker", 1);
  else
    unsetenv("NCCL_SOCKET_IFNAME");
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 20000, &ps));
  const char *nccl = getenv("NCCL_SOCKET_IFNAME");
  const char *want = self->rank == 1 ? "^docker" : "=lo";
  RANK_CHECK(self, nccl != NULL && strcmp(nccl, want) == 0, "NCCL_SOCKET_IFNAME=%s, want %s", nccl ? nccl : "(unset)",
             want);
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float one = 1.0f, got = 0.0f;
  void *d = devsim_device_copy(&one, sizeof one);
  RANK_OK(self, pstate_all_reduce(world, d, d, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, devsim_to_host(&got, d, sizeof got, NULL) == 0 && got == 2.0f, "sum %g", got);
  RANK_OK(self, pstate_finalize(ps));
  cudaFree(d);
  return 0;
}

static void test_nccl_socket_ifname_follows_pstate_socket_ifname_unless_set(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, socket_ifname_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_context_without_local_rank_uses_the_derived_local_rank),
      cmocka_unit_test(test_nccl_socket_ifname_follows_pstate_socket_ifname_unless_set),
      cmocka_unit_test(test_failing_nccl_finalize_aborts_instead),
      cmocka_unit_test(test_runtime_variable_naming_a_missing_file_is_unsupported),
      cmocka_unit_test(test_runtime_variable_naming_a_non_runtime_is_unsupported),
      cmocka_unit_test(test_runtime_without_devices_is_no_cuda_device),
      cmocka_unit_test(test_device_ordinal_past_the_count_is_invalid_argument),
      cmocka_unit_test(test_nccl_variable_naming_a_missing_file_fails_before_the_store),
      cmocka_unit_test(test_nccl_variable_naming_a_non_nccl_is_unsupported),
      cmocka_unit_test(test_cuda_context_refuses_host_and_other_device_memory_accepts_managed),
      cmocka_unit_test(test_cpu_context_refuses_device_memory_accepts_pinned_and_managed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
