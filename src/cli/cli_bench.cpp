// cli_bench.cpp — `pstate bench`: nccl-tests for pstate, run under `pstate run -n N`.
//
//   pstate run -n 2 -- pstate bench [--op all_reduce] [--dtype float32] [-b 8] [-e 64M] [-f 2]
//                                   [--iters N] [--warmup N] [--group tp] [--tp N --pp N --ep N]
//                                   [--check] [--json FILE]
//
// Each rank starts pstate (pstate_init from the launcher's environment, then
// pstate_initialize_model_parallel with --tp/--pp/--ep, tp defaulting to world / pp) and sweeps
// sizes from -b to -e, multiplying by -f. Per size every rank runs --warmup untimed and --iters
// timed calls of the op on its group, each call preceded by a world barrier and timed alone;
// afterwards the per-call times are max-reduced across the world (the slowest rank's time of
// each call) and the median is the size's time. Rank 0 prints bytes, count, time, algbw, busbw
// (nccl-tests formulas, see bench_common.h) and, with --check, the number of wrong results of the
// last call (inputs are crafted so results are exact; any wrong value makes the exit status 1).
// --json FILE (rank 0) holds {"op", "dtype", "ranks", "results": [{bytes, time_us, algbw_gbs,
// busbw_gbs, wrong}]}. `--op startup` only starts, initializes, tears down and prints how long
// each phase took on rank 0: bench/run.sh times the whole processes from outside.
//
// Only the public C API (pstate.h) is used: the benchmark measures what a user gets. The sizes,
// iteration counts, inputs and formulas are shared with bench/mpi_bench.c (bench_common.h).
#include "cli/bench_ops.hpp"
#include "cli/cli.hpp"
#include "common/error.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace pstate::cli {
namespace {

constexpr OptionSpec kOptions[] = {
    {"--op", "OP",
     "all_reduce (default), all_gather, reduce_scatter, broadcast, all_to_all, send_recv, broadcast_object, "
     "all_gatherv, sendrecv, startup"},
    {"--dtype", "T", "element type (default float32): int8 .. bfloat16, fp8_e4m3, fp8_e5m2 (fp8 only moves)"},
    {"--redop", "OP", "reduction of all_reduce/reduce_scatter: sum (default), max, min"},
    {"-b", "BYTES", "smallest size (default 8); suffixes K, M, G (powers of 1024)"},
    {"-e", "BYTES", "largest size (default 64M)"},
    {"-f", "F", "factor between sizes (default 2)"},
    {"--iters", "N", "timed calls per size (default: 256 MiB / size, within 20..1000)"},
    {"--warmup", "N", "untimed calls per size first (default: iters / 10, at least 2)"},
    {"--group", "KIND", "group the op runs on: tp (default), world, pp, attn_tp, moe_ep, ..."},
    {"--tp", "N", "tensor-parallel size (omitted or 0: world / pp)"},
    {"--pp", "N", "pipeline-parallel size (omitted or 0: 1)"},
    {"--ep", "N", "expert-parallel size (omitted or 0: 1)"},
    {"--check", nullptr, "count wrong results (exact by construction); exit 1 if any"},
    {"--json", "FILE", "rank 0 writes the results as JSON to FILE"},
};

constexpr CommandSpec kSpec = {
    "bench",
    "measure collectives (nccl-tests style); run it under pstate run -n N",
    "[--op OP] [--dtype T] [-b BYTES] [-e BYTES] [-f F] [--iters N] [--warmup N] [--group KIND]\n"
    "                    [--tp N --pp N --ep N] [--check] [--json FILE]",
    "Run under a launcher: pstate run -n N -- pstate bench ... Per size, rank 0 prints bytes, count\n"
    "(elements per rank block), time (median over calls of the slowest rank's time, us), algbw\n"
    "(bytes / time, GB/s) and busbw (algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather,\n"
    "reduce_scatter and all_to_all, 1 otherwise), and #wrong with --check. bytes is the whole\n"
    "buffer: the all_reduce buffer, the all_gather output, the reduce_scatter and all_to_all input,\n"
    "the broadcast buffer, one send_recv message (time is half the ping-pong round trip), one\n"
    "broadcast_object object (from group rank 0), the all_gatherv output (rank r's part has weight\n"
    "1 + r % 2; count is rank 0's part), one sendrecv message (a ring: every rank isends to the\n"
    "next and irecvs from the previous, then waits for both). --op startup only initializes and\n"
    "finalizes.",
    kOptions,
};

struct BenchOptions {
  BenchSpec spec;
  size_t min_bytes = 8, max_bytes = size_t{64} << 20, factor = 2;
  int iters = 0, warmup = 0;  // 0: the size's default
  pstate_group_kind_t group = PSTATE_GROUP_TP;
  int tp = 0, pp = 0, ep = 0;  // 0: the default (pstate.h): tp = world / pp, pp = ep = 1
  bool check = false;
  std::string json;
};

size_t size_option(const ParsedArgs &args, const char *name, size_t fallback) {
  auto text = args.value(name);
  if (!text) return fallback;
  size_t v = 0;
  if (bench_parse_size(text->c_str(), &v) != 0 || v == 0)
    throw UsageError(cat(name, " expects a size like 8, 64K or 16M, got '", *text, "'"));
  return v;
}

// The option's value, which must be >= min when given; fallback when absent.
int positive_option(const ParsedArgs &args, const char *name, int fallback, int min) {
  if (!args.value(name)) return fallback;
  int v = args.int_value(name, fallback);
  if (v < min) throw UsageError(cat(name, " must be >= ", min));
  return v;
}

pstate_group_kind_t group_option(const ParsedArgs &args) {
  std::string name = args.value("--group").value_or("tp");
  for (int k = 0; k < PSTATE_GROUP_KIND_COUNT; ++k)
    if (name == pstate_group_kind_name(static_cast<pstate_group_kind_t>(k))) return static_cast<pstate_group_kind_t>(k);
  throw UsageError(cat("--group '", name, "' is not a group kind (world, tp, pp, attn_tp, attn_cp, moe_ep, ...)"));
}

BenchOptions parse_options(const ParsedArgs &args) {
  BenchOptions o;
  int op = bench_op_from_name(args.value("--op").value_or("all_reduce").c_str());
  if (op < 0)
    throw UsageError(
        "--op must be one of all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, "
        "send_recv, broadcast_object, all_gatherv, sendrecv, startup");
  o.spec.op = static_cast<bench_op_t>(op);
  int dtype = bench_dtype_from_name(args.value("--dtype").value_or("float32").c_str());
  if (dtype < 0) throw UsageError("--dtype must be a pstate dtype name (int8, ..., float32, bfloat16, fp8_e5m2)");
  o.spec.dtype = static_cast<pstate_dtype_t>(dtype);
  int redop = bench_redop_from_name(args.value("--redop").value_or("sum").c_str());
  if (redop < 0) throw UsageError("--redop must be sum, max or min");
  o.spec.redop = static_cast<pstate_reduce_op_t>(redop);
  if (bench_op_reduces(o.spec.op) && (o.spec.dtype == PSTATE_FP8_E4M3 || o.spec.dtype == PSTATE_FP8_E5M2))
    throw UsageError(cat(bench_op_name(o.spec.op), " cannot reduce fp8 on CPU: fp8 only moves"));
  o.min_bytes = size_option(args, "-b", o.min_bytes);
  o.max_bytes = size_option(args, "-e", o.max_bytes);
  if (o.max_bytes < o.min_bytes) throw UsageError("-e must be >= -b");
  o.factor = static_cast<size_t>(positive_option(args, "-f", 2, 2));
  o.iters = positive_option(args, "--iters", 0, 1);
  o.warmup = positive_option(args, "--warmup", 0, 0);
  o.group = group_option(args);
  o.tp = positive_option(args, "--tp", 0, 0);  // 0 (omitted): pstate.h's default, world / pp
  o.pp = positive_option(args, "--pp", 0, 0);
  o.ep = positive_option(args, "--ep", 0, 0);
  o.check = args.flag("--check");
  o.json = args.value("--json").value_or("");
  return o;
}

void check_call(pstate_status_t st, const char *what) {
  if (st != PSTATE_OK)
    throw_error(st, what, " failed: ", pstate_status_string(st), ": ", pstate_last_error());
}

// One rank's pstate, from pstate_init to pstate_finalize; pstate_abort when left by an error so a
// failed rank never waits for its peers.
class Session {
 public:
  explicit Session(const BenchOptions &o) {
    double t0 = bench_now_us();
    check_call(pstate_init(nullptr, &ps_), "pstate_init");
    double t1 = bench_now_us();
    try {
      pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
      cfg.pipeline_parallel_size = o.pp;  // 0s are the defaults (pstate.h): tp = world / pp, pp = ep = 1
      cfg.tensor_parallel_size = o.tp;
      cfg.expert_parallel_size = o.ep;
      check_call(pstate_initialize_model_parallel(ps_, &cfg), "pstate_initialize_model_parallel");
    } catch (...) {  // a constructor that throws runs no destructor: abort here
      pstate_abort(ps_);
      ps_ = nullptr;
      throw;
    }
    init_ms_ = (t1 - t0) / 1e3;
    model_parallel_ms_ = (bench_now_us() - t1) / 1e3;
  }
  ~Session() {
    if (ps_ != nullptr) pstate_abort(ps_);
  }
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  pstate_group_t *group(pstate_group_kind_t kind) {
    pstate_group_t *g = nullptr;
    check_call(pstate_get_group(ps_, kind, &g), "pstate_get_group");
    return g;
  }
  pstate_group_info_t info(pstate_group_kind_t kind) {
    pstate_group_info_t gi = PSTATE_GROUP_INFO_INIT;
    check_call(pstate_group_info(group(kind), &gi), "pstate_group_info");
    return gi;
  }
  // Graceful teardown; returns how long it took in ms.
  double finish() {
    double t0 = bench_now_us();
    check_call(pstate_destroy_model_parallel(ps_), "pstate_destroy_model_parallel");
    pstate_t *ps = ps_;
    ps_ = nullptr;  // finalize frees it whatever it returns
    check_call(pstate_finalize(ps), "pstate_finalize");
    return (bench_now_us() - t0) / 1e3;
  }
  double init_ms() const { return init_ms_; }
  double model_parallel_ms() const { return model_parallel_ms_; }

