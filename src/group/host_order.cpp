// host_order.cpp — renumbering ranks by host, describing a group's hosts (see host_order.hpp),
// and the two Context steps that use them: Context::order_ranks_by_host (rendezvous, before the
// transports start) and Context::warn_tensor_parallel_across_hosts (initialize_model_parallel).
#include "group/host_order.hpp"

#include "bootstrap/store.hpp"
#include "common/error.hpp"
#include "group/context.hpp"
#include "group/group.hpp"
#include "group/host_identity.hpp"

#include <cstdlib>
#include <map>

namespace pstate {

std::vector<int> ranks_ordered_by_host(const std::vector<std::string> &host_ids) {
  // Stable grouping: hosts in order of first appearance, ranks of a host in launcher order.
  std::map<std::string, size_t> host_index;
  std::vector<std::vector<int>> by_host;
  for (size_t r = 0; r < host_ids.size(); ++r) {
    auto [it, added] = host_index.emplace(host_ids[r], by_host.size());
    if (added) by_host.emplace_back();
    by_host[it->second].push_back(static_cast<int>(r));
  }
  std::vector<int> new_rank(host_ids.size());
  int next = 0;
  for (const auto &ranks : by_host)
    for (int r : ranks) new_rank[static_cast<size_t>(r)] = next++;
  return new_rank;
}

int count_hosts(const std::vector<int> &ranks, const std::vector<std::string> &host_ids) {
  std::map<std::string, int> seen;
  for (int r : ranks) seen[host_ids.at(static_cast<size_t>(r))] = 1;
  return static_cast<int>(seen.size());
}

std::string describe_hosts(const std::vector<int> &ranks, const std::vector<std::string> &host_ids) {
  std::vector<std::string> order;
  std::map<std::string, std::string> members;
  for (int r : ranks) {
    const std::string &h = host_ids.at(static_cast<size_t>(r));
    auto [it, added] = members.emplace(h, std::to_string(r));
    if (added) order.push_back(h);
    else it->second += "," + std::to_string(r);
  }
  std::string out;
  for (const auto &h : order) {
    const std::string &list = members[h];
    out += cat(out.empty() ? "" : "; ", list.find(',') == std::string::npos ? "rank " : "ranks ", list, " on ",
               host_identity_name(h));
  }
  return out;
}

bool order_ranks_by_host_from_env() {
  const char *v = std::getenv("PSTATE_ORDER_RANKS_BY_HOST");
  return v != nullptr && v[0] != '\0' && std::string(v) != "0";
}

// Rendezvous step (before the UCX worker exists, so every later key, tag and log line uses the
// new rank): publish this process's host, meet every rank, renumber.
void Context::order_ranks_by_host(Deadline deadline) {
  const int launcher_rank = launch_.rank;
  const std::string mine = this_host_identity();
  store_->set("pstate/host/" + std::to_string(launcher_rank), Bytes(mine.begin(), mine.end()), deadline);
  store_barrier(*store_, "pstate/hosts", launch_.world_size, deadline);
  std::vector<std::string> hosts(static_cast<size_t>(launch_.world_size));
  for (int r = 0; r < launch_.world_size; ++r) {
    Bytes v = store_->get("pstate/host/" + std::to_string(r), deadline);
    hosts[static_cast<size_t>(r)].assign(v.begin(), v.end());
  }
  launch_.rank = ranks_ordered_by_host(hosts)[static_cast<size_t>(launcher_rank)];
  log_.set_rank(launch_.rank);
  std::vector<int> all(static_cast<size_t>(launch_.world_size));
  for (int r = 0; r < launch_.world_size; ++r) all[static_cast<size_t>(r)] = r;
  log_.info("init: PSTATE_ORDER_RANKS_BY_HOST=1: launcher rank ", launcher_rank, " is rank ", launch_.rank, " (",
            launch_.world_size, " ranks on ", count_hosts(all, hosts), " hosts renumbered host by host; local_rank ",
            launch_.local_rank, " kept)");
}

// A tensor-parallel group across hosts is legal (a TP of 16 on 8-GPU nodes) but slow, and often
// a launcher that interleaved ranks: say so once per group, from its first rank, naming where
// each rank runs and the fix.
void Context::warn_tensor_parallel_across_hosts() const {
  Group *tp = groups_.by_kind(PSTATE_GROUP_TP);
  if (tp == nullptr || tp->rank_in_group() != 0) return;
  const std::vector<std::string> hosts = peers_.host_ids();
  int n = count_hosts(tp->launch_ranks(), hosts);
  if (n <= 1) return;
  log_.warn("group ", tp->name(), " (tensor parallel) spans ", n, " hosts: ", describe_hosts(tp->launch_ranks(), hosts),
            "; its all-reduces will cross the network. If the launcher interleaved ranks across hosts, set ",
            "PSTATE_ORDER_RANKS_BY_HOST=1 to keep tensor-parallel groups inside a host");
}

}  // namespace pstate
