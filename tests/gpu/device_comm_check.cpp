// device_comm_check.cpp — GPU check of the CUDA backend below the C API (run by tests/gpu/run.sh).
//
// Drives DeviceContext and DeviceComm (the NcclCommunicator) directly, N ranks as N threads of
// this process with one GPU each, the NCCL unique id shared through an in-process stand-in for
// the group's CPU communicator (Bus). Per rank, the shared checks of gpu_check.hpp (every op x
// dtype x reduce op against the host reference, argument errors, a CUDA graph of 100
// all_reduces replayed with new inputs, the per-call cost against raw ncclAllReduce, for the
// default non-blocking NCCL communicator and for nccl_blocking = true) plus what only the
// internals show: capture-mode state errors, pointer location, the CPU-context check.
// Usage: device_comm_check RANKS [OUT_DIR]; rank 0 prints the cost table and writes
// OUT_DIR/device_comm_bench_wN.md. Exit status 0 when every check passed. A rank that meets an
// unexpected error ends the process (the others would wait for it forever).
#include "gpu_check.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "transport/device_comm.hpp"

#include <barrier>
#include <thread>

using namespace gpu_check;

namespace {

constexpr int64_t kTimeoutMs = 60000;  // context timeout: a hang becomes a TIMEOUT

// The in-process stand-in for a group's CPU communicator: broadcast from rank 0.
class Bus {
 public:
  explicit Bus(int n) : barrier_(n) {}
  void broadcast(int rank, void *bytes, size_t n) {
    if (rank == 0) data_.assign(static_cast<uint8_t *>(bytes), static_cast<uint8_t *>(bytes) + n);
    barrier_.arrive_and_wait();
    if (rank != 0) std::memcpy(bytes, data_.data(), n);
    barrier_.arrive_and_wait();
  }

