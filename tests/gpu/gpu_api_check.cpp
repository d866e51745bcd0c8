// gpu_api_check.cpp — the GPU check through the public C API (run by tests/gpu/run.sh).
//
// One process per GPU: alone it is a world of one (file:// store in /tmp); under
// `pstate run -n N` (or torchrun/mpirun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) each
// rank uses the GPU of its local rank. With a CUDA context and tp = world, it runs the shared
// checks of gpu_check.hpp on the world group (every op x dtype x reduce op against the host
// reference, argument errors), then what only the integrated API has:
//   - point-to-point on a group of 3+ ranks whose NCCL communicator does not exist yet is
//     INVALID_STATE (the TP group, before anything used it);
//   - tensor dicts: broadcast_tensor_dict and send/recv_tensor_dict of a dict mixing CUDA and
//     CPU tensors (empty, scalar, inline-sized and large), received through an allocation
//     callback (cudaMalloc / malloc); a callback that fails on a CUDA tensor fails every rank
//     with nothing transferred; a CPU-marked tensor in device memory is refused on every rank;
//   - graph-capture errors (end without begin, begin twice, a collective on another stream,
//     finalize while capturing, a CPU barrier while capturing), then a CUDA graph of 100 pstate_tp_allreduce calls
//     captured between pstate_graph_capture_begin/end and replayed twice with new inputs;
//   - a CPU context in the same process refuses device pointers (the HostPointerCheck);
//   - the per-call cost of pstate_all_reduce against a raw ncclAllReduce (its unique id sent
//     with pstate_broadcast_object).
// Rank 0 prints the table and writes OUT_DIR/gpu_bench_wN.md (OUT_DIR: the first argument,
// else $OUT). Exit status 0 when every check passed.
#include "gpu_api_ops.hpp"

#include <unistd.h>

using namespace gpu_check;

namespace {

void check_capture_errors(Case &k, pstate_t *ps) {
  expect_error(k, "pstate_graph_capture_end without begin", PSTATE_ERR_INVALID_STATE, "",
               [&] { ps_check(pstate_graph_capture_end(ps)); });
  void *capture = nullptr;
  ps_check(pstate_graph_capture_begin(ps, nullptr, &capture));
  k.tally.expect(capture != nullptr, "pstate_graph_capture_begin(NULL) makes a stream");
  void *again = nullptr;
  expect_error(k, "pstate_graph_capture_begin twice", PSTATE_ERR_INVALID_STATE, "",
               [&] { ps_check(pstate_graph_capture_begin(ps, nullptr, &again)); });
  expect_error(k, "collective on another stream while capturing", PSTATE_ERR_INVALID_STATE, "capture stream",
               [&] { k.ops.all_reduce(k.send, k.recv, 16, PSTATE_FLOAT32, PSTATE_SUM, k.stream); });
  run_case(k, "barrier while capturing runs on the CPU communicator", [&] {
    k.ops.barrier();
    return std::string();
  });
  // Refused without releasing anything: ps stays valid for the end below.
  expect_error(k, "pstate_finalize while capturing", PSTATE_ERR_INVALID_STATE, "pstate_graph_capture_end",
               [&] { ps_check(pstate_finalize(ps)); });
  run_case(k, "pstate_graph_capture_end", [&] {
    ps_check(pstate_graph_capture_end(ps));
    return std::string();
  });
}

// ---- point-to-point before a group's NCCL communicator exists -------------------------------------

// The TP group (not the world group object) has no NCCL communicator until its first device
// operation; point-to-point cannot create it in a group of 3+ ranks, which must be refused
// locally on every rank (nothing is sent, so the ranks stay in step).
void check_p2p_before_communicator(Case &k, pstate_t *ps) {
  if (k.world < 3) return;
  pstate_group_t *tp = nullptr;
  ps_check(pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  expect_error(k, "send on a fresh group of 3+ ranks", PSTATE_ERR_INVALID_STATE, "no NCCL communicator yet",
               [&] { ps_check(pstate_send(tp, k.send, 16, PSTATE_FLOAT32, (k.rank + 1) % k.world, k.stream)); });
}

// ---- a CPU context in the same process refuses device memory ---------------------------------------

void check_cpu_context_refuses_device_memory(Case &k) {
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  params.world_size = 1;
  params.rank = 0;
  params.local_rank = 0;
  std::string store = "file:///tmp/pstate_gpu_api_check_cpu_" + std::to_string(getpid());
  params.init_method = store.c_str();
  pstate_t *cpu = nullptr;
  run_case(k, "CPU context beside the CUDA one", [&] {
    ps_check(pstate_init(&params, &cpu));
    return std::string();
  });
  if (cpu == nullptr) return;
  pstate_group_t *g = nullptr;
  ps_check(pstate_get_group(cpu, PSTATE_GROUP_WORLD, &g));
  expect_error(k, "CPU context: device pointer", PSTATE_ERR_INVALID_ARGUMENT, "CUDA device memory",
               [&] { ps_check(pstate_all_reduce(g, k.send, k.recv, 16, PSTATE_FLOAT32, PSTATE_SUM, nullptr)); });
  run_case(k, "CPU context: host memory", [&] {
    std::vector<float> host(16, 1.0f);
    ps_check(pstate_all_reduce(g, host.data(), host.data(), 16, PSTATE_FLOAT32, PSTATE_SUM, nullptr));
    return host[15] == 1.0f ? std::string() : "sum over one rank changed the value";
  });
  run_case(k, "CPU context finalize", [&] {
    ps_check(pstate_finalize(cpu));
    return std::string();
  });
}

int run(pstate_t *ps, const char *out_dir) {
  ps_check(pstate_initialize_model_parallel(ps, nullptr));  // tp = world
  pstate_group_t *world = nullptr;
  ps_check(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  ps_check(pstate_group_info(world, &info));
  CK(cudaSetDevice(info.local_rank));

  Case k;
  k.rank = info.rank_in_group;
  k.world = info.world_size;
  k.ops = ops_of(world);
  k.tally.rank = info.rank;
  int cc = 0;
  CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, info.local_rank));
  k.fp8_reduce = cc >= 9;
  CK(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking));
  CK(cudaMalloc(&k.send, k.world * kCount * 8));
  CK(cudaMalloc(&k.recv, k.world * kCount * 8));

