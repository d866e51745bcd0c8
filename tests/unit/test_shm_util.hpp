// test_shm_util.hpp — what the shared-memory tests share: forking ranks with a time bound,
// memory shared between the test and its ranks, a pidfd liveness check, a /dev/shm leak check,
// and an element-wise reference arithmetic for every dtype written independently of the code
// under test (fold in rank order; fp16/bf16 through float32 with round-to-nearest-even).
#pragma once

#include "common/error.hpp"

#include <pstate/pstate.h>

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace shmtest {

// ---- memory shared between the test process and its forked ranks ----------------------------

template <typename T>
T *shared_array(size_t n) {
  void *p = mmap(nullptr, sizeof(T) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    abort();
  }
  return static_cast<T *>(p);  // zero-filled; T must be valid as all-zero bytes
}

template <typename T>
void free_shared(T *p, size_t n) {
  munmap(p, sizeof(T) * n);
}

// Per-test board: pids of the ranks (filled by the parent right after each fork), a word per rank
// the ranks use to report results, and a few flags.
struct Board {
  static constexpr int kMaxRanks = 16;
  std::atomic<int32_t> pids[kMaxRanks];
  std::atomic<int64_t> word[kMaxRanks];    // e.g. a status or an iteration count
  std::atomic<uint64_t> hash[kMaxRanks];   // e.g. a hash of the result, for bit identity
  std::atomic<int32_t> flag;               // free for the test
};

// ---- segment names and the leak check ---------------------------------------------------------

inline std::string unique_name(const char *what) {
  static int counter = 0;
  return "/pstate-test-" + std::to_string(getpid()) + "-" + what + "-" + std::to_string(counter++);
}

// Entries of /dev/shm made by this test process (names start with "pstate-test-<pid>-").
inline int leftover_segments() {
  std::string prefix = "pstate-test-" + std::to_string(getpid()) + "-";
  int n = 0;
  if (DIR *d = opendir("/dev/shm")) {
    while (dirent *e = readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
        fprintf(stderr, "leftover /dev/shm/%s\n", e->d_name);
        ++n;
      }
    closedir(d);
  }
  return n;
}

// ---- liveness: pidfds of the other ranks ------------------------------------------------------

// Throws PSTATE_ERR_PEER_LOST when a rank listed on the board (other than `self`) has exited.
class PeerWatch {
 public:
  PeerWatch(const Board *board, int size, int self) : board_(board), size_(size), self_(self), fds_(size, -1) {}
  ~PeerWatch() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  void operator()() {
    for (int r = 0; r < size_; ++r) {
      if (r == self_) continue;
      pid_t pid = board_->pids[r].load();
      if (pid <= 0) continue;  // parent has not recorded it yet
      if (fds_[r] < 0) {
        fds_[r] = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
        if (fds_[r] < 0) lost(r, pid);  // already reaped
      }
      pollfd p{fds_[r], POLLIN, 0};
      if (poll(&p, 1, 0) > 0) lost(r, pid);
    }
  }

 private:
  [[noreturn]] static void lost(int r, pid_t pid) {
    pstate::throw_error(PSTATE_ERR_PEER_LOST, "rank ", r, " (pid ", pid, ") exited");
  }
  const Board *board_;
  int size_, self_;
  std::vector<int> fds_;
};

// ---- forking ranks ----------------------------------------------------------------------------

// Runs body(rank) in `size` forked processes (exit status = its return value; an escaping
// exception is printed and exits 99). The parent records pids on the board, calls
// parent_action (if any) while ranks run, reaps them, and SIGKILLs every rank still alive after
// timeout_s. Returns the wait statuses, rank order; a rank killed for the time bound reads as
// killed by SIGKILL and *timed_out is set.
inline std::vector<int> run_ranks(int size, Board *board, const std::function<int(int)> &body, int timeout_s = 60,
                                  const std::function<void()> &parent_action = {}, bool *timed_out = nullptr) {
  std::vector<pid_t> pids(size, -1);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < size; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(static_cast<unsigned>(timeout_s + 5));  // belt and braces
      int code = 98;
      try {
        code = body(r);
      } catch (const std::exception &e) {
        fprintf(stderr, "rank %d: uncaught exception: %s\n", r, e.what());
        code = 99;
      }
      fflush(stderr);
      _exit(code);
    }
    pids[r] = pid;
    board->pids[r].store(pid);
  }
  if (parent_action) parent_action();
  std::vector<int> status(size, -1);
  int alive = size;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  if (timed_out) *timed_out = false;
  while (alive > 0) {
    for (int r = 0; r < size; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --alive;
      }
    }
    if (alive > 0 && std::chrono::steady_clock::now() >= until) {
      fprintf(stderr, "run_ranks: time bound of %d s passed, killing the ranks\n", timeout_s);
      if (timed_out) *timed_out = true;
      for (int r = 0; r < size; ++r)
        if (status[r] == -1) kill(pids[r], SIGKILL);
      until = std::chrono::steady_clock::time_point::max();
    }
    if (alive > 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return status;
}

inline bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

