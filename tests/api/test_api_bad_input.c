/*
 * test_api_bad_input.c — bad input on every layout and utility entry point: NULL pointers, a
 * wrong struct_size, out-of-range enums, huge sizes, indices and ranks. Each must return the
 * documented status (or the documented sentinel for functions without one) with a non-empty
 * pstate_last_error(), and nothing may crash. Runtime entry points (pstate_init, groups,
 * collectives) get their own bad-input tests with their implementations; pstate_reduce and
 * pstate_scatter are checked here, on a world of one in this process (NULL and foreign group
 * handles, bad dtype/op/root, NULL buffers, a stream in a CPU context, fp8 reductions), and the
 * context must still work after every refusal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "expect_error.h"
#include "ranks.h"

#include <limits.h>
#include <pstate/pstate.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define BAD_KIND_COUNT 4
static const pstate_group_kind_t kBadKinds[BAD_KIND_COUNT] = {
    (pstate_group_kind_t)-1, (pstate_group_kind_t)PSTATE_GROUP_KIND_COUNT, (pstate_group_kind_t)1000,
    (pstate_group_kind_t)INT_MAX};

static pstate_layout_t *small_layout(void) {
  pstate_layout_t *l = NULL;
  PSTATE_EXPECT_OK(pstate_layout_create(4, NULL, &l));
  return l;
}

static int setup_layout(void **state) {
  *state = small_layout();
  return *state == NULL;
}
static int teardown_layout(void **state) {
  pstate_layout_destroy((pstate_layout_t *)*state);
  return 0;
}

/* ---- pstate_layout_create ------------------------------------------------------------------ */

static void test_create_with_null_out_is_invalid_argument(void **state) {
  PSTATE_EXPECT_ERROR(pstate_layout_create(4, NULL, NULL), PSTATE_ERR_INVALID_ARGUMENT, "out is NULL");
}

