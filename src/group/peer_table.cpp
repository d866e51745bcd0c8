// peer_table.cpp — every launch rank's record, its UCX address read on first use, and the checks
// pstate_init makes on the records (interfaces that cannot reach, local ranks). See peer_table.hpp.
#include "group/peer_table.hpp"

#include "bootstrap/netif.hpp"
#include "group/host_identity.hpp"

#include <algorithm>
#include <map>

namespace pstate {

void PeerTable::adopt(RankDirectory d, int world_size, int self, const char *what) {
  if (d.ranks.size() != static_cast<size_t>(world_size))
    throw_error(PSTATE_ERR_MISMATCH, what, " lists ", d.ranks.size(), " ranks, not ", world_size,
                " (a store of another job?)");
  std::lock_guard<std::mutex> lock(mutex_);
  self_ = self;
  job_id_ = d.job_id;
  peers_.clear();
  given_local_ranks_.clear();
  interfaces_.clear();
  for (RankRecord &rec : d.ranks) {
    given_local_ranks_.push_back(rec.local_rank);
    interfaces_.push_back(std::move(rec.interfaces));
    peers_.push_back(std::move(rec.peer));
  }
  address_on_store_.assign(peers_.size(), d.addresses_on_store ? 1 : 0);
}

// The address of `from`, rank r's entry as read from the store, becomes r's, once its host and pid
// are the directory's (else MISMATCH naming `source`: another job's record under the same prefix).
void PeerTable::take_address(int r, PeerEntry &&from, const std::string &source) {
  PeerEntry &p = peers_.at(static_cast<size_t>(r));
  if (from.host_id != p.host_id || from.pid != p.pid)
    throw_error(PSTATE_ERR_MISMATCH, "rank ", self_, ": rank ", r, "'s record in ", source, " (host ",
                host_identity_name(from.host_id), ", pid ", from.pid, ") differs from the rank directory's (host ",
                host_identity_name(p.host_id), ", pid ", p.pid, "): two jobs share this store prefix?");
  p.address = std::move(from.address);
  address_on_store_.at(static_cast<size_t>(r)) = 0;
}

void PeerTable::set_entry(int r, PeerEntry entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  peers_.at(static_cast<size_t>(r)) = std::move(entry);
}

void PeerTable::set_own_address(std::vector<uint8_t> address) {
  std::lock_guard<std::mutex> lock(mutex_);
  peers_.at(static_cast<size_t>(self_)).address = std::move(address);
  address_on_store_.at(static_cast<size_t>(self_)) = 0;
}

PeerEntry PeerTable::entry(int r, bool urgent, Store &store, int64_t timeout_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  PeerEntry &p = peers_.at(static_cast<size_t>(r));
  if (!p.address.empty() || !address_on_store_.at(static_cast<size_t>(r))) return p;
  // A failure notice (urgent) never reads the store one peer at a time: the context has read, in
  // one batch, the addresses its notices need. No address returned: the worker skips that peer.
  if (urgent) return p;
  const std::string key = rank_record_key(r);
  RankRecord rec;
  try {
    rec = decode_rank_record(store.get(key, Deadline::after_ms(timeout_ms)));
  } catch (const Error &e) {
    throw_error(e.status(), "rank ", self_, ": reading rank ", r, "'s UCX address from the store (", key,
                ") to connect to it for the first time: ", e.what());
  }
  take_address(r, std::move(rec.peer), cat("the store (", key, ")"));
  return p;
}

void PeerTable::read_addresses(const std::vector<int> &ranks, bool same_host_only, Store &store,
                               int64_t timeout_ms) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (address_on_store_.empty()) return;
    const std::string &my_host = peers_.at(static_cast<size_t>(self_)).host_id;
    std::vector<int> missing;
    std::vector<std::string> keys;
    for (int r : ranks) {
      const PeerEntry &p = peers_.at(static_cast<size_t>(r));
      if (!address_on_store_.at(static_cast<size_t>(r)) || !p.address.empty()) continue;
      if (same_host_only && p.host_id != my_host) continue;
      missing.push_back(r);
      keys.push_back(rank_record_key(r));
    }
    if (keys.empty()) return;
    std::vector<Bytes> values = store.get_many(keys, Deadline::after_ms(std::min<int64_t>(timeout_ms, 1000)));
    for (size_t i = 0; i < missing.size(); ++i)
      take_address(missing[i], std::move(decode_rank_record(values[i]).peer), "the store (for a failure notice)");
  } catch (...) {  // the notices go where addresses are known
  }
}

void PeerTable::forget_store_addresses() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fill(address_on_store_.begin(), address_on_store_.end(), 0);
}

void PeerTable::admit(int r, RankRecord record) {
  given_local_ranks_[static_cast<size_t>(r)] = record.local_rank;
  interfaces_[static_cast<size_t>(r)] = std::move(record.interfaces);
  std::lock_guard<std::mutex> lock(mutex_);
  peers_[static_cast<size_t>(r)] = std::move(record.peer);
  address_on_store_[static_cast<size_t>(r)] = 0;
}

RankRecord PeerTable::record(int r) const {
  const auto i = static_cast<size_t>(r);
  return {given_local_ranks_[i], interfaces_[i], peers_[i]};
}

