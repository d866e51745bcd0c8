// gpu_multi_check.cpp — the device half with several ranks, through the public C API (issue 28):
// what gpu_api_check.cpp checks at world 1, at world 2 and 4, plus the faults that need peers.
//
// One process per rank under `pstate run -n W` (W >= 2). tests/gpu/ranks_per_gpu.sh starts it
// through tests/gpu/own_host_id.sh, which puts every rank on CUDA device 0 (GPU_CHECK_DEVICE) as
// an NCCL host of its own (NCCL_HOSTID), talking over loopback sockets: several ranks on ONE GPU,
// for semantics, not speed. The same source runs on a GPU and, built against the stand-ins of
// tests/devsim/, in CI. Nothing in libpstate knows: the device ordinal is the init parameter.
//
//   gpu_multi_check ops    every device collective x dtype x reduce op (gatherv/scatterv and a
//                          send/recv ring included; gpu_check.hpp) on the world, on tp (split from
//                          the world by pstate_initialize_model_parallel: tp 2, x pp 2 at world 4)
//                          and on a pstate_new_group (ranks {0, 1, 3} at world 4, {0, 1} at 2);
//                          isend/irecv rings and a p2p_batch with every peer on each; tensor dicts
//                          with CUDA tensors on the world and tp; a sliced dict across the pp
//                          boundary (world 4); a CUDA graph of tp all_reduces replayed 100 times,
//                          alternately on two streams, each replay with new inputs
//   gpu_multi_check kill   the last rank SIGKILLs itself amid device all_reduces on the world: the
//                          survivors must get PEER_LOST or ABORTED within timeout + 2 s of their
//                          last completed all_reduce, then pstate_shrink and exact device
//                          collectives on the new world (and its tp); on the stand-ins the program
//                          counts ncclCommShrink against new ncclCommInitRank calls itself, on a
//                          GPU ranks_per_gpu.sh counts pstate's INFO lines (PSTATE_DEBUG=INFO)
//   gpu_multi_check stall  PSTATE_CHECK=1; the last rank never enters device all_reduce #5 (it sits
//                          in its own code for 60 s); the others must get TIMEOUT within timeout +
//                          2 s and exit; `pstate run --max-wait` then stops it and ranks_per_gpu.sh
//                          checks that `pstate doctor` names it
//   gpu_multi_check check  PSTATE_CHECK=1: a count mismatch in a device all_reduce (world) and
//                          all_gather (tp) is MISMATCH on every rank of the call, nothing reaches
//                          NCCL (recv untouched), and the next call is exact; last, a send/recv
//                          count mismatch is MISMATCH on the receiver and, through its failure
//                          notice, on the sender and every other rank (it fails the context)
//
// Every result is compared with a host reference computed from the inputs' formulas
// (gpu_check.hpp). Each rank ends with "gpu_multi_check MODE rank R of W (cuda:D): N checks
// passed, M failed" and exits 0 when M is 0. pstate's timeout: GPU_CHECK_TIMEOUT_MS (default 120 s
// for ops, 6 s for the fault modes; the rendezvous gets PSTATE_INIT_TIMEOUT_MS, default 120 s).
#include "gpu_api_ops.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

using namespace gpu_check;

