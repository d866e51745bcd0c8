// request.hpp — RequestState: one non-blocking point-to-point operation (pstate_isend /
// pstate_irecv) from its post to the pstate_wait / pstate_test that completes and frees it. Its
// handle (pstate_request_t) is a token of the process-wide registry that owns the state
// (api/request_handles.hpp), never its address.
//
// Lifetime is the hard part: the user may complete a request after pstate_finalize or
// pstate_abort freed the context and its groups, or after pstate_destroy_model_parallel retired
// its group. So the state holds nothing of the context, and the group lists it while the request
// is pending (not owning it: only a wait/test that completes the request frees it, and completing
// removes it from the list first; the registry never moves a state). When the group goes away
// (retire(): finalize, abort; destroy_model_parallel refuses while requests are pending) it
// cancels the transfer in the worker (pstate stops touching the buffer before that call returns),
// marks the state ABORTED and forgets the group; a later wait/test finds a finished state and
// never follows the group pointer. While the state is pending, `group` is valid (the group
// finishes every pending state before it dies), so wait/test can drive it.
//
// Threads: a state is touched by the thread that drives its context (one at a time), or, once
// finished, by whoever completes the request (the registry's claim keeps that to one thread).
#pragma once

#include "common/deadline.hpp"
#include "common/trace.hpp"
#include "transport/host_comm.hpp"

#include <pstate/pstate.h>

#include <cstdint>
#include <string>

struct pstate_group_s;

namespace pstate {

struct RequestState {
  // Pending: group is the owning group and `transfer` a live operation of its communicator.
  // Finished: status and (when not OK) message hold the result; group is nullptr.
  pstate_group_s *group = nullptr;
  bool pending = true;
  pstate_status_t status = PSTATE_OK;
  std::string message;
  HostRequest transfer;  // the group's host communicator's handle of the transfer (host_comm.hpp)
  TraceOp trace_op = TraceOp::kSend;
  int peer = -1;        // group rank
  uint64_t trace_id = 0;  // its flight-recorder entry (0: none)
  Deadline test_deadline = Deadline::never();  // pstate_test's: the context timeout from the post
  Deadline::Clock::time_point posted{};  // coarse (Deadline::coarse_now): a few ms early at most
  uint64_t observed_t0 = 0;     // the call observer's tick at the post (call_observer.hpp)
  uint64_t observed_bytes = 0;  // its bytes
  // pstate_add_hook's view (call_hooks.hpp): BEFORE ran at the post; AFTER runs where the request
  // finishes (wait, test, or the group's retirement), with the same info and call id.
  bool hooked = false;
  uint64_t hook_t0 = 0;
  pstate_call_info_t hook_info{};
};

}  // namespace pstate
