// bench_ops.cpp — OpRun: buffers, --check inputs, the pstate call and the check of one op at one
// size (see bench_ops.hpp). Only the public C API (pstate.h) is called.
#include "cli/bench_ops.hpp"

#include "common/error.hpp"

#include <cstring>

namespace pstate::cli {
namespace {
constexpr bool same(int a, int b) {
  return a == b;
}
static_assert(same(BENCH_FLOAT32, PSTATE_FLOAT32) && same(BENCH_BFLOAT16, PSTATE_BFLOAT16) &&
                  same(BENCH_FP8_E5M2, PSTATE_FP8_E5M2) && same(BENCH_DTYPE_COUNT, PSTATE_DTYPE_COUNT),
              "bench_common.h numbers element types as pstate_dtype_t does");
static_assert(same(BENCH_SUM, PSTATE_SUM) && same(BENCH_MAX, PSTATE_MAX) && same(BENCH_MIN, PSTATE_MIN),
              "bench_common.h numbers reductions as pstate_reduce_op_t does");
}  // namespace

AlignedBytes aligned_bytes(size_t bytes) {
  void *p = nullptr;
  if (::posix_memalign(&p, 4096, bytes > 0 ? bytes : 1) != 0)
    throw_error(PSTATE_ERR_NO_MEMORY, "cannot allocate ", bytes, " bytes");
  return AlignedBytes(static_cast<unsigned char *>(p));
}

OpRun::OpRun(const BenchSpec &spec, pstate_group_t *group, int rank, int size, size_t count)
    : spec_(spec),
      group_(group),
      rank_(rank),
      size_(size),
      count_(count),
      elem_(bench_dtype_size(spec.dtype)),
      block_(count * bench_dtype_size(spec.dtype)) {
  switch (spec_.op) {
    case BENCH_ALL_GATHER:
      send_bytes_ = block_, recv_bytes_ = block_ * size_;
      break;
    case BENCH_REDUCE_SCATTER:
      send_bytes_ = block_ * size_, recv_bytes_ = block_;
      break;
    case BENCH_ALL_TO_ALL:
      send_bytes_ = recv_bytes_ = block_ * size_;
      break;
    case BENCH_ALL_GATHERV:  // this rank's part is weight(rank) units of count_ elements
      for (int r = 0; r < size_; ++r) counts_.push_back(count_ * bench_gatherv_weight(r));
      send_bytes_ = counts_[rank_] * elem_, recv_bytes_ = block_ * bench_gatherv_weights(size_);
      break;
    default:
      send_bytes_ = recv_bytes_ = block_;
      break;
  }
  send_ = aligned_bytes(send_bytes_);
  recv_ = aligned_bytes(recv_bytes_);
  fill_inputs();
}

OpRun::~OpRun() {
  pstate_bytes_free(&object_);
  pstate_bytes_free(&previous_object_);
}

// The inputs of bench_common.h; outputs start as 0xee so an op that writes nothing is caught.
void OpRun::fill_inputs() {
  std::memset(recv_.get(), 0xee, recv_bytes_);
  if (bench_op_reduces(spec_.op)) {
    bench_fill_values(send_.get(), send_bytes_ / elem_, spec_.dtype, rank_, 0);
  } else if (spec_.op == BENCH_ALL_TO_ALL) {  // block j goes to rank j: its bytes say where from
    for (int j = 0; j < size_; ++j) bench_fill_pattern(send_.get() + j * block_, block_, rank_, j * block_);
  } else if (spec_.op == BENCH_ALL_GATHERV) {  // its part of the output, as all_gather's block
    bench_fill_pattern(send_.get(), send_bytes_, rank_, 0);
  } else if (spec_.op == BENCH_BROADCAST) {  // in place: the root's buffer is the output buffer
    if (rank_ == 0) bench_fill_pattern(recv_.get(), block_, 0, 0);
  } else {
    bench_fill_pattern(send_.get(), block_, rank_, 0);
  }
}

void OpRun::fail(pstate_status_t st) const {
  throw_error(st, bench_op_name(spec_.op), " of ", count_, " x ", bench_dtype_name(spec_.dtype),
              " on group rank ", rank_, " failed: ", pstate_status_string(st), ": ", pstate_last_error());
}

void OpRun::run_once() {
  pstate_status_t st = PSTATE_OK;
  unsigned char *send = send_.get(), *recv = recv_.get();
  int peer = rank_ ^ 1;
  switch (spec_.op) {
    case BENCH_ALL_REDUCE:
      st = pstate_all_reduce(group_, send, recv, count_, spec_.dtype, spec_.redop, nullptr);
      break;
    case BENCH_ALL_GATHER:
      st = pstate_all_gather(group_, send, recv, count_, spec_.dtype, nullptr);
      break;
    case BENCH_REDUCE_SCATTER:
      st = pstate_reduce_scatter(group_, send, recv, count_, spec_.dtype, spec_.redop, nullptr);
      break;
    case BENCH_BROADCAST:
      st = pstate_broadcast(group_, recv, count_, spec_.dtype, 0, nullptr);
      break;
    case BENCH_ALL_TO_ALL:
      st = pstate_all_to_all(group_, send, recv, count_, spec_.dtype, nullptr);
      break;
    case BENCH_SEND_RECV:
      if (peer >= size_) break;  // odd group: the last rank sits out
      if (rank_ % 2 == 0) {
        st = pstate_send(group_, send, count_, spec_.dtype, peer, nullptr);
        if (st == PSTATE_OK) st = pstate_recv(group_, recv, count_, spec_.dtype, peer, nullptr);
      } else {
        st = pstate_recv(group_, recv, count_, spec_.dtype, peer, nullptr);
        if (st == PSTATE_OK) st = pstate_send(group_, send, count_, spec_.dtype, peer, nullptr);
      }
      break;
    case BENCH_ALL_GATHERV:
      st = pstate_all_gatherv(group_, send, recv, counts_.data(), spec_.dtype, nullptr);
      break;
    case BENCH_SENDRECV_RING: {  // to the right, from the left, both pending at once
      if (size_ < 2) break;
      pstate_request_t *rq = nullptr, *sq = nullptr;
      st = pstate_irecv(group_, recv, count_, spec_.dtype, (rank_ + size_ - 1) % size_, nullptr, &rq);
      if (st == PSTATE_OK) st = pstate_isend(group_, send, count_, spec_.dtype, (rank_ + 1) % size_, nullptr, &sq);
      pstate_status_t rs = rq != nullptr ? pstate_wait(rq) : PSTATE_OK;
      pstate_status_t ss = sq != nullptr ? pstate_wait(sq) : PSTATE_OK;
      if (st == PSTATE_OK) st = rs != PSTATE_OK ? rs : ss;
      break;
    }
    case BENCH_BROADCAST_OBJECT:
      previous_object_ = object_;
      object_ = {nullptr, 0};
      st = pstate_broadcast_object(group_, send, block_, 0, rank_ == 0 ? nullptr : &object_);
      break;
    default:
      break;
  }
  if (st != PSTATE_OK) fail(st);
}

void OpRun::release_previous() {
  pstate_bytes_free(&previous_object_);
}

long OpRun::count_wrong() const {
  const unsigned char *recv = recv_.get();
  size_t wrong = 0;
  switch (spec_.op) {
    case BENCH_ALL_REDUCE:
      return static_cast<long>(bench_count_reduce_wrong(recv, count_, spec_.dtype, spec_.redop, size_, 0));
    case BENCH_REDUCE_SCATTER:
      return static_cast<long>(bench_count_reduce_wrong(recv, count_, spec_.dtype, spec_.redop, size_, rank_ * count_));
    case BENCH_ALL_GATHER:
      for (int j = 0; j < size_; ++j) wrong += bench_count_pattern_wrong(recv + j * block_, block_, j, 0);
      return static_cast<long>(wrong);
    case BENCH_ALL_TO_ALL:  // block j came from rank j, cut at this rank's offset
      for (int j = 0; j < size_; ++j) wrong += bench_count_pattern_wrong(recv + j * block_, block_, j, rank_ * block_);
      return static_cast<long>(wrong);
    case BENCH_ALL_GATHERV:
      for (int j = 0; j < size_; ++j)
        wrong += bench_count_pattern_wrong(recv + bench_gatherv_offset(j, count_) * elem_, counts_[j] * elem_, j, 0);
      return static_cast<long>(wrong);
    case BENCH_SENDRECV_RING:
      if (size_ < 2) return 0;
      return static_cast<long>(bench_count_pattern_wrong(recv, block_, (rank_ + size_ - 1) % size_, 0));
    case BENCH_BROADCAST:
      return static_cast<long>(bench_count_pattern_wrong(recv, block_, 0, 0));
    case BENCH_SEND_RECV:
      if ((rank_ ^ 1) >= size_) return 0;
      return static_cast<long>(bench_count_pattern_wrong(recv, block_, rank_ ^ 1, 0));
    case BENCH_BROADCAST_OBJECT: {
      if (rank_ == 0) return 0;
      const auto *got = static_cast<const unsigned char *>(object_.data);
      size_t common = object_.size < block_ ? object_.size : block_;
      size_t missing = block_ - common + (object_.size - common);  // every byte too few or too many
      return static_cast<long>(missing + (got ? bench_count_pattern_wrong(got, common, 0, 0) : 0));
    }
    default:
      return 0;
  }
}

}  // namespace pstate::cli
