/*
 * test_count_bounds.c — counts no address space can hold are INVALID_ARGUMENT on every rank,
 * before any data moves, instead of a crash, a huge allocation or an INTERNAL error.
 *
 * The bound (pstate.h): one operation's buffer is at most 2^47 bytes (count x element size x
 * blocks). Covered: every tensor operation with count SIZE_MAX and just past the bound; a gather
 * whose recv (count x group size) is past the bound, refused on every rank and not only on the
 * root, and likewise a scatter whose send (count x group size) is past the bound;
 * broadcast_object of size SIZE_MAX from its source: the source refuses it, and the other ranks,
 * in the same call, hear it at once (INVALID_ARGUMENT naming the source's refusal, issue 27:
 * a refused size tells the peers); the next broadcast_object pairs normally; all_gather_object
 * with one rank's size past the bound: INVALID_ARGUMENT on every rank, the next one works; on the message-queue
 * path (src 0, shared memory) and over UCX.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"

#define RANK_TOO_BIG(self, call)                                                                          \
  do {                                                                                                    \
    pstate_status_t s_ = (call);                                                                          \
    RANK_CHECK(self, s_ == PSTATE_ERR_INVALID_ARGUMENT &&                                                 \
                         (strstr(pstate_last_error(), "2^47") || strstr(pstate_last_error(), "overflows")), \
               "%s: %s (%s)", #call, pstate_status_string(s_), pstate_last_error());                      \
  } while (0)

static const size_t kPastBound = ((size_t)1 << 47) + 1; /* bytes of uint8 */

static int counts_rank(const pstate_test_rank_t *self) {
  const int *ucx = self->arg;
  if (*ucx) setenv("PSTATE_SHM", "0", 1);
  else unsetenv("PSTATE_SHM");
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  uint8_t a[64], b[64];
  const size_t counts[] = {SIZE_MAX, SIZE_MAX / 2, kPastBound, kPastBound / 4 + 1};
  const pstate_dtype_t dtypes[] = {PSTATE_UINT8, PSTATE_UINT8, PSTATE_UINT8, PSTATE_FLOAT32};
  for (size_t k = 0; k < 4; ++k) {
    size_t n = counts[k];
    pstate_dtype_t t = dtypes[k];
    RANK_TOO_BIG(self, pstate_all_reduce(g, a, b, n, t, PSTATE_SUM, NULL));
    RANK_TOO_BIG(self, pstate_all_reduce(g, a, a, n, t, PSTATE_MAX, NULL));
    RANK_TOO_BIG(self, pstate_all_gather(g, a, b, n, t, NULL));
    RANK_TOO_BIG(self, pstate_reduce_scatter(g, a, b, n, t, PSTATE_SUM, NULL));
    RANK_TOO_BIG(self, pstate_broadcast(g, a, n, t, 0, NULL));
    RANK_TOO_BIG(self, pstate_gather(g, a, b, n, t, 0, NULL));
    RANK_TOO_BIG(self, pstate_all_to_all(g, a, b, n, t, NULL));
    RANK_TOO_BIG(self, pstate_reduce(g, a, b, n, t, PSTATE_SUM, 0, NULL));
    RANK_TOO_BIG(self, pstate_scatter(g, a, b, n, t, 1, NULL));
    int peer = 1 - self->rank;
    RANK_TOO_BIG(self, pstate_send(g, a, n, t, peer, NULL));
    RANK_TOO_BIG(self, pstate_recv(g, a, n, t, peer, NULL));
  }
  /* gather: send fits (2^46 bytes), recv (2 x that, plus one) does not; refused on every rank,
   * the root (0) as well as the others, which would otherwise send to a root that refused */
  size_t half = ((size_t)1 << 46) + 1;
  pstate_status_t s = pstate_gather(g, a, self->rank == 0 ? b : NULL, half, PSTATE_UINT8, 0, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "recv"), "gather recv bound: %s (%s)",
             pstate_status_string(s), pstate_last_error());
  s = pstate_gather(g, a, self->rank == 1 ? b : NULL, half, PSTATE_UINT8, 1, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "recv"), "gather recv bound: %s (%s)",
             pstate_status_string(s), pstate_last_error());
  /* scatter: recv fits, send (2 x that, plus one) does not; refused on every rank, the root (1)
   * as well as the other, which would otherwise wait for a block from a root that refused */
  s = pstate_scatter(g, self->rank == 1 ? a : NULL, b, half, PSTATE_UINT8, 1, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "send"),
             "scatter send bound: %s (%s)", pstate_status_string(s), pstate_last_error());
  /* the ranks are still in step */
  uint32_t x = 1;
  RANK_OK(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_UINT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == 2, "all_reduce after the refusals: %u", x);

  /* broadcast_object of SIZE_MAX bytes, from rank 0 (shared memory: the message queue) and rank 1 */
  for (int src = 0; src < 2; ++src) {
    pstate_bytes_t out = {NULL, 0};
    s = pstate_broadcast_object(g, a, self->rank == src ? SIZE_MAX : 0, src, &out);
    RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), self->rank == src ? "2^47" : "refused"),
               "broadcast_object SIZE_MAX from %d: %s (%s)", src, pstate_status_string(s), pstate_last_error());
    RANK_CHECK(self, out.data == NULL && out.size == 0, "out untouched");
    memcpy(a, "next", 4);
    RANK_OK(self, pstate_broadcast_object(g, a, 4, src, &out));
    RANK_CHECK(self, out.size == 4 && memcmp(out.data, "next", 4) == 0, "the next broadcast_object from %d", src);
    pstate_bytes_free(&out);
  }
  /* all_gather_object: rank 1's size is past the bound; both ranks hear it in the same call */
  {
    pstate_bytes_t out = {NULL, 0};
    size_t sizes[2];
    s = pstate_all_gather_object(g, a, self->rank == 1 ? SIZE_MAX : 4, &out, sizes, 2, &(size_t){0});
    RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), self->rank == 1 ? "2^47" : "refused"),
               "all_gather_object SIZE_MAX on rank 1: %s (%s)", pstate_status_string(s), pstate_last_error());
    RANK_OK(self, pstate_all_gather_object(g, a, 4, &out, sizes, 2, &(size_t){0}));
    RANK_CHECK(self, out.size == 8 && sizes[0] == 4 && sizes[1] == 4, "the next all_gather_object: %zu bytes", out.size);
    pstate_bytes_free(&out);
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_counts_past_2_pow_47_bytes_are_invalid_argument_on_every_rank_shm(void **state) {
  (void)state;
  int ucx = 0;
  assert_int_equal(pstate_test_run_processes(2, 120, counts_rank, &ucx, NULL), 0);
}

static void test_counts_past_2_pow_47_bytes_are_invalid_argument_on_every_rank_ucx(void **state) {
  (void)state;
  int ucx = 1;
  assert_int_equal(pstate_test_run_processes(2, 120, counts_rank, &ucx, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counts_past_2_pow_47_bytes_are_invalid_argument_on_every_rank_shm),
      cmocka_unit_test(test_counts_past_2_pow_47_bytes_are_invalid_argument_on_every_rank_ucx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
