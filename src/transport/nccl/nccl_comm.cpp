// nccl_comm.cpp — NcclCommunicator (see nccl_comm.hpp for the lifecycle and the order of checks).
#include "transport/nccl/nccl_comm.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace pstate {

namespace {

// What rank 0 broadcasts: the id, or that it could not make one (so peers fail at once instead
// of waiting out their timeout in ncclCommInitRankConfig).
struct IdMessage {
  int32_t ok;
  ncclUniqueId id;
};

bool is_fp8(pstate_dtype_t dtype) { return dtype == PSTATE_FP8_E4M3 || dtype == PSTATE_FP8_E5M2; }

// Backoff for polling NCCL's state: yield first (init and ops usually settle in microseconds),
// then sleeps doubling up to 1 ms.
class Backoff {
 public:
  void pause() {
    if (sleep_.count() == 0) {
      std::this_thread::yield();
      sleep_ = std::chrono::microseconds(1);
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

 private:
  std::chrono::microseconds sleep_{0};
};

}  // namespace

// What every operation holds while it enqueues: the context's device made current and the
// stream resolved (NULL, capture mode). Nothing here builds text unless it fails: an eager call
// costs the host only its enqueue (the "group: op" string of every message, built up front, was
// 90% of an eager call's host time).
class NcclCommunicator::OpScope {
 public:
  OpScope(NcclCommunicator &comm, const char *op, void *stream)
      : context_(comm.context_), guard_(comm.cuda_, comm.context_.device_ordinal(), comm.options_.group_name, op),
        stream_(comm.context_.stream_for(stream, comm.options_.group_name, op)) {
    context_.trace_bracket(false, stream_);  // PSTATE_TRACE_CUDA_EVENTS: when the stream starts it
  }
  ~OpScope() {
    try {
      context_.trace_bracket(true, stream_);
    } catch (const std::exception &) {  // a timing event that cannot be recorded times nothing
    }
  }
  OpScope(const OpScope &) = delete;
  OpScope &operator=(const OpScope &) = delete;
  cudaStream_t stream() const { return stream_; }

 private:
  CudaDeviceContext &context_;
  DeviceGuard guard_;
  cudaStream_t stream_;
};

NcclCommunicator::NcclCommunicator(CudaDeviceContext &context, DeviceCommOptions options, const Logger &log)
    : context_(context), cuda_(context.cuda()), options_(std::move(options)), log_(log),
      comm_name_("pstate " + options_.group_name) {}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) {
    barrier_buffer_.reset();
    return;
  }
  if (revoked_) {  // finalize is invalid after ncclCommRevoke; its operations were stopped anyway
    abort_comm();
    barrier_buffer_.reset();
    return;
  }
  // Graceful: finalize flushes outstanding operations (bounded by the timeout), then destroy.
  try {
    DeviceGuard guard(cuda_, context_.device_ordinal(), where("destroy"));
    ncclResult_t r = settle(nccl_->api().CommFinalize(comm_), "ncclCommFinalize", "destroy");
    if (r == ncclSuccess) {
      nccl_->api().CommDestroy(comm_);
      comm_ = nullptr;
    } else {
      log_.warn(where("destroy"), ": ncclCommFinalize: ", nccl_->error_text(r, comm_), "; aborting instead");
      abort_comm();
    }
    barrier_buffer_.reset();
  } catch (const std::exception &e) {
    log_.warn(e.what());
    abort_comm();
  }
}

std::string NcclCommunicator::where(const char *op) const { return cat(options_.group_name, ": ", op); }

// ---- argument checks ---------------------------------------------------------------------------

void NcclCommunicator::require_usable(const char *op) const {
  if (!failure_.empty())
    throw_error(PSTATE_ERR_ABORTED, where(op), ": the device communicator failed earlier (", failure_,
                "); only pstate_abort or pstate_finalize can follow");
}

void NcclCommunicator::require_dtype(pstate_dtype_t dtype, const char *op) const {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= PSTATE_DTYPE_COUNT)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(op), ": dtype ", static_cast<int>(dtype),
                " is not a pstate_dtype_t (0..", PSTATE_DTYPE_COUNT - 1, ")");
}

void NcclCommunicator::require_reduction(pstate_dtype_t dtype, pstate_reduce_op_t op, const char *what) {
  require_dtype(dtype, what);
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= PSTATE_REDUCE_OP_COUNT)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(what), ": op ", static_cast<int>(op),
                " is not a pstate_reduce_op_t (0..", PSTATE_REDUCE_OP_COUNT - 1, ")");
  if (is_fp8(dtype) && !context_.fp8_reductions_supported())
    throw_error(PSTATE_ERR_UNSUPPORTED, where(what), ": ", pstate_dtype_name(dtype), " ", pstate_reduce_op_name(op),
                ": ", context_.fp8_requirement_text());
}

void NcclCommunicator::require_peer(int peer, const char *name, const char *op, bool allow_self) const {
  if (peer < 0 || peer >= size())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(op), ": ", name, " ", peer, " is not a rank of this group (0..",
                size() - 1, ")");
  if (!allow_self && peer == rank())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(op), ": ", name, " ", peer,
                " is this rank: point-to-point needs another rank of the group (a send to itself would never "
                "find its receive)");
}

