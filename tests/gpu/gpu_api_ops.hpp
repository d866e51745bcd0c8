// gpu_api_ops.hpp — the public C API as gpu_check's DeviceOps, and the tensor-dict check on a
// CUDA context: shared by the programs that drive pstate through its C API (gpu_api_check.cpp at
// world 1 / one GPU per rank, gpu_multi_check.cpp with several ranks on one GPU), so both check
// the same things the same way.
#pragma once

#include "gpu_check.hpp"

#include <string>
#include <vector>

namespace gpu_check {

// Any status but PSTATE_OK becomes an OpError carrying pstate_last_error().
inline void ps_check(pstate_status_t s) {
  if (s != PSTATE_OK) throw OpError{s, pstate_last_error()};
}

inline DeviceOps ops_of(pstate_group_t *g) {
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
  o.reduce = [g](const void *s, void *r, size_t n, pstate_dtype_t t, pstate_reduce_op_t op, int root, void *st) {
    ps_check(pstate_reduce(g, s, r, n, t, op, root, st));
  };
  o.scatter = [g](const void *s, void *r, size_t n, pstate_dtype_t t, int root, void *st) {
    ps_check(pstate_scatter(g, s, r, n, t, root, st));
  };
  o.all_gatherv = [g](const void *s, void *r, const size_t *counts, pstate_dtype_t t, void *st) {
    ps_check(pstate_all_gatherv(g, s, r, counts, t, st));
  };
  o.reduce_scatterv = [g](const void *s, void *r, const size_t *counts, pstate_dtype_t t, pstate_reduce_op_t op,
                          void *st) { ps_check(pstate_reduce_scatterv(g, s, r, counts, t, op, st)); };
  o.send = [g](const void *b, size_t n, pstate_dtype_t t, int dst, void *st) {
    ps_check(pstate_send(g, b, n, t, dst, st));
  };
  o.recv = [g](void *b, size_t n, pstate_dtype_t t, int src, void *st) { ps_check(pstate_recv(g, b, n, t, src, st)); };
  o.barrier = [g] { ps_check(pstate_barrier(g)); };
  return o;
}

// ---- tensor dicts ------------------------------------------------------------------------------

struct DictEntry {
  const char *name;
  pstate_dtype_t dtype;
  std::vector<int64_t> shape;
  pstate_device_t device;
};

// CUDA and CPU tensors, an empty one, a scalar, a CPU tensor small enough to travel inside the
// metadata message and one too large for it.
inline const std::vector<DictEntry> &dict_entries() {
  static const std::vector<DictEntry> entries = {
      {"logits", PSTATE_FLOAT32, {3, 5}, PSTATE_DEVICE_CUDA}, {"empty", PSTATE_INT64, {0, 4}, PSTATE_DEVICE_CUDA},
      {"seq_lens", PSTATE_INT32, {4}, PSTATE_DEVICE_CPU},     {"big_cpu", PSTATE_UINT8, {100000}, PSTATE_DEVICE_CPU},
      {"scale", PSTATE_BFLOAT16, {}, PSTATE_DEVICE_CUDA},     {"hidden", PSTATE_FLOAT16, {70000}, PSTATE_DEVICE_CUDA},
  };
  return entries;
}

inline size_t entry_bytes(const DictEntry &e) {
  size_t n = pstate_dtype_size(e.dtype);
  for (int64_t x : e.shape) n *= static_cast<size_t>(x);
  return n;
}

inline uint8_t dict_byte(int sender, size_t tensor, size_t i) {
  return static_cast<uint8_t>(sender * 29 + static_cast<int>(tensor) * 11 + static_cast<int>(i % 239));
}

// The sender's side: every tensor's memory filled with its pattern.
struct SentDict {
  std::vector<pstate_tensor_t> tensors;
  std::vector<void *> memory;
  explicit SentDict(int sender) {
    const auto &entries = dict_entries();
    for (size_t t = 0; t < entries.size(); ++t) {
      const DictEntry &e = entries[t];
      size_t bytes = entry_bytes(e);
      std::vector<uint8_t> host(bytes);
      for (size_t i = 0; i < bytes; ++i) host[i] = dict_byte(sender, t, i);
      void *p = nullptr;
      if (bytes > 0 && e.device == PSTATE_DEVICE_CUDA) {
        CK(cudaMalloc(&p, bytes));
        CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
      } else if (bytes > 0) {
        p = std::malloc(bytes);
        std::memcpy(p, host.data(), bytes);
      }
      memory.push_back(p);
      pstate_tensor_t x = PSTATE_TENSOR_INIT;
      x.name = e.name;
      x.dtype = e.dtype;
      x.ndim = static_cast<int>(e.shape.size());
      x.shape = e.shape.empty() ? nullptr : e.shape.data();
      x.data = p;
      x.device = e.device;
      tensors.push_back(x);
    }
  }
  ~SentDict() {
    for (size_t t = 0; t < memory.size(); ++t) {
      if (memory[t] == nullptr) continue;
      if (tensors[t].device == PSTATE_DEVICE_CUDA)
        cudaFree(memory[t]);
      else
        std::free(memory[t]);
    }
  }
};

// The receiving side: what the allocation callback was asked for, and the memory it gave.
struct ReceivedDict {
  struct Tensor {
    std::string name;
    pstate_dtype_t dtype;
    std::vector<int64_t> shape;
    size_t bytes;
    pstate_device_t device;
    void *data;
  };
  std::vector<Tensor> got;
  int fail_at = -1;  // the callback returns NULL for this tensor index

