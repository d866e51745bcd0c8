/*
 * test_devsim_shrink.c — pstate_shrink in CUDA contexts (on the devsim stand-ins): the device
 * communicators of the failed world are aborted and the survivors' are made anew.
 *
 * World 4, the store served by `pstate store` (it outlives every rank); every rank loops device
 * all_reduces (stream-ordered, on cudaMalloc'ed memory) and rank 2 SIGKILLs itself in the middle
 * of them. The survivors get PEER_LOST, call pstate_shrink, and then, on the world of 3 (their
 * new ranks as inputs): a device all_reduce of every dtype of the devsim references, a device
 * all_gather, tp 3 (whose NCCL communicator is split from the new world's where NCCL can split)
 * with a device all_reduce, then a graph capture of a tp all_reduce replayed twice; all exact.
 * Finalize must be clean (the old world's communicator was aborted, the new ones finalize).
 *
 * Twice: as it goes by default, the new world's communicator is made from the failed world's by
 * ncclCommShrink (the stand-in counts one shrink and no new bootstrap on every survivor), and
 * with PSTATE_NCCL_SHRINK=0, made anew by a bootstrap (one more ncclCommInitRank, no shrink).
 */
/* cmocka.h needs these first */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devsim_test_util.h"
#include "ranks.h"

#define TIMEOUT_MS 5000
#define N 4096
#define VICTIM 2

typedef struct counts_t {
  unsigned long long inits, splits, shrinks, revokes;
} counts_t;

/* The stand-in's counts in this process (libpstate loaded it at pstate_init). */
static int read_counts(counts_t *c) {
  typedef void (*counts_fn)(unsigned long long *, unsigned long long *, unsigned long long *, unsigned long long *);
  typedef void (*shrink_fn)(unsigned long long *, unsigned long long *);
  const char *path = getenv("PSTATE_NCCL_LIBRARY");
  void *h = path != NULL ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  counts_fn counts = h != NULL ? (counts_fn)dlsym(h, "devsim_nccl_counts") : NULL;
  shrink_fn shrinks = h != NULL ? (shrink_fn)dlsym(h, "devsim_nccl_shrink_counts") : NULL;
  if (counts == NULL || shrinks == NULL) return 1;
  counts(&c->inits, NULL, &c->splits, NULL);
  shrinks(&c->shrinks, &c->revokes);
  dlclose(h);
  return 0;
}

static void *die_soon(void *arg) {
  (void)arg;
  usleep(300);
  kill(getpid(), SIGKILL);
  return NULL;
}

/* A device all_reduce of `count` elements of dtype t on g, checked against the reference of a
 * group of n ranks whose inputs are their group ranks. */
static int device_all_reduce_exact(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t t,
                                   pstate_reduce_op_t op, size_t count, cudaStream_t s) {
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(g, &info));
  size_t es = pstate_dtype_size(t);
  unsigned char *host = malloc(count * es);
  for (size_t i = 0; i < count; ++i) devsim_store(t, host, i, devsim_input(op, info.rank_in_group, i, t));
  void *d = devsim_device_copy(host, count * es);
  RANK_OK(self, pstate_all_reduce(g, d, d, count, t, op, s));
  RANK_CHECK(self, devsim_to_host(host, d, count * es, s) == 0, "copy back");
  for (size_t i = 0; i < count; ++i) {
    double want = devsim_reduced(op, info.world_size, i, t), got = devsim_load(t, host, i);
    RANK_CHECK(self, devsim_close(t, op, got, want), "%s %s all_reduce %s [%zu] = %g, expected %g", info.name,
               pstate_dtype_name(t), pstate_reduce_op_name(op), i, got, want);
  }
  cudaFree(d);
  free(host);
  return 0;
}

