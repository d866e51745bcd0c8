/*
 * test_devsim_dicts_check.c — CUDA and mixed tensor dicts, and PSTATE_CHECK=1, in CUDA contexts
 * on the devsim stand-ins.
 *
 * - pstate_broadcast_tensor_dict and pstate_send/recv_tensor_dict of a dict mixing CUDA and CPU
 *   tensors (empty, scalar, small, large), received through cudaMalloc / malloc callbacks and
 *   compared byte by byte after the stream drained;
 * - NO_MEMORY agreement: a receiver whose cudaMalloc fails (DEVSIM_CUDA_MALLOC_FAIL) fails every
 *   rank with NO_MEMORY, nothing moves, and the context stays usable;
 * - PSTATE_CHECK=1: matched device collectives pass, a count or dtype mismatch is MISMATCH on
 *   every rank, naming both sides; device send/recv (issue 27): matched pairs move their data, a
 *   receive of another count or dtype is MISMATCH on the receiver naming both, NCCL never given
 *   the transfer (the receive buffer keeps its sentinel), and the sender hears it from the
 *   receiver's failure notice at its next call.
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
#include <unistd.h>

#include "devsim_test_util.h"
#include "ranks.h"

#define NT 6
static const char *kNames[NT] = {"cuda_big", "cpu_small", "cuda_empty", "cpu_scalar", "cpu_large", "cuda_scalar"};
static const pstate_dtype_t kTypes[NT] = {PSTATE_FLOAT32, PSTATE_INT32, PSTATE_BFLOAT16,
                                          PSTATE_FLOAT64, PSTATE_UINT8, PSTATE_INT64};
static const pstate_device_t kDevs[NT] = {PSTATE_DEVICE_CUDA, PSTATE_DEVICE_CPU, PSTATE_DEVICE_CUDA,
                                          PSTATE_DEVICE_CPU,  PSTATE_DEVICE_CPU, PSTATE_DEVICE_CUDA};
static const int kNdim[NT] = {2, 1, 2, 0, 1, 0};
static const int64_t kShapes[NT][2] = {{64, 33}, {4, 0}, {0, 5}, {0, 0}, {100000, 0}, {0, 0}};

static size_t elements(int t) {
  size_t n = 1;
  for (int d = 0; d < kNdim[t]; ++d) n *= (size_t)kShapes[t][d];
  return n;
}
static size_t bytes_of(int t) {
  return elements(t) * pstate_dtype_size(kTypes[t]);
}
static unsigned char byte_at(int t, size_t i, int seed) {
  return (unsigned char)(t * 31 + i * 7 + (size_t)seed * 13);
}

typedef struct {
  void *ptr[NT];
  size_t bytes[NT];
  int calls;
  int fail_cuda; /* 1: set DEVSIM_CUDA_MALLOC_FAIL so this rank's cudaMalloc fails */
} received_t;

static void *alloc_cb(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape, size_t bytes,
                      pstate_device_t device) {
  received_t *r = user;
  int t = -1;
  for (int i = 0; i < NT; ++i)
    if (strcmp(kNames[i], name) == 0) t = i;
  if (t < 0 || dtype != kTypes[t] || ndim != kNdim[t] || device != kDevs[t] || bytes != bytes_of(t)) return NULL;
  for (int d = 0; d < ndim; ++d)
    if (shape[d] != kShapes[t][d]) return NULL;
  r->calls++;
  r->bytes[t] = bytes;
  void *p = NULL;
  if (device == PSTATE_DEVICE_CUDA) {
    if (r->fail_cuda) setenv("DEVSIM_CUDA_MALLOC_FAIL", "1", 1); /* the next cudaMalloc fails */
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) p = NULL;
    unsetenv("DEVSIM_CUDA_MALLOC_FAIL");
  } else {
    p = malloc(bytes == 0 ? 1 : bytes);
  }
  r->ptr[t] = p;
  return p;
}

