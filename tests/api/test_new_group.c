/*
 * test_new_group.c — pstate_new_group (SGLang's create_custom_parallel_group, vLLM's new_group)
 * through the public API, on real processes and as threads.
 *
 * Partitions of unequal sizes (world 4 -> {0,1,2} {3}; world 5 -> {0,3} {1,2,4}; world 5 ->
 * {0,3} {1,4} with rank 2 joining none): each group's facts (kind, name, size, ranks), then every
 * collective and point-to-point call of pstate.h on it (all_reduce, all_gather, reduce_scatter,
 * broadcast, gather, all_to_all, reduce, scatter, barrier, send/recv around a ring, the object
 * calls and a tensor dict), interleaved with world and tp collectives, against references computed
 * here from the global ranks; over shared memory and over UCX (PSTATE_SHM=0). A second call makes
 * one group of every rank: names go on counting, the groups of both calls stay apart. Every
 * error path is reported on every rank with the offending ranks named, and the world stays
 * usable after each. destroy_model_parallel retires custom groups (calls on them: INVALID_STATE,
 * facts still readable), also when they are the only groups; new_group works again afterwards.
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

#define MAX_WORLD 8
#define BIG 70001 /* past the shared memory's inline size and UCX's small-message algorithms */

/* A partition: group_of[r] = index of rank r's group in groups, or -1 (joins none). */
typedef struct partition_t {
  int world;
  int ngroups;
  int sizes[MAX_WORLD];
  int ranks[MAX_WORLD][MAX_WORLD];
  int ucx; /* PSTATE_SHM=0 */
} partition_t;

static const partition_t kWorld4 = {4, 2, {3, 1}, {{0, 1, 2}, {3}}, 0};
static const partition_t kWorld5 = {5, 2, {2, 3}, {{0, 3}, {1, 2, 4}}, 0};
static const partition_t kWorld5Ucx = {5, 2, {2, 3}, {{0, 3}, {1, 2, 4}}, 1};
static const partition_t kWorld5None = {5, 2, {2, 2}, {{0, 3}, {1, 4}}, 0};

static int group_of(const partition_t *p, int rank, int *rank_in_group) {
  for (int g = 0; g < p->ngroups; ++g)
    for (int i = 0; i < p->sizes[g]; ++i)
      if (p->ranks[g][i] == rank) {
        *rank_in_group = i;
        return g;
      }
  return -1;
}

/* The value global rank r contributes at index i. */
static int32_t value(int r, size_t i) { return (int32_t)((r + 1) * 1000 + (int32_t)(i % 997)); }

