// gpu_check.hpp — host references for the GPU checks: inputs, expected results, comparisons.
//
// Every rank can compute every rank's input from (op, rank, index), so expected results are
// computed on the host from the formulas, independently of the code under test. Inputs are small
// integers (sums and products stay exact in every dtype, fp8 included; PROD uses {1, 2} so
// products are powers of two); only AVG of floats can round (NCCL's float AVG multiplies each
// input by 1/n before summing), so floats compare with a per-dtype tolerance. Values go to and
// from device bytes through CUDA's own host conversions (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h).
//
// The checks themselves (every op x dtype x reduce op, a CUDA graph of 100 all_reduces, the
// per-call cost against raw NCCL) are written once here against DeviceOps, a table of the device
// operations that each program fills: device_comm_check.cpp with pstate's internal DeviceComm,
// gpu_api_check.cpp with the public C API. A failed operation throws OpError either way.
#pragma once

#include <pstate/pstate.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace gpu_check {

inline const pstate_dtype_t kDtypes[] = {PSTATE_INT8,   PSTATE_UINT8,   PSTATE_INT32,    PSTATE_UINT32,
                                         PSTATE_INT64,  PSTATE_UINT64,  PSTATE_FLOAT16,  PSTATE_FLOAT32,
                                         PSTATE_FLOAT64, PSTATE_BFLOAT16, PSTATE_FP8_E4M3, PSTATE_FP8_E5M2};
inline const pstate_reduce_op_t kOps[] = {PSTATE_SUM, PSTATE_PROD, PSTATE_MAX, PSTATE_MIN, PSTATE_AVG};

inline bool is_float(pstate_dtype_t t) { return t >= PSTATE_FLOAT16; }  // float16 .. fp8_e5m2
inline bool is_fp8(pstate_dtype_t t) { return t == PSTATE_FP8_E4M3 || t == PSTATE_FP8_E5M2; }
inline size_t size_of(pstate_dtype_t t) { return pstate_dtype_size(t); }

// Element `index` of rank `rank`'s input for a collective with reduction `op` (for moves, pass
// PSTATE_SUM). fp8 stays within 0..2 so that sums over 8 ranks (<= 16) are exact in e4m3/e5m2.
inline double input_value(pstate_reduce_op_t op, int rank, size_t index, pstate_dtype_t t) {
  if (op == PSTATE_PROD) return 1.0 + static_cast<double>((static_cast<size_t>(rank) + index) % 2);
  if (is_fp8(t)) return static_cast<double>((static_cast<size_t>(rank) + index) % 3);
  return static_cast<double>((static_cast<size_t>(rank) * 7 + index * 3) % 9);
}

inline void encode(pstate_dtype_t t, double v, void *dst) {
  switch (t) {
    case PSTATE_INT8: { int8_t x = static_cast<int8_t>(v); std::memcpy(dst, &x, 1); return; }
    case PSTATE_UINT8: { uint8_t x = static_cast<uint8_t>(v); std::memcpy(dst, &x, 1); return; }
    case PSTATE_INT32: { int32_t x = static_cast<int32_t>(v); std::memcpy(dst, &x, 4); return; }
    case PSTATE_UINT32: { uint32_t x = static_cast<uint32_t>(v); std::memcpy(dst, &x, 4); return; }
    case PSTATE_INT64: { int64_t x = static_cast<int64_t>(v); std::memcpy(dst, &x, 8); return; }
    case PSTATE_UINT64: { uint64_t x = static_cast<uint64_t>(v); std::memcpy(dst, &x, 8); return; }
    case PSTATE_FLOAT16: { __half x = __float2half(static_cast<float>(v)); std::memcpy(dst, &x, 2); return; }
    case PSTATE_FLOAT32: { float x = static_cast<float>(v); std::memcpy(dst, &x, 4); return; }
    case PSTATE_FLOAT64: { std::memcpy(dst, &v, 8); return; }
    case PSTATE_BFLOAT16: { __nv_bfloat16 x = __float2bfloat16(static_cast<float>(v)); std::memcpy(dst, &x, 2); return; }
    case PSTATE_FP8_E4M3: { __nv_fp8_e4m3 x(static_cast<float>(v)); std::memcpy(dst, &x, 1); return; }
    case PSTATE_FP8_E5M2: { __nv_fp8_e5m2 x(static_cast<float>(v)); std::memcpy(dst, &x, 1); return; }
  }
}

