// context.cpp — pstate_t's lifecycle: pstate_init's steps, pstate_finalize, pstate_abort, and the
// flight recorder's record of each lifecycle step (with the automatic dumps after a failure).
//
// pstate_init (the constructor): this rank's launch facts from the parameters and the environment
// (launch_env.hpp); a CUDA context loads CUDA (and NCCL when the world has more than one rank) and
// checks its device first when it knows the ordinal (device_ordinal or LOCAL_RANK), so a host
// that cannot run it fails at once, before any peer sees it; then the rendezvous (rendezvous.cpp).
// The other public lifecycle calls record their step (trace_life) around the step itself, which
// lives with its seam: model_parallel.cpp, graph_capture.cpp, shrink.cpp.
#include "group/context.hpp"

#include "group/dump_watcher.hpp"
#include "group/group.hpp"

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include <unistd.h>

namespace pstate {

Context::Context(const pstate_init_params_t *params) {
  pstate_init_params_t defaults = PSTATE_INIT_PARAMS_INIT;
  const pstate_init_params_t &p = params != nullptr ? *params : defaults;
  launch_ = resolve_launch_env(p, process_environment(), /*defer_rank_range=*/true);
  device_ = p.device;
  log_.set_rank(launch_.rank);
  if (!launch_.rank_out_of_range.empty()) refuse_rank_out_of_range();
  observer_calibrate();  // once per process: the observer's ticks in ns from here on
  const auto began = std::chrono::steady_clock::now();
  trace_ = make_trace_recorder();
  if (trace_) trace_->set_busy_flag(&busy_);
  if (trace_) trace_->set_facts({"-", launch_.rank, launch_.world_size, device_ == PSTATE_DEVICE_CUDA ? "cuda" : "cpu"});
  const uint64_t life = trace_life(TraceOp::kInit);
  const char *check = std::getenv("PSTATE_CHECK");
  check_ = check != nullptr && check[0] != '\0' && std::string(check) != "0";
  device_ordinal_param_ = p.device_ordinal;
  // Before the store, so it fails fast and alone, unless the ordinal is the local rank that the
  // rendezvous has yet to derive.
  if (device_ == PSTATE_DEVICE_CUDA && (p.device_ordinal >= 0 || launch_.local_rank_given)) open_device(p.device_ordinal);
  try {
    const auto rendezvous_began = std::chrono::steady_clock::now();
    rendezvous();
    observer_.context().rendezvous_ns.store(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - rendezvous_began)
                                  .count()),
        std::memory_order_relaxed);
    start_metrics_endpoint();
  } catch (const Error &e) {
    observe_step(TraceOp::kInit, began, e.status());
    trace_life_end(life, e.status());
    stop_metrics_endpoint();
    stop_dump_watcher();
    // Once the rank directory is on the store every rank checks the same records and most errors
    // from here on (duplicate local ranks, say) are thrown by every rank: the serving rank keeps
    // the store up, for a short grace, until the others have read the directory and left, so they
    // report that error and not PEER_LOST for a store that vanished under their get.
    if (store_ && directory_published_) store_->close(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 5000)));
    throw;
  }
  if (trace_)
    trace_->set_facts(
        {peers_.job_id(), launch_.rank, launch_.world_size, device_ == PSTATE_DEVICE_CUDA ? "cuda" : "cpu"});
  // PSTATE_NAN_CHECK=1: pstate's NaN/Inf check is the first hook (after init's own calls).
  const char *nan_check = std::getenv("PSTATE_NAN_CHECK");
  if (nan_check != nullptr && nan_check[0] != '\0' && std::string(nan_check) != "0") {
    hooks_.add(CallHooks::nan_check, nullptr);
    refresh_hooked();
    log_.info("PSTATE_NAN_CHECK: the send data of every CPU collective and send of a floating dtype is checked for "
              "NaN and Inf before it leaves this rank");
  }
  observe_step(TraceOp::kInit, began, PSTATE_OK);
  trace_life_end(life, PSTATE_OK);
}

void Context::refresh_hooked() {
  const bool on = hooks_.active();
  for (Group *g : groups_.live()) g->set_hooked(on);
}

Context::~Context() { abort(); }

