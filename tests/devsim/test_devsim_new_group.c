/*
 * test_devsim_new_group.c — custom groups (pstate_new_group) in CUDA contexts on the stand-ins,
 * and how device communicators are made (issue 13), counted by the NCCL stand-in
 * (devsim_nccl_counts: ncclCommInitRank* calls, unique ids, ncclCommSplit calls, communicators).
 *
 * World 4, processes: {0,1,2} {3} made before the world has an NCCL communicator: the group of
 * three bootstraps its own on first use (one init per member, one unique id on its rank 0), the
 * group of one makes none (its operations are local copies). Then a world all_reduce creates the
 * world's communicator, and {0,3} {1,2} are split from it: one ncclCommSplit per rank, no init, no
 * unique id. Then four one-rank groups: no split, no communicator. Every group runs all_reduce,
 * all_gather, broadcast, reduce_scatter, all_to_all and (size > 1) send/recv on device memory,
 * checked against host references; destroy_model_parallel retires them.
 *
 * World 8 with tp 4 x pp 2 x ep 4 (the layout of pstate_initialize_model_parallel), a world
 * all_reduce first, then one device all_reduce on every distinct group: with PSTATE_NCCL_SPLIT=0
 * (every group bootstraps: before) and by default (split from the world: after); each rank checks
 * its counts against the layout, rank 0 prints the totals.
 *
 * Sliced dicts (all_gather_group) with a CUDA tensor across a pp boundary with tp 2 per stage: the
 * senders hold different values, so the gathered tensor proves where each slice came from.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devsim_test_util.h"

typedef struct counts_t {
  unsigned long long inits, ids, splits, comms;
} counts_t;

typedef void (*counts_fn)(unsigned long long *, unsigned long long *, unsigned long long *, unsigned long long *);

/* The stand-in's counts (libpstate loaded it at pstate_init). */
static int read_counts(counts_t *c) {
  const char *path = getenv("PSTATE_NCCL_LIBRARY");
  void *h = path != NULL ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  counts_fn fn = h != NULL ? (counts_fn)dlsym(h, "devsim_nccl_counts") : NULL;
  if (fn == NULL) return 1;
  fn(&c->inits, &c->ids, &c->splits, &c->comms);
  dlclose(h);
  return 0;
}

#define RANK_COUNTS(self, c)                                                                         \
  RANK_CHECK(self, read_counts(c) == 0, "devsim_nccl_counts not found (PSTATE_NCCL_LIBRARY=%s)", \
             getenv("PSTATE_NCCL_LIBRARY"))