inline double decode(pstate_dtype_t t, const void *src) {
  switch (t) {
    case PSTATE_INT8: { int8_t x; std::memcpy(&x, src, 1); return x; }
    case PSTATE_UINT8: { uint8_t x; std::memcpy(&x, src, 1); return x; }
    case PSTATE_INT32: { int32_t x; std::memcpy(&x, src, 4); return x; }
    case PSTATE_UINT32: { uint32_t x; std::memcpy(&x, src, 4); return x; }
    case PSTATE_INT64: { int64_t x; std::memcpy(&x, src, 8); return static_cast<double>(x); }
    case PSTATE_UINT64: { uint64_t x; std::memcpy(&x, src, 8); return static_cast<double>(x); }
    case PSTATE_FLOAT16: { __half x; std::memcpy(&x, src, 2); return __half2float(x); }
    case PSTATE_FLOAT32: { float x; std::memcpy(&x, src, 4); return x; }
    case PSTATE_FLOAT64: { double x; std::memcpy(&x, src, 8); return x; }
    case PSTATE_BFLOAT16: { __nv_bfloat16 x; std::memcpy(&x, src, 2); return __bfloat162float(x); }
    case PSTATE_FP8_E4M3: { __nv_fp8_e4m3 x; std::memcpy(&x, src, 1); return static_cast<float>(x); }
    case PSTATE_FP8_E5M2: { __nv_fp8_e5m2 x; std::memcpy(&x, src, 1); return static_cast<float>(x); }
  }
  return NAN;
}

// The reduction of element `index` over `world` ranks, as the C API defines it (AVG = SUM / n,
// truncating for integers).
inline double reduced_value(pstate_reduce_op_t op, int world, size_t index, pstate_dtype_t t) {
  double acc = input_value(op, 0, index, t);
  for (int r = 1; r < world; ++r) {
    double v = input_value(op, r, index, t);
    switch (op) {
      case PSTATE_SUM:
      case PSTATE_AVG: acc += v; break;
      case PSTATE_PROD: acc *= v; break;
      case PSTATE_MAX: acc = std::max(acc, v); break;
      case PSTATE_MIN: acc = std::min(acc, v); break;
    }
  }
  if (op == PSTATE_AVG) acc = is_float(t) ? acc / world : std::trunc(acc / world);
  return acc;
}

inline double tolerance(pstate_dtype_t t, double expected) {
  double a = std::fabs(expected);
  switch (t) {
    case PSTATE_FLOAT16: return 4e-3 * a + 4e-3;
    case PSTATE_BFLOAT16: return 3e-2 * a + 3e-2;
    case PSTATE_FLOAT32: return 1e-5 * a + 1e-6;
    case PSTATE_FLOAT64: return 1e-12 * a + 1e-12;
    case PSTATE_FP8_E4M3: return 0.13 * a + 0.1;
    case PSTATE_FP8_E5M2: return 0.26 * a + 0.1;
    default: return 0.0;
  }
}

// Host bytes of `count` elements: element i = value(i).
template <typename Fn>
std::vector<uint8_t> make_bytes(pstate_dtype_t t, size_t count, Fn value) {
  std::vector<uint8_t> bytes(count * size_of(t));
  for (size_t i = 0; i < count; ++i) encode(t, value(i), bytes.data() + i * size_of(t));
  return bytes;
}

// "" when got[i] matches expected(i) for every i, else a description of the first mismatch.
template <typename Fn>
std::string compare(pstate_dtype_t t, const std::vector<uint8_t> &got, size_t count, Fn expected) {
  for (size_t i = 0; i < count; ++i) {
    double want = expected(i);
    double have = decode(t, got.data() + i * size_of(t));
    if (std::fabs(have - want) > tolerance(t, want)) {
      char text[160];
      std::snprintf(text, sizeof text, "element %zu is %g, expected %g", i, have, want);
      return text;
    }
  }
  return "";
}

