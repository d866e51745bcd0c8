// ucx_describe.cpp — one-line summaries of UCX's own reports (ucp_worker_print_info,
// ucp_ep_print_info), for the INFO log: which transports a worker has and which lanes an endpoint
// uses, so "did it use shared memory or TCP?" is answered by PSTATE_DEBUG=INFO alone.
#include "transport/ucx/ucx_worker.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

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

std::vector<std::string> words(const std::string &line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// "2:sysv/memory.0" -> "sysv/memory"
std::string lane_resource(const std::string &token) {
  std::string s = token.substr(token.find(':') + 1);
  size_t dot = s.rfind('.');
  if (dot != std::string::npos && dot > s.find('/')) s.resize(dot);
  return s;
}

// "am_bw#0" -> "am_bw"
std::string lane_purpose(const std::string &token) { return token.substr(0, token.find('#')); }

}  // namespace

// From ucp_context_print_info's "resource N : md M dev D flags -- tcp/lo" lines:
// {"self/memory0", "tcp/lo", "sysv/memory", "posix/memory", "cma/memory"}.
std::vector<std::string> UcxWorker::transport_resources() const {
  std::vector<std::string> out;
  if (context_ == nullptr) return out;
  std::string text = capture([this](FILE *f) { ucp_context_print_info(context_, f); });
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("resource") == std::string::npos) continue;
    auto w = words(line);
    if (!w.empty()) out.push_back(w.back());
  }
  return out;
}

// "transports: self/memory0 tcp/lo sysv/memory posix/memory cma/memory"
std::string UcxWorker::describe_transports() const {
  if (context_ == nullptr) return "closed";
  std::string out = "transports:";
  for (const auto &r : transport_resources()) out += " " + r;
  return out;
}

// From ucp_ep_print_info's "lane[0]:  2:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] am am_bw#0"
// lines: "sysv/memory(am,am_bw) cma/memory(rma_bw)".
std::string UcxWorker::describe_endpoint_lanes(ucp_ep_h ep) {
  std::string text = capture([ep](FILE *f) { ucp_ep_print_info(ep, f); });
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    auto w = words(line);
    auto lane = std::find_if(w.begin(), w.end(), [](const std::string &s) { return s.rfind("lane[", 0) == 0; });
    auto arrow = std::find(w.begin(), w.end(), "->");
    if (lane == w.end() || lane + 1 == w.end() || arrow == w.end() || arrow + 1 == w.end()) continue;
    std::string purposes;
    for (auto it = arrow + 2; it != w.end(); ++it) purposes += (purposes.empty() ? "" : ",") + lane_purpose(*it);
    out += (out.empty() ? "" : " ") + lane_resource(*(lane + 1)) + "(" + purposes + ")";
  }
  return out.empty() ? std::string("no lanes reported") : out;
}

}  // namespace pstate
