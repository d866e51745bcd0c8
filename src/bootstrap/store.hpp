// store.hpp — the rendezvous key-value store every rank meets at (torch TCPStore, gloo Store).
//
// One interface, three implementations: TcpStore (rank 0 serves, every rank is a client),
// FileStore (a directory on a shared filesystem) and EtcdStore (an etcd cluster: etcd_store.hpp). Values are opaque bytes. Every blocking call
// takes a Deadline and throws pstate::Error(PSTATE_ERR_TIMEOUT) when it passes, naming the keys it
// waited for; PSTATE_ERR_PEER_LOST when the server is gone; PSTATE_ERR_AUTH when the job token is
// refused. Keys are namespaced by the caller ("addr/3", "mp/1/tp/ready").
//
// Opening a store also claims this rank: a second live process claiming the same rank, a rank
// outside the world, or a world size that disagrees with the store's is PSTATE_ERR_MISMATCH. One
// Store object may be used from several threads (calls are serialized inside it).
//
// Start-up failures reach every rank, at once: a process of the job refused for its rank claim
// before the world is complete fails the whole job, so the ranks waiting in get()/wait() get that
// refusal's status and reason at once ("the job cannot start: ..."); a wait that times out names
// the ranks that never arrived and what the store last saw of them; and while a get()/wait()
// waits longer than a few seconds it logs at INFO how many ranks joined and which it waits for.
// What the stores share behind this interface — the job's meta record and the token's
// fingerprint, the job-failure record, the words for absent ranks — is written once, in roster.hpp.
#pragma once

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pstate {

using Bytes = std::vector<uint8_t>;

// Hard limits, the same for every store (the TCP store's wire decoder enforces them too).
inline constexpr size_t kStoreMaxKeyBytes = 4096;
inline constexpr size_t kStoreMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kStoreMaxKeys = size_t{1} << 20;

// What this process's store client has sent since it opened (start-up cost, counted): plain
// counters, read for the INFO lines at the end of pstate_init, initialize_model_parallel and
// finalize. `requests` counts calls of this interface (a get or wait that the TCP store sends in
// several slices is one request), `frames` what went on the wire for them (>= requests), bytes the
// request and reply frames (handshakes not included), `connects` connections opened (with their
// handshake). A store that does not count leaves everything 0 (the file store).
struct StoreTraffic {
  uint64_t requests = 0;
  uint64_t frames = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t connects = 0;
};

class Store {
 public:
  virtual ~Store() = default;
  // Sets key to value (overwrites).
  virtual void set(const std::string &key, const Bytes &value, Deadline deadline) = 0;
  // Waits until key exists, then returns its value.
  virtual Bytes get(const std::string &key, Deadline deadline) = 0;
  // get() and set() of many keys, in order, as one request each: a store may pipeline them (the
  // TCP store sends the next requests before the replies come), so that one rank's thousands of
  // requests (rank 0 at rendezvous) cost a few round trips, not thousands. The first failure
  // throws, as get() or set() of that key would.
  virtual std::vector<Bytes> get_many(const std::vector<std::string> &keys, Deadline deadline) {
    std::vector<Bytes> out;
    out.reserve(keys.size());
    for (const auto &k : keys) out.push_back(get(k, deadline));
    return out;
  }
  virtual void set_many(const std::vector<std::pair<std::string, Bytes>> &items, Deadline deadline) {
    for (const auto &[k, v] : items) set(k, v, deadline);
  }
  // Atomically adds delta to the integer at key (missing = 0) and returns the new value. The
  // integer is stored as decimal text, so get() of the key returns e.g. "4".
  virtual int64_t add(const std::string &key, int64_t delta, Deadline deadline) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string> &keys, Deadline deadline) = 0;
  // First writer wins: sets key to value unless it exists, atomically, and returns what the key
  // holds afterwards (value, or the value another caller set first).
  virtual Bytes set_if_absent(const std::string &key, const Bytes &value, Deadline deadline) = 0;
  // True when key exists now (does not wait).
  virtual bool check(const std::string &key, Deadline deadline) = 0;
  // Removes key; true when it existed.
  virtual bool erase(const std::string &key, Deadline deadline) = 0;
  // This rank gives up on the job (its pstate_init failed with `status`, `why`): the store fails
  // the job with that reason, so the ranks waiting in it hear at once ("the job cannot start: rank
  // 0 gave up: ..."). Best effort and bounded (about a second); never throws.
  virtual void abandon(pstate_status_t status, const std::string &why) noexcept = 0;
  // The ranks connected to the store now, ascending (a TCP store: the server sees every rank's
  // process end, on any host); nullopt where the store cannot tell (a file store).
  virtual std::optional<std::vector<int>> members(Deadline deadline) {
    (void)deadline;
    return std::nullopt;
  }
  // The job's world now has world_size ranks (pstate_shrink, pstate_grow rebuilt it). A store
  // that removes the job's state when the last rank of the world closes (etcd) counts to this,
  // not to the world it was opened with: a shrunk world's dead never close. Default: nothing.
  virtual void world_resized(int world_size) { (void)world_size; }
  // Tells on_change(rank, true) when a rank's claim vanishes from the store (an etcd store: its
  // lease lapsed or was revoked — the process or its whole host is gone, no FIN needed) and
  // on_change(rank, false) when a rank is claimed again (a replacement), from a thread of the
  // store's, until the store is closed or destroyed. The context turns it into its UCX waits'
  // liveness checks, so a collective blocked on a vanished host fails within the lease TTL
  // instead of at its timeout. Default: nothing (a TCP store's members() sees a connection
  // close at once, a file store cannot tell).
  virtual void watch_departures(std::function<void(int rank, bool gone)> on_change) { (void)on_change; }
  // The pause between two polls of a loop that waits for other ranks' keys (pstate_shrink's
  // agreement, pstate_grow's rank 0 waiting for replacements): returns after `pause`, or sooner
  // when the store may have changed. Default: sleeps `pause` (a TCP or file store is cheap to
  // poll). An etcd store, which every rank of the job shares, waits in a watch on the job's keys
  // instead, up to 250 ms, and throws what its calls throw (ABORTED on interrupt, PEER_LOST).
  virtual void await_change(std::chrono::milliseconds pause);
  // Stops the call another thread is blocked in (and every later call) with PSTATE_ERR_ABORTED:
  // pstate_abort / pstate_revoke from another thread (Context::request_abort). Any thread; never
  // blocks. A TCP store shuts its socket down (at once); a file store ends its poll at the next
  // try (at most 64 ms).
  virtual void interrupt() noexcept = 0;
  // This client's counters so far (see StoreTraffic); any thread.
  virtual StoreTraffic traffic() const { return {}; }
  // Human-readable address for logs and errors ("tcp://127.0.0.1:29500").
  virtual std::string describe() const = 0;
  // Leaves the store gracefully: the rank that serves a TCP store first waits, until deadline,
  // for every other rank to leave, so none of them loses the store in the middle of a call (its
  // last barrier, say). Returns false when the deadline passed first (the store is closed
  // anyway). Destroying a store without close() is the abort path: immediate, never blocks.
  virtual bool close(Deadline deadline) = 0;
  // Why close() could not leave the store as a clean close does (an etcd store whose lease
  // revocation or removal of the job's keys was refused or went unanswered: the keys stay), as
  // the error it met; nullopt after a clean close, and where close()'s false only says the
  // deadline passed while other ranks were still connected (a serving TCP rank: theirs to
  // report). pstate_finalize returns it: a finalize whose store
  // close failed never says OK (the job's keys stay in the store).
  virtual std::optional<Error> close_failure() const { return std::nullopt; }
};

struct StoreOptions {
  std::string init_method;  // "tcp://HOST:PORT", "file:///PATH" or "etcd://H:P,.../PREFIX" (env:// resolved by the caller)
  int rank = 0;             // rank 0 serves a TcpStore; -1 = observer (claims no rank)
  int world_size = 1;       // with rank -1, 0 = unknown (not checked)
  std::string job_token;    // empty = no token
  std::string job_id;       // PSTATE_JOB_ID: the store refuses a process of another job by name
  std::string socket_ifname;    // PSTATE_SOCKET_IFNAME rule (netif.hpp); empty = by the address alone
  int64_t timeout_ms = 600000;  // bounds open_store (connect, handshake); calls take a Deadline
  bool serve = true;        // tcp:// only: rank 0 starts the server (false: someone else serves)
  bool rejoin = false;      // PSTATE_REJOIN=1: this process replaces a dead rank of a running job
};

// Opens the store named by options.init_method; rank 0 of a tcp:// store starts the server first.
// Throws INVALID_ARGUMENT (bad init_method, rank, world size), TRANSPORT (port taken, address
// not on this host), TIMEOUT (store not reachable in timeout_ms), AUTH, MISMATCH.
std::unique_ptr<Store> open_store(const StoreOptions &options);
// The same, logging through the caller's logger (the context's, with its rank prefix).
std::unique_ptr<Store> open_store(const StoreOptions &options, const Logger &logger);

// All `world_size` ranks meet at `name`: returns when every one of them has arrived (add + wait).
// A name is used once per job.
void store_barrier(Store &store, const std::string &name, int world_size, Deadline deadline);

// Throws INVALID_ARGUMENT unless the key is 1..kStoreMaxKeyBytes bytes.
void validate_key(const std::string &key);
// Throws INVALID_ARGUMENT when value is over kStoreMaxValueBytes, naming key.
void validate_value(const std::string &key, const Bytes &value);
// The key quoted for messages: 'addr/3'; unprintable bytes as \xNN, long keys cut with "...".
std::string quote_key(std::string_view key);
// Up to `limit` keys quoted and joined with ", ", plus "and N more".
std::string quote_keys(const std::vector<std::string> &keys, size_t total, size_t limit = 8);

// Ranks for messages: rank_list "2, 5" or "8-15, 20 and 3 more" (up to `limit` items, a run of
// consecutive ranks is one; `total` counts the ranks not passed too); ranks_phrase "rank 2",
// "ranks 2 and 5", "ranks 8-15".
std::string rank_list(const std::vector<int> &ranks, size_t total, size_t limit = 12);
std::string ranks_phrase(const std::vector<int> &ranks, size_t total);

// "requests 5 frames 5 sent_bytes 412 received_bytes 1230 connects 1" for the INFO lines (one
// word and its number each, so that scripts read them: bench/startup_curve.sh).
std::string describe_traffic(const StoreTraffic &t);

// Decimal text of an add() counter, and its parse (false when the bytes are not one).
Bytes counter_to_bytes(int64_t value);
bool counter_from_bytes(const Bytes &bytes, int64_t *value);

}  // namespace pstate
