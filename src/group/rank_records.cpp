// rank_records.cpp — RankRecord and RankDirectory to bytes and back, and the rendezvous that
// hands them out (formats and request counts in the header).
#include "group/rank_records.hpp"

#include "common/error.hpp"
#include "common/le_bytes.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace pstate {

namespace {

constexpr char kRecordMagic[4] = {'P', 'S', 'R', '2'};
constexpr uint32_t kMaxInterfacesText = 4096;
constexpr char kDirectoryMagic[4] = {'P', 'S', 'D', '1'};
constexpr char kCompactMagic[4] = {'P', 'S', 'D', '2'};
constexpr char kFirstMagic[4] = {'P', 'S', 'F', '1'};
constexpr uint32_t kMaxText = 64 * 1024;  // a host id or an interfaces text

// The rank records' reader: LeReader, plus their magic numbers.
class Reader : public LeReader {
 public:
  Reader(const std::vector<uint8_t> &b, const char *what) : LeReader(b, cat("rendezvous: ", what)) {}
  void magic(const char (&m)[4]) {
    if (std::memcmp(take(4), m, 4) != 0)
      throw_error(PSTATE_ERR_MISMATCH, what(), " does not start with ", std::string(m, 4),
                  " (written by another pstate version, or not by pstate?)");
  }
  std::string text(uint32_t limit) {
    uint32_t n = u32();
    if (n > limit) throw_error(PSTATE_ERR_MISMATCH, what(), " has a text of ", n, " bytes (at most ", limit, ")");
    const uint8_t *p = take(n);
    return std::string(reinterpret_cast<const char *>(p), n);
  }
  // A count of items that take at least `min_bytes` each: never more than the bytes left hold.
  uint32_t count(size_t min_bytes, size_t total) {
    uint32_t n = u32();
    if (n > total / min_bytes)
      throw_error(PSTATE_ERR_MISMATCH, what(), " claims ", n, " items in ", total, " bytes");
    return n;
  }
};

void put_text(std::vector<uint8_t> &out, const std::string &s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

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

std::vector<uint8_t> encode_compact_directory(const std::string &job_id, const std::vector<RankRecord> &records) {
  std::vector<std::string> texts;
  std::map<std::string, uint32_t> index;
  auto text_index = [&](const std::string &t) {
    auto [it, added] = index.emplace(t, static_cast<uint32_t>(texts.size()));
    if (added) texts.push_back(t);
    return it->second;
  };
  std::vector<std::pair<uint32_t, uint32_t>> refs;  // per rank: host id, interfaces
  refs.reserve(records.size());
  for (const RankRecord &rec : records) refs.emplace_back(text_index(rec.peer.host_id), text_index(rec.interfaces));
  std::vector<uint8_t> out(kCompactMagic, kCompactMagic + 4);
  put_text(out, job_id);
  put_u32(out, static_cast<uint32_t>(texts.size()));
  for (const std::string &t : texts) put_text(out, t);
  put_u32(out, static_cast<uint32_t>(records.size()));
  for (size_t i = 0; i < records.size(); ++i) {
    put_u32(out, refs[i].first);
    put_u32(out, refs[i].second);
    put_u32(out, static_cast<uint32_t>(records[i].local_rank));
    put_i64(out, records[i].peer.pid);
  }
  return out;
}

namespace {

RankDirectory decode_whole_directory(Reader &r, const std::vector<uint8_t> &bytes) {
  RankDirectory d;
  d.job_id = r.text(kMaxText);
  uint32_t count = r.count(4, bytes.size());  // every record takes at least its length field
  d.ranks.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = r.u32();
    const uint8_t *p = r.take(len);
    d.ranks.push_back(decode_rank_record(std::vector<uint8_t>(p, p + len)));
  }
  return d;
}

RankDirectory decode_compact_directory(Reader &r, const std::vector<uint8_t> &bytes) {
  RankDirectory d;
  d.addresses_on_store = true;
  d.job_id = r.text(kMaxText);
  std::vector<std::string> texts(r.count(4, bytes.size()));
  for (std::string &t : texts) t = r.text(kMaxText);
  auto text = [&](uint32_t i) -> const std::string & {
    if (i >= texts.size())
      throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank directory refers to text ", i, " of ", texts.size());
    return texts[i];
  };
  uint32_t count = r.count(20, bytes.size());
  d.ranks.resize(count);
  for (RankRecord &rec : d.ranks) {
    rec.peer.host_id = text(r.u32());
    rec.interfaces = text(r.u32());
    rec.local_rank = static_cast<int32_t>(r.u32());
    if (rec.local_rank < -1)
      throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank directory has local rank ", rec.local_rank);
    rec.peer.pid = static_cast<int64_t>(r.uint(8));
  }
  return d;
}

}  // namespace

RankDirectory decode_rank_directory(const std::vector<uint8_t> &bytes) {
  Reader r(bytes, "rank directory");
  const uint8_t *m = r.take(4);
  RankDirectory d;
  if (std::memcmp(m, kCompactMagic, 4) == 0) {
    d = decode_compact_directory(r, bytes);
  } else if (std::memcmp(m, kDirectoryMagic, 4) == 0) {
    d = decode_whole_directory(r, bytes);
  } else {
    throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank directory does not start with PSD2 or PSD1",
                " (written by another pstate version, or not by pstate?)");
  }
  if (!r.at_end()) throw_error(PSTATE_ERR_MISMATCH, "rendezvous: rank directory has trailing bytes");
  return d;
}