namespace {

constexpr size_t kSlackMs = 2000;  // README: a failed device call is reported within timeout + 2 s

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the program's rank ---------------------------------------------------------------------

struct Rank {
  pstate_t *ps = nullptr;
  int rank = 0;  // launch rank = world rank before any shrink
  int world = 1;
  int device = 0;
  int timeout_ms = 0;
  cudaStream_t stream = nullptr;
  Case top;  // checks outside a group's Case: its tally holds the rank's total
};

// The device every rank uses: GPU_CHECK_DEVICE (own_host_id.sh sets 0: all ranks on one GPU), else
// -1 = pstate's default, the local rank's device.
int device_from_env() {
  const char *v = std::getenv("GPU_CHECK_DEVICE");
  return v != nullptr && v[0] != '\0' ? std::atoi(v) : -1;
}

int timeout_from_env(int fallback) {
  const char *v = std::getenv("GPU_CHECK_TIMEOUT_MS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// A group's Case: its rank and size, the C API as DeviceOps, buffers for world * kCount 8-byte
// elements on the device.
struct GroupCase {
  Case k;
  explicit GroupCase(Rank &r, pstate_group_t *g) {
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    ps_check(pstate_group_info(g, &info));
    k.rank = info.rank_in_group;
    k.world = info.world_size;
    k.ops = ops_of(g);
    k.stream = r.stream;
    k.tally.rank = r.rank;
    int cc = 0;
    CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, r.device));
    k.fp8_reduce = cc >= 9;
    CK(cudaMalloc(&k.send, k.world * kCount * 8));
    CK(cudaMalloc(&k.recv, k.world * kCount * 8));
  }
  ~GroupCase() {
    cudaStreamSynchronize(k.stream);
    cudaFree(k.send);
    cudaFree(k.recv);
  }
  GroupCase(const GroupCase &) = delete;
  GroupCase &operator=(const GroupCase &) = delete;
};

std::string group_name(pstate_group_t *g) {
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  ps_check(pstate_group_info(g, &info));
  return info.name;
}

// ---- ops: point-to-point beyond the blocking ring -------------------------------------------------

// isend to the next rank and irecv from the previous one, both pending before either wait.
std::string check_isend_irecv_ring(Case &k, pstate_group_t *g, pstate_dtype_t t) {
  const int next = (k.rank + 1) % k.world, prev = (k.rank + k.world - 1) % k.world;
  upload(k, k.send, make_bytes(t, kCount, [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); }));
  pstate_request_t *rq = nullptr, *sq = nullptr;
  // Even ranks post the send first, odd ranks the receive: NCCL pairs them in enqueue order.
  if (k.rank % 2 == 0) {
    ps_check(pstate_isend(g, k.send, kCount, t, next, k.stream, &sq));
    ps_check(pstate_irecv(g, k.recv, kCount, t, prev, k.stream, &rq));
  } else {
    ps_check(pstate_irecv(g, k.recv, kCount, t, prev, k.stream, &rq));
    ps_check(pstate_isend(g, k.send, kCount, t, next, k.stream, &sq));
  }
  ps_check(pstate_wait(rq));  // out of posting order on purpose
  ps_check(pstate_wait(sq));
  return compare(t, download(k, k.recv, kCount * size_of(t)), kCount,
                 [&](size_t i) { return input_value(PSTATE_SUM, prev, i, t); });
}

// One block to and from every peer in one batch; odd ranks list their ops in reverse. Block q of
// recv comes from peer q and holds input_value(q, rank * kCount + i); block p of send goes to p.
std::string check_p2p_batch(Case &k, pstate_group_t *g, pstate_dtype_t t) {
  upload(k, k.send, make_bytes(t, k.world * kCount, [&](size_t j) { return input_value(PSTATE_SUM, k.rank, j, t); }));
  const size_t es = size_of(t);
  std::vector<pstate_p2p_op_t> list;
  for (int p = 0; p < k.world; ++p) {
    if (p == k.rank) continue;
    pstate_p2p_op_t s = PSTATE_P2P_OP_INIT, r = PSTATE_P2P_OP_INIT;
    s.is_send = 1;
    s.buf = static_cast<uint8_t *>(k.send) + static_cast<size_t>(p) * kCount * es;
    r.buf = static_cast<uint8_t *>(k.recv) + static_cast<size_t>(p) * kCount * es;
    s.count = r.count = kCount;
    s.dtype = r.dtype = t;
    s.peer = r.peer = p;
    list.push_back(s);
    list.push_back(r);
  }
  if (k.rank % 2 == 1) std::reverse(list.begin(), list.end());
  ps_check(pstate_p2p_batch(g, list.data(), list.size(), k.stream));
  auto host = download(k, k.recv, k.world * kCount * es);
  for (int q = 0; q < k.world; ++q) {
    if (q == k.rank) continue;
    std::vector<uint8_t> block(host.begin() + static_cast<ptrdiff_t>(q * kCount * es),
                               host.begin() + static_cast<ptrdiff_t>((q + 1) * kCount * es));
    std::string bad = compare(t, block, kCount, [&](size_t i) {
      return input_value(PSTATE_SUM, q, static_cast<size_t>(k.rank) * kCount + i, t);
    });
    if (!bad.empty()) return "block from rank " + std::to_string(q) + ": " + bad;
  }
  return "";
}

// Everything gpu_check.hpp checks on one group, then non-blocking and batched point-to-point.
void check_group(Rank &r, pstate_group_t *g) {
  const std::string name = group_name(g);
  GroupCase gc(r, g);
  Case &k = gc.k;
  check_operations(k);
  if (k.world > 1) {
    for (pstate_dtype_t t : kDtypes)
      run_case(k, k.name("isend/irecv ring", t) + " on " + name, [&] { return check_isend_irecv_ring(k, g, t); });
    for (pstate_dtype_t t : {PSTATE_FLOAT32, PSTATE_BFLOAT16, PSTATE_INT64, PSTATE_FP8_E4M3})
      run_case(k, k.name("p2p_batch with every peer", t) + " on " + name, [&] { return check_p2p_batch(k, g, t); });
  }
  std::printf("gpu_multi_check rank %d: %s (rank %d of %d): %d checks passed, %d failed\n", r.rank, name.c_str(),
              k.rank, k.world, k.tally.passed, k.tally.failed);
  r.top.tally.passed += k.tally.passed;
  r.top.tally.failed += k.tally.failed;
}

