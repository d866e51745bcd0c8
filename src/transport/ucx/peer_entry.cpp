// peer_entry.cpp — PeerEntry to bytes and back, for publishing through the rendezvous store.
//
// Layout (little-endian): "PSU1", u32 address length, address bytes, i64 pid, u32 host id
// length, host id bytes. The magic catches a value written by something else (or another
// pstate version); every length is checked against what is left, so a corrupt value is a clear
// PSTATE_ERR_MISMATCH, never an out-of-bounds read.
#include "transport/ucx/ucx_worker.hpp"

#include "common/le_bytes.hpp"

#include <cstring>

namespace pstate {

namespace {

constexpr char kMagic[4] = {'P', 'S', 'U', '1'};
constexpr size_t kMaxField = 1u << 20;  // 1 MiB: far above any worker address or host id

// The length of the next field, refused when implausible.
size_t field_length(LeReader &r) {
  uint64_t n = r.uint(4);
  if (n > kMaxField) throw_error(PSTATE_ERR_MISMATCH, "ucx: peer entry field of ", n, " bytes is implausible");
  return static_cast<size_t>(n);
}

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
  LeReader r(bytes, "ucx: peer entry");
  if (std::memcmp(r.take(4), kMagic, 4) != 0)
    throw_error(PSTATE_ERR_MISMATCH, "ucx: peer entry does not start with PSU1 (written by another pstate version?)");
  PeerEntry e;
  size_t n = field_length(r);
  const uint8_t *a = r.take(n);
  e.address.assign(a, a + n);
  e.pid = static_cast<int64_t>(r.uint(8));
  n = field_length(r);
  const uint8_t *h = r.take(n);
  e.host_id.assign(reinterpret_cast<const char *>(h), n);
  if (!r.at_end()) throw_error(PSTATE_ERR_MISMATCH, "ucx: peer entry has trailing bytes");
  return e;
}

}  // namespace pstate
