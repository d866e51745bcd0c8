// devsim_nccl.cpp — an NCCL stand-in on shared memory: libpstate_devsim_nccl.so.
//
// The NCCL subset pstate (and tests/gpu) resolve. The unique id names a POSIX shared segment
// (/dev/shm) where the ranks of one communicator meet, whether they are processes or threads;
// the last rank to join unlinks it, so nothing is left behind even when ranks are killed.
// Collectives and send/recv run on the stream worker of the runtime stand-in (devsim.h), in stream
// order, and reduce in rank order (rank 0's value first), one step per rank, each step rounded to
// the dtype (float16/bfloat16/fp8 through double; integers wrap; AVG: integers sum then divide
// truncating, floats multiply each input by 1/n first, as NCCL does).
//
//   segment: Header (per-rank pid, host, device, phase counter) | rings[n][n] counters |
//            n collective slots of kSlot bytes | n*n point-to-point rings of kRing bytes
//
// A collective moves its data in chunks: each rank writes its chunk into its slot, waits at a
// phase barrier for every rank, reads every slot in rank order, and waits again before the next
// chunk. Point-to-point uses the single-producer ring of the (sender, receiver) pair; the
// operations of one ncclGroupStart/End batch progress together, so a batch never deadlocks on
// itself. A rank that waits for a peer waits forever, as NCCL does, but when that peer's process
// is gone it sets ncclRemoteError as the communicator's asynchronous error (NCCL's proxy notices
// the closed socket); ncclCommAbort releases every wait.
//
// Non-blocking communicators (config.blocking = 0) do every call on a launcher thread of the
// communicator: the call returns ncclInProgress and ncclCommGetAsyncError says ncclInProgress until
// the launch is done; a second call before that is ncclInvalidUsage. Faults on demand:
// DEVSIM_NCCL_FAIL, DEVSIM_NCCL_ASYNC, DEVSIM_NCCL_HANG (tests/devsim/README.md).
//
// Registered memory (issue 29): ncclMemAlloc, ncclCommWindowRegister as a collective with
// agreement, windows per communicator, a window budget, ncclCommRegister and a version override
// (see "registered memory" below and tests/devsim/README.md).
//
// Two ranks of one host on one device are refused at init ("Duplicate GPU detected",
// ncclInvalidUsage), as NCCL refuses them; a host is what NCCL takes for one: NCCL_HOSTID when set,
// else the host name and boot id, so ranks with NCCL_HOSTIDs of their own may share a device
// (tests/gpu/own_host_id.sh).
// Compiled with DEVSIM_NO_WORK (nowork/, for bench/device_call_cost.sh only; the tests never load
// it), every collective and point-to-point call on a communicator returns ncclSuccess at once,
// before any check, so a caller's own host time per call is what a loop of them measures.
#include "devsim.h"

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#define DEVSIM_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxRanks = 64;
constexpr size_t kSlot = 256 * 1024;  // collective chunk per rank
constexpr size_t kRing = 64 * 1024;   // point-to-point ring per ordered pair

struct RankSlot {
  std::atomic<int> present;
  int pid;
  uint64_t host;  // host_hash()
  int device;
  std::atomic<uint64_t> phase;
};

struct Ring {
  std::atomic<uint64_t> head;  // bytes written (by the sender)
  std::atomic<uint64_t> tail;  // bytes consumed (by the receiver)
};

struct Header {
  std::atomic<int> nranks;
  std::atomic<int> joined;
  RankSlot ranks[kMaxRanks];
};

size_t segment_bytes(int n) {
  auto un = static_cast<size_t>(n);
  return sizeof(Header) + un * un * sizeof(Ring) + un * kSlot + un * un * kRing;
}

// ---- errors --------------------------------------------------------------------------------------

std::mutex g_error_mu;
std::string g_last_error;
thread_local std::string t_last_error_copy;

template <class... A>
void set_error(const char *fmt, A... a) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, a...);
  std::lock_guard<std::mutex> lock(g_error_mu);
  g_last_error = buf;
}

const char *result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclUnknownResult";
  }
}

ncclResult_t parse_result(const std::string &s) {
  for (int r = 0; r <= ncclInProgress; ++r)
    if (s == result_name(static_cast<ncclResult_t>(r))) return static_cast<ncclResult_t>(r);
  return static_cast<ncclResult_t>(std::atoi(s.c_str()));
}

// ---- faults on demand --------------------------------------------------------------------------
//
// A variable holds entries "FUNC:RANK:NTH[:RESULT]" separated by commas; RANK is the rank in the
// communicator or * for any. The NTH call (1-based) of FUNC on that rank, counted from the moment
// the variable got its current value, matches.

struct FaultCounters {
  std::mutex mu;
  std::map<std::string, std::string> value;          // variable -> value the counts belong to
  std::map<std::string, unsigned long long> counts;  // variable|entry -> calls seen
};
FaultCounters *g_faults = new FaultCounters;

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// Whether this call of `func` on `rank` is the one a fault entry of `var` names; *result gets
// the entry's RESULT.
bool fault_hit(const char *var, const char *func, int rank, ncclResult_t *result) {
  const char *v = std::getenv(var);
  std::string value = v != nullptr ? v : "";
  std::lock_guard<std::mutex> lock(g_faults->mu);
  auto &known = g_faults->value[var];
  if (known != value) {
    known = value;
    for (auto it = g_faults->counts.begin(); it != g_faults->counts.end();)
      it = it->first.rfind(std::string(var) + "|", 0) == 0 ? g_faults->counts.erase(it) : std::next(it);
  }
  if (value.empty()) return false;
  bool hit = false;
  for (const std::string &entry : split(value, ',')) {
    auto f = split(entry, ':');
    if (f.size() < 3 || f[0] != func) continue;
    if (f[1] != "*" && std::atoi(f[1].c_str()) != rank) continue;
    unsigned long long n = ++g_faults->counts[std::string(var) + "|" + entry];
    if (n == std::strtoull(f[2].c_str(), nullptr, 10)) {
      hit = true;
      if (result != nullptr) *result = f.size() > 3 ? parse_result(f[3]) : ncclSystemError;
    }
  }
  return hit;
}

// ---- dtypes and reductions ------------------------------------------------------------------------

size_t dtype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

// A small float format: exponent bits, mantissa bits; e4m3 is the "fn" variant (no infinity,
// 0x7f/0xff NaN, max 448). Round to nearest even; fp8 saturates to the largest finite value.
struct MiniFloat {
  int ebits;
  int mbits;
  bool fn;        // e4m3fn
  bool saturate;  // fp8: overflow to max finite (NCCL converts with saturation)
};
constexpr MiniFloat kHalf{5, 10, false, false};
constexpr MiniFloat kBf16{8, 7, false, false};
constexpr MiniFloat kE4m3{4, 3, true, true};
constexpr MiniFloat kE5m2{5, 2, false, true};

double mini_decode(const MiniFloat &f, uint32_t bits) {
  int bias = (1 << (f.ebits - 1)) - 1;
  uint32_t sign = (bits >> (f.ebits + f.mbits)) & 1u;
  uint32_t e = (bits >> f.mbits) & ((1u << f.ebits) - 1);
  uint32_t m = bits & ((1u << f.mbits) - 1);
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - f.mbits);
  } else if (!f.fn && e == (1u << f.ebits) - 1) {
    v = m == 0 ? INFINITY : NAN;
  } else if (f.fn && e == (1u << f.ebits) - 1 && m == (1u << f.mbits) - 1) {
    v = NAN;
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mbits), static_cast<int>(e) - bias);
  }
  return sign ? -v : v;
}

double mini_max(const MiniFloat &f) {
  int bias = (1 << (f.ebits - 1)) - 1;
  if (f.fn)
    return std::ldexp(1.0 + std::ldexp(static_cast<double>((1 << f.mbits) - 2), -f.mbits), (1 << f.ebits) - 1 - bias);
  return std::ldexp(2.0 - std::ldexp(1.0, -f.mbits), (1 << f.ebits) - 2 - bias);
}

