// model_parallel.cpp — initialize_model_parallel and destroy_model_parallel: the parallel config
// agreed by every rank, the layout's groups made (one object per canonical kind, in creation
// order, with their generation's group ids: group_registry.hpp) and dropped; the group of a
// kind; device communicators split from the world's.
#include "group/context.hpp"

#include "group/group.hpp"

#include <array>
#include <chrono>
#include <cstdlib>
#include <optional>

namespace pstate {

std::unique_ptr<Group> Context::make_group(pstate_group_kind_t kind, size_t index, const std::vector<int> &ranks,
                                           uint32_t group_id) {
  auto g = std::make_unique<Group>(*this, kind, index, ranks, group_id);
  log_.info("group ", g->name(), ": ", ranks.size(), " ranks, rank_in_group ", g->rank_in_group());
  return g;
}

namespace {

constexpr size_t kConfigFields = 12;
using ConfigWire = std::array<int32_t, kConfigFields>;
constexpr std::array<const char *, kConfigFields> kConfigNames = {
    "tp", "pp", "ep", "attn_dp", "attn_cp", "moe_dp", "dcp", "shared_experts_tp", "engine", "dp", "pcp", "moe_model"};

ConfigWire to_wire(const layout::ParallelConfig &c) {
  return {c.tp,  c.pp, c.ep, c.attn_dp, c.attn_cp, c.moe_dp, c.dcp, c.shared_experts_tp, static_cast<int32_t>(c.engine),
          c.dp, c.pcp, c.moe_model};
}

// "rank 0 tp 1 pp 2, rank 1 tp 2 pp 1": tp and pp always, the other sizes where the two differ.
std::string describe_config_pair(int ra, const ConfigWire &a, int rb, const ConfigWire &b) {
  std::string sa = cat("rank ", ra), sb = cat("rank ", rb);
  for (size_t i = 0; i < kConfigFields; ++i) {
    if (i >= 2 && a[i] == b[i]) continue;
    sa += cat(" ", kConfigNames[i], " ", a[i]);
    sb += cat(" ", kConfigNames[i], " ", b[i]);
  }
  return sa + ", " + sb;
}

}  // namespace

// One all_gather of the sizes and the engine over the world group: every rank sees every rank's config
// and so every rank throws the same MISMATCH when any two differ (a rank that went on alone would
// build groups its peers never join, and its first TP collective would hang or mix data).
// The context stays as it was (kReady): finalize, abort or a second, agreeing call all work.
void Context::require_same_parallel_config(const layout::ParallelConfig &pc) {
  ConfigWire mine = to_wire(pc);
  std::vector<ConfigWire> all(static_cast<size_t>(world_size()));
  // In shared memory, like every world call: its descriptor rides in the segment's flag words, so a
  // rank in a user's collective gets MISMATCH naming this exchange (test_no_wrong_answer). Over UCX
  // without an exchange it was faster at 64 oversubscribed ranks (the segment's creation is met by
  // every process of the host) but a mismatch became a TIMEOUT: BENCHMARKS.md "Start-up counted".
  world()->all_gather(mine.data(), all.data(), kConfigFields, PSTATE_INT32, OpKind::kModelParallelConfig);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    throw_error(PSTATE_ERR_MISMATCH, "pstate_initialize_model_parallel: the ranks disagree about the parallel config (",
                describe_config_pair(0, all[0], static_cast<int>(r), all[r]), "; this is rank ", rank(),
                "): every rank must pass the same pstate_parallel_config_t; nothing was created, the context is "
                "still usable");
  }
}

