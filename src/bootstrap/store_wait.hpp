// store_wait.hpp — the pause between two polls of a loop that waits for other ranks' keys
// (pstate_shrink's agreement, pstate_grow's rank 0 waiting for replacements).
//
// A TCP or file store is polled cheaply: the pause is a sleep. An etcd store is a replicated
// cluster that every rank of the job shares: polling it every few milliseconds from every rank
// loads it for nothing (and, on a busy cluster, delays everyone's requests), so the pause is a
// watch on the job's prefix from the store's last read, which returns at the first write or
// lapsed lease (at most 250 ms): a store that can watch is watched, not polled. Each store says
// which by its Store::await_change.
#pragma once

#include "bootstrap/store.hpp"

#include <chrono>

namespace pstate {

// Sleeps `pause`, or (an etcd store) waits until the store may have changed. Throws what the
// store's calls throw (ABORTED on interrupt, PEER_LOST when etcd is gone).
inline void await_store_change(Store &store, std::chrono::milliseconds pause) { store.await_change(pause); }

}  // namespace pstate
