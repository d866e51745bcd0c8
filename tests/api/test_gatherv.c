/*
 * test_gatherv.c — pstate_all_gatherv and pstate_reduce_scatterv (variable counts per rank)
 * through the public API, on real processes (1, 2, 3 and 4 ranks, over shared memory and over
 * UCX with PSTATE_SHM=0) and as threads of one process (3 ranks).
 *
 * Counts arrays (every rank passes the same): uneven without zeros; every other rank empty
 * (group rank 0 among them); one rank only; all zero; and one large part (70001 elements, past
 * the ring's 256 KiB chunk in float32, so the pipelined steps run). all_gatherv: every dtype (fp8
 * included: data movement compares bytes) x every pattern, then the in-place form (send == recv
 * + this rank's offset); a rank with an empty part passes send NULL in half of the calls.
 * reduce_scatterv: every reducible dtype x every op x the small patterns, the large one for a
 * few, then the in-place form (recv == send + this rank's offset); a rank with an empty part
 * passes recv NULL in half of the calls. Inputs are small integers, so every exact result is
 * representable in every dtype; the reference is computed here by walking the ranks (float AVG
 * with one rounding's tolerance). recv is followed by a sentinel that must stay, and send (out
 * of place) must come back unchanged. The dlopen table's two new members reach the same
 * functions and work. Around the shared-memory switch to copies by reference (opt-in; largest part 32 KiB
 * in float32, below and above, and 2 MiB), with every rank holding the largest part in turn, in
 * place and not; and the same where one rank refuses references (PSTATE_SHM_CMA=0), so the group
 * stages instead (see switch_rank).
 *
 * Errors: counts NULL, counts whose sum overflows size_t, a sum whose bytes overflow or pass
 * 2^47 -> INVALID_ARGUMENT on every rank, before any message (the context stays usable); ranks
 * that pass different counts arrays (the same total cut differently, or another total) ->
 * MISMATCH on every rank naming the call and both sides: under PSTATE_CHECK=1 (shared memory and
 * UCX; the context stays usable and the next call works), over UCX without it (the descriptor
 * exchange), and in shared memory without it (the always-on agreement there, which fails the
 * context), where an all_gatherv against an all_gather is a MISMATCH too. The flight recorder's
 * dump of rank 0 names the failed calls all_gatherv / reduce_scatterv with their totals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "files.h"
#include "ranks.h"
#include "values.h"

static const pstate_dtype_t kReducible[] = {PSTATE_INT8,  PSTATE_UINT8,   PSTATE_INT32,   PSTATE_UINT32,
                                            PSTATE_INT64, PSTATE_UINT64,  PSTATE_FLOAT16, PSTATE_FLOAT32,
                                            PSTATE_FLOAT64, PSTATE_BFLOAT16};
#define N_REDUCIBLE (sizeof kReducible / sizeof kReducible[0])
#define MAX_RANKS 4
#define N_PATTERNS 5   /* the last one is the large one */
#define LARGE 70001
#define MAX_TOTAL (LARGE + LARGE / 3 + 2 * MAX_RANKS * MAX_RANKS)
#define SENTINEL 0x5a

/* counts[i] of pattern `pattern` for a group of n. */
static void fill_counts(int pattern, int n, size_t *counts) {
  for (int i = 0; i < n; ++i) {
    switch (pattern) {
      case 0: counts[i] = (size_t)(3 * i + 1); break;           /* uneven, no zeros */
      case 1: counts[i] = i % 2 == 0 ? 0 : (size_t)(5 + i); break; /* every other rank empty, rank 0 too */
      case 2: counts[i] = i == n - 1 ? 1000 : 0; break;          /* one rank only */
      case 3: counts[i] = 0; break;                              /* all empty */
      /* two large parts of different lengths (staged in shared memory: the shorter one runs out
         steps before the other) and small ones */
      default: counts[i] = i == 0 ? LARGE : i == n - 1 ? LARGE / 3 : (size_t)(2 * i); break;
    }
  }
}