static void test_create_with_wrong_struct_size_is_invalid_argument(void **state) {
  /* Below the 1.0 size, or past any struct's size; a larger struct of a newer caller is
   * test_abi_conventions' (it needs the caller's bytes past this struct). */
  const size_t oldest = offsetof(pstate_parallel_config_t, shared_experts_tensor_parallel_size) + sizeof(int);
  const size_t sizes[] = {0, 1, oldest - 1, 4097, (size_t)-1};
  size_t i;
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
    pstate_layout_t *l = NULL;
    cfg.tensor_parallel_size = 4;
    cfg.struct_size = sizes[i];
    PSTATE_EXPECT_ERROR(pstate_layout_create(4, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_PARALLEL_CONFIG_INIT");
    assert_null(l);
  }
}

static void test_create_with_bad_world_size_is_invalid_argument(void **state) {
  const int worlds[] = {0, -1, INT_MIN, 1048577, INT_MAX};
  size_t i;
  for (i = 0; i < sizeof worlds / sizeof worlds[0]; ++i) {
    pstate_layout_t *l = NULL;
    PSTATE_EXPECT_ERROR(pstate_layout_create(worlds[i], NULL, &l), PSTATE_ERR_INVALID_ARGUMENT, "world_size");
    assert_null(l);
  }
}

/* (0 is not among them: a size of 0 is its default, test_layout_api.c) */
static void test_create_with_huge_or_negative_sizes_is_invalid_argument(void **state) {
  int *fields[7];
  const int values[] = {-1, INT_MIN, INT_MAX};
  size_t f, v;
  for (f = 0; f < 7; ++f) {
    for (v = 0; v < sizeof values / sizeof values[0]; ++v) {
      pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
      pstate_layout_t *l = NULL;
      fields[0] = &cfg.tensor_parallel_size;
      fields[1] = &cfg.pipeline_parallel_size;
      fields[2] = &cfg.expert_parallel_size;
      fields[3] = &cfg.attention_data_parallel_size;
      fields[4] = &cfg.attention_context_parallel_size;
      fields[5] = &cfg.moe_data_parallel_size;
      fields[6] = &cfg.decode_context_parallel_size;
      cfg.tensor_parallel_size = 8;
      *fields[f] = values[v];
      PSTATE_EXPECT_ERROR(pstate_layout_create(8, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT, "_size");
      assert_null(l);
    }
  }
}

static void test_create_with_bad_shared_experts_size_is_invalid_argument(void **state) {
  const int values[] = {-1, INT_MIN, 3, INT_MAX};
  size_t v;
  for (v = 0; v < sizeof values / sizeof values[0]; ++v) {
    pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
    pstate_layout_t *l = NULL;
    cfg.tensor_parallel_size = 8;
    cfg.shared_experts_tensor_parallel_size = values[v];
    PSTATE_EXPECT_ERROR(pstate_layout_create(8, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT,
                        "shared_experts_tensor_parallel_size");
    assert_null(l);
  }
}

/* ---- queries on a layout ------------------------------------------------------------------- */

static void test_group_count_rejects_null_and_bad_kinds(void **state) {
  pstate_layout_t *l = (pstate_layout_t *)*state;
  size_t count = 0;
  int k;
  PSTATE_EXPECT_ERROR(pstate_layout_group_count(NULL, PSTATE_GROUP_TP, &count), PSTATE_ERR_INVALID_ARGUMENT,
                      "layout is NULL");
  PSTATE_EXPECT_ERROR(pstate_layout_group_count(l, PSTATE_GROUP_TP, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "count is NULL");
  for (k = 0; k < BAD_KIND_COUNT; ++k)
    PSTATE_EXPECT_ERROR(pstate_layout_group_count(l, kBadKinds[k], &count), PSTATE_ERR_INVALID_ARGUMENT,
                        "pstate_group_kind_t");
}

static void test_group_ranks_rejects_null_bad_kind_and_bad_index(void **state) {
  pstate_layout_t *l = (pstate_layout_t *)*state;
  int ranks[8];
  size_t count = 0;
  int k;
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(NULL, PSTATE_GROUP_TP, 0, ranks, 8, &count),
                      PSTATE_ERR_INVALID_ARGUMENT, "layout is NULL");
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_TP, 0, ranks, 8, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "count is NULL");
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_TP, 0, NULL, 8, &count), PSTATE_ERR_INVALID_ARGUMENT,
                      "ranks is NULL");
  for (k = 0; k < BAD_KIND_COUNT; ++k)
    PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, kBadKinds[k], 0, ranks, 8, &count),
                        PSTATE_ERR_INVALID_ARGUMENT, "pstate_group_kind_t");
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_TP, 1, ranks, 8, &count),
                      PSTATE_ERR_INVALID_ARGUMENT, "index 1");
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_PP, (size_t)-1, ranks, 8, &count),
                      PSTATE_ERR_INVALID_ARGUMENT, "out of range");
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_DCP, 0, ranks, 8, &count),
                      PSTATE_ERR_INVALID_ARGUMENT, "no dcp group");
}

static void test_group_ranks_with_huge_capacity_writes_only_the_group(void **state) {
  pstate_layout_t *l = (pstate_layout_t *)*state;
  int ranks[6] = {-7, -7, -7, -7, -7, -7};
  size_t count = 0;
  PSTATE_EXPECT_OK(pstate_layout_group_ranks(l, PSTATE_GROUP_TP, 0, ranks, (size_t)-1, &count));
  assert_int_equal(count, 4);
  assert_int_equal(ranks[4], -7);
}

