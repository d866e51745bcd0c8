// probe_cuda.cpp — can this host run a CUDA context? The CUDA driver is probed here (dlopen,
// cuInit, device count: what nvidia-smi would say); the CUDA runtime, NCCL and the verdict come
// from the backend's own cuda_backend_status(), which loads them exactly as pstate_init does for
// device = PSTATE_DEVICE_CUDA (the same candidates, PSTATE_NCCL_LIBRARY, the same messages).
#include "cli/probe.hpp"

#include "transport/device_comm.hpp"

#include <dlfcn.h>

#include <initializer_list>
#include <memory>
#include <string>

namespace pstate::cli {
namespace {

struct DlClose {
  void operator()(void *h) const { dlclose(h); }
};
using Library = std::unique_ptr<void, DlClose>;

// Opens the first of names that loads; on failure *why holds the first name's dlerror().
Library open_first(std::initializer_list<const char *> names, std::string *loaded, std::string *why) {
  for (const char *name : names) {
    if (void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      *loaded = name;
      return Library(h);
    }
    const char *err = dlerror();
    if (why->empty()) *why = err ? err : std::string(name) + ": cannot be loaded";
  }
  return nullptr;
}

template <typename Fn>
Fn symbol(const Library &lib, const char *name) {
  return reinterpret_cast<Fn>(dlsym(lib.get(), name));
}

std::string version_text(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string(v % major_div / minor_div);
}

Probe probe_driver() {
  Probe p{"CUDA driver", false, ""};
  std::string loaded;
  Library lib = open_first({"libcuda.so.1", "libcuda.so"}, &loaded, &p.detail);
  if (!lib) return p;
  auto init = symbol<int (*)(unsigned)>(lib, "cuInit");
  auto version = symbol<int (*)(int *)>(lib, "cuDriverGetVersion");
  auto count = symbol<int (*)(int *)>(lib, "cuDeviceGetCount");
  if (!init || !version || !count) {
    p.detail = loaded + " lacks cuInit/cuDriverGetVersion/cuDeviceGetCount";
    return p;
  }
  int v = 0, n = 0;
  version(&v);
  if (int rc = init(0); rc != 0) {
    p.detail = loaded + " (CUDA " + version_text(v, 1000, 10) + "): cuInit failed with CUresult " + std::to_string(rc);
    return p;
  }
  count(&n);
  p.usable = n > 0;
  p.detail = loaded + ", CUDA " + version_text(v, 1000, 10) + ", " + std::to_string(n) + " device(s)";
  return p;
}

}  // namespace

std::vector<Probe> probe_cuda() {
  std::vector<Probe> out{probe_driver()};
  CudaBackendStatus s = cuda_backend_status();
  if (s.built) {
    out.push_back({"CUDA runtime", s.cuda_runtime_loaded, s.cuda_runtime});
    out.push_back({"NCCL", s.nccl_loaded, s.nccl});
  }
  // The verdict: "usable: N CUDA device(s)" or "not usable: <every reason>".
  out.push_back({"CUDA context", s.usable, s.usable ? s.summary : s.summary.substr(s.summary.find(':') + 2)});
  return out;
}

}  // namespace pstate::cli
