// shm_group.hpp — collectives for a group whose ranks share a host, over one shared segment.
//
// Each rank owns `pipeline_depth` staging areas of `chunk_bytes` in the group's ShmSegment and a
// control block of three monotonically increasing step counters (in, out, done) plus a futex word.
// A collective is cut into steps of at most one area; the group's step counter advances the same
// way on every rank (every rank makes the same calls), and step s uses area s % depth. Every
// counter is written only by its owner (release) and read by peers (acquire), so there are no
// locks and no read-modify-write on shared data except the wake-up word.
//
// all_reduce, large (more than small_bytes): the chunk of step s is split into size() slices,
// slice j being reduced by rank j alone:
//   1. publish: copy my input for every other rank's slice into my area; in[me] = s;
//   2. reduce : for k = 0..size-1 in that order, wait in[k] >= s and fold rank k's slice-me input
//               (my own straight from my send buffer) into my area's slice `me`; AVG divides once
//               there; out[me] = s;
//   3. gather : for every rank j, wait out[j] >= s and copy its slice j into my recv; done[me] = s.
// The publish of step s+1 is issued before the gather of step s (software pipelining), so while
// a slow peer finishes its reduction this rank is already staging the next chunk. An area is
// rewritten at step s+depth only after every peer's done >= s. Each slice is reduced by one rank
// in the fixed order 0..size-1, so all ranks get the same bits.
// all_reduce, small: one hand-off instead of two: everyone publishes its whole input, then each
// rank folds all inputs 0..size-1 itself (same order, same kernels: the same bits everywhere).
// all_gather, reduce_scatter and broadcast use the same publish/wait/copy steps; barrier is a
// step with no data.
//
// Failures: every wait is bounded by the call's Deadline (PSTATE_ERR_TIMEOUT) and calls the
// liveness check of Options (PSTATE_ERR_PEER_LOST). After any failure the group is broken and
// every further call throws PSTATE_ERR_ABORTED (peers are at unknown steps). Reductions use
// src/reduce/reduce.hpp; dtypes that cannot be reduced (fp8) give PSTATE_ERR_UNSUPPORTED.
//
// Threads: one thread drives a ShmGroup at a time; different ShmGroups are independent (N ranks
// may be N threads of one process, each with its own ShmGroup on the same name).
#pragma once

#include "common/deadline.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/shm/shm_wait.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace pstate::shm {

struct ShmGroupOptions {
  std::string label = "shm group";  // names the group in every message ("tp:0")
  size_t chunk_bytes = 256 * 1024;  // bytes of one staging area (rounded up to a page)
  int pipeline_depth = 4;           // staging areas per rank (>= 2)
  size_t small_bytes = 16 * 1024;   // all_reduce up to this size: one-hand-off algorithm
  WaitOptions wait;                 // spin/yield/futex policy (-1s resolved per machine)
  std::function<void()> liveness;   // throws PSTATE_ERR_PEER_LOST when a peer is gone; may be empty
};

class ShmGroup {
 public:
  // Collective over the `size` ranks: rank 0 creates the segment `name` (see shm_segment.hpp for
  // the protocol and naming rule), the others open it; returns when all attached and the name is
  // already unlinked. Ranks must pass the same size and options (else PSTATE_ERR_MISMATCH).
  ShmGroup(const std::string &name, int rank, int size, const Deadline &deadline, ShmGroupOptions options = {});
  ~ShmGroup();
  ShmGroup(const ShmGroup &) = delete;
  ShmGroup &operator=(const ShmGroup &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string &label() const { return options_.label; }
  // The pid of a group rank (recorded at attach): for liveness checks (pidfd_open).
  pid_t peer_pid(int rank) const { return segment_->pid_of(rank); }
  // Bytes of shared memory this group maps (header + all ranks' staging areas).
  size_t segment_bytes() const { return segment_->mapped_bytes(); }
  // True after a collective failed: every further call throws PSTATE_ERR_ABORTED.
  bool broken() const { return broken_; }

  // recv[i] = op over ranks of send[i]; send == recv is allowed (in place). AVG: sum, then one
  // division by size() (integers truncate).
  void all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                  const Deadline &deadline);
  // recv[r * send_count + i] = send of rank r [i]; send may be recv + rank() * send_count.
  void all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, const Deadline &deadline);
  // recv[i] = op over ranks of their send[rank() * recv_count + i]; recv may alias send.
  void reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                      const Deadline &deadline);
  // buf of every rank = buf of rank root.
  void broadcast(void *buf, size_t count, pstate_dtype_t dtype, int root, const Deadline &deadline);
  void barrier(const Deadline &deadline);

 public:
  struct Control;  // one rank's counters and futex word, in the segment (public for static_assert)

 private:  // one rank's counters and futex word, in the segment
  struct Span {    // a piece of a buffer, in elements
    size_t offset;
    size_t count;
  };
  using Counter = std::atomic<uint64_t> Control::*;

  Control &control(int rank) const;
  uint8_t *area(int rank, uint64_t step) const;
  size_t slice_elems(size_t count, size_t esize) const;
  Span slice(size_t count, int j, size_t esize) const;
  size_t rs_stride(size_t esize) const;

  template <typename Body>
  void run_guarded(const char *op, Body &&body);
  size_t checked_dtype_size(const char *op, pstate_dtype_t dtype, size_t count, size_t multiple) const;
  void check_reduce(const char *op, pstate_dtype_t dtype, pstate_reduce_op_t op_kind) const;
  void check_buffers(const char *op, const void *send, const void *recv, size_t count) const;

  void set_counter(Counter counter, uint64_t step);
  void wait_counter(int peer, Counter counter, uint64_t step, const char *what, const Deadline &deadline);
  void wait_area_free(uint64_t step, const Deadline &deadline);

  void all_reduce_small(const uint8_t *send, uint8_t *recv, size_t count, size_t esize, pstate_dtype_t dtype,
                        pstate_reduce_op_t op, const Deadline &deadline);
  void all_reduce_pipelined(const uint8_t *send, uint8_t *recv, size_t count, size_t esize, pstate_dtype_t dtype,
                            pstate_reduce_op_t op, const Deadline &deadline);
  void ar_publish(uint64_t step, const uint8_t *send, Span chunk, size_t esize, const Deadline &deadline);
  void ar_reduce(uint64_t step, const uint8_t *send, Span chunk, size_t esize, pstate_dtype_t dtype,
                 pstate_reduce_op_t op, const Deadline &deadline);
  void ar_gather(uint64_t step, uint8_t *recv, Span chunk, size_t esize, const Deadline &deadline);
  void ag_publish(uint64_t step, const uint8_t *send, Span piece, size_t esize, const Deadline &deadline);
  void ag_gather(uint64_t step, const uint8_t *send, uint8_t *recv, size_t send_count, Span piece, size_t esize,
                 const Deadline &deadline);
  void rs_publish(uint64_t step, const uint8_t *send, size_t recv_count, Span piece, size_t esize, bool stage_own,
                  const Deadline &deadline);
  void rs_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, size_t recv_count, Span piece, size_t esize,
                 bool own_staged, pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline);

  int rank_;
  int size_;
  ShmGroupOptions options_;
  size_t area_bytes_ = 0;
  int depth_ = 0;
  ShmWaiter waiter_;
  std::unique_ptr<ShmSegment> segment_;
  uint8_t *controls_ = nullptr;
  uint8_t *areas_ = nullptr;
  uint64_t step_ = 0;  // last step this rank completed; the same on every rank between calls
  bool broken_ = false;
  const char *current_op_ = "";
};

}  // namespace pstate::shm
