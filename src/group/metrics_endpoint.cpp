// metrics_endpoint.cpp — PSTATE_METRICS_ADDR: one rank's /metrics over libmicrohttpd (the why
// and the rules: metrics_endpoint.hpp).
//
// pstate binds the listening socket itself (so that an address in use or not of this host is
// said with the kernel's reason, and port 0's choice is read back with getsockname) and hands it
// to the daemon, which runs one thread of its own with every signal blocked (a signal sent to the
// process never lands in it).
#include "group/metrics_endpoint.hpp"

#include "bootstrap/init_method.hpp"
#include "common/error.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef PSTATE_HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

namespace pstate {

MetricsAddress parse_metrics_address(const std::string &text) {
  const char *how = " (PSTATE_METRICS_ADDR: HOST:PORT, [IPV6]:PORT or :PORT; each rank serves at PORT + its local rank)";
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_METRICS_ADDR '", text, "' has no port", how);
  MetricsAddress a;
  std::string host = text.substr(0, colon);
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 3 || host.back() != ']')
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_METRICS_ADDR '", text, "': an IPv6 address needs both brackets", how);
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_METRICS_ADDR '", text, "': write an IPv6 address in brackets", how);
  }
  if (!host.empty()) validate_host(host, "PSTATE_METRICS_ADDR's host");
  a.host = host;
  a.port = parse_port(text.substr(colon + 1), "PSTATE_METRICS_ADDR's port");
  return a;
}

#ifdef PSTATE_HAVE_MICROHTTPD

namespace {

constexpr const char *kContentType = "text/plain; version=0.0.4; charset=utf-8";

// The listening socket, bound and listening, or an Error with the kernel's reason.
int listen_on(const std::string &host, int port, std::string *served) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo *res = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    throw_error(PSTATE_ERR_INVALID_STATE, "metrics endpoint: cannot resolve '", host, "' (", gai_strerror(rc),
                "); set PSTATE_METRICS_ADDR to an address of this host");
  std::string why = "no address";
  int fd = -1;
  for (addrinfo *ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    throw_error(PSTATE_ERR_INVALID_STATE, "metrics endpoint: cannot serve ", host.empty() ? "*" : host, ":", port, " (",
                why, "); choose another PSTATE_METRICS_ADDR port (each rank takes PORT + its local rank) or unset it");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len);
  char text[INET6_ADDRSTRLEN] = "?";
  int bound = port;
  if (ss.ss_family == AF_INET) {
    auto *in = reinterpret_cast<sockaddr_in *>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    bound = ntohs(in->sin_port);
    *served = cat(text, ":", bound);
  } else {
    auto *in6 = reinterpret_cast<sockaddr_in6 *>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    bound = ntohs(in6->sin6_port);
    *served = cat("[", text, "]:", bound);
  }
  return fd;
}

MHD_Result answer(void *cls, MHD_Connection *connection, const char *url, const char *method, const char *,
                  const char *, size_t *, void **) {
  auto *render = static_cast<std::function<std::string()> *>(cls);
  unsigned code = MHD_HTTP_OK;
  std::string body;
  if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0) {
    code = MHD_HTTP_METHOD_NOT_ALLOWED;
    body = "only GET /metrics\n";
  } else if (std::strcmp(url, "/metrics") != 0) {
    code = MHD_HTTP_NOT_FOUND;
    body = "pstate serves /metrics only\n";
  } else {
    try {
      body = (*render)();
    } catch (const std::exception &e) {
      code = MHD_HTTP_INTERNAL_SERVER_ERROR;
      body = cat("pstate: the metrics could not be rendered: ", e.what(), "\n");
    }
  }
  MHD_Response *r = MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, code == MHD_HTTP_OK ? kContentType : "text/plain");
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  const MHD_Result rc = MHD_queue_response(connection, code, r);
  MHD_destroy_response(r);
  return rc;
}

}  // namespace

struct MetricsEndpoint::Impl {
  std::function<std::string()> render;
  MHD_Daemon *daemon = nullptr;
};

MetricsEndpoint::MetricsEndpoint(const std::string &host, int port, std::function<std::string()> render)
    : impl_(std::make_unique<Impl>()) {
  impl_->render = std::move(render);
  const int fd = listen_on(host, port, &address_);
  port_ = std::stoi(address_.substr(address_.rfind(':') + 1));
  // the daemon's thread inherits this mask: every signal blocked there
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  impl_->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, nullptr, nullptr, &answer,
                                   &impl_->render, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, 32u,
                                   MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (impl_->daemon == nullptr) {
    ::close(fd);
    throw_error(PSTATE_ERR_INVALID_STATE, "metrics endpoint: libmicrohttpd did not start on ", address_,
                " (no thread or no memory); unset PSTATE_METRICS_ADDR or retry");
  }
}

void MetricsEndpoint::stop() noexcept {
  if (impl_ && impl_->daemon != nullptr) {
    // MHD_stop_daemon closes the listening socket it was given, after joining its thread
    MHD_stop_daemon(impl_->daemon);
    impl_->daemon = nullptr;
  }
}

#else  // a build without libmicrohttpd

struct MetricsEndpoint::Impl {};

MetricsEndpoint::MetricsEndpoint(const std::string &, int, std::function<std::string()>) {
  throw_error(PSTATE_ERR_UNSUPPORTED, "PSTATE_METRICS_ADDR: this libpstate was built without libmicrohttpd "
              "(libmicrohttpd-dev), so it serves no metrics endpoint; pstate_metrics_text renders the same text");
}

void MetricsEndpoint::stop() noexcept {}

#endif

MetricsEndpoint::~MetricsEndpoint() { stop(); }

}  // namespace pstate