void NcclCommunicator::require_buffer(const void *p, const char *name, const char *op) const {
  if (p != nullptr && context_.is_own_device_memory(p)) [[likely]] return;
  if (p == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(op), ": ", name, " is NULL with a count > 0");
  context_.require_device_pointer(p, name, where(op));  // throws, saying what p is
}

namespace {
// count * dtype size * blocks in bytes, refusing sizes that do not fit size_t; "group: op" names
// the call in the message (built only then).
size_t bytes_of(size_t count, pstate_dtype_t dtype, size_t blocks, const std::string &group, const char *op) {
  size_t elements = 0, bytes = 0;
  if (__builtin_mul_overflow(count, blocks, &elements) ||
      __builtin_mul_overflow(elements, pstate_dtype_size(dtype), &bytes)) [[unlikely]]
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, group, ": ", op, ": ", count, " x ", blocks, " elements of ",
                pstate_dtype_name(dtype), " overflow size_t");
  return bytes;
}
}  // namespace

// ---- the NCCL communicator ---------------------------------------------------------------------

ncclComm_t NcclCommunicator::comm(cudaStream_t stream, const char *op) {
  if (comm_ != nullptr) {
    check_async(op);
    return comm_;
  }
  // Creating a communicator allocates device memory, which a stream capture forbids.
  if (cuda_.capture_info(stream, where(op)).status != cudaStreamCaptureStatusNone)
    throw_error(PSTATE_ERR_INVALID_STATE, where(op),
                ": this group's NCCL communicator does not exist yet and cannot be created inside a CUDA "
                "graph capture: enter capture mode with pstate_graph_capture_begin (it creates every "
                "group's communicator) or run one collective on this group before capturing");
  create(op);
  return comm_;
}

void NcclCommunicator::ensure_ready() {
  require_usable("communicator init");
  if (ready()) return;
  DeviceGuard guard(cuda_, context_.device_ordinal(), where("communicator init"));
  create("communicator init");
}

