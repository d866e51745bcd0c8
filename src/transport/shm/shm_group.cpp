// shm_group.cpp — the shared-memory collectives (algorithms described in shm_group.hpp).
//
// Segment payload layout: size() control blocks of kControlStride bytes (one rank's counters, so
// no two ranks write the same cache line), padded to a page, then the staging areas:
// area(rank, step) = areas_ + (rank * depth + step % depth) * area_bytes_.
#include "transport/shm/shm_group.hpp"

#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstring>

namespace pstate::shm {
namespace {

constexpr size_t kControlStride = 128;  // two cache lines: the adjacent-line prefetcher pairs them
constexpr size_t kPage = 4096;
constexpr size_t kSliceAlign = 64;      // slices start on cache lines
constexpr uint64_t kLayoutVersion = 1;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t ceil_div(size_t n, size_t d) { return (n + d - 1) / d; }

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

bool ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// dst = input(0) op input(1) op ... op input(n_inputs - 1), folded in that order, waiting for each
// input just before it is used. No input may alias dst (callers fold from staged copies).
template <typename Input, typename WaitFor>
void fold_in_rank_order(void *dst, int n_inputs, Input &&input, WaitFor &&wait_for, size_t count,
                        pstate_dtype_t dtype, pstate_reduce_op_t op) {
  wait_for(0);
  wait_for(1);
  reduce_into(dst, input(0), input(1), count, dtype, op);
  for (int k = 2; k < n_inputs; ++k) {
    wait_for(k);
    reduce_inplace(dst, input(k), count, dtype, op);
  }
}

}  // namespace

struct ShmGroup::Control {
  alignas(64) std::atomic<uint64_t> in;  // last step whose input this rank staged
  std::atomic<uint64_t> out;             // last step whose slice this rank reduced (all_reduce)
  std::atomic<uint64_t> done;            // last step after which this rank reads no peer's area
  ShmSignal signal;                      // notified after each store above
};
static_assert(sizeof(ShmGroup::Control) <= kControlStride);

ShmGroup::ShmGroup(const std::string &name, int rank, int size, const Deadline &deadline, ShmGroupOptions options)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      waiter_(resolve_wait_options(options_.wait, size), options_.liveness) {
  if (size < 1 || rank < 0 || rank >= size)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": rank ", rank, " out of range for ", size, " ranks");
  depth_ = std::clamp(options_.pipeline_depth, 2, 64);
  area_bytes_ = round_up(std::max({options_.chunk_bytes, kSliceAlign * static_cast<size_t>(size), kPage}), kPage);
  const size_t control_bytes = round_up(kControlStride * static_cast<size_t>(size), kPage);
  const size_t area_total = area_bytes_ * static_cast<size_t>(depth_) * static_cast<size_t>(size);

  ShmSegment::Params params;
  params.name = name;
  params.label = options_.label;
  params.rank = rank;
  params.size = size;
  params.creator = 0;
  params.payload_bytes = control_bytes + area_total;
  params.layout_tag = mix(mix(mix(mix(kLayoutVersion, area_bytes_), static_cast<uint64_t>(depth_)),
                              options_.small_bytes),
                          static_cast<uint64_t>(size));
  segment_ = std::make_unique<ShmSegment>(params, deadline, waiter_);
  controls_ = segment_->payload();
  areas_ = controls_ + control_bytes;
}

ShmGroup::~ShmGroup() = default;

ShmGroup::Control &ShmGroup::control(int rank) const {
  return *reinterpret_cast<Control *>(controls_ + kControlStride * static_cast<size_t>(rank));
}

uint8_t *ShmGroup::area(int rank, uint64_t step) const {
  size_t index = static_cast<size_t>(rank) * static_cast<size_t>(depth_) + static_cast<size_t>(step % depth_);
  return areas_ + index * area_bytes_;
}

// Elements per slice when a chunk of `count` elements is split over the ranks: a whole number
// of cache lines, so the last slices may be short or empty.
size_t ShmGroup::slice_elems(size_t count, size_t esize) const {
  size_t align = kSliceAlign / esize;
  return round_up(ceil_div(count, static_cast<size_t>(size_)), align);
}

ShmGroup::Span ShmGroup::slice(size_t count, int j, size_t esize) const {
  size_t per = slice_elems(count, esize);
  size_t begin = std::min(count, per * static_cast<size_t>(j));
  size_t end = std::min(count, begin + per);
  return {begin, end - begin};
}

// ---- waiting and signalling -------------------------------------------------------------------

void ShmGroup::set_counter(Counter counter, uint64_t step) {
  Control &mine = control(rank_);
  (mine.*counter).store(step, std::memory_order_release);
  mine.signal.notify();
}

