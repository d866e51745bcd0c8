// cuda_context.cpp — CudaDeviceContext: loading and device checks at creation, pointer checks,
// stream resolution and SGLang's graph_capture() semantics (see device_comm.hpp).
//
// Capture, as SGLang's GroupCoordinator.graph_capture() does it: the capture stream first waits
// on the current (context) stream, so that everything enqueued before capture (weights, warm-up
// collectives) is ordered before the captured work; while capture mode is on, every collective
// of every group of the context is issued on that one stream, so the CUDA graph that the caller
// records on it contains them all, in order. pstate does not call cudaStreamBeginCapture itself:
// the caller captures (torch.cuda.graph, cudaStreamBeginCapture) inside capture mode.
#include "transport/nccl/cuda_context.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>
#include <utility>

namespace pstate {

namespace {

const char *location_text(MemoryLocation::Kind kind) {
  switch (kind) {
    case MemoryLocation::Kind::kHost: return "pageable host memory";
    case MemoryLocation::Kind::kPinnedHost: return "pinned host memory";
    case MemoryLocation::Kind::kDevice: return "device memory";
    case MemoryLocation::Kind::kManaged: return "managed memory";
  }
  return "memory";
}

}  // namespace

CudaDeviceContext::CudaDeviceContext(const DeviceContextOptions &options, const Logger &log)
    : log_(log), device_(options.device_ordinal), stream_(static_cast<cudaStream_t>(options.stream)),
      timeout_ms_(options.timeout_ms), abort_requested_(options.abort_requested) {
  const std::string where = cat("cuda:", device_);
  int count = 0;
  try {
    cuda_ = CudaLib::load();
    count = cuda_->device_count();
  } catch (const Error &e) {
    // Name every missing piece at once: a host without a GPU often lacks NCCL too, and a
    // PSTATE_NCCL_LIBRARY that names no file is worth hearing about before the GPU arrives.
    if (!options.load_nccl) throw;
    try {
      NcclLib::load();
    } catch (const Error &n) {
      throw Error(e.status(), cat(e.what(), "; and ", n.what()));
    }
    throw;
  }
  if (device_ < 0 || device_ >= count)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "device_ordinal ", device_, " but this host shows ", count,
                " CUDA device(s) (ordinals 0..", count - 1,
                "; CUDA_VISIBLE_DEVICES narrows them): pass -1 for the local rank, or fix LOCAL_RANK");
  // The creating thread works on this device from now on, as SGLang's torch.cuda.set_device.
  cuda_->check(cuda_->api().SetDevice(device_), "cudaSetDevice", where);
  cuda_->check(cuda_->api().DeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, device_),
               "cudaDeviceGetAttribute", where);
  cuda_->check(cuda_->api().DeviceGetAttribute(&cc_minor_, cudaDevAttrComputeCapabilityMinor, device_),
               "cudaDeviceGetAttribute", where);
  char bus[32] = {0};
  if (cuda_->api().DeviceGetPCIBusId(bus, sizeof bus, device_) == cudaSuccess) pci_bus_id_ = bus;
  cuda_->api().GetLastError();
  if (options.load_nccl) nccl_ = NcclLib::load();
  share_interface_rule(options.socket_ifname);  // before any NCCL communicator reads it
  log_.info("cuda: ", describe());
}

// One interface rule for every socket of the job: NCCL reads NCCL_SOCKET_IFNAME (the same
// syntax) when it makes its first communicator, after this. A value the user set is theirs.
void CudaDeviceContext::share_interface_rule(const std::string &rule) const {
  if (rule.empty()) return;
  const char *user = std::getenv("NCCL_SOCKET_IFNAME");
  if (user != nullptr) {
    if (rule != user)
      log_.info("cuda: NCCL_SOCKET_IFNAME=", user, " is kept as set; PSTATE_SOCKET_IFNAME=", rule,
                " applies to the store and UCX");
    return;
  }
  ::setenv("NCCL_SOCKET_IFNAME", rule.c_str(), 0);
  log_.info("cuda: NCCL_SOCKET_IFNAME=", rule, " (from PSTATE_SOCKET_IFNAME)");
}