inline bool all_ok(const std::vector<int> &statuses) {
  bool ok = true;
  for (size_t r = 0; r < statuses.size(); ++r)
    if (!exited_ok(statuses[r])) {
      fprintf(stderr, "rank %zu: %s %d\n", r, WIFEXITED(statuses[r]) ? "exit" : "signal",
              WIFEXITED(statuses[r]) ? WEXITSTATUS(statuses[r]) : WTERMSIG(statuses[r]));
      ok = false;
    }
  return ok;
}

// Runs fn and returns the status of the pstate::Error it throws (PSTATE_OK when none).
template <typename Fn>
pstate_status_t status_of(Fn &&fn, std::string *message = nullptr) {
  try {
    fn();
    return PSTATE_OK;
  } catch (const pstate::Error &e) {
    if (message) *message = e.what();
    return e.status();
  }
}

inline uint64_t fnv1a(const void *data, size_t bytes) {
  uint64_t h = 1469598103934665603ULL;
  auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// ---- reference arithmetic, one element at a time ----------------------------------------------

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
inline uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float mag;
  if (exp == 0)
    mag = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    mag = man ? NAN : INFINITY;
  else
    mag = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -mag : mag;
}
// Round to nearest even, by hand: scale to the half's unit in the last place, rint, rebuild.
inline uint16_t f32_to_f16(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  int e;
  std::frexp(a, &e);             // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, -14);  // unbiased exponent of the half (subnormals use -14)
  float ulp = std::ldexp(1.0f, exp - 10);
  float units = std::nearbyint(a / ulp);  // exact: a/ulp < 2^12, rint rounds half to even
  uint32_t q = static_cast<uint32_t>(units);
  if (q >= 0x800u) {  // rounding carried into the next binade
    q >>= 1;
    ++exp;
  }
  if (q < 0x400u) return sign | static_cast<uint16_t>(q);  // subnormal (exp == -14)
  return sign | static_cast<uint16_t>(((exp + 15) << 10) | (q & 0x3ffu));
}

inline size_t esize_of(pstate_dtype_t t) {
  switch (t) {
    case PSTATE_INT8: case PSTATE_UINT8: case PSTATE_FP8_E4M3: case PSTATE_FP8_E5M2: return 1;
    case PSTATE_FLOAT16: case PSTATE_BFLOAT16: return 2;
    case PSTATE_INT32: case PSTATE_UINT32: case PSTATE_FLOAT32: return 4;
    case PSTATE_INT64: case PSTATE_UINT64: case PSTATE_FLOAT64: return 8;
  }
  return 0;
}

template <typename T>
T apply_int(T a, T b, pstate_reduce_op_t op) {  // wrapping, via the unsigned type
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case PSTATE_SUM: case PSTATE_AVG: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    case PSTATE_PROD: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case PSTATE_MAX: return a > b ? a : b;
    case PSTATE_MIN: return a < b ? a : b;
  }
  return a;
}

template <typename F>
F apply_float(F a, F b, pstate_reduce_op_t op) {
  switch (op) {
    case PSTATE_SUM: case PSTATE_AVG: return a + b;
    case PSTATE_PROD: return a * b;
    case PSTATE_MAX: return a > b ? a : b;
    case PSTATE_MIN: return a < b ? a : b;
  }
  return a;
}

template <typename T>
void fold_typed(void *acc, const void *in, pstate_reduce_op_t op) {
  T a, b;
  std::memcpy(&a, acc, sizeof(T));
  std::memcpy(&b, in, sizeof(T));
  T r;
  if constexpr (std::is_floating_point_v<T>)
    r = apply_float(a, b, op);
  else
    r = apply_int(a, b, op);
  std::memcpy(acc, &r, sizeof(T));
}

// *acc = *acc op *in for one element of dtype t.
inline void ref_fold(pstate_dtype_t t, pstate_reduce_op_t op, void *acc, const void *in) {
  uint16_t a16, b16;
  switch (t) {
    case PSTATE_INT8: return fold_typed<int8_t>(acc, in, op);
    case PSTATE_UINT8: return fold_typed<uint8_t>(acc, in, op);
    case PSTATE_INT32: return fold_typed<int32_t>(acc, in, op);
    case PSTATE_UINT32: return fold_typed<uint32_t>(acc, in, op);
    case PSTATE_INT64: return fold_typed<int64_t>(acc, in, op);
    case PSTATE_UINT64: return fold_typed<uint64_t>(acc, in, op);
    case PSTATE_FLOAT32: return fold_typed<float>(acc, in, op);
    case PSTATE_FLOAT64: return fold_typed<double>(acc, in, op);
    case PSTATE_FLOAT16:
    case PSTATE_BFLOAT16: {
      std::memcpy(&a16, acc, 2);
      std::memcpy(&b16, in, 2);
      bool half = t == PSTATE_FLOAT16;
      float r = apply_float(half ? f16_to_f32(a16) : bf16_to_f32(a16), half ? f16_to_f32(b16) : bf16_to_f32(b16), op);
      uint16_t out = half ? f32_to_f16(r) : f32_to_bf16(r);
      std::memcpy(acc, &out, 2);
      return;
    }
    default: return;
  }
}