 private:
  pstate_t *ps_ = nullptr;
  double init_ms_ = 0, model_parallel_ms_ = 0;
};

// Times one size as the header comment says; every rank returns the same row.
bench_result_t bench_size(Session &s, const BenchOptions &o, size_t bytes) {
  pstate_group_t *world = s.group(PSTATE_GROUP_WORLD);
  pstate_group_info_t gi = s.info(o.group);
  size_t count = bench_count_for(o.spec.op, bytes, bench_dtype_size(o.spec.dtype), gi.world_size);
  bytes = bench_bytes_for(o.spec.op, count, bench_dtype_size(o.spec.dtype), gi.world_size);
  OpRun run(o.spec, s.group(o.group), gi.rank_in_group, gi.world_size, count);
  int iters = o.iters > 0 ? o.iters : bench_default_iters(bytes);
  int warmup = o.warmup > 0 ? o.warmup : bench_default_warmup(iters);
  std::vector<double> times(static_cast<size_t>(iters));
  for (int it = 0; it < warmup + iters; ++it) {
    check_call(pstate_barrier(world), "pstate_barrier");
    double t0 = bench_now_us();
    run.run_once();
    double t = bench_now_us() - t0;
    run.release_previous();
    if (it >= warmup) times[static_cast<size_t>(it - warmup)] = t;
  }
  check_call(pstate_all_reduce(world, times.data(), times.data(), times.size(), PSTATE_FLOAT64, PSTATE_MAX, nullptr),
             "all_reduce of the times");
  double time_us = bench_median(times.data(), times.size());
  if (o.spec.op == BENCH_SEND_RECV) time_us /= 2;  // one way
  int64_t wrong = o.check ? run.count_wrong() : 0;
  check_call(pstate_all_reduce(world, &wrong, &wrong, 1, PSTATE_INT64, PSTATE_SUM, nullptr), "all_reduce of #wrong");
  return bench_make_result(o.spec.op, bytes, count, gi.world_size, time_us, static_cast<long>(wrong));
}

std::vector<bench_result_t> sweep(Session &s, const BenchOptions &o, bool leader) {
  pstate_group_info_t gi = s.info(o.group);
  if ((o.spec.op == BENCH_SEND_RECV || o.spec.op == BENCH_SENDRECV_RING) && gi.world_size < 2)
    throw UsageError(cat(bench_op_name(o.spec.op), " needs a group of at least 2 ranks; group ", gi.name, " has 1"));
  if (leader)
    bench_print_header(stdout, cat("pstate bench (group ", gi.name, ")").c_str(), o.spec.op,
                       pstate_dtype_name(o.spec.dtype), pstate_reduce_op_name(o.spec.redop), gi.world_size, o.check);
  std::vector<bench_result_t> results;
  double start = bench_now_us();
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    results.push_back(bench_size(s, o, bytes));
    if (leader) {
      bench_print_row(stdout, &results.back(), o.check);
      double elapsed_s = (bench_now_us() - start) / 1e6;
      if (elapsed_s > 2.0)  // long sweep: say where it is
        std::fprintf(stderr, "# progress: %s %zu B done (%zu sizes), %.1f s\n", bench_op_name(o.spec.op),
                     results.back().bytes, results.size(), elapsed_s);
    }
    if (bytes > o.max_bytes / o.factor) break;
  }
  return results;
}

