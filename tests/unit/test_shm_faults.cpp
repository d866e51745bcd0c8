// test_shm_faults.cpp — a shared-memory group fails fast and leaves nothing behind.
//
// Real forked ranks; one of them is SIGKILLed (mid-collective or mid-set-up) or never shows up.
// The survivors must return PSTATE_ERR_PEER_LOST (liveness check wired to pidfds) or, without a
// liveness check, PSTATE_ERR_TIMEOUT — never hang (every run is bounded and killed on overrun) —
// and /dev/shm must hold no segment of ours afterwards.
#include "test_shm_util.hpp"
#include "transport/shm/shm_group.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
}

#include <sys/stat.h>

using namespace shmtest;
using pstate::Deadline;
using pstate::shm::ShmGroup;
using pstate::shm::ShmGroupOptions;

namespace {

ShmGroupOptions watched(PeerWatch *watch) {
  ShmGroupOptions o;
  o.label = "fault group";
  o.wait.liveness_interval_ms = 20;
  o.liveness = [watch] { (*watch)(); };
  return o;
}

// Waits (bounded) until pred() holds; false when it never did.
template <typename Pred>
bool eventually(Pred &&pred, int seconds = 30) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    usleep(1000);
  }
  return true;
}

bool segment_exists(const std::string &name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// Survivor's side of a failure: records the status of the first error on the board, checks that
// the group then refuses further work with ABORTED, and exits 0 when that status was expected.
int record_failure(Board *board, int rank, ShmGroup &g, const pstate::Error &e, pstate_status_t expected) {
  board->word[rank].store(e.status());
  float x = 0;
  pstate_status_t next = status_of([&] { g.all_reduce(&x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, Deadline::after_ms(1000)); });
  if (e.status() != expected || next != PSTATE_ERR_ABORTED) {
    fprintf(stderr, "rank %d: got %d (%s) then %d; expected %d then ABORTED\n", rank, e.status(), e.what(), next,
            expected);
    return 1;
  }
  return 0;
}

// 4 ranks all-reduce 1 MiB in a loop; the test SIGKILLs rank 2 once everyone is well into it.
void test_sigkilled_rank_mid_all_reduce_gives_survivors_peer_lost(void **) {
  const int size = 4, victim = 2;
  const size_t count = (1u << 20) / 4;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("kill");
  auto statuses = run_ranks(
      size, board,
      [&](int rank) {
        PeerWatch watch(board, size, rank);
        ShmGroup g(name, rank, size, Deadline::after_ms(30000), watched(&watch));
        std::vector<float> send(count, 1.0f + rank), recv(count);
        try {
          for (int64_t it = 1;; ++it) {
            g.all_reduce(send.data(), recv.data(), count, PSTATE_FLOAT32, PSTATE_SUM, Deadline::after_ms(30000));
            board->hash[rank].store(static_cast<uint64_t>(it));
          }
        } catch (const pstate::Error &e) {
          return record_failure(board, rank, g, e, PSTATE_ERR_PEER_LOST);
        }
      },
      60,
      [&] {
        eventually([&] { return board->hash[victim].load() >= 20; });
        kill(board->pids[victim].load(), SIGKILL);
      });
  assert_true(WIFSIGNALED(statuses[victim]) && WTERMSIG(statuses[victim]) == SIGKILL);
  for (int r = 0; r < size; ++r) {
    if (r == victim) continue;
    assert_true(exited_ok(statuses[r]));
    assert_int_equal(board->word[r].load(), PSTATE_ERR_PEER_LOST);
  }
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Without a liveness check the survivor still returns: TIMEOUT, naming the rank it waited for.
void test_dead_peer_without_liveness_check_gives_timeout_naming_it(void **) {
  const int size = 2;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("timeout");
  auto statuses = run_ranks(size, board, [&](int rank) {
    ShmGroupOptions o;
    o.label = "no-liveness group";
    ShmGroup g(name, rank, size, Deadline::after_ms(30000), o);
    int32_t x = rank;
    for (int it = 0; it < 3; ++it) g.all_reduce(&x, &x, 1, PSTATE_INT32, PSTATE_SUM, Deadline::after_ms(30000));
    if (rank == 1) raise(SIGKILL);
    std::string message;
    pstate_status_t st = status_of([&] { g.barrier(Deadline::after_ms(300)); }, &message);
    board->word[rank].store(st);
    return st == PSTATE_ERR_TIMEOUT && message.find("waiting for rank 1") != std::string::npos ? 0 : 1;
  });
  assert_true(exited_ok(statuses[0]));
  assert_int_equal(board->word[0].load(), PSTATE_ERR_TIMEOUT);
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Rank 2 never constructs its group: the others' set-up fails with PEER_LOST and unlinks the name.
void test_rank_that_never_attaches_fails_set_up_without_leak(void **) {
  const int size = 3;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("absent");
  auto statuses = run_ranks(size, board, [&](int rank) {
    if (rank == 2) return 0;
    PeerWatch watch(board, size, rank);
    pstate_status_t st = status_of([&] { ShmGroup g(name, rank, size, Deadline::after_ms(30000), watched(&watch)); });
    board->word[rank].store(st);
    return st == PSTATE_ERR_PEER_LOST ? 0 : 1;
  });
  assert_true(all_ok(statuses));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Rank 0 creates the segment and is SIGKILLed before anyone else attached; rank 1 attaches to
// the orphan later, finds rank 0 dead, and must remove the name on its way out.
void test_creator_killed_during_set_up_leaves_nothing(void **) {
  const int size = 3;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("orphan");
  auto statuses = run_ranks(
      size, board,
      [&](int rank) {
        PeerWatch watch(board, size, rank);
        if (rank != 0 && !eventually([&] { return board->flag.load() != 0; })) return 2;
        if (rank == 2) return 0;  // never attaches
        pstate_status_t st =
            status_of([&] { ShmGroup g(name, rank, size, Deadline::after_ms(30000), watched(&watch)); });
        board->word[rank].store(st);
        return st == PSTATE_ERR_PEER_LOST ? 0 : 1;
      },
      60,
      [&] {
        eventually([&] { return segment_exists(name); });
        kill(board->pids[0].load(), SIGKILL);
        board->flag.store(1);
      });
  assert_true(WIFSIGNALED(statuses[0]));
  assert_true(exited_ok(statuses[1]));
  assert_true(exited_ok(statuses[2]));
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

// Ranks that pass different options meet a segment of the wrong shape: MISMATCH, not a hang.
void test_ranks_with_different_options_get_mismatch(void **) {
  const int size = 2;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mismatch");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmGroupOptions o = watched(&watch);
    o.chunk_bytes = rank == 0 ? 64 * 1024 : 128 * 1024;
    pstate_status_t st = status_of([&] { ShmGroup g(name, rank, size, Deadline::after_ms(30000), o); });
    board->word[rank].store(st);
    return 0;
  });
  assert_true(all_ok(statuses));
  assert_int_equal(board->word[1].load(), PSTATE_ERR_MISMATCH);
  assert_true(board->word[0].load() == PSTATE_ERR_PEER_LOST || board->word[0].load() == PSTATE_ERR_MISMATCH);
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigkilled_rank_mid_all_reduce_gives_survivors_peer_lost),
      cmocka_unit_test(test_dead_peer_without_liveness_check_gives_timeout_naming_it),
      cmocka_unit_test(test_rank_that_never_attaches_fails_set_up_without_leak),
      cmocka_unit_test(test_creator_killed_during_set_up_leaves_nothing),
      cmocka_unit_test(test_ranks_with_different_options_get_mismatch),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
