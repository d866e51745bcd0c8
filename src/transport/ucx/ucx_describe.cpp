// ucx_describe.cpp — one-line summaries of UCX's own reports (ucp_worker_print_info,
// ucp_ep_print_info), for the INFO log: which transports a worker has and which lanes an endpoint
// uses, so "did it use shared memory or TCP?" is answered by PSTATE_DEBUG=INFO alone.
#include "transport/ucx/ucx_worker.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace pstate {

namespace {

// Runs print(stream) into memory and returns the text.
template <typename Print>
std::string capture(Print &&print) {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == nullptr) return {};
  print(f);
  std::fclose(f);
  std::string out(buf, len);
  std::free(buf);
  return out;
}

}  // namespace

std::string UcxWorker::describe_transports() const {
  if (worker_ == nullptr) return "closed";
  return capture([this](FILE *f) { ucp_worker_print_info(worker_, f); });
}

std::string UcxWorker::describe_endpoint_lanes(ucp_ep_h ep) {
  return capture([ep](FILE *f) { ucp_ep_print_info(ep, f); });
}

}  // namespace pstate
