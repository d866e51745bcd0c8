/*
 * test_devsim_capture.c — graph capture in CUDA contexts on the devsim stand-ins.
 *
 * - 100 pstate_tp_allreduce captured into one CUDA graph (half on the capture stream, half with
 *   stream NULL, which capture mode resolves to it) are recorded, not run, and every replay of the
 *   graph with new inputs gives the exact sums; processes in global capture mode, threads in
 *   thread-local mode (a global capture would forbid the other ranks' cudaMalloc, as CUDA does);
 * - every documented capture misuse returns its documented status and leaves the context usable
 *   (pstate_barrier is not one: it runs on the CPU communicator);
 *   a stream forked into the capture by an event is accepted;
 * - NCCL communicators are made lazily, and by pstate_graph_capture_begin, never inside a capture
 *   (the stand-in's ncclCommInitRank calls cudaMalloc, which a capture refuses).
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
#include "ranks.h"

#define K 100
#define COUNT 64

#define RANK_STATUS(self, call, want, needle)                                                                  \
  do {                                                                                                         \
    pstate_status_t s_ = (call);                                                                               \
    RANK_CHECK(self, s_ == (want) && strstr(pstate_last_error(), (needle)) != NULL,                            \
               "%s -> %s (%s), expected %s with \"%s\"", #call, pstate_status_string(s_), pstate_last_error(), \
               pstate_status_string(want), needle);                                                            \
  } while (0)

static float value(int rank, int k, size_t i, int replay) {
  return (float)((rank + k + (int)i % 5 + replay * 3) % 11);
}

/* (threads are ranks too: no static buffers) */
static float h_buf[8][K * COUNT];

