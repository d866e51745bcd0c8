// device_comm.hpp — what the group layer sees of CUDA and NCCL: three small interfaces, no CUDA.
//
// SGLang's GroupCoordinator holds a device communicator (PyNccl) beside its CPU group, and a
// module-level graph_capture() that switches every group into capture mode. pstate splits that
// in two objects, both created only for CUDA contexts:
//
//   DeviceContext  one per pstate_t: the loaded CUDA runtime and NCCL, the device, the context
//                  stream, and graph-capture mode (so "every group in capture mode" is one flag
//                  that every communicator of the context consults).
//   DeviceComm     one per group: the NCCL communicator, created lazily on first device use
//                  (SGLang's eager MoE communicators cost ~700 MB each), its unique id broadcast
//                  from group rank 0 over the group's CPU communicator through a callback, so
//                  this layer does not depend on the group layer. A group of one needs no NCCL.
//
// This header compiles without CUDA or NCCL headers: the implementations live in
// src/transport/nccl/ (built only when the toolkit headers are found) and, when they are not,
// src/transport/device_comm_none.cpp defines the factories to throw PSTATE_ERR_UNSUPPORTED
// "this libpstate was built without the CUDA backend". Nothing links against CUDA: the runtime
// and NCCL are dlopen'ed at run time, so one libpstate runs on hosts with and without GPUs.
//
// Errors are pstate::Error (see common/error.hpp) carrying the group name, the call and the fix.
// Thread rules: as the C API's: one thread at a time per DeviceContext and its communicators,
// except DeviceComm::abort(), which may run on any thread while no other call runs.
#pragma once

#include "common/error.hpp"
#include "common/log.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pstate {

// ---- what `pstate info` prints --------------------------------------------------------------

struct CudaBackendStatus {
  bool built = false;        // compiled with the CUDA/NCCL headers
  bool usable = false;       // CUDA runtime and NCCL load here and at least one device exists
  bool cuda_runtime_loaded = false;  // a libcudart loaded (it may still see no device)
  bool nccl_loaded = false;          // NCCL loaded (PSTATE_NCCL_LIBRARY, else libnccl.so.2)
  int device_count = 0;      // devices the CUDA runtime sees (0 when it cannot say)
  std::string build;         // "CUDA 13.0, NCCL 2.28.9 headers" or "not built"
  std::string cuda_runtime;  // "libcudart.so.13 (runtime 13.0, driver 12.8)" or why it failed
  std::string nccl;          // "libnccl.so.2 (NCCL 2.28.9)" or why it failed
  std::string summary;       // one line: "usable: 8 CUDA devices" / "not usable: no CUDA device: ..."
};

// Loads (and then drops) the CUDA runtime and NCCL to report what a CUDA context would get
// here. Never throws; cheap enough for a CLI command, not for a hot path.
CudaBackendStatus cuda_backend_status();

// ---- where a pointer lives ------------------------------------------------------------------

struct MemoryLocation {
  enum class Kind { kHost, kPinnedHost, kDevice, kManaged };
  Kind kind = Kind::kHost;
  int device = -1;  // CUDA ordinal for kDevice/kManaged, -1 for host memory
};

// For CPU contexts: refuses CUDA device memory with INVALID_ARGUMENT ("send is CUDA device
// memory (device 0) but this context is CPU ..."). It only looks at a libcuda.so.1 that the
// process has already loaded: a process that never loaded CUDA cannot hold a device pointer, so
// CPU-only processes pay a scan of the loaded objects (one dl_iterate_phdr callback, ~30 ns with
// its lock) at most once per tick of the coarse clock (CLOCK_MONOTONIC_COARSE, 1-4 ms; reading it
// costs ~5 ns) until CUDA appears. Skipping the scan within a tick is safe: a driver loaded since
// the last scan cannot have produced a device pointer yet (cuInit alone takes far longer).
// Managed and pinned host memory are accepted (the CPU can read them). No-op in builds without
// the CUDA backend.
class HostPointerCheck {
 public:
  HostPointerCheck() = default;
  ~HostPointerCheck();
  HostPointerCheck(const HostPointerCheck &) = delete;
  HostPointerCheck &operator=(const HostPointerCheck &) = delete;

  // where: "tp:0: all_reduce"; name: "send".
  void require_host(const void *p, const char *name, const std::string &where);
  // Whether the process has loaded the CUDA driver (only then can a pointer be device memory):
  // callers skip building `where` when it has not. After the first scan, only a change in the
  // loader's count of loaded objects triggers another, and none is made within the coarse-clock
  // tick of the last one.
  bool cuda_loaded() { return find_driver(); }

