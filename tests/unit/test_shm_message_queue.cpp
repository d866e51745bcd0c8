// test_shm_message_queue.cpp — ShmMessageQueue: order, back-pressure, overflow, dead peers.
//
// Real forked ranks: one writer, the others readers. Each message's size and bytes are a
// function of its index, so every reader checks every message independently. Nothing may be
// left in /dev/shm after any test, dead ranks included.
#include "test_shm_util.hpp"
#include "transport/shm/message_queue.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
}

using namespace shmtest;
using pstate::Deadline;
using pstate::shm::ShmMessageQueue;
using pstate::shm::ShmMessageQueueOptions;

namespace {

ShmMessageQueueOptions queue_options(PeerWatch *watch, size_t max_payload, size_t n_chunks) {
  ShmMessageQueueOptions o;
  o.label = "test mq";
  o.max_payload_bytes = max_payload;
  o.n_chunks = n_chunks;
  o.wait.liveness_interval_ms = 20;
  if (watch) o.liveness = [watch] { (*watch)(); };
  return o;
}

Deadline generous() { return Deadline::after_ms(60000); }

// Message m: (m * 37) % 3000 bytes (0 included), byte k = low bits of mix64(m, k).
std::vector<uint8_t> message(uint64_t m, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t k = 0; k < bytes; ++k) v[k] = static_cast<uint8_t>(mix64((m << 32) ^ k));
  return v;
}
size_t message_size(uint64_t m) { return (m * 37) % 3000; }

// 1 writer + 3 readers, 300 messages through a 4-chunk ring; readers are slow in turns (the
// writer outruns them and must wait), yet each reader sees every message, in order, intact.
void test_readers_get_every_message_in_order_despite_slow_readers(void **) {
  const int size = 4, writer = 1, n = 300;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mq-order");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmMessageQueue q(name, rank, size, writer, generous(), queue_options(&watch, 4096, 4));
    if (q.is_writer()) {
      for (uint64_t m = 0; m < n; ++m)
        if (!q.enqueue(message(m, message_size(m)).data(), message_size(m), generous())) return 1;
      return 0;
    }
    std::vector<uint8_t> got;
    for (uint64_t m = 0; m < n; ++m) {
      if ((m / 25) % size == static_cast<uint64_t>(rank)) usleep(300);  // this reader's slow spell
      ShmMessageQueue::Dequeued d = q.dequeue(&got, generous());
      if (d.overflow || d.bytes != message_size(m) || got != message(m, message_size(m))) {
        fprintf(stderr, "rank %d: message %lu wrong (%zu bytes, overflow %d)\n", rank, (unsigned long)m, d.bytes,
                d.overflow);
        return 1;
      }
    }
    return 0;
  });
  assert_true(all_ok(statuses));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Readers do not read until told. The writer fills the 3-chunk ring without blocking (short
// deadline), and the 4th enqueue blocks: it times out. Then readers get the 3 messages.
void test_writer_blocks_only_when_ring_is_full(void **) {
  const int size = 3, writer = 0, chunks = 3;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mq-full");
  auto statuses = run_ranks(size, board, [&](int rank) {
    ShmMessageQueue q(name, rank, size, writer, generous(), queue_options(nullptr, 1024, chunks));
    if (q.is_writer()) {
      for (uint64_t m = 0; m < chunks; ++m)
        if (status_of([&] { q.enqueue(message(m, 100).data(), 100, Deadline::after_ms(5000)); }) != PSTATE_OK)
          return 1;  // blocked before the ring was full
      pstate_status_t st = status_of([&] { q.enqueue(message(9, 100).data(), 100, Deadline::after_ms(200)); });
      board->word[rank].store(st);
      board->flag.store(1);  // release the readers
      return st == PSTATE_ERR_TIMEOUT ? 0 : 2;
    }
    while (board->flag.load() == 0) usleep(1000);
    std::vector<uint8_t> got;
    for (uint64_t m = 0; m < chunks; ++m) {
      q.dequeue(&got, generous());
      if (got != message(m, 100)) return 3;
    }
    return 0;
  });
  assert_true(all_ok(statuses));
  assert_int_equal(board->word[0].load(), PSTATE_ERR_TIMEOUT);
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// A 2-chunk ring carries 200 messages to 2 readers: the writer waits for ring space and resumes
// as readers free chunks (back-pressure, not failure).
void test_back_pressure_lets_a_small_ring_carry_many_messages(void **) {
  const int size = 3, writer = 2, n = 200;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mq-pressure");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmMessageQueue q(name, rank, size, writer, generous(), queue_options(&watch, 64, 2));
    if (q.is_writer()) {
      for (uint64_t m = 0; m < n; ++m) q.enqueue(message(m, m % 65).data(), m % 65, generous());
      return 0;
    }
    std::vector<uint8_t> got;
    for (uint64_t m = 0; m < n; ++m) {
      if (m % 50 == 0) usleep(2000);
      q.dequeue(&got, generous());
      if (got != message(m, m % 65)) return 1;
    }
    return 0;
  });
  assert_true(all_ok(statuses));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// A payload over max_payload is not put in the ring: enqueue returns false and readers get the
// overflow flag with its size, in its place in the order.
void test_oversize_payload_is_flagged_for_the_cpu_fallback(void **) {
  const int size = 3, writer = 0;
  const size_t max_payload = 1000;
  const size_t sizes[] = {10, max_payload, max_payload + 1, 0, 5000, 7};
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mq-overflow");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmMessageQueue q(name, rank, size, writer, generous(), queue_options(&watch, max_payload, 8));
    if (q.max_payload() != max_payload) return 1;
    for (uint64_t m = 0; m < std::size(sizes); ++m) {
      const bool fits = sizes[m] <= max_payload;
      if (q.is_writer()) {
        if (q.enqueue(message(m, sizes[m]).data(), sizes[m], generous()) != fits) return 2;
        continue;
      }
      std::vector<uint8_t> got;
      ShmMessageQueue::Dequeued d = q.dequeue(&got, generous());
      if (d.overflow == fits || d.bytes != sizes[m]) return 3;
      if (fits && got != message(m, sizes[m])) return 4;
      if (!fits && !got.empty()) return 5;
    }
    return 0;
  });
  assert_true(all_ok(statuses));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Reader rank 2 dies after one message; the writer, whose 2-chunk ring then fills, must get
