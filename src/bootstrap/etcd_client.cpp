// etcd_client.cpp — the etcd v3 gateway client (see etcd_client.hpp): curl handles, failover,
// watches as JSON lines, base64.
#include "bootstrap/etcd_client.hpp"

#include "common/error.hpp"

#include <curl/curl.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

namespace pstate {
namespace {

// curl_global_init is not thread-safe before 7.84; do it once per process.
void curl_global_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t append_body(char *data, size_t size, size_t n, void *ctx) {
  static_cast<std::string *>(ctx)->append(data, size * n);
  return size * n;
}

// The watch stream: complete lines are JSON messages, each handed to the caller's function.
struct WatchSink {
  const std::function<bool(const nlohmann::json &)> *on_result;
  std::string pending;
  bool done = false;       // on_result said so
  bool cancelled = false;  // the watch ended (compaction, an error message)
  std::string error;
};

size_t watch_write(char *data, size_t size, size_t n, void *ctx) {
  auto *sink = static_cast<WatchSink *>(ctx);
  sink->pending.append(data, size * n);
  size_t nl;
  while ((nl = sink->pending.find('\n')) != std::string::npos) {
    std::string line = sink->pending.substr(0, nl);
    sink->pending.erase(0, nl + 1);
    if (line.empty()) continue;
    nlohmann::json msg = nlohmann::json::parse(line, nullptr, false);
    if (msg.is_discarded() || msg.contains("error")) {
      sink->cancelled = true;
      sink->error = msg.is_discarded() ? "unreadable watch message" : msg["error"].dump();
      return 0;  // ends the transfer
    }
    const nlohmann::json &result = msg["result"];
    if (result.value("canceled", false)) {
      sink->cancelled = true;
      return 0;
    }
    if ((*sink->on_result)(result)) {
      sink->done = true;
      return 0;
    }
  }
  return size * n;
}

std::string endpoint_of(const std::string &url) {
  size_t p = url.find("://");
  return p == std::string::npos ? url : url.substr(p + 3);
}

}  // namespace

EtcdClient::EtcdClient(EtcdConfig config) : config_(std::move(config)) {
  if (config_.endpoints.empty()) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "etcd store: no endpoints");
  curl_global_once();
  multi_ = curl_multi_init();
  headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
  for (void **slot : {&easy_, &watch_easy_}) {
    CURL *e = curl_easy_init();
    if (e == nullptr || multi_ == nullptr) throw_error(PSTATE_ERR_NO_MEMORY, "etcd store: libcurl could not start");
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");  // etcd is reached directly, whatever http_proxy says
    if (!config_.cacert.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, config_.cacert.c_str());
    if (!config_.cert.empty()) curl_easy_setopt(e, CURLOPT_SSLCERT, config_.cert.c_str());
    if (!config_.key.empty()) curl_easy_setopt(e, CURLOPT_SSLKEY, config_.key.c_str());
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error_buffer_);
    *slot = e;
  }
}

EtcdClient::~EtcdClient() {
  curl_easy_cleanup(static_cast<CURL *>(easy_));
  curl_easy_cleanup(static_cast<CURL *>(watch_easy_));
  curl_multi_cleanup(static_cast<CURLM *>(multi_));
  curl_slist_free_all(static_cast<curl_slist *>(headers_));
}

void EtcdClient::interrupt() noexcept {
  interrupted_.store(true, std::memory_order_release);
  curl_multi_wakeup(static_cast<CURLM *>(multi_));
}

