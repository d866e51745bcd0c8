// api_layout.cpp — the pstate_layout_* entry points: pure rank layout for launchers and planners.
//
// A pstate_layout_t owns one pstate::layout::Layout. Every entry point checks its arguments
// (NULL pointers, struct_size, enum range, indices, ranks) before touching the layout and reports
// failures through PSTATE_GUARD, so no exception crosses the C boundary.
#include "api/boundary.hpp"
#include "common/struct_io.hpp"
#include "layout/layout.hpp"

#include <algorithm>
#include <memory>

struct pstate_layout_s {
  pstate::layout::Layout layout;
};

namespace {

using pstate::layout::Layout;
using pstate::layout::ParallelConfig;

ParallelConfig config_from(int world_size, const pstate_parallel_config_t *cfg) {
  if (cfg == nullptr) return ParallelConfig::tensor_parallel_only(world_size);
  return ParallelConfig::from_c(pstate::read_struct(cfg, "cfg"), world_size);
}

// A C caller may pass any int as the kind; pstate.h gives the enums int as their underlying type
// in C++, so holding one is defined and the range check makes it a kind the layout knows.
pstate_group_kind_t checked_kind(pstate_group_kind_t kind) {
  pstate::api::require_group_kind(kind);
  return kind;
}

const Layout &layout_of(const pstate_layout_t *l) {
  pstate::api::require_nonnull(l, "layout");
  return l->layout;
}

}  // namespace

extern "C" {

PSTATE_API pstate_status_t pstate_layout_create(int world_size, const pstate_parallel_config_t *cfg,
                                                pstate_layout_t **out) {
  if (out != nullptr) *out = nullptr;
  return PSTATE_GUARD({
    pstate::api::require_nonnull(out, "out");
    auto created = std::make_unique<pstate_layout_s>(pstate_layout_s{Layout(world_size, config_from(world_size, cfg))});
    *out = created.release();  // owned by the caller until pstate_layout_destroy
  });
}

PSTATE_API pstate_status_t pstate_layout_group_count(const pstate_layout_t *l, pstate_group_kind_t kind,
                                                     size_t *count) {
  return PSTATE_GUARD({
    pstate::api::require_nonnull(count, "count");
    *count = 0;
    const Layout &layout = layout_of(l);
    *count = layout.group_count(checked_kind(kind));
  });
}

PSTATE_API pstate_status_t pstate_layout_group_ranks(const pstate_layout_t *l, pstate_group_kind_t kind,
                                                     size_t index, int *ranks, size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    pstate::api::require_nonnull(count, "count");
    *count = 0;
    const Layout &layout = layout_of(l);
    pstate_group_kind_t k = checked_kind(kind);
    auto members = layout.group_ranks(k, index);
    pstate::api::return_array(ranks, capacity, count, members.data(), members.size(), "ranks",
                              pstate::cat("the ", pstate::layout::kind_name(k), " group size"));
  });
}

PSTATE_API pstate_status_t pstate_layout_group_of(const pstate_layout_t *l, pstate_group_kind_t kind, int rank,
                                                  size_t *index) {
  return PSTATE_GUARD({
    pstate::api::require_nonnull(index, "index");
    *index = 0;
    const Layout &layout = layout_of(l);
    *index = layout.group_of(checked_kind(kind), rank);
  });
}

PSTATE_API void pstate_layout_destroy(pstate_layout_t *l) {
  std::unique_ptr<pstate_layout_s> owned(l);  // NULL is a no-op
}

}  // extern "C"
