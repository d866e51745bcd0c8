// layout.cpp — computes SGLang's groups (initialize_model_parallel) for one world and config.
//
// Algorithm. Every group kind of SGLang is "lines of a row-major array": cut the world into
// blocks of `block` consecutive ranks; read each block as an array [outer][size][inner]; a group
// fixes (block, outer, inner) and runs along the `size` axis, so its ranks are
//     b*block + o*size*inner + i + k*inner      for k = 0 .. size-1
// and groups are listed block by block, then o, then i — exactly the nesting of SGLang's loops,
// so the group order (which SGLang's group names "tp:0", "tp:1" and new_group calls follow) is
// SGLang's. Ranks inside a group ascend by construction. The kinds, as (block, outer, size, inner):
//   world             (world, 1,             world,   1)
//   tp                (tp,    1,             tp,      1)
//   dcp               (tp,    tp/dcp,        dcp,     1)        consecutive chunks of each tp group
//   attn_cp           (tp,    attn_dp,       attn_cp, attn_tp)
//   attn_tp           (tp,    attn_dp*attn_cp, attn_tp, 1)
//   shared_experts_tp (world, world/s,       s,       1)        SGLang: range(0, world, s) chunks
//   moe_dp            (tp,    1,             moe_dp,  ep*moe_tp)
//   moe_ep            (tp,    moe_dp,        ep,      moe_tp)
//   moe_tp            (tp,    ep*moe_dp,     moe_tp,  1)
//   pp                (world, 1,             pp,      tp)
//   self_pp           (world, world,         1,       1)
// Aliased kinds (see Layout::canonical) do not get their own partition: they point at their
// canonical kind's, as SGLang assigns the same GroupCoordinator to two globals.
// vLLM's layout (engine vllm) is built by vllm_layout.cpp; this file holds what both share.
#include "layout/layout.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace pstate::layout {

namespace {

// The groups of one kind as lines of [outer][size][inner] arrays over blocks of `block` ranks.
std::shared_ptr<const Partition> lines(int world, int block, int outer, int size, int inner) {
  std::vector<int> flat;
  flat.reserve(static_cast<size_t>(world));
  for (int b = 0; b < world / block; ++b)
    for (int o = 0; o < outer; ++o)
      for (int i = 0; i < inner; ++i)
        for (int k = 0; k < size; ++k) flat.push_back(b * block + o * size * inner + i + k * inner);
  return std::make_shared<const Partition>(world, size, std::move(flat));
}

constexpr pstate_group_kind_t kSglangOrder[] = {
    PSTATE_GROUP_WORLD,   PSTATE_GROUP_TP,     PSTATE_GROUP_DCP,    PSTATE_GROUP_ATTN_CP,
    PSTATE_GROUP_ATTN_TP, PSTATE_GROUP_SHARED_EXPERTS_TP,           PSTATE_GROUP_MOE_DP,
    PSTATE_GROUP_MOE_EP,  PSTATE_GROUP_MOE_TP, PSTATE_GROUP_PP,     PSTATE_GROUP_SELF_PP};
// vLLM's initialize_model_parallel: _TP, _DCP, _PCP, _PP, _DP, _EP, _EPLB (world before them).
constexpr pstate_group_kind_t kVllmOrder[] = {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP, PSTATE_GROUP_DCP,
                                              PSTATE_GROUP_PCP,   PSTATE_GROUP_PP, PSTATE_GROUP_DP,
                                              PSTATE_GROUP_EP,    PSTATE_GROUP_EPLB};
// world, tp, pp and dcp are both engines'; every other kind is one engine's.
static_assert(std::size(kSglangOrder) + std::size(kVllmOrder) == kKindCount + 4,
              "every kind has a place in an engine's order");

}  // namespace

std::span<const pstate_group_kind_t> creation_order(pstate_engine_t engine) {
  engine_name(engine);  // throws for a value outside the enum
  if (engine == PSTATE_ENGINE_VLLM) return kVllmOrder;
  return kSglangOrder;
}

