/*
 * gloo_bench.cc — the gloo twin of `pstate bench` and bench/mpi_bench.c: the same sizes, timing
 * rule, --check inputs, table and JSON (all from src/cli/bench_common.h), measured with gloo, the
 * library behind torch's CPU process groups (SGLang's CPU groups), so bench/run.sh can put pstate,
 * Open MPI and gloo side by side.
 *
 *   gloo_bench [-n RANKS] [--op all_reduce|all_gather|broadcast|barrier] [-b 8] [-e 64M] [-f 2]
 *              [--iters N] [--warmup N] [--budget-ms MS] [--check] [--json FILE]
 *              [--dtype float32] [--redop sum]
 *
 * Ranks: the program forks RANKS (default 2) rank processes itself and waits for them; there is no
 * launcher. That is what fits run.sh: its MPI peer is one command that starts N processes
 * (`mpirun -np N mpi_bench ...`), and `gloo_bench -n N ...` is one command too, with nothing
 * shared between the ranks but the rendezvous directory. Each rank process creates its gloo
 * objects after the fork (no gloo thread exists before it); a rank that fails (exception,
 * signal) makes the parent kill the others at once, and every rank dies with the parent
 * (PR_SET_PDEATHSIG), so `timeout` on the command bounds all of them. Do not start it under
 * mpirun or `pstate run`: every process would fork its own RANKS.
 *
 * Transport and rendezvous, as torch uses gloo on one machine: gloo's TCP transport bound to
 * 127.0.0.1, every pair connected up front (rendezvous::Context::connectFullMesh) through a
 * rendezvous::FileStore in a fresh mkdtemp directory under $TMPDIR (default /tmp), removed at
 * the end. Collectives are gloo's own option-struct functions, one options object built per call
 * as torch's ProcessGroupGloo does: all_reduce gloo::allreduce (algorithm left to gloo, out of
 * place, float32 sum), all_gather gloo::allgather, broadcast gloo::broadcast (in place, root 0),
 * barrier gloo::barrier (one row, bytes 0). Only float32 and sum are supported (what run.sh
 * compares); --dtype and --redop are accepted for the same command line as mpi_bench.
 *
 * Timing: as bench_common.h says — every call preceded by a barrier and timed alone on each rank,
 * per-call times max-reduced across ranks (gloo allreduce), the median over calls. Iterations and
 * warm-up default to bench_default_iters / bench_default_warmup of the size, like the other two.
 * gloo is slow here (2 ranks: about 200 us for 8 B, 1 ms for 1 MiB, 19 ms for 16 MiB all_reduce),
 * so --budget-ms MS caps the timed calls of a size: after the warm-up, iterations =
 * min(that default or --iters, MS / one warm-up iteration's time (barrier included, the median on
 * the slowest rank)), at least 10. The cap is computed from an all-reduced value, so every rank
 * runs the same count.
 *
 * --check: the inputs of bench_common.h (bench_fill_values, bench_fill_pattern) and its
 * independently computed expectations (bench_count_reduce_wrong, bench_count_pattern_wrong)
 * on the last call's output of every rank; for barrier, rank 0 enters 20 ms late and every rank
 * must leave after rank 0 entered. Any wrong result makes the command exit 1.
 *
 * Build: g++ -O2 -std=c++17 -I src/cli bench/gloo_bench.cc -o gloo_bench -lgloo -lpthread
 * (bench/run.sh does it; Debian's libgloo-dev).
 */
#include "bench_common.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

enum class Op { all_reduce, all_gather, broadcast, barrier };

struct Options {
  Op op = Op::all_reduce;
  int ranks = 2;
  size_t min_bytes = 8, max_bytes = size_t{64} << 20, factor = 2;
  int iters = 0, warmup = 0;  // 0: the default of the size
  double budget_ms = 0;       // 0: no cap
  bool check = false;
  const char *json = nullptr;
};

constexpr int kMinCappedIters = 10;
constexpr int kElem = 4;  // float32
constexpr const char *kWho = "gloo_bench (gloo tcp, 127.0.0.1)";