void NcclCommunicator::create(const char *op) {
  const std::string w = where(op);
  nccl_ = &context_.nccl();
  if (!options_.broadcast_from_rank0)
    throw_error(PSTATE_ERR_INTERNAL, w, ": no broadcast callback to share the NCCL unique id");

  IdMessage message{};
  std::string rank0_error;
  pstate_status_t rank0_status = PSTATE_OK;
  if (rank() == 0) {
    try {
      message.id = nccl_->unique_id(w);
      message.ok = 1;
    } catch (const Error &e) {
      rank0_error = e.what();
      rank0_status = e.status();
    }
  }
  options_.broadcast_from_rank0(&message, sizeof message);
  if (message.ok != 1) {
    if (rank() == 0) fail(rank0_status, rank0_error, true);
    fail(PSTATE_ERR_TRANSPORT, cat(w, ": group rank 0 could not create the NCCL unique id (its error says why)"),
         true);
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = options_.nccl_blocking ? 1 : 0;  // 0: a missing peer is a TIMEOUT, not a hang
  config.commName = comm_name_.c_str();
  auto started = std::chrono::steady_clock::now();
  ncclComm_t created = nullptr;
  ncclResult_t r = nccl_->api().CommInitRankConfig(&created, size(), message.id, rank(), &config);
  comm_ = created;
  r = settle(r, "ncclCommInitRankConfig", op);
  if (r != ncclSuccess)
    fail(status_of(r), cat(w, ": creating the NCCL communicator (rank ", rank(), " of ", size(), ", cuda:",
                           context_.device_ordinal(), "): ncclCommInitRankConfig: ", nccl_->error_text(r, comm_)),
         true);
  made_ = true;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  log_.info(w, ": NCCL communicator ready, made by a bootstrap (unique id from group rank 0, ncclCommInitRankConfig; rank ", rank(), " of ", size(), ", cuda:", context_.device_ordinal(), ", ",
            nccl_->describe(), options_.nccl_blocking ? ", blocking" : ", non-blocking", ") in ", ms, " ms");
}

// ---- splitting -----------------------------------------------------------------------

bool NcclCommunicator::can_split() const {
  return comm_ != nullptr && failure_.empty() && nccl_ != nullptr && nccl_->has_split();
}

std::unique_ptr<DeviceComm> NcclCommunicator::split(int color, int key, DeviceCommOptions child_options) {
  constexpr const char *kOp = "communicator split";
  require_usable(kOp);
  if (!can_split())
    throw_error(PSTATE_ERR_INTERNAL, where(kOp), ": split without a usable parent communicator or ncclCommSplit");
  DeviceGuard guard(cuda_, context_.device_ordinal(), where(kOp));
  auto child = std::make_unique<NcclCommunicator>(context_, std::move(child_options), log_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = child->options_.nccl_blocking ? 1 : 0;
  config.commName = child->comm_name_.c_str();
  config.splitShare = 1;  // the child shares the parent's buffers and connections (NCCL >= 2.18)
  auto started = std::chrono::steady_clock::now();
  ncclComm_t created = nullptr;
  ncclResult_t r = nccl_->api().CommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &created, &config);
  if (color < 0 || created == nullptr) {  // this rank joins no child: the parent carries the call
    complete(r, "ncclCommSplit", kOp);
    return nullptr;
  }
  take_child(*child, created, r, "ncclCommSplit", "splitting the NCCL communicator from", kOp);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  log_.info(child->where("communicator init"), ": NCCL communicator ready, split from ", options_.group_name,
            " (ncclCommSplit, splitShare, no unique id; rank ", child->rank(), " of ", child->size(), ", cuda:",
            context_.device_ordinal(), ") in ", ms, " ms");
  return child;
}

// A child made from this communicator (by `call`, which answered r) holds `created` once NCCL
// settles it; a failure aborts the child and throws, naming `what` this one ("splitting the NCCL
// communicator from tp:0").
void NcclCommunicator::take_child(NcclCommunicator &child, ncclComm_t created, ncclResult_t r, const char *call,
                                  const char *what, const char *op) {
  child.nccl_ = nccl_;
  child.comm_ = created;
  r = child.settle(r, call, op);
  if (r != ncclSuccess)
    child.fail(status_of(r), cat(child.where(op), ": ", what, " ", options_.group_name, " (rank ", child.rank(), " of ",
                                 child.size(), "): ", call, ": ", nccl_->error_text(r, created)),
               true);
  child.made_ = true;
}

// ---- shrinking (pstate_shrink) ------------------------------------------------------------

bool NcclCommunicator::can_shrink() const {
  return comm_ != nullptr && made_ && size() > 1 && nccl_ != nullptr && nccl_->has_shrink();
}

std::unique_ptr<DeviceComm> NcclCommunicator::shrink(const std::vector<int> &exclude, DeviceCommOptions child_options) {
  constexpr const char *kOp = "communicator shrink";
  if (!can_shrink())
    throw_error(PSTATE_ERR_INTERNAL, where(kOp), ": shrink without an NCCL communicator or ncclCommShrink");
  DeviceGuard guard(cuda_, context_.device_ordinal(), where(kOp));
  const auto &api = nccl_->api();
  auto started = std::chrono::steady_clock::now();
  if (revoked_) {  // revoked: shrink once it is quiescent (ncclInProgress until then)
    const Deadline deadline = Deadline::after_ms(options_.timeout_ms);
    Backoff backoff;
    for (ncclResult_t state = ncclInProgress; state == ncclInProgress;) {
      if (api.CommGetAsyncError(comm_, &state) != ncclSuccess) break;
      if (state != ncclInProgress) break;
      if (context_.abort_requested())
        throw_error(PSTATE_ERR_ABORTED, where(kOp), ": stopped waiting for the revoked NCCL communicator to quiesce: ",
                    kAbortedByAnotherThread);
      if (deadline.expired())
        throw_error(PSTATE_ERR_TIMEOUT, where(kOp), ": the revoked NCCL communicator did not quiesce within ",
                    options_.timeout_ms, " ms");
      backoff.pause();
    }
  }
  auto child = std::make_unique<NcclCommunicator>(context_, std::move(child_options), log_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = child->options_.nccl_blocking ? 1 : 0;
  config.commName = child->comm_name_.c_str();
  std::vector<int> excluded = exclude;  // NCCL takes a non-const list
  ncclComm_t created = nullptr;
  ncclResult_t r = api.CommShrink(comm_, excluded.data(), static_cast<int>(excluded.size()), &created, &config,
                                  NcclLib::kShrinkAbort);
  take_child(*child, created, r, "ncclCommShrink", "shrinking the NCCL communicator of", kOp);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  log_.info(child->where("communicator init"), ": NCCL communicator ready, shrunk from ", options_.group_name,
            "'s (ncclCommShrink, NCCL_SHRINK_ABORT, ", exclude.size(), " of its ", size(),
            " ranks excluded, no unique id; rank ", child->rank(), " of ", child->size(), ", cuda:", context_.device_ordinal(),
            ") in ", ms, " ms");
  return child;
}

ncclResult_t NcclCommunicator::settle(ncclResult_t r, const char *call, const char *op) {
  if (r != ncclInProgress || comm_ == nullptr) return r;
  Deadline deadline = Deadline::after_ms(options_.timeout_ms);
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = nccl_->api().CommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) return q;
    if (state != ncclInProgress) return state;
    if (context_.abort_requested())  // the communicator is aborted with the context (ncclCommAbort)
      fail(PSTATE_ERR_ABORTED,
           cat(where(op), ": ", call, " had not finished (rank ", rank(), " of ", size(), ") when ",
               kAbortedByAnotherThread),
           true);
    if (deadline.expired())
      fail(PSTATE_ERR_TIMEOUT,
           cat(where(op), ": ", call, " did not finish within ", options_.timeout_ms, " ms (rank ", rank(), " of ",
               size(),
               "): a rank of the group has not made the same call (every rank must issue the same device "
               "operations in the same order), or NCCL could not connect (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME)"),
           true);
    backoff.pause();
  }
}

