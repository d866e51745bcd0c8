// message_queue.cpp — the single-writer, many-reader shared-memory ring (protocol in the header).
//
// Segment payload layout: the writer's control block, one control block per reader (each
// kQueueControlStride bytes, so no two ranks write the same cache line), padded to a page, then
// n_chunks chunks of chunk_stride_ bytes: a 64-byte ChunkHeader and the payload.
#include "transport/shm/message_queue.hpp"

#include "common/arith.hpp"

#include <algorithm>
#include <cstring>

namespace pstate::shm {
namespace {

constexpr size_t kQueueControlStride = 128;
constexpr uint32_t kOverflow = 1;
constexpr uint64_t kQueueLayoutVersion = 1;


}  // namespace

struct ShmMessageQueue::Control {
  alignas(64) std::atomic<uint64_t> count;  // writer: messages written; reader: messages consumed
  ShmSignal signal;                         // notified after each store of count
};
static_assert(sizeof(ShmMessageQueue::Control) <= kQueueControlStride);

struct ShmMessageQueue::ChunkHeader {
  uint64_t bytes;
  uint64_t offset;  // where in the chunk's payload room the bytes start
  uint32_t flags;
};
constexpr size_t kChunkHeaderBytes = 64;
static_assert(sizeof(ShmMessageQueue::ChunkHeader) <= kChunkHeaderBytes);

ShmMessageQueue::ShmMessageQueue(const std::string &name, int rank, int size, int writer, const Deadline &deadline,
                                 ShmMessageQueueOptions options)
    : rank_(rank),
      size_(size),
      writer_(writer),
      options_(std::move(options)),
      waiter_(resolve_wait_options(options_.wait, size), options_.liveness) {
  if (size < 1 || rank < 0 || rank >= size || writer < 0 || writer >= size)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": rank ", rank, " / writer ", writer,
                " out of range for ", size, " ranks");
  if (options_.n_chunks < 1 || options_.max_payload_bytes < 1 || options_.max_payload_bytes > (size_t{1} << 40))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": n_chunks (", options_.n_chunks,
                ") and max_payload_bytes (", options_.max_payload_bytes, ") must be at least 1");
  max_payload_ = options_.max_payload_bytes;
  n_chunks_ = options_.n_chunks;
  chunk_stride_ = round_up(kChunkHeaderBytes + max_payload_, 64);
  const size_t control_bytes = round_up(kQueueControlStride * static_cast<size_t>(size), kPageBytes);

  ShmSegment::Params params;
  params.name = name;
  params.label = options_.label;
  params.rank = rank;
  params.size = size;
  params.creator = writer;
  params.payload_bytes = control_bytes + chunk_stride_ * n_chunks_;
  params.layout_tag = kQueueLayoutVersion ^ (max_payload_ << 8) ^ (n_chunks_ << 48) ^ (static_cast<uint64_t>(writer) << 32);
  params.attach_flags = options_.wait.asymmetric_fences && register_for_asymmetric_fences()
                            ? 0
                            : ShmSegment::kNoAsymmetricFence;
  segment_ = std::make_unique<ShmSegment>(params, deadline, waiter_);
  waiter_.set_light_notify((segment_->group_flags() & ShmSegment::kNoAsymmetricFence) == 0);
  controls_ = segment_->payload();
  chunks_ = controls_ + control_bytes;
  known_consumed_.assign(static_cast<size_t>(size - 1), 0);
}

ShmMessageQueue::~ShmMessageQueue() = default;

std::string ShmMessageQueue::describe() const {
  return cat(options_.label, ": shared-memory message queue, writer rank ", writer_, ", ", size_ - 1, " readers, ",
             n_chunks_, " chunks of ", max_payload_, " B (larger messages: overflow to the CPU communicator)");
}

ShmMessageQueue::Control &ShmMessageQueue::writer_control() const {
  return *reinterpret_cast<Control *>(controls_);
}

ShmMessageQueue::Control &ShmMessageQueue::reader_control(int reader) const {
  return *reinterpret_cast<Control *>(controls_ + kQueueControlStride * (1 + static_cast<size_t>(reader)));
}

uint8_t *ShmMessageQueue::chunk(uint64_t message) const {
  return chunks_ + static_cast<size_t>(message % n_chunks_) * chunk_stride_;
}

template <typename Body>
auto ShmMessageQueue::run_guarded(const char *op, Body &&body) {
  if (broken_)
    throw_error(PSTATE_ERR_ABORTED, options_.label, " rank ", rank_, ": ", op,
                " refused: an earlier call on this queue failed (abort or finalize the context)");
  try {
    return body();
  } catch (...) {
    broken_ = true;
    throw;
  }
}