// Counts checks and prints failures (one line each, with the rank).
struct Tally {
  int rank = 0;
  int passed = 0;
  int failed = 0;
  void expect(bool ok, const std::string &what, const std::string &detail = "") {
    if (ok) {
      ++passed;
      return;
    }
    ++failed;
    std::fprintf(stderr, "[rank %d] FAIL %s%s%s\n", rank, what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  }
};

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- the shared checks ------------------------------------------------------------------------

[[noreturn]] inline void die(int rank, const std::string &what) {
  std::fprintf(stderr, "[rank %d] FATAL %s\n", rank, what.c_str());
  std::fflush(stderr);
  std::_Exit(2);
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) ::gpu_check::die(-1, std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)
#define NCK(call)                                                                                  \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) ::gpu_check::die(-1, std::string(#call) + ": " + ncclGetErrorString(r_)); \
  } while (0)

// A failed pstate call: its status and message.
struct OpError {
  pstate_status_t status;
  std::string message;
};

// The device operations under test, as the C API orders their arguments. Each throws OpError.
struct DeviceOps {
  std::function<void(const void *, void *, size_t, pstate_dtype_t, pstate_reduce_op_t, void *)> all_reduce;
  std::function<void(const void *, void *, size_t, pstate_dtype_t, void *)> all_gather;
  std::function<void(const void *, void *, size_t, pstate_dtype_t, pstate_reduce_op_t, void *)> reduce_scatter;
  std::function<void(void *, size_t, pstate_dtype_t, int, void *)> broadcast;
  std::function<void(const void *, void *, size_t, pstate_dtype_t, int, void *)> gather;
  std::function<void(const void *, void *, size_t, pstate_dtype_t, void *)> all_to_all;
  std::function<void(const void *, void *, size_t, pstate_dtype_t, pstate_reduce_op_t, int, void *)> reduce;
  std::function<void(const void *, void *, size_t, pstate_dtype_t, int, void *)> scatter;
  std::function<void(const void *, void *, const size_t *, pstate_dtype_t, void *)> all_gatherv;
  std::function<void(const void *, void *, const size_t *, pstate_dtype_t, pstate_reduce_op_t, void *)> reduce_scatterv;
  std::function<void(const void *, size_t, pstate_dtype_t, int, void *)> send;
  std::function<void(void *, size_t, pstate_dtype_t, int, void *)> recv;
  std::function<void()> barrier;
};

constexpr size_t kCount = 1031;  // elements per block: odd, so no size is a lucky multiple

// One rank's state for the checks. send/recv hold world * kCount elements of 8 bytes.
struct Case {
  int rank = 0;
  int world = 1;
  DeviceOps ops;
  cudaStream_t stream = nullptr;
  void *send = nullptr;
  void *recv = nullptr;
  bool fp8_reduce = false;  // the GPU can reduce fp8 (compute capability >= 9.0)
  Tally tally;
  // Memory of another device, freed by free_deferred() once this rank enqueued its last
  // collective: cudaFree synchronizes the memory's device, and with ranks as threads that device
  // may hold a peer's collective that waits for this rank (NCCL's known cudaFree deadlock; found
  // by the devsim stand-ins).
  std::vector<void *> deferred;
  void free_deferred() {
    for (void *p : deferred) CK(cudaFree(p));
    deferred.clear();
  }
  std::string name(const char *op, pstate_dtype_t t, const char *rop = nullptr) const {
    return std::string(op) + " " + pstate_dtype_name(t) + (rop ? std::string(" ") + rop : "") + " (world " +
           std::to_string(world) + ")";
  }
};

inline void upload(const Case &k, void *dev, const std::vector<uint8_t> &host) {
  CK(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, k.stream));
}

inline std::vector<uint8_t> download(const Case &k, const void *dev, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  CK(cudaMemcpyAsync(host.data(), dev, bytes, cudaMemcpyDeviceToHost, k.stream));
  CK(cudaStreamSynchronize(k.stream));
  return host;
}

// Runs fn (which returns "" or a mismatch); an OpError is a failed check.
inline void run_case(Case &k, const std::string &name, const std::function<std::string()> &fn) {
  try {
    std::string mismatch = fn();
    k.tally.expect(mismatch.empty(), name, mismatch);
  } catch (const OpError &e) {
    k.tally.expect(false, name, std::string(pstate_status_string(e.status)) + ": " + e.message);
  }
}

