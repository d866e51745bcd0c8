// test_store_file.cpp — what only the file store (file:///DIR) does: the job token kept as a
// fingerprint, a path that is not a directory, the last rank out removing what the store made, a
// directory that holds someone else's files, an earlier job's leftover reclaimed when its
// processes are provably gone and named when they ran on another host. What every store does
// (set, get, add, wait, rank claims, tokens, refusals, absent ranks) is test_store_contract.cpp's,
// which CTest runs over this store as test_store_contract_file. Each test uses its own fresh
// directory under /tmp.
#include "bootstrap/file_store.hpp"

#include <signal.h>
#include <sys/stat.h>

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using pstest::ChildBody;
using pstest::expect_error;
using pstest::kLongMs;
using pstest::soon;
using pstest::TempDir;

namespace {

std::unique_ptr<Store> open_file(const std::string &dir, int rank, int world, const std::string &token = "") {
  return open_store(pstest::store_options("file://" + dir, rank, world, token), Logger(LogLevel::kNone));
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

}  // namespace

int main(void) {
  alarm(600);  // the whole file, in the worst case; each test bounds itself far below this
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_file_token_is_not_stored_in_clear),
      cmocka_unit_test(test_file_path_that_is_a_file_is_invalid_argument),
      cmocka_unit_test(test_file_last_rank_out_removes_the_store),
      cmocka_unit_test(test_file_foreign_files_in_the_store_tree_are_refused_and_kept),
      cmocka_unit_test(test_file_leftover_of_dead_processes_is_reclaimed),
      cmocka_unit_test(test_file_leftover_from_another_host_is_named),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