  check_p2p_before_communicator(k, ps);  // first: nothing has used the TP group yet
  check_operations(k);
  check_argument_errors(k);
  check_tensor_dicts(k, world);
  check_capture_errors(k, ps);
  check_graph(
      k,
      [&] {
        void *cs = nullptr;
        ps_check(pstate_graph_capture_begin(ps, nullptr, &cs));
        return static_cast<cudaStream_t>(cs);
      },
      [&] { ps_check(pstate_graph_capture_end(ps)); },
      [&](float *buf, size_t n, void *stream) {
        ps_check(pstate_tp_allreduce(ps, buf, n, PSTATE_FLOAT32, PSTATE_SUM, stream));
      },
      cudaStreamCaptureModeGlobal);

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (k.rank == 0) NCK(ncclGetUniqueId(&id));
  pstate_bytes_t shared = {nullptr, 0};
  ps_check(pstate_broadcast_object(world, &id, sizeof id, 0, &shared));
  if (k.rank != 0) std::memcpy(&id, shared.data, sizeof id);
  pstate_bytes_free(&shared);
  ncclComm_t raw = nullptr;
  NCK(ncclCommInitRank(&raw, k.world, id, k.rank));
  auto rows = bench(k, raw, [&](void *a, void *b, size_t n) {
    ps_check(pstate_all_reduce(world, a, b, n, PSTATE_FLOAT32, PSTATE_SUM, k.stream));
  });
  NCK(ncclCommDestroy(raw));
  if (k.rank == 0) {
    std::string table = bench_table("pstate_all_reduce", k.world, rows);
    std::printf("%s\n", table.c_str());
    write_file(out_dir, "gpu_bench_w" + std::to_string(k.world) + ".md", table);
  }

  check_cpu_context_refuses_device_memory(k);
  k.free_deferred();
  CK(cudaFree(k.send));
  CK(cudaFree(k.recv));
  CK(cudaStreamDestroy(k.stream));
  ps_check(pstate_destroy_model_parallel(ps));
  std::printf("gpu_api_check rank %d of %d: %d checks passed, %d failed\n", k.rank, k.world, k.tally.passed,
              k.tally.failed);
  return k.tally.failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
  const char *out_dir = argc > 1 ? argv[1] : std::getenv("OUT");
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  params.device = PSTATE_DEVICE_CUDA;
  params.timeout_ms = 60000;
  std::string store;
  if (!std::getenv("WORLD_SIZE") && !std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("SLURM_NTASKS")) {
    params.world_size = 1;  // alone: a world of one
    params.rank = 0;
    params.local_rank = 0;
    store = "file:///tmp/pstate_gpu_api_check_" + std::to_string(getpid());
    params.init_method = store.c_str();
  }
  pstate_t *ps = nullptr;
  pstate_status_t s = pstate_init(&params, &ps);
  if (s != PSTATE_OK) {
    std::fprintf(stderr, "gpu_api_check: pstate_init: %s: %s\n", pstate_status_string(s), pstate_last_error());
    return 2;
  }
  int rc = 2;
  try {
    rc = run(ps, out_dir);
  } catch (const OpError &e) {
    std::fprintf(stderr, "gpu_api_check: %s: %s\n", pstate_status_string(e.status), e.message.c_str());
    pstate_abort(ps);
    return 2;
  }
  s = pstate_finalize(ps);
  if (s != PSTATE_OK) {
    std::fprintf(stderr, "gpu_api_check: pstate_finalize: %s: %s\n", pstate_status_string(s), pstate_last_error());
    return 2;
  }
  return rc;
}
