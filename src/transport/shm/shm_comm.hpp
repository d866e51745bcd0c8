// shm_comm.hpp — the host communicator of a group whose ranks all share this host
// (transport/host_comm.hpp): shared memory for what it carries, UCX for the rest.
//
// ShmComm (shm_comm.cpp; outside it only the interface is seen) owns the group's shared-memory transports, each made on
// first use (every rank makes the same calls, so they make them together; a group that never calls costs nothing):
//   - the segment (ShmGroup, shm_group.hpp): all_reduce, all_gather, reduce_scatter, broadcast,
//     reduce, scatter, barrier, all_gatherv, reduce_scatterv, with the agreement in its own flag
//     words (ShmGroup::begin_call) and one verdict per call;
//   - the pair rings (ShmP2p, shm_p2p.hpp): send, recv, requests and batches, made per pair on
//     first use without the other ranks;
//   - the message queue (ShmMessageQueue, message_queue.hpp): broadcast_object from group rank 0,
//     SGLang's shm_broadcast.
// and a communicator of the same ranks over the network (a UcxComm, given by the group: this
// folder includes no other transport), which carries the rest: objects but the message queue's,
// gather, all_to_all, the NCCL unique id, and the agreement exchange under PSTATE_CHECK=1. An
// operation handed to it first takes part in the shared-memory agreement (arrive), so it meets
// whatever the peers call here; its flight-recorder entry says UCX. Why it holds the network
// communicator instead of the group routing between the two: the group stays one dispatch per
// operation, and which operations shared memory carries is decided here alone (a composed
// communicator decides the same for its hosts).
//
// Liveness: every wait checks, besides its own progress, the failure notices of the group's call
// and pstate_abort / the interrupt check (the group's hooks, which know the context), and the
// exits of the peers' processes (common/process_watch.hpp): a SIGKILLed peer is PEER_LOST, not a
// wait until the deadline. Pending ring sends move whenever this rank waits for anything.
#pragma once

#include "transport/host_comm.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pstate::shm {

// What the shared-memory communicator asks of its group beyond HostCommSetup.
struct ShmCommHooks {
  std::string names;        // the group's unique shared-memory prefix ("/pstate-<job>-<group id>-<first rank>-")
  std::vector<int> global;  // each group rank's rank in the current world, for messages
  std::function<int64_t(int)> pid_of;  // a group rank's process id (0 or less: unknown)
  std::function<void()> notices;       // throws a peer's failure notice that decides this group's call
  std::function<void()> stop;          // throws when pstate_abort or the interrupt check asks to stop
};

// network: a communicator of the same ranks over the network (UCX), which this one owns and
// hands what it does not carry.
std::unique_ptr<HostComm> make_shm_comm(const HostCommSetup &setup, ShmCommHooks hooks,
                                        std::unique_ptr<HostComm> network);

}  // namespace pstate::shm
