// shm_group_inline.cpp — small collectives in one hand-off: the inline (flagged-line) protocol.
//
// The protocol: at step s a rank publishes a payload into its inline slot s % inline_depth, a
// run of 64-byte lines each holding 56 payload bytes and, stored last with release semantics,
// the word code << 32 | s (code: the call's descriptor, see "Agreement" in shm_group.hpp). A
// peer waits for the step in each line it needs (acquire), checks that the code is its own
// (else PSTATE_ERR_MISMATCH), and then reads that line's bytes: data, flag and descriptor arrive
// in the same cache-line transfer, so a collective costs about one cache-miss latency instead
// of a flag miss plus a data miss per hand-off. Before
// rewriting slot s % depth at step s, the owner waits until every peer's done >= s - depth
// (usually known already, see wait_done); every rank stores done = s once it has read
// everything it needs of step s.
//
// The algorithms then need no second phase:
//   all_reduce     everyone publishes its input; every rank folds all inputs in rank order
//                  0..size-1 (the same kernels on the same bytes: the same bits on every rank);
//   all_gather     everyone publishes its block; every rank copies every block out;
//   reduce_scatter everyone publishes its whole input; rank r folds everyone's block r;
//   broadcast      the root publishes; the others publish an empty line (their arrival) and
//                  copy; everyone then checks the lines of the peers it did not read;
//   reduce         all_reduce's, but only the root folds (the others publish, then check);
//   scatter        the root publishes every block; rank r publishes an empty line and copies
//                  block r out of the root's lines; everyone checks the peers it did not read;
//   barrier        everyone publishes nothing (the step alone); every rank waits for all steps;
//   all_gatherv    all_gather's with parts of their own sizes, each behind the arrival header
//                  (count, seq, counts hash), which every reader checks first;
//   reduce_scatterv reduce_scatter's with rank r folding everyone's part r, at its offset behind
//                  the header; a rank whose part is empty publishes, then checks every header.
#include "common/arith.hpp"
#include "reduce/reduce.hpp"
#include "transport/shm/shm_group.hpp"
#include "transport/shm/shm_group_layout.hpp"

#include <algorithm>
#include <cstring>

