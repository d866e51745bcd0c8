// etcd_client.hpp — a small client of etcd v3's HTTP/JSON gateway (libcurl + nlohmann-json), for
// the etcd store (etcd_store.hpp): unary calls (/v3/kv/range, put, txn, deleterange, lease grant,
// keepalive, revoke, auth), watches as a stream of JSON lines, and failover across the cluster's
// endpoints.
//
// Why the gateway rather than gRPC: etcd 3.4 serves the same v3 API as JSON over HTTP on its
// client port (keys and values base64, 64-bit integers as strings). libcurl and nlohmann-json are
// plain Debian packages (libcurl4-openssl-dev, nlohmann-json3-dev) with stable C / header-only
// interfaces; gRPC would need grpc++, protobuf, etcd's .proto files and generated code, a build
// step and a large ABI-sensitive dependency inside a library that exports only a C ABI. The store's
// traffic is small (a few requests per rank at start-up, a lease renewal a second), so the JSON
// costs nothing that matters; what it needs — transactions, leases, watches — the gateway has.
//
// Failover: the client sends to its current endpoint; a connection error, an attempt that gets
// no answer in kAttemptMs, or a gRPC "unavailable" answer (etcdserver: no leader, request timed
// out) moves it to the next endpoint, round robin, until the caller's deadline. When no endpoint
// answered in time the call throws PSTATE_ERR_PEER_LOST naming etcd, every endpoint and what each
// last said ("has the etcd cluster lost quorum?"), so a lost quorum is a clear error within the
// caller's deadline, never a hang. Answers that are the caller's mistake (invalid argument, a
// refused user) throw at once.
// An endpoint that says something definite — it refuses the connection, its name does not
// resolve, or what answers is not etcd's client API (etcd's peer port answers HTTP 404) — is
// retried for one attempt's time (kAttemptMs: a member restarting), not until the caller's
// deadline: when every endpoint has said so for that long the call throws PEER_LOST with those
// words and what to check, instead of waiting out a rendezvous' minutes to report a lost quorum.
// What an endpoint said is kept: a later try that the caller's deadline cut short does not
// replace it with "no answer".
//
// Every request runs on a curl multi handle polled in slices of at most 100 ms, so interrupt()
// (another thread: curl_multi_wakeup) ends a call at once with PSTATE_ERR_ABORTED.
// TLS: https:// endpoints verify the server against the system's CAs or cacert; cert/key give a
// client certificate. etcd users: user/password are exchanged once at /v3/auth/authenticate for a
// token sent in the Authorization header (and again when etcd says it expired).
// Not thread-safe: one caller at a time (the store serializes; its lease thread has its own
// client).
#pragma once

#include "common/deadline.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstate {

struct EtcdConfig {
  std::vector<std::string> endpoints;  // base URLs: "http://10.0.0.1:2379", "https://[::1]:2379"
  std::string user, password;          // etcd user (empty = auth off)
  std::string cacert, cert, key;       // TLS files (empty = system CAs, no client certificate)
  std::string name;                    // how errors name the cluster: "etcd://h1:2379,h2:2379/job"
};

class EtcdClient {
 public:
  static constexpr int64_t kAttemptMs = 2000;  // one endpoint's time to answer a unary call

  explicit EtcdClient(EtcdConfig config);
  ~EtcdClient();
  EtcdClient(const EtcdClient &) = delete;
  EtcdClient &operator=(const EtcdClient &) = delete;

  // POSTs body to path ("/v3/kv/range") and returns the answer. `what` names the store call in
  // errors ("get('addr/3')"). Throws PEER_LOST (no endpoint answered by deadline), AUTH (user
  // refused), TRANSPORT (any other refusal), ABORTED (interrupt()).
  // attempt_ms bounds each endpoint's try (the lease renewal tries several within its period).
  nlohmann::json call(const char *path, const nlohmann::json &body, Deadline deadline, const std::string &what,
                      int64_t attempt_ms = kAttemptMs);

  // Opens a watch (create_request `create`) on the current endpoint and hands every result
  // message to on_result until it returns true (then returns true) or `until` passes, the watch is
  // cancelled (compacted) or the endpoint fails (then returns false: the caller re-reads with
  // call(), which fails over and reports a lost cluster). Throws ABORTED on interrupt().
  bool watch(const nlohmann::json &create, Deadline until, const std::function<bool(const nlohmann::json &)> &on_result);

  // The last watch() ended because etcd cancelled it (its start revision was compacted, or an
  // error message): the caller must read the state afresh, a watch from there cannot resume.
  bool last_watch_cancelled() const { return last_watch_cancelled_; }
  // Any thread: stops the call in progress and every later one with ABORTED.
  void interrupt() noexcept;
  // The gRPC code of the last answer that refused a request (5: not found, e.g. a lapsed
  // lease), 0 when the last call was not refused: lets the caller accept a refusal it expects.
  int last_refusal_code() const { return last_refusal_code_; }
  // Requests sent so far (unary calls and watches, retries included): the start-up benchmark's
  // per-rank count.
  uint64_t requests() const { return requests_; }
  // The newest store revision any answer carried (0: none yet).
  int64_t last_revision() const { return last_revision_; }
  const std::string &name() const { return config_.name; }

 private:
  struct Reply {
    int curl_code = 0;  // CURLcode
    long http = 0;
    std::string body;
    std::string error;  // curl's own words for a failed transfer ("Failed to connect to ... refused")
  };
  Reply post(const std::string &url, const std::string &body, Deadline deadline, void *write_fn, void *write_ctx);
  struct Outcome;
  [[noreturn]] void throw_unreachable(const std::string &what, const std::vector<Outcome> &last, bool all_definite) const;
  void authenticate(Deadline deadline);
  void rotate() { current_ = (current_ + 1) % config_.endpoints.size(); }

  EtcdConfig config_;
  void *easy_ = nullptr;        // CURL*: unary calls (keeps its connection)
  void *watch_easy_ = nullptr;  // CURL*: the watch stream
  void *multi_ = nullptr;       // CURLM*: drives either, wakes on interrupt()
  void *headers_ = nullptr;     // curl_slist*
  std::string auth_token_;
  size_t current_ = 0;
  std::atomic<bool> interrupted_{false};
  uint64_t requests_ = 0;
  int64_t last_revision_ = 0;
  int last_refusal_code_ = 0;
  bool last_watch_cancelled_ = false;
  char error_buffer_[256] = {0};  // CURLOPT_ERRORBUFFER of both handles (one transfer at a time)
};

// Base64 (RFC 4648, with padding) of the gateway's keys and values.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);  // throws TRANSPORT on bad input
// A 64-bit integer field of a gateway answer: a string ("42") or a number; 0 when absent.
int64_t json_i64(const nlohmann::json &object, const char *field);

}  // namespace pstate