CudaDeviceContext::~CudaDeviceContext() {
  if (capturing_) log_.warn("cuda:", device_, ": context destroyed in graph-capture mode");
}

std::string CudaDeviceContext::describe() const {
  std::string text = cat("cuda:", device_, " (sm_", cc_major_, cc_minor_);
  if (!pci_bus_id_.empty()) text += ", " + pci_bus_id_;
  text += "), " + cuda_->describe();
  if (nccl_) text += ", " + nccl_->describe();
  return text;
}

const NcclLib &CudaDeviceContext::nccl() {
  if (!nccl_) nccl_ = NcclLib::load();
  return *nccl_;
}

// ---- group memory (pstate_mem_alloc) ----------------------------------------------------------

void *CudaDeviceContext::mem_alloc(size_t bytes, bool *from_nccl, const std::string &where) {
  DeviceGuard guard(*cuda_, device_, where);
  void *p = nullptr;
  *from_nccl = nccl_ && nccl_->has_mem_alloc();
  if (*from_nccl) {
    ncclResult_t r = nccl_->api().MemAlloc(&p, bytes);
    if (r != ncclSuccess || p == nullptr)
      throw_error(PSTATE_ERR_NO_MEMORY, where, ": ncclMemAlloc of ", bytes, " bytes on cuda:", device_, " failed: ",
                  nccl_->error_text(r, nullptr), "; free device memory or ask for less");
    return p;
  }
  cudaError_t e = cuda_->api().Malloc(&p, bytes);
  if (e != cudaSuccess || p == nullptr)
    throw_error(PSTATE_ERR_NO_MEMORY, where, ": cudaMalloc of ", bytes, " bytes on cuda:", device_, " failed: ",
                cuda_->api().GetErrorString(e), "; free device memory or ask for less");
  return p;
}

void CudaDeviceContext::mem_free(void *p, bool from_nccl) noexcept {
  if (p == nullptr) return;
  if (from_nccl && nccl_ && nccl_->has_mem_alloc()) {
    if (nccl_->api().MemFree(p) != ncclSuccess) log_.warn("cuda: ncclMemFree(", p, ") failed");
    return;
  }
  if (cuda_->api().Free(p) != cudaSuccess) log_.warn("cuda: cudaFree(", p, ") failed");
}

bool CudaDeviceContext::fp8_reductions_supported() { return nccl().has_fp8() && cc_major_ >= 9; }

std::string CudaDeviceContext::fp8_requirement_text() {
  return cat("fp8 reductions need NCCL >= 2.24 on a GPU of compute capability >= 9.0; this is NCCL ",
             nccl().version_text(), " on sm_", cc_major_, cc_minor_, " (fp8 moves, e.g. all_gather, work)");
}

// ---- pointers and streams --------------------------------------------------------------------

void CudaDeviceContext::require_device_pointer(const void *p, const char *name, const std::string &where) const {
  MemoryLocation loc = cuda_->locate(p);
  switch (loc.kind) {
    case MemoryLocation::Kind::kManaged: return;
    case MemoryLocation::Kind::kDevice:
      if (loc.device == device_) return;
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, where, ": ", name, " (", p, ") is on CUDA device ", loc.device,
                  " but this rank's context uses device ", device_, ": allocate it on device ", device_);
    case MemoryLocation::Kind::kHost:
    case MemoryLocation::Kind::kPinnedHost: break;
  }
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, where, ": ", name, " (", p, ") is ", location_text(loc.kind),
              " but this context is CUDA (device ", device_,
              "): pass device memory (cudaMalloc), or create the context with device = PSTATE_DEVICE_CPU");
}

