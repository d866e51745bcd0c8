// layout.hpp — SGLang's and vLLM's rank layouts as pure math: which global ranks form each group
// of each kind.
//
// This is initialize_model_parallel of SGLang's parallel_state.py (or, with engine
// PSTATE_ENGINE_VLLM, of vLLM's) without the communication: from a world size and the parallel
// sizes it computes, for every pstate_group_kind_t, the list of groups (each a vector of global
// ranks, ascending) in the order the engine creates them, the group index of any rank, and which
// kinds share one group object (SGLang's aliasing, e.g. moe_ep *is* the tp group when ep == tp;
// vLLM has none). No I/O, no global state, throws pstate::Error(INVALID_ARGUMENT) with one message
// per cause on a bad configuration. src/group/ builds group objects from it;
// src/api/api_layout.cpp exposes it as pstate_layout_*; `pstate layout` prints it.
//
// SGLang's layout is below; vLLM's (vllm_layout.cpp) is the rank grid
// arange(world).reshape(ExternalDP, dp, pp, pcp, tp), each kind's groups the rows of that grid
// with the kind's axes moved last.
//
// The shape of every group (see layout.cpp for the algorithm): the world is pp blocks of tp
// consecutive ranks (one block per pipeline stage). Each block is read two ways, as row-major
// arrays of ranks:
//   attention: [attn_dp][attn_cp][attn_tp]     attn_tp = tp / attn_dp / attn_cp
//   MoE:       [moe_dp][ep][moe_tp]            moe_tp  = tp / ep / moe_dp
// and a group of a kind is one line of such an array along that kind's axis: attn_tp groups run
// along the last axis (consecutive ranks), attn_cp groups along the middle one (stride attn_tp),
// moe_ep groups along ep (stride moe_tp), moe_dp groups along moe_dp (stride ep * moe_tp). pp
// groups run across blocks (stride tp); dcp and shared_experts_tp cut consecutive chunks; self_pp
// holds each rank alone (the singleton "PP" group SGLang gives one-layer speculative draft models,
// whose model does not span pipeline stages).
#pragma once

