/*
 * test_abi_conventions.c — the conventions of pstate.h's ABI 1.0 (docs/abi.md, "Conventions"),
 * one test or more per convention, each of which fails when the library does not keep it.
 *
 * Structs: a struct_size below a struct's 1.0 size is refused naming its initializer; a larger one
 * (a caller built against a newer pstate.h, modelled by a wrapper struct with fields appended) works
 * when its tail is zero and is INVALID_ARGUMENT naming the first nonzero byte's offset otherwise
 * (init params, parallel config); pstate_group_info writes only the caller's struct_size bytes.
 * Struct arrays: pstate_p2p_batch's ops and a tensor dict's tensors are walked by struct_size (a
 * batch and a dict of wrapper elements move the right bytes between 2 processes, and a sliced
 * dict between the pipeline stages of 4); an element whose struct_size differs from element 0's
 * is refused naming its index, on every rank of a broadcast and on both ends of a sliced dict. A tensor of the 1.0 size (smaller than this header's, which has tail padding) works.
 * Returned arrays: *count holds the whole answer's size on a too-small capacity
 * (pstate_group_same_node, pstate_all_gather_object: there on every rank at once, and
 * pstate_shrink's too-small map is refused before anything is done). Out-parameters: NULL / 0 /
 * {NULL, 0} after every kind of error. Timeouts: int64_t (checked by the compiler: a function
 * pointer of the 1.0 type). Group kinds: custom outside the layout range. The dlopen table:
 * every member is the function of its name.
 * Expected values are computed here from the inputs (sums of rank-dependent patterns), never by
 * the library under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect_error.h"
#include "ranks.h"

#define TIMEOUT_MS 20000

static int contains(const char *text, const char *needle) { return text != NULL && strstr(text, needle) != NULL; }

/* A caller built against a newer pstate.h: each struct with fields appended after it. */
typedef struct {
  pstate_parallel_config_t c;
  int64_t newer[2];
} newer_config_t;
typedef struct {
  pstate_init_params_t p;
  int64_t newer[2];
} newer_params_t;
typedef struct {
  pstate_group_info_t info;
  unsigned char newer[16];
} newer_info_t;
typedef struct {
  pstate_p2p_op_t op;
  uint64_t newer[3];
} newer_op_t;
typedef struct {
  pstate_tensor_t t;
  uint64_t newer[2];
} newer_tensor_t;

/* ---- Structs --------------------------------------------------------------------------------- */

static void test_struct_smaller_than_its_1_0_size_is_refused(void **state) {
  (void)state;
  /* The 1.0 size: the end of the struct's last 1.0 member. */
  const size_t oldest = offsetof(pstate_parallel_config_t, shared_experts_tensor_parallel_size) + sizeof(int);
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = (pstate_layout_t *)&cfg;
  cfg.tensor_parallel_size = 0; /* the whole world */
  cfg.struct_size = oldest - 1;
  PSTATE_EXPECT_ERROR(pstate_layout_create(4, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_PARALLEL_CONFIG_INIT");
  assert_null(l);
  cfg.struct_size = oldest;
  PSTATE_EXPECT_OK(pstate_layout_create(4, &cfg, &l));
  pstate_layout_destroy(l);
}

static void test_larger_struct_with_zero_tail_works(void **state) {
  (void)state;
  newer_config_t n;
  memset(&n, 0, sizeof n);
  pstate_parallel_config_t init = PSTATE_PARALLEL_CONFIG_INIT;
  n.c = init;
  n.c.struct_size = sizeof n;
  n.c.tensor_parallel_size = 2;
  n.c.pipeline_parallel_size = 2;
  pstate_layout_t *l = NULL;
  PSTATE_EXPECT_OK(pstate_layout_create(4, &n.c, &l));
  size_t groups = 0;
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_TP, &groups));
  assert_int_equal(groups, 4 / 2); /* the fields before the tail were read: tp 2 of 4 */
  pstate_layout_destroy(l);
}

