// handles.hpp — checks of the opaque handles and of the arguments every group call shares.
#pragma once

#include "api/boundary.hpp"
#include "group/context.hpp"
#include "group/group.hpp"
#include "reduce/reduce.hpp"

#include <limits>

namespace pstate::api {

inline void require_context(const pstate_t *ps) { require_nonnull(ps, "ps"); }

// A group handle: non-NULL and still one of ours (a destroyed group answers INVALID_STATE from
// its own check_alive; freed memory cannot be detected in general).
inline void require_group(const pstate_group_t *g, const char *call) {
  require_nonnull(g, "g");
  if (!g->valid_magic())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, call, ": g is not a live pstate_group_t (finalized context?)");
}

inline void require_rank(const pstate_group_t *g, int rank, const char *name) {
  if (rank < 0 || rank >= g->size())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, " ", rank, " is not a rank of group ", g->name(), " (0..",
                g->size() - 1, "): ranks are ranks in the group (rank_in_group), not global ranks");
}

// count elements of dtype times `blocks` must fit in size_t; buf may be NULL only when empty.
inline void require_buffer(const void *buf, size_t count, pstate_dtype_t dtype, size_t blocks, const char *name) {
  size_t esize = pstate_dtype_size(dtype);
  if (count != 0 && (count > std::numeric_limits<size_t>::max() / esize / (blocks ? blocks : 1)))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, ": count ", count, " x ", blocks, " elements of ",
                pstate_dtype_name(dtype), " overflows size_t");
  if (count != 0 && blocks != 0 && buf == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, name, " is NULL with count ", count);
}

inline void require_reducible(pstate_dtype_t dtype, pstate_reduce_op_t op) {
  require_op(op);
  if (!is_reducible(dtype))
    throw_error(PSTATE_ERR_UNSUPPORTED, "reduction ", pstate_reduce_op_name(op), " on ", pstate_dtype_name(dtype),
                " is not supported on CPU: fp8 types are move-only (all_gather, broadcast, send/recv)");
}

inline void require_cpu_stream(const pstate_group_t *g, void *stream) {
  if (g->context().device() == PSTATE_DEVICE_CPU && stream != nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "stream must be NULL in a CPU context (group ", g->name(), ")");
}

}  // namespace pstate::api
