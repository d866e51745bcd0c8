// cuda_lib.hpp — the CUDA runtime, dlopen'ed at run time: the only code that knows how it is loaded.
//
// In the style of NCCL's src/misc/*wrap.cc: one object opens the library, resolves every symbol
// it needs with a check, and offers typed calls; nothing else in pstate calls dlopen for CUDA.
//
// Why the runtime API (libcudart) and not the driver API (libcuda): the C API hands us
// cudaStream_t values and pointers from the caller's runtime (torch, a CUDA C++ program), NCCL
// itself is a runtime client, and the calls we need (pointer attributes, stream capture status,
// events) are the runtime's. PSTATE_CUDA_RUNTIME_LIBRARY, when set, names the only file tried.
// Else a runtime already loaded in the process is preferred, so pstate and its caller share one;
// else libcudart.so.13, .12, .so in that order. When a runtime says the
// driver is too old for it, the next candidate is tried (a CUDA 12 driver with both runtimes
// installed). The primary context is shared through the driver either way.
//
// Why the functions declared by the CUDA 13 header are safe on a CUDA 12 runtime: every struct we
// pass is the same or larger in 13 (cudaPointerAttributes grew a reserved tail), enum values are
// stable, and the one symbol whose signature changed (cudaStreamGetCaptureInfo: 3 arguments in
// 12, 7 in 13) is only called with the extra pointers NULL, which a 3-argument callee ignores
// under the x86-64/aarch64 calling conventions. cudaGetDeviceProperties (whose struct changed) is
// not used.
//
// The library is opened RTLD_NODELETE: CUDA and NCCL keep threads and exit handlers that must
// never see their code unmapped, so dlclose only drops our reference.
#pragma once

#include "transport/device_comm.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

namespace pstate {

class CudaLib {
 public:
  // Every entry point pstate uses, resolved and checked at load.
  struct Api {
    decltype(&::cudaGetDeviceCount) GetDeviceCount = nullptr;
    decltype(&::cudaGetDevice) GetDevice = nullptr;
    decltype(&::cudaSetDevice) SetDevice = nullptr;
    decltype(&::cudaDeviceGetAttribute) DeviceGetAttribute = nullptr;
    decltype(&::cudaDeviceGetPCIBusId) DeviceGetPCIBusId = nullptr;
    decltype(&::cudaRuntimeGetVersion) RuntimeGetVersion = nullptr;
    decltype(&::cudaDriverGetVersion) DriverGetVersion = nullptr;
    decltype(&::cudaGetErrorName) GetErrorName = nullptr;
    decltype(&::cudaGetErrorString) GetErrorString = nullptr;
    decltype(&::cudaGetLastError) GetLastError = nullptr;
    decltype(&::cudaPointerGetAttributes) PointerGetAttributes = nullptr;
    decltype(&::cudaStreamCreateWithFlags) StreamCreateWithFlags = nullptr;
    decltype(&::cudaStreamDestroy) StreamDestroy = nullptr;
    decltype(&::cudaStreamSynchronize) StreamSynchronize = nullptr;
    decltype(&::cudaStreamQuery) StreamQuery = nullptr;
    decltype(&::cudaStreamWaitEvent) StreamWaitEvent = nullptr;
    decltype(&::cudaStreamIsCapturing) StreamIsCapturing = nullptr;
    decltype(&::cudaStreamGetCaptureInfo) StreamGetCaptureInfo = nullptr;
    decltype(&::cudaEventCreateWithFlags) EventCreateWithFlags = nullptr;
    decltype(&::cudaEventDestroy) EventDestroy = nullptr;
    decltype(&::cudaEventRecord) EventRecord = nullptr;
    decltype(&::cudaEventSynchronize) EventSynchronize = nullptr;
    decltype(&::cudaEventElapsedTime) EventElapsedTime = nullptr;
    decltype(&::cudaEventQuery) EventQuery = nullptr;
    decltype(&::cudaMemcpyAsync) MemcpyAsync = nullptr;
    decltype(&::cudaMalloc) Malloc = nullptr;
    decltype(&::cudaFree) Free = nullptr;
  };

