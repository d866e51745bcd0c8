/*
 * test_layout_api.c — the pstate_layout_* entry points and pstate_get_api, through the shared
 * library as a C user sees them. The layout math itself is proven in tests/unit/test_layout.cpp;
 * this proves the C contract: defaults, the size query, group_of, absent kinds, ownership, and
 * that the dlopen table reaches the same functions, the engine field (vLLM's layout) and an older
 * caller's struct without it. References are literal group lists from SGLang's
 * initialize_model_parallel docstring and vLLM's grid.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "expect_error.h"

#include <pstate/pstate.h>
#include <string.h>

static pstate_layout_t *docstring_layout(void) {
  /* 8 ranks, tp 8, attn_cp 2, ep 4, moe_dp 2 */
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = NULL;
  cfg.tensor_parallel_size = 8;
  cfg.attention_context_parallel_size = 2;
  cfg.expert_parallel_size = 4;
  cfg.moe_data_parallel_size = 2;
  PSTATE_EXPECT_OK(pstate_layout_create(8, &cfg, &l));
  assert_non_null(l);
  return l;
}

/* Asserts group `index` of `kind` holds exactly want[0..n). */
static void expect_group(const pstate_layout_t *l, pstate_group_kind_t kind, size_t index, const int *want, size_t n) {
  int got[64];
  size_t count = 0;
  PSTATE_EXPECT_OK(pstate_layout_group_ranks(l, kind, index, got, 64, &count));
  assert_int_equal(count, n);
  assert_memory_equal(got, want, n * sizeof(int));
}

static void test_docstring_groups_through_the_c_api(void **state) {
  pstate_layout_t *l = docstring_layout();
  size_t count = 0;
  static const int attn_cp1[] = {1, 5}, attn_tp1[] = {4, 5, 6, 7}, moe_ep0[] = {0, 1, 2, 3}, moe_dp3[] = {3, 7};
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_ATTN_CP, &count));
  assert_int_equal(count, 4);
  expect_group(l, PSTATE_GROUP_ATTN_CP, 1, attn_cp1, 2);
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_ATTN_TP, &count));
  assert_int_equal(count, 2);
  expect_group(l, PSTATE_GROUP_ATTN_TP, 1, attn_tp1, 4);
  expect_group(l, PSTATE_GROUP_MOE_EP, 0, moe_ep0, 4);
  expect_group(l, PSTATE_GROUP_MOE_DP, 3, moe_dp3, 2);
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_MOE_TP, &count));
  assert_int_equal(count, 8);
  pstate_layout_destroy(l);
}

static void test_group_of_finds_the_group_holding_a_rank(void **state) {
  pstate_layout_t *l = docstring_layout();
  size_t index = 99;
  PSTATE_EXPECT_OK(pstate_layout_group_of(l, PSTATE_GROUP_ATTN_CP, 6, &index));
  assert_int_equal(index, 2); /* [2,6] */
  PSTATE_EXPECT_OK(pstate_layout_group_of(l, PSTATE_GROUP_ATTN_TP, 3, &index));
  assert_int_equal(index, 0); /* [0-3] */
  PSTATE_EXPECT_OK(pstate_layout_group_of(l, PSTATE_GROUP_SELF_PP, 7, &index));
  assert_int_equal(index, 7);
  pstate_layout_destroy(l);
}

static void test_null_config_means_tp_equals_world(void **state) {
  pstate_layout_t *l = NULL;
  size_t count = 0;
  static const int all[] = {0, 1, 2, 3, 4, 5};
  PSTATE_EXPECT_OK(pstate_layout_create(6, NULL, &l));
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_TP, &count));
  assert_int_equal(count, 1);
  expect_group(l, PSTATE_GROUP_TP, 0, all, 6);
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_PP, &count));
  assert_int_equal(count, 6);
  pstate_layout_destroy(l);
}

static void test_capacity_zero_asks_for_the_group_size(void **state) {
  pstate_layout_t *l = docstring_layout();
  size_t count = 0;
  int one[1];
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_ATTN_TP, 0, NULL, 0, &count),
                      PSTATE_ERR_INVALID_ARGUMENT, "capacity 0");
  assert_int_equal(count, 4);
  count = 0;
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_ATTN_TP, 0, one, 1, &count),
                      PSTATE_ERR_INVALID_ARGUMENT, "capacity 1");
  assert_int_equal(count, 4);
  pstate_layout_destroy(l);
}

static void test_absent_kinds_have_zero_groups(void **state) {
  pstate_layout_t *l = docstring_layout();
  size_t count = 7, index = 0;
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_DCP, &count));
  assert_int_equal(count, 0);
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_SHARED_EXPERTS_TP, &count));
  assert_int_equal(count, 0);
  PSTATE_EXPECT_ERROR(pstate_layout_group_of(l, PSTATE_GROUP_DCP, 0, &index), PSTATE_ERR_INVALID_ARGUMENT,
                      "decode_context_parallel_size");
  pstate_layout_destroy(l);
}