static size_t offset_of(const size_t *counts, int r) {
  size_t off = 0;
  for (int i = 0; i < r; ++i) off += counts[i];
  return off;
}

/* Byte j of group rank r's all_gatherv part (below 0x78: finite in both fp8 formats too). */
static uint8_t part_byte(int r, int call, size_t j) { return (uint8_t)((r * 31 + call * 7 + (int)j) % 0x78); }

/* Inputs and references: tests/support/values.h (pstate_test_reduce_*). */

static int untouched(const unsigned char *p, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != SENTINEL) return 0;
  return 1;
}

/* ---- the data checks ------------------------------------------------------------------------ */

/* One all_gatherv of the given counts (pattern: a number for messages), checked byte by byte. */
static int check_all_gatherv_counts(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d,
                                    const size_t *counts, int pattern, int in_place, int call, unsigned char *send,
                                    unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  const size_t es = pstate_dtype_size(d), total = offset_of(counts, n) * es, off = offset_of(counts, me) * es;
  const size_t mine = counts[me] * es;
  memset(recv, SENTINEL, total + 8);
  for (size_t j = 0; j < mine; ++j) send[j] = part_byte(me, call, j);
  const void *src = send;
  if (in_place) {
    memcpy(recv + off, send, mine);
    src = recv + off;
  } else if (mine == 0 && call % 2) {
    src = NULL;
  }
  RANK_OK(self, pstate_all_gatherv(g, src, recv, counts, d, NULL));
  for (int r = 0, at = 0; r < n; at += (int)counts[r], ++r)
    for (size_t j = 0; j < counts[r] * es; ++j) {
      const unsigned char got = recv[(size_t)at * es + j];
      RANK_CHECK(self, got == part_byte(r, call, j), "all_gatherv %s pattern %d%s: byte %zu of rank %d's part is %u, want %u",
                 pstate_dtype_name(d), pattern, in_place ? " in place" : "", j, r, got, part_byte(r, call, j));
    }
  RANK_CHECK(self, untouched(recv + total, 8), "all_gatherv %s pattern %d wrote past recv", pstate_dtype_name(d), pattern);
  if (!in_place)
    for (size_t j = 0; j < mine; ++j) RANK_CHECK(self, send[j] == part_byte(me, call, j), "all_gatherv changed send");
  return 0;
}

static int check_all_gatherv(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d, int pattern,
                             int in_place, int call, unsigned char *send, unsigned char *recv) {
  size_t counts[MAX_RANKS];
  fill_counts(pattern, self->world_size, counts);
  return check_all_gatherv_counts(self, g, d, counts, pattern, in_place, call, send, recv);
}

static int check_reduce_scatterv(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d,
                                 pstate_reduce_op_t op, int pattern, int in_place, int call, unsigned char *send,
                                 unsigned char *recv) {
  const int n = self->world_size, me = self->rank;
  size_t counts[MAX_RANKS];
  fill_counts(pattern, n, counts);
  const size_t es = pstate_dtype_size(d), total = offset_of(counts, n), off = offset_of(counts, me);
  for (size_t i = 0; i < total; ++i) pstate_test_store(d, send, i, pstate_test_reduce_input(d, op, me, i));
  memset(recv, SENTINEL, counts[me] * es + 8);
  void *dst = in_place ? send + off * es : (counts[me] == 0 && call % 2) ? NULL : recv;
  RANK_OK(self, pstate_reduce_scatterv(g, send, dst, counts, d, op, NULL));
  const unsigned char *result = in_place ? send + off * es : recv;
  for (size_t i = 0; i < counts[me]; ++i) {
    double got = pstate_test_load(d, result, i), want = pstate_test_reduce_reference(d, op, n, off + i);
    RANK_CHECK(self, pstate_test_reduce_close_enough(d, op, got, want), "reduce_scatterv %s %s pattern %d%s [%zu]: got %g want %g",
               pstate_dtype_name(d), pstate_reduce_op_name(op), pattern, in_place ? " in place" : "", i, got, want);
  }
  if (!in_place) RANK_CHECK(self, untouched(recv + counts[me] * es, 8), "reduce_scatterv wrote past recv");
  for (size_t i = 0; i < total; ++i) {
    if (in_place && i >= off && i < off + counts[me]) continue;
    RANK_CHECK(self, pstate_test_load(d, send, i) == pstate_test_reduce_input(d, op, me, i), "reduce_scatterv %s %s pattern %d: send[%zu] changed",
               pstate_dtype_name(d), pstate_reduce_op_name(op), pattern, i);
  }
  return 0;
}