// ---- ops: a sliced dict across the pp boundary (tp 2 x pp 2) -----------------------------------

struct OneTensor {  // the receiver's allocation callback: one CUDA tensor
  void *data = nullptr;
  size_t bytes = 0;
  static void *alloc(void *user, const char *, pstate_dtype_t, int, const int64_t *, size_t bytes,
                     pstate_device_t device) {
    auto *self = static_cast<OneTensor *>(user);
    if (device != PSTATE_DEVICE_CUDA || bytes == 0) return nullptr;
    CK(cudaMalloc(&self->data, bytes));
    self->bytes = bytes;
    return self->data;
  }
  ~OneTensor() {
    if (data != nullptr) cudaFree(data);
  }
};

// Stage 0 (pp rank 0) sends a [10, 2062] int32 CUDA tensor to stage 1, sliced over attention-TP:
// each sender holds its own values ((s + 1) * 100000 + i at attention-TP rank s), so the tensor
// gathered on the receivers shows which half came from whom: half s from the sender at rank s.
void check_sliced_dict(Rank &r) {
  pstate_group_t *pp = nullptr, *ag = nullptr;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_PP, &pp));
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_ATTN_TP, &ag));
  pstate_group_info_t pinfo = PSTATE_GROUP_INFO_INIT, ainfo = PSTATE_GROUP_INFO_INIT;
  ps_check(pstate_group_info(pp, &pinfo));
  ps_check(pstate_group_info(ag, &ainfo));
  constexpr size_t kRows = 10, kCols = 2062, kN = kRows * kCols;
  auto value = [](int sender, size_t i) { return static_cast<int32_t>((sender + 1) * 100000 + static_cast<int>(i)); };
  const std::string name = "send/recv_tensor_dict_sliced pp 0 -> 1 over " + std::string(ainfo.name) + " (world " +
                           std::to_string(r.world) + ")";
  run_case(r.top, name, [&] {
    if (pinfo.rank_in_group == 0) {
      std::vector<int32_t> host(kN);
      for (size_t i = 0; i < kN; ++i) host[i] = value(ainfo.rank_in_group, i);
      void *d = nullptr;
      CK(cudaMalloc(&d, kN * 4));
      CK(cudaMemcpy(d, host.data(), kN * 4, cudaMemcpyHostToDevice));
      int64_t shape[2] = {kRows, kCols};
      pstate_tensor_t t = PSTATE_TENSOR_INIT;
      t.name = "hidden";
      t.dtype = PSTATE_INT32;
      t.ndim = 2;
      t.shape = shape;
      t.data = d;
      t.device = PSTATE_DEVICE_CUDA;
      try {
        ps_check(pstate_send_tensor_dict_sliced(pp, &t, 1, 1, ag, r.stream));
      } catch (...) {
        cudaFree(d);
        throw;
      }
      CK(cudaStreamSynchronize(r.stream));
      CK(cudaFree(d));
      return std::string();
    }
    OneTensor got;
    ps_check(pstate_recv_tensor_dict_sliced(pp, 0, ag, OneTensor::alloc, &got, r.stream));
    if (got.bytes != kN * 4) return "received " + std::to_string(got.bytes) + " bytes";
    std::vector<int32_t> host(kN);
    CK(cudaMemcpyAsync(host.data(), got.data, kN * 4, cudaMemcpyDeviceToHost, r.stream));
    CK(cudaStreamSynchronize(r.stream));
    for (size_t i = 0; i < kN; ++i) {
      int32_t want = value(static_cast<int>(i / (kN / static_cast<size_t>(ainfo.world_size))), i);
      if (host[i] != want)
        return "element " + std::to_string(i) + " is " + std::to_string(host[i]) + ", expected " + std::to_string(want);
    }
    return std::string();
  });
}

// ---- ops: a CUDA graph of tp all_reduces, replayed 100 times on two streams --------------------

