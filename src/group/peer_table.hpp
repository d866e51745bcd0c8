// peer_table.hpp — what this rank knows of every launch rank of its job: the record each published
// at rendezvous (rank_records.hpp: host, pid, UCX address, the local rank its launcher gave, the
// interfaces it named), the job id, and the checks pstate_init makes on them.
//
// Owned by the Context (context.hpp), filled by its rendezvous (rendezvous.cpp) from the rank
// directory, changed by pstate_shrink / pstate_grow (shrink.cpp: new workers' addresses, admitted
// replacements). The compact directory leaves the UCX addresses on the store: entry() reads a
// peer's the first time the UCX worker connects to it (the worker's PeerDirectory), and
// read_addresses() reads those that failure notices need, in one batch. Indexed by launch rank.
//
// Threads: the addresses (and which are still on the store) are guarded by one mutex, since the
// worker asks for entries while a call runs; everything else is read and written by the thread
// inside a call of the context.
#pragma once

#include "bootstrap/launch_env.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"
#include "group/rank_records.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace pstate {

class PeerTable {
 public:
  // The rank directory's facts become this table's (what: where it came from, for the MISMATCH
  // when it does not list world_size ranks). self: this process's launch rank.
  void adopt(RankDirectory d, int world_size, int self, const char *what);
  // Rank r's address from a record read from the store; MISMATCH naming `source` unless its host
  // and pid are the directory's (another job's record under the same prefix). Under the mutex, or
  // before the worker has the table.
  void take_address(int r, PeerEntry &&from, const std::string &source);
  // This process's own entry (a new worker's, after pstate_shrink or a rejoin), or its address only.
  void set_entry(int r, PeerEntry entry);
  void set_own_address(std::vector<uint8_t> address);
  // The UCX worker's PeerDirectory: rank r's entry, its address read from `store` on first use
  // where the compact directory left it out. `urgent` (failure notices): no read; the context read
  // what they need first (read_addresses).
  PeerEntry entry(int r, bool urgent, Store &store, int64_t timeout_ms);
  // The addresses still on the store of `ranks` (of this host only when same_host_only), read in
  // one pipelined batch bounded to 1 s (and timeout_ms). Never throws: a peer whose address cannot
  // be read is not told.
  void read_addresses(const std::vector<int> &ranks, bool same_host_only, Store &store, int64_t timeout_ms) noexcept;
  // pstate_shrink: every survivor's address is known (each published its new worker's with its
  // agreement key); none is read from the store from now on.
  void forget_store_addresses();
  // pstate_grow: an admitted replacement's record replaces the dead rank's.
  void admit(int r, RankRecord record);
  RankRecord record(int r) const;

  // Ranks of different hosts that limited UCX to loopback interfaces cannot reach each other:
  // TRANSPORT on every rank, naming both ranks' interfaces, before UCX tries.
  void check_interfaces_reach() const;
  // Every rank's local rank: what its launcher gave or, where nothing did, its index among the
  // ranks of its host; MISMATCH for two ranks of one host with the same. Sets launch's local rank
  // (and local world size) when it was not given.
  void settle_local_ranks(LaunchEnv &launch, const Logger &log) const;

  const std::string &job_id() const { return job_id_; }
  size_t size() const { return peers_.size(); }
  const std::string &host_id(int r) const { return peers_.at(static_cast<size_t>(r)).host_id; }
  int64_t pid(int r) const { return peers_.at(static_cast<size_t>(r)).pid; }
  // Every rank's host id, in launch-rank order (host_order.cpp).
  std::vector<std::string> host_ids() const;

 private:
  int self_ = -1;
  std::string job_id_;
  std::vector<int> given_local_ranks_;   // per launch rank, from the rank directory; -1: derived
  std::vector<std::string> interfaces_;  // per launch rank: the interfaces it named ("" = none)
  std::vector<PeerEntry> peers_;
  // Guards the addresses in peers_ and address_on_store_ (entry() fills them on first use).
  std::mutex mutex_;
  std::vector<uint8_t> address_on_store_;  // per launch rank: 1 = its address is still to be read
};

}  // namespace pstate
