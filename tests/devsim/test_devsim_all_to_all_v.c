/*
 * test_devsim_all_to_all_v.c — pstate_all_to_all_v in CUDA contexts (one NCCL group of
 * ncclSend/ncclRecv per non-empty pair, the own part a device copy), on the devsim stand-ins: 1,
 * 2 and 3 ranks as processes and 3 as threads, on the world group (NULL: the context's stream) and
 * on the TP group (a non-blocking stream of the test).
 *
 * Counts (what group rank i sends to j, the same matrix on every rank): uneven with zeros, one
 * pair only past the stand-in's 256 KiB chunk, all zero, and a checkerboard; displacements packed
 * in rank order, reversed with gaps, and rotated by the rank with gaps, on each side
 * independently. Buffers are the stand-in's device memory and results are read back on the call's
 * stream (a missing stream order gives wrong bytes); the reference is built here byte by byte, a
 * sentinel in the gaps and past the end. A rank with nothing to send passes send NULL.
 *
 * Agreement: under PSTATE_CHECK=1 a pair whose counts disagree is MISMATCH on every rank naming
 * the pair and both counts, nothing is enqueued, and the context stays usable (the next call
 * works).
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

#define MAX_RANKS 4
#define N_PATTERNS 4
#define N_LAYOUTS 3
#define LARGE 70001
#define SENTINEL 0xa5

typedef struct {
  const pstate_test_rank_t *self;
  pstate_group_t *g;
  int n, r;
  cudaStream_t stream;
  const char *name;
} ctx_t;

static size_t pair_count(int p, int n, int i, int j) {
  switch (p) {
    case 0: return (size_t)((3 * i + 5 * j + 1) % 7);
    case 1: return i == 0 && j == n - 1 ? LARGE : 0;
    case 2: return 0;
    default: return (i + j) % 2 ? 0 : (size_t)(1000 + 7 * i + j);
  }
}

static size_t place(int l, int n, int me, const size_t *counts, size_t *displs) {
  size_t at = 0;
  for (int k = 0; k < n; ++k) {
    const int j = l == 0 ? k : l == 1 ? n - 1 - k : (me + 1 + k) % n;
    displs[j] = at;
    at += counts[j] + (l == 0 ? 0 : l == 1 ? 3 : 5);
  }
  return at;
}

static unsigned char part_byte(int i, int j, int c, size_t b) {
  return (unsigned char)((i * 61 + j * 17 + c * 5 + (int)b) % 251);
}

static int check_call(const ctx_t *c, pstate_dtype_t t, int p, int ls, int lr, int call) {
  const int n = c->n, me = c->r;
  const size_t es = pstate_dtype_size(t);
  size_t sc[MAX_RANKS] = {0}, sd[MAX_RANKS] = {0}, rc[MAX_RANKS] = {0}, rd[MAX_RANKS] = {0}, sent = 0;
  for (int j = 0; j < n; ++j) {
    sc[j] = pair_count(p, n, me, j);
    rc[j] = pair_count(p, n, j, me);
    sent += sc[j];
  }
  const size_t send_bytes = place(ls, n, me, sc, sd) * es, recv_bytes = place(lr, n, me, rc, rd) * es + 16;
  unsigned char *h = malloc(send_bytes + 1), *want = malloc(recv_bytes), *got = malloc(recv_bytes);
  memset(h, SENTINEL, send_bytes + 1);
  for (int j = 0; j < n; ++j)
    for (size_t b = 0; b < sc[j] * es; ++b) h[sd[j] * es + b] = part_byte(me, j, call, b);
  memset(want, SENTINEL, recv_bytes);
  for (int i = 0; i < n; ++i)
    for (size_t b = 0; b < rc[i] * es; ++b) want[rd[i] * es + b] = part_byte(i, me, call, b);
  void *dsend = sent == 0 ? NULL : devsim_device_copy(h, send_bytes);
  /* recv starts as the sentinel everywhere: the parts must be written by the call, nothing else */
  memset(got, SENTINEL, recv_bytes);
  void *drecv = devsim_device_copy(got, recv_bytes);
  RANK_OK(c->self, pstate_all_to_all_v(c->g, dsend, sc, sd, drecv, rc, rd, t, c->stream));
  RANK_CHECK(c->self, devsim_to_host(got, drecv, recv_bytes, c->stream) == 0, "copy back");
  for (size_t b = 0; b < recv_bytes; ++b)
    RANK_CHECK(c->self, got[b] == want[b], "%s all_to_all_v %s pattern %d layouts %d/%d: byte %zu is %u, want %u",
               c->name, pstate_dtype_name(t), p, ls, lr, b, got[b], want[b]);
  if (dsend != NULL) cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  free(want);
  free(got);
  return 0;
}