  // The library names tried, in order, after any of them already loaded in the process.
  static constexpr const char *kCandidates[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  // Names the one runtime file to load instead (like PSTATE_NCCL_LIBRARY for NCCL): a runtime
  // outside the loader's path, or a stand-in; nothing else is tried when it is set.
  static constexpr const char *kPathVariable = "PSTATE_CUDA_RUNTIME_LIBRARY";

  // Opens $PSTATE_CUDA_RUNTIME_LIBRARY when set (and not empty): UNSUPPORTED "CUDA runtime not
  // found: PSTATE_CUDA_RUNTIME_LIBRARY=/x: <dlerror>: fix or unset ..." when it cannot be opened.
  // Otherwise throws UNSUPPORTED "CUDA runtime not found (tried libcudart.so.13: <why>; ...)". Loading does
  // not need a device: device_count() says whether there is one.
  static std::unique_ptr<CudaLib> load();

  ~CudaLib();
  CudaLib(const CudaLib &) = delete;
  CudaLib &operator=(const CudaLib &) = delete;

  const Api &api() const { return api_; }
  const std::string &library() const { return library_; }  // the name it was opened as
  int runtime_version() const { return runtime_version_; }  // 13000 for 13.0
  int driver_version() const { return driver_version_; }    // 0 when no driver is installed
  // "libcudart.so.13 (runtime 13.0, driver 12.8)"
  std::string describe() const;

  // Number of devices, >= 1. Throws UNSUPPORTED "no CUDA device: cudaGetDeviceCount:
  // insufficient driver (...)" (or "no CUDA-capable device", ...), saying what to do.
  int device_count() const;

  // "cudaErrorIllegalAddress: an illegal memory access was encountered"
  std::string error_text(cudaError_t e) const;
  // Throws TRANSPORT "<where>: <call>: <error_text>" unless e is cudaSuccess. Clears the
  // runtime's per-thread last error so a later, unrelated call does not report it.
  void check(cudaError_t e, const char *call, const std::string &where) const;

  // Host (pageable or pinned), device N or managed, by cudaPointerGetAttributes. A pointer the
  // runtime does not know is host memory. Throws TRANSPORT when the runtime fails.
  MemoryLocation locate(const void *p) const;

  // Capture status of a stream and, while active, the id of its capture sequence.
  struct CaptureInfo {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
  };
  CaptureInfo capture_info(cudaStream_t stream, const std::string &where) const;

 private:
  CudaLib(void *handle, std::string library);
  // Resolves every symbol of Api; returns the first missing name, or nullptr when all exist.
  const char *resolve();
  void *handle_;
  std::string library_;
  Api api_;
  int runtime_version_ = 0;
  int driver_version_ = 0;
};

// Makes `device` current on this thread for the scope and restores the previous device after.
// NCCL and the runtime calls pstate makes act on the current device; the caller's thread may
// have another one current (N ranks as N threads, or a caller juggling devices).
class DeviceGuard {
 public:
  DeviceGuard(const CudaLib &cuda, int device, const std::string &where);
  // The same for an operation `op` of `group`, whose "group: op" text is built only on a failure.
  DeviceGuard(const CudaLib &cuda, int device, const std::string &group, const char *op);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

 private:
  // Both constructors: where() names the call, asked only when a CUDA call failed.
  template <typename Where>
  void enter(int device, const Where &where);
  const CudaLib &cuda_;
  int previous_ = -1;  // -1: nothing to restore
};

// An owned stream (cudaStreamCreateWithFlags / cudaStreamDestroy).
class CudaStream {
 public:
  CudaStream(const CudaLib &cuda, unsigned flags, const std::string &where);
  ~CudaStream();
  CudaStream(const CudaStream &) = delete;
  CudaStream &operator=(const CudaStream &) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  const CudaLib &cuda_;
  cudaStream_t stream_ = nullptr;
};

// An owned event: ordering between streams (record + wait) and timing (elapsed_ms).
class CudaEvent {
 public:
  // flags: cudaEventDisableTiming for ordering-only events, cudaEventDefault for timing.
  CudaEvent(const CudaLib &cuda, unsigned flags, const std::string &where);
  ~CudaEvent();
  CudaEvent(const CudaEvent &) = delete;
  CudaEvent &operator=(const CudaEvent &) = delete;
  cudaEvent_t get() const { return event_; }

  void record(cudaStream_t stream, const std::string &where) const;
  // Makes `stream` wait for the last record of this event (no host blocking).
  void make_wait(cudaStream_t stream, const std::string &where) const;
  void synchronize(const std::string &where) const;
  // Milliseconds between `start` and this event (both recorded and complete).
  float elapsed_ms_since(const CudaEvent &start, const std::string &where) const;

 private:
  const CudaLib &cuda_;
  cudaEvent_t event_ = nullptr;
};

// An owned device allocation (cudaMalloc / cudaFree) on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaLib &cuda, size_t bytes, const std::string &where);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *get() const { return ptr_; }

 private:
  const CudaLib &cuda_;
  void *ptr_ = nullptr;
};

}  // namespace pstate