[[noreturn]] void usage_exit(const char *why) {
  std::fprintf(stderr,
               "gloo_bench: %s\n"
               "usage: gloo_bench [-n RANKS] [--op all_reduce|all_gather|broadcast|barrier] [-b 8] [-e 64M] [-f 2]\n"
               "                  [--iters N] [--warmup N] [--budget-ms MS] [--check] [--json FILE]\n"
               "                  [--dtype float32] [--redop sum]\n",
               why);
  std::exit(2);
}

size_t size_arg(const char *name, const char *text) {
  size_t v = 0;
  if (bench_parse_size(text, &v) != 0 || v == 0)
    usage_exit((std::string(name) + " expects a size like 8, 64K, 16M; got '" + text + "'").c_str());
  return v;
}

int int_arg(const char *name, const char *text, int min) {
  char *end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < min || v > 1000000)
    usage_exit((std::string(name) + " expects an integer >= " + std::to_string(min) + "; got '" + text + "'").c_str());
  return static_cast<int>(v);
}

Op op_from_name(const char *name) {
  if (std::strcmp(name, "all_reduce") == 0) return Op::all_reduce;
  if (std::strcmp(name, "all_gather") == 0) return Op::all_gather;
  if (std::strcmp(name, "broadcast") == 0) return Op::broadcast;
  if (std::strcmp(name, "barrier") == 0) return Op::barrier;
  usage_exit("--op: gloo_bench has all_reduce, all_gather, broadcast, barrier");
}

Options parse_options(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (std::strcmp(a, "--check") == 0) {
      o.check = true;
      continue;
    }
    if (v == nullptr) usage_exit("an option is missing its value");
    ++i;
    if (std::strcmp(a, "-n") == 0) {
      o.ranks = int_arg(a, v, 1);
    } else if (std::strcmp(a, "--op") == 0) {
      o.op = op_from_name(v);
    } else if (std::strcmp(a, "--dtype") == 0) {
      if (std::strcmp(v, "float32") != 0) usage_exit("--dtype: gloo_bench measures float32 only");
    } else if (std::strcmp(a, "--redop") == 0) {
      if (std::strcmp(v, "sum") != 0) usage_exit("--redop: gloo_bench measures sum only");
    } else if (std::strcmp(a, "-b") == 0) {
      o.min_bytes = size_arg(a, v);
    } else if (std::strcmp(a, "-e") == 0) {
      o.max_bytes = size_arg(a, v);
    } else if (std::strcmp(a, "-f") == 0) {
      o.factor = static_cast<size_t>(int_arg(a, v, 2));
    } else if (std::strcmp(a, "--iters") == 0) {
      o.iters = int_arg(a, v, 0);
    } else if (std::strcmp(a, "--warmup") == 0) {
      o.warmup = int_arg(a, v, 0);
    } else if (std::strcmp(a, "--budget-ms") == 0) {
      o.budget_ms = int_arg(a, v, 0);
    } else if (std::strcmp(a, "--json") == 0) {
      o.json = v;
    } else {
      usage_exit((std::string("unknown option ") + a).c_str());
    }
  }
  if (o.max_bytes < o.min_bytes) usage_exit("-e must be >= -b");
  return o;
}

// bench_common.h's op for the shared helpers (sizes, bus bandwidth); barrier has no sizes.
bench_op_t common_op(Op op) {
  switch (op) {
    case Op::all_gather:
      return BENCH_ALL_GATHER;
    case Op::broadcast:
      return BENCH_BROADCAST;
    default:
      return BENCH_ALL_REDUCE;
  }
}

const char *op_name(Op op) {
  return op == Op::barrier ? "barrier" : bench_op_name(common_op(op));
}

// ---- gloo ---------------------------------------------------------------------------------------

using Ctx = std::shared_ptr<gloo::Context>;
using ReduceFn = void (*)(void *, const void *, const void *, size_t);

// One rank's context: TCP on loopback, every pair connected through the file store.
Ctx connect(int rank, int ranks, const std::string &store_dir) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
  ctx->connectFullMesh(store, device);
  return ctx;
}

