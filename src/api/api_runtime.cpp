// api_runtime.cpp — the C entry points of the lifecycle and of the groups (pstate_init ...
// pstate_abort, pstate_set_interrupt_check, pstate_get_group, pstate_group_info/ranks/same_node):
// argument and handle checks, then the Context / group objects of src/group/ do the work.
#include "api/boundary.hpp"
#include "api/handles.hpp"
#include "common/struct_io.hpp"
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
    if (params == nullptr) {
      *out = std::make_unique<pstate_s>(nullptr).release();
      return;
    }
    const pstate_init_params_t p = pstate::read_struct(params, "params");
    require(p.device == PSTATE_DEVICE_CPU || p.device == PSTATE_DEVICE_CUDA,
            "params->device is not a pstate_device_t (PSTATE_DEVICE_CPU or PSTATE_DEVICE_CUDA)");
    require(p.timeout_ms >= 0, "params->timeout_ms is negative (0 = default)");
    *out = std::make_unique<pstate_s>(&p).release();
  });
}

PSTATE_API pstate_status_t pstate_initialize_model_parallel(pstate_t *ps, const pstate_parallel_config_t *cfg) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_initialize_model_parallel");
    if (cfg == nullptr) return ps->initialize_model_parallel(nullptr);
    const pstate_parallel_config_t c = pstate::read_struct(cfg, "cfg");
    ps->initialize_model_parallel(&c);
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
  ps->hooks().abort("pstate_abort", PSTATE_ERR_ABORTED, "pstate_abort was called");
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
    ps->hooks().abort("pstate_revoke", PSTATE_ERR_ABORTED, "pstate_revoke was called");
    // No call in flight: none will fail and tell the peers, so this thread does, holding the context
    // (a call that starts meanwhile is refused with ABORTED, ContextEntry).
    if (ps->try_enter()) {
      ps->tell_peers_aborted("pstate_revoke");
      ps->leave();
    }
  });
}

PSTATE_API pstate_status_t pstate_add_hook(pstate_t *ps, pstate_hook_fn fn, void *user, uint64_t *id) {
  if (id != nullptr) *id = 0;
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    require_nonnull(id, "id");
    if (fn == nullptr)
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "pstate_add_hook: fn is NULL (a hook is a function)");
    pstate::api::ContextEntry entry(*ps, "pstate_add_hook");
    *id = ps->hooks().add(fn, user);
    ps->refresh_hooked();
  });
}

PSTATE_API pstate_status_t pstate_remove_hook(pstate_t *ps, uint64_t id) {
  return PSTATE_GUARD({
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_remove_hook");
    ps->hooks().remove(id);
    ps->refresh_hooked();
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

PSTATE_API pstate_status_t pstate_metrics_text(pstate_t *ps, char *out, size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    require_nonnull(count, "count");
    *count = 0;
    pstate::api::require_context(ps);
    const std::string text = ps->render_metrics();
    pstate::api::return_array(out, capacity, count, text.c_str(), text.size() + 1, "out",
                              "the metrics text's length + 1 (its NUL)");
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
    const auto &ranks = g->ranks();
    int n = g->size();
    int i = g->rank_in_group();
    pstate_group_info_t info{};
    info.kind = g->kind();
    info.rank = g->context().rank();
    info.rank_in_group = i;
    info.world_size = n;
    info.local_rank = g->context().local_rank();
    info.first_rank = ranks.front();
    info.last_rank = ranks.back();
    info.next_rank = ranks[static_cast<size_t>((i + 1) % n)];
    info.prev_rank = ranks[static_cast<size_t>((i + n - 1) % n)];
    std::strncpy(info.name, g->name().c_str(), sizeof(info.name) - 1);
    pstate::write_struct(out, info, "out");  // the caller's first min(struct_size, sizeof) bytes only
  });
}

PSTATE_API pstate_status_t pstate_group_ranks(const pstate_group_t *g, int *ranks, size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    require_nonnull(count, "count");
    *count = 0;
    pstate::api::require_group(g, "pstate_group_ranks");
    pstate::api::return_array(ranks, capacity, count, g->ranks().data(), g->ranks().size(), "ranks",
                              pstate::cat("group ", g->name(), "'s size"));
  });
}