typedef struct job_t {
  int threads; /* 1: ranks are threads (the parent set the environment) */
} job_t;

static int data_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  unsigned char *send = malloc((size_t)MAX_TOTAL * 8 + 8), *recv = malloc((size_t)MAX_TOTAL * 8 + 8);
  RANK_CHECK(self, send != NULL && recv != NULL, "malloc");
  int call = 0;
  for (int d = 0; d < PSTATE_DTYPE_COUNT; ++d)
    for (int pattern = 0; pattern < N_PATTERNS; ++pattern, ++call)
      if (check_all_gatherv(self, g, (pstate_dtype_t)d, pattern, 0, call, send, recv)) return 1;
  for (int pattern = 0; pattern < N_PATTERNS; ++pattern, ++call)
    if (check_all_gatherv(self, g, PSTATE_INT32, pattern, 1, call, send, recv)) return 1;
  for (size_t di = 0; di < N_REDUCIBLE; ++di)
    for (int op = 0; op < PSTATE_REDUCE_OP_COUNT; ++op)
      for (int pattern = 0; pattern < N_PATTERNS - 1; ++pattern, ++call)
        if (check_reduce_scatterv(self, g, kReducible[di], (pstate_reduce_op_t)op, pattern, 0, call, send, recv))
          return 1;
  const pstate_dtype_t large[] = {PSTATE_FLOAT32, PSTATE_INT32, PSTATE_BFLOAT16};
  const pstate_reduce_op_t large_op[] = {PSTATE_SUM, PSTATE_MAX, PSTATE_AVG};
  for (int k = 0; k < 3; ++k, ++call)
    if (check_reduce_scatterv(self, g, large[k], large_op[k], N_PATTERNS - 1, 0, call, send, recv)) return 1;
  for (int pattern = 0; pattern < N_PATTERNS; ++pattern, ++call) {
    if (check_reduce_scatterv(self, g, PSTATE_FLOAT32, PSTATE_SUM, pattern, 1, call, send, recv)) return 1;
    if (check_reduce_scatterv(self, g, PSTATE_INT64, PSTATE_MIN, pattern, 1, call, send, recv)) return 1;
  }

  /* The dlopen table reaches the same entry points, and they work through it. */
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  RANK_CHECK(self, api != NULL && api->struct_size >= offsetof(pstate_api_t, reduce_scatterv) + sizeof api->reduce_scatterv,
             "the table has no reduce_scatterv member");
  RANK_CHECK(self, api->all_gatherv == pstate_all_gatherv && api->reduce_scatterv == pstate_reduce_scatterv,
             "table members differ");
  const int n = self->world_size;
  size_t counts[MAX_RANKS];
  int32_t mine[MAX_RANKS], all[MAX_RANKS * MAX_RANKS], sums[MAX_RANKS * MAX_RANKS], part[MAX_RANKS];
  for (int i = 0; i < n; ++i) counts[i] = (size_t)i + 1; /* rank i: i + 1 elements */
  for (int j = 0; j <= self->rank; ++j) mine[j] = 100 * self->rank + j;
  RANK_OK(self, api->all_gatherv(g, mine, all, counts, PSTATE_INT32, NULL));
  for (int r = 0, at = 0; r < n; at += r + 1, ++r)
    for (int j = 0; j <= r; ++j) RANK_CHECK(self, all[at + j] == 100 * r + j, "all_gatherv through the table");
  const size_t total = (size_t)n * (size_t)(n + 1) / 2;
  for (size_t i = 0; i < total; ++i) sums[i] = (int32_t)i + self->rank;
  RANK_OK(self, api->reduce_scatterv(g, sums, part, counts, PSTATE_INT32, PSTATE_SUM, NULL));
  const size_t off = offset_of(counts, self->rank);
  for (int j = 0; j <= self->rank; ++j)
    RANK_CHECK(self, part[j] == n * (int32_t)(off + (size_t)j) + n * (n - 1) / 2, "reduce_scatterv through the table");
  free(send);
  free(recv);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* ---- around the switch to copies by reference ---------------------------------------------------
 * With PSTATE_SHM_GATHERV_CMA_BYTES=32768 (set here; off by default), an all_gatherv in shared
 * memory whose largest part is 32 KiB or more goes by reference (each rank reads its peers' parts
 * from their buffers, shm_group_cma.cpp); below, through the staging areas. Largest parts of 32 KiB - 64, - 4, exactly, + 4 and 2 MiB + 4 bytes in float32, held by
 * each rank in turn, with a small and an empty part beside it, out of place and in place, over 2
 * to 4 processes. refuse_rank >= 0: that rank runs with PSTATE_SHM_CMA=0, so the group's first
 * call by reference finds a rank that may not read, and every call (that one included) must
 * still be right through the staging areas. */
