// probe.hpp — what `pstate info` asks of this host: which UCX transports and which CUDA/NCCL
// libraries can be used here. Read-only probes: nothing is left open or initialised for good.
#pragma once

#include <string>
#include <vector>

namespace pstate::cli {

// One library or transport, and whether it can be used on this host.
struct Probe {
  std::string what;    // "CUDA runtime", "NCCL", "tcp"
  bool usable = false;
  std::string detail;  // version and devices when usable; why not otherwise
};

// UCX library version (ucp_get_version) and one Probe per UCT transport with its devices.
std::string ucx_library_version();
std::vector<Probe> probe_ucx_transports();

// CUDA driver, CUDA runtime and NCCL: dlopen'ed here, as libpstate does at run time. One
// function so the CUDA/NCCL loader of src/transport/nccl/ can replace it.
std::vector<Probe> probe_cuda();

}  // namespace pstate::cli
