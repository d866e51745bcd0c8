/*
 * test_refusal_in_step.c — an argument that only one rank can check never leaves the group out
 * of step (issue 46 item 1): the call fails on every rank at once, and the next call returns
 * its own data, not the refused call's.
 *
 * Before, the root of a gather, reduce or scatter refused a bad recv (send) locally while the
 * other ranks went into the collective, and the root's next call was paired with theirs: gather
 * gave [20, 20, 11, 11] for [20, 20, 21, 21]. The same held for any buffer one rank refused (a
 * NULL or overlapping buffer, a non-root's NULL out of broadcast_object): the refusing rank's
 * next call of the kind returned another call's data with PSTATE_OK. Now each refusal takes
 * part in the call's agreement: the refusing rank returns INVALID_ARGUMENT with its own error
 * (naming the call, the group and the argument), every other rank INVALID_ARGUMENT naming the
 * refusing rank, and a correct call right after gives the right answer on every rank.
 *
 * Two ranks, each job running every case: over shared memory (inline and staged protocols: 2
 * and 70001 elements), over UCX (PSTATE_SHM=0; 2 elements ride in the agreement exchange,
 * 70001 run the algorithms), and over shared memory with PSTATE_CHECK=1 (the exchange carries
 * the refusal, nothing is left in the segment).
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

#define BIG 70001 /* past the shared memory's inline and whole-input sizes: staged */

typedef struct job_t {
  const char *shm;   /* PSTATE_SHM value, or NULL for unset */
  const char *check; /* PSTATE_CHECK value, or NULL for unset */
} job_t;

static int32_t *a_, *b_; /* 2 x BIG elements each */

/* Rank r's input element i of the case numbered `tag`: differs per call, so a call that pairs
 * with another one shows in the data. */
static int32_t value(int tag, int r, size_t i) { return (int32_t)(tag * 1000 + 10 * (r + 1) + (int)(i % 7)); }

static void fill(int32_t *p, size_t n, int tag, int r) {
  for (size_t i = 0; i < n; ++i) p[i] = value(tag, r, i);
}

/* The refused call: INVALID_ARGUMENT on every rank. Its text is kept for check_refusal_text,
 * which runs after the case's next call: a rank out of step shows in that call's data first. */
static struct {
  char text[4096];
  int refuser;
  const char *call, *own, *what;
} refusal_;

static int expect_refused(const pstate_test_rank_t *self, pstate_status_t s, int refuser, const char *call,
                          const char *own, const char *what) {
  snprintf(refusal_.text, sizeof refusal_.text, "%s", pstate_last_error());
  refusal_.refuser = refuser, refusal_.call = call, refusal_.own = own, refusal_.what = what;
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT, "%s: %s (%s), want INVALID_ARGUMENT on every rank", what,
             pstate_status_string(s), refusal_.text);
  return 0;
}

/* The refusing rank's own text names its argument (and the call on the group), the others'
 * names the refusal. */
static int check_refusal_text(const pstate_test_rank_t *self) {
  const char *e = refusal_.text;
  if (self->rank == refusal_.refuser)
    RANK_CHECK(self, strstr(e, refusal_.own) != NULL && strstr(e, refusal_.call) != NULL &&
                         strstr(e, "group world:0") != NULL,
               "%s: the refusing rank's error should name %s, %s and group world:0: %s", refusal_.what, refusal_.own,
               refusal_.call, e);
  else
    RANK_CHECK(self, strstr(e, "refused its part of this call") != NULL && strstr(e, "group rank") != NULL,
               "%s: the other rank's error should name the refusal: %s", refusal_.what, e);
  return 0;
}

static int check_values(const pstate_test_rank_t *self, const int32_t *got, size_t n, int tag, int r, int times,
                        const char *what) {
  for (size_t i = 0; i < n; ++i)
    RANK_CHECK(self, got[i] == value(tag, r, i) * times, "%s [%zu]: got %d want %d (another call's data?)", what, i,
               got[i], value(tag, r, i) * times);
  return 0;
}

/* Sum over both ranks of value(tag, r, i). */
static int check_sums(const pstate_test_rank_t *self, const int32_t *got, size_t n, int tag, const char *what) {
  for (size_t i = 0; i < n; ++i) {
    int32_t want = value(tag, 0, i) + value(tag, 1, i);
    RANK_CHECK(self, got[i] == want, "%s [%zu]: got %d want %d (another call's data?)", what, i, got[i], want);
  }
  return 0;
}