void NcclCommunicator::complete(ncclResult_t r, const char *call, const char *op) {
  r = settle(r, call, op);
  if (r == ncclSuccess) return;
  fail(status_of(r), cat(where(op), ": ", call, " (rank ", rank(), " of ", size(), "): ", nccl_->error_text(r, comm_)),
       is_fatal(r));
}

void NcclCommunicator::check_async(const char *op) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t q = nccl_->api().CommGetAsyncError(comm_, &state);
  complete(q != ncclSuccess ? q : state, "ncclCommGetAsyncError", op);
}

void NcclCommunicator::fail(pstate_status_t status, const std::string &message, bool fatal) {
  if (!fatal) throw Error(status, message);
  failure_ = message;
  stop_comm();
  throw Error(status, message + (revoked_ ? "; the device communicator was revoked (its operations stopped): "
                                            "pstate_shrink makes the survivors' from it, or end the context "
                                            "with pstate_abort"
                                          : "; the device communicator was aborted: end the context with pstate_abort"));
}

void NcclCommunicator::abort_comm() noexcept {
  if (comm_ == nullptr) return;
  nccl_->api().CommAbort(comm_);  // sets its own device; does not wait for peers
  comm_ = nullptr;
  revoked_ = false;
}

void NcclCommunicator::stop_comm() noexcept {
  if (comm_ == nullptr || revoked_) return;
  if (made_ && nccl_->has_revoke() && nccl_->api().CommRevoke(comm_, 0) == ncclSuccess) {
    revoked_ = true;
    log_.info(where("revoke"), ": NCCL communicator revoked (ncclCommRevoke: its in-flight operations stopped; "
              "kept so that pstate_shrink can shrink it)");
    return;
  }
  abort_comm();
}

void NcclCommunicator::abort() noexcept {
  abort_comm();
  if (failure_.empty()) failure_ = options_.group_name + ": aborted (pstate_abort)";
}

// ---- registered memory (group memory's windows and buffers) -------------------------------------
// A registration NCCL refuses (an argument or usage error, no address space left, no NVLink for a
// symmetric window) is not a failure of the communicator: the caller falls back to plain memory.
// Only a peer's loss (ncclRemoteError) or a wait past the deadline fails it, as an operation would.

std::string NcclCommunicator::windows_unavailable() const {
  if (size() == 1) return "a group of one rank has no NCCL communicator";
  const NcclLib &lib = context_.nccl();
  if (!lib.has_windows())
    return cat("NCCL ", lib.version_text(), " has no symmetric windows (ncclMemAlloc + ncclCommWindowRegister need "
               "NCCL >= 2.27)");
  return "";
}

void *NcclCommunicator::window_register(void *p, size_t bytes, std::string *why) {
  constexpr const char *kOp = "window register";
  *why = windows_unavailable();
  if (!why->empty()) return nullptr;
  ensure_ready();
  DeviceGuard guard(cuda_, context_.device_ordinal(), where(kOp));
  void *window = nullptr;
  ncclResult_t r = nccl_->api().CommWindowRegister(comm_, p, bytes, &window, NcclLib::kWinCollSymmetric);
  r = settle(r, "ncclCommWindowRegister", kOp);
  if (r == ncclSuccess && window != nullptr) return window;
  if (r == ncclRemoteError) complete(r, "ncclCommWindowRegister", kOp);  // throws
  *why = cat("ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) of ", bytes, " bytes refused: ",
             r == ncclSuccess ? std::string("no window returned") : nccl_->error_text(r, comm_));
  return nullptr;
}

void NcclCommunicator::window_deregister(void *window) noexcept {
  if (window == nullptr || comm_ == nullptr || !failure_.empty()) return;
  try {
    ncclResult_t r = settle(nccl_->api().CommWindowDeregister(comm_, window), "ncclCommWindowDeregister", "window deregister");
    if (r != ncclSuccess) log_.warn(where("window deregister"), ": ", nccl_->error_text(r, comm_));
  } catch (const Error &e) {
    log_.warn(e.what());
  }
}

void *NcclCommunicator::buffer_register(void *p, size_t bytes, std::string *why) {
  constexpr const char *kOp = "buffer register";
  if (comm_ == nullptr || !failure_.empty()) {
    *why = size() == 1 ? "a group of one rank has no NCCL communicator" : "the NCCL communicator is not made yet";
    return nullptr;
  }
  if (!nccl_->has_buffer_register()) {
    *why = cat("NCCL ", nccl_->version_text(), " has no ncclCommRegister (NCCL >= 2.19)");
    return nullptr;
  }
  DeviceGuard guard(cuda_, context_.device_ordinal(), where(kOp));
  void *handle = nullptr;
  ncclResult_t r = settle(nccl_->api().CommRegister(comm_, p, bytes, &handle), "ncclCommRegister", kOp);
  if (r == ncclSuccess && handle != nullptr) return handle;
  if (r == ncclRemoteError) complete(r, "ncclCommRegister", kOp);  // throws
  *why = cat("ncclCommRegister of ", bytes, " bytes refused: ",
             r == ncclSuccess ? std::string("no handle returned") : nccl_->error_text(r, comm_));
  return nullptr;
}

