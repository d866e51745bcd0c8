// api_requests.cpp — the C entry points of non-blocking and batched point-to-point:
// pstate_isend, pstate_irecv, pstate_wait, pstate_test, pstate_p2p_batch.
//
// A request's handle is a token of the process-wide registry (request_handles.hpp), checked
// before anything is touched: a handle that an earlier wait/test freed, or any other that is not
// a live request, is refused with INVALID_ARGUMENT and never reaches another request. Each call
// claims the request it uses, so only one thread drives or frees it. The request's state holds
// nothing of the context, so it can be completed after its context was finalized or aborted: the
// state was finished with ABORTED there, and wait/test only read it and free it. While the state
// is pending its group is alive, and wait/test enter the context as every other call does (one
// thread at a time). In a CUDA context the operation is enqueued by isend/irecv and the request
// returned is already complete (torch's Work on NCCL: the stream orders the rest).
#include "api/boundary.hpp"
#include "api/handles.hpp"
#include "api/request_handles.hpp"
#include "common/struct_io.hpp"

using namespace pstate::api;
using pstate::RequestState;
using pstate::throw_error;
using pstate::api::RequestClaim;
using pstate::api::RequestRegistry;

namespace {

// The checks of isend / irecv, as pstate_send / pstate_recv make them.
void check_p2p(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype, int peer, void *stream,
               pstate_request_t **req, const char *call, const char *peer_name) {
  require_nonnull(req, "req");
  *req = nullptr;
  require_group(g, call);
  require_dtype(dtype);
  require_cpu_stream(g, stream);
  require_rank(g, peer, peer_name);
  if (peer == g->rank_in_group())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, peer_name, " is this rank (group ", g->name(), " rank_in_group ", peer,
                "): ", call, " needs another rank of the group");
  require_buffer(buf, count, dtype, 1, "buf");
}

// Makes the request (first: a posted message always has its handle), then has the group post it
// (in a CUDA context it is complete once the work is on the stream).
template <typename Post>
pstate_request_t *post(pstate_group_t *g, bool sending, const void *buf, Post &&post_it) {
  const char *call = sending ? "pstate_isend" : "pstate_irecv";
  TensorChecks(g, call).p2p_memory(buf, "buf");
  g->require_p2p_ready(call);
  RequestClaim req = RequestRegistry::process().make();
  try {
    post_it(req.state());
  } catch (...) {
    req.free();
    throw;
  }
  return req.handle();  // the caller's until pstate_wait / pstate_test frees it (req's end unclaims it)
}

// Finishes a claimed request: frees it and returns (with the last error set) the operation's status.
pstate_status_t finish(RequestClaim &req) {
  const RequestState &s = req.state();
  if (s.status != PSTATE_OK) {
    try {
      set_last_error(std::string(s.trace_op == pstate::TraceOp::kSend ? "pstate_isend" : "pstate_irecv") +
                     " request: " + s.message);
    } catch (...) {  // no memory for the text: the status still says what happened
    }
  }
  const pstate_status_t status = s.status;
  req.free();
  return status;
}

// The caller's ops as this library's structs (walked by their struct_size: pstate.h, "Struct
// arrays"), each checked before anything moves.
std::vector<pstate_p2p_op_t> checked_batch(pstate_group_t *g, const pstate_p2p_op_t *ops, size_t n) {
  std::vector<pstate_p2p_op_t> batch;
  try {
    batch = pstate::read_struct_array(ops, n, "ops");
  } catch (const pstate::Error &e) {
    throw_error(e.status(), e.what(), "; nothing was sent");
  }
  const TensorChecks checks(g, "pstate_p2p_batch");
  for (size_t i = 0; i < n; ++i) {
    const pstate_p2p_op_t &o = batch[i];
    auto where = [&] { return pstate::cat("ops[", i, "]"); };
    if (o.peer < 0 || o.peer >= g->size())
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(), ".peer ", o.peer, " is not a rank of group ", g->name(), " (0..",
                  g->size() - 1, "): peers are ranks in the group (rank_in_group), not global ranks; nothing was sent");
    if (o.peer == g->rank_in_group())
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(), ".peer ", o.peer, " is this rank (group ", g->name(),
                  "): a batch exchanges with the other ranks of the group; nothing was sent");
    if (static_cast<unsigned>(o.dtype) >= PSTATE_DTYPE_COUNT)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, where(), ".dtype ", static_cast<int>(o.dtype),
                  " is not a pstate_dtype_t; nothing was sent");
    require_buffer(o.buf, o.count, o.dtype, 1, where().c_str());
    if (!checks.device()) checks.p2p_memory(o.buf, where().c_str());  // the name only built where it is checked
  }
  return batch;
}

}  // namespace

extern "C" {

PSTATE_API pstate_status_t pstate_isend(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype, int peer,
                                        void *stream, pstate_request_t **req) {
  return PSTATE_GUARD({
    check_p2p(g, buf, count, dtype, peer, stream, req, "pstate_isend", "peer");
    ContextEntry entry(g->context(), "pstate_isend");
    *req = post(g, true, buf, [&](RequestState &r) {
      note_send(g, buf, [&] { return count * element_size(dtype); });
      g->isend(r, buf, count, dtype, peer, stream);
    });
  });
}

PSTATE_API pstate_status_t pstate_irecv(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int peer,
                                        void *stream, pstate_request_t **req) {
  return PSTATE_GUARD({
    check_p2p(g, buf, count, dtype, peer, stream, req, "pstate_irecv", "peer");
    ContextEntry entry(g->context(), "pstate_irecv");
    *req = post(g, false, buf, [&](RequestState &r) { g->irecv(r, buf, count, dtype, peer, stream); });
  });
}

PSTATE_API pstate_status_t pstate_wait(pstate_request_t *req) {
  RequestClaim claimed;  // kept (the request stays live) when the call fails before completing it
  pstate_status_t s = PSTATE_GUARD({
    claimed = RequestRegistry::process().claim(req);
    RequestState &st = claimed.state();
    if (st.pending) {
      ContextEntry entry(st.group->context(), "pstate_wait");
      st.group->complete_request(st, true);
    }
  });
  return s != PSTATE_OK ? s : finish(claimed);
}

PSTATE_API pstate_status_t pstate_test(pstate_request_t *req, int *done) {
  if (done != nullptr) *done = 0;
  bool finished = false;
  RequestClaim claimed;  // kept while the request is pending, or when the call fails
  pstate_status_t s = PSTATE_GUARD({
    require_nonnull(req, "req");
    require_nonnull(done, "done");
    claimed = RequestRegistry::process().claim(req);
    RequestState &st = claimed.state();
    if (st.pending) {
      ContextEntry entry(st.group->context(), "pstate_test");
      finished = st.group->complete_request(st, false);
    } else {
      finished = true;
    }
  });
  if (s != PSTATE_OK || !finished) return s;
  *done = 1;
  return finish(claimed);
}

PSTATE_API pstate_status_t pstate_p2p_batch(pstate_group_t *g, const pstate_p2p_op_t *ops, size_t n, void *stream) {
  return PSTATE_GUARD({
    require_group(g, "pstate_p2p_batch");
    require_cpu_stream(g, stream);
    ContextEntry entry(g->context(), "pstate_p2p_batch");
    const std::vector<pstate_p2p_op_t> batch = checked_batch(g, ops, n);
    if (n == 0) return;
    g->p2p_batch(batch.data(), n, stream);
  });
}

}  // extern "C"
