// tensor_dict.cpp — tensor dicts over a group: SGLang's broadcast_tensor_dict, send_tensor_dict
// and recv_tensor_dict, as a protocol over the group's two communicators.
//
// Sender (src of a broadcast, or the sending side of a pair):
//   1. reads the caller's array by its struct_size (common/struct_io.hpp), checks the dict
//      (names, dtypes, shapes, sizes, where each buffer lives) and encodes one
//      metadata message: per tensor its name, dtype, device and shape, followed for a CPU tensor
//      of at most kInlineBytes by its bytes (one message instead of one per small tensor). A
//      dict it refuses is sent as a refusal (status + message) instead, so the receivers fail
//      at once with its reason rather than wait out the timeout.
//   2. sends the message (broadcast_object / send_object, CPU communicator);
//   3. agreement, when the dict holds a non-empty CUDA tensor (below);
//   4. the payload in dict order: CUDA tensors first, enqueued on the device communicator (the GPU
//      moves them while the CPU moves the rest), then the large CPU tensors on the CPU one.
// Receiver:
//   1. decodes the message: a refusal becomes the sender's status and message; bytes that are not
//      a dict mean the ranks are out of step (MISMATCH, the context fails);
//   2. asks alloc for each tensor in dict order and copies the inline bytes; after a failure
//      (NULL, or memory in the wrong place) it asks no more;
//   3. agreement, 4. payload as the sender; a CPU tensor it has no memory for is received into a
//      scratch buffer and dropped, so neither the sender nor the other receivers wait for it.
// Agreement (only with CUDA payload, because an NCCL transfer cannot be drained): a CPU
// all_reduce (MAX) of "failed rank + 1, status" for a broadcast, an acknowledgement object from
// the receiver for a pair. If any rank failed, no rank transfers anything and all return errors.
#include "group/tensor_dict.hpp"

#include "common/limits.hpp"
#include "common/struct_io.hpp"
#include "group/context.hpp"

#include <cstring>
#include <functional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

namespace pstate {
namespace {

constexpr uint32_t kDictMagic = 0x31647470;     // "ptd1": a dict follows
constexpr uint32_t kRefusalMagic = 0x72647470;  // "ptdr": the sender refused its dict
// CPU tensors up to this size travel inside the metadata message: copying them is cheaper than
// one more message each; larger ones move without a copy.
constexpr size_t kInlineBytes = 64 * 1024;

// One tensor as it travels. data: on the sender the tensor's elements; on a receiver its
// inline bytes inside the received message (nullptr when not inline).
struct TensorMeta {
  std::string name;
  pstate_dtype_t dtype = PSTATE_UINT8;
  pstate_device_t device = PSTATE_DEVICE_CPU;
  std::vector<int64_t> shape;
  size_t bytes = 0;
  bool inline_bytes = false;
  const void *data = nullptr;
};

struct Dict {
  Bytes message;  // receivers: tensors[i].data points into it
  std::vector<TensorMeta> tensors;
  bool device_payload = false;  // some CUDA tensor has bytes: the ranks must agree first
};

// A rank's own failure to take the dict, kept until the transfer is over.
struct Failure {
  pstate_status_t status = PSTATE_OK;
  std::string message;
  explicit operator bool() const { return status != PSTATE_OK; }
};

const char *device_text(pstate_device_t d) {
  return d == PSTATE_DEVICE_CUDA ? "cuda" : "cpu";
}

OpDescriptor describe(OpKind kind, size_t count, pstate_dtype_t dtype, int root) {
  return OpDescriptor{static_cast<uint32_t>(kind), 0, count, dtype, -1, root, 0};
}

// ---- the wire ----------------------------------------------------------------------------------

class DictWriter {
 public:
  template <typename T>
  void put(T v) {
    append(&v, sizeof v);
  }
  void append(const void *p, size_t n) {
    const auto *b = static_cast<const uint8_t *>(p);
    out_.insert(out_.end(), b, b + n);
  }
  Bytes take() { return std::move(out_); }

