// store.hpp — the rendezvous key-value store every rank meets at (torch TCPStore, gloo Store).
//
// One interface, two implementations: TcpStore (rank 0 serves, every rank is a client) and
// FileStore (a directory on a shared filesystem). Values are opaque bytes. Every blocking call
// takes a Deadline and throws pstate::Error(PSTATE_ERR_TIMEOUT) when it passes, naming the keys it
// waited for; PSTATE_ERR_PEER_LOST when the server is gone; PSTATE_ERR_AUTH when the job token is
// refused. Keys are namespaced by the caller ("addr/3", "mp/1/tp/ready").
#pragma once

#include "common/deadline.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstate {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;
  // Sets key to value (overwrites).
  virtual void set(const std::string &key, const Bytes &value, Deadline deadline) = 0;
  // Waits until key exists, then returns its value.
  virtual Bytes get(const std::string &key, Deadline deadline) = 0;
  // Atomically adds delta to the integer at key (missing = 0) and returns the new value.
  virtual int64_t add(const std::string &key, int64_t delta, Deadline deadline) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string> &keys, Deadline deadline) = 0;
  // True when key exists now (does not wait).
  virtual bool check(const std::string &key, Deadline deadline) = 0;
  // Human-readable address for logs and errors ("tcp://127.0.0.1:29500").
  virtual std::string describe() const = 0;
};

struct StoreOptions {
  std::string init_method;  // "tcp://HOST:PORT" or "file:///PATH" (env:// resolved by the caller)
  int rank = 0;             // rank 0 serves a TcpStore
  int world_size = 1;
  std::string job_token;    // empty = no token
  std::string socket_ifname;  // empty = bind/connect by the address alone
  int64_t timeout_ms = 600000;
};

// Opens the store named by options.init_method; rank 0 of a tcp:// store starts the server first.
std::unique_ptr<Store> open_store(const StoreOptions &options);

}  // namespace pstate
