// group_registry.hpp — every group object of one context, and the UCX group ids they take.
//
// The registry owns the world group, the model-parallel groups of the current layout (one object
// per canonical kind; aliased kinds share it, as in SGLang), the custom groups of pstate_new_group,
// and the retired groups: a group dropped by pstate_destroy_model_parallel, pstate_shrink or
// pstate_grow stays allocated until pstate_finalize / pstate_abort, so that a handle the
// application still holds answers INVALID_STATE instead of crashing. The Context (context.hpp)
// decides when groups are made and dropped (model_parallel.cpp, custom_group.cpp, shrink.cpp);
// the registry keeps them and answers which group is which.
//
// Group ids (12 bits of the UCX tag, ucx_tag.hpp): 0 is the world pstate_init makes; the
// model-parallel groups of generation g (and a world rebuilt by pstate_shrink / pstate_grow with
// it) take 1 + (g mod G) * kinds + kind, below kFirstCustomGroupId, so a group of a re-initialized
// layout never receives a stale message of an old one; custom groups take the ids from
// kFirstCustomGroupId, one per pstate_new_group call, cycling; the last id (4095) is
// UcxWorker::kNoticeGroupId, the failure notices'.
#pragma once

#include "layout/layout.hpp"

#include <pstate/pstate.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

struct pstate_group_s;

namespace pstate {

using Group = pstate_group_s;

// The call that dropped a group: what the group's later calls name, so that a handle kept past
// pstate_shrink or pstate_grow says which call replaced it (not pstate_destroy_model_parallel).
enum class DroppedBy : uint8_t { kDestroyModelParallel, kShrink, kGrow };

class GroupRegistry {
 public:
  static constexpr uint32_t kFirstCustomGroupId = 2048;
  static constexpr uint32_t kCustomGroupIds = 2047;
  // The group id of `kind` in generation `generation` (the world: PSTATE_GROUP_WORLD).
  static uint32_t group_id_for(uint32_t generation, pstate_group_kind_t kind);

  GroupRegistry();
  ~GroupRegistry();
  GroupRegistry(const GroupRegistry &) = delete;
  GroupRegistry &operator=(const GroupRegistry &) = delete;

  // ---- the world ----
  Group *world() const { return world_.get(); }
  void set_world(std::unique_ptr<Group> world);
  // The world group is dropped (pstate_shrink agreeing again): retired, kept.
  void retire_world(DroppedBy by = DroppedBy::kShrink) noexcept;

  // ---- the model-parallel groups ----
  bool model_parallel() const { return layout_.has_value(); }
  // The group of `kind` (nullptr: none in this layout, or model parallel not initialized).
  Group *by_kind(pstate_group_kind_t kind) const { return by_kind_[static_cast<size_t>(kind)]; }
  // The live model-parallel groups, in creation order (the same on every rank).
  const std::vector<std::unique_ptr<Group>> &model_parallel_groups() const { return groups_; }
  // How many layouts were made (their group ids stay distinct); set by shrink and grow, whose
  // world takes the next generation's ids.
  uint32_t generation() const { return generation_; }
  void set_generation(uint32_t generation) { generation_ = generation; }
  // initialize_model_parallel: the generation whose group ids its groups take.
  uint32_t next_generation() { return ++generation_; }
  // A group of the new layout, one per canonical kind, kept as soon as it is made; then the
  // layout, which hands each kind its (canonical) group.
  Group *add_model_parallel(std::unique_ptr<Group> group);
  void adopt_layout(layout::Layout layout);
  // The layout of the live model-parallel groups; nullptr when there are none.
  const layout::Layout *layout() const { return layout_ ? &*layout_ : nullptr; }
  // pstate_destroy_model_parallel: the model-parallel and custom groups are retired.
  void retire_model_parallel(DroppedBy by = DroppedBy::kDestroyModelParallel) noexcept;

  // ---- the custom groups (pstate_new_group) ----
  // new_group calls since the last destroy_model_parallel (each takes one id while its groups live).
  uint32_t custom_calls_live() const { return custom_calls_live_; }
  // The next call's group id, and the index its first group's name takes.
  uint32_t next_custom_group_id() const { return kFirstCustomGroupId + (custom_id_cursor_ % kCustomGroupIds); }
  uint32_t custom_groups_made() const { return custom_groups_made_; }
  Group *add_custom(std::unique_ptr<Group> group);
  // One new_group call is done: groups_made, its groups' count so far (this rank's and the others').
  void custom_call_done(uint32_t groups_made);
  void retire_custom(DroppedBy by = DroppedBy::kDestroyModelParallel) noexcept;

  // ---- all of them ----
  // The world first, then the model-parallel groups in creation order, then the custom ones.
  std::vector<Group *> live() const;
  // The groups pstate_destroy_model_parallel retires: the model-parallel ones and the custom ones.
  std::vector<Group *> retiring() const;
  // Every group's device communicator, retired ones included, is aborted (local, never blocks).
  void abort_device() noexcept;
  // pstate_shrink / pstate_grow: every group, the world included, is retired; no layout is left.
  void retire_all(DroppedBy by) noexcept;
  // Teardown (finalize, abort): every group is retired and freed.
  void close() noexcept;

 private:
  std::unique_ptr<Group> world_;
  std::optional<layout::Layout> layout_;
  uint32_t generation_ = 0;                                 // layouts made so far
  std::vector<std::unique_ptr<Group>> groups_;              // the live model-parallel groups
  std::array<Group *, PSTATE_GROUP_KIND_COUNT> by_kind_{};  // kind -> (shared) group object
  std::vector<std::unique_ptr<Group>> custom_groups_;       // live ones this rank belongs to
  uint32_t custom_groups_made_ = 0;  // custom groups of the world so far (their names' index)
  uint32_t custom_id_cursor_ = 0;    // new_group calls so far (their group ids cycle with it)
  uint32_t custom_calls_live_ = 0;   // new_group calls since the last destroy_model_parallel
  std::vector<std::unique_ptr<Group>> retired_;  // dropped groups: kept to answer INVALID_STATE
};

}  // namespace pstate
