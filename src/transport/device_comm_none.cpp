// device_comm_none.cpp — the CUDA backend's entry points in a libpstate built without it.
//
// When CMake finds no CUDA toolkit headers, src/transport/nccl/ is left out of the build and
// these definitions take its place: asking for a CUDA context or an NCCL communicator is
// PSTATE_ERR_UNSUPPORTED with a message that says why, `pstate info` reports "not built", and
// the CPU-context device-pointer check has nothing to look with.
#ifndef PSTATE_HAVE_CUDA

#include "common/error.hpp"
#include "transport/device_comm.hpp"

namespace pstate {

namespace {
constexpr const char *kNotBuilt =
    "this libpstate was built without the CUDA backend (no CUDA toolkit headers at build time): rebuild "
    "with the toolkit installed (PSTATE_WITH_CUDA=ON), or use PSTATE_DEVICE_CPU";
}

CudaBackendStatus cuda_backend_status() {
  CudaBackendStatus s;
  s.build = "not built";
  s.summary = std::string("not usable: ") + kNotBuilt;
  return s;
}

std::unique_ptr<DeviceContext> make_cuda_device_context(const DeviceContextOptions &, const Logger &) {
  throw_error(PSTATE_ERR_UNSUPPORTED, kNotBuilt);
}

std::unique_ptr<DeviceComm> make_nccl_device_comm(DeviceContext &, DeviceCommOptions, const Logger &) {
  throw_error(PSTATE_ERR_UNSUPPORTED, kNotBuilt);
}

HostPointerCheck::~HostPointerCheck() = default;
bool HostPointerCheck::find_driver() {
  (void)scanned_adds_;
  return false;
}
void HostPointerCheck::require_host(const void *, const char *, const std::string &) {}

}  // namespace pstate

#endif  // PSTATE_HAVE_CUDA
