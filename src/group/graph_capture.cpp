// graph_capture.cpp — the device side of a context: its CUDA device (opened at pstate_init), the
// check that the CPU communicator is given host memory, and graph capture (SGLang's
// graph_capture(): every group's device communicator made first, then capture mode; the captured
// buffers registered at its end).
#include "group/context.hpp"

#include "group/group.hpp"

#include <cstdlib>

namespace pstate {

void Context::open_device(int device_ordinal) {
  DeviceContextOptions o;
  o.device_ordinal = device_ordinal >= 0 ? device_ordinal : launch_.local_rank;
  o.load_nccl = launch_.world_size > 1;  // a world of one never makes an NCCL communicator
  o.timeout_ms = launch_.timeout_ms;
  o.socket_ifname = launch_.socket_ifname;
  o.abort_requested = &abort_requested_;
  try {
    device_ctx_ = make_cuda_device_context(o, log_);
    const char *events = std::getenv("PSTATE_TRACE_CUDA_EVENTS");
    if (trace_ && events != nullptr && std::string(events) == "1") {
      device_ctx_->enable_trace_events();
      DeviceContext *dc = device_ctx_.get();
      trace_->set_device_times([dc](uint64_t id, int64_t *s, int64_t *e) { return dc->trace_times(id, s, e); });
    }
  } catch (const Error &e) {
    throw Error(e.status(), cat("CUDA context of rank ", launch_.rank, " (cuda:", o.device_ordinal, "): ", e.what()));
  }
}

void Context::require_not_capturing(const char *call) const {
  if (capturing())
    throw_error(PSTATE_ERR_INVALID_STATE, call, " in graph-capture mode: the groups' NCCL communicators may be "
                "recorded into the graph; call pstate_graph_capture_end first");
}

void Context::require_host_memory(const void *p, const char *name, const char *group, const char *call) {
  if (p == nullptr) return;
  if (device_ctx_) {
    MemoryLocation loc = device_ctx_->locate(p);
    if (loc.kind != MemoryLocation::Kind::kDevice) return;
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, group, " ", call, ": ", name, " (", p, ") is CUDA device memory (device ",
                loc.device, ") but this operation moves it over the CPU communicator: pass host memory, or mark the "
                "tensor PSTATE_DEVICE_CUDA");
  }
  if (!host_check_.cuda_loaded()) return;  // a process without CUDA holds no device pointer
  host_check_.require_host(p, name, cat(group, " ", call));
}

void Context::require_host_memory(const void *p, const char *name, const void *p2, const char *name2,
                                  const char *group, const char *call) {
  if (device_ctx_ || host_check_.cuda_loaded()) {
    require_host_memory(p, name, group, call);
    if (p2 != p) require_host_memory(p2, name2, group, call);
  }
}

void *Context::begin_graph_capture_now(void *stream) {
  require_usable("pstate_graph_capture_begin");
  if (!device_ctx_)
    throw_error(PSTATE_ERR_UNSUPPORTED, "graph capture needs a CUDA context (device = PSTATE_DEVICE_CUDA); this "
                "context is CPU, where collectives run eagerly and there is no graph to record");
  if (device_ctx_->capturing())
    throw_error(PSTATE_ERR_INVALID_STATE, "this context is already in graph-capture mode (pstate_graph_capture_begin "
                "called twice): call pstate_graph_capture_end first");
  // A stream capture cannot create an NCCL communicator (it allocates device memory): every
  // group makes its own now, in the same order on every rank.
  for (Group *g : groups_.live()) {
    g->ensure_device_ready("pstate_graph_capture_begin");
    g->sync_memory("pstate_graph_capture_begin");  // no window can be registered inside a capture
  }
  return device_ctx_->begin_capture(stream);
}

void Context::end_graph_capture_now() {
  require_usable("pstate_graph_capture_end");
  if (!device_ctx_)
    throw_error(PSTATE_ERR_UNSUPPORTED, "graph capture needs a CUDA context (device = PSTATE_DEVICE_CUDA); this "
                "context is CPU");
  device_ctx_->end_capture();
  // SGLang's graph_capture registers the graph's buffers: each group its own (local)
  if (graph_registration_)
    for (Group *g : groups_.live()) g->register_graph_buffers();
}

}  // namespace pstate