static void test_larger_struct_with_nonzero_tail_names_the_offset(void **state) {
  (void)state;
  newer_config_t n;
  memset(&n, 0, sizeof n);
  pstate_parallel_config_t init = PSTATE_PARALLEL_CONFIG_INIT;
  n.c = init;
  n.c.struct_size = sizeof n;
  n.newer[1] = 7; /* the first nonzero byte: little-endian, the low byte of newer[1] */
  char offset[64];
  snprintf(offset, sizeof offset, "offset %zu", offsetof(newer_config_t, newer[1]));
  pstate_layout_t *l = (pstate_layout_t *)&n;
  PSTATE_EXPECT_ERROR(pstate_layout_create(4, &n.c, &l), PSTATE_ERR_INVALID_ARGUMENT, offset);
  assert_true(contains(pstate_last_error(), "newer pstate.h"));
  assert_true(contains(pstate_last_error(), "pstate_parallel_config_t"));
  assert_null(l);

  newer_params_t p;
  memset(&p, 0, sizeof p);
  pstate_init_params_t pinit = PSTATE_INIT_PARAMS_INIT;
  p.p = pinit;
  p.p.struct_size = sizeof p;
  p.newer[0] = 1;
  snprintf(offset, sizeof offset, "offset %zu", offsetof(newer_params_t, newer[0]));
  pstate_t *ps = (pstate_t *)&p;
  PSTATE_EXPECT_ERROR(pstate_init(&p.p, &ps), PSTATE_ERR_INVALID_ARGUMENT, offset);
  assert_true(contains(pstate_last_error(), "pstate_init_params_t"));
  assert_null(ps);
}

/* A world of one, made with a newer caller's init params (zero tail): that works too. */
static int setup_world_of_one(void **state) {
  char method[64];
  snprintf(method, sizeof method, "tcp://127.0.0.1:%d", pstate_test_free_port());
  newer_params_t n;
  memset(&n, 0, sizeof n);
  pstate_init_params_t init = PSTATE_INIT_PARAMS_INIT;
  n.p = init;
  n.p.struct_size = sizeof n;
  n.p.init_method = method;
  n.p.rank = 0;
  n.p.world_size = 1;
  n.p.local_rank = 0;
  n.p.timeout_ms = TIMEOUT_MS;
  pstate_t *ps = NULL;
  if (pstate_init(&n.p, &ps) != PSTATE_OK) {
    fprintf(stderr, "pstate_init: %s\n", pstate_last_error());
    return 1;
  }
  *state = ps;
  return 0;
}
static int teardown_world_of_one(void **state) { return pstate_finalize((pstate_t *)*state) != PSTATE_OK; }

static pstate_group_t *world(void **state) {
  pstate_group_t *g = NULL;
  PSTATE_EXPECT_OK(pstate_get_group((pstate_t *)*state, PSTATE_GROUP_WORLD, &g));
  return g;
}

