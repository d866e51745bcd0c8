// test_layout.cpp — pstate::layout::Layout against SGLang's initialize_model_parallel (and, at the
// end, against vLLM's: worked layouts, its refusals, and every configuration up to world 64
// against closed-form grid coordinates; the numpy reference is tests/cli/cli_layout_vllm_reference.py).
//
// Three kinds of reference, none computed by the code under test:
//   * literal group lists from SGLang's docstring and DESIGN.md's worked layouts;
//   * one test per validation rule, checking the status and that the message names the cause;
//   * a property test over every valid configuration with world <= 64 (48 under sanitizers),
//     comparing each rank's group index and position with closed-form coordinates (rank =
//     block*tp + a row-major index into [attn_dp][attn_cp][attn_tp] or [moe_dp][ep][moe_tp]),
//     checking partitions, ascending ranks and SGLang's aliasing rules.
#include "common/error.hpp"
#include "layout/layout.hpp"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

// cmocka last: its fail() macro would break <ios> if included before the C++ headers; and its
// 1.1 header has no extern "C" of its own.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

using pstate::layout::Layout;
using pstate::layout::ParallelConfig;
using Groups = std::vector<std::vector<int>>;

namespace {

Groups groups_of(const Layout &l, pstate_group_kind_t kind) {
  Groups out;
  for (size_t g = 0; g < l.group_count(kind); ++g) {
    auto span = l.group_ranks(kind, g);
    out.emplace_back(span.begin(), span.end());
  }
  return out;
}

std::string text(const Groups &gs) {
  std::string s;
  for (const auto &g : gs) {
    s += "[";
    for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
    s += "]";
  }
  return s;
}

void expect_groups(const Layout &l, pstate_group_kind_t kind, const Groups &want) {
  Groups got = groups_of(l, kind);
  if (got != want)
    fail_msg("%s groups: got %s, want %s", pstate::layout::kind_name(kind), text(got).c_str(), text(want).c_str());
}

Groups singletons(int world) {
  Groups g;
  for (int r = 0; r < world; ++r) g.push_back({r});
  return g;
}

ParallelConfig make(int tp, int pp = 1) {
  ParallelConfig c;
  c.tp = tp;
  c.pp = pp;
  return c;
}

// Runs body, which must throw pstate::Error(INVALID_ARGUMENT) whose message contains needle.
void expect_invalid(const std::function<void()> &body, const char *needle) {
  try {
    body();
  } catch (const pstate::Error &e) {
    if (e.status() != PSTATE_ERR_INVALID_ARGUMENT) fail_msg("status %d, want INVALID_ARGUMENT: %s", e.status(), e.what());
    if (std::strstr(e.what(), needle) == nullptr) fail_msg("message \"%s\" does not mention \"%s\"", e.what(), needle);
    return;
  }
  fail_msg("no error; expected one mentioning \"%s\"", needle);
}

void expect_rejected(int world, const ParallelConfig &c, const char *needle) {
  expect_invalid([&] { Layout l(world, c); }, needle);
  expect_invalid([&] { pstate::layout::validate(world, c); }, needle);
}

}  // namespace

// ---- SGLang's docstring -------------------------------------------------------------------

static void test_docstring_tp2_pp4_gives_four_tp_groups_and_two_pp_groups(void **) {
  Layout l(8, make(2, 4));
  expect_groups(l, PSTATE_GROUP_TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, PSTATE_GROUP_PP, {{0, 2, 4, 6}, {1, 3, 5, 7}});
}