// The graph copies `src` into `work` (device to device) and runs kCalls in-place tp all_reduces on
// slices of `work`; replay n (on stream n % 2) uploads new inputs into src first, and every replay's
// result is compared with the sum over the tp ranks.
void check_graph_replays(Rank &r) {
  constexpr int kCalls = 10, kReplays = 100;
  constexpr size_t kSlice = 512, kN = kCalls * kSlice;
  pstate_group_t *tp = nullptr;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_TP, &tp));
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  ps_check(pstate_group_info(tp, &info));
  const std::string name = "graph of " + std::to_string(kCalls) + " tp all_reduces (" + info.name + ", " +
                           std::to_string(info.world_size) + " ranks) replayed " + std::to_string(kReplays) +
                           " times on two streams (world " + std::to_string(r.world) + ")";
  auto input = [](int replay, int rank, size_t j) {
    return static_cast<float>((rank + 1) * (replay % 7 + 1) + static_cast<int>(j / kSlice) + static_cast<int>(j % 11));
  };
  float *src = nullptr, *work = nullptr;
  CK(cudaMalloc(&src, kN * sizeof(float)));
  CK(cudaMalloc(&work, kN * sizeof(float)));
  cudaStream_t second = nullptr;
  CK(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
  void *cs = nullptr;
  ps_check(pstate_graph_capture_begin(r.ps, nullptr, &cs));
  cudaGraph_t graph = nullptr;
  CK(cudaStreamBeginCapture(static_cast<cudaStream_t>(cs), cudaStreamCaptureModeGlobal));
  CK(cudaMemcpyAsync(work, src, kN * sizeof(float), cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(cs)));
  std::string recorded;
  for (int c = 0; c < kCalls && recorded.empty(); ++c) {
    try {
      ps_check(pstate_tp_allreduce(r.ps, work + c * kSlice, kSlice, PSTATE_FLOAT32, PSTATE_SUM, nullptr));
    } catch (const OpError &e) {
      recorded = std::string(pstate_status_string(e.status)) + ": " + e.message;
    }
  }
  CK(cudaStreamEndCapture(static_cast<cudaStream_t>(cs), &graph));
  ps_check(pstate_graph_capture_end(r.ps));
  if (!recorded.empty()) die(r.rank, "tp all_reduce while capturing: " + recorded + " (the ranks are out of step now)");
  cudaGraphExec_t exec = nullptr;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  std::string bad;
  std::vector<float> host(kN);
  for (int replay = 0; replay < kReplays; ++replay) {
    cudaStream_t st = replay % 2 == 0 ? r.stream : second;
    for (size_t j = 0; j < kN; ++j) host[j] = input(replay, info.rank_in_group, j);
    CK(cudaMemcpyAsync(src, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, st));
    CK(cudaGraphLaunch(exec, st));
    CK(cudaMemcpyAsync(host.data(), work, kN * sizeof(float), cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));  // also orders the next replay on the other stream after this one
    for (size_t j = 0; j < kN && bad.empty(); ++j) {
      float want = 0;
      for (int q = 0; q < info.world_size; ++q) want += input(replay, q, j);
      if (host[j] != want)
        bad = "replay " + std::to_string(replay) + " element " + std::to_string(j) + " is " + std::to_string(host[j]) +
              ", expected " + std::to_string(want);
    }
  }
  r.top.tally.expect(bad.empty(), name, bad);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(second));
  CK(cudaFree(src));
  CK(cudaFree(work));
}

int run_ops(Rank &r) {
  pstate_group_t *world = nullptr;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_WORLD, &world));
  // A device operation on the world first: tp and the custom group are then split from its
  // communicator (ncclCommSplit), as a serving runtime's groups are.
  run_case(r.top, "first world all_reduce float32 sum", [&] {
    GroupCase gc(r, world);
    return check_reduction(gc.k, false, PSTATE_FLOAT32, PSTATE_SUM);
  });
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = r.world / 2;
  ps_check(pstate_initialize_model_parallel(r.ps, &cfg));
  pstate_group_t *tp = nullptr;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_TP, &tp));
  // The custom group: {0, 1, 3} at world 4 (rank 2 joins none), every rank at world 2.
  std::vector<int> members;
  for (int q = 0; q < r.world; ++q)
    if (r.world < 4 || q != 2) members.push_back(q);
  const bool member = std::find(members.begin(), members.end(), r.rank) != members.end();
  pstate_group_t *custom = nullptr;
  ps_check(pstate_new_group(r.ps, member ? members.data() : nullptr, member ? members.size() : 0, &custom));
  check_group(r, world);
  check_group(r, tp);
  if (custom != nullptr) check_group(r, custom);
  {
    GroupCase gc(r, world);
    check_tensor_dicts(gc.k, world);
    r.top.tally.passed += gc.k.tally.passed;
    r.top.tally.failed += gc.k.tally.failed;
  }
  {
    GroupCase gc(r, tp);
    check_tensor_dicts(gc.k, tp);
    r.top.tally.passed += gc.k.tally.passed;
    r.top.tally.failed += gc.k.tally.failed;
  }
  if (cfg.pipeline_parallel_size > 1) check_sliced_dict(r);
  check_graph_replays(r);
  ps_check(pstate_destroy_model_parallel(r.ps));
  return 0;
}

// ---- kill: a rank SIGKILLed during device all_reduces, then pstate_shrink -------------------------