// *x /= divisor for one element (the AVG finish: integers truncate toward zero).
inline void ref_divide(pstate_dtype_t t, void *x, int divisor) {
  auto idiv = [&](auto v) {
    std::memcpy(&v, x, sizeof(v));
    v = static_cast<decltype(v)>(v / static_cast<decltype(v)>(divisor));
    std::memcpy(x, &v, sizeof(v));
  };
  uint16_t h;
  switch (t) {
    case PSTATE_INT8: return idiv(int8_t{});
    case PSTATE_UINT8: return idiv(uint8_t{});
    case PSTATE_INT32: return idiv(int32_t{});
    case PSTATE_UINT32: return idiv(uint32_t{});
    case PSTATE_INT64: return idiv(int64_t{});
    case PSTATE_UINT64: return idiv(uint64_t{});
    case PSTATE_FLOAT32: return idiv(float{});
    case PSTATE_FLOAT64: return idiv(double{});
    case PSTATE_FLOAT16:
      std::memcpy(&h, x, 2);
      h = f32_to_f16(f16_to_f32(h) / static_cast<float>(divisor));
      std::memcpy(x, &h, 2);
      return;
    case PSTATE_BFLOAT16:
      std::memcpy(&h, x, 2);
      h = f32_to_bf16(bf16_to_f32(h) / static_cast<float>(divisor));
      std::memcpy(x, &h, 2);
      return;
    default: return;
  }
}

// The input of `rank` at element i: spread over the type's range for integers (so sums and
// products wrap), moderate values with fractions for floating types (so sums round).
inline void input_value(pstate_dtype_t t, int rank, size_t i, void *out) {
  uint64_t h = mix64((static_cast<uint64_t>(rank) << 40) ^ i ^ (static_cast<uint64_t>(t) << 56));
  double real = (static_cast<double>(h % 200001) - 100000.0) / 12345.0;  // about [-8.1, 8.1]
  float f = static_cast<float>(real);
  uint16_t u16;
  switch (t) {
    case PSTATE_FLOAT32: std::memcpy(out, &f, 4); return;
    case PSTATE_FLOAT64: std::memcpy(out, &real, 8); return;
    case PSTATE_FLOAT16: u16 = f32_to_f16(f); std::memcpy(out, &u16, 2); return;
    case PSTATE_BFLOAT16: u16 = f32_to_bf16(f); std::memcpy(out, &u16, 2); return;
    default: std::memcpy(out, &h, esize_of(t)); return;  // low bytes of h
  }
}

inline bool is_float(pstate_dtype_t t) {
  return t == PSTATE_FLOAT16 || t == PSTATE_BFLOAT16 || t == PSTATE_FLOAT32 || t == PSTATE_FLOAT64;
}

// Reference all-reduce of element i over `size` ranks, folded in rank order 0..size-1.
inline void reference_element(pstate_dtype_t t, pstate_reduce_op_t op, int size, size_t i, void *out) {
  uint8_t in[8];
  input_value(t, 0, i, out);
  for (int k = 1; k < size; ++k) {
    input_value(t, k, i, in);
    ref_fold(t, op, out, in);
  }
  if (op == PSTATE_AVG) ref_divide(t, out, size);
}

// Equal bits, or — for AVG on floating types only, where the division's rounding is the kernel's
// choice — within one unit in the last place (adjacent bit patterns of the same sign).
inline bool element_matches(pstate_dtype_t t, pstate_reduce_op_t op, const void *got, const void *want) {
  size_t n = esize_of(t);
  if (std::memcmp(got, want, n) == 0) return true;
  if (op != PSTATE_AVG || !is_float(t)) return false;
  uint64_t a = 0, b = 0;
  std::memcpy(&a, got, n);
  std::memcpy(&b, want, n);
  uint64_t sign = uint64_t{1} << (8 * n - 1);
  if ((a & sign) != (b & sign)) return false;
  return (a > b ? a - b : b - a) <= 1;
}

inline const char *dtype_name(pstate_dtype_t t) {
  static const char *names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",    "uint64",
                                "float16", "float32", "float64", "bfloat16", "fp8_e4m3", "fp8_e5m2"};
  return static_cast<unsigned>(t) < 12 ? names[t] : "?";
}
inline const char *op_name(pstate_reduce_op_t op) {
  static const char *names[] = {"sum", "prod", "max", "min", "avg"};
  return static_cast<unsigned>(op) < 5 ? names[op] : "?";
}

constexpr pstate_dtype_t kReducibleDtypes[] = {PSTATE_INT8,    PSTATE_UINT8,   PSTATE_INT32,
                                               PSTATE_UINT32,  PSTATE_INT64,   PSTATE_UINT64,
                                               PSTATE_FLOAT16, PSTATE_FLOAT32, PSTATE_FLOAT64,
                                               PSTATE_BFLOAT16};
constexpr pstate_reduce_op_t kOps[] = {PSTATE_SUM, PSTATE_PROD, PSTATE_MAX, PSTATE_MIN, PSTATE_AVG};

}  // namespace shmtest