PSTATE_API pstate_status_t pstate_live_ranks(pstate_t *ps, int *ranks, size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    require_nonnull(count, "count");
    *count = 0;
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_live_ranks");
    const std::vector<int> live = ps->live_ranks();
    pstate::api::return_array(ranks, capacity, count, live.data(), live.size(), "ranks",
                              "the number of live ranks (the world size is always enough)");
  });
}

// Surviving a dead rank (src/group/shrink.cpp).
// new_rank NULL with capacity 0 skips the map (pstate.h: the one exception to the returned-array
// rule, since shrink is done once it returns). The capacity is checked before anything is done.
PSTATE_API pstate_status_t pstate_shrink(pstate_t *ps, int *new_rank, size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    require_nonnull(count, "count");
    *count = 0;
    pstate::api::require_context(ps);
    pstate::api::ContextEntry entry(*ps, "pstate_shrink");
    const size_t world = static_cast<size_t>(ps->world_size());
    const bool skip_map = new_rank == nullptr && capacity == 0;
    if (!skip_map)
      pstate::api::require_capacity(new_rank, capacity, count, world, "new_rank",
                                    "the world size before the call (nothing was done)");
    *count = 0;  // set again once the call succeeded: a later failure is no capacity error
    const std::vector<int> map = ps->shrink();
    if (!skip_map) std::memcpy(new_rank, map.data(), map.size() * sizeof(int));
    *count = map.size();
  });
}

PSTATE_API pstate_status_t pstate_grow(pstate_t *ps, int64_t timeout_ms) {
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

PSTATE_API pstate_status_t pstate_group_same_node(const pstate_group_t *g, int root, int *same_node,
                                                  size_t capacity, size_t *count) {
  return PSTATE_GUARD({
    require_nonnull(count, "count");
    *count = 0;
    pstate::api::require_group(g, "pstate_group_same_node");
    pstate::api::require_rank(g, root, "root");
    const auto &launch = g->launch_ranks();
    const std::string &root_host = g->context().host_id(launch[static_cast<size_t>(root)]);
    std::vector<int> flags(launch.size());
    for (size_t i = 0; i < launch.size(); ++i) flags[i] = g->context().host_id(launch[i]) == root_host ? 1 : 0;
    pstate::api::return_array(same_node, capacity, count, flags.data(), flags.size(), "same_node",
                              pstate::cat("group ", g->name(), "'s size"));
  });
}

PSTATE_API pstate_status_t pstate_group_set_timeout(pstate_group_t *g, int64_t timeout_ms) {
  return PSTATE_GUARD({
    pstate::api::require_group(g, "pstate_group_set_timeout");
    if (timeout_ms < 0)
      pstate::throw_error(
          PSTATE_ERR_INVALID_ARGUMENT, "pstate_group_set_timeout: timeout_ms ", timeout_ms, " for group ", g->name(),
          " is negative: give milliseconds > 0, or 0 for the context's timeout (", g->context().timeout_ms(), " ms)");
    pstate::api::ContextEntry entry(g->context(), "pstate_group_set_timeout");
    g->set_timeout_ms(timeout_ms);
  });
}

PSTATE_API pstate_status_t pstate_group_timeout(const pstate_group_t *g, int64_t *timeout_ms) {
  return PSTATE_GUARD({
    require_nonnull(timeout_ms, "timeout_ms");
    *timeout_ms = 0;
    pstate::api::require_group(g, "pstate_group_timeout");
    *timeout_ms = g->timeout_ms();
  });
}

}  // extern "C"