std::vector<std::string> PeerTable::host_ids() const {
  std::vector<std::string> hosts;
  hosts.reserve(peers_.size());
  for (const auto &p : peers_) hosts.push_back(p.host_id);
  return hosts;
}

namespace {

// "lo 127.0.0.1" or "lo 127.0.0.1, lo2 127.0.0.2": every address is loopback.
bool only_loopback(const std::string &interfaces) {
  if (interfaces.empty()) return false;
  size_t at = 0;
  while (at < interfaces.size()) {
    size_t end = interfaces.find(", ", at);
    std::string item = interfaces.substr(at, end == std::string::npos ? std::string::npos : end - at);
    size_t space = item.rfind(' ');
    if (space == std::string::npos || !is_loopback_ipv4(item.substr(space + 1))) return false;
    if (end == std::string::npos) break;
    at = end + 2;
  }
  return true;
}

}  // namespace

// A rank whose named interfaces are all loopback advertises UCX addresses no other host can
// reach; UCX would fail later with "Destination is unreachable" on whichever rank tried first.
// Every rank sees the same directory, so every rank reports the same pair, at once.
void PeerTable::check_interfaces_reach() const {
  const int n = static_cast<int>(peers_.size());
  for (int a = 0; a < n; ++a) {
    const std::string &ia = interfaces_[static_cast<size_t>(a)];
    if (!only_loopback(ia)) continue;
    for (int b = 0; b < n; ++b) {
      if (peers_[static_cast<size_t>(b)].host_id == peers_[static_cast<size_t>(a)].host_id) continue;
      const std::string &ib = interfaces_[static_cast<size_t>(b)];
      throw_error(PSTATE_ERR_TRANSPORT, "rank ", a, " (host ",
                  host_identity_name(peers_[static_cast<size_t>(a)].host_id),
                  ") limits its sockets to loopback interfaces (", ia, "), which rank ", b, " (host ",
                  host_identity_name(peers_[static_cast<size_t>(b)].host_id), ", ",
                  ib.empty() ? std::string("no interface named") : "interfaces " + ib,
                  ") cannot reach: set PSTATE_SOCKET_IFNAME on every rank to the interfaces of the network between "
                  "the hosts (e.g. eth0, or ^lo for all but loopback)");
    }
  }
}

// Every rank's local rank: what its launcher gave or, where nothing did, its index among the ranks
// of its host in rank order (logged at INFO). Two ranks of one host ending with the same local
// rank would share a GPU: MISMATCH on every rank of that host, naming both and where each value
// came from. Reads only the directory: no store traffic.
void PeerTable::settle_local_ranks(LaunchEnv &launch, const Logger &log) const {
  const std::string &my_host = peers_[static_cast<size_t>(launch.rank)].host_id;
  std::vector<int> on_host;  // the host's ranks, in rank order
  for (int r = 0; r < launch.world_size; ++r)
    if (peers_[static_cast<size_t>(r)].host_id == my_host) on_host.push_back(r);
  auto origin = [&](int r, int value) {
    return given_local_ranks_[static_cast<size_t>(r)] >= 0 ? cat("rank ", r, " has LOCAL_RANK ", value)
                                                           : cat("rank ", r, " has none (derived ", value, ")");
  };
  std::map<int, int> holder;  // local rank -> the rank of this host that has it
  for (size_t i = 0; i < on_host.size(); ++i) {
    int r = on_host[i], given = given_local_ranks_[static_cast<size_t>(r)];
    int value = given >= 0 ? given : static_cast<int>(i);
    auto [it, added] = holder.emplace(value, r);
    if (!added) {
      int other = it->second;
      if (given_local_ranks_[static_cast<size_t>(other)] >= 0 && given >= 0)
        throw_error(PSTATE_ERR_MISMATCH, "ranks ", other, " and ", r, " on host ", host_identity_name(my_host),
                    " both have local_rank ", value, ": give each rank of a host its own LOCAL_RANK");
      throw_error(PSTATE_ERR_MISMATCH, "ranks ", other, " and ", r, " on host ", host_identity_name(my_host),
                  " would both have local_rank ", value, " (", origin(other, value), ", ", origin(r, value),
                  "): set LOCAL_RANK on every rank of a host, or on none (pstate then numbers them in rank order)");
    }
  }
  if (!launch.local_rank_given) {
    auto at = std::find(on_host.begin(), on_host.end(), launch.rank);
    launch.local_rank = static_cast<int>(at - on_host.begin());
    if (launch.local_world_size < 0) launch.local_world_size = static_cast<int>(on_host.size());
    log.info("init: local rank ", launch.local_rank, " of ", on_host.size(), " on host ", host_identity_name(my_host),
             " (no LOCAL_RANK or local_rank parameter: the rank's place among the host's ranks, in rank order)");
  }
  if (launch.local_rank >= static_cast<int>(on_host.size()))
    log.warn("init: local_rank ", launch.local_rank, " but only ", on_host.size(), " ranks run on host ",
             host_identity_name(my_host), " (is LOCAL_RANK right?)");
}

}  // namespace pstate