// PEER_LOST from its liveness check (its deadline is far away), not wait forever.
void test_dead_reader_is_reported_to_the_writer(void **) {
  const int size = 3, writer = 0;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mq-dead-reader");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmMessageQueue q(name, rank, size, writer, generous(), queue_options(&watch, 128, 2));
    std::vector<uint8_t> got;
    if (rank == 2) {
      q.dequeue(&got, generous());
      raise(SIGKILL);
    }
    pstate_status_t st = status_of([&] {
      for (uint64_t m = 0;; ++m) {
        if (q.is_writer())
          q.enqueue(message(m, 16).data(), 16, generous());
        else
          q.dequeue(&got, generous());
      }
    });
    board->word[rank].store(st);
    bool refused = status_of([&] {
                     if (q.is_writer()) q.enqueue("x", 1, generous());
                     else q.dequeue(&got, generous());
                   }) == PSTATE_ERR_ABORTED;
    return st == PSTATE_ERR_PEER_LOST && refused ? 0 : 1;
  });
  assert_true(WIFSIGNALED(statuses[2]));
  assert_true(exited_ok(statuses[0]));
  assert_true(exited_ok(statuses[1]));
  assert_int_equal(board->word[0].load(), PSTATE_ERR_PEER_LOST);
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// The writer dies after three messages: readers get those three, then PEER_LOST.
void test_dead_writer_is_reported_to_readers(void **) {
  const int size = 3, writer = 1;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mq-dead-writer");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmMessageQueue q(name, rank, size, writer, generous(), queue_options(&watch, 128, 8));
    if (q.is_writer()) {
      for (uint64_t m = 0; m < 3; ++m) q.enqueue(message(m, 16).data(), 16, generous());
      raise(SIGKILL);
    }
    std::vector<uint8_t> got;
    for (uint64_t m = 0; m < 3; ++m) {
      q.dequeue(&got, generous());
      if (got != message(m, 16)) return 2;
    }
    pstate_status_t st = status_of([&] { q.dequeue(&got, generous()); });
    board->word[rank].store(st);
    return st == PSTATE_ERR_PEER_LOST ? 0 : 1;
  });
  assert_true(WIFSIGNALED(statuses[1]));
  assert_true(exited_ok(statuses[0]));
  assert_true(exited_ok(statuses[2]));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Roles are enforced: a reader cannot enqueue, the writer cannot dequeue.
void test_wrong_role_calls_are_invalid_state(void **) {
  const int size = 2, writer = 0;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mq-roles");
  auto statuses = run_ranks(size, board, [&](int rank) {
    ShmMessageQueue q(name, rank, size, writer, generous(), queue_options(nullptr, 64, 2));
    std::vector<uint8_t> got;
    pstate_status_t st = q.is_writer() ? status_of([&] { q.dequeue(&got, generous()); })
                                       : status_of([&] { q.enqueue("x", 1, generous()); });
    return st == PSTATE_ERR_INVALID_STATE && !q.broken() ? 0 : 1;
  });
  assert_true(all_ok(statuses));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_readers_get_every_message_in_order_despite_slow_readers),
      cmocka_unit_test(test_writer_blocks_only_when_ring_is_full),
      cmocka_unit_test(test_back_pressure_lets_a_small_ring_carry_many_messages),
      cmocka_unit_test(test_oversize_payload_is_flagged_for_the_cpu_fallback),
      cmocka_unit_test(test_dead_reader_is_reported_to_the_writer),
      cmocka_unit_test(test_dead_writer_is_reported_to_readers),
      cmocka_unit_test(test_wrong_role_calls_are_invalid_state),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
