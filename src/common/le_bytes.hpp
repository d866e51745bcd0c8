// le_bytes.hpp — little-endian integers in the byte strings pstate keeps on its store (rank
// records, peer entries, pstate_shrink's answers), and a bounds-checked reader for them.
//
// The reader throws PSTATE_ERR_MISMATCH "<what> of N bytes is truncated at byte P (written by
// another pstate version?)" instead of reading past the end: a value on the store may come from
// another version of pstate, or from something that is not pstate at all.
#pragma once

#include "common/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pstate {

inline void put_u32(std::vector<uint8_t> &out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put_i64(std::vector<uint8_t> &out, int64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

class LeReader {
 public:
  // what: names the value in errors ("ucx: peer entry").
  LeReader(const std::vector<uint8_t> &b, std::string what) : b_(b), what_(std::move(what)) {}
  const uint8_t *take(size_t n) {
    if (n > b_.size() - pos_)
      throw_error(PSTATE_ERR_MISMATCH, what_, " of ", b_.size(), " bytes is truncated at byte ", pos_,
                  " (written by another pstate version?)");
    const uint8_t *p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  // An unsigned integer of `bytes` bytes (1..8), little-endian.
  uint64_t uint(size_t bytes) {
    const uint8_t *p = take(bytes);
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
    return v;
  }
  uint32_t u32() { return static_cast<uint32_t>(uint(4)); }
  std::vector<uint8_t> rest() { return {b_.begin() + static_cast<std::ptrdiff_t>(pos_), b_.end()}; }
  bool at_end() const { return pos_ == b_.size(); }
  const std::string &what() const { return what_; }

 private:
  const std::vector<uint8_t> &b_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace pstate