static int check_collectives_in(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                               int32_t *send, int32_t *recv) {
  const size_t counts[2] = {3, BIG};
  for (int c = 0; c < 2; ++c) {
    size_t count = counts[c];
    /* all_reduce: sum over the group's global ranks */
    for (size_t i = 0; i < count; ++i) send[i] = value(self->rank, i);
    RANK_OK(self, pstate_all_reduce(g, send, recv, count, PSTATE_INT32, PSTATE_SUM, NULL));
    for (size_t i = 0; i < count; ++i) {
      int32_t want = 0;
      for (int k = 0; k < n; ++k) want += value(ranks[k], i);
      RANK_CHECK(self, recv[i] == want, "all_reduce count %zu [%zu] = %d, want %d", count, i, recv[i], want);
    }
    /* all_gather: block k is group rank k's values */
    RANK_OK(self, pstate_all_gather(g, send, recv, count, PSTATE_INT32, NULL));
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < count; ++i)
        RANK_CHECK(self, recv[(size_t)k * count + i] == value(ranks[k], i), "all_gather block %d [%zu]", k, i);
  }
  const size_t m = 5;
  /* reduce_scatter: send block k holds (rank+1)*(k+1)+i; rank `me` gets the sum of its block */
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < m; ++i) send[(size_t)k * m + i] = (self->rank + 1) * (k + 1) + (int32_t)i;
  RANK_OK(self, pstate_reduce_scatter(g, send, recv, m, PSTATE_INT32, PSTATE_SUM, NULL));
  for (size_t i = 0; i < m; ++i) {
    int32_t want = 0;
    for (int k = 0; k < n; ++k) want += (ranks[k] + 1) * (me + 1) + (int32_t)i;
    RANK_CHECK(self, recv[i] == want, "reduce_scatter [%zu] = %d, want %d", i, recv[i], want);
  }
  /* broadcast, gather, reduce, scatter with the root at the last group rank */
  const int root = n - 1;
  for (size_t i = 0; i < m; ++i) recv[i] = me == root ? value(self->rank, i) : -1;
  RANK_OK(self, pstate_broadcast(g, recv, m, PSTATE_INT32, root, NULL));
  for (size_t i = 0; i < m; ++i) RANK_CHECK(self, recv[i] == value(ranks[root], i), "broadcast [%zu]", i);
  for (size_t i = 0; i < m; ++i) send[i] = value(self->rank, i);
  RANK_OK(self, pstate_gather(g, send, recv, m, PSTATE_INT32, root, NULL));
  if (me == root)
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < m; ++i) RANK_CHECK(self, recv[(size_t)k * m + i] == value(ranks[k], i), "gather %d", k);
  RANK_OK(self, pstate_reduce(g, send, me == root ? recv : NULL, m, PSTATE_INT32, PSTATE_MAX, root, NULL));
  if (me == root)
    for (size_t i = 0; i < m; ++i) RANK_CHECK(self, recv[i] == value(ranks[n - 1], i), "reduce max [%zu]", i);
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < m; ++i) send[(size_t)k * m + i] = value(self->rank, i) * 10 + k;
  RANK_OK(self, pstate_scatter(g, me == root ? send : NULL, recv, m, PSTATE_INT32, root, NULL));
  for (size_t i = 0; i < m; ++i) RANK_CHECK(self, recv[i] == value(ranks[root], i) * 10 + me, "scatter [%zu]", i);
  /* all_to_all: block k of rank `me` goes to group rank k */
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < m; ++i) send[(size_t)k * m + i] = (self->rank + 1) * 100 + k * 10 + (int32_t)i;
  RANK_OK(self, pstate_all_to_all(g, send, recv, m, PSTATE_INT32, NULL));
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < m; ++i)
      RANK_CHECK(self, recv[(size_t)k * m + i] == (ranks[k] + 1) * 100 + me * 10 + (int32_t)i, "all_to_all %d", k);
  RANK_OK(self, pstate_barrier(g));
  return 0;
}

static int check_collectives(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me) {
  int32_t *send = malloc(sizeof(int32_t) * BIG * MAX_WORLD), *recv = malloc(sizeof(int32_t) * BIG * MAX_WORLD);
  RANK_CHECK(self, send != NULL && recv != NULL, "malloc");
  int failed = check_collectives_in(self, g, ranks, n, me, send, recv);
  free(send);
  free(recv);
  return failed;
}

