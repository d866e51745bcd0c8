// host_identity.hpp — what "the same host" means for pstate, as one string per rank.
//
// Two ranks share a host when they can share memory and watch each other's processes: same
// kernel boot (hostname + /proc/sys/kernel/random/boot_id), same network namespace (test hosts
// are namespaces: ranks in different ones must talk as separate hosts) and same pid namespace
// (pidfd liveness checks need it). SGLang's in_the_same_node_as, made exact.
#pragma once

#include <string>

namespace pstate {

std::string this_host_identity();
// The human part of a host identity (the hostname), for messages.
std::string host_identity_name(const std::string &identity);

}  // namespace pstate