uint32_t mini_encode(const MiniFloat &f, double v) {
  int bias = (1 << (f.ebits - 1)) - 1;
  uint32_t sign_bit = 1u << (f.ebits + f.mbits);
  uint32_t sign = std::signbit(v) ? sign_bit : 0u;
  double a = std::fabs(v);
  uint32_t all_e = (1u << f.ebits) - 1;
  if (std::isnan(v)) return f.fn ? (sign | (all_e << f.mbits) | ((1u << f.mbits) - 1)) : ((all_e << f.mbits) | 1u);
  double max = mini_max(f);
  if (a == 0.0) return sign;
  int exp;
  std::frexp(a, &exp);
  int e = std::max(exp - 1, 1 - bias);  // exponent of the value's binade (subnormals: 1-bias)
  double quantum = std::ldexp(1.0, e - f.mbits);
  double r = std::nearbyint(a / quantum) * quantum;  // round to nearest even (default mode)
  if (r > max || std::isinf(a)) {
    if (f.saturate || f.fn)
      r = max;
    else
      return sign | (all_e << f.mbits);  // infinity
  }
  if (r < std::ldexp(1.0, 1 - bias)) return sign | static_cast<uint32_t>(r / std::ldexp(1.0, 1 - bias - f.mbits));
  std::frexp(r, &exp);
  int re = exp - 1;
  auto m = static_cast<uint32_t>((r / std::ldexp(1.0, re) - 1.0) * std::ldexp(1.0, f.mbits));
  return sign | (static_cast<uint32_t>(re + bias) << f.mbits) | m;
}

bool is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

double load_float(ncclDataType_t t, const char *p) {
  switch (t) {
    case ncclFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return mini_decode(kHalf, b);
    }
    case ncclBfloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      uint32_t w = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &w, 4);
      return f;
    }
    case ncclFloat8e4m3:
      return mini_decode(kE4m3, static_cast<uint8_t>(*p));
    case ncclFloat8e5m2:
      return mini_decode(kE5m2, static_cast<uint8_t>(*p));
    case ncclFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

void store_float(ncclDataType_t t, char *p, double v) {
  switch (t) {
    case ncclFloat16: {
      auto b = static_cast<uint16_t>(mini_encode(kHalf, v));
      std::memcpy(p, &b, 2);
      return;
    }
    case ncclBfloat16: {
      auto b = static_cast<uint16_t>(mini_encode(kBf16, v));
      std::memcpy(p, &b, 2);
      return;
    }
    case ncclFloat8e4m3:
      *p = static_cast<char>(mini_encode(kE4m3, v));
      return;
    case ncclFloat8e5m2:
      *p = static_cast<char>(mini_encode(kE5m2, v));
      return;
    case ncclFloat32: {
      auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    default:
      std::memcpy(p, &v, 8);
      return;
  }
}

// Integers as 64-bit patterns: signed values sign-extended, arithmetic modulo 2^64, stored back
// truncated to the dtype (wrapping, as CUDA integer arithmetic does).
bool is_signed(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
}

uint64_t load_int(ncclDataType_t t, const char *p) {
  switch (t) {
    case ncclInt8: {
      int8_t x;
      std::memcpy(&x, p, 1);
      return static_cast<uint64_t>(static_cast<int64_t>(x));
    }
    case ncclUint8: {
      uint8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case ncclInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return static_cast<uint64_t>(static_cast<int64_t>(x));
    }
    case ncclUint32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    default: {
      uint64_t x;
      std::memcpy(&x, p, 8);
      return x;
    }
  }
}

uint64_t wrap_int(ncclDataType_t t, uint64_t v) {  // the value the dtype holds, re-extended
  switch (t) {
    case ncclInt8:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(v)));
    case ncclUint8:
      return static_cast<uint8_t>(v);
    case ncclInt32:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v)));
    case ncclUint32:
      return static_cast<uint32_t>(v);
    default:
      return v;
  }
}

void store_int(ncclDataType_t t, char *p, uint64_t v) {
  std::memcpy(p, &v, dtype_size(t));
}  // little endian

// dst[i] = reduction over ranks 0..n-1 of src[r][i], rank 0 first.
void reduce(ncclDataType_t t, ncclRedOp_t op, int n, const std::vector<const char *> &src, char *dst, size_t count) {
  size_t es = dtype_size(t);
  for (size_t i = 0; i < count; ++i) {
    size_t o = i * es;
    if (is_float(t)) {
      auto round = [t](double x) {
        char tmp[8];
        store_float(t, tmp, x);
        return load_float(t, tmp);
      };
      double scale = 1.0 / n;
      double acc = load_float(t, src[0] + o);
      if (op == ncclAvg) acc = round(acc * scale);
      for (int r = 1; r < n; ++r) {
        double v = load_float(t, src[static_cast<size_t>(r)] + o);
        switch (op) {
          case ncclSum:
            acc = round(acc + v);
            break;
          case ncclProd:
            acc = round(acc * v);
            break;
          case ncclMax:
            acc = std::max(acc, v);
            break;
          case ncclMin:
            acc = std::min(acc, v);
            break;
          default:
            acc = round(acc + round(v * scale));
            break;  // ncclAvg
        }
      }
      store_float(t, dst + o, acc);
    } else {
      uint64_t acc = load_int(t, src[0] + o);
      for (int r = 1; r < n; ++r) {
        uint64_t v = load_int(t, src[static_cast<size_t>(r)] + o);
        bool less = is_signed(t) ? static_cast<int64_t>(v) < static_cast<int64_t>(acc) : v < acc;
        switch (op) {
          case ncclProd:
            acc = wrap_int(t, acc * v);
            break;
          case ncclMax:
            if (!less && v != acc) acc = v;
            break;
          case ncclMin:
            if (less) acc = v;
            break;
          default:
            acc = wrap_int(t, acc + v);
            break;  // ncclSum, ncclAvg
        }
      }
      if (op == ncclAvg) {
        acc = is_signed(t) ? static_cast<uint64_t>(static_cast<int64_t>(acc) / n) : acc / static_cast<uint64_t>(n);
      }
      store_int(t, dst + o, acc);
    }
  }
}

// ---- communicators ----------------------------------------------------------------------------

// The host as NCCL tells hosts apart (getHostHash): NCCL_HOSTID when set, else the host name and
// the boot id, hashed (FNV-1a).
uint64_t host_hash() {
  std::string id;
  if (const char *v = std::getenv("NCCL_HOSTID"); v != nullptr && v[0] != '\0') {
    id = v;
  } else {
    char name[256] = {0};
    gethostname(name, sizeof name - 1);
    id = name;
    if (FILE *f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      char boot[64] = {0};
      if (std::fgets(boot, sizeof boot, f) != nullptr) id += boot;
      std::fclose(f);
    }
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool process_gone(int pid) {
  if (pid <= 0 || pid == getpid()) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = std::fopen(path, "r");
  if (f == nullptr) return true;
  char buf[256] = {0};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char *close = std::strrchr(buf, ')');
  return close != nullptr && (close[2] == 'Z' || close[2] == 'X');
}

// ---- segments nobody will unlink -------------------------------------------------------------
//
// A segment's name goes when its last rank joins, or when a rank aborts or destroys a
// communicator that never completed. Two more cases would leave one behind: a process that
// exits normally with such a communicator (atexit below unlinks the names it opened), and a
// process killed then (the next ncclGetUniqueId on the host removes segments whose creator, the
// pid in the name, is gone).

std::mutex g_names_mu;
std::vector<std::string> *g_open_names = new std::vector<std::string>;

void remember_name(const std::string &name) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  g_open_names->push_back(name);
}

void unlink_open_names() {
  std::lock_guard<std::mutex> lock(g_names_mu);
  for (const std::string &n : *g_open_names) shm_unlink(n.c_str());  // ENOENT when already gone
}

void sweep_stale_segments() {
  DIR *dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  const char *prefix = "pstate-devsim-nccl-";
  for (struct dirent *e; (e = readdir(dir)) != nullptr;) {
    if (std::strncmp(e->d_name, prefix, std::strlen(prefix)) != 0) continue;
    int pid = std::atoi(e->d_name + std::strlen(prefix));
    if (pid > 0 && process_gone(pid)) shm_unlink((std::string("/") + e->d_name).c_str());
  }
  closedir(dir);
}

__attribute__((constructor)) void register_exit_cleanup() {
  std::atexit(unlink_open_names);
}

struct CommState {
  int rank = 0;
  int nranks = 1;
  int device = 0;
  bool blocking = true;
  std::string name;   // shm name
  std::string label;  // commName
  Header *hdr = nullptr;
  size_t bytes = 0;
  std::atomic<bool> aborted{false};
  std::atomic<bool> unlinked{false};
  std::atomic<int> async_error{ncclSuccess};
  std::mutex async_mu;  // set_async_error: one first error, text before code
  std::atomic<int> pending{0};      // non-blocking launches not finished
  std::atomic<int> outstanding{0};  // enqueued (not captured) operations not yet run
  std::mutex exec_mu;               // one operation of this communicator runs at a time
  uint64_t phase = 0;               // under exec_mu
  unsigned splits = 0;              // ncclCommSplit calls so far (the same count on every rank)
  unsigned shrinks = 0;             // ncclCommShrink calls so far (the same count on every survivor)
  std::atomic<bool> revoked{false}; // ncclCommRevoke / NCCL_SHRINK_ABORT: waits released, shrink or free only
  void *scratch = nullptr;          // device memory NCCL would hold (cudaMalloc at init)
  // Registered memory (issue 29): this communicator's symmetric windows and user registrations,
  // live ones only (owner thread; a stream worker reads them under reg_mu).
  std::mutex reg_mu;
  std::vector<std::pair<uintptr_t, size_t>> windows;        // base, bytes
  std::vector<std::pair<uintptr_t, size_t>> registrations;  // base, bytes
  size_t window_bytes = 0;                                  // against the address-space budget
  // launcher (non-blocking mode)
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool stop = false;
  std::thread launcher;

  ~CommState() {
    if (hdr != nullptr) munmap(hdr, bytes);
  }
  Ring *ring(int src, int dst) {
    auto *base = reinterpret_cast<Ring *>(reinterpret_cast<char *>(hdr) + sizeof(Header));
    return base + static_cast<size_t>(src) * static_cast<size_t>(nranks) + static_cast<size_t>(dst);
  }
  char *slot(int r) {
    auto n = static_cast<size_t>(nranks);
    return reinterpret_cast<char *>(hdr) + sizeof(Header) + n * n * sizeof(Ring) + static_cast<size_t>(r) * kSlot;
  }
  char *ring_data(int src, int dst) {
    auto n = static_cast<size_t>(nranks);
    return reinterpret_cast<char *>(hdr) + sizeof(Header) + n * n * sizeof(Ring) + n * kSlot +
           (static_cast<size_t>(src) * n + static_cast<size_t>(dst)) * kRing;
  }
  void unlink_name() {
    if (!unlinked.exchange(true)) shm_unlink(name.c_str());
  }
  // Publishes the first asynchronous error, its text first: whoever sees the error
  // (ncclCommGetAsyncError, the next call's check) finds the text in ncclGetLastError.
  template <class... A>
  void set_async_error(int r, const char *fmt, A... a) {
    std::lock_guard<std::mutex> lock(async_mu);
    if (async_error.load() != ncclSuccess) return;
    set_error(fmt, a...);
    async_error.store(r);
  }
};

}  // namespace

