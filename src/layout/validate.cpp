// validate.cpp — the rules a (world_size, parallel config) must follow, checked before any math.
//
// Stricter than SGLang, which asserts only world == tp * pp and tp % dcp and otherwise lets
// integer division silently drop ranks (tp 6 with attn_dp 4 gives attn_tp 1 and 2 ranks in no
// group). Each rule has its own message naming the sizes involved and the fix; the first broken
// rule in the order below is reported.
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

}  // namespace

void validate(int world_size, const ParallelConfig &cfg) {
  if (world_size < 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "world_size is ", world_size, "; it must be >= 1");
  if (world_size > kMaxWorldSize)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "world_size ", world_size, " is larger than the limit of ",
                kMaxWorldSize, " ranks");

  const NamedSize tp{"tensor_parallel_size", cfg.tp}, pp{"pipeline_parallel_size", cfg.pp},
      ep{"expert_parallel_size", cfg.ep}, attn_dp{"attention_data_parallel_size", cfg.attn_dp},
      attn_cp{"attention_context_parallel_size", cfg.attn_cp}, moe_dp{"moe_data_parallel_size", cfg.moe_dp},
      dcp{"decode_context_parallel_size", cfg.dcp};
  for (NamedSize s : {tp, pp, ep, attn_dp, attn_cp, moe_dp, dcp}) require_positive(s);
  if (cfg.shared_experts_tp < 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "shared_experts_tensor_parallel_size is ", cfg.shared_experts_tp,
                "; use 0 for none or a size >= 1");

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

}  // namespace pstate::layout
