// devsim_cudart.cpp — a CUDA runtime stand-in on host memory: libpstate_devsim_cudart.so.
//
// The subset of the CUDA runtime that libpstate and tests/gpu resolve, with the semantics of the
// CUDA documentation where a caller could get them wrong:
//   - "device" memory is host memory this library registered (cudaMalloc), tagged with the
//     current device; cudaPointerGetAttributes (and cuPointerGetAttribute of the libcuda.so.1
//     stand-in beside this file) tell it apart from pageable host, pinned host and managed memory;
//   - every stream is an in-order queue run by its own worker thread: work enqueued on a stream is
//     not done until that worker ran it. The legacy default stream (one per device) synchronizes
//     with blocking streams of its device, as CUDA's does;
//   - capture: work enqueued on a capturing stream (or on a stream forked into the capture by an
//     event) is recorded, not run; cudaStreamEndCapture returns a graph that cudaGraphLaunch
//     replays in recording order, which respects every stream order and event dependency. A
//     synchronizing call (cudaMalloc, cudaFree, cudaMemcpy, cudaStreamSynchronize, cudaStreamQuery,
//     cudaEventSynchronize, cudaDeviceSynchronize) while a global-mode capture is active anywhere
//     in the process, or a thread-local one on this thread, fails with
//     cudaErrorStreamCaptureUnsupported and invalidates the capture; so does an uncaptured
//     cross-stream use (waiting on an event recorded outside the capture, legacy-stream work while
//     a blocking stream captures); EndCapture with a forked stream not joined back fails
//     (cudaErrorStreamCaptureUnjoined).
// Faults: DEVSIM_CUDA_MALLOC_FAIL (see tests/devsim/README.md). Nothing here knows pstate.
// Compiled with DEVSIM_NO_WORK (nowork/, for bench/device_call_cost.sh only), cudaMemcpyAsync
// returns cudaSuccess at once and copies nothing (what a group of one enqueues for an all_reduce),
// like that build's collectives; everything else is as above.
#include "devsim.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#define DEVSIM_API extern "C" __attribute__((visibility("default")))

namespace {

// ---- tasks, streams, captures ----------------------------------------------------------------

struct Body {
  void (*fn)(void *) = nullptr;
  void *arg = nullptr;
  void (*release)(void *) = nullptr;
  std::function<void()> local;  // tasks of this library
  ~Body() {
    if (release != nullptr) release(arg);
  }
  void run() {
    if (fn != nullptr)
      fn(arg);
    else if (local)
      local();
  }
};
using Task = std::shared_ptr<Body>;

Task make_task(std::function<void()> f) {
  auto t = std::make_shared<Body>();
  t->local = std::move(f);
  return t;
}

struct Capture;

struct Stream {
  int device = 0;
  bool legacy = false;
  bool blocking = true;  // syncs with the legacy stream (cudaStreamDefault)
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  uint64_t enqueued = 0;
  uint64_t done = 0;
  bool stopping = false;
  Capture *capture = nullptr;  // recording into this capture (origin or forked member)
};

struct Capture {
  unsigned long long id = 0;
  Stream *origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  bool invalid = false;
  std::vector<Task> tasks;
  std::set<Stream *> members;   // every stream recording into it
  std::set<Stream *> unjoined;  // forked streams the origin has not waited for since
};

struct GraphObj {
  std::vector<Task> tasks;
};

struct EventObj {
  unsigned flags = 0;
  Stream *stream = nullptr;  // last record outside capture
  uint64_t seq = 0;
  std::shared_ptr<std::atomic<double>> time_ms = std::make_shared<std::atomic<double>>(0.0);
  Capture *capture = nullptr;  // last record inside a capture
  Stream *capture_stream = nullptr;
};

struct Allocation {
  size_t size;
  int kind;  // 1 pinned host, 2 device, 3 managed
  int device;
};

// Everything, behind one mutex (this is a test double, not a fast runtime). Never freed: stream
// workers may still run while the process exits.
struct State {
  std::mutex mu;
  std::map<uintptr_t, Allocation> allocations;
  std::set<Stream *> streams;
  std::map<int, Stream *> legacy;
  std::set<Capture *> captures;
  std::vector<Stream *> destroyed;
  unsigned long long next_capture_id = 1;
  std::string malloc_fail_spec;  // DEVSIM_CUDA_MALLOC_FAIL value the counter belongs to
  unsigned long long malloc_calls = 0;
};
State *g = new State;

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int device_count() {
  const char *v = std::getenv("DEVSIM_DEVICE_COUNT");
  int n = v != nullptr ? std::atoi(v) : 8;
  return n;
}

cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

void worker_main(Stream *s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [s] { return !s->queue.empty() || s->stopping; });
    if (s->queue.empty()) break;
    Task t = s->queue.front();
    lock.unlock();
    t->run();
    t.reset();
    lock.lock();
    s->queue.pop_front();
    ++s->done;
    s->cv.notify_all();
  }
  // cudaStreamDestroy: the worker ends once the queued work is done; the object stays (in
  // State::destroyed) since events and other streams' waits may still name it.
}

