// cuda_lib.cpp — loads the CUDA runtime (see cuda_lib.hpp for the choices) and wraps its calls
// with errors that say what failed and what to do. Also HostPointerCheck, the one user of the
// driver API: it only looks at a libcuda.so.1 the process has already loaded.
#include "transport/nccl/cuda_lib.hpp"

#include "common/error.hpp"

#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

namespace pstate {

namespace {

constexpr int kOpenFlags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;

std::string dl_error_text() {
  const char *e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// "13.0" from 13000; "none" from 0 (cudaDriverGetVersion reports 0 without a driver).
std::string cuda_version_text(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The words a user searches for, then CUDA's own name and text.
const char *short_reason(cudaError_t e) {
  switch (e) {
    case cudaErrorInsufficientDriver: return "insufficient driver";
    case cudaErrorNoDevice: return "no CUDA-capable device";
    case cudaErrorDevicesUnavailable: return "all CUDA devices are busy or unavailable";
    case cudaErrorSystemDriverMismatch: return "driver and kernel module versions differ";
    case cudaErrorCompatNotSupportedOnDevice: return "forward-compatibility not supported on this device";
    default: return nullptr;
  }
}

}  // namespace

// ---- loading ---------------------------------------------------------------------------------

CudaLib::CudaLib(void *handle, std::string library) : handle_(handle), library_(std::move(library)) {}

CudaLib::~CudaLib() {
  if (handle_ != nullptr) dlclose(handle_);  // RTLD_NODELETE: the code stays mapped
}

const char *CudaLib::resolve() {
#define PSTATE_CUDA_RESOLVE(name)                                                       \
  api_.name = reinterpret_cast<decltype(api_.name)>(dlsym(handle_, "cuda" #name));     \
  if (api_.name == nullptr) return "cuda" #name;
  PSTATE_CUDA_RESOLVE(GetDeviceCount)
  PSTATE_CUDA_RESOLVE(GetDevice)
  PSTATE_CUDA_RESOLVE(SetDevice)
  PSTATE_CUDA_RESOLVE(DeviceGetAttribute)
  PSTATE_CUDA_RESOLVE(DeviceGetPCIBusId)
  PSTATE_CUDA_RESOLVE(RuntimeGetVersion)
  PSTATE_CUDA_RESOLVE(DriverGetVersion)
  PSTATE_CUDA_RESOLVE(GetErrorName)
  PSTATE_CUDA_RESOLVE(GetErrorString)
  PSTATE_CUDA_RESOLVE(GetLastError)
  PSTATE_CUDA_RESOLVE(PointerGetAttributes)
  PSTATE_CUDA_RESOLVE(StreamCreateWithFlags)
  PSTATE_CUDA_RESOLVE(StreamDestroy)
  PSTATE_CUDA_RESOLVE(StreamSynchronize)
  PSTATE_CUDA_RESOLVE(StreamQuery)
  PSTATE_CUDA_RESOLVE(StreamWaitEvent)
  PSTATE_CUDA_RESOLVE(StreamIsCapturing)
  PSTATE_CUDA_RESOLVE(StreamGetCaptureInfo)
  PSTATE_CUDA_RESOLVE(EventCreateWithFlags)
  PSTATE_CUDA_RESOLVE(EventDestroy)
  PSTATE_CUDA_RESOLVE(EventRecord)
  PSTATE_CUDA_RESOLVE(EventSynchronize)
  PSTATE_CUDA_RESOLVE(EventElapsedTime)
  PSTATE_CUDA_RESOLVE(EventQuery)
  PSTATE_CUDA_RESOLVE(MemcpyAsync)
  PSTATE_CUDA_RESOLVE(Malloc)
  PSTATE_CUDA_RESOLVE(Free)
#undef PSTATE_CUDA_RESOLVE
  return nullptr;
}

std::unique_ptr<CudaLib> CudaLib::load() {
  std::vector<std::string> tried;
  std::vector<void *> seen;  // one file opened under two names gives the same handle
  std::unique_ptr<CudaLib> fallback;  // the first usable one, kept if every driver check fails

  // Try one handle: resolve, read versions, and accept it unless the driver is too old for it.
  auto consider = [&](void *handle, const char *name) -> std::unique_ptr<CudaLib> {
    for (void *h : seen) {
      if (h == handle) {
        dlclose(handle);
        return nullptr;
      }
    }
    seen.push_back(handle);
    std::unique_ptr<CudaLib> lib(new CudaLib(handle, name));
    if (const char *missing = lib->resolve()) {
      tried.push_back(cat(name, ": lacks ", missing));
      return nullptr;
    }
    lib->api_.RuntimeGetVersion(&lib->runtime_version_);
    lib->api_.DriverGetVersion(&lib->driver_version_);
    int count = 0;
    cudaError_t e = lib->api_.GetDeviceCount(&count);
    lib->api_.GetLastError();
    if (e == cudaErrorInsufficientDriver) {
      tried.push_back(cat(name, ": ", short_reason(e)));
      if (!fallback) fallback = std::move(lib);
      return nullptr;
    }
    return lib;
  };

  // An explicit file named by the user wins over every search, and is the only one tried.
  const char *path = std::getenv(kPathVariable);
  if (path != nullptr && path[0] != '\0') {
    std::string origin = cat(kPathVariable, "=", path);
    void *h = dlopen(path, kOpenFlags);
    if (h == nullptr)
      throw_error(PSTATE_ERR_UNSUPPORTED, "CUDA runtime not found: ", origin, ": ", dl_error_text(), ": fix or unset ",
                  kPathVariable, " (it must name a libcudart.so file)");
    if (auto lib = consider(h, path)) return lib;
    if (fallback) return fallback;  // device_count() will say the driver is insufficient
    throw_error(PSTATE_ERR_UNSUPPORTED, "CUDA runtime not usable: ", origin, ": ", tried.empty() ? "" : tried.back(),
                ": point ", kPathVariable, " at a libcudart.so of CUDA 12 or 13, or unset it");
  }

  // A runtime the process already uses first, so pstate and its caller share it.
  for (const char *name : kCandidates) {
    if (void *h = dlopen(name, kOpenFlags | RTLD_NOLOAD)) {
      if (auto lib = consider(h, name)) return lib;
    }
  }
  for (const char *name : kCandidates) {
    void *h = dlopen(name, kOpenFlags);
    if (h == nullptr) {
      tried.push_back(cat(name, ": ", dl_error_text()));
      continue;
    }
    if (auto lib = consider(h, name)) return lib;
  }
  if (fallback) return fallback;  // device_count() will say the driver is insufficient

  std::string list;
  for (const auto &t : tried) list += (list.empty() ? "" : "; ") + t;
  throw_error(PSTATE_ERR_UNSUPPORTED, "CUDA runtime not found (tried ", list,
              "): install the CUDA runtime (the toolkit, or pip nvidia-cuda-runtime) and make it "
              "visible to the loader (LD_LIBRARY_PATH), or use PSTATE_DEVICE_CPU");
}

std::string CudaLib::describe() const {
  return cat(library_, " (runtime ", cuda_version_text(runtime_version_), ", driver ",
             cuda_version_text(driver_version_), ")");
}

// ---- errors ----------------------------------------------------------------------------------

std::string CudaLib::error_text(cudaError_t e) const {
  return cat(api_.GetErrorName(e), ": ", api_.GetErrorString(e));
}

void CudaLib::check(cudaError_t e, const char *call, const std::string &where) const {
  if (e == cudaSuccess) return;
  api_.GetLastError();
  throw_error(PSTATE_ERR_TRANSPORT, where, ": ", call, ": ", error_text(e));
}

int CudaLib::device_count() const {
  int count = 0;
  cudaError_t e = api_.GetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return count;
  api_.GetLastError();
  if (e == cudaSuccess) e = cudaErrorNoDevice;
  const char *reason = short_reason(e);
  throw_error(PSTATE_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount: ",
              reason != nullptr ? reason : api_.GetErrorName(e), " (", error_text(e), "; ", describe(),
              "): install or update the NVIDIA driver, check CUDA_VISIBLE_DEVICES, or use "
              "PSTATE_DEVICE_CPU");
}

// ---- pointers and capture --------------------------------------------------------------------

MemoryLocation CudaLib::locate(const void *p) const {
  cudaPointerAttributes attr{};
  cudaError_t e = api_.PointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    api_.GetLastError();
    if (e == cudaErrorInvalidValue) return {};  // older runtimes: unknown pointer = host memory
    throw_error(PSTATE_ERR_TRANSPORT, "cudaPointerGetAttributes(", p, "): ", error_text(e));
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice: return {MemoryLocation::Kind::kDevice, attr.device};
    case cudaMemoryTypeManaged: return {MemoryLocation::Kind::kManaged, attr.device};
    case cudaMemoryTypeHost: return {MemoryLocation::Kind::kPinnedHost, -1};
    case cudaMemoryTypeUnregistered: break;
  }
  return {};
}

CudaLib::CaptureInfo CudaLib::capture_info(cudaStream_t stream, const std::string &where) const {
  CaptureInfo info;
  // The CUDA 13 signature; a CUDA 12 runtime's 3-argument symbol ignores the NULL extras.
  check(api_.StreamGetCaptureInfo(stream, &info.status, &info.id, nullptr, nullptr, nullptr, nullptr),
        "cudaStreamGetCaptureInfo", where);
  if (info.status != cudaStreamCaptureStatusActive) info.id = 0;
  return info;
}

// ---- RAII helpers ----------------------------------------------------------------------------

template <typename Where>
void DeviceGuard::enter(int device, const Where &where) {
  int current = -1;
  cudaError_t e = cuda_.api().GetDevice(&current);
  if (e != cudaSuccess) cuda_.check(e, "cudaGetDevice", where());
  if (current == device) [[likely]] return;
  e = cuda_.api().SetDevice(device);
  if (e != cudaSuccess) cuda_.check(e, "cudaSetDevice", where());
  previous_ = current;
}

DeviceGuard::DeviceGuard(const CudaLib &cuda, int device, const std::string &where) : cuda_(cuda) {
  enter(device, [&] { return where; });
}

DeviceGuard::DeviceGuard(const CudaLib &cuda, int device, const std::string &group, const char *op) : cuda_(cuda) {
  enter(device, [&] { return group + ": " + op; });
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cuda_.api().SetDevice(previous_);
}

CudaStream::CudaStream(const CudaLib &cuda, unsigned flags, const std::string &where) : cuda_(cuda) {
  cuda_.check(cuda_.api().StreamCreateWithFlags(&stream_, flags), "cudaStreamCreateWithFlags", where);
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cuda_.api().StreamDestroy(stream_);
}

CudaEvent::CudaEvent(const CudaLib &cuda, unsigned flags, const std::string &where) : cuda_(cuda) {
  cuda_.check(cuda_.api().EventCreateWithFlags(&event_, flags), "cudaEventCreateWithFlags", where);
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cuda_.api().EventDestroy(event_);
}

void CudaEvent::record(cudaStream_t stream, const std::string &where) const {
  cuda_.check(cuda_.api().EventRecord(event_, stream), "cudaEventRecord", where);
}

void CudaEvent::make_wait(cudaStream_t stream, const std::string &where) const {
  cuda_.check(cuda_.api().StreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent", where);
}

void CudaEvent::synchronize(const std::string &where) const {
  cuda_.check(cuda_.api().EventSynchronize(event_), "cudaEventSynchronize", where);
}

float CudaEvent::elapsed_ms_since(const CudaEvent &start, const std::string &where) const {
  float ms = 0.0f;
  cuda_.check(cuda_.api().EventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime", where);
  return ms;
}

DeviceBuffer::DeviceBuffer(const CudaLib &cuda, size_t bytes, const std::string &where) : cuda_(cuda) {
  cuda_.check(cuda_.api().Malloc(&ptr_, bytes), "cudaMalloc", where);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cuda_.api().Free(ptr_);
}

// ---- HostPointerCheck (declared in device_comm.hpp) ------------------------------------------

HostPointerCheck::~HostPointerCheck() {
  if (driver_ != nullptr) dlclose(driver_);
}

namespace {
// dl_iterate_phdr callback: the path of a loaded libcuda.so* into scan->path. The first call
// also reads the loader's count of objects ever loaded (dlpi_adds): when it equals the count of
// the last full scan, nothing was loaded since and the scan stops there (~30 ns instead of
// ~0.1 us for a walk over every object; a failed dlopen(RTLD_NOLOAD) searches the file system,
// ~20 us).
struct LibcudaScan {
  unsigned long long last_adds = 0;
  unsigned long long adds = 0;
  bool first = true;
  bool unchanged = false;
  std::string path;
};

int find_loaded_libcuda(struct dl_phdr_info *info, size_t size, void *data) {
  auto *scan = static_cast<LibcudaScan *>(data);
  if (scan->first) {
    scan->first = false;
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) {
      scan->adds = info->dlpi_adds;
      if (scan->adds == scan->last_adds) {
        scan->unchanged = true;
        return 1;
      }
    }
  }
  const char *name = info->dlpi_name;
  const char *slash = std::strrchr(name, '/');
  const char *base = slash != nullptr ? slash + 1 : name;
  if (std::strncmp(base, "libcuda.so", 10) != 0) return 0;
  scan->path = name;
  return 1;
}
}  // namespace

bool HostPointerCheck::find_driver() {
  if (driver_ != nullptr) return true;
  struct timespec now {};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const long long tick = static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
  if (tick == scanned_tick_) return false;  // scanned in this tick and found no driver
  scanned_tick_ = tick;
  LibcudaScan scan;
  scan.last_adds = scanned_adds_;
  dl_iterate_phdr(find_loaded_libcuda, &scan);
  if (scan.unchanged) return false;  // nothing loaded since the last scan found no driver
  scanned_adds_ = scan.adds;
  if (scan.path.empty()) return false;  // a process without CUDA: nothing to check
  void *h = dlopen(scan.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD | RTLD_NODELETE);
  if (h == nullptr) {
    dlerror();
    return false;
  }
  void *fn = dlsym(h, "cuPointerGetAttribute");
  if (fn == nullptr) {
    dlclose(h);
    return false;
  }
  driver_ = h;
  get_attribute_ = fn;
  return true;
}

void HostPointerCheck::require_host(const void *p, const char *name, const std::string &where) {
  if (p == nullptr || !find_driver()) return;
  auto get = reinterpret_cast<decltype(&::cuPointerGetAttribute)>(get_attribute_);
  auto addr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  unsigned int type = 0;
  // Host memory the driver does not know fails with CUDA_ERROR_INVALID_VALUE: accepted.
  if (get(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE)
    return;
  unsigned int managed = 0;
  if (get(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, addr) == CUDA_SUCCESS && managed != 0) return;
  int ordinal = -1;
  get(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, addr);
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, where, ": ", name, " (", p, ") is CUDA device memory (device ",
              ordinal, ") but this context is CPU: copy it to host memory, or create the context "
              "with device = PSTATE_DEVICE_CUDA");
}

}  // namespace pstate