// fn must fail with `status` and a message containing `part`.
inline void expect_error(Case &k, const std::string &name, pstate_status_t status, const char *part,
                         const std::function<void()> &fn) {
  try {
    fn();
    k.tally.expect(false, name, "no error");
  } catch (const OpError &e) {
    bool ok = e.status == status && e.message.find(part) != std::string::npos;
    k.tally.expect(ok, name, std::string(pstate_status_string(e.status)) + ": " + e.message);
  }
}

inline std::string check_reduction(Case &k, bool scatter, pstate_dtype_t t, pstate_reduce_op_t op) {
  const size_t n = static_cast<size_t>(k.world);
  const size_t in_count = scatter ? n * kCount : kCount;
  upload(k, k.send, make_bytes(t, in_count, [&](size_t i) { return input_value(op, k.rank, i, t); }));
  if (scatter)
    k.ops.reduce_scatter(k.send, k.recv, kCount, t, op, k.stream);
  else
    k.ops.all_reduce(k.send, k.recv, kCount, t, op, k.stream);
  size_t offset = scatter ? static_cast<size_t>(k.rank) * kCount : 0;
  return compare(t, download(k, k.recv, kCount * size_of(t)), kCount,
                 [&](size_t i) { return reduced_value(op, k.world, offset + i, t); });
}

// Element j of a buffer made of one kCount block per rank, block q from rank q.
inline double gathered_value(size_t j, pstate_dtype_t t) {
  return input_value(PSTATE_SUM, static_cast<int>(j / kCount), j % kCount, t);
}

inline std::string check_all_gather(Case &k, pstate_dtype_t t) {
  upload(k, k.send, make_bytes(t, kCount, [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); }));
  k.ops.all_gather(k.send, k.recv, kCount, t, k.stream);
  return compare(t, download(k, k.recv, k.world * kCount * size_of(t)), k.world * kCount,
                 [&](size_t j) { return gathered_value(j, t); });
}

inline std::string check_broadcast(Case &k, pstate_dtype_t t) {
  const int src = k.world - 1;
  upload(k, k.recv, make_bytes(t, kCount, [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); }));
  k.ops.broadcast(k.recv, kCount, t, src, k.stream);
  return compare(t, download(k, k.recv, kCount * size_of(t)), kCount,
                 [&](size_t i) { return input_value(PSTATE_SUM, src, i, t); });
}

inline std::string check_gather(Case &k, pstate_dtype_t t) {
  const int dst = 0;
  upload(k, k.send, make_bytes(t, kCount, [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); }));
  k.ops.gather(k.send, k.rank == dst ? k.recv : nullptr, kCount, t, dst, k.stream);
  if (k.rank != dst) {
    CK(cudaStreamSynchronize(k.stream));
    return "";
  }
  return compare(t, download(k, k.recv, k.world * kCount * size_of(t)), k.world * kCount,
                 [&](size_t j) { return gathered_value(j, t); });
}

// reduce to the last rank; recv is given there only.
inline std::string check_reduce(Case &k, pstate_dtype_t t, pstate_reduce_op_t op) {
  const int root = k.world - 1;
  upload(k, k.send, make_bytes(t, kCount, [&](size_t i) { return input_value(op, k.rank, i, t); }));
  k.ops.reduce(k.send, k.rank == root ? k.recv : nullptr, kCount, t, op, root, k.stream);
  if (k.rank != root) {
    CK(cudaStreamSynchronize(k.stream));
    return "";
  }
  return compare(t, download(k, k.recv, kCount * size_of(t)), kCount,
                 [&](size_t i) { return reduced_value(op, k.world, i, t); });
}

// scatter from rank 0 (the root's send holds block q for rank q); send is given there only.
inline std::string check_scatter(Case &k, pstate_dtype_t t) {
  const int root = 0;
  if (k.rank == root)
    upload(k, k.send, make_bytes(t, k.world * kCount, [&](size_t j) { return gathered_value(j, t); }));
  k.ops.scatter(k.rank == root ? k.send : nullptr, k.recv, kCount, t, root, k.stream);
  return compare(t, download(k, k.recv, kCount * size_of(t)), kCount,
                 [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); });
}

