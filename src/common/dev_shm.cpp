// dev_shm.cpp — /dev/shm's free space and the advice given when it runs out (see the header).
#include "common/dev_shm.hpp"

#include "common/error.hpp"

#include <sys/statvfs.h>

#include <cstdio>

namespace pstate {

DevShmSpace dev_shm_space() {
  struct statvfs st {};
  DevShmSpace s;
  if (statvfs("/dev/shm", &st) != 0) return s;
  s.known = true;
  s.free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  s.total_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  return s;
}

std::string human_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024)
    std::snprintf(buf, sizeof buf, "%.0f KiB", static_cast<double>(bytes) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string dev_shm_advice(const DevShmSpace &space, const std::string &need) {
  std::string have = space.known ? cat("/dev/shm has ", human_bytes(space.free_bytes), " free of ",
                                       human_bytes(space.total_bytes))
                                 : std::string("/dev/shm cannot be read");
  return cat(have, "; ", need,
             ". Give the job more shared memory (docker run --shm-size=1g; Kubernetes: an emptyDir of medium "
             "Memory mounted at /dev/shm), or run without it: PSTATE_SHM=0 UCX_TLS=^posix (pstate's "
             "shared-memory collectives off, UCX over SysV shared memory and CMA; slower)");
}

}  // namespace pstate