void NcclCommunicator::buffer_deregister(void *handle) noexcept {
  if (handle == nullptr || comm_ == nullptr || !failure_.empty()) return;
  try {
    ncclResult_t r = settle(nccl_->api().CommDeregister(comm_, handle), "ncclCommDeregister", "buffer deregister");
    if (r != ncclSuccess) log_.warn(where("buffer deregister"), ": ", nccl_->error_text(r, comm_));
  } catch (const Error &e) {
    log_.warn(e.what());
  }
}

void NcclCommunicator::copy(void *dst, const void *src, size_t bytes, cudaStream_t stream, const char *op) const {
  if (dst == src) return;
  const cudaError_t e = cuda_.api().MemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  if (e != cudaSuccess) cuda_.check(e, "cudaMemcpyAsync", where(op));
}

// ---- operations ------------------------------------------------------------------------------

void NcclCommunicator::all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                                  pstate_reduce_op_t op, void *stream) {
  constexpr const char *kOp = "all_reduce";
  require_usable(kOp);
  require_reduction(dtype, op, kOp);
  if (count == 0) return;
  require_buffer(send, "send", kOp);
  if (recv != send) require_buffer(recv, "recv", kOp);  // in place: one buffer, one check
  size_t bytes = bytes_of(count, dtype, 1, options_.group_name, kOp);
  OpScope scope(*this, kOp, stream);
  if (size() == 1) return copy(recv, send, bytes, scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  complete(nccl_->api().AllReduce(send, recv, count, to_nccl(dtype), to_nccl(op), c, scope.stream()), "ncclAllReduce",
           kOp);
}

void NcclCommunicator::all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, void *stream) {
  constexpr const char *kOp = "all_gather";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  if (send_count == 0) return;
  require_buffer(send, "send", kOp);
  require_buffer(recv, "recv", kOp);
  size_t block = bytes_of(send_count, dtype, static_cast<size_t>(size()), options_.group_name, kOp) / static_cast<size_t>(size());
  OpScope scope(*this, kOp, stream);
  if (size() == 1) return copy(recv, send, block, scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  complete(nccl_->api().AllGather(send, recv, send_count, to_nccl(dtype), c, scope.stream()), "ncclAllGather", kOp);
}

void NcclCommunicator::reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                                      pstate_reduce_op_t op, void *stream) {
  constexpr const char *kOp = "reduce_scatter";
  require_usable(kOp);
  require_reduction(dtype, op, kOp);
  if (recv_count == 0) return;
  require_buffer(send, "send", kOp);
  require_buffer(recv, "recv", kOp);
  size_t block = bytes_of(recv_count, dtype, static_cast<size_t>(size()), options_.group_name, kOp) / static_cast<size_t>(size());
  OpScope scope(*this, kOp, stream);
  if (size() == 1) return copy(recv, send, block, scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  complete(nccl_->api().ReduceScatter(send, recv, recv_count, to_nccl(dtype), to_nccl(op), c, scope.stream()),
           "ncclReduceScatter", kOp);
}

void NcclCommunicator::broadcast(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream) {
  constexpr const char *kOp = "broadcast";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  require_peer(src, "src", kOp, true);
  if (count == 0) return;
  require_buffer(buf, "buf", kOp);
  OpScope scope(*this, kOp, stream);
  if (size() == 1) return;  // the root already holds the data
  ncclComm_t c = comm(scope.stream(), kOp);
  complete(nccl_->api().Broadcast(buf, buf, count, to_nccl(dtype), src, c, scope.stream()), "ncclBroadcast", kOp);
}

void NcclCommunicator::gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int dst,
                              void *stream) {
  constexpr const char *kOp = "gather";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  require_peer(dst, "dst", kOp, true);
  if (send_count == 0) return;
  require_buffer(send, "send", kOp);
  if (rank() == dst) require_buffer(recv, "recv", kOp);
  size_t block = bytes_of(send_count, dtype, static_cast<size_t>(size()), options_.group_name, kOp) / static_cast<size_t>(size());
  OpScope scope(*this, kOp, stream);
  if (size() == 1) return copy(recv, send, block, scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  const auto &api = nccl_->api();
  complete(api.GroupStart(), "ncclGroupStart", kOp);
  // The root receives block r from rank r (itself included: NCCL pairs a rank's send and
  // receive to itself inside a group); every rank sends its block to the root.
  ncclResult_t first = ncclSuccess;
  auto keep = [&first](ncclResult_t r) {
    if (first == ncclSuccess) first = r;
  };
  if (rank() == dst) {
    for (int r = 0; r < size(); ++r)
      keep(api.Recv(static_cast<char *>(recv) + static_cast<size_t>(r) * block, send_count, to_nccl(dtype), r, c,
                    scope.stream()));
  }
  keep(api.Send(send, send_count, to_nccl(dtype), dst, c, scope.stream()));
  ncclResult_t end = api.GroupEnd();
  if (first != ncclSuccess) complete(first, "ncclSend/ncclRecv", kOp);
  complete(end, "ncclGroupEnd", kOp);
}

void NcclCommunicator::reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                              int root, void *stream) {
  constexpr const char *kOp = "reduce";
  require_usable(kOp);
  require_reduction(dtype, op, kOp);
  require_peer(root, "root", kOp, true);
  if (count == 0) return;
  require_buffer(send, "send", kOp);
  if (rank() == root) require_buffer(recv, "recv", kOp);
  size_t bytes = bytes_of(count, dtype, 1, options_.group_name, kOp);
  OpScope scope(*this, kOp, stream);
  if (size() == 1) return copy(recv, send, bytes, scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  complete(nccl_->api().Reduce(send, recv, count, to_nccl(dtype), to_nccl(op), root, c, scope.stream()), "ncclReduce",
           kOp);
}

void NcclCommunicator::scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root,
                               void *stream) {
  constexpr const char *kOp = "scatter";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  require_peer(root, "root", kOp, true);
  if (recv_count == 0) return;
  if (rank() == root) require_buffer(send, "send", kOp);
  require_buffer(recv, "recv", kOp);
  size_t block = bytes_of(recv_count, dtype, static_cast<size_t>(size()), options_.group_name, kOp) / static_cast<size_t>(size());
  OpScope scope(*this, kOp, stream);
  const char *own = rank() == root ? static_cast<const char *>(send) + static_cast<size_t>(root) * block : nullptr;
  if (size() == 1) return copy(recv, own, block, scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  const auto &api = nccl_->api();
  // vLLM's PyNccl scatter: the root sends block r to every rank r, every other rank receives its
  // block, all in one group. The root's own block is a device copy on the same stream instead of
  // a send to itself (none at all in place: recv == send + root * recv_count).
  complete(api.GroupStart(), "ncclGroupStart", kOp);
  ncclResult_t first = ncclSuccess;
  if (rank() == root) {
    for (int r = 0; r < size() && first == ncclSuccess; ++r)
      if (r != root)
        first = api.Send(static_cast<const char *>(send) + static_cast<size_t>(r) * block, recv_count, to_nccl(dtype),
                         r, c, scope.stream());
  } else {
    first = api.Recv(recv, recv_count, to_nccl(dtype), root, c, scope.stream());
  }
  ncclResult_t end = api.GroupEnd();
  if (first != ncclSuccess) complete(first, "ncclSend/ncclRecv", kOp);
  complete(end, "ncclGroupEnd", kOp);
  if (own != nullptr) copy(recv, own, block, scope.stream(), kOp);
}

void NcclCommunicator::all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype,
                                  void *stream) {
  constexpr const char *kOp = "all_to_all";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  if (count_per_rank == 0) return;
  require_buffer(send, "send", kOp);
  require_buffer(recv, "recv", kOp);
  if (send == recv && size() > 1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(kOp), ": send and recv are the same buffer: all_to_all cannot "
                "run in place");
  size_t block = bytes_of(count_per_rank, dtype, static_cast<size_t>(size()), options_.group_name, kOp) / static_cast<size_t>(size());
  OpScope scope(*this, kOp, stream);
  if (size() == 1) return copy(recv, send, block, scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  const auto &api = nccl_->api();
  complete(api.GroupStart(), "ncclGroupStart", kOp);
  // Block j of send goes to rank j; block i of recv comes from rank i (self included).
  ncclResult_t first = ncclSuccess;
  for (int r = 0; r < size() && first == ncclSuccess; ++r) {
    size_t offset = static_cast<size_t>(r) * block;
    first = api.Send(static_cast<const char *>(send) + offset, count_per_rank, to_nccl(dtype), r, c, scope.stream());
    if (first == ncclSuccess)
      first = api.Recv(static_cast<char *>(recv) + offset, count_per_rank, to_nccl(dtype), r, c, scope.stream());
  }
  ncclResult_t end = api.GroupEnd();
  if (first != ncclSuccess) complete(first, "ncclSend/ncclRecv", kOp);
  complete(end, "ncclGroupEnd", kOp);
}

void NcclCommunicator::all_to_all_v(const void *send, const size_t *send_counts, const size_t *send_displs,
                                    void *recv, const size_t *recv_counts, const size_t *recv_displs,
                                    pstate_dtype_t dtype, void *stream) {
  constexpr const char *kOp = "all_to_all_v";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  if (send_counts == nullptr || send_displs == nullptr || recv_counts == nullptr || recv_displs == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(kOp), ": a counts or displacements array is NULL");
  const size_t esize = bytes_of(1, dtype, 1, options_.group_name, kOp);
  bool sends = false, receives = false;
  for (int j = 0; j < size(); ++j) {
    sends |= send_counts[j] != 0;
    receives |= recv_counts[j] != 0;
  }
  if (sends) require_buffer(send, "send", kOp);
  if (receives) require_buffer(recv, "recv", kOp);
  OpScope scope(*this, kOp, stream);
  const auto me = static_cast<size_t>(rank());
  const char *in = static_cast<const char *>(send);
  char *out = static_cast<char *>(recv);
  auto copy_own = [&] {
    if (send_counts[me] != 0) copy(out + recv_displs[me] * esize, in + send_displs[me] * esize, send_counts[me] * esize,
                                   scope.stream(), kOp);
  };
  if (size() == 1) return copy_own();
  ncclComm_t c = comm(scope.stream(), kOp);  // on every rank, even one with nothing to move
  const auto &api = nccl_->api();
  // Part j of send to rank j, part i of recv from rank i, empty ones skipped on both ends (the
  // counts agree pairwise); the own part is a device copy after the group, as scatter's.
  complete(api.GroupStart(), "ncclGroupStart", kOp);
  ncclResult_t first = ncclSuccess;
  for (int j = 0; j < size() && first == ncclSuccess; ++j) {
    if (j == rank()) continue;
    const auto i = static_cast<size_t>(j);
    if (send_counts[i] != 0)
      first = api.Send(in + send_displs[i] * esize, send_counts[i], to_nccl(dtype), j, c, scope.stream());
    if (first == ncclSuccess && recv_counts[i] != 0)
      first = api.Recv(out + recv_displs[i] * esize, recv_counts[i], to_nccl(dtype), j, c, scope.stream());
  }
  ncclResult_t end = api.GroupEnd();
  if (first != ncclSuccess) complete(first, "ncclSend/ncclRecv", kOp);
  complete(end, "ncclGroupEnd", kOp);
  copy_own();
}

namespace {
// Byte offsets of the parts of a v-collective (size + 1 entries), refusing totals that do not fit.
std::vector<size_t> part_offsets(const size_t *counts, int size, pstate_dtype_t dtype, const std::string &group,
                                 const char *op) {
  std::vector<size_t> offsets(static_cast<size_t>(size) + 1, 0);
  for (size_t b = 0; b < static_cast<size_t>(size); ++b) {
    const size_t bytes = bytes_of(counts[b], dtype, 1, group, op);
    if (__builtin_add_overflow(offsets[b], bytes, &offsets[b + 1]))
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, group, ": ", op, ": the counts add up to more than size_t holds");
  }
  return offsets;
}
}  // namespace