/* The case: gather's root refuses its recv; the next gather is the right one. */
static int gather_root_refuses_recv(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int root, int tag) {
  const int me = self->rank;
  fill(a_, n, tag, me);
  pstate_status_t s = pstate_gather(g, a_, me == root ? NULL : b_, n, PSTATE_INT32, root, NULL);
  if (expect_refused(self, s, root, "pstate_gather", "recv is NULL", "gather, root's recv NULL")) return 1;
  fill(a_, n, tag + 1, me);
  RANK_OK(self, pstate_gather(g, a_, b_, n, PSTATE_INT32, root, NULL));
  if (me != root) return 0;
  for (int r = 0; r < 2; ++r)
    if (check_values(self, b_ + (size_t)r * n, n, tag + 1, r, 1, "the gather after the refused one")) return 1;
  return 0;
}

static int gather_root_refuses_overlap(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int root,
                                       int tag) {
  const int me = self->rank;
  fill(a_, 2 * n, tag, me);
  /* on the root, recv overlaps send partially (no in-place form): refused there only */
  const int32_t *send = me == root ? a_ + 1 : a_;
  pstate_status_t s = pstate_gather(g, send, a_, n, PSTATE_INT32, root, NULL);
  if (expect_refused(self, s, root, "pstate_gather", "overlap", "gather, root's recv overlapping send")) return 1;
  fill(a_, n, tag + 1, me);
  RANK_OK(self, pstate_gather(g, a_, b_, n, PSTATE_INT32, root, NULL));
  if (me != root) return 0;
  for (int r = 0; r < 2; ++r)
    if (check_values(self, b_ + (size_t)r * n, n, tag + 1, r, 1, "the gather after the refused one")) return 1;
  return 0;
}

static int reduce_root_refuses_recv(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int root, int tag) {
  const int me = self->rank;
  fill(a_, n, tag, me);
  pstate_status_t s = pstate_reduce(g, a_, me == root ? NULL : b_, n, PSTATE_INT32, PSTATE_SUM, root, NULL);
  if (expect_refused(self, s, root, "pstate_reduce", "recv is NULL", "reduce, root's recv NULL")) return 1;
  fill(a_, n, tag + 1, me);
  RANK_OK(self, pstate_reduce(g, a_, b_, n, PSTATE_INT32, PSTATE_SUM, root, NULL));
  return me == root ? check_sums(self, b_, n, tag + 1, "the reduce after the refused one") : 0;
}

static int scatter_root_refuses_send(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int root, int tag) {
  const int me = self->rank;
  pstate_status_t s = pstate_scatter(g, NULL, b_, n, PSTATE_INT32, root, NULL);
  if (expect_refused(self, s, root, "pstate_scatter", "send is NULL", "scatter, root's send NULL")) return 1;
  for (int r = 0; r < 2; ++r) fill(a_ + (size_t)r * n, n, tag + 1, r);
  RANK_OK(self, pstate_scatter(g, me == root ? a_ : NULL, b_, n, PSTATE_INT32, root, NULL));
  return check_values(self, b_, n, tag + 1, me, 1, "the scatter after the refused one");
}

/* Symmetric calls: one rank's own buffer is what it refuses. */
static int all_reduce_one_rank_refuses_send(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int refuser,
                                            int tag) {
  const int me = self->rank;
  fill(a_, n, tag, me);
  pstate_status_t s = pstate_all_reduce(g, me == refuser ? NULL : a_, b_, n, PSTATE_INT32, PSTATE_SUM, NULL);
  if (expect_refused(self, s, refuser, "pstate_all_reduce", "send is NULL", "all_reduce, one rank's send NULL"))
    return 1;
  fill(a_, n, tag + 1, me);
  RANK_OK(self, pstate_all_reduce(g, a_, b_, n, PSTATE_INT32, PSTATE_SUM, NULL));
  return check_sums(self, b_, n, tag + 1, "the all_reduce after the refused one");
}

