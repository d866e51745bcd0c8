// api_runtime.cpp — the C entry points of the lifecycle and of the groups (pstate_init ...
// pstate_abort, pstate_set_interrupt_check, pstate_get_group, pstate_group_info/ranks/same_node):
// argument and handle checks, then the Context / group objects of src/group/ do the work.
#include "api/boundary.hpp"
#include "api/handles.hpp"
#include "group/context.hpp"
#include "group/group.hpp"

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

using pstate::api::require;
using pstate::api::require_nonnull;

extern "C" {

PSTATE_API pstate_status_t pstate_init(const pstate_init_params_t *params, pstate_t **out) {
  return PSTATE_GUARD({
    require_nonnull(out, "out");
    *out = nullptr;
    if (params != nullptr) {
      pstate::api::require_struct(params->struct_size, sizeof(pstate_init_params_t), sizeof(pstate_init_params_t),
                                  "params", "PSTATE_INIT_PARAMS_INIT");
      require(params->device == PSTATE_DEVICE_CPU || params->device == PSTATE_DEVICE_CUDA,
              "params->device is not a pstate_device_t (PSTATE_DEVICE_CPU or PSTATE_DEVICE_CUDA)");
      require(params->timeout_ms >= 0, "params->timeout_ms is negative (0 = default)");
    }
    *out = std::make_unique<pstate_s>(params).release();
  });
}

PSTATE_API pstate_status_t pstate_initialize_model_parallel(pstate_t *ps, const pstate_parallel_config_t *cfg) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_initialize_model_parallel");
    if (cfg != nullptr)
      pstate::api::require_struct(cfg->struct_size, sizeof(pstate_parallel_config_t), sizeof(pstate_parallel_config_t),
                                  "cfg", "PSTATE_PARALLEL_CONFIG_INIT");
    ps->initialize_model_parallel(cfg);
  });
}

PSTATE_API int pstate_model_parallel_is_initialized(const pstate_t *ps) {
  return ps != nullptr && ps->model_parallel_initialized() ? 1 : 0;
}

PSTATE_API pstate_status_t pstate_destroy_model_parallel(pstate_t *ps) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_destroy_model_parallel");
    ps->destroy_model_parallel();
  });
}

// finalize and abort free ps, so they take the context's busy flag without giving it back.
// finalize refuses (BUSY, nothing freed) while another thread is inside a call on ps. abort first
// requests the abort (Context::request_abort: the call inside returns ABORTED at its next check,
// within milliseconds), then waits for that thread to leave and frees; a thread that has not left
// within kAbortWaitMs is stuck outside pstate's waits (in a callback of the caller's): BUSY,
// nothing freed, and the abort stays requested.
namespace {
constexpr int64_t kAbortWaitMs = 10000;

// Takes the busy flag of ps once the thread inside leaves it, polling (1 ms at most between
// tries); false when it did not within kAbortWaitMs.
bool enter_when_free(pstate_t *ps) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAbortWaitMs);
  for (int spins = 0; !ps->try_enter(); ++spins) {
    if (std::chrono::steady_clock::now() >= until) return false;
    if (spins < 100)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 1000 ? 50 : 1000));
  }
  return true;
}
}  // namespace

PSTATE_API pstate_status_t pstate_finalize(pstate_t *ps) {
  if (ps == nullptr) return PSTATE_OK;
  if (!ps->try_enter()) return PSTATE_GUARD({ pstate::api::throw_context_busy(*ps, "pstate_finalize (nothing freed)"); });
  // In graph-capture mode nothing is released (the caller's graph may still record into the
  // communicators): INVALID_STATE, and ps stays valid for pstate_graph_capture_end.
  if (ps->capturing() && ps->state() != pstate::Context::State::kFailed) {
    pstate_status_t s = PSTATE_GUARD({ ps->finalize(); });
    ps->leave();
    return s;
  }
  std::unique_ptr<pstate_s> owned(ps);
  return PSTATE_GUARD({ owned->finalize(); });
}

PSTATE_API pstate_status_t pstate_abort(pstate_t *ps) {
  if (ps == nullptr) return PSTATE_OK;
  ps->request_abort();
  if (pstate::Context::current_on_this_thread() == ps)  // a signal handler or callback inside its call
    return PSTATE_GUARD({
      pstate::throw_error(PSTATE_ERR_BUSY, "pstate_abort on rank ", ps->rank(), ": called from inside ",
                          ps->inside_call() != nullptr ? ps->inside_call() : "a call", " on the same thread (a "
                          "signal handler or a callback): that call returns ABORTED; nothing was freed: call "
                          "pstate_abort again after it has returned");
    });
  if (!ps->try_enter() && !enter_when_free(ps)) {
    return PSTATE_GUARD({
      const char *inside = ps->inside_call();
      pstate::throw_error(PSTATE_ERR_BUSY, "pstate_abort on rank ", ps->rank(), ": the abort is requested, but "
                          "another thread has been inside ", inside != nullptr ? inside : "a call", " for ",
                          kAbortWaitMs, " ms since: it is not in one of pstate's waits (a callback of yours, an "
                          "alloc function or an interrupt check, has not returned?); nothing was freed; the call "
                          "returns ABORTED when it next waits: call pstate_abort again after it has returned");
    });
  }
  std::unique_ptr<pstate_s> owned(ps);
  return PSTATE_GUARD({ owned->abort(); });
}