// The stand-in's counts of this process (tests/devsim/devsim.h), found through the library
// libpstate loaded; false on real NCCL, which has no such symbols.
struct NcclCounts {
  unsigned long long inits = 0, splits = 0, shrinks = 0, revokes = 0;
};
bool devsim_counts(NcclCounts *c) {
  typedef void (*counts_fn)(unsigned long long *, unsigned long long *, unsigned long long *, unsigned long long *);
  typedef void (*shrink_fn)(unsigned long long *, unsigned long long *);
  const char *path = std::getenv("PSTATE_NCCL_LIBRARY");
  void *h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return false;
  auto counts = reinterpret_cast<counts_fn>(dlsym(h, "devsim_nccl_counts"));
  auto shrinks = reinterpret_cast<shrink_fn>(dlsym(h, "devsim_nccl_shrink_counts"));
  bool ok = counts != nullptr && shrinks != nullptr;
  if (ok) {
    counts(&c->inits, nullptr, &c->splits, nullptr);
    shrinks(&c->shrinks, &c->revokes);
  }
  dlclose(h);
  return ok;
}

void *die_soon(void *) {
  usleep(300);  // inside the next all_reduce, most likely
  kill(getpid(), SIGKILL);
  return nullptr;
}

int run_kill(Rank &r) {
  const int victim = r.world - 1;
  pstate_group_t *world = nullptr;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_WORLD, &world));
  constexpr size_t kN = 65536;
  float *d = nullptr;
  CK(cudaMalloc(&d, kN * sizeof(float)));
  CK(cudaMemset(d, 0, kN * sizeof(float)));
  CK(cudaStreamSynchronize(nullptr));
  pstate_status_t st = PSTATE_OK;
  const double start = now_ms();
  double last_ok = start;
  int done = 0;
  const double give_up = 3.0 * r.timeout_ms + 5000;  // then the death went unnoticed: a failed check
  for (int iter = 0; st == PSTATE_OK && now_ms() - start < give_up; ++iter) {
    if (r.rank == victim && iter == 20) {
      pthread_t t;
      pthread_create(&t, nullptr, die_soon, nullptr);
    }
    st = pstate_all_reduce(world, d, d, kN, PSTATE_FLOAT32, PSTATE_MAX, r.stream);
    if (st != PSTATE_OK) break;
    // a bounded look at the stream: a dead peer's collective may never complete on it, and an
    // application keeps issuing work; pstate's next call must report the death
    const double t = now_ms();
    while (cudaStreamQuery(r.stream) == cudaErrorNotReady && now_ms() - t < 50) usleep(200);
    if (cudaStreamQuery(r.stream) == cudaSuccess) {
      last_ok = now_ms();
      ++done;
    }
  }
  const double failed_at = now_ms();
  const std::string error = st == PSTATE_OK ? "" : pstate_last_error();
  r.top.tally.expect(r.rank != victim, "the victim was SIGKILLed", "it lived on");
  r.top.tally.expect(
      st == PSTATE_ERR_PEER_LOST || st == PSTATE_ERR_ABORTED,
      "a survivor's device all_reduce after the peer's death is PEER_LOST or ABORTED",
      std::string(pstate_status_string(st)) + " after " + std::to_string(done) + " all_reduces: " + error);
  r.top.tally.expect(failed_at - last_ok <= r.timeout_ms + static_cast<double>(kSlackMs),
                     "the death is reported within timeout + 2 s of the last completed all_reduce",
                     std::to_string(failed_at - last_ok) + " ms");
  std::printf(
      "gpu_multi_check rank %d: %s %.0f ms after its last completed all_reduce (%d before; timeout %d ms): %s\n",
      r.rank, pstate_status_string(st), failed_at - last_ok, done, r.timeout_ms, error.c_str());
  if (st != PSTATE_ERR_PEER_LOST && st != PSTATE_ERR_ABORTED) return 1;

  NcclCounts before, after;
  const bool counted = devsim_counts(&before);
  std::vector<int> new_rank(static_cast<size_t>(r.world), -2);
  const double t0 = now_ms();
  size_t old_world = 0;
  ps_check(pstate_shrink(r.ps, new_rank.data(), new_rank.size(), &old_world));
  std::printf("gpu_multi_check rank %d: pstate_shrink took %.0f ms\n", r.rank, now_ms() - t0);
  std::string map;
  bool map_ok = true;
  for (int q = 0; q < r.world; ++q) {
    map += (q ? " " : "") + std::to_string(new_rank[static_cast<size_t>(q)]);
    map_ok = map_ok && new_rank[static_cast<size_t>(q)] == (q == victim ? -1 : q);
  }
  r.top.tally.expect(map_ok, "new ranks after the shrink: the victim -1, the others kept", map);
  const int survivors = r.world - 1;
  // A fresh stream: work of the failed world stays on the old one until NCCL released it.
  cudaStream_t fresh = nullptr;
  CK(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking));
  r.stream = fresh;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_WORLD, &world));
  {
    GroupCase gc(r, world);
    Case &k = gc.k;
    for (pstate_dtype_t t : {PSTATE_FLOAT32, PSTATE_BFLOAT16, PSTATE_INT32, PSTATE_FLOAT16, PSTATE_INT64})
      run_case(k, k.name("all_reduce after the shrink", t, "sum"),
               [&] { return check_reduction(k, false, t, PSTATE_SUM); });
    run_case(k, k.name("all_reduce after the shrink", PSTATE_FLOAT32, "max"),
             [&] { return check_reduction(k, false, PSTATE_FLOAT32, PSTATE_MAX); });
    run_case(k, k.name("all_gather after the shrink", PSTATE_FLOAT32),
             [&] { return check_all_gather(k, PSTATE_FLOAT32); });
    r.top.tally.passed += k.tally.passed;
    r.top.tally.failed += k.tally.failed;
  }
  // How the new world's communicator was made: ncclCommShrink of the failed one (no bootstrap),
  // or anew. A world of one makes none. Counted here on the stand-ins; on a GPU ranks_per_gpu.sh
  // reads pstate's INFO lines.
  if (counted && devsim_counts(&after)) {
    const unsigned long long shrinks = after.shrinks - before.shrinks, inits = after.inits - before.inits;
    std::printf(
        "gpu_multi_check rank %d: the new world's NCCL communicator: %llu ncclCommShrink, %llu new "
        "ncclCommInitRank (stand-in counts)\n",
        r.rank, shrinks, inits);
    const bool by_shrink =
        std::getenv("PSTATE_NCCL_SHRINK") == nullptr || std::string(std::getenv("PSTATE_NCCL_SHRINK")) != "0";
    // pstate shrinks whenever every survivor holds the failed world's communicator; a world of one
    // makes none either way (its device operations are copies on the stream: docs/cuda.md).
    const unsigned long long want_shrinks = survivors > 1 && by_shrink ? 1 : 0;
    const unsigned long long want_inits = survivors > 1 && !by_shrink ? 1 : 0;
    r.top.tally.expect(shrinks == want_shrinks && inits == want_inits,
                       survivors > 1 ? "the new world's communicator is shrunk from the failed one (PSTATE_NCCL_SHRINK=0: made anew)"
                                     : "a world of one holds no NCCL communicator (no shrink, no init)",
                       std::to_string(shrinks) + " shrinks, " + std::to_string(inits) + " inits");
  }
  if (survivors > 1) {
    pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
    cfg.tensor_parallel_size = survivors;
    ps_check(pstate_initialize_model_parallel(r.ps, &cfg));
    pstate_group_t *tp = nullptr;
    ps_check(pstate_get_group(r.ps, PSTATE_GROUP_TP, &tp));
    GroupCase gc(r, tp);
    Case &k = gc.k;
    run_case(k, k.name("tp all_reduce after the shrink", PSTATE_FLOAT32, "sum"),
             [&] { return check_reduction(k, false, PSTATE_FLOAT32, PSTATE_SUM); });
    run_case(k, k.name("tp reduce_scatter after the shrink", PSTATE_BFLOAT16, "sum"),
             [&] { return check_reduction(k, true, PSTATE_BFLOAT16, PSTATE_SUM); });
    r.top.tally.passed += k.tally.passed;
    r.top.tally.failed += k.tally.failed;
    ps_check(pstate_destroy_model_parallel(r.ps));
  }
  // d and the old stream are left to the process's end: cudaFree synchronizes the device, and a
  // kernel of the failed world that NCCL never released would hang it (the step's timeout would
  // then say so, not this check).
  return 0;
}