Stream *new_stream(int device, bool blocking, bool legacy) {
  auto *s = new Stream;
  s->device = device;
  s->blocking = blocking;
  s->legacy = legacy;
  std::thread(worker_main, s).detach();
  return s;
}

// g->mu held.
Stream *legacy_stream_locked(int device) {
  auto it = g->legacy.find(device);
  if (it != g->legacy.end()) return it->second;
  Stream *s = new_stream(device, true, true);
  g->legacy[device] = s;
  return s;
}

// The stream a handle names; nullptr for a bad handle. g->mu held.
Stream *resolve_locked(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread)
    return legacy_stream_locked(t_device);
  auto *s = reinterpret_cast<Stream *>(handle);
  return g->streams.count(s) != 0 ? s : nullptr;
}

// Appends t to s's queue (not capturing). Returns the sequence number it completes.
uint64_t push(Stream *s, Task t) {
  std::lock_guard<std::mutex> lock(s->mu);
  s->queue.push_back(std::move(t));
  s->cv.notify_all();
  return ++s->enqueued;
}

uint64_t tail(Stream *s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->enqueued;
}

bool reached(Stream *s, uint64_t seq) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->done >= seq;
}

void wait_for(Stream *s, uint64_t seq) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->cv.wait(lock, [&] { return s->done >= seq; });
}

Task wait_task(Stream *s, uint64_t seq) {
  return make_task([s, seq] { wait_for(s, seq); });
}

void invalidate(Capture *c) {
  c->invalid = true;
}

// A call that is illegal during capture in this thread's view: invalidates every capture it
// concerns and returns true. g->mu held.
bool capture_forbids_locked() {
  bool hit = false;
  for (Capture *c : g->captures) {
    bool concerns = c->mode == cudaStreamCaptureModeGlobal ||
                    (c->mode == cudaStreamCaptureModeThreadLocal && c->thread == std::this_thread::get_id());
    if (concerns) {
      invalidate(c);
      hit = true;
    }
  }
  return hit;
}

// Enqueue in stream order, or record into the stream's capture. g->mu held.
cudaError_t enqueue_locked(Stream *s, Task t) {
  if (s->capture != nullptr) {
    if (s->capture->invalid) return cudaErrorStreamCaptureInvalidated;
    s->capture->tasks.push_back(std::move(t));
    return cudaSuccess;
  }
  if (s->legacy) {
    // Legacy-stream work waits for the blocking streams of its device, and cannot join a capture.
    for (Stream *o : g->streams) {
      if (o->device != s->device || !o->blocking) continue;
      if (o->capture != nullptr && o->capture->mode != cudaStreamCaptureModeRelaxed) {
        invalidate(o->capture);
        return cudaErrorStreamCaptureImplicit;
      }
      uint64_t seq = tail(o);
      if (!reached(o, seq)) push(s, wait_task(o, seq));
    }
  } else if (s->blocking) {
    Stream *l = legacy_stream_locked(s->device);
    uint64_t seq = tail(l);
    if (!reached(l, seq)) push(s, wait_task(l, seq));
  }
  push(s, std::move(t));
  return cudaSuccess;
}

// Waits (without g->mu) until every stream of `device` (-1: all) has drained.
void drain_device(int device) {
  std::vector<std::pair<Stream *, uint64_t>> marks;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    for (Stream *s : g->streams)
      if (device < 0 || s->device == device) marks.emplace_back(s, tail(s));
    for (auto &kv : g->legacy)
      if (device < 0 || kv.first == device) marks.emplace_back(kv.second, tail(kv.second));
  }
  for (auto &m : marks) wait_for(m.first, m.second);
}

