// nccl_lib.cpp — loads NCCL (see nccl_lib.hpp), checks its symbols and version, and turns
// ncclResult_t into pstate statuses and messages.
#include "transport/nccl/nccl_lib.hpp"

#include "common/error.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace pstate {

pstate_status_t status_of(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return PSTATE_OK;
    case ncclInvalidArgument: return PSTATE_ERR_INVALID_ARGUMENT;
    case ncclInvalidUsage: return PSTATE_ERR_INVALID_STATE;
    case ncclRemoteError: return PSTATE_ERR_PEER_LOST;
    case ncclInProgress: return PSTATE_ERR_TIMEOUT;  // only seen when a wait gave up
    case ncclUnhandledCudaError:
    case ncclSystemError:
    case ncclInternalError:
    default: return PSTATE_ERR_TRANSPORT;
  }
}

bool is_fatal(ncclResult_t r) {
  return r != ncclSuccess && r != ncclInProgress && r != ncclInvalidArgument && r != ncclInvalidUsage;
}

NcclLib::NcclLib(void *handle, std::string library) : handle_(handle), library_(std::move(library)) {}

NcclLib::~NcclLib() {
  if (handle_ != nullptr) dlclose(handle_);  // RTLD_NODELETE: the code stays mapped
}

const char *NcclLib::resolve() {
#define PSTATE_NCCL_RESOLVE(name)                                                       \
  api_.name = reinterpret_cast<decltype(api_.name)>(dlsym(handle_, "nccl" #name));     \
  if (api_.name == nullptr) return "nccl" #name;
  PSTATE_NCCL_RESOLVE(GetVersion)
  PSTATE_NCCL_RESOLVE(GetUniqueId)
  PSTATE_NCCL_RESOLVE(CommInitRankConfig)
  PSTATE_NCCL_RESOLVE(CommGetAsyncError)
  PSTATE_NCCL_RESOLVE(CommAbort)
  PSTATE_NCCL_RESOLVE(CommFinalize)
  PSTATE_NCCL_RESOLVE(CommDestroy)
  PSTATE_NCCL_RESOLVE(AllReduce)
  PSTATE_NCCL_RESOLVE(AllGather)
  PSTATE_NCCL_RESOLVE(ReduceScatter)
  PSTATE_NCCL_RESOLVE(Broadcast)
  PSTATE_NCCL_RESOLVE(Reduce)
  PSTATE_NCCL_RESOLVE(Send)
  PSTATE_NCCL_RESOLVE(Recv)
  PSTATE_NCCL_RESOLVE(GroupStart)
  PSTATE_NCCL_RESOLVE(GroupEnd)
  PSTATE_NCCL_RESOLVE(GetErrorString)
  PSTATE_NCCL_RESOLVE(GetLastError)
#undef PSTATE_NCCL_RESOLVE
  // Optional entry points: a library without them still loads.
  api_.CommSplit = reinterpret_cast<decltype(api_.CommSplit)>(dlsym(handle_, "ncclCommSplit"));
  api_.CommShrink = reinterpret_cast<decltype(api_.CommShrink)>(dlsym(handle_, "ncclCommShrink"));
  api_.CommRevoke = reinterpret_cast<decltype(api_.CommRevoke)>(dlsym(handle_, "ncclCommRevoke"));
  api_.MemAlloc = reinterpret_cast<decltype(api_.MemAlloc)>(dlsym(handle_, "ncclMemAlloc"));
  api_.MemFree = reinterpret_cast<decltype(api_.MemFree)>(dlsym(handle_, "ncclMemFree"));
  api_.CommRegister = reinterpret_cast<decltype(api_.CommRegister)>(dlsym(handle_, "ncclCommRegister"));
  api_.CommDeregister = reinterpret_cast<decltype(api_.CommDeregister)>(dlsym(handle_, "ncclCommDeregister"));
  api_.CommWindowRegister =
      reinterpret_cast<decltype(api_.CommWindowRegister)>(dlsym(handle_, "ncclCommWindowRegister"));
  api_.CommWindowDeregister =
      reinterpret_cast<decltype(api_.CommWindowDeregister)>(dlsym(handle_, "ncclCommWindowDeregister"));
  return nullptr;
}

std::unique_ptr<NcclLib> NcclLib::load() {
  const char *path = std::getenv(kPathVariable);
  bool from_variable = path != nullptr && path[0] != '\0';
  return load_from(from_variable ? path : nullptr, from_variable);
}

std::unique_ptr<NcclLib> NcclLib::load_from(const char *path, bool from_variable) {
  const char *name = path != nullptr ? path : kDefaultLibrary;
  // Where the name came from, as the user would write it.
  std::string origin = from_variable ? cat(kPathVariable, "=", name) : std::string(name);
  void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char *why = dlerror();
    if (from_variable)
      throw_error(PSTATE_ERR_UNSUPPORTED, "NCCL library not found: ", origin, ": ", why != nullptr ? why : "",
                  ": fix or unset ", kPathVariable, " (it must name a libnccl.so.2 file)");
    throw_error(PSTATE_ERR_UNSUPPORTED, "NCCL library not found: ", origin, ": ", why != nullptr ? why : "",
                ": install NCCL (the CUDA toolkit's, the libnccl2 package or pip nvidia-nccl-cu13) and "
                "make it visible to the loader, or set ", kPathVariable, " to its path");
  }
  std::unique_ptr<NcclLib> lib(new NcclLib(handle, name));
  if (const char *missing = lib->resolve())
    throw_error(PSTATE_ERR_UNSUPPORTED, origin, " lacks ", missing, ": it is not NCCL, or an NCCL older than ",
                "2.14; point ", kPathVariable, " at a libnccl.so.2 >= 2.14");
  if (lib->api_.GetVersion(&lib->version_) != ncclSuccess || lib->version_ < kMinVersion)
    throw_error(PSTATE_ERR_UNSUPPORTED, origin, " is NCCL ", lib->version_text(),
                ", too old: pstate needs NCCL >= 2.14 (ncclCommInitRankConfig, ncclCommFinalize)");
  return lib;
}

std::string NcclLib::version_text() const {
  // NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH.
  return cat(version_ / 10000, ".", (version_ % 10000) / 100, ".", version_ % 100);
}

std::string NcclLib::describe() const { return cat(library_, " (NCCL ", version_text(), ")"); }

const char *nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult(unknown)";
  }
}

std::string NcclLib::error_text(ncclResult_t r, ncclComm_t comm) const {
  std::string text = cat(nccl_result_name(r), ": ", api_.GetErrorString(r));
  const char *last = api_.GetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += cat(" (NCCL: ", last, ")");
  return text + "; NCCL_DEBUG=WARN prints NCCL's own account";
}

ncclUniqueId NcclLib::unique_id(const std::string &where) const {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  ncclResult_t r = api_.GetUniqueId(&id);
  if (r != ncclSuccess)
    throw_error(status_of(r), where, ": ncclGetUniqueId: ", error_text(r, nullptr),
                " (NCCL_SOCKET_IFNAME chooses the interface its bootstrap listens on)");
  return id;
}

}  // namespace pstate
