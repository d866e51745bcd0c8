// nccl_lib.hpp — NCCL, dlopen'ed at run time: the only code that knows how it is loaded.
//
// Opens libnccl.so.2 through the loader's search path, or the file named by PSTATE_NCCL_LIBRARY
// (like SGLang's SGLANG_NCCL_SO_PATH: a pip wheel's nvidia/nccl/lib/libnccl.so.2, a custom
// build), resolves every symbol pstate calls with a check, and maps ncclResult_t to
// pstate_status_t. pstate needs NCCL >= 2.14 (ncclCommInitRankConfig, ncclCommFinalize, the
// non-blocking config); fp8 types exist from 2.24. Opened RTLD_NODELETE: NCCL's bootstrap and
// proxy threads must never see their code unmapped.
#pragma once

#include <pstate/pstate.h>

#include <nccl.h>

#include <memory>
#include <string>

namespace pstate {

// pstate's dtype and op numbers are NCCL's, so they are passed through unchanged.
static_assert(PSTATE_INT8 == static_cast<int>(ncclInt8) && PSTATE_UINT8 == static_cast<int>(ncclUint8) &&
              PSTATE_INT32 == static_cast<int>(ncclInt32) && PSTATE_UINT32 == static_cast<int>(ncclUint32) &&
              PSTATE_INT64 == static_cast<int>(ncclInt64) && PSTATE_UINT64 == static_cast<int>(ncclUint64) &&
              PSTATE_FLOAT16 == static_cast<int>(ncclFloat16) && PSTATE_FLOAT32 == static_cast<int>(ncclFloat32) &&
              PSTATE_FLOAT64 == static_cast<int>(ncclFloat64) && PSTATE_BFLOAT16 == static_cast<int>(ncclBfloat16) &&
              PSTATE_FP8_E4M3 == static_cast<int>(ncclFloat8e4m3) &&
              PSTATE_FP8_E5M2 == static_cast<int>(ncclFloat8e5m2) && PSTATE_DTYPE_COUNT == static_cast<int>(ncclNumTypes),
              "pstate_dtype_t must equal ncclDataType_t");
static_assert(PSTATE_SUM == static_cast<int>(ncclSum) && PSTATE_PROD == static_cast<int>(ncclProd) &&
              PSTATE_MAX == static_cast<int>(ncclMax) && PSTATE_MIN == static_cast<int>(ncclMin) &&
              PSTATE_AVG == static_cast<int>(ncclAvg) && PSTATE_REDUCE_OP_COUNT == static_cast<int>(ncclNumOps),
              "pstate_reduce_op_t must equal ncclRedOp_t");

inline ncclDataType_t to_nccl(pstate_dtype_t dtype) { return static_cast<ncclDataType_t>(dtype); }
inline ncclRedOp_t to_nccl(pstate_reduce_op_t op) { return static_cast<ncclRedOp_t>(op); }

// ncclRemoteError (a peer exited or its link broke) → PEER_LOST; ncclInvalidArgument →
// INVALID_ARGUMENT; ncclInvalidUsage → INVALID_STATE; CUDA, system and NCCL-internal errors →
// TRANSPORT (they are failures below pstate, not pstate bugs).
pstate_status_t status_of(ncclResult_t r);
// "ncclRemoteError"
const char *nccl_result_name(ncclResult_t r);
// Whether NCCL says the communicator is unusable after r (everything but argument errors).
bool is_fatal(ncclResult_t r);

class NcclLib {
 public:
  struct Api {
    decltype(&::ncclGetVersion) GetVersion = nullptr;
    decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
    decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
    decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
    decltype(&::ncclCommAbort) CommAbort = nullptr;
    decltype(&::ncclCommFinalize) CommFinalize = nullptr;
    decltype(&::ncclCommDestroy) CommDestroy = nullptr;
    decltype(&::ncclAllReduce) AllReduce = nullptr;
    decltype(&::ncclAllGather) AllGather = nullptr;
    decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
    decltype(&::ncclBroadcast) Broadcast = nullptr;
    decltype(&::ncclReduce) Reduce = nullptr;
    decltype(&::ncclSend) Send = nullptr;
    decltype(&::ncclRecv) Recv = nullptr;
    decltype(&::ncclGroupStart) GroupStart = nullptr;
    decltype(&::ncclGroupEnd) GroupEnd = nullptr;
    decltype(&::ncclGetErrorString) GetErrorString = nullptr;
    decltype(&::ncclGetLastError) GetLastError = nullptr;
    // Optional (NCCL >= 2.18); nullptr when the library lacks it (groups then bootstrap)
    decltype(&::ncclCommSplit) CommSplit = nullptr;
    // Optional (NCCL >= 2.27 / 2.28), typed here so that older headers compile: a shrink after a
    // rank died (pstate_shrink) and the revocation that keeps a failed communicator shrinkable.
    ncclResult_t (*CommShrink)(ncclComm_t comm, int *exclude, int exclude_count, ncclComm_t *newcomm,
                               ncclConfig_t *config, int flags) = nullptr;
    ncclResult_t (*CommRevoke)(ncclComm_t comm, int flags) = nullptr;
    // Optional, for group memory (pstate_mem_alloc), typed here for the same reason:
    // ncclMemAlloc/Free (>= 2.19), user-buffer registration ncclCommRegister/Deregister (>= 2.19)
    // and symmetric windows ncclCommWindowRegister/Deregister (>= 2.27; the window is an
    // ncclWindow_t).
    ncclResult_t (*MemAlloc)(void **ptr, size_t size) = nullptr;
    ncclResult_t (*MemFree)(void *ptr) = nullptr;
    ncclResult_t (*CommRegister)(ncclComm_t comm, void *buff, size_t size, void **handle) = nullptr;
    ncclResult_t (*CommDeregister)(ncclComm_t comm, void *handle) = nullptr;
    ncclResult_t (*CommWindowRegister)(ncclComm_t comm, void *buff, size_t size, void **win, int flags) = nullptr;
    ncclResult_t (*CommWindowDeregister)(ncclComm_t comm, void *win) = nullptr;
  };
  // ncclCommWindowRegister's flag for a window the symmetric kernels use (NCCL_WIN_COLL_SYMMETRIC, 2.27).
  static constexpr int kWinCollSymmetric = 0x01;

