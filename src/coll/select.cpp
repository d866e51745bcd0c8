// select.cpp — the algorithm tables per collective and the size rules of select.hpp.
#include "coll/select.hpp"

#include "common/error.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace pstate::coll {

namespace {

constexpr Choice<AllreduceFn> kAllreduce[] = {{"recursive_doubling", &allreduce_recursive_doubling},
                                              {"ring", &allreduce_ring}};
constexpr Choice<ReduceScatterFn> kReduceScatter[] = {{"ring", &reduce_scatter_ring}};
constexpr Choice<AllgatherFn> kAllgather[] = {{"bruck", &allgather_bruck}, {"ring", &allgather_ring}};
constexpr Choice<BroadcastFn> kBroadcast[] = {{"binomial", &broadcast_binomial},
                                              {"pipelined_chain", &broadcast_pipelined_chain}};
constexpr Choice<GatherFn> kGather[] = {{"linear", &gather_linear}};
constexpr Choice<ReduceFn> kReduce[] = {{"binomial", &reduce_binomial}, {"ring", &reduce_ring}};
constexpr Choice<ScatterFn> kScatter[] = {{"linear", &scatter_linear}};
constexpr Choice<AlltoallFn> kAlltoall[] = {{"pairwise", &alltoall_pairwise}};
constexpr Choice<BarrierFn> kBarrier[] = {{"dissemination", &barrier_dissemination}};

// The index of the algorithm `variable` names in table, or -1 when unset/"auto".
template <typename Fn, size_t N>
int parse_override(const AlgorithmSelector::Lookup &lookup, const char *variable, const Choice<Fn> (&table)[N]) {
  const char *value = lookup(variable);
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return -1;
  std::string accepted = "auto";
  for (size_t i = 0; i < N; ++i) {
    if (std::strcmp(value, table[i].name) == 0) return static_cast<int>(i);
    accepted += std::string(", ") + table[i].name;
  }
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, variable, "=", value, " is not an algorithm for this collective (accepted: ",
              accepted, ")");
}

template <typename Fn, size_t N>
Choice<Fn> pick(int forced, int automatic, const Choice<Fn> (&table)[N]) {
  return table[forced >= 0 ? forced : automatic];
}

}  // namespace

AlgorithmSelector::AlgorithmSelector() : AlgorithmSelector([](const char *name) { return std::getenv(name); }) {}

AlgorithmSelector::AlgorithmSelector(const Lookup &lookup)
    : allreduce_(parse_override(lookup, "PSTATE_ALGO_ALLREDUCE", kAllreduce)),
      reduce_scatter_(parse_override(lookup, "PSTATE_ALGO_REDUCE_SCATTER", kReduceScatter)),
      allgather_(parse_override(lookup, "PSTATE_ALGO_ALLGATHER", kAllgather)),
      broadcast_(parse_override(lookup, "PSTATE_ALGO_BROADCAST", kBroadcast)),
      gather_(parse_override(lookup, "PSTATE_ALGO_GATHER", kGather)),
      alltoall_(parse_override(lookup, "PSTATE_ALGO_ALLTOALL", kAlltoall)),
      barrier_(parse_override(lookup, "PSTATE_ALGO_BARRIER", kBarrier)),
      reduce_(parse_override(lookup, "PSTATE_ALGO_REDUCE", kReduce)),
      scatter_(parse_override(lookup, "PSTATE_ALGO_SCATTER", kScatter)) {}

Choice<AllreduceFn> AlgorithmSelector::allreduce(int group_size, size_t count, size_t bytes) const {
  const bool small = bytes <= kAllreduceRingMinBytes || count < static_cast<size_t>(group_size);
  return pick(allreduce_, small ? 0 : 1, kAllreduce);
}

Choice<ReduceScatterFn> AlgorithmSelector::reduce_scatter(int, size_t) const { return pick(reduce_scatter_, 0, kReduceScatter); }

Choice<AllgatherFn> AlgorithmSelector::allgather(int group_size, size_t bytes) const {
  const bool small = bytes * static_cast<size_t>(group_size) <= kAllgatherRingMinBytes;
  return pick(allgather_, small ? 0 : 1, kAllgather);
}

Choice<BroadcastFn> AlgorithmSelector::broadcast(int group_size, size_t bytes) const {
  const bool chain = group_size > 2 && bytes > kBroadcastChainMinBytes;
  return pick(broadcast_, chain ? 1 : 0, kBroadcast);
}

Choice<GatherFn> AlgorithmSelector::gather(int, size_t) const { return pick(gather_, 0, kGather); }

Choice<ReduceFn> AlgorithmSelector::reduce(int group_size, size_t count, size_t bytes) const {
  const bool small = bytes <= kReduceRingMinBytes || count < static_cast<size_t>(group_size);
  return pick(reduce_, small ? 0 : 1, kReduce);
}

Choice<ScatterFn> AlgorithmSelector::scatter(int, size_t) const { return pick(scatter_, 0, kScatter); }

Choice<AlltoallFn> AlgorithmSelector::alltoall(int, size_t) const { return pick(alltoall_, 0, kAlltoall); }

Choice<BarrierFn> AlgorithmSelector::barrier(int) const { return pick(barrier_, 0, kBarrier); }

}  // namespace pstate::coll
