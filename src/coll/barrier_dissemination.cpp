// barrier_dissemination.cpp — barrier: no rank leaves before every rank has entered.
//
// Algorithm (Hensgen, Finkel and Manber's dissemination barrier): in round k (distance d = 2^k)
// rank r sends a one-byte token to (r + d) mod P and waits for the token of (r - d) mod P. After
// round k a rank has heard, directly or through others, from the 2^(k+1) - 1 ranks before it, so
// after ceil(log2 P) rounds it has heard from everyone. Works for every group size, no root,
// and every rank finishes after the same number of rounds.
//
// Tags: round k = step k. (One byte rather than zero, so no transport has to special-case it.)
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

namespace pstate::coll {

using detail::mod;
using detail::step_tag;

void barrier_dissemination(Channel &ch, uint32_t tag_base) {
  const int p = ch.size(), r = ch.rank();
  uint8_t token_out = 1, token_in = 0;
  uint32_t round = 0;
  for (int d = 1; d < p; d *= 2, ++round)
    ch.sendrecv(mod(r + d, p), &token_out, 1, mod(r - d, p), &token_in, 1, step_tag(tag_base, round));
}

}  // namespace pstate::coll
