// rank_records.hpp — what each rank publishes at rendezvous, and the one value that gathers them.
//
// Each rank sets "pstate/peer/<rank>" to its RankRecord: the local rank its launcher gave (-1:
// none, derived from the hosts), the interfaces PSTATE_SOCKET_IFNAME selected on it ("eth0
// 10.0.0.2"; empty: none named), and its UCX PeerEntry (worker address, pid, host id). Rank 0 reads
// every record and sets "pstate/peers" to a RankDirectory: the job id and all records in rank
// order; every other rank reads that one value. So the store carries O(world) messages in all —
// each rank reading every record itself was O(world^2) and dominated start-up past 64 ranks.
//
// Bytes (little-endian): record = "PSR2", i32 local rank, u32 interfaces length, interfaces, then
// encode_peer_entry(); directory =
// "PSD1", u32 job id length, job id, u32 record count, then each record as u32 length + bytes.
// decode_* throw PSTATE_ERR_MISMATCH on anything malformed (another pstate version, a foreign
// writer), never read out of bounds.
#pragma once

#include "bootstrap/store.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <cstdint>
#include <string>
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
};

std::vector<uint8_t> encode_rank_record(const RankRecord &record);
RankRecord decode_rank_record(const std::vector<uint8_t> &bytes);

// Built by rank 0 from the raw records it read (no decode and re-encode of each).
std::vector<uint8_t> encode_rank_directory(const std::string &job_id, const std::vector<std::vector<uint8_t>> &records);
RankDirectory decode_rank_directory(const std::vector<uint8_t> &bytes);

// The rendezvous' store traffic, all of it (pstate_init's exchange_peers, and
// bench/store_protocol.cpp, which runs it for thousands of clients): set "pstate/peer/<rank>" to
// `record`, meet every rank at the store barrier "pstate/init" (add, the last arrival's set, wait),
// then rank 0 gets each record and sets "pstate/peers" to the directory and every other rank gets
// that one value. Returns the directory's bytes. Per rank: 4 requests (5 for the barrier's last
// arrival); rank 0: world_size + 4 (it reads every record: one get each). Throws what the store
// throws; INVALID_ARGUMENT when the directory is over the store's value limit.
std::vector<uint8_t> exchange_rank_records(Store &store, int rank, int world_size, const std::vector<uint8_t> &record,
                                           const std::string &job_id, Deadline deadline);
std::string rank_record_key(int rank);

}  // namespace pstate