// ---- memory ----------------------------------------------------------------------------------

// g->mu held. The allocation containing p, or end().
std::map<uintptr_t, Allocation>::iterator find_locked(const void *p) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = g->allocations.upper_bound(addr);
  if (it == g->allocations.begin()) return g->allocations.end();
  --it;
  if (addr >= it->first + (it->second.size == 0 ? 1 : it->second.size)) return g->allocations.end();
  return it;
}

bool malloc_should_fail_locked() {
  const char *v = std::getenv("DEVSIM_CUDA_MALLOC_FAIL");
  std::string spec = v != nullptr ? v : "";
  if (spec != g->malloc_fail_spec) {
    g->malloc_fail_spec = spec;
    g->malloc_calls = 0;
  }
  if (spec.empty()) return false;
  unsigned long long n = ++g->malloc_calls;
  if (spec == "all") return true;
  unsigned long long nth = std::strtoull(spec.c_str(), nullptr, 10);
  bool and_after = spec.back() == '+';
  return and_after ? n >= nth : n == nth;
}

cudaError_t allocate(void **ptr, size_t size, int kind, bool is_malloc) {
  if (ptr == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g->mu);
  *ptr = nullptr;
  if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
  if (is_malloc && malloc_should_fail_locked()) return ret(cudaErrorMemoryAllocation);
  size_t rounded = (size + 255) / 256 * 256;
  void *p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  if (p == nullptr) return ret(cudaErrorMemoryAllocation);
  std::memset(p, 0xA5, rounded == 0 ? 256 : rounded);  // uninitialized device memory is not zero
  g->allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{size, kind, kind == 1 ? -1 : t_device};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t release(void *p, int kind) {
  if (p == nullptr) return cudaSuccess;
  int device = 0;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
    auto it = g->allocations.find(reinterpret_cast<uintptr_t>(p));
    bool ok = it != g->allocations.end() && (kind == 1 ? it->second.kind == 1 : it->second.kind != 1);
    if (!ok) return ret(cudaErrorInvalidValue);
    device = it->second.kind == 1 ? t_device : it->second.device;
  }
  drain_device(device);  // cudaFree synchronizes the device
  std::lock_guard<std::mutex> lock(g->mu);
  g->allocations.erase(reinterpret_cast<uintptr_t>(p));
  std::free(p);
  return cudaSuccess;
}

// Checks that [p, p+n) is memory a copy of `kind` may touch on the given side. g->mu held.
bool range_ok_locked(const void *p, size_t n, bool device_side) {
  auto it = find_locked(p);
  if (it == g->allocations.end()) return !device_side;
  auto addr = reinterpret_cast<uintptr_t>(p);
  if (addr + n > it->first + it->second.size) return false;  // past the allocation
  if (device_side) return it->second.kind != 1;
  return it->second.kind != 2;
}

// Copies between device memory and pageable host memory are synchronous with respect to the host,
// as CUDA's are: the stream's earlier work finishes first, the pageable buffer is read (or
// written) before the call returns, so the caller may reuse it at once. Everything else is
// enqueued.
cudaError_t copy_async(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t handle) {
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return ret(cudaErrorInvalidValue);
  Stream *s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    s = resolve_locked(handle);
    if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
    bool dst_device = false, src_device = false, check = true;
    switch (kind) {
      case cudaMemcpyHostToHost:
        break;
      case cudaMemcpyHostToDevice:
        dst_device = true;
        break;
      case cudaMemcpyDeviceToHost:
        src_device = true;
        break;
      case cudaMemcpyDeviceToDevice:
        dst_device = src_device = true;
        break;
      default:
        check = false;
        break;  // cudaMemcpyDefault: any registered or host memory
    }
    if (check && (!range_ok_locked(dst, n, dst_device) || !range_ok_locked(src, n, src_device)))
      return ret(cudaErrorInvalidValue);
    auto kind_of = [](const void *p, size_t len, int *k) {
      auto it = find_locked(p);
      *k = it == g->allocations.end() ? 0 : it->second.kind;
      return it == g->allocations.end() || reinterpret_cast<uintptr_t>(p) + len <= it->first + it->second.size;
    };
    int dk = 0, sk = 0;
    if (!kind_of(dst, n, &dk) || !kind_of(src, n, &sk)) return ret(cudaErrorInvalidValue);
    bool pageable = (dk == 0 && (sk == 2 || sk == 3)) || (sk == 0 && (dk == 2 || dk == 3));
    if (!pageable || s->capture != nullptr)
      return ret(enqueue_locked(s, make_task([dst, src, n] { std::memmove(dst, src, n); })));
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
    seq = tail(s);
  }
  wait_for(s, seq);
  std::memmove(dst, src, n);
  return cudaSuccess;
}

