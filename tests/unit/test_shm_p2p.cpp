// test_shm_p2p.cpp — ShmP2p's byte rings under pressure: small rings, every message size class,
// both directions at once, by value and by reference, processes and threads.
//
// The group-level tests (tests/api/test_p2p*.c) use the default 512 KiB rings, where a message
// of a few bytes never meets the end of the ring or a full ring. Here the rings are 4 KiB, so
// within a few hundred messages every case of the stream happens many times: a whole message
// (header and payload published at once) wrapping around the end of the ring, a header-first
// message larger than the ring streaming through it chunk by chunk, a writer that must wait for
// room, the zeroed slot behind each message, and messages by reference (process_vm_readv) among
// them. Message m's size and bytes are functions of m, computed here, so every receiver checks
// every message independently of the engine. Nothing may be left in /dev/shm.
#include "test_shm_util.hpp"
#include "transport/shm/shm_p2p.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
}

using namespace shmtest;
using pstate::Deadline;
using pstate::shm::ShmP2p;
using pstate::shm::ShmP2pOptions;

namespace {

constexpr size_t kRing = 4096;

// Sizes cycle through the classes: empty, tiny, a few lines, just under / over what fits in the
// ring whole, several times the ring (header first, streamed), and by reference (>= cma_bytes).
size_t message_size(uint64_t m, uint64_t from) {
  static const size_t sizes[] = {0, 1, 8, 15, 16, 17, 100, 1000, kRing - 48, kRing - 32, kRing - 31,
                                 kRing + 5, 3 * kRing + 7, 20000, 70000};
  return sizes[(m * 7 + from * 3) % (sizeof(sizes) / sizeof(sizes[0]))];
}

std::vector<uint8_t> message(uint64_t m, uint64_t from, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t k = 0; k < bytes; ++k) v[k] = static_cast<uint8_t>(mix64((from << 56) ^ (m << 32) ^ k));
  return v;
}

ShmP2pOptions options(size_t cma_bytes, bool same_process) {
  ShmP2pOptions o;
  o.label = "test p2p";
  o.ring_bytes = kRing;
  o.cma_bytes = cma_bytes;
  o.same_process = [same_process](int) { return same_process; };
  return o;
}

Deadline generous() { return Deadline::after_ms(60000); }

// Both ranks of a pair send n messages to each other and receive n, keeping up to `window`
// sends and `window` receives pending at once (so both directions are in flight together and a
// writer often finds its ring full). Returns 0 when every message arrived intact, in order.
int exchange(const std::string &base, int rank, int n, size_t window, const ShmP2pOptions &o) {
  ShmP2p p2p(base, rank, 2, o);
  const int peer = 1 - rank;
  struct Pending {
    ShmP2p::OpId id;
    uint64_t m;
    std::vector<uint8_t> buf;
  };
  std::deque<Pending> sends, recvs;
  uint64_t next_send = 0, next_recv = 0, received = 0;
  while (received < static_cast<uint64_t>(n) || next_send < static_cast<uint64_t>(n)) {
    // Completed sends first: a rank that blocks in a receive must have posted every send its
    // peer may be waiting for (the window would otherwise hold only finished sends).
    while (!sends.empty() && p2p.test(sends.front().id)) sends.pop_front();
    while (next_send < static_cast<uint64_t>(n) && sends.size() < window) {
      Pending s{0, next_send, message(next_send, static_cast<uint64_t>(rank), message_size(next_send, rank))};
      s.id = p2p.post_send(peer, s.buf.data(), s.buf.size(), generous());
      sends.push_back(std::move(s));
      ++next_send;
    }
    while (next_recv < static_cast<uint64_t>(n) && recvs.size() < window) {
      Pending r{0, next_recv, std::vector<uint8_t>(message_size(next_recv, peer), 0xee)};
      r.id = p2p.post_recv(peer, r.buf.data(), r.buf.size(), generous());
      recvs.push_back(std::move(r));
      ++next_recv;
    }
    // Complete the oldest receive: by test, or by a blocking wait once every send is posted (a
    // rank blocked in a receive with sends still to post could wait for a peer that waits for
    // one of them: the windows would deadlock the test, not the engine).
    if (!recvs.empty()) {
      Pending &r = recvs.front();
      if (r.m % 2 == 0 && next_send == static_cast<uint64_t>(n)) p2p.wait(r.id, generous(), "recv");
      else if (!p2p.test(r.id)) continue;
      if (r.buf != message(r.m, static_cast<uint64_t>(peer), r.buf.size())) {
        fprintf(stderr, "rank %d: message %lu from rank %d (%zu bytes) is wrong\n", rank, (unsigned long)r.m, peer,
                r.buf.size());
        return 1;
      }
      recvs.pop_front();
      ++received;
    }
  }
  for (Pending &s : sends) p2p.wait(s.id, generous(), "send");
  return 0;
}