void ShmGroup::wait_counter(int peer, Counter counter, uint64_t step, const char *what, const Deadline &deadline) {
  Control &theirs = control(peer);
  waiter_.wait(
      theirs.signal, [&] { return (theirs.*counter).load(std::memory_order_acquire) >= step; }, deadline, [&] {
        return cat(options_.label, " rank ", rank_, ": ", current_op_, " (step ", step, "): waiting for rank ",
                   peer, " ", what);
      });
}

// Before writing my area for `step`, every peer must be done with what it read at step - depth.
void ShmGroup::wait_area_free(uint64_t step, const Deadline &deadline) {
  if (step <= static_cast<uint64_t>(depth_)) return;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) wait_counter(p, &Control::done, step - depth_, "to finish reading an earlier step", deadline);
}

template <typename Body>
void ShmGroup::run_guarded(const char *op, Body &&body) {
  if (broken_)
    throw_error(PSTATE_ERR_ABORTED, options_.label, " rank ", rank_, ": ", op,
                " refused: an earlier shared-memory collective failed, peers are at unknown steps "
                "(abort or finalize the context)");
  current_op_ = op;
  try {
    body();
  } catch (...) {
    broken_ = true;
    throw;
  }
}

// ---- argument checks --------------------------------------------------------------------------

size_t ShmGroup::checked_dtype_size(const char *op, pstate_dtype_t dtype, size_t count, size_t multiple) const {
  size_t esize = dtype_size(dtype);
  if (esize == 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": invalid dtype ", static_cast<int>(dtype));
  if (count > SIZE_MAX / esize / multiple)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": count ", count, " overflows size_t");
  return esize;
}

void ShmGroup::check_reduce(const char *op, pstate_dtype_t dtype, pstate_reduce_op_t op_kind) const {
  if (op_kind < PSTATE_SUM || op_kind > PSTATE_AVG)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": invalid reduce op ",
                static_cast<int>(op_kind));
  if (!is_reducible(dtype))
    throw_error(PSTATE_ERR_UNSUPPORTED, options_.label, ": ", op, ": dtype ", static_cast<int>(dtype),
                " cannot be reduced on CPU (fp8 is move-only; reduce in a wider type)");
}

void ShmGroup::check_buffers(const char *op, const void *send, const void *recv, size_t count) const {
  if (count != 0 && (send == nullptr || recv == nullptr))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": ", send == nullptr ? "send" : "recv",
                " is NULL with count ", count);
}

// ---- all_reduce -------------------------------------------------------------------------------

void ShmGroup::all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                          const Deadline &deadline) {
  size_t esize = checked_dtype_size("all_reduce", dtype, count, 1);
  check_reduce("all_reduce", dtype, op);
  check_buffers("all_reduce", send, recv, count);
  if (count == 0) return;
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  run_guarded("all_reduce", [&] {
    if (size_ == 1) {
      if (in != out) std::memmove(out, in, count * esize);
    } else if (count * esize <= std::min(options_.small_bytes, area_bytes_)) {
      all_reduce_small(in, out, count, esize, dtype, op, deadline);
    } else {
      all_reduce_pipelined(in, out, count, esize, dtype, op, deadline);
    }
  });
}

void ShmGroup::all_reduce_small(const uint8_t *send, uint8_t *recv, size_t count, size_t esize, pstate_dtype_t dtype,
                                pstate_reduce_op_t op, const Deadline &deadline) {
  const uint64_t s = step_ + 1;
  wait_area_free(s, deadline);
  std::memcpy(area(rank_, s), send, count * esize);  // recv may alias send: fold from the areas
  set_counter(&Control::in, s);
  fold_in_rank_order(
      recv, size_, [&](int k) { return area(k, s); },
      [&](int k) {
        if (k != rank_) wait_counter(k, &Control::in, s, "to stage its input", deadline);
      },
      count, dtype, op);
  if (op == PSTATE_AVG) finish_avg(recv, count, dtype, size_);
  set_counter(&Control::done, s);
  step_ = s;
}

void ShmGroup::all_reduce_pipelined(const uint8_t *send, uint8_t *recv, size_t count, size_t esize,
                                    pstate_dtype_t dtype, pstate_reduce_op_t op, const Deadline &deadline) {
  const size_t per_step = area_bytes_ / esize;
  const size_t steps = ceil_div(count, per_step);
  const uint64_t first = step_ + 1;
  auto chunk = [&](size_t i) { return Span{i * per_step, std::min(per_step, count - i * per_step)}; };
  ar_publish(first, send, chunk(0), esize, deadline);
  for (size_t i = 0; i < steps; ++i) {
    ar_reduce(first + i, send, chunk(i), esize, dtype, op, deadline);
    if (i + 1 < steps) ar_publish(first + i + 1, send, chunk(i + 1), esize, deadline);
    ar_gather(first + i, recv, chunk(i), esize, deadline);
  }
  step_ = first + steps - 1;
}

