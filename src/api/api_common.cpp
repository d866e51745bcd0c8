// api_common.cpp — entry points without a handle: status and enum names, versions, last error.
#include "api/boundary.hpp"

#include <iterator>
#include <string>

namespace pstate::api {

namespace {
thread_local std::string t_last_error;
}

void set_last_error(const std::string &message) { t_last_error = message; }
const char *last_error_cstr() { return t_last_error.c_str(); }

void require_dtype(pstate_dtype_t dtype) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= PSTATE_DTYPE_COUNT)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "dtype ", static_cast<int>(dtype),
                " is not a pstate_dtype_t (0..", PSTATE_DTYPE_COUNT - 1, ")");
}
void require_op(pstate_reduce_op_t op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= PSTATE_REDUCE_OP_COUNT)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "op ", static_cast<int>(op),
                " is not a pstate_reduce_op_t (0..", PSTATE_REDUCE_OP_COUNT - 1, ")");
}
void require_group_kind(pstate_group_kind_t kind) {
  const int k = static_cast<int>(kind);
  if (k >= PSTATE_GROUP_FIRST_NON_LAYOUT_KIND && pstate_group_kind_name(kind) != nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "group kind ", pstate_group_kind_name(kind), " (", k,
                ") is not a pstate_group_kind_t of the layout (0..", PSTATE_GROUP_KIND_COUNT - 1, "; kinds from ",
                PSTATE_GROUP_FIRST_NON_LAYOUT_KIND, " on are not layout kinds): custom groups are made by "
                "pstate_new_group; keep the pstate_group_t it returned");
  if (k < 0 || k >= PSTATE_GROUP_KIND_COUNT)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "group kind ", k, " is not a pstate_group_kind_t of the layout (0..",
                PSTATE_GROUP_KIND_COUNT - 1, ")");
}

}  // namespace pstate::api

extern "C" {

PSTATE_API const char *pstate_status_string(pstate_status_t s) {
  switch (s) {
    case PSTATE_OK: return "PSTATE_OK";
    case PSTATE_ERR_INVALID_ARGUMENT: return "PSTATE_ERR_INVALID_ARGUMENT";
    case PSTATE_ERR_INVALID_STATE: return "PSTATE_ERR_INVALID_STATE";
    case PSTATE_ERR_UNSUPPORTED: return "PSTATE_ERR_UNSUPPORTED";
    case PSTATE_ERR_NO_MEMORY: return "PSTATE_ERR_NO_MEMORY";
    case PSTATE_ERR_TIMEOUT: return "PSTATE_ERR_TIMEOUT";
    case PSTATE_ERR_PEER_LOST: return "PSTATE_ERR_PEER_LOST";
    case PSTATE_ERR_TRANSPORT: return "PSTATE_ERR_TRANSPORT";
    case PSTATE_ERR_MISMATCH: return "PSTATE_ERR_MISMATCH";
    case PSTATE_ERR_AUTH: return "PSTATE_ERR_AUTH";
    case PSTATE_ERR_ABORTED: return "PSTATE_ERR_ABORTED";
    case PSTATE_ERR_INTERNAL: return "PSTATE_ERR_INTERNAL";
    case PSTATE_ERR_INTERRUPTED: return "PSTATE_ERR_INTERRUPTED";
    case PSTATE_ERR_BUSY: return "PSTATE_ERR_BUSY";
  }
  return "PSTATE_UNKNOWN_STATUS";
}

PSTATE_API const char *pstate_last_error(void) { return pstate::api::last_error_cstr(); }

PSTATE_API uint32_t pstate_version(void) { return PSTATE_VERSION; }

PSTATE_API const char *pstate_dtype_name(pstate_dtype_t dtype) {
  static const char *const kNames[PSTATE_DTYPE_COUNT] = {
      "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
      "bfloat16", "fp8_e4m3", "fp8_e5m2"};
  int i = static_cast<int>(dtype);
  return i >= 0 && i < PSTATE_DTYPE_COUNT ? kNames[i] : nullptr;
}

PSTATE_API size_t pstate_dtype_size(pstate_dtype_t dtype) {
  static const size_t kSizes[PSTATE_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  int i = static_cast<int>(dtype);
  return i >= 0 && i < PSTATE_DTYPE_COUNT ? kSizes[i] : 0;
}

PSTATE_API const char *pstate_reduce_op_name(pstate_reduce_op_t op) {
  static const char *const kNames[PSTATE_REDUCE_OP_COUNT] = {"sum", "prod", "max", "min", "avg"};
  int i = static_cast<int>(op);
  return i >= 0 && i < PSTATE_REDUCE_OP_COUNT ? kNames[i] : nullptr;
}

// Two ranges (pstate.h): the layout kinds 0..PSTATE_GROUP_KIND_COUNT-1 and the others from
// PSTATE_GROUP_FIRST_NON_LAYOUT_KIND on. Each grows at its end.
PSTATE_API const char *pstate_group_kind_name(pstate_group_kind_t kind) {
  static const char *const kLayoutNames[PSTATE_GROUP_KIND_COUNT] = {
      "world", "tp", "pp", "attn_tp", "attn_cp", "moe_ep", "moe_tp", "moe_dp", "dcp", "shared_experts_tp", "self_pp",
      "dp", "pcp", "ep", "eplb"};  // the last four: vLLM's
  static const char *const kOtherNames[] = {"custom"};
  static_assert(PSTATE_GROUP_CUSTOM == PSTATE_GROUP_FIRST_NON_LAYOUT_KIND, "custom is the first non-layout kind");
  const int i = static_cast<int>(kind);
  if (i >= 0 && i < PSTATE_GROUP_KIND_COUNT) return kLayoutNames[i];
  const int j = i - PSTATE_GROUP_FIRST_NON_LAYOUT_KIND;
  if (j >= 0 && j < static_cast<int>(std::size(kOtherNames))) return kOtherNames[j];
  return nullptr;
}

}  // extern "C"