void run_processes(const char *what, size_t cma_bytes) {
  Board *board = shared_array<Board>(1);
  const std::string base = unique_name(what);
  auto statuses = run_ranks(2, board, [&](int rank) { return exchange(base, rank, 600, 4, options(cma_bytes, false)); });
  assert_true(all_ok(statuses));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Two processes, by value only: whole messages wrap, large ones stream through a full ring.
void test_every_size_arrives_intact_through_a_small_ring(void **) { run_processes("p2p-value", 0); }

// The same with messages of 64 KiB and more by reference among them (one copy by the receiver).
void test_references_interleave_with_ring_messages(void **) { run_processes("p2p-ref", 64 * 1024); }

// Ranks as threads of one process (each its own engine; ThreadSanitizer checks the publication
// order of the rings in tsan builds): nothing goes by reference.
void test_threads_exchange_every_size(void **) {
  const std::string base = unique_name("p2p-threads");
  int result[2] = {-1, -1};
  std::thread t0([&] { result[0] = exchange(base, 0, 400, 3, options(64 * 1024, true)); });
  std::thread t1([&] { result[1] = exchange(base, 1, 400, 3, options(64 * 1024, true)); });
  t0.join();
  t1.join();
  assert_int_equal(result[0], 0);
  assert_int_equal(result[1], 0);
  assert_int_equal(leftover_segments(), 0);
}

// A receive of another size than the message: MISMATCH naming both sizes on the receiver, and
// the sender's next operation with that peer fails too (the pair's stream is out of step).
void test_a_size_mismatch_fails_both_sides(void **) {
  Board *board = shared_array<Board>(1);
  const std::string base = unique_name("p2p-mismatch");
  auto statuses = run_ranks(2, board, [&](int rank) {
    ShmP2p p2p(base, rank, 2, options(0, false));
    std::vector<uint8_t> buf(64, 1);
    try {
      if (rank == 0) {
        p2p.wait(p2p.post_send(1, buf.data(), 40, generous()), generous(), "send");
        while (board->flag.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        p2p.wait(p2p.post_send(1, buf.data(), 8, generous()), generous(), "send");
        return 2;  // the second send must fail
      }
      p2p.wait(p2p.post_recv(0, buf.data(), 48, generous()), generous(), "recv");
      return 3;  // must fail
    } catch (const pstate::Error &e) {
      if (rank == 1) board->flag.store(1);
      const bool names_sizes = rank == 0 || (std::string(e.what()).find("40") != std::string::npos &&
                                             std::string(e.what()).find("48") != std::string::npos);
      if (e.status() != PSTATE_ERR_MISMATCH || !names_sizes) {
        fprintf(stderr, "rank %d: %s\n", rank, e.what());
        return 4;
      }
      return 0;
    }
  });
  assert_true(all_ok(statuses));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_size_arrives_intact_through_a_small_ring),
      cmocka_unit_test(test_references_interleave_with_ring_messages),
      cmocka_unit_test(test_threads_exchange_every_size),
      cmocka_unit_test(test_a_size_mismatch_fails_both_sides),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
