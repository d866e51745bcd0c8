// test_store_file.cpp — the file store (file:///DIR) with ranks as forked processes: set, get,
// add, wait, check, erase; get waiting for a later set; atomic add across processes; deadlines
// naming keys; job token, rank claims (released when a process dies) and world size, as for the
// TCP store. Each test uses its own fresh directory under /tmp.
#include "bootstrap/file_store.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using pstest::ChildBody;
using pstest::expect_error;
using pstest::TempDir;

namespace {

constexpr int64_t kLongMs = 30000;

Deadline soon() { return Deadline::after_ms(kLongMs); }
Bytes bytes_of(const std::string &s) { return Bytes(s.begin(), s.end()); }
std::string text_of(const Bytes &b) { return std::string(b.begin(), b.end()); }

StoreOptions options_for(const std::string &dir, int rank, int world, const std::string &token = "") {
  StoreOptions o;
  o.init_method = "file://" + dir;
  o.rank = rank;
  o.world_size = world;
  o.job_token = token;
  o.timeout_ms = kLongMs;
  return o;
}

std::unique_ptr<Store> open_file(const std::string &dir, int rank, int world, const std::string &token = "") {
  return open_store(options_for(dir, rank, world, token), Logger(LogLevel::kNone));
}

void test_file_four_processes_set_get_add_wait_check(void **) {
  TempDir tmp;
  std::string dir = tmp.path() + "/store";
  constexpr int kWorld = 4;
  pstest::run_children(
      kWorld,
      [&](int rank) -> int {
        auto store = open_file(dir, rank, kWorld, "job-secret");
        store->add("arrived", 1, soon());  // before the set, so every value seen implies its add
        store->set("value/" + std::to_string(rank), bytes_of("from rank " + std::to_string(rank)), soon());
        std::vector<std::string> keys;
        for (int r = 0; r < kWorld; ++r) keys.push_back("value/" + std::to_string(r));
        store->wait(keys, soon());
        for (int r = 0; r < kWorld; ++r) {
          CHILD_CHECK(store->check(keys[r], soon()));
          CHILD_CHECK(text_of(store->get(keys[r], soon())) == "from rank " + std::to_string(r));
        }
        CHILD_CHECK(!store->check("value/never", soon()));
        CHILD_CHECK(text_of(store->get("arrived", soon())) == "4");
        store_barrier(*store, "done", kWorld, soon());
        return store->close(soon()) ? 0 : 1;
      },
      60000);
}

void test_file_add_is_atomic_across_processes(void **) {
  TempDir tmp;
  constexpr int kWorld = 4, kAdds = 50;
  pstest::run_children(
      kWorld,
      [&](int rank) -> int {
        auto store = open_file(tmp.path(), rank, kWorld);
        // Every rank opens before any adds: a rank that opened after another had finished and
        // exited would take the directory for an earlier job's leftover (every process it names
        // gone, no rank lock held) and reclaim it, counter included, as it should (CI saw 150).
        store_barrier(*store, "opened", kWorld, soon());
        for (int i = 0; i < kAdds; ++i) store->add("counter", 1, soon());
        return 0;
      },
      60000);
  auto observer = open_file(tmp.path(), -1, 0);
  assert_string_equal(text_of(observer->get("counter", soon())).c_str(), std::to_string(kWorld * kAdds).c_str());
}

// set_if_absent across processes: one winner per round, the same value for every caller.
void test_file_set_if_absent_first_writer_wins(void **) {
  TempDir tmp;
  constexpr int kWorld = 4, kRounds = 20;
  pstest::run_children(
      kWorld,
      [&](int rank) -> int {
        auto store = open_file(tmp.path(), rank, kWorld);
        // Every rank joins before any leaves: a rank that opened the store after all the others
        // had exited would take it for an earlier job's leftover and clear it.
        store_barrier(*store, "start", kWorld, soon());
        for (int round = 0; round < kRounds; ++round) {
          std::string key = "race/" + std::to_string(round);
          std::string got = text_of(store->set_if_absent(key, bytes_of("rank " + std::to_string(rank)), soon()));
          CHILD_CHECK(got.rfind("rank ", 0) == 0);
          store->set("saw/" + std::to_string(round) + "/" + std::to_string(rank), bytes_of(got), soon());
          if (got == "rank " + std::to_string(rank)) store->add("winners/" + std::to_string(round), 1, soon());
        }
        store_barrier(*store, "done", kWorld, soon());
        return 0;
      },
      60000);
  auto observer = open_file(tmp.path(), -1, 0);
  for (int round = 0; round < kRounds; ++round) {
    assert_string_equal(text_of(observer->get("winners/" + std::to_string(round), soon())).c_str(), "1");
    std::string first = text_of(observer->get("saw/" + std::to_string(round) + "/0", soon()));
    for (int r = 1; r < kWorld; ++r)
      assert_string_equal(text_of(observer->get("saw/" + std::to_string(round) + "/" + std::to_string(r), soon())).c_str(),
                          first.c_str());
  }
}

void test_file_get_waits_for_a_later_set(void **) {
  TempDir tmp;
  int about_to_get[2];
  assert_int_equal(::pipe(about_to_get), 0);
  ChildBody reader = [&](int) -> int {
    auto store = open_file(tmp.path(), 1, 2);
    CHILD_CHECK(!store->check("late", soon()));
    (void)!::write(about_to_get[1], "x", 1);
    CHILD_CHECK(text_of(store->get("late", soon())) == "worth the wait");
    return 0;
  };
  pid_t child = pstest::fork_child(reader, 1);
  auto rank0 = open_file(tmp.path(), 0, 2);
  char c;
  pollfd p{about_to_get[0], POLLIN, 0};
  assert_int_equal(::poll(&p, 1, kLongMs), 1);
  assert_int_equal(::read(about_to_get[0], &c, 1), 1);
  rank0->set("late", bytes_of("worth the wait"), soon());
  assert_int_equal(pst_wait(child, kLongMs), 0);
  ::close(about_to_get[0]);
  ::close(about_to_get[1]);
}

void test_file_get_past_deadline_is_timeout_naming_the_key(void **) {
  TempDir tmp;
  auto store = open_file(tmp.path(), 0, 1);
  expect_error([&] { store->get("never/set", Deadline::after_ms(50)); }, PSTATE_ERR_TIMEOUT,
               {"get('never/set')", "waiting for key 'never/set'", "file://" + tmp.path()});
  store->set("here", bytes_of("1"), soon());
  expect_error([&] { store->wait({"here", "missing"}, Deadline::after_ms(50)); }, PSTATE_ERR_TIMEOUT,
               {"1 of 2 keys never set: 'missing'"});
}

void test_file_wrong_or_missing_token_is_auth_error(void **) {
  TempDir tmp;
  auto rank0 = open_file(tmp.path(), 0, 2, "right-token");
  expect_error([&] { open_file(tmp.path(), 1, 2, "wrong-token"); }, PSTATE_ERR_AUTH,
               {"job token refused by the store at file://" + tmp.path(), "set PSTATE_JOB_TOKEN"});
  expect_error([&] { open_file(tmp.path(), 1, 2, ""); }, PSTATE_ERR_AUTH, {"job token refused"});
  // The refused attempts did not take rank 1.
  auto rank1 = open_file(tmp.path(), 1, 2, "right-token");
  assert_non_null(rank1.get());
}

void test_file_token_is_not_stored_in_clear(void **) {
  TempDir tmp;
  auto rank0 = open_file(tmp.path(), 0, 1, "very-secret-token");
  FILE *f = std::fopen((tmp.path() + "/meta").c_str(), "r");
  assert_non_null(f);
  char buf[1024] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  assert_true(n > 0);
  assert_null(std::strstr(buf, "very-secret-token"));
}

void test_file_duplicate_rank_is_mismatch_naming_the_holder(void **) {
  TempDir tmp;
  auto first = open_file(tmp.path(), 1, 3);
  expect_error([&] { open_file(tmp.path(), 1, 3); }, PSTATE_ERR_MISMATCH,
               {"rank 1 is already taken by another process (pid " + std::to_string(getpid())});
  assert_true(first->close(soon()));  // released on close...
  expect_error([&] { first->get("k", soon()); }, PSTATE_ERR_INVALID_STATE, {"closed by this rank"});
  auto second = open_file(tmp.path(), 1, 3);
  second.reset();  // ...and on destruction
  auto third = open_file(tmp.path(), 1, 3);
  assert_non_null(third.get());
}

void test_file_rank_of_a_killed_process_can_be_claimed_again(void **) {
  TempDir tmp;
  int claimed[2];
  assert_int_equal(::pipe(claimed), 0);
  ChildBody holder = [&](int) -> int {
    auto store = open_file(tmp.path(), 2, 3);
    (void)!::write(claimed[1], "x", 1);
    ::sleep(120);  // until killed
    return 0;
  };
  pid_t child = pstest::fork_child(holder, 2);
  char c;
  pollfd p{claimed[0], POLLIN, 0};
  assert_int_equal(::poll(&p, 1, kLongMs), 1);
  assert_int_equal(::read(claimed[0], &c, 1), 1);
  expect_error([&] { open_file(tmp.path(), 2, 3); }, PSTATE_ERR_MISMATCH,
               {"rank 2 is already taken", "pid " + std::to_string(child)});
  ::kill(child, SIGKILL);
  assert_int_equal(pst_wait(child, kLongMs), 128 + SIGKILL);
  auto again = open_file(tmp.path(), 2, 3);  // the kernel dropped the dead process's lock
  assert_non_null(again.get());
  ::close(claimed[0]);
  ::close(claimed[1]);
}

void test_file_rank_outside_world_is_mismatch(void **) {
  TempDir tmp;
  expect_error([&] { open_file(tmp.path(), 5, 4); }, PSTATE_ERR_MISMATCH,
               {"rank 5 is out of range for world_size 4 (ranks are 0..3)"});
}

void test_file_world_size_disagreement_is_mismatch_naming_both_ranks(void **) {
  TempDir tmp;
  auto rank0 = open_file(tmp.path(), 0, 4);
  expect_error([&] { open_file(tmp.path(), 3, 8); }, PSTATE_ERR_MISMATCH, {"rank 3 says world_size 8, rank 0 says 4"});
}

void test_file_keys_with_slashes_binary_and_long_names_stay_distinct(void **) {
  TempDir tmp;
  auto store = open_file(tmp.path(), 0, 1);
  std::string long_a(4096, 'a'), long_b = long_a;
  long_b.back() = 'b';
  std::vector<std::string> keys = {"a/b", "a%2Fb", "a_b", std::string("bin\0\x01\xff", 6), "..", ".", long_a, long_b};
  for (size_t i = 0; i < keys.size(); ++i) store->set(keys[i], bytes_of("v" + std::to_string(i)), soon());
  for (size_t i = 0; i < keys.size(); ++i)
    assert_string_equal(text_of(store->get(keys[i], soon())).c_str(), ("v" + std::to_string(i)).c_str());
}

void test_file_erase_check_and_add_on_non_integer(void **) {
  TempDir tmp;
  auto store = open_file(tmp.path(), 0, 1);
  assert_false(store->check("e", soon()));
  store->set("e", bytes_of("text"), soon());
  assert_true(store->check("e", soon()));
  expect_error([&] { store->add("e", 1, soon()); }, PSTATE_ERR_INVALID_ARGUMENT, {"not a decimal integer"});
  assert_true(store->erase("e", soon()));
  assert_false(store->erase("e", soon()));
  assert_int_equal(store->add("e", 7, soon()), 7);
}

void test_file_path_that_is_a_file_is_invalid_argument(void **) {
  TempDir tmp;
  std::string file = tmp.path() + "/plain";
  FILE *f = std::fopen(file.c_str(), "w");
  assert_non_null(f);
  std::fclose(f);
  expect_error([&] { open_file(file, 0, 1); }, PSTATE_ERR_INVALID_ARGUMENT, {"not a directory"});
}

// ---- start-up deployed wrongly (issue 19) ------------------------------------------------------

// The last rank of the world to close cleanly removes what the store created: the directory too,
// when the store made it.
void test_file_last_rank_out_removes_the_store(void **) {
  TempDir tmp;
  std::string dir = tmp.path() + "/store";
  auto r0 = open_file(dir, 0, 2);
  auto r1 = open_file(dir, 1, 2);
  r0->set("k", bytes_of("v"), soon());
  assert_true(r0->close(soon()));
  assert_int_equal(::access(dir.c_str(), F_OK), 0);  // rank 1 is still in
  assert_true(r1->close(soon()));
  assert_int_not_equal(::access(dir.c_str(), F_OK), 0);
  // A directory the store did not make stays, empty of the store's files.
  auto only = open_file(tmp.path(), 0, 1);
  assert_true(only->close(soon()));
  assert_int_equal(::access(tmp.path().c_str(), F_OK), 0);
  assert_int_not_equal(::access((tmp.path() + "/meta").c_str(), F_OK), 0);
}

// A directory that already holds files where the store keeps its own (a home folder with a tmp/)
// is refused before anything is written, and its files stay: the last rank out would delete them.
void test_file_foreign_files_in_the_store_tree_are_refused_and_kept(void **) {
  TempDir tmp;
  std::string mine = tmp.path() + "/tmp";
  assert_int_equal(::mkdir(mine.c_str(), 0700), 0);
  FILE *f = std::fopen((mine + "/notes.txt").c_str(), "w");
  assert_non_null(f);
  std::fclose(f);
  expect_error([&] { open_file(tmp.path(), 0, 1); }, PSTATE_ERR_INVALID_ARGUMENT,
               {"/tmp holds 1 files ('notes.txt')", "empty or new directory"});
  assert_int_equal(::access((mine + "/notes.txt").c_str(), F_OK), 0);
  assert_int_not_equal(::access((tmp.path() + "/meta").c_str(), F_OK), 0);
}

// A job whose processes died (here: killed with the store open) leaves its directory; the next
// job finds nobody holding it and its processes gone, and reclaims it.
void test_file_leftover_of_dead_processes_is_reclaimed(void **) {
  TempDir tmp;
  std::string dir = tmp.path() + "/store";
  ChildBody killed = [&](int) -> int {
    auto store = open_file(dir, 0, 2, "old-token");
    store_barrier(*store, "never-complete", 1, soon());
    store->set("old/key", bytes_of("old"), soon());
    ::raise(SIGKILL);
    return 0;
  };
  pid_t child = pstest::fork_child(killed, 0);
  assert_int_equal(pst_wait(child, kLongMs), 128 + SIGKILL);
  auto r0 = open_file(dir, 0, 3, "new-token");  // another token and world size: no AUTH, no MISMATCH
  assert_false(r0->check("old/key", soon()));
  auto r1 = open_file(dir, 1, 3, "new-token");
  store_barrier(*r0, "init", 1, soon());
}

// The same leftover from processes of another host cannot be proven dead: it is named.
void test_file_leftover_from_another_host_is_named(void **) {
  TempDir tmp;
  FILE *f = std::fopen((tmp.path() + "/meta").c_str(), "w");
  assert_non_null(f);
  std::fputs(
      "pstate-file-store 2\nworld_size 2\ntoken none\njob_id -\ncreated_by_rank 0\n"
      "created_by pid 4242 on host some-other-host (boot b, start 1)\n",
      f);
  std::fclose(f);
  expect_error(
      [&] { open_file(tmp.path(), 0, 2); }, PSTATE_ERR_MISMATCH,
      {"holds the store of an earlier job (pids 4242 on host some-other-host", "delete it or use a new directory"});
}

// A process of the job refused for its claim before every rank joined ends the job: the ranks
// that wait read it at their next poll.
void test_file_refused_member_fails_the_waiting_ranks_at_once(void **) {
  TempDir tmp;
  auto r0 = open_file(tmp.path(), 0, 3);
  std::atomic<int> status{-1};
  std::string text;
  std::thread waiter([&] {
    try {
      r0->wait({"pstate/init/done"}, Deadline::after_ms(20000));
      status = PSTATE_OK;
    } catch (const Error &e) {
      text = e.what();
      status = e.status();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { open_file(tmp.path(), 2, 4); }, PSTATE_ERR_MISMATCH, {"rank 2 says world_size 4, rank 0 says 3"});
  waiter.join();
  assert_true(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  assert_int_equal(status.load(), PSTATE_ERR_MISMATCH);
  assert_non_null(std::strstr(text.c_str(), "the job cannot start: the store refused rank 2"));
}

// A wait that times out names the ranks that never joined.
void test_file_timeout_names_the_absent_ranks(void **) {
  TempDir tmp;
  auto r0 = open_file(tmp.path(), 0, 3);
  auto r2 = open_file(tmp.path(), 2, 3);
  expect_error([&] { r0->wait({"pstate/init/done"}, Deadline::after_ms(100)); }, PSTATE_ERR_TIMEOUT,
               {"rank 1 of 0..2 never connected; last seen: none", "1 of 1 keys never set"});
}

}  // namespace

int main(void) {
  alarm(600);  // the whole file, in the worst case; each test bounds itself far below this
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_file_four_processes_set_get_add_wait_check),
      cmocka_unit_test(test_file_add_is_atomic_across_processes),
      cmocka_unit_test(test_file_set_if_absent_first_writer_wins),
      cmocka_unit_test(test_file_get_waits_for_a_later_set),
      cmocka_unit_test(test_file_get_past_deadline_is_timeout_naming_the_key),
      cmocka_unit_test(test_file_wrong_or_missing_token_is_auth_error),
      cmocka_unit_test(test_file_token_is_not_stored_in_clear),
      cmocka_unit_test(test_file_duplicate_rank_is_mismatch_naming_the_holder),
      cmocka_unit_test(test_file_rank_of_a_killed_process_can_be_claimed_again),
      cmocka_unit_test(test_file_rank_outside_world_is_mismatch),
      cmocka_unit_test(test_file_world_size_disagreement_is_mismatch_naming_both_ranks),
      cmocka_unit_test(test_file_keys_with_slashes_binary_and_long_names_stay_distinct),
      cmocka_unit_test(test_file_erase_check_and_add_on_non_integer),
      cmocka_unit_test(test_file_path_that_is_a_file_is_invalid_argument),
      cmocka_unit_test(test_file_last_rank_out_removes_the_store),
      cmocka_unit_test(test_file_foreign_files_in_the_store_tree_are_refused_and_kept),
      cmocka_unit_test(test_file_leftover_of_dead_processes_is_reclaimed),
      cmocka_unit_test(test_file_leftover_from_another_host_is_named),
      cmocka_unit_test(test_file_refused_member_fails_the_waiting_ranks_at_once),
      cmocka_unit_test(test_file_timeout_names_the_absent_ranks),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