static int broadcast_one_rank_refuses_buf(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int refuser,
                                          int tag) {
  const int me = self->rank;
  fill(a_, n, tag, me);
  pstate_status_t s = pstate_broadcast(g, me == refuser ? NULL : a_, n, PSTATE_INT32, 0, NULL);
  if (expect_refused(self, s, refuser, "pstate_broadcast", "buf is NULL", "broadcast, one rank's buf NULL")) return 1;
  fill(a_, n, tag + 1, me);
  RANK_OK(self, pstate_broadcast(g, a_, n, PSTATE_INT32, 0, NULL));
  return check_values(self, a_, n, tag + 1, 0, 1, "the broadcast after the refused one");
}

static int all_gather_one_rank_refuses_recv(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int refuser,
                                            int tag) {
  const int me = self->rank;
  fill(a_, n, tag, me);
  pstate_status_t s = pstate_all_gather(g, a_, me == refuser ? NULL : b_, n, PSTATE_INT32, NULL);
  if (expect_refused(self, s, refuser, "pstate_all_gather", "recv is NULL", "all_gather, one rank's recv NULL"))
    return 1;
  fill(a_, n, tag + 1, me);
  RANK_OK(self, pstate_all_gather(g, a_, b_, n, PSTATE_INT32, NULL));
  for (int r = 0; r < 2; ++r)
    if (check_values(self, b_ + (size_t)r * n, n, tag + 1, r, 1, "the all_gather after the refused one")) return 1;
  return 0;
}

static int reduce_scatter_one_rank_refuses_recv(const pstate_test_rank_t *self, pstate_group_t *g, size_t n,
                                                int refuser, int tag) {
  const int me = self->rank;
  fill(a_, 2 * n, tag, me);
  pstate_status_t s = pstate_reduce_scatter(g, a_, me == refuser ? NULL : b_, n, PSTATE_INT32, PSTATE_SUM, NULL);
  if (expect_refused(self, s, refuser, "pstate_reduce_scatter", "recv is NULL", "reduce_scatter, recv NULL"))
    return 1;
  fill(a_, 2 * n, tag + 1, me);
  RANK_OK(self, pstate_reduce_scatter(g, a_, b_, n, PSTATE_INT32, PSTATE_SUM, NULL));
  /* block me of value(tag + 1, r, i) over i in [0, 2n): element me * n + i */
  for (size_t i = 0; i < n; ++i) {
    const size_t k = (size_t)me * n + i;
    RANK_CHECK(self, b_[i] == value(tag + 1, 0, k) + value(tag + 1, 1, k), "reduce_scatter after the refused one [%zu]",
               i);
  }
  return 0;
}

static int all_to_all_one_rank_refuses_send(const pstate_test_rank_t *self, pstate_group_t *g, size_t n, int refuser,
                                            int tag) {
  const int me = self->rank;
  fill(a_, 2 * n, tag, me);
  pstate_status_t s = pstate_all_to_all(g, me == refuser ? NULL : a_, b_, n, PSTATE_INT32, NULL);
  if (expect_refused(self, s, refuser, "pstate_all_to_all", "send is NULL", "all_to_all, send NULL")) return 1;
  fill(a_, 2 * n, tag + 1, me);
  RANK_OK(self, pstate_all_to_all(g, a_, b_, n, PSTATE_INT32, NULL));
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (size_t)me * n + i; /* block me of rank r's send */
      RANK_CHECK(self, b_[(size_t)r * n + i] == value(tag + 1, r, k), "all_to_all after the refused one [%d][%zu]", r, i);
    }
  return 0;
}

static int all_gatherv_one_rank_refuses_counts(const pstate_test_rank_t *self, pstate_group_t *g, size_t n,
                                               int refuser, int tag) {
  const int me = self->rank;
  const size_t counts[2] = {n, n + 1};
  fill(a_, counts[me], tag, me);
  pstate_status_t s = pstate_all_gatherv(g, a_, b_, me == refuser ? NULL : counts, PSTATE_INT32, NULL);
  if (expect_refused(self, s, refuser, "pstate_all_gatherv", "counts is NULL", "all_gatherv, counts NULL")) return 1;
  fill(a_, counts[me], tag + 1, me);
  RANK_OK(self, pstate_all_gatherv(g, a_, b_, counts, PSTATE_INT32, NULL));
  if (check_values(self, b_, counts[0], tag + 1, 0, 1, "all_gatherv after the refused one, part 0")) return 1;
  return check_values(self, b_ + counts[0], counts[1], tag + 1, 1, 1, "all_gatherv after the refused one, part 1");
}

