/*
 * test_vllm_groups.c — pstate_initialize_model_parallel with engine PSTATE_ENGINE_VLLM on real
 * ranks (8 processes): every group vLLM's initialize_model_parallel makes exists as a group the
 * rank can call collectives on, with vLLM's membership, rank_in_group and first/last/next/prev
 * rank (its GroupCoordinator's, from its rank list), and EPLB is a group object of its own over
 * EP's ranks. The expected groups are computed here from vLLM's grid, independently of pstate:
 * rank r is (e, d, p, c, t) in arange(world).reshape(-1, dp, pp, pcp, tp), and a kind's group
 * holds the ranks that agree with r on every coordinate but the kind's own (tp: t; dcp: t inside
 * its block of dcp; pcp: c; pp: p; dp: d; ep and eplb: d, c and t), ascending.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ranks.h"

#define WORLD 8

typedef struct vllm_case_t {
  int tp, pp, dp, pcp, dcp, moe;
} vllm_case_t;

typedef struct coords_t {
  int e, d, p, c, t;
} coords_t;

static coords_t coords_of(const vllm_case_t *v, int r) {
  coords_t x;
  x.t = r % v->tp;
  x.c = r / v->tp % v->pcp;
  x.p = r / v->tp / v->pcp % v->pp;
  x.d = r / v->tp / v->pcp / v->pp % v->dp;
  x.e = r / v->tp / v->pcp / v->pp / v->dp;
  return x;
}

/* Whether ranks a and b are in one group of kind (they agree on every coordinate the kind fixes). */
static int same_group(const vllm_case_t *v, pstate_group_kind_t kind, int a, int b) {
  coords_t x = coords_of(v, a), y = coords_of(v, b);
  int same_edp = x.e == y.e && x.d == y.d && x.p == y.p;
  switch ((int)kind) {
    case PSTATE_GROUP_WORLD: return 1;
    case PSTATE_GROUP_TP: return same_edp && x.c == y.c;
    case PSTATE_GROUP_DCP: return same_edp && x.c == y.c && x.t / v->dcp == y.t / v->dcp;
    case PSTATE_GROUP_PCP: return same_edp && x.t == y.t;
    case PSTATE_GROUP_PP: return x.e == y.e && x.d == y.d && x.c == y.c && x.t == y.t;
    case PSTATE_GROUP_DP: return x.e == y.e && x.p == y.p && x.c == y.c && x.t == y.t;
    case PSTATE_GROUP_EP: case PSTATE_GROUP_EPLB: return x.e == y.e && x.p == y.p;
    default: return 0;
  }
}

/* The index vLLM's group list gives r's group of kind: the coordinates left in front of the
 * kind's axes after its transpose, as a row-major index in their new order. */
static int group_index(const vllm_case_t *v, pstate_group_kind_t kind, int r) {
  coords_t x = coords_of(v, r);
  int D = v->dp, P = v->pp, C = v->pcp, T = v->tp;
  switch ((int)kind) {
    case PSTATE_GROUP_WORLD: return 0;
    case PSTATE_GROUP_TP: return r / T;
    case PSTATE_GROUP_DCP: return r / v->dcp;
    case PSTATE_GROUP_PCP: return ((x.e * D + x.d) * P + x.p) * T + x.t;
    case PSTATE_GROUP_PP: return ((x.e * D + x.d) * T + x.t) * C + x.c;
    case PSTATE_GROUP_DP: return ((x.e * T + x.t) * P + x.p) * C + x.c;
    case PSTATE_GROUP_EP: case PSTATE_GROUP_EPLB: return x.e * P + x.p;
    default: return -1;
  }
}

/* Checks one group of this rank against the formula and all-reduces over it. */
static int check_group(const pstate_test_rank_t *self, const vllm_case_t *v, pstate_t *ps, pstate_group_kind_t kind,
                       pstate_group_t **out) {
  const char *kname = pstate_group_kind_name(kind);
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, kind, &g));
  *out = g;
  int want[WORLD], n_want = 0, me = -1;
  for (int r = 0; r < WORLD; ++r)
    if (same_group(v, kind, self->rank, r)) {
      if (r == self->rank) me = n_want;
      want[n_want++] = r;
    }
  int got[WORLD];
  size_t n = 0;
  RANK_OK(self, pstate_group_ranks(g, got, WORLD, &n));
  RANK_CHECK(self, (int)n == n_want && memcmp(got, want, n * sizeof(int)) == 0, "%s: %zu ranks from %d, want %d",
             kname, n, got[0], n_want);
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(g, &info));
  char name[PSTATE_GROUP_NAME_MAX];
  snprintf(name, sizeof name, "%s:%d", kname, group_index(v, kind, self->rank));
  RANK_CHECK(self, info.kind == kind && strcmp(info.name, name) == 0, "%s: kind %d name %s, want %s", kname,
             (int)info.kind, info.name, name);
  /* vLLM's GroupCoordinator: rank_in_group = ranks.index(rank), first_rank = ranks[0], last_rank =
   * ranks[-1], next/prev = ranks[(rank_in_group +- 1) % world_size] */
  RANK_CHECK(self, info.rank == self->rank && info.rank_in_group == me && info.world_size == n_want, "%s: rank %d "
             "rank_in_group %d world_size %d", kname, info.rank, info.rank_in_group, info.world_size);
  RANK_CHECK(self, info.first_rank == want[0] && info.last_rank == want[n_want - 1] &&
                       info.next_rank == want[(me + 1) % n_want] && info.prev_rank == want[(me - 1 + n_want) % n_want],
             "%s: first %d last %d next %d prev %d", kname, info.first_rank, info.last_rank, info.next_rank,
             info.prev_rank);
  /* the group carries a collective among exactly these ranks: sum of (rank + 1) */
  int64_t x = self->rank + 1, sum = 0;
  for (int i = 0; i < n_want; ++i) sum += want[i] + 1;
  RANK_OK(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_INT64, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == sum, "%s all_reduce: %lld, want %lld", kname, (long long)x, (long long)sum);
  return 0;
}

