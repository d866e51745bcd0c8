// validate.cpp — the rules a (world_size, parallel config) must follow, checked before any math.
//
// SGLang's: stricter than SGLang, which asserts only world == tp * pp and tp % dcp and otherwise
// lets integer division silently drop ranks (tp 6 with attn_dp 4 gives attn_tp 1 and 2 ranks in
// no group). vLLM's: what vLLM itself refuses, its reshape(-1, dp, pp, pcp, tp) of the world (a
// world not divisible by dp * pp * pcp * tp) and its ParallelConfig's "tp_size must be divisible
// by dcp_size"; and neither engine takes the other's sizes. Each rule has its own message naming
// the sizes involved and the fix; the first broken rule in the order below is reported.
#include "layout/layout.hpp"

#include "common/error.hpp"

#include <climits>

namespace pstate::layout {

namespace {

struct NamedSize {
  const char *name;
  int value;
};

void require_positive(NamedSize s) {
  if (s.value < 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, s.name, " is ", s.value,
                "; every parallel size must be >= 1 (or 0 for its default)");
}

// a * b as an int; throws when it does not fit (two sizes whose product SGLang would compute).
int checked_product(NamedSize a, NamedSize b) {
  long long p = static_cast<long long>(a.value) * b.value;
  if (p > INT_MAX)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, a.name, " ", a.value, " x ", b.name, " ", b.value, " = ", p,
                " overflows int: sizes this large cannot describe a world of at most ", kMaxWorldSize, " ranks");
  return static_cast<int>(p);
}

void require_divides(NamedSize whole, NamedSize part, const char *why) {
  if (whole.value % part.value != 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, whole.name, " ", whole.value, " is not divisible by ", part.name, " ",
                part.value, ": ", why);
}

// A size of the other engine must be left at its default: `limit` is the largest value allowed (1).
void require_unset(NamedSize s, int limit, const char *why) {
  if (s.value > limit)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, s.name, " is ", s.value, ": ", why);
}

void validate_vllm(int world_size, const ParallelConfig &cfg) {
  const NamedSize tp{"tensor_parallel_size", cfg.tp}, pp{"pipeline_parallel_size", cfg.pp},
      dp{"data_parallel_size", cfg.dp}, pcp{"prefill_context_parallel_size", cfg.pcp},
      dcp{"decode_context_parallel_size", cfg.dcp};
  constexpr const char *kSglangOnly =
      "a size of SGLang's layout; under engine vllm leave it 0 or 1 (vLLM's EP spans data_parallel_size x "
      "prefill_context_parallel_size x tensor_parallel_size and is asked for by moe_model 1)";
  require_unset({"expert_parallel_size", cfg.ep}, 1, kSglangOnly);
  require_unset({"attention_data_parallel_size", cfg.attn_dp}, 1, kSglangOnly);
  require_unset({"attention_context_parallel_size", cfg.attn_cp}, 1, kSglangOnly);
  require_unset({"moe_data_parallel_size", cfg.moe_dp}, 1, kSglangOnly);
  require_unset({"shared_experts_tensor_parallel_size", cfg.shared_experts_tp}, 1, kSglangOnly);

  // all_ranks = torch.arange(world_size).reshape(-1, dp, pp, pcp, tp): the world is whole replicas
  int grid = checked_product({"data_parallel_size x pipeline_parallel_size", checked_product(dp, pp)}, pcp);
  grid = checked_product({"data_parallel_size x pipeline_parallel_size x prefill_context_parallel_size", grid}, tp);
  if (world_size % grid != 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "world_size ", world_size, " is not divisible by data_parallel_size ",
                cfg.dp, " x pipeline_parallel_size ", cfg.pp, " x prefill_context_parallel_size ", cfg.pcp,
                " x tensor_parallel_size ", cfg.tp, " (= ", grid,
                "): vLLM lays the world out as ExternalDP x DP x PP x PCP x TP (arange(world).reshape(-1, dp, pp, "
                "pcp, tp)), so it must be a whole number of dp x pp x pcp x tp replicas");
  // vLLM's ParallelConfig: "tp_size=... must be divisible by dcp_size=..."
  require_divides(tp, dcp, "vLLM's decode context parallel groups are consecutive blocks of each tp group");
}