// Enqueues a marker on s and waits for it (synchronous calls on the legacy stream).
cudaError_t enqueue_and_wait(cudaStream_t handle, std::function<void()> f) {
  Stream *s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
    s = resolve_locked(handle);
    cudaError_t e = enqueue_locked(s, make_task(std::move(f)));
    if (e != cudaSuccess) return ret(e);
    seq = tail(s);
  }
  wait_for(s, seq);
  return cudaSuccess;
}

// After fork the child has none of the parent's worker threads: start afresh (the parent's
// streams are gone in the child, as with CUDA, which does not survive fork at all).
void lock_for_fork() {
  g->mu.lock();
}
void unlock_after_fork_parent() {
  g->mu.unlock();
}
void reset_after_fork_child() {
  State *old = g;
  g = new State;
  g->allocations = old->allocations;  // the memory was copied with the process
  // `old` leaks: its mutex is held and its streams have no workers here.
}

// The driver entry (cuPointerGetAttribute) is looked up in a loaded libcuda.so.1, as with the
// real runtime, which loads the driver on its first call: load the stand-in beside this file.
void load_driver_stand_in() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&load_driver_stand_in), &info) == 0 || info.dli_fname == nullptr) return;
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/libcuda.so.1";
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE) == nullptr) dlerror();
}

__attribute__((constructor)) void init_stand_in() {
  pthread_atfork(lock_for_fork, unlock_after_fork_parent, reset_after_fork_child);
  load_driver_stand_in();
}

struct ErrorText {
  cudaError_t e;
  const char *name;
  const char *text;
};
const ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation is not permitted in the current state"},
};

}  // namespace

// ---- exported to the other stand-ins ---------------------------------------------------------

DEVSIM_API int devsim_pointer_info(const void *p, int *kind, int *device, uintptr_t *base, size_t *size) {
  std::lock_guard<std::mutex> lock(g->mu);
  auto it = find_locked(p);
  if (it == g->allocations.end()) {
    *kind = 0;
    *device = -1;
    *base = 0;
    *size = 0;
    return 0;
  }
  *kind = it->second.kind;
  *device = it->second.device;
  *base = it->first;
  *size = it->second.size;
  return 0;
}

DEVSIM_API int devsim_stream_enqueue(void *stream, void (*fn)(void *), void *arg, void (*rel)(void *), int *recorded) {
  auto t = std::make_shared<Body>();
  t->fn = fn;
  t->arg = arg;
  t->release = rel;
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(static_cast<cudaStream_t>(stream));
  if (s == nullptr) return cudaErrorInvalidResourceHandle;  // t releases arg
  if (recorded != nullptr) *recorded = s->capture != nullptr ? 1 : 0;
  return enqueue_locked(s, std::move(t));
}

DEVSIM_API int devsim_stream_capturing(void *stream) {
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(static_cast<cudaStream_t>(stream));
  return s != nullptr && s->capture != nullptr ? 1 : 0;
}

DEVSIM_API int devsim_stream_device(void *stream) {
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(static_cast<cudaStream_t>(stream));
  return s != nullptr ? s->device : -1;
}

// ---- devices and errors ----------------------------------------------------------------------