int run_startup(Session &s, bool leader) {
  int world = s.info(PSTATE_GROUP_WORLD).world_size;
  double init_ms = s.init_ms(), mp_ms = s.model_parallel_ms();
  double finish_ms = s.finish();
  if (leader)
    std::printf(
        "# pstate bench startup, %d ranks, rank 0: pstate_init %.1f ms, initialize_model_parallel %.1f ms, "
        "destroy + finalize %.1f ms\n",
        world, init_ms, mp_ms, finish_ms);
  return kExitOk;
}

int run_bench(const ParsedArgs &args) {
  BenchOptions o = parse_options(args);
  Session session(o);
  bool leader = session.info(PSTATE_GROUP_WORLD).rank == 0;
  if (o.spec.op == BENCH_STARTUP) return run_startup(session, leader);
  std::vector<bench_result_t> results = sweep(session, o, leader);
  int ranks = session.info(o.group).world_size;
  session.finish();
  if (leader && !o.json.empty() &&
      bench_write_json(o.json.c_str(), o.spec.op, pstate_dtype_name(o.spec.dtype), ranks, results.data(),
                       results.size()) != 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "cannot write --json ", o.json);
  long wrong = 0;
  for (const bench_result_t &r : results) wrong += r.wrong;
  if (wrong != 0) {
    if (leader) std::fprintf(stderr, "pstate bench: --check found %ld wrong results\n", wrong);
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

const Subcommand &bench_subcommand() {
  static const Subcommand sub{kSpec, run_bench};
  return sub;
}

}  // namespace pstate::cli
