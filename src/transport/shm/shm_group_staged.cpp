// shm_group_staged.cpp — large collectives through staging areas, chunked and pipelined.
//
// Each rank owns pipeline_depth areas of area_bytes_; step s uses area s % depth. A rank rewrites
// its area of step s only after every peer's done >= s - depth (wait_done), so with depth >= 2
// one step's copies overlap the next step's staging.
//
// all_reduce (above small_bytes): the chunk of step s is cut into size() slices of whole cache
// lines; slice j is reduced by rank j alone.
//   1. publish: copy my input for every other rank's slice into my area; in[me] = s;
//   2. reduce : for k = 0..size-1 in that order, wait in[k] >= s and fold rank k's slice-me input
//               (my own straight from my send buffer) into my area's slice `me`; AVG divides once
//               there; out[me] = s;
//   3. gather : for every rank j (me first), wait out[j] >= s and copy its slice j into recv;
//               done[me] = s.
// The publish of step s+1 is issued before the gather of step s (software pipelining): while a
// slow peer finishes its reduction this rank is already staging the next chunk. Each slice is
// reduced by one rank in the fixed order 0..size-1, so every rank gets the same bits.
// all_reduce between inline_reduce_bytes and small_bytes: everyone stages its whole input, every
// rank folds all areas in rank order (one hand-off; same kernels, same bits).
// all_gather: stage my piece, copy every rank's piece out. reduce_scatter: stage my input for
// every other rank, then fold everyone's piece for me into recv. all_gatherv, reduce_scatterv:
// the same with parts of different sizes, steps cut by the largest part. broadcast: the root stages,
// the others copy. reduce: all_reduce's two forms with recv nullptr off the root (no fold of whole
// inputs there; its slice reduced into its area only, and no gather). scatter: the root stages a
// piece of every other rank's block per step, each rank copies its own piece.
#include "common/arith.hpp"
#include "reduce/reduce.hpp"
#include "transport/shm/shm_group.hpp"
#include "transport/shm/shm_group_layout.hpp"
#include "transport/shm/stream_copy.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace pstate::shm {
namespace {

// A cheap monotonic tick count, for comparing the costs of two ways of copying (not a time).
uint64_t cycle_count() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

constexpr size_t kSliceAlign = 64;    // slices start on cache lines
constexpr size_t kPipelineSplit = 4;  // medium messages take at least this many steps
constexpr size_t kBroadcastAdaptiveBytes = 16 * 1024;  // broadcast steps this large choose their stores


// The piece of a step for rank j lies at j * piece_stride in the staging footprint
// (reduce_scatter, reduce_scatterv, scatter).
size_t piece_stride(size_t piece_bytes) { return round_up(piece_bytes, kSliceAlign); }


// dst = input(0) op input(1) op ... op input(n - 1), in that order, waiting for each input just
// before it is used. No input may alias dst (callers fold from staged copies).
template <typename Input, typename WaitFor>
void fold_in_rank_order(void *dst, int n, Input &&input, WaitFor &&wait_for, size_t count, pstate_dtype_t dtype,
                        pstate_reduce_op_t op) {
  wait_for(0);
  wait_for(1);
  reduce_into(dst, input(0), input(1), count, dtype, op);
  for (int k = 2; k < n; ++k) {
    wait_for(k);
    reduce_inplace(dst, input(k), count, dtype, op);
  }
}

}  // namespace

// Elements per slice when a chunk of `count` elements is split over the ranks: a whole number
// of cache lines, so the last slices may be short or empty.
size_t ShmGroup::slice_elems(size_t count, size_t esize) const {
  return round_up(ceil_div(count, static_cast<size_t>(size_)), kSliceAlign / esize);
}

ShmGroup::Span ShmGroup::slice(size_t count, int j, size_t esize) const {
  size_t per = slice_elems(count, esize);
  size_t begin = std::min(count, per * static_cast<size_t>(j));
  size_t end = std::min(count, begin + per);
  return {begin, end - begin};
}

