/*
 * test_all_to_all_v.c — pstate_all_to_all_v (MPI_Alltoallv's shape: counts and displacements per
 * peer, in elements) through the public API, on real processes: 1 rank, and 2, 3 and 4 ranks over
 * shared memory and over UCX (PSTATE_SHM=0), and 2 ranks under PSTATE_CHECK=1.
 *
 * Counts (what group rank i sends to j; every rank derives the same matrix, so the pairs agree):
 * uneven with zeros scattered over the matrix (self pairs among them); one pair only, large
 * (70001 elements: past UCX's eager sizes); all zero; a checkerboard of empty and 1000-element
 * parts; and large uneven parts everywhere. Displacements: packed in rank order; reversed rank
 * order with gaps of 3 elements; and rotated by the rank (the part of rank me + 1 first) with gaps
 * of 5, on the send and on the recv side independently. Every dtype for the small pattern, a few
 * for the others. The reference is built here, byte by byte: recv starts as a sentinel, every
 * sender's part lands where recv_displs says, gaps and the tail keep the sentinel, and send must
 * come back unchanged. A rank whose counts are all zero passes send / recv NULL in half of the
 * calls. The dlopen table's new member reaches the same function.
 *
 * Errors: ranks whose pair counts disagree (group rank 1 sends 3 to group rank 2, which expects
 * 2) get MISMATCH on every rank naming the pair and both counts, over shared memory, UCX and under
 * PSTATE_CHECK=1, and the context stays usable (a good call follows and is exact); an all_to_all_v
 * against an all_to_all (UCX) is MISMATCH naming both. Refusals of one rank (a NULL array, a
 * displacement + count that overflows, more than 2^47 bytes, a NULL send with a count, recv parts
 * that overlap, send and recv that overlap, a bad dtype) are INVALID_ARGUMENT on every rank, the
 * refusing one naming its argument, the others the refusal; then a good call works.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ranks.h"

#define MAX_RANKS 4
#define N_PATTERNS 5
#define N_LAYOUTS 3
#define LARGE 70001
#define SENTINEL 0xa5

/* What group rank i sends to group rank j (of n) under pattern p: the same on every rank. */
static size_t pair_count(int p, int n, int i, int j) {
  switch (p) {
    case 0: return (size_t)((3 * i + 5 * j + 1) % 7);                   /* uneven, zeros scattered */
    case 1: return i == 0 && j == n - 1 ? LARGE : 0;                     /* one pair only, large */
    case 2: return 0;                                                    /* all empty */
    case 3: return (i + j) % 2 ? 0 : (size_t)(1000 + 7 * i + j);        /* checkerboard */
    default: return (size_t)(20000 + 1000 * i + 37 * j);                /* large everywhere */
  }
}

/* Displacements of n parts of the given counts under layout l, for rank me; returns the extent. */
static size_t place(int l, int n, int me, const size_t *counts, size_t *displs) {
  size_t at = 0;
  for (int k = 0; k < n; ++k) {
    const int j = l == 0 ? k : l == 1 ? n - 1 - k : (me + 1 + k) % n;
    displs[j] = at;
    at += counts[j] + (l == 0 ? 0 : l == 1 ? 3 : 5);
  }
  return at;
}

/* Byte b of the part that rank i sends to rank j in call c. */
static unsigned char part_byte(int i, int j, int c, size_t b) {
  return (unsigned char)((i * 61 + j * 17 + c * 5 + (int)b) % 251);
}