/* The dict of `seed`: device tensors in cudaMalloc'ed memory. */
static void make_dict(pstate_tensor_t *ts, void **mem, int seed) {
  for (int t = 0; t < NT; ++t) {
    size_t b = bytes_of(t);
    unsigned char *h = malloc(b + 1);
    for (size_t i = 0; i < b; ++i) h[i] = byte_at(t, i, seed);
    if (kDevs[t] == PSTATE_DEVICE_CUDA) {
      mem[t] = devsim_device_copy(h, b);
      free(h);
    } else {
      mem[t] = h;
    }
    pstate_tensor_t x = PSTATE_TENSOR_INIT;
    x.name = kNames[t];
    x.dtype = kTypes[t];
    x.ndim = kNdim[t];
    x.shape = kShapes[t];
    x.data = mem[t];
    x.device = kDevs[t];
    ts[t] = x;
  }
}

static void free_dict(void **mem) {
  for (int t = 0; t < NT; ++t) {
    if (kDevs[t] == PSTATE_DEVICE_CUDA)
      cudaFree(mem[t]);
    else
      free(mem[t]);
  }
}

static int expect_received(const pstate_test_rank_t *self, received_t *r, int seed, cudaStream_t stream) {
  RANK_CHECK(self, r->calls == NT, "%d alloc calls, expected %d", r->calls, NT);
  RANK_CHECK(self, cudaStreamSynchronize(stream) == cudaSuccess, "sync");
  for (int t = 0; t < NT; ++t) {
    size_t b = bytes_of(t);
    unsigned char *h = malloc(b + 1);
    if (kDevs[t] == PSTATE_DEVICE_CUDA)
      RANK_CHECK(self, devsim_to_host(h, r->ptr[t], b, stream) == 0, "copy back");
    else
      memcpy(h, r->ptr[t], b);
    for (size_t i = 0; i < b; ++i)
      RANK_CHECK(self, h[i] == byte_at(t, i, seed), "%s byte %zu: %u, expected %u", kNames[t], i, h[i],
                 byte_at(t, i, seed));
    free(h);
    if (kDevs[t] == PSTATE_DEVICE_CUDA)
      cudaFree(r->ptr[t]);
    else
      free(r->ptr[t]);
  }
  memset(r, 0, sizeof *r);
  return 0;
}

static int dict_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  pstate_tensor_t ts[NT];
  void *mem[NT];
  received_t got;
  memset(&got, 0, sizeof got);
  const int src = 1 % self->world_size;

  /* broadcast from src */
  if (self->rank == src) {
    make_dict(ts, mem, 1);
    RANK_OK(self, pstate_broadcast_tensor_dict(world, ts, NT, src, NULL, NULL, s));
    RANK_CHECK(self, cudaStreamSynchronize(s) == cudaSuccess, "sync");
    free_dict(mem);
  } else {
    RANK_OK(self, pstate_broadcast_tensor_dict(world, NULL, 0, src, alloc_cb, &got, s));
    if (expect_received(self, &got, 1, s)) return 1;
  }

  /* send/recv: rank 0 -> last rank */
  int last = self->world_size - 1;
  if (self->world_size > 1 && self->rank == 0) {
    make_dict(ts, mem, 2);
    RANK_OK(self, pstate_send_tensor_dict(world, ts, NT, last, s));
    RANK_CHECK(self, cudaStreamSynchronize(s) == cudaSuccess, "sync");
    free_dict(mem);
  } else if (self->world_size > 1 && self->rank == last) {
    RANK_OK(self, pstate_recv_tensor_dict(world, 0, alloc_cb, &got, s));
    if (expect_received(self, &got, 2, s)) return 1;
  }

  /* NO_MEMORY agreement: one receiver's cudaMalloc fails; every rank says NO_MEMORY */
  if (self->world_size > 1) {
    if (self->rank == src) {
      make_dict(ts, mem, 3);
      pstate_status_t st = pstate_broadcast_tensor_dict(world, ts, NT, src, NULL, NULL, s);
      RANK_CHECK(self, st == PSTATE_ERR_NO_MEMORY, "src: %s (%s)", pstate_status_string(st), pstate_last_error());
      free_dict(mem);
    } else {
      got.fail_cuda = self->rank == (src + 1) % self->world_size;
      pstate_status_t st = pstate_broadcast_tensor_dict(world, NULL, 0, src, alloc_cb, &got, s);
      RANK_CHECK(self, st == PSTATE_ERR_NO_MEMORY, "receiver: %s (%s)", pstate_status_string(st), pstate_last_error());
      cudaStreamSynchronize(s);
      for (int t = 0; t < NT; ++t) {
        if (got.ptr[t] == NULL) continue;
        if (kDevs[t] == PSTATE_DEVICE_CUDA)
          cudaFree(got.ptr[t]);
        else
          free(got.ptr[t]);
      }
      memset(&got, 0, sizeof got);
    }
    /* the context is still usable */
    float one = 1.0f, sum = 0;
    void *d = devsim_device_copy(&one, sizeof one);
    RANK_OK(self, pstate_all_reduce(world, d, d, 1, PSTATE_FLOAT32, PSTATE_SUM, s));
    RANK_CHECK(self, devsim_to_host(&sum, d, sizeof sum, s) == 0 && sum == (float)self->world_size, "sum %g", sum);
    cudaFree(d);
  }
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(s);
  return 0;
}

