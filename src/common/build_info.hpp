// build_info.hpp — how this copy of libpstate was built, for `pstate info` and bug reports.
//
// Lives in the library (not the CLI) because only the library's objects see the build's private
// definitions (PSTATE_BUILD_TYPE); every field is fixed at compile time.
#pragma once

#include <string>

namespace pstate {

struct BuildInfo {
  std::string version;       // "0.1.0"
  int abi_major;             // PSTATE_ABI_MAJOR
  std::string build_type;    // CMAKE_BUILD_TYPE: "RelWithDebInfo", ...
  std::string compiler;      // "g++ 12.2.0"
  std::string options;       // "assertions off, sanitizers none, ..."
  bool cuda_backend;         // built with PSTATE_HAVE_CUDA (CUDA/NCCL headers found at configure)
  std::string ucx_headers;   // UCX version of the headers compiled against, "1.13.1"
};

BuildInfo build_info();

}  // namespace pstate
