// host_order.hpp — host awareness of the rank layout: renumbering ranks host by host, and
// describing how a group's ranks are spread over hosts (pure functions; the Context calls them).
//
// SGLang's layout puts tensor-parallel groups on consecutive ranks, which keeps TP inside a node
// only when the launcher numbers ranks node-major (torchrun, `pstate run`, srun's block
// distribution). A launcher that interleaves (srun --distribution=cyclic, a hostfile listed
// round-robin) puts every TP group across nodes. PSTATE_ORDER_RANKS_BY_HOST=1 makes pstate
// renumber the world itself: hosts in the order of their lowest launcher rank, ranks of one
// host in launcher order. Launcher rank 0 stays rank 0 (its host comes first and it comes first
// on it), so the rank that serves the store keeps its role.
#pragma once

#include <string>
#include <vector>

namespace pstate {

// host_ids[r] = the host of launcher rank r; returns new_rank[r].
std::vector<int> ranks_ordered_by_host(const std::vector<std::string> &host_ids);

// Distinct hosts among `ranks` (global ranks indexing host_ids).
int count_hosts(const std::vector<int> &ranks, const std::vector<std::string> &host_ids);

// "ranks 0,1 on a (netns 4026532301); ranks 2,3 on b (netns 4026532405)": the ranks of each host
// in first-appearance order, hosts named with host_identity_name.
std::string describe_hosts(const std::vector<int> &ranks, const std::vector<std::string> &host_ids);

// Whether PSTATE_ORDER_RANKS_BY_HOST asks for it: set and neither empty nor "0".
bool order_ranks_by_host_from_env();

}  // namespace pstate
