// tensor_dict_sliced.cpp — pipeline tensor dicts sent as slices and all-gathered on arrival
// (SGLang's and vLLM's all_gather_group of send_tensor_dict / recv_tensor_dict).
//
// Between two pipeline stages each attention-TP rank of the sender holds the same activations, so
// sending them whole from every rank moves ag-size copies; instead each sender rank sends only its
// 1/S slice (S = the size of its ag group, the slice at its rank in ag) and the receiving stage
// all-gathers the slices over its own ag group. A tensor whose element count does not divide by S
// (or S = 1) is sent whole.
//
// Sender: one plan object (send_object: S, its ag rank, per tensor whether it is sliced and its
// full shape), then send_tensor_dict of the dict with each sliced tensor replaced by its 1-D slice.
// Receiver: recv_object(plan), then recv_tensor_dict through an allocator that, for a sliced
// tensor, asks the caller's alloc for the FULL tensor (full shape and bytes) and receives the
// slice at this rank's place in it (ag rank r: offset r * slice); then every rank of ag agrees
// (below) that all received the same dict, and each sliced tensor is all-gathered
// in place over ag (NCCL's form: send = recv + r * slice; on the device communicator for CUDA
// tensors, enqueued on the stream). A rank that failed (NO_MEMORY, a plan whose S or sender slot
// does not match its ag: MISMATCH) makes every rank of ag return an error and nothing is gathered.
// The agreement is an all_gather over ag (its own kind, kSlicedDictAgree) of "failed" and a hash
// of the dict each rank received (names, dtypes, devices, full shapes, sliced or not, in order):
// slices of different dicts (two senders with different keys of the same shape) are never
// gathered into one tensor; every rank of ag gets MISMATCH naming both hashes and its keys.
#include "common/struct_io.hpp"
#include "group/context.hpp"
#include "group/tensor_dict.hpp"

#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

namespace pstate {
namespace {

constexpr int64_t kPlanMagic = 0x70746473;  // "ptds"

struct SlicedTensor {  // the receiver's record of one tensor of the plan
  bool sliced = false;
  std::vector<int64_t> shape;
};

struct Plan {
  int64_t ag_size = 1;
  int64_t sender_ag_rank = 0;
  std::vector<SlicedTensor> tensors;
};

// Elements of a tensor whose description is sane, or -1 (then it is sent whole and
// send_tensor_dict refuses it with its own message).
int64_t elements_of(const pstate_tensor_t &t) {
  if (t.ndim < 0 || t.ndim > PSTATE_TENSOR_MAX_NDIM || (t.ndim > 0 && t.shape == nullptr)) return -1;
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0 || (t.shape[d] > 0 && n > INT64_MAX / t.shape[d])) return -1;
    n *= t.shape[d];
  }
  return n;
}

// What the receiver's allocator trampoline needs.
struct Receiving {
  TensorAllocator user;
  const Plan *plan = nullptr;
  int ag_rank = 0;
  bool gather = false;  // the plan matches this rank's ag: slices go into full tensors
  size_t next = 0;      // the index of the next tensor alloc is asked for
  struct Full {
    char *base = nullptr;
    size_t slice_count = 0;
    pstate_dtype_t dtype = PSTATE_UINT8;
    pstate_device_t device = PSTATE_DEVICE_CPU;
  };
  std::vector<Full> fulls;  // the sliced tensors received, in dict order
  uint64_t hash = 0xcbf29ce484222325ULL;  // of what alloc was asked for (see the file comment)
  std::string keys;                        // the first keys, for messages
  void mix(const void *p, size_t n) {
    const auto *b = static_cast<const uint8_t *>(p);
    for (size_t i = 0; i < n; ++i) hash = (hash ^ b[i]) * 0x100000001b3ULL;  // FNV-1a
  }
  template <typename T>
  void mix(T v) {
    mix(&v, sizeof v);
  }
};