EtcdClient::Reply EtcdClient::post(const std::string &url, const std::string &body, Deadline deadline, void *write_fn,
                                   void *write_ctx) {
  CURL *e = static_cast<CURL *>(write_fn == nullptr ? easy_ : watch_easy_);
  CURLM *m = static_cast<CURLM *>(multi_);
  Reply reply;
  std::string auth = auth_token_.empty() ? "" : "Authorization: " + auth_token_;
  curl_slist *headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!auth.empty()) headers = curl_slist_append(headers, auth.c_str());
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_fn ? reinterpret_cast<curl_write_callback>(write_fn) : append_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, write_fn ? write_ctx : &reply.body);
  ++requests_;
  error_buffer_[0] = '\0';
  curl_multi_add_handle(m, e);
  bool done = false;
  CURLcode result = CURLE_OK;
  while (!done) {
    int running = 0;
    curl_multi_perform(m, &running);
    int queued = 0;
    while (CURLMsg *msg = curl_multi_info_read(m, &queued))
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) result = msg->data.result, done = true;
    if (done) break;
    if (interrupted_.load(std::memory_order_acquire)) {
      curl_multi_remove_handle(m, e);
      curl_slist_free_all(headers);
      throw_error(PSTATE_ERR_ABORTED, "etcd store ", config_.name, ": interrupted by this process");
    }
    if (deadline.expired()) {
      result = CURLE_OPERATION_TIMEDOUT;
      break;
    }
    curl_multi_poll(m, nullptr, 0, std::min(100, deadline.remaining_ms()), nullptr);
  }
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &reply.http);
  curl_multi_remove_handle(m, e);
  curl_slist_free_all(headers);
  reply.curl_code = result;
  if (result != CURLE_OK) {
    long os_errno = 0;  // the system's word for a failed connection ("Connection refused") is the clearest
    curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os_errno);
    reply.error = result == CURLE_COULDNT_CONNECT && os_errno != 0 ? std::string(std::strerror(static_cast<int>(os_errno)))
                  : error_buffer_[0] != '\0'                     ? std::string(error_buffer_)
                                                                  : std::string(curl_easy_strerror(result));
  }
  return reply;
}

void EtcdClient::authenticate(Deadline deadline) {
  auth_token_.clear();
  nlohmann::json body = {{"name", config_.user}, {"password", config_.password}};
  nlohmann::json answer = call("/v3/auth/authenticate", body, deadline, "authenticate as etcd user '" + config_.user + "'");
  auth_token_ = answer.value("token", "");
}

// What one try of an endpoint came to, for call()'s loop and its final error.
struct EtcdClient::Outcome {
  std::string said;       // "" when it answered; else what it said, in words
  bool definite = false;  // it refused the connection or is not etcd: trying on will not help soon
};

nlohmann::json EtcdClient::call(const char *path, const nlohmann::json &body, Deadline deadline,
                                const std::string &what, int64_t attempt_ms) {
  if (!config_.user.empty() && auth_token_.empty() && std::string_view(path) != "/v3/auth/authenticate")
    authenticate(deadline);
  last_refusal_code_ = 0;
  const std::string text = body.dump();
  const size_t n = config_.endpoints.size();
  std::vector<Outcome> last(n);
  bool reauthenticated = false;
  // Since when every endpoint has said something definite (refused, not etcd); max() otherwise.
  auto all_definite_since = Deadline::Clock::time_point::max();
  for (;;) {
    const size_t at = current_;
    const std::string &base = config_.endpoints[at];
    const int64_t budget = std::min<int64_t>(attempt_ms, deadline.remaining_ms());
    const auto started = Deadline::Clock::now();
    Reply r = post(base + path, text, Deadline::after_ms(budget), nullptr, nullptr);
    const int64_t took = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - started).count();
    Outcome o;
    if (r.curl_code != CURLE_OK) {
      const bool silent = r.curl_code == CURLE_OPERATION_TIMEDOUT;
      o.said = silent ? cat("no answer in ", took, " ms") : r.error;
      o.definite = r.curl_code == CURLE_COULDNT_CONNECT || r.curl_code == CURLE_COULDNT_RESOLVE_HOST;
      if (o.definite && r.curl_code == CURLE_COULDNT_CONNECT)
        o.said += " (is etcd running there, listening on this address and port: its --listen-client-urls?)";
      // A silence cut short by the caller's deadline says less than what this endpoint said
      // before: keep that.
      if (silent && budget < attempt_ms && !last[at].said.empty()) o = last[at];
    } else {
      nlohmann::json answer = nlohmann::json::parse(r.body, nullptr, false);
      if (answer.is_discarded() || !answer.is_object()) {
        std::string shown = r.body.substr(0, 80);
        while (!shown.empty() && (shown.back() == '\n' || shown.back() == '\r')) shown.pop_back();
        o.said = cat("answered HTTP ", r.http, " '", shown, "', which is not etcd's client API (is ", endpoint_of(base),
                     " etcd's client port, 2379 by default, and not its peer port, 2380?)");
        o.definite = true;
      } else if (r.http == 200 && !answer.contains("error")) {
        if (answer.contains("header")) last_revision_ = std::max(last_revision_, json_i64(answer["header"], "revision"));
        return answer;
      } else {
        int code = answer.value("code", 2);
        std::string message = answer.value("message", answer.value("error", std::string("?")));
        if (code == 16 && !config_.user.empty() && !reauthenticated) {  // the token expired
          reauthenticated = true;
          authenticate(deadline);
          continue;
        }
        if (code == 16 || code == 7) {
          last_refusal_code_ = code;
          throw_error(PSTATE_ERR_AUTH, "etcd store ", config_.name, ": ", what, " refused by etcd at ",
                      endpoint_of(base), ": ", message,
                      config_.user.empty() ? " (this etcd has users enabled: set PSTATE_ETCD_USER and PSTATE_ETCD_PASSWORD)"
                                           : " (check PSTATE_ETCD_USER / PSTATE_ETCD_PASSWORD and the user's role on the prefix)");
        }
        // The request's own fault (invalid argument, not found, exists, exhausted: too large,
        // failed precondition, out of range, unimplemented) is not another member's to fix;
        // anything else (unavailable, deadline, unknown, canceled, aborted: no leader, request
        // timed out, the member shutting down) is, so try the next endpoint.
        if (code == 3 || code == 5 || code == 6 || code == 8 || code == 9 || code == 11 || code == 12) {
          last_refusal_code_ = code;
          throw_error(PSTATE_ERR_TRANSPORT, "etcd store ", config_.name, ": ", what, " refused by etcd at ",
                      endpoint_of(base), ": ", message, " (gRPC code ", code, ")");
        }
        o.said = cat("etcd answered '", message, "'");
      }
    }
    last[at] = o;
    rotate();
    const bool all_definite = std::all_of(last.begin(), last.end(), [](const Outcome &x) { return x.definite; });
    if (!all_definite) all_definite_since = Deadline::Clock::time_point::max();
    else if (all_definite_since == Deadline::Clock::time_point::max()) all_definite_since = started;
    const bool given_up = all_definite && Deadline::Clock::now() - all_definite_since >=
                                              std::chrono::milliseconds(std::min<int64_t>(attempt_ms, kAttemptMs));
    if (deadline.expired() || given_up) throw_unreachable(what, last, all_definite);
    // Every endpoint failed once in a row: pause briefly rather than spin on refused connections.
    if (current_ == 0) ::usleep(static_cast<useconds_t>(std::min(50, deadline.remaining_ms())) * 1000);
  }
}

