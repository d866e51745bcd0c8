// shm_group.hpp — collectives for a group whose ranks share a host, over one shared segment.
//
// Every rank owns, in the group's ShmSegment: a control block (three monotonically increasing
// step counters: in, out, done; and a futex word), inline slots and staging areas. A collective
// is a sequence of steps; the group's step counter advances the same way on every rank (every
// rank makes the same calls). Every counter and flag is written only by its owner (release) and
// read by peers (acquire): no locks, no shared read-modify-write on the fast path.
//
// Two protocols, chosen by size (the same choice on every rank):
//  * inline (shm_group_inline.cpp), up to inline_bytes (all_reduce: inline_reduce_bytes): the payload travels in 64-byte lines of
//    56 data bytes plus the step number, written by the owner data first, step last, so a peer
//    that sees the step in a line sees its data in the same cache-line transfer (NCCL's LL
//    protocol, Open MPI's fast boxes). One hand-off per collective; all_reduce is folded by
//    every rank over all inputs, in rank order 0..size-1, with the same kernels: the same bits
//    everywhere. Slot s % inline_depth is rewritten only after every peer's done >= s - depth.
//  * staged (shm_group_staged.cpp), above: steps of at most one staging area, pipelined over
//    pipeline_depth areas; medium messages are cut into at least 4 steps (not below
//    min_step_bytes, and not at all when ranks outnumber CPUs) so copy-in and copy-out overlap.
//    Where in its area a step lands rotates, so stores rarely hit lines a peer still caches
//    (see staging()). all_reduce is a reduce-scatter + all-gather inside the segment: each rank
//    reduces one slice of each chunk from all ranks' inputs (in rank order) straight into its
//    staging area, where the others read it, and every rank copies all reduced slices out; each
//    slice is reduced by exactly one rank, so the result has the same bits on every rank.
//    all_reduce between inline_reduce_bytes and small_bytes folds whole inputs from the areas
//    instead (one hand-off: one flag, then the peers' inputs read in bulk, which the hardware
//    prefetcher streams; waiting line by line above 512 B was slower, bench/analysis.md).
//    Outputs of stream_bytes or more are written with non-temporal stores.
//  reduce runs all_reduce's three protocols with a root: every rank publishes or stages its
//    input, but only the root folds (inline, whole inputs) or copies the reduced slices out
//    (staged; every rank still reduces its slice, in parallel); the others finish the step as
//    soon as their part is published. scatter is broadcast's shape with one block per rank: the
//    root publishes (inline) or stages, per step, a piece of every other rank's block, and each
//    rank copies its own piece out. all_gatherv and reduce_scatterv are all_gather's and
//    reduce_scatter's shapes with parts of different sizes (steps cut by the largest part).
//
// Agreement (always on): every call first names what it is doing. Its descriptor (kind, count,
// dtype, reduce op, root) is packed into a 32-bit code (common/op_descriptor.hpp) that rides in
// the upper half of the word each inline line is flagged with: word = code << 32 | step (the step
// compared modulo 2^32). A reader that sees a peer's step in a line compares the code in the same
// load, so agreement costs no extra cache line on the inline path. Calls that do not publish
// inline lines (staged calls, calls carried by UCX, count 0) publish an arrival line instead:
// line 0 of the inline slot of the call's first step, with the code and, in its data, the full
// count (codes hold counts below kCodedCountLarge exactly) and the counts hash of all_gatherv and
// reduce_scatterv (OpDescriptor::detail, compared for those kinds). Every rank checks every peer's
// code of the call before it returns and before its done counter passes the call's first step (so the
// peer cannot have rewritten the line yet): if any two ranks disagree, every rank finds a peer that
// disagrees with it, and every rank throws PSTATE_ERR_MISMATCH naming both sides. Inline
// all_reduce, all_gather, reduce_scatter and barrier, and inline reduce on its root, read every
// peer's lines by construction; broadcast, scatter, the other ranks of a reduce and the staged
// protocol check the peers they did not read (verify_peers).
//
// Refusals: a rank that refuses its part of a call (an argument only it can check, found by
// src/api/ before the call) arrives at the call's first step with the code of OpKind::kRefused
// instead (arrive). Whoever meets that code where it checks the peer (verify_peer, or the line
// it reads) stops its own protocol there with INVALID_ARGUMENT naming the refusing rank; since
// every rank checks every peer's code before its done counter passes the call's first step,
// every rank of the call gets the error. Each of them, and the refusing rank, then leaves the
// call at the same step, a fixed number of steps past anything the call can have published
// (leave_refused_call), so the lines and counters it left are never taken for a later call's,
// and the group stays usable.
//
// Failures: every wait is bounded by the call's Deadline (PSTATE_ERR_TIMEOUT) and calls the
// liveness check of the options (PSTATE_ERR_PEER_LOST). After any failure the group is broken and
// every further call throws PSTATE_ERR_ABORTED (peers are at unknown steps). Reductions use
// src/reduce/reduce.hpp; dtypes that cannot be reduced (fp8) give PSTATE_ERR_UNSUPPORTED.
//
// One call, one verdict: a call fails on every rank or on none. A rank that gives up on a call (its
// deadline passed while it waited for a peer that is off in its own code) must not leave that peer
// to arrive later, find everything it needs already in the segment, and return OK from a call the
// others failed. The group's verdict block holds one word, changed only by compare-and-swap:
// FAILED(call, rank) or COMMITTED(call, rank). A waiter at its deadline first raises `watch` to the
// call's first step, then fences (the heavy side of the asymmetric fence pair, shm_wait.hpp), then
// looks at what it waits for once more: there now, it goes on; else it swaps in FAILED, unless a
// rank has COMMITTED this call (then everything it needs is published or on its way, and it waits
// on, up to one more timeout). Every rank, at the end of every call (after its last flag store and
// that store's fence), reads `watch`: below the call, nobody gave up (the fence pair guarantees
// that a waiter that later gives up sees this rank's flags instead, so it does not); otherwise it
// swaps in COMMITTED, or finds FAILED and returns the giver's status naming who gave up and when.
// The fast path adds one load of a line nobody writes. A rank whose call fails for another reason
// (PEER_LOST, INTERRUPTED, ABORTED, a mismatch) raises `watch` the same way and marks the call
// FAILED too, unless it was committed (give_up): a rank that arrives seconds later gets that
// verdict, not OK with the data the others left.
//
// Threads: one thread drives a ShmGroup at a time; different ShmGroups are independent (N ranks
// may be N threads of one process, each with its own ShmGroup on the same name).
#pragma once