const char *engine_name(pstate_engine_t engine) {
  switch (static_cast<int>(engine)) {
    case PSTATE_ENGINE_SGLANG: return "sglang";
    case PSTATE_ENGINE_VLLM: return "vllm";
    default:
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "engine ", static_cast<int>(engine),
                  " is not a pstate_engine_t (", PSTATE_ENGINE_SGLANG, " = PSTATE_ENGINE_SGLANG, ", PSTATE_ENGINE_VLLM,
                  " = PSTATE_ENGINE_VLLM)");
  }
}

const char *kind_name(pstate_group_kind_t kind) {
  const char *name = pstate_group_kind_name(kind);
  // the kinds from PSTATE_GROUP_FIRST_NON_LAYOUT_KIND on (custom) have names but no place in the layout
  if (name == nullptr || static_cast<int>(kind) >= kKindCount)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "group kind ", static_cast<int>(kind),
                " is not a pstate_group_kind_t (0..", kKindCount - 1, ")");
  return name;
}

ParallelConfig ParallelConfig::fields_of(const pstate_parallel_config_t &c) {
  ParallelConfig cfg;
  cfg.tp = c.tensor_parallel_size;
  cfg.pp = c.pipeline_parallel_size;
  cfg.ep = c.expert_parallel_size;
  cfg.attn_dp = c.attention_data_parallel_size;
  cfg.attn_cp = c.attention_context_parallel_size;
  cfg.moe_dp = c.moe_data_parallel_size;
  cfg.dcp = c.decode_context_parallel_size;
  cfg.shared_experts_tp = c.shared_experts_tensor_parallel_size;
  cfg.engine = c.engine;  // the 1.x fields: zero (SGLang's layout) for an older caller's struct
  cfg.dp = c.data_parallel_size;
  cfg.pcp = c.prefill_context_parallel_size;
  cfg.moe_model = c.moe_model;
  return cfg;
}

// pstate.h's rule, one place for every front end: 0 is the default.
ParallelConfig ParallelConfig::with_defaults(int world_size) const {
  ParallelConfig cfg = *this;
  for (int *size : {&cfg.pp, &cfg.ep, &cfg.attn_dp, &cfg.attn_cp, &cfg.moe_dp, &cfg.dcp, &cfg.dp, &cfg.pcp})
    if (*size == 0) *size = 1;
  if (cfg.tp == 0 && cfg.vllm()) {
    // vLLM: ExternalDP 1, the rest of the world is tp
    long long rest = static_cast<long long>(cfg.dp) * cfg.pp * cfg.pcp;
    if (world_size >= 1 && cfg.dp >= 1 && cfg.pp >= 1 && cfg.pcp >= 1 && world_size % rest != 0)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "tensor_parallel_size 0 means world_size / (data_parallel_size x "
                  "pipeline_parallel_size x prefill_context_parallel_size), but world_size ", world_size,
                  " is not divisible by data_parallel_size ", cfg.dp, " x pipeline_parallel_size ", cfg.pp,
                  " x prefill_context_parallel_size ", cfg.pcp, " (= ", rest, ")");
    // (with a bad world or size, validate() names that one: tp takes a value it does not report)
    cfg.tp = world_size >= 1 && cfg.dp >= 1 && cfg.pp >= 1 && cfg.pcp >= 1 ? static_cast<int>(world_size / rest)
                                                                          : world_size;
  }
  if (cfg.tp == 0) {
    if (world_size >= 1 && cfg.pp >= 1 && world_size % cfg.pp != 0)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "tensor_parallel_size 0 means world_size / pipeline_parallel_size, "
                  "but world_size ", world_size, " is not divisible by pipeline_parallel_size ", cfg.pp,
                  ": the world must be exactly tp x pp ranks");
    // (with a bad world or pp, validate() names that one: tp takes a value it does not report)
    cfg.tp = world_size >= 1 && cfg.pp >= 1 ? world_size / cfg.pp : world_size;
  }
  return cfg;
}