void *alloc_full(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape, size_t bytes,
                 pstate_device_t device) {
  auto &r = *static_cast<Receiving *>(user);
  const size_t i = r.next++;
  const bool sliced = r.gather && i < r.plan->tensors.size() && r.plan->tensors[i].sliced;
  r.mix(name, std::strlen(name) + 1);
  r.mix(static_cast<int32_t>(dtype));
  r.mix(static_cast<int32_t>(device));
  r.mix(static_cast<uint8_t>(sliced ? 1 : 0));
  const std::vector<int64_t> shown = sliced ? r.plan->tensors[i].shape : std::vector<int64_t>(shape, shape + ndim);
  r.mix(static_cast<uint64_t>(shown.size()));
  for (int64_t e : shown) r.mix(e);
  if (i < 4) r.keys += cat(i ? ", '" : "'", name, "'");
  else if (i == 4) r.keys += ", ...";
  if (!sliced) return r.user.fn(r.user.user, name, dtype, ndim, shape, bytes, device);
  const auto &full_shape = r.plan->tensors[i].shape;
  const size_t parts = static_cast<size_t>(r.plan->ag_size);
  void *full = r.user.fn(r.user.user, name, dtype, static_cast<int>(full_shape.size()), full_shape.data(),
                         bytes * parts, device);
  if (full == nullptr) return nullptr;
  char *base = static_cast<char *>(full);
  r.fulls.push_back({base, bytes / pstate_dtype_size(dtype), dtype, device});
  return base + static_cast<size_t>(r.ag_rank) * bytes;
}

Plan decode_plan(const Bytes &b, const std::string &where) {
  std::vector<int64_t> w(b.size() / sizeof(int64_t));
  if (!w.empty()) std::memcpy(w.data(), b.data(), w.size() * sizeof(int64_t));
  auto bad = [&] {
    throw_error(PSTATE_ERR_MISMATCH, where, ": the message from the sender is not a sliced dict's plan: the ranks "
                "are out of step (pair pstate_send_tensor_dict_sliced with pstate_recv_tensor_dict_sliced)");
  };
  if (w.size() < 4 || w[0] != kPlanMagic) bad();
  Plan p;
  p.ag_size = w[1];
  p.sender_ag_rank = w[2];
  size_t at = 4, n = static_cast<size_t>(w[3]);
  for (size_t i = 0; i < n; ++i) {
    if (at + 2 > w.size()) bad();
    SlicedTensor t;
    t.sliced = w[at] != 0;
    size_t nd = static_cast<size_t>(w[at + 1]);
    at += 2;
    if (at + nd > w.size()) bad();
    t.shape.assign(w.begin() + static_cast<std::ptrdiff_t>(at), w.begin() + static_cast<std::ptrdiff_t>(at + nd));
    at += nd;
    p.tensors.push_back(std::move(t));
  }
  return p;
}

}  // namespace

void send_tensor_dict_sliced(Group &g, const pstate_tensor_t *caller_tensors, size_t count, int dst, Group &ag,
                             void *stream) {
  const int64_t parts = ag.size();
  std::vector<int64_t> plan{kPlanMagic, parts, ag.rank_in_group(), static_cast<int64_t>(count)};
  std::vector<pstate_tensor_t> sent;
  try {
    sent = read_struct_array(caller_tensors, count, "tensors");  // pstate.h: arrays walked by struct_size
  } catch (const Error &) {
    // A plan that slices nothing, then the dict call, which refuses the same array to the receiver
    // (it learns the reason at once instead of waiting).
    for (size_t i = 0; i < count; ++i) plan.insert(plan.end(), {0, 0});
    g.send_object(plan.data(), plan.size() * sizeof(int64_t), dst, ObjectKind::kSlicedPlan);
    send_tensor_dict(g, caller_tensors, count, dst, stream);
    throw_error(PSTATE_ERR_INTERNAL, "send_tensor_dict_sliced: the tensors array was refused here but not by "
                "send_tensor_dict (please report this)");
  }
  const pstate_tensor_t *tensors = sent.data();
  std::vector<int64_t> slice_shapes(count);
  for (size_t i = 0; i < count; ++i) {
    const pstate_tensor_t t = tensors[i];  // a copy: sent[i] (the same element) is rewritten below
    const int64_t n = elements_of(t);
    const bool sliced = parts > 1 && n > 0 && n % parts == 0 && static_cast<int>(t.dtype) >= 0 &&
                        static_cast<int>(t.dtype) < PSTATE_DTYPE_COUNT;
    plan.push_back(sliced ? 1 : 0);
    plan.push_back(sliced ? t.ndim : 0);
    for (int d = 0; sliced && d < t.ndim; ++d) plan.push_back(t.shape[d]);
    if (!sliced) continue;
    slice_shapes[i] = n / parts;
    sent[i].ndim = 1;
    sent[i].shape = &slice_shapes[i];
    sent[i].data = t.data == nullptr ? nullptr
                                     : static_cast<const char *>(t.data) + static_cast<size_t>(ag.rank_in_group()) *
                                                                               static_cast<size_t>(slice_shapes[i]) *
                                                                               pstate_dtype_size(t.dtype);
  }
  g.send_object(plan.data(), plan.size() * sizeof(int64_t), dst, ObjectKind::kSlicedPlan);
  send_tensor_dict(g, sent.data(), count, dst, stream);
}