// ---- stall: a rank that never enters a device all_reduce (PSTATE_CHECK=1) -------------------------

int run_stall(Rank &r) {
  const int stalled = r.world - 1;
  constexpr int kAt = 5;  // the all_reduce the stalled rank never calls
  pstate_group_t *world = nullptr;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_WORLD, &world));
  GroupCase gc(r, world);
  Case &k = gc.k;
  for (int i = 1; i < kAt; ++i)
    run_case(k, "all_reduce #" + std::to_string(i) + " float32 sum",
             [&] { return check_reduction(k, false, PSTATE_FLOAT32, PSTATE_SUM); });
  r.top.tally.passed += k.tally.passed;
  r.top.tally.failed += k.tally.failed;
  if (r.rank == stalled) {
    std::fprintf(stderr, "gpu_multi_check rank %d: in user code instead of all_reduce #%d\n", r.rank, kAt);
    std::fflush(stderr);
    for (unsigned left = 60; (left = sleep(left)) > 0;) {
    }
    r.top.tally.expect(false, "the stalled rank was stopped by pstate run --max-wait", "it slept 60 s");
    return 1;
  }
  const double t0 = now_ms();
  pstate_status_t st = pstate_all_reduce(world, k.send, k.recv, kCount, PSTATE_FLOAT32, PSTATE_SUM, r.stream);
  const double took = now_ms() - t0;
  const std::string error = st == PSTATE_OK ? "" : pstate_last_error();
  r.top.tally.expect(st == PSTATE_ERR_TIMEOUT, "all_reduce #5 without the stalled rank is TIMEOUT",
                     std::string(pstate_status_string(st)) + ": " + error);
  r.top.tally.expect(took <= r.timeout_ms + static_cast<double>(kSlackMs), "TIMEOUT within timeout + 2 s",
                     std::to_string(took) + " ms");
  std::printf("gpu_multi_check rank %d: %s after %.0f ms (timeout %d ms): %s\n", r.rank, pstate_status_string(st), took,
              r.timeout_ms, error.c_str());
  return 0;
}