static void test_group_info_writes_only_the_callers_size(void **state) {
  pstate_group_t *g = world(state);
  newer_info_t n;
  memset(&n, 0xab, sizeof n);
  pstate_group_info_t init = PSTATE_GROUP_INFO_INIT;
  n.info = init;
  n.info.struct_size = sizeof n;
  PSTATE_EXPECT_OK(pstate_group_info(g, &n.info));
  assert_int_equal(n.info.struct_size, sizeof n); /* the caller's, kept */
  assert_int_equal(n.info.world_size, 1);
  assert_string_equal(n.info.name, "world:0");
  for (size_t i = 0; i < sizeof n.newer; ++i) assert_int_equal(n.newer[i], 0xab); /* not written */
  pstate_group_info_t small = PSTATE_GROUP_INFO_INIT;
  small.struct_size = offsetof(pstate_group_info_t, name);
  small.world_size = 42;
  PSTATE_EXPECT_ERROR(pstate_group_info(g, &small), PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_GROUP_INFO_INIT");
  assert_int_equal(small.world_size, 42); /* an out struct is left as it was on error */
}

/* ---- Returned arrays and out-parameters (a world of one) ------------------------------------- */

static void test_returned_arrays_set_count_on_a_small_capacity(void **state) {
  pstate_group_t *g = world(state);
  size_t count = 99;
  PSTATE_EXPECT_ERROR(pstate_group_same_node(g, 0, NULL, 0, &count), PSTATE_ERR_INVALID_ARGUMENT, "capacity 0");
  assert_int_equal(count, 1);
  int flags[1] = {-1};
  PSTATE_EXPECT_OK(pstate_group_same_node(g, 0, flags, 1, &count));
  assert_int_equal(count, 1);
  assert_int_equal(flags[0], 1);
  count = 99;
  PSTATE_EXPECT_ERROR(pstate_group_same_node(g, 1, flags, 1, &count), PSTATE_ERR_INVALID_ARGUMENT, "root 1");
  assert_int_equal(count, 0); /* any other error: 0 */
  PSTATE_EXPECT_ERROR(pstate_group_same_node(g, 0, flags, 1, NULL), PSTATE_ERR_INVALID_ARGUMENT, "count is NULL");

  pstate_bytes_t out = {(void *)1, 5};
  count = 99;
  PSTATE_EXPECT_ERROR(pstate_all_gather_object(g, "x", 1, &out, NULL, 0, &count), PSTATE_ERR_INVALID_ARGUMENT,
                      "capacity 0");
  assert_int_equal(count, 1);
  assert_null(out.data);
  size_t sizes[1] = {0};
  PSTATE_EXPECT_OK(pstate_all_gather_object(g, "xyz", 3, &out, sizes, 1, &count));
  assert_int_equal(count, 1);
  assert_int_equal(sizes[0], 3);
  assert_int_equal(out.size, 3);
  pstate_bytes_free(&out);

  count = 99;
  int ranks[1];
  PSTATE_EXPECT_ERROR(pstate_group_ranks(NULL, ranks, 1, &count), PSTATE_ERR_INVALID_ARGUMENT, "g is NULL");
  assert_int_equal(count, 0);
}

static void test_out_parameters_are_cleared_on_error(void **state) {
  pstate_t *ps = (pstate_t *)*state;
  pstate_group_t *g = world(state);
  pstate_group_t *out_g = (pstate_group_t *)ps;
  PSTATE_EXPECT_ERROR(pstate_get_group(ps, PSTATE_GROUP_CUSTOM, &out_g), PSTATE_ERR_INVALID_ARGUMENT, "custom");
  assert_null(out_g);
  pstate_request_t *req = (pstate_request_t *)ps;
  PSTATE_EXPECT_ERROR(pstate_isend(g, "x", 1, PSTATE_UINT8, 0, NULL, &req), PSTATE_ERR_INVALID_ARGUMENT, "peer");
  assert_null(req);
  req = (pstate_request_t *)ps;
  PSTATE_EXPECT_ERROR(pstate_irecv(NULL, NULL, 0, PSTATE_UINT8, 0, NULL, &req), PSTATE_ERR_INVALID_ARGUMENT, "g");
  assert_null(req);
  int done = 7;
  PSTATE_EXPECT_ERROR(pstate_test(NULL, &done), PSTATE_ERR_INVALID_ARGUMENT, "req");
  assert_int_equal(done, 0);
  pstate_bytes_t bytes = {(void *)1, 5};
  PSTATE_EXPECT_ERROR(pstate_recv_object(g, 0, &bytes), PSTATE_ERR_INVALID_ARGUMENT, "peer");
  assert_null(bytes.data);
  assert_int_equal(bytes.size, 0);
  bytes.data = (void *)1, bytes.size = 5;
  PSTATE_EXPECT_ERROR(pstate_broadcast_object(g, "x", 1, 3, &bytes), PSTATE_ERR_INVALID_ARGUMENT, "root 3");
  assert_null(bytes.data);
  assert_int_equal(bytes.size, 0);
  void *stream = ps;
  PSTATE_EXPECT_ERROR(pstate_graph_capture_begin(NULL, NULL, &stream), PSTATE_ERR_INVALID_ARGUMENT, "ps");
  assert_null(stream);
  pstate_layout_t *l = (pstate_layout_t *)ps;
  PSTATE_EXPECT_ERROR(pstate_layout_create(0, NULL, &l), PSTATE_ERR_INVALID_ARGUMENT, "world_size");
  assert_null(l);
  size_t count = 99, index = 99;
  PSTATE_EXPECT_ERROR(pstate_layout_group_count(NULL, PSTATE_GROUP_TP, &count), PSTATE_ERR_INVALID_ARGUMENT, "layout");
  assert_int_equal(count, 0);
  PSTATE_EXPECT_ERROR(pstate_layout_group_of(NULL, PSTATE_GROUP_TP, 0, &index), PSTATE_ERR_INVALID_ARGUMENT, "layout");
  assert_int_equal(index, 0);
  count = 99;
  PSTATE_EXPECT_ERROR(pstate_live_ranks(NULL, NULL, 0, &count), PSTATE_ERR_INVALID_ARGUMENT, "ps");
  assert_int_equal(count, 0);
  count = 99;
  int map[1];
  PSTATE_EXPECT_ERROR(pstate_shrink(NULL, map, 1, &count), PSTATE_ERR_INVALID_ARGUMENT, "ps");
  assert_int_equal(count, 0);
}

/* ---- Group kinds, timeouts, the table -------------------------------------------------------- */

static void test_custom_kind_is_outside_the_layout_range(void **state) {
  (void)state;
  assert_true(PSTATE_GROUP_CUSTOM >= PSTATE_GROUP_FIRST_NON_LAYOUT_KIND);
  assert_true(PSTATE_GROUP_FIRST_NON_LAYOUT_KIND >= 1000);
  assert_int_equal(PSTATE_GROUP_EPLB, PSTATE_GROUP_KIND_COUNT - 1); /* the layout kinds end there */
  assert_null(pstate_group_kind_name((pstate_group_kind_t)PSTATE_GROUP_KIND_COUNT)); /* free for a layout kind */
  assert_string_equal(pstate_group_kind_name(PSTATE_GROUP_CUSTOM), "custom");
  pstate_layout_t *l = NULL;
  PSTATE_EXPECT_OK(pstate_layout_create(2, NULL, &l));
  size_t count = 0;
  PSTATE_EXPECT_ERROR(pstate_layout_group_count(l, PSTATE_GROUP_CUSTOM, &count), PSTATE_ERR_INVALID_ARGUMENT,
                      "pstate_new_group");
  pstate_layout_destroy(l);
}

static void test_timeouts_are_int64_milliseconds(void **state) {
  (void)state;
  /* -Werror makes a mismatched pointer type a build failure: the 1.0 types. */
  pstate_status_t (*grow)(pstate_t *, int64_t) = pstate_grow;
  pstate_status_t (*table_grow)(pstate_t *, int64_t) = pstate_get_api(PSTATE_ABI_MAJOR)->grow;
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  int64_t *field = &p.timeout_ms;
  *field = INT64_MAX;
  assert_true(grow == table_grow && p.timeout_ms == INT64_MAX);
  PSTATE_EXPECT_ERROR(pstate_grow(NULL, (int64_t)1 << 40), PSTATE_ERR_INVALID_ARGUMENT, "ps");
}

static void test_every_table_member_is_its_function(void **state) {
  (void)state;
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  assert_non_null(api);
  assert_int_equal(api->struct_size, sizeof(pstate_api_t));
#define SAME(x) assert_true((uintptr_t)api->x == (uintptr_t)pstate_##x)
  SAME(status_string);
  SAME(last_error);
  SAME(version);
  SAME(dtype_name);
  SAME(reduce_op_name);
  SAME(group_kind_name);
  SAME(dtype_size);
  SAME(layout_create);
  SAME(layout_group_count);
  SAME(layout_group_ranks);
  SAME(layout_group_of);
  SAME(layout_destroy);
  SAME(init);
  SAME(initialize_model_parallel);
  SAME(model_parallel_is_initialized);
  SAME(destroy_model_parallel);
  SAME(finalize);
  SAME(abort);
  SAME(set_interrupt_check);
  SAME(trace_dump);
  SAME(get_group);
  SAME(group_info);
  SAME(group_ranks);
  SAME(live_ranks);
  SAME(shrink);
  SAME(grow);
  SAME(new_group);
  SAME(group_same_node);
  SAME(all_reduce);
  SAME(all_gather);
  SAME(reduce_scatter);
  SAME(broadcast);
  SAME(gather);
  SAME(all_to_all);
  SAME(reduce);
  SAME(scatter);
  SAME(all_gatherv);
  SAME(reduce_scatterv);
  SAME(send);
  SAME(recv);
  SAME(barrier);
  SAME(tp_allreduce);
  SAME(tp_allgather);
  SAME(broadcast_object);
  SAME(all_gather_object);
  SAME(send_object);
  SAME(recv_object);
  SAME(bytes_free);
  SAME(broadcast_tensor_dict);
  SAME(send_tensor_dict);
  SAME(recv_tensor_dict);
  SAME(send_tensor_dict_sliced);
  SAME(recv_tensor_dict_sliced);
  SAME(isend);
  SAME(irecv);
  SAME(wait);
  SAME(test);
  SAME(p2p_batch);
  SAME(graph_capture_begin);
  SAME(graph_capture_end);
  /* 1.x additions, appended after the 1.0 table in their release order */
  SAME(mem_alloc);
  SAME(mem_free);
  SAME(mem_pool_reserve);
  SAME(mem_register);
  SAME(mem_deregister);
  SAME(mem_query);
  SAME(group_mem_stats);
  SAME(set_graph_registration);
  SAME(all_to_all_v);
  SAME(metrics_text);
  SAME(add_hook);
  SAME(remove_hook);
  SAME(group_set_timeout);
  SAME(group_timeout);
#undef SAME
  /* The 1.0 order follows the header's sections: a few landmarks. */
  assert_true(offsetof(pstate_api_t, status_string) < offsetof(pstate_api_t, layout_create));
  assert_true(offsetof(pstate_api_t, init) < offsetof(pstate_api_t, get_group));
  assert_true(offsetof(pstate_api_t, group_same_node) < offsetof(pstate_api_t, all_reduce));
  assert_true(offsetof(pstate_api_t, p2p_batch) < offsetof(pstate_api_t, graph_capture_end));
  assert_true(offsetof(pstate_api_t, graph_capture_end) < offsetof(pstate_api_t, mem_alloc));
  assert_true(offsetof(pstate_api_t, set_graph_registration) < offsetof(pstate_api_t, all_to_all_v));
}

/* ---- Struct arrays and returned arrays, on 2 and 3 processes ---------------------------------- */

static int32_t pattern(int sender, int op, int i) { return 1000 * sender + 100 * op + i; }

static void *alloc_cb(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                      size_t bytes, pstate_device_t device) {
  (void)dtype, (void)ndim, (void)shape, (void)device;
  void **mem = (void **)user;
  int slot = strcmp(name, "b") == 0;
  mem[slot] = malloc(bytes > 0 ? bytes : 1);
  return mem[slot];
}

#define EXPECT(self, call, status, text)                                                                      \
  do {                                                                                                       \
    pstate_status_t s_ = (call);                                                                             \
    RANK_CHECK(self, s_ == (status), "%s -> %s (%s)", #call, pstate_status_string(s_), pstate_last_error()); \
    RANK_CHECK(self, contains(pstate_last_error(), text), "%s: message '%s' lacks '%s'", #call,              \
               pstate_last_error(), text);                                                                   \
  } while (0)

static int arrays_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  const int me = self->rank, peer = 1 - me;
  /* A batch of wrapper ops (stride sizeof(newer_op_t)): two sends and two receives each. */
  int32_t out[2][4], in[2][4];
  newer_op_t ops[4];
  memset(ops, 0, sizeof ops);
  for (int k = 0; k < 4; ++k) {
    pstate_p2p_op_t init = PSTATE_P2P_OP_INIT;
    ops[k].op = init;
    ops[k].op.struct_size = sizeof(newer_op_t);
    ops[k].op.is_send = k < 2;
    ops[k].op.buf = k < 2 ? (void *)out[k] : (void *)in[k - 2];
    ops[k].op.count = 4;
    ops[k].op.dtype = PSTATE_INT32;
    ops[k].op.peer = peer;
  }
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 4; ++i) out[k][i] = pattern(me, k, i), in[k][i] = -1;
  RANK_OK(self, pstate_p2p_batch(w, &ops[0].op, 4, NULL));
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 4; ++i)
      RANK_CHECK(self, in[k][i] == pattern(peer, k, i), "op %d element %d: %d", k, i, in[k][i]);
  /* A differing element and a nonzero tail are refused, naming the element; nothing moves. */
  ops[2].op.struct_size = sizeof(pstate_p2p_op_t);
  EXPECT(self, pstate_p2p_batch(w, &ops[0].op, 4, NULL), PSTATE_ERR_INVALID_ARGUMENT, "ops[2].struct_size");
  ops[2].op.struct_size = sizeof(newer_op_t);
  ops[3].newer[2] = 1;
  EXPECT(self, pstate_p2p_batch(w, &ops[0].op, 4, NULL), PSTATE_ERR_INVALID_ARGUMENT, "ops[3]");
  EXPECT(self, pstate_p2p_batch(w, &ops[0].op, 4, NULL), PSTATE_ERR_INVALID_ARGUMENT, "newer pstate.h");

  /* A dict of wrapper tensors, rank 0 to rank 1. */
  int32_t a[3] = {pattern(0, 7, 0), pattern(0, 7, 1), pattern(0, 7, 2)};
  int64_t b = (int64_t)pattern(0, 8, 0);
  int64_t shape_a[1] = {3};
  newer_tensor_t dict[2];
  memset(dict, 0, sizeof dict);
  for (int k = 0; k < 2; ++k) {
    pstate_tensor_t init = PSTATE_TENSOR_INIT;
    dict[k].t = init;
    dict[k].t.struct_size = sizeof(newer_tensor_t);
  }
  dict[0].t.name = "a", dict[0].t.dtype = PSTATE_INT32, dict[0].t.ndim = 1, dict[0].t.shape = shape_a;
  dict[0].t.data = a;
  dict[1].t.name = "b", dict[1].t.dtype = PSTATE_INT64, dict[1].t.data = &b; /* a scalar */
  void *mem[2] = {NULL, NULL};
  if (me == 0) {
    RANK_OK(self, pstate_send_tensor_dict(w, &dict[0].t, 2, 1, NULL));
  } else {
    RANK_OK(self, pstate_recv_tensor_dict(w, 0, alloc_cb, mem, NULL));
    RANK_CHECK(self, mem[0] != NULL && mem[1] != NULL, "both tensors received");
    const int32_t *ga = (const int32_t *)mem[0];
    for (int i = 0; i < 3; ++i) RANK_CHECK(self, ga[i] == pattern(0, 7, i), "a[%d] = %d", i, ga[i]);
    RANK_CHECK(self, *(const int64_t *)mem[1] == pattern(0, 8, 0), "b = %lld", (long long)*(const int64_t *)mem[1]);
    free(mem[0]), free(mem[1]);
    mem[0] = mem[1] = NULL;
  }
  /* A tensor of the 1.0 size (no tail padding) is accepted: the smaller struct of an older caller. */
  pstate_tensor_t old = dict[0].t;
  old.struct_size = offsetof(pstate_tensor_t, device) + sizeof(pstate_device_t);
  if (me == 0) {
    RANK_OK(self, pstate_broadcast_tensor_dict(w, &old, 1, 0, NULL, NULL, NULL));
  } else {
    RANK_OK(self, pstate_broadcast_tensor_dict(w, NULL, 0, 0, alloc_cb, mem, NULL));
    RANK_CHECK(self, mem[0] != NULL && ((const int32_t *)mem[0])[2] == pattern(0, 7, 2), "old-size tensor");
    free(mem[0]);
    mem[0] = NULL;
  }
  /* A differing element on the root: every rank fails at once with the root's reason. */
  dict[1].t.struct_size = sizeof(pstate_tensor_t);
  pstate_status_t s = me == 0 ? pstate_broadcast_tensor_dict(w, &dict[0].t, 2, 0, NULL, NULL, NULL)
                              : pstate_broadcast_tensor_dict(w, NULL, 0, 0, alloc_cb, mem, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && contains(pstate_last_error(), "tensors[1].struct_size"),
             "%s: %s", pstate_status_string(s), pstate_last_error());
  free(mem[0]), free(mem[1]);
  RANK_OK(self, pstate_barrier(w)); /* the group is still usable */
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_struct_arrays_are_walked_by_struct_size(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, arrays_rank, NULL, NULL), 0);
}