  // ncclCommShrink's flag: terminate the parent's ongoing operations first (nccl.h's
  // NCCL_SHRINK_ABORT, 2.27).
  static constexpr int kShrinkAbort = 0x01;

  static constexpr const char *kDefaultLibrary = "libnccl.so.2";
  static constexpr const char *kPathVariable = "PSTATE_NCCL_LIBRARY";
  static constexpr int kMinVersion = NCCL_VERSION(2, 14, 0);

  // Opens $PSTATE_NCCL_LIBRARY when set (and not empty), else libnccl.so.2. Throws UNSUPPORTED:
  // "NCCL library not found: PSTATE_NCCL_LIBRARY=/x: <dlerror>: ..." naming the path and the
  // variable, "... lacks ncclCommInitRankConfig ..." for a file that is not a usable NCCL, or
  // "NCCL 2.12.3 is too old ...".
  static std::unique_ptr<NcclLib> load();
  // The same with an explicit path (nullptr: libnccl.so.2); from_variable says whether the path
  // came from PSTATE_NCCL_LIBRARY, for the message.
  static std::unique_ptr<NcclLib> load_from(const char *path, bool from_variable);

  ~NcclLib();
  NcclLib(const NcclLib &) = delete;
  NcclLib &operator=(const NcclLib &) = delete;

  const Api &api() const { return api_; }
  const std::string &library() const { return library_; }
  int version() const { return version_; }  // NCCL_VERSION_CODE of the loaded library: 22809
  std::string version_text() const;          // "2.28.9"
  std::string describe() const;              // "libnccl.so.2 (NCCL 2.28.9)"
  bool has_fp8() const { return version_ >= NCCL_VERSION(2, 24, 0); }
  // ncclCommSplit (NCCL >= 2.18) and ncclConfig_t.splitShare (same release): a child
  // communicator made from a parent's ranks, sharing its resources, without a unique id.
  bool has_split() const { return api_.CommSplit != nullptr && version_ >= NCCL_VERSION(2, 18, 0); }
  // ncclCommShrink (NCCL >= 2.27): the survivors' communicator made from the failed one, without
  // the dead ranks and without a unique id.
  bool has_shrink() const { return api_.CommShrink != nullptr && version_ >= NCCL_VERSION(2, 27, 0); }
  // ncclCommRevoke (NCCL >= 2.28): stops a communicator's in-flight operations (a kernel waiting
  // for a dead peer) without freeing it, so it can still be shrunk.
  bool has_revoke() const { return api_.CommRevoke != nullptr && has_shrink(); }
  // ncclMemAlloc / ncclMemFree (NCCL >= 2.19): memory NCCL can register and map for peers.
  bool has_mem_alloc() const { return api_.MemAlloc != nullptr && api_.MemFree != nullptr; }
  // ncclCommRegister / ncclCommDeregister (NCCL >= 2.19): local user-buffer registration.
  bool has_buffer_register() const { return api_.CommRegister != nullptr && api_.CommDeregister != nullptr; }
  // Symmetric windows (NCCL >= 2.27): ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC.
  bool has_windows() const {
    return api_.CommWindowRegister != nullptr && api_.CommWindowDeregister != nullptr && has_mem_alloc() &&
           version_ >= NCCL_VERSION(2, 27, 0);
  }

  // "ncclRemoteError: remote process exited or there was a network error (NCCL: <last error>)"
  // comm may be nullptr (then NCCL's last global error is used).
  std::string error_text(ncclResult_t r, ncclComm_t comm) const;
  // A fresh unique id (rank 0's job). Throws TRANSPORT with NCCL's reason.
  ncclUniqueId unique_id(const std::string &where) const;

 private:
  NcclLib(void *handle, std::string library);
  const char *resolve();
  void *handle_;
  std::string library_;
  Api api_;
  int version_ = 0;
};

}  // namespace pstate