DEVSIM_API cudaError_t cudaGetDeviceCount(int *count) {
  if (count == nullptr) return ret(cudaErrorInvalidValue);
  *count = device_count();
  if (*count <= 0) return ret(cudaErrorNoDevice);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaGetDevice(int *device) {
  if (device == nullptr) return ret(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

static int compute_capability(bool major) {
  const char *v = std::getenv("DEVSIM_COMPUTE_CAPABILITY");  // "9.0"
  int ma = 9, mi = 0;
  if (v != nullptr) std::sscanf(v, "%d.%d", &ma, &mi);
  return major ? ma : mi;
}

DEVSIM_API cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return ret(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = compute_capability(true);
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = compute_capability(false);
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = 132;
      break;
    case cudaDevAttrPciBusId:
      *value = 0x10 + device;
      break;
    case cudaDevAttrPciDeviceId:
      *value = 0;
      break;
    case cudaDevAttrPciDomainId:
      *value = 0;
      break;
    default:
      *value = 0;
      break;
  }
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (prop == nullptr) return ret(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "devsim (host memory stand-in) %d", device);
  prop->major = compute_capability(true);
  prop->minor = compute_capability(false);
  prop->totalGlobalMem = size_t{1} << 34;
  prop->multiProcessorCount = 132;
  prop->pciBusID = 0x10 + device;
  prop->warpSize = 32;
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
  if (bus == nullptr || len <= 0) return ret(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
  std::snprintf(bus, static_cast<size_t>(len), "0000:%02x:00.0", 0x10 + device);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaRuntimeGetVersion(int *v) {
  if (v == nullptr) return ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaDriverGetVersion(int *v) {
  if (v == nullptr) return ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

DEVSIM_API const char *cudaGetErrorName(cudaError_t e) {
  for (const auto &t : kErrors)
    if (t.e == e) return t.name;
  return "cudaErrorUnknown";
}

DEVSIM_API const char *cudaGetErrorString(cudaError_t e) {
  for (const auto &t : kErrors)
    if (t.e == e) return t.text;
  return "unrecognized error code";
}

DEVSIM_API cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

DEVSIM_API cudaError_t cudaPeekAtLastError(void) {
  return t_last_error;
}

DEVSIM_API cudaError_t cudaDeviceSynchronize(void) {
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
  }
  drain_device(t_device);
  return cudaSuccess;
}

// ---- memory ----------------------------------------------------------------------------------

DEVSIM_API cudaError_t cudaMalloc(void **ptr, size_t size) {
  return allocate(ptr, size, 2, true);
}
DEVSIM_API cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return allocate(ptr, size, 1, false);
}
DEVSIM_API cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int) {
  return allocate(ptr, size, 1, false);
}
DEVSIM_API cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int) {
  return allocate(ptr, size, 3, false);
}
DEVSIM_API cudaError_t cudaFree(void *p) {
  return release(p, 2);
}
DEVSIM_API cudaError_t cudaFreeHost(void *p) {
  return release(p, 1);
}

DEVSIM_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *p) {
  if (attr == nullptr) return ret(cudaErrorInvalidValue);
  std::memset(attr, 0, sizeof *attr);
  std::lock_guard<std::mutex> lock(g->mu);
  auto it = find_locked(p);
  attr->device = -1;
  if (it == g->allocations.end()) {
    attr->type = cudaMemoryTypeUnregistered;  // CUDA >= 11: unknown pointers are not an error
    return cudaSuccess;
  }
  const Allocation &a = it->second;
  attr->type = a.kind == 1 ? cudaMemoryTypeHost : a.kind == 2 ? cudaMemoryTypeDevice : cudaMemoryTypeManaged;
  attr->device = a.kind == 1 ? t_device : a.device;
  attr->devicePointer = a.kind == 1 ? nullptr : const_cast<void *>(p);
  attr->hostPointer = a.kind == 2 ? nullptr : const_cast<void *>(p);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
#ifdef DEVSIM_NO_WORK
  if (dst != nullptr && src != nullptr) return cudaSuccess;
#endif
  return copy_async(dst, src, n, kind, s);
}

DEVSIM_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
  }
  cudaError_t e = copy_async(dst, src, n, kind, nullptr);
  if (e != cudaSuccess) return e;
  return enqueue_and_wait(nullptr, [] {});
}

DEVSIM_API cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t handle) {
  if (n == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g->mu);
  if (!range_ok_locked(p, n, true)) return ret(cudaErrorInvalidValue);
  Stream *s = resolve_locked(handle);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  return ret(enqueue_locked(s, make_task([p, value, n] { std::memset(p, value, n); })));
}

DEVSIM_API cudaError_t cudaMemset(void *p, int value, size_t n) {
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
  }
  cudaError_t e = cudaMemsetAsync(p, value, n, nullptr);
  if (e != cudaSuccess) return e;
  return enqueue_and_wait(nullptr, [] {});
}