void NcclCommunicator::all_gatherv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                                   void *stream) {
  constexpr const char *kOp = "all_gatherv";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  if (counts == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(kOp), ": counts is NULL");
  const std::vector<size_t> off = part_offsets(counts, size(), dtype, options_.group_name, kOp);
  if (off.back() == 0) return;
  const auto me = static_cast<size_t>(rank());
  if (counts[me] != 0) require_buffer(send, "send", kOp);
  require_buffer(recv, "recv", kOp);
  OpScope scope(*this, kOp, stream);
  char *out = static_cast<char *>(recv);
  if (size() == 1) return copy(out, send, off[1], scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  const auto &api = nccl_->api();
  // SGLang's PyNccl all_gatherv: rank b broadcasts its part into recv + offset(b) everywhere
  // (its own send is the broadcast's source; in place when send == recv + offset(rank)).
  complete(api.GroupStart(), "ncclGroupStart", kOp);
  ncclResult_t first = ncclSuccess;
  for (int b = 0; b < size() && first == ncclSuccess; ++b) {
    const auto i = static_cast<size_t>(b);
    if (counts[i] == 0) continue;
    first = api.Broadcast(b == rank() ? send : nullptr, out + off[i], counts[i], to_nccl(dtype), b, c, scope.stream());
  }
  ncclResult_t end = api.GroupEnd();
  if (first != ncclSuccess) complete(first, "ncclBroadcast", kOp);
  complete(end, "ncclGroupEnd", kOp);
}

void NcclCommunicator::reduce_scatterv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                                       pstate_reduce_op_t op, void *stream) {
  constexpr const char *kOp = "reduce_scatterv";
  require_usable(kOp);
  require_reduction(dtype, op, kOp);
  if (counts == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(kOp), ": counts is NULL");
  const std::vector<size_t> off = part_offsets(counts, size(), dtype, options_.group_name, kOp);
  if (off.back() == 0) return;
  const auto me = static_cast<size_t>(rank());
  require_buffer(send, "send", kOp);
  if (counts[me] != 0) require_buffer(recv, "recv", kOp);
  OpScope scope(*this, kOp, stream);
  const char *in = static_cast<const char *>(send);
  if (size() == 1) return copy(recv, in, off[1], scope.stream(), kOp);
  ncclComm_t c = comm(scope.stream(), kOp);
  const auto &api = nccl_->api();
  // SGLang's PyNccl reduce_scatterv: part b of every rank's send is reduced to rank b's recv (in
  // place when recv == send + offset(rank)); recv is read only on the root of each reduce.
  complete(api.GroupStart(), "ncclGroupStart", kOp);
  ncclResult_t first = ncclSuccess;
  for (int b = 0; b < size() && first == ncclSuccess; ++b) {
    const auto i = static_cast<size_t>(b);
    if (counts[i] == 0) continue;
    first = api.Reduce(in + off[i], b == rank() ? recv : nullptr, counts[i], to_nccl(dtype), to_nccl(op), b, c,
                       scope.stream());
  }
  ncclResult_t end = api.GroupEnd();
  if (first != ncclSuccess) complete(first, "ncclReduce", kOp);
  complete(end, "ncclGroupEnd", kOp);
}