static void test_dcp_and_shared_experts_groups_exist_when_configured(void **state) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = NULL;
  size_t count = 0;
  static const int dcp1[] = {2, 3}, shared3[] = {6, 7};
  cfg.tensor_parallel_size = 4;
  cfg.pipeline_parallel_size = 2;
  cfg.decode_context_parallel_size = 2;
  cfg.shared_experts_tensor_parallel_size = 2;
  PSTATE_EXPECT_OK(pstate_layout_create(8, &cfg, &l));
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_DCP, &count));
  assert_int_equal(count, 4);
  expect_group(l, PSTATE_GROUP_DCP, 1, dcp1, 2);
  expect_group(l, PSTATE_GROUP_SHARED_EXPERTS_TP, 3, shared3, 2);
  pstate_layout_destroy(l);
}

static void test_invalid_config_leaves_out_null_and_names_the_cause(void **state) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = (pstate_layout_t *)&cfg; /* must be overwritten with NULL */
  cfg.tensor_parallel_size = 3;
  PSTATE_EXPECT_ERROR(pstate_layout_create(8, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT,
                      "world_size 8 != tensor_parallel_size 3");
  assert_null(l);
  assert_non_null(strstr(pstate_last_error(), "pstate_layout_create"));
}

/* pstate.h's one rule for every front end: a size of 0 is its default (tp: world / pp, the
 * others 1, shared experts none). Before it, 0 was "every parallel size must be >= 1". */
static void test_zero_sizes_are_the_defaults(void **state) {
  static const int kinds_n = PSTATE_GROUP_KIND_COUNT;
  pstate_parallel_config_t explicit_cfg = PSTATE_PARALLEL_CONFIG_INIT, zeros = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *a = NULL, *b = NULL;
  int k;
  explicit_cfg.tensor_parallel_size = 2;
  explicit_cfg.pipeline_parallel_size = 2;
  zeros.tensor_parallel_size = 0;
  zeros.pipeline_parallel_size = 2;
  zeros.expert_parallel_size = 0;
  zeros.attention_data_parallel_size = 0;
  zeros.attention_context_parallel_size = 0;
  zeros.moe_data_parallel_size = 0;
  zeros.decode_context_parallel_size = 0;
  PSTATE_EXPECT_OK(pstate_layout_create(4, &explicit_cfg, &a));
  PSTATE_EXPECT_OK(pstate_layout_create(4, &zeros, &b));
  for (k = 0; k < kinds_n; ++k) {
    size_t na = 0, nb = 0, i;
    PSTATE_EXPECT_OK(pstate_layout_group_count(a, (pstate_group_kind_t)k, &na));
    PSTATE_EXPECT_OK(pstate_layout_group_count(b, (pstate_group_kind_t)k, &nb));
    assert_int_equal(na, nb);
    for (i = 0; i < na; ++i) {
      int ra[4], rb[4];
      size_t ca = 0, cb = 0;
      PSTATE_EXPECT_OK(pstate_layout_group_ranks(a, (pstate_group_kind_t)k, i, ra, 4, &ca));
      PSTATE_EXPECT_OK(pstate_layout_group_ranks(b, (pstate_group_kind_t)k, i, rb, 4, &cb));
      assert_int_equal(ca, cb);
      assert_memory_equal(ra, rb, ca * sizeof(int));
    }
  }
  pstate_layout_destroy(a);
  pstate_layout_destroy(b);
  /* tp 0 and pp 0: the whole world is one TP group */
  zeros.pipeline_parallel_size = 0;
  {
    static const int all[] = {0, 1, 2, 3, 4, 5};
    PSTATE_EXPECT_OK(pstate_layout_create(6, &zeros, &b));
    expect_group(b, PSTATE_GROUP_TP, 0, all, 6);
    pstate_layout_destroy(b);
  }
  /* tp 0 cannot be derived when pp does not divide the world */
  zeros.pipeline_parallel_size = 4;
  PSTATE_EXPECT_ERROR(pstate_layout_create(6, &zeros, &b), PSTATE_ERR_INVALID_ARGUMENT,
                      "world_size 6 is not divisible by pipeline_parallel_size 4");
  assert_null(b);
}

/* vLLM's layout through the C API: world 8 = dp 2 x pp 2 x tp 2, a MoE model. The lists are vLLM's
 * (arange(8).reshape(-1, 2, 2, 1, 2) cut per kind, tests/unit/test_layout.cpp by hand). */