struct ncclComm {
  std::shared_ptr<CommState> st;
};

namespace {

// Waits until ready() or the communicator is aborted (false). While waiting, notices peers whose
// process is gone and reports ncclRemoteError asynchronously (the wait goes on, as NCCL's kernels
// do, until ncclCommAbort).
template <class F>
bool wait_until(CommState &c, F ready) {
  auto last_check = std::chrono::steady_clock::now();
  for (int spin = 0;; ++spin) {
    if (ready()) return true;
    if (c.aborted.load()) return false;
    if (spin < 64) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 2000 ? 20 : 200));
    auto now = std::chrono::steady_clock::now();
    if (now - last_check > std::chrono::milliseconds(20)) {
      last_check = now;
      for (int r = 0; r < c.nranks; ++r) {
        const RankSlot &s = c.hdr->ranks[r];
        if (r == c.rank || s.present.load() == 0 || !process_gone(s.pid)) continue;
        c.set_async_error(ncclRemoteError,
                          "devsim NCCL: rank %d (pid %d) of communicator %s is gone: remote process exited", r, s.pid,
                          c.label.c_str());
      }
    }
  }
}

bool phase_barrier(CommState &c) {
  uint64_t p = ++c.phase;
  c.hdr->ranks[c.rank].phase.store(p, std::memory_order_release);
  return wait_until(c, [&] {
    for (int r = 0; r < c.nranks; ++r)
      if (c.hdr->ranks[r].phase.load(std::memory_order_acquire) < p) return false;
    return true;
  });
}

enum class Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kSend, kRecv };

struct Op {
  Kind kind;
  const char *func;
  const char *send;
  char *recv;
  size_t count;  // elements: AllReduce/Broadcast/Send/Recv count, AllGather sendcount, ReduceScatter recvcount
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int peer;  // root or peer
  bool hang = false;
  ncclResult_t async = ncclSuccess;  // set as the asynchronous error when it runs
};

void run_collective(CommState &c, const Op &op) {
  const int n = c.nranks, me = c.rank;
  const size_t es = dtype_size(op.dtype);
  std::vector<const char *> slots;
  for (int r = 0; r < n; ++r) slots.push_back(c.slot(r));
  switch (op.kind) {
    case Kind::kAllReduce:
    case Kind::kReduce: {
      size_t chunk = kSlot / es;
      for (size_t off = 0; off < op.count; off += chunk) {
        size_t m = std::min(chunk, op.count - off);
        std::memcpy(c.slot(me), op.send + off * es, m * es);
        if (!phase_barrier(c)) return;
        if (op.kind == Kind::kAllReduce || op.peer == me) reduce(op.dtype, op.op, n, slots, op.recv + off * es, m);
        if (!phase_barrier(c)) return;
      }
      return;
    }
    case Kind::kAllGather: {
      size_t chunk = kSlot / es;
      for (size_t off = 0; off < op.count; off += chunk) {
        size_t m = std::min(chunk, op.count - off);
        std::memcpy(c.slot(me), op.send + off * es, m * es);
        if (!phase_barrier(c)) return;
        for (int r = 0; r < n; ++r)
          std::memcpy(op.recv + (static_cast<size_t>(r) * op.count + off) * es, c.slot(r), m * es);
        if (!phase_barrier(c)) return;
      }
      return;
    }
    case Kind::kReduceScatter: {
      size_t chunk = kSlot / es / static_cast<size_t>(n);
      for (size_t off = 0; off < op.count; off += chunk) {
        size_t m = std::min(chunk, op.count - off);
        for (int b = 0; b < n; ++b)  // block b of my send, this chunk
          std::memcpy(c.slot(me) + static_cast<size_t>(b) * m * es,
                      op.send + (static_cast<size_t>(b) * op.count + off) * es, m * es);
        if (!phase_barrier(c)) return;
        std::vector<const char *> mine;
        for (int r = 0; r < n; ++r) mine.push_back(c.slot(r) + static_cast<size_t>(me) * m * es);
        reduce(op.dtype, op.op, n, mine, op.recv + off * es, m);
        if (!phase_barrier(c)) return;
      }
      return;
    }
    case Kind::kBroadcast: {
      size_t chunk = kSlot / es;
      for (size_t off = 0; off < op.count; off += chunk) {
        size_t m = std::min(chunk, op.count - off);
        if (me == op.peer) std::memcpy(c.slot(me), op.send + off * es, m * es);
        if (!phase_barrier(c)) return;
        if (me != op.peer || op.recv != op.send) std::memcpy(op.recv + off * es, c.slot(op.peer), m * es);
        if (!phase_barrier(c)) return;
      }
      return;
    }
    default:
      return;
  }
}

// The send and receive operations of one batch, progressed together.
void run_p2p(CommState &c, const std::vector<Op> &ops) {
  std::vector<size_t> done(ops.size(), 0);
  auto finished = [&] {
    for (size_t i = 0; i < ops.size(); ++i)
      if (done[i] < ops[i].count * dtype_size(ops[i].dtype)) return false;
    return true;
  };
  wait_until(c, [&] {
    bool moved = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op &op = ops[i];
      size_t total = op.count * dtype_size(op.dtype);
      if (done[i] >= total) continue;
      // Only the first unfinished operation towards one peer (and direction) moves: order per pair.
      bool earlier = false;
      for (size_t j = 0; j < i; ++j)
        if (ops[j].kind == op.kind && ops[j].peer == op.peer && done[j] < ops[j].count * dtype_size(ops[j].dtype))
          earlier = true;
      if (earlier) continue;
      bool sending = op.kind == Kind::kSend;
      Ring *ring = sending ? c.ring(c.rank, op.peer) : c.ring(op.peer, c.rank);
      char *data = sending ? c.ring_data(c.rank, op.peer) : c.ring_data(op.peer, c.rank);
      uint64_t head = ring->head.load(std::memory_order_acquire);
      uint64_t tail = ring->tail.load(std::memory_order_acquire);
      uint64_t pos = sending ? head : tail;
      size_t avail = sending ? kRing - static_cast<size_t>(head - tail) : static_cast<size_t>(head - tail);
      size_t m = std::min({avail, total - done[i], kRing - static_cast<size_t>(pos % kRing)});
      if (m == 0) continue;
      if (sending) {
        std::memcpy(data + pos % kRing, op.send + done[i], m);
        ring->head.store(head + m, std::memory_order_release);
      } else {
        std::memcpy(op.recv + done[i], data + pos % kRing, m);
        ring->tail.store(tail + m, std::memory_order_release);
      }
      done[i] += m;
      moved = true;
    }
    (void)moved;
    return finished();
  });
}

