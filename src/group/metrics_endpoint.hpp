// metrics_endpoint.hpp — the opt-in HTTP endpoint of one rank's metrics (PSTATE_METRICS_ADDR):
// GET /metrics answers the Prometheus text of the context's call observer (call_observer.hpp),
// so that a Prometheus server scrapes every rank of a job as it scrapes the rest of a fleet.
//
// The server is GNU libmicrohttpd (Debian libmicrohttpd-dev), not one of pstate's own: a small C
// library that has served embedded HTTP for fifteen years, runs its own thread (the program's
// threads and pstate's calls are never touched by a scrape), bounds connections and timeouts, and
// is packaged everywhere pstate builds. cpp-httplib (header-only, one thread per connection) and
// civetweb were the alternatives; neither is lighter for one GET route. A build without it (no
// libmicrohttpd-dev) refuses PSTATE_METRICS_ADDR with PSTATE_ERR_UNSUPPORTED at pstate_init and
// keeps pstate_metrics_text.
//
// Address: "HOST:PORT", "[V6]:PORT" or ":PORT" (every interface); each rank serves at PORT + its
// local rank (its index on its host), so that one setting serves all the ranks of a host; PORT 0
// takes any free port. The address actually served is logged at INFO and put on the job's store
// at "pstate/metrics/<rank>" (what `pstate run --metrics` scrapes). A port that cannot be bound
// fails pstate_init with the address in the message: a metrics setting that silently does
// nothing is worse than one that stops the start.
//
// Only GET /metrics is answered (200, text/plain; version=0.0.4); any other path is 404 and any
// other method 405. The render reads relaxed atomics (call_observer.hpp): no lock that a call of
// the program takes, so a scrape never delays a collective.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace pstate {

struct MetricsAddress {
  std::string host;  // "" = every interface; an IPv6 address without brackets
  int port = 0;      // the setting's port (each rank adds its local rank)
};
// Parses PSTATE_METRICS_ADDR's value; throws Error(INVALID_ARGUMENT) naming what is wrong.
MetricsAddress parse_metrics_address(const std::string &text);

class MetricsEndpoint {
 public:
  // Serves render() at host:port (port 0: any). Throws Error(INVALID_STATE) when the address
  // cannot be served (in use, not this host's), Error(UNSUPPORTED) in a build without the server.
  MetricsEndpoint(const std::string &host, int port, std::function<std::string()> render);
  ~MetricsEndpoint();  // stop()
  MetricsEndpoint(const MetricsEndpoint &) = delete;
  MetricsEndpoint &operator=(const MetricsEndpoint &) = delete;

  // "host:port" as served (the port the kernel gave for port 0).
  const std::string &address() const { return address_; }
  int port() const { return port_; }
  // Stops serving and joins the server's thread (a scrape in flight finishes first). Idempotent.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string address_;
  int port_ = 0;
};

}  // namespace pstate
