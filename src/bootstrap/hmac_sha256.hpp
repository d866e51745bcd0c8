// hmac_sha256.hpp — SHA-256 and HMAC-SHA256, so the job token never crosses the wire.
//
// The TCP store authenticates clients by challenge-response: the server sends a random nonce, the
// client answers HMAC-SHA256(token, nonces || rank || world), the server answers with its own
// MAC so the client knows it reached its job's store too. The file store keeps HMAC(token, label)
// instead of the token. This is the whole of the cryptography pstate needs, so it lives here in a
// small file rather than pulling in a TLS library (FIPS 180-4 for SHA-256, RFC 2104 for HMAC).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pstate::crypto {

using Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> data);
  void update(std::string_view text) {
    update(std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
  }
  Digest finish();

 private:
  void compress(const uint8_t *block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t block_used_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest sha256(std::span<const uint8_t> data);
Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

// Compares in time that depends only on the lengths, not on where the bytes differ.
bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

// Lower-case hex of bytes ("ba7816bf...").
std::string to_hex(std::span<const uint8_t> bytes);

// Fills buf with bytes from the kernel's CSPRNG (getrandom); throws pstate::Error on failure.
void fill_random(void *buf, size_t n);

inline std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

}  // namespace pstate::crypto
