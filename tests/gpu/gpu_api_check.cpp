// gpu_api_check.cpp — the GPU check through the public C API (run by tests/gpu/run.sh).
//
// One process per GPU: alone it is a world of one (file:// store in /tmp); under
// `pstate run -n N` (or torchrun/mpirun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) each
// rank uses the GPU of its local rank. With a CUDA context and tp = world, it runs the shared
// checks of gpu_check.hpp on the world group (every op x dtype x reduce op against the host
// reference, argument errors), the graph-capture errors of the API, a CUDA graph of 100
// pstate_tp_allreduce calls captured between pstate_graph_capture_begin/end and replayed twice
// with new inputs, and the per-call cost of pstate_all_reduce against a raw ncclAllReduce (its
// unique id sent with pstate_broadcast_object). Rank 0 prints the table and writes
// OUT_DIR/gpu_bench_wN.md (OUT_DIR: the first argument, else $OUT). Exit status 0 when every
// check passed.
#include "gpu_check.hpp"

#include <unistd.h>

using namespace gpu_check;

namespace {

// Any status but PSTATE_OK becomes an OpError carrying pstate_last_error().
void ps_check(pstate_status_t s) {
  if (s != PSTATE_OK) throw OpError{s, pstate_last_error()};
}

DeviceOps ops_of(pstate_group_t *g) {
  DeviceOps o;
  o.all_reduce = [g](const void *s, void *r, size_t n, pstate_dtype_t t, pstate_reduce_op_t op, void *st) {
    ps_check(pstate_all_reduce(g, s, r, n, t, op, st));
  };
  o.all_gather = [g](const void *s, void *r, size_t n, pstate_dtype_t t, void *st) {
    ps_check(pstate_all_gather(g, s, r, n, t, st));
  };
  o.reduce_scatter = [g](const void *s, void *r, size_t n, pstate_dtype_t t, pstate_reduce_op_t op, void *st) {
    ps_check(pstate_reduce_scatter(g, s, r, n, t, op, st));
  };
  o.broadcast = [g](void *b, size_t n, pstate_dtype_t t, int src, void *st) {
    ps_check(pstate_broadcast(g, b, n, t, src, st));
  };
  o.gather = [g](const void *s, void *r, size_t n, pstate_dtype_t t, int dst, void *st) {
    ps_check(pstate_gather(g, s, r, n, t, dst, st));
  };
  o.all_to_all = [g](const void *s, void *r, size_t n, pstate_dtype_t t, void *st) {
    ps_check(pstate_all_to_all(g, s, r, n, t, st));
  };
  o.send = [g](const void *b, size_t n, pstate_dtype_t t, int dst, void *st) { ps_check(pstate_send(g, b, n, t, dst, st)); };
  o.recv = [g](void *b, size_t n, pstate_dtype_t t, int src, void *st) { ps_check(pstate_recv(g, b, n, t, src, st)); };
  o.barrier = [g] { ps_check(pstate_barrier(g)); };
  return o;
}

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
  run_case(k, "pstate_graph_capture_end", [&] {
    ps_check(pstate_graph_capture_end(ps));
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

  check_operations(k);
  check_argument_errors(k);
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