// The counts of the v-collectives: uneven, every third rank empty (rank 1, 4, ...), so an NCCL
// group holds broadcasts / reduces of different sizes and skips the empty parts; the sum stays
// within the world * kCount elements of send and recv.
inline std::vector<size_t> v_counts(int world) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (size_t q = 0; q < counts.size(); ++q) counts[q] = q % 3 == 1 ? 0 : kCount - 7 * q;
  return counts;
}
inline size_t v_offset(const std::vector<size_t> &counts, int rank) {
  size_t off = 0;
  for (int q = 0; q < rank; ++q) off += counts[static_cast<size_t>(q)];
  return off;
}

// all_gatherv: rank q's part is input_value(q, i); recv holds every part packed in rank order.
inline std::string check_all_gatherv(Case &k, pstate_dtype_t t) {
  const auto counts = v_counts(k.world);
  const size_t mine = counts[static_cast<size_t>(k.rank)], total = v_offset(counts, k.world);
  upload(k, k.send, make_bytes(t, mine, [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); }));
  k.ops.all_gatherv(mine != 0 ? k.send : nullptr, k.recv, counts.data(), t, k.stream);
  return compare(t, download(k, k.recv, total * size_of(t)), total, [&](size_t j) {
    int q = 0;
    while (j >= v_offset(counts, q + 1)) ++q;
    return input_value(PSTATE_SUM, q, j - v_offset(counts, q), t);
  });
}

// reduce_scatterv: rank r gets the reduction of elements offset(r) .. offset(r) + counts[r] - 1.
inline std::string check_reduce_scatterv(Case &k, pstate_dtype_t t, pstate_reduce_op_t op) {
  const auto counts = v_counts(k.world);
  const size_t mine = counts[static_cast<size_t>(k.rank)], total = v_offset(counts, k.world);
  const size_t offset = v_offset(counts, k.rank);
  upload(k, k.send, make_bytes(t, total, [&](size_t i) { return input_value(op, k.rank, i, t); }));
  k.ops.reduce_scatterv(k.send, mine != 0 ? k.recv : nullptr, counts.data(), t, op, k.stream);
  if (mine == 0) {
    CK(cudaStreamSynchronize(k.stream));
    return "";
  }
  return compare(t, download(k, k.recv, mine * size_of(t)), mine,
                 [&](size_t i) { return reduced_value(op, k.world, offset + i, t); });
}

inline std::string check_all_to_all(Case &k, pstate_dtype_t t) {
  // Block j of rank q's send holds input_value(q, j * kCount + i); block q of rank r's recv
  // must then hold input_value(q, r * kCount + i).
  upload(k, k.send, make_bytes(t, k.world * kCount, [&](size_t j) { return input_value(PSTATE_SUM, k.rank, j, t); }));
  k.ops.all_to_all(k.send, k.recv, kCount, t, k.stream);
  return compare(t, download(k, k.recv, k.world * kCount * size_of(t)), k.world * kCount, [&](size_t j) {
    return input_value(PSTATE_SUM, static_cast<int>(j / kCount), static_cast<size_t>(k.rank) * kCount + j % kCount, t);
  });
}

inline std::string check_send_recv_ring(Case &k, pstate_dtype_t t) {
  const int next = (k.rank + 1) % k.world, prev = (k.rank + k.world - 1) % k.world;
  upload(k, k.send, make_bytes(t, kCount, [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); }));
  // Even ranks send first, odd ranks receive first: no cycle of sends waiting for receives.
  if (k.rank % 2 == 0) {
    k.ops.send(k.send, kCount, t, next, k.stream);
    k.ops.recv(k.recv, kCount, t, prev, k.stream);
  } else {
    k.ops.recv(k.recv, kCount, t, prev, k.stream);
    k.ops.send(k.send, kCount, t, next, k.stream);
  }
  return compare(t, download(k, k.recv, kCount * size_of(t)), kCount,
                 [&](size_t i) { return input_value(PSTATE_SUM, prev, i, t); });
}