 private:
  std::barrier<> barrier_;
  std::vector<uint8_t> data_;
};

// Calls fn, turning pstate::Error into the checks' OpError.
template <typename Fn>
void call(Fn &&fn) {
  try {
    fn();
  } catch (const pstate::Error &e) {
    throw OpError{e.status(), e.what()};
  }
}

DeviceOps ops_of(pstate::DeviceComm &c) {
  DeviceOps o;
  o.all_reduce = [&c](const void *s, void *r, size_t n, pstate_dtype_t t, pstate_reduce_op_t op, void *st) {
    call([&] { c.all_reduce(s, r, n, t, op, st); });
  };
  o.all_gather = [&c](const void *s, void *r, size_t n, pstate_dtype_t t, void *st) {
    call([&] { c.all_gather(s, r, n, t, st); });
  };
  o.reduce_scatter = [&c](const void *s, void *r, size_t n, pstate_dtype_t t, pstate_reduce_op_t op, void *st) {
    call([&] { c.reduce_scatter(s, r, n, t, op, st); });
  };
  o.broadcast = [&c](void *b, size_t n, pstate_dtype_t t, int src, void *st) {
    call([&] { c.broadcast(b, n, t, src, st); });
  };
  o.gather = [&c](const void *s, void *r, size_t n, pstate_dtype_t t, int dst, void *st) {
    call([&] { c.gather(s, r, n, t, dst, st); });
  };
  o.all_to_all = [&c](const void *s, void *r, size_t n, pstate_dtype_t t, void *st) {
    call([&] { c.all_to_all(s, r, n, t, st); });
  };
  o.reduce = [&c](const void *s, void *r, size_t n, pstate_dtype_t t, pstate_reduce_op_t op, int root, void *st) {
    call([&] { c.reduce(s, r, n, t, op, root, st); });
  };
  o.scatter = [&c](const void *s, void *r, size_t n, pstate_dtype_t t, int root, void *st) {
    call([&] { c.scatter(s, r, n, t, root, st); });
  };
  o.all_gatherv = [&c](const void *s, void *r, const size_t *counts, pstate_dtype_t t, void *st) {
    call([&] { c.all_gatherv(s, r, counts, t, st); });
  };
  o.reduce_scatterv = [&c](const void *s, void *r, const size_t *counts, pstate_dtype_t t, pstate_reduce_op_t op,
                           void *st) { call([&] { c.reduce_scatterv(s, r, counts, t, op, st); }); };
  o.send = [&c](const void *b, size_t n, pstate_dtype_t t, int dst, void *st) { call([&] { c.send(b, n, t, dst, st); }); };
  o.recv = [&c](void *b, size_t n, pstate_dtype_t t, int src, void *st) { call([&] { c.recv(b, n, t, src, st); }); };
  o.barrier = [&c] { call([&] { c.barrier(); }); };
  return o;
}

// What only the internal interfaces show.
void check_internals(Case &k, pstate::DeviceContext &ctx, pstate::DeviceComm &comm) {
  expect_error(k, "send to self", PSTATE_ERR_INVALID_ARGUMENT, "is this rank",
               [&] { k.ops.send(k.send, 16, PSTATE_FLOAT32, k.rank, k.stream); });
  pstate::MemoryLocation loc = ctx.locate(k.send);
  k.tally.expect(loc.kind == pstate::MemoryLocation::Kind::kDevice && loc.device == ctx.device_ordinal(),
                 "locate(device pointer)");
  pstate::HostPointerCheck host_check;
  expect_error(k, "CPU-context check refuses device memory", PSTATE_ERR_INVALID_ARGUMENT, "is CUDA device memory",
               [&] { call([&] { host_check.require_host(k.send, "send", "world:0: all_reduce"); }); });

  // Capture-mode state (no CUDA capture runs here).
  expect_error(k, "capture end without begin", PSTATE_ERR_INVALID_STATE, "not in graph-capture mode",
               [&] { call([&] { ctx.end_capture(); }); });
  void *capture = ctx.begin_capture(nullptr);
  k.tally.expect(capture != nullptr && capture == ctx.capture_stream(), "capture begin makes a stream");
  expect_error(k, "capture begin twice", PSTATE_ERR_INVALID_STATE, "already in graph-capture mode",
               [&] { call([&] { ctx.begin_capture(nullptr); }); });
  expect_error(k, "collective on another stream while capturing", PSTATE_ERR_INVALID_STATE, "not the capture stream",
               [&] { k.ops.all_reduce(k.send, k.recv, 16, PSTATE_FLOAT32, PSTATE_SUM, k.stream); });
  expect_error(k, "barrier while capturing", PSTATE_ERR_INVALID_STATE, "graph-capture mode", [&] { k.ops.barrier(); });
  run_case(k, "capture end", [&] {
    call([&] { ctx.end_capture(); });
    return std::string(ctx.capturing() ? "still capturing" : "");
  });
  run_case(k, "ensure_ready", [&] {
    call([&] { comm.ensure_ready(); });
    return std::string(comm.ready() ? "" : "not ready");
  });
}

void run_rank(int rank, int world, Bus &bus, Tally *tally, std::vector<BenchRow> *rows) {
  try {
    CK(cudaSetDevice(rank));
    pstate::Logger log(pstate::LogLevel::kWarn);
    log.set_rank(rank);
    pstate::DeviceContextOptions options;
    options.device_ordinal = rank;
    options.timeout_ms = kTimeoutMs;
    auto ctx = pstate::make_cuda_device_context(options, log);
    pstate::DeviceCommOptions comm_options;
    comm_options.group_name = "world:0";
    comm_options.rank = rank;
    comm_options.size = world;
    comm_options.timeout_ms = kTimeoutMs;
    comm_options.broadcast_from_rank0 = [&bus, rank](void *bytes, size_t n) { bus.broadcast(rank, bytes, n); };
    auto comm = pstate::make_nccl_device_comm(*ctx, comm_options, log);

    Case k;
    k.rank = rank;
    k.world = world;
    k.ops = ops_of(*comm);
    k.tally.rank = rank;
    int cc = 0;
    CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, rank));
    k.fp8_reduce = cc >= 9;
    CK(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&k.send, world * kCount * 8));
    CK(cudaMalloc(&k.recv, world * kCount * 8));

    check_operations(k);
    check_argument_errors(k);
    check_internals(k, *ctx, *comm);
    comm->ensure_ready();  // what pstate_graph_capture_begin does for every group
    check_graph(
        k, [&] { return static_cast<cudaStream_t>(ctx->begin_capture(nullptr)); },
        [&] { call([&] { ctx->end_capture(); }); },
        [&](float *buf, size_t n, void *stream) { k.ops.all_reduce(buf, buf, n, PSTATE_FLOAT32, PSTATE_SUM, stream); },
        cudaStreamCaptureModeThreadLocal);  // the other ranks' threads allocate meanwhile

    ncclUniqueId id;
    if (rank == 0) NCK(ncclGetUniqueId(&id));
    bus.broadcast(rank, &id, sizeof id);
    ncclComm_t raw = nullptr;
    NCK(ncclCommInitRank(&raw, world, id, rank));
    auto measured = bench(k, raw, [&](void *a, void *b, size_t n) {
      k.ops.all_reduce(a, b, n, PSTATE_FLOAT32, PSTATE_SUM, k.stream);
    });

    // The same with NCCL's blocking mode (DeviceCommOptions::nccl_blocking), checked first.
    comm_options.group_name = "world:blocking";
    comm_options.nccl_blocking = true;
    auto blocking = pstate::make_nccl_device_comm(*ctx, comm_options, log);
    DeviceOps nonblocking_ops = k.ops;
    k.ops = ops_of(*blocking);
    run_case(k, "all_reduce float32 sum, blocking NCCL communicator",
             [&] { return check_reduction(k, false, PSTATE_FLOAT32, PSTATE_SUM); });
    run_case(k, "all_gather bfloat16, blocking NCCL communicator", [&] { return check_all_gather(k, PSTATE_BFLOAT16); });
    auto measured_blocking = bench(k, raw, [&](void *a, void *b, size_t n) {
      k.ops.all_reduce(a, b, n, PSTATE_FLOAT32, PSTATE_SUM, k.stream);
    });
    k.ops = nonblocking_ops;
    blocking.reset();
    NCK(ncclCommDestroy(raw));
    if (rows != nullptr) {
      rows[0] = measured;
      rows[1] = measured_blocking;
    }

    k.free_deferred();
    CK(cudaFree(k.send));
    CK(cudaFree(k.recv));
    CK(cudaStreamDestroy(k.stream));
    comm.reset();  // before its context
    ctx.reset();
    *tally = k.tally;
  } catch (const std::exception &e) {
    die(rank, e.what());
  } catch (const OpError &e) {
    die(rank, e.message);
  }
}

}  // namespace