static int check_group(const ctx_t *c, int every_dtype) {
  int call = 0;
  for (int t = 0; t < PSTATE_DTYPE_COUNT; ++t, ++call) {
    if (!every_dtype && t != PSTATE_BFLOAT16 && t != PSTATE_INT64) continue;
    if (check_call(c, (pstate_dtype_t)t, 0, t % N_LAYOUTS, (t + 1) % N_LAYOUTS, call)) return 1;
  }
  for (int p = 0; p < N_PATTERNS; ++p)
    for (int ls = 0; ls < N_LAYOUTS; ++ls)
      for (int lr = 0; lr < N_LAYOUTS; ++lr, ++call)
        if (check_call(c, (p + ls + lr) % 2 ? PSTATE_FLOAT32 : PSTATE_UINT8, p, ls, lr, call)) return 1;
  return 0;
}

static int data_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 60000, &ps));
  pstate_parallel_config_t pc = PSTATE_PARALLEL_CONFIG_INIT;
  pc.tensor_parallel_size = self->world_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &pc));
  cudaStream_t stream = NULL;
  RANK_CHECK(self, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  const pstate_group_kind_t kinds[2] = {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP};
  for (int k = 0; k < 2; ++k) {
    pstate_group_t *g = NULL;
    RANK_OK(self, pstate_get_group(ps, kinds[k], &g));
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(g, &info));
    ctx_t c = {self, g, info.world_size, info.rank_in_group, k == 0 ? NULL : stream, pstate_group_kind_name(kinds[k])};
    if (check_group(&c, k == 0)) return 1;
  }
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  cudaStreamDestroy(stream);
  return 0;
}

static void run(int world, int threads) {
  int failed = threads ? pstate_test_run_threads(world, 180, data_rank, NULL)
                       : pstate_test_run_processes(world, 180, data_rank, NULL, NULL);
  assert_int_equal(failed, 0);
}

static void test_device_all_to_all_v_1_process(void **s) { (void)s; run(1, 0); }
static void test_device_all_to_all_v_2_processes(void **s) { (void)s; run(2, 0); }
static void test_device_all_to_all_v_3_processes(void **s) { (void)s; run(3, 0); }
static void test_device_all_to_all_v_3_threads(void **s) { (void)s; run(3, 1); }

/* ---- PSTATE_CHECK=1: a pair whose counts disagree ---------------------------------------------- */

static int mismatch_rank(const pstate_test_rank_t *self) {
  const int n = self->world_size, me = self->rank;
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 20000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  size_t sc[MAX_RANKS] = {0}, sd[MAX_RANKS] = {0};
  for (int j = 0; j < n; ++j) sc[j] = 2, sd[j] = (size_t)(4 * j);
  size_t bad[MAX_RANKS];
  memcpy(bad, sc, sizeof bad);
  if (me == 0) bad[1] = 3; /* group rank 0 sends 3 to group rank 1, which expects 2 */
  float h[4 * MAX_RANKS];
  for (int i = 0; i < 4 * n; ++i) h[i] = (float)(100 * me + i);
  char *dsend = devsim_device_copy(h, sizeof h), *drecv = devsim_device_copy(NULL, sizeof h);
  pstate_status_t s = pstate_all_to_all_v(g, dsend, bad, sd, drecv, sc, sd, PSTATE_FLOAT32, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH &&
                       strstr(pstate_last_error(), "group rank 0 (rank 0) sends 3 elements to group rank 1 (rank 1), "
                                                   "whose recv_counts[0] is 2") != NULL,
             "all_to_all_v with disagreeing counts -> %s: %s", pstate_status_string(s), pstate_last_error());
  /* Nothing was enqueued and the context is usable: agreeing counts work. */
  RANK_OK(self, pstate_all_to_all_v(g, dsend, sc, sd, drecv, sc, sd, PSTATE_FLOAT32, NULL));
  RANK_CHECK(self, devsim_to_host(h, drecv, sizeof h, NULL) == 0, "copy back");
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < 2; ++k)
      RANK_CHECK(self, h[4 * i + k] == (float)(100 * i + 4 * me + k), "all_to_all_v after the mismatch");
  cudaFree(dsend);
  cudaFree(drecv);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_disagreeing_pair_is_mismatch_under_check(void **s) {
  (void)s;
  char dir[64] = "/tmp/pstate-test-devsim-a2av.XXXXXX", cmd[128];
  assert_non_null(mkdtemp(dir));
  setenv("PSTATE_TRACE_DIR", dir, 1); /* the MISMATCH dumps, not into the working directory */
  setenv("PSTATE_CHECK", "1", 1);
  int failed = pstate_test_run_processes(2, 60, mismatch_rank, NULL, NULL);
  unsetenv("PSTATE_CHECK");
  unsetenv("PSTATE_TRACE_DIR");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  assert_int_equal(failed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_all_to_all_v_1_process),
      cmocka_unit_test(test_device_all_to_all_v_2_processes),
      cmocka_unit_test(test_device_all_to_all_v_3_processes),
      cmocka_unit_test(test_device_all_to_all_v_3_threads),
      cmocka_unit_test(test_disagreeing_pair_is_mismatch_under_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