struct Batch {
  std::shared_ptr<CommState> comm;
  std::vector<Op> ops;
  int recorded = 0;  // 1: recorded into a graph (runs once per launch, never counted)
};

void run_batch(void *arg) {
  auto *b = static_cast<Batch *>(arg);
  CommState &c = *b->comm;
  struct Done {  // counted operations are done when this returns, whichever way
    Batch *b;
    ~Done() {
      if (b->recorded == 0) b->comm->outstanding.fetch_sub(1);
    }
  } done{b};
  if (c.aborted.load()) return;
  std::lock_guard<std::mutex> lock(c.exec_mu);
  for (const Op &op : b->ops) {
    if (op.hang) {
      wait_until(c, [] { return false; });  // never completes (until ncclCommAbort)
      return;
    }
  }
  std::vector<Op> p2p;
  for (const Op &op : b->ops) {
    if (op.kind == Kind::kSend || op.kind == Kind::kRecv)
      p2p.push_back(op);
    else
      run_collective(c, op);
    if (c.aborted.load()) return;
  }
  if (!p2p.empty()) run_p2p(c, p2p);
  // An injected asynchronous error appears once the operation's work has run on every rank: set
  // before, the failing rank could see it, abort and exit while its peers' work still waits for
  // its part of the same operation (a hang of theirs that the test did not ask for).
  for (const Op &op : b->ops)
    if (op.async != ncclSuccess && !c.aborted.load())
      c.set_async_error(op.async, "devsim NCCL: %s on rank %d of %s: injected asynchronous error %s (DEVSIM_NCCL_ASYNC)",
                        op.func, c.rank, c.label.c_str(), result_name(op.async));
}

void release_batch(void *arg) {
  delete static_cast<Batch *>(arg);
}