/* Device operations on g (n ranks, global ranks `ranks`, this rank `me`) against host values. */
static int device_ops(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                      cudaStream_t stream) {
  enum { M = 4 };
  int32_t h[M * 8], out[M * 8];
  for (int k = 0; k < M * n; ++k) h[k] = (self->rank + 1) * 100 + k;
  int32_t *dsend = devsim_device_copy(h, sizeof h), *drecv = devsim_device_copy(NULL, sizeof h);
  RANK_CHECK(self, dsend != NULL && drecv != NULL, "cudaMalloc");
  /* all_reduce */
  RANK_OK(self, pstate_all_reduce(g, dsend, drecv, M, PSTATE_INT32, PSTATE_SUM, stream));
  RANK_CHECK(self, devsim_to_host(out, drecv, M * sizeof(int32_t), stream) == 0, "copy back");
  for (int i = 0; i < M; ++i) {
    int32_t want = 0;
    for (int k = 0; k < n; ++k) want += (ranks[k] + 1) * 100 + i;
    RANK_CHECK(self, out[i] == want, "all_reduce [%d] = %d, want %d", i, out[i], want);
  }
  /* all_gather */
  RANK_OK(self, pstate_all_gather(g, dsend, drecv, M, PSTATE_INT32, stream));
  RANK_CHECK(self, devsim_to_host(out, drecv, (size_t)n * M * sizeof(int32_t), stream) == 0, "copy back");
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < M; ++i) RANK_CHECK(self, out[k * M + i] == (ranks[k] + 1) * 100 + i, "all_gather %d", k);
  /* broadcast from the last group rank */
  RANK_OK(self, pstate_broadcast(g, dsend, M, PSTATE_INT32, n - 1, stream));
  RANK_CHECK(self, devsim_to_host(out, dsend, M * sizeof(int32_t), stream) == 0, "copy back");
  for (int i = 0; i < M; ++i) RANK_CHECK(self, out[i] == (ranks[n - 1] + 1) * 100 + i, "broadcast [%d]", i);
  /* reduce_scatter: block k of every rank's (restored) input */
  RANK_CHECK(self, cudaMemcpy(dsend, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess, "restore");
  RANK_OK(self, pstate_reduce_scatter(g, dsend, drecv, M, PSTATE_INT32, PSTATE_SUM, stream));
  RANK_CHECK(self, devsim_to_host(out, drecv, M * sizeof(int32_t), stream) == 0, "copy back");
  for (int i = 0; i < M; ++i) {
    int32_t want = 0;
    for (int k = 0; k < n; ++k) want += (ranks[k] + 1) * 100 + me * M + i;
    RANK_CHECK(self, out[i] == want, "reduce_scatter [%d] = %d, want %d", i, out[i], want);
  }
  /* all_to_all: block k of rank j lands in block j of rank k */
  RANK_OK(self, pstate_all_to_all(g, dsend, drecv, M, PSTATE_INT32, stream));
  RANK_CHECK(self, devsim_to_host(out, drecv, (size_t)n * M * sizeof(int32_t), stream) == 0, "copy back");
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < M; ++i)
      RANK_CHECK(self, out[k * M + i] == (ranks[k] + 1) * 100 + me * M + i, "all_to_all %d [%d]", k, i);
  if (n > 1) { /* send/recv around the ring, even ranks first */
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    if (me % 2 == 0) {
      RANK_OK(self, pstate_send(g, dsend, M, PSTATE_INT32, next, stream));
      RANK_OK(self, pstate_recv(g, drecv, M, PSTATE_INT32, prev, stream));
    } else {
      RANK_OK(self, pstate_recv(g, drecv, M, PSTATE_INT32, prev, stream));
      RANK_OK(self, pstate_send(g, dsend, M, PSTATE_INT32, next, stream));
    }
    RANK_CHECK(self, devsim_to_host(out, drecv, M * sizeof(int32_t), stream) == 0, "copy back");
    for (int i = 0; i < M; ++i) RANK_CHECK(self, out[i] == (ranks[prev] + 1) * 100 + i, "recv [%d]", i);
  }
  cudaFree(dsend);
  cudaFree(drecv);
  return 0;
}

static int world_all_reduce(const pstate_test_rank_t *self, pstate_t *ps, cudaStream_t stream) {
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  int ranks[8];
  for (int r = 0; r < self->world_size; ++r) ranks[r] = r;
  return device_ops(self, w, ranks, self->world_size, self->rank, stream);
}