// Every operation x dtype (x reduce op), in place too, and a barrier. All ranks run the same
// sequence, so a failed comparison never desynchronizes them.
inline void check_operations(Case &k) {
  for (pstate_dtype_t t : kDtypes) {
    for (pstate_reduce_op_t op : kOps) {
      const char *rop = pstate_reduce_op_name(op);
      if (is_fp8(t) && !k.fp8_reduce) {
        expect_error(k, k.name("all_reduce", t, rop), PSTATE_ERR_UNSUPPORTED, "fp8",
                     [&] { k.ops.all_reduce(k.send, k.recv, kCount, t, op, k.stream); });
        continue;
      }
      run_case(k, k.name("all_reduce", t, rop), [&] { return check_reduction(k, false, t, op); });
      run_case(k, k.name("reduce_scatter", t, rop), [&] { return check_reduction(k, true, t, op); });
      run_case(k, k.name("reduce", t, rop), [&] { return check_reduce(k, t, op); });
      run_case(k, k.name("reduce_scatterv", t, rop), [&] { return check_reduce_scatterv(k, t, op); });
    }
    run_case(k, k.name("all_gather", t), [&] { return check_all_gather(k, t); });
    run_case(k, k.name("broadcast", t), [&] { return check_broadcast(k, t); });
    run_case(k, k.name("gather", t), [&] { return check_gather(k, t); });
    run_case(k, k.name("all_to_all", t), [&] { return check_all_to_all(k, t); });
    run_case(k, k.name("scatter", t), [&] { return check_scatter(k, t); });
    run_case(k, k.name("all_gatherv", t), [&] { return check_all_gatherv(k, t); });
    if (k.world > 1) run_case(k, k.name("send/recv ring", t), [&] { return check_send_recv_ring(k, t); });
  }
  run_case(k, "all_reduce float32 sum in place", [&] {
    const pstate_dtype_t t = PSTATE_FLOAT32;
    upload(k, k.recv, make_bytes(t, kCount, [&](size_t i) { return input_value(PSTATE_SUM, k.rank, i, t); }));
    k.ops.all_reduce(k.recv, k.recv, kCount, t, PSTATE_SUM, k.stream);
    return compare(t, download(k, k.recv, kCount * 4), kCount,
                   [&](size_t i) { return reduced_value(PSTATE_SUM, k.world, i, t); });
  });
  run_case(k, "barrier", [&] {
    k.ops.barrier();
    return std::string();
  });
}

// Argument errors every front end must give (no communication happens: all ranks fail alike).
inline void check_argument_errors(Case &k) {
  const pstate_dtype_t f32 = PSTATE_FLOAT32;
  std::vector<float> pageable(16, 1.0f);
  expect_error(k, "pageable host pointer", PSTATE_ERR_INVALID_ARGUMENT, "host memory",
               [&] { k.ops.all_reduce(pageable.data(), k.recv, 16, f32, PSTATE_SUM, k.stream); });
  // Each buffer is checked: recv too, and the one buffer of an in-place call (checked once).
  expect_error(k, "pageable host pointer as recv", PSTATE_ERR_INVALID_ARGUMENT, "host memory",
               [&] { k.ops.all_reduce(k.send, pageable.data(), 16, f32, PSTATE_SUM, k.stream); });
  expect_error(k, "pageable host pointer in place", PSTATE_ERR_INVALID_ARGUMENT, "host memory",
               [&] { k.ops.all_reduce(pageable.data(), pageable.data(), 16, f32, PSTATE_SUM, k.stream); });
  void *pinned = nullptr;
  CK(cudaMallocHost(&pinned, 64));
  expect_error(k, "pinned host pointer", PSTATE_ERR_INVALID_ARGUMENT, "host memory",
               [&] { k.ops.all_gather(k.send, pinned, 16, f32, k.stream); });
  CK(cudaFreeHost(pinned));
  int devices = 0, current = 0;
  CK(cudaGetDeviceCount(&devices));
  CK(cudaGetDevice(&current));
  if (devices > 1) {
    void *elsewhere = nullptr;
    CK(cudaSetDevice((current + 1) % devices));
    CK(cudaMalloc(&elsewhere, 64));
    CK(cudaSetDevice(current));
    expect_error(k, "pointer on another device", PSTATE_ERR_INVALID_ARGUMENT, "is on CUDA device",
                 [&] { k.ops.broadcast(elsewhere, 16, f32, 0, k.stream); });
    k.deferred.push_back(elsewhere);  // not now: see Case::deferred
  }
  expect_error(k, "NULL buffer with count > 0", PSTATE_ERR_INVALID_ARGUMENT, "NULL",
               [&] { k.ops.all_reduce(nullptr, k.recv, 16, f32, PSTATE_SUM, k.stream); });
  run_case(k, "NULL buffers with count 0", [&] {
    k.ops.all_reduce(nullptr, nullptr, 0, f32, PSTATE_SUM, k.stream);
    return std::string();
  });
  expect_error(k, "broadcast from a rank outside the group", PSTATE_ERR_INVALID_ARGUMENT, "",
               [&] { k.ops.broadcast(k.send, 16, f32, k.world, k.stream); });
  run_case(k, "managed memory all_reduce", [&] {
    float *managed = nullptr;
    CK(cudaMallocManaged(&managed, 16 * sizeof(float)));
    for (int i = 0; i < 16; ++i) managed[i] = static_cast<float>(k.rank + 1);
    k.ops.all_reduce(managed, managed, 16, f32, PSTATE_SUM, k.stream);
    CK(cudaStreamSynchronize(k.stream));
    float want = static_cast<float>(k.world * (k.world + 1) / 2);
    std::string bad = managed[15] == want ? "" : "got " + std::to_string(managed[15]);
    CK(cudaFree(managed));
    return bad;
  });
}