/* One all_to_all_v of pattern p, send layout ls and recv layout lr in dtype d, checked. */
static int check_call(const pstate_test_rank_t *self, pstate_group_t *g, pstate_dtype_t d, int p, int ls, int lr,
                      int call, unsigned char *send, unsigned char *recv, unsigned char *want) {
  const int n = self->world_size, me = self->rank;
  const size_t es = pstate_dtype_size(d);
  size_t sc[MAX_RANKS] = {0}, sd[MAX_RANKS] = {0}, rc[MAX_RANKS] = {0}, rd[MAX_RANKS] = {0};
  for (int j = 0; j < n; ++j) {
    sc[j] = pair_count(p, n, me, j);
    rc[j] = pair_count(p, n, j, me);
  }
  const size_t send_extent = place(ls, n, me, sc, sd) * es, recv_extent = place(lr, n, me, rc, rd) * es;
  memset(send, SENTINEL, send_extent);
  for (int j = 0; j < n; ++j)
    for (size_t b = 0; b < sc[j] * es; ++b) send[sd[j] * es + b] = part_byte(me, j, call, b);
  memset(recv, SENTINEL, recv_extent + 16);
  memset(want, SENTINEL, recv_extent + 16);
  for (int i = 0; i < n; ++i)
    for (size_t b = 0; b < rc[i] * es; ++b) want[rd[i] * es + b] = part_byte(i, me, call, b);
  size_t sent = 0, received = 0;
  for (int j = 0; j < n; ++j) sent += sc[j], received += rc[j];
  const void *src = sent == 0 && call % 2 ? NULL : send;
  void *dst = received == 0 && call % 2 ? NULL : recv;
  RANK_OK(self, pstate_all_to_all_v(g, src, sc, sd, dst, rc, rd, d, NULL));
  for (size_t b = 0; b < recv_extent + 16; ++b)
    RANK_CHECK(self, recv[b] == want[b], "all_to_all_v %s pattern %d layouts %d/%d: recv byte %zu is %u, want %u",
               pstate_dtype_name(d), p, ls, lr, b, recv[b], want[b]);
  for (int j = 0; j < n; ++j)
    for (size_t b = 0; b < sc[j] * es; ++b)
      RANK_CHECK(self, send[sd[j] * es + b] == part_byte(me, j, call, b), "all_to_all_v changed send");
  return 0;
}

static int data_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const size_t room = (size_t)MAX_RANKS * (24000 + LARGE + 64) * 8;
  unsigned char *send = malloc(room), *recv = malloc(room), *want = malloc(room);
  RANK_CHECK(self, send != NULL && recv != NULL && want != NULL, "malloc");
  int call = 0;
  for (int d = 0; d < PSTATE_DTYPE_COUNT; ++d, ++call)
    if (check_call(self, g, (pstate_dtype_t)d, 0, d % N_LAYOUTS, (d + 1) % N_LAYOUTS, call, send, recv, want))
      return 1;
  const pstate_dtype_t some[] = {PSTATE_INT8, PSTATE_FLOAT32, PSTATE_BFLOAT16};
  for (int p = 0; p < N_PATTERNS; ++p)
    for (int ls = 0; ls < N_LAYOUTS; ++ls)
      for (int lr = 0; lr < N_LAYOUTS; ++lr, ++call)
        if (check_call(self, g, some[(p + ls + lr) % 3], p, ls, lr, call, send, recv, want)) return 1;
  /* The dlopen table's member is the same function, and works. */
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  RANK_CHECK(self, api != NULL && api->struct_size >= offsetof(pstate_api_t, all_to_all_v) + sizeof api->all_to_all_v,
             "the table has no all_to_all_v member");
  RANK_CHECK(self, api->all_to_all_v == pstate_all_to_all_v, "the table's all_to_all_v differs");
  const int n = self->world_size, me = self->rank;
  int32_t out[MAX_RANKS] = {0}, in[MAX_RANKS] = {0};
  size_t ones[MAX_RANKS] = {0}, at[MAX_RANKS] = {0};
  for (int j = 0; j < n; ++j) ones[j] = 1, at[j] = (size_t)j, out[j] = 100 * me + j;
  RANK_OK(self, api->all_to_all_v(g, out, ones, at, in, ones, at, PSTATE_INT32, NULL));
  for (int i = 0; i < n; ++i) RANK_CHECK(self, in[i] == 100 * i + me, "all_to_all_v through the table");
  free(send);
  free(recv);
  free(want);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run_data(int world, int ucx, int check) {
  if (ucx) setenv("PSTATE_SHM", "0", 1);
  else unsetenv("PSTATE_SHM");
  if (check) setenv("PSTATE_CHECK", "1", 1);
  const int failed = pstate_test_run_processes(world, 180, data_rank, NULL, NULL);
  unsetenv("PSTATE_SHM");
  unsetenv("PSTATE_CHECK");
  assert_int_equal(failed, 0);
}
static void test_all_to_all_v_1_rank(void **s) { (void)s; run_data(1, 0, 0); }
static void test_all_to_all_v_2_ranks_shm(void **s) { (void)s; run_data(2, 0, 0); }
static void test_all_to_all_v_2_ranks_ucx(void **s) { (void)s; run_data(2, 1, 0); }
static void test_all_to_all_v_2_ranks_shm_under_check(void **s) { (void)s; run_data(2, 0, 1); }
#if !defined(__SANITIZE_THREAD__) /* see main */
static void test_all_to_all_v_3_ranks_shm(void **s) { (void)s; run_data(3, 0, 0); }
static void test_all_to_all_v_3_ranks_ucx(void **s) { (void)s; run_data(3, 1, 0); }
static void test_all_to_all_v_4_ranks_shm(void **s) { (void)s; run_data(4, 0, 0); }
static void test_all_to_all_v_4_ranks_ucx(void **s) { (void)s; run_data(4, 1, 0); }
#endif