// ---- streams -----------------------------------------------------------------------------------

DEVSIM_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
  if (out == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = new_stream(t_device, (flags & cudaStreamNonBlocking) == 0, false);
  g->streams.insert(s);
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaStreamCreate(cudaStream_t *out) {
  return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}

DEVSIM_API cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  std::lock_guard<std::mutex> lock(g->mu);
  auto *s = reinterpret_cast<Stream *>(handle);
  if (g->streams.count(s) == 0) return ret(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr) invalidate(s->capture);
  g->streams.erase(s);
  g->destroyed.push_back(s);
  std::lock_guard<std::mutex> slock(s->mu);
  s->stopping = true;  // the worker finishes the queue, then frees the stream
  s->cv.notify_all();
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  Stream *s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    s = resolve_locked(handle);
    if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
    if (s->capture != nullptr) {
      invalidate(s->capture);
      return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
    seq = tail(s);
  }
  wait_for(s, seq);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaStreamQuery(cudaStream_t handle) {
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(handle);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr) {
    invalidate(s->capture);
    return ret(cudaErrorStreamCaptureUnsupported);
  }
  return reached(s, tail(s)) ? cudaSuccess : cudaErrorNotReady;
}

DEVSIM_API cudaError_t cudaStreamIsCapturing(cudaStream_t handle, cudaStreamCaptureStatus *status) {
  if (status == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(handle);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (s->legacy) {
    // Asking about the legacy stream while a blocking stream captures is itself an implicit
    // dependency (CUDA: cudaErrorStreamCaptureImplicit).
    for (Stream *o : g->streams)
      if (o->device == s->device && o->blocking && o->capture != nullptr &&
          o->capture->mode != cudaStreamCaptureModeRelaxed) {
        invalidate(o->capture);
        return ret(cudaErrorStreamCaptureImplicit);
      }
  }
  *status = s->capture == nullptr ? cudaStreamCaptureStatusNone
            : s->capture->invalid ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t handle, cudaStreamCaptureStatus *status,
                                                unsigned long long *id, cudaGraph_t *graph,
                                                const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                                size_t *ndeps) {
  cudaError_t e = cudaStreamIsCapturing(handle, status);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(handle);
  if (id != nullptr) *id = s->capture != nullptr ? s->capture->id : 0;
  if (graph != nullptr) *graph = nullptr;
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (ndeps != nullptr) *ndeps = 0;
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaStreamBeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode) {
  std::lock_guard<std::mutex> lock(g->mu);
  if (handle == nullptr || handle == cudaStreamLegacy) return ret(cudaErrorStreamCaptureUnsupported);
  Stream *s = resolve_locked(handle);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr) return ret(cudaErrorIllegalState);
  auto *c = new Capture;
  c->id = g->next_capture_id++;
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->members.insert(s);
  s->capture = c;
  g->captures.insert(c);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t *graph) {
  if (graph == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g->mu);
  *graph = nullptr;
  Stream *s = resolve_locked(handle);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  Capture *c = s->capture;
  if (c == nullptr) return ret(cudaErrorIllegalState);
  if (c->origin != s) {
    invalidate(c);
    return ret(cudaErrorStreamCaptureUnmatched);
  }
  if (c->mode == cudaStreamCaptureModeThreadLocal && c->thread != std::this_thread::get_id())
    return ret(cudaErrorStreamCaptureWrongThread);
  cudaError_t e = cudaSuccess;
  if (c->invalid)
    e = cudaErrorStreamCaptureInvalidated;
  else if (!c->unjoined.empty())
    e = cudaErrorStreamCaptureUnjoined;
  for (Stream *m : c->members) m->capture = nullptr;
  g->captures.erase(c);
  if (e == cudaSuccess) {
    auto *graph_obj = new GraphObj;
    graph_obj->tasks = std::move(c->tasks);
    *graph = reinterpret_cast<cudaGraph_t>(graph_obj);
  }
  delete c;
  return ret(e);
}

// ---- events ------------------------------------------------------------------------------------

