/*
 * test_devsim_one_device.c — several processes on ONE device, on the stand-ins (issue 28): what
 * tests/gpu/own_host_id.sh relies on to run world 2 and 4 on one GPU.
 *
 * - 2 and 3 processes of one host on device 0: the first device all_reduce fails on every rank
 *   with the NCCL stand-in's "Duplicate GPU detected" (NCCL's ncclInvalidUsage) in pstate's
 *   message, and pstate_abort returns; nothing is computed;
 * - the same with NCCL_HOSTID set per rank (each rank an NCCL host of its own): device all_reduce
 *   and all_gather on world and tp are exact against references computed here.
 * Device 0 is the init parameter (device_ordinal 0): nothing in libpstate knows about it.
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

#define N 777

static pstate_status_t init_on_device_0(const pstate_test_rank_t *self, pstate_t **out) {
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.init_method = self->init_method;
  p.rank = self->rank;
  p.world_size = self->world_size;
  p.local_rank = self->rank;
  p.timeout_ms = 20000;
  p.device = PSTATE_DEVICE_CUDA;
  p.device_ordinal = 0;
  return pstate_init(&p, out);
}

static int same_host_rank(const pstate_test_rank_t *self) {
  unsetenv("NCCL_HOSTID");
  pstate_t *ps = NULL;
  RANK_OK(self, init_on_device_0(self, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float *d = devsim_device_copy(NULL, N * sizeof(float));
  pstate_status_t s = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s != PSTATE_OK && strstr(pstate_last_error(), "Duplicate GPU") != NULL,
             "two ranks of one host on cuda:0: %s: %s", pstate_status_string(s), pstate_last_error());
  fprintf(stderr, "rank %d: %s: %s\n", self->rank, pstate_status_string(s), pstate_last_error());
  RANK_OK(self, pstate_abort(ps));
  cudaFree(d);
  return 0;
}

/* all_reduce (sum, element i of rank r = devsim_input) and all_gather on g, both exact. */
static int exact_on(const pstate_test_rank_t *self, pstate_group_t *g, cudaStream_t stream) {
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(g, &info));
  const int n = info.world_size, r = info.rank_in_group;
  float *h = malloc(N * sizeof(float) * (size_t)n);
  RANK_CHECK(self, h != NULL, "malloc");
  for (size_t i = 0; i < N; ++i) h[i] = (float)devsim_input(PSTATE_SUM, r, i, PSTATE_FLOAT32);
  float *d = devsim_device_copy(h, N * sizeof(float)), *all = devsim_device_copy(NULL, N * sizeof(float) * (size_t)n);
  RANK_OK(self, pstate_all_gather(g, d, all, N, PSTATE_FLOAT32, stream));
  RANK_OK(self, pstate_all_reduce(g, d, d, N, PSTATE_FLOAT32, PSTATE_SUM, stream));
  RANK_CHECK(self, devsim_to_host(h, d, N * sizeof(float), stream) == 0, "copy back");
  for (size_t i = 0; i < N; ++i) {
    double want = devsim_reduced(PSTATE_SUM, n, i, PSTATE_FLOAT32);
    RANK_CHECK(self, h[i] == (float)want, "%s all_reduce [%zu] = %g, expected %g", info.name, i, (double)h[i], want);
  }
  RANK_CHECK(self, devsim_to_host(h, all, N * sizeof(float) * (size_t)n, stream) == 0, "copy back");
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < N; ++i) {
      double want = devsim_input(PSTATE_SUM, q, i, PSTATE_FLOAT32);
      RANK_CHECK(self, h[(size_t)q * N + i] == (float)want, "%s all_gather block %d [%zu] = %g, expected %g", info.name,
                 q, i, (double)h[(size_t)q * N + i], want);
    }
  cudaFree(d);
  cudaFree(all);
  free(h);
  return 0;
}

static int own_host_rank(const pstate_test_rank_t *self) {
  char id[64];
  snprintf(id, sizeof id, "test-devsim-one-device-%d", self->rank);
  setenv("NCCL_HOSTID", id, 1);
  pstate_t *ps = NULL;
  RANK_OK(self, init_on_device_0(self, &ps));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  pstate_group_t *world = NULL, *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  if (exact_on(self, world, stream)) return 1;
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->world_size == 4 ? 2 : self->world_size;
  cfg.pipeline_parallel_size = self->world_size == 4 ? 2 : 1;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  if (exact_on(self, tp, stream)) return 1;
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(stream);
  return 0;
}

static void test_ranks_of_one_host_on_one_device_are_refused_duplicate_gpu(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, same_host_rank, NULL, NULL), 0);
  assert_int_equal(pstate_test_run_processes(3, 60, same_host_rank, NULL, NULL), 0);
}

static void test_ranks_with_nccl_hostids_of_their_own_share_one_device(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, own_host_rank, NULL, NULL), 0);
  assert_int_equal(pstate_test_run_processes(4, 60, own_host_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ranks_of_one_host_on_one_device_are_refused_duplicate_gpu),
      cmocka_unit_test(test_ranks_with_nccl_hostids_of_their_own_share_one_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
