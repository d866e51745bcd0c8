// host_cpus.hpp — how many CPUs the machine has online, for the wait policies of shared memory
// and UCX (spin or not). The machine's count, not the calling thread's affinity: a launcher that
// pins each rank to a core of its own leaves an affinity of one CPU, which is the opposite of
// oversubscribed.
//
// And whether this rank may spin at all: PSTATE_SPIN=0 says no. A rank cannot see that its CPUs
// are shared with another job (its affinity and the machine's count look the same as when it has
// them alone); its launcher can: `pstate run` sets PSTATE_SPIN=0 for ranks it could not give a CPU
// of their own (src/cli/cpu_claims.hpp), so that their waits yield and sleep at once instead of
// spinning on a CPU another job's rank needs.
#pragma once

#include "common/error.hpp"

#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace pstate {

inline int online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// False when PSTATE_SPIN=0: every wait of this rank skips its spin phase (shared memory and
// UCX alike); unset, empty or 1: the wait policies decide (spin where the ranks have a CPU each).
// Read where a policy is made (a worker, a group's first use), never per wait.
inline bool spinning_allowed() {
  const char *v = std::getenv("PSTATE_SPIN");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_SPIN='", v,
              "' is neither 0 (waits never spin: for ranks that share their CPUs with others) nor 1 (the default: "
              "waits spin where the ranks have a CPU each)");
}

}  // namespace pstate
