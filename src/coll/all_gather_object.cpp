// all_gather_object.cpp — every rank contributes variable-length bytes; every rank gets all of
// them concatenated in rank order plus each rank's size (SGLang's all_gather_object).
//
// Algorithm: two phases.
//   1. Sizes: allgather_bruck of one uint64 per rank (log2 P small messages), so every rank
//      knows every size and the offsets of the concatenation.
//   2. Payloads: a ring allgatherv. Rank r places its own bytes, then at step s = 0..P-2 sends
//      object (r - s) to its right neighbour and receives object (r - s - 1) from its left one,
//      straight into its place in the output. Empty objects are skipped on both sides (both
//      know the sizes), so no zero-byte message is sent.
//
// Tags: phase 1 uses steps 0..31; phase 2 step s uses step 64 + s.
#include "coll/algorithms.hpp"
#include "coll/coll_util.hpp"

#include <cstring>

namespace pstate::coll {

using detail::mod;
using detail::step_tag;

namespace {
constexpr uint32_t kPayloadFirstStep = 64;
}

void all_gather_object(Channel &ch, const void *data, size_t size, std::vector<uint8_t> *out,
                       std::vector<size_t> *sizes, uint32_t tag_base) {
  if (out == nullptr || sizes == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "all_gather_object: out and sizes must not be null");
  const int p = ch.size(), r = ch.rank();

  // 1. Everyone's size.
  const uint64_t mine = size;
  std::vector<uint64_t> all(static_cast<size_t>(p));
  allgather_bruck(ch, &mine, all.data(), 1, PSTATE_UINT64, tag_base);
  sizes->assign(all.begin(), all.end());
  std::vector<size_t> offsets(static_cast<size_t>(p) + 1, 0);
  for (int i = 0; i < p; ++i) offsets[static_cast<size_t>(i) + 1] = offsets[static_cast<size_t>(i)] + all[static_cast<size_t>(i)];

  // 2. Everyone's bytes, around the ring.
  out->resize(offsets.back());
  auto place = [&](int i) { return out->data() + offsets[static_cast<size_t>(i)]; };
  auto length = [&](int i) { return static_cast<size_t>(all[static_cast<size_t>(i)]); };
  if (size != 0) std::memcpy(place(r), data, size);
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    const int send_obj = mod(r - s, p), recv_obj = mod(r - s - 1, p);
    const uint32_t tag = step_tag(tag_base, kPayloadFirstStep + static_cast<uint32_t>(s));
    Channel::Request reqs[2];
    size_t n = 0;
    if (length(recv_obj) != 0) reqs[n++] = ch.irecv(left, place(recv_obj), length(recv_obj), tag);
    if (length(send_obj) != 0) reqs[n++] = ch.isend(right, place(send_obj), length(send_obj), tag);
    if (n != 0) ch.wait_all(reqs, n);
  }
}

}  // namespace pstate::coll
