// call_position.hpp — where one group's collectives stand on this rank, for failure notices:
// a rank that fails tells its peers how many calls of each group it had returned from, so a peer
// still inside one of those calls completes it instead of taking the notice as its verdict (one
// verdict per call). The group layer keeps one per group; the UCX worker's notices carry and read
// them (UcxWorker::Notice::decides).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace pstate {

// Where one group's collectives stand on this rank (pstate_group_s keeps one; failure notices
// carry the sender's and read the receiver's). `begun` is the next call's sequence number, so the
// call in flight, if any, is begun - 1; `returned` counts the calls that returned, whatever their
// verdict, and is atomic because Context::fail reads every group's from the failing thread.
struct CallPosition {
  uint32_t group_id = 0;
  std::vector<int> members;  // world ranks of the group, in group order
  uint32_t begun = 0;
  std::atomic<uint32_t> returned{0};
  bool in_call() const { return returned.load(std::memory_order_relaxed) != begun; }
};

}  // namespace pstate
