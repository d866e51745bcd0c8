/*
 * test_devsim_p2p.c — non-blocking and batched point-to-point in CUDA contexts, on the stand-ins:
 * pstate_isend / pstate_irecv enqueue ncclSend / ncclRecv on the stream and return a request that
 * is already complete (its wait and test return at once, even after pstate_finalize: the stream
 * orders the rest, as torch's Work on NCCL); pstate_p2p_batch is one NCCL group, so a batch with
 * every peer, listed in reversed orders on alternate ranks, completes. Device buffers come from the
 * stand-in's cudaMalloc, work goes on a non-blocking stream and is read back on it. Expected
 * values are computed here from the sender's rank.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devsim_test_util.h"

#define COUNT 5000
#define MAX_RANKS 4

static float value(int from, int to, size_t i) { return (float)(from * 1000 + to * 100 + (int)(i % 89)); }

static int check(const pstate_test_rank_t *self, const float *h, int from, int to) {
  for (size_t i = 0; i < COUNT; ++i)
    RANK_CHECK(self, h[i] == value(from, to, i), "element %zu from rank %d: %g", i, from, (double)h[i]);
  return 0;
}

static int rank_main(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  const int n = self->world_size, r = self->rank;
  const size_t bytes = COUNT * sizeof(float);
  float *h = malloc(bytes);
  RANK_CHECK(self, h != NULL, "malloc");

  /* Point-to-point on a group of more than two ranks needs its NCCL communicator first. */
  if (n > 2) {
    pstate_request_t *early = NULL;
    float *d = devsim_device_copy(NULL, bytes);
    pstate_status_t s = pstate_isend(w, d, COUNT, PSTATE_FLOAT32, (r + 1) % n, stream, &early);
    RANK_CHECK(self, s == PSTATE_ERR_INVALID_STATE && early == NULL, "isend before the communicator: %s",
               pstate_status_string(s));
    cudaFree(d);
    void *one = devsim_device_copy(NULL, sizeof(float));
    RANK_OK(self, pstate_all_reduce(w, one, one, 1, PSTATE_FLOAT32, PSTATE_SUM, stream));
    cudaFree(one);
  }

  /* isend / irecv between group ranks 0 and 1, in the order NCCL needs without a group. */
  pstate_request_t *kept = NULL;
  if (r < 2) {
    const int peer = 1 - r;
    for (size_t i = 0; i < COUNT; ++i) h[i] = value(r, peer, i);
    void *dout = devsim_device_copy(h, bytes), *din = devsim_device_copy(NULL, bytes);
    pstate_request_t *s = NULL, *q = NULL;
    if (r == 0) {
      RANK_OK(self, pstate_isend(w, dout, COUNT, PSTATE_FLOAT32, peer, stream, &s));
      RANK_OK(self, pstate_irecv(w, din, COUNT, PSTATE_FLOAT32, peer, stream, &q));
    } else {
      RANK_OK(self, pstate_irecv(w, din, COUNT, PSTATE_FLOAT32, peer, stream, &q));
      RANK_OK(self, pstate_isend(w, dout, COUNT, PSTATE_FLOAT32, peer, stream, &s));
    }
    int done = 0;
    RANK_OK(self, pstate_test(s, &done));
    RANK_CHECK(self, done == 1, "a device request is complete once enqueued");
    RANK_OK(self, pstate_wait(q));
    memset(h, 0, bytes);
    RANK_CHECK(self, devsim_to_host(h, din, bytes, stream) == 0, "copy back");
    if (check(self, h, peer, r)) return 1;
    /* One more, left unwaited until after finalize: it completed when enqueued. */
    RANK_OK(self, r == 0 ? pstate_isend(w, dout, COUNT, PSTATE_FLOAT32, peer, stream, &kept)
                         : pstate_irecv(w, din, COUNT, PSTATE_FLOAT32, peer, stream, &kept));
    RANK_CHECK(self, cudaStreamSynchronize(stream) == cudaSuccess, "sync");
    cudaFree(dout);
    cudaFree(din);
  }

  /* A batch with every peer; odd ranks list receives first and peers descending. */
  {
    float *dout[MAX_RANKS] = {0}, *din[MAX_RANKS] = {0};
    pstate_p2p_op_t ops[2 * MAX_RANKS];
    size_t k = 0;
    for (int i = 0; i < n; ++i) {
      int p = r % 2 == 1 ? n - 1 - i : i;
      if (p == r) continue;
      for (size_t j = 0; j < COUNT; ++j) h[j] = value(r, p, j);
      dout[p] = devsim_device_copy(h, bytes);
      din[p] = devsim_device_copy(NULL, bytes);
      pstate_p2p_op_t send = PSTATE_P2P_OP_INIT, recv = PSTATE_P2P_OP_INIT;
      send.is_send = 1;
      send.buf = dout[p];
      send.count = COUNT;
      send.peer = p;
      recv.buf = din[p];
      recv.count = COUNT;
      recv.peer = p;
      ops[k++] = r % 2 == 1 ? recv : send;
      ops[k++] = r % 2 == 1 ? send : recv;
    }
    RANK_OK(self, pstate_p2p_batch(w, ops, k, stream));
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      RANK_CHECK(self, devsim_to_host(h, din[p], bytes, stream) == 0, "copy back");
      if (check(self, h, p, r)) return 1;
      cudaFree(dout[p]);
      cudaFree(din[p]);
    }
    pstate_p2p_op_t bad = PSTATE_P2P_OP_INIT;
    bad.buf = h; /* host memory in a CUDA context */
    bad.count = COUNT;
    bad.peer = (r + 1) % n;
    pstate_status_t s = pstate_p2p_batch(w, &bad, 1, stream);
    RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT, "a host buffer in a device batch: %s", pstate_status_string(s));
  }

  RANK_OK(self, pstate_finalize(ps));
  if (kept != NULL) RANK_OK(self, pstate_wait(kept));
  cudaStreamDestroy(stream);
  free(h);
  return 0;
}

static void test_device_p2p_2_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, rank_main, NULL, NULL), 0);
}

static void test_device_p2p_3_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, rank_main, NULL, NULL), 0);
}

static void test_device_p2p_4_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(4, 120, rank_main, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_p2p_2_processes),
      cmocka_unit_test(test_device_p2p_3_processes),
      cmocka_unit_test(test_device_p2p_4_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
