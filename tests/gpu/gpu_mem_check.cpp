// gpu_mem_check.cpp — group memory and registered buffers (issue 29) through the public C API,
// on a GPU (run by tests/gpu/run.sh; with --devsim on the host-memory stand-ins).
//
// Alone it is a world of one (file:// store in /tmp; group memory falls back to plain device
// memory there); under `pstate run -n 2 tests/gpu/own_host_id.sh` each rank is an NCCL host of its
// own on device 0, where NCCL may refuse symmetric windows (no NVLink between "hosts"): either way
// every result must be exact. It checks, against host references computed here:
//   - pstate_mem_alloc: all_reduce, all_gather and reduce_scatter of float32 with both buffers in
//     group memory, and which path they took (symmetric where NCCL gave windows, else plain);
//   - a size disagreement is MISMATCH (world > 1);
//   - arguments one rank refuses (world > 1: 0 bytes, past 2^47, out NULL, a reserve of 0 bytes,
//     a foreign pointer freed): INVALID_ARGUMENT on every rank, and the group goes on (issue 44);
//   - the pool: a reserve, local pieces, an all_reduce on a piece, NO_MEMORY naming the reserve;
//     the first piece (at the reserve's address) freed on every rank, then on rank 0 alone, frees
//     that piece only (issue 44);
//   - a user buffer registered (pstate_mem_register) and an all_reduce on it;
//   - graph registration: a captured all_reduce on cudaMalloc'ed memory, registered at
//     pstate_graph_capture_end, replayed twice exact;
//   - pstate_mem_free of everything.
// Prints one line per check and a summary line "gpu_mem_check: world W, symmetric yes|no, NCCL V:
// N checks passed"; exit status 0 when every check passed.
#include <pstate/pstate.h>

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_failed = 0, g_passed = 0, g_rank = 0;

void expect(bool ok, const std::string &what) {
  if (ok) {
    ++g_passed;
    if (g_rank == 0) std::printf("ok    %s\n", what.c_str());
  } else {
    ++g_failed;
    std::printf("FAIL  [rank %d] %s (last error: %s)\n", g_rank, what.c_str(), pstate_last_error());
  }
  std::fflush(stdout);
}

bool ok(pstate_status_t s) { return s == PSTATE_OK; }

float input(int rank, size_t i) { return static_cast<float>((rank * 7 + static_cast<int>(i)) % 13); }

void fill(float *d, int rank, size_t n, size_t first = 0) {
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = input(rank, first + i);
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
}

std::vector<float> back(const float *d, size_t n, cudaStream_t s) {
  std::vector<float> h(n);
  cudaStreamSynchronize(s);
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  return h;
}

bool sums_exact(const std::vector<float> &h, int world, size_t first = 0, float times = 1) {
  for (size_t i = 0; i < h.size(); ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += input(r, first + i);
    if (h[i] != want * times) return false;
  }
  return true;
}

const char *path_name(pstate_mem_path_t p) {
  switch (p) {
    case PSTATE_MEM_PATH_SYMMETRIC: return "symmetric";
    case PSTATE_MEM_PATH_REGISTERED: return "registered";
    case PSTATE_MEM_PATH_PLAIN: return "plain";
    default: return "none";
  }
}

bool refused(pstate_status_t st, bool mine, const char *own_text) {
  return st == PSTATE_ERR_INVALID_ARGUMENT &&
         std::strstr(pstate_last_error(), mine ? own_text : "refused its part of this call") != nullptr;
}

// Arguments one rank refuses (issue 44): INVALID_ARGUMENT on every rank, nothing allocated or
// freed, and each rank's next call pairs with the others' next one. a: group memory of kCount floats.
void refusals(pstate_group_t *w, int me, int n, float *a, cudaStream_t s) {
  constexpr size_t kCount = 4096;
  const bool bad = me == n - 1;
  const size_t past = (size_t{1} << 47) + 1;
  void *x = nullptr;
  expect(refused(pstate_mem_alloc(w, bad ? 0 : 4096, &x), bad, "bytes is 0") && x == nullptr,
         "pstate_mem_alloc of 0 bytes on one rank: INVALID_ARGUMENT on every rank");
  expect(refused(pstate_mem_alloc(w, bad ? past : 4096, &x), bad, "2^47"),
         "pstate_mem_alloc past 2^47 on one rank: INVALID_ARGUMENT on every rank");
  expect(refused(pstate_mem_alloc(w, 4096, bad ? nullptr : &x), bad, "out is NULL"),
         "pstate_mem_alloc with out NULL on one rank: INVALID_ARGUMENT on every rank");
  expect(refused(pstate_mem_pool_reserve(w, bad ? 0 : 4096), bad, "bytes is 0"),
         "pstate_mem_pool_reserve of 0 bytes on one rank: INVALID_ARGUMENT on every rank");
  float *mine = nullptr;
  cudaMalloc(reinterpret_cast<void **>(&mine), 4096);
  expect(refused(pstate_mem_free(w, bad ? mine : a), bad, "not the start of group memory"),
         "pstate_mem_free of a foreign pointer on one rank: INVALID_ARGUMENT on every rank");
  cudaFree(mine);
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  pstate_group_mem_stats(w, &st);
  fill(a, me, kCount);
  expect(st.pool_reserved == 0 && ok(pstate_all_reduce(w, a, a, kCount, PSTATE_FLOAT32, PSTATE_SUM, s)) &&
             sums_exact(back(a, kCount, s), n),
         "after the refusals: no pool, a still allocated, all_reduce on it exact");
}

}  // namespace