static int check_rank(const pstate_test_rank_t *self) {
  setenv("PSTATE_CHECK", "1", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *d = devsim_device_copy(NULL, 64 * sizeof(float));
  cudaMemset(d, 0, 64 * sizeof(float));
  RANK_OK(self, pstate_all_reduce(world, d, d, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_OK(self, pstate_all_gather(world, d, (char *)d + 16 * sizeof(float), 4, PSTATE_FLOAT32, NULL));
  size_t count = self->rank == 0 ? 12 : 16;
  pstate_status_t s = pstate_all_reduce(world, d, d, count, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "count mismatch: %s (%s)", pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, strstr(pstate_last_error(), "12") && strstr(pstate_last_error(), "16"), "names both: %s",
             pstate_last_error());
  pstate_dtype_t t = self->rank == 0 ? PSTATE_FLOAT32 : PSTATE_INT32;
  s = pstate_broadcast(world, d, 8, t, 0, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "dtype mismatch: %s (%s)", pstate_status_string(s), pstate_last_error());
  cudaFree(d);
  pstate_abort(ps);
  return 0;
}

/* arg: 0 = the receiver asks for another count, 1 = another dtype. */
static int check_p2p_rank(const pstate_test_rank_t *self) {
  setenv("PSTATE_CHECK", "1", 1);
  const int dtype_case = *(const int *)self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 20000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float h[16];
  for (int i = 0; i < 16; ++i) h[i] = (float)(100 * self->rank + i);
  void *d = devsim_device_copy(h, sizeof h);
  RANK_OK(self, pstate_barrier(world));
  if (self->rank == 0) { /* a matched pair first: moves its data */
    RANK_OK(self, pstate_send(world, d, 16, PSTATE_FLOAT32, 1, NULL));
  } else {
    RANK_OK(self, pstate_recv(world, d, 16, PSTATE_FLOAT32, 0, NULL));
    float got[16];
    RANK_CHECK(self, devsim_to_host(got, d, sizeof got, NULL) == 0 && got[5] == 5.0f, "received %g", got[5]);
  }
  void *sentinel = devsim_device_copy(NULL, sizeof h); /* 0xEE bytes */
  if (self->rank == 0) {
    RANK_OK(self, pstate_send(world, d, 16, PSTATE_FLOAT32, 1, NULL));
    /* the receiver refused it: its failure notice reaches this rank at its next call */
    pstate_status_t s = pstate_barrier(world);
    RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && strstr(pstate_last_error(), "failure notice: rank 1"),
               "the sender's next call: %s (%s)", pstate_status_string(s), pstate_last_error());
  } else {
    pstate_status_t s = pstate_recv(world, sentinel, dtype_case ? 16 : 12, dtype_case ? PSTATE_INT32 : PSTATE_FLOAT32,
                                    0, NULL);
    RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "%s (%s)", pstate_status_string(s), pstate_last_error());
    if (dtype_case)
      RANK_CHECK(self, strstr(pstate_last_error(), "float32") && strstr(pstate_last_error(), "int32"), "names both: %s",
                 pstate_last_error());
    else
      RANK_CHECK(self, strstr(pstate_last_error(), "16") && strstr(pstate_last_error(), "12"), "names both: %s",
                 pstate_last_error());
    unsigned char got[sizeof h];
    RANK_CHECK(self, devsim_to_host(got, sentinel, sizeof got, NULL) == 0 && got[0] == 0xEE && got[47] == 0xEE,
               "NCCL wrote the receive buffer: %02x", got[0]);
    /* hold until the sender has its answer (an exit would make it PEER_LOST) */
    usleep(500 * 1000);
  }
  cudaFree(sentinel);
  cudaFree(d);
  pstate_abort(ps);
  return 0;
}

static void test_check_p2p_mismatch_in_cuda_context(void **state) {
  (void)state;
  for (int dtype_case = 0; dtype_case < 2; ++dtype_case)
    assert_int_equal(pstate_test_run_processes(2, 120, check_p2p_rank, &dtype_case, NULL), 0);
}

/* On a GPU below compute capability 9.0 fp8 reductions are UNSUPPORTED (naming the need) and fp8
 * moves work. */
static int fp8_sm80_rank(const pstate_test_rank_t *self) {
  setenv("DEVSIM_COMPUTE_CAPABILITY", "8.0", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  unsigned char h[32];
  for (size_t i = 0; i < sizeof h; ++i) h[i] = (unsigned char)(self->rank * 32 + (int)i);
  void *d = devsim_device_copy(h, sizeof h);
  void *all = devsim_device_copy(NULL, sizeof h * (size_t)self->world_size);
  pstate_status_t s = pstate_all_reduce(world, d, d, sizeof h, PSTATE_FP8_E4M3, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_UNSUPPORTED && strstr(pstate_last_error(), "compute capability"), "%s: %s",
             pstate_status_string(s), pstate_last_error());
  s = pstate_reduce_scatter(world, all, d, sizeof h, PSTATE_FP8_E5M2, PSTATE_MAX, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_UNSUPPORTED, "%s", pstate_status_string(s));
  RANK_OK(self, pstate_all_gather(world, d, all, sizeof h, PSTATE_FP8_E5M2, NULL));
  unsigned char got[32 * 4];
  RANK_CHECK(self, devsim_to_host(got, all, sizeof h * (size_t)self->world_size, NULL) == 0, "copy back");
  for (size_t i = 0; i < sizeof h * (size_t)self->world_size; ++i)
    RANK_CHECK(self, got[i] == (unsigned char)i, "byte %zu: %u", i, got[i]);
  cudaFree(d);
  cudaFree(all);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_fp8_reductions_unsupported_below_sm90_moves_work(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, fp8_sm80_rank, NULL, NULL), 0);
}

static void test_tensor_dicts_cuda_and_cpu_3_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, dict_rank, NULL, NULL), 0);
}
static void test_tensor_dicts_cuda_and_cpu_1_process(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(1, 60, dict_rank, NULL, NULL), 0);
}
static void test_tensor_dicts_cuda_and_cpu_2_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 120, dict_rank, NULL), 0);
}
static void test_check_mismatch_in_cuda_context_2_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, check_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tensor_dicts_cuda_and_cpu_3_processes),
      cmocka_unit_test(test_tensor_dicts_cuda_and_cpu_1_process),
      cmocka_unit_test(test_check_mismatch_in_cuda_context_2_processes),
      cmocka_unit_test(test_check_p2p_mismatch_in_cuda_context),
      cmocka_unit_test(test_fp8_reductions_unsupported_below_sm90_moves_work),
      cmocka_unit_test(test_tensor_dicts_cuda_and_cpu_2_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