std::vector<int> world_barrier_peers(int rank, int world_size) {
  std::vector<int> out;
  for (int d = 1; d < world_size; d *= 2)
    for (int p : {(rank + d) % world_size, ((rank - d) % world_size + world_size) % world_size})
      if (p != rank && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  return out;
}

std::string rank_record_key(int rank) { return "pstate/peer/" + std::to_string(rank); }

namespace {

std::string first_peers_key(int rank) { return "pstate/first/" + std::to_string(rank); }

std::vector<uint8_t> encode_first(const std::vector<int> &peers, const std::vector<Bytes> &records) {
  std::vector<uint8_t> out(kFirstMagic, kFirstMagic + 4);
  put_u32(out, static_cast<uint32_t>(peers.size()));
  for (int p : peers) {
    const Bytes &rec = records.at(static_cast<size_t>(p));
    put_u32(out, static_cast<uint32_t>(p));
    put_u32(out, static_cast<uint32_t>(rec.size()));
    out.insert(out.end(), rec.begin(), rec.end());
  }
  return out;
}

// The records "pstate/first/<rank>" carries, which must be exactly `expected`'s.
std::vector<std::pair<int, RankRecord>> decode_first(const Bytes &bytes, const std::vector<int> &expected) {
  Reader r(bytes, "first peers' records");
  r.magic(kFirstMagic);
  uint32_t count = r.count(8, bytes.size());
  if (count != expected.size())
    throw_error(PSTATE_ERR_MISMATCH, "rendezvous: ", count, " first peers' records, expected ", expected.size(),
                " (rank 0 runs another pstate version?)");
  std::vector<std::pair<int, RankRecord>> out;
  for (uint32_t i = 0; i < count; ++i) {
    int rank = static_cast<int>(r.u32());
    if (rank != expected[i])
      throw_error(PSTATE_ERR_MISMATCH, "rendezvous: first peers' record ", i, " is rank ", rank, "'s, expected rank ",
                  expected[i], "'s (rank 0 runs another pstate version?)");
    uint32_t len = r.u32();
    const uint8_t *p = r.take(len);
    out.emplace_back(rank, decode_rank_record(std::vector<uint8_t>(p, p + len)));
  }
  if (!r.at_end()) throw_error(PSTATE_ERR_MISMATCH, "rendezvous: first peers' records have trailing bytes");
  return out;
}

}  // namespace

Rendezvous exchange_rank_records(Store &store, int rank, int world_size, const std::vector<uint8_t> &record,
                                 const std::string &job_id, Deadline deadline, const FirstPeers &first_peers) {
  store.set(rank_record_key(rank), record, deadline);
  // The barrier also refuses an old job's keys (a reused file:// directory): more arrivals than ranks.
  store_barrier(store, "pstate/init", world_size, deadline);
  Rendezvous out;
  const std::vector<int> mine = first_peers(rank, world_size);
  if (rank != 0) {
    out.directory = store.get("pstate/peers", deadline);
    if (!mine.empty()) out.first = decode_first(store.get(first_peers_key(rank), deadline), mine);
    return out;
  }
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) keys.push_back(rank_record_key(r));
  std::vector<Bytes> raw = store.get_many(keys, deadline);  // pipelined: a few round trips, not N
  std::vector<RankRecord> records(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    try {
      records[static_cast<size_t>(r)] = decode_rank_record(raw[static_cast<size_t>(r)]);
    } catch (const Error &e) {
      throw_error(PSTATE_ERR_MISMATCH, "init: rank ", r, "'s record on the store (", rank_record_key(r),
                  "): ", e.what(), ": is every rank running the same pstate version?");
    }
  }
  out.directory = encode_compact_directory(job_id, records);
  if (out.directory.size() > kStoreMaxValueBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init: the rank directory of ", world_size, " ranks takes ",
                out.directory.size(), " bytes, over the store's value limit of ", kStoreMaxValueBytes, " bytes");
  store.set("pstate/peers", out.directory, deadline);
  std::vector<std::pair<std::string, Bytes>> firsts;
  for (int r = 1; r < world_size; ++r) {
    std::vector<int> peers = first_peers(r, world_size);
    if (!peers.empty()) firsts.emplace_back(first_peers_key(r), encode_first(peers, raw));
  }
  store.set_many(firsts, deadline);  // pipelined too
  for (int p : mine) out.first.emplace_back(p, records.at(static_cast<size_t>(p)));
  return out;
}

}  // namespace pstate