static void test_docstring_attn_cp2_moe_dp2_ep4_groups(void **) {
  ParallelConfig c = make(8);
  c.attn_cp = 2;
  c.ep = 4;
  c.moe_dp = 2;
  Layout l(8, c);
  expect_groups(l, PSTATE_GROUP_TP, {{0, 1, 2, 3, 4, 5, 6, 7}});
  expect_groups(l, PSTATE_GROUP_ATTN_CP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  expect_groups(l, PSTATE_GROUP_ATTN_TP, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, PSTATE_GROUP_MOE_EP, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, PSTATE_GROUP_MOE_DP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  expect_groups(l, PSTATE_GROUP_MOE_TP, singletons(8));
  assert_false(l.is_alias(PSTATE_GROUP_MOE_DP));  // attn_cp == moe_dp: its own groups
}

// ---- DESIGN.md worked layouts ---------------------------------------------------------------

static void test_design_world8_tp4_pp2(void **) {
  Layout l(8, make(4, 2));
  expect_groups(l, PSTATE_GROUP_TP, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, PSTATE_GROUP_PP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  expect_groups(l, PSTATE_GROUP_ATTN_TP, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, PSTATE_GROUP_MOE_TP, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  assert_int_equal(l.canonical(PSTATE_GROUP_ATTN_TP), PSTATE_GROUP_TP);
  assert_int_equal(l.canonical(PSTATE_GROUP_MOE_TP), PSTATE_GROUP_TP);
  for (auto k : {PSTATE_GROUP_ATTN_CP, PSTATE_GROUP_MOE_EP, PSTATE_GROUP_MOE_DP, PSTATE_GROUP_SELF_PP})
    expect_groups(l, k, singletons(8));
  expect_groups(l, PSTATE_GROUP_WORLD, {{0, 1, 2, 3, 4, 5, 6, 7}});
}

static void test_design_world8_tp8_ep4(void **) {
  ParallelConfig c = make(8);
  c.ep = 4;
  Layout l(8, c);
  expect_groups(l, PSTATE_GROUP_TP, {{0, 1, 2, 3, 4, 5, 6, 7}});
  expect_groups(l, PSTATE_GROUP_MOE_TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, PSTATE_GROUP_MOE_EP, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  assert_int_equal(l.canonical(PSTATE_GROUP_ATTN_TP), PSTATE_GROUP_TP);
  for (auto k : {PSTATE_GROUP_PP, PSTATE_GROUP_ATTN_CP, PSTATE_GROUP_MOE_DP}) expect_groups(l, k, singletons(8));
}

// ---- the optional kinds ---------------------------------------------------------------------

static void test_dcp_cuts_each_tp_group_into_consecutive_chunks(void **) {
  ParallelConfig c = make(4, 2);
  c.dcp = 2;
  Layout l(8, c);
  assert_true(l.has(PSTATE_GROUP_DCP));
  expect_groups(l, PSTATE_GROUP_DCP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  assert_false(l.is_alias(PSTATE_GROUP_DCP));
}

static void test_dcp_group_absent_when_dcp_is_one(void **) {
  Layout l(8, make(8));
  assert_false(l.has(PSTATE_GROUP_DCP));
  assert_int_equal(l.group_count(PSTATE_GROUP_DCP), 0);
  expect_invalid([&] { l.groups(PSTATE_GROUP_DCP); }, "decode_context_parallel_size");
}

static void test_dcp_equal_to_tp_is_its_own_group_not_an_alias(void **) {
  ParallelConfig c = make(4, 2);
  c.dcp = 4;
  Layout l(8, c);
  expect_groups(l, PSTATE_GROUP_DCP, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  assert_false(l.is_alias(PSTATE_GROUP_DCP));
}

static void test_shared_experts_tp_groups_are_consecutive_chunks_of_attn_tp(void **) {
  ParallelConfig c = make(8, 2);
  c.attn_dp = 2;  // attn_tp 4
  c.shared_experts_tp = 2;
  Layout l(16, c);
  expect_groups(l, PSTATE_GROUP_SHARED_EXPERTS_TP,
                {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  assert_false(l.is_alias(PSTATE_GROUP_SHARED_EXPERTS_TP));
}

static void test_shared_experts_tp_equal_to_attn_tp_aliases_attn_tp(void **) {
  ParallelConfig c = make(8);
  c.attn_dp = 2;
  c.shared_experts_tp = 4;
  Layout l(8, c);
  assert_int_equal(l.canonical(PSTATE_GROUP_SHARED_EXPERTS_TP), PSTATE_GROUP_ATTN_TP);
  assert_ptr_equal(&l.groups(PSTATE_GROUP_SHARED_EXPERTS_TP), &l.groups(PSTATE_GROUP_ATTN_TP));
}

static void test_shared_experts_tp_zero_or_one_means_no_group(void **) {
  for (int s : {0, 1}) {
    ParallelConfig c = make(4);
    c.shared_experts_tp = s;
    Layout l(4, c);
    assert_false(l.has(PSTATE_GROUP_SHARED_EXPERTS_TP));
    assert_int_equal(l.group_count(PSTATE_GROUP_SHARED_EXPERTS_TP), 0);
  }
}

static void test_self_pp_holds_each_rank_alone(void **) {
  Layout l(6, make(3, 2));
  expect_groups(l, PSTATE_GROUP_SELF_PP, singletons(6));
  assert_false(l.is_alias(PSTATE_GROUP_SELF_PP));
}

// ---- aliasing -------------------------------------------------------------------------------

static void test_moe_dp_is_the_attn_cp_group_when_attn_cp_exceeds_moe_dp(void **) {
  ParallelConfig c = make(8);
  c.attn_cp = 4;  // attn_tp 2
  c.ep = 2;
  c.moe_dp = 2;
  Layout l(8, c);
  expect_groups(l, PSTATE_GROUP_ATTN_CP, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  expect_groups(l, PSTATE_GROUP_MOE_DP, {{0, 2, 4, 6}, {1, 3, 5, 7}});  // width attn_cp, not moe_dp
  assert_int_equal(l.canonical(PSTATE_GROUP_MOE_DP), PSTATE_GROUP_ATTN_CP);
  assert_ptr_equal(&l.groups(PSTATE_GROUP_MOE_DP), &l.groups(PSTATE_GROUP_ATTN_CP));
}

static void test_moe_dp_is_the_tp_group_when_moe_dp_equals_tp(void **) {
  ParallelConfig c = make(4, 2);
  c.moe_dp = 4;
  Layout l(8, c);
  assert_int_equal(l.canonical(PSTATE_GROUP_MOE_DP), PSTATE_GROUP_TP);
  expect_groups(l, PSTATE_GROUP_MOE_DP, {{0, 1, 2, 3}, {4, 5, 6, 7}});
}

static void test_alias_chain_moe_dp_to_attn_cp_to_tp_resolves_to_tp(void **) {
  ParallelConfig c = make(4);
  c.attn_cp = 4;  // attn_cp == tp: attn_cp is tp; attn_cp > moe_dp: moe_dp is attn_cp
  Layout l(4, c);
  assert_int_equal(l.canonical(PSTATE_GROUP_ATTN_CP), PSTATE_GROUP_TP);
  assert_int_equal(l.canonical(PSTATE_GROUP_MOE_DP), PSTATE_GROUP_TP);
  assert_ptr_equal(&l.groups(PSTATE_GROUP_MOE_DP), &l.groups(PSTATE_GROUP_TP));
}

static void test_moe_ep_is_the_tp_group_when_ep_equals_tp(void **) {
  ParallelConfig c = make(4, 2);
  c.ep = 4;
  Layout l(8, c);
  assert_int_equal(l.canonical(PSTATE_GROUP_MOE_EP), PSTATE_GROUP_TP);
  assert_int_equal(l.canonical(PSTATE_GROUP_MOE_TP), PSTATE_GROUP_MOE_TP);  // moe_tp 1 != tp 4
}

static void test_world_tp_pp_dcp_self_pp_are_never_aliases(void **) {
  Layout l(4, make(1, 4));  // tp 1: every tp-derived kind aliases tp; pp spans the world
  for (auto k : {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP, PSTATE_GROUP_PP, PSTATE_GROUP_SELF_PP})
    assert_false(l.is_alias(k));
  expect_groups(l, PSTATE_GROUP_PP, {{0, 1, 2, 3}});
  assert_ptr_not_equal(&l.groups(PSTATE_GROUP_PP), &l.groups(PSTATE_GROUP_WORLD));
}

static void test_creation_order_is_sglangs(void **) {
  const pstate_group_kind_t want[] = {
      PSTATE_GROUP_WORLD,  PSTATE_GROUP_TP,     PSTATE_GROUP_DCP,    PSTATE_GROUP_ATTN_CP,
      PSTATE_GROUP_ATTN_TP, PSTATE_GROUP_SHARED_EXPERTS_TP,          PSTATE_GROUP_MOE_DP,
      PSTATE_GROUP_MOE_EP, PSTATE_GROUP_MOE_TP, PSTATE_GROUP_PP,     PSTATE_GROUP_SELF_PP};
  auto got = pstate::layout::creation_order();
  assert_int_equal(got.size(), sizeof want / sizeof want[0]);
  for (size_t i = 0; i < got.size(); ++i) assert_int_equal(got[i], want[i]);
}

// ---- accessors ------------------------------------------------------------------------------

static void test_rank_in_group_is_position_in_ascending_group(void **) {
  Layout l(8, make(4, 2));
  assert_int_equal(l.groups(PSTATE_GROUP_PP).rank_in_group(5), 1);  // pp group [1,5]
  assert_int_equal(l.groups(PSTATE_GROUP_TP).rank_in_group(6), 2);  // tp group [4-7]
}

static void test_group_containing_gives_the_ranks_of_a_ranks_group(void **) {
  Layout l(8, make(4, 2));
  auto pp = l.group_containing(PSTATE_GROUP_PP, 6);
  assert_int_equal(pp.size(), 2);
  assert_int_equal(pp[0], 2);
  assert_int_equal(pp[1], 6);
  auto tp = l.group_containing(PSTATE_GROUP_MOE_TP, 1);  // moe_tp is tp here
  assert_int_equal(tp.size(), 4);
  assert_int_equal(tp[3], 3);
}

static void test_bad_index_rank_and_kind_are_invalid_argument(void **) {
  Layout l(8, make(4, 2));
  expect_invalid([&] { l.group_ranks(PSTATE_GROUP_TP, 2); }, "index 2");
  expect_invalid([&] { l.group_of(PSTATE_GROUP_TP, 8); }, "rank 8");
  expect_invalid([&] { l.group_of(PSTATE_GROUP_TP, -1); }, "rank -1");
  expect_invalid([&] { l.has(static_cast<pstate_group_kind_t>(PSTATE_GROUP_KIND_COUNT)); }, "group kind");
  expect_invalid([&] { l.canonical(static_cast<pstate_group_kind_t>(-1)); }, "group kind");
}

static void test_largest_world_is_accepted(void **) {
  Layout l(pstate::layout::kMaxWorldSize, make(pstate::layout::kMaxWorldSize));
  assert_int_equal(l.group_count(PSTATE_GROUP_PP), pstate::layout::kMaxWorldSize);
  assert_int_equal(l.group_of(PSTATE_GROUP_SELF_PP, pstate::layout::kMaxWorldSize - 1),
                   pstate::layout::kMaxWorldSize - 1);
}

// ---- validation: one message per cause ------------------------------------------------------

static void test_world_below_one_is_rejected(void **) {
  expect_rejected(0, make(1), "world_size is 0");
  expect_rejected(-4, make(1), "world_size is -4");
}

static void test_world_over_limit_is_rejected(void **) {
  expect_rejected(pstate::layout::kMaxWorldSize + 1, make(pstate::layout::kMaxWorldSize + 1), "limit of 1048576");
}

static void test_each_size_below_one_is_rejected_by_name(void **) {
  struct Case {
    int ParallelConfig::*field;
    const char *name;
  } cases[] = {{&ParallelConfig::tp, "tensor_parallel_size is 0"},
               {&ParallelConfig::pp, "pipeline_parallel_size is 0"},
               {&ParallelConfig::ep, "expert_parallel_size is 0"},
               {&ParallelConfig::attn_dp, "attention_data_parallel_size is 0"},
               {&ParallelConfig::attn_cp, "attention_context_parallel_size is 0"},
               {&ParallelConfig::moe_dp, "moe_data_parallel_size is 0"},
               {&ParallelConfig::dcp, "decode_context_parallel_size is 0"}};
  for (const Case &k : cases) {
    ParallelConfig c = make(4);
    c.*k.field = 0;
    expect_rejected(4, c, k.name);
  }
  ParallelConfig c = make(4);
  c.pp = -3;
  expect_rejected(4, c, "pipeline_parallel_size is -3");
}

static void test_negative_shared_experts_tp_is_rejected(void **) {
  ParallelConfig c = make(4);
  c.shared_experts_tp = -1;
  expect_rejected(4, c, "shared_experts_tensor_parallel_size is -1");
}

static void test_tp_times_pp_overflow_is_rejected(void **) {
  expect_rejected(1024, make(65536, 65536), "overflows int");
}

static void test_attn_dp_times_attn_cp_overflow_is_rejected(void **) {
  ParallelConfig c = make(8);
  c.attn_dp = 65536;
  c.attn_cp = 65536;
  expect_rejected(8, c, "overflows int");
}

static void test_ep_times_moe_dp_overflow_is_rejected(void **) {
  ParallelConfig c = make(8);
  c.ep = 1 << 20;
  c.moe_dp = 1 << 12;
  expect_rejected(8, c, "overflows int");
}

static void test_world_not_tp_times_pp_is_rejected(void **) {
  expect_rejected(8, make(4, 1), "world_size 8 != tensor_parallel_size 4 x pipeline_parallel_size 1");
  expect_rejected(8, make(3, 3), "!= tensor_parallel_size 3");
}

static void test_tp_not_divisible_by_attn_dp_times_attn_cp_is_rejected(void **) {
  ParallelConfig c = make(6);
  c.attn_dp = 4;  // SGLang would silently compute attn_tp 1 and leave ranks 4, 5 out
  expect_rejected(6, c, "not divisible by attention_data_parallel_size x attention_context_parallel_size 4");
  c.attn_dp = 2;
  c.attn_cp = 2;
  expect_rejected(6, c, "attention_context_parallel_size 4");
}

static void test_tp_not_divisible_by_ep_times_moe_dp_is_rejected(void **) {
  ParallelConfig c = make(8);
  c.ep = 3;
  expect_rejected(8, c, "not divisible by expert_parallel_size x moe_data_parallel_size 3");
  c.ep = 4;
  c.moe_dp = 4;
  expect_rejected(8, c, "moe_data_parallel_size 16");
}

static void test_tp_not_divisible_by_dcp_is_rejected(void **) {
  ParallelConfig c = make(8);
  c.dcp = 3;
  expect_rejected(8, c, "not divisible by decode_context_parallel_size 3");
}

static void test_shared_experts_tp_not_dividing_attn_tp_is_rejected(void **) {
  ParallelConfig c = make(8);
  c.attn_dp = 4;  // attn_tp 2; 4 divides tp but not attn_tp
  c.shared_experts_tp = 4;
  expect_rejected(8, c, "not divisible by shared_experts_tensor_parallel_size 4");
  c.attn_dp = 1;
  c.shared_experts_tp = 3;
  expect_rejected(8, c, "shared_experts_tensor_parallel_size 3");
}

// ---- property test: every valid configuration with world <= 64 ------------------------------

namespace {

// The sanitizer builds (CI's asan job) stop at 48: 44% of the work, and every path of the layout
// code is reached long before (the plain build runs all 64).
// The counts of valid configurations up to each bound (computed apart, in Python, from the rules).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kPropertyMaxWorld = 48;
constexpr long kValidConfigs = 378570;
#else
constexpr int kPropertyMaxWorld = 64;
constexpr long kValidConfigs = 687762;
#endif

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Where rank r sits in kind's groups: (group index in SGLang's order, position in the group).
struct Place {
  int index, pos;
};

// Closed-form reference: coordinates of r in the row-major views of its tp block.
struct Reference {
  int world, tp, pp, ep, attn_dp, attn_cp, attn_tp, moe_dp, moe_tp, dcp, shared;

  Place attn_cp_place(int r) const {
    int b = r / tp, l = r % tp;
    int dp = l / (attn_cp * attn_tp), c = l / attn_tp % attn_cp, t = l % attn_tp;
    return {b * attn_dp * attn_tp + dp * attn_tp + t, c};
  }
  Place place(pstate_group_kind_t kind, int r) const {
    int b = r / tp, l = r % tp;
    switch (kind) {
      case PSTATE_GROUP_WORLD: return {0, r};
      case PSTATE_GROUP_TP: return {b, l};
      case PSTATE_GROUP_PP: return {l, b};
      case PSTATE_GROUP_SELF_PP: return {r, 0};
      case PSTATE_GROUP_ATTN_TP: return {r / attn_tp, r % attn_tp};
      case PSTATE_GROUP_ATTN_CP: return attn_cp_place(r);
      case PSTATE_GROUP_MOE_TP: return {r / moe_tp, r % moe_tp};
      case PSTATE_GROUP_MOE_EP: {
        int d = l / (ep * moe_tp), e = l / moe_tp % ep, t = l % moe_tp;
        return {b * moe_dp * moe_tp + d * moe_tp + t, e};
      }
      case PSTATE_GROUP_MOE_DP: {
        if (attn_cp > moe_dp) return attn_cp_place(r);
        int d = l / (ep * moe_tp), c = l % (ep * moe_tp);
        return {b * ep * moe_tp + c, d};
      }
      case PSTATE_GROUP_DCP: return {r / dcp, r % dcp};
      case PSTATE_GROUP_SHARED_EXPERTS_TP: return {r / shared, r % shared};
      case PSTATE_GROUP_DP: case PSTATE_GROUP_PCP: case PSTATE_GROUP_EP: case PSTATE_GROUP_EPLB: break;  // vLLM's
      case PSTATE_GROUP_CUSTOM: break;  // pstate_new_group's, not the layout's
    }
    return {-1, -1};
  }
  int size(pstate_group_kind_t kind) const {
    switch (kind) {
      case PSTATE_GROUP_WORLD: return world;
      case PSTATE_GROUP_TP: return tp;
      case PSTATE_GROUP_PP: return pp;
      case PSTATE_GROUP_SELF_PP: return 1;
      case PSTATE_GROUP_ATTN_TP: return attn_tp;
      case PSTATE_GROUP_ATTN_CP: return attn_cp;
      case PSTATE_GROUP_MOE_TP: return moe_tp;
      case PSTATE_GROUP_MOE_EP: return ep;
      case PSTATE_GROUP_MOE_DP: return attn_cp > moe_dp ? attn_cp : moe_dp;
      case PSTATE_GROUP_DCP: return dcp;
      case PSTATE_GROUP_SHARED_EXPERTS_TP: return shared;
      case PSTATE_GROUP_DP: case PSTATE_GROUP_PCP: case PSTATE_GROUP_EP: case PSTATE_GROUP_EPLB: break;  // vLLM's
      case PSTATE_GROUP_CUSTOM: break;  // pstate_new_group's, not the layout's
    }
    return -1;
  }
  bool exists(pstate_group_kind_t kind) const {
    if (kind == PSTATE_GROUP_DCP) return dcp > 1;
    if (kind == PSTATE_GROUP_SHARED_EXPERTS_TP) return shared > 1;
    return kind <= PSTATE_GROUP_SELF_PP;  // not vLLM's dp, pcp, ep, eplb
  }
  // SGLang's aliasing rules, followed to the kind that owns the group object.
  pstate_group_kind_t canonical(pstate_group_kind_t kind) const {
    switch (kind) {
      case PSTATE_GROUP_ATTN_CP: return attn_cp == tp ? PSTATE_GROUP_TP : kind;
      case PSTATE_GROUP_ATTN_TP: return attn_tp == tp ? PSTATE_GROUP_TP : kind;
      case PSTATE_GROUP_SHARED_EXPERTS_TP: return shared == attn_tp ? canonical(PSTATE_GROUP_ATTN_TP) : kind;
      case PSTATE_GROUP_MOE_DP:
        if (attn_cp > moe_dp) return canonical(PSTATE_GROUP_ATTN_CP);
        return moe_dp == tp ? PSTATE_GROUP_TP : kind;
      case PSTATE_GROUP_MOE_EP: return ep == tp ? PSTATE_GROUP_TP : kind;
      case PSTATE_GROUP_MOE_TP: return moe_tp == tp ? PSTATE_GROUP_TP : kind;
      default: return kind;
    }
  }
};

std::string describe(const Reference &c) {
  return "world " + std::to_string(c.world) + " tp " + std::to_string(c.tp) + " attn_dp " +
         std::to_string(c.attn_dp) + " attn_cp " + std::to_string(c.attn_cp) + " ep " + std::to_string(c.ep) +
         " moe_dp " + std::to_string(c.moe_dp) + " dcp " + std::to_string(c.dcp) + " shared " +
         std::to_string(c.shared);
}

void check_kind(const Layout &l, const Reference &ref, pstate_group_kind_t kind) {
  const char *name = pstate::layout::kind_name(kind);
  if (l.has(kind) != ref.exists(kind)) fail_msg("%s: %s exists=%d", describe(ref).c_str(), name, l.has(kind));
  if (!ref.exists(kind)) return;
  const auto &p = l.groups(kind);
  int size = ref.size(kind);
  // Equal sizes and count * size == world, plus group(index)[pos] == r for every r below, make
  // the kind a partition of the world (r -> (index, pos) is injective onto all the slots).
  if (p.group_size() != size || p.group_count() != static_cast<size_t>(ref.world / size))
    fail_msg("%s: %s has %zu groups of %d, want %d of %d", describe(ref).c_str(), name, p.group_count(),
             p.group_size(), ref.world / size, size);
  for (size_t g = 0; g < p.group_count(); ++g) {
    auto members = p.group(g);
    for (size_t k = 1; k < members.size(); ++k)
      if (members[k - 1] >= members[k]) fail_msg("%s: %s group %zu not ascending", describe(ref).c_str(), name, g);
  }
  for (int r = 0; r < ref.world; ++r) {
    Place want = ref.place(kind, r);
    if (p.group_of(r) != static_cast<size_t>(want.index) ||
        p.group(static_cast<size_t>(want.index))[static_cast<size_t>(want.pos)] != r ||
        p.rank_in_group(r) != want.pos)
      fail_msg("%s: %s rank %d is in group %zu, want group %d position %d", describe(ref).c_str(), name, r,
               l.group_of(kind, r), want.index, want.pos);
  }
  pstate_group_kind_t root = ref.canonical(kind);
  if (l.canonical(kind) != root || &l.groups(root) != &p)
    fail_msg("%s: %s should share the group object of %s", describe(ref).c_str(), name,
             pstate::layout::kind_name(root));
}

}  // namespace

static void test_every_valid_config_up_to_world_64_matches_closed_form(void **) {
  long layouts = 0;
  for (int world = 1; world <= kPropertyMaxWorld; ++world)
    for (int tp : divisors(world))
      for (int attn_dp : divisors(tp))
        for (int attn_cp : divisors(tp / attn_dp))
          for (int ep : divisors(tp))
            for (int moe_dp : divisors(tp / ep))
              for (int dcp : divisors(tp)) {
                int attn_tp = tp / attn_dp / attn_cp;
                std::vector<int> shared_sizes = divisors(attn_tp);
                shared_sizes.insert(shared_sizes.begin(), 0);
                for (int shared : shared_sizes) {
                  Reference ref{world, tp, world / tp, ep, attn_dp, attn_cp, attn_tp, moe_dp, tp / ep / moe_dp,
                                dcp, shared};
                  ParallelConfig c{tp, world / tp, ep, attn_dp, attn_cp, moe_dp, dcp, shared};
                  Layout l(world, c);
                  for (int k = 0; k < pstate::layout::kKindCount; ++k)
                    check_kind(l, ref, static_cast<pstate_group_kind_t>(k));
                  ++layouts;
                }
              }
  assert_int_equal(layouts, kValidConfigs);  // every valid configuration was visited
}

static void test_every_invalid_small_config_is_rejected(void **) {
  // All sizes 1..4 around world 4: a config is accepted exactly when the rules hold.
  for (int tp = 1; tp <= 4; ++tp)
    for (int pp = 1; pp <= 4; ++pp)
      for (int ad = 1; ad <= 4; ++ad)
        for (int ac = 1; ac <= 4; ++ac)
          for (int ep = 1; ep <= 4; ++ep)
            for (int md = 1; md <= 4; ++md)
              for (int dcp = 1; dcp <= 4; ++dcp)
                for (int s = 0; s <= 4; ++s) {
                  ParallelConfig c{tp, pp, ep, ad, ac, md, dcp, s};
                  bool valid = tp * pp == 4 && tp % (ad * ac) == 0 && tp % (ep * md) == 0 && tp % dcp == 0 &&
                               (s <= 1 || (tp % (ad * ac) == 0 && (tp / ad / ac) % s == 0));
                  bool accepted = true;
                  try {
                    pstate::layout::validate(4, c);
                  } catch (const pstate::Error &) {
                    accepted = false;
                  }
                  if (accepted != valid)
                    fail_msg("tp %d pp %d attn_dp %d attn_cp %d ep %d moe_dp %d dcp %d shared %d: accepted %d", tp,
                             pp, ad, ac, ep, md, dcp, s, accepted);
                }
}

// ---- vLLM's layout (engine vllm) ------------------------------------------------------------

namespace {

ParallelConfig vllm(int tp, int pp = 1, int dp = 1, int pcp = 1, int dcp = 1, bool moe = false) {
  ParallelConfig c = make(tp, pp);
  c.engine = PSTATE_ENGINE_VLLM;
  c.dp = dp;
  c.pcp = pcp;
  c.dcp = dcp;
  c.moe_model = moe ? 1 : 0;
  return c;
}

}  // namespace

static void test_vllm_docstring_tp2_pp4_gives_four_tp_groups_and_two_pp_groups(void **) {
  Layout l(8, vllm(2, 4));
  expect_groups(l, PSTATE_GROUP_TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, PSTATE_GROUP_PP, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  // dp 1: singletons, listed in transpose(1, 4)'s order (tp before pp), as vLLM's list has them
  expect_groups(l, PSTATE_GROUP_DP, {{0}, {2}, {4}, {6}, {1}, {3}, {5}, {7}});
  expect_groups(l, PSTATE_GROUP_PCP, singletons(8));
  expect_groups(l, PSTATE_GROUP_WORLD, {{0, 1, 2, 3, 4, 5, 6, 7}});
}

// world 8 = dp 2 x pp 2 x tp 2 (a MoE model): the multi-rank test's layout, by hand from
// all_ranks = [[[[0,1]],[[2,3]]], [[[4,5]],[[6,7]]]] (dp, pp, pcp, tp)
static void test_vllm_world8_dp2_pp2_tp2_moe_groups(void **) {
  Layout l(8, vllm(2, 2, 2, 1, 1, true));
  expect_groups(l, PSTATE_GROUP_TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, PSTATE_GROUP_PP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  expect_groups(l, PSTATE_GROUP_DP, {{0, 4}, {2, 6}, {1, 5}, {3, 7}});  // (tp, pp) order: t before p
  expect_groups(l, PSTATE_GROUP_EP, {{0, 1, 4, 5}, {2, 3, 6, 7}});
  expect_groups(l, PSTATE_GROUP_EPLB, {{0, 1, 4, 5}, {2, 3, 6, 7}});
  assert_false(l.has(PSTATE_GROUP_DCP));
  assert_int_equal(l.group_of(PSTATE_GROUP_DP, 6), 1);
  assert_int_equal(l.groups(PSTATE_GROUP_DP).rank_in_group(6), 1);
}

// pcp and tp both > 1: pp's groups are listed tp before pcp (transpose(2, 4) leaves (dp, tp, pcp))
static void test_vllm_pp_groups_are_ordered_tp_before_pcp(void **) {
  Layout l(8, vllm(2, 2, 1, 2, 2));  // (pp 2, pcp 2, tp 2): rank = p*4 + c*2 + t
  expect_groups(l, PSTATE_GROUP_PCP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  expect_groups(l, PSTATE_GROUP_PP, {{0, 4}, {2, 6}, {1, 5}, {3, 7}});
  expect_groups(l, PSTATE_GROUP_DCP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  assert_false(l.has(PSTATE_GROUP_EP));
}

static void test_vllm_external_dp_repeats_the_replica(void **) {
  Layout l(12, vllm(2, 1, 2));  // ExternalDP 3 x dp 2 x tp 2
  assert_int_equal(l.config().external_dp(12), 3);
  expect_groups(l, PSTATE_GROUP_DP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}});
}

static void test_vllm_eplb_is_a_group_of_its_own_over_eps_ranks(void **) {
  Layout l(4, vllm(2, 1, 2, 1, 1, true));
  for (int k = 0; k < pstate::layout::kKindCount; ++k)
    if (l.has(static_cast<pstate_group_kind_t>(k))) assert_false(l.is_alias(static_cast<pstate_group_kind_t>(k)));
  expect_groups(l, PSTATE_GROUP_EPLB, groups_of(l, PSTATE_GROUP_EP));
}

static void test_vllm_has_only_vllms_kinds(void **) {
  Layout dense(8, vllm(2, 2, 2));
  for (auto k : {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP, PSTATE_GROUP_PP, PSTATE_GROUP_DP, PSTATE_GROUP_PCP})
    assert_true(dense.has(k));
  for (auto k : {PSTATE_GROUP_ATTN_TP, PSTATE_GROUP_ATTN_CP, PSTATE_GROUP_MOE_EP, PSTATE_GROUP_MOE_TP,
                 PSTATE_GROUP_MOE_DP, PSTATE_GROUP_SHARED_EXPERTS_TP, PSTATE_GROUP_SELF_PP, PSTATE_GROUP_DCP,
                 PSTATE_GROUP_EP, PSTATE_GROUP_EPLB}) {
    assert_false(dense.has(k));
    assert_int_equal(dense.group_count(k), 0);
  }
  expect_invalid([&] { dense.groups(PSTATE_GROUP_EP); }, "only for MoE models; set moe_model 1");
  expect_invalid([&] { dense.groups(PSTATE_GROUP_ATTN_TP); }, "attn_tp is a group of SGLang's layout");
  expect_invalid([&] { dense.groups(PSTATE_GROUP_DCP); }, "decode_context_parallel_size is 1");
  Layout sglang(8, make(8));
  for (auto k : {PSTATE_GROUP_DP, PSTATE_GROUP_PCP, PSTATE_GROUP_EP, PSTATE_GROUP_EPLB}) assert_false(sglang.has(k));
  assert_string_equal(sglang.why_absent(PSTATE_GROUP_EPLB).c_str(),
                      "eplb is a group of vLLM's layout and this layout is SGLang's (engine sglang); set engine "
                      "PSTATE_ENGINE_VLLM to get one");
  assert_string_equal(sglang.why_absent(PSTATE_GROUP_TP).c_str(), "");
}

static void test_vllm_creation_order_is_vllms(void **) {
  const pstate_group_kind_t want[] = {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP, PSTATE_GROUP_DCP,  PSTATE_GROUP_PCP,
                                      PSTATE_GROUP_PP,    PSTATE_GROUP_DP, PSTATE_GROUP_EP,   PSTATE_GROUP_EPLB};
  auto got = pstate::layout::creation_order(PSTATE_ENGINE_VLLM);
  assert_int_equal(got.size(), sizeof want / sizeof want[0]);
  for (size_t i = 0; i < got.size(); ++i) assert_int_equal(got[i], want[i]);
  assert_true(Layout(2, vllm(2)).creation_order().data() == got.data());
  // every layout kind is in an engine's order
  for (int k = 0; k < pstate::layout::kKindCount; ++k) {
    auto in = [k](std::span<const pstate_group_kind_t> order) {
      for (auto x : order)
        if (x == k) return true;
      return false;
    };
    assert_true(in(pstate::layout::creation_order(PSTATE_ENGINE_SGLANG)) || in(got));
  }
}

static void test_vllm_tp_zero_is_the_world_over_dp_pp_pcp(void **) {
  ParallelConfig c = vllm(0, 2, 2, 1);
  assert_int_equal(c.with_defaults(16).tp, 4);  // ExternalDP 1
  c.tp = 0;
  c.dp = 0;
  c.pp = 0;
  c.pcp = 0;
  ParallelConfig d = c.with_defaults(6);
  assert_int_equal(d.tp, 6);
  assert_int_equal(d.dp, 1);
  assert_int_equal(d.pcp, 1);
  expect_invalid([&] { vllm(0, 4).with_defaults(6); }, "world_size 6 is not divisible by data_parallel_size 1 x "
                                                       "pipeline_parallel_size 4");
}

static void test_vllm_refusals_name_the_sizes(void **) {
  expect_rejected(12, vllm(2, 2, 2), "world_size 12 is not divisible by data_parallel_size 2 x pipeline_parallel_size "
                                     "2 x prefill_context_parallel_size 1 x tensor_parallel_size 2 (= 8)");
  expect_rejected(8, vllm(4, 2, 1, 1, 3), "tensor_parallel_size 4 is not divisible by decode_context_parallel_size 3");
  expect_rejected(8, vllm(8, 1, 0), "data_parallel_size is 0");
  expect_rejected(8, vllm(8, 1, 1, -1), "prefill_context_parallel_size is -1");
  expect_rejected(8, vllm(65536, 65536), "overflows int");
  ParallelConfig c = vllm(8);
  c.moe_model = 2;
  expect_rejected(8, c, "moe_model is 2");
  for (int ParallelConfig::*field : {&ParallelConfig::ep, &ParallelConfig::attn_dp, &ParallelConfig::attn_cp,
                                     &ParallelConfig::moe_dp, &ParallelConfig::shared_experts_tp}) {
    ParallelConfig o = vllm(8);
    o.*field = 2;
    expect_rejected(8, o, "is 2: a size of SGLang's layout");
  }
  ParallelConfig s = make(4, 2);
  s.dp = 2;
  expect_rejected(8, s, "data_parallel_size is 2: a size of vLLM's layout");
  s.dp = 1;
  s.pcp = 2;
  expect_rejected(8, s, "prefill_context_parallel_size is 2: a size of vLLM's layout");
  s.pcp = 1;
  s.moe_model = 1;  // SGLang's MoE groups exist anyway: accepted, no effect
  Layout l(8, s);
  assert_false(l.has(PSTATE_GROUP_EP));
  s.engine = static_cast<pstate_engine_t>(2);
  expect_rejected(8, s, "engine 2 is not a pstate_engine_t");
}

// Every vLLM configuration with world <= 64 against closed-form coordinates: rank r is
// (e, d, p, c, t) in the row-major grid [ExternalDP][dp][pp][pcp][tp], and a kind's group index is
// the flat index of the coordinates left in front after its transpose, in their new order; its
// position the flat index of its own coordinates.
static void test_vllm_every_config_up_to_world_64_matches_closed_form(void **) {
  long layouts = 0;
  for (int world = 1; world <= 64; ++world)
    for (int tp : divisors(world))
      for (int pp : divisors(world / tp))
        for (int dp : divisors(world / tp / pp))
          for (int pcp : divisors(world / tp / pp / dp))
            for (int dcp : divisors(tp))
              for (bool moe : {false, true}) {
                Layout l(world, vllm(tp, pp, dp, pcp, dcp, moe));
                const int D = dp, P = pp, C = pcp, T = tp;  // (ExternalDP = world / (D P C T): the coordinate e)
                auto check = [&](pstate_group_kind_t kind, int r, int index, int pos) {
                  const auto &part = l.groups(kind);
                  if (part.group_of(r) != static_cast<size_t>(index) || part.rank_in_group(r) != pos ||
                      part.group(static_cast<size_t>(index))[static_cast<size_t>(pos)] != r)
                    fail_msg("world %d tp %d pp %d dp %d pcp %d dcp %d moe %d: %s rank %d in group %zu, want %d "
                             "position %d", world, tp, pp, dp, pcp, dcp, moe, pstate::layout::kind_name(kind), r,
                             part.group_of(r), index, pos);
                };
                assert_int_equal(l.groups(PSTATE_GROUP_PP).group_size(), P);
                assert_int_equal(l.groups(PSTATE_GROUP_DP).group_size(), D);
                assert_int_equal(l.has(PSTATE_GROUP_DCP), dcp > 1);
                assert_int_equal(l.has(PSTATE_GROUP_EP), moe);
                assert_int_equal(l.has(PSTATE_GROUP_EPLB), moe);
                for (int r = 0; r < world; ++r) {
                  int t = r % T, c = r / T % C, p = r / T / C % P, d = r / T / C / P % D, e = r / T / C / P / D;
                  check(PSTATE_GROUP_TP, r, r / T, t);
                  if (dcp > 1) check(PSTATE_GROUP_DCP, r, r / dcp, r % dcp);
                  check(PSTATE_GROUP_PCP, r, ((e * D + d) * P + p) * T + t, c);
                  check(PSTATE_GROUP_PP, r, ((e * D + d) * T + t) * C + c, p);
                  check(PSTATE_GROUP_DP, r, ((e * T + t) * P + p) * C + c, d);
                  if (moe) {
                    check(PSTATE_GROUP_EP, r, e * P + p, (d * C + c) * T + t);
                    check(PSTATE_GROUP_EPLB, r, e * P + p, (d * C + c) * T + t);
                  }
                }
                ++layouts;
              }
  assert_int_equal(layouts, 13312);  // every configuration was visited (the Python reference's count)
}


int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_docstring_tp2_pp4_gives_four_tp_groups_and_two_pp_groups),
      cmocka_unit_test(test_docstring_attn_cp2_moe_dp2_ep4_groups),
      cmocka_unit_test(test_design_world8_tp4_pp2),
      cmocka_unit_test(test_design_world8_tp8_ep4),
      cmocka_unit_test(test_dcp_cuts_each_tp_group_into_consecutive_chunks),
      cmocka_unit_test(test_dcp_group_absent_when_dcp_is_one),
      cmocka_unit_test(test_dcp_equal_to_tp_is_its_own_group_not_an_alias),
      cmocka_unit_test(test_shared_experts_tp_groups_are_consecutive_chunks_of_attn_tp),
      cmocka_unit_test(test_shared_experts_tp_equal_to_attn_tp_aliases_attn_tp),
      cmocka_unit_test(test_shared_experts_tp_zero_or_one_means_no_group),
      cmocka_unit_test(test_self_pp_holds_each_rank_alone),
      cmocka_unit_test(test_moe_dp_is_the_attn_cp_group_when_attn_cp_exceeds_moe_dp),
      cmocka_unit_test(test_moe_dp_is_the_tp_group_when_moe_dp_equals_tp),
      cmocka_unit_test(test_alias_chain_moe_dp_to_attn_cp_to_tp_resolves_to_tp),
      cmocka_unit_test(test_moe_ep_is_the_tp_group_when_ep_equals_tp),
      cmocka_unit_test(test_world_tp_pp_dcp_self_pp_are_never_aliases),
      cmocka_unit_test(test_creation_order_is_sglangs),
      cmocka_unit_test(test_rank_in_group_is_position_in_ascending_group),
      cmocka_unit_test(test_group_containing_gives_the_ranks_of_a_ranks_group),
      cmocka_unit_test(test_bad_index_rank_and_kind_are_invalid_argument),
      cmocka_unit_test(test_largest_world_is_accepted),
      cmocka_unit_test(test_world_below_one_is_rejected),
      cmocka_unit_test(test_world_over_limit_is_rejected),
      cmocka_unit_test(test_each_size_below_one_is_rejected_by_name),
      cmocka_unit_test(test_negative_shared_experts_tp_is_rejected),
      cmocka_unit_test(test_tp_times_pp_overflow_is_rejected),
      cmocka_unit_test(test_attn_dp_times_attn_cp_overflow_is_rejected),
      cmocka_unit_test(test_ep_times_moe_dp_overflow_is_rejected),
      cmocka_unit_test(test_world_not_tp_times_pp_is_rejected),
      cmocka_unit_test(test_tp_not_divisible_by_attn_dp_times_attn_cp_is_rejected),
      cmocka_unit_test(test_tp_not_divisible_by_ep_times_moe_dp_is_rejected),
      cmocka_unit_test(test_tp_not_divisible_by_dcp_is_rejected),
      cmocka_unit_test(test_shared_experts_tp_not_dividing_attn_tp_is_rejected),
      cmocka_unit_test(test_every_valid_config_up_to_world_64_matches_closed_form),
      cmocka_unit_test(test_every_invalid_small_config_is_rejected),
      cmocka_unit_test(test_vllm_docstring_tp2_pp4_gives_four_tp_groups_and_two_pp_groups),
      cmocka_unit_test(test_vllm_world8_dp2_pp2_tp2_moe_groups),
      cmocka_unit_test(test_vllm_pp_groups_are_ordered_tp_before_pcp),
      cmocka_unit_test(test_vllm_external_dp_repeats_the_replica),
      cmocka_unit_test(test_vllm_eplb_is_a_group_of_its_own_over_eps_ranks),
      cmocka_unit_test(test_vllm_has_only_vllms_kinds),
      cmocka_unit_test(test_vllm_creation_order_is_vllms),
      cmocka_unit_test(test_vllm_tp_zero_is_the_world_over_dp_pp_pcp),
      cmocka_unit_test(test_vllm_refusals_name_the_sizes),
      cmocka_unit_test(test_vllm_every_config_up_to_world_64_matches_closed_form),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