/* ---- errors --------------------------------------------------------------------------------- */

/* status must be want and pstate_last_error() must contain both needles. */
#define RANK_ERR(self, call, want, n1, n2)                                                                        \
  do {                                                                                                          \
    pstate_status_t rank_err_s_ = (call);                                                                       \
    const char *rank_err_m_ = pstate_last_error();                                                              \
    RANK_CHECK(self, rank_err_s_ == (want) && strstr(rank_err_m_, (n1)) != NULL && strstr(rank_err_m_, (n2)) != NULL, \
               "%s -> %s (want %s with '%s' and '%s'): %s", #call, pstate_status_string(rank_err_s_),          \
               pstate_status_string(want), (n1), (n2), rank_err_m_);                                            \
  } while (0)

/* A good all_to_all_v (rank i sends i + j + 1 elements to j, packed), checked: the group is in step. */
static int good_call(const pstate_test_rank_t *self, pstate_group_t *g) {
  const int n = self->world_size, me = self->rank;
  size_t sc[MAX_RANKS] = {0}, sd[MAX_RANKS] = {0}, rc[MAX_RANKS] = {0}, rd[MAX_RANKS] = {0}, s_at = 0, r_at = 0;
  int64_t out[4 * MAX_RANKS] = {0}, in[4 * MAX_RANKS] = {0};
  for (int j = 0; j < n; ++j) {
    sc[j] = (size_t)(me + j + 1), sd[j] = s_at, s_at += sc[j];
    rc[j] = (size_t)(j + me + 1), rd[j] = r_at, r_at += rc[j];
    for (size_t k = 0; k < sc[j]; ++k) out[sd[j] + k] = 1000 * me + 10 * j + (int64_t)k;
  }
  RANK_OK(self, pstate_all_to_all_v(g, out, sc, sd, in, rc, rd, PSTATE_INT64, NULL));
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < rc[i]; ++k)
      RANK_CHECK(self, in[rd[i] + k] == 1000 * i + 10 * me + (int64_t)k, "all_to_all_v after the error: from %d [%zu]",
                 i, k);
  return 0;
}

typedef struct err_job_t {
  atomic_int *returned; /* shared page: ranks done with the failing calls */
} err_job_t;

/* Every rank waits for every other before leaving, so an early exit never turns a peer's error
 * into PEER_LOST. */
