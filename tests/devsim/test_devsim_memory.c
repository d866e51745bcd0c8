/*
 * test_devsim_memory.c — group memory and registered buffers (issue 29) in CUDA contexts on the
 * devsim stand-ins, whose NCCL models ncclMemAlloc, symmetric windows as a collective with
 * agreement, windows per communicator, a window budget, ncclCommRegister, a version number and
 * refusals on demand (tests/devsim/README.md).
 *
 * - allocation at 1-4 ranks (processes): pstate_mem_alloc gives memory in a symmetric window (world
 *   > 1; a world of one falls back to plain memory), device all_reduce, all_gather and
 *   reduce_scatter on it are exact and take the symmetric path (pstate's count and the stand-in's
 *   count of collectives whose buffers lay in windows agree), pstate_mem_free deregisters;
 * - the pool: one collective reserve (one window), then ranks allocate different numbers of pieces
 *   locally (no hang), running out is NO_MEMORY naming the reserve, a second reserve INVALID_STATE;
 * - fallback: NCCL refusing windows on every rank, on one rank only (the ranks agree: none keeps
 *   one), NCCL 2.26 (no windows), and the window budget: the memory is plain, results exact;
 * - disagreement: different sizes are MISMATCH on every rank naming both, and the group goes on;
 * - capture with registered buffers: the buffers of captured all_reduces are registered once at
 *   pstate_graph_capture_end, replays are exact; pstate_mem_register never registers an allocation
 *   twice; symmetric memory in a capture is UNSUPPORTED on NCCL < 2.30.7 and exact on 2.30.7;
 * - shrink with windows: a rank dies, the survivors shrink, the world's memory and pool are
 *   registered on the shrunk communicator and all_reduce on them is exact;
 * - refusals and the pool's first piece (issue 44): the first piece, which starts at the reserve's
 *   address, frees itself only (on every rank, or on one alone, locally); a foreign pointer freed
 *   or an allocation or reserve refused (0 bytes, past 2^47, out NULL) on one rank is
 *   INVALID_ARGUMENT on every rank with nothing allocated or freed and the group going on, in
 *   shared memory and over UCX; ranks freeing different allocations of one size are MISMATCH;
 *   with a pool, allocations and their refusals are local.
 * References are computed here from the inputs (small integers: exact in float32).
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

#define COUNT 1000

#define RANK_STATUS(self, call, want, needle)                                                                  \
  do {                                                                                                         \
    pstate_status_t s_ = (call);                                                                               \
    RANK_CHECK(self, s_ == (want) && strstr(pstate_last_error(), (needle)) != NULL,                            \
               "%s -> %s (%s), expected %s with \"%s\"", #call, pstate_status_string(s_), pstate_last_error(), \
               pstate_status_string(want), needle);                                                            \
  } while (0)

/* The stand-in's registered-memory counts in this process (devsim.h). */
typedef struct mem_counts_t {
  unsigned long long win_reg, win_dereg, buf_reg, buf_dereg, symmetric, registered, allocs, frees;
} mem_counts_t;

static int read_counts(mem_counts_t *c) {
  typedef void (*counts_fn)(unsigned long long *);
  const char *path = getenv("PSTATE_NCCL_LIBRARY");
  void *h = path != NULL ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  counts_fn f = h != NULL ? (counts_fn)dlsym(h, "devsim_nccl_memory_counts") : NULL;
  if (f == NULL) {
    memset(c, 0, sizeof *c); /* a world of one never loads NCCL */
    if (h != NULL) dlclose(h);
    return 1;
  }
  unsigned long long v[8];
  f(v);
  c->win_reg = v[0], c->win_dereg = v[1], c->buf_reg = v[2], c->buf_dereg = v[3];
  c->symmetric = v[4], c->registered = v[5], c->allocs = v[6], c->frees = v[7];
  dlclose(h);
  return 0;
}

static float input(int rank, size_t i) { return (float)((rank * 7 + (int)i) % 13); }

static int fill(float *d, int rank, size_t n, size_t first) {
  float *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; ++i) h[i] = input(rank, first + i);
  int rc = cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
  free(h);
  return rc;
}

/* all_reduce (in place) of COUNT floats at d on g, checked against the sum of every rank's input */
static int all_reduce_exact(const pstate_test_rank_t *self, pstate_group_t *g, float *d, int world, cudaStream_t s) {
  RANK_CHECK(self, fill(d, self->rank, COUNT, 0) == 0, "fill");
  RANK_OK(self, pstate_all_reduce(g, d, d, COUNT, PSTATE_FLOAT32, PSTATE_SUM, s));
  float h[COUNT];
  RANK_CHECK(self, devsim_to_host(h, d, sizeof h, s) == 0, "copy back");
  for (size_t i = 0; i < COUNT; ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += input(r, i);
    RANK_CHECK(self, h[i] == want, "all_reduce [%zu] = %g, expected %g", i, h[i], want);
  }
  return 0;
}