#include <pstate/pstate.h>

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pstate::layout {

// Largest world a layout accepts (also pstate_layout_create's documented limit).
inline constexpr int kMaxWorldSize = 1 << 20;
inline constexpr int kKindCount = PSTATE_GROUP_KIND_COUNT;

// SGLang's initialize_model_parallel arguments, with SGLang's defaults; and vLLM's (engine vllm).
struct ParallelConfig {
  int tp = 1;                 // tensor_model_parallel_size
  int pp = 1;                 // pipeline_model_parallel_size
  int ep = 1;                 // expert_model_parallel_size
  int attn_dp = 1;            // attention_data_parallel_size
  int attn_cp = 1;            // attention_context_model_parallel_size
  int moe_dp = 1;             // moe_data_model_parallel_size
  int dcp = 1;                // decode_context_parallel_size; a DCP group exists when > 1
  int shared_experts_tp = 0;  // 0 (SGLang's None) or 1: no group; > 1: a group of that width
  pstate_engine_t engine = PSTATE_ENGINE_SGLANG;  // whose layout (after SGLang's sizes: {tp, pp, ...} still works)
  int dp = 1;                 // vLLM: data_parallel_size (SGLang: must stay 1)
  int pcp = 1;                // vLLM: prefill_context_model_parallel_size (SGLang: must stay 1)
  int moe_model = 0;          // vLLM: 1 = MoE model (ep and eplb groups); 0 or 1

  bool vllm() const { return engine == PSTATE_ENGINE_VLLM; }
  // vLLM's ExternalDP: world_size / (dp * pp * pcp * tp), for a validated config.
  int external_dp(int world_size) const { return world_size / dp / pp / pcp / tp; }

  // The C struct's fields (the caller checked struct_size) with pstate.h's defaults applied: a
  // size of 0 is its default (tp: world_size / pp, every other size 1, shared_experts_tp none).
  // Throws INVALID_ARGUMENT when tp is 0 and pp does not divide world_size. Every front end
  // (pstate_layout_create, pstate_initialize_model_parallel, `pstate layout`) goes through it.
  static ParallelConfig from_c(const pstate_parallel_config_t &c, int world_size) {
    return fields_of(c).with_defaults(world_size);
  }
  // The C struct's fields as they are (0s kept).
  static ParallelConfig fields_of(const pstate_parallel_config_t &c);
  // What a NULL config means: everything 1 except tp = world_size (the all-0 config).
  static ParallelConfig tensor_parallel_only(int world_size);
  // The defaults applied to this config's 0 sizes (see from_c; under vLLM tp 0 is world_size /
  // (dp * pp * pcp)); negative sizes are kept for validate() to refuse.
  ParallelConfig with_defaults(int world_size) const;
};

// Throws pstate::Error(PSTATE_ERR_INVALID_ARGUMENT) naming the first broken rule (for a config
// whose defaults were applied, so 0 is refused here): an engine outside pstate_engine_t,
// world_size or a size < 1 (shared_experts_tp < 0), world_size over kMaxWorldSize, a product that
// overflows int, a size of the other engine set (SGLang: dp or pcp > 1; vLLM: ep, attn_dp, attn_cp,
// moe_dp > 1 or shared_experts_tp > 1), moe_model not 0 or 1; SGLang: world_size != tp * pp, tp
// not divisible by attn_dp * attn_cp, by ep * moe_dp or by dcp, shared_experts_tp (when > 1) not
// dividing attn_tp; vLLM (what its reshape and ParallelConfig assert): world_size not divisible by
// dp * pp * pcp * tp, tp not divisible by dcp. Returns normally for a valid layout.
void validate(int world_size, const ParallelConfig &cfg);

// The order an engine's initialize_model_parallel creates the kinds in (world first, from
// init_distributed_environment). SGLang: world, tp, dcp, attn_cp, attn_tp, shared_experts_tp,
// moe_dp, moe_ep, moe_tp, pp, self_pp. vLLM: world, tp, dcp, pcp, pp, dp, ep, eplb. Group
// creation is collective, so every rank must create group objects in one order; src/group/ uses
// this one (Layout::creation_order: the kinds of one layout's engine).
std::span<const pstate_group_kind_t> creation_order(pstate_engine_t engine = PSTATE_ENGINE_SGLANG);

// "sglang", "vllm"; throws INVALID_ARGUMENT for a value outside pstate_engine_t.
const char *engine_name(pstate_engine_t engine);

// "tp", "attn_cp", ... (pstate_group_kind_name); throws INVALID_ARGUMENT for a bad kind.
const char *kind_name(pstate_group_kind_t kind);

// The groups of one kind: group_count() disjoint groups of group_size() ranks each that together
// hold every rank of the world once. Immutable after construction.
class Partition {
 public:
  // flat_ranks holds group 0's ranks, then group 1's, ...; each group's ranks ascending, every
  // rank in [0, world_size) exactly once. (Checked; a violation is PSTATE_ERR_INTERNAL.)
  Partition(int world_size, int group_size, std::vector<int> flat_ranks);

  int group_size() const { return group_size_; }
  size_t group_count() const { return ranks_.size() / static_cast<size_t>(group_size_); }
  // Global ranks of group `index`, ascending; index must be < group_count().
  std::span<const int> group(size_t index) const;
  // Index of the group holding global rank `rank` (0 <= rank < world size).
  size_t group_of(int rank) const { return static_cast<size_t>(group_of_[static_cast<size_t>(rank)]); }
  // Position of `rank` inside its group (SGLang's rank_in_group).
  int rank_in_group(int rank) const;

 private:
  int group_size_;
  std::vector<int> ranks_;     // flat, group-major
  std::vector<int> group_of_;  // by global rank
};

// Every group of every kind for one (world_size, config). Copies share the partitions.
class Layout {
 public:
  // Validates (see validate()) and computes every kind. Throws pstate::Error.
  Layout(int world_size, const ParallelConfig &cfg);

  int world_size() const { return world_size_; }
  const ParallelConfig &config() const { return cfg_; }
  int attn_tp_size() const { return cfg_.tp / cfg_.attn_dp / cfg_.attn_cp; }
  int moe_tp_size() const { return cfg_.tp / cfg_.ep / cfg_.moe_dp; }

  // Whether the kind exists here. SGLang: all of SGLang's kinds except dcp (only when dcp > 1)
  // and shared_experts_tp (only when > 1). vLLM: world, tp, pp, dp, pcp, dcp (when dcp > 1), ep and
  // eplb (when moe_model). Throws INVALID_ARGUMENT for a kind outside pstate_group_kind_t.
  bool has(pstate_group_kind_t kind) const;
  // Why `kind` does not exist here, as a clause ("decode_context_parallel_size is 1; set it > 1
  // to get one"); "" when has(kind).
  std::string why_absent(pstate_group_kind_t kind) const;
  // The kinds this layout's engine creates, in its creation order (creation_order(engine)).
  std::span<const pstate_group_kind_t> creation_order() const { return layout::creation_order(cfg_.engine); }
  // The groups of `kind`; throws INVALID_ARGUMENT when !has(kind), saying why (why_absent).
  const Partition &groups(pstate_group_kind_t kind) const;
  // Number of groups of `kind`; 0 when the kind does not exist.
  size_t group_count(pstate_group_kind_t kind) const;
  // Ranks of group `index` of `kind`; throws INVALID_ARGUMENT for a bad kind or index.
  std::span<const int> group_ranks(pstate_group_kind_t kind, size_t index) const;
  // Index of the group of `kind` holding global `rank`; throws INVALID_ARGUMENT when out of range.
  size_t group_of(pstate_group_kind_t kind, int rank) const;
  // The ranks of that group (what a GroupCoordinator of `rank` holds as its `ranks`); the
  // position of `rank` in it is groups(kind).rank_in_group(rank).
  std::span<const int> group_containing(pstate_group_kind_t kind, int rank) const {
    return groups(kind).group(group_of(kind, rank));
  }

  // Aliasing: the kind whose group object `kind` shares in SGLang (followed to the end, so
  // moe_dp -> attn_cp -> tp gives tp), or `kind` itself when it has its own groups. Aliased kinds
  // have the very same groups as their canonical kind; src/group/ creates one group object per
  // canonical kind and hands it out for each alias. Rules (initialize_model_parallel):
  //   attn_cp = tp        when attn_cp == tp
  //   attn_tp = tp        when attn_tp == tp
  //   shared_experts_tp = attn_tp   when shared_experts_tp == attn_tp
  //   moe_dp  = attn_cp   when attn_cp > moe_dp (its groups are then attn_cp's, of width attn_cp)
  //           = tp        else when moe_dp == tp
  //   moe_ep  = tp        when ep == tp
  //   moe_tp  = tp        when moe_tp == tp
  // world, tp, pp, dcp and self_pp are never aliases (SGLang makes distinct groups for them even
  // when their ranks coincide, e.g. pp and world when tp == 1). vLLM's kinds are never aliases
  // either: each is a GroupCoordinator of its own, eplb too, over the same ranks as ep.
  pstate_group_kind_t canonical(pstate_group_kind_t kind) const;
  bool is_alias(pstate_group_kind_t kind) const { return canonical(kind) != kind; }

 private:
  static size_t slot(pstate_group_kind_t kind);  // checks the enum range
  void build_sglang();
  void build_vllm();  // vllm_layout.cpp
  void add(pstate_group_kind_t kind, std::shared_ptr<const Partition> groups);
  void alias(pstate_group_kind_t kind, pstate_group_kind_t target);

  int world_size_;
  ParallelConfig cfg_;
  std::array<std::shared_ptr<const Partition>, kKindCount> groups_{};
  std::array<pstate_group_kind_t, kKindCount> canonical_{};
};

}  // namespace pstate::layout