static int survive_on_device(const pstate_test_rank_t *self) {
  const int by_shrink = *(const int *)self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *d = devsim_device_copy(NULL, N * sizeof(float));
  pstate_status_t st = PSTATE_OK;
  for (int iter = 0; st == PSTATE_OK; ++iter) {
    if (self->rank == VICTIM && iter == 20) {
      pthread_t t;
      pthread_create(&t, NULL, die_soon, NULL);
    }
    st = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_MAX, s);
    /* a bounded look at the stream (a dead peer's collective never completes on it; pstate's next
     * call reports the death): an application keeps issuing work, it does not block for ever */
    double t = pstate_test_now_ms();
    while (st == PSTATE_OK && cudaStreamQuery(s) == cudaErrorNotReady && pstate_test_now_ms() - t < 50) usleep(200);
  }
  RANK_CHECK(self, self->rank != VICTIM, "the victim lived on");
  RANK_CHECK(self, st == PSTATE_ERR_PEER_LOST || st == PSTATE_ERR_ABORTED, "%s: %s", pstate_status_string(st),
             pstate_last_error());
  counts_t before, after;
  RANK_CHECK(self, read_counts(&before) == 0, "devsim counts not found (PSTATE_NCCL_LIBRARY=%s)",
             getenv("PSTATE_NCCL_LIBRARY"));
  int new_rank[4];
  RANK_OK(self, pstate_shrink(ps, new_rank, 4, &(size_t){0}));
  RANK_CHECK(self, new_rank[0] == 0 && new_rank[1] == 1 && new_rank[2] == -1 && new_rank[3] == 2, "new ranks %d %d %d %d",
             new_rank[0], new_rank[1], new_rank[2], new_rank[3]);
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  const pstate_dtype_t dtypes[] = {PSTATE_FLOAT32, PSTATE_BFLOAT16, PSTATE_INT32, PSTATE_FLOAT16, PSTATE_INT64};
  for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; ++k)
    if (device_all_reduce_exact(self, world, dtypes[k], PSTATE_SUM, 1000 + k, s)) return 1;
  /* how the new world's communicator was made */
  RANK_CHECK(self, read_counts(&after) == 0, "devsim counts");
  if (by_shrink)
    RANK_CHECK(self, after.shrinks == before.shrinks + 1 && after.inits == before.inits,
               "expected one ncclCommShrink and no bootstrap: %llu shrinks, %llu inits (before: %llu, %llu)",
               after.shrinks, after.inits, before.shrinks, before.inits);
  else
    RANK_CHECK(self, after.shrinks == before.shrinks && after.inits == before.inits + 1,
               "PSTATE_NCCL_SHRINK=0: expected a bootstrap and no shrink: %llu shrinks, %llu inits (before: %llu, %llu)",
               after.shrinks, after.inits, before.shrinks, before.inits);
  /* all_gather of each rank's new rank */
  float mine[8], all[24];
  for (int i = 0; i < 8; ++i) mine[i] = (float)(new_rank[self->rank] * 100 + i);
  void *ds = devsim_device_copy(mine, sizeof mine), *dr = devsim_device_copy(NULL, sizeof all);
  RANK_OK(self, pstate_all_gather(world, ds, dr, 8, PSTATE_FLOAT32, s));
  RANK_CHECK(self, devsim_to_host(all, dr, sizeof all, s) == 0, "copy back");
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 8; ++i) RANK_CHECK(self, all[r * 8 + i] == (float)(r * 100 + i), "all_gather [%d][%d]", r, i);
  /* model parallel over the survivors, and a captured graph on it */
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 3;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  if (device_all_reduce_exact(self, tp, PSTATE_FLOAT32, PSTATE_MAX, N, s)) return 1;
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)(new_rank[self->rank] + 1);
  void *dg = devsim_device_copy(host, sizeof host);
  void *cs = NULL;
  RANK_OK(self, pstate_graph_capture_begin(ps, s, &cs));
  cudaGraph_t graph = NULL;
  RANK_CHECK(self, cudaStreamBeginCapture((cudaStream_t)cs, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
  RANK_OK(self, pstate_all_reduce(tp, dg, dg, N, PSTATE_FLOAT32, PSTATE_SUM, cs));
  RANK_CHECK(self, cudaStreamEndCapture((cudaStream_t)cs, &graph) == cudaSuccess, "end capture");
  RANK_OK(self, pstate_graph_capture_end(ps));
  cudaGraphExec_t exec = NULL;
  RANK_CHECK(self, cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
  for (int replay = 0; replay < 2; ++replay) RANK_CHECK(self, cudaGraphLaunch(exec, s) == cudaSuccess, "launch");
  RANK_CHECK(self, devsim_to_host(host, dg, sizeof host, s) == 0, "copy back");
  /* (1+2+3) after one replay; each replay sums what the three hold: 6, then 18 */
  for (int i = 0; i < N; ++i) RANK_CHECK(self, host[i] == 18.0f, "captured all_reduce [%d] = %g, expected 18", i, host[i]);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  fprintf(stderr, "rank %d: rank %d of 3 after the shrink (%s; %llu revoked): every device collective exact\n",
          self->rank, new_rank[self->rank], by_shrink ? "ncclCommShrink" : "bootstrap", after.revokes);
  cudaFree(d);
  cudaFree(ds);
  cudaFree(dr);
  cudaFree(dg);
  return 0;
}

/* World 2, rank 1 dies: rank 0 shrinks to a world of one, which holds no NCCL communicator (its
 * device operations are local copies on the stream): no ncclCommShrink to a one-rank
 * communicator, no new one made (issue 44: the shrink kept a one-rank communicator), and its
 * device all_reduce and all_gather are exact. */
static int survive_alone(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *d = devsim_device_copy(NULL, N * sizeof(float));
  pstate_status_t st = PSTATE_OK;
  for (int iter = 0; st == PSTATE_OK; ++iter) {
    if (self->rank == 1 && iter == 20) {
      pthread_t t;
      pthread_create(&t, NULL, die_soon, NULL);
    }
    st = pstate_all_reduce(world, d, d, N, PSTATE_FLOAT32, PSTATE_MAX, s);
    double t = pstate_test_now_ms();
    while (st == PSTATE_OK && cudaStreamQuery(s) == cudaErrorNotReady && pstate_test_now_ms() - t < 50) usleep(200);
  }
  RANK_CHECK(self, self->rank == 0, "the victim lived on");
  counts_t before, after;
  RANK_CHECK(self, read_counts(&before) == 0, "devsim counts");
  int new_rank[2];
  RANK_OK(self, pstate_shrink(ps, new_rank, 2, &(size_t){0}));
  RANK_CHECK(self, new_rank[0] == 0 && new_rank[1] == -1, "new ranks %d %d", new_rank[0], new_rank[1]);
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  if (device_all_reduce_exact(self, world, PSTATE_FLOAT32, PSTATE_SUM, 1000, s)) return 1;
  float mine[8], all[8];
  for (int i = 0; i < 8; ++i) mine[i] = (float)(7 + i);
  void *ds = devsim_device_copy(mine, sizeof mine), *dr = devsim_device_copy(NULL, sizeof all);
  RANK_OK(self, pstate_all_gather(world, ds, dr, 8, PSTATE_FLOAT32, s));
  RANK_CHECK(self, devsim_to_host(all, dr, sizeof all, s) == 0, "copy back");
  for (int i = 0; i < 8; ++i) RANK_CHECK(self, all[i] == (float)(7 + i), "all_gather [%d] = %g", i, all[i]);
  RANK_CHECK(self, read_counts(&after) == 0, "devsim counts");
  RANK_CHECK(
      self, after.shrinks == before.shrinks && after.inits == before.inits && after.splits == before.splits,
      "a world of one made an NCCL communicator: %llu shrinks, %llu inits, %llu splits (before: %llu, %llu, %llu)",
      after.shrinks, after.inits, after.splits, before.shrinks, before.inits, before.splits);
  RANK_OK(self, pstate_finalize(ps));
  cudaFree(d);
  cudaFree(ds);
  cudaFree(dr);
  return 0;
}

static void test_a_shrink_to_one_rank_holds_no_nccl_communicator(void **state) {
  (void)state;
  int statuses[2];
  unsetenv("PSTATE_NCCL_SHRINK");
  pstate_test_job_t job = {2, 120, survive_alone, NULL, statuses, 1, 1ul << 1, 0, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
}

static void run_job(int by_shrink) {
  int statuses[4];
  if (by_shrink)
    unsetenv("PSTATE_NCCL_SHRINK");
  else
    setenv("PSTATE_NCCL_SHRINK", "0", 1);
  pstate_test_job_t job = {4, 120, survive_on_device, &by_shrink, statuses, 1, 1ul << VICTIM, 0, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
  unsetenv("PSTATE_NCCL_SHRINK");
}

static void test_survivors_shrink_the_device_communicator(void **state) {
  (void)state;
  run_job(1);
}

static void test_survivors_bootstrap_a_new_device_communicator(void **state) {
  (void)state;
  run_job(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_survivors_shrink_the_device_communicator),
      cmocka_unit_test(test_a_shrink_to_one_rank_holds_no_nccl_communicator),
      cmocka_unit_test(test_survivors_bootstrap_a_new_device_communicator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