 private:
  Bytes out_;
};

class DictReader {
 public:
  explicit DictReader(const Bytes &b) : data_(b.data()), left_(b.size()) {}
  template <typename T>
  bool get(T *v) {
    const uint8_t *p = take(sizeof *v);
    if (p != nullptr) std::memcpy(v, p, sizeof *v);
    return p != nullptr;
  }
  const uint8_t *take(size_t n) {
    if (n > left_) return nullptr;
    const uint8_t *p = data_;
    data_ += n;
    left_ -= n;
    return p;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t *data_;
  size_t left_;
};

// Elements * element size, or 0 with *overflow set.
size_t size_in_bytes(pstate_dtype_t dtype, const std::vector<int64_t> &shape, bool *overflow) {
  size_t n = pstate_dtype_size(dtype);
  *overflow = false;
  for (int64_t extent : shape) {
    auto e = static_cast<uint64_t>(extent);
    if (e != 0 && n > SIZE_MAX / e) {
      *overflow = true;
      return 0;
    }
    n *= static_cast<size_t>(e);
  }
  return n;
}

// ---- the sender ----------------------------------------------------------------------------------

// Checks tensor i and returns it as it will travel; throws INVALID_ARGUMENT naming it.
TensorMeta check_tensor(Group &g, const pstate_tensor_t &t, size_t i, const char *op) {
  std::string which_op = cat(op, ": tensor ", i);
  if (t.name == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, g.name(), " ", which_op, ": name is NULL (every tensor needs a key)");
  which_op += cat(" ('", t.name, "')");
  const std::string which = g.name() + " " + which_op;
  TensorMeta m;
  m.name = t.name;
  if (static_cast<int>(t.dtype) < 0 || static_cast<int>(t.dtype) >= PSTATE_DTYPE_COUNT)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": dtype ", static_cast<int>(t.dtype), " is not a pstate_dtype_t");
  m.dtype = t.dtype;
  if (t.device != PSTATE_DEVICE_CPU && t.device != PSTATE_DEVICE_CUDA)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": device ", static_cast<int>(t.device),
                " is not a pstate_device_t");
  m.device = t.device;
  if (t.ndim < 0 || t.ndim > PSTATE_TENSOR_MAX_NDIM)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": ndim ", t.ndim, " is outside 0..", PSTATE_TENSOR_MAX_NDIM);
  if (t.ndim > 0 && t.shape == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": shape is NULL with ndim ", t.ndim);
  m.shape.assign(t.shape, t.shape + t.ndim);
  for (int d = 0; d < t.ndim; ++d)
    if (m.shape[static_cast<size_t>(d)] < 0)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": shape[", d, "] is ", m.shape[static_cast<size_t>(d)],
                  " (extents are >= 0)");
  bool overflow = false;
  m.bytes = size_in_bytes(m.dtype, m.shape, &overflow);
  if (overflow) throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": its size in bytes overflows size_t");
  if (m.bytes > kMaxBufferBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": ", m.bytes,
                " bytes, more than 2^47 bytes (128 TiB, the most one buffer may hold): is the shape right?");
  m.data = t.data;
  DeviceContext *device = g.context().device_context();
  if (m.device == PSTATE_DEVICE_CUDA && device == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, which,
                ": a CUDA tensor in a CPU context: mark it PSTATE_DEVICE_CPU "
                "with host memory, or create the context with device = PSTATE_DEVICE_CUDA");
  if (m.bytes == 0) return m;
  if (t.data == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, which, ": data is NULL with ", m.bytes, " bytes");
  if (m.device == PSTATE_DEVICE_CUDA) {
    device->require_device_pointer(t.data, "data", which);
  } else {
    g.context().require_host_memory(t.data, "data", g.name().c_str(), which_op.c_str());
    m.inline_bytes = m.bytes <= kInlineBytes;
  }
  return m;
}

Dict encode_dict(Group &g, const pstate_tensor_t *caller_tensors, size_t count, const char *op) {
  const std::string where = g.name() + " " + op;
  std::vector<pstate_tensor_t> own;
  try {
    own = read_struct_array(caller_tensors, count, "tensors");
  } catch (const Error &e) {
    throw Error(e.status(), cat(where, ": ", e.what()));
  }
  const pstate_tensor_t *tensors = own.data();
  Dict dict;
  DictWriter w;
  w.put(kDictMagic);
  w.put(static_cast<uint64_t>(count));
  std::set<std::string_view> names;
  for (size_t i = 0; i < count; ++i) {
    TensorMeta m = check_tensor(g, tensors[i], i, op);
    if (!names.insert(tensors[i].name).second)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, where, ": tensor ", i, " ('", m.name,
                  "') repeats a name: keys of a "
                  "dict are unique");
    w.put(static_cast<uint32_t>(m.name.size()));
    w.put(static_cast<int32_t>(m.dtype));
    w.put(static_cast<int32_t>(m.device));
    w.put(static_cast<int32_t>(m.shape.size()));
    w.put(static_cast<uint32_t>(m.inline_bytes ? 1 : 0));
    for (int64_t e : m.shape) w.put(e);
    w.append(m.name.data(), m.name.size());
    if (m.inline_bytes) w.append(m.data, m.bytes);
    if (m.device == PSTATE_DEVICE_CUDA && m.bytes > 0) dict.device_payload = true;
    dict.tensors.push_back(std::move(m));
  }
  dict.message = w.take();
  return dict;
}