#include "common/deadline.hpp"
#include "common/op_descriptor.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/shm/shm_wait.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pstate::shm {

struct ShmGroupOptions {
  std::string label = "shm group";  // names the group in every message ("tp:0")
  size_t inline_bytes = 2048;       // largest payload of the inline protocol (0 = never inline)
  size_t inline_reduce_bytes = 256; // all_reduce: inline only up to this (and inline_bytes); above,
                                    // one flag + bulk copy beats waiting line by line (measured)
  int inline_depth = 16;            // inline slots per rank (>= 2)
  size_t small_bytes = 16 * 1024;   // all_reduce up to this size: fold whole inputs (one hand-off)
  size_t chunk_bytes = 256 * 1024;  // bytes of one staging area (rounded up to a page)
  int pipeline_depth = 8;           // staging areas per rank (>= 2)
  size_t min_step_bytes = 8 * 1024; // medium messages are cut into steps down to this size
  size_t stream_bytes = 8 << 20;    // staged outputs at least this large are written with
                                    // non-temporal stores (they cannot stay in cache anyway)
  size_t stage_stream_bytes = SIZE_MAX;  // copies into staging areas at least this large are
                                         // always non-temporal (SIZE_MAX: never forced)
  size_t adaptive_stage_bytes = 32 * 1024;  // copies into staging areas and all_reduce folds at
                                            // least this large choose their stores by measured
                                            // speed; all_gather steps below it choose per call,
                                            // for the group (see stage_copy, ar_reduce,
                                            // staged_all_gather; SIZE_MAX: always ordinary)
  size_t cma_bytes = SIZE_MAX;      // all_gatherv whose largest part is this large goes by reference:
                                    // each rank copies the peers' parts straight from their send
                                    // buffers (one copy; shm_group_cma.cpp). SIZE_MAX: never (the
                                    // default: not faster than staging on the reference VM under
                                    // load, bench/analysis.md). Ranks must agree (checked at attach)
  bool cma_allowed = true;          // false: this rank refuses references (PSTATE_SHM_CMA=0), so the
                                    // whole group stages (decided together, see shm_group_cma.cpp)
  WaitOptions wait;                 // spin/yield/futex policy (-1s resolved per machine)
  std::function<void()> liveness;   // throws PSTATE_ERR_PEER_LOST when a peer is gone; may be empty
  std::vector<int> global_ranks;    // the world rank of each group rank, for messages (may be empty)
};