  static void *alloc(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape, size_t bytes,
                     pstate_device_t device) {
    auto *self = static_cast<ReceivedDict *>(user);
    void *p = nullptr;
    if (static_cast<int>(self->got.size()) != self->fail_at && bytes > 0) {
      if (device == PSTATE_DEVICE_CUDA)
        CK(cudaMalloc(&p, bytes));
      else
        p = std::malloc(bytes);
    }
    self->got.push_back({name, dtype, std::vector<int64_t>(shape, shape + ndim), bytes, device, p});
    return p;
  }
  ~ReceivedDict() {
    for (const Tensor &t : got) {
      if (t.data == nullptr) continue;
      if (t.device == PSTATE_DEVICE_CUDA)
        cudaFree(t.data);
      else
        std::free(t.data);
    }
  }

  // "" when this is sender's dict, after the work on `stream` is done.
  std::string verify(int sender, cudaStream_t stream) const {
    CK(cudaStreamSynchronize(stream));
    const auto &entries = dict_entries();
    if (got.size() != entries.size()) return "received " + std::to_string(got.size()) + " tensors";
    for (size_t t = 0; t < entries.size(); ++t) {
      const DictEntry &e = entries[t];
      const Tensor &g = got[t];
      if (g.name != e.name || g.dtype != e.dtype || g.shape != e.shape || g.device != e.device ||
          g.bytes != entry_bytes(e))
        return "tensor " + std::to_string(t) + " arrived as '" + g.name + "' with another dtype/shape/device/size";
      std::vector<uint8_t> host(g.bytes);
      if (g.bytes > 0 && g.device == PSTATE_DEVICE_CUDA)
        CK(cudaMemcpy(host.data(), g.data, g.bytes, cudaMemcpyDeviceToHost));
      else if (g.bytes > 0)
        std::memcpy(host.data(), g.data, g.bytes);
      for (size_t i = 0; i < g.bytes; ++i)
        if (host[i] != dict_byte(sender, t, i)) return "tensor '" + g.name + "' byte " + std::to_string(i) + " differs";
    }
    return "";
  }
};

inline void check_tensor_dicts(Case &k, pstate_group_t *g) {
  const int root = k.world - 1;
  run_case(k, "broadcast_tensor_dict, CUDA and CPU tensors (world " + std::to_string(k.world) + ")", [&] {
    if (k.rank == root) {
      SentDict dict(root);
      ps_check(
          pstate_broadcast_tensor_dict(g, dict.tensors.data(), dict.tensors.size(), root, nullptr, nullptr, k.stream));
      CK(cudaStreamSynchronize(k.stream));  // the dict's memory is freed below
      return std::string();
    }
    ReceivedDict got;
    ps_check(pstate_broadcast_tensor_dict(g, nullptr, 0, root, ReceivedDict::alloc, &got, k.stream));
    return got.verify(root, k.stream);
  });
  if (k.world < 2) return;
  run_case(k, "send/recv_tensor_dict 0 -> 1", [&] {
    if (k.rank == 0) {
      SentDict dict(0);
      ps_check(pstate_send_tensor_dict(g, dict.tensors.data(), dict.tensors.size(), 1, k.stream));
      CK(cudaStreamSynchronize(k.stream));
      return std::string();
    }
    if (k.rank != 1) return std::string();
    ReceivedDict got;
    ps_check(pstate_recv_tensor_dict(g, 0, ReceivedDict::alloc, &got, k.stream));
    return got.verify(0, k.stream);
  });
  // Rank 1 cannot allocate a CUDA tensor: every rank fails, nothing moves, the group stays in step.
  expect_error(k, "broadcast_tensor_dict with a failed CUDA allocation on rank 1", PSTATE_ERR_NO_MEMORY, "", [&] {
    if (k.rank == 0) {
      SentDict dict(0);
      ps_check(
          pstate_broadcast_tensor_dict(g, dict.tensors.data(), dict.tensors.size(), 0, nullptr, nullptr, k.stream));
      return;
    }
    ReceivedDict got;
    got.fail_at = k.rank == 1 ? 0 : -1;
    ps_check(pstate_broadcast_tensor_dict(g, nullptr, 0, 0, ReceivedDict::alloc, &got, k.stream));
  });
  // A tensor marked CPU whose data is device memory: refused by the sender, on every rank.
  expect_error(k, "broadcast_tensor_dict of a CPU-marked tensor in device memory", PSTATE_ERR_INVALID_ARGUMENT,
               k.rank == 0 ? "CUDA device memory" : "refused", [&] {
                 if (k.rank == 0) {
                   SentDict dict(0);
                   dict.tensors[2].data = k.send;
                   ps_check(pstate_broadcast_tensor_dict(g, dict.tensors.data(), dict.tensors.size(), 0, nullptr,
                                                         nullptr, k.stream));
                   return;
                 }
                 ReceivedDict got;
                 ps_check(pstate_broadcast_tensor_dict(g, nullptr, 0, 0, ReceivedDict::alloc, &got, k.stream));
               });
  run_case(k, "barrier after failed tensor dicts", [&] {
    ps_check(pstate_barrier(g));
    return std::string();
  });
}

}  // namespace gpu_check