ParallelConfig ParallelConfig::tensor_parallel_only(int world_size) {
  ParallelConfig cfg;
  cfg.tp = world_size;
  return cfg;
}

// ---- Partition ----------------------------------------------------------------------------

Partition::Partition(int world_size, int group_size, std::vector<int> flat_ranks)
    : group_size_(group_size), ranks_(std::move(flat_ranks)),
      group_of_(static_cast<size_t>(world_size), -1) {
  if (group_size < 1 || ranks_.size() != group_of_.size() || ranks_.size() % static_cast<size_t>(group_size) != 0)
    throw_error(PSTATE_ERR_INTERNAL, "layout: ", ranks_.size(), " ranks in groups of ", group_size,
                " do not cover a world of ", world_size);
  for (size_t g = 0; g < group_count(); ++g) {
    auto members = group(g);
    for (size_t k = 0; k < members.size(); ++k) {
      int r = members[k];
      bool in_world = r >= 0 && r < world_size;
      if (!in_world || group_of_[static_cast<size_t>(r)] != -1 || (k > 0 && members[k - 1] >= r))
        throw_error(PSTATE_ERR_INTERNAL, "layout: group ", g, " has rank ", r,
                    " out of range, twice, or out of order");
      group_of_[static_cast<size_t>(r)] = static_cast<int>(g);
    }
  }
}

std::span<const int> Partition::group(size_t index) const {
  return std::span<const int>(ranks_).subspan(index * static_cast<size_t>(group_size_),
                                              static_cast<size_t>(group_size_));
}

int Partition::rank_in_group(int rank) const {
  auto members = group(group_of(rank));
  return static_cast<int>(std::lower_bound(members.begin(), members.end(), rank) - members.begin());
}

// ---- Layout -------------------------------------------------------------------------------

Layout::Layout(int world_size, const ParallelConfig &cfg) : world_size_(world_size), cfg_(cfg) {
  validate(world_size, cfg);
  for (int k = 0; k < kKindCount; ++k) canonical_[static_cast<size_t>(k)] = static_cast<pstate_group_kind_t>(k);
  if (cfg.vllm()) build_vllm();
  else build_sglang();
}

void Layout::build_sglang() {
  const ParallelConfig &cfg = cfg_;
  const int w = world_size_, tp = cfg.tp, ep = cfg.ep, moe_dp = cfg.moe_dp;
  const int attn_cp = cfg.attn_cp, attn_tp = attn_tp_size(), moe_tp = moe_tp_size();

  // SGLang's order: world (init_distributed_environment), then initialize_model_parallel's.
  add(PSTATE_GROUP_WORLD, lines(w, w, 1, w, 1));
  add(PSTATE_GROUP_TP, lines(w, tp, 1, tp, 1));
  if (cfg.dcp > 1) add(PSTATE_GROUP_DCP, lines(w, tp, tp / cfg.dcp, cfg.dcp, 1));

  if (attn_cp == tp) alias(PSTATE_GROUP_ATTN_CP, PSTATE_GROUP_TP);
  else add(PSTATE_GROUP_ATTN_CP, lines(w, tp, cfg.attn_dp, attn_cp, attn_tp));

  if (attn_tp == tp) alias(PSTATE_GROUP_ATTN_TP, PSTATE_GROUP_TP);
  else add(PSTATE_GROUP_ATTN_TP, lines(w, tp, cfg.attn_dp * attn_cp, attn_tp, 1));

  if (int s = cfg.shared_experts_tp; s > 1) {
    if (s == attn_tp) alias(PSTATE_GROUP_SHARED_EXPERTS_TP, PSTATE_GROUP_ATTN_TP);
    else add(PSTATE_GROUP_SHARED_EXPERTS_TP, lines(w, w, w / s, s, 1));
  }

  if (attn_cp > moe_dp) alias(PSTATE_GROUP_MOE_DP, PSTATE_GROUP_ATTN_CP);  // CP partners share tokens
  else if (moe_dp == tp) alias(PSTATE_GROUP_MOE_DP, PSTATE_GROUP_TP);
  else add(PSTATE_GROUP_MOE_DP, lines(w, tp, 1, moe_dp, ep * moe_tp));

  if (ep == tp) alias(PSTATE_GROUP_MOE_EP, PSTATE_GROUP_TP);
  else add(PSTATE_GROUP_MOE_EP, lines(w, tp, moe_dp, ep, moe_tp));

  if (moe_tp == tp) alias(PSTATE_GROUP_MOE_TP, PSTATE_GROUP_TP);
  else add(PSTATE_GROUP_MOE_TP, lines(w, tp, ep * moe_dp, moe_tp, 1));

  add(PSTATE_GROUP_PP, lines(w, w, 1, cfg.pp, tp));
  add(PSTATE_GROUP_SELF_PP, lines(w, w, w, 1, 1));
}