static void test_group_of_rejects_null_bad_kind_and_bad_rank(void **state) {
  pstate_layout_t *l = (pstate_layout_t *)*state;
  size_t index = 0;
  const int bad_ranks[] = {-1, 4, INT_MIN, INT_MAX};
  size_t i;
  int k;
  PSTATE_EXPECT_ERROR(pstate_layout_group_of(NULL, PSTATE_GROUP_TP, 0, &index), PSTATE_ERR_INVALID_ARGUMENT,
                      "layout is NULL");
  PSTATE_EXPECT_ERROR(pstate_layout_group_of(l, PSTATE_GROUP_TP, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "index is NULL");
  for (k = 0; k < BAD_KIND_COUNT; ++k)
    PSTATE_EXPECT_ERROR(pstate_layout_group_of(l, kBadKinds[k], 0, &index), PSTATE_ERR_INVALID_ARGUMENT,
                        "pstate_group_kind_t");
  for (i = 0; i < sizeof bad_ranks / sizeof bad_ranks[0]; ++i)
    PSTATE_EXPECT_ERROR(pstate_layout_group_of(l, PSTATE_GROUP_TP, bad_ranks[i], &index),
                        PSTATE_ERR_INVALID_ARGUMENT, "out of range");
  PSTATE_EXPECT_ERROR(pstate_layout_group_of(l, PSTATE_GROUP_SHARED_EXPERTS_TP, 0, &index),
                      PSTATE_ERR_INVALID_ARGUMENT, "shared_experts_tensor_parallel_size");
}

/* ---- pstate_reduce / pstate_scatter on a world of one ------------------------------------- */

static int setup_world_of_one(void **state) {
  char method[64];
  snprintf(method, sizeof method, "tcp://127.0.0.1:%d", pstate_test_free_port());
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.init_method = method;
  p.rank = 0;
  p.world_size = 1;
  p.local_rank = 0;
  p.timeout_ms = 20000;
  pstate_t *ps = NULL;
  if (pstate_init(&p, &ps) != PSTATE_OK) {
    fprintf(stderr, "pstate_init: %s\n", pstate_last_error());
    return 1;
  }
  *state = ps;
  return 0;
}
static int teardown_world_of_one(void **state) { return pstate_finalize((pstate_t *)*state) != PSTATE_OK; }

static void test_reduce_rejects_bad_handles_enums_roots_buffers_and_streams(void **state) {
  pstate_group_t *g = NULL;
  PSTATE_EXPECT_OK(pstate_get_group((pstate_t *)*state, PSTATE_GROUP_WORLD, &g));
  float a[4] = {1, 2, 3, 4}, b[4] = {0};
  unsigned char not_a_group[512];
  int stream = 0;
  size_t i;
  const int bad_roots[] = {-1, 1, INT_MIN, INT_MAX};
  memset(not_a_group, 0, sizeof not_a_group);
  PSTATE_EXPECT_ERROR(pstate_reduce(NULL, a, b, 4, PSTATE_FLOAT32, PSTATE_SUM, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "g is NULL");
  PSTATE_EXPECT_ERROR(pstate_reduce((pstate_group_t *)not_a_group, a, b, 4, PSTATE_FLOAT32, PSTATE_SUM, 0, NULL),
                      PSTATE_ERR_INVALID_ARGUMENT, "not a pstate_group_t");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, a, b, 4, (pstate_dtype_t)-1, PSTATE_SUM, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "dtype");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, a, b, 4, (pstate_dtype_t)PSTATE_DTYPE_COUNT, PSTATE_SUM, 0, NULL),
                      PSTATE_ERR_INVALID_ARGUMENT, "dtype");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, a, b, 4, PSTATE_FLOAT32, (pstate_reduce_op_t)-1, 0, NULL),
                      PSTATE_ERR_INVALID_ARGUMENT, "op");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, a, b, 4, PSTATE_FLOAT32, (pstate_reduce_op_t)PSTATE_REDUCE_OP_COUNT, 0, NULL),
                      PSTATE_ERR_INVALID_ARGUMENT, "op");
  for (i = 0; i < sizeof bad_roots / sizeof bad_roots[0]; ++i)
    PSTATE_EXPECT_ERROR(pstate_reduce(g, a, b, 4, PSTATE_FLOAT32, PSTATE_SUM, bad_roots[i], NULL),
                        PSTATE_ERR_INVALID_ARGUMENT, "root");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, NULL, b, 4, PSTATE_FLOAT32, PSTATE_SUM, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "send is NULL");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, a, NULL, 4, PSTATE_FLOAT32, PSTATE_SUM, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "recv is NULL");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, a, b, 4, PSTATE_FLOAT32, PSTATE_SUM, 0, &stream), PSTATE_ERR_INVALID_ARGUMENT,
                      "stream must be NULL");
  PSTATE_EXPECT_ERROR(pstate_reduce(g, a, b, 4, PSTATE_FP8_E4M3, PSTATE_MAX, 0, NULL), PSTATE_ERR_UNSUPPORTED, "fp8");
  assert_true(b[0] == 0 && b[3] == 0); /* nothing was written by a refused call */
  /* count 0 with NULL buffers is legal, and the context still works after every refusal */
  PSTATE_EXPECT_OK(pstate_reduce(g, NULL, NULL, 0, PSTATE_FLOAT32, PSTATE_SUM, 0, NULL));
  PSTATE_EXPECT_OK(pstate_reduce(g, a, b, 4, PSTATE_FLOAT32, PSTATE_AVG, 0, NULL));
  assert_memory_equal(a, b, sizeof a);
}

