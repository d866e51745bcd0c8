// backend_status.cpp — cuda_backend_status(): what `pstate info` says about CUDA and NCCL here.
//
// It loads the CUDA runtime and NCCL the way a CUDA context would, asks for the device count,
// and reports each step's result or error text; the handles are dropped at the end (the
// libraries stay mapped: RTLD_NODELETE).
#include "common/error.hpp"
#include "transport/nccl/cuda_lib.hpp"
#include "transport/device_comm.hpp"
#include "transport/nccl/nccl_lib.hpp"

namespace pstate {

CudaBackendStatus cuda_backend_status() {
  CudaBackendStatus s;
  s.built = true;
  s.build = cat("built with CUDA ", CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10, " and NCCL ", NCCL_MAJOR,
                ".", NCCL_MINOR, ".", NCCL_PATCH, " headers");
  std::string why_not;
  try {
    auto cuda = CudaLib::load();
    s.cuda_runtime_loaded = true;
    s.cuda_runtime = cuda->describe();
    s.device_count = cuda->device_count();
  } catch (const std::exception &e) {
    if (s.cuda_runtime.empty()) s.cuda_runtime = e.what();
    why_not = e.what();
  }
  try {
    s.nccl = NcclLib::load()->describe();
    s.nccl_loaded = true;
  } catch (const std::exception &e) {
    s.nccl = e.what();
    if (why_not.empty()) why_not = e.what();
  }
  s.usable = why_not.empty();
  s.summary = s.usable ? cat("usable: ", s.device_count, " CUDA device(s)") : "not usable: " + why_not;
  return s;
}

}  // namespace pstate