cudaStream_t CudaDeviceContext::stream_for(void *requested, const std::string &where) const {
  auto stream = static_cast<cudaStream_t>(requested);
  if (!capturing_) return stream != nullptr ? stream : stream_;
  if (stream == nullptr || stream == capture_stream_) return capture_stream_;
  // A stream forked into the same capture (event record on the capture stream, wait on it) is
  // recorded into the same graph, so it is as good as the capture stream.
  CudaLib::CaptureInfo mine = cuda_->capture_info(capture_stream_, where);
  if (mine.id != 0 && cuda_->capture_info(stream, where).id == mine.id) return stream;
  throw_error(PSTATE_ERR_INVALID_STATE, where, ": collective issued on stream ", requested,
              ", which is not the capture stream ", static_cast<void *>(capture_stream_),
              ", while the context is in graph-capture mode (pstate_graph_capture_begin): pass the "
              "capture stream (or NULL), or call pstate_graph_capture_end first");
}

void CudaDeviceContext::wait_stream(cudaStream_t stream, const Deadline &deadline, const std::function<void()> &poll,
                                    const std::string &where) const {
  // Spin with yields for the short waits a barrier usually is, then back off to sleeps so a
  // long wait does not burn a core; the deadline bounds it either way.
  auto sleep = std::chrono::microseconds(0);
  for (;;) {
    cudaError_t e = cuda_->api().StreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cuda_->check(e, "cudaStreamQuery", where);
    if (poll) poll();
    if (abort_requested())
      throw_error(PSTATE_ERR_ABORTED, where, ": stream ", static_cast<void *>(stream), " had not drained when ",
                  kAbortedByAnotherThread);
    if (deadline.expired())
      throw_error(PSTATE_ERR_TIMEOUT, where, ": stream ", static_cast<void *>(stream), " did not drain within ",
                  timeout_ms_, " ms (a peer may not have joined, or a kernel is stuck); PSTATE_TIMEOUT_MS sets the limit");
    if (sleep.count() == 0) {
      std::this_thread::yield();
      sleep = std::chrono::microseconds(1);
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  }
}

void CudaDeviceContext::synchronize(const std::string &where) {
  if (capturing_)
    throw_error(PSTATE_ERR_INVALID_STATE, where, ": waiting for the device cannot be recorded into a CUDA graph: "
                "call it outside graph-capture mode");
  DeviceGuard guard(*cuda_, device_, where);
  wait_stream(stream_, Deadline::after_ms(timeout_ms_), nullptr, where);
}

// ---- capture ---------------------------------------------------------------------------------

void *CudaDeviceContext::begin_capture(void *stream) {
  const std::string where = "graph capture begin";
  if (capturing_)
    throw_error(PSTATE_ERR_INVALID_STATE, where, ": this context is already in graph-capture mode "
                "(pstate_graph_capture_begin called twice): call pstate_graph_capture_end first");
  DeviceGuard guard(*cuda_, device_, where);
  auto capture = static_cast<cudaStream_t>(stream);
  if (capture == nullptr) {
    // Non-blocking: a stream that syncs with the legacy default stream cannot be captured.
    if (!own_capture_stream_) own_capture_stream_ = std::make_unique<CudaStream>(*cuda_, cudaStreamNonBlocking, where);
    capture = own_capture_stream_->get();
  }
  // Order prior work first, unless the caller already began a CUDA capture on that stream (a
  // dependency on work outside the capture cannot be recorded into it).
  if (capture != stream_ && cuda_->capture_info(capture, where).status == cudaStreamCaptureStatusNone) {
    if (!order_event_) order_event_ = std::make_unique<CudaEvent>(*cuda_, cudaEventDisableTiming, where);
    order_event_->record(stream_, where);
    order_event_->make_wait(capture, where);
  }
  capture_stream_ = capture;
  capturing_ = true;
  log_.info("cuda:", device_, ": graph-capture mode on, capture stream ", static_cast<void *>(capture));
  return capture;
}

void CudaDeviceContext::end_capture() {
  const std::string where = "graph capture end";
  if (!capturing_)
    throw_error(PSTATE_ERR_INVALID_STATE, where, ": this context is not in graph-capture mode: "
                "pstate_graph_capture_end without pstate_graph_capture_begin");
  DeviceGuard guard(*cuda_, device_, where);
  CudaLib::CaptureInfo info = cuda_->capture_info(capture_stream_, where);
  if (info.status != cudaStreamCaptureStatusNone)
    throw_error(PSTATE_ERR_INVALID_STATE, where, ": the capture stream ", static_cast<void *>(capture_stream_),
                " is still capturing a CUDA graph", info.status == cudaStreamCaptureStatusInvalidated ? " (invalidated)" : "",
                ": end that capture (cudaStreamEndCapture, or leave the torch.cuda.graph block) before "
                "pstate_graph_capture_end; capture mode stays on");
  // Join: later work on the context stream comes after what ran on the capture stream.
  if (capture_stream_ != stream_) {
    if (!order_event_) order_event_ = std::make_unique<CudaEvent>(*cuda_, cudaEventDisableTiming, where);
    order_event_->record(capture_stream_, where);
    order_event_->make_wait(stream_, where);
  }
  capturing_ = false;
  capture_stream_ = nullptr;
  log_.info("cuda:", device_, ": graph-capture mode off");
}

// ---- factory (declared in device_comm.hpp) ---------------------------------------------------

std::unique_ptr<DeviceContext> make_cuda_device_context(const DeviceContextOptions &options, const Logger &log) {
  return std::make_unique<CudaDeviceContext>(options, log);
}

}  // namespace pstate