namespace pstate::shm {
namespace {


// dst = input(0) op input(1) op ... op input(n - 1), in that order. dst may alias input(0) or
// input(1) only (reduce_into allows that); later inputs must not alias it.
template <typename Input>
void fold_in_rank_order(uint8_t *dst, int n, Input &&input, size_t count, pstate_dtype_t dtype,
                        pstate_reduce_op_t op) {
  const uint8_t *a = input(0);
  const uint8_t *b = input(1);
  reduce_into(dst, a, b, count, dtype, op);
  for (int k = 2; k < n; ++k) reduce_inplace(dst, input(k), count, dtype, op);
}

}  // namespace

// Writes bytes of src (nothing when bytes == 0: one line carries the step alone) into my slot.
void ShmGroup::inline_publish(uint64_t step, const uint8_t *src, size_t bytes, const Deadline &deadline) {
  const auto depth = static_cast<uint64_t>(options_.inline_depth);
  if (step > depth) wait_done(step - depth, deadline);
  const size_t lines = std::max<size_t>(1, (bytes + kLineData - 1) / kLineData);
  for (size_t l = 0; l < lines; ++l) {
    Line *line = inline_line(rank_, step, l);
    const size_t offset = l * kLineData;
    if (offset + kLineData <= bytes)
      std::memcpy(line->data, src + offset, kLineData);  // a whole line: a few inlined vector moves
    else if (offset < bytes)
      std::memcpy(line->data, src + offset, bytes - offset);
    line->word.store(line_word(step), std::memory_order_release);
  }
  waiter_.notify(control(rank_).signal);
}

// Copies bytes [offset, offset + bytes) of peer's payload of `step` to dst, line by line as each
// arrives. bytes == 0 just waits for the peer's step.
void ShmGroup::inline_fetch(int peer, uint64_t step, size_t offset, size_t bytes, uint8_t *dst,
                            const Deadline &deadline) {
  const size_t first = offset / kLineData;
  const size_t last = bytes == 0 ? first : (offset + bytes - 1) / kLineData;
  // A peer that disagrees about the count may never write the lines past its payload: its
  // first line, which every call writes, is checked before any later one is waited for.
  if (first != 0) inline_fetch(peer, step, 0, 0, nullptr, deadline);
  for (size_t l = first; l <= last; ++l) {
    Line *line = inline_line(peer, step, l);
    uint64_t word = 0;
    waiter_.wait(
        control(peer).signal,
        [&] { return step_reached(word = line->word.load(std::memory_order_acquire), step); }, deadline, [&] {
          return cat(options_.label, " rank ", rank_, ": ", current_op_, " (step ", step, "): waiting for rank ",
                     peer, " to publish its data");
        });
    check_line_word(peer, line, word, step);
    // The owner stores its lines back to back: once the first has arrived the others have most
    // likely been written too, so ask for all of them now and let their misses overlap instead
    // of taking them one after another.
    if (l == first)
      for (size_t k = first + 1; k <= last; ++k) __builtin_prefetch(inline_line(peer, step, k), 0, 3);
    const size_t begin = std::max(offset, l * kLineData);
    const size_t end = std::min(offset + bytes, (l + 1) * kLineData);
    if (end - begin == kLineData)
      std::memcpy(dst + (begin - offset), line->data, kLineData);
    else if (end > begin)
      std::memcpy(dst + (begin - offset), line->data + (begin - l * kLineData), end - begin);
  }
}

// A contiguous view of bytes [offset, offset + bytes) of peer's payload: the line itself when
// the range lies in one line (no copy), else a copy in the peer's scratch buffer.
const uint8_t *ShmGroup::inline_input(int peer, uint64_t step, size_t offset, size_t bytes,
                                      const Deadline &deadline) {
  const size_t first = offset / kLineData;
  if (bytes != 0 && (offset + bytes - 1) / kLineData == first) {
    inline_fetch(peer, step, offset, 0, nullptr, deadline);
    return inline_line(peer, step, first)->data + (offset - first * kLineData);
  }
  inline_fetch(peer, step, offset, bytes, scratch(peer), deadline);
  return scratch(peer);
}

void ShmGroup::inline_all_reduce(const uint8_t *send, uint8_t *recv, size_t count, size_t esize,
                                 pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  const size_t bytes = count * esize;
  inline_publish(s, send, bytes, deadline);
  if (recv != nullptr) {  // reduce: the ranks other than the root only publish (recv nullptr)
    // In place, my own input is overwritten by the fold: read it back from my published lines.
    const bool own_from_lines = ranges_overlap(send, bytes, recv, bytes);
    fold_in_rank_order(
        recv, size_,
        [&](int k) { return k == rank_ && !own_from_lines ? send : inline_input(k, s, 0, bytes, deadline); },
        count, dtype, op);
    if (op == PSTATE_AVG) finish_avg(recv, count, dtype, size_);
  }
  finish_step(s);  // reduce off the root: checks the peers not read (verify_peers)
}

void ShmGroup::inline_all_gather(const uint8_t *send, uint8_t *recv, size_t bytes, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  inline_publish(s, send, bytes, deadline);
  for (int n = 1; n < size_; ++n) {
    int j = (rank_ + n) % size_;
    inline_fetch(j, s, 0, bytes, recv + static_cast<size_t>(j) * bytes, deadline);
  }
  uint8_t *own = recv + static_cast<size_t>(rank_) * bytes;
  if (own != send) std::memmove(own, send, bytes);
  finish_step(s);
}

void ShmGroup::inline_reduce_scatter(const uint8_t *send, uint8_t *recv, size_t recv_count, size_t esize,
                                     pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  const size_t bytes = recv_count * esize, total = bytes * static_cast<size_t>(size_);
  const size_t mine = static_cast<size_t>(rank_) * bytes;
  inline_publish(s, send, total, deadline);
  const bool own_from_lines = ranges_overlap(send, total, recv, bytes);
  fold_in_rank_order(
      recv, size_,
      [&](int k) { return k == rank_ && !own_from_lines ? send + mine : inline_input(k, s, mine, bytes, deadline); },
      recv_count, dtype, op);
  if (op == PSTATE_AVG) finish_avg(recv, recv_count, dtype, size_);
  finish_step(s);
}

void ShmGroup::inline_broadcast(uint8_t *buf, size_t bytes, int root, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  if (rank_ == root) {
    inline_publish(s, buf, bytes, deadline);
  } else {
    inline_publish(s, nullptr, 0, deadline);
    inline_fetch(root, s, 0, bytes, buf, deadline);
  }
  finish_step(s);  // checks the peers not read (verify_peers)
}

// The root publishes all blocks (its own too: one run of lines) and copies its own block out; the
// others publish an empty line (their arrival) and fetch their block from the root's lines.
void ShmGroup::inline_scatter(const uint8_t *send, uint8_t *recv, size_t bytes, int root, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  if (rank_ == root) {
    inline_publish(s, send, bytes * static_cast<size_t>(size_), deadline);
    const uint8_t *own = send + static_cast<size_t>(root) * bytes;
    if (own != recv) std::memmove(recv, own, bytes);
  } else {
    inline_publish(s, nullptr, 0, deadline);
    inline_fetch(root, s, static_cast<size_t>(rank_) * bytes, bytes, recv, deadline);
  }
  finish_step(s);  // checks the peers not read (verify_peers)
}

void ShmGroup::inline_barrier(const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  inline_publish(s, nullptr, 0, deadline);
  for (int n = 1; n < size_; ++n) inline_fetch((rank_ + n) % size_, s, 0, 0, nullptr, deadline);
  finish_step(s);
}

// ---- all_gatherv, reduce_scatterv: agreement and data in one step ------------------------------
// (ShmGroup::all_gatherv / reduce_scatterv decide that it fits and begin the call.) Each payload
// is the arrival header (count, seq, counts hash) followed by the data; a reader verifies a
// peer's header (verify_peer: its code, count and hash against this rank's) before it reads any
// data behind it, so a peer with other counts is a MISMATCH, never a misread part. The payload is
// assembled in scratch(rank_) (at most inline_bytes), then published like any other.

void ShmGroup::inline_all_gatherv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                                  size_t esize, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  const size_t mine = counts[rank_] * esize;
  uint8_t *payload = scratch(rank_);
  write_arrival_header(payload);
  if (mine != 0) std::memcpy(payload + kInlineVHeader, send, mine);
  inline_publish(s, payload, kInlineVHeader + mine, deadline);
  for (int n = 1; n < size_; ++n) {
    const int j = (rank_ + n) % size_;
    verify_peer(j, deadline);
    if (counts[j] != 0) inline_fetch(j, s, kInlineVHeader, counts[j] * esize, recv + offsets[j], deadline);
  }
  if (mine != 0 && recv + offsets[rank_] != send) std::memmove(recv + offsets[rank_], send, mine);
  finish_step(s);
}