// Stage my input for every other rank's slice of this chunk in my area.
void ShmGroup::ar_publish(uint64_t step, const uint8_t *send, Span chunk, size_t esize, const Deadline &deadline) {
  wait_area_free(step, deadline);
  uint8_t *mine = area(rank_, step);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    Span sl = slice(chunk.count, j, esize);
    std::memcpy(mine + sl.offset * esize, send + (chunk.offset + sl.offset) * esize, sl.count * esize);
  }
  set_counter(&Control::in, step);
}

// Reduce my slice from every rank's input, in rank order, into my own area's slice.
void ShmGroup::ar_reduce(uint64_t step, const uint8_t *send, Span chunk, size_t esize, pstate_dtype_t dtype,
                         pstate_reduce_op_t op, const Deadline &deadline) {
  Span mine = slice(chunk.count, rank_, esize);
  if (mine.count != 0) {
    uint8_t *dst = area(rank_, step) + mine.offset * esize;
    const uint8_t *own = send + (chunk.offset + mine.offset) * esize;
    fold_in_rank_order(
        dst, size_, [&](int k) { return k == rank_ ? own : area(k, step) + mine.offset * esize; },
        [&](int k) {
          if (k != rank_) wait_counter(k, &Control::in, step, "to stage its input", deadline);
        },
        mine.count, dtype, op);
    if (op == PSTATE_AVG) finish_avg(dst, mine.count, dtype, size_);
  }
  set_counter(&Control::out, step);
}

// Copy every rank's reduced slice into recv, my own first, then the next ranks in turn.
void ShmGroup::ar_gather(uint64_t step, uint8_t *recv, Span chunk, size_t esize, const Deadline &deadline) {
  for (int n = 0; n < size_; ++n) {
    int j = (rank_ + n) % size_;
    Span sl = slice(chunk.count, j, esize);
    if (j != rank_) wait_counter(j, &Control::out, step, "to reduce its slice", deadline);
    std::memcpy(recv + (chunk.offset + sl.offset) * esize, area(j, step) + sl.offset * esize, sl.count * esize);
  }
  set_counter(&Control::done, step);
}

// ---- all_gather -------------------------------------------------------------------------------

void ShmGroup::all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                          const Deadline &deadline) {
  size_t esize = checked_dtype_size("all_gather", dtype, send_count, static_cast<size_t>(size_));
  check_buffers("all_gather", send, recv, send_count);
  if (send_count == 0) return;
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  run_guarded("all_gather", [&] {
    if (size_ == 1) {
      if (in != out) std::memmove(out, in, send_count * esize);
      return;
    }
    const size_t per_step = area_bytes_ / esize;
    const size_t steps = ceil_div(send_count, per_step);
    const uint64_t first = step_ + 1;
    auto piece = [&](size_t i) { return Span{i * per_step, std::min(per_step, send_count - i * per_step)}; };
    ag_publish(first, in, piece(0), esize, deadline);
    for (size_t i = 0; i < steps; ++i) {
      if (i + 1 < steps) ag_publish(first + i + 1, in, piece(i + 1), esize, deadline);
      ag_gather(first + i, in, out, send_count, piece(i), esize, deadline);
    }
    step_ = first + steps - 1;
  });
}

void ShmGroup::ag_publish(uint64_t step, const uint8_t *send, Span piece, size_t esize, const Deadline &deadline) {
  wait_area_free(step, deadline);
  std::memcpy(area(rank_, step), send + piece.offset * esize, piece.count * esize);
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
    std::memcpy(dst, area(j, step), bytes);
  }
  set_counter(&Control::done, step);
}

// ---- reduce_scatter ---------------------------------------------------------------------------

