// agreement_exchange.cpp — Bruck's allgather of self-describing records: the agreement of a UCX
// group's collective with small operations' data in it (see agreement_exchange.hpp).
//
// Algorithm (Bruck et al., 1997, as src/coll/allgather_bruck.cpp, with records of varying length
// instead of fixed blocks): rank r keeps its records in slot order in one buffer, slot i holding
// rank (r + i) mod P's record; slot 0 is its own. In round k (distance d = 2^k, d slots filled)
// it sends its first n = min(d, P - d) records — a prefix of the buffer — to rank r - d, and
// receives n records from rank r + d (those of ranks r + d, ..., r + d + n - 1) straight after
// its filled slots, at most n records of the largest legal size. It parses what arrived with the
// length UCX reports; a message that does not parse becomes n poisoned 32-byte records (op
// kUnparsed), which later rounds forward as they are. At the end every rank has every record;
// records are copied verbatim, so every rank has the same table.
#include "coll/agreement_exchange.hpp"

#include "coll/coll_util.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cstring>

namespace pstate::agree {

size_t fold_cap(int p) {
  if (p <= 1) return 0;
  return std::min(kFoldMax, kFoldBudget / static_cast<size_t>(p)) & ~size_t{7};
}

size_t payload_bytes(const OpDescriptor &d, int rank) {
  if (carries_counts_hash(d.op)) return 0;
  if (d.op == static_cast<uint32_t>(OpKind::kBroadcast)) return rank == d.root ? d.detail : 0;
  return d.detail;
}

namespace {

// parse_records' body, inlined into exchange (a call with eight arguments per round otherwise).
inline bool parse(const uint8_t *msg, size_t len, int first, int n, int p, size_t cap, OpDescriptor *descs,
                  size_t *payload_offsets) {
  size_t at = 0;
  int rank = first < p ? first : first % p;  // the ranks run first, first + 1, ... mod p (no division per record)
  for (int k = 0; k < n; ++k, rank = rank + 1 == p ? 0 : rank + 1) {
    if (len - at < sizeof(OpDescriptor)) return false;
    std::memcpy(&descs[k], msg + at, sizeof(OpDescriptor));
    const size_t payload = payload_bytes(descs[k], rank);
    if (payload > cap || len - at < record_bytes(payload)) return false;
    payload_offsets[k] = at + sizeof(OpDescriptor);
    at += record_bytes(payload);
  }
  return at == len;
}

}  // namespace

bool parse_records(const uint8_t *msg, size_t len, int first, int n, int p, size_t cap, OpDescriptor *descs,
                   size_t *payload_offsets) {
  return parse(msg, len, first, n, p, cap, descs, payload_offsets);
}

// Sizes the table for a group of p ranks (once: a group's size never changes).
void Table::size_for(int p) {
  const auto ps = static_cast<size_t>(p);
  ranks = p;
  cap = fold_cap(p);
  buf.resize(ps * record_bytes(cap));
  desc.resize(ps);
  payload_at.resize(ps);
  slot_end.resize(ps);
  round_desc.resize(ps);
  round_offsets.resize(ps);
}

// Per call this runs on every collective of a UCX group, so it keeps to what the protocol needs:
// no allocation (the table is sized once per group), no division (ranks wrap by a compare), one
// receive and one send per round.
void exchange(Channel &ch, const OpDescriptor &mine, const void *payload, uint32_t tag_base, Table *t) {
  const int p = ch.size(), r = ch.rank();
  if (t->ranks != p) t->size_for(p);
  const size_t cap = t->cap, largest = record_bytes(cap);
  const size_t own_payload = payload_bytes(mine, r);
  if (own_payload > cap)
    throw_error(PSTATE_ERR_INTERNAL, "agreement exchange: a record of ", own_payload, " payload bytes in a group of ",
                p, " (at most ", cap, ")");
  OpDescriptor *descs = t->round_desc.data();
  size_t *offsets = t->round_offsets.data();

  uint8_t *buf = t->buf.data();
  std::memcpy(buf, &mine, sizeof mine);
  if (own_payload > 0) std::memcpy(buf + sizeof mine, payload, own_payload);
  size_t used = record_bytes(own_payload);
  t->desc[static_cast<size_t>(r)] = mine;
  t->payload_at[static_cast<size_t>(r)] = sizeof mine;
  t->slot_end[0] = used;

  uint32_t round = 0;
  for (int d = 1; d < p; d *= 2, ++round) {
    const int n = std::min(d, p - d);
    const int from = r + d < p ? r + d : r + d - p;  // (r + d) mod p, 0 < d < p
    const int to = r - d >= 0 ? r - d : r - d + p;   // (r - d) mod p
    size_t got = 0;
    Channel::Request q[2] = {ch.irecv_upto(from, buf + used, static_cast<size_t>(n) * largest,
                                           coll::detail::step_tag(tag_base, round), &got),
                             ch.isend(to, buf, t->slot_end[static_cast<size_t>(n - 1)],
                                      coll::detail::step_tag(tag_base, round))};
    ch.wait_all(q, 2);
    if (!parse(buf + used, got, from, n, p, cap, descs, offsets)) {
      // Not records of this format: poisoned entries, forwarded as such (n * 32 <= what arrived
      // room was made for).
      for (int k = 0; k < n; ++k) {
        OpDescriptor poison;
        poison.op = kUnparsed;
        poison.count = got;
        std::memcpy(buf + used + static_cast<size_t>(k) * sizeof poison, &poison, sizeof poison);
        descs[k] = poison;
        offsets[k] = static_cast<size_t>(k + 1) * sizeof poison;
      }
      got = static_cast<size_t>(n) * sizeof(OpDescriptor);
    }
    int rank = from;
    for (int k = 0; k < n; ++k, rank = rank + 1 == p ? 0 : rank + 1) {
      const auto at = static_cast<size_t>(rank), slot = static_cast<size_t>(d + k);
      const size_t payload_at = used + offsets[k];
      t->desc[at] = descs[k];
      t->payload_at[at] = payload_at;
      t->slot_end[slot] = payload_at + ((payload_bytes(descs[k], rank) + 7) & ~size_t{7});
    }
    used += got;
  }
}

}  // namespace pstate::agree
