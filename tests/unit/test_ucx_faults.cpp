// test_ucx_faults.cpp — UCX transport under failure: a dead peer is PEER_LOST quickly, a silent
// peer is TIMEOUT at the deadline, requests are cancelled after an error, teardown never hangs.
//
// Peers are real forked processes; the parent SIGKILLs one at a chosen moment (after the victim
// and the waiter wrote "ready" files). Time bounds are loose on purpose ("well under the
// deadline", "not before the deadline"): they prove detection, not speed.
#include "test_ucx_harness.hpp"

#include <signal.h>

using namespace ucxtest;
using pstate::Channel;

namespace {

constexpr int kLimitS = 60;
constexpr int kLongDeadlineMs = 30000;  // a dead peer must be noticed far sooner than this

// Both ranks exchange one message (so endpoints exist), then rank 0 stops in pause().
void connect_then(UcxChannel &ch, int rank) {
  int32_t v = rank, got = -1;
  ch.sendrecv(1 - rank, &v, 4, 1 - rank, &got, 4, 1);
  CHILD_CHECK(got == 1 - rank);
}

// Parent side of the kill tests: waits for the waiter to be blocked, SIGKILLs the victim and
// leaves it unreaped (a zombie) until the waiter reports, so zombie detection is exercised.
std::function<void(const std::vector<pid_t> &)> kill_when_waiting(const TempDir &dir, int victim, int waiter) {
  return [&dir, victim, waiter](const std::vector<pid_t> &pids) {
    std::string waiting = dir.file("waiting." + std::to_string(waiter));
    if (!wait_for_file(waiting, Deadline::after_ms(20000))) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the waiter fall asleep
    kill(pids[static_cast<size_t>(victim)], SIGKILL);
    wait_for_file(dir.file("done." + std::to_string(waiter)), Deadline::after_ms(20000));
  };
}

// Rank 1 waits for a message rank 0 will never send because it gets SIGKILLed.
int wait_for_killed_peer(int rank, const TempDir &dir, UcxWorkerOptions opts, const char *expect_word) {
  UcxWorker w(std::move(opts));
  join_via_files(w, dir.path());
  auto ch = world_channel(w);
  connect_then(*ch, rank);
  if (rank == 0) {
    for (;;) pause();
  }
  ch->set_op_name("tp:0 all_reduce");
  ch->set_deadline(Deadline::after_ms(kLongDeadlineMs));
  std::vector<uint8_t> buf(1 << 20);
  Channel::Request r[2] = {ch->irecv(0, buf.data(), buf.size(), 2), ch->isend(0, buf.data(), 16, 3)};
  touch(dir.file("waiting.1"));
  double t0 = now_s();
  std::string msg;
  pstate_status_t st = status_of([&] { ch->wait_all(r, 2); }, &msg);
  double took = now_s() - t0;
  touch(dir.file("done.1"));
  std::fprintf(stderr, "rank 1 got %s after %.3f s: %s\n", pstate_status_string(st), took, msg.c_str());
  CHILD_CHECK(st == PSTATE_ERR_PEER_LOST);
  CHILD_CHECK(took < kLongDeadlineMs / 1000.0 / 3);
  CHILD_CHECK(msg.find("tp:0 all_reduce") != std::string::npos);
  CHILD_CHECK(msg.find("rank 0") != std::string::npos);
  CHILD_CHECK(msg.find(expect_word) != std::string::npos);
  CHILD_CHECK(ch->outstanding() == 0 && w.outstanding() == 0);
  double c0 = now_s();
  w.close(Deadline::after_ms(2000));  // graceful close towards a dead peer stays bounded
  CHILD_CHECK(now_s() - c0 < 4.0);
  return 0;
}

void expect_victim_killed_and_waiter_ok(const std::vector<int> &codes) {
  assert_int_equal(codes[0], 128 + SIGKILL);
  assert_int_equal(codes[1], 0);
}

// Same host: the pidfd of the peer wakes the waiter; the dead peer is still an unreaped zombie.
void test_peer_sigkilled_mid_wait_is_peer_lost_via_pidfd(void **) {
  TempDir dir;
  auto codes = run_ranks(
      2, kLimitS, [&](int rank) { return wait_for_killed_peer(rank, dir, test_options(rank, 2), "(group rank 0, pid"); },
      kill_when_waiting(dir, 0, 1));
  expect_victim_killed_and_waiter_ok(codes);
}

// Same host without pidfd: /proc/PID/stat shows the unreaped peer in state 'Z'.
void test_peer_sigkilled_mid_wait_is_peer_lost_via_proc_fallback(void **) {
  TempDir dir;
  auto codes = run_ranks(
      2, kLimitS,
      [&](int rank) {
        auto o = test_options(rank, 2);
        o.watch_with_pidfd = false;
        return wait_for_killed_peer(rank, dir, o, "exited");
      },
      kill_when_waiting(dir, 0, 1));
  expect_victim_killed_and_waiter_ok(codes);
}

// "Other host" (distinct host ids, TCP over loopback): the PEER-mode endpoint's error callback
// reports the dead peer.
void test_peer_on_other_host_sigkilled_is_peer_lost_via_error_callback(void **) {
  TempDir dir;
  auto codes = run_ranks(
      2, kLimitS,
      [&](int rank) {
        auto o = test_options(rank, 2, "host-" + std::to_string(rank));
        o.ucx_config = {{"TLS", "tcp"}};
        return wait_for_killed_peer(rank, dir, o, "unreachable");
      },
      kill_when_waiting(dir, 0, 1));
  expect_victim_killed_and_waiter_ok(codes);
}

// Four ranks exchange all-to-all in a loop; one is SIGKILLed mid-loop; every survivor returns
// PEER_LOST (not a hang, not a timeout).
void test_sigkill_one_of_4_mid_loop_every_survivor_gets_peer_lost(void **) {
  TempDir dir;
  constexpr int kWorld = 4, kVictim = 2;
  auto codes = run_ranks(
      kWorld, kLimitS,
      [&](int rank) {
        UcxWorker w(test_options(rank, kWorld));
        join_via_files(w, dir.path());
        auto ch = world_channel(w);
        ch->set_op_name("world all_to_all");
        std::vector<int64_t> out(kWorld * 1024), in(kWorld * 1024);
        for (uint32_t iter = 0;; ++iter) {
          if (iter == 50) touch(dir.file("waiting." + std::to_string(rank)));
          ch->set_deadline(Deadline::after_ms(kLongDeadlineMs));
          std::vector<Channel::Request> reqs;
          for (int p = 0; p < kWorld; ++p) {
            if (p == rank) continue;
            reqs.push_back(ch->irecv(p, &in[static_cast<size_t>(p) * 1024], 1024 * 8, iter));
            reqs.push_back(ch->isend(p, &out[static_cast<size_t>(p) * 1024], 1024 * 8, iter));
          }
          std::string msg;
          double t0 = now_s();
          pstate_status_t st = status_of([&] { ch->wait_all(reqs.data(), reqs.size()); }, &msg);
          if (st == PSTATE_OK) continue;
          std::fprintf(stderr, "rank %d iteration %u: %s after %.3f s: %s\n", rank, iter, pstate_status_string(st),
                       now_s() - t0, msg.c_str());
          CHILD_CHECK(st == PSTATE_ERR_PEER_LOST);
          CHILD_CHECK(msg.find("rank 2 ") != std::string::npos);
          CHILD_CHECK(now_s() - t0 < 10.0);
          CHILD_CHECK(ch->outstanding() == 0);
          w.force_close();
          return 0;
        }
      },
      [&](const std::vector<pid_t> &pids) {
        wait_for_file(dir.file("waiting." + std::to_string(kVictim)), Deadline::after_ms(20000));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        kill(pids[kVictim], SIGKILL);
      });
  for (int r = 0; r < kWorld; ++r) assert_int_equal(codes[static_cast<size_t>(r)], r == kVictim ? 128 + SIGKILL : 0);
}

// Rank 0 is alive but never sends: rank 1 gets TIMEOUT at (not before) its deadline, with every
// request it had posted cancelled and freed.
void test_silent_peer_times_out_at_deadline_and_requests_are_freed(void **) {
  TempDir dir;
  constexpr int kDeadlineMs = 1500;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    connect_then(*ch, rank);
    if (rank == 0) {
      wait_for_file(dir.file("done.1"), Deadline::after_ms(20000));
      w.close(Deadline::after_ms(2000));
      return 0;
    }
    ch->set_op_name("pp:0 recv");
    std::vector<uint8_t> a(64), b(1 << 20), big(8 << 20);
    double t0 = now_s();
    ch->set_deadline(Deadline::after_ms(kDeadlineMs));
    Channel::Request r[3] = {ch->irecv(0, a.data(), a.size(), 5), ch->irecv_any_size(0, &b, 6),
                             ch->isend(0, big.data(), big.size(), 7)};  // rendezvous, never received
    std::string msg;
    pstate_status_t st = status_of([&] { ch->wait_all(r, 3); }, &msg);
    double took = now_s() - t0;
    touch(dir.file("done.1"));
    std::fprintf(stderr, "rank 1 got %s after %.3f s: %s\n", pstate_status_string(st), took, msg.c_str());
    CHILD_CHECK(st == PSTATE_ERR_TIMEOUT);
    CHILD_CHECK(took >= kDeadlineMs / 1000.0 - 0.01);
    CHILD_CHECK(took < kDeadlineMs / 1000.0 + 2.0);
    CHILD_CHECK(msg.find("pp:0 recv") != std::string::npos && msg.find("rank 0") != std::string::npos);
    CHILD_CHECK(ch->outstanding() == 0 && w.outstanding() == 0);
    w.close(Deadline::after_ms(2000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// force_close with sends and receives in flight to a live but silent peer returns at once.
void test_force_close_with_requests_in_flight_never_blocks(void **) {
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    connect_then(*ch, rank);
    if (rank == 0) {
      wait_for_file(dir.file("done.1"), Deadline::after_ms(20000));
      return 0;  // exits without closing: a peer that vanishes after the test
    }
    std::vector<uint8_t> big(64 << 20), small(16);
    ch->isend(0, big.data(), big.size(), 1);
    ch->isend(0, small.data(), small.size(), 2);
    ch->irecv(0, small.data(), small.size(), 3);
    double t0 = now_s();
    w.force_close();
    double took = now_s() - t0;
    touch(dir.file("done.1"));
    std::fprintf(stderr, "force_close took %.6f s\n", took);
    CHILD_CHECK(took < 1.0);
    CHILD_CHECK(w.closed() && w.outstanding() == 0);
    w.force_close();  // idempotent
    w.close(Deadline::after_ms(100));
    CHILD_CHECK(status_of([&] { ch->isend(0, small.data(), 1, 4); }) == PSTATE_ERR_INVALID_STATE);
    return 0;
  });
  assert_all_exit_zero(codes);
}

// A graceful close towards a live peer that does not progress (TCP, PEER mode, where the flush
// wants the peer's answer) returns by its deadline.
void test_graceful_close_is_bounded_by_its_deadline(void **) {
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    auto o = test_options(rank, 2, "host-" + std::to_string(rank));
    o.ucx_config = {{"TLS", "tcp"}};
    UcxWorker w(o);
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    connect_then(*ch, rank);
    if (rank == 0) {
      wait_for_file(dir.file("done.1"), Deadline::after_ms(20000));
      return 0;
    }
    double t0 = now_s();
    w.close(Deadline::after_ms(1000));
    double took = now_s() - t0;
    touch(dir.file("done.1"));
    std::fprintf(stderr, "graceful close took %.3f s\n", took);
    CHILD_CHECK(took < 3.0);
    return 0;
  });
  assert_all_exit_zero(codes);
}