void EtcdClient::throw_unreachable(const std::string &what, const std::vector<Outcome> &last, bool all_definite) const {
  std::string said;
  for (size_t i = 0; i < config_.endpoints.size(); ++i)
    said += cat(i ? "; " : "", endpoint_of(config_.endpoints[i]), ": ", last[i].said.empty() ? "not tried" : last[i].said);
  if (all_definite)
    throw_error(PSTATE_ERR_PEER_LOST, "etcd store ", config_.name, ": ", what, ": no etcd member could be reached (",
                said, "): check the endpoints of the init method (etcd's client URLs, `etcdctl --endpoints URL endpoint "
                "health`)");
  throw_error(PSTATE_ERR_PEER_LOST, "etcd store ", config_.name, ": ", what,
              ": no etcd member answered before the deadline (", said,
              "): has the etcd cluster lost quorum, or are its members down? check `etcdctl endpoint health "
              "--cluster` on a member");
}

bool EtcdClient::watch(const nlohmann::json &create, Deadline until,
                       const std::function<bool(const nlohmann::json &)> &on_result) {
  WatchSink sink{&on_result, {}, false, false, {}};
  nlohmann::json body = {{"create_request", create}};
  Reply r = post(config_.endpoints[current_] + "/v3/watch", body.dump(), until, reinterpret_cast<void *>(&watch_write),
                 &sink);
  last_watch_cancelled_ = sink.cancelled;
  if (sink.done) return true;
  // A refused connection or an error message: this member is in trouble; the caller's next read
  // goes to the next one (and fails over from there).
  if (sink.cancelled ? !sink.error.empty()
                     : (r.curl_code != CURLE_OK && r.curl_code != CURLE_OPERATION_TIMEDOUT))
    rotate();
  return false;
}

std::string base64_encode(std::string_view bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  auto digit = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    int d = digit(c);
    if (d < 0) throw_error(PSTATE_ERR_TRANSPORT, "etcd store: bad base64 in an etcd answer");
    acc = (acc << 6) | uint32_t(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

int64_t json_i64(const nlohmann::json &object, const char *field) {
  auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception &) {
      return 0;
    }
  }
  return 0;
}

}  // namespace pstate
