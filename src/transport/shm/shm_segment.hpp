// shm_segment.hpp — one POSIX shared-memory segment shared by the ranks of a group on one host.
//
// Creation protocol (collective: every rank of the group constructs its ShmSegment):
//   1. the creator rank shm_open(O_CREAT|O_EXCL)s the caller's name (a stale segment of that exact
//      name, left by a crashed earlier job, is removed first), ftruncates it, fills the header and
//      publishes a magic number with release semantics;
//   2. the other ranks retry shm_open until the name exists and carries the magic (sleeping with
//      backoff, bounded by the Deadline, calling the liveness check), then check that the header
//      agrees with what they expect (bytes, group size, layout) — otherwise PSTATE_ERR_MISMATCH;
//   3. every rank records its pid (and ORs its attach_flags) in the header and increments the attach counter; the rank that
//      completes it shm_unlink()s the name and raises the "unlinked" flag; every rank returns only
//      once that flag is up.
// So when any constructor returns, nothing is left in /dev/shm: the memory lives only as long as
// some rank maps it, and a SIGKILLed rank leaks nothing. A constructor that fails (timeout, dead
// peer, mismatch) unlinks the name itself before throwing, for the same reason.
//
// The name must be unique to this job instance and group ("/pstate-<job nonce>-<group>"): two
// concurrent groups with one name would meet in one segment.
#pragma once

#include "common/deadline.hpp"
#include "transport/shm/shm_wait.hpp"

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pstate::shm {

class ShmSegment {
 public:
  struct Params {
    std::string name;         // POSIX shm name, starts with '/', no other '/'
    std::string label;        // for messages, e.g. "shm group tp:0"
    int rank = 0;             // this rank, 0 <= rank < size
    int size = 1;             // ranks that attach
    int creator = 0;          // the rank that creates the segment
    size_t payload_bytes = 0; // usable bytes after the header (page-aligned start)
    uint64_t layout_tag = 0;  // a hash of the layout parameters: ranks must agree on it
    uint32_t attach_flags = 0;  // OR-ed over all ranks at attach: see group_flags()
  };
  // Bits of attach_flags used in this folder.
  static constexpr uint32_t kNoAsymmetricFence = 1;  // this rank could not register for membarrier

  // Collective; see the protocol above. Throws TIMEOUT, PEER_LOST (from the waiter's liveness
  // check), MISMATCH (header disagrees, rank attached twice), TRANSPORT (a system call failed).
  ShmSegment(const Params &params, const Deadline &deadline, ShmWaiter &waiter);
  ~ShmSegment();
  ShmSegment(const ShmSegment &) = delete;
  ShmSegment &operator=(const ShmSegment &) = delete;

  uint8_t *payload() const { return base_ + payload_offset_; }
  size_t payload_bytes() const { return params_.payload_bytes; }
  size_t mapped_bytes() const { return total_bytes(); }
  // The OR of every rank's Params::attach_flags (valid once the constructor returned): how ranks
  // agree on a capability without another round.
  uint32_t group_flags() const;
  // The pid each rank recorded when it attached (valid once the constructor returned).
  pid_t pid_of(int rank) const;
  const std::string &name() const { return params_.name; }

  // shm_unlink(name), ignoring "does not exist": for abort paths that want to be sure.
  static void unlink_quietly(const std::string &name);

 private:
  struct Header;
  Header *header() const { return reinterpret_cast<Header *>(base_); }
  size_t header_bytes() const;
  std::atomic<int32_t> *pid_slot(int rank) const;
  size_t total_bytes() const { return payload_offset_ + params_.payload_bytes; }

  void create();
  void open_existing(const Deadline &deadline, ShmWaiter &waiter);
  bool try_open_ready();
  void check_header() const;
  void attach_and_wait(const Deadline &deadline, ShmWaiter &waiter);
  void map(int fd, size_t bytes);
  void unmap();

  Params params_;
  size_t payload_offset_ = 0;
  uint8_t *base_ = nullptr;
  size_t mapped_ = 0;
};

}  // namespace pstate::shm