void ShmGroup::inline_reduce_scatterv(const uint8_t *send, uint8_t *recv, const size_t *counts,
                                      const size_t *offsets, size_t esize, pstate_dtype_t dtype,
                                      pstate_reduce_op_t op, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  const size_t total = offsets[size_];
  uint8_t *payload = scratch(rank_);
  write_arrival_header(payload);
  std::memcpy(payload + kInlineVHeader, send, total);
  inline_publish(s, payload, kInlineVHeader + total, deadline);
  const size_t mine = offsets[rank_], bytes = counts[rank_] * esize;
  if (bytes != 0) {
    for (int n = 1; n < size_; ++n) verify_peer((rank_ + n) % size_, deadline);
    // My own part is read from send, or back from my lines when the fold overwrites it (in place).
    const bool own_from_lines = ranges_overlap(send, total, recv, bytes);
    fold_in_rank_order(
        recv, size_,
        [&](int k) {
          return k == rank_ && !own_from_lines ? send + mine
                                               : inline_input(k, s, kInlineVHeader + mine, bytes, deadline);
        },
        counts[rank_], dtype, op);
    if (op == PSTATE_AVG) finish_avg(recv, counts[rank_], dtype, size_);
  }
  finish_step(s);  // verifies the peers not verified above (an empty part reads nobody)
}

}  // namespace pstate::shm
