// undelivered.cpp — messages no receive took, found and dropped before their group's id can be
// used again: a group id is never reused while an old message of it can still be delivered.
//
// A UCX message carries its group's 12-bit id in its tag (ucx_tag.hpp), and an id is free for a
// later group once its group is destroyed (group_registry.hpp, custom_group.cpp). A
// point-to-point message that its receiver never asked for (a bug of the program, or a receive
// that failed locally) would otherwise wait in the receiver's UCX queue and be delivered, with
// PSTATE_OK, to the later group with the same id. Collectives cannot leave such a message in a
// context that is still usable: every rank takes part in every step, and a call that fails on
// one rank fails the context on every rank (failure notices; shrink brings a fresh worker).
// Point-to-point can: a send completes once its message has left.
//
// So pstate_destroy_model_parallel (and pstate_grow, for the world it replaces) is collective
// over the world and does, before any group is retired:
//   1. every rank lists, for each group it retires and each peer and stream (common/p2p_message_kind.hpp),
//      how many UCX messages it sent there (only the non-zero counts);
//   2. one all_gather_object over the world (kind kDestroyExchange) gives every rank every list;
//   3. each rank receives and drops, per (group, peer, stream), the messages the peer sent beyond
//      those this rank received. Every one of them was sent and its send completed (a send still
//      pending makes destroy refuse; a failed one failed the context), so it has left the sender
//      and arrives: the wait is bounded by the context timeout and normally ends at once.
// Shared-memory rings need nothing of this: their segments go with the group. Dropped messages
// are reported once at WARN (they are a bug in the program). When no rank sent any message
// over UCX the exchange is the one all-gather of a few bytes per rank.
#include "bootstrap/wire.hpp"
#include "common/le_bytes.hpp"
#include "group/context.hpp"
#include "group/group.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace pstate {

namespace {

// One non-zero count of step 1, as five little-endian u32: (group id, the group's first launch
// rank, the receiver's launch rank, stream, messages sent). The first launch rank tells apart the
// disjoint groups sharing an id (groups of one kind, or of one pstate_new_group call).
struct SentCount {
  uint32_t group_id = 0;
  int32_t first = 0;
  int32_t to = 0;
  uint32_t stream = 0;
  uint32_t sent = 0;
};
constexpr size_t kRecordBytes = 20;

}  // namespace

void Context::drop_undelivered(const std::vector<Group *> &groups, const char *call) {
  if (world_size() == 1 || state_ == State::kFailed || !world()) return;
  Bytes mine;
  for (Group *g : groups) {
    for (int peer = 0; peer < g->size(); ++peer) {
      if (peer == g->rank_in_group()) continue;
      for (P2PStream s : {P2PStream::kTensors, P2PStream::kObjects}) {
        const uint32_t sent = g->p2p_posted(s, peer, true);
        if (sent == 0) continue;
        put_u32(mine, g->group_id());
        put_u32(mine, static_cast<uint32_t>(g->launch_ranks().front()));
        put_u32(mine, static_cast<uint32_t>(g->launch_ranks()[static_cast<size_t>(peer)]));
        put_u32(mine, static_cast<uint32_t>(s));
        put_u32(mine, sent);
      }
    }
  }
  std::vector<size_t> sizes;
  const Bytes all = world()->all_gather_object(mine.data(), mine.size(), &sizes, OpKind::kDestroyExchange);
  // (group id, first launch rank) -> my group
  std::map<std::pair<uint32_t, int>, Group *> by_id;
  for (Group *g : groups) by_id[{g->group_id(), g->launch_ranks().front()}] = g;
  size_t at = 0;
  std::string dropped;
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] % kRecordBytes != 0)
      throw_error(PSTATE_ERR_INTERNAL, call, ": rank ", r, " sent a list of ", sizes[r], " bytes (not whole records)");
    const Bytes list(all.begin() + static_cast<std::ptrdiff_t>(at),
                     all.begin() + static_cast<std::ptrdiff_t>(at + sizes[r]));
    LeReader in(list, "the count of undelivered messages");
    at += sizes[r];
    const int sender_launch = members_.at(r);
    for (size_t k = 0; k < sizes[r] / kRecordBytes; ++k) {
      SentCount c;
      c.group_id = in.u32();
      c.first = static_cast<int32_t>(in.u32());
      c.to = static_cast<int32_t>(in.u32());
      c.stream = in.u32();
      c.sent = in.u32();
      if (c.to != launch_rank() || c.stream > 1) continue;
      auto it = by_id.find({c.group_id, c.first});
      if (it == by_id.end()) continue;  // not a group of mine (cannot be: the sender shares it)
      Group *g = it->second;
      const auto &lr = g->launch_ranks();
      const auto pos = std::find(lr.begin(), lr.end(), sender_launch);
      if (pos == lr.end()) continue;
      const int peer = static_cast<int>(pos - lr.begin());
      const auto stream = static_cast<P2PStream>(c.stream);
      const uint32_t n = g->drop_undelivered(stream, peer, c.sent);
      if (n != 0)
        dropped += cat(dropped.empty() ? "" : "; ", g->name(), ": ", n, " ",
                       stream == P2PStream::kObjects ? "object" : "tensor", " message", n == 1 ? "" : "s",
                       " from rank ", global_rank_of(sender_launch));
    }
  }
  if (!dropped.empty())
    log_.warn(call, ": dropped the point-to-point messages that no receive took (", dropped,
              "): every send needs its receive; they were discarded so that a later group never gets them");
}

}  // namespace pstate
