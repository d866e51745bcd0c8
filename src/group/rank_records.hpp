// rank_records.hpp — what each rank publishes at rendezvous, and the values that hand it out.
//
// Each rank sets "pstate/peer/<rank>" to its RankRecord: the local rank its launcher gave (-1:
// none, derived from the hosts), the interfaces PSTATE_SOCKET_IFNAME selected on it ("eth0
// 10.0.0.2"; empty: none named), and its UCX PeerEntry (worker address, pid, host id). After a
// store barrier rank 0 reads every record and publishes:
//   - "pstate/peers", the compact directory every rank reads: the job id and, per rank, its host
//     id, interfaces, local rank and pid — what pstate_init needs of every rank (local ranks,
//     which ranks share a host, the interfaces check) — but no UCX address. Host ids and
//     interface texts are kept once each in a table, so a rank costs 20 bytes, not the ~320 of
//     its record: 4096 ranks read 82 KB each instead of 1.3 MB, and the store sends 0.3 GB in
//     all instead of 5.4 GB (the O(N^2) bytes that made 4096 ranks miss their reply deadlines);
//   - "pstate/first/<rank>", the whole records of the peers that rank meets first (pstate_init's
//     world barrier: `first_peers`), so that pstate_init connects without another request.
// Any other peer's record a rank reads from "pstate/peer/<r>" when it first connects to it (one
// request per peer, PeerTable::entry): a rank connects to the peers its groups need, when they
// first need them, and reads only their addresses.
//
// Bytes (little-endian): record = "PSR2", i32 local rank, u32 interfaces length, interfaces, then
// encode_peer_entry(). Compact directory = "PSD2", u32 job id length, job id, u32 text count, each
// text as u32 length + bytes, u32 rank count, then per rank u32 host id text, u32 interfaces text
// (indices into the texts), i32 local rank, i64 pid. First peers = "PSF1", u32 count, then per
// peer u32 rank, u32 length, record. Whole directory (pstate_grow's admission of a newcomer: the
// survivors' current addresses, which are not on the store under "pstate/peer/") = "PSD1", u32
// job id length, job id, u32 record count, then each record as u32 length + bytes.
// decode_* throw PSTATE_ERR_MISMATCH on anything malformed (another pstate version, a foreign
// writer), never read out of bounds.
#pragma once

#include "bootstrap/store.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace pstate {

struct RankRecord {
  int local_rank = -1;  // -1: no LOCAL_RANK / local_rank parameter on that rank
  std::string interfaces;  // "eth0 10.0.0.2, eth1 10.1.0.2" (netif.hpp); empty: none named
  PeerEntry peer;
};

struct RankDirectory {
  std::string job_id;
  std::vector<RankRecord> ranks;  // index = world rank
  // Compact ("PSD2"): no rank's peer.address is here; each is on the store at rank_record_key(r).
  // Whole ("PSD1"): every record as its rank wrote it.
  bool addresses_on_store = false;
};

std::vector<uint8_t> encode_rank_record(const RankRecord &record);
RankRecord decode_rank_record(const std::vector<uint8_t> &bytes);

// The whole directory ("PSD1"), from raw records (no decode and re-encode of each).
std::vector<uint8_t> encode_rank_directory(const std::string &job_id, const std::vector<std::vector<uint8_t>> &records);
// The compact one ("PSD2"): the records without their addresses.
std::vector<uint8_t> encode_compact_directory(const std::string &job_id, const std::vector<RankRecord> &records);
// Either form; addresses_on_store tells which it was.
RankDirectory decode_rank_directory(const std::vector<uint8_t> &bytes);

// The peers a rank meets first, for which "pstate/first/<rank>" carries whole records.
using FirstPeers = std::function<std::vector<int>(int rank, int world_size)>;

// The peers pstate_init's world barrier meets, whose records come with the rendezvous: rank r
// sends to r + 2^k and receives from r - 2^k (mod N) for 2^k < N, in the agreement exchange (Bruck)
// and the dissemination barrier alike; each in that order, once, without r.
std::vector<int> world_barrier_peers(int rank, int world_size);

struct Rendezvous {
  std::vector<uint8_t> directory;                 // "pstate/peers" (compact)
  std::vector<std::pair<int, RankRecord>> first;  // first_peers(rank)'s records, whole, in that order
};

// The rendezvous' store traffic, all of it (pstate_init's exchange_peers, and
// bench/store_protocol.cpp, which runs it for thousands of clients): set "pstate/peer/<rank>" to
// `record`, meet every rank at the store barrier "pstate/init" (add, the last arrival's set, wait),
// then rank 0 gets each record, sets "pstate/peers" and each other rank's "pstate/first/<r>"
// (none where first_peers(r) is empty), and every other rank gets those two values. Per rank: 5
// requests (one more for the barrier's last arrival; 4 where first_peers is empty); rank 0: 2N + 3
// (it reads every record and writes N - 1 first-peer values, each batch pipelined by the TCP store:
// Store::get_many, set_many). Throws what the store throws;
// MISMATCH on a malformed record (the rank is named); INVALID_ARGUMENT when the directory is over
// the store's value limit.
Rendezvous exchange_rank_records(Store &store, int rank, int world_size, const std::vector<uint8_t> &record,
                                 const std::string &job_id, Deadline deadline, const FirstPeers &first_peers);
std::string rank_record_key(int rank);

}  // namespace pstate