static int fill(float *d, int rank, int replay) {
  float *h = h_buf[rank];
  for (int k = 0; k < K; ++k)
    for (size_t i = 0; i < COUNT; ++i) h[k * COUNT + i] = value(rank, k, i, replay);
  return cudaMemcpy(d, h, sizeof h_buf[0], cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
}

static int expect_sums(const pstate_test_rank_t *self, const float *d, int world, int replay, cudaStream_t s) {
  float *h = h_buf[self->rank];
  RANK_CHECK(self, devsim_to_host(h, d, sizeof h_buf[0], s) == 0, "copy back");
  for (int k = 0; k < K; ++k)
    for (size_t i = 0; i < COUNT; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += value(r, k, i, replay);
      RANK_CHECK(self, h[k * COUNT + i] == want, "replay %d, all_reduce %d, element %zu: %g, expected %g", replay, k, i,
                 h[k * COUNT + i], want);
    }
  return 0;
}

static int capture_replay(const pstate_test_rank_t *self) {
  const int thread_local_mode = self->arg != NULL;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_parallel_config_t pc = PSTATE_PARALLEL_CONFIG_INIT;
  pc.tensor_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &pc));
  float *d = NULL;
  RANK_CHECK(self, cudaMalloc((void **)&d, sizeof(float) * K * COUNT) == cudaSuccess, "cudaMalloc");
  RANK_CHECK(self, fill(d, self->rank, 0) == 0, "fill");
  cudaStream_t s;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");

  void *capture = NULL;
  RANK_OK(self, pstate_graph_capture_begin(ps, NULL, &capture)); /* makes the TP communicator */
  cudaStream_t cs = (cudaStream_t)capture;
  RANK_CHECK(self, cs != NULL, "capture stream");
  RANK_CHECK(self,
             cudaStreamBeginCapture(
                 cs, thread_local_mode ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal) == cudaSuccess,
             "cudaStreamBeginCapture");
  for (int k = 0; k < K; ++k)
    RANK_OK(self, pstate_tp_allreduce(ps, d + k * COUNT, COUNT, PSTATE_FLOAT32, PSTATE_SUM, k % 2 ? NULL : capture));
  cudaGraph_t graph = NULL;
  RANK_CHECK(self, cudaStreamEndCapture(cs, &graph) == cudaSuccess, "cudaStreamEndCapture");
  RANK_OK(self, pstate_graph_capture_end(ps));
  /* recorded, not run: the buffer still holds this rank's replay-0 input */
  {
    float *h = h_buf[self->rank];
    RANK_CHECK(self, devsim_to_host(h, d, sizeof h_buf[0], s) == 0, "copy back");
    for (int k = 0; k < K; ++k)
      for (size_t i = 0; i < COUNT; ++i)
        RANK_CHECK(self, h[k * COUNT + i] == value(self->rank, k, i, 0), "capture ran the all_reduce %d", k);
  }
  cudaGraphExec_t exec = NULL;
  RANK_CHECK(self, cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "cudaGraphInstantiate");
  for (int replay = 0; replay < 3; ++replay) {
    RANK_CHECK(self, fill(d, self->rank, replay) == 0, "fill");
    RANK_CHECK(self, cudaGraphLaunch(exec, s) == cudaSuccess, "cudaGraphLaunch");
    if (expect_sums(self, d, self->world_size, replay, s)) return 1;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d);
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static int capture_misuse(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float *d = NULL;
  RANK_CHECK(self, cudaMalloc((void **)&d, sizeof(float) * COUNT) == cudaSuccess, "cudaMalloc");
  cudaStream_t other, forked;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess, "stream");
  RANK_CHECK(self, cudaStreamCreateWithFlags(&forked, cudaStreamNonBlocking) == cudaSuccess, "stream");

  RANK_STATUS(self, pstate_graph_capture_end(ps), PSTATE_ERR_INVALID_STATE, "not in graph-capture mode");
  void *capture = NULL;
  RANK_OK(self, pstate_graph_capture_begin(ps, NULL, &capture));
  cudaStream_t cs = (cudaStream_t)capture;
  void *again = NULL;
  RANK_STATUS(self, pstate_graph_capture_begin(ps, NULL, &again), PSTATE_ERR_INVALID_STATE,
              "already in graph-capture mode");
  RANK_STATUS(self, pstate_all_reduce(world, d, d, COUNT, PSTATE_FLOAT32, PSTATE_SUM, other), PSTATE_ERR_INVALID_STATE,
              "not the capture stream");
  RANK_OK(self, pstate_barrier(world)); /* the CPU communicator's: legal, records nothing */
  pstate_parallel_config_t pc = PSTATE_PARALLEL_CONFIG_INIT;
  RANK_STATUS(self, pstate_initialize_model_parallel(ps, &pc), PSTATE_ERR_INVALID_STATE, "graph-capture mode");
  RANK_STATUS(self, pstate_finalize(ps), PSTATE_ERR_INVALID_STATE, "graph-capture mode"); /* frees nothing */

  /* a CUDA capture still open on the capture stream: capture_end refuses and stays in the mode */
  RANK_CHECK(self, cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "BeginCapture");
  RANK_OK(self, pstate_all_reduce(world, d, d, COUNT, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  /* a stream forked from the capture stream by an event belongs to the same capture */
  cudaEvent_t fork_ev, join_ev;
  cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&join_ev, cudaEventDisableTiming);
  RANK_CHECK(self, cudaEventRecord(fork_ev, cs) == cudaSuccess, "record");
  RANK_CHECK(self, cudaStreamWaitEvent(forked, fork_ev, 0) == cudaSuccess, "fork");
  RANK_OK(self, pstate_all_reduce(world, d, d, COUNT, PSTATE_FLOAT32, PSTATE_MAX, forked));
  RANK_CHECK(self, cudaEventRecord(join_ev, forked) == cudaSuccess, "record");
  RANK_CHECK(self, cudaStreamWaitEvent(cs, join_ev, 0) == cudaSuccess, "join");
  RANK_STATUS(self, pstate_graph_capture_end(ps), PSTATE_ERR_INVALID_STATE, "still capturing");
  cudaGraph_t graph = NULL;
  RANK_CHECK(self, cudaStreamEndCapture(cs, &graph) == cudaSuccess, "cudaStreamEndCapture");
  RANK_OK(self, pstate_graph_capture_end(ps));

  /* the graph (sum, then max) replays right, and the context works as before */
  float h[COUNT];
  for (size_t i = 0; i < COUNT; ++i) h[i] = (float)(self->rank + (int)i);
  RANK_CHECK(self, cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess, "copy");
  cudaGraphExec_t exec = NULL;
  RANK_CHECK(self, cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
  RANK_CHECK(self, cudaGraphLaunch(exec, other) == cudaSuccess, "launch");
  RANK_OK(self, pstate_all_reduce(world, d, d, COUNT, PSTATE_FLOAT32, PSTATE_SUM, other));
  RANK_CHECK(self, devsim_to_host(h, d, sizeof h, other) == 0, "copy back");
  float n = (float)self->world_size;
  for (size_t i = 0; i < COUNT; ++i) {
    float sum = n * (float)i + n * (n - 1) / 2;
    RANK_CHECK(self, h[i] == n * sum, "element %zu: %g, expected %g", i, h[i], n * sum);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(fork_ev);
  cudaEventDestroy(join_ev);
  cudaFree(d);
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(other);
  cudaStreamDestroy(forked);
  return 0;
}

/* A group whose communicator does not exist yet cannot make it inside a CUDA capture that the
 * caller began outside capture mode (INVALID_STATE on every rank, naming the fix); outside a
 * capture it is made lazily by the first collective; pstate_graph_capture_begin makes the rest. */
static int lazy_communicators(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_parallel_config_t pc = PSTATE_PARALLEL_CONFIG_INIT;
  pc.pipeline_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &pc));
  pstate_group_t *pp = NULL, *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_PP, &pp));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float *d = NULL;
  RANK_CHECK(self, cudaMalloc((void **)&d, sizeof(float) * COUNT) == cudaSuccess, "cudaMalloc");
  cudaMemset(d, 0, sizeof(float) * COUNT);
  cudaStream_t s;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  RANK_CHECK(self, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "BeginCapture");
  RANK_STATUS(self, pstate_all_reduce(pp, d, d, COUNT, PSTATE_FLOAT32, PSTATE_SUM, s), PSTATE_ERR_INVALID_STATE,
              "pstate_graph_capture_begin");
  cudaGraph_t graph = NULL;
  cudaStreamEndCapture(s, &graph);
  if (graph != NULL) cudaGraphDestroy(graph);
  RANK_OK(self, pstate_all_reduce(pp, d, d, COUNT, PSTATE_FLOAT32, PSTATE_SUM, s)); /* lazily, now */
  void *capture = NULL;
  RANK_OK(self, pstate_graph_capture_begin(ps, s, &capture)); /* makes world's */
  RANK_CHECK(self, capture == (void *)s, "capture stream is the given stream");
  RANK_CHECK(self, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "BeginCapture");
  RANK_OK(self, pstate_all_reduce(world, d, d, COUNT, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, cudaStreamEndCapture(s, &graph) == cudaSuccess, "EndCapture");
  RANK_OK(self, pstate_graph_capture_end(ps));
  cudaGraphDestroy(graph);
  RANK_CHECK(self, cudaStreamSynchronize(s) == cudaSuccess, "sync");
  cudaFree(d);
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(s);
  return 0;
}