// Puts a batch on its stream; counts it unless the stream records it into a graph.
ncclResult_t enqueue(const std::shared_ptr<CommState> &c, std::vector<Op> ops, cudaStream_t stream) {
  // A batch recorded into a graph runs once per launch and is not counted as outstanding.
  int recorded = devsim_stream_capturing(stream);
  auto *b = new Batch{c, std::move(ops), recorded};
  if (recorded == 0) c->outstanding.fetch_add(1);                               // before it can run
  int e = devsim_stream_enqueue(stream, run_batch, b, release_batch, nullptr);  // on failure b is released
  if (e != cudaSuccess) {
    if (recorded == 0) c->outstanding.fetch_sub(1);
    set_error("devsim NCCL: enqueue on stream %p failed: %s", static_cast<void *>(stream),
              cudaGetErrorString(static_cast<cudaError_t>(e)));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// Runs `job` now (blocking communicator) or on the launcher thread (non-blocking: ncclInProgress).
ncclResult_t launch(const std::shared_ptr<CommState> &c, std::function<ncclResult_t()> job, bool hang) {
  if (c->blocking) {
    if (hang) {
      wait_until(*c, [] { return false; });
      return ncclInternalError;
    }
    return job();
  }
  c->pending.fetch_add(1);
  std::lock_guard<std::mutex> lock(c->mu);
  std::weak_ptr<CommState> weak = c;
  c->jobs.push_back([weak, job, hang] {
    auto s = weak.lock();
    if (!s) return;
    if (hang) {
      wait_until(*s, [] { return false; });
      return;  // pending stays: ncclInProgress for ever
    }
    ncclResult_t r = job();
    if (r != ncclSuccess) {
      int expected = ncclSuccess;
      s->async_error.compare_exchange_strong(expected, r);
    }
    s->pending.fetch_sub(1);
  });
  c->cv.notify_all();
  return ncclInProgress;
}

void launcher_main(CommState *c) {
  cudaSetDevice(c->device);  // as NCCL's threads do: NULL streams are the communicator device's
  std::unique_lock<std::mutex> lock(c->mu);
  for (;;) {
    c->cv.wait(lock, [c] { return !c->jobs.empty() || c->stop; });
    if (c->stop) return;
    auto job = std::move(c->jobs.front());
    c->jobs.pop_front();
    lock.unlock();
    job();
    lock.lock();
  }
}

CommState *state(ncclComm_t comm) {
  return comm != nullptr ? comm->st.get() : nullptr;
}

// Common checks of every call on a communicator: usable, not busy, no injected failure.
// faults false: the caller checks DEVSIM_NCCL_FAIL itself (ncclCommWindowRegister: after its exchange).
ncclResult_t precheck(ncclComm_t comm, const char *func, bool faults = true) {
  CommState *c = state(comm);
  if (c == nullptr) {
    set_error("devsim NCCL: %s: comm is NULL", func);
    return ncclInvalidArgument;
  }
  if (c->aborted.load()) {
    set_error("devsim NCCL: %s: communicator was %s", func, c->revoked.load() ? "revoked" : "aborted");
    return ncclInvalidUsage;
  }
  if (c->pending.load() != 0) {
    set_error(
        "devsim NCCL: %s on rank %d: the previous non-blocking call has not completed "
        "(wait until ncclCommGetAsyncError stops returning ncclInProgress)",
        func, c->rank);
    return ncclInvalidUsage;
  }
  ncclResult_t r = ncclSuccess;
  if (faults && fault_hit("DEVSIM_NCCL_FAIL", func, c->rank, &r)) {
    set_error("devsim NCCL: %s on rank %d: injected %s (DEVSIM_NCCL_FAIL)", func, c->rank, result_name(r));
    return r;
  }
  return ncclSuccess;
}

// Whether [p, p + bytes) is device (or managed) memory of the communicator's device.
ncclResult_t check_buffer(CommState &c, const void *p, size_t bytes, const char *name, const char *func) {
  if (bytes == 0) return ncclSuccess;
  int kind = 0, device = -1;
  uintptr_t base = 0;
  size_t size = 0;
  devsim_pointer_info(p, &kind, &device, &base, &size);
  const char *what = kind == 0 ? "pageable host memory" : kind == 1 ? "pinned host memory" : nullptr;
  if (what != nullptr) {
    set_error("devsim NCCL: %s: %s %p is %s, not device memory", func, name, p, what);
    return ncclInvalidArgument;
  }
  if (kind == 2 && device != c.device) {
    set_error("devsim NCCL: %s: %s %p is on cuda:%d but the communicator is on cuda:%d", func, name, p, device,
              c.device);
    return ncclInvalidArgument;
  }
  if (reinterpret_cast<uintptr_t>(p) + bytes > base + size) {
    set_error("devsim NCCL: %s: %s %p + %zu bytes runs past its allocation (%zu bytes at %p)", func, name, p, bytes,
              size, reinterpret_cast<void *>(base));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t check_stream(CommState &c, cudaStream_t stream, const char *func) {
  int d = devsim_stream_device(stream);
  if (d == c.device) return ncclSuccess;
  set_error("devsim NCCL: %s: stream %p belongs to cuda:%d but the communicator to cuda:%d", func,
            static_cast<void *>(stream), d, c.device);
  return ncclInvalidArgument;
}

thread_local int t_group_depth = 0;
struct Pending {
  std::shared_ptr<CommState> comm;
  Op op;
  cudaStream_t stream;
};
thread_local std::vector<Pending> t_group;

ncclResult_t submit(ncclComm_t comm, Op op, cudaStream_t stream) {
  CommState &c = *comm->st;
  op.hang = fault_hit("DEVSIM_NCCL_HANG", op.func, c.rank, nullptr);
  ncclResult_t async = ncclSuccess;
  if (fault_hit("DEVSIM_NCCL_ASYNC", op.func, c.rank, &async)) op.async = async;
  if (t_group_depth > 0) {
    t_group.push_back(Pending{comm->st, op, stream});
    return ncclSuccess;
  }
  auto st = comm->st;
  bool hang = op.hang && !c.blocking;
  if (hang) op.hang = false;  // non-blocking: the launch itself never finishes
  return launch(
      st, [st, op, stream] { return enqueue(st, {op}, stream); }, hang);
}

// ---- registered memory (issue 29) -----------------------------------------------------------------
//
// ncclMemAlloc is cudaMalloc of the runtime stand-in, remembered as NCCL memory (a symmetric window
// needs it, as NCCL's needs cuMem memory). ncclCommWindowRegister is collective with agreement:
// every rank of the communicator waits until its enqueued operations ran (so the phase barriers of
// the registration never pair with a collective's), then the ranks exchange (bytes, refusal) in
// their slots: different sizes are ncclInvalidUsage on every rank, and a refusal by any rank —
// DEVSIM_NCCL_WINDOWS=refuse, DEVSIM_NCCL_FAIL=ncclCommWindowRegister:RANK:NTH (checked after the
// exchange, so the others are told), a buffer not from ncclMemAlloc, a buffer inside a window
// already registered on this communicator (nccl #2331), or the window budget (the symmetric address
// space: DEVSIM_NCCL_WINDOW_BUDGET bytes per communicator, default 1 GiB) — fails it on every rank.
// ncclCommRegister is local. Collectives whose buffers both lie in this communicator's windows,
// or registrations, are counted (devsim_nccl_memory_counts): what NCCL would run as symmetric or
// zero-copy. DEVSIM_NCCL_VERSION=MAJOR.MINOR.PATCH makes ncclGetVersion report another version.

struct MemCounts {
  std::atomic<unsigned long long> window_registers{0}, window_deregisters{0}, buffer_registers{0},
      buffer_deregisters{0}, symmetric_colls{0}, registered_colls{0}, mem_allocs{0}, mem_frees{0};
};
MemCounts *g_mem = new MemCounts;
std::mutex g_nccl_mem_mu;
std::map<uintptr_t, size_t> *g_nccl_mem = new std::map<uintptr_t, size_t>;  // ncclMemAlloc'ed, live

bool in_ranges(const std::vector<std::pair<uintptr_t, size_t>> &v, const void *p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const auto &[b, n] : v)
    if (a >= b && a + bytes <= b + n) return true;
  return false;
}

void note_memory_path(CommState &c, const void *send, size_t send_bytes, const void *recv, size_t recv_bytes) {
  std::lock_guard<std::mutex> lock(c.reg_mu);
  if (in_ranges(c.windows, send, send_bytes) && in_ranges(c.windows, recv, recv_bytes)) {
    g_mem->symmetric_colls.fetch_add(1);
    return;
  }
  auto registered = [&](const void *p, size_t n) { return in_ranges(c.windows, p, n) || in_ranges(c.registrations, p, n); };
  if (registered(send, send_bytes) && registered(recv, recv_bytes)) g_mem->registered_colls.fetch_add(1);
}

ncclResult_t coll(const char *func, Kind kind, const void *send, void *recv, size_t count, size_t send_bytes,
                  size_t recv_bytes, ncclDataType_t dtype, ncclRedOp_t op, int peer, ncclComm_t comm,
                  cudaStream_t stream) {
#ifdef DEVSIM_NO_WORK  // the no-work build (bench/device_call_cost.sh): a collective is free
  if (comm != nullptr) return ncclSuccess;
#endif
  ncclResult_t r = precheck(comm, func);
  if (r != ncclSuccess) return r;
  CommState &c = *comm->st;
  if (dtype_size(dtype) == 0) {
    set_error("devsim NCCL: %s: invalid datatype %d", func, static_cast<int>(dtype));
    return ncclInvalidArgument;
  }
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= ncclNumOps) {
    set_error("devsim NCCL: %s: invalid reduction operation %d", func, static_cast<int>(op));
    return ncclInvalidArgument;
  }
  if ((kind == Kind::kBroadcast || kind == Kind::kReduce || kind == Kind::kSend || kind == Kind::kRecv) &&
      (peer < 0 || peer >= c.nranks)) {
    set_error("devsim NCCL: %s: peer/root %d is not a rank of a communicator of %d", func, peer, c.nranks);
    return ncclInvalidArgument;
  }
  if ((r = check_stream(c, stream, func)) != ncclSuccess) return r;
  if ((r = check_buffer(c, send, send_bytes, "sendbuff", func)) != ncclSuccess) return r;
  if ((r = check_buffer(c, recv, recv_bytes, "recvbuff", func)) != ncclSuccess) return r;
  if (count == 0) return ncclSuccess;
  if (kind == Kind::kAllReduce || kind == Kind::kAllGather || kind == Kind::kReduceScatter) note_memory_path(c, send, send_bytes, recv, recv_bytes);
  Op o{kind, func, static_cast<const char *>(send), static_cast<char *>(recv), count, dtype, op, peer};
  return submit(comm, o, stream);
}

// ---- what a test can count (devsim_nccl_counts) ----------------------------------------------

std::atomic<unsigned long long> g_init_calls{0};     // ncclCommInitRank / ncclCommInitRankConfig
std::atomic<unsigned long long> g_unique_ids{0};     // ncclGetUniqueId that made an id
std::atomic<unsigned long long> g_split_calls{0};    // ncclCommSplit (any colour)
std::atomic<unsigned long long> g_communicators{0};  // communicators made: by init or as a split's child
std::atomic<unsigned long long> g_shrink_calls{0};   // ncclCommShrink
std::atomic<unsigned long long> g_revoke_calls{0};   // ncclCommRevoke

std::string shm_name_from(const ncclUniqueId &id) {
  char name[NCCL_UNIQUE_ID_BYTES + 1];
  std::memcpy(name, id.internal, NCCL_UNIQUE_ID_BYTES);
  name[NCCL_UNIQUE_ID_BYTES] = 0;
  return name;
}

// Joins the segment and waits for every rank (blocking) or returns at once with the rest on the
// launcher thread.
ncclResult_t init_rank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
  if (out == nullptr) return ncclInvalidArgument;
  *out = nullptr;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) {
    set_error("devsim NCCL: ncclCommInitRank: rank %d of %d is invalid (1..%d ranks)", rank, nranks, kMaxRanks);
    return ncclInvalidArgument;
  }
  if (config != nullptr && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t))) {
    set_error("devsim NCCL: ncclCommInitRankConfig: config not initialized with NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  std::string name = shm_name_from(id);
  if (name.rfind("/pstate-devsim-", 0) != 0) {
    set_error("devsim NCCL: ncclCommInitRank: the unique id is not one of ncclGetUniqueId's");
    return ncclInvalidArgument;
  }
  ncclResult_t injected = ncclSuccess;
  if (fault_hit("DEVSIM_NCCL_FAIL", "ncclCommInitRankConfig", rank, &injected)) {
    set_error("devsim NCCL: ncclCommInitRankConfig on rank %d: injected %s (DEVSIM_NCCL_FAIL)", rank,
              result_name(injected));
    return injected;
  }
  bool hang = fault_hit("DEVSIM_NCCL_HANG", "ncclCommInitRankConfig", rank, nullptr);
  auto c = std::make_shared<CommState>();
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  c->name = name;
  c->label = config != nullptr && config->commName != nullptr ? config->commName : name;
  cudaGetDevice(&c->device);
  // NCCL allocates device memory for its buffers: this is what a stream capture forbids.
  cudaError_t ce = cudaMalloc(&c->scratch, 4096);
  if (ce != cudaSuccess) {
    cudaGetLastError();
    set_error("devsim NCCL: ncclCommInitRank: rank %d: cudaMalloc failed: %s (%s)", rank, cudaGetErrorString(ce),
              cudaGetErrorName(ce));
    return ncclUnhandledCudaError;
  }
  remember_name(name);
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  c->bytes = segment_bytes(nranks);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(c->bytes)) != 0) {
    set_error("devsim NCCL: shm_open/ftruncate %s: %s", name.c_str(), std::strerror(errno));
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  void *p = mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    set_error("devsim NCCL: mmap %s: %s", name.c_str(), std::strerror(errno));
    return ncclSystemError;
  }
  c->hdr = static_cast<Header *>(p);
  int expected = 0;
  if (!c->hdr->nranks.compare_exchange_strong(expected, nranks) && expected != nranks) {
    set_error("devsim NCCL: ncclCommInitRank: rank %d says %d ranks, another rank said %d", rank, nranks, expected);
    return ncclInvalidUsage;
  }
  RankSlot &me = c->hdr->ranks[rank];
  me.pid = getpid();
  me.host = host_hash();
  me.device = c->device;
  if (me.present.exchange(1) != 0) {
    set_error("devsim NCCL: ncclCommInitRank: rank %d joined twice", rank);
    return ncclInvalidUsage;
  }
  if (c->hdr->joined.fetch_add(1) + 1 == nranks) c->unlink_name();  // everyone is in: no name left behind
  if (!c->blocking) c->launcher = std::thread(launcher_main, c.get());
  *out = new ncclComm{c};
  g_communicators.fetch_add(1);
  auto join = [c]() -> ncclResult_t {
    if (!wait_until(*c, [&] { return c->hdr->joined.load() >= c->nranks; })) return ncclInternalError;
    for (int r = 0; r < c->nranks; ++r) {
      const RankSlot &s = c->hdr->ranks[r];
      if (r != c->rank && s.host == c->hdr->ranks[c->rank].host && s.device == c->device) {
        set_error(
            "devsim NCCL: Duplicate GPU detected: rank %d and rank %d both on cuda:%d of one host (%s)", c->rank, r,
            c->device,
            s.pid == getpid() ? "one process" : "the same NCCL_HOSTID, or none and the same host name and boot id");
        return ncclInvalidUsage;
      }
    }
    return ncclSuccess;
  };
  ncclResult_t r = launch(c, join, hang);
  return r;
}

// ---- ncclCommSplit ------------------------------------------------------------------------------
//
// Collective over the parent's ranks: each writes (colour, key) into an exchange segment named
// after the parent's segment and the parent's split count (the same on every rank), waits for all,
// and the ranks of one colour, ordered by (key, parent rank), init a child on the segment
// "<exchange>-c<colour>" with the parent's-split init (not counted as a bootstrap: no unique id).
// The exchange is synchronous even for a non-blocking config (the child's init then runs on its
// launcher as usual); the last rank to leave unlinks it.

struct SplitEntry {
  int color;
  int key;
};
struct SplitHeader {
  std::atomic<int> arrived;
  std::atomic<int> left;
  SplitEntry e[kMaxRanks];
};

ncclResult_t split_comm(ncclComm_t comm, int color, int key, ncclComm_t *out, ncclConfig_t *config) {
  CommState &p = *comm->st;
  const std::string base = p.name + "-s" + std::to_string(p.splits++);
  if (base.size() + 16 > NCCL_UNIQUE_ID_BYTES) {
    set_error("devsim NCCL: ncclCommSplit: splits nested too deep for the stand-in's names");
    return ncclInternalError;
  }
  remember_name(base);
  int fd = shm_open(base.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(sizeof(SplitHeader))) != 0) {
    set_error("devsim NCCL: ncclCommSplit: shm_open/ftruncate %s: %s", base.c_str(), std::strerror(errno));
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  void *m = mmap(nullptr, sizeof(SplitHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return ncclSystemError;
  auto *h = static_cast<SplitHeader *>(m);
  h->e[p.rank] = SplitEntry{color, key};
  h->arrived.fetch_add(1);
  bool all = wait_until(p, [&] { return h->arrived.load() >= p.nranks; });
  int child_rank = 0, child_size = 0;
  if (all && color != NCCL_SPLIT_NOCOLOR) {
    std::vector<std::pair<int, int>> members;  // (key, parent rank) of my colour
    for (int r = 0; r < p.nranks; ++r)
      if (h->e[r].color == color) members.emplace_back(h->e[r].key, r);
    std::sort(members.begin(), members.end());
    child_size = static_cast<int>(members.size());
    for (int i = 0; i < child_size; ++i)
      if (members[static_cast<size_t>(i)].second == p.rank) child_rank = i;
  }
  if (h->left.fetch_add(1) + 1 == p.nranks) shm_unlink(base.c_str());
  munmap(m, sizeof(SplitHeader));
  if (!all) {
    set_error("devsim NCCL: ncclCommSplit: the parent communicator was aborted");
    return ncclInternalError;
  }
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  ncclUniqueId id;
  std::memset(id.internal, 0, sizeof id.internal);
  std::snprintf(id.internal, sizeof id.internal, "%s-c%d", base.c_str(), color);
  return init_rank(out, child_size, id, child_rank, config);
}

// ---- ncclCommShrink ----------------------------------------------------------------------------
//
// Collective over the parent's ranks that are not excluded (every caller passes the same list):
// no exchange is needed, each knows the child's size and its own rank in it (its parent rank
// less the excluded ranks below it), and they init a child on the segment "<parent>-k<n>", n the
// parent's shrink count (the same on every survivor). NCCL_SHRINK_ABORT first releases every wait
// of the parent (its operations end unfinished, as NCCL's are terminated); without it the parent
// must be healthy. A NULL config inherits the parent's blocking mode.

ncclResult_t shrink_comm(ncclComm_t comm, const int *exclude, int n, ncclComm_t *out, ncclConfig_t *config, int flags) {
  CommState &p = *comm->st;
  std::vector<char> gone(static_cast<size_t>(p.nranks), 0);
  for (int i = 0; i < n; ++i) {
    int r = exclude[i];
    if (r < 0 || r >= p.nranks || gone[static_cast<size_t>(r)] || r == p.rank) {
      set_error("devsim NCCL: ncclCommShrink on rank %d: excluded rank %d is not another rank of %d, or listed twice",
                p.rank, r, p.nranks);
      return ncclInvalidArgument;
    }
    gone[static_cast<size_t>(r)] = 1;
  }
  if ((flags & NCCL_SHRINK_ABORT) != 0) {
    p.revoked.store(true);
    p.aborted.store(true);  // every wait of the parent returns
  } else if (p.async_error.load() != ncclSuccess && !p.revoked.load()) {
    set_error("devsim NCCL: ncclCommShrink on rank %d: the parent has an error: shrink it with NCCL_SHRINK_ABORT",
              p.rank);
    return ncclInvalidUsage;
  }
  const std::string base = p.name + "-k" + std::to_string(p.shrinks++);
  if (base.size() + 1 > NCCL_UNIQUE_ID_BYTES) {
    set_error("devsim NCCL: ncclCommShrink: communicators nested too deep for the stand-in's names");
    return ncclInternalError;
  }
  int child_rank = 0;
  for (int r = 0; r < p.rank; ++r) child_rank += gone[static_cast<size_t>(r)] ? 0 : 1;
  ncclConfig_t inherited = NCCL_CONFIG_INITIALIZER;
  if (config == nullptr) {
    inherited.blocking = p.blocking ? 1 : 0;
    config = &inherited;
  }
  ncclUniqueId id;
  std::memset(id.internal, 0, sizeof id.internal);
  std::snprintf(id.internal, sizeof id.internal, "%s", base.c_str());
  return init_rank(out, p.nranks - n, id, child_rank, config);
}

void stop_launcher(CommState &c) {
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stop = true;
    c.cv.notify_all();
  }
  if (c.launcher.joinable()) c.launcher.join();
}

}  // namespace

// ---- the API ----------------------------------------------------------------------------------

DEVSIM_API ncclResult_t ncclGetVersion(int *version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  if (const char *v = std::getenv("DEVSIM_NCCL_VERSION")) {  // MAJOR.MINOR.PATCH: another NCCL
    int major = 0, minor = 0, patch = 0;
    if (std::sscanf(v, "%d.%d.%d", &major, &minor, &patch) == 3) *version = NCCL_VERSION(major, minor, patch);
  }
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (id == nullptr) return ncclInvalidArgument;
  ncclResult_t injected = ncclSuccess;
  if (fault_hit("DEVSIM_NCCL_FAIL", "ncclGetUniqueId", -1, &injected) ||
      fault_hit("DEVSIM_NCCL_FAIL", "ncclGetUniqueId", 0, &injected)) {
    set_error("devsim NCCL: ncclGetUniqueId: injected %s (DEVSIM_NCCL_FAIL)", result_name(injected));
    return injected;
  }
  sweep_stale_segments();
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "/pstate-devsim-nccl-%d-%u-%08x", static_cast<int>(getpid()),
                counter.fetch_add(1), rd());
  g_unique_ids.fetch_add(1);
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t *config) {
  g_init_calls.fetch_add(1);
  return init_rank(comm, nranks, id, rank, config);
}

DEVSIM_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  g_init_calls.fetch_add(1);
  return init_rank(comm, nranks, id, rank, nullptr);
}

DEVSIM_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  ncclResult_t r = precheck(comm, "ncclCommSplit");
  if (r != ncclSuccess) return r;
  if (newcomm == nullptr || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) {
    set_error("devsim NCCL: ncclCommSplit: newcomm NULL or colour %d negative (NCCL_SPLIT_NOCOLOR is %d)", color,
              NCCL_SPLIT_NOCOLOR);
    return ncclInvalidArgument;
  }
  *newcomm = nullptr;
  g_split_calls.fetch_add(1);
  return split_comm(comm, color, key, newcomm, config);
}

