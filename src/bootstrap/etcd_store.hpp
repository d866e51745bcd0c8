// etcd_store.hpp — the rendezvous store on an etcd v3 cluster (etcd://H1:2379,H2:2379,H3:2379/PREFIX):
// the job's deciding state lives in a replicated store, so the job survives losing any host,
// the one that started it included.
//
// Talks to etcd's HTTP/JSON gateway through EtcdClient (etcd_client.hpp says why not gRPC, and
// how failover across the listed endpoints, TLS and etcd users work). Every key of the job sits
// under ROOT = "PREFIX/@/": '@' may not appear in a prefix (init_method.cpp), so no other job's
// keys are ever under ROOT, even a job on PREFIX/b or one whose prefix is PREFIX/kv; every range
// this store reads, watches or deletes is within ROOT (so a job on P, when it closes, never deletes
// a live job's P/b). Layout under ROOT:
//   ROOT/meta          "world_size", the job token's fingerprint (HMAC, never the token), the job
//                      id, the rank that created it, its lease TTL; made in the same transaction
//                      as that rank's claim (create_revision == 0: the first writer wins)
//   ROOT/kv/KEY        the callers' keys (binary-safe: etcd keys are bytes)
//   ROOT/rank/R        rank R's claim, attached to R's lease: etcd deletes it when R stops renewing
//                      the lease (process killed, host gone, no FIN needed) within the lease TTL.
//                      members() lists these keys: pstate_live_ranks, pstate_shrink's agreement,
//                      failure notices and the doctor's "who is gone" read them
//   ROOT/joined/R      rank R opened the store (stays: "joined and left" vs "never joined")
//   ROOT/failed        a process of this job was refused before the world was complete, or gave
//                      up (abandon): every waiting rank throws its reason at once
//   ROOT/left          counts clean close()s; the last rank of the world removes ROOT (so does a
//                      close that leaves no rank claimed: a world that shrank)
//
// Liveness: each rank grants a lease of PSTATE_ETCD_LEASE_TTL_S seconds (default 3; etcd's
// minimum, about 2, and at most 60) and a thread renews it every TTL/3. A rank whose host
// vanished is gone from members() within the TTL, and watch_departures() tells the context at
// once (its UCX waits then fail with PEER_LOST instead of waiting for their timeout).
// A lease that lapsed under a live rank (etcd, or the way to it, stalled for longer than the TTL:
// etcd revokes every such lease when it runs again) is not the end of the rank: the keeper logs
// it at WARN, takes a new lease and claims the rank again (the claim only if the rank's key is
// free and the job's meta is the one it joined), and goes on renewing; it never stops while the
// store is open (a rank whose rank another process took meanwhile, or whose job's keys were
// removed, is out of the job: its calls then fail with PEER_LOST saying so). The other ranks do
// not take such a rank for gone: a lapse that watch_departures sees while this rank's own lease
// is in the same trouble (it lapsed lately, or no renewal got through for 2/3 of the TTL: an
// etcd-wide stall) is held for a TTL and a second, and dropped when the rank claims its rank
// again; members() counts held ranks live (and, in such trouble, every rank it believed live).
//
// Waits use watches, not polling: one transaction reads every missing key and ROOT/failed at
// revision R, then a watch on ROOT from R+1 wakes the waiter on the first put of interest (or
// after a few seconds, to re-read through failover, log who is missing at INFO and notice a lost
// quorum, since a member cut off from the others leaves its watches silent). add() and
// set_if_absent() are compare-and-set transactions; opening is one transaction per rank (meta +
// claim + joined), reads of many keys are batched into transactions of up to 100 ranges.
//
// Opening a prefix that holds a job this process cannot join — one with no live rank, one with
// another job token or job id, or one this very rank joined before (an earlier run of the job:
// a restart on the same prefix; PSTATE_REJOIN=1 is the way back into a running job) — waits until
// that job is provably over, then removes its keys (logged at WARN) and starts afresh: its leases
// must lapse (at most their TTL and a second); a job whose leases were seen to lapse while etcd
// answered promptly, or whose ranks all closed, is over at once; one found with no live lease
// gets a TTL and a second to claim its ranks again (leases that lapsed in an etcd stall come back
// within a renewal period) before it is taken for a leftover. A job that keeps renewing is
// refused, naming the prefix and its holders (AUTH for another token, MISMATCH otherwise). The
// removal is one transaction that requires the meta unchanged and no rank claimed.
// Errors name the store by its init method and prefix, and any lost cluster by "etcd".
#pragma once

#include "bootstrap/etcd_client.hpp"
#include "bootstrap/init_method.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"

#include <atomic>
#include <climits>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace pstate {

class EtcdStore final : public Store {
 public:
  // method must be an etcd:// or etcds:// init method. Grants the lease, checks the job's meta
  // (token, job id, world size), claims the rank. Throws INVALID_ARGUMENT, PEER_LOST (etcd not
  // reachable in timeout_ms), AUTH, MISMATCH, TRANSPORT.
  static std::unique_ptr<EtcdStore> open(const StoreOptions &options, const InitMethod &method, const Logger &logger);
  // The store without its opening (no request sent): connect() opens it later, from another
  // thread, while interrupt() can already stop it (the flight recorder's DumpWatcher).
  static std::unique_ptr<EtcdStore> open_unconnected(const StoreOptions &options, const InitMethod &method,
                                                     const Logger &logger);
  void connect(Deadline deadline) { open_now(deadline); }
  // How long a wait watches before it reads again (default 2 s: failover, progress lines); a
  // watcher that waits for hours asks for longer slices, so it costs etcd a read a slice.
  void set_wait_slice_ms(int64_t ms) { wait_slice_ms_ = ms; }
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
  // Waits in a watch, up to 250 ms (whatever the pause), for the next write or lapsed lease under
  // the job's prefix since this store's last read.
  void await_change(std::chrono::milliseconds pause) override;
  void interrupt() noexcept override;
  void world_resized(int world_size) override { world_now_ = world_size; }
  std::string describe() const override { return url_; }
  // Revokes the lease (the rank leaves members() at once; one that lapsed already is fine); the
  // last rank of the world to close, or the last one holding a claim, removes ROOT. Never waits
  // for other ranks.
  bool close(Deadline deadline) override;
  std::optional<Error> close_failure() const override;

