// agreement_exchange.hpp — the agreement of a UCX group's collective, with small operations'
// data folded into it, so that agreeing costs a small call no round trip of its own.
//
// Every rank of a UCX group (and every group under PSTATE_CHECK=1) gathers every rank's
// OpDescriptor before it touches a user buffer, so that ranks that disagree all return
// PSTATE_ERR_MISMATCH (every rank sees the same table) and none hangs in the real operation.
// That gather is an allgather (Bruck's, ceil(log2 P) rounds), which is already what a small
// all_reduce, all_gather, reduce or broadcast needs. So each rank sends one *record*:
//
//   record = OpDescriptor (32 bytes) | payload (payload_bytes(desc, rank) bytes) | pad to 8
//
// and the operation's data rides in the agreement: a folded call is the exchange plus a local
// step (reduce the P payloads in a fixed order, copy the root's, ...), one round trip for two
// ranks instead of two. A barrier is the exchange alone (an allgather is a barrier). Larger calls
// send a bare 32-byte record and run their algorithm after the exchange, as before: next to a
// bandwidth-bound transfer the extra latency-bound round is small.
//
// Records describe themselves: a folding rank sets desc.detail to its payload's bytes (detail is
// 0 for every fixed-size kind otherwise; the v-collectives keep their counts hash there and never
// fold), and the receiver derives each record's length from its descriptor alone. detail is
// compared like every field, so a folded call meets an unfolded one (or one of another count) as
// a MISMATCH on every rank. Bruck's message pattern depends only on P, so a rank that called
// something else still sends and receives the same messages: nobody hangs. Each receive takes at
// most n records of the largest legal size (fold_cap), and the length UCX reports is parsed
// record by record; a message that does not parse (lengths that do not add up: another version
// of the format) turns its records into poisoned entries (op kUnparsed) which this rank forwards
// in later rounds as such, so the ranks that depend on it see a disagreement too; never a hang,
// never a wrong answer.
#pragma once

#include "common/op_descriptor.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pstate {
class Channel;
}

namespace pstate::agree {

// The op of a table entry whose record could not be read: never a real kind.
inline constexpr uint32_t kUnparsed = 0;

// The largest payload a record may carry in a group of p ranks (the same on every rank): a
// few KiB for small groups, less as the group grows, so that a rank moves at most
// about kFoldBudget bytes of payload per call. 0: no folding (p == 1).
inline constexpr size_t kFoldMax = 4096;
inline constexpr size_t kFoldBudget = 32768;
size_t fold_cap(int p);

// The payload bytes of group rank `rank`'s record, by its descriptor: detail for the kinds that
// fold (broadcast: the root's record only), 0 for the v-collectives (detail is their hash).
size_t payload_bytes(const OpDescriptor &d, int rank);
inline size_t record_bytes(size_t payload) { return sizeof(OpDescriptor) + ((payload + 7) & ~size_t{7}); }

// Parses n records of ranks first, first+1, ... (mod p) from msg[0, len). On success writes
// their descriptors and the offsets of their payloads (relative to msg) and returns true; when
// the lengths do not add up exactly (or a payload exceeds cap) returns false and writes nothing.
bool parse_records(const uint8_t *msg, size_t len, int first, int n, int p, size_t cap, OpDescriptor *descs,
                   size_t *payload_offsets);

// The result of one exchange: every rank's descriptor and payload, by group rank. Kept by the
// group between calls: sized at its first exchange (size_for), then reused without allocating.
struct Table {
  int ranks = 0;   // the group size it is sized for (0: not yet)
  size_t cap = 0;  // fold_cap(ranks)
  std::vector<OpDescriptor> desc;
  std::vector<size_t> payload_at;  // offset of each rank's payload in buf
  std::vector<size_t> slot_end;    // Bruck slots' end offsets in buf
  std::vector<uint8_t> buf;        // the records, in this rank's Bruck slot order
  std::vector<OpDescriptor> round_desc;  // scratch of one round's parse
  std::vector<size_t> round_offsets;
  uint8_t *payload(int rank) { return buf.data() + payload_at[static_cast<size_t>(rank)]; }
  void size_for(int p);
};

// Bruck's allgather of records over ch (tags tag_base + round): mine with `payload`
// (payload_bytes(mine, ch.rank()) bytes, at most fold_cap(ch.size())).
void exchange(Channel &ch, const OpDescriptor &mine, const void *payload, uint32_t tag_base, Table *table);

}  // namespace pstate::agree
