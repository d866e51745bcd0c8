// group_registry.cpp — every group object of one context: kept, looked up, retired, torn down.
// See group_registry.hpp.
#include "group/group_registry.hpp"

#include "group/group.hpp"

#include <map>

namespace pstate {

uint32_t GroupRegistry::group_id_for(uint32_t generation, pstate_group_kind_t kind) {
  constexpr uint32_t kGenerations = (kFirstCustomGroupId - 1) / PSTATE_GROUP_KIND_COUNT;
  return 1 + (generation % kGenerations) * PSTATE_GROUP_KIND_COUNT + static_cast<uint32_t>(kind);
}

GroupRegistry::GroupRegistry() = default;
GroupRegistry::~GroupRegistry() = default;

void GroupRegistry::set_world(std::unique_ptr<Group> world) { world_ = std::move(world); }

void GroupRegistry::retire_world(DroppedBy by) noexcept {
  if (!world_) return;
  world_->retire(by);
  retired_.push_back(std::move(world_));
}

Group *GroupRegistry::add_model_parallel(std::unique_ptr<Group> group) {
  groups_.push_back(std::move(group));
  return groups_.back().get();
}

void GroupRegistry::adopt_layout(layout::Layout layout) {
  std::map<pstate_group_kind_t, Group *> canonical_groups;
  for (const auto &g : groups_) canonical_groups[g->kind()] = g.get();
  by_kind_.fill(nullptr);
  by_kind_[PSTATE_GROUP_WORLD] = world_.get();
  for (int k = 1; k < PSTATE_GROUP_KIND_COUNT; ++k) {
    auto kind = static_cast<pstate_group_kind_t>(k);
    if (layout.has(kind)) by_kind_[static_cast<size_t>(k)] = canonical_groups.at(layout.canonical(kind));
  }
  layout_.emplace(std::move(layout));
}

void GroupRegistry::retire_model_parallel(DroppedBy by) noexcept {
  for (auto &g : groups_) {
    g->retire(by);
    retired_.push_back(std::move(g));
  }
  groups_.clear();
  retire_custom(by);
  by_kind_.fill(nullptr);
  layout_.reset();
}

Group *GroupRegistry::add_custom(std::unique_ptr<Group> group) {
  custom_groups_.push_back(std::move(group));
  return custom_groups_.back().get();
}

void GroupRegistry::custom_call_done(uint32_t groups_made) {
  custom_groups_made_ = groups_made;
  ++custom_id_cursor_;
  ++custom_calls_live_;
}

void GroupRegistry::retire_custom(DroppedBy by) noexcept {
  for (auto &g : custom_groups_) {
    g->retire(by);
    retired_.push_back(std::move(g));
  }
  custom_groups_.clear();
  custom_calls_live_ = 0;
}

std::vector<Group *> GroupRegistry::live() const {
  std::vector<Group *> all;
  if (world_) all.push_back(world_.get());
  for (const auto &g : groups_) all.push_back(g.get());
  for (const auto &g : custom_groups_) all.push_back(g.get());
  return all;
}

std::vector<Group *> GroupRegistry::retiring() const {
  std::vector<Group *> all;
  for (const auto &g : groups_) all.push_back(g.get());
  for (const auto &g : custom_groups_) all.push_back(g.get());
  return all;
}

void GroupRegistry::abort_device() noexcept {
  for (auto &g : groups_) g->abort_device();
  for (auto &g : custom_groups_) g->abort_device();
  for (auto &g : retired_) g->abort_device();
  if (world_) world_->abort_device();
}

void GroupRegistry::retire_all(DroppedBy by) noexcept {
  retire_model_parallel(by);
  retire_world(by);
}

void GroupRegistry::close() noexcept {
  for (auto &g : groups_) g->retire();
  for (auto &g : custom_groups_) g->retire();
  for (auto &g : retired_) g->retire();
  if (world_) world_->retire();
  groups_.clear();
  custom_groups_.clear();
  retired_.clear();
  world_.reset();
  by_kind_.fill(nullptr);
}

}  // namespace pstate