Bytes encode_refusal(const Error &e) {
  DictWriter w;
  w.put(kRefusalMagic);
  w.put(static_cast<int32_t>(e.status()));
  std::string text = e.what();
  w.append(text.data(), text.size());
  return w.take();
}

// ---- the receiver --------------------------------------------------------------------------------

[[noreturn]] void out_of_step(Group &g, const std::string &where, int sender, const char *what) {
  std::string message = cat(where, ": the message from group rank ", sender, " is not a tensor dict (", what,
                            "): the ranks called different operations (e.g. broadcast_object on one rank and "
                            "broadcast_tensor_dict on another)");
  g.context().fail(message, PSTATE_ERR_MISMATCH);
  throw Error(PSTATE_ERR_MISMATCH, message);
}

bool decode_tensor(DictReader &r, TensorMeta *m) {
  uint32_t name_len = 0, inline_flag = 0;
  int32_t dtype = 0, device = 0, ndim = 0;
  if (!r.get(&name_len) || !r.get(&dtype) || !r.get(&device) || !r.get(&ndim) || !r.get(&inline_flag)) return false;
  if (dtype < 0 || dtype >= PSTATE_DTYPE_COUNT || (device != PSTATE_DEVICE_CPU && device != PSTATE_DEVICE_CUDA) ||
      ndim < 0 || ndim > PSTATE_TENSOR_MAX_NDIM || inline_flag > 1)
    return false;
  m->dtype = static_cast<pstate_dtype_t>(dtype);
  m->device = static_cast<pstate_device_t>(device);
  m->shape.resize(static_cast<size_t>(ndim));
  for (auto &e : m->shape)
    if (!r.get(&e) || e < 0) return false;
  const uint8_t *name = r.take(name_len);
  if (name == nullptr) return false;
  m->name.assign(reinterpret_cast<const char *>(name), name_len);
  bool overflow = false;
  m->bytes = size_in_bytes(m->dtype, m->shape, &overflow);
  m->inline_bytes = inline_flag == 1;
  if (overflow || m->bytes > kMaxBufferBytes || (m->inline_bytes && m->device != PSTATE_DEVICE_CPU)) return false;
  if (m->inline_bytes) {
    m->data = r.take(m->bytes);
    if (m->data == nullptr) return false;
  }
  return true;
}

Dict decode_dict(Group &g, Bytes message, int sender, const std::string &where) {
  Dict dict;
  dict.message = std::move(message);
  DictReader r(dict.message);
  uint32_t magic = 0;
  if (!r.get(&magic)) out_of_step(g, where, sender, "too short");
  if (magic == kRefusalMagic) {
    int32_t status = 0;
    if (!r.get(&status)) out_of_step(g, where, sender, "a truncated refusal");
    size_t length = r.left();
    const uint8_t *text = r.take(length);
    throw_error(static_cast<pstate_status_t>(status), where, ": group rank ", sender,
                " refused its dict: ", std::string_view(reinterpret_cast<const char *>(text), length));
  }
  uint64_t count = 0;
  if (magic != kDictMagic || !r.get(&count)) out_of_step(g, where, sender, "no dict header");
  if (count > r.left() / 20) out_of_step(g, where, sender, "more tensors than bytes");
  dict.tensors.resize(static_cast<size_t>(count));
  for (auto &m : dict.tensors) {
    if (!decode_tensor(r, &m)) out_of_step(g, where, sender, "a malformed tensor entry");
    if (m.device == PSTATE_DEVICE_CUDA && m.bytes > 0) dict.device_payload = true;
  }
  if (r.left() != 0) out_of_step(g, where, sender, "trailing bytes");
  return dict;
}