void Context::initialize_model_parallel_now(const pstate_parallel_config_t *cfg) {
  require_usable("pstate_initialize_model_parallel");
  require_not_capturing("pstate_initialize_model_parallel");
  if (groups_.model_parallel())
    throw_error(PSTATE_ERR_INVALID_STATE,
                "model parallel is already initialized: call pstate_destroy_model_parallel first");
  // The sizes with pstate.h's defaults applied (0 = default), so that ranks compare what they
  // mean: tp 0 and tp 2 agree on 4 ranks with pp 2. A default that cannot be applied (tp 0 with a
  // pp that does not divide the world) takes part in the agreement as given, then fails.
  layout::ParallelConfig pc = cfg != nullptr ? layout::ParallelConfig::fields_of(*cfg)
                                             : layout::ParallelConfig::tensor_parallel_only(world_size());
  std::optional<Error> no_default;
  try {
    pc = pc.with_defaults(world_size());
  } catch (const Error &e) {
    no_default = e;
  }
  using MpClock = std::chrono::steady_clock;
  const auto mp_start = MpClock::now();
  auto ms_since = [](MpClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(MpClock::now() - t).count();
  };
  require_same_parallel_config(pc);  // before validating it: a rank with a bad config fails with the others
  const auto agreed_ms = ms_since(mp_start);
  if (no_default) throw *no_default;
  layout::Layout lay(world_size(), pc);
  const uint32_t generation = groups_.next_generation();
  for (pstate_group_kind_t kind : lay.creation_order()) {  // the engine's order
    if (kind == PSTATE_GROUP_WORLD || !lay.has(kind)) continue;
    pstate_group_kind_t canon = lay.canonical(kind);
    if (canon != kind) continue;  // aliases share their canonical kind's group (adopt_layout)
    size_t index = lay.group_of(kind, rank());
    std::vector<int> launch_ranks;
    for (int g : lay.group_ranks(kind, index)) launch_ranks.push_back(launch_rank_of(g));
    const uint32_t id = GroupRegistry::group_id_for(generation, kind);
    groups_.add_model_parallel(make_group(kind, index, launch_ranks, id));
  }
  groups_.adopt_layout(std::move(lay));
  state_ = State::kParallel;
  // With the world's NCCL communicator in place, every group of more than one rank
  // gets its own by splitting it, kind by kind in creation order (the same on every rank; the
  // groups of one kind have one size), instead of a bootstrap each on first use.
  if (split_from_world())
    for (const auto &g : groups_.model_parallel_groups())
      if (g->size() > 1) split_from_world_into(g.get());
  warn_tensor_parallel_across_hosts();  // host awareness: allowed, but said (host_order.cpp)
  const auto groups_ms = ms_since(mp_start);
  // Every rank leaves together, so the first collective on any group finds its peers ready.
  world()->barrier(true, OpKind::kModelParallelReady);
  const auto barrier_ms = ms_since(mp_start);
  if (pc.vllm())
    log_.info("initialize_model_parallel (vllm): tp ", pc.tp, " pp ", pc.pp, " dp ", pc.dp, " pcp ", pc.pcp, " dcp ",
              pc.dcp, pc.moe_model ? " moe" : " dense", ": ", groups_.model_parallel_groups().size(), " groups created");
  else
    log_.info("initialize_model_parallel: tp ", pc.tp, " pp ", pc.pp, " ep ", pc.ep, " attn_dp ", pc.attn_dp,
              " attn_cp ", pc.attn_cp, " moe_dp ", pc.moe_dp, " dcp ", pc.dcp, ": ",
              groups_.model_parallel_groups().size(), " groups created");
  log_counts("initialize_model_parallel", cat(" (config agreement ", agreed_ms, " ms, groups ", groups_ms - agreed_ms,
                                              " ms, ready barrier ", barrier_ms - groups_ms, " ms)"));
}

void Context::refuse_pending_requests() const {
  for (Group *g : groups_.retiring())
    if (size_t n = g->pending_requests(); n != 0)
      throw_error(PSTATE_ERR_INVALID_STATE, "group ", g->name(), " has ", n, " point-to-point request", n == 1 ? "" : "s",
                  " pending (pstate_isend/pstate_irecv): complete ", n == 1 ? "it" : "them",
                  " with pstate_wait or pstate_test first (nothing was destroyed), or end the context with "
                  "pstate_finalize / pstate_abort, which cancel pending requests");
}

void Context::destroy_model_parallel_now() {
  if (state_ == State::kClosed) throw_error(PSTATE_ERR_INVALID_STATE, "the context is finalized");
  if (!groups_.model_parallel() && groups_.custom_calls_live() > 0) {  // only custom groups (new_group) to drop
    require_not_capturing("pstate_destroy_model_parallel");
    refuse_pending_requests();
    drop_undelivered(groups_.retiring(), "pstate_destroy_model_parallel");
    groups_.retire_custom();
    log_.info("destroy_model_parallel: custom groups released");
    return;
  }
  if (!groups_.model_parallel())
    throw_error(PSTATE_ERR_INVALID_STATE,
                "model parallel is not initialized: call pstate_initialize_model_parallel first");
  require_not_capturing("pstate_destroy_model_parallel");
  refuse_pending_requests();
  drop_undelivered(groups_.retiring(), "pstate_destroy_model_parallel");
  groups_.retire_model_parallel();
  if (state_ == State::kParallel) state_ = State::kReady;
  log_.info("destroy_model_parallel: groups released");
}

Group *Context::group(pstate_group_kind_t kind) {
  require_usable("pstate_get_group");
  if (kind == PSTATE_GROUP_WORLD) return world();
  if (!groups_.model_parallel())
    throw_error(PSTATE_ERR_INVALID_STATE, "group ", pstate_group_kind_name(kind),
                ": model parallel is not initialized; call pstate_initialize_model_parallel first");
  Group *g = groups_.by_kind(kind);
  if (g == nullptr)
    throw_error(PSTATE_ERR_UNSUPPORTED, "group ", pstate_group_kind_name(kind), " does not exist in this layout (",
                groups_.layout()->why_absent(kind), ")");
  return g;
}

// ---- device communicators split from the world's ----

bool Context::split_from_world() const {
  Group *w = groups_.world();
  if (!device_ctx_ || world_size() < 2 || w == nullptr || !w->device_splittable()) return false;
  const char *env = std::getenv("PSTATE_NCCL_SPLIT");
  return env == nullptr || std::string(env) != "0";
}

void Context::split_from_world_into(Group *child) {
  try {
    world()->split_device_into(child);
  } catch (const Error &e) {
    fail(e.what());  // the world's communicator took part in a failed collective
    throw;
  }
}


}  // namespace pstate