// ---- the flight recorder's device times (PSTATE_TRACE_CUDA_EVENTS=1) ----
namespace pstate {

void CudaDeviceContext::trace_bracket(bool end, void *stream) {
  if (!trace_events_on_ || trace_op_ == 0 || capturing_) return;  // events in a graph time nothing
  const std::string where = "flight recorder events";
  std::lock_guard<std::mutex> lock(trace_mutex_);
  if (!trace_ref_) {
    trace_ref_ = std::make_unique<CudaEvent>(*cuda_, cudaEventDefault, where);
    trace_ref_->record(stream_, where);
    trace_ref_->synchronize(where);
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    trace_ref_unix_ns_ = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    trace_events_.resize(kTraceEventPairs);
  }
  TraceEvents &e = trace_events_[trace_op_ % kTraceEventPairs];
  if (!end) {
    if (!e.start) {
      e.start = std::make_unique<CudaEvent>(*cuda_, cudaEventDefault, where);
      e.end = std::make_unique<CudaEvent>(*cuda_, cudaEventDefault, where);
    }
    e.id = trace_op_;
    e.ended = false;
    e.start->record(static_cast<cudaStream_t>(stream), where);
  } else if (e.id == trace_op_ && e.start) {
    e.end->record(static_cast<cudaStream_t>(stream), where);
    e.ended = true;
  }
}

bool CudaDeviceContext::trace_times(uint64_t id, int64_t *start_unix_ns, int64_t *end_unix_ns) {
  std::lock_guard<std::mutex> lock(trace_mutex_);
  if (!trace_ref_ || id == 0) return false;
  TraceEvents &e = trace_events_[id % kTraceEventPairs];
  if (e.id != id || !e.start) return false;
  auto when = [&](const CudaEvent &ev) -> int64_t {
    if (cuda_->api().EventQuery(ev.get()) != cudaSuccess) return -1;  // not reached yet (or an error)
    float ms = 0.0f;
    if (cuda_->api().EventElapsedTime(&ms, trace_ref_->get(), ev.get()) != cudaSuccess) return -1;
    return trace_ref_unix_ns_ + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  };
  *start_unix_ns = when(*e.start);
  *end_unix_ns = e.ended ? when(*e.end) : -1;
  return true;
}

}  // namespace pstate
