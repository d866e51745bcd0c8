// probe_cuda.cpp — can this host load CUDA and NCCL? dlopen each library, ask its version and
// device count, close it. Mirrors what libpstate does at pstate_init (libraries are loaded at run
// time, so one build runs with and without GPUs); the reasons are dlerror() or the CUDA error.
#include "cli/probe.hpp"

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

Probe probe_runtime() {
  Probe p{"CUDA runtime", false, ""};
  std::string loaded;
  Library lib = open_first({"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}, &loaded,
                           &p.detail);
  if (!lib) return p;
  auto version = symbol<int (*)(int *)>(lib, "cudaRuntimeGetVersion");
  auto count = symbol<int (*)(int *)>(lib, "cudaGetDeviceCount");
  auto error_string = symbol<const char *(*)(int)>(lib, "cudaGetErrorString");
  if (!version || !count || !error_string) {
    p.detail = loaded + " lacks cudaRuntimeGetVersion/cudaGetDeviceCount/cudaGetErrorString";
    return p;
  }
  int v = 0, n = 0;
  version(&v);
  std::string head = loaded + " (CUDA " + version_text(v, 1000, 10) + ")";
  if (int rc = count(&n); rc != 0) {
    p.detail = head + ": cudaGetDeviceCount: " + error_string(rc);
    return p;
  }
  p.usable = n > 0;
  p.detail = head + ", " + std::to_string(n) + " device(s)";
  return p;
}

Probe probe_nccl() {
  Probe p{"NCCL", false, ""};
  std::string loaded;
  Library lib = open_first({"libnccl.so.2", "libnccl.so"}, &loaded, &p.detail);
  if (!lib) return p;
  auto version = symbol<int (*)(int *)>(lib, "ncclGetVersion");
  if (!version) {
    p.detail = loaded + " lacks ncclGetVersion";
    return p;
  }
  int v = 0;
  version(&v);
  // NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH.
  p.usable = true;
  p.detail = loaded + ", NCCL " + std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
             std::to_string(v % 100);
  return p;
}

}  // namespace

std::vector<Probe> probe_cuda() { return {probe_driver(), probe_runtime(), probe_nccl()}; }

}  // namespace pstate::cli