/* broadcast_object: a rank other than the source refuses its NULL out. */
static int broadcast_object_receiver_refuses_out(const pstate_test_rank_t *self, pstate_group_t *g) {
  const int me = self->rank, src = 0;
  pstate_bytes_t out = {NULL, 0};
  pstate_status_t s = pstate_broadcast_object(g, "first", 5, src, me == src ? &out : NULL);
  if (expect_refused(self, s, 1, "pstate_broadcast_object", "out is NULL", "broadcast_object, receiver's out NULL"))
    return 1;
  RANK_OK(self, pstate_broadcast_object(g, "second", 6, src, &out));
  RANK_CHECK(self, out.size == 6 && memcmp(out.data, "second", 6) == 0, "the broadcast_object after the refused one: "
             "%zu bytes", out.size);
  pstate_bytes_free(&out);
  return 0;
}

static int refusal_rank(const pstate_test_rank_t *self) {
  const job_t *job = self->arg;
  if (job->shm) setenv("PSTATE_SHM", job->shm, 1);
  else unsetenv("PSTATE_SHM");
  if (job->check) setenv("PSTATE_CHECK", job->check, 1);
  else unsetenv("PSTATE_CHECK");
  a_ = calloc(2 * BIG + 2, sizeof *a_);
  b_ = calloc(2 * BIG + 2, sizeof *b_);
  RANK_CHECK(self, a_ && b_, "out of memory");
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 10000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const size_t sizes[2] = {2, BIG};
  int tag = 1;
  for (int k = 0; k < 2; ++k, tag += 20) {
    const size_t n = sizes[k];
    for (int root = 0; root < 2; ++root) {
      if (gather_root_refuses_recv(self, g, n, root, tag) || check_refusal_text(self)) return 1;
      if (gather_root_refuses_overlap(self, g, n, root, tag + 2) || check_refusal_text(self)) return 1;
      if (reduce_root_refuses_recv(self, g, n, root, tag + 4) || check_refusal_text(self)) return 1;
      if (scatter_root_refuses_send(self, g, n, root, tag + 6) || check_refusal_text(self)) return 1;
      if (all_reduce_one_rank_refuses_send(self, g, n, root, tag + 8) || check_refusal_text(self)) return 1;
      if (broadcast_one_rank_refuses_buf(self, g, n, root, tag + 10) || check_refusal_text(self)) return 1;
      if (all_gather_one_rank_refuses_recv(self, g, n, root, tag + 12) || check_refusal_text(self)) return 1;
      if (reduce_scatter_one_rank_refuses_recv(self, g, n, root, tag + 14) || check_refusal_text(self)) return 1;
      if (all_to_all_one_rank_refuses_send(self, g, n, root, tag + 16) || check_refusal_text(self)) return 1;
      if (all_gatherv_one_rank_refuses_counts(self, g, n, root, tag + 18) || check_refusal_text(self)) return 1;
    }
  }
  if (broadcast_object_receiver_refuses_out(self, g) || check_refusal_text(self)) return 1;
  /* still in step: a barrier and a last all_reduce pair with each other */
  RANK_OK(self, pstate_barrier(g));
  int32_t x = self->rank + 1;
  RANK_OK(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == 3, "the last all_reduce: %d", x);
  RANK_OK(self, pstate_finalize(ps));
  free(a_), free(b_);
  return 0;
}

static void run_job(const char *shm, const char *check) {
  job_t job = {shm, check};
  assert_int_equal(pstate_test_run_processes(2, 60, refusal_rank, &job, NULL), 0);
}

static void test_one_ranks_refusal_fails_the_call_on_every_rank_and_keeps_step_shm(void **state) {
  (void)state;
  run_job(NULL, NULL);
}

static void test_one_ranks_refusal_fails_the_call_on_every_rank_and_keeps_step_ucx(void **state) {
  (void)state;
  run_job("0", NULL);
}

static void test_one_ranks_refusal_fails_the_call_on_every_rank_and_keeps_step_shm_check(void **state) {
  (void)state;
  run_job(NULL, "1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_ranks_refusal_fails_the_call_on_every_rank_and_keeps_step_shm),
      cmocka_unit_test(test_one_ranks_refusal_fails_the_call_on_every_rank_and_keeps_step_ucx),
      cmocka_unit_test(test_one_ranks_refusal_fails_the_call_on_every_rank_and_keeps_step_shm_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
