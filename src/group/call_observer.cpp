// call_observer.cpp — the observer's names, its clock's rate, and the rendering of what it kept
// as the Prometheus text exposition format (docs/metrics.md lists every metric).
#include "group/call_observer.hpp"

#include "common/error.hpp"
#include "common/prometheus_label.hpp"
#include "reduce/reduce.hpp"

#include <chrono>
#include <cstdio>
#include <new>
#include <thread>
#include <vector>

#include <time.h>

namespace pstate {

namespace {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Both clocks read at the library's load: the calibration's start.
struct Anchor {
  uint64_t ticks = observer_ticks();
  uint64_t ns = monotonic_ns();
};
const Anchor g_anchor;
std::mutex g_calibrate_mutex;

// The buckets rendered: le = 2^(b+1) ns for b in [kFirstBucket, kLastBucket] (256 ns .. ~18 min);
// shorter calls fall in the first, longer ones only in +Inf.
constexpr uint32_t kFirstBucket = 7;
constexpr uint32_t kLastBucket = 39;

// Prometheus label values (group names are "tp:0", "custom:3", ...; nothing else needs escaping
// today): common/prometheus_label.hpp.
std::string label(const std::string &v) {
  return prometheus_label_value(v);
}

std::string seconds(uint64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(ns) / 1e9);
  return buf;
}

std::string num(uint64_t v) {
  return std::to_string(v);
}

void help(std::string &out, const char *name, const char *type, const char *text) {
  out += cat("# HELP ", name, " ", text, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

void observer_calibrate() {
  if (g_observer_ns_per_tick.load(std::memory_order_acquire) != 0) return;
  std::lock_guard<std::mutex> lock(g_calibrate_mutex);
  if (g_observer_ns_per_tick.load(std::memory_order_relaxed) != 0) return;
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  uint64_t ns = monotonic_ns(), ticks = observer_ticks();
  while (ns - g_anchor.ns < 2000000) {  // at least 2 ms from the anchor: ~1e-4 of a 100 ns jitter
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ns = monotonic_ns();
    ticks = observer_ticks();
  }
  const double per_tick = static_cast<double>(ns - g_anchor.ns) / static_cast<double>(ticks - g_anchor.ticks);
  g_observer_ns_per_tick.store(static_cast<uint64_t>(per_tick * 4294967296.0), std::memory_order_release);
#else
  g_observer_ns_per_tick.store(uint64_t{1} << 32, std::memory_order_release);  // the ticks are ns
#endif
}

const char *observed_op_name(uint32_t op) {
  if (op < static_cast<uint32_t>(TraceOp::kCount)) return trace_op_name(static_cast<TraceOp>(op));
  if (op == kObservedIsend) return "isend";
  if (op == kObservedIrecv) return "irecv";
  if (op == kObservedP2PBatch) return "p2p_batch";
  return "-";
}

const char *observed_path_name(uint32_t path) {
  switch (static_cast<TracePath>(path)) {
    case TracePath::kShm:
      return "shm";
    case TracePath::kUcx:
      return "ucx";
    case TracePath::kNccl:
      return "nccl";
    case TracePath::kLocal:
      return "local";
    case TracePath::kNone:
      break;
  }
  return "none";
}

const char *observed_status_name(uint32_t status) {
  static const char *const kNames[] = {"ok",      "invalid_argument", "invalid_state", "unsupported", "no_memory",
                                       "timeout", "peer_lost",        "transport",     "mismatch",    "auth",
                                       "aborted", "internal",         "interrupted",   "busy"};
  return status < sizeof(kNames) / sizeof(kNames[0]) ? kNames[status] : "other";
}

GroupCallMetrics::GroupCallMetrics(std::string name)
    : name_(std::move(name)),
      cells_(static_cast<CallCell *>(std::calloc(size_t{kObservedOps} * kObservedPaths, sizeof(CallCell)))) {
  if (!cells_) throw std::bad_alloc();
}

GroupCallMetrics *CallObserver::group(const std::string &name) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (GroupCallMetrics &g : groups_)
    if (g.name() == name) return &g;
  return &groups_.emplace_back(name);
}

std::string CallObserver::render() const {
  struct Series {
    const GroupCallMetrics *group;
    uint32_t op, path;  // op: a TraceOp or kObservedIsend.. (the kind cells are summed into theirs)
    uint64_t buckets[kObservedBuckets], calls, ns, bytes, failed[kObservedStatuses];
  };
  std::vector<Series> series;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const GroupCallMetrics &g : groups_) {
      const size_t first = series.size();
      for (uint32_t op = 0; op < kObservedOps; ++op)
        for (uint32_t path = 0; path < kObservedPaths; ++path) {
          const CallCell &c = g.cell(op, path);
          // a descriptor's kind is rendered as the flight recorder names it
          const uint32_t named =
              op >= kObservedKindBase ? static_cast<uint32_t>(trace_op_of(op - kObservedKindBase)) : op;
          Series s{&g, named, path, {}, 0, 0, 0, {}};
          for (uint32_t b = 0; b < kObservedBuckets; ++b) {
            s.buckets[b] = c.buckets[b].load(std::memory_order_relaxed);
            s.calls += s.buckets[b];
          }
          if (s.calls == 0) continue;
          s.ns = c.ns.load(std::memory_order_relaxed);
          s.bytes = c.elements[0].load(std::memory_order_relaxed);
          for (uint32_t d = 1; d < kObservedDtypes; ++d)
            s.bytes += c.elements[d].load(std::memory_order_relaxed) * dtype_size(static_cast<pstate_dtype_t>(d - 1));
          for (uint32_t st = 0; st < kObservedStatuses; ++st)
            s.failed[st] = c.failed[st].load(std::memory_order_relaxed);
          Series *same = nullptr;  // this group's series of the same name and path, if any
          for (size_t i = first; i < series.size(); ++i)
            if (series[i].op == named && series[i].path == path) same = &series[i];
          if (same == nullptr) {
            series.push_back(s);
            continue;
          }
          for (uint32_t b = 0; b < kObservedBuckets; ++b) same->buckets[b] += s.buckets[b];
          same->calls += s.calls;
          same->ns += s.ns;
          same->bytes += s.bytes;
          for (uint32_t st = 0; st < kObservedStatuses; ++st) same->failed[st] += s.failed[st];
        }
    }
  }
  auto labels = [](const Series &s) {
    return cat("group=\"", label(s.group->name()), "\",op=\"", observed_op_name(s.op), "\",path=\"",
               observed_path_name(s.path), "\"");
  };
  std::string out;
  help(out, "pstate_calls_total", "counter",
       "Calls of a group's operation that returned on this rank, by operation, path and status.");
  for (const Series &s : series) {
    uint64_t failed = 0;
    for (uint32_t st = 1; st < kObservedStatuses; ++st) failed += s.failed[st];
    // A failure recorded between the buckets' and the statuses' reads: never a negative ok.
    out +=
        cat("pstate_calls_total{", labels(s), ",status=\"ok\"} ", num(s.calls > failed ? s.calls - failed : 0), "\n");
    for (uint32_t st = 1; st < kObservedStatuses; ++st)
      if (s.failed[st] != 0)
        out += cat("pstate_calls_total{", labels(s), ",status=\"", observed_status_name(st), "\"} ", num(s.failed[st]),
                   "\n");
  }
  help(out, "pstate_call_bytes_total", "counter",
       "Bytes of the calls of a group's operation (docs/metrics.md: which bytes each operation counts).");
  for (const Series &s : series) out += cat("pstate_call_bytes_total{", labels(s), "} ", num(s.bytes), "\n");
  help(out, "pstate_call_duration_seconds", "histogram",
       "Time from a call's start to its return on this rank (every status), by operation and path.");
  for (const Series &s : series) {
    const std::string l = labels(s);
    uint64_t cumulative = 0;
    for (uint32_t b = 0; b < kFirstBucket; ++b) cumulative += s.buckets[b];
    for (uint32_t b = kFirstBucket; b <= kLastBucket; ++b) {
      cumulative += s.buckets[b];
      out += cat("pstate_call_duration_seconds_bucket{", l, ",le=\"", seconds(uint64_t{1} << (b + 1)), "\"} ",
                 num(cumulative), "\n");
    }
    out += cat("pstate_call_duration_seconds_bucket{", l, ",le=\"+Inf\"} ", num(s.calls), "\n");
    out += cat("pstate_call_duration_seconds_sum{", l, "} ", seconds(s.ns), "\n");
    out += cat("pstate_call_duration_seconds_count{", l, "} ", num(s.calls), "\n");
  }