static int expect_path(const pstate_test_rank_t *self, pstate_group_t *g, pstate_mem_path_t path, uint64_t calls) {
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  RANK_OK(self, pstate_group_mem_stats(g, &st));
  uint64_t got = path == PSTATE_MEM_PATH_SYMMETRIC    ? st.symmetric_calls
                 : path == PSTATE_MEM_PATH_REGISTERED ? st.registered_calls
                                                      : st.plain_calls;
  RANK_CHECK(self, st.last_path == path && got == calls, "last path %d (want %d), %llu such calls (want %llu)",
             (int)st.last_path, (int)path, (unsigned long long)got, (unsigned long long)calls);
  return 0;
}

/* ---- allocation ---------------------------------------------------------------------------- */

static int allocation(const pstate_test_rank_t *self) {
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float *a = NULL, *b = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&a));
  RANK_OK(self, pstate_mem_alloc(world, (size_t)n * COUNT * sizeof(float), (void **)&b));
  RANK_CHECK(self, a != NULL && b != NULL && ((uintptr_t)a % 256) == 0, "aligned group memory");
  pstate_mem_info_t info = PSTATE_MEM_INFO_INIT;
  RANK_OK(self, pstate_mem_query(world, a + 10, &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_GROUP && info.base == a && info.size >= COUNT * sizeof(float) &&
                       info.symmetric == (n > 1) && info.registered == (n > 1),
             "query: kind %d base %p (a %p) symmetric %d registered %d", (int)info.kind, info.base, (void *)a,
             info.symmetric, info.registered);
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  RANK_OK(self, pstate_group_mem_stats(world, &st));
  RANK_CHECK(self, st.windows == (n > 1 ? 2u : 0u) && st.symmetric_available == (n > 1),
             "windows %zu, symmetric_available %d", st.windows, st.symmetric_available);
  mem_counts_t before, after;
  read_counts(&before);
  const pstate_mem_path_t path = n > 1 ? PSTATE_MEM_PATH_SYMMETRIC : PSTATE_MEM_PATH_PLAIN;
  if (all_reduce_exact(self, world, a, n, s)) return 1;
  if (expect_path(self, world, path, 1)) return 1;
  /* all_gather from a into b, then reduce_scatter from b into a */
  RANK_CHECK(self, fill(a, self->rank, COUNT, 0) == 0, "fill");
  RANK_OK(self, pstate_all_gather(world, a, b, COUNT, PSTATE_FLOAT32, s));
  float *h = malloc((size_t)n * COUNT * sizeof *h);
  RANK_CHECK(self, devsim_to_host(h, b, (size_t)n * COUNT * sizeof *h, s) == 0, "copy back");
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < COUNT; ++i)
      RANK_CHECK(self, h[(size_t)r * COUNT + i] == input(r, i), "all_gather [%d][%zu] = %g", r, i, h[r * COUNT + i]);
  RANK_CHECK(self, fill(b, self->rank, (size_t)n * COUNT, 0) == 0, "fill");
  RANK_OK(self, pstate_reduce_scatter(world, b, a, COUNT, PSTATE_FLOAT32, PSTATE_SUM, s));
  RANK_CHECK(self, devsim_to_host(h, a, COUNT * sizeof *h, s) == 0, "copy back");
  for (size_t i = 0; i < COUNT; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += input(r, (size_t)self->rank * COUNT + i);
    RANK_CHECK(self, h[i] == want, "reduce_scatter [%zu] = %g, expected %g", i, h[i], want);
  }
  free(h);
  if (expect_path(self, world, path, 3)) return 1;
  read_counts(&after);
  RANK_CHECK(self, after.symmetric - before.symmetric == (n > 1 ? 3u : 0u),
             "the stand-in saw %llu collectives on symmetric windows, expected %d", after.symmetric - before.symmetric,
             n > 1 ? 3 : 0);
  /* plain memory next to it: the plain path */
  float *plain = devsim_device_copy(NULL, COUNT * sizeof(float));
  if (all_reduce_exact(self, world, plain, n, s)) return 1;
  if (expect_path(self, world, PSTATE_MEM_PATH_PLAIN, n > 1 ? 1 : 4)) return 1;
  RANK_OK(self, pstate_mem_query(world, plain, &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_NONE && info.symmetric == 0 && info.registered == 0, "plain memory query");
  RANK_OK(self, pstate_mem_free(world, a));
  RANK_OK(self, pstate_mem_free(world, b));
  RANK_OK(self, pstate_group_mem_stats(world, &st));
  RANK_CHECK(self, st.windows == 0 && st.allocated == 0, "after free: %zu windows, %zu bytes", st.windows, st.allocated);
  read_counts(&after);
  RANK_CHECK(self, after.win_dereg - before.win_dereg == (n > 1 ? 2u : 0u), "window deregistrations %llu",
             after.win_dereg - before.win_dereg);
  RANK_STATUS(self, pstate_mem_free(world, plain), PSTATE_ERR_INVALID_ARGUMENT, "not the start of group memory");
  RANK_OK(self, pstate_mem_free(world, NULL));
  RANK_STATUS(self, pstate_mem_alloc(world, 0, (void **)&a), PSTATE_ERR_INVALID_ARGUMENT, "bytes is 0");
  RANK_CHECK(self, a == NULL, "out is NULL after an error");
  cudaFree(plain);
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* ---- the pool ------------------------------------------------------------------------------ */

#define RESERVE (64 * 1024)

static int pool(const pstate_test_rank_t *self) {
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  mem_counts_t before, after;
  read_counts(&before);
  RANK_OK(self, pstate_mem_pool_reserve(world, RESERVE));
  RANK_STATUS(self, pstate_mem_pool_reserve(world, RESERVE), PSTATE_ERR_INVALID_STATE, "has its pool already");
  /* the same first piece on every rank (the same offset: what a symmetric collective needs) */
  float *x = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&x));
  /* then a different number of local pieces per rank: local, so no rank waits for another */
  void *extra[8];
  for (int k = 0; k <= self->rank; ++k) RANK_OK(self, pstate_mem_alloc(world, 1000, &extra[k]));
  pstate_mem_info_t info = PSTATE_MEM_INFO_INIT;
  RANK_OK(self, pstate_mem_query(world, extra[0], &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_POOL && info.base == extra[0] && info.size == 1024 &&
                       info.symmetric == (n > 1),
             "pool piece: kind %d size %zu symmetric %d", (int)info.kind, info.size, info.symmetric);
  void *big = (void *)1;
  RANK_STATUS(self, pstate_mem_alloc(world, RESERVE, &big), PSTATE_ERR_NO_MEMORY, "reserve");
  RANK_CHECK(self, big == NULL, "out is NULL after NO_MEMORY");
  if (all_reduce_exact(self, world, x, n, s)) return 1;
  if (expect_path(self, world, n > 1 ? PSTATE_MEM_PATH_SYMMETRIC : PSTATE_MEM_PATH_PLAIN, 1)) return 1;
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  RANK_OK(self, pstate_group_mem_stats(world, &st));
  RANK_CHECK(self, st.pool_reserved == RESERVE && st.pool_used == 4096 + 1024 * (size_t)(self->rank + 1) &&
                       st.windows == (n > 1 ? 1u : 0u),
             "pool %zu reserved, %zu used, %zu windows", st.pool_reserved, st.pool_used, st.windows);
  for (int k = 0; k <= self->rank; ++k) RANK_OK(self, pstate_mem_free(world, extra[k]));
  RANK_STATUS(self, pstate_mem_free(world, extra[0]), PSTATE_ERR_INVALID_ARGUMENT, "not the start of a live allocation");
  /* freed pieces are reused: the reserve minus x fits again */
  RANK_OK(self, pstate_mem_alloc(world, RESERVE - 4096, &big));
  RANK_OK(self, pstate_mem_free(world, big));
  read_counts(&after);
  RANK_CHECK(self, after.win_reg - before.win_reg == (n > 1 ? 1u : 0u), "%llu windows registered, expected one",
             after.win_reg - before.win_reg);
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps)); /* frees the reserve */
  return 0;
}