DEVSIM_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags) {
  if (out == nullptr) return ret(cudaErrorInvalidValue);
  auto *e = new EventObj;
  e->flags = flags;
  *out = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaEventCreate(cudaEvent_t *out) {
  return cudaEventCreateWithFlags(out, cudaEventDefault);
}

DEVSIM_API cudaError_t cudaEventDestroy(cudaEvent_t handle) {
  if (handle == nullptr) return ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(g->mu);
  delete reinterpret_cast<EventObj *>(handle);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t stream) {
  if (handle == nullptr) return ret(cudaErrorInvalidResourceHandle);
  auto *e = reinterpret_cast<EventObj *>(handle);
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr) {
    if (s->capture->invalid) return ret(cudaErrorStreamCaptureInvalidated);
    e->capture = s->capture;
    e->capture_stream = s;
    return cudaSuccess;
  }
  e->capture = nullptr;
  auto time = e->time_ms;
  cudaError_t r = enqueue_locked(s, make_task([time] { time->store(now_ms()); }));
  if (r != cudaSuccess) return ret(r);
  e->stream = s;
  e->seq = tail(s);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t handle, unsigned int) {
  if (handle == nullptr) return ret(cudaErrorInvalidResourceHandle);
  auto *e = reinterpret_cast<EventObj *>(handle);
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (e->capture != nullptr && g->captures.count(e->capture) != 0) {
    Capture *c = e->capture;
    if (s->capture == nullptr) {  // fork: s joins the capture
      s->capture = c;
      c->members.insert(s);
      c->unjoined.insert(s);
    } else if (s->capture != c) {
      invalidate(c);
      invalidate(s->capture);
      return ret(cudaErrorStreamCaptureMerge);
    } else if (s == c->origin) {
      c->unjoined.erase(e->capture_stream);  // join
    }
    return cudaSuccess;
  }
  if (s->capture != nullptr) {
    // A dependency on work outside the capture cannot be recorded into it.
    invalidate(s->capture);
    return ret(cudaErrorStreamCaptureIsolation);
  }
  if (e->stream == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  Stream *src = e->stream;
  uint64_t seq = e->seq;
  if (reached(src, seq)) return cudaSuccess;
  return ret(enqueue_locked(s, wait_task(src, seq)));
}

DEVSIM_API cudaError_t cudaEventSynchronize(cudaEvent_t handle) {
  if (handle == nullptr) return ret(cudaErrorInvalidResourceHandle);
  auto *e = reinterpret_cast<EventObj *>(handle);
  Stream *s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (capture_forbids_locked()) return ret(cudaErrorStreamCaptureUnsupported);
    s = e->stream;
    seq = e->seq;
  }
  if (s != nullptr) wait_for(s, seq);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaEventQuery(cudaEvent_t handle) {
  if (handle == nullptr) return ret(cudaErrorInvalidResourceHandle);
  auto *e = reinterpret_cast<EventObj *>(handle);
  std::lock_guard<std::mutex> lock(g->mu);
  if (e->stream == nullptr) return cudaSuccess;
  return reached(e->stream, e->seq) ? cudaSuccess : cudaErrorNotReady;
}

DEVSIM_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return ret(cudaErrorInvalidValue);
  auto *a = reinterpret_cast<EventObj *>(start);
  auto *b = reinterpret_cast<EventObj *>(end);
  if ((a->flags & cudaEventDisableTiming) != 0 || (b->flags & cudaEventDisableTiming) != 0)
    return ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(g->mu);
  if (a->stream == nullptr || b->stream == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (!reached(a->stream, a->seq) || !reached(b->stream, b->seq)) return ret(cudaErrorNotReady);
  *ms = static_cast<float>(b->time_ms->load() - a->time_ms->load());
  return cudaSuccess;
}

// ---- graphs ------------------------------------------------------------------------------------

DEVSIM_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return ret(cudaErrorInvalidValue);
  auto *copy = new GraphObj(*reinterpret_cast<GraphObj *>(graph));
  *exec = reinterpret_cast<cudaGraphExec_t>(copy);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return ret(cudaErrorInvalidValue);
  auto *graph = reinterpret_cast<GraphObj *>(exec);
  std::lock_guard<std::mutex> lock(g->mu);
  Stream *s = resolve_locked(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  std::vector<Task> tasks = graph->tasks;
  return ret(enqueue_locked(s, make_task([tasks] {
                              for (const Task &t : tasks) t->run();
                            })));
}

DEVSIM_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<GraphObj *>(exec);
  return cudaSuccess;
}

DEVSIM_API cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<GraphObj *>(graph);
  return cudaSuccess;
}