int main() {
  constexpr size_t kCount = 4096;
  const bool launched = std::getenv("RANK") != nullptr;
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  std::string store = "file:///tmp/pstate-gpu-mem-check-" + std::to_string(getpid());
  if (!launched) {
    p.world_size = 1;
    p.rank = 0;
    p.init_method = store.c_str();
  }
  p.device = PSTATE_DEVICE_CUDA;
  if (const char *d = std::getenv("GPU_CHECK_DEVICE")) p.device_ordinal = std::atoi(d);
  p.timeout_ms = 120000;
  pstate_t *ps = nullptr;
  if (!ok(pstate_init(&p, &ps))) {
    std::printf("FAIL  pstate_init: %s\n", pstate_last_error());
    return 1;
  }
  pstate_group_t *w = nullptr;
  pstate_get_group(ps, PSTATE_GROUP_WORLD, &w);
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  pstate_group_info(w, &info);
  const int n = info.world_size, me = info.rank_in_group;
  g_rank = me;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);

  // ---- group memory: the three symmetric collectives ----
  float *a = nullptr, *b = nullptr;
  expect(ok(pstate_mem_alloc(w, kCount * sizeof(float), reinterpret_cast<void **>(&a))), "pstate_mem_alloc a");
  expect(ok(pstate_mem_alloc(w, n * kCount * sizeof(float), reinterpret_cast<void **>(&b))), "pstate_mem_alloc b");
  pstate_mem_info_t qi = PSTATE_MEM_INFO_INIT;
  expect(ok(pstate_mem_query(w, a, &qi)) && qi.kind == PSTATE_MEM_GROUP && qi.base == a, "pstate_mem_query: group memory");
  const bool symmetric = qi.symmetric == 1;
  fill(a, me, kCount);
  expect(ok(pstate_all_reduce(w, a, a, kCount, PSTATE_FLOAT32, PSTATE_SUM, s)) && sums_exact(back(a, kCount, s), n),
         "all_reduce on group memory exact");
  pstate_mem_stats_t st = PSTATE_MEM_STATS_INIT;
  pstate_group_mem_stats(w, &st);
  expect(st.last_path == (symmetric ? PSTATE_MEM_PATH_SYMMETRIC : PSTATE_MEM_PATH_PLAIN),
         std::string("all_reduce took the ") + path_name(st.last_path) + " path");
  fill(a, me, kCount);
  bool gathered = ok(pstate_all_gather(w, a, b, kCount, PSTATE_FLOAT32, s));
  std::vector<float> all = back(b, n * kCount, s);
  for (int r = 0; r < n && gathered; ++r)
    for (size_t i = 0; i < kCount; ++i) gathered = gathered && all[r * kCount + i] == input(r, i);
  expect(gathered, "all_gather on group memory exact");
  fill(b, me, n * kCount);
  expect(ok(pstate_reduce_scatter(w, b, a, kCount, PSTATE_FLOAT32, PSTATE_SUM, s)) &&
             sums_exact(back(a, kCount, s), n, static_cast<size_t>(me) * kCount),
         "reduce_scatter on group memory exact");
  if (n > 1) {
    void *x = nullptr;
    expect(pstate_mem_alloc(w, me == 0 ? 4096 : 8192, &x) == PSTATE_ERR_MISMATCH && x == nullptr,
           "different sizes: MISMATCH");
    refusals(w, me, n, a, s);
  }
  expect(ok(pstate_mem_free(w, b)), "pstate_mem_free b");

  // ---- a user buffer registered ----
  float *u = nullptr;
  cudaMalloc(reinterpret_cast<void **>(&u), kCount * sizeof(float));
  expect(ok(pstate_mem_register(w, u, kCount * sizeof(float))), "pstate_mem_register");
  fill(u, me, kCount);
  expect(ok(pstate_all_reduce(w, u, u, kCount, PSTATE_FLOAT32, PSTATE_SUM, s)) && sums_exact(back(u, kCount, s), n),
         "all_reduce on a registered buffer exact");
  expect(ok(pstate_mem_deregister(w, u)), "pstate_mem_deregister");

  // ---- graph registration ----
  expect(ok(pstate_set_graph_registration(ps, 1)), "pstate_set_graph_registration");
  void *cs = nullptr;
  expect(ok(pstate_graph_capture_begin(ps, s, &cs)), "pstate_graph_capture_begin");
  cudaStreamBeginCapture(static_cast<cudaStream_t>(cs), cudaStreamCaptureModeGlobal);
  expect(ok(pstate_all_reduce(w, u, u, kCount, PSTATE_FLOAT32, PSTATE_SUM, cs)), "captured all_reduce");
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(static_cast<cudaStream_t>(cs), &graph);
  expect(ok(pstate_graph_capture_end(ps)), "pstate_graph_capture_end registers the graph's buffer");
  pstate_mem_query(w, u + 7, &qi);
  expect(qi.kind == PSTATE_MEM_REGISTERED && qi.base == u, "the captured buffer is a registration");
  cudaGraphExec_t exec = nullptr;
  cudaGraphInstantiate(&exec, graph, 0);
  bool replays = true;
  for (int replay = 0; replay < 2; ++replay) {
    fill(u, me, kCount);
    replays = replays && cudaGraphLaunch(exec, s) == cudaSuccess && sums_exact(back(u, kCount, s), n);
  }
  expect(replays, "graph replays exact");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  expect(ok(pstate_mem_deregister(w, u)), "pstate_mem_deregister of the graph buffer");

  // ---- the pool ----
  expect(ok(pstate_mem_pool_reserve(w, 1 << 20)), "pstate_mem_pool_reserve");
  float *piece = nullptr;
  expect(ok(pstate_mem_alloc(w, kCount * sizeof(float), reinterpret_cast<void **>(&piece))), "a pool piece");
  void *extra = nullptr;
  for (int k = 0; k < me; ++k) pstate_mem_alloc(w, 1000, &extra);  // local: a different number per rank
  fill(piece, me, kCount);
  expect(ok(pstate_all_reduce(w, piece, piece, kCount, PSTATE_FLOAT32, PSTATE_SUM, s)) &&
             sums_exact(back(piece, kCount, s), n),
         "all_reduce on a pool piece exact");
  void *big = nullptr;
  expect(pstate_mem_alloc(w, 2 << 20, &big) == PSTATE_ERR_NO_MEMORY && std::strstr(pstate_last_error(), "reserve"),
         "past the reserve: NO_MEMORY naming it");
  // the first piece starts at the reserve's own address: freeing it frees that piece only (issue 44)
  float *second = nullptr;
  expect(ok(pstate_mem_alloc(w, kCount * sizeof(float), reinterpret_cast<void **>(&second))), "a second pool piece");
  expect(ok(pstate_mem_free(w, piece)), "pstate_mem_free of the first pool piece");
  pstate_group_mem_stats(w, &st);
  fill(second, me, kCount);
  expect(st.pool_reserved == 1 << 20 &&
             ok(pstate_all_reduce(w, second, second, kCount, PSTATE_FLOAT32, PSTATE_SUM, s)) &&
             sums_exact(back(second, kCount, s), n),
         "the reserve and the other pieces stay: all_reduce on a second piece exact");
  // the first piece again, freed by rank 0 alone: local (the others would wait for nothing)
  expect(ok(pstate_mem_alloc(w, kCount * sizeof(float), reinterpret_cast<void **>(&piece))), "the first piece again");
  if (me == 0) expect(ok(pstate_mem_free(w, piece)), "pstate_mem_free of the first piece on rank 0 alone");
  fill(second, me, kCount);
  expect(ok(pstate_all_reduce(w, second, second, kCount, PSTATE_FLOAT32, PSTATE_SUM, s)) &&
             sums_exact(back(second, kCount, s), n),
         "then the group goes on: all_reduce on the second piece exact");
  expect(ok(pstate_mem_free(w, a)), "pstate_mem_free a");
  pstate_group_mem_stats(w, &st);
  cudaFree(u);
  cudaStreamDestroy(s);
  expect(ok(pstate_finalize(ps)), "pstate_finalize");
  if (me == 0)
    std::printf("gpu_mem_check: world %d, symmetric %s, NCCL %d: %d checks passed, %d failed\n", n,
                symmetric ? "yes" : "no", st.nccl_version, g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