// The process watch itself: a forked child that exits is noticed while it is a zombie (pidfd and
// /proc), and after it was reaped.
void test_process_watch_sees_zombie_and_reaped_child(void **) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  pstate::ProcessWatch by_fd(child), by_proc(child, false);
  double give_up = now_s() + 10;
  while (!(by_fd.exited() && by_proc.exited()) && now_s() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  assert_true(by_fd.exited());
  assert_true(by_proc.exited());
  assert_true(pstate::proc_stat_says_exited(child));  // zombie: not reaped yet
  waitpid(child, nullptr, 0);
  assert_true(pstate::proc_stat_says_exited(child));
  pstate::ProcessWatch after(child);
  assert_true(after.exited());
  pstate::ProcessWatch me(getpid());
  assert_false(me.exited());
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_process_watch_sees_zombie_and_reaped_child),
      cmocka_unit_test(test_peer_sigkilled_mid_wait_is_peer_lost_via_pidfd),
      cmocka_unit_test(test_peer_sigkilled_mid_wait_is_peer_lost_via_proc_fallback),
      cmocka_unit_test(test_peer_on_other_host_sigkilled_is_peer_lost_via_error_callback),
      cmocka_unit_test(test_sigkill_one_of_4_mid_loop_every_survivor_gets_peer_lost),
      cmocka_unit_test(test_silent_peer_times_out_at_deadline_and_requests_are_freed),
      cmocka_unit_test(test_force_close_with_requests_in_flight_never_blocks),
      cmocka_unit_test(test_graceful_close_is_bounded_by_its_deadline),
  };
  if (const char *only = std::getenv("PSTATE_TEST_FILTER")) cmocka_set_test_filter(only);  // e.g. "*threads*"
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
