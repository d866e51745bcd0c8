// ucx_comm.hpp — the host communicator over UCX (transport/host_comm.hpp): any ranks on any hosts.
//
// UcxComm (ucx_comm.cpp; outside it only the interface is seen) owns the group's Channel over
// the UCX worker (UcxChannel: group ranks to world ranks, the group id in every tag, the call's
// deadline and name in every wait) and the algorithm selector of src/coll/ (select.hpp: an
// algorithm per collective by group size and bytes, PSTATE_ALGO_* overrides, its choice explained
// at INFO). Collectives are the algorithms run over the channel on
// the call's tag base; the agreement exchange is coll/agreement_exchange.hpp's Bruck gather of
// records on the same channel, and a small all_reduce, all_gather, broadcast or reduce may ride
// in it (fold mask: every one whose algorithm is not forced; a barrier is the exchange alone).
//
// Point-to-point takes the per-peer tags of ucx_tag.hpp: one running counter per stream, peer and
// direction (the k-th send meets the k-th receive); the counters are also what
// pstate_destroy_model_parallel compares to find messages no receive took. A request
// (pstate_isend / pstate_irecv) is posted under a worker owner of its own, so no other call's
// failure cancels it.
#pragma once

#include "transport/host_comm.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <memory>

namespace pstate {

// position: the group's collectives, which the channel's waits hand to failure notices. Throws
// INVALID_ARGUMENT on a bad PSTATE_ALGO_* value (the selector reads them here).
std::unique_ptr<HostComm> make_ucx_comm(UcxWorker &worker, const HostCommSetup &setup, const CallPosition *position);

}  // namespace pstate