// Elements per step when `count` elements (whose per-step room is `capacity` elements) go
// through the areas: the whole room for large messages, but at least kPipelineSplit steps for
// medium ones (down to min_step_bytes a step), so copying in and copying out overlap — unless
// ranks outnumber CPUs: then nothing runs in parallel and each extra hand-off costs switches.
size_t ShmGroup::step_elems(size_t count, size_t capacity, size_t esize) const {
  if (crowded_) return capacity;
  const size_t align = kSliceAlign / esize;
  size_t split = round_up(ceil_div(count, kPipelineSplit), align);
  split = std::max(split, options_.min_step_bytes / esize / align * align);
  return std::max<size_t>(1, std::min(capacity, split));
}

// Maps every page of the staging areas (all ranks') into this process before the first staged
// collective. staging() moves each step to fresh lines, so without this the first few hundred
// steps of a size each take page faults (on the reference VM an all_gather of 16 KiB timed over
// 300 calls took 9.1 us against 0.67 us over 3,000: ~1,000 faults per process). Done on first use
// rather than at set-up, so groups that never stage (and the world group's set-up barrier) do
// not pay for it: ~1 ms per 4 MiB. MADV_POPULATE_WRITE (Linux 5.14) changes no data; older
// kernels get one read per page instead.
void ShmGroup::prepare_staging() {
  if (staging_ready_) return;
  staging_ready_ = true;
  const size_t bytes = area_bytes_ * static_cast<size_t>(depth_) * static_cast<size_t>(size_);
#ifdef MADV_POPULATE_WRITE
  if (::madvise(areas_, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (size_t off = 0; off < bytes; off += 4096) static_cast<void>(*reinterpret_cast<volatile const uint8_t *>(areas_ + off));
}

// Copies into my staging area, which peers read. Ordinary stores must first take each line back
// from the peers' caches (read-for-ownership), and a core can only have a few such requests in
// flight; staging() rotates where each step lands so small steps hit lines the peers no longer
// hold, but a step as large as the area has no room to rotate. What that costs depends on how
// far apart the two cores are, which is not known in advance and, on a VM, changes while the job
// runs: on the reference VM, with a cross-core hand-off of 0.15 us, all_gather of 1 MiB took 36 us
// with ordinary stores and 74 us with non-temporal ones (which skip the ownership round trip but
// make the peers read from DRAM); minutes later, with a hand-off of 0.38 us, 250 us ordinary and
// 55 us non-temporal (bench/analysis.md). So copies of adaptive_stage_bytes or more measure
// themselves: a moving average of the cost per KiB of each kind, the faster kind used (the
// non-temporal one only when it is 1.5x cheaper to copy, as its readers pay more), and every
// 32nd copy made with the other kind so a change of conditions is noticed. The choice is local:
// readers do not care how the lines they read were written. Costs are in time-stamp-counter ticks
// (two rdtsc, ~10 ns each, per copy of >= 32 KiB, i.e. >= 1 us: about 2%; at 8 KiB the
// measurements were too noisy to choose well).
void ShmGroup::stage_copy(uint8_t *dst, const uint8_t *src, size_t bytes) {
  if (bytes == 0) return;  // an empty part (all_gatherv) may come with a null buffer
  if (bytes >= options_.stage_stream_bytes || call_kind_ == 1)
    copy_streaming(dst, src, bytes);
  else if (call_kind_ == 0 || bytes < options_.adaptive_stage_bytes)
    std::memcpy(dst, src, bytes);
  else
    adaptive_copy(stage_choice_, dst, src, bytes);
}

void ShmGroup::adaptive_copy(StageChoice &c, uint8_t *dst, const uint8_t *src, size_t bytes) {
  const int kind = next_kind(c);
  const uint64_t t0 = cycle_count();
  if (kind == 1)
    copy_streaming(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
  record_cost(c, kind, cycle_count() - t0, bytes);
}

// The kind the next measured operation uses: the cheaper one so far, but every 32nd time (and
// until both are measured) the other one.
int ShmGroup::next_kind(StageChoice &c) {
  constexpr uint64_t kExploreEvery = 32;
  const uint64_t n = c.copies++;
  int kind = c.best;
  if (n % kExploreEvery == kExploreEvery - 1 || (n >= 2 && c.ticks_per_kib[1 - kind] == 0)) kind = 1 - kind;
  return kind;
}

// Folds one measurement (ticks for bytes) into the moving average of its kind and re-picks the
// best; kind 1 (non-temporal stores: its readers pay more later) must be 1.5x cheaper to win.
void ShmGroup::record_cost(StageChoice &c, int kind, uint64_t ticks, size_t bytes) {
  constexpr double kStreamingMustBeCheaperBy = 1.5;
  const double cost = static_cast<double>(ticks) * 1024.0 / static_cast<double>(bytes);
  double &avg = c.ticks_per_kib[kind];
  avg = avg == 0 ? cost : 0.75 * avg + 0.25 * cost;
  if (c.ticks_per_kib[0] != 0 && c.ticks_per_kib[1] != 0)
    c.best = c.ticks_per_kib[1] * kStreamingMustBeCheaperBy < c.ticks_per_kib[0] ? 1 : 0;
}

// Output copies of collectives larger than stream_bytes bypass the cache (stream_copy.hpp).
void ShmGroup::copy_out(uint8_t *dst, const uint8_t *src, size_t bytes) const {
  if (stream_out_)
    copy_streaming(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

// ---- all_reduce -------------------------------------------------------------------------------

void ShmGroup::staged_all_reduce_whole(const uint8_t *send, uint8_t *recv, size_t count, size_t esize,
                                       pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  prepare_staging();
  const uint64_t s = step_ + 1;
  if (s > static_cast<uint64_t>(depth_)) wait_done(s - depth_, deadline);
  const size_t bytes = count * esize;
  stage_copy(staging(rank_, s, bytes), send, bytes);  // recv may alias send: fold from the areas
  set_counter(&Control::in, s);
  if (recv != nullptr) {  // reduce: only the root folds (the others' recv is nullptr)
    fold_in_rank_order(
        recv, size_, [&](int k) { return staging(k, s, bytes); },
        [&](int k) {
          if (k != rank_) wait_counter(k, &Control::in, s, "to stage its input", deadline);
        },
        count, dtype, op);
    if (op == PSTATE_AVG) finish_avg(recv, count, dtype, size_);
  }
  finish_step(s);
}

void ShmGroup::staged_all_reduce(const uint8_t *send, uint8_t *recv, size_t count, size_t esize,
                                 pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  prepare_staging();
  const size_t per_step = step_elems(count, area_bytes_ / esize, esize);
  const size_t steps = ceil_div(count, per_step);
  const uint64_t first = step_ + 1;
  auto chunk = [&](size_t i) { return Span{i * per_step, std::min(per_step, count - i * per_step)}; };
  stream_out_ = count * esize >= options_.stream_bytes;
  ar_publish(first, send, chunk(0), esize, deadline);
  for (size_t i = 0; i < steps; ++i) {
    ar_reduce(first + i, send, recv, chunk(i), esize, dtype, op, deadline);
    if (i + 1 < steps) ar_publish(first + i + 1, send, chunk(i + 1), esize, deadline);
    ar_gather(first + i, recv, chunk(i), esize, deadline);
  }
}

// Stage my input for every other rank's slice of this chunk in my area.
void ShmGroup::ar_publish(uint64_t step, const uint8_t *send, Span chunk, size_t esize, const Deadline &deadline) {
  if (step > static_cast<uint64_t>(depth_)) wait_done(step - depth_, deadline);
  uint8_t *mine = staging(rank_, step, chunk.count * esize);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    Span sl = slice(chunk.count, j, esize);
    stage_copy(mine + sl.offset * esize, send + (chunk.offset + sl.offset) * esize, sl.count * esize);
  }
  set_counter(&Control::in, step);
}

// Reduce my slice from every rank's input, in rank order, and leave the result both in my area's
// slice `me` (which the peers read next) and in my recv: two passes, in one of two orders, chosen
// by measured cost like the staging copies (see stage_copy; both are correct, the choice is local):
//   kind 0: fold into the area, then copy the area to recv. The fold's stores take lines back
//           from the peers' caches (they read this area a few steps ago): cheap when the cores
//           are close, the bottleneck when they are far apart;
//   kind 1: fold into recv (private lines), then copy recv to the area with non-temporal stores.
// Kind 1 needs the fold's output not to alias an input it reads later: out of place, or in place
// with 2 ranks (the fold's first step reads both inputs before writing); else kind 0. In place
// is safe either way: peers read their slices of my input from the area, never from send.
// Measured on the reference VM (2 ranks, cores far apart): 1 MiB 254-270 -> 95 us, 64 MiB 21 -> 12 ms;
// cores close: within 10% of folding into the area always.
void ShmGroup::ar_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, Span chunk, size_t esize,
                         pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  Span mine = slice(chunk.count, rank_, esize);
  if (mine.count == 0) {
    set_counter(&Control::out, step);
    return;
  }
  const size_t bytes = mine.count * esize;
  uint8_t *area_slice = staging(rank_, step, chunk.count * esize) + mine.offset * esize;
  const uint8_t *own = send + (chunk.offset + mine.offset) * esize;
  // reduce off the root (recv nullptr): the slice is reduced into the area for the root alone
  uint8_t *out = recv == nullptr ? nullptr : recv + (chunk.offset + mine.offset) * esize;
  for (int k = 0; k < size_; ++k)
    if (k != rank_) wait_counter(k, &Control::in, step, "to stage its input", deadline);
  auto input = [&](int k) { return k == rank_ ? own : staging(k, step, chunk.count * esize) + mine.offset * esize; };
  const bool may_fold_into_recv =
      out != nullptr && ((own == out && size_ == 2) || !ranges_overlap(own, bytes, out, bytes));
  const bool measured = may_fold_into_recv && bytes >= options_.adaptive_stage_bytes;
  const int kind = measured ? next_kind(reduce_choice_) : 0;
  const uint64_t t0 = measured ? cycle_count() : 0;
  uint8_t *result = kind == 0 ? area_slice : out;
  fold_in_rank_order(result, size_, input, [](int) {}, mine.count, dtype, op);
  if (op == PSTATE_AVG) finish_avg(result, mine.count, dtype, size_);
  if (kind == 1) copy_streaming(area_slice, out, bytes);
  set_counter(&Control::out, step);
  if (kind == 0 && out != nullptr) copy_out(out, area_slice, bytes);
  if (measured) record_cost(reduce_choice_, kind, cycle_count() - t0, bytes);
}

// Copy every other rank's reduced slice into recv (mine is there already). reduce: only the root
// has a recv; the others just finish the step (the root's done guards their areas until it has
// read them).
void ShmGroup::ar_gather(uint64_t step, uint8_t *recv, Span chunk, size_t esize, const Deadline &deadline) {
  for (int n = 1; n < size_ && recv != nullptr; ++n) {
    int j = (rank_ + n) % size_;
    Span sl = slice(chunk.count, j, esize);
    wait_counter(j, &Control::out, step, "to reduce its slice", deadline);
    copy_out(recv + (chunk.offset + sl.offset) * esize, staging(j, step, chunk.count * esize) + sl.offset * esize,
             sl.count * esize);
  }
  finish_step(step);
}

// ---- all_gather -------------------------------------------------------------------------------

// The group-wide store kind of a medium gather (see staged_all_gather): true, with call_kind_ set
// for this call, when a call whose steps are step_bytes and whose part is bytes is medium. Every
// rank decides the same (the arguments are the same on every rank), so the calls are counted alike.
bool ShmGroup::begin_medium_gather(size_t step_bytes, size_t bytes) {
  const bool medium = step_bytes < options_.adaptive_stage_bytes && bytes >= options_.min_step_bytes &&
                      options_.stage_stream_bytes == SIZE_MAX;
  if (!medium) return false;
  const uint64_t n = medium_gathers_++;
  Control &leader = control(0);
  call_kind_ = static_cast<int>(leader.gather_kind[n % 2].load(std::memory_order_acquire) & 1);
  if (rank_ == 0) {  // stored only when it changes: peers then read the slot from their own cache
    const auto next = static_cast<uint32_t>(next_kind(gather_choice_));
    std::atomic<uint32_t> &slot = leader.gather_kind[(n + 1) % 2];
    if (slot.load(std::memory_order_relaxed) != next) slot.store(next, std::memory_order_release);
  }
  return true;
}

void ShmGroup::staged_all_gather(const uint8_t *send, uint8_t *recv, size_t send_count, size_t esize,
                                 const Deadline &deadline) {
  prepare_staging();
  const size_t per_step = step_elems(send_count, area_bytes_ / esize, esize);
  const size_t steps = ceil_div(send_count, per_step);
  const uint64_t first = step_ + 1;
  auto piece = [&](size_t i) { return Span{i * per_step, std::min(per_step, send_count - i * per_step)}; };
  stream_out_ = send_count * esize * static_cast<size_t>(size_) >= options_.stream_bytes;
  // Medium gathers, whose steps are too short for stage_copy to measure one by one (under
  // adaptive_stage_bytes), use one kind of staging stores for the whole group and call, chosen
  // by rank 0 from the time of its whole calls, waits and copies out included (a non-temporal
  // copy returns long before its readers have paid for it, so only the whole call tells; and
  // only a group-wide choice is measured by it: with each rank choosing alone, each rank's time
  // is set by its peer's choice and the two settled on the worse kind together). Rank 0 stores
  // the kind of medium call n + 1 in slot (n + 1) % 2 of its control block before its first
  // `in` of call n; every rank reads slot n % 2 at the start of call n: it was stored before an
  // `in` of call n - 1 that it waited for, and rank 0 cannot reach call n + 1 (rewriting that
  // slot) before every rank staged, so read, its part of call n. On the reference VM, 64 KiB
  // with the cores far apart: 16-17 us ordinary, 6.4-7.0 us non-temporal (Open MPI 6.3).
  const size_t bytes = send_count * esize;
  struct CallKind {  // stage_copy follows call_kind_ for this call only, even if it throws
    int &kind;
    ~CallKind() { kind = -1; }
  } scope{call_kind_};
  const uint64_t t0 = cycle_count();
  const bool medium = begin_medium_gather(std::min(per_step, send_count) * esize, bytes);
  const int kind = call_kind_;
  ag_publish(first, send, piece(0), esize, deadline);
  for (size_t i = 0; i < steps; ++i) {
    if (i + 1 < steps) ag_publish(first + i + 1, send, piece(i + 1), esize, deadline);
    ag_gather(first + i, send, recv, send_count, piece(i), esize, deadline);
  }
  if (medium && rank_ == 0) record_cost(gather_choice_, kind, cycle_count() - t0, bytes);
}

void ShmGroup::ag_publish(uint64_t step, const uint8_t *send, Span piece, size_t esize, const Deadline &deadline) {
  if (step > static_cast<uint64_t>(depth_)) wait_done(step - depth_, deadline);
  stage_copy(staging(rank_, step, piece.count * esize), send + piece.offset * esize, piece.count * esize);
  set_counter(&Control::in, step);
}

void ShmGroup::ag_gather(uint64_t step, const uint8_t *send, uint8_t *recv, size_t send_count, Span piece,
                         size_t esize, const Deadline &deadline) {
  const size_t bytes = piece.count * esize;
  for (int n = 0; n < size_; ++n) {
    int j = (rank_ + n) % size_;
    uint8_t *dst = recv + (static_cast<size_t>(j) * send_count + piece.offset) * esize;
    if (j == rank_) {
      const uint8_t *src = send + piece.offset * esize;
      if (src != dst) std::memmove(dst, src, bytes);  // in place: already there
      continue;
    }
    wait_counter(j, &Control::in, step, "to stage its input", deadline);
    copy_out(dst, staging(j, step, bytes), bytes);
  }
  finish_step(step);
}

// ---- all_gatherv -------------------------------------------------------------------------------

// all_gather's pipeline with parts of different sizes: steps are cut by the largest part, and in
// step i every rank stages piece i of its own part (empty once its part is used up; it still
// raises `in`) and copies piece i of every other rank's part to that part's place in recv. Every
// rank computes every part's pieces from the same counts, so writer and readers agree on each
// piece's footprint (staging() places a step by it).
void ShmGroup::staged_all_gatherv(const uint8_t *send, uint8_t *recv, const size_t *counts, const size_t *offsets,
                                  size_t esize, const Deadline &deadline) {
  prepare_staging();
  const size_t largest = *std::max_element(counts, counts + size_);
  const size_t per_step = step_elems(largest, area_bytes_ / esize, esize);
  const size_t steps = ceil_div(largest, per_step);
  const uint64_t first = step_ + 1;
  stream_out_ = offsets[size_] >= options_.stream_bytes;
  auto mine = [&](size_t i) {
    const size_t begin = std::min(counts[rank_], i * per_step);
    return Span{begin, std::min(per_step, counts[rank_] - begin)};
  };
  struct CallKind {  // as in staged_all_gather: medium calls store the kind rank 0 chose
    int &kind;
    ~CallKind() { kind = -1; }
  } scope{call_kind_};
  const uint64_t t0 = cycle_count();
  const bool medium = begin_medium_gather(per_step * esize, largest * esize);
  const int kind = call_kind_;
  ag_publish(first, send, mine(0), esize, deadline);
  for (size_t i = 0; i < steps; ++i) {
    if (i + 1 < steps) ag_publish(first + i + 1, send, mine(i + 1), esize, deadline);
    agv_gather(first + i, send, recv, counts, offsets, i, per_step, esize, deadline);
  }
  if (medium && rank_ == 0) record_cost(gather_choice_, kind, cycle_count() - t0, largest * esize);
}

void ShmGroup::agv_gather(uint64_t step, const uint8_t *send, uint8_t *recv, const size_t *counts,
                          const size_t *offsets, size_t index, size_t per_step, size_t esize,
                          const Deadline &deadline) {
  for (int n = 0; n < size_; ++n) {
    const int j = (rank_ + n) % size_;
    const size_t begin = std::min(counts[j], index * per_step);
    const size_t bytes = std::min(per_step, counts[j] - begin) * esize;
    if (bytes == 0) continue;
    uint8_t *dst = recv + offsets[j] + begin * esize;
    if (j == rank_) {
      const uint8_t *src = send + begin * esize;
      if (src != dst) std::memmove(dst, src, bytes);  // in place: already there
      continue;
    }
    wait_counter(j, &Control::in, step, "to stage its input", deadline);
    copy_out(dst, staging(j, step, bytes), bytes);
  }
  finish_step(step);
}

// ---- reduce_scatterv ---------------------------------------------------------------------------

// reduce_scatter's pipeline with parts of different sizes: in step i every rank stages piece i
// of every other rank's part of its input (at j * stride of its area, one stride for all parts:
// the largest piece rounded to cache lines), then folds piece i of its own part from every
// rank's area in rank order into recv. A rank whose part is used up only finishes the step.
void ShmGroup::staged_reduce_scatterv(const uint8_t *send, uint8_t *recv, const size_t *counts,
                                      const size_t *offsets, size_t esize, pstate_dtype_t dtype,
                                      pstate_reduce_op_t op, const Deadline &deadline) {
  prepare_staging();
  // In place (recv = my part of send): my own part is staged too, so writing recv cannot clobber
  // an input that is still to be read.
  const bool stage_own =
      counts[rank_] != 0 && ranges_overlap(recv, counts[rank_] * esize, send, offsets[size_]);
  const size_t largest = *std::max_element(counts, counts + size_);
  const size_t per_step = step_elems(largest, rs_stride(esize), esize);
  const size_t steps = ceil_div(largest, per_step);
  const uint64_t first = step_ + 1;
  rsv_publish(first, send, counts, offsets, 0, per_step, esize, stage_own, deadline);
  for (size_t i = 0; i < steps; ++i) {
    if (i + 1 < steps) rsv_publish(first + i + 1, send, counts, offsets, i + 1, per_step, esize, stage_own, deadline);
    rsv_reduce(first + i, send, recv, counts, offsets, i, per_step, esize, stage_own, dtype, op, deadline);
  }
}

void ShmGroup::rsv_publish(uint64_t step, const uint8_t *send, const size_t *counts, const size_t *offsets,
                           size_t index, size_t per_step, size_t esize, bool stage_own, const Deadline &deadline) {
  if (step > static_cast<uint64_t>(depth_)) wait_done(step - depth_, deadline);
  const size_t stride = piece_stride(per_step * esize);
  uint8_t *mine = staging(rank_, step, stride * static_cast<size_t>(size_));
  for (int j = 0; j < size_; ++j) {
    if (j == rank_ && !stage_own) continue;
    const size_t begin = std::min(counts[j], index * per_step);
    const size_t bytes = std::min(per_step, counts[j] - begin) * esize;
    if (bytes != 0) stage_copy(mine + static_cast<size_t>(j) * stride, send + offsets[j] + begin * esize, bytes);
  }
  set_counter(&Control::in, step);
}

void ShmGroup::rsv_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, const size_t *counts,
                          const size_t *offsets, size_t index, size_t per_step, size_t esize, bool own_staged,
                          pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  const size_t begin = std::min(counts[rank_], index * per_step);
  const size_t n = std::min(per_step, counts[rank_] - begin);
  if (n != 0) {
    const size_t stride = piece_stride(per_step * esize);
    const size_t footprint = stride * static_cast<size_t>(size_);
    const size_t my_offset = static_cast<size_t>(rank_) * stride;
    const uint8_t *own = own_staged ? staging(rank_, step, footprint) + my_offset : send + offsets[rank_] + begin * esize;
    uint8_t *dst = recv + begin * esize;
    fold_in_rank_order(
        dst, size_, [&](int k) { return k == rank_ ? own : staging(k, step, footprint) + my_offset; },
        [&](int k) {
          if (k != rank_) wait_counter(k, &Control::in, step, "to stage its input", deadline);
        },
        n, dtype, op);
    if (op == PSTATE_AVG) finish_avg(dst, n, dtype, size_);
  }
  finish_step(step);
}

// ---- reduce_scatter ---------------------------------------------------------------------------

void ShmGroup::staged_reduce_scatter(const uint8_t *send, uint8_t *recv, size_t recv_count, size_t esize,
                                     pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  prepare_staging();
  // Where recv overlaps send, my own contribution is staged too, so writing recv cannot
  // clobber an input that is still to be read.
  const bool stage_own = ranges_overlap(recv, recv_count * esize, send, recv_count * esize * size_);
  const size_t per_step = step_elems(recv_count, rs_stride(esize), esize);
  const size_t steps = ceil_div(recv_count, per_step);
  const uint64_t first = step_ + 1;
  auto piece = [&](size_t i) { return Span{i * per_step, std::min(per_step, recv_count - i * per_step)}; };
  rs_publish(first, send, recv_count, piece(0), esize, stage_own, deadline);
  for (size_t i = 0; i < steps; ++i) {
    if (i + 1 < steps) rs_publish(first + i + 1, send, recv_count, piece(i + 1), esize, stage_own, deadline);
    rs_reduce(first + i, send, recv, recv_count, piece(i), esize, stage_own, dtype, op, deadline);
  }
}

// Elements of one destination's piece per step: the area holds size() of them, cache-aligned.
size_t ShmGroup::rs_stride(size_t esize) const {
  size_t align = kSliceAlign / esize;
  return area_bytes_ / static_cast<size_t>(size_) / esize / align * align;
}


void ShmGroup::rs_publish(uint64_t step, const uint8_t *send, size_t recv_count, Span piece, size_t esize,
                          bool stage_own, const Deadline &deadline) {
  if (step > static_cast<uint64_t>(depth_)) wait_done(step - depth_, deadline);
  const size_t stride = piece_stride(piece.count * esize);
  uint8_t *mine = staging(rank_, step, stride * static_cast<size_t>(size_));
  for (int j = 0; j < size_; ++j) {
    if (j == rank_ && !stage_own) continue;
    stage_copy(mine + static_cast<size_t>(j) * stride,
               send + (static_cast<size_t>(j) * recv_count + piece.offset) * esize, piece.count * esize);
  }
  set_counter(&Control::in, step);
}

void ShmGroup::rs_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, size_t recv_count, Span piece,
                         size_t esize, bool own_staged, pstate_dtype_t dtype, pstate_reduce_op_t op,
                         const Deadline &deadline) {
  const size_t stride = piece_stride(piece.count * esize);
  const size_t footprint = stride * static_cast<size_t>(size_);
  const size_t my_offset = static_cast<size_t>(rank_) * stride;
  const uint8_t *own = own_staged ? staging(rank_, step, footprint) + my_offset
                                  : send + (static_cast<size_t>(rank_) * recv_count + piece.offset) * esize;
  uint8_t *dst = recv + piece.offset * esize;
  fold_in_rank_order(
      dst, size_, [&](int k) { return k == rank_ ? own : staging(k, step, footprint) + my_offset; },
      [&](int k) {
        if (k != rank_) wait_counter(k, &Control::in, step, "to stage its input", deadline);
      },
      piece.count, dtype, op);
  if (op == PSTATE_AVG) finish_avg(dst, piece.count, dtype, size_);
  finish_step(step);
}

// ---- scatter ----------------------------------------------------------------------------------

// Per step, the root stages a piece of every other rank's block (reduce_scatter's layout: the
// piece for rank j at j * stride), so every rank copies in every step and the pipeline stays
// full; rank j copies its piece out. The root's own block goes straight from send to recv.
void ShmGroup::staged_scatter(const uint8_t *send, uint8_t *recv, size_t recv_count, size_t esize, int root,
                              const Deadline &deadline) {
  prepare_staging();
  const size_t per_step = step_elems(recv_count, rs_stride(esize), esize);
  const size_t steps = ceil_div(recv_count, per_step);
  stream_out_ = recv_count * esize >= options_.stream_bytes;
  if (rank_ == root) {
    const uint8_t *own = send + static_cast<size_t>(root) * recv_count * esize;
    if (own != recv) std::memmove(recv, own, recv_count * esize);  // in place: already there
  }
  for (size_t i = 0; i < steps; ++i) {
    const uint64_t s = step_ + 1;
    const Span piece{i * per_step, std::min(per_step, recv_count - i * per_step)};
    const size_t stride = piece_stride(piece.count * esize);
    const size_t footprint = stride * static_cast<size_t>(size_);
    if (rank_ == root) {
      if (s > static_cast<uint64_t>(depth_)) wait_done(s - depth_, deadline);
      uint8_t *pieces = staging(root, s, footprint);
      for (int j = 0; j < size_; ++j)
        if (j != root)
          stage_copy(pieces + static_cast<size_t>(j) * stride,
                     send + (static_cast<size_t>(j) * recv_count + piece.offset) * esize, piece.count * esize);
      control(rank_).in.store(s, std::memory_order_release);  // finish_step notifies
    } else {
      wait_counter(root, &Control::in, s, "(the root) to stage its data", deadline);
      copy_out(recv + piece.offset * esize, staging(root, s, footprint) + static_cast<size_t>(rank_) * stride,
               piece.count * esize);
    }
    finish_step(s);
  }
}

// ---- broadcast --------------------------------------------------------------------------------

// The root's copy into its area. Ordinary stores must take each line back from the readers'
// caches, which hold it from the last round (a step that fills the whole area leaves staging()
// no room to rotate): perf of a 1 MiB broadcast showed the root 90% in memcpy and 8x slower in
// some runs, while non-temporal stores skip that ownership round trip but send the readers to
// DRAM. Which is faster depends on how far apart the cores are, so steps of 16 KiB and more
// choose by measured cost (adaptive_copy), apart from the other collectives' copies.
void ShmGroup::broadcast_stage(uint8_t *dst, const uint8_t *src, size_t bytes) {
  if (bytes >= kBroadcastAdaptiveBytes)
    adaptive_copy(broadcast_choice_, dst, src, bytes);
  else
    stage_copy(dst, src, bytes);
}

void ShmGroup::staged_broadcast(uint8_t *buf, size_t count, size_t esize, int root, const Deadline &deadline) {
  prepare_staging();
  const size_t per_step = step_elems(count, area_bytes_ / esize, esize);
  const size_t steps = ceil_div(count, per_step);
  stream_out_ = count * esize >= options_.stream_bytes;
  for (size_t i = 0; i < steps; ++i) {
    const uint64_t s = step_ + 1;
    const size_t offset = i * per_step, bytes = std::min(per_step, count - offset) * esize;
    if (rank_ == root) {
      if (s > static_cast<uint64_t>(depth_)) wait_done(s - depth_, deadline);
      broadcast_stage(staging(root, s, bytes), buf + offset * esize, bytes);
      control(rank_).in.store(s, std::memory_order_release);  // finish_step notifies
    } else {
      wait_counter(root, &Control::in, s, "(the root) to stage its data", deadline);
      copy_out(buf + offset * esize, staging(root, s, bytes), bytes);
    }
    finish_step(s);
  }
}

}  // namespace pstate::shm