#define BIG_PART ((2u << 20) / 4 + 1)

typedef struct switch_job_t {
  int refuse_rank;
} switch_job_t;

static int switch_rank(const pstate_test_rank_t *self) {
  const switch_job_t *job = self->arg;
  if (self->rank == job->refuse_rank) setenv("PSTATE_SHM_CMA", "0", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const int n = self->world_size;
  const size_t total_max = (size_t)BIG_PART * 4 + 64 * (size_t)n;
  unsigned char *send = malloc(total_max + 8), *recv = malloc(total_max + 8);
  RANK_CHECK(self, send != NULL && recv != NULL, "malloc");
  const size_t largest[] = {8192 - 16, 8192 - 1, 8192, 8192 + 1, BIG_PART};
  int call = 0;
  for (size_t k = 0; k < sizeof largest / sizeof largest[0]; ++k)
    for (int holder = 0; holder < n; ++holder)
      for (int in_place = 0; in_place < 2; ++in_place, ++call) {
        size_t counts[MAX_RANKS];
        for (int r = 0; r < n; ++r)  /* the holder's part, an empty one after it, small ones */
          counts[r] = r == holder ? largest[k] : r == (holder + 1) % n ? 0 : (size_t)(7 * r + 3);
        if (check_all_gatherv_counts(self, g, PSTATE_FLOAT32, counts, 100 + (int)k, in_place, call, send, recv))
          return 1;
      }
  free(send);
  free(recv);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run_switch(int world, int refuse_rank) {
  unsetenv("PSTATE_SHM");
  unsetenv("PSTATE_SHM_CMA");
  setenv("PSTATE_SHM_GATHERV_CMA_BYTES", "32768", 1);  /* off by default (README) */
  switch_job_t job = {refuse_rank};
  const int failed = pstate_test_run_processes(world, 120, switch_rank, &job, NULL);
  unsetenv("PSTATE_SHM_GATHERV_CMA_BYTES");
  assert_int_equal(failed, 0);
}

static void test_gatherv_by_reference_2_ranks(void **s) { (void)s; run_switch(2, -1); }
#if !defined(__SANITIZE_THREAD__) /* see main */
static void test_gatherv_by_reference_3_ranks(void **s) { (void)s; run_switch(3, -1); }
static void test_gatherv_by_reference_4_ranks(void **s) { (void)s; run_switch(4, -1); }
static void test_gatherv_by_reference_refused_by_rank_0(void **s) { (void)s; run_switch(3, 0); }
static void test_gatherv_by_reference_refused_by_last_rank(void **s) { (void)s; run_switch(3, 2); }
#endif

/* The environment is set here, in the parent: forked ranks inherit it and thread ranks share it. */
static void run_data(int world, int ucx, int threads) {
  if (ucx) setenv("PSTATE_SHM", "0", 1);
  else unsetenv("PSTATE_SHM");
  job_t job = {threads};
  int failed = threads ? pstate_test_run_threads(world, 120, data_rank, &job)
                       : pstate_test_run_processes(world, 120, data_rank, &job, NULL);
  unsetenv("PSTATE_SHM");
  assert_int_equal(failed, 0);
}

static void test_gatherv_1_rank(void **s) { (void)s; run_data(1, 0, 0); }
static void test_gatherv_2_ranks_shm(void **s) { (void)s; run_data(2, 0, 0); }
static void test_gatherv_2_ranks_ucx(void **s) { (void)s; run_data(2, 1, 0); }
#if !defined(__SANITIZE_THREAD__) /* see main */
static void test_gatherv_3_ranks_shm(void **s) { (void)s; run_data(3, 0, 0); }
static void test_gatherv_3_ranks_ucx(void **s) { (void)s; run_data(3, 1, 0); }
static void test_gatherv_4_ranks_shm(void **s) { (void)s; run_data(4, 0, 0); }
static void test_gatherv_4_ranks_ucx(void **s) { (void)s; run_data(4, 1, 0); }
#endif
static void test_gatherv_3_threads(void **s) { (void)s; run_data(3, 0, 1); }

/* ---- errors --------------------------------------------------------------------------------- */

/* status must be want and pstate_last_error() must contain every needle given. */
#define RANK_ERR(self, call, want, n1, n2)                                                                      \
  do {                                                                                                        \
    pstate_status_t rank_err_s_ = (call);                                                                     \
    const char *rank_err_m_ = pstate_last_error();                                                            \
    RANK_CHECK(self, rank_err_s_ == (want) && strstr(rank_err_m_, (n1)) != NULL && strstr(rank_err_m_, (n2)) != NULL, \
               "%s -> %s (want %s with '%s' and '%s'): %s", #call, pstate_status_string(rank_err_s_),        \
               pstate_status_string(want), (n1), (n2), rank_err_m_);                                          \
  } while (0)

/* One all_gatherv and one reduce_scatterv with the same good counts on every rank, checked. */
static int good_calls(const pstate_test_rank_t *self, pstate_group_t *g) {
  const int n = self->world_size;
  size_t counts[MAX_RANKS];
  int64_t in[MAX_RANKS * 2], out[MAX_RANKS * 2], part[2];
  for (int i = 0; i < n; ++i) counts[i] = i % 2 ? 2 : 1;
  const size_t total = offset_of(counts, n), off = offset_of(counts, self->rank);
  for (size_t j = 0; j < counts[self->rank]; ++j) part[j] = 10 * self->rank + (int64_t)j;
  RANK_OK(self, pstate_all_gatherv(g, part, out, counts, PSTATE_INT64, NULL));
  for (int r = 0; r < n; ++r)
    for (size_t j = 0; j < counts[r]; ++j)
      RANK_CHECK(self, out[offset_of(counts, r) + j] == 10 * r + (int64_t)j, "all_gatherv after the error");
  for (size_t i = 0; i < total; ++i) in[i] = (int64_t)i;
  RANK_OK(self, pstate_reduce_scatterv(g, in, part, counts, PSTATE_INT64, PSTATE_SUM, NULL));
  for (size_t j = 0; j < counts[self->rank]; ++j)
    RANK_CHECK(self, part[j] == n * (int64_t)(off + j), "reduce_scatterv after the error");
  return 0;
}

static int bad_counts_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  float buf[8] = {0}, out[64] = {0};
  RANK_ERR(self, pstate_all_gatherv(g, buf, out, NULL, PSTATE_FLOAT32, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "pstate_all_gatherv", "counts is NULL");
  RANK_ERR(self, pstate_reduce_scatterv(g, buf, out, NULL, PSTATE_FLOAT32, PSTATE_SUM, NULL),
           PSTATE_ERR_INVALID_ARGUMENT, "pstate_reduce_scatterv", "counts is NULL");
  size_t wraps[2] = {SIZE_MAX, 2}; /* the sum wraps to 1: a small buffer would pass a naive check */
  RANK_ERR(self, pstate_all_gatherv(g, buf, out, wraps, PSTATE_FLOAT32, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "pstate_all_gatherv", "overflows size_t");
  RANK_ERR(self, pstate_reduce_scatterv(g, buf, out, wraps, PSTATE_FLOAT32, PSTATE_SUM, NULL),
           PSTATE_ERR_INVALID_ARGUMENT, "pstate_reduce_scatterv", "overflows size_t");
  size_t bytes_wrap[2] = {SIZE_MAX / 8, SIZE_MAX / 8}; /* the sum fits, its float64 bytes do not */
  RANK_ERR(self, pstate_all_gatherv(g, buf, out, bytes_wrap, PSTATE_FLOAT64, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "counts (their sum)", "overflows size_t");
  RANK_ERR(self, pstate_reduce_scatterv(g, buf, out, bytes_wrap, PSTATE_FLOAT64, PSTATE_MAX, NULL),
           PSTATE_ERR_INVALID_ARGUMENT, "counts (their sum)", "overflows size_t");
  size_t huge[2] = {(size_t)1 << 45, (size_t)1 << 45}; /* 2^46 int32 = 2^48 bytes > 2^47 */
  RANK_ERR(self, pstate_all_gatherv(g, buf, out, huge, PSTATE_INT32, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "counts (their sum)", "2^47");
  RANK_ERR(self, pstate_reduce_scatterv(g, buf, out, huge, PSTATE_INT32, PSTATE_SUM, NULL),
           PSTATE_ERR_INVALID_ARGUMENT, "counts (their sum)", "2^47");
  /* Overlaps other than the in-place forms are refused with the forms named. */
  size_t two[2] = {2, 2};
  float shared[4] = {0};
  RANK_ERR(self, pstate_all_gatherv(g, shared + 1, shared, two, PSTATE_FLOAT32, NULL), PSTATE_ERR_INVALID_ARGUMENT,
           "overlap", "this rank's part of recv");
  RANK_ERR(self, pstate_reduce_scatterv(g, shared, shared + 1, two, PSTATE_FLOAT32, PSTATE_SUM, NULL),
           PSTATE_ERR_INVALID_ARGUMENT, "overlap", "this rank's part of send");
  /* Nothing was sent: the context is usable and the calls work. */
  if (good_calls(self, g)) return 1;
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_bad_counts_are_invalid_argument_on_every_rank(void **s) {
  (void)s;
  unsetenv("PSTATE_SHM");
  assert_int_equal(pstate_test_run_processes(2, 60, bad_counts_rank, NULL, NULL), 0);
}

/* ---- ranks that disagree about the counts ---------------------------------------------------- */

typedef struct mismatch_job_t {
  int kind_vs_all_gather; /* group rank 0 calls all_gatherv, the others all_gather (same total) */
  int context_fails;      /* the shared-memory agreement found it: pstate_abort, not finalize */
  atomic_int *returned;   /* shared page: ranks that have returned from the disagreeing calls */
  size_t scale;           /* every count times this (1000: parts beyond the inline payload, staged) */
} mismatch_job_t;

static int occurrences(const char *haystack, const char *needle) {
  int n = 0;
  for (const char *p = strstr(haystack, needle); p != NULL; p = strstr(p + 1, needle)) ++n;
  return n;
}

/* Rank 0 passes {1, 2, 3, ...}; the others the same total cut differently ({.., 2, 1} reversed),
 * then another total ({.., +1}); every count times job->scale. */
static int mismatch_rank(const pstate_test_rank_t *self) {
  const mismatch_job_t *job = self->arg;
  const int n = self->world_size;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 10000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  RANK_OK(self, pstate_barrier(g));
  size_t mine[MAX_RANKS], reversed[MAX_RANKS], more[MAX_RANKS];
  for (int i = 0; i < n; ++i) {
    mine[i] = ((size_t)i + 1) * job->scale;
    reversed[i] = (size_t)(n - i) * job->scale;
    more[i] = ((size_t)i + 1 + (i == n - 1)) * job->scale;
  }
  const size_t room = 64 * job->scale;
  float *in = calloc(room, sizeof *in), *out = calloc(room, sizeof *out);
  RANK_CHECK(self, in != NULL && out != NULL, "calloc");
  int failed = 0;
  if (job->kind_vs_all_gather) {
    size_t same[MAX_RANKS];
    for (int i = 0; i < n; ++i) same[i] = 2; /* all_gather of 2 elements has the same total */
    pstate_status_t s = self->rank == 0 ? pstate_all_gatherv(g, in, out, same, PSTATE_FLOAT32, NULL)
                                        : pstate_all_gather(g, in, out, 2, PSTATE_FLOAT32, NULL);
    const char *m = pstate_last_error();
    failed = !(s == PSTATE_ERR_MISMATCH && strstr(m, "all_gatherv") && strstr(m, "all_gather "));
    if (failed) fprintf(stderr, "rank %d: all_gatherv vs all_gather -> %s: %s\n", self->rank, pstate_status_string(s), m);
  } else {
    const size_t *variants[2] = {reversed, more};
    for (int v = 0; v < 2 && !failed; ++v) {
      const size_t *counts = self->rank == 0 ? mine : variants[v];
      const size_t off = offset_of(counts, self->rank);
      pstate_status_t s = pstate_all_gatherv(g, in + off, out, counts, PSTATE_FLOAT32, NULL);
      const char *m = pstate_last_error();
      /* Both sides are named: this rank's descriptor and the other one, each with "counts <hash>". */
      if (s != PSTATE_ERR_MISMATCH || occurrences(m, "called all_gatherv") != 2 || occurrences(m, " counts ") != 2 ||
          !strstr(m, self->rank == 0 ? (job->scale == 1 ? "this rank's counts: [1, 2" : "this rank's counts: [1000, 2000")
                                     : "this rank's counts: [")) {
        fprintf(stderr, "rank %d: all_gatherv with counts variant %d -> %s: %s\n", self->rank, v, pstate_status_string(s), m);
        failed = 1;
      }
      if (failed || job->context_fails) break; /* after a shared-memory mismatch every call is ABORTED */
      s = pstate_reduce_scatterv(g, out, in, counts, PSTATE_FLOAT32, PSTATE_SUM, NULL);
      m = pstate_last_error();
      if (s != PSTATE_ERR_MISMATCH || occurrences(m, "called reduce_scatterv") != 2 ||
          occurrences(m, "float32 sum counts ") != 2) {
        fprintf(stderr, "rank %d: reduce_scatterv with counts variant %d -> %s: %s\n", self->rank, v,
                pstate_status_string(s), m);
        failed = 1;
      }
    }
  }
  /* Every rank waits for every other rank's return before leaving, so an early exit cannot turn a
   * peer's MISMATCH into PEER_LOST. */
  atomic_fetch_add(job->returned, 1);
  for (int spin = 0; atomic_load(job->returned) < n && spin < 20000; ++spin) usleep(500);
  free(in);
  free(out);
  if (failed) return 1;
  if (job->context_fails) {
    RANK_ERR(self, pstate_barrier(g), PSTATE_ERR_ABORTED, "", "");
    RANK_OK(self, pstate_abort(ps));
    return 0;
  }
  /* Found by a descriptor exchange before any data moved: the context goes on. */
  if (good_calls(self, g)) return 1;
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* The failed calls' flight-recorder dumps (written on MISMATCH) go to a fresh folder; rank 0's must
 * name them by their own op names, with the total as the count. */
static void run_mismatch(int world, int ucx, int check, int kind_vs_all_gather, size_t scale) {
  if (ucx) setenv("PSTATE_SHM", "0", 1);
  else unsetenv("PSTATE_SHM");
  if (check) setenv("PSTATE_CHECK", "1", 1);
  else unsetenv("PSTATE_CHECK");
  char dir[64] = "/tmp/pstate-test-gatherv.XXXXXX", path[128], cmd[128];
  assert_non_null(mkdtemp(dir));
  setenv("PSTATE_TRACE_DIR", dir, 1);
  atomic_int *returned = mmap(NULL, sizeof *returned, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(returned != MAP_FAILED);
  atomic_init(returned, 0);
  mismatch_job_t job = {kind_vs_all_gather, !ucx && !check, returned, scale};
  int failed = pstate_test_run_processes(world, 60, mismatch_rank, &job, NULL);
  munmap(returned, sizeof *returned);
  unsetenv("PSTATE_SHM");
  unsetenv("PSTATE_CHECK");
  unsetenv("PSTATE_TRACE_DIR");
  snprintf(path, sizeof path, "%s/rank0.pstate-trace", dir);
  char *dump = pstate_test_slurp(path);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  assert_int_equal(failed, 0);
  assert_non_null(dump);
  char want[64];
  const int total = world * (world + 1) / 2 * (int)scale;
  snprintf(want, sizeof want, " all_gatherv %d float32 - - - ", kind_vs_all_gather ? 2 * world : total);
  assert_non_null(strstr(dump, want));
  assert_non_null(strstr(dump, " failed MISMATCH "));
  if (!kind_vs_all_gather && !job.context_fails) {
    snprintf(want, sizeof want, " reduce_scatterv %d float32 sum - - ", total);
    assert_non_null(strstr(dump, want));
  }
  free(dump);
}

static void test_different_counts_are_mismatch_under_check_shm(void **s) { (void)s; run_mismatch(3, 0, 1, 0, 1); }
static void test_different_counts_are_mismatch_under_check_ucx(void **s) { (void)s; run_mismatch(2, 1, 1, 0, 1); }
static void test_different_counts_are_mismatch_over_ucx(void **s) { (void)s; run_mismatch(3, 1, 0, 0, 1); }
static void test_different_counts_are_mismatch_in_shared_memory(void **s) { (void)s; run_mismatch(3, 0, 0, 0, 1); }
/* parts of 4-12 KB: beyond the inline payload, the staged protocol's arrival line finds it */
static void test_different_counts_are_mismatch_in_shared_memory_staged(void **s) { (void)s; run_mismatch(3, 0, 0, 0, 1000); }
static void test_all_gatherv_against_all_gather_is_mismatch(void **s) { (void)s; run_mismatch(2, 0, 0, 1, 1); }

int main(void) {
  /* Under ThreadSanitizer (CI's tsan job runs this file for its threads), the 3- and 4-process
   * sweeps repeat the 2-process ones in more processes (each ~5 s there); the plain and ASan runs
   * take them all. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gatherv_1_rank),
      cmocka_unit_test(test_gatherv_2_ranks_shm),
      cmocka_unit_test(test_gatherv_2_ranks_ucx),
#if !defined(__SANITIZE_THREAD__)
      cmocka_unit_test(test_gatherv_3_ranks_shm),
      cmocka_unit_test(test_gatherv_3_ranks_ucx),
      cmocka_unit_test(test_gatherv_4_ranks_shm),
      cmocka_unit_test(test_gatherv_4_ranks_ucx),
#endif
      cmocka_unit_test(test_gatherv_3_threads),
      cmocka_unit_test(test_gatherv_by_reference_2_ranks),
#if !defined(__SANITIZE_THREAD__)
      cmocka_unit_test(test_gatherv_by_reference_3_ranks),
      cmocka_unit_test(test_gatherv_by_reference_4_ranks),
      cmocka_unit_test(test_gatherv_by_reference_refused_by_rank_0),
      cmocka_unit_test(test_gatherv_by_reference_refused_by_last_rank),
#endif
      cmocka_unit_test(test_bad_counts_are_invalid_argument_on_every_rank),
      cmocka_unit_test(test_different_counts_are_mismatch_under_check_shm),
      cmocka_unit_test(test_different_counts_are_mismatch_under_check_ucx),
      cmocka_unit_test(test_different_counts_are_mismatch_over_ucx),
      cmocka_unit_test(test_different_counts_are_mismatch_in_shared_memory),
      cmocka_unit_test(test_different_counts_are_mismatch_in_shared_memory_staged),
      cmocka_unit_test(test_all_gatherv_against_all_gather_is_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