// PSTATE_METRICS_ADDR (metrics_endpoint.hpp): after the rendezvous, which settles the local rank
// that the port is offset by; the served address goes on the store for `pstate run --metrics`.
void Context::start_metrics_endpoint() {
  const char *env = std::getenv("PSTATE_METRICS_ADDR");
  if (env == nullptr || *env == '\0') return;
  const MetricsAddress a = parse_metrics_address(env);
  const int port = a.port == 0 ? 0 : a.port + launch_.local_rank;
  if (port > 65535)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_METRICS_ADDR '", env, "': port ", a.port, " + local rank ",
                launch_.local_rank, " is past 65535; choose a lower port");
  metrics_endpoint_ = std::make_unique<MetricsEndpoint>(a.host, port, [this] { return observer_.render(); });
  log_.info("metrics: serving http://", metrics_endpoint_->address(), "/metrics (PSTATE_METRICS_ADDR=", env, ")");
  if (store_) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    const std::string served = cat(metrics_endpoint_->address(), " ", host[0] != '\0' ? host : "unknown");
    store_->set(cat("pstate/metrics/", rank_), Bytes(served.begin(), served.end()),
                Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 10000)));
  }
}

void Context::stop_metrics_endpoint() noexcept {
  if (metrics_endpoint_) metrics_endpoint_->stop();
}

// ---- the lifecycle steps, each recorded by the flight recorder ----

template <typename F>
auto Context::traced_life(TraceOp op, F &&f) -> decltype(f()) {
  const uint64_t id = trace_life(op);
  const auto began = std::chrono::steady_clock::now();
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      observe_step(op, began, PSTATE_OK);
      trace_life_end(id, PSTATE_OK);
    } else {
      auto out = f();
      observe_step(op, began, PSTATE_OK);
      trace_life_end(id, PSTATE_OK);
      return out;
    }
  } catch (const Error &e) {
    observe_step(op, began, e.status());
    trace_life_end(id, e.status());
    throw;
  } catch (...) {
    observe_step(op, began, PSTATE_ERR_INTERNAL);
    trace_life_end(id, PSTATE_ERR_INTERNAL);
    throw;
  }
}

void Context::observe_step(TraceOp op, std::chrono::steady_clock::time_point began, pstate_status_t status) noexcept {
  ContextMetrics &m = observer_.context();
  ContextMetrics::Step &s = m.steps[static_cast<size_t>(op)];
  observer_add(status == PSTATE_OK ? s.ok : s.failed, 1);
  observer_add(s.ns, static_cast<uint64_t>(
                         std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began)
                             .count()));
  m.epoch.store(epoch_, std::memory_order_relaxed);
  m.world_size.store(static_cast<int64_t>(members_.size()), std::memory_order_relaxed);
  m.rank.store(rank_, std::memory_order_relaxed);
  if (store_) m.store_requests.store(store_->traffic().requests, std::memory_order_relaxed);
}

std::vector<int> Context::shrink() {
  return traced_life(TraceOp::kShrink, [&] { return shrink_now(); });
}
int Context::grow(int64_t timeout_ms) {
  return traced_life(TraceOp::kGrow, [&] { return grow_now(timeout_ms); });
}

void Context::initialize_model_parallel(const pstate_parallel_config_t *cfg) {
  traced_life(TraceOp::kInitializeModelParallel, [&] { initialize_model_parallel_now(cfg); });
}
void Context::destroy_model_parallel() {
  traced_life(TraceOp::kDestroyModelParallel, [&] { destroy_model_parallel_now(); });
}
void Context::finalize() {
  traced_life(TraceOp::kFinalize, [&] { finalize_now(); });
}
void *Context::begin_graph_capture(void *stream) {
  return traced_life(TraceOp::kGraphCaptureBegin, [&] { return begin_graph_capture_now(stream); });
}
void Context::end_graph_capture() {
  traced_life(TraceOp::kGraphCaptureEnd, [&] { end_graph_capture_now(); });
}