/* 4 ranks, tp 2 x pp 2: stage 0 (ranks 0, 1) sends a sliced dict of wrapper tensors to stage 1
 * (ranks 2, 3) over pp, ag = tp; the receivers gather the whole tensor. Then a dict whose element 1
 * has another struct_size is refused on the senders, and the receivers fail instead of waiting. */
static int sliced_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 2;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *pp = NULL, *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_PP, &pp));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  int32_t h[8];
  for (int i = 0; i < 8; ++i) h[i] = pattern(3, 1, i);
  int64_t b = pattern(3, 2, 0), shape_h[1] = {8};
  newer_tensor_t dict[2];
  memset(dict, 0, sizeof dict);
  for (int k = 0; k < 2; ++k) {
    pstate_tensor_t init = PSTATE_TENSOR_INIT;
    dict[k].t = init;
    dict[k].t.struct_size = sizeof(newer_tensor_t);
  }
  dict[0].t.name = "a", dict[0].t.dtype = PSTATE_INT32, dict[0].t.ndim = 1, dict[0].t.shape = shape_h;
  dict[0].t.data = h;                                                  /* 8 elements: sliced in 2 */
  dict[1].t.name = "b", dict[1].t.dtype = PSTATE_INT64, dict[1].t.data = &b; /* a scalar: whole */
  void *mem[2] = {NULL, NULL};
  const int sender = self->rank < 2;
  if (sender) {
    RANK_OK(self, pstate_send_tensor_dict_sliced(pp, &dict[0].t, 2, 1, tp, NULL));
  } else {
    RANK_OK(self, pstate_recv_tensor_dict_sliced(pp, 0, tp, alloc_cb, mem, NULL));
    for (int i = 0; i < 8; ++i)
      RANK_CHECK(self, ((const int32_t *)mem[0])[i] == pattern(3, 1, i), "a[%d] = %d", i, ((const int32_t *)mem[0])[i]);
    RANK_CHECK(self, *(const int64_t *)mem[1] == pattern(3, 2, 0), "b");
    free(mem[0]), free(mem[1]);
    mem[0] = mem[1] = NULL;
  }
  dict[1].t.struct_size = sizeof(pstate_tensor_t);
  pstate_status_t s = sender ? pstate_send_tensor_dict_sliced(pp, &dict[0].t, 2, 1, tp, NULL)
                             : pstate_recv_tensor_dict_sliced(pp, 0, tp, alloc_cb, mem, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT || (!sender && s == PSTATE_ERR_ABORTED), "%s: %s",
             pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, s == PSTATE_ERR_ABORTED || contains(pstate_last_error(), "tensors[1].struct_size"), "%s",
             pstate_last_error());
  free(mem[0]), free(mem[1]);
  pstate_finalize(ps); /* a receiver's context may have failed with the refusal: finalize frees either way */
  return 0;
}