void NcclCommunicator::send(const void *buf, size_t count, pstate_dtype_t dtype, int dst, void *stream) {
  constexpr const char *kOp = "send";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  require_peer(dst, "dst", kOp, false);
  if (count == 0) return;
  require_buffer(buf, "buf", kOp);
  OpScope scope(*this, kOp, stream);
  ncclComm_t c = comm(scope.stream(), kOp);
  complete(nccl_->api().Send(buf, count, to_nccl(dtype), dst, c, scope.stream()), "ncclSend", kOp);
}

void NcclCommunicator::recv(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream) {
  constexpr const char *kOp = "recv";
  require_usable(kOp);
  require_dtype(dtype, kOp);
  require_peer(src, "src", kOp, false);
  if (count == 0) return;
  require_buffer(buf, "buf", kOp);
  OpScope scope(*this, kOp, stream);
  ncclComm_t c = comm(scope.stream(), kOp);
  complete(nccl_->api().Recv(buf, count, to_nccl(dtype), src, c, scope.stream()), "ncclRecv", kOp);
}

void NcclCommunicator::p2p_batch(const pstate_p2p_op_t *ops, size_t n, void *stream) {
  constexpr const char *kOp = "p2p_batch";
  require_usable(kOp);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    require_dtype(ops[i].dtype, kOp);
    require_peer(ops[i].peer, "peer", kOp, false);
    if (ops[i].count == 0) continue;
    if (ops[i].buf == nullptr || !context_.is_own_device_memory(ops[i].buf))  // the name only for the message
      require_buffer(ops[i].buf, cat("ops[", i, "].buf").c_str(), kOp);
    any = true;
  }
  if (!any) return;
  OpScope scope(*this, kOp, stream);
  ncclComm_t c = comm(scope.stream(), kOp);
  const auto &api = nccl_->api();
  complete(api.GroupStart(), "ncclGroupStart", kOp);
  ncclResult_t first = ncclSuccess;
  for (size_t i = 0; i < n && first == ncclSuccess; ++i) {
    const pstate_p2p_op_t &o = ops[i];
    if (o.count == 0) continue;
    first = o.is_send != 0 ? api.Send(o.buf, o.count, to_nccl(o.dtype), o.peer, c, scope.stream())
                           : api.Recv(o.buf, o.count, to_nccl(o.dtype), o.peer, c, scope.stream());
  }
  ncclResult_t end = api.GroupEnd();
  if (first != ncclSuccess) complete(first, "ncclSend/ncclRecv", kOp);
  complete(end, "ncclGroupEnd", kOp);
}

