// alltoallv_pairwise.cpp — all_to_all_v (MPI_Alltoallv): rank i sends send_counts[j] elements at
// send_displs[j] to rank j, which receives them into recv_displs[i] of its recv, recv_counts[i]
// elements long. Counts differ per pair by design, so the group's descriptor cannot compare
// them; this file also holds the step that does.
//
// Agreement of the counts (agree_alltoallv_counts, before any data moves): every rank
// contributes its send_counts and recv_counts (2P numbers) to an allgather (Bruck's, ceil(log2 P)
// rounds over the same channel), so every rank holds the whole P x P matrix of what each rank
// means to send and what each expects, and checks pair (i, j) in one fixed order: send_counts of
// i for j against recv_counts of j for i. All ranks see the same table, so all find the same
// first disagreement (naming the pair and both counts) or none, and either all move data or none
// does: nobody hangs on a message its peer never sends, nobody receives a longer one.
// Its cost: one latency-bound allgather per call (ceil(log2 P) rounds of at most 16 P^2 bytes in
// all), and a table of 16 P^2 bytes per rank (64 KiB at 64 ranks, 1 MiB at 256).
//
// Data (alltoallv_pairwise): the own part is copied locally; then at step s = 1..P-1 rank r sends
// its part for rank (r + s) and receives the part of rank (r - s), the pairwise exchange of
// alltoall_pairwise.cpp. Both ends know each pair's size (it was agreed), so an empty part is
// skipped by both without a message. Steps are posted kWindow at a time and waited for
// together: at 2-8 ranks that is every step at once (one wait, as MPI's linear alltoallv),
// larger groups keep the pairwise order with a bounded number of messages in flight.
//
// Buffers: send and recv must not overlap (src/api/ refuses it; there is no in-place form).
// Tags: the counts' allgather takes steps 0..31; the data step s takes kDataStep + s.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <cstring>
#include <vector>

namespace pstate::coll {

using detail::bytes;
using detail::mod;
using detail::step_tag;

namespace {
constexpr uint32_t kDataStep = 32;  // after the counts' Bruck rounds (at most 32)
constexpr int kWindow = 8;          // pairwise steps in flight at once
}  // namespace

AlltoallvDisagreement agree_alltoallv_counts(Channel &ch, const size_t *send_counts, const size_t *recv_counts,
                                             uint32_t tag_base) {
  const auto p = static_cast<size_t>(ch.size());
  std::vector<uint64_t> mine(2 * p), all(2 * p * p);
  for (size_t j = 0; j < p; ++j) {
    mine[j] = send_counts[j];
    mine[p + j] = recv_counts[j];
  }
  if (p == 1)
    all = mine;
  else
    allgather_bruck(ch, mine.data(), all.data(), 2 * p, PSTATE_UINT64, tag_base);
  // all[i * 2p + j]: what rank i sends to j; all[j * 2p + p + i]: what rank j expects from i.
  for (size_t i = 0; i < p; ++i)
    for (size_t j = 0; j < p; ++j) {
      const uint64_t sent = all[i * 2 * p + j], expected = all[j * 2 * p + p + i];
      if (sent != expected) return {true, static_cast<int>(i), static_cast<int>(j), sent, expected};
    }
  return {};
}

void alltoallv_pairwise(Channel &ch, const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                        const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype, uint32_t tag_base) {
  const size_t esize = detail::element_size(dtype, "alltoallv_pairwise");
  const int p = ch.size(), r = ch.rank();
  auto out_part = [&](int b) { return bytes(recv) + recv_displs[b] * esize; };
  auto in_part = [&](int b) { return bytes(send) + send_displs[b] * esize; };
  if (send_counts[r] != 0) std::memcpy(out_part(r), in_part(r), send_counts[r] * esize);

  std::vector<Channel::Request> reqs;
  reqs.reserve(2 * static_cast<size_t>(kWindow));
  for (int first = 1; first < p; first += kWindow) {
    reqs.clear();
    for (int s = first; s < p && s < first + kWindow; ++s) {
      const int to = mod(r + s, p), from = mod(r - s, p);
      const uint32_t tag = step_tag(tag_base, kDataStep + static_cast<uint32_t>(s));
      if (recv_counts[from] != 0) reqs.push_back(ch.irecv(from, out_part(from), recv_counts[from] * esize, tag));
      if (send_counts[to] != 0) reqs.push_back(ch.isend(to, in_part(to), send_counts[to] * esize, tag));
    }
    if (!reqs.empty()) ch.wait_all(reqs.data(), reqs.size());
  }
}

}  // namespace pstate::coll