 private:
  bool find_driver();
  void *driver_ = nullptr;          // dlopen handle of the already loaded libcuda.so.1
  void *get_attribute_ = nullptr;   // cuPointerGetAttribute
  unsigned long long scanned_adds_ = ~0ull;  // the loader's dlpi_adds at the last full scan
  long long scanned_tick_ = -1;              // CLOCK_MONOTONIC_COARSE (ns) of the last scan
};

// ---- the CUDA side of one pstate_t ----------------------------------------------------------

struct DeviceContextOptions {
  int device_ordinal = 0;     // made current on the creating thread (cudaSetDevice)
  bool load_nccl = true;      // false when the world has one rank (no NCCL needed)
  int64_t timeout_ms = 600000;
  std::string socket_ifname;  // PSTATE_SOCKET_IFNAME's rule: NCCL gets it as NCCL_SOCKET_IFNAME
                              // (same syntax) unless the user set that variable
  void *stream = nullptr;     // the context stream; nullptr = CUDA's default (legacy) stream,
                              // so NULL in the C API orders with the caller's default-stream work
  // The pstate context's abort flag (pstate_revoke / pstate_abort from another thread): every
  // wait of the device side (a stream drain, a non-blocking NCCL call settling) throws
  // PSTATE_ERR_ABORTED at its next poll once it is set. nullptr: none.
  const std::atomic<bool> *abort_requested = nullptr;
};

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;

  virtual int device_ordinal() const = 0;
  // The stream used when a call passes NULL (outside capture mode).
  virtual void *stream() const = 0;
  // "cuda:0 (sm_90, 0000:1b:00.0), libcudart.so.13 runtime 13.0 driver 13.0, NCCL 2.28.9"
  virtual std::string describe() const = 0;
  virtual MemoryLocation locate(const void *p) const = 0;
  // Throws INVALID_ARGUMENT unless p is device memory of this context's device (or managed).
  virtual void require_device_pointer(const void *p, const char *name, const std::string &where) const = 0;
  // Waits until the context stream has drained, up to the timeout (TIMEOUT names `where`).
  // INVALID_STATE while capturing.
  virtual void synchronize(const std::string &where) = 0;

  // Graph capture (SGLang's graph_capture()). begin: INVALID_STATE when already capturing;
  // returns the stream to capture on: `stream` itself, or when nullptr a stream owned by the
  // context; either way, when it differs from the context stream it first waits (event) on the
  // context stream, so work enqueued before capture is ordered before the captured work.
  // While capturing, a collective on any other stream is INVALID_STATE (streams forked into the
  // same CUDA capture are accepted) and NULL means the capture stream. end: INVALID_STATE when
  // not capturing or when the capture stream is still capturing (call cudaStreamEndCapture
  // first); the context stream then waits on the capture stream. The lead's
  // pstate_graph_capture_begin must call DeviceComm::ensure_ready() on every group first.
  virtual void *begin_capture(void *stream) = 0;
  virtual void end_capture() = 0;
  virtual bool capturing() const = 0;
  virtual void *capture_stream() const = 0;  // nullptr when not capturing

  // The flight recorder's device times (PSTATE_TRACE_CUDA_EVENTS=1, common/trace.hpp):
  // trace_op(id) names the recorder entry of the operation about to enqueue (0: none); each
  // communicator brackets what it enqueues for it with timing events (trace_bracket); trace_times
  // answers, from any thread, when the stream ran entry id (wall clock, ns; -1 while the stream
  // has not got there; false when there are no events for it: off, capturing, or overwritten).
  virtual void enable_trace_events() {}
  virtual void trace_op(uint64_t) {}
  virtual void trace_bracket(bool /*end*/, void * /*cuda stream*/) {}
  virtual bool trace_times(uint64_t, int64_t *, int64_t *) { return false; }

  // ---- group memory (pstate_mem_alloc; group/group_memory.hpp) ----
  // bytes of device memory of this context's device: ncclMemAlloc when NCCL is loaded and has it
  // (NCCL >= 2.19: memory NCCL can map for peers and register as a window), else cudaMalloc;
  // *from_nccl says which (the one mem_free must use). NO_MEMORY naming `where` when it fails.
  virtual void *mem_alloc(size_t bytes, bool *from_nccl, const std::string &where) {
    (void)bytes;
    (void)from_nccl;
    throw_error(PSTATE_ERR_UNSUPPORTED, where, ": this libpstate was built without the CUDA backend");
  }
  // Frees what mem_alloc returned (ncclMemFree / cudaFree). Never throws.
  virtual void mem_free(void *p, bool from_nccl) noexcept {
    (void)p;
    (void)from_nccl;
  }
  // NCCL_VERSION_CODE of the NCCL this context loaded (22809), 0 when none is loaded (a world of one).
  virtual int nccl_version() const { return 0; }
};

