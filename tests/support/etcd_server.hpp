// etcd_server.hpp — a real etcd (Debian's etcd-server, `etcd` on PATH or PSTATE_ETCD_BIN) for the
// etcd store's tests: one member on 127.0.0.1, free client and peer ports, a fresh data dir under
// /tmp; started by the test, killed (and its dir removed) at the end. No stand-in: the store is
// tested against the server it will meet.
#pragma once

#include "bootstrap/etcd_client.hpp"
#include "common/error.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace pstest {

// A port the kernel says is free now (bind to 0, read it, close).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0)
    std::abort();
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

inline std::string etcd_binary() {
  const char *bin = std::getenv("PSTATE_ETCD_BIN");
  if (bin && *bin) return bin;
  for (const char *p : {"/usr/bin/etcd", "/usr/local/bin/etcd"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

class EtcdServer {
 public:
  // Starts etcd; false (with a message) when there is no etcd binary.
  bool start() {
    std::string bin = etcd_binary();
    if (bin.empty()) return false;
    char pattern[] = "/tmp/pstate-etcd-XXXXXX";
    if (mkdtemp(pattern) == nullptr) std::abort();
    dir_ = pattern;
    port_ = free_port();
    peer_port_ = free_port();
    const int peer = peer_port_;
    std::string client = "http://127.0.0.1:" + std::to_string(port_), peer_url = "http://127.0.0.1:" + std::to_string(peer);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that dies (an abort, a sanitizer) takes its etcd along
      std::string log = dir_ + "/etcd.log";
      std::freopen(log.c_str(), "w", stdout);
      std::freopen(log.c_str(), "a", stderr);
      std::string data = dir_ + "/data";
      std::string cluster = "t=" + peer_url;
      execl(bin.c_str(), "etcd", "--name", "t", "--data-dir", data.c_str(), "--listen-client-urls", client.c_str(),
            "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peer_url.c_str(),
            "--initial-advertise-peer-urls", peer_url.c_str(), "--initial-cluster", cluster.c_str(),
            "--log-level", "error", static_cast<char *>(nullptr));
      _exit(127);
    }
    // Ready when it answers a read (a refused connection ends a call after 2 s: ask again until
    // it listens, 30 s at most).
    pstate::EtcdConfig config;
    config.endpoints = {client};
    config.name = "test etcd " + client;
    pstate::EtcdClient probe(config);
    const pstate::Deadline ready = pstate::Deadline::after_ms(30000);
    for (;;) {
      try {
        probe.call("/v3/kv/range", nlohmann::json{{"key", pstate::base64_encode("probe")}}, ready, "probe");
        return true;
      } catch (const pstate::Error &) {
        if (ready.expired()) throw;
      }
    }
  }
  ~EtcdServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) {
      std::string rm = "rm -rf '" + dir_ + "'";
      if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
    }
  }
  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  // etcd's peer port (HTTP, but not the client API: it answers 404 to /v3/... requests).
  std::string peer_endpoint() const { return "127.0.0.1:" + std::to_string(peer_port_); }
  // The number of keys under "PREFIX/", read with a client of its own (not a store's).
  int64_t keys_under(const std::string &prefix) const {
    pstate::EtcdConfig config;
    config.endpoints = {"http://" + endpoint()};
    config.name = "test";
    pstate::EtcdClient client(config);
    std::string p = prefix + "/", end = prefix + "0";  // '0' follows '/'
    nlohmann::json answer = client.call(
        "/v3/kv/range", nlohmann::json{{"key", pstate::base64_encode(p)}, {"range_end", pstate::base64_encode(end)}, {"count_only", true}},
        pstate::Deadline::after_ms(10000), "count");
    return pstate::json_i64(answer, "count");
  }
  // Stops and resumes the server (SIGSTOP/SIGCONT): etcd there but not answering.
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int peer_port_ = 0;
  std::string dir_;
};

}  // namespace pstest