// Asks alloc for every tensor (until one fails) and fills the inline ones. Returns the memory of
// each tensor, nullptr where there is none (empty, or after a failure: drained).
std::vector<void *> place(Group &g, const Dict &dict, const TensorAllocator &alloc, const char *op, Failure *failure) {
  std::vector<void *> memory(dict.tensors.size(), nullptr);
  for (size_t i = 0; i < dict.tensors.size() && !*failure; ++i) {
    const TensorMeta &t = dict.tensors[i];
    const std::string which_op =
        cat(op, ": tensor ", i, " ('", t.name, "', ", t.bytes, " bytes on ", device_text(t.device), ")");
    const std::string which = g.name() + " " + which_op;
    if (t.device == PSTATE_DEVICE_CUDA && !g.on_device()) {
      *failure = {PSTATE_ERR_INVALID_STATE, cat(which,
                                                ": the sender's context is CUDA and this one is CPU: every "
                                                "rank must create its context with the same device")};
      break;
    }
    void *p = alloc.fn(alloc.user, t.name.c_str(), t.dtype, static_cast<int>(t.shape.size()), t.shape.data(), t.bytes,
                       t.device);
    if (t.bytes == 0) continue;
    if (p == nullptr) {
      *failure = {PSTATE_ERR_NO_MEMORY, cat(which, ": the allocation callback returned NULL")};
      break;
    }
    try {
      if (t.device == PSTATE_DEVICE_CUDA)
        g.context().device_context()->require_device_pointer(p, "memory from alloc", which);
      else
        g.context().require_host_memory(p, "memory from alloc", g.name().c_str(), which_op.c_str());
    } catch (const Error &e) {
      *failure = {e.status(), e.what()};
      break;
    }
    if (t.inline_bytes) std::memcpy(p, t.data, t.bytes);
    memory[i] = p;
  }
  return memory;
}

// ---- agreement and payload -------------------------------------------------------------------------

// Broadcast: every rank learns whether some rank failed (the highest failing rank and its status).
void agree_in_group(Group &g, const Failure &failure, const std::string &where) {
  int32_t flag = failure ? ((g.rank_in_group() + 1) << 8) | static_cast<int32_t>(failure.status) : 0;
  g.all_reduce(&flag, &flag, 1, PSTATE_INT32, PSTATE_MAX, OpKind::kTensorDictAgree);
  if (failure)
    throw_error(failure.status, failure.message,
                "; nothing of the dict was transferred (it holds CUDA tensors, so "
                "every rank of the group gave up)");
  if (flag != 0)
    throw_error(static_cast<pstate_status_t>(flag & 0xff), where, ": group rank ", (flag >> 8) - 1,
                " could not take the dict (its error says why): nothing was transferred");
}

void run_device_op(Group &g, OpKind kind, const TensorMeta &t, int peer,
                   const std::function<void(DeviceComm &, size_t)> &op) {
  size_t n = t.bytes / pstate_dtype_size(t.dtype);
  g.run_device(describe(kind, n, t.dtype, peer), [&](DeviceComm &d) { op(d, n); });
}

// buffers[i]: on src the tensor's data; elsewhere the memory from alloc, or nullptr to drain.
void broadcast_payload(Group &g, const Dict &dict, const std::vector<void *> &buffers, int src, void *stream) {
  for (size_t i = 0; i < dict.tensors.size(); ++i) {
    const TensorMeta &t = dict.tensors[i];
    if (t.device != PSTATE_DEVICE_CUDA || t.bytes == 0) continue;
    run_device_op(g, OpKind::kBroadcast, t, src,
                  [&](DeviceComm &d, size_t n) { d.broadcast(buffers[i], n, t.dtype, src, stream); });
  }
  Bytes scratch;
  for (size_t i = 0; i < dict.tensors.size(); ++i) {
    const TensorMeta &t = dict.tensors[i];
    if (t.device != PSTATE_DEVICE_CPU || t.bytes == 0 || t.inline_bytes) continue;
    void *b = buffers[i];
    if (b == nullptr) {
      scratch.resize(t.bytes);
      b = scratch.data();
    }
    g.broadcast(b, t.bytes, PSTATE_UINT8, src);
  }
}

void send_payload(Group &g, const Dict &dict, int dst, void *stream) {
  for (const TensorMeta &t : dict.tensors) {
    if (t.device != PSTATE_DEVICE_CUDA || t.bytes == 0) continue;
    run_device_op(g, OpKind::kSend, t, dst, [&](DeviceComm &d, size_t n) { d.send(t.data, n, t.dtype, dst, stream); });
  }
  for (const TensorMeta &t : dict.tensors) {
    if (t.device != PSTATE_DEVICE_CPU || t.bytes == 0 || t.inline_bytes) continue;
    g.send(t.data, t.bytes, PSTATE_UINT8, dst, TensorKind::kDictPayload);
  }
}

void recv_payload(Group &g, const Dict &dict, const std::vector<void *> &memory, int src, void *stream) {
  for (size_t i = 0; i < dict.tensors.size(); ++i) {
    const TensorMeta &t = dict.tensors[i];
    if (t.device != PSTATE_DEVICE_CUDA || t.bytes == 0) continue;
    run_device_op(g, OpKind::kRecv, t, src,
                  [&](DeviceComm &d, size_t n) { d.recv(memory[i], n, t.dtype, src, stream); });
  }
  Bytes scratch;
  for (size_t i = 0; i < dict.tensors.size(); ++i) {
    const TensorMeta &t = dict.tensors[i];
    if (t.device != PSTATE_DEVICE_CPU || t.bytes == 0 || t.inline_bytes) continue;
    void *b = memory[i];
    if (b == nullptr) {
      scratch.resize(t.bytes);
      b = scratch.data();
    }
    g.recv(b, t.bytes, PSTATE_UINT8, src, TensorKind::kDictPayload);
  }
}

