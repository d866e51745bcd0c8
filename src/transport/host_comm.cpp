// host_comm.cpp — the Explainer's log line (the rest of the seam is the interface alone).
#include "transport/host_comm.hpp"

namespace pstate {

void Explainer::log_choice(OpKind op, const char *algorithm, size_t bytes) {
  // Two bits per operation kind: the first and (when it differs) a second algorithm seen.
  uint64_t bit = uint64_t{1} << (2 * (static_cast<unsigned>(op) - 1));
  if (logged_ & bit) {
    if (logged_ & (bit << 1)) return;
    bit <<= 1;
  }
  logged_ |= bit;
  log_.info(name_, " ", op_kind_name(op), ": ", bytes, " B on ", size_, " ranks -> ", algorithm);
}

}  // namespace pstate