  const ContextMetrics &c = context_;
  help(out, "pstate_lifecycle_steps_total", "counter",
       "Lifecycle steps of the context (init, shrink, grow, initialize_model_parallel, ...) by status.");
  for (uint32_t op = 0; op < static_cast<uint32_t>(TraceOp::kCount); ++op) {
    const uint64_t ok = c.steps[op].ok.load(std::memory_order_relaxed);
    const uint64_t failed = c.steps[op].failed.load(std::memory_order_relaxed);
    const char *step = trace_op_name(static_cast<TraceOp>(op));
    if (ok != 0) out += cat("pstate_lifecycle_steps_total{step=\"", step, "\",status=\"ok\"} ", num(ok), "\n");
    if (failed != 0)
      out += cat("pstate_lifecycle_steps_total{step=\"", step, "\",status=\"error\"} ", num(failed), "\n");
  }
  help(out, "pstate_lifecycle_seconds_total", "counter", "Time spent in the context's lifecycle steps, by step.");
  for (uint32_t op = 0; op < static_cast<uint32_t>(TraceOp::kCount); ++op)
    if (c.steps[op].ok.load(std::memory_order_relaxed) + c.steps[op].failed.load(std::memory_order_relaxed) != 0)
      out += cat("pstate_lifecycle_seconds_total{step=\"", trace_op_name(static_cast<TraceOp>(op)), "\"} ",
                 seconds(c.steps[op].ns.load(std::memory_order_relaxed)), "\n");
  help(out, "pstate_rendezvous_seconds", "gauge", "How long pstate_init's rendezvous took on this rank.");
  out += cat("pstate_rendezvous_seconds ", seconds(c.rendezvous_ns.load(std::memory_order_relaxed)), "\n");
  help(out, "pstate_world_generation", "gauge", "World rebuilds so far (pstate_shrink and pstate_grow each add one).");
  out += cat("pstate_world_generation ", num(c.epoch.load(std::memory_order_relaxed)), "\n");
  help(out, "pstate_world_size", "gauge", "Ranks of the current world.");
  out += cat("pstate_world_size ", std::to_string(c.world_size.load(std::memory_order_relaxed)), "\n");
  help(out, "pstate_rank", "gauge", "This process's rank in the current world.");
  out += cat("pstate_rank ", std::to_string(c.rank.load(std::memory_order_relaxed)), "\n");
  help(out, "pstate_context_failures_total", "counter", "Times this rank's context failed (TIMEOUT, PEER_LOST, ...).");
  out += cat("pstate_context_failures_total ", num(c.context_failures.load(std::memory_order_relaxed)), "\n");
  help(out, "pstate_failure_notices_sent_total", "counter", "Failure notices this rank sent to its peers.");
  out += cat("pstate_failure_notices_sent_total ", num(c.notices_sent.load(std::memory_order_relaxed)), "\n");
  help(out, "pstate_store_requests_total", "counter", "Requests to the job's store, as of the last lifecycle step.");
  out += cat("pstate_store_requests_total ", num(c.store_requests.load(std::memory_order_relaxed)), "\n");
  return out;
}

}  // namespace pstate