/* ---- fallback ------------------------------------------------------------------------------ */

/* arg: which refusal (set in the process before init) */
enum { REFUSE_ALL, REFUSE_RANK1, OLD_NCCL, BUDGET };

static int fallback(const pstate_test_rank_t *self) {
  const int how = *(const int *)self->arg, n = self->world_size;
  if (how == REFUSE_ALL) setenv("DEVSIM_NCCL_WINDOWS", "refuse", 1);
  if (how == REFUSE_RANK1) /* both windows of this test, on rank 1 only */
    setenv("DEVSIM_NCCL_FAIL", "ncclCommWindowRegister:1:1:ncclInvalidUsage,ncclCommWindowRegister:1:2:ncclInvalidUsage", 1);
  if (how == OLD_NCCL) setenv("DEVSIM_NCCL_VERSION", "2.26.5", 1);
  if (how == BUDGET) setenv("DEVSIM_NCCL_WINDOW_BUDGET", "8192", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float *a = NULL, *b = NULL;
  RANK_OK(self, pstate_mem_alloc(world, 4096, (void **)&a));
  RANK_OK(self, pstate_mem_alloc(world, 8192, (void **)&b));
  pstate_mem_info_t ia = PSTATE_MEM_INFO_INIT, ib = PSTATE_MEM_INFO_INIT;
  RANK_OK(self, pstate_mem_query(world, a, &ia));
  RANK_OK(self, pstate_mem_query(world, b, &ib));
  /* the budget admits the first window only; every other way, none */
  RANK_CHECK(self, ia.kind == PSTATE_MEM_GROUP && ia.symmetric == (how == BUDGET) && ib.symmetric == 0,
             "fallback %d: a symmetric %d, b symmetric %d", how, ia.symmetric, ib.symmetric);
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  RANK_OK(self, pstate_group_mem_stats(world, &st));
  RANK_CHECK(self, st.windows == (how == BUDGET ? 1u : 0u) && st.nccl_version == (how == OLD_NCCL ? 22605 : st.nccl_version),
             "windows %zu, NCCL %d", st.windows, st.nccl_version);
  if (how != BUDGET) RANK_CHECK(self, st.symmetric_available == 0, "symmetric_available %d", st.symmetric_available);
  float *c = b; /* 8192 bytes: COUNT floats fit */
  if (all_reduce_exact(self, world, c, n, s)) return 1;
  if (expect_path(self, world, PSTATE_MEM_PATH_PLAIN, 1)) return 1;
  RANK_OK(self, pstate_mem_free(world, a));
  RANK_OK(self, pstate_mem_free(world, b));
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* ---- disagreement -------------------------------------------------------------------------- */

static int disagreement(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  void *p = (void *)1;
  RANK_STATUS(self, pstate_mem_alloc(world, self->rank == 1 ? 8192 : 4096, &p), PSTATE_ERR_MISMATCH, "8192 bytes");
  RANK_CHECK(self, p == NULL && strstr(pstate_last_error(), "4096 bytes") != NULL, "both sizes named: %s",
             pstate_last_error());
  RANK_STATUS(self, pstate_mem_pool_reserve(world, self->rank == 0 ? 1024 : 2048), PSTATE_ERR_MISMATCH, "disagree");
  /* the group goes on: agreeing sizes work, and freeing different allocations is refused */
  void *q = NULL, *r = NULL;
  RANK_OK(self, pstate_mem_alloc(world, 4096, &p));
  RANK_OK(self, pstate_mem_alloc(world, 8192, &q));
  RANK_STATUS(self, pstate_mem_free(world, self->rank == 0 ? p : q), PSTATE_ERR_MISMATCH, "disagree");
  RANK_OK(self, pstate_mem_free(world, q));
  RANK_OK(self, pstate_mem_alloc(world, 4096, &r));
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  RANK_OK(self, pstate_group_mem_stats(world, &st));
  RANK_CHECK(self, st.allocated == 8192 && st.windows == 2, "%zu bytes in %zu windows", st.allocated, st.windows);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* ---- capture with registered buffers -------------------------------------------------------- */

static int capture(const pstate_test_rank_t *self) {
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  mem_counts_t c0, c1;
  read_counts(&c0);
  /* user registration: the same allocation twice is one NCCL registration */
  float *u = devsim_device_copy(NULL, 4 * COUNT * sizeof(float));
  RANK_OK(self, pstate_mem_register(world, u, 4 * COUNT * sizeof(float)));
  RANK_OK(self, pstate_mem_register(world, u + COUNT, COUNT * sizeof(float)));
  RANK_STATUS(self, pstate_mem_register(world, u + 3 * COUNT, 2 * COUNT * sizeof(float)), PSTATE_ERR_INVALID_ARGUMENT,
              "");
  if (all_reduce_exact(self, world, u, n, s)) return 1; /* makes the communicator: registered then */
  if (expect_path(self, world, n > 1 ? PSTATE_MEM_PATH_REGISTERED : PSTATE_MEM_PATH_PLAIN, 1)) return 1;
  read_counts(&c1);
  RANK_CHECK(self, c1.buf_reg - c0.buf_reg == (n > 1 ? 1u : 0u) && c1.registered - c0.registered == (n > 1 ? 1u : 0u),
             "%llu registrations, %llu registered collectives", c1.buf_reg - c0.buf_reg, c1.registered - c0.registered);
  RANK_OK(self, pstate_mem_deregister(world, u));
  RANK_OK(self, pstate_mem_deregister(world, u));
  RANK_STATUS(self, pstate_mem_deregister(world, u), PSTATE_ERR_INVALID_ARGUMENT, "no registration");
  read_counts(&c1);
  RANK_CHECK(self, c1.buf_dereg - c0.buf_dereg == (n > 1 ? 1u : 0u), "%llu deregistrations", c1.buf_dereg - c0.buf_dereg);

  /* graph buffers: three captured all_reduces on two halves of one buffer, registered at capture end */
  RANK_OK(self, pstate_set_graph_registration(ps, 1));
  float *g = devsim_device_copy(NULL, 2 * COUNT * sizeof(float));
  void *cs = NULL;
  RANK_OK(self, pstate_graph_capture_begin(ps, s, &cs));
  RANK_CHECK(self, cudaStreamBeginCapture((cudaStream_t)cs, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
  RANK_OK(self, pstate_all_reduce(world, g, g, COUNT, PSTATE_FLOAT32, PSTATE_SUM, cs));
  RANK_OK(self, pstate_all_reduce(world, g + COUNT, g + COUNT, COUNT, PSTATE_FLOAT32, PSTATE_SUM, cs));
  RANK_OK(self, pstate_all_reduce(world, g, g, COUNT, PSTATE_FLOAT32, PSTATE_SUM, cs));
  cudaGraph_t graph = NULL;
  RANK_CHECK(self, cudaStreamEndCapture((cudaStream_t)cs, &graph) == cudaSuccess, "end capture");
  RANK_OK(self, pstate_graph_capture_end(ps));
  pstate_mem_info_t info = PSTATE_MEM_INFO_INIT;
  RANK_OK(self, pstate_mem_query(world, g + COUNT + 5, &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_REGISTERED && info.base == g && info.size == 2 * COUNT * sizeof(float) &&
                       info.registered == (n > 1),
             "graph buffer: kind %d base %p size %zu registered %d", (int)info.kind, info.base, info.size,
             info.registered);
  mem_counts_t c2;
  read_counts(&c2);
  RANK_CHECK(self, c2.buf_reg - c1.buf_reg == (n > 1 ? 1u : 0u), "graph buffers: %llu registrations, expected one range",
             c2.buf_reg - c1.buf_reg);
  cudaGraphExec_t exec = NULL;
  RANK_CHECK(self, cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
  for (int replay = 0; replay < 2; ++replay) {
    RANK_CHECK(self, fill(g, self->rank, 2 * COUNT, 0) == 0, "fill");
    RANK_CHECK(self, cudaGraphLaunch(exec, s) == cudaSuccess, "launch");
    float *h = malloc(2 * COUNT * sizeof *h);
    RANK_CHECK(self, devsim_to_host(h, g, 2 * COUNT * sizeof *h, s) == 0, "copy back");
    for (size_t i = 0; i < 2 * COUNT; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += input(r, i);
      if (i < COUNT) want *= (float)n; /* the first half is reduced twice */
      RANK_CHECK(self, h[i] == want, "replay %d [%zu] = %g, expected %g", replay, i, h[i], want);
    }
    free(h);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  RANK_OK(self, pstate_mem_deregister(world, g));

  /* symmetric memory in a capture: refused on NCCL < 2.30.7 (the stand-in says 2.28 unless told) */
  if (n > 1) {
    float *m = NULL;
    RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&m));
    RANK_OK(self, pstate_graph_capture_begin(ps, s, &cs));
    RANK_CHECK(self, cudaStreamBeginCapture((cudaStream_t)cs, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
    RANK_STATUS(self, pstate_all_reduce(world, m, m, COUNT, PSTATE_FLOAT32, PSTATE_SUM, cs), PSTATE_ERR_UNSUPPORTED,
                "2.30.7");
    RANK_CHECK(self, cudaStreamEndCapture((cudaStream_t)cs, &graph) == cudaSuccess, "end capture");
    cudaGraphDestroy(graph);
    RANK_OK(self, pstate_graph_capture_end(ps));
    setenv("DEVSIM_NCCL_VERSION", "2.30.7", 1); /* the stand-in now says 2.30.7 ... */
    pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
    RANK_OK(self, pstate_group_mem_stats(world, &st));
    RANK_CHECK(self, st.nccl_version < 23007, "pstate read the version at load: %d", st.nccl_version);
    unsetenv("DEVSIM_NCCL_VERSION");
    RANK_OK(self, pstate_mem_free(world, m));
  }
  cudaFree(u);
  cudaFree(g);
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* NCCL 2.30.7: symmetric memory captured into a graph, replayed exact */
static int capture_symmetric(const pstate_test_rank_t *self) {
  setenv("DEVSIM_NCCL_VERSION", "2.30.7", 1);
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float *m = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&m));
  void *cs = NULL;
  RANK_OK(self, pstate_graph_capture_begin(ps, s, &cs));
  RANK_CHECK(self, cudaStreamBeginCapture((cudaStream_t)cs, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
  RANK_OK(self, pstate_all_reduce(world, m, m, COUNT, PSTATE_FLOAT32, PSTATE_SUM, cs));
  cudaGraph_t graph = NULL;
  RANK_CHECK(self, cudaStreamEndCapture((cudaStream_t)cs, &graph) == cudaSuccess, "end capture");
  RANK_OK(self, pstate_graph_capture_end(ps));
  cudaGraphExec_t exec = NULL;
  RANK_CHECK(self, cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
  mem_counts_t c0, c1;
  read_counts(&c0);
  RANK_CHECK(self, fill(m, self->rank, COUNT, 0) == 0, "fill");
  RANK_CHECK(self, cudaGraphLaunch(exec, s) == cudaSuccess, "launch");
  float h[COUNT];
  RANK_CHECK(self, devsim_to_host(h, m, sizeof h, s) == 0, "copy back");
  for (size_t i = 0; i < COUNT; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += input(r, i);
    RANK_CHECK(self, h[i] == want, "replay [%zu] = %g, expected %g", i, h[i], want);
  }
  read_counts(&c1);
  if (expect_path(self, world, PSTATE_MEM_PATH_SYMMETRIC, 1)) return 1;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* ---- shrink with windows ------------------------------------------------------------------- */

#define VICTIM 2

static void *die_soon(void *arg) {
  (void)arg;
  usleep(300);
  kill(getpid(), SIGKILL);
  return NULL;
}

static int shrink_with_windows(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 5000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float *m = NULL, *p = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&m));
  RANK_OK(self, pstate_mem_pool_reserve(world, 16 * 1024));
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&p)); /* from the pool */
  pstate_status_t st = PSTATE_OK;
  for (int iter = 0; st == PSTATE_OK; ++iter) {
    if (self->rank == VICTIM && iter == 20) {
      pthread_t t;
      pthread_create(&t, NULL, die_soon, NULL);
    }
    st = pstate_all_reduce(world, m, m, COUNT, PSTATE_FLOAT32, PSTATE_MAX, s);
    double t = pstate_test_now_ms();
    while (st == PSTATE_OK && cudaStreamQuery(s) == cudaErrorNotReady && pstate_test_now_ms() - t < 50) usleep(200);
  }
  RANK_CHECK(self, self->rank != VICTIM, "the victim lived on");
  RANK_CHECK(self, st == PSTATE_ERR_PEER_LOST || st == PSTATE_ERR_ABORTED, "%s: %s", pstate_status_string(st),
             pstate_last_error());
  mem_counts_t c0, c1;
  read_counts(&c0);
  int new_rank[3];
  RANK_OK(self, pstate_shrink(ps, new_rank, 3, &(size_t){0}));
  read_counts(&c1);
  /* both allocations (the block and the reserve) registered again, on the shrunk communicator */
  RANK_CHECK(self, c1.win_reg - c0.win_reg == 2, "%llu windows registered at the shrink, expected 2",
             c1.win_reg - c0.win_reg);
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  pstate_mem_stats_t ms = PSTATE_MEM_STATS_INIT;
  RANK_OK(self, pstate_group_mem_stats(world, &ms));
  const uint64_t symmetric_before = ms.symmetric_calls; /* counted before the shrink too */
  pstate_mem_info_t info = PSTATE_MEM_INFO_INIT;
  RANK_OK(self, pstate_mem_query(world, m, &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_GROUP && info.symmetric == 1, "after the shrink: kind %d symmetric %d",
             (int)info.kind, info.symmetric);
  RANK_OK(self, pstate_mem_query(world, p, &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_POOL && info.symmetric == 1, "pool piece after the shrink: kind %d symmetric %d",
             (int)info.kind, info.symmetric);
  /* exact on the 2 survivors, whose new ranks are their inputs' ranks */
  float h[COUNT];
  for (float *buf = m; buf != NULL; buf = buf == m ? p : NULL) {
    for (size_t i = 0; i < COUNT; ++i) h[i] = input(new_rank[self->rank], i);
    RANK_CHECK(self, cudaMemcpy(buf, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess, "fill");
    RANK_OK(self, pstate_all_reduce(world, buf, buf, COUNT, PSTATE_FLOAT32, PSTATE_SUM, s));
    RANK_CHECK(self, devsim_to_host(h, buf, sizeof h, s) == 0, "copy back");
    for (size_t i = 0; i < COUNT; ++i)
      RANK_CHECK(self, h[i] == input(0, i) + input(1, i), "after the shrink [%zu] = %g", i, h[i]);
  }
  if (expect_path(self, world, PSTATE_MEM_PATH_SYMMETRIC, symmetric_before + 2)) return 1;
  void *q = NULL;
  RANK_OK(self, pstate_mem_alloc(world, 1000, &q)); /* the pool survived: still local */
  RANK_OK(self, pstate_group_mem_stats(world, &ms));
  RANK_CHECK(self, ms.pool_reserved == 16 * 1024 && ms.windows == 2, "pool %zu, windows %zu", ms.pool_reserved,
             ms.windows);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* ---- refusals and the pool's first piece (issue 44) ---------------------------------------- */

/* arg of the three below: 1 = every operation over UCX (PSTATE_SHM=0), 0 = shared memory */
static void choose_transport(const pstate_test_rank_t *self) {
  if (self->arg != NULL && *(const int *)self->arg) setenv("PSTATE_SHM", "0", 1);
}

#define REFUSED "refused its part of this call"
#define PAST_2_47 (((size_t)1 << 47) + 1)

static int expect_held(const pstate_test_rank_t *self, pstate_group_t *g, size_t allocated, size_t reserved,
                         size_t used) {
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  RANK_OK(self, pstate_group_mem_stats(g, &st));
  RANK_CHECK(self, st.allocated == allocated && st.pool_reserved == reserved && st.pool_used == used,
             "%zu bytes allocated (want %zu), pool %zu reserved (want %zu), %zu used (want %zu)", st.allocated,
             allocated, st.pool_reserved, reserved, st.pool_used, used);
  return 0;
}

/* The pool's first piece starts at the reserve's address: pstate_mem_free of it frees that piece
 * only, locally, whether every rank frees it or one alone; the reserve, its window and the other
 * pieces stay. */
static int pool_first_piece(const pstate_test_rank_t *self) {
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  RANK_OK(self, pstate_mem_pool_reserve(world, RESERVE));
  float *a = NULL, *b = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&a));
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&b));
  pstate_mem_info_t info = PSTATE_MEM_INFO_INIT;
  RANK_OK(self, pstate_mem_query(world, a, &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_POOL && info.base == a, "the first piece: kind %d", (int)info.kind);
  /* every rank frees its first piece: the piece goes, nothing else */
  RANK_OK(self, pstate_mem_free(world, a));
  if (expect_held(self, world, RESERVE, RESERVE, 4096)) return 1;
  RANK_OK(self, pstate_mem_query(world, b, &info));
  RANK_CHECK(self, info.kind == PSTATE_MEM_POOL && info.base == b && info.symmetric == (n > 1),
             "b after freeing a: kind %d symmetric %d", (int)info.kind, info.symmetric);
  if (all_reduce_exact(self, world, b, n, s)) return 1;
  /* the first piece again (first fit), freed by rank 0 alone: local, the group goes on */
  float *again = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&again));
  RANK_CHECK(self, again == a, "first fit gave %p, expected the reserve's start %p", (void *)again, (void *)a);
  if (self->rank == 0) {
    RANK_OK(self, pstate_mem_free(world, again));
    /* the reserve's address without a piece there: a pool pointer, refused locally */
    RANK_STATUS(self, pstate_mem_free(world, again), PSTATE_ERR_INVALID_ARGUMENT, "not the start of a live allocation");
  }
  if (all_reduce_exact(self, world, b, n, s)) return 1;
  if (expect_held(self, world, RESERVE, RESERVE, self->rank == 0 ? 4096u : 8192u)) return 1;
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* pstate_mem_free of a pointer that is no group memory on one rank: INVALID_ARGUMENT on every rank
 * (the others name the refusing rank), nothing freed anywhere, the group goes on. */
static int foreign_free(const pstate_test_rank_t *self) {
  choose_transport(self);
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float *a = NULL, *b = NULL;
  float *plain = devsim_device_copy(NULL, COUNT * sizeof(float));
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&a));
  const int bad = n - 1; /* the rank with the wrong pointer */
  RANK_STATUS(self, pstate_mem_free(world, self->rank == bad ? plain : a), PSTATE_ERR_INVALID_ARGUMENT,
              self->rank == bad ? "not the start of group memory" : REFUSED);
  if (expect_held(self, world, 4096, 0, 0)) return 1;
  /* a pointer into an allocation, not its start */
  RANK_STATUS(self, pstate_mem_free(world, self->rank == bad ? a + 1 : a), PSTATE_ERR_INVALID_ARGUMENT,
              self->rank == bad ? "not the start of group memory" : REFUSED);
  if (all_reduce_exact(self, world, a, n, s)) return 1;
  /* two allocations of one size: ranks freeing different ones disagree (MISMATCH), nothing freed */
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&b));
  RANK_STATUS(self, pstate_mem_free(world, self->rank == bad ? b : a), PSTATE_ERR_MISMATCH, "allocation #");
  if (expect_held(self, world, 8192, 0, 0)) return 1;
  RANK_OK(self, pstate_mem_free(world, a));
  /* with a pool: a collective allocation from before it, and a foreign pointer on one rank */
  RANK_OK(self, pstate_mem_pool_reserve(world, RESERVE));
  RANK_STATUS(self, pstate_mem_free(world, self->rank == bad ? plain : b), PSTATE_ERR_INVALID_ARGUMENT,
              self->rank == bad ? "not the start of group memory" : REFUSED);
  if (expect_held(self, world, 4096 + RESERVE, RESERVE, 0)) return 1;
  if (all_reduce_exact(self, world, b, n, s)) return 1;
  RANK_OK(self, pstate_mem_free(world, b));
  if (expect_held(self, world, RESERVE, RESERVE, 0)) return 1;
  cudaFree(plain);
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* pstate_mem_alloc and pstate_mem_pool_reserve refused on one rank (0 bytes, past 2^47, out NULL):
 * INVALID_ARGUMENT on every rank, nothing allocated, and each rank's next call pairs with the
 * others' next call. With a pool, allocation is local and so is its refusal. */
static int refused_alloc(const pstate_test_rank_t *self) {
  choose_transport(self);
  const int n = self->world_size, bad = n - 1, me_bad = self->rank == bad;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 30000, &ps));
  pstate_group_t *world = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *p = (void *)1;
  RANK_STATUS(self, pstate_mem_alloc(world, me_bad ? 0 : 4096, &p), PSTATE_ERR_INVALID_ARGUMENT,
              me_bad ? "bytes is 0" : REFUSED);
  RANK_CHECK(self, p == NULL, "out is NULL after a refusal");
  RANK_STATUS(self, pstate_mem_alloc(world, me_bad ? PAST_2_47 : 4096, &p), PSTATE_ERR_INVALID_ARGUMENT,
              me_bad ? "2^47" : REFUSED);
  RANK_STATUS(self, pstate_mem_alloc(world, 4096, me_bad ? NULL : &p), PSTATE_ERR_INVALID_ARGUMENT,
              me_bad ? "out" : REFUSED);
  if (expect_held(self, world, 0, 0, 0)) return 1;
  float *x = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&x));
  if (expect_held(self, world, 4096, 0, 0)) return 1;
  RANK_STATUS(self, pstate_mem_pool_reserve(world, me_bad ? 0 : RESERVE), PSTATE_ERR_INVALID_ARGUMENT,
              me_bad ? "bytes is 0" : REFUSED);
  RANK_STATUS(self, pstate_mem_pool_reserve(world, me_bad ? PAST_2_47 : RESERVE), PSTATE_ERR_INVALID_ARGUMENT,
              me_bad ? "2^47" : REFUSED);
  if (expect_held(self, world, 4096, 0, 0)) return 1;
  RANK_OK(self, pstate_mem_pool_reserve(world, RESERVE));
  if (me_bad) { /* local now: the others make no call */
    RANK_STATUS(self, pstate_mem_alloc(world, 0, &p), PSTATE_ERR_INVALID_ARGUMENT, "bytes is 0");
    RANK_STATUS(self, pstate_mem_alloc(world, 4096, NULL), PSTATE_ERR_INVALID_ARGUMENT, "out");
  }
  float *piece = NULL;
  RANK_OK(self, pstate_mem_alloc(world, COUNT * sizeof(float), (void **)&piece));
  if (all_reduce_exact(self, world, piece, n, s)) return 1;
  if (all_reduce_exact(self, world, x, n, s)) return 1;
  if (expect_held(self, world, 4096 + RESERVE, RESERVE, 4096)) return 1;
  cudaStreamDestroy(s);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* ---- the tests ----------------------------------------------------------------------------- */

static void test_allocation_symmetric_exact_1_to_4_processes(void **state) {
  (void)state;
  for (int n = 1; n <= 4; ++n) assert_int_equal(pstate_test_run_processes(n, 60, allocation, NULL, NULL), 0);
}
static void test_pool_allocations_are_local_and_run_out_naming_the_reserve(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(1, 60, pool, NULL, NULL), 0);
  assert_int_equal(pstate_test_run_processes(3, 60, pool, NULL, NULL), 0);
}
static void test_fallback_when_nccl_refuses_or_is_old_or_out_of_budget(void **state) {
  (void)state;
  for (int how = REFUSE_ALL; how <= BUDGET; ++how)
    assert_int_equal(pstate_test_run_processes(how == REFUSE_RANK1 ? 3 : 2, 60, fallback, &how, NULL), 0);
}
static void test_size_disagreement_is_mismatch_on_every_rank(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 60, disagreement, NULL, NULL), 0);
}
static void test_capture_registers_graph_buffers_once_and_replays_exact(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(1, 60, capture, NULL, NULL), 0);
  assert_int_equal(pstate_test_run_processes(2, 60, capture, NULL, NULL), 0);
}
static void test_symmetric_memory_captured_on_nccl_2_30_7_replays_exact(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 60, capture_symmetric, NULL, NULL), 0);
}
static void test_shrink_carries_windows_and_pool_to_the_survivors(void **state) {
  (void)state;
  int statuses[3];
  pstate_test_job_t job = {3, 120, shrink_with_windows, NULL, statuses, 1, 1ul << VICTIM, 0, -1, 0};
  assert_int_equal(pstate_test_run_job(&job), 0);
}