static void test_scatter_rejects_bad_handles_enums_roots_buffers_and_streams(void **state) {
  pstate_group_t *g = NULL;
  PSTATE_EXPECT_OK(pstate_get_group((pstate_t *)*state, PSTATE_GROUP_WORLD, &g));
  int64_t a[3] = {7, 8, 9}, b[3] = {0};
  int stream = 0;
  size_t i;
  const int bad_roots[] = {-1, 1, INT_MIN, INT_MAX};
  PSTATE_EXPECT_ERROR(pstate_scatter(NULL, a, b, 3, PSTATE_INT64, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT, "g is NULL");
  PSTATE_EXPECT_ERROR(pstate_scatter(g, a, b, 3, (pstate_dtype_t)-7, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT, "dtype");
  for (i = 0; i < sizeof bad_roots / sizeof bad_roots[0]; ++i)
    PSTATE_EXPECT_ERROR(pstate_scatter(g, a, b, 3, PSTATE_INT64, bad_roots[i], NULL), PSTATE_ERR_INVALID_ARGUMENT,
                        "root");
  PSTATE_EXPECT_ERROR(pstate_scatter(g, NULL, b, 3, PSTATE_INT64, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "send is NULL");
  PSTATE_EXPECT_ERROR(pstate_scatter(g, a, NULL, 3, PSTATE_INT64, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT,
                      "recv is NULL");
  PSTATE_EXPECT_ERROR(pstate_scatter(g, a, b, 3, PSTATE_INT64, 0, &stream), PSTATE_ERR_INVALID_ARGUMENT,
                      "stream must be NULL");
  PSTATE_EXPECT_ERROR(pstate_scatter(g, a, a + 1, 2, PSTATE_INT64, 0, NULL), PSTATE_ERR_INVALID_ARGUMENT, "overlap");
  assert_true(b[0] == 0 && b[2] == 0);
  PSTATE_EXPECT_OK(pstate_scatter(g, NULL, NULL, 0, PSTATE_INT64, 0, NULL));
  PSTATE_EXPECT_OK(pstate_scatter(g, a, b, 3, PSTATE_INT64, 0, NULL));
  assert_memory_equal(a, b, sizeof a);
  PSTATE_EXPECT_OK(pstate_scatter(g, a, a, 3, PSTATE_INT64, 0, NULL)); /* in place on the root */
}

/* ---- utilities: sentinels for values outside the enums ------------------------------------ */

static void test_names_of_out_of_range_values_are_null(void **state) {
  assert_null(pstate_dtype_name((pstate_dtype_t)-1));
  assert_null(pstate_dtype_name((pstate_dtype_t)PSTATE_DTYPE_COUNT));
  assert_null(pstate_reduce_op_name((pstate_reduce_op_t)-1));
  assert_null(pstate_reduce_op_name((pstate_reduce_op_t)PSTATE_REDUCE_OP_COUNT));
  assert_null(pstate_group_kind_name((pstate_group_kind_t)-1));
  assert_string_equal(pstate_group_kind_name(PSTATE_GROUP_CUSTOM), "custom"); /* past the layout kinds */
  assert_null(pstate_group_kind_name((pstate_group_kind_t)(PSTATE_GROUP_CUSTOM + 1)));
  assert_int_equal(pstate_dtype_size((pstate_dtype_t)-1), 0);
  assert_int_equal(pstate_dtype_size((pstate_dtype_t)INT_MAX), 0);
}

static void test_status_string_of_unknown_status_is_unknown(void **state) {
  assert_string_equal(pstate_status_string((pstate_status_t)-1), "PSTATE_UNKNOWN_STATUS");
  assert_string_equal(pstate_status_string((pstate_status_t)12345), "PSTATE_UNKNOWN_STATUS");
  assert_string_equal(pstate_status_string(PSTATE_ERR_INTERNAL), "PSTATE_ERR_INTERNAL");
}

static void test_get_api_of_unknown_major_is_null_with_message(void **state) {
  /* the major before this one (0 for libpstate.so.1), the next one, far ones */
  const uint32_t majors[] = {PSTATE_ABI_MAJOR - 1, PSTATE_ABI_MAJOR + 1, 1000, UINT32_MAX};
  size_t i;
  for (i = 0; i < sizeof majors / sizeof majors[0]; ++i) {
    assert_null(pstate_get_api(majors[i]));
    assert_true(pstate_last_error()[0] != '\0');
  }
}

static void test_version_matches_header(void **state) { assert_int_equal(pstate_version(), PSTATE_VERSION); }

/* ---- last error is per thread --------------------------------------------------------------- */

static void *fresh_thread_last_error(void *out) {
  *(int *)out = pstate_last_error()[0] == '\0';
  return NULL;
}

static void test_last_error_of_one_thread_is_not_seen_by_another(void **state) {
  pthread_t t;
  int other_is_empty = 0;
  PSTATE_EXPECT_ERROR(pstate_layout_create(0, NULL, NULL), PSTATE_ERR_INVALID_ARGUMENT, NULL);
  assert_int_equal(pthread_create(&t, NULL, fresh_thread_last_error, &other_is_empty), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_true(other_is_empty);
  assert_true(pstate_last_error()[0] != '\0');
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_with_null_out_is_invalid_argument),
      cmocka_unit_test(test_create_with_wrong_struct_size_is_invalid_argument),
      cmocka_unit_test(test_create_with_bad_world_size_is_invalid_argument),
      cmocka_unit_test(test_create_with_huge_or_negative_sizes_is_invalid_argument),
      cmocka_unit_test(test_create_with_bad_shared_experts_size_is_invalid_argument),
      cmocka_unit_test_setup_teardown(test_group_count_rejects_null_and_bad_kinds, setup_layout, teardown_layout),
      cmocka_unit_test_setup_teardown(test_group_ranks_rejects_null_bad_kind_and_bad_index, setup_layout,
                                      teardown_layout),
      cmocka_unit_test_setup_teardown(test_group_ranks_with_huge_capacity_writes_only_the_group, setup_layout,
                                      teardown_layout),
      cmocka_unit_test_setup_teardown(test_group_of_rejects_null_bad_kind_and_bad_rank, setup_layout, teardown_layout),
      cmocka_unit_test_setup_teardown(test_reduce_rejects_bad_handles_enums_roots_buffers_and_streams,
                                      setup_world_of_one, teardown_world_of_one),
      cmocka_unit_test_setup_teardown(test_scatter_rejects_bad_handles_enums_roots_buffers_and_streams,
                                      setup_world_of_one, teardown_world_of_one),
      cmocka_unit_test(test_names_of_out_of_range_values_are_null),
      cmocka_unit_test(test_status_string_of_unknown_status_is_unknown),
      cmocka_unit_test(test_get_api_of_unknown_major_is_null_with_message),
      cmocka_unit_test(test_version_matches_header),
      cmocka_unit_test(test_last_error_of_one_thread_is_not_seen_by_another),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