static int check_p2p_and_objects(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me) {
  int32_t out[4], in[4];
  if (n > 1) { /* a ring: even group ranks send first, odd ones receive first */
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (int i = 0; i < 4; ++i) out[i] = value(self->rank, (size_t)i);
    if (me % 2 == 0) {
      RANK_OK(self, pstate_send(g, out, 4, PSTATE_INT32, next, NULL));
      RANK_OK(self, pstate_recv(g, in, 4, PSTATE_INT32, prev, NULL));
    } else {
      RANK_OK(self, pstate_recv(g, in, 4, PSTATE_INT32, prev, NULL));
      RANK_OK(self, pstate_send(g, out, 4, PSTATE_INT32, next, NULL));
    }
    for (int i = 0; i < 4; ++i) RANK_CHECK(self, in[i] == value(ranks[prev], (size_t)i), "ring recv [%d]", i);
    char text[32];
    if (me == 0) {
      snprintf(text, sizeof text, "from %d", self->rank);
      RANK_OK(self, pstate_send_object(g, text, strlen(text) + 1, n - 1));
    } else if (me == n - 1) {
      pstate_bytes_t b = {NULL, 0};
      RANK_OK(self, pstate_recv_object(g, 0, &b));
      snprintf(text, sizeof text, "from %d", ranks[0]);
      RANK_CHECK(self, b.size == strlen(text) + 1 && strcmp((const char *)b.data, text) == 0, "recv_object");
      pstate_bytes_free(&b);
    }
  }
  char mine[16];
  snprintf(mine, sizeof mine, "r%d", self->rank);
  pstate_bytes_t all = {NULL, 0};
  size_t sizes[MAX_WORLD];
  RANK_OK(self, pstate_all_gather_object(g, mine, strlen(mine), &all, sizes, MAX_WORLD, &(size_t){0}));
  size_t at = 0;
  for (int k = 0; k < n; ++k) {
    char want[16];
    snprintf(want, sizeof want, "r%d", ranks[k]);
    RANK_CHECK(self, sizes[k] == strlen(want) && memcmp((const char *)all.data + at, want, sizes[k]) == 0,
               "all_gather_object part %d", k);
    at += sizes[k];
  }
  pstate_bytes_free(&all);
  pstate_bytes_t b = {NULL, 0};
  RANK_OK(self, pstate_broadcast_object(g, mine, strlen(mine) + 1, 0, &b));
  char want[16];
  snprintf(want, sizeof want, "r%d", ranks[0]);
  RANK_CHECK(self, b.size == strlen(want) + 1 && strcmp((const char *)b.data, want) == 0, "broadcast_object");
  pstate_bytes_free(&b);
  return 0;
}

static void *dict_alloc(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                        size_t bytes, pstate_device_t device) {
  (void)name, (void)dtype, (void)ndim, (void)shape, (void)device;
  return bytes <= 64 * sizeof(int32_t) ? user : NULL;
}

static int check_tensor_dict(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me) {
  int32_t data[6];
  for (int i = 0; i < 6; ++i) data[i] = value(self->rank, (size_t)i);
  int64_t shape[2] = {2, 3};
  pstate_tensor_t t = PSTATE_TENSOR_INIT;
  t.name = "hidden";
  t.dtype = PSTATE_INT32;
  t.ndim = 2;
  t.shape = shape;
  t.data = data;
  int32_t got[64];
  memset(got, 0, sizeof got);
  RANK_OK(self, pstate_broadcast_tensor_dict(g, me == 0 ? &t : NULL, me == 0 ? 1 : 0, 0, dict_alloc, got, NULL));
  if (me != 0)
    for (int i = 0; i < 6; ++i) RANK_CHECK(self, got[i] == value(ranks[0], (size_t)i), "dict [%d]", i);
  return 0;
}

static int check_group(const pstate_test_rank_t *self, pstate_group_t *g, const int *ranks, int n, int me,
                       int name_index) {
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(g, &info));
  char name[32];
  snprintf(name, sizeof name, "custom:%d", name_index);
  RANK_CHECK(self, info.kind == PSTATE_GROUP_CUSTOM && info.world_size == n && info.rank_in_group == me &&
                       info.rank == self->rank && info.first_rank == ranks[0] && info.last_rank == ranks[n - 1] &&
                       strcmp(info.name, name) == 0,
             "info: kind %d size %d rank_in_group %d name %s (want %s)", (int)info.kind, info.world_size,
             info.rank_in_group, info.name, name);
  int got[MAX_WORLD];
  size_t count = 0;
  RANK_OK(self, pstate_group_ranks(g, got, MAX_WORLD, &count));
  RANK_CHECK(self, count == (size_t)n && memcmp(got, ranks, (size_t)n * sizeof(int)) == 0, "group ranks");
  if (check_collectives(self, g, ranks, n, me)) return 1;
  if (check_p2p_and_objects(self, g, ranks, n, me)) return 1;
  return check_tensor_dict(self, g, ranks, n, me);
}

