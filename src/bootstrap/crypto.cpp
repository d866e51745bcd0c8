// crypto.cpp — the store's primitives, each one call into OpenSSL's libcrypto (no cryptography of
// our own): HMAC-SHA256 (HMAC), SHA-256 (EVP_Digest), the constant-time compare (CRYPTO_memcmp)
// and random bytes (RAND_bytes, the library's CSPRNG seeded from the kernel). A failure of
// libcrypto is PSTATE_ERR_INTERNAL with OpenSSL's own error text.
#include "bootstrap/crypto.hpp"

#include "common/error.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>

namespace pstate::crypto {
namespace {

[[noreturn]] void throw_openssl(const char *what) {
  char text[256] = "no error queued";
  unsigned long code = ERR_get_error();
  if (code != 0) ERR_error_string_n(code, text, sizeof text);
  ERR_clear_error();
  throw_error(PSTATE_ERR_INTERNAL, "libcrypto ", what, " failed: ", text);
}

}  // namespace

Digest sha256(std::span<const uint8_t> data) {
  Digest out{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 || len != out.size()) {
    throw_openssl("EVP_Digest(SHA-256)");
  }
  return out;
}

Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  if (key.size() > static_cast<size_t>(INT_MAX))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "HMAC key of ", key.size(), " bytes is too long");
  Digest out{};
  unsigned int len = 0;
  // OpenSSL reads the key through a non-null pointer even when it is empty (an empty job token
  // never reaches here, but the function takes any key).
  static const uint8_t kNoKey = 0;
  const uint8_t *k = key.empty() ? &kNoKey : key.data();
  if (HMAC(EVP_sha256(), k, static_cast<int>(key.size()), message.data(), message.size(), out.data(), &len) ==
          nullptr ||
      len != out.size()) {
    throw_openssl("HMAC(SHA-256)");
  }
  return out;
}

bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

void fill_random(void *buf, size_t n) {
  auto *p = static_cast<unsigned char *>(buf);
  while (n > 0) {
    int chunk = n > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(n);
    if (RAND_bytes(p, chunk) != 1) throw_openssl("RAND_bytes");
    p += chunk;
    n -= static_cast<size_t>(chunk);
  }
}

}  // namespace pstate::crypto