void NcclCommunicator::barrier() {
  constexpr const char *kOp = "barrier";
  require_usable(kOp);
  const std::string w = where(kOp);
  if (context_.capturing())
    throw_error(PSTATE_ERR_INVALID_STATE, w, ": a device barrier waits on the host, which a CUDA graph cannot "
                "record: call it outside graph-capture mode (or use the group's CPU barrier)");
  DeviceGuard guard(cuda_, context_.device_ordinal(), w);
  auto stream = static_cast<cudaStream_t>(context_.stream());
  Deadline deadline = Deadline::after_ms(options_.timeout_ms);
  if (size() > 1) {
    ncclComm_t c = comm(stream, kOp);
    if (!barrier_buffer_) barrier_buffer_ = std::make_unique<DeviceBuffer>(cuda_, sizeof(int32_t), w);
    void *one = barrier_buffer_->get();
    complete(nccl_->api().AllReduce(one, one, 1, ncclInt32, ncclSum, c, stream), "ncclAllReduce", kOp);
  }
  try {
    context_.wait_stream(stream, deadline, [&] { if (comm_ != nullptr) check_async(kOp); }, w);
  } catch (const Error &e) {
    if (e.status() != PSTATE_ERR_TIMEOUT || size() == 1 || !failure_.empty()) throw;
    fail(PSTATE_ERR_TIMEOUT, e.what(), true);  // NCCL kernels would spin forever: abort them
  }
}

// ---- factory (declared in device_comm.hpp) ---------------------------------------------------

std::unique_ptr<DeviceComm> make_nccl_device_comm(DeviceContext &context, DeviceCommOptions options,
                                                  const Logger &log) {
  auto *cuda = dynamic_cast<CudaDeviceContext *>(&context);
  if (cuda == nullptr)
    throw_error(PSTATE_ERR_INTERNAL, options.group_name, ": make_nccl_device_comm needs the context made by "
                "make_cuda_device_context");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    throw_error(PSTATE_ERR_INTERNAL, options.group_name, ": make_nccl_device_comm: rank ", options.rank,
                " of size ", options.size);
  if (options.size > 1 && !options.broadcast_from_rank0)
    throw_error(PSTATE_ERR_INTERNAL, options.group_name, ": make_nccl_device_comm: a group of ", options.size,
                " needs broadcast_from_rank0");
  return std::make_unique<NcclCommunicator>(*cuda, std::move(options), log);
}

}  // namespace pstate