int Context::global_rank_of(int launch_rank) const {
  auto it = std::find(members_.begin(), members_.end(), launch_rank);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

void Context::finalize_now() {
  if (state_ == State::kClosed) return;
  if (capturing() && state_ != State::kFailed)
    throw_error(PSTATE_ERR_INVALID_STATE, "pstate_finalize in graph-capture mode: nothing was released (the groups' "
                "NCCL communicators may be recorded into the graph); call pstate_graph_capture_end first, or "
                "pstate_abort");
  std::string first_error;
  pstate_status_t first_status = PSTATE_OK;
  if (state_ != State::kFailed && world()) {
    try {
      // Peers finish their last messages first; a peer in any other collective is a mismatch, not a
      // partner. In shared memory where the world has it, segment or not: a peer in its first world
      // collective waits in the segment, and only an arrival there tells it this rank finalized.
      world()->barrier(true, OpKind::kFinalize);
    } catch (const Error &e) {
      first_error = e.what();
      first_status = e.status();
    }
  }
  bool failed = state_ == State::kFailed || !first_error.empty();
  stop_metrics_endpoint();
  stop_dump_watcher();  // its connection goes before the store's
  // The serving rank keeps the store up until every other rank has left it.
  if (!failed) log_counts("finalize");  // before the store's close (a serving rank logs the server's totals there)
  // A close that leaves the job's state behind (etcd refused or did not answer) is this call's
  // error when the barrier had none; the rest is released all the same.
  std::optional<Error> store_failure;
  if (store_ && !failed && !store_->close(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 10000))))
    store_failure = store_->close_failure();
  // Device communicators: finalized with their peers, unless a peer may be gone.
  if (failed) groups_.abort_device();
  groups_.close();
  if (trace_) trace_->set_device_times(nullptr);
  device_ctx_.reset();
  if (worker_) {
    if (failed) worker_->force_close();
    else worker_->close(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 10000)));
  }
  worker_.reset();
  store_.reset();
  state_ = State::kClosed;
  log_.info("finalize: done");
  if (!first_error.empty())
    throw_error(first_status, "finalize could not reach every peer (", first_error,
                "); resources were released anyway");
  if (store_failure)
    throw_error(store_failure->status(), "closing the store failed on rank ", rank(), " (", store_failure->what(),
                "); every other resource was released");
}

void Context::abort() noexcept {
  if (state_ == State::kClosed) return;
  tell_peers_aborted("pstate_abort");  // a peer blocked in a call with this rank hears it now
  stop_metrics_endpoint();
  stop_dump_watcher();
  if (trace_) trace_life_end(trace_life(TraceOp::kAbort), PSTATE_OK);
  observer_add(observer_.context().steps[static_cast<size_t>(TraceOp::kAbort)].ok, 1);
  groups_.abort_device();  // ncclCommAbort: local, waits for no peer
  groups_.close();
  if (trace_) trace_->set_device_times(nullptr);
  device_ctx_.reset();
  if (worker_) worker_->force_close();
  worker_.reset();
  store_.reset();  // a serving rank 0 stops its server; clients close their socket
  state_ = State::kClosed;
}

// ---- the flight recorder's lifecycle steps and dumps ----

uint64_t Context::trace_life(TraceOp op) {
  if (!trace_) return 0;
  return trace_->begin(TraceClass::kLife, op, groups_.world() ? trace_->world_group() : nullptr, UINT64_MAX,
                       UINT64_MAX, -1, -1, -1, -1, TracePath::kNone);
}

void Context::trace_life_end(uint64_t id, pstate_status_t status) {
  if (!trace_ || id == 0) return;
  if (status == PSTATE_OK) trace_->completed(id);
  else trace_->failed(id, status);
}

void Context::log_call_failed(const Error &e, std::string_view group, std::string_view call) const noexcept {
  try {
    log_.info_at(LogFields{group, call, e.status()}, "group ", group, ": ", call, " failed (",
                 pstate_status_string(e.status()), "): ", e.what());
  } catch (...) {  // no memory for the line: the caller still gets the error
  }
}

void Context::trace_call_failed(uint64_t id, const Error &e, std::string_view group, std::string_view call) noexcept {
  log_call_failed(e, group, call);
  if (!trace_) return;
  const pstate_status_t s = e.status();
  if (id != 0) trace_->failed(id, s);
  const bool dumpable = s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_MISMATCH ||
                        s == PSTATE_ERR_ABORTED;
  if (!dumpable || (s == PSTATE_ERR_ABORTED && dumped_since_failure_)) return;
  if (state_ == State::kFailed) dumped_since_failure_ = true;
  std::string error;
  std::string file = trace_->dump_noexcept(cat("a call failed: ", e.what()), &error);
  const LogFields where{group, call, s};
  if (file.empty()) log_.warn_at(where, "flight recorder: the dump after this failure could not be written: ", error);
  else
    log_.info_at(where, "flight recorder: dump written to ", file, " (read the job's dumps with: pstate doctor ",
                 trace_->dir(), ")");
}

std::string Context::trace_dump(const char *path) {
  if (!trace_)
    throw_error(PSTATE_ERR_UNSUPPORTED, "pstate_trace_dump: the flight recorder is off (PSTATE_TRACE_ENTRIES=0): unset it, or set it to the number of entries to keep");
  return trace_->dump("pstate_trace_dump", path != nullptr ? path : "");
}

}  // namespace pstate