PSTATE_API pstate_status_t pstate_revoke(pstate_t *ps) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    ps->request_abort();
  });
}

PSTATE_API pstate_status_t pstate_set_interrupt_check(pstate_t *ps, pstate_interrupt_fn fn, void *user) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_set_interrupt_check");
    ps->set_interrupt_check(fn, user);
  });
}

// No ContextEntry: a dump is what a second thread takes while the first is blocked in a call; the
// recorder serializes dumps itself and reads the ring without stopping the writer.
PSTATE_API pstate_status_t pstate_trace_dump(pstate_t *ps, const char *path) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    ps->trace_dump(path);
  });
}

PSTATE_API pstate_status_t pstate_get_group(pstate_t *ps, pstate_group_kind_t kind, pstate_group_t **out) {
  return PSTATE_GUARD({
    require_nonnull(out, "out");
    *out = nullptr;
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_get_group");
    pstate::api::require_group_kind(kind);
    *out = ps->group(kind);
  });
}

PSTATE_API pstate_status_t pstate_group_info(const pstate_group_t *g, pstate_group_info_t *out) {
  return PSTATE_GUARD({
    pstate::api::require_group(g, "pstate_group_info");
    require_nonnull(out, "out");
    pstate::api::require_struct(out->struct_size, sizeof(pstate_group_info_t), sizeof(pstate_group_info_t), "out",
                                "PSTATE_GROUP_INFO_INIT");
    const auto &ranks = g->ranks();
    int n = g->size();
    int i = g->rank_in_group();
    out->kind = g->kind();
    out->rank = g->context().rank();
    out->rank_in_group = i;
    out->world_size = n;
    out->local_rank = g->context().local_rank();
    out->first_rank = ranks.front();
    out->last_rank = ranks.back();
    out->next_rank = ranks[static_cast<size_t>((i + 1) % n)];
    out->prev_rank = ranks[static_cast<size_t>((i + n - 1) % n)];
    std::memset(out->name, 0, sizeof(out->name));
    std::strncpy(out->name, g->name().c_str(), sizeof(out->name) - 1);
  });
}

PSTATE_API pstate_status_t pstate_group_ranks(const pstate_group_t *g, int *ranks, size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    pstate::api::require_group(g, "pstate_group_ranks");
    require_nonnull(count, "count");
    *count = g->ranks().size();
    if (capacity < g->ranks().size())
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "capacity ", capacity, " < group size ", g->ranks().size(),
                          " (", g->name(), "); *count holds the size needed");
    require_nonnull(ranks, "ranks");
    std::memcpy(ranks, g->ranks().data(), g->ranks().size() * sizeof(int));
  });
}

PSTATE_API pstate_status_t pstate_live_ranks(pstate_t *ps, int *ranks, size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    require_nonnull(count, "count");
    *count = 0;
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_live_ranks");
    const std::vector<int> live = ps->live_ranks();
    *count = live.size();
    if (capacity < live.size())
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "capacity ", capacity, " < ", live.size(),
                          " live ranks; *count holds the size needed (the world size is always enough)");
    require_nonnull(ranks, "ranks");
    std::memcpy(ranks, live.data(), live.size() * sizeof(int));
  });
}

// Surviving a dead rank (src/group/shrink.cpp).
PSTATE_API pstate_status_t pstate_shrink(pstate_t *ps, int *new_rank, size_t capacity) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_shrink");
    if (new_rank != nullptr && capacity < static_cast<size_t>(ps->world_size()))
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "pstate_shrink: capacity ", capacity, " < world size ",
                          ps->world_size(), " (new_rank gets one entry per rank of the world before the call; "
                          "nothing was done)");
    const std::vector<int> map = ps->shrink();
    if (new_rank != nullptr) std::memcpy(new_rank, map.data(), map.size() * sizeof(int));
  });
}

PSTATE_API pstate_status_t pstate_grow(pstate_t *ps, int timeout_ms) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_grow");
    ps->grow(timeout_ms);
  });
}

// Custom groups (collective over the world; src/group/custom_group.cpp).
PSTATE_API pstate_status_t pstate_new_group(pstate_t *ps, const int *ranks, size_t count, pstate_group_t **out) {
  return PSTATE_GUARD({
    require_nonnull(out, "out");
    *out = nullptr;
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_new_group");
    *out = ps->new_group(ranks, count);  // NULL ranks with count > 0: refused on every rank there
  });
}

PSTATE_API pstate_status_t pstate_group_same_node(const pstate_group_t *g, int source, int *same_node,
                                                  size_t capacity) {
  return PSTATE_GUARD({
    pstate::api::require_group(g, "pstate_group_same_node");
    pstate::api::require_rank(g, source, "source");
    require_nonnull(same_node, "same_node");
    if (capacity < g->ranks().size())
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "capacity ", capacity, " < group size ", g->ranks().size());
    const auto &launch = g->launch_ranks();
    const std::string &src_host = g->context().host_id(launch[static_cast<size_t>(source)]);
    for (size_t i = 0; i < launch.size(); ++i) same_node[i] = g->context().host_id(launch[i]) == src_host ? 1 : 0;
  });
}

}  // extern "C"