void barrier(const Ctx &ctx) {
  gloo::BarrierOptions opts(ctx);
  gloo::barrier(opts);
}

template <typename T>
void allreduce_in_place(const Ctx &ctx, T *values, size_t count, ReduceFn fn) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(values, count);
  opts.setReduceFunction(fn);
  gloo::allreduce(opts);
}

double max_over_ranks(const Ctx &ctx, double v) {
  allreduce_in_place(ctx, &v, 1, static_cast<ReduceFn>(&gloo::max<double>));
  return v;
}

// ---- one size ------------------------------------------------------------------------------------

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
using Bytes = std::unique_ptr<unsigned char[], FreeDeleter>;

Bytes alloc_bytes(size_t n) {
  void *p = nullptr;
  if (posix_memalign(&p, 4096, n > 0 ? n : 1) != 0) throw std::bad_alloc();
  return Bytes(static_cast<unsigned char *>(p));
}

// Buffers, crafted inputs and the call of one size on one rank.
class Sized {
 public:
  Sized(const Ctx &ctx, Op op, size_t bytes) : ctx_(ctx), op_(op), rank_(ctx->rank), n_(ctx->size) {
    if (op_ == Op::barrier) return;
    count_ = bench_count_for(common_op(op_), bytes, kElem, n_);
    bytes_ = bench_bytes_for(common_op(op_), count_, kElem, n_);
    const size_t block = count_ * kElem;
    const size_t recv_bytes = op_ == Op::all_gather ? block * static_cast<size_t>(n_) : block;
    send_ = alloc_bytes(block);
    recv_ = alloc_bytes(recv_bytes);
    std::memset(recv_.get(), 0xee, recv_bytes);
    if (op_ == Op::all_reduce)
      bench_fill_values(send_.get(), count_, BENCH_FLOAT32, rank_, 0);
    else if (op_ == Op::all_gather)
      bench_fill_pattern(send_.get(), block, rank_, 0);
    else if (rank_ == 0)  // broadcast, in place: the root's buffer
      bench_fill_pattern(recv_.get(), block, 0, 0);
  }

  size_t bytes() const { return bytes_; }
  size_t count() const { return count_; }

  void run_once() {
    float *send = reinterpret_cast<float *>(send_.get()), *recv = reinterpret_cast<float *>(recv_.get());
    switch (op_) {
      case Op::all_reduce: {
        gloo::AllreduceOptions opts(ctx_);
        opts.setInput(send, count_);
        opts.setOutput(recv, count_);
        opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
        gloo::allreduce(opts);
        break;
      }
      case Op::all_gather: {
        gloo::AllgatherOptions opts(ctx_);
        opts.setInput(send, count_);
        opts.setOutput(recv, count_ * static_cast<size_t>(n_));
        gloo::allgather(opts);
        break;
      }
      case Op::broadcast: {
        gloo::BroadcastOptions opts(ctx_);
        opts.setOutput(recv, count_);
        opts.setRoot(0);
        gloo::broadcast(opts);
        break;
      }
      case Op::barrier:
        barrier(ctx_);
        break;
    }
  }

  // Wrong elements (all_reduce) or bytes (moves) in this rank's output of the last call; for
  // barrier, 1 when this rank left a barrier before rank 0 entered it.
  long count_wrong() {
    const size_t block = count_ * kElem;
    size_t wrong = 0;
    switch (op_) {
      case Op::all_reduce:
        return static_cast<long>(bench_count_reduce_wrong(recv_.get(), count_, BENCH_FLOAT32, BENCH_SUM, n_, 0));
      case Op::all_gather:
        for (int j = 0; j < n_; ++j) wrong += bench_count_pattern_wrong(recv_.get() + j * block, block, j, 0);
        return static_cast<long>(wrong);
      case Op::broadcast:
        return static_cast<long>(bench_count_pattern_wrong(recv_.get(), block, 0, 0));
      case Op::barrier:
        return barrier_order_wrong();
    }
    return 0;
  }