  int64_t lease_ttl_s() const { return ttl_s_; }
  int64_t lease_id() const { return lease_.load(); }  // this rank's current lease (changes after a lapse)
  uint64_t requests() const;  // requests sent to etcd by this store (its lease thread included)
  // requests() as StoreTraffic (requests and frames; bytes and connections are not counted here).
  StoreTraffic traffic() const override {
    StoreTraffic t;
    t.requests = t.frames = requests();
    return t;
  }

 private:
  // What the open transaction found under ROOT when another rank had created the job.
  struct Found;
  enum class Verdict { kOver, kChanged, kRunning };

  EtcdStore(const StoreOptions &options, const InitMethod &method, const Logger &logger);
  void open_now(Deadline deadline);
  void claim_rank(Deadline deadline);
  // Why this process cannot join the job in `found` ("" when it can): another token, job id, or
  // this rank joined it before (an earlier run). Sets *status to the refusal's status and *kind
  // to a short phrase of the reason (for the log of a removal).
  std::string foreign_job(const Found &found, pstate_status_t *status, std::string *kind) const;
  // Waits until the job in `found` is over (kOver: remove it), changed meanwhile (kChanged: read
  // again) or still running after its leases had time to lapse (kRunning).
  Verdict await_job_over(const Found &found, bool foreign, Deadline deadline);
  void remove_leftover(const Found &found, const std::string &why, Deadline deadline);
  std::string holders_phrase(const nlohmann::json &rank_kvs, int64_t total) const;
  // A transaction whose puts carry this rank's lease: a lease that lapsed meanwhile (an etcd
  // stall during open) is replaced and the transaction sent again.
  nlohmann::json txn_with_lease(const std::function<nlohmann::json(int64_t lease)> &make, Deadline deadline,
                                const std::string &what);
  [[noreturn]] void refuse(pstate_status_t status, const std::string &why, bool member, Deadline deadline);
  void check_failed(const nlohmann::json &kvs);
  std::string absent_ranks(Deadline deadline);
  // Waits until every key (full etcd keys) exists; values gets theirs (in order). False when the
  // deadline passed first (missing then lists the keys still absent).
  bool await(const std::vector<std::string> &keys, Deadline deadline, const std::string &what,
             std::vector<std::string> *values, std::vector<std::string> *missing);
  void keep_alive_loop();
  // The lease `lapsed` is gone: grants a new one and (once the rank is claimed) claims the rank
  // with it again. False when the rank cannot be had back (lost_why_ says why). Any thread.
  bool replace_lapsed_lease(EtcdClient &client, int64_t lapsed, Deadline deadline);
  void note_lease_lapsed();
  bool lease_trouble_recent() const;  // this rank's own lease lapsed lately, or cannot be renewed now
  void departures_loop(std::function<void(int, bool)> on_change, int64_t start_revision);
  void stop_keeper();
  void require_open(const char *call) const;
  std::string k(const std::string &name) const { return prefix_ + name; }
  std::string user_key(const std::string &key) const { return prefix_ + "kv/" + key; }

  StoreOptions options_;
  std::string url_;
  std::string path_;    // "PREFIX", as the init method names it (for messages)
  std::string prefix_;  // "PREFIX/@/": the root of every key of this job
  EtcdConfig config_;
  Logger logger_;
  mutable std::mutex mutex_;  // one call at a time on client_
  std::unique_ptr<EtcdClient> client_;
  int64_t ttl_s_ = 3;
  int64_t wait_slice_ms_ = 2000;
  std::atomic<int64_t> lease_{0};  // 0: none (an observer); replaced after a lapse (lease_mutex_)
  bool closed_ = false;
  std::optional<Error> close_failure_;  // what close() met (mutex_)
  std::atomic<int> world_now_{0};  // world_resized (0: the world it opened with)

  mutable std::mutex lease_mutex_;   // one replacement of a lapsed lease at a time
  std::atomic<bool> claimed_{false};  // ROOT/rank/R is this rank's: a new lease claims it again
  int64_t meta_created_ = 0;          // create_revision of the meta this rank joined
  std::atomic<bool> lost_{false};     // the rank could not be claimed again after a lapse
  std::string lost_why_;              // (lease_mutex_)
  std::atomic<int64_t> renewed_ms_{0};                // steady ms of the last renewal (or grant) that worked
  std::atomic<int64_t> lapsed_ms_{INT64_MIN / 2};     // steady ms of the last lapse this rank saw of its lease

  std::thread keeper_;  // renews the lease every TTL/3
  std::mutex keeper_mutex_;
  std::condition_variable keeper_cv_;
  bool keeper_stop_ = false;
  std::atomic<uint64_t> keeper_requests_{0};

  std::thread departures_;  // watch_departures
  std::mutex departures_mutex_;  // guards departures_client_ against its thread ending
  EtcdClient *departures_client_ = nullptr;
  mutable std::mutex view_mutex_;  // believed_, held_
  std::set<int> believed_;         // ranks watch_departures takes for live (claimed, not told gone)
  std::set<int> held_;             // of those, ranks whose lapse is held (see the header)
};

}  // namespace pstate
