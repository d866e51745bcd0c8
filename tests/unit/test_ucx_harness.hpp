// test_ucx_harness.hpp — what the UCX tests share: ranks as forked processes (or threads) that
// find each other through a temporary directory of files, bounded in time, killed on failure.
//
// The real rendezvous store is not used on purpose (it is another layer, tested on its own):
// each rank writes encode_peer_entry(self) to DIR/rank.N (write + rename, so readers never see a
// half file) and the PeerDirectory reads DIR/rank.M, waiting up to a deadline for it to appear.
// Inside a child, failures are reported by CHILD_CHECK (prints, exits non-zero); the parent
// asserts on exit statuses with cmocka. Every multi-process run has a wall-clock bound: the
// parent SIGKILLs all children when it passes, and each child arms alarm() as well.
#pragma once

#include "transport/ucx/ucx_channel.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
}

namespace ucxtest {

using pstate::Deadline;
using pstate::PeerEntry;
using pstate::UcxChannel;
using pstate::UcxWorker;
using pstate::UcxWorkerOptions;

#define CHILD_CHECK(cond)                                                                  \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "[child %d] %s:%d: check failed: %s\n", static_cast<int>(getpid()), \
                   __FILE__, __LINE__, #cond);                                             \
      std::fflush(stderr);                                                                 \
      _exit(3);                                                                            \
    }                                                                                      \
  } while (0)

inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// CPU time (user + system) of the calling process or thread, in seconds.
inline double cpu_seconds(int who = RUSAGE_SELF) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A fresh temporary directory, removed (with its files) on destruction by the creating process.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/pstate-ucx-test-XXXXXX";
    const char *d = mkdtemp(tmpl);
    if (d == nullptr) std::abort();
    path_ = d;
    owner_ = getpid();
  }
  ~TempDir() {
    if (getpid() != owner_) return;
    std::string cmd = "rm -rf '" + path_ + "'";
    int ignored = std::system(cmd.c_str());
    (void)ignored;
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

 private:
  std::string path_;
  pid_t owner_;
};

inline void write_file(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::rename(tmp.c_str(), path.c_str());
}

inline bool file_exists(const std::string &path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// Waits (polling every millisecond) for path to exist; false when the deadline passes.
inline bool wait_for_file(const std::string &path, Deadline deadline) {
  while (!file_exists(path)) {
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

inline std::vector<uint8_t> read_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void touch(const std::string &path) { write_file(path, {}); }

// Options every test starts from: TCP (if UCX uses it at all) only on loopback.
inline UcxWorkerOptions test_options(int rank, int world, const std::string &host_id = "testhost") {
  UcxWorkerOptions o;
  o.world_rank = rank;
  o.world_size = world;
  o.host_id = host_id;
  o.socket_ifname = "lo";
  o.default_timeout_ms = 60000;
  return o;
}

// Publishes the worker's entry to dir and installs a directory that reads the others'.
inline void join_via_files(UcxWorker &w, const std::string &dir) {
  write_file(dir + "/rank." + std::to_string(w.world_rank()), pstate::encode_peer_entry(w.self_entry()));
  w.set_directory([dir](int rank, bool) {
    std::string path = dir + "/rank." + std::to_string(rank);
    if (!wait_for_file(path, Deadline::after_ms(30000)))
      pstate::throw_error(PSTATE_ERR_TIMEOUT, "test directory: no entry for rank ", rank, " in ", dir);
    return pstate::decode_peer_entry(read_file(path));
  });
}

// The world group of w, with group id gid.
inline std::unique_ptr<UcxChannel> world_channel(UcxWorker &w, uint32_t gid = 1, const std::string &name = "world") {
  std::vector<int> ranks(static_cast<size_t>(w.world_size()));
  for (int i = 0; i < w.world_size(); ++i) ranks[static_cast<size_t>(i)] = i;
  return std::make_unique<UcxChannel>(w, ranks, w.world_rank(), gid, name);
}

// Runs body(rank) in `world` forked children. Returns each child's exit code (128+signal when
// killed by a signal, -1 when the parent had to kill it at the time limit). on_started(pids) runs
// in the parent once all children exist (fault tests use it to kill one).
inline std::vector<int> run_ranks(int world, int limit_s, const std::function<int(int rank)> &body,
                                  const std::function<void(const std::vector<pid_t> &)> &on_started = {}) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(static_cast<size_t>(world), -1);
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(static_cast<unsigned>(limit_s + 5));
      int code = 4;
      try {
        code = body(r);
      } catch (const pstate::Error &e) {
        std::fprintf(stderr, "[rank %d] unexpected pstate::Error %s: %s\n", r, pstate_status_string(e.status()),
                     e.what());
        code = 5;
      } catch (const std::exception &e) {
        std::fprintf(stderr, "[rank %d] unexpected exception: %s\n", r, e.what());
        code = 6;
      }
      std::fflush(stderr);
      std::fflush(stdout);
      // PSTATE_TEST_CHILD_EXIT=1: exit() instead of _exit(), so LeakSanitizer checks each rank.
      const char *full_exit = std::getenv("PSTATE_TEST_CHILD_EXIT");
      if (full_exit != nullptr && full_exit[0] == '1') std::exit(code);
      _exit(code);
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  if (on_started) on_started(pids);
  std::vector<int> codes(static_cast<size_t>(world), -1);
  size_t left = pids.size();
  double give_up = now_s() + limit_s;
  while (left > 0 && now_s() < give_up) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pids[i] = -1;
      --left;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    std::fprintf(stderr, "run_ranks: rank %zu still running after %d s: killed\n", i, limit_s);
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
  }
  return codes;
}

inline void assert_all_exit_zero(const std::vector<int> &codes) {
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] != 0) std::fprintf(stderr, "rank %zu exited with %d\n", i, codes[i]);
    assert_int_equal(codes[i], 0);
  }
}

// Deterministic bytes for message `seq` of `size` bytes, computed independently of UCX.
inline uint8_t pattern_byte(size_t seq, size_t i) {
  uint64_t x = (seq + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
  return static_cast<uint8_t>(x >> 56);
}
inline void fill_pattern(std::vector<uint8_t> &buf, size_t seq) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern_byte(seq, i);
}
inline bool matches_pattern(const std::vector<uint8_t> &buf, size_t seq) {
  for (size_t i = 0; i < buf.size(); ++i)
    if (buf[i] != pattern_byte(seq, i)) return false;
  return true;
}

// Runs f and returns the status of the pstate::Error it throws (PSTATE_OK when none), keeping
// the message in *message.
template <typename F>
pstate_status_t status_of(F &&f, std::string *message = nullptr) {
  try {
    f();
  } catch (const pstate::Error &e) {
    if (message != nullptr) *message = e.what();
    return e.status();
  }
  return PSTATE_OK;
}

}  // namespace ucxtest
