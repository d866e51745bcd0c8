// select.hpp — which algorithm of algorithms.hpp runs a collective, from group size and bytes.
//
// An AlgorithmSelector is made once per group (it reads the PSTATE_ALGO_* overrides then) and
// asked once per call; each answer carries the algorithm's name, so the group layer can log its
// choice at INFO ("tp:0 all_reduce 4 MiB -> ring"). Thresholds are the named constants below.
//
// Overrides (for tests and experiments; "auto" or unset = by size):
//   PSTATE_ALGO_ALLREDUCE       ring | recursive_doubling
//   PSTATE_ALGO_ALLGATHER       ring | bruck
//   PSTATE_ALGO_REDUCE_SCATTER  ring
//   PSTATE_ALGO_BROADCAST       binomial | pipelined_chain
//   PSTATE_ALGO_GATHER          linear
//   PSTATE_ALGO_REDUCE          binomial | ring
//   PSTATE_ALGO_SCATTER         linear
//   PSTATE_ALGO_ALLTOALL        pairwise
//   PSTATE_ALGO_BARRIER         dissemination
// An unknown value is PSTATE_ERR_INVALID_ARGUMENT from the constructor, naming the variable and
// the accepted values (so a typo fails at group creation rather than silently running "auto").
#pragma once

#include "coll/algorithms.hpp"

#include <cstddef>
#include <functional>

namespace pstate::coll {

// ---- thresholds -----------------------------------------------------------------------------
// allreduce: recursive doubling (log2 P rounds, whole buffer each) up to this many bytes, ring
// (2(P-1) steps, 1/P of the buffer each) above. Also recursive doubling when count < P, where
// most ring blocks would be empty.
inline constexpr size_t kAllreduceRingMinBytes = 64 * 1024;
// allgather: Bruck up to this many bytes of *result* (P * send bytes), ring above.
inline constexpr size_t kAllgatherRingMinBytes = 64 * 1024;
// broadcast: binomial tree up to this many bytes, pipelined chain above (groups of 3 or more;
// for 2 ranks both are one send).
inline constexpr size_t kBroadcastChainMinBytes = 256 * 1024;
// reduce: binomial tree (log2 P rounds of the whole buffer) up to this many bytes, ring
// reduce-scatter + blocks to the root above; binomial too when count < P (most ring blocks would
// be empty). The same crossover as allreduce: the ring half of each moves the same bytes.
inline constexpr size_t kReduceRingMinBytes = 64 * 1024;

// ---- the algorithm families (one signature each) -----------------------------------------
using AllreduceFn = void (*)(Channel &, const void *send, void *recv, size_t count, pstate_dtype_t,
                             pstate_reduce_op_t, uint32_t tag_base);
using ReduceScatterFn = void (*)(Channel &, const void *send, void *recv, size_t recv_count, pstate_dtype_t,
                                 pstate_reduce_op_t, uint32_t tag_base);
using AllgatherFn = void (*)(Channel &, const void *send, void *recv, size_t send_count, pstate_dtype_t,
                             uint32_t tag_base);
using BroadcastFn = void (*)(Channel &, void *buf, size_t count, pstate_dtype_t, int root, uint32_t tag_base);
using GatherFn = void (*)(Channel &, const void *send, void *recv, size_t send_count, pstate_dtype_t, int root,
                          uint32_t tag_base);
using ReduceFn = void (*)(Channel &, const void *send, void *recv, size_t count, pstate_dtype_t, pstate_reduce_op_t,
                          int root, uint32_t tag_base);
using ScatterFn = void (*)(Channel &, const void *send, void *recv, size_t recv_count, pstate_dtype_t, int root,
                           uint32_t tag_base);
using AlltoallFn = void (*)(Channel &, const void *send, void *recv, size_t count_per_rank, pstate_dtype_t,
                            uint32_t tag_base);
using BarrierFn = void (*)(Channel &, uint32_t tag_base);

template <typename Fn>
struct Choice {
  const char *name;  // static string: "ring", "recursive_doubling", ...
  Fn fn;
};

class AlgorithmSelector {
 public:
  // Reads the overrides from a lookup (tests pass their own); the default reads the environment.
  using Lookup = std::function<const char *(const char *name)>;
  AlgorithmSelector();
  explicit AlgorithmSelector(const Lookup &lookup);

  // bytes: the size of one rank's buffer of the call (count * dtype size); for allgather, the
  // size of one rank's *contribution* (send_count * dtype size).
  Choice<AllreduceFn> allreduce(int group_size, size_t count, size_t bytes) const;
  Choice<ReduceScatterFn> reduce_scatter(int group_size, size_t bytes) const;
  Choice<AllgatherFn> allgather(int group_size, size_t bytes) const;
  Choice<BroadcastFn> broadcast(int group_size, size_t bytes) const;
  Choice<GatherFn> gather(int group_size, size_t bytes) const;
  Choice<ReduceFn> reduce(int group_size, size_t count, size_t bytes) const;
  // bytes: one rank's block (recv_count * dtype size).
  Choice<ScatterFn> scatter(int group_size, size_t bytes) const;
  Choice<AlltoallFn> alltoall(int group_size, size_t bytes) const;
  Choice<BarrierFn> barrier(int group_size) const;

  // Whether PSTATE_ALGO_<family> forces an algorithm: then the family's small calls on UCX groups
  // are not folded into the agreement exchange (src/coll/agreement_exchange.hpp), so the forced
  // algorithm runs at every size (the transport-variant tests rely on that).
  bool allreduce_forced() const { return allreduce_ >= 0; }
  bool allgather_forced() const { return allgather_ >= 0; }
  bool broadcast_forced() const { return broadcast_ >= 0; }
  bool reduce_forced() const { return reduce_ >= 0; }
  bool barrier_forced() const { return barrier_ >= 0; }

 private:
  // -1 = auto, else the index of the forced algorithm in that family's table.
  int allreduce_ = -1, reduce_scatter_ = -1, allgather_ = -1, broadcast_ = -1, gather_ = -1, alltoall_ = -1,
      barrier_ = -1, reduce_ = -1, scatter_ = -1;
};

}  // namespace pstate::coll