 private:
  long barrier_order_wrong() {
    double entered = 0;
    if (rank_ == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      entered = bench_now_us();
    }
    barrier(ctx_);
    const double left = bench_now_us();                   // CLOCK_MONOTONIC: one clock for the machine
    return left < max_over_ranks(ctx_, entered) ? 1 : 0;  // rank 0's entry time, on every rank
  }

  Ctx ctx_;
  Op op_;
  int rank_, n_;
  size_t count_ = 0, bytes_ = 0;
  Bytes send_, recv_;
};

// Iterations of a size after the warm-up: the default (or --iters), capped by --budget-ms.
int timed_iters(const Ctx &ctx, const Options &o, size_t bytes, std::vector<double> &warmup_us) {
  int iters = o.iters > 0 ? o.iters : bench_default_iters(bytes);
  if (o.budget_ms <= 0 || warmup_us.empty()) return iters;
  const double per_iter_us = max_over_ranks(ctx, bench_median(warmup_us.data(), warmup_us.size()));
  const double fit = per_iter_us > 0 ? o.budget_ms * 1e3 / per_iter_us : iters;
  return std::min(iters, std::max(kMinCappedIters, static_cast<int>(fit)));
}

// Times one size; returns rank 0's row (valid on every rank).
bench_result_t bench_size(const Ctx &ctx, const Options &o, size_t bytes) {
  Sized s(ctx, o.op, bytes);
  const int default_iters = o.iters > 0 ? o.iters : bench_default_iters(s.bytes());
  const int warmup = o.warmup > 0 ? o.warmup : bench_default_warmup(default_iters);
  std::vector<double> warmup_us;
  for (int it = 0; it < warmup; ++it) {  // whole iterations (barrier included): what the cap budgets
    const double t0 = bench_now_us();
    barrier(ctx);
    s.run_once();
    warmup_us.push_back(bench_now_us() - t0);
  }
  const int iters = timed_iters(ctx, o, s.bytes(), warmup_us);
  std::vector<double> times(static_cast<size_t>(iters));
  for (double &t : times) {
    barrier(ctx);
    const double t0 = bench_now_us();
    s.run_once();
    t = bench_now_us() - t0;
  }
  allreduce_in_place(ctx, times.data(), times.size(), static_cast<ReduceFn>(&gloo::max<double>));
  const double time_us = bench_median(times.data(), times.size());
  int64_t wrong = o.check ? s.count_wrong() : 0;
  allreduce_in_place(ctx, &wrong, 1, static_cast<ReduceFn>(&gloo::sum<int64_t>));
  return bench_make_result(common_op(o.op), s.bytes(), s.count(), ctx->size, time_us, static_cast<long>(wrong));
}

// bench_write_json's layout, for barrier (an op bench_common.h does not name).
int write_barrier_json(const char *path, int ranks, const bench_result_t &r) {
  FILE *f = std::fopen(path, "w");
  if (f == nullptr) return -1;
  std::fprintf(f, "{\"op\": \"barrier\", \"dtype\": \"float32\", \"ranks\": %d, \"results\": [", ranks);
  std::fprintf(f, "\n  {\"bytes\": 0, \"time_us\": %.3f, \"algbw_gbs\": 0.0000, \"busbw_gbs\": 0.0000, \"wrong\": %ld}",
               r.time_us, r.wrong);
  std::fprintf(f, "\n]}\n");
  const bool ok = std::ferror(f) == 0;
  return std::fclose(f) == 0 && ok ? 0 : -1;
}

// The sweep on one rank; rank 0 prints the table and writes the JSON. Returns the exit status.
int run_rank(const Options &o, int rank, const std::string &store_dir) {
  Ctx ctx = connect(rank, o.ranks, store_dir);
  const bench_op_t op = common_op(o.op);
  if (rank == 0 && o.op != Op::barrier) bench_print_header(stdout, kWho, op, "float32", "sum", o.ranks, o.check);
  if (rank == 0 && o.op == Op::barrier)  // bench_print_header's lines for an op it does not name
    std::printf("# %s: barrier, %d ranks, median of the slowest rank per iteration%s\n# %12s %12s %12s %12s %12s %8s\n",
                kWho, o.ranks, o.check ? ", --check" : "", "bytes", "count", "time_us", "algbw_GB/s", "busbw_GB/s",
                "#wrong");
  std::vector<bench_result_t> results;
  const double start = bench_now_us();
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    results.push_back(bench_size(ctx, o, bytes));
    if (rank == 0) {
      bench_print_row(stdout, &results.back(), o.check);
      const double elapsed_s = (bench_now_us() - start) / 1e6;
      if (elapsed_s > 2.0)
        std::fprintf(stderr, "# progress: %s %zu B done, %.1f s\n", op_name(o.op), results.back().bytes, elapsed_s);
    }
    if (o.op == Op::barrier || bytes > SIZE_MAX / o.factor) break;
  }
  barrier(ctx);  // nobody closes its pairs while a peer still reads the last result
  if (rank != 0) return 0;
  long total_wrong = 0;
  for (const bench_result_t &r : results) total_wrong += r.wrong;
  if (o.json != nullptr) {
    const int rc = o.op == Op::barrier
                       ? write_barrier_json(o.json, o.ranks, results.front())
                       : bench_write_json(o.json, op, "float32", o.ranks, results.data(), results.size());
    if (rc != 0) {
      std::fprintf(stderr, "gloo_bench: cannot write %s\n", o.json);
      return 1;
    }
  }
  if (total_wrong != 0) std::fprintf(stderr, "gloo_bench: --check found %ld wrong results\n", total_wrong);
  return total_wrong != 0 ? 1 : 0;
}

// ---- the rank processes ----------------------------------------------------------------------------

// A child: dies with the parent, runs its rank, exits without the parent's atexit handlers.
[[noreturn]] void rank_process(const Options &o, int rank, const std::string &store_dir, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the parent died before prctl
  int rc = 1;
  try {
    rc = run_rank(o, rank, store_dir);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_bench: rank %d: %s\n", rank, e.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(rc);
}

// Waits for every rank; the first failure kills the rest (they would wait for it until gloo's
// timeout). Returns 0 when every rank exited 0.
int wait_ranks(std::vector<pid_t> &pids) {
  int failed = 0;
  for (size_t left = pids.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) return 1;
    const auto it = std::find(pids.begin(), pids.end(), pid);
    const int rank = static_cast<int>(it - pids.begin());
    if (it != pids.end()) *it = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (!failed) {
      if (WIFSIGNALED(status))
        std::fprintf(stderr, "gloo_bench: rank %d killed by signal %d\n", rank, WTERMSIG(status));
      else if (WEXITSTATUS(status) != 1 || rank != 0)  // rank 0's 1 (wrong results) is already explained
        std::fprintf(stderr, "gloo_bench: rank %d exited %d\n", rank, WEXITSTATUS(status));
      for (pid_t other : pids)
        if (other > 0) kill(other, SIGKILL);
    }
    failed = 1;
  }
  return failed;
}

}  // namespace

int main(int argc, char **argv) {
  const Options o = parse_options(argc, argv);
  const char *tmp = std::getenv("TMPDIR");
  std::string store_dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gloo_bench.XXXXXX";
  if (mkdtemp(store_dir.data()) == nullptr) {
    std::fprintf(stderr, "gloo_bench: mkdtemp %s: %s\n", store_dir.c_str(), std::strerror(errno));
    return 1;
  }
  std::fflush(stdout);  // nothing buffered is written twice by the children
  std::fflush(stderr);
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < o.ranks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) rank_process(o, rank, store_dir, parent);
    if (pid < 0) {
      std::fprintf(stderr, "gloo_bench: fork: %s\n", std::strerror(errno));
      for (pid_t started : pids) kill(started, SIGKILL);
      break;
    }
    pids.push_back(pid);
  }
  int rc = static_cast<int>(pids.size()) == o.ranks ? 0 : 1;
  rc |= wait_ranks(pids);
  std::error_code ignored;
  std::filesystem::remove_all(store_dir, ignored);
  return rc;
}
