// peer_entry.cpp — PeerEntry to bytes and back, for publishing through the rendezvous store.
//
// Layout (little-endian): "PSU1", u32 address length, address bytes, i64 pid, u32 host id
// length, host id bytes. The magic catches a value written by something else (or another
// pstate version); every length is checked against what is left, so a corrupt value is a clear
// PSTATE_ERR_MISMATCH, never an out-of-bounds read.
#include "transport/ucx/ucx_worker.hpp"

#include <cstring>

namespace pstate {

namespace {

constexpr char kMagic[4] = {'P', 'S', 'U', '1'};
constexpr size_t kMaxField = 1u << 20;  // 1 MiB: far above any worker address or host id

void put_u32(std::vector<uint8_t> &out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_i64(std::vector<uint8_t> &out, int64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t> &b) : b_(b) {}
  const uint8_t *take(size_t n) {
    if (n > b_.size() - pos_)
      throw_error(PSTATE_ERR_MISMATCH, "ucx: peer entry of ", b_.size(), " bytes is truncated at byte ", pos_,
                  " (written by another pstate version?)");
    const uint8_t *p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t uint(size_t bytes) {
    const uint8_t *p = take(bytes);
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
    return v;
  }
  size_t length() {
    uint64_t n = uint(4);
    if (n > kMaxField) throw_error(PSTATE_ERR_MISMATCH, "ucx: peer entry field of ", n, " bytes is implausible");
    return static_cast<size_t>(n);
  }
  bool at_end() const { return pos_ == b_.size(); }

 private:
  const std::vector<uint8_t> &b_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_peer_entry(const PeerEntry &entry) {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  put_u32(out, static_cast<uint32_t>(entry.address.size()));
  out.insert(out.end(), entry.address.begin(), entry.address.end());
  put_i64(out, entry.pid);
  put_u32(out, static_cast<uint32_t>(entry.host_id.size()));
  out.insert(out.end(), entry.host_id.begin(), entry.host_id.end());
  return out;
}

PeerEntry decode_peer_entry(const std::vector<uint8_t> &bytes) {
  Reader r(bytes);
  if (std::memcmp(r.take(4), kMagic, 4) != 0)
    throw_error(PSTATE_ERR_MISMATCH, "ucx: peer entry does not start with PSU1 (written by another pstate version?)");
  PeerEntry e;
  size_t n = r.length();
  const uint8_t *a = r.take(n);
  e.address.assign(a, a + n);
  e.pid = static_cast<int64_t>(r.uint(8));
  n = r.length();
  const uint8_t *h = r.take(n);
  e.host_id.assign(reinterpret_cast<const char *>(h), n);
  if (!r.at_end()) throw_error(PSTATE_ERR_MISMATCH, "ucx: peer entry has trailing bytes");
  return e;
}

}  // namespace pstate