static int custom_groups_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  counts_t c0, c1, c2, c3;
  RANK_COUNTS(self, &c0);
  /* {0,1,2} {3}, before the world has a communicator: bootstrap, and nothing for the one-rank group */
  static const int three[] = {0, 1, 2}, one[] = {3};
  const int in_three = self->rank < 3;
  pstate_group_t *g1 = NULL;
  RANK_OK(self, pstate_new_group(ps, in_three ? three : one, in_three ? 3 : 1, &g1));
  if (device_ops(self, g1, in_three ? three : one, in_three ? 3 : 1, in_three ? self->rank : 0, stream)) return 1;
  RANK_COUNTS(self, &c1);
  RANK_CHECK(self, c1.splits == c0.splits, "no split without a world communicator");
  if (in_three) {
    RANK_CHECK(self, c1.inits == c0.inits + 1 && c1.comms == c0.comms + 1, "bootstrap: inits %llu -> %llu", c0.inits,
               c1.inits);
    RANK_CHECK(self, c1.ids == c0.ids + (self->rank == 0), "unique ids %llu -> %llu", c0.ids, c1.ids);
  } else {
    RANK_CHECK(self, c1.inits == c0.inits && c1.comms == c0.comms && c1.ids == c0.ids,
               "a one-rank group made a communicator: inits %llu -> %llu, communicators %llu -> %llu", c0.inits,
               c1.inits, c0.comms, c1.comms);
  }
  /* the world's communicator, then {0,3} {1,2} split from it */
  if (world_all_reduce(self, ps, stream)) return 1;
  RANK_COUNTS(self, &c1);
  static const int a[] = {0, 3}, b[] = {1, 2};
  const int *mine = self->rank == 0 || self->rank == 3 ? a : b;
  pstate_group_t *g2 = NULL;
  RANK_OK(self, pstate_new_group(ps, mine, 2, &g2));
  if (device_ops(self, g2, mine, 2, mine[0] == self->rank ? 0 : 1, stream)) return 1;
  RANK_COUNTS(self, &c2);
  RANK_CHECK(self, c2.splits == c1.splits + 1 && c2.comms == c1.comms + 1 && c2.inits == c1.inits && c2.ids == c1.ids,
             "split: splits %llu -> %llu, communicators %llu -> %llu, inits %llu -> %llu, ids %llu -> %llu", c1.splits,
             c2.splits, c1.comms, c2.comms, c1.inits, c2.inits, c1.ids, c2.ids);
  /* every rank alone: no split, no communicator */
  int alone[1] = {self->rank};
  pstate_group_t *g3 = NULL;
  RANK_OK(self, pstate_new_group(ps, alone, 1, &g3));
  if (device_ops(self, g3, alone, 1, 0, stream)) return 1;
  RANK_COUNTS(self, &c3);
  RANK_CHECK(self, c3.splits == c2.splits && c3.comms == c2.comms && c3.inits == c2.inits,
             "one-rank groups: splits %llu -> %llu, communicators %llu -> %llu", c2.splits, c3.splits, c2.comms,
             c3.comms);
  /* not in graph-capture mode */
  void *capture = NULL;
  RANK_OK(self, pstate_graph_capture_begin(ps, stream, &capture));
  pstate_group_t *g4 = NULL;
  pstate_status_t sc = pstate_new_group(ps, alone, 1, &g4);
  RANK_CHECK(self, sc == PSTATE_ERR_INVALID_STATE && g4 == NULL && strstr(pstate_last_error(), "graph-capture"),
             "new_group while capturing: %s", pstate_last_error());
  RANK_OK(self, pstate_graph_capture_end(ps));
  /* the world is still fine, and destroy retires them all */
  if (world_all_reduce(self, ps, stream)) return 1;
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  int32_t *d = devsim_device_copy(NULL, 16);
  pstate_status_t s = pstate_all_reduce(g2, d, d, 1, PSTATE_INT32, PSTATE_SUM, stream);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_STATE && strstr(pstate_last_error(), "destroyed"), "after destroy: %s",
             pstate_last_error());
  cudaFree(d);
  RANK_CHECK(self, cudaStreamSynchronize(stream) == cudaSuccess, "sync");
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(stream);
  return 0;
}

static void test_custom_groups_on_device_bootstrap_split_and_none(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 120, custom_groups_rank, NULL, NULL), 0);
}

/* ---- world 8, tp 4 x pp 2 x ep 4: bootstraps before and after splitting ------------------------- */

static int layout_rank(const pstate_test_rank_t *self) {
  const int split = self->arg != NULL;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  if (world_all_reduce(self, ps, stream)) return 1;
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 4;
  cfg.pipeline_parallel_size = 2;
  cfg.expert_parallel_size = 4;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  /* every distinct group of this rank (aliases are one object) */
  pstate_group_t *seen[PSTATE_GROUP_KIND_COUNT];
  int nseen = 0, shared = 0, rank0_of = self->rank == 0; /* world: rank 0 made its unique id */
  for (int k = 1; k < PSTATE_GROUP_KIND_COUNT; ++k) {
    pstate_group_t *g = NULL;
    if (pstate_get_group(ps, (pstate_group_kind_t)k, &g) != PSTATE_OK) continue;
    int dup = 0;
    for (int i = 0; i < nseen; ++i) dup |= seen[i] == g;
    if (dup) continue;
    seen[nseen++] = g;
    int ranks[8];
    size_t n = 0;
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_ranks(g, ranks, 8, &n));
    RANK_OK(self, pstate_group_info(g, &info));
    if (device_ops(self, g, ranks, (int)n, info.rank_in_group, stream)) return 1;
    if (n > 1) {
      ++shared;
      rank0_of += info.rank_in_group == 0;
    }
  }
  counts_t c;
  RANK_COUNTS(self, &c);
  if (split)
    RANK_CHECK(self, c.inits == 1 && c.ids == (unsigned long long)(self->rank == 0) && c.splits == (unsigned)shared &&
                         c.comms == 1ull + (unsigned)shared,
               "after: inits %llu ids %llu splits %llu communicators %llu (groups of > 1 rank besides the world: %d)",
               c.inits, c.ids, c.splits, c.comms, shared);
  else
    RANK_CHECK(self, c.inits == 1ull + (unsigned)shared && c.ids == (unsigned)rank0_of && c.splits == 0,
               "before: inits %llu ids %llu splits %llu (groups of > 1 rank besides the world: %d)", c.inits, c.ids,
               c.splits, shared);
  /* the totals over the world, printed by rank 0 for the record */
  unsigned long long mine[4] = {c.inits, c.ids, c.splits, c.comms};
  pstate_bytes_t all = {NULL, 0};
  size_t sizes[8];
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  RANK_OK(self, pstate_all_gather_object(w, mine, sizeof mine, &all, sizes, 8, &(size_t){0}));
  if (self->rank == 0) {
    unsigned long long t[4] = {0, 0, 0, 0};
    for (int r = 0; r < self->world_size; ++r)
      for (int i = 0; i < 4; ++i) t[i] += ((const unsigned long long *)all.data)[r * 4 + i];
    fprintf(stderr, "world 8, tp 4 x pp 2 x ep 4, %s: %llu ncclCommInitRank calls, %llu unique ids, %llu "
            "ncclCommSplit calls, %llu communicators\n", split ? "split (after)" : "PSTATE_NCCL_SPLIT=0 (before)",
            t[0], t[1], t[2], t[3]);
  }
  pstate_bytes_free(&all);
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(stream);
  return 0;
}