// Loads the CUDA runtime (and NCCL when options.load_nccl), checks the device and makes it
// current on this thread. Errors: UNSUPPORTED "CUDA runtime not found (tried ...)", "no CUDA
// device: cudaGetDeviceCount: insufficient driver ...", "NCCL library not found: ..."; or
// "this libpstate was built without the CUDA backend"; INVALID_ARGUMENT for an ordinal >= the
// device count.
std::unique_ptr<DeviceContext> make_cuda_device_context(const DeviceContextOptions &options, const Logger &log);

// ---- the device communicator of one group ---------------------------------------------------

// Broadcasts n bytes from group rank 0 to every rank of the group (in place), over the group's
// CPU communicator. Called once per communicator, on every rank, from inside the first device
// operation (or ensure_ready); it may throw (TIMEOUT, PEER_LOST), which propagates.
using BroadcastFromRank0 = std::function<void(void *bytes, size_t n)>;

struct DeviceCommOptions {
  std::string group_name;  // "tp:0", for messages and the NCCL communicator's name
  int rank = 0;            // rank in group
  int size = 1;            // group size
  int64_t timeout_ms = 600000;
  BroadcastFromRank0 broadcast_from_rank0;  // not called when size == 1
  // ncclConfig_t.blocking. false (default): NCCL's non-blocking mode, so creation and every
  // call are bounded by the timeout and a missing peer is a TIMEOUT; but NCCL then launches each
  // operation from a helper thread it creates per call, which costs host time per call (CUDA
  // graph replays do not pay it). true: NCCL's blocking mode, the fast eager path; creation then
  // waits for the peers without a bound (they were alive a moment before: they took part in
  // the unique-id broadcast). Barriers stay bounded either way.
  bool nccl_blocking = false;
};