// A CUDA graph of 100 in-place all_reduces (SGLang's captured decode step in miniature):
// begin_capture() enters capture mode and returns the capture stream; each call is made by
// `reduce(slice, count, stream)` with stream NULL (= the capture stream); the graph is then
// replayed twice with new inputs and every slice compared with the sum over ranks.
inline void check_graph(Case &k, const std::function<cudaStream_t()> &begin_capture,
                        const std::function<void()> &end_capture,
                        const std::function<void(float *, size_t, void *)> &reduce, cudaStreamCaptureMode mode) {
  constexpr int kCalls = 100;
  constexpr size_t kSlice = 256;  // floats per all_reduce
  float *slices = nullptr;
  CK(cudaMalloc(&slices, kCalls * kSlice * sizeof(float)));
  auto input = [&](int replay, int rank, size_t j) {  // j indexes the whole buffer
    return static_cast<float>((rank + 1) * (replay + 2) + static_cast<int>(j / kSlice) + static_cast<int>(j % 5));
  };
  cudaStream_t cs = nullptr;
  try {
    cs = begin_capture();
  } catch (const OpError &e) {
    k.tally.expect(false, "graph capture begin", e.message);
    CK(cudaFree(slices));
    return;
  }
  cudaGraph_t graph = nullptr;
  CK(cudaStreamBeginCapture(cs, mode));
  bool recorded = true;
  for (int c = 0; c < kCalls && recorded; ++c) {
    try {
      reduce(slices + c * kSlice, kSlice, nullptr);
    } catch (const OpError &e) {
      k.tally.expect(false, "all_reduce while capturing", e.message);
      recorded = false;
    }
  }
  CK(cudaStreamEndCapture(cs, &graph));
  run_case(k, "graph capture end", [&] {
    end_capture();
    return std::string();
  });
  if (!recorded) die(k.rank, "capture failed: the ranks are out of step now");
  cudaGraphExec_t exec = nullptr;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    std::vector<float> host(kCalls * kSlice);
    for (size_t j = 0; j < host.size(); ++j) host[j] = input(replay, k.rank, j);
    CK(cudaMemcpyAsync(slices, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, cs));
    CK(cudaGraphLaunch(exec, cs));
    CK(cudaMemcpyAsync(host.data(), slices, host.size() * sizeof(float), cudaMemcpyDeviceToHost, cs));
    CK(cudaStreamSynchronize(cs));
    std::string bad;
    for (size_t j = 0; j < host.size() && bad.empty(); ++j) {
      float want = 0;
      for (int r = 0; r < k.world; ++r) want += input(replay, r, j);
      if (host[j] != want)
        bad = "element " + std::to_string(j) + " is " + std::to_string(host[j]) + ", expected " + std::to_string(want);
    }
    k.tally.expect(bad.empty(),
                   "graph of 100 all_reduces, replay " + std::to_string(replay) + " (world " + std::to_string(k.world) + ")",
                   bad);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaFree(slices));
}

// ---- per-call cost against raw NCCL --------------------------------------------------------------

struct BenchRow {
  size_t bytes = 0;
  double pstate_gpu_us = 0, nccl_gpu_us = 0, pstate_call_us = 0, nccl_call_us = 0;
};