/* Point-to-point as a group's first device operation: a group of two makes its communicator from
 * it (both ranks take part); in a group of three or more it cannot (INVALID_STATE naming the fix,
 * on every rank that tried, and nothing hangs). */
static int p2p_first(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  float h[COUNT];
  for (size_t i = 0; i < COUNT; ++i) h[i] = (float)(i + 1);
  void *d = devsim_device_copy(self->rank == 0 ? h : NULL, sizeof h);
  if (self->world_size == 2) {
    if (self->rank == 0)
      RANK_OK(self, pstate_send(world, d, COUNT, PSTATE_FLOAT32, 1, NULL));
    else
      RANK_OK(self, pstate_recv(world, d, COUNT, PSTATE_FLOAT32, 0, NULL));
    RANK_CHECK(self, devsim_to_host(h, d, sizeof h, NULL) == 0, "copy back");
    for (size_t i = 0; i < COUNT; ++i) RANK_CHECK(self, h[i] == (float)(i + 1), "element %zu: %g", i, h[i]);
  } else if (self->rank < 2) {
    pstate_status_t s = self->rank == 0 ? pstate_send(world, d, COUNT, PSTATE_FLOAT32, 1, NULL)
                                        : pstate_recv(world, d, COUNT, PSTATE_FLOAT32, 0, NULL);
    RANK_CHECK(self, s == PSTATE_ERR_INVALID_STATE && strstr(pstate_last_error(), "run a collective"), "%s: %s",
               pstate_status_string(s), pstate_last_error());
  }
  cudaFree(d);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_p2p_first_makes_the_communicator_of_a_group_of_two(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, p2p_first, NULL, NULL), 0);
}
static void test_p2p_first_in_a_group_of_three_is_invalid_state(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 60, p2p_first, NULL, NULL), 0);
}

static void test_capture_100_tp_allreduce_replayed_2_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, capture_replay, NULL, NULL), 0);
}
static void test_capture_100_tp_allreduce_replayed_3_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, capture_replay, NULL, NULL), 0);
}
static void test_capture_misuse_statuses_2_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, capture_misuse, NULL, NULL), 0);
}
static void test_communicators_lazy_and_never_inside_capture_3_processes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, lazy_communicators, NULL, NULL), 0);
}
static void test_capture_100_tp_allreduce_replayed_4_threads_thread_local(void **state) {
  (void)state;
  static int thread_local_mode = 1;
  assert_int_equal(pstate_test_run_threads(4, 120, capture_replay, &thread_local_mode), 0);
}
static void test_capture_misuse_statuses_2_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 120, capture_misuse, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_capture_100_tp_allreduce_replayed_2_processes),
      cmocka_unit_test(test_capture_100_tp_allreduce_replayed_3_processes),
      cmocka_unit_test(test_capture_misuse_statuses_2_processes),
      cmocka_unit_test(test_communicators_lazy_and_never_inside_capture_3_processes),
      cmocka_unit_test(test_p2p_first_makes_the_communicator_of_a_group_of_two),
      cmocka_unit_test(test_p2p_first_in_a_group_of_three_is_invalid_state),
      cmocka_unit_test(test_capture_100_tp_allreduce_replayed_4_threads_thread_local),
      cmocka_unit_test(test_capture_misuse_statuses_2_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
