// crypto.hpp — HMAC-SHA256, SHA-256, a constant-time compare and random bytes for the store, from
// OpenSSL's libcrypto (crypto.cpp), so the job token never crosses the wire and no primitive is
// written here.
//
// The TCP store authenticates clients by challenge-response: the server sends a random nonce, the
// client answers HMAC-SHA256(token, nonces || rank || world), the server answers with its own
// MAC so the client knows it reached its job's store too. The file store keeps HMAC(token, label)
// instead of the token. SHA-256 alone only names things (long file-store keys, `pstate run`'s job
// id); it protects nothing. What the token does and does not protect: README, "Security".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pstate::crypto {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::span<const uint8_t> data);
Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

// Compares in time that depends only on the lengths, not on where the bytes differ (CRYPTO_memcmp).
bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

// Lower-case hex of bytes ("ba7816bf...").
std::string to_hex(std::span<const uint8_t> bytes);

// Fills buf with bytes from OpenSSL's CSPRNG (RAND_bytes); throws pstate::Error on failure.
void fill_random(void *buf, size_t n);

inline std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

}  // namespace pstate::crypto