static void test_vllm_engine_gives_vllms_groups(void **state) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = NULL;
  size_t count = 0, index = 0;
  static const int dp1[] = {2, 6}, pp2[] = {4, 6}, ep1[] = {2, 3, 6, 7}, tp3[] = {6, 7};
  cfg.engine = PSTATE_ENGINE_VLLM;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 2;
  cfg.data_parallel_size = 2;
  cfg.moe_model = 1;
  PSTATE_EXPECT_OK(pstate_layout_create(8, &cfg, &l));
  expect_group(l, PSTATE_GROUP_TP, 3, tp3, 2);
  expect_group(l, PSTATE_GROUP_DP, 1, dp1, 2);
  expect_group(l, PSTATE_GROUP_PP, 2, pp2, 2);
  expect_group(l, PSTATE_GROUP_EP, 1, ep1, 4);
  expect_group(l, PSTATE_GROUP_EPLB, 1, ep1, 4);
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_PCP, &count));
  assert_int_equal(count, 8); /* pcp 1: singletons, as vLLM makes them */
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_ATTN_TP, &count));
  assert_int_equal(count, 0); /* SGLang's kinds are not in vLLM's layout */
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_DCP, &count));
  assert_int_equal(count, 0);
  PSTATE_EXPECT_OK(pstate_layout_group_of(l, PSTATE_GROUP_DP, 6, &index));
  assert_int_equal(index, 1);
  PSTATE_EXPECT_ERROR(pstate_layout_group_ranks(l, PSTATE_GROUP_SELF_PP, 0, NULL, 0, &count),
                      PSTATE_ERR_INVALID_ARGUMENT, "self_pp is a group of SGLang's layout");
  assert_string_equal(pstate_group_kind_name(PSTATE_GROUP_EPLB), "eplb");
  pstate_layout_destroy(l);

  /* what vLLM refuses, named */
  cfg.data_parallel_size = 3;
  PSTATE_EXPECT_ERROR(pstate_layout_create(8, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT,
                      "world_size 8 is not divisible by data_parallel_size 3");
  assert_null(l);
  cfg.data_parallel_size = 2;
  cfg.expert_parallel_size = 4;
  PSTATE_EXPECT_ERROR(pstate_layout_create(8, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT,
                      "expert_parallel_size is 4: a size of SGLang's layout");
  cfg.expert_parallel_size = 1;
  cfg.engine = (pstate_engine_t)2;
  PSTATE_EXPECT_ERROR(pstate_layout_create(8, &cfg, &l), PSTATE_ERR_INVALID_ARGUMENT, "not a pstate_engine_t");
}

/* A caller built against the 1.0 header has no engine field: its struct_size ends before it, so
 * the bytes there (here VLLM) are not read and the layout is SGLang's, as it always was. */
static void test_config_of_an_older_caller_is_sglangs(void **state) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = NULL;
  size_t count = 0;
  cfg.struct_size = offsetof(pstate_parallel_config_t, engine);
  cfg.engine = PSTATE_ENGINE_VLLM;
  cfg.data_parallel_size = 2;
  cfg.tensor_parallel_size = 4;
  PSTATE_EXPECT_OK(pstate_layout_create(4, &cfg, &l));
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_SELF_PP, &count));
  assert_int_equal(count, 4);
  PSTATE_EXPECT_OK(pstate_layout_group_count(l, PSTATE_GROUP_DP, &count));
  assert_int_equal(count, 0);
  pstate_layout_destroy(l);
}

static void test_destroy_null_is_a_no_op(void **state) { pstate_layout_destroy(NULL); }

static void test_api_table_reaches_the_layout_functions(void **state) {
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  pstate_layout_t *l = NULL;
  size_t count = 0;
  assert_non_null(api);
  assert_int_equal(api->struct_size, sizeof(pstate_api_t));
  assert_int_equal(api->abi_major, PSTATE_ABI_MAJOR);
  assert_int_equal(api->library_version, pstate_version());
  assert_true(api->layout_create == pstate_layout_create);
  assert_true(api->status_string == pstate_status_string);
  assert_true(offsetof(pstate_api_t, set_interrupt_check) < api->struct_size);
  assert_true(api->set_interrupt_check == pstate_set_interrupt_check);
  assert_string_equal(api->status_string(PSTATE_ERR_INTERRUPTED), "PSTATE_ERR_INTERRUPTED");
  assert_int_equal(api->layout_create(4, NULL, &l), PSTATE_OK);
  assert_int_equal(api->layout_group_count(l, PSTATE_GROUP_SELF_PP, &count), PSTATE_OK);
  assert_int_equal(count, 4);
  api->layout_destroy(l);
  assert_string_equal(api->group_kind_name(PSTATE_GROUP_MOE_EP), "moe_ep");
}

static void test_api_table_for_another_major_is_null_with_a_reason(void **state) {
  assert_null(pstate_get_api(PSTATE_ABI_MAJOR + 1));
  assert_non_null(strstr(pstate_last_error(), "ABI major"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_docstring_groups_through_the_c_api),
      cmocka_unit_test(test_group_of_finds_the_group_holding_a_rank),
      cmocka_unit_test(test_null_config_means_tp_equals_world),
      cmocka_unit_test(test_capacity_zero_asks_for_the_group_size),
      cmocka_unit_test(test_absent_kinds_have_zero_groups),
      cmocka_unit_test(test_dcp_and_shared_experts_groups_exist_when_configured),
      cmocka_unit_test(test_invalid_config_leaves_out_null_and_names_the_cause),
      cmocka_unit_test(test_zero_sizes_are_the_defaults),
      cmocka_unit_test(test_vllm_engine_gives_vllms_groups),
      cmocka_unit_test(test_config_of_an_older_caller_is_sglangs),
      cmocka_unit_test(test_destroy_null_is_a_no_op),
      cmocka_unit_test(test_api_table_reaches_the_layout_functions),
      cmocka_unit_test(test_api_table_for_another_major_is_null_with_a_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
