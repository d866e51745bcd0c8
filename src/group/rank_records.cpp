// rank_records.cpp — RankRecord and RankDirectory to bytes and back (format in the header).
#include "group/rank_records.hpp"

#include "common/error.hpp"
#include "common/le_bytes.hpp"

#include <cstring>

namespace pstate {

namespace {

constexpr char kRecordMagic[4] = {'P', 'S', 'R', '2'};
constexpr uint32_t kMaxInterfacesText = 4096;
constexpr char kDirectoryMagic[4] = {'P', 'S', 'D', '1'};

// The rank records' reader: LeReader, plus their magic numbers.
class Reader : public LeReader {
 public:
  Reader(const std::vector<uint8_t> &b, const char *what) : LeReader(b, cat("rendezvous: ", what)) {}
  void magic(const char (&m)[4]) {
    if (std::memcmp(take(4), m, 4) != 0)
      throw_error(PSTATE_ERR_MISMATCH, what(), " does not start with ", std::string(m, 4),
                  " (written by another pstate version, or not by pstate?)");
  }
};

}  // namespace

std::vector<uint8_t> encode_rank_record(const RankRecord &record) {
  std::vector<uint8_t> out(kRecordMagic, kRecordMagic + 4);
  put_u32(out, static_cast<uint32_t>(record.local_rank));
  put_u32(out, static_cast<uint32_t>(record.interfaces.size()));
  out.insert(out.end(), record.interfaces.begin(), record.interfaces.end());
  std::vector<uint8_t> peer = encode_peer_entry(record.peer);
  out.insert(out.end(), peer.begin(), peer.end());
  return out;
}

RankRecord decode_rank_record(const std::vector<uint8_t> &bytes) {
  Reader r(bytes, "rank record");
  r.magic(kRecordMagic);
  RankRecord rec;
  rec.local_rank = static_cast<int32_t>(r.u32());
  if (rec.local_rank < -1) throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank record has local rank ", rec.local_rank);
  uint32_t n = r.u32();
  if (n > kMaxInterfacesText)
    throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank record names ", n, " bytes of interfaces");
  const uint8_t *text = r.take(n);
  rec.interfaces.assign(reinterpret_cast<const char *>(text), n);
  rec.peer = decode_peer_entry(r.rest());
  return rec;
}

std::vector<uint8_t> encode_rank_directory(const std::string &job_id, const std::vector<std::vector<uint8_t>> &records) {
  std::vector<uint8_t> out(kDirectoryMagic, kDirectoryMagic + 4);
  put_u32(out, static_cast<uint32_t>(job_id.size()));
  out.insert(out.end(), job_id.begin(), job_id.end());
  put_u32(out, static_cast<uint32_t>(records.size()));
  for (const auto &rec : records) {
    put_u32(out, static_cast<uint32_t>(rec.size()));
    out.insert(out.end(), rec.begin(), rec.end());
  }
  return out;
}

RankDirectory decode_rank_directory(const std::vector<uint8_t> &bytes) {
  Reader r(bytes, "rank directory");
  r.magic(kDirectoryMagic);
  RankDirectory d;
  uint32_t n = r.u32();
  const uint8_t *id = r.take(n);
  d.job_id.assign(reinterpret_cast<const char *>(id), n);
  uint32_t count = r.u32();
  if (count > bytes.size() / 4)  // every record takes at least its length field
    throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank directory claims ", count, " records in ", bytes.size(),
                " bytes");
  d.ranks.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = r.u32();
    const uint8_t *p = r.take(len);
    d.ranks.push_back(decode_rank_record(std::vector<uint8_t>(p, p + len)));
  }
  if (!r.at_end()) throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank directory has trailing bytes");
  return d;
}

std::string rank_record_key(int rank) { return "pstate/peer/" + std::to_string(rank); }

std::vector<uint8_t> exchange_rank_records(Store &store, int rank, int world_size, const std::vector<uint8_t> &record,
                                           const std::string &job_id, Deadline deadline) {
  store.set(rank_record_key(rank), record, deadline);
  // The barrier also refuses an old job's keys (a reused file:// directory): more arrivals than ranks.
  store_barrier(store, "pstate/init", world_size, deadline);
  if (rank != 0) return store.get("pstate/peers", deadline);
  std::vector<Bytes> records(static_cast<size_t>(world_size));
  size_t total = 0;
  for (int r = 0; r < world_size; ++r) {
    records[static_cast<size_t>(r)] = store.get(rank_record_key(r), deadline);
    total += records[static_cast<size_t>(r)].size() + 4;
  }
  if (total > kStoreMaxValueBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init: the rank directory of ", world_size, " ranks takes ", total,
                " bytes, over the store's value limit of ", kStoreMaxValueBytes, " bytes");
  Bytes directory = encode_rank_directory(job_id, records);
  store.set("pstate/peers", directory, deadline);
  return directory;
}

}  // namespace pstate