// The chunk of message next_ is free once every reader consumed message next_ - n_chunks. The
// last count read from each reader is cached, so a ring that is not full costs no cache miss.
void ShmMessageQueue::wait_for_free_chunk(const Deadline &deadline) {
  if (next_ < n_chunks_) return;
  const uint64_t need = next_ + 1 - n_chunks_;
  for (int i = 0; i < size_ - 1; ++i) {
    if (known_consumed_[i] >= need) continue;
    Control &reader = reader_control(i);
    waiter_.wait(
        reader.signal, [&] { return reader.count.load(std::memory_order_acquire) >= need; }, deadline, [&] {
          return cat(options_.label, " rank ", rank_, ": enqueue of message ", next_, ": ring full (", n_chunks_,
                     " chunks), waiting for reader rank ", reader_rank(i), " which consumed ",
                     reader.count.load(), " messages");
        });
    known_consumed_[i] = reader.count.load(std::memory_order_acquire);
  }
}

// Where message next_ (of `bytes`) starts in its chunk: the offset turns each time the ring comes
// round, so the writer rarely stores into lines the readers still cache (taking a line back
// from another core's cache is the slowest store there is: 16 KiB cost ~8 us that way).
size_t ShmMessageQueue::payload_offset(size_t bytes) const {
  const size_t footprint = (bytes + 63) / 64 * 64;
  if (footprint >= max_payload_) return 0;
  const size_t room = max_payload_ - bytes;
  return static_cast<size_t>((next_ / n_chunks_) * footprint % (room + 1)) / 64 * 64;
}

bool ShmMessageQueue::enqueue(const void *data, size_t bytes, const Deadline &deadline) {
  if (!is_writer())
    throw_error(PSTATE_ERR_INVALID_STATE, options_.label, ": enqueue on rank ", rank_, " but only rank ", writer_,
                " writes this queue (readers call dequeue)");
  if (bytes != 0 && data == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": enqueue: data is NULL with ", bytes, " bytes");
  return run_guarded("enqueue", [&] {
    wait_for_free_chunk(deadline);
    uint8_t *c = chunk(next_);
    auto *header = reinterpret_cast<ChunkHeader *>(c);
    const bool fits = bytes <= max_payload_;
    header->bytes = bytes;
    header->offset = fits ? payload_offset(bytes) : 0;
    header->flags = fits ? 0 : kOverflow;
    if (fits && bytes != 0) std::memcpy(c + kChunkHeaderBytes + header->offset, data, bytes);
    ++next_;
    Control &mine = writer_control();
    mine.count.store(next_, std::memory_order_release);
    waiter_.notify(mine.signal);
    return fits;
  });
}

ShmMessageQueue::Dequeued ShmMessageQueue::dequeue(
    const std::function<void(const uint8_t *data, size_t bytes)> &consume, const Deadline &deadline) {
  if (is_writer())
    throw_error(PSTATE_ERR_INVALID_STATE, options_.label, ": dequeue on rank ", rank_,
                " which is the writer of this queue (it calls enqueue)");
  return run_guarded("dequeue", [&] {
    Control &writer = writer_control();
    const uint64_t need = next_ + 1;
    waiter_.wait(
        writer.signal, [&] { return writer.count.load(std::memory_order_acquire) >= need; }, deadline, [&] {
          return cat(options_.label, " rank ", rank_, ": dequeue of message ", next_, ": waiting for writer rank ",
                     writer_, " to enqueue it");
        });
    const uint8_t *c = chunk(next_);
    const auto *header = reinterpret_cast<const ChunkHeader *>(c);
    Dequeued result{(header->flags & kOverflow) != 0, static_cast<size_t>(header->bytes)};
    if (!result.overflow && (result.bytes > max_payload_ || header->offset > max_payload_ - result.bytes))
      throw_error(PSTATE_ERR_INTERNAL, options_.label, ": message ", next_, " claims ", result.bytes,
                  " bytes at offset ", header->offset, " in a chunk of ", max_payload_, " (corrupt segment)");
    if (!result.overflow) consume(c + kChunkHeaderBytes + header->offset, result.bytes);
    ++next_;
    Control &mine = reader_control(reader_index(rank_));
    mine.count.store(next_, std::memory_order_release);
    waiter_.notify(mine.signal);
    return result;
  });
}

ShmMessageQueue::Dequeued ShmMessageQueue::dequeue(std::vector<uint8_t> *out, const Deadline &deadline) {
  if (out == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": dequeue: out is NULL");
  out->clear();
  return dequeue([&](const uint8_t *data, size_t bytes) { out->assign(data, data + bytes); }, deadline);
}

}  // namespace pstate::shm