void validate_sglang(int world_size, const ParallelConfig &cfg) {
  const NamedSize tp{"tensor_parallel_size", cfg.tp}, pp{"pipeline_parallel_size", cfg.pp},
      ep{"expert_parallel_size", cfg.ep}, attn_dp{"attention_data_parallel_size", cfg.attn_dp},
      attn_cp{"attention_context_parallel_size", cfg.attn_cp}, moe_dp{"moe_data_parallel_size", cfg.moe_dp},
      dcp{"decode_context_parallel_size", cfg.dcp};
  constexpr const char *kVllmOnly =
      "a size of vLLM's layout; set engine PSTATE_ENGINE_VLLM (`pstate layout --engine vllm`) to use it, or "
      "leave it 0 or 1 (SGLang's data parallel attention is attention_data_parallel_size)";
  require_unset({"data_parallel_size", cfg.dp}, 1, kVllmOnly);
  require_unset({"prefill_context_parallel_size", cfg.pcp}, 1, kVllmOnly);

  int tp_pp = checked_product(tp, pp);
  if (tp_pp != world_size)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "world_size ", world_size, " != tensor_parallel_size ", cfg.tp,
                " x pipeline_parallel_size ", cfg.pp, " (= ", tp_pp,
                "): the world must be exactly tp x pp ranks (tensor_parallel_size 0 means world_size / "
                "pipeline_parallel_size)");

  int attn_split = checked_product(attn_dp, attn_cp);
  require_divides(tp, {"attention_data_parallel_size x attention_context_parallel_size", attn_split},
                  "attention TP (tp / attn_dp / attn_cp) must be a whole number of ranks");
  int moe_split = checked_product(ep, moe_dp);
  require_divides(tp, {"expert_parallel_size x moe_data_parallel_size", moe_split},
                  "MoE TP (tp / ep / moe_dp) must be a whole number of ranks");
  require_divides(tp, dcp, "decode context parallel groups are cut from each tp group");

  if (cfg.shared_experts_tp > 1) {
    NamedSize attn_tp{"attention TP size (tp / attn_dp / attn_cp)", cfg.tp / attn_split};
    require_divides(attn_tp, {"shared_experts_tensor_parallel_size", cfg.shared_experts_tp},
                    "shared-experts TP groups must not cross attention TP groups");
  }
}

}  // namespace

void validate(int world_size, const ParallelConfig &cfg) {
  engine_name(cfg.engine);  // throws for a value outside pstate_engine_t
  if (world_size < 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "world_size is ", world_size, "; it must be >= 1");
  if (world_size > kMaxWorldSize)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "world_size ", world_size, " is larger than the limit of ",
                kMaxWorldSize, " ranks");

  for (NamedSize s : {NamedSize{"tensor_parallel_size", cfg.tp}, NamedSize{"pipeline_parallel_size", cfg.pp},
                      NamedSize{"expert_parallel_size", cfg.ep}, NamedSize{"attention_data_parallel_size", cfg.attn_dp},
                      NamedSize{"attention_context_parallel_size", cfg.attn_cp},
                      NamedSize{"moe_data_parallel_size", cfg.moe_dp}, NamedSize{"decode_context_parallel_size", cfg.dcp},
                      NamedSize{"data_parallel_size", cfg.dp}, NamedSize{"prefill_context_parallel_size", cfg.pcp}})
    require_positive(s);
  if (cfg.shared_experts_tp < 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "shared_experts_tensor_parallel_size is ", cfg.shared_experts_tp,
                "; use 0 for none or a size >= 1");
  if (cfg.moe_model != 0 && cfg.moe_model != 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "moe_model is ", cfg.moe_model, "; use 1 for a MoE model or 0 for a dense one");

  if (cfg.vllm()) validate_vllm(world_size, cfg);
  else validate_sglang(world_size, cfg);
}

}  // namespace pstate::layout
