// message_queue.hpp — SGLang's shm_broadcast.MessageQueue: one writer, many readers, one ring.
//
// The writer rank of a group broadcasts small byte messages (SGLang: the pickled scheduler batch
// of broadcast_object, from TP rank 0 to the other TP ranks on the node) through a ring of
// n_chunks fixed-size chunks in a shared segment, instead of a round of point-to-point messages.
//
// Protocol (sequence counters instead of SGLang's per-chunk flag bytes; same idea):
//   writer: message m goes to chunk m % n_chunks. The chunk is free once every reader has
//           consumed message m - n_chunks (consumed[i] >= m + 1 - n_chunks), so the writer
//           blocks only when the ring is full. It writes the chunk header (length, offset, flags)
//           and the payload (at an offset that rotates each time the ring comes round, so it
//           rarely overwrites lines readers still cache), then stores written = m + 1 (release)
//           and wakes sleeping readers.
//   reader: waits for written >= m + 1 (acquire), hands the payload to the caller while the chunk
//           is held, then stores consumed[i] = m + 1 (release) and wakes the writer.
// A payload larger than max_payload() is not put in the ring: the writer enqueues an overflow
// marker carrying the size (keeping the order of messages) and enqueue() returns false; the
// caller sends the bytes to every reader over the CPU communicator, and each reader's dequeue()
// returns {overflow = true, bytes} so it knows to receive them from there (SGLang does the same
// with its zmq socket).
//
// Waits are bounded by the Deadline of each call and call the liveness check of the options
// (the group layer wires it to pidfds): a reader that died is reported as PSTATE_ERR_PEER_LOST
// while the writer waits for ring space, never waited on forever; a dead writer likewise for
// readers. After a failure the queue is broken and further calls throw PSTATE_ERR_ABORTED.
//
// Set-up is collective over the group's ranks (ShmSegment protocol: the writer creates, readers
// open, the name is unlinked once all attached, so nothing remains in /dev/shm).
#pragma once

#include "common/deadline.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/shm/shm_wait.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pstate::shm {

struct ShmMessageQueueOptions {
  std::string label = "shm message queue";  // names the queue in every message ("tp:0 mq")
  size_t max_payload_bytes = 1 << 20;       // largest message carried by the ring itself
  size_t n_chunks = 8;                      // messages the ring holds before the writer blocks
  WaitOptions wait;                         // spin/yield/futex policy (-1s resolved per machine)
  std::function<void()> liveness;           // throws PSTATE_ERR_PEER_LOST when a peer is gone
};

class ShmMessageQueue {
 public:
  struct Dequeued {
    bool overflow;  // true: not in the ring; receive `bytes` bytes from the writer another way
    size_t bytes;   // size of the message
  };

  // Collective over the `size` ranks of the group; group rank `writer` writes, all others read.
  ShmMessageQueue(const std::string &name, int rank, int size, int writer, const Deadline &deadline,
                  ShmMessageQueueOptions options = {});
  ~ShmMessageQueue();
  ShmMessageQueue(const ShmMessageQueue &) = delete;
  ShmMessageQueue &operator=(const ShmMessageQueue &) = delete;

  bool is_writer() const { return rank_ == writer_; }
  int writer() const { return writer_; }
  size_t max_payload() const { return max_payload_; }
  pid_t peer_pid(int rank) const { return segment_->pid_of(rank); }
  bool broken() const { return broken_; }
  const WaitStats &wait_stats() const { return waiter_.stats(); }
  // One line for PSTATE_DEBUG=INFO: writer, readers, ring shape.
  std::string describe() const;

  // Writer only. Returns true when the message went through the ring; false when bytes >
  // max_payload(): an overflow marker was enqueued and the caller must now send the bytes to the
  // readers over the CPU communicator. Blocks only while the ring is full.
  bool enqueue(const void *data, size_t bytes, const Deadline &deadline);

  // Reader only. Waits for the next message; when it is in the ring, calls consume(data, bytes)
  // while the chunk is held (copy out of it; the pointer dies on return) and returns
  // {false, bytes}; for an overflow marker consume is not called and {true, bytes} is returned.
  Dequeued dequeue(const std::function<void(const uint8_t *data, size_t bytes)> &consume, const Deadline &deadline);
  // The same, copying the payload into *out (left empty for an overflow marker).
  Dequeued dequeue(std::vector<uint8_t> *out, const Deadline &deadline);

  struct Control;      // one side's counter and futex word, in the segment
  struct ChunkHeader;  // length and flags of one ring chunk, in the segment

 private:
  Control &writer_control() const;
  Control &reader_control(int reader) const;
  uint8_t *chunk(uint64_t message) const;
  size_t payload_offset(size_t bytes) const;
  int reader_index(int rank) const { return rank < writer_ ? rank : rank - 1; }
  int reader_rank(int reader) const { return reader < writer_ ? reader : reader + 1; }

  template <typename Body>
  auto run_guarded(const char *op, Body &&body);
  void wait_for_free_chunk(const Deadline &deadline);

  int rank_;
  int size_;
  int writer_;
  ShmMessageQueueOptions options_;
  size_t max_payload_ = 0;
  size_t chunk_stride_ = 0;
  size_t n_chunks_ = 0;
  ShmWaiter waiter_;
  std::unique_ptr<ShmSegment> segment_;
  uint8_t *controls_ = nullptr;
  uint8_t *chunks_ = nullptr;
  std::vector<uint64_t> known_consumed_;  // writer: last count read from each reader
  uint64_t next_ = 0;  // writer: messages written; reader: messages consumed
  bool broken_ = false;
};

}  // namespace pstate::shm