DEVSIM_API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                       ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  CommState *c = state(comm);
  if (c == nullptr || newcomm == nullptr || excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr) ||
      (shrinkFlags & ~NCCL_SHRINK_ABORT) != 0) {
    set_error("devsim NCCL: ncclCommShrink: comm or newcomm NULL, a bad exclude list, or unknown flags %d", shrinkFlags);
    return ncclInvalidArgument;
  }
  *newcomm = nullptr;
  if (c->aborted.load() && !c->revoked.load()) {
    set_error("devsim NCCL: ncclCommShrink: communicator was aborted");
    return ncclInvalidUsage;
  }
  if (c->pending.load() != 0) {
    set_error("devsim NCCL: ncclCommShrink on rank %d: the previous non-blocking call has not completed", c->rank);
    return ncclInvalidUsage;
  }
  ncclResult_t injected = ncclSuccess;
  if (fault_hit("DEVSIM_NCCL_FAIL", "ncclCommShrink", c->rank, &injected)) {
    set_error("devsim NCCL: ncclCommShrink on rank %d: injected %s (DEVSIM_NCCL_FAIL)", c->rank, result_name(injected));
    return injected;
  }
  g_shrink_calls.fetch_add(1);
  return shrink_comm(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
}

// Stops the communicator's in-flight operations (their waits return) and keeps it for shrink or
// free; its state is ncclInProgress until no operation of it is left, then ncclSuccess.
DEVSIM_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  CommState *c = state(comm);
  if (c == nullptr || revokeFlags != 0) {
    set_error("devsim NCCL: ncclCommRevoke: comm NULL or flags %d not NCCL_REVOKE_DEFAULT", revokeFlags);
    return ncclInvalidArgument;
  }
  g_revoke_calls.fetch_add(1);
  c->revoked.store(true);
  c->aborted.store(true);
  return ncclSuccess;
}

// ncclCommShrink and ncclCommRevoke calls in this process so far.
DEVSIM_API void devsim_nccl_shrink_counts(unsigned long long *shrink_calls, unsigned long long *revoke_calls) {
  if (shrink_calls != nullptr) *shrink_calls = g_shrink_calls.load();
  if (revoke_calls != nullptr) *revoke_calls = g_revoke_calls.load();
}

DEVSIM_API void devsim_nccl_counts(unsigned long long *init_calls, unsigned long long *unique_ids,
                                   unsigned long long *split_calls, unsigned long long *communicators) {
  if (init_calls != nullptr) *init_calls = g_init_calls.load();
  if (unique_ids != nullptr) *unique_ids = g_unique_ids.load();
  if (split_calls != nullptr) *split_calls = g_split_calls.load();
  if (communicators != nullptr) *communicators = g_communicators.load();
}

// ---- registered memory (issue 29; see note_memory_path) ----

struct ncclWindow_vidmem {
  std::weak_ptr<CommState> comm;
  uintptr_t base;
  size_t bytes;
};

DEVSIM_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  if (ptr == nullptr) return ncclInvalidArgument;
  *ptr = nullptr;
  if (cudaMalloc(ptr, size) != cudaSuccess) {
    set_error("devsim NCCL: ncclMemAlloc of %zu bytes: cudaMalloc failed", size);
    return ncclUnhandledCudaError;
  }
  std::lock_guard<std::mutex> lock(g_nccl_mem_mu);
  (*g_nccl_mem)[reinterpret_cast<uintptr_t>(*ptr)] = size;
  g_mem->mem_allocs.fetch_add(1);
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclMemFree(void *ptr) {
  {
    std::lock_guard<std::mutex> lock(g_nccl_mem_mu);
    if (g_nccl_mem->erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
      set_error("devsim NCCL: ncclMemFree(%p): not an ncclMemAlloc allocation", ptr);
      return ncclInvalidArgument;
    }
  }
  g_mem->mem_frees.fetch_add(1);
  return cudaFree(ptr) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

namespace {
struct WindowVote {  // what each rank puts in its slot
  uint64_t bytes;
  int32_t refuse;  // 0, or the ncclResult_t it refuses with
  char why[200];
};
}  // namespace

DEVSIM_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags) {
  if (win != nullptr) *win = nullptr;
  ncclResult_t r = precheck(comm, "ncclCommWindowRegister", false);
  if (r != ncclSuccess) return r;
  if (win == nullptr) return ncclInvalidArgument;
  CommState &c = *comm->st;
  WindowVote mine{size, 0, {0}};
  auto refuse = [&](ncclResult_t why_r, const std::string &why) {
    if (mine.refuse != 0) return;
    mine.refuse = why_r;
    std::snprintf(mine.why, sizeof mine.why, "%s", why.c_str());
  };
  auto hex = [](const void *p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return std::string(b);
  };
  const auto base = reinterpret_cast<uintptr_t>(buff);
  {
    std::lock_guard<std::mutex> lock(g_nccl_mem_mu);
    auto it = g_nccl_mem->upper_bound(base);
    if (it == g_nccl_mem->begin() || base + size > std::prev(it)->first + std::prev(it)->second)
      refuse(ncclInvalidArgument, "buffer " + hex(buff) + " + " + std::to_string(size) + " is not ncclMemAlloc memory");
  }
  const char *budget_env = std::getenv("DEVSIM_NCCL_WINDOW_BUDGET");
  const size_t budget = budget_env != nullptr ? std::strtoull(budget_env, nullptr, 10) : (size_t{1} << 30);
  {
    std::lock_guard<std::mutex> lock(c.reg_mu);
    for (const auto &[b, n] : c.windows)
      if (base < b + n && b < base + size)
        refuse(ncclInvalidUsage, "buffer " + hex(buff) + " is registered as a window of this communicator already "
               "(registering one allocation again exhausts the symmetric address space, nccl #2331)");
    if (c.window_bytes + size > budget)
      refuse(ncclSystemError, "symmetric address space exhausted: " + std::to_string(c.window_bytes) +
             " bytes in windows + " + std::to_string(size) + " > budget " + std::to_string(budget) +
             " (DEVSIM_NCCL_WINDOW_BUDGET)");
  }
  const char *windows_env = std::getenv("DEVSIM_NCCL_WINDOWS");
  if (windows_env != nullptr && std::string(windows_env) == "refuse")
    refuse(ncclInvalidUsage, "symmetric windows refused (DEVSIM_NCCL_WINDOWS=refuse: as without NVLink)");
  ncclResult_t injected = ncclSuccess;
  if (fault_hit("DEVSIM_NCCL_FAIL", "ncclCommWindowRegister", c.rank, &injected))
    refuse(injected, std::string("injected ") + result_name(injected) + " (DEVSIM_NCCL_FAIL)");
  (void)winFlags;
  // Collective: after this rank's enqueued work ran (the barriers must not pair with a
  // collective's), every rank's vote through the slots.
  if (!wait_until(c, [&] { return c.outstanding.load() == 0; })) return ncclInternalError;
  std::vector<WindowVote> votes(static_cast<size_t>(c.nranks));
  {
    std::lock_guard<std::mutex> lock(c.exec_mu);
    std::memcpy(c.slot(c.rank), &mine, sizeof mine);
    if (!phase_barrier(c)) return ncclInternalError;
    for (int q = 0; q < c.nranks; ++q) std::memcpy(&votes[static_cast<size_t>(q)], c.slot(q), sizeof mine);
    if (!phase_barrier(c)) return ncclInternalError;
  }
  for (int q = 0; q < c.nranks; ++q) {
    const WindowVote &v = votes[static_cast<size_t>(q)];
    if (v.bytes != size) {
      set_error("devsim NCCL: ncclCommWindowRegister on rank %d: rank %d registers %llu bytes, this rank %zu: "
                "the sizes of one window must agree", c.rank, q, static_cast<unsigned long long>(v.bytes), size);
      return ncclInvalidUsage;
    }
    if (v.refuse != 0) {
      set_error("devsim NCCL: ncclCommWindowRegister on rank %d: rank %d refused: %s", c.rank, q, v.why);
      return static_cast<ncclResult_t>(v.refuse);
    }
  }
  {
    std::lock_guard<std::mutex> lock(c.reg_mu);
    c.windows.emplace_back(base, size);
    c.window_bytes += size;
  }
  *win = new ncclWindow_vidmem{comm->st, base, size};
  g_mem->window_registers.fetch_add(1);
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  ncclResult_t r = precheck(comm, "ncclCommWindowDeregister");
  if (r != ncclSuccess) return r;
  if (win == nullptr || win->comm.lock() != comm->st) {
    set_error("devsim NCCL: ncclCommWindowDeregister: window %p is not one of this communicator", static_cast<void *>(win));
    return ncclInvalidArgument;
  }
  CommState &c = *comm->st;
  {
    std::lock_guard<std::mutex> lock(c.reg_mu);
    auto it = std::find(c.windows.begin(), c.windows.end(), std::make_pair(win->base, win->bytes));
    if (it != c.windows.end()) c.windows.erase(it);
    c.window_bytes -= win->bytes;
  }
  delete win;
  g_mem->window_deregisters.fetch_add(1);
  return ncclSuccess;
}