static void wait_for_all(const pstate_test_rank_t *self, const err_job_t *job) {
  atomic_fetch_add(job->returned, 1);
  for (int spin = 0; atomic_load(job->returned) < self->world_size && spin < 40000; ++spin) usleep(500);
}

/* 3 ranks, every pair 2 elements but group rank 1 sends 3 to group rank 2 (which expects 2). */
static int mismatch_rank(const pstate_test_rank_t *self) {
  const err_job_t *job = self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const int n = self->world_size, me = self->rank;
  size_t sc[MAX_RANKS] = {0}, sd[MAX_RANKS] = {0}, rc[MAX_RANKS] = {0}, rd[MAX_RANKS] = {0};
  for (int j = 0; j < n; ++j) sc[j] = rc[j] = 2, sd[j] = rd[j] = (size_t)(4 * j);
  if (me == 1) sc[2] = 3;
  float out[4 * MAX_RANKS] = {0}, in[4 * MAX_RANKS] = {0};
  RANK_ERR(self, pstate_all_to_all_v(g, out, sc, sd, in, rc, rd, PSTATE_FLOAT32, NULL), PSTATE_ERR_MISMATCH,
           "group rank 1 (rank 1) sends 3 elements to group rank 2 (rank 2), whose recv_counts[1] is 2",
           "all_to_all_v");
  /* The group is in step and the context usable. */
  if (good_call(self, g)) return 1;
  /* Another kind against it: the descriptors disagree (UCX and PSTATE_CHECK: the exchange). */
  if (getenv("PSTATE_SHM") != NULL || getenv("PSTATE_CHECK") != NULL) {
    for (int j = 0; j < n; ++j) sc[j] = rc[j] = 2;
    pstate_status_t s = me == 0 ? pstate_all_to_all(g, out, in, 2, PSTATE_FLOAT32, NULL)
                                : pstate_all_to_all_v(g, out, sc, sd, in, rc, rd, PSTATE_FLOAT32, NULL);
    const char *m = pstate_last_error();
    RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && strstr(m, "all_to_all_v #") && strstr(m, " count 2 float32"),
               "all_to_all against all_to_all_v -> %s: %s", pstate_status_string(s), m);
    if (good_call(self, g)) return 1;
  }
  wait_for_all(self, job);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void run_errors(pstate_test_rank_fn fn, int world, int ucx, int check) {
  if (ucx) setenv("PSTATE_SHM", "0", 1);
  else unsetenv("PSTATE_SHM");
  if (check) setenv("PSTATE_CHECK", "1", 1);
  char dir[64] = "/tmp/pstate-test-a2av.XXXXXX", cmd[128];
  assert_non_null(mkdtemp(dir));
  setenv("PSTATE_TRACE_DIR", dir, 1); /* the failed calls' dumps, not into the working directory */
  atomic_int *returned = mmap(NULL, sizeof *returned, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(returned != MAP_FAILED);
  atomic_init(returned, 0);
  err_job_t job = {returned};
  const int failed = pstate_test_run_processes(world, 120, fn, &job, NULL);
  munmap(returned, sizeof *returned);
  unsetenv("PSTATE_SHM");
  unsetenv("PSTATE_CHECK");
  unsetenv("PSTATE_TRACE_DIR");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  assert_int_equal(failed, 0);
}
static void test_pair_counts_disagree_is_mismatch_on_every_rank_shm(void **s) {
  (void)s;
  run_errors(mismatch_rank, 3, 0, 0);
}
static void test_pair_counts_disagree_is_mismatch_on_every_rank_ucx(void **s) {
  (void)s;
  run_errors(mismatch_rank, 3, 1, 0);
}
static void test_pair_counts_disagree_is_mismatch_on_every_rank_under_check(void **s) {
  (void)s;
  run_errors(mismatch_rank, 3, 0, 1);
}

/* Group rank 1 refuses each call in turn; group rank 0 passes good arguments and must get the
 * refusal too. Then a good call works. */
static int refusal_rank(const pstate_test_rank_t *self) {
  const err_job_t *job = self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const int me = self->rank;
  const int refuser = me == 1;
  size_t c[2] = {2, 2}, d[2] = {0, 2}, wrap[2] = {SIZE_MAX - 1, 0}, huge[2] = {0, (size_t)1 << 46};
  size_t tangled[2] = {0, 1}; /* recv parts [0, 2) and [1, 3) */
  float out[8] = {0}, in[8] = {0}, shared[8] = {0};
  struct {
    const void *send;
    const size_t *sc, *sd;
    void *recv;
    const size_t *rc, *rd;
    pstate_dtype_t dtype;
    const char *needle;
  } bad[] = {
      {out, NULL, d, in, c, d, PSTATE_FLOAT32, "send_counts is NULL"},
      {out, c, d, in, c, NULL, PSTATE_FLOAT32, "recv_displs is NULL"},
      {out, c, wrap, in, c, d, PSTATE_FLOAT32, "overflows size_t"},
      {out, c, d, in, huge, d, PSTATE_FLOAT32, "2^47"},
      {NULL, c, d, in, c, d, PSTATE_FLOAT32, "send is NULL"},
      {out, c, d, in, c, tangled, PSTATE_FLOAT32, "recv parts overlap"},
      {shared, c, d, shared + 1, c, d, PSTATE_FLOAT32, "overlap"},
      {out, c, d, in, c, d, (pstate_dtype_t)99, "dtype"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k) {
    if (refuser) {
      RANK_ERR(self, pstate_all_to_all_v(g, bad[k].send, bad[k].sc, bad[k].sd, bad[k].recv, bad[k].rc, bad[k].rd,
                                         bad[k].dtype, NULL),
               PSTATE_ERR_INVALID_ARGUMENT, bad[k].needle, "");
    } else {
      RANK_ERR(self, pstate_all_to_all_v(g, out, c, d, in, c, d, PSTATE_FLOAT32, NULL), PSTATE_ERR_INVALID_ARGUMENT,
               "refused its part of this call", "(group rank 1)");
    }
  }
  if (good_call(self, g)) return 1;
  wait_for_all(self, job);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}
static void test_refusal_of_one_rank_is_invalid_argument_on_every_rank_shm(void **s) {
  (void)s;
  run_errors(refusal_rank, 2, 0, 0);
}
static void test_refusal_of_one_rank_is_invalid_argument_on_every_rank_ucx(void **s) {
  (void)s;
  run_errors(refusal_rank, 2, 1, 0);
}

int main(void) {
  /* Under ThreadSanitizer the 3- and 4-process sweeps repeat the 2-process ones (as test_gatherv). */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_to_all_v_1_rank),
      cmocka_unit_test(test_all_to_all_v_2_ranks_shm),
      cmocka_unit_test(test_all_to_all_v_2_ranks_ucx),
      cmocka_unit_test(test_all_to_all_v_2_ranks_shm_under_check),
#if !defined(__SANITIZE_THREAD__)
      cmocka_unit_test(test_all_to_all_v_3_ranks_shm),
      cmocka_unit_test(test_all_to_all_v_3_ranks_ucx),
      cmocka_unit_test(test_all_to_all_v_4_ranks_shm),
      cmocka_unit_test(test_all_to_all_v_4_ranks_ucx),
#endif
      cmocka_unit_test(test_pair_counts_disagree_is_mismatch_on_every_rank_shm),
      cmocka_unit_test(test_pair_counts_disagree_is_mismatch_on_every_rank_ucx),
      cmocka_unit_test(test_pair_counts_disagree_is_mismatch_on_every_rank_under_check),
      cmocka_unit_test(test_refusal_of_one_rank_is_invalid_argument_on_every_rank_shm),
      cmocka_unit_test(test_refusal_of_one_rank_is_invalid_argument_on_every_rank_ucx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
