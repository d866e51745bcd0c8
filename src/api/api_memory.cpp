// api_memory.cpp — the C entry points of group memory and registered buffers
// (pstate_mem_alloc/free/pool_reserve, pstate_mem_register/deregister, pstate_mem_query,
// pstate_group_mem_stats, pstate_set_graph_registration): argument and handle checks, then the
// group (group/group_mem.cpp) does the work. The arguments of pstate_mem_alloc and
// pstate_mem_pool_reserve are checked here but refused by the group, which knows whether the call
// is collective (then the refusal takes part in it, so no peer pairs the call with this rank's next one). Device collectives report their
// buffers to the group in api_ops.cpp.
#include "api/boundary.hpp"
#include "api/handles.hpp"
#include "common/limits.hpp"
#include "common/struct_io.hpp"
#include "group/context.hpp"
#include "group/group.hpp"

#include <optional>

using namespace pstate::api;

namespace {

// (PSTATE_GUARD names the call in front of the text.)
void require_bytes(size_t bytes) {
  if (bytes == 0) pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "bytes is 0 (ask for at least one byte)");
  if (bytes > pstate::kMaxBufferBytes)
    pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "bytes ", bytes, " is past 2^47 (no address space holds it)");
}

// The error of checks, if they throw one. The arguments of a call that may be collective are not
// refused here: the group decides (group_mem.cpp), because a collective call's refusal must take
// part in the call, or the other ranks would pair their call with this rank's next one.
template <typename Checks>
std::optional<pstate::Error> refusal_of(Checks &&checks) {
  try {
    checks();
  } catch (const pstate::Error &e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace

extern "C" {

PSTATE_API pstate_status_t pstate_mem_alloc(pstate_group_t *g, size_t bytes, void **out) {
  if (out != nullptr) *out = nullptr;
  return PSTATE_GUARD({
    require_group(g, "pstate_mem_alloc");
    ContextEntry entry(g->context(), "pstate_mem_alloc");
    const std::optional<pstate::Error> refused = refusal_of([&] {
      require_nonnull(out, "out");
      require_bytes(bytes);
    });
    void *p = g->mem_alloc(bytes, refused ? &*refused : nullptr);
    *out = p;
  });
}

PSTATE_API pstate_status_t pstate_mem_free(pstate_group_t *g, void *ptr) {
  return PSTATE_GUARD({
    require_group(g, "pstate_mem_free");
    if (ptr == nullptr) return;
    ContextEntry entry(g->context(), "pstate_mem_free");
    g->mem_free(ptr);
  });
}

PSTATE_API pstate_status_t pstate_mem_pool_reserve(pstate_group_t *g, size_t bytes) {
  return PSTATE_GUARD({
    require_group(g, "pstate_mem_pool_reserve");
    ContextEntry entry(g->context(), "pstate_mem_pool_reserve");
    const std::optional<pstate::Error> refused = refusal_of([&] { require_bytes(bytes); });
    g->mem_pool_reserve(bytes, refused ? &*refused : nullptr);
  });
}

PSTATE_API pstate_status_t pstate_mem_register(pstate_group_t *g, void *ptr, size_t bytes) {
  return PSTATE_GUARD({
    require_group(g, "pstate_mem_register");
    require_nonnull(ptr, "ptr");
    ContextEntry entry(g->context(), "pstate_mem_register");
    require_bytes(bytes);
    g->mem_register(ptr, bytes);
  });
}

PSTATE_API pstate_status_t pstate_mem_deregister(pstate_group_t *g, void *ptr) {
  return PSTATE_GUARD({
    require_group(g, "pstate_mem_deregister");
    require_nonnull(ptr, "ptr");
    ContextEntry entry(g->context(), "pstate_mem_deregister");
    g->mem_deregister(ptr);
  });
}

PSTATE_API pstate_status_t pstate_mem_query(pstate_group_t *g, const void *ptr, pstate_mem_info_t *out) {
  return PSTATE_GUARD({
    require_group(g, "pstate_mem_query");
    require_nonnull(out, "out");
    ContextEntry entry(g->context(), "pstate_mem_query");
    pstate::check_struct_bounds<pstate_mem_info_t>(out->struct_size, "out");
    pstate::write_struct(out, g->mem_query(ptr), "out");
  });
}

PSTATE_API pstate_status_t pstate_group_mem_stats(pstate_group_t *g, pstate_mem_stats_t *out) {
  return PSTATE_GUARD({
    require_group(g, "pstate_group_mem_stats");
    require_nonnull(out, "out");
    ContextEntry entry(g->context(), "pstate_group_mem_stats");
    pstate::check_struct_bounds<pstate_mem_stats_t>(out->struct_size, "out");
    pstate::write_struct(out, g->mem_stats(), "out");
  });
}

PSTATE_API pstate_status_t pstate_set_graph_registration(pstate_t *ps, int enable) {
  return PSTATE_GUARD({
    require_context(ps);
    ContextEntry entry(*ps, "pstate_set_graph_registration");
    ps->set_graph_registration(enable != 0);
  });
}

}  // extern "C"