namespace {
struct BufferRegistration {
  std::weak_ptr<CommState> comm;
  uintptr_t base;
  size_t bytes;
};
}  // namespace

DEVSIM_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  if (handle != nullptr) *handle = nullptr;
  ncclResult_t r = precheck(comm, "ncclCommRegister");
  if (r != ncclSuccess) return r;
  if (handle == nullptr) return ncclInvalidArgument;
  CommState &c = *comm->st;
  if ((r = check_buffer(c, buff, size, "buff", "ncclCommRegister")) != ncclSuccess) return r;
  {
    std::lock_guard<std::mutex> lock(c.reg_mu);
    c.registrations.emplace_back(reinterpret_cast<uintptr_t>(buff), size);
  }
  *handle = new BufferRegistration{comm->st, reinterpret_cast<uintptr_t>(buff), size};
  g_mem->buffer_registers.fetch_add(1);
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  ncclResult_t r = precheck(comm, "ncclCommDeregister");
  if (r != ncclSuccess) return r;
  auto *h = static_cast<BufferRegistration *>(handle);
  if (h == nullptr || h->comm.lock() != comm->st) {
    set_error("devsim NCCL: ncclCommDeregister: handle %p is not one of this communicator", handle);
    return ncclInvalidArgument;
  }
  CommState &c = *comm->st;
  {
    std::lock_guard<std::mutex> lock(c.reg_mu);
    auto it = std::find(c.registrations.begin(), c.registrations.end(), std::make_pair(h->base, h->bytes));
    if (it != c.registrations.end()) c.registrations.erase(it);
  }
  delete h;
  g_mem->buffer_deregisters.fetch_add(1);
  return ncclSuccess;
}

DEVSIM_API void devsim_nccl_memory_counts(unsigned long long out[8]) {
  out[0] = g_mem->window_registers.load();
  out[1] = g_mem->window_deregisters.load();
  out[2] = g_mem->buffer_registers.load();
  out[3] = g_mem->buffer_deregisters.load();
  out[4] = g_mem->symmetric_colls.load();
  out[5] = g_mem->registered_colls.load();
  out[6] = g_mem->mem_allocs.load();
  out[7] = g_mem->mem_frees.load();
}

DEVSIM_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
  CommState *c = state(comm);
  if (c == nullptr || async == nullptr) return ncclInvalidArgument;
  if (c->revoked.load()) {  // ncclInProgress until quiescent, then ncclSuccess (NCCL 2.28)
    *async = c->outstanding.load() != 0 || c->pending.load() != 0 ? ncclInProgress : ncclSuccess;
    return ncclSuccess;
  }
  int e = c->async_error.load();
  *async = e != ncclSuccess ? static_cast<ncclResult_t>(e) : c->pending.load() != 0 ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  CommState *c = state(comm);
  if (c == nullptr) return ncclSuccess;
  c->aborted.store(true);  // every wait of this communicator returns
  stop_launcher(*c);
  c->unlink_name();
  // c->scratch stays allocated: cudaFree would synchronize the device, and abort never waits.
  delete comm;  // the state goes when the last queued operation holding it is gone
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ncclResult_t r = precheck(comm, "ncclCommFinalize");
  if (r != ncclSuccess) return r;
  auto st = comm->st;
  bool hang = fault_hit("DEVSIM_NCCL_HANG", "ncclCommFinalize", st->rank, nullptr);
  return launch(
      st,
      [st]() -> ncclResult_t {
        if (!wait_until(*st, [&] { return st->outstanding.load() == 0; })) return ncclInternalError;
        return static_cast<ncclResult_t>(st->async_error.load());
      },
      hang);
}

DEVSIM_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  CommState *c = state(comm);
  if (c == nullptr) return ncclSuccess;
  ncclResult_t injected = ncclSuccess;
  if (fault_hit("DEVSIM_NCCL_FAIL", "ncclCommDestroy", c->rank, &injected)) {
    set_error("devsim NCCL: ncclCommDestroy on rank %d: injected %s (DEVSIM_NCCL_FAIL)", c->rank,
              result_name(injected));
    return injected;
  }
  // Outstanding operations complete first (ncclCommDestroy waits for them, as NCCL does).
  wait_until(*c, [&] { return c->outstanding.load() == 0; });
  c->aborted.store(true);
  stop_launcher(*c);
  c->unlink_name();
  if (c->scratch != nullptr) cudaFree(c->scratch);
  delete comm;
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->st->nranks;
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->st->rank;
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  if (comm == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = comm->st->device;
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dtype, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t stream) {
  size_t b = count * dtype_size(dtype);
  return coll("ncclAllReduce", Kind::kAllReduce, send, recv, count, b, b, dtype, op, 0, comm, stream);
}

DEVSIM_API ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dtype, ncclRedOp_t op,
                                   int root, ncclComm_t comm, cudaStream_t stream) {
  size_t b = count * dtype_size(dtype);
  int me = comm != nullptr ? comm->st->rank : -1;
  return coll("ncclReduce", Kind::kReduce, send, recv, count, b, me == root ? b : 0, dtype, op, root, comm, stream);
}

DEVSIM_API ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t dtype,
                                      ncclComm_t comm, cudaStream_t stream) {
  size_t b = sendcount * dtype_size(dtype);
  size_t n = comm != nullptr ? static_cast<size_t>(comm->st->nranks) : 1;
  return coll("ncclAllGather", Kind::kAllGather, send, recv, sendcount, b, b * n, dtype, ncclSum, 0, comm, stream);
}

DEVSIM_API ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dtype,
                                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  size_t b = recvcount * dtype_size(dtype);
  size_t n = comm != nullptr ? static_cast<size_t>(comm->st->nranks) : 1;
  return coll("ncclReduceScatter", Kind::kReduceScatter, send, recv, recvcount, b * n, b, dtype, op, 0, comm, stream);
}

DEVSIM_API ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dtype, int root,
                                      ncclComm_t comm, cudaStream_t stream) {
  size_t b = count * dtype_size(dtype);
  int me = comm != nullptr ? comm->st->rank : -1;
  return coll("ncclBroadcast", Kind::kBroadcast, send, recv, count, me == root ? b : 0, b, dtype, ncclSum, root, comm,
              stream);
}

DEVSIM_API ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dtype, int peer, ncclComm_t comm,
                                 cudaStream_t stream) {
  size_t b = count * dtype_size(dtype);
  return coll("ncclSend", Kind::kSend, send, nullptr, count, b, 0, dtype, ncclSum, peer, comm, stream);
}

DEVSIM_API ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dtype, int peer, ncclComm_t comm,
                                 cudaStream_t stream) {
  size_t b = count * dtype_size(dtype);
  return coll("ncclRecv", Kind::kRecv, nullptr, recv, count, 0, b, dtype, ncclSum, peer, comm, stream);
}

DEVSIM_API ncclResult_t ncclGroupStart(void) {
  ++t_group_depth;
  return ncclSuccess;
}

DEVSIM_API ncclResult_t ncclGroupEnd(void) {
  if (t_group_depth == 0) {
    set_error("devsim NCCL: ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Pending> ops;
  ops.swap(t_group);
  if (ops.empty()) return ncclSuccess;
  ncclResult_t injected = ncclSuccess;
  if (fault_hit("DEVSIM_NCCL_FAIL", "ncclGroupEnd", ops.front().comm->rank, &injected)) {
    set_error("devsim NCCL: ncclGroupEnd on rank %d: injected %s (DEVSIM_NCCL_FAIL)", ops.front().comm->rank,
              result_name(injected));
    return injected;
  }
  // One batch per communicator and stream, in call order.
  ncclResult_t result = ncclSuccess;
  while (!ops.empty()) {
    auto comm = ops.front().comm;
    cudaStream_t stream = ops.front().stream;
    std::vector<Op> batch;
    std::vector<Pending> rest;
    bool hang = false;
    for (auto &p : ops) {
      if (p.comm == comm && p.stream == stream) {
        hang = hang || p.op.hang;
        batch.push_back(p.op);
      } else {
        rest.push_back(p);
      }
    }
    ops.swap(rest);
    bool launch_hangs = hang && !comm->blocking;
    if (launch_hangs)
      for (auto &o : batch) o.hang = false;
    ncclResult_t r = launch(
        comm, [comm, batch, stream] { return enqueue(comm, batch, stream); }, launch_hangs);
    if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  return result;
}

DEVSIM_API const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

DEVSIM_API const char *ncclGetLastError(ncclComm_t) {
  std::lock_guard<std::mutex> lock(g_error_mu);
  t_last_error_copy = g_last_error;
  return t_last_error_copy.c_str();
}