// Every operation is enqueued on `stream` (cudaStream_t; nullptr = the context stream, or the
// capture stream while capturing) and returns at once, as NCCL does. Ranks are ranks in the
// group; count 0 is legal and enqueues nothing. Buffers must be device memory of the context's
// device (or managed): host memory or another device's memory is INVALID_ARGUMENT. Reductions
// on fp8 need NCCL >= 2.24 and sm_90 (else UNSUPPORTED). After a fatal NCCL error the
// communicator is aborted (or, where NCCL has ncclCommRevoke, revoked: its in-flight operations
// stopped, kept for shrink()) and later calls throw ABORTED.
class DeviceComm {
 public:
  virtual ~DeviceComm() = default;  // graceful: ncclCommFinalize (up to the timeout) + destroy

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The bound of every later wait of this communicator on the host (a non-blocking call settling,
  // a stream drain): the group's timeout (pstate_group_set_timeout), first from the options.
  virtual void set_timeout_ms(int64_t timeout_ms) = 0;

  virtual void all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                          pstate_reduce_op_t op, void *stream) = 0;
  virtual void all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                          void *stream) = 0;
  virtual void reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                              pstate_reduce_op_t op, void *stream) = 0;
  virtual void broadcast(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream) = 0;
  // recv is read only on dst (may be nullptr elsewhere).
  virtual void gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int dst,
                      void *stream) = 0;
  virtual void all_to_all(const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype,
                          void *stream) = 0;
  // ncclReduce; recv is read only on root (may be nullptr elsewhere).
  virtual void reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                      int root, void *stream) = 0;
  // Block r of root's send (size() * recv_count elements) to rank r's recv; send is read only on
  // root (may be nullptr elsewhere).
  virtual void scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root,
                       void *stream) = 0;
  // The variable-size collectives (counts: size() entries; part b at offset counts[0] + ... +
  // counts[b-1]), as SGLang's PyNccl does them: one NCCL group of an ncclBroadcast from every
  // rank b into recv + offset(b) (all_gatherv; send is counts[rank()] elements), or of an
  // ncclReduce of send + offset(b) to every rank b (reduce_scatterv; recv is counts[rank()]
  // elements). Empty parts are skipped; buffers of an empty part are not read and may be nullptr.
  virtual void all_gatherv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype, void *stream) = 0;
  virtual void reduce_scatterv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                               pstate_reduce_op_t op, void *stream) = 0;
  // Point-to-point to another rank of the group (self is INVALID_ARGUMENT: it would never match).
  virtual void send(const void *buf, size_t count, pstate_dtype_t dtype, int dst, void *stream) = 0;
  virtual void recv(void *buf, size_t count, pstate_dtype_t dtype, int src, void *stream) = 0;
  // pstate_p2p_batch: every op (a send or a receive with another rank) in one NCCL group on
  // stream, so no listing order deadlocks; ops with count 0 enqueue nothing.
  virtual void p2p_batch(const pstate_p2p_op_t *ops, size_t n, void *stream) = 0;
  // A 1-element all_reduce on the context stream, then waits for that stream (up to the
  // timeout, watching NCCL's asynchronous errors). Blocking; INVALID_STATE while capturing.
  virtual void barrier() = 0;

  // Creates the NCCL communicator now if it does not exist yet (collective over the group).
  virtual void ensure_ready() = 0;
  virtual bool ready() const = 0;
  // ncclCommAbort: local, does not wait for peers; later calls throw ABORTED. Never throws.
  virtual void abort() noexcept = 0;

  // ---- communicators split from this one (ncclCommSplit) ----
  // Whether split() can work now: the NCCL communicator exists and is usable, and the loaded
  // NCCL has ncclCommSplit (>= 2.18).
  virtual bool can_split() const { return false; }
  // ncclCommSplit with splitShare = 1: collective over every rank of this communicator, no unique
  // id. The ranks passing one color >= 0 form a child, ranked by key; color < 0 joins none
  // (returns nullptr). child describes the new communicator (its group name, rank and size in the
  // child). Throws as creation does (TIMEOUT, TRANSPORT, ...).
  virtual std::unique_ptr<DeviceComm> split(int color, int key, DeviceCommOptions child) = 0;

  // ---- the survivors' communicator shrunk from this one (ncclCommShrink, pstate_shrink) ----
  // Whether shrink() can work: the NCCL communicator exists (usable, or revoked after a failure)
  // and the loaded NCCL has ncclCommShrink (>= 2.27).
  virtual bool can_shrink() const { return false; }
  // ncclCommShrink with NCCL_SHRINK_ABORT (the parent's ongoing operations are terminated first):
  // collective over every rank of this communicator except `exclude` (ranks of this
  // communicator, ascending, the same list on every caller), no unique id; the others keep their
  // order. child describes the new communicator. Afterwards this one only aborts. Throws as
  // creation does (TIMEOUT when a survivor does not take part, TRANSPORT, ...).
  virtual std::unique_ptr<DeviceComm> shrink(const std::vector<int> &exclude, DeviceCommOptions child) {
    (void)exclude;
    (void)child;
    throw_error(PSTATE_ERR_INTERNAL, "DeviceComm::shrink without ncclCommShrink");
  }

  // ---- registered memory (group/group_memory.hpp decides what to register) ----
  // The NCCL communicator a registration belongs to (nullptr while there is none): when it
  // changes (made anew, shrunk), registrations made on the old one are gone with it.
  virtual const void *nccl_handle() const { return nullptr; }
  // Why symmetric windows cannot be had on this communicator, "" when they can: one rank (no NCCL
  // communicator), NCCL older than 2.27 or without ncclCommWindowRegister.
  virtual std::string windows_unavailable() const { return "no NCCL communicator"; }
  // ncclCommWindowRegister(p, bytes, NCCL_WIN_COLL_SYMMETRIC): collective over the communicator
  // (made first if needed). Returns the window, or nullptr with *why when NCCL refused it (an
  // argument or usage error: the communicator stays usable); a fatal error throws as an operation's.
  virtual void *window_register(void *p, size_t bytes, std::string *why) {
    (void)p;
    (void)bytes;
    *why = windows_unavailable();
    return nullptr;
  }
  // ncclCommWindowDeregister; never throws (a failure is logged).
  virtual void window_deregister(void *window) noexcept { (void)window; }
  // ncclCommRegister: local (the communicator must exist: nullptr + *why otherwise, as for a
  // refusal or an NCCL without it).
  virtual void *buffer_register(void *p, size_t bytes, std::string *why) {
    (void)p;
    (void)bytes;
    *why = "no NCCL communicator";
    return nullptr;
  }
  virtual void buffer_deregister(void *handle) noexcept { (void)handle; }

  // ---- added after the rest (the vtable only grows at its end) ----
  // all_to_all_v (MPI_Alltoallv; arrays of size() entries, counts and displacements in elements):
  // one NCCL group of an ncclSend of part j to every rank j and an ncclRecv of part i from every
  // rank i, skipping empty parts (the pairs' counts agree: src/group/ compares them under
  // PSTATE_CHECK=1); the own part is a device copy on the stream. Every rank joins the call's
  // communicator even with nothing to move, so its creation stays collective.
  virtual void all_to_all_v(const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                            const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype,
                            void *stream) = 0;
};

// The NCCL device communicator of one group. `context` must outlive it (destroy every
// DeviceComm before its DeviceContext). No communication happens here: the NCCL communicator is
// created on first use or by ensure_ready().
std::unique_ptr<DeviceComm> make_nccl_device_comm(DeviceContext &context, DeviceCommOptions options,
                                                  const Logger &log);

}  // namespace pstate
