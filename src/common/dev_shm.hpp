// dev_shm.hpp — what /dev/shm has room for, and what to say when it has too little.
//
// Both shared-memory users of a rank need /dev/shm: UCX's posix transport (about 4 MiB per worker)
// and pstate's own segments (src/transport/shm). Containers often give it little (Docker: 64 MiB),
// and the failures look unrelated ("No resources are available", or a SIGBUS when a page of an
// ftruncated segment cannot be backed). These helpers let both name the cause and the fixes.
#pragma once

#include <cstdint>
#include <string>

namespace pstate {

struct DevShmSpace {
  bool known = false;  // statvfs("/dev/shm") worked
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

DevShmSpace dev_shm_space();

// "/dev/shm has 1.0 MiB free of 1.0 MiB; NEED. Give the job more shared memory (docker run
// --shm-size=1g; Kubernetes: an emptyDir of medium Memory at /dev/shm), or run without it:
// PSTATE_SHM=0 UCX_TLS=^posix (pstate's shared-memory collectives off, UCX over SysV shared memory
// and CMA; slower)". `need` says what was asked for ("UCX's shared-memory transport needs about 4
// MiB per rank").
std::string dev_shm_advice(const DevShmSpace &space, const std::string &need);

// Bytes as "1.0 MiB" / "512 KiB" / "12 B".
std::string human_bytes(uint64_t bytes);

}  // namespace pstate