void ShmGroup::reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                              pstate_reduce_op_t op, const Deadline &deadline) {
  size_t esize = checked_dtype_size("reduce_scatter", dtype, recv_count, static_cast<size_t>(size_));
  check_reduce("reduce_scatter", dtype, op);
  check_buffers("reduce_scatter", send, recv, recv_count);
  if (recv_count == 0) return;
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  run_guarded("reduce_scatter", [&] {
    if (size_ == 1) {
      if (in != out) std::memmove(out, in, recv_count * esize);
      return;
    }
    // Where recv overlaps send, my own contribution is staged too, so writing recv cannot
    // clobber an input that is still to be read.
    const bool stage_own = ranges_overlap(out, recv_count * esize, in, recv_count * esize * size_);
    const size_t per_step = rs_stride(esize);
    const size_t steps = ceil_div(recv_count, per_step);
    const uint64_t first = step_ + 1;
    auto piece = [&](size_t i) { return Span{i * per_step, std::min(per_step, recv_count - i * per_step)}; };
    rs_publish(first, in, recv_count, piece(0), esize, stage_own, deadline);
    for (size_t i = 0; i < steps; ++i) {
      if (i + 1 < steps) rs_publish(first + i + 1, in, recv_count, piece(i + 1), esize, stage_own, deadline);
      rs_reduce(first + i, in, out, recv_count, piece(i), esize, stage_own, dtype, op, deadline);
    }
    step_ = first + steps - 1;
  });
}

// Elements of one destination's piece per step: the area holds size() of them, cache-aligned.
size_t ShmGroup::rs_stride(size_t esize) const {
  size_t align = kSliceAlign / esize;
  return area_bytes_ / static_cast<size_t>(size_) / esize / align * align;
}

void ShmGroup::rs_publish(uint64_t step, const uint8_t *send, size_t recv_count, Span piece, size_t esize,
                          bool stage_own, const Deadline &deadline) {
  wait_area_free(step, deadline);
  uint8_t *mine = area(rank_, step);
  const size_t stride = rs_stride(esize);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_ && !stage_own) continue;
    std::memcpy(mine + static_cast<size_t>(j) * stride * esize,
                send + (static_cast<size_t>(j) * recv_count + piece.offset) * esize, piece.count * esize);
  }
  set_counter(&Control::in, step);
}

void ShmGroup::rs_reduce(uint64_t step, const uint8_t *send, uint8_t *recv, size_t recv_count, Span piece,
                         size_t esize, bool own_staged, pstate_dtype_t dtype, pstate_reduce_op_t op,
                         const Deadline &deadline) {
  const size_t my_offset = static_cast<size_t>(rank_) * rs_stride(esize) * esize;
  const uint8_t *own = own_staged ? area(rank_, step) + my_offset
                                  : send + (static_cast<size_t>(rank_) * recv_count + piece.offset) * esize;
  uint8_t *dst = recv + piece.offset * esize;
  fold_in_rank_order(
      dst, size_, [&](int k) { return k == rank_ ? own : area(k, step) + my_offset; },
      [&](int k) {
        if (k != rank_) wait_counter(k, &Control::in, step, "to stage its input", deadline);
      },
      piece.count, dtype, op);
  if (op == PSTATE_AVG) finish_avg(dst, piece.count, dtype, size_);
  set_counter(&Control::done, step);
}

// ---- broadcast and barrier --------------------------------------------------------------------

void ShmGroup::broadcast(void *buf, size_t count, pstate_dtype_t dtype, int root, const Deadline &deadline) {
  size_t esize = checked_dtype_size("broadcast", dtype, count, 1);
  check_buffers("broadcast", buf, buf, count);
  if (root < 0 || root >= size_)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": broadcast: root ", root, " out of range for ",
                size_, " ranks");
  if (count == 0 || size_ == 1) return;
  auto *data = static_cast<uint8_t *>(buf);
  run_guarded("broadcast", [&] {
    const size_t per_step = area_bytes_ / esize;
    const size_t steps = ceil_div(count, per_step);
    for (size_t i = 0; i < steps; ++i) {
      const uint64_t s = step_ + 1;
      const size_t offset = i * per_step, bytes = std::min(per_step, count - offset) * esize;
      if (rank_ == root) {
        wait_area_free(s, deadline);
        std::memcpy(area(root, s), data + offset * esize, bytes);
        control(rank_).in.store(s, std::memory_order_release);
      } else {
        wait_counter(root, &Control::in, s, "(the root) to stage its data", deadline);
        std::memcpy(data + offset * esize, area(root, s), bytes);
      }
      set_counter(&Control::done, s);
      step_ = s;
    }
  });
}

void ShmGroup::barrier(const Deadline &deadline) {
  if (size_ == 1) return;
  run_guarded("barrier", [&] {
    const uint64_t s = step_ + 1;
    set_counter(&Control::in, s);
    for (int n = 1; n < size_; ++n)
      wait_counter((rank_ + n) % size_, &Control::in, s, "to enter the barrier", deadline);
    set_counter(&Control::done, s);
    step_ = s;
  });
}

}  // namespace pstate::shm
