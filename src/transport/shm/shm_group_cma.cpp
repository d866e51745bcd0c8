// shm_group_cma.cpp — all_gatherv by reference: each rank copies its peers' parts straight out of
// their buffers (process_vm_readv), one copy instead of the staged protocol's two.
//
// Why: through the staging areas a part is copied twice (its owner stages it, every reader copies
// it out), and from 128 KiB to 2 MiB that left all_gatherv at 1.1-1.5x Open MPI here, whose vader
// moves large messages with this same single-copy system call (BENCHMARKS.md).
// shm_p2p.cpp does the same for point-to-point messages of 32 KiB and more.
//
// A call (its first step s; its arrival line is published first, as for every staged call):
//   1. my control block's ref_addr = where my part is (send; in place, my place in recv);
//      in = s (release: the address is visible with it);
//   2. my own part into recv (nothing in place); then, for every other rank j whose part is not
//      empty, from rank me + 1 on: wait in[j] >= s (its arrival line is checked first, so a peer
//      in another call or with other counts is a MISMATCH before anything is read) and read its
//      part from its address into recv;
//   3. done = s (finish_step verifies the peers not read); then wait until every peer's done >= s:
//      they have read my part, so the caller may reuse the buffer once this returns.
// Three hand-offs in all (arrival, in, done), against one per pipeline step staged; the payload
// crosses memory once.
//
// Who may. Every rank must be a process of its own (ranks as threads stage, for the reason
// shm_p2p.hpp gives: ThreadSanitizer could not pair a peer's reads of this thread's heap), which
// every rank sees alike in the pids the segment recorded at attach. And the kernel must let each
// rank read its peers: a ptrace policy (Yama), a seccomp filter or a container may refuse
// (EPERM, ENOSYS). A rank cannot know that alone, and all ranks must take the same protocol, so
// the group decides once, in its first call by reference: each rank makes the reads of that call,
// stores ref_ok (1: it read every peer, 2: a read failed, or PSTATE_SHM_CMA=0 made it refuse) and
// raises out = s; then every rank reads every peer's ref_ok. All 1: the group goes by reference
// from then on (this call is complete: every part was read, and every peer has finished reading
// mine since it raised out). Any 2: the group never goes by reference again, and this call goes
// on through the staging areas from step s + 1 (parts already read are written again, the same
// bytes). Later failures of a read (the peer died: ESRCH; a bad buffer on its side: EFAULT) fail
// the call like any other transport error.
//
// Off by default (ShmGroupOptions::cma_bytes; PSTATE_SHM_GATHERV_CMA_BYTES turns it on): on the
// reference VM, measured A/B against staging under the load of other jobs, it was 3-24% slower at
// 128 KiB-2 MiB (bench/analysis.md): the copy is not what costs there, the waits
// are, and this protocol ends every call with a wait for every reader.
#include "transport/shm/shm_group.hpp"
#include "transport/shm/shm_group_layout.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace pstate::shm {
namespace {

// Copies bytes at addr in process pid into dst; false with *err set when the kernel refuses or
// the read fails.
bool read_remote(pid_t pid, uint64_t addr, uint8_t *dst, size_t bytes, int *err) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{dst + done, bytes - done};
    iovec remote{reinterpret_cast<void *>(static_cast<uintptr_t>(addr + done)), bytes - done};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool ShmGroup::by_reference(size_t bytes) {
  if (bytes < options_.cma_bytes || cma_ == Cma::kOff) return false;
  if (cma_ == Cma::kUnknown) {  // ranks as threads share a pid: they stage
    for (int a = 0; a < size_ && cma_ != Cma::kOff; ++a)
      for (int b = a + 1; b < size_; ++b)
        if (peer_pid(a) == peer_pid(b) || peer_pid(a) <= 0) {
          cma_ = Cma::kOff;
          break;
        }
  }
  return cma_ != Cma::kOff;
}

bool ShmGroup::cma_read_peers(uint64_t step, uint8_t *recv, const size_t *counts, const size_t *offsets,
                              size_t esize, bool first, int *err, const Deadline &deadline) {
  for (int n = 1; n < size_; ++n) {
    const int j = (rank_ + n) % size_;
    const size_t bytes = counts[j] * esize;
    if (bytes == 0) continue;
    wait_counter(j, &Control::in, step, "to publish its part", deadline);
    const uint64_t addr = control(j).ref_addr.load(std::memory_order_relaxed);
    if (read_remote(peer_pid(j), addr, recv + offsets[j], bytes, err)) continue;
    if (first) return false;
    throw_error(*err == ESRCH ? PSTATE_ERR_PEER_LOST : PSTATE_ERR_TRANSPORT, options_.label, " rank ",
                global_rank(rank_), ": ", current_op_, " (step ", step, "): could not read the part of rank ",
                global_rank(j), " (group rank ", j, ", pid ", peer_pid(j), ", ", bytes, " bytes) from its memory: ",
                std::strerror(*err),
                *err == ESRCH ? " (the process is gone)"
                              : " (its buffer must stay valid until its call returns); the context must be aborted");
  }
  return true;
}

bool ShmGroup::cma_all_gatherv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                               size_t esize, const Deadline &deadline) {
  const uint64_t s = step_ + 1;  // the call's first step (its arrival line's); no staging area is used
  Control &mine = control(rank_);
  const bool first = cma_ == Cma::kUnknown;
  mine.ref_addr.store(reinterpret_cast<uintptr_t>(send), std::memory_order_relaxed);
  set_counter(&Control::in, s);
  const size_t own = counts[rank_] * esize;
  uint8_t *own_dst = recv + offsets[rank_];
  if (own != 0 && send != own_dst) std::memmove(own_dst, send, own);  // in place: already there
  if (!first) {
    int err = 0;
    cma_read_peers(s, recv, counts, offsets, esize, false, &err, deadline);
    finish_step(s);
    wait_done(s, deadline);  // every peer has read my part
    return true;
  }
  // The group's first call by reference: the reads tell whether the kernel allows them.
  int err = 0;
  const bool read_all = options_.cma_allowed && cma_read_peers(s, recv, counts, offsets, esize, true, &err, deadline);
  mine.ref_ok.store(read_all ? 1 : 2, std::memory_order_relaxed);
  set_counter(&Control::out, s);
  bool all = read_all;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    wait_counter(p, &Control::out, s, "to tell whether it could read its peers' memory", deadline);
    all = all && control(p).ref_ok.load(std::memory_order_relaxed) == 1;
  }
  cma_ = all ? Cma::kOn : Cma::kOff;
  finish_step(s);
  return all;  // not all: staged from step s + 1 (every read of step s is over: its reader raised out)
}

}  // namespace pstate::shm
