// tcp_store_server.hpp — the key-value server of the TCP store, run by rank 0 (or a launcher).
//
// One background thread serves every client with an epoll loop over non-blocking sockets: no
// thread per client, no busy loop (it sleeps in epoll_wait until a socket or a timer needs it), and
// no pass over every connection per turn (a turn costs what its events cost). A get or
// wait on missing keys is parked server-side until a set/add provides them or its wait time
// passes, so waiting clients cost nothing. Each connection must first pass the handshake
// (preamble, job id, token proof, rank claim, world size); a malformed or oversized frame, an
// unknown opcode, or a request before the handshake closes that connection only. Limits: frame
// sizes (wire.hpp), number of keys, total bytes, and connections, counted apart: members (past
// the handshake: they hold the job token) and connections still in the handshake (anyone can
// open those). The second kind has a budget and a deadline of a few seconds, and a newcomer over
// the budget sheds an older one, so a stranger's flood of connections cannot keep the job's own
// processes out (the order it sheds in, and why it does not refuse the newcomer, is in the .cpp).
//
// The server also watches the rendezvous, since it is the one place that sees every rank arrive:
//   - which ranks joined, which left, and why a rank was refused; a wait that times out is
//     answered with that ("ranks 2 and 5 of 0..7 never connected; last seen: none"), which the
//     waiting ranks log while they wait and name when they give up;
//   - a refusal that makes the job impossible: a process that proved it belongs to this job (its
//     token and job id match) refused for its rank claim (world size, range, a rank taken) before
//     every rank of the world has joined. The job then fails at once: every parked request, every
//     later request and every later handshake is answered Fail{that status, "the job cannot
//     start: ..."} with the refused process's reason. A wrong token or job id is not such a
//     refusal (a stranger must not be able to end a job); it is named in the waits' answers;
//   - warnings, once: serving without a job token on an address other hosts can reach, and more
//     processes claiming ranks than the world holds (two jobs on one port).
#pragma once

#include "bootstrap/store.hpp"
#include "bootstrap/wire.hpp"
#include "common/log.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pstate {

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // the address to listen on (every address it resolves to)
  int port = 0;                    // 0 = any free port (see TcpStoreServer::port())
  int world_size = 1;
  std::string job_token;           // empty = clients must have no token either
  std::string job_id;              // PSTATE_JOB_ID; clients must say the same (empty = none)
  int owner_rank = 0;              // rank whose process serves, named in errors; -1 = not a rank
  size_t max_keys = kStoreMaxKeys;
  size_t max_total_bytes = size_t{4} << 30;  // keys + values
  // Connections past the handshake. A rank claim is always admitted (there are at most
  // world_size of them), so this bounds observers (rank -1). 0 = 4 * world_size + 64: each rank
  // may hold its rank connection, an observer connection (flight-recorder dump requests) and a
  // reconnect whose old connection the server has not yet seen close, plus a launcher per node
  // and `pstate store` observers.
  size_t max_members = 0;
  // Connections still in the handshake. 0 = world_size + 64, so a whole world starting at once
  // never sheds its own. Past it, a newcomer sheds one of them (see the .cpp).
  size_t max_handshakes = 0;
  // A connection that has not finished the handshake this long after it was accepted is closed.
  int64_t handshake_timeout_ms = wire::kHandshakeMs;
};

// A snapshot of the server's counters (for tests and logs).
struct StoreServerStats {
  size_t connections = 0;        // open connections, any phase
  size_t members = 0;            // connections that passed the handshake
  size_t handshaking = 0;        // connections still in the handshake (at most max_handshakes)
  size_t ranks = 0;              // of those, the ones holding a rank (observers hold none)
  size_t ever_joined = 0;        // ranks of the world that have joined at least once
  size_t parked_requests = 0;    // gets/waits held until their keys exist
  size_t keys = 0;
  uint64_t refused = 0;          // connections refused by the handshake (token, rank, world size)
  uint64_t dropped = 0;          // connections closed for malformed frames or protocol violations
  uint64_t shed = 0;             // connections closed in the handshake: shed for a newcomer, or too slow
  // Since the server started (start-up cost, counted): connections accepted, the most open at
  // once, requests of members answered (frames: a get sent in slices counts each slice), and every
  // byte received and sent (handshakes included).
  uint64_t accepted = 0;
  size_t peak_connections = 0;
  uint64_t requests = 0;
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
};

// "accepted 9 peak_connections 8 requests 40 received_bytes 5120 sent_bytes 4096" for INFO lines.
std::string describe_server_traffic(const StoreServerStats &s);

class TcpStoreServer {
 public:
  // Binds and listens (throws PSTATE_ERR_TRANSPORT with the cause: port taken, address not on
  // this host, ...) and starts the serving thread. *bind_errno (may be null) receives the errno of
  // a failed bind (EADDRINUSE: someone holds the port), 0 otherwise.
  static std::unique_ptr<TcpStoreServer> start(const StoreServerOptions &options, const Logger &logger,
                                               int *bind_errno = nullptr);
  // Stops the thread and closes every connection (their clients then see PEER_LOST).
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer &) = delete;
  TcpStoreServer &operator=(const TcpStoreServer &) = delete;

  int port() const;
  std::string url() const;  // "tcp://127.0.0.1:29500" with the port actually bound
  StoreServerStats stats() const;
  // Waits until at most `ranks` ranks are connected (the others left), or the deadline passes;
  // returns whether that happened. Sleeps on a condition variable, no polling.
  bool wait_for_ranks_at_most(size_t ranks, Deadline deadline) const;

  struct Impl;

 private:
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstate
