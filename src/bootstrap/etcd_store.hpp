// etcd_store.hpp — the rendezvous store on an etcd v3 cluster (etcd://H1:2379,H2:2379,H3:2379/PREFIX):
// the job's deciding state lives in a replicated store, so the job survives losing any host,
// the one that started it included (issue 34).
//
// Talks to etcd's HTTP/JSON gateway through EtcdClient (etcd_client.hpp says why not gRPC, and
// how failover across the listed endpoints, TLS and etcd users work). Layout under PREFIX:
//   PREFIX/meta        "world_size", the job token's fingerprint (HMAC, never the token), the job
//                      id, the rank that created it; made in the same transaction as that rank's
//                      claim (create_revision == 0: the first writer wins)
//   PREFIX/kv/KEY      the callers' keys (binary-safe: etcd keys are bytes)
//   PREFIX/rank/R      rank R's claim, attached to R's lease: etcd deletes it when R stops renewing
//                      the lease (process killed, host gone, no FIN needed) within the lease TTL.
//                      members() lists these keys: pstate_live_ranks, pstate_shrink's agreement,
//                      failure notices and the doctor's "who is gone" read them
//   PREFIX/joined/R    rank R opened the store (stays: "joined and left" vs "never joined")
//   PREFIX/failed      a process of this job was refused before the world was complete, or gave
//                      up (abandon): every waiting rank throws its reason at once
//   PREFIX/left        counts clean close()s; the last rank of the world removes PREFIX/
//
// Liveness: each rank grants a lease of PSTATE_ETCD_LEASE_TTL_S seconds (default 3; etcd's
// minimum, about 2, and at most 60) and a thread renews it every TTL/3. A rank whose host
// vanished is gone from members() within the TTL, and watch_departures() tells the context at
// once (its UCX waits then fail with PEER_LOST instead of waiting for their timeout). A lease that expired under a live rank (etcd
// unreachable longer than the TTL) is logged at WARN: the others have taken it for dead.
//
// Waits use watches, not polling: one transaction reads every missing key and PREFIX/failed at
// revision R, then a watch on PREFIX/ from R+1 wakes the waiter on the first put of interest (or
// after a few seconds, to re-read through failover, log who is missing at INFO and notice a lost
// quorum, since a member cut off from the others leaves its watches silent). add() and
// set_if_absent() are compare-and-set transactions; opening is one transaction per rank (meta +
// claim + joined), reads of many keys are batched into transactions of up to 100 ranges.
//
// A leftover: PREFIX holds a meta but no live rank (every lease lapsed: a job that was killed)
// when a rank opens it: the rank deletes PREFIX/ (logged at WARN) and starts the job afresh.
// A rank held by a live lease is refused as a duplicate (MISMATCH naming the holder) after the
// holder's lease had TTL + 1 s to lapse (a replacement started right after its predecessor died
// gets the rank). Errors name the store by its init method, and any lost cluster by "etcd".
#pragma once

#include "bootstrap/etcd_client.hpp"
#include "bootstrap/init_method.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace pstate {

class EtcdStore final : public Store {
 public:
  // method must be an etcd:// or etcds:// init method. Grants the lease, checks the job's meta
  // (token, job id, world size), claims the rank. Throws INVALID_ARGUMENT, PEER_LOST (etcd not
  // reachable in timeout_ms), AUTH, MISMATCH, TRANSPORT.
  static std::unique_ptr<EtcdStore> open(const StoreOptions &options, const InitMethod &method, const Logger &logger);
  ~EtcdStore() override;  // stops renewing the lease (the rank's key lapses within the TTL)

  void set(const std::string &key, const Bytes &value, Deadline deadline) override;
  Bytes get(const std::string &key, Deadline deadline) override;
  int64_t add(const std::string &key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string> &keys, Deadline deadline) override;
  Bytes set_if_absent(const std::string &key, const Bytes &value, Deadline deadline) override;
  bool check(const std::string &key, Deadline deadline) override;
  bool erase(const std::string &key, Deadline deadline) override;
  void abandon(pstate_status_t status, const std::string &why) noexcept override;
  std::optional<std::vector<int>> members(Deadline deadline) override;  // ranks with a live lease
  // A thread watches PREFIX/rank/: a DELETE (lease lapsed, revoked) is on_change(rank, true).
  void watch_departures(std::function<void(int rank, bool gone)> on_change) override;
  // Waits in a watch, up to 250 ms, for the next write or lapsed lease under the job's prefix
  // since this store's last read (await_store_change, store_wait.hpp).
  void await_change();
  void interrupt() noexcept override;
  std::string describe() const override { return url_; }
  // Revokes the lease (the rank leaves members() at once); the last rank of the world to close
  // removes PREFIX/. Never waits for other ranks.
  bool close(Deadline deadline) override;

  int64_t lease_ttl_s() const { return ttl_s_; }
  uint64_t requests() const;  // requests sent to etcd by this store (its lease thread included)
  // requests() as StoreTraffic (requests and frames; bytes and connections are not counted here).
  StoreTraffic traffic() const override {
    StoreTraffic t;
    t.requests = t.frames = requests();
    return t;
  }

 private:
  EtcdStore(const StoreOptions &options, const InitMethod &method, const Logger &logger);
  void open_now(Deadline deadline);
  void claim_rank(Deadline deadline);
  [[noreturn]] void refuse(pstate_status_t status, const std::string &why, bool member, Deadline deadline);
  void check_failed(const nlohmann::json &kvs);
  std::string absent_ranks(Deadline deadline);
  // Waits until every key (full etcd keys) exists; values gets theirs (in order). False when the
  // deadline passed first (missing then lists the keys still absent).
  bool await(const std::vector<std::string> &keys, Deadline deadline, const std::string &what,
             std::vector<std::string> *values, std::vector<std::string> *missing);
  void keep_alive_loop();
  void departures_loop(std::function<void(int, bool)> on_change, int64_t start_revision);
  void stop_keeper();
  void require_open(const char *call) const;
  std::string k(const std::string &name) const { return prefix_ + name; }
  std::string user_key(const std::string &key) const { return prefix_ + "kv/" + key; }

  StoreOptions options_;
  std::string url_;
  std::string prefix_;  // "PREFIX/"
  EtcdConfig config_;
  Logger logger_;
  mutable std::mutex mutex_;  // one call at a time on client_
  std::unique_ptr<EtcdClient> client_;
  int64_t ttl_s_ = 3;
  int64_t lease_ = 0;  // 0: none (an observer)
  bool closed_ = false;

  std::thread keeper_;  // renews the lease every TTL/3
  std::mutex keeper_mutex_;
  std::condition_variable keeper_cv_;
  bool keeper_stop_ = false;
  std::atomic<uint64_t> keeper_requests_{0};

  std::thread departures_;  // watch_departures
  std::mutex departures_mutex_;  // guards departures_client_ against its thread ending
  EtcdClient *departures_client_ = nullptr;
};

}  // namespace pstate