static int world_sum_is_right(const pstate_test_rank_t *self, pstate_t *ps) {
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  int32_t x = self->rank + 1;
  RANK_OK(self, pstate_all_reduce(w, &x, &x, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == self->world_size * (self->world_size + 1) / 2, "world sum %d", x);
  return 0;
}

#define RANK_DESTROYED(self, call)                                                                        \
  do {                                                                                                    \
    pstate_status_t s_ = (call);                                                                          \
    RANK_CHECK(self, s_ == PSTATE_ERR_INVALID_STATE && strstr(pstate_last_error(), "destroyed"),          \
               "%s on a destroyed group: %s (%s)", #call, pstate_status_string(s_), pstate_last_error());  \
  } while (0)

static int partition_rank(const pstate_test_rank_t *self) {
  const partition_t *p = (const partition_t *)self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  /* tp 1 on the world of 5, tp 2 on 4: model-parallel groups live beside the custom ones */
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = self->world_size % 2 == 0 ? 2 : 1;
  cfg.pipeline_parallel_size = self->world_size / cfg.tensor_parallel_size;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  int me = -1;
  int gi = group_of(p, self->rank, &me);
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_new_group(ps, gi >= 0 ? p->ranks[gi] : NULL, gi >= 0 ? (size_t)p->sizes[gi] : 0, &g));
  if (gi < 0) {
    RANK_CHECK(self, g == NULL, "a rank that joins none gets NULL");
  } else {
    /* names count the groups of the call in order of their first rank */
    int index = 0;
    for (int k = 0; k < p->ngroups; ++k) index += p->ranks[k][0] < p->ranks[gi][0];
    if (check_group(self, g, p->ranks[gi], p->sizes[gi], me, index)) return 1;
  }
  pstate_group_t *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  int32_t one = 1;
  RANK_OK(self, pstate_all_reduce(tp, &one, &one, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, one == cfg.tensor_parallel_size, "tp sum %d", one);
  if (world_sum_is_right(self, ps)) return 1;
  /* a second call: every rank in one group, named after the first call's groups */
  int everyone[MAX_WORLD];
  for (int r = 0; r < self->world_size; ++r) everyone[r] = r;
  pstate_group_t *all = NULL;
  RANK_OK(self, pstate_new_group(ps, everyone, (size_t)self->world_size, &all));
  if (check_group(self, all, everyone, self->world_size, self->rank, p->ngroups)) return 1;
  if (g != NULL && check_collectives(self, g, p->ranks[gi], p->sizes[gi], me)) return 1; /* the first still works */
  /* destroy_model_parallel retires the custom groups with the others */
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  int32_t x = 1;
  RANK_DESTROYED(self, pstate_all_reduce(all, &x, &x, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_DESTROYED(self, pstate_barrier(all));
  if (g != NULL) {
    RANK_DESTROYED(self, pstate_broadcast(g, &x, 1, PSTATE_INT32, 0, NULL));
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(g, &info));
    RANK_CHECK(self, info.kind == PSTATE_GROUP_CUSTOM && info.world_size == p->sizes[gi], "facts after destroy");
  }
  if (world_sum_is_right(self, ps)) return 1;
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static int run_processes(const partition_t *p) {
  if (p->ucx) setenv("PSTATE_SHM", "0", 1);
  int failed = pstate_test_run_processes(p->world, 60, partition_rank, (void *)p, NULL);
  unsetenv("PSTATE_SHM");
  return failed;
}

static void test_world_4_splits_into_3_and_1(void **state) {
  (void)state;
  assert_int_equal(run_processes(&kWorld4), 0);
}

static void test_world_5_splits_into_2_and_3(void **state) {
  (void)state;
  assert_int_equal(run_processes(&kWorld5), 0);
}

static void test_world_5_splits_into_2_and_3_over_ucx(void **state) {
  (void)state;
  assert_int_equal(run_processes(&kWorld5Ucx), 0);
}

static void test_a_rank_may_join_none(void **state) {
  (void)state;
  assert_int_equal(run_processes(&kWorld5None), 0);
}

static void test_threads_world_4_splits_into_3_and_1(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(4, 60, partition_rank, (void *)&kWorld4), 0);
}

/* ---- errors: on every rank, naming the offending ranks; the world stays usable ------------- */

/* Every rank calls new_group with lists[rank] (count -1: NULL with count 2) and expects status
 * with every one of the texts in its message. */
typedef struct bad_case_t {
  const char *what;
  int counts[4];
  int lists[4][4];
  pstate_status_t status;
  const char *texts[3];
} bad_case_t;

static const bad_case_t kBadCases[] = {
    {"unsorted", {2, 2, 2, 2}, {{0, 1}, {1, 0}, {2, 3}, {2, 3}}, PSTATE_ERR_INVALID_ARGUMENT,
     {"rank 1 passed {1,0}", "not strictly ascending", "every rank got this error"}},
    {"out of range", {2, 2, 3, 2}, {{0, 1}, {0, 1}, {2, 3, 4}, {2, 3}}, PSTATE_ERR_INVALID_ARGUMENT,
     {"rank 2 passed {2,3,4}", "4 is not a world rank (0..3)", NULL}},
    {"negative", {2, 2, 2, 2}, {{-1, 0}, {1, 2}, {1, 2}, {-1, 3}}, PSTATE_ERR_INVALID_ARGUMENT,
     {"rank 0 passed {-1,0}", "rank 3 passed {-1,3}", NULL}},
    {"caller missing", {2, 2, 2, 2}, {{0, 1}, {0, 1}, {2, 3}, {0, 1}}, PSTATE_ERR_INVALID_ARGUMENT,
     {"rank 3 passed {0,1}", "does not contain rank 3", NULL}},
    {"too long", {2, 2, 2, 5}, {{0, 1}, {0, 1}, {2, 3}, {0, 1, 2, 3}}, PSTATE_ERR_INVALID_ARGUMENT,
     {"rank 3 passed 5 ranks, more than the world's 4", NULL, NULL}},
    {"NULL", {-1, 2, 2, 2}, {{0}, {0, 1}, {2, 3}, {2, 3}}, PSTATE_ERR_INVALID_ARGUMENT,
     {"rank 0 passed ranks NULL with count 2", NULL, NULL}},
    {"overlap", {2, 2, 3, 3}, {{0, 1}, {0, 1}, {1, 2, 3}, {1, 2, 3}}, PSTATE_ERR_INVALID_ARGUMENT,
     {"{0,1} (passed by ranks 0,1) and {1,2,3} (passed by ranks 2,3) overlap at rank {1}", "may not overlap", NULL}},
    {"disagree", {2, 2, 2, 0}, {{0, 1}, {0, 1}, {2, 3}, {0}}, PSTATE_ERR_MISMATCH,
     {"rank 2 passed {2,3} but rank 3 passed count 0", "must pass the same list", NULL}},
};
#define N_BAD (sizeof kBadCases / sizeof kBadCases[0])

static int errors_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  for (size_t c = 0; c < N_BAD; ++c) {
    const bad_case_t *b = &kBadCases[c];
    int n = b->counts[self->rank];
    pstate_group_t *g = (pstate_group_t *)&ps; /* must come back NULL */
    pstate_status_t s = pstate_new_group(ps, n < 0 ? NULL : b->lists[self->rank], n < 0 ? 2 : (size_t)n, &g);
    RANK_CHECK(self, s == b->status && g == NULL, "%s: %s (%s), want %s", b->what, pstate_status_string(s),
               pstate_last_error(), pstate_status_string(b->status));
    for (int t = 0; t < 3; ++t)
      RANK_CHECK(self, b->texts[t] == NULL || strstr(pstate_last_error(), b->texts[t]) != NULL,
                 "%s: message lacks \"%s\": %s", b->what, b->texts[t], pstate_last_error());
    if (world_sum_is_right(self, ps)) return 1; /* the world stays usable */
  }
  /* local refusals: out NULL, a context NULL, the custom kind asked of pstate_get_group */
  int mine[1] = {self->rank};
  pstate_status_t s = pstate_new_group(ps, mine, 1, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "out"), "out NULL: %s",
             pstate_last_error());
  pstate_group_t *g = NULL;
  RANK_CHECK(self, pstate_new_group(NULL, mine, 1, &g) == PSTATE_ERR_INVALID_ARGUMENT && g == NULL, "ps NULL");
  s = pstate_get_group(ps, PSTATE_GROUP_CUSTOM, &g);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "pstate_new_group"),
             "get_group custom: %s", pstate_last_error());
  /* nothing to destroy yet */
  RANK_CHECK(self, pstate_destroy_model_parallel(ps) == PSTATE_ERR_INVALID_STATE, "destroy with no groups");
  /* after all that, a good call works: each rank alone, through the dlopen table */
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  RANK_CHECK(self, api != NULL && api->new_group == pstate_new_group, "dlopen table");
  RANK_OK(self, api->new_group(ps, mine, 1, &g));
  int32_t x = 7, y = 0;
  RANK_OK(self, pstate_all_reduce(g, &x, &y, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, y == 7, "one-rank all_reduce %d", y);
  /* only custom groups exist: destroy retires them, a second destroy has nothing to do */
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_DESTROYED(self, pstate_all_reduce(g, &x, &y, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, pstate_destroy_model_parallel(ps) == PSTATE_ERR_INVALID_STATE, "second destroy");
  if (world_sum_is_right(self, ps)) return 1;
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_every_error_is_reported_on_every_rank(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 60, errors_rank, NULL, NULL), 0);
}

static void test_every_error_is_reported_on_every_rank_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(4, 60, errors_rank, NULL), 0);
}

/* 2047 calls may live at once (the custom group ids of the tag; the last id carries failure notices); the next is INVALID_STATE on every
 * rank until destroy_model_parallel releases them. Calls that make no group count too. */
static int exhaust_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_group_t *g = NULL;
  for (int i = 0; i < 2047; ++i) RANK_OK(self, pstate_new_group(ps, NULL, 0, &g));
  pstate_status_t s = pstate_new_group(ps, NULL, 0, &g);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_STATE && strstr(pstate_last_error(), "pstate_destroy_model_parallel"),
             "call 2048: %s (%s)", pstate_status_string(s), pstate_last_error());
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  int both[2] = {0, 1};
  RANK_OK(self, pstate_new_group(ps, both, 2, &g));
  if (world_sum_is_right(self, ps)) return 1;
  int32_t x = 1;
  RANK_OK(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == 2, "sum %d", x);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_at_most_2047_calls_live_until_destroy(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(2, 60, exhaust_rank, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_world_4_splits_into_3_and_1),
      cmocka_unit_test(test_world_5_splits_into_2_and_3),
      cmocka_unit_test(test_world_5_splits_into_2_and_3_over_ucx),
      cmocka_unit_test(test_a_rank_may_join_none),
      cmocka_unit_test(test_threads_world_4_splits_into_3_and_1),
      cmocka_unit_test(test_every_error_is_reported_on_every_rank),
      cmocka_unit_test(test_every_error_is_reported_on_every_rank_threads),
      cmocka_unit_test(test_at_most_2047_calls_live_until_destroy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