int main(int argc, char **argv) {
  int world = argc > 1 ? std::atoi(argv[1]) : 1;
  const char *out_dir = argc > 2 ? argv[2] : nullptr;
  int devices = 0;
  CK(cudaGetDeviceCount(&devices));
  if (world < 1 || world > devices) {
    std::fprintf(stderr, "usage: device_comm_check RANKS [OUT_DIR] (RANKS 1..%d, one GPU each)\n", devices);
    return 2;
  }
  Bus bus(world);
  std::vector<Tally> tallies(world);
  std::vector<BenchRow> rows[2];  // non-blocking, blocking NCCL communicator
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back(run_rank, r, world, std::ref(bus), &tallies[r], r == 0 ? rows : nullptr);
  for (auto &t : threads) t.join();

  int passed = 0, failed = 0;
  for (const Tally &t : tallies) {
    passed += t.passed;
    failed += t.failed;
  }
  CK(cudaSetDevice(0));
  std::string table = bench_table("DeviceComm::all_reduce (non-blocking NCCL communicator, the default)", world, rows[0]) +
                      "\n" + bench_table("DeviceComm::all_reduce (nccl_blocking = true)", world, rows[1]);
  std::printf("%s\n", table.c_str());
  write_file(out_dir, "device_comm_bench_w" + std::to_string(world) + ".md", table);
  std::printf("device_comm_check world %d: %d checks passed, %d failed\n", world, passed, failed);
  return failed == 0 ? 0 : 1;
}
