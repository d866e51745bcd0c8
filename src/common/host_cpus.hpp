// host_cpus.hpp — how many CPUs the machine has online, for the wait policies of shared memory
// and UCX (spin or not). The machine's count, not the calling thread's affinity: a launcher that
// pins each rank to a core of its own leaves an affinity of one CPU, which is the opposite of
// oversubscribed.
#pragma once

#include <unistd.h>

namespace pstate {

inline int online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace pstate