// float32 SUM all_reduce at 8 B, 1 MiB and 256 MiB through `pstate_call(send, recv, count)` and
// through ncclAllReduce on `raw`, both on k.stream: median of 200 calls (after 5 warm-ups) of
// the GPU time between CUDA events around the call and of the host time of the call itself.
// GPU_CHECK_BENCH_MAX_BYTES and GPU_CHECK_BENCH_ITERS shrink it (run.sh --devsim: the stand-ins
// measure nothing, and 256 MiB host copies would only take time).
inline int bench_iters() {
  const char *v = std::getenv("GPU_CHECK_BENCH_ITERS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 200;
}

inline std::vector<BenchRow> bench(Case &k, ncclComm_t raw, const std::function<void(void *, void *, size_t)> &pstate_call) {
  const int kIters = bench_iters(), kWarmup = 5;
  const char *max_env = std::getenv("GPU_CHECK_BENCH_MAX_BYTES");
  const size_t max_bytes = max_env != nullptr ? std::strtoull(max_env, nullptr, 10) : size_t{256} << 20;
  std::vector<size_t> sizes;
  for (size_t s : {size_t{8}, size_t{1} << 20, size_t{256} << 20})
    if (s <= max_bytes || s == 8) sizes.push_back(s);
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, sizes.back()));
  CK(cudaMalloc(&b, sizes.back()));
  CK(cudaMemset(a, 0, sizes.back()));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  auto measure = [&](const std::function<void(size_t)> &call, size_t count, double *gpu_us, double *call_us) {
    std::vector<double> gpu, host;
    for (int i = 0; i < kWarmup + kIters; ++i) {
      CK(cudaEventRecord(start, k.stream));
      auto t0 = std::chrono::steady_clock::now();
      call(count);
      auto t1 = std::chrono::steady_clock::now();
      CK(cudaEventRecord(stop, k.stream));
      CK(cudaEventSynchronize(stop));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, start, stop));
      if (i < kWarmup) continue;
      gpu.push_back(ms * 1000.0);
      host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    *gpu_us = median(gpu);
    *call_us = median(host);
  };
  std::vector<BenchRow> rows;
  for (size_t bytes : sizes) {
    BenchRow row;
    row.bytes = bytes;
    size_t count = bytes / sizeof(float);
    measure([&](size_t n) { pstate_call(a, b, n); }, count, &row.pstate_gpu_us, &row.pstate_call_us);
    measure([&](size_t n) { NCK(ncclAllReduce(a, b, n, ncclFloat32, ncclSum, raw, k.stream)); }, count,
            &row.nccl_gpu_us, &row.nccl_call_us);
    rows.push_back(row);
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  CK(cudaFree(a));
  CK(cudaFree(b));
  return rows;
}

// A markdown table with a title line naming what, where and how.
inline std::string bench_table(const char *what, int world, const std::vector<BenchRow> &rows) {
  int device = 0, nccl_version = 0;
  CK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, device));
  NCK(ncclGetVersion(&nccl_version));
  char line[512];
  std::string text;
  std::snprintf(line, sizeof line, "%s vs raw ncclAllReduce, float32 sum, world %d, %s, NCCL %d, median of %d\n\n",
                what, world, prop.name, nccl_version, bench_iters());
  text += line;
  text += "| size | pstate GPU us | NCCL GPU us | pstate call us | NCCL call us | call overhead us |\n";
  text += "| ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const BenchRow &r : rows) {
    bool mib = r.bytes >= (size_t{1} << 20);
    std::snprintf(line, sizeof line, "| %.0f %s | %.2f | %.2f | %.2f | %.2f | %+.2f |\n",
                  mib ? r.bytes / double(size_t{1} << 20) : double(r.bytes), mib ? "MiB" : "B", r.pstate_gpu_us,
                  r.nccl_gpu_us, r.pstate_call_us, r.nccl_call_us, r.pstate_call_us - r.nccl_call_us);
    text += line;
  }
  return text;
}

inline void write_file(const char *dir, const std::string &name, const std::string &text) {
  if (dir == nullptr || dir[0] == '\0') return;
  std::string path = std::string(dir) + "/" + name;
  if (FILE *f = std::fopen(path.c_str(), "w")) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
}

}  // namespace gpu_check
