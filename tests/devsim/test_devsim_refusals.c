/*
 * test_devsim_refusals.c — in a CUDA context under PSTATE_CHECK=1 (on the devsim stand-ins), an
 * argument one rank refuses fails the device collective on every rank (issue 46 item 1).
 *
 * PSTATE_CHECK=1 puts a host exchange before every device collective, so a refusal rides in it:
 * the root's NULL recv of a gather, its host-memory recv of a reduce, its NULL send of a scatter,
 * one rank's host-memory send of an all_reduce. Every rank returns INVALID_ARGUMENT (the refusing
 * rank its own error naming the buffer, the others naming the refusing rank), nothing is given to
 * NCCL, and the next device call of each kind returns its own data. Before, the refusing rank
 * returned alone (a buffer's memory was checked by the device communicator, after the exchange)
 * while the others enqueued the collective and waited on their stream for it. Without
 * PSTATE_CHECK a device call meets no host exchange and a refusal stays on its rank (pstate.h,
 * "Errors"), as NCCL's own argument errors do: not tested, the others would wait.
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

/* The refused call: INVALID_ARGUMENT on every rank, the refusing rank's own text naming `own`. */
static int refused(const pstate_test_rank_t *self, pstate_status_t s, int refuser, const char *own, const char *what) {
  const char *e = pstate_last_error();
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT, "%s: %s (%s), want INVALID_ARGUMENT on every rank", what,
             pstate_status_string(s), e);
  if (self->rank == refuser)
    RANK_CHECK(self, strstr(e, own) != NULL, "%s: the refusing rank's error should name %s: %s", what, own, e);
  else
    RANK_CHECK(self, strstr(e, "refused its part of this call") != NULL, "%s: the other rank's error: %s", what, e);
  return 0;
}

/* Rank r's input of call k, two floats: 10k + r. */
static void *row(int k, int r) {
  float h[2] = {(float)(10 * k + r), (float)(10 * k + r)};
  return devsim_device_copy(h, sizeof h);
}

static int refusal_rank(const pstate_test_rank_t *self) {
  setenv("PSTATE_CHECK", "1", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, devsim_init(self, 20000, &ps));
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  const int me = self->rank;
  float host[4] = {0, 0, 0, 0};
  void *out = devsim_device_copy(NULL, 4 * sizeof(float));
  for (int root = 0; root < 2; ++root) {
    int k = 10 * root;
    /* gather: the root's recv NULL, then the root's recv in host memory */
    for (int variant = 0; variant < 2; ++variant) {
      void *send = row(++k, me);
      void *bad = variant == 0 ? NULL : (void *)host;
      pstate_status_t s = pstate_gather(w, send, me == root ? bad : NULL, 2, PSTATE_FLOAT32, root, NULL);
      if (refused(self, s, root, variant == 0 ? "recv is NULL" : "recv", "gather, the root's recv")) return 1;
      cudaFree(send);
      send = row(++k, me);
      RANK_OK(self, pstate_gather(w, send, me == root ? out : NULL, 2, PSTATE_FLOAT32, root, NULL));
      if (me == root) {
        float got[4];
        RANK_CHECK(self, devsim_to_host(got, out, sizeof got, NULL) == 0, "copy back");
        for (int i = 0; i < 4; ++i)
          RANK_CHECK(self, got[i] == (float)(10 * k + i / 2), "gather after the refused one [%d]: %g", i, got[i]);
      }
      cudaFree(send);
    }
    /* reduce: the root's recv in host memory */
    void *send = row(++k, me);
    pstate_status_t s = pstate_reduce(w, send, me == root ? (void *)host : NULL, 2, PSTATE_FLOAT32, PSTATE_SUM, root, NULL);
    if (refused(self, s, root, "recv", "reduce, the root's recv in host memory")) return 1;
    cudaFree(send);
    send = row(++k, me);
    RANK_OK(self, pstate_reduce(w, send, me == root ? out : NULL, 2, PSTATE_FLOAT32, PSTATE_SUM, root, NULL));
    if (me == root) {
      float got[2];
      RANK_CHECK(self, devsim_to_host(got, out, sizeof got, NULL) == 0, "copy back");
      RANK_CHECK(self, got[0] == (float)(20 * k + 1), "reduce after the refused one: %g", got[0]);
    }
    cudaFree(send);
    /* scatter: the root's send NULL */
    s = pstate_scatter(w, NULL, out, 2, PSTATE_FLOAT32, root, NULL);
    if (refused(self, s, root, "send is NULL", "scatter, the root's send NULL")) return 1;
    ++k;
    float all[4] = {(float)(10 * k), (float)(10 * k), (float)(10 * k + 1), (float)(10 * k + 1)};
    void *whole = devsim_device_copy(all, sizeof all);
    RANK_OK(self, pstate_scatter(w, me == root ? whole : NULL, out, 2, PSTATE_FLOAT32, root, NULL));
    float mine[2];
    RANK_CHECK(self, devsim_to_host(mine, out, sizeof mine, NULL) == 0, "copy back");
    RANK_CHECK(self, mine[0] == (float)(10 * k + me), "scatter after the refused one: %g", mine[0]);
    cudaFree(whole);
    /* all_reduce: one rank's send in host memory */
    send = row(++k, me);
    s = pstate_all_reduce(w, me == root ? (void *)host : send, out, 2, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (refused(self, s, root, "send", "all_reduce, one rank's send in host memory")) return 1;
    cudaFree(send);
    send = row(++k, me);
    RANK_OK(self, pstate_all_reduce(w, send, out, 2, PSTATE_FLOAT32, PSTATE_SUM, NULL));
    float sum[2];
    RANK_CHECK(self, devsim_to_host(sum, out, sizeof sum, NULL) == 0, "copy back");
    RANK_CHECK(self, sum[0] == (float)(20 * k + 1), "all_reduce after the refused one: %g", sum[0]);
    cudaFree(send);
  }
  RANK_OK(self, pstate_barrier(w));
  cudaFree(out);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_a_device_refusal_under_pstate_check_fails_every_rank_and_keeps_step(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, refusal_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_device_refusal_under_pstate_check_fails_every_rank_and_keeps_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
