// nccl_comm.hpp — NcclCommunicator: the device communicator of one group (SGLang's PyNccl).
//
// Lifecycle of the NCCL communicator inside it:
//   none ──first device op / ensure_ready()──▶ creating ──▶ ready ──~ / finalize──▶ destroyed
//                                                 │            │
//                                                 └─ error, timeout, fatal async error, abort()
//                                                              ▼
//                                       aborted (ops throw ABORTED), or revoked: NCCL >= 2.28
//                                       after it was ready (ncclCommRevoke stops its kernels,
//                                       ops throw ABORTED) ──shrink()──▶ the survivors' new one
// Creation: group rank 0 calls ncclGetUniqueId and the id is broadcast over the group's CPU
// communicator (the callback); every rank calls ncclCommInitRankConfig with blocking = 0 and
// polls ncclCommGetAsyncError until it is ready or the context timeout passes (then it aborts the
// communicator: TIMEOUT). Or the communicator is made by split() on a parent's (ncclCommSplit with
// splitShare, collective over the parent's ranks, no unique id), settled the same way; or, after a
// failure, by shrink() on the failed world's (ncclCommShrink with NCCL_SHRINK_ABORT over the
// survivors, the dead excluded, no unique id). Non-blocking mode is also why every later NCCL call
// that answers ncclInProgress is waited out the same way before the next one (NCCL runs each such
// call on a helper thread; DeviceCommOptions::nccl_blocking trades the bound for NCCL's faster
// blocking mode). A group of one never creates an NCCL communicator: its operations are
// device-to-device copies on the stream, or nothing.
//
// Operations check, in order: the communicator is usable (else ABORTED with the first failure),
// the arguments (dtype, op, ranks, then each buffer's memory: host memory or another device's is
// INVALID_ARGUMENT), the stream (context/capture rules, see CudaDeviceContext::stream_for); then
// make the context's device current (DeviceGuard) and enqueue. reduce is ncclReduce; gather,
// scatter and all_to_all are grouped ncclSend/ncclRecv (so any NCCL >= 2.14 serves; scatter as
// vLLM's PyNccl does it); all_gatherv and reduce_scatterv are grouped ncclBroadcast / ncclReduce,
// one per non-empty part (SGLang's PyNccl); barrier is a 1-element all_reduce on the
// context stream, waited for with the deadline while watching NCCL's asynchronous errors.
#pragma once

#include "transport/nccl/cuda_context.hpp"
#include "transport/device_comm.hpp"

#include <memory>
#include <string>

namespace pstate {

class NcclCommunicator final : public DeviceComm {
 public:
  NcclCommunicator(CudaDeviceContext &context, DeviceCommOptions options, const Logger &log);
  ~NcclCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  void set_timeout_ms(int64_t timeout_ms) override { options_.timeout_ms = timeout_ms; }

  void all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                  void *stream) override;
  void all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, void *stream) override;
  void reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                      void *stream) override;
  void broadcast(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream) override;
  void gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int dst, void *stream) override;
  void all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype, void *stream) override;
  void reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, int root,
              void *stream) override;
  void scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root, void *stream) override;
  void all_gatherv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype, void *stream) override;
  void all_to_all_v(const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                    const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype,
                    void *stream) override;
  void reduce_scatterv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype, pstate_reduce_op_t op,
                       void *stream) override;
  void send(const void *buf, size_t count, pstate_dtype_t dtype, int dst, void *stream) override;
  void recv(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream) override;
  void p2p_batch(const pstate_p2p_op_t *ops, size_t n, void *stream) override;
  void barrier() override;

  void ensure_ready() override;
  bool ready() const override { return options_.size == 1 || comm_ != nullptr; }
  void abort() noexcept override;
  // Children made by ncclCommSplit (splitShare) instead of a unique-id bootstrap each
  bool can_split() const override;
  std::unique_ptr<DeviceComm> split(int color, int key, DeviceCommOptions child) override;
  // The survivors' communicator made by ncclCommShrink (pstate_shrink)
  bool can_shrink() const override;
  std::unique_ptr<DeviceComm> shrink(const std::vector<int> &exclude, DeviceCommOptions child) override;
  // Registered memory (group memory): symmetric windows (collective) and user buffers (local)
  const void *nccl_handle() const override { return comm_; }
  std::string windows_unavailable() const override;
  void *window_register(void *p, size_t bytes, std::string *why) override;
  void window_deregister(void *window) noexcept override;
  void *buffer_register(void *p, size_t bytes, std::string *why) override;
  void buffer_deregister(void *handle) noexcept override;

 private:
  class OpScope;

  std::string where(const char *op) const;
  // ---- argument checks (throw INVALID_ARGUMENT / UNSUPPORTED) ----
  void require_usable(const char *op) const;
  void require_dtype(pstate_dtype_t dtype, const char *op) const;
  void require_reduction(pstate_dtype_t dtype, pstate_reduce_op_t op, const char *what);
  void require_peer(int peer, const char *name, const char *op, bool allow_self) const;
  void require_buffer(const void *p, const char *name, const char *op) const;
  // ---- the NCCL communicator ----
  ncclComm_t comm(cudaStream_t stream, const char *op);  // creates it on first use
  void create(const char *op);
  // Waits while NCCL reports ncclInProgress (non-blocking mode); returns the settled result.
  ncclResult_t settle(ncclResult_t r, const char *call, const char *op);
  // Success, or throws: fatal results abort the communicator first.
  void complete(ncclResult_t r, const char *call, const char *op);
  // Throws when NCCL reported an asynchronous error (e.g. a peer died) on this communicator.
  void check_async(const char *op);
  [[noreturn]] void fail(pstate_status_t status, const std::string &message, bool fatal);
  void abort_comm() noexcept;
  void take_child(NcclCommunicator &child, ncclComm_t created, ncclResult_t r, const char *call, const char *what,
                  const char *op);
  // After a fatal error: ncclCommRevoke where NCCL has it and shrink could follow (the in-flight
  // operations stop, the communicator stays for shrink()), else ncclCommAbort.
  void stop_comm() noexcept;
  // ---- a group of one ----
  void copy(void *dst, const void *src, size_t bytes, cudaStream_t stream, const char *op) const;

  CudaDeviceContext &context_;
  const CudaLib &cuda_;
  DeviceCommOptions options_;
  Logger log_;
  const NcclLib *nccl_ = nullptr;  // the context's, set when the NCCL communicator is created
  std::string comm_name_;  // "pstate tp:0", alive as long as the NCCL communicator
  ncclComm_t comm_ = nullptr;
  std::string failure_;    // why the communicator is unusable; empty while usable
  bool made_ = false;      // the NCCL communicator became ready once (only such a one is revoked)
  bool revoked_ = false;   // ncclCommRevoke'd: shrink or abort only (finalize is invalid after it)
  std::unique_ptr<DeviceBuffer> barrier_buffer_;
};

}  // namespace pstate