class ShmGroup {
 public:
  // Collective over the `size` ranks: rank 0 creates the segment `name` (see shm_segment.hpp for
  // the protocol and naming rule), the others open it; returns when all attached and the name is
  // already unlinked. Ranks must pass the same size and the same sizes/depths in options (they
  // shape the segment; else PSTATE_ERR_MISMATCH); label, wait and liveness are per rank.
  ShmGroup(const std::string &name, int rank, int size, const Deadline &deadline, ShmGroupOptions options = {});
  ~ShmGroup();
  ShmGroup(const ShmGroup &) = delete;
  ShmGroup &operator=(const ShmGroup &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string &label() const { return options_.label; }
  // The pid of a group rank (recorded at attach): for liveness checks (pidfd_open).
  pid_t peer_pid(int rank) const { return segment_->pid_of(rank); }
  // Bytes of shared memory this group maps (header, controls, inline slots, staging areas).
  size_t segment_bytes() const { return segment_->mapped_bytes(); }
  // The measured costs of the adaptive staging copies per kind of store (0 ordinary,
  // 1 non-temporal), in time-stamp ticks per KiB (0 = not measured yet); see stage_copy.
  double stage_cost_per_kib(int kind) const { return stage_choice_.ticks_per_kib[kind & 1]; }
  // The same for medium all_gather calls, timed whole by group rank 0, which chooses for the
  // group (see staged_all_gather; 0 on the other ranks).
  double gather_cost_per_kib(int kind) const { return gather_choice_.ticks_per_kib[kind & 1]; }
  // The same for all_reduce's fold of a slice (0: into the staging area, 1: into recv, then
  // copied to the area non-temporally; see ar_reduce).
  double reduce_cost_per_kib(int kind) const { return reduce_choice_.ticks_per_kib[kind & 1]; }
  // How often this rank's waits went past spinning, slept, and were woken by timeout.
  const WaitStats &wait_stats() const { return waiter_.stats(); }
  // True once every rank registered for membarrier-based asymmetric fences (see shm_wait.hpp).
  bool asymmetric_fences() const { return waiter_.light_notify(); }
  // True after a collective failed: every further call throws PSTATE_ERR_ABORTED.
  bool broken() const { return broken_; }
  // One line for PSTATE_DEBUG=INFO: ranks, segment size, thresholds, wake-up mode.
  std::string describe() const;

  // recv[i] = op over ranks of send[i]; send == recv is allowed (in place). AVG: sum, then one
  // division by size() (integers truncate).
  // kind: the descriptor's kind (pstate's own exchanges pass theirs, see op_descriptor.hpp).
  void all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                  const Deadline &deadline, OpKind kind = OpKind::kAllReduce);
  // recv[r * send_count + i] = send of rank r [i]; send may be recv + rank() * send_count.
  void all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, const Deadline &deadline,
                  OpKind kind = OpKind::kAllGather);
  // recv[i] = op over ranks of their send[rank() * recv_count + i]; recv may be send or
  // send + rank() * recv_count (the MPI and NCCL in-place forms).
  void reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                      const Deadline &deadline);
  // buf of every rank = buf of rank root.
  void broadcast(void *buf, size_t count, pstate_dtype_t dtype, int root, const Deadline &deadline);
  // recv of rank root[i] = op over ranks of send[i]; send == recv is allowed on root. recv is not
  // used on the other ranks (may be nullptr; never written). all_reduce's protocols with only
  // the root folding (inline, whole-input) or copying the reduced slices out (staged): the root
  // gets the bits all_reduce gives.
  void reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, int root,
              const Deadline &deadline);
  // recv of rank r = block r of root's send (size() blocks of recv_count); recv may be send +
  // root * recv_count on root. send is not used on the other ranks (may be nullptr).
  void scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root,
               const Deadline &deadline);
  // kind names the barrier in a mismatch (kBarrier, or kFinalize / kDestroy for the library's own).
  void barrier(const Deadline &deadline, OpKind kind = OpKind::kBarrier);
  // The agreement step alone, for an operation another transport carries (gather over UCX,
  // objects, ...): every rank publishes desc and checks every peer's; MISMATCH on disagreement.
  void arrive(const OpDescriptor &desc, const Deadline &deadline);
  // all_gatherv / reduce_scatterv (desc: make_v_op's, whose detail is the counts hash; compared
  // like the rest of the descriptor): in one step of the inline protocol when it fits
  // (all_gatherv: every part, reduce_scatterv: the whole input, each behind a header of
  // kInlineVHeader bytes, within inline_bytes), else staged (shm_group_staged.cpp). counts[i] is
  // group rank i's part in elements, packed in group order; the in-place forms are the API's
  // (coll/algorithms.hpp).
  void all_gatherv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype, const OpDescriptor &desc,
                   const Deadline &deadline);
  void reduce_scatterv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                       pstate_reduce_op_t op, const OpDescriptor &desc, const Deadline &deadline);
  // The group's sequence number of the next call, for messages only (ranks agree on the order of
  // calls through the steps themselves).
  void set_seq(uint32_t seq) { seq_ = seq; }

  // In-segment layout types (public so their sizes can be checked at compile time).
  struct Control;  // one rank's step counters and futex word
  struct Line;     // one inline line: 56 payload bytes and the step that wrote them
  struct Verdict;  // the group's verdict block ("One call, one verdict")

 private:
  struct Span {  // a piece of a buffer, in elements
    size_t offset;
    size_t count;
  };
  using Counter = std::atomic<uint64_t> Control::*;

  // ---- set-up and layout (shm_group.cpp)
  void lay_out(uint8_t *payload, size_t control_bytes, size_t inline_total);
  Control &control(int rank) const;
  uint8_t *area(int rank, uint64_t step) const;
  uint8_t *staging(int rank, uint64_t step, size_t footprint) const;
  Line *inline_line(int rank, uint64_t step, size_t index) const;
  uint8_t *scratch(int rank) { return scratch_.data() + static_cast<size_t>(rank) * options_.inline_bytes; }

  // ---- synchronization (shm_group.cpp)
  void set_counter(Counter counter, uint64_t step);
  void wait_counter(int peer, Counter counter, uint64_t step, const char *what, const Deadline &deadline);
  void wait_done(uint64_t step, const Deadline &deadline);
  void finish_step(uint64_t step);
  template <typename Body>
  void run_guarded(const char *op, Body &&body);
  // ---- one call, one verdict (shm_group.cpp; see the header comment)
  Verdict &verdict() const;
  class Guard;  // the waiter's hook at its deadline
  std::unique_ptr<Guard> guard_;
  // At the deadline of a wait in the current call: kReady (ready() holds after the fence), or
  // whether to wait on (the call was committed) or give up (FAILED is in, by this rank or another).
  int on_deadline(const std::function<bool()> &ready);
  // Swaps in FAILED(call) for this rank with status unless the call was decided; returns the word.
  uint64_t mark_failed(pstate_status_t status);
  void raise_watch();
  void give_up(pstate_status_t status);
  // The end of a call that some rank gave up on (watch reached it): COMMITTED, or the late error.
  void commit_call();
  // Throws the late error when the verdict of the current call is FAILED by another rank.
  void check_verdict() const;
  [[noreturn]] void throw_failed_call(uint64_t word, bool completed) const;
  bool in_call_ = false;  // between begin_call and the end of the call (for the verdict)
  bool refusal_ = false;       // the error in flight is a peer's refusal: the group stays usable
  size_t checked_dtype_size(const char *op, pstate_dtype_t dtype, size_t count, size_t multiple) const;
  void check_reduce(const char *op, pstate_dtype_t dtype, pstate_reduce_op_t op_kind) const;
  void check_buffers(const char *op, const void *send, const void *recv, size_t count) const;
  void check_root(const char *op, int root) const;

  // ---- agreement (shm_group.cpp; see "Agreement" above)
  // Starts a call whose first step is step_ + 1. checked_by_reads: the protocol reads a line of
  // every peer at that step (inline all_reduce, all_gather, reduce_scatter, barrier), so no peer
  // is left to verify.
  void begin_call(const OpDescriptor &desc, bool checked_by_reads, const Deadline &deadline);
  uint64_t line_word(uint64_t step) const { return uint64_t{call_code_} << 32 | static_cast<uint32_t>(step); }
  static bool step_reached(uint64_t word, uint64_t step) {
    return static_cast<int32_t>(static_cast<uint32_t>(word) - static_cast<uint32_t>(step)) >= 0;
  }
  // After a line's step was reached: MISMATCH unless it is exactly this call's step and code (or
  // INVALID_ARGUMENT when the peer refused the call: disagreement).
  void check_line_word(int peer, const Line *line, uint64_t word, uint64_t step) {
#ifndef PSTATE_NO_AGREEMENT
    if (word != line_word(step)) [[unlikely]] disagreement(peer, line, word, step);
#else
    static_cast<void>(peer), static_cast<void>(line), static_cast<void>(word), static_cast<void>(step);
#endif
  }
  [[noreturn]] void disagreement(int peer, const Line *line, uint64_t word, uint64_t step);
  [[noreturn]] void mismatch(int peer, const Line *line, uint64_t word) const;
  // A peer's arrival line says it refused this call: INVALID_ARGUMENT naming it (refusal_ set).
  [[noreturn]] void refused(int peer, const Line *line);
  void leave_refused_call();
  uint64_t refused_call_steps() const;
  void publish_arrival(const Deadline &deadline);  // line 0 of slot call_step_, count in its data
  // The arrival line's data (count, seq, detail: kInlineVHeader bytes), which also heads the
  // inline payload of all_gatherv and reduce_scatterv.
  void write_arrival_header(uint8_t *dst) const;
  static constexpr size_t kInlineVHeader = 16;
  void verify_peer(int peer, const Deadline &deadline);
  void verify_peers(const Deadline &deadline);     // every peer not verified in this call
  void arrive_now(const OpDescriptor &desc, const Deadline &deadline);
  int global_rank(int group_rank) const;

  // ---- inline protocol (shm_group_inline.cpp)
  void inline_publish(uint64_t step, const uint8_t *src, size_t bytes, const Deadline &deadline);
  void inline_fetch(int peer, uint64_t step, size_t offset, size_t bytes, uint8_t *dst, const Deadline &deadline);
  const uint8_t *inline_input(int peer, uint64_t step, size_t offset, size_t bytes, const Deadline &deadline);
  void inline_all_reduce(const uint8_t *send, uint8_t *recv, size_t count, size_t esize, pstate_dtype_t dtype,
                         pstate_reduce_op_t op, const Deadline &deadline);
  void inline_all_gather(const uint8_t *send, uint8_t *recv, size_t bytes, const Deadline &deadline);
  void inline_reduce_scatter(const uint8_t *send, uint8_t *recv, size_t recv_count, size_t esize,
                             pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline);
  void inline_broadcast(uint8_t *buf, size_t bytes, int root, const Deadline &deadline);
  void inline_scatter(const uint8_t *send, uint8_t *recv, size_t bytes, int root, const Deadline &deadline);
  void inline_barrier(const Deadline &deadline);
  // offsets: size() + 1 byte offsets of the packed parts (the last is the total).
  void inline_all_gatherv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                          size_t esize, const Deadline &deadline);
  void inline_reduce_scatterv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                              size_t esize, pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline);

  // ---- staged protocol (shm_group_staged.cpp)
  size_t slice_elems(size_t count, size_t esize) const;
  Span slice(size_t count, int j, size_t esize) const;
  size_t rs_stride(size_t esize) const;
  size_t step_elems(size_t count, size_t capacity, size_t esize) const;
  void staged_all_reduce_whole(const uint8_t *send, uint8_t *recv, size_t count, size_t esize, pstate_dtype_t dtype,
                               pstate_reduce_op_t op, const Deadline &deadline);
  void staged_all_reduce(const uint8_t *send, uint8_t *recv, size_t count, size_t esize, pstate_dtype_t dtype,
                         pstate_reduce_op_t op, const Deadline &deadline);
  void ar_publish(uint64_t step, const uint8_t *send, Span chunk, size_t esize, const Deadline &deadline);
  void ar_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, Span chunk, size_t esize, pstate_dtype_t dtype,
                 pstate_reduce_op_t op, const Deadline &deadline);
  void ar_gather(uint64_t step, uint8_t *recv, Span chunk, size_t esize, const Deadline &deadline);
  void staged_all_gather(const uint8_t *send, uint8_t *recv, size_t send_count, size_t esize,
                         const Deadline &deadline);
  bool begin_medium_gather(size_t step_bytes, size_t bytes);
  void ag_publish(uint64_t step, const uint8_t *send, Span piece, size_t esize, const Deadline &deadline);
  void ag_gather(uint64_t step, const uint8_t *send, uint8_t *recv, size_t send_count, Span piece, size_t esize,
                 const Deadline &deadline);
  // The v-collectives' staged forms: step i moves piece i (per_step elements) of every part.
  // offsets: size() + 1 byte offsets of the packed parts (the last is the total).
  void staged_all_gatherv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                          size_t esize, const Deadline &deadline);
  void agv_gather(uint64_t step, const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                  size_t index, size_t per_step, size_t esize, const Deadline &deadline);
  // ---- by reference (shm_group_cma.cpp)
  // True when a v-gather whose largest part is `bytes` goes by reference (the same answer on
  // every rank: options, pids and the group's decision are the same everywhere).
  bool by_reference(size_t bytes);
  // all_gatherv by reference; false (nothing done, the call's first step used up) when this was
  // the group's first such call and some rank could not read its peers: the caller stages.
  bool cma_all_gatherv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                       size_t esize, const Deadline &deadline);
  // Copies each peer's part (bytes of counts[j] * esize at its published address) into recv;
  // false when the kernel refused one (errno in *err), before anything else was read.
  bool cma_read_peers(uint64_t step, uint8_t *recv, const size_t *counts, const size_t *offsets, size_t esize,
                      bool first, int *err, const Deadline &deadline);
  void staged_reduce_scatterv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                              size_t esize, pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline);
  void rsv_publish(uint64_t step, const uint8_t *send, const size_t *counts, const size_t *offsets, size_t index,
                   size_t per_step, size_t esize, bool stage_own, const Deadline &deadline);
  void rsv_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                  size_t index, size_t per_step, size_t esize, bool own_staged, pstate_dtype_t dtype,
                  pstate_reduce_op_t op, const Deadline &deadline);
  void staged_reduce_scatter(const uint8_t *send, uint8_t *recv, size_t recv_count, size_t esize,
                             pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline);
  void rs_publish(uint64_t step, const uint8_t *send, size_t recv_count, Span piece, size_t esize, bool stage_own,
                  const Deadline &deadline);
  void rs_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, size_t recv_count, Span piece, size_t esize,
                 bool own_staged, pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline);
  void staged_broadcast(uint8_t *buf, size_t count, size_t esize, int root, const Deadline &deadline);
  void staged_scatter(const uint8_t *send, uint8_t *recv, size_t recv_count, size_t esize, int root,
                      const Deadline &deadline);
  void copy_out(uint8_t *dst, const uint8_t *src, size_t bytes) const;
  struct StageChoice;
  void prepare_staging();
  void stage_copy(uint8_t *dst, const uint8_t *src, size_t bytes);
  void adaptive_copy(StageChoice &choice, uint8_t *dst, const uint8_t *src, size_t bytes);
  static int next_kind(StageChoice &choice);
  static void record_cost(StageChoice &choice, int kind, uint64_t ticks, size_t bytes);
  void broadcast_stage(uint8_t *dst, const uint8_t *src, size_t bytes);

  int rank_;
  int size_;
  ShmGroupOptions options_;
  size_t area_bytes_ = 0;
  int depth_ = 0;
  size_t inline_lines_ = 0;  // lines of one inline slot
  bool crowded_ = false;     // more ranks than CPUs: no pipelining split (every hand-off costs a switch)
  ShmWaiter waiter_;
  std::unique_ptr<ShmSegment> segment_;
  uint8_t *controls_ = nullptr;
  uint8_t *inline_ = nullptr;
  uint8_t *areas_ = nullptr;
  std::vector<uint64_t> known_done_;  // the last done value read from each peer (saves misses)
  std::vector<uint8_t> scratch_;      // size() * inline_bytes: contiguous copies of inline inputs
  uint64_t step_ = 0;                 // last step this rank completed; the same on every rank between calls
  bool broken_ = false;
  bool staging_ready_ = false;  // prepare_staging() has mapped every staging page
  bool stream_out_ = false;  // the current staged collective writes its output non-temporally
  struct StageChoice {       // stage_copy's measurements (per rank: each rank stages its own data)
    double ticks_per_kib[2] = {0, 0};  // moving average per store kind of time-stamp ticks per KiB:
                                    // [0] ordinary, [1] non-temporal
    uint64_t copies = 0;            // measured operations so far
    int best = 0;                   // the kind used outside exploration
  } stage_choice_, broadcast_choice_, reduce_choice_,  // broadcast steps, all_reduce's fold
      gather_choice_;  // (ar_reduce) and medium all_gather calls (whole calls) are measured apart
  int call_kind_ = -1;  // >= 0: stage_copy uses this kind for the call in progress (medium all_gather)
  enum class Cma { kUnknown, kOn, kOff };  // the group's decision on references (shm_group_cma.cpp)
  Cma cma_ = Cma::kUnknown;
  uint64_t medium_gathers_ = 0;  // medium all_gather calls so far (the same count on every rank)
  const char *current_op_ = "";
  // The call in progress (agreement): its first step, code, descriptor, and which peers were
  // verified (verified_[p] == call_step_); pending_ counts those not yet verified.
  uint64_t call_step_ = 0;
  uint32_t call_code_ = 0;
  OpDescriptor call_desc_;
  std::vector<uint64_t> verified_;
  int pending_ = 0;
  const Deadline *call_deadline_ = nullptr;
  uint32_t seq_ = 0;
};

}  // namespace pstate::shm
