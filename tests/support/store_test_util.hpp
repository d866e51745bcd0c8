// store_test_util.hpp — small C++ helpers shared by the bootstrap (store, launch_env) tests.
//
// expect_error: the call must throw pstate::Error with the given status and a message holding
// every given fragment (the message is printed when it does not, so a failure explains itself).
// run_children: fork_ranks.h with a C++ lambda per child; exceptions in a child become its exit
// status 2 with the message on stderr. CHILD_CHECK: an assertion for children (no cmocka there).
// TempDir: a fresh directory under /tmp, removed with its contents at the end of the test.
// soon(): a deadline far past what a store call should take; store_options: one rank's options. Refusal / refusal_of: the status and
// text an open (or any call) failed with, from any thread (cmocka asserts stay on the main one).
// wait_for_go: a forked child waits for its parent's byte on a pipe (see there why).
// Include this header after every other header of the test (see the note on cmocka below).
#pragma once

// Every C++ header first: cmocka defines a fail() macro that breaks std::basic_ios::fail().
#include "bootstrap/store.hpp"
#include "common/deadline.hpp"
#include "common/error.hpp"
#include "fork_ranks.h"

#include <ftw.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

// clang-format off
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
extern "C" {  // cmocka 1.1 declares its functions without C linkage for C++
#include <cmocka.h>
}
// clang-format on

namespace pstest {

inline constexpr int64_t kLongMs = 30000;  // a generous bound for what should take milliseconds
inline pstate::Deadline soon() { return pstate::Deadline::after_ms(kLongMs); }

// A store's options for one rank of a world (rank -1 and world 0: an observer), with soon()'s
// bound on the open.
inline pstate::StoreOptions store_options(const std::string &init_method, int rank, int world,
                                          const std::string &token = "") {
  pstate::StoreOptions o;
  o.init_method = init_method;
  o.rank = rank;
  o.world_size = world;
  o.job_token = token;
  o.timeout_ms = kLongMs;
  return o;
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The status and text a call failed with (PSTATE_OK when it did not fail).
struct Refusal {
  pstate_status_t status = PSTATE_OK;
  std::string text;
  bool has(const std::string &fragment) const { return text.find(fragment) != std::string::npos; }
};
inline Refusal refusal_of(const std::function<void()> &call) {
  Refusal r;
  try {
    call();
  } catch (const pstate::Error &e) {
    r.status = e.status();
    r.text = e.what();
  }
  if (r.status != PSTATE_OK) std::printf("refused as expected: %s: %s\n", pstate_status_string(r.status), r.text.c_str());
  return r;
}

// A child that opens a store must be forked before its parent starts threads of its own (a
// store's lease keeper, watcher or server): a fork of a multi-threaded process can inherit a lock
// that one of those threads held (the allocator's, libcurl's), and the child then hangs in its
// open. So the child is forked first and waits for the parent's go (a byte on the pipe), or gives
// up after kLongMs (false).
inline bool wait_for_go(int fd) {
  pollfd p{fd, POLLIN, 0};
  char c;
  return ::poll(&p, 1, static_cast<int>(kLongMs)) == 1 && ::read(fd, &c, 1) == 1;
}

// A pipe, closed at the end of the test: a parent and the children it forked signal each other.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    if (::pipe(fds) != 0) std::abort();
  }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  Pipe(const Pipe &) = delete;
  Pipe &operator=(const Pipe &) = delete;
  void signal() { (void)!::write(fds[1], "x", 1); }
  bool await() { return wait_for_go(fds[0]); }  // false after kLongMs without a signal
};

inline void expect_error(const std::function<void()> &call, pstate_status_t status,
                         std::initializer_list<std::string> fragments) {
  try {
    call();
  } catch (const pstate::Error &e) {
    std::string msg = e.what();
    bool ok = e.status() == status;
    for (const auto &f : fragments) ok = ok && msg.find(f) != std::string::npos;
    if (!ok) {
      std::fprintf(stderr, "expected status %s with [", pstate_status_string(status));
      for (const auto &f : fragments) std::fprintf(stderr, " '%s'", f.c_str());
      std::fprintf(stderr, " ]\n     got status %s: %s\n", pstate_status_string(e.status()), msg.c_str());
    }
    assert_true(ok);
    return;
  }
  std::fprintf(stderr, "expected status %s, but the call succeeded\n", pstate_status_string(status));
  fail();
}

#define CHILD_CHECK(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: child check failed: %s\n", __FILE__, __LINE__, #cond);   \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

using ChildBody = std::function<int(int)>;

inline int run_child_body(int index, void *arg) {
  try {
    return (*static_cast<ChildBody *>(arg))(index);
  } catch (const pstate::Error &e) {
    std::fprintf(stderr, "child %d: %s: %s\n", index, pstate_status_string(e.status()), e.what());
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "child %d: exception: %s\n", index, e.what());
    return 3;
  }
}

// Forks one child running body(index); the child exits with body's result.
inline pid_t fork_child(ChildBody &body, int index) { return pst_fork(run_child_body, index, &body); }

// Runs body(0..n-1) in n children; asserts every one exited with 0 within timeout_ms.
inline void run_children(int n, ChildBody body, int timeout_ms) {
  int statuses[64] = {0};
  assert_true(n <= 64);
  int failed = pst_run_children(n, run_child_body, &body, timeout_ms, statuses);
  for (int i = 0; i < n; ++i)
    if (statuses[i] != 0) std::fprintf(stderr, "child %d ended with status %d\n", i, statuses[i]);
  assert_int_equal(failed, 0);
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/pstate-test-XXXXXX";
    if (mkdtemp(pattern) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    nftw(path_.c_str(), [](const char *p, const struct stat *, int, struct FTW *) { return std::remove(p); }, 16,
         FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace pstest