static void test_pool_first_piece_frees_itself_only_on_any_ranks(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, pool_first_piece, NULL, NULL), 0);
}
static void test_foreign_free_on_one_rank_is_invalid_argument_on_every_rank(void **state) {
  (void)state;
  for (int ucx = 0; ucx <= 1; ++ucx) /* shared memory at 2 ranks, UCX at 3 */
    assert_int_equal(pstate_test_run_processes(2 + ucx, 60, foreign_free, &ucx, NULL), 0);
}
static void test_alloc_refused_on_one_rank_is_invalid_argument_on_every_rank(void **state) {
  (void)state;
  for (int ucx = 0; ucx <= 1; ++ucx) /* shared memory at 2 ranks, UCX at 3 */
    assert_int_equal(pstate_test_run_processes(2 + ucx, 60, refused_alloc, &ucx, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allocation_symmetric_exact_1_to_4_processes),
      cmocka_unit_test(test_pool_allocations_are_local_and_run_out_naming_the_reserve),
      cmocka_unit_test(test_fallback_when_nccl_refuses_or_is_old_or_out_of_budget),
      cmocka_unit_test(test_size_disagreement_is_mismatch_on_every_rank),
      cmocka_unit_test(test_capture_registers_graph_buffers_once_and_replays_exact),
      cmocka_unit_test(test_symmetric_memory_captured_on_nccl_2_30_7_replays_exact),
      cmocka_unit_test(test_shrink_carries_windows_and_pool_to_the_survivors),
      cmocka_unit_test(test_pool_first_piece_frees_itself_only_on_any_ranks),
      cmocka_unit_test(test_foreign_free_on_one_rank_is_invalid_argument_on_every_rank),
      cmocka_unit_test(test_alloc_refused_on_one_rank_is_invalid_argument_on_every_rank),
  };
  if (getenv("PSTATE_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("PSTATE_TEST_FILTER")); /* e.g. "*refused*" */
  return cmocka_run_group_tests(tests, NULL, NULL);
}