void Layout::add(pstate_group_kind_t kind, std::shared_ptr<const Partition> groups) {
  groups_[slot(kind)] = std::move(groups);
}

void Layout::alias(pstate_group_kind_t kind, pstate_group_kind_t target) {
  pstate_group_kind_t root = canonical(target);  // targets are built first, so this is final
  groups_[slot(kind)] = groups_[slot(root)];
  canonical_[slot(kind)] = root;
}

size_t Layout::slot(pstate_group_kind_t kind) {
  kind_name(kind);  // throws for a value outside the enum
  return static_cast<size_t>(kind);
}

bool Layout::has(pstate_group_kind_t kind) const { return groups_[slot(kind)] != nullptr; }

std::string Layout::why_absent(pstate_group_kind_t kind) const {
  if (has(kind)) return "";
  if (std::ranges::find(creation_order(), kind) == creation_order().end()) {
    const char *other = cfg_.vllm() ? "SGLang's" : "vLLM's";
    const char *mine = cfg_.vllm() ? "vLLM's" : "SGLang's";
    const char *set = cfg_.vllm() ? "PSTATE_ENGINE_SGLANG" : "PSTATE_ENGINE_VLLM";
    return cat(kind_name(kind), " is a group of ", other, " layout and this layout is ", mine, " (engine ",
               engine_name(cfg_.engine), "); set engine ", set, " to get one");
  }
  if (kind == PSTATE_GROUP_DCP)
    return cat("decode_context_parallel_size is ", cfg_.dcp, "; set it > 1 to get one");
  if (kind == PSTATE_GROUP_SHARED_EXPERTS_TP)
    return cat("shared_experts_tensor_parallel_size is ", cfg_.shared_experts_tp, "; set it > 1 to get one");
  // vLLM's ep and eplb: only for MoE models (initialize_model_parallel: "Don't create EP group for dense models")
  return cat("vLLM makes ", kind_name(kind), " groups only for MoE models; set moe_model 1 to get one");
}

const Partition &Layout::groups(pstate_group_kind_t kind) const {
  if (!has(kind))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "this layout has no ", kind_name(kind), " group: ", why_absent(kind));
  return *groups_[slot(kind)];
}

size_t Layout::group_count(pstate_group_kind_t kind) const { return has(kind) ? groups(kind).group_count() : 0; }

std::span<const int> Layout::group_ranks(pstate_group_kind_t kind, size_t index) const {
  const Partition &p = groups(kind);
  if (index >= p.group_count())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, kind_name(kind), " group index ", index, " is out of range: this layout has ",
                p.group_count(), " ", kind_name(kind), " groups (0..", p.group_count() - 1, ")");
  return p.group(index);
}

size_t Layout::group_of(pstate_group_kind_t kind, int rank) const {
  const Partition &p = groups(kind);
  if (rank < 0 || rank >= world_size_)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "rank ", rank, " is out of range: the world has ", world_size_,
                " ranks (0..", world_size_ - 1, ")");
  return p.group_of(rank);
}

pstate_group_kind_t Layout::canonical(pstate_group_kind_t kind) const { return canonical_[slot(kind)]; }

}  // namespace pstate::layout