// The sender's dict, or (after telling the receivers with `refuse`) its error.
template <typename Refuse>
Dict encode_or_refuse(Group &g, const pstate_tensor_t *tensors, size_t count, const char *op, bool point_to_point,
                      Refuse &&refuse) {
  try {
    Dict dict = encode_dict(g, tensors, count, op);
    if (point_to_point && dict.device_payload) g.require_device_p2p_ready(op);
    return dict;
  } catch (const Error &e) {
    Bytes refusal = encode_refusal(e);
    refuse(refusal);
    throw;
  }
}

}  // namespace

void broadcast_tensor_dict(Group &g, const pstate_tensor_t *tensors, size_t count, int src,
                           const TensorAllocator &alloc, void *stream) {
  const std::string where = g.name() + " broadcast_tensor_dict";
  g.check_alive("broadcast_tensor_dict");
  if (g.rank_in_group() == src) {
    Dict dict = encode_or_refuse(g, tensors, count, "broadcast_tensor_dict", false,
                                 [&](const Bytes &r) { g.broadcast_object(r.data(), r.size(), src, OpKind::kTensorDictMeta); });
    g.broadcast_object(dict.message.data(), dict.message.size(), src, OpKind::kTensorDictMeta);
    if (dict.device_payload) agree_in_group(g, Failure{}, where);
    std::vector<void *> data;
    for (const TensorMeta &t : dict.tensors) data.push_back(const_cast<void *>(t.data));
    broadcast_payload(g, dict, data, src, stream);
    return;
  }
  Dict dict = decode_dict(g, g.broadcast_object(nullptr, 0, src, OpKind::kTensorDictMeta), src, where);
  Failure failure;
  std::vector<void *> memory = place(g, dict, alloc, "broadcast_tensor_dict", &failure);
  if (dict.device_payload) agree_in_group(g, failure, where);
  broadcast_payload(g, dict, memory, src, stream);
  if (failure) throw Error(failure.status, failure.message + "; the rest of the dict was received and dropped");
}

void send_tensor_dict(Group &g, const pstate_tensor_t *tensors, size_t count, int dst, void *stream) {
  const std::string where = g.name() + " send_tensor_dict";
  g.check_alive("send_tensor_dict");
  Dict dict = encode_or_refuse(g, tensors, count, "send_tensor_dict", true,
                               [&](const Bytes &r) { g.send_object(r.data(), r.size(), dst, ObjectKind::kDictMeta); });
  g.send_object(dict.message.data(), dict.message.size(), dst, ObjectKind::kDictMeta);
  if (dict.device_payload) {
    Bytes ack = g.recv_object(dst, ObjectKind::kDictAck);
    DictReader r(ack);
    int32_t status = 0;
    if (!r.get(&status)) out_of_step(g, where, dst, "an empty acknowledgement");
    if (status != PSTATE_OK)
      throw_error(static_cast<pstate_status_t>(status), where, ": group rank ", dst, " could not take the dict (",
                  std::string_view(reinterpret_cast<const char *>(ack.data()) + 4, ack.size() - 4),
                  "): nothing was transferred");
  }
  send_payload(g, dict, dst, stream);
}

void recv_tensor_dict(Group &g, int src, const TensorAllocator &alloc, void *stream) {
  const std::string where = g.name() + " recv_tensor_dict";
  g.check_alive("recv_tensor_dict");
  Dict dict = decode_dict(g, g.recv_object(src, ObjectKind::kDictMeta), src, where);
  Failure failure;
  std::vector<void *> memory = place(g, dict, alloc, "recv_tensor_dict", &failure);
  if (dict.device_payload) {
    DictWriter w;
    w.put(static_cast<int32_t>(failure.status));
    w.append(failure.message.data(), failure.message.size());
    Bytes ack = w.take();
    g.send_object(ack.data(), ack.size(), src, ObjectKind::kDictAck);
    if (failure)
      throw Error(failure.status, failure.message + "; nothing of the dict was transferred (it holds CUDA tensors)");
  }
  recv_payload(g, dict, memory, src, stream);
  if (failure) throw Error(failure.status, failure.message + "; the rest of the dict was received and dropped");
}

}  // namespace pstate