static int absent(const pstate_test_rank_t *self, pstate_t *ps, pstate_group_kind_t kind, const char *needle) {
  pstate_group_t *g = NULL;
  pstate_status_t s = pstate_get_group(ps, kind, &g);
  const char *m = pstate_last_error();
  RANK_CHECK(self, s == PSTATE_ERR_UNSUPPORTED && g == NULL && strstr(m, needle) != NULL, "%s -> %s (%s)",
             pstate_group_kind_name(kind), pstate_status_string(s), m);
  return 0;
}

static int vllm_rank(const pstate_test_rank_t *self) {
  const vllm_case_t *v = self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.engine = PSTATE_ENGINE_VLLM;
  cfg.tensor_parallel_size = v->tp;
  cfg.pipeline_parallel_size = v->pp;
  cfg.data_parallel_size = v->dp;
  cfg.prefill_context_parallel_size = v->pcp;
  cfg.decode_context_parallel_size = v->dcp;
  cfg.moe_model = v->moe;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *seen[PSTATE_GROUP_KIND_COUNT] = {NULL};
  const pstate_group_kind_t kinds[] = {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP, PSTATE_GROUP_DCP, PSTATE_GROUP_PCP,
                                       PSTATE_GROUP_PP,    PSTATE_GROUP_DP, PSTATE_GROUP_EP,  PSTATE_GROUP_EPLB};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
    pstate_group_kind_t k = kinds[i];
    if (k == PSTATE_GROUP_DCP && v->dcp == 1) {
      if (absent(self, ps, k, "decode_context_parallel_size is 1")) return 1;
    } else if ((k == PSTATE_GROUP_EP || k == PSTATE_GROUP_EPLB) && !v->moe) {
      if (absent(self, ps, k, "set moe_model 1")) return 1;
    } else if (check_group(self, v, ps, k, &seen[k])) {
      return 1;
    }
  }
  /* no aliasing in vLLM: EPLB is a second group over EP's ranks, every kind its own object */
  for (int a = 0; a < PSTATE_GROUP_KIND_COUNT; ++a)
    for (int b = a + 1; b < PSTATE_GROUP_KIND_COUNT; ++b)
      RANK_CHECK(self, seen[a] == NULL || seen[a] != seen[b], "%s and %s are one group object",
                 pstate_group_kind_name((pstate_group_kind_t)a), pstate_group_kind_name((pstate_group_kind_t)b));
  if (absent(self, ps, PSTATE_GROUP_ATTN_TP, "attn_tp is a group of SGLang's layout")) return 1;
  if (absent(self, ps, PSTATE_GROUP_SELF_PP, "set engine PSTATE_ENGINE_SGLANG")) return 1;
  /* pstate_tp_allreduce uses vLLM's tp group */
  float y = 1.0f;
  RANK_OK(self, pstate_tp_allreduce(ps, &y, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, y == (float)v->tp, "tp_allreduce: %g", y);
  RANK_OK(self, pstate_destroy_model_parallel(ps));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

/* world 8 = dp 2 x pp 2 x tp 2, a MoE model: tp, pp, dp, ep and eplb of more than one rank */
static void test_vllm_dp2_pp2_tp2_moe_groups_match_the_grid_and_carry_all_reduce(void **state) {
  (void)state;
  vllm_case_t v = {2, 2, 2, 1, 1, 1};
  assert_int_equal(pstate_test_run_processes(WORLD, 180, vllm_rank, &v, NULL), 0);
}

/* world 8 = pp 2 x pcp 2 x tp 2 with dcp 2, dense: pcp and dcp groups, no ep/eplb */
static void test_vllm_pcp2_dcp2_dense_groups_match_the_grid(void **state) {
  (void)state;
  vllm_case_t v = {2, 2, 1, 2, 2, 0};
  assert_int_equal(pstate_test_run_processes(WORLD, 180, vllm_rank, &v, NULL), 0);
}

/* A rank asking for vLLM's layout while another asks for SGLang's with the same sizes: MISMATCH
 * naming the engine on every rank, nothing created. */
static int engine_mismatch_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.engine = self->rank == 0 ? PSTATE_ENGINE_VLLM : PSTATE_ENGINE_SGLANG;
  pstate_status_t s = pstate_initialize_model_parallel(ps, &cfg);
  const char *m = pstate_last_error();
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && strstr(m, "rank 0 tp 2 pp 1 engine 1, rank 1 tp 2 pp 1 engine 0"),
             "-> %s (%s)", pstate_status_string(s), m);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_ranks_that_disagree_about_the_engine_get_mismatch(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, engine_mismatch_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vllm_dp2_pp2_tp2_moe_groups_match_the_grid_and_carry_all_reduce),
      cmocka_unit_test(test_vllm_pcp2_dcp2_dense_groups_match_the_grid),
      cmocka_unit_test(test_ranks_that_disagree_about_the_engine_get_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
