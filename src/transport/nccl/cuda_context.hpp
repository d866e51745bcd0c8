// cuda_context.hpp — CudaDeviceContext: the CUDA side of one pstate_t (see device_comm.hpp).
//
// It owns the loaded CUDA runtime and NCCL (each context loads its own handles, so no global
// state: N ranks as N threads each hold one), knows its device and context stream, and holds
// graph-capture mode. Its communicators ask it two things on every operation: which stream to
// enqueue on (stream_for: NULL resolution and the capture-mode single-stream rule) and whether a
// buffer is device memory of this device (require_device_pointer).
#pragma once

#include "transport/nccl/cuda_lib.hpp"
#include "transport/device_comm.hpp"
#include "transport/nccl/nccl_lib.hpp"

#include "common/deadline.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>
#include <string>

namespace pstate {

class CudaDeviceContext final : public DeviceContext {
 public:
  CudaDeviceContext(const DeviceContextOptions &options, const Logger &log);
  ~CudaDeviceContext() override;

  int device_ordinal() const override { return device_; }
  void *stream() const override { return stream_; }
  std::string describe() const override;
  MemoryLocation locate(const void *p) const override { return cuda_->locate(p); }
  void require_device_pointer(const void *p, const char *name, const std::string &where) const override;
  void synchronize(const std::string &where) override;

  void *begin_capture(void *stream) override;
  void end_capture() override;
  bool capturing() const override { return capturing_; }
  void enable_trace_events() override { trace_events_on_ = true; }
  void trace_op(uint64_t id) override { trace_op_ = id; }
  void trace_bracket(bool end, void *stream) override;
  bool trace_times(uint64_t id, int64_t *start_unix_ns, int64_t *end_unix_ns) override;
  void *capture_stream() const override { return capturing_ ? capture_stream_ : nullptr; }
  void *mem_alloc(size_t bytes, bool *from_nccl, const std::string &where) override;
  void mem_free(void *p, bool from_nccl) noexcept override;
  int nccl_version() const override { return nccl_ ? nccl_->version() : 0; }

  // ---- for NcclCommunicator ----
  const CudaLib &cuda() const { return *cuda_; }
  // NCCL, loaded now if the context was made without it.
  const NcclLib &nccl();
  int64_t timeout_ms() const { return timeout_ms_; }
  // DeviceContextOptions::abort_requested: set by another thread's pstate_revoke / pstate_abort.
  bool abort_requested() const {
    return abort_requested_ != nullptr && abort_requested_->load(std::memory_order_acquire);
  }
  // fp8 reductions: NCCL >= 2.24 on compute capability >= 9.0.
  bool fp8_reductions_supported();
  std::string fp8_requirement_text();
  // The stream an operation enqueues on. requested nullptr: the capture stream while capturing,
  // else the context stream. While capturing, another stream is INVALID_STATE unless it belongs
  // to the same CUDA capture sequence as the capture stream (forked from it by an event).
  cudaStream_t stream_for(void *requested, const std::string &where) const;
  // The same for an operation `op` of `group`: outside capture mode a branch, no text built.
  cudaStream_t stream_for(void *requested, const std::string &group, const char *op) const {
    if (!capturing_) [[likely]]
      return requested != nullptr ? static_cast<cudaStream_t>(requested) : stream_;
    return stream_for(requested, group + ": " + op);
  }
  // Whether p is device memory of this context's device, or managed memory: what
  // require_device_pointer accepts, without building its message (one cudaPointerGetAttributes).
  bool is_own_device_memory(const void *p) const {
    const MemoryLocation loc = cuda_->locate(p);
    return loc.kind == MemoryLocation::Kind::kManaged ||
           (loc.kind == MemoryLocation::Kind::kDevice && loc.device == device_);
  }
  // Waits until `stream` has no pending work. Between queries calls poll() (which may throw,
  // e.g. on an NCCL asynchronous error); past the deadline throws TIMEOUT naming `where`.
  void wait_stream(cudaStream_t stream, const Deadline &deadline, const std::function<void()> &poll,
                   const std::string &where) const;

 private:
  void share_interface_rule(const std::string &rule) const;

  Logger log_;
  std::unique_ptr<CudaLib> cuda_;  // first member: released last
  std::unique_ptr<NcclLib> nccl_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  int64_t timeout_ms_ = 0;
  const std::atomic<bool> *abort_requested_ = nullptr;
  int cc_major_ = 0;
  int cc_minor_ = 0;
  std::string pci_bus_id_;

  std::unique_ptr<CudaStream> own_capture_stream_;  // made on the first begin_capture(NULL)
  std::unique_ptr<CudaEvent> order_event_;          // orders the context and capture streams
  bool capturing_ = false;
  cudaStream_t capture_stream_ = nullptr;

  // Flight-recorder events: a ring of pairs indexed by entry id; the reference event, recorded on
  // the context stream and waited for once, ties device time to the wall clock.
  struct TraceEvents {
    uint64_t id = 0;
    bool ended = false;
    std::unique_ptr<CudaEvent> start, end;
  };
  static constexpr size_t kTraceEventPairs = 256;
  bool trace_events_on_ = false;
  uint64_t trace_op_ = 0;
  std::mutex trace_mutex_;  // the owner thread records, a dumping thread queries
  std::vector<TraceEvents> trace_events_;
  std::unique_ptr<CudaEvent> trace_ref_;
  int64_t trace_ref_unix_ns_ = 0;
};

}  // namespace pstate