// ---- check: PSTATE_CHECK=1 catches a count mismatch on the device ---------------------------------

// fn runs on every rank of the call; `odd` ranks pass another count. Every rank must get MISMATCH
// naming the count, recv must be untouched (nothing reached NCCL).
void expect_mismatch(Case &k, const std::string &name, const std::function<void()> &fn) {
  std::vector<uint8_t> sentinel(k.world * kCount * 8, 0x5a);
  upload(k, k.recv, sentinel);
  CK(cudaStreamSynchronize(k.stream));
  expect_error(k, name + " is MISMATCH on every rank", PSTATE_ERR_MISMATCH, "count", fn);
  k.tally.expect(download(k, k.recv, sentinel.size()) == sentinel, name + ": recv untouched (nothing reached NCCL)");
}

// Last: a send/recv count mismatch fails the context (README: the stream is out of step), so
// every rank ends with pstate_abort.
int run_check(Rank &r) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = r.world / 2;
  ps_check(pstate_initialize_model_parallel(r.ps, &cfg));
  pstate_group_t *world = nullptr, *tp = nullptr;
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_WORLD, &world));
  ps_check(pstate_get_group(r.ps, PSTATE_GROUP_TP, &tp));
  GroupCase gw(r, world), gt(r, tp);
  Case &w = gw.k, &t = gt.k;
  const size_t count = r.rank == r.world - 1 ? kCount - 1 : kCount;
  expect_mismatch(w, "world all_reduce, last rank 1030 elements against 1031",
                  [&] { w.ops.all_reduce(w.send, w.recv, count, PSTATE_FLOAT32, PSTATE_SUM, w.stream); });
  run_case(w, "world all_reduce after the mismatch",
           [&] { return check_reduction(w, false, PSTATE_FLOAT32, PSTATE_SUM); });
  const size_t tp_count = t.rank == 1 ? kCount + 3 : kCount;
  expect_mismatch(t, "tp all_gather, tp rank 1 1034 elements against 1031",
                  [&] { t.ops.all_gather(t.send, t.recv, tp_count, PSTATE_BFLOAT16, t.stream); });
  run_case(t, "tp all_gather after the mismatch", [&] { return check_all_gather(t, PSTATE_BFLOAT16); });
  run_case(w, "world send/recv ring after the mismatches", [&] { return check_send_recv_ring(w, PSTATE_FLOAT32); });
  // Group rank 1 receives 1036 where rank 0 sends 1031: its recv is MISMATCH at once; rank 0's
  // send may have returned before the verdict, and then its next call (the barrier) gets it from
  // rank 1's failure notice, as every other rank's barrier does; rank 1's own barrier is ABORTED.
  std::vector<uint8_t> sentinel(kCount * 4, 0x5a);
  upload(w, w.recv, sentinel);
  pstate_status_t p2p = PSTATE_OK;
  std::string p2p_error;
  if (w.rank == 0) p2p = pstate_send(world, w.send, kCount, PSTATE_FLOAT32, 1, w.stream);
  if (w.rank == 1) p2p = pstate_recv(world, w.recv, kCount + 5, PSTATE_FLOAT32, 0, w.stream);
  if (p2p != PSTATE_OK) p2p_error = pstate_last_error();
  pstate_status_t barrier = pstate_barrier(world);
  const std::string barrier_error = barrier != PSTATE_OK ? pstate_last_error() : "";
  const std::string what = "send 1031 float32 against recv 1036 (group ranks 0, 1)";
  if (w.rank == 1) {
    w.tally.expect(p2p == PSTATE_ERR_MISMATCH && p2p_error.find("1036") != std::string::npos,
                   what + ": the receiver's recv is MISMATCH naming both counts",
                   std::string(pstate_status_string(p2p)) + ": " + p2p_error);
    w.tally.expect(download(w, w.recv, sentinel.size()) == sentinel, what + ": recv untouched (nothing reached NCCL)");
    w.tally.expect(barrier == PSTATE_ERR_ABORTED, what + ": the receiver's context is failed (barrier ABORTED)",
                   std::string(pstate_status_string(barrier)) + ": " + barrier_error);
  } else {
    const bool at_send = w.rank == 0 && p2p == PSTATE_ERR_MISMATCH;
    const std::string &error = at_send ? p2p_error : barrier_error;
    w.tally.expect((at_send || barrier == PSTATE_ERR_MISMATCH) && error.find("1036") != std::string::npos,
                   what + (w.rank == 0 ? ": the sender's send or next call" : ": a bystander's next call (barrier)") +
                       " is MISMATCH naming the receiver's count",
                   std::string(pstate_status_string(at_send ? p2p : barrier)) + ": " + error);
  }
  for (Case *k : {&w, &t}) {
    r.top.tally.passed += k->tally.passed;
    r.top.tally.failed += k->tally.failed;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "ops" && mode != "kill" && mode != "stall" && mode != "check") {
    std::fprintf(
        stderr,
        "usage: pstate run -n W [--keep-going] -- tests/gpu/own_host_id.sh gpu_multi_check ops|kill|stall|check\n");
    return 2;
  }
  if (std::getenv("WORLD_SIZE") == nullptr) {
    std::fprintf(stderr, "gpu_multi_check: WORLD_SIZE is not set: start it with `pstate run -n W` (W >= 2)\n");
    return 2;
  }
  if (mode == "stall" || mode == "check") setenv("PSTATE_CHECK", "1", 1);  // before pstate_init reads it
  // The rendezvous waits for every process to start (minutes on a busy machine), the calls for
  // GPU_CHECK_TIMEOUT_MS.
  setenv("PSTATE_INIT_TIMEOUT_MS", "120000", 0);
  Rank r;
  r.timeout_ms = timeout_from_env(mode == "ops" ? 120000 : 6000);
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  params.device = PSTATE_DEVICE_CUDA;
  params.device_ordinal = device_from_env();
  params.timeout_ms = r.timeout_ms;
  pstate_status_t s = pstate_init(&params, &r.ps);
  if (s != PSTATE_OK) {
    std::fprintf(stderr, "gpu_multi_check %s: pstate_init: %s: %s\n", mode.c_str(), pstate_status_string(s),
                 pstate_last_error());
    return 2;
  }
  int rc = 2;
  try {
    pstate_group_t *world = nullptr;
    ps_check(pstate_get_group(r.ps, PSTATE_GROUP_WORLD, &world));
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    ps_check(pstate_group_info(world, &info));
    r.rank = info.rank;
    r.world = info.world_size;
    r.device = params.device_ordinal >= 0 ? params.device_ordinal : info.local_rank;
    r.top.tally.rank = r.rank;
    if (r.world < 2 || r.world % 2 != 0) die(r.rank, "gpu_multi_check needs an even world of 2 or more ranks");
    CK(cudaSetDevice(r.device));
    CK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    r.top.stream = r.stream;
    if (mode == "ops")
      rc = run_ops(r);
    else if (mode == "kill")
      rc = run_kill(r);
    else if (mode == "stall")
      rc = run_stall(r);
    else
      rc = run_check(r);
  } catch (const OpError &e) {
    std::fprintf(stderr, "[rank %d] FATAL gpu_multi_check %s: %s: %s\n", r.rank, mode.c_str(),
                 pstate_status_string(e.status), e.message.c_str());
    pstate_abort(r.ps);
    return 2;
  }
  std::printf("gpu_multi_check %s rank %d of %d (cuda:%d): %d checks passed, %d failed\n", mode.c_str(), r.rank,
              r.world, r.device, r.top.tally.passed, r.top.tally.failed);
  std::fflush(stdout);
  if (mode == "stall" || mode == "check") {  // the context failed (TIMEOUT, p2p MISMATCH): abort, local
    pstate_abort(r.ps);
  } else if ((s = pstate_finalize(r.ps)) != PSTATE_OK) {
    std::fprintf(stderr, "gpu_multi_check %s: pstate_finalize: %s: %s\n", mode.c_str(), pstate_status_string(s),
                 pstate_last_error());
    return 2;
  }
  return rc == 0 && r.top.tally.failed == 0 ? 0 : 1;
}