static void test_world_8_tp4_pp2_ep4_bootstraps_each_group_without_split(void **state) {
  (void)state;
  setenv("PSTATE_NCCL_SPLIT", "0", 1);
  int failed = pstate_test_run_processes(8, 120, layout_rank, NULL, NULL);
  unsetenv("PSTATE_NCCL_SPLIT");
  assert_int_equal(failed, 0);
}

static void test_world_8_tp4_pp2_ep4_splits_every_group_from_the_world(void **state) {
  (void)state;
  static int on = 1;
  assert_int_equal(pstate_test_run_processes(8, 120, layout_rank, &on, NULL), 0);
}

/* ---- sliced dicts (all_gather_group) with CUDA tensors: tp 2 x pp 2 ------------------------------ */

static void *device_alloc(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                          size_t bytes, pstate_device_t device) {
  (void)name, (void)dtype, (void)ndim, (void)shape, (void)device;
  void **slot = (void **)user;
  return *slot = devsim_device_copy(NULL, bytes > 0 ? bytes : 1);
}

static int sliced_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 2;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *pp = NULL, *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_PP, &pp));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_ATTN_TP, &tp));
  int32_t one = 1; /* the tp communicators exist before the gather (a collective makes them) */
  int32_t *d1 = devsim_device_copy(&one, sizeof one);
  RANK_OK(self, pstate_all_reduce(tp, d1, d1, 1, PSTATE_INT32, PSTATE_SUM, stream));
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(tp, &info));
  const int k = info.rank_in_group;
  enum { N = 1000 };
  int32_t h[N];
  for (int i = 0; i < N; ++i) h[i] = (k + 1) * 10000 + i; /* each sender holds different values */
  if (self->rank < 2) {
    int32_t *d = devsim_device_copy(h, sizeof h);
    int64_t shape[2] = {10, N / 10};
    pstate_tensor_t t = PSTATE_TENSOR_INIT;
    t.name = "hidden";
    t.dtype = PSTATE_INT32;
    t.ndim = 2;
    t.shape = shape;
    t.data = d;
    t.device = PSTATE_DEVICE_CUDA;
    RANK_OK(self, pstate_send_tensor_dict_sliced(pp, &t, 1, 1, tp, stream));
    RANK_CHECK(self, cudaStreamSynchronize(stream) == cudaSuccess, "sync");
    cudaFree(d);
  } else {
    void *got = NULL;
    RANK_OK(self, pstate_recv_tensor_dict_sliced(pp, 0, tp, device_alloc, &got, stream));
    int32_t out[N];
    RANK_CHECK(self, got != NULL && devsim_to_host(out, got, sizeof out, stream) == 0, "copy back");
    for (int i = 0; i < N; ++i) {
      int32_t want = (i / (N / 2) + 1) * 10000 + i; /* slice s from the sender at tp rank s */
      RANK_CHECK(self, out[i] == want, "gathered[%d] = %d, want %d", i, out[i], want);
    }
    cudaFree(got);
  }
  cudaFree(d1);
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(stream);
  return 0;
}

static void test_sliced_cuda_dict_across_a_pp_boundary_with_tp_2(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 120, sliced_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sliced_cuda_dict_across_a_pp_boundary_with_tp_2),
      cmocka_unit_test(test_custom_groups_on_device_bootstrap_split_and_none),
      cmocka_unit_test(test_world_8_tp4_pp2_ep4_bootstraps_each_group_without_split),
      cmocka_unit_test(test_world_8_tp4_pp2_ep4_splits_every_group_from_the_world),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