static void test_sliced_dicts_are_walked_by_struct_size(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 60, sliced_rank, NULL, NULL), 0);
}

/* 3 ranks: rank 1 passes a capacity of 2 to all_gather_object; every rank fails at once, and rank
 * 1's *count says 3. Then the same call with enough room works everywhere. */
static int capacity_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, TIMEOUT_MS, &ps));
  pstate_group_t *w = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w));
  size_t sizes[3] = {0, 0, 0}, count = 99;
  pstate_bytes_t out = {NULL, 0};
  char mine[4] = {'r', (char)('0' + self->rank), 0, 0};
  size_t len = (size_t)self->rank + 1;
  pstate_status_t s = pstate_all_gather_object(w, mine, len, &out, sizes, self->rank == 1 ? 2 : 3, &count);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT, "small capacity on rank 1: %s: %s", pstate_status_string(s),
             pstate_last_error());
  RANK_CHECK(self, count == (self->rank == 1 ? 3u : 0u), "*count %zu", count);
  RANK_CHECK(self, out.data == NULL && out.size == 0, "no bytes on error");
  RANK_OK(self, pstate_all_gather_object(w, mine, len, &out, sizes, 3, &count));
  RANK_CHECK(self, count == 3 && sizes[0] == 1 && sizes[1] == 2 && sizes[2] == 3 && out.size == 6, "sizes %zu %zu %zu",
             sizes[0], sizes[1], sizes[2]);
  pstate_bytes_free(&out);
  int flags[3];
  count = 0;
  RANK_CHECK(self, pstate_group_same_node(w, 2, flags, 2, &count) == PSTATE_ERR_INVALID_ARGUMENT && count == 3,
             "same_node's *count on a small capacity: %zu", count);
  RANK_OK(self, pstate_group_same_node(w, 2, flags, 3, &count));
  RANK_CHECK(self, flags[0] == 1 && flags[1] == 1 && flags[2] == 1, "one host");
  int map[2];
  count = 0;
  RANK_CHECK(self, pstate_shrink(ps, map, 2, &count) == PSTATE_ERR_INVALID_ARGUMENT && count == 3,
             "shrink's *count on a small capacity: %zu", count);
  int32_t one = 1, sum = 0; /* refused before anything was done: the world still works */
  RANK_OK(self, pstate_all_reduce(w, &one, &sum, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, sum == 3, "sum %d", sum);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_returned_arrays_count_on_every_rank(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 60, capacity_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_struct_smaller_than_its_1_0_size_is_refused),
      cmocka_unit_test(test_larger_struct_with_zero_tail_works),
      cmocka_unit_test(test_larger_struct_with_nonzero_tail_names_the_offset),
      cmocka_unit_test_setup_teardown(test_group_info_writes_only_the_callers_size, setup_world_of_one,
                                      teardown_world_of_one),
      cmocka_unit_test_setup_teardown(test_returned_arrays_set_count_on_a_small_capacity, setup_world_of_one,
                                      teardown_world_of_one),
      cmocka_unit_test_setup_teardown(test_out_parameters_are_cleared_on_error, setup_world_of_one,
                                      teardown_world_of_one),
      cmocka_unit_test(test_custom_kind_is_outside_the_layout_range),
      cmocka_unit_test(test_timeouts_are_int64_milliseconds),
      cmocka_unit_test(test_every_table_member_is_its_function),
      cmocka_unit_test(test_struct_arrays_are_walked_by_struct_size),
      cmocka_unit_test(test_sliced_dicts_are_walked_by_struct_size),
      cmocka_unit_test(test_returned_arrays_count_on_every_rank),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