void recv_tensor_dict_sliced(Group &g, int src, Group &ag, const TensorAllocator &alloc, void *stream) {
  const std::string where = cat(g.name(), ": pstate_recv_tensor_dict_sliced");
  const Plan plan = decode_plan(g.recv_object(src, ObjectKind::kSlicedPlan), where);
  Receiving r;
  r.user = alloc;
  r.plan = &plan;
  r.ag_rank = ag.rank_in_group();
  std::string refusal;
  if (plan.ag_size != ag.size() || plan.sender_ag_rank != ag.rank_in_group())
    refusal = cat(where, ": the sender sliced over ", plan.ag_size, " ranks and sent slice ", plan.sender_ag_rank,
                  ", but this rank's ag group ", ag.name(), " has ", ag.size(), " ranks and this rank is its rank ",
                  ag.rank_in_group(), ": pair each sender with the receiver at the same place of an ag group of the "
                  "same size; the slices were received as they are, nothing was gathered");
  r.gather = refusal.empty();
  std::optional<Error> failure;
  try {
    recv_tensor_dict(g, src, TensorAllocator{alloc_full, &r}, stream);
  } catch (const Error &e) {
    failure = e;
  }
  if (!failure && !refusal.empty()) failure = Error(PSTATE_ERR_MISMATCH, refusal);
  // Every rank of ag takes part in the gathers, or none does.
  bool any_sliced = false;
  for (const auto &t : plan.tensors) any_sliced = any_sliced || t.sliced;
  if (!any_sliced || ag.size() == 1) {
    if (failure) throw *failure;
    return;
  }
  r.mix(static_cast<uint64_t>(r.next));
  const int64_t mine[2] = {failure ? 1 : 0, static_cast<int64_t>(r.hash)};
  std::vector<int64_t> all(2 * static_cast<size_t>(ag.size()));
  ag.all_gather(mine, all.data(), 2, PSTATE_INT64, OpKind::kSlicedDictAgree);
  if (failure) throw *failure;
  for (int q = 0; q < ag.size(); ++q)
    if (all[2 * static_cast<size_t>(q)] != 0)
      throw_error(PSTATE_ERR_ABORTED, where, ": another rank of ", ag.name(),
                  " could not receive its slices (its own call says why): nothing was gathered");
  for (int q = 0; q < ag.size(); ++q) {
    const auto theirs = static_cast<uint64_t>(all[2 * static_cast<size_t>(q) + 1]);
    if (theirs == r.hash) continue;
    char a[17], b[17];
    std::snprintf(a, sizeof a, "%016llx", static_cast<unsigned long long>(r.hash));
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(theirs));
    throw_error(PSTATE_ERR_MISMATCH, where, ": the slices this rank (", ag.name(), " rank ", ag.rank_in_group(),
                ") received are of another dict than ", ag.name(), " rank ", q, "'s (keys, dtypes and shapes hash ",
                a, " here, ", b, " there; this rank's keys: ", r.keys.empty() ? std::string("none") : r.keys,
                "): every rank of the sending stage must send the same keys, dtypes and shapes; nothing was gathered");
  }
  for (const auto &f : r.fulls) {
    if (f.slice_count == 0) continue;
    const size_t slice_bytes = f.slice_count * pstate_dtype_size(f.dtype);
    char *own = f.base + static_cast<size_t>(r.ag_rank) * slice_bytes;
    if (f.device == PSTATE_DEVICE_CUDA) {
      OpDescriptor d{static_cast<uint32_t>(OpKind::kAllGather), 0, f.slice_count, f.dtype, -1, -1, 0};
      ag.run_device(d, [&](DeviceComm &c) { c.all_gather(own, f.base, f.slice_count, f.dtype, stream); });
    } else {
      ag.all_gather(own, f.base, f.slice_count, f.dtype);
    }
  }
}

}  // namespace pstate
